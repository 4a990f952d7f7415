"""ClockMap: one side's stamps onto the monitor clock (delay floor, drift, resets)."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.core.clock import ClockMap

MS = 1_000_000
S = 1_000_000_000
LEAK = 0.002
RESET_NS = S // 2
DELAY_NS = 4 * MS  # constant transport delay
OFFSET_NS = 50 * S  # the monitor clock is 50 s ahead of the side's clock
JITTER_NS = 300_000  # mean of the exponential delivery jitter


def _stream(n: int, period_ns: int = 10 * MS, seed: int = 1, jitter_ns: float = JITTER_NS
            ) -> tuple[np.ndarray, np.ndarray]:
    """(stamp, recv) of one stream: recv = stamp + offset + delay + exponential jitter."""
    rng = np.random.default_rng(seed)
    stamp = 1 * S + period_ns * np.arange(n, dtype=np.int64)
    recv = stamp + OFFSET_NS + DELAY_NS + rng.exponential(jitter_ns, n).astype(np.int64)
    return stamp, np.maximum.accumulate(recv)


def _merge(*streams: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Several streams as one batch in receive order: (ids, stamps, recvs)."""
    ids = np.concatenate([np.full(len(s), i) for i, (s, _) in enumerate(streams)])
    stamp = np.concatenate([s for s, _ in streams])
    recv = np.concatenate([r for _, r in streams])
    order = np.argsort(recv, kind="stable")
    return ids[order], stamp[order], recv[order]


def test_the_offset_is_the_delay_floor_under_exponential_jitter() -> None:
    # Jitter of mean 1 ms; the envelope may climb 2 us per 10 ms sample (leak 2e-4).
    stamp, recv = _stream(2000, jitter_ns=1 * MS)
    clock = ClockMap(2e-4, RESET_NS)
    assert clock.offset_ns is None
    mapped, crossed = clock.map(np.zeros(len(stamp), np.int64), stamp, recv)
    assert crossed == [] and clock.resets == 0
    # The envelope is the floor of recv - stamp: the fixed delay, not delay + mean jitter.
    floor = OFFSET_NS + DELAY_NS
    assert floor <= clock.offset_ns <= floor + 250_000
    # Mapped times are the stamps on the monitor clock plus that floor, not plus the jitter.
    err = mapped - (stamp + floor)
    assert err.min() >= 0 and np.mean(err[200:]) < 150_000 and np.abs(err[200:]).max() < 400_000


def test_the_freshest_stream_sets_the_offset_however_late_another_is() -> None:
    fresh = _stream(1000, seed=1)
    late_stamp, late_recv = _stream(1000, seed=2)
    late = (late_stamp, late_recv + 30 * MS)  # always delivered 30 ms later (a queue)
    ids, stamp, recv = _merge(fresh, late)
    clock = ClockMap(2e-4, RESET_NS)
    mapped, _ = clock.map(ids, stamp, recv)
    floor = OFFSET_NS + DELAY_NS
    assert floor <= clock.offset_ns <= floor + 150_000
    # The late stream's samples map to their stamps plus the floor, not 30 ms later.
    err = (mapped - (stamp + floor))[ids == 1]
    assert np.abs(err[100:]).max() < 300_000
    # And its delay beyond the envelope shows in the delivery statistics.
    delays = clock.delivery_delays_s({0: "fresh", 1: "late"})
    assert delays["late"]["p50"] == pytest.approx(0.030 + JITTER_NS * np.log(2) * 1e-9, abs=0.0003)
    assert delays["fresh"]["p50"] == pytest.approx(JITTER_NS * np.log(2) * 1e-9, abs=0.0001)
    assert delays["late"]["p50"] <= delays["late"]["p99"] <= delays["late"]["max"]


def test_a_stream_whose_stamps_jitter_does_not_pull_the_others_early() -> None:
    # joint states at 100 Hz with clean stamps; a 25 Hz pose whose stamps jitter by 6 ms
    # (seed 251): its early stamps look like fresh deliveries
    joints = _stream(3000, seed=6)
    pose_stamp, pose_recv = _stream(750, period_ns=40 * MS, seed=7)
    noise = np.random.default_rng(8).normal(0.0, 6 * MS, len(pose_stamp)).astype(np.int64)
    ids, stamp, recv = _merge(joints, (pose_stamp + noise, pose_recv))
    floor = OFFSET_NS + DELAY_NS
    late = (ids == 0) & (recv > recv[0] + 15 * S)  # once the envelope has climbed back
    for batch in (100, len(ids)):  # live ticks, and a recording handed over at once
        clock = ClockMap(LEAK, RESET_NS)
        mapped = np.concatenate([clock.map(ids[lo:lo + batch], stamp[lo:lo + batch], recv[lo:lo + batch])[0]
                                 for lo in range(0, len(ids), batch)])
        err = (mapped - (stamp + floor))[late]
        assert np.abs(err).max() < 1 * MS, (batch, np.abs(err).max())
        assert clock.resets == 0


def test_the_envelope_follows_a_slow_clock() -> None:
    # The side's clock runs 200 ppm slow: recv - stamp grows 4 ms over 20 s. A fixed offset
    # would end 4 ms off; the leaky envelope (2000 ppm) keeps up.
    n = 2000
    stamp, recv = _stream(n, seed=3)
    drifted = 1 * S + ((stamp - 1 * S) * (1 - 200e-6)).astype(np.int64)
    clock = ClockMap(LEAK, RESET_NS)
    mapped, _ = clock.map(np.zeros(n, np.int64), drifted, recv)
    truth = stamp + OFFSET_NS + DELAY_NS  # when each sample was taken, on the monitor clock, plus the floor
    err = (mapped - truth)[-500:]
    assert np.abs(err).max() < 1 * MS and abs(np.mean(err)) < 0.3 * MS
    assert clock.resets == 0


