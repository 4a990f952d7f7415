"""CDR bytes of the monitor's messages: column writers and fast readers.

Writers: each /divergence/* message of fixed layout (its strings and sequence lengths
known ahead: frame id, joint names) is described once as a numpy structured dtype
(:class:`~sim_real_bridge.conversions.cdr_layout.CdrLayout`); a column set fills every
message of a batch with one assignment per field, and the rows' bytes are the messages.
The live node passes the rows of a tick, replay a whole run. Events and summaries (a few
per run) are the messages divergence_msgs builds, through rosbags' serializer.

Readers: JointState and WrenchStamped at the monitor's 1 kHz inputs, and JointTrajectory
in replay, read straight from little-endian XCDR1 bytes (rclpy and rosbags build a Python
object per field). Bytes after the message are ignored, as rclpy does.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from sim_real_bridge.conversions.cdr_layout import HEADER_BYTES, LITTLE_ENDIAN_CDR, NS_PER_S, CdrLayout, set_time
from sim_real_bridge.conversions.divergence_msgs import (
    CATEGORY_RGBA,
    divergence_summary_msg,
    gap_event_msg,
    rosbags_namespace,
)
from sim_real_bridge.core.outputs import ContactColumns, JointColumns, PoseColumns

_U32 = struct.Struct("<I")
_TIME = struct.Struct("<iI")


# ------------------------------------------------------------------------ writers
_JOINT_ARRAYS = ("position_residual_rad", "velocity_residual_rad_s", "effort_residual")
_JOINT_TIMING = ("clock_offset_s", "clock_offset_std_s", "latency_s", "latency_std_s")


@functools.lru_cache(maxsize=32)
def _joint_layout(names: tuple[str, ...], frame_id: str) -> CdrLayout:
    """sim_real_bridge/msg/JointDivergence for these joint names."""
    layout = CdrLayout()
    layout.header("header", frame_id)
    layout.strings("name", names)
    for name in _JOINT_ARRAYS:
        layout.sequence(name, "<f8", (len(names),))
    for name in _JOINT_TIMING:
        layout.add(name, "<f8")
    layout.add("latency_compensated", "?")
    return layout


def joint_divergence_cdr(columns: JointColumns, frame_id: str = "") -> list[bytes]:
    """sim_real_bridge/msg/JointDivergence of each row (stamped with its grid time)."""
    layout = _joint_layout(tuple(columns.names), frame_id)
    rows = layout.rows(len(columns))
    set_time(rows, "header.stamp", columns.t_ns)
    if columns.names:  # no joints: empty sequences, no values
        for name in _JOINT_ARRAYS:
            rows[name] = getattr(columns, name)
    for name in _JOINT_TIMING:
        rows[name] = getattr(columns, name)
    return layout.messages(rows)


#: A pose's columns (position, quaternion wxyz) in geometry_msgs/Pose order (position, quaternion xyzw).
_POSE_ORDER = [0, 1, 2, 4, 5, 6, 3]
#: An absent object's pose, as the message defaults it: the origin, identity orientation.
_NO_POSE = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])


@functools.lru_cache(maxsize=8)
def _pose_layout(frame_id: str) -> CdrLayout:
    """sim_real_bridge/msg/PoseDivergence (a geometry_msgs/Pose is 7 float64: position, xyzw)."""
    layout = CdrLayout()
    layout.header("header", frame_id)
    layout.add("sim_ee_pose", "<f8", 7)
    layout.add("real_ee_pose", "<f8", 7)
    layout.add("ee_position_error_m", "<f8", 3)
    layout.add("ee_position_error_norm_m", "<f8")
    layout.add("ee_orientation_error_rad", "<f8")
    layout.add("has_object", "?")
    # Without an object: the default poses (origin, identity orientation) and NaN errors.
    layout.add("sim_object_pose", "<f8", 7, value=_NO_POSE)
    layout.add("real_object_pose", "<f8", 7, value=_NO_POSE)
    layout.add("object_position_error_norm_m", "<f8", value=np.nan)
    layout.add("object_orientation_error_rad", "<f8", value=np.nan)
    return layout


def pose_divergence_cdr(columns: PoseColumns, frame_id: str = "world") -> list[bytes]:
    """sim_real_bridge/msg/PoseDivergence of each row."""
    layout = _pose_layout(frame_id)
    rows = layout.rows(len(columns))
    set_time(rows, "header.stamp", columns.t_ns)
    rows["sim_ee_pose"] = columns.sim_ee[:, _POSE_ORDER]
    rows["real_ee_pose"] = columns.real_ee[:, _POSE_ORDER]
    rows["ee_position_error_m"] = columns.real_ee[:, :3] - columns.sim_ee[:, :3]
    rows["ee_position_error_norm_m"] = columns.ee_position_error_norm_m
    rows["ee_orientation_error_rad"] = columns.ee_orientation_error_rad
    has_object = np.asarray(columns.has_object, dtype=bool)
    rows["has_object"] = has_object
    if has_object.any():  # the other rows keep the layout's values for no object
        rows["sim_object_pose"][has_object] = columns.sim_object[has_object][:, _POSE_ORDER]
        rows["real_object_pose"][has_object] = columns.real_object[has_object][:, _POSE_ORDER]
        rows["object_position_error_norm_m"][has_object] = columns.object_position_error_norm_m[has_object]
        rows["object_orientation_error_rad"][has_object] = columns.object_orientation_error_rad[has_object]
    return layout.messages(rows)


@functools.lru_cache(maxsize=8)
def _contact_layout(frame_id: str) -> CdrLayout:
    """sim_real_bridge/msg/ContactResidual (a geometry_msgs/Wrench is 6 float64: force, torque)."""
    layout = CdrLayout()
    layout.header("header", frame_id)
    for name in ("sim_wrench", "real_wrench", "residual"):
        layout.add(name, "<f8", 6)
    layout.add("force_residual_norm_n", "<f8")
    layout.add("torque_residual_norm_nm", "<f8")
    layout.add("sim_contact_phase", "u1")
    layout.add("real_contact_phase", "u1")
    return layout


def contact_residual_cdr(columns: ContactColumns, frame_id: str = "") -> list[bytes]:
    """sim_real_bridge/msg/ContactResidual of each row."""
    layout = _contact_layout(frame_id)
    rows = layout.rows(len(columns))
    set_time(rows, "header.stamp", columns.t_ns)
    rows["sim_wrench"] = columns.sim_wrench
    rows["real_wrench"] = columns.real_wrench
    rows["residual"] = columns.residual
    rows["force_residual_norm_n"] = columns.force_residual_norm_n
    rows["torque_residual_norm_nm"] = columns.torque_residual_norm_nm
    rows["sim_contact_phase"] = columns.sim_contact_phase
    rows["real_contact_phase"] = columns.real_contact_phase
    return layout.messages(rows)


# visualization_msgs/Marker constants.
_ARROW, _SPHERE, _TEXT_VIEW_FACING, _ADD = 0, 2, 9, 0
_IDENTITY_XYZW = (0.0, 0.0, 0.0, 1.0)
_LABEL_OFFSET_M = np.array([0.0, 0.0, 0.12])  # the label floats above the real end effector
_MARKER_SIZE_M = (0.04, 0.04, 0.04)


def _add_marker(layout: CdrLayout, name: str, frame_id: str, ns: str, marker_id: int, kind: int,
                scale: tuple[float, float, float], rgba: tuple[float, ...] | None = None, points: int = 0,
                text_size: int | None = None) -> None:
    """A visualization_msgs/Marker: the writer fills ``name.header.stamp``, ``name.pose.position``,
    ``name.color`` (when ``rgba`` is None), ``name.points`` and ``name.text`` (``text_size``
    bytes with the NUL; None: no text); the rest keeps the values given here or the defaults."""
    layout.header(f"{name}.header", frame_id)
    layout.string(f"{name}.ns", ns)
    layout.add(f"{name}.id", "<i4", value=marker_id)
    layout.add(f"{name}.type", "<i4", value=kind)
    layout.add(f"{name}.action", "<i4", value=_ADD)
    layout.add(f"{name}.pose.position", "<f8", 3)
    layout.add(f"{name}.pose.orientation", "<f8", 4, value=_IDENTITY_XYZW)
    layout.add(f"{name}.scale", "<f8", 3, value=scale)
    layout.add(f"{name}.color", "<f4", 4, value=rgba)
    layout.time(f"{name}.lifetime")
    layout.add(f"{name}.frame_locked", "?")
    layout.sequence(f"{name}.points", "<f8", (points, 3))
    layout.sequence(f"{name}.colors", "<f4", (0, 4))
    layout.string(f"{name}.texture_resource", "")
    layout.header(f"{name}.texture.header", "")
    layout.string(f"{name}.texture.format", "")
    layout.sequence(f"{name}.texture.data", "u1", (0,))
    layout.sequence(f"{name}.uv_coordinates", "<f4", (0, 2))
    if text_size is None:
        layout.string(f"{name}.text", "")
    else:
        layout.string(f"{name}.text", size=text_size)
    layout.string(f"{name}.mesh_resource", "")
    layout.string(f"{name}.mesh_file.filename", "")
    layout.sequence(f"{name}.mesh_file.data", "u1", (0,))
    layout.add(f"{name}.mesh_use_embedded_materials", "?")


@functools.lru_cache(maxsize=64)
def _markers_layout(frame_id: str, label_size: int) -> CdrLayout:
    """The MarkerArray of :func:`divergence_markers_cdr` whose label text takes ``label_size``
    bytes (NUL included): the fields after it align by where it ends."""
    layout = CdrLayout()
    layout.count("markers", 4)
    _add_marker(layout, "sim_ee", frame_id, "sim_ee", 0, _SPHERE, _MARKER_SIZE_M, (0.2, 0.4, 1.0, 0.8))
    _add_marker(layout, "real_ee", frame_id, "real_ee", 1, _SPHERE, _MARKER_SIZE_M, (1.0, 0.3, 0.2, 0.8))
    _add_marker(layout, "ee_error", frame_id, "ee_error", 2, _ARROW, (0.005, 0.012, 0.012), points=2)
    _add_marker(layout, "label", frame_id, "label", 3, _TEXT_VIEW_FACING, (0.0, 0.0, 0.05), text_size=label_size)
    return layout


def _markers_label(open_categories: Sequence[str], ee_error_m: float) -> bytes:
    label = ", ".join(open_categories) if open_categories else "in agreement"
    return f"{label}  |  ee error {1000 * ee_error_m:.1f} mm".encode("utf-8")


def divergence_markers_cdr(poses: PoseColumns, rows: Sequence[int] | np.ndarray,
                           open_categories: Sequence[Sequence[str]], stamps_ns: Sequence[int] | np.ndarray,
                           frame_id: str = "world") -> list[bytes]:
    """visualization_msgs/MarkerArray of pose rows ``rows``: the sim and real end effector,
    the error arrow between them and a label coloured by the first open category.

    Args:
        poses: the pose columns.
        rows: the rows that go out as markers.
        open_categories: per row, the categories of the events open then.
        stamps_ns: per row, the markers' stamp.
        frame_id: frame of the poses.
    """
    rows = np.asarray(rows, dtype=np.intp)
    labels = [_markers_label(c, e) for c, e in
              zip(open_categories, poses.ee_position_error_norm_m[rows].tolist(), strict=True)]
    colours = np.array([CATEGORY_RGBA[c[0] if c else "none"] for c in open_categories], dtype="<f4")
    sim_m, real_m = poses.sim_ee[rows, :3], poses.real_ee[rows, :3]
    stamps_ns = np.asarray(stamps_ns, dtype=np.int64)
    sizes = np.array([len(label) + 1 for label in labels], dtype=np.int64)
    messages: list[bytes] = [b""] * len(rows)
    for size in np.unique(sizes).tolist():  # one layout per label size
        group = np.flatnonzero(sizes == size)
        layout = _markers_layout(frame_id, size)
        out = layout.rows(len(group))
        for marker in ("sim_ee", "real_ee", "ee_error", "label"):
            set_time(out, f"{marker}.header.stamp", stamps_ns[group])
        out["sim_ee.pose.position"] = sim_m[group]
        out["real_ee.pose.position"] = real_m[group]
        out["ee_error.points"] = np.stack([sim_m[group], real_m[group]], axis=1)
        out["ee_error.color"] = colours[group]
        out["label.pose.position"] = real_m[group] + _LABEL_OFFSET_M
        out["label.color"] = colours[group]
        out["label.text"] = [labels[k] for k in group.tolist()]
        for k, message in zip(group.tolist(), layout.messages(out), strict=True):
            messages[k] = message
    return messages


@functools.lru_cache(maxsize=1)
def _rosbags_messages() -> tuple[Any, Any, Any]:
    """(typestore, sim_real_bridge message factories, KeyValue factory) for rosbags."""
    from sim_real_bridge.capture.typestore import build_typestore  # noqa: PLC0415 (0.1 s; offline only)

    store = build_typestore()
    return store, rosbags_namespace(store), rosbags_namespace(store, "diagnostic_msgs").KeyValue


def gap_event_cdr(record: Any, stamp_ns: int, snapshot: str = "") -> bytes:
    """sim_real_bridge/msg/GapEvent of an EventRecord, as the node publishes it
    (:func:`~sim_real_bridge.conversions.divergence_msgs.gap_event_msg`)."""
    store, msgs, key_value = _rosbags_messages()
    msg = gap_event_msg(msgs, key_value, record, stamp_ns, snapshot)
    return bytes(store.serialize_cdr(msg, "sim_real_bridge/msg/GapEvent"))


def divergence_summary_cdr(record: Any) -> bytes:
    """sim_real_bridge/msg/DivergenceSummary of a SummaryRecord, as the node publishes it
    (:func:`~sim_real_bridge.conversions.divergence_msgs.divergence_summary_msg`)."""
    store, msgs, key_value = _rosbags_messages()
    msg = divergence_summary_msg(msgs, key_value, record)
    return bytes(store.serialize_cdr(msg, "sim_real_bridge/msg/DivergenceSummary"))


# ------------------------------------------------------------------------ readers
class _Cursor:
    """Reads a little-endian CDR message field by field.

    The payload starts 4 bytes in, so alignment to 4 relative to it is alignment of the
    offset in the message; float64 values align to 8 relative to the payload.

    Raises:
        ValueError: not little-endian CDR, truncated, or a malformed string.
        struct.error: a uint32 or time past the end (the readers report it as truncated).
    """

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        if len(data) < HEADER_BYTES or data[0] != 0 or data[1] not in (1, 3):
            raise ValueError("not little-endian CDR")
        self.data = data
        self.pos = HEADER_BYTES  # offset in data of the next byte to read

    def _end(self, end: int) -> int:
        """Moves to ``end`` (the end of the field just read)."""
        if end > len(self.data):
            raise ValueError("truncated CDR message")
        self.pos = end
        return end

    def u32(self) -> int:
        start = (self.pos + 3) & -4
        self.pos = start + 4
        return _U32.unpack_from(self.data, start)[0]  # struct.error past the end

    def time(self) -> tuple[int, int]:
        """A builtin_interfaces/Time or Duration: (sec, nanosec)."""
        start = (self.pos + 3) & -4
        self.pos = start + 8
        return _TIME.unpack_from(self.data, start)  # struct.error past the end

    def string(self) -> str:
        size = self.u32()
        start = self.pos
        end = self._end(start + size)
        if size == 0 or self.data[end - 1] != 0:
            raise ValueError("bad CDR string")
        return self.data[start:end - 1].decode("utf-8")

    def strings(self, max_count: int | None = None) -> tuple[str, ...]:
        """A string[]; a stream repeats the same names, so each distinct block of bytes is decoded once."""
        count = self.u32()
        if count > (len(self.data) - self.pos) // 5 or (max_count is not None and count > max_count):
            raise ValueError("bad CDR string count")
        start = end = self.pos
        for _ in range(count):  # skip them: each a 4-aligned uint32 size, then its bytes
            end = (end + 3) & -4
            if end + 4 > len(self.data):
                raise ValueError("truncated CDR message")
            end += 4 + _U32.unpack_from(self.data, end)[0]
        self._end(end)
        return _decode_strings(self.data[start:end], count)

    def f64s(self, count: int) -> np.ndarray:
        """``count`` float64 (read-only, a view of the bytes)."""
        if count == 0:
            return np.zeros(0)
        start = self._f64_start()
        self._end(start + 8 * count)
        return np.frombuffer(self.data, dtype="<f8", count=count, offset=start)

    def f64_values(self, count: int) -> tuple[float, ...]:
        """``count`` float64 as Python floats."""
        start = self._f64_start()
        self._end(start + 8 * count)
        return struct.unpack_from(f"<{count}d", self.data, start)

    def _f64_start(self) -> int:
        return HEADER_BYTES + ((self.pos - HEADER_BYTES + 7) & -8)

    def f64_sequence(self) -> np.ndarray:
        return self.f64s(self.u32())

    def header(self) -> SimpleNamespace:
        """A std_msgs/Header."""
        sec, nanosec = self.time()
        return SimpleNamespace(stamp=SimpleNamespace(sec=sec, nanosec=nanosec), frame_id=self.string())


@functools.lru_cache(maxsize=64)
def _decode_strings(block: bytes, count: int) -> tuple[str, ...]:
    """The ``count`` strings of a string[]'s bytes after its count (they start 4-aligned)."""
    cursor = _Cursor(bytes(LITTLE_ENDIAN_CDR) + block)
    return tuple(cursor.string() for _ in range(count))


