"""The delay/gain/offset fit of the real joints on the sim joints, over a recent window.

Per window ending at t and per joint: real(s) ~ sim(s - delay) + (gain - 1) (sim - mean)
+ offset for the samples s of the window, the delay chosen from a grid as the one that
leaves the least squared residual over all joints. What share of the residual the fit
explains tells actuation (delay, gain: explained) from anything else; the fitted
delays over the run are the latency estimate.

Windows are fitted many at once: every sample time of every window at every delay is
read from the buffers in one :func:`~sim_real_bridge.core.read_stage.sample` call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim_real_bridge.core.buffers import StreamBuffer
from sim_real_bridge.core.read_stage import JointMap, sample

#: Share of the window that must have both sides' joints for a fit.
MIN_COVERAGE = 0.8


@dataclass
class DelayFit:
    """Result of fitting real(t) ~ sim(t - delay) + (gain - 1) * (sim - mean) + offset."""

    delay_s: float = 0.0
    gain: float = 1.0
    explained: float = 0.0
    residual_rms_rad: float = 0.0
    fit_rms_rad: float = 0.0
    #: the sim moved enough over the window for delay and gain to be identifiable
    identifiable: bool = False
    #: share of what the common delay leaves unexplained that delays fitted joint by
    #: joint explain: a latency delays every joint alike (near 0), a softer position
    #: loop lags each joint by its own time constant
    joint_delay_share: float = 0.0


@dataclass(frozen=True)
class FitConfig:
    """Fit window and delay grid (times in ns)."""

    window_ns: int
    step_ns: int
    delay_step_ns: int
    delays_ns: np.ndarray  # 0, delay_step_ns, 2 * delay_step_ns, ...
    max_gap_ns: int
    min_motion_rad: float


def schedule(t_ns: np.ndarray, valid: np.ndarray, last_fit_ns: int | None, period_ns: int) -> list[int]:
    """Rows of a batch where a fit runs: the first valid row at least period_ns after the last fit."""
    rows = []
    for k in np.flatnonzero(valid).tolist():
        t = int(t_ns[k])
        if last_fit_ns is None or t - last_fit_ns >= period_ns:
            rows.append(k)
            last_fit_ns = t
    return rows


def fit_windows(t_ns: np.ndarray, sim: StreamBuffer, real: StreamBuffer, joints: JointMap,
                cfg: FitConfig) -> list[DelayFit | None]:
    """Fit the windows ending at each of t_ns (F,); None where too little of a window has both sides."""
    if not len(t_ns):
        return []
    n = max(8, cfg.window_ns // cfg.step_ns)
    times = t_ns[:, None] - np.arange(n)[::-1] * cfg.step_ns  # (F, n)
    real_q = sample(real, times.ravel(), cfg.max_gap_ns, 3 * joints.real_count)[:, joints.real_index]
    real_q = real_q.reshape(len(t_ns), n, -1)  # (F, n, J)
    # Every delayed sample time lies on one lattice (the grid step and the delay step are
    # multiples of its step): the sim is read once per lattice point, and each window's
    # (delays, samples) block is a strided view of those points.
    lattice = int(np.gcd(cfg.step_ns, cfg.delay_step_ns))
    step, delay_step = cfg.step_ns // lattice, cfg.delay_step_ns // lattice
    delays = len(cfg.delays_ns)
    first = int(t_ns.min()) - (n - 1) * cfg.step_ns - int(cfg.delays_ns[-1])
    count = (int(t_ns.max()) - first) // lattice + 1
    points = sample(sim, first + lattice * np.arange(count), cfg.max_gap_ns, 3 * joints.sim_count)
    points = np.ascontiguousarray(points[:, joints.sim_index])  # (P, J)
    rows, cols = points.strides
    span = (n - 1) * step + (delays - 1) * delay_step
    blocks = np.lib.stride_tricks.as_strided(
        points, shape=(count - span, delays, n, points.shape[1]),
        strides=(rows, delay_step * rows, step * rows, cols), writeable=False)
    # Block b holds, at (i, k), point b + i * delay_step + k * step: delay index D - 1 - i.
    sim_q = blocks[(t_ns - first) // lattice - span][:, ::-1]  # (F, D, n, J)
    ok = np.isfinite(real_q).all(axis=2) & np.isfinite(sim_q).all(axis=(1, 3))  # (F, n)
    return _fit(real_q, sim_q, ok, cfg)


def _fit(real: np.ndarray, sim: np.ndarray, ok: np.ndarray, cfg: FitConfig) -> list[DelayFit | None]:
    """Least squares per window, delay and joint on the samples marked ok (from sums, one pass each)."""
    count = ok.sum(axis=1).astype(float)  # (F,)
    covered = count >= MIN_COVERAGE * ok.shape[1]
    if ok.all():
        x, y = sim, real
    else:
        y = np.where(ok[:, :, None], real, 0.0)  # (F, n, J)
        x = np.where(ok[:, None, :, None], sim, 0.0)  # (F, D, n, J)
    safe = np.maximum(count, 1.0)[:, None]
    sum_x, sum_y = x.sum(axis=2), y.sum(axis=1)[:, None, :]  # (F, D, J), (F, 1, J)
    mean_x, mean_y = sum_x / safe[:, :, None], sum_y / safe[:, :, None]
    sxx = np.einsum("fdnj,fdnj->fdj", x, x) - sum_x * mean_x
    sxy = np.einsum("fdnj,fnj->fdj", x, y) - sum_x * mean_y
    syy = np.einsum("fnj,fnj->fj", y, y)[:, None, :] - sum_y * mean_y
    sxr = sxy - sxx  # sum of xc * (yc - xc)
    slope = np.where(sxx > 1e-12, sxr / np.maximum(sxx, 1e-12), 0.0)
    sse = np.maximum(syy - 2.0 * sxy + sxx - slope * sxr, 0.0)
    total = sse.sum(axis=2)  # (F, D)
    squares = ((y - x[:, 0]) ** 2).sum(axis=1)  # (F, J) residual at delay 0
    sst = squares.sum(axis=1)
    best = np.argmin(total, axis=1)
    rows = np.arange(len(best))
    worst = np.argmax(squares, axis=1)
    motion = np.sqrt(np.maximum(sxx[:, 0], 0.0) / safe).max(axis=1)  # std of the sim over the window
    size = safe[:, 0] * real.shape[2]
    with np.errstate(divide="ignore", invalid="ignore"):
        explained = np.nan_to_num(np.maximum(1.0 - total[rows, best] / sst, 0.0))
    residual_rms, fit_rms = np.sqrt(sst / size), np.sqrt(total[rows, best] / size)
    delay_s, gain = cfg.delays_ns[best] * 1e-9, 1.0 + slope[rows, best, worst]
    with np.errstate(divide="ignore", invalid="ignore"):
        joint_delay_share = np.nan_to_num(np.maximum(1.0 - sse.min(axis=1).sum(axis=1) / total[rows, best], 0.0))
    out: list[DelayFit | None] = []
    for f in range(len(best)):
        if not covered[f]:
            out.append(None)
        elif sst[f] <= 0:
            out.append(DelayFit(0.0, 1.0, 1.0, 0.0, 0.0, False))
        elif motion[f] < cfg.min_motion_rad:
            # Without motion, delay and gain are not identifiable; only an offset is.
            out.append(DelayFit(0.0, 1.0, float(explained[f]), float(residual_rms[f]), float(fit_rms[f]), False))
        else:
            out.append(DelayFit(float(delay_s[f]), float(gain[f]), float(explained[f]), float(residual_rms[f]),
                                float(fit_rms[f]), True, float(joint_delay_share[f])))
    return out
