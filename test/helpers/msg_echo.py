"""Echo process for the message round-trip test.

Usage: python test/helpers/msg_echo.py TYPE_NAME IN_TOPIC OUT_TOPIC

Republishes every message of sim_real_bridge/msg/TYPE_NAME from IN_TOPIC on
OUT_TOPIC, unchanged, until interrupted.
"""

from __future__ import annotations

import sys

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.qos import QoSProfile, ReliabilityPolicy

import sim_real_bridge.msg as srb_msg


def main() -> None:
    type_name, in_topic, out_topic = sys.argv[1:4]
    msg_type = getattr(srb_msg, type_name)
    rclpy.init()
    node = rclpy.create_node(f"echo_{type_name.lower()}")
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    publisher = node.create_publisher(msg_type, out_topic, qos)
    node.create_subscription(msg_type, in_topic, publisher.publish, qos)
    print("ready", flush=True)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
