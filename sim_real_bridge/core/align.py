"""Time alignment of a fast sim stream and a slower real stream by interpolation.

Design: the real stream is the slower one (100 to 500 Hz against the sim's 1 kHz),
so each real sample is paired with the sim state interpolated at the real sample's
instant (on the sim time base). Interpolating the fast stream adds far less error
than interpolating the slow one, and every real measurement is used exactly once.
A real sample waits in a bounded queue until the sim stream brackets it; it is then
emitted with the sim values interpolated between the two bracketing sim samples
(linear for plain columns, slerp for quaternion blocks). Across a sim gap
(consecutive sim stamps further apart than ``max_gap_ns``) the aligner never
interpolates; it may extrapolate from the two samples on one side of the gap, but
only when the real instant is within ``horizon_ns`` of that side. With
``horizon_ns = 0`` every pair is an exact interpolation.

Real stamps are mapped to the sim time base as
``stamp_sim = stamp_real + offset_ns - (latency_ns if compensate_latency else 0)``,
with ``offset_ns`` (sim clock minus real clock) and ``latency_ns`` (actuation
latency of the real robot behind the sim) supplied by the caller, typically from
:mod:`sim_real_bridge.core.timebase`.

Quaternion blocks are four consecutive columns ``[w, x, y, z]``.

Edge cases, each counted by reason in :attr:`StreamAligner.counters` (never raised):
duplicate stamps are dropped; a late (out-of-order) sample is inserted at its place
if it can still be used (a sim sample inside the buffer, a real one not behind a
pair already emitted, so output stamps stay strictly increasing), else dropped; a
stamp jumping back by more than ``reset_threshold_ns`` is a reset (sim: both
buffers cleared; real: its queue cleared) and starts a new ``epoch``; a real sample
older than the sim buffer is dropped. Memory is bounded by ``max_buffer`` sim
samples and ``max_pending`` real ones. :func:`align_batch` applies the same rules to
whole arrays with ``numpy.searchsorted``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from typing import NamedTuple, Sequence

import numpy as np

from sim_real_bridge.errors import AlignmentError, ConfigError

__all__ = [
    "AlignedPair",
    "BatchAlignment",
    "ChannelLayout",
    "StreamAligner",
    "align_batch",
    "slerp",
]

#: Counter names of :attr:`StreamAligner.counters`, all present from the start.
COUNTER_NAMES: tuple[str, ...] = (
    "sim_samples",
    "real_samples",
    "pairs",
    "pairs_extrapolated",
    "sim_duplicate",
    "sim_out_of_order",
    "sim_too_old",
    "sim_non_finite",
    "sim_bad_shape",
    "sim_gap",
    "sim_reset",
    "real_duplicate",
    "real_out_of_order",
    "real_too_late",
    "real_bad_shape",
    "real_gap",
    "real_reset",
    "real_offset_step_back",
    "real_before_sim_buffer",
    "real_in_sim_gap",
    "pending_overflow",
    "flushed_unpaired",
)


class ChannelLayout:
    """Which columns of the sim value vector are linear and which are quaternions.

    Args:
        n_values: length of the sim value vector.
        quat_starts: first column of each ``[w, x, y, z]`` block.

    Raises:
        ConfigError: if a block is out of range or blocks overlap.
    """

    def __init__(self, n_values: int, quat_starts: Sequence[int] = ()) -> None:
        if int(n_values) < 1:
            raise ConfigError(f"ChannelLayout n_values must be >= 1, got {n_values}")
        self.n_values = int(n_values)
        starts = tuple(sorted(int(s) for s in quat_starts))
        used: set[int] = set()
        for start in starts:
            if start < 0 or start + 4 > self.n_values:
                raise ConfigError(
                    f"ChannelLayout quaternion block at column {start} does not fit in "
                    f"{self.n_values} values"
                )
            block = set(range(start, start + 4))
            if used & block:
                raise ConfigError(f"ChannelLayout quaternion block at column {start} overlaps another")
            used |= block
        self.quat_starts: tuple[int, ...] = starts
        #: Column indices of the quaternion blocks, shape (n_blocks, 4).
        self.quat_cols = np.array([[s, s + 1, s + 2, s + 3] for s in starts], dtype=np.intp).reshape(-1, 4)
        self.linear_cols = np.array([c for c in range(self.n_values) if c not in used], dtype=np.intp)

    @property
    def has_quaternions(self) -> bool:
        """True if any column block is a quaternion."""
        return bool(self.quat_starts)

    def __repr__(self) -> str:
        return f"ChannelLayout(n_values={self.n_values}, quat_starts={self.quat_starts})"


def slerp(q0: np.ndarray, q1: np.ndarray, fraction: np.ndarray | float) -> np.ndarray:
    """Spherical linear interpolation of unit quaternions along the shorter arc.

    A fraction outside [0, 1] extrapolates along the same great circle.

    Args:
        q0: quaternions ``[w, x, y, z]``, shape (..., 4).
        q1: quaternions, same shape as ``q0``.
        fraction: interpolation fraction, broadcastable to ``q0.shape[:-1]``.

    Returns:
        Unit quaternions, shape of ``q0``.
    """
    q0 = np.asarray(q0, dtype=np.float64)
    q1 = np.asarray(q1, dtype=np.float64)
    frac = np.asarray(fraction, dtype=np.float64)[..., None]
    dot = np.sum(q0 * q1, axis=-1, keepdims=True)
    # q and -q are the same rotation: flip to interpolate along the shorter arc.
    q1 = np.where(dot < 0.0, -q1, q1)
    dot = np.abs(dot)
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    sin_theta = np.sin(theta)
    small = sin_theta < 1e-9
    safe_sin = np.where(small, 1.0, sin_theta)
    w0 = np.where(small, 1.0 - frac, np.sin((1.0 - frac) * theta) / safe_sin)
    w1 = np.where(small, frac, np.sin(frac * theta) / safe_sin)
    out = w0 * q0 + w1 * q1
    return out / np.linalg.norm(out, axis=-1, keepdims=True)


class AlignedPair(NamedTuple):
    """One real sample with the sim state at the same instant.

    Attributes:
        stamp_ns: instant on the sim time base at which the sim was evaluated.
        real_stamp_ns: the real sample's own stamp, on the real time base.
        sim: sim values at ``stamp_ns``, shape (n_values,).
        real: the real sample's values, as pushed.
        extrapolated_ns: 0 for an interpolated pair, else how far beyond the sim
            samples used the value was extrapolated (never above the horizon).
        epoch: number of resets before this pair; stamps increase within an epoch.
    """

    stamp_ns: int
    real_stamp_ns: int
    sim: np.ndarray
    real: np.ndarray
    extrapolated_ns: int
    epoch: int


def _new_pair(fields: tuple) -> AlignedPair:
    return tuple.__new__(AlignedPair, fields)


class StreamAligner:
    """Streaming aligner: pairs each real sample with the sim state interpolated at its instant.

    Memory is bounded: at most ``max_buffer`` sim samples and ``max_pending`` real
    samples are held. Bad input is counted by reason in :attr:`counters`, never raised.

    Args:
        layout: columns of the sim values (linear vs quaternion blocks), or the
            number of values if all are linear.
        horizon_ns: largest extrapolation allowed, in ns (0: interpolation only).
        max_buffer: sim samples kept (must cover the real stream's delay).
        max_gap_ns: sim stamps further apart than this are a gap, never interpolated across.
        reset_threshold_ns: a stamp going back by more than this is a reset (a sim
            reset clears everything, a real one the real queue); a smaller step back
            is a late sample, inserted at its place while it can still be used.
        max_pending: real samples allowed to wait for the sim stream.
        real_max_gap_ns: real stamps further apart than this are counted as a gap
            (default: ``max_gap_ns`` times 10).
        compensate_latency: pair the real sample with the sim ``latency_ns`` earlier.
        reorder_window_ns: hold each real sample until the sim stream is this far
            past it, so real samples arriving out of order within the window are
            still paired (monotone output forbids pairing them after a later one).

    Raises:
        ConfigError: if a parameter is out of range.
    """

    def __init__(
        self,
        layout: ChannelLayout | int,
        horizon_ns: int = 0,
        max_buffer: int = 2000,
        max_gap_ns: int = 20_000_000,
        reset_threshold_ns: int = 1_000_000_000,
        max_pending: int = 1000,
        real_max_gap_ns: int | None = None,
        compensate_latency: bool = False,
        reorder_window_ns: int = 0,
    ) -> None:
        if isinstance(layout, (int, np.integer)):
            layout = ChannelLayout(int(layout))
        if not isinstance(layout, ChannelLayout):
            raise ConfigError(f"StreamAligner layout must be a ChannelLayout or int, got {type(layout).__name__}")
        if int(horizon_ns) < 0:
            raise ConfigError(f"StreamAligner horizon_ns must be >= 0, got {horizon_ns}")
        if int(max_buffer) < 2:
            raise ConfigError(f"StreamAligner max_buffer must be >= 2, got {max_buffer}")
        if int(max_gap_ns) <= 0:
            raise ConfigError(f"StreamAligner max_gap_ns must be > 0, got {max_gap_ns}")
        if int(reset_threshold_ns) <= 0:
            raise ConfigError(f"StreamAligner reset_threshold_ns must be > 0, got {reset_threshold_ns}")
        if int(max_pending) < 1:
            raise ConfigError(f"StreamAligner max_pending must be >= 1, got {max_pending}")
        if int(reorder_window_ns) < 0:
            raise ConfigError(f"StreamAligner reorder_window_ns must be >= 0, got {reorder_window_ns}")
        if real_max_gap_ns is not None and int(real_max_gap_ns) <= 0:
            raise ConfigError(f"StreamAligner real_max_gap_ns must be > 0, got {real_max_gap_ns}")
        self.layout = layout
        self.horizon_ns = int(horizon_ns)
        self.max_buffer = int(max_buffer)
        self.max_gap_ns = int(max_gap_ns)
        self.reset_threshold_ns = int(reset_threshold_ns)
        self.max_pending = int(max_pending)
        self.real_max_gap_ns = int(real_max_gap_ns) if real_max_gap_ns is not None else 10 * self.max_gap_ns
        self._compensate_latency = bool(compensate_latency)
        self.reorder_window_ns = int(reorder_window_ns)
        self._n = layout.n_values
        self._shape = (layout.n_values,)
        self._quat = layout.has_quaternions
        self._offset_ns = 0
        self._latency_ns = 0
        self._shift_ns = 0
        self._sim_t: deque[int] = deque(maxlen=self.max_buffer)
        self._sim_v: deque[np.ndarray] = deque(maxlen=self.max_buffer)
        self._pending: deque[tuple[int, int, np.ndarray]] = deque()
        self._last_real_stamp: int | None = None
        self._last_out_t: int | None = None
        self._sim_evicted = False
        self._counters: dict[str, int] = dict.fromkeys(COUNTER_NAMES, 0)
        self.reset_count = 0

    # -- time base -----------------------------------------------------------------

    @property
    def offset_ns(self) -> int:
        """Sim clock minus real clock, in ns, used to map real stamps."""
        return self._offset_ns

    @property
    def latency_ns(self) -> int:
        """Actuation latency of the real robot behind the sim, in ns."""
        return self._latency_ns

    def set_offset_ns(self, offset_ns: int) -> None:
        """Set the clock offset (sim minus real) applied to real stamps pushed from now on."""
        self._offset_ns = int(offset_ns)
        self._update_shift()

    def set_latency_ns(self, latency_ns: int) -> None:
        """Set the latency; it shifts real stamps only if ``compensate_latency`` is on."""
        self._latency_ns = int(latency_ns)
        self._update_shift()

    @property
    def compensate_latency(self) -> bool:
        """Whether real samples are paired with the sim ``latency_ns`` earlier."""
        return self._compensate_latency

    @compensate_latency.setter
    def compensate_latency(self, on: bool) -> None:
        self._compensate_latency = bool(on)
        self._update_shift()

    def _update_shift(self) -> None:
        self._shift_ns = self._offset_ns - (self._latency_ns if self._compensate_latency else 0)

    # -- diagnostics ---------------------------------------------------------------

    @property
    def counters(self) -> dict[str, int]:
        """Counts by reason (samples, pairs, and every kind of dropped or odd input)."""
        return dict(self._counters)

    @property
    def buffered_sim(self) -> int:
        """Sim samples currently held."""
        return len(self._sim_t)

    @property
    def pending_real(self) -> int:
        """Real samples waiting for the sim stream."""
        return len(self._pending)

    def reset(self) -> None:
        """Clear both buffers (counted as a reset); offset and latency are kept."""
        self._clear()

    def _clear(self) -> None:
        self._sim_t.clear()
        self._sim_v.clear()
        self._sim_evicted = False
        self._clear_real()

    def _clear_real(self) -> None:
        self._pending.clear()
        self._last_real_stamp = None
        self._last_out_t = None
        self.reset_count += 1

    # -- streaming -----------------------------------------------------------------

    def push_sim(self, stamp_ns: int, values: np.ndarray) -> list[AlignedPair]:
        """Add a sim sample; return the pairs it completes (oldest first).

        Args:
            stamp_ns: sim stamp, ns on the sim time base.
            values: sim values, shape (n_values,); kept by reference, so do not
                modify the array after pushing it. A pair whose interpolated sim
                values are not finite is dropped and counted as ``sim_non_finite``.
        """
        counters = self._counters
        stamp = int(stamp_ns)
        value = np.asarray(values, dtype=np.float64)
        if value.shape != self._shape:
            counters["sim_bad_shape"] += 1
            return []
        sim_t = self._sim_t
        if sim_t:
            last = sim_t[-1]
            if stamp <= last:
                if stamp == last:
                    counters["sim_duplicate"] += 1
                    return []
                if last - stamp <= self.reset_threshold_ns:
                    return self._insert_sim(stamp, value)
                counters["sim_reset"] += 1
                self._clear()
            elif stamp - last > self.max_gap_ns:
                counters["sim_gap"] += 1
        counters["sim_samples"] += 1
        if len(sim_t) == self.max_buffer:
            self._sim_evicted = True
        sim_t.append(stamp)
        self._sim_v.append(value)
        pending = self._pending
        if pending and pending[0][0] <= stamp - self.reorder_window_ns:
            return self._drain()
        return []

    def _insert_sim(self, stamp: int, value: np.ndarray) -> list[AlignedPair]:
        """Insert a late sim sample at its place in the buffer (or drop it if older than all)."""
        counters = self._counters
        sim_t = self._sim_t
        if stamp < sim_t[0]:
            counters["sim_too_old"] += 1
            return []
        k = len(sim_t) - 1
        while sim_t[k] > stamp:
            k -= 1
        if sim_t[k] == stamp:
            counters["sim_duplicate"] += 1
            return []
        counters["sim_out_of_order"] += 1
        counters["sim_samples"] += 1
        if len(sim_t) == self.max_buffer:
            sim_t.popleft()
            self._sim_v.popleft()
            self._sim_evicted = True
            k -= 1
        sim_t.insert(k + 1, stamp)
        self._sim_v.insert(k + 1, value)
        return []

    def push_real(self, stamp_ns: int, values: np.ndarray) -> list[AlignedPair]:
        """Add a real sample; return the pairs that are complete (oldest first).

        Args:
            stamp_ns: real stamp, ns on the real time base.
            values: real values, any 1-D length (carried along by reference, not
                interpolated).
        """
        counters = self._counters
        stamp = int(stamp_ns)
        value = np.asarray(values, dtype=np.float64)
        if value.ndim != 1:
            counters["real_bad_shape"] += 1
            return []
        in_order = True
        last = self._last_real_stamp
        if last is not None:
            if stamp <= last:
                if stamp == last:
                    counters["real_duplicate"] += 1
                    return []
                if last - stamp <= self.reset_threshold_ns:
                    in_order = False
                else:
                    # The real clock stepped back: the sim buffer is still good.
                    counters["real_reset"] += 1
                    self._clear_real()
            elif stamp - last > self.real_max_gap_ns:
                counters["real_gap"] += 1
        t = stamp + self._shift_ns
        last_out = self._last_out_t
        if last_out is not None and t <= last_out:
            # Behind a pair already emitted: emitting it would break monotone output.
            counters["real_too_late" if not in_order else "real_offset_step_back"] += 1
            return []
        pending = self._pending
        if in_order:
            self._last_real_stamp = stamp
        if pending and t <= pending[-1][0]:
            k = len(pending) - 1
            while k >= 0 and pending[k][0] > t:
                k -= 1
            if k >= 0 and pending[k][0] == t:
                counters["real_duplicate"] += 1
                return []
            pending.insert(k + 1, (t, stamp, value))
            if not in_order:
                counters["real_out_of_order"] += 1
        else:
            pending.append((t, stamp, value))
        counters["real_samples"] += 1
        if len(pending) > self.max_pending:
            pending.popleft()
            counters["pending_overflow"] += 1
        sim_t = self._sim_t
        if sim_t and pending[0][0] <= sim_t[-1] - self.reorder_window_ns:
            return self._drain()
        return []

    def flush(self) -> list[AlignedPair]:
        """End of stream: emit what the horizon allows, drop the rest (counted)."""
        out = self._drain(flushing=True)
        sim_t = self._sim_t
        pending = self._pending
        while pending:
            t, stamp, value = pending.popleft()
            n = len(sim_t)
            if n and t <= sim_t[-1]:
                # It waited for a sim sample that will not come; the rest may now pass.
                self._counters["flushed_unpaired"] += 1
                out += self._drain(flushing=True)
            elif n >= 2 and t - sim_t[-1] <= self.horizon_ns and sim_t[-1] - sim_t[-2] <= self.max_gap_ns:
                self._emit(out, t, stamp, value, n - 2, n - 1, t - sim_t[-1])
            else:
                self._counters["flushed_unpaired"] += 1
        return out

    def _emit(
        self, out: list[AlignedPair], t: int, stamp: int, real: np.ndarray, lo: int, hi: int, extrap_ns: int
    ) -> None:
        """Append the pair for real instant ``t`` from sim samples ``lo``, ``hi`` (unless non-finite)."""
        sim_t = self._sim_t
        t0 = sim_t[lo]
        v0 = self._sim_v[lo]
        if lo == hi:
            sim = v0.copy()
        else:
            v1 = self._sim_v[hi]
            frac = (t - t0) / (sim_t[hi] - t0)
            sim = v0 + (v1 - v0) * frac
            if self._quat:
                cols = self.layout.quat_cols
                sim[cols] = slerp(v0[cols], v1[cols], frac)
        counters = self._counters
        self._last_out_t = t
        # Checked per pair rather than per sim sample: a quarter of the work at 250 Hz.
        if not math.isfinite(sim.dot(sim)):
            counters["sim_non_finite"] += 1
            return
        counters["pairs"] += 1
        if extrap_ns:
            counters["pairs_extrapolated"] += 1
        out.append(_new_pair((t, stamp, sim, real, extrap_ns, self.reset_count)))

    def _drain(self, flushing: bool = False) -> list[AlignedPair]:
        out: list[AlignedPair] = []
        pending = self._pending
        sim_t = self._sim_t
        n = len(sim_t)
        if n == 0:
            return out
        counters = self._counters
        max_gap = self.max_gap_ns
        horizon = self.horizon_ns
        newest = sim_t[-1]
        oldest = sim_t[0]
        ready = newest if flushing else newest - self.reorder_window_ns
        while pending:
            t, stamp, value = pending[0]
            if t > ready:
                break
            if t < oldest:
                # Before the first sim sample of this epoch: backward extrapolation
                # within the horizon, as across a gap; before an evicted one: too late.
                if not self._sim_evicted and oldest - t <= horizon:
                    if n < 2:
                        break
                    if sim_t[1] - oldest <= max_gap:
                        pending.popleft()
                        self._emit(out, t, stamp, value, 0, 1, oldest - t)
                        continue
                    pending.popleft()
                    counters["real_in_sim_gap"] += 1
                    continue
                pending.popleft()
                counters["real_before_sim_buffer"] += 1
                continue
            if n >= 2 and t >= sim_t[-2]:
                i = n - 2 if t < newest else n - 1
            else:
                i = bisect_right(sim_t, t) - 1
            s0 = sim_t[i]
            if t == s0:
                pending.popleft()
                self._emit(out, t, stamp, value, i, i, 0)
                continue
            s1 = sim_t[i + 1]
            if s1 - s0 <= max_gap:
                pending.popleft()
                self._emit(out, t, stamp, value, i, i + 1, 0)
                continue
            # t lies in a sim gap: extrapolate from one side within the horizon, or drop.
            if t - s0 <= horizon and i >= 1 and s0 - sim_t[i - 1] <= max_gap:
                pending.popleft()
                self._emit(out, t, stamp, value, i - 1, i, t - s0)
                continue
            if s1 - t <= horizon:
                if i + 2 >= n:
                    break  # the sample after s1 decides; wait for it
                if sim_t[i + 2] - s1 <= max_gap:
                    pending.popleft()
                    self._emit(out, t, stamp, value, i + 1, i + 2, s1 - t)
                    continue
            pending.popleft()
            counters["real_in_sim_gap"] += 1
        return out


class BatchAlignment(NamedTuple):
    """Result of :func:`align_batch`; rows follow the real samples.

    Attributes:
        stamp_ns: real stamps mapped to the sim time base, shape (n_real,), int64.
        sim_values: sim values at ``stamp_ns``, shape (n_real, n_values); NaN where invalid.
        real_values: the real values as given, shape (n_real, n_real_values).
        valid: True where a pair was interpolated or extrapolated within the horizon.
        extrapolated_ns: extrapolation distance (0 for interpolation), shape (n_real,).
        sim_dropped: sim samples dropped as duplicate or out of order.
    """

    stamp_ns: np.ndarray
    sim_values: np.ndarray
    real_values: np.ndarray
    valid: np.ndarray
    extrapolated_ns: np.ndarray
    sim_dropped: int


def align_batch(
    sim_stamp_ns: np.ndarray,
    sim_values: np.ndarray,
    real_stamp_ns: np.ndarray,
    real_values: np.ndarray,
    horizon_ns: int = 0,
    *,
    max_gap_ns: int = 20_000_000,
    layout: ChannelLayout | None = None,
    offset_ns: int | np.ndarray = 0,
    latency_ns: int = 0,
) -> BatchAlignment:
    """Offline alignment with the same rules as :class:`StreamAligner`, vectorized.

    Sim samples are sorted and de-duplicated first (resets are not handled: split the
    recording at resets). Unlike the streaming aligner, real samples after the last
    sim sample may be extrapolated within the horizon (the stream has ended).

    Args:
        sim_stamp_ns: sim stamps, shape (n_sim,).
        sim_values: shape (n_sim, n_values).
        real_stamp_ns: real stamps on the real time base, shape (n_real,).
        real_values: shape (n_real, m); carried along.
        horizon_ns: largest extrapolation allowed (0: interpolation only).
        max_gap_ns: sim stamps further apart than this are never interpolated across.
        layout: column layout of the sim values (default: all linear).
        offset_ns: sim clock minus real clock, scalar or shape (n_real,).
        latency_ns: subtracted from the mapped real stamps (latency compensation).

    Raises:
        AlignmentError: on mismatched shapes or a bad layout or setting.
    """
    sim_t = np.asarray(sim_stamp_ns, dtype=np.int64)
    sim_v = np.asarray(sim_values, dtype=np.float64)
    real_t = np.asarray(real_stamp_ns, dtype=np.int64)
    real_v = np.asarray(real_values)
    if sim_t.ndim != 1 or sim_v.ndim != 2 or sim_v.shape[0] != sim_t.shape[0]:
        raise AlignmentError(
            f"align_batch sim shapes disagree: stamps {sim_t.shape}, values {sim_v.shape}"
        )
    if real_t.ndim != 1 or real_v.shape[:1] != real_t.shape:
        raise AlignmentError(
            f"align_batch real shapes disagree: stamps {real_t.shape}, values {real_v.shape}"
        )
    if int(horizon_ns) < 0 or int(max_gap_ns) <= 0:
        raise AlignmentError(
            f"align_batch needs horizon_ns >= 0 and max_gap_ns > 0, got {horizon_ns}, {max_gap_ns}"
        )
    if layout is None:
        layout = ChannelLayout(max(sim_v.shape[1], 1))
    if layout.n_values != sim_v.shape[1]:
        raise AlignmentError(
            f"align_batch layout has {layout.n_values} values, sim has {sim_v.shape[1]}"
        )
    offset = np.asarray(offset_ns, dtype=np.int64)
    if offset.ndim not in (0, 1) or (offset.ndim == 1 and offset.shape != real_t.shape):
        raise AlignmentError(f"align_batch offset_ns must be scalar or shape {real_t.shape}, got {offset.shape}")
    sim_dropped = 0
    if sim_t.size > 1 and not bool(np.all(sim_t[1:] > sim_t[:-1])):
        uniq_t, first = np.unique(sim_t, return_index=True)
        sim_dropped = int(sim_t.size - uniq_t.size)
        sim_t, sim_v = uniq_t, sim_v[first]
    t = real_t + offset - np.int64(latency_ns)
    n_real = t.size
    n_sim = sim_t.size
    valid = np.zeros(n_real, dtype=bool)
    extrap = np.zeros(n_real, dtype=np.int64)
    if n_sim == 0 or n_real == 0:
        out_v = np.full((n_real, sim_v.shape[1]), np.nan)
        return BatchAlignment(t, out_v, real_v, valid, extrap, sim_dropped)
    horizon = np.int64(horizon_ns)
    max_gap = np.int64(max_gap_ns)
    i = np.searchsorted(sim_t, t, side="right") - 1
    # gap_after[k]: the interval sim_t[k] .. sim_t[k+1] is a gap (or k is the last sample).
    spacing = np.diff(sim_t)
    gap_after = np.append(spacing > max_gap, True)
    ic = np.clip(i, 0, n_sim - 1)
    s0 = sim_t[ic]
    exact = (i >= 0) & (s0 == t)
    interp = (i >= 0) & ~gap_after[ic]
    lo = ic.copy()
    hi = np.minimum(ic + 1, n_sim - 1)
    ok = exact | interp
    hi[exact] = lo[exact]
    if horizon > 0:
        # Forward: the two samples before t, t within the horizon of the later one.
        prev_ok = np.zeros(n_real, dtype=bool)
        has_prev = ic >= 1
        prev_ok[has_prev] = ~gap_after[ic[has_prev] - 1]
        fwd = ~ok & (i >= 1) & prev_ok & (t - s0 <= horizon)
        lo[fwd] = ic[fwd] - 1
        hi[fwd] = ic[fwd]
        extrap[fwd] = (t - s0)[fwd]
        # Backward: the two samples after t, t within the horizon of the earlier one.
        j = i + 1
        jc = np.clip(j, 0, n_sim - 1)
        bwd = ~ok & ~fwd & (j <= n_sim - 2) & ~gap_after[jc] & (sim_t[jc] - t <= horizon)
        lo[bwd] = jc[bwd]
        hi[bwd] = jc[bwd] + 1
        extrap[bwd] = (sim_t[jc] - t)[bwd]
        ok = ok | fwd | bwd
    t_lo = sim_t[lo]
    denom = (sim_t[hi] - t_lo).astype(np.float64)
    frac = np.divide((t - t_lo).astype(np.float64), denom, out=np.zeros(n_real), where=denom != 0)
    # In place: large temporaries cost more in page faults than in arithmetic.
    v0 = sim_v.take(lo, axis=0)
    out_v = sim_v.take(hi, axis=0)
    np.subtract(out_v, v0, out=out_v)
    np.multiply(out_v, frac[:, None], out=out_v)
    np.add(out_v, v0, out=out_v)
    if layout.has_quaternions:
        cols = layout.quat_cols
        out_v[:, cols] = slerp(v0[:, cols], sim_v[hi][:, cols], frac[:, None])
    out_v[~ok] = np.nan
    valid[:] = ok
    return BatchAlignment(t, out_v, real_v, valid, extrap, sim_dropped)
