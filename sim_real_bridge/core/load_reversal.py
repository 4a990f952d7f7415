"""Whether a person's load on the arm has turned against its first direction: a hold.

A hand that holds a link where it was pulls it back toward that place: as the arm's
command carries the link past it and back, the pull turns round, and the joints' effort
residuals with it. A push keeps its direction in the world, so they do not turn (only as
far as the arm's pose turns the push's lever arms). So, while the human category stays
active, the scan compares each row's effort residuals (a vector over the joints) with
their mean over the first ``hold_reference_s`` of the activity; pointing against it
(cosine at most ``-hold_against_cos``) for ``hold_against_s`` on end, the load is a
hold from then on, until the human category has been idle for ``hold_reset_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim_real_bridge.core.attribution_config import AttributionConfig

__all__ = ["LoadReversal"]


@dataclass
class LoadReversal:
    """The direction a person's load started in, and whether it has turned against it."""

    reference: np.ndarray | None = None  # sum of the effort residuals over the first rows
    reference_s: float = 0.0
    against_s: float = 0.0
    reversed: bool = False
    idle_s: float = 0.0

    def idle(self, dt_s: float, cfg: AttributionConfig) -> None:
        """Advance by one row of ``dt_s`` at which the human category is not active."""
        self.idle_s += dt_s
        if self.idle_s + dt_s / 2 >= cfg.hold_reset_s:  # (times are sums of row steps)
            self.reference, self.reference_s, self.against_s, self.reversed = None, 0.0, 0.0, False

    def add(self, effort_res: np.ndarray, dt_s: float, cfg: AttributionConfig) -> None:
        """Advance by one row of ``dt_s`` at which the human category is active, with the
        row's effort residuals (real minus sim, per joint)."""
        self.idle_s = 0.0
        if not np.isfinite(effort_res).all():
            return
        if self.reference is None or self.reference.shape != effort_res.shape:
            self.reference, self.reference_s = np.zeros_like(effort_res), 0.0
        # (times are sums of row steps: within half a step counts as reached)
        if self.reference_s + dt_s / 2 < cfg.hold_reference_s:
            self.reference += effort_res
            self.reference_s += dt_s
            return
        norms = float(np.linalg.norm(effort_res) * np.linalg.norm(self.reference))
        against = norms > 0 and float(np.dot(effort_res, self.reference)) <= -cfg.hold_against_cos * norms
        self.against_s = self.against_s + dt_s if against else 0.0
        if self.against_s + dt_s / 2 >= cfg.hold_against_s:
            self.reversed = True
