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


@dataclass(frozen=True)
class FitConfig:
    """Fit window and delay grid (times in ns)."""

    window_ns: int
    step_ns: int
    delays_ns: np.ndarray
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
    # The delayed sim samples share their times (windows overlap, delays are grid steps): each once.
    query = times[:, None, :] - cfg.delays_ns[None, :, None]  # (F, D, n)
    unique, where = np.unique(query.ravel(), return_inverse=True)
    sim_q = sample(sim, unique, cfg.max_gap_ns, 3 * joints.sim_count)[:, joints.sim_index]
    sim_q = sim_q[where].reshape(query.shape + (-1,))  # (F, D, n, J)
    ok = np.isfinite(real_q).all(axis=2) & np.isfinite(sim_q).all(axis=(1, 3))  # (F, n)
    return _fit(real_q, sim_q, ok, cfg)


def _fit(real: np.ndarray, sim: np.ndarray, ok: np.ndarray, cfg: FitConfig) -> list[DelayFit | None]:
    """Least squares per window, delay and joint on the samples marked ok."""
    weight = ok.astype(float)  # (F, n)
    count = weight.sum(axis=1)  # (F,)
    covered = count >= MIN_COVERAGE * ok.shape[1]
    y = np.where(ok[:, :, None], real, 0.0)  # (F, n, J)
    x = np.where(ok[:, None, :, None], sim, 0.0)  # (F, D, n, J)
    safe = np.maximum(count, 1.0)
    yc = (y - (y.sum(axis=1) / safe[:, None])[:, None, :]) * weight[:, :, None]
    xc = (x - (x.sum(axis=2) / safe[:, None, None])[:, :, None, :]) * weight[:, None, :, None]
    syy = np.einsum("fnj,fnj->fj", yc, yc)[:, None, :]
    sxy = np.einsum("fdnj,fnj->fdj", xc, yc)
    sxx = np.einsum("fdnj,fdnj->fdj", xc, xc)  # (F, D, J)
    sxr = sxy - sxx  # sum of xc * (yc - xc)
    slope = np.where(sxx > 1e-12, sxr / np.maximum(sxx, 1e-12), 0.0)
    sse = np.maximum(syy - 2.0 * sxy + sxx - slope * sxr, 0.0)
    total = sse.sum(axis=2)  # (F, D)
    squares = ((y - x[:, 0]) ** 2).sum(axis=1)  # (F, J) residual at delay 0
    sst = squares.sum(axis=1)
    best = np.argmin(total, axis=1)
    rows = np.arange(len(best))
    worst = np.argmax(squares, axis=1)
    motion = np.sqrt(sxx[:, 0] / safe[:, None]).max(axis=1)  # std of the sim over the window
    size = safe * real.shape[2]
    with np.errstate(divide="ignore", invalid="ignore"):
        explained = np.nan_to_num(np.maximum(1.0 - total[rows, best] / sst, 0.0))
    out: list[DelayFit | None] = []
    for f in range(len(best)):
        if not covered[f]:
            out.append(None)
        elif sst[f] <= 0:
            out.append(DelayFit(0.0, 1.0, 1.0, 0.0, 0.0, False))
        elif motion[f] < cfg.min_motion_rad:
            # Without motion, delay and gain are not identifiable; only an offset is.
            out.append(DelayFit(0.0, 1.0, float(explained[f]), float(np.sqrt(sst[f] / size[f])),
                                float(np.sqrt(total[f, best[f]] / size[f])), False))
        else:
            out.append(DelayFit(float(cfg.delays_ns[best[f]] * 1e-9), float(1.0 + slope[f, best[f], worst[f]]),
                                float(explained[f]), float(np.sqrt(sst[f] / size[f])),
                                float(np.sqrt(total[f, best[f]] / size[f])), True))
    return out
