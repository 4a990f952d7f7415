"""`demo --record`: the monitor's own input recording merged with the graph recorder's bag."""

from __future__ import annotations

from pathlib import Path

import pytest
from rosbags.highlevel import AnyReader

from sim_real_bridge.capture.bag_writer import BagWriter, merge_bags
from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.conversions import cdr
from sim_real_bridge.errors import SimRealBridgeError, SnapshotError

STORE = build_typestore()
STRING = "std_msgs/msg/String"


def _text(value: str) -> bytes:
    return bytes(STORE.serialize_cdr(STORE.types[STRING](data=value), STRING))


def _bag(path: Path, rows: list[tuple[str, str, int, bytes]]) -> Path:
    with BagWriter(path, STORE) as bag:
        for topic, msgtype, _, _ in rows:
            bag.add_topic(topic, msgtype)
        for topic, _, log_ns, data in rows:
            bag.write(topic, log_ns, data)
    return path


def test_merge_keeps_the_monitors_topics_and_adds_the_others_in_log_time_order(tmp_path: Path) -> None:
    inputs = _bag(tmp_path / "inputs", [
        ("/sim/joint_states", STRING, 10, _text("monitor-a")),
        ("/sim/joint_states", STRING, 30, _text("monitor-b")),
        ("/divergence_monitor/ticks", "builtin_interfaces/msg/Time", 31, cdr.time_message(31)),
    ])
    graph = _bag(tmp_path / "graph", [
        ("/sim/joint_states", STRING, 11, _text("recorder-a")),  # the recorder's own copy: dropped
        ("/reality/injections", STRING, 20, _text("label")),
        ("/reality/injections", STRING, 40, _text("label-2")),
    ])
    count = merge_bags(inputs, graph, tmp_path / "merged", STORE)
    with AnyReader([tmp_path / "merged"]) as reader:
        assert {c.topic: c.msgtype for c in reader.connections} == {
            "/sim/joint_states": STRING, "/divergence_monitor/ticks": "builtin_interfaces/msg/Time",
            "/reality/injections": STRING}
        rows = [(c.topic, t, reader.deserialize(d, c.msgtype)) for c, t, d in reader.messages()]
    assert count == len(rows) == 5
    assert [t for _, t, _ in rows] == [10, 20, 30, 31, 40]
    assert [m.data for topic, _, m in rows if topic == "/sim/joint_states"] == ["monitor-a", "monitor-b"]
    assert rows[3][2].sec == 0 and rows[3][2].nanosec == 31


def test_merge_of_a_missing_bag_names_it(tmp_path: Path) -> None:
    graph = _bag(tmp_path / "graph", [("/x", STRING, 1, _text("x"))])
    with pytest.raises(SnapshotError, match="cannot merge bags .*inputs"):
        merge_bags(tmp_path / "inputs", graph, tmp_path / "merged", STORE)
    assert not (tmp_path / "merged").exists()


def test_demo_refuses_an_existing_record_directory_before_starting(tmp_path: Path) -> None:
    pytest.importorskip("rclpy", reason="the demo needs rclpy")
    from sim_real_bridge.ros.demo_session import DemoRequest, run_demo

    (tmp_path / "bag").mkdir()
    with pytest.raises(SimRealBridgeError, match="cannot record to .*bag: it exists already"):
        run_demo(DemoRequest(scenario="nominal", record_dir=tmp_path / "bag", out_dir=tmp_path / "out", live=False))
    assert not (tmp_path / "out" / "logs").exists()


def test_the_demo_recorder_leaves_the_monitors_recorded_inputs_to_the_monitor() -> None:
    """The merge drops the recorder's copies of the monitor's inputs: it does not take them at all."""
    pytest.importorskip("rclpy", reason="the recorder subscribes with rclpy")
    from sim_real_bridge.ros.graph import GraphOptions, demo_graph
    from sim_real_bridge.ros.recorder import monitor_input_topics, recorded_topics

    specs = demo_graph(GraphOptions(config_dir=Path(__file__).resolve().parents[1] / "config",
                                    sim_namespace="/twin", real_namespace="/robot"))
    skip = monitor_input_topics(specs)
    # (the mirrored commands too: the monitor records them as its run clock's input)
    assert skip == {f"{ns}/{stream}" for ns in ("/twin", "/robot")
                    for stream in ("joint_states", "wrench", "ee_pose", "object_pose", "joint_trajectory")}
    recorded = {topic.name for topic in recorded_topics(specs, skip)}
    assert not recorded & skip
    # Everything else still is: the task's commands, the stand-in's labels, the monitor's outputs.
    assert {"/bridge/joint_trajectory", "/reality/injections", "/divergence/joints", "/divergence/events"} <= recorded
