"""Array helpers of the stream health: runs, windows of recent history, marks in a span.

All work on whole columns (one call per batch), so the detectors in ``health.py`` need no
per-sample loop.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: The running statistics are refreshed every this many samples.
STATS_EVERY = 16


def run_length(cond: np.ndarray, carry: np.ndarray | int) -> np.ndarray:
    """Length of the run of True ending at each row of ``cond`` (axis 0), continuing
    runs of ``carry`` rows from before."""
    n = cond.shape[0]
    idx = np.arange(1, n + 1).reshape((-1,) + (1,) * (cond.ndim - 1))
    last_false = np.maximum.accumulate(np.where(cond, 0, idx), axis=0)
    carried = np.where(last_false == 0, carry, 0)
    return np.where(cond, idx - last_false + carried, 0)


def window_ends(total_before: int, m: int) -> np.ndarray:
    """Indices (0..m-1) of a batch's samples whose running count is a multiple of STATS_EVERY."""
    first = -(total_before + 1) % STATS_EVERY
    return np.arange(first, m, STATS_EVERY)


def per_window(history: np.ndarray, ends: np.ndarray, size: int, reduce: Callable[[np.ndarray], np.ndarray]
                ) -> np.ndarray:
    """(E,) ``reduce`` (rows -> one value per row) of the last ``size`` entries of history
    before each end (exclusive index); a shorter history gives its whole prefix."""
    if len(ends) <= 2:  # a live batch: one or two windows, read directly
        return np.array([reduce(history[None, max(0, e - size):e])[0] if e > 0 else np.nan for e in ends.tolist()])
    out = np.full(len(ends), np.nan)
    full = ends >= size
    if full.any():
        out[full] = reduce(np.lib.stride_tricks.sliding_window_view(history, size)[ends[full] - size])
    for i in np.flatnonzero(~full & (ends > 0)).tolist():
        out[i] = reduce(history[None, :ends[i]])[0]
    return out


def median_abs_deviation(rows: np.ndarray) -> np.ndarray:
    return np.median(np.abs(rows - np.median(rows, axis=1, keepdims=True)), axis=1)


def marks_in(times: np.ndarray, values: np.ndarray, lo_ns: np.ndarray, hi_ns: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """(K,) whether any mark lies in [lo, hi], and the largest value among them (0 when none)."""
    a = np.searchsorted(times, lo_ns, side="left")
    b = np.searchsorted(times, hi_ns, side="right")
    has = b > a
    if not has.any():
        return has, np.zeros(len(lo_ns))
    width = int((b - a).max())
    idx = a[:, None] + np.arange(width)
    gathered = np.where(idx < b[:, None], values[np.minimum(idx, len(values) - 1)], -np.inf)
    return has, np.where(has, gathered.max(axis=1), 0.0)


def pinned_while_moving(times: np.ndarray, components: np.ndarray, lo_ns: np.ndarray, hi_ns: np.ndarray,
                         moving: np.ndarray) -> np.ndarray:
    """(K,) whether a component was marked pinned in [lo, hi] while its twin component moved."""
    a = np.searchsorted(times, lo_ns, side="left")
    b = np.searchsorted(times, hi_ns, side="right")
    has = b > a
    if not has.any():
        return has
    width = int((b - a).max())
    idx = a[:, None] + np.arange(width)
    valid = idx < b[:, None]
    component = components[np.minimum(idx, len(components) - 1)].astype(np.intp)
    if moving.shape[1] == 1:
        twin = np.broadcast_to(moving, valid.shape)
    else:
        twin = np.take_along_axis(moving, np.minimum(component, moving.shape[1] - 1), axis=1)
    return (valid & twin).any(axis=1)


def window_sum(history: np.ndarray, ends: np.ndarray, size: int) -> np.ndarray:
    """(E, ...) sum of the last ``size`` entries of history (axis 0) before each end
    (exclusive index), from one cumulative sum (a shorter history gives its whole prefix)."""
    totals = np.cumsum(history, axis=0, dtype=float)
    totals = np.concatenate((np.zeros((1,) + totals.shape[1:]), totals))
    return totals[ends] - totals[np.maximum(ends - size, 0)]


def latched(gate: np.ndarray, goes_on: np.ndarray, carried: bool) -> np.ndarray:
    """(K,) true from each row where ``gate`` holds for as long as ``goes_on`` holds (row k
    continues row k - 1's run); ``carried``: latched before row 0 (kept while row 0 on
    goes on)."""
    rows = np.arange(len(gate))
    run_start = np.maximum.accumulate(np.where(goes_on, 0, rows))
    last_gate = np.maximum.accumulate(np.where(gate, rows, -1))
    from_carry = carried & (np.cumsum(~goes_on) == 0)
    return ((last_gate >= run_start) & (last_gate >= 0)) | from_carry
