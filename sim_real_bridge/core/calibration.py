"""Per-joint delay, gain and offset that best explain the free-space joint residual.

Model, per joint: ``q_real(t) = gain * q_sim(t - delay) + offset``. For each
candidate delay on a grid, gain and offset come from a closed-form least-squares
fit over the free-space samples; the delay with the smallest residual wins and is
refined to below the grid step by a parabola through the neighbouring costs.
``rms_before_rad`` (plain ``q_real - q_sim``) against ``rms_after_rad`` (residual of
the fitted model) tells how much of the divergence a delay/gain/offset change in
the simulator would remove.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

import numpy as np

from sim_real_bridge.errors import AlignmentError, ConfigError

__all__ = ["JointCalibration", "fit_joint_calibration"]


class JointCalibration(NamedTuple):
    """Fitted correction for one joint.

    Attributes:
        name: joint name.
        delay_s: real lags sim by this much, seconds.
        gain: real/sim amplitude ratio.
        offset_rad: constant real-minus-sim offset after the gain, radians.
        rms_before_rad: RMS of ``q_real - q_sim`` over the free-space samples.
        rms_after_rad: RMS of the residual after the fitted delay, gain and offset.
        n_samples: free-space samples used (NaN for every field if too few).
    """

    name: str
    delay_s: float
    gain: float
    offset_rad: float
    rms_before_rad: float
    rms_after_rad: float
    n_samples: int


def _fit_gain_offset(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least squares ``y = g x + o`` along the last axis of x (d, n), the same y (n,) for
    every row; returns (g, o, sse), each (d,).

    The sums over y run on x's shape (a view, nothing copied): einsum's summation order
    depends on the shape, and this keeps every value that of the row-by-row form.
    """
    n = x.shape[-1]
    xm = x.mean(axis=-1, keepdims=True)
    ym = y.mean(keepdims=True)
    dx = x - xm
    dy = np.broadcast_to(y - ym, x.shape)
    sxx = np.einsum("...i,...i->...", dx, dx)
    sxy = np.einsum("...i,...i->...", dx, dy)
    syy = np.einsum("...i,...i->...", dy, dy)
    # A motionless sim joint has no gain information: keep gain 1, fit the offset only.
    flat = sxx <= 1e-18 * max(n, 1)
    gain = np.where(flat, 1.0, sxy / np.where(flat, 1.0, sxx))
    offset = ym[0] - gain * xm[..., 0]
    sse = syy - gain * sxy
    if flat.any():
        rest = dy - dx
        sse = np.where(flat, np.einsum("...i,...i->...", rest, rest), sse)
    return gain, offset, np.maximum(sse, 0.0)


def fit_joint_calibration(
    stamp_ns: np.ndarray,
    q_sim: np.ndarray,
    q_real: np.ndarray,
    free_space_mask: np.ndarray,
    max_delay_ns: int,
    joint_names: Optional[Sequence[str]] = None,
    delay_step_ns: int = 1_000_000,
    min_samples: int = 20,
) -> list[JointCalibration]:
    """Fit delay, gain and offset per joint over the free-space samples.

    Args:
        stamp_ns: common (aligned) stamps, strictly increasing, shape (n,).
        q_sim: sim joint positions at those stamps, radians, shape (n, n_joints).
        q_real: real joint positions, radians, shape (n, n_joints).
        free_space_mask: True where the robot is out of contact, shape (n,).
        max_delay_ns: largest delay tried (delays from 0 to this).
        joint_names: names for the result (default ``joint_0``, ...).
        delay_step_ns: delay grid step before sub-step refinement.
        min_samples: joints with fewer usable free-space samples get NaN fields.

    Returns:
        One :class:`JointCalibration` per joint, in column order.

    Raises:
        AlignmentError: on inconsistent shapes or non-increasing stamps.
        ConfigError: on a negative ``max_delay_ns`` or non-positive step.
    """
    t, qs, qr, mask = _checked_arrays(stamp_ns, q_sim, q_real, free_space_mask)
    if int(max_delay_ns) < 0 or int(delay_step_ns) <= 0:
        raise ConfigError(
            f"fit_joint_calibration needs max_delay_ns >= 0 and delay_step_ns > 0, got "
            f"{max_delay_ns}, {delay_step_ns}"
        )
    n_joints = qs.shape[1]
    names = list(joint_names) if joint_names is not None else [f"joint_{j}" for j in range(n_joints)]
    if len(names) != n_joints:
        raise AlignmentError(f"fit_joint_calibration got {len(names)} names for {n_joints} joints")
    grid = _DelayGrid(t, int(max_delay_ns), int(delay_step_ns))
    # Only samples whose delayed instant still falls inside the recording are usable.
    usable = mask & (grid.t_rel - grid.delays[-1] >= 0.0)
    # One joint a contiguous row: its selections below are plain 1-D masks.
    qs_rows, qr_rows = qs.T.copy(), qr.T.copy()
    finite_all = np.isfinite(qs_rows) & np.isfinite(qr_rows)
    results = []
    for j in range(n_joints):
        finite = finite_all[j]
        sel = usable & finite
        n_sel = int(sel.sum())
        if n_sel < max(int(min_samples), 3) or int(finite.sum()) < 2:
            results.append(JointCalibration(names[j], math.nan, math.nan, math.nan, math.nan, math.nan, n_sel))
            continue
        results.append(_fit_joint(names[j], grid, sel, finite, qs_rows[j], qr_rows[j]))
    return results


