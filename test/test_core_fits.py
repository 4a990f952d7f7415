"""The delay/gain/offset fit of the real joints on the sim's, on inputs whose answer is known."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from sim_real_bridge.core.buffers import StreamBuffer
from sim_real_bridge.core.fits import FitConfig, fit_windows, schedule
from sim_real_bridge.core.joint_names import pair_joints

MS = 1_000_000
S = 1_000_000_000
PERIOD_NS = 4 * MS  # 250 Hz joint states
NAMES = ("j1", "j2", "j3")
CONFIG = FitConfig(window_ns=1 * S, step_ns=20 * MS, delay_step_ns=10 * MS,
                   delays_ns=10 * MS * np.arange(26), max_gap_ns=50 * MS, min_motion_rad=0.005)
JOINTS, _ = pair_joints(NAMES, NAMES)


def _q(t_s: np.ndarray) -> np.ndarray:
    """(n, 3) a smooth multi-joint motion (several frequencies: the delay is unambiguous)."""
    t = t_s[:, None]
    return 0.4 * np.sin(2 * np.pi * 0.7 * t + np.arange(3)) + 0.15 * np.sin(2 * np.pi * 1.9 * t + 2 * np.arange(3))


def _buffer(q: np.ndarray, times: np.ndarray) -> StreamBuffer:
    buffer = StreamBuffer(3 * q.shape[1])
    buffer.extend(times, times + 1 * MS, np.hstack((q, np.zeros_like(q), np.zeros_like(q))))
    return buffer


def _pair(real_of: Callable[[np.ndarray], np.ndarray], duration_s: float = 6.0) -> tuple[StreamBuffer, StreamBuffer]:
    """Sim and real joint buffers at 250 Hz; real q = real_of(sim time in s)."""
    times = 1 * S + PERIOD_NS * np.arange(int(duration_s * 250), dtype=np.int64)
    t_s = (times - 1 * S) * 1e-9
    return _buffer(_q(t_s), times), _buffer(real_of(t_s), times)


def _ends(*at_s: float) -> np.ndarray:
    return np.array([1 * S + int(t * S) for t in at_s], dtype=np.int64)


def test_real_delayed_by_60_ms_fits_a_delay_of_60_ms() -> None:
    sim, real = _pair(lambda t: _q(t - 0.060))
    got = fit_windows(_ends(2.0, 3.5, 5.0), sim, real, JOINTS, CONFIG)
    for fit in got:
        assert fit is not None and fit.identifiable
        assert fit.delay_s == pytest.approx(0.06)
        assert fit.gain == pytest.approx(1.0, abs=0.02)
        assert fit.explained > 0.99
        assert fit.fit_rms_rad < 0.05 * fit.residual_rms_rad


def test_a_delay_common_to_every_joint_leaves_nothing_to_joint_delays() -> None:
    rng = np.random.default_rng(3)
    sim, real = _pair(lambda t: _q(t - 0.040) + rng.normal(0, 2e-4, (len(t), 3)))
    fit = fit_windows(_ends(3.0), sim, real, JOINTS, CONFIG)[0]
    assert fit is not None and fit.delay_s == pytest.approx(0.04)
    assert fit.joint_delay_share < 0.05


def test_joints_lagging_by_their_own_delays_are_explained_by_joint_delays() -> None:
    # a softer loop lags each joint by its own time constant, here 0, 30 and 90 ms
    lags_s = np.array([0.0, 0.03, 0.09])
    sim, real = _pair(lambda t: np.column_stack([_q(t - lag)[:, j] for j, lag in enumerate(lags_s)]))
    fit = fit_windows(_ends(3.0), sim, real, JOINTS, CONFIG)[0]
    assert fit is not None and fit.joint_delay_share > 0.9


def test_a_softer_response_fits_its_gain() -> None:
    sim, real = _pair(lambda t: 0.8 * _q(t))
    fit = fit_windows(_ends(3.0), sim, real, JOINTS, CONFIG)[0]
    assert fit is not None and fit.identifiable
    assert fit.delay_s == pytest.approx(0.0) and fit.gain == pytest.approx(0.8, abs=0.03)
    assert fit.explained > 0.9


def test_a_constant_offset_is_explained_without_delay_or_gain() -> None:
    sim, real = _pair(lambda t: _q(t) + np.array([0.02, -0.01, 0.03]))
    fit = fit_windows(_ends(3.0), sim, real, JOINTS, CONFIG)[0]
    assert fit is not None
    assert fit.delay_s == pytest.approx(0.0) and fit.gain == pytest.approx(1.0, abs=1e-6)
    assert fit.explained > 0.999 and fit.residual_rms_rad == pytest.approx(np.sqrt((0.02**2 + 0.01**2 + 0.03**2) / 3))


def test_noise_is_not_explained() -> None:
    rng = np.random.default_rng(7)
    noise = rng.normal(0, 0.02, (1500, 3))
    sim, real = _pair(lambda t: _q(t) + noise[:len(t)])
    fit = fit_windows(_ends(3.0), sim, real, JOINTS, CONFIG)[0]
    assert fit is not None and fit.explained < 0.2
    assert fit.residual_rms_rad == pytest.approx(0.02, rel=0.15)


def test_identical_sides_leave_nothing_to_explain() -> None:
    sim, real = _pair(_q)
    fit = fit_windows(_ends(3.0), sim, real, JOINTS, CONFIG)[0]
    assert fit is not None
    assert (fit.delay_s, fit.gain, fit.residual_rms_rad, fit.fit_rms_rad) == (0.0, 1.0, 0.0, 0.0)
    assert fit.explained == 1.0


def test_without_sim_motion_delay_and_gain_are_not_identifiable() -> None:
    times = 1 * S + PERIOD_NS * np.arange(1500, dtype=np.int64)
    still = np.tile([0.1, 0.2, 0.3], (1500, 1))
    fit = fit_windows(_ends(3.0), _buffer(still, times), _buffer(still + 0.01, times), JOINTS, CONFIG)[0]
    assert fit is not None and not fit.identifiable
    assert fit.delay_s == 0.0 and fit.gain == 1.0


def test_a_window_mostly_without_the_real_side_is_not_fitted() -> None:
    sim, _ = _pair(_q)
    times = 1 * S + PERIOD_NS * np.arange(1500, dtype=np.int64)
    t_s = (times - 1 * S) * 1e-9
    keep = (t_s < 2.0) | (t_s > 2.6)  # 0.6 s of the 1 s window lost (more than 50 ms: not interpolated)
    real = _buffer(_q(t_s[keep]), times[keep])
    got = fit_windows(_ends(2.7, 4.5), sim, real, JOINTS, CONFIG)
    assert got[0] is None and got[1] is not None


def test_windows_fitted_together_equal_windows_fitted_alone() -> None:
    sim, real = _pair(lambda t: 1.1 * _q(t - 0.03) + 0.01)
    ends = _ends(1.5, 2.02, 3.3, 4.94)
    together = fit_windows(ends, sim, real, JOINTS, CONFIG)
    for end, fit in zip(ends, together, strict=True):
        alone = fit_windows(np.array([end]), sim, real, JOINTS, CONFIG)[0]
        assert fit is not None and alone is not None
        assert fit.delay_s == alone.delay_s and fit.identifiable == alone.identifiable
        assert fit.gain == pytest.approx(alone.gain, rel=1e-9)
        assert fit.explained == pytest.approx(alone.explained, rel=1e-9)
    assert fit_windows(np.zeros(0, np.int64), sim, real, JOINTS, CONFIG) == []


def test_fits_run_every_period_on_valid_rows_only() -> None:
    t = np.arange(0, 1000, 20) * MS
    valid = np.ones(len(t), dtype=bool)
    valid[10:13] = False  # 200..240 ms invalid
    rows = schedule(t, valid, None, 100 * MS)
    assert [int(t[r] // MS) for r in rows] == [0, 100, 260, 360, 460, 560, 660, 760, 860, 960]
    # Carried from the previous batch: the first fit waits a period after the last one.
    assert [int(t[r] // MS) for r in schedule(t, np.ones(len(t), bool), -40 * MS, 100 * MS)][:2] == [60, 160]
