"""`sim-real-bridge scenarios` as a user runs it: listing, generating, errors, a closed pipe."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from sim_real_bridge.cli import main
from sim_real_bridge.sim.generate import generate_scenario
from sim_real_bridge.sim.scenario import scenario_names

pytestmark = pytest.mark.mujoco


def test_listing_shows_every_builtin_scenario_with_its_robot(capsys):
    assert main(["scenarios"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == scenario_names()
    assert all(line.split()[1] == "arm7" for line in lines)


def test_generate_writes_the_seeds_scenarios(tmp_path, capsys):
    out = tmp_path / "gen"
    assert main(["scenarios", "generate", "--seed", "21", "--count", "3", "--out", str(out), "--robot", "ur6"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 3 and all(" ur6 " in line for line in printed)
    assert sorted(p.name for p in out.iterdir()) == ["gen_21.yaml", "gen_22.yaml", "gen_23.yaml"]
    assert yaml.safe_load((out / "gen_22.yaml").read_text()) == generate_scenario(22, robot="ur6")


@pytest.mark.parametrize(("argv", "message"), [
    (["--seed", "-4", "--out", "x"], "argument --seed: expected a seed >= 0, got '-4'"),
    (["--seed", "1", "--count", "0", "--out", "x"], "argument --count: expected at least 1, got '0'"),
    (["--seed", "1"], "the following arguments are required: --out"),
])
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["scenarios", "generate", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_unknown_robot_is_one_line_exit_2(tmp_path, capsys):
    assert main(["scenarios", "generate", "--seed", "1", "--out", str(tmp_path), "--robot", "kuka"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "sim-real-bridge scenarios: error: unknown robot 'kuka'; built-in robots: arm7, ur6, panda7"


def test_a_reader_that_stops_early_gets_no_traceback():
    """`sim-real-bridge scenarios | head -1`: the reader closes the pipe before the listing is written."""
    proc = subprocess.Popen([sys.executable, "-m", "sim_real_bridge.cli", "scenarios"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()
    assert proc.returncode == 0