def _cdr_reader(read_fields: Callable[[_Cursor], Any]) -> Callable[[bytes], Any]:
    """A reader of raw CDR bytes from a function that reads a message's fields off a cursor.

    The reader raises ValueError for bytes that are not such a message.
    """

    @functools.wraps(read_fields)
    def read(data: bytes) -> Any:
        cursor = _Cursor(bytes(data))
        try:
            return read_fields(cursor)
        except struct.error as exc:  # a uint32 or time past the end
            raise ValueError("truncated CDR message") from exc

    return read


@_cdr_reader
def read_joint_state(cursor: _Cursor) -> SimpleNamespace:
    """sensor_msgs/JointState from raw CDR: ``header``, ``name`` (a tuple), ``position``, ``velocity``, ``effort``."""
    # Keyword arguments are evaluated in order: the fields in message order.
    return SimpleNamespace(header=cursor.header(), name=cursor.strings(), position=cursor.f64_sequence(),
                           velocity=cursor.f64_sequence(), effort=cursor.f64_sequence())


@_cdr_reader
def read_wrench_stamped(cursor: _Cursor) -> SimpleNamespace:
    """geometry_msgs/WrenchStamped from raw CDR: ``header`` and ``wrench.force/torque.x/y/z``."""
    header = cursor.header()
    fx, fy, fz, tx, ty, tz = cursor.f64_values(6)
    return SimpleNamespace(header=header, wrench=SimpleNamespace(
        force=SimpleNamespace(x=fx, y=fy, z=fz), torque=SimpleNamespace(x=tx, y=ty, z=tz)))


