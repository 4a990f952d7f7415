"""Scenario files: the built-in library loads; every invalid input is refused by name."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from sim_real_bridge.errors import ScenarioError
from sim_real_bridge.sim.physics import ARM_JOINT_NAMES
from sim_real_bridge.sim.scenario import (
    CATEGORIES,
    KINDS,
    Injection,
    builtin_scenario_dir,
    load_scenario,
    parse_scenario,
    scenario_names,
)

VALID = {
    "name": "t",
    "seed": 1,
    "duration_s": 30,
    "task": "wipe",
    "injections": [{"category": "contact", "kind": "friction", "start_s": 8, "end_s": 22, "params": {"scale": 0.4}}],
}


def write(tmp_path: Path, data, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def variant(**changes):
    data = copy.deepcopy(VALID)
    for key, value in changes.items():
        if value is ...:
            del data[key]
        else:
            data[key] = value
    return data


def entry(**changes):
    item = copy.deepcopy(VALID["injections"][0])
    for key, value in changes.items():
        if value is ...:
            del item[key]
        else:
            item[key] = value
    return variant(injections=[item])


def test_builtin_library_is_complete():
    names = scenario_names()
    assert builtin_scenario_dir().name == "scenarios"
    assert "nominal" in names and "tour" in names
    kinds_covered = set()
    for name in names:
        scenario = load_scenario(name)
        assert scenario.name == name
        kinds_covered.update(inj.kind for inj in scenario.injections)
    assert kinds_covered == set(KINDS)
    assert load_scenario("nominal").injections == ()
    tour = load_scenario("tour")
    assert [inj.category for inj in tour.injections] == list(CATEGORIES)
    starts = [inj.start_s for inj in tour.injections]
    assert starts == sorted(starts)
    assert all(a.end_s < b.start_s for a, b in zip(tour.injections, tour.injections[1:]))


def test_load_by_path_and_defaults_filled(tmp_path):
    data = variant(injections=[{"category": "human", "kind": "push", "start_s": 1, "end_s": 2}])
    scenario = load_scenario(write(tmp_path, data))
    (inj,) = scenario.injections
    assert inj == Injection("human", "push", 1.0, 2.0, dict(inj.params), 0)
    assert set(inj.params) == set(KINDS["push"].params)
    assert inj.params["force_n"] == KINDS["push"].params["force_n"].default
    assert inj.start_ns == 1_000_000_000 and inj.active(1_500_000_000) and not inj.active(2_000_000_000)
    assert not inj.active(None)
    assert scenario.source.endswith("s.yaml")


def test_every_kind_documents_valid_defaults():
    for kind, spec in KINDS.items():
        assert spec.category in CATEGORIES, kind
        assert spec.description, kind
        for pname, param in spec.params.items():
            assert param.description, (kind, pname)
            param.check(param.default)  # the default passes its own check


def test_joints_param_forms():
    base = {"category": "dynamics", "kind": "gain", "start_s": 1, "end_s": 2}
    for given, expected in (("all", ARM_JOINT_NAMES), ("joint2", ("joint2",)), (["joint1", "joint3"], ("joint1", "joint3"))):
        scenario = parse_scenario(variant(injections=[{**base, "params": {"joints": given}}]))
        assert scenario.injections[0].params["joints"] == expected


def test_empty_injections_may_be_null():
    assert parse_scenario(variant(injections=None)).injections == ()


# ------------------------------------------------------------------ error paths
def test_missing_file():
    with pytest.raises(ScenarioError, match="scenario file not found"):
        load_scenario("/nonexistent/x.yaml")


def test_unknown_builtin_name():
    with pytest.raises(ScenarioError, match=r"no_such: no such built-in scenario \(known: .*nominal"):
        load_scenario("no_such")


def test_not_yaml(tmp_path):
    path = write(tmp_path, "name: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"s\.yaml: not valid YAML"):
        load_scenario(path)


def test_top_level_not_mapping(tmp_path):
    with pytest.raises(ScenarioError, match=r"s\.yaml: top level must be a mapping, got list"):
        load_scenario(write(tmp_path, "- 1\n- 2\n"))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (variant(extra=1), r"extra: unknown field"),
        (variant(name=...), r"name: missing field"),
        (variant(seed=...), r"seed: missing field"),
        (variant(duration_s=...), r"duration_s: missing field"),
        (variant(task=...), r"task: missing field"),
        (variant(injections=...), r"injections: missing field"),
        (variant(name=""), r"name: must be a non-empty string"),
        (variant(seed=-1), r"seed: must be a non-negative integer"),
        (variant(seed=True), r"seed: must be a non-negative integer"),
        (variant(duration_s=0), r"duration_s: must be in \(0.0"),
        (variant(duration_s="long"), r"duration_s: must be a finite number"),
        (variant(task="dance"), r"task: must be one of reach, wipe, push, tour, got 'dance'"),
        (variant(description=3), r"description: must be a string"),
        (variant(injections={"a": 1}), r"injections: must be a list, got dict"),
        (variant(injections=["friction"]), r"injections\[0\]: must be a mapping, got str"),
        (entry(when=3), r"injections\[0\]\.when: unknown field"),
        (entry(category=...), r"injections\[0\]\.category: missing field"),
        (entry(kind=...), r"injections\[0\]\.kind: missing field"),
        (entry(start_s=...), r"injections\[0\]\.start_s: missing field"),
        (entry(end_s=...), r"injections\[0\]\.end_s: missing field"),
        (entry(kind="earthquake"), r"injections\[0\]\.kind: unknown kind 'earthquake'"),
        (entry(category="weather"), r"injections\[0\]\.category: unknown category 'weather'"),
        (entry(category="sensor"), r"injections\[0\]\.category: kind 'friction' belongs to category 'contact', not 'sensor'"),
        (entry(start_s="soon"), r"injections\[0\]\.start_s: must be a finite number"),
        (entry(end_s=float("nan")), r"injections\[0\]\.end_s: must be a finite number"),
        (entry(start_s=-1), r"injections\[0\]\.start_s: -1.0 is before the run starts"),
        (entry(end_s=31), r"injections\[0\]\.end_s: 31.0 is after the run ends \(duration_s 30.0\)"),
        (entry(end_s=8), r"injections\[0\]\.end_s: 8.0 is not after start_s 8.0"),
        (entry(params=[1]), r"injections\[0\]\.params: must be a mapping, got list"),
        (entry(params={"scael": 0.4}), r"injections\[0\]\.params\.scael: unknown parameter for 'friction' \(known: scale\)"),
        (entry(params={"scale": 0}), r"injections\[0\]\.params\.scale: must be in \(0.0, 5.0\], got 0"),
        (entry(params={"scale": "low"}), r"injections\[0\]\.params\.scale: must be a finite number"),
        (entry(params={"scale": True}), r"injections\[0\]\.params\.scale: must be a finite number"),
    ],
)
def test_invalid_scenarios_name_file_entry_and_field(tmp_path, data, match):
    path = write(tmp_path, data, "bad.yaml")
    with pytest.raises(ScenarioError, match=r"bad\.yaml: " + match):
        load_scenario(path)


@pytest.mark.parametrize(
    ("kind", "category", "params", "match"),
    [
        ("dropout", "sensor", {"stream": "imu_x"}, r"params\.stream: must be one of joint_states, wrench, ee_pose, object_pose"),
        ("push", "human", {"direction": [1, 0]}, r"params\.direction: must be a list of 3 finite numbers"),
        ("push", "human", {"direction": [0, 0, 0]}, r"params\.direction: must not be the zero vector"),
        ("push", "human", {"link": "elbow"}, r"params\.link: must be one of link1"),
        ("obstacle", "unauthored", {"half_size_m": [0.1, 0, 0.1]}, r"params\.half_size_m: must have positive entries"),
        ("gain", "dynamics", {"joints": "joint9"}, r"params\.joints: must be 'all', a joint name or a list"),
        ("gain", "dynamics", {"joints": []}, r"params\.joints: must be 'all', a joint name or a list"),
        ("joint_stall", "unauthored", {"joint": "joint0"}, r"params\.joint: must be one of joint1"),
        ("ft_bias_drift", "sensor", {"axis": "w"}, r"params\.axis: must be one of x, y, z"),
        ("actuation_latency", "dynamics", {"delay_s": 2.0}, r"params\.delay_s: must be in \(0.0, 1.0\]"),
    ],
)
def test_bad_parameters_by_type(kind, category, params, match):
    data = variant(injections=[{"category": category, "kind": kind, "start_s": 1, "end_s": 2, "params": params}])
    with pytest.raises(ScenarioError, match=r"<memory>: injections\[0\]\." + match):
        parse_scenario(data)


def test_error_names_the_right_entry():
    good = copy.deepcopy(VALID["injections"][0])
    bad = {**good, "end_s": 99}
    with pytest.raises(ScenarioError, match=r"injections\[1\]\.end_s"):
        parse_scenario(variant(injections=[good, bad]))
