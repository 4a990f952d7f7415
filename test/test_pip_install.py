"""`pip install .` gives the parts that need no ROS runtime, in a venv without ROS."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest
from helpers.checkout import copy_checkout

pytestmark = [pytest.mark.build, pytest.mark.slow]


@pytest.fixture(scope="module")
def pip_venv(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with `pip install .` of a clean copy of the checkout."""
    base = tmp_path_factory.mktemp("pip")
    source = copy_checkout(repo_root, base / "src")
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(source)],
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return env_dir


def _run(env_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*args], cwd="/", capture_output=True, text=True, timeout=300,
                          env={"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(env_dir)})


def test_console_script_runs_without_ros(pip_venv: Path) -> None:
    result = _run(pip_venv, str(pip_venv / "bin" / "sim-real-bridge"), "--help")
    assert result.returncode == 0, result.stderr
    for command in ("demo", "replay", "scenarios"):
        assert command in result.stdout


def test_pure_parts_import_and_rclpy_is_absent(pip_venv: Path) -> None:
    code = (
        "import importlib.util, sim_real_bridge\n"
        "assert importlib.util.find_spec('rclpy') is None, 'rclpy must not be needed'\n"
        "import sim_real_bridge.core.engine, sim_real_bridge.sim.physics, sim_real_bridge.offline.bag_io\n"
        "from sim_real_bridge.resources import share_path\n"
        "p = share_path('config', 'scenarios')\n"
        "assert '_share' in str(p) and any(p.glob('*.yaml')), p\n"
        "assert (share_path('msg') / 'GapEvent.msg').is_file()\n"
        "print(sim_real_bridge.__file__)\n"
    )
    result = _run(pip_venv, str(pip_venv / "bin" / "python"), "-c", code)
    assert result.returncode == 0, result.stderr
    assert "site-packages" in result.stdout


def test_scenarios_command_lists_builtin_scenarios(pip_venv: Path) -> None:
    result = _run(pip_venv, str(pip_venv / "bin" / "sim-real-bridge"), "scenarios")
    assert result.returncode == 0, result.stderr
    assert "nominal" in result.stdout and "tour" in result.stdout


def test_demo_without_ros_says_what_is_missing(pip_venv: Path) -> None:
    result = _run(pip_venv, str(pip_venv / "bin" / "sim-real-bridge"), "demo", "--duration", "1")
    assert result.returncode == 2
    assert "rclpy" in result.stderr
