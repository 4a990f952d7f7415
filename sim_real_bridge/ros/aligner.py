"""TimeAligner: a message_filters filter that samples N inputs at the same instants.

message_filters' synchronizers hand on sets of messages whose stamps are close.
TimeAligner instead reads every input at the times of one fixed grid (``rate_hz`` on
the receiving node's clock), by linear interpolation: the way the divergence monitor
aligns a simulated and a real robot. It is the monitor's aligner
(:mod:`sim_real_bridge.core`) behind the message_filters API:

- each input's stamps are mapped onto the receiver's clock by its own
  :class:`~sim_real_bridge.core.clock.ClockMap` (the offset and drift between the
  publisher's clock and ours, and clock resets);
- its samples are kept as time-sorted columns (:class:`~sim_real_bridge.core.buffers.StreamBuffer`);
- a grid time is emitted once :func:`~sim_real_bridge.core.schedule.ready_times` says
  it is due: every input has a sample at or after it, or the inputs that have not
  are stalled (silent for longer than ``horizon_s``);
- :func:`~sim_real_bridge.core.read_stage.sample` interpolates, never across samples
  further apart than ``max_gap_s``, and holds a stalled input's newest value for at
  most that long (NaN after).

Each emitted grid time calls the registered callbacks with ``(t_ns, values)``:
``values[i]`` is input i's row (a float array, NaN where unknown). See docs/ALIGNER.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim_real_bridge.core import validation
from sim_real_bridge.core.buffers import StreamBuffer
from sim_real_bridge.core.clock import ClockMap
from sim_real_bridge.core.config import EngineConfig
from sim_real_bridge.core.health import FeatureConfig, StreamHealth
from sim_real_bridge.core.read_stage import sample
from sim_real_bridge.core.schedule import ready_times
from sim_real_bridge.errors import AlignmentError, ConfigError
from sim_real_bridge.ros.diagnostics import InputProblems
from sim_real_bridge.ros.filters import message_filters

#: Turns one input message into (stamp_ns, values); raises MessageRefused for bad input.
Extractor = Callable[[Any], tuple[int, Sequence[float]]]

UNREADABLE = "unreadable"
NO_EXTRACTOR = "no_extractor"
_DEFAULTS = EngineConfig()
_CLOCK_HISTORY_KEPT = 256  # ClockMap rows kept: the filter reads only the current offset
_NO_TIME = np.iinfo(np.int64).min
_MAX_RATE_HZ = 1e6  # a grid step of 1 us; finer is a typo that would tick through billions of times


class MessageRefused(AlignmentError):
    """An input message the aligner cannot use; ``reason`` names why.

    Args:
        reason: a short code (the ``validation`` reasons, ``unreadable``, ``no_extractor``).
        detail: what exactly was wrong.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def stamp_ns(msg: Any) -> int:
    """``msg.header.stamp`` in integer nanoseconds."""
    stamp = msg.header.stamp
    return stamp.sec * 1_000_000_000 + stamp.nanosec


class JointPositions:
    """Extractor for sensor_msgs/JointState: the positions, in a fixed joint order.

    Args:
        names: joints to read, in this order (a message may carry more; one missing a
            name is refused). None: the first message's names, in its order.
    """

    def __init__(self, names: Sequence[str] | None = None) -> None:
        self.names = list(names) if names else None
        self._orders: dict[tuple[str, ...], list[int]] = {}

    def __call__(self, msg: Any) -> tuple[int, Sequence[float]]:
        names, positions = msg.name, msg.position
        if len(positions) != len(names):
            raise MessageRefused(validation.LENGTH_MISMATCH, f"{len(names)} names, {len(positions)} positions")
        if self.names is None:
            self.names = self._first_names(names)
        if names == self.names:
            return stamp_ns(msg), positions
        return stamp_ns(msg), [positions[i] for i in self._order(names)]

    @staticmethod
    def _first_names(names: Sequence[str]) -> list[str]:
        if not names:
            raise MessageRefused(validation.EMPTY, "no joint names")
        if len(set(names)) != len(names):
            raise MessageRefused(validation.DUPLICATE_NAMES, ", ".join(names))
        return list(names)

    def _order(self, names: Sequence[str]) -> list[int]:
        """Where each of self.names sits in a message naming ``names`` (cached per order)."""
        key = tuple(names)
        order = self._orders.get(key)
        if order is None:
            index = {name: i for i, name in enumerate(key)}
            missing = [name for name in self.names or () if name not in index]
            if missing:
                raise MessageRefused(validation.MISSING_JOINT, ", ".join(missing))
            order = [index[name] for name in self.names or ()]
            if len(self._orders) < 64:  # a driver uses one or two orders; never grow unbounded
                self._orders[key] = order
        return order


