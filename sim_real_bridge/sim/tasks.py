"""Built-in command programs: `reach`, `wipe`, `push` and `tour` (all three in turn).

A program is a list of segments; each is one JointTrajectory that starts and ends at
the home pose, sent when the previous one ends (a new goal replaces the old): the task's
cycles, and ``idle`` segments that hold the home pose through a scenario's idle windows.
Joint targets come from Cartesian tool-tip paths (the same paths in the world frame for
every built-in robot, apart from each robot's ``reach`` legs) solved by damped least
squares inverse kinematics on the robot's MuJoCo model, once, deterministically.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.sim.robots import DEFAULT_ROBOT, RobotSpec, robot_spec
from sim_real_bridge.sim.trajectory import JointTrajectoryData, TrajectoryPoint

if TYPE_CHECKING:  # MuJoCo loads only when a cycle is built: scenario validation does not need it
    from sim_real_bridge.sim.physics import ArmPhysics

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
#: Tool tip below this height: the cycle is in its contact phase (wipe strokes, pushes).
LOW_TIP_Z_M = 0.44
#: Name of the segments that hold the home pose.
IDLE = "idle"


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
    robot: str = DEFAULT_ROBOT

    @property
    def duration_ns(self) -> int:
        """Offset of the last segment plus its length."""
        offset, traj = self.segments[-1]
        return offset + traj.duration_ns

    def phase_at(self, t_s: float) -> str:
        """Name of the segment running at ``t_s`` (``idle`` outside the program)."""
        for phase in self.phases:
            if phase.start_s <= t_s < phase.end_s:
                return phase.name
        return IDLE

    def contact_windows_s(self) -> list[tuple[float, float]]:
        """Windows (s from the first command) where the tool is low: wipe strokes and pushes."""
        out = []
        for phase in self.phases:
            if phase.name in ("wipe", "push"):
                out += [(phase.start_s + a, phase.start_s + b) for a, b in low_phases(phase.name, self.robot)]
        return out


def solve_ik(
    physics: ArmPhysics,
    target_pos_m: np.ndarray,
    target_rot: np.ndarray = _DOWN,
    seed_q_rad: np.ndarray | None = None,
    iterations: int = 200,
    tolerance: float = 1e-5,
    damping: float = 1e-4,
) -> np.ndarray:
    """Joint positions (n,) putting the tool tip at ``target_pos_m`` with ``target_rot``.

    Damped least squares with a null-space pull towards the home pose (redundant arms);
    overwrites the arm's state of ``physics`` (call on a scratch ArmPhysics).

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
            null = np.eye(len(q)) - jac.T @ np.linalg.solve(jac @ jac.T + 1e-9 * np.eye(6), jac)
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


def _cycle_waypoints(kind: str, home_pos: np.ndarray, spec: RobotSpec) -> list[tuple[tuple[float, float, float], float]]:
    home = tuple(float(v) for v in home_pos)
    if kind == "reach":
        return [*spec.reach_waypoints, (home, 1.5)]
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


@lru_cache(maxsize=16)
def low_phases(kind: str, robot: str = DEFAULT_ROBOT) -> tuple[tuple[float, float], ...]:
    """Stretches (s from the cycle's start) where the cycle's tool tip is below LOW_TIP_Z_M."""
    if kind not in CYCLE_CONTACT:
        raise ConfigError(f"unknown cycle {kind!r}; expected one of reach, wipe, push")
    spec = robot_spec(robot)
    home = np.asarray(spec.home_tip_m, dtype=float)
    z = _cartesian_path(_cycle_waypoints(kind, home, spec), home)[:, 2]
    low = np.concatenate([[False], z < LOW_TIP_Z_M, [False]])
    edges = np.flatnonzero(np.diff(low.astype(int)))
    dt_s = POINT_SPACING_NS * 1e-9
    # Path sample k is reached at (k + 1) * dt from the cycle's start.
    return tuple((float((a + 1) * dt_s), float((b + 1) * dt_s)) for a, b in zip(edges[::2], edges[1::2]))


