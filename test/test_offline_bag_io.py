"""Offline bag reading: MCAP and sqlite3, split and multiple bags, exact columnar decode, errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import StoragePlugin, Writer
from ruamel.yaml import YAML

from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.errors import BagError
from sim_real_bridge.offline.bag_io import JointStateColumns, PoseColumns, WrenchColumns, open_bags

S = 1_000_000_000
T0 = 1_700_000_000 * S
JS, WS, PS = "sensor_msgs/msg/JointState", "geometry_msgs/msg/WrenchStamped", "geometry_msgs/msg/PoseStamped"
NAMES = ["joint_1", "joint_2", "joint_3"]


@pytest.fixture(scope="module")
def store():
    return build_typestore()


def header(store, stamp_ns, frame_id="base_link"):
    time_cls = store.types["builtin_interfaces/msg/Time"]
    return store.types["std_msgs/msg/Header"](stamp=time_cls(sec=stamp_ns // S, nanosec=stamp_ns % S), frame_id=frame_id)


def joint_state(store, stamp_ns, rng, names=NAMES, frame_id="base_link", velocity=True, effort=True):
    n = len(names)
    return store.types[JS](
        header=header(store, stamp_ns, frame_id), name=list(names), position=rng.normal(size=n),
        velocity=rng.normal(size=n) if velocity else np.zeros(0), effort=rng.normal(size=n) if effort else np.zeros(0))


def wrench(store, stamp_ns, rng, frame_id="ft_sensor"):
    vec = store.types["geometry_msgs/msg/Vector3"]
    f, t = rng.normal(size=3), rng.normal(size=3)
    return store.types[WS](header=header(store, stamp_ns, frame_id), wrench=store.types["geometry_msgs/msg/Wrench"](
        force=vec(x=f[0], y=f[1], z=f[2]), torque=vec(x=t[0], y=t[1], z=t[2])))


def pose(store, stamp_ns, rng, frame_id="world"):
    p, q = rng.normal(size=3), rng.normal(size=4)
    q /= np.linalg.norm(q)
    return store.types[PS](header=header(store, stamp_ns, frame_id), pose=store.types["geometry_msgs/msg/Pose"](
        position=store.types["geometry_msgs/msg/Point"](x=p[0], y=p[1], z=p[2]),
        orientation=store.types["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3])))


def write_bag(store, path: Path, messages, storage=StoragePlugin.MCAP) -> Path:
    """Write (topic, log_ns, msg) with rosbags' own Writer, independent of our writer."""
    with Writer(path, version=9, storage_plugin=storage) as writer:
        conns = {}
        for topic, log_ns, msg in messages:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msg.__msgtype__, typestore=store)
            writer.write(conns[topic], log_ns, store.serialize_cdr(msg, msg.__msgtype__))
    return path


def robot_messages(store, prefix="", n=50, seed=0, t0=T0, period=2_000_000):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = t0 + i * period
        out.append((f"{prefix}/joint_states", t + 7, joint_state(store, t, rng)))
        out.append((f"{prefix}/wrench", t + 9, wrench(store, t, rng)))
        out.append((f"{prefix}/ee_pose", t + 11, pose(store, t, rng)))
    return out


def reference(paths, topic):
    """(log_ns, msg) of a topic as rosbags' AnyReader deserializes them, by log time."""
    out = []
    for path in paths:
        with AnyReader([Path(path)]) as reader:
            conns = [c for c in reader.connections if c.topic == topic]
            out += [(t, reader.deserialize(d, c.msgtype)) for c, t, d in reader.messages(connections=conns)]
    return sorted(out, key=lambda item: item[0])


def stamp_of(msg):
    return msg.header.stamp.sec * S + msg.header.stamp.nanosec


def same(a, b):
    return np.array_equal(np.asarray(a, float).view(np.uint64), np.asarray(b, float).view(np.uint64))


