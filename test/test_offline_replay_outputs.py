"""Replay outputs: written atomically, nothing stale after a failure, --out errors in one
line, the roll-up's report links, the progress bar, and the same jobs on a dask cluster."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from sim_real_bridge.cli import main as cli_main
from sim_real_bridge.errors import ConfigError
from sim_real_bridge.offline.replay import ReplayRequest, run_replay
from sim_real_bridge.offline.replay import fleet
from sim_real_bridge.offline.replay_config import ReplayConfig, replay_config_from_dict
from sim_real_bridge.offline.synthetic import SyntheticRun, write_synthetic_bag

OUTPUTS = ("summary.json", "report.html", "divergence.mcap")


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bags")
    run = SyntheticRun(duration_s=2.0, offset_rad=0.02, joint_rate_hz=200.0, wrench_rate_hz=200.0, pose_rate_hz=50.0)
    return {
        "a": write_synthetic_bag(root / "fleet" / "a", run),
        "b": write_synthetic_bag(root / "fleet" / "b", SyntheticRun(**{**run.__dict__, "offset_rad": 0.05})),
        "c": write_synthetic_bag(root / "fleet" / "c", SyntheticRun(**{**run.__dict__, "duration_s": 1.5})),
        "sim_only": write_synthetic_bag(root / "sim_only", SyntheticRun(**{**run.__dict__, "sides": ("sim",)})),
    }


def _error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------ --out errors
def test_out_that_is_a_file_is_one_line(bags: dict[str, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "taken"
    target.write_text("mine")
    line = _error_line(capsys, ["replay", str(bags["a"]), "--out", str(target)])
    assert line == f"sim-real-bridge replay: error: --out {target}: is a file, not a directory"
    assert target.read_text() == "mine"


def test_out_under_a_file_is_one_line(bags: dict[str, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "deeper" / "out"
    line = _error_line(capsys, ["replay", str(bags["a"]), "--out", str(out)])
    assert line == f"sim-real-bridge replay: error: --out {out}: {tmp_path / 'file'} is a file, not a directory"


def test_out_that_is_not_writable_is_one_line(bags: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() == 0:  # root writes through permission bits: use a filesystem that refuses everyone
        parent = Path("/sys")
        out = parent / "sim_real_bridge_replay_test" / "out"
    else:
        parent = tmp_path / "locked"
        parent.mkdir()
        parent.chmod(0o555)
        out = parent / "out"
    line = _error_line(capsys, ["replay", str(bags["a"]), "--out", str(out)])
    assert line.startswith(f"sim-real-bridge replay: error: --out {out}: cannot write in {parent}: ")


# ------------------------------------------------------------------ atomic outputs
def test_a_failed_run_leaves_no_stale_outputs_and_no_output_line(bags: dict[str, Path], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert cli_main(["replay", str(bags["a"]), "--out", str(out)]) == 0
    assert all((out / name).is_file() for name in OUTPUTS)
    (out / "notes.txt").write_text("the user's own file")
    capsys.readouterr()
    line = _error_line(capsys, ["replay", str(bags["sim_only"]), "--out", str(out)])
    assert "/real/joint_states (real joint_states) not found" in line and "output in" not in line
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert [p.name for p in tmp_path.iterdir() if ".partial-" in p.name] == []
    (out / "notes.txt").unlink()
    capsys.readouterr()
    _error_line(capsys, ["replay", str(bags["sim_only"]), "--out", str(out)])
    assert out.is_dir(), "a directory that was there before stays, empty"


def test_outputs_replace_the_previous_run_as_a_whole(bags: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_replay(ReplayRequest(inputs=[bags["a"]], out_dir=out)) == 0
    first = json.loads((out / "summary.json").read_text())
    assert out.stat().st_mode & 0o777 == 0o777 & ~_umask()
    assert run_replay(ReplayRequest(inputs=[bags["b"]], out_dir=out)) == 0
    second = json.loads((out / "summary.json").read_text())
    assert first["bags"] == [str(bags["a"])] and second["bags"] == [str(bags["b"])]
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUTS)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_among_several_runs_a_failure_clears_its_own_stale_outputs(bags: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    stale = out / "sim_only"
    stale.mkdir(parents=True)
    for name in OUTPUTS:
        (stale / name).write_text("from an earlier run")
    assert run_replay(ReplayRequest(inputs=[bags["a"], bags["sim_only"]], out_dir=out)) == 1
    assert not stale.exists()
    rollup = json.loads((out / "summary.json").read_text())
    assert [f["name"] for f in rollup["failures"]] == ["sim_only"]


def test_rollup_rows_link_each_report(bags: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert run_replay(ReplayRequest(inputs=[bags["a"].parent], out_dir=out)) == 0
    runs = json.loads((out / "summary.json").read_text())["runs"]
    assert [r["row"]["report_href"] for r in runs] == ["a/report.html", "b/report.html", "c/report.html"]
    assert all((out / r["row"]["report_href"]).is_file() for r in runs)
    html = (out / "report.html").read_text()
    assert all(f'href="{r["row"]["report_href"]}"' in html for r in runs)


# ------------------------------------------------------------------ progress
class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_on_a_terminal_once_the_replay_takes_long(bags: dict[str, Path], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(sys, "stdout", _Terminal())
    screen = _Terminal()
    assert run_replay(ReplayRequest(inputs=[bags["a"]], out_dir=tmp_path / "tty"), stream=screen) == 0
    assert "━" in screen.getvalue() and "100%" in screen.getvalue()
    piped = io.StringIO()
    assert run_replay(ReplayRequest(inputs=[bags["a"]], out_dir=tmp_path / "pipe"), stream=piped) == 0
    assert "━" not in piped.getvalue()
    assert piped.getvalue().splitlines()[-1] == f"replay: 1 run ok; output in {tmp_path / 'pipe'}"


def test_no_progress_bar_before_it_is_due_or_when_stdout_is_piped(bags: dict[str, Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet, "PROGRESS_AFTER_S", 3600.0)
    monkeypatch.setattr(sys, "stdout", _Terminal())
    screen = _Terminal()
    assert run_replay(ReplayRequest(inputs=[bags["a"]], out_dir=tmp_path / "quick"), stream=screen) == 0
    assert "━" not in screen.getvalue()
    monkeypatch.setattr(fleet, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    screen = _Terminal()
    assert run_replay(ReplayRequest(inputs=[bags["a"]], out_dir=tmp_path / "machine"), stream=screen) == 0
    assert "━" not in screen.getvalue()


# ------------------------------------------------------------------ fleet: dask
def test_dask_cluster_writes_what_the_local_run_writes(bags: dict[str, Path], tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed", reason="dask[distributed] is in requirements/test.txt")
    inputs = [bags["a"].parent]
    assert run_replay(ReplayRequest(inputs=inputs, out_dir=tmp_path / "local", workers=1)) == 0
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        assert run_replay(ReplayRequest(inputs=inputs, out_dir=tmp_path / "dask", dask=cluster.scheduler_address)) == 0
    for name in ("a", "b", "c"):
        local = json.loads((tmp_path / "local" / name / "summary.json").read_text())
        remote = json.loads((tmp_path / "dask" / name / "summary.json").read_text())
        assert local == remote
        assert (tmp_path / "dask" / name / "report.html").is_file()
        assert (tmp_path / "dask" / name / "divergence.mcap").stat().st_size == \
            (tmp_path / "local" / name / "divergence.mcap").stat().st_size
    local_rollup = json.loads((tmp_path / "local" / "summary.json").read_text())
    dask_rollup = json.loads((tmp_path / "dask" / "summary.json").read_text())
    assert local_rollup == dask_rollup


def test_dask_scheduler_that_cannot_be_reached_is_one_line(bags: dict[str, Path], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed", reason="dask[distributed] is in requirements/test.txt")
    monkeypatch.setattr(fleet, "DASK_CONNECT_TIMEOUT_S", 1.0)
    line = _error_line(capsys, ["replay", str(bags["a"]), "--out", str(tmp_path / "out"),
                                "--dask", "tcp://127.0.0.1:9"])
    assert line.startswith("sim-real-bridge replay: error: --dask tcp://127.0.0.1:9: cannot reach the scheduler")
    assert not (tmp_path / "out").exists()


def test_workers_and_dask_exclude_each_other(bags: dict[str, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["replay", str(bags["a"]), "--out", str(tmp_path), "--workers", "2", "--dask", "tcp://x:1"])
    assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


# ------------------------------------------------------------------ config: joint map and sides
def test_joint_map_in_a_config_and_as_ros_parameters() -> None:
    config = replay_config_from_dict({"joint_map": {"leader_j1": "follower_j1"}})
    assert config.joint_map == {"leader_j1": "follower_j1"}
    params = {"/**/replay": {"ros__parameters": {"joint_map.leader_j1": "follower_j1",
                                                 "joint_map.leader_j2": "follower_j2"}}}
    assert replay_config_from_dict(params).joint_map == {"leader_j1": "follower_j1", "leader_j2": "follower_j2"}


@pytest.mark.parametrize(("value", "match"), [
    (["a", "b"], r"joint_map must map sim joint names to real joint names, got \['a', 'b'\]"),
    ({"a": 3}, r"joint_map must map sim joint names to real joint names"),
    ({"a": "x", "b": "x"}, r"joint_map: real joint\(s\) x named for more than one sim joint"),
])
def test_bad_joint_map_raises_naming_it(value: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        replay_config_from_dict({"joint_map": value}, source="replay config x.yaml")


def test_sides_override_the_defaults_but_not_the_topics_a_file_names() -> None:
    from sim_real_bridge.offline.replay.topics import side_topics

    config = replay_config_from_dict({"sim_topics": {"wrench": "/ft/leader"}}).with_sides("leader", "/follower")
    available = {"/leader/joint_states", "/follower/joint_states", "/follower/wrench"}
    sim = side_topics(config, "sim", available, "bag")
    assert sim["joint_states"] == "/leader/joint_states" and sim["wrench"] == "/ft/leader"
    assert sim["ee_pose"] == "/leader/ee_pose"
    real = side_topics(config, "real", available, "bag")
    assert real["joint_states"] == "/follower/joint_states" and real["wrench"] == "/follower/wrench"
    by_topic = ReplayConfig().with_sides(real="/arm/state")
    assert side_topics(by_topic, "real", {"/arm/state"}, "bag")["joint_states"] == "/arm/state"
    assert side_topics(by_topic, "real", {"/arm/state"}, "bag")["wrench"] == "/arm/wrench"
