"""StreamBuffer: samples kept sorted by mapped time, with what had arrived when."""

from __future__ import annotations

import numpy as np

from sim_real_bridge.core.buffers import StreamBuffer

NEVER = np.iinfo(np.int64).max


def _buffer(times: list[int], recvs: list[int], width: int = 2) -> StreamBuffer:
    """A buffer given samples one at a time in receive order; value row i = (time, 10 * time)."""
    buf = StreamBuffer(width)
    for t, r in zip(times, recvs, strict=True):
        buf.extend(np.array([t]), np.array([r]), np.array([[t, 10 * t][:width]], dtype=float))
    return buf


def test_an_empty_buffer_has_no_rows_and_reaches_nothing() -> None:
    buf = StreamBuffer(3)
    assert len(buf) == 0 and buf.last_time_ns is None and buf.last_recv_ns is None and buf.first_recv_ns is None
    assert buf.reached(np.array([0, 10])).tolist() == [NEVER, NEVER]
    buf.extend(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 3)))
    assert len(buf) == 0 and buf.first_recv_ns is None


def test_rows_out_of_time_order_are_sorted_with_their_values_and_receive_times() -> None:
    # Time 20 is received last (reordered on the way).
    buf = _buffer([0, 10, 30, 20, 40], [5, 15, 35, 50, 55])
    assert buf.time_ns.tolist() == [0, 10, 20, 30, 40]
    assert buf.values[:, 0].tolist() == [0, 10, 20, 30, 40]
    assert buf.values[:, 1].tolist() == [0, 100, 200, 300, 400]
    assert buf.recv_ns.tolist() == [5, 15, 50, 35, 55]
    # Arrivals stay in receive order.
    assert buf.arrivals_ns.tolist() == [5, 15, 35, 50, 55]
    assert buf.first_recv_ns == 5 and buf.last_recv_ns == 55 and buf.last_time_ns == 40


def test_an_unsorted_batch_is_sorted_too() -> None:
    buf = StreamBuffer(1)
    buf.extend(np.array([30, 10, 20]), np.array([1, 2, 3]), np.array([[3.0], [1.0], [2.0]]))
    buf.extend(np.array([5, 40]), np.array([4, 5]), np.array([[0.5], [4.0]]))
    assert buf.time_ns.tolist() == [5, 10, 20, 30, 40]
    assert buf.values[:, 0].tolist() == [0.5, 1.0, 2.0, 3.0, 4.0]


def test_reached_is_when_the_stream_first_held_a_sample_at_or_after_t() -> None:
    buf = _buffer([0, 10, 30, 20], [5, 15, 35, 50])
    # t=15: the first sample at or after it to arrive was time 30 (at 35), before time 20 (at 50).
    got = buf.reached(np.array([0, 1, 10, 15, 20, 25, 30, 31]))
    assert got.tolist() == [5, 15, 15, 35, 35, 35, 35, NEVER]


def test_reached_grows_as_rows_are_added_and_is_the_same_given_all_at_once() -> None:
    rng = np.random.default_rng(1)
    times = np.arange(0, 2000, 10) + rng.integers(-15, 15, 200)  # jittered stamps: some out of order
    recvs = np.arange(200) * 10 + 3
    one_by_one = _buffer(times.tolist(), recvs.tolist(), width=1)
    at_once = StreamBuffer(1)
    at_once.extend(times, recvs, times[:, None].astype(float))
    query = np.arange(-20, 2010, 7)
    np.testing.assert_array_equal(one_by_one.reached(query), at_once.reached(query))
    np.testing.assert_array_equal(one_by_one.time_ns, np.sort(times))
    # By definition: the smallest receive time among samples at or after t.
    want = [recvs[times >= t].min() if (times >= t).any() else NEVER for t in query]
    assert one_by_one.reached(query).tolist() == want


def test_growing_past_the_initial_capacity_keeps_every_row() -> None:
    buf = StreamBuffer(2)
    for start in range(0, 3000, 100):
        t = np.arange(start, start + 100)
        buf.extend(t, t + 1, np.column_stack((t, -t)).astype(float))
    assert len(buf) == 3000
    np.testing.assert_array_equal(buf.time_ns, np.arange(3000))
    np.testing.assert_array_equal(buf.values[:, 1], -np.arange(3000.0))
    assert len(buf.arrivals_ns) == 3000


def test_trim_forgets_older_rows_but_keeps_the_newest_two() -> None:
    buf = _buffer(list(range(0, 100, 10)), list(range(1, 101, 10)))
    buf.trim(45)
    assert buf.time_ns.tolist() == [50, 60, 70, 80, 90]
    assert buf.values[:, 0].tolist() == [50, 60, 70, 80, 90]
    buf.trim(10_000)
    assert buf.time_ns.tolist() == [80, 90]
    # Rows added after a trim land after the kept ones.
    buf.extend(np.array([85]), np.array([200]), np.array([[85.0, 850.0]]))
    assert buf.time_ns.tolist() == [80, 85, 90]
    assert buf.reached(np.array([81])).tolist() == [91]  # time 90 had arrived (at 91) before 85 (at 200)
