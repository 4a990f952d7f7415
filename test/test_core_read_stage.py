"""The read stage: streams sampled at grid times (interpolation, holds, gaps, windows,
frames), and health read with each real stream's sim twin."""

from __future__ import annotations

import numpy as np
import pytest
from transforms3d.quaternions import axangle2quat, quat2mat

from sim_real_bridge.core.buffers import StreamBuffer
from sim_real_bridge.core.health import FeatureConfig, StreamHealth
from sim_real_bridge.core.joint_names import pair_joints
from sim_real_bridge.core.read_stage import (
    ReadConfig,
    SideStreams,
    moved,
    quat_angle,
    read_grid,
    read_health,
    read_joints,
    rotate,
    sample,
    window_mean,
)

MS = 1_000_000
S = 1_000_000_000
PERIOD_NS = 10 * MS
READ = ReadConfig(max_gap_ns=50 * MS, wrench_window_ns=100 * MS, tip_window_ns=100 * MS, object_window_ns=300 * MS,
                  moving_window_ns=50 * MS, moving_threshold=1e-6, stall_speed_rad_s=0.02, stall_sim_speed_rad_s=0.1)


def _buffer(times_ns: np.ndarray, values: np.ndarray, delay_ns: int = 1 * MS) -> StreamBuffer:
    buffer = StreamBuffer(values.shape[1])
    buffer.extend(np.asarray(times_ns, dtype=np.int64), np.asarray(times_ns, dtype=np.int64) + delay_ns, values)
    return buffer


def _times(n: int, start_ns: int = 1 * S) -> np.ndarray:
    return start_ns + PERIOD_NS * np.arange(n, dtype=np.int64)


# ------------------------------------------------------------------ sample
def test_a_sine_is_interpolated_between_samples_within_the_linear_error_bound() -> None:
    omega, amplitude = 2 * np.pi * 2.0, 0.5
    times = _times(300)
    buffer = _buffer(times, amplitude * np.sin(omega * times * 1e-9)[:, None])
    rng = np.random.default_rng(3)
    t = np.sort(rng.integers(times[0], times[-1], 1000))
    got = sample(buffer, t, READ.max_gap_ns, 1)[:, 0]
    exact = amplitude * np.sin(omega * t * 1e-9)
    h = PERIOD_NS * 1e-9
    bound = amplitude * omega ** 2 * h ** 2 / 8  # linear interpolation of a smooth function
    assert np.abs(got - exact).max() <= bound * 1.001
    assert np.abs(got - exact).max() > bound / 10  # interpolated, not the exact sine
    np.testing.assert_allclose(got, np.interp(t, times, buffer.values[:, 0]), rtol=0, atol=1e-12)


def test_a_time_on_a_sample_gives_that_sample() -> None:
    times = _times(10)
    values = np.arange(20.0).reshape(10, 2)
    got = sample(_buffer(times, values), times[[0, 3, 9]], READ.max_gap_ns, 2)
    np.testing.assert_array_equal(got, values[[0, 3, 9]])


def test_unknown_before_the_first_sample_and_held_only_max_gap_after_the_newest() -> None:
    times = _times(10)
    buffer = _buffer(times, np.ones((10, 1)))
    last = int(times[-1])
    t = np.array([times[0] - 1, last + 10 * MS, last + 50 * MS, last + 51 * MS])
    got = sample(buffer, t, READ.max_gap_ns, 1)[:, 0]
    assert np.isnan(got[0]) and got[1] == 1.0 and got[2] == 1.0 and np.isnan(got[3])
    assert np.isnan(sample(None, t, READ.max_gap_ns, 3)).all()
    assert np.isnan(sample(StreamBuffer(3), t, READ.max_gap_ns, 3)).all()