def assert_joint_columns(cols, ref, names=NAMES):
    assert isinstance(cols, JointStateColumns)
    assert cols.names == tuple(names)
    assert cols.recv_ns.tolist() == [t for t, _ in ref]
    assert cols.stamp_ns.tolist() == [stamp_of(m) for _, m in ref]
    for field in ("position", "velocity", "effort"):
        expected = []
        for _, m in ref:
            values = np.asarray(getattr(m, field), float)
            if values.size == 0:
                expected.append(np.full(len(names), np.nan))
            else:
                expected.append(values[[list(m.name).index(n) for n in names]])
        assert same(getattr(cols, field), expected), field


def assert_wrench_columns(cols, ref):
    assert isinstance(cols, WrenchColumns)
    assert cols.recv_ns.tolist() == [t for t, _ in ref]
    assert cols.stamp_ns.tolist() == [stamp_of(m) for _, m in ref]
    assert same(cols.force_n, [[m.wrench.force.x, m.wrench.force.y, m.wrench.force.z] for _, m in ref])
    assert same(cols.torque_nm, [[m.wrench.torque.x, m.wrench.torque.y, m.wrench.torque.z] for _, m in ref])


def assert_pose_columns(cols, ref):
    assert isinstance(cols, PoseColumns)
    assert cols.recv_ns.tolist() == [t for t, _ in ref]
    assert cols.stamp_ns.tolist() == [stamp_of(m) for _, m in ref]
    assert same(cols.position_m, [[m.pose.position.x, m.pose.position.y, m.pose.position.z] for _, m in ref])
    q = [[m.pose.orientation.w, m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z] for _, m in ref]
    assert same(cols.orientation_wxyz, q)


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
    for path in (bag / "bag.mcap", db / "db.db3"):
        with open_bags([path]) as bags:
            assert len(bags.read_columns("/real/wrench")) == 10


@pytest.mark.parametrize("block_bytes", [None, 1, 700])
def test_irregular_messages_fall_back_and_still_match(store, tmp_path, monkeypatch, block_bytes):
    from sim_real_bridge.offline import bag_io

    if block_bytes is not None:  # rows decoded a few at a time: every block boundary
        monkeypatch.setattr(bag_io, "_BLOCK_BYTES", block_bytes)
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
    assert cols["/js"].slow_count == 0  # every irregular length group still had a consistent layout


@pytest.mark.parametrize("block_bytes", [None, 300])
def test_alternating_templates_and_foreign_encodings(store, tmp_path, monkeypatch, block_bytes):
    from sim_real_bridge.offline import bag_io

    if block_bytes is not None:
        monkeypatch.setattr(bag_io, "_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(5)
    messages = []
    for i in range(20):
        t = T0 + i * 10**7
        frame = "frameA" if i % 4 else "frameB"  # same length, different bytes
        messages.append(("/p", t, pose(store, t, rng, frame_id=frame)))
    bag = write_bag(store, tmp_path / "bag", messages)
    with open_bags(bag) as bags:
        cols = bags.read_columns("/p")
    assert_pose_columns(cols, reference([bag], "/p"))
    assert cols.slow_count == 0 and cols.frame_id == "frameB"

    big_endian = tmp_path / "big"
    with Writer(big_endian, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conn = writer.add_connection("/w", WS, typestore=store)
        for i in range(6):
            msg = wrench(store, T0 + i, rng)
            writer.write(conn, T0 + i, store.serialize_cdr(msg, WS, little_endian=i % 2 == 0))
    with open_bags(big_endian) as bags:
        cols = bags.read_columns("/w")
    assert_wrench_columns(cols, reference([big_endian], "/w"))
    assert cols.slow_count == 3


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


def test_both_sides_in_one_bag(store, tmp_path):
    bag = write_bag(store, tmp_path / "both", robot_messages(store, "/sim", n=15) + robot_messages(store, "/real", n=15, seed=3))
    with open_bags(bag) as bags:
        cols = bags.read_many(["/sim/joint_states", "/real/joint_states"])
    assert_joint_columns(cols["/real/joint_states"], reference([bag], "/real/joint_states"))
    assert_joint_columns(cols["/sim/joint_states"], reference([bag], "/sim/joint_states"))


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


def test_types_defined_only_in_the_bag_are_registered(store, tmp_path):
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    private = get_typestore(Stores.ROS2_KILTED)
    private.register(get_types_from_msg("float64 level\nstring label\n", "acme_msgs/msg/Gauge"))
    msg = private.types["acme_msgs/msg/Gauge"](level=2.5, label="tank")
    bag = write_bag(private, tmp_path / "bag", [("/gauge", T0, msg)])
    with open_bags(bag) as bags:
        ((_, back),) = list(bags.iter_messages("/gauge"))
    assert (back.level, back.label) == (2.5, "tank")


# -- errors ------------------------------------------------------------------------


def test_missing_path_and_not_a_bag(tmp_path):
    with pytest.raises(BagError, match=r"bag .*nowhere\.mcap does not exist"):
        open_bags(tmp_path / "nowhere.mcap")
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(BagError, match=r"bag .*notes\.txt: not a rosbag2 bag"):
        open_bags(text)
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(BagError, match=r"bag .*empty_dir: directory has no metadata\.yaml"):
        open_bags(tmp_path / "empty_dir")
    with pytest.raises(BagError, match="no bag given"):
        open_bags([])


def test_mcap_without_suffix_is_named(store, tmp_path):
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=2))
    renamed = tmp_path / "recording.bin"
    shutil.copy(bag / "bag.mcap", renamed)
    with pytest.raises(BagError, match=r"recording\.bin: looks like a \.mcap file"):
        open_bags(renamed)


