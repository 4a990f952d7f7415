"""The demo graph started by the CLI runner, in separate processes, over real DDS:
every topic a node declares carries messages of its declared type.

This is the stand-in for test_launch_files.py where `launch` is not installed: the
launch files and the runner build the same graph from sim_real_bridge/ros/graph.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is part of the make test environment")

from sim_real_bridge.ros.graph import GraphOptions, demo_graph  # noqa: E402
from sim_real_bridge.ros.recorder import RECORD_QOS, message_class  # noqa: E402
from sim_real_bridge.ros.runner import GraphRunner  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

#: Topics that only carry messages when something happens (an event, a refusal).
EVENT_DRIVEN = {"/divergence/events", "/bridge/refusals"}


def test_every_declared_topic_carries_its_declared_type(repo_root: Path, tmp_path: Path) -> None:
    specs = demo_graph(GraphOptions(config_dir=repo_root / "config", scenario="nominal", output_dir=tmp_path / "monitor"))
    declared = {t.name: t.msg_type for spec in specs for t in spec.publishes if t.name not in EVENT_DRIVEN}
    rclpy.init()
    node = rclpy.create_node("graph_probe")
    seen: dict[str, int] = {}

    def counter(topic: str):
        def count(msg: object) -> None:
            seen[topic] = seen.get(topic, 0) + 1
        return count

    for topic, type_name in declared.items():
        node.create_subscription(message_class(type_name), topic, counter(topic), RECORD_QOS)
    runner = GraphRunner(specs, log_dir=tmp_path / "logs")
    try:
        runner.start()
        deadline = time.monotonic() + 90.0
        while time.monotonic() < deadline and set(seen) != set(declared):
            rclpy.spin_once(node, timeout_sec=0.1)
            assert not runner.failed(), f"node exited early: {[n.spec.name for n in runner.failed()]}; logs in {tmp_path / 'logs'}"
        missing = sorted(set(declared) - set(seen))
        assert not missing, f"no messages on {missing}; logs in {tmp_path / 'logs'}"
        types = dict(node.get_topic_names_and_types())
        for topic, type_name in declared.items():
            assert type_name in types.get(topic, []), f"{topic} advertised as {types.get(topic)}, declared {type_name}"
    finally:
        codes = runner.stop()
        node.destroy_node()
        rclpy.shutdown()
    tails = {
        name: (tmp_path / "logs" / f"{name}.log").read_text(errors="replace")[-3000:]
        for name, code in codes.items()
        if code != 0
    }
    assert all(code == 0 for code in codes.values()), f"exit codes after SIGINT: {codes}; log tails: {tails}"
