"""Scenario files: the built-in library loads; every invalid input is refused by name."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from sim_real_bridge.errors import ScenarioError
from sim_real_bridge.sim.physics import ARM_JOINT_NAMES
from sim_real_bridge.sim.robots import ROBOTS
from sim_real_bridge.sim.scenario import (
    CATEGORIES,
    KINDS,
    Injection,
    Sensors,
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


# ------------------------------------------------------- robot, sensors, idle windows
def test_robot_sensors_and_idle_are_optional_with_defaults():
    scenario = parse_scenario(VALID)
    assert scenario.robot == "arm7" and scenario.sensors == Sensors() and scenario.sensors.ideal
    assert scenario.idle == ()
    full = parse_scenario(variant(robot="ur6", sensors={"wrench": False, "encoder_resolution_rad": 0.001,
                                                        "joint_noise_rad": 1e-4, "effort_noise": 0.2},
                                  idle=[{"start_s": 2, "end_s": 9.5}]))
    assert full.robot == "ur6"
    assert full.sensors == Sensors(False, 0.001, 1e-4, 0.2) and not full.sensors.ideal
    assert full.idle == ((2.0, 9.5),)


@pytest.mark.parametrize(
    ("robot", "kind", "param", "expected"),
    [
        ("arm7", "joint_stall", "joint", "joint4"),
        ("ur6", "joint_stall", "joint", "elbow_joint"),
        ("panda7", "joint_stall", "joint", "panda_joint4"),
        ("ur6", "push", "link", "wrist_1_link"),
        ("panda7", "hold", "link", "panda_link6"),
        ("ur6", "gain", "joints", ROBOTS["ur6"].joint_names),
    ],
)
def test_parameters_naming_joints_or_links_default_per_robot(robot, kind, param, expected):
    data = variant(robot=robot, injections=[{"category": KINDS[kind].category, "kind": kind, "start_s": 1, "end_s": 2}])
    assert parse_scenario(data).injections[0].params[param] == expected


def test_robot_override_checks_names_against_that_robot(tmp_path):
    path = write(tmp_path, variant(injections=[{"category": "unauthored", "kind": "joint_stall", "start_s": 1,
                                                "end_s": 2}]))
    assert load_scenario(path, robot="panda7").injections[0].params["joint"] == "panda_joint4"
    named = variant(injections=[{"category": "unauthored", "kind": "joint_stall", "start_s": 1, "end_s": 2,
                                 "params": {"joint": "joint2"}}])
    with pytest.raises(ScenarioError, match=r"s\.yaml: injections\[0\]\.params\.joint: must be one of "
                                            r"shoulder_pan_joint.*\(joints of ur6\), got 'joint2'"):
        load_scenario(write(tmp_path, named), robot="ur6")
    with pytest.raises(ScenarioError, match=r"s\.yaml: robot \(override\): must be one of arm7, ur6, panda7"):
        load_scenario(path, robot="kuka")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (variant(robot="kuka"), r"robot: must be one of arm7, ur6, panda7, got 'kuka'"),
        (variant(robot=7), r"robot: must be one of arm7, ur6, panda7, got 7"),
        (variant(sensors=[1]), r"sensors: must be a mapping, got list"),
        (variant(sensors={"lidar": True}), r"sensors\.lidar: unknown field \(expected wrench, encoder_resolution_rad"),
        (variant(sensors={"wrench": "no"}), r"sensors\.wrench: must be true or false, got 'no'"),
        (variant(sensors={"encoder_resolution_rad": -1e-3}), r"sensors\.encoder_resolution_rad: must be in \[0.0, 0.1\]"),
        (variant(sensors={"joint_noise_rad": "low"}), r"sensors\.joint_noise_rad: must be a finite number"),
        (variant(sensors={"effort_noise": 1000}), r"sensors\.effort_noise: must be in \[0.0, 100.0\]"),
        (variant(idle={"start_s": 1}), r"idle: must be a list, got dict"),
        (variant(idle=[[1, 2]]), r"idle\[0\]: must be a mapping with start_s and end_s"),
        (variant(idle=[{"start_s": 1, "end_s": 2}, {"start_s": 5, "end_s": 40}]),
         r"idle\[1\]\.end_s: 40.0 is after the run ends \(duration_s 30.0\)"),
        (variant(idle=[{"start_s": 3, "end_s": 3}]), r"idle\[0\]\.end_s: 3.0 is not after start_s 3.0"),
        (variant(idle=[{"start_s": "x", "end_s": 3}]), r"idle\[0\]\.start_s: must be a finite number"),
        (variant(robot="ur6", injections=[{"category": "human", "kind": "push", "start_s": 1, "end_s": 2,
                                           "params": {"link": "link6"}}]),
         r"injections\[0\]\.params\.link: must be one of shoulder_link.*\(links of ur6\), got 'link6'"),
        (variant(robot="panda7", injections=[{"category": "dynamics", "kind": "gain", "start_s": 1, "end_s": 2,
                                              "params": {"joints": ["joint1"]}}]),
         r"injections\[0\]\.params\.joints: must be 'all', a joint name or a list of joint names of panda7"),
        (variant(sensors={"wrench": False}, injections=[{"category": "sensor", "kind": "ft_bias_drift",
                                                         "start_s": 1, "end_s": 2}]),
         r"injections\[0\]\.kind: ft_bias_drift on the wrench stream needs a wrench sensor"),
        (variant(sensors={"wrench": False}, injections=[{"category": "sensor", "kind": "dropout",
                                                         "start_s": 1, "end_s": 2}]),
         r"injections\[0\]\.params\.stream: dropout on the wrench stream needs a wrench sensor, and sensors\.wrench is false"),
    ],
)
def test_invalid_robot_sensors_and_idle_name_file_and_field(tmp_path, data, match):
    path = write(tmp_path, data, "bad.yaml")
    with pytest.raises(ScenarioError, match=r"bad\.yaml: " + match):
        load_scenario(path)


def test_every_kind_documents_a_generator_range_within_its_checks():
    for kind, spec in KINDS.items():
        for pname, (strong, weak) in spec.generator_range.items():
            check = spec.params[pname].check
            assert check(strong) == strong and check(weak) == weak, (kind, pname)
