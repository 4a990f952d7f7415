"""Online estimates of the clock offset between the two streams and of the real robot's latency.

Clock offset: the only clock information a deployment has is each message's header
stamp and the monitor's receive time ``recv_ns`` (passed in; the core never reads a
clock). For each side, ``recv_ns - stamp_ns`` is that side's transport delay minus its
clock's lead over the monitor's clock. Queuing only ever adds delay, so the lower
envelope of ``recv_ns - stamp_ns`` (per-bucket minima, with a line fitted through
them for drift) tracks the clock lead plus the minimum transport delay. The offset
(sim clock minus real clock) is the difference of the two envelopes. The difference of
the two minimum transport delays cannot be observed from stamps alone; it ends up in
the offset, and from there in the latency estimate (their sum stays right).

Latency: the delay ``d`` that best explains ``q_real(t) = q_sim(t - d)`` on the
joint positions (real stamps already on the sim time base), searched on a grid and
refined to sub-millisecond by a parabola through the cost minimum; estimates are only
taken from windows with enough motion.
"""

from __future__ import annotations

import math
from collections import deque
from typing import NamedTuple, Optional

import numpy as np

from sim_real_bridge.errors import ConfigError

__all__ = [
    "ClockOffsetEstimator",
    "LatencyEstimate",
    "LatencyEstimator",
    "OffsetEstimate",
]


class OffsetEstimate(NamedTuple):
    """Clock offset estimate at a given receive time.

    Attributes:
        offset_ns: sim clock minus real clock, ns (add to a real stamp to get sim time).
        offset_std_ns: one-sigma uncertainty of ``offset_ns`` (statistical part only).
        drift_ppm: rate of change of the offset, parts per million.
        drift_std_ppm: one-sigma uncertainty of ``drift_ppm`` (inf until drift is fitted).
        valid: both sides have been seen since the last reset.
    """

    offset_ns: int
    offset_std_ns: float
    drift_ppm: float
    drift_std_ppm: float
    valid: bool


class _Envelope:
    """Lower envelope of ``recv_ns - stamp_ns`` for one side: bucket minima and a line."""

    def __init__(self, bucket_ns: int, n_buckets: int) -> None:
        self.bucket_ns = bucket_ns
        self.buckets: deque[tuple[int, int]] = deque(maxlen=n_buckets)
        self.clear()

    def clear(self) -> None:
        self.buckets.clear()
        self.bucket_start: Optional[int] = None
        self.cur_min: Optional[int] = None
        self.cur_min_recv = 0
        self.last_stamp: Optional[int] = None
        self.count = 0
        # Fit d(recv) = a + b * (recv - ref) in ns, with covariance terms.
        self.fit: Optional[tuple[float, float, int, float, float, float, float]] = None

    def predict_min(self, recv_ns: int) -> Optional[float]:
        if self.fit is not None:
            a, b, ref, _, _, _, _ = self.fit
            return a + b * (recv_ns - ref)
        return None if self.cur_min is None else float(self.cur_min)

    def add(self, delay_ns: int, recv_ns: int) -> None:
        self.count += 1
        if self.bucket_start is None:
            self.bucket_start = recv_ns
        elif recv_ns - self.bucket_start >= self.bucket_ns:
            if self.cur_min is not None:
                self.buckets.append((self.cur_min_recv, self.cur_min))
                self._refit()
            self.bucket_start = recv_ns
            self.cur_min = None
        if self.cur_min is None or delay_ns < self.cur_min:
            self.cur_min = delay_ns
            self.cur_min_recv = recv_ns

    def _refit(self) -> None:
        pts = np.array(self.buckets, dtype=np.float64)
        ref = int(self.buckets[-1][0])
        x = pts[:, 0] - ref
        y = pts[:, 1]
        n = len(y)
        if n < 3 or np.ptp(x) <= 0:
            level = float(np.min(y))
            spread2 = float(np.var(y)) if n > 1 else math.inf
            # m = inf marks a level without slope: sigma2 is then the level's variance.
            self.fit = (level, 0.0, ref, spread2, 0.0, 0.0, math.inf)
            return
        keep = np.ones(n, dtype=bool)
        for _ in range(2):
            b, a = np.polyfit(x[keep], y[keep], 1)
            resid = y - (a + b * x)
            med = np.median(resid[keep])
            mad = 1.4826 * np.median(np.abs(resid[keep] - med))
            # Minima pushed up by a burst of queuing lie above the envelope: drop them.
            new_keep = resid <= med + 3.0 * max(mad, 1.0)
            if new_keep.sum() < 3 or np.array_equal(new_keep, keep):
                break
            keep = new_keep
        b, a = np.polyfit(x[keep], y[keep], 1)
        xk = x[keep]
        m = len(xk)
        resid = y[keep] - (a + b * xk)
        sigma2 = float(resid @ resid) / max(m - 2, 1)
        x_mean = float(xk.mean())
        sxx = float(((xk - x_mean) ** 2).sum())
        self.fit = (float(a), float(b), ref, sigma2, x_mean, sxx, float(m))

    def variance_at(self, recv_ns: int) -> float:
        if self.fit is None:
            return math.inf
        _, _, ref, sigma2, x_mean, sxx, m = self.fit
        if math.isinf(m):
            return sigma2
        x = recv_ns - ref
        return sigma2 * (1.0 / m + (x - x_mean) ** 2 / sxx)

    def slope(self) -> tuple[float, float]:
        if self.fit is None or math.isinf(self.fit[6]):
            return 0.0, math.inf
        _, b, _, sigma2, _, sxx, _ = self.fit
        return b, math.sqrt(sigma2 / sxx)


