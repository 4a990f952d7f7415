"""One output directory per run: ``events.jsonl`` plus ``snapshots/*.mcap``.

Glue for the live monitor and the demo runner: every event goes to the event log
(fsynced) with the relative path its snapshot will have, and the snapshot is written
once its post window has passed. Snapshot outcomes are logged too, so the log alone
tells which snapshots exist and which failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rosbags.typesys.store import Typestore

from sim_real_bridge.capture.event_log import EventLog
from sim_real_bridge.capture.snapshots import (
    DEFAULT_MAX_TOTAL_BYTES,
    DEFAULT_POST_S,
    DEFAULT_PRE_S,
    SnapshotResult,
    SnapshotWriter,
)

SNAPSHOT_DIR = "snapshots"
EVENT_LOG = "events.jsonl"


class FailureCapture:
    """Event log and snapshots under one directory.

    Log lines are ``{"type": "event", ...event fields, "snapshot": "snapshots/x.mcap"}``
    and ``{"type": "snapshot", "id": ..., "snapshot": ..., "ok": bool, "error": str|None,
    "messages": n, "bytes": n, "deleted": [...]}``.

    Args:
        out_dir: run output directory (created if missing).
        typestore: message definitions for snapshots; default :func:`build_typestore`.
        pre_s, post_s, max_total_bytes, label: see :class:`SnapshotWriter`.

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
    ) -> None:
        self.out_dir = Path(out_dir)
        self.snapshots = SnapshotWriter(
            self.out_dir / SNAPSHOT_DIR, typestore, pre_s=pre_s, post_s=post_s,
            max_total_bytes=max_total_bytes, label=label,
        )
        self.log = EventLog(self.out_dir / EVENT_LOG)

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
        self.log.append({"type": "event", **event, "snapshot": relative})
        return relative

    def poll(self, now_ns: int) -> list[SnapshotResult]:
        """Write due snapshots and log each outcome."""
        return self._log_results(self.snapshots.poll(now_ns))

    def close(self) -> list[SnapshotResult]:
        """Write pending snapshots with what is buffered, log them, close the log."""
        try:
            return self._log_results(self.snapshots.flush())
        finally:
            self.log.close()

    def _log_results(self, results: list[SnapshotResult]) -> list[SnapshotResult]:
        for result in results:
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
