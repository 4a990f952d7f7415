"""Feed decoded bag columns to the engine exactly as the live monitor feeds messages.

The live node receives each message, checks it (:mod:`sim_real_bridge.core.intake`)
and feeds it with ``recv_ns`` = its clock, and ticks the engine every
``tick_period_s``. A bag's log time is the recorder's receive time, so replay merges
every stream's columns by log time, feeds each row through the same intake with
``recv_ns`` = log time, and ticks on the grid :func:`~sim_real_bridge.core.engine.analyze_streams`
uses. :func:`replay_columns` is a pure function of its inputs (no bag, no clock, no
files), so a per-bag job built on it can run under any executor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim_real_bridge.core import intake, validation
from sim_real_bridge.core.engine import ColumnStream, DivergenceEngine, EngineConfig, SummaryRecord, TickOutput
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
    """Mirrored commands of one side: (start_ns, joint names, points) per row."""

    side: str
    recv_ns: np.ndarray
    start_ns: Sequence[int]
    joint_names: Sequence[Sequence[str]]
    points: Sequence[Sequence[Any]]


Stream = JointStream | WrenchStream | PoseStream | CommandStream


@dataclass
class ReplayOutcome:
    """What a replay produced: the engine after finish, outputs with their tick times."""

    engine: DivergenceEngine
    ticks: list[tuple[int, TickOutput]] = field(default_factory=list)
    summaries: list[SummaryRecord] = field(default_factory=list)
    problems: dict[str, dict[str, int]] = field(default_factory=dict)
    message_count: int = 0
    first_recv_ns: int | None = None
    last_recv_ns: int | None = None


def _frame(frame_ids: Sequence[str] | str, i: int) -> str:
    return frame_ids if isinstance(frame_ids, str) else frame_ids[i]



# Intake reasons as small codes while checking whole columns (object arrays of strings
# are slow to build and compare); _REASONS turns codes back into the reasons.
_OK, _FUTURE, _ZERO, _FRAME, _BAD_VALUE = range(5)
_REASONS = np.array(["", validation.FUTURE_STAMP, validation.ZERO_STAMP, validation.FRAME_MISMATCH,
                     validation.NON_FINITE], dtype=object)


def _stamp_codes(config: intake.IntakeConfig, stamp_ns: np.ndarray, recv_ns: np.ndarray) -> np.ndarray:
    """Per row: the code of the reason :func:`validation.check_stamp` gives (_OK for none)."""
    out = np.zeros(stamp_ns.shape, dtype=np.uint8)
    if config.stamps_on_node_clock:
        out[stamp_ns - recv_ns > config.limits.max_future_s * 1e9] = _FUTURE
    out[stamp_ns <= 0] = _ZERO
    return out


def _stamp_reasons(config: intake.IntakeConfig, stamp_ns: np.ndarray, recv_ns: np.ndarray) -> np.ndarray:
    """Per row: the reason :func:`validation.check_stamp` gives ('' for none), for whole columns."""
    return _REASONS[_stamp_codes(config, stamp_ns, recv_ns)]


def _suspect_rows(rows: np.ndarray) -> np.ndarray:
    """Indices of the rows of a 2-D array whose sum is not finite: every row holding a
    NaN or an infinity (they propagate through a sum), and rows whose sum overflows."""
    return np.flatnonzero(~np.isfinite(np.einsum("ij->i", rows)))


def _non_finite(*columns: np.ndarray) -> np.ndarray:
    """Per row: any value non-finite (as :func:`validation.has_non_finite`)."""
    n = columns[0].shape[0]
    bad = np.zeros(n, dtype=bool)
    for col in columns:
        if col.size:
            rows = col.reshape(n, -1)
            # Exact check on the few suspect rows only (a per-row reduction over all rows costs far more).
            suspect = _suspect_rows(rows)
            if suspect.size:
                bad[suspect] |= ~np.isfinite(rows[suspect]).all(axis=1)
    return bad


def _joint_non_finite(values: np.ndarray, splits: tuple[int, int]) -> np.ndarray:
    """Per row of joint_states values [q, qd, effort] (split at ``splits``): any non-finite
    value, all-NaN velocity and effort arrays ignored (as :func:`intake.feed_joint_state`)."""
    flagged = np.zeros(values.shape[0], dtype=bool)
    suspect = _suspect_rows(values)
    if suspect.size:
        position, velocity, effort = np.split(values[suspect], splits, axis=1)
        flagged[suspect] = _non_finite(position, _sent(velocity), _sent(effort))
    return flagged


def _sent(column: np.ndarray) -> np.ndarray:
    """The column with all-NaN rows (arrays the robot did not publish) made finite,
    as :func:`intake.feed_joint_state` ignores them."""
    if not column.size:
        return column
    rows = column.reshape(column.shape[0], -1)
    absent = np.isnan(rows).all(axis=1)
    if not absent.any():
        return column
    out = rows.copy()
    out[absent] = 0.0
    return out


def _frame_mismatch(frame_ids: Sequence[str] | str, expected: str, n: int) -> np.ndarray | None:
    """Per row: whether the frame differs from the expected one (None: no row does)."""
    if not expected:
        return None
    if isinstance(frame_ids, str):
        return np.ones(n, dtype=bool) if frame_ids != expected else None
    return np.asarray(frame_ids, dtype=object) != expected


def _frame_reasons(frame_ids: Sequence[str] | str, expected: str, n: int) -> np.ndarray:
    out = np.full(n, "", dtype=object)
    mismatch = _frame_mismatch(frame_ids, expected, n)
    if mismatch is not None:
        out[mismatch] = validation.FRAME_MISMATCH
    return out


def _static_joint_reason(names: tuple[str, ...], width: int, limits: validation.InputLimits) -> str | None:
    """The reasons of check_joint_state that do not depend on earlier messages."""
    empty = np.zeros(width)
    reason = validation.check_joint_state(names, empty, empty, empty, None, limits)
    return reason


class _Ticker:
    """Ticks the engine as the live node does and keeps what replay reports: the
    non-empty outputs, a summary every ``summary_ns`` and the outputs of ``finish``."""

    def __init__(self, engine: DivergenceEngine, outcome: ReplayOutcome, summary_ns: int | None) -> None:
        self.engine = engine
        self.outcome = outcome
        self.summary_ns = summary_ns
        self._next_summary: int | None = None

    def _keep(self, now_ns: int, out: TickOutput) -> None:
        if out.joints or out.poses or out.contacts or out.events:
            self.outcome.ticks.append((now_ns, out))

    def tick(self, now_ns: int) -> None:
        self._keep(now_ns, self.engine.tick(now_ns))
        if self.summary_ns is not None:
            if self._next_summary is None:
                self._next_summary = now_ns + self.summary_ns
            elif now_ns >= self._next_summary:
                self.outcome.summaries.append(self.engine.summary(now_ns))
                self._next_summary += self.summary_ns

    def finish(self, at_ns: int) -> None:
        self._keep(at_ns, self.engine.finish())


def replay_columns(
    streams: Sequence[Stream],
    engine_config: EngineConfig | None = None,
    intake_config: intake.IntakeConfig | None = None,
    tick_period_s: float = 0.02,
    summary_period_s: float | None = 1.0,
    topic_names: Mapping[tuple[str, str], str] | None = None,
    on_progress: Callable[[float], None] | None = None,
    vectorized_intake: bool = True,
    column_ingest: bool = True,
    tick_times_ns: np.ndarray | None = None,
) -> ReplayOutcome:
    """Feed columns to a fresh engine in log-time order, ticking like the live node.

    Rows of all streams are merged by ``recv_ns`` (ties keep the order of ``streams``,
    then row order), each goes through the live node's intake checks, and the engine
    is ticked at every multiple of ``tick_period_s`` reached before a row (the
    schedule of :func:`~sim_real_bridge.core.engine.analyze_streams`), then up to the
    last row, then finished.

    Args:
        streams: the decoded streams of both sides.
        engine_config: engine parameters.
        intake_config: input checks (the node's parameters).
        tick_period_s: tick period on the log-time clock.
        summary_period_s: period of SummaryRecords (None: none).
        topic_names: (side, stream) -> topic, for the problem counts.
        on_progress: called with the fraction of rows fed, now and then.
        vectorized_intake: run the intake checks on whole columns first (same
            reasons, same order of engine calls as :mod:`~sim_real_bridge.core.intake`
            per message, which ``False`` uses; the tests hold the two equal).
        column_ingest: feed the engine whole columns between ticks
            (:meth:`DivergenceEngine.plan_columns`: same engine state at every tick,
            far cheaper) when the streams allow it; else, or with ``False``, row by row.
        tick_times_ns: the live monitor's own tick times (recorded with its inputs by
            ``demo --record``): tick exactly then, each after the rows received up to
            it, instead of every ``tick_period_s``; the replay then repeats the live
            analysis even where it depended on when the monitor ticked (stalls, load).

    Returns:
        ReplayOutcome with non-empty tick outputs as (tick ns, output).

    Raises:
        ConfigError: bad tick period or stream shapes.
    """
    period_ns = int(round(tick_period_s * 1e9))
    if period_ns <= 0:
        raise ConfigError(f"tick_period_s must be > 0, got {tick_period_s}")
    summary_ns = int(round(summary_period_s * 1e9)) if summary_period_s else None
    engine = DivergenceEngine(engine_config)
    config = intake_config or intake.IntakeConfig()
    outcome = ReplayOutcome(engine)
    topic_names = topic_names or {}

    recv_parts = []
    for k, stream in enumerate(streams):
        recv = np.asarray(stream.recv_ns, dtype=np.int64)
        if recv.ndim != 1:
            raise ConfigError(f"stream {k} ({stream.side}): recv_ns must be 1-D")
        recv_parts.append(recv)
    if not recv_parts:
        engine.finish()
        return outcome
    sizes = [r.size for r in recv_parts]
    recv_all = np.concatenate(recv_parts)
    # Stable: ties keep the concatenation's order, i.e. stream order, then row order.
    order = np.argsort(recv_all, kind="stable")
    ticks = None if tick_times_ns is None else np.sort(np.asarray(tick_times_ns, dtype=np.int64))
    if column_ingest and vectorized_intake:
        planned = _plan_columns(engine, config, streams, order, sizes, topic_names)
        if planned is not None:
            _replay_planned(engine, outcome, planned, recv_all[order], period_ns, summary_ns, on_progress, ticks)
            return outcome
    ids = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    rows = np.concatenate([np.arange(n, dtype=np.int64) for n in sizes])
    tick_list = None if ticks is None else ticks.tolist()
    k_tick = 0
    recv_list = recv_all[order].tolist()
    id_list = ids[order].tolist()
    row_list = rows[order].tolist()
    total = len(recv_list)
    outcome.message_count = total

    # Per stream: a function feeding row i at recv_ns (bound once, called per row).
    feeders: list[Callable[[int, int], intake.Problem | None]] = []
    stream_keys: list[tuple[str, str]] = []
    for stream in streams:
        if isinstance(stream, JointStream) and vectorized_intake:
            feed = _vector_joint_feeder(engine, config, stream)
            stream_keys.append((stream.side, "joint_states"))
        elif isinstance(stream, WrenchStream) and vectorized_intake:
            feed = _vector_wrench_feeder(engine, config, stream)
            stream_keys.append((stream.side, "wrench"))
        elif isinstance(stream, PoseStream) and vectorized_intake:
            feed = _vector_pose_feeder(engine, config, stream)
            stream_keys.append((stream.side, stream.stream))
        elif isinstance(stream, JointStream):
            stamps = stream.stamp_ns.tolist()
            names = tuple(stream.names)
            pos, vel, eff = stream.position, stream.velocity, stream.effort

            def feed(i: int, recv: int, s=stream, stamps=stamps, names=names, pos=pos, vel=vel, eff=eff):
                return intake.feed_joint_state(engine, config, s.side, stamps[i], recv, names, pos[i], vel[i], eff[i])

            stream_keys.append((stream.side, "joint_states"))
        elif isinstance(stream, WrenchStream):
            stamps = stream.stamp_ns.tolist()

            def feed(i: int, recv: int, s=stream, stamps=stamps):
                return intake.feed_wrench(engine, config, s.side, stamps[i], recv, _frame(s.frame_ids, i),
                                          s.force_n[i], s.torque_nm[i])

            stream_keys.append((stream.side, "wrench"))
        elif isinstance(stream, PoseStream):
            stamps = stream.stamp_ns.tolist()

            def feed(i: int, recv: int, s=stream, stamps=stamps):
                return intake.feed_pose(engine, config, s.side, s.stream, stamps[i], recv, _frame(s.frame_ids, i),
                                        s.position_m[i], s.orientation_wxyz[i])

            stream_keys.append((stream.side, stream.stream))
        elif isinstance(stream, CommandStream):
            def feed(i: int, recv: int, s=stream):
                intake.feed_command(engine, s.side, int(s.start_ns[i]), recv, s.joint_names[i], s.points[i])
                return None

            stream_keys.append((stream.side, "joint_trajectory"))
        else:
            raise ConfigError(f"unknown stream type {type(stream).__name__}")
        feeders.append(feed)

    stamp_lists = [None if isinstance(st, CommandStream) else np.asarray(st.stamp_ns).tolist() for st in streams]
    last_stamps: list[int | None] = [None] * len(streams)
    next_tick: int | None = None
    ticker = _Ticker(engine, outcome, summary_ns)
    tick = ticker.tick

    step = max(1, total // 100)
    for n in range(total):
        recv = recv_list[n]
        if tick_list is not None:
            while k_tick < len(tick_list) and tick_list[k_tick] < recv:
                tick(tick_list[k_tick])
                k_tick += 1
        else:
            if next_tick is None:
                next_tick = (recv // period_ns + 1) * period_ns
            while recv >= next_tick:
                tick(next_tick)
                next_tick += period_ns
        k = id_list[n]
        row = row_list[n]
        problem = feeders[k](row, recv)
        stamps_k = stamp_lists[k]
        if stamps_k is not None and (problem is None or not problem.refused):
            # As the node's StreamStatus: an accepted stamp older than the previous one is flagged.
            stamp = stamps_k[row]
            previous = last_stamps[k]
            last_stamps[k] = stamp
            if problem is None and previous is not None and stamp < previous:
                problem = intake.Problem(validation.STAMP_BACKWARDS, False, f"stamp {stamp} ns")
        if problem is not None:
            key = stream_keys[k]
            _count(outcome.problems, topic_names.get(key, f"{key[0]}/{key[1]}"), (problem.reason,))
        if on_progress is not None and n % step == 0:
            on_progress(n / total)
    outcome.first_recv_ns = recv_list[0]
    outcome.last_recv_ns = recv_list[-1]
    while next_tick is not None and next_tick <= recv_list[-1]:
        tick(next_tick)
        next_tick += period_ns
    if tick_list is not None:
        for t in tick_list[k_tick:]:
            tick(t)
    ticker.finish(recv_list[-1])
    if on_progress is not None:
        on_progress(1.0)
    return outcome


# --------------------------------------------------------------------------- column ingest
def _count(problems: dict[str, dict[str, int]], topic: str, reasons: Sequence[str]) -> None:
    for reason in reasons:
        counts = problems.setdefault(topic, {})
        counts[reason] = counts.get(reason, 0) + 1


def _refuse(codes: np.ndarray, rows: np.ndarray | None, code: int) -> None:
    """Give ``code`` to the ``rows`` (bool mask) not refused for an earlier check."""
    if rows is not None and rows.any():
        codes[rows & (codes == _OK)] = code


def _side_by_side(blocks: Sequence[Any]) -> np.ndarray:
    """``np.concatenate(blocks, axis=1)`` of (n, k) blocks, copied column by column
    (concatenate copies narrow rows one at a time: twice the time on 7-joint states)."""
    arrays = [np.asarray(b) for b in blocks]
    out = np.empty((arrays[0].shape[0], sum(a.shape[1] for a in arrays)), dtype=np.result_type(*arrays))
    col = 0
    for a in arrays:
        out.T[col:col + a.shape[1]] = a.T
        col += a.shape[1]
    return out


def _plan_columns(engine: DivergenceEngine, config: intake.IntakeConfig, streams: Sequence[Stream],
                  order: np.ndarray, sizes: list[int],
                  topic_names: Mapping[tuple[str, str], str]) -> dict[str, dict[str, int]] | None:
    """Intake checks on whole columns, then :meth:`DivergenceEngine.plan_columns`.

    Returns the problem counts per topic (as the row-by-row loop counts them), or None
    when the streams need the row-by-row path (the engine is then untouched).
    """
    seq_all = np.empty(order.size, dtype=np.int64)
    seq_all[order] = np.arange(order.size)
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    columns: list[ColumnStream] = []
    problems: dict[str, dict[str, int]] = {}
    known: tuple[str, ...] | None = None
    for k, stream in enumerate(streams):
        seq = seq_all[offsets[k]:offsets[k + 1]]
        recv = np.asarray(stream.recv_ns, dtype=np.int64)
        if isinstance(stream, CommandStream):
            commands = list(zip(stream.start_ns, stream.joint_names, stream.points))
            columns.append(ColumnStream(stream.side, "command", recv, seq, recv, commands=commands))
            continue
        stamps = np.asarray(stream.stamp_ns, dtype=np.int64)
        codes = _stamp_codes(config, stamps, recv)
        if isinstance(stream, JointStream):
            name, topic_key = "joint_states", (stream.side, "joint_states")
            names = tuple(stream.names)
            reason = _static_joint_reason(names, len(names), config.limits)
            if reason is None and recv.size:
                empty = np.zeros(len(names))
                reason = validation.check_joint_state(names, empty, empty, empty, known, config.limits)
                known = known or tuple(str(x) for x in names)
            if reason:
                return None  # every row refused: rare, left to the row-by-row path
            values = _side_by_side([stream.position, stream.velocity, stream.effort])
            width_q, width_qd = np.shape(stream.position)[1], np.shape(stream.velocity)[1]
            flagged = _joint_non_finite(values, (width_q, width_q + width_qd))
        elif isinstance(stream, WrenchStream):
            name, topic_key = "wrench", (stream.side, "wrench")
            _refuse(codes, _frame_mismatch(stream.frame_ids, config.expected_frames.get("wrench", ""), recv.size),
                    _FRAME)
            values = _side_by_side([stream.force_n, stream.torque_nm])
            flagged = _non_finite(values)
        elif isinstance(stream, PoseStream):
            name, topic_key = stream.stream, (stream.side, stream.stream)
            _refuse(codes, _frame_mismatch(stream.frame_ids, config.expected_frames.get("pose", ""), recv.size),
                    _FRAME)
            values = np.concatenate([stream.position_m, stream.orientation_wxyz], axis=1)
            _refuse(codes, _non_finite(values), _BAD_VALUE)
            flagged = np.zeros(recv.size, dtype=bool)
        else:
            raise ConfigError(f"unknown stream type {type(stream).__name__}")
        if values.shape[0] != recv.size:
            raise ConfigError(f"stream {k} ({stream.side} {name}): {values.shape[0]} rows for {recv.size} times")
        topic = topic_names.get(topic_key, f"{topic_key[0]}/{topic_key[1]}")
        refused_rows = np.flatnonzero(codes)
        refused_reasons = _REASONS[codes[refused_rows]].tolist()
        accepted_rows = None
        if refused_rows.size:
            accepted_rows = np.flatnonzero(codes == _OK)
            recv, seq, stamps, values, flagged = (a[accepted_rows] for a in (recv, seq, stamps, values, flagged))
        problem = flagged.copy()
        problem[1:] |= stamps[1:] < stamps[:-1]
        problem_rows = np.flatnonzero(problem)
        if problem_rows.size or refused_rows.size:
            # Problems in row order, as the row-by-row loop counts them.
            found = sorted([
                *zip((problem_rows if accepted_rows is None else accepted_rows[problem_rows]).tolist(),
                     np.where(flagged[problem_rows], validation.NON_FINITE, validation.STAMP_BACKWARDS).tolist(),
                     strict=True),
                *zip(refused_rows.tolist(), refused_reasons, strict=True)])
            _count(problems, topic, [reason for _, reason in found])
        columns.append(ColumnStream(
            stream.side, name, recv, seq, stamps, values,
            names=tuple(stream.names) if isinstance(stream, JointStream) else (),
            refused_recv_ns=np.asarray(stream.recv_ns, dtype=np.int64)[refused_rows], refused_reasons=refused_reasons,
        ))
    if not engine.plan_columns(columns):
        return None
    return problems


def _replay_planned(engine: DivergenceEngine, outcome: ReplayOutcome, problems: dict[str, dict[str, int]],
                    recv_sorted: np.ndarray, period_ns: int, summary_ns: int | None,
                    on_progress: Callable[[float], None] | None, ticks: np.ndarray | None = None) -> None:
    """The tick loop of :func:`replay_columns` over planned columns: before each tick,
    every row received before it (recorded ticks: up to it); after the last tick, the
    rest; then finish."""
    outcome.problems = problems
    outcome.message_count = int(recv_sorted.size)
    first, last = int(recv_sorted[0]), int(recv_sorted[-1])
    outcome.first_recv_ns, outcome.last_recv_ns = first, last
    ticker = _Ticker(engine, outcome, summary_ns)
    if ticks is None:
        start = (first // period_ns + 1) * period_ns
        schedule = range(start, last + 1, period_ns) if start <= last else range(0)
        fed_through = 0  # rows received before the tick
    else:
        schedule = ticks.tolist()
        fed_through = 1  # rows received up to the tick
    if len(schedule):
        engine.plan_ticks(np.asarray(schedule, dtype=np.int64), inclusive=bool(fed_through))
    total = max(1, len(schedule))
    step = max(1, total // 100)
    n = 0
    for tick_ns in schedule:
        engine.feed_columns(tick_ns + fed_through)
        ticker.tick(tick_ns)
        n += 1
        if on_progress is not None and n % step == 0:
            on_progress(min(1.0, n / total))
    engine.feed_columns(None)
    ticker.finish(last)
    if on_progress is not None:
        on_progress(1.0)


# --------------------------------------------------------------------------- vectorized intake
# Each builder checks whole columns once, then returns feed(i, recv) that does per row
# exactly what core.intake does per message: the same refusals (engine.on_rejected),
# the same flags, the same engine call with the same values.
_NON_FINITE = intake.Problem(validation.NON_FINITE, False)


def _vector_joint_feeder(engine: DivergenceEngine, config: intake.IntakeConfig,
                         stream: JointStream) -> Callable[[int, int], intake.Problem | None]:
    names = tuple(stream.names)
    stamps = np.asarray(stream.stamp_ns, dtype=np.int64)
    stamp_reason = _stamp_reasons(config, stamps, np.asarray(stream.recv_ns, dtype=np.int64)).tolist()
    stamps_list = stamps.tolist()
    static = _static_joint_reason(names, len(names), config.limits)
    flagged = _non_finite(stream.position, _sent(stream.velocity), _sent(stream.effort)).tolist()
    pos, vel, eff = stream.position, stream.velocity, stream.effort
    side = stream.side
    dynamic: dict[tuple[str, ...], str | None] = {}

    def names_reason() -> str | None:
        # Depends on the joint set fixed by earlier messages (the engine's); constant after that.
        known = engine.joint_names
        if known is None and not config.limits.expected_joints:
            return None
        key = tuple(known or ())
        if key not in dynamic:
            empty = np.zeros(len(names))
            dynamic[key] = validation.check_joint_state(names, empty, empty, empty, known, config.limits)
        return dynamic[key]

    def feed(i: int, recv: int) -> intake.Problem | None:
        reason = stamp_reason[i]
        if reason:
            engine.on_rejected(side, "joint_states", reason)
            return intake.Problem(reason, True, f"stamp {stamps_list[i]} ns")
        reason = static or names_reason()
        if reason:
            engine.on_rejected(side, "joint_states", reason)
            return intake.Problem(reason, True)
        engine.on_joint_state(side, stamps_list[i], recv, names, pos[i], vel[i], eff[i])
        return _NON_FINITE if flagged[i] else None

    return feed


def _vector_wrench_feeder(engine: DivergenceEngine, config: intake.IntakeConfig,
                          stream: WrenchStream) -> Callable[[int, int], intake.Problem | None]:
    stamps = np.asarray(stream.stamp_ns, dtype=np.int64)
    n = stamps.size
    stamp_reason = _stamp_reasons(config, stamps, np.asarray(stream.recv_ns, dtype=np.int64)).tolist()
    frame_reason = _frame_reasons(stream.frame_ids, config.expected_frames.get("wrench", ""), n).tolist()
    stamps_list = stamps.tolist()
    flagged = _non_finite(stream.force_n, stream.torque_nm).tolist()
    force, torque, side = stream.force_n, stream.torque_nm, stream.side

    def feed(i: int, recv: int) -> intake.Problem | None:
        reason = stamp_reason[i]
        if reason:
            engine.on_rejected(side, "wrench", reason)
            return intake.Problem(reason, True, f"stamp {stamps_list[i]} ns")
        if frame_reason[i]:
            engine.on_rejected(side, "wrench", validation.FRAME_MISMATCH)
            return intake.Problem(validation.FRAME_MISMATCH, True, f"frame {_frame(stream.frame_ids, i)!r}")
        engine.on_wrench(side, stamps_list[i], recv, force[i], torque[i])
        return _NON_FINITE if flagged[i] else None

    return feed


def _vector_pose_feeder(engine: DivergenceEngine, config: intake.IntakeConfig,
                        stream: PoseStream) -> Callable[[int, int], intake.Problem | None]:
    stamps = np.asarray(stream.stamp_ns, dtype=np.int64)
    n = stamps.size
    stamp_reason = _stamp_reasons(config, stamps, np.asarray(stream.recv_ns, dtype=np.int64)).tolist()
    frame_reason = _frame_reasons(stream.frame_ids, config.expected_frames.get("pose", ""), n).tolist()
    stamps_list = stamps.tolist()
    bad = _non_finite(stream.position_m, stream.orientation_wxyz).tolist()
    position, orientation, side, name = stream.position_m, stream.orientation_wxyz, stream.side, stream.stream
    which = "ee" if name == "ee_pose" else "object"

    def feed(i: int, recv: int) -> intake.Problem | None:
        reason = stamp_reason[i]
        if reason:
            engine.on_rejected(side, name, reason)
            return intake.Problem(reason, True, f"stamp {stamps_list[i]} ns")
        if frame_reason[i]:
            engine.on_rejected(side, name, validation.FRAME_MISMATCH)
            return intake.Problem(validation.FRAME_MISMATCH, True, f"frame {_frame(stream.frame_ids, i)!r}")
        if bad[i]:
            engine.on_rejected(side, name, validation.NON_FINITE)
            return intake.Problem(validation.NON_FINITE, True)
        engine.on_pose(side, which, stamps_list[i], recv, position[i], orientation[i])
        return None

    return feed
