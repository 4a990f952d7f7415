"""Issue 7: one test per fault, against the real divergence_monitor over real DDS.

Each bad-input test publishes good sim and real streams at 200 Hz plus one bad message
per period on one input topic, then checks that the node stayed up, counted the bad
messages under their reason in /diagnostics, logged the reason once with the topic,
and kept them out of the residuals. docs/FAULTS.md maps every fault to its test.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is part of the make test environment")
from helpers.monitor_harness import JOINTS, LEVEL_ERROR, LEVEL_STALE, Harness  # noqa: E402

from sim_real_bridge.capture.bag_writer import PARTIAL_SUFFIX, mcap_file_is_complete  # noqa: E402
from sim_real_bridge.capture.event_log import read_event_log  # noqa: E402
from sim_real_bridge.nodes.divergence_monitor import SUMMARY_FILE  # noqa: E402

pytestmark = pytest.mark.ros

REAL_JS = "/real/joint_states"
SIM_JS = "/sim/joint_states"
REAL_WRENCH = "/real/wrench"


class LogSpy:
    """Stands in for the monitor's logger and keeps every warning."""

    def __init__(self, logger) -> None:
        self._logger = logger
        self.warnings: list[str] = []

    def warning(self, text: str, **kwargs) -> None:
        self.warnings.append(text)
        self._logger.warning(text, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._logger, name)


@pytest.fixture
def ros_context():
    rclpy.init()
    yield
    rclpy.shutdown()


@pytest.fixture
def make_harness(ros_context, tmp_path: Path):
    made: list[Harness] = []

    def make(**kwargs) -> Harness:
        h = Harness(tmp_path / f"run{len(made)}", **kwargs)
        spy = LogSpy(h.monitor.get_logger())
        h.monitor.get_logger = lambda: spy  # type: ignore[method-assign]
        h.log = spy  # type: ignore[attr-defined]
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def _count(h: Harness, topic: str, key: str) -> int:
    return int(float(h.values(f"divergence_monitor: {topic}").get(key, "0")))


def _bad_input_case(h: Harness, topic: str, make_bad, reason: str, refused: bool = True,
                    min_count: int = 50, every: int = 1) -> None:
    """Publish a bad message every ``every`` periods on ``topic``; check count, diagnostics and log."""
    side, stream = topic.strip("/").split("/")
    publisher = h.pubs[(side, stream)]
    periods = [0]

    def bad() -> None:
        periods[0] += 1
        if periods[0] % every == 0:
            publisher.publish(make_bad(h))

    h.play(2.0 if every == 1 else 3.0, extra=bad)
    key = f"{'refused' if refused else 'flagged'}.{reason}"
    assert h.spin_until(lambda: _count(h, topic, key) >= min_count, timeout_s=5.0), \
        f"no {key} >= {min_count} in /diagnostics for {topic}: {h.values(f'divergence_monitor: {topic}')}"
    values = h.values(f"divergence_monitor: {topic}")
    assert int(values["refused"]) + int(values["flagged"]) <= int(values["messages"])
    logged = [w for w in h.log.warnings if reason in w and topic in w]
    assert len(logged) == 1, f"expected one log line for {reason} on {topic}, got {logged}"
    assert h.received["joints"], "good messages must still be analysed"


def _residuals_clean(h: Harness, tolerance_rad: float = 0.02) -> None:
    """Published residuals are either unknown (NaN) or small: no bad value leaked in."""
    for msg in h.received["joints"]:
        for value in msg.position_residual_rad:
            assert math.isnan(value) or abs(value) < tolerance_rad, value
    summary = json.loads(h.monitor.finish().read_text())
    for name in JOINTS:
        stats = summary["residuals"]["joints"][name]
        assert math.isfinite(stats["rms_rad"]) and stats["rms_rad"] < tolerance_rad, stats


# ------------------------------------------------------------------ bad messages
def test_nan_values_are_flagged_counted_and_kept_out_of_residuals(make_harness) -> None:
    h = make_harness()
    # An occasional NaN in one joint (a sensor glitch), between good samples.
    glitch = lambda h: h.joint_state([float("nan") if i == 2 else 0.3 * math.sin(h.t + i) for i in range(7)])  # noqa: E731
    _bad_input_case(h, REAL_JS, glitch, "non_finite", refused=False, min_count=20, every=20)
    assert h.received["summary"] and all(math.isfinite(s.joint_position_rms_rad) for s in h.received["summary"])
    _residuals_clean(h)


