"""The fast CDR readers agree with rclpy's serializer on every JointState and WrenchStamped."""

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


@pytest.mark.parametrize(
    ("mangle", "match"),
    [
        (lambda b: b"\x00\x00" + b[2:], "not little-endian CDR"),
        (lambda b: b[:-12], "truncated CDR|bad CDR"),
        (lambda b: b[:20] + b"\xff\xff\xff\x7f" + b[24:], "bad CDR"),
        (lambda b: b[:8], "not little-endian CDR"),
    ],
)
def test_joint_state_reader_refuses_malformed_bytes(mangle, match) -> None:
    with pytest.raises(ValueError, match=match):
        cdr.read_joint_state(mangle(_joint_state_bytes()))


def test_wrench_reader_refuses_truncated_bytes() -> None:
    data = serialize_message(WrenchStamped())
    with pytest.raises(ValueError, match="truncated CDR wrench"):
        cdr.read_wrench_stamped(data[:-8])
    assert math.isfinite(cdr.read_wrench_stamped(data).wrench.force.x)
