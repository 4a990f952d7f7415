"""EventTracker: debouncing, healing, one open event per category, records."""

from __future__ import annotations

import pytest

from sim_real_bridge.core.events import ACTION_CLOSE, ACTION_OPEN, ACTION_UPDATE, EventConfig, EventTracker
from sim_real_bridge.errors import ConfigError

MS = 1_000_000


def run(tracker: EventTracker, activity: list[tuple[int, dict]]) -> list:
    out = []
    for t_ms, active in activity:
        out += tracker.update(t_ms * MS, active)
    return out


def act(cat: str = "dynamics", sev: float = 0.7, kind: str = "latency") -> dict:
    return {cat: (sev, kind, {"k": "v"})}


def config(**kw) -> EventConfig:
    base = dict(min_duration_s=0.2, heal_s=1.0, gap_tolerance_s=0.1, update_period_s=10.0,
                min_duration_by_category={})
    base.update(kw)
    return EventConfig(**base)


def test_short_activity_never_opens() -> None:
    tracker = EventTracker(config())
    recs = run(tracker, [(t, act()) for t in range(0, 180, 20)] + [(t, {}) for t in range(200, 3000, 20)])
    assert recs == []
    assert tracker.event_count == 0


def test_open_is_backdated_and_close_after_healing() -> None:
    tracker = EventTracker(config())
    timeline = [(t, act()) for t in range(1000, 3000, 20)] + [(t, {}) for t in range(3000, 4500, 20)]
    recs = run(tracker, timeline)
    assert [r.action for r in recs] == [ACTION_OPEN, ACTION_CLOSE]
    opened, closed = recs
    assert opened.start_ns == 1000 * MS and opened.end_ns == 1200 * MS and opened.open
    assert closed.id == opened.id and not closed.open
    assert closed.start_ns == 1000 * MS and closed.end_ns == 2980 * MS  # last active time
    assert closed.category == "dynamics" and closed.kind == "latency" and closed.evidence == {"k": "v"}
    assert tracker.closed == [closed]


def test_close_happens_exactly_at_heal_time() -> None:
    tracker = EventTracker(config(heal_s=0.5))
    run(tracker, [(t, act()) for t in range(0, 400, 20)])
    assert tracker.update(879 * MS, {}) == []  # last active 380 ms: heals at 880 ms
    recs = tracker.update(880 * MS, {})
    assert [r.action for r in recs] == [ACTION_CLOSE]


def test_brief_dropout_of_activity_does_not_split_an_event() -> None:
    tracker = EventTracker(config())
    timeline = [(t, act()) for t in range(0, 1000, 20)] + [(t, {}) for t in range(1000, 1500, 20)]
    timeline += [(t, act()) for t in range(1500, 2000, 20)] + [(t, {}) for t in range(2000, 4000, 20)]
    recs = run(tracker, timeline)
    assert [r.action for r in recs] == [ACTION_OPEN, ACTION_CLOSE]
    assert recs[1].end_ns == 1980 * MS


def test_gap_tolerance_while_pending() -> None:
    tracker = EventTracker(config(min_duration_s=0.3, gap_tolerance_s=0.1))
    timeline = [(0, act()), (100, act()), (160, {}), (200, act()), (300, act())]
    recs = run(tracker, timeline)
    assert [r.action for r in recs] == [ACTION_OPEN]
    assert recs[0].start_ns == 0
    tracker2 = EventTracker(config(min_duration_s=0.3, gap_tolerance_s=0.05))
    recs2 = run(tracker2, timeline)
    assert recs2 == []  # the 100 ms gap restarted the clock


def test_one_open_event_per_category_and_independent_categories() -> None:
    tracker = EventTracker(config())
    both = {**act("dynamics"), **act("sensor", 0.9, "dropout")}
    recs = run(tracker, [(t, both) for t in range(0, 1000, 20)])
    assert sorted(r.category for r in recs) == ["dynamics", "sensor"]
    assert len({r.id for r in recs}) == 2
    assert sorted(tracker.open_categories()) == ["dynamics", "sensor"]
    closes = tracker.finish()
    assert [r.action for r in closes] == [ACTION_CLOSE, ACTION_CLOSE]
    assert tracker.open_categories() == []


def test_severity_is_the_maximum_and_kind_the_most_frequent() -> None:
    tracker = EventTracker(config())
    timeline = [(t, act(sev=0.6, kind="gain")) for t in range(0, 600, 20)]
    timeline += [(t, act(sev=0.95, kind="latency")) for t in range(600, 700, 20)]
    timeline += [(t, {}) for t in range(700, 2000, 20)]
    recs = run(tracker, timeline)
    assert recs[-1].severity == pytest.approx(0.95) and recs[-1].kind == "gain"


