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


#: Reasons by code (0: clean), for whole columns of small integers instead of strings.
REASONS: tuple[str, ...] = ("", validation.FRAME_MISMATCH, validation.FUTURE_STAMP, validation.ZERO_STAMP,
                            validation.NON_FINITE, validation.EMPTY, validation.OVERSIZED,
                            validation.DUPLICATE_NAMES, validation.MISSING_JOINT, validation.UNKNOWN_JOINT,
                            validation.LENGTH_MISMATCH)
_CODE = {reason: code for code, reason in enumerate(REASONS)}


@dataclass
class Checked:
    """The verdict on a batch of rows of one stream.

    Attributes:
        keep: (m,) rows that go on to the analysis.
        codes: (m,) why each row was refused or flagged, as an index into REASONS (0: clean).
    """

    keep: np.ndarray
    codes: np.ndarray

    def counts(self) -> dict[str, int]:
        """Rows per reason (refused and flagged)."""
        counts = np.bincount(self.codes, minlength=len(REASONS))
        return {REASONS[code]: int(counts[code]) for code in np.flatnonzero(counts[1:]) + 1}


def check_rows(config: IntakeConfig, stream: str, stamp_ns: np.ndarray, recv_ns: np.ndarray,
               nonfinite: np.ndarray, frame_ids: Sequence[str] | str = "", names_reason: str | None = None
               ) -> Checked:
    """Check rows of one stream.

    Args:
        config: intake parameters.
        stream: "joint_states", "wrench", "ee_pose" or "object_pose".
        stamp_ns, recv_ns: (m,) stamps and receive times.
        nonfinite: (m,) rows holding a NaN or infinite value the sender sent.
        frame_ids: one frame per row, or one for all.
        names_reason: a joint_states batch's joint-name problem (refuses every row).
    """
    m = len(stamp_ns)
    codes = np.zeros(m, dtype=np.uint8)
    if names_reason:
        codes[:] = _CODE[names_reason]
        return Checked(np.zeros(m, dtype=bool), codes)
    expected = config.expected_frames.get("pose" if stream.endswith("_pose") else stream, "")
    if expected and stream != "joint_states":
        if isinstance(frame_ids, str):
            codes[:] = _CODE[validation.FRAME_MISMATCH] if frame_ids != expected else 0
        else:
            codes[np.asarray(frame_ids, dtype=object) != expected] = _CODE[validation.FRAME_MISMATCH]
    if config.stamps_on_node_clock:
        codes[stamp_ns - recv_ns > config.limits.max_future_s * 1e9] = _CODE[validation.FUTURE_STAMP]
    codes[stamp_ns <= 0] = _CODE[validation.ZERO_STAMP]
    refused = codes != 0
    flagged = nonfinite & ~refused
    codes[flagged] = _CODE[validation.NON_FINITE]
    return Checked(~refused, codes)


def nonfinite_rows(values: np.ndarray, joint_blocks: bool = False) -> np.ndarray:
    """(m,) rows with a non-finite value. With ``joint_blocks`` (rows q, qd, effort), a
    velocity or effort block all NaN was not sent (JointState allows empty arrays) and
    does not count."""
    finite = np.isfinite(values)
    if not joint_blocks:
        return ~finite.all(axis=1)
    n = values.shape[1] // 3
    bad = ~finite[:, :n].all(axis=1)
    for block in (slice(n, 2 * n), slice(2 * n, 3 * n)):
        sent = ~np.isnan(values[:, block]).all(axis=1)
        bad |= sent & ~finite[:, block].all(axis=1)
    return bad


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
    # A stream names the joints its first message named (or the expected ones), no more, no fewer.
    if reference and not set(names) <= set(reference):
        return None, validation.UNKNOWN_JOINT
    if reference and not set(reference) <= set(names):
        return None, validation.MISSING_JOINT
    target = layout or names
    index = {name: i for i, name in enumerate(names)}
    return np.array([index[name] for name in target], dtype=np.intp), None