def _checked_arrays(
    stamp_ns: np.ndarray, q_sim: np.ndarray, q_real: np.ndarray, free_space_mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The inputs as int64 stamps, (n, n_joints) float64 positions and a bool mask, checked."""
    t = np.asarray(stamp_ns, dtype=np.int64)
    qs = np.asarray(q_sim, dtype=np.float64)
    qr = np.asarray(q_real, dtype=np.float64)
    mask = np.asarray(free_space_mask, dtype=bool)
    if qs.ndim == 1:
        qs = qs[:, None]
    if qr.ndim == 1:
        qr = qr[:, None]
    if t.ndim != 1 or qs.shape != qr.shape or qs.shape[0] != t.shape[0] or mask.shape != t.shape:
        raise AlignmentError(
            f"fit_joint_calibration shapes disagree: stamps {t.shape}, q_sim {qs.shape}, "
            f"q_real {qr.shape}, mask {mask.shape}"
        )
    if t.size > 1 and not bool(np.all(np.diff(t) > 0)):
        raise AlignmentError("fit_joint_calibration stamps must be strictly increasing")
    return t, qs, qr, mask


class _DelayGrid:
    """The candidate delays and, per sample selection, the delayed sample times of the grid.

    Joints usually share their usable samples, so the delayed times of the last selection
    are kept and reused while the selection stays the same.
    """

    def __init__(self, t: np.ndarray, max_delay_ns: int, delay_step_ns: int) -> None:
        self.delays = np.arange(0, max_delay_ns + 1, delay_step_ns, dtype=np.float64)
        self.t_rel = (t - t[0]).astype(np.float64) if t.size else np.zeros(0)
        self._sel: np.ndarray | None = None
        self._times = np.zeros(0)

    def times(self, sel: np.ndarray) -> np.ndarray:
        """Delayed instants of the selected samples, (delays, selected) flattened."""
        if self._sel is None or not np.array_equal(self._sel, sel):
            self._sel, self._times = sel, (self.t_rel[sel][None, :] - self.delays[:, None]).ravel()
        return self._times


def _fit_joint(name: str, grid: _DelayGrid, sel: np.ndarray, finite: np.ndarray,
               q_sim_row: np.ndarray, q_real_row: np.ndarray) -> JointCalibration:
    """One joint's fit: best grid delay, refined by a parabola, then gain and offset there."""
    delays, t_rel = grid.delays, grid.t_rel
    src_t = t_rel[finite]
    src_q = q_sim_row[finite]
    y = q_real_row[sel]
    n_sel = y.size
    before = float(np.sqrt(np.mean((y - q_sim_row[sel]) ** 2)))

    def sse_at(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = np.interp((t_rel[sel][None, :] - d[:, None]).ravel(), src_t, src_q).reshape(d.size, -1)
        return _fit_gain_offset(x, y)

    _, _, sse = _fit_gain_offset(np.interp(grid.times(sel), src_t, src_q).reshape(delays.size, -1), y)
    k = int(np.argmin(sse))
    delay = _refine_delay(delays, sse, k)
    gain, offset, sse_best = sse_at(np.array([delay]))
    if sse_best[0] > sse[k]:  # the parabola overshot: keep the grid point
        delay = delays[k]
        gain, offset, sse_best = sse_at(np.array([delay]))
    after = float(np.sqrt(sse_best[0] / n_sel))
    return JointCalibration(name, float(delay) * 1e-9, float(gain[0]), float(offset[0]), before, after, n_sel)


def _refine_delay(delays: np.ndarray, sse: np.ndarray, k: int) -> float:
    """The vertex of the parabola through the best grid point's neighbours, within a step of it.

    At either end of the grid the parabola goes through the three end points, so a delay
    under half a step is refined too. Returns the grid delay when there is no minimum.
    """
    delay = delays[k]
    if delays.size < 3:
        return delay
    i = min(max(k, 1), delays.size - 2)
    c0, c1, c2 = sse[i - 1], sse[i], sse[i + 1]
    denom = c0 - 2.0 * c1 + c2
    if denom <= 0:
        return delay
    step = delays[1] - delays[0]
    vertex = delays[i] + 0.5 * step * (c0 - c2) / denom
    return float(np.clip(vertex, max(delays[0], delays[k] - step), min(delays[-1], delays[k] + step)))
