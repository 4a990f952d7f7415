"""One run's whole job: read its bags, replay, write summary.json, divergence.mcap, report.html.

:func:`replay_run` is a pure function of (run, config, output directory) returning plain
data, so it runs unchanged in this process, a process pool or a dask cluster. Its
outputs are written to a temporary directory beside the output directory (in it, when it
exists) and moved in when all three are complete; a run that fails leaves none of them behind (a previous
run's are removed, so nothing stale reads as this run's result).
"""

from __future__ import annotations

import gc
import json
import math
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from sim_real_bridge.errors import SimRealBridgeError
from sim_real_bridge.evaluation.summary import REALTIME_FACTOR_MIN
from sim_real_bridge.offline.divergence_mcap import write_divergence_mcap
from sim_real_bridge.offline.replay.analyses import analyses, nothing_analysable
from sim_real_bridge.offline.replay.runs import RunResult, RunSpec, read_labels
from sim_real_bridge.offline.replay.streams import RunStreams, _read_ticks, _read_truth, read_run_streams
from sim_real_bridge.offline.replay_config import ReplayConfig
from sim_real_bridge.offline.replay_engine import JointStream

SUMMARY_NAME = "summary.json"
MCAP_NAME = "divergence.mcap"
REPORT_NAME = "report.html"
#: A run's outputs, in the order they are moved into place (summary.json last).
OUTPUT_NAMES = (MCAP_NAME, REPORT_NAME, SUMMARY_NAME)


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
    """One run's whole job (see the module docstring).

    A pure function of (bags, config, out_dir): no global state (the collector is off
    while it runs and restored), no clock in the results (the CPU time it took is
    reported beside them). Never raises for a bad bag: the result carries the error
    message, which names the bag and topic.
    """
    with batch_collection():
        return _replay_run(run, config, Path(out_dir), on_progress)


def _replay_run(run: RunSpec, config: ReplayConfig, out: Path,
                on_progress: Callable[[float], None] | None) -> RunResult:
    started = time.process_time()
    staging: Path | None = None
    existed = out.is_dir()
    try:
        summary, data_s, row, write = _analyse(run, config, started, on_progress)
        staging = _staging_dir(out)
        write(staging)
        _publish(staging, out)
        staging = None
        return RunResult(run.name, run.bags, True, None, str(out), summary, row, time.process_time() - started, data_s)
    except Exception as error:  # noqa: BLE001 - one bad run must not stop the others
        message = str(error) if isinstance(error, SimRealBridgeError) else (
            f"bag(s) {', '.join(run.bags)}: cannot write {out}: {error.strerror or error}"
            if isinstance(error, OSError) else f"bag(s) {', '.join(run.bags)}: {type(error).__name__}: {error}")
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        remove_outputs(out, remove_empty_dir=not existed)
        return RunResult(run.name, run.bags, False, message, str(out), cpu_s=time.process_time() - started)


def _analyse(run: RunSpec, config: ReplayConfig, started: float, on_progress: Callable[[float], None] | None
             ) -> tuple[dict[str, Any], float, dict[str, Any], Callable[[Path], None]]:
    """(summary, seconds of data, roll-up row, a writer of the three outputs into a directory)."""
    from sim_real_bridge.evaluation.summary import build_summary
    from sim_real_bridge.offline.bag_io import open_bags
    from sim_real_bridge.offline.replay_engine import replay_columns
    from sim_real_bridge.offline.report import write_report

    metadata: dict[Path, Any] = {}  # each metadata.yaml parsed once, for labels and the open
    labels = read_labels(run.bags, metadata)
    with open_bags(list(run.bags), metadata_cache=metadata) as bags:
        start_ns = stop_ns = None
        if config.window_s is not None:
            first, _ = bags.time_range_ns()
            start_ns = first + int(config.window_s[0] * 1e9)
            stop_ns = first + int(config.window_s[1] * 1e9)
        read = read_run_streams(bags, config, start_ns, stop_ns)
        labels_text = ", ".join(bags.labels)
    truth_collector, scenario = _read_truth(config, read.extra)
    outcome = replay_columns(
        read.streams, config.engine_config(), config.intake, config.tick_period_s, 1.0 / config.summary_rate_hz,
        dict(read.wanted), on_progress, tick_times_ns=_read_ticks(config, read.extra), joint_map=dict(config.joint_map),
    )
    engine = outcome.engine
    if outcome.output.joints is None or not len(outcome.output.joints):
        raise nothing_analysable(labels_text, read, outcome)
    warnings = read.warnings + list(engine.warnings) + _problem_warnings(outcome.problems)
    run_summary = engine.run_summary()
    data_s = max(0.0, (int(outcome.last_recv_ns) - int(engine.t0_ns())) * 1e-9)
    duration_s = max(data_s, truth_collector.elapsed_s) if truth_collector is not None else data_s
    truth = truth_collector.truth(duration_s) if truth_collector is not None else None
    ran = analyses(config, read, outcome, truth is not None)
    extra: dict[str, Any] = {"bags": list(run.bags), "analyses": ran, "segments": run_summary["segments"],
                             "counts": run_summary["counts"]}
    if truth_collector is not None:
        extra["injections_without_effect"] = truth_collector.without_effect(duration_s)
    extra.update({"problems_by_topic": outcome.problems, "warnings": warnings, **({"labels": labels} if labels else {}),
                  "load": _with_robot_speeds(run_summary.get("load", {}), read)})
    run_summary["load"] = extra["load"]
    summary = build_summary(run_summary, scenario=scenario or run.name, duration_s=duration_s, truth=truth,
                            extra=extra)
    cpu_s = time.process_time() - started
    data = _report_data(run.name, summary, outcome, run_summary, labels, warnings, data_s / cpu_s if cpu_s > 0 else None)
    summary = _finite(summary)

    def write(directory: Path) -> None:
        write_divergence_mcap(directory / MCAP_NAME, outcome.output, config.pose_frame_id,
                              1.0 / config.markers_rate_hz if config.markers_rate_hz else None)
        write_report(directory / REPORT_NAME, data)
        write_json(directory / SUMMARY_NAME, summary)

    return summary, data_s, data.rollup_row(), write


