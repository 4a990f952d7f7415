"""Per-stream health trackers: is a stream wrong in itself (the evidence of `sensor` gaps).

Each tracker looks at one stream of one side (for example the real ``joint_states``) and
answers, for an analysis time t on the monitor time base, which pathologies are present
near t, each as a :class:`HealthFlag` (name, active, severity 0..1, evidence). Detectors:

- dropout: a gap between consecutive samples (or since the last one) longer than
  ``dropout_periods`` expected periods; the expected period is learned online as the
  median of recent stamp intervals;
- nonfinite: NaN or inf in a sample;
- frozen: ``frozen_samples`` or more bit-identical consecutive samples while the other
  side's stream moves (the engine passes that in);
- stamp_jitter: dispersion of the stamp intervals (median absolute deviation relative to
  the period) or of the receive-minus-stamp delay, above thresholds;
- saturation: one component pinned at the same non-zero value for ``saturation_samples``
  samples while other components of the same message vary (clipping).

F/T bias drift needs both sides and the contact phases, so it lives in
:class:`BiasDriftTracker`.

Trackers keep bounded history and never read a clock: every input carries its times.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

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
        jitter_delay_std_s: std of (recv - stamp) above this (and above
            ``jitter_delay_ratio`` times the other side's) is jitter.
        jitter_delay_ratio: see jitter_delay_std_s.
        saturation_samples: identical non-zero samples of one component (others varying)
            needed for saturation.
        flag_hold_s: a flag raised by a sample stays visible this long around it.
        history_s: how much sample history is kept for queries.
    """

    dropout_periods: float = 5.0
    min_period_s: float = 0.0005
    period_window: int = 101
    frozen_samples: int = 8
    frozen_motion_threshold: float = 1e-6
    jitter_window: int = 200
    jitter_mad_ratio: float = 0.25
    jitter_delay_std_s: float = 0.003
    jitter_delay_ratio: float = 3.0
    saturation_samples: int = 25
    flag_hold_s: float = 0.1
    history_s: float = 5.0

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid field."""
        for name in ("dropout_periods", "min_period_s", "jitter_mad_ratio", "jitter_delay_std_s",
                     "jitter_delay_ratio", "flag_hold_s", "history_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"FeatureConfig.{name} must be > 0, got {getattr(self, name)}")
        for name in ("period_window", "frozen_samples", "jitter_window", "saturation_samples"):
            if int(getattr(self, name)) < 2:
                raise ConfigError(f"FeatureConfig.{name} must be >= 2, got {getattr(self, name)}")


@dataclass
class HealthFlag:
    """One detector's verdict at a time: active flag, severity 0..1 and evidence."""

    name: str
    active: bool = False
    severity: float = 0.0
    evidence: dict[str, str] = field(default_factory=dict)


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
        self._last_values: np.ndarray | None = None
        self._intervals_s: deque[float] = deque(maxlen=config.period_window)
        self._delays_s: deque[float] = deque(maxlen=config.jitter_window)
        self._stamp_intervals_s: deque[float] = deque(maxlen=config.jitter_window)
        self._repeat_run = 0
        self._component_run: np.ndarray | None = None
        # (time_ns, kind) of flagged samples and (start_ns, end_ns) of gaps, on the monitor time base.
        self._marks: deque[tuple[int, str, float]] = deque()
        self._gaps: deque[tuple[int, int]] = deque()
        self._frozen_start_ns: int | None = None
        self._period_cache: float | None = None
        self._since_period = 0

    @property
    def period_s(self) -> float | None:
        """Learned expected sample period, or None before two samples."""
        if not self._intervals_s:
            return None
        # The median is refreshed every few intervals: it moves slowly and costs O(n).
        if self._period_cache is None or self._since_period >= 16:
            self._period_cache = max(self.config.min_period_s, float(np.median(self._intervals_s)))
            self._since_period = 0
        return self._period_cache

    def reset_stamps(self) -> None:
        """Forget stamp history (after a clock reset on this side)."""
        self._last_stamp_ns = None
        self._stamp_intervals_s.clear()
        self._delays_s.clear()

    def add(self, stamp_ns: int, recv_ns: int, time_ns: int, values: np.ndarray) -> None:
        """Record one sample.

        Args:
            stamp_ns: the message's own stamp.
            recv_ns: when the monitor received it.
            time_ns: the stamp mapped onto the monitor time base.
            values: every numeric field of the message, flattened.
        """
        cfg = self.config
        values = np.asarray(values, dtype=float).ravel()
        self.sample_count += 1
        if self._last_stamp_ns is not None:
            ds = (stamp_ns - self._last_stamp_ns) * 1e-9
            self._stamp_intervals_s.append(ds)
            if ds > 0:
                period = self.period_s
                if period is None or ds < cfg.dropout_periods * period:
                    self._intervals_s.append(ds)
                    self._since_period += 1
        self._delays_s.append((recv_ns - stamp_ns) * 1e-9)
        self._last_stamp_ns = stamp_ns
        if self._last_time_ns is not None:
            period = self.period_s
            gap_ns = time_ns - self._last_time_ns
            if period is not None and gap_ns > cfg.dropout_periods * period * 1e9:
                self._gaps.append((self._last_time_ns, time_ns))
        self._last_time_ns = time_ns if self._last_time_ns is None else max(self._last_time_ns, time_ns)

        if not np.all(np.isfinite(values)):
            self._marks.append((time_ns, "nonfinite", float(np.mean(~np.isfinite(values)))))
        prev = self._last_values
        if prev is not None and prev.shape == values.shape:
            same = values == prev
            if np.all(same) and np.all(np.isfinite(values)):
                self._repeat_run += 1
            else:
                self._repeat_run = 0
            if self._component_run is None or self._component_run.shape != values.shape:
                self._component_run = np.zeros(values.shape, dtype=int)
            pinned = same & (values != 0) & np.isfinite(values)
            self._component_run = np.where(pinned, self._component_run + 1, 0)
            if not np.all(same) and np.any(self._component_run >= cfg.saturation_samples):
                self._marks.append((time_ns, "saturation", 1.0))
        else:
            self._repeat_run = 0
        if self._repeat_run + 1 >= cfg.frozen_samples:
            self._marks.append((time_ns, "repeat", float(self._repeat_run + 1)))
        self._last_values = values
        self._trim(time_ns)

    def _trim(self, now_ns: int) -> None:
        keep_ns = int(self.config.history_s * 1e9)
        while self._marks and self._marks[0][0] < now_ns - keep_ns:
            self._marks.popleft()
        while self._gaps and self._gaps[0][1] < now_ns - keep_ns:
            self._gaps.popleft()

    @property
    def last_time_ns(self) -> int | None:
        """Monitor-time of the newest sample, or None."""
        return self._last_time_ns

    def flags(self, t_ns: int, other_moving: bool = True, other_delay_std_s: float | None = None) -> list[HealthFlag]:
        """Return the flags of every detector at analysis time t_ns.

        Args:
            t_ns: analysis time on the monitor time base.
            other_moving: whether the other side's stream changed around t (gates frozen).
            other_delay_std_s: std of the other side's (recv - stamp), to compare jitter.
        """
        cfg = self.config
        hold_ns = int(cfg.flag_hold_s * 1e9)
        period = self.period_s
        out = []

        dropout = HealthFlag("dropout")
        for start, end in self._gaps:
            if start - hold_ns <= t_ns <= end + hold_ns:
                dropout.active = True
                gap_s = (end - start) * 1e-9
                dropout.severity = _clip01(gap_s / (10 * cfg.dropout_periods * (period or 0.01)))
                dropout.evidence = {"gap_s": f"{gap_s:.3f}", "period_s": f"{period or 0:.4f}"}
        if period is not None and self._last_time_ns is not None:
            open_gap_s = (t_ns - self._last_time_ns) * 1e-9
            if open_gap_s > cfg.dropout_periods * period:
                dropout.active = True
                dropout.severity = max(dropout.severity, _clip01(open_gap_s / (10 * cfg.dropout_periods * period)))
                dropout.evidence = {"gap_s": f"{open_gap_s:.3f}", "open": "true", "period_s": f"{period:.4f}"}
        out.append(dropout)

        nonfinite = HealthFlag("nonfinite")
        repeat_max = 0.0
        saturated = False
        for time_ns, kind, value in self._marks:
            if abs(time_ns - t_ns) > hold_ns:
                continue
            if kind == "nonfinite":
                nonfinite.active = True
                nonfinite.severity = max(nonfinite.severity, 0.5 + 0.5 * value)
            elif kind == "repeat":
                repeat_max = max(repeat_max, value)
            elif kind == "saturation":
                saturated = True
        if nonfinite.active:
            nonfinite.evidence = {"stream": self.name}
        out.append(nonfinite)

        frozen = HealthFlag("frozen")
        if repeat_max >= cfg.frozen_samples and other_moving:
            frozen.active = True
            frozen.severity = _clip01(repeat_max / (4 * cfg.frozen_samples))
            frozen.evidence = {"identical_samples": str(int(repeat_max))}
        out.append(frozen)

        jitter = HealthFlag("stamp_jitter")
        if len(self._stamp_intervals_s) >= cfg.jitter_window // 4 and period is not None:
            iv = np.asarray(self._stamp_intervals_s)
            mad_ratio = float(np.median(np.abs(iv - np.median(iv)))) / period
            backwards = int(np.sum(iv <= 0))
            delay_std = float(np.std(np.asarray(self._delays_s)))
            delay_flag = delay_std > cfg.jitter_delay_std_s and (
                other_delay_std_s is None or delay_std > cfg.jitter_delay_ratio * other_delay_std_s
            )
            if mad_ratio > cfg.jitter_mad_ratio or backwards > 0.05 * iv.size or delay_flag:
                jitter.active = True
                jitter.severity = _clip01(max(mad_ratio / (4 * cfg.jitter_mad_ratio),
                                              delay_std / (4 * cfg.jitter_delay_std_s)))
                jitter.evidence = {"interval_mad_over_period": f"{mad_ratio:.3f}",
                                   "delay_std_s": f"{delay_std:.4f}", "backwards_stamps": str(backwards)}
        out.append(jitter)

        saturation = HealthFlag("saturation", active=saturated, severity=1.0 if saturated else 0.0)
        out.append(saturation)
        return out

    @property
    def delay_std_s(self) -> float | None:
        """Std of (recv - stamp) over the jitter window, or None when too few samples."""
        if len(self._delays_s) < 4:
            return None
        return float(np.std(np.asarray(self._delays_s)))


