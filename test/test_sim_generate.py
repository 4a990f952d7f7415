"""The scenario generator: valid, deterministic per seed, and as varied as its docstring says.

Development seeds only (below 10000): seeds from 100000 up are for outside evaluation.
"""

from __future__ import annotations

import itertools

import pytest

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.sim.generate import generate, generate_scenario, write_scenarios
from sim_real_bridge.sim.robots import ROBOTS
from sim_real_bridge.sim.scenario import KINDS, load_scenario, parse_scenario
from sim_real_bridge.sim.tasks import build_program

pytestmark = pytest.mark.mujoco

SEEDS = range(0, 200)


@pytest.fixture(scope="module")
def scenarios() -> list[dict]:
    return generate(SEEDS.start, len(SEEDS))


def test_same_seed_same_scenarios_and_each_one_is_its_own_seed():
    first = generate(40, 4)
    assert generate(40, 4) == first
    assert first[2] == generate_scenario(42)
    assert [s["name"] for s in first] == ["gen_40", "gen_41", "gen_42", "gen_43"]
    assert generate_scenario(41) != generate_scenario(42)


def test_a_given_robot_keeps_the_seeds_task_sensors_and_timing():
    for seed in range(10):
        free, pinned = generate_scenario(seed), generate_scenario(seed, robot="ur6")
        assert pinned["robot"] == "ur6"
        assert (pinned["task"], pinned["duration_s"], pinned["sensors"]) == (free["task"], free["duration_s"],
                                                                               free["sensors"])
        if free["robot"] == "ur6":
            assert pinned["injections"] == free["injections"]


def test_every_scenario_is_valid_and_uses_only_its_robots_names(scenarios):
    for data in scenarios:
        scenario = parse_scenario(data)
        spec = ROBOTS[scenario.robot]
        for inj in scenario.injections:
            names = inj.params.get("joints", ()) + ((inj.params["joint"],) if "joint" in inj.params else ())
            assert set(names) <= set(spec.joint_names)
            assert inj.params.get("link", "tool") in spec.human_links


def test_the_mix_covers_what_the_issue_asks_for(scenarios):
    parsed = [parse_scenario(d) for d in scenarios]
    counts = {n: sum(len(s.injections) == n for s in parsed) for n in range(4)}
    assert all(counts[n] > 10 for n in range(4)), counts
    assert {s.robot for s in parsed} == set(ROBOTS)
    assert {inj.kind for s in parsed for inj in s.injections} == set(KINDS)
    nominal = [s for s in parsed if not s.injections]
    assert max(s.duration_s for s in nominal) > 300 and max(s.duration_s for s in nominal) <= 600
    assert sum(bool(s.idle) for s in nominal) > len(nominal) / 4
    assert any(not s.sensors.wrench for s in parsed) and any(s.sensors.encoder_resolution_rad > 0 for s in parsed)
    overlapping = ended_mid_task = 0
    for s in parsed:
        for a, b in itertools.combinations(s.injections, 2):
            if a.start_s < b.end_s and b.start_s < a.end_s:
                assert a.category != b.category, s.name
                overlapping += 1
            if a.category == b.category:
                assert a.end_s + 3.0 <= b.start_s or b.end_s + 3.0 <= a.start_s, s.name
        ended_mid_task += sum(inj.end_s < s.duration_s for inj in s.injections)
    assert overlapping > 10 and ended_mid_task > 50


def test_kinds_fit_the_task_and_the_sensors(scenarios):
    for data in scenarios:
        scenario = parse_scenario(data)
        program = build_program(scenario.task, scenario.duration_s, scenario.robot, scenario.idle)
        contact = program.contact_windows_s()
        for inj in scenario.injections:
            if inj.kind in ("friction", "stiffness", "object_mass"):
                assert any(inj.start_s < b and a < inj.end_s for a, b in contact), (scenario.name, inj)
            if inj.kind in ("stiffness", "object_mass"):
                # only where it changes the force: pressing into the table, pushing the object
                phase = "wipe" if inj.kind == "stiffness" else "push"
                assert any(p.name == phase and p.start_s < inj.end_s and inj.start_s < p.end_s
                           for p in program.phases), (scenario.name, inj)
            if not scenario.sensors.wrench:
                assert inj.kind != "ft_bias_drift" and inj.params.get("stream") != "wrench"


def test_magnitudes_lie_between_the_strong_and_the_weak_end(scenarios):
    seen_weak = set()
    for data in scenarios:
        for inj in parse_scenario(data).injections:
            for name, (strong, weak) in KINDS[inj.kind].generator_range.items():
                value = abs(inj.params[name])
                low, high = sorted((abs(strong), abs(weak)))
                assert low * 0.999 <= value <= high * 1.001, (data["name"], inj.kind, name, value)
                if abs(value - abs(weak)) < 0.3 * abs(strong - weak):
                    seen_weak.add(inj.kind)
    assert len(seen_weak) >= 10, "the weak (near the detection limit) end is drawn too"


def test_written_files_load_by_path(tmp_path):
    paths = write_scenarios(3, 3, tmp_path / "gen", robot="panda7")
    assert [p.name for p in paths] == ["gen_3.yaml", "gen_4.yaml", "gen_5.yaml"]
    for path, data in zip(paths, generate(3, 3, robot="panda7")):
        scenario = load_scenario(path)
        assert scenario == parse_scenario(data, source=str(path))
        assert scenario.robot == "panda7"


@pytest.mark.parametrize(("seed", "count", "robot", "match"), [
    (-1, 1, None, "seed must be >= 0 and count >= 1, got seed -1, count 1"),
    (0, 0, None, "seed must be >= 0 and count >= 1, got seed 0, count 0"),
    (0, 1, "kuka", "unknown robot 'kuka'; built-in robots: arm7, ur6, panda7"),
])
def test_bad_requests_are_refused(seed, count, robot, match):
    with pytest.raises(ConfigError, match=match):
        generate(seed, count, robot)


def test_an_unwritable_directory_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot create output directory .*file/out"):
        write_scenarios(0, 1, blocker / "out")