def test_never_interpolates_across_a_gap_longer_than_max_gap() -> None:
    times = np.concatenate((_times(10), _times(10, start_ns=2 * S)))  # 0.91 s lost
    buffer = _buffer(times, np.arange(20.0)[:, None])
    t = np.array([times[9] + 20 * MS, times[9] + 60 * MS, 2 * S - 1, 2 * S])
    got = sample(buffer, t, READ.max_gap_ns, 1)[:, 0]
    # Inside the gap: not interpolated; the left value is not held either (the stream had the next sample).
    assert np.isnan(got[:3]).all() and got[3] == 10.0


def test_a_stream_that_had_not_reached_t_holds_its_value_before() -> None:
    times = np.concatenate((_times(10), _times(10, start_ns=2 * S)))
    buffer = _buffer(times, np.arange(20.0)[:, None])  # each row received 1 ms after its time
    t = np.array([times[4] + 5 * MS, times[4] + 5 * MS, times[9] + 60 * MS])
    decision = np.array([times[5] + 1 * MS, times[4] + 6 * MS, times[9] + 70 * MS])  # the 2nd: before row 5 arrived
    got = sample(buffer, t, READ.max_gap_ns, 1, decision)[:, 0]
    assert got[0] == pytest.approx(4.5)  # interpolated
    assert got[1] == 4.0  # held: the next sample had not arrived by the decision
    assert np.isnan(got[2])  # held no longer than max_gap


def _as_it_stood(buffer: StreamBuffer, decision_ns: int) -> StreamBuffer:
    """The buffer a live monitor held at decision_ns: the rows received by then."""
    arrived = buffer.recv_ns <= decision_ns
    out = StreamBuffer(buffer.width)
    order = np.argsort(buffer.recv_ns[arrived], kind="stable")
    out.extend(buffer.time_ns[arrived][order], buffer.recv_ns[arrived][order], buffer.values[arrived][order])
    return out


def test_a_held_value_is_one_received_by_the_decision() -> None:
    times = _times(20)
    recv = times + 1 * MS
    recv[5:] = times[-1] + 1 * S  # from sample 5 on, held up and delivered in a burst 1 s later
    buffer = StreamBuffer(1)
    buffer.extend(times, recv, np.arange(20.0)[:, None])
    t = np.array([times[7] + 5 * MS])
    decision = int(t[0] + 300 * MS)  # a stall: due at t + horizon
    assert not (buffer.reached(t) <= decision).any()
    live = sample(_as_it_stood(buffer, decision), t, READ.max_gap_ns, 1, np.array([decision]))[0, 0]
    assert live == 4.0  # the newest value the monitor had (35 ms before t)
    assert sample(buffer, t, READ.max_gap_ns, 1, np.array([decision]))[0, 0] == live


# ------------------------------------------------------------------ windows
def test_window_mean_averages_the_samples_in_start_exclusive_end_inclusive() -> None:
    times = _times(20)
    values = np.column_stack((np.arange(20.0), 2 * np.arange(20.0)))
    buffer = _buffer(times, values)
    # Windows of increasing grid times, as the engine reads them.
    start, end = np.array([times[2], times[7]]), np.array([times[6], times[7] + 5 * MS])
    got = window_mean(buffer, start, end, 2)
    np.testing.assert_allclose(got[0], [4.5, 9.0])  # samples 3..6
    assert np.isnan(got[1]).all()  # no sample in (t7, t7 + 5 ms]
    values[4, 1] = np.nan
    assert np.isnan(window_mean(_buffer(times, values), start[:1], end[:1], 2)).all()
    assert np.isnan(window_mean(None, start, end, 2)).all()


def test_moved_tells_which_columns_changed_within_the_window() -> None:
    times = _times(30)
    values = np.zeros((30, 3))
    values[10:, 0] = 1.0  # a step at sample 10
    values[:, 1] = np.arange(30) * 1e-3  # always moving
    buffer = _buffer(times, values)
    start = np.array([times[0], times[12]])
    end = np.array([times[11], times[20]])
    got = moved(buffer, start, end, np.arange(3), 1e-6)
    assert got.tolist() == [[True, True, False], [False, True, False]]


