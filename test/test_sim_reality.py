"""Each injection kind changes what it should and nothing else (real MuJoCo, no ROS).

The simulator and the stand-in run side by side in-process on the same program; the
first command is at t = 0. Identical physics is deterministic, so "unchanged" means
equal to 1e-6 (stamps exactly; MuJoCo's global constraint solver lets a change in one
contact move another by ~1e-12); "changed" means a mean absolute difference over the
window above a threshold well below the effect's size and far above that.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.reality import RealityModel
from sim_real_bridge.sim.robot import SimulatedRobot, StreamLog, run_headless
from sim_real_bridge.sim.scenario import KINDS, load_scenario, parse_scenario
from sim_real_bridge.sim.tasks import build_program

pytestmark = pytest.mark.mujoco

S = 1_000_000_000
UNCHANGED_ATOL = 1e-6
STREAMS = ("joint_states", "wrench", "ee_pose", "object_pose")
FIELDS = {
    "joint_states": ("position", "velocity", "effort"),
    "wrench": ("force", "torque"),
    "ee_pose": ("position", "orientation"),
    "object_pose": ("position", "orientation"),
}
#: Per task: run length and injection window, s (wipe is in contact from 2.5 s, push
#: touches the object from about 2.7 s).
TASK_RUNS = {"reach": (5.0, 1.0, 4.0), "wipe": (6.5, 3.0, 6.0), "push": (6.0, 2.0, 5.5)}


@lru_cache(maxsize=None)
def baseline(task: str) -> StreamLog:
    duration_s = TASK_RUNS[task][0]
    return run_headless(SimulatedRobot(), build_program(task, duration_s), duration_s)


def scenario_for(task: str, kind: str, params: dict | None = None, seed: int = 5):
    duration_s, start_s, end_s = TASK_RUNS[task]
    return parse_scenario(
        {
            "name": f"{task}_{kind}",
            "seed": seed,
            "duration_s": duration_s,
            "task": task,
            "injections": [
                {"category": KINDS[kind].category, "kind": kind, "start_s": start_s, "end_s": end_s, "params": params or {}}
            ],
        }
    )


def run_standin(scenario) -> StreamLog:
    physics = ArmPhysics()
    robot = SimulatedRobot(physics, reality=RealityModel(physics, scenario, np.random.default_rng(scenario.seed)))
    return run_headless(robot, build_program(scenario.task, scenario.duration_s), scenario.duration_s)


def pair(task: str, kind: str, params: dict | None = None):
    scenario = scenario_for(task, kind, params)
    _, start_s, end_s = TASK_RUNS[task]
    return baseline(task), run_standin(scenario), int(start_s * S), int(end_s * S)


def assert_same(sim: StreamLog, real: StreamLog, stream: str, start_ns: int, end_ns: int) -> None:
    np.testing.assert_array_equal(
        real.stamps_ns[stream][(real.stamps_ns[stream] >= start_ns) & (real.stamps_ns[stream] < end_ns)],
        sim.stamps_ns[stream][(sim.stamps_ns[stream] >= start_ns) & (sim.stamps_ns[stream] < end_ns)],
    )
    for key in FIELDS[stream]:
        np.testing.assert_allclose(
            real.window(stream, key, start_ns, end_ns),
            sim.window(stream, key, start_ns, end_ns),
            rtol=0,
            atol=UNCHANGED_ATOL,
            err_msg=f"{stream}.{key}",
        )


def mean_diff(sim: StreamLog, real: StreamLog, stream: str, key: str, start_ns: int, end_ns: int) -> float:
    a = sim.window(stream, key, start_ns, end_ns)
    b = real.window(stream, key, start_ns, end_ns)
    assert a.shape == b.shape and a.size
    return float(np.mean(np.abs(a - b)))


# kind: (task, [(stream, field, min mean |difference| in the window)], streams left unchanged)
PHYSICAL_CASES = {
    "actuation_latency": ("reach", [("joint_states", "position", 2e-3), ("ee_pose", "position", 1e-3)], ["object_pose"]),
    "gain": ("reach", [("joint_states", "position", 2e-3)], ["object_pose"]),
    "joint_friction": ("reach", [("joint_states", "position", 2e-3), ("joint_states", "effort", 1.0)], ["object_pose"]),
    "payload": ("reach", [("joint_states", "effort", 0.5), ("wrench", "force", 2.0)], ["object_pose"]),
    "friction": ("wipe", [("wrench", "force", 1.0)], []),
    "stiffness": ("wipe", [("wrench", "force", 1.0)], []),
    "object_mass": ("push", [("object_pose", "position", 3e-4), ("wrench", "force", 0.5)], []),
    "push": ("reach", [("joint_states", "position", 1e-3), ("joint_states", "effort", 1.0)], ["object_pose"]),
    "hold": ("reach", [("joint_states", "position", 2e-3), ("joint_states", "effort", 2.0)], ["object_pose"]),
    "object_slip": ("reach", [("object_pose", "position", 3e-3)], ["joint_states", "wrench", "ee_pose"]),
    "obstacle": ("wipe", [("joint_states", "position", 2e-3), ("wrench", "force", 1.0)], []),
    "joint_stall": ("reach", [("joint_states", "position", 5e-3), ("ee_pose", "position", 5e-3)], ["object_pose"]),
}


def test_every_kind_has_a_case():
    sensor = {"ft_bias_drift", "dropout", "nan_burst", "frozen", "stamp_jitter"}
    assert set(PHYSICAL_CASES) | sensor == set(KINDS)


@pytest.mark.parametrize("kind", sorted(PHYSICAL_CASES))
def test_physical_kind_changes_what_it_should(kind):
    task, changes, unchanged = PHYSICAL_CASES[kind]
    sim, real, start, end = pair(task, kind)
    for stream in STREAMS:  # nothing differs before the window
        assert_same(sim, real, stream, 0, start)
    for stream, key, threshold in changes:
        assert mean_diff(sim, real, stream, key, start, end) > threshold, (stream, key)
    for stream in unchanged:
        assert_same(sim, real, stream, 0, end)
    for stream in STREAMS:  # physical kinds never touch stamps or sample counts
        np.testing.assert_array_equal(real.stamps_ns[stream], sim.stamps_ns[stream])


@pytest.mark.parametrize("kind", ["friction", "stiffness", "object_mass"])
def test_contact_kinds_leave_free_space_motion_alone(kind):
    sim, real, start, end = pair("reach", kind)
    for stream in ("joint_states", "wrench", "ee_pose"):
        assert_same(sim, real, stream, 0, end)


def test_joint_stall_holds_the_joint():
    sim, real, start, end = pair("reach", "joint_stall", {"joint": "joint4"})
    settle = start + S // 5
    q_real = real.window("joint_states", "position", settle, end)[:, 3]
    q_sim = sim.window("joint_states", "position", settle, end)[:, 3]
    assert np.ptp(q_real) < 0.2 * np.ptp(q_sim)


def test_push_direction_moves_the_arm_that_way():
    sim, real, start, end = pair("reach", "push", {"force_n": 60.0, "direction": [0, 1, 0], "link": "link6"})
    dy = real.window("ee_pose", "position", start, end)[:, 1] - sim.window("ee_pose", "position", start, end)[:, 1]
    assert np.mean(dy) > 1e-3


def test_object_slip_creeps_in_its_direction():
    sim, real, start, end = pair("reach", "object_slip", {"direction": [-1, 0, 0], "drift_speed_m_s": 0.03})
    moved = real.window("object_pose", "position", start, end)[-1] - sim.window("object_pose", "position", start, end)[-1]
    duration_s = (end - start) / S
    assert moved[0] < -0.5 * 0.03 * duration_s
    assert abs(moved[1]) < 0.2 * abs(moved[0])


def test_effects_end_with_the_window():
    # A sensor kind and a physical kind with no lasting state: streams agree again.
    sim, real, start, end = pair("reach", "gain", {"scale": 0.4})
    tail = int(TASK_RUNS["reach"][0] * S)
    late = real.window("joint_states", "position", end + S // 2, tail) - sim.window("joint_states", "position", end + S // 2, tail)
    during = mean_diff(sim, real, "joint_states", "position", start, end)
    assert np.mean(np.abs(late)) < 0.1 * during


# ------------------------------------------------------------------- sensor kinds
def other_streams_same(sim, real, stream, end):
    for other in STREAMS:
        if other != stream:
            assert_same(sim, real, other, 0, end)


def test_dropout_removes_samples_of_the_named_stream_only():
    sim, real, start, end = pair("reach", "dropout", {"stream": "wrench"})
    stamps = real.stamps_ns["wrench"]
    assert not np.any((stamps >= start) & (stamps < end))
    assert_same(sim, real, "wrench", 0, start)
    assert_same(sim, real, "wrench", end, 10 * S)
    other_streams_same(sim, real, "wrench", 10 * S)


def test_partial_dropout_drops_about_that_fraction():
    sim, real, start, end = pair("reach", "dropout", {"stream": "joint_states", "probability": 0.5})
    kept = real.window("joint_states", "position", start, end).shape[0]
    total = sim.window("joint_states", "position", start, end).shape[0]
    assert 0.4 < kept / total < 0.6
    other_streams_same(sim, real, "joint_states", 10 * S)


def test_nan_burst_poisons_the_named_stream_in_the_window():
    sim, real, start, end = pair("reach", "nan_burst", {"stream": "wrench"})
    assert np.all(np.isnan(real.window("wrench", "force", start, end)))
    assert np.all(np.isfinite(real.window("wrench", "force", 0, start)))
    assert np.all(np.isfinite(real.window("wrench", "force", end, 10 * S)))
    np.testing.assert_array_equal(real.stamps_ns["wrench"], sim.stamps_ns["wrench"])
    other_streams_same(sim, real, "wrench", 10 * S)


def test_frozen_repeats_the_last_value_while_stamps_advance():
    sim, real, start, end = pair("reach", "frozen", {"stream": "joint_states"})
    frozen = real.window("joint_states", "position", start, end)
    last_before = sim.window("joint_states", "position", 0, start)[-1]
    np.testing.assert_array_equal(frozen, np.broadcast_to(last_before, frozen.shape))
    np.testing.assert_array_equal(real.stamps_ns["joint_states"], sim.stamps_ns["joint_states"])
    assert_same(sim, real, "joint_states", end, 10 * S)
    other_streams_same(sim, real, "joint_states", 10 * S)


def test_ft_bias_drift_grows_linearly_on_its_axis():
    params = {"force_rate_n_per_s": 2.0, "torque_rate_nm_per_s": 0.1, "axis": "y"}
    sim, real, start, end = pair("wipe", "ft_bias_drift", params)
    stamps = sim.stamps_ns["wrench"]
    in_window = (stamps >= start) & (stamps < end)
    seconds = (stamps[in_window] - start) / S
    force_bias = real.field("wrench", "force")[in_window] - sim.field("wrench", "force")[in_window]
    torque_bias = real.field("wrench", "torque")[in_window] - sim.field("wrench", "torque")[in_window]
    np.testing.assert_allclose(force_bias[:, 1], 2.0 * seconds, atol=1e-9)
    np.testing.assert_allclose(torque_bias[:, 1], 0.1 * seconds, atol=1e-9)
    np.testing.assert_array_equal(force_bias[:, [0, 2]], 0.0)
    assert_same(sim, real, "wrench", end, 10 * S)
    other_streams_same(sim, real, "wrench", 10 * S)


def test_stamp_jitter_moves_stamps_not_values():
    sim, real, start, end = pair("reach", "stamp_jitter", {"stream": "joint_states", "std_ms": 4.0})
    np.testing.assert_array_equal(real.field("joint_states", "position"), sim.field("joint_states", "position"))
    offsets_ms = (real.stamps_ns["joint_states"] - sim.stamps_ns["joint_states"]) / 1e6
    sim_stamps = sim.stamps_ns["joint_states"]
    in_window = (sim_stamps >= start) & (sim_stamps < end)
    assert 0.7 * 4.0 < np.std(offsets_ms[in_window]) < 1.3 * 4.0
    np.testing.assert_array_equal(offsets_ms[~in_window], 0.0)
    other_streams_same(sim, real, "joint_states", 10 * S)


# ------------------------------------------------------------- nominal, seeds, labels
def test_nominal_robots_agree():
    """Tolerance: with no injections the stand-in equals the simulator to 1e-9 in every field."""
    scenario = load_scenario("nominal")
    duration_s = 4.0
    program = build_program(scenario.task, duration_s)
    sim = run_headless(SimulatedRobot(), program, duration_s)
    physics = ArmPhysics()
    real = run_headless(
        SimulatedRobot(physics, reality=RealityModel(physics, scenario, np.random.default_rng(0))), program, duration_s
    )
    for stream in STREAMS:
        np.testing.assert_array_equal(real.stamps_ns[stream], sim.stamps_ns[stream])
        for key in FIELDS[stream]:
            np.testing.assert_allclose(real.field(stream, key), sim.field(stream, key), rtol=0, atol=1e-9)


def test_same_seed_same_run_other_seed_other_run():
    def run(seed):
        scenario = scenario_for("reach", "stamp_jitter", {"std_ms": 2.0}, seed=seed)
        return run_standin(scenario).stamps_ns["joint_states"]

    np.testing.assert_array_equal(run(11), run(11))
    assert not np.array_equal(run(11), run(12))


def test_active_injections_follow_the_windows():
    scenario = load_scenario("tour")
    model = RealityModel(ArmPhysics(), scenario, np.random.default_rng(0))
    assert model.active_injections(None) == []
    first = scenario.injections[0]
    assert model.active_injections(first.start_ns) == [first]
    assert model.active_injections(first.end_ns) == []
    states = model.injection_states(first.start_ns)
    assert [active for _, active in states] == [True] + [False] * (len(scenario.injections) - 1)
