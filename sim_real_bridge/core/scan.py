"""The scan: one pass over the grid rows for what is causal and stateful.

The read stage gives every stream at a batch of grid times; what depends on the past
of the analysis itself is computed here, in order, over a named state that carries
from batch to batch (live: a few rows per batch; replay: thousands):

- smoothed residual magnitudes (exponential smoothing, vectorized with carried state);
- the noise of the joint and effort residuals, from their row-to-row differences: a gap
  changes a residual slowly, noise changes it every row, so a gap (even one present from
  the start, or a slow drift) does not raise the estimate; attribution sets its thresholds
  of those residuals in units of it;
- the tool's weight as the sim's free-space wrist force, and contact on each side
  (hysteresis on the force beyond that weight);
- the object's error growth and how far it wandered with nothing the sim models near it;
- per joint, how much of the effort residual is friction: a torque along the joint's
  motion that flips sign as the motion does (see :func:`friction`);
- stall timers per joint, the unexplained-residual timer, the latency estimate;
- attribution (:mod:`~sim_real_bridge.core.attribution`) and event debouncing.
"""

from __future__ import annotations

import math
from bisect import insort
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from scipy.signal import lfilter

from sim_real_bridge.core.attribution import (AttributionConfig, above_noise, attribute, tools_clear_of_object,
                                              untrusts_residuals)
from sim_real_bridge.core.fits import DelayFit
from sim_real_bridge.core.health import DETECTORS, UNTRUSTED, StreamFlags
from sim_real_bridge.core.load_reversal import LoadReversal
from sim_real_bridge.core.read_stage import Grid
from sim_real_bridge.core.tick_features import Attribution, TickFeatures

#: Fitted delays kept for the latency estimate (the newest).
LATENCY_DELAYS_KEPT = 2000
#: For white Gaussian noise of deviation sigma, E|x_k - x_(k-1)| = 2 sigma / sqrt(pi).
MEAN_ABS_DIFF_TO_SIGMA = math.sqrt(math.pi) / 2


@dataclass(frozen=True)
class ScanConfig:
    """What the scan needs of the engine config (times in ns unless named otherwise)."""

    dt_s: float
    dt_ns: int
    smooth_alpha: float
    noise_alpha: float
    weight_alpha: float
    contact_force_n: float
    contact_release_n: float
    contact_recent_ns: int
    contact_carry_ns: int
    contact_carry_min_ns: int
    object_lag_ns: int
    stall_speed_rad_s: float
    stall_sim_speed_rad_s: float
    friction_alpha: float
    attribution: AttributionConfig


@dataclass
class Smoothed:
    """Exponentially smoothed residuals at K rows (carried: the last row's)."""

    q_sq: np.ndarray | None = None  # (J,) of the squared joint residuals
    effort_sq: np.ndarray | None = None  # (J,)
    force_n: np.ndarray | None = None  # (3,) world-frame force residual
    torque_nm: np.ndarray | None = None  # (3,)


@dataclass
class FrictionState:
    """Carried smoothing of the per-joint regression of the effort residual on the joint's
    direction of motion (each (J,)), and that direction (held while the joint is still)."""

    motion_sign: np.ndarray | None = None
    sums: np.ndarray | None = None  # (5 J + 1,): E[m^2], E[m], E[e m], E[e], E[e^2], J each; the along share


@dataclass
class NoiseState:
    """What the noise estimate carries between batches, per residual (by output name)."""

    last_row: dict[str, np.ndarray] = field(default_factory=dict)  # (J,) the batch's last residuals
    mean_abs_diff: dict[str, np.ndarray] = field(default_factory=dict)  # (J,) smoothed |row-to-row change|
    rows_seen: dict[str, int] = field(default_factory=dict)  # rows in that smoothing so far


