"""The delay/gain/offset fits: the plan's batched fits (views of one grid per window) give
the live per-tick fit's bits exactly.

The plan gathers the sim grid rows of a window once and views them as (samples, windows,
delays, joints) with strides (the delays step backwards in memory); ``_fits`` turns such
views, takes the motion from its sums of squares rather than np.std and sums every
window's squares at once. Each shortcut is held here to the plain computation's bits.
"""

from __future__ import annotations

import math
import struct
from dataclasses import astuple

import numpy as np
import pytest

from sim_real_bridge.core.engine import EngineConfig, _fits, _grid_rows, _plan_fits
from sim_real_bridge.offline.replay_engine import CommandStream, JointStream, replay_columns

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
NAMES = tuple(f"joint{i}" for i in range(1, 8))


def _bits(fits: list) -> list:
    return [(None if fit is None else struct.pack("<5d", *astuple(fit)), counted) for fit, counted in fits]


def _grid_windows(rng: np.random.Generator, windows: int, n: int, d: int, joints: int = 7,
                  time_major: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """real (F, n, J), the sim grid rows and their view (n, F, D, J) as the plan makes it:
    samples 2 rows apart, delays 1 row back each (a negative stride); rows (rows, F, J) as
    the plan has them, or (F, rows, J)."""
    rows = 2 * (n - 1) + d
    grid = rng.normal(0, 0.3, (windows, rows, joints)) * 10.0 ** rng.integers(-3, 3, (windows, 1, joints))
    if joints > 3:
        grid[:, :, 3] = -0.0  # a frozen joint
    grid[1] = 0.25  # a window without motion
    if time_major:
        grid = np.ascontiguousarray(grid.transpose(1, 0, 2))
        s = grid.strides
        sim = np.lib.stride_tricks.as_strided(grid[d - 1], shape=(n, windows, d, joints),
                                              strides=(2 * s[0], s[1], -s[0], s[2]), writeable=False)
    else:
        s = grid.strides
        sim = np.lib.stride_tricks.as_strided(grid[:, d - 1], shape=(n, windows, d, joints),
                                              strides=(2 * s[1], s[0], -s[1], s[2]), writeable=False)
    real = sim[:, :, min(3, d - 1)].transpose(1, 0, 2) * 1.1 + rng.normal(0, 0.01, (windows, n, joints))
    real[2] = sim[:, 2, 0]  # a window in agreement
    return np.ascontiguousarray(real), grid, sim


@pytest.mark.parametrize("time_major", [True, False])
@pytest.mark.parametrize("n", [50, 41])
def test_fits_of_a_grid_view_have_the_bits_of_a_contiguous_copy(n: int, time_major: bool) -> None:
    """A view with the delays stepping backwards (turned inside _fits) fits as its copy does,
    and as each window alone."""
    rng = np.random.default_rng(21)
    delays = np.arange(26) * 0.01
    real, _, sim = _grid_windows(rng, 9, n, 26, time_major=time_major)
    assert sim.strides[2] < 0
    viewed = _fits(real, sim, delays, 0.005)
    assert _bits(viewed) == _bits(_fits(real, np.ascontiguousarray(sim), delays, 0.005))
    assert _bits(viewed) == _bits([_fits(real[f:f + 1], sim[:, f:f + 1], delays, 0.005)[0] for f in range(9)])
    assert not viewed[1][1] and viewed[2][0].explained == 1.0 and viewed[0][1]


def test_fit_motion_and_rms_are_np_std_and_np_sum_of_each_window_bit_for_bit() -> None:
    """The motion test uses np.std of the delay-0 samples and the residual rms np.sum of the
    window's squares: thresholds at those exact values decide as they do."""
    rng = np.random.default_rng(22)
    delays = np.arange(5) * 0.01
    n, windows = 50, 12
    real, _, sim = _grid_windows(rng, windows, n, 5)
    for f in range(windows):
        motion = float(np.max(np.std(sim[:, f, 0], axis=0)))
        at, above = (_fits(real[f:f + 1], sim[:, f:f + 1], delays, m)[0] for m in (motion, np.nextafter(motion, np.inf)))
        sst = float(np.sum((real[f] - sim[:, f, 0]) ** 2))
        if sst > 0:
            assert at[1] and not above[1]
            assert at[0].residual_rms_rad == math.sqrt(sst / real[f].size)
    batch = _fits(real, sim, delays, 0.005)
    assert [fit.residual_rms_rad for fit, _ in batch] == [
        math.sqrt(float(np.sum((real[f] - sim[:, f, 0]) ** 2)) / real[f].size) for f in range(windows)]


def _joint_streams(seed: int) -> list:
    """Both sides' joints at 500 Hz for 8 s; the real one late by 30 ms with a gain, a NaN
    burst, a dropout and a still stretch; lone NaN samples on the sim side."""
    rng = np.random.default_rng(seed)
    n = 4000
    stamps = T0 + np.arange(n, dtype=np.int64) * 2_000_000
    t_s = np.arange(n) * 0.002
    streams: list = [CommandStream("sim", np.array([T0 - 5_000_000]), [0], [NAMES], [[]])]
    for side in ("sim", "real"):
        q = 0.4 * np.sin(1.3 * t_s[:, None] + np.arange(7)) * (t_s[:, None] > 0.5)
        q[2500:2900] = q[2500]  # still
        keep = np.ones(n, dtype=bool)
        if side == "real":
            q = np.roll(q, 15, axis=0) * 1.05 + 0.01
            q[1500:1520, 1] = np.nan
            keep[3200:3300] = False
        else:
            q[[1900, 1901, 2000, 2001], 4] = np.nan  # two NaN grid rows: on rows the fits use or not
        q = q + rng.normal(0, 1e-4, q.shape)
        recv = stamps + 300_000 + rng.integers(0, 200_000, n)
        recv = np.maximum.accumulate(recv)
        streams.append(JointStream(side, recv[keep], stamps[keep], NAMES, q[keep], np.gradient(q, 0.002, axis=0)[keep],
                                   2.0 * np.sin(q[keep])))
    return streams


@pytest.mark.parametrize("fit", [{}, {"fit_delay_step_s": 0.015, "fit_max_delay_s": 0.15}, {"fit_max_delay_s": 0.005},
                                 {"fit_window_s": 0.3, "fit_max_delay_s": 0.05},
                                 {"fit_window_s": 0.16, "fit_delay_step_s": 0.2, "fit_max_delay_s": 0.4}])
def test_planned_fits_equal_the_live_fit_of_each_window(fit: dict) -> None:
    """_plan_fits' batched fits equal ``_fit_at`` (the live fit from the visible samples) at
    every grid time it plans, exactly those whose samples are all there: sample and delay
    steps 2:1, 4:3 or 1:10 grid rows (rows between them unused), one delay, a short window."""
    config = EngineConfig(buffer_s=100.0, **fit)
    engine = replay_columns(_joint_streams(4), config).engine
    plan = engine._grid_plan
    assert plan is not None
    ticks = list(range(0, plan.size, 3))
    times = plan.t0_ns + np.asarray(ticks, dtype=np.int64) * plan.dt_ns
    planned = _plan_fits(engine, times, ticks)
    sides = (engine._joints["real"], engine._joints["sim"])
    whole = []  # the ticks whose fitted samples are all on the grids and finite
    for k in ticks:
        at = engine._fit_query(np.array([plan.t0_ns + k * plan.dt_ns]))[:2]
        rows = [_grid_rows(side._grid, a.ravel()) for side, a in zip(sides, at, strict=True)]
        if all((need < np.iinfo(np.int64).max).all() and np.isfinite(side._grid.values[kk, :7]).all()
               for side, (kk, need, _) in zip(sides, rows, strict=True)):
            whole.append(k)
        if k in planned and planned[k][1]:
            # The rows each side needs visible: exactly those of the samples fitted.
            assert [(side, int(need.max()), int(first.min())) for side, (_, need, first) in zip(
                sides, rows, strict=True)] == planned[k][1]
    # Windows reaching back before the first samples with too few left: no fit, whatever is visible.
    early = [k for k in planned if not planned[k][1]]
    assert early and all(planned[k][0] == (None, False) and k not in whole for k in early)
    assert sorted(set(planned) - set(early)) == whole
    assert _plan_fits(engine, times + 1, ticks) == {}  # times off the grid: nothing planned
    for k, (result, checks) in planned.items():
        for series, need, first in checks:
            assert need <= series._n and first >= series._start
        assert _bits([result]) == _bits([engine._fit_at(int(plan.t0_ns + k * plan.dt_ns))]), k
    assert len(planned) > 0.3 * len(ticks)
    assert sum(counted for (_, counted), _ in planned.values()) > 0.5 * len(planned)


def test_live_fit_samples_each_distinct_time_once_with_the_bits_of_all_times() -> None:
    """``_fit_at`` samples the sim at the distinct times of its delays' samples: the fit of
    sampling every (delay, sample) time, interpolated (no grid cache) or from the grid."""
    streams = _joint_streams(6)
    config = EngineConfig(buffer_s=100.0)
    for column_ingest in (False, True):
        engine = replay_columns(streams, config, column_ingest=column_ingest).engine
        assert (engine._joints["sim"]._grid is None) == (not column_ingest)
        j, gap = len(NAMES), engine._max_gap_ns
        checked = 0
        for t in range(T0 + 300_000_000, T0 + 7_900_000_000, 70_000_000):
            times, query, delays = engine._fit_query(np.array([t]))
            n = times.shape[1]
            real = engine._joints["real"].sample(times[0], gap, cols=j)
            sim = engine._joints["sim"].sample(query.ravel(), gap, cols=j).reshape(len(delays), n, j)
            ok = np.all(np.isfinite(real), axis=1) & np.all(np.isfinite(sim), axis=(0, 2))
            if ok.sum() < 0.8 * n:
                assert engine._fit_at(t) == (None, False)
                continue
            real, sim = real[ok], sim[:, ok]
            sim = np.ascontiguousarray(sim.transpose(1, 0, 2))[:, None]
            want = _fits(real[None], sim, delays, config.fit_min_motion_rad)
            assert _bits([engine._fit_at(t)]) == _bits(want), t
            checked += 1
        assert checked > 60


@pytest.mark.parametrize("real_time_major", [True, False])
@pytest.mark.parametrize("joints", [1, 2, 7])
def test_fits_of_a_time_major_batch_have_the_bits_of_each_window_alone_for_any_joint_count(
        joints: int, real_time_major: bool) -> None:
    """The plan's batches (sim time-major, real either way) and the live fit (one window,
    contiguous): the same bits also with one joint, where a window alone sums its samples
    pairwise (its only axis)."""
    rng = np.random.default_rng(23)
    delays = np.arange(26) * 0.01
    n, windows = 50, 9
    real, _, sim = _grid_windows(rng, windows, n, 26, joints=joints)
    real_t = np.ascontiguousarray(real.transpose(1, 0, 2)).transpose(1, 0, 2) if real_time_major else real
    batch = _fits(real_t, sim, delays, 0.005)
    alone = [_fits(real[f:f + 1], np.ascontiguousarray(sim[:, f:f + 1]), delays, 0.005)[0] for f in range(windows)]
    assert _bits(batch) == _bits(alone)
