"""How far the analysis is behind: the lag, measured the same way live and in replay.

The lag at a moment is that moment minus the newest grid time analysed by then (its
joints went out when it became due; events are decided when it is analysed, within
``live_batch_s`` of that). It grows while nothing is analysed and falls at each tick
whose grid times are, so it is known exactly from the ticks that decided grid times and
the grid times they decided: between two such ticks d_i and d_{i+1}, with T_i the
newest grid time decided at d_i, it rises from d_i - T_i to d_{i+1} - T_i. The engine
notes each analysed grid time with its tick, live and in replay alike (replay ticks
when the live node did), so both get the same figures.

Figures: the largest lag, the time spent behind (lag above ``behind_ns``) and its
share of the run, and the episodes behind (when, how long, how far).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Above this lag (s) the monitor is behind: /diagnostics WARN, the node degrades.
BEHIND_S = 0.5
#: Above this lag (s) /diagnostics reports ERROR.
FAR_BEHIND_S = 2.0


@dataclass
class LagEpisode:
    """A stretch of time behind (ns on the monitor time base)."""

    start_ns: int
    end_ns: int
    max_lag_ns: int


@dataclass
class LagMeter:
    """The lag over a run, from its deciding ticks (see the module docstring).

    Args:
        behind_ns: a lag above this counts as behind.
    """

    behind_ns: int = int(BEHIND_S * 1e9)
    max_lag_ns: int = 0
    behind_total_ns: int = 0
    first_ns: int | None = None
    last_tick_ns: int | None = None
    newest_t_ns: int | None = None
    episodes: list[LagEpisode] = field(default_factory=list)

    def note(self, tick_ns: int, t_ns: int) -> None:
        """Grid time t_ns was analysed at tick_ns (call once per grid time, in order)."""
        if self.first_ns is None:
            self.first_ns = min(tick_ns, t_ns)
        if self.newest_t_ns is None or self.last_tick_ns is None:
            self.max_lag_ns = max(self.max_lag_ns, tick_ns - t_ns)
        elif tick_ns != self.last_tick_ns:
            # The lag rose from last_tick - newest to tick - newest: book its stretch above behind_ns.
            peak = tick_ns - self.newest_t_ns
            self.max_lag_ns = max(self.max_lag_ns, peak)
            start = max(self.last_tick_ns, self.newest_t_ns + self.behind_ns)
            if tick_ns > start:
                self._behind(start, tick_ns, peak)
        self.last_tick_ns, self.newest_t_ns = tick_ns, t_ns

    def restart(self) -> None:
        """The next grid time follows a gap in the recording (replay): the time between is no lag."""
        self.last_tick_ns = None

    def _behind(self, start_ns: int, end_ns: int, lag_ns: int) -> None:
        self.behind_total_ns += end_ns - start_ns
        last = self.episodes[-1] if self.episodes else None
        if last is not None and last.end_ns == start_ns:
            last.end_ns, last.max_lag_ns = end_ns, max(last.max_lag_ns, lag_ns)
        else:
            self.episodes.append(LagEpisode(start_ns, end_ns, lag_ns))

    def lag_ns(self, now_ns: int) -> int | None:
        """The lag now (None before the first grid time was published)."""
        return None if self.newest_t_ns is None else int(now_ns) - self.newest_t_ns

    def behind_now_ns(self, now_ns: int) -> int:
        """Time behind since the last deciding tick, not yet booked (the open interval)."""
        if self.newest_t_ns is None or self.last_tick_ns is None:
            return 0
        return max(0, int(now_ns) - max(self.last_tick_ns, self.newest_t_ns + self.behind_ns))

    def behind_share(self) -> float:
        """Share of the run so far (first to last analysing tick) spent behind."""
        span_ns = (self.last_tick_ns - self.first_ns) if self.first_ns is not None and self.last_tick_ns else 0
        return self.behind_total_ns / span_ns if span_ns > 0 else 0.0

    def as_dict(self, to_seconds: Callable[[int], float], since_ns: int | None = None) -> dict[str, Any]:
        """The figures for summary.json, up to the last deciding tick (the silence after
        the inputs end is no lag); times through ``to_seconds`` (ns -> s of the run).

        Args:
            to_seconds: monitor-time ns -> s of the run.
            since_ns: count only from here (the run's start: start-up before the first
                command is no part of the run). The largest lag is then exact where it
                was behind, and otherwise reported as at most ``behind_ns``.
        """
        since = self.first_ns if since_ns is None or self.first_ns is None else max(since_ns, self.first_ns)
        episodes = [LagEpisode(max(e.start_ns, since), e.end_ns, e.max_lag_ns) for e in self.episodes
                    if since is None or e.end_ns > since]
        behind_ns = sum(e.end_ns - e.start_ns for e in episodes)
        max_lag_ns = self.max_lag_ns if since == self.first_ns else max(
            [e.max_lag_ns for e in episodes] or [min(self.max_lag_ns, self.behind_ns)])
        span_ns = (self.last_tick_ns - since) if since is not None and self.last_tick_ns else 0
        return {"max_lag_s": round(max_lag_ns * 1e-9, 4),
                "behind_s": round(behind_ns * 1e-9, 3),
                "behind_share": round(behind_ns / span_ns, 4) if span_ns > 0 else 0.0,
                "behind_episodes": [{"start_s": round(to_seconds(e.start_ns), 3), "end_s": round(to_seconds(e.end_ns), 3),
                                     "max_lag_s": round(e.max_lag_ns * 1e-9, 3)} for e in episodes]}
