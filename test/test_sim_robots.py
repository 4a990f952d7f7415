"""The built-in robots: models match their published tables, and every task runs on each (real MuJoCo)."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.errors import ConfigError, SimulationError
from sim_real_bridge.sim import dh
from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.robot import SimulatedRobot
from sim_real_bridge.sim.robots import ROBOTS, robot_spec
from sim_real_bridge.sim.tasks import TABLE_TOP_Z_M, build_cycle, low_phases

pytestmark = pytest.mark.mujoco

ROBOT_NAMES = sorted(ROBOTS)


@pytest.mark.parametrize("name", ROBOT_NAMES)
def test_registry_matches_the_model(name):
    spec = robot_spec(name)
    physics = ArmPhysics(robot=name)
    assert physics.robot_name == name and physics.model_path == spec.model_path
    assert physics.joint_names == spec.joint_names
    assert physics.link_names == spec.link_names
    assert set(spec.human_links) <= set(spec.link_names)
    assert len(spec.velocity_max_rad_s) == physics.n_joints
    for (kind, param), value in spec.injection_defaults.items():
        if param == "joint":
            assert value in spec.joint_names
        elif param == "link":
            assert value in spec.link_names
    # Home: the tool points straight down at the registered tip position, above the table.
    pos, _ = physics.ee_pose()
    np.testing.assert_allclose(pos, spec.home_tip_m, atol=2e-3)
    assert physics.ee_rotation()[:, 2] @ np.array([0.0, 0.0, -1.0]) > 0.999
    assert pos[2] > TABLE_TOP_Z_M + 0.1


@pytest.mark.parametrize("name", sorted(dh.DH_ROBOTS))
def test_model_kinematics_follow_the_dh_table(name):
    """MuJoCo's flange pose equals the DH product of the published table, anywhere in range."""
    table = dh.DH_ROBOTS[name]
    physics = ArmPhysics(robot=name)
    rng = np.random.default_rng(7)
    lower, upper = physics.joint_range_rad.T
    base = physics.model.body("base").id
    tool = physics.model.body("tool").id
    for _ in range(5):
        q = rng.uniform(lower, upper)
        physics.forward_kinematics(q)
        base_pos, base_rot = physics.data.xpos[base], physics.data.xmat[base].reshape(3, 3)
        flange_world = physics.data.xpos[tool]
        expected = dh.dh_link_frames(table, q)[-1]
        np.testing.assert_allclose(base_rot.T @ (flange_world - base_pos), expected[:3, 3], atol=1e-9)
        # The tool's axis is the flange's z axis.
        tool_z = physics.data.xmat[tool].reshape(3, 3)[:, 2]
        np.testing.assert_allclose(base_rot.T @ tool_z, expected[:3, 2], atol=1e-9)


@pytest.mark.parametrize("name", sorted(dh.DH_ROBOTS))
def test_model_inertials_are_the_published_ones(name):
    """Mass, centre of mass and inertia of each link, moved back into its DH frame, equal the table."""
    table = dh.DH_ROBOTS[name]
    physics = ArmPhysics(robot=name)
    q = np.zeros(physics.n_joints)
    physics.forward_kinematics(q)
    frames = dh.dh_link_frames(table, q)
    base = physics.model.body("base").id
    base_pos, base_rot = physics.data.xpos[base], physics.data.xmat[base].reshape(3, 3)
    for link, frame in zip(table.links, frames):
        bid = physics.model.body(link.body).id
        assert physics.model.body_mass[bid] == pytest.approx(link.mass_kg)
        com_world = physics.data.xipos[bid]
        com_dh = frame[:3, :3].T @ (base_rot.T @ (com_world - base_pos) - frame[:3, 3])
        np.testing.assert_allclose(com_dh, link.com_m, atol=1e-9)
        rot_world = physics.data.ximat[bid].reshape(3, 3)
        inertia_world = rot_world @ np.diag(physics.model.body_inertia[bid]) @ rot_world.T
        inertia_dh = frame[:3, :3].T @ base_rot.T @ inertia_world @ base_rot @ frame[:3, :3]
        ixx, iyy, izz, ixy, ixz, iyz = link.inertia
        expected = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
        np.testing.assert_allclose(inertia_dh, expected, atol=1e-6)


