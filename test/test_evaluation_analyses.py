"""The live monitor's list of analyses: what ran, and why the rest did not."""

from __future__ import annotations

from sim_real_bridge.evaluation.analyses import live_analyses

TOPICS = {"sim/joint_states": "/sim/joint_states", "real/joint_states": "/real/joint_states",
          "sim/wrench": "/sim/wrench", "real/wrench": "/real/wrench",
          "sim/ee_pose": "/sim/ee_pose", "real/ee_pose": "/real/ee_pose",
          "sim/joint_trajectory": "/sim/joint_trajectory"}


def _by_name(entries: list[dict]) -> dict[str, dict]:
    return {entry["analysis"]: entry for entry in entries}


def test_every_stream_received_on_both_sides_runs_its_analysis() -> None:
    got = _by_name(live_analyses(TOPICS, lambda topic: 10, 7))
    assert got["joint residuals"] == {"analysis": "joint residuals", "ran": True,
                                      "detail": "7 joint(s): /sim/joint_states vs /real/joint_states"}
    assert got["contact residuals"]["ran"] and got["contact residuals"]["detail"] == "/sim/wrench vs /real/wrench"
    assert got["end-effector pose"]["ran"] and got["run start at the first command"]["ran"]
    # no object_pose topic on either side
    assert not got["object pose"]["ran"]
    assert got["object pose"]["detail"].startswith("no object_pose topic on either side")


def test_a_stream_missing_on_one_side_or_silent_is_skipped_with_the_reason() -> None:
    one_sided = {k: v for k, v in TOPICS.items() if k != "real/wrench"}
    got = _by_name(live_analyses(one_sided, lambda topic: 0 if topic == "/real/ee_pose" else 5, 6))
    assert not got["contact residuals"]["ran"]
    assert got["contact residuals"]["detail"].startswith("no wrench topic on the real side")
    assert not got["end-effector pose"]["ran"]
    assert got["end-effector pose"]["detail"].startswith("nothing received on /real/ee_pose")


def test_before_the_joints_pair_nothing_has_run() -> None:
    got = _by_name(live_analyses(TOPICS, lambda topic: 0, 0))
    assert not got["joint residuals"]["ran"] and not got["run start at the first command"]["ran"]
