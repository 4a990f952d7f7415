"""Failure snapshots: keep recent raw messages, write the window around each event to MCAP.

Nothing here reads a clock: the caller feeds messages with their receive stamps
(:meth:`SnapshotWriter.add_message`) and says what time it is (:meth:`SnapshotWriter.poll`).
Messages are stored as the raw CDR bytes they arrived as (rclpy ``raw=True``); the
message definitions embedded in each snapshot come from the typestore.
"""

from __future__ import annotations

import heapq
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from rosbags.typesys.store import Typestore

from sim_real_bridge.capture.bag_writer import BagWriter, recover_partials
from sim_real_bridge.capture.paths import confined_path, safe_name
from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.errors import SnapshotError

NS_PER_S = 1_000_000_000
DEFAULT_PRE_S = 10.0
DEFAULT_POST_S = 2.0
DEFAULT_MAX_TOTAL_BYTES = 1 << 30
DEFAULT_MAX_BUFFER_BYTES = 256 << 20
SNAPSHOT_SUFFIX = ".mcap"
#: Messages written between voluntary GIL releases of a snapshot write.
YIELD_EVERY = 256


class BufferedMessage(NamedTuple):
    """One message as received: topic, type, receive stamp and raw CDR bytes."""

    topic: str
    msgtype: str
    recv_stamp_ns: int
    data: bytes


class SnapshotBuffer:
    """Per-topic ring buffer of raw messages covering the last ``horizon_ns``.

    Memory is bounded twice: by time (entries older than the newest stamp minus the
    horizon go) and by ``max_bytes`` (the oldest entries across topics go first).

    Args:
        horizon_ns: how far back to keep messages, relative to the newest stamp seen.
        max_bytes: cap on the payload bytes held.
    """

    def __init__(self, horizon_ns: int, max_bytes: int = DEFAULT_MAX_BUFFER_BYTES) -> None:
        if horizon_ns < 0 or max_bytes < 0:
            raise SnapshotError(f"snapshot buffer horizon ({horizon_ns} ns) and max_bytes ({max_bytes}) must be >= 0")
        self.horizon_ns = int(horizon_ns)
        self.max_bytes = int(max_bytes)
        self.nbytes = 0
        self.dropped_for_memory = 0
        self._latest_ns: int | None = None
        # Messages at or after this stamp survive the time horizon (a pending snapshot
        # needs them when poll() comes late); the memory cap still applies.
        self.hold_from_ns: int | None = None
        self._queues: dict[str, deque[tuple[int, bytes]]] = {}
        self._types: dict[str, str] = {}

    def add(self, topic: str, msgtype: str, recv_stamp_ns: int, data: bytes | memoryview) -> None:
        """Store one message (bytes are copied once if given as a view)."""
        payload = bytes(data)
        if self._types.get(topic, msgtype) != msgtype:
            self.nbytes -= sum(len(d) for _, d in self._queues[topic])
            self._queues[topic].clear()
        self._types[topic] = msgtype
        queue = self._queues.setdefault(topic, deque())
        stamp = int(recv_stamp_ns)
        queue.append((stamp, payload))
        self.nbytes += len(payload)
        if self._latest_ns is None or stamp > self._latest_ns:
            self._latest_ns = stamp
        self._prune()

    def _prune(self) -> None:
        assert self._latest_ns is not None
        oldest_kept = self._latest_ns - self.horizon_ns
        if self.hold_from_ns is not None:
            oldest_kept = min(oldest_kept, self.hold_from_ns)
        for queue in self._queues.values():
            while queue and queue[0][0] < oldest_kept:
                self.nbytes -= len(queue.popleft()[1])
        while self.nbytes > self.max_bytes:
            heads = [(q[0][0], t) for t, q in self._queues.items() if q]
            if not heads:
                break
            _, topic = min(heads)
            self.nbytes -= len(self._queues[topic].popleft()[1])
            self.dropped_for_memory += 1

    def topics(self) -> dict[str, str]:
        """Return topic -> message type of every topic seen."""
        return dict(self._types)

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def window(self, start_ns: int, end_ns: int) -> list[BufferedMessage]:
        """Return the messages with ``start_ns <= recv_stamp_ns <= end_ns``, by stamp."""
        return window_of(self.freeze(), start_ns, end_ns)

    def freeze(self) -> dict[str, tuple[str, list[tuple[int, bytes]]]]:
        """Return topic -> (type, entries) as they are now: a cheap copy of references
        that another thread can read while this buffer goes on changing."""
        return {topic: (self._types[topic], list(queue)) for topic, queue in self._queues.items()}


