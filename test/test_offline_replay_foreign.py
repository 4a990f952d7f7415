"""Replay of recordings we did not make (issue "your robot, your bags").

Bare .mcap files of a teleoperation rig (leader and follower arms, joint states only,
prefixed joint names, trailing bytes after each CDR payload, no metadata.yaml) and of
ros2_control stacks, each through ``sim-real-bridge replay`` as a user runs it: either
a correct analysis, or one clear line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.foreign_bags import STACKS, UR_JOINTS, write_json_mcap, write_stack_mcap, write_teleop_mcap

from sim_real_bridge.cli import main as cli_main
from sim_real_bridge.offline.synthetic import SyntheticRun, write_synthetic_bag

REPO = Path(__file__).resolve().parents[1]
STACK_DIR = REPO / "config" / "stacks"
HOUR_NS = 3600 * 10**9
YEAR_NS = 365 * 24 * HOUR_NS


def _replay(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    """(exit code, stderr) of ``sim-real-bridge replay ARGS``."""
    code = cli_main(["replay", *map(str, args)])
    return code, capsys.readouterr().err


def _summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


def _one_line_error(err: str) -> str:
    """The one error line of a failed command (no traceback, nothing else)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("sim-real-bridge replay: error: ")
    return lines[0]


def _analysis(summary: dict[str, Any], name: str) -> dict[str, Any]:
    return next(a for a in summary["analyses"] if a["analysis"] == name)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return write_teleop_mcap(tmp_path_factory.mktemp("rig") / "rig.mcap")


