"""Checks of incoming robot messages, as plain values; the reasons name what is wrong.

The nodes run these before anything reaches the analysis. A message that fails a
check is counted by reason, reported in /diagnostics, logged once per (topic,
reason) and left out of the residuals. Non-finite values and stamps that go
backwards are not refused here: they are what the ``sensor`` category is about, so
the engine receives them and flags them as stream pathologies.
"""

from __future__ import annotations

import functools

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim_real_bridge.errors import ConfigError

EMPTY = "empty"
LENGTH_MISMATCH = "length_mismatch"
DUPLICATE_NAMES = "duplicate_names"
UNKNOWN_JOINT = "unknown_joint"
MISSING_JOINT = "missing_joint"
ZERO_STAMP = "zero_stamp"
FUTURE_STAMP = "future_stamp"
FRAME_MISMATCH = "frame_mismatch"
OVERSIZED = "oversized"
NON_FINITE = "non_finite"
STAMP_BACKWARDS = "stamp_backwards"

#: Reasons that refuse a message outright.
REFUSING_REASONS: tuple[str, ...] = (
    EMPTY, LENGTH_MISMATCH, DUPLICATE_NAMES, UNKNOWN_JOINT, MISSING_JOINT,
    ZERO_STAMP, FUTURE_STAMP, FRAME_MISMATCH, OVERSIZED,
)
#: Reasons that are counted but still passed to the engine as sensor evidence.
FLAGGING_REASONS: tuple[str, ...] = (NON_FINITE, STAMP_BACKWARDS)


@dataclass(frozen=True)
class InputLimits:
    """What the nodes accept.

    Attributes:
        max_joints: more joints than this in one message is ``oversized``.
        max_future_s: a stamp further than this ahead of the receive time is
            ``future_stamp`` (only when both are on the same clock).
        expected_joints: joint names the robot has; empty accepts any set of names
            once the first message has fixed it.
    """

    max_joints: int = 64
    max_future_s: float = 5.0
    expected_joints: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_joints < 1:
            raise ConfigError(f"max_joints must be >= 1, got {self.max_joints}")
        if not self.max_future_s > 0:
            raise ConfigError(f"max_future_s must be > 0, got {self.max_future_s}")


def check_stamp(stamp_ns: int, recv_ns: int | None, limits: InputLimits) -> str | None:
    """``zero_stamp`` or ``future_stamp``, or None.

    Args:
        stamp_ns: the message's header stamp.
        recv_ns: receive time on the same clock as the stamp, or None when the
            two clocks differ (a simulator on /clock): then only zero is refused.
        limits: acceptance limits.
    """
    if stamp_ns <= 0:
        return ZERO_STAMP
    if recv_ns is not None and stamp_ns - recv_ns > limits.max_future_s * 1e9:
        return FUTURE_STAMP
    return None


def check_frame(frame_id: str, expected: str) -> str | None:
    """``frame_mismatch`` when an expected frame is configured and differs."""
    if expected and frame_id != expected:
        return FRAME_MISMATCH
    return None


def check_joint_state(
    names: Sequence[str],
    position: Sequence[float],
    velocity: Sequence[float],
    effort: Sequence[float],
    known_names: Sequence[str] | None,
    limits: InputLimits,
) -> str | None:
    """The first refusing reason of a JointState's arrays, or None.

    Velocity and effort may be empty (REP and sensor_msgs allow it); otherwise each
    array must be as long as ``names``. ``known_names`` is the joint set fixed by
    earlier messages (or ``limits.expected_joints``); a message naming a joint
    outside it is ``unknown_joint``, one lacking a joint of it ``missing_joint``.
    """
    n = len(names)
    if n == 0 or len(position) == 0:
        return EMPTY
    if n > limits.max_joints or len(position) > limits.max_joints:
        return OVERSIZED
    if len(position) != n or len(velocity) not in (0, n) or len(effort) not in (0, n):
        return LENGTH_MISMATCH
    reference = tuple(limits.expected_joints) or (tuple(known_names) if known_names else ())
    # A stream's name list rarely changes: its set checks are worked out once per list.
    return _check_names(names if isinstance(names, tuple) else tuple(names), reference)


@functools.lru_cache(maxsize=256)
def _check_names(names: tuple, reference: tuple) -> str | None:
    if len(set(names)) != len(names):
        return DUPLICATE_NAMES
    if reference:
        given = set(names)
        if not given <= set(reference):
            return UNKNOWN_JOINT
        if not set(reference) <= given:
            return MISSING_JOINT
    return None


def has_non_finite(*arrays: Sequence[float]) -> bool:
    """True when any value of any array is NaN or infinite."""
    return any(len(a) and not np.isfinite(np.asarray(a, dtype=float)).all() for a in arrays)
