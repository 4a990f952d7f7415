"""The lag and the backlog dropped when the analysis falls behind: LagMeter on its own,
and the engine starved for seconds (no tick while its inputs queue up), live against
replay at the live ticks."""

from __future__ import annotations

import numpy as np
import pytest
from test_core_engine import (
    MS,
    S,
    T0_RECV_NS,
    TICK_NS,
    Run,
    Scenario,
    Stream,
    _collect,
    _hand_over,
    assert_live_equals_replay,
    make_recording,
    replay,
)

from sim_real_bridge.core.engine import DivergenceEngine, EngineConfig
from sim_real_bridge.core.lag import LagMeter


# ------------------------------------------------------------------ LagMeter
def test_a_meter_that_keeps_up_books_no_time_behind() -> None:
    meter = LagMeter(behind_ns=500 * MS)
    for k in range(100):
        meter.note(k * 20 * MS + 30 * MS, k * 20 * MS)
    assert meter.max_lag_ns == 50 * MS  # the 30 ms after a tick plus the 20 ms to the next
    assert meter.behind_total_ns == 0 and meter.episodes == []
    assert meter.lag_ns(99 * 20 * MS + 100 * MS) == 100 * MS


def test_a_silence_is_booked_as_lag_and_one_episode() -> None:
    meter = LagMeter(behind_ns=500 * MS)
    meter.note(1000 * MS, 990 * MS)
    meter.note(3000 * MS, 1010 * MS)  # nothing analysed for 2 s, then one grid time
    meter.note(3000 * MS, 2990 * MS)  # ... and the rest at the same tick
    meter.note(3020 * MS, 3010 * MS)
    assert meter.max_lag_ns == 3000 * MS - 990 * MS
    # Behind from 990 + 500 ms until the tick at 3 s.
    assert meter.behind_total_ns == 3000 * MS - 1490 * MS
    assert [(e.start_ns, e.end_ns) for e in meter.episodes] == [(1490 * MS, 3000 * MS)]
    assert meter.behind_share() == pytest.approx((3000 - 1490) / (3020 - 990))


def test_start_up_before_the_run_is_left_out_of_the_figures() -> None:
    meter = LagMeter(behind_ns=500 * MS)
    meter.note(1000 * MS, 990 * MS)
    meter.note(2000 * MS, 1000 * MS)  # 1 s behind during start-up
    meter.note(2020 * MS, 2010 * MS)
    meter.note(2040 * MS, 2030 * MS)
    whole = meter.as_dict(lambda t: t * 1e-9)
    assert whole["max_lag_s"] == 1.02 and len(whole["behind_episodes"]) == 1  # just before the tick at 2.02 s
    run = meter.as_dict(lambda t: t * 1e-9, since_ns=2020 * MS)
    assert run["behind_episodes"] == [] and run["behind_s"] == 0.0 and run["max_lag_s"] == 0.5
    late = meter.as_dict(lambda t: t * 1e-9, since_ns=1800 * MS)  # the run started while behind
    assert late["behind_s"] == 0.22 and late["max_lag_s"] == 1.02


def test_a_restart_does_not_count_the_gap_between_segments() -> None:
    meter = LagMeter(behind_ns=500 * MS)
    meter.note(1000 * MS, 990 * MS)
    meter.restart()
    meter.note(9000 * MS, 8990 * MS)
    assert meter.max_lag_ns == 10 * MS and meter.behind_total_ns == 0


# ------------------------------------------------------------------ the engine starved
STARVED = (2.0, 5.5)  # s of the run: no tick, and nothing received until the end


def _starved(streams: list[Stream], window: tuple[float, float] = STARVED) -> list[Stream]:
    """Every message sent during the window is taken in just before its end, 20 us apart
    (the node drains its queued inputs before it ticks again)."""
    start, end = (T0_RECV_NS + int(t * S) for t in window)
    out = []
    for s in streams:
        held = (s.recv_ns >= start) & (s.recv_ns < end)
        recv = s.recv_ns.copy()
        recv[held] = end - 10 * MS + 20_000 * np.arange(int(held.sum()))
        assert not held.any() or recv[held][-1] < end
        out.append(Stream(s.kind, s.side, s.stamp_ns, np.maximum.accumulate(recv), s.values, s.names, s.frame_ids))
    return out


