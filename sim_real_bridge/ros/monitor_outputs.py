"""The divergence monitor's output topics: residuals, events, summary, markers.

Residual rows go straight to CDR and are published raw (rclpy message objects cost
~0.5 ms per grid time on the latency path); every output also goes into the snapshot
window (:class:`~sim_real_bridge.ros.monitor_recording.MonitorRecording`). Each event
gets its line in events.jsonl and its snapshot before it is published.
"""

from __future__ import annotations

from typing import Any

from diagnostic_msgs.msg import KeyValue
from rclpy.node import Node
from rclpy.serialization import serialize_message
from visualization_msgs import msg as viz_msgs

import sim_real_bridge.msg as srb_msgs
from sim_real_bridge.conversions import cdr
from sim_real_bridge.conversions import divergence_msgs as convert
from sim_real_bridge.core.engine import DivergenceEngine
from sim_real_bridge.core.events import ACTION_CLOSE, ACTION_OPEN, EventRecord
from sim_real_bridge.core.outputs import EngineOutput, JointColumns, PoseColumns
from sim_real_bridge.errors import SnapshotError
from sim_real_bridge.ros.live_fits import LiveFits
from sim_real_bridge.ros.monitor_recording import MonitorRecording
from sim_real_bridge.ros.qos import OUTPUT_QOS

JOINTS_TOPIC = "/divergence/joints"
POSE_TOPIC = "/divergence/pose"
CONTACT_TOPIC = "/divergence/contact"
EVENTS_TOPIC = "/divergence/events"
SUMMARY_TOPIC = "/divergence/summary"
MARKERS_TOPIC = "/divergence/markers"


