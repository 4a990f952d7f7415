"""Conformance of message_filters (Kilted API) as resolved by sim_real_bridge.ros.filters.

The same suite runs against ROS 2's message_filters where it is installed and
against sim_real_bridge.compat.message_filters elsewhere, so it only asserts what the
upstream package does.
"""

from __future__ import annotations

import inspect
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import rclpy
from builtin_interfaces.msg import Time as TimeMsg
from rclpy.clock import ClockType, ROSClock
from rclpy.executors import SingleThreadedExecutor
from rclpy.time import Time
from std_msgs.msg import Header, String

from sim_real_bridge.ros.filters import USING_UPSTREAM_MESSAGE_FILTERS, message_filters

MS = 1_000_000


@dataclass
class FakeMsg:
    """A message with ``header.stamp`` (builtin_interfaces/Time), like any stamped type."""

    header: Header
    data: Any = None

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


@dataclass(eq=False)
class Headerless:
    data: Any = None


def stamped(stamp_ns: int, data: Any = None) -> FakeMsg:
    sec, nanosec = divmod(stamp_ns, 1_000_000_000)
    return FakeMsg(Header(stamp=TimeMsg(sec=sec, nanosec=nanosec)), data)


@dataclass
class Collector:
    sets: list[tuple[Any, ...]] = field(default_factory=list)

    def __call__(self, *msgs: Any) -> None:
        self.sets.append(msgs)


def make_inputs(n: int) -> list[Any]:
    return [message_filters.SimpleFilter() for _ in range(n)]


def test_resolved_module_matches_flag() -> None:
    assert (message_filters.__name__ == "message_filters") is USING_UPSTREAM_MESSAGE_FILTERS


@pytest.mark.parametrize(
    ("cls_name", "expected"),
    [
        ("Subscriber", ["self", "node", "msg_type", "topic", "qos_profile", "kwargs"]),
        ("Cache", ["self", "f", "cache_size", "allow_headerless"]),
        ("TimeSynchronizer", ["self", "fs", "queue_size"]),
        (
            "ApproximateTimeSynchronizer",
            ["self", "fs", "queue_size", "slop", "queue_offset", "allow_headerless",
             "sync_arrival_time"],
        ),
    ],
)
def test_constructor_signatures(cls_name: str, expected: list[str]) -> None:
    params = inspect.signature(getattr(message_filters, cls_name).__init__).parameters
    assert list(params) == expected


def test_signature_defaults() -> None:
    cache = inspect.signature(message_filters.Cache.__init__).parameters
    assert cache["cache_size"].default == 1
    assert cache["allow_headerless"].default is False
    approx = inspect.signature(message_filters.ApproximateTimeSynchronizer.__init__).parameters
    assert approx["queue_offset"].default is False
    assert approx["allow_headerless"].default is False
    assert approx["sync_arrival_time"].default is False


def test_simple_filter_callbacks_get_extra_args_and_unregister() -> None:
    source = message_filters.SimpleFilter()
    seen: list[tuple[Any, ...]] = []
    conn_a = source.registerCallback(lambda *a: seen.append(("a",) + a), 1, 2)
    source.registerCallback(lambda *a: seen.append(("b",) + a))
    source.signalMessage("m")
    assert seen == [("a", "m", 1, 2), ("b", "m")]
    source.unregisterCallback(conn_a)
    source.signalMessage("n")
    assert seen[2:] == [("b", "n")]


# --- TimeSynchronizer (exact) -------------------------------------------------------


def test_exact_sync_pairs_equal_stamps_only() -> None:
    a, b = make_inputs(2)
    sync = message_filters.TimeSynchronizer([a, b], 10)
    out = Collector()
    sync.registerCallback(out)
    a1, b1 = stamped(1000 * MS), stamped(1000 * MS)
    a.signalMessage(a1)
    b.signalMessage(stamped(1001 * MS))
    assert out.sets == []
    b.signalMessage(b1)
    assert out.sets == [(a1, b1)]


