"""CDR layouts of ROS 2 messages as numpy structured dtypes, and decoding by layout.

A ROS 2 message in CDR holds its fields in definition order, each aligned to its own
size relative to the payload (which starts after the 4-byte encapsulation header);
strings and sequences are preceded by a uint32 length. So where each field sits
depends on the lengths before it. :func:`walk` reads one message's lengths and returns
its :class:`Layout`: a structured dtype locating every numeric field, and a second one
covering every other byte (lengths, string bytes, header) -- the *key*. Another message
of the same size whose key bytes are equal has the same layout, field for field; so the
messages of a topic are grouped by layout (:func:`decode_groups`) and each group is read
with one view of its rows. Bytes after the last field are accepted and ignored, as
rclpy does.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from rosbags.interfaces import Nodetype
from rosbags.typesys.store import Typestore

from sim_real_bridge.offline.bags.raw import RawMessages

#: numpy type codes of the ROS 2 primitive types.
PRIMITIVES = {
    "bool": "?", "byte": "u1", "char": "u1", "int8": "i1", "uint8": "u1", "int16": "i2", "uint16": "u2",
    "int32": "i4", "uint32": "u4", "int64": "i8", "uint64": "u8", "float32": "f4", "float64": "f8",
}
#: Bytes before the CDR payload: representation identifier and options.
ENCAPSULATION_BYTES = 4
#: Byte order of each representation identifier ROS 2 writes (CDR_BE, CDR_LE).
BYTE_ORDERS = {b"\x00\x00": ">", b"\x00\x01": "<"}
#: Layouts tried per message size before the rest of that size is decoded one by one.
MAX_LAYOUTS_PER_SIZE = 8


class LayoutError(ValueError):
    """A message's bytes do not hold its type: too short, a bad length, an unknown encapsulation."""


class DecodeError(ValueError):
    """Message ``index`` of a batch cannot be decoded; ``reason`` says why."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(reason)
        self.index = index
        self.reason = reason


@dataclass(frozen=True)
class Layout:
    """Where the fields of one serialized message are.

    Attributes:
        values: every numeric field by its path (``header.stamp.sec``, ``position``,
            ``points[0].positions``) at its byte offset; sequences and arrays have shape
            (count,) (empty sequences are absent); itemsize is the message's size.
        key: void fields over every other byte up to ``end``: messages of this size with
            equal key bytes share this layout.
        counts: the length of every sequence and array, by path.
        strings: every string, by path (``header.frame_id``, ``name[0]``).
        end: bytes the fields take; what follows is trailing bytes.
    """

    values: np.dtype
    key: np.dtype
    counts: dict[str, int]
    strings: dict[str, str]
    end: int

    def string_list(self, path: str) -> list[str]:
        """The strings of the sequence or array of strings at ``path``."""
        return [self.strings[f"{path}[{i}]"] for i in range(self.counts[path])]


class _Walker:
    """Reads one message's lengths and notes where its numeric fields are."""

    def __init__(self, data: bytes, typestore: Typestore) -> None:
        order = BYTE_ORDERS.get(data[:2])
        if order is None or len(data) < ENCAPSULATION_BYTES:
            raise LayoutError(f"not ROS 2 CDR: encapsulation header {data[:4].hex() or 'missing'}")
        self.data = data
        self.order = order
        self.fielddefs = typestore.fielddefs
        self.pos = ENCAPSULATION_BYTES
        self.fields: list[tuple[str, int, str, int | None]] = []  # path, offset, type code, count (None: scalar)
        self.counts: dict[str, int] = {}
        self.strings: dict[str, str] = {}
        self.uint32 = struct.Struct(f"{order}I")

    def align(self, size: int) -> None:
        self.pos += -(self.pos - ENCAPSULATION_BYTES) % size

    def take(self, size: int) -> int:
        """Step over ``size`` bytes; return where they start."""
        start = self.pos
        if start + size > len(self.data):
            raise LayoutError(f"message of {len(self.data)} bytes ends before byte {start + size}")
        self.pos = start + size
        return start

    def length(self) -> int:
        self.align(4)
        (count,) = self.uint32.unpack_from(self.data, self.take(4))
        return int(count)

    def message(self, msgtype: str, path: str) -> None:
        try:
            _, fields = self.fielddefs[msgtype]
        except KeyError:
            raise LayoutError(f"no definition of {msgtype}") from None
        for name, node in fields:
            self.node(node, f"{path}.{name}" if path else name)

    def node(self, node: tuple[Any, Any], path: str) -> None:
        kind, detail = node
        if kind == Nodetype.NAME:
            self.message(detail, path)
        elif kind == Nodetype.BASE:
            self.primitive(detail[0], path, None)
        else:  # ARRAY (fixed length) or SEQUENCE (length in the message)
            item, count = detail
            if kind == Nodetype.SEQUENCE:
                count = self.length()
                if count > len(self.data):
                    raise LayoutError(f"sequence {path} of {count} items is longer than the message")
            self.counts[path] = count
            if item[0] == Nodetype.BASE:
                self.primitive(item[1][0], path, count)
            else:
                for i in range(count):
                    self.node(item, f"{path}[{i}]")

    def primitive(self, typename: str, path: str, count: int | None) -> None:
        """A field of a primitive type: one (``count`` None) or ``count`` items."""
        if typename == "string":
            if count is None:
                self.strings[path] = self.string()
            for i in range(count or 0):
                self.strings[f"{path}[{i}]"] = self.string()
            return
        code = PRIMITIVES.get(typename)
        if code is None:
            raise LayoutError(f"fields of type {typename} ({path}) are not supported")
        if count == 0:
            return  # an empty sequence: nothing to align to
        size = np.dtype(code).itemsize
        self.align(size)
        self.fields.append((path, self.take(size * (count or 1)), code, count))

    def string(self) -> str:
        size = self.length()
        start = self.take(size)
        text = self.data[start : start + size]
        return (text[:-1] if text.endswith(b"\x00") else text).decode("utf-8", "replace")

    def layout(self) -> Layout:
        size = len(self.data)
        names, formats, offsets = [], [], []
        covered = np.zeros(self.pos, dtype=bool)
        for path, offset, code, count in self.fields:
            item = np.dtype(code).newbyteorder(self.order) if np.dtype(code).itemsize > 1 else np.dtype(code)
            names.append(path)
            formats.append(item if count is None else (item, (count,)))
            offsets.append(offset)
            covered[offset : offset + item.itemsize * (count or 1)] = True
        values = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": size})
        edges = np.flatnonzero(np.diff(np.concatenate(([1], covered.view(np.int8), [1])))).reshape(-1, 2)
        key = np.dtype({
            "names": [f"key{i}" for i in range(len(edges))],
            "formats": [np.dtype((np.void, int(stop - start))) for start, stop in edges],
            "offsets": [int(start) for start, _ in edges],
            "itemsize": size,
        })
        return Layout(values, key, self.counts, self.strings, self.pos)


