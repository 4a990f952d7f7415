"""README.md and docs/*.md against the code they describe.

Links and anchors resolve; the tests docs/FAULTS.md cites exist; the launch arguments,
command-line flags, topics and parameters README.md names are the ones the launch
files, the CLI parser, the node graph and the nodes declare.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest
import yaml

from sim_real_bridge.cli import build_parser
from sim_real_bridge.ros.graph import BRIDGE_ARGUMENTS, DEMO_ARGUMENTS, GraphOptions, demo_graph

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`]+)`")


def _section(text: str, heading: str) -> str:
    """The text under a markdown heading, up to the next heading of any level."""
    match = re.search(rf"^{re.escape(heading)}\n(.*?)(?=^#+ |\Z)", text, re.S | re.M)
    assert match, f"README.md has no section {heading!r}"
    return match.group(1)


def _table_rows(text: str) -> list[list[str]]:
    """Cells of every markdown table row but the header separators."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|[\s:|-]+\|$", line):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows[1:] if rows else rows


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    anchors = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title)))
    return anchors


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_and_their_anchors_resolve(path: Path) -> None:
    for target in LINK.findall(path.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        assert resolved.exists(), f"{path.name} links to {target}, which does not exist"
        if anchor:
            assert anchor in _anchors(resolved), f"{path.name} links to {target}: no such heading"


def test_every_test_cited_by_faults_md_exists() -> None:
    text = (ROOT / "docs" / "FAULTS.md").read_text()
    cited = re.findall(r"`(?:test/)?(test_\w+\.py)(?:::(\w+))?", text)
    assert len(cited) > 20
    for file_name, test_name in cited:
        path = ROOT / "test" / file_name
        assert path.is_file(), f"docs/FAULTS.md cites {file_name}, which does not exist"
        if test_name:
            names = {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)}
            assert test_name in names, f"docs/FAULTS.md cites {file_name}::{test_name}, which does not exist"


def test_readme_launch_arguments_are_the_declared_ones() -> None:
    rows = _table_rows(_section(README.read_text(), "## With ROS 2"))
    named = {name for row in rows for name in CODE_SPAN.findall(row[0])}
    assert named == {arg.name for arg in BRIDGE_ARGUMENTS + DEMO_ARGUMENTS}


def _subcommands() -> dict[str, set[str]]:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    flags = {}
    for name, sub in subparsers.choices.items():
        flags[name] = {opt for action in sub._actions for opt in action.option_strings}
        for child in sub._actions:
            if child.__class__.__name__ == "_SubParsersAction":
                for child_name, grandchild in child.choices.items():
                    flags[f"{name} {child_name}"] = {o for a in grandchild._actions for o in a.option_strings}
    return flags


def test_readme_commands_use_existing_subcommands_and_flags() -> None:
    flags = _subcommands()
    text = README.read_text().replace("\\\n", " ")
    commands = re.findall(r"sim-real-bridge ([a-z][^`\n#]*)", text)
    assert len(commands) > 10
    for command in commands:
        words = shlex.split(command.replace("[", " ").replace("]", " ").replace("|", " "))
        name = " ".join(words[:2]) if " ".join(words[:2]) in flags else words[0]
        assert name in flags, f"README.md runs `sim-real-bridge {command}`: no subcommand {name!r}"
        for word in words:
            if word.startswith("--"):
                assert word.split("=")[0] in flags[name], f"README.md: `sim-real-bridge {name}` has no {word}"


def test_every_topic_the_graph_publishes_is_in_the_readme_topic_table() -> None:
    rows = _table_rows(_section(README.read_text(), "### Topics"))
    listed = {topic for row in rows for topic in CODE_SPAN.findall(row[0])}
    graph = demo_graph(GraphOptions(config_dir=ROOT / "config"))
    published = {topic.name for node in graph for topic in node.publishes}
    assert published - listed == set()


def test_readme_parameters_are_declared_by_the_nodes() -> None:
    monitor = pytest.importorskip("sim_real_bridge.ros.monitor_params",
                                  reason="the monitor's parameters are declared by the rclpy node")
    mirror = pytest.importorskip("sim_real_bridge.nodes.command_mirror")
    from sim_real_bridge.core.config import EngineConfig

    limits = yaml.safe_load((ROOT / "config" / "robot_limits.yaml").read_text())
    declared = set(monitor.NODE_PARAMETERS) | set(mirror.TOPIC_PARAMS) | {"use_sim_time"}
    declared |= {arg.name for arg in BRIDGE_ARGUMENTS + DEMO_ARGUMENTS}  # `params_file:=`
    declared |= set(limits["/**/command_mirror"]["ros__parameters"])
    declared |= {f"{side}_topics.<stream>" for side in ("sim", "real")}
    engine = monitor.flat_engine_parameters("engine.", EngineConfig())
    declared |= set(engine) | {f"engine.{name.split('.')[1]}" for name in engine}
    for name in list(declared):  # `lag.warn_s`-style names and their `fit.*`, `engine.*` groups
        declared.add(name.split(".")[0] + ".*")
    text = _section(README.read_text(), "### Parameters")
    named = [span for span in CODE_SPAN.findall(text) if re.fullmatch(r"[a-z_]+(\.[a-z_<>*]+)+|[a-z]+_[a-z_]+", span)]
    assert len(named) > 15
    undeclared = {name for name in named if name not in declared and f"engine.{name}" not in declared}
    # Blocks of engine.* named by their prefix (`features.*`).
    undeclared = {name for name in undeclared if not (name.endswith(".*") and f"engine.{name[:-2]}" in
                                                      {".".join(e.split(".")[:2]) for e in engine})}
    assert undeclared == set(), f"README.md names parameters no node declares: {sorted(undeclared)}"


def _yaml_blocks(path: Path) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", path.read_text(), re.S)


def test_readme_yaml_examples_load_as_a_replay_config_and_a_scenario(tmp_path: Path) -> None:
    from sim_real_bridge.offline.replay_config import load_replay_config
    from sim_real_bridge.sim.scenario import load_scenario

    replay_block, scenario_block = _yaml_blocks(README)
    (tmp_path / "rig.yaml").write_text(replay_block)
    config = load_replay_config(tmp_path / "rig.yaml")
    assert config.sim_topics["joint_states"] == "/left_leader/joint_states" and config.sim_topics["wrench"] == ""
    assert dict(config.joint_map) == {"waist": "waist_joint", "shoulder": "shoulder_joint"}
    assert config.window_s == (10.0, 70.0) and config.engine_config().horizon_s == 0.3
    (tmp_path / "scenario.yaml").write_text(scenario_block)
    scenario = load_scenario(str(tmp_path / "scenario.yaml"))
    assert (scenario.task, scenario.robot, [i.kind for i in scenario.injections]) == ("wipe", "arm7", ["friction"])


def test_own_stack_md_replay_config_example_loads(tmp_path: Path) -> None:
    from sim_real_bridge.offline.replay_config import load_replay_config

    (block,) = [b for b in _yaml_blocks(ROOT / "docs" / "OWN_STACK.md") if "joint_map" in b]
    (tmp_path / "rig.yaml").write_text(block)
    assert load_replay_config(tmp_path / "rig.yaml").joint_map
