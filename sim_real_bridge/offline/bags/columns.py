"""Topics as columns: JointState, WrenchStamped, PoseStamped and Imu messages as arrays.

Each builder takes a topic's raw messages (by log time) and their layout groups
(:func:`~sim_real_bridge.offline.bags.cdr_layout.decode_groups`) and copies each
group's fields into the rows of its messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from rosbags.typesys.store import Typestore

from sim_real_bridge.errors import BagError
from sim_real_bridge.offline.bags.cdr_layout import DecodeError, LayoutGroup, decode_groups
from sim_real_bridge.offline.bags.raw import RawMessages

JOINT_STATE = "sensor_msgs/msg/JointState"
WRENCH_STAMPED = "geometry_msgs/msg/WrenchStamped"
POSE_STAMPED = "geometry_msgs/msg/PoseStamped"
IMU = "sensor_msgs/msg/Imu"
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class JointStateColumns:
    """sensor_msgs/JointState as arrays, N messages of J joints, ordered by recv_ns.

    Attributes:
        stamp_ns: (N,) header stamps, int64 ns.
        recv_ns: (N,) bag log times, int64 ns.
        names: the J joint names of the first message; messages naming them in another
            order are reordered.
        position: (N, J); velocity, effort: (N, J), NaN where a message left them empty.
        slow_count: messages decoded one by one (their layout matched no other's).
    """

    stamp_ns: np.ndarray
    recv_ns: np.ndarray
    names: tuple[str, ...]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    slow_count: int = 0

    def __len__(self) -> int:
        return int(self.stamp_ns.shape[0])


@dataclass(frozen=True)
class WrenchColumns:
    """geometry_msgs/WrenchStamped as arrays: force_n (N, 3), torque_nm (N, 3)."""

    stamp_ns: np.ndarray
    recv_ns: np.ndarray
    frame_id: str
    force_n: np.ndarray
    torque_nm: np.ndarray
    slow_count: int = 0

    def __len__(self) -> int:
        return int(self.stamp_ns.shape[0])


@dataclass(frozen=True)
class PoseColumns:
    """geometry_msgs/PoseStamped as arrays: position_m (N, 3), orientation_wxyz (N, 4)."""

    stamp_ns: np.ndarray
    recv_ns: np.ndarray
    frame_id: str
    position_m: np.ndarray
    orientation_wxyz: np.ndarray
    slow_count: int = 0

    def __len__(self) -> int:
        return int(self.stamp_ns.shape[0])


@dataclass(frozen=True)
class ImuColumns:
    """sensor_msgs/Imu as arrays: orientation_wxyz (N, 4), angular_velocity_rad_s (N, 3),
    linear_acceleration_m_s2 (N, 3); covariances are dropped."""

    stamp_ns: np.ndarray
    recv_ns: np.ndarray
    frame_id: str
    orientation_wxyz: np.ndarray
    angular_velocity_rad_s: np.ndarray
    linear_acceleration_m_s2: np.ndarray
    slow_count: int = 0

    def __len__(self) -> int:
        return int(self.stamp_ns.shape[0])


Columns = JointStateColumns | WrenchColumns | PoseColumns | ImuColumns


def _rows_of(group: LayoutGroup, count: int) -> slice | np.ndarray:
    """Where a group's messages go in columns of ``count`` rows (a slice when it holds all)."""
    return slice(None) if group.index.size == count else group.index


def _stamps(raw: RawMessages, groups: Sequence[LayoutGroup]) -> np.ndarray:
    stamp = np.empty(len(raw), dtype=np.int64)
    for group in groups:
        sec = group.values["header.stamp.sec"].astype(np.int64)
        stamp[_rows_of(group, len(raw))] = sec * NS_PER_S + group.values["header.stamp.nanosec"]
    return stamp


def _vectors(raw: RawMessages, groups: Sequence[LayoutGroup], paths: Sequence[str]) -> np.ndarray:
    """(N, len(paths)) float64: the scalar fields ``paths`` of every message."""
    out = np.empty((len(raw), len(paths)), dtype=np.float64)
    for group in groups:
        rows = _rows_of(group, len(raw))
        for k, path in enumerate(paths):
            out[rows, k] = group.values[path]
    return out


def _first(groups: Sequence[LayoutGroup]) -> LayoutGroup:
    """The group holding the topic's first message."""
    return min(groups, key=lambda group: int(group.index[0]))


def _slow(groups: Sequence[LayoutGroup]) -> int:
    return sum(int(group.index.size) for group in groups if group.one_by_one)


def _joint_order(group: LayoutGroup, names: tuple[str, ...], where: str, recv_ns: np.ndarray) -> list[int] | None:
    """Where each of ``names`` is in this group's messages (None: in that order)."""
    own = group.layout.string_list("name")
    at = f"at log time {int(recv_ns[group.index[0]])} ns"
    if len(set(own)) != len(own):
        repeated = sorted({n for n in own if own.count(n) > 1})
        raise BagError(f"{where}: joint name(s) {', '.join(repeated)} repeated in one message {at}")
    if tuple(own) == names:
        return None
    if sorted(own) != sorted(names):
        raise BagError(f"{where}: joint names change {at}: {own} instead of {list(names)}")
    return [own.index(name) for name in names]


def joint_state_columns(raw: RawMessages, groups: Sequence[LayoutGroup], where: str) -> JointStateColumns:
    """JointState columns; ``where`` (e.g. "topic /x in bag(s) y") starts error messages.

    Raises:
        BagError: joint names repeat or change, or a message has another number of
            positions, velocities or efforts than of names (none is fine: NaN).
    """
    count = len(raw)
    names = tuple(_first(groups).layout.string_list("name"))
    width = len(names)
    fields = {name: np.empty((count, width), dtype=np.float64) for name in ("position", "velocity", "effort")}
    for group in groups:
        order = _joint_order(group, names, where, raw.recv_ns)
        rows = _rows_of(group, count)
        for name, out in fields.items():
            got = group.layout.counts[name]
            if got == 0:
                out[rows] = np.nan
            elif got == width:
                values = group.values[name]
                out[rows] = values if order is None else values[:, order]
            else:
                raise BagError(f"{where}: {name} has {got} values for {width} joints at log time "
                               f"{int(raw.recv_ns[group.index[0]])} ns")
    return JointStateColumns(_stamps(raw, groups), raw.recv_ns, names, fields["position"], fields["velocity"],
                             fields["effort"], _slow(groups))


def _xyz(prefix: str) -> list[str]:
    return [f"{prefix}.{axis}" for axis in "xyz"]


def _wxyz(prefix: str) -> list[str]:
    return [f"{prefix}.{axis}" for axis in "wxyz"]


def _frame_id(groups: Sequence[LayoutGroup]) -> str:
    return _first(groups).layout.strings["header.frame_id"]


def wrench_columns(raw: RawMessages, groups: Sequence[LayoutGroup], where: str) -> WrenchColumns:
    """WrenchStamped columns."""
    return WrenchColumns(_stamps(raw, groups), raw.recv_ns, _frame_id(groups),
                         _vectors(raw, groups, _xyz("wrench.force")), _vectors(raw, groups, _xyz("wrench.torque")),
                         _slow(groups))


def pose_columns(raw: RawMessages, groups: Sequence[LayoutGroup], where: str) -> PoseColumns:
    """PoseStamped columns."""
    return PoseColumns(_stamps(raw, groups), raw.recv_ns, _frame_id(groups),
                       _vectors(raw, groups, _xyz("pose.position")),
                       _vectors(raw, groups, _wxyz("pose.orientation")), _slow(groups))


def imu_columns(raw: RawMessages, groups: Sequence[LayoutGroup], where: str) -> ImuColumns:
    """Imu columns (covariances dropped)."""
    return ImuColumns(_stamps(raw, groups), raw.recv_ns, _frame_id(groups), _vectors(raw, groups, _wxyz("orientation")),
                      _vectors(raw, groups, _xyz("angular_velocity")),
                      _vectors(raw, groups, _xyz("linear_acceleration")), _slow(groups))


BUILDERS: dict[str, Callable[[RawMessages, Sequence[LayoutGroup], str], Columns]] = {
    JOINT_STATE: joint_state_columns,
    WRENCH_STAMPED: wrench_columns,
    POSE_STAMPED: pose_columns,
    IMU: imu_columns,
}


def check_column_type(msgtype: str, where: str) -> None:
    """Raise BagError (starting with ``where``) for a type without columns."""
    if msgtype not in BUILDERS:
        raise BagError(f"{where} is {msgtype}; columns exist for {', '.join(sorted(BUILDERS))}")


def columns_from_raw(raw: RawMessages, msgtype: str, typestore: Typestore, where: str) -> Columns:
    """The columns of a topic's raw messages (by log time, at least one).

    Raises:
        BagError: a type without columns, or a message that cannot be decoded (named by
            ``where`` and its log time).
    """
    check_column_type(msgtype, where)
    try:
        groups = decode_groups(raw, msgtype, typestore)
    except DecodeError as error:
        raise BagError(f"{where}: cannot deserialize {msgtype} at log time {int(raw.recv_ns[error.index])} ns: "
                       f"{error.reason}") from None
    return BUILDERS[msgtype](raw, groups, where)