@dataclass
class ScanState:
    """Everything the scan carries from one row to the next."""

    smoothed: Smoothed = field(default_factory=Smoothed)
    noise: NoiseState = field(default_factory=NoiseState)
    friction: FrictionState = field(default_factory=FrictionState)
    tool_weight_n: dict[bool, tuple[float, float, float] | None] = field(
        default_factory=lambda: {True: None, False: None})  # by frame_world
    sim_contact: bool = False
    real_contact: bool = False
    sim_contact_last_ns: int | None = None
    in_contact_phase: bool = False
    contact_carry: str = ""  # the free-space cause carried through this contact phase
    object_history: deque = field(default_factory=deque)  # (t_ns, error vector) of recent rows
    object_last_error: tuple[float, float, float] | None = None
    object_free_drift_m: float = 0.0
    object_near_last_ns: int | None = None  # a tool (real or sim) last within object_touch_m
    load_dragged: bool | None = None  # see TickFeatures.load_dragged
    load_reversal: LoadReversal = field(default_factory=LoadReversal)
    stall_s: list[float] = field(default_factory=list)
    stall_effort: np.ndarray | None = None  # (J,) each joint's real effort as its stall began
    stall_driven: np.ndarray | None = None  # (J,) whether its drive pushed harder since
    fit: DelayFit | None = None
    unexplained_s: float = 0.0
    last_untrusted_ns: int | None = None
    last_wrench_untrusted_ns: int | None = None
    last_active_ns: dict[str, int] = field(default_factory=dict)
    active_since_ns: dict[str, int] = field(default_factory=dict)  # start of each category's active run
    established_ns: dict[str, int] = field(default_factory=dict)  # last active in a run of established_min_s
    last_kind: dict[str, str] = field(default_factory=dict)
    fitted_delays_s: deque = field(default_factory=lambda: deque(maxlen=LATENCY_DELAYS_KEPT))
    sorted_delays_s: list[float] = field(default_factory=list)
    latency: tuple[float, float] = (0.0, 0.0)  # median and std of the fitted delays (s)

    def add_delay(self, delay_s: float) -> None:
        """Count one fitted delay toward the latency estimate."""
        if len(self.fitted_delays_s) == self.fitted_delays_s.maxlen:
            self.sorted_delays_s.remove(self.fitted_delays_s[0])
        self.fitted_delays_s.append(delay_s)
        insort(self.sorted_delays_s, delay_s)
        ordered = self.sorted_delays_s
        mid = len(ordered) // 2
        median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        self.latency = (median, float(np.std(self.fitted_delays_s)))


@dataclass
class ScanRows:
    """Per-row results of a scan: contact phases, latency and the attribution."""

    sim_contact: np.ndarray
    sim_contact_recent: np.ndarray
    real_contact: np.ndarray
    latency_s: np.ndarray
    latency_std_s: np.ndarray
    verdicts: list[Attribution]


def ema(values: np.ndarray, valid: np.ndarray, alpha: float, carry: np.ndarray | None
        ) -> tuple[np.ndarray, np.ndarray | None]:
    """Exponential smoothing of the valid rows of values (K, w), held over the others.

    Returns (smoothed (K, w), zeros before the first value ever; the carry for the next batch).
    """
    rows = values[valid]
    if not len(rows):
        held = np.zeros(values.shape) if carry is None else np.broadcast_to(carry, values.shape).copy()
        return held, carry
    start = rows[0] if carry is None else carry
    out, _ = lfilter([alpha], [1.0, alpha - 1.0], rows, axis=0, zi=((1 - alpha) * start)[None, :])
    at = np.maximum.accumulate(np.where(valid, np.cumsum(valid) - 1, -1))
    before = np.zeros(values.shape[1]) if carry is None else carry
    smoothed = np.where((at >= 0)[:, None], out[np.maximum(at, 0)], before)
    return smoothed, out[-1]