@lru_cache(maxsize=16)
def build_cycle(kind: str, robot: str = DEFAULT_ROBOT) -> JointTrajectoryData:
    """One cycle of ``reach``, ``wipe`` or ``push`` of ``robot``, as a trajectory from and to home.

    Points every 50 ms with positions and velocities (cubic interpolation).

    Raises:
        ConfigError: unknown cycle or robot name.
    """
    spec = robot_spec(robot)
    if kind not in CYCLE_CONTACT:
        raise ConfigError(f"unknown cycle {kind!r}; expected one of reach, wipe, push")
    from sim_real_bridge.sim.physics import ArmPhysics

    physics = ArmPhysics(robot=spec.name)
    home_q = physics.home_q_rad
    home_pos, _ = physics.ee_pose()
    waypoints = _cycle_waypoints(kind, home_pos, spec)
    path = _cartesian_path(waypoints, home_pos)
    qs = []
    seed = home_q
    for pos in path:
        seed = solve_ik(physics, pos, seed_q_rad=seed)
        qs.append(seed)
    q = np.vstack([home_q[None, :], np.vstack(qs)])
    # The arm is redundant: IK may come home in another null-space posture. Blend the
    # (small, nearly null-space) difference in over the last leg so every cycle ends
    # exactly at home.
    n_last = int(round(waypoints[-1][1] * 1e9 / POINT_SPACING_NS))
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


def hold_segment(home_q_rad: np.ndarray, joint_names: tuple[str, ...], duration_ns: int) -> JointTrajectoryData:
    """A trajectory that holds ``home_q_rad`` for ``duration_ns`` (one point, zero velocity)."""
    point = TrajectoryPoint(time_from_start_ns=int(duration_ns), positions=np.asarray(home_q_rad, dtype=float).copy(),
                            velocities=np.zeros(len(joint_names)))
    return JointTrajectoryData(joint_names=tuple(joint_names), points=(point,))


def build_program(
    task: str,
    duration_s: float,
    robot: str = DEFAULT_ROBOT,
    idle_windows_s: tuple[tuple[float, float], ...] = (),
) -> TaskProgram:
    """Cycles of ``task`` for ``robot`` repeated until ``duration_s`` is covered.

    ``tour`` runs reach, wipe and push in turn. Through each idle window (start_s,
    end_s) the arm rests at home: no cycle overlaps the window; an ``idle`` segment (the
    home pose held) runs from the end of the last cycle before it to the window's end.

    Raises:
        ConfigError: unknown task or robot, or a non-positive duration.
    """
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    if not duration_s > 0:
        raise ConfigError(f"task duration must be positive, got {duration_s}")
    spec = robot_spec(robot)
    order = ("reach", "wipe", "push") if task == "tour" else (task,)
    windows = sorted((int(round(a * 1e9)), int(round(b * 1e9))) for a, b in idle_windows_s)
    segments: list[tuple[int, JointTrajectoryData]] = []
    phases: list[Phase] = []
    offset_ns = 0
    i = 0
    while offset_ns < duration_s * 1e9:
        cycle = build_cycle(order[i % len(order)], spec.name)
        blocking = [end for start, end in windows if offset_ns < end and offset_ns + cycle.duration_ns > start]
        if blocking:
            hold_ns = max(blocking) - offset_ns
            segment = hold_segment(cycle.points[-1].positions, cycle.joint_names, hold_ns)
            name = IDLE
        else:
            segment, name = cycle, order[i % len(order)]
            i += 1
        segments.append((offset_ns, segment))
        phases.append(Phase(name, offset_ns * 1e-9, (offset_ns + segment.duration_ns) * 1e-9))
        offset_ns += segment.duration_ns
    return TaskProgram(task=task, segments=tuple(segments), phases=tuple(phases), robot=spec.name)
