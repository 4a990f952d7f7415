"""Residuals between aligned sim and real samples: joints by name, poses, wrenches, contact phase.

Every residual is ``real - sim``: what reality did beyond what the simulator predicted.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import transforms3d.quaternions as tq

from sim_real_bridge.errors import AlignmentError, ConfigError

__all__ = [
    "ContactPhaseDetector",
    "JointIndexMap",
    "pose_error",
    "pose_error_batch",
    "wrench_residual",
]


class JointIndexMap:
    """Maps each side's joint-name order onto one common joint list.

    Each side may publish the joints in any order and any subset; joints a message
    lacks come out as NaN and are counted per joint name in :attr:`missing_counts`,
    names outside the common list are ignored and counted in :attr:`extra_counts`.
    Index arrays are cached per distinct name tuple, so a steady stream costs one
    dictionary lookup per message.

    Args:
        joint_names: the common joint list, in output order.

    Raises:
        ConfigError: if the list is empty or has duplicates.
    """

    def __init__(self, joint_names: Sequence[str]) -> None:
        names = tuple(str(n) for n in joint_names)
        if not names:
            raise ConfigError("JointIndexMap needs at least one joint name")
        if len(set(names)) != len(names):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise ConfigError(f"JointIndexMap joint names are duplicated: {dupes}")
        self.joint_names = names
        self._position = {n: i for i, n in enumerate(names)}
        self._cache: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray, tuple[str, ...], tuple[str, ...]]] = {}
        self.missing_counts: dict[str, int] = dict.fromkeys(names, 0)
        self.extra_counts: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.joint_names)

    def _indices(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], tuple[str, ...]]:
        key = tuple(names)
        entry = self._cache.get(key)
        if entry is None:
            if len(set(key)) != len(key):
                raise AlignmentError(f"JointIndexMap got duplicated joint names in one message: {list(key)}")
            src, dst, extra = [], [], []
            for i, name in enumerate(key):
                j = self._position.get(name)
                if j is None:
                    extra.append(name)
                else:
                    src.append(i)
                    dst.append(j)
            present = set(key)
            missing = tuple(n for n in self.joint_names if n not in present)
            entry = (np.array(src, dtype=np.intp), np.array(dst, dtype=np.intp), missing, tuple(extra))
            if len(self._cache) < 64:
                self._cache[key] = entry
        return entry

    def gather(self, names: Sequence[str], values: np.ndarray) -> np.ndarray:
        """Reorder one message's values onto the common joint list.

        Args:
            names: joint names of the message, in its order.
            values: per-joint values, shape (len(names),) or (len(names), k); an
                empty array means the message lacks this field (all NaN, not counted).

        Returns:
            Array of shape (n_common,) or (n_common, k), NaN for missing joints.

        Raises:
            AlignmentError: if values and names disagree in length or names repeat.
        """
        vals = np.asarray(values, dtype=np.float64)
        if vals.size == 0:
            return np.full(len(self.joint_names), np.nan)
        if vals.shape[0] != len(names):
            raise AlignmentError(
                f"JointIndexMap got {vals.shape[0]} values for {len(names)} joint names"
            )
        src, dst, missing, extra = self._indices(names)
        out = np.full((len(self.joint_names),) + vals.shape[1:], np.nan)
        out[dst] = vals[src]
        for name in missing:
            self.missing_counts[name] += 1
        for name in extra:
            self.extra_counts[name] = self.extra_counts.get(name, 0) + 1
        return out

    def residual(
        self,
        sim_names: Sequence[str],
        sim_values: np.ndarray,
        real_names: Sequence[str],
        real_values: np.ndarray,
    ) -> np.ndarray:
        """``real - sim`` per common joint; NaN where either side lacks the joint."""
        return self.gather(real_names, real_values) - self.gather(sim_names, sim_values)


def _unit_quat(q: np.ndarray, what: str) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    if q.shape[-1] != 4:
        raise AlignmentError(f"{what} must have 4 components [w, x, y, z], got shape {q.shape}")
    norm = np.linalg.norm(q, axis=-1, keepdims=True)
    if not np.all(norm > 1e-9):
        raise AlignmentError(f"{what} has a zero-norm quaternion")
    return q / norm


def pose_error(
    p_sim: np.ndarray, q_sim_wxyz: np.ndarray, p_real: np.ndarray, q_real_wxyz: np.ndarray
) -> tuple[np.ndarray, float, float]:
    """Position and orientation error of the real pose with respect to the sim pose.

    Args:
        p_sim: sim position, metres, shape (3,).
        q_sim_wxyz: sim orientation quaternion [w, x, y, z] (normalized here).
        p_real: real position, metres, shape (3,).
        q_real_wxyz: real orientation quaternion [w, x, y, z].

    Returns:
        (position_error_vec_m = p_real - p_sim, its norm in metres, rotation angle in
        radians, in [0, pi], of the relative rotation sim -> real).

    Raises:
        AlignmentError: on a wrong shape or a zero quaternion.
    """
    p_sim = np.asarray(p_sim, dtype=np.float64)
    p_real = np.asarray(p_real, dtype=np.float64)
    if p_sim.shape != (3,) or p_real.shape != (3,):
        raise AlignmentError(f"pose_error positions must have shape (3,), got {p_sim.shape} and {p_real.shape}")
    q_s = _unit_quat(q_sim_wxyz, "pose_error q_sim_wxyz")
    q_r = _unit_quat(q_real_wxyz, "pose_error q_real_wxyz")
    rel = tq.qmult(tq.qconjugate(q_s), q_r)
    # atan2 keeps precision at small angles where acos of w would not; |w| folds q ~ -q.
    angle = 2.0 * math.atan2(float(np.linalg.norm(rel[1:])), abs(float(rel[0])))
    err = p_real - p_sim
    return err, float(np.linalg.norm(err)), angle


def pose_error_batch(
    p_sim: np.ndarray, q_sim_wxyz: np.ndarray, p_real: np.ndarray, q_real_wxyz: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorized :func:`pose_error` over rows: shapes (n, 3) and (n, 4); returns (n,3), (n,), (n,)."""
    p_sim = np.asarray(p_sim, dtype=np.float64)
    p_real = np.asarray(p_real, dtype=np.float64)
    if p_sim.shape != p_real.shape or p_sim.shape[-1:] != (3,):
        raise AlignmentError(f"pose_error_batch positions must both be (n, 3), got {p_sim.shape} and {p_real.shape}")
    q_s = _unit_quat(q_sim_wxyz, "pose_error_batch q_sim_wxyz")
    q_r = _unit_quat(q_real_wxyz, "pose_error_batch q_real_wxyz")
    # w and vector part of conj(q_s) * q_r, written out so it runs over all rows at once.
    w = np.sum(q_s * q_r, axis=-1)
    vec = q_s[..., :1] * q_r[..., 1:] - q_r[..., :1] * q_s[..., 1:] - np.cross(q_s[..., 1:], q_r[..., 1:])
    angle = 2.0 * np.arctan2(np.linalg.norm(vec, axis=-1), np.abs(w))
    err = p_real - p_sim
    return err, np.linalg.norm(err, axis=-1), angle


