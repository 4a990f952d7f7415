"""Rolling (time-window) and run-level statistics of residuals, in bounded memory."""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from sim_real_bridge.errors import ConfigError

__all__ = ["RollingStats", "RunStats", "StatsSummary"]


class StatsSummary(NamedTuple):
    """Statistics per channel; NaN where a channel has no finite sample.

    Attributes:
        count: finite samples per channel, shape (n_channels,).
        rms: root mean square, shape (n_channels,).
        max_abs: largest absolute value, shape (n_channels,).
        mean: mean, shape (n_channels,).
        percentiles: absolute-value percentiles, shape (len(percentile_levels), n_channels).
        percentile_levels: the levels, in percent.
    """

    count: np.ndarray
    rms: np.ndarray
    max_abs: np.ndarray
    mean: np.ndarray
    percentiles: np.ndarray
    percentile_levels: tuple[float, ...]


def _check_levels(levels: Sequence[float]) -> tuple[float, ...]:
    out = tuple(float(p) for p in levels)
    if any(not 0.0 <= p <= 100.0 for p in out):
        raise ConfigError(f"percentile levels must lie in [0, 100], got {list(out)}")
    return out


class RollingStats:
    """Statistics over the last ``window_ns`` of samples, per channel.

    Samples live in a fixed-size ring (``max_samples``): at high rates the window is
    also limited to the most recent ``max_samples`` samples. Non-finite values (NaN
    for a missing joint) are kept out of every figure of their channel.

    Args:
        window_ns: window length, ns.
        n_channels: values per sample.
        max_samples: ring capacity.
        percentile_levels: percentiles of |value| reported, in percent.

    Raises:
        ConfigError: if a parameter is out of range.
    """

    def __init__(
        self,
        window_ns: int,
        n_channels: int = 1,
        max_samples: int = 4096,
        percentile_levels: Sequence[float] = (50.0, 95.0, 99.0),
    ) -> None:
        if int(window_ns) <= 0:
            raise ConfigError(f"RollingStats window_ns must be > 0, got {window_ns}")
        if int(n_channels) < 1 or int(max_samples) < 1:
            raise ConfigError(
                f"RollingStats needs n_channels >= 1 and max_samples >= 1, got {n_channels}, {max_samples}"
            )
        self.window_ns = int(window_ns)
        self.n_channels = int(n_channels)
        self.percentile_levels = _check_levels(percentile_levels)
        self._t = np.zeros(int(max_samples), dtype=np.int64)
        self._v = np.full((int(max_samples), self.n_channels), np.nan)
        self._next = 0
        self._size = 0
        self.stale_count = 0

    def reset(self) -> None:
        """Drop every sample."""
        self._next = 0
        self._size = 0

    def push(self, stamp_ns: int, values: float | np.ndarray) -> None:
        """Add one sample (a scalar or shape (n_channels,)); stamps older than the newest are counted and dropped."""
        stamp = int(stamp_ns)
        if self._size and stamp < self._t[(self._next - 1) % self._t.shape[0]]:
            self.stale_count += 1
            return
        self._t[self._next] = stamp
        self._v[self._next] = values
        self._next = (self._next + 1) % self._t.shape[0]
        self._size = min(self._size + 1, self._t.shape[0])

    def window(self, now_ns: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Stamps and values inside the window ending at ``now_ns`` (default: newest stamp)."""
        cap = self._t.shape[0]
        idx = (self._next - self._size + np.arange(self._size)) % cap
        t = self._t[idx]
        v = self._v[idx]
        if not self._size:
            return t, v
        end = t[-1] if now_ns is None else int(now_ns)
        keep = (t > end - self.window_ns) & (t <= end)
        return t[keep], v[keep]

    def summary(self, now_ns: int | None = None) -> StatsSummary:
        """Count, RMS, max |x|, mean and |x| percentiles per channel over the window."""
        _, v = self.window(now_ns)
        return _summarize(v, self.n_channels, self.percentile_levels)


def _summarize(v: np.ndarray, n_channels: int, levels: tuple[float, ...]) -> StatsSummary:
    finite = np.isfinite(v)
    count = finite.sum(axis=0)
    vz = np.where(finite, v, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, vz.sum(axis=0) / np.maximum(count, 1), np.nan)
        rms = np.where(count > 0, np.sqrt((vz * vz).sum(axis=0) / np.maximum(count, 1)), np.nan)
    max_abs = np.where(count > 0, np.abs(vz).max(axis=0, initial=0.0), np.nan)
    if levels and v.shape[0]:
        absv = np.where(finite, np.abs(v), np.nan)
        pct = np.full((len(levels), n_channels), np.nan)
        has = count > 0
        if has.any():
            pct[:, has] = np.nanpercentile(absv[:, has], levels, axis=0)
    else:
        pct = np.full((len(levels), n_channels), np.nan)
    return StatsSummary(count, rms, max_abs, mean, pct, levels)


class RunStats:
    """Whole-run accumulators per channel in constant memory.

    Count, mean, RMS and max |x| are exact; |x| percentiles come from a histogram
    with log-spaced bins (``bins_per_decade`` per decade between ``min_abs`` and
    ``max_abs``), so they are exact to within one bin (about 12 % at 20 per decade).

    Args:
        n_channels: values per sample.
        min_abs: smallest resolved |x| (smaller values fall in the first bin).
        max_abs: largest resolved |x| (larger values fall in the last bin).
        bins_per_decade: histogram resolution.
        percentile_levels: percentiles of |value| reported, in percent.

    Raises:
        ConfigError: if a parameter is out of range.
    """

    def __init__(
        self,
        n_channels: int = 1,
        min_abs: float = 1e-9,
        max_abs: float = 1e6,
        bins_per_decade: int = 20,
        percentile_levels: Sequence[float] = (50.0, 95.0, 99.0),
    ) -> None:
        if int(n_channels) < 1:
            raise ConfigError(f"RunStats n_channels must be >= 1, got {n_channels}")
        if not 0.0 < min_abs < max_abs or int(bins_per_decade) < 1:
            raise ConfigError(
                f"RunStats needs 0 < min_abs < max_abs and bins_per_decade >= 1, got "
                f"{min_abs}, {max_abs}, {bins_per_decade}"
            )
        self.n_channels = int(n_channels)
        self.percentile_levels = _check_levels(percentile_levels)
        n_bins = int(math.ceil(math.log10(max_abs / min_abs) * int(bins_per_decade)))
        self._log_min = math.log10(min_abs)
        self._bins_per_decade = int(bins_per_decade)
        self._edges = 10.0 ** (self._log_min + np.arange(n_bins + 1) / self._bins_per_decade)
        self._hist = np.zeros((self.n_channels, n_bins), dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        """Zero every accumulator."""
        self._hist[:] = 0
        self.count = np.zeros(self.n_channels, dtype=np.int64)
        self._sum = np.zeros(self.n_channels)
        self._sumsq = np.zeros(self.n_channels)
        self.max_abs = np.full(self.n_channels, np.nan)
        self.non_finite = np.zeros(self.n_channels, dtype=np.int64)

    def update(self, values: float | np.ndarray) -> None:
        """Add one sample (shape (n_channels,)) or a block of samples (shape (n, n_channels))."""
        v = np.asarray(values, dtype=np.float64).reshape(-1, self.n_channels)
        finite = np.isfinite(v)
        self.non_finite += (~finite).sum(axis=0)
        vz = np.where(finite, v, 0.0)
        absv = np.abs(vz)
        self.count += finite.sum(axis=0)
        self._sum += vz.sum(axis=0)
        self._sumsq += (vz * vz).sum(axis=0)
        block_max = np.where(finite, absv, -np.inf).max(axis=0, initial=-np.inf)
        self.max_abs = np.where(
            block_max > -np.inf, np.fmax(self.max_abs, block_max), self.max_abs
        )
        n_bins = self._hist.shape[1]
        with np.errstate(divide="ignore"):
            b = np.floor((np.log10(absv) - self._log_min) * self._bins_per_decade)
        b = np.clip(np.nan_to_num(b, nan=0.0, neginf=0.0, posinf=n_bins - 1), 0, n_bins - 1).astype(np.intp)
        for ch in range(self.n_channels):
            np.add.at(self._hist[ch], b[finite[:, ch], ch], 1)

    def summary(self) -> StatsSummary:
        """Count, RMS, max |x|, mean and approximate |x| percentiles per channel."""
        has = self.count > 0
        n = np.maximum(self.count, 1)
        mean = np.where(has, self._sum / n, np.nan)
        rms = np.where(has, np.sqrt(self._sumsq / n), np.nan)
        pct = np.full((len(self.percentile_levels), self.n_channels), np.nan)
        centres = np.sqrt(self._edges[:-1] * self._edges[1:])
        for ch in np.flatnonzero(has):
            cum = np.cumsum(self._hist[ch])
            for k, level in enumerate(self.percentile_levels):
                rank = max(1, int(math.ceil(level / 100.0 * cum[-1])))
                pct[k, ch] = centres[int(np.searchsorted(cum, rank))]
        return StatsSummary(self.count.copy(), rms, self.max_abs.copy(), mean, pct, self.percentile_levels)