def time_message(stamp_ns: int) -> bytes:
    """A builtin_interfaces/msg/Time serialized as little-endian CDR."""
    return bytes(LITTLE_ENDIAN_CDR) + _TIME.pack(*divmod(int(stamp_ns), NS_PER_S))


_POINT_SEQUENCES = ("positions", "velocities", "accelerations", "effort")


@functools.lru_cache(maxsize=64)
def _point_layout(counts: tuple[int, int, int, int], start: int) -> CdrLayout:
    """A trajectory_msgs/JointTrajectoryPoint with these sequence lengths, beginning at
    payload offset ``start`` (modulo 8: the float64 values align by it)."""
    layout = CdrLayout(start=start)
    for name, count in zip(_POINT_SEQUENCES, counts, strict=True):
        layout.sequence(name, "<f8", (count,))
    layout.time("time_from_start")
    return layout


def _point_counts(cursor: _Cursor, max_count: int) -> tuple[int, int, int, int]:
    """The sequence lengths of the JointTrajectoryPoint at the cursor; moves past it."""
    counts = []
    for _ in _POINT_SEQUENCES:
        count = cursor.u32()
        if count > max_count:
            raise ValueError("CDR sequence longer than the typestore's maximum")
        cursor.f64s(count)
        counts.append(count)
    cursor.time()
    return counts[0], counts[1], counts[2], counts[3]


