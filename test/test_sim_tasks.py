"""Built-in command programs: IK, cycles from and to home, and the contact each one makes."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.robot import SimulatedRobot
from sim_real_bridge.sim.tasks import build_cycle, build_program, solve_ik

pytestmark = pytest.mark.mujoco


def test_ik_reaches_target_pointing_down():
    physics = ArmPhysics()
    target = np.array([0.5, -0.1, 0.55])
    q = solve_ik(physics, target)
    physics.set_joint_state(q)
    np.testing.assert_allclose(physics.ee_pose()[0], target, atol=1e-3)
    assert physics.ee_rotation()[:, 2] @ np.array([0.0, 0.0, -1.0]) > 0.999


def test_ik_refuses_unreachable_target():
    with pytest.raises(ConfigError, match=r"inverse kinematics failed for target \[3.0, 0.0, 0.5\]"):
        solve_ik(ArmPhysics(), np.array([3.0, 0.0, 0.5]))


@pytest.mark.parametrize("kind", ["reach", "wipe", "push"])
def test_cycles_start_and_end_at_home(kind):
    cycle = build_cycle(kind)
    home = ArmPhysics().home_q_rad
    assert cycle.joint_names == tuple(f"joint{i}" for i in range(1, 8))
    np.testing.assert_allclose(cycle.points[-1].positions, home, atol=1e-3)
    times = [p.time_from_start_ns for p in cycle.points]
    assert times == sorted(times) and times[0] > 0
    assert all(p.velocities is not None for p in cycle.points)
    steps = np.abs(np.diff([p.positions for p in cycle.points], axis=0))
    assert steps.max() < 0.1  # smooth: under 2 rad/s at 50 ms spacing


def test_program_covers_duration_and_tour_order():
    program = build_program("tour", 40.0)
    assert [p.name for p in program.phases][:4] == ["reach", "wipe", "push", "reach"]
    assert program.duration_ns >= 40e9
    assert program.phase_at(1.0) == "reach"
    assert program.phase_at(-1.0) == "idle"
    offsets = [offset for offset, _ in program.segments]
    assert offsets[0] == 0 and offsets == sorted(offsets)


def test_program_errors():
    with pytest.raises(ConfigError, match="unknown task 'dance'"):
        build_program("dance", 10)
    with pytest.raises(ConfigError, match="task duration must be positive, got 0"):
        build_program("reach", 0)
    with pytest.raises(ConfigError, match="unknown cycle 'tour'"):
        build_cycle("tour")


def _contacts_during(kind: str, geom: str) -> tuple[int, np.ndarray, np.ndarray]:
    robot = SimulatedRobot()
    robot.command(build_cycle(kind))
    start = robot.physics.object_pose()[0]
    touched = 0
    for _ in range(int(build_cycle(kind).duration_ns / 50e6)):
        robot.advance(robot.time_ns + 50_000_000)
        touched += robot.physics.contact_count(geom) > 0
    return touched, start, robot.physics.object_pose()[0]


def test_reach_is_free_space_wipe_touches_table_push_moves_object():
    touched, _, _ = _contacts_during("reach", "tool_tip")
    assert touched == 0
    touched, _, _ = _contacts_during("wipe", "tool_tip")
    assert touched > 100  # > 5 s of the 11 s cycle in contact
    _, start, end = _contacts_during("push", "object_geom")
    assert np.linalg.norm(end[:2] - start[:2]) > 0.05


def test_wipe_contact_is_sustained_and_pressing():
    robot = SimulatedRobot()
    robot.command(build_cycle("wipe"))
    robot.advance(2_600_000_000)
    in_contact = []
    force_z = []
    while robot.time_ns < 8_400_000_000:  # the three strokes
        robot.advance(robot.time_ns + 1_000_000)
        in_contact.append(robot.physics.contact_count("tool_tip") > 0)
        force_z.append(robot.physics.wrench_at_sensor()[0][2])
    assert np.mean(in_contact) > 0.99
    tool_weight_n = robot.physics.model.body_subtreemass[robot.physics.body_id("tool")] * 9.81
    assert np.percentile(force_z, 5) > 2 * tool_weight_n


def test_push_repeats_cycle_after_cycle():
    robot = SimulatedRobot()
    cycle = build_cycle("push")
    travelled = []
    for _ in range(3):
        robot.command(cycle)
        path = []
        end = robot.time_ns + cycle.duration_ns
        while robot.time_ns < end:
            robot.advance(robot.time_ns + 100_000_000)
            path.append(robot.physics.object_pose()[0][:2])
        travelled.append(np.sum(np.linalg.norm(np.diff(path, axis=0), axis=1)))
    # The V-shaped pushers keep the box on the tool's path: the third cycle still pushes
    # it there and back (0.1 m + 0.2 m from the centre in the first cycle, 0.2 m each
    # way later).
    assert travelled[0] > 0.25
    assert travelled[2] > travelled[0]
