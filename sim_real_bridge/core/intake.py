"""One robot message in, checked and handed to the engine: the same steps live and in replay.

The live monitor node converts each message to arrays and calls these; offline replay
calls them with the same arrays read from a bag, so both refuse, flag and feed exactly
alike. Each function returns the :class:`Problem` the caller must count and report
(None when the message was clean); the engine's own counters are updated here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim_real_bridge.core import validation
from sim_real_bridge.core.engine import DivergenceEngine


@dataclass(frozen=True)
class IntakeConfig:
    """How messages are checked before the engine sees them (monitor parameters).

    Attributes:
        limits: size and stamp limits.
        stamps_on_node_clock: stamps and receive times share one clock, so a stamp far
            in the future can be refused.
        expected_frames: ``{"wrench": frame, "pose": frame}``; empty accepts any frame.
    """

    limits: validation.InputLimits = field(default_factory=validation.InputLimits)
    stamps_on_node_clock: bool = True
    expected_frames: Mapping[str, str] = field(default_factory=lambda: {"wrench": "", "pose": ""})


@dataclass(frozen=True)
class Problem:
    """Something wrong with one message: its reason, whether it was refused, a detail."""

    reason: str
    refused: bool
    detail: str = ""


def _stamp_problem(config: IntakeConfig, stamp_ns: int, recv_ns: int) -> Problem | None:
    reason = validation.check_stamp(stamp_ns, recv_ns if config.stamps_on_node_clock else None, config.limits)
    return Problem(reason, True, f"stamp {stamp_ns} ns") if reason else None


def _refuse(engine: DivergenceEngine, side: str, stream: str, problem: Problem) -> Problem:
    engine.on_rejected(side, stream, problem.reason)
    return problem


def feed_joint_state(
    engine: DivergenceEngine,
    config: IntakeConfig,
    side: str,
    stamp_ns: int,
    recv_ns: int,
    names: Sequence[str],
    q_rad: Any,
    qd_rad_s: Any,
    effort: Any,
) -> Problem | None:
    """Check one joint_states message (arrays of shape (n,), NaN where absent) and feed it."""
    problem = _stamp_problem(config, stamp_ns, recv_ns)
    if problem:
        return _refuse(engine, side, "joint_states", problem)
    reason = validation.check_joint_state(names, q_rad, qd_rad_s, effort, engine.joint_names, config.limits)
    if reason:
        return _refuse(engine, side, "joint_states", Problem(reason, True))
    flagged = None
    if validation.has_non_finite(q_rad, qd_rad_s, effort):
        # An all-NaN velocity or effort array is one the robot did not publish (JointState
        # allows empty ones); only values that were sent can be non-finite.
        sent = [a for a in (qd_rad_s, effort) if not np.isnan(np.asarray(a, dtype=float)).all()]
        flagged = Problem(validation.NON_FINITE, False) if validation.has_non_finite(q_rad, *sent) else None
    engine.on_joint_state(side, stamp_ns, recv_ns, names, q_rad, qd_rad_s, effort)
    return flagged


def feed_wrench(
    engine: DivergenceEngine,
    config: IntakeConfig,
    side: str,
    stamp_ns: int,
    recv_ns: int,
    frame_id: str,
    force_n: Any,
    torque_nm: Any,
) -> Problem | None:
    """Check one wrench message (force_n, torque_nm of shape (3,)) and feed it."""
    problem = _stamp_problem(config, stamp_ns, recv_ns)
    if problem:
        return _refuse(engine, side, "wrench", problem)
    if validation.check_frame(frame_id, config.expected_frames.get("wrench", "")):
        return _refuse(engine, side, "wrench", Problem(validation.FRAME_MISMATCH, True, f"frame {frame_id!r}"))
    flagged = Problem(validation.NON_FINITE, False) if validation.has_non_finite(force_n, torque_nm) else None
    engine.on_wrench(side, stamp_ns, recv_ns, force_n, torque_nm)
    return flagged


def feed_pose(
    engine: DivergenceEngine,
    config: IntakeConfig,
    side: str,
    stream: str,
    stamp_ns: int,
    recv_ns: int,
    frame_id: str,
    position_m: Any,
    orientation_wxyz: Any,
) -> Problem | None:
    """Check one ``ee_pose`` or ``object_pose`` message and feed it; non-finite poses are refused."""
    problem = _stamp_problem(config, stamp_ns, recv_ns)
    if problem:
        return _refuse(engine, side, stream, problem)
    if validation.check_frame(frame_id, config.expected_frames.get("pose", "")):
        return _refuse(engine, side, stream, Problem(validation.FRAME_MISMATCH, True, f"frame {frame_id!r}"))
    if validation.has_non_finite(position_m, orientation_wxyz):
        return _refuse(engine, side, stream, Problem(validation.NON_FINITE, True))
    engine.on_pose(side, "ee" if stream == "ee_pose" else "object", stamp_ns, recv_ns, position_m, orientation_wxyz)
    return None


def feed_command(
    engine: DivergenceEngine, side: str, start_ns: int, recv_ns: int, joint_names: Sequence[str], points: Sequence[Any]
) -> None:
    """A mirrored command: only the sim side's copy starts the run clock (start_ns 0 = on receipt)."""
    if side == "sim":
        engine.on_command(start_ns or recv_ns, recv_ns, joint_names, points)
