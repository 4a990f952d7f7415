"""The scenario's sensors block: what the stand-in's physical robot measures (real MuJoCo)."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.reality import RealityModel
from sim_real_bridge.sim.robot import SimulatedRobot, run_headless
from sim_real_bridge.sim.scenario import parse_scenario
from sim_real_bridge.sim.tasks import build_program

pytestmark = pytest.mark.mujoco


def _scenario(sensors: dict, injections: list | None = None, robot: str = "ur6", idle: list | None = None,
              duration_s: float = 2.0):
    data = {"name": "sensors", "seed": 5, "duration_s": duration_s, "task": "reach", "robot": robot,
            "sensors": sensors, "injections": injections or []}
    if idle:
        data["idle"] = idle
    return parse_scenario(data)


def _logs(scenario):
    program = build_program(scenario.task, scenario.duration_s, scenario.robot, scenario.idle)
    sim = run_headless(SimulatedRobot(ArmPhysics(robot=scenario.robot)), program, scenario.duration_s)
    physics = ArmPhysics(robot=scenario.robot)
    reality = RealityModel(physics, scenario, np.random.default_rng(scenario.seed))
    real = run_headless(SimulatedRobot(physics, reality=reality), program, scenario.duration_s)
    return sim, real, reality


def test_without_a_wrench_sensor_no_wrench_is_sampled_at_all():
    sim, real, _ = _logs(_scenario({"wrench": False}, duration_s=0.5))
    assert "wrench" in sim.stamps_ns and "wrench" not in real.stamps_ns
    np.testing.assert_array_equal(real.field("joint_states", "position"), sim.field("joint_states", "position"))


def test_quantized_encoders_hold_one_value_while_the_joint_is_idle():
    # Not a divisor of the home posture's 4-decimal values: no joint rests on a step boundary.
    resolution = 7e-4
    scenario = _scenario({"encoder_resolution_rad": resolution}, idle=[{"start_s": 0.0, "end_s": 1.5}],
                         duration_s=1.5)
    sim, real, _ = _logs(scenario)
    q_real = real.field("joint_states", "position")
    q_sim = sim.field("joint_states", "position")
    np.testing.assert_allclose(q_real / resolution, np.round(q_real / resolution), atol=1e-9)
    assert np.max(np.abs(q_real - q_sim)) <= resolution / 2 + 1e-12
    # The arm rests through the idle window: every joint reads one constant value.
    assert np.all(np.ptp(q_real, axis=0) == 0.0)
    # Velocities and efforts are not quantized.
    np.testing.assert_array_equal(real.field("joint_states", "effort"), sim.field("joint_states", "effort"))


def test_noise_has_the_stated_spread_on_positions_and_efforts():
    sim, real, _ = _logs(_scenario({"joint_noise_rad": 2e-4, "effort_noise": 0.3}, robot="panda7", duration_s=1.0))
    dq = real.field("joint_states", "position") - sim.field("joint_states", "position")
    de = real.field("joint_states", "effort") - sim.field("joint_states", "effort")
    assert np.std(dq) == pytest.approx(2e-4, rel=0.1) and abs(np.mean(dq)) < 2e-5
    assert np.std(de) == pytest.approx(0.3, rel=0.1)
    np.testing.assert_array_equal(real.field("wrench", "force"), sim.field("wrench", "force"))


def test_noise_leaves_the_sensor_kinds_draws_unchanged():
    dropout = [{"category": "sensor", "kind": "dropout", "start_s": 0.2, "end_s": 0.8,
                "params": {"stream": "ee_pose", "probability": 0.5}}]
    _, quiet, quiet_reality = _logs(_scenario({}, dropout, duration_s=1.0))
    _, noisy, noisy_reality = _logs(_scenario({"joint_noise_rad": 1e-3}, dropout, duration_s=1.0))
    np.testing.assert_array_equal(quiet.stamps_ns["ee_pose"], noisy.stamps_ns["ee_pose"])
    assert quiet_reality.samples_dropped == noisy_reality.samples_dropped
    assert 0 < quiet_reality.samples_dropped["ee_pose"] < 60


def test_frozen_joint_states_with_quantized_encoders_take_effect_only_when_a_joint_moves():
    frozen = [{"category": "sensor", "kind": "frozen", "start_s": 0.0, "end_s": 3.0,
               "params": {"stream": "joint_states"}}]
    scenario = _scenario({"encoder_resolution_rad": 7e-4}, frozen, idle=[{"start_s": 0.0, "end_s": 1.0}],
                         duration_s=3.0)
    _, _, reality = _logs(scenario)
    effect_s = reality.effect_start_s(scenario.injections[0])
    # The arm rests for the first second (one reading, nothing to freeze), then the reach starts.
    assert effect_s is not None and 1.0 < effect_s < 1.6


def test_a_physics_of_another_robot_is_refused():
    from sim_real_bridge.errors import ConfigError

    with pytest.raises(ConfigError, match="scenario 'sensors' is for robot 'ur6', the physics is 'arm7'"):
        RealityModel(ArmPhysics(), _scenario({}), np.random.default_rng(0))
