"""The task player's send plan: timed by the program itself, never a start in the past."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.sim.schedule import ProgramSchedule
from sim_real_bridge.sim.tasks import build_program

pytestmark = pytest.mark.mujoco

LEAD_NS = 100_000_000


@pytest.fixture(scope="module")
def program():
    return build_program("tour", 20.0, "ur6", idle_windows_s=((8.0, 10.0),))


def test_on_time_each_segment_starts_where_the_previous_one_ends(program):
    schedule = ProgramSchedule(program, LEAD_NS)
    assert schedule.due(0) is None and not schedule.started
    schedule.start(1_000)
    starts = []
    now = 1_000
    while not schedule.finished:
        due = schedule.due(now)
        if due is not None:
            assert due.start_ns - now == LEAD_NS and due.slip_ns == 0
            starts.append(due.start_ns)
        now += 1_000_000
    durations = [traj.duration_ns for _, traj in program.segments]
    assert np.diff(starts).tolist() == durations[:-1]
    assert [program.phases[i].name for i in range(len(starts))] == ["reach", "idle", "wipe", "push"][:len(starts)]
    assert schedule.slip_ns == 0 and schedule.end_ns == starts[-1] + durations[-1]


def test_a_late_sender_slips_the_program_and_never_stamps_the_past(program):
    rng = np.random.default_rng(3)
    schedule = ProgramSchedule(program, LEAD_NS)
    schedule.start(0)
    planned_end = schedule.end_ns
    now, previous_end = 0, None
    sent = 0
    while not schedule.finished:
        now += int(rng.integers(1, 600)) * 1_000_000  # a timer that runs up to 0.6 s late
        due = schedule.due(now)
        if due is None:
            continue
        sent += 1
        assert due.start_ns >= now + LEAD_NS
        if previous_end is not None:
            assert due.start_ns >= previous_end  # never cuts into the previous segment
            assert due.slip_ns == due.start_ns - previous_end
        previous_end = due.start_ns + due.trajectory.duration_ns
        assert schedule.due(now) is None, "one segment per call"
    assert sent == len(program.segments)
    assert schedule.slip_ns > 0 and schedule.end_ns == planned_end + schedule.slip_ns


def test_zero_lead_and_bad_lead(program):
    schedule = ProgramSchedule(program, 0)
    schedule.start(5)
    due = schedule.due(5)
    assert due is not None and due.start_ns == 5
    with pytest.raises(ValueError, match="start lead must be >= 0 ns, got -1"):
        ProgramSchedule(program, -1)
