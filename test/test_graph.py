"""The node graph is defined once and both the launch files and the CLI runner use it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.ros import graph
from sim_real_bridge.ros.graph import (
    BRIDGE_ARGUMENTS,
    DEMO_ARGUMENTS,
    GraphOptions,
    bridge_graph,
    demo_graph,
    options_from_arguments,
)
from sim_real_bridge.ros.runner import GraphRunner, node_command, ros_arguments

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def options() -> GraphOptions:
    return GraphOptions(config_dir=REPO / "config")


def test_demo_graph_has_the_five_nodes_in_their_namespaces(options: GraphOptions) -> None:
    names = [spec.fully_qualified_name for spec in demo_graph(options)]
    assert names == [
        "/sim/sim_robot", "/real/reality_standin", "/command_mirror", "/divergence_monitor", "/task_player",
    ]


def test_bridge_graph_is_the_mirror_and_the_monitor(options: GraphOptions) -> None:
    assert [spec.executable for spec in bridge_graph(options)] == ["command_mirror", "divergence_monitor"]


def test_namespaces_are_remapped_everywhere(repo_root: Path) -> None:
    options = GraphOptions(config_dir=repo_root / "config", sim_namespace="/gz", real_namespace="/ur5e/")
    mirror, monitor = bridge_graph(options)
    assert ("real/joint_trajectory", "/ur5e/joint_trajectory") in mirror.remappings
    assert ("sim/joint_states", "/gz/joint_states") in monitor.remappings
    assert ("real/wrench", "/ur5e/wrench") in monitor.remappings
    assert ("sim/joint_trajectory", "/gz/joint_trajectory") in monitor.remappings  # its run clock's start
    published = {topic.name for topic in mirror.publishes}
    assert {"/gz/joint_trajectory", "/ur5e/joint_trajectory"} <= published


def test_demo_task_waits_for_both_robots_and_the_monitor(options: GraphOptions) -> None:
    task = {spec.executable: spec for spec in demo_graph(options)}["task_player"]
    parameters = dict(task.parameters)
    assert parameters["wait_for_topics"] == ["/sim/joint_trajectory", "/real/joint_trajectory"]
    assert parameters["wait_for_nodes"] == ["command_mirror", "divergence_monitor"]


def test_every_executable_has_a_node_module_and_a_cmake_entry(options: GraphOptions) -> None:
    cmake = (REPO / "CMakeLists.txt").read_text()
    listed = re.search(r"set\(SRB_NODES ([^)]*)\)", cmake).group(1).split()
    executables = sorted({spec.executable for spec in demo_graph(options)})
    assert sorted(listed) == executables
    for exe in executables:
        assert (REPO / "sim_real_bridge" / "nodes" / f"{exe}.py").is_file(), f"no module for {exe}"


def test_ros_arguments_carry_name_namespace_params_and_remaps(options: GraphOptions) -> None:
    sim_robot = demo_graph(options)[0]
    args = ros_arguments(sim_robot)
    assert args[:3] == ["--ros-args", "-r", "__node:=sim_robot"]
    assert "__ns:=/sim" in args
    assert str(REPO / "config" / "sim_real_bridge.yaml") in args
    assert 'scenario:="tour"' in args and "use_sim_time:=false" in args
    assert "~/joint_trajectory:=/sim/joint_trajectory" in args
    assert node_command(sim_robot)[1:3] == ["-m", "sim_real_bridge.nodes.sim_robot"]


def test_every_launch_argument_has_a_description() -> None:
    for argument in BRIDGE_ARGUMENTS + DEMO_ARGUMENTS:
        assert len(argument.description) > 20, argument.name
    names = {a.name for a in BRIDGE_ARGUMENTS + DEMO_ARGUMENTS}
    assert {"use_sim_time", "scenario", "record", "sim_namespace", "real_namespace", "params_file"} <= names


@pytest.mark.parametrize("launch_file", ["demo.launch.py", "bridge.launch.py"])
def test_launch_files_use_the_shared_graph(launch_file: str) -> None:
    tree = ast.parse((REPO / "launch" / launch_file).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names if node.module == "sim_real_bridge.ros.graph"}
    assert {"BRIDGE_ARGUMENTS"} <= imported
    assert ("demo_graph" if launch_file.startswith("demo") else "bridge_graph") in imported
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body)


def test_options_from_arguments_parses_launch_strings(repo_root: Path) -> None:
    options = options_from_arguments({"use_sim_time": "True", "scenario": "nominal"}, repo_root / "config")
    assert options.use_sim_time is True and options.scenario == "nominal"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"use_sim_time": "maybe"}, "use_sim_time must be true or false"),
        ({"no_such_argument": "1"}, "unknown launch argument"),
    ],
)
def test_options_from_arguments_refuses_bad_values(repo_root: Path, values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        options_from_arguments(values, repo_root / "config")


@pytest.mark.parametrize("namespace", ["sim", "/", "/a b", ""])
def test_bad_namespace_is_refused_by_name(repo_root: Path, namespace: str) -> None:
    with pytest.raises(ConfigError, match="sim_namespace must be an absolute ROS namespace"):
        bridge_graph(GraphOptions(config_dir=repo_root / "config", sim_namespace=namespace))


def test_missing_params_file_is_named(repo_root: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match=f"parameter file not found: {missing}"):
        demo_graph(GraphOptions(config_dir=repo_root / "config", params_file=missing))


def test_runner_refuses_duplicate_node_names(options: GraphOptions) -> None:
    spec = demo_graph(options)[0]
    with pytest.raises(ConfigError, match="duplicate node names: /sim/sim_robot"):
        GraphRunner([spec, spec])


def test_graph_module_imports_neither_rclpy_nor_launch() -> None:
    tree = ast.parse(Path(graph.__file__).read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and (m.startswith("rclpy") or m.startswith("launch")) for m in modules)


def test_security_enabled_adds_each_nodes_enclave(options: GraphOptions, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = bridge_graph(options)[0]
    assert "--enclave" not in ros_arguments(spec)
    monkeypatch.setenv("ROS_SECURITY_ENABLE", "true")
    args = ros_arguments(spec)
    assert args[args.index("--enclave") + 1] == "/sim_real_bridge/command_mirror"


def test_extra_parameters_reach_only_their_node(repo_root: Path) -> None:
    options = GraphOptions(config_dir=repo_root / "config", extra_parameters={"task_player": {"duration_s": 600.0}})
    by_name = {spec.executable: spec for spec in demo_graph(options)}
    assert ("duration_s", 600.0) in by_name["task_player"].parameters
    assert all(key != "duration_s" for key, _ in by_name["sim_robot"].parameters)
