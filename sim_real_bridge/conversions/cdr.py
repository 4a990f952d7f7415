"""Fast readers of raw CDR JointState and WrenchStamped, for the monitor's 1 kHz inputs.

rclpy's deserializer builds a Python message object field by field (headers, times,
vectors), which at 4000 messages/s costs more than the analysis. These read the
little-endian XCDR1 bytes directly into light objects with the same field names, so
:func:`~sim_real_bridge.conversions.robot_msgs.joint_state_to_arrays` and
:func:`~sim_real_bridge.conversions.robot_msgs.wrench_to_arrays` read them unchanged;
numeric arrays come back as read-only numpy views of the bytes.

Trailing bytes are ignored (rmw buffers may carry padding). Anything unexpected
(big-endian encapsulation, truncated data, bad lengths or strings) raises :class:`ValueError`; the caller then falls back to rclpy's reader.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import struct
from types import SimpleNamespace
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sim_real_bridge.core.rows import join_rows

_HEADER = 4  # encapsulation: 0x00 0x01 = CDR little endian, then 2 option bytes
_U32 = struct.Struct("<I")
_STAMP = struct.Struct("<iI")
_F64x6 = struct.Struct("<6d")


def _check_encapsulation(data: bytes) -> None:
    if len(data) < _HEADER + 12 or data[0] != 0 or data[1] not in (1, 3):
        raise ValueError("not little-endian CDR")


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    """String at body offset ``pos`` (aligned to 4): returns (text, next offset)."""
    pos = (pos + 3) & ~3
    (length,) = _U32.unpack_from(data, _HEADER + pos)
    start = _HEADER + pos + 4
    end = start + length
    if length == 0 or end > len(data) or data[end - 1] != 0:
        raise ValueError("bad CDR string")
    return data[start:end - 1].decode("utf-8"), pos + 4 + length


def _read_header(data: bytes) -> tuple[SimpleNamespace, int]:
    sec, nanosec = _STAMP.unpack_from(data, _HEADER)
    frame_id, pos = _read_string(data, 8)
    return SimpleNamespace(stamp=SimpleNamespace(sec=sec, nanosec=nanosec), frame_id=frame_id), pos


def _read_f64_sequence(data: bytes, pos: int) -> tuple[np.ndarray, int]:
    pos = (pos + 3) & ~3
    (count,) = _U32.unpack_from(data, _HEADER + pos)
    pos += 4
    if count == 0:
        return np.zeros(0), pos
    pos = (pos + 7) & ~7
    end = pos + 8 * count
    if _HEADER + end > len(data):
        raise ValueError("truncated CDR float64 sequence")
    return np.frombuffer(data, dtype="<f8", count=count, offset=_HEADER + pos), end


def read_joint_state(data: bytes) -> SimpleNamespace:
    """sensor_msgs/JointState from raw CDR: ``header``, ``name`` (a tuple), ``position``, ``velocity``, ``effort``."""
    try:
        return _joint_state(bytes(data))
    except struct.error as exc:
        raise ValueError(f"truncated CDR message: {exc}") from exc


def read_wrench_stamped(data: bytes) -> SimpleNamespace:
    """geometry_msgs/WrenchStamped from raw CDR: ``header`` and ``wrench.force/torque.x/y/z``."""
    try:
        return _wrench_stamped(bytes(data))
    except struct.error as exc:
        raise ValueError(f"truncated CDR message: {exc}") from exc


@functools.lru_cache(maxsize=64)
def _decode_names(block: bytes, count: int) -> tuple[str, ...]:
    """The ``count`` strings of a name sequence's bytes (starting 4-aligned in the body)."""
    body = bytes(_HEADER) + block  # _read_string reads body offsets after the encapsulation
    names, pos = [], 0
    for _ in range(count):
        name, pos = _read_string(body, pos)
        names.append(name)
    return tuple(names)


def _joint_state(data: bytes) -> SimpleNamespace:
    _check_encapsulation(data)
    header, pos = _read_header(data)
    pos = (pos + 3) & ~3
    (count,) = _U32.unpack_from(data, _HEADER + pos)
    pos += 4
    if count > (len(data) - _HEADER - pos) // 5:
        raise ValueError("bad CDR name count")
    # A stream's names are the same bytes message after message: decode them once.
    start = pos
    end = pos
    for _ in range(count):
        end = (end + 3) & ~3
        if _HEADER + end + 4 > len(data):
            raise ValueError("bad CDR string")
        (length,) = _U32.unpack_from(data, _HEADER + end)
        end += 4 + length
    names = _decode_names(data[_HEADER + start:_HEADER + end], count)
    pos = end
    position, pos = _read_f64_sequence(data, pos)
    velocity, pos = _read_f64_sequence(data, pos)
    effort, pos = _read_f64_sequence(data, pos)
    return SimpleNamespace(header=header, name=names, position=position, velocity=velocity, effort=effort)


