"""What a fit needs of a recording: the real robot's streams, its commands and the events.

Reads rosbag2 bags (MCAP or sqlite3, as ``sim-real-bridge demo --record`` writes them)
and the monitor's failure snapshots (MCAP) through :func:`offline.bag_io.open_bags`.
Only the real side is read: the fit drives the model with the commands the real robot
got (``/real/joint_trajectory``) and compares it with what the real robot did.

Times are integer nanoseconds on the bag's log clock. A real robot whose header stamps
run on another clock (more than ``CLOCK_SHIFT_MIN_NS`` from the log times) has its
stamps moved onto the log clock by the median difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from sim_real_bridge.conversions.robot_msgs import joint_trajectory_to_data, stamp_to_ns
from sim_real_bridge.fit.errors import FitError
from sim_real_bridge.offline.bag_io import open_bags
from sim_real_bridge.sim.trajectory import JointTrajectoryData, TrajectoryFollower

#: Stamps further than this from the log times are on another clock, ns.
CLOCK_SHIFT_MIN_NS = 50_000_000
EVENTS_TOPIC = "/divergence/events"


@dataclass(frozen=True)
class EventSpan:
    """One gap event of the monitor (the last message of its id), log-clock ns."""

    event_id: str
    category: str
    kind: str
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class Recording:
    """The real side of one bag or snapshot as columns.

    Attributes:
        source: the path read.
        joint_names: J joints, in the order of every (N, J) array.
        stamp_ns: (N,) joint_states times; q_rad, qd_rad_s: (N, J).
        wrench_stamp_ns: (M,) or None; force_n, torque_nm: (M, 3) or None.
        object_stamp_ns: (K,) or None; object_pos_m (K, 3), object_quat_wxyz (K, 4) or None.
        commands: (receipt ns, goal) in receipt order.
        events: the monitor's events found in the file (may be empty).
        clock_shift_ns: what was added to the real stamps to put them on the log clock.
    """

    source: str
    joint_names: tuple[str, ...]
    stamp_ns: np.ndarray
    q_rad: np.ndarray
    qd_rad_s: np.ndarray
    commands: tuple[tuple[int, JointTrajectoryData], ...]
    events: tuple[EventSpan, ...] = ()
    wrench_stamp_ns: np.ndarray | None = None
    force_n: np.ndarray | None = None
    torque_nm: np.ndarray | None = None
    object_stamp_ns: np.ndarray | None = None
    object_pos_m: np.ndarray | None = None
    object_quat_wxyz: np.ndarray | None = None
    clock_shift_ns: int = 0

    @property
    def has_wrench(self) -> bool:
        """Whether the real robot recorded a wrist wrench."""
        return self.wrench_stamp_ns is not None and len(self.wrench_stamp_ns) > 1

    @property
    def has_object(self) -> bool:
        """Whether the real object's pose was recorded."""
        return self.object_stamp_ns is not None and len(self.object_stamp_ns) > 1

    @property
    def first_command_ns(self) -> int:
        """Receipt time of the first command."""
        return self.commands[0][0]

    def commanded_q(self, grid_ns: np.ndarray) -> np.ndarray:
        """Joint targets the real robot's trajectory controller held at ``grid_ns`` (k,), shape (k, J).

        Replays every command from the first (the controller starts from the measured
        position then), as the robots' own follower does.
        """
        first = self.commands[0][0]
        follower = TrajectoryFollower(self.joint_names, self.state_at(first)[0])
        out = np.empty((len(grid_ns), len(self.joint_names)))
        index = 0
        for k, t_ns in enumerate(np.asarray(grid_ns, dtype=np.int64).tolist()):
            while index < len(self.commands) and self.commands[index][0] <= t_ns:
                receipt_ns, goal = self.commands[index]
                follower.set_goal(goal, receipt_ns)
                index += 1
            out[k] = follower.sample(t_ns)[0]
        return out

    def state_at(self, t_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """Measured (q_rad, qd_rad_s) at ``t_ns``, linearly interpolated, each (J,)."""
        t = float(t_ns)
        stamps = self.stamp_ns.astype(float)
        q = np.array([np.interp(t, stamps, col) for col in self.q_rad.T])
        qd = np.array([np.interp(t, stamps, col) for col in self.qd_rad_s.T])
        return q, qd

    def object_at(self, t_ns: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Object (pos_m (3,), quat_wxyz (4,)) at the sample nearest ``t_ns``, or None."""
        if not self.has_object:
            return None
        i = int(np.clip(np.searchsorted(self.object_stamp_ns, t_ns), 0, len(self.object_stamp_ns) - 1))
        return self.object_pos_m[i].copy(), self.object_quat_wxyz[i].copy()


def _clock_shift_ns(stamp_ns: np.ndarray, recv_ns: np.ndarray) -> int:
    shift = int(np.median(recv_ns - stamp_ns))
    return shift if abs(shift) > CLOCK_SHIFT_MIN_NS else 0


def _commands(bags, topic: str, source: str, names: tuple[str, ...]) -> tuple[tuple[int, JointTrajectoryData], ...]:
    out = []
    for recv_ns, msg in bags.iter_messages(topic):
        goal = joint_trajectory_to_data(msg)
        if sorted(goal.joint_names) != sorted(names):
            raise FitError(
                f"{source}: {topic}: a command names joints {list(goal.joint_names)}, "
                f"the joint states {list(names)}"
            )
        start = goal.start_ns if goal.start_ns > 0 else recv_ns
        out.append((int(start), goal))
    if not out:
        raise FitError(f"{source}: no message on {topic}: the model cannot be driven without the real commands")
    out.sort(key=lambda item: item[0])
    return tuple(out)


def _events(bags, topics: dict[str, str]) -> tuple[EventSpan, ...]:
    if EVENTS_TOPIC not in topics:
        return ()
    last: dict[str, EventSpan] = {}
    for _, msg in bags.iter_messages(EVENTS_TOPIC):
        last[str(msg.id)] = EventSpan(str(msg.id), str(msg.category), str(msg.kind),
                                      stamp_to_ns(msg.start), stamp_to_ns(msg.end))
    return tuple(sorted(last.values(), key=lambda e: e.start_ns))


def read_recording(path: Path | str, side: str = "/real") -> Recording:
    """Read the real side of one bag directory, ``.mcap``/``.db3`` file or snapshot.

    Args:
        path: the recording.
        side: namespace of the real robot's topics.

    Raises:
        BagError: unreadable file or missing joint_states (names the file and topic).
        FitError: no commands, or commands naming other joints than the joint states.
    """
    source = str(path)
    ns = side.rstrip("/")
    with open_bags([path]) as bags:
        topics = bags.topic_types()
        joints = bags.read_columns(f"{ns}/joint_states")
        shift = _clock_shift_ns(joints.stamp_ns, joints.recv_ns)
        order = np.argsort(joints.stamp_ns, kind="stable")
        stamps = joints.stamp_ns[order] + shift
        keep = np.concatenate([[True], np.diff(stamps) > 0])
        if f"{ns}/joint_trajectory" not in topics:
            raise FitError(f"{source}: no topic {ns}/joint_trajectory: the model cannot be driven without the real commands")
        commands = _commands(bags, f"{ns}/joint_trajectory", source, joints.names)
        extra: dict[str, np.ndarray | None] = {}
        if f"{ns}/wrench" in topics:
            wrench = bags.read_columns(f"{ns}/wrench")
            extra.update(_finite_rows("wrench", wrench.stamp_ns + shift, force_n=wrench.force_n,
                                      torque_nm=wrench.torque_nm))
        if f"{ns}/object_pose" in topics:
            pose = bags.read_columns(f"{ns}/object_pose")
            extra.update(_finite_rows("object", pose.stamp_ns + shift, object_pos_m=pose.position_m,
                                      object_quat_wxyz=pose.orientation_wxyz))
        events = _events(bags, topics)
    q = joints.position[order][keep]
    qd = joints.velocity[order][keep]
    good = np.all(np.isfinite(q), axis=1)
    qd = np.where(np.isfinite(qd), qd, 0.0)
    return Recording(source=source, joint_names=tuple(joints.names), stamp_ns=stamps[keep][good],
                     q_rad=q[good], qd_rad_s=qd[good], commands=commands, events=events,
                     clock_shift_ns=shift, **extra)


def _finite_rows(prefix: str, stamp_ns: np.ndarray, **columns: np.ndarray) -> dict[str, np.ndarray]:
    """Rows with every value finite, sorted by stamp, without repeated stamps."""
    order = np.argsort(stamp_ns, kind="stable")
    stamps = stamp_ns[order]
    good = np.concatenate([[True], np.diff(stamps) > 0])
    for values in columns.values():
        good &= np.all(np.isfinite(values[order]), axis=1)
    out = {f"{prefix}_stamp_ns": stamps[good]}
    out.update({name: values[order][good] for name, values in columns.items()})
    return out


def read_recordings(paths: Sequence[Path | str], side: str = "/real") -> list[Recording]:
    """:func:`read_recording` of each path; every recording must name the same joints.

    Raises:
        FitError: two recordings of different joints.
    """
    recordings = [read_recording(p, side) for p in paths]
    for rec in recordings[1:]:
        if set(rec.joint_names) != set(recordings[0].joint_names):
            raise FitError(f"{rec.source}: joints {list(rec.joint_names)} differ from "
                           f"{recordings[0].source}'s {list(recordings[0].joint_names)}")
    return recordings
