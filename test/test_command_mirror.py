"""command_mirror over real rclpy and DDS, in one process: mirroring, the gate, the heartbeat."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import rclpy
import yaml
from builtin_interfaces.msg import Duration as DurationMsg
from builtin_interfaces.msg import Time as TimeMsg
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Empty
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from sim_real_bridge.commands import safety
from sim_real_bridge.errors import ConfigError
from sim_real_bridge.msg import GapEvent
from sim_real_bridge.nodes.command_mirror import CommandMirror
from sim_real_bridge.ros.qos import COMMAND_QOS, OUTPUT_QOS, STREAM_PUB_QOS

pytestmark = pytest.mark.ros

JOINTS = [f"joint{i}" for i in range(1, 8)]
HOME = [0.0, 0.35, 0.0, 1.75, 0.0, 1.04, 0.0]
LIMITS = {
    "joint_names": JOINTS,
    "position_lower_rad": [-2.9, -1.8, -2.9, -2.8, -2.9, -2.8, -2.9],
    "position_upper_rad": [2.9, 1.8, 2.9, 2.8, 2.9, 2.8, 2.9],
    "velocity_max_rad_s": [2.0] * 7,
}
STATUS_NAME = "command_mirror: safety gate"
DEFAULT_TOPICS = {
    "topics.input": "/bridge/joint_trajectory",
    "topics.sim_output": "/sim/joint_trajectory",
    "topics.real_output": "/real/joint_trajectory",
    "topics.real_joint_states": "/real/joint_states",
}


def params(with_limits: bool = True, **overrides: Any) -> list[Parameter]:
    values: dict[str, Any] = dict(LIMITS) if with_limits else {}
    values.update(
        max_step_rad=0.5,
        heartbeat_timeout_s=60.0,
        diagnostics_period_s=0.2,
        forward_refused_to_sim=False,
    )
    values.update(overrides)
    return [Parameter(name, value=value) for name, value in values.items()]


def command(positions: list[list[float]], times_s: list[float], stamp_s: int = 1,
            names: list[str] | None = None,
            velocities: list[list[float]] | None = None) -> JointTrajectory:
    msg = JointTrajectory()
    msg.header.stamp = TimeMsg(sec=stamp_s, nanosec=123)
    msg.header.frame_id = "base"
    msg.joint_names = list(names if names is not None else JOINTS)
    for index, (q, t) in enumerate(zip(positions, times_s)):
        point = JointTrajectoryPoint()
        point.positions = q
        if velocities is not None:
            point.velocities = velocities[index]
        sec = int(t)
        point.time_from_start = DurationMsg(sec=sec, nanosec=int(round((t - sec) * 1e9)))
        msg.points.append(point)
    return msg


def near_home(delta: float = 0.1, joint: int = 0) -> list[float]:
    q = list(HOME)
    q[joint] += delta
    return q


@dataclass
class Harness:
    """The mirror plus a test node that talks to it over DDS."""

    mirror: CommandMirror
    node: Any
    executor: SingleThreadedExecutor
    sim: list[JointTrajectory] = field(default_factory=list)
    real: list[JointTrajectory] = field(default_factory=list)
    refusals: list[GapEvent] = field(default_factory=list)
    diagnostics: list[DiagnosticArray] = field(default_factory=list)

    def spin_until(self, done: Callable[[], bool], timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while not done() and time.monotonic() < deadline:
            self.executor.spin_once(timeout_sec=0.02)
        return done()

    def publish_home(self, q: list[float] | None = None) -> None:
        msg = JointState(name=JOINTS, position=list(q or HOME))
        self.state_pub.publish(msg)
        assert self.spin_until(lambda: self.mirror.measured_q_rad is not None)

    def send(self, msg: JointTrajectory) -> None:
        self.command_pub.publish(msg)

    def send_sentinel(self, stamp_s: int = 999) -> JointTrajectory:
        """Send a valid command and wait until it reaches the real side.

        Commands published before it on the same reliable topic are delivered before
        it, so once it arrived every earlier command has been processed.
        """
        sentinel = command([near_home(0.05)], [1.0], stamp_s=stamp_s)
        self.send(sentinel)
        assert self.spin_until(lambda: any(m == sentinel for m in self.real))
        return sentinel

    def latest_status(self) -> dict[str, str] | None:
        for array in reversed(self.diagnostics):
            for status in array.status:
                if status.name == STATUS_NAME:
                    return {kv.key: kv.value for kv in status.values} | {
                        "_level": int.from_bytes(status.level, "little"),
                        "_message": status.message,
                    }
        return None


@pytest.fixture
def make_harness():
    made: list[tuple[Any, ...]] = []

    def make(with_limits: bool = True, cli_args: list[str] | None = None,
             topics: dict[str, str] | None = None, **overrides: Any) -> Harness:
        topics = topics or DEFAULT_TOPICS
        context = rclpy.Context()
        rclpy.init(context=context)
        mirror = CommandMirror(
            context=context, parameter_overrides=params(with_limits, **overrides),
            cli_args=cli_args,
        )
        node = rclpy.create_node("mirror_test_driver", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(mirror)
        executor.add_node(node)
        harness = Harness(mirror, node, executor)
        node.create_subscription(JointTrajectory, topics["topics.sim_output"],
                                 harness.sim.append, COMMAND_QOS)
        node.create_subscription(JointTrajectory, topics["topics.real_output"],
                                 harness.real.append, COMMAND_QOS)
        node.create_subscription(GapEvent, "/bridge/refusals", harness.refusals.append,
                                 OUTPUT_QOS)
        node.create_subscription(DiagnosticArray, "/diagnostics", harness.diagnostics.append, 10)
        harness.command_pub = node.create_publisher(
            JointTrajectory, topics["topics.input"], COMMAND_QOS)
        harness.other_pub = node.create_publisher(
            JointTrajectory, "/bridge/other_trajectory", COMMAND_QOS)
        harness.state_pub = node.create_publisher(
            JointState, topics["topics.real_joint_states"], STREAM_PUB_QOS)
        harness.heartbeat_pub = node.create_publisher(Empty, "/command_mirror/heartbeat",
                                                      COMMAND_QOS)
        made.append((context, executor, mirror, node))
        assert harness.spin_until(
            lambda: harness.command_pub.get_subscription_count() > 0
            and harness.state_pub.get_subscription_count() > 0
            and harness.heartbeat_pub.get_subscription_count() > 0
            and mirror._real_pub.get_subscription_count() > 0
            and mirror._sim_pub.get_subscription_count() > 0
            and mirror._refusal_pub.get_subscription_count() > 0
        )
        return harness

    yield make
    for context, executor, mirror, node in made:
        executor.shutdown()
        mirror.destroy_node()
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_limits_yaml_matches_the_arm_model(repo_root) -> None:
    model = ET.parse(repo_root / "sim_real_bridge/sim/assets/arm.xml")
    ranges = {
        j.get("name"): [float(v) for v in j.get("range").split()]
        for j in model.iter("joint")
        if j.get("range")
    }
    config = yaml.safe_load((repo_root / "config/robot_limits.yaml").read_text())
    section = config["/**/command_mirror"]["ros__parameters"]
    assert section["joint_names"] == list(ranges)
    assert section["position_lower_rad"] == [r[0] for r in ranges.values()]
    assert section["position_upper_rad"] == [r[1] for r in ranges.values()]
    assert len(section["velocity_max_rad_s"]) == len(ranges)


def test_limits_yaml_loads_as_node_parameters(repo_root) -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        mirror = CommandMirror(
            context=context,
            cli_args=["--ros-args", "--params-file", str(repo_root / "config/robot_limits.yaml")],
        )
        assert mirror.get_parameter("joint_names").value == JOINTS
        assert mirror.get_parameter("position_upper_rad").value[1] == 1.8
        mirror.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_invalid_startup_limits_raise() -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        with pytest.raises(ConfigError, match="must be below"):
            CommandMirror(context=context, parameter_overrides=params(
                position_lower_rad=[3.0] * 7))
        with pytest.raises(ConfigError, match="diagnostics_period_s"):
            CommandMirror(context=context, parameter_overrides=params(diagnostics_period_s=0.0))
    finally:
        rclpy.shutdown(context=context)


def test_main_exits_with_status_2_on_invalid_parameters() -> None:
    from sim_real_bridge.nodes import command_mirror

    with pytest.raises(SystemExit, match="2"):
        command_mirror.main(["command_mirror", "--ros-args", "-p", "max_step_rad:=-1.0"])
    assert not rclpy.ok()


def test_without_limits_every_command_is_refused(make_harness) -> None:
    h = make_harness(with_limits=False, forward_refused_to_sim=True)
    h.publish_home()
    h.send(command([near_home(0.1)], [1.0], stamp_s=3))
    assert h.spin_until(lambda: h.refusals)
    assert h.refusals[0].kind == "command_refused:unknown_joint"
    assert h.real == [] and h.sim == []


def test_mirrors_identical_content_and_stamp(make_harness) -> None:
    h = make_harness()
    h.publish_home()
    sent = command([near_home(0.1), near_home(0.2)], [0.5, 1.0], stamp_s=42,
                   velocities=[[0.1] * 7, [0.0] * 7])
    h.send(sent)
    assert h.spin_until(lambda: h.sim and h.real)
    assert h.sim == [sent]
    assert h.real == [sent]
    assert h.real[0].header.stamp == TimeMsg(sec=42, nanosec=123)
    assert h.refusals == []


def bad_commands() -> dict[str, JointTrajectory]:
    """One command per limit, each otherwise valid, keyed by expected reason/case."""
    over = list(HOME)
    over[3] = 2.85  # joint4 upper limit is 2.8
    return {
        "position_limit": command([near_home(0.1), over], [1.0, 10.0], stamp_s=2),
        "velocity_declared": command([near_home(0.1)], [1.0], stamp_s=3,
                                     velocities=[[2.5] + [0.0] * 6]),
        "velocity_between_points": command([near_home(0.1), near_home(0.4)], [1.0, 1.1],
                                           stamp_s=4),
        "velocity_from_measured": command([near_home(0.3)], [0.1], stamp_s=5),
        "max_step": command([near_home(0.8)], [5.0], stamp_s=6),
        "unknown_joint": command([[0.0]], [1.0], stamp_s=7, names=["gripper"]),
        "malformed": command([[0.0, 0.0]], [1.0], stamp_s=8),
        "non_finite": command([near_home(float("nan"))], [1.0], stamp_s=9),
    }


EXPECTED_REASON = {
    "position_limit": safety.REASON_POSITION_LIMIT,
    "velocity_declared": safety.REASON_VELOCITY_LIMIT,
    "velocity_between_points": safety.REASON_VELOCITY_LIMIT,
    "velocity_from_measured": safety.REASON_VELOCITY_LIMIT,
    "max_step": safety.REASON_MAX_STEP,
    "unknown_joint": safety.REASON_UNKNOWN_JOINT,
    "malformed": safety.REASON_MALFORMED,
    "non_finite": safety.REASON_NON_FINITE,
}


def test_commands_breaking_each_limit_never_reach_the_real_robot(make_harness) -> None:
    h = make_harness(forward_refused_to_sim=True)
    h.publish_home()
    bad = bad_commands()
    for msg in bad.values():
        h.send(msg)
    sentinel = h.send_sentinel()
    assert h.real == [sentinel]
    # Well-formed refusals still reach the simulator; unusable ones do not.
    usable = [bad[k] for k in bad if EXPECTED_REASON[k] not in safety.STRUCTURAL_REASONS]
    assert h.sim == usable + [sentinel]
    assert h.spin_until(lambda: len(h.refusals) == len(bad))
    kinds = [event.kind for event in h.refusals]
    assert kinds == [f"command_refused:{EXPECTED_REASON[k]}" for k in bad]
    event = h.refusals[0]
    assert event.category == ""
    evidence = {kv.key: kv.value for kv in event.evidence}
    assert evidence["reason"] == "position_limit"
    assert "joint4" in evidence["detail"]
    assert evidence["topic"] == "/bridge/joint_trajectory"
    assert evidence["command_stamp_ns"] == str(2 * 10**9 + 123)
    assert evidence["forwarded_to_sim"] == "true"

    def counted() -> bool:
        status = h.latest_status()
        return status is not None and status["refused_total"] == str(len(bad))

    assert h.spin_until(counted)
    status = h.latest_status()
    assert status["refused.velocity_limit"] == "3"
    assert status["refused.position_limit"] == "1"
    assert status["refused.max_step"] == "1"
    assert status["refused.malformed"] == "1"
    assert status["forwarded_real"] == "1"


def test_refused_commands_skip_the_simulator_by_default(make_harness) -> None:
    h = make_harness()
    h.publish_home()
    h.send(bad_commands()["max_step"])
    sentinel = h.send_sentinel()
    assert h.sim == [sentinel]
    assert h.real == [sentinel]


def test_refuses_until_the_real_robot_reports_its_position(make_harness) -> None:
    h = make_harness()
    h.send(command([near_home(0.1)], [1.0], stamp_s=3))
    assert h.spin_until(lambda: h.refusals)
    assert h.refusals[0].kind == "command_refused:no_measured_state"
    h.publish_home()
    sentinel = h.send_sentinel()
    assert h.real == [sentinel]


def test_command_on_another_topic_is_not_forwarded(make_harness) -> None:
    h = make_harness()
    h.publish_home()
    stray = command([near_home(0.1)], [1.0], stamp_s=77)
    assert h.spin_until(lambda: h.other_pub.get_subscription_count() == 0, timeout_s=0.5)
    h.other_pub.publish(stray)
    sentinel = h.send_sentinel()
    assert h.real == [sentinel]
    assert h.sim == [sentinel]


def test_heartbeat_timeout_holds_at_last_measured_position(make_harness) -> None:
    h = make_harness(heartbeat_timeout_s=1.0, rearm_commands=0)
    measured = [0.11, 0.32, -0.05, 1.7, 0.02, 1.0, 0.3]
    h.publish_home(measured)
    ok = command([[q + 0.05 for q in measured]], [0.1], stamp_s=10)
    h.send(ok)
    assert h.spin_until(lambda: h.real == [ok])
    assert h.spin_until(lambda: len(h.real) == 2)
    hold = h.real[1]
    assert hold.joint_names == JOINTS
    assert len(hold.points) == 1
    assert list(hold.points[0].positions) == pytest.approx(measured)
    assert list(hold.points[0].velocities) == [0.0] * 7
    assert h.mirror.gate_state == safety.STATE_TRIPPED
    assert h.sim == [ok]  # the hold goes to the real robot only

    late = command([[q + 0.05 for q in measured]], [0.1], stamp_s=11)
    h.send(late)
    assert h.spin_until(lambda: h.refusals)
    assert h.refusals[0].kind == "command_refused:heartbeat_timeout"
    assert h.spin_until(lambda: (h.latest_status() or {}).get("_level") == 2)
    assert h.latest_status()["holds_sent"] == "1"

    h.heartbeat_pub.publish(Empty())
    assert h.spin_until(lambda: h.mirror.gate_state == safety.STATE_ARMED)
    again = command([[q + 0.05 for q in measured]], [0.1], stamp_s=12)
    h.send(again)
    assert h.spin_until(lambda: again in h.real)
    assert late not in h.real


def test_no_hold_when_disabled(make_harness) -> None:
    h = make_harness(heartbeat_timeout_s=0.3, hold_on_timeout=False)
    h.publish_home()
    ok = command([near_home(0.05)], [0.1], stamp_s=10)
    h.send(ok)
    assert h.spin_until(lambda: h.mirror.gate_state == safety.STATE_TRIPPED)
    h.heartbeat_pub.publish(Empty())
    assert h.spin_until(lambda: h.mirror.gate_state == safety.STATE_ARMED)
    # A hold would have left on the same writer before the sentinel.
    sentinel = h.send_sentinel()
    assert h.real == [ok, sentinel]


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("position_upper_rad", [3.5] * 7, "only be narrowed"),
        ("velocity_max_rad_s", [2.5] * 7, "only be narrowed"),
        ("position_lower_rad", [-2.9] * 6, "one value per joint"),
        ("max_step_rad", 0.9, "max_step_rad may not exceed"),
        ("max_step_rad", float("nan"), "max_step_rad must be a positive number"),
        ("heartbeat_timeout_s", 120.0, "heartbeat_timeout_s may not exceed"),
        ("heartbeat_timeout_s", -1.0, "heartbeat_timeout_s must be a positive number"),
        ("rearm_commands", 1, "rearm_commands must be 0"),
        ("hold_on_timeout", False, "cannot be switched off"),
        ("joint_names", [f"j{i}" for i in range(7)], "joint_names cannot change"),
        ("diagnostics_period_s", 5.0, "diagnostics_period_s cannot change"),
        ("topics.input", "/elsewhere/joint_trajectory", "topics.input cannot change"),
        ("topics.real_output", "/robot/command", "topics.real_output cannot change"),
        ("topics.real_joint_states", "/joint_states", "topics.real_joint_states cannot change"),
    ],
)
def test_unsafe_parameter_change_refused_with_reason(name, value, match) -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        mirror = CommandMirror(context=context, parameter_overrides=params())
        before = mirror.get_parameter(name).value
        [result] = mirror.set_parameters([Parameter(name, value=value)])
        assert not result.successful
        assert match in result.reason
        assert mirror.get_parameter(name).value == before
        mirror.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_safe_parameter_change_tightens_the_gate(make_harness) -> None:
    h = make_harness()
    [result] = h.mirror.set_parameters(
        [Parameter("position_upper_rad", value=[0.05] + LIMITS["position_upper_rad"][1:])]
    )
    assert result.successful, result.reason
    [result] = h.mirror.set_parameters([Parameter("forward_refused_to_sim", value=True)])
    assert result.successful
    h.publish_home()
    h.send(command([near_home(0.1)], [1.0], stamp_s=5))
    assert h.spin_until(lambda: h.refusals)
    assert h.refusals[0].kind == "command_refused:position_limit"
    assert h.spin_until(lambda: h.sim)
    assert h.real == []


def test_bad_joint_states_are_counted_not_fatal(make_harness) -> None:
    h = make_harness()
    h.state_pub.publish(JointState(name=JOINTS, position=[0.0] * 3))
    h.state_pub.publish(JointState(name=JOINTS, position=[float("nan")] * 7))

    def reported() -> bool:
        status = h.latest_status() or {}
        return (
            status.get("bad_input./real/joint_states.length_mismatch") == "1"
            and status.get("bad_input./real/joint_states.non_finite") == "1"
        )

    assert h.spin_until(reported)
    assert h.mirror.measured_q_rad is None
    h.publish_home()
    sentinel = h.send_sentinel()
    assert h.real == [sentinel]


# --- topic parameters ----------------------------------------------------------------


def test_default_topics_are_relative_and_follow_remapping() -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        mirror = CommandMirror(context=context, parameter_overrides=params())
        assert mirror.topics == DEFAULT_TOPICS
        assert mirror.get_parameter("topics.input").value == "bridge/joint_trajectory"
        mirror.destroy_node()
        remapped = CommandMirror(
            context=context,
            parameter_overrides=params(**{"topics.real_output": "robot/command"}),
            cli_args=["--ros-args", "-r", "robot/command:=/arm/joint_trajectory_controller/joint_trajectory",
                      "-r", "sim/joint_trajectory:=/twin/joint_trajectory"],
        )
        assert remapped.topics["topics.real_output"] == (
            "/arm/joint_trajectory_controller/joint_trajectory"
        )
        assert remapped.topics["topics.sim_output"] == "/twin/joint_trajectory"
        remapped.destroy_node()
    finally:
        rclpy.shutdown(context=context)


@pytest.mark.parametrize(
    ("topics", "match"),
    [
        ({"topics.input": "bad name"}, "topics.input is not a valid topic name"),
        ({"topics.sim_output": ""}, "topics.sim_output must be a non-empty topic name"),
        ({"topics.real_joint_states": "1joint_states"},
         "topics.real_joint_states is not a valid topic name"),
        ({"topics.real_output": "/sim/joint_trajectory"},
         "topics.sim_output and topics.real_output both resolve to /sim/joint_trajectory"),
        ({"topics.input": "real/joint_trajectory"},
         "topics.input and topics.real_output both resolve to /real/joint_trajectory"),
    ],
)
def test_invalid_topic_parameters_raise(topics, match) -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        with pytest.raises(ConfigError, match=match):
            CommandMirror(context=context, parameter_overrides=params(**topics))
    finally:
        rclpy.shutdown(context=context)


def test_main_exits_with_status_2_on_clashing_topics() -> None:
    from sim_real_bridge.nodes import command_mirror

    with pytest.raises(SystemExit, match="2"):
        command_mirror.main(["command_mirror", "--ros-args", "-p",
                             "topics.sim_output:=real/joint_trajectory"])


@pytest.mark.parametrize("stack", ["ros2_control_gz.yaml", "isaac_sim.yaml"])
def test_stack_params_file_routes_commands_over_dds(make_harness, repo_root, stack) -> None:
    stack_file = repo_root / "config" / "stacks" / stack
    mapping = yaml.safe_load(stack_file.read_text())["/**/command_mirror"]["ros__parameters"]
    assert mapping["topics.real_output"] != DEFAULT_TOPICS["topics.real_output"]
    h = make_harness(
        cli_args=["--ros-args", "--params-file", str(repo_root / "config/robot_limits.yaml"),
                  "--params-file", str(stack_file)],
        topics=mapping,
    )
    assert h.mirror.topics == mapping
    strays: list[JointTrajectory] = []
    for topic in ("/sim/joint_trajectory", "/real/joint_trajectory"):
        h.node.create_subscription(JointTrajectory, topic, strays.append, COMMAND_QOS)
    h.publish_home()
    sent = command([near_home(0.1)], [1.0], stamp_s=21)
    h.send(sent)
    assert h.spin_until(lambda: h.sim and h.real)
    assert h.sim == [sent] and h.real == [sent]
    h.send(bad_commands()["max_step"])
    assert h.spin_until(lambda: h.refusals)
    evidence = {kv.key: kv.value for kv in h.refusals[0].evidence}
    assert evidence["topic"] == mapping["topics.input"]
    h.send_sentinel()
    assert strays == []
    # Nothing is published on the default names at all (same process: graph is immediate).
    assert h.node.count_publishers(mapping["topics.real_output"]) == 1
    assert h.node.count_publishers("/real/joint_trajectory") == 0
    assert h.node.count_publishers("/sim/joint_trajectory") == 0
    assert h.spin_until(lambda: (h.latest_status() or {}).get("real_output_topic")
                        == mapping["topics.real_output"])
