"""BagWriter.write_many: the same file, byte for byte, as rosbags' Writer message by message."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import StoragePlugin, Writer

from sim_real_bridge.capture.bag_writer import BagWriter
from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.errors import SnapshotError

STORE = build_typestore()
TOPICS = {"/a": "std_msgs/msg/String", "/b": "sensor_msgs/msg/JointState", "/c": "std_msgs/msg/String"}
T0 = 1_700_000_000_000_000_000


def _messages(count: int, seed: int = 1) -> list[tuple[str, int, bytes]]:
    """Topics interleaved, log times out of order, sizes that cross several 1 MiB chunks."""
    rng = np.random.default_rng(seed)
    names = list(TOPICS)
    return [(names[int(rng.integers(3))], T0 + int(rng.integers(10**12)), rng.bytes(int(rng.integers(1, 1500))))
            for _ in range(count)]


def _rosbags_file(tmp_path: Path, messages: list[tuple[str, int, bytes]]) -> bytes:
    with Writer(tmp_path / "rosbags" / "x", version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {t: writer.add_connection(t, msgtype, typestore=STORE) for t, msgtype in TOPICS.items()}
        for topic, stamp, data in messages:
            writer.write(conns[topic], stamp, data)
    return (tmp_path / "rosbags" / "x" / "x.mcap").read_bytes()


def _ours(path: Path, messages: list[tuple[str, int, bytes]], batches: list[int]) -> Path:
    """Write with BagWriter: ``batches`` sizes through write_many, 0 for one write."""
    with BagWriter(path, STORE) as bag:
        for topic, msgtype in TOPICS.items():
            bag.add_topic(topic, msgtype)
        done = 0
        for size in batches:
            if size == 0:
                bag.write(*messages[done])
                done += 1
            else:
                part = messages[done : done + size]
                bag.write_many([m[0] for m in part], [m[1] for m in part], [m[2] for m in part])
                done += size
        assert done == len(messages)
        assert bag.message_count == len(messages)
    return path


@pytest.mark.parametrize("batches", [[4000], [0] * 5 + [1200, 0, 0, 1] + [1396] * 2])
def test_write_many_gives_rosbags_file_byte_for_byte(tmp_path: Path, batches: list[int]) -> None:
    messages = _messages(4000)
    (tmp_path / "ours").mkdir()
    ours = _ours(tmp_path / "ours" / "x.mcap", messages, batches)
    assert ours.read_bytes() == _rosbags_file(tmp_path, messages)
    with AnyReader([ours]) as reader:
        got = [(c.topic, t, bytes(d)) for c, t, d in reader.messages()]
    assert got == sorted(messages, key=lambda m: m[1])


def test_write_many_by_index_gives_rosbags_file_byte_for_byte(tmp_path: Path) -> None:
    messages = _messages(3000, seed=4)
    order = ["/c", "/a", "/b"]  # not the order the topics were added in
    with BagWriter(tmp_path / "x.mcap", STORE) as bag:
        for topic, msgtype in TOPICS.items():
            bag.add_topic(topic, msgtype)
        bag.write_many_by_index(order, np.array([order.index(m[0]) for m in messages[:1000]]),
                                [m[1] for m in messages[:1000]], [m[2] for m in messages[:1000]])
        bag.write_many_by_index(order, [order.index(m[0]) for m in messages[1000:]], [m[1] for m in messages[1000:]],
                                [m[2] for m in messages[1000:]])
        with pytest.raises(SnapshotError, match="topic /z was not added"):
            bag.write_many_by_index(["/a", "/z"], [0], [T0], [b"\x00\x01\x00\x00"])
        with pytest.raises(ValueError, match="2 topic indexes, 1 stamps"):
            bag.write_many_by_index(["/a"], [0, 0], [T0], [b"", b""])
        assert bag.message_count == 3000
    assert (tmp_path / "x.mcap").read_bytes() == _rosbags_file(tmp_path, messages)


def test_write_many_bag_directory_and_empty_batches(tmp_path: Path) -> None:
    messages = _messages(300, seed=2)
    with BagWriter(tmp_path / "bag", STORE) as bag:
        for topic, msgtype in TOPICS.items():
            bag.add_topic(topic, msgtype)
        bag.write_many([], [], [])
        bag.write_many([m[0] for m in messages], [m[1] for m in messages], [memoryview(m[2]) for m in messages])
    with AnyReader([tmp_path / "bag"]) as reader:
        assert reader.message_count == 300
        counts = {c.topic: c.msgcount for c in reader.connections}
    assert counts == {t: sum(m[0] == t for m in messages) for t in TOPICS}


def test_write_many_is_read_by_the_mcap_library(tmp_path: Path) -> None:
    from mcap.reader import make_reader

    messages = _messages(2500, seed=3)
    path = _ours(tmp_path / "x.mcap", messages, [2500])
    with path.open("rb") as handle:
        reader = make_reader(handle)
        summary = reader.get_summary()
        got = [(channel.topic, message.log_time, message.data) for _, channel, message in reader.iter_messages()]
    assert summary is not None and summary.statistics.message_count == 2500
    assert len(summary.chunk_indexes) > 1
    assert {s.name for s in summary.schemas.values()} == set(TOPICS.values())
    assert got == sorted(messages, key=lambda m: m[1])


def test_write_many_refuses_unknown_topics_and_mismatched_lengths(tmp_path: Path) -> None:
    with BagWriter(tmp_path / "x.mcap", STORE) as bag:
        bag.add_topic("/a", TOPICS["/a"])
        with pytest.raises(SnapshotError, match="topic /z was not added"):
            bag.write_many(["/a", "/z"], [T0, T0], [b"\x00\x01\x00\x00", b"\x00\x01\x00\x00"])
        with pytest.raises(ValueError, match="2 topics, 1 stamps"):
            bag.write_many(["/a", "/a"], [T0], [b"", b""])
        with pytest.raises(OverflowError):
            bag.write_many(["/a"], [-1], [b"\x00\x01\x00\x00"])
        bag.write("/a", T0, b"\x00\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00")
    with AnyReader([tmp_path / "x.mcap"]) as reader:
        assert reader.message_count == 1


@pytest.mark.parametrize("compression", ["MESSAGE", "STORAGE"])
def test_compressed_write_many_gives_rosbags_file(tmp_path: Path, compression: str) -> None:
    from rosbags.rosbag2.enums import CompressionFormat, CompressionMode

    from sim_real_bridge.capture.bag_writer import _Writer

    messages = _messages(1500, seed=4)
    files = []
    for name, writer_class in (("rosbags", Writer), ("ours", _Writer)):
        writer = writer_class(tmp_path / name / "x", version=9, storage_plugin=StoragePlugin.MCAP)
        writer.set_compression(CompressionMode[compression], CompressionFormat.ZSTD)
        with writer:
            conns = {t: writer.add_connection(t, msgtype, typestore=STORE) for t, msgtype in TOPICS.items()}
            if writer_class is Writer:
                for topic, stamp, data in messages:
                    writer.write(conns[topic], stamp, data)
            else:
                writer.write_many(np.array([conns[m[0]].id for m in messages]), np.array([m[1] for m in messages]),
                                  [m[2] for m in messages])
        files.append(tmp_path / name / "x")
    assert (files[0] / "x.mcap").read_bytes() == (files[1] / "x.mcap").read_bytes()
    with AnyReader([files[1]]) as reader:
        assert [(c.topic, t, bytes(d)) for c, t, d in reader.messages()] == sorted(messages, key=lambda m: m[1])


def test_write_many_on_sqlite3_storage_writes_message_by_message(tmp_path: Path) -> None:
    from sim_real_bridge.capture.bag_writer import _Writer

    messages = _messages(200, seed=5)
    with _Writer(tmp_path / "bag", version=9, storage_plugin=StoragePlugin.SQLITE3) as writer:
        conns = {t: writer.add_connection(t, msgtype, typestore=STORE) for t, msgtype in TOPICS.items()}
        writer.write_many(np.array([conns[m[0]].id for m in messages]), np.array([m[1] for m in messages]),
                          [m[2] for m in messages])
    with AnyReader([tmp_path / "bag"]) as reader:
        assert sorted((c.topic, t, bytes(d)) for c, t, d in reader.messages()) == sorted(messages)
