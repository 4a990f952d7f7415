"""The divergence monitor's side of the lag: behind or not, when to step, what /diagnostics says.

The engine measures the lag (now minus the newest grid time analysed,
:mod:`~sim_real_bridge.core.lag`); :class:`LagState` decides from it how the node steps
the analysis (see the module docstring of :mod:`sim_real_bridge.nodes.divergence_monitor`)
and :func:`lag_status` reports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from diagnostic_msgs.msg import DiagnosticStatus

from sim_real_bridge.core.engine import DivergenceEngine
from sim_real_bridge.ros.diagnostics import ERROR, OK, WARN, make_status


@dataclass(frozen=True)
class LagLimits:
    """The ``lag.*`` parameters, in nanoseconds.

    Attributes:
        warn_ns: above it /diagnostics warns and the node is behind (larger steps).
        error_ns: above it /diagnostics reports an error.
        behind_period_ns: while behind, the analysis advances at this period.
        away_ns: a gap between ticks this long means the node was starved.
    """

    warn_ns: int
    error_ns: int
    behind_period_ns: int
    away_ns: int


class LagState:
    """The node's side of the lag: behind or not, when to step, the worst lag since the last report."""

    def __init__(self, limits: LagLimits) -> None:
        self.limits = limits
        self.behind = False
        self.draining = False
        self.drained = 0
        self.skipped_inputs = 0
        self.drains_cut_short = 0
        self.meter_max_ns = 0  # the engine's largest lag when last reported
        #: While set (after a backlog was dropped, until caught up): inputs stamped before it are skipped.
        self.skip_before_ns: int | None = None
        self._last_tick_ns: int | None = None
        self._last_step_ns = 0
        self._window_max_ns = 0
        self._behind_since_ns: int | None = None
        self._behind_ns = 0

    def away(self, now_ns: int) -> bool:
        """Whether the node went without a tick for away_ns (starved); notes this tick.

        Behind, steps are behind_period apart by design: only a tick later than that by
        away_ns is a stall (else every step drained first, silent for up to the drain's box)."""
        limit_ns = self.limits.away_ns + (self.limits.behind_period_ns if self.behind else 0)
        away = self._last_tick_ns is not None and now_ns - self._last_tick_ns > limit_ns
        self._last_tick_ns = now_ns
        return away

    def step_on_message(self, now_ns: int, grid_time_due: Callable[[], bool]) -> bool:
        """Whether an input message should step the analysis: keeping up, the one that
        completes a grid time; behind, one every behind_period (the input thread steps
        itself, so a timer kept off the lock cannot silence the outputs)."""
        if self.draining:
            return False
        if self.behind:
            return now_ns - self._last_step_ns >= self.limits.behind_period_ns
        return grid_time_due()

    def observe(self, lag_ns: int | None) -> None:
        if lag_ns is not None:
            self._window_max_ns = max(self._window_max_ns, lag_ns)

    def step_due(self, now_ns: int, lag_ns: int | None) -> bool:
        """Whether to advance the analysis now: always when keeping up, every behind_period when behind."""
        self.observe(lag_ns)
        if lag_ns is not None and lag_ns > self.limits.warn_ns and not self.behind:
            self.behind, self._behind_since_ns = True, now_ns
        return not self.behind or now_ns - self._last_step_ns >= self.limits.behind_period_ns

    def after_step(self, now_ns: int, lag_ns: int | None) -> None:
        self._last_step_ns = now_ns
        if self.behind and lag_ns is not None and lag_ns < self.limits.warn_ns // 2:
            self._behind_ns += now_ns - (self._behind_since_ns or now_ns)
            self.behind, self._behind_since_ns = False, None
            self.skip_before_ns = None

    def take_window_max(self) -> int:
        """The largest lag seen since the last call (then forgotten)."""
        worst, self._window_max_ns = self._window_max_ns, 0
        return worst

    def worst_since_report(self, lag_ns: int | None, run_max_lag_ns: int) -> int:
        """The largest lag since the last report (then forgotten), counting one the steps
        did not see (start-up, a batch) that raised the engine's run maximum."""
        self.observe(lag_ns)
        if run_max_lag_ns > self.meter_max_ns:
            self.meter_max_ns = run_max_lag_ns
            self.observe(run_max_lag_ns)
        return self.take_window_max()

    def behind_total_ns(self, now_ns: int) -> int:
        """Time spent in the behind mode so far."""
        open_ns = now_ns - self._behind_since_ns if self._behind_since_ns is not None else 0
        return self._behind_ns + open_ns


def lag_status(node_name: str, engine: DivergenceEngine, lag: LagState, now_ns: int) -> DiagnosticStatus:
    """How far behind the analysis is: the level of the largest lag since the last report."""
    lag_ns = engine.lag_ns(now_ns)
    meter = engine.lag
    worst_ns = lag.worst_since_report(lag_ns, meter.max_lag_ns)
    dropped_s = engine.skipped_count * engine.dt_ns * 1e-9
    values = {"lag_s": (lag_ns or 0) * 1e-9, "max_lag_s": worst_ns * 1e-9, "run_max_lag_s": meter.max_lag_ns * 1e-9,
              "behind_share": meter.behind_share(), "behind": lag.behind,
              "behind_mode_s": lag.behind_total_ns(now_ns) * 1e-9,
              "dropped_grid_times": engine.skipped_count, "dropped_s": dropped_s,
              "inputs_taken_after_stalls": lag.drained,
              "inputs_skipped_behind": lag.skipped_inputs, "drains_cut_short": lag.drains_cut_short}
    limits = lag.limits
    level = ERROR if worst_ns > limits.error_ns else WARN if worst_ns > limits.warn_ns else OK
    if level == OK:
        message = "keeping up"
    else:
        message = (f"behind by up to {worst_ns * 1e-9:.2f} s: analysing in steps of "
                   f"{limits.behind_period_ns * 1e-9:.1f} s")
        if engine.skipped_count:
            message += f"; {dropped_s:.2f} s of backlog dropped in {len(engine.gaps)} gap(s)"
    return make_status(f"{node_name}: lag", level, message, values)