def test_exact_sync_three_inputs_in_input_order() -> None:
    a, b, c = make_inputs(3)
    sync = message_filters.TimeSynchronizer([a, b, c], 5)
    out = Collector()
    sync.registerCallback(out)
    ma, mb, mc = stamped(5 * MS), stamped(5 * MS), stamped(5 * MS)
    c.signalMessage(mc)
    a.signalMessage(ma)
    assert out.sets == []
    b.signalMessage(mb)
    assert out.sets == [(ma, mb, mc)]


def test_exact_sync_drops_sets_older_than_a_signalled_one() -> None:
    a, b = make_inputs(2)
    sync = message_filters.TimeSynchronizer([a, b], 10)
    out = Collector()
    sync.registerCallback(out)
    old_a, new_a, new_b = stamped(1 * MS), stamped(2 * MS), stamped(2 * MS)
    a.signalMessage(old_a)
    a.signalMessage(new_a)
    b.signalMessage(new_b)
    assert out.sets == [(new_a, new_b)]
    b.signalMessage(stamped(1 * MS))  # its partner was discarded as stale
    assert len(out.sets) == 1


def test_exact_sync_out_of_order_input() -> None:
    a, b = make_inputs(2)
    sync = message_filters.TimeSynchronizer([a, b], 10)
    out = Collector()
    sync.registerCallback(out)
    msgs_a = {t: stamped(t * MS) for t in (3, 1, 2)}
    for msg in msgs_a.values():
        a.signalMessage(msg)
    b1 = stamped(1 * MS)
    b.signalMessage(b1)
    b3 = stamped(3 * MS)
    b.signalMessage(b3)
    assert out.sets == [(msgs_a[1], b1), (msgs_a[3], b3)]


def test_exact_sync_queue_size_bounds_each_input() -> None:
    a, b = make_inputs(2)
    sync = message_filters.TimeSynchronizer([a, b], 2)
    out = Collector()
    sync.registerCallback(out)
    msgs_a = [stamped(t * MS) for t in (1, 2, 3)]
    for msg in msgs_a:
        a.signalMessage(msg)
    assert len(sync.queues[0]) == 2
    b.signalMessage(stamped(1 * MS))  # evicted from a's queue
    assert out.sets == []
    b2 = stamped(2 * MS)
    b.signalMessage(b2)
    assert out.sets == [(msgs_a[1], b2)]


# --- ApproximateTimeSynchronizer ----------------------------------------------------


def test_approx_sync_pairs_within_slop() -> None:
    a, b = make_inputs(2)
    sync = message_filters.ApproximateTimeSynchronizer([a, b], 10, 0.05)
    out = Collector()
    sync.registerCallback(out)
    ma, mb = stamped(1000 * MS), stamped(1030 * MS)
    a.signalMessage(ma)
    b.signalMessage(mb)
    assert out.sets == [(ma, mb)]


def test_approx_sync_spread_must_be_strictly_below_slop() -> None:
    a, b = make_inputs(2)
    sync = message_filters.ApproximateTimeSynchronizer([a, b], 10, 0.05)
    out = Collector()
    sync.registerCallback(out)
    a.signalMessage(stamped(1000 * MS))
    b.signalMessage(stamped(1050 * MS))  # spread == slop
    b.signalMessage(stamped(1200 * MS))  # far beyond
    assert out.sets == []


def test_approx_sync_takes_nearest_candidate_and_removes_it() -> None:
    a, b = make_inputs(2)
    sync = message_filters.ApproximateTimeSynchronizer([a, b], 10, 0.05)
    out = Collector()
    sync.registerCallback(out)
    far_a, near_a = stamped(1000 * MS), stamped(1040 * MS)
    a.signalMessage(far_a)
    a.signalMessage(near_a)
    b1 = stamped(1030 * MS)
    b.signalMessage(b1)
    assert out.sets == [(near_a, b1)]
    b2 = stamped(1010 * MS)
    b.signalMessage(b2)
    assert out.sets[1] == (far_a, b2)


def test_approx_sync_three_inputs_needs_all_within_slop() -> None:
    a, b, c = make_inputs(3)
    sync = message_filters.ApproximateTimeSynchronizer([a, b, c], 10, 0.1)
    out = Collector()
    sync.registerCallback(out)
    ma, mb = stamped(1000 * MS), stamped(1060 * MS)
    a.signalMessage(ma)
    b.signalMessage(mb)
    c.signalMessage(stamped(1150 * MS))  # within slop of b, not of a
    assert out.sets == []
    mc = stamped(1050 * MS)
    c.signalMessage(mc)
    assert out.sets == [(ma, mb, mc)]