# ------------------------------------------------------------------ rotations
def test_rotate_turns_vectors_by_their_quaternions() -> None:
    rng = np.random.default_rng(4)
    axes = rng.normal(size=(50, 3))
    angles = rng.uniform(-np.pi, np.pi, 50)
    q = np.array([axangle2quat(a, th) for a, th in zip(axes, angles, strict=True)])
    v = rng.normal(size=(50, 3))
    want = np.einsum("kij,kj->ki", np.array([quat2mat(x) for x in q]), v)
    np.testing.assert_allclose(rotate(3.0 * q, v), want, atol=1e-12)  # not normalised: normalised here
    np.testing.assert_allclose(rotate(np.array([[np.cos(np.pi / 4), 0, 0, np.sin(np.pi / 4)]]),
                                      np.array([[1.0, 0, 0]])), [[0.0, 1.0, 0.0]], atol=1e-12)


def test_quat_angle_is_the_rotation_between_orientations() -> None:
    a = np.array([axangle2quat([1, 2, 3], 0.3)])
    b = np.array([axangle2quat([1, 2, 3], 1.1)])
    assert quat_angle(a, b)[0] == pytest.approx(0.8)
    assert quat_angle(a, -a)[0] == pytest.approx(0.0, abs=1e-6)  # q and -q are one orientation
    assert np.isnan(quat_angle(np.full((1, 4), np.nan), a)[0])


# ------------------------------------------------------------------ read_joints / read_grid
SIM_NAMES = ("j1", "j2", "j3")
REAL_NAMES = ("j3", "j1", "j2")  # the real driver lists them in another order


def _joint_rows(q: np.ndarray) -> np.ndarray:
    """(n, J) positions as joint_states rows (q, qd, effort) with qd = 0.1 q, effort = 10 q."""
    return np.hstack((q, 0.1 * q, 10 * q))


def _sides(n: int = 300, real_offset: np.ndarray | None = None) -> tuple[dict[str, SideStreams], np.ndarray]:
    times = _times(n)
    t_s = (times - times[0])[:, None] * 1e-9
    q_sim = np.sin(2 * np.pi * 0.5 * t_s + np.arange(3))
    q_real = q_sim + (0.0 if real_offset is None else real_offset)
    sides = {"sim": SideStreams(joints=_buffer(times, _joint_rows(q_sim))),
             "real": SideStreams(joints=_buffer(times, _joint_rows(q_real[:, [2, 0, 1]])))}
    return sides, times


def test_joints_are_read_in_the_sim_order_and_give_real_minus_sim() -> None:
    offset = np.array([0.01, -0.02, 0.03])
    sides, times = _sides(real_offset=offset)
    joints, warnings = pair_joints(SIM_NAMES, REAL_NAMES)
    assert warnings == []
    t = times[10:200:7] + 3 * MS
    out = read_joints(t, t + 5 * MS, sides, joints, READ)
    np.testing.assert_allclose(out["real"]["q"] - out["sim"]["q"], np.broadcast_to(offset, (len(t), 3)), atol=1e-12)
    np.testing.assert_allclose(out["real"]["effort"] - out["sim"]["effort"], np.broadcast_to(10 * offset, (len(t), 3)),
                               atol=1e-10)


def test_read_grid_gives_identical_sides_zero_residuals_and_valid_rows() -> None:
    sides, times = _sides()
    joints, _ = pair_joints(SIM_NAMES, REAL_NAMES)
    t = times[20:280:2]
    grid = read_grid(t, t + 5 * MS, sides, joints, READ)
    assert grid.joints_valid.all() and len(grid) == len(t)
    assert np.abs(grid.q_res_rad).max() < 1e-12 and np.abs(grid.effort_res).max() < 1e-12
    assert not grid.wrench_valid.any() and not grid.frame_world.any()  # no wrench, no pose streams
    one_sided = read_grid(t, t + 5 * MS, {"sim": sides["sim"], "real": SideStreams()}, joints, READ)
    assert not one_sided.joints_valid.any()


