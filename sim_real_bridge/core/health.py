"""Stream health: is a stream wrong in itself (the evidence of ``sensor`` gaps).

One :class:`StreamHealth` per stream and side. Samples are taken in batches as they
arrive (:meth:`StreamHealth.add`), and marked at once, on whole columns:

- nonfinite: NaN or inf in a sample;
- frozen: ``frozen_samples`` or more bit-identical consecutive samples;
- saturation (force/torque streams only): one component pinned at the same non-zero
  value for ``saturation_samples`` samples while other components of the message vary
  (a sensor clipping at its range). Joint encoders are not judged: a quantized encoder
  holds one value while its joint creeps, which is its resolution, not a fault;
- gaps: an interval between samples longer than ``dropout_periods`` expected periods,
  the period being the running median of recent stamp intervals;
- sample loss: of the samples the last ``loss_window`` stamp intervals should have
  held at the stream's own period (its shortest mean interval while its stamps were
  steady), at least ``loss_share`` missing, the intervals whole periods (jittered
  stamps are not) and some still of one period (a stream that changed its rate has
  none); a twin losing as many lost them on the way.
  Reported as a dropout; it leaves the residuals usable (unlike a silence);
- stamp jitter: the median absolute deviation (MAD) of recent stamp intervals above
  ``jitter_mad_ratio`` periods or ``jitter_min_s`` (the smaller), and above
  ``jitter_noise_factor`` times the quietest MAD the stream has shown (a driver that
  stamps on receipt jitters by nature: that is its noise, not a fault); and stamps
  going backwards;
- delivery bursts: a silence of the receive clock after which the stamps continued
  (a backlog being delivered, not a lost stream).

:meth:`StreamHealth.flags` then answers, for a batch of analysis times and the times
they were decided (the monitor's clock), which detectors are active. Every rule is
causal: a flag at t rests on samples at or before t that had arrived by the decision.
A still robot holds its values: frozen and saturation count only while the other
side's twin stream moves (per component for saturation, so an idle joint that its
twin also holds still is not pinned); a frozen run, once its twin moved during it,
counts until it ends (a sensor that missed the motion has not reported since). A gap
the twin shares was lost on the way to the monitor, not by the sensor.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from sim_real_bridge.core.health_windows import (latched, marks_in, median_abs_deviation, per_window,
                                                  pinned_while_moving, run_length, window_ends, window_sum)
from sim_real_bridge.errors import ConfigError

DETECTORS: tuple[str, ...] = ("dropout", "sample_loss", "nonfinite", "frozen", "stamp_jitter", "saturation")
#: Detectors whose activity makes the stream untrustworthy (residuals built on it mean nothing).
#: Not stamp_jitter: a stamp off by milliseconds raises the residuals' noise, which the
#: attribution thresholds are scaled by, and leaves them usable.
UNTRUSTED: frozenset[str] = frozenset({"dropout", "nonfinite", "frozen"})
_NEVER = np.iinfo(np.int64).max


@dataclass
class FeatureConfig:
    """Thresholds of the stream health detectors (parameters ``engine.features.*``).

    Attributes:
        dropout_periods: a gap longer than this many expected periods is a dropout.
        min_period_s: floor on the learned period.
        period_window: number of recent stamp intervals the period median uses.
        frozen_samples: bit-identical consecutive samples needed to call a stream frozen.
        frozen_motion_threshold: the twin must change by more than this for a repeat to
            count as frozen.
        jitter_window: number of recent stamp intervals the jitter statistics use.
        jitter_mad_ratio: stamp-interval MAD over period above this is jitter (or above
            jitter_min_s, the smaller of the two).
        jitter_min_s: stamp-interval MAD above this is jitter on a slow stream.
        jitter_noise_factor: jitter needs a MAD this many times the stream's quietest.
        saturation_samples: identical non-zero samples of one component (others varying)
            needed for saturation.
        flag_hold_s: a flag raised by a sample stays visible this long after it.
        history_s: how much mark history a live monitor keeps.
        warmup_s: an open gap is not judged during the first warmup_s of a stream.
        burst_memory_s: half-life of the learned delivery silence: an open gap is a
            dropout only when longer than the silences after which the stream went on.
        side_silence_s: a silence every stream of the side shares is a dropout only once
            it lasts this long.
        loss_window: number of recent stamp intervals the sample loss counts over.
        loss_share: missing share of the expected samples that is a sample loss.
    """

    dropout_periods: float = 5.0
    min_period_s: float = 0.0005
    period_window: int = 101
    frozen_samples: int = 8
    frozen_motion_threshold: float = 1e-6
    jitter_window: int = 200
    jitter_mad_ratio: float = 0.25
    jitter_min_s: float = 0.0005
    jitter_noise_factor: float = 3.0
    saturation_samples: int = 25
    flag_hold_s: float = 0.1
    history_s: float = 5.0
    warmup_s: float = 2.0
    burst_memory_s: float = 10.0
    side_silence_s: float = 1.5
    loss_window: int = 50
    loss_share: float = 0.15

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid field."""
        for name in ("dropout_periods", "min_period_s", "jitter_mad_ratio", "jitter_min_s", "flag_hold_s", "history_s",
                     "warmup_s", "burst_memory_s", "side_silence_s", "loss_share"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"FeatureConfig.{name} must be > 0, got {getattr(self, name)}")
        for name in ("period_window", "frozen_samples", "jitter_window", "saturation_samples", "loss_window"):
            if int(getattr(self, name)) < 2:
                raise ConfigError(f"FeatureConfig.{name} must be >= 2, got {getattr(self, name)}")