def _live_starved(streams: list[Stream], window: tuple[float, float] = STARVED,
                  config: EngineConfig | None = None) -> Run:
    """Live, message by message, on a 20 ms timer that does not fire during the window."""
    engine = DivergenceEngine(config)
    start, end = (T0_RECV_NS + int(t * S) for t in window)
    order = sorted((int(s.recv_ns[i]), k, i) for k, s in enumerate(streams) for i in range(len(s.recv_ns)))
    next_tick = (order[0][0] // TICK_NS + 1) * TICK_NS
    outs, ticks = [], []

    def tick(now: int) -> None:
        out = engine.advance(now)
        outs.append(out)
        if out.due or out.skipped:
            ticks.append(now)

    for recv, k, i in order:
        while next_tick <= recv:
            if not start <= next_tick < end:
                tick(next_tick)
            next_tick += TICK_NS
        _hand_over(engine, streams[k], i)
    last = max(int(s.recv_ns[-1]) for s in streams) + TICK_NS
    while next_tick <= last:
        tick(next_tick)
        next_tick += TICK_NS
    outs.append(engine.finish(next_tick))
    return _collect(engine, outs, ticks)


@pytest.fixture(scope="module")
def starved() -> list[Stream]:
    return _starved(make_recording(Scenario(duration_s=9.0, push=(6.5, 7.5))))


@pytest.fixture(scope="module")
def live_run(starved: list[Stream]) -> Run:
    return _live_starved(starved)


def test_a_starved_engine_drops_its_backlog_as_one_counted_gap_and_resumes_at_the_newest(live_run: Run) -> None:
    load = live_run.summary["load"]
    assert live_run.engine.config.max_backlog_s < STARVED[1] - STARVED[0]
    assert len(load["gaps"]) == 1
    gap = live_run.engine.gaps[0]
    # Newest data first: the analysis resumed a horizon before the first tick after the silence.
    resumed = live_run.joints_t_ns[live_run.joints_t_ns > gap[1]][0]
    assert resumed == gap[1] + TICK_NS
    first_tick = T0_RECV_NS + int(STARVED[1] * S)
    assert first_tick - resumed < int(live_run.engine.config.horizon_s * S)
    # Every grid time dropped is counted, and none of them was published.
    dropped = (gap[1] - gap[0]) // TICK_NS + 1
    assert load["dropped_grid_times"] == dropped == live_run.summary["counts"]["skipped_ticks"]
    assert load["gaps"][0]["grid_times"] == dropped
    assert not ((live_run.joints_t_ns >= gap[0]) & (live_run.joints_t_ns <= gap[1])).any()
    assert np.all(np.diff(live_run.joints_t_ns[live_run.joints_t_ns > gap[1]]) == TICK_NS)


def test_a_starved_engine_reports_its_lag_and_time_behind(live_run: Run) -> None:
    load = live_run.summary["load"]
    assert load["degraded"] is True
    assert load["max_lag_s"] >= STARVED[1] - STARVED[0]
    [episode] = load["behind_episodes"]
    assert episode["max_lag_s"] == pytest.approx(load["max_lag_s"], abs=1e-3)
    assert load["behind_s"] == pytest.approx(episode["end_s"] - episode["start_s"], abs=1e-3)
    assert 0 < load["behind_share"] < 1


def test_event_detection_goes_on_after_the_gap(live_run: Run) -> None:
    assert [e["category"] for e in live_run.summary["events"]] == ["human"]


def test_a_starved_live_run_equals_its_replay_at_the_live_ticks(starved: list[Stream], live_run: Run) -> None:
    replay_run = replay(starved, ticks_ns=np.array(live_run.ticks_ns))
    assert replay_run.engine.gaps == live_run.engine.gaps
    assert replay_run.summary["load"] == live_run.summary["load"]
    assert_live_equals_replay(live_run, replay_run, ("events", "joints", "wrench"))


def test_a_short_starvation_is_caught_up_without_a_gap() -> None:
    streams = _starved(make_recording(Scenario(duration_s=5.0)), (2.0, 3.0))
    run = _live_starved(streams, (2.0, 3.0))
    load = run.summary["load"]
    assert load["dropped_grid_times"] == 0 and load["gaps"] == []
    assert load["degraded"] is True and 1.0 <= load["max_lag_s"] < 1.2
    assert np.all(np.diff(run.joints_t_ns) == TICK_NS)  # the backlog analysed, no hole


def test_a_run_that_keeps_up_is_not_degraded() -> None:
    run = _live_starved(make_recording(Scenario(duration_s=4.0)), (10.0, 10.0))
    load = run.summary["load"]
    assert load["degraded"] is False and load["max_lag_s"] < 0.5 and load["behind_episodes"] == []


def test_streams_gone_silent_leave_no_backlog_to_drop() -> None:
    # A stream may be waited for longer than the backlog (a horizon of 1.5 s here, as a
    # burst-lengthened patience does); the robots stop at 4 s and the node ticks on for
    # 4 s more: nothing came in, so nothing is dropped.
    streams = make_recording(Scenario(duration_s=4.0))
    engine = DivergenceEngine(EngineConfig(max_backlog_s=1.0, horizon_s=1.5))
    order = sorted((int(s.recv_ns[i]), k, i) for k, s in enumerate(streams) for i in range(len(s.recv_ns)))
    now = (order[0][0] // TICK_NS + 1) * TICK_NS
    for recv, k, i in order:
        while now <= recv:
            engine.advance(now)
            now += TICK_NS
        _hand_over(engine, streams[k], i)
    for _ in range(200):
        engine.advance(now)
        now += TICK_NS
    load = engine.run_summary()["load"]
    assert load["dropped_grid_times"] == 0 and load["gaps"] == []