def test_missing_topic_names_bag_and_topic(store, tmp_path):
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=2))
    with open_bags(bag) as bags:
        with pytest.raises(BagError, match=r"topic /real/joint_states not found in bag\(s\) .*bag; available: /sim/ee_pose"):
            bags.read_columns("/real/joint_states")
        with pytest.raises(BagError, match=r"topic /nope not found"):
            list(bags.iter_messages("/nope"))
    with pytest.raises(BagError, match=r"bag .*bag: mapped topic\(s\) /absent not found"):
        open_bags([bag], topic_maps=[{"/absent": "/x"}])
    with pytest.raises(BagError, match="2 topic maps for 1 bags"):
        open_bags([bag], topic_maps=[{}, {}])


def test_unknown_message_type(tmp_path):
    with Writer(tmp_path / "bag", version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conn = writer.add_connection("/widget", "acme_msgs/msg/Widget", msgdef="", rihs01="RIHS01_" + "0" * 64)
        writer.write(conn, T0, b"\x00\x01\x00\x00\x01\x00\x00\x00")
    with open_bags(tmp_path / "bag") as bags:
        assert bags.topic_types() == {"/widget": "acme_msgs/msg/Widget"}
        with pytest.raises(BagError, match=r"unknown message type acme_msgs/msg/Widget of topic /widget in bag\(s\) .*bag"):
            list(bags.iter_messages("/widget"))


def test_unsupported_column_type_points_to_iter_messages(store, tmp_path):
    traj = store.types["trajectory_msgs/msg/JointTrajectory"](header=header(store, T0), joint_names=[], points=[])
    bag = write_bag(store, tmp_path / "bag", [("/cmd", T0, traj)])
    with open_bags(bag) as bags, pytest.raises(BagError, match=r"topic /cmd .* is trajectory_msgs/msg/JointTrajectory; .*use iter_messages"):
        bags.read_columns("/cmd")


def test_empty_window_and_empty_topic(store, tmp_path):
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=5))
    with open_bags(bag) as bags:
        with pytest.raises(BagError, match=r"topic /sim/wrench of bag\(s\) .*bag has no messages in window \[0, 1000\) ns"):
            bags.read_columns("/sim/wrench", 0, 1000)


def test_joint_names_changing_to_another_set(store, tmp_path):
    rng = np.random.default_rng(0)
    messages = [("/js", T0 + i, joint_state(store, T0 + i, rng, names=NAMES if i < 3 else ["a", "b", "c"])) for i in range(5)]
    bag = write_bag(store, tmp_path / "bag", messages)
    with open_bags(bag) as bags, pytest.raises(BagError, match=r"topic /js in bag\(s\) .*: joint names change at log time"):
        bags.read_columns("/js")