def _wrench_stamped(data: bytes) -> SimpleNamespace:
    _check_encapsulation(data)
    header, pos = _read_header(data)
    pos = (pos + 7) & ~7
    if _HEADER + pos + _F64x6.size > len(data):
        raise ValueError("truncated CDR wrench")
    fx, fy, fz, tx, ty, tz = _F64x6.unpack_from(data, _HEADER + pos)
    return SimpleNamespace(header=header, wrench=SimpleNamespace(
        force=SimpleNamespace(x=fx, y=fy, z=fz), torque=SimpleNamespace(x=tx, y=ty, z=tz)))


def time_message(stamp_ns: int) -> bytes:
    """A builtin_interfaces/msg/Time serialized as little-endian CDR."""
    sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
    return b"\x00\x01\x00\x00" + _STAMP.pack(sec, nanosec)


# --------------------------------------------------------------------------- writers
# Divergence records straight to CDR bytes (offline replay writes thousands per second
# of recording; building rosbags message objects first cost more than the analysis).
# Layouts follow msg/*.msg; test_cdr_writers holds them byte-equal to rosbags' serializer.
# The ``*_many`` writers fill the records of one layout into a template with numpy.
#: An absent object's pose: the origin, identity orientation (x, y, z, qx, qy, qz, qw), as the
#: message defaults it (geometry_msgs/Quaternion w defaults to 1).
_ZERO_POSE = (0.0,) * 6 + (1.0,)
#: Fewest records worth a template (below, record by record is cheaper).
_MIN_BATCH = 8


class _Writer:
    """Little-endian XCDR1 body after the 4-byte encapsulation header; alignment is
    relative to the body start.

    Args:
        start: the message so far (encapsulation header included), to continue it.
        marks: when given, where each named field lands (offsets in the whole message).
    """

    def __init__(self, start: bytes = b"\x00\x01\x00\x00", marks: dict[str, list[int]] | None = None) -> None:
        self.buf = bytearray(start)
        self.marks = marks

    def mark(self, name: str | None) -> None:
        """Note where field ``name`` begins (callers test ``marks`` first: the live node
        writes every record through here, without marks)."""
        if name is not None:
            self.marks.setdefault(name, []).append(len(self.buf))  # type: ignore[union-attr]

    def align(self, size: int) -> None:
        pad = -(len(self.buf) - _HEADER) % size
        if pad:
            self.buf += b"\x00" * pad

    def u32(self, value: int) -> None:
        self.align(4)
        self.buf += _U32.pack(value)

    def string(self, text: str) -> None:
        data = text.encode("utf-8") + b"\x00"
        self.u32(len(data))
        self.buf += data

    def header(self, stamp_ns: int, frame_id: str, mark: str | None = "stamp") -> None:
        self.align(4)
        if self.marks is not None:
            self.mark(mark)
        self.time(stamp_ns)
        self.string(frame_id)

    def f64s(self, values: Any, mark: str | None = None) -> None:
        """Fixed-size float64 fields in a row."""
        self.align(8)
        if self.marks is not None:
            self.mark(mark)
        self.buf += np.asarray(values, dtype="<f8").tobytes()

    def f64_seq(self, values: Any, mark: str | None = None) -> None:
        """A float64 sequence; ``mark`` is set only when it is not empty."""
        arr = np.asarray(values, dtype="<f8").ravel()
        self.u32(arr.size)
        if arr.size:
            self.align(8)
            if self.marks is not None:
                self.mark(mark)
            self.buf += arr.tobytes()

    def doubles(self, *values: float) -> None:
        """float64 fields in a row, from Python numbers (no numpy array for a few values)."""
        self.align(8)
        self.buf += struct.pack(f"<{len(values)}d", *values)

    def time(self, stamp_ns: int) -> None:
        """A builtin_interfaces/Time."""
        self.align(4)
        self.buf += _STAMP.pack(*divmod(int(stamp_ns), 1_000_000_000))

    def f32s(self, values: Any, mark: str | None = None) -> None:
        """Fixed-size float32 fields in a row."""
        self.align(4)
        if self.marks is not None:
            self.mark(mark)
        self.buf += struct.pack(f"<{len(values)}f", *values)

    def u8(self, value: int, mark: str | None = None) -> None:
        if self.marks is not None:
            self.mark(mark)
        self.buf.append(int(value) & 0xFF)


def _pose_values(position_m: Any, orientation_wxyz: Any) -> list[float]:
    w, x, y, z = (float(v) for v in orientation_wxyz[:4])
    return [float(v) for v in position_m[:3]] + [x, y, z, w]


