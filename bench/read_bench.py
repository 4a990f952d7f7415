"""Reading a demo recording: our columnar reader against rosbags and the mcap library.

The recording: ``--bag PATH``, or by default the demo graph simulated in-process (the
MuJoCo sim and the stand-in running ``--scenario`` for ``--duration`` s, as
bench/replay_bench.py makes it) written with our BagWriter, as ``demo --record`` writes
(rosbag2 directory, uncompressed chunks with CRCs). Cached under ``--cache``.

Measured in the same run, CPU seconds of this process, best of ``--repeat``; every path
ends with the values of every message decoded:

- ``columnar``: open_bags().read_all(): JointState, WrenchStamped, PoseStamped as
  columns, every other message deserialized by rosbags;
- ``anyreader``: rosbags' AnyReader, deserializing message by message;
- ``mcap_ros2``: the mcap library's iter_decoded_messages with mcap_ros2's decoder;
- ``mcap_rosbags``: the mcap library's iter_messages, rosbags' deserialize_cdr.

and, to judge our MCAP chunk reader on its own (raw bytes only):

- ``raw_ours``: open_bags().read_raw() of every topic;
- ``raw_mcap``: the mcap library's iter_messages;
- ``columns_from_mcap_raw``: the columns built from the mcap library's raw messages
  instead of ours (what the columnar path would cost without our chunk reader).

Prints one JSON object with --json: messages per second of each, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcap.reader import make_reader  # noqa: E402
from mcap_ros2.decoder import DecoderFactory  # noqa: E402
from rosbags.highlevel import AnyReader  # noqa: E402

from sim_real_bridge.capture.bag_writer import BagWriter  # noqa: E402
from sim_real_bridge.capture.typestore import build_typestore  # noqa: E402
from sim_real_bridge.offline.bags import RawMessages, columns_from_raw, open_bags  # noqa: E402
from sim_real_bridge.offline.bags.columns import BUILDERS  # noqa: E402


def demo_recording(cache: Path, scenario: str, duration_s: float) -> Path:
    """The simulated demo recording, written as ``demo --record`` writes (cached)."""
    from sim_real_bridge.offline.synthetic import simulated_messages

    bag = cache / f"read_bench_{Path(scenario).stem}_{duration_s:g}s"
    if (bag / "metadata.yaml").is_file():
        return bag
    store = build_typestore()
    items = simulated_messages(scenario, duration_s)
    cache.mkdir(parents=True, exist_ok=True)
    with BagWriter(bag, store) as writer:
        for topic, msgtype in dict((t, m) for t, m, _, _ in items).items():
            writer.add_topic(topic, msgtype)
        writer.write_many([t for t, *_ in items], [s for _, _, s, _ in items],
                          [bytes(store.serialize_cdr(msg, m)) for _, m, _, msg in items])
    return bag


def mcap_files(bag: Path) -> list[Path]:
    return sorted(bag.glob("*.mcap")) if bag.is_dir() else [bag]


def columnar(bag: Path) -> int:
    with open_bags(bag) as bags:
        types = bags.topic_types()
        column_topics = [t for t, m in types.items() if m in BUILDERS]
        columns, messages = bags.read_all(column_topics, [t for t in types if t not in column_topics])
    return sum(len(c) for c in columns.values()) + sum(len(m) for m in messages.values())


def anyreader(bag: Path) -> int:
    count = 0
    with AnyReader([bag]) as reader:
        for connection, _, data in reader.messages():
            reader.deserialize(data, connection.msgtype)
            count += 1
    return count


def mcap_ros2(bag: Path) -> int:
    count = 0
    for path in mcap_files(bag):
        with path.open("rb") as handle:
            for _ in make_reader(handle, decoder_factories=[DecoderFactory()]).iter_decoded_messages(
                    log_time_order=False):
                count += 1
    return count


def mcap_rosbags(bag: Path) -> int:
    store = build_typestore()
    count = 0
    for path in mcap_files(bag):
        with path.open("rb") as handle:
            for schema, _, message in make_reader(handle).iter_messages(log_time_order=False):
                store.deserialize_cdr(message.data, schema.name)
                count += 1
    return count


def raw_ours(bag: Path) -> int:
    with open_bags(bag) as bags:
        return sum(len(raw) for raw in bags.read_raw(list(bags.topic_types())).values())


def _mcap_raw(bag: Path) -> tuple[dict[str, str], dict[str, tuple[list[int], list[bytes]]]]:
    types: dict[str, str] = {}
    found: dict[str, tuple[list[int], list[bytes]]] = {}
    for path in mcap_files(bag):
        with path.open("rb") as handle:
            for schema, channel, message in make_reader(handle).iter_messages(log_time_order=False):
                types[channel.topic] = schema.name
                times, datas = found.setdefault(channel.topic, ([], []))
                times.append(message.log_time)
                datas.append(message.data)
    return types, found


def raw_mcap(bag: Path) -> int:
    return sum(len(times) for times, _ in _mcap_raw(bag)[1].values())


def columns_from_mcap_raw(bag: Path) -> int:
    store = build_typestore()
    types, found = _mcap_raw(bag)
    count = 0
    for topic, (times, datas) in found.items():
        if types[topic] in BUILDERS:
            count += len(columns_from_raw(RawMessages.of(times, datas).in_log_order(), types[topic], store, topic))
    return count


def best_cpu_s(fn: Callable[[Path], int], bag: Path, repeat: int) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(repeat):
        start = time.process_time()
        count = fn(bag)
        best = min(best, time.process_time() - start)
    return best, count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--bag", default=None, help="a recorded bag (default: the simulated demo recording, cached)")
    parser.add_argument("--scenario", default="tour", help="scenario of the simulated recording (default: tour)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of the simulated recording")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "sim_real_bridge_bench"),
                        help="where the simulated recording is kept")
    parser.add_argument("--repeat", type=int, default=3, help="best of N timings each (default 3)")
    args = parser.parse_args(argv)

    bag = Path(args.bag) if args.bag else demo_recording(Path(args.cache), args.scenario, args.duration)
    paths = {"columnar": columnar, "anyreader": anyreader, "mcap_ros2": mcap_ros2, "mcap_rosbags": mcap_rosbags,
             "raw_ours": raw_ours, "raw_mcap": raw_mcap, "columns_from_mcap_raw": columns_from_mcap_raw}
    cpu_s: dict[str, float] = {}
    counts: dict[str, int] = {}
    for name, fn in paths.items():
        if name.startswith(("mcap", "raw_mcap", "columns_from")) and not mcap_files(bag):
            continue
        cpu_s[name], counts[name] = best_cpu_s(fn, bag, args.repeat)
    messages = counts["anyreader"]
    mismatched = {n: c for n, c in counts.items() if n != "columns_from_mcap_raw" and c != messages}
    if mismatched:
        raise SystemExit(f"paths read other message counts than AnyReader's {messages}: {mismatched}")
    result: dict[str, object] = {"bag": str(bag), "messages": messages, "repeat": args.repeat}
    result.update({f"{name}_msgs_per_s": round(counts[name] / s) for name, s in cpu_s.items()})
    result.update({f"{name}_cpu_s": round(s, 4) for name, s in cpu_s.items()})
    for baseline in ("anyreader", "mcap_ros2", "mcap_rosbags"):
        if baseline in cpu_s:
            result[f"columnar_over_{baseline}"] = round(cpu_s[baseline] / cpu_s["columnar"], 2)
    if "raw_mcap" in cpu_s:
        result["raw_ours_over_raw_mcap"] = round(cpu_s["raw_mcap"] / cpu_s["raw_ours"], 2)
        columns_ours = cpu_s["columnar"]
        result["columns_from_mcap_raw_cpu_s_over_columnar"] = round(cpu_s["columns_from_mcap_raw"] / columns_ours, 2)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>42}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
