"""JointTrajectory CDR bytes read straight into JointTrajectoryData, as rosbags gives them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.conversions import cdr
from sim_real_bridge.conversions.robot_msgs import joint_trajectory_to_data

STORE = build_typestore()
MAX = STORE.max_sequence_length


def _message(n_joints: int, n_points: int, velocities: bool = True, extra: int = 0, frame_id: str = "base",
             irregular: bool = False) -> bytes:
    traj = STORE.types["trajectory_msgs/msg/JointTrajectory"]
    point = STORE.types["trajectory_msgs/msg/JointTrajectoryPoint"]
    header = STORE.types["std_msgs/msg/Header"]
    time = STORE.types["builtin_interfaces/msg/Time"]
    duration = STORE.types["builtin_interfaces/msg/Duration"]
    rng = np.random.default_rng(n_joints * 100 + n_points)
    points = []
    for k in range(n_points):
        n = n_joints + (k % 2 if irregular else 0)
        points.append(point(positions=rng.normal(size=n), velocities=rng.normal(size=n if velocities else 0),
                            accelerations=rng.normal(size=extra), effort=np.zeros(extra),
                            time_from_start=duration(sec=k // 3, nanosec=k * 1000 + 7)))
    msg = traj(header=header(stamp=time(sec=1_700_000_000, nanosec=5), frame_id=frame_id),
               joint_names=[f"joint{i}" for i in range(n_joints)], points=points)
    return bytes(STORE.serialize_cdr(msg, "trajectory_msgs/msg/JointTrajectory"))


def _same(got: object, want: object) -> None:
    assert got.joint_names == want.joint_names and got.start_ns == want.start_ns  # type: ignore[attr-defined]
    assert len(got.points) == len(want.points)  # type: ignore[attr-defined]
    for p, q in zip(got.points, want.points, strict=True):  # type: ignore[attr-defined]
        assert p.time_from_start_ns == q.time_from_start_ns and type(p.time_from_start_ns) is int
        assert p.positions.dtype == q.positions.dtype and np.array_equal(p.positions, q.positions)
        assert (p.velocities is None) == (q.velocities is None)
        if p.velocities is not None:
            assert np.array_equal(p.velocities, q.velocities)


def _rosbags(data: bytes) -> object:
    return joint_trajectory_to_data(STORE.deserialize_cdr(data, "trajectory_msgs/msg/JointTrajectory"))


@pytest.mark.parametrize("n_joints, n_points, velocities, extra, frame_id", [
    # the points start at payload offset 4 or 0 (mod 8) and the ones after the first alike or not
    (7, 150, True, 0, ""), (6, 40, True, 0, "base"), (7, 9, False, 0, "ab"), (7, 9, False, 0, "abcd"),
    (3, 5, True, 2, "x"),
    (1, 1, False, 1, ""), (0, 4, False, 0, ""), (7, 0, True, 0, "world"),
])
def test_regular_trajectories_read_as_rosbags(n_joints: int, n_points: int, velocities: bool, extra: int,
                                              frame_id: str) -> None:
    data = _message(n_joints, n_points, velocities, extra, frame_id)
    got = cdr.joint_trajectory_data_from_cdr(data, MAX)
    assert got is not None
    _same(got, _rosbags(data))


def test_irregular_points_are_left_to_rosbags() -> None:
    data = _message(7, 10, irregular=True)
    assert cdr.joint_trajectory_data_from_cdr(data, MAX) is None
    _rosbags(data)  # rosbags reads it


def test_refused_or_foreign_bytes_are_left_to_rosbags() -> None:
    data = _message(7, 10)
    for bad in (data[:-20], data[:3], b"\x01\x00" + data[2:], data + b"\x00" * 8):
        assert cdr.joint_trajectory_data_from_cdr(bad, MAX) is None
        with pytest.raises(Exception):  # noqa: B017,PT011 - rosbags' serde errors
            _rosbags(bad)
    assert cdr.joint_trajectory_data_from_cdr(data, 5) is None  # 7 names > max sequence length


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_read_all_parses_commands_or_leaves_them_to_rosbags(tmp_path: Path, storage: str) -> None:
    from sim_real_bridge.offline.bag_io import open_bags  # noqa: PLC0415
    from sim_real_bridge.offline.synthetic import SyntheticRun, write_synthetic_bag  # noqa: PLC0415

    bag = write_synthetic_bag(tmp_path / "bag", SyntheticRun(duration_s=1.0), storage)
    topic = "/sim/joint_trajectory"
    with open_bags(bag) as bags:
        _, plain = bags.read_all([], [topic])
        _, parsed = bags.read_all([], [topic], parsers={topic: lambda data: cdr.joint_trajectory_data_from_cdr(
            data, MAX)})
        _, refused = bags.read_all([], [topic], parsers={topic: lambda data: None})
    assert plain[topic] and [s for s, _ in parsed[topic]] == [s for s, _ in plain[topic]]
    for (_, got), (_, msg) in zip(parsed[topic], plain[topic], strict=True):
        _same(got, joint_trajectory_to_data(msg))
    assert [type(m) for _, m in refused[topic]] == [type(m) for _, m in plain[topic]]
