"""Tests of rolling and run-level statistics (sim_real_bridge.core.stats)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_real_bridge.core.stats import RollingStats, RunStats
from sim_real_bridge.errors import ConfigError

MS = 1_000_000


def test_rolling_window_keeps_only_recent_samples():
    stats = RollingStats(window_ns=100 * MS, n_channels=1)
    for k in range(20):
        stats.push(k * 10 * MS, float(k))
    summary = stats.summary()
    # Window (90 ms, 190 ms]: samples 10..19.
    assert summary.count.tolist() == [10]
    values = np.arange(10, 20, dtype=float)
    assert summary.rms[0] == pytest.approx(np.sqrt(np.mean(values**2)))
    assert summary.max_abs[0] == 19.0
    assert summary.mean[0] == pytest.approx(14.5)
    np.testing.assert_allclose(summary.percentiles[:, 0], np.percentile(values, [50, 95, 99]))


def test_rolling_window_can_end_at_a_given_time():
    stats = RollingStats(window_ns=50 * MS)
    for k in range(10):
        stats.push(k * 10 * MS, float(k))
    # Window (-5 ms, 45 ms]: samples at 0, 10, 20, 30 and 40 ms.
    assert stats.summary(now_ns=45 * MS).count.tolist() == [5]
    t, v = stats.window(now_ns=45 * MS)
    assert t.tolist() == [0, 10 * MS, 20 * MS, 30 * MS, 40 * MS]
    assert v[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_nan_is_kept_out_of_its_channel_only():
    stats = RollingStats(window_ns=1_000 * MS, n_channels=2)
    stats.push(0, [1.0, np.nan])
    stats.push(MS, [-3.0, 2.0])
    summary = stats.summary()
    assert summary.count.tolist() == [2, 1]
    assert summary.max_abs.tolist() == [3.0, 2.0]
    assert summary.mean.tolist() == [-1.0, 2.0]


def test_empty_channel_reports_nan():
    stats = RollingStats(window_ns=MS, n_channels=2)
    summary = stats.summary()
    assert summary.count.tolist() == [0, 0]
    assert np.isnan(summary.rms).all() and np.isnan(summary.percentiles).all()


def test_memory_is_bounded_by_max_samples():
    stats = RollingStats(window_ns=10**12, max_samples=8)
    for k in range(100):
        stats.push(k, float(k))
    t, v = stats.window()
    assert t.tolist() == list(range(92, 100))


def test_stale_samples_are_counted_and_dropped():
    stats = RollingStats(window_ns=10 * MS)
    stats.push(5 * MS, 1.0)
    stats.push(4 * MS, 100.0)
    assert stats.stale_count == 1 and stats.summary().max_abs[0] == 1.0
    stats.reset()
    assert stats.summary().count[0] == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"window_ns": 0}, "window_ns must be > 0"),
        ({"window_ns": 1, "n_channels": 0}, "n_channels >= 1"),
        ({"window_ns": 1, "percentile_levels": (50, 101)}, r"must lie in \[0, 100\]"),
    ],
)
def test_rolling_stats_rejects_bad_settings(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        RollingStats(**kwargs)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=80), st.integers(1, 100))
def test_property_rolling_matches_numpy_on_the_window(values, window_samples):
    stats = RollingStats(window_ns=window_samples * MS, max_samples=128)
    for k, v in enumerate(values):
        stats.push(k * MS, v)
    expected = np.array(values[-window_samples:])
    summary = stats.summary()
    assert summary.count[0] == expected.size
    assert summary.rms[0] == pytest.approx(np.sqrt(np.mean(expected**2)), rel=1e-9, abs=1e-12)
    assert summary.max_abs[0] == pytest.approx(np.max(np.abs(expected)))
    np.testing.assert_allclose(summary.percentiles[:, 0], np.percentile(np.abs(expected), [50, 95, 99]))


# -- run-level --------------------------------------------------------------------------


def test_run_stats_exact_moments_and_approximate_percentiles():
    rng = np.random.default_rng(0)
    data = rng.normal(0.0, 0.01, size=(5000, 2)) + np.array([0.0, 0.02])
    run = RunStats(2)
    for block in np.array_split(data, 7):
        run.update(block)
    summary = run.summary()
    assert summary.count.tolist() == [5000, 5000]
    np.testing.assert_allclose(summary.mean, data.mean(axis=0))
    np.testing.assert_allclose(summary.rms, np.sqrt(np.mean(data**2, axis=0)))
    np.testing.assert_allclose(summary.max_abs, np.abs(data).max(axis=0))
    exact = np.percentile(np.abs(data), [50, 95, 99], axis=0)
    np.testing.assert_allclose(summary.percentiles, exact, rtol=0.13)


def test_run_stats_single_samples_and_non_finite():
    run = RunStats(2)
    run.update([1.0, np.nan])
    run.update([np.inf, 2.0])
    summary = run.summary()
    assert summary.count.tolist() == [1, 1]
    assert run.non_finite.tolist() == [1, 1]
    assert summary.max_abs.tolist() == [1.0, 2.0]
    run.reset()
    assert run.summary().count.tolist() == [0, 0] and np.isnan(run.summary().rms).all()


def test_run_stats_rejects_bad_settings():
    with pytest.raises(ConfigError, match="n_channels must be >= 1"):
        RunStats(0)
    with pytest.raises(ConfigError, match="0 < min_abs < max_abs"):
        RunStats(1, min_abs=1.0, max_abs=0.5)
