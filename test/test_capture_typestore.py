"""Typestore with our messages, the crash-safe MCAP bag writer and the resource resolver."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import Reader

from sim_real_bridge.capture import bag_writer as bag_writer_module
from sim_real_bridge.capture.bag_writer import BagWriter, mcap_file_is_complete, partial_dir_for, recover_partials
from sim_real_bridge.capture.typestore import build_typestore, custom_msg_types, new_typestore
from sim_real_bridge.errors import ConfigError, SnapshotError
from sim_real_bridge.resources import share_path

CUSTOM = [
    "CategoryShare",
    "ContactResidual",
    "DivergenceSummary",
    "GapEvent",
    "Injection",
    "InjectionArray",
    "JointDivergence",
    "PoseDivergence",
]


@pytest.fixture(scope="module")
def store():
    return build_typestore()


def _stamp(store, stamp_ns: int):
    time_cls = store.types["builtin_interfaces/msg/Time"]
    return time_cls(sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9)


def _header(store, stamp_ns: int, frame_id: str = "base_link"):
    return store.types["std_msgs/msg/Header"](stamp=_stamp(store, stamp_ns), frame_id=frame_id)


def gap_event(store, stamp_ns: int = 1_700_000_000_123_456_789, event_id: str = "ev-1"):
    key_value = store.types["diagnostic_msgs/msg/KeyValue"]
    return store.types["sim_real_bridge/msg/GapEvent"](
        header=_header(store, stamp_ns),
        id=event_id,
        category="contact",
        kind="friction",
        severity=0.75,
        start=_stamp(store, stamp_ns - 10**9),
        end=_stamp(store, stamp_ns),
        open=True,
        evidence=[key_value(key="force_rms_n", value="3.2"), key_value(key="phase", value="contact")],
        snapshot="snapshots/000001_ev-1.mcap",
    )


def injection_array(store, stamp_ns: int = 5_000_000_000):
    key_value = store.types["diagnostic_msgs/msg/KeyValue"]
    injection = store.types["sim_real_bridge/msg/Injection"]
    return store.types["sim_real_bridge/msg/InjectionArray"](
        header=_header(store, stamp_ns),
        scenario="wipe_friction",
        elapsed_s=5.0,
        injections=[
            injection(category="contact", kind="friction", start_s=8.0, end_s=22.0, effect_start_s=8.5,
                      active=False,
                      params=[key_value(key="scale", value="0.4")]),
            injection(category="sensor", kind="dropout", start_s=1.0, end_s=2.0, effect_start_s=1.0, active=True,
                      params=[]),
        ],
    )


def test_build_typestore_has_every_custom_type_and_standard_types(store):
    for name in CUSTOM:
        assert f"sim_real_bridge/msg/{name}" in store.types
    for name in ("sensor_msgs/msg/JointState", "geometry_msgs/msg/WrenchStamped",
                 "trajectory_msgs/msg/JointTrajectory", "visualization_msgs/msg/MarkerArray",
                 "diagnostic_msgs/msg/DiagnosticArray"):
        assert name in store.types
    assert build_typestore() is store
    assert new_typestore() is not store


def _installed_msg_dir() -> Path | None:
    """share/sim_real_bridge/msg of the install the generated messages come from, if built.

    That is the prefix of the imported ``sim_real_bridge.msg`` (make build installs into
    the venv, colcon into install/sim_real_bridge), else the ament index's or sys.prefix's.
    """
    candidates = []
    try:
        import sim_real_bridge.msg as msg_module
    except ImportError:
        pass
    else:
        # PREFIX/lib/pythonX.Y/site-packages/sim_real_bridge/msg/__init__.py
        candidates.append(Path(msg_module.__file__).resolve().parents[5] / "share")
    try:
        from ament_index_python.packages import get_package_prefix
        candidates.append(Path(get_package_prefix("sim_real_bridge")) / "share")
    except (ImportError, LookupError, ValueError, OSError):  # OSError: AMENT_PREFIX_PATH unset
        pass
    candidates.append(Path(sys.prefix) / "share")
    dirs = [share / "sim_real_bridge" / "msg" for share in candidates]
    return next((path for path in dirs if (path / "GapEvent.json").is_file()), None)


def test_custom_type_hashes_match_rosidl_when_built():
    store = build_typestore()
    prefix = _installed_msg_dir()
    if prefix is None:
        pytest.skip("sim_real_bridge's messages are not built: `make build` (or colcon build) installs them")
    for name in CUSTOM:
        hashes = json.loads((prefix / f"{name}.json").read_text())["type_hashes"]
        expected = next(h["hash_string"] for h in hashes if h["type_name"] == f"sim_real_bridge/msg/{name}")
        assert store.hash_rihs01(f"sim_real_bridge/msg/{name}") == expected, name


@pytest.mark.parametrize("factory", [gap_event, injection_array])
def test_custom_types_round_trip_through_cdr(store, factory):
    msg = factory(store)
    typename = msg.__msgtype__
    data = store.serialize_cdr(msg, typename)
    back = store.deserialize_cdr(data, typename)
    assert back == msg
    assert store.serialize_cdr(back, typename) == data


def test_rosbags_cdr_equals_rclpy_cdr_for_gap_event(store):
    serialization = pytest.importorskip("rclpy.serialization")
    msg_module = pytest.importorskip("sim_real_bridge.msg")
    ours = gap_event(store)
    ros_msg = msg_module.GapEvent()
    ros_msg.header.stamp.sec = ours.header.stamp.sec
    ros_msg.header.stamp.nanosec = ours.header.stamp.nanosec
    ros_msg.header.frame_id = ours.header.frame_id
    ros_msg.id, ros_msg.category, ros_msg.kind = ours.id, ours.category, ours.kind
    ros_msg.severity, ros_msg.open, ros_msg.snapshot = ours.severity, ours.open, ours.snapshot
    ros_msg.start.sec, ros_msg.start.nanosec = ours.start.sec, ours.start.nanosec
    ros_msg.end.sec, ros_msg.end.nanosec = ours.end.sec, ours.end.nanosec
    key_value = pytest.importorskip("diagnostic_msgs.msg").KeyValue
    ros_msg.evidence = [key_value(key=kv.key, value=kv.value) for kv in ours.evidence]
    raw = serialization.serialize_message(ros_msg)
    assert store.deserialize_cdr(raw, "sim_real_bridge/msg/GapEvent") == ours


def _write_demo_bag(store, path: Path) -> Path:
    joint_state = store.types["sensor_msgs/msg/JointState"]
    with BagWriter(path, store) as bag:
        bag.add_topic("/sim/joint_states", "sensor_msgs/msg/JointState")
        bag.add_topic("/divergence/events", "sim_real_bridge/msg/GapEvent")
        bag.add_topic("/reality/injections", "sim_real_bridge/msg/InjectionArray")
        for i in range(20):
            stamp = 10**9 + i * 10**7
            msg = joint_state(header=_header(store, stamp), name=["a", "b"], position=np.array([i, -i], float),
                              velocity=np.zeros(2), effort=np.zeros(0))
            bag.write_message("/sim/joint_states", stamp, msg)
        bag.write_message("/divergence/events", 10**9 + 5 * 10**7, gap_event(store, 10**9 + 5 * 10**7))
        bag.write("/reality/injections", 10**9 + 6 * 10**7,
                  store.serialize_cdr(injection_array(store), "sim_real_bridge/msg/InjectionArray"))
    return path


def test_single_file_mcap_opens_with_anyreader_and_mcap_with_schemas(store, tmp_path):
    path = _write_demo_bag(store, tmp_path / "snap.mcap")
    assert path.is_file() and mcap_file_is_complete(path)
    assert sorted(os.listdir(tmp_path)) == ["snap.mcap"]  # no partial left behind

    with AnyReader([path]) as reader:
        counts = {c.topic: c.msgcount for c in reader.connections}
        events = [reader.deserialize(d, c.msgtype) for c, _, d in reader.messages() if c.topic == "/divergence/events"]
    assert counts == {"/sim/joint_states": 20, "/divergence/events": 1, "/reality/injections": 1}
    expected = gap_event(store, 10**9 + 5 * 10**7)
    assert [(e.id, e.category, e.start.sec, e.start.nanosec, e.snapshot) for e in events] == [
        (expected.id, expected.category, expected.start.sec, expected.start.nanosec, expected.snapshot)]
    assert [(kv.key, kv.value) for kv in events[0].evidence] == [(kv.key, kv.value) for kv in expected.evidence]

    with path.open("rb") as handle:
        reader = make_reader(handle, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        assert summary.statistics.message_count == 22
        for channel in summary.channels.values():
            schema = summary.schemas[channel.schema_id]
            assert schema.encoding == "ros2msg" and schema.data
            assert channel.message_encoding == "cdr"
        assert {s.name for s in summary.schemas.values()} == {
            "sensor_msgs/msg/JointState", "sim_real_bridge/msg/GapEvent", "sim_real_bridge/msg/InjectionArray"}
        assert "diagnostic_msgs/KeyValue" in next(
            s.data.decode() for s in summary.schemas.values() if s.name == "sim_real_bridge/msg/GapEvent")
        topics = [channel.topic for _, channel, _, _ in reader.iter_decoded_messages()]
        assert topics.count("/sim/joint_states") == 20
        handle.seek(0)
        metadata = [m.name for m in make_reader(handle).iter_metadata()]
    assert metadata == ["rosbag2"]  # what `ros2 bag info FILE.mcap` reads


def test_directory_mode_writes_a_rosbag2_bag(store, tmp_path):
    path = _write_demo_bag(store, tmp_path / "record")
    assert (path / "metadata.yaml").is_file() and (path / "record.mcap").is_file()
    with Reader(path) as reader:
        assert reader.message_count == 22
        assert {c.msgtype for c in reader.connections} >= {"sim_real_bridge/msg/GapEvent"}
    assert sorted(os.listdir(tmp_path)) == ["record"]


def test_writer_errors_are_snapshot_errors(store, tmp_path):
    existing = tmp_path / "exists.mcap"
    existing.write_bytes(b"x")
    with pytest.raises(SnapshotError, match="exists already"):
        BagWriter(existing, store).open()
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(SnapshotError, match=r"cannot write bag .*a_file/x\.mcap"):
        BagWriter(blocker / "x.mcap", store).open()
    with BagWriter(tmp_path / "ok.mcap", store) as bag:
        with pytest.raises(SnapshotError, match="unknown message type acme_msgs/msg/Widget for topic /w"):
            bag.add_topic("/w", "acme_msgs/msg/Widget")
        bag.add_topic("/js", "sensor_msgs/msg/JointState")
        with pytest.raises(SnapshotError, match="declared as sensor_msgs/msg/JointState"):
            bag.add_topic("/js", "geometry_msgs/msg/WrenchStamped")
        with pytest.raises(SnapshotError, match="topic /other was not added"):
            bag.write("/other", 1, b"\x00\x01\x00\x00")
        with pytest.raises(SnapshotError, match="topic /other was not added"):
            bag.write_message("/other", 1, object())
    with pytest.raises(SnapshotError, match="is not open"):
        BagWriter(tmp_path / "never.mcap", store).write("/js", 1, b"")


def test_exception_inside_writer_leaves_no_target_and_no_partial(store, tmp_path):
    target = tmp_path / "aborted.mcap"
    with pytest.raises(RuntimeError, match="boom"):
        with BagWriter(target, store) as bag:
            bag.add_topic("/js", "sensor_msgs/msg/JointState")
            bag.write("/js", 1, b"\x00\x01\x00\x00" + bytes(40))
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_disk_full_during_close_raises_and_cleans_up(store, tmp_path, monkeypatch):
    def no_space(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bag_writer_module, "fsync_path", no_space)
    with pytest.raises(SnapshotError, match=r"cannot write bag .*full\.mcap: No space left on device \(ENOSPC\)"):
        with BagWriter(tmp_path / "full.mcap", store) as bag:
            bag.add_topic("/js", "sensor_msgs/msg/JointState")
    assert os.listdir(tmp_path) == []


def test_recover_partials_finishes_closed_bags_and_removes_torn_ones(store, tmp_path, monkeypatch):
    real_replace = os.replace

    def crash(src, dst):
        if Path(dst).parent == tmp_path:  # our final rename, not rosbags' metadata.yaml
            raise KeyboardInterrupt  # stands for a kill between close and rename
        real_replace(src, dst)

    monkeypatch.setattr(bag_writer_module.os, "replace", crash)
    for name in ("closed.mcap", "closed_dir"):
        with pytest.raises(KeyboardInterrupt):
            _write_demo_bag(store, tmp_path / name)
    monkeypatch.setattr(bag_writer_module.os, "replace", real_replace)
    torn = partial_dir_for(tmp_path / "torn.mcap") / "torn"
    torn.mkdir(parents=True)
    (torn / "torn.mcap").write_bytes(b"\x89MCAP0\r\n" + bytes(100))  # header only: writer died
    stray = tmp_path / ".stray.mcap.partial"
    stray.write_bytes(b"junk")

    actions = dict((p.name, a) for p, a in recover_partials(tmp_path))
    assert actions == {"closed.mcap": "finished", "closed_dir": "finished",
                       ".torn.mcap.partial": "removed", ".stray.mcap.partial": "removed"}
    assert sorted(os.listdir(tmp_path)) == ["closed.mcap", "closed_dir"]
    with AnyReader([tmp_path / "closed.mcap"]) as reader:
        assert sum(c.msgcount for c in reader.connections) == 22
    with Reader(tmp_path / "closed_dir") as reader:
        assert reader.message_count == 22
    assert recover_partials(tmp_path / "missing") == []


def test_share_path_finds_msg_and_names_what_it_tried(tmp_path):
    assert (share_path("msg") / "GapEvent.msg").is_file()
    with pytest.raises(ConfigError, match=r"resource 'no/such/thing' of sim_real_bridge not found; looked in: .*no/such/thing"):
        share_path("no", "such", "thing")


def test_share_path_finds_the_install_prefix_share_without_a_sourced_setup(tmp_path, monkeypatch):
    import sim_real_bridge.resources as resources

    package = tmp_path / "prefix" / "lib" / "python3.11" / "site-packages" / "sim_real_bridge"
    package.mkdir(parents=True)
    share = tmp_path / "prefix" / "share" / "sim_real_bridge" / "msg"
    share.mkdir(parents=True)
    monkeypatch.setattr(resources, "_PACKAGE_DIR", package)
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    assert share_path("msg") == share
    share.rmdir()
    with pytest.raises(ConfigError, match=r"looked in: .*install prefix .*prefix/share/sim_real_bridge/msg; package data"):
        share_path("msg")


def test_custom_msg_types_errors(tmp_path):
    with pytest.raises(ConfigError, match="no .msg files in"):
        custom_msg_types(tmp_path)
    (tmp_path / "Bad.msg").write_text("int32 9bad\n")
    with pytest.raises(ConfigError, match=r"cannot parse message definition .*Bad\.msg"):
        custom_msg_types(tmp_path)


def test_share_path_lookup_order_outside_a_checkout(tmp_path, monkeypatch):
    from sim_real_bridge import resources

    package_dir = tmp_path / "site" / "sim_real_bridge"
    (package_dir / "_share" / "msg").mkdir(parents=True)
    (package_dir / "_share" / "msg" / "Packaged.msg").write_text("int32 x\n")
    monkeypatch.setattr(resources, "_PACKAGE_DIR", package_dir)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(tmp_path / "empty_prefix"))
    assert resources.share_path("msg") == package_dir / "_share" / "msg"

    prefix = tmp_path / "prefix"
    (prefix / "share" / "ament_index" / "resource_index" / "packages").mkdir(parents=True)
    (prefix / "share" / "ament_index" / "resource_index" / "packages" / "sim_real_bridge").write_text("")
    (prefix / "share" / "sim_real_bridge" / "msg").mkdir(parents=True)
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(prefix))
    assert resources.share_path("msg") == prefix / "share" / "sim_real_bridge" / "msg"
    with pytest.raises(ConfigError, match=r"looked in: ament share .*; package data .*_share/config"):
        resources.share_path("config")


def test_salvage_keeps_complete_chunks_of_a_torn_recording(store, tmp_path):
    string = store.types["std_msgs/msg/String"]
    target = tmp_path / "recording"
    bag = BagWriter(target, store).open()
    bag.add_topic("/chatter", "std_msgs/msg/String")
    bag.add_topic("/divergence/events", "sim_real_bridge/msg/GapEvent")
    payloads = []
    for i in range(120):
        raw = bytes(store.serialize_cdr(string(data=f"{i}:" + "x" * 20_000), "std_msgs/msg/String"))
        payloads.append(raw)
        bag.write("/chatter", 10**9 + i, raw)
        if i == 3:
            bag.write_message("/divergence/events", 10**9 + i, gap_event(store))
    bag._file.flush()  # what the OS holds when the process is killed
    torn = partial_dir_for(target) / "recording" / "recording.mcap"
    with torn.open("r+b") as handle:  # the last chunk was being written: tear it
        handle.truncate(torn.stat().st_size - 1000)

    actions = recover_partials(tmp_path, salvage=True)
    assert actions == [(target, "salvaged")]
    assert sorted(os.listdir(tmp_path)) == ["recording"]
    with Reader(target) as reader:
        got = [(c.topic, t, bytes(d)) for c, t, d in reader.messages()]
    chatter = [d for topic, _, d in got if topic == "/chatter"]
    assert 0 < len(chatter) < 120 and chatter == payloads[: len(chatter)]
    assert [t for topic, t, _ in got if topic == "/divergence/events"] == [10**9 + 3]


def test_salvage_of_a_file_without_complete_chunks_removes_it(store, tmp_path):
    target = tmp_path / "tiny.mcap"
    bag = BagWriter(target, store).open()
    bag.add_topic("/chatter", "std_msgs/msg/String")
    bag.write("/chatter", 1, b"\x00\x01\x00\x00\x02\x00\x00\x00a\x00")
    bag._file.flush()
    assert recover_partials(tmp_path, salvage=True) == [(partial_dir_for(target), "removed")]
    assert os.listdir(tmp_path) == []
