"""`sim-real-bridge inspect BAG`: topics, counts, rates and the pairs replay would use."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.foreign_bags import write_json_mcap, write_teleop_mcap

from sim_real_bridge.cli import main
from sim_real_bridge.offline.synthetic import SyntheticRun, write_synthetic_bag


def test_inspect_of_a_teleop_rig_proposes_leader_and_follower(tmp_path: Path, capsys) -> None:
    rec = write_teleop_mcap(tmp_path / "rig.mcap", joints=6, duration_s=2.0, rate_hz=50.0)
    assert main(["inspect", str(rec.path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\n/leader/joint_states +sensor_msgs/msg/JointState +cdr +100 +1\.98 +50\.0 +6: leader_", out)
    assert "1. sim /leader/joint_states, real /follower/joint_states: 6 joints match" in out
    assert f"sim-real-bridge replay {rec.path} --sim /leader/joint_states --real /follower/joint_states" in out

    assert main(["inspect", str(rec.path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    topics = {t["topic"]: t for t in data["topics"]}
    assert topics["/follower/joint_states"]["message_count"] == 100
    assert abs(topics["/follower/joint_states"]["rate_hz"] - 50.0) < 0.1  # log times jitter
    assert topics["/leader/joint_states"]["joints"] == list(rec.leader_names)
    assert data["default_pair"] is None
    assert data["proposals"][0]["name_map"] == dict(zip(rec.leader_names, rec.follower_names, strict=True))


def test_inspect_of_our_recording_names_the_default_pair(tmp_path: Path, capsys) -> None:
    bag = write_synthetic_bag(tmp_path / "bag", SyntheticRun(duration_s=1.0))
    assert main(["inspect", str(bag)]) == 0
    out = capsys.readouterr().out
    assert f"replay uses /sim/joint_states (sim) and /real/joint_states (real): sim-real-bridge replay {bag}" in out


def test_inspect_names_json_topics_and_missing_bags(tmp_path: Path, capsys) -> None:
    path = write_json_mcap(tmp_path / "json.mcap")
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "topic /joint_states: messages are json, not ROS 2 CDR: replay cannot read them" in out
    assert "no sim/real pair" in out
    assert main(["inspect", str(tmp_path / "missing.mcap")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"sim-real-bridge inspect: error: bag {tmp_path / 'missing.mcap'} does not exist"


@pytest.mark.parametrize("argv", [["inspect"], ["inspect", "--json"]])
def test_a_reader_that_stops_early_gets_no_traceback(argv: list[str], tmp_path: Path) -> None:
    """`sim-real-bridge inspect BAG --json | head -c 100`: the reader closes the pipe first."""
    bag = write_synthetic_bag(tmp_path / "bag", SyntheticRun(duration_s=0.5))
    proc = subprocess.Popen([sys.executable, "-m", "sim_real_bridge.cli", *argv, str(bag)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
    assert proc.returncode == 0
