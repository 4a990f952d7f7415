"""Safety gate in front of the physical robot: joint limits, step size and a heartbeat.

Pure logic (no rclpy, no clock): the caller passes the current time in integer
nanoseconds. :class:`SafetyGate` decides, for one JointTrajectory-like command, whether
it may reach the real robot, and tracks the commander's liveness.

Checks, in the order a refusal reason is reported:

1. ``malformed``: no joint names, duplicate names, no points, a point whose positions
   do not match the names, velocities that are neither empty nor one per joint,
   negative or non-increasing ``time_from_start``.
2. ``non_finite``: a NaN or infinite position or velocity.
3. ``unknown_joint``: a joint without configured limits (with no limits configured,
   every command is refused: the gate fails closed).
4. ``heartbeat_timeout``: the gate tripped (see below) and has not re-armed.
5. ``position_limit``: a position outside [lower, upper].
6. ``velocity_limit``: a declared velocity above the joint's maximum, or the velocity
   implied between consecutive points.
7. ``no_measured_state``: no measured real position yet for a commanded joint.
8. ``max_step``: the first point lies more than ``max_step_rad`` from the last
   measured real position.
9. ``velocity_limit``: the velocity implied from the measured position to the first
   point, when that point has ``time_from_start > 0`` (a point due at 0 is a step,
   which ``max_step`` bounds).

Heartbeat and re-arm rule. The gate starts ``idle``; an accepted command or a
heartbeat arms it. While ``armed`` it expects the next heartbeat or accepted command
before a deadline: ``heartbeat_timeout_s`` after the last heartbeat, or after the end
of the last accepted trajectory (``receipt + last time_from_start + timeout``), since
a commander is not expected to speak while its trajectory plays. When the deadline
passes the gate ``trips`` (reported once, so the caller can send a hold) and refuses
every command with ``heartbeat_timeout`` until it re-arms, which takes either a
heartbeat, or ``rearm_commands`` (at least 2) well-formed commands each arriving
within ``heartbeat_timeout_s`` of the previous one. Commands before the last one of
that sequence are refused; the last one is then checked like any other, so a stale
trajectory still meets ``max_step`` from the held position. ``rearm_commands = 0``
re-arms on heartbeats only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from sim_real_bridge.errors import ConfigError

REASON_MALFORMED = "malformed"
REASON_NON_FINITE = "non_finite"
REASON_UNKNOWN_JOINT = "unknown_joint"
REASON_HEARTBEAT_TIMEOUT = "heartbeat_timeout"
REASON_POSITION_LIMIT = "position_limit"
REASON_VELOCITY_LIMIT = "velocity_limit"
REASON_NO_MEASURED_STATE = "no_measured_state"
REASON_MAX_STEP = "max_step"

#: Every refusal reason, in check order.
REFUSAL_REASONS: tuple[str, ...] = (
    REASON_MALFORMED,
    REASON_NON_FINITE,
    REASON_UNKNOWN_JOINT,
    REASON_HEARTBEAT_TIMEOUT,
    REASON_POSITION_LIMIT,
    REASON_VELOCITY_LIMIT,
    REASON_NO_MEASURED_STATE,
    REASON_MAX_STEP,
)

#: Reasons given to commands that are structurally unusable (not forwarded anywhere).
STRUCTURAL_REASONS: frozenset[str] = frozenset(
    {REASON_MALFORMED, REASON_NON_FINITE, REASON_UNKNOWN_JOINT}
)

STATE_IDLE = "idle"
STATE_ARMED = "armed"
STATE_TRIPPED = "tripped"

_NS_PER_S = 1_000_000_000
# Relative slack on velocity comparisons so a limit-exact trajectory is not refused
# for floating-point rounding of (q1 - q0) / dt.
_VELOCITY_RTOL = 1e-9


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


@dataclass(frozen=True)
class JointLimit:
    """Limits of one joint.

    Attributes:
        lower_rad: Lowest allowed position.
        upper_rad: Highest allowed position.
        velocity_max_rad_s: Largest allowed speed (absolute velocity).
    """

    lower_rad: float
    upper_rad: float
    velocity_max_rad_s: float


class JointLimits:
    """Position and velocity limits by joint name, from parallel arrays.

    Args:
        names: Joint names, unique and non-empty.
        lower_rad: Lower position limit per joint.
        upper_rad: Upper position limit per joint, above the lower one.
        velocity_max_rad_s: Maximum speed per joint, positive.

    Raises:
        ConfigError: Lengths differ, a name is empty or repeated, a value is not
            finite, lower >= upper, or a maximum speed is not positive.
    """

    def __init__(
        self,
        names: Sequence[str],
        lower_rad: Sequence[float],
        upper_rad: Sequence[float],
        velocity_max_rad_s: Sequence[float],
    ) -> None:
        names = list(names)
        lengths = {len(names), len(lower_rad), len(upper_rad), len(velocity_max_rad_s)}
        if len(lengths) != 1:
            raise ConfigError(
                "joint limits need one value per joint: joint_names has "
                f"{len(names)}, position_lower_rad {len(lower_rad)}, position_upper_rad "
                f"{len(upper_rad)}, velocity_max_rad_s {len(velocity_max_rad_s)}"
            )
        if len(set(names)) != len(names):
            raise ConfigError(f"joint_names has duplicates: {names}")
        limits: dict[str, JointLimit] = {}
        for name, lower, upper, vmax in zip(names, lower_rad, upper_rad, velocity_max_rad_s):
            if not name:
                raise ConfigError("joint_names has an empty name")
            if not all(_finite(v) for v in (lower, upper, vmax)):
                raise ConfigError(f"joint {name}: limits must be finite numbers")
            if lower >= upper:
                raise ConfigError(
                    f"joint {name}: position_lower_rad {lower} must be below "
                    f"position_upper_rad {upper}"
                )
            if vmax <= 0.0:
                raise ConfigError(f"joint {name}: velocity_max_rad_s {vmax} must be positive")
            limits[name] = JointLimit(float(lower), float(upper), float(vmax))
        self._limits = limits

    @property
    def names(self) -> tuple[str, ...]:
        """Joint names in configuration order."""
        return tuple(self._limits)

    def __len__(self) -> int:
        return len(self._limits)

    def __contains__(self, name: object) -> bool:
        return name in self._limits

    def __getitem__(self, name: str) -> JointLimit:
        return self._limits[name]

    def loosened_from(self, hard: JointLimits) -> list[str]:
        """Describe every way these limits are looser than ``hard`` (empty if none).

        A joint missing from ``hard``, a lower bound below it, an upper bound above it
        or a larger maximum speed each count.
        """
        problems = []
        for name, limit in self._limits.items():
            if name not in hard:
                problems.append(f"joint {name} has no hard limits")
                continue
            ref = hard[name]
            if limit.lower_rad < ref.lower_rad:
                problems.append(f"joint {name}: lower {limit.lower_rad} below {ref.lower_rad}")
            if limit.upper_rad > ref.upper_rad:
                problems.append(f"joint {name}: upper {limit.upper_rad} above {ref.upper_rad}")
            if limit.velocity_max_rad_s > ref.velocity_max_rad_s:
                problems.append(
                    f"joint {name}: velocity {limit.velocity_max_rad_s} above "
                    f"{ref.velocity_max_rad_s}"
                )
        return problems


@dataclass(frozen=True)
class GateConfig:
    """Settings of the gate besides joint limits.

    Attributes:
        max_step_rad: Largest distance of the first point from the measured position.
        heartbeat_timeout_s: Longest silence of the commander while armed.
        rearm_commands: Commands in a row needed to re-arm after a trip; 0 means
            heartbeats only. 1 is refused: the first late command would re-arm.

    Raises:
        ConfigError: A value is not finite or not positive, or ``rearm_commands`` is 1
            or negative.
    """

    max_step_rad: float
    heartbeat_timeout_s: float
    rearm_commands: int = 2

    def __post_init__(self) -> None:
        if not _finite(self.max_step_rad) or self.max_step_rad <= 0.0:
            raise ConfigError(f"max_step_rad must be a positive number, got {self.max_step_rad}")
        if not _finite(self.heartbeat_timeout_s) or self.heartbeat_timeout_s <= 0.0:
            raise ConfigError(
                f"heartbeat_timeout_s must be a positive number, got {self.heartbeat_timeout_s}"
            )
        if self.rearm_commands < 0 or self.rearm_commands == 1:
            raise ConfigError(
                "rearm_commands must be 0 (heartbeats only) or at least 2, got "
                f"{self.rearm_commands}"
            )

    @property
    def heartbeat_timeout_ns(self) -> int:
        """``heartbeat_timeout_s`` in integer nanoseconds."""
        return int(round(self.heartbeat_timeout_s * _NS_PER_S))


@dataclass(frozen=True)
class TrajectoryPoints:
    """The points of a JointTrajectory, as plain sequences.

    Attributes:
        positions_rad: One sequence per point, one position per joint name.
        velocities_rad_s: One sequence per point, empty or one velocity per joint.
        time_from_start_ns: One time per point, nanoseconds from the command's start.
    """

    positions_rad: Sequence[Sequence[float]]
    velocities_rad_s: Sequence[Sequence[float]]
    time_from_start_ns: Sequence[int]


@dataclass(frozen=True)
class GateDecision:
    """Outcome of :meth:`SafetyGate.check`.

    Attributes:
        accepted: The command may go to the real robot.
        reason: One of the ``REASON_*`` values, or ``""`` when accepted.
        detail: Human-readable specifics (joint, point, values).
        tripped: The heartbeat deadline passed during this call (send a hold).
    """

    accepted: bool
    reason: str = ""
    detail: str = ""
    tripped: bool = False


class SafetyGate:
    """Decides which commands may reach the real robot; tracks the heartbeat.

    Args:
        limits: Joint limits.
        config: Step, heartbeat and re-arm settings.
    """

    def __init__(self, limits: JointLimits, config: GateConfig) -> None:
        self.limits = limits
        self.config = config
        self.state = STATE_IDLE
        self.deadline_ns: Optional[int] = None
        self._rearm_streak = 0
        self._last_late_command_ns: Optional[int] = None

    def reconfigure(self, limits: JointLimits, config: GateConfig) -> None:
        """Replace limits and settings; the heartbeat state is kept."""
        self.limits = limits
        self.config = config

    def heartbeat(self, now_ns: int) -> None:
        """Record a heartbeat: arms an idle or tripped gate and extends the deadline."""
        if self.state != STATE_ARMED:
            self.state = STATE_ARMED
            self.deadline_ns = None
            self._rearm_streak = 0
            self._last_late_command_ns = None
        self._extend_deadline(now_ns + self.config.heartbeat_timeout_ns)

    def poll(self, now_ns: int) -> bool:
        """Trip the gate if its deadline passed; True only on the call that trips it."""
        if self.state == STATE_ARMED and self.deadline_ns is not None and now_ns > self.deadline_ns:
            self.state = STATE_TRIPPED
            self._rearm_streak = 0
            self._last_late_command_ns = None
            return True
        return False

    def check(
        self,
        names: Sequence[str],
        points: TrajectoryPoints,
        last_measured_q: Optional[Mapping[str, float]],
        now_ns: int,
    ) -> GateDecision:
        """Decide whether a command may go to the real robot.

        Args:
            names: Joint names of the command.
            points: Its points.
            last_measured_q: Last measured real position by joint name, or None if
                none was received yet.
            now_ns: Current time (the command's receipt time).

        Returns:
            The decision; an accepted command also refreshes the heartbeat.
        """
        tripped = self.poll(now_ns)
        reason, detail = self._check_structure(names, points)
        if not reason:
            reason, detail = self._check_heartbeat(now_ns)
        if not reason:
            reason, detail = self._check_limits(names, points)
        if not reason:
            reason, detail = self._check_from_measured(names, points, last_measured_q)
        if reason:
            return GateDecision(False, reason, detail, tripped)
        self.state = STATE_ARMED
        # The newest trajectory replaces the previous one, so its end sets the deadline.
        self.deadline_ns = (
            now_ns + int(points.time_from_start_ns[-1]) + self.config.heartbeat_timeout_ns
        )
        return GateDecision(True, "", "", tripped)

    def _extend_deadline(self, deadline_ns: int) -> None:
        if self.deadline_ns is None or deadline_ns > self.deadline_ns:
            self.deadline_ns = deadline_ns

    def _check_structure(self, names: Sequence[str], points: TrajectoryPoints) -> tuple[str, str]:
        n_joints = len(names)
        if n_joints == 0:
            return REASON_MALFORMED, "no joint names"
        if len(set(names)) != n_joints:
            return REASON_MALFORMED, f"duplicate joint names {list(names)}"
        n_points = len(points.positions_rad)
        if n_points == 0:
            return REASON_MALFORMED, "no points"
        if len(points.velocities_rad_s) != n_points or len(points.time_from_start_ns) != n_points:
            return REASON_MALFORMED, "points have mismatched fields"
        previous_t = -1
        for index in range(n_points):
            if len(points.positions_rad[index]) != n_joints:
                return REASON_MALFORMED, (
                    f"point {index} has {len(points.positions_rad[index])} positions "
                    f"for {n_joints} joints"
                )
            if len(points.velocities_rad_s[index]) not in (0, n_joints):
                return REASON_MALFORMED, (
                    f"point {index} has {len(points.velocities_rad_s[index])} velocities "
                    f"for {n_joints} joints"
                )
            t_ns = points.time_from_start_ns[index]
            if t_ns < 0 or t_ns <= previous_t:
                return REASON_MALFORMED, (
                    f"point {index} time_from_start {t_ns} ns is negative or not increasing"
                )
            previous_t = t_ns
        for index in range(n_points):
            values = list(points.positions_rad[index]) + list(points.velocities_rad_s[index])
            if not all(_finite(v) for v in values):
                return REASON_NON_FINITE, f"point {index} has a non-finite position or velocity"
        unknown = [name for name in names if name not in self.limits]
        if unknown:
            return REASON_UNKNOWN_JOINT, f"no limits configured for {unknown}"
        return "", ""

    def _check_heartbeat(self, now_ns: int) -> tuple[str, str]:
        if self.state != STATE_TRIPPED:
            return "", ""
        needed = self.config.rearm_commands
        if needed == 0:
            return REASON_HEARTBEAT_TIMEOUT, "gate tripped; waiting for a heartbeat to re-arm"
        last = self._last_late_command_ns
        within = last is not None and now_ns - last <= self.config.heartbeat_timeout_ns
        self._rearm_streak = self._rearm_streak + 1 if within else 1
        self._last_late_command_ns = now_ns
        if self._rearm_streak < needed:
            return REASON_HEARTBEAT_TIMEOUT, (
                f"gate tripped; {self._rearm_streak} of {needed} timely commands to re-arm"
            )
        self.state = STATE_ARMED
        self.deadline_ns = now_ns + self.config.heartbeat_timeout_ns
        self._rearm_streak = 0
        self._last_late_command_ns = None
        return "", ""

    def _check_limits(self, names: Sequence[str], points: TrajectoryPoints) -> tuple[str, str]:
        limits = [self.limits[name] for name in names]
        for index, positions in enumerate(points.positions_rad):
            for name, limit, q in zip(names, limits, positions):
                if q < limit.lower_rad or q > limit.upper_rad:
                    return REASON_POSITION_LIMIT, (
                        f"{name} point {index}: {q:.4f} rad outside "
                        f"[{limit.lower_rad}, {limit.upper_rad}]"
                    )
        for index, velocities in enumerate(points.velocities_rad_s):
            for name, limit, v in zip(names, limits, velocities):
                if abs(v) > limit.velocity_max_rad_s:
                    return REASON_VELOCITY_LIMIT, (
                        f"{name} point {index}: declared {v:.4f} rad/s exceeds "
                        f"{limit.velocity_max_rad_s}"
                    )
        times = points.time_from_start_ns
        for index in range(1, len(points.positions_rad)):
            dt_s = (times[index] - times[index - 1]) / _NS_PER_S
            pairs = zip(points.positions_rad[index - 1], points.positions_rad[index])
            for name, limit, (q0, q1) in zip(names, limits, pairs):
                speed = abs(q1 - q0) / dt_s
                if speed > limit.velocity_max_rad_s * (1.0 + _VELOCITY_RTOL):
                    return REASON_VELOCITY_LIMIT, (
                        f"{name} points {index - 1}->{index}: implied {speed:.4f} rad/s "
                        f"exceeds {limit.velocity_max_rad_s}"
                    )
        return "", ""

    def _check_from_measured(
        self,
        names: Sequence[str],
        points: TrajectoryPoints,
        last_measured_q: Optional[Mapping[str, float]],
    ) -> tuple[str, str]:
        if last_measured_q is None:
            return REASON_NO_MEASURED_STATE, "no real joint_states received yet"
        missing = [name for name in names if name not in last_measured_q]
        if missing:
            return REASON_NO_MEASURED_STATE, f"no measured position for {missing}"
        first = points.positions_rad[0]
        t0_s = points.time_from_start_ns[0] / _NS_PER_S
        for name, q in zip(names, first):
            step = abs(q - last_measured_q[name])
            if step > self.config.max_step_rad:
                return REASON_MAX_STEP, (
                    f"{name}: first point {step:.4f} rad from measured position, "
                    f"max {self.config.max_step_rad}"
                )
            vmax = self.limits[name].velocity_max_rad_s
            if t0_s > 0.0 and step / t0_s > vmax * (1.0 + _VELOCITY_RTOL):
                return REASON_VELOCITY_LIMIT, (
                    f"{name}: measured->first point implies {step / t0_s:.4f} rad/s, "
                    f"exceeds {vmax}"
                )
        return "", ""
