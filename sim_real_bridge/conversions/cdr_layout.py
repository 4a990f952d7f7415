"""CDR messages of known layout as numpy structured dtypes.

CDR (XCDR1, little endian): a 4-byte encapsulation header, then each primitive aligned
to its size relative to the payload start; strings as uint32 byte count (NUL included),
the bytes and NUL; sequences as uint32 count, then the elements (primitives aligned only
when there are some). A message whose strings and sequence lengths are known ahead (a
frame id, joint names) has every field at a fixed offset: one structured dtype describes
it, and an array of that dtype holds many messages, one per row, field by field.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

HEADER_BYTES = 4  # encapsulation header before the payload
LITTLE_ENDIAN_CDR = (0, 1, 0, 0)  # the header of little-endian CDR, no options
NS_PER_S = 1_000_000_000


class CdrLayout:
    """A CDR message (or part of one) whose every field has a size known in advance.

    Fields are added in message order and aligned as CDR does; :attr:`dtype` is the
    structured dtype of one message. Fields given a ``value`` hold it in every message
    of :meth:`rows`; the others start at zero for the writer to fill. Complete a layout
    before the first use of :attr:`dtype`.

    Args:
        start: None for a whole message (it begins with the encapsulation header); else
            the payload offset where this part begins (its alignment depends on it).

    Example: geometry_msgs/Vector3Stamped messages of the rows of ``stamps_ns`` and ``xyz``::

        layout = CdrLayout()
        layout.header("header", "world")
        layout.add("vector", "<f8", 3)
        rows = layout.rows(len(stamps_ns))
        set_time(rows, "header.stamp", stamps_ns)
        rows["vector"] = xyz
        messages = layout.messages(rows)
    """

    def __init__(self, start: int | None = None) -> None:
        self._origin = -HEADER_BYTES if start is None else start  # payload offset of the layout's first byte
        self._names: list[str] = []
        self._formats: list[np.dtype] = []
        self._offsets: list[int] = []
        self._values: dict[str, Any] = {}
        self.size = 0
        if start is None:
            self.add("encapsulation", "u1", 4, value=LITTLE_ENDIAN_CDR)

    def add(self, name: str, dtype: Any, shape: int | tuple[int, ...] = (), value: Any = None) -> None:
        """Primitive field ``name`` (an array when ``shape`` is given), aligned to its element size."""
        element = np.dtype(dtype)
        align = 1 if element.kind == "S" else element.itemsize
        self.size += -(self._origin + self.size) % align
        field = np.dtype((element, shape)) if shape else element
        self._names.append(name)
        self._formats.append(field)
        self._offsets.append(self.size)
        self.size += field.itemsize
        if value is not None:
            self._values[name] = value

    def count(self, name: str, count: int) -> None:
        """The uint32 element count of sequence ``name`` (field ``name.count``)."""
        self.add(f"{name}.count", "<u4", value=count)

    def sequence(self, name: str, dtype: Any, shape: tuple[int, ...], value: Any = None) -> None:
        """A sequence of ``shape[0]`` elements of ``shape[1:]`` primitives each (a point: (n, 3))."""
        self.count(name, shape[0])
        if shape[0]:
            self.add(name, dtype, shape, value)

    def string(self, name: str, text: str | None = None, size: int | None = None) -> None:
        """A string: constant ``text``, or ``size`` bytes (NUL included) the writer fills."""
        data = None if text is None else text.encode("utf-8") + b"\x00"
        size = len(data) if data is not None else size
        if not size:
            raise ValueError(f"string {name}: a size of at least 1 (the NUL) is needed")
        self.add(f"{name}.size", "<u4", value=size)
        self.add(name, f"S{size}", value=data)

    def strings(self, name: str, texts: Sequence[str]) -> None:
        """A string[] of constant texts (fields ``name[i]``)."""
        self.count(name, len(texts))
        for i, text in enumerate(texts):
            self.string(f"{name}[{i}]", text)

    def time(self, name: str) -> None:
        """A builtin_interfaces/Time or Duration (fields ``name.sec``, ``name.nanosec``)."""
        self.add(f"{name}.sec", "<i4")
        self.add(f"{name}.nanosec", "<u4")

    def header(self, name: str, frame_id: str) -> None:
        """A std_msgs/Header: ``name.stamp`` for the writer, a constant frame id."""
        self.time(f"{name}.stamp")
        self.string(f"{name}.frame_id", frame_id)

    @functools.cached_property
    def dtype(self) -> np.dtype:
        return np.dtype({"names": self._names, "formats": self._formats, "offsets": self._offsets,
                         "itemsize": self.size})

    @functools.cached_property
    def _template(self) -> np.ndarray:
        """One message's bytes with the constant fields set, every other byte zero."""
        message = np.zeros(1, self.dtype)
        for name, value in self._values.items():
            message[name] = value
        return message.view(np.uint8)

    def rows(self, n: int) -> np.ndarray:
        """``n`` messages of this layout to fill: copies of the template's bytes (padding included)."""
        return np.tile(self._template, n).view(self.dtype)

    def messages(self, rows: np.ndarray) -> list[bytes]:
        """Each row's bytes: one message per row."""
        data, size = rows.tobytes(), self.size
        return [data[start:start + size] for start in range(0, len(data), size)]


def set_time(rows: np.ndarray, name: str, stamps_ns: Any) -> None:
    """Time field ``name`` of every row from integer nanoseconds."""
    sec, nanosec = np.divmod(np.asarray(stamps_ns, dtype=np.int64), NS_PER_S)
    if sec.size and (sec.min() < -(2**31) or sec.max() >= 2**31):
        raise ValueError(f"{name}: a stamp beyond the int32 seconds of builtin_interfaces/Time")
    rows[f"{name}.sec"] = sec
    rows[f"{name}.nanosec"] = nanosec
