"""Conformance of message_filters: ROS 2's package and our fallback, on the API they share.

Each test runs once per implementation: ``upstream`` (ROS 2's message_filters, from a
ROS 2 distribution or, on machines without one, the Jazzy kit that ``make test``
installs when ROS_UPSTREAM_KIT is set) and ``fallback``
(sim_real_bridge.compat.message_filters, which sim_real_bridge.ros.filters uses when
the upstream package is missing). The shared tests hold to the API that Jazzy (4.11)
and Kilted (7.x) have in common. Kilted's additions are tested on the implementations
that have them; where none has (Jazzy, and the fallback, which leaves them out on
purpose), those tests are not collected.
"""

from __future__ import annotations

import inspect
import random
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import pytest
import rclpy
from builtin_interfaces.msg import Time as TimeMsg
from rclpy.clock import ClockType, ROSClock
from rclpy.executors import SingleThreadedExecutor
from rclpy.time import Time
from std_msgs.msg import Header, String

from sim_real_bridge.compat import message_filters as fallback
from sim_real_bridge.ros import filters

try:
    import message_filters as upstream
except ImportError:
    upstream = None

UPSTREAM_MISSING = (
    "ROS 2's message_filters is not installed: a ROS 2 distribution (Jazzy, Kilted) has it; "
    "without one, `make test` installs it from the Jazzy kit when ROS_UPSTREAM_KIT names "
    "../shared/ros-upstream"
)
IMPLEMENTATIONS: dict[str, ModuleType | None] = {"upstream": upstream, "fallback": fallback}
MS = 1_000_000
# Jazzy's message_filters logs with the deprecated RcutilsLogger.warn.
pytestmark = pytest.mark.filterwarnings("ignore:Deprecated in favor of:DeprecationWarning")


@pytest.fixture(params=list(IMPLEMENTATIONS))
def mf(request: pytest.FixtureRequest) -> ModuleType:
    """The message_filters implementation under test."""
    module = IMPLEMENTATIONS[request.param]
    if module is None:
        pytest.skip(UPSTREAM_MISSING)
    return module


def _has_init_parameter(cls_name: str, name: str) -> Callable[[ModuleType], bool]:
    return lambda module: name in inspect.signature(getattr(module, cls_name).__init__).parameters


# Kilted's additions to the Jazzy API, and how to tell whether an implementation has them.
NEWER_FEATURES: dict[str, Callable[[ModuleType], bool]] = {
    "queue_offset": _has_init_parameter("ApproximateTimeSynchronizer", "queue_offset"),
    "sync_arrival_time": _has_init_parameter("ApproximateTimeSynchronizer", "sync_arrival_time"),
    "unregisterCallback": lambda module: hasattr(module.SimpleFilter, "unregisterCallback"),
    "getLatestTime": lambda module: hasattr(module.Cache, "getLatestTime"),
    "Chain": lambda module: hasattr(module, "Chain"),
}


