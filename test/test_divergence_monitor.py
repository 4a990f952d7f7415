"""The divergence_monitor node over real DDS: outputs, diagnostics, bad input, snapshots.

Both robots are played by this test: it publishes sim and real joint_states and
wrench at 200 Hz on the node's clock and spins the monitor in the same executor.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is part of the make test environment")
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from geometry_msgs.msg import WrenchStamped  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from sim_real_bridge.msg import ContactResidual, DivergenceSummary, GapEvent, JointDivergence  # noqa: E402
from sim_real_bridge.nodes.divergence_monitor import SUMMARY_FILE, DivergenceMonitor  # noqa: E402

pytestmark = pytest.mark.ros

JOINTS = [f"joint{i}" for i in range(1, 8)]
RATE_HZ = 200.0


class Harness:
    """A monitor node plus a publisher node playing both robots."""

    def __init__(self, output_dir: Path, **parameters: object) -> None:
        params = [Parameter("output_dir", value=str(output_dir)),
                  Parameter("snapshot_pre_s", value=1.0), Parameter("snapshot_post_s", value=0.5)]
        params += [Parameter(k, value=v) for k, v in parameters.items()]
        self.monitor = DivergenceMonitor(parameter_overrides=params)
        self.peer = rclpy.create_node("robots_under_test")
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.pubs = {
            (side, stream): self.peer.create_publisher(kind, f"/{side}/{stream}", qos)
            for side in ("sim", "real") for stream, kind in (("joint_states", JointState), ("wrench", WrenchStamped))
        }
        self.received: dict[str, list] = {"joints": [], "contact": [], "events": [], "summary": [], "diagnostics": []}
        for topic, kind, key in (
            ("/divergence/joints", JointDivergence, "joints"), ("/divergence/contact", ContactResidual, "contact"),
            ("/divergence/events", GapEvent, "events"), ("/divergence/summary", DivergenceSummary, "summary"),
            ("/diagnostics", DiagnosticArray, "diagnostics"),
        ):
            self.peer.create_subscription(kind, topic, self.received[key].append, qos)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.monitor)
        self.executor.add_node(self.peer)
        self.t = 0.0

    def now_ns(self) -> int:
        return self.monitor.get_clock().now().nanoseconds

    def joint_state(self, q: list[float], stamp_ns: int | None = None, names: list[str] | None = None) -> JointState:
        msg = JointState(name=list(names if names is not None else JOINTS), position=list(q),
                         velocity=[0.0] * len(q), effort=[0.0] * len(q))
        stamp = self.now_ns() if stamp_ns is None else stamp_ns
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
        return msg

    def wrench(self, fz: float) -> WrenchStamped:
        msg = WrenchStamped()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(self.now_ns(), 1_000_000_000)
        msg.header.frame_id = "ft_sensor"
        msg.wrench.force.z = fz
        return msg

    def play(self, seconds: float, real_offset_rad: Callable[[float], float] = lambda t: 0.0,
             sides: tuple[str, ...] = ("sim", "real"), extra: Callable[[], None] | None = None) -> None:
        """Publishes both robots for ``seconds`` of wall time, spinning in between."""
        period = 1.0 / RATE_HZ
        end = time.monotonic() + seconds
        next_pub = time.monotonic()
        while time.monotonic() < end:
            if time.monotonic() >= next_pub:
                next_pub += period
                self.t += period
                q_sim = [0.3 * math.sin(self.t + i) for i in range(len(JOINTS))]
                for side in sides:
                    offset = real_offset_rad(self.t) if side == "real" else 0.0
                    self.pubs[(side, "joint_states")].publish(self.joint_state([q + offset for q in q_sim]))
                    self.pubs[(side, "wrench")].publish(self.wrench(-5.0))
                if extra is not None:
                    extra()
            self.executor.spin_once(timeout_sec=0.001)

    def spin_until(self, condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if condition():
                return True
            self.executor.spin_once(timeout_sec=0.05)
        return condition()

    def statuses(self) -> dict[str, object]:
        latest: dict[str, object] = {}
        for array in self.received["diagnostics"]:
            for status in array.status:
                latest[status.name] = status
        return latest

    def close(self) -> None:
        self.executor.shutdown()
        self.monitor.destroy_node()
        self.peer.destroy_node()


@pytest.fixture
def ros_context():
    rclpy.init()
    yield
    rclpy.shutdown()


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
