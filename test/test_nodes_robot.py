"""The robot nodes over real rclpy, in-process: sim_robot, reality_standin, task_player."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import rclpy
import yaml
from geometry_msgs.msg import PoseStamped, WrenchStamped
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from sim_real_bridge.conversions import robot_msgs
from sim_real_bridge.errors import ConfigError, ScenarioError
from sim_real_bridge.msg import InjectionArray
from sim_real_bridge.nodes.reality_standin import RealityStandinNode
from sim_real_bridge.nodes.sim_robot import SimRobotNode
from sim_real_bridge.nodes.task_player import TaskPlayerNode
from sim_real_bridge.ros.qos import COMMAND_QOS, LATCHED_QOS, SENSOR_QOS
from sim_real_bridge.sim.physics import ARM_JOINT_NAMES, ArmPhysics
from sim_real_bridge.sim.robots import ROBOTS

pytestmark = [pytest.mark.ros, pytest.mark.mujoco]

#: Upper bound on waiting for a condition; generous because the machine is shared.
WAIT_S = 30.0


@pytest.fixture()
def ros():
    context = rclpy.Context()
    rclpy.init(context=context)
    executor = SingleThreadedExecutor(context=context)
    nodes = []

    class Ros:
        def add(self, node):
            nodes.append(node)
            executor.add_node(node)
            return node

        def helper(self, name: str):
            return self.add(rclpy.create_node(name, context=context))

        def spin_until(self, condition: Callable[[], bool], what: str) -> None:
            clock = rclpy.clock.Clock(clock_type=rclpy.clock.ClockType.STEADY_TIME)
            deadline = clock.now().nanoseconds + int(WAIT_S * 1e9)
            while not condition():
                if clock.now().nanoseconds > deadline:
                    raise AssertionError(f"timed out waiting for {what}")
                executor.spin_once(timeout_sec=0.01)

        def spin_some(self, count: int) -> None:
            for _ in range(count):
                executor.spin_once(timeout_sec=0.01)

    ros = Ros()
    ros.context = context
    yield ros
    for node in nodes:
        executor.remove_node(node)
        node.destroy_node()
    executor.shutdown()
    rclpy.try_shutdown(context=context)


def collect(helper, msg_type, topic, qos=SENSOR_QOS) -> list:
    received: list = []
    helper.create_subscription(msg_type, topic, received.append, qos)
    return received


def trajectory_msg(target: np.ndarray, seconds: int = 1) -> JointTrajectory:
    msg = JointTrajectory()
    msg.joint_names = list(ARM_JOINT_NAMES)
    point = JointTrajectoryPoint()
    point.positions = [float(v) for v in target]
    point.time_from_start.sec = seconds
    msg.points = [point]
    return msg


def test_sim_robot_follows_a_trajectory_and_publishes_streams(ros):
    node = ros.add(SimRobotNode(namespace="/sim", context=ros.context))
    helper = ros.helper("probe")
    joints = collect(helper, JointState, "/sim/joint_states")
    wrenches = collect(helper, WrenchStamped, "/sim/wrench")
    ee = collect(helper, PoseStamped, "/sim/ee_pose")
    objects = collect(helper, PoseStamped, "/sim/object_pose")
    rtf = collect(helper, Float64, "/sim/sim_robot/realtime_factor", 10)
    command = helper.create_publisher(JointTrajectory, "/sim/sim_robot/joint_trajectory", COMMAND_QOS)
    ros.spin_until(lambda: len(joints) > 20 and wrenches and ee and objects and command.get_subscription_count(),
                   "streams")

    assert list(joints[-1].name) == list(ARM_JOINT_NAMES)
    assert wrenches[-1].header.frame_id == "ft_sensor"
    assert ee[-1].header.frame_id == "world" and objects[-1].header.frame_id == "world"
    # Stamps come from physics time: whole 500 Hz periods apart (a best-effort subscriber on
    # a loaded machine may miss some messages, never see a stamp off the period).
    stamps = np.array([robot_msgs.stamp_to_ns(m.header.stamp) for m in joints[-20:]])
    gaps = np.diff(stamps)
    assert np.all(gaps > 0) and np.all(gaps % 2_000_000 == 0), gaps
    assert np.median(gaps) == 2_000_000

    target = ArmPhysics().home_q_rad + 0.2
    command.publish(trajectory_msg(target))

    def reached() -> bool:
        return bool(joints) and np.allclose(joints[-1].position, target, atol=0.01)

    ros.spin_until(reached, "the arm to reach the target")
    assert node.robot.first_command_ns is not None
    ros.spin_until(lambda: rtf, "a real-time factor")
    assert np.isfinite(rtf[-1].data) and rtf[-1].data > 0


def test_bad_trajectories_are_counted_not_fatal(ros):
    node = ros.add(SimRobotNode(namespace="/sim", context=ros.context))
    helper = ros.helper("probe")
    joints = collect(helper, JointState, "/sim/joint_states")
    command = helper.create_publisher(JointTrajectory, "/sim/sim_robot/joint_trajectory", COMMAND_QOS)
    ros.spin_until(lambda: command.get_subscription_count() and joints, "the node")
    bad = trajectory_msg(np.zeros(7))
    bad.joint_names = ["a", "b"]
    command.publish(bad)
    ros.spin_until(lambda: node.input_problems.count("bad_trajectory") == 1, "the refusal to be counted")
    count = len(joints)
    ros.spin_until(lambda: len(joints) > count + 10, "publishing to go on")
    assert node.robot.first_command_ns is None


def test_standin_labels_injections_and_drops_only_the_named_stream(ros, tmp_path: Path):
    scenario = {
        "name": "node_dropout",
        "seed": 1,
        "duration_s": 30,
        "task": "reach",
        "injections": [{"category": "sensor", "kind": "dropout", "start_s": 0, "end_s": 30, "params": {"stream": "wrench"}}],
    }
    path = tmp_path / "node_dropout.yaml"
    path.write_text(yaml.safe_dump(scenario))
    node = ros.add(
        RealityStandinNode(
            namespace="/real",
            context=ros.context,
            parameter_overrides=[Parameter("scenario", value=str(path))],
        )
    )
    helper = ros.helper("probe")
    labels = collect(helper, InjectionArray, "/reality/injections", LATCHED_QOS)
    joints = collect(helper, JointState, "/real/joint_states")
    wrenches = collect(helper, WrenchStamped, "/real/wrench")
    command = helper.create_publisher(JointTrajectory, "/real/reality_standin/joint_trajectory", COMMAND_QOS)
    ros.spin_until(lambda: labels and wrenches and command.get_subscription_count(), "labels and wrench")
    assert labels[-1].scenario == "node_dropout"
    assert labels[-1].elapsed_s < 0 and not labels[-1].injections[0].active

    command.publish(trajectory_msg(ArmPhysics().home_q_rad))
    ros.spin_until(lambda: labels[-1].elapsed_s >= 0 and labels[-1].injections[0].active, "the injection to start")
    label = labels[-1].injections[0]
    assert (label.category, label.kind, label.start_s, label.end_s) == ("sensor", "dropout", 0.0, 30.0)
    assert {kv.key: kv.value for kv in label.params}["stream"] == "wrench"

    first_ns = node.robot.first_command_ns
    joint_count = len(joints)
    ros.spin_until(lambda: len(joints) > joint_count + 200, "joint states to keep coming")
    # Wrench samples stamped after the first command never arrive; joint states do.
    t0 = node.physics_to_ros_ns(first_ns)
    late = [m for m in wrenches if robot_msgs.stamp_to_ns(m.header.stamp) > t0 + 2_000_000]
    assert late == []
    assert robot_msgs.stamp_to_ns(joints[-1].header.stamp) > t0 + 150 * 2_000_000
    assert node.robot.reality.samples_dropped["wrench"] > 100


def test_sim_time_clock_source_publishes_clock(ros):
    node = ros.add(
        SimRobotNode(
            namespace="/sim",
            context=ros.context,
            parameter_overrides=[Parameter("use_sim_time", value=True), Parameter("sim_speed", value=0.0)],
        )
    )
    helper = ros.helper("probe")
    clocks = collect(helper, Clock, "/clock", 10)
    joints = collect(helper, JointState, "/sim/joint_states")
    ros.spin_until(lambda: len(clocks) > 20 and joints, "/clock")
    values = [robot_msgs.stamp_to_ns(c.clock) for c in clocks]
    assert values == sorted(values) and values[-1] > values[0]
    # In sim time the stamps are physics time itself: multiples of the 2 ms period.
    assert all(robot_msgs.stamp_to_ns(m.header.stamp) % 2_000_000 == 0 for m in joints)
    assert node.robot.time_ns >= values[-1]


def test_task_player_start_lead_zero_means_start_on_receipt(ros):
    ros.add(
        TaskPlayerNode(
            context=ros.context,
            parameter_overrides=[
                Parameter("task", value="reach"), Parameter("duration_s", value=5.0),
                Parameter("start_delay_s", value=0.0), Parameter("wait_for_nodes", value=["probe"]),
                Parameter("start_lead_s", value=0.0),
            ],
        )
    )
    helper = ros.helper("probe")
    received = collect(helper, JointTrajectory, "/bridge/joint_trajectory", COMMAND_QOS)
    ros.spin_until(lambda: received, "the first cycle")
    assert robot_msgs.stamp_to_ns(received[0].header.stamp) == 0


def test_task_player_sends_the_program(ros):
    player = ros.add(
        TaskPlayerNode(
            context=ros.context,
            parameter_overrides=[
                Parameter("scenario", value="nominal"),
                Parameter("task", value="wipe"),
                Parameter("duration_s", value=5.0),
                Parameter("start_delay_s", value=0.0),
                Parameter("wait_for_nodes", value=["probe"]),
            ],
        )
    )
    helper = ros.helper("probe")
    received = collect(helper, JointTrajectory, "/bridge/joint_trajectory", COMMAND_QOS)
    ros.spin_until(lambda: received, "the first cycle")
    now_ns = player.get_clock().now().nanoseconds
    msg = received[0]
    assert list(msg.joint_names) == list(ARM_JOINT_NAMES)
    # Stamped at its scheduled time plus the 0.1 s start lead: in the future when sent.
    stamp_ns = robot_msgs.stamp_to_ns(msg.header.stamp)
    assert now_ns - 1_000_000_000 < stamp_ns - 100_000_000 <= now_ns
    data = robot_msgs.joint_trajectory_to_data(msg)
    assert data.points[0].velocities is not None
    assert data.duration_ns == player.program.segments[0][1].duration_ns
    assert player.finished


def test_task_player_waits_for_the_mirror(ros):
    player = ros.add(TaskPlayerNode(context=ros.context, parameter_overrides=[Parameter("start_delay_s", value=0.0)]))
    helper = ros.helper("probe")  # subscribes, but is not the command mirror
    received = collect(helper, JointTrajectory, "/bridge/joint_trajectory", COMMAND_QOS)
    ros.spin_until(lambda: player.count_subscribers("/bridge/joint_trajectory") > 0, "the probe to match")
    ros.spin_some(300)  # well past start_delay_s = 0: the player's 5 ms timer ran many times
    assert received == [] and player.sent == 0


def test_task_player_waits_for_both_robots_command_inputs(ros):
    player = ros.add(TaskPlayerNode(context=ros.context, parameter_overrides=[
        Parameter("start_delay_s", value=0.0), Parameter("wait_for_nodes", value=["probe"]),
        Parameter("wait_for_topics", value=["/sim/joint_trajectory", "/real/joint_trajectory"]),
    ]))
    helper = ros.helper("probe")
    received = collect(helper, JointTrajectory, "/bridge/joint_trajectory", COMMAND_QOS)
    collect(helper, JointTrajectory, "/sim/joint_trajectory", COMMAND_QOS)  # only the sim robot is up
    ros.spin_until(lambda: player.count_subscribers("/sim/joint_trajectory") > 0, "the sim input to match")
    ros.spin_some(300)
    assert received == [] and player.sent == 0, "started while the real robot could miss the first command"
    collect(helper, JointTrajectory, "/real/joint_trajectory", COMMAND_QOS)
    ros.spin_until(lambda: received, "the first cycle once both robots listen")


def test_task_player_waits_for_each_named_node(ros):
    """The monitor's run clock starts at the first command it hears: the player waits for it too."""
    player = ros.add(TaskPlayerNode(context=ros.context, parameter_overrides=[
        Parameter("start_delay_s", value=0.0), Parameter("wait_for_nodes", value=["probe", "late_monitor"]),
        Parameter("wait_for_topics", value=["/sim/joint_trajectory"]),
    ]))
    probe = ros.helper("probe")
    received = collect(probe, JointTrajectory, "/bridge/joint_trajectory", COMMAND_QOS)
    collect(probe, JointTrajectory, "/sim/joint_trajectory", COMMAND_QOS)
    ros.spin_until(lambda: player.count_subscribers("/sim/joint_trajectory") > 0, "the sim input to match")
    ros.spin_some(300)
    assert received == [] and player.sent == 0, "started before late_monitor listened"
    collect(ros.helper("late_monitor"), JointTrajectory, "/sim/joint_trajectory", COMMAND_QOS)
    ros.spin_until(lambda: received, "the first cycle once every named node listens")


