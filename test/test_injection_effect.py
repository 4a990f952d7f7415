"""Truth windows start when an injection changed reality (real MuJoCo, no ROS).

An obstacle does nothing until the arm touches it, and contact kinds nothing until the
arm is in contact: the stand-in notes when each injection first took effect, publishes
it on /reality/injections (``effect_start_s``) and the truth of the summary starts there.
These tests check the note against the physics: before it the stand-in's streams equal
the simulator's exactly, and they depart right after it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim_real_bridge.evaluation.summary import TruthCollector
from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.reality import RealityModel
from sim_real_bridge.sim.robot import SimulatedRobot, run_headless
from sim_real_bridge.sim.scenario import KINDS, parse_scenario
from sim_real_bridge.sim.tasks import build_program

S = 1_000_000_000


def _scenario(kind: str, start_s: float, end_s: float, duration_s: float, task: str = "wipe",
              params: dict | None = None, robot: str = "arm7"):
    return parse_scenario({
        "name": f"effect_{kind}", "seed": 3, "duration_s": duration_s, "task": task, "robot": robot,
        "injections": [{"category": KINDS[kind].category, "kind": kind, "start_s": start_s, "end_s": end_s,
                        "params": params or {}}],
    })


def _run(scenario):
    """(nominal log, stand-in log, the stand-in's RealityModel) over the scenario."""
    program = build_program(scenario.task, scenario.duration_s, scenario.robot)
    nominal = run_headless(SimulatedRobot(ArmPhysics(robot=scenario.robot)), program, scenario.duration_s)
    physics = ArmPhysics(robot=scenario.robot)
    reality = RealityModel(physics, scenario, np.random.default_rng(scenario.seed))
    real = run_headless(SimulatedRobot(physics, reality=reality), program, scenario.duration_s)
    return nominal, real, reality


def _first_departure_s(nominal, real, atol: float = 1e-6) -> float | None:
    q_sim = nominal.values["joint_states"]["position"]
    q_real = real.values["joint_states"]["position"]
    n = min(len(q_sim), len(q_real))
    differs = np.nonzero(np.max(np.abs(q_real[:n] - q_sim[:n]), axis=1) > atol)[0]
    return None if differs.size == 0 else float(real.stamps_ns["joint_states"][differs[0]]) / S


@pytest.mark.mujoco
def test_obstacle_takes_effect_at_the_arms_first_touch_not_when_it_appears():
    scenario = _scenario("obstacle", 2.0, 6.0, 6.5)
    nominal, real, reality = _run(scenario)
    effect_s = reality.effect_start_s(scenario.injections[0])
    assert effect_s is not None, "the wipe runs into the default obstacle"
    assert effect_s > scenario.injections[0].start_s + 0.1, "the obstacle appears in free space"
    departure_s = _first_departure_s(nominal, real)
    assert departure_s is not None
    # Reality equals the simulator until the touch and departs within a few samples of it.
    assert effect_s - 0.002 <= departure_s <= effect_s + 0.05, (effect_s, departure_s)


@pytest.mark.mujoco
def test_obstacle_out_of_reach_never_takes_effect_and_is_no_truth():
    scenario = _scenario("obstacle", 1.0, 4.0, 4.5, task="reach", params={"position_m": [1.6, 1.6, 0.3]})
    nominal, real, reality = _run(scenario)
    assert reality.effect_start_s(scenario.injections[0]) is None
    assert _first_departure_s(nominal, real) is None
    labels = TruthCollector()
    inj = scenario.injections[0]
    labels.add(4.5, [{"category": inj.category, "kind": inj.kind, "start_s": inj.start_s, "end_s": inj.end_s,
                      "active": False, "effect_start_s": math.nan}])
    assert labels.truth(4.5) == []
    assert labels.without_effect(4.5) == [{"category": "unauthored", "kind": "obstacle", "start_s": 1.0, "end_s": 4.0}]


@pytest.mark.mujoco
def test_free_space_kinds_take_effect_at_their_start():
    scenario = _scenario("gain", 1.0, 3.0, 3.5, task="reach")
    _, _, reality = _run(scenario)
    assert reality.effect_start_s(scenario.injections[0]) == 1.0


def _label(start_s: float, end_s: float, effect_s: float | None = None) -> dict:
    label = {"category": "unauthored", "kind": "obstacle", "start_s": start_s, "end_s": end_s, "active": True}
    if effect_s is not None:
        label["effect_start_s"] = effect_s
    return label


def test_truth_starts_at_the_effect_and_keeps_the_injected_start():
    labels = TruthCollector()
    labels.add(9.5, [_label(9.0, 22.0, math.nan)])
    assert labels.truth(9.5) == [], "not yet in effect: no gap yet"
    labels.add(10.2, [_label(9.0, 22.0, 10.1)])
    labels.add(10.3, [_label(9.0, 22.0, math.nan)])  # a stale repeat never forgets the effect
    assert labels.truth(30.0) == [{"category": "unauthored", "kind": "obstacle", "start_s": 10.1, "end_s": 22.0,
                                   "injected_start_s": 9.0}]
    assert labels.without_effect(30.0) == []


def test_labels_without_effect_field_use_the_scenario_start():
    labels = TruthCollector()
    labels.add(5.0, [_label(5.0, 9.0)])
    assert labels.truth(7.0) == [{"category": "unauthored", "kind": "obstacle", "start_s": 5.0, "end_s": 7.0}]
    assert labels.without_effect(7.0) == []


@pytest.mark.mujoco
def test_obstacle_placed_inside_the_arm_turns_solid_only_once_clear():
    # Put the box around the tool at the moment it appears: nothing materialises inside a robot.
    program_s = 5.0
    nominal = run_headless(SimulatedRobot(), build_program("reach", program_s), program_s)
    stamps = nominal.stamps_ns["ee_pose"]
    at = int(np.searchsorted(stamps, int(1.0 * S)))
    tool_m = [float(x) for x in nominal.values["ee_pose"]["position"][at]]
    scenario = _scenario("obstacle", 1.0, 4.5, program_s, task="reach",
                         params={"position_m": tool_m, "half_size_m": [0.05, 0.05, 0.05]})
    _, real, reality = _run(scenario)
    departure_s = _first_departure_s(nominal, real)
    effect_s = reality.effect_start_s(scenario.injections[0])
    assert departure_s is None or departure_s > 1.05, "the box kicked the arm when it appeared"
    if effect_s is not None:
        assert effect_s > 1.05 and departure_s is not None and departure_s >= effect_s - 0.002


#: What counts as a departure per stream: far below any effect the monitor could see, far
#: above rounding. The box resting on a softer table sinks ~0.4 mm before the arm touches
#: anything: a static sub-millimetre offset no pose tracking resolves, so 0.5 mm there.
DEPARTURE_ATOL = {"joint_states": 1e-6, "wrench": 1e-4, "ee_pose": 1e-6, "object_pose": 5e-4}


def _departure_any_s(nominal, real) -> float | None:
    """Earliest stamp (s) at which any stream of the stand-in departs from the nominal run."""
    first = None
    for stream, fields in nominal.values.items():
        atol = DEPARTURE_ATOL[stream]
        stamps_n, stamps_r = nominal.stamps_ns[stream], real.stamps_ns[stream]
        n = min(len(stamps_n), len(stamps_r))
        differs = stamps_n[:n] != stamps_r[:n]
        for key, values in fields.items():
            a, b = values[:n], real.values[stream][key][:n]
            same = np.isclose(a, b, rtol=0.0, atol=atol) | (np.isnan(a) & np.isnan(b))
            differs |= ~np.all(same.reshape(n, -1), axis=1)
        idx = np.nonzero(differs)[0]
        if idx.size:
            t = min(stamps_n[idx[0]], stamps_r[idx[0]]) / S
        elif len(stamps_n) != len(stamps_r):
            t = stamps_n[n] / S if len(stamps_n) > n else stamps_r[n] / S
        else:
            continue
        first = t if first is None else min(first, t)
    return first


# (task, start_s, end_s, duration_s): windows that open while the arm rests before a motion,
# or before a contact, so that the effect comes after the start for the lazy kinds.
EFFECT_CASES = {
    "actuation_latency": ("reach", 0.0, 3.0, 3.5), "gain": ("reach", 0.0, 3.0, 3.5),
    "joint_friction": ("reach", 0.0, 3.0, 3.5), "payload": ("reach", 1.0, 3.0, 3.5),
    "friction": ("wipe", 0.5, 4.0, 4.5), "stiffness": ("wipe", 0.5, 4.0, 4.5), "object_mass": ("push", 0.5, 4.5, 5.0),
    "push": ("reach", 1.0, 3.0, 3.5), "hold": ("reach", 1.0, 3.0, 3.5), "object_slip": ("reach", 1.0, 3.0, 3.5),
    "obstacle": ("wipe", 2.0, 6.0, 6.5), "joint_stall": ("reach", 0.0, 3.0, 3.5),
    "ft_bias_drift": ("reach", 1.0, 3.0, 3.5), "dropout": ("reach", 1.0, 3.0, 3.5),
    "nan_burst": ("reach", 1.0, 3.0, 3.5), "frozen": ("reach", 0.0, 3.0, 3.5), "stamp_jitter": ("reach", 1.0, 3.0, 3.5),
}


def test_every_kind_has_an_effect_case():
    assert set(EFFECT_CASES) == set(KINDS)


def _robot_cases() -> list:
    cases = [pytest.param("arm7", kind, id=f"arm7-{kind}") for kind in sorted(EFFECT_CASES)]
    # The other robots: the same contract, marked slow (about 0.5 s of physics per case).
    cases += [pytest.param(robot, kind, id=f"{robot}-{kind}", marks=pytest.mark.slow)
              for robot in ("ur6", "panda7") for kind in sorted(EFFECT_CASES)]
    return cases


@pytest.mark.mujoco
@pytest.mark.parametrize(("robot", "kind"), _robot_cases())
def test_truth_starts_where_the_stand_in_first_departs_from_the_simulator(robot, kind):
    task, start_s, end_s, duration_s = EFFECT_CASES[kind]
    scenario = _scenario(kind, start_s, end_s, duration_s, task=task, robot=robot)
    nominal, real, reality = _run(scenario)
    effect_s = reality.effect_start_s(scenario.injections[0])
    departure_s = _departure_any_s(nominal, real)
    assert effect_s is not None and departure_s is not None, (effect_s, departure_s)
    assert effect_s >= start_s
    # Nothing differs before the truth window starts, and the difference follows right after.
    assert effect_s - 0.0021 <= departure_s <= effect_s + 0.05, (effect_s, departure_s)