def test_approx_sync_queue_size_bounds_each_input() -> None:
    a, b = make_inputs(2)
    sync = message_filters.ApproximateTimeSynchronizer([a, b], 2, 0.01)
    out = Collector()
    sync.registerCallback(out)
    msgs_a = [stamped(t * 100 * MS) for t in (1, 2, 3)]
    for msg in msgs_a:
        a.signalMessage(msg)
    assert len(sync.queues[0]) == 2
    b.signalMessage(stamped(100 * MS))
    assert out.sets == []
    b2 = stamped(200 * MS)
    b.signalMessage(b2)
    assert out.sets == [(msgs_a[1], b2)]


def test_approx_sync_recombines_shuffled_sequences() -> None:
    rng = random.Random(7)
    for n in range(1, 9):
        a, b = make_inputs(2)
        sync = message_filters.ApproximateTimeSynchronizer([a, b], n, 0.1)
        out = Collector()
        sync.registerCallback(out)
        seq_a = [stamped(t * 1000 * MS, rng.random()) for t in range(n)]
        seq_b = [stamped(t * 1000 * MS + 20 * MS, rng.random()) for t in range(n)]
        for msg in rng.sample(seq_a, n):
            a.signalMessage(msg)
        assert out.sets == []
        for msg in rng.sample(seq_b, n):
            b.signalMessage(msg)
        assert set(out.sets) == set(zip(seq_a, seq_b))


def test_approx_sync_accepts_rclpy_time_stamps() -> None:
    a, b = make_inputs(2)
    sync = message_filters.ApproximateTimeSynchronizer([a, b], 3, 0.1)
    out = Collector()
    sync.registerCallback(out)
    ma = FakeMsg(Header())
    ma.header = type("H", (), {"stamp": Time(seconds=4)})()
    mb = stamped(4 * 1000 * MS + 5 * MS)
    a.signalMessage(ma)
    b.signalMessage(mb)
    assert out.sets == [(ma, mb)]


def test_approx_sync_drops_headerless_unless_allowed() -> None:
    a, b = make_inputs(2)
    sync = message_filters.ApproximateTimeSynchronizer([a, b], 5, 10.0)
    out = Collector()
    sync.registerCallback(out)
    a.signalMessage(stamped(ROSClock().now().nanoseconds))
    b.signalMessage(Headerless())
    assert out.sets == []
    assert len(sync.queues[1]) == 0


def test_approx_sync_stamps_headerless_with_ros_time_when_allowed() -> None:
    a, b = make_inputs(2)
    sync = message_filters.ApproximateTimeSynchronizer(
        [a, b], 5, 10.0, allow_headerless=True
    )
    out = Collector()
    sync.registerCallback(out)
    ma, mb = stamped(ROSClock().now().nanoseconds), Headerless("x")
    a.signalMessage(ma)
    b.signalMessage(mb)
    assert out.sets == [(ma, mb)]


def test_approx_sync_far_stamped_headerless_does_not_match() -> None:
    a, b = make_inputs(2)
    sync = message_filters.ApproximateTimeSynchronizer(
        [a, b], 5, 0.5, allow_headerless=True
    )
    out = Collector()
    sync.registerCallback(out)
    a.signalMessage(stamped(1 * MS))  # 1970: far from the current ROS time
    b.signalMessage(Headerless())
    assert out.sets == []


def test_approx_sync_arrival_time_ignores_header_stamps() -> None:
    a, b = make_inputs(2)
    sync = message_filters.ApproximateTimeSynchronizer(
        [a, b], 5, 30.0, sync_arrival_time=True
    )
    out = Collector()
    sync.registerCallback(out)
    ma, mb = stamped(1 * MS), stamped(5000 * 1000 * MS)
    a.signalMessage(ma)
    b.signalMessage(mb)
    assert out.sets == [(ma, mb)]


