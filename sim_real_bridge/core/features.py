"""Per-stream health trackers: is a stream wrong in itself (the evidence of `sensor` gaps).

Each tracker looks at one stream of one side (for example the real ``joint_states``) and
answers, for an analysis time t on the monitor time base, which pathologies are present
near t, each as a :class:`HealthFlag` (name, active, severity 0..1, evidence). Detectors:

- dropout: a gap between consecutive samples (or since the last one) longer than
  ``dropout_periods`` expected periods; the expected period is learned online as the
  median of recent stamp intervals. A gap still open counts only once nothing of the
  stream was received for longer than that and than its learned delivery bursts, after
  a warm-up; a gap or silence the other side's twin stream shares was lost on the way
  to the monitor (its load), not by the sensor;
- nonfinite: NaN or inf in a sample;
- frozen: ``frozen_samples`` or more bit-identical consecutive samples while the other
  side's stream moves (the engine passes that in);
- stamp_jitter: dispersion of the stamp intervals (median absolute deviation relative to
  the period) or stamps going backwards. The receive-minus-stamp delay is reported as
  evidence but never raises the flag: its dispersion is the transport's and the
  monitor's own load (queueing, backlog), not the sensor's;
- saturation: one component pinned at the same non-zero value for ``saturation_samples``
  samples while other components of the same message vary (clipping).

F/T bias drift needs both sides and the joints, so attribution finds it: a wrist force
residual the joints do not feel (core/attribution.py).

Trackers keep bounded history and never read a clock: every input carries its times.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from sim_real_bridge.errors import ConfigError


@dataclass
class FeatureConfig:
    """Thresholds of the stream health detectors.

    Attributes:
        dropout_periods: a gap longer than this many expected periods is a dropout.
        min_period_s: floor on the learned period (guards against bursts of fast samples).
        period_window: number of recent stamp intervals the period median uses.
        frozen_samples: bit-identical consecutive samples needed to call a stream frozen.
        frozen_motion_threshold: the other side must change by more than this (L-inf of
            its values over the run) for a repeat to count as frozen.
        jitter_window: number of recent samples the jitter statistics use.
        jitter_mad_ratio: stamp-interval MAD over period above this is jitter.
        saturation_samples: identical non-zero samples of one component (others varying)
            needed for saturation.
        flag_hold_s: a flag raised by a sample stays visible this long around it.
        history_s: how much sample history is kept for queries.
        warmup_s: an open gap (a stream gone silent) is not judged during the first
            warmup_s of a stream's receive time (startup backlog, period still unknown).
        burst_memory_s: half-life of the learned delivery silence: a stream that was
            silent for a while and then delivered contiguous stamps was late (backlog),
            not missing; an open gap is a dropout only when longer than such silences.
        side_silence_s: a silence every stream of the side shares (the robot's driver, its
            host or the network stalled; it may yet deliver late) is a dropout only once
            it lasts this long; one stream silent while its siblings flow is a dropout
            after ``dropout_periods``.
    """

    dropout_periods: float = 5.0
    min_period_s: float = 0.0005
    period_window: int = 101
    frozen_samples: int = 8
    frozen_motion_threshold: float = 1e-6
    jitter_window: int = 200
    jitter_mad_ratio: float = 0.25
    saturation_samples: int = 25
    flag_hold_s: float = 0.1
    history_s: float = 5.0
    warmup_s: float = 2.0
    burst_memory_s: float = 10.0
    side_silence_s: float = 1.5

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid field."""
        for name in ("dropout_periods", "min_period_s", "jitter_mad_ratio", "flag_hold_s", "history_s", "warmup_s",
                     "burst_memory_s", "side_silence_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"FeatureConfig.{name} must be > 0, got {getattr(self, name)}")
        for name in ("period_window", "frozen_samples", "jitter_window", "saturation_samples"):
            if int(getattr(self, name)) < 2:
                raise ConfigError(f"FeatureConfig.{name} must be >= 2, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class HealthFlag:
    """One detector's verdict at a time: active flag, severity 0..1 and evidence.

    Immutable: an inactive verdict is one shared constant (``_INACTIVE_*``).
    """

    name: str
    active: bool = False
    severity: float = 0.0
    evidence: Mapping[str, str] = field(default_factory=dict)


def _inactive(name: str) -> HealthFlag:
    """The inactive verdict of detector ``name``."""
    return HealthFlag(name, evidence=MappingProxyType({}))


# Inactive verdicts, shared by every query: most flags are inactive at most times.
_INACTIVE_DROPOUT = _inactive("dropout")
_INACTIVE_NONFINITE = _inactive("nonfinite")
_INACTIVE_FROZEN = _inactive("frozen")
_INACTIVE_STAMP_JITTER = _inactive("stamp_jitter")
_INACTIVE_SATURATION = _inactive("saturation")
#: What :meth:`StreamHealth.flags` returns when no detector is active (the usual grid
#: time): the caller tells it by identity and skips the five flags.
ALL_INACTIVE: tuple["HealthFlag", ...] = (_INACTIVE_DROPOUT, _INACTIVE_NONFINITE, _INACTIVE_FROZEN,
                                         _INACTIVE_STAMP_JITTER, _INACTIVE_SATURATION)
#: The same with ``dropout_only``.
DROPOUT_INACTIVE: tuple["HealthFlag", ...] = (_INACTIVE_DROPOUT,)


def _median(values: Iterable[float]) -> float:
    """Median (the mean of the middle two for an even count), as np.median; cheaper on short deques."""
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return float(ordered[mid]) if n % 2 else float((ordered[mid - 1] + ordered[mid]) / 2.0)


def _jitter_stats(intervals_s: Iterable[float]) -> tuple[float, float, int]:
    """Median, median absolute deviation and count of non-positive values of the stamp
    intervals: the values of ``_median`` and ``plan_jitter``, from one sort. Sorted,
    the deviations below and above the median are two sorted runs (x - c is exactly
    -(c - x)), which Timsort merges in linear time; the non-positive count is a bisection.
    """
    ordered = sorted(intervals_s)
    center = _median(ordered)
    k = bisect_left(ordered, center)
    deviations = [center - x for x in reversed(ordered[:k])]
    deviations += [x - center for x in ordered[k:]]
    return center, _median(deviations), bisect_right(ordered, 0.0)


def _row_medians(rows: np.ndarray) -> np.ndarray:
    """The median of each row of a 2-D array, as np.median (same values); reorders the rows
    in place. A partition puts the middle one or two in their sorted places, cheaper than a sort."""
    mid = rows.shape[1] // 2
    if rows.shape[1] % 2:
        rows.partition(mid, axis=1)
        return rows[:, mid].copy()
    rows.partition((mid - 1, mid), axis=1)
    return (rows[:, mid - 1] + rows[:, mid]) / 2.0


def _constant_windows(values: np.ndarray, starts: np.ndarray, size: int) -> np.ndarray:
    """Whether each window ``values[s:s + size]`` holds one value, bit for bit (its median
    is that value and its deviations are zeros: no sort needed)."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.int64)
    changes = np.zeros(bits.size, dtype=np.int64)  # changes[i]: value changes within values[:i + 1]
    np.cumsum(bits[1:] != bits[:-1], out=changes[1:])
    return changes[starts + size - 1] == changes[starts]


def _unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-D integer array; without its sort when already non-decreasing
    (the usual tick cuts)."""
    if values.size > 1 and bool((values[1:] >= values[:-1]).all()):
        return values[np.concatenate(([True], values[1:] != values[:-1]))]
    return np.unique(values)


def _clip01(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


class StreamHealth:
    """Health of one stream (one side, one topic), queried at analysis times.

    Args:
        config: detector thresholds.
        name: label used in evidence, e.g. "real/joint_states".
    """

    def __init__(self, config: FeatureConfig, name: str = "stream") -> None:
        config.validate()
        self.config = config
        self.name = name
        self.sample_count = 0
        self._last_stamp_ns: int | None = None
        self._last_time_ns: int | None = None
        self._last_recv_ns: int | None = None
        self._first_recv_ns: int | None = None
        self._burst_silence_ns = 0
        self._burst_at_ns = 0
        self._last_values_v: np.ndarray | None = None
        self._intervals_q: deque[float] = deque(maxlen=config.period_window)
        self._delays_q: deque[float] = deque(maxlen=config.jitter_window)
        self._stamp_intervals_q: deque[float] = deque(maxlen=config.jitter_window)
        # Rows fed by plan (see add_rows) but not yet moved into the deques above and
        # _last_values_v: rows _pending_lo.. up to sample_count, period window entries
        # _pending_entry.._pending_count of _pending_rows, values of _pending_values.
        # Moved only when read (_sync): most queries need their lengths only.
        self._pending_rows: HealthRows | None = None
        self._pending_lo = 0
        self._pending_entry = 0
        self._pending_count = 0
        self._pending_values: np.ndarray | None = None
        self._repeat_run = 0
        self._component_run: np.ndarray | None = None
        # (time_ns, kind) of flagged samples and (start_ns, end_ns) of gaps, on the monitor time base.
        self._marks: deque[tuple[int, str, float]] = deque()
        self._marks_sorted = True  # mark times non-decreasing: a scan back from the newest can stop at t
        self._gaps: deque[tuple[int, int]] = deque()
        self._frozen_start_ns: int | None = None
        self._period_cache: float | None = None
        self._since_period = 0
        # sample_count -> (center, MAD, backwards) of the stamp intervals, from plan_jitter.
        self._jitter_table: dict[int, tuple[float, float, int]] | None = None
        self._hold_ns = int(config.flag_hold_s * 1e9)  # read by every flags call

    def _sync(self) -> None:
        """Move the rows fed by plan into the deques and ``_last_values_v``."""
        rows = self._pending_rows
        if rows is None:
            return
        self._pending_rows = None
        hi = self.sample_count
        # A deque of length n keeps the newest n entries of whatever extends it: only those are moved.
        stamp_iv, delays, intervals = self._stamp_intervals_q, self._delays_q, self._intervals_q
        start = max(max(self._pending_lo, 1) - 1, hi - 1 - stamp_iv.maxlen)  # type: ignore[operator]
        stamp_iv.extend(rows.intervals[start:hi - 1].tolist())
        delays.extend(rows.delays[max(self._pending_lo, hi - delays.maxlen):hi].tolist())  # type: ignore[operator]
        count = self._pending_count
        start = max(self._pending_entry, count - intervals.maxlen)  # type: ignore[operator]
        intervals.extend(rows.appended[start:count].tolist())
        self._last_values_v = self._pending_values[hi - 1]  # type: ignore[index]
        self._pending_values = None

    @property
    def _intervals_s(self) -> deque[float]:
        """Recent positive stamp intervals that are not dropouts (the period window), s."""
        self._sync()
        return self._intervals_q

    @property
    def _stamp_intervals_s(self) -> deque[float]:
        """Recent stamp intervals (the jitter window), s."""
        self._sync()
        return self._stamp_intervals_q

    @property
    def _delays_s(self) -> deque[float]:
        """Recent receive-minus-stamp delays (the jitter window), s."""
        self._sync()
        return self._delays_q

    @property
    def _last_values(self) -> np.ndarray | None:
        """The newest sample's values."""
        self._sync()
        return self._last_values_v

    def _stamp_interval_count(self) -> int:
        """``len(self._stamp_intervals_s)`` without moving pending rows."""
        n = len(self._stamp_intervals_q)
        if self._pending_rows is None:
            return n
        # The pending rows but the first (row 0 has no interval) each bring one, up to the deque's length.
        pending = self.sample_count - self._pending_lo - (not self._pending_lo)
        return min(self._stamp_intervals_q.maxlen, n + pending) if pending > 0 else n  # type: ignore[type-var]

    @property
    def period_s(self) -> float | None:
        """Learned expected sample period, or None before two samples."""
        if not self._intervals_q:
            if self._pending_rows is None:
                return None
            self._sync()
            if not self._intervals_q:
                return None
        # The median is refreshed every few intervals: it moves slowly and costs O(n).
        if self._period_cache is None or self._since_period >= 16:
            self._sync()
            self._period_cache = max(self.config.min_period_s, _median(self._intervals_q))
            self._since_period = 0
        return self._period_cache

    def reset_stamps(self) -> None:
        """Forget stamp history (after a clock reset on this side)."""
        self._sync()
        self._last_stamp_ns = None
        self._jitter_table = None
        self._stamp_intervals_q.clear()
        self._delays_q.clear()

    def add(self, stamp_ns: int, recv_ns: int, time_ns: int, values: np.ndarray) -> None:
        """Record one sample.

        Args:
            stamp_ns: the message's own stamp.
            recv_ns: when the monitor received it.
            time_ns: the stamp mapped onto the monitor time base.
            values: every numeric field of the message, flattened.
        """
        cfg = self.config
        if not (isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype == np.float64):
            values = np.asarray(values, dtype=float).ravel()
        if self._pending_rows is not None:
            self._sync()
        self.sample_count += 1
        if self._last_stamp_ns is not None:
            ds = (stamp_ns - self._last_stamp_ns) * 1e-9
            self._stamp_intervals_q.append(ds)
            if ds > 0:
                period = self.period_s
                if period is None or ds < cfg.dropout_periods * period:
                    self._intervals_q.append(ds)
                    self._since_period += 1
        self._delays_q.append((recv_ns - stamp_ns) * 1e-9)
        if self._last_recv_ns is None:
            self._first_recv_ns = self._last_recv_ns = recv_ns
        else:
            silence_ns = recv_ns - self._last_recv_ns
            if (self._last_stamp_ns is not None and silence_ns > 4 * (stamp_ns - self._last_stamp_ns) > 0
                    and silence_ns > self.burst_silence_ns(recv_ns)):
                self._burst_silence_ns, self._burst_at_ns = silence_ns, recv_ns
            self._last_recv_ns = max(self._last_recv_ns, recv_ns)
        self._last_stamp_ns = stamp_ns
        if self._last_time_ns is not None:
            period = self.period_s
            gap_ns = time_ns - self._last_time_ns
            if period is not None and gap_ns > cfg.dropout_periods * period * 1e9:
                self._gaps.append((self._last_time_ns, time_ns))
        self._last_time_ns = time_ns if self._last_time_ns is None else max(self._last_time_ns, time_ns)

        finite = np.isfinite(values)
        all_finite = bool(finite.all())
        if not all_finite:
            self._mark(time_ns, "nonfinite", float(np.mean(~finite)))
        prev = self._last_values_v
        if prev is not None and prev.shape == values.shape and not (same := values == prev).any():
            # Every component moved (the usual sample): no repeat, every pinned run ends.
            self._repeat_run = 0
            self._component_run = None
        elif prev is not None and prev.shape == values.shape:
            all_same = bool(same.all())
            self._repeat_run = self._repeat_run + 1 if all_same and all_finite else 0
            run = self._component_run
            if run is None or run.shape != values.shape:
                run = np.zeros(values.shape, dtype=int)
            pinned = same & (values != 0) & finite
            run = (run + 1) * pinned
            self._component_run = run
            if not all_same and int(run.max()) >= cfg.saturation_samples:
                self._mark(time_ns, "saturation", 1.0)
        else:
            self._repeat_run = 0
        if self._repeat_run + 1 >= cfg.frozen_samples:
            self._mark(time_ns, "repeat", float(self._repeat_run + 1))
        self._last_values_v = values
        self._trim(time_ns)

    def has_gap(self, start_ns: int, end_ns: int) -> bool:
        """Whether a gap of this stream overlaps [start_ns, end_ns] (monitor time).

        A gap still open counts when the stream has had nothing since ``start_ns``: the
        twin whose silence began first and has not ended shares the later one's gap.
        """
        if self._last_time_ns is not None and self._last_time_ns <= start_ns:
            return True
        return any(s <= end_ns and e >= start_ns for s, e in self._gaps)

    def burst_silence_ns(self, now_ns: int) -> int:
        """Longest recent delivery silence after which the stamps continued (decaying)."""
        if not self._burst_silence_ns:
            return 0
        age_s = max(0, now_ns - self._burst_at_ns) * 1e-9
        return int(self._burst_silence_ns * 0.5 ** (age_s / self.config.burst_memory_s))

    def _mark(self, time_ns: int, kind: str, value: float) -> None:
        """Record a flagged sample."""
        if self._marks and time_ns < self._marks[-1][0]:
            self._marks_sorted = False
        self._marks.append((time_ns, kind, value))

    def _trim(self, now_ns: int) -> None:
        keep_ns = int(self.config.history_s * 1e9)
        while self._marks and self._marks[0][0] < now_ns - keep_ns:
            self._marks.popleft()
            if not self._marks:
                self._marks_sorted = True
        while self._gaps and self._gaps[0][1] < now_ns - keep_ns:
            self._gaps.popleft()

    @property
    def last_time_ns(self) -> int | None:
        """Monitor-time of the newest sample, or None."""
        return self._last_time_ns

    def flags(
        self, t_ns: int, other_moving: bool = True, now_ns: int | None = None, twin: "StreamHealth | None" = None,
        siblings: "Sequence[StreamHealth]" = (), dropout_only: bool = False,
    ) -> Sequence[HealthFlag]:
        """Return the flags of every detector at analysis time t_ns (only dropout's with
        ``dropout_only``); :data:`ALL_INACTIVE` (:data:`DROPOUT_INACTIVE`) itself when none is active.

        Args:
            t_ns: analysis time on the monitor time base.
            other_moving: whether the other side's stream changed around t (gates frozen
                and saturation).
            now_ns: the monitor's receive clock now. A gap still open at t is a dropout
                only if nothing of the stream was received for the same time either (a
                backlogged stream still delivers; a dropped one is silent).
            twin: the same stream of the other side. A gap the twin shares (or a silence
                it shares) is lost on the way to the monitor, not by the sensor.
            siblings: the other streams of the same side. A silence they all share is
                judged against ``side_silence_s`` (see FeatureConfig).
        """
        cfg = self.config
        # period_s's cached value read without the property call (four calls per grid time:
        # the call alone was 1% of a replay); period_s whenever it would do more.
        period = self._period_cache
        if period is None or self._since_period >= 16 or not self._intervals_q:
            period = self.period_s
        # Only a gap near t or a silence past the plain limit can raise dropout (the rules
        # of an open gap only raise the limit or zero the silence). Gaps end at the sample
        # that closed them, newer than every earlier one: the last gap ends last.
        last_time_ns = self._last_time_ns
        gaps = self._gaps
        if (gaps and t_ns <= gaps[-1][1] + self._hold_ns) or (
                period is not None and last_time_ns is not None
                and (t_ns - last_time_ns) * 1e-9 > cfg.dropout_periods * period):
            dropout = self._dropout(t_ns, self._hold_ns, period, now_ns, twin, siblings)
        else:
            dropout = _INACTIVE_DROPOUT
        if dropout_only:
            return DROPOUT_INACTIVE if dropout is _INACTIVE_DROPOUT else [dropout]

        nonfinite = _INACTIVE_NONFINITE
        frozen = _INACTIVE_FROZEN
        saturation = _INACTIVE_SATURATION
        marks = self._marks
        if marks:
            hold_ns = self._hold_ns
            # Newest first, stopping well before t: a constant stream marks every sample as
            # a repeat, and history_s of those is thousands (stamps going back are rare, and
            # the slack keeps the few out of order). Marks in time order end the scan at
            # t - hold: the older ones are all out of reach. Mostly the newest is already.
            stop_ns = t_ns - hold_ns if self._marks_sorted else t_ns - 2 * hold_ns - 1_000_000_000
            if marks[-1][0] >= stop_ns:
                nonfinite, frozen, saturation = self._mark_flags(t_ns, hold_ns, stop_ns, other_moving)

        table = self._jitter_table
        planned = table.get(self.sample_count) if table is not None else None
        # The usual planned statistics: no backwards stamp and a small MAD are inactive
        # whatever the interval count (the rules below, without counting).
        if (planned is not None and period is not None and not planned[2]
                and planned[1] / period <= cfg.jitter_mad_ratio):
            if (dropout is _INACTIVE_DROPOUT and nonfinite is _INACTIVE_NONFINITE and frozen is _INACTIVE_FROZEN
                    and saturation is _INACTIVE_SATURATION):
                return ALL_INACTIVE
            return [dropout, nonfinite, frozen, _INACTIVE_STAMP_JITTER, saturation]
        jitter = _INACTIVE_STAMP_JITTER
        # (moving pending rows for _jitter_stats below leaves the count as it is)
        count = self._stamp_interval_count()
        if period is not None and count >= cfg.jitter_window // 4:
            if planned is not None:
                center, mad, backwards = planned
            else:
                center, mad, backwards = _jitter_stats(self._stamp_intervals_s)
            mad_ratio = mad / period
            if mad_ratio > cfg.jitter_mad_ratio or backwards > 0.05 * count:
                delay_std = float(np.std(np.asarray(self._delays_s)))
                jitter = HealthFlag(
                    "stamp_jitter", True, _clip01(max(mad_ratio / (4 * cfg.jitter_mad_ratio), backwards / count)),
                    {"interval_mad_over_period": f"{mad_ratio:.3f}", "delay_std_s": f"{delay_std:.4f}",
                     "backwards_stamps": str(backwards)})
        return [dropout, nonfinite, frozen, jitter, saturation]

    def _mark_flags(self, t_ns: int, hold_ns: int, stop_ns: int,
                    other_moving: bool) -> tuple[HealthFlag, HealthFlag, HealthFlag]:
        """The nonfinite, frozen and saturation flags of :meth:`flags`, from the marks
        scanned newest first until one older than ``stop_ns``."""
        cfg = self.config
        nonfinite_active = False
        nonfinite_severity = 0.0
        repeat_max = 0.0
        saturated = False
        for time_ns, kind, value in reversed(self._marks):
            if time_ns < stop_ns:
                break
            if abs(time_ns - t_ns) > hold_ns:
                continue
            if kind == "nonfinite":
                nonfinite_active = True
                nonfinite_severity = max(nonfinite_severity, 0.5 + 0.5 * value)
            elif kind == "repeat":
                repeat_max = max(repeat_max, value)
            elif kind == "saturation":
                saturated = True
        nonfinite = _INACTIVE_NONFINITE
        if nonfinite_active:
            nonfinite = HealthFlag("nonfinite", True, nonfinite_severity, {"stream": self.name})

        frozen = _INACTIVE_FROZEN
        if repeat_max >= cfg.frozen_samples and other_moving:
            frozen = HealthFlag("frozen", True, _clip01(repeat_max / (4 * cfg.frozen_samples)),
                                {"identical_samples": str(int(repeat_max))})
        # A still arm holds its positions too: pinned is clipping only while the twin moves.
        saturation = HealthFlag("saturation", True, 1.0) if saturated and other_moving else _INACTIVE_SATURATION
        return nonfinite, frozen, saturation

    def _dropout(self, t_ns: int, hold_ns: int, period: float | None, now_ns: int | None,
                 twin: "StreamHealth | None", siblings: "Sequence[StreamHealth]") -> HealthFlag:
        """The dropout flag of :meth:`flags`."""
        cfg = self.config
        active = False
        severity = 0.0
        evidence: dict[str, str] = {}
        for start, end in self._gaps:
            if start - hold_ns <= t_ns <= end + hold_ns:
                if twin is not None and twin.has_gap(start - hold_ns, end + hold_ns):
                    continue
                active = True
                gap_s = (end - start) * 1e-9
                severity = _clip01(gap_s / (10 * cfg.dropout_periods * (period or 0.01)))
                evidence = {"gap_s": f"{gap_s:.3f}", "period_s": f"{period or 0:.4f}"}
        if period is not None and self._last_time_ns is not None:
            open_gap_s = (t_ns - self._last_time_ns) * 1e-9
            silent_s = open_gap_s
            limit_s = cfg.dropout_periods * period
            if now_ns is not None and self._last_recv_ns is not None:
                silent_s = (now_ns - self._last_recv_ns) * 1e-9
                # The rules below only raise the limit or zero the silence: they matter only
                # past the plain limit (most queries stop here).
                if open_gap_s > limit_s and silent_s > limit_s:
                    limit_s = max(limit_s, 1.2e-9 * self.burst_silence_ns(now_ns))
                    if (now_ns - self._first_recv_ns) * 1e-9 < cfg.warmup_s:
                        silent_s = 0.0
                    if twin is not None and twin._last_recv_ns is not None:
                        if (now_ns - twin._last_recv_ns) * 1e-9 > limit_s:
                            silent_s = 0.0  # the twin is silent too: nothing reaches the monitor
                    if siblings and all(sib._last_recv_ns is not None
                                        and (now_ns - sib._last_recv_ns) * 1e-9 > limit_s for sib in siblings):
                        limit_s = max(limit_s, cfg.side_silence_s)
            if min(open_gap_s, silent_s) > limit_s:
                active = True
                severity = max(severity, _clip01(open_gap_s / (10 * cfg.dropout_periods * period)))
                evidence = {"gap_s": f"{open_gap_s:.3f}", "open": "true", "period_s": f"{period:.4f}"}
        return HealthFlag("dropout", True, severity, evidence) if active else _INACTIVE_DROPOUT

    @property
    def delay_std_s(self) -> float | None:
        """Std of (recv - stamp) over the jitter window, or None when too few samples."""
        delays = self._delays_s
        if len(delays) < 4:
            return None
        return float(np.std(np.asarray(delays)))


@dataclass
class HealthMarks:
    """Marks :meth:`StreamHealth.add` would record for a whole stream fed from the start:
    per mark its row, kind and value, in feed order."""

    rows: list[int]
    kinds: list[str]
    values: list[float]


def _run_length(cond: np.ndarray) -> np.ndarray:
    """Length of the run of True ending at each row of ``cond`` (along axis 0)."""
    idx = np.arange(cond.shape[0]).reshape((-1,) + (1,) * (cond.ndim - 1))
    last_false = np.maximum.accumulate(np.where(cond, -1, idx), axis=0)
    return np.where(cond, idx - last_false, 0)


def plan_marks(config: FeatureConfig, values: np.ndarray) -> HealthMarks:
    """The nonfinite, saturation and repeat marks of rows ``values`` (n, w) fed in order
    to a fresh :class:`StreamHealth`, computed on whole columns (same rules as ``add``)."""
    v = np.asarray(values, dtype=float)
    n, width = v.shape
    # On the columns, each contiguous (one copy of the often strided block): the tests and
    # their reductions across columns run along whole columns, not along short rows.
    columns = np.ascontiguousarray(v.T)
    all_finite = np.logical_and.reduce(np.isfinite(columns), axis=0) if width else np.ones(n, dtype=bool)
    all_same = np.zeros(n, dtype=bool)
    repeats = np.zeros(width, dtype=np.intp)  # rows repeating each component
    if n > 1 and width:
        same = columns[:, 1:] == columns[:, :-1]
        np.logical_and.reduce(same, axis=0, out=all_same[1:])
        repeats = np.count_nonzero(same, axis=1)
    elif n > 1:
        all_same[1:] = True
    cond = all_same & all_finite
    # No repeated row (a moving stream): every run is empty.
    repeat_run = _run_length(cond) if cond.any() else np.zeros(n, dtype=np.intp)
    saturated = np.zeros(n, dtype=bool)
    # A component repeated in fewer rows than the limit cannot be pinned that long.
    cols = np.flatnonzero(repeats >= config.saturation_samples)
    if n > 1 and cols.size:
        sub = v[:, cols]
        same = np.zeros(sub.shape, dtype=bool)
        same[1:] = sub[1:] == sub[:-1]
        pinned = same & (sub != 0) & np.isfinite(sub)
        saturated[1:] = ~all_same[1:] & (_run_length(pinned).max(axis=1)[1:] >= config.saturation_samples)
    repeat = repeat_run + 1 >= config.frozen_samples
    rows: list[int] = []
    kinds: list[str] = []
    vals: list[float] = []
    marked = np.flatnonzero(~all_finite | saturated | repeat)
    frac = dict(zip(marked.tolist(), np.mean(~np.isfinite(v[marked]), axis=1).tolist(), strict=True)) if width else {}
    for i in marked.tolist():
        if not all_finite[i]:
            rows.append(i), kinds.append("nonfinite"), vals.append(frac[i])
        if saturated[i]:
            rows.append(i), kinds.append("saturation"), vals.append(1.0)
        if repeat[i]:
            rows.append(i), kinds.append("repeat"), vals.append(float(repeat_run[i] + 1))
    return HealthMarks(rows, kinds, vals)


def plan_jitter(health: StreamHealth, stamps_ns: np.ndarray, counts: np.ndarray) -> None:
    """Give a fresh tracker, to be fed ``stamps_ns`` in order (by :func:`add_planned`), the
    stamp-interval statistics ``flags`` computes (median, MAD, backwards count) at each
    sample count in ``counts``, on whole columns: same values as its sorted-list medians.

    Counts whose interval window is not yet full are left to ``flags``; a clock reset
    (``reset_stamps``) drops the table.
    """
    size = int(health.config.jitter_window)
    stamps = np.asarray(stamps_ns, dtype=np.int64)
    ds = np.diff(stamps).astype(np.float64) * 1e-9
    m = _unique(np.asarray(counts, dtype=np.int64).ravel())
    m = m[(m - 1 >= size) & (m <= stamps.size)]
    table = dict(health._jitter_table or {})
    if m.size:
        starts = m - 1 - size
        constant = _constant_windows(ds, starts, size)
        if constant.any():  # (a steady clock) the one value, no deviation
            value = ds[starts[constant]]
            table.update(zip(m[constant].tolist(), zip(value.tolist(), [0.0] * value.size,
                                                       np.where(value <= 0, size, 0).tolist(), strict=True),
                             strict=True))
            m, starts = m[~constant], starts[~constant]
        all_windows = np.lib.stride_tricks.sliding_window_view(ds, size)
        # In blocks of windows: small temporaries stay in cache (one block of all 3000 is megabytes).
        for a in range(0, starts.size, 128):
            windows = all_windows[starts[a:a + 128]]
            center = _row_medians(windows)
            deviations = windows - center[:, None]
            np.abs(deviations, out=deviations)
            mad = _row_medians(deviations)
            backwards = (windows <= 0).sum(axis=1)
            table.update(zip(m[a:a + 128].tolist(), zip(center.tolist(), mad.tolist(), backwards.tolist(),
                                                         strict=True), strict=True))
    health._jitter_table = table


@dataclass
class HealthRows:
    """The state :func:`add_planned` leaves after each row of a whole stream fed from a
    fresh tracker, on columns (see :func:`plan_rows`). The deques' contents are arrays
    indexed by row; the scalars are kept as the rows where they change, and
    :meth:`prepare` turns them into the state after given rows."""

    intervals: np.ndarray  # stamp interval of row i at index i - 1, s
    delays: np.ndarray  # receive minus stamp of row i, s
    appended: np.ndarray  # what entered the period window, in order
    appended_rows: np.ndarray  # the row of each entry
    cache_rows: np.ndarray  # rows whose gap check refreshed the period cache
    cache_values: np.ndarray  # the period then
    stamps: np.ndarray
    last_recv: np.ndarray  # newest receive time after row i
    last_time: np.ndarray  # newest monitor time after row i
    times: np.ndarray  # monitor time of row i
    burst_rows: np.ndarray  # rows that set the learned delivery silence
    burst_values: np.ndarray  # (silence_ns, at_ns) set there
    gap_rows: list[int]
    gaps: list[tuple[int, int]]
    states: dict[int, tuple[int, int, int, int, float | None, int, int, int]] = field(default_factory=dict)

    def prepare(self, rows: np.ndarray) -> None:
        """Compute :meth:`state` after each of ``rows`` at once."""
        i = _unique(np.asarray(rows, dtype=np.int64).ravel())
        i = i[i >= 0]
        if not i.size:
            return
        self.states.update(zip(i.tolist(), self._states(i), strict=True))

    def tick_states(self, cuts: np.ndarray) -> list[tuple[int, int, int, int, float | None, int, int, int] | None]:
        """:meth:`state` after row ``hi - 1`` for each ``hi`` of ``cuts`` (None where hi is 0),
        in the order of ``cuts``: one list, no table keyed by row."""
        hi = np.asarray(cuts, dtype=np.int64).ravel()
        out: list[tuple[int, int, int, int, float | None, int, int, int] | None] = list(
            self._states(np.maximum(hi - 1, 0)))
        for k in np.flatnonzero(hi <= 0).tolist():
            out[k] = None
        return out

    def _states(self, i: np.ndarray) -> Iterable[tuple[int, int, int, int, float | None, int, int, int]]:
        """The states after rows ``i`` (each >= 0), on columns."""
        count = np.searchsorted(self.appended_rows, i, side="right")
        refresh = np.searchsorted(self.cache_rows, i, side="right") - 1
        at_refresh = np.concatenate(([0], np.searchsorted(self.appended_rows, self.cache_rows, side="right")))
        since = count - at_refresh[refresh + 1]
        cache = np.concatenate(([np.nan], self.cache_values))[refresh + 1]
        burst = np.searchsorted(self.burst_rows, i, side="right") - 1
        values = np.concatenate((np.zeros((1, 2), dtype=np.int64), self.burst_values))[burst + 1]
        periods: list[float | None] = cache.tolist()
        for k in np.flatnonzero(np.isnan(cache)).tolist():  # no period learned yet
            periods[k] = None
        return zip(count.tolist(), self.stamps[i].tolist(), self.last_recv[i].tolist(), self.last_time[i].tolist(),
                   periods, since.tolist(), values[:, 0].tolist(), values[:, 1].tolist(), strict=True)

    def state(self, row: int) -> tuple[int, int, int, int, float | None, int, int, int]:
        """After ``row``: (period window entries, last stamp, last recv, last time, period
        cache, entries since its refresh, burst silence, burst time)."""
        state = self.states.get(row)
        if state is None:
            self.prepare(np.array([row]))
            state = self.states[row]
        return state


def _window_medians(values: np.ndarray, ends: np.ndarray, size: int) -> np.ndarray:
    """:func:`_median` of ``values[max(0, e - size):e]`` for each end e."""
    out = np.empty(len(ends))
    full = np.flatnonzero(ends >= size)
    if full.size:
        starts = ends[full] - size
        constant = _constant_windows(values, starts, size)
        out[full[constant]] = values[starts[constant]]
        full, starts = full[~constant], starts[~constant]
        all_windows = np.lib.stride_tricks.sliding_window_view(values, size)
        for a in range(0, full.size, 128):  # blocks: small temporaries stay in cache
            out[full[a:a + 128]] = _row_medians(all_windows[starts[a:a + 128]])
    for i in np.flatnonzero(ends < size).tolist():
        out[i] = _median(values[: int(ends[i])].tolist())
    return out


def plan_rows(config: FeatureConfig, stamps_ns: np.ndarray, recvs_ns: np.ndarray, times_ns: np.ndarray,
              max_restarts: int = 64) -> HealthRows | None:
    """Per-row tracker state of a whole stream fed in order to a fresh :class:`StreamHealth`
    (what :func:`add_planned` computes row by row), mostly on columns.

    The period window is the sequential part: an interval enters it unless it is a
    dropout against the period then learned, which is refreshed every 16 entries. It is
    solved assuming every positive interval enters, up to the first that should not;
    that one is skipped and the rest solved again. None after ``max_restarts`` skips
    (a stream of dropouts: the caller feeds it row by row).
    """
    stamps = np.asarray(stamps_ns, dtype=np.int64)
    recvs = np.asarray(recvs_ns, dtype=np.int64)
    times = np.asarray(times_ns, dtype=np.int64)
    n = stamps.size
    if n == 0:
        return None
    dropout, min_period, window = config.dropout_periods, config.min_period_s, int(config.period_window)
    ds = np.diff(stamps).astype(np.float64) * 1e-9  # row i's interval at i - 1
    cache_rows: list[int] = []  # rows whose gap check refreshed the period, with its value
    cache_values: list[float] = []
    # What entered the period window and the rows it came from, in order, one array per solved run.
    appended_runs: list[np.ndarray] = []
    appended_row_runs: list[np.ndarray] = []
    since = 0
    cache: float | None = None
    start = 1
    positive = np.flatnonzero(ds > 0) + 1  # rows with a positive interval
    restarts = 0
    while True:
        cand = positive[np.searchsorted(positive, start):]
        if cand.size == 0:
            break
        if cache is None:
            # The first interval enters unconditionally; its row's gap check learns the period
            # (the median of that one interval).
            row = int(cand[0])
            appended_row_runs.append(cand[:1])
            appended_runs.append(ds[row - 1:row])
            cache = max(min_period, float(ds[row - 1]))
            cache_rows.append(row)
            cache_values.append(cache)
            since = 0
            start = row + 1
            continue
        # Assume every candidate enters: refreshes after entries 16 - since, then every 16.
        values = ds[cand - 1]
        # The medians reach back at most one window before the candidates.
        before = np.concatenate(appended_runs)[-window:]
        total = np.concatenate((before, values))
        first_refresh = 16 - since  # 1-based position among the candidates
        refresh_pos = np.arange(first_refresh, cand.size + 1, 16)  # candidates (1-based) that refresh
        ends = before.size + refresh_pos
        periods = np.maximum(min_period, _window_medians(total, ends, window))
        # Period in effect at candidate i (0-based): the last refresh at a candidate before it
        # (refresh k at 1-based first_refresh + 16 k), else the current cache; runs of 16.
        effect = np.empty(cand.size)
        effect[:first_refresh] = cache
        effect[first_refresh:] = np.repeat(periods, 16)[:max(0, cand.size - first_refresh)]
        bad = np.flatnonzero(~(values < dropout * effect))
        stop = int(bad[0]) if bad.size else cand.size
        appended_row_runs.append(cand[:stop])
        appended_runs.append(values[:stop])
        done = refresh_pos[refresh_pos <= stop]
        if done.size:
            cache_rows.extend(cand[done - 1].tolist())
            cache_values.extend(periods[: done.size].tolist())
            cache = cache_values[-1]
            since = stop - int(done[-1])
        else:
            since += stop
        if stop == cand.size:
            break
        restarts += 1
        if restarts > max_restarts:
            return None
        start = int(cand[stop]) + 1  # the dropout interval stays out of the window
    appended = np.concatenate(appended_runs) if appended_runs else np.zeros(0)
    appended_at = np.concatenate(appended_row_runs) if appended_row_runs else np.zeros(0, dtype=np.int64)
    cache_at = np.asarray(cache_rows, dtype=np.int64)
    refreshed = np.zeros(n, dtype=np.int64)
    refreshed[cache_at] = 1  # (one refresh per row at most)
    refresh_idx = np.cumsum(refreshed) - 1  # the last refresh at or before each row
    cache_arr = np.where(refresh_idx >= 0, np.asarray([np.nan] + cache_values)[refresh_idx + 1], np.nan)
    last_time = np.maximum.accumulate(times)
    last_recv = np.maximum.accumulate(recvs)
    # Gaps: from the second row on, once the period is known, against the period after the row's refresh.
    gap_rows: list[int] = []
    gaps: list[tuple[int, int]] = []
    if n > 1:
        step = times[1:] - last_time[:-1]
        with np.errstate(invalid="ignore"):
            is_gap = step > dropout * cache_arr[1:] * 1e9
        for r in (np.flatnonzero(is_gap) + 1).tolist():
            gap_rows.append(r)
            gaps.append((int(last_time[r - 1]), int(times[r])))
    # Delivery bursts: rare candidates, in order.
    burst_rows: list[int] = []
    burst_values: list[tuple[int, int]] = []
    if n > 1:
        silence = recvs[1:] - last_recv[:-1]
        dstamp = stamps[1:] - stamps[:-1]
        maybe = np.flatnonzero((silence > 4 * dstamp) & (4 * dstamp > 0)) + 1
        burst_ns, burst_at = 0, 0
        memory_s = config.burst_memory_s
        for r in maybe.tolist():
            recv, sil = int(recvs[r]), int(silence[r - 1])
            decayed = 0
            if burst_ns:
                decayed = int(burst_ns * 0.5 ** ((max(0, recv - burst_at) * 1e-9) / memory_s))
            if sil > decayed:
                burst_ns, burst_at = sil, recv
                burst_rows.append(r)
                burst_values.append((burst_ns, burst_at))
    return HealthRows(
        intervals=ds, delays=(recvs - stamps).astype(np.float64) * 1e-9, appended=appended,
        appended_rows=appended_at, cache_rows=cache_at, cache_values=np.asarray(cache_values, dtype=np.float64),
        stamps=stamps, last_recv=last_recv, last_time=last_time, times=times,
        burst_rows=np.asarray(burst_rows, dtype=np.int64),
        burst_values=np.asarray(burst_values, dtype=np.int64).reshape(-1, 2), gap_rows=gap_rows, gaps=gaps,
    )


def add_planned(health: StreamHealth, marks: HealthMarks, lo: int, hi: int, stamps: Sequence[int],
                recvs: Sequence[int], times: Sequence[int], values: np.ndarray, rows: HealthRows | None = None) -> None:
    """Feed rows lo..hi-1 of a planned stream: the same state as ``add`` per row.

    ``values`` are the stream's rows; its times must be non-decreasing (then trimming
    once per block equals trimming per row). ``rows`` (from :func:`plan_rows`, the stream
    fed from a fresh tracker and only through here) gives the state after row hi - 1
    directly; else the whole-stream lists ``stamps``, ``recvs`` and ``times`` are fed.

    Raises:
        ConfigError: ``rows`` given for a tracker that was fed other samples too (the
            engine builds no whole-stream lists for a stream ``plan_rows`` planned).
    """
    if hi <= lo:
        return
    if rows is not None:
        add_rows(health, marks, lo, hi, values, rows)
        return
    cfg = health.config
    dropout, min_period, memory_s = cfg.dropout_periods, cfg.min_period_s, cfg.burst_memory_s
    stamp_iv, intervals, delays, gaps = health._stamp_intervals_s, health._intervals_s, health._delays_s, health._gaps
    # The tracker's state in locals (written back below): this loop runs per sample.
    last_stamp, last_recv, last_time = health._last_stamp_ns, health._last_recv_ns, health._last_time_ns
    cache, since = health._period_cache, health._since_period
    burst_ns, burst_at = health._burst_silence_ns, health._burst_at_ns
    for i in range(lo, hi):
        stamp, recv, t = stamps[i], recvs[i], times[i]
        if last_stamp is not None:
            ds = (stamp - last_stamp) * 1e-9
            stamp_iv.append(ds)
            if ds > 0:
                period = None
                if intervals:  # period_s
                    if cache is None or since >= 16:
                        cache, since = max(min_period, _median(intervals)), 0
                    period = cache
                if period is None or ds < dropout * period:
                    intervals.append(ds)
                    since += 1
        delays.append((recv - stamp) * 1e-9)
        if last_recv is None:
            health._first_recv_ns = last_recv = recv
        else:
            silence_ns = recv - last_recv
            if last_stamp is not None and silence_ns > 4 * (stamp - last_stamp) > 0:
                decayed = 0  # burst_silence_ns(recv)
                if burst_ns:
                    decayed = int(burst_ns * 0.5 ** ((max(0, recv - burst_at) * 1e-9) / memory_s))
                if silence_ns > decayed:
                    burst_ns, burst_at = silence_ns, recv
            if recv > last_recv:
                last_recv = recv
        last_stamp = stamp
        if last_time is not None:
            if intervals:  # period_s
                if cache is None or since >= 16:
                    cache, since = max(min_period, _median(intervals)), 0
                if t - last_time > dropout * cache * 1e9:
                    gaps.append((last_time, t))
            if t > last_time:
                last_time = t
        else:
            last_time = t
    health._last_stamp_ns, health._last_recv_ns, health._last_time_ns = last_stamp, last_recv, last_time
    health._period_cache, health._since_period = cache, since
    health._burst_silence_ns, health._burst_at_ns = burst_ns, burst_at
    health.sample_count += hi - lo
    a, b = bisect_left(marks.rows, lo), bisect_left(marks.rows, hi)
    for k in range(a, b):
        health._mark(times[marks.rows[k]], marks.kinds[k], marks.values[k])
    health._last_values_v = values[hi - 1]
    health._trim(times[hi - 1])


def add_rows(health: StreamHealth, marks: HealthMarks, lo: int, hi: int, values: np.ndarray,
             rows: HealthRows, state: tuple[int, int, int, int, float | None, int, int, int] | None = None) -> None:
    """:func:`add_planned` (hi > lo) from the planned per-row state (same deques, same
    scalars); ``state``: ``rows.state(hi - 1)`` when the caller has it (:meth:`HealthRows.tick_states`).

    The deques and the newest values are filled when read (``StreamHealth._sync``):
    consecutive calls only move the end of the pending rows.

    Raises:
        ConfigError: the tracker was fed other samples too (it does not hold ``lo``).
    """
    if health.sample_count != lo:
        raise ConfigError(f"planned rows of stream {health.name!r} fed from row {lo}, but its tracker holds "
                          f"{health.sample_count} samples: it was fed outside the plan")
    count, stamp, last_recv, last_time, cache, since, burst_ns, burst_at = (
        state or rows.states.get(hi - 1) or rows.state(hi - 1))
    if health._pending_rows is not rows:
        health._sync()  # rows of another plan (not in the engine) go in first
        health._pending_rows = rows
        health._pending_lo = lo
        health._pending_entry = rows.state(lo - 1)[0] if lo else 0
    if not lo:
        health._first_recv_ns = int(rows.last_recv[0])
    health._pending_count = count
    health._pending_values = values
    health._last_stamp_ns, health._last_recv_ns, health._last_time_ns = stamp, last_recv, last_time
    health._period_cache, health._since_period = cache, since
    health._burst_silence_ns, health._burst_at_ns = burst_ns, burst_at
    gap_rows = rows.gap_rows
    if gap_rows and gap_rows[-1] >= lo:  # (feeds move forward: past the last gap, none is left)
        a, b = bisect_left(gap_rows, lo), bisect_left(gap_rows, hi)
        if a < b:
            health._gaps.extend(rows.gaps[a:b])
    health.sample_count = hi
    if marks.rows:
        a, b = bisect_left(marks.rows, lo), bisect_left(marks.rows, hi)
        for k in range(a, b):
            health._mark(int(rows.times[marks.rows[k]]), marks.kinds[k], marks.values[k])
    if health._marks or health._gaps:
        health._trim(last_time)


@dataclass
class HealthTicks:
    """What :func:`add_ticks` feeds a tracker at each tick of a schedule (by index): the
    rows fed by then and the state :func:`add_rows` leaves after them."""

    health: StreamHealth
    marks: HealthMarks
    rows: HealthRows
    values: np.ndarray
    cuts: list[int]  # rows fed by each tick
    states: list[tuple[int, int, int, int, float | None, int, int, int] | None]  # rows.state(cut - 1)
    plain: list[bool]  # from the previous tick's cut on, rows without a gap or a mark (none at tick 0)


def plan_tick_feeds(health: StreamHealth, marks: HealthMarks, rows: HealthRows, values: np.ndarray,
                    cuts: np.ndarray) -> HealthTicks:
    """The feeds of a planned stream at ticks whose cuts (rows fed by each) are ``cuts``, non-decreasing."""
    hi = np.asarray(cuts, dtype=np.int64)
    plain = np.zeros(hi.size, dtype=bool)
    if hi.size > 1:
        gaps = np.searchsorted(np.asarray(rows.gap_rows, dtype=np.int64), hi)
        marked = np.searchsorted(np.asarray(marks.rows, dtype=np.int64), hi)
        plain[1:] = (hi[:-1] > 0) & (gaps[1:] == gaps[:-1]) & (marked[1:] == marked[:-1])
    return HealthTicks(health, marks, rows, values, hi.tolist(), rows.tick_states(hi), plain.tolist())


def add_ticks(feeds: Sequence[HealthTicks], k: int) -> None:
    """Feed tick k (> 0) of each planned stream fed through tick k - 1:
    ``add_rows(f.health, f.marks, f.cuts[k - 1], f.cuts[k], f.values, f.rows, f.states[k])``,
    inline where it only sets the tick's state (the usual tick: no gap, no mark to add or trim)."""
    for f in feeds:
        lo, hi = f.cuts[k - 1], f.cuts[k]
        if hi <= lo:
            continue
        health = f.health
        if (not f.plain[k] or health._pending_rows is not f.rows or health.sample_count != lo
                or health._marks or health._gaps):
            add_rows(health, f.marks, lo, hi, f.values, f.rows, f.states[k])
            continue
        (health._pending_count, health._last_stamp_ns, health._last_recv_ns, health._last_time_ns,
         health._period_cache, health._since_period, health._burst_silence_ns,
         health._burst_at_ns) = f.states[k]  # type: ignore[misc]
        health._pending_values = f.values
        health.sample_count = hi

