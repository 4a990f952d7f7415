"""When grid times are due: every stream reached them, or a stall, or the backlog limit;
the same answer from what had arrived by then (live) as from the whole recording (replay)."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.core.buffers import StreamBuffer
from sim_real_bridge.core.health import FeatureConfig, StreamHealth
from sim_real_bridge.core.schedule import NEVER_NS, decision_times, ready_times, stall_times

MS = 1_000_000
S = 1_000_000_000
HORIZON_NS = 300 * MS
BACKLOG_NS = 3 * S
PERIOD_NS = 10 * MS


def _stream(stamp: np.ndarray, recv: np.ndarray, until_ns: int | None = None) -> tuple[StreamBuffer, StreamHealth]:
    """Buffer and health of one stream (mapped time = stamp), holding what arrived by until_ns."""
    keep = slice(None) if until_ns is None else recv <= until_ns
    stamp, recv = stamp[keep], recv[keep]
    values = np.sin(np.arange(len(stamp), dtype=float))[:, None]
    buffer, health = StreamBuffer(1), StreamHealth(FeatureConfig(), "s")
    for lo in range(0, len(stamp), 50):  # in arrival order, a batch at a time
        sl = slice(lo, lo + 50)
        buffer.extend(stamp[sl], recv[sl], values[sl])
        health.add(stamp[sl], recv[sl], stamp[sl], values[sl])
    return buffer, health


def _regular(delay_ns: int, start_s: float = 1.0, end_s: float = 10.0) -> tuple[np.ndarray, np.ndarray]:
    stamp = np.arange(int(start_s * S), int(end_s * S), PERIOD_NS, dtype=np.int64)
    return stamp, stamp + delay_ns


def _grid(start_s: float, end_s: float) -> np.ndarray:
    return np.arange(int(start_s * S), int(end_s * S), 20 * MS, dtype=np.int64)


def test_a_grid_time_is_due_once_every_stream_reached_it() -> None:
    fast, slow = _stream(*_regular(2 * MS)), _stream(*_regular(7 * MS))
    t = _grid(2.0, 9.0)
    ready = ready_times(t, [fast, slow], HORIZON_NS, BACKLOG_NS)
    np.testing.assert_array_equal(ready, t + 7 * MS)  # the slower stream decides


def test_a_stalled_stream_is_waited_for_the_horizon_only() -> None:
    stamp, recv = _regular(7 * MS)
    stops = stamp < 4 * S  # the slow stream dies at 4 s
    fast, dead = _stream(*_regular(2 * MS)), _stream(stamp[stops], recv[stops])
    t = _grid(4.1, 6.0)
    ready = ready_times(t, [fast, dead], HORIZON_NS, BACKLOG_NS)
    np.testing.assert_array_equal(ready, t + HORIZON_NS)
    assert np.all(stall_times(t, *dead, HORIZON_NS) == t + HORIZON_NS)


def test_no_grid_time_waits_longer_than_the_backlog_limit() -> None:
    stamp, recv = _regular(2 * MS)
    fast = _stream(stamp, recv)
    stuck = _stream(stamp, recv + 5 * S)  # delivered 5 s late, never silent long
    t = _grid(7.0, 8.0)
    ready = ready_times(t, [fast, stuck], horizon_ns=10 * S, backlog_ns=BACKLOG_NS)
    np.testing.assert_array_equal(ready, t + BACKLOG_NS)


def test_a_stream_not_yet_seen_is_not_waited_for() -> None:
    base = _stream(*_regular(2 * MS))
    late_start = _stream(*_regular(9 * MS, start_s=5.0))  # first received just after 5 s
    t = np.array([2 * S, 3 * S, 6 * S])
    ready = ready_times(t, [base, late_start], HORIZON_NS, BACKLOG_NS)
    assert ready.tolist() == [2 * S + 2 * MS, 3 * S + 2 * MS, 6 * S + 9 * MS]
    never_seen = (StreamBuffer(1), StreamHealth(FeatureConfig(), "never"))
    assert ready_times(t, [base, never_seen], HORIZON_NS, BACKLOG_NS).tolist() == (t + 2 * MS).tolist()


def test_a_stream_delivered_in_bursts_is_waited_for_once_a_burst_was_seen() -> None:
    stamp, _ = _regular(0)
    # Held and drained every second: received at the next whole second (+ 20 us per message).
    recv = np.maximum.accumulate(-(-stamp // S) * S + 20_000 * (stamp % S // PERIOD_NS))
    bursty, steady = _stream(stamp, recv), _stream(*_regular(2 * MS))
    t = np.array([int(1.5 * S), int(5.5 * S)])
    ready = ready_times(t, [steady, bursty], HORIZON_NS, BACKLOG_NS)
    # Before any burst was seen the silence is a stall; after, the drain is waited for.
    assert ready[0] == t[0] + HORIZON_NS
    assert ready[1] == bursty[0].reached(t[1:])[0] and 6 * S <= ready[1] < 6 * S + 10 * MS


@pytest.mark.parametrize("now_s", [3.05, 4.2, 4.33, 6.01, 7.5])
def test_what_had_arrived_by_now_gives_the_ready_times_the_whole_recording_gives(now_s: float) -> None:
    rng = np.random.default_rng(int(now_s * 100))
    a_stamp, a_recv = _regular(2 * MS)
    a_recv = np.maximum.accumulate(a_recv + rng.exponential(1 * MS, len(a_recv)).astype(np.int64))
    b_stamp, b_recv = _regular(5 * MS)
    gone = (b_stamp > 4 * S) & (b_stamp < 5 * S)  # b silent 4..5 s
    b_stamp, b_recv = b_stamp[~gone], b_recv[~gone]
    now = int(now_s * S)
    t = _grid(2.0, 9.0)
    whole = ready_times(t, [_stream(a_stamp, a_recv), _stream(b_stamp, b_recv)], HORIZON_NS, BACKLOG_NS)
    so_far = ready_times(t, [_stream(a_stamp, a_recv, now), _stream(b_stamp, b_recv, now)], HORIZON_NS, BACKLOG_NS)
    due = (whole <= now) | (so_far <= now)
    assert due.sum() > 10
    np.testing.assert_array_equal(so_far[due], whole[due])


def _resume_a_horizon_before(now_ns: int) -> int:
    return now_ns - HORIZON_NS


def test_each_grid_time_is_decided_at_the_first_tick_after_it_is_ready() -> None:
    t = np.array([0, 20, 40, 60, 80]) * MS
    ready = np.array([5, 35, 33, 100, 101]) * MS
    ticks = np.arange(0, 110, 20) * MS
    plan = decision_times(t, ready, ticks, BACKLOG_NS, np.ones(len(ticks), bool), _resume_a_horizon_before)
    # In order: the third is ready first but goes with the second; the last tick is at 100 ms.
    assert plan.decision_ns[:4].tolist() == [20 * MS, 40 * MS, 40 * MS, 100 * MS]
    assert plan.decision_ns[4] == NEVER_NS and not plan.skipped.any()
    assert plan.gaps == [] and plan.resume_ns == 0


def test_a_backlog_older_than_allowed_is_dropped_up_to_the_resume_time() -> None:
    t = np.array([0, 1, 2, 5]) * S
    ready = t + 10 * MS
    ticks = np.array([4 * S, 6 * S])  # the node did not tick for 4 s while data came in
    plan = decision_times(t, ready, ticks, BACKLOG_NS, np.ones(len(ticks), bool), _resume_a_horizon_before)
    # At 4 s the oldest is 4 s old: everything before 4 s - horizon goes as one gap.
    assert plan.skipped.tolist() == [True, True, True, False]
    assert plan.decision_ns.tolist() == [4 * S, 4 * S, 4 * S, 6 * S]
    assert plan.gaps == [(0, 2 * S)] and plan.resume_ns == 4 * S - HORIZON_NS


def test_a_backlog_is_kept_while_nothing_comes_in() -> None:
    t = np.array([0, 1, 2, 5]) * S
    ready = t + 10 * MS
    ticks = np.array([4 * S, 6 * S])
    plan = decision_times(t, ready, ticks, BACKLOG_NS, np.zeros(len(ticks), bool), _resume_a_horizon_before)
    assert not plan.skipped.any() and plan.gaps == []
    assert plan.decision_ns.tolist() == [4 * S, 4 * S, 4 * S, 6 * S]


def test_a_silence_still_open_is_a_stall_once_it_outlasts_the_patience() -> None:
    # Stream b is delivered 250 ms late (steadily: no burst), stops at 3 s and resumes at 6 s.
    # Grid times of 3.0 .. 3.25 s had not been reached when it went silent (at 3.25 s).
    a = _regular(2 * MS)
    b_stamp, b_recv = _regular(250 * MS)
    keep = (b_stamp <= 3 * S) | (b_stamp >= 6 * S)
    b_stamp, b_recv = b_stamp[keep], b_recv[keep]
    silent_from = 3 * S + 250 * MS
    t = _grid(3.02, 3.25)
    whole = ready_times(t, [_stream(*a), _stream(b_stamp, b_recv)], HORIZON_NS, BACKLOG_NS)
    np.testing.assert_array_equal(whole, np.full(len(t), silent_from + HORIZON_NS + 1))
    # Live at 3.6 s, with only what had arrived by then, sees the same silence.
    now = int(3.6 * S)
    so_far = ready_times(t, [_stream(*a, now), _stream(b_stamp, b_recv, now)], HORIZON_NS, BACKLOG_NS)
    np.testing.assert_array_equal(so_far, whole)
