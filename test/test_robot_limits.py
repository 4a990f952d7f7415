"""Each built-in robot's mirror limits match its model; the demo graph takes the robot from the scenario."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rclpy
import yaml

from sim_real_bridge.errors import ConfigError, ScenarioError
from sim_real_bridge.nodes.command_mirror import CommandMirror
from sim_real_bridge.ros.graph import GraphOptions, demo_graph, options_from_arguments
from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.robots import ROBOTS, robot_spec

ROBOT_NAMES = sorted(ROBOTS)


def limits_section(repo_root: Path, robot: str) -> dict:
    config = yaml.safe_load((repo_root / "config" / robot_spec(robot).limits_file).read_text())
    return config["/**/command_mirror"]["ros__parameters"]


@pytest.mark.mujoco
@pytest.mark.parametrize("robot", ROBOT_NAMES)
def test_limits_file_matches_the_robot(repo_root, robot):
    section = limits_section(repo_root, robot)
    physics = ArmPhysics(robot=robot)
    assert section["joint_names"] == list(physics.joint_names)
    np.testing.assert_allclose(section["position_lower_rad"], physics.joint_range_rad[:, 0], atol=1e-9)
    np.testing.assert_allclose(section["position_upper_rad"], physics.joint_range_rad[:, 1], atol=1e-9)
    assert section["velocity_max_rad_s"] == list(robot_spec(robot).velocity_max_rad_s)


@pytest.mark.ros
@pytest.mark.parametrize("robot", ["ur6", "panda7"])
def test_limits_file_loads_as_mirror_parameters(repo_root, robot):
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        path = repo_root / "config" / robot_spec(robot).limits_file
        mirror = CommandMirror(context=context, cli_args=["--ros-args", "--params-file", str(path)])
        assert mirror.get_parameter("joint_names").value == list(robot_spec(robot).joint_names)
        mirror.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def _by_name(specs) -> dict:
    return {spec.name: spec for spec in specs}


def test_demo_graph_runs_the_scenarios_robot_with_its_limits(repo_root, tmp_path):
    scenario = tmp_path / "on_panda.yaml"
    scenario.write_text(yaml.safe_dump({"name": "on_panda", "seed": 1, "duration_s": 10, "task": "reach",
                                        "robot": "panda7", "injections": []}))
    nodes = _by_name(demo_graph(GraphOptions(config_dir=repo_root / "config", scenario=str(scenario))))
    for name in ("sim_robot", "reality_standin", "task_player"):
        assert dict(nodes[name].parameters)["robot"] == "panda7"
    assert nodes["command_mirror"].parameter_files[0].name == "robot_limits_panda7.yaml"
    default = _by_name(demo_graph(GraphOptions(config_dir=repo_root / "config")))
    assert dict(default["sim_robot"].parameters)["robot"] == "arm7"
    assert default["command_mirror"].parameter_files[0].name == "robot_limits.yaml"


def test_robot_argument_overrides_the_scenario(repo_root):
    options = options_from_arguments({"scenario": "tour", "robot": "ur6"}, repo_root / "config")
    nodes = _by_name(demo_graph(options))
    assert dict(nodes["reality_standin"].parameters)["robot"] == "ur6"
    assert nodes["command_mirror"].parameter_files[0].name == "robot_limits_ur6.yaml"
    own = repo_root / "config" / "robot_limits.yaml"
    explicit = _by_name(demo_graph(GraphOptions(config_dir=repo_root / "config", robot="ur6", limits_file=own)))
    assert explicit["command_mirror"].parameter_files[0] == own


def test_bad_robot_choices_are_refused(repo_root, tmp_path):
    with pytest.raises(ConfigError, match="robot must be one of arm7, ur6, panda7, got 'kuka'"):
        demo_graph(GraphOptions(config_dir=repo_root / "config", robot="kuka"))
    stall = tmp_path / "stall.yaml"
    stall.write_text(yaml.safe_dump({"name": "stall", "seed": 1, "duration_s": 10, "task": "reach", "injections": [
        {"category": "unauthored", "kind": "joint_stall", "start_s": 1, "end_s": 2, "params": {"joint": "joint4"}}]}))
    # joint4 is arm7's: the UR has no such joint.
    with pytest.raises(ScenarioError, match=r"stall\.yaml: injections\[0\]\.params\.joint: must be one of shoulder_pan_joint"):
        demo_graph(GraphOptions(config_dir=repo_root / "config", scenario=str(stall), robot="ur6"))
