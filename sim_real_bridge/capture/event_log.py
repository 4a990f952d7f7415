"""Append-only JSON-lines event log that survives a crash up to the last acknowledged event."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, NamedTuple

from sim_real_bridge.capture.bag_writer import fsync_path
from sim_real_bridge.errors import SnapshotError


class EventLogContents(NamedTuple):
    """What :func:`read_event_log` found.

    Attributes:
        events: every complete line, parsed, in file order.
        torn_tail: the bytes of an unfinished last line (a crash mid-append), or b"".
    """

    events: list[dict[str, Any]]
    torn_tail: bytes


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot store {type(value).__name__} in the event log")


def _clean(value: Any) -> Any:
    """Replace non-finite floats by None: strict JSON has no NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class EventLog:
    """One JSON object per line; :meth:`append` returns only after flush + fsync.

    On open, an unfinished last line left by a crash (never acknowledged) is cut off so
    the next event starts on a line of its own; its length is kept in
    :attr:`dropped_torn_bytes`.

    Raises:
        SnapshotError: the log cannot be opened or written (disk full, not writable).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.dropped_torn_bytes = 0
        self.count = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            created = not self.path.exists()
            self._file: IO[bytes] = open(self.path, "ab")  # noqa: SIM115 - closed in close()
            self._drop_torn_tail()
            if created:
                fsync_path(self.path.parent)
        except OSError as exc:
            raise SnapshotError(f"cannot open event log {self.path}: {exc.strerror or exc}") from exc

    def _drop_torn_tail(self) -> None:
        size = self._file.seek(0, os.SEEK_END)
        if size == 0:
            return
        with open(self.path, "rb") as reader:
            data = reader.read()
        keep = data.rfind(b"\n") + 1
        if keep < size:
            self._file.truncate(keep)
            self._file.seek(keep)
            os.fsync(self._file.fileno())
            self.dropped_torn_bytes = size - keep

    def append(self, event: Mapping[str, Any]) -> None:
        """Write one event durably (flush + fsync) before returning."""
        if self._file.closed:
            raise SnapshotError(f"event log {self.path} is closed")
        line = json.dumps(_clean(event), default=_json_default, allow_nan=False, separators=(",", ":"))
        try:
            self._file.write(line.encode("utf-8") + b"\n")
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:
            raise SnapshotError(f"cannot append to event log {self.path}: {exc.strerror or exc}") from exc
        self.count += 1

    def close(self) -> None:
        """Close the file (idempotent)."""
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def read_event_log(path: Path | str) -> EventLogContents:
    """Read every complete event; an unfinished last line is reported, not raised.

    Raises:
        SnapshotError: the file is missing, or a complete line is not a JSON object.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"cannot read event log {path}: {exc.strerror or exc}") from exc
    keep = data.rfind(b"\n") + 1
    events: list[dict[str, Any]] = []
    for number, line in enumerate(data[:keep].splitlines(), start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as exc:
            raise SnapshotError(f"event log {path} line {number} is not valid JSON: {exc}") from exc
        if not isinstance(event, dict):
            raise SnapshotError(f"event log {path} line {number} is not a JSON object")
        events.append(event)
    return EventLogContents(events, data[keep:])
