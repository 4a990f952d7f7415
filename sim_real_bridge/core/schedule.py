"""When each analysis grid time is due: the read schedule, the same live and in replay.

Analysis runs at fixed grid times ``k / analysis_rate_hz`` on the monitor time base. A
grid time t is due, on the monitor's receive clock, once every stream has a sample at
or after t; or, a ``horizon`` after t, once the streams that have not are silent for
longer than their patience (a stall: a dropout, a dead driver); and at the latest
``max_backlog`` after t. Patience is the horizon, or longer for a stream that has been
delivered in bursts (a backlog in the monitor's queue is late, not lost).

Every rule is causal (it looks only at what had arrived by then), so the live monitor,
asking "what is due now?" with its buffers as they are, and replay, asking "when did
each grid time become due?" with the whole recording in memory, get the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from sim_real_bridge.core.buffers import StreamBuffer
from sim_real_bridge.core.health import StreamHealth

NEVER_NS = np.iinfo(np.int64).max


def stall_times(t_ns: np.ndarray, buffer: StreamBuffer, health: StreamHealth, horizon_ns: int) -> np.ndarray:
    """(K,) the earliest receive time at or after t + horizon at which the stream had
    been silent for longer than its patience (the silence after the newest arrival
    counts: it lasts until a later arrival shows otherwise)."""
    start = t_ns + horizon_ns
    received = buffer.arrivals_ns
    if not received.size or not len(t_ns):
        return start
    # Only arrivals from just before the earliest start on matter.
    arrivals = received[max(int(np.searchsorted(received, start[0], side="right")) - 1, 0):]
    patience = np.maximum(horizon_ns, (1.2e9 * health.burst_silence_s(start)).astype(np.int64))
    j = np.searchsorted(arrivals, start, side="right") - 1
    last = arrivals[np.maximum(j, 0)]
    out = np.full(len(t_ns), NEVER_NS, dtype=np.int64)
    silent_now = (j < 0) | (start - last > patience)
    out[silent_now] = start[silent_now]
    # Otherwise: the end of the first delivery silence longer than the patience after start.
    steps = np.diff(arrivals)
    gaps = np.flatnonzero(steps > horizon_ns)
    g = np.searchsorted(gaps, j)
    found = ~silent_now & (g < gaps.size)
    gap_at = gaps[np.minimum(g, max(gaps.size - 1, 0))] if gaps.size else np.zeros(len(t_ns), np.intp)
    long_enough = found & (steps[gap_at] > patience) if gaps.size else found
    out[long_enough] = arrivals[gap_at[long_enough]] + patience[long_enough] + 1
    for k in np.flatnonzero(found & ~long_enough).tolist():  # a burst-lengthened patience (rare)
        later = gaps[g[k]:][steps[gaps[g[k]:]] > patience[k]]
        if later.size:
            out[k] = arrivals[later[0]] + patience[k] + 1
    # No such silence yet between arrivals: the one after the newest arrival (live, it is
    # still open; replay reads the same time once the recording shows the gap).
    tail = out == NEVER_NS
    out[tail] = arrivals[-1] + patience[tail] + 1
    return out


def ready_times(t_ns: np.ndarray, streams: Sequence[tuple[StreamBuffer, StreamHealth]], horizon_ns: int,
                backlog_ns: int) -> np.ndarray:
    """(K,) when each grid time became due (NEVER_NS: not by what has arrived so far).

    Args:
        t_ns: (K,) grid times, increasing.
        streams: (buffer, health) of every stream the analysis waits for; one not yet
            seen when a grid time is otherwise due is not waited for.
        horizon_ns: wait at least this long for a late stream before judging it stalled.
        backlog_ns: never wait longer than this.
    """
    ready = np.full(len(t_ns), np.iinfo(np.int64).min, dtype=np.int64)
    for buffer, health in sorted(streams, key=lambda s: s[0].first_recv_ns or NEVER_NS):
        if buffer.first_recv_ns is None:
            continue
        ok = np.minimum(buffer.reached(t_ns), stall_times(t_ns, buffer, health, horizon_ns))
        waits = (ready == np.iinfo(np.int64).min) | (ready >= buffer.first_recv_ns)
        ready = np.where(waits, np.maximum(ready, ok), ready)
    return np.minimum(ready, t_ns + backlog_ns)


def receiving(ticks_ns: np.ndarray, streams: Sequence[tuple[StreamBuffer, StreamHealth]], horizon_ns: int
              ) -> np.ndarray:
    """(T,) whether any of the streams received a row within ``horizon_ns`` before each
    tick (a backlog is only dropped while data comes in: silent streams leave nothing behind)."""
    out = np.zeros(len(ticks_ns), dtype=bool)
    for buffer, _ in streams:
        arrivals = buffer.arrivals_ns
        if len(arrivals):
            before = np.searchsorted(arrivals, ticks_ns, side="right") - 1
            out |= (before >= 0) & (arrivals[np.maximum(before, 0)] > ticks_ns - horizon_ns)
    return out


@dataclass
class Decisions:
    """When the monitor analysed each grid time (see :func:`decision_times`).

    Attributes:
        decision_ns: (K,) the tick that analysed it, NEVER_NS when no tick did.
        skipped: (K,) dropped with a backlog.
        resume_ns: the grid time the analysis resumed at after the last drop, or 0.
        gaps: (first, last) grid time of each backlog dropped.
    """

    decision_ns: np.ndarray
    skipped: np.ndarray
    resume_ns: int = 0
    gaps: list[tuple[int, int]] = field(default_factory=list)


def decision_times(t_ns: np.ndarray, ready_ns: np.ndarray, ticks_ns: np.ndarray, backlog_ns: int,
                   arriving: np.ndarray, resume_after: Callable[[int], int]) -> Decisions:
    """When the monitor, ticking at ticks_ns, analyses each grid time: the live rules replayed.

    Grid times go in order, each at the first tick it is ready. At a tick where the next
    grid time is older than ``backlog_ns`` and data comes in (``arriving``, per tick), the
    backlog is dropped up to ``resume_after(tick)`` (one pass per drop).

    Args:
        t_ns: (K,) grid times, increasing.
        ready_ns: (K,) when each became due (:func:`ready_times`).
        ticks_ns: (T,) the monitor's ticks, increasing.
        backlog_ns: the most a grid time may wait.
        arriving: (T,) whether data came in around each tick (:func:`receiving`).
        resume_after: the grid time the analysis resumes at after dropping at a tick.
    """
    at = np.searchsorted(ticks_ns, ready_ns, side="left")
    first_ready_tick = np.where(at < len(ticks_ns), ticks_ns[np.minimum(at, len(ticks_ns) - 1)], NEVER_NS)
    out = Decisions(np.full(len(t_ns), NEVER_NS, dtype=np.int64), np.zeros(len(t_ns), dtype=bool))
    start, floor = 0, int(ticks_ns[0])
    while start < len(t_ns):
        part = np.maximum.accumulate(np.maximum(first_ready_tick[start:], floor))
        out.decision_ns[start:] = part
        since_floor = ticks_ns >= floor
        later, later_arriving = ticks_ns[since_floor], arriving[since_floor]
        # At each tick, the next grid time is the first not decided before it.
        pending = np.searchsorted(part, later, side="left")
        next_t = np.where(pending < len(part), t_ns[start + np.minimum(pending, len(part) - 1)], NEVER_NS)
        late = np.flatnonzero((next_t < later - backlog_ns) & later_arriving)
        if not late.size:
            break
        floor = int(later[late[0]])
        out.resume_ns = resume_after(floor)
        first = start + int(pending[late[0]])
        end = max(first + 1, int(np.searchsorted(t_ns, out.resume_ns, side="left")))
        out.skipped[first:end] = True
        out.decision_ns[first:end] = floor
        out.gaps.append((int(t_ns[first]), int(t_ns[end - 1])))
        start = end
    return out
