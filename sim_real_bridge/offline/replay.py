"""`sim-real-bridge replay`: recorded bags through the live monitor's analysis, offline.

Runs. Each command-line input becomes one or more runs:

- a bag (a ``.mcap`` or ``.db3`` file, or a directory with ``metadata.yaml``, split
  files included) is one run;
- a directory without ``metadata.yaml`` holds several bags (subdirectories with
  ``metadata.yaml``, ``.mcap`` and ``.db3`` files), each one run;
- pairing: a bag that has only one side's ``joint_states`` topic is merged into one
  run with the one-sided bag of the other side whose log-time range overlaps it
  most (both sides in two bags); a one-sided bag with no partner fails, naming the
  missing topic.

Outputs. One run: ``OUT/summary.json`` (the demo's schema), ``OUT/divergence.mcap``
(the /divergence/* topics as the live node publishes them, message definitions
embedded) and ``OUT/report.html``. Several runs: those three files per run in
``OUT/<run name>/``, plus the roll-up ``OUT/report.html`` and ``OUT/summary.json``
(``{"runs": [...], "failures": [...], "predictivity": ...}``).

Labels. A run's success labels (for predictivity in the roll-up) come from a
``labels.yaml`` in a bag directory or ``<bag file stem>.labels.yaml`` beside a bag
file, with keys ``sim_success``, ``real_success`` (bool or rate in [0, 1]) and
optional ``policy``; or from ``custom_data`` of the bag's metadata.yaml with the same
keys. Truth for scoring comes from ``/reality/injections`` when the bag has it.

Errors. Each run is a job of its own: a missing topic, an unknown message type, a
corrupt or truncated bag or an empty window fails that run with a message naming
the bag and topic; the other runs complete, the roll-up lists the failures and the
exit code is 1.

Each per-run job (:func:`replay_run`) is a pure function of its inputs (bag paths,
config, output directory) returning plain data, so it runs unchanged in a process
pool (``--workers``) or under a distributed engine.
"""

from __future__ import annotations

import functools
import gc
import json
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from operator import is_
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim_real_bridge.errors import BagError, ConfigError, SimRealBridgeError
from sim_real_bridge.offline.divergence_mcap import DIVERGENCE_TOPICS, write_divergence_mcap
from sim_real_bridge.offline.replay_config import SIDES, ReplayConfig, load_replay_config

SUMMARY_NAME = "summary.json"
MCAP_NAME = "divergence.mcap"
REPORT_NAME = "report.html"
LABEL_KEYS = ("sim_success", "real_success", "policy")


@dataclass
class ReplayRequest:
    """What `sim-real-bridge replay` was asked to do."""

    inputs: list[Path]
    out_dir: Path
    workers: int = 1
    config_path: Path | None = None


@dataclass(frozen=True)
class RunSpec:
    """One run: its name and the bag paths it reads (one, or two for a split pair)."""

    name: str
    bags: tuple[str, ...]


@dataclass
class RunResult:
    """What one per-run job returns (plain data)."""

    name: str
    bags: tuple[str, ...]
    ok: bool
    error: str | None = None
    out_dir: str | None = None
    summary: dict[str, Any] | None = None
    rollup_row: dict[str, Any] | None = None
    cpu_s: float = 0.0
    data_s: float = 0.0


# --------------------------------------------------------------------------- discovery
def _bags_in(path: Path) -> list[Path]:
    """The bags one input names (see the module docstring)."""
    if not path.exists():
        raise BagError(f"bag {path} does not exist")
    if path.is_file() or (path / "metadata.yaml").is_file():
        return [path]
    found = sorted(
        p for p in path.iterdir()
        if (p.is_dir() and (p / "metadata.yaml").is_file()) or (p.is_file() and p.suffix in (".mcap", ".db3"))
    )
    if not found:
        raise BagError(f"bag {path}: directory has no metadata.yaml and no bag in it (.mcap, .db3 or bag directories)")
    return found


