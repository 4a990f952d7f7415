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

from sim_real_bridge.core.engine import EngineConfig, _fits, _plan_fits
from sim_real_bridge.offline.replay_engine import CommandStream, JointStream, replay_columns

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
NAMES = tuple(f"joint{i}" for i in range(1, 8))


def _bits(fits: list) -> list:
    return [(None if fit is None else struct.pack("<5d", *astuple(fit)), counted) for fit, counted in fits]


def _grid_windows(rng: np.random.Generator, windows: int, n: int, d: int, joints: int = 7,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """real (F, n, J), the sim grid rows (F, rows, J) and their view (n, F, D, J) as the plan
    makes it: samples 2 rows apart, delays 1 row back each (a negative stride)."""
    rows = 2 * (n - 1) + d
    grid = rng.normal(0, 0.3, (windows, rows, joints)) * 10.0 ** rng.integers(-3, 3, (windows, 1, joints))
    grid[:, :, 3] = -0.0  # a frozen joint
    grid[1] = 0.25  # a window without motion
    s = grid.strides
    sim = np.lib.stride_tricks.as_strided(grid[:, d - 1], shape=(n, windows, d, joints),
                                          strides=(2 * s[1], s[0], -s[1], s[2]), writeable=False)
    real = sim[:, :, 3].transpose(1, 0, 2) * 1.1 + rng.normal(0, 0.01, (windows, n, joints))
    real[2] = sim[:, 2, 0]  # a window in agreement
    return np.ascontiguousarray(real), grid, sim


@pytest.mark.parametrize("n", [50, 41])
def test_fits_of_a_grid_view_have_the_bits_of_a_contiguous_copy(n: int) -> None:
    """A view with the delays stepping backwards (turned inside _fits) fits as its copy does."""
    rng = np.random.default_rng(21)
    delays = np.arange(26) * 0.01
    real, _, sim = _grid_windows(rng, 9, n, 26)
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
    burst, a dropout and a still stretch."""
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
        q = q + rng.normal(0, 1e-4, q.shape)
        recv = stamps + 300_000 + rng.integers(0, 200_000, n)
        recv = np.maximum.accumulate(recv)
        streams.append(JointStream(side, recv[keep], stamps[keep], NAMES, q[keep], np.gradient(q, 0.002, axis=0)[keep],
                                   2.0 * np.sin(q[keep])))
    return streams


@pytest.mark.parametrize("fit", [{}, {"fit_delay_step_s": 0.015, "fit_max_delay_s": 0.15}, {"fit_max_delay_s": 0.005},
                                 {"fit_window_s": 0.3, "fit_max_delay_s": 0.05}])
def test_planned_fits_equal_the_live_fit_of_each_window(fit: dict) -> None:
    """_plan_fits' batched fits equal ``_fit_at`` (the live fit from the visible samples) at
    every grid time it plans: sample and delay steps 2:1 or 4:3 grid rows (rows between
    them unused), one delay, a short window."""
    config = EngineConfig(buffer_s=100.0, **fit)
    engine = replay_columns(_joint_streams(4), config).engine
    plan = engine._grid_plan
    assert plan is not None
    ticks = list(range(0, plan.size, 3))
    times = plan.t0_ns + np.asarray(ticks, dtype=np.int64) * plan.dt_ns
    planned = _plan_fits(engine, times, ticks)
    for k, (result, checks) in planned.items():
        for series, need, first in checks:
            assert need <= series._n and first >= series._start
        assert _bits([result]) == _bits([engine._fit_at(int(plan.t0_ns + k * plan.dt_ns))]), k
    assert len(planned) > 0.5 * len(ticks)
    assert sum(counted for (_, counted), _ in planned.values()) > 0.5 * len(planned)