def test_approx_sync_queue_offset_shifts_an_input() -> None:
    a, b = make_inputs(2)
    sync = message_filters.ApproximateTimeSynchronizer(
        [a, b], 3, 0.1, queue_offset=[500 * MS, 0]
    )
    out = Collector()
    sync.registerCallback(out)
    for t in range(3):
        ma, mb = stamped(t * 1000 * MS + 500 * MS), stamped(t * 1000 * MS)
        a.signalMessage(ma)
        b.signalMessage(mb)
        assert out.sets[-1] == (ma, mb)
    assert len(out.sets) == 3


def test_approx_sync_positional_fourth_argument_is_queue_offset() -> None:
    a, b = make_inputs(2)
    sync = message_filters.ApproximateTimeSynchronizer([a, b], 3, 0.1, [0, 0])
    assert sync.queue_offset == [0, 0]
    assert sync.allow_headerless is False


# --- Cache --------------------------------------------------------------------------


def t_ms(ms: int) -> Time:
    # Stamps from headers are ROS time; rclpy refuses to compare across clock types.
    return Time(nanoseconds=ms * MS, clock_type=ClockType.ROS_TIME)


def filled_cache(stamps_ms: list[int], cache_size: int) -> tuple[Any, list[FakeMsg]]:
    source = message_filters.SimpleFilter()
    cache = message_filters.Cache(source, cache_size=cache_size)
    msgs = [stamped(ms * MS, ms) for ms in stamps_ms]
    for msg in msgs:
        source.signalMessage(msg)
    return cache, msgs


def test_cache_keeps_last_cache_size_messages() -> None:
    cache, msgs = filled_cache([10, 20, 30, 40, 50, 60, 70], cache_size=5)
    assert cache.getOldestTime() == t_ms(30)
    assert cache.getLatestTime() == t_ms(70)
    assert cache.getInterval(t_ms(0), t_ms(100)) == msgs[2:]


def test_cache_window_queries() -> None:
    cache, msgs = filled_cache([10, 20, 30, 40, 50], cache_size=10)
    assert cache.getInterval(t_ms(20), t_ms(40)) == msgs[1:4]
    assert cache.getInterval(t_ms(21), t_ms(39)) == [msgs[2]]
    assert cache.getInterval(t_ms(51), t_ms(60)) == []
    assert cache.getElemAfterTime(t_ms(25)) is msgs[2]
    assert cache.getElemAfterTime(t_ms(30)) is msgs[2]
    assert cache.getElemAfterTime(t_ms(51)) is None
    assert cache.getElemBeforeTime(t_ms(25)) is msgs[1]
    assert cache.getElemBeforeTime(t_ms(30)) is msgs[2]
    assert cache.getElemBeforeTime(t_ms(9)) is None
    assert cache.getLast() is msgs[-1]


def test_cache_interval_rejects_reversed_bounds() -> None:
    cache, _ = filled_cache([10], cache_size=2)
    with pytest.raises(AssertionError):
        cache.getInterval(t_ms(20), t_ms(10))


def test_cache_empty_queries_return_none() -> None:
    cache, _ = filled_cache([], cache_size=3)
    assert cache.getLatestTime() is None
    assert cache.getOldestTime() is None
    assert cache.getLast() is None
    assert cache.getElemAfterTime(t_ms(0)) is None
    assert cache.getElemBeforeTime(t_ms(0)) is None
    assert cache.getInterval(t_ms(0), t_ms(1)) == []


def test_cache_lastest_spelling_is_deprecated_alias() -> None:
    cache, _ = filled_cache([10, 20], cache_size=3)
    with pytest.warns(DeprecationWarning, match="getLatestTime"):
        assert cache.getLastestTime() == t_ms(20)


def test_cache_out_of_order_input_keeps_arrival_order() -> None:
    cache, msgs = filled_cache([30, 10, 20], cache_size=5)
    assert cache.getInterval(t_ms(0), t_ms(100)) == msgs
    assert cache.getLatestTime() == t_ms(20)
    assert cache.getOldestTime() == t_ms(30)
    assert cache.getElemAfterTime(t_ms(5)) is msgs[0]
    assert cache.getElemBeforeTime(t_ms(35)) is msgs[2]