def _run_name(path: Path) -> str:
    return path.stem if path.is_file() else path.name


def _side_profile(path: Path, config: ReplayConfig) -> tuple[set[str], tuple[int, int] | None]:
    """Sides whose joint_states the bag holds, and its log-time range (None when empty)."""
    from sim_real_bridge.offline.bag_io import open_bags

    with open_bags(path) as bags:
        topics = bags.topics()
        sides = {s for s in SIDES if config.topics(s)["joint_states"] in topics}
        try:
            span = bags.time_range_ns()
        except BagError:
            span = None
    return sides, span


def discover_runs(inputs: Sequence[Path | str], config: ReplayConfig) -> tuple[list[RunSpec], list[RunResult]]:
    """Expand the inputs into runs, pairing one-sided bags (see the module docstring).

    Returns:
        (runs, failures): inputs that cannot be read or paired become failed results.
    """
    bags: list[Path] = []
    failures: list[RunResult] = []
    for raw in inputs:
        path = Path(raw)
        try:
            bags.extend(_bags_in(path))
        except BagError as error:
            failures.append(RunResult(_run_name(path), (str(path),), False, str(error)))
    profiles: dict[Path, tuple[set[str], tuple[int, int] | None]] = {}
    for bag in bags:
        try:
            profiles[bag] = _side_profile(bag, config)
        except SimRealBridgeError:
            profiles[bag] = ({"sim", "real"}, None)  # the job itself reports the error
    one_sided = {s: [b for b in bags if profiles[b][0] == {s}] for s in SIDES}
    paired: dict[Path, Path] = {}
    for sim_bag in one_sided["sim"]:
        best, best_overlap = None, 0
        for real_bag in one_sided["real"]:
            if real_bag in paired.values():
                continue
            a, b = profiles[sim_bag][1], profiles[real_bag][1]
            overlap = 0 if a is None or b is None else min(a[1], b[1]) - max(a[0], b[0])
            if overlap > best_overlap:
                best, best_overlap = real_bag, overlap
        if best is not None:
            paired[sim_bag] = best
    runs: list[RunSpec] = []
    used: set[Path] = set()
    for bag in bags:
        if bag in used:
            continue
        if bag in paired:
            partner = paired[bag]
            used.update((bag, partner))
            runs.append(RunSpec(f"{_run_name(bag)}+{_run_name(partner)}", (str(bag), str(partner))))
        elif bag in paired.values():
            continue
        else:
            used.add(bag)
            runs.append(RunSpec(_run_name(bag), (str(bag),)))
    names: dict[str, int] = {}
    unique = []
    for run in runs:
        count = names.get(run.name, 0)
        names[run.name] = count + 1
        unique.append(run if count == 0 else RunSpec(f"{run.name}_{count + 1}", run.bags))
    return unique, failures


def read_labels(bag_paths: Sequence[str], metadata_cache: dict[Path, Any] | None = None) -> dict[str, Any]:
    """Success labels of a run (labels.yaml beside the bag, or metadata custom_data).

    ``metadata_cache``: see :func:`~sim_real_bridge.offline.bag_io.load_metadata_yaml`
    (a job gives the same one to :func:`~sim_real_bridge.offline.bag_io.open_bags`).

    Raises:
        ConfigError: a labels file is not valid YAML or not a mapping.
    """
    from sim_real_bridge.offline.bag_io import load_metadata_yaml

    labels: dict[str, Any] = {}
    for raw in bag_paths:
        path = Path(raw)
        meta = path / "metadata.yaml" if path.is_dir() else None
        if meta is not None and meta.is_file():
            try:
                info = (load_metadata_yaml(meta, metadata_cache) or {}).get("rosbag2_bagfile_information", {})
            except yaml.YAMLError:
                info = {}
            custom = info.get("custom_data") or {}
            for key in LABEL_KEYS:
                if key in custom:
                    value = custom[key]
                    if key != "policy" and isinstance(value, str):
                        value = yaml.safe_load(value)
                    labels[key] = value
        label_file = path / "labels.yaml" if path.is_dir() else path.with_name(f"{path.stem}.labels.yaml")
        if label_file.is_file():
            try:
                data = yaml.safe_load(label_file.read_text())
            except yaml.YAMLError as error:
                raise ConfigError(f"labels {label_file}: not valid YAML: {error}") from None
            if not isinstance(data, dict):
                raise ConfigError(f"labels {label_file}: expected a mapping with sim_success, real_success")
            labels.update({k: data[k] for k in LABEL_KEYS if k in data})
    return labels


