"""propose_pairs: which JointState topics of a recording are the sim and real sides."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sim_real_bridge.offline.pairing import PairProposal, match_joints, propose_pairs, strip_common_prefix

JS = "sensor_msgs/msg/JointState"
ARM = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper"]


def _infos(*topics: str, msgtype: str = JS, count: int = 10) -> dict[str, SimpleNamespace]:
    return {t: SimpleNamespace(msgtype=msgtype, message_count=count) for t in topics}


@pytest.mark.parametrize(("names", "prefix", "rest"), [
    (["leader_joint1", "leader_joint2"], "leader_", ["joint1", "joint2"]),
    (["arm/left/j1", "arm/left/j2"], "arm/left/", ["j1", "j2"]),
    (["joint1", "joint2"], "", ["joint1", "joint2"]),  # no separator in the common part
    (["leader_gripper"], "leader_", ["gripper"]),
    (["a_", "a_b"], "", ["a_", "a_b"]),  # a name would become empty
    ([], "", []),
])
def test_common_prefix_is_cut_at_a_separator(names, prefix, rest):
    assert strip_common_prefix(names) == (prefix, rest)


def test_joints_match_exactly_or_after_stripping_prefixes():
    assert match_joints(ARM, ARM[::-1]) == {n: n for n in ARM}
    leader = [f"leader_{n}" for n in ARM]
    follower = [f"follower_{n}" for n in ARM]
    assert match_joints(leader, follower) == dict(zip(leader, follower, strict=True))
    assert match_joints(ARM, follower) == dict(zip(ARM, follower, strict=True))  # one side prefixed
    assert match_joints(leader, follower[:-1]) == dict(zip(leader[:-1], follower[:-1], strict=True))
    assert match_joints(["a", "b"], ["c", "d"]) == {}


def test_teleop_rig_pairs_leader_as_sim_and_follower_as_real():
    names = {"/follower/joint_states": [f"follower_{n}" for n in ARM],
             "/leader/joint_states": [f"leader_{n}" for n in ARM],
             "/camera/info": ["x"]}
    infos = {**_infos("/follower/joint_states", "/leader/joint_states"), **_infos("/camera/info", msgtype="x/msg/Y")}
    (pair,) = propose_pairs(infos, names)
    assert pair == PairProposal("/leader/joint_states", "/follower/joint_states",
                                {f"leader_{n}": f"follower_{n}" for n in ARM})
    assert pair.flags() == "--sim /leader/joint_states --real /follower/joint_states"
    assert pair.unmatched(names) == ([], [])
    sim, real, name_map = pair  # a plain (sim_topic, real_topic, name_map) tuple too
    assert (sim, real, len(name_map)) == ("/leader/joint_states", "/follower/joint_states", 7)


def test_pairs_are_ranked_by_matched_joints_then_exactness_then_side_words():
    names = {
        "/sim/joint_states": ARM,
        "/real/joint_states": ARM,
        "/master/joint_states": [f"master_{n}" for n in ARM[:4]],
        "/puppet/joint_states": [f"puppet_{n}" for n in ARM[:4]],
        "/b/joint_states": ARM[:4],
    }
    pairs = propose_pairs(_infos(*names), names)
    assert [(p.sim_topic, p.real_topic) for p in pairs[:1]] == [("/sim/joint_states", "/real/joint_states")]
    assert ("/master/joint_states", "/puppet/joint_states") in [(p.sim_topic, p.real_topic) for p in pairs]
    assert all(len(a.name_map) >= len(b.name_map) for a, b in zip(pairs, pairs[1:], strict=False))


def test_no_pair_when_joints_do_not_match_or_topics_are_empty():
    names = {"/a/joint_states": ["x1", "x2", "x3", "x4"], "/b/joint_states": ["x1", "y2", "y3", "y4"],
             "/c/joint_states": ["x1", "x2", "x3", "x4"]}
    infos = {**_infos("/a/joint_states", "/b/joint_states"), **_infos("/c/joint_states", count=0)}
    assert propose_pairs(infos, names) == []  # one joint of four is not a pair; /c has no messages
