"""Every custom message survives a round trip over DDS between two processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is part of the make test environment")
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402

import sim_real_bridge.msg as srb_msg  # noqa: E402
from sim_real_bridge.ros.runner import graph_environment  # noqa: E402

pytestmark = pytest.mark.ros

MSG_NAMES = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "msg").glob("*.msg"))


def _filled(msg_type: type, seed: int) -> object:
    """A message of msg_type with every field set to a non-default value."""
    from builtin_interfaces.msg import Time
    from diagnostic_msgs.msg import KeyValue
    from geometry_msgs.msg import Pose, Vector3, Wrench
    from std_msgs.msg import Header

    msg = msg_type()
    for field, type_str in msg.get_fields_and_field_types().items():
        value: object
        if type_str == "std_msgs/Header":
            value = Header(frame_id=f"frame_{seed}", stamp=Time(sec=1_700_000_000 + seed, nanosec=123_456_789))
        elif type_str == "builtin_interfaces/Time":
            value = Time(sec=seed + 5, nanosec=987_654_321)
        elif type_str == "geometry_msgs/Pose":
            value = Pose()
            value.position.x, value.position.y, value.position.z = 0.1 * seed, -0.2, 0.3
            value.orientation.w, value.orientation.x = 0.6, 0.8
        elif type_str == "geometry_msgs/Wrench":
            value = Wrench()
            value.force.x, value.torque.z = 1.5 + seed, -2.25
        elif type_str == "geometry_msgs/Vector3":
            value = Vector3(x=0.5, y=-1.5, z=2.5 + seed)
        elif type_str == "sequence<diagnostic_msgs/KeyValue>":
            value = [KeyValue(key="k1", value="v1"), KeyValue(key="k2", value=str(seed))]
        elif type_str == "sequence<sim_real_bridge/CategoryShare>":
            value = [_filled(srb_msg.CategoryShare, seed + 1), _filled(srb_msg.CategoryShare, seed + 2)]
        elif type_str == "sequence<sim_real_bridge/Injection>":
            value = [_filled(srb_msg.Injection, seed + 3)]
        elif type_str == "sequence<string>":
            value = ["joint1", "joint2", f"j{seed}"]
        elif type_str == "sequence<double>":
            value = [0.25, -1.0e-3, float(seed)]
        elif type_str == "sequence<boolean>":
            value = [True, False, seed % 2 == 0]
        elif type_str == "string":
            value = f"{field}-{seed}"
        elif type_str == "double":
            value = 0.5 + seed
        elif type_str in ("uint8", "uint32"):
            value = 1 + seed
        elif type_str == "boolean":
            value = True
        else:  # pragma: no cover - a new field type must be added above
            raise AssertionError(f"no test value for {msg_type.__name__}.{field}: {type_str}")
        setattr(msg, field, value)
    return msg


@pytest.fixture(scope="module")
def ros_node():
    rclpy.init()
    node = rclpy.create_node("roundtrip_test")
    yield node
    node.destroy_node()
    rclpy.shutdown()


@pytest.mark.parametrize("type_name", MSG_NAMES)
def test_message_round_trips_between_processes(ros_node, type_name: str) -> None:
    msg_type = getattr(srb_msg, type_name)
    sent = _filled(msg_type, seed=7)
    assert sent != msg_type(), "the test message must differ from the default"
    in_topic, out_topic = f"/roundtrip/{type_name}/in", f"/roundtrip/{type_name}/out"
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    received: list = []
    sub = ros_node.create_subscription(msg_type, out_topic, received.append, qos)
    pub = ros_node.create_publisher(msg_type, in_topic, qos)
    echo = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve().parent / "helpers" / "msg_echo.py"), type_name, in_topic, out_topic],
        cwd=Path(__file__).resolve().parents[1], env=graph_environment(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60.0
        while not received and time.monotonic() < deadline:
            if echo.poll() is not None:
                pytest.fail(f"echo process exited: {echo.stderr.read()}")
            if pub.get_subscription_count() > 0:
                pub.publish(sent)
            rclpy.spin_once(ros_node, timeout_sec=0.2)
        assert received, f"no {type_name} came back within 60 s"
        assert received[0] == sent
    finally:
        echo.send_signal(signal.SIGINT)
        try:
            echo.wait(timeout=10)
        except subprocess.TimeoutExpired:
            echo.kill()
            echo.wait()
        ros_node.destroy_subscription(sub)
        ros_node.destroy_publisher(pub)