def test_wrong_value_count_in_joint_state(store, tmp_path):
    rng = np.random.default_rng(0)
    bad = joint_state(store, T0 + 1, rng)
    bad.velocity = np.zeros(2)
    bag = write_bag(store, tmp_path / "bag", [("/js", T0, joint_state(store, T0, rng)), ("/js", T0 + 1, bad)])
    with open_bags(bag) as bags, pytest.raises(BagError, match=r"velocity has 2 values for 3 joints at log time"):
        bags.read_columns("/js")


def test_undecodable_payload_names_topic(store, tmp_path):
    with Writer(tmp_path / "bag", version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conn = writer.add_connection("/w", WS, typestore=store)
        writer.write(conn, T0, b"\x00\x01\x00\x00\x05")
    with open_bags(tmp_path / "bag") as bags, pytest.raises(BagError, match=r"topic /w in bag\(s\) .*: cannot deserialize"):
        bags.read_columns("/w")


@pytest.mark.parametrize("damage", ["truncate", "bad_magic", "garbage"])
def test_truncated_or_corrupt_mcap(store, tmp_path, damage):
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=400))
    path = bag / "bag.mcap"
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "bad_magic":
        data[:8] = b"NOTMCAP!"
    else:
        data[200:-2000] = b"\xff" * (len(data) - 2200)
    path.write_bytes(bytes(data))
    for target in (bag, path):
        with pytest.raises(BagError, match=r"bag .*bag(\.mcap)?: (cannot open|topic /sim/wrench: cannot read) \(corrupt or truncated\?\)"):
            with open_bags(target) as bags:
                bags.read_columns("/sim/wrench")


@pytest.mark.parametrize("field", ["length", "opcode"])
def test_corrupt_chunk_records_are_detected(store, tmp_path, field):
    messages = robot_messages(store, "/sim", n=50)
    bag = write_bag(store, tmp_path / "bag", messages)
    path = bag / "bag.mcap"
    data = bytearray(path.read_bytes())
    topic, _, msg = messages[30]
    record = data.index(bytes(store.serialize_cdr(msg, msg.__msgtype__))) - 31
    assert data[record] == 0x05
    if field == "length":
        data[record + 1 : record + 9] = (10**9).to_bytes(8, "little")
    else:
        data[record] = 0x7F
    path.write_bytes(bytes(data))
    with open_bags(bag) as bags, pytest.raises(BagError, match=rf"bag .*bag: topic {topic}: cannot read \(corrupt or truncated\?\)"):
        bags.read_columns(topic)


def test_truncated_sqlite3(store, tmp_path):
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=400), StoragePlugin.SQLITE3)
    path = bag / "bag.db3"
    path.write_bytes(path.read_bytes()[:3000])
    with pytest.raises(BagError, match=r"bag .*bag.*(cannot open|cannot read) \(corrupt or truncated\?\)"):
        with open_bags(bag) as bags:
            bags.read_columns("/sim/wrench")


def test_same_topic_with_two_types_across_bags(store, tmp_path):
    rng = np.random.default_rng(0)
    first = write_bag(store, tmp_path / "a", [("/x", T0, wrench(store, T0, rng))])
    second = write_bag(store, tmp_path / "b", [("/x", T0, pose(store, T0, rng))])
    with open_bags([first, second]) as bags:
        with pytest.raises(BagError, match=r"topic /x is geometry_msgs/msg/WrenchStamped in bag .*a but geometry_msgs/msg/PoseStamped in bag .*b"):
            bags.topic_types()