def _stamp_bytes(stamp_ns: Sequence[int]) -> np.ndarray | None:
    """builtin_interfaces/Time of each stamp as (n, 8) bytes; None when a second is beyond int32."""
    sec, nanosec = np.divmod(np.asarray(stamp_ns, dtype=np.int64), 1_000_000_000)
    if sec.size and (sec.min() < -(2**31) or sec.max() >= 2**31):
        return None
    stamps = np.empty((sec.size, 2), dtype="<i4")
    stamps[:, 0], stamps[:, 1] = sec, nanosec  # nanosec < 2**31: the uint32 bytes are the same
    return stamps.view(np.uint8)


def _f64_bytes(values: Any, n: int) -> np.ndarray:
    """float64 rows of n records as (n, 8 * width) bytes."""
    return np.ascontiguousarray(values, dtype="<f8").reshape(n, -1).view(np.uint8)


def _fill(template: bytes, fields: Sequence[tuple[int, np.ndarray]]) -> list[bytes]:
    """Messages of one layout: the template with, per message, each field's row of
    bytes (n, size) written at its offset (in the whole message)."""
    n = fields[0][1].shape[0]
    out = np.tile(np.frombuffer(template, dtype=np.uint8), (n, 1))
    for offset, block in fields:
        out[:, offset:offset + block.shape[1]] = block
    data, size = out.tobytes(), out.shape[1]
    return [data[start:start + size] for start in range(0, len(data), size)]


def _rows(values: list[Any]) -> np.ndarray:
    """``np.array(values, dtype=float)`` of a list of rows; rows that are 1-D and of one
    length are joined by one concatenate (np.array converts them one by one)."""
    try:
        flat = np.concatenate(values) if len(set(map(len, values))) == 1 else None
    except (TypeError, ValueError):  # scalar rows
        flat = None
    if flat is not None and flat.ndim == 1:
        return np.asarray(flat, dtype=float).reshape(len(values), len(values[0]))
    return np.array(values, dtype=float)


def _joined(records: Sequence[Any], names: tuple[str, ...], width: int) -> np.ndarray | None:
    """Fields ``names`` of every record side by side, (n, len(names) * width) float64, when
    every one is a contiguous float64 array of exactly ``width`` values (:func:`join_rows`:
    the bytes of np.concatenate); else None."""
    arrays = list(itertools.chain.from_iterable(map(operator.attrgetter(*names), records))) if len(names) > 1 \
        else list(map(operator.attrgetter(names[0]), records))
    joined = join_rows(arrays, width)
    return None if joined is None else joined.reshape(len(records), len(names) * width)


def _stack(records: Sequence[Any], names: str | tuple[str, ...], width: int) -> np.ndarray:
    """The first ``width`` values of fields ``names`` of every record side by side,
    (n, len(names) * width) float64."""
    names = (names,) if isinstance(names, str) else names
    joined = _joined(records, names, width)
    if joined is not None:
        return joined
    return np.hstack([_rows([values[:width] for values in map(operator.attrgetter(name), records)])
                      for name in names])


def _scalars(records: Sequence[Any], *names: str, dtype: Any = float) -> np.ndarray:
    """Scalar fields ``names`` of every record, (n, len(names)).

    A flat list per field, not a list per record: thousands of small lists would set off
    the garbage collector's full passes over a large heap.
    """
    n = len(records)
    return np.column_stack([np.fromiter(map(operator.attrgetter(name), records), dtype, n) for name in names])


def _batch(records: Sequence[Any], write_one: Callable[..., bytes], frame_id: str,
           ) -> tuple[bytes, dict[str, list[int]], np.ndarray] | None:
    """(template, its field marks, stamp bytes) for records of one layout worth filling in
    a batch; None: too few, or a stamp beyond int32 seconds (write them one by one)."""
    stamps = _stamp_bytes([r.stamp_ns for r in records])
    if len(records) < _MIN_BATCH or stamps is None:
        return None
    marks: dict[str, list[int]] = {}
    return write_one(records[0], frame_id, marks), marks, stamps


def _count(values: Any) -> int:
    """``np.size(values)``, without its call overhead for arrays (it runs per record)."""
    return values.size if type(values) is np.ndarray else int(np.size(values))