class ClockOffsetEstimator:
    """Online offset (and drift) between the sim and real clocks, from stamps and receive times.

    Args:
        bucket_ns: width of the receive-time buckets whose minima form the envelope.
        window_buckets: buckets kept per side (window = bucket_ns * window_buckets).
        reset_threshold_ns: a stamp going back, or ``recv - stamp`` falling below the
            envelope, by more than this restarts that side's estimate (clock jump).
        sim_min_transport_ns: smallest sim-to-monitor delay, if known (e.g. measured);
            only the difference with ``real_min_transport_ns`` matters.
        real_min_transport_ns: smallest real-to-monitor delay, if known.

    Raises:
        ConfigError: if a parameter is out of range.
    """

    def __init__(
        self,
        bucket_ns: int = 500_000_000,
        window_buckets: int = 20,
        reset_threshold_ns: int = 500_000_000,
        sim_min_transport_ns: int = 0,
        real_min_transport_ns: int = 0,
    ) -> None:
        if int(bucket_ns) <= 0:
            raise ConfigError(f"ClockOffsetEstimator bucket_ns must be > 0, got {bucket_ns}")
        if int(window_buckets) < 2:
            raise ConfigError(f"ClockOffsetEstimator window_buckets must be >= 2, got {window_buckets}")
        if int(reset_threshold_ns) <= 0:
            raise ConfigError(
                f"ClockOffsetEstimator reset_threshold_ns must be > 0, got {reset_threshold_ns}"
            )
        self.reset_threshold_ns = int(reset_threshold_ns)
        self._transport_diff_ns = int(real_min_transport_ns) - int(sim_min_transport_ns)
        self._sim = _Envelope(int(bucket_ns), int(window_buckets))
        self._real = _Envelope(int(bucket_ns), int(window_buckets))
        self._last_recv = 0
        self.reset_count = 0

    def reset(self) -> None:
        """Forget both sides (counted in ``reset_count``, as automatic resets are)."""
        self._sim.clear()
        self._real.clear()
        self.reset_count += 1

    def update_sim(self, stamp_ns: int, recv_ns: int) -> None:
        """Record a sim message's header stamp and its receive time."""
        self._update(self._sim, int(stamp_ns), int(recv_ns))

    def update_real(self, stamp_ns: int, recv_ns: int) -> None:
        """Record a real message's header stamp and its receive time."""
        self._update(self._real, int(stamp_ns), int(recv_ns))

    def _update(self, env: _Envelope, stamp: int, recv: int) -> None:
        delay = recv - stamp
        jumped = env.last_stamp is not None and env.last_stamp - stamp > self.reset_threshold_ns
        if not jumped and env.count:
            floor = env.predict_min(recv)
            jumped = floor is not None and floor - delay > self.reset_threshold_ns
        if jumped:
            env.clear()
            self.reset_count += 1
        env.last_stamp = stamp
        env.add(delay, recv)
        if recv > self._last_recv:
            self._last_recv = recv

    @property
    def valid(self) -> bool:
        """Both sides have been seen since their last reset."""
        return self._sim.count > 0 and self._real.count > 0

    def offset_ns(self, recv_ns: Optional[int] = None) -> int:
        """Offset (sim minus real clock) at ``recv_ns`` (default: latest receive), 0 if not valid.

        The cheap call for every message; :meth:`estimate` adds drift and uncertainties.
        """
        if not self.valid:
            return 0
        recv = self._last_recv if recv_ns is None else int(recv_ns)
        env_sim = self._sim.predict_min(recv)
        env_real = self._real.predict_min(recv)
        return int(round(env_real - env_sim - self._transport_diff_ns))

    def estimate(self, recv_ns: Optional[int] = None) -> OffsetEstimate:
        """Offset, drift and their uncertainties at ``recv_ns`` (default: latest receive)."""
        recv = self._last_recv if recv_ns is None else int(recv_ns)
        if not self.valid:
            return OffsetEstimate(0, math.inf, 0.0, math.inf, False)
        env_sim = self._sim.predict_min(recv)
        env_real = self._real.predict_min(recv)
        offset = env_real - env_sim - self._transport_diff_ns
        var = self._sim.variance_at(recv) + self._real.variance_at(recv)
        b_sim, sb_sim = self._sim.slope()
        b_real, sb_real = self._real.slope()
        drift_ppm = (b_real - b_sim) * 1e6
        drift_std = math.hypot(sb_sim, sb_real) * 1e6
        return OffsetEstimate(int(round(offset)), math.sqrt(var), drift_ppm, drift_std, True)


