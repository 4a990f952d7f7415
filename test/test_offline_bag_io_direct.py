"""Shortcuts of a bag's open and read: each must give what rosbags gives, or step aside."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from rosbags.serde import SerdeError

from sim_real_bridge.capture.typestore import build_typestore, new_typestore
from sim_real_bridge.offline import bag_io
from sim_real_bridge.offline.bag_io import (
    INJECTION_ARRAY,
    TIME,
    injection_array_parser,
    load_metadata_yaml,
    time_parser,
)

def test_metadata_parsed_once_per_cache(tmp_path):
    meta = tmp_path / "metadata.yaml"
    meta.write_text("rosbag2_bagfile_information:\n  version: 9\n")
    cache: dict[Path, object] = {}
    first = load_metadata_yaml(meta, cache)
    meta.write_text("rosbag2_bagfile_information:\n  version: 8\n")  # not read again with the cache
    assert load_metadata_yaml(meta, cache) is first
    assert load_metadata_yaml(meta)["rosbag2_bagfile_information"]["version"] == 8


def _store():
    return build_typestore()


def _injection_array(store, elapsed_s, injections, scenario="tour", frame_id="", stamp=(0, 0)):
    t = store.types
    header = t["std_msgs/msg/Header"](t[TIME](*stamp), frame_id)
    items = [
        t["sim_real_bridge/msg/Injection"](
            c, k, s, e, eff, act, [t["diagnostic_msgs/msg/KeyValue"](kk, vv) for kk, vv in params])
        for c, k, s, e, eff, act, params in injections
    ]
    return bytes(store.serialize_cdr(t[INJECTION_ARRAY](header, scenario, elapsed_s, items), INJECTION_ARRAY))


CASES = [
    [],
    [("dynamics", "gain", 1.0, 6.5, 0.0, False, [])],
    [("dynamics", "gain", 1.0, 6.5, math.nan, True, []), ("contact", "friction", 10.0, 16.0, 11.5, False, [])],
    [("sensor", "dropout", 20.0, 24.0, 20.0, True, [("rate", "0.5"), ("joint", "j1")]),
     ("human", "push", 32.0, 36.0, -1.0, False, [("k", "")])],
    [("ünïcode", "x", -0.0, 1e300, 5e-324, True, [("é", "✓" * 3)])],
]


def _same(a, b):
    """Equal messages, NaN equal to NaN."""
    return repr(a) == repr(b)


@pytest.mark.parametrize("injections", CASES)
@pytest.mark.parametrize("scenario", ["", "tour", "abc"])  # string ends at each alignment
def test_injection_parser_equals_rosbags(injections, scenario):
    store = _store()
    parse = injection_array_parser(store)
    assert parse is not None
    for elapsed_s, frame_id in ((0.0, ""), (59.5, "world"), (math.nan, "ab")):
        data = _injection_array(store, elapsed_s, injections, scenario, frame_id, (7, 123))
        got = parse(data)
        assert got is not None
        assert _same(got, store.deserialize_cdr(data, INJECTION_ARRAY))
        assert type(got) is type(store.deserialize_cdr(data, INJECTION_ARRAY))


def test_injection_parser_shares_repeated_injections_only_when_equal():
    store = _store()
    parse = injection_array_parser(store)
    a = parse(_injection_array(store, 1.0, CASES[2]))
    b = parse(_injection_array(store, 2.0, CASES[2]))
    c = parse(_injection_array(store, 3.0, CASES[3]))
    assert a.elapsed_s == 1.0 and b.elapsed_s == 2.0
    assert a.injections is not b.injections and a.injections[0] is b.injections[0]
    assert _same(c, store.deserialize_cdr(_injection_array(store, 3.0, CASES[3]), INJECTION_ARRAY))


def test_injection_parser_steps_aside_where_rosbags_refuses():
    store = _store()
    parse = injection_array_parser(store)
    data = bytearray(_injection_array(store, 1.0, CASES[3]))
    bad = {
        "big endian": b"\x00\x00" + bytes(data[2:]),
        "truncated": bytes(data[:-9]),
        "trailing": bytes(data) + b"\x00" * 8,
        "no terminator": bytes(data).replace(b"dropout\x00", b"dropoutX"),
        "cut in the header": bytes(data[:40]),
    }
    for name, raw in bad.items():
        assert parse(raw) is None, name
    for name in ("truncated", "trailing", "no terminator"):
        with pytest.raises(SerdeError):
            store.deserialize_cdr(bad[name], INJECTION_ARRAY)
    # Padding after the message is fine for rosbags, so for the parser too.
    padded = bytes(data) + b"\x00" * 3
    assert _same(parse(padded), store.deserialize_cdr(padded, INJECTION_ARRAY))


def test_parsers_step_aside_for_other_definitions():
    store = new_typestore()
    from rosbags.typesys import get_types_from_msg

    store.register(get_types_from_msg("string category\nstring kind\nfloat64 start_s", "other_msgs/msg/Injection"))
    assert injection_array_parser(store) is not None
    defs = dict(store.fielddefs)
    defs["sim_real_bridge/msg/Injection"] = defs["other_msgs/msg/Injection"]
    store.fielddefs = defs
    assert injection_array_parser(store) is None
    assert time_parser(store) is not None


def test_time_parser_equals_rosbags():
    store = _store()
    parse = time_parser(store)
    t = store.types[TIME]
    for sec, nanosec in ((0, 0), (-5, 999_999_999), (2**31 - 1, 2**32 - 1)):
        data = bytes(store.serialize_cdr(t(sec, nanosec), TIME))
        for raw in (data, data + b"\x00" * 3):
            assert parse(raw) == store.deserialize_cdr(raw, TIME)
        assert parse(data + b"\x00" * 4) is None  # rosbags refuses it
        assert parse(data[:-1]) is None
        assert parse(b"\x00\x00" + data[2:]) is None  # big endian: rosbags decodes it


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_replay_reads_truth_through_the_parser(tmp_path, storage):
    """Replay's truth messages equal rosbags' (parsed directly); the job's metadata cache
    serves labels and the open alike."""
    from sim_real_bridge.offline.replay import _read_streams, _read_truth, read_labels
    from sim_real_bridge.offline.replay_config import ReplayConfig
    from sim_real_bridge.offline.synthetic import SyntheticRun, write_synthetic_bag

    run = SyntheticRun(duration_s=2.0, joint_rate_hz=100.0, wrench_rate_hz=100.0, pose_rate_hz=20.0,
                       injections=[{"category": "dynamics", "kind": "gain", "start_s": 0.5, "end_s": 1.5}],
                       scenario="tiny")
    bag = write_synthetic_bag(tmp_path / "bag", run, storage)
    config = ReplayConfig()
    cache: dict[Path, object] = {}
    read_labels([str(bag)], cache)
    assert list(cache) == [bag / "metadata.yaml"]
    with bag_io.open_bags(bag, metadata_cache=cache) as bags:
        extra: dict = {}
        _read_streams(bags, config, None, None, [], extra)
        got = extra[config.injections_topic]
        expected = list(bags.iter_messages(config.injections_topic))
    assert got and [s for s, _ in got] == [s for s, _ in expected]
    assert all(_same(a, b) for (_, a), (_, b) in zip(got, expected, strict=True))
    assert _read_truth(config, extra)[1] == "tiny"


def test_truth_of_repeated_injections_equals_adding_each_message():
    """_read_truth skips re-adding the shared objects of a repeat: the collector ends the same."""
    from sim_real_bridge.evaluation.summary import TruthCollector
    from sim_real_bridge.offline.replay import _read_truth
    from sim_real_bridge.offline.replay_config import ReplayConfig

    store = _store()
    parse = injection_array_parser(store)
    a = [("dynamics", "gain", 1.0, 6.5, math.nan, False, []), ("contact", "friction", 3.0, 4.0, math.nan, False, [])]
    b = [("dynamics", "gain", 1.0, 6.5, 1.2, True, []), ("contact", "friction", 3.0, 4.0, math.nan, False, [])]
    c = [("dynamics", "gain", 1.0, 6.5, 1.2, False, []), ("contact", "friction", 3.0, 4.0, 3.5, True, [])]
    sequence = [a, a, a, b, b, a, c, c, [], [], b, c, c]  # ends on a repeat: its elapsed time counts
    messages = [(i, parse(_injection_array(store, 0.5 * i + 0.25 * (i == 4), injections)))
                for i, injections in enumerate(sequence)]
    assert messages[1][1].injections[0] is messages[0][1].injections[0]  # repeats do share objects
    config = ReplayConfig()
    collector, scenario = _read_truth(config, {config.injections_topic: messages})
    plain = TruthCollector()
    for _, msg in messages:
        plain.add(msg.elapsed_s, msg.injections)
    assert scenario == "tour"
    assert repr(collector.__dict__) == repr(plain.__dict__)
    assert repr(collector.truth(10.0)) == repr(plain.truth(10.0))