def joint_divergence_cdr_many(records: Sequence[Any], frame_id: str = "") -> list[bytes]:
    """:func:`joint_divergence_cdr` of many records at once (same bytes): records of one
    layout (joint names and array lengths) are filled into one template with numpy."""
    # A replay's records normally share one layout (the same names tuple): checked once
    # for all of them before grouping record by record.
    whole = _joint_batch(records, frame_id)
    if whole is not None:
        return whole
    out: list[bytes | None] = [None] * len(records)
    groups: dict[tuple, list[int]] = {}
    for i, rec in enumerate(records):
        key = (tuple(rec.names), _count(rec.position_residual_rad), _count(rec.velocity_residual_rad_s),
               _count(rec.effort_residual))
        groups.setdefault(key, []).append(i)
    for rows in groups.values():
        data = _joint_batch([records[i] for i in rows], frame_id)
        if data is None:
            data = [joint_divergence_cdr(records[i], frame_id) for i in rows]
        for i, message in zip(rows, data, strict=True):
            out[i] = message
    return out  # type: ignore[return-value]


def _joint_batch(records: Sequence[Any], frame_id: str) -> list[bytes] | None:
    """:func:`joint_divergence_cdr` of records of one layout (equal names; float64 arrays
    of the first record's lengths), from one template; None for any other records, too
    few, or a stamp :func:`_batch` refuses."""
    if len(records) < _MIN_BATCH:
        return None
    names = list(map(operator.attrgetter("names"), records))
    try:
        if names.count(names[0]) != len(names):  # identity first: no tuple compared when shared
            return None
    except (TypeError, ValueError):  # names that do not compare as a truth value (arrays)
        return None
    first = records[0]
    arrays = {}
    for name in ("position_residual_rad", "velocity_residual_rad_s", "effort_residual"):
        arrays[name] = _joined(records, (name,), _count(getattr(first, name)))
        if arrays[name] is None:
            return None
    batch = _batch(records, joint_divergence_cdr, frame_id)
    if batch is None:
        return None
    template, marks, stamps = batch
    n = len(records)
    fields = [(marks["stamp"][0], stamps)]
    for name, values in arrays.items():
        if name in marks:  # empty sequences have no values to fill
            fields.append((marks[name][0], _f64_bytes(values, n)))
    fields.append((marks["timing"][0], _f64_bytes(
        _scalars(records, "clock_offset_s", "clock_offset_std_s", "latency_s", "latency_std_s"), n)))
    fields.append((marks["compensated"][0],
                   np.array([bool(r.latency_compensated) for r in records], dtype=np.uint8)[:, None]))
    return _fill(template, fields)


def joint_divergence_cdr(record: Any, frame_id: str = "", marks: dict[str, list[int]] | None = None) -> bytes:
    """sim_real_bridge/msg/JointDivergence of a JointDivergenceRecord, as CDR bytes."""
    out = _Writer(marks=marks)
    out.header(record.stamp_ns, frame_id)
    out.u32(len(record.names))
    for name in record.names:
        out.string(str(name))
    out.f64_seq(record.position_residual_rad, "position_residual_rad")
    out.f64_seq(record.velocity_residual_rad_s, "velocity_residual_rad_s")
    out.f64_seq(record.effort_residual, "effort_residual")
    out.f64s([record.clock_offset_s, record.clock_offset_std_s, record.latency_s, record.latency_std_s], "timing")
    out.u8(bool(record.latency_compensated), "compensated")
    return bytes(out.buf)


#: ContactResidual's vectors in message order (fields of a ContactRecord).
_CONTACT_VECTORS = ("sim_force_n", "sim_torque_nm", "real_force_n", "real_torque_nm", "residual_force_n",
                    "residual_torque_nm")


def contact_residual_cdr_many(records: Sequence[Any], frame_id: str = "") -> list[bytes]:
    """:func:`contact_residual_cdr` of many records at once (same bytes)."""
    batch = _batch(records, contact_residual_cdr, frame_id)
    if batch is None:
        return [contact_residual_cdr(r, frame_id) for r in records]
    template, marks, stamps = batch
    n = len(records)
    values = np.hstack([_stack(records, _CONTACT_VECTORS, 3),
                        _scalars(records, "force_residual_norm_n", "torque_residual_norm_nm")])
    phases = _scalars(records, "sim_contact_phase", "real_contact_phase", dtype=np.int64)
    return _fill(template, [(marks["stamp"][0], stamps), (marks["values"][0], _f64_bytes(values, n)),
                            (marks["phases"][0], (phases & 0xFF).astype(np.uint8))])


def contact_residual_cdr(record: Any, frame_id: str = "", marks: dict[str, list[int]] | None = None) -> bytes:
    """sim_real_bridge/msg/ContactResidual of a ContactRecord, as CDR bytes."""
    out = _Writer(marks=marks)
    out.header(record.stamp_ns, frame_id)
    values = np.concatenate([
        np.asarray(v, dtype=float)[:3] for v in (record.sim_force_n, record.sim_torque_nm, record.real_force_n,
                                                record.real_torque_nm, record.residual_force_n,
                                                record.residual_torque_nm)
    ] + [np.array([record.force_residual_norm_n, record.torque_residual_norm_nm], dtype=float)])
    out.f64s(values, "values")
    out.u8(record.sim_contact_phase, "phases")
    out.u8(record.real_contact_phase)
    return bytes(out.buf)


