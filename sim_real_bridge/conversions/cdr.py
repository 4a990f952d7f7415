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

import struct
from types import SimpleNamespace

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
    """sensor_msgs/JointState from raw CDR: ``header``, ``name``, ``position``, ``velocity``, ``effort``."""
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


def _joint_state(data: bytes) -> SimpleNamespace:
    _check_encapsulation(data)
    header, pos = _read_header(data)
    pos = (pos + 3) & ~3
    (count,) = _U32.unpack_from(data, _HEADER + pos)
    pos += 4
    if count > (len(data) - _HEADER - pos) // 5:
        raise ValueError("bad CDR name count")
    names = []
    for _ in range(count):
        name, pos = _read_string(data, pos)
        names.append(name)
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
