"""Property test: thousands of generated robot messages through real DDS into the monitor.

Hypothesis draws batches of JointState and WrenchStamped messages for the four input
topics, each message either valid or carrying exactly one defect (NaN, infinity, empty
arrays, length mismatch, duplicate, unknown or missing names, zero, far-future or
backwards stamp, wrong frame, oversized). Every batch is published by a peer node and
taken in through the monitor's own subscriptions. Afterwards the node must still be
up and publishing, and its per-stream counters must add up: every message received,
none lost, and each defect counted once under its own reason, valid ones under none.
"""

from __future__ import annotations

from collections import Counter
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is part of the make test environment")
from helpers.monitor_harness import JOINTS, Harness  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

JOINT_DEFECTS = {
    "none": None, "nan": ("flagged", "non_finite"), "inf": ("flagged", "non_finite"),
    "backwards": ("flagged", "stamp_backwards"), "empty": ("refused", "empty"),
    "length": ("refused", "length_mismatch"), "duplicate": ("refused", "duplicate_names"),
    "unknown": ("refused", "unknown_joint"), "missing": ("refused", "missing_joint"),
    "zero": ("refused", "zero_stamp"), "future": ("refused", "future_stamp"),
    "oversized": ("refused", "oversized"),
}
WRENCH_DEFECTS = {
    "none": None, "nan": ("flagged", "non_finite"), "inf": ("flagged", "non_finite"),
    "backwards": ("flagged", "stamp_backwards"), "zero": ("refused", "zero_stamp"),
    "future": ("refused", "future_stamp"), "frame": ("refused", "frame_mismatch"),
}
TOPICS = ("/sim/joint_states", "/real/joint_states", "/sim/wrench", "/real/wrench")
values = st.floats(min_value=-3.0, max_value=3.0, allow_nan=False)
joint_message = st.tuples(st.sampled_from(TOPICS[:2]), st.sampled_from(sorted(JOINT_DEFECTS)),
                          st.lists(values, min_size=7, max_size=7))
wrench_message = st.tuples(st.sampled_from(TOPICS[2:]), st.sampled_from(sorted(WRENCH_DEFECTS)),
                           st.lists(values, min_size=6, max_size=6))
batches = st.lists(st.one_of(joint_message, wrench_message), min_size=20, max_size=60)


class Model:
    """What the monitor should count: per topic, received, refused and flagged by reason."""

    def __init__(self) -> None:
        self.received: Counter = Counter()
        self.refused: dict[str, Counter] = {t: Counter() for t in TOPICS}
        self.flagged: dict[str, Counter] = {t: Counter() for t in TOPICS}
        self.last_stamp_ns: dict[str, int] = {}