_COARSE_SAMPLES = 128


class LatencyEstimate(NamedTuple):
    """Actuation latency of the real robot behind the sim.

    Attributes:
        latency_ns: estimated delay, ns (real follows the sim this much later).
        std_ns: one-sigma uncertainty, ns (inf until a window has been fitted).
        n_windows: windows that contributed since the last reset.
        valid: at least one window with enough motion has been fitted.
    """

    latency_ns: int
    std_ns: float
    n_windows: int
    valid: bool


class _Ring:
    """Fixed-capacity ring of (stamp_ns, row) kept in numpy arrays."""

    def __init__(self, capacity: int, width: int) -> None:
        self.t = np.zeros(capacity, dtype=np.int64)
        self.v = np.zeros((capacity, width), dtype=np.float64)
        self.start = 0
        self.size = 0

    def clear(self) -> None:
        self.start = 0
        self.size = 0

    def append(self, stamp: int, row: np.ndarray) -> None:
        cap = self.t.shape[0]
        k = (self.start + self.size) % cap
        self.t[k] = stamp
        self.v[k] = row
        if self.size < cap:
            self.size += 1
        else:
            self.start = (self.start + 1) % cap

    def last_stamp(self) -> Optional[int]:
        if not self.size:
            return None
        return int(self.t[(self.start + self.size - 1) % self.t.shape[0]])

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        idx = (self.start + np.arange(self.size)) % self.t.shape[0]
        return self.t[idx], self.v[idx]


