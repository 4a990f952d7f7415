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
import math
import struct
from types import SimpleNamespace
from collections.abc import Sequence
from typing import Any

import numpy as np

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
_F64 = struct.Struct("<d")
# Object poses of a record without object: all zero, as divergence_msgs leaves them in
# rosbags' default-filled messages (rclpy's default orientation would have w = 1).
#: An absent object's pose: the origin, identity orientation (x, y, z, qx, qy, qz, qw), as the
#: message defaults it (geometry_msgs/Quaternion w defaults to 1).
_ZERO_POSE = (0.0,) * 6 + (1.0,)


class _Writer:
    """Little-endian XCDR1 body after the 4-byte encapsulation header; alignment is
    relative to the body start."""

    def __init__(self, marks: list[int] | None = None) -> None:
        self.buf = bytearray(b"\x00\x01\x00\x00")
        # When given: where each f64s/f64_seq block (-1: empty sequence) and u8 lands.
        self.marks = marks

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

    def header(self, stamp_ns: int, frame_id: str) -> None:
        sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
        self.align(4)
        self.buf += _STAMP.pack(sec, nanosec)
        self.string(frame_id)

    def f64s(self, values: Any) -> None:
        """Fixed-size float64 fields in a row."""
        self.align(8)
        if self.marks is not None:
            self.marks.append(len(self.buf))
        self.buf += np.asarray(values, dtype="<f8").tobytes()

    def f64_seq(self, values: Any) -> None:
        arr = np.asarray(values, dtype="<f8").ravel()
        self.u32(arr.size)
        if arr.size:
            self.align(8)
        if self.marks is not None:
            self.marks.append(len(self.buf) if arr.size else -1)
        if arr.size:
            self.buf += arr.tobytes()

    def u8(self, value: int) -> None:
        if self.marks is not None:
            self.marks.append(len(self.buf))
        self.buf.append(int(value) & 0xFF)


def _pose_values(position_m: Any, orientation_wxyz: Any) -> list[float]:
    w, x, y, z = (float(v) for v in orientation_wxyz[:4])
    return [float(v) for v in position_m[:3]] + [x, y, z, w]


def _fill(template: bytes, stamp_ns: np.ndarray, floats: Sequence[tuple[int, np.ndarray]],
          octets: Sequence[tuple[int, np.ndarray]]) -> list[bytes]:
    """Messages of one layout from a template: the stamp at body offset 0 and, per row,
    float64 blocks and single bytes at given offsets (of the whole message)."""
    n = stamp_ns.size
    out = np.tile(np.frombuffer(template, dtype=np.uint8), (n, 1))
    sec, nanosec = np.divmod(stamp_ns.astype(np.int64), 1_000_000_000)
    stamps = np.empty((n, 2), dtype="<i4")
    stamps[:, 0], stamps[:, 1] = sec, nanosec  # nanosec < 2**31: the uint32 bytes are the same
    out[:, _HEADER:_HEADER + 8] = stamps.view(np.uint8)
    for offset, values in floats:
        block = np.ascontiguousarray(values, dtype="<f8").reshape(n, -1)
        out[:, offset:offset + 8 * block.shape[1]] = block.view(np.uint8)
    for offset, values in octets:
        out[:, offset] = np.asarray(values).astype(np.uint8)
    return [row.tobytes() for row in out]


def joint_divergence_cdr_many(records: Sequence[Any], frame_id: str = "") -> list[bytes]:
    """:func:`joint_divergence_cdr` of many records at once (same bytes): records of one
    layout (joint names and array lengths) are filled into one template with numpy."""
    out: list[bytes | None] = [None] * len(records)
    groups: dict[tuple, list[int]] = {}
    for i, rec in enumerate(records):
        key = (tuple(rec.names), np.size(rec.position_residual_rad), np.size(rec.velocity_residual_rad_s),
               np.size(rec.effort_residual))
        groups.setdefault(key, []).append(i)
    for (names, nq, nqd, neff), rows in groups.items():
        stamps = np.array([int(records[i].stamp_ns) for i in rows], dtype=np.int64)
        sec = stamps // 1_000_000_000
        if len(rows) < 8 or sec.min() < -(2**31) or sec.max() >= 2**31:
            for i in rows:
                out[i] = joint_divergence_cdr(records[i], frame_id)
            continue
        marks: list[int] = []
        template = joint_divergence_cdr(records[rows[0]], frame_id, marks)
        picked = [records[i] for i in rows]
        floats = []
        for offset, values in zip(marks[:3], (
                [r.position_residual_rad for r in picked], [r.velocity_residual_rad_s for r in picked],
                [r.effort_residual for r in picked]), strict=True):
            if offset >= 0:
                floats.append((offset, np.asarray(values, dtype=float).reshape(len(rows), -1)))
        floats.append((marks[3], np.array([[r.clock_offset_s, r.clock_offset_std_s, r.latency_s, r.latency_std_s]
                                           for r in picked], dtype=float)))
        flags = np.array([bool(r.latency_compensated) for r in picked])
        for i, data in zip(rows, _fill(template, stamps, floats, [(marks[4], flags)]), strict=True):
            out[i] = data
    return out  # type: ignore[return-value]


def joint_divergence_cdr(record: Any, frame_id: str = "", marks: list[int] | None = None) -> bytes:
    """sim_real_bridge/msg/JointDivergence of a JointDivergenceRecord, as CDR bytes."""
    out = _Writer(marks)
    out.header(record.stamp_ns, frame_id)
    out.u32(len(record.names))
    for name in record.names:
        out.string(str(name))
    out.f64_seq(record.position_residual_rad)
    out.f64_seq(record.velocity_residual_rad_s)
    out.f64_seq(record.effort_residual)
    out.f64s([record.clock_offset_s, record.clock_offset_std_s, record.latency_s, record.latency_std_s])
    out.u8(bool(record.latency_compensated))
    return bytes(out.buf)


