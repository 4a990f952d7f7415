"""Run statistics: residual magnitudes over the run and the per-joint calibration.

Fed one analysed batch at a time (whole columns), read at the end of a run (the
``residuals`` and ``calibration`` blocks of summary.json) and by the live summary
(the rms figures).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from sim_real_bridge.core.calibration import fit_joint_calibration
from sim_real_bridge.core.read_stage import Grid

#: Calibration rows kept (the first of the run: a joint's offset and delay do not wander).
CALIBRATION_ROWS = 200_000


class RunStatistics:
    """Residual statistics of a run.

    Args:
        max_rows: analysis rows kept for the max/p95 figures (rms figures cover the whole run).
    """

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._q_abs: deque[np.ndarray] = deque()
        self._q_rows = 0
        self._ee_sq: deque[np.ndarray] = deque()
        self._force: deque[tuple[np.ndarray, np.ndarray]] = deque()  # (norms, in contact)
        self.sums = {"q_sq": 0.0, "q_n": 0, "ee_sq": 0.0, "ee_n": 0, "f_sq": 0.0, "f_n": 0}
        self._calibration: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._calibration_rows = 0

    def add(self, grid: Grid, sim_contact: np.ndarray, free: np.ndarray) -> None:
        """Take an analysed batch.

        Args:
            grid: its samples.
            sim_contact: (K,) the sim in contact at each row.
            free: (K,) free space on both sides (no recent sim contact, no real contact).
        """
        valid = grid.joints_valid
        q_res = grid.q_res_rad
        known = np.isfinite(q_res).any(axis=1)  # a joint unknown at a row leaves the others' figures
        if known.any():
            rows = q_res[known]
            self._q_abs.append(np.abs(rows))
            self._q_rows += len(rows)
            finite = np.isfinite(rows)
            self.sums["q_sq"] += float(np.sum(np.where(finite, rows * rows, 0.0)))
            self.sums["q_n"] += int(finite.sum())
        if valid.any() and self._calibration_rows < CALIBRATION_ROWS:
            self._calibration.append((grid.t_ns[valid], grid.sim_q_rad[valid], grid.real_q_rad[valid], free[valid]))
            self._calibration_rows += int(valid.sum())
        ee = np.linalg.norm(grid.ee_error_m, axis=1)
        ee = ee[np.isfinite(ee)]
        if ee.size:
            self._ee_sq.append(ee * ee)
            self.sums["ee_sq"] += float(np.sum(ee * ee))
            self.sums["ee_n"] += ee.size
        wrench = grid.wrench_valid
        if wrench.any():
            force = np.linalg.norm(grid.force_res_n[wrench], axis=1)
            self._force.append((force, sim_contact[wrench]))
            self.sums["f_sq"] += float(np.sum(force * force))
            self.sums["f_n"] += force.size
        # Bounded memory: the oldest batches' samples leave the max/p95 figures.
        while self._q_rows > self.max_rows and len(self._q_abs) > 1:
            self._q_rows -= len(self._q_abs.popleft())
            for older in (self._ee_sq, self._force):
                if len(older) > 1:
                    older.popleft()

    def rms(self, key: str) -> float:
        """Run rms of "q" (rad), "ee" (m) or "f" (N); 0 before any sample."""
        n = self.sums[f"{key}_n"]
        return math.sqrt(self.sums[f"{key}_sq"] / n) if n else 0.0

    def residuals(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The ``residuals`` block of summary.json."""
        out: dict[str, Any] = {"joints": {}}
        if self._q_abs:
            q_abs = np.concatenate(list(self._q_abs))
            for i, name in enumerate(names):
                col = q_abs[:, i][np.isfinite(q_abs[:, i])]
                if col.size:
                    out["joints"][name] = {"rms_rad": float(np.sqrt(np.mean(col ** 2))), "max_rad": float(np.max(col)),
                                           "p95_rad": float(np.percentile(col, 95))}
        force = np.concatenate([f for f, _ in self._force]) if self._force else np.zeros(0)
        contact = np.concatenate([c for _, c in self._force]) if self._force else np.zeros(0, dtype=bool)
        out["wrench"] = {"free": _stats(force[~contact]), "contact": _stats(force[contact])}
        ee_sq = np.concatenate(list(self._ee_sq)) if self._ee_sq else np.zeros(0)
        out["ee_position_rms_m"] = float(np.sqrt(np.mean(ee_sq))) if ee_sq.size else None
        return out

    def calibration(self, names: tuple[str, ...], max_delay_ns: int, delay_step_ns: int) -> list[dict[str, Any]]:
        """Per-joint delay, gain, offset and rms after the fit (real on sim, free-space rows)."""
        if self._calibration_rows < 10:
            return []
        t, sim, real, free = (np.concatenate(part) for part in zip(*self._calibration, strict=True))
        keep = np.concatenate(([True], np.diff(t) > 0))
        fits = fit_joint_calibration(t[keep], sim[keep], real[keep], free[keep], max_delay_ns,
                                     joint_names=names, delay_step_ns=delay_step_ns)
        # Joints without enough free-space samples get no row (keeps summary.json strict JSON).
        return [{"joint": c.name, "delay_s": float(c.delay_s), "gain": float(c.gain), "offset_rad": float(c.offset_rad),
                 "rms_before_rad": float(c.rms_before_rad), "residual_rms_rad": float(c.rms_after_rad),
                 "samples": int(c.n_samples)}
                for c in fits if all(np.isfinite([c.delay_s, c.gain, c.offset_rad, c.rms_before_rad, c.rms_after_rad]))]


def _stats(values: np.ndarray) -> dict[str, Any]:
    if not values.size:
        return {"samples": 0, "rms_n": None, "max_n": None, "p95_n": None}
    return {"samples": int(values.size), "rms_n": float(np.sqrt(np.mean(values ** 2))),
            "max_n": float(np.max(values)), "p95_n": float(np.percentile(values, 95))}
