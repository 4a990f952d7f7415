"""Safety gate: every refusal reason, the heartbeat lifecycle and every config error."""

from __future__ import annotations

import math

import pytest

from sim_real_bridge.commands import safety
from sim_real_bridge.commands.safety import (
    GateConfig,
    JointLimits,
    SafetyGate,
    TrajectoryPoints,
)
from sim_real_bridge.errors import ConfigError

S = 1_000_000_000
NAMES = ["j1", "j2"]
HOME = {"j1": 0.0, "j2": 0.5}


def limits() -> JointLimits:
    return JointLimits(NAMES, [-1.0, -2.0], [1.0, 2.0], [1.0, 0.5])


def gate(max_step_rad: float = 0.3, timeout_s: float = 1.0, rearm: int = 2) -> SafetyGate:
    return SafetyGate(limits(), GateConfig(max_step_rad, timeout_s, rearm))


def pts(positions, times_s, velocities=None) -> TrajectoryPoints:
    if velocities is None:
        velocities = [[] for _ in positions]
    return TrajectoryPoints(positions, velocities, [int(round(t * S)) for t in times_s])


def ok_points() -> TrajectoryPoints:
    return pts([[0.1, 0.55], [0.3, 0.6]], [0.5, 1.0], [[0.2, 0.1], [0.0, 0.0]])


def test_accepts_a_command_within_every_limit() -> None:
    decision = gate().check(NAMES, ok_points(), HOME, 10 * S)
    assert decision == safety.GateDecision(True, "", "", False)


def test_accepts_a_subset_of_joints() -> None:
    decision = gate().check(["j2"], pts([[0.6]], [1.0]), HOME, 0)
    assert decision.accepted


def test_accepts_exactly_at_limits() -> None:
    g = SafetyGate(limits(), GateConfig(2.0, 1.0))
    measured = {"j1": 0.0, "j2": 2.0}
    # j1 moves 1.0 rad in 1 s = its maximum; j2 sits on its upper bound.
    decision = g.check(NAMES, pts([[1.0, 2.0]], [1.0], [[1.0, -0.5]]), measured, 0)
    assert decision.accepted, decision.detail


@pytest.mark.parametrize(
    ("names", "points", "match"),
    [
        ([], pts([[0.0]], [1.0]), "no joint names"),
        (["j1", "j1"], pts([[0.0, 0.0]], [1.0]), "duplicate"),
        (NAMES, pts([], []), "no points"),
        (NAMES, TrajectoryPoints([[0.0, 0.5]], [], [S]), "mismatched"),
        (NAMES, pts([[0.0]], [1.0]), "1 positions for 2 joints"),
        (NAMES, pts([[0.0, 0.5]], [1.0], [[0.1]]), "1 velocities for 2 joints"),
        (NAMES, pts([[0.0, 0.5]], [-0.1]), "negative or not increasing"),
        (NAMES, pts([[0.0, 0.5], [0.0, 0.5]], [1.0, 1.0]), "not increasing"),
    ],
)
def test_refuses_malformed(names, points, match) -> None:
    decision = gate().check(names, points, HOME, 0)
    assert (decision.accepted, decision.reason) == (False, safety.REASON_MALFORMED)
    assert match in decision.detail


@pytest.mark.parametrize(
    "points",
    [
        pts([[math.nan, 0.5]], [1.0]),
        pts([[0.0, math.inf]], [1.0]),
        pts([[0.0, 0.5]], [1.0], [[0.0, -math.inf]]),
    ],
)
def test_refuses_non_finite(points) -> None:
    decision = gate().check(NAMES, points, HOME, 0)
    assert decision.reason == safety.REASON_NON_FINITE
    assert not decision.accepted


def test_refuses_unknown_joint() -> None:
    decision = gate().check(["j1", "elbow"], pts([[0.0, 0.0]], [1.0]), HOME, 0)
    assert decision.reason == safety.REASON_UNKNOWN_JOINT
    assert "elbow" in decision.detail


def test_no_limits_refuses_everything() -> None:
    g = SafetyGate(JointLimits([], [], [], []), GateConfig(0.3, 1.0))
    assert g.check(["j1"], pts([[0.0]], [1.0]), HOME, 0).reason == safety.REASON_UNKNOWN_JOINT


@pytest.mark.parametrize(
    ("positions", "detail"),
    [([[1.01, 0.5]], "j1 point 0"), ([[0.0, 0.5], [0.0, -2.5]], "j2 point 1")],
)
def test_refuses_position_limit(positions, detail) -> None:
    g = SafetyGate(limits(), GateConfig(10.0, 1.0))
    decision = g.check(NAMES, pts(positions, [10.0, 20.0][: len(positions)]), HOME, 0)
    assert decision.reason == safety.REASON_POSITION_LIMIT
    assert detail in decision.detail


