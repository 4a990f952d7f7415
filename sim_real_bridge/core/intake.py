"""Checks of incoming rows before the analysis, on whole columns (one message is one row).

The live monitor and replay hand the engine the same arrays, so both refuse and flag
alike. Refused rows never reach the analysis; flagged rows (non-finite values) do,
since they are what the ``sensor`` category is about. Every row refused or flagged is
counted by reason (:mod:`sim_real_bridge.core.validation` names the reasons).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from sim_real_bridge.core import validation


@dataclass(frozen=True)
class IntakeConfig:
    """How rows are checked (monitor parameters).

    Attributes:
        limits: size and stamp limits.
        stamps_on_node_clock: stamps and receive times share one clock, so a stamp far
            in the future can be refused.
        expected_frames: ``{"wrench": frame, "pose": frame}``; empty accepts any frame.
    """

    limits: validation.InputLimits = field(default_factory=validation.InputLimits)
    stamps_on_node_clock: bool = True
    expected_frames: Mapping[str, str] = field(default_factory=lambda: {"wrench": "", "pose": ""})


@dataclass
class Checked:
    """The verdict on a batch of rows of one stream.

    Attributes:
        keep: (m,) rows that go on to the analysis.
        reasons: (m,) why each row was refused or flagged ('' when clean).
    """

    keep: np.ndarray
    reasons: np.ndarray

    def counts(self) -> dict[str, int]:
        """Rows per reason (refused and flagged)."""
        named = self.reasons[self.reasons != ""]
        values, counts = np.unique(named, return_counts=True) if named.size else ((), ())
        return {str(v): int(c) for v, c in zip(values, counts, strict=True)}


def check_rows(config: IntakeConfig, stream: str, stamp_ns: np.ndarray, recv_ns: np.ndarray,
               values: np.ndarray, frame_ids: Sequence[str] | str = "", names_reason: str | None = None
               ) -> Checked:
    """Check rows of one stream.

    Args:
        config: intake parameters.
        stream: "joint_states", "wrench", "ee_pose" or "object_pose".
        stamp_ns, recv_ns: (m,) stamps and receive times.
        values: (m, w) the numeric fields (NaN where a message sent none).
        frame_ids: one frame per row, or one for all.
        names_reason: a joint_states batch's joint-name problem (refuses every row).
    """
    m = len(stamp_ns)
    reasons = np.full(m, "", dtype=object)
    if names_reason:
        reasons[:] = names_reason
        return Checked(np.zeros(m, dtype=bool), reasons)
    expected = config.expected_frames.get("pose" if stream.endswith("_pose") else stream, "")
    if expected and stream != "joint_states":
        frames = np.array([frame_ids] * m if isinstance(frame_ids, str) else list(frame_ids), dtype=object)
        reasons[frames != expected] = validation.FRAME_MISMATCH
    if config.stamps_on_node_clock:
        reasons[stamp_ns - recv_ns > config.limits.max_future_s * 1e9] = validation.FUTURE_STAMP
    reasons[stamp_ns <= 0] = validation.ZERO_STAMP
    refused = reasons != ""
    with np.errstate(invalid="ignore", over="ignore"):
        bad = ~np.isfinite(values).all(axis=1) if values.size else np.zeros(m, dtype=bool)
    bad &= ~refused
    if stream.endswith("_pose"):
        refused |= bad  # a pose is only ever drawn, never judged as a sensor: refuse it
    reasons[bad] = validation.NON_FINITE
    return Checked(~refused, reasons)


def joint_order(names: tuple[str, ...], layout: tuple[str, ...] | None, limits: validation.InputLimits
                ) -> tuple[np.ndarray | None, str | None]:
    """Columns of a joint_states batch in the side's layout order, or the refusal reason.

    Args:
        names: the batch's joint names.
        layout: the side's joint names fixed by its first batch (None: this one fixes it).
        limits: size limits and expected joints.
    """
    if not names:
        return None, validation.EMPTY
    if len(names) > limits.max_joints:
        return None, validation.OVERSIZED
    if len(set(names)) != len(names):
        return None, validation.DUPLICATE_NAMES
    reference = tuple(limits.expected_joints) or layout
    if reference and not set(reference) <= set(names):
        return None, validation.MISSING_JOINT
    if limits.expected_joints and not set(names) <= set(limits.expected_joints):
        return None, validation.UNKNOWN_JOINT
    target = layout or names
    index = {name: i for i, name in enumerate(names)}
    return np.array([index[name] for name in target], dtype=np.intp), None
