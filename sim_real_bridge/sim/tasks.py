"""Built-in command programs: `reach`, `wipe`, `push` and `tour` (all three in turn).

A program is a list of cycles; each cycle is one JointTrajectory that starts and ends at
the home pose, sent when the previous one ends (a new goal replaces the old). Joint
targets come from Cartesian tool-tip paths solved by damped least squares inverse
kinematics on the MuJoCo model, once, deterministically.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.trajectory import JointTrajectoryData, TrajectoryPoint

#: Names of the built-in programs.
TASKS: tuple[str, ...] = ("reach", "wipe", "push", "tour")

#: Spacing of trajectory points, ns.
POINT_SPACING_NS = 50_000_000

#: Table top height and tool-tip sphere radius (must match arm.xml).
TABLE_TOP_Z_M = 0.4
TIP_RADIUS_M = 0.02
#: How far the wipe presses the tip below the table surface (position control => force).
WIPE_PRESS_M = 0.008

#: Tool pointing straight down, x axis along world -x (the home orientation).
_DOWN = np.diag([-1.0, 1.0, -1.0])

#: Which contact each cycle kind makes, for documentation and tests.
CYCLE_CONTACT = {"reach": "none", "wipe": "table", "push": "object"}


@dataclass(frozen=True)
class Phase:
    """A named stretch of a program, seconds from the first command."""

    name: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class TaskProgram:
    """A command program: trajectories with the offset (ns) at which each is sent."""

    task: str
    segments: tuple[tuple[int, JointTrajectoryData], ...]
    phases: tuple[Phase, ...]

    @property
    def duration_ns(self) -> int:
        """Offset of the last segment plus its length."""
        offset, traj = self.segments[-1]
        return offset + traj.duration_ns

    def phase_at(self, t_s: float) -> str:
        """Name of the cycle running at ``t_s`` (``idle`` outside the program)."""
        for phase in self.phases:
            if phase.start_s <= t_s < phase.end_s:
                return phase.name
        return "idle"


def solve_ik(
    physics: ArmPhysics,
    target_pos_m: np.ndarray,
    target_rot: np.ndarray = _DOWN,
    seed_q_rad: np.ndarray | None = None,
    iterations: int = 200,
    tolerance: float = 1e-5,
    damping: float = 1e-4,
) -> np.ndarray:
    """Joint positions (7,) putting the tool tip at ``target_pos_m`` with ``target_rot``.

    Damped least squares with a null-space pull towards the home pose; overwrites the
    arm's state of ``physics`` (call on a scratch ArmPhysics).

    Raises:
        ConfigError: no solution within 1 mm / 0.01 rad.
    """
    q = physics.home_q_rad if seed_q_rad is None else np.asarray(seed_q_rad, dtype=float).copy()
    home = physics.home_q_rad
    lower, upper = physics.joint_range_rad.T
    err = np.zeros(6)
    for _ in range(iterations):
        pos, rot = physics.forward_kinematics(q)
        err[:3] = target_pos_m - pos
        err[3:] = 0.5 * sum(np.cross(rot[:, i], target_rot[:, i]) for i in range(3))
        if err @ err < tolerance**2:
            break
        jac = physics.ee_jacobian()
        jjt = jac @ jac.T + damping * np.eye(6)
        dq = jac.T @ np.linalg.solve(jjt, err)
        if err @ err < 1e-6:
            # Near the target, drift towards home in the null space (keeps solutions smooth).
            null = np.eye(7) - jac.T @ np.linalg.solve(jac @ jac.T + 1e-9 * np.eye(6), jac)
            dq += null @ (0.02 * (home - q))
        q = np.clip(q + dq, lower, upper)
    if np.linalg.norm(err[:3]) > 1e-3 or np.linalg.norm(err[3:]) > 1e-2:
        raise ConfigError(f"inverse kinematics failed for target {np.round(target_pos_m, 3).tolist()}")
    return q


def _min_jerk(n: int) -> np.ndarray:
    s = np.linspace(0.0, 1.0, n)
    return 10 * s**3 - 15 * s**4 + 6 * s**5


def _cartesian_path(waypoints: list[tuple[tuple[float, float, float], float]], start: np.ndarray) -> np.ndarray:
    """Tip positions every POINT_SPACING_NS along straight legs with min-jerk timing.

    Args:
        waypoints: (position, leg duration s) pairs, visited in order from ``start``.
        start: first position (3,).

    Returns:
        array (k, 3), excluding ``start`` itself.
    """
    out = []
    current = np.asarray(start, dtype=float)
    for pos, duration_s in waypoints:
        target = np.asarray(pos, dtype=float)
        n = int(round(duration_s * 1e9 / POINT_SPACING_NS))
        s = _min_jerk(n + 1)[1:]
        out.append(current + s[:, None] * (target - current))
        current = target
    return np.vstack(out)


def _cycle_waypoints(kind: str, home_pos: np.ndarray) -> list[tuple[tuple[float, float, float], float]]:
    home = tuple(float(v) for v in home_pos)
    if kind == "reach":
        return [
            ((0.50, -0.25, 0.62), 1.5),
            ((0.65, 0.00, 0.68), 1.5),
            ((0.50, 0.25, 0.62), 1.5),
            ((0.38, 0.00, 0.75), 1.5),
            (home, 1.5),
        ]
    if kind == "wipe":
        z_contact = TABLE_TOP_Z_M + TIP_RADIUS_M - WIPE_PRESS_M
        x = 0.48
        return [
            ((x, -0.2, 0.50), 1.5),
            ((x, -0.2, z_contact), 1.0),
            ((x, 0.2, z_contact), 2.0),
            ((x, -0.2, z_contact), 2.0),
            ((x, 0.2, z_contact), 2.0),
            ((x, 0.2, 0.50), 1.0),
            (home, 1.5),
        ]
    if kind == "push":
        x = 0.60
        z_push = TABLE_TOP_Z_M + 0.025
        z_above = 0.56
        return [
            ((x, -0.22, z_above), 1.5),
            ((x, -0.22, z_push), 1.0),
            ((x, 0.04, z_push), 2.5),
            ((x, 0.04, z_above), 0.8),
            ((x, 0.24, z_above), 1.2),
            ((x, 0.24, z_push), 1.0),
            ((x, -0.04, z_push), 2.5),
            ((x, -0.04, z_above), 0.8),
            (home, 1.5),
        ]
    raise ConfigError(f"unknown cycle {kind!r}; expected one of reach, wipe, push")


@lru_cache(maxsize=8)
def build_cycle(kind: str) -> JointTrajectoryData:
    """One cycle of ``reach``, ``wipe`` or ``push`` as a trajectory from and to home.

    Points every 50 ms with positions and velocities (cubic interpolation).

    Raises:
        ConfigError: unknown cycle name.
    """
    physics = ArmPhysics()
    home_q = physics.home_q_rad
    home_pos, _ = physics.ee_pose()
    path = _cartesian_path(_cycle_waypoints(kind, home_pos), home_pos)
    qs = []
    seed = home_q
    for pos in path:
        seed = solve_ik(physics, pos, seed_q_rad=seed)
        qs.append(seed)
    q = np.vstack([home_q[None, :], np.vstack(qs)])
    # The arm is redundant: IK may come home in another null-space posture. Blend the
    # (small, nearly null-space) difference in over the last leg so every cycle ends
    # exactly at home.
    n_last = int(round(_cycle_waypoints(kind, home_pos)[-1][1] * 1e9 / POINT_SPACING_NS))
    ramp = _min_jerk(n_last + 1)[1:]
    q[-n_last:] += ramp[:, None] * (home_q - q[-1])[None, :]
    dt_s = POINT_SPACING_NS * 1e-9
    qd = np.gradient(q, dt_s, axis=0)
    qd[0] = 0.0
    qd[-1] = 0.0
    points = tuple(
        TrajectoryPoint(time_from_start_ns=i * POINT_SPACING_NS, positions=q[i], velocities=qd[i])
        for i in range(1, len(q))
    )
    return JointTrajectoryData(joint_names=physics.joint_names, points=points)


def build_program(task: str, duration_s: float) -> TaskProgram:
    """Cycles of ``task`` repeated until ``duration_s`` is covered.

    ``tour`` runs reach, wipe and push in turn.

    Raises:
        ConfigError: unknown task or non-positive duration.
    """
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    if not duration_s > 0:
        raise ConfigError(f"task duration must be positive, got {duration_s}")
    order = ("reach", "wipe", "push") if task == "tour" else (task,)
    segments = []
    phases = []
    offset_ns = 0
    i = 0
    while offset_ns < duration_s * 1e9:
        kind = order[i % len(order)]
        cycle = build_cycle(kind)
        segments.append((offset_ns, cycle))
        phases.append(Phase(kind, offset_ns * 1e-9, (offset_ns + cycle.duration_ns) * 1e-9))
        offset_ns += cycle.duration_ns
        i += 1
    return TaskProgram(task=task, segments=tuple(segments), phases=tuple(phases))
