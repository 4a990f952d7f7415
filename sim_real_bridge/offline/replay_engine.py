"""Recorded streams through the engine, as the live monitor would have analysed them.

A bag's log time is the recorder's receive time, so each stream's columns go to the
engine with ``recv_ns`` = log time, and the engine is run at the live node's tick
times: the ones the monitor recorded (``demo --record`` keeps them), or every
``tick_period_s`` of log time. :func:`replay_columns` is a pure function of its
inputs (no bag, no clock, no files), so a per-bag job built on it runs under any
executor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim_real_bridge.core import intake
from sim_real_bridge.core.engine import DivergenceEngine
from sim_real_bridge.core.config import EngineConfig
from sim_real_bridge.core.outputs import EngineOutput
from sim_real_bridge.errors import ConfigError


@dataclass(frozen=True)
class JointStream:
    """One side's joint_states as columns (N rows, J joints; NaN where a message had none)."""

    side: str
    recv_ns: np.ndarray
    stamp_ns: np.ndarray
    names: tuple[str, ...]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray


@dataclass(frozen=True)
class WrenchStream:
    """One side's wrench as columns; frame_ids: one per row, or one for all."""

    side: str
    recv_ns: np.ndarray
    stamp_ns: np.ndarray
    frame_ids: Sequence[str] | str
    force_n: np.ndarray
    torque_nm: np.ndarray


@dataclass(frozen=True)
class PoseStream:
    """One side's ee_pose or object_pose as columns (orientation wxyz)."""

    side: str
    stream: str
    recv_ns: np.ndarray
    stamp_ns: np.ndarray
    frame_ids: Sequence[str] | str
    position_m: np.ndarray
    orientation_wxyz: np.ndarray


@dataclass(frozen=True)
class CommandStream:
    """Mirrored commands of one side: their receive times (the first starts the run clock)."""

    side: str
    recv_ns: np.ndarray


Stream = JointStream | WrenchStream | PoseStream | CommandStream


@dataclass
class ReplayOutcome:
    """What a replay produced: the engine after finish and everything it output."""

    engine: DivergenceEngine
    output: EngineOutput = field(default_factory=EngineOutput)
    problems: dict[str, dict[str, int]] = field(default_factory=dict)
    message_count: int = 0
    first_recv_ns: int | None = None
    last_recv_ns: int | None = None


def _hand_over(engine: DivergenceEngine, stream: Stream) -> None:
    if isinstance(stream, JointStream):
        engine.add_joint_states(stream.side, stream.stamp_ns, stream.recv_ns, stream.names, stream.position,
                                stream.velocity, stream.effort)
    elif isinstance(stream, WrenchStream):
        engine.add_wrench(stream.side, stream.stamp_ns, stream.recv_ns, stream.force_n, stream.torque_nm,
                          stream.frame_ids)
    elif isinstance(stream, PoseStream):
        engine.add_pose(stream.side, stream.stream, stream.stamp_ns, stream.recv_ns, stream.position_m,
                        stream.orientation_wxyz, stream.frame_ids)
    elif isinstance(stream, CommandStream):
        if stream.side == "sim":  # only the sim side's copy starts the run clock
            for recv in np.asarray(stream.recv_ns).tolist():
                engine.add_command(recv)
    else:
        raise ConfigError(f"unknown stream type {type(stream).__name__}")


def _ticks_where_recorded(recv_ns: np.ndarray, period_ns: int, segment_gap_s: float) -> np.ndarray:
    """A tick every period_ns of log time, as the live node's timer, but none through a
    gap in the recording longer than segment_gap_s (one stray message an hour later must
    not cost an hour of ticks)."""
    gap_ns = int(segment_gap_s * 1e9)
    breaks = np.flatnonzero(np.diff(recv_ns) > gap_ns) + 1
    parts = [np.arange((int(segment[0]) // period_ns + 1) * period_ns, int(segment[-1]) + period_ns, period_ns,
                       dtype=np.int64) for segment in np.split(recv_ns, breaks)]
    return np.concatenate(parts)


def replay_columns(
    streams: Sequence[Stream],
    engine_config: EngineConfig | None = None,
    intake_config: intake.IntakeConfig | None = None,
    tick_period_s: float = 0.02,
    summary_period_s: float | None = 1.0,
    topic_names: Mapping[tuple[str, str], str] | None = None,
    on_progress: Callable[[float], None] | None = None,
    tick_times_ns: np.ndarray | None = None,
    joint_map: dict[str, str] | None = None,
) -> ReplayOutcome:
    """Run a fresh engine over recorded streams.

    Args:
        streams: the decoded streams of both sides (each in log-time order).
        engine_config: engine parameters.
        intake_config: input checks (the node's parameters).
        tick_period_s: tick period on the log-time clock when no tick times were recorded.
        summary_period_s: period of SummaryRecords (None: none).
        topic_names: (side, stream) -> topic, for the problem counts.
        on_progress: called with the fraction of the analysis done, now and then.
        tick_times_ns: the live monitor's own tick times, when recorded.
        joint_map: explicit joint pairs (sim name -> real name).

    Raises:
        ConfigError: a bad tick period or stream.
    """
    period_ns = int(round(tick_period_s * 1e9))
    if period_ns <= 0:
        raise ConfigError(f"tick_period_s must be > 0, got {tick_period_s}")
    engine = DivergenceEngine(engine_config, intake_config, joint_map)
    if summary_period_s:
        engine.summary_period_ns = int(round(summary_period_s * 1e9))
    outcome = ReplayOutcome(engine)
    recv = [np.asarray(s.recv_ns, dtype=np.int64) for s in streams if len(s.recv_ns)]
    if not recv:
        return outcome
    for stream in streams:
        _hand_over(engine, stream)
    first = int(min(r[0] for r in recv))
    last = int(max(r[-1] for r in recv))
    outcome.first_recv_ns, outcome.last_recv_ns = first, last
    outcome.message_count = int(sum(len(r) for r in recv))
    if tick_times_ns is not None and len(tick_times_ns):
        ticks = np.sort(np.asarray(tick_times_ns, dtype=np.int64))
    else:
        ticks = _ticks_where_recorded(np.sort(np.concatenate(recv)), period_ns, engine.config.segment_gap_s)
    outcome.output = engine.run(ticks, on_progress=on_progress)
    finished = engine.finish()
    outcome.output.events += finished.events
    names = dict(topic_names or {})
    for key, counts in engine.problems.items():
        side, stream = key.split("/", 1)
        outcome.problems[names.get((side, stream), key)] = dict(counts)
    return outcome
