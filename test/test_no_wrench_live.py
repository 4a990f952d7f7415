"""A robot without an F/T sensor, live over real DDS: the monitor with its wrench topics
empty analyses the joints, and the bridge graph started with the teleoperation stack
file (the same graph bridge.launch.py starts) publishes /divergence/joints from a
leader and a follower arm's joint states alone.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is part of the make test environment")
from helpers.monitor_harness import JOINTS, Harness, set_stamp  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from sim_real_bridge.msg import JointDivergence  # noqa: E402
from sim_real_bridge.ros.graph import GraphOptions, bridge_graph  # noqa: E402
from sim_real_bridge.ros.runner import GraphRunner  # noqa: E402

pytestmark = pytest.mark.ros
NO_WRENCH = {"sim_topics.wrench": "", "real_topics.wrench": ""}


@pytest.fixture
def ros_context():
    rclpy.init()
    yield
    rclpy.try_shutdown()


def test_monitor_with_empty_wrench_topics_analyses_the_joints(ros_context, tmp_path: Path) -> None:
    harness = Harness(tmp_path, extra_parameters=NO_WRENCH)
    try:
        harness.play(3.0, real_offset_rad=lambda t: 0.05, streams=("joint_states",))
        assert harness.spin_until(lambda: harness.received["summary"] and harness.received["diagnostics"])
        joints = harness.received["joints"]
        assert len(joints) > 20 and list(joints[-1].name) == JOINTS
        assert all(abs(r - 0.05) < 0.02 for r in joints[-1].position_residual_rad)
        assert harness.received["contact"] == []
        names = set(harness.statuses())
        assert {"divergence_monitor: /sim/joint_states", "divergence_monitor: /real/joint_states"} <= names
        assert not any("wrench" in name for name in names)
        summary = harness.monitor.finish()
        ran = {entry["analysis"]: entry for entry in json.loads(summary.read_text())["analyses"]}
        assert ran["joint residuals"]["ran"] and ran["joint residuals"]["detail"].startswith(f"{len(JOINTS)} joint(s)")
        contact = ran["contact residuals"]
        assert not contact["ran"] and "no wrench topic on either side" in contact["detail"], contact
        assert not ran["end-effector pose"]["ran"]  # subscribed, nothing played on it
        assert "nothing received on" in ran["end-effector pose"]["detail"]
    finally:
        harness.close()


def _arm_state(names: list[str], q: list[float], stamp_ns: int) -> JointState:
    msg = JointState(name=names, position=q)
    set_stamp(msg, stamp_ns)
    return msg


def test_bridge_graph_with_the_teleop_stack_file_publishes_joint_divergence(repo_root: Path, tmp_path: Path) -> None:
    specs = bridge_graph(GraphOptions(config_dir=repo_root / "config",
                                      params_file=repo_root / "config" / "stacks" / "teleop_leader_follower.yaml",
                                      output_dir=tmp_path / "monitor"))
    rclpy.init()
    node = rclpy.create_node("teleop_rig_under_test")
    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    leader = node.create_publisher(JointState, "/leader/joint_states", qos)
    follower = node.create_publisher(JointState, "/follower/joint_states", qos)
    received: list[JointDivergence] = []
    node.create_subscription(JointDivergence, "/divergence/joints", received.append, qos)
    base = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper"]
    runner = GraphRunner(specs, log_dir=tmp_path / "logs")
    try:
        runner.start()
        deadline = time.monotonic() + 60.0
        next_sample, t = time.monotonic(), 0.0
        while time.monotonic() < deadline and len(received) < 50:
            assert not runner.failed(), f"node exited early; logs in {tmp_path / 'logs'}"
            if time.monotonic() >= next_sample:
                q = [0.3 * math.sin(t + i) for i in range(len(base))]
                stamp_ns = node.get_clock().now().nanoseconds
                leader.publish(_arm_state([f"leader_{n}" for n in base], q, stamp_ns))
                follower.publish(_arm_state([f"follower_{n}" for n in base], [v + 0.02 for v in q], stamp_ns))
                next_sample += 0.01
                t += 0.01
            rclpy.spin_once(node, timeout_sec=0.002)
        assert len(received) >= 50, f"only {len(received)} /divergence/joints; logs in {tmp_path / 'logs'}"
        last = received[-1]
        assert list(last.name) == [f"leader_{n}" for n in base]
        assert all(abs(r - 0.02) < 0.01 for r in last.position_residual_rad)
    finally:
        codes = runner.stop()
        node.destroy_node()
        rclpy.shutdown()
    assert all(code == 0 for code in codes.values()), f"exit codes after SIGINT: {codes}"