class LatencyEstimator:
    """Online delay of the real joint positions behind the sim ones.

    Feed sim samples (sim time base) and real samples (already mapped to the sim time
    base by the clock offset); both carry the same joints in the same order (NaN for a
    joint a side lacks). Every ``update_every_ns`` of real data, the last ``window_ns``
    is searched for the delay minimizing the variance of ``q_real(t) - q_sim(t - d)``
    summed over moving joints (the variance, not the mean square, so a constant joint
    offset does not bias the delay). The reported latency is the median of the last
    ``n_keep`` window estimates.

    Args:
        n_joints: joints per sample.
        min_latency_ns: smallest delay searched (negative allows real ahead of sim).
        max_latency_ns: largest delay searched.
        window_ns: length of each fitted window.
        update_every_ns: real-data time between fits.
        step_ns: coarse search grid step.
        min_motion_rad: a joint counts as moving if its sim position spans this much
            in the window; windows without a moving joint are skipped.
        n_keep: window estimates combined into the reported one.
        max_buffer: samples kept per side (must cover ``window_ns + max_latency_ns`` of sim).
        reset_threshold_ns: a stamp going back by more than this on either side
            (a restart, or a new clock offset) resets the estimator.

    Raises:
        ConfigError: if a parameter is out of range.
    """

    def __init__(
        self,
        n_joints: int,
        min_latency_ns: int = -20_000_000,
        max_latency_ns: int = 200_000_000,
        window_ns: int = 2_000_000_000,
        update_every_ns: int = 500_000_000,
        step_ns: int = 2_000_000,
        min_motion_rad: float = 0.02,
        n_keep: int = 8,
        max_buffer: int = 4096,
        reset_threshold_ns: int = 1_000_000_000,
    ) -> None:
        if int(n_joints) < 1:
            raise ConfigError(f"LatencyEstimator n_joints must be >= 1, got {n_joints}")
        if int(max_latency_ns) <= int(min_latency_ns) + 2 * int(step_ns):
            raise ConfigError(
                f"LatencyEstimator needs max_latency_ns > min_latency_ns + 2 * step_ns, got "
                f"{min_latency_ns}..{max_latency_ns} step {step_ns}"
            )
        if int(step_ns) <= 0 or int(window_ns) <= 0 or int(update_every_ns) <= 0:
            raise ConfigError(
                f"LatencyEstimator step_ns, window_ns and update_every_ns must be > 0, got "
                f"{step_ns}, {window_ns}, {update_every_ns}"
            )
        if int(reset_threshold_ns) <= 0:
            raise ConfigError(f"LatencyEstimator reset_threshold_ns must be > 0, got {reset_threshold_ns}")
        if int(n_keep) < 1 or int(max_buffer) < 16:
            raise ConfigError(
                f"LatencyEstimator needs n_keep >= 1 and max_buffer >= 16, got {n_keep}, {max_buffer}"
            )
        self.n_joints = int(n_joints)
        self.min_latency_ns = int(min_latency_ns)
        self.max_latency_ns = int(max_latency_ns)
        self.window_ns = int(window_ns)
        self.update_every_ns = int(update_every_ns)
        self.step_ns = int(step_ns)
        self.min_motion_rad = float(min_motion_rad)
        self.reset_threshold_ns = int(reset_threshold_ns)
        self.reset_count = 0
        self._sim = _Ring(int(max_buffer), self.n_joints)
        self._real = _Ring(int(max_buffer), self.n_joints)
        self._estimates: deque[tuple[float, float]] = deque(maxlen=int(n_keep))
        self._next_update: Optional[int] = None
        self.n_windows = 0
        self.skipped_low_motion = 0

    def reset(self) -> None:
        """Forget all samples and estimates (counted in ``reset_count``)."""
        self.reset_count += 1
        self._sim.clear()
        self._real.clear()
        self._estimates.clear()
        self._next_update = None
        self.n_windows = 0

    def add_sim(self, stamp_ns: int, q_rad: np.ndarray) -> None:
        """Add a sim joint-position sample (sim time base); late stamps are ignored.

        A stamp more than ``reset_threshold_ns`` behind the last one (a sim restart)
        resets the estimator.
        """
        stamp = int(stamp_ns)
        last = self._sim.last_stamp()
        if last is not None and stamp <= last:
            if last - stamp <= self.reset_threshold_ns:
                return
            self.reset()
        self._sim.append(stamp, q_rad)

    def add_real(self, stamp_ns: int, q_rad: np.ndarray) -> bool:
        """Add a real sample (already on the sim time base); True if a window was fitted.

        Late stamps are ignored; a jump back beyond ``reset_threshold_ns`` resets.
        """
        stamp = int(stamp_ns)
        last = self._real.last_stamp()
        if last is not None and stamp <= last:
            if last - stamp <= self.reset_threshold_ns:
                return False
            self.reset()
        self._real.append(stamp, q_rad)
        if self._next_update is None:
            self._next_update = stamp + self.window_ns
            return False
        if stamp < self._next_update:
            return False
        self._next_update = stamp + self.update_every_ns
        return self._fit_window()

    def estimate(self) -> LatencyEstimate:
        """Median of the recent window estimates, with its uncertainty."""
        if not self._estimates:
            return LatencyEstimate(0, math.inf, self.n_windows, False)
        est = np.array(self._estimates)
        values = est[:, 0]
        latency = float(np.median(values))
        formal = float(np.sqrt(np.mean(est[:, 1] ** 2)))
        spread = float(np.std(values, ddof=1)) if len(values) > 1 else formal
        std = max(formal, spread) / math.sqrt(len(values))
        return LatencyEstimate(int(round(latency)), std, self.n_windows, True)

    def _fit_window(self) -> bool:
        real_t, real_q = self._real.arrays()
        sim_t, sim_q = self._sim.arrays()
        if sim_t.size < 4:
            return False
        t_end = real_t[-1]
        sel = (
            (real_t >= t_end - self.window_ns)
            & (real_t - self.max_latency_ns >= sim_t[0])
            & (real_t - self.min_latency_ns <= sim_t[-1])
        )
        if sel.sum() < 8:
            return False
        t_r = real_t[sel]
        q_r = real_q[sel]
        sim_span = sim_q[(sim_t >= t_r[0] - self.max_latency_ns) & (sim_t <= t_r[-1])]
        finite = np.all(np.isfinite(q_r), axis=0) & np.all(np.isfinite(sim_span), axis=0)
        moving = finite & (np.ptp(sim_span, axis=0) >= self.min_motion_rad if sim_span.size else False)
        joints = np.flatnonzero(moving)
        if joints.size == 0:
            self.skipped_low_motion += 1
            return False
        t_rel = (t_r - t_r[0]).astype(np.float64)
        sim_rel = (sim_t - t_r[0]).astype(np.float64)
        grid = np.arange(self.min_latency_ns, self.max_latency_ns + 1, self.step_ns, dtype=np.float64)
        # The coarse search only has to land in the right basin: a subsample will do.
        every = max(1, t_rel.size // _COARSE_SAMPLES)
        cost = self._cost(grid, t_rel[::every], q_r[::every], sim_rel, sim_q, joints)
        k = int(np.argmin(cost))
        k = min(max(k, 1), grid.size - 2)
        fine = np.linspace(grid[k - 1], grid[k + 1], 11)
        fine_cost = self._cost(fine, t_rel, q_r, sim_rel, sim_q, joints)
        m = int(np.argmin(fine_cost))
        m = min(max(m, 1), fine.size - 2)
        c0, c1, c2 = fine_cost[m - 1], fine_cost[m], fine_cost[m + 1]
        h = fine[1] - fine[0]
        curvature = (c0 - 2.0 * c1 + c2) / (h * h)
        if not curvature > 0:
            return False
        delta = 0.5 * h * (c0 - c2) / (c0 - 2.0 * c1 + c2)
        latency = fine[m] + float(np.clip(delta, -h, h))
        if latency < self.min_latency_ns or latency > self.max_latency_ns:
            return False
        # Gauss-Newton: var(d) = 2 sigma^2 / C'' with C the summed squared residual.
        n_res = t_r.size * joints.size
        sigma2 = max(float(c1), 0.0) / max(n_res - joints.size - 1, 1)
        std = math.sqrt(2.0 * sigma2 / curvature)
        self._estimates.append((latency, std))
        self.n_windows += 1
        return True

    @staticmethod
    def _cost(
        delays: np.ndarray,
        t_rel: np.ndarray,
        q_r: np.ndarray,
        sim_rel: np.ndarray,
        sim_q: np.ndarray,
        joints: np.ndarray,
    ) -> np.ndarray:
        """Summed (over joints) squared demeaned residual for each candidate delay."""
        query = (t_rel[None, :] - delays[:, None]).ravel()
        cost = np.zeros(delays.size)
        for j in joints:
            sim_at = np.interp(query, sim_rel, sim_q[:, j]).reshape(delays.size, -1)
            resid = q_r[None, :, j] - sim_at
            resid -= resid.mean(axis=1, keepdims=True)
            cost += np.einsum("ij,ij->i", resid, resid)
        return cost
