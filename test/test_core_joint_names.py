"""Pairing the two sides' joints by name: explicit map, equal names, then common prefixes."""

from __future__ import annotations

import pytest

from sim_real_bridge.core.joint_names import common_prefix, pair_joints, strip_prefix


@pytest.mark.parametrize(("names", "prefix"), [
    (["leader_joint1", "leader_joint2"], "leader_"),
    (["joint1", "joint2"], ""),  # "joint" is part of the name, not a prefix
    (["ur/shoulder_pan_joint", "ur/shoulder_lift_joint", "ur/elbow_joint"], "ur/"),
    (["ur/shoulder_pan_joint", "ur/shoulder_lift_joint"], "ur/shoulder_"),  # cut back to the last separator
    (["arm-a", "arm-b", "arm-c"], "arm-"),
    (["ns:x", "ns:y"], "ns:"),
    (["only_one"], ""),
    ([], ""),
])
def test_the_common_prefix_ends_at_a_separator(names: list[str], prefix: str) -> None:
    assert common_prefix(names) == prefix
    assert strip_prefix(names) == [n[len(prefix):] for n in names]


def _pairs(joint_map) -> list[tuple[str, int, int]]:
    return [(name, int(s), int(r)) for name, s, r in zip(joint_map.names, joint_map.sim_index, joint_map.real_index,
                                                          strict=True)]


def test_equal_names_pair_whatever_their_order() -> None:
    joint_map, warnings = pair_joints(["j1", "j2", "j3"], ["j3", "j1", "j2"])
    assert warnings == []
    assert _pairs(joint_map) == [("j1", 0, 1), ("j2", 1, 2), ("j3", 2, 0)]
    assert (joint_map.sim_count, joint_map.real_count) == (3, 3)


def test_prefixed_names_pair_once_each_sides_prefix_is_stripped() -> None:
    sim = [f"leader_joint{i}" for i in range(1, 7)]
    real = [f"follower_joint{i}" for i in (3, 1, 2, 6, 5, 4)]
    joint_map, warnings = pair_joints(sim, real)
    assert warnings == []
    assert joint_map.names == tuple(sim)
    assert [real[r] for r in joint_map.real_index] == [f"follower_joint{i}" for i in range(1, 7)]
    # A UR driver's prefix on one side only.
    ur = ["shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint"]
    joint_map, warnings = pair_joints(ur, [f"ur_{n}" for n in reversed(ur)])
    assert warnings == [] and joint_map.real_index.tolist() == [3, 2, 1, 0]


def test_an_extra_joint_is_left_out_with_a_warning() -> None:
    sim = [f"leader_joint{i}" for i in range(1, 7)]
    real = [f"follower_joint{i}" for i in range(1, 7)] + ["follower_gripper"]
    joint_map, warnings = pair_joints(sim, real)
    assert len(joint_map.names) == 6
    assert warnings == ["real joint(s) without a sim twin, not analysed: follower_gripper"]
    joint_map, warnings = pair_joints(["a", "b", "extra"], ["a", "b"])
    assert joint_map.names == ("a", "b")
    assert warnings == ["sim joint(s) without a real twin, not analysed: extra"]


def test_an_explicit_map_wins_over_names() -> None:
    joint_map, warnings = pair_joints(["shoulder", "elbow"], ["elbow", "ur_shoulder_pan"],
                                      explicit={"shoulder": "ur_shoulder_pan"})
    assert warnings == []
    assert _pairs(joint_map) == [("shoulder", 0, 1), ("elbow", 1, 0)]
    # An explicit pair naming a joint neither side has is ignored.
    joint_map, _ = pair_joints(["a"], ["a"], explicit={"zzz": "a"})
    assert _pairs(joint_map) == [("a", 0, 0)]


def test_nothing_in_common_pairs_nothing_and_says_so() -> None:
    joint_map, warnings = pair_joints(["a", "b"], ["x", "y"])
    assert joint_map.names == () and len(joint_map.sim_index) == 0
    assert warnings == ["sim joint(s) without a real twin, not analysed: a, b",
                        "real joint(s) without a sim twin, not analysed: x, y"]
