"""Columnar bag decoding vs rosbags' AnyReader deserializing message by message.

Writes a synthetic rosbag2 bag with rosbags in a temporary directory (7-joint
JointState and WrenchStamped per side, sim and real, 500 Hz each, 60 s by default),
then times, in the same run:

- ``anyreader``: AnyReader.messages() + deserialize() of every message (baseline);
- ``columnar``: open_bags(...).read_many(all topics) into numpy columns.

Prints one JSON object with --json: ``columnar_msgs_per_s``, ``anyreader_msgs_per_s``,
``speedup`` (columnar over anyreader), plus context figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import StoragePlugin, Writer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim_real_bridge.capture.typestore import build_typestore  # noqa: E402
from sim_real_bridge.offline.bag_io import open_bags  # noqa: E402

NS_PER_S = 1_000_000_000
JOINT_STATE = "sensor_msgs/msg/JointState"
WRENCH_STAMPED = "geometry_msgs/msg/WrenchStamped"


def make_synthetic_bag(path: Path, duration_s: float, rate_hz: float, joints: int, storage: StoragePlugin) -> int:
    """Write the synthetic two-sided bag; return its message count."""
    store = build_typestore()
    types = store.types
    names = [f"joint_{i + 1}" for i in range(joints)]
    rng = np.random.default_rng(0)
    period_ns = round(NS_PER_S / rate_hz)
    count = 0
    with Writer(path, version=9, storage_plugin=storage) as writer:
        conns = {}
        for side in ("sim", "real"):
            conns[side, "js"] = writer.add_connection(f"/{side}/joint_states", JOINT_STATE, typestore=store)
            conns[side, "w"] = writer.add_connection(f"/{side}/wrench", WRENCH_STAMPED, typestore=store)
        for i in range(round(duration_s * rate_hz)):
            t = 1_700_000_000 * NS_PER_S + i * period_ns
            for side, latency_ns in (("sim", 150_000), ("real", 900_000)):
                header = types["std_msgs/msg/Header"](
                    stamp=types["builtin_interfaces/msg/Time"](sec=t // NS_PER_S, nanosec=t % NS_PER_S),
                    frame_id="base_link",
                )
                js = types[JOINT_STATE](header=header, name=names, position=rng.normal(size=joints),
                                        velocity=rng.normal(size=joints), effort=rng.normal(size=joints))
                f, q = rng.normal(size=3), rng.normal(size=3)
                vec = types["geometry_msgs/msg/Vector3"]
                ws = types[WRENCH_STAMPED](header=header, wrench=types["geometry_msgs/msg/Wrench"](
                    force=vec(x=f[0], y=f[1], z=f[2]), torque=vec(x=q[0], y=q[1], z=q[2])))
                writer.write(conns[side, "js"], t + latency_ns, store.serialize_cdr(js, JOINT_STATE))
                writer.write(conns[side, "w"], t + latency_ns + 1_000, store.serialize_cdr(ws, WRENCH_STAMPED))
                count += 2
    return count


def time_anyreader(path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    count = 0
    with AnyReader([path]) as reader:
        for connection, _, data in reader.messages():
            reader.deserialize(data, connection.msgtype)
            count += 1
    return time.perf_counter() - start, count


def time_anyreader_raw(path: Path) -> tuple[float, int]:
    start = time.perf_counter()
    count = 0
    with AnyReader([path]) as reader:
        for _ in reader.messages():
            count += 1
    return time.perf_counter() - start, count


def time_columnar(path: Path) -> tuple[float, int, int]:
    start = time.perf_counter()
    with open_bags([path]) as bags:
        columns = bags.read_many(sorted(bags.topic_types()))
    elapsed = time.perf_counter() - start
    return elapsed, sum(len(c) for c in columns.values()), sum(c.slow_count for c in columns.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of synthetic data (default 60)")
    parser.add_argument("--rate", type=float, default=500.0, help="Hz per topic (default 500)")
    parser.add_argument("--joints", type=int, default=7, help="joints per JointState (default 7)")
    parser.add_argument("--storage", choices=["mcap", "sqlite3"], default="mcap")
    parser.add_argument("--repeat", type=int, default=3, help="best of N timings each (default 3)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="read_bench_") as tmp:
        bag = Path(tmp) / "synthetic"
        storage = StoragePlugin.MCAP if args.storage == "mcap" else StoragePlugin.SQLITE3
        written = make_synthetic_bag(bag, args.duration, args.rate, args.joints, storage)
        any_s = min(time_anyreader(bag)[0] for _ in range(args.repeat))
        raw_s = min(time_anyreader_raw(bag)[0] for _ in range(args.repeat))
        col_runs = [time_columnar(bag) for _ in range(args.repeat)]
        col_s = min(r[0] for r in col_runs)
        decoded, slow = col_runs[0][1], col_runs[0][2]
    if decoded != written:
        raise SystemExit(f"columnar decode returned {decoded} messages, the bag holds {written}")
    result = {
        "messages": written,
        "storage": args.storage,
        "columnar_msgs_per_s": round(written / col_s),
        "anyreader_msgs_per_s": round(written / any_s),
        "anyreader_raw_msgs_per_s": round(written / raw_s),
        "speedup": round(any_s / col_s, 2),
        "columnar_x_realtime": round(args.duration / col_s, 1),
        "slow_path_fraction": round(slow / written, 4),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>26}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