def test_time_range_of_empty_bags(store, tmp_path):
    with Writer(tmp_path / "empty", version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        writer.add_connection("/w", WS, typestore=store)
    with open_bags(tmp_path / "empty" / "metadata.yaml") as bags:
        assert bags.topic_types() == {"/w": WS}
        with pytest.raises(BagError, match=r"bags .*empty hold no messages"):
            bags.time_range_ns()
        with pytest.raises(BagError, match=r"topic /w of bag\(s\) .*empty has no messages$"):
            bags.read_columns("/w")


def test_imu_columns_equal_rosbags(store, tmp_path):
    from sim_real_bridge.offline.bag_io import ImuColumns

    rng = np.random.default_rng(9)
    vec, quat = store.types["geometry_msgs/msg/Vector3"], store.types["geometry_msgs/msg/Quaternion"]
    messages = []
    for i in range(30):
        q, w, a = rng.normal(size=4), rng.normal(size=3), rng.normal(size=3)
        msg = store.types["sensor_msgs/msg/Imu"](
            header=header(store, T0 + i, "imu_link"), orientation=quat(x=q[0], y=q[1], z=q[2], w=q[3]),
            orientation_covariance=rng.normal(size=9), angular_velocity=vec(x=w[0], y=w[1], z=w[2]),
            angular_velocity_covariance=rng.normal(size=9), linear_acceleration=vec(x=a[0], y=a[1], z=a[2]),
            linear_acceleration_covariance=rng.normal(size=9))
        messages.append(("/imu", T0 + 10 * i, msg))
    bag = write_bag(store, tmp_path / "bag", messages)
    with open_bags(bag) as bags:
        cols = bags.read_columns("/imu")
    ref = reference([bag], "/imu")
    assert isinstance(cols, ImuColumns) and cols.slow_count == 0 and cols.frame_id == "imu_link"
    assert cols.stamp_ns.tolist() == [stamp_of(m) for _, m in ref]
    assert same(cols.orientation_wxyz, [[m.orientation.w, m.orientation.x, m.orientation.y, m.orientation.z] for _, m in ref])
    assert same(cols.angular_velocity_rad_s, [[m.angular_velocity.x, m.angular_velocity.y, m.angular_velocity.z] for _, m in ref])
    assert same(cols.linear_acceleration_m_s2,
                [[m.linear_acceleration.x, m.linear_acceleration.y, m.linear_acceleration.z] for _, m in ref])


@pytest.mark.parametrize("mode", ["STORAGE", "MESSAGE", "FILE"])
def test_compressed_bags(store, tmp_path, mode):
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


def test_chunks_without_message_indexes_are_walked_record_by_record(store, tmp_path, monkeypatch):
    from sim_real_bridge.offline import bag_io

    monkeypatch.setattr(bag_io, "_indexed_chunk_messages", lambda *args: None)
    messages = robot_messages(store, "/sim", n=60)
    bag = write_bag(store, tmp_path / "bag", messages)
    with open_bags(bag) as bags:
        cols = bags.read_many(["/sim/joint_states", "/sim/wrench"], T0 + 10 * 2_000_000, T0 + 50 * 2_000_000)
    ref = [(t, m) for t, m in reference([bag], "/sim/joint_states") if T0 + 20_000_000 <= t < T0 + 100_000_000]
    assert_joint_columns(cols["/sim/joint_states"], ref)
    assert len(cols["/sim/wrench"]) == 40

    path = bag / "bag.mcap"
    data = bytearray(path.read_bytes())
    record = data.index(bytes(store.serialize_cdr(messages[31][2], WS))) - 31
    data[record + 1 : record + 9] = (10**9).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with open_bags(bag) as bags, pytest.raises(BagError, match=r"topic /sim/wrench: cannot read .*record overruns chunk"):
        bags.read_columns("/sim/wrench")


def test_message_indexes_outside_the_read_span_are_read_from_the_file(store, tmp_path, monkeypatch):
    from sim_real_bridge.offline import bag_io

    read_from_file = bag_io._index_entries
    monkeypatch.setattr(bag_io, "_index_entries", lambda span, *args: read_from_file(span[:0], *args))
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=60))
    with open_bags(bag) as bags:
        cols = bags.read_many(["/sim/joint_states", "/sim/wrench"])
    assert_joint_columns(cols["/sim/joint_states"], reference([bag], "/sim/joint_states"))
    assert_wrench_columns(cols["/sim/wrench"], reference([bag], "/sim/wrench"))