def _build(h: Harness, model: Model, topic: str, defect: str, numbers: list[float]):
    """One message of ``topic`` with ``defect``; updates the model's expectations."""
    now = h.now_ns()
    last = model.last_stamp_ns.get(topic, 0)
    stamp = max(now, last + 1)
    if defect == "backwards":
        stamp = last - 1_000_000
    elif defect == "zero":
        stamp = 0
    elif defect == "future":
        stamp = now + 3600 * 10**9
    numbers = list(numbers)
    if defect == "nan":
        numbers[len(numbers) // 2] = float("nan")
    elif defect == "inf":
        numbers[0] = float("-inf")
    if topic.endswith("joint_states"):
        names = list(JOINTS)
        if defect == "empty":
            names, numbers = [], []
        elif defect == "length":
            numbers = numbers[:5]
        elif defect == "duplicate":
            names[3] = names[2]
        elif defect == "unknown":
            names[6] = "elbow_of_another_robot"
        elif defect == "missing":
            names, numbers = names[:6], numbers[:6]
        elif defect == "oversized":
            names = [f"j{i}" for i in range(100)]
            numbers = [0.0] * 100
        msg = h.joint_state(numbers, stamp_ns=stamp, names=names)
        expected = JOINT_DEFECTS[defect]
    else:
        msg = h.wrench(0.0, stamp_ns=stamp, frame_id="tool0" if defect == "frame" else "ft_sensor")
        f, t = msg.wrench.force, msg.wrench.torque
        f.x, f.y, f.z, t.x, t.y, t.z = numbers
        expected = WRENCH_DEFECTS[defect]
    model.received[topic] += 1
    if expected is None or expected[0] == "flagged":
        model.last_stamp_ns[topic] = stamp
    if expected is not None:
        (model.refused if expected[0] == "refused" else model.flagged)[topic][expected[1]] += 1
    return msg


def _wait_until_quiet(h: Harness, quiet_s: float = 0.5, timeout_s: float = 10.0) -> None:
    """Spins until no input counter has changed for ``quiet_s``."""
    deadline = time.monotonic() + timeout_s
    last = None
    last_change = time.monotonic()
    while time.monotonic() < deadline:
        counts = tuple(h.monitor._status[t].count for t in TOPICS)
        if counts != last:
            last, last_change = counts, time.monotonic()
        elif time.monotonic() - last_change >= quiet_s:
            return
        h.executor.spin_once(timeout_sec=0.05)
    raise AssertionError("inputs never went quiet")


@pytest.fixture
def harness(tmp_path: Path):
    rclpy.init()
    h = Harness(tmp_path, extra_parameters={"expected_frames.wrench": "ft_sensor"})
    yield h
    h.close()
    rclpy.shutdown()


def test_fuzzed_messages_never_stop_the_monitor_and_counters_add_up(harness: Harness) -> None:
    h = harness
    h.play(1.5)  # both robots known, joint names fixed
    _wait_until_quiet(h)  # nothing of play() still in flight when the baseline is taken
    model = Model()
    for topic in TOPICS:
        status = h.monitor._status[topic]
        model.received[topic] = status.count
        model.refused[topic] = Counter(status.refused)
        model.flagged[topic] = Counter(status.flagged)
        side, stream = topic.strip("/").split("/")
        model.last_stamp_ns[topic] = h.monitor._engine.last_stamp_ns(side, stream)
    published = [0]

    @settings(max_examples=60, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(batch=batches)
    def feed(batch) -> None:
        for topic, defect, numbers in batch:
            side, stream = topic.strip("/").split("/")
            h.pubs[(side, stream)].publish(_build(h, model, topic, defect, numbers))
            published[0] += 1
        assert h.spin_until(lambda: all(h.monitor._status[t].count >= model.received[t] for t in TOPICS),
                            timeout_s=5.0), "messages lost on the way in"
        # The engine checks what it was handed with its next analysis batch: counted by then.
        assert h.spin_until(lambda: all(h.monitor._status[t].refused == model.refused[t]
                                        and h.monitor._status[t].flagged == model.flagged[t] for t in TOPICS),
                            timeout_s=5.0), {t: (h.monitor._status[t].refused, model.refused[t]) for t in TOPICS}
        for topic in TOPICS:
            status = h.monitor._status[topic]
            assert status.count == model.received[topic]
            assert status.refused == model.refused[topic], topic
            assert status.flagged == model.flagged[topic], topic
            assert sum(status.refused.values()) + sum(status.flagged.values()) <= status.count

    feed()
    assert published[0] >= 1000, f"only {published[0]} generated messages"
    joints = len(h.received["joints"])
    h.play(1.5)
    assert len(h.received["joints"]) > joints, "the monitor stopped publishing"
    assert h.spin_until(lambda: "divergence_monitor: /real/joint_states" in h.statuses(), timeout_s=3.0)
    values = h.values("divergence_monitor: /real/joint_states")
    status = h.monitor._status["/real/joint_states"]
    assert int(values["refused"]) <= sum(status.refused.values())
    summary = h.monitor._engine.summary(h.now_ns())
    assert summary.rejected_count == sum(sum(c.values()) for c in (h.monitor._status[t].refused for t in TOPICS))