# --------------------------------------------------------------------------- reading
def _side_topics(bags: Any, config: ReplayConfig) -> list[str]:
    """The run-level topics replay reads besides the streams (truth, tick times) that the bag holds."""
    topics = bags.topics()
    return [t for t in (config.injections_topic, config.ticks_topic)
            if t and t in topics and topics[t].message_count > 0]


def _read_streams(bags: Any, config: ReplayConfig, start_ns: int | None, stop_ns: int | None,
                  warnings: list[str], extra: dict[str, list[tuple[int, Any]]] | None = None,
                  ) -> tuple[list[Any], dict[tuple[str, str], str]]:
    """Decode every configured stream into replay_engine streams, in one pass over the bags.

    ``extra`` (when given) receives the messages of the truth and tick-time topics
    the bag holds (:func:`_read_truth`, :func:`_read_ticks`), read in the same pass.
    """
    from sim_real_bridge.conversions import cdr
    from sim_real_bridge.conversions.robot_msgs import joint_trajectory_to_data
    from sim_real_bridge.offline.bag_io import INJECTION_ARRAY, TIME, injection_array_parser, time_parser
    from sim_real_bridge.sim.trajectory import JointTrajectoryData
    from sim_real_bridge.offline.replay_engine import CommandStream, JointStream, PoseStream, WrenchStream

    topics = bags.topics()
    labels = ", ".join(bags.labels)
    wanted: dict[tuple[str, str], str] = {}
    for side in SIDES:
        for stream, topic in config.topics(side).items():
            if not topic:
                continue
            required = stream in ("joint_states", "wrench")
            if topic not in topics:
                if required:
                    raise BagError(f"topic {topic} ({side} {stream}) not found in bag(s) {labels}; "
                                   f"available: {', '.join(sorted(topics)) or 'none'}")
                if stream == "joint_trajectory" and side == "real":
                    continue
                warnings.append(f"topic {topic} ({side} {stream}) not in bag(s) {labels}; analysed without it")
                continue
            if topics[topic].message_count == 0 and not required:
                warnings.append(f"topic {topic} ({side} {stream}) of bag(s) {labels} has no messages")
                continue
            wanted[(side, stream)] = topic
    column_topics = [t for (s, st), t in wanted.items() if st != "joint_trajectory"]
    command_topics = [t for (s, st), t in wanted.items() if st == "joint_trajectory" and s == "sim"]
    extra_topics = _side_topics(bags, config) if extra is not None else []
    # JointTrajectory bytes straight to their data: rosbags builds each point's objects.
    parse = functools.partial(cdr.joint_trajectory_data_from_cdr,
                              max_sequence_length=bags.typestore.max_sequence_length)
    parsers = {t: parse for t in command_topics if topics[t].msgtype == "trajectory_msgs/msg/JointTrajectory"}
    # Truth and tick times straight from their bytes too (rosbags' deserializer: a call and an object per part).
    direct = {INJECTION_ARRAY: injection_array_parser, TIME: time_parser}
    for topic in extra_topics:
        make = direct.get(topics[topic].msgtype)
        parser = make(bags.typestore) if make is not None else None
        if parser is not None:
            parsers[topic] = parser
    expected = {topic: _STREAM_TYPES[stream] for (_, stream), topic in wanted.items() if stream in _STREAM_TYPES}
    columns, messages = bags.read_all(column_topics, command_topics + extra_topics, start_ns, stop_ns, parsers,
                                      expected_types=expected)
    if extra is not None:
        extra.update({t: messages[t] for t in extra_topics})
    frames_needed = {k for k, v in config.intake.expected_frames.items() if v}
    streams: list[Any] = []
    for (side, stream), topic in wanted.items():
        if stream == "joint_trajectory":
            if side != "sim":
                continue
            recv = [log_ns for log_ns, _ in messages[topic]]
            streams.append(CommandStream(side, np.asarray(recv, dtype=np.int64)))
            continue
        col = columns[topic]
        kind = "wrench" if stream == "wrench" else "pose"
        frames: Any = getattr(col, "frame_id", "")
        if stream != "joint_states" and kind in frames_needed:
            frames = [m.header.frame_id for _, m in bags.iter_messages(topic, start_ns, stop_ns)]
        if stream in ("joint_states", "wrench"):
            warnings.extend(recording_warnings(topic, col.stamp_ns, col.recv_ns))
        if stream == "joint_states":
            streams.append(JointStream(side, col.recv_ns, col.stamp_ns, col.names, col.position, col.velocity,
                                       col.effort))
        elif stream == "wrench":
            streams.append(WrenchStream(side, col.recv_ns, col.stamp_ns, frames, col.force_n, col.torque_nm))
        else:
            streams.append(PoseStream(side, stream, col.recv_ns, col.stamp_ns, frames, col.position_m,
                                      col.orientation_wxyz))
    # Same stream order as the live node subscribes: per side, joint_states, wrench, poses, commands.
    rank = {"joint_states": 0, "wrench": 1, "ee_pose": 2, "object_pose": 3, "joint_trajectory": 4}

    def key(s: Any) -> tuple[int, int]:
        name = "joint_trajectory" if type(s).__name__ == "CommandStream" else (
            s.stream if hasattr(s, "stream") else "joint_states" if hasattr(s, "names") else "wrench")
        return SIDES.index(s.side), rank[name]

    streams.sort(key=key)
    return streams, wanted


