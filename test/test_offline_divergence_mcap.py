"""write_divergence_mcap: the messages, in the order and with the log times the live node
would publish them tick by tick, whatever the mix of records per tick."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.conversions import cdr
from sim_real_bridge.conversions import divergence_msgs as convert
from sim_real_bridge.core.engine import (
    ContactRecord,
    JointDivergenceRecord,
    PoseDivergenceRecord,
    SummaryRecord,
    TickOutput,
)
from sim_real_bridge.core.events import ACTION_CLOSE, ACTION_OPEN, ACTION_UPDATE, EventRecord
from sim_real_bridge.core.ledger import CategoryShareRecord
from sim_real_bridge.offline.replay import write_divergence_mcap

STORE = build_typestore()
SRB = convert.rosbags_namespace(STORE)
KEY_VALUE = convert.rosbags_namespace(STORE, "diagnostic_msgs").KeyValue
T0 = 1_700_000_000_000_000_000
NAMES = tuple(f"joint{i}" for i in range(1, 8))


def _joint(rng: np.random.Generator, stamp_ns: int) -> JointDivergenceRecord:
    return JointDivergenceRecord(stamp_ns, NAMES, *rng.normal(size=(3, 7)), rng.normal(), 0.0, 0.01, 0.0, False)


def _pose(rng: np.random.Generator, stamp_ns: int) -> PoseDivergenceRecord:
    return PoseDivergenceRecord(stamp_ns, rng.normal(size=3), rng.normal(size=4), rng.normal(size=3),
                                rng.normal(size=4), rng.normal(size=3), rng.random(), rng.random())


def _contact(rng: np.random.Generator, stamp_ns: int) -> ContactRecord:
    return ContactRecord(stamp_ns, *rng.normal(size=(6, 3)), rng.random(), math.nan, 1, 0)


def _event(i: int, action: str, category: str) -> EventRecord:
    return EventRecord(id=f"ev{i}", category=category, kind="gain", severity=0.5, start_ns=T0, end_ns=T0 + i,
                       open=action != ACTION_CLOSE, action=action, evidence={"fit_gain": "0.9"})


def _summary(stamp_ns: int) -> SummaryRecord:
    return SummaryRecord(stamp_ns, 1.0, 10.0, [CategoryShareRecord("dynamics", 0.5, 0.25, 1)], 0.5, 0.5, 0.1, 0.2,
                         0.3, 1, 1, 0, {"future_stamp": 2}, 0.0, 0.01, 0)


def _outcome(backwards: bool) -> SimpleNamespace:
    """Ticks 20 ms apart: records of every kind in varied numbers (none, one, several),
    the first pose late, events opening and closing, summaries due between ticks, on a
    tick, several at once and after the last tick; ``backwards``: one tick goes back."""
    rng = np.random.default_rng(7)
    ticks = []
    events = {5: [_event(1, ACTION_OPEN, "dynamics")], 9: [_event(2, ACTION_OPEN, "contact"),
                                                            _event(1, ACTION_UPDATE, "dynamics")],
              14: [_event(1, ACTION_CLOSE, "dynamics")], 30: [_event(2, ACTION_CLOSE, "contact")]}
    for i in range(40):
        now = T0 + 20_000_000 * (i + 1) - (30_000_000 if backwards and i == 20 else 0)
        stamp = now - 20_000_000
        ticks.append((now, TickOutput(
            joints=[_joint(rng, stamp) for _ in range(i % 3 if i % 7 else 2)],
            poses=[_pose(rng, stamp) for _ in range(0 if i < 3 else i % 2 + (i == 12))],
            contacts=[_contact(rng, stamp) for _ in range(1 if i % 5 else 0)],
            events=events.get(i, []))))
    stamps = [T0 + 10_000_000, T0 + 200_000_000, T0 + 210_000_000, T0 + 400_000_000, T0 + 900_000_000,
              T0 + 900_000_000]
    return SimpleNamespace(ticks=ticks, summaries=[_summary(s) for s in stamps])


def _tick_by_tick(outcome: SimpleNamespace, period_ns: int | None) -> list[tuple[str, int, bytes]]:
    """What the live node publishes, tick by tick (its message objects serialized by rosbags)."""
    out: list[tuple[str, int, bytes]] = []
    summaries = list(outcome.summaries)
    opened: dict[str, str] = {}
    latest, next_marker = None, None

    def summary(rec: SummaryRecord) -> tuple[str, int, bytes]:
        msg = convert.divergence_summary_msg(SRB, KEY_VALUE, rec)
        data = STORE.serialize_cdr(msg, "sim_real_bridge/msg/DivergenceSummary")
        return "/divergence/summary", rec.stamp_ns, bytes(data)

    for now, tick in outcome.ticks:
        while summaries and summaries[0].stamp_ns <= now:
            out.append(summary(summaries.pop(0)))
        out += [("/divergence/joints", now, cdr.joint_divergence_cdr(r)) for r in tick.joints]
        out += [("/divergence/pose", now, cdr.pose_divergence_cdr(r, "world")) for r in tick.poses]
        out += [("/divergence/contact", now, cdr.contact_residual_cdr(r)) for r in tick.contacts]
        latest = tick.poses[-1] if tick.poses else latest
        for rec in tick.events:
            if rec.action == ACTION_OPEN:
                opened[rec.id] = rec.category
            elif rec.action == ACTION_CLOSE:
                opened.pop(rec.id, None)
            msg = convert.gap_event_msg(SRB, KEY_VALUE, rec, now)
            out.append(("/divergence/events", now, bytes(STORE.serialize_cdr(msg, "sim_real_bridge/msg/GapEvent"))))
        if period_ns is not None and latest is not None and (next_marker is None or now >= next_marker):
            next_marker = now + period_ns
            out.append(("/divergence/markers", now,
                        cdr.divergence_markers_cdr(latest, sorted(set(opened.values())), now, "world")))
    return out + [summary(rec) for rec in summaries]


@pytest.mark.parametrize(("backwards", "markers_period_s"), [(False, 0.05), (True, 0.05), (False, None)])
def test_divergence_mcap_holds_the_messages_tick_by_tick(tmp_path: Path, backwards: bool,
                                                         markers_period_s: float | None) -> None:
    """``markers_period_s`` None: no markers, and no summaries either."""
    from mcap.reader import make_reader

    outcome = _outcome(backwards)
    if markers_period_s is None:
        outcome.summaries = []
    write_divergence_mcap(tmp_path / "d.mcap", outcome, "world", markers_period_s)
    with (tmp_path / "d.mcap").open("rb") as handle:
        got = [(channel.topic, message.log_time, message.data)
               for _, channel, message in make_reader(handle).iter_messages(log_time_order=False)]
    expected = _tick_by_tick(outcome, int(markers_period_s * 1e9) if markers_period_s else None)
    assert {topic for topic, _, _ in expected} == {topic for topic, _, _ in got}
    assert sum(topic == "/divergence/joints" for topic, _, _ in expected) >= 8  # the batch writers' templates
    assert got == expected


def test_divergence_mcap_of_no_ticks_holds_the_summaries(tmp_path: Path) -> None:
    from mcap.reader import make_reader

    outcome = SimpleNamespace(ticks=[], summaries=[_summary(T0), _summary(T0 + 1)])
    write_divergence_mcap(tmp_path / "d.mcap", outcome)
    with (tmp_path / "d.mcap").open("rb") as handle:
        got = [(channel.topic, message.log_time) for _, channel, message in make_reader(handle).iter_messages()]
    assert got == [("/divergence/summary", T0), ("/divergence/summary", T0 + 1)]
