"""ResidualLedger: shares of residual energy by category, run and window."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.core.ledger import UNEXPLAINED, ResidualLedger, residual_energy
from sim_real_bridge.errors import ConfigError

CATS = ("dynamics", "contact", "sensor", "human", "unauthored")
S = 1_000_000_000


def test_residual_energy_per_row() -> None:
    q = np.array([[0.01, -0.01], [np.nan, 0.02], [np.nan, np.nan]])
    energy = residual_energy(q, np.array([2.0, np.nan, 4.0]), q_scale_rad=0.01, force_scale_n=2.0)
    # (1 + 1) / 2 + 1; the known joint alone, no force; no joint known, the force alone.
    np.testing.assert_allclose(energy, [2.0, 4.0, 4.0])
    assert residual_energy(np.zeros((1, 0)), np.array([4.0]), 0.01, 2.0).tolist() == [4.0]
    with pytest.raises(ConfigError, match="scales must be > 0"):
        residual_energy(np.zeros((1, 2)), np.zeros(1), q_scale_rad=0.0)


def test_shares_over_run_and_window() -> None:
    ledger = ResidualLedger(CATS, window_s=10.0)
    for i in range(100):  # 0..9.9 s: dynamics, energy 1 per tick
        ledger.add(int(i * 0.1 * S), "dynamics", 1.0)
    for i in range(100, 200):  # 10..19.9 s: unexplained, energy 3 per tick
        ledger.add(int(i * 0.1 * S), None, 3.0)
    rows, un_run, un_win = ledger.rows()
    by = {r.category: r for r in rows}
    assert by["dynamics"].share_run == pytest.approx(0.25)
    assert un_run == pytest.approx(0.75)
    assert by["dynamics"].share_window == pytest.approx(0.0, abs=0.02)
    assert un_win == pytest.approx(1.0, abs=0.02)
    total = sum(r.share_run for r in rows) + un_run
    assert total == pytest.approx(1.0)


def test_event_counts_and_dict() -> None:
    ledger = ResidualLedger(CATS, window_s=5.0)
    ledger.count_event("human")
    ledger.count_event("human")
    ledger.add(0, "none", 1.0)
    d = ledger.as_dict()
    assert d["categories"]["human"]["event_count"] == 2
    assert d["unexplained_share_run"] == 1.0
    assert UNEXPLAINED not in d["categories"]
    ledger.move_event("human", "dynamics")  # (an event handed over)
    d = ledger.as_dict()
    assert d["categories"]["human"]["event_count"] == 1 and d["categories"]["dynamics"]["event_count"] == 1


def test_empty_ledger_and_bad_energy_ignored() -> None:
    ledger = ResidualLedger(CATS)
    ledger.add(0, "contact", float("nan"))
    ledger.add(0, "contact", -1.0)
    rows, un_run, un_win = ledger.rows()
    assert all(r.share_run == 0.0 for r in rows) and un_run == 0.0 and un_win == 0.0


def test_errors() -> None:
    with pytest.raises(ConfigError, match="window_s must be > 0"):
        ResidualLedger(CATS, window_s=0.0)
    with pytest.raises(ConfigError, match="unknown ledger category 'bogus'"):
        ResidualLedger(CATS).add(0, "bogus", 1.0)