def test_infinite_values_are_flagged_counted_and_kept_out_of_residuals(make_harness) -> None:
    h = make_harness()
    _bad_input_case(h, REAL_WRENCH, lambda h: h.wrench(float("inf")), "non_finite", refused=False,
                    min_count=20, every=20)
    assert h.received["contact"], "good wrenches must still be compared"
    for msg in h.received["contact"]:
        assert math.isnan(msg.force_residual_norm_n) or msg.force_residual_norm_n < 1.0, msg.force_residual_norm_n
    _residuals_clean(h)


def test_empty_arrays_are_refused(make_harness) -> None:
    h = make_harness()
    _bad_input_case(h, REAL_JS, lambda h: h.joint_state([], names=[]), "empty")


def test_length_mismatch_is_refused(make_harness) -> None:
    h = make_harness()
    _bad_input_case(h, SIM_JS, lambda h: h.joint_state([5.0] * 3), "length_mismatch")
    _residuals_clean(h)


def test_unknown_joint_names_are_refused(make_harness) -> None:
    h = make_harness()
    _bad_input_case(h, REAL_JS, lambda h: h.joint_state([5.0] * 7, names=[f"other{i}" for i in range(7)]),
                    "unknown_joint")
    _residuals_clean(h)


def test_missing_joint_names_are_refused(make_harness) -> None:
    h = make_harness()
    _bad_input_case(h, REAL_JS, lambda h: h.joint_state([5.0] * 6, names=JOINTS[:6]), "missing_joint")
    _residuals_clean(h)


def test_duplicate_names_are_refused(make_harness) -> None:
    h = make_harness()
    _bad_input_case(h, SIM_JS, lambda h: h.joint_state([5.0] * 7, names=["joint1"] * 7), "duplicate_names")
    _residuals_clean(h)


def test_zero_stamp_is_refused(make_harness) -> None:
    h = make_harness()
    _bad_input_case(h, REAL_JS, lambda h: h.joint_state([5.0] * 7, stamp_ns=0), "zero_stamp")
    _residuals_clean(h)


def test_far_future_stamp_is_refused(make_harness) -> None:
    h = make_harness()
    _bad_input_case(h, REAL_WRENCH, lambda h: h.wrench(100.0, stamp_ns=h.now_ns() + 3600 * 10**9), "future_stamp")


def test_stamps_going_backwards_are_flagged_and_raise_no_clock_reset(make_harness) -> None:
    h = make_harness()
    # A late duplicate of an earlier sample: 30 ms old stamp, same values as the sim then.
    _bad_input_case(h, REAL_JS, lambda h: h.joint_state([0.3 * math.sin(h.t - 0.03 + i) for i in range(7)],
                                                       stamp_ns=h.now_ns() - 30_000_000),
                    "stamp_backwards", refused=False)
    assert int(h.values("divergence_monitor: alignment")["clock_resets"]) == 0
    _residuals_clean(h, tolerance_rad=0.05)


def test_frame_mismatch_is_refused(make_harness) -> None:
    h = make_harness(extra_parameters={"expected_frames.wrench": "ft_sensor"})
    _bad_input_case(h, REAL_WRENCH, lambda h: h.wrench(100.0, frame_id="tool0"), "frame_mismatch")


def test_enormous_message_is_refused(make_harness) -> None:
    h = make_harness()
    big = [f"j{i}" for i in range(5_000)]
    _bad_input_case(h, REAL_JS, lambda h: h.joint_state([5.0] * len(big), names=big), "oversized", min_count=20)
    _residuals_clean(h)


def test_undecodable_message_is_refused(make_harness) -> None:
    # Raw bytes on the topic: a JointState cut short (a corrupt or foreign payload).
    from rclpy.serialization import serialize_message

    h = make_harness()
    _bad_input_case(h, REAL_JS, lambda h: serialize_message(h.joint_state([0.1] * 7))[:30], "undecodable",
                    min_count=20)
    _residuals_clean(h)