#: PoseDivergence's ``ee`` values (sim pose, real pose as x, y, z, qx, qy, qz, qw; the
#: error vector; its norm and angle) as columns of [3 position fields | 2 wxyz quaternions | 2 scalars].
_EE_COLUMNS = [0, 1, 2, 10, 11, 12, 9, 3, 4, 5, 14, 15, 16, 13, 6, 7, 8, 17, 18]
#: Its ``objects`` values (sim pose, real pose, two errors) as columns of
#: [2 position fields | 2 wxyz quaternions | 2 scalars].
_OBJECT_COLUMNS = [0, 1, 2, 7, 8, 9, 6, 3, 4, 5, 11, 12, 13, 10, 14, 15]


def pose_divergence_cdr_many(records: Sequence[Any], frame_id: str = "world") -> list[bytes]:
    """:func:`pose_divergence_cdr` of many records at once (same bytes)."""
    batch = _batch(records, pose_divergence_cdr, frame_id)
    if batch is None:
        return [pose_divergence_cdr(r, frame_id) for r in records]
    template, marks, stamps = batch
    n = len(records)
    ee = np.hstack([
        _stack(records, ("sim_ee_position_m", "real_ee_position_m", "ee_position_error_m"), 3),
        _stack(records, ("sim_ee_orientation_wxyz", "real_ee_orientation_wxyz"), 4),
        _scalars(records, "ee_position_error_norm_m", "ee_orientation_error_rad")])[:, _EE_COLUMNS]
    has_object = np.array([bool(r.has_object) for r in records])
    objects = np.empty((n, 16))
    objects[:] = list(_ZERO_POSE) * 2 + [math.nan, math.nan]
    if has_object.any():
        picked = [r for r, has in zip(records, has_object.tolist(), strict=True) if has]
        objects[has_object] = np.hstack([
            _stack(picked, ("sim_object_position_m", "real_object_position_m"), 3),
            _stack(picked, ("sim_object_orientation_wxyz", "real_object_orientation_wxyz"), 4),
            _scalars(picked, "object_position_error_norm_m", "object_orientation_error_rad")])[:, _OBJECT_COLUMNS]
    return _fill(template, [(marks["stamp"][0], stamps), (marks["ee"][0], _f64_bytes(ee, n)),
                            (marks["has_object"][0], has_object.astype(np.uint8)[:, None]),
                            (marks["objects"][0], _f64_bytes(objects, n))])


def pose_divergence_cdr(record: Any, frame_id: str = "world", marks: dict[str, list[int]] | None = None) -> bytes:
    """sim_real_bridge/msg/PoseDivergence of a PoseDivergenceRecord, as CDR bytes."""
    out = _Writer(marks=marks)
    out.header(record.stamp_ns, frame_id)
    out.f64s(_pose_values(record.sim_ee_position_m, record.sim_ee_orientation_wxyz)
             + _pose_values(record.real_ee_position_m, record.real_ee_orientation_wxyz)
             + [float(v) for v in record.ee_position_error_m[:3]]
             + [float(record.ee_position_error_norm_m), float(record.ee_orientation_error_rad)], "ee")
    out.u8(bool(record.has_object), "has_object")
    if record.has_object:
        objects = (_pose_values(record.sim_object_position_m, record.sim_object_orientation_wxyz)
                   + _pose_values(record.real_object_position_m, record.real_object_orientation_wxyz)
                   + [float(record.object_position_error_norm_m), float(record.object_orientation_error_rad)])
    else:
        objects = list(_ZERO_POSE) * 2 + [math.nan, math.nan]
    out.f64s(objects, "objects")
    return bytes(out.buf)


def divergence_summary_cdr(record: Any) -> bytes:
    """sim_real_bridge/msg/DivergenceSummary of a SummaryRecord, as CDR bytes (the fields
    :func:`~sim_real_bridge.conversions.divergence_msgs.divergence_summary_msg` sets)."""
    out = _Writer()
    out.header(record.stamp_ns, "")
    out.doubles(float(record.elapsed_s), float(record.window_s))
    out.u32(len(record.ledger))
    for row in record.ledger:
        out.string(row.category)
        out.doubles(float(row.share_run), float(row.share_window))
        out.u32(int(row.event_count))
    out.doubles(float(record.unexplained_share_run), float(record.unexplained_share_window),
                float(record.joint_position_rms_rad), float(record.ee_position_rms_m),
                float(record.force_residual_rms_n))
    out.u32(int(record.event_count))
    out.u32(int(record.open_event_count))
    out.u32(int(record.rejected_count))
    _key_values(out, record.rejected_by_reason)
    out.doubles(float(record.clock_offset_s), float(record.latency_s))
    out.u32(int(record.clock_resets))
    return bytes(out.buf)


