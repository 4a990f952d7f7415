"""launch_pytest tests of demo.launch.py and bridge.launch.py.

They need launch, launch_ros and launch_pytest: a ROS 2 distribution has them; on a
machine without one, `make test` installs them from the Jazzy kit when
ROS_UPSTREAM_KIT names ../shared/ros-upstream, and without either these tests are
reported as skipped with that reason. test_graph_runner.py starts the same graph
through the CLI runner and checks it over real DDS everywhere.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

launch_pytest = pytest.importorskip(
    "launch_pytest",
    reason="launch_pytest is not installed: a ROS 2 distribution (Jazzy, Kilted) has it; without one, "
    "`make test` installs it from the Jazzy kit when ROS_UPSTREAM_KIT names ../shared/ros-upstream",
)
import launch  # noqa: E402
import rclpy  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402

from helpers.ament_env import ensure_package_in_ament_path  # noqa: E402

LAUNCH_DIR = Path(__file__).resolve().parents[1] / "launch"
# A launch that fails before ReadyToTest leaves launch_pytest waiting: fail instead.
pytestmark = [pytest.mark.ros, pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def _ament_path(monkeypatch: pytest.MonkeyPatch) -> None:
    ensure_package_in_ament_path(monkeypatch)


def _include(name: str, arguments: dict[str, str]) -> IncludeLaunchDescription:
    return IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(LAUNCH_DIR / name)), launch_arguments=arguments.items()
    )


@launch_pytest.fixture
def bridge_launch(tmp_path: Path):
    """bridge.launch.py with its default arguments, writing under tmp_path."""
    return launch.LaunchDescription([
        _include("bridge.launch.py", {"output_dir": str(tmp_path / "out")}),
        launch_pytest.actions.ReadyToTest(),
    ])


def _wait_for_nodes(expected: set[str], timeout_s: float = 30.0) -> set[str]:
    rclpy.init()
    node = rclpy.create_node("launch_probe")
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not expected <= seen:
            rclpy.spin_once(node, timeout_sec=0.2)
            seen = {f"{ns.rstrip('/')}/{name}" for name, ns in node.get_node_names_and_namespaces()}
    finally:
        node.destroy_node()
        rclpy.shutdown()
    return seen


@pytest.mark.launch(fixture=bridge_launch)
def test_bridge_launch_starts_mirror_and_monitor():
    expected = {"/command_mirror", "/divergence_monitor"}
    assert expected <= _wait_for_nodes(expected)


@launch_pytest.fixture
def demo_launch(tmp_path: Path):
    """demo.launch.py on the nominal scenario, writing under tmp_path."""
    return launch.LaunchDescription([
        _include("demo.launch.py", {"scenario": "nominal", "output_dir": str(tmp_path / "out")}),
        launch_pytest.actions.ReadyToTest(),
    ])


@pytest.mark.launch(fixture=demo_launch)
def test_demo_launch_publishes_divergence():
    from sim_real_bridge.msg import JointDivergence

    rclpy.init()
    node = rclpy.create_node("demo_launch_probe")
    received = []
    node.create_subscription(JointDivergence, "/divergence/joints", received.append, 10)
    try:
        deadline = time.monotonic() + 60.0
        while not received and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.1)
        assert received, "no /divergence/joints from demo.launch.py within 60 s"
    finally:
        node.destroy_node()
        rclpy.shutdown()