def test_nominal_standin_agrees_with_the_simulator_over_ros(ros):
    """Tolerance: same commands, nominal scenario: final joint positions agree to 1e-3 rad."""
    sim = ros.add(SimRobotNode(namespace="/sim", context=ros.context))
    real = ros.add(
        RealityStandinNode(
            namespace="/real", context=ros.context, parameter_overrides=[Parameter("scenario", value="nominal")]
        )
    )
    helper = ros.helper("probe")
    sim_joints = collect(helper, JointState, "/sim/joint_states")
    real_joints = collect(helper, JointState, "/real/joint_states")
    to_sim = helper.create_publisher(JointTrajectory, "/sim/sim_robot/joint_trajectory", COMMAND_QOS)
    to_real = helper.create_publisher(JointTrajectory, "/real/reality_standin/joint_trajectory", COMMAND_QOS)
    ros.spin_until(
        lambda: sim_joints and real_joints and to_sim.get_subscription_count() and to_real.get_subscription_count(),
        "both robots",
    )
    target = ArmPhysics().home_q_rad + np.array([0.3, -0.2, 0.2, -0.3, 0.2, 0.2, 0.3])
    command = trajectory_msg(target)
    to_sim.publish(command)
    to_real.publish(command)

    def settled() -> bool:
        return all(
            j and np.allclose(j[-1].position, target, atol=2e-3) and np.allclose(j[-1].velocity, 0.0, atol=1e-3)
            for j in (sim_joints, real_joints)
        )

    ros.spin_until(settled, "both arms to settle at the target")
    np.testing.assert_allclose(real_joints[-1].position, sim_joints[-1].position, atol=1e-3)
    assert real.robot.reality.active_injections(real.robot.elapsed_ns) == []
    assert sim.robot.first_command_ns is not None