def gap_event_cdr(record: Any, stamp_ns: int, snapshot: str = "") -> bytes:
    """sim_real_bridge/msg/GapEvent of an EventRecord, as CDR bytes (the fields
    :func:`~sim_real_bridge.conversions.divergence_msgs.gap_event_msg` sets)."""
    out = _Writer()
    out.header(stamp_ns, "")
    out.string(record.id)
    out.string(record.category)
    out.string(record.kind)
    out.doubles(float(record.severity))
    out.time(record.start_ns)
    out.time(record.end_ns)
    out.u8(bool(record.open))
    _key_values(out, record.evidence)
    out.string(snapshot)
    return bytes(out.buf)


def _key_values(out: _Writer, values: dict[Any, Any]) -> None:
    """A diagnostic_msgs/KeyValue sequence of a dict, sorted by key, as text."""
    out.u32(len(values))
    for key, value in sorted(values.items()):
        out.string(str(key))
        out.string(str(value))


# visualization_msgs/Marker constants (as divergence_msgs.divergence_markers uses them).
_ARROW, _SPHERE, _TEXT_VIEW_FACING, _ADD = 0, 2, 9, 0
_LABEL_OFFSET_M = np.array([0.0, 0.0, 0.12])  # the label floats above the real end effector


def _marker(out: _Writer, stamp_ns: int, frame_id: str, ns: str, marker_id: int, kind: int,
            position: Any, scale: tuple[float, float, float], rgba: tuple[float, float, float, float],
            points: tuple[Any, ...] = ()) -> None:
    """One visualization_msgs/Marker as divergence_markers fills it (every other field at
    its default), up to its text: :func:`_marker_text` ends it. Marks ``{ns}.position``,
    ``{ns}.colour`` and ``{ns}.points``."""
    out.header(stamp_ns, frame_id)
    out.string(ns)
    out.align(4)
    out.buf += struct.pack("<3i", marker_id, kind, _ADD)
    out.f64s([float(v) for v in position[:3]] + [0.0, 0.0, 0.0, 1.0], f"{ns}.position")  # orientation xyzw
    out.f64s(list(scale))
    out.f32s(rgba, f"{ns}.colour")
    out.buf += _STAMP.pack(0, 0)  # lifetime
    out.u8(0)  # frame_locked
    out.u32(len(points))
    if points:
        out.f64s([float(v) for p in points for v in p[:3]], f"{ns}.points")
    out.u32(0)  # colors
    out.string("")  # texture_resource
    out.header(0, "", mark=None)  # texture: CompressedImage header, format, data
    out.string("")
    out.u32(0)
    out.u32(0)  # uv_coordinates


def _marker_text(out: _Writer, text: str) -> None:
    """The rest of a marker begun by :func:`_marker`: its text and the defaults after it."""
    out.string(text)
    _marker_tail(out)


def _marker_tail(out: _Writer) -> None:
    """A marker's fields after its text, at their defaults."""
    out.string("")  # mesh_resource
    out.string("")  # mesh_file: filename, data
    out.u32(0)
    out.u8(0)  # mesh_use_embedded_materials


def _markers_head(out: _Writer, stamp_ns: int, frame_id: str, sim_p: np.ndarray, real_p: np.ndarray,
                  colour: tuple[float, float, float, float]) -> None:
    """The MarkerArray of :func:`divergence_markers_cdr` up to the label's text."""
    out.u32(4)
    _marker(out, stamp_ns, frame_id, "sim_ee", 0, _SPHERE, sim_p, (0.04, 0.04, 0.04), (0.2, 0.4, 1.0, 0.8))
    _marker_text(out, "")
    _marker(out, stamp_ns, frame_id, "real_ee", 1, _SPHERE, real_p, (0.04, 0.04, 0.04), (1.0, 0.3, 0.2, 0.8))
    _marker_text(out, "")
    _marker(out, stamp_ns, frame_id, "ee_error", 2, _ARROW, (0.0, 0.0, 0.0), (0.005, 0.012, 0.012), colour,
            points=(sim_p, real_p))
    _marker_text(out, "")
    _marker(out, stamp_ns, frame_id, "label", 3, _TEXT_VIEW_FACING, real_p + _LABEL_OFFSET_M, (0.0, 0.0, 0.05),
            colour)


def _markers_label(record: Any, open_categories: Sequence[str]) -> str:
    label = ", ".join(open_categories) if open_categories else "in agreement"
    return f"{label}  |  ee error {1000 * float(record.ee_position_error_norm_m):.1f} mm"