@pytest.mark.parametrize("width", [1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 104])
def test_rows_are_compared_byte_for_byte_at_every_width(width):
    from sim_real_bridge.offline.bag_io import _equal_rows

    rng = np.random.default_rng(width)
    template = rng.integers(0, 256, size=width + 3, dtype=np.uint8)[2 : width + 2]  # unaligned
    rows = np.tile(template, (3 * width + 1, 1))
    for i in range(width):  # row 3i differs in byte i, row 3i + 1 in byte i by one bit
        rows[3 * i, i] ^= 0xFF
        rows[3 * i + 1, i] ^= 0x01
    block = np.zeros((rows.shape[0], width + 5), dtype=np.uint8)
    block[:, 3 : 3 + width] = rows  # rows as they come: a strided slice of wider ones
    got = _equal_rows(block[:, 3 : 3 + width], template)
    assert got.tolist() == (rows == template).all(axis=1).tolist()


def test_bag_directory_of_one_mcap_opens_the_file_when_metadata_agrees(store, tmp_path):
    from rosbags.rosbag2 import Reader
    from rosbags.rosbag2.reader import DirectoryReader
    from rosbags.rosbag2.storage_mcap import McapReader

    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=30))
    with Reader(bag) as rosbags_reader:
        expected = [(c.topic, c.msgtype, c.msgcount) for c in rosbags_reader.connections]
        span = (rosbags_reader.start_time, rosbags_reader.end_time - 1)
    with open_bags(bag) as bags:
        assert isinstance(bags._sources[0].reader.storage, McapReader)
        assert [(t, i.msgtype, i.message_count) for t, i in bags.topics().items()] == expected
        assert bags.time_range_ns() == span
        assert_joint_columns(bags.read_columns("/sim/joint_states"), reference([bag], "/sim/joint_states"))

    meta = bag / "metadata.yaml"
    text = meta.read_text()
    meta.write_text(text.replace("message_count: 30\n", "message_count: 29\n", 1))
    with open_bags(bag) as bags:  # metadata and file disagree: rosbags reads the directory as always
        assert isinstance(bags._sources[0].reader.storage, DirectoryReader)
        assert 29 in [i.message_count for i in bags.topics().values()]
    meta.write_text(text.replace("storage_identifier: mcap", "storage_identifier: mcap\n  bad: [unclosed"))
    with pytest.raises(BagError, match=r"bag .*bag: cannot open \(corrupt or truncated\?\)"):
        open_bags(bag)


@pytest.mark.parametrize("walked", [False, True])
def test_two_bag_topics_mapped_to_one_read_from_one_file(store, tmp_path, monkeypatch, walked):
    """Entries of several channels form one topic: each checked against its own channel."""
    from sim_real_bridge.offline import bag_io

    if walked:
        monkeypatch.setattr(bag_io, "_indexed_chunk_messages", lambda *args: None)
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

    path = bag / "bag.mcap"
    data = bytearray(path.read_bytes())
    topic, _, msg = messages[2 * 7]  # one of /a: its record says it is of /b's channel
    record = data.index(bytes(store.serialize_cdr(msg, WS))) - 31
    with open_bags([bag]) as bags:
        ids = {c.topic: c.id for c in bags._sources[0].reader.connections}
    assert topic == "/a" and data[record + 9] == ids["/a"]
    data[record + 9 : record + 11] = ids["/b"].to_bytes(2, "little")
    path.write_bytes(bytes(data))
    with open_bags([bag], topic_maps=[{"/a": "/w", "/b": "/w"}]) as bags:
        if walked:  # no index to disagree with: the record is /b's, as rosbags reads it
            assert len(bags.read_columns("/w")) == 60
        else:
            with pytest.raises(BagError, match=r"topic /w: cannot read \(corrupt or truncated\?\).*disagrees"):
                bags.read_columns("/w")