@dataclass
class StreamFlags:
    """The detectors of one stream at K analysis times.

    Attributes:
        stream: e.g. "real/joint_states".
        active: detector -> (K,) bool.
        severity: detector -> (K,) float 0..1.
        detail: numbers for the evidence of active flags, name -> (K,) float.
    """

    stream: str
    active: dict[str, np.ndarray]
    severity: dict[str, np.ndarray]
    detail: dict[str, np.ndarray] = field(default_factory=dict)

    def any_active(self, among: Collection[str] | None = None) -> np.ndarray:
        """(K,) whether any detector (of ``among``, if given) is active."""
        out = np.zeros(len(next(iter(self.active.values()))), dtype=bool)
        for name, active in self.active.items():
            if among is None or name in among:
                out |= active
        return out

    def evidence(self, detector: str, k: int) -> dict[str, str]:
        """Evidence strings of an active detector at row k."""
        d = {name: float(values[k]) for name, values in self.detail.items()}
        if detector == "dropout":
            out = {"gap_s": f"{d['gap_s']:.3f}", "period_s": f"{d['period_s']:.4f}"}
            return {**out, "open": "true"} if d["gap_open"] else out
        if detector == "sample_loss":
            return {"lost_share": f"{d['lost_share']:.2f}", "period_s": f"{d['period_s']:.4f}"}
        if detector == "frozen":
            return {"identical_samples": str(int(d["identical_samples"]))}
        if detector == "stamp_jitter":
            return {"interval_mad_over_period": f"{d['mad_ratio']:.3f}", "quietest_mad_s": f"{d['quietest_mad_s']:.5f}",
                    "delay_std_s": f"{d['delay_std_s']:.4f}", "backwards_stamps": str(int(d["backwards"]))}
        return {}


def _lost_share(stats: np.ndarray) -> np.ndarray:
    """The lost-share column of ``stats_at`` rows (0 where unknown)."""
    return np.nan_to_num(stats[:, 7])


def _jitter_limit(cfg: FeatureConfig, period_s: np.ndarray, quietest_mad_s: np.ndarray) -> np.ndarray:
    """The stamp-interval MAD beyond which a stream jitters (see the module docstring)."""
    return np.maximum(np.minimum(cfg.jitter_mad_ratio * period_s, cfg.jitter_min_s),
                      cfg.jitter_noise_factor * quietest_mad_s)