def _markers_colour(open_categories: Sequence[str]) -> tuple[float, float, float, float]:
    from sim_real_bridge.conversions.divergence_msgs import CATEGORY_RGBA

    return CATEGORY_RGBA[open_categories[0] if open_categories else "none"]


def divergence_markers_cdr(record: Any, open_categories: Sequence[str], stamp_ns: int,
                           frame_id: str = "world") -> bytes:
    """visualization_msgs/MarkerArray of :func:`~sim_real_bridge.conversions.divergence_msgs.divergence_markers`
    (sim and real end effector, the error arrow, the label), as CDR bytes."""
    out = _Writer()
    _markers_head(out, stamp_ns, frame_id, np.asarray(record.sim_ee_position_m, dtype=float),
                  np.asarray(record.real_ee_position_m, dtype=float), _markers_colour(open_categories))
    _marker_text(out, _markers_label(record, open_categories))
    return bytes(out.buf)


def divergence_markers_cdr_many(records: Sequence[Any], open_categories: Sequence[Sequence[str]],
                                stamps_ns: Sequence[int], frame_id: str = "world") -> list[bytes]:
    """:func:`divergence_markers_cdr` of many (record, open categories, stamp) at once
    (same bytes): everything before the label's text from one template."""
    stamps = _stamp_bytes(stamps_ns)
    if len(records) < _MIN_BATCH or stamps is None:
        return [divergence_markers_cdr(r, c, t, frame_id)
                for r, c, t in zip(records, open_categories, stamps_ns, strict=True)]
    n = len(records)
    positions = _stack(records, ("sim_ee_position_m", "real_ee_position_m"), 3)
    sim_p, real_p = positions[:, :3], positions[:, 3:]
    colours = [_markers_colour(c) for c in open_categories]
    marks: dict[str, list[int]] = {}
    head = _Writer(marks=marks)
    _markers_head(head, stamps_ns[0], frame_id, sim_p[0], real_p[0], colours[0])
    colour_bytes = np.array(colours, dtype="<f4").view(np.uint8)
    fields = [(offset, stamps) for offset in marks["stamp"]] + [
        (marks["sim_ee.position"][0], _f64_bytes(sim_p, n)),
        (marks["real_ee.position"][0], _f64_bytes(real_p, n)),
        (marks["ee_error.points"][0], _f64_bytes(positions, n)),
        (marks["ee_error.colour"][0], colour_bytes),
        (marks["label.position"][0], _f64_bytes(real_p + _LABEL_OFFSET_M, n)),
        (marks["label.colour"][0], colour_bytes)]
    # The label's text (its length at the 4-aligned end of the template), then the
    # defaults after it: their padding depends only on where the text ends (modulo 4).
    text_at = (len(head.buf) - _HEADER + 3) & ~3
    pad = b"\x00" * (text_at + _HEADER - len(head.buf))
    tails = []
    for end in range(4):
        tail = _Writer(b"\x00" * (_HEADER + end))
        _marker_tail(tail)
        tails.append(bytes(tail.buf[_HEADER + end:]))
    out = []
    pack = _U32.pack
    for data, record, categories in zip(_fill(bytes(head.buf), fields), records, open_categories, strict=True):
        text = _markers_label(record, categories).encode("utf-8") + b"\x00"
        out.append(b"".join((data, pad, pack(len(text)), text, tails[(text_at + 4 + len(text)) & 3])))
    return out


_U32 = struct.Struct("<I")
_TIME = struct.Struct("<iI")
_NS_PER_S = 1_000_000_000


def _cdr_string(body: bytes, pos: int) -> tuple[str, int] | None:
    """(string, position after it) at ``pos`` (aligned); None where rosbags refuses it."""
    (size,) = _U32.unpack_from(body, pos)
    end = pos + 4 + size
    if size < 1 or end > len(body) or body[end - 1] != 0:
        return None
    return body[pos + 4 : end - 1].decode(), end


def _point_layout(body: bytes, pos: int, max_count: int) -> tuple[list[tuple[int, int, int]], int, int] | None:
    """A JointTrajectoryPoint at ``pos``: (count position, values offset, count) of its four
    float64 sequences, its time_from_start offset and the end; None where rosbags refuses it."""
    arrays = []
    for _ in range(4):
        at = (pos + 3) & -4
        (count,) = _U32.unpack_from(body, at)
        pos = at + 4
        if pos + 8 * count > len(body) or count > max_count:
            return None
        if count:  # rosbags aligns float64 values only when there are some
            pos = (pos + 7) & -8
        arrays.append((at, pos, count))
        pos += 8 * count
    pos = (pos + 3) & -4
    if pos + 8 > len(body):
        return None
    return arrays, pos, pos + 8


