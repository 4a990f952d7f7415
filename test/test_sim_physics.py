"""ArmPhysics: the MuJoCo arm's accessors and the hooks the reality model uses (real MuJoCo)."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.errors import SimulationError
from sim_real_bridge.sim.physics import ARM_JOINT_NAMES, ArmPhysics
from sim_real_bridge.sim.tasks import TABLE_TOP_Z_M, solve_ik

pytestmark = pytest.mark.mujoco

GRAVITY = 9.81


@pytest.fixture()
def physics() -> ArmPhysics:
    return ArmPhysics()


def test_model_shape_and_home(physics):
    assert physics.joint_names == ARM_JOINT_NAMES
    assert physics.timestep_ns == 1_000_000
    assert physics.q_rad.shape == (7,) and physics.qd_rad_s.shape == (7,) and physics.effort.shape == (7,)
    np.testing.assert_allclose(physics.q_rad, physics.home_q_rad)
    # Home: tool pointing straight down, above the table.
    assert physics.ee_rotation()[:, 2] @ np.array([0.0, 0.0, -1.0]) > 0.999
    pos, quat = physics.ee_pose()
    assert pos[2] > TABLE_TOP_Z_M + 0.1
    assert np.linalg.norm(quat) == pytest.approx(1.0)


def test_step_advances_time(physics):
    physics.step(5)
    assert physics.time_ns == 5 * physics.timestep_ns


def test_position_targets_are_tracked(physics):
    target = physics.home_q_rad + np.array([0.2, -0.1, 0.1, 0.15, -0.1, 0.1, 0.2])
    physics.set_position_targets(target)
    np.testing.assert_allclose(physics.position_targets, target)
    physics.step(1500)
    np.testing.assert_allclose(physics.q_rad, target, atol=5e-3)


def test_wrench_at_rest_is_tool_weight(physics):
    physics.step(200)
    force, torque = physics.wrench_at_sensor()
    tool_mass = physics.model.body_subtreemass[physics.body_id("tool")]
    assert np.linalg.norm(force) == pytest.approx(tool_mass * GRAVITY, rel=0.02)
    assert force.shape == (3,) and torque.shape == (3,)


def test_object_rests_on_table(physics):
    physics.step(300)
    pos, quat = physics.object_pose()
    half = physics.model.geom_size[physics.model.geom("object_geom").id][2]
    assert pos[2] == pytest.approx(TABLE_TOP_Z_M + half, abs=1e-3)
    assert np.linalg.norm(quat) == pytest.approx(1.0)


def test_gain_scale_and_restore(physics):
    kp = physics.model.actuator_gainprm[:, 0].copy()
    physics.set_actuator_gain_scale(np.full(7, 0.5))
    np.testing.assert_allclose(physics.model.actuator_gainprm[:, 0], 0.5 * kp)
    np.testing.assert_allclose(physics.model.actuator_biasprm[:, 1], -0.5 * kp)
    physics.restore_nominal()
    np.testing.assert_allclose(physics.model.actuator_gainprm[:, 0], kp)


def test_friction_stiffness_mass_hooks(physics):
    table = physics.model.geom("table").id
    mu = physics.model.geom_friction[table, 0]
    timeconst = physics.model.geom_solref[table, 0]
    physics.set_contact_friction_scale(0.25)
    physics.set_contact_stiffness_scale(0.25)
    physics.set_body_mass_scale("object", 3.0)
    assert physics.model.geom_friction[table, 0] == pytest.approx(0.25 * mu)
    assert physics.model.geom_solref[table, 0] == pytest.approx(2.0 * timeconst)
    obj = physics.body_id("object")
    mass = physics.model.body_mass[obj]
    physics.restore_nominal()
    assert physics.model.body_mass[obj] == pytest.approx(mass / 3.0)
    assert physics.model.geom_friction[table, 0] == pytest.approx(mu)


def test_payload_loads_the_arm(physics):
    physics.step(500)
    effort_before = np.abs(physics.effort).sum()
    physics.set_payload(2.0)
    physics.step(500)
    assert np.abs(physics.effort).sum() > effort_before + 5.0
    physics.set_payload(0.0)
    assert physics.model.body_mass[physics.body_id("payload")] < 1e-3


def test_external_force_moves_a_link(physics):
    start = physics.body_com_pos("link6")
    physics.set_external_force("link6", np.array([0.0, 60.0, 0.0]))
    physics.step(300)
    assert physics.body_com_pos("link6")[1] > start[1] + 1e-3
    physics.clear_external_forces()
    assert not physics.data.xfrc_applied.any()


def test_obstacle_collides_only_when_enabled(physics):
    q = solve_ik(physics, np.array([0.47, 0.12, 0.5]))
    physics.set_joint_state(q)
    assert physics.contact_count("obstacle") == 0
    physics.set_obstacle(True)
    physics.forward()
    assert physics.obstacle_enabled
    assert physics.contact_count("obstacle") > 0
    physics.set_obstacle(False)
    physics.forward()
    assert physics.contact_count("obstacle") == 0


def test_joint_friction_hook(physics):
    dofs = [physics.model.joint(name).dofadr[0] for name in ARM_JOINT_NAMES]
    physics.set_joint_friction(np.full(7, 2.0), np.full(7, 3.0))
    assert np.all(physics.model.dof_damping[dofs] >= 2.0)
    assert np.all(physics.model.dof_frictionloss[dofs] == 3.0)
    physics.restore_nominal()
    assert np.all(physics.model.dof_frictionloss[dofs] == 0.0)


def test_bad_model_path():
    with pytest.raises(SimulationError, match="cannot load MuJoCo model"):
        ArmPhysics("/nonexistent/arm.xml")


def test_model_missing_elements(tmp_path):
    path = tmp_path / "bare.xml"
    path.write_text("<mujoco><worldbody><body><joint name='joint1'/><geom size='0.1'/></body></worldbody></mujoco>")
    with pytest.raises(SimulationError, match="lacks a required element"):
        ArmPhysics(path)


def test_unknown_names(physics):
    with pytest.raises(SimulationError, match="no body named 'hand'"):
        physics.body_id("hand")
    with pytest.raises(SimulationError, match="no arm joint named 'joint9'"):
        physics.joint_index("joint9")


def test_unstable_state_is_reported(physics, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo appends the warning to ./MUJOCO_LOG.TXT
    physics.data.qvel[0] = np.nan
    with pytest.raises(SimulationError, match="unstable state"):
        physics.step(1)


def test_robot_recovers_from_instability_keeping_time(tmp_path, monkeypatch):
    from sim_real_bridge.sim.robot import SimulatedRobot

    monkeypatch.chdir(tmp_path)
    robot = SimulatedRobot()
    robot.advance(10_000_000)
    robot.physics.data.qvel[0] = np.nan
    with pytest.raises(SimulationError, match="unstable state"):
        robot.advance(20_000_000)
    robot.recover()
    assert robot.time_ns >= 10_000_000
    np.testing.assert_allclose(robot.physics.q_rad, robot.physics.home_q_rad)
    assert robot.advance(robot.time_ns + 10_000_000)