def test_update_records_are_rate_limited() -> None:
    tracker = EventTracker(config(update_period_s=0.5))
    recs = run(tracker, [(t, act()) for t in range(0, 2000, 20)])
    updates = [r for r in recs if r.action == ACTION_UPDATE]
    assert [r.end_ns // MS for r in updates] == [700, 1200, 1700]


def test_per_category_min_duration() -> None:
    tracker = EventTracker(config(min_duration_by_category={"human": 0.5}))
    both = {**act("human"), **act("contact")}
    recs = run(tracker, [(t, both) for t in range(0, 400, 20)])
    assert [r.category for r in recs] == ["contact"]


def test_ids_are_unique_across_reopening() -> None:
    tracker = EventTracker(config(), id_prefix="run7-")
    timeline = []
    for start in (0, 5000, 10000):
        timeline += [(t, act()) for t in range(start, start + 500, 20)]
        timeline += [(t, {}) for t in range(start + 500, start + 3000, 20)]
    recs = run(tracker, timeline)
    ids = [r.id for r in recs if r.action == ACTION_OPEN]
    assert len(ids) == 3 and len(set(ids)) == 3 and all(i.startswith("run7-") for i in ids)


def test_errors() -> None:
    tracker = EventTracker(config())
    tracker.update(1000, {})
    with pytest.raises(ConfigError, match="time went backwards"):
        tracker.update(999, {})
    with pytest.raises(ConfigError, match="severity of dynamics must be in 0..1"):
        tracker.update(2000, act(sev=1.5))
    with pytest.raises(ConfigError, match="EventConfig.heal_s must be >= 0"):
        EventTracker(EventConfig(heal_s=-1.0))
    with pytest.raises(ConfigError, match=r"min_duration_by_category\['human'\]"):
        EventTracker(EventConfig(min_duration_by_category={"human": -0.1}))


def _contact_then_load(load_until_ms: int, contact_again: bool = False) -> tuple[EventTracker, list]:
    """A contact event active 1000-2980 ms, a dynamics load from 3000 ms (out of contact,
    handed over as it opens) until ``load_until_ms``; the contact heals at 3980 ms."""
    tracker = EventTracker(config())
    recs = run(tracker, [(t, act("contact", kind="friction")) for t in range(1000, 3000, 20)])
    recs += run(tracker, [(t, act("dynamics", kind="payload")) for t in range(3000, 3200, 20)])
    opened = tracker.update(3200 * MS, act("dynamics", kind="payload"))
    assert [r.action for r in opened] == [ACTION_OPEN]
    assert tracker.hand_over("contact", "dynamics", {"went_on_as": opened[0].id})
    recs += opened
    later = []
    for t in range(3220, 4500, 20):
        active = act("dynamics", kind="payload") if t < load_until_ms else {}
        if contact_again and t == 3400:
            active = {**active, **act("contact", kind="friction")}
        later.append((t, active))
    return tracker, recs + run(tracker, later)


def test_a_contact_event_whose_residual_goes_on_as_a_load_closes_as_the_load() -> None:
    tracker, recs = _contact_then_load(load_until_ms=5000)
    contact_open = recs[0]
    closes = [r for r in recs if r.action == ACTION_CLOSE]
    assert len(closes) == 1
    handed = closes[0]
    assert handed.id == contact_open.id and handed.start_ns == 1000 * MS and handed.end_ns == 2980 * MS
    assert (handed.category, handed.kind, handed.handed_over_from) == ("dynamics", "payload", "contact")
    assert handed.evidence == {"k": "v", "went_on_as": recs[1].id}
    assert tracker.opened_count == {"dynamics": 2, "contact": 0}


def test_a_load_that_stops_within_half_a_second_of_the_contact_takes_nothing_over() -> None:
    _, recs = _contact_then_load(load_until_ms=3400)  # active until 0.4 s after the contact's last activity
    closes = [r for r in recs if r.action == ACTION_CLOSE]
    assert [(r.category, r.handed_over_from) for r in closes] == [("contact", ""), ("dynamics", "")]
    _, recs = _contact_then_load(load_until_ms=3600)  # 0.6 s: it went on, though idle when the contact heals
    assert [(r.category, r.handed_over_from) for r in recs if r.action == ACTION_CLOSE] == [("dynamics", "contact")]


def test_a_contact_active_again_keeps_its_event() -> None:
    _, recs = _contact_then_load(load_until_ms=5000, contact_again=True)
    closes = [r for r in recs if r.action == ACTION_CLOSE]  # (the contact heals at 4400 ms)
    assert [(r.category, r.end_ns, r.handed_over_from) for r in closes] == [("contact", 3400 * MS, "")]


def test_a_hand_over_needs_both_events_open_the_source_idle_and_the_target_starting_as_it_stopped() -> None:
    tracker = EventTracker(config(handover_s=0.2))
    assert not tracker.hand_over("contact", "dynamics", {})  # neither open
    run(tracker, [(t, act("contact", kind="friction")) for t in range(1000, 2000, 20)])
    assert not tracker.hand_over("contact", "dynamics", {})  # no target
    run(tracker, [(t, {**act("contact"), **act("dynamics")}) for t in range(2000, 2400, 20)])
    assert not tracker.hand_over("contact", "dynamics", {})  # the source active now
    tracker = EventTracker(config(handover_s=0.2))
    run(tracker, [(t, act("contact", kind="friction")) for t in range(1000, 2000, 20)])
    run(tracker, [(t, {}) for t in range(2000, 2300, 20)])
    run(tracker, [(t, act("dynamics")) for t in range(2300, 2600, 20)])
    assert not tracker.hand_over("contact", "dynamics", {})  # began 0.32 s after the contact's last activity
    with pytest.raises(ConfigError, match="EventConfig.handover_s must be >= 0"):
        EventTracker(EventConfig(handover_s=-0.1))


def test_events_handed_over_at_the_end_of_a_run() -> None:
    tracker = EventTracker(config())
    run(tracker, [(t, act("contact", kind="friction")) for t in range(1000, 2000, 20)])
    opened = run(tracker, [(t, act("human", kind="push")) for t in range(2000, 2600, 20)])
    assert tracker.hand_over("contact", "human", {})
    closes = tracker.finish()
    assert [(r.category, r.kind, r.handed_over_from) for r in closes] == [("human", "push", "contact"),
                                                                           ("human", "push", "")]
    assert closes[0].id != opened[0].id


@pytest.mark.parametrize("first, first_kind, then_kind", [("human", "push", "obstacle"),
                                                         ("dynamics", "gain", "joint_stall")])
def test_a_short_event_goes_to_the_unauthored_cause_that_takes_over_and_a_long_one_stays(
        first: str, first_kind: str, then_kind: str) -> None:
    for first_ms, expected in ((600, ("unauthored", then_kind, first)), (2000, (first, first_kind, ""))):
        tracker = EventTracker(config())
        run(tracker, [(t, act(first, kind=first_kind)) for t in range(1000, 1000 + first_ms, 20)])
        recs = []
        for t in range(1000 + first_ms, 1000 + first_ms + 1500, 20):
            records = tracker.update(t * MS, act("unauthored", kind=then_kind))
            tracker.carry_over(records, out_of_contact=False)
            recs += records
        closes = [r for r in recs if r.action == ACTION_CLOSE]
        assert [(r.category, r.kind, r.handed_over_from) for r in closes] == [expected], first_ms
    tracker = EventTracker(config())  # (an object slip takes nothing over)
    run(tracker, [(t, act(first, kind=first_kind)) for t in range(1000, 1600, 20)])
    for t in range(1600, 3100, 20):
        tracker.carry_over(tracker.update(t * MS, act("unauthored", kind="object_slip")), out_of_contact=True)
    assert [(r.category, r.handed_over_from) for r in tracker.closed] == [(first, "")]
    with pytest.raises(ConfigError, match="EventConfig.unauthored_handover_max_s must be >= 0"):
        EventTracker(EventConfig(unauthored_handover_max_s=-1.0))


@pytest.mark.parametrize("kind, out_of_contact, handed", [("payload", True, True), ("actuation_latency", True, False),
                                                          ("payload", False, False)])
def test_a_contact_event_goes_to_a_load_out_of_contact_not_to_an_actuation_change(
        kind: str, out_of_contact: bool, handed: bool) -> None:
    # seed 16 live: a heavier object pushed, then a latency found as the tool leaves it
    tracker = EventTracker(config())
    run(tracker, [(t, act("contact", kind="object_mass")) for t in range(1000, 2000, 20)])
    for t in range(2000, 3500, 20):
        tracker.carry_over(tracker.update(t * MS, act("dynamics", kind=kind)), out_of_contact=out_of_contact)
    contact = [r for r in tracker.closed if r.id.endswith("-contact")]
    assert [(r.category, r.handed_over_from) for r in contact] == [("dynamics", "contact") if handed
                                                                   else ("contact", "")]