#: The message type each stream must have (checked before anything is read).
_STREAM_TYPES = {"joint_states": "sensor_msgs/msg/JointState", "wrench": "geometry_msgs/msg/WrenchStamped",
                 "ee_pose": "geometry_msgs/msg/PoseStamped", "object_pose": "geometry_msgs/msg/PoseStamped",
                 "joint_trajectory": "trajectory_msgs/msg/JointTrajectory"}
#: Receive-time lag spread (p99 above the minimum) beyond which a recording is suspect.
LAG_WARNING_S = 0.1


def recording_warnings(topic: str, stamp_ns: np.ndarray, recv_ns: np.ndarray) -> list[str]:
    """Signs that the recorder fell behind: receive lag that swings, stamps missing.

    A bag whose log times lag the stamps by a varying amount, or that misses samples,
    holds another stream than the live monitor received, so replay cannot repeat it.
    """
    out: list[str] = []
    if len(stamp_ns) < 3:
        return out
    lag_s = (np.asarray(recv_ns) - np.asarray(stamp_ns)) * 1e-9
    spread = float(np.percentile(lag_s, 99) - lag_s.min())
    if spread > LAG_WARNING_S:
        out.append(f"{topic}: receive lag varies by {spread:.3f} s (p99 above min): the recorder fell behind")
    stamps = np.asarray(stamp_ns)
    steps = np.diff(stamps if np.all(stamps[1:] >= stamps[:-1]) else np.sort(stamps))
    steps = steps[steps > 0]
    if steps.size:
        period = float(np.median(steps))
        missing = int(np.sum(np.maximum(0, np.round(steps / period) - 1)))
        if missing > 0.01 * len(stamp_ns):
            out.append(f"{topic}: about {missing} samples missing from {len(stamp_ns)} (stamp gaps): "
                       "dropped by the recorder or never sent")
    return out