def _point_starts(body: bytes, pos: int, n_points: int, max_count: int
                  ) -> tuple[np.ndarray, np.ndarray, list[int], int] | None:
    """Where ``n_points`` JointTrajectoryPoints start from ``pos`` when each is laid out as
    the first point that starts at its alignment (start % 8: a float64 sequence pads by
    it): (starts, per alignment 0/4 the point's 4 count positions, 4 value offsets and
    time offset from its start, the sequence lengths, the end); None for points that differ
    in their sequence lengths or that rosbags refuses. The caller checks every point's counts.
    """
    layouts: dict[int, tuple[list[int], int]] = {}
    starts = []
    counts: list[int] | None = None
    at = pos
    for _ in range(n_points):
        at = (at + 3) & -4
        if at & 4 not in layouts:
            layout = _point_layout(body, at, max_count)
            if layout is None:
                return None
            arrays, time_at, end = layout
            if counts is None:
                counts = [n for _, _, n in arrays]
            elif counts != [n for _, _, n in arrays]:
                return None
            layouts[at & 4] = ([*(c - at for c, _, _ in arrays), *(v - at for _, v, _ in arrays), time_at - at],
                               end - at)
        starts.append(at)
        at += layouts[at & 4][1]
    if at > len(body) or counts is None:
        return None
    table = np.zeros((2, 9), dtype=np.int64)
    for key, (offsets, _) in layouts.items():
        table[key >> 2] = offsets
    return np.asarray(starts, dtype=np.int64), table, counts, at


def _at_offsets(body: np.ndarray, dtype: str, offsets: np.ndarray) -> np.ndarray:
    """The ``dtype`` values of ``body`` (bytes) that start at byte ``offsets``."""
    size = np.dtype(dtype).itemsize
    return np.ndarray((body.size - size + 1,), dtype=dtype, buffer=body, strides=(1,))[offsets]


def joint_trajectory_data_from_cdr(data: bytes, max_sequence_length: int) -> Any | None:
    """trajectory_msgs/msg/JointTrajectory CDR bytes to the JointTrajectoryData that
    ``joint_trajectory_to_data`` makes of rosbags' message, its points read with numpy.

    rosbags builds objects and arrays point by point. This takes messages (little
    endian) whose points all have the first point's sequence lengths and a size that is a
    multiple of 8 bytes (every point then aligns alike); None for any other message or
    one rosbags would refuse: deserialize those with rosbags.
    """
    from sim_real_bridge.sim.trajectory import JointTrajectoryData, TrajectoryPoint  # noqa: PLC0415

    if len(data) < 4 or bytes(data[:2]) != b"\x00\x01":
        return None
    body = bytes(data[4:])
    try:
        sec, nanosec = _TIME.unpack_from(body, 0)
        frame = _cdr_string(body, 8)
        if frame is None:
            return None
        pos = (frame[1] + 3) & -4
        (count,) = _U32.unpack_from(body, pos)
        pos += 4
        if pos + 5 * count > len(body) or count > max_sequence_length:
            return None
        names = []
        for _ in range(count):
            name = _cdr_string(body, (pos + 3) & -4)
            if name is None:
                return None
            names.append(name[0])
            pos = name[1]
        pos = (pos + 3) & -4
        (n_points,) = _U32.unpack_from(body, pos)
        pos += 4
        if pos + n_points > len(body) or n_points > max_sequence_length:
            return None
        points: list[Any] = []
        if n_points:
            walked = _point_starts(body, pos, n_points, max_sequence_length)
            if walked is None:
                return None
            starts, table, counts, pos = walked
            buf = np.frombuffer(body, dtype=np.uint8)
            at = starts[:, None] + table[(starts & 4) >> 2]  # per point: 4 count positions, 4 offsets, time
            for column, n in enumerate(counts):
                if (_at_offsets(buf, "<u4", at[:, column]) != n).any():
                    return None  # a point unlike the first of its alignment
            time_ns = (_at_offsets(buf, "<i4", at[:, 8]).astype(np.int64) * _NS_PER_S
                       + _at_offsets(buf, "<u4", at[:, 8] + 4)).tolist()
            positions = _at_offsets(buf, "<f8", at[:, 4:5] + 8 * np.arange(counts[0]))
            velocities = _at_offsets(buf, "<f8", at[:, 5:6] + 8 * np.arange(counts[1]))
            for i in range(n_points):
                points.append(TrajectoryPoint(time_from_start_ns=time_ns[i], positions=positions[i],
                                              velocities=velocities[i] if counts[1] else None))
        if pos + 4 + 3 < len(data):
            return None
    except (struct.error, UnicodeDecodeError, ValueError, TypeError):
        return None
    return JointTrajectoryData(joint_names=tuple(names), points=tuple(points), start_ns=sec * _NS_PER_S + nanosec)
