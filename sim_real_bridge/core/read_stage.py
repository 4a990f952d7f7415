"""The read stage: every stream sampled at a batch of grid times, as named columns.

This is the product's aligner. Each stream's samples (already on the monitor time base,
see :mod:`~sim_real_bridge.core.clock`) are linearly interpolated at the grid times,
never across a gap longer than ``max_interp_gap_s``; a stream that had not reached a
grid time when it was analysed (a stall) holds its newest value for up to that gap and
is unknown after. Wrenches are compared as means over a short window (contact
chatters), and in the world frame when an end-effector orientation is known.

Everything here is a function of the buffers and the times: no state, no loop over
grid times. :func:`read_grid` is what the engine calls; :func:`sample` is the aligner
the message_filters front end uses too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sim_real_bridge.core.buffers import StreamBuffer
from sim_real_bridge.core.health import StreamFlags, StreamHealth


@dataclass
class SideStreams:
    """One side's streams (None where the side has no such topic)."""

    joints: StreamBuffer | None = None  # (q, qd, effort) per joint, in the side's own joint order
    joint_health: StreamHealth | None = None
    wrench: StreamBuffer | None = None  # force (3), torque (3), sensor frame
    wrench_health: StreamHealth | None = None
    ee_pose: StreamBuffer | None = None  # position (3), orientation wxyz (4), world frame; finite rows only
    ee_pose_health: StreamHealth | None = None  # every row, non-finite ones included
    object_pose: StreamBuffer | None = None
    object_pose_health: StreamHealth | None = None


@dataclass(frozen=True)
class JointMap:
    """Joints analysed: their names and their columns in each side's joint rows.

    Attributes:
        names: (J,) analysed joint names (the sim side's).
        sim_index: (J,) position of each in the sim side's joint order.
        real_index: (J,) position of each in the real side's joint order.
        sim_count: joints of the sim side's messages.
        real_count: joints of the real side's messages.
    """

    names: tuple[str, ...]
    sim_index: np.ndarray
    real_index: np.ndarray
    sim_count: int
    real_count: int


@dataclass(frozen=True)
class ReadConfig:
    """What the read stage needs of the engine config (times in ns)."""

    max_gap_ns: int
    wrench_window_ns: int
    tip_window_ns: int
    object_window_ns: int
    moving_window_ns: int
    moving_threshold: float
    stall_speed_rad_s: float
    stall_sim_speed_rad_s: float


@dataclass
class Grid:
    """Both sides at K grid times: samples, residuals (real minus sim) and health.

    Joint arrays are (K, J) in the :class:`JointMap` order; NaN where unknown.
    Wrench arrays are window means; ``*_world_force_n`` are rotated to the world frame
    by the end effector's orientation (``frame_world`` False: both left in the sensor frame).
    """

    t_ns: np.ndarray
    decision_ns: np.ndarray
    sim_q_rad: np.ndarray
    real_q_rad: np.ndarray
    sim_qd_rad_s: np.ndarray
    real_qd_rad_s: np.ndarray
    sim_effort: np.ndarray
    real_effort: np.ndarray
    joints_valid: np.ndarray
    sim_wrench: np.ndarray
    real_wrench: np.ndarray
    wrench_valid: np.ndarray
    sim_world_force_n: np.ndarray
    real_world_force_n: np.ndarray
    frame_world: np.ndarray
    sim_ee: np.ndarray
    real_ee: np.ndarray
    sim_object: np.ndarray
    real_object: np.ndarray
    sim_tip_velocity_m_s: np.ndarray
    real_tip_velocity_m_s: np.ndarray
    sim_object_speed_m_s: np.ndarray
    flags: dict[str, StreamFlags] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.t_ns)

    @property
    def q_res_rad(self) -> np.ndarray:
        return self.real_q_rad - self.sim_q_rad

    @property
    def qd_res_rad_s(self) -> np.ndarray:
        return self.real_qd_rad_s - self.sim_qd_rad_s

    @property
    def effort_res(self) -> np.ndarray:
        return self.real_effort - self.sim_effort

    @property
    def force_res_n(self) -> np.ndarray:
        """(K, 3) real minus sim force in the world frame."""
        return self.real_world_force_n - self.sim_world_force_n

    @property
    def torque_res_nm(self) -> np.ndarray:
        """(K, 3) real minus sim torque, sensor frame."""
        return self.real_wrench[:, 3:] - self.sim_wrench[:, 3:]

    @property
    def ee_error_m(self) -> np.ndarray:
        """(K, 3) real minus sim end-effector position."""
        return self.real_ee[:, :3] - self.sim_ee[:, :3]