def smooth(grid: Grid, state: Smoothed, alpha: float) -> dict[str, np.ndarray]:
    """Smoothed residual magnitudes at every row: joint, effort (L-inf over joints),
    force and torque norms, and the smoothed force vector."""
    valid = grid.joints_valid
    q_res = grid.q_res_rad
    effort = grid.effort_res
    q_sq, state.q_sq = ema(q_res * q_res, valid, alpha, state.q_sq)
    effort_sq, state.effort_sq = ema(np.where(np.isfinite(effort), effort * effort, 0.0), valid, alpha, state.effort_sq)
    force, state.force_n = ema(grid.force_res_n, grid.wrench_valid, alpha, state.force_n)
    torque, state.torque_nm = ema(grid.torque_res_nm, grid.wrench_valid, alpha, state.torque_nm)
    width = q_sq.shape[1] > 0
    return {
        "joint_residual_rad": np.sqrt(q_sq.max(axis=1)) if width else np.zeros(len(grid)),
        "effort_residual": np.sqrt(effort_sq.max(axis=1)) if width else np.zeros(len(grid)),
        "force_residual_n": np.linalg.norm(force, axis=1),
        "torque_residual_nm": np.linalg.norm(torque, axis=1),
        "external_force_n": force,
    }


def noise_levels(grid: Grid, state: NoiseState, alpha: float) -> dict[str, np.ndarray]:
    """Per row, the noise (standard deviation) of the noisiest joint's position residual
    (``joint_noise_rad``) and effort residual (``effort_noise``), learned online.

    The smoothing is bias-corrected as it starts (an average of the rows seen so far
    until there are about ``1 / alpha``), so it is the noise from the first rows on;
    before the first row-to-row change it is infinite (unknown).
    """
    out = {}
    for name, values in (("joint_noise_rad", grid.q_res_rad), ("effort_noise", grid.effort_res)):
        width = values.shape[1]
        last = state.last_row.get(name)
        if last is None or last.shape != (width,):  # the first batch, or another joint set
            last = np.full(width, np.nan)
            state.mean_abs_diff[name] = np.zeros(width)
            state.rows_seen[name] = 0
        diff = np.abs(values - np.vstack([last[None, :], values[:-1]]))
        usable = grid.joints_valid & np.isfinite(diff).any(axis=1)
        mean_abs, state.mean_abs_diff[name] = ema(np.where(np.isfinite(diff), diff, 0.0), usable, alpha,
                                                  state.mean_abs_diff[name])
        seen = state.rows_seen[name] + np.cumsum(usable)
        state.rows_seen[name] += int(usable.sum())
        with np.errstate(divide="ignore", invalid="ignore"):
            # before the first change the noise is unknown: nothing is judged against it
            unbiased = np.where(seen[:, None] > 0, mean_abs / (1.0 - (1.0 - alpha) ** seen[:, None]), np.inf)
        if len(values):
            state.last_row[name] = values[-1]
        out[name] = MEAN_ABS_DIFF_TO_SIGMA * unbiased.max(axis=1) if width else np.zeros(len(grid))
    return out


