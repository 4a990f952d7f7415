"""What the divergence monitor writes to disk as it runs: event snapshots and the input recording.

- Snapshots: every input and output message goes into the rolling window of a
  :class:`~sim_real_bridge.capture.failure_capture.FailureCapture`; each event gets an
  MCAP of its window. When one fails, the node stops them for good
  (:meth:`MonitorRecording.stop_snapshots`; what it tells the world is the node's).
- Input recording (``record_inputs_path``): every input as received (log time = the
  node's receive time) and the analysis ticks, so that replay repeats the run. A failing
  bag stops the recording, never the analysis.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from diagnostic_msgs.msg import DiagnosticStatus

from sim_real_bridge.capture.bag_writer import BagWriter
from sim_real_bridge.capture.failure_capture import FailureCapture
from sim_real_bridge.capture.snapshots import SnapshotResult
from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.conversions import cdr
from sim_real_bridge.errors import SnapshotError
from sim_real_bridge.ros.diagnostics import ERROR, OK, make_status
from sim_real_bridge.ros.monitor_params import SnapshotSettings

#: Where the input recording and snapshots keep the engine's tick times (log time = stamp = now).
TICKS_TOPIC = "/divergence_monitor/ticks"
TICKS_TYPE = "builtin_interfaces/msg/Time"


class MonitorRecording:
    """The snapshots and the input recording of one monitor run; both start off.

    Args:
        logger: the node's logger (for a failing input recording).
    """

    def __init__(self, logger: Any) -> None:
        self._logger = logger
        #: The snapshot writer; None before :meth:`start_snapshots` and once stopped.
        self.capture: FailureCapture | None = None
        #: Why snapshots stopped, if they did.
        self.error: str | None = None
        #: Snapshot file of each event, by event id.
        self.snapshot_paths: dict[str, str] = {}
        self._inputs_bag: BagWriter | None = None

    def start_snapshots(self, output_dir: Path, settings: SnapshotSettings) -> None:
        """Raises SnapshotError when the snapshot directory cannot be used."""
        self.capture = FailureCapture(
            output_dir, pre_s=settings.pre_s, post_s=settings.post_s,
            max_total_bytes=settings.max_total_bytes, label=settings.label, background=True,
        )

    def start_input_recording(self, path: Path) -> None:
        self._inputs_bag = BagWriter(path, build_typestore())
        self._inputs_bag.open()
        self._inputs_bag.add_topic(TICKS_TOPIC, TICKS_TYPE)

    def add_input_topic(self, topic: str, type_name: str) -> None:
        if self._inputs_bag is not None:
            self._inputs_bag.add_topic(topic, type_name)

    def stop_snapshots(self, error: str) -> bool:
        """Stops snapshots for good; False when they had stopped already."""
        if self.error is not None:
            return False
        self.error = error
        self.capture = None
        return True

    # ------------------------------------------------------------------ messages
    def add_input(self, topic: str, type_name: str, recv_ns: int, data: bytes) -> None:
        """One input message, as received: into the snapshot window and the recording."""
        if self.capture is not None:
            self.capture.add_message(topic, type_name, recv_ns, data)
        if self._inputs_bag is not None:
            self._record_input(topic, recv_ns, data)

    def add_output(self, topic: str, type_name: str, stamp_ns: int, data: bytes) -> None:
        """One output message (CDR): into the snapshot window."""
        if self.capture is not None:
            self.capture.add_message(topic, type_name, stamp_ns, data)

    def note_tick(self, now_ns: int) -> None:
        """Keep the engine's tick time with the inputs (recording, snapshots): replay then
        ticks when this node did, which matters where a stream stalled."""
        if self._inputs_bag is None and self.capture is None:
            return
        data = cdr.time_message(now_ns)
        if self._inputs_bag is not None:
            self._record_input(TICKS_TOPIC, now_ns, data)
        if self.capture is not None:
            self.capture.add_message(TICKS_TOPIC, TICKS_TYPE, now_ns, data)

    def _record_input(self, topic: str, recv_ns: int, data: bytes) -> None:
        """Write one input as received; a failing bag stops recording, never the analysis."""
        bag = self._inputs_bag
        if bag is None:
            return
        try:
            bag.write(topic, recv_ns, data)
        except SnapshotError as error:
            self._logger.error(f"input recording stopped: {error}")
            bag.abort()
            self._inputs_bag = None

    # ------------------------------------------------------------------ snapshots
    def record_event(self, event_id: str, entry: Mapping[str, Any], start_ns: int) -> None:
        """Line in events.jsonl and snapshot request of an event (none once stopped).

        Raises:
            SnapshotError: the event could not be recorded.
        """
        if self.capture is not None:
            self.snapshot_paths[event_id] = self.capture.record_event(entry, start_ns)

    def poll(self, now_ns: int) -> Iterable[SnapshotResult]:
        """The snapshots finished since the last poll (never waits)."""
        return self.capture.poll(now_ns) if self.capture is not None else ()

    def close_snapshots(self) -> Iterable[SnapshotResult]:
        """Writes the pending snapshots (waits for them); returns their results."""
        return self.capture.close() if self.capture is not None else ()

    def close_input_recording(self) -> None:
        if self._inputs_bag is not None:
            try:
                self._inputs_bag.close()
            except SnapshotError as error:
                self._logger.error(f"input recording lost: {error}")
            self._inputs_bag = None

    def diagnostic(self, node_name: str) -> DiagnosticStatus:
        if self.error is not None:
            return make_status(f"{node_name}: snapshots", ERROR, f"snapshots stopped: {self.error}")
        assert self.capture is not None
        return make_status(f"{node_name}: snapshots", OK, f"writing to {self.capture.snapshots.out_dir}",
                           {"pending": len(self.capture.snapshots.pending), "writing": self.capture.writing,
                            "written_inline": self.capture.written_inline, "events": len(self.snapshot_paths)})