def test_refuses_declared_velocity() -> None:
    decision = gate().check(NAMES, pts([[0.0, 0.5]], [1.0], [[0.0, 0.51]]), HOME, 0)
    assert decision.reason == safety.REASON_VELOCITY_LIMIT
    assert "declared" in decision.detail


def test_refuses_implied_velocity_between_points() -> None:
    # j1 moves 0.3 rad in 0.2 s = 1.5 rad/s > 1.0.
    decision = gate().check(NAMES, pts([[0.0, 0.5], [0.3, 0.5]], [1.0, 1.2]), HOME, 0)
    assert decision.reason == safety.REASON_VELOCITY_LIMIT
    assert "points 0->1" in decision.detail


def test_refuses_implied_velocity_from_measured_position() -> None:
    # j2 moves 0.2 rad from its measured 0.5 in 0.1 s = 2 rad/s > 0.5.
    decision = gate().check(NAMES, pts([[0.0, 0.7]], [0.1]), HOME, 0)
    assert decision.reason == safety.REASON_VELOCITY_LIMIT
    assert "measured->first" in decision.detail


def test_first_point_due_now_is_bounded_by_max_step_only() -> None:
    assert gate().check(NAMES, pts([[0.2, 0.5]], [0.0]), HOME, 0).accepted
    decision = gate().check(NAMES, pts([[0.4, 0.5]], [0.0]), HOME, 0)
    assert decision.reason == safety.REASON_MAX_STEP


def test_refuses_max_step() -> None:
    decision = gate(max_step_rad=0.3).check(NAMES, pts([[0.0, 0.9]], [5.0]), HOME, 0)
    assert decision.reason == safety.REASON_MAX_STEP
    assert "j2" in decision.detail


@pytest.mark.parametrize(
    ("measured", "match"), [(None, "no real joint_states"), ({"j1": 0.0}, "'j2'")]
)
def test_refuses_without_measured_state(measured, match) -> None:
    decision = gate().check(NAMES, ok_points(), measured, 0)
    assert decision.reason == safety.REASON_NO_MEASURED_STATE
    assert match in decision.detail


def test_reason_order_reports_structure_before_limits() -> None:
    decision = gate().check(["j1", "elbow"], pts([[5.0, math.nan]], [1.0]), None, 0)
    assert decision.reason == safety.REASON_NON_FINITE


# --- heartbeat ----------------------------------------------------------------------


def test_idle_gate_never_trips_and_first_command_arms() -> None:
    g = gate()
    assert g.state == safety.STATE_IDLE
    assert not g.poll(100 * S)
    assert g.check(NAMES, ok_points(), HOME, 100 * S).accepted
    assert g.state == safety.STATE_ARMED
    # deadline = receipt + trajectory end (1 s) + timeout (1 s)
    assert g.deadline_ns == 102 * S


def test_trips_once_after_deadline_then_refuses() -> None:
    g = gate()
    g.check(NAMES, ok_points(), HOME, 0)
    assert not g.poll(2 * S)
    assert g.poll(2 * S + 1)
    assert not g.poll(3 * S)
    assert g.state == safety.STATE_TRIPPED
    decision = g.check(NAMES, ok_points(), HOME, 10 * S)
    assert decision.reason == safety.REASON_HEARTBEAT_TIMEOUT
    assert "1 of 2" in decision.detail


def test_check_reports_a_trip_it_detects() -> None:
    g = gate()
    g.heartbeat(0)
    decision = g.check(NAMES, ok_points(), HOME, 5 * S)
    assert decision.tripped
    assert decision.reason == safety.REASON_HEARTBEAT_TIMEOUT