# ------------------------------------------------------------------ acceptance: flags only
def test_joint_states_only_foreign_bag_replays_with_sim_and_real_flags_only(rig: Any, tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert rig.trailing_bytes > 0 and not (rig.path.parent / "metadata.yaml").exists()
    code, err = _replay(capsys, rig.path, "--sim", "/leader", "--real", "/follower", "--out", tmp_path / "out")
    assert code == 0, err
    assert (tmp_path / "out" / "report.html").is_file() and (tmp_path / "out" / "divergence.mcap").is_file()
    summary = _summary(tmp_path / "out")
    assert list(summary["residuals"]["joints"]) == list(rig.leader_names)
    # The follower tracks the leader 30 ms late: the residuals are the recorded differences.
    rms = [j["rms_rad"] for j in summary["residuals"]["joints"].values()]
    recorded = np.sqrt(np.mean((rig.follower_q_rad - rig.leader_q_rad) ** 2, axis=0))
    assert np.allclose(rms, recorded, rtol=0.25, atol=0.002), (rms, recorded)
    assert summary["timing"]["latency_s"] == pytest.approx(0.03, abs=0.015)
    assert _analysis(summary, "joint residuals")["ran"]
    contact = _analysis(summary, "contact residuals")
    assert not contact["ran"] and contact["detail"].startswith("no wrench topic on either side")
    assert summary["problems_by_topic"] == {}
    html = (tmp_path / "out" / "report.html").read_text()
    assert "contact residuals</b>: skipped: no wrench topic on either side" in html
    assert "output in" in err


def test_sim_and_real_topics_give_what_their_namespaces_give(rig: Any, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert _replay(capsys, rig.path, "--sim", "/leader", "--real", "/follower", "--out", tmp_path / "ns")[0] == 0
    assert _replay(capsys, rig.path, "--sim", rig.leader_topic, "--real", rig.follower_topic,
                   "--out", tmp_path / "topics")[0] == 0
    ns, topics = _summary(tmp_path / "ns"), _summary(tmp_path / "topics")
    assert ns["residuals"] == topics["residuals"] and ns["events"] == topics["events"]


def test_trailing_bytes_change_nothing(rig: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = write_teleop_mcap(tmp_path / "plain.mcap", trailing_bytes=0)
    for bag, out in ((rig.path, "padded"), (plain.path, "plain")):
        assert _replay(capsys, bag, "--sim", "/leader", "--real", "/follower", "--out", tmp_path / out)[0] == 0
    padded, plain_summary = _summary(tmp_path / "padded"), _summary(tmp_path / "plain")
    assert padded["residuals"] == plain_summary["residuals"] and padded["timing"] == plain_summary["timing"]


def test_default_topics_missing_proposes_the_pair_and_the_flags(rig: Any, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _replay(capsys, rig.path, "--out", tmp_path / "out")
    assert code == 2
    line = _one_line_error(err)
    assert f"topic /sim/joint_states (sim joint_states) not found in bag(s) {rig.path}" in line
    assert "--sim /leader/joint_states --real /follower/joint_states" in line
    assert "sim_topics.joint_states: /leader/joint_states and real_topics.joint_states: /follower/joint_states" in line
    assert "--config" in line and "output in" not in err
    assert not (tmp_path / "out").exists()


def test_joint_states_only_under_the_default_names_needs_no_flag(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bag = write_teleop_mcap(tmp_path / "bag.mcap", leader_topic="/sim/joint_states", follower_topic="/real/joint_states")
    code, err = _replay(capsys, bag.path, "--out", tmp_path / "out")
    assert code == 0, err
    assert len(_summary(tmp_path / "out")["residuals"]["joints"]) == 7


def test_a_side_flag_naming_nothing_in_the_bag_is_one_line(rig: Any, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _replay(capsys, rig.path, "--sim", "/lead", "--real", "/follower", "--out", tmp_path / "out")
    assert code == 2
    assert re.search(r"--sim /lead: bag\(s\) .*rig\.mcap have neither a topic /lead nor /lead/joint_states; "
                     r"topics: /follower/joint_states, /leader/joint_states$", _one_line_error(err))


def test_swapped_topic_types_are_refused_naming_topic_found_and_expected(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    bag = write_synthetic_bag(tmp_path / "bag", SyntheticRun(duration_s=1.0))
    code, err = _replay(capsys, bag, "--sim", "/sim/wrench", "--out", tmp_path / "out")
    assert code == 2
    assert _one_line_error(err).endswith(f"topic /sim/wrench in bag(s) {bag} is geometry_msgs/msg/WrenchStamped, "
                                         "expected sensor_msgs/msg/JointState")


@pytest.mark.parametrize(("topics", "named", "found", "expected"), [
    ({"sim_topics": {"joint_states": "/sim/wrench", "wrench": "/sim/joint_states"}}, "/sim/wrench",
     "geometry_msgs/msg/WrenchStamped", "sensor_msgs/msg/JointState"),
    ({"sim_topics": {"wrench": "/sim/joint_states"}}, "/sim/joint_states",
     "sensor_msgs/msg/JointState", "geometry_msgs/msg/WrenchStamped"),
    ({"real_topics": {"ee_pose": "/real/wrench"}}, "/real/wrench",
     "geometry_msgs/msg/WrenchStamped", "geometry_msgs/msg/PoseStamped"),
])
def test_a_config_naming_topics_of_other_types_is_one_line(topics: dict[str, Any], named: str, found: str,
                                                           expected: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's swapped topics ended in ``'WrenchColumns' object has no attribute 'names'``."""
    bag = write_synthetic_bag(tmp_path / "bag", SyntheticRun(duration_s=1.0))
    config = tmp_path / "swapped.yaml"
    config.write_text(json.dumps(topics))
    code, err = _replay(capsys, bag, "--config", config, "--out", tmp_path / "out")
    assert code == 2
    assert _one_line_error(err).endswith(f"topic {named} in bag(s) {bag} is {found}, expected {expected}")
    assert not (tmp_path / "out").exists()


def test_json_mcap_is_named_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = write_json_mcap(tmp_path / "json.mcap")
    code, err = _replay(capsys, bag, "--sim", "/joint_states", "--real", "/joint_states", "--out", tmp_path / "out")
    assert code == 2
    assert _one_line_error(err).endswith(f"topic /joint_states in bag(s) {bag}: messages are json, not ROS 2 CDR")


# ------------------------------------------------------------------ joint names
def _drop_follower_gripper(arm: str, i: int, fields: dict[str, Any]) -> dict[str, Any]:
    if arm == "follower":
        fields.update(names=fields["names"][:-1], position=fields["position"][:-1],
                      velocity=fields["velocity"][:-1])
    return fields


def test_a_joint_fewer_analyses_the_common_set_and_names_the_other(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    bag = write_teleop_mcap(tmp_path / "bag.mcap", edit=_drop_follower_gripper)
    code, err = _replay(capsys, bag.path, "--sim", "/leader", "--real", "/follower", "--out", tmp_path / "out")
    assert code == 0, err
    summary = _summary(tmp_path / "out")
    assert list(summary["residuals"]["joints"]) == list(bag.leader_names[:-1])
    assert "sim joint(s) without a real twin, not analysed: leader_gripper" in summary["warnings"]
    assert "leader_gripper" in (tmp_path / "out" / "report.html").read_text()


def test_explicit_joint_map_pairs_what_names_cannot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bag = write_teleop_mcap(tmp_path / "bag.mcap", leader_prefix="a", follower_prefix="b")
    # "ajoint1" and "bjoint1": no separator, so no common prefix to strip: nothing pairs.
    code, err = _replay(capsys, bag.path, "--sim", "/leader", "--real", "/follower", "--out", tmp_path / "none")
    assert code == 2
    line = _one_line_error(err)
    assert "nothing to analyse: no joint of the sim side (ajoint1, " in line and "600 message(s)" in line
    assert line.endswith("(name the pairs with joint_map: {SIM_JOINT: REAL_JOINT, ...} in a --config file)")
    config = tmp_path / "map.yaml"
    pairs = dict(zip(bag.leader_names, bag.follower_names, strict=True))
    config.write_text(json.dumps({"joint_map": pairs}))
    code, err = _replay(capsys, bag.path, "--sim", "/leader", "--real", "/follower", "--config", config,
                        "--out", tmp_path / "mapped")
    assert code == 0, err
    assert list(_summary(tmp_path / "mapped")["residuals"]["joints"]) == list(bag.leader_names)


# ------------------------------------------------------------------ bad messages: counted, the rest analysed
def _every(step: int, change: dict[str, Any] | None = None, arm: str = "follower") -> Any:
    """An edit changing every ``step``-th message of ``arm`` from the ``step // 2``-th on
    (a callable value sees the fields). A stream's first message fixes its joint set, so
    with ``step`` > 1 the first one stays good."""
    def edit(which: str, i: int, fields: dict[str, Any]) -> dict[str, Any]:
        if which == arm and i % step == step // 2:
            fields.update({k: v(fields) if callable(v) else v for k, v in (change or {}).items()})
        return fields
    return edit


BAD_MESSAGES = {
    "duplicate_names": {"names": lambda f: (f["names"][0],) * len(f["names"])},
    "empty": {"names": (), "position": np.zeros(0), "velocity": None},
    "zero_stamp": {"stamp_ns": 0},
    "length_mismatch": {"position": lambda f: f["position"][:3], "velocity": None},
    "unknown_joint": {"names": lambda f: tuple(f"other_{n}" for n in f["names"])},
}


@pytest.mark.parametrize("reason", list(BAD_MESSAGES))
def test_bad_messages_are_counted_and_the_rest_analysed(reason: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    bag = write_teleop_mcap(tmp_path / "bag.mcap", edit=_every(10, BAD_MESSAGES[reason]))
    code, err = _replay(capsys, bag.path, "--sim", "/leader", "--real", "/follower", "--out", tmp_path / "out")
    assert code == 0, err
    summary = _summary(tmp_path / "out")
    assert summary["problems_by_topic"] == {"/follower/joint_states": {reason: 60}}
    assert f"60 message(s) on /follower/joint_states refused or flagged: {reason}" in summary["warnings"]
    rms = [j["rms_rad"] for j in summary["residuals"]["joints"].values()]
    recorded = np.sqrt(np.mean((bag.follower_q_rad - bag.leader_q_rad) ** 2, axis=0))
    assert np.allclose(rms, recorded, rtol=0.25, atol=0.002), (rms, recorded)


def test_one_joint_all_nan_is_analysed_without_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def nan_joint(position: np.ndarray) -> np.ndarray:
        out = np.array(position, dtype=float)
        out[2] = np.nan
        return out

    bag = write_teleop_mcap(tmp_path / "bag.mcap", edit=_every(1, {"position": lambda f: nan_joint(f["position"])}))
    code, err = _replay(capsys, bag.path, "--sim", "/leader", "--real", "/follower", "--out", tmp_path / "out")
    assert code == 0, err
    summary = _summary(tmp_path / "out")
    joints = summary["residuals"]["joints"]
    assert list(joints) == [n for n in bag.leader_names if n != "leader_joint3"]
    assert all(j["rms_rad"] > 0 for j in joints.values())
    assert ("/follower/joint_states: joint(s) follower_joint3 never have a finite position: left out of the "
            "analysis") in summary["warnings"]
    assert "sim joint(s) without a real twin, not analysed: leader_joint3" in summary["warnings"]


@pytest.mark.parametrize(("change", "counted"), [
    ({"position": lambda f: np.full(len(f["names"]), np.nan)}, "600 non_finite"),
    ({"stamp_ns": 0}, "600 zero_stamp"),
    ({"names": (), "position": np.zeros(0), "velocity": None}, "600 empty"),
    ({"names": lambda f: (f["names"][0],) * len(f["names"])}, "600 duplicate_names"),
])
def test_a_side_with_nothing_valid_is_one_line_with_what_was_refused(change: dict[str, Any], counted: str,
                                                                     tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bag = write_teleop_mcap(tmp_path / "bag.mcap", edit=_every(1, change))
    code, err = _replay(capsys, bag.path, "--sim", "/leader", "--real", "/follower", "--out", tmp_path / "out")
    assert code == 2
    line = _one_line_error(err)
    assert f"bag(s) {bag.path}: nothing to analyse: " in line
    assert f"/follower/joint_states: 600 message(s) ({counted})" in line
    assert "/leader/joint_states: 600 message(s), accepted from " in line
    assert "never overlap" not in line and "output in" not in err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ gaps in log time
def test_a_stray_message_two_hours_later_is_a_segment_not_two_hours_of_ticks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def stray(arm: str, i: int, fields: dict[str, Any]) -> dict[str, Any]:
        if arm == "follower" and i == 599:
            fields.update(log_ns=fields["log_ns"] + 2 * HOUR_NS, stamp_ns=fields["stamp_ns"] + 2 * HOUR_NS)
        return fields

    bag = write_teleop_mcap(tmp_path / "bag.mcap", edit=stray)
    code, err = _replay(capsys, bag.path, "--sim", "/leader", "--real", "/follower", "--out", tmp_path / "out")
    assert code == 0, err
    summary = _summary(tmp_path / "out")
    # 6 s of data at 50 Hz (and the stray's few seconds): hundreds of analysis times, not
    # the 360 000 of two hours; the gap splits the run in two segments.
    assert summary["counts"]["analysis_ticks"] <= 600
    first, second = summary["segments"]
    assert first["end_s"] < 10.0 and second["start_s"] > 7000.0
    assert summary["duration_s"] > 7000
    # the pause of the log is no samples missing, and the run line says what was analysed
    assert not [w for w in summary["warnings"] if "samples missing" in w], summary["warnings"]
    assert re.search(r"ok, \d+ events, \d+\.\d s of data in 2 segments over 72\d\d\.\d s", err), err


@pytest.mark.timeout(30)
@pytest.mark.parametrize("field", [
    "log_ns",
    "stamp_ns",
])
def test_a_time_a_year_later_finishes(field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def late(arm: str, i: int, fields: dict[str, Any]) -> dict[str, Any]:
        if arm == "follower" and i == 300:
            fields[field] += YEAR_NS
        return fields

    bag = write_teleop_mcap(tmp_path / "bag.mcap", edit=late)
    code, err = _replay(capsys, bag.path, "--sim", "/leader", "--real", "/follower", "--out", tmp_path / "out")
    assert code == 0, err
    summary = _summary(tmp_path / "out")
    assert summary["counts"]["analysis_ticks"] <= 600
    # A stamp a year ahead of its receipt is refused (and not read as a year of receive
    # lag or of samples missing); a log time a year later puts its stamp behind the rest.
    reason = "future_stamp" if field == "stamp_ns" else "stamp_backwards"
    assert summary["problems_by_topic"] == {"/follower/joint_states": {reason: 1}}
    assert summary["warnings"] == [f"1 message(s) on /follower/joint_states refused or flagged: {reason}"]


# ------------------------------------------------------------------ stack configs, each on a bag shaped like its stack
@pytest.mark.parametrize("stack", sorted(STACKS))
def test_stack_config_replays_a_recording_of_its_stack(stack: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    bag = write_stack_mcap(tmp_path / f"{stack}.mcap", stack)
    code, err = _replay(capsys, bag, "--config", STACK_DIR / f"{stack}.yaml", "--out", tmp_path / "out")
    assert code == 0, err
    summary = _summary(tmp_path / "out")
    assert sorted(summary["residuals"]["joints"]) == sorted(UR_JOINTS)
    assert all(0.005 < j["rms_rad"] < 0.05 for j in summary["residuals"]["joints"].values())
    assert summary["timing"]["latency_s"] == pytest.approx(0.02, abs=0.011)
    assert _analysis(summary, "run start at the first command")["ran"]
    assert not _analysis(summary, "contact residuals")["ran"]
    # The file names wrench topics this recording lacks: said, not fatal.
    assert sum("wrench" in w and "not in bag(s)" in w for w in summary["warnings"]) == 2
    assert summary["problems_by_topic"] == {}


def test_teleop_stack_config_replays_a_rig_recording(rig: Any, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _replay(capsys, rig.path, "--config", STACK_DIR / "teleop_leader_follower.yaml",
                        "--out", tmp_path / "out")
    assert code == 0, err
    summary = _summary(tmp_path / "out")
    assert list(summary["residuals"]["joints"]) == list(rig.leader_names)
    assert summary["warnings"] == []
    assert "sim_topics.wrench is empty" in _analysis(summary, "contact residuals")["detail"]
