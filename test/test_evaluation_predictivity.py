"""Predictivity statistics: hand-computed values, properties, and every error path."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_real_bridge.evaluation.predictivity import (
    average_ranks,
    episode_predictivity,
    mmrv,
    pearson,
    spearman,
    srcc,
)
from sim_real_bridge.errors import ConfigError


def test_pearson_perfect_and_anti_correlation():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [6, 4, 2]) == pytest.approx(-1.0)


def test_pearson_hand_computed():
    # centred x = y-permuted (-1.5, -.5, .5, 1.5): cross sum 4, each sum of squares 5.
    assert pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)


def test_average_ranks_share_ties():
    np.testing.assert_allclose(average_ranks([10, 20, 20, 30]), [1, 2.5, 2.5, 4])
    np.testing.assert_allclose(average_ranks([3, 1, 3, 3]), [3, 1, 3, 3])


def test_spearman_with_ties_hand_computed():
    # ranks (1, 2.5, 2.5, 4) vs (1, 2, 3, 4): cross 4.5, squares 4.5 and 5 -> sqrt(0.9).
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(math.sqrt(0.9))


def test_spearman_sees_monotone_relation_pearson_does_not():
    x = [1, 2, 3, 4]
    y = [1, 8, 27, 64]
    assert spearman(x, y) == pytest.approx(1.0)
    assert pearson(x, y) < 0.99


def test_srcc_is_pearson_across_policies():
    sim = [0.2, 0.5, 0.9]
    real = [0.1, 0.3, 0.2]
    assert srcc(sim, real) == pytest.approx(pearson(sim, real))


def test_mmrv_zero_when_orders_agree():
    assert mmrv([0.1, 0.2, 0.3], [0.05, 0.5, 0.9]) == 0.0


def test_mmrv_fully_reversed_hand_computed():
    # rows: max violation 0.2, 0.1, 0.2 -> mean 0.5 / 3.
    assert mmrv([0.3, 0.2, 0.1], [0.1, 0.2, 0.3]) == pytest.approx(0.5 / 3)


def test_mmrv_single_swap_hand_computed():
    # only policies 0 and 1 are swapped; each sees |0.4 - 0.3| = 0.1, policy 2 sees 0.
    assert mmrv([0.5, 0.6, 0.9], [0.4, 0.3, 0.8]) == pytest.approx(0.2 / 3)


def test_mmrv_sim_tie_counts_real_tie_does_not():
    assert mmrv([0.5, 0.5], [0.2, 0.8]) == pytest.approx(0.3)
    assert mmrv([0.2, 0.8], [0.5, 0.5]) == 0.0


def _mmrv_loop(sim, real):
    """The SIMPLER definition written as its double loop."""
    out = []
    for i in range(len(sim)):
        worst = 0.0
        for j in range(len(sim)):
            if (sim[i] > sim[j]) != (real[i] > real[j]):
                worst = max(worst, abs(real[i] - real[j]))
        out.append(worst)
    return sum(out) / len(out)


rates = st.lists(st.integers(0, 10).map(lambda k: k / 10), min_size=2, max_size=8)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_mmrv_matches_double_loop(data):
    sim = data.draw(rates)
    real = data.draw(st.lists(st.integers(0, 10).map(lambda k: k / 10), min_size=len(sim), max_size=len(sim)))
    assert mmrv(sim, real) == pytest.approx(_mmrv_loop(sim, real))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-1000, 1000), min_size=3, max_size=10, unique=True), st.randoms())
def test_spearman_invariant_under_monotone_transform(x, rnd):
    y = list(x)
    rnd.shuffle(y)
    if len(set(y)) < 2:
        return
    base = spearman(x, y)
    assert spearman([math.atan(v) for v in x], [v**3 for v in y]) == pytest.approx(base, abs=1e-9)
    assert -1.0 <= base <= 1.0


@pytest.mark.parametrize("fn", [pearson, spearman, srcc, mmrv])
def test_fewer_than_two_values_rejected(fn):
    with pytest.raises(ConfigError, match="at least 2"):
        fn([0.5], [0.5])


@pytest.mark.parametrize("fn", [pearson, spearman, srcc, mmrv])
def test_mismatched_lengths_rejected(fn):
    with pytest.raises(ConfigError, match="differ in length"):
        fn([0.1, 0.2, 0.3], [0.1, 0.2])


@pytest.mark.parametrize("fn", [pearson, spearman, srcc, mmrv])
def test_non_finite_rejected(fn):
    with pytest.raises(ConfigError, match="finite"):
        fn([0.1, float("nan")], [0.1, 0.2])


@pytest.mark.parametrize("fn", [pearson, spearman, srcc, mmrv])
def test_non_numeric_rejected(fn):
    with pytest.raises(ConfigError, match="numeric"):
        fn(["a", "b"], [0.1, 0.2])


@pytest.mark.parametrize("fn", [pearson, spearman, srcc, mmrv])
def test_two_dimensional_rejected(fn):
    with pytest.raises(ConfigError, match="1-D"):
        fn([[0.1, 0.2]], [[0.1, 0.2]])


@pytest.mark.parametrize(("fn", "name"), [(pearson, "pearson"), (spearman, "spearman"), (srcc, "srcc")])
def test_constant_input_is_undefined(fn, name):
    with pytest.raises(ConfigError, match=f"{name}: x is constant"):
        fn([0.5, 0.5, 0.5], [0.1, 0.2, 0.3])
    with pytest.raises(ConfigError, match=f"{name}: y is constant"):
        fn([0.1, 0.2, 0.3], [1.0, 1.0, 1.0])


def test_average_ranks_rejects_2d():
    with pytest.raises(ConfigError, match="1-D"):
        average_ranks([[1, 2]])


def _runs(pairs, policies):
    return [{"sim_success": s, "real_success": r, "policy": p} for (s, r), p in zip(pairs, policies)]


def test_episode_predictivity_per_policy_rates():
    runs = _runs(
        [(1, 1), (1, 0), (0, 0), (0, 0), (1, 1), (1, 1)],
        ["a", "a", "b", "b", "c", "c"],
    )
    out = episode_predictivity(runs)
    assert out["n_runs"] == 6
    rates_by_group = {g["group"]: (g["sim_success_rate"], g["real_success_rate"]) for g in out["groups"]}
    assert rates_by_group == {"a": (1.0, 0.5), "b": (0.0, 0.0), "c": (1.0, 1.0)}
    assert out["policy"]["n_groups"] == 3
    assert out["policy"]["srcc"] == pytest.approx(pearson([1, 0, 1], [0.5, 0, 1]))
    # a and c tie in sim but not in reality: c, which reality ranks higher, sees
    # |1 - 0.5| = 0.5; a and b see no violation.
    assert out["policy"]["mmrv"] == pytest.approx(0.5 / 3)
    assert out["episode"]["pearson"] == pytest.approx(pearson([1, 1, 0, 0, 1, 1], [1, 0, 0, 0, 1, 1]))


def test_episode_predictivity_reports_undefined_with_reason():
    runs = [{"sim_success": True, "real_success": s} for s in (True, False, True)]
    out = episode_predictivity(runs)
    assert out["episode"]["pearson"] is None
    assert "x is constant" in out["episode"]["pearson_reason"]
    assert out["policy"]["n_groups"] == 1
    assert out["policy"]["srcc"] is None
    assert "at least 2 policies" in out["policy"]["srcc_reason"]
    assert out["policy"]["mmrv"] is None


def test_episode_predictivity_accepts_group_key_and_rates():
    runs = [
        {"sim_success": 0.9, "real_success": 0.7, "group": "tuned"},
        {"sim_success": 0.4, "real_success": 0.2, "group": "default"},
    ]
    out = episode_predictivity(runs)
    assert out["policy"]["srcc"] == pytest.approx(1.0)
    assert out["policy"]["mmrv"] == 0.0


def test_episode_predictivity_needs_two_runs():
    with pytest.raises(ConfigError, match="at least 2 labelled runs, got 1"):
        episode_predictivity([{"sim_success": 1, "real_success": 1}])


def test_episode_predictivity_missing_label():
    with pytest.raises(ConfigError, match=r"runs\[1\] has no 'real_success'"):
        episode_predictivity([{"sim_success": 1, "real_success": 1}, {"sim_success": 0}])


def test_episode_predictivity_out_of_range_label():
    with pytest.raises(ConfigError, match=r"runs\[0\]\.sim_success must be in \[0, 1\], got 2"):
        episode_predictivity([{"sim_success": 2, "real_success": 1}, {"sim_success": 0, "real_success": 0}])


def test_episode_predictivity_non_numeric_label():
    with pytest.raises(ConfigError, match=r"runs\[0\]\.real_success must be a bool or a number"):
        episode_predictivity([{"sim_success": 1, "real_success": "yes"}, {"sim_success": 0, "real_success": 0}])


def test_episode_predictivity_non_mapping_run():
    with pytest.raises(ConfigError, match=r"runs\[1\] must be a mapping"):
        episode_predictivity([{"sim_success": 1, "real_success": 1}, (0, 0)])
