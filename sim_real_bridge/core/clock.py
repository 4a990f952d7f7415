"""ClockMap: one side's stamps onto the monitor clock, across clock resets.

The offset from a side's stamps to the monitor clock is the lower envelope of
``recv - stamp`` over all the side's streams: queueing and backlog only ever add delay,
so however late one topic is delivered, the freshest stream sets the offset. The
envelope is leaky (it may rise by ``leak`` seconds per second) so it follows drift:

    offset_k = min(offset_{k-1} + leak * (recv_k - recv_{k-1}), recv_k - stamp_k)

which over a batch is a cumulative minimum (no loop). A stream whose stamps jitter
would pull that floor down by its noise's extremes and map every other stream early:
a stream whose recent ``recv - stamp`` spreads more than ``SPREAD_FACTOR`` times the
quietest stream's (and over ``SPREAD_FLOOR_NS``) is mapped but does not lower the
envelope (delivery delays of a clean stream spread by a millisecond or less). A clock reset is read from each
stream's own stamps: a stamp going back by more than ``reset_ns``, or running ahead of
the receive clock by more than that and into the envelope's future, crossed a clock
discontinuity. The first stream to cross opens a new epoch (counted, envelope started
afresh); each other stream keeps its epoch until it crosses too, so its backlogged
samples stamped before the reset still map where they belong.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Delays kept per stream for the delivery statistics of the run summary.
DELAYS_KEPT = 2000
#: Delays of the side whose spread is the offset's uncertainty.
SPREAD_WINDOW = 500
#: Recent ``recv - stamp`` per stream whose spread says whether its stamps jitter.
STREAM_WINDOW = 200
#: A stream spreading this many times the quietest stream's (and over the floor) does
#: not set the envelope.
SPREAD_FACTOR = 3.0
SPREAD_FLOOR_NS = 1_000_000
_MAX_EPOCHS = 4


@dataclass
class _Epoch:
    offset_ns: int
    last_recv_ns: int


class ClockMap:
    """Maps one side's stamps onto the monitor clock.

    Args:
        leak: rate (s per s) at which the envelope may rise.
        reset_ns: stamp discontinuity of one stream that counts as a clock reset.
    """

    def __init__(self, leak: float, reset_ns: int) -> None:
        self.leak = leak
        self.reset_ns = reset_ns
        self.resets = 0
        self._epochs: dict[int, _Epoch] = {}
        self._stream_epoch: dict[int, int] = {}
        self._last: dict[int, tuple[int, int]] = {}  # stream -> (stamp, recv) of its newest sample
        self._raw_delays: dict[int, np.ndarray] = {}  # stream -> its last STREAM_WINDOW recv - stamp
        # One row per mapped sample, in receive order: when, the newest epoch's offset
        # after it, its delay beyond the envelope, its stream.
        self._recv = np.zeros(0, dtype=np.int64)
        self._offset = np.zeros(0, dtype=np.int64)
        self._delay = np.zeros(0, dtype=np.int64)
        self._stream = np.zeros(0, dtype=np.int16)
        # Running sums of the delays (s) and their squares, from before the first row.
        self._delay_sums = np.zeros(1)
        self._delay_squares = np.zeros(1)

    @property
    def offset_ns(self) -> int | None:
        """Offset of the newest epoch, or None before the first sample."""
        return self._epochs[max(self._epochs)].offset_ns if self._epochs else None

    def map(self, stream_ids: np.ndarray, stamp_ns: np.ndarray, recv_ns: np.ndarray
            ) -> tuple[np.ndarray, list[int]]:
        """Map a batch of the side's samples, given in receive order.

        Args:
            stream_ids: (m,) small integer id of each sample's stream.
            stamp_ns: (m,) the samples' own stamps.
            recv_ns: (m,) receive times, non-decreasing.

        Returns:
            (mapped times (m,), the ids of the streams that crossed a reset in the batch).
        """
        out = np.empty(len(stamp_ns), dtype=np.int64)
        offsets = np.empty(len(stamp_ns), dtype=np.int64)
        crossed: list[int] = []
        lo = 0
        while lo < len(stamp_ns):
            hi = self._next_reset(stream_ids, stamp_ns, recv_ns, lo)
            self._map_run(stream_ids[lo:hi], stamp_ns[lo:hi], recv_ns[lo:hi], out[lo:hi], offsets[lo:hi])
            if hi < len(stamp_ns):
                crossed.append(int(stream_ids[hi]))
                self._cross(int(stream_ids[hi]), int(stamp_ns[hi]), int(recv_ns[hi]))
            lo = hi
        self._keep_history(stream_ids, recv_ns, recv_ns - out, offsets)
        return out, crossed

    def offset_at(self, now_ns: np.ndarray) -> np.ndarray:
        """(K,) the newest epoch's offset as it stood at each receive time (0 before any sample)."""
        i = np.searchsorted(self._recv, now_ns, side="right") - 1
        return np.where(i >= 0, self._offset[np.maximum(i, 0)], 0) if len(self._recv) else np.zeros(len(now_ns), np.int64)

    def spread_at(self, now_ns: np.ndarray) -> np.ndarray:
        """(K,) std (s) of the side's last SPREAD_WINDOW delays beyond the envelope at each time."""
        end = np.searchsorted(self._recv, now_ns, side="right")
        start = np.maximum(end - SPREAD_WINDOW, 0)
        count = end - start
        sums, squares = self._delay_sums, self._delay_squares
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (sums[end] - sums[start]) / count
            var = (squares[end] - squares[start]) / count - mean * mean
        return np.where(count > 2, np.sqrt(np.maximum(var, 0.0)), 0.0)

    def delivery_delays_s(self, names: dict[int, str]) -> dict[str, dict[str, float]]:
        """Per stream: p50, p99 and max of its last DELAYS_KEPT delays beyond the envelope (s)."""
        out = {}
        for stream_id, name in sorted(names.items(), key=lambda item: item[1]):
            delays = self._delay[self._stream == stream_id][-DELAYS_KEPT:] * 1e-9
            if delays.size:
                p50, p99 = np.percentile(delays, [50, 99])
                out[name] = {"p50": float(p50), "p99": float(p99), "max": float(delays.max())}
        return out

    def trim(self, keep: int) -> None:
        """Keep the newest ``keep`` history rows (a live monitor's memory bound)."""
        drop = len(self._recv) - keep
        if drop > keep:
            self._recv, self._offset = self._recv[drop:].copy(), self._offset[drop:].copy()
            self._delay, self._stream = self._delay[drop:].copy(), self._stream[drop:].copy()
            self._delay_sums = self._delay_sums[drop:].copy()
            self._delay_squares = self._delay_squares[drop:].copy()

    def _next_reset(self, stream_ids: np.ndarray, stamp_ns: np.ndarray, recv_ns: np.ndarray, lo: int) -> int:
        """Index of the first sample from lo on that crosses a reset (len when none)."""
        first = len(stamp_ns)
        for stream_id in np.unique(stream_ids[lo:]).tolist():
            rows = lo + np.flatnonzero(stream_ids[lo:] == stream_id)
            if stream_id not in self._last:
                if rows.size < 2:
                    continue
                prev_stamp, prev_recv = stamp_ns[rows[:-1]], recv_ns[rows[:-1]]
                rows = rows[1:]
            else:
                last_stamp, last_recv = self._last[stream_id]
                prev_stamp = np.concatenate(([last_stamp], stamp_ns[rows[:-1]]))
                prev_recv = np.concatenate(([last_recv], recv_ns[rows[:-1]]))
            stamp, recv = stamp_ns[rows], recv_ns[rows]
            backwards = stamp < prev_stamp - self.reset_ns
            outran = (stamp - prev_stamp) - (recv - prev_recv) > self.reset_ns
            if outran.any():
                # Only a stamp that also lands in the envelope's future is a reset: the
                # envelope before that sample bounds it (within leak, which is ~ppm).
                floor = self._floor_before(stream_ids, stamp_ns, recv_ns, lo, rows[outran])
                outran[outran] = (recv[outran] - stamp[outran]) < floor - self.reset_ns
            hits = np.flatnonzero(backwards | outran)
            if hits.size:
                first = min(first, int(rows[hits[0]]))
        return first

    def _floor_before(self, stream_ids: np.ndarray, stamp_ns: np.ndarray, recv_ns: np.ndarray, lo: int,
                      rows: np.ndarray) -> np.ndarray:
        """The current epoch's envelope just before each of ``rows`` (approximately: the
        lowest delay of the epoch so far, batch rows before it included)."""
        delays = recv_ns[lo:] - stamp_ns[lo:]
        running = np.minimum.accumulate(delays)
        start = self._epochs[max(self._epochs)].offset_ns if self._epochs else delays[0]
        before = np.concatenate(([start], np.minimum(running[:-1], start)))
        return before[rows - lo]

    def _map_run(self, stream_ids: np.ndarray, stamp_ns: np.ndarray, recv_ns: np.ndarray,
                 out: np.ndarray, offsets: np.ndarray) -> None:
        """Map samples with no reset among them (each stream stays in its epoch)."""
        if not len(stamp_ns):
            return
        if not self._epochs:
            self._epochs[0] = _Epoch(int(recv_ns[0] - stamp_ns[0]), int(recv_ns[0]))
        newest = max(self._epochs)
        newest_before = self._epochs[newest].offset_ns
        epochs = self._epochs_of(stream_ids, newest)
        setters = ~self._jittery_rows(stream_ids, recv_ns - stamp_ns)
        for epoch_id in np.unique(epochs).tolist():
            rows = np.flatnonzero(epochs == epoch_id)
            epoch = self._epochs[epoch_id]
            recv = recv_ns[rows]
            climb = (self.leak * (recv - epoch.last_recv_ns).clip(min=0)).astype(np.int64)
            floor = np.where(setters[rows], recv - stamp_ns[rows] - climb, np.iinfo(np.int64).max)
            envelope = climb + np.minimum(epoch.offset_ns, np.minimum.accumulate(floor))
            out[rows] = stamp_ns[rows] + envelope
            epoch.offset_ns, epoch.last_recv_ns = int(envelope[-1]), max(epoch.last_recv_ns, int(recv[-1]))
        for stream_id in np.unique(stream_ids).tolist():
            own = np.flatnonzero(stream_ids == stream_id)
            self._last[stream_id] = (int(stamp_ns[own[-1]]), int(recv_ns[own[-1]]))
            raw = np.concatenate((self._raw_delays.get(stream_id, np.zeros(0, np.int64)), recv_ns[own] - stamp_ns[own]))
            self._raw_delays[stream_id] = raw[-STREAM_WINDOW:]
        # The newest epoch's offset after each row (rows of older epochs carry it forward).
        at = np.where(epochs == newest, np.arange(len(out)), -1)
        np.maximum.accumulate(at, out=at)
        offsets[:] = np.where(at >= 0, (out - stamp_ns)[np.maximum(at, 0)], newest_before)

    def _jittery_rows(self, stream_ids: np.ndarray, raw_ns: np.ndarray) -> np.ndarray:
        """(m,) whether each row's stream, as it stood at that row, spreads its
        ``recv - stamp`` over the last STREAM_WINDOW rows far more than the quietest
        stream of the side does (its stamps jitter)."""
        m = len(stream_ids)
        filled = []  # per stream: its spread as it stood at each row of the batch (NaN unknown)
        own = np.full(m, np.nan)
        for stream_id in np.unique(np.concatenate((stream_ids, list(self._raw_delays)))).tolist():
            history = self._raw_delays.get(stream_id, np.zeros(0, np.int64))
            rows = np.flatnonzero(stream_ids == stream_id)
            raw = np.concatenate((history, raw_ns[rows]))
            spread = _rolling_std(raw, STREAM_WINDOW, STREAM_WINDOW // 4)
            before = spread[len(history) - 1] if len(history) else np.nan
            own[rows] = spread[len(history):]
            at = np.full(m, -1)
            at[rows] = np.arange(len(rows))
            np.maximum.accumulate(at, out=at)
            filled.append(np.where(at >= 0, spread[len(history):][np.maximum(at, 0)] if len(rows) else before, before))
        spreads = np.vstack(filled) if filled else np.full((1, m), np.nan)
        known = np.isfinite(spreads)
        quietest = np.min(np.where(known, spreads, np.inf), axis=0)
        limit = np.maximum(SPREAD_FACTOR * quietest, SPREAD_FLOOR_NS)
        with np.errstate(invalid="ignore"):
            return (known.sum(axis=0) >= 2) & (own > limit)

    def _epochs_of(self, stream_ids: np.ndarray, newest: int) -> np.ndarray:
        """(m,) the epoch of each sample's stream; streams new (or of a forgotten epoch) join the newest."""
        if not self.resets:
            for stream_id in np.unique(stream_ids).tolist():
                self._stream_epoch.setdefault(stream_id, newest)
            return np.full(len(stream_ids), newest)
        table = np.full(int(stream_ids.max()) + 1, newest)
        for stream_id in np.unique(stream_ids).tolist():
            epoch = self._stream_epoch.get(stream_id, newest)
            self._stream_epoch[stream_id] = table[stream_id] = epoch if epoch in self._epochs else newest
        return table[stream_ids]

    def _cross(self, stream_id: int, stamp_ns: int, recv_ns: int) -> None:
        """The stream's next sample is after a reset: move it to the next epoch, opening one if needed."""
        epoch = self._stream_epoch.get(stream_id, max(self._epochs)) + 1
        if epoch not in self._epochs:
            epoch = max(self._epochs) + 1
            self._epochs[epoch] = _Epoch(recv_ns - stamp_ns, recv_ns)
            self.resets += 1
            for old in sorted(self._epochs)[:-_MAX_EPOCHS]:
                del self._epochs[old]
        self._stream_epoch[stream_id] = epoch
        self._last.pop(stream_id, None)
        self._raw_delays.pop(stream_id, None)  # (its recv - stamp jumped with the reset)

    def _keep_history(self, stream_ids: np.ndarray, recv_ns: np.ndarray, delay_ns: np.ndarray,
                      offsets: np.ndarray) -> None:
        self._recv = np.concatenate((self._recv, recv_ns))
        self._offset = np.concatenate((self._offset, offsets))
        self._delay = np.concatenate((self._delay, delay_ns))
        self._stream = np.concatenate((self._stream, stream_ids.astype(np.int16)))
        delay_s = delay_ns * 1e-9
        self._delay_sums = np.concatenate((self._delay_sums, self._delay_sums[-1] + np.cumsum(delay_s)))
        self._delay_squares = np.concatenate((self._delay_squares, self._delay_squares[-1] + np.cumsum(delay_s * delay_s)))


def _rolling_std(values: np.ndarray, window: int, minimum: int) -> np.ndarray:
    """(n,) std of the last ``window`` values up to each (NaN with fewer than ``minimum``)."""
    x = (values - values[0]).astype(float) if len(values) else np.zeros(0)
    sums = np.concatenate(([0.0], np.cumsum(x)))
    squares = np.concatenate(([0.0], np.cumsum(x * x)))
    end = np.arange(1, len(x) + 1)
    start = np.maximum(end - window, 0)
    count = end - start
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (sums[end] - sums[start]) / count
        var = (squares[end] - squares[start]) / count - mean * mean
    return np.where(count >= minimum, np.sqrt(np.maximum(var, 0.0)), np.nan)