def friction(grid: Grid, state: FrictionState, alpha: float, moving_rad_s: float) -> dict[str, np.ndarray]:
    """Per row, the friction the effort residuals show: fitted joint by joint over an
    exponential window as ``e = c m + b``, with ``m`` the sign of the sim joint's last
    motion (faster than ``moving_rad_s``). Friction pushes back along the motion and flips
    with it (c > 0, b small); an external load does not flip (b). Only a joint that moved
    both ways within the window tells the two apart (``Var(m)`` > 0).

    Returns ``friction_nm``: the largest fitted c over the joints whose fit is friction
    (c > 0, |b| below c / 2, moved both ways), else 0; ``friction_share``: of the joint
    with the largest effort residual, the share of its mean square that ``c m`` carries
    (0 where that joint's fit is not friction); ``friction_along_share``: the share of the
    effort residuals' square that pushes back along the moving joints' motion, smoothed over
    the same window (friction drags every moving joint back, a load on a link drags some).
    """
    k_rows, width = grid.effort_res.shape
    if not width:
        return {"friction_nm": np.zeros(k_rows), "friction_share": np.zeros(k_rows),
                "friction_along_share": np.zeros(k_rows)}
    effort = grid.effort_res
    qd = grid.sim_qd_rad_s
    if state.motion_sign is None or state.motion_sign.shape != (width,):
        state.motion_sign, state.sums = np.zeros(width), None
    with np.errstate(invalid="ignore"):
        moving = np.abs(qd) > moving_rad_s
    last = np.maximum.accumulate(np.where(moving, np.arange(k_rows)[:, None], -1), axis=0)
    sign = np.take_along_axis(np.sign(np.nan_to_num(qd)), np.maximum(last, 0), axis=0)
    m = np.where(last >= 0, sign, state.motion_sign[None, :])
    state.motion_sign = m[-1] if k_rows else state.motion_sign
    valid = grid.joints_valid & np.isfinite(effort).all(axis=1)
    e = np.where(np.isfinite(effort), effort, 0.0)
    along = np.where(moving, np.clip(e * np.sign(np.nan_to_num(qd)), 0.0, None), 0.0)
    total = (e * e).sum(axis=1)
    along_share = np.where(total > 0, (along * along).sum(axis=1) / np.maximum(total, 1e-12), 0.0)
    stacked = np.concatenate([m * m, m, e * m, e, e * e, along_share[:, None]], axis=1)
    smoothed, state.sums = ema(stacked, valid, alpha, state.sums)
    mm, m1, em, e1, ee = (smoothed[:, i * width:(i + 1) * width] for i in range(5))
    var_m = mm - m1 * m1
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(var_m > 0.1, (em - e1 * m1) / var_m, 0.0)
        b = e1 - c * m1
        is_friction = (c > 0) & (np.abs(b) < 0.5 * c)
        share = np.where(is_friction, np.minimum(1.0, c * c * mm / np.maximum(ee, 1e-12)), 0.0)
    worst = np.argmax(ee, axis=1)[:, None]
    return {"friction_nm": np.where(is_friction, c, 0.0).max(axis=1),
            "friction_share": np.take_along_axis(share, worst, axis=1)[:, 0],
            "friction_along_share": smoothed[:, 5 * width]}


def _contact(state: ScanState, cfg: ScanConfig, frame_world: bool, sim_force: list[float],
             real_force: list[float], sim_ok: bool, real_ok: bool) -> tuple[float, float, float]:
    """Update the tool weight and both sides' contact; returns the sim's force beyond the weight."""
    weight = state.tool_weight_n[frame_world]
    if sim_ok:
        if weight is None:
            weight = tuple(sim_force)
        elif math.dist(sim_force, weight) < cfg.contact_release_n:
            a = cfg.weight_alpha
            weight = tuple((1 - a) * w + a * f for w, f in zip(weight, sim_force, strict=True))
        state.tool_weight_n[frame_world] = weight
    base = weight or (0.0, 0.0, 0.0)
    sim_beyond = (0.0, 0.0, 0.0)
    if sim_ok:
        sim_beyond = (sim_force[0] - base[0], sim_force[1] - base[1], sim_force[2] - base[2])
        state.sim_contact = math.hypot(*sim_beyond) > (cfg.contact_release_n if state.sim_contact
                                                       else cfg.contact_force_n)
    if real_ok:
        real_beyond = math.dist(real_force, base)
        state.real_contact = real_beyond > (cfg.contact_release_n if state.real_contact else cfg.contact_force_n)
    return sim_beyond


def _object(state: ScanState, cfg: ScanConfig, t: int, error: list[float], error_m: float,
            touched: bool, moved: bool) -> float:
    """Track the object's error; returns its growth rate (m/s, NaN when unknown).

    ``touched``: a modelled contact may touch the object; ``moved``: a tool is or was just
    now at the object or the sim's object moves. Either way the error's growth is no slip's.
    """
    if not math.isfinite(error_m):
        state.object_history.clear()
        state.object_last_error = None
        return math.nan
    history = state.object_history
    if touched or moved:
        history.clear()  # the growth rate of a slip counts only while nothing touches the object
    history.append((t, error))
    while len(history) > 1 and history[1][0] <= t - cfg.object_lag_ns:
        history.popleft()
    speed = math.nan
    t_old, e_old = history[0]
    if t - t_old >= cfg.object_lag_ns // 2:
        speed = math.dist(error, e_old) / ((t - t_old) * 1e-9)
    # How far the object wandered on its own (nothing the sim models touching it).
    if error_m < cfg.attribution.object_error_m:
        state.object_free_drift_m = 0.0
    elif not touched and state.object_last_error is not None:
        state.object_free_drift_m += math.dist(error, state.object_last_error)
    state.object_last_error = tuple(error)
    return speed