# ------------------------------------------------------------------ lost streams
def _lost_stream_case(h: Harness, lost: str) -> None:
    kept = "sim" if lost == "real" else "real"
    topic = f"/{lost}/joint_states"
    h.play(2.5)
    events_before = len(h.received["events"])
    status = h.monitor._status[topic]
    period_ns = status.period_ns
    assert period_ns is not None
    # Within three expected periods of silence the stream is STALE, not before.
    # (while the other side keeps arriving)
    for silence in (2.5, 3.01):
        later_ns = status.last_recv_ns + int(silence * period_ns)
        assert status.is_stale(later_ns, latest_input_ns=later_ns) is (silence > 3)
    h.play(3.0, sides=(kept,))
    name = f"divergence_monitor: {topic}"
    assert h.spin_until(lambda: h.statuses()[name].level == LEVEL_STALE, timeout_s=3.0), f"{topic} not STALE"
    during = h.received["events"][events_before:]
    opened = [e for e in during if e.open]
    categories = {e.category for e in opened}
    assert categories <= {"sensor"}, f"silence raised events in {categories}"
    sensor_opens = {e.id for e in opened if e.category == "sensor"}
    assert len(sensor_opens) <= 1, f"dropout reported more than once: {sensor_opens}"
    joints_before = len(h.received["joints"])
    diagnostics_before = len(h.received["diagnostics"])
    h.play(3.0)

    def recovered() -> bool:
        return any(status.name == name and status.level != LEVEL_STALE
                   for array in h.received["diagnostics"][diagnostics_before:] for status in array.status)

    assert h.spin_until(recovered, timeout_s=3.0), "no recovery"
    assert len(h.received["joints"]) > joints_before + 20, "analysis did not resume"
    recent = h.received["joints"][-10:]
    assert all(all(abs(v) < 0.02 for v in m.position_residual_rad) for m in recent)


def _one_sensor_dropout(h: Harness, lost: str) -> None:
    dropouts = [e for e in h.received["events"] if e.category == "sensor" and e.kind == "dropout" and e.open]
    assert len({e.id for e in dropouts}) == 1, [(e.id, e.kind) for e in dropouts]
    evidence = {kv.key: kv.value for kv in dropouts[0].evidence}
    assert evidence.get("stream", "").startswith(f"{lost}/"), evidence
    assert not [e for e in h.received["events"] if e.category not in ("sensor", "")], \
        [(e.category, e.kind) for e in h.received["events"]]


def test_lost_real_stream_goes_stale_reports_one_sensor_dropout_and_recovers(make_harness) -> None:
    h = make_harness()
    _lost_stream_case(h, "real")
    _one_sensor_dropout(h, "real")


def test_lost_sim_stream_goes_stale_reports_one_sensor_dropout_and_recovers(make_harness) -> None:
    h = make_harness()
    _lost_stream_case(h, "sim")
    _one_sensor_dropout(h, "sim")


# ------------------------------------------------------------------ clock jump
def test_clock_jump_backwards_resets_alignment_without_false_event(make_harness) -> None:
    h = make_harness(sim_clock=True)
    h.play(3.0)
    assert h.received["joints"], "no analysis before the reset"
    h.sim_time_ns -= 60 * 10**9  # a simulator reset: /clock and both sides' stamps go back
    h.publish_clock()
    h.play(3.0)
    joints_after = len(h.received["joints"])
    h.play(1.0)
    assert len(h.received["joints"]) > joints_after, "analysis stopped after the clock reset"
    assert h.spin_until(lambda: int(h.values("divergence_monitor: alignment").get("clock_jumps", "0")) >= 1,
                        timeout_s=3.0)
    assert int(h.values("divergence_monitor: alignment")["clock_resets"]) >= 1
    assert not [e for e in h.received["events"] if e.category], \
        f"false events after the reset: {[(e.category, e.kind) for e in h.received['events']]}"
    summary = json.loads(h.monitor.finish().read_text())
    assert summary["timing"]["clock_jumps"] >= 1 and summary["timing"]["clock_resets"] >= 1
    assert summary["events"] == []


