"""BagWriter: what it writes reads back everywhere, with real chunk and data-section CRCs,
and every kind of file the project writes passes the mcap library's CRC checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from mcap.reader import make_reader
from mcap.records import Chunk, DataEnd
from mcap.stream_reader import StreamReader
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import Reader

from sim_real_bridge.capture.bag_writer import BagWriter, merge_bags, salvage_mcap
from sim_real_bridge.capture.snapshots import SnapshotWriter
from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.errors import SnapshotError
from sim_real_bridge.offline.bags import open_bags

STORE = build_typestore()
JS = "sensor_msgs/msg/JointState"
STRING = "std_msgs/msg/String"
T0 = 1_700_000_000_000_000_000


def _joint_state(i: int) -> bytes:
    t = STORE.types
    msg = t[JS](t["std_msgs/msg/Header"](t["builtin_interfaces/msg/Time"](1, i), "base"), ["a", "b"],
                np.array([i, -i], float), np.zeros(2), np.zeros(0))
    return bytes(STORE.serialize_cdr(msg, JS))


def _text(value: str) -> bytes:
    return bytes(STORE.serialize_cdr(STORE.types[STRING](data=value), STRING))


def _rows(count: int) -> list[tuple[str, int, bytes]]:
    return [("/js", T0 + i, _joint_state(i)) if i % 3 else ("/chatter", T0 + i, _text("x" * (i % 50)))
            for i in range(count)]


def _write(path: Path, rows: list[tuple[str, int, bytes]], batched: bool, chunk_bytes: int = 4096) -> Path:
    with BagWriter(path, STORE, chunk_bytes=chunk_bytes) as bag:
        bag.add_topic("/js", JS)
        bag.add_topic("/chatter", STRING)
        if batched:
            bag.write_many([r[0] for r in rows[:50]], [r[1] for r in rows[:50]], [r[2] for r in rows[:50]])
            topics = ["/chatter", "/js"]
            bag.write_many_by_index(topics, [topics.index(r[0]) for r in rows[50:]],
                                    np.array([r[1] for r in rows[50:]]), [memoryview(r[2]) for r in rows[50:]])
        else:
            for topic, stamp, data in rows:
                bag.write(topic, stamp, data)
    return path


def assert_crcs_are_real_and_valid(path: Path) -> int:
    """Every chunk's CRC and the data section's CRC are set and right; returns the message count."""
    with path.open("rb") as handle:
        records = list(StreamReader(handle, emit_chunks=True, validate_crcs=True).records)
        chunks = [r for r in records if isinstance(r, Chunk)]
        (data_end,) = [r for r in records if isinstance(r, DataEnd)]
        assert chunks and all(c.uncompressed_crc != 0 for c in chunks) and data_end.data_section_crc != 0
        handle.seek(0)
        reader = make_reader(handle, validate_crcs=True)
        count = sum(1 for _ in reader.iter_messages())
        assert count == reader.get_summary().statistics.message_count
    return count


@pytest.mark.parametrize("name", ["bag.mcap", "bag_dir"])
def test_batched_and_single_writes_read_back_alike(tmp_path: Path, name: str) -> None:
    rows = _rows(300)
    one = _write(tmp_path / "one" / name, rows, batched=False)
    many = _write(tmp_path / "many" / name, rows, batched=True)
    for path in (one, many):
        mcap_file = path if path.suffix == ".mcap" else path / "bag_dir.mcap"
        assert assert_crcs_are_real_and_valid(mcap_file) == 300
        with AnyReader([path]) as reader:
            got = [(c.topic, t, bytes(d)) for c, t, d in reader.messages()]
        assert got == rows
        with open_bags(path) as bags:
            assert bags.read_columns("/js").position[:, 0].tolist() == [i for i in range(300) if i % 3]


def test_metadata_yaml_and_embedded_metadata_describe_the_bag(tmp_path: Path) -> None:
    path = _write(tmp_path / "bag_dir", _rows(10), batched=False)
    info = yaml.safe_load((path / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["version"] == 9 and info["storage_identifier"] == "mcap"
    assert info["relative_file_paths"] == ["bag_dir.mcap"] and info["message_count"] == 10
    assert info["starting_time"]["nanoseconds_since_epoch"] == T0 and info["duration"]["nanoseconds"] == 9
    counts = {t["topic_metadata"]["name"]: (t["topic_metadata"]["type"], t["message_count"])
              for t in info["topics_with_message_count"]}
    assert counts == {"/js": (JS, 6), "/chatter": (STRING, 4)}
    assert all(t["topic_metadata"]["type_description_hash"].startswith("RIHS01_")
               for t in info["topics_with_message_count"])
    with (path / "bag_dir.mcap").open("rb") as handle:
        (record,) = list(make_reader(handle).iter_metadata())
    assert record.name == "rosbag2" and yaml.safe_load(record.metadata["serialized_metadata"]) == info
    with Reader(path) as reader:
        assert reader.message_count == 10 and reader.start_time == T0


def test_empty_bag_and_bad_writes(tmp_path: Path) -> None:
    with BagWriter(tmp_path / "empty.mcap", STORE) as bag:
        bag.add_topic("/js", JS)
        bag.write_many([], [], [])
        with pytest.raises(ValueError, match="1 topics, 0 stamps and 0 messages"):
            bag.write_many(["/js"], [], [])
        with pytest.raises(SnapshotError, match=r"topic /nope was not added to bag .*empty\.mcap"):
            bag.write_many_by_index(["/nope"], [0], [1], [b""])
        with pytest.raises(SnapshotError, match=r"log time -5 ns is negative"):
            bag.write("/js", -5, _joint_state(0))
    with AnyReader([tmp_path / "empty.mcap"]) as reader:
        assert [(c.topic, c.msgcount) for c in reader.connections] == [("/js", 0)]


def test_every_kind_of_file_we_write_has_valid_crcs(tmp_path: Path) -> None:
    from sim_real_bridge.offline.replay import RunSpec, replay_run
    from sim_real_bridge.offline.replay_config import ReplayConfig
    from sim_real_bridge.offline.synthetic import SyntheticRun, write_synthetic_bag

    recording = _write(tmp_path / "inputs", _rows(200), batched=False, chunk_bytes=2048)  # recorder, monitor inputs
    with BagWriter(tmp_path / "graph", STORE) as graph:
        graph.add_topic("/labels", STRING)
        for i in range(20):
            graph.write("/labels", T0 + 7 + 2 * i, _text(str(i)))
    merge_bags(recording, tmp_path / "graph", tmp_path / "merged", STORE)  # demo --record
    snapshots = SnapshotWriter(tmp_path / "snapshots", STORE, pre_s=1.0, post_s=0.0)
    for topic, stamp, data in _rows(100):
        snapshots.add_message(topic, JS if topic == "/js" else STRING, stamp, data)
    snapshots.request("ev-1", T0 + 99)
    (snapshot,) = snapshots.poll(T0 + 10**9)
    bag = write_synthetic_bag(tmp_path / "synthetic", SyntheticRun(duration_s=2.0))
    result = replay_run(RunSpec("synthetic", (str(bag),)), ReplayConfig(), tmp_path / "replay")
    assert result.ok, result.error
    torn = tmp_path / "torn.mcap"
    torn.write_bytes((recording / "inputs.mcap").read_bytes()[:-3000])
    assert salvage_mcap(torn, tmp_path / "salvaged.mcap", STORE) > 0
    files = [recording / "inputs.mcap", tmp_path / "merged" / "merged.mcap", snapshot.path,
             tmp_path / "replay" / "divergence.mcap", tmp_path / "salvaged.mcap"]
    counts = [assert_crcs_are_real_and_valid(path) for path in files]
    assert counts[:3] == [200, 220, snapshot.message_count] and all(counts)