def test_heartbeats_keep_the_gate_armed() -> None:
    g = gate()
    for t in range(10):
        g.heartbeat(t * S // 2)
        assert not g.poll(t * S // 2 + S // 4)
    assert g.state == safety.STATE_ARMED


def test_refused_commands_do_not_refresh_the_heartbeat() -> None:
    g = gate()
    g.heartbeat(0)
    g.check(NAMES, pts([[5.0, 0.5]], [0.1]), HOME, int(0.9 * S))
    assert g.poll(int(1.1 * S))


def test_heartbeat_rearms_a_tripped_gate() -> None:
    g = gate()
    g.heartbeat(0)
    assert g.poll(2 * S)
    g.heartbeat(3 * S)
    assert g.state == safety.STATE_ARMED
    assert g.check(NAMES, ok_points(), HOME, int(3.5 * S)).accepted


def test_timely_command_sequence_rearms_and_last_one_is_checked() -> None:
    g = gate(rearm=3)
    g.heartbeat(0)
    assert g.poll(2 * S)
    t0 = 10 * S
    first = g.check(NAMES, ok_points(), HOME, t0)
    second = g.check(NAMES, ok_points(), HOME, t0 + S // 2)
    assert (first.reason, second.reason) == (safety.REASON_HEARTBEAT_TIMEOUT,) * 2
    third = g.check(NAMES, pts([[0.0, 1.5]], [5.0]), HOME, t0 + S)  # re-arms, then max_step
    assert third.reason == safety.REASON_MAX_STEP
    assert g.state == safety.STATE_ARMED
    assert g.check(NAMES, ok_points(), HOME, t0 + int(1.5 * S)).accepted


def test_slow_commands_do_not_rearm() -> None:
    g = gate()
    g.heartbeat(0)
    assert g.poll(2 * S)
    for k in range(5):
        decision = g.check(NAMES, ok_points(), HOME, (10 + 2 * k) * S)
        assert decision.reason == safety.REASON_HEARTBEAT_TIMEOUT
        assert "1 of 2" in decision.detail


def test_rearm_zero_needs_a_heartbeat() -> None:
    g = gate(rearm=0)
    g.heartbeat(0)
    assert g.poll(2 * S)
    for k in range(4):
        decision = g.check(NAMES, ok_points(), HOME, 3 * S + k * S // 10)
        assert decision.reason == safety.REASON_HEARTBEAT_TIMEOUT
        assert "heartbeat to re-arm" in decision.detail
    g.heartbeat(4 * S)
    assert g.check(NAMES, ok_points(), HOME, 4 * S).accepted


def test_rearmed_gate_trips_again_if_silent() -> None:
    g = gate()
    g.heartbeat(0)
    assert g.poll(2 * S)
    g.check(NAMES, ok_points(), HOME, 10 * S)
    g.check(NAMES, pts([[9.0, 0.5]], [1.0]), HOME, 10 * S + 1)  # re-arms, position limit
    assert g.state == safety.STATE_ARMED
    assert g.poll(11 * S + 2)


def test_reconfigure_keeps_heartbeat_state() -> None:
    g = gate()
    g.heartbeat(0)
    tight = JointLimits(NAMES, [-0.5, -0.5], [0.5, 0.5], [0.5, 0.5])
    g.reconfigure(tight, GateConfig(0.3, 1.0))
    assert g.state == safety.STATE_ARMED
    decision = g.check(NAMES, pts([[0.0, 0.6]], [1.0]), HOME, S // 2)
    assert decision.reason == safety.REASON_POSITION_LIMIT


# --- configuration errors -----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((["a", "b"], [0.0], [1.0, 1.0], [1.0, 1.0]), "one value per joint"),
        ((["a", "a"], [0.0, 0.0], [1.0, 1.0], [1.0, 1.0]), "duplicates"),
        (([""], [0.0], [1.0], [1.0]), "empty name"),
        ((["a"], [math.nan], [1.0], [1.0]), "must be finite"),
        ((["a"], [0.0], [math.inf], [1.0]), "must be finite"),
        ((["a"], [1.0], [1.0], [1.0]), "must be below"),
        ((["a"], [0.0], [1.0], [0.0]), "must be positive"),
        ((["a"], [0.0], [1.0], ["fast"]), "must be finite"),
    ],
)
def test_joint_limits_errors(args, match) -> None:
    with pytest.raises(ConfigError, match=match):
        JointLimits(*args)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0.0, 1.0), "max_step_rad"),
        ((math.nan, 1.0), "max_step_rad"),
        ((0.3, -1.0), "heartbeat_timeout_s"),
        ((0.3, math.inf), "heartbeat_timeout_s"),
        ((0.3, 1.0, 1), "rearm_commands"),
        ((0.3, 1.0, -2), "rearm_commands"),
    ],
)
def test_gate_config_errors(args, match) -> None:
    with pytest.raises(ConfigError, match=match):
        GateConfig(*args)


def test_gate_config_timeout_in_ns() -> None:
    assert GateConfig(0.3, 0.25).heartbeat_timeout_ns == S // 4


def test_joint_limits_accessors() -> None:
    lim = limits()
    assert lim.names == ("j1", "j2")
    assert len(lim) == 2 and "j1" in lim and "j3" not in lim
    assert lim["j2"] == safety.JointLimit(-2.0, 2.0, 0.5)


def test_loosened_from_lists_each_loosening() -> None:
    hard = limits()
    assert JointLimits(NAMES, [-0.5, -2.0], [1.0, 1.0], [0.2, 0.5]).loosened_from(hard) == []
    loose_j9 = JointLimits(["j1", "j2", "j9"], [-1.5, -2.0, 0.0], [1.0, 2.5, 1.0], [1.0, 0.6, 1.0])
    problems = loose_j9.loosened_from(hard)
    assert problems == [
        "joint j1: lower -1.5 below -1.0",
        "joint j2: upper 2.5 above 2.0",
        "joint j2: velocity 0.6 above 0.5",
        "joint j9 has no hard limits",
    ]
