"""Parsers of two small message types straight from their CDR bytes into rosbags' messages.

rosbags' generated deserializer makes one call and one object per nested message; replay
reads the truth labels (InjectionArray) and the monitor's tick times (Time) of a whole
recording, so these two are parsed directly. Each parser returns None for bytes it does
not handle (the caller deserializes those with rosbags).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from rosbags.interfaces import Nodetype
from rosbags.typesys.store import Typestore

_CDR_LE = b"\x00\x01"
INJECTION_ARRAY = "sim_real_bridge/msg/InjectionArray"
TIME = "builtin_interfaces/msg/Time"
_STRING = (Nodetype.BASE, ("string", 0))
_FLOAT64 = (Nodetype.BASE, ("float64", 0))
#: The field definitions :func:`injection_array_parser` decodes (as a typestore holds them).
_INJECTION_FIELDS = {
    INJECTION_ARRAY: [("header", (Nodetype.NAME, "std_msgs/msg/Header")), ("scenario", _STRING),
                      ("elapsed_s", _FLOAT64),
                      ("injections", (Nodetype.SEQUENCE, ((Nodetype.NAME, "sim_real_bridge/msg/Injection"), 0)))],
    "sim_real_bridge/msg/Injection": [
        ("category", _STRING), ("kind", _STRING), ("start_s", _FLOAT64), ("end_s", _FLOAT64),
        ("effect_start_s", _FLOAT64), ("active", (Nodetype.BASE, ("bool", 0))),
        ("params", (Nodetype.SEQUENCE, ((Nodetype.NAME, "diagnostic_msgs/msg/KeyValue"), 0)))],
    "diagnostic_msgs/msg/KeyValue": [("key", _STRING), ("value", _STRING)],
    "std_msgs/msg/Header": [("stamp", (Nodetype.NAME, TIME)), ("frame_id", _STRING)],
    TIME: [("sec", (Nodetype.BASE, ("int32", 0))), ("nanosec", (Nodetype.BASE, ("uint32", 0)))],
}
_U32 = struct.Struct("<I")
_TIME = struct.Struct("<iI")
_F64 = struct.Struct("<d")
_INJECTION_VALUES = struct.Struct("<3d?")


def _cdr_string(body: bytes, pos: int) -> tuple[str, int]:
    """(string, position after it) at ``pos`` (aligned) of a CDR payload.

    Raises:
        ValueError: where rosbags' deserializer refuses the string.
    """
    (size,) = _U32.unpack_from(body, pos)
    end = pos + 4 + size
    if size < 1 or end > len(body) or body[end - 1] != 0:
        raise ValueError("bad string")
    return body[pos + 4 : end - 1].decode(), end


def _fields_are(typestore: Typestore, expected: Mapping[str, list[tuple[str, Any]]]) -> bool:
    """Whether ``typestore`` defines each type of ``expected`` with exactly those fields."""
    try:
        return all(list(typestore.fielddefs[name][1]) == fields for name, fields in expected.items())
    except (KeyError, TypeError, IndexError):
        return False


def _sequence_length(body: bytes, pos: int, max_count: int) -> tuple[int, int]:
    """(the length of the CDR sequence at ``pos``, where its items start).

    Raises:
        ValueError: a length rosbags refuses (over ``max_count``, or more items than bytes left).
    """
    (count,) = _U32.unpack_from(body, pos)
    pos += 4
    if pos + count > len(body) or count > max_count:
        raise ValueError("bad sequence")
    return count, pos


def injection_array_parser(typestore: Typestore) -> Callable[[bytes], Any] | None:
    """A parser of sim_real_bridge/msg/InjectionArray CDR bytes into the message rosbags'
    deserializer makes of them (its classes, equal values), or None for a typestore that
    defines these types otherwise.

    rosbags' generated deserializer costs ~0.2 M instructions per message (one call and
    one object per nested message). The parser returns None for any message rosbags would
    refuse or that is not little-endian (deserialize that one with rosbags). The
    injections that follow ``elapsed_s`` repeat from message to message: each distinct
    run of those bytes is decoded once and its Injection objects are shared by the
    messages holding it (read them, do not change them).
    """
    if not _fields_are(typestore, _INJECTION_FIELDS):
        return None
    types = typestore.types
    array_cls, injection_cls = types[INJECTION_ARRAY], types["sim_real_bridge/msg/Injection"]
    key_value_cls, header_cls, time_cls = (
        types["diagnostic_msgs/msg/KeyValue"], types["std_msgs/msg/Header"], types[TIME])
    max_count = typestore.max_sequence_length
    decoded: dict[bytes, list[Any]] = {}

    def injections_of(tail: bytes) -> list[Any]:
        # ``tail`` starts 8-byte aligned (after elapsed_s), so alignment within it is as in the message.
        count, pos = _sequence_length(tail, 0, max_count)
        out = []
        for _ in range(count):
            category, pos = _cdr_string(tail, (pos + 3) & -4)
            kind, pos = _cdr_string(tail, (pos + 3) & -4)
            pos = (pos + 7) & -8
            start_s, end_s, effect_start_s, active = _INJECTION_VALUES.unpack_from(tail, pos)
            n_params, pos = _sequence_length(tail, (pos + 25 + 3) & -4, max_count)
            params = []
            for _ in range(n_params):
                key, pos = _cdr_string(tail, (pos + 3) & -4)
                value, pos = _cdr_string(tail, (pos + 3) & -4)
                params.append(key_value_cls(key, value))
            out.append(injection_cls(category, kind, start_s, end_s, effect_start_s, active, params))
        if pos + 3 < len(tail):  # rosbags: more than padding after the message
            raise ValueError("trailing bytes")
        return out

    def parse(data: bytes) -> Any:
        if len(data) < 4 or data[:2] != _CDR_LE:
            return None
        body = bytes(data[4:])
        try:
            sec, nanosec = _TIME.unpack_from(body, 0)
            frame_id, pos = _cdr_string(body, 8)
            scenario, pos = _cdr_string(body, (pos + 3) & -4)
            pos = (pos + 7) & -8
            (elapsed_s,) = _F64.unpack_from(body, pos)
            tail = body[pos + 8 :]
            injections = decoded.get(tail)
            if injections is None:
                injections = decoded[tail] = injections_of(tail)
        except (struct.error, UnicodeDecodeError, ValueError):
            return None
        return array_cls(header_cls(time_cls(sec, nanosec), frame_id), scenario, elapsed_s, list(injections))

    return parse


def time_parser(typestore: Typestore) -> Callable[[bytes], Any] | None:
    """A parser of builtin_interfaces/msg/Time CDR bytes into rosbags' message (None for a
    typestore that defines Time otherwise); it returns None for a message rosbags would
    refuse or that is not little-endian."""
    if not _fields_are(typestore, {TIME: _INJECTION_FIELDS[TIME]}):
        return None
    time_cls = typestore.types[TIME]

    def parse(data: bytes) -> Any:
        if not 12 <= len(data) <= 15 or data[:2] != _CDR_LE:
            return None
        return time_cls(*_TIME.unpack_from(data, 4))

    return parse