def window_of(frozen: dict[str, tuple[str, list[tuple[int, bytes]]]], start_ns: int,
              end_ns: int) -> list[BufferedMessage]:
    """The messages of a :meth:`SnapshotBuffer.freeze` copy with ``start_ns <= recv_stamp_ns <= end_ns``, by stamp."""
    per_topic = []
    for topic, (msgtype, entries) in frozen.items():
        selected = [BufferedMessage(topic, msgtype, s, d) for s, d in entries if start_ns <= s <= end_ns]
        selected.sort(key=lambda m: m.recv_stamp_ns)
        per_topic.append(selected)
    return list(heapq.merge(*per_topic, key=lambda m: m.recv_stamp_ns))


@dataclass
class SnapshotRequest:
    """A snapshot promised for an event; written once ``end_ns`` has passed."""

    event_id: str
    event_stamp_ns: int
    start_ns: int
    end_ns: int
    path: Path


@dataclass
class SnapshotJob:
    """A request taken for writing, with the buffer frozen at that moment."""

    request: SnapshotRequest
    frozen: dict[str, tuple[str, list[tuple[int, bytes]]]]


@dataclass
class SnapshotResult:
    """Outcome of one snapshot: ``path`` when written, ``error`` when not."""

    request: SnapshotRequest
    path: Path | None = None
    error: SnapshotError | None = None
    message_count: int = 0
    size_bytes: int = 0
    deleted: list[Path] = field(default_factory=list)


