"""Turns the node graph of :mod:`sim_real_bridge.ros.graph` into launch actions.

Imported only by the files in launch/, on a ROS 2 distribution where `launch`,
`launch_ros` and `ament_index_python` are installed.
"""

from __future__ import annotations

import os
from pathlib import Path

from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
from launch.actions import DeclareLaunchArgument, ExecuteProcess, LogInfo
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from sim_real_bridge.ros.graph import (
    PACKAGE,
    LaunchArgument,
    NodeSpec,
    options_from_arguments,
)


def declare_arguments(arguments: tuple[LaunchArgument, ...]) -> list[DeclareLaunchArgument]:
    """One DeclareLaunchArgument, with its description, per graph argument."""
    return [
        DeclareLaunchArgument(arg.name, default_value=arg.default, description=arg.description)
        for arg in arguments
    ]


def node_actions(specs: list[NodeSpec], log_level: str) -> list[Node]:
    """launch_ros Node actions for the specs, same names, parameters and remappings.

    With ``ROS_SECURITY_ENABLE=true`` each node runs in its SROS2 enclave.
    """
    return [
        Node(
            package=PACKAGE,
            executable=spec.executable,
            name=spec.name,
            namespace=spec.namespace or "",
            parameters=[str(path) for path in spec.parameter_files] + [dict(spec.parameters)],
            remappings=list(spec.remappings),
            arguments=["--ros-args", "--log-level", log_level] + (
                ["--enclave", spec.enclave] if os.environ.get("ROS_SECURITY_ENABLE", "").lower() == "true" else []
            ),
            output="screen",
            emulate_tty=True,
        )
        for spec in specs
    ]


def extra_actions(values: dict[str, str]) -> list:
    """The diagnostic aggregator when installed, and `ros2 bag record` when asked."""
    actions: list = []
    config_dir = Path(get_package_share_directory(PACKAGE)) / "config"
    try:
        get_package_share_directory("diagnostic_aggregator")
    except PackageNotFoundError:
        actions.append(LogInfo(msg="diagnostic_aggregator is not installed; /diagnostics_agg is not started"))
    else:
        actions.append(
            Node(
                package="diagnostic_aggregator",
                executable="aggregator_node",
                name="diagnostic_aggregator",
                parameters=[str(config_dir / "diagnostic_analyzers.yaml")],
                output="screen",
            )
        )
    if values.get("record"):
        actions.append(
            ExecuteProcess(
                cmd=["ros2", "bag", "record", "--all", "--storage", "mcap", "--output", values["record"]],
                output="screen",
            )
        )
    return actions


def graph_actions(context, graph_factory, arguments: tuple[LaunchArgument, ...]) -> list:
    """OpaqueFunction body: evaluates the arguments and returns every action."""
    values = {arg.name: LaunchConfiguration(arg.name).perform(context) for arg in arguments}
    log_level = values.pop("log_level", "info")
    record = values.pop("record", "")
    config_dir = Path(get_package_share_directory(PACKAGE)) / "config"
    options = options_from_arguments(values, config_dir)
    return node_actions(graph_factory(options), log_level) + extra_actions({"record": record})