def walk(data: bytes, msgtype: str, typestore: Typestore) -> Layout:
    """The layout of one serialized message of type ``msgtype``.

    Raises:
        LayoutError: the bytes do not hold a ``msgtype`` in ROS 2 CDR.
    """
    walker = _Walker(bytes(data), typestore)
    walker.message(msgtype, "")
    return walker.layout()


@dataclass(frozen=True)
class LayoutGroup:
    """Messages of one layout, decoded.

    Attributes:
        index: positions of these messages in the batch, ascending.
        layout: their layout.
        values: (len(index),) records of ``layout.values``.
        one_by_one: decoded alone, after :data:`MAX_LAYOUTS_PER_SIZE` layouts of its size.
    """

    index: np.ndarray
    layout: Layout
    values: np.ndarray
    one_by_one: bool


def _by_size(sizes: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(size, ascending positions of the messages of that size)."""
    if not sizes.size:
        return
    if (sizes == sizes[0]).all():
        yield int(sizes[0]), np.arange(sizes.size)
        return
    order = np.argsort(sizes, kind="stable")
    for part in np.split(order, np.flatnonzero(np.diff(sizes[order])) + 1):
        yield int(sizes[part[0]]), part


def decode_groups(raw: RawMessages, msgtype: str, typestore: Typestore) -> list[LayoutGroup]:
    """Every message of ``raw`` decoded, grouped by layout.

    Per message size, the first message not yet decoded gives a layout; every message of
    that size with the same key bytes is decoded with it at once. After
    :data:`MAX_LAYOUTS_PER_SIZE` layouts of one size (e.g. a frame id that counts up),
    the rest of that size are decoded one by one.

    Raises:
        DecodeError: a message's bytes do not hold a ``msgtype``; names its position.
    """
    groups = []
    for size, index in _by_size(raw.size):
        rows = raw.rows(index, size)
        pending = np.arange(index.size)
        tried = 0
        while pending.size:
            first = int(pending[0])
            try:
                layout = walk(rows[first].tobytes(), msgtype, typestore)
            except LayoutError as error:
                raise DecodeError(int(index[first]), str(error)) from None
            candidates = rows if pending.size == rows.size else rows[pending]
            if tried < MAX_LAYOUTS_PER_SIZE:
                keys = candidates.view(layout.key)
                same = keys == keys[0]
            else:
                same = np.zeros(pending.size, dtype=bool)
                same[0] = True
            tried += 1
            members = candidates if same.all() else candidates[same]
            groups.append(LayoutGroup(index[pending[same]], layout, members.view(layout.values),
                                      tried > MAX_LAYOUTS_PER_SIZE))
            pending = pending[~same]
    return groups


def message_end(data: bytes, msgtype: str, typestore: Typestore) -> int:
    """Bytes the fields of a serialized ``msgtype`` take (the rest is trailing bytes).

    Raises:
        LayoutError: as :func:`walk`.
    """
    return walk(data, msgtype, typestore).end