def _load_columns(grid: Grid, force: np.ndarray, cfg: ScanConfig) -> dict[str, np.ndarray]:
    """Per row: whether a wrist force of at least ``human_force_n`` acts, and the sim's and
    the real tool's speeds along its axis (the axis, not its sign: whether the sensor reads
    the force on the tool or its reaction)."""
    force_n = np.linalg.norm(force, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        axis = force / force_n[:, None]
        loaded = grid.wrench_valid & (force_n >= cfg.attribution.human_force_n)
    return {"loaded": loaded,
            "sim_along": np.abs(np.einsum("ij,ij->i", grid.sim_tip_velocity_m_s, axis)),
            "real_along": np.abs(np.einsum("ij,ij->i", grid.real_tip_velocity_m_s, axis))}


def _load(state: ScanState, cfg: ScanConfig, loaded: bool, sim_along: float, real_along: float) -> None:
    """While such a force lasts: whether, the last time the sim's tool moved along its axis,
    the real tool kept pace (dragging what pulls it) or fell behind (blocked by it)."""
    if not loaded:
        state.load_dragged = None
    elif sim_along >= cfg.attribution.load_moving_m_s:
        state.load_dragged = real_along >= cfg.attribution.dragged_speed_ratio * sim_along


def _contact_phase(state: ScanState, cfg: ScanConfig, t: int, in_contact: bool) -> None:
    """At the start of a sim contact phase, note the free-space cause active just before."""
    if in_contact and not state.in_contact_phase:
        # Active until at most contact_carry_ns ago, for a while (not a flicker).
        recent = [(last, c) for c, last in state.last_active_ns.items() if c in ("dynamics", "human")
                  and t - last <= cfg.contact_carry_ns and last - state.active_since_ns[c] >= cfg.contact_carry_min_ns]
        state.contact_carry = max(recent)[1] if recent else ""
    elif not in_contact:
        state.contact_carry = ""
    state.in_contact_phase = in_contact


def _stalls(state: ScanState, cfg: ScanConfig, names: tuple[str, ...], stalling: list[bool],
            slow_real: list[bool], real_effort: np.ndarray, sim_qd: np.ndarray,
            effort_noise: float) -> tuple[tuple[str, ...], float, bool]:
    """Advance the per-joint stall timers; a stalled joint stays so until it moves again.

    Also whether the longest-stalled joint's drive has not pushed harder along its twin's
    motion (by ``friction_min_nm``, raised to ``effort_noise``) since its stall began:
    stiction holds a joint until its drive pushes past it, a stalled drive gives nothing.
    """
    if not state.stall_s:
        state.stall_s = [0.0] * len(names)
        state.stall_effort = np.zeros(len(names))
        state.stall_driven = np.zeros(len(names), dtype=bool)
    minimum = cfg.attribution.stall_min_s
    was = state.stall_s
    state.stall_s = [s + cfg.dt_s if stall or (s >= minimum and slow) else 0.0
                     for s, stall, slow in zip(was, stalling, slow_real, strict=True)]
    if not any(state.stall_s):
        return (), 0.0, False
    now = np.asarray(state.stall_s)
    started = (np.asarray(was) == 0.0) & (now > 0.0)
    state.stall_effort = np.where(started, real_effort, state.stall_effort)
    pushed_nm = above_noise(cfg.attribution, cfg.attribution.friction_min_nm, effort_noise)
    with np.errstate(invalid="ignore"):
        pushed = (real_effort - state.stall_effort) * np.sign(sim_qd) >= pushed_nm
    # (an effort not read is no evidence that the drive gave nothing)
    state.stall_driven = np.where(started, ~np.isfinite(real_effort), state.stall_driven | pushed)
    stalled = tuple(name for name, s in zip(names, state.stall_s, strict=True) if s > 0)
    longest = int(np.argmax(now))
    return stalled, state.stall_s[longest], not bool(state.stall_driven[longest])


def _wrench_left_out(grid: Grid, state: ScanState, cfg: ScanConfig) -> np.ndarray:
    """(K,) rows at which the wrench is left out, as on a robot without one (the joints'
    efforts stand in): its stream untrusted, or recovering from it for sensor_recovery_s
    (its smoothing still holds the bad rows)."""
    untrusted = _untrusted_rows(grid, "wrench")
    if not len(untrusted) or (state.last_wrench_untrusted_ns is None and not untrusted.any()):
        return untrusted  # (nearly always: no fault so far)
    t = grid.t_ns
    before = t[0] if state.last_wrench_untrusted_ns is None else state.last_wrench_untrusted_ns
    seen = np.maximum.accumulate(untrusted | (state.last_wrench_untrusted_ns is not None))
    last = np.maximum.accumulate(np.where(untrusted, t, before))
    state.last_wrench_untrusted_ns = int(last[-1]) if seen[-1] else None
    return seen & ((t - last) * 1e-9 < cfg.attribution.sensor_recovery_s)


def _untrusted_rows(grid: Grid, topic: str) -> np.ndarray:
    """(K,) rows at which either side's ``topic`` is untrusted (an UNTRUSTED detector active)."""
    out = np.zeros(len(grid), dtype=bool)
    for side in ("sim", "real"):
        stream_flags = grid.flags.get(f"{side}/{topic}")
        if stream_flags is not None:
            out |= stream_flags.any_active(UNTRUSTED)
    return out


def sensor_flags(flags: dict[str, StreamFlags], k: int) -> list[tuple[str, float, dict[str, str]]]:
    """The active detectors at row k as (name, severity, evidence with the stream)."""
    out = []
    for stream, stream_flags in flags.items():
        for name in DETECTORS:
            active = stream_flags.active.get(name)
            if active is not None and active[k]:
                out.append((name, float(stream_flags.severity[name][k]),
                            {"stream": stream, **stream_flags.evidence(name, k)}))
    return out


def run(grid: Grid, fits: list[DelayFit | None], fit_rows: list[int], names: tuple[str, ...],
        state: ScanState, cfg: ScanConfig) -> ScanRows:
    """Scan the rows of a batch in order.

    Args:
        grid: the batch, health flags included.
        fits: the fits run in this batch, at rows ``fit_rows``.
        names: analysed joint names.
        state: carried from the previous batch; updated.
        cfg: scan parameters.
    """
    k_rows = len(grid)
    smoothed = smooth(grid, state.smoothed, cfg.smooth_alpha)
    fit_at = dict(zip(fit_rows, fits, strict=True))
    flagged = np.zeros(k_rows, dtype=bool)
    for stream_flags in grid.flags.values():
        flagged |= stream_flags.any_active()
    sim_qd, real_qd = np.abs(grid.sim_qd_rad_s), np.abs(grid.real_qd_rad_s)
    with np.errstate(invalid="ignore"):
        stalling = ((real_qd < cfg.stall_speed_rad_s) & (sim_qd > cfg.stall_sim_speed_rad_s)).tolist()
        slow_real = (real_qd < 2 * cfg.stall_speed_rad_s).tolist()
    ee_untrusted = _untrusted_rows(grid, "ee_pose")
    wrench_out = _wrench_left_out(grid, state, cfg)
    object_untrusted = _untrusted_rows(grid, "object_pose")
    ee_offset = np.where(ee_untrusted[:, None], np.nan, grid.ee_error_m)
    ee_error = np.linalg.norm(ee_offset, axis=1)
    object_error = np.where(object_untrusted[:, None], np.nan, grid.real_object[:, :3] - grid.sim_object[:, :3])
    object_error_m = np.linalg.norm(object_error, axis=1)
    real_tool_object_m = np.linalg.norm(grid.real_object[:, :3] - grid.real_ee[:, :3], axis=1)
    sim_tool_object_m = np.linalg.norm(grid.sim_object[:, :3] - grid.sim_ee[:, :3], axis=1)
    with np.errstate(invalid="ignore"):
        object_tool_m = np.abs(real_tool_object_m - sim_tool_object_m)
    object_tool_m[ee_untrusted | object_untrusted] = np.nan
    columns = dict(
        t=grid.t_ns.tolist(), valid=grid.joints_valid.tolist(), wrench_valid=(grid.wrench_valid & ~wrench_out).tolist(),
        frame_world=grid.frame_world.tolist(), sim_force=grid.sim_world_force_n.tolist(),
        real_force=grid.real_world_force_n.tolist(),
        sim_ok=np.isfinite(grid.sim_world_force_n).all(axis=1).tolist(),
        real_ok=np.isfinite(grid.real_world_force_n).all(axis=1).tolist(),
        object_error=object_error.tolist(), object_error_m=object_error_m.tolist(),
        object_tool_m=object_tool_m.tolist(), ee_error=ee_error.tolist(), ee_offset=ee_offset.tolist(),
        real_tool_object_m=real_tool_object_m.tolist(), sim_tool_object_m=sim_tool_object_m.tolist(),
        tools_clear=tools_clear_of_object(real_tool_object_m, sim_tool_object_m, cfg.attribution).tolist(),
        sim_object_moving=(grid.sim_object_speed_m_s > cfg.attribution.object_still_m_s).tolist(),
        **{name: values.tolist() for name, values in smoothed.items()},
        **{name: values.tolist() for name, values in _load_columns(grid, smoothed["external_force_n"], cfg).items()},
        **{name: values.tolist() for name, values in noise_levels(grid, state.noise, cfg.noise_alpha).items()},
        **{name: values.tolist() for name, values in friction(
            grid, state.friction, cfg.friction_alpha, cfg.stall_speed_rad_s).items()},
    )
    columns["external_force_n"] = np.where(wrench_out[:, None], np.nan, smoothed["external_force_n"]).tolist()
    out = ScanRows(*(np.zeros(k_rows, dtype=bool) for _ in range(3)), np.zeros(k_rows), np.zeros(k_rows), [])
    for k in range(k_rows):
        row = {name: values[k] for name, values in columns.items()}
        out.verdicts.append(_row(grid, k, row, stalling[k], slow_real[k], fit_at.get(k, _NO_FIT), flagged[k],
                                 names, state, cfg))
        out.sim_contact[k], out.real_contact[k] = state.sim_contact, state.real_contact
        out.sim_contact_recent[k] = (state.sim_contact_last_ns is not None
                                     and row["t"] - state.sim_contact_last_ns <= cfg.contact_recent_ns)
        out.latency_s[k], out.latency_std_s[k] = state.latency
    return out


_NO_FIT = object()


def _row(grid: Grid, k: int, row: dict, stalling: list[bool], slow_real: list[bool], fit: object, flagged: bool,
         names: tuple[str, ...], state: ScanState, cfg: ScanConfig) -> Attribution:
    """One grid time: the state's update, then the attribution."""
    t = row["t"]
    valid = row["valid"]
    sim_contact_force = _contact(state, cfg, row["frame_world"], row["sim_force"], row["real_force"],
                                 row["sim_ok"], row["real_ok"])
    sim_force_n = math.hypot(*sim_contact_force)
    if state.sim_contact:
        state.sim_contact_last_ns = t
    recent = state.sim_contact_last_ns is not None and t - state.sim_contact_last_ns <= cfg.contact_recent_ns
    _contact_phase(state, cfg, t, recent)
    if not row["tools_clear"]:
        state.object_near_last_ns = t
    # (an object a tool left a moment ago may still slide from its push)
    near = state.object_near_last_ns is not None and t - state.object_near_last_ns <= cfg.contact_recent_ns
    moved = near or row["sim_object_moving"]
    object_speed = _object(state, cfg, t, row["object_error"], row["object_error_m"], recent and near, moved)
    stalled, stall_s, undriven = (_stalls(state, cfg, names, stalling, slow_real, grid.real_effort[k],
                                          grid.sim_qd_rad_s[k], row["effort_noise"]) if valid else ((), 0.0, False))
    _load(state, cfg, row["loaded"], row["sim_along"], row["real_along"])
    if fit is not _NO_FIT:
        state.fit = fit  # type: ignore[assignment]
        if state.fit is not None and state.fit.identifiable:
            state.add_delay(state.fit.delay_s)
    attribution = cfg.attribution
    unexplained_rad = above_noise(attribution, attribution.unexplained_residual_rad, row["joint_noise_rad"])
    if (state.fit is not None and row["joint_residual_rad"] > unexplained_rad
            and state.fit.explained < attribution.dynamics_min_explained):
        state.unexplained_s += cfg.dt_s
    else:
        state.unexplained_s = 0.0
    flags = sensor_flags(grid.flags, k) if flagged else []
    if any(untrusts_residuals(name, evidence["stream"]) for name, _, evidence in flags):
        state.last_untrusted_ns = t
    features = TickFeatures(
        t_ns=t, joints_valid=valid, joint_residual_rad=row["joint_residual_rad"],
        effort_residual=row["effort_residual"], joint_noise_rad=row["joint_noise_rad"],
        effort_noise=row["effort_noise"], friction_nm=row["friction_nm"], friction_share=row["friction_share"],
        friction_along_share=row["friction_along_share"],
        force_residual_n=row["force_residual_n"],
        torque_residual_nm=row["torque_residual_nm"], sim_force_n=sim_force_n, sim_contact_force_n=sim_contact_force,
        external_force_n=row["external_force_n"], wrench_valid=row["wrench_valid"],
        sim_contact=state.sim_contact, sim_contact_recent=recent, real_contact=state.real_contact,
        sim_tip_velocity_m_s=grid.sim_tip_velocity_m_s[k], real_tip_velocity_m_s=grid.real_tip_velocity_m_s[k],
        ee_error_m=row["ee_error"], ee_offset_m=row["ee_offset"], object_error_m=row["object_error_m"],
        object_tool_error_m=row["object_tool_m"], object_error_speed_m_s=object_speed,
        object_free_drift_m=state.object_free_drift_m, real_tool_object_m=row["real_tool_object_m"],
        sim_tool_object_m=row["sim_tool_object_m"],
        sim_object_speed_m_s=float(grid.sim_object_speed_m_s[k]), stalled_joints=stalled, stall_s=stall_s,
        stall_undriven=undriven,
        fit=state.fit, unexplained_s=state.unexplained_s, sensor_flags=flags,
        since_untrusted_s=(t - state.last_untrusted_ns) * 1e-9 if state.last_untrusted_ns is not None else math.inf,
        since_active_s={c: (t - ns) * 1e-9 for c, ns in state.last_active_ns.items()},
        since_established_s={c: (t - ns) * 1e-9 for c, ns in state.established_ns.items()},
        last_kind=state.last_kind, contact_carry=state.contact_carry, load_dragged=state.load_dragged,
        load_reversed=state.load_reversal.reversed,
    )
    verdict = attribute(features, attribution)
    if "human" in verdict.active:
        state.load_reversal.add(grid.real_effort[k] - grid.sim_effort[k], cfg.dt_s, attribution)
    else:
        state.load_reversal.idle(cfg.dt_s, attribution)
    for category, (_, kind, _) in verdict.active.items():
        if (category == "unauthored" and verdict.tail) or category == verdict.kept:
            continue  # a tail is measured from the last direct evidence: it never extends itself
        if t - state.last_active_ns.get(category, t - 2 * cfg.dt_ns) > cfg.dt_ns:
            state.active_since_ns[category] = t
        state.last_active_ns[category] = t
        if t - state.active_since_ns[category] >= attribution.established_min_s * 1e9:
            state.established_ns[category] = t
        state.last_kind[category] = kind
    if state.in_contact_phase and "dynamics" in verdict.active:
        state.contact_carry = "dynamics"  # found in this contact: the phase's residual is its
    return verdict
