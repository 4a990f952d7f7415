"""bench/fit_eval.py: injected truths on each robot, and the per-robot figures and threshold checks."""

from __future__ import annotations

import pytest
from helpers.bench_module import load_bench

from sim_real_bridge.fit.model import FitModel, resolve_model
from sim_real_bridge.sim.robots import ROBOTS
from sim_real_bridge.sim.scenario import load_scenario


@pytest.fixture(scope="module")
def bench():
    return load_bench("fit_eval")


def test_the_bench_covers_two_robots(bench) -> None:
    assert len(bench.ROBOTS) >= 2 and set(bench.ROBOTS) <= set(ROBOTS)


@pytest.mark.mujoco
@pytest.mark.parametrize("robot", ["arm7", "ur6"])
def test_truths_name_the_robots_own_elements(bench, robot: str) -> None:
    path, builtin = resolve_model(robot)
    fit_model = FitModel(path, ROBOTS[robot].joint_names, builtin)
    gain = bench.truth_values(load_scenario("dynamics_gain", robot=robot).injections[0], fit_model)
    assert sorted(gain) == sorted(f"gain:{j}" for j in ROBOTS[robot].joint_names)
    for joint, value in gain.items():
        kp = float(fit_model.model.actuator(fit_model.actuator_of_joint[joint.split(":")[1]]).gainprm[0])
        assert value == pytest.approx(0.4 * kp)
    friction = bench.truth_values(load_scenario("dynamics_joint_friction", robot=robot).injections[0], fit_model)
    assert len(friction) == 2 * len(ROBOTS[robot].joint_names)


def _scenario(recovered: list[bool], fit: float, heldout: float | None, wall_s: float) -> dict:
    params = {f"p{i}": {"recovered": r} for i, r in enumerate(recovered)}
    return {"parameters": params, "residual_reduction_fit": fit, "residual_reduction_heldout": heldout,
            "fit_wall_s": wall_s, "fit_wall_over_rollout": wall_s / 0.01}


def test_figures_per_robot_and_their_threshold_checks(bench) -> None:
    results = {
        "arm7/a": _scenario([True, True], 0.9, 0.8, 10.0),
        "arm7/b": _scenario([True, False], 0.7, None, 20.0),
        "ur6/a": _scenario([False, False, True], 0.4, 0.1, 70.0),
        "ur6/b": {"error": "no window with contact"},
    }
    out = bench.report(results, ["arm7", "ur6"])
    arm, ur = out["per_robot"]["arm7"], out["per_robot"]["ur6"]
    assert arm["recovered_share"] == pytest.approx(0.75) and arm["injected_parameters_fitted"] == 4
    assert arm["residual_reduction_fit"] == pytest.approx(0.8)
    assert arm["residual_reduction_heldout"] == pytest.approx(0.8)  # the scenario without held-out windows left out
    assert arm["fit_wall_s_median"] == pytest.approx(15.0)
    assert arm["fit_wall_over_rollout_median"] == pytest.approx(1500.0)
    assert arm["passes"] == {"recovered_share": False, "residual_reduction_fit": True,
                             "residual_reduction_heldout": True, "fit_wall_s_median": True}
    assert ur["failed"] == ["ur6/b"] and ur["scenarios"] == 2
    assert ur["passes"] == dict.fromkeys(arm["passes"], False)
    assert out["recovered_share"] == pytest.approx(4 / 7)
    assert out["thresholds"]["fit_wall_s_median"] == {"max": 60.0}
    assert out["robots"] == ["arm7", "ur6"] and set(out["per_scenario"]) == set(results)


def test_a_missing_figure_fails_its_threshold(bench) -> None:
    out = bench.report({"ur6/b": {"error": "no window with contact"}}, ["ur6"])
    assert out["per_robot"]["ur6"]["recovered_share"] is None
    assert not any(out["per_robot"]["ur6"]["passes"].values())