def _read_points(cursor: _Cursor, n_points: int, max_count: int) -> tuple[np.ndarray, np.ndarray, list[int]] | None:
    """(positions (n, J), velocities (n, V), time_from_start ns) of ``n_points`` points that
    all have the first point's sequence lengths; None for other points."""
    start = cursor.pos - HEADER_BYTES
    counts = _point_counts(cursor, max_count)
    # A point ends at the same alignment wherever it starts (after its last non-empty
    # float64 values, or at its start when all are empty): the points after the first all
    # begin alike and form one array of a structured dtype.
    first = _point_layout(counts, start % 8)
    rest = _point_layout(counts, (start + first.size) % 8)
    parts = [np.frombuffer(cursor.data, first.dtype, 1, HEADER_BYTES + start),
             np.frombuffer(cursor.data, rest.dtype, n_points - 1, HEADER_BYTES + start + first.size)]
    cursor.pos = HEADER_BYTES + start + first.size + (n_points - 1) * rest.size
    for name, count in zip(_POINT_SEQUENCES, counts, strict=True):
        if any((part[f"{name}.count"] != count).any() for part in parts):
            return None

    def values(name: str, count: int) -> np.ndarray:
        return np.concatenate([part[name] for part in parts]) if count else np.zeros((n_points, 0))

    time_ns = np.concatenate([part["time_from_start.sec"].astype(np.int64) * NS_PER_S
                              + part["time_from_start.nanosec"] for part in parts])
    return values("positions", counts[0]), values("velocities", counts[1]), time_ns.tolist()


