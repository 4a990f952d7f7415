"""TimeAligner, the message_filters filter on the monitor's aligner: what it emits.

Each behaviour runs on both message_filters implementations where both are
importable: ``upstream`` (ROS 2's package; here from the Jazzy kit) and ``fallback``
(sim_real_bridge.compat.message_filters). TimeAligner subclasses the SimpleFilter of
whichever sim_real_bridge.ros.filters resolved; for the other one the test loads a
second copy of the module on that implementation's SimpleFilter.

Most tests feed messages by hand with a fake receive clock, so the truth is exact:
with a constant delivery delay d and a publisher clock offset o, a sample stamped
``wall + o`` and received at ``wall + d`` maps to ``wall + d``, and the aligner's
output must equal numpy's linear interpolation of the samples at those times. The
DDS tests publish from two clocks seconds apart over real rclpy and check the
samples against the published signal.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import numpy as np
import pytest
import rclpy
from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import PoseStamped, WrenchStamped
from rclpy.executors import SingleThreadedExecutor
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from sim_real_bridge.compat import message_filters as fallback
from sim_real_bridge.errors import ConfigError
from sim_real_bridge.ros import aligner as aligner_module
from sim_real_bridge.ros import filters
from sim_real_bridge.ros.aligner import JointPositions, MessageRefused, pose_values

try:
    import message_filters as upstream
except ImportError:
    upstream = None

UPSTREAM_MISSING = (
    "ROS 2's message_filters is not installed: a ROS 2 distribution (Jazzy, Kilted) has it; "
    "in a venv without one, install the Jazzy kit: bash ../shared/ros-upstream/install.sh .venv"
)
IMPLEMENTATIONS: dict[str, ModuleType | None] = {"upstream": upstream, "fallback": fallback}
MS = 1_000_000
S = 1_000_000_000
NAMES = ["j0", "j1", "j2"]
# Jazzy's message_filters logs with the deprecated RcutilsLogger.warn.
pytestmark = pytest.mark.filterwarnings("ignore:Deprecated in favor of:DeprecationWarning")


@pytest.fixture(params=list(IMPLEMENTATIONS))
def mf(request: pytest.FixtureRequest) -> ModuleType:
    """The message_filters implementation under test."""
    module = IMPLEMENTATIONS[request.param]
    if module is None:
        pytest.skip(UPSTREAM_MISSING)
    return module


@functools.cache
def aligner_on(mf: ModuleType) -> ModuleType:
    """sim_real_bridge.ros.aligner with TimeAligner built on mf.SimpleFilter (a second
    copy of the module for the implementation sim_real_bridge.ros.filters did not pick)."""
    if mf is filters.message_filters:
        return aligner_module
    spec = importlib.util.spec_from_file_location(f"_aligner_on_{mf.__name__.replace('.', '_')}",
                                                  aligner_module.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    resolved = filters.message_filters
    filters.message_filters = mf
    try:
        spec.loader.exec_module(module)
    finally:
        filters.message_filters = resolved
    return module


def stamp(stamp_ns: int) -> TimeMsg:
    sec, nanosec = divmod(int(stamp_ns), S)
    return TimeMsg(sec=sec, nanosec=nanosec)


def joint_state(stamp_ns: int, positions: Any, names: list[str] = NAMES) -> JointState:
    msg = JointState(name=list(names), position=[float(p) for p in positions])
    msg.header.stamp = stamp(stamp_ns)
    return msg


def wrench(stamp_ns: int, values: Any) -> WrenchStamped:
    msg = WrenchStamped()
    msg.header.stamp = stamp(stamp_ns)
    f, t = msg.wrench.force, msg.wrench.torque
    f.x, f.y, f.z, t.x, t.y, t.z = (float(v) for v in values)
    return msg


@dataclass
class Stream:
    """One publisher's samples: publication times (wall), values, clock offset, delay."""

    wall_ns: np.ndarray
    values: np.ndarray
    offset_ns: int
    delay_ns: int
    make: Callable[[int, Any], Any]

    @property
    def mapped_ns(self) -> np.ndarray:
        """Where the aligner must put each sample on the receiver's clock."""
        return self.wall_ns + self.delay_ns

    def truth(self, t_ns: np.ndarray) -> np.ndarray:
        """(K, width) the samples linearly interpolated at t_ns (numpy's interp)."""
        return np.column_stack([np.interp(t_ns, self.mapped_ns, column) for column in self.values.T])


