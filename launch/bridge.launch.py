"""Only the command mirror and the divergence monitor, beside your own simulator and robot.

    ros2 launch sim_real_bridge bridge.launch.py \
        sim_namespace:=/sim real_namespace:=/real \
        params_file:=$(ros2 pkg prefix sim_real_bridge)/share/sim_real_bridge/config/stacks/ros2_control_gz.yaml

The graph itself is defined in sim_real_bridge/ros/graph.py.
"""

from launch import LaunchDescription
from launch.actions import OpaqueFunction

from sim_real_bridge.ros.graph import BRIDGE_ARGUMENTS, bridge_graph
from sim_real_bridge.ros.launch_support import declare_arguments, graph_actions


def generate_launch_description() -> LaunchDescription:
    """Declares every argument with a description, then the mirror and the monitor."""
    return LaunchDescription(
        declare_arguments(BRIDGE_ARGUMENTS)
        + [OpaqueFunction(function=graph_actions, args=[bridge_graph, BRIDGE_ARGUMENTS])]
    )
