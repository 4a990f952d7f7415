"""TrajectoryFollower: joint_trajectory_controller semantics, pure (time in ns)."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.errors import TrajectoryError
from sim_real_bridge.sim.trajectory import JointTrajectoryData, TrajectoryFollower, TrajectoryPoint

NAMES = ("a", "b", "c")
S = 1_000_000_000


def traj(points, names=NAMES, start_ns=0):
    return JointTrajectoryData(tuple(names), tuple(points), start_ns)


def pt(t_s, q, v=None):
    return TrajectoryPoint(int(t_s * S), np.asarray(q, dtype=float), None if v is None else np.asarray(v, dtype=float))


def test_holds_initial_state_before_any_goal():
    f = TrajectoryFollower(NAMES, np.array([0.1, 0.2, 0.3]))
    q, qd = f.sample(5 * S)
    np.testing.assert_allclose(q, [0.1, 0.2, 0.3])
    np.testing.assert_allclose(qd, 0.0)


def test_linear_interpolation_honours_time_from_start():
    f = TrajectoryFollower(NAMES, np.zeros(3))
    f.set_goal(traj([pt(1.0, [1, 2, 3]), pt(3.0, [3, 2, 1])]), now_ns=10 * S)
    np.testing.assert_allclose(f.sample(10 * S)[0], [0, 0, 0])
    # From the state at receipt to the first point, linearly.
    np.testing.assert_allclose(f.sample(10 * S + S // 2)[0], [0.5, 1.0, 1.5])
    np.testing.assert_allclose(f.sample(11 * S)[0], [1, 2, 3])
    q, qd = f.sample(12 * S)
    np.testing.assert_allclose(q, [2, 2, 2])
    np.testing.assert_allclose(qd, [1, 0, -1])
    # Holds the last point afterwards, at rest.
    q, qd = f.sample(20 * S)
    np.testing.assert_allclose(q, [3, 2, 1])
    np.testing.assert_allclose(qd, 0.0)
    assert f.active_end_ns == 13 * S


def test_cubic_passes_points_with_their_velocities():
    f = TrajectoryFollower(NAMES, np.zeros(3))
    f.set_goal(traj([pt(1.0, [1, 1, 1], [1, 0, 0]), pt(2.0, [2, 1, 0], [0, 0, -1])]), now_ns=0)
    q, qd = f.sample(S)
    np.testing.assert_allclose(q, [1, 1, 1])
    np.testing.assert_allclose(qd, [1, 0, 0], atol=1e-9)
    eps = 1000
    q_a, _ = f.sample(S + S // 2 - eps)
    q_b, qd_mid = f.sample(S + S // 2 + eps)
    np.testing.assert_allclose((q_b - q_a) / (2 * eps * 1e-9), qd_mid, rtol=1e-4, atol=1e-6)


def test_joint_names_in_any_order():
    f = TrajectoryFollower(NAMES, np.zeros(3))
    f.set_goal(traj([pt(1.0, [3, 1, 2])], names=("c", "a", "b")), now_ns=0)
    np.testing.assert_allclose(f.sample(2 * S)[0], [1, 2, 3])


def test_new_goal_replaces_old_from_current_command():
    f = TrajectoryFollower(NAMES, np.zeros(3))
    f.set_goal(traj([pt(2.0, [2, 2, 2])]), now_ns=0)
    mid, _ = f.sample(S)
    f.set_goal(traj([pt(1.0, [-1, -1, -1])]), now_ns=S)
    # No jump at the switch: the new goal starts from where the old one was.
    np.testing.assert_allclose(f.sample(S)[0], mid)
    np.testing.assert_allclose(f.sample(2 * S)[0], [-1, -1, -1])
    assert f.goals_accepted == 2


def test_future_start_stamp_waits():
    f = TrajectoryFollower(NAMES, np.zeros(3))
    f.set_goal(traj([pt(1.0, [1, 1, 1])], start_ns=5 * S), now_ns=S)
    np.testing.assert_allclose(f.sample(4 * S)[0], 0.0)
    np.testing.assert_allclose(f.sample(6 * S)[0], 1.0)


def test_first_point_at_zero_jumps():
    f = TrajectoryFollower(NAMES, np.zeros(3))
    f.set_goal(traj([pt(0.0, [1, 1, 1]), pt(1.0, [2, 2, 2])]), now_ns=0)
    np.testing.assert_allclose(f.sample(0)[0], [1, 1, 1])


def test_empty_goal_holds_current_command():
    f = TrajectoryFollower(NAMES, np.zeros(3))
    f.set_goal(traj([pt(2.0, [2, 2, 2])]), now_ns=0)
    f.set_goal(traj([]), now_ns=S)
    np.testing.assert_allclose(f.sample(5 * S)[0], [1, 1, 1])


@pytest.mark.parametrize(
    ("trajectory", "match"),
    [
        (traj([pt(1.0, [1, 1, 1])], names=("a", "b", "x")), "do not match the controlled joints"),
        (traj([pt(1.0, [1, 1, 1])], names=("a", "a", "b")), "do not match the controlled joints"),
        (traj([pt(1.0, [1, 1])]), r"point 0: 2 positions for 3 joints"),
        (traj([pt(1.0, [1, np.nan, 1])]), "point 0: positions are not finite"),
        (traj([pt(1.0, [1, 1, 1], [1, 1, 1]), pt(2.0, [1, 1, 1], [1, 1])]), "point 1: 2 velocities for 3 joints"),
        (traj([pt(1.0, [1, 1, 1], [1, np.inf, 1])]), "point 0: velocities are not finite"),
        (traj([pt(1.0, [1, 1, 1]), pt(1.0, [2, 2, 2])]), "point 1: time_from_start is not increasing"),
        (traj([pt(-1.0, [1, 1, 1])]), "point 0: time_from_start is negative"),
    ],
)
def test_malformed_goals_are_refused(trajectory, match):
    f = TrajectoryFollower(NAMES, np.zeros(3))
    f.set_goal(traj([pt(1.0, [1, 1, 1])]), now_ns=0)
    with pytest.raises(TrajectoryError, match=match):
        f.set_goal(trajectory, now_ns=0)
    # The previous goal is kept.
    np.testing.assert_allclose(f.sample(2 * S)[0], [1, 1, 1])


def test_initial_state_shape_checked():
    with pytest.raises(TrajectoryError, match=r"initial state has shape \(2,\), expected \(3,\)"):
        TrajectoryFollower(NAMES, np.zeros(2))