def test_batches_and_one_call_map_alike() -> None:
    ids, stamp, recv = _merge(_stream(600, seed=4), _stream(300, period_ns=20 * MS, seed=5))
    whole = ClockMap(LEAK, RESET_NS)
    mapped_whole, _ = whole.map(ids, stamp, recv)
    split = ClockMap(LEAK, RESET_NS)
    parts = [split.map(ids[lo:lo + 37], stamp[lo:lo + 37], recv[lo:lo + 37])[0] for lo in range(0, len(ids), 37)]
    np.testing.assert_allclose(np.concatenate(parts), mapped_whole, rtol=0, atol=1000)
    now = recv[::50]
    np.testing.assert_allclose(split.offset_at(now), whole.offset_at(now), rtol=0, atol=1000)


def test_offset_at_is_the_offset_as_it_stood_then() -> None:
    stamp, recv = _stream(500)
    clock = ClockMap(LEAK, RESET_NS)
    clock.map(np.zeros(500, np.int64), stamp, recv)
    before_any = clock.offset_at(np.array([recv[0] - 1]))
    assert before_any.tolist() == [0]
    # Right after the first sample, the offset is that sample's delay.
    assert clock.offset_at(np.array([recv[0]])).tolist() == [recv[0] - stamp[0]]
    assert clock.offset_at(np.array([recv[-1]]))[0] == clock.offset_ns


def test_spread_is_the_std_of_the_delays_beyond_the_envelope() -> None:
    stamp, recv = _stream(3000, jitter_ns=1 * MS)
    clock = ClockMap(LEAK, RESET_NS)
    clock.map(np.zeros(3000, np.int64), stamp, recv)
    # Exponential jitter of scale 1 ms has a std of 1 ms.
    assert clock.spread_at(np.array([recv[-1]]))[0] == pytest.approx(1e-3, rel=0.2)
    assert clock.spread_at(np.array([recv[0] - 1])).tolist() == [0.0]  # nothing yet


def test_a_clock_reset_opens_one_epoch_and_is_counted() -> None:
    stamp, recv = _stream(1000)
    stamp = stamp.copy()
    stamp[500:] -= 60 * S  # the side's clock restarted
    clock = ClockMap(LEAK, RESET_NS)
    mapped, crossed = clock.map(np.zeros(1000, np.int64), stamp, recv)
    assert crossed == [0] and clock.resets == 1
    # Mapped times go on across the reset: the new epoch's envelope is its own floor.
    taken = stamp + np.where(np.arange(1000) >= 500, 60 * S, 0)  # the stamps had the clock not restarted
    err = mapped - (taken + OFFSET_NS + DELAY_NS)
    assert np.abs(err).max() < 1 * MS
    assert np.all(np.diff(mapped[490:510]) > 0)


def test_a_stamp_far_ahead_of_the_receive_clock_is_a_reset_too() -> None:
    stamp, recv = _stream(400)
    stamp = stamp.copy()
    stamp[200:] += 60 * S
    clock = ClockMap(LEAK, RESET_NS)
    _, crossed = clock.map(np.zeros(400, np.int64), stamp, recv)
    assert crossed == [0] and clock.resets == 1


def test_a_silence_is_no_reset() -> None:
    # Nothing for 3 s, then the stamps go on as the receive clock did: a pause, not a reset.
    stamp, recv = _stream(400)
    stamp, recv = stamp.copy(), recv.copy()
    stamp[200:] += 3 * S
    recv[200:] += 3 * S
    clock = ClockMap(LEAK, RESET_NS)
    _, crossed = clock.map(np.zeros(400, np.int64), stamp, recv)
    assert crossed == [] and clock.resets == 0


def test_a_backlog_delivered_late_is_no_reset() -> None:
    # A stream held 1 s then delivered in a burst: its stamps did not jump.
    stamp, recv = _stream(400)
    recv = recv.copy()
    recv[100:200] = recv[199] + np.arange(100) * 20_000
    recv = np.maximum.accumulate(recv)
    clock = ClockMap(LEAK, RESET_NS)
    _, crossed = clock.map(np.zeros(400, np.int64), stamp, recv)
    assert crossed == [] and clock.resets == 0


def test_streams_crossing_one_reset_count_it_once_and_backlog_maps_to_its_own_epoch() -> None:
    a_stamp, a_recv = _stream(600, seed=6)
    b_stamp, b_recv = _stream(600, seed=7)
    a_stamp, b_stamp = a_stamp.copy(), b_stamp.copy()
    a_stamp[300:] -= 60 * S
    b_stamp[300:] -= 60 * S
    b_recv = b_recv + 200 * MS  # stream b lags: its pre-reset samples arrive after a crossed
    ids, stamp, recv = _merge((a_stamp, a_recv), (b_stamp, b_recv))
    clock = ClockMap(LEAK, RESET_NS)
    mapped, crossed = clock.map(ids, stamp, recv)
    assert clock.resets == 1 and sorted(crossed) == [0, 1]
    # b's samples stamped before the reset, received after a crossed, still map near their stamps.
    old_b = (ids == 1) & (stamp > 1 * S + 2 * S) & (stamp < 1 * S + 3 * S)
    late = old_b & (recv > a_recv[300])
    assert late.any()
    err = mapped[late] - (stamp[late] + OFFSET_NS + DELAY_NS)
    assert np.abs(err).max() < 1 * MS
