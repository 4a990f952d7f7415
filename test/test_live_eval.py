"""bench/live_eval.py's scenario sources and per-run rows (the runs themselves need the
whole node graph: bench/live_eval.py is run by hand, see its docstring)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def live_eval():
    spec = importlib.util.spec_from_file_location("live_eval", REPO / "bench" / "live_eval.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_seeds_a_to_b_write_one_generated_scenario_per_seed(live_eval, tmp_path: Path) -> None:
    paths = live_eval._generated("3:5", "ur6", tmp_path)
    assert [p.name for p in paths] == ["gen_3.yaml", "gen_4.yaml"]
    assert all(yaml.safe_load(p.read_text())["robot"] == "ur6" for p in paths)


@pytest.mark.parametrize("seeds", ["5:3", "a:b", "7"])
def test_bad_seed_ranges_are_refused_in_one_line(live_eval, tmp_path: Path, seeds: str) -> None:
    with pytest.raises(SystemExit, match="--seeds"):
        live_eval._generated(seeds, None, tmp_path)


def test_a_row_says_whether_the_run_was_degraded_and_what_the_mirror_refused(live_eval) -> None:
    summary = {"scores": {"per_category": {}}, "truth": [{"category": "contact"}],
               "load": {"max_lag_s": 1.2, "dropped_s": 0.0},
               "degradation": {"degraded": True, "reasons": ["the monitor fell up to 1.20 s behind"]},
               "mirror_refusals": {"count": 0, "by_kind": {}}}
    row = live_eval.scenario_row(summary)
    assert row["degraded"] is True and row["max_lag_s"] == 1.2 and row["mirror_refusals"] == 0
    assert row["degraded_reasons"] == ["the monitor fell up to 1.20 s behind"] and row["injections"] == 1