@pytest.mark.parametrize("name", sorted(dh.DH_ROBOTS))
def test_model_limits_are_the_published_ones(name):
    table = dh.DH_ROBOTS[name]
    physics = ArmPhysics(robot=name)
    np.testing.assert_allclose(physics.joint_range_rad, [link.range_rad for link in table.links])
    ids = physics._actuator_ids
    np.testing.assert_allclose(physics.model.actuator_forcerange[ids, 1], [link.torque_nm for link in table.links])


def test_generated_model_text_is_reproducible(tmp_path):
    """The committed MJCF is what the generator writes from the tables."""
    for name, table in dh.DH_ROBOTS.items():
        written = dh.write_model(table, tmp_path)
        assert written.read_text() == robot_spec(name).model_path.read_text(), name


def test_unknown_robot_is_refused():
    with pytest.raises(ConfigError, match=r"unknown robot 'kuka'; built-in robots: arm7, ur6, panda7"):
        ArmPhysics(robot="kuka")
    with pytest.raises(ConfigError, match="unknown robot 'kuka'"):
        build_cycle("reach", "kuka")


def test_model_without_an_arm_is_refused(tmp_path):
    path = tmp_path / "empty.xml"
    path.write_text('<mujoco><worldbody><body name="base"/></worldbody></mujoco>')
    with pytest.raises(SimulationError, match="lacks a required element"):
        ArmPhysics(path)


@pytest.mark.parametrize("name", ROBOT_NAMES)
@pytest.mark.parametrize("kind", ["reach", "wipe", "push"])
def test_cycles_are_smooth_and_within_the_mirror_limits(name, kind):
    cycle = build_cycle(kind, name)
    spec = robot_spec(name)
    home = ArmPhysics(robot=name).home_q_rad
    assert cycle.joint_names == spec.joint_names
    np.testing.assert_allclose(cycle.points[-1].positions, home, atol=1e-3)
    q = np.array([p.positions for p in cycle.points])
    speeds = np.abs(np.diff(q, axis=0)) / 0.05
    assert np.all(speeds.max(axis=0) < 0.6 * np.asarray(spec.velocity_max_rad_s))
    declared = np.abs([p.velocities for p in cycle.points])
    assert np.all(declared.max(axis=0) < np.asarray(spec.velocity_max_rad_s))


def _run_cycle(name: str, kind: str) -> dict[str, float]:
    robot = SimulatedRobot(ArmPhysics(robot=name))
    cycle = build_cycle(kind, name)
    robot.command(cycle)
    physics = robot.physics
    start = physics.object_pose()[0]
    tip_contact = force_z = 0.0
    while robot.time_ns < cycle.duration_ns:
        robot.advance(robot.time_ns + 20_000_000)
        tip_contact += physics.contact_count("tool_tip") > 0
        force_z = max(force_z, physics.wrench_at_sensor()[0][2])
    moved = float(np.linalg.norm(physics.object_pose()[0][:2] - start[:2]))
    return {"tip_contact_s": tip_contact * 0.02, "force_z": force_z, "moved": moved,
            "home_error": float(np.max(np.abs(physics.q_rad - physics.home_q_rad)))}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ur6", "panda7"])
def test_each_task_does_its_job_on_the_robot(name):
    reach, wipe, push = (_run_cycle(name, kind) for kind in ("reach", "wipe", "push"))
    assert reach["tip_contact_s"] == 0 and reach["moved"] < 1e-3
    # Wipe: the tip presses the table through the strokes (over 5 s of the 11 s cycle).
    assert wipe["tip_contact_s"] > 5.0 and wipe["force_z"] > 20.0
    assert push["moved"] > 0.08
    assert max(r["home_error"] for r in (reach, wipe, push)) < 0.05


def test_low_phases_mark_the_wipe_strokes_and_pushes():
    (wipe,) = low_phases("wipe")
    # The three strokes run 2.5-8.5 s into the cycle; the tip is low shortly before and after.
    assert 2.0 < wipe[0] < 2.5 and 8.5 < wipe[1] < 9.0
    assert len(low_phases("push")) == 2
    assert low_phases("reach") == ()
