"""Every error of bag reading: one BagError naming the bag and topic, and saying what is wrong."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from helpers.bag_messages import (
    JS,
    NAMES,
    T0,
    WS,
    header,
    joint_state,
    pose,
    robot_messages,
    write_bag,
    write_with_mcap_library,
    wrench,
)
from helpers.foreign_bags import write_json_mcap
from rosbags.rosbag2 import StoragePlugin, Writer

from sim_real_bridge.capture.bag_writer import BagWriter
from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.errors import BagError
from sim_real_bridge.offline.bags import open_bags


@pytest.fixture(scope="module")
def store():
    return build_typestore()


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


def test_sqlite3_bag_without_its_suffix_is_named(store, tmp_path):
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=2), StoragePlugin.SQLITE3)
    renamed = tmp_path / "recording.bin"
    shutil.copy(bag / "bag.db3", renamed)
    with pytest.raises(BagError, match=r"recording\.bin: looks like an sqlite3 bag; rename it to end in \.db3"):
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
        with pytest.raises(BagError, match=r"unknown message type acme_msgs/msg/Widget of topic /widget in bag\(s\) "
                                           r".*bag, expected sensor_msgs/msg/JointState: no definition"):
            bags.read_columns("/widget", expected_type=JS)


def test_type_without_columns_is_named_with_the_types_that_have_them(store, tmp_path):
    traj = store.types["trajectory_msgs/msg/JointTrajectory"](header=header(store, T0), joint_names=[], points=[])
    bag = write_bag(store, tmp_path / "bag", [("/cmd", T0, traj)])
    with open_bags(bag) as bags, pytest.raises(BagError) as caught:
        bags.read_columns("/cmd")
    assert caught.match(r"^topic /cmd in bag\(s\) .*bag is trajectory_msgs/msg/JointTrajectory; columns exist for "
                        r"geometry_msgs/msg/PoseStamped, .*sensor_msgs/msg/JointState$")
    assert "iter_messages" not in str(caught.value)


def test_topic_of_another_type_is_refused_before_reading(store, tmp_path):
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=300))
    with open_bags(bag) as bags:
        bags.check_types({"/sim/joint_states": JS, "/sim/wrench": WS})
    path = bag / "bag.mcap"
    data = bytearray(path.read_bytes())
    data[1000:-3000] = b"\xff" * (len(data) - 4000)  # the chunks: anything read would fail
    path.write_bytes(bytes(data))
    expected = (r"^topic /sim/wrench in bag\(s\) .*bag is geometry_msgs/msg/WrenchStamped, "
                r"expected sensor_msgs/msg/JointState$")
    with open_bags(bag) as bags:
        with pytest.raises(BagError, match=expected):
            bags.read_columns("/sim/wrench", expected_type=JS)
        with pytest.raises(BagError, match=expected):
            bags.read_all(["/sim/joint_states", "/sim/wrench"], [], expected_types={"/sim/wrench": JS})
        with pytest.raises(BagError, match=expected):
            bags.check_types({"/sim/wrench": JS})


def test_json_messages_are_named_as_such(tmp_path):
    path = write_json_mcap(tmp_path / "foxglove.mcap")
    with open_bags(path) as bags:
        assert bags.topics()["/joint_states"].encoding == "json"
        assert len(list(bags.iter_raw(["/joint_states"]))) == 20
        for read in (lambda: bags.read_columns("/joint_states"), lambda: list(bags.iter_messages("/joint_states")),
                     lambda: bags.check_types({"/joint_states": JS})):
            with pytest.raises(BagError, match=r"^topic /joint_states in bag\(s\) .*foxglove\.mcap: messages are "
                                               r"json, not ROS 2 CDR$"):
                read()


def test_empty_window_and_empty_topic(store, tmp_path):
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=5))
    with open_bags(bag) as bags:
        with pytest.raises(BagError, match=r"topic /sim/wrench of bag\(s\) .*bag has no messages in window \[0, 1000\) ns"):
            bags.read_columns("/sim/wrench", 0, 1000)
    with Writer(tmp_path / "empty", version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        writer.add_connection("/w", WS, typestore=store)
    with open_bags(tmp_path / "empty" / "metadata.yaml") as bags:
        assert bags.topic_types() == {"/w": WS}
        with pytest.raises(BagError, match=r"bags .*empty hold no messages"):
            bags.time_range_ns()
        with pytest.raises(BagError, match=r"topic /w of bag\(s\) .*empty has no messages$"):
            bags.read_columns("/w")


@pytest.mark.parametrize(("names", "message"), [
    (["a", "b", "c"], r"joint names change at log time \d+ ns: \['a', 'b', 'c'\] instead of"),
    (["joint_1", "joint_1", "joint_3"], r"joint name\(s\) joint_1 repeated in one message at log time \d+ ns"),
])
def test_joint_names_that_change_or_repeat(store, tmp_path, names, message):
    rng = np.random.default_rng(0)
    messages = [("/js", T0 + i, joint_state(store, T0 + i, rng, names=NAMES if i < 3 else names)) for i in range(5)]
    bag = write_bag(store, tmp_path / "bag", messages)
    with open_bags(bag) as bags, pytest.raises(BagError, match=rf"^topic /js in bag\(s\) .*bag: {message}"):
        bags.read_columns("/js")


def test_wrong_value_count_in_joint_state(store, tmp_path):
    rng = np.random.default_rng(0)
    bad = joint_state(store, T0 + 1, rng)
    bad.velocity = np.zeros(2)
    bag = write_bag(store, tmp_path / "bag", [("/js", T0, joint_state(store, T0, rng)), ("/js", T0 + 1, bad)])
    with open_bags(bag) as bags, pytest.raises(BagError, match=rf"velocity has 2 values for 3 joints at log time {T0 + 1} ns"):
        bags.read_columns("/js")


@pytest.mark.parametrize(("payload", "reason"), [
    (b"\x00\x01\x00\x00\x05", r"message of 5 bytes ends before byte"),
    (b"\x00\x02\x00\x00" + bytes(80), r"not ROS 2 CDR: encapsulation header 00020000"),
])
def test_undecodable_payload_names_topic_and_log_time(store, tmp_path, payload, reason):
    with Writer(tmp_path / "bag", version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conn = writer.add_connection("/w", WS, typestore=store)
        writer.write(conn, T0, bytes(store.serialize_cdr(wrench(store, T0, np.random.default_rng(0)), WS)))
        writer.write(conn, T0 + 1, payload)
        other = writer.add_connection("/cmd", "std_msgs/msg/String", typestore=store)
        writer.write(other, T0, b"\x00\x01\x00\x00\xff\x00\x00\x00")
    with open_bags(tmp_path / "bag") as bags:
        with pytest.raises(BagError, match=rf"^topic /w in bag\(s\) .*bag: cannot deserialize "
                                           rf"geometry_msgs/msg/WrenchStamped at log time {T0 + 1} ns: {reason}"):
            bags.read_columns("/w")
        with pytest.raises(BagError, match=r"^topic /cmd in bag\(s\) .*bag: cannot deserialize std_msgs/msg/String"):
            list(bags.iter_messages("/cmd"))


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
        with pytest.raises(BagError, match=r"bag .*bag(\.mcap)?: (cannot open|topic /sim/wrench: cannot read) "
                                           r"\(corrupt or truncated\?\)"):
            with open_bags(target) as bags:
                bags.read_columns("/sim/wrench")


@pytest.mark.parametrize(("field", "reason"), [
    ("length", "disagrees with the chunk's records"), ("opcode", "disagrees with the chunk's records"),
    ("channel", "disagrees with the chunk's records"), ("offset", "points past its chunk's records"),
])
def test_message_indexes_are_checked_against_the_records(store, tmp_path, field, reason):
    messages = robot_messages(store, "/sim", n=50)
    bag = write_bag(store, tmp_path / "bag", messages)
    path = bag / "bag.mcap"
    data = bytearray(path.read_bytes())
    topic, log_ns, msg = messages[31]
    record = data.index(bytes(store.serialize_cdr(msg, msg.__msgtype__))) - 31
    assert data[record] == 0x05
    if field == "length":
        data[record + 1 : record + 9] = (10**9).to_bytes(8, "little")
    elif field == "opcode":
        data[record] = 0x7F
    elif field == "channel":
        data[record + 9] ^= 0x03
    else:  # the index entry of this message points far away
        entry = data.rindex(log_ns.to_bytes(8, "little"))  # after the record's own times, in the message index
        data[entry + 8 : entry + 16] = (10**12).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with open_bags(bag) as bags, pytest.raises(BagError, match=rf"bag .*bag: topic {topic}: cannot read \(corrupt or "
                                                                rf"truncated\?\): .*{reason}"):
        bags.read_columns(topic)


def test_walked_chunk_record_that_overruns_its_chunk(store, tmp_path):
    from mcap.writer import CompressionType, IndexType

    messages = robot_messages(store, "/sim", n=20)
    path = write_with_mcap_library(store, tmp_path / "bare.mcap", messages, compression=CompressionType.NONE,
                                   index_types=IndexType.CHUNK, enable_crcs=False)
    data = bytearray(path.read_bytes())
    record = data.index(bytes(store.serialize_cdr(messages[7][2], WS))) - 31
    data[record + 1 : record + 9] = (10**9).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    with open_bags(path) as bags, pytest.raises(BagError, match=r"topic /sim/wrench: cannot read .*record overruns chunk"):
        bags.read_columns("/sim/wrench")


def test_chunk_crc_mismatch(store, tmp_path):
    rng = np.random.default_rng(1)
    path = tmp_path / "snap.mcap"
    with BagWriter(path, store) as bag:
        bag.add_topic("/p", "geometry_msgs/msg/PoseStamped")
        for i in range(10):
            bag.write_message("/p", T0 + i, pose(store, T0 + i, rng))
    data = bytearray(path.read_bytes())
    data[data.index(b"world") + 20] ^= 0x01  # a float of the first pose: only the CRC can tell
    path.write_bytes(bytes(data))
    with open_bags(path) as bags, pytest.raises(BagError, match=r"topic /p: cannot read .*CRC mismatch"):
        bags.read_columns("/p")


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
        with pytest.raises(BagError, match=r"topic /x is geometry_msgs/msg/WrenchStamped in bag .*a but "
                                           r"geometry_msgs/msg/PoseStamped in bag .*b"):
            bags.topic_types()


def test_bag_directory_whose_metadata_is_broken_or_names_a_missing_file(store, tmp_path):
    bag = write_bag(store, tmp_path / "bag", robot_messages(store, "/sim", n=3))
    meta = bag / "metadata.yaml"
    text = meta.read_text()
    meta.write_text(text.replace("storage_identifier: mcap", "storage_identifier: mcap\n  bad: [unclosed"))
    with pytest.raises(BagError, match=r"bag .*bag: cannot open \(corrupt or truncated\?\)"):
        open_bags(bag)
    meta.write_text(text)
    (bag / "bag.mcap").rename(bag / "moved.mcap")
    with pytest.raises(BagError, match=r"bag .*bag: file\(s\) .*bag\.mcap listed in metadata\.yaml do not exist"):
        open_bags(bag)


def test_replay_refuses_swapped_topic_types_in_one_line(tmp_path):
    from sim_real_bridge.offline.replay import RunSpec, replay_run
    from sim_real_bridge.offline.replay_config import ReplayConfig
    from sim_real_bridge.offline.synthetic import SyntheticRun, write_synthetic_bag

    bag = write_synthetic_bag(tmp_path / "bag", SyntheticRun(duration_s=1.0))
    defaults = ReplayConfig()
    swapped = ReplayConfig(sim_topics={**defaults.sim_topics, "joint_states": "/sim/wrench",
                                       "wrench": "/sim/joint_states"})
    result = replay_run(RunSpec("bag", (str(bag),)), swapped, tmp_path / "out")
    assert not result.ok
    assert result.error == (f"topic /sim/wrench in bag(s) {bag} is geometry_msgs/msg/WrenchStamped, "
                            "expected sensor_msgs/msg/JointState")


@pytest.mark.parametrize(("damage", "reason"), [
    ("compression", r"unsupported chunk compression 'zstx'"),
    ("chunk_opcode", r"no chunk record at offset \d+"),
    ("index_channel", r"message index of chunk at offset \d+, channel \d+ is invalid"),
])
def test_damaged_chunks_and_message_indexes(store, tmp_path, damage, reason):
    from mcap.reader import make_reader
    from mcap.writer import CompressionType

    path = write_with_mcap_library(store, tmp_path / "bare.mcap", robot_messages(store, "/sim", n=20),
                                   compression=CompressionType.ZSTD, enable_crcs=False)
    data = bytearray(path.read_bytes())
    with path.open("rb") as handle:
        summary = make_reader(handle).get_summary()
    chunk = summary.chunk_indexes[0]
    wrench_id = next(c.id for c in summary.channels.values() if c.topic == "/sim/wrench")
    start = chunk.chunk_start_offset
    if damage == "compression":
        at = data.index(b"zstd", start)
        data[at : at + 4] = b"zstx"
    elif damage == "chunk_opcode":
        data[start] = 0x01
    else:
        data[chunk.message_index_offsets[wrench_id] + 9] ^= 0x7F
    path.write_bytes(bytes(data))
    with open_bags(path) as bags, pytest.raises(BagError, match=rf"^bag .*bare\.mcap: topic /sim/wrench: cannot read "
                                                                rf"\(corrupt or truncated\?\): {reason}"):
        bags.read_columns("/sim/wrench")