def _read_truth(config: ReplayConfig, extra: dict[str, list[tuple[int, Any]]]) -> Any:
    """(TruthCollector, scenario name) from the injections topic read by :func:`_read_streams`."""
    from sim_real_bridge.core.summary import TruthCollector

    topic = config.injections_topic
    if not topic or topic not in extra:
        return None, None
    collector = TruthCollector()
    scenario = None
    previous: list[Any] = []
    for _, msg in extra[topic]:
        injections = msg.injections
        if injections and len(injections) == len(previous) and all(map(is_, injections, previous)):
            # The very objects of the message before (the direct parser shares repeats):
            # adding them again would change nothing but the elapsed time.
            collector.elapsed_s = max(collector.elapsed_s, float(msg.elapsed_s))
        else:
            collector.add(msg.elapsed_s, injections)
        previous = injections
        scenario = str(msg.scenario) or scenario
    return collector, scenario


def _read_ticks(config: ReplayConfig, extra: dict[str, list[tuple[int, Any]]]) -> np.ndarray | None:
    """The live monitor's tick times, when the bag recorded them (``demo --record``)."""
    topic = config.ticks_topic
    if not topic or topic not in extra:
        return None
    times = np.array([log_ns for log_ns, _ in extra[topic]], dtype=np.int64)
    return times if times.size else None


# --------------------------------------------------------------------------- outputs
def _report_data(name: str, summary: dict[str, Any], outcome: Any, run_summary: dict[str, Any],
                 labels: dict[str, Any], warnings: list[str], realtime_factor: float | None) -> Any:
    from sim_real_bridge.offline.report_data import (
        CalibrationRow,
        ContactSeries,
        JointSeries,
        PoseSeries,
        RunReportData,
        TimingSeries,
    )

    engine, output = outcome.engine, outcome.output
    joints, contacts, poses = output.joints, output.contacts, output.poses
    joint_series = timing = contact = pose = None
    if joints is not None and len(joints):
        t = engine.to_seconds(joints.t_ns)
        joint_series = JointSeries(t, joints.position_residual_rad, joints.velocity_residual_rad_s,
                                   joints.effort_residual)
        timing = TimingSeries(t, joints.clock_offset_s, joints.latency_s, joints.clock_offset_std_s,
                              joints.latency_std_s)
    if contacts is not None and len(contacts):
        contact = ContactSeries(engine.to_seconds(contacts.t_ns), contacts.force_residual_norm_n,
                                contacts.torque_residual_norm_nm, contacts.sim_contact_phase == 1,
                                contacts.real_contact_phase == 1)
    if poses is not None and len(poses):
        pose = PoseSeries(engine.to_seconds(poses.t_ns), poses.ee_position_error_norm_m, poses.ee_orientation_error_rad)
    ledger_info = run_summary.get("ledger", {})
    ledger = {c: v["share_run"] for c, v in ledger_info.get("categories", {}).items()}
    if "unexplained_share_run" in ledger_info:
        ledger["unexplained"] = ledger_info["unexplained_share_run"]
    joint_rms = run_summary.get("residuals", {}).get("joints", {})
    latency = float(run_summary.get("timing", {}).get("latency_s") or 0.0)
    calibration = []
    for row in run_summary.get("calibration", []):
        before = joint_rms.get(row["joint"], {}).get("rms_rad")
        values = (latency, row["gain"], row["offset_rad"], before, row["residual_rms_rad"])
        if before is None or not all(math.isfinite(float(v)) for v in values):
            continue
        calibration.append(CalibrationRow(row["joint"], *values))
    events = [{**e, "end_s": None if e.get("open") else e["end_s"]} for e in summary["events"]]
    return RunReportData(
        name=name, duration_s=max(0.0, summary["duration_s"]), joint_names=list(engine.joint_names or ()),
        scenario=summary.get("scenario"), joints=joint_series, contact=contact, pose=pose, timing=timing,
        events=events, truth=summary.get("truth"), ledger=ledger, calibration=calibration,
        scores=summary.get("scores"), warnings=list(warnings), realtime_factor=realtime_factor,
        load=run_summary.get("load"),
        sim_success=labels.get("sim_success"), real_success=labels.get("real_success"), policy=labels.get("policy"),
    )


