"""Scoring: the matching rule of evaluation/scoring.py and the per-category figures built on it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_real_bridge.evaluation.scoring import (
    CATEGORIES,
    MATCH_AFTER_S,
    MATCH_BEFORE_S,
    event_matches_truth,
    events_per_10min,
    match_matrix,
    score_events,
)
from sim_real_bridge.errors import ConfigError


def ev(cat: str, start: float, end: float | None) -> dict:
    return {"category": cat, "start_s": start, "end_s": end}


def tr(cat: str, start: float, end: float, kind: str = "k") -> dict:
    return {"category": cat, "kind": kind, "start_s": start, "end_s": end}


# ------------------------------------------------------------------ the matching rule
@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (ev("contact", 12.0, 13.0), True),  # inside
        (ev("contact", 5.0, 30.0), True),  # covers it
        (ev("contact", 9.0, 9.5), True),  # ends exactly at start - 0.5 (closed interval)
        (ev("contact", 9.0, 9.4999), False),  # ends just before the widened start
        (ev("contact", 22.0, 23.0), True),  # starts exactly at end + 2
        (ev("contact", 22.0001, 23.0), False),  # starts just after the widened end
        (ev("contact", 21.9, 21.95), True),  # inside the after-widening only
        (ev("contact", 9.6, 9.7), True),  # inside the before-widening only
        (ev("dynamics", 12.0, 13.0), False),  # other category never matches
        (ev("contact", 0.0, None), True),  # still open: extends to +inf
        (ev("contact", 25.0, None), False),  # open but starts too late
    ],
)
def test_matching_rule_edges(event: dict, expected: bool) -> None:
    truth = tr("contact", 10.0, 20.0)
    assert event_matches_truth(event, truth) is expected


def test_widening_constants_are_the_design_values() -> None:
    assert (MATCH_BEFORE_S, MATCH_AFTER_S) == (0.5, 2.0)


def test_custom_widening_changes_the_verdict() -> None:
    event, truth = ev("sensor", 22.5, 23.0), tr("sensor", 10.0, 20.0)
    assert not event_matches_truth(event, truth)
    assert event_matches_truth(event, truth, after_s=2.5)


def test_match_matrix_is_many_to_many() -> None:
    events = [ev("human", 1.0, 2.0), ev("human", 3.0, 4.0), ev("human", 50.0, 51.0)]
    truth = [tr("human", 1.5, 3.5), tr("human", 2.5, 2.8)]
    m = match_matrix(events, truth)
    assert m.tolist() == [[True, True], [True, True], [False, False]]


# ------------------------------------------------------------------ per-category figures
def test_perfect_run() -> None:
    out = score_events([ev("contact", 8.3, 21.7)], [tr("contact", 8.0, 22.0)], duration_s=30.0)
    block = out["per_category"]["contact"]
    assert (block["precision"], block["recall"], block["f1"]) == (1.0, 1.0, 1.0)
    assert block["delays_s"] == pytest.approx([0.3])
    assert block["median_delay_s"] == pytest.approx(0.3)
    assert block["false_events"] == 0
    assert out["overall"]["macro_f1"] == 1.0


def test_false_event_and_missed_truth() -> None:
    events = [ev("contact", 8.3, 21.7), ev("human", 40.0, 41.0)]
    truth = [tr("contact", 8.0, 22.0), tr("sensor", 50.0, 52.0)]
    out = score_events(events, truth, duration_s=60.0)
    human = out["per_category"]["human"]
    assert (human["precision"], human["recall"], human["f1"]) == (0.0, 1.0, 0.0)
    assert human["false_events_per_10min"] == pytest.approx(10.0)
    sensor = out["per_category"]["sensor"]
    assert (sensor["precision"], sensor["recall"], sensor["f1"]) == (1.0, 0.0, 0.0)
    assert sensor["median_delay_s"] is None
    # categories with neither events nor truth do not count in the macro F1
    assert out["overall"]["macro_f1"] == pytest.approx((1.0 + 0.0 + 0.0) / 3)


def test_split_detection_counts_both_events_as_true() -> None:
    events = [ev("contact", 8.1, 8.8), ev("contact", 13.5, 19.8)]
    out = score_events(events, [tr("contact", 8.0, 22.0)])
    block = out["per_category"]["contact"]
    assert block["matched_events"] == 2 and block["precision"] == 1.0
    assert block["delays_s"] == pytest.approx([0.1])  # earliest matching event


def test_negative_delay_when_event_precedes_truth() -> None:
    out = score_events([ev("dynamics", 9.7, 12.0)], [tr("dynamics", 10.0, 11.0)])
    assert out["per_category"]["dynamics"]["median_delay_s"] == pytest.approx(-0.3)


def test_median_delay_over_several_truths() -> None:
    truth = [tr("sensor", 10.0, 11.0), tr("sensor", 20.0, 21.0), tr("sensor", 30.0, 31.0)]
    events = [ev("sensor", 10.1, 10.5), ev("sensor", 20.4, 20.9), ev("sensor", 31.5, 32.0)]
    out = score_events(events, truth)
    assert out["per_category"]["sensor"]["median_delay_s"] == pytest.approx(0.4)


def test_empty_inputs() -> None:
    out = score_events([], [], duration_s=600.0)
    for cat in CATEGORIES:
        block = out["per_category"][cat]
        assert (block["precision"], block["recall"], block["f1"]) == (1.0, 1.0, 1.0)
    assert out["overall"]["nominal_events_per_10min"] == 0.0
    assert out["overall"]["macro_f1"] == 1.0


def test_nominal_rate() -> None:
    out = score_events([ev("dynamics", 1.0, 2.0), ev("human", 5.0, 6.0)], [], duration_s=1200.0)
    assert out["overall"]["nominal_events_per_10min"] == pytest.approx(1.0)
    assert events_per_10min(3, 300.0) == pytest.approx(6.0)


def test_unknown_category_is_reported_too() -> None:
    out = score_events([ev("weird", 1.0, 2.0)], [])
    assert out["per_category"]["weird"]["precision"] == 0.0


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("events", "truth", "match"),
    [
        ([{"start_s": 1.0, "end_s": 2.0}], [], "needs 'category'"),
        ([{"category": "x", "start_s": "soon"}], [], "numeric 'start_s'"),
        ([ev("x", 3.0, 2.0)], [], r"events\[0\] ends before it starts"),
        ([], [tr("x", 1.0, float("nan"))], r"truth\[0\] has a NaN"),
    ],
)
def test_bad_entries_raise(events: list, truth: list, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        score_events(events, truth)


def test_bad_duration_and_widening_raise() -> None:
    with pytest.raises(ConfigError, match="duration_s must be > 0"):
        score_events([], [], duration_s=0.0)
    with pytest.raises(ConfigError, match="widening must be >= 0"):
        match_matrix([], [], before_s=-1.0)
    with pytest.raises(ConfigError, match="duration_s must be > 0"):
        events_per_10min(1, -5.0)
    with pytest.raises(ConfigError, match="n_events must be >= 0"):
        events_per_10min(-1, 5.0)


# ------------------------------------------------------------------ properties
windows = st.tuples(st.floats(0, 100, allow_nan=False), st.floats(0, 20, allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(windows, windows)
def test_match_equals_gap_test(e: tuple[float, float], t: tuple[float, float]) -> None:
    """Matching is equivalent to: the gap between the windows is within the widening."""
    e_start, e_len = e
    t_start, t_len = t
    event, truth = ev("c", e_start, e_start + e_len), tr("c", t_start, t_start + t_len)
    gap_before = t_start - (e_start + e_len)  # event entirely before truth
    gap_after = e_start - (t_start + t_len)  # event entirely after truth
    expected = gap_before <= MATCH_BEFORE_S and gap_after <= MATCH_AFTER_S
    assert event_matches_truth(event, truth) is expected


@settings(max_examples=100, deadline=None)
@given(st.lists(windows, max_size=6), st.lists(windows, max_size=6))
def test_scores_are_bounded_and_consistent(events_w: list, truth_w: list) -> None:
    events = [ev("c", s, s + d) for s, d in events_w]
    truth = [tr("c", s, s + d) for s, d in truth_w]
    block = score_events(events, truth, categories=("c",))["per_category"]["c"]
    assert 0.0 <= block["f1"] <= 1.0
    assert block["matched_events"] <= len(events) and block["matched_truth"] <= len(truth)
    assert len(block["delays_s"]) == block["matched_truth"]
    if block["delays_s"]:
        assert min(block["delays_s"]) >= -MATCH_BEFORE_S - max(d for _, d in events_w) - 1e-9
    assert math.isclose(block["precision"], 1.0 if not events else block["matched_events"] / len(events))
