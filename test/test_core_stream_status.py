"""StreamStatus: STALE within three periods of silence while other input flows."""

from sim_real_bridge.core.stream_status import OK, STALE, WARN, StreamStatus

MS = 1_000_000


def _status_after(n: int, period_ns: int = 5 * MS) -> StreamStatus:
    status = StreamStatus("/real/joint_states")
    for i in range(n):
        status.on_message(i * period_ns)
    return status


def test_no_message_yet_is_stale() -> None:
    assert StreamStatus("/x").level(0)[0] == STALE


def test_stale_after_three_periods_while_others_flow() -> None:
    status = _status_after(100)
    last = status.last_recv_ns
    assert not status.is_stale(last + 14 * MS, latest_input_ns=last + 14 * MS)
    assert status.is_stale(last + 16 * MS, latest_input_ns=last + 16 * MS)


def test_a_starved_monitor_does_not_call_streams_stale_before_the_outage_time() -> None:
    status = _status_after(100)
    last = status.last_recv_ns
    assert not status.is_stale(last + 500 * MS, latest_input_ns=last)
    assert status.is_stale(last + 1001 * MS, latest_input_ns=last)


def test_stale_episode_counted_once_and_recovery() -> None:
    status = _status_after(100)
    last = status.last_recv_ns
    for k in range(3):
        assert status.level(last + (20 + k) * MS, latest_input_ns=last + (20 + k) * MS)[0] == STALE
    assert status.stale_episodes == 1
    status.on_message(last + 30 * MS)
    assert status.level(last + 31 * MS, latest_input_ns=last + 31 * MS)[0] == OK


def test_problem_keeps_warn_for_the_warn_window() -> None:
    status = _status_after(10)
    status.on_problem("empty", status.last_recv_ns, refused=True)
    assert status.level(status.last_recv_ns + MS, status.last_recv_ns + MS)[0] == WARN
    assert status.values()["refused.empty"] == 1
