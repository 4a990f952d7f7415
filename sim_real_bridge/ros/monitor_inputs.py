"""How the divergence monitor takes its inputs: streams, QoS, decoding, handing to the engine.

Each side (``sim``, ``real``) may have the streams of :data:`STREAMS`. A raw message is
decoded by :func:`decode_input` (direct CDR readers for the high-rate streams) and
handed to the engine by :func:`feed_input`, which refuses what the engine must not see.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from geometry_msgs.msg import PoseStamped, WrenchStamped
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from sim_real_bridge.conversions import cdr
from sim_real_bridge.conversions.robot_msgs import joint_state_to_arrays, pose_to_arrays, wrench_to_arrays
from sim_real_bridge.core import validation
from sim_real_bridge.core.engine import DivergenceEngine

SIDES = ("sim", "real")
#: The mirrored command stream (reliable, low rate); only the sim side's copy starts the run clock.
COMMAND_STREAM = "joint_trajectory"
#: Streams whose message may complete a grid time, and so step the analysis at once.
STEPPING_STREAMS = ("joint_states", "wrench")


@dataclass(frozen=True)
class InputStream:
    """One stream a side may have.

    Attributes:
        msg_type: the rclpy message class.
        type_name: the ROS type name (as recorded in bags and snapshots).
        required: whether each side must name a topic for it.
    """

    msg_type: type
    type_name: str
    required: bool


#: Streams of each side, by parameter key (``<side>_topics.<key>``).
STREAMS: dict[str, InputStream] = {
    "joint_states": InputStream(JointState, "sensor_msgs/msg/JointState", True),
    "wrench": InputStream(WrenchStamped, "geometry_msgs/msg/WrenchStamped", False),
    "ee_pose": InputStream(PoseStamped, "geometry_msgs/msg/PoseStamped", False),
    "object_pose": InputStream(PoseStamped, "geometry_msgs/msg/PoseStamped", False),
    COMMAND_STREAM: InputStream(JointTrajectory, "trajectory_msgs/msg/JointTrajectory", False),
}

#: Best effort (accepts reliable and best-effort publishers, like sensor-data QoS),
#: with a queue deep enough to ride out a backlog as long as the engine's max_backlog_s
#: (2 s) at 1 kHz, or a snapshot write at 1 kHz: a sample lost here would read as a dropout.
INPUT_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=2000, reliability=ReliabilityPolicy.BEST_EFFORT)
COMMAND_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=50, reliability=ReliabilityPolicy.BEST_EFFORT)
#: Direct CDR readers of the high-rate streams (rclpy's deserializer costs more than the analysis).
FAST_READERS = {"joint_states": cdr.read_joint_state, "wrench": cdr.read_wrench_stamped}
#: Header stamp of a little-endian CDR message: after the 4-byte encapsulation.
HEADER_STAMP = struct.Struct("<iI")
#: Refusals of joint_states the engine cannot take at all (others are only flagged).
JOINT_STATE_REFUSALS = (validation.EMPTY, validation.LENGTH_MISMATCH, validation.OVERSIZED)


def decode_input(data: bytes, stream: str, msg_type: type) -> Any:
    """The message of a raw input: our CDR reader where there is one, else rclpy's.

    Raises:
        Exception: whatever rclpy's deserializer raises on a corrupt message.
    """
    reader = FAST_READERS.get(stream)
    if reader is not None:
        try:
            return reader(data)
        except ValueError:  # not plain little-endian CDR: rclpy's reader decides
            pass
    return deserialize_message(data, msg_type)


def header_stamp_ns(data: bytes) -> int | None:
    """Header stamp of a raw little-endian CDR message; None for any other encoding."""
    if len(data) < 12 or data[1] != 1:
        return None
    sec, nanosec = HEADER_STAMP.unpack_from(data, 4)
    return sec * 1_000_000_000 + nanosec


def feed_input(engine: DivergenceEngine, limits: validation.InputLimits, side: str, stream: str,
               msg: Any, recv_ns: int) -> str | None:
    """Converts one message to arrays and hands it to the engine (which checks it).

    Returns:
        The reason when the message is refused before the engine, else None.
    """
    if stream == COMMAND_STREAM:
        if side == "sim":
            engine.add_command(recv_ns)
        return None
    if stream == "joint_states":
        stamp_ns, names, q, qd, eff = joint_state_to_arrays(msg)
        reason = validation.check_joint_state(names, q, qd, eff, None, limits)
        if reason in JOINT_STATE_REFUSALS:
            return reason
        engine.add_joint_states(side, stamp_ns, recv_ns, names, q, qd, eff)
    elif stream == "wrench":
        stamp_ns, frame_id, force, torque = wrench_to_arrays(msg)
        engine.add_wrench(side, stamp_ns, recv_ns, force, torque, frame_id)
    else:
        stamp_ns, frame_id, position, quat = pose_to_arrays(msg)
        engine.add_pose(side, stream, stamp_ns, recv_ns, position, quat, frame_id)
    return None