def test_standin_follows_the_simulators_clock(ros):
    clock_source = ros.add(
        SimRobotNode(namespace="/sim", context=ros.context, parameter_overrides=[Parameter("use_sim_time", value=True)])
    )
    follower = ros.add(
        RealityStandinNode(
            namespace="/real", context=ros.context, parameter_overrides=[Parameter("use_sim_time", value=True)]
        )
    )
    helper = ros.helper("probe")
    real_joints = collect(helper, JointState, "/real/joint_states")
    ros.spin_until(lambda: len(real_joints) > 50, "the stand-in on sim time")
    # Both run on the simulator's timeline: the stand-in's stamps are sim time, which
    # started at 0, not wall-clock time.
    last = robot_msgs.stamp_to_ns(real_joints[-1].header.stamp)
    assert 0 < last <= clock_source.ros_now_ns() + 50_000_000
    assert follower.robot.time_ns > 0


@pytest.mark.parametrize(
    ("factory", "overrides", "error", "match"),
    [
        (SimRobotNode, [Parameter("tick_period_s", value=0.0)], ConfigError, "tick_period_s must be > 0"),
        (SimRobotNode, [Parameter("joint_states_rate_hz", value=300.0)], ConfigError, "must divide the physics rate"),
        (
            SimRobotNode,
            [Parameter("use_sim_time", value=True), Parameter("sim_speed", value=-1.0)],
            ConfigError,
            "sim_speed must be >= 0",
        ),
        (RealityStandinNode, [Parameter("scenario", value="no_such")], ScenarioError, "no such built-in scenario"),
        (TaskPlayerNode, [Parameter("task", value="dance")], ConfigError, "task must be one of reach, wipe, push, tour"),
    ],
)
def test_bad_parameters_are_refused_at_startup(ros, factory, overrides, error, match):
    with pytest.raises(error, match=match):
        factory(context=ros.context, parameter_overrides=overrides)


