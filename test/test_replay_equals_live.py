"""Replaying a `demo --record` bag gives the live run's events and residual statistics.

Runs the real demo graph over DDS through the CLI for 20 s with a push injected,
records every topic (the monitor's inputs and tick times as the monitor itself took
them), then replays the bag offline and compares with the summary the live run wrote:
the same events (category, window within 0.1 s) and residual statistics within 1%.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rclpy", reason="the live demo needs rclpy")

from sim_real_bridge.offline.replay import ReplayRequest, run_replay  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

SCENARIO = """\
name: replay_check
seed: 13
duration_s: 20
task: reach
injections:
  - {category: human, kind: push, start_s: 5, end_s: 12, params: {force_n: 40.0}}
"""
WINDOW_TOLERANCE_S = 0.1
STAT_TOLERANCE = 0.01


def _close(live: float | None, replay: float | None) -> bool:
    if live is None or replay is None:
        return live is None and replay is None
    return abs(replay - live) <= STAT_TOLERANCE * max(abs(live), 1e-12)


@pytest.fixture(scope="module")
def live_root(live_and_replay: tuple[dict, dict]) -> Path:
    return Path(live_and_replay[1]["bags"][0]).parent


def _joint_residuals(path: Path) -> dict[int, list[float]]:
    from rosbags.highlevel import AnyReader

    from sim_real_bridge.capture.typestore import build_typestore

    out = {}
    with AnyReader([path], default_typestore=build_typestore()) as reader:
        conns = [c for c in reader.connections if c.topic == "/divergence/joints"]
        for conn, _, data in reader.messages(conns):
            msg = reader.deserialize(data, conn.msgtype)
            out[msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec] = list(msg.position_residual_rad)
    return out


@pytest.fixture(scope="module")
def live_and_replay(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    root = tmp_path_factory.mktemp("live")
    scenario = root / "replay_check.yaml"
    scenario.write_text(SCENARIO)
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    result = subprocess.run(
        [sys.executable, "-m", "sim_real_bridge.cli", "demo", "--scenario", str(scenario), "--duration", "20",
         "--record", str(root / "bag"), "--out", str(root / "demo"), "--no-live"],
        env=env, capture_output=True, text=True, timeout=240, cwd=Path(__file__).resolve().parent.parent,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    live = json.loads((root / "demo" / "summary.json").read_text())
    code = run_replay(ReplayRequest(inputs=[root / "bag"], out_dir=root / "replay"))
    assert code == 0
    replay = json.loads((root / "replay" / "summary.json").read_text())
    return live, replay


def test_recording_holds_what_the_monitor_received(live_root: Path) -> None:
    """Replay can only equal live when the bag holds what the monitor received, when it did.

    Under load the monitor itself drops and lags; what matters is that the bag holds its
    inputs as it took them. Its event snapshots are cut from its own receive buffer, so
    every input message of a snapshot must be in the bag, same bytes, same log time;
    and the bag holds the monitor's tick times.
    """
    from rosbags.highlevel import AnyReader

    bag = live_root / "bag"
    snapshots = sorted((live_root / "demo" / "monitor" / "snapshots").glob("*.mcap"))
    assert snapshots, "the live run wrote no event snapshot"
    inputs = ("/sim/joint_states", "/real/joint_states", "/sim/wrench", "/real/wrench")
    with AnyReader([bag]) as reader:
        recorded = {(c.topic, t, bytes(d)) for c, t, d in reader.messages([c for c in reader.connections
                                                                           if c.topic in inputs])}
        ticks = [c for c in reader.connections if c.topic == "/divergence_monitor/ticks"]
        # The timer ticks at 50 Hz; a starved monitor ticks less often (its ticks are what
        # replay repeats), but at least once a second over the 20 s run.
        assert ticks and ticks[0].msgcount >= 20, "the monitor's tick times are missing from the recording"
    assert recorded
    for snapshot in snapshots:
        with AnyReader([snapshot]) as reader:
            taken = {(c.topic, t, bytes(d)) for c, t, d in reader.messages([c for c in reader.connections
                                                                            if c.topic in inputs])}
        assert taken and taken <= recorded, (snapshot, len(taken - recorded), len(taken))


def test_live_run_has_an_event(live_and_replay: tuple[dict, dict]) -> None:
    live, _ = live_and_replay
    assert live["events"], "the scenario must raise at least one event for the comparison to mean anything"


def test_replay_gives_the_live_events(live_and_replay: tuple[dict, dict]) -> None:
    live, replay = live_and_replay
    live_events = [(e["category"], e["start_s"], e["end_s"]) for e in live["events"]]
    replay_events = [(e["category"], e["start_s"], e["end_s"]) for e in replay["events"]]
    assert len(replay_events) == len(live_events), (live_events, replay_events)
    for (cat, start, end), (r_cat, r_start, r_end) in zip(live_events, replay_events, strict=True):
        assert r_cat == cat, (live_events, replay_events)
        assert abs(r_start - start) <= WINDOW_TOLERANCE_S, (live_events, replay_events)
        assert abs(r_end - end) <= WINDOW_TOLERANCE_S, (live_events, replay_events)


def test_replay_gives_the_live_residual_statistics(live_and_replay: tuple[dict, dict]) -> None:
    live, replay = live_and_replay
    live_joints = live["residuals"]["joints"]
    replay_joints = replay["residuals"]["joints"]
    assert set(replay_joints) == set(live_joints) and live_joints
    for name, stats in live_joints.items():
        for key in ("rms_rad", "p95_rad"):
            assert _close(stats[key], replay_joints[name][key]), (name, key, stats, replay_joints[name])
    for phase in ("free", "contact"):
        live_w = live["residuals"]["wrench"][phase]
        replay_w = replay["residuals"]["wrench"][phase]
        assert _close(live_w["rms_n"], replay_w["rms_n"]), (phase, live_w, replay_w)


def test_replay_has_the_live_truth(live_and_replay: tuple[dict, dict]) -> None:
    live, replay = live_and_replay
    assert [(t["category"], t["kind"]) for t in replay["truth"]] == [(t["category"], t["kind"]) for t in live["truth"]]
    assert replay["scenario"] == live["scenario"]


def test_a_monitor_snapshot_replays_offline(live_root: Path, tmp_path: Path) -> None:
    """An event snapshot is a bag of its own: replay reads it and covers its window.

    (Its residuals equal the live ones only on a quiet machine: under load the snapshot's
    /divergence/joints refer to inputs received before its window, so the values are
    compared on the whole recording, above, not here.)
    """
    from rosbags.highlevel import AnyReader

    snapshots = sorted((live_root / "demo" / "monitor" / "snapshots").glob("*.mcap"))
    assert snapshots, "the live run wrote no event snapshot"
    for snapshot in snapshots:
        out = tmp_path / snapshot.stem
        assert run_replay(ReplayRequest(inputs=[snapshot], out_dir=out)) == 0
        live = _joint_residuals(snapshot)
        replay = _joint_residuals(out / "divergence.mcap")
        assert live and replay, (snapshot, len(live), len(replay))
        with AnyReader([snapshot]) as reader:
            first_ns, last_ns = reader.start_time, reader.end_time
        # The replay's residuals are stamped inside the snapshot's stretch of messages.
        assert first_ns - 1_000_000_000 <= min(replay) and max(replay) <= last_ns + 1_000_000_000, (
            snapshot, first_ns, last_ns, min(replay), max(replay))