def stream(rng: np.random.Generator, start_ns: int, end_ns: int, period_ns: int, width: int, offset_ns: int,
           delay_ns: int, make: Callable[[int, Any], Any]) -> Stream:
    """Samples every period (with jitter in the publication instants) of random values."""
    wall = np.arange(start_ns, end_ns, period_ns, dtype=np.int64)
    wall = wall + rng.integers(-period_ns // 10, period_ns // 10, len(wall))
    return Stream(wall, rng.normal(size=(len(wall), width)), offset_ns, delay_ns, make)


@dataclass
class Run:
    """An aligner on hand-fed inputs with a fake receive clock, and what it emitted."""

    aligner: Any
    inputs: list[Any]
    now: list[int] = field(default_factory=lambda: [0])
    times: list[int] = field(default_factory=list)
    values: list[list[np.ndarray]] = field(default_factory=list)

    def on_sample(self, t_ns: int, values: list[np.ndarray]) -> None:
        self.times.append(t_ns)
        self.values.append(values)

    def feed(self, streams: list[Stream], extra: list[tuple[int, int, Any]] = ()) -> None:
        """Signal every sample (and the extra (recv, input, msg)) in receive order."""
        events = list(extra)
        for i, s in enumerate(streams):
            for wall, row in zip(s.wall_ns.tolist(), s.values):
                events.append((wall + s.delay_ns, i, s.make(wall + s.offset_ns, row)))
        events.sort(key=lambda event: (event[0], event[1]))
        for recv, i, msg in events:
            self.now[0] = recv
            self.inputs[i].signalMessage(msg)

    def column(self, i: int) -> np.ndarray:
        return np.array([values[i] for values in self.values])


def make_run(mf: ModuleType, n_inputs: int = 2, **kwargs: Any) -> Run:
    inputs = [mf.SimpleFilter() for _ in range(n_inputs)]
    now = [0]
    run = Run(aligner_on(mf).TimeAligner(inputs, clock=lambda: now[0], **kwargs), inputs, now)
    run.aligner.registerCallback(run.on_sample)
    return run


def two_streams(seed: int = 7, end_s: float = 3.0) -> list[Stream]:
    """Joints at 200 Hz from a clock 3.7 s ahead, wrench at 75 Hz from one 2.5 s behind."""
    rng = np.random.default_rng(seed)
    start, end = 1000 * S, 1000 * S + int(end_s * S)
    return [stream(rng, start, end, 5 * MS, 3, int(3.7 * S), 400_000, joint_state),
            stream(rng, start, end, 13_333_333, 6, int(-2.5 * S), 1_100_000, wrench)]


def test_samples_equal_the_interpolated_truth_across_clocks_and_rates(mf: ModuleType) -> None:
    streams = two_streams()
    run = make_run(mf, rate_hz=100.0)
    run.feed(streams)
    assert isinstance(run.aligner, mf.SimpleFilter)
    t = np.array(run.times)
    assert len(t) > 250
    assert (np.diff(t) == 10 * MS).all() and (t % (10 * MS) == 0).all()
    for i, s in enumerate(streams):
        np.testing.assert_allclose(run.column(i), s.truth(t), rtol=0, atol=1e-12)
    assert run.aligner.offsets_ns == [s.delay_ns - s.offset_ns for s in streams]
    # Nothing before both inputs had a sample, and every grid time the inputs reached went out.
    assert t[0] == -(-max(int(s.mapped_ns[0]) for s in streams) // (10 * MS)) * 10 * MS
    assert t[-1] > min(int(s.mapped_ns[-1]) for s in streams) - 10 * MS


def test_joint_states_are_read_by_name_whatever_their_order(mf: ModuleType) -> None:
    streams = two_streams()
    shuffled = ["j2", "extra", "j0", "j1"]

    def shuffled_joints(stamp_ns: int, q: Any) -> JointState:
        return joint_state(stamp_ns, [q[2], 9.0, q[0], q[1]], shuffled)

    streams[0].make = shuffled_joints
    run = make_run(mf, rate_hz=100.0, extractors=[aligner_on(mf).JointPositions(NAMES), None])
    run.feed(streams)
    np.testing.assert_allclose(run.column(0), streams[0].truth(np.array(run.times)), rtol=0, atol=1e-12)


def test_a_gap_is_never_interpolated_across(mf: ModuleType) -> None:
    streams = two_streams()
    joints = streams[0]
    in_gap = (joints.wall_ns > 1001 * S + 300 * MS) & (joints.wall_ns < 1001 * S + 500 * MS)
    joints.wall_ns, joints.values = joints.wall_ns[~in_gap], joints.values[~in_gap]
    run = make_run(mf, rate_hz=100.0, max_gap_s=0.05)
    run.feed(streams)
    t, q = np.array(run.times), run.column(0)
    before, after = joints.mapped_ns[joints.mapped_ns < 1001 * S + 400 * MS][-1], \
        joints.mapped_ns[joints.mapped_ns > 1001 * S + 400 * MS][0]
    inside = (t > before) & (t < after)
    assert inside.sum() >= 15
    assert np.isnan(q[inside]).all()
    np.testing.assert_allclose(q[~inside], joints.truth(t[~inside]), rtol=0, atol=1e-12)
    np.testing.assert_allclose(run.column(1), streams[1].truth(t), rtol=0, atol=1e-12)


def test_a_stalled_input_is_held_briefly_then_unknown(mf: ModuleType) -> None:
    streams = two_streams()
    wrench_stream = streams[1]
    stop = wrench_stream.wall_ns < 1001 * S + 500 * MS
    wrench_stream.wall_ns, wrench_stream.values = wrench_stream.wall_ns[stop], wrench_stream.values[stop]
    run = make_run(mf, rate_hz=100.0, max_gap_s=0.05, horizon_s=0.3)
    run.feed(streams)
    t, w = np.array(run.times), run.column(1)
    last = int(wrench_stream.mapped_ns[-1])
    # The joints go on: grid times past the stall went out once it lasted longer than the horizon.
    assert t[-1] > 1002 * S + 500 * MS
    assert (np.diff(t) == 10 * MS).all()
    held = (t > last) & (t - last <= 50 * MS)
    assert held.any()
    np.testing.assert_array_equal(w[held], np.repeat(wrench_stream.values[-1:], held.sum(), axis=0))
    assert np.isnan(w[t - last > 50 * MS]).all()
    np.testing.assert_allclose(w[t <= last], wrench_stream.truth(t[t <= last]), rtol=0, atol=1e-12)
    np.testing.assert_allclose(run.column(0), streams[0].truth(t), rtol=0, atol=1e-12)


def test_emit_due_notices_a_stall_without_new_messages(mf: ModuleType) -> None:
    streams = two_streams(end_s=1.0)
    run = make_run(mf, rate_hz=100.0, horizon_s=0.3)
    run.feed(streams)
    newest = max(int(s.mapped_ns[-1]) for s in streams)
    emitted = len(run.times)
    run.aligner.emit_due(newest + 200 * MS)  # not yet a stall: within the horizon
    assert len(run.times) == emitted
    run.aligner.emit_due(newest + 1 * S)
    t = np.array(run.times)
    assert len(t) > emitted and t[-1] >= newest + 600 * MS
    assert np.isnan(run.column(0)[t > newest + 50 * MS]).all()


def test_batches_emit_the_same_samples_later(mf: ModuleType) -> None:
    prompt, batched = make_run(mf, rate_hz=100.0), make_run(mf, rate_hz=100.0, batch_s=0.1)
    counts = []

    def count_when_fed(run: Run) -> None:
        sizes = []
        run.aligner.registerCallback(lambda t, v: sizes.append(run.now[0]))
        run.feed(two_streams())
        counts.append(len(set(sizes)))  # receive times at which samples went out

    count_when_fed(prompt)
    count_when_fed(batched)
    n = len(batched.times)
    assert n > 200 and prompt.times[:n] == batched.times
    for i in range(2):
        np.testing.assert_array_equal(prompt.column(i)[:n], batched.column(i))
    assert counts[1] * 4 < counts[0]


def test_a_clock_reset_is_counted_and_the_new_clock_learned(mf: ModuleType) -> None:
    streams = two_streams()
    joints = streams[0]
    restart_ns = 1001 * S + 500 * MS  # the joints' publisher restarts its clock 100 s back

    def restarted(stamp_ns: int, q: Any) -> JointState:
        return joint_state(stamp_ns - 100 * S if stamp_ns - joints.offset_ns >= restart_ns else stamp_ns, q)

    joints.make = restarted
    run = make_run(mf, rate_hz=100.0)
    run.feed(streams)
    assert run.aligner.clock_resets == 1
    t = np.array(run.times)
    assert (np.diff(t) == 10 * MS).all() and t[-1] > 1002 * S + 500 * MS
    np.testing.assert_allclose(run.column(0), joints.truth(t), rtol=0, atol=1e-12)
    np.testing.assert_allclose(run.column(1), streams[1].truth(t), rtol=0, atol=1e-12)


def test_bad_messages_are_refused_counted_and_logged_once(mf: ModuleType, capfd: pytest.CaptureFixture) -> None:
    streams = two_streams(end_s=1.0)
    bad = [
        (1000 * S + 100 * MS, 0, joint_state(1003 * S, [1.0, 2.0], NAMES)),  # 3 names, 2 positions
        (1000 * S + 101 * MS, 0, joint_state(1003 * S, [1.0, 2.0], ["j0", "j1"])),  # j2 missing
        (1000 * S + 102 * MS, 0, joint_state(0, [1.0, 2.0, 3.0])),
        (1000 * S + 103 * MS, 1, String(data="not a wrench")),
        (1000 * S + 104 * MS, 1, String(data="nor this")),
    ]
    run = make_run(mf, rate_hz=100.0)
    run.feed(streams, extra=bad)
    assert run.aligner.problems.by_reason() == {
        "length_mismatch": 1, "missing_joint": 1, "zero_stamp": 1, "unreadable": 2}
    clean = make_run(mf, rate_hz=100.0)
    clean.feed(two_streams(end_s=1.0))
    assert run.times == clean.times
    np.testing.assert_array_equal(run.column(0), clean.column(0))
    logged = capfd.readouterr().err
    assert logged.count("refusing messages on") == 4
    assert "unreadable" in logged and "zero_stamp" in logged


def test_on_one_clock_a_stamp_far_ahead_of_its_receive_time_is_refused(mf: ModuleType) -> None:
    streams = two_streams(end_s=1.0)
    for s in streams:
        s.offset_ns = 0  # stamps on the receiver's clock
    corrupt = (1000 * S + 500 * MS, 0, joint_state(10**18, [1.0, 2.0, 3.0]))
    run = make_run(mf, rate_hz=100.0, map_clocks=False)
    run.feed(streams, extra=[corrupt])
    assert run.aligner.problems.by_reason() == {"future_stamp": 1}
    t = np.array(run.times)
    assert (np.diff(t) == 10 * MS).all() and t[-1] < 1001 * S
    joints = streams[0]  # stamps taken as they are: each sample sits at its stamp
    expected = np.column_stack([np.interp(t, joints.wall_ns, column) for column in joints.values.T])
    np.testing.assert_allclose(run.column(0), expected, rtol=0, atol=1e-12)


def test_an_input_of_a_type_with_no_default_needs_an_extractor(mf: ModuleType) -> None:
    run = make_run(mf, n_inputs=1, rate_hz=100.0)
    run.now[0] = 5 * S
    run.inputs[0].signalMessage(String(data="x"))
    assert run.aligner.problems.by_reason() == {"no_extractor": 1}
    with pytest.raises(MessageRefused, match="no default for String: pass extractors"):
        aligner_module.extractor_for(String())


def test_pose_rows_are_position_then_orientation_wxyz() -> None:
    msg = PoseStamped()
    msg.header.stamp = stamp(12 * S + 5)
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = 1.0, 2.0, 3.0
    o = msg.pose.orientation
    o.w, o.x, o.y, o.z = 0.5, 0.1, 0.2, 0.3
    assert pose_values(msg) == (12 * S + 5, (1.0, 2.0, 3.0, 0.5, 0.1, 0.2, 0.3))


def test_joint_positions_refuse_names_that_cannot_be_read() -> None:
    with pytest.raises(MessageRefused, match="duplicate_names: j0, j0"):
        JointPositions()(joint_state(S, [1.0, 2.0], ["j0", "j0"]))
    with pytest.raises(MessageRefused, match="empty: no joint names"):
        JointPositions()(joint_state(S, [], []))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"rate_hz": 0.0}, "rate_hz must be finite and > 0, got 0.0"),
    ({"rate_hz": 1e9}, "rate_hz must be <= 1e\\+06, got 1000000000.0"),
    ({"rate_hz": 10.0, "max_gap_s": float("nan")}, "max_gap_s must be finite and > 0"),
    ({"rate_hz": 10.0, "horizon_s": -1.0}, "horizon_s must be finite and > 0"),
    ({"rate_hz": 10.0, "batch_s": -0.1}, "batch_s must be finite and >= 0"),
    ({"rate_hz": 10.0, "extractors": [None]}, "1 extractors for 2 inputs"),
    ({"rate_hz": 10.0, "names": ["a", "b", "c"]}, "3 names for 2 inputs"),
])
def test_bad_settings_are_refused_naming_the_parameter(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        aligner_module.TimeAligner([fallback.SimpleFilter(), fallback.SimpleFilter()], **kwargs)


# ---------------------------------------------------------------------------- over DDS
SLOPE = 0.5  # units per second of the published ramps
CLOCK_OFFSETS_NS = (int(3.7 * S), int(-2.5 * S))


@pytest.fixture
def ros_context():
    context = rclpy.Context()
    rclpy.init(context=context)
    executor = SingleThreadedExecutor(context=context)
    yield context, executor
    executor.shutdown()
    rclpy.shutdown(context=context)


class Publishers:
    """Joints at 200 Hz from a clock 3.7 s ahead, a wrench at 60 Hz from one 2.5 s behind:
    each message carries ramps of the wall time at which it was published."""

    def __init__(self, context: Any, prefix: str) -> None:
        self.node = rclpy.create_node("aligner_test_publishers", context=context)
        self.t0_ns = time.time_ns()
        self.joints = self.node.create_publisher(JointState, f"{prefix}/joint_states", 50)
        self.wrench = self.node.create_publisher(WrenchStamped, f"{prefix}/wrench", 50)
        self.node.create_timer(0.005, self.publish_joints)
        self.node.create_timer(1 / 60, self.publish_wrench)

    def ramp(self, wall_ns: int) -> float:
        return SLOPE * (wall_ns - self.t0_ns) * 1e-9

    def publish_joints(self) -> None:
        wall = time.time_ns()
        self.joints.publish(joint_state(wall + CLOCK_OFFSETS_NS[0], [self.ramp(wall), -self.ramp(wall), 1.0]))

    def publish_wrench(self) -> None:
        wall = time.time_ns()
        self.wrench.publish(wrench(wall + CLOCK_OFFSETS_NS[1], [2 * self.ramp(wall), 0, 0, 0, 0, 0]))


@pytest.mark.ros
def test_over_dds_samples_from_two_clocks_line_up(mf: ModuleType, ros_context: Any) -> None:
    context, executor = ros_context
    prefix = f"aligner_test_{'up' if mf is upstream else 'fb'}"
    node = rclpy.create_node("aligner_test_listener", context=context)
    inputs = [mf.Subscriber(node, JointState, f"{prefix}/joint_states", qos_profile=50),
              mf.Subscriber(node, WrenchStamped, f"{prefix}/wrench", qos_profile=50)]
    aligner = aligner_on(mf).TimeAligner(inputs, rate_hz=50.0, clock=node)
    out: list[tuple[int, list[np.ndarray]]] = []
    aligner.registerCallback(lambda t, values: out.append((t, values)))
    publishers = Publishers(context, prefix)
    executor.add_node(node)
    executor.add_node(publishers.node)
    deadline = time.monotonic() + 30.0
    while len(out) < 100 and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.05)
    for n in (node, publishers.node):
        executor.remove_node(n)
        n.destroy_node()
    assert len(out) >= 100, f"only {len(out)} samples in 30 s"
    t = np.array([sample_t for sample_t, _ in out])
    assert (np.diff(t) == 20 * MS).all()
    joints = np.array([values[0] for _, values in out])
    force_x = np.array([values[1][0] for _, values in out])
    # The receiver's clock is the system clock, the publishers' wall time: the truth at
    # grid time t is the ramp at t, up to the smallest delivery delay (the clock maps'
    # envelope), a few ms even on a loaded machine.
    settled = t >= t[0] + 250 * MS
    truth = SLOPE * (t - publishers.t0_ns) * 1e-9
    known = settled & np.isfinite(joints[:, 0]) & np.isfinite(force_x)
    assert known.sum() >= 0.9 * settled.sum()
    tolerance = SLOPE * 0.015
    np.testing.assert_allclose(joints[known, 0], truth[known], rtol=0, atol=tolerance)
    np.testing.assert_allclose(joints[known, 1], -truth[known], rtol=0, atol=tolerance)
    np.testing.assert_allclose(joints[known, 2], 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(force_x[known], 2 * truth[known], rtol=0, atol=2 * tolerance)
    offsets = np.array(aligner.offsets_ns, dtype=float)
    np.testing.assert_allclose(offsets, [-o for o in CLOCK_OFFSETS_NS], rtol=0, atol=15 * MS)