class StreamHealth:
    """Health of one stream (one side, one topic).

    Args:
        config: detector thresholds.
        name: label used in evidence, e.g. "real/joint_states".
        judges_saturation: whether a pinned component is clipping (force/torque sensors).
    """

    def __init__(self, config: FeatureConfig, name: str, judges_saturation: bool = False) -> None:
        self.config = config
        self.name = name
        self.judges_saturation = judges_saturation
        self.sample_count = 0
        self._last_stamp: int | None = None
        self._last_values: np.ndarray | None = None
        self._repeat_run = 0
        self._frozen_latched, self._frozen_longest = False, 0.0  # (see _frozen)
        self._component_run: np.ndarray | int = 0
        self._positive = np.zeros(0)  # recent positive stamp intervals (s), for the period
        self._intervals = np.zeros(0)  # recent stamp intervals (s), for the jitter and the loss
        self._delays = np.zeros(0)  # recent receive delays (s)
        # Arrival order: receive time, newest mapped time so far.
        self.recv_ns = np.zeros(0, dtype=np.int64)
        self.newest_ns = np.zeros(0, dtype=np.int64)
        # Running statistics, as they stood at each refresh (its receive time).
        self._stats_recv = np.zeros(0, dtype=np.int64)
        # period_s, mad_s, backwards, count, delay_std_s, quietest_mad_s, own_period_s, lost_share
        self._stats = np.zeros((0, 8))
        self._marks: dict[str, tuple[np.ndarray, np.ndarray]] = {
            kind: (np.zeros(0, dtype=np.int64), np.zeros(0)) for kind in ("nonfinite", "frozen", "saturation")}
        self._gaps = np.zeros((0, 3), dtype=np.int64)  # start_ns, end_ns, end_recv_ns
        self._bursts = np.zeros((0, 2))  # recv_ns, log2(silence_ns) + recv_ns / memory

    @property
    def first_recv_ns(self) -> int | None:
        """Receive time of the first sample, or None."""
        return int(self.recv_ns[0]) if self.recv_ns.size else None

    def reset_stamps(self) -> None:
        """Forget stamp history (the side's clock was reset)."""
        self._last_stamp = None
        self._intervals = np.zeros(0)
        self._delays = np.zeros(0)

    def add(self, stamp_ns: np.ndarray, recv_ns: np.ndarray, time_ns: np.ndarray, values: np.ndarray) -> None:
        """Take a batch of samples in arrival order.

        Args:
            stamp_ns: (m,) the samples' own stamps.
            recv_ns: (m,) receive times (non-decreasing).
            time_ns: (m,) stamps mapped onto the monitor time base.
            values: (m, w) every numeric field the health looks at.
        """
        m = len(stamp_ns)
        if m == 0:
            return
        previous = self._last_stamp if self._last_stamp is not None else stamp_ns[0]
        steps = np.diff(np.concatenate(([previous], stamp_ns))).astype(float) * 1e-9
        has_step = np.ones(m, dtype=bool)
        has_step[0] = self._last_stamp is not None
        self._note_bursts(stamp_ns, recv_ns)
        period = self._add_stats(steps, has_step, (recv_ns - stamp_ns) * 1e-9, recv_ns)
        newest_before = int(self.newest_ns[-1]) if self.newest_ns.size else None
        newest = np.maximum.accumulate(time_ns if newest_before is None else np.maximum(time_ns, newest_before))
        previous = np.concatenate(([newest_before if newest_before is not None else time_ns[0]], newest[:-1]))
        gap = (time_ns - previous) * 1e-9 > self.config.dropout_periods * period
        if newest_before is None:
            gap[0] = False
        if gap.any():
            self._gaps = np.concatenate((self._gaps, np.column_stack((previous[gap], time_ns[gap], recv_ns[gap]))))
        self.recv_ns = np.concatenate((self.recv_ns, recv_ns))
        self.newest_ns = np.concatenate((self.newest_ns, newest))
        self._mark(time_ns, np.asarray(values, dtype=float))
        self._last_stamp = int(stamp_ns[-1])
        self.sample_count += m

    def _note_bursts(self, stamp_ns: np.ndarray, recv_ns: np.ndarray) -> None:
        """Record delivery silences after which the stamps went on contiguously."""
        if self.recv_ns.size and self._last_stamp is not None:
            stamps = np.concatenate(([self._last_stamp], stamp_ns))
            recvs = np.concatenate(([self.recv_ns[-1]], recv_ns))
        else:
            stamps, recvs = stamp_ns, recv_ns
        silence = np.diff(recvs)
        step = np.diff(stamps)
        burst = (silence > 4 * step) & (step > 0)
        if burst.any():
            memory_ns = self.config.burst_memory_s * 1e9
            at = recvs[1:][burst]
            keys = np.log2(silence[burst].astype(float)) + at / memory_ns
            self._bursts = np.concatenate((self._bursts, np.column_stack((at, keys))))

    def _add_stats(self, steps: np.ndarray, has_step: np.ndarray, delays_s: np.ndarray,
                   recv_ns: np.ndarray) -> np.ndarray:
        """Refresh the running period and jitter statistics; returns the period (s) in
        force before each sample of the batch."""
        cfg = self.config
        m = len(steps)
        intervals = np.concatenate((self._intervals, steps[has_step]))
        positive = np.concatenate((self._positive, steps[has_step & (steps > 0)]))
        delays = np.concatenate((self._delays, delays_s))
        prior = self._stats[-1, 0] if len(self._stats) else np.inf
        ends = window_ends(self.sample_count, m)
        if ends.size:
            # How many entries of each history the batch's samples up to each end brought.
            n_int = len(self._intervals) + np.cumsum(has_step)[ends]
            n_pos = len(self._positive) + np.cumsum(has_step & (steps > 0))[ends]
            n_del = len(self._delays) + ends + 1
            size = cfg.jitter_window
            period = per_window(positive, n_pos, cfg.period_window, lambda rows: np.median(rows, axis=1))
            mad = per_window(intervals, n_int, size, median_abs_deviation)
            backwards = per_window(intervals, n_int, size, lambda rows: np.sum(rows <= 0, axis=1))
            delay_std = per_window(delays, n_del, size, lambda rows: np.std(rows, axis=1))
            period = np.maximum(period, cfg.min_period_s)
            count = np.minimum(n_int, size)
            judged = np.where(count >= cfg.jitter_window // 4, mad, np.inf)
            quietest = np.minimum.accumulate(np.concatenate(([self._stats[-1, 5] if len(self._stats) else np.inf],
                                                             judged)))[1:]
            own, lost = self._loss_stats(intervals, n_int, period, mad, quietest)
            self._stats_recv = np.concatenate((self._stats_recv, recv_ns[ends]))
            self._stats = np.concatenate((self._stats, np.column_stack(
                (period, mad, backwards, count, delay_std, quietest, own, lost))))
        self._intervals = intervals[-max(cfg.jitter_window, cfg.loss_window):]
        self._positive = positive[-cfg.period_window:]
        self._delays = delays[-cfg.jitter_window:]
        if not ends.size:
            return np.full(m, prior)
        # The period in force before each sample: the previous refresh's.
        before = np.searchsorted(ends, np.arange(m), side="left") - 1
        return np.where(before >= 0, period[np.maximum(before, 0)], prior)

    def _loss_stats(self, intervals: np.ndarray, n_int: np.ndarray, period: np.ndarray, mad: np.ndarray,
                    quietest: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(own period, lost share) at each refresh: see the module docstring."""
        cfg = self.config
        size = cfg.loss_window
        count = np.minimum(n_int, size)
        span = window_sum(intervals, n_int, size)
        # The stream's own period: its mean interval where its stamps were as steady as
        # they get (losing samples only lengthens it; jitter leaves the mean alone)
        steady = (count >= size) & (mad <= _jitter_limit(cfg, period, quietest))
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(steady, span / count, np.inf)
        own = np.minimum.accumulate(np.concatenate(([self._stats[-1, 6] if len(self._stats) else np.inf], mean)))[1:]
        known = own[0] if np.isfinite(own[0]) else own[-1]
        # In whole periods: lost samples leave intervals of whole periods, some still of
        # one (a stream that changed its rate has none left of its old period)
        with np.errstate(invalid="ignore", divide="ignore"):
            periods = intervals / known
        nearest = np.round(periods)
        short = ~(nearest > cfg.dropout_periods)  # (a longer silence is a gap, the dropout detector's)
        whole, single, short_count, short_span = window_sum(np.column_stack((
            np.abs(periods - nearest) < 0.25, np.abs(periods - 1.0) < 0.25, short, np.where(short, intervals, 0.0))),
            n_int, size).T
        with np.errstate(invalid="ignore", divide="ignore"):
            lost = 1.0 - short_count * own / short_span
        lossy = (count >= size) & (whole >= 0.8 * count) & (single >= 0.1 * count) & np.isfinite(lost)
        return own, np.where(lossy, lost, 0.0)

    def _mark(self, time_ns: np.ndarray, values: np.ndarray) -> None:
        """Mark nonfinite, repeated (frozen) and pinned (saturated) samples."""
        cfg = self.config
        m, width = values.shape
        finite = np.isfinite(values)
        all_finite = finite.all(axis=1)
        previous = np.vstack((self._last_values if self._last_values is not None and
                              self._last_values.shape == (width,) else np.full(width, np.nan), values[:-1]))
        same = values == previous
        if not same.any() and all_finite.all():  # the usual batch: every value moved, no run goes on
            self._repeat_run, self._component_run = 0, 0
            self._last_values = values[-1].copy()
            return
        all_same = same.all(axis=1)
        repeat = run_length(all_same & all_finite, self._repeat_run)
        pinned = run_length(same & (values != 0) & finite, self._component_run)
        saturated_component = (pinned >= cfg.saturation_samples) & ~all_same[:, None]
        self._add_marks("nonfinite", time_ns[~all_finite], np.mean(~finite[~all_finite], axis=1))
        frozen = repeat + 1 >= cfg.frozen_samples
        self._add_marks("frozen", time_ns[frozen], (repeat[frozen] + 1).astype(float))
        if self.judges_saturation:
            rows, components = np.nonzero(saturated_component)
            self._add_marks("saturation", time_ns[rows], components.astype(float))
        self._repeat_run = int(repeat[-1])
        self._component_run = pinned[-1]
        self._last_values = values[-1].copy()

    def _add_marks(self, kind: str, time_ns: np.ndarray, values: np.ndarray) -> None:
        if not time_ns.size:
            return
        times, old = self._marks[kind]
        times, old = np.concatenate((times, time_ns)), np.concatenate((old, values))
        order = np.argsort(times, kind="stable")
        self._marks[kind] = (times[order], old[order])

    def trim(self, before_ns: int) -> None:
        """Forget marks, gaps and history older than before_ns (a live monitor's memory bound)."""
        for kind, (times, values) in self._marks.items():
            keep = times >= before_ns
            self._marks[kind] = (times[keep], values[keep])
        self._gaps = self._gaps[self._gaps[:, 1] >= before_ns]
        keep_rows = np.searchsorted(self.newest_ns, before_ns)
        keep_rows = max(0, min(keep_rows, len(self.recv_ns) - 2))
        self.recv_ns, self.newest_ns = self.recv_ns[keep_rows:], self.newest_ns[keep_rows:]
        stats_from = max(0, min(int(np.searchsorted(self._stats_recv, self.recv_ns[0] if self.recv_ns.size else 0)) - 1,
                                len(self._stats_recv) - 1))
        self._stats_recv, self._stats = self._stats_recv[stats_from:], self._stats[stats_from:]

    # ------------------------------------------------------------------ queries
    def last_recv_at(self, now_ns: np.ndarray) -> np.ndarray:
        """(K,) newest receive time at or before each now (int64 min when none)."""
        i = np.searchsorted(self.recv_ns, now_ns, side="right") - 1
        return np.where(i >= 0, self.recv_ns[np.maximum(i, 0)], np.iinfo(np.int64).min) \
            if self.recv_ns.size else np.full(len(now_ns), np.iinfo(np.int64).min)

    def newest_at(self, now_ns: np.ndarray) -> np.ndarray:
        """(K,) newest mapped time received by each now (int64 min when none)."""
        i = np.searchsorted(self.recv_ns, now_ns, side="right") - 1
        return np.where(i >= 0, self.newest_ns[np.maximum(i, 0)], np.iinfo(np.int64).min) \
            if self.recv_ns.size else np.full(len(now_ns), np.iinfo(np.int64).min)

    def stats_at(self, now_ns: np.ndarray) -> np.ndarray:
        """(K, 8) period_s, mad_s, backwards, count, delay_std_s, quietest_mad_s,
        own_period_s, lost_share as they stood at each now (NaN rows before the first
        refresh)."""
        i = np.searchsorted(self._stats_recv, now_ns, side="right") - 1
        out = np.full((len(now_ns), 8), np.nan)
        ok = i >= 0
        out[ok] = self._stats[i[ok]]
        return out

    def burst_silence_s(self, now_ns: np.ndarray) -> np.ndarray:
        """(K,) longest recent delivery silence after which the stamps went on, decayed
        with half-life burst_memory_s (0 when none)."""
        if not self._bursts.size:
            return np.zeros(len(now_ns))
        i = np.searchsorted(self._bursts[:, 0], now_ns, side="right") - 1
        best = np.maximum.accumulate(self._bursts[:, 1])
        exponent = best[np.maximum(i, 0)] - now_ns / (self.config.burst_memory_s * 1e9)
        return np.where(i >= 0, 2.0 ** exponent * 1e-9, 0.0)

    def gap_overlaps(self, start_ns: np.ndarray, end_ns: np.ndarray, now_ns: np.ndarray) -> np.ndarray:
        """(G,) whether this stream had a gap overlapping each [start, end] as seen at
        now, or was silent since before start (it shares the other stream's gap)."""
        silent = self.newest_at(now_ns) <= start_ns
        if not len(self._gaps):
            return silent
        gaps = self._gaps
        overlap = ((gaps[None, :, 0] <= end_ns[:, None]) & (gaps[None, :, 1] >= start_ns[:, None])
                   & (gaps[None, :, 2] <= now_ns[:, None]))
        return silent | overlap.any(axis=1)

    def flags(self, t_ns: np.ndarray, decision_ns: np.ndarray, twin_moving: np.ndarray | None,
              twin: StreamHealth | None = None, siblings: Sequence[StreamHealth] = (),
              dropout_only: bool = False) -> StreamFlags:
        """The detectors at analysis times t_ns, each decided at decision_ns (the monitor's clock).

        Args:
            t_ns: (K,) analysis times (monitor time base).
            decision_ns: (K,) when each was analysed.
            twin_moving: (K, w) whether each component of the other side's twin stream
                moved just before t (gates frozen and saturation); None: the twin is unknown.
            twin: the same stream of the other side (a gap it shares is not the sensor's).
            siblings: the other streams of this side (a silence they share is judged
                against side_silence_s).
            dropout_only: only the dropout detector (the sim side's streams).
        """
        k = len(t_ns)
        stats = self.stats_at(decision_ns)
        period_s = stats[:, 0]
        out = StreamFlags(self.name, {}, {}, {"period_s": np.nan_to_num(period_s)})
        self._dropout(t_ns, decision_ns, period_s, twin, siblings, out)
        if dropout_only:
            return out
        hold_ns = int(self.config.flag_hold_s * 1e9)
        lo_ns = t_ns - hold_ns
        moving = np.ones((k, 1), dtype=bool) if twin_moving is None else twin_moving
        times, values = self._marks["nonfinite"]
        active, worst = marks_in(times, values, lo_ns, t_ns)
        out.active["nonfinite"], out.severity["nonfinite"] = active, np.where(active, 0.5 + 0.5 * worst, 0.0)
        active, longest = self._frozen(lo_ns, t_ns, moving)
        out.active["frozen"] = active
        out.severity["frozen"] = np.where(active, np.clip(longest / (4 * self.config.frozen_samples), 0, 1), 0.0)
        out.detail["identical_samples"] = np.where(active, longest, 0.0)
        times, values = self._marks["saturation"]
        active = pinned_while_moving(times, values, lo_ns, t_ns, moving)
        out.active["saturation"], out.severity["saturation"] = active, active.astype(float)
        self._sample_loss(stats, decision_ns, twin, out)
        self._jitter(stats, out)
        return out

    def _frozen(self, lo_ns: np.ndarray, t_ns: np.ndarray, moving: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(K,) frozen, and the longest run of identical samples: a run counts once its twin
        moves during it, and goes on counting while it lasts (its twin may stop meanwhile: a
        sensor that missed the motion still has not reported since)."""
        times, values = self._marks["frozen"]
        present, longest = marks_in(times, values, lo_ns, t_ns)
        present &= longest >= self.config.frozen_samples
        goes_on = present & (longest >= np.concatenate(([self._frozen_longest], longest[:-1])))
        active = latched(present & moving.any(axis=1), goes_on, self._frozen_latched)
        if len(t_ns):
            self._frozen_latched, self._frozen_longest = bool(active[-1]), float(longest[-1])
        return active, longest

    def lost_share(self, decision_ns: np.ndarray) -> np.ndarray:
        """(K,) share of the expected samples missing from the last ``loss_window`` stamp
        intervals at the stream's own period (0 where the intervals are not whole periods)."""
        return _lost_share(self.stats_at(decision_ns))

    def _sample_loss(self, stats: np.ndarray, decision_ns: np.ndarray, twin: StreamHealth | None,
                     out: StreamFlags) -> None:
        share = _lost_share(stats)
        active = share >= self.config.loss_share
        if twin is not None and active.any():
            active &= twin.lost_share(decision_ns) < self.config.loss_share
        out.active["sample_loss"] = active
        out.severity["sample_loss"] = np.where(active, np.clip(share, 0, 1), 0.0)
        out.detail["lost_share"] = share

    def _jitter(self, stats: np.ndarray, out: StreamFlags) -> None:
        cfg = self.config
        period, mad, backwards, count, delay_std, quietest = stats[:, :6].T
        quietest = np.nan_to_num(quietest, posinf=0.0)  # none judged yet: no noise known
        limit = _jitter_limit(cfg, period, quietest)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = mad / period
            backwards_share = backwards / count
        active = (count >= cfg.jitter_window // 4) & ((mad > limit) | (backwards_share > 0.05))
        active &= ~out.active["sample_loss"]  # (intervals of lost samples spread as much)
        out.active["stamp_jitter"] = active
        severity = np.clip(np.maximum(mad / (4 * limit), backwards_share), 0, 1)
        out.severity["stamp_jitter"] = np.where(active, severity, 0.0)
        out.detail.update(mad_ratio=np.nan_to_num(ratio), delay_std_s=np.nan_to_num(delay_std),
                          backwards=np.nan_to_num(backwards), quietest_mad_s=quietest)

    def _dropout(self, t_ns: np.ndarray, decision_ns: np.ndarray, period_s: np.ndarray,
                 twin: StreamHealth | None, siblings: Sequence[StreamHealth], out: StreamFlags) -> None:
        """Closed gaps around t that had closed by the decision, and a silence still open then."""
        cfg = self.config
        k = len(t_ns)
        hold_ns = int(cfg.flag_hold_s * 1e9)
        active = np.zeros(k, dtype=bool)
        gap_s = np.zeros(k)
        gap_open = np.zeros(k)
        near = self._gaps[(self._gaps[:, 1] + hold_ns >= t_ns.min()) & (self._gaps[:, 0] <= t_ns.max())] \
            if k else self._gaps[:0]
        for start, end, end_recv in near.tolist():
            rows = np.flatnonzero((t_ns >= start) & (t_ns <= end + hold_ns) & (decision_ns >= end_recv))
            if rows.size and twin is not None:
                shared = twin.gap_overlaps(np.full(rows.size, start - hold_ns), np.full(rows.size, end + hold_ns),
                                           decision_ns[rows])
                rows = rows[~shared]
            active[rows] = True
            gap_s[rows] = (end - start) * 1e-9
        newest = self.newest_at(decision_ns)
        limit_s = cfg.dropout_periods * period_s
        with np.errstate(invalid="ignore"):
            open_s = np.where(newest > np.iinfo(np.int64).min, (t_ns - newest) * 1e-9, 0.0)
            silent_s = (decision_ns - self.last_recv_at(decision_ns)) * 1e-9
            candidate = np.flatnonzero((open_s > limit_s) & (silent_s > limit_s))
        if candidate.size:
            now = decision_ns[candidate]
            limit = np.maximum(limit_s[candidate], 1.2 * self.burst_silence_s(now))
            silent = np.where((now - (self.first_recv_ns or 0)) * 1e-9 < cfg.warmup_s, 0.0, silent_s[candidate])
            if twin is not None and twin.recv_ns.size:
                silent = np.where((now - twin.last_recv_at(now)) * 1e-9 > limit, 0.0, silent)
            if siblings:
                shared = np.ones(candidate.size, dtype=bool)
                for sibling in siblings:
                    shared &= (now - sibling.last_recv_at(now)) * 1e-9 > limit
                limit = np.where(shared, np.maximum(limit, cfg.side_silence_s), limit)
            hit = candidate[np.minimum(open_s[candidate], silent) > limit]
            active[hit] = True
            gap_s[hit] = open_s[hit]
            gap_open[hit] = 1.0
        out.active["dropout"] = active
        with np.errstate(invalid="ignore", divide="ignore"):
            severity = np.clip(gap_s / (10 * cfg.dropout_periods * period_s), 0, 1)
        out.severity["dropout"] = np.where(active, np.nan_to_num(severity, nan=1.0), 0.0)
        out.detail.update(gap_s=gap_s, gap_open=gap_open)
