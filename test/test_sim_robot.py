"""SimulatedRobot: output streams at their rates, configuration errors, StreamLog."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.errors import ConfigError, TrajectoryError
from sim_real_bridge.sim.robot import DEFAULT_RATES_HZ, SimulatedRobot, StreamLog, run_headless
from sim_real_bridge.sim.tasks import build_program
from sim_real_bridge.sim.trajectory import JointTrajectoryData, TrajectoryPoint

pytestmark = pytest.mark.mujoco


def test_streams_come_at_their_rates_stamped_on_the_step():
    robot = SimulatedRobot(rates_hz={"ee_pose": 50.0, "object_pose": 0.0})
    log = StreamLog.from_samples(robot.advance(100_000_000))
    assert len(log.stamps_ns["joint_states"]) == 50
    assert len(log.stamps_ns["wrench"]) == 50
    assert len(log.stamps_ns["ee_pose"]) == 5
    assert "object_pose" not in log.stamps_ns
    np.testing.assert_array_equal(np.diff(log.stamps_ns["joint_states"]), 2_000_000)
    assert log.field("joint_states", "position").shape == (50, 7)
    assert log.field("wrench", "torque").shape == (50, 3)
    assert log.field("ee_pose", "orientation").shape == (5, 4)
    assert log.field("object_pose", "position").shape == (0, 0)
    assert log.window("object_pose", "position", 0, 10).shape == (0, 0)
    assert robot.rates_hz["joint_states"] == DEFAULT_RATES_HZ["joint_states"]


def test_first_command_starts_scenario_time():
    robot = SimulatedRobot()
    robot.advance(30_000_000)
    assert robot.elapsed_ns is None
    program = build_program("reach", 1.0)
    robot.command(program.segments[0][1])
    assert robot.first_command_ns == 30_000_000
    robot.advance(50_000_000)
    assert robot.elapsed_ns == 20_000_000


def test_delayed_start_stamp():
    robot = SimulatedRobot()
    home = robot.physics.home_q_rad
    goal = JointTrajectoryData(robot.physics.joint_names, (TrajectoryPoint(100_000_000, home + 0.1),))
    robot.command(goal, start_ns=500_000_000)
    robot.advance(400_000_000)
    np.testing.assert_allclose(robot.physics.position_targets, home)
    robot.advance(700_000_000)
    np.testing.assert_allclose(robot.physics.position_targets, home + 0.1)


def test_run_headless_sends_segments_at_their_offsets():
    program = build_program("tour", 8.0)
    robot = SimulatedRobot()
    run_headless(robot, program, 8.0)
    assert robot.follower.goals_accepted == 2  # reach at 0 s, wipe at 7.5 s
    assert robot.first_command_ns == 0


def test_bad_command_is_refused():
    robot = SimulatedRobot()
    with pytest.raises(TrajectoryError, match="do not match the controlled joints"):
        robot.command(JointTrajectoryData(("a",), (TrajectoryPoint(1, np.zeros(1)),)))
    assert robot.first_command_ns is None


@pytest.mark.parametrize(
    ("rates", "match"),
    [
        ({"imu": 100.0}, r"unknown stream\(s\) \['imu'\]"),
        ({"wrench": -1.0}, "rate of wrench must be >= 0 Hz, got -1.0"),
        ({"joint_states": 300.0}, r"rate of joint_states \(300.0 Hz\) must divide the physics rate 1000 Hz"),
        ({"joint_states": 2000.0}, r"rate of joint_states \(2000.0 Hz\) must divide the physics rate 1000 Hz"),
    ],
)
def test_bad_rates(rates, match):
    with pytest.raises(ConfigError, match=match):
        SimulatedRobot(rates_hz=rates)
