"""Robot stream messages <-> numpy arrays: JointState, WrenchStamped, PoseStamped, JointTrajectory.

Readers are duck-typed on field names (rclpy messages and rosbags' deserialized ones
alike). Writers take the message class, so this module imports no ROS package.
Quaternions are (w, x, y, z) in arrays, as in MuJoCo and transforms3d.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from sim_real_bridge.sim.trajectory import JointTrajectoryData, TrajectoryPoint

_NS_PER_S = 1_000_000_000


def stamp_to_ns(stamp: Any) -> int:
    """builtin_interfaces/Time (``sec``, ``nanosec``) to integer nanoseconds."""
    return int(stamp.sec) * _NS_PER_S + int(stamp.nanosec)


def set_stamp(stamp: Any, stamp_ns: int) -> None:
    """Write integer nanoseconds into a builtin_interfaces/Time in place (ns >= 0)."""
    sec, nanosec = divmod(int(stamp_ns), _NS_PER_S)
    stamp.sec = sec
    stamp.nanosec = nanosec


def duration_to_ns(duration: Any) -> int:
    """builtin_interfaces/Duration (``sec``, ``nanosec``) to integer nanoseconds."""
    return int(duration.sec) * _NS_PER_S + int(duration.nanosec)


def set_duration(duration: Any, duration_ns: int) -> None:
    """Write integer nanoseconds into a builtin_interfaces/Duration in place."""
    sec, nanosec = divmod(int(duration_ns), _NS_PER_S)
    duration.sec = sec
    duration.nanosec = nanosec


# ------------------------------------------------------------------ JointState
def joint_state_to_arrays(msg: Any) -> tuple[int, tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
    """JointState to (stamp_ns, names, position (n,), velocity (n,), effort (n,)).

    Missing velocity or effort arrays come back as NaN-filled (n,).
    """
    names = tuple(msg.name)
    n = len(names)
    position = np.asarray(msg.position, dtype=float)
    velocity = np.asarray(msg.velocity, dtype=float) if len(msg.velocity) else np.full(n, np.nan)
    effort = np.asarray(msg.effort, dtype=float) if len(msg.effort) else np.full(n, np.nan)
    return stamp_to_ns(msg.header.stamp), names, position, velocity, effort


def joint_state_from_arrays(
    msg_cls: type,
    stamp_ns: int,
    names: Sequence[str],
    position: np.ndarray,
    velocity: np.ndarray | None = None,
    effort: np.ndarray | None = None,
    frame_id: str = "",
) -> Any:
    """Build a JointState of class ``msg_cls`` from arrays of shape (n,)."""
    msg = msg_cls()
    set_stamp(msg.header.stamp, stamp_ns)
    msg.header.frame_id = frame_id
    msg.name = list(names)
    msg.position = [float(v) for v in position]
    msg.velocity = [] if velocity is None else [float(v) for v in velocity]
    msg.effort = [] if effort is None else [float(v) for v in effort]
    return msg


# --------------------------------------------------------------- WrenchStamped
def wrench_to_arrays(msg: Any) -> tuple[int, str, np.ndarray, np.ndarray]:
    """WrenchStamped to (stamp_ns, frame_id, force_n (3,), torque_nm (3,))."""
    f, t = msg.wrench.force, msg.wrench.torque
    return (
        stamp_to_ns(msg.header.stamp),
        str(msg.header.frame_id),
        np.array([f.x, f.y, f.z], dtype=float),
        np.array([t.x, t.y, t.z], dtype=float),
    )


def wrench_from_arrays(msg_cls: type, stamp_ns: int, frame_id: str, force_n: np.ndarray, torque_nm: np.ndarray) -> Any:
    """Build a WrenchStamped of class ``msg_cls``; force and torque shape (3,)."""
    msg = msg_cls()
    set_stamp(msg.header.stamp, stamp_ns)
    msg.header.frame_id = frame_id
    msg.wrench.force.x, msg.wrench.force.y, msg.wrench.force.z = (float(v) for v in force_n)
    msg.wrench.torque.x, msg.wrench.torque.y, msg.wrench.torque.z = (float(v) for v in torque_nm)
    return msg


# ----------------------------------------------------------------- PoseStamped
def pose_to_arrays(msg: Any) -> tuple[int, str, np.ndarray, np.ndarray]:
    """PoseStamped to (stamp_ns, frame_id, position_m (3,), quat_wxyz (4,))."""
    p, q = msg.pose.position, msg.pose.orientation
    return (
        stamp_to_ns(msg.header.stamp),
        str(msg.header.frame_id),
        np.array([p.x, p.y, p.z], dtype=float),
        np.array([q.w, q.x, q.y, q.z], dtype=float),
    )


def pose_from_arrays(msg_cls: type, stamp_ns: int, frame_id: str, position_m: np.ndarray, quat_wxyz: np.ndarray) -> Any:
    """Build a PoseStamped of class ``msg_cls``; position (3,), quaternion (4,) wxyz."""
    msg = msg_cls()
    set_stamp(msg.header.stamp, stamp_ns)
    msg.header.frame_id = frame_id
    pos = msg.pose.position
    pos.x, pos.y, pos.z = (float(v) for v in position_m)
    ori = msg.pose.orientation
    ori.w, ori.x, ori.y, ori.z = (float(v) for v in quat_wxyz)
    return msg


# -------------------------------------------------------------- JointTrajectory
def joint_trajectory_to_data(msg: Any) -> JointTrajectoryData:
    """JointTrajectory to JointTrajectoryData (start_ns 0 means 'on receipt').

    Points without velocities get ``velocities=None`` (linear interpolation).
    """
    points = []
    for point in msg.points:
        velocities = np.asarray(point.velocities, dtype=float) if len(point.velocities) else None
        points.append(
            TrajectoryPoint(
                time_from_start_ns=duration_to_ns(point.time_from_start),
                positions=np.asarray(point.positions, dtype=float),
                velocities=velocities,
            )
        )
    return JointTrajectoryData(
        joint_names=tuple(msg.joint_names),
        points=tuple(points),
        start_ns=stamp_to_ns(msg.header.stamp),
    )


def joint_trajectory_from_data(
    msg_cls: type, point_cls: type, data: JointTrajectoryData, stamp_ns: int | None = None, frame_id: str = ""
) -> Any:
    """Build a JointTrajectory (class ``msg_cls``, points of ``point_cls``) from data.

    Args:
        stamp_ns: header stamp; defaults to ``data.start_ns`` (0 = start on receipt).
    """
    msg = msg_cls()
    set_stamp(msg.header.stamp, data.start_ns if stamp_ns is None else stamp_ns)
    msg.header.frame_id = frame_id
    msg.joint_names = list(data.joint_names)
    points = []
    for point in data.points:
        out = point_cls()
        out.positions = [float(v) for v in point.positions]
        if point.velocities is not None:
            out.velocities = [float(v) for v in point.velocities]
        set_duration(out.time_from_start, point.time_from_start_ns)
        points.append(out)
    msg.points = points
    return msg
