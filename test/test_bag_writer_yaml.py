"""BagWriter's shortcuts around rosbags' pure-Python YAML dumps give rosbags' files."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import rosbags.rosbag2.writer as rosbags_writer
from rosbags.rosbag2 import StoragePlugin, Writer
from ruamel.yaml import YAML

from sim_real_bridge.capture import bag_writer
from sim_real_bridge.capture.bag_writer import BagWriter
from sim_real_bridge.capture.typestore import build_typestore

STORE = build_typestore()
TOPICS = {"/a": "std_msgs/msg/String", "/b": "sensor_msgs/msg/JointState"}
T0 = 1_700_000_000_000_000_000


def _ruamel(data: object) -> str:
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    stream = StringIO()
    yaml.dump(data, stream)
    return stream.getvalue()


def _rosbags_dir(path: Path) -> Path:
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {t: writer.add_connection(t, msgtype, typestore=STORE) for t, msgtype in TOPICS.items()}
        for i, topic in enumerate(TOPICS):
            writer.write(conns[topic], T0 + i, b"\x00\x01\x00\x00\x00\x00\x00\x00")
    return path


def _ours(path: Path) -> Path:
    with BagWriter(path, STORE) as bag:
        for topic, msgtype in TOPICS.items():
            bag.add_topic(topic, msgtype)
        bag.write_many(list(TOPICS), [T0, T0 + 1], [b"\x00\x01\x00\x00\x00\x00\x00\x00"] * 2)
    return path


def test_writer_yaml_outside_a_writer_is_ruamel() -> None:
    assert rosbags_writer.YAML is not YAML  # the hook is installed
    for data in ([], {"rosbag2_bagfile_information": {"version": 9}}, [{"a": 1}], {"b": [], "a": None}):
        yaml = rosbags_writer.YAML(typ="safe")
        yaml.default_flow_style = False
        stream = StringIO()
        yaml.dump(data, stream)
        assert stream.getvalue() == _ruamel(data)
    assert _ruamel([]) == "[]\n"  # what the writer's shortcut writes
    first, again = rosbags_writer.YAML(typ="safe"), rosbags_writer.YAML(typ="safe")  # plug-ins found once
    assert first.official_plug_ins() == again.official_plug_ins() == YAML(typ="safe").official_plug_ins()
    assert [m.__name__ for m in again.plug_ins] == [m.__name__ for m in YAML(typ="safe").plug_ins]


def test_bag_directory_keeps_rosbags_metadata_yaml(tmp_path: Path) -> None:
    theirs = _rosbags_dir(tmp_path / "theirs" / "bag")
    ours = _ours(tmp_path / "ours" / "bag")
    assert (ours / "metadata.yaml").read_text() == (theirs / "metadata.yaml").read_text()
    assert (ours / "bag.mcap").read_bytes() == (theirs / "bag.mcap").read_bytes()


def test_single_file_embeds_rosbags_metadata(tmp_path: Path) -> None:
    theirs = _rosbags_dir(tmp_path / "theirs" / "x")
    (tmp_path / "ours").mkdir()
    ours = _ours(tmp_path / "ours" / "x.mcap")
    assert ours.read_bytes() == (theirs / "x.mcap").read_bytes()
    assert b"rosbag2_bagfile_information" not in ours.read_bytes()
    assert b"message_count: 2" in ours.read_bytes()
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == ["x.mcap"]


def test_single_file_dumps_only_the_embedded_metadata(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dumped: list[object] = []
    real = YAML.dump

    def counting(self: YAML, data: object, stream: object = None, **kwargs: object) -> object:
        dumped.append(data)
        return real(self, data, stream, **kwargs)

    monkeypatch.setattr(YAML, "dump", counting)
    monkeypatch.setattr(bag_writer, "_TEMPLATES", {})
    _ours(tmp_path / "x.mcap")
    assert dumped and all("message_count" in d for d in dumped)  # type: ignore[operator]  # never metadata.yaml
    dumped.clear()
    (tmp_path / "y").mkdir()
    _ours(tmp_path / "y" / "x.mcap")  # same shape: written from the template, no ruamel dump
    assert dumped == []
    assert (tmp_path / "y" / "x.mcap").read_bytes() == (tmp_path / "x.mcap").read_bytes()


def _metadata(counts: list[int], topics: list[str], custom: dict[str, str] | None) -> dict[str, object]:
    start, duration = counts[0] * 10**12, counts[-1] * 10**9
    return {"rosbag2_bagfile_information": {
        "version": 9, "storage_identifier": "mcap", "relative_file_paths": ["x.mcap"],
        "duration": {"nanoseconds": duration}, "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": sum(counts),
        "topics_with_message_count": [
            {"topic_metadata": {"name": topic, "type": "sim_real_bridge/msg/JointDivergence",
                                "serialization_format": "cdr", "offered_qos_profiles": [],
                                "type_description_hash": "RIHS01_" + "c8" * 32},
             "message_count": count} for topic, count in zip(topics, counts, strict=False)],
        "compression_format": "", "compression_mode": "",
        "files": [{"path": "x.mcap", "starting_time": {"nanoseconds_since_epoch": start},
                   "duration": {"nanoseconds": duration}, "message_count": sum(counts)}],
        "custom_data": custom, "ros_distro": "rosbags"}}


def _dump_as_our_writer(data: object, times: int) -> str:
    """rosbags' writer's YAML dump of data, ``times`` times, while our writer's hook is on."""
    yaml = rosbags_writer.YAML(typ="safe")
    yaml.default_flow_style = False
    stream = StringIO()
    bag_writer._YAML_HOOK.writer = type("W", (), {"drop_metadata_file": False})()
    try:
        for _ in range(times):
            yaml.dump(data, stream)
    finally:
        bag_writer._YAML_HOOK.writer = None
    return stream.getvalue()


@pytest.mark.parametrize("custom", [None, {"sim_success": "true", "note": "a long note " * 12}, {"n": "7"}])
def test_metadata_from_a_template_is_ruamels_text(monkeypatch: pytest.MonkeyPatch, custom: dict[str, str] | None
                                                   ) -> None:
    monkeypatch.setattr(bag_writer, "_TEMPLATES", {})
    topics = ["/divergence/joints", "/a/very/long/topic/name/" + "x" * 70, "/b"]
    for counts in ([1, 2, 3], [0, 0, 0], [10**18, 5, -(2**63)], [2**63 - 1, 123456789, 42]):
        for data in (_metadata(counts, topics, custom), _metadata(counts, topics, custom)["rosbag2_bagfile_information"]):
            assert _dump_as_our_writer(data, 1) == _ruamel(data)
    assert len(bag_writer._TEMPLATES) == 2 and all(t is not None for t in bag_writer._TEMPLATES.values())


def test_metadata_with_a_sentinel_inside_a_string_is_not_templated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bag_writer, "_TEMPLATES", {})
    data = {"a": 1, "b": str(bag_writer._SENTINEL), "c": 2.5}  # a float: no template either
    for item in (data, {"a": 1, "b": str(bag_writer._SENTINEL)}):
        assert _dump_as_our_writer(item, 2) == 2 * _ruamel(item)
    assert list(bag_writer._TEMPLATES.values()) == [None]