def wrench_residual(sim_wrench6: np.ndarray, real_wrench6: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Force/torque residual ``real - sim``.

    Args:
        sim_wrench6: [fx, fy, fz, tx, ty, tz] from the sim, newtons and newton-metres.
        real_wrench6: the same from the real robot.

    Returns:
        (residual6, force residual norm in N, torque residual norm in N m).

    Raises:
        AlignmentError: if a wrench does not have 6 components.
    """
    sim = np.asarray(sim_wrench6, dtype=np.float64)
    real = np.asarray(real_wrench6, dtype=np.float64)
    if sim.shape != (6,) or real.shape != (6,):
        raise AlignmentError(f"wrench_residual needs two wrenches of shape (6,), got {sim.shape} and {real.shape}")
    res = real - sim
    return res, math.hypot(res[0], res[1], res[2]), math.hypot(res[3], res[4], res[5])


class ContactPhaseDetector:
    """Contact phase of one side from its force norm, with hysteresis.

    Contact starts when the force norm reaches ``on_threshold_n`` for
    ``min_on_samples`` consecutive samples and ends when it falls below
    ``off_threshold_n`` for ``min_off_samples`` consecutive samples. Non-finite
    input leaves the phase unchanged (and is counted).

    Args:
        on_threshold_n: force norm that starts contact, newtons.
        off_threshold_n: force norm below which contact ends (< on_threshold_n).
        min_on_samples: consecutive samples above ``on_threshold_n`` to enter contact.
        min_off_samples: consecutive samples below ``off_threshold_n`` to leave it.

    Raises:
        ConfigError: if thresholds are not ordered or counts are below 1.
    """

    def __init__(
        self,
        on_threshold_n: float = 5.0,
        off_threshold_n: float = 2.0,
        min_on_samples: int = 1,
        min_off_samples: int = 1,
    ) -> None:
        if not 0.0 <= off_threshold_n < on_threshold_n:
            raise ConfigError(
                f"ContactPhaseDetector needs 0 <= off_threshold_n < on_threshold_n, got "
                f"{off_threshold_n} and {on_threshold_n}"
            )
        if min_on_samples < 1 or min_off_samples < 1:
            raise ConfigError(
                f"ContactPhaseDetector min_on_samples and min_off_samples must be >= 1, got "
                f"{min_on_samples}, {min_off_samples}"
            )
        self.on_threshold_n = float(on_threshold_n)
        self.off_threshold_n = float(off_threshold_n)
        self.min_on_samples = int(min_on_samples)
        self.min_off_samples = int(min_off_samples)
        self.non_finite_count = 0
        self.transitions = 0
        self.reset()

    def reset(self) -> None:
        """Back to no contact."""
        self.in_contact = False
        self.since_ns: int | None = None
        self._streak = 0

    def update(self, stamp_ns: int, force_n: float | np.ndarray) -> bool:
        """Feed one sample (force norm, or a force/wrench vector whose first 3 are force).

        Returns:
            True while in contact.
        """
        if np.ndim(force_n) == 0:
            norm = float(force_n)
        else:
            f = np.asarray(force_n, dtype=np.float64)
            norm = math.hypot(f[0], f[1], f[2])
        if not math.isfinite(norm):
            self.non_finite_count += 1
            return self.in_contact
        if self.in_contact:
            self._streak = self._streak + 1 if norm < self.off_threshold_n else 0
            if self._streak >= self.min_off_samples:
                self.in_contact = False
                self._switch(stamp_ns)
        else:
            self._streak = self._streak + 1 if norm >= self.on_threshold_n else 0
            if self._streak >= self.min_on_samples:
                self.in_contact = True
                self._switch(stamp_ns)
        return self.in_contact

    def _switch(self, stamp_ns: int) -> None:
        self._streak = 0
        self.transitions += 1
        self.since_ns = int(stamp_ns)
