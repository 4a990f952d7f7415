"""QoS profiles used by every node, following ROS 2 conventions."""

from __future__ import annotations

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

#: Robot streams (joint_states, wrench, imu, poses): best effort accepts both
#: reliable and best-effort publishers.
SENSOR_QOS: QoSProfile = qos_profile_sensor_data

#: Streams we publish at high rate (robot stand-ins): reliable so that `ros2 bag
#: record` and rqt with default QoS receive them; sensor-data subscribers match too.
STREAM_PUB_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=50, reliability=ReliabilityPolicy.RELIABLE
)

#: Commands (JointTrajectory) are published and received reliably.
COMMAND_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=10, reliability=ReliabilityPolicy.RELIABLE
)

#: Outputs of the monitor (divergence topics, events, markers).
OUTPUT_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST, depth=50, reliability=ReliabilityPolicy.RELIABLE
)

#: Latched-style topics (scenario labels, summaries) that late joiners should see.
LATCHED_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