# ------------------------------------------------------------------ snapshots and disk
def test_snapshot_dir_not_writable_gives_error_diagnostic_event_and_live_topics(make_harness, tmp_path: Path) -> None:
    out = tmp_path / "run0"
    out.mkdir()
    (out / "snapshots").write_text("a file where the snapshot directory should be")
    h = make_harness()
    h.play(2.0)
    name = "divergence_monitor: snapshots"
    assert h.spin_until(lambda: getattr(h.statuses().get(name), "level", None) == LEVEL_ERROR, timeout_s=3.0)
    assert "snapshot" in h.statuses()[name].message
    assert any(e.kind == "snapshot_failed" for e in h.received["events"]), "no snapshot_failed event"
    joints = len(h.received["joints"])
    h.play(1.0)
    assert len(h.received["joints"]) > joints + 5, "/divergence/joints stopped"


def test_disk_full_stops_snapshots_with_error_and_event_live_topics_flow(make_harness, monkeypatch) -> None:
    import errno

    from sim_real_bridge.capture import bag_writer

    def no_space(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(bag_writer.McapWriter, "add_message", no_space)
    h = make_harness()
    h.play(2.0)
    h.play(3.0, real_offset_rad=lambda t: 0.4)  # an event, whose snapshot cannot be written
    h.play(1.5)
    name = "divergence_monitor: snapshots"
    assert h.spin_until(lambda: getattr(h.statuses().get(name), "level", None) == LEVEL_ERROR, timeout_s=5.0)
    assert "No space left on device" in h.statuses()[name].message
    failed = [e for e in h.received["events"] if e.kind == "snapshot_failed"]
    assert len(failed) == 1
    joints = len(h.received["joints"])
    h.play(1.0)
    assert len(h.received["joints"]) > joints + 5, "/divergence/joints stopped"
    assert not list((h.monitor._output_dir / "snapshots").glob("*.mcap")), "no snapshot may look written"


def test_snapshot_paths_confined_to_output_dir(make_harness, tmp_path: Path) -> None:
    h = make_harness(snapshot_label="../../../escape/../x")
    h.play(2.0)
    h.play(3.0, real_offset_rad=lambda t: 0.4)
    assert h.spin_until(lambda: any(e.snapshot for e in h.received["events"]), timeout_s=5.0)
    h.play(1.0)
    out = (tmp_path / "run0").resolve()
    for event in h.received["events"]:
        if event.snapshot:
            path = (out / event.snapshot).resolve()
            assert out / "snapshots" in path.parents, path
    h.monitor.finish()
    written = {p.resolve() for p in tmp_path.rglob("*") if p.is_file()}
    assert written and all(out in p.parents for p in written), written
    assert not (tmp_path.parent / "escape").exists()


# ------------------------------------------------------------------ kill -9
def _monitor_process(out_dir: Path, *params: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "sim_real_bridge.nodes.divergence_monitor", "--ros-args",
            "-p", f"output_dir:={out_dir}", *(x for p in params for x in ("-p", p))]
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{Path(__file__).resolve().parent.parent}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)


class _Robots:
    """Publishes both robots and records /divergence/events, for a monitor in another process."""

    def __init__(self) -> None:
        from geometry_msgs.msg import WrenchStamped
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState

        from sim_real_bridge.msg import GapEvent

        self.node = rclpy.create_node("robots_for_kill_test")
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.js = {s: self.node.create_publisher(JointState, f"/{s}/joint_states", qos) for s in ("sim", "real")}
        self.w = {s: self.node.create_publisher(WrenchStamped, f"/{s}/wrench", qos) for s in ("sim", "real")}
        self.events: list = []
        self.node.create_subscription(GapEvent, "/divergence/events", self.events.append, qos)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self.kinds = (JointState, WrenchStamped)
        self.t = 0.0

    def play(self, seconds: float, offset_rad: float = 0.0, stop=lambda: False) -> bool:
        joint_state, wrench = self.kinds
        end = time.monotonic() + seconds
        next_pub = time.monotonic()
        while time.monotonic() < end:
            if stop():
                return True
            if time.monotonic() >= next_pub:
                next_pub += 0.005
                self.t += 0.005
                stamp = divmod(self.node.get_clock().now().nanoseconds, 10**9)
                for side in ("sim", "real"):
                    q = [0.3 * math.sin(self.t + i) + (offset_rad if side == "real" else 0.0) for i in range(7)]
                    msg = joint_state(name=JOINTS, position=q, velocity=[0.0] * 7, effort=[0.0] * 7)
                    msg.header.stamp.sec, msg.header.stamp.nanosec = stamp
                    self.js[side].publish(msg)
                    w = wrench()
                    w.header.stamp.sec, w.header.stamp.nanosec = stamp
                    w.header.frame_id = "ft_sensor"
                    w.wrench.force.z = -5.0
                    self.w[side].publish(w)
            self.executor.spin_once(timeout_sec=0.001)
        return stop()

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()