def _pose_rows(n: int, position: np.ndarray, q_wxyz: np.ndarray) -> np.ndarray:
    return np.hstack((np.broadcast_to(position, (n, 3)), np.broadcast_to(q_wxyz, (n, 4))))


def test_wrenches_are_window_means_compared_in_the_world_frame() -> None:
    n = 300
    times = _times(n)
    turn = np.array([np.cos(np.pi / 4), 0, 0, np.sin(np.pi / 4)])  # 90 deg about z
    rng = np.random.default_rng(5)
    chatter = rng.normal(0, 0.5, (n, 3))
    sim_wrench = np.hstack((np.array([1.0, 0, 0]) + chatter, np.zeros((n, 3))))
    real_wrench = np.hstack((np.array([3.0, 0, 0]) + chatter[::-1], np.full((n, 3), 0.2)))
    sides = {
        "sim": SideStreams(joints=_buffer(times, np.zeros((n, 3))), wrench=_buffer(times, sim_wrench),
                           ee_pose=_buffer(times, _pose_rows(n, np.zeros(3), turn))),
        "real": SideStreams(joints=_buffer(times, np.zeros((n, 3))), wrench=_buffer(times, real_wrench),
                            ee_pose=_buffer(times, _pose_rows(n, np.zeros(3), np.full(4, np.nan)))),
    }
    joints, _ = pair_joints(["a"], ["a"])
    t = times[50:250:5]
    grid = read_grid(t, t + 5 * MS, sides, joints, READ)
    assert grid.wrench_valid.all() and grid.frame_world.all()  # the real orientation missing: the sim's stands in
    # Means over the 100 ms window (10 samples) of each side.
    for k, tk in enumerate(t):
        rows = (times > tk - 100 * MS) & (times <= tk)
        np.testing.assert_allclose(grid.sim_wrench[k], sim_wrench[rows].mean(axis=0), atol=1e-12)
    # Sensor x is world y: the 2 N residual along sensor x is along world y.
    mean_force = grid.force_res_n.mean(axis=0)
    np.testing.assert_allclose(mean_force, [0.0, 2.0, 0.0], atol=0.2)
    np.testing.assert_allclose(grid.torque_res_nm, 0.2, atol=1e-12)


def test_without_orientation_wrenches_stay_in_the_sensor_frame() -> None:
    n = 100
    times = _times(n)
    wrench = np.tile([1.0, 2.0, 3.0, 0, 0, 0], (n, 1))
    sides = {side: SideStreams(joints=_buffer(times, np.zeros((n, 3))), wrench=_buffer(times, wrench * (i + 1)))
             for i, side in enumerate(("sim", "real"))}
    joints, _ = pair_joints(["a"], ["a"])
    t = times[20:80]
    grid = read_grid(t, t + 5 * MS, sides, joints, READ)
    assert not grid.frame_world.any()
    np.testing.assert_allclose(grid.force_res_n, np.tile([1.0, 2.0, 3.0], (len(t), 1)), atol=1e-12)


def test_a_wrench_stream_that_had_not_arrived_by_the_decision_is_unknown() -> None:
    n = 300
    times = _times(n)
    sides = {side: SideStreams(joints=_buffer(times, np.zeros((n, 3))), wrench=_buffer(times, np.zeros((n, 6))))
             for side in ("sim", "real")}
    joints, _ = pair_joints(["a"], ["a"])
    t = times[50:60]
    assert read_grid(t, t + 5 * MS, sides, joints, READ).wrench_valid.all()
    # The real wrench stopped 100 ms before these grid times: nothing recent to hold.
    sides["real"].wrench = _buffer(times[:40], np.zeros((40, 6)))
    assert not read_grid(t, t + 5 * MS, sides, joints, READ).wrench_valid.any()


