"""The built-in simulated robot, its physical-robot stand-in, a task, the mirror and the monitor.

    ros2 launch sim_real_bridge demo.launch.py scenario:=wipe_friction

The graph itself is defined in sim_real_bridge/ros/graph.py, which the CLI
runner (`sim-real-bridge demo`) uses as well.
"""

from launch import LaunchDescription
from launch.actions import OpaqueFunction

from sim_real_bridge.ros.graph import BRIDGE_ARGUMENTS, DEMO_ARGUMENTS, demo_graph
from sim_real_bridge.ros.launch_support import declare_arguments, graph_actions

ARGUMENTS = BRIDGE_ARGUMENTS + DEMO_ARGUMENTS


def generate_launch_description() -> LaunchDescription:
    """Declares every argument with a description, then the demo graph."""
    return LaunchDescription(
        declare_arguments(ARGUMENTS)
        + [OpaqueFunction(function=graph_actions, args=[demo_graph, ARGUMENTS])]
    )