def _problem_warnings(problems: Mapping[str, Mapping[str, int]]) -> list[str]:
    return [f"{count} message(s) on {topic} refused or flagged: {reason}"
            for topic, counts in problems.items() for reason, count in counts.items() if reason != "non_finite"]


# --------------------------------------------------------------------------- outputs
def _staging_dir(out: Path) -> Path:
    """A new temporary directory beside ``out``, or in it when it exists (same filesystem:
    moves are renames), with the permissions of any directory made here (mkdtemp's are
    private)."""
    where = out if out.is_dir() else out.parent
    where.mkdir(parents=True, exist_ok=True)
    while True:
        staging = where / f".{out.name}.partial-{secrets.token_hex(4)}"
        try:
            staging.mkdir()
            return staging
        except FileExistsError:
            continue


def _publish(staging: Path, out: Path) -> None:
    """Move a complete set of outputs into ``out``: the directory itself when ``out`` does
    not exist yet, else file by file (each an atomic replace, summary.json last)."""
    if not out.exists():
        try:
            staging.rename(out)
            return
        except OSError:
            pass  # created meanwhile (another job): move the files
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUT_NAMES:
        os.replace(staging / name, out / name)
    staging.rmdir()


def remove_outputs(out: Path, remove_empty_dir: bool = True) -> None:
    """Remove a previous run's outputs from ``out`` (and, with ``remove_empty_dir``,
    ``out`` itself when that empties it)."""
    if not out.is_dir():
        return
    for name in OUTPUT_NAMES:
        try:
            (out / name).unlink()
        except FileNotFoundError:
            pass
        except OSError:
            continue
    if remove_empty_dir:
        try:
            out.rmdir()
        except OSError:
            pass  # other files in it: theirs to keep


def write_json(path: Path, data: Any) -> None:
    """Write strict JSON through a temporary file beside ``path`` (replaced at once)."""
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
        load=run_summary.get("load"), sim_success=labels.get("sim_success"), real_success=labels.get("real_success"), policy=labels.get("policy"),
        analyses=list(summary.get("analyses", [])), segments=list(summary.get("segments", [])),
    )


def _with_robot_speeds(load: Mapping[str, Any], read: RunStreams) -> dict[str, Any]:
    """The load block with each side's realtime factor as its recording shows it (stamp
    time over log time of its joint_states: a simulated robot stamps with its own clock,
    so one that fell behind real time advances its stamps more slowly); a side slower
    than REALTIME_FACTOR_MIN marks the run degraded."""
    factors = {}
    for side in ("sim", "real"):
        parts = [s for s in read.streams if isinstance(s, JointStream) and s.side == side and len(s.recv_ns) > 1]
        stamp_ns = np.concatenate([s.stamp_ns for s in parts]) if parts else np.zeros(0)
        recv_ns = np.concatenate([s.recv_ns for s in parts]) if parts else np.zeros(0)
        ok = stamp_ns > 0
        if ok.sum() > 1 and np.ptp(recv_ns[ok]) > 0:
            factors[side] = round(float(np.ptp(stamp_ns[ok]) / np.ptp(recv_ns[ok])), 3)
    slow = {side: f for side, f in factors.items() if f < REALTIME_FACTOR_MIN}
    return {**load, "realtime_factor_by_side": factors, "slow_sides": slow,
            "degraded": bool(load.get("degraded")) or bool(slow)}


__all__ = ["MCAP_NAME", "OUTPUT_NAMES", "REPORT_NAME", "SUMMARY_NAME", "batch_collection", "remove_outputs",
           "replay_run", "write_json"]