def wrench_values(msg: Any) -> tuple[int, Sequence[float]]:
    """Extractor for geometry_msgs/WrenchStamped: force (3) then torque (3)."""
    force, torque = msg.wrench.force, msg.wrench.torque
    return stamp_ns(msg), (force.x, force.y, force.z, torque.x, torque.y, torque.z)


def pose_values(msg: Any) -> tuple[int, Sequence[float]]:
    """Extractor for geometry_msgs/PoseStamped: position (3) then orientation w, x, y, z.

    The orientation is interpolated component-wise: normalise it if you need a unit
    quaternion (between samples a few ms apart it differs from slerp by far less than
    sensor noise).
    """
    position, orientation = msg.pose.position, msg.pose.orientation
    return stamp_ns(msg), (position.x, position.y, position.z,
                           orientation.w, orientation.x, orientation.y, orientation.z)


def extractor_for(msg: Any) -> Extractor:
    """The default extractor for a message's type (JointState, WrenchStamped, PoseStamped).

    Raises:
        MessageRefused: any other type (``no_extractor``): pass an extractor for it.
    """
    kind = type(msg).__name__
    if kind == "JointState":
        return JointPositions()
    if kind == "WrenchStamped":
        return wrench_values
    if kind == "PoseStamped":
        return pose_values
    raise MessageRefused(NO_EXTRACTOR, f"no default for {kind}: pass extractors=[...] to TimeAligner")


@dataclass(eq=False)
class _Input:
    """One input: its columns, its clock map, and the rows received since the last take-in."""

    name: str
    extract: Extractor | None
    clock: ClockMap | None  # None: stamps are on the receiver's clock already
    # Never fed: the filter keeps no burst history, so an input's patience is horizon_s.
    health: StreamHealth
    retired: bool = False
    width: int | None = None
    buffer: StreamBuffer | None = None
    stamps: list[int] = field(default_factory=list)
    recvs: list[int] = field(default_factory=list)
    rows: list[Sequence[float]] = field(default_factory=list)
    offset_ns: int | None = None  # stamp to receiver clock, as of the last take-in
    newest_ns: int = int(_NO_TIME)  # newest mapped time (estimated for staged rows)
    last_recv_ns: int = int(_NO_TIME)


