"""Every shipped configuration file against the node graph and the nodes themselves.

Parameter files (config/*.yaml, config/stacks/*.yaml) are read twice: with PyYAML for
their structure, and through rcl's own parser by starting the node they configure
with ``--params-file`` and reading the values back. The rviz config, the rqt
perspective and the SROS2 policy are checked against the topics the graph declares
and, for the policy, against every endpoint each node really creates.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Iterator

import pytest
import rclpy
import yaml
from rclpy.node import Node

from sim_real_bridge.ros.graph import GraphOptions, NodeSpec, demo_graph

pytestmark = pytest.mark.ros

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "config"
#: ROS parameter files; config/scenarios/ holds scenario YAML, checked by its own tests.
PARAM_FILES = sorted(p for p in CONFIG.rglob("*.yaml") if "scenarios" not in p.relative_to(CONFIG).parts)
AGGREGATOR_FILE = CONFIG / "diagnostic_analyzers.yaml"
RVIZ_FILE = CONFIG / "rviz" / "sim_real_bridge.rviz"
PERSPECTIVE_FILE = CONFIG / "rqt" / "sim_real_bridge.perspective"
POLICY_FILE = CONFIG / "security" / "policy.xml"
STACK_FILES = sorted((CONFIG / "stacks").glob("*.yaml"))

NODE_CLASSES = {
    "sim_robot": ("sim_real_bridge.nodes.sim_robot", "SimRobotNode"),
    "reality_standin": ("sim_real_bridge.nodes.reality_standin", "RealityStandinNode"),
    "task_player": ("sim_real_bridge.nodes.task_player", "TaskPlayerNode"),
    "command_mirror": ("sim_real_bridge.nodes.command_mirror", "CommandMirror"),
    "divergence_monitor": ("sim_real_bridge.nodes.divergence_monitor", "DivergenceMonitor"),
}
#: The name launch_support.py gives diagnostic_aggregator's aggregator_node.
AGGREGATOR_NODE = "diagnostic_aggregator"


def graph() -> list[NodeSpec]:
    return demo_graph(GraphOptions(config_dir=CONFIG))


GRAPH = {spec.name: spec for spec in graph()}
GRAPH_TOPICS = {topic.name: topic.msg_type for spec in GRAPH.values() for topic in spec.publishes}


def flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested maps joined with '.', as rcl's YAML parser names parameters."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def sections(path: Path) -> dict[str, dict[str, Any]]:
    """``{node pattern: flattened parameters}`` of a parameter file, structure checked."""
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict) and data, f"{path}: not a mapping of node names"
    out = {}
    for key, body in data.items():
        assert re.fullmatch(r"/\*\*|(/\*\*)?(/[A-Za-z_]\w*)*/?[A-Za-z_]\w*", key), f"{path}: bad node key {key!r}"
        assert isinstance(body, dict) and list(body) == ["ros__parameters"], (
            f"{path}: {key} must hold exactly ros__parameters"
        )
        flat = flatten(body["ros__parameters"])
        for name, value in flat.items():
            if isinstance(value, list):
                kinds = {type(v) for v in value}
                assert len(kinds) <= 1, f"{path}: {key} {name} mixes types {kinds} (rcl refuses it)"
        out[key] = flat
    return out


def node_of(key: str) -> str:
    """Node name a section key addresses ('' for the /** wildcard)."""
    return "" if key == "/**" else key.rsplit("/", 1)[-1]


@pytest.fixture(scope="module")
def context() -> Iterator[rclpy.Context]:
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    yield ctx
    rclpy.shutdown(context=ctx)


def make_node(name: str, context: rclpy.Context, tmp_path: Path, **kwargs: Any) -> Node:
    module, cls = NODE_CLASSES[name]
    node_cls = getattr(importlib.import_module(module), cls)
    overrides = list(kwargs.pop("parameter_overrides", []))
    if name == "divergence_monitor":
        overrides.append(rclpy.parameter.Parameter("output_dir", value=str(tmp_path / "out")))
    return node_cls(context=context, parameter_overrides=overrides, **kwargs)


def declared_names(node: Node) -> set[str]:
    return set(node.list_parameters([], 0).names)


# --- parameter files -------------------------------------------------------------


def test_there_are_parameter_files_and_stacks() -> None:
    names = {p.relative_to(CONFIG).as_posix() for p in PARAM_FILES}
    assert {"sim_real_bridge.yaml", "robot_limits.yaml", "diagnostic_analyzers.yaml"} <= names
    assert {p.name for p in STACK_FILES} == {"ros2_control_gz.yaml", "mujoco_ros2_control.yaml", "isaac_sim.yaml",
                                             "teleop_leader_follower.yaml"}


def undeclared(path: Path, context: rclpy.Context, tmp_path: Path) -> dict[str, list[str]]:
    """Per target node, the parameters ``path`` sets that the node does not declare."""
    out: dict[str, list[str]] = {}
    for key, params in sections(path).items():
        node = node_of(key)
        # A /** section reaches every node, so each of them must declare its parameters.
        targets = [node] if node else list(GRAPH)
        assert all(t in GRAPH for t in targets), f"{path}: {key} names no node of the graph"
        for target in targets:
            instance = make_node(target, context, tmp_path)
            try:
                unknown = sorted(set(params) - declared_names(instance))
            finally:
                instance.destroy_node()
            if unknown:
                out[target] = unknown
    return out


@pytest.mark.parametrize("path", [p for p in PARAM_FILES if p != AGGREGATOR_FILE], ids=lambda p: p.name)
def test_parameter_file_names_nodes_of_the_graph_and_their_parameters(path, context, tmp_path) -> None:
    assert undeclared(path, context, tmp_path) == {}


def test_parameter_check_catches_typos_and_bad_structure(context, tmp_path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("/**/command_mirror:\n  ros__parameters:\n    topics:\n      inptu: /x\n")
    assert undeclared(typo, context, tmp_path) == {"command_mirror": ["topics.inptu"]}
    stray = tmp_path / "stray.yaml"
    stray.write_text("/**/no_such_node:\n  ros__parameters:\n    a: 1\n")
    with pytest.raises(AssertionError, match="names no node of the graph"):
        undeclared(stray, context, tmp_path)
    flat = tmp_path / "flat.yaml"
    flat.write_text("/**/command_mirror:\n  max_step_rad: 0.1\n")
    with pytest.raises(AssertionError, match="must hold exactly ros__parameters"):
        sections(flat)
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text("/**/command_mirror:\n  ros__parameters:\n    position_lower_rad: [1, 2.0]\n")
    with pytest.raises(AssertionError, match="mixes types"):
        sections(mixed)


@pytest.mark.parametrize("path", [p for p in PARAM_FILES if p != AGGREGATOR_FILE], ids=lambda p: p.name)
def test_parameter_file_loads_through_rcl_into_its_nodes(path, context, tmp_path) -> None:
    for key, params in sections(path).items():
        target = node_of(key) or "command_mirror"
        instance = make_node(target, context, tmp_path, cli_args=["--ros-args", "--params-file", str(path)])
        try:
            for name, value in params.items():
                got = instance.get_parameter(name).value
                got = list(got) if isinstance(got, (list, tuple)) or type(got).__name__ == "array" else got
                assert got == value, f"{path}: {target} {name} = {got!r}, file says {value!r}"
        finally:
            instance.destroy_node()


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_stack_maps_both_sides_and_the_mirror(path) -> None:
    data = sections(path)
    monitor = data["/**/divergence_monitor"]
    if monitor["sim_topics.joint_trajectory"] == "":
        # A rig without commands (a teleoperation leader is the reference): joint states
        # only, the optional streams off, the mirror left at its defaults (idle).
        assert "/**/command_mirror" not in data
        for side in ("sim", "real"):
            assert monitor[f"{side}_topics.joint_states"].startswith("/"), f"{path}: {side} joint_states unmapped"
            assert monitor[f"{side}_topics.wrench"] == monitor[f"{side}_topics.joint_trajectory"] == ""
        return
    mirror = data["/**/command_mirror"]
    assert set(mirror) == {"topics.input", "topics.sim_output", "topics.real_output", "topics.real_joint_states"}
    for side in ("sim", "real"):
        for stream in ("joint_states", "wrench", "joint_trajectory"):
            assert monitor[f"{side}_topics.{stream}"].startswith("/"), f"{path}: {side} {stream} unmapped"
    # The monitor watches exactly what the mirror sends and what the gate measures.
    assert monitor["sim_topics.joint_trajectory"] == mirror["topics.sim_output"]
    assert monitor["real_topics.joint_trajectory"] == mirror["topics.real_output"]
    assert monitor["real_topics.joint_states"] == mirror["topics.real_joint_states"]
    assert len({mirror["topics.input"], mirror["topics.sim_output"], mirror["topics.real_output"]}) == 3


# --- diagnostic aggregator ---------------------------------------------------------


def expected_status_names(context: rclpy.Context, tmp_path: Path) -> list[str]:
    mirror = make_node("command_mirror", context, tmp_path)
    try:
        mirror_status = mirror._status().name
    finally:
        mirror.destroy_node()
    return [
        "sim_robot: physics",
        "reality_standin: physics",
        mirror_status,
        "divergence_monitor: /sim/joint_states",
        "divergence_monitor: /real/wrench",
        "divergence_monitor: /isaac/joint_states",
        "divergence_monitor: snapshots",
        "divergence_monitor: alignment",
    ]


def analyzers(params: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Analyzer name -> its parameters, groups expanded (dotted parameter names)."""
    names = {key.split(".")[0] for key in params if "." in key}
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        own = {key[len(name) + 1:]: value for key, value in params.items() if key.startswith(name + ".")}
        if own.get("type") == "diagnostic_aggregator/AnalyzerGroup":
            nested = {key[len("analyzers."):]: v for key, v in own.items() if key.startswith("analyzers.")}
            out.update(analyzers(nested, f"{prefix}{name}/"))
        out[prefix + name] = own
    return out


def test_aggregator_file_loads_under_the_launch_name_and_groups_every_status(context, tmp_path) -> None:
    [(key, params)] = sections(AGGREGATOR_FILE).items()
    assert key == "/**" or node_of(key) == AGGREGATOR_NODE
    node = rclpy.create_node(
        AGGREGATOR_NODE, context=context, automatically_declare_parameters_from_overrides=True,
        cli_args=["--ros-args", "--params-file", str(AGGREGATOR_FILE)],
    )
    try:
        loaded = {name: node.get_parameter(name).value for name in declared_names(node)}
    finally:
        node.destroy_node()
    for name, value in params.items():
        got = list(loaded[name]) if isinstance(loaded[name], (list, tuple)) else loaded[name]
        assert got == value, name
    found = analyzers(params)
    assert {"robots", "mirror", "monitor", "monitor/streams", "monitor/snapshots"} <= set(found)
    generic = {name: a for name, a in found.items() if a["type"] == "diagnostic_aggregator/GenericAnalyzer"}
    for name, analyzer in found.items():
        assert analyzer["type"] in ("diagnostic_aggregator/GenericAnalyzer", "diagnostic_aggregator/AnalyzerGroup")
        assert analyzer.get("path"), f"{name} has no path"
    for status in expected_status_names(context, tmp_path):
        matching = [n for n, a in generic.items() if any(status.startswith(s) for s in a.get("startswith", []))]
        assert len(matching) == 1, f"status {status!r} is matched by {matching}"


# --- rviz ------------------------------------------------------------------------------


def rviz_displays(displays: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for display in displays:
        yield display
        yield from rviz_displays(display.get("Displays", []))


def test_rviz_config_shows_graph_topics_in_world() -> None:
    config = yaml.safe_load(RVIZ_FILE.read_text())
    manager = config["Visualization Manager"]
    assert manager["Global Options"]["Fixed Frame"] == "world"
    displays = list(rviz_displays(manager["Displays"]))
    assert all(d["Class"].startswith("rviz_default_plugins/") for d in displays)
    by_topic = {}
    for display in displays:
        if "Topic" in display:
            topic = display["Topic"]["Value"]
            assert topic in GRAPH_TOPICS, f"rviz shows {topic}, which no graph node publishes"
            by_topic[topic] = display
    assert {d["Class"] for d in displays} >= {"rviz_default_plugins/Grid", "rviz_default_plugins/MarkerArray"}
    assert by_topic["/divergence/markers"]["Class"] == "rviz_default_plugins/MarkerArray"
    assert GRAPH_TOPICS["/divergence/markers"] == "visualization_msgs/msg/MarkerArray"
    for name in ("ee_pose", "object_pose"):
        sim, real = by_topic[f"/sim/{name}"], by_topic[f"/real/{name}"]
        assert sim["Class"] == real["Class"] == "rviz_default_plugins/Pose"
        assert GRAPH_TOPICS[f"/sim/{name}"] == "geometry_msgs/msg/PoseStamped"
        assert sim["Color"] != real["Color"]


# --- rqt -------------------------------------------------------------------------------


def message_class(type_name: str):
    package, _, name = type_name.replace("/msg/", "/").partition("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


def resolve_field(type_name: str, path: str) -> str:
    """Type of ``path`` ('a/b[2]') inside message ``type_name``; raises KeyError if absent."""
    for part in path.split("/"):
        match = re.fullmatch(r"(\w+)(\[(\d+)\])?", part)
        assert match, f"bad field path part {part!r}"
        field_type = message_class(type_name).get_fields_and_field_types()[match.group(1)]
        if match.group(2):
            assert field_type.startswith("sequence<") or "[" in field_type, f"{part}: {field_type} is no array"
            field_type = field_type.removeprefix("sequence<").split(",")[0].rstrip(">").split("[")[0]
        type_name = field_type
    return type_name


def test_perspective_plots_residual_fields_of_graph_topics() -> None:
    data = json.loads(PERSPECTIVE_FILE.read_text())
    manager = data["groups"]["pluginmanager"]
    running = ast.literal_eval(manager["keys"]["running-plugins"]["repr"])
    assert running["rqt_robot_monitor/RobotMonitor"] == [1]
    plotted = []
    for serial in running["rqt_plot/Plot"]:
        settings = manager["groups"][f"plugin__rqt_plot__Plot__{serial}"]["groups"]["plugin"]["keys"]
        values = {key: ast.literal_eval(value["repr"]) for key, value in settings.items()}
        assert values["autoscroll"] is True
        assert len(values["x_limits"]) == len(values["y_limits"]) == 2
        plotted += values["topics"]
    assert "/divergence/joints/position_residual_rad[6]" in plotted
    for entry in plotted:
        topic = max((t for t in GRAPH_TOPICS if entry.startswith(t + "/")), key=len, default=None)
        assert topic, f"{entry} is on no graph topic"
        assert resolve_field(GRAPH_TOPICS[topic], entry[len(topic) + 1:]) in ("double", "float")


def test_field_resolution_rejects_missing_fields() -> None:
    with pytest.raises(KeyError, match="no_such_field"):
        resolve_field("sim_real_bridge/msg/JointDivergence", "no_such_field")


# --- SROS2 policy --------------------------------------------------------------------

_RULES = {"topics": ("topic", {"publish", "subscribe"}), "services": ("service", {"reply", "request"}),
          "actions": ("action", {"call", "execute"})}


def load_policy(path: Path = POLICY_FILE) -> dict[str, dict[str, Any]]:
    """Profiles by node name, schema rules of sros2's policy.xsd (0.2.0) checked."""
    with_comments = ET.parse(path, ET.XMLParser(target=ET.TreeBuilder(insert_comments=True)))
    # sros2's generate_artifacts walks every child of <enclaves> (lxml keeps comments).
    assert not [e for e in with_comments.getroot().iter() if e.tag is ET.Comment], "comment inside <policy>"
    root = ET.parse(path).getroot()
    assert root.tag == "policy" and root.get("version") == "0.2.0"
    assert [child.tag for child in root] == ["enclaves"]
    profiles: dict[str, dict[str, Any]] = {}
    for enclave in root.find("enclaves"):
        assert enclave.tag == "enclave" and enclave.get("path", "").startswith("/")
        assert [child.tag for child in enclave] == ["profiles"]
        for profile in enclave.find("profiles"):
            assert profile.tag == "profile" and set(profile.attrib) == {"ns", "node"}
            rules: dict[str, set[str]] = {}
            for group in profile:
                item, qualifiers = _RULES[group.tag]
                assert set(group.attrib) <= qualifiers and set(group.attrib.values()) <= {"ALLOW", "DENY"}
                assert group.attrib, f"{group.tag} without a rule"
                for child in group:
                    assert child.tag == item and child.text and child.text.strip()
                    for qualifier, verdict in group.attrib.items():
                        if verdict == "ALLOW":
                            rules.setdefault(qualifier, set()).add(child.text.strip())
            profiles[profile.get("node")] = {"ns": profile.get("ns"), "enclave": enclave.get("path"),
                                             "rules": rules}
    return profiles


def fully_qualified(name: str, ns: str, node: str) -> str:
    base = ns.rstrip("/")
    if name.startswith("~"):
        return f"{base}/{node}{name[1:]}"
    return name if name.startswith("/") else f"{base}/{name}"


def allowed(profile: dict[str, Any], node: str, qualifier: str) -> set[str]:
    return {fully_qualified(n, profile["ns"], node) for n in profile["rules"].get(qualifier, set())}


def test_policy_has_a_profile_for_every_graph_node_allowing_what_it_publishes() -> None:
    profiles = load_policy()
    for name, spec in GRAPH.items():
        assert name in profiles, f"no profile for {name}"
        profile = profiles[name]
        assert profile["ns"] == (spec.namespace or "/")
        assert profile["enclave"] == f"/sim_real_bridge/{name}"
        missing = {t.name for t in spec.publishes} - allowed(profile, name, "publish")
        assert not missing, f"{name} publishes {sorted(missing)} outside its policy"
        assert "/rosout" in allowed(profile, name, "publish")
        assert "/parameter_events" in allowed(profile, name, "publish") & allowed(profile, name, "subscribe")


def test_policy_checker_catches_a_missing_topic(tmp_path) -> None:
    text = POLICY_FILE.read_text().replace("<topic>/divergence/markers</topic>", "")
    broken = tmp_path / "policy.xml"
    broken.write_text(text)
    profile = load_policy(broken)["divergence_monitor"]
    assert "/divergence/markers" not in allowed(profile, "divergence_monitor", "publish")
    commented = tmp_path / "commented.xml"
    commented.write_text(POLICY_FILE.read_text().replace("  <enclaves>\n", "  <enclaves><!-- x -->\n"))
    with pytest.raises(AssertionError, match="comment inside <policy>"):
        load_policy(commented)


def test_policy_allows_every_endpoint_the_nodes_create(context, tmp_path) -> None:
    profiles = load_policy()
    for name, spec in GRAPH.items():
        cli = ["--ros-args"]
        for path in spec.parameter_files:
            cli += ["--params-file", str(path)]
        for source, target in spec.remappings:
            cli += ["-r", f"{source}:={target}"]
        overrides = [rclpy.parameter.Parameter(k, value=v) for k, v in spec.parameters if k != "output_dir"]
        node = make_node(name, context, tmp_path, namespace=spec.namespace or "/", cli_args=cli,
                         parameter_overrides=overrides)
        try:
            publishes = {p.topic_name for p in node.publishers}
            subscribes = {s.topic_name for s in node.subscriptions}
            serves = {node.resolve_service_name(s.srv_name) for s in node.services}
        finally:
            node.destroy_node()
        profile = profiles[name]
        assert publishes - allowed(profile, name, "publish") == set(), name
        assert subscribes - allowed(profile, name, "subscribe") == set(), name
        assert serves - allowed(profile, name, "reply") == set(), name
        assert {t.name for t in spec.publishes} <= publishes, f"{name}: graph.py declares topics it never creates"