class MonitorOutputs:
    """The publishers of one monitor and what goes out on them.

    Args:
        node: the monitor node (publishers, logger, context).
        engine: its engine (event times, summaries).
        recording: where outputs are kept for snapshots, and events recorded.
        fits: the live fits, told of each closed event; None when off.
        pose_frame_id: frame of the pose rows and markers.
    """

    def __init__(self, node: Node, engine: DivergenceEngine, recording: MonitorRecording,
                 fits: LiveFits | None, pose_frame_id: str) -> None:
        self._node = node
        self._engine = engine
        self._recording = recording
        self._fits = fits
        self._pose_frame = pose_frame_id
        self._pub_joints = node.create_publisher(srb_msgs.JointDivergence, JOINTS_TOPIC, OUTPUT_QOS)
        self._pub_pose = node.create_publisher(srb_msgs.PoseDivergence, POSE_TOPIC, OUTPUT_QOS)
        self._pub_contact = node.create_publisher(srb_msgs.ContactResidual, CONTACT_TOPIC, OUTPUT_QOS)
        self._pub_events = node.create_publisher(srb_msgs.GapEvent, EVENTS_TOPIC, OUTPUT_QOS)
        self._pub_summary = node.create_publisher(srb_msgs.DivergenceSummary, SUMMARY_TOPIC, OUTPUT_QOS)
        self._pub_markers = node.create_publisher(viz_msgs.MarkerArray, MARKERS_TOPIC, OUTPUT_QOS)
        #: Node time of the tick under way (the joint rows' receive time in snapshots).
        self.tick_ns = 0
        self._open_categories: dict[str, str] = {}  # event id -> category, of the open events
        self._latest_poses: PoseColumns | None = None  # the last pose rows published (markers show the last)
        self._snapshot_notice: Any | None = None

    def publish_joints(self, joints: JointColumns) -> None:
        """The engine's joint sink: joint residuals leave as soon as they are formed."""
        live = self._node.context.ok()  # at shutdown (finish) the context may be gone already
        for data in cdr.joint_divergence_cdr(joints):
            if live:
                self._pub_joints.publish(data)
            self._recording.add_output(JOINTS_TOPIC, "sim_real_bridge/msg/JointDivergence", self.tick_ns, data)

    def publish(self, out: EngineOutput, now_ns: int) -> None:
        """Pose and contact rows and events of one analysis step (joints went out already)."""
        published = []
        if out.poses is not None and len(out.poses):
            published += [(self._pub_pose, POSE_TOPIC, "sim_real_bridge/msg/PoseDivergence", data)
                          for data in cdr.pose_divergence_cdr(out.poses, self._pose_frame)]
            self._latest_poses = out.poses
        if out.contacts is not None and len(out.contacts):
            published += [(self._pub_contact, CONTACT_TOPIC, "sim_real_bridge/msg/ContactResidual", data)
                          for data in cdr.contact_residual_cdr(out.contacts)]
        live = self._node.context.ok()  # at shutdown (finish) the context may be gone already
        for publisher, topic, type_name, data in published:
            if live:
                publisher.publish(data)
            self._recording.add_output(topic, type_name, now_ns, data)
        for _, record in out.events:
            self._publish_event(record, now_ns)

    def _publish_event(self, record: EventRecord, now_ns: int) -> None:
        if record.action == ACTION_OPEN:
            self._open_categories[record.id] = record.category
        elif record.action == ACTION_CLOSE:
            self._open_categories.pop(record.id, None)
            if self._fits is not None:
                self._fits.event_closed(record.id, record.category)
        entry = {
            "id": record.id, "action": record.action, "category": record.category, "kind": record.kind,
            "severity": record.severity, "start_s": self._engine.to_seconds(record.start_ns),
            "end_s": self._engine.to_seconds(record.end_ns), "evidence": dict(record.evidence),
        }
        try:
            self._recording.record_event(record.id, entry, record.start_ns)
        except SnapshotError as error:
            self.snapshot_failed(str(error), now_ns)
        snapshot = self._recording.snapshot_paths.get(record.id, "")
        msg = convert.gap_event_msg(srb_msgs, KeyValue, record, now_ns, snapshot)
        if self._node.context.ok():  # at shutdown (finish) the context may be gone already
            self._pub_events.publish(msg)
        if self._recording.capture is not None:
            self._recording.add_output(EVENTS_TOPIC, "sim_real_bridge/msg/GapEvent", now_ns, serialize_message(msg))
        if record.action == ACTION_OPEN:
            self._node.get_logger().info(
                f"gap event {record.id}: {record.category}/{record.kind} severity {record.severity:.2f}")

    def snapshot_failed(self, error: str, now_ns: int) -> None:
        """Stops snapshots for good: ERROR in /diagnostics, one event, live topics go on."""
        if not self._recording.stop_snapshots(error):
            return
        self._node.get_logger().error(f"snapshots stopped: {error}; live topics keep flowing")
        notice = EventRecord(id="snapshot_failure", category="", kind="snapshot_failed", severity=1.0,
                             start_ns=now_ns, end_ns=now_ns, open=False, action=ACTION_CLOSE,
                             evidence={"error": error})
        self._snapshot_notice = convert.gap_event_msg(srb_msgs, KeyValue, notice, now_ns)
        self.publish_snapshot_notice()

    def publish_snapshot_notice(self) -> None:
        # A failure at start-up happens before anyone subscribed; keep the notice until then.
        if self._snapshot_notice is not None and self._pub_events.get_subscription_count() > 0:
            self._pub_events.publish(self._snapshot_notice)
            self._snapshot_notice = None

    def publish_summary(self, now_ns: int) -> None:
        record = self._engine.summary(now_ns)
        self._pub_summary.publish(convert.divergence_summary_msg(srb_msgs, KeyValue, record))

    def publish_markers(self, now_ns: int) -> None:
        """Markers of the last pose row, with the categories of the open events."""
        poses = self._latest_poses
        if poses is None:
            return
        categories = sorted(set(self._open_categories.values()))
        self._pub_markers.publish(cdr.divergence_markers_cdr(poses, [len(poses) - 1], [categories], [now_ns],
                                                             self._pose_frame)[0])