def test_wrenches_read_in_replay_are_those_live_had_received() -> None:
    n = 300
    times = _times(n)
    sides = {side: SideStreams(joints=_buffer(times, np.zeros((n, 3))), wrench=_buffer(times, np.ones((n, 6))))
             for side in ("sim", "real")}
    recv = times + 1 * MS
    recv[50:] += 1 * S  # the real wrench held up from 1.5 s and delivered 1 s later
    sides["real"].wrench = StreamBuffer(6)
    sides["real"].wrench.extend(times, recv, np.ones((n, 6)))
    joints, _ = pair_joints(["a"], ["a"])
    t = times[60:70]
    decision = t + 300 * MS
    live_sides = {"sim": sides["sim"], "real": SideStreams(joints=sides["real"].joints,
                                                           wrench=_as_it_stood(sides["real"].wrench, int(decision[0])))}
    live = read_grid(t, decision, live_sides, joints, READ)
    replay = read_grid(t, decision, sides, joints, READ)
    assert not live.wrench_valid.any()
    np.testing.assert_array_equal(replay.wrench_valid, live.wrench_valid)


def test_the_tip_velocity_is_the_end_effectors_motion() -> None:
    n = 300
    times = _times(n)
    position = np.column_stack((0.1 * (times - times[0]) * 1e-9, np.zeros(n), np.full(n, 0.5)))  # 0.1 m/s along x
    pose = np.hstack((position, np.tile([1.0, 0, 0, 0], (n, 1))))
    sides = {side: SideStreams(joints=_buffer(times, np.zeros((n, 3))), ee_pose=_buffer(times, pose))
             for side in ("sim", "real")}
    joints, _ = pair_joints(["a"], ["a"])
    t = times[50:250:3] + 4 * MS
    grid = read_grid(t, t + 20 * MS, sides, joints, READ)  # every sample bracketing t received by then
    np.testing.assert_allclose(grid.sim_tip_velocity_m_s, np.tile([0.1, 0, 0], (len(t), 1)), atol=1e-9)
    np.testing.assert_allclose(grid.ee_error_m, 0.0, atol=1e-15)


# ------------------------------------------------------------------ read_health
def _health_sides(sim_still_joint: int | None) -> tuple[dict[str, SideStreams], np.ndarray]:
    """Real joint j1 pinned at 0.7 rad from 3 s (its columns in the real order); the sim
    moves every joint, or holds ``sim_still_joint`` still."""
    n = 500
    times = _times(n)
    t_s = (times - times[0])[:, None] * 1e-9
    q_sim = 0.3 * np.sin(2 * np.pi * 0.5 * t_s + np.arange(3))
    if sim_still_joint is not None:
        q_sim[200:, sim_still_joint] = 0.7
    q_real = q_sim.copy()
    q_real[200:, 0] = 0.7  # j1
    sides = {}
    for side, q, order in (("sim", q_sim, [0, 1, 2]), ("real", q_real, [2, 0, 1])):
        rows = _joint_rows(q[:, order])
        health = StreamHealth(FeatureConfig(), f"{side}/joint_states")
        health.add(times, times + 1 * MS, times, rows[:, :6])
        sides[side] = SideStreams(joints=_buffer(times, rows), joint_health=health)
    return sides, times


@pytest.mark.parametrize("sim_still_joint", [None, 0, 1])
def test_a_real_joint_held_still_is_never_saturation(sim_still_joint: int | None) -> None:
    # Joint encoders hold one value while a joint creeps or rests: that is their
    # resolution, not clipping; only force/torque streams are judged for saturation.
    sides, times = _health_sides(sim_still_joint)
    joints, _ = pair_joints(SIM_NAMES, REAL_NAMES)
    t = times[100:480:2]
    grid = read_grid(t, t + 5 * MS, sides, joints, READ)
    read_health(grid, sides, joints, READ)
    assert set(grid.flags) == {"real/joint_states", "sim/joint_states"}
    assert not grid.flags["real/joint_states"].active["saturation"].any()
    assert set(grid.flags["sim/joint_states"].active) == {"dropout"}  # the sim is judged for a lost stream only