def sample(buffer: StreamBuffer | None, t_ns: np.ndarray, max_gap_ns: int, width: int,
           decision_ns: np.ndarray | None = None) -> np.ndarray:
    """(K, width) the stream linearly interpolated at t_ns; NaN where unknown.

    With ``decision_ns``, each t is read as it stood then: a stream that had not reached
    t holds the newest value received by then before t, for up to max_gap_ns; so does
    any t past the newest sample. Never interpolates across samples further apart than that.
    """
    if buffer is None or not len(buffer):
        return np.full((len(t_ns), width), np.nan)
    times, values = buffer.time_ns, buffer.values[:, :width]
    n = len(times)
    idx = np.searchsorted(times, t_ns, side="right")  # first sample after t
    reached = idx < n if decision_ns is None else buffer.reached(t_ns) <= decision_ns
    if decision_ns is not None:
        # Not reached: only rows received by the decision count (a backlog drained later does not).
        idx = np.where(reached, idx, np.minimum(idx, buffer.received_count(decision_ns)))
    lo = np.maximum(idx - 1, 0)
    hi = np.minimum(idx, n - 1)
    t_lo = times[lo]
    after = idx > 0
    bracketed = after & reached & (idx < n) & (times[hi] - t_lo <= max_gap_ns)
    # Past the newest sample, or not reached by the decision: hold the value before t, briefly.
    held = after & ((idx >= n) | ~reached) & ~bracketed & (t_ns - t_lo <= max_gap_ns)
    span = np.maximum(times[hi] - t_lo, 1)
    weight = np.where(bracketed, (t_ns - t_lo) / span, np.where(held, 0.0, np.nan))[:, None]
    low = values[lo]
    with np.errstate(invalid="ignore"):  # (an infinite sample gives NaN rows: its stream's health counts them)
        return low + weight * (values[hi] - low)


def window_mean(buffer: StreamBuffer | None, start_ns: np.ndarray, end_ns: np.ndarray, width: int,
                decision_ns: np.ndarray | None = None) -> np.ndarray:
    """(K, width) mean of the samples with start < time <= end (received by the decision,
    when given); NaN rows when there are none or one of them is not finite. Windows in
    increasing order."""
    out = np.full((len(end_ns), width), np.nan)
    if buffer is None or not len(buffer) or not len(end_ns):
        return out
    lo = np.searchsorted(buffer.time_ns, start_ns, side="right")
    hi = np.searchsorted(buffer.time_ns, end_ns, side="right")
    if decision_ns is not None:
        hi = np.minimum(hi, buffer.received_count(decision_ns))
        lo = np.minimum(lo, hi)
    first = int(lo.min())  # the windows' rows lie in [lo[0], max(hi)): sums over those only
    values = buffer.values[first:max(first, int(hi.max()))]
    bad = ~np.isfinite(values)
    sums = np.concatenate((np.zeros((1, width)), np.cumsum(np.where(bad, 0.0, values), axis=0)))
    bad_counts = np.concatenate(([0], np.cumsum(bad.any(axis=1))))
    lo, hi = lo - first, np.maximum(hi - first, lo - first)
    ok = (hi > lo) & (bad_counts[hi] == bad_counts[lo])
    out[ok] = (sums[hi[ok]] - sums[lo[ok]]) / (hi[ok] - lo[ok])[:, None]
    return out