def test_cache_passes_messages_on() -> None:
    source = message_filters.SimpleFilter()
    cache = message_filters.Cache(source, cache_size=2)
    out = Collector()
    cache.registerCallback(out)
    msg = stamped(5 * MS)
    source.signalMessage(msg)
    assert out.sets == [(msg,)]


def test_cache_headerless_dropped_unless_allowed() -> None:
    source = message_filters.SimpleFilter()
    strict = message_filters.Cache(source, cache_size=3)
    lenient = message_filters.Cache(source, cache_size=3, allow_headerless=True)
    before = ROSClock().now()
    msg = Headerless("h")
    source.signalMessage(msg)
    after = ROSClock().now()
    assert strict.getLatestTime() is None
    assert lenient.getLast() is msg
    assert before <= lenient.getLatestTime() <= after


def test_chain_runs_filters_in_order() -> None:
    source = message_filters.SimpleFilter()
    chain = message_filters.Chain(source)
    first = message_filters.Cache(message_filters.SimpleFilter(), cache_size=5)
    second = message_filters.Cache(message_filters.SimpleFilter(), cache_size=5)
    chain.addFilter(first)
    chain.addFilter(second)
    out = Collector()
    chain.registerCallback(out)
    msg = stamped(3 * MS)
    source.signalMessage(msg)
    assert out.sets == [(msg,)]
    assert first.getLast() is msg and second.getLast() is msg
    assert chain.getFilter(1) is second
    with pytest.raises(RuntimeError, match="Already connected"):
        chain.connectInput(source)


# --- real rclpy subscriptions over DDS ----------------------------------------------


def spin_until(executor: Any, done: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.05)
    return done()


@pytest.fixture
def ros_node():
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("message_filters_conformance", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    yield node, executor
    executor.shutdown()
    node.destroy_node()
    rclpy.shutdown(context=context)


@pytest.mark.ros
def test_subscriber_feeds_approx_sync_over_dds(ros_node) -> None:
    node, executor = ros_node
    from sensor_msgs.msg import JointState
    from geometry_msgs.msg import WrenchStamped

    joints_sub = message_filters.Subscriber(node, JointState, "mf_test/joint_states")
    wrench_sub = message_filters.Subscriber(node, WrenchStamped, "mf_test/wrench", 10)
    assert joints_sub.getTopic() == "mf_test/joint_states"
    assert joints_sub.topic_name == "/mf_test/joint_states"  # served by the subscription
    sync = message_filters.ApproximateTimeSynchronizer([joints_sub, wrench_sub], 10, 0.02)
    out = Collector()
    sync.registerCallback(out)
    joints_pub = node.create_publisher(JointState, "mf_test/joint_states", 10)
    wrench_pub = node.create_publisher(WrenchStamped, "mf_test/wrench", 10)
    assert spin_until(
        executor,
        lambda: joints_pub.get_subscription_count() > 0 and wrench_pub.get_subscription_count() > 0,
    )
    joints, wrench = JointState(), WrenchStamped()
    joints.header.stamp = TimeMsg(sec=100, nanosec=0)
    joints.name = ["joint1"]
    wrench.header.stamp = TimeMsg(sec=100, nanosec=5 * MS)
    joints_pub.publish(joints)
    wrench_pub.publish(wrench)
    assert spin_until(executor, lambda: len(out.sets) == 1)
    got_joints, got_wrench = out.sets[0]
    assert got_joints.header.stamp == joints.header.stamp
    assert got_joints.name == ["joint1"]
    assert got_wrench.header.stamp == wrench.header.stamp


@pytest.mark.ros
def test_subscriber_passes_kwargs_to_create_subscription(ros_node) -> None:
    node, executor = ros_node
    from rclpy.callback_groups import ReentrantCallbackGroup

    group = ReentrantCallbackGroup()
    sub = message_filters.Subscriber(node, String, "mf_test/chatter", callback_group=group)
    assert sub.sub.callback_group is group
    cache = message_filters.Cache(sub, cache_size=3, allow_headerless=True)
    pub = node.create_publisher(String, "mf_test/chatter", 10)
    assert spin_until(executor, lambda: pub.get_subscription_count() > 0)
    pub.publish(String(data="hello"))
    assert spin_until(executor, lambda: cache.getLast() is not None)
    assert cache.getLast().data == "hello"
