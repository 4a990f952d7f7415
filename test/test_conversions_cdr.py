"""The fast CDR readers agree with rclpy on every JointState and WrenchStamped, and on bytes after them."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("rclpy", reason="rclpy is part of the make test environment")
from geometry_msgs.msg import WrenchStamped  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from sim_real_bridge.conversions import cdr  # noqa: E402
from sim_real_bridge.conversions.robot_msgs import joint_state_to_arrays, wrench_to_arrays  # noqa: E402

floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
text = st.text(max_size=12)
stamps = st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(0, 2**32 - 1))


def _same(a, b) -> bool:
    return np.array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float), equal_nan=True)


@settings(max_examples=300, deadline=None)
@given(stamp=stamps, frame=text, names=st.lists(text, max_size=9), position=st.lists(floats, max_size=9),
       velocity=st.lists(floats, max_size=9), effort=st.lists(floats, max_size=9))
def test_joint_state_reader_matches_rclpy(stamp, frame, names, position, velocity, effort) -> None:
    msg = JointState(name=names, position=position, velocity=velocity, effort=effort)
    msg.header.stamp.sec, msg.header.stamp.nanosec = stamp
    msg.header.frame_id = frame
    data = serialize_message(msg)
    fast, msg = cdr.read_joint_state(data), deserialize_message(data, JointState)
    assert (fast.header.stamp.sec, fast.header.stamp.nanosec) == stamp
    assert fast.header.frame_id == msg.header.frame_id and list(fast.name) == list(msg.name)
    for got, want in ((fast.position, position), (fast.velocity, velocity), (fast.effort, effort)):
        assert _same(got, want)
    ours, theirs = joint_state_to_arrays(fast), joint_state_to_arrays(msg)
    assert ours[:2] == theirs[:2] and all(_same(a, b) for a, b in zip(ours[2:], theirs[2:]))


@settings(max_examples=200, deadline=None)
@given(stamp=stamps, frame=text, values=st.lists(floats, min_size=6, max_size=6))
def test_wrench_reader_matches_rclpy(stamp, frame, values) -> None:
    msg = WrenchStamped()
    msg.header.stamp.sec, msg.header.stamp.nanosec = stamp
    msg.header.frame_id = frame
    f, t = msg.wrench.force, msg.wrench.torque
    f.x, f.y, f.z, t.x, t.y, t.z = values
    data = serialize_message(msg)
    ours, theirs = wrench_to_arrays(cdr.read_wrench_stamped(data)), wrench_to_arrays(deserialize_message(data, WrenchStamped))
    assert ours[:2] == theirs[:2] and _same(ours[2], theirs[2]) and _same(ours[3], theirs[3])


def _joint_state_bytes() -> bytes:
    msg = JointState(name=["a", "b"], position=[1.0, 2.0])
    msg.header.stamp.sec = 3
    return serialize_message(msg)


def _wrench_bytes() -> bytes:
    msg = WrenchStamped()
    msg.header.frame_id = "tool0"
    msg.wrench.force.x, msg.wrench.torque.z = 1.5, -2.5
    return serialize_message(msg)


@pytest.mark.parametrize("extra", [b"\x00", b"\xab" * 3, b"\x00" * 8, bytes(range(64))])
def test_readers_ignore_bytes_after_the_message_as_rclpy_does(extra: bytes) -> None:
    joints, wrench = _joint_state_bytes(), _wrench_bytes()
    for data, read, msg_type, to_arrays in ((joints, cdr.read_joint_state, JointState, joint_state_to_arrays),
                                            (wrench, cdr.read_wrench_stamped, WrenchStamped, wrench_to_arrays)):
        want = to_arrays(deserialize_message(data, msg_type))
        for got in (to_arrays(read(data + extra)), to_arrays(deserialize_message(data + extra, msg_type))):
            assert got[:2] == want[:2] and all(_same(a, b) for a, b in zip(got[2:], want[2:], strict=True))


@pytest.mark.parametrize(
    ("mangle", "match"),
    [
        (lambda b: b"\x00\x00" + b[2:], "not little-endian CDR"),
        (lambda b: b[:3], "not little-endian CDR"),
        (lambda b: b[:-12], "truncated CDR message"),
        (lambda b: b[:8], "truncated CDR message"),
        (lambda b: b[:20] + b"\xff\xff\xff\x7f" + b[24:], "bad CDR string count"),
        (lambda b: b[:24] + b"\xff\xff\xff\x7f" + b[28:], "truncated CDR message"),
        (lambda b: b[:29] + b"x" + b[30:], "^bad CDR string$"),
    ],
)
def test_joint_state_reader_refuses_malformed_bytes(mangle, match) -> None:
    with pytest.raises(ValueError, match=match):
        cdr.read_joint_state(mangle(_joint_state_bytes()))


def test_wrench_reader_refuses_truncated_bytes() -> None:
    data = _wrench_bytes()
    with pytest.raises(ValueError, match="truncated CDR message"):
        cdr.read_wrench_stamped(data[:-8])
    assert cdr.read_wrench_stamped(data).wrench.torque.z == -2.5


def test_time_message_is_rclpy_time() -> None:
    from builtin_interfaces.msg import Time

    for stamp_ns in (0, 1_700_000_000_123_456_789, 2**31 * 1_000_000_000 - 1):
        msg = deserialize_message(cdr.time_message(stamp_ns), Time)
        assert msg.sec * 1_000_000_000 + msg.nanosec == stamp_ns
