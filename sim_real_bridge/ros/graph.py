"""The node graph, defined once: the launch files and the CLI runner both read it.

Nothing here imports rclpy or launch, so the launch files (on a ROS 2 distribution)
and :mod:`sim_real_bridge.ros.runner` (anywhere rclpy runs) build exactly the same
executables, names, namespaces, parameter files and remappings from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.sim.robots import ROBOTS, robot_spec

PACKAGE = "sim_real_bridge"

JOINT_STATE = "sensor_msgs/msg/JointState"
WRENCH = "geometry_msgs/msg/WrenchStamped"
POSE = "geometry_msgs/msg/PoseStamped"
TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
DIAGNOSTICS = "diagnostic_msgs/msg/DiagnosticArray"
MARKERS = "visualization_msgs/msg/MarkerArray"
CLOCK = "rosgraph_msgs/msg/Clock"


@dataclass(frozen=True)
class TopicSpec:
    """A topic a node publishes, with its ROS type name (``pkg/msg/Type``)."""

    name: str
    msg_type: str


@dataclass(frozen=True)
class NodeSpec:
    """One node of the graph.

    Attributes:
        executable: Executable under ``lib/sim_real_bridge``; also the module in
            ``sim_real_bridge.nodes`` and the node name.
        namespace: ROS namespace, with a leading slash, or "" for the root.
        parameter_files: Parameter YAML files (absolute paths).
        parameters: Inline parameter overrides, applied after the files.
        remappings: ``(from, to)`` remapping rules.
        publishes: Topics the node publishes (fully qualified names).
    """

    executable: str
    namespace: str = ""
    parameter_files: tuple[Path, ...] = ()
    parameters: tuple[tuple[str, object], ...] = ()
    remappings: tuple[tuple[str, str], ...] = ()
    publishes: tuple[TopicSpec, ...] = ()

    @property
    def name(self) -> str:
        """Node name (equal to the executable name)."""
        return self.executable

    @property
    def enclave(self) -> str:
        """SROS2 enclave of the node (config/security/policy.xml has its profile)."""
        return f"/{PACKAGE}/{self.name}"

    @property
    def fully_qualified_name(self) -> str:
        """``/namespace/name`` of the node."""
        return f"{self.namespace.rstrip('/')}/{self.name}" if self.namespace else f"/{self.name}"


@dataclass(frozen=True)
class GraphOptions:
    """Choices a user makes when starting a graph (launch arguments, CLI flags).

    Attributes:
        config_dir: Directory holding the parameter files (``share/<pkg>/config``).
        scenario: Built-in scenario name or path to a scenario YAML (demo only).
        robot: Built-in robot of the demo (arm7, ur6, panda7); "" means the scenario's.
        use_sim_time: Run the simulated robot on /clock.
        sim_namespace: Namespace of the simulated robot's topics.
        real_namespace: Namespace of the physical robot's topics.
        params_file: Parameter file of the mirror and the monitor.
        output_dir: Where the monitor writes snapshots and the event log.
        command_topic: Input of the command mirror.
        limits_file: Joint limits of the real robot for the mirror's safety gate;
            None means config/robot_limits.yaml (the built-in arm7), or in the demo the
            built-in robot's own file (config/robot_limits_<robot>.yaml).
    """

    config_dir: Path
    scenario: str = "tour"
    robot: str = ""
    use_sim_time: bool = False
    sim_namespace: str = "/sim"
    real_namespace: str = "/real"
    params_file: Path | None = None
    output_dir: Path = Path("sim_real_bridge_out")
    command_topic: str = "/bridge/joint_trajectory"
    limits_file: Path | None = None
    extra_parameters: dict[str, dict[str, object]] = field(default_factory=dict)


def _namespace(value: str, what: str) -> str:
    value = value.strip()
    if not value.startswith("/") or value.rstrip("/") == "" or " " in value:
        raise ConfigError(f"{what} must be an absolute ROS namespace such as '/sim', got {value!r}")
    return value.rstrip("/")


def _existing_file(path: Path, what: str) -> Path:
    if not Path(path).is_file():
        raise ConfigError(f"{what} not found: {path}")
    return Path(path)


def _params_file(options: GraphOptions) -> Path:
    return _existing_file(options.params_file or options.config_dir / "sim_real_bridge.yaml", "parameter file")


def _robot_topics(namespace: str) -> tuple[TopicSpec, ...]:
    return (
        TopicSpec(f"{namespace}/joint_states", JOINT_STATE),
        TopicSpec(f"{namespace}/wrench", WRENCH),
        TopicSpec(f"{namespace}/ee_pose", POSE),
        TopicSpec(f"{namespace}/object_pose", POSE),
    )


def _extra(options: GraphOptions, executable: str) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(options.extra_parameters.get(executable, {}).items()))


def bridge_graph(options: GraphOptions) -> list[NodeSpec]:
    """The mirror and the monitor, for a user's own simulator and robot.

    Args:
        options: Namespaces, parameter file and output directory.

    Returns:
        ``[command_mirror, divergence_monitor]``.
    """
    sim_ns = _namespace(options.sim_namespace, "sim_namespace")
    real_ns = _namespace(options.real_namespace, "real_namespace")
    params = (_params_file(options),)
    sim_time = (("use_sim_time", options.use_sim_time),)
    mirror = NodeSpec(
        executable="command_mirror",
        parameter_files=(
            _existing_file(options.limits_file or options.config_dir / "robot_limits.yaml", "limits file"),
            *params,
        ),
        parameters=sim_time + _extra(options, "command_mirror"),
        remappings=(
            ("bridge/joint_trajectory", options.command_topic),
            ("sim/joint_trajectory", f"{sim_ns}/joint_trajectory"),
            ("real/joint_trajectory", f"{real_ns}/joint_trajectory"),
            ("real/joint_states", f"{real_ns}/joint_states"),
        ),
        publishes=(
            TopicSpec(f"{sim_ns}/joint_trajectory", TRAJECTORY),
            TopicSpec(f"{real_ns}/joint_trajectory", TRAJECTORY),
            TopicSpec("/bridge/refusals", f"{PACKAGE}/msg/GapEvent"),
            TopicSpec("/diagnostics", DIAGNOSTICS),
        ),
    )
    remaps: list[tuple[str, str]] = [("bridge/joint_trajectory", options.command_topic)]
    for side, ns in (("sim", sim_ns), ("real", real_ns)):
        for stream in ("joint_states", "wrench", "ee_pose", "object_pose", "imu", "joint_trajectory"):
            remaps.append((f"{side}/{stream}", f"{ns}/{stream}"))
    monitor = NodeSpec(
        executable="divergence_monitor",
        parameter_files=params,
        parameters=sim_time
        + (("output_dir", str(options.output_dir)),)
        + _extra(options, "divergence_monitor"),
        remappings=tuple(remaps),
        publishes=(
            TopicSpec("/divergence/joints", f"{PACKAGE}/msg/JointDivergence"),
            TopicSpec("/divergence/pose", f"{PACKAGE}/msg/PoseDivergence"),
            TopicSpec("/divergence/contact", f"{PACKAGE}/msg/ContactResidual"),
            TopicSpec("/divergence/events", f"{PACKAGE}/msg/GapEvent"),
            TopicSpec("/divergence/summary", f"{PACKAGE}/msg/DivergenceSummary"),
            TopicSpec("/divergence/markers", MARKERS),
            TopicSpec("/diagnostics", DIAGNOSTICS),
        ),
    )
    return [mirror, monitor]


def demo_robot(options: GraphOptions) -> str:
    """The built-in robot the demo runs: ``options.robot``, else the scenario's.

    Raises:
        ConfigError: an unknown robot name.
        ScenarioError: the scenario cannot be loaded or is invalid on that robot.
    """
    from sim_real_bridge.sim.scenario import load_scenario

    if options.robot and options.robot not in ROBOTS:
        raise ConfigError(f"robot must be one of {', '.join(ROBOTS)}, got {options.robot!r}")
    return load_scenario(options.scenario, robot=options.robot or None).robot


def demo_graph(options: GraphOptions) -> list[NodeSpec]:
    """The built-in robot, its physical-robot stand-in, a task, the mirror and the monitor.

    Args:
        options: Scenario, robot, namespaces, parameter file and output directory.

    Returns:
        Node specs in start order (robots first, the task last).
    """
    sim_ns = _namespace(options.sim_namespace, "sim_namespace")
    real_ns = _namespace(options.real_namespace, "real_namespace")
    robot = demo_robot(options)
    if options.limits_file is None:
        options = replace(options, limits_file=options.config_dir / robot_spec(robot).limits_file)
    params = (_params_file(options),)
    sim_time = (("use_sim_time", options.use_sim_time),)
    scenario = (("scenario", options.scenario), ("robot", robot))
    sim_robot = NodeSpec(
        executable="sim_robot",
        namespace=sim_ns,
        parameter_files=params,
        parameters=sim_time + scenario + _extra(options, "sim_robot"),
        remappings=(("~/joint_trajectory", f"{sim_ns}/joint_trajectory"),),
        publishes=_robot_topics(sim_ns),
    )
    standin = NodeSpec(
        executable="reality_standin",
        namespace=real_ns,
        parameter_files=params,
        parameters=sim_time + scenario + _extra(options, "reality_standin"),
        remappings=(("~/joint_trajectory", f"{real_ns}/joint_trajectory"),),
        publishes=_robot_topics(real_ns)
        + (TopicSpec("/reality/injections", f"{PACKAGE}/msg/InjectionArray"),),
    )
    task = NodeSpec(
        executable="task_player",
        parameter_files=params,
        # Both robots and the monitor must hear the first command (it starts the monitor's
        # run clock): start once each has subscribed.
        parameters=sim_time + scenario
        + (("wait_for_topics", [f"{sim_ns}/joint_trajectory", f"{real_ns}/joint_trajectory"]),
           ("wait_for_nodes", ["command_mirror", "divergence_monitor"]))
        + _extra(options, "task_player"),
        remappings=(("bridge/joint_trajectory", options.command_topic),),
        publishes=(TopicSpec(options.command_topic, TRAJECTORY),),
    )
    return [sim_robot, standin, *bridge_graph(options), task]


GRAPHS = {"demo": demo_graph, "bridge": bridge_graph}


@dataclass(frozen=True)
class LaunchArgument:
    """A launch argument (and CLI flag) with its default and description."""

    name: str
    default: str
    description: str


#: Arguments of both launch files; the demo adds DEMO_ARGUMENTS.
BRIDGE_ARGUMENTS: tuple[LaunchArgument, ...] = (
    LaunchArgument("use_sim_time", "false", "Use /clock from the simulator instead of the wall clock."),
    LaunchArgument("sim_namespace", "/sim", "Namespace of the simulated robot's topics (joint_states, wrench, ee_pose, object_pose, imu, joint_trajectory)."),
    LaunchArgument("real_namespace", "/real", "Namespace of the physical robot's topics, same names as the simulated side."),
    LaunchArgument("command_topic", "/bridge/joint_trajectory", "JointTrajectory input of the command mirror."),
    LaunchArgument("params_file", "", "Parameter YAML of the mirror and the monitor; empty means config/sim_real_bridge.yaml of this package."),
    LaunchArgument("limits_file", "", "Joint limits YAML of the real robot for the mirror's safety gate; empty means config/robot_limits.yaml (the built-in arm7), or in the demo the limits of the robot it runs."),
    LaunchArgument("output_dir", "sim_real_bridge_out", "Directory for failure snapshots and the event log."),
    LaunchArgument("record", "", "If set, record every topic to this directory as a rosbag2 MCAP bag."),
    LaunchArgument("log_level", "info", "Logging level of every node (debug, info, warn, error)."),
)

DEMO_ARGUMENTS: tuple[LaunchArgument, ...] = (
    LaunchArgument("scenario", "tour", "Built-in scenario name (config/scenarios/) or path to a scenario YAML for the physical-robot stand-in."),
    LaunchArgument("robot", "", "Built-in robot of the simulator, the stand-in and the task (arm7, ur6, panda7); empty means the scenario's robot. The mirror then loads that robot's limits (config/robot_limits_<robot>.yaml; robot_limits.yaml for arm7) unless limits_file is set."),
)


def options_from_arguments(values: dict[str, str], config_dir: Path) -> GraphOptions:
    """GraphOptions from launch-argument values (strings, as launch gives them).

    Args:
        values: Argument name to value; missing names take their defaults.
        config_dir: The package's config directory.

    Raises:
        ConfigError: A value is not valid for its argument.
    """
    defaults = {arg.name: arg.default for arg in BRIDGE_ARGUMENTS + DEMO_ARGUMENTS}
    unknown = sorted(set(values) - set(defaults))
    if unknown:
        raise ConfigError(f"unknown launch argument(s): {', '.join(unknown)}")
    merged = {**defaults, **values}
    use_sim_time = merged["use_sim_time"].strip().lower()
    if use_sim_time not in ("true", "false"):
        raise ConfigError(f"use_sim_time must be true or false, got {merged['use_sim_time']!r}")
    return GraphOptions(
        config_dir=config_dir,
        scenario=merged["scenario"],
        robot=merged["robot"].strip(),
        use_sim_time=use_sim_time == "true",
        sim_namespace=merged["sim_namespace"],
        real_namespace=merged["real_namespace"],
        params_file=Path(merged["params_file"]) if merged["params_file"] else None,
        output_dir=Path(merged["output_dir"]),
        command_topic=merged["command_topic"],
        limits_file=Path(merged["limits_file"]) if merged["limits_file"] else None,
    )
