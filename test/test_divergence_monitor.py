"""The divergence_monitor node over real DDS: outputs, diagnostics, bad input, snapshots.

Both robots are played by this test: it publishes sim and real joint_states and
wrench at 200 Hz on the node's clock and spins the monitor in the same executor.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is part of the make test environment")
from helpers.monitor_harness import JOINTS, Harness  # noqa: E402
from rclpy.serialization import serialize_message  # noqa: E402

from sim_real_bridge.nodes.divergence_monitor import SUMMARY_FILE  # noqa: E402

pytestmark = pytest.mark.ros


@pytest.fixture
def ros_context():
    rclpy.init()
    yield
    rclpy.try_shutdown()  # a test may have shut the context down itself (Ctrl-C)


@pytest.fixture
def harness(ros_context, tmp_path: Path):
    h = Harness(tmp_path)
    yield h
    h.close()


def test_agreeing_robots_give_near_zero_residuals_and_all_outputs(harness: Harness) -> None:
    harness.play(3.0)
    assert harness.spin_until(lambda: harness.received["summary"] and harness.received["diagnostics"])
    joints = harness.received["joints"]
    assert len(joints) > 20, "expected /divergence/joints at the analysis rate"
    assert list(joints[-1].name) == JOINTS
    assert max(abs(v) for v in joints[-1].position_residual_rad) < 0.02
    assert harness.received["contact"], "expected /divergence/contact"
    names = set(harness.statuses())
    for topic in ("/sim/joint_states", "/real/joint_states", "/sim/wrench", "/real/wrench"):
        assert f"divergence_monitor: {topic}" in names
    assert "divergence_monitor: alignment" in names


def test_position_offset_shows_in_residual(harness: Harness) -> None:
    harness.play(3.0, real_offset_rad=lambda t: 0.1)
    residuals = harness.received["joints"][-1].position_residual_rad
    assert all(abs(r - 0.1) < 0.02 for r in residuals), residuals


@pytest.mark.parametrize(
    ("reason", "make"),
    [
        ("empty", lambda h: h.joint_state([], names=[])),
        ("length_mismatch", lambda h: h.joint_state([0.0] * 3)),
        ("duplicate_names", lambda h: h.joint_state([0.0] * 7, names=["joint1"] * 7)),
        ("zero_stamp", lambda h: h.joint_state([0.0] * 7, stamp_ns=0)),
        ("future_stamp", lambda h: h.joint_state([0.0] * 7, stamp_ns=h.now_ns() + 3600 * 10**9)),
        ("unknown_joint", lambda h: h.joint_state([0.0] * 7, names=[f"other{i}" for i in range(7)])),
    ],
)
def test_bad_joint_states_are_refused_counted_and_reported(harness: Harness, reason: str, make) -> None:
    bad_pub = harness.pubs[("real", "joint_states")]
    harness.play(2.0, extra=lambda: bad_pub.publish(make(harness)))
    status_name = "divergence_monitor: /real/joint_states"
    assert harness.spin_until(
        lambda: any(kv.key == f"refused.{reason}" for kv in getattr(harness.statuses().get(status_name), "values", [])),
        timeout_s=5.0,
    ), f"no refused.{reason} in {status_name}"
    status = harness.statuses()[status_name]
    count = int({kv.key: kv.value for kv in status.values}[f"refused.{reason}"])
    assert count >= 100
    assert harness.received["joints"], "good messages must still be analysed"


def test_silent_stream_goes_stale_and_recovers(harness: Harness) -> None:
    harness.play(2.0)
    harness.play(1.5, sides=("sim",))
    name = "divergence_monitor: /real/joint_states"
    assert harness.spin_until(lambda: harness.statuses()[name].level == b"\x03", timeout_s=3.0), "real stream not STALE"
    harness.play(2.5)
    assert harness.spin_until(lambda: harness.statuses()[name].level in (b"\x00", b"\x01"), timeout_s=3.0)


def test_run_summary_and_event_log_written_on_finish(harness: Harness, tmp_path: Path) -> None:
    harness.play(2.0)
    path = harness.monitor.finish()
    assert path == tmp_path / SUMMARY_FILE
    summary = json.loads(path.read_text())
    assert {"events", "timing", "residuals", "calibration"} <= set(summary)
    assert set(summary["residuals"]["joints"]) == set(JOINTS)


def test_event_snapshot_holds_every_topic_of_its_window(harness: Harness, tmp_path: Path) -> None:
    from rosbags.highlevel import AnyReader

    harness.play(2.0)
    harness.play(3.0, real_offset_rad=lambda t: 0.4)
    assert harness.spin_until(lambda: any(e.snapshot for e in harness.received["events"]), timeout_s=5.0), \
        "no event with a snapshot"
    event = next(e for e in harness.received["events"] if e.snapshot)
    snapshot = tmp_path / event.snapshot
    harness.play(1.0)
    assert harness.spin_until(snapshot.is_file, timeout_s=5.0), f"{snapshot} not written"
    start_ns = event.start.sec * 10**9 + event.start.nanosec
    with AnyReader([snapshot]) as reader:
        topics = {c.topic for c in reader.connections}
        stamps = [timestamp for _, timestamp, _ in reader.messages()]
    assert {"/sim/joint_states", "/real/joint_states", "/sim/wrench", "/real/wrench", "/divergence/joints"} <= topics
    assert stamps == sorted(stamps)
    assert stamps[0] <= start_ns <= stamps[-1]
    log_lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert any(line.get("id") == event.id for line in log_lines)


def test_ctrl_c_during_a_drain_ends_the_callback_quietly(harness: Harness) -> None:
    """Ctrl-C shuts the context down while a callback drains the other inputs: the
    destroyed handles end the drain as the executor's own take does, no exception
    leaves the callback (it used to, making the node exit 1 under load)."""
    harness.play(0.2)
    subscriber = harness.monitor._subscribers[0]
    data = serialize_message(harness.joint_state([0.0] * len(JOINTS)))
    rclpy.shutdown()
    subscriber.sub.callback(data)
    assert harness.monitor.finish().is_file()


def test_use_sim_time_set_at_run_time_switches_the_input_clock(harness: Harness) -> None:
    from rclpy.parameter import Parameter

    wall_ns = harness.monitor._now_ns()
    assert abs(wall_ns - harness.monitor.get_clock().now().nanoseconds) < 1_000_000_000
    harness.monitor.set_parameters([Parameter("use_sim_time", value=True)])
    assert harness.monitor.get_clock().ros_time_is_active
    # No /clock yet: ROS time reads 0, far behind the wall clock, so it counts as a jump back.
    sim_ns = harness.monitor._now_ns()
    assert harness.monitor.clock_jumps == 1
    assert sim_ns >= wall_ns  # the time base stays monotonic across the switch
    harness.monitor.set_parameters([Parameter("use_sim_time", value=False)])
    assert not harness.monitor.get_clock().ros_time_is_active
    # Back on the wall clock: forward again, no further jump.
    assert harness.monitor._now_ns() > sim_ns
    assert harness.monitor.clock_jumps == 1


def test_inputs_on_their_own_thread_give_the_same_outputs(ros_context, tmp_path: Path) -> None:
    """The executable's default: inputs taken by the input thread, timers by the executor."""
    h = Harness(tmp_path, input_thread=True)
    try:
        h.play(2.0, real_offset_rad=lambda t: 0.02)
        assert h.spin_until(lambda: len(h.received["joints"]) >= 20)
        assert h.monitor._inputs is not None and h.monitor._inputs.wakes > 0
        last = h.received["joints"][-1]
        assert list(last.position_residual_rad) == pytest.approx([0.02] * len(JOINTS), abs=2e-3)
        assert h.spin_until(lambda: int(h.values("divergence_monitor: /real/joint_states").get("messages", "0")) > 0)
        assert h.monitor.finish().is_file()
        assert not h.monitor._inputs._thread.is_alive()
    finally:
        h.close()