def newer_feature(feature: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Runs the test on the installed implementations with ``feature``; none: not collected."""
    having = [name for name, module in IMPLEMENTATIONS.items() if module and NEWER_FEATURES[feature](module)]

    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        if not having:
            test.__test__ = False  # type: ignore[attr-defined]
            return test
        return pytest.mark.parametrize("mf", having, indirect=True)(test)

    return decorate


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


def make_inputs(mf: ModuleType, n: int) -> list[Any]:
    return [mf.SimpleFilter() for _ in range(n)]


# --- which implementation, and the API -----------------------------------------------


def test_filters_module_prefers_upstream() -> None:
    assert filters.message_filters is (upstream if upstream is not None else fallback)
    assert filters.USING_UPSTREAM_MESSAGE_FILTERS is (upstream is not None)


def test_fallback_has_only_the_shared_api() -> None:
    assert not any(present(fallback) for present in NEWER_FEATURES.values())
    shared = {"ApproximateTimeSynchronizer", "Cache", "SimpleFilter", "Subscriber", "TimeSynchronizer"}
    assert set(fallback.__all__) == shared
    # Fourth positional argument: Jazzy's allow_headerless and Kilted's queue_offset; the
    # Subscriber's QoS: fourth for Kilted, a clash with the callback for Jazzy.
    keyword_only = inspect.Parameter.KEYWORD_ONLY
    assert inspect.signature(fallback.ApproximateTimeSynchronizer).parameters["allow_headerless"].kind is keyword_only
    assert inspect.signature(fallback.Subscriber).parameters["qos_profile"].kind is keyword_only


def test_fallback_api_exists_upstream() -> None:
    """Every public name and method of the fallback exists upstream, with compatible parameters."""
    if upstream is None:
        pytest.skip(UPSTREAM_MISSING)
    for cls_name in fallback.__all__:
        ours, theirs = getattr(fallback, cls_name), getattr(upstream, cls_name)
        methods = [name for name, value in vars(ours).items() if callable(value) and not name.startswith("_")]
        for method in methods:
            assert hasattr(theirs, method), f"{cls_name}.{method} is not upstream"
        if "args" in inspect.signature(theirs.__init__).parameters:
            continue  # Jazzy's Subscriber(*args, **kwargs)
        our_params = inspect.signature(ours.__init__).parameters
        their_params = inspect.signature(theirs.__init__).parameters
        assert set(our_params) <= set(their_params), cls_name
        for name, param in our_params.items():
            if isinstance(their_params[name].default, (bool, int, float)):
                assert their_params[name].default == param.default, f"{cls_name}({name}=...)"


@pytest.mark.parametrize(
    ("cls_name", "leading"),
    [
        ("Cache", ["self", "f", "cache_size", "allow_headerless"]),
        ("TimeSynchronizer", ["self", "fs", "queue_size"]),
        ("ApproximateTimeSynchronizer", ["self", "fs", "queue_size", "slop"]),
    ],
)
def test_constructor_signatures(mf: ModuleType, cls_name: str, leading: list[str]) -> None:
    params = inspect.signature(getattr(mf, cls_name).__init__).parameters
    assert list(params)[: len(leading)] == leading


def test_signature_defaults(mf: ModuleType) -> None:
    cache = inspect.signature(mf.Cache.__init__).parameters
    assert cache["cache_size"].default == 1
    assert cache["allow_headerless"].default is False
    approx = inspect.signature(mf.ApproximateTimeSynchronizer.__init__).parameters
    assert approx["allow_headerless"].default is False


def test_simple_filter_callbacks_get_extra_args(mf: ModuleType) -> None:
    source = mf.SimpleFilter()
    seen: list[tuple[Any, ...]] = []
    conn_a = source.registerCallback(lambda *a: seen.append(("a",) + a), 1, 2)
    conn_b = source.registerCallback(lambda *a: seen.append(("b",) + a))
    source.signalMessage("m")
    assert seen == [("a", "m", 1, 2), ("b", "m")]
    assert conn_a != conn_b


# --- TimeSynchronizer (exact) -------------------------------------------------------


def test_exact_sync_pairs_equal_stamps_only(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.TimeSynchronizer([a, b], 10)
    out = Collector()
    sync.registerCallback(out)
    a1, b1 = stamped(1000 * MS), stamped(1000 * MS)
    a.signalMessage(a1)
    b.signalMessage(stamped(1001 * MS))
    assert out.sets == []
    b.signalMessage(b1)
    assert out.sets == [(a1, b1)]


def test_exact_sync_three_inputs_in_input_order(mf: ModuleType) -> None:
    a, b, c = make_inputs(mf, 3)
    sync = mf.TimeSynchronizer([a, b, c], 5)
    out = Collector()
    sync.registerCallback(out)
    ma, mb, mc = stamped(5 * MS), stamped(5 * MS), stamped(5 * MS)
    c.signalMessage(mc)
    a.signalMessage(ma)
    assert out.sets == []
    b.signalMessage(mb)
    assert out.sets == [(ma, mb, mc)]


def test_exact_sync_out_of_order_input(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.TimeSynchronizer([a, b], 10)
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


def test_exact_sync_queue_size_bounds_each_input(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.TimeSynchronizer([a, b], 2)
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


def test_approx_sync_pairs_within_slop(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.ApproximateTimeSynchronizer([a, b], 10, 0.05)
    out = Collector()
    sync.registerCallback(out)
    ma, mb = stamped(1000 * MS), stamped(1030 * MS)
    a.signalMessage(ma)
    b.signalMessage(mb)
    assert out.sets == [(ma, mb)]


def test_approx_sync_spread_must_be_strictly_below_slop(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.ApproximateTimeSynchronizer([a, b], 10, 0.05)
    out = Collector()
    sync.registerCallback(out)
    a.signalMessage(stamped(1000 * MS))
    b.signalMessage(stamped(1050 * MS))  # spread == slop
    b.signalMessage(stamped(1200 * MS))  # far beyond
    assert out.sets == []


def test_approx_sync_takes_nearest_candidate_and_removes_it(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.ApproximateTimeSynchronizer([a, b], 10, 0.05)
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


def test_approx_sync_three_inputs_needs_all_within_slop(mf: ModuleType) -> None:
    a, b, c = make_inputs(mf, 3)
    sync = mf.ApproximateTimeSynchronizer([a, b, c], 10, 0.1)
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


def test_approx_sync_queue_size_bounds_each_input(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.ApproximateTimeSynchronizer([a, b], 2, 0.01)
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


def test_approx_sync_recombines_shuffled_sequences(mf: ModuleType) -> None:
    rng = random.Random(7)
    for n in range(1, 9):
        a, b = make_inputs(mf, 2)
        sync = mf.ApproximateTimeSynchronizer([a, b], n, 0.1)
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


def test_approx_sync_accepts_rclpy_time_stamps(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.ApproximateTimeSynchronizer([a, b], 3, 0.1)
    out = Collector()
    sync.registerCallback(out)
    ma = FakeMsg(Header())
    ma.header = type("H", (), {"stamp": Time(seconds=4)})()
    mb = stamped(4 * 1000 * MS + 5 * MS)
    a.signalMessage(ma)
    b.signalMessage(mb)
    assert out.sets == [(ma, mb)]


def test_approx_sync_drops_headerless_unless_allowed(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.ApproximateTimeSynchronizer([a, b], 5, 10.0)
    out = Collector()
    sync.registerCallback(out)
    a.signalMessage(stamped(ROSClock().now().nanoseconds))
    b.signalMessage(Headerless())
    assert out.sets == []
    assert len(sync.queues[1]) == 0


def test_approx_sync_stamps_headerless_with_ros_time_when_allowed(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.ApproximateTimeSynchronizer([a, b], 5, 10.0, allow_headerless=True)
    out = Collector()
    sync.registerCallback(out)
    ma, mb = stamped(ROSClock().now().nanoseconds), Headerless("x")
    a.signalMessage(ma)
    b.signalMessage(mb)
    assert out.sets == [(ma, mb)]


def test_approx_sync_far_stamped_headerless_does_not_match(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.ApproximateTimeSynchronizer([a, b], 5, 0.5, allow_headerless=True)
    out = Collector()
    sync.registerCallback(out)
    a.signalMessage(stamped(1 * MS))  # 1970: far from the current ROS time
    b.signalMessage(Headerless())
    assert out.sets == []


# --- Cache --------------------------------------------------------------------------


def t_ms(ms: int) -> Time:
    # Stamps from headers are ROS time; rclpy refuses to compare across clock types.
    return Time(nanoseconds=ms * MS, clock_type=ClockType.ROS_TIME)


def filled_cache(mf: ModuleType, stamps_ms: list[int], cache_size: int) -> tuple[Any, list[FakeMsg]]:
    source = mf.SimpleFilter()
    cache = mf.Cache(source, cache_size=cache_size)
    msgs = [stamped(ms * MS, ms) for ms in stamps_ms]
    for msg in msgs:
        source.signalMessage(msg)
    return cache, msgs


def test_cache_keeps_last_cache_size_messages(mf: ModuleType) -> None:
    cache, msgs = filled_cache(mf, [10, 20, 30, 40, 50, 60, 70], cache_size=5)
    assert cache.getOldestTime() == t_ms(30)
    assert cache.getInterval(t_ms(0), t_ms(100)) == msgs[2:]
    assert cache.getLast() is msgs[-1]


def test_cache_window_queries(mf: ModuleType) -> None:
    cache, msgs = filled_cache(mf, [10, 20, 30, 40, 50], cache_size=10)
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


def test_cache_interval_rejects_reversed_bounds(mf: ModuleType) -> None:
    cache, _ = filled_cache(mf, [10], cache_size=2)
    with pytest.raises(AssertionError):
        cache.getInterval(t_ms(20), t_ms(10))


def test_cache_empty_queries_return_none(mf: ModuleType) -> None:
    cache, _ = filled_cache(mf, [], cache_size=3)
    assert cache.getOldestTime() is None
    assert cache.getLast() is None
    assert cache.getElemAfterTime(t_ms(0)) is None
    assert cache.getElemBeforeTime(t_ms(0)) is None
    assert cache.getInterval(t_ms(0), t_ms(1)) == []


@pytest.mark.filterwarnings("ignore:Cache.getLastestTime is deprecated:DeprecationWarning")
def test_cache_latest_time_in_upstream_spelling(mf: ModuleType) -> None:
    cache, _ = filled_cache(mf, [10, 20], cache_size=3)
    assert cache.getLastestTime() == t_ms(20)
    empty, _ = filled_cache(mf, [], cache_size=3)
    assert empty.getLastestTime() is None


def test_cache_out_of_order_input_keeps_arrival_order(mf: ModuleType) -> None:
    cache, msgs = filled_cache(mf, [30, 10, 20], cache_size=5)
    assert cache.getInterval(t_ms(0), t_ms(100)) == msgs
    assert cache.getOldestTime() == t_ms(30)
    assert cache.getElemAfterTime(t_ms(5)) is msgs[0]
    assert cache.getElemBeforeTime(t_ms(35)) is msgs[2]


def test_cache_passes_messages_on(mf: ModuleType) -> None:
    source = mf.SimpleFilter()
    cache = mf.Cache(source, cache_size=2)
    out = Collector()
    cache.registerCallback(out)
    msg = stamped(5 * MS)
    source.signalMessage(msg)
    assert out.sets == [(msg,)]


def test_cache_headerless_dropped_unless_allowed(mf: ModuleType) -> None:
    source = mf.SimpleFilter()
    strict = mf.Cache(source, cache_size=3)
    lenient = mf.Cache(source, cache_size=3, allow_headerless=True)
    before = ROSClock().now()
    msg = Headerless("h")
    source.signalMessage(msg)
    after = ROSClock().now()
    assert strict.getOldestTime() is None
    assert lenient.getLast() is msg
    assert before <= lenient.getOldestTime() <= after


# --- Kilted's additions, where installed ---------------------------------------------


@newer_feature("unregisterCallback")
def test_unregister_callback(mf: ModuleType) -> None:
    source = mf.SimpleFilter()
    seen: list[tuple[Any, ...]] = []
    conn_a = source.registerCallback(lambda *a: seen.append(("a",) + a))
    source.registerCallback(lambda *a: seen.append(("b",) + a))
    source.unregisterCallback(conn_a)
    source.signalMessage("n")
    assert seen == [("b", "n")]


@newer_feature("getLatestTime")
def test_cache_get_latest_time(mf: ModuleType) -> None:
    cache, _ = filled_cache(mf, [30, 10, 20], cache_size=5)
    assert cache.getLatestTime() == t_ms(20)


@newer_feature("sync_arrival_time")
def test_approx_sync_arrival_time_ignores_header_stamps(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.ApproximateTimeSynchronizer([a, b], 5, 30.0, sync_arrival_time=True)
    out = Collector()
    sync.registerCallback(out)
    ma, mb = stamped(1 * MS), stamped(5000 * 1000 * MS)
    a.signalMessage(ma)
    b.signalMessage(mb)
    assert out.sets == [(ma, mb)]


@newer_feature("queue_offset")
def test_approx_sync_queue_offset_shifts_an_input(mf: ModuleType) -> None:
    a, b = make_inputs(mf, 2)
    sync = mf.ApproximateTimeSynchronizer([a, b], 3, 0.1, queue_offset=[500 * MS, 0])
    out = Collector()
    sync.registerCallback(out)
    for t in range(3):
        ma, mb = stamped(t * 1000 * MS + 500 * MS), stamped(t * 1000 * MS)
        a.signalMessage(ma)
        b.signalMessage(mb)
        assert out.sets[-1] == (ma, mb)
    assert len(out.sets) == 3


@newer_feature("Chain")
def test_chain_runs_filters_in_order(mf: ModuleType) -> None:
    source = mf.SimpleFilter()
    chain = mf.Chain(source)
    first = mf.Cache(mf.SimpleFilter(), cache_size=5)
    second = mf.Cache(mf.SimpleFilter(), cache_size=5)
    chain.addFilter(first)
    chain.addFilter(second)
    out = Collector()
    chain.registerCallback(out)
    msg = stamped(3 * MS)
    source.signalMessage(msg)
    assert out.sets == [(msg,)]
    assert first.getLast() is msg and second.getLast() is msg
    assert chain.getFilter(1) is second


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
def test_subscriber_feeds_approx_sync_over_dds(mf: ModuleType, ros_node) -> None:
    node, executor = ros_node
    from geometry_msgs.msg import WrenchStamped
    from sensor_msgs.msg import JointState

    joints_sub = mf.Subscriber(node, JointState, "mf_test/joint_states")
    wrench_sub = mf.Subscriber(node, WrenchStamped, "mf_test/wrench", qos_profile=10)
    assert joints_sub.getTopic() == "mf_test/joint_states"
    assert joints_sub.topic_name == "/mf_test/joint_states"  # served by the subscription
    assert joints_sub.qos_profile.depth == 10
    sync = mf.ApproximateTimeSynchronizer([joints_sub, wrench_sub], 10, 0.02)
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
def test_subscriber_passes_kwargs_to_create_subscription(mf: ModuleType, ros_node) -> None:
    node, executor = ros_node
    from rclpy.callback_groups import ReentrantCallbackGroup

    group = ReentrantCallbackGroup()
    sub = mf.Subscriber(node, String, "mf_test/chatter", qos_profile=5, callback_group=group, raw=True)
    assert sub.sub.callback_group is group
    assert sub.qos_profile.depth == 5
    received: list[Any] = []
    sub.registerCallback(received.append)
    pub = node.create_publisher(String, "mf_test/chatter", 10)
    assert spin_until(executor, lambda: pub.get_subscription_count() > 0)
    pub.publish(String(data="hello"))
    assert spin_until(executor, lambda: bool(received))
    assert isinstance(received[0], bytes) and b"hello" in received[0]  # raw=True: serialized CDR
