"""Live fits: each closed dynamics or contact event's snapshot fitted in another process.

The monitor hands over an event when it closes and its snapshot when written; once both
are there the snapshot goes to a :class:`~sim_real_bridge.fit.worker.FitWorker` (never
blocking the analysis), and each result is published on ``/divergence/fits``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sim_real_bridge.msg as srb_msgs
from sim_real_bridge.fit.worker import FIT_CATEGORIES, FitWorker
from sim_real_bridge.ros.diagnostics import OK, WARN, make_status
from sim_real_bridge.ros.qos import OUTPUT_QOS

TOPIC = "/divergence/fits"


class LiveFits:
    """The fits of one monitor node.

    Args:
        node: the node publishing the results.
        model: built-in robot name or MJCF file the fits correct.
        output_dir: the monitor's output directory (fits go to its ``fits/``).
    """

    def __init__(self, node: Any, model: str, output_dir: Path) -> None:
        self._node = node
        self._worker = FitWorker(model, out_root=Path(output_dir) / "fits")
        self._publisher = node.create_publisher(srb_msgs.FitResult, TOPIC, OUTPUT_QOS)
        self._closed: dict[str, str] = {}  # event id -> category, closed and waiting for its snapshot
        self._snapshots: dict[str, Path] = {}  # event id -> snapshot written, waiting for the close
        self.submitted = 0
        self.published = 0

    def event_closed(self, event_id: str, category: str) -> None:
        if category in FIT_CATEGORIES:
            self._closed[event_id] = category
            self._submit_ready()

    def snapshot_written(self, event_id: str, path: Path) -> None:
        self._snapshots[event_id] = path
        self._submit_ready()

    def _submit_ready(self) -> None:
        for event_id in [e for e in self._closed if e in self._snapshots]:
            category = self._closed.pop(event_id)
            if self._worker.submit(self._snapshots.pop(event_id), event_id=event_id, category=category):
                self.submitted += 1

    def poll(self, now_ns: int) -> None:
        """Publish the results that are in (never waits)."""
        for result in self._worker.poll():
            msg = srb_msgs.FitResult(**result)
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(now_ns), 1_000_000_000)
            if self._node.context.ok():
                self._publisher.publish(msg)
            self.published += 1
            if result["error"]:
                self._node.get_logger().warning(f"fit of {result['event_id']} failed: {result['error']}")

    def diagnostic(self) -> Any:
        refused = self._worker.refused
        return make_status(f"{self._node.get_name()}: fits", WARN if refused else OK,
                           f"{refused} fit(s) refused: too many pending" if refused else "fitting closed events",
                           {"submitted": self.submitted, "published": self.published,
                            "pending": self._worker.pending, "refused": refused})

    def close(self) -> None:
        self._worker.close(wait=False)
