"""One output directory per run: ``events.jsonl`` plus ``snapshots/*.mcap``.

Glue for the live monitor and the demo runner: every event goes to the event log
(fsynced) with the relative path its snapshot will have, and the snapshot is written
once its post window has passed. Snapshot outcomes are logged too, so the log alone
tells which snapshots exist and which failed.

With ``background=True`` (the live monitor) snapshots are written by one writer thread
fed through a bounded queue, so a write (hundreds of ms) never holds up the caller;
the caller only takes a cheap frozen copy of the buffer. When the queue is full the
caller writes the snapshot itself (slow, but nothing is lost). Crash safety is the
writer's own (``.partial`` entries, finished or removed on the next start).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rosbags.typesys.store import Typestore

from sim_real_bridge.capture.event_log import EventLog
from sim_real_bridge.capture.snapshots import (
    DEFAULT_MAX_TOTAL_BYTES,
    DEFAULT_POST_S,
    DEFAULT_PRE_S,
    SnapshotJob,
    SnapshotResult,
    SnapshotWriter,
)
from sim_real_bridge.errors import SnapshotError

SNAPSHOT_DIR = "snapshots"
EVENT_LOG = "events.jsonl"
#: Snapshots waiting for the writer thread before the caller writes them itself.
WRITER_QUEUE_SIZE = 8


class FailureCapture:
    """Event log and snapshots under one directory.

    Log lines are ``{"type": "event", ...event fields, "snapshot": "snapshots/x.mcap"}``
    and ``{"type": "snapshot", "id": ..., "snapshot": ..., "ok": bool, "error": str|None,
    "messages": n, "bytes": n, "deleted": [...]}``.

    Args:
        out_dir: run output directory (created if missing).
        typestore: message definitions for snapshots; default :func:`build_typestore`.
        pre_s, post_s, max_total_bytes, label: see :class:`SnapshotWriter`.
        background: write snapshots on a writer thread (see the module docstring).

    Raises:
        SnapshotError: the directory or the log cannot be created.
    """

    def __init__(
        self,
        out_dir: Path | str,
        typestore: Typestore | None = None,
        *,
        pre_s: float = DEFAULT_PRE_S,
        post_s: float = DEFAULT_POST_S,
        max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES,
        label: str = "",
        background: bool = False,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.snapshots = SnapshotWriter(
            self.out_dir / SNAPSHOT_DIR, typestore, pre_s=pre_s, post_s=post_s,
            max_total_bytes=max_total_bytes, label=label,
        )
        self.log = EventLog(self.out_dir / EVENT_LOG)
        self._log_lock = threading.Lock()
        self._done: queue.SimpleQueue[SnapshotResult] = queue.SimpleQueue()
        self._jobs: queue.Queue[SnapshotJob | None] | None = None
        self._writer: threading.Thread | None = None
        self.written_inline = 0
        if background:
            self._jobs = queue.Queue(maxsize=WRITER_QUEUE_SIZE)
            self._writer = threading.Thread(target=self._write_jobs, name="snapshot_writer", daemon=True)
            self._writer.start()

    @property
    def writing(self) -> int:
        """Snapshots taken but not yet written (queued or being written)."""
        return self._jobs.unfinished_tasks if self._jobs is not None else 0

    def _write_jobs(self) -> None:
        assert self._jobs is not None
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                self._finish(self.snapshots.write(job))
            finally:
                self._jobs.task_done()

    def _finish(self, result: SnapshotResult) -> None:
        try:
            self._log_results([result])
        except SnapshotError as exc:  # the log itself failed: report it with the snapshot
            if result.error is None:
                result.error = exc
        self._done.put(result)

    def _submit(self, jobs: list[SnapshotJob]) -> None:
        for job in jobs:
            if self._jobs is not None:
                try:
                    self._jobs.put_nowait(job)
                    continue
                except queue.Full:
                    self.written_inline += 1
            self._finish(self.snapshots.write(job))

    def _results(self) -> list[SnapshotResult]:
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def add_message(self, topic: str, msgtype: str, recv_stamp_ns: int, data: bytes | memoryview) -> None:
        """Feed one received message (raw CDR)."""
        self.snapshots.add_message(topic, msgtype, recv_stamp_ns, data)

    def record_event(self, event: Mapping[str, Any], event_stamp_ns: int) -> str:
        """Log an event durably, ask for its snapshot, return the snapshot's relative path.

        The event needs an ``id``; an id seen before reuses its snapshot (events are
        republished when they close).
        """
        request = self.snapshots.request(str(event["id"]), event_stamp_ns)
        relative = f"{SNAPSHOT_DIR}/{request.path.name}"
        with self._log_lock:
            self.log.append({"type": "event", **event, "snapshot": relative})
        return relative

    def poll(self, now_ns: int) -> list[SnapshotResult]:
        """Start writing due snapshots; return (and log) every outcome known so far.

        Without a writer thread the due snapshots are written before this returns.
        """
        self._submit(self.snapshots.take_due(now_ns))
        return self._results()

    def close(self) -> list[SnapshotResult]:
        """Write pending snapshots with what is buffered, wait for the writer, close the log."""
        try:
            self._submit(self.snapshots.take_all())
            if self._jobs is not None and self._writer is not None:
                self._jobs.put(None)
                self._writer.join()
                self._jobs = None
            return self._results()
        finally:
            with self._log_lock:
                self.log.close()

    def _log_results(self, results: list[SnapshotResult]) -> list[SnapshotResult]:
        for result in results:
            with self._log_lock:
                self.log.append({
                "type": "snapshot",
                "id": result.request.event_id,
                "snapshot": f"{SNAPSHOT_DIR}/{result.request.path.name}",
                "ok": result.error is None,
                "error": None if result.error is None else str(result.error),
                "messages": result.message_count,
                "bytes": result.size_bytes,
                "deleted": [f"{SNAPSHOT_DIR}/{p.name}" for p in result.deleted],
                })
        return results
