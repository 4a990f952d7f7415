"""Scoring of attributed gap events against the stand-in's truth: the matching rule.

The rule, exactly: an event matches a truth entry of the same category whose window,
widened by ``before_s`` (0.5 s) before its start and ``after_s`` (2 s) after its end,
overlaps the event's window. Windows are closed intervals, so touching counts as
overlap. An event without an end (``end_s`` missing or None, still open) extends to
+infinity. Matching is many-to-many: one event may match several truths and one truth
may be matched by several events.

Per category:
- precision = matched events / events (1.0 when there are no events: nothing was
  falsely claimed);
- recall = matched truths / truths (1.0 when there are no truths: nothing was missed);
- f1 = 2 P R / (P + R) (0.0 when P + R == 0);
- detection delays: for each matched truth, the earliest start among the events that
  match it, minus the truth's start (may be negative, down to -before_s minus the event
  duration); the median of those.

Counts are reported next to every ratio so that anyone can recompute them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from sim_real_bridge.errors import ConfigError

CATEGORIES: tuple[str, ...] = ("dynamics", "contact", "sensor", "human", "unauthored")
MATCH_BEFORE_S = 0.5
MATCH_AFTER_S = 2.0
NOMINAL_PERIOD_S = 600.0


def _window(entry: Mapping[str, Any], what: str, index: int) -> tuple[str, float, float]:
    """Return (category, start_s, end_s) of an event or truth entry, validated."""
    try:
        category = str(entry["category"])
        start_s = float(entry["start_s"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{what}[{index}] needs 'category' and a numeric 'start_s': {exc}") from exc
    end_raw = entry.get("end_s")
    end_s = math.inf if end_raw is None else float(end_raw)
    if math.isnan(start_s) or math.isnan(end_s):
        raise ConfigError(f"{what}[{index}] has a NaN start_s or end_s")
    if end_s < start_s:
        raise ConfigError(f"{what}[{index}] ends before it starts ({end_s} < {start_s})")
    return category, start_s, end_s


def event_matches_truth(
    event: Mapping[str, Any],
    truth: Mapping[str, Any],
    before_s: float = MATCH_BEFORE_S,
    after_s: float = MATCH_AFTER_S,
) -> bool:
    """Return True when the event matches the truth entry under the matching rule (module docstring)."""
    e_cat, e_start, e_end = _window(event, "events", 0)
    t_cat, t_start, t_end = _window(truth, "truth", 0)
    return _overlaps(e_cat, e_start, e_end, t_cat, t_start, t_end, before_s, after_s)


def _overlaps(
    e_cat: str, e_start: float, e_end: float,
    t_cat: str, t_start: float, t_end: float,
    before_s: float, after_s: float,
) -> bool:
    """Closed-interval overlap of an event with a widened truth window of the same category."""
    return e_cat == t_cat and e_start <= t_end + after_s and e_end >= t_start - before_s


def match_matrix(
    events: Sequence[Mapping[str, Any]],
    truth: Sequence[Mapping[str, Any]],
    before_s: float = MATCH_BEFORE_S,
    after_s: float = MATCH_AFTER_S,
) -> np.ndarray:
    """Return a bool array [n_events, n_truth]: True where the event matches the truth entry."""
    if before_s < 0 or after_s < 0:
        raise ConfigError(f"match widening must be >= 0 (before_s={before_s}, after_s={after_s})")
    ev = [_window(e, "events", i) for i, e in enumerate(events)]
    tr = [_window(t, "truth", i) for i, t in enumerate(truth)]
    out = np.zeros((len(ev), len(tr)), dtype=bool)
    for i, (ec, es, ee) in enumerate(ev):
        for j, (tc, ts, te) in enumerate(tr):
            out[i, j] = _overlaps(ec, es, ee, tc, ts, te, before_s, after_s)
    return out


def _ratio(num: int, den: int) -> float:
    return 1.0 if den == 0 else num / den


def score_events(
    events: Sequence[Mapping[str, Any]],
    truth: Sequence[Mapping[str, Any]],
    duration_s: float | None = None,
    categories: Iterable[str] = CATEGORIES,
    before_s: float = MATCH_BEFORE_S,
    after_s: float = MATCH_AFTER_S,
) -> dict[str, Any]:
    """Score events against truth per category.

    Args:
        events: dicts with 'category', 'start_s', 'end_s' (None = still open).
        truth: dicts with 'category', 'start_s', 'end_s' (and usually 'kind').
        duration_s: run duration, for the false-events-per-ten-minutes rate; None skips it.
        categories: categories to report (the five by default); categories found in
            events or truth are always added.
        before_s: widening of each truth window before its start.
        after_s: widening of each truth window after its end.

    Returns:
        {"per_category": {cat: {...}}, "overall": {...}} where each block has
        n_events, n_truth, matched_events, matched_truth, precision, recall, f1,
        delays_s (list), median_delay_s (None when no truth is matched) and, with a
        duration, false_events and false_events_per_10min. "overall" also has
        nominal_events_per_10min (all events per ten minutes, meaningful on a run
        without truth) and macro_f1 over the categories that have truth or events.
    """
    matrix = match_matrix(events, truth, before_s, after_s)
    ev = [_window(e, "events", i) for i, e in enumerate(events)]
    tr = [_window(t, "truth", i) for i, t in enumerate(truth)]
    cats = list(dict.fromkeys(list(categories) + [c for c, _, _ in ev] + [c for c, _, _ in tr]))
    if duration_s is not None and not duration_s > 0:
        raise ConfigError(f"duration_s must be > 0, got {duration_s}")

    def block(ev_idx: list[int], tr_idx: list[int]) -> dict[str, Any]:
        sub = matrix[np.ix_(ev_idx, tr_idx)] if ev_idx and tr_idx else np.zeros((len(ev_idx), len(tr_idx)), bool)
        matched_events = int(sub.any(axis=1).sum()) if ev_idx else 0
        matched_truth = int(sub.any(axis=0).sum()) if tr_idx else 0
        precision = _ratio(matched_events, len(ev_idx))
        recall = _ratio(matched_truth, len(tr_idx))
        f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
        delays: list[float] = []
        for col, j in enumerate(tr_idx):
            starts = [ev[ev_idx[row]][1] for row in range(len(ev_idx)) if sub[row, col]]
            if starts:
                delays.append(min(starts) - tr[j][1])
        out: dict[str, Any] = {
            "n_events": len(ev_idx),
            "n_truth": len(tr_idx),
            "matched_events": matched_events,
            "matched_truth": matched_truth,
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "delays_s": delays,
            "median_delay_s": float(np.median(delays)) if delays else None,
        }
        if duration_s is not None:
            false_events = len(ev_idx) - matched_events
            out["false_events"] = false_events
            out["false_events_per_10min"] = false_events * NOMINAL_PERIOD_S / duration_s
        return out

    per_category = {}
    for cat in cats:
        ev_idx = [i for i, (c, _, _) in enumerate(ev) if c == cat]
        tr_idx = [j for j, (c, _, _) in enumerate(tr) if c == cat]
        per_category[cat] = block(ev_idx, tr_idx)
    overall = block(list(range(len(ev))), list(range(len(tr))))
    active = [per_category[c]["f1"] for c in cats if per_category[c]["n_events"] or per_category[c]["n_truth"]]
    overall["macro_f1"] = float(np.mean(active)) if active else 1.0
    if duration_s is not None:
        overall["nominal_events_per_10min"] = len(ev) * NOMINAL_PERIOD_S / duration_s
    return {"per_category": per_category, "overall": overall}


def events_per_10min(n_events: int, duration_s: float) -> float:
    """Return the rate of events per ten minutes over a run of duration_s seconds."""
    if not duration_s > 0:
        raise ConfigError(f"duration_s must be > 0, got {duration_s}")
    if n_events < 0:
        raise ConfigError(f"n_events must be >= 0, got {n_events}")
    return n_events * NOMINAL_PERIOD_S / duration_s
