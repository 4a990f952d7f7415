"""Offline bag reading: columns equal rosbags' deserializer on MCAP and sqlite3, split and
several bags, every layout a topic can take, compressed and foreign MCAP files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.bag_messages import (
    JS,
    NAMES,
    PS,
    T0,
    WS,
    S,
    assert_imu_columns,
    assert_joint_columns,
    assert_pose_columns,
    assert_wrench_columns,
    header,
    imu,
    joint_state,
    pose,
    reference,
    robot_messages,
    same,
    write_bag,
    write_with_mcap_library,
    wrench,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcap.writer import CompressionType, IndexType
from rosbags.rosbag2 import StoragePlugin, Writer
from ruamel.yaml import YAML

from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.offline.bags import open_bags
from sim_real_bridge.offline.bags.cdr_layout import MAX_LAYOUTS_PER_SIZE


@pytest.fixture(scope="module")
def store():
    return build_typestore()


@pytest.mark.parametrize("storage", [StoragePlugin.MCAP, StoragePlugin.SQLITE3])
def test_columns_equal_rosbags_deserialization(store, tmp_path, storage):
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=120), storage)
    with open_bags(bag) as bags:
        assert bags.topic_types() == {"/sim/joint_states": JS, "/sim/wrench": WS, "/sim/ee_pose": PS}
        cols = bags.read_many(["/sim/joint_states", "/sim/wrench", "/sim/ee_pose"])
    assert_joint_columns(cols["/sim/joint_states"], reference([bag], "/sim/joint_states"))
    assert_wrench_columns(cols["/sim/wrench"], reference([bag], "/sim/wrench"))
    assert_pose_columns(cols["/sim/ee_pose"], reference([bag], "/sim/ee_pose"))
    assert {c.slow_count for c in cols.values()} == {0}


def test_single_storage_files_open_directly(store, tmp_path):
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/real", n=10))
    db = write_bag(store, tmp_path / "db", robot_messages(store, "/real", n=10), StoragePlugin.SQLITE3)
    for path in (bag / "bag.mcap", db / "db.db3", bag / "metadata.yaml"):
        with open_bags([path]) as bags:
            assert len(bags.read_columns("/real/wrench")) == 10


def test_every_layout_of_a_topic_is_decoded_as_rosbags_does(store, tmp_path):
    """Frame ids of other lengths, names in another order, empty velocity or effort, NaN."""
    rng = np.random.default_rng(4)
    messages = []
    for i in range(40):
        t = T0 + i * 10**7
        kwargs = {}
        if i % 7 == 3:
            kwargs["frame_id"] = "other_frame_with_longer_name"
        if i % 5 == 1:
            kwargs["names"] = list(reversed(NAMES))
        if i % 9 == 2:
            kwargs["velocity"] = False
        if i % 11 == 4:
            kwargs["effort"] = False
        msg = joint_state(store, t, rng, **kwargs)
        if i == 13:
            msg.position[1] = np.nan
        messages.append(("/js", t, msg))
        messages.append(("/w", t, wrench(store, t, rng, frame_id="ft" if i % 3 else "a_much_longer_frame")))
    bag = write_bag(store, tmp_path / "bag", messages)
    with open_bags(bag) as bags:
        cols = bags.read_many(["/js", "/w"])
    assert_joint_columns(cols["/js"], reference([bag], "/js"))
    assert_wrench_columns(cols["/w"], reference([bag], "/w"))
    assert np.isnan(cols["/js"].position[13, 1])
    assert np.isnan(cols["/js"].velocity[2]).all() and not np.isnan(cols["/js"].velocity[3]).any()
    assert cols["/js"].slow_count == 0


def test_alternating_layouts_of_one_size_and_both_byte_orders(store, tmp_path):
    rng = np.random.default_rng(5)
    messages = [("/p", T0 + i, pose(store, T0 + i, rng, frame_id="frameA" if i % 4 else "frameB")) for i in range(20)]
    bag = write_bag(store, tmp_path / "bag", messages)
    with open_bags(bag) as bags:
        cols = bags.read_columns("/p")
    assert_pose_columns(cols, reference([bag], "/p"))
    assert cols.slow_count == 0 and cols.frame_id == "frameB"

    big_endian = tmp_path / "big"
    with Writer(big_endian, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conn = writer.add_connection("/w", WS, typestore=store)
        for i in range(6):
            writer.write(conn, T0 + i, store.serialize_cdr(wrench(store, T0 + i, rng), WS, little_endian=i % 2 == 0))
    with open_bags(big_endian) as bags:
        cols = bags.read_columns("/w")
    assert_wrench_columns(cols, reference([big_endian], "/w"))


def test_more_layouts_of_one_size_than_tried_are_decoded_one_by_one(store, tmp_path):
    rng = np.random.default_rng(6)
    count = MAX_LAYOUTS_PER_SIZE + 12
    messages = [("/js", T0 + i, joint_state(store, T0 + i, rng, frame_id=f"link_{i:03d}")) for i in range(count)]
    bag = write_bag(store, tmp_path / "bag", messages)
    with open_bags(bag) as bags:
        cols = bags.read_columns("/js")
    assert_joint_columns(cols, reference([bag], "/js"))
    assert cols.slow_count == count - MAX_LAYOUTS_PER_SIZE


def test_joint_states_without_joints_or_values(store, tmp_path):
    rng = np.random.default_rng(7)
    empty = [("/none", T0 + i, joint_state(store, T0 + i, rng, names=[], velocity=False, effort=False))
             for i in range(3)]
    positions_only = [("/pos", T0 + i, joint_state(store, T0 + i, rng, velocity=False, effort=False))
                      for i in range(3)]
    bag = write_bag(store, tmp_path / "bag", empty + positions_only)
    with open_bags(bag) as bags:
        none, pos = bags.read_columns("/none"), bags.read_columns("/pos")
    assert none.names == () and none.position.shape == (3, 0) and len(none) == 3
    assert_joint_columns(pos, reference([bag], "/pos"))
    assert np.isnan(pos.velocity).all() and np.isnan(pos.effort).all()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layouts=st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.booleans(), st.text(max_size=5),
                                  st.permutations(NAMES)), min_size=1, max_size=12),
       values=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=3, max_size=3))
def test_random_joint_state_layouts_equal_rosbags(store, tmp_path_factory, layouts, values):
    rng = np.random.default_rng(8)
    messages = []
    for i, (repeat, velocity, effort, frame_id, names) in enumerate(layouts):
        for k in range(repeat + 1):
            t = T0 + 1000 * i + k
            msg = joint_state(store, t, rng, names=list(names), frame_id=frame_id, velocity=velocity, effort=effort)
            msg.position[:] = values
            messages.append(("/js", t, msg))
    bag = write_bag(store, tmp_path_factory.mktemp("bag") / "bag", messages)
    with open_bags(bag) as bags:
        cols = bags.read_columns("/js")
    assert_joint_columns(cols, reference([bag], "/js"), names=layouts[0][4])


def test_imu_columns_equal_rosbags(store, tmp_path):
    rng = np.random.default_rng(9)
    bag = write_bag(store, tmp_path / "bag", [("/imu", T0 + 10 * i, imu(store, T0 + i, rng)) for i in range(30)])
    with open_bags(bag) as bags:
        cols = bags.read_columns("/imu")
    assert_imu_columns(cols, reference([bag], "/imu"))
    assert cols.slow_count == 0 and cols.frame_id == "imu_link"


def test_bytes_after_the_payload_are_accepted(store, tmp_path):
    rng = np.random.default_rng(10)
    traj = store.types["trajectory_msgs/msg/JointTrajectory"](header=header(store, T0), joint_names=NAMES, points=[])
    messages = robot_messages(store, "/sim", n=20) + [("/cmd", T0 + i, traj) for i in range(3)]
    messages.append(("/imu", T0, imu(store, T0, rng)))
    plain = write_bag(store, tmp_path / "plain", messages)
    for trailing in (b"\x00", b"\x00\x00\x00\x00", bytes(range(1, 12))):
        padded = write_bag(store, tmp_path / f"padded{len(trailing)}", messages, trailing=trailing)
        with open_bags(padded) as bags:
            cols = bags.read_many(["/sim/joint_states", "/sim/wrench", "/sim/ee_pose", "/imu"])
            commands = list(bags.iter_messages("/cmd"))
        assert_joint_columns(cols["/sim/joint_states"], reference([plain], "/sim/joint_states"))
        assert_wrench_columns(cols["/sim/wrench"], reference([plain], "/sim/wrench"))
        assert_pose_columns(cols["/sim/ee_pose"], reference([plain], "/sim/ee_pose"))
        assert_imu_columns(cols["/imu"], reference([plain], "/imu"))
        assert [list(m.joint_names) for _, m in commands] == [NAMES] * 3


def make_split_bag(store, tmp_path, storage=StoragePlugin.MCAP) -> Path:
    """A rosbag2 directory of two storage files, as `ros2 bag record --max-bag-duration` makes."""
    ext = ".mcap" if storage == StoragePlugin.MCAP else ".db3"
    first = write_bag(store, tmp_path / "part0", robot_messages(store, "/sim", n=30, seed=1), storage)
    second = write_bag(store, tmp_path / "part1", robot_messages(store, "/sim", n=30, seed=2, t0=T0 + S), storage)
    split = tmp_path / "split"
    split.mkdir()
    shutil.copy(first / f"part0{ext}", split / f"split_0{ext}")
    shutil.copy(second / f"part1{ext}", split / f"split_1{ext}")
    yaml = YAML(typ="safe")
    meta = yaml.load((first / "metadata.yaml").read_text())
    info = meta["rosbag2_bagfile_information"]
    info["relative_file_paths"] = [f"split_0{ext}", f"split_1{ext}"]
    info["message_count"] *= 2
    for topic in info["topics_with_message_count"]:
        topic["message_count"] *= 2
    info["files"] = [dict(info["files"][0], path=f"split_0{ext}"), dict(info["files"][0], path=f"split_1{ext}")]
    with (split / "metadata.yaml").open("w") as handle:
        yaml.dump(meta, handle)
    return split


@pytest.mark.parametrize("storage", [StoragePlugin.MCAP, StoragePlugin.SQLITE3])
def test_split_bag_reads_all_files_in_time_order(store, tmp_path, storage):
    split = make_split_bag(store, tmp_path, storage)
    with open_bags(split) as bags:
        assert bags.labels == [str(split)] and bags.topics()["/sim/wrench"].message_count == 60
        cols = bags.read_columns("/sim/joint_states")
        wrenches = bags.read_columns("/sim/wrench")
    assert len(cols) == 60 and np.all(np.diff(cols.recv_ns) > 0)
    ref = reference([tmp_path / "part0"], "/sim/joint_states") + reference([tmp_path / "part1"], "/sim/joint_states")
    assert_joint_columns(cols, ref)
    assert_wrench_columns(wrenches, reference([tmp_path / "part0"], "/sim/wrench")
                          + reference([tmp_path / "part1"], "/sim/wrench"))


def test_directory_of_storage_files_without_metadata(store, tmp_path):
    split = make_split_bag(store, tmp_path)
    (split / "metadata.yaml").unlink()
    with open_bags(split) as bags:
        assert len(bags.labels) == 2
        assert len(bags.read_columns("/sim/ee_pose")) == 60


def test_two_bags_mapped_by_config_and_merged(store, tmp_path):
    sim = write_bag(store, tmp_path / "sim", robot_messages(store, "", n=20, seed=1))
    real = write_bag(store, tmp_path / "real", robot_messages(store, "", n=20, seed=2, t0=T0 + 1_000_000),
                     StoragePlugin.SQLITE3)
    maps = [{"/joint_states": "/sim/joint_states", "/wrench": "/sim/wrench"},
            {"/joint_states": "/real/joint_states", "/wrench": "/real/wrench"}]
    with open_bags([sim, real], topic_maps=maps) as bags:
        types = bags.topic_types()
        assert types["/sim/joint_states"] == JS and types["/real/wrench"] == WS and types["/ee_pose"] == PS
        assert bags.topics()["/ee_pose"].bags == (str(sim), str(real))
        assert_joint_columns(bags.read_columns("/real/joint_states"), reference([real], "/joint_states"))
        merged = bags.read_columns("/ee_pose")
        assert_pose_columns(merged, reference([sim, real], "/ee_pose"))
        assert len(merged) == 40 and np.all(np.diff(merged.recv_ns) > 0)
        raw = list(bags.iter_raw(["/sim/wrench", "/real/wrench"]))
        assert [t for _, t, _ in raw] == sorted(t for _, t, _ in raw) and len(raw) == 40
        assert bags.time_range_ns() == (T0 + 7, T0 + 1_000_000 + 19 * 2_000_000 + 11)


def test_two_bag_topics_mapped_to_one(store, tmp_path):
    rng = np.random.default_rng(11)
    messages = []
    for i in range(60):
        t = T0 + i * 1_000_000
        messages.append(("/a" if i % 3 else "/b", t, wrench(store, t, rng)))
        messages.append(("/js", t + 1, joint_state(store, t, rng)))
    bag = write_bag(store, tmp_path / "bag", messages)
    start, stop = T0 + 5_000_000, T0 + 50_000_000
    with open_bags([bag], topic_maps=[{"/a": "/w", "/b": "/w"}]) as bags:
        cols = bags.read_many(["/w", "/js"], start, stop)
    merged = sorted(reference([bag], "/a") + reference([bag], "/b"), key=lambda item: item[0])
    assert_wrench_columns(cols["/w"], [(t, m) for t, m in merged if start <= t < stop])
    assert_joint_columns(cols["/js"], [(t, m) for t, m in reference([bag], "/js") if start <= t < stop])


def test_window_and_generic_messages(store, tmp_path):
    traj = store.types["trajectory_msgs/msg/JointTrajectory"]
    messages = robot_messages(store, "/sim", n=50)
    for k in range(5):
        messages.append(("/bridge/joint_trajectory", T0 + k * 20_000_000,
                         traj(header=header(store, T0), joint_names=NAMES, points=[])))
    bag = write_bag(store, tmp_path / "bag", sorted(messages, key=lambda m: m[1]))
    with open_bags(bag) as bags:
        window = bags.read_columns("/sim/wrench", T0 + 20_000_000, T0 + 40_000_000)
        assert window.recv_ns.tolist() == [T0 + i * 2_000_000 + 9 for i in range(10, 20)]
        trajectories = list(bags.iter_messages("/bridge/joint_trajectory"))
        assert [t for t, _ in trajectories] == [T0 + k * 20_000_000 for k in range(5)]
        assert list(trajectories[0][1].joint_names) == NAMES
        columns, messages_read = bags.read_all(["/sim/wrench"], ["/bridge/joint_trajectory"], T0, T0 + 10)
        assert columns["/sim/wrench"].recv_ns.tolist() == [T0 + 9]
        ((stamp, command),) = messages_read["/bridge/joint_trajectory"]
        assert stamp == T0 and list(command.joint_names) == NAMES


def test_custom_types_from_our_msgs_read_back(store, tmp_path):
    kv = store.types["diagnostic_msgs/msg/KeyValue"]
    time_cls = store.types["builtin_interfaces/msg/Time"]
    event = store.types["sim_real_bridge/msg/GapEvent"](
        header=header(store, T0), id="e1", category="human", kind="push", severity=0.9, start=time_cls(sec=1, nanosec=2),
        end=time_cls(sec=3, nanosec=4), open=False, evidence=[kv(key="k", value="v")], snapshot="")
    bag = write_bag(store, tmp_path / "bag", [("/divergence/events", T0, event)])
    with open_bags(bag) as bags:
        ((stamp, msg),) = list(bags.iter_messages("/divergence/events"))
    assert stamp == T0 and msg.category == "human" and msg.evidence[0].value == "v"


def test_types_defined_only_in_the_bag_are_registered(tmp_path):
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    private = get_typestore(Stores.ROS2_KILTED)
    private.register(get_types_from_msg("float64 level\nstring label\n", "acme_msgs/msg/Gauge"))
    msg = private.types["acme_msgs/msg/Gauge"](level=2.5, label="tank")
    bag = write_bag(private, tmp_path / "bag", [("/gauge", T0, msg)])
    with open_bags(bag) as bags:
        ((_, back),) = list(bags.iter_messages("/gauge"))
    assert (back.level, back.label) == (2.5, "tank")


@pytest.mark.parametrize("mode", ["STORAGE", "MESSAGE", "FILE"])
def test_compressed_rosbag2_bags(store, tmp_path, mode):
    from rosbags.rosbag2.enums import CompressionFormat, CompressionMode

    messages = robot_messages(store, "/sim", n=40)
    path = tmp_path / "bag"
    writer = Writer(path, version=9, storage_plugin=StoragePlugin.MCAP)
    writer.set_compression(CompressionMode[mode], CompressionFormat.ZSTD)
    with writer:
        conns = {}
        for topic, log_ns, msg in messages:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msg.__msgtype__, typestore=store)
            writer.write(conns[topic], log_ns, store.serialize_cdr(msg, msg.__msgtype__))
    uncompressed = write_bag(store, tmp_path / "plain", messages)
    with open_bags(path) as bags:
        cols = bags.read_many(["/sim/joint_states", "/sim/wrench"])
    assert_joint_columns(cols["/sim/joint_states"], reference([uncompressed], "/sim/joint_states"))
    assert_wrench_columns(cols["/sim/wrench"], reference([uncompressed], "/sim/wrench"))


MCAP_SHAPES = {
    "zstd chunks": {"compression": CompressionType.ZSTD, "chunk_size": 2000},
    "lz4 chunks": {"compression": CompressionType.LZ4, "chunk_size": 2000},
    "no message indexes": {"compression": CompressionType.NONE, "chunk_size": 2000,
                           "index_types": IndexType.CHUNK},
    "no chunks": {"use_chunking": False},
    "no summary": {"compression": CompressionType.NONE, "index_types": IndexType.NONE, "repeat_channels": False,
                   "repeat_schemas": False, "use_statistics": False, "use_summary_offsets": False},
}


@pytest.mark.parametrize("shape", sorted(MCAP_SHAPES))
def test_bare_mcap_files_of_every_shape(store, tmp_path, shape):
    messages = robot_messages(store, "/real", n=40)
    path = write_with_mcap_library(store, tmp_path / "bare.mcap", messages, **MCAP_SHAPES[shape])
    plain = write_bag(store, tmp_path / "plain", messages)
    start, stop = T0 + 10 * 2_000_000, T0 + 30 * 2_000_000
    with open_bags(path) as bags:
        assert bags.topics()["/real/wrench"].message_count == 40
        assert bags.time_range_ns() == (T0 + 7, T0 + 39 * 2_000_000 + 11)
        cols = bags.read_many(["/real/joint_states", "/real/wrench", "/real/ee_pose"])
        window = bags.read_columns("/real/joint_states", start, stop)
    assert_joint_columns(cols["/real/joint_states"], reference([plain], "/real/joint_states"))
    assert_wrench_columns(cols["/real/wrench"], reference([plain], "/real/wrench"))
    assert_pose_columns(cols["/real/ee_pose"], reference([plain], "/real/ee_pose"))
    assert_joint_columns(window, [(t, m) for t, m in reference([plain], "/real/joint_states") if start <= t < stop])


def test_mcap_file_opens_by_its_magic_whatever_its_name(store, tmp_path):
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=4))
    renamed = tmp_path / "recording.bin"
    shutil.copy(bag / "bag.mcap", renamed)
    with open_bags(renamed) as bags:
        assert len(bags.read_columns("/sim/wrench")) == 4


def test_teleop_rig_recording_without_metadata(tmp_path):
    from helpers.foreign_bags import write_teleop_mcap

    rec = write_teleop_mcap(tmp_path / "teleop.mcap", joints=7, trailing_bytes=5)
    assert not (tmp_path / "metadata.yaml").exists()
    with open_bags(rec.path) as bags:
        assert bags.topic_types() == {rec.leader_topic: JS, rec.follower_topic: JS}
        cols = bags.read_many([rec.leader_topic, rec.follower_topic])
    leader, follower = cols[rec.leader_topic], cols[rec.follower_topic]
    assert leader.names == rec.leader_names and follower.names == rec.follower_names
    assert leader.stamp_ns.tolist() == rec.stamp_ns.tolist() == follower.stamp_ns.tolist()
    assert same(leader.position, rec.leader_q_rad) and same(follower.position, rec.follower_q_rad)
    assert np.isnan(leader.velocity).all() and not np.isnan(follower.velocity).any()
    held = np.diff(leader.position, axis=0) == 0  # encoders hold one value while a joint is idle
    assert held.mean() > 0.2 and leader.slow_count == 0
