"""Issue 20: a task player running late sends nothing the command mirror's limits refuse.

The player runs over real rclpy on sim time; a /clock that advances in jumps of 20-450 ms
stands in for a loaded machine: the player's 5 ms timer only runs at each jump, up to
0.45 s late (more than its 0.1 s start lead). Every command it sends is then checked
against the robot's limits in config/ the way the mirror checks it (the safety gate,
from the position the robot's trajectory controller is at), and the controller's
target path through every command is checked for positions and speeds within them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rclpy
import yaml
from rclpy.clock import Clock as RosClock
from rclpy.clock import ClockType
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock
from trajectory_msgs.msg import JointTrajectory

from sim_real_bridge.conversions import robot_msgs
from sim_real_bridge.commands.safety import GateConfig, JointLimits, SafetyGate
from sim_real_bridge.nodes.command_mirror import trajectory_points
from sim_real_bridge.nodes.task_player import TaskPlayerNode
from sim_real_bridge.ros.qos import COMMAND_QOS
from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.robots import robot_spec
from sim_real_bridge.sim.trajectory import TrajectoryFollower

pytestmark = [pytest.mark.ros, pytest.mark.mujoco]

WAIT_S = 60.0


def _limits(repo_root: Path, robot: str) -> tuple[JointLimits, GateConfig]:
    path = repo_root / "config" / robot_spec(robot).limits_file
    p = yaml.safe_load(path.read_text())["/**/command_mirror"]["ros__parameters"]
    limits = JointLimits(p["joint_names"], p["position_lower_rad"], p["position_upper_rad"], p["velocity_max_rad_s"])
    return limits, GateConfig(p["max_step_rad"], p["heartbeat_timeout_s"], p["rearm_commands"])


def _play_late(tmp_path: Path, robot: str) -> tuple[TaskPlayerNode, list[tuple[int, JointTrajectory]]]:
    """Run the player on a jumping /clock; return it and (its clock at send, message) per command."""
    scenario = tmp_path / f"late_{robot}.yaml"
    scenario.write_text(yaml.safe_dump({"name": "late", "seed": 1, "duration_s": 12.0, "task": "tour", "robot": robot,
                                        "idle": [{"start_s": 8.0, "end_s": 10.0}], "injections": []}))
    context = rclpy.Context()
    rclpy.init(context=context)
    executor = SingleThreadedExecutor(context=context)
    player = TaskPlayerNode(context=context, parameter_overrides=[
        Parameter("scenario", value=str(scenario)), Parameter("use_sim_time", value=True),
        Parameter("start_delay_s", value=0.0), Parameter("wait_for_nodes", value=["probe"]),
    ])
    probe = rclpy.create_node("probe", context=context)
    probe.create_subscription(JointTrajectory, "/bridge/joint_trajectory", lambda msg: None, COMMAND_QOS)
    clock_pub = probe.create_publisher(Clock, "/clock", 10)
    rng = np.random.default_rng(20)
    now = {"ns": 1_000_000_000}

    def jump() -> None:
        now["ns"] += int(rng.integers(20, 450)) * 1_000_000
        msg = Clock()
        robot_msgs.set_stamp(msg.clock, now["ns"])
        clock_pub.publish(msg)

    steady = RosClock(clock_type=ClockType.STEADY_TIME)
    probe.create_timer(0.01, jump, clock=steady)
    sent: list[tuple[int, JointTrajectory]] = []
    publish = player._publisher.publish
    player._publisher.publish = lambda msg: (sent.append((player.get_clock().now().nanoseconds, msg)), publish(msg))
    for node in (player, probe):
        executor.add_node(node)
    deadline = steady.now().nanoseconds + int(WAIT_S * 1e9)
    try:
        while not player.finished:
            assert steady.now().nanoseconds < deadline, "the program was not sent in time"
            executor.spin_once(timeout_sec=0.01)
    finally:
        executor.shutdown()
        player.destroy_node()
        probe.destroy_node()
        rclpy.try_shutdown(context=context)
    return player, sent


@pytest.mark.parametrize("robot", ["arm7", "ur6", "panda7"])
def test_a_late_task_player_sends_nothing_that_breaks_the_mirror_limits(repo_root, tmp_path, robot):
    player, sent = _play_late(tmp_path, robot)
    limits, config = _limits(repo_root, robot)
    gate = SafetyGate(limits, config)
    names = list(robot_spec(robot).joint_names)
    vmax = np.array([limits[n].velocity_max_rad_s for n in names])
    lower = np.array([limits[n].lower_rad for n in names])
    upper = np.array([limits[n].upper_rad for n in names])
    follower = TrajectoryFollower(names, ArmPhysics(robot=robot).home_q_rad)
    assert [p.name for p in player.program.phases] == ["reach", "idle", "wipe"]
    assert len(sent) == 3 and player.slip_s > 0.1, "the clock made the player late"
    ends = [t for t, _ in sent[1:]] + [sent[-1][0] + 12_000_000_000]
    for (send_ns, msg), until_ns in zip(sent, ends):
        data = robot_msgs.joint_trajectory_to_data(msg)
        assert list(data.joint_names) == names
        assert data.start_ns >= send_ns + 100_000_000, "a start stamp in the past makes the robot jump"
        measured = dict(zip(names, follower.sample(send_ns)[0].tolist()))
        decision = gate.check(names, trajectory_points(msg), measured, send_ns)
        assert decision.accepted, f"{decision.reason}: {decision.detail}"
        follower.set_goal(data, send_ns)
        # The controller's target from this command to the next: within the limits everywhere.
        times = np.arange(send_ns, until_ns, 1_000_000, dtype=np.int64)
        q, _ = follower.sample_many(times)
        speed = np.abs(np.diff(q, axis=0)) / 1e-3
        assert np.all(speed <= vmax * (1 + 1e-6)), f"implied {speed.max():.2f} rad/s"
        assert np.all(q >= lower) and np.all(q <= upper)
