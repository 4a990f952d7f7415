"""StreamBuffer: one input stream's accepted samples as growing, time-sorted columns.

Samples arrive in receive order; their stamps, mapped onto the monitor time base, are
nearly but not always in order (stamp jitter, reordering on the way). The buffer keeps
its rows sorted by mapped time, which is what interpolation and windows need, and next
to each row the time it was received, which is what the read schedule needs ("when had
this stream reached time t?"). Receive times in arrival order are kept apart (sorted by
construction) for the silences of a stream.

All arrays are views of the live region of larger buffers: read them, never keep them
across an ``extend`` or ``trim``.
"""

from __future__ import annotations

import numpy as np

_MIN_CAPACITY = 256


class StreamBuffer:
    """Time-sorted samples of one stream.

    Args:
        width: values per sample (joint_states: 3 * joints; wrench: 6; poses: 7).
    """

    def __init__(self, width: int) -> None:
        self.width = width
        self._time = np.zeros(_MIN_CAPACITY, dtype=np.int64)
        self._recv = np.zeros(_MIN_CAPACITY, dtype=np.int64)
        self._values = np.zeros((_MIN_CAPACITY, width))
        # min(recv of rows i..end): when the stream first held a sample at or after row i's time
        self._reach = np.zeros(_MIN_CAPACITY, dtype=np.int64)
        # max(recv of rows 0..i): when every row up to row i had been received
        self._settled = np.zeros(_MIN_CAPACITY, dtype=np.int64)
        self._arrivals = np.zeros(_MIN_CAPACITY, dtype=np.int64)
        self._start = 0
        self._n = 0
        self._arrivals_start = 0
        self._arrivals_n = 0
        self.first_recv_ns: int | None = None

    def __len__(self) -> int:
        return self._n - self._start

    @property
    def time_ns(self) -> np.ndarray:
        """(n,) mapped sample times, non-decreasing."""
        return self._time[self._start:self._n]

    @property
    def recv_ns(self) -> np.ndarray:
        """(n,) receive time of each row (in time order)."""
        return self._recv[self._start:self._n]

    @property
    def values(self) -> np.ndarray:
        """(n, width) sample values in time order."""
        return self._values[self._start:self._n]

    @property
    def reach_ns(self) -> np.ndarray:
        """(n,) for row i: the receive time of the first sample at or after row i's time."""
        return self._reach[self._start:self._n]

    @property
    def settled_ns(self) -> np.ndarray:
        """(n,) for row i: when every row up to row i had been received (non-decreasing)."""
        return self._settled[self._start:self._n]

    def received_count(self, now_ns: np.ndarray) -> np.ndarray:
        """(K,) how many leading rows (in time order) had all been received by each now."""
        return np.searchsorted(self.settled_ns, now_ns, side="right")

    @property
    def arrivals_ns(self) -> np.ndarray:
        """(m,) receive times in arrival order (non-decreasing)."""
        return self._arrivals[self._arrivals_start:self._arrivals_n]

    @property
    def last_time_ns(self) -> int | None:
        """Newest mapped time held, or None when empty."""
        return int(self._time[self._n - 1]) if self._n > self._start else None

    @property
    def last_recv_ns(self) -> int | None:
        """Newest receive time, or None before the first sample."""
        return int(self._arrivals[self._arrivals_n - 1]) if self._arrivals_n > self._arrivals_start else None

    def extend(self, time_ns: np.ndarray, recv_ns: np.ndarray, values: np.ndarray) -> None:
        """Add samples given in receive order (recv_ns non-decreasing, not before earlier ones).

        Args:
            time_ns: (m,) mapped times.
            recv_ns: (m,) receive times.
            values: (m, width).
        """
        m = len(time_ns)
        if m == 0:
            return
        if self.first_recv_ns is None:
            self.first_recv_ns = int(recv_ns[0])
        self._append_arrivals(recv_ns)
        self._reserve(m)
        lo = self._n
        hi = lo + m
        self._time[lo:hi] = time_ns
        self._recv[lo:hi] = recv_ns
        self._values[lo:hi] = values
        self._n = hi
        # Rows out of time order: re-sort the region from where the first of them belongs.
        first_new = int(np.min(time_ns))
        sorted_new = m == 1 or bool(np.all(np.diff(time_ns) >= 0))
        if (lo > self._start and first_new < self._time[lo - 1]) or not sorted_new:
            lo = self._start + int(np.searchsorted(self._time[self._start:lo], first_new, side="right"))
            order = np.argsort(self._time[lo:hi], kind="stable")
            self._time[lo:hi] = self._time[lo:hi][order]
            self._recv[lo:hi] = self._recv[lo:hi][order]
            self._values[lo:hi] = self._values[lo:hi][order]
        # New rows were received after every older one, so only the suffix minima of the
        # changed region move, and none before it.
        self._reach[lo:hi] = np.minimum.accumulate(self._recv[lo:hi][::-1])[::-1]
        settled = np.maximum.accumulate(self._recv[lo:hi])
        self._settled[lo:hi] = np.maximum(settled, self._settled[lo - 1]) if lo > self._start else settled

    def trim(self, before_ns: int) -> None:
        """Forget samples older than before_ns (always keeping the newest two)."""
        k = self._start + int(np.searchsorted(self.time_ns, before_ns, side="left"))
        self._start = min(k, max(self._start, self._n - 2))
        if self._arrivals_n - self._arrivals_start > 2 * len(self) + _MIN_CAPACITY:
            self._arrivals_start = self._arrivals_n - len(self) - 1

    def reached(self, t_ns: np.ndarray) -> np.ndarray:
        """(K,) receive time at which the stream first held a sample at or after each t
        (int64 max where it holds none yet)."""
        i = np.searchsorted(self.time_ns, t_ns, side="left")
        out = np.full(len(t_ns), np.iinfo(np.int64).max, dtype=np.int64)
        inside = i < len(self)
        out[inside] = self.reach_ns[i[inside]]
        return out

    def _append_arrivals(self, recv_ns: np.ndarray) -> None:
        m = len(recv_ns)
        if self._arrivals_n + m > len(self._arrivals):
            live = self._arrivals[self._arrivals_start:self._arrivals_n]
            grown = np.zeros(max(_MIN_CAPACITY, 2 * (len(live) + m)), dtype=np.int64)
            grown[:len(live)] = live
            self._arrivals, self._arrivals_start, self._arrivals_n = grown, 0, len(live)
        self._arrivals[self._arrivals_n:self._arrivals_n + m] = recv_ns
        self._arrivals_n += m

    def _reserve(self, m: int) -> None:
        if self._n + m <= len(self._time):
            return
        live = len(self)
        capacity = max(_MIN_CAPACITY, 2 * (live + m))
        time = np.zeros(capacity, dtype=np.int64)
        recv = np.zeros(capacity, dtype=np.int64)
        reach = np.zeros(capacity, dtype=np.int64)
        settled = np.zeros(capacity, dtype=np.int64)
        values = np.zeros((capacity, self.width))
        time[:live] = self.time_ns
        recv[:live] = self.recv_ns
        reach[:live] = self.reach_ns
        settled[:live] = self.settled_ns
        values[:live] = self.values
        self._time, self._recv, self._reach, self._settled, self._values = time, recv, reach, settled, values
        self._start, self._n = 0, live