def moved(buffer: StreamBuffer | None, start_ns: np.ndarray, end_ns: np.ndarray, columns: np.ndarray,
          threshold: float) -> np.ndarray:
    """(K, len(columns)) whether each column changed by more than threshold between
    consecutive samples in (start, end]."""
    if buffer is None or len(buffer) < 2 or not len(end_ns):
        return np.zeros((len(end_ns), len(columns)), dtype=bool)
    lo = np.searchsorted(buffer.time_ns, start_ns, side="right")
    hi = np.searchsorted(buffer.time_ns, end_ns, side="right")
    first = max(int(lo[0]) - 1, 0)
    values = buffer.values[first:int(hi[-1]), columns]
    changed = np.zeros(values.shape, dtype=np.int64)
    with np.errstate(invalid="ignore"):
        changed[1:] = np.abs(np.diff(values, axis=0)) > threshold
    counts = np.concatenate((np.zeros((1, len(columns)), dtype=np.int64), np.cumsum(changed, axis=0)))
    return counts[hi - first] > counts[np.maximum(lo - first, 0)]


def rotate(q_wxyz: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(K, 3) each v rotated by its quaternion (wxyz, normalised here)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        q = q_wxyz / np.linalg.norm(q_wxyz, axis=1, keepdims=True)
    w, u = q[:, :1], q[:, 1:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def quat_angle(q1: np.ndarray, q2: np.ndarray) -> np.ndarray:
    """(K,) rotation angle (rad) between unit quaternions (wxyz); NaN where unknown."""
    with np.errstate(invalid="ignore", divide="ignore"):
        dot = np.abs(np.sum(q1 * q2, axis=1)) / (np.linalg.norm(q1, axis=1) * np.linalg.norm(q2, axis=1))
        return 2.0 * np.arccos(np.minimum(1.0, dot))


def _world_forces(sim_wrench: np.ndarray, real_wrench: np.ndarray, sim_ee: np.ndarray, real_ee: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Both forces in the world frame, or neither: with one side's orientation missing,
    the other's stands in (the arms agree closely), so a frame mix-up never reads as a
    force residual."""
    rot = {"sim": sim_ee[:, 3:], "real": real_ee[:, 3:]}
    ok = {side: np.isfinite(r).all(axis=1) & (np.linalg.norm(np.nan_to_num(r), axis=1) > 0) for side, r in rot.items()}
    world = ok["sim"] | ok["real"]
    out = []
    for side, other, force in (("sim", "real", sim_wrench[:, :3]), ("real", "sim", real_wrench[:, :3])):
        q = np.where(ok[side][:, None], rot[side], rot[other])
        rotated = rotate(np.where(world[:, None], q, [[1.0, 0, 0, 0]]), np.nan_to_num(force))
        out.append(np.where((world & np.isfinite(force).all(axis=1))[:, None], rotated, force))
    return out[0], out[1], world


def read_joints(t_ns: np.ndarray, decision_ns: np.ndarray, sides: dict[str, SideStreams], joints: JointMap,
                cfg: ReadConfig) -> dict[str, dict[str, np.ndarray]]:
    """Both sides' joints at grid times t_ns (each analysed at decision_ns): per side
    "q", "qd" and "effort", (K, J) in the JointMap order."""
    out = {}
    for side, streams in sides.items():
        count, index = (joints.sim_count, joints.sim_index) if side == "sim" else (joints.real_count, joints.real_index)
        rows = sample(streams.joints, t_ns, cfg.max_gap_ns, 3 * count, decision_ns)
        out[side] = {"q": rows[:, index], "qd": rows[:, count + index], "effort": rows[:, 2 * count + index]}
    return out


def read_grid(t_ns: np.ndarray, decision_ns: np.ndarray, sides: dict[str, SideStreams], joints: JointMap,
              cfg: ReadConfig) -> Grid:
    """Sample both sides at grid times t_ns, each analysed at decision_ns (health not included)."""
    per_side = read_joints(t_ns, decision_ns, sides, joints, cfg)
    for side, streams in sides.items():
        ee = sample(streams.ee_pose, t_ns, cfg.max_gap_ns, 7, decision_ns)
        past_ee = sample(streams.ee_pose, t_ns - cfg.tip_window_ns, cfg.max_gap_ns, 3, decision_ns)
        tip = (ee[:, :3] - past_ee) / (cfg.tip_window_ns * 1e-9)
        wrench = window_mean(streams.wrench, t_ns - cfg.wrench_window_ns, t_ns, 6, decision_ns)
        if streams.wrench is not None:
            # A wrench stream that had not reached t by the decision, and held nothing recent, is unknown.
            wrench[np.isnan(sample(streams.wrench, t_ns, cfg.max_gap_ns, 1, decision_ns)[:, 0])] = np.nan
        per_side[side].update(wrench=wrench, ee=ee, object=sample(streams.object_pose, t_ns, cfg.max_gap_ns, 7,
                                                                 decision_ns),
                              tip=np.where(np.isfinite(tip).all(axis=1)[:, None], tip, 0.0))
    sim, real = per_side["sim"], per_side["real"]
    past_object = sample(sides["sim"].object_pose, t_ns - cfg.object_window_ns, cfg.max_gap_ns, 3, decision_ns)
    with np.errstate(invalid="ignore"):
        sim_object_speed = np.linalg.norm(sim["object"][:, :3] - past_object, axis=1) / (cfg.object_window_ns * 1e-9)
    sim_force, real_force, frame_world = _world_forces(sim["wrench"], real["wrench"], sim["ee"], real["ee"])
    return Grid(
        t_ns=t_ns, decision_ns=decision_ns,
        sim_q_rad=sim["q"], real_q_rad=real["q"], sim_qd_rad_s=sim["qd"], real_qd_rad_s=real["qd"],
        sim_effort=sim["effort"], real_effort=real["effort"],
        joints_valid=np.isfinite(sim["q"]).all(axis=1) & np.isfinite(real["q"]).all(axis=1) & (len(joints.names) > 0),
        sim_wrench=sim["wrench"], real_wrench=real["wrench"],
        wrench_valid=np.isfinite(sim["wrench"]).all(axis=1) & np.isfinite(real["wrench"]).all(axis=1),
        sim_world_force_n=sim_force, real_world_force_n=real_force, frame_world=frame_world,
        sim_ee=sim["ee"], real_ee=real["ee"], sim_object=sim["object"], real_object=real["object"],
        sim_tip_velocity_m_s=sim["tip"], real_tip_velocity_m_s=real["tip"], sim_object_speed_m_s=sim_object_speed,
    )


def read_health(grid: Grid, sides: dict[str, SideStreams], joints: JointMap, cfg: ReadConfig) -> None:
    """Fill ``grid.flags``: every detector of the real streams; of the sim's, only a lost
    stream (its silence would otherwise starve the residuals without a word)."""
    t, decision = grid.t_ns, grid.decision_ns
    start = t - cfg.moving_window_ns
    sim, real = sides["sim"], sides["real"]
    sim_joint_moving = moved(sim.joints, start, t, np.arange(joints.sim_count), cfg.moving_threshold)
    # The real joint stream's health looks at its (q, qd) columns; each moves with its sim twin.
    twin_of_real = np.zeros(joints.real_count, dtype=np.intp)
    has_twin = np.zeros(joints.real_count, dtype=bool)
    twin_of_real[joints.real_index], has_twin[joints.real_index] = joints.sim_index, True
    real_joint_moving = np.where(has_twin, sim_joint_moving[:, twin_of_real], False)
    moving = {
        "joint_states": np.hstack((real_joint_moving, real_joint_moving)),
        "wrench": moved(sim.wrench, start, t, np.arange(6), cfg.moving_threshold),
        "ee_pose": moved(sim.ee_pose, start, t, np.arange(7), cfg.moving_threshold),
        "object_pose": moved(sim.object_pose, start, t, np.arange(7), cfg.moving_threshold),
    }
    for side, other in (("real", "sim"), ("sim", "real")):
        mine, theirs = sides[side], sides[other]
        for topic, health, twin, sibling in (
                ("joint_states", mine.joint_health, theirs.joint_health, mine.wrench_health),
                ("wrench", mine.wrench_health, theirs.wrench_health, mine.joint_health),
                ("ee_pose", mine.ee_pose_health, theirs.ee_pose_health, mine.joint_health),
                ("object_pose", mine.object_pose_health, theirs.object_pose_health, mine.joint_health)):
            if health is None or not health.sample_count:
                continue
            grid.flags[f"{side}/{topic}"] = health.flags(
                t, decision, moving[topic] if side == "real" else None,
                twin if twin is not None and twin.sample_count else None,
                (sibling,) if sibling is not None and sibling.sample_count else (), dropout_only=side == "sim")
