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

    def __init__(self) -> None:
        self.buf = bytearray(b"\x00\x01\x00\x00")

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
        self.buf += np.asarray(values, dtype="<f8").tobytes()

    def f64_seq(self, values: Any) -> None:
        arr = np.asarray(values, dtype="<f8").ravel()
        self.u32(arr.size)
        if arr.size:
            self.align(8)
            self.buf += arr.tobytes()

    def u8(self, value: int) -> None:
        self.buf.append(int(value) & 0xFF)


def _pose_values(position_m: Any, orientation_wxyz: Any) -> list[float]:
    w, x, y, z = (float(v) for v in orientation_wxyz[:4])
    return [float(v) for v in position_m[:3]] + [x, y, z, w]


def joint_divergence_cdr(record: Any, frame_id: str = "") -> bytes:
    """sim_real_bridge/msg/JointDivergence of a JointDivergenceRecord, as CDR bytes."""
    out = _Writer()
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
