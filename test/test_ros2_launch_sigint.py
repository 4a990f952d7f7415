"""`ros2 launch sim_real_bridge demo.launch.py` as a user runs it, and Ctrl-C as a terminal sends it.

Needs ros2cli with `ros2 launch` (ros2launch): a ROS 2 distribution has it; without one,
`make test` installs it from the Jazzy kit when ROS_UPSTREAM_KIT names
../shared/ros-upstream. The package must be installed (`make build` or colcon build).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from helpers.ament_env import ament_environment, package_prefix
from sim_real_bridge.ros.graph import GraphOptions, demo_graph

pytest.importorskip(
    "ros2launch",
    reason="`ros2 launch` is not installed: a ROS 2 distribution (Jazzy, Kilted) has it; without one, "
    "`make test` installs it from the Jazzy kit when ROS_UPSTREAM_KIT names ../shared/ros-upstream",
)

pytestmark = [pytest.mark.ros, pytest.mark.slow]

RUNS = 10
SUMMARY_TYPE = "sim_real_bridge/msg/DivergenceSummary"


@pytest.fixture(scope="module")
def ros2(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """The `ros2` executable beside this interpreter (or on PATH) and the environment to run it in."""
    if package_prefix() is None:
        pytest.fail("sim_real_bridge is not installed in an ament prefix: run `make build` first")
    env = ament_environment()
    env["ROS_LOG_DIR"] = str(tmp_path_factory.mktemp("ros_log"))
    env["PYTHONUNBUFFERED"] = "1"
    executable = shutil.which("ros2", path=env["PATH"])
    assert executable, "ros2launch imports but no `ros2` executable is on PATH"
    return executable, env


def test_interface_show_gap_event(ros2: tuple[str, dict[str, str]], repo_root: Path) -> None:
    executable, env = ros2
    result = subprocess.run(
        [executable, "interface", "show", "sim_real_bridge/msg/GapEvent"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    shown = iter(result.stdout.splitlines())
    # Every line of the definition, in order; nested types are expanded between them.
    for line in (repo_root / "msg" / "GapEvent.msg").read_text().splitlines():
        assert any(candidate == line for candidate in shown), f"{line!r} missing from:\n{result.stdout}"


def _node_names() -> list[str]:
    return [spec.name for spec in demo_graph(GraphOptions(config_dir=Path(__file__).parents[1] / "config"))]


def _launch_and_interrupt(executable: str, env: dict[str, str], run_dir: Path) -> tuple[int | None, str, str]:
    """Starts the demo, waits for the first summary, sends SIGINT to its process group.

    Returns launch's exit status (None if it hung), its output and the summary echoed.
    """
    log_path = run_dir / "launch.log"
    with log_path.open("w") as log:
        launch = subprocess.Popen(
            [executable, "launch", "sim_real_bridge", "demo.launch.py", "scenario:=nominal",
             f"output_dir:={run_dir / 'out'}"],
            cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    status, summary = None, ""
    try:
        summary = subprocess.run(
            [executable, "topic", "echo", "--no-daemon", "--once", "--timeout", "90", "/divergence/summary",
             SUMMARY_TYPE],
            cwd=run_dir, env=env, capture_output=True, text=True, timeout=120,
        ).stdout
        os.killpg(launch.pid, signal.SIGINT)  # as a terminal does on Ctrl-C: the whole group
        status = launch.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if launch.poll() is None:
            os.killpg(launch.pid, signal.SIGKILL)
            launch.wait()
    return status, log_path.read_text(errors="replace"), summary


def test_ctrl_c_stops_every_node_cleanly_ten_times(ros2: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    executable, env = ros2
    nodes = _node_names()
    for run in range(RUNS):
        run_dir = tmp_path / f"run{run}"
        run_dir.mkdir()
        status, output, summary = _launch_and_interrupt(executable, env, run_dir)
        where = f"run {run + 1} of {RUNS}; launch output:\n{output[-6000:]}"
        assert status == 0, f"ros2 launch ended with {status}; {where}"
        assert "elapsed_s:" in summary and "event_count:" in summary, f"no summary echoed; {where}"
        assert "Traceback" not in output, where
        for name in nodes:
            assert re.search(rf"\[INFO\] \[{name}-\d+\]: process has finished cleanly", output), f"{name}: {where}"
            assert re.search(rf"[\[.]{name}\]: stopped by SIGINT: shut down cleanly", output), f"{name}: {where}"
