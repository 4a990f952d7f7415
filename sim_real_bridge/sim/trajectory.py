"""Joint trajectory following the way ros2_control's joint_trajectory_controller does it.

Pure: time comes in as integer nanoseconds; no clock is read.

Behaviour kept from joint_trajectory_controller:
- a goal is a list of points with ``time_from_start``; it starts at its header stamp, or
  on receipt when the stamp is zero;
- before the first point the controller interpolates from the state it had when the goal
  arrived; between points it interpolates linearly (positions only) or with cubic
  Hermite splines (positions and velocities on every point);
- after the last point it holds the last position;
- a new goal replaces the old one, starting from the current commanded state;
- an empty goal cancels: the controller holds where it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sim_real_bridge.errors import TrajectoryError


@dataclass(frozen=True)
class TrajectoryPoint:
    """One waypoint: positions (n,), optional velocities (n,), time from start in ns."""

    time_from_start_ns: int
    positions: np.ndarray
    velocities: np.ndarray | None = None


@dataclass(frozen=True)
class JointTrajectoryData:
    """A JointTrajectory without ROS: joint names, points and a start stamp (0 = on receipt)."""

    joint_names: tuple[str, ...]
    points: tuple[TrajectoryPoint, ...]
    start_ns: int = 0

    @property
    def duration_ns(self) -> int:
        """time_from_start of the last point (0 for an empty trajectory)."""
        return self.points[-1].time_from_start_ns if self.points else 0


class TrajectoryFollower:
    """Samples the desired joint state of the active goal at any time.

    Args:
        joint_names: the controlled joints, in the order of every array returned.
        initial_q_rad: state held before the first goal, shape (n,).
    """

    def __init__(self, joint_names: Sequence[str], initial_q_rad: np.ndarray) -> None:
        self.joint_names = tuple(joint_names)
        n = len(self.joint_names)
        initial = np.asarray(initial_q_rad, dtype=float)
        if initial.shape != (n,):
            raise TrajectoryError(f"initial state has shape {initial.shape}, expected ({n},)")
        self._times_ns = np.array([0], dtype=np.int64)
        self._q = initial[None, :].copy()
        self._qd = np.zeros((1, n))
        self._cubic = False
        self._start_ns = 0
        self._end_ns = 0
        self.goals_accepted = 0

    @property
    def active_end_ns(self) -> int:
        """Absolute time at which the current goal's last point is reached."""
        return self._end_ns

    def set_goal(self, trajectory: JointTrajectoryData, now_ns: int) -> None:
        """Replace the active goal.

        Args:
            trajectory: the new goal; joint names must be exactly the controlled set
                (any order).
            now_ns: receipt time; the goal starts here when ``trajectory.start_ns`` is 0.

        Raises:
            TrajectoryError: wrong joint names, array sizes, or times not increasing.
        """
        n = len(self.joint_names)
        names = tuple(trajectory.joint_names)
        if sorted(names) != sorted(self.joint_names) or len(set(names)) != len(names):
            raise TrajectoryError(
                f"joint_names {list(names)} do not match the controlled joints {list(self.joint_names)}"
            )
        order = np.array([names.index(name) for name in self.joint_names])
        q_now, qd_now = self.sample(now_ns)
        if not trajectory.points:
            self._hold(q_now, now_ns)
            self.goals_accepted += 1
            return
        times = []
        positions = []
        velocities = []
        has_velocities = all(p.velocities is not None and len(p.velocities) > 0 for p in trajectory.points)
        for index, point in enumerate(trajectory.points):
            pos = np.asarray(point.positions, dtype=float)
            if pos.shape != (n,):
                raise TrajectoryError(f"point {index}: {pos.size} positions for {n} joints")
            if not np.all(np.isfinite(pos)):
                raise TrajectoryError(f"point {index}: positions are not finite")
            if has_velocities:
                vel = np.asarray(point.velocities, dtype=float)
                if vel.shape != (n,):
                    raise TrajectoryError(f"point {index}: {vel.size} velocities for {n} joints")
                if not np.all(np.isfinite(vel)):
                    raise TrajectoryError(f"point {index}: velocities are not finite")
                velocities.append(vel[order])
            if index and point.time_from_start_ns <= times[-1]:
                raise TrajectoryError(f"point {index}: time_from_start is not increasing")
            if point.time_from_start_ns < 0:
                raise TrajectoryError(f"point {index}: time_from_start is negative")
            times.append(int(point.time_from_start_ns))
            positions.append(pos[order])
        start_ns = int(trajectory.start_ns) if trajectory.start_ns > 0 else int(now_ns)
        # The state at the goal's start is where the controller is now (as the controller does).
        if times[0] > 0:
            times.insert(0, 0)
            positions.insert(0, q_now)
            if has_velocities:
                velocities.insert(0, qd_now)
        self._times_ns = start_ns + np.asarray(times, dtype=np.int64)
        self._q = np.vstack(positions)
        self._cubic = has_velocities
        self._qd = np.vstack(velocities) if has_velocities else np.zeros_like(self._q)
        self._start_ns = start_ns
        self._end_ns = int(self._times_ns[-1])
        self.goals_accepted += 1

    def _hold(self, q_rad: np.ndarray, now_ns: int) -> None:
        self._times_ns = np.array([now_ns], dtype=np.int64)
        self._q = np.asarray(q_rad, dtype=float)[None, :].copy()
        self._qd = np.zeros_like(self._q)
        self._cubic = False
        self._start_ns = now_ns
        self._end_ns = now_ns

    def sample(self, t_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """Desired (positions, velocities) at ``t_ns``, each shape (n,)."""
        q, qd = self.sample_many(np.array([t_ns], dtype=np.int64))
        return q[0], qd[0]

    def sample_many(self, times_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Desired (positions, velocities) at each of ``times_ns`` (k,), each shape (k, n).

        Before the first point: the first position (its velocity exactly at it, else 0);
        after the last: the last position at rest; between points: linear, or cubic
        Hermite when every point has velocities.
        """
        times = self._times_ns
        t = np.asarray(times_ns, dtype=np.int64)
        n = self._q.shape[1]
        q = np.empty((t.shape[0], n))
        qd = np.zeros((t.shape[0], n))
        before = t <= times[0]
        after = (t >= times[-1]) & ~before
        inside = ~(before | after)
        q[before] = self._q[0]
        qd[before & (t == times[0])] = self._qd[0]
        q[after] = self._q[-1]
        if np.any(inside):
            q[inside], qd[inside] = self._interpolate(t[inside])
        return q, qd

    def _interpolate(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        times = self._times_ns
        k = np.searchsorted(times, t, side="right") - 1
        dt_s = ((times[k + 1] - times[k]) * 1e-9)[:, None]
        s = ((t - times[k]) * 1e-9)[:, None] / dt_s
        q0, q1 = self._q[k], self._q[k + 1]
        if not self._cubic:
            return q0 + s * (q1 - q0), (q1 - q0) / dt_s
        v0, v1 = self._qd[k] * dt_s, self._qd[k + 1] * dt_s
        s2, s3 = s * s, s * s * s
        h00, h10, h01, h11 = 2 * s3 - 3 * s2 + 1, s3 - 2 * s2 + s, -2 * s3 + 3 * s2, s3 - s2
        q = h00 * q0 + h10 * v0 + h01 * q1 + h11 * v1
        dh00, dh10, dh01, dh11 = 6 * s2 - 6 * s, 3 * s2 - 4 * s + 1, -6 * s2 + 6 * s, 3 * s2 - 2 * s
        qd = (dh00 * q0 + dh10 * v0 + dh01 * q1 + dh11 * v1) / dt_s
        return q, qd