def test_kill_9_mid_snapshot_keeps_earlier_snapshots_and_acknowledged_events(ros_context, tmp_path: Path) -> None:
    from rosbags.highlevel import AnyReader

    out = tmp_path / "run"
    snapshots = out / "snapshots"
    # A long pre window over many high-rate topics makes each snapshot write take a while.
    monitor = _monitor_process(out, "snapshot_pre_s:=8.0", "snapshot_post_s:=0.2")
    robots = _Robots()
    partial_seen = threading.Event()

    def watch() -> None:
        while not partial_seen.is_set() and monitor.poll() is None:
            if snapshots.is_dir() and any(p.name.endswith(PARTIAL_SUFFIX) for p in snapshots.iterdir()):
                partial_seen.set()
                monitor.send_signal(signal.SIGKILL)
                return
            time.sleep(0.0005)

    try:
        robots.play(6.0)
        robots.play(3.0, offset_rad=0.4)  # first event: its snapshot completes
        robots.play(3.0)
        assert any(p.suffix == ".mcap" for p in snapshots.iterdir()), "first snapshot not written"
        first = sorted(p for p in snapshots.iterdir() if p.suffix == ".mcap")
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        for _ in range(6):  # further events until one snapshot write is caught mid-way
            if robots.play(3.0, offset_rad=0.4, stop=partial_seen.is_set):
                break
            if robots.play(4.0, stop=partial_seen.is_set):
                break
        assert partial_seen.is_set(), "never caught a snapshot being written"
        monitor.wait(timeout=10)
        assert monitor.returncode == -signal.SIGKILL
        acknowledged = {e.id for e in robots.events if e.category}
    finally:
        if monitor.poll() is None:
            monitor.kill()
        robots.close()

    # Every earlier snapshot is complete and readable.
    for path in first:
        assert mcap_file_is_complete(path)
        with AnyReader([path]) as reader:
            assert sum(1 for _ in reader.messages()) > 100
    # The event log holds every event the monitor published (it logs, fsyncs, then publishes).
    log = read_event_log(out / "events.jsonl")
    logged = {e["id"] for e in log.events if e.get("type") == "event"}
    assert acknowledged and acknowledged <= logged, acknowledged - logged
    assert any(p.name.endswith(PARTIAL_SUFFIX) for p in snapshots.iterdir()), "the kill left no partial"

    # Restart: the partial is finished or removed; nothing half-written looks valid.
    restarted = _monitor_process(out)
    try:
        assert restarted.stderr is not None
        for line in restarted.stderr:  # recovery runs in the constructor, before this line
            if "monitoring" in line:
                break
    finally:
        time.sleep(1.0)
        restarted.send_signal(signal.SIGINT)
        _, tail = restarted.communicate(timeout=20)
    assert not any(p.name.endswith(PARTIAL_SUFFIX) for p in snapshots.iterdir())
    for path in snapshots.glob("*.mcap"):
        assert mcap_file_is_complete(path), f"{path} looks valid but is not complete"
        with AnyReader([path]) as reader:
            sum(1 for _ in reader.messages())
    assert (out / SUMMARY_FILE).is_file(), tail


# ------------------------------------------------------------------ position-only joint_states
def test_position_only_joint_states_are_not_flagged_non_finite(make_harness) -> None:
    h = make_harness()

    def position_only() -> None:
        for side in ("sim", "real"):
            msg = h.joint_state([0.3 * math.sin(h.t + i) for i in range(7)])
            msg.velocity, msg.effort = [], []
            h.pubs[(side, "joint_states")].publish(msg)

    h.play(2.0, streams=("wrench",), extra=position_only)
    assert h.spin_until(lambda: _count(h, REAL_JS, "messages") > 100, timeout_s=3.0)
    assert _count(h, REAL_JS, "flagged") == 0
    assert not [e for e in h.received["events"] if e.category == "sensor"]

