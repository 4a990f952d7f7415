"""Replay speed on a recorded demo bag: against real time and against rosbags alone.

The bag: ``--bag PATH`` (e.g. one recorded with ``sim-real-bridge demo --record``), or
by default a demo-like recording made in-process without ROS: the MuJoCo simulator
and the stand-in run the scenario's task headless (``--scenario``, ``--duration``)
and their streams are written as the recorder writes them (7-joint joint_states and
wrench at 500 Hz per side, poses at 100 Hz, mirrored commands, labels). It is cached
under ``--cache`` and reused.

Measured in the same run, in CPU seconds of this process (best of ``--repeat``):

- ``replay``: the whole per-bag job of ``sim-real-bridge replay`` (read, analyse,
  write summary.json, divergence.mcap, report.html);
- ``read``: rosbags' AnyReader reading every message of the bag and deserializing it
  message by message (the baseline).

And, in wall seconds of a separate process: ``x_realtime_cli``, the recording's seconds
over the wall time of the whole ``sim-real-bridge replay`` command (start-up and imports,
reading, analysis, summary.json, divergence.mcap, report.html) on a 10-minute recording
(the simulated minute repeated ten times, stamps and log times shifted by a minute
each time; made once and cached), and ``replay_peak_rss_mb``, that process's peak
resident memory.

Prints one JSON object with --json: ``x_realtime`` (recorded seconds per replay
second), ``analysis_over_read`` (replay time over read time), and the split of the
replay time (read columns, engine, divergence.mcap, report).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rosbags.highlevel import AnyReader  # noqa: E402

from sim_real_bridge.offline.replay import RunSpec, replay_run  # noqa: E402
from sim_real_bridge.offline.replay_config import ReplayConfig  # noqa: E402


def _bag(args: argparse.Namespace) -> Path:
    if args.bag is not None:
        return Path(args.bag)
    from sim_real_bridge.offline.synthetic import simulated_messages, write_synthetic_bag

    cache = Path(args.cache) / f"{Path(args.scenario).stem}_{args.duration:g}s"
    if not (cache / "metadata.yaml").is_file():
        shutil.rmtree(cache, ignore_errors=True)
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_synthetic_bag(cache, items=simulated_messages(args.scenario, args.duration))
    return cache


def _long_recording(bag: Path, repeats: int) -> Path:
    """The recording repeated ``repeats`` times back to back (stamps and log times shifted),
    cached beside it. Every message our recordings hold starts with a std_msgs/Header (or
    is a builtin_interfaces/Time), so the stamp is the 8 bytes after the CDR header."""
    import numpy as np
    from mcap.reader import make_reader

    from sim_real_bridge.capture.bag_writer import BagWriter
    from sim_real_bridge.capture.typestore import build_typestore

    out = bag.parent / f"{bag.name}_x{repeats}"
    if (out / "metadata.yaml").is_file():
        return out
    shutil.rmtree(out, ignore_errors=True)
    files = sorted(bag.glob("*.mcap"))
    with AnyReader([bag]) as reader:
        span_ns = reader.end_time - reader.start_time + 20_000_000
        types = {c.topic: c.msgtype for c in reader.connections}
    writer = BagWriter(out, build_typestore()).open()
    for topic, msgtype in types.items():
        writer.add_topic(topic, msgtype)
    for k in range(repeats):
        shift_ns = k * span_ns
        for path in files:
            with path.open("rb") as fh:
                for _, channel, message in make_reader(fh).iter_messages(log_time_order=True):
                    data = bytearray(message.data)
                    if len(data) >= 12:
                        sec, nanosec = np.frombuffer(bytes(data[4:12]), dtype="<i4, <u4")[0].tolist()
                        if sec > 0:
                            stamp = sec * 1_000_000_000 + nanosec + shift_ns
                            data[4:12] = np.array([(stamp // 1_000_000_000, stamp % 1_000_000_000)],
                                                  dtype="<i4, <u4").tobytes()
                    writer.write(channel.topic, message.log_time + shift_ns, bytes(data))
    writer.close()
    return out


def cli_replay(bag: Path, out: Path) -> tuple[float, float]:
    """Wall seconds and peak resident MB of ``sim-real-bridge replay BAG --out OUT`` run as a user would."""
    import resource
    import subprocess

    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "sim_real_bridge.cli", "replay", str(bag), "--out", str(out)],
                            capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    wall_s = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"sim-real-bridge replay failed: {result.stderr.strip()[-500:]}")
    return wall_s, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0


def _cpu(fn: object, repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        result = fn()  # type: ignore[operator]
        best = min(best, time.process_time() - start)
    return best, result


def read_with_anyreader(bag: Path) -> int:
    """Read and deserialize every message of the bag, one by one (the baseline)."""
    count = 0
    with AnyReader([bag]) as reader:
        for connection, _, data in reader.messages():
            reader.deserialize(data, connection.msgtype)
            count += 1
    return count


def split_replay(bag: Path, config: ReplayConfig, out: Path) -> dict[str, float]:
    """CPU seconds of each stage of the replay job, run stage by stage."""
    from sim_real_bridge.offline.bag_io import open_bags
    from sim_real_bridge.offline.replay import _read_streams, batch_collection, write_divergence_mcap
    from sim_real_bridge.offline.replay_engine import replay_columns

    with batch_collection():  # as replay_run collects
        t0 = time.process_time()
        with open_bags([bag]) as bags:
            streams, wanted = _read_streams(bags, config, None, None, [], {})
        t1 = time.process_time()
        outcome = replay_columns(streams, config.engine_config(), config.intake, config.tick_period_s, 1.0)
        t2 = time.process_time()
        write_divergence_mcap(out / "split.mcap", outcome.output)
        t3 = time.process_time()
    return {"read_columns_s": t1 - t0, "engine_s": t2 - t1, "divergence_mcap_s": t3 - t2,
            "messages_fed": outcome.message_count, "analysis_ticks": outcome.engine.analysis_count}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bag", default=None, help="a recorded bag (default: a simulated recording, cached)")
    parser.add_argument("--scenario", default="tour", help="scenario of the simulated recording (default: tour)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of the simulated recording")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "sim_real_bridge_bench"),
                        help="where the simulated recording is kept")
    parser.add_argument("--repeat", type=int, default=1, help="best of this many runs of each measurement")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()

    bag = _bag(args)
    config = ReplayConfig()
    with AnyReader([bag]) as reader:
        duration_s = reader.duration * 1e-9
        total_messages = reader.message_count
    read_s, count = _cpu(lambda: read_with_anyreader(bag), args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)

        def job() -> object:
            shutil.rmtree(out / "run", ignore_errors=True)
            return replay_run(RunSpec(bag.name, (str(bag),)), config, out / "run")

        replay_s, result = _cpu(job, args.repeat)
        if not result.ok:  # type: ignore[attr-defined]
            print(f"replay failed: {result.error}", file=sys.stderr)  # type: ignore[attr-defined]
            return 1
        stages = split_replay(bag, config, out)
        long_bag = _long_recording(bag, 10)
        with AnyReader([long_bag]) as reader:
            long_s = reader.duration * 1e-9
        cli_wall_s, peak_mb = cli_replay(long_bag, out / "cli")
    figures = {
        "x_realtime": duration_s / replay_s,
        "analysis_over_read": replay_s / read_s,
        "recording_s": duration_s,
        "replay_cpu_s": replay_s,
        "anyreader_cpu_s": read_s,
        "anyreader_msgs_per_s": count / read_s,
        "x_realtime_cli": long_s / cli_wall_s,
        "cli_recording_s": long_s,
        "cli_wall_s": cli_wall_s,
        "replay_peak_rss_mb": peak_mb,
        "messages": total_messages,
        **{f"stage_{k}": v for k, v in stages.items()},
        "bag": str(bag),
    }
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:28s} {value:.4g}" if isinstance(value, float) else f"{key:28s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