def list_snapshots(out_dir: Path | str) -> list[Path]:
    """Return the finished snapshots in ``out_dir``, oldest first."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return []
    files = [p for p in out_dir.iterdir() if p.suffix == SNAPSHOT_SUFFIX and not p.name.startswith(".") and p.is_file()]
    return sorted(files, key=lambda p: (_sequence_of(p), p.stat().st_mtime_ns, p.name))


def _sequence_of(path: Path) -> int:
    head = path.name.split("_", 1)[0]
    return int(head) if head.isdigit() else -1


def recover(out_dir: Path | str) -> list[tuple[Path, str]]:
    """Finish or remove snapshots a crash left half-written in ``out_dir``.

    Returns:
        (path, action) pairs, action ``"finished"`` or ``"removed"``.
    """
    return recover_partials(out_dir)


class SnapshotWriter:
    """Write the window [event - pre_s, event + post_s] of raw messages to one MCAP file.

    Snapshots are ``out_dir/<seq>_<label>_<event id>.mcap`` with every name part
    sanitized, so topic, scenario and event names cannot leave ``out_dir``. When the
    finished snapshots exceed ``max_total_bytes`` the oldest are deleted. Partial
    snapshots from an earlier crash are recovered on construction.

    Args:
        out_dir: directory that holds the snapshots (created if missing).
        typestore: message definitions; defaults to :func:`build_typestore`.
        pre_s: seconds of history before the event.
        post_s: seconds after the event; the snapshot is written once they have passed.
        max_total_bytes: disk cap over all snapshots in ``out_dir``.
        max_buffer_bytes: memory cap of the message buffer.
        label: prefix of every snapshot name (the scenario, for example).
    """

    def __init__(
        self,
        out_dir: Path | str,
        typestore: Typestore | None = None,
        *,
        pre_s: float = DEFAULT_PRE_S,
        post_s: float = DEFAULT_POST_S,
        max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
        max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
        label: str = "",
    ) -> None:
        if not (pre_s >= 0 and post_s >= 0):
            raise SnapshotError(f"snapshot pre_s ({pre_s}) and post_s ({post_s}) must be >= 0")
        if max_total_bytes < 0:
            raise SnapshotError(f"snapshot max_total_bytes ({max_total_bytes}) must be >= 0")
        self.out_dir = Path(out_dir)
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SnapshotError(f"cannot create snapshot directory {self.out_dir}: {exc.strerror or exc}") from exc
        self.typestore = typestore if typestore is not None else build_typestore()
        self.pre_ns = round(pre_s * NS_PER_S)
        self.post_ns = round(post_s * NS_PER_S)
        self.max_total_bytes = int(max_total_bytes)
        self.label = safe_name(label, fallback="") if label else ""
        self.buffer = SnapshotBuffer(self.pre_ns + self.post_ns, max_buffer_bytes)
        self.recovered = recover(self.out_dir)
        existing = [_sequence_of(p) for p in list_snapshots(self.out_dir)]
        self._next_seq = max(existing, default=0) + 1
        self._pending: dict[str, SnapshotRequest] = {}
        self._requests: dict[str, SnapshotRequest] = {}

    @property
    def pending(self) -> list[SnapshotRequest]:
        """Requests still waiting for their post window."""
        return list(self._pending.values())

    def add_message(self, topic: str, msgtype: str, recv_stamp_ns: int, data: bytes | memoryview) -> None:
        """Feed one received message (raw CDR bytes)."""
        self.buffer.add(topic, msgtype, recv_stamp_ns, data)

    def request(self, event_id: str, event_stamp_ns: int) -> SnapshotRequest:
        """Ask for the snapshot of an event; a repeated event id returns the first request.

        The returned path is where the snapshot will be once written, so it can be
        published with the event right away.
        """
        key = str(event_id)
        if key in self._requests:
            return self._requests[key]
        stamp = int(event_stamp_ns)
        parts = [f"{self._next_seq:06d}"] + ([self.label] if self.label else []) + [safe_name(key)]
        path = confined_path(self.out_dir, "_".join(parts) + SNAPSHOT_SUFFIX)
        self._next_seq += 1
        request = SnapshotRequest(key, stamp, stamp - self.pre_ns, stamp + self.post_ns, path)
        self._requests[key] = request
        self._pending[key] = request
        self._update_hold()
        return request

    def _update_hold(self) -> None:
        self.buffer.hold_from_ns = min((r.start_ns for r in self._pending.values()), default=None)

    def poll(self, now_ns: int) -> list[SnapshotResult]:
        """Write every requested snapshot whose window ended at or before ``now_ns``.

        Failures do not raise: each result carries its :class:`SnapshotError`.
        """
        return [self.write(job) for job in self.take_due(now_ns)]

    def flush(self) -> list[SnapshotResult]:
        """Write every pending snapshot now with what the buffer holds (at shutdown)."""
        return [self.write(job) for job in self.take_all()]

    def take_due(self, now_ns: int) -> list[SnapshotJob]:
        """Take the requests whose window ended at or before ``now_ns``, each with a frozen
        copy of the buffer: cheap, and :meth:`write` may then run on another thread."""
        due = [r for r in self._pending.values() if r.end_ns <= now_ns]
        return [self._take(r) for r in sorted(due, key=lambda r: r.end_ns)]

    def take_all(self) -> list[SnapshotJob]:
        """Take every pending request (at shutdown), like :meth:`take_due`."""
        return [self._take(r) for r in sorted(self._pending.values(), key=lambda r: r.end_ns)]

    def _take(self, request: SnapshotRequest) -> SnapshotJob:
        del self._pending[request.event_id]
        self._update_hold()
        return SnapshotJob(request, self.buffer.freeze())

    def write(self, job: SnapshotJob) -> SnapshotResult:
        """Write one taken snapshot; only this touches the disk (one writer thread at a time)."""
        result = SnapshotResult(job.request)
        try:
            self._write(job, result)
        except SnapshotError as exc:
            result.error = exc
        return result

    def _write(self, job: SnapshotJob, result: SnapshotResult) -> None:
        request = job.request
        messages = window_of(job.frozen, request.start_ns, request.end_ns)
        payload = sum(len(m.data) for m in messages)
        if payload > self.max_total_bytes:
            raise SnapshotError(
                f"snapshot {request.path} needs at least {payload} bytes, over the disk cap of "
                f"{self.max_total_bytes} bytes"
            )
        with BagWriter(request.path, self.typestore) as bag:
            for topic, (msgtype, _) in sorted(job.frozen.items()):
                bag.add_topic(topic, msgtype)
            for i, message in enumerate(messages):
                bag.write(message.topic, message.recv_stamp_ns, message.data)
                if i % YIELD_EVERY == YIELD_EVERY - 1:
                    time.sleep(0)  # on a writer thread: let the executor thread have the GIL
        result.path = request.path
        result.message_count = len(messages)
        result.size_bytes = request.path.stat().st_size
        result.deleted = self._enforce_cap(request.path)

    def _enforce_cap(self, newest: Path) -> list[Path]:
        snapshots = list_snapshots(self.out_dir)
        sizes = {p: p.stat().st_size for p in snapshots}
        total = sum(sizes.values())
        if sizes.get(newest, 0) > self.max_total_bytes:
            newest.unlink(missing_ok=True)
            raise SnapshotError(
                f"snapshot {newest} of {sizes[newest]} bytes exceeds the disk cap of {self.max_total_bytes} bytes; removed"
            )
        deleted: list[Path] = []
        for old in snapshots:
            if total <= self.max_total_bytes:
                break
            if old == newest:
                continue
            try:
                old.unlink()
            except OSError:
                continue
            total -= sizes[old]
            deleted.append(old)
        if deleted:
            try:
                fd = os.open(self.out_dir, os.O_RDONLY | os.O_DIRECTORY)
                os.fsync(fd)
                os.close(fd)
            except OSError:
                pass
        return deleted
