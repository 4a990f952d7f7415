"""When the task player sends each segment of a program, timed by the program itself.

Pure (no clock read, integer nanoseconds in). Each segment is a trajectory from and to
the home pose; the next one starts where the previous one ends by its own
``time_from_start``, never by the wall clock's count of steps. A segment is sent
``start_lead_ns`` before its start and stamped with its start, so both robots begin it
at the same instant from home. When the sender runs late (a loaded machine delays its
timer), the segment's start moves to ``now + start_lead_ns`` and the rest of the program
slips by as much: no start stamp is ever in the past, so no robot is told to be
somewhere mid-trajectory already (a jump that implies an infeasible speed).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim_real_bridge.sim.tasks import TaskProgram
from sim_real_bridge.sim.trajectory import JointTrajectoryData


@dataclass(frozen=True)
class DueSegment:
    """A segment to send now.

    Attributes:
        index: position in the program.
        start_ns: when the robots start it (its header stamp when a lead is used).
        trajectory: the segment.
        phase: its name (reach, wipe, push, idle).
        slip_ns: how much later than planned it starts (0 when on time).
    """

    index: int
    start_ns: int
    trajectory: JointTrajectoryData
    phase: str
    slip_ns: int


class ProgramSchedule:
    """The send plan of a program; ``due`` tells what to send at a given time.

    Args:
        program: the command program.
        start_lead_ns: each segment is sent this long before it starts (>= 0).

    Raises:
        ValueError: a negative lead.
    """

    def __init__(self, program: TaskProgram, start_lead_ns: int) -> None:
        if start_lead_ns < 0:
            raise ValueError(f"start lead must be >= 0 ns, got {start_lead_ns}")
        self.program = program
        self.start_lead_ns = int(start_lead_ns)
        self._next = 0
        self._next_start_ns: int | None = None
        self.slip_ns = 0

    @property
    def started(self) -> bool:
        """Whether ``start`` was called."""
        return self._next_start_ns is not None

    @property
    def finished(self) -> bool:
        """Whether every segment was handed out."""
        return self._next >= len(self.program.segments)

    @property
    def end_ns(self) -> int | None:
        """When the program's last segment ends, slips included (None before the start)."""
        if self._next_start_ns is None:
            return None
        remaining = sum(traj.duration_ns for _, traj in self.program.segments[self._next:])
        return self._next_start_ns + remaining

    def start(self, now_ns: int) -> None:
        """The program starts now: its first segment starts ``start_lead_ns`` from now."""
        self._next_start_ns = int(now_ns) + self.start_lead_ns

    def due(self, now_ns: int) -> DueSegment | None:
        """The segment to send at ``now_ns``, if its send time has come (at most one per call).

        Its start is the end of the previous segment by that one's own timing, or
        ``now_ns + start_lead_ns`` when that is later (the sender ran late).
        """
        if self._next_start_ns is None or self.finished or now_ns < self._next_start_ns - self.start_lead_ns:
            return None
        start_ns = max(self._next_start_ns, int(now_ns) + self.start_lead_ns)
        slip_ns = start_ns - self._next_start_ns
        _, trajectory = self.program.segments[self._next]
        due = DueSegment(self._next, start_ns, trajectory, self.program.phases[self._next].name, slip_ns)
        self.slip_ns += slip_ns
        self._next += 1
        self._next_start_ns = start_ns + trajectory.duration_ns
        return due
