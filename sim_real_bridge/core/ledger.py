"""Residual ledger: what share of the residual each category accounts for.

Each analysis tick contributes its normalized residual energy (for example the sum of
squared joint residuals over a scale plus squared force residuals over a scale) to the
category active at that tick (the top-scoring one), or to "unexplained" when none is
active. Shares are reported over the whole run and over the last ``window_s`` seconds.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

from sim_real_bridge.errors import ConfigError

UNEXPLAINED = "unexplained"


@dataclass
class CategoryShareRecord:
    """One ledger row."""

    category: str
    share_run: float
    share_window: float
    event_count: int


def residual_energy(
    q_residual_rad: np.ndarray,
    force_residual_n: np.ndarray,
    q_scale_rad: float = 0.01,
    force_scale_n: float = 2.0,
) -> np.ndarray:
    """Normalized residual energy of each row: the mean over its known joints of
    (q / q_scale)^2, plus (F / F_scale)^2; a NaN joint or force is unknown (adds nothing).

    Args:
        q_residual_rad: (K, J) joint position residuals.
        force_residual_n: (K,) force residual norms.
    """
    if q_scale_rad <= 0 or force_scale_n <= 0:
        raise ConfigError(f"scales must be > 0, got q_scale_rad={q_scale_rad}, force_scale_n={force_scale_n}")
    q = np.asarray(q_residual_rad, dtype=float) / q_scale_rad
    known = np.isfinite(q)
    count = known.sum(axis=1)
    energy = np.where(known, q * q, 0.0).sum(axis=1) / np.maximum(count, 1)
    force = np.asarray(force_residual_n, dtype=float) / force_scale_n
    return energy + np.where(np.isfinite(force), force * force, 0.0)


class ResidualLedger:
    """Accumulates residual energy by category over the run and a sliding window.

    Args:
        categories: the categories reported (in this order), besides "unexplained".
        window_s: length of the sliding window.
    """

    def __init__(self, categories: tuple[str, ...], window_s: float = 10.0) -> None:
        if not window_s > 0:
            raise ConfigError(f"ledger window_s must be > 0, got {window_s}")
        self.categories = tuple(categories)
        self.window_s = window_s
        self._window_ns = int(window_s * 1e9)
        self._keys = frozenset(self.categories) | {UNEXPLAINED}
        self._run: Counter = Counter()
        self._window: deque[tuple[int, str, float]] = deque()
        self._window_sum: Counter = Counter()
        self.event_counts: Counter = Counter()

    def add(self, t_ns: int, category: str | None, energy: float) -> None:
        """Book one tick's energy under category (None or "none" = unexplained)."""
        if not math.isfinite(energy) or energy < 0:
            return
        key = UNEXPLAINED if category is None or category == "none" else category
        if key not in self._keys:
            raise ConfigError(f"unknown ledger category {key!r}")
        self._run[key] += energy
        window = self._window
        window.append((t_ns, key, energy))
        self._window_sum[key] += energy
        horizon = t_ns - self._window_ns
        while window[0][0] < horizon:  # (never empties: the entry just added is not older)
            _, k, e = window.popleft()
            self._window_sum[k] -= e

    def count_event(self, category: str) -> None:
        """Count one opened event of category."""
        self.event_counts[category] += 1

    def move_event(self, source: str, target: str) -> None:
        """Count an event of source as one of target (it was handed over)."""
        self.event_counts[source] -= 1
        self.event_counts[target] += 1

    @staticmethod
    def _shares(sums: Counter, keys: tuple[str, ...]) -> dict[str, float]:
        total = sum(max(0.0, sums[k]) for k in keys)
        if total <= 0:
            return {k: 0.0 for k in keys}
        return {k: max(0.0, sums[k]) / total for k in keys}

    def rows(self) -> tuple[list[CategoryShareRecord], float, float]:
        """Return (rows per category, unexplained share over run, over window)."""
        keys = self.categories + (UNEXPLAINED,)
        run = self._shares(self._run, keys)
        win = self._shares(self._window_sum, keys)
        rows = [CategoryShareRecord(c, run[c], win[c], int(self.event_counts[c])) for c in self.categories]
        return rows, run[UNEXPLAINED], win[UNEXPLAINED]

    def as_dict(self) -> dict:
        """Ledger as a JSON-ready dict."""
        rows, un_run, un_win = self.rows()
        return {
            "window_s": self.window_s,
            "categories": {r.category: {"share_run": r.share_run, "share_window": r.share_window,
                                        "event_count": r.event_count} for r in rows},
            "unexplained_share_run": un_run,
            "unexplained_share_window": un_win,
        }
