"""bench/attribution_eval.py: the adapter from lockstep columns to today's analysis, and the pooled figures."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from sim_real_bridge.sim.lockstep import Transport, run_lockstep
from sim_real_bridge.sim.scenario import parse_scenario


@pytest.fixture(scope="module")
def bench(repo_root):
    spec = importlib.util.spec_from_file_location("attribution_eval", repo_root / "bench" / "attribution_eval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.mujoco
def test_the_adapter_hands_every_stream_to_the_engine(bench):
    scenario = parse_scenario({"name": "adapter", "seed": 4, "duration_s": 1.5, "task": "reach", "robot": "ur6",
                               "sensors": {"wrench": False}, "injections": []})
    run = run_lockstep(scenario, Transport(real_command_delay_ns=0))
    engine = bench.analyse_run(run)
    summary = engine.run_summary()
    assert engine.joint_names == tuple(run.joint_names)
    assert summary["counts"]["commands"] == len(run.commands.recv_ns)
    # every 20 ms of the 1.5 s run that both sides' joints cover is analysed
    assert summary["counts"]["analysis_ticks"] >= 0.9 * 1.5 / 0.02
    delays = summary["timing"]["delivery_delay_s"]
    assert "real/joint_states" in delays and "sim/wrench" in delays and "real/wrench" not in delays
    # Nominal and identical on both sides (but the missing wrench): the analysis finds no gap.
    result = bench.run_and_evaluate(run)
    assert result["truth"] == [] and result["nominal"] and result["robot"] == "ur6"
    assert [e for e in result["events"] if e["category"] != "sensor"] == []


def _result(robot: str, events: list, truth: list, duration_s: float = 60.0) -> dict:
    from sim_real_bridge.evaluation.scoring import score_events

    return {"robot": robot, "events": events, "truth": truth, "duration_s": duration_s, "nominal": not truth,
            "scores": score_events(events, truth, duration_s=duration_s), "task": "reach", "without_effect": []}


def test_pooled_figures_kind_accuracy_and_nominal_rate(bench):
    hit = {"category": "contact", "kind": "friction", "start_s": 10.2, "end_s": 15.0, "severity": 1.0}
    wrong_kind = {"category": "contact", "kind": "stiffness", "start_s": 30.4, "end_s": 31.0, "severity": 1.0}
    false = {"category": "human", "kind": "push", "start_s": 40.0, "end_s": 41.0, "severity": 1.0}
    truth = [{"category": "contact", "kind": "friction", "start_s": 10.0, "end_s": 14.0},
             {"category": "contact", "kind": "friction", "start_s": 30.0, "end_s": 34.0}]
    results = [_result("ur6", [hit, wrong_kind, false], truth),
               _result("ur6", [false], [], duration_s=1800.0),
               _result("panda7", [], [{"category": "dynamics", "kind": "gain", "start_s": 1.0, "end_s": 5.0}])]
    report = bench.seeds_report(results)
    contact = report["per_robot"]["ur6"]["contact"]
    assert (contact["precision"], contact["recall"], contact["f1"]) == (1.0, 1.0, 1.0)
    assert contact["median_delay_s"] == pytest.approx(0.3) and contact["p90_delay_s"] == pytest.approx(0.38)
    assert report["per_robot"]["ur6"]["human"]["precision"] == 0.0
    assert report["per_robot"]["panda7"]["dynamics"]["recall"] == 0.0
    assert report["overall"]["contact"]["n_events"] == 2
    assert report["kind_accuracy"] == 0.5 and report["matched_events"] == 2
    assert report["nominal_false_per_hour"] == pytest.approx(2.0)
    assert report["nominal_false_per_hour_per_robot"] == {"panda7": None, "ur6": pytest.approx(2.0)}
    assert [row["robot"] for row in report["scenarios"]] == ["ur6", "ur6", "panda7"]


@pytest.mark.parametrize(("text", "message"), [("5", "expected A:B"), ("3:3", "expected 0 <= A < B"),
                                               ("-1:4", "expected 0 <= A < B"), ("a:b", "expected A:B")])
def test_seed_ranges(bench, text, message):
    import argparse

    assert bench.parse_seeds("2:5") == range(2, 5)
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        bench.parse_seeds(text)


@pytest.mark.mujoco
def test_a_seed_range_prints_the_json_on_stdout_and_a_line_per_seed_on_stderr(bench, capsys):
    import json

    assert bench.main(["--json", "--seeds", "49:50", "--workers", "1"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["scenario_count"] == 1 and report["scenarios"][0]["seed"] == 49
    assert err.startswith("[1/1] seed 49 (arm7, ") and "elapsed" in err