def contact_residual_cdr(record: Any, frame_id: str = "") -> bytes:
    """sim_real_bridge/msg/ContactResidual of a ContactRecord, as CDR bytes."""
    out = _Writer()
    out.header(record.stamp_ns, frame_id)
    values = np.concatenate([
        np.asarray(v, dtype=float)[:3] for v in (record.sim_force_n, record.sim_torque_nm, record.real_force_n,
                                                record.real_torque_nm, record.residual_force_n,
                                                record.residual_torque_nm)
    ] + [np.array([record.force_residual_norm_n, record.torque_residual_norm_nm], dtype=float)])
    out.f64s(values)
    out.u8(record.sim_contact_phase)
    out.u8(record.real_contact_phase)
    return bytes(out.buf)


def pose_divergence_cdr(record: Any, frame_id: str = "world") -> bytes:
    """sim_real_bridge/msg/PoseDivergence of a PoseDivergenceRecord, as CDR bytes."""
    out = _Writer()
    out.header(record.stamp_ns, frame_id)
    out.f64s(_pose_values(record.sim_ee_position_m, record.sim_ee_orientation_wxyz)
             + _pose_values(record.real_ee_position_m, record.real_ee_orientation_wxyz)
             + [float(v) for v in record.ee_position_error_m[:3]]
             + [float(record.ee_position_error_norm_m), float(record.ee_orientation_error_rad)])
    out.u8(bool(record.has_object))
    if record.has_object:
        objects = (_pose_values(record.sim_object_position_m, record.sim_object_orientation_wxyz)
                   + _pose_values(record.real_object_position_m, record.real_object_orientation_wxyz)
                   + [float(record.object_position_error_norm_m), float(record.object_orientation_error_rad)])
    else:
        objects = list(_ZERO_POSE) * 2 + [math.nan, math.nan]
    out.f64s(objects)
    return bytes(out.buf)


# visualization_msgs/Marker constants (as divergence_msgs.divergence_markers uses them).
_ARROW, _SPHERE, _TEXT_VIEW_FACING, _ADD = 0, 2, 9, 0
_F32x4 = struct.Struct("<4f")


def _marker(out: _Writer, stamp_ns: int, frame_id: str, ns: str, marker_id: int, kind: int,
            position: Any, scale: tuple[float, float, float], rgba: tuple[float, float, float, float],
            points: tuple[Any, ...] = (), text: str = "") -> None:
    """One visualization_msgs/Marker as divergence_markers fills it (every other field at its default)."""
    out.header(stamp_ns, frame_id)
    out.string(ns)
    out.align(4)
    out.buf += struct.pack("<3i", marker_id, kind, _ADD)
    out.f64s([float(v) for v in position[:3]] + [0.0, 0.0, 0.0, 1.0])  # pose: position, orientation xyzw
    out.f64s(list(scale))
    out.align(4)
    out.buf += _F32x4.pack(*rgba)
    out.buf += _STAMP.pack(0, 0)  # lifetime
    out.u8(0)  # frame_locked
    out.u32(len(points))
    if points:
        out.f64s([float(v) for p in points for v in p[:3]])
    out.u32(0)  # colors
    out.string("")  # texture_resource
    out.header(0, "")  # texture: CompressedImage header, format, data
    out.string("")
    out.u32(0)
    out.u32(0)  # uv_coordinates
    out.string(text)
    out.string("")  # mesh_resource
    out.string("")  # mesh_file: filename, data
    out.u32(0)
    out.u8(0)  # mesh_use_embedded_materials


def divergence_markers_cdr(record: Any, open_categories: Sequence[str], stamp_ns: int,
                           frame_id: str = "world") -> bytes:
    """visualization_msgs/MarkerArray of :func:`~sim_real_bridge.conversions.divergence_msgs.divergence_markers`
    (sim and real end effector, the error arrow, the label), as CDR bytes."""
    from sim_real_bridge.conversions.divergence_msgs import CATEGORY_RGBA

    colour = CATEGORY_RGBA[open_categories[0] if open_categories else "none"]
    sim_p = np.asarray(record.sim_ee_position_m, dtype=float)
    real_p = np.asarray(record.real_ee_position_m, dtype=float)
    out = _Writer()
    out.u32(4)
    _marker(out, stamp_ns, frame_id, "sim_ee", 0, _SPHERE, sim_p, (0.04, 0.04, 0.04), (0.2, 0.4, 1.0, 0.8))
    _marker(out, stamp_ns, frame_id, "real_ee", 1, _SPHERE, real_p, (0.04, 0.04, 0.04), (1.0, 0.3, 0.2, 0.8))
    _marker(out, stamp_ns, frame_id, "ee_error", 2, _ARROW, (0.0, 0.0, 0.0), (0.005, 0.012, 0.012), colour,
            points=(sim_p, real_p))
    label = ", ".join(open_categories) if open_categories else "in agreement"
    _marker(out, stamp_ns, frame_id, "label", 3, _TEXT_VIEW_FACING, real_p + np.array([0.0, 0.0, 0.12]),
            (0.0, 0.0, 0.05), colour,
            text=f"{label}  |  ee error {1000 * float(record.ee_position_error_norm_m):.1f} mm")
    return bytes(out.buf)