class TimeAligner(message_filters.SimpleFilter):
    """Emits every input interpolated at the times of a fixed grid, as each becomes due.

    Args:
        fs: the input filters (Subscriber, Cache, any filter with registerCallback).
        rate_hz: grid rate; grid times are multiples of 1 / rate_hz on the receiver's clock.
        max_gap_s: never interpolate across samples further apart than this; a stalled
            input's newest value is held for at most this long.
        horizon_s: how long to wait for a late input before judging it stalled.
        extractors: per input, how to turn a message into (stamp_ns, values); None (or a
            None entry) picks by type: JointState positions, WrenchStamped, PoseStamped.
        clock: receive time in ns: a callable, or a node (its clock: use this with
            use_sim_time). Default: the system clock (ROS time without sim time).
        map_clocks: map each input's stamps onto the receiver's clock (publishers on
            other clocks). False: the stamps are on the receiver's clock already.
        batch_s: emit grid times in groups spanning this long (fewer, larger core calls:
            less CPU per message, up to batch_s more delay).
        names: input names for the counts of refused messages (default: topics).

    Raises:
        ConfigError: a parameter is out of range.
    """

    def __init__(self, fs: Sequence[Any], rate_hz: float, max_gap_s: float = _DEFAULTS.max_interp_gap_s,
                 horizon_s: float = _DEFAULTS.horizon_s, extractors: Sequence[Extractor | None] | None = None,
                 clock: Callable[[], int] | Any = None, map_clocks: bool = True, batch_s: float = 0.0,
                 names: Sequence[str] | None = None) -> None:
        super().__init__()
        for name, value in (("rate_hz", rate_hz), ("max_gap_s", max_gap_s), ("horizon_s", horizon_s)):
            if not (np.isfinite(value) and value > 0):
                raise ConfigError(f"TimeAligner {name} must be finite and > 0, got {value}")
        if rate_hz > _MAX_RATE_HZ:
            raise ConfigError(f"TimeAligner rate_hz must be <= {_MAX_RATE_HZ:g}, got {rate_hz}")
        if not (np.isfinite(batch_s) and batch_s >= 0):
            raise ConfigError(f"TimeAligner batch_s must be finite and >= 0, got {batch_s}")
        self.period_ns = int(round(1e9 / rate_hz))
        self._max_gap_ns = int(max_gap_s * 1e9)
        self._horizon_ns = int(horizon_s * 1e9)
        self._backlog_ns = max(int(_DEFAULTS.max_backlog_s * 1e9), 2 * self._horizon_ns)
        self._batch_ns = int(batch_s * 1e9)
        # On one clock, a stamp this far ahead of its receive time is wrong (mapped, it is a reset).
        self._max_future_ns = int(validation.InputLimits().max_future_s * 1e9)
        self._map_clocks = map_clocks
        self._extractors = extractors
        self._names = names
        if clock is None:
            self._now: Callable[[], int] = time.time_ns
        elif hasattr(clock, "get_clock"):
            node_clock = clock.get_clock()
            self._now = lambda: node_clock.now().nanoseconds
        else:
            self._now = clock
        self._lock = threading.RLock()
        #: refused input messages, by (input name, reason)
        self.problems = InputProblems()
        #: grid times dropped unanalysed because they fell more than the backlog behind
        self.skipped = 0
        self._inputs: list[_Input] = []
        self._next_ns: int | None = None
        self._due_ns = int(_NO_TIME)  # staged rows reaching this may complete a batch
        self._stall_check_ns = int(np.iinfo(np.int64).max)
        self._lagging: set[_Input] = set()
        self.connectInput(fs)

    def connectInput(self, fs: Sequence[Any]) -> None:
        """Take ``fs`` as the inputs (from now on; filters connected before are ignored)."""
        if self._extractors is not None and len(self._extractors) != len(fs):
            raise ConfigError(f"TimeAligner: {len(self._extractors)} extractors for {len(fs)} inputs")
        if self._names is not None and len(self._names) != len(fs):
            raise ConfigError(f"TimeAligner: {len(self._names)} names for {len(fs)} inputs")
        with self._lock:
            for old in self._inputs:
                old.retired = True
            self._inputs = []
            for i, f in enumerate(fs):
                name = self._names[i] if self._names else str(getattr(f, "topic", f"input{i}"))
                extract = self._extractors[i] if self._extractors else None
                clock = ClockMap(_DEFAULTS.offset_leak, int(_DEFAULTS.clock_reset_s * 1e9)) if self._map_clocks else None
                self._inputs.append(_Input(name, extract, clock, StreamHealth(FeatureConfig(), name)))
            self._next_ns = None
            self._due_ns = int(_NO_TIME)
            self._lagging = set(self._inputs)
        for inp, f in zip(self._inputs, fs):
            f.registerCallback(self._receive, inp)

    def add(self, msg: Any, index: int) -> None:
        """Feed a message to input ``index`` directly (what the input filters do)."""
        self._receive(msg, self._inputs[index])

    def emit_due(self, now_ns: int | None = None) -> None:
        """Emit whatever is due at now_ns (default: now); call from a timer so that
        stalls are noticed even when no input delivers anything."""
        with self._lock:
            self._emit_due(self._now() if now_ns is None else int(now_ns))

    @property
    def offsets_ns(self) -> list[int | None]:
        """Per input: what maps its stamps onto the receiver's clock (None before any message)."""
        return [inp.offset_ns for inp in self._inputs]

    @property
    def clock_resets(self) -> int:
        """Clock resets seen across the inputs (a stamp that jumped)."""
        return sum(inp.clock.resets for inp in self._inputs if inp.clock is not None)

    @property
    def next_time_ns(self) -> int | None:
        """The next grid time to be emitted (None before every input has delivered)."""
        return self._next_ns

    # ------------------------------------------------------------------ per message
    def _receive(self, msg: Any, inp: _Input) -> None:
        """Stage one message; emit once the next batch of grid times may be due."""
        with self._lock:
            if inp.retired:
                return
            recv = self._now()
            try:
                extract = inp.extract or self._choose_extractor(inp, msg)
                stamp, row = extract(msg)
                if inp.width != len(row):
                    self._check_width(inp, len(row))
                if stamp <= 0:
                    raise MessageRefused(validation.ZERO_STAMP, str(stamp))
                if not self._map_clocks and stamp - recv > self._max_future_ns:
                    raise MessageRefused(validation.FUTURE_STAMP, f"{(stamp - recv) * 1e-9:.3f} s ahead")
            except MessageRefused as refused:
                self._refuse(inp, refused.reason, refused.detail)
                return
            except (AttributeError, TypeError, ValueError, IndexError, KeyError) as error:
                self._refuse(inp, UNREADABLE, repr(error))
                return
            inp.stamps.append(stamp)
            inp.recvs.append(recv)
            inp.rows.append(row)
            if inp.offset_ns is None:
                inp.offset_ns = recv - stamp if self._map_clocks else 0
            if stamp + inp.offset_ns >= self._due_ns:
                self._lagging.discard(inp)
            if not self._lagging or recv >= self._stall_check_ns:
                self._emit_due(recv)

    def _choose_extractor(self, inp: _Input, msg: Any) -> Extractor:
        inp.extract = extractor_for(msg)
        return inp.extract

    @staticmethod
    def _check_width(inp: _Input, width: int) -> None:
        if inp.width is None:
            if not width:
                raise MessageRefused(validation.EMPTY, "no values")
            inp.width = width
        else:
            raise MessageRefused(validation.LENGTH_MISMATCH, f"{width} values, expected {inp.width}")

    def _refuse(self, inp: _Input, reason: str, detail: str) -> None:
        """Count a refused message; log the first of each (input, reason)."""
        if self.problems.record(inp.name, reason):
            import rclpy.logging  # only on the first refusal: the hot path stays import-free

            rclpy.logging.get_logger("time_aligner").warning(
                f"refusing messages on {inp.name} ({reason}): {detail} "
                "(counted in TimeAligner.problems; logged once)")

    # ------------------------------------------------------------------ per batch
    def _emit_due(self, now_ns: int) -> None:
        """Take in the staged rows, emit every grid time due at now_ns, re-arm the triggers."""
        self._take_in()
        buffers = [inp.buffer for inp in self._inputs]
        if self._next_ns is None:
            if any(buffer is None for buffer in buffers):
                self._lagging = {inp for inp in self._inputs if inp.buffer is None}
                return
            first = max(int(buffer.time_ns[0]) for buffer in buffers if buffer is not None)
            self._next_ns = -(-first // self.period_ns) * self.period_ns
        t_ns = self._due_times(now_ns)
        rows = []
        if len(t_ns):
            # Everything held was received by now: no decision time to read "as it stood".
            rows = [sample(buffer, t_ns, self._max_gap_ns, inp.width or 0)
                    for inp, buffer in zip(self._inputs, buffers)]
            self._next_ns = int(t_ns[-1]) + self.period_ns
            for buffer in buffers:
                if buffer is not None:
                    buffer.trim(self._next_ns - self._max_gap_ns - self.period_ns)
        self._rearm(now_ns)
        for k, t in enumerate(t_ns.tolist()):
            self.signalMessage(t, [values[k] for values in rows])

    def _take_in(self) -> None:
        """Map each input's staged rows onto the receiver's clock and add them to its columns."""
        for inp in self._inputs:
            if not inp.stamps:
                continue
            stamps = np.array(inp.stamps, dtype=np.int64)
            recvs = np.maximum.accumulate(np.maximum(np.array(inp.recvs, dtype=np.int64), inp.last_recv_ns))
            values, keep = self._columns(inp)
            inp.stamps, inp.recvs, inp.rows = [], [], []
            stamps, recvs = stamps[keep], recvs[keep]
            if not len(stamps):
                continue
            if inp.clock is not None:
                mapped, _ = inp.clock.map(np.zeros(len(stamps), dtype=np.int16), stamps, recvs)
                inp.clock.trim(_CLOCK_HISTORY_KEPT)
                inp.offset_ns = inp.clock.offset_ns
            else:
                mapped = stamps
            if inp.buffer is None:
                inp.buffer = StreamBuffer(values.shape[1])
            inp.buffer.extend(mapped, recvs, values)
            inp.newest_ns = max(inp.newest_ns, int(mapped.max()))
            inp.last_recv_ns = int(recvs[-1])

    def _columns(self, inp: _Input) -> tuple[np.ndarray, np.ndarray]:
        """(rows as an (m, width) float array, which rows are kept): rows that are not
        numbers are refused one by one."""
        try:
            return np.array(inp.rows, dtype=float).reshape(len(inp.rows), -1), np.ones(len(inp.rows), dtype=bool)
        except (TypeError, ValueError):
            pass
        values = np.full((len(inp.rows), inp.width or 0), np.nan)
        keep = np.ones(len(inp.rows), dtype=bool)
        for i, row in enumerate(inp.rows):
            try:
                values[i] = np.asarray(row, dtype=float)
            except (TypeError, ValueError) as error:
                keep[i] = False
                self._refuse(inp, UNREADABLE, repr(error))
        return values[keep], keep

    def _due_times(self, now_ns: int) -> np.ndarray:
        """The grid times from the next one on that are due at now_ns (in order)."""
        assert self._next_ns is not None
        if self._next_ns < now_ns - self._backlog_ns:
            # Too far behind: drop and count, never tick through the backlog.
            resume = ((now_ns - self._backlog_ns) // self.period_ns + 1) * self.period_ns
            self.skipped += (resume - self._next_ns) // self.period_ns
            self._next_ns = resume
        newest = min(inp.newest_ns for inp in self._inputs)
        end = max(newest, self._next_ns - self.period_ns)
        reached = np.arange(self._next_ns, end + 1, self.period_ns, dtype=np.int64)
        # Every input holds a sample at or after these: due, whatever ready_times would add.
        # Beyond them only a stall can make a grid time due, and none does before t + horizon.
        first_unreached = int(reached[-1]) + self.period_ns if len(reached) else self._next_ns
        if now_ns < first_unreached + self._horizon_ns:
            return reached
        candidates = np.arange(first_unreached, now_ns + 1, self.period_ns, dtype=np.int64)
        streams = [(inp.buffer, inp.health) for inp in self._inputs if inp.buffer is not None]
        due = ready_times(candidates, streams, self._horizon_ns, self._backlog_ns) <= now_ns
        late = candidates if due.all() else candidates[:int(np.argmin(due))]
        return np.concatenate((reached, late))

    def _rearm(self, now_ns: int) -> None:
        """Set the cheap per-message triggers: which inputs must still reach the end of
        the next batch, and from when on a stall may make grid times due."""
        assert self._next_ns is not None
        self._due_ns = self._next_ns + self._batch_ns
        self._lagging = {inp for inp in self._inputs if inp.newest_ns < self._due_ns}
        self._stall_check_ns = max(self._next_ns + self._batch_ns + self._horizon_ns, now_ns + self.period_ns)