@contextmanager
def batch_collection() -> Iterator[None]:
    """Run a replay with the cycle collector off, then restore it.

    A replay allocates hundreds of thousands of objects that all live to its end (records,
    histories); the collector would traverse them again and again looking for cycles a
    replay does not make (a young-generation threshold of 10 000 still cost ~3% of the job).
    Its state is freed by reference counting when the job ends: the engine holds no
    reference cycle (a test keeps it so). The few cycles made meanwhile (a few hundred
    objects, in rosbags' YAML parsing) are collected once the collector is back on.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def replay_run(run: RunSpec, config: ReplayConfig, out_dir: Path | str,
               on_progress: Callable[[float], None] | None = None) -> RunResult:
    """One run's whole job: read its bags, replay, write summary.json, divergence.mcap, report.html.

    A pure function of (bags, config, out_dir): no global state (the collector's
    threshold is raised while it runs and restored), no clock in the results (the CPU
    time it took is reported beside them). Never raises for a bad bag: the result
    carries the error message, which names the bag and topic.
    """
    with batch_collection():
        return _replay_run(run, config, out_dir, on_progress)


def _replay_run(run: RunSpec, config: ReplayConfig, out_dir: Path | str,
                on_progress: Callable[[float], None] | None = None) -> RunResult:
    from sim_real_bridge.core.summary import build_summary
    from sim_real_bridge.offline.bag_io import open_bags
    from sim_real_bridge.offline.replay_engine import replay_columns
    from sim_real_bridge.offline.report import write_report

    started = time.process_time()
    out = Path(out_dir)
    try:
        warnings: list[str] = []
        metadata: dict[Path, Any] = {}  # each metadata.yaml parsed once, for labels and the open
        labels = read_labels(run.bags, metadata)
        with open_bags(list(run.bags), metadata_cache=metadata) as bags:
            start_ns = stop_ns = None
            if config.window_s is not None:
                first, _ = bags.time_range_ns()
                start_ns = first + int(config.window_s[0] * 1e9)
                stop_ns = first + int(config.window_s[1] * 1e9)
            extra: dict[str, list[tuple[int, Any]]] = {}
            streams, wanted = _read_streams(bags, config, start_ns, stop_ns, warnings, extra)
            truth_collector, scenario = _read_truth(config, extra)
            tick_times = _read_ticks(config, extra)
            labels_text = ", ".join(bags.labels)
        outcome = replay_columns(
            streams, config.engine_config(), config.intake, config.tick_period_s,
            1.0 / config.summary_rate_hz, {k: v for k, v in wanted.items()}, on_progress,
            tick_times_ns=tick_times,
        )
        engine = outcome.engine
        warnings.extend(engine.warnings)
        run_summary = engine.run_summary()
        if engine.analysis_count == 0 or not run_summary["residuals"]["joints"]:
            raise BagError(
                f"bag(s) {labels_text}: empty analysis window: topics {wanted[('sim', 'joint_states')]} and "
                f"{wanted[('real', 'joint_states')]} never overlap in time: no analysis time has both sides' joints"
            )
        t0 = engine.t0_ns()
        data_s = max(0.0, (int(outcome.last_recv_ns) - int(t0)) * 1e-9)
        duration_s = max(data_s, truth_collector.elapsed_s) if truth_collector is not None else data_s
        truth = truth_collector.truth(duration_s) if truth_collector is not None else None
        for topic, counts in outcome.problems.items():
            for reason, count in counts.items():
                if reason != "non_finite":
                    warnings.append(f"{count} message(s) on {topic} refused or flagged: {reason}")
        summary = build_summary(
            run_summary, scenario=scenario or run.name, duration_s=duration_s, truth=truth,
            extra={"bags": list(run.bags),
                   **({"injections_without_effect": truth_collector.without_effect(duration_s)}
                      if truth_collector is not None else {}), "problems_by_topic": outcome.problems, "warnings": warnings,
                   **({"labels": labels} if labels else {}), "load": run_summary.get("load", {})},
        )
        out.mkdir(parents=True, exist_ok=True)
        write_divergence_mcap(out / MCAP_NAME, outcome.output, config.pose_frame_id,
                              1.0 / config.markers_rate_hz if config.markers_rate_hz else None)
        cpu_s = time.process_time() - started
        rtf = data_s / cpu_s if cpu_s > 0 else None
        data = _report_data(run.name, summary, outcome, run_summary, labels, warnings, rtf)
        write_report(out / REPORT_NAME, data)
        summary = _finite(summary)
        _write_json(out / SUMMARY_NAME, summary)
        row = data.rollup_row()
        return RunResult(run.name, run.bags, True, None, str(out), summary, row, time.process_time() - started, data_s)
    except SimRealBridgeError as error:
        return RunResult(run.name, run.bags, False, str(error), str(out), cpu_s=time.process_time() - started)
    except Exception as error:  # noqa: BLE001 - one bad run must not stop the others
        return RunResult(run.name, run.bags, False,
                         f"bag(s) {', '.join(run.bags)}: {type(error).__name__}: {error}", str(out),
                         cpu_s=time.process_time() - started)


def _write_json(path: Path, data: Any) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(data, indent=2, default=_json_default, allow_nan=False))
    os.replace(partial, path)


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def _finite(data: Any) -> Any:
    """JSON cannot hold NaN: replace non-finite floats with None (numpy scalars become Python)."""
    if isinstance(data, (np.floating, np.integer, np.bool_)):
        data = data.item()
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


# --------------------------------------------------------------------------- many runs
class _Progress:
    """rich progress bars on a terminal, plain lines otherwise."""

    def __init__(self, runs: Sequence[RunSpec], stream: Any = None, extra: int = 0) -> None:
        self.stream = stream or sys.stderr
        self.rich = None
        self.total = len(runs) + extra
        self.done = 0
        if getattr(self.stream, "isatty", lambda: False)():
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.rich = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                                 TimeElapsedColumn(), console=Console(file=self.stream))
            self.overall = self.rich.add_task("all runs", total=self.total)
            self.tasks = {run.name: self.rich.add_task(f"  {run.name}", total=1.0) for run in runs}

    def __enter__(self) -> _Progress:
        if self.rich is not None:
            self.rich.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.rich is not None:
            self.rich.stop()

    def update(self, name: str, fraction: float) -> None:
        if self.rich is not None:
            self.rich.update(self.tasks[name], completed=fraction)

    def finished(self, result: RunResult) -> None:
        self.done += 1
        if result.ok:
            events = len(result.summary["events"]) if result.summary else 0
            line = f"replay [{self.done}/{self.total}] {result.name}: ok, {events} events, {result.data_s:.1f} s of data"
        else:
            line = f"replay [{self.done}/{self.total}] {result.name}: FAILED: {result.error}"
        if self.rich is not None:
            if result.name in self.tasks:
                self.rich.update(self.tasks[result.name], completed=1.0,
                                 description=f"  {result.name} {'ok' if result.ok else 'FAILED'}")
            self.rich.advance(self.overall)
            self.rich.console.print(line)
        else:
            print(line, file=self.stream, flush=True)


def run_jobs(runs: Sequence[RunSpec], config: ReplayConfig, out_dirs: Sequence[Path], workers: int = 1,
             progress: _Progress | None = None) -> list[RunResult]:
    """Run every per-run job, in this process (workers=1) or a process pool; results in run order."""
    results: dict[int, RunResult] = {}
    if workers <= 1 or len(runs) <= 1:
        for i, (run, out) in enumerate(zip(runs, out_dirs, strict=True)):
            callback = (lambda f, name=run.name: progress.update(name, f)) if progress is not None else None
            results[i] = replay_run(run, config, out, callback)
            if progress is not None:
                progress.finished(results[i])
    else:
        # forkserver: workers never fork this process, whose progress thread may hold locks.
        context = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(max_workers=min(workers, len(runs)), mp_context=context) as pool:
            futures = {pool.submit(replay_run, run, config, out): i
                       for i, (run, out) in enumerate(zip(runs, out_dirs, strict=True))}
            for future in as_completed(futures):
                i = futures[future]
                try:
                    results[i] = future.result()
                except Exception as error:  # noqa: BLE001 - a worker that died
                    results[i] = RunResult(runs[i].name, runs[i].bags, False,
                                           f"bag(s) {', '.join(runs[i].bags)}: worker failed: {error}")
                if progress is not None:
                    progress.finished(results[i])
    return [results[i] for i in range(len(runs))]


def _rollup(out_dir: Path, results: Sequence[RunResult], discovery_failures: Sequence[RunResult]) -> None:
    from sim_real_bridge.core.predictivity import episode_predictivity
    from sim_real_bridge.offline.report import write_rollup_report

    rows = []
    for result in results:
        if result.ok and result.rollup_row is not None:
            row = dict(result.rollup_row)
            row["report_href"] = f"{Path(result.out_dir).name}/{REPORT_NAME}"
            rows.append(row)
    failures = [{"name": r.name, "bags": list(r.bags), "error": r.error}
                for r in list(discovery_failures) + [r for r in results if not r.ok]]
    labelled = [{"sim_success": r["sim_success"], "real_success": r["real_success"],
                 **({"policy": r["policy"]} if r.get("policy") is not None else {})}
                for r in rows if r.get("sim_success") is not None and r.get("real_success") is not None]
    predictivity = None
    if len(labelled) >= 2:
        try:
            predictivity = episode_predictivity(labelled)
        except ConfigError as error:
            failures.append({"name": "predictivity", "bags": [], "error": str(error)})
    report_rows = list(rows) + [
        {"name": f["name"], "duration_s": 0.0, "warnings": [f"FAILED: {f['error']}"]} for f in failures
    ]
    if report_rows:
        write_rollup_report(out_dir / REPORT_NAME, report_rows, predictivity)
    listing = [{"name": r.name, "bags": list(r.bags), "ok": r.ok, "error": r.error,
                "summary": f"{Path(r.out_dir).name}/{SUMMARY_NAME}" if r.ok and r.out_dir else None,
                **({"row": r.rollup_row} if r.rollup_row else {})} for r in results]
    _write_json(out_dir / SUMMARY_NAME, _finite({"runs": listing, "failures": failures,
                                                  "predictivity": predictivity}))


def run_replay(request: ReplayRequest, stream: Any = None) -> int:
    """Replay every run of the request; returns 0 when all succeeded, 1 otherwise.

    Raises:
        ConfigError: the replay config is invalid (nothing is replayed then).
    """
    config = load_replay_config(request.config_path)
    out_dir = Path(request.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs, discovery_failures = discover_runs(request.inputs, config)
    single = len(runs) == 1 and not discovery_failures
    out_dirs = [out_dir] if single else [out_dir / run.name for run in runs]
    progress = _Progress(runs, stream, extra=len(discovery_failures))
    for failure in discovery_failures:
        progress.finished(failure)
    with progress:
        results = run_jobs(runs, config, out_dirs, request.workers, progress)
    if not single:
        _rollup(out_dir, results, discovery_failures)
    failed = [r for r in results if not r.ok] + list(discovery_failures)
    print(f"replay: {len(results) - len([r for r in results if not r.ok])} run(s) ok, {len(failed)} failed; "
          f"output in {out_dir}", file=progress.stream)
    return 1 if failed or not runs else 0


__all__ = [
    "ReplayRequest",
    "RunResult",
    "RunSpec",
    "discover_runs",
    "read_labels",
    "replay_run",
    "run_jobs",
    "run_replay",
    "write_divergence_mcap",
]