class BiasDriftTracker:
    """F/T bias of the real sensor, learned while both sides are in free space.

    The residual force (real minus sim) is low-pass filtered only on samples where
    neither side is in contact and the joints agree (so the arm is not being pushed);
    a bias estimate that departs from the one learned at the start of the run is drift.

    Args:
        tau_s: time constant of the low-pass filter of the free-space residual.
        threshold_n: bias change (norm) above which the drift flag is active.
        full_scale_n: bias change at which severity reaches 1.
    """

    def __init__(self, tau_s: float = 0.5, threshold_n: float = 1.5, full_scale_n: float = 8.0) -> None:
        if not (tau_s > 0 and threshold_n > 0 and full_scale_n > 0):
            raise ConfigError(
                f"BiasDriftTracker needs tau_s, threshold_n, full_scale_n > 0, got {tau_s}, {threshold_n}, {full_scale_n}"
            )
        self.tau_s = tau_s
        self.threshold_n = threshold_n
        self.full_scale_n = full_scale_n
        self.bias_n = np.zeros(3)
        self._baseline_n: np.ndarray | None = None
        self._free_s = 0.0
        self._last_t_ns: int | None = None

    def update(self, t_ns: int, force_residual_n: np.ndarray, free_and_quiet: bool) -> None:
        """Feed one analysis sample of the force residual (real minus sim)."""
        dt_s = 0.0 if self._last_t_ns is None else max(0.0, (t_ns - self._last_t_ns) * 1e-9)
        self._last_t_ns = t_ns
        if not free_and_quiet or not np.all(np.isfinite(force_residual_n)):
            return
        alpha = 1.0 if self._free_s == 0.0 else min(1.0, dt_s / self.tau_s)
        self.bias_n = (1 - alpha) * self.bias_n + alpha * np.asarray(force_residual_n, dtype=float)
        self._free_s += dt_s
        if self._baseline_n is None and self._free_s >= 2 * self.tau_s:
            # Nominal: the sim model equals the real sensor, so the baseline is (near) zero;
            # a bias present from the start is still reported once it exceeds the threshold.
            self._baseline_n = np.zeros(3)

    @property
    def drift_n(self) -> np.ndarray:
        """Estimated bias change since the baseline, shape (3,)."""
        if self._baseline_n is None:
            return np.zeros(3)
        return self.bias_n - self._baseline_n

    def flag(self) -> HealthFlag:
        """Return the drift flag for the current estimate."""
        drift = float(np.linalg.norm(self.drift_n))
        out = HealthFlag("ft_bias_drift")
        if drift > self.threshold_n:
            out.active = True
            out.severity = _clip01(drift / self.full_scale_n)
            out.evidence = {"bias_n": np.array2string(self.drift_n, precision=2)}
        return out