def joint_trajectory_data_from_cdr(data: bytes, max_sequence_length: int) -> Any | None:
    """trajectory_msgs/msg/JointTrajectory CDR bytes to the JointTrajectoryData that
    ``joint_trajectory_to_data`` makes of rosbags' message, its points read as one array.

    Takes little-endian messages whose points all have the first point's sequence
    lengths; None for any other message and for one rosbags would refuse (trailing bytes
    beyond padding, sequences over ``max_sequence_length``): deserialize those with rosbags.
    """
    from sim_real_bridge.sim.trajectory import JointTrajectoryData, TrajectoryPoint  # noqa: PLC0415

    data = bytes(data)
    if data[:2] != b"\x00\x01":
        return None
    try:
        cursor = _Cursor(data)
        sec, nanosec = cursor.time()
        cursor.string()  # frame_id
        names = cursor.strings(max_sequence_length)
        n_points = cursor.u32()
        if n_points > max_sequence_length:
            return None
        points: list[Any] = []
        if n_points:
            read = _read_points(cursor, n_points, max_sequence_length)
            if read is None:
                return None
            positions, velocities, time_ns = read
            points = [TrajectoryPoint(time_from_start_ns=time_ns[i], positions=positions[i],
                                      velocities=velocities[i] if velocities.shape[1] else None)
                      for i in range(n_points)]
    except (ValueError, struct.error):  # malformed or truncated (frombuffer: too few bytes for the points)
        return None
    if len(data) - cursor.pos > 3:  # rosbags accepts at most the padding to a 4-byte boundary
        return None
    return JointTrajectoryData(joint_names=names, points=tuple(points), start_ns=sec * NS_PER_S + nanosec)