# ------------------------------------------------- conversions (real message classes)
def test_robot_message_round_trips():
    stamp = 1_700_000_000_123_456_789
    names = list(ARM_JOINT_NAMES)
    q, qd, tau = np.arange(7.0), -np.arange(7.0), np.full(7, 0.5)
    msg = robot_msgs.joint_state_from_arrays(JointState, stamp, names, q, qd, tau, frame_id="base")
    got = robot_msgs.joint_state_to_arrays(msg)
    assert got[0] == stamp and got[1] == tuple(names) and msg.header.frame_id == "base"
    for a, b in zip(got[2:], (q, qd, tau)):
        np.testing.assert_array_equal(a, b)
    bare = robot_msgs.joint_state_from_arrays(JointState, stamp, names, q)
    assert np.isnan(robot_msgs.joint_state_to_arrays(bare)[3]).all()

    force, torque = np.array([1.0, -2.0, 3.0]), np.array([0.1, 0.2, -0.3])
    wrench = robot_msgs.wrench_from_arrays(WrenchStamped, stamp, "ft_sensor", force, torque)
    w_stamp, frame, f, t = robot_msgs.wrench_to_arrays(wrench)
    assert (w_stamp, frame) == (stamp, "ft_sensor")
    np.testing.assert_array_equal(f, force)
    np.testing.assert_array_equal(t, torque)

    quat = np.array([0.5, 0.5, -0.5, 0.5])
    pose = robot_msgs.pose_from_arrays(PoseStamped, stamp, "world", np.array([1.0, 2.0, 3.0]), quat)
    assert pose.pose.orientation.w == 0.5 and pose.pose.orientation.z == 0.5
    p_stamp, frame, pos, q_out = robot_msgs.pose_to_arrays(pose)
    assert (p_stamp, frame) == (stamp, "world")
    np.testing.assert_array_equal(pos, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(q_out, quat)


@pytest.mark.parametrize("with_velocities", [True, False])
def test_trajectory_round_trip(with_velocities):
    from sim_real_bridge.sim.trajectory import JointTrajectoryData, TrajectoryPoint

    points = tuple(
        TrajectoryPoint(int(k * 1.5e9), np.full(7, 0.1 * k), np.full(7, 0.2) if with_velocities else None)
        for k in range(1, 4)
    )
    data = JointTrajectoryData(ARM_JOINT_NAMES, points, start_ns=2_500_000_001)
    msg = robot_msgs.joint_trajectory_from_data(JointTrajectory, JointTrajectoryPoint, data)
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (2, 500_000_001)
    assert (msg.points[0].time_from_start.sec, msg.points[0].time_from_start.nanosec) == (1, 500_000_000)
    back = robot_msgs.joint_trajectory_to_data(msg)
    assert back.joint_names == ARM_JOINT_NAMES and back.start_ns == data.start_ns
    for a, b in zip(back.points, points):
        assert a.time_from_start_ns == b.time_from_start_ns
        np.testing.assert_array_equal(a.positions, b.positions)
        if with_velocities:
            np.testing.assert_array_equal(a.velocities, b.velocities)
        else:
            assert a.velocities is None
    zero = robot_msgs.joint_trajectory_from_data(JointTrajectory, JointTrajectoryPoint, data, stamp_ns=0)
    assert robot_msgs.stamp_to_ns(zero.header.stamp) == 0


def test_standin_runs_the_scenarios_robot_and_publishes_only_what_its_sensors_measure(ros, tmp_path: Path):
    path = tmp_path / "ur_no_ft.yaml"
    path.write_text(yaml.safe_dump({"name": "ur_no_ft", "seed": 2, "duration_s": 10, "task": "reach", "robot": "ur6",
                                    "sensors": {"wrench": False, "encoder_resolution_rad": 0.001},
                                    "injections": []}))
    node = ros.add(RealityStandinNode(namespace="/real", context=ros.context,
                                      parameter_overrides=[Parameter("scenario", value=str(path))]))
    sim = ros.add(SimRobotNode(namespace="/sim", context=ros.context,
                               parameter_overrides=[Parameter("scenario", value=str(path))]))
    helper = ros.helper("probe")
    joints = collect(helper, JointState, "/real/joint_states")
    sim_wrench = collect(helper, WrenchStamped, "/sim/wrench")
    ros.spin_until(lambda: joints and sim_wrench, "joint states of the stand-in, wrench of the simulator")
    assert list(joints[-1].name) == list(ROBOTS["ur6"].joint_names)
    assert node.robot.physics.robot_name == sim.robot.physics.robot_name == "ur6"
    q = np.asarray(joints[-1].position)
    np.testing.assert_allclose(q / 0.001, np.round(q / 0.001), atol=1e-9)
    assert helper.count_publishers("/real/wrench") == 0 and helper.count_publishers("/sim/wrench") == 1


def test_robot_parameter_overrides_the_scenarios_robot(ros):
    node = ros.add(SimRobotNode(namespace="/sim", context=ros.context,
                                parameter_overrides=[Parameter("robot", value="panda7")]))
    assert node.robot.physics.joint_names == ROBOTS["panda7"].joint_names
    player = ros.add(TaskPlayerNode(context=ros.context, parameter_overrides=[
        Parameter("robot", value="panda7"), Parameter("task", value="reach")]))
    assert player.program.segments[0][1].joint_names == ROBOTS["panda7"].joint_names
    with pytest.raises(ConfigError, match=r"nominal\.yaml: robot \(override\): must be one of arm7, ur6, panda7, got 'kuka'"):
        SimRobotNode(context=ros.context, parameter_overrides=[Parameter("robot", value="kuka")])
