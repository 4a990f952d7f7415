"""The README's ROS 2 workspace install: `colcon build` and `colcon test` in a fresh workspace against the PyPI ROS 2 prefix."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers.checkout import copy_checkout

from sim_real_bridge.ros.graph import GraphOptions, demo_graph

pytestmark = [pytest.mark.build, pytest.mark.slow]

PREFIX = Path(sys.prefix)


@pytest.fixture(scope="module")
def colcon_install(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Copies the checkout into ws/src like a clone and runs colcon build there (with tests)."""
    if shutil.which("colcon", path=str(PREFIX / "bin")) is None:
        pytest.fail("colcon is not installed in the test environment (requirements/ros.txt)")
    workspace = tmp_path_factory.mktemp("ws")
    copy_checkout(repo_root, workspace / "src" / "sim_real_bridge")
    env = dict(os.environ, AMENT_PREFIX_PATH=str(PREFIX), CMAKE_PREFIX_PATH=str(PREFIX))
    result = subprocess.run(
        [str(PREFIX / "bin" / "colcon"), "build", "--cmake-args", f"-DPython3_EXECUTABLE={sys.executable}"],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return workspace / "install" / "sim_real_bridge"


def test_install_has_an_executable_for_every_node(colcon_install: Path, repo_root: Path) -> None:
    graph = demo_graph(GraphOptions(config_dir=repo_root / "config"))
    for spec in graph:
        exe = colcon_install / "lib" / "sim_real_bridge" / spec.executable
        assert exe.is_file(), f"missing {exe}"
        assert os.access(exe, os.X_OK), f"{exe} is not executable"
        assert f"from sim_real_bridge.nodes.{spec.executable} import main" in exe.read_text()


def test_install_has_launch_config_and_messages(colcon_install: Path, repo_root: Path) -> None:
    share = colcon_install / "share" / "sim_real_bridge"
    for launch_file in ("demo.launch.py", "bridge.launch.py"):
        assert (share / "launch" / launch_file).is_file()
    assert (share / "config" / "sim_real_bridge.yaml").is_file()
    for msg in sorted((repo_root / "msg").glob("*.msg")):
        assert (share / "msg" / msg.name).is_file(), f"{msg.name} not installed"
    assert (colcon_install / "share" / "ament_index" / "resource_index" / "rosidl_interfaces" / "sim_real_bridge").is_file()


def test_installed_messages_and_code_import(colcon_install: Path, repo_root: Path) -> None:
    """The install alone (not the checkout) provides the message types and the nodes."""
    site = colcon_install / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    env = dict(os.environ)
    env["PYTHONPATH"] = str(site)
    env["AMENT_PREFIX_PATH"] = f"{colcon_install}{os.pathsep}{PREFIX}"
    env["LD_LIBRARY_PATH"] = f"{colcon_install / 'lib'}{os.pathsep}{env.get('LD_LIBRARY_PATH', '')}"
    names = [p.stem for p in sorted((repo_root / "msg").glob("*.msg"))]
    code = (
        "import sim_real_bridge, sim_real_bridge.msg as m, sim_real_bridge.ros.graph\n"
        f"assert sim_real_bridge.__file__.startswith({str(site)!r}), sim_real_bridge.__file__\n"
        f"assert m.__file__.startswith({str(site)!r}), m.__file__\n"
        f"for name in {names!r}:\n"
        "    getattr(m, name)()\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")


def _colcon(workspace: Path, *args: str, timeout_s: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, AMENT_PREFIX_PATH=str(PREFIX), CMAKE_PREFIX_PATH=str(PREFIX))
    return subprocess.run(
        [str(PREFIX / "bin" / "colcon"), *args], cwd=workspace, env=env, capture_output=True, text=True,
        timeout=timeout_s,
    )


def _collected(source: Path, marker_expression: str) -> int:
    """How many tests pytest selects with ``-m marker_expression`` in ``source``."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marker_expression],
        cwd=source, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    match = re.search(r"(\d+)(?:/\d+)? tests? collected", result.stdout)
    assert match, result.stdout[-2000:]
    return int(match.group(1))


def test_colcon_test_runs_the_unit_tests_and_they_pass(colcon_install: Path) -> None:
    workspace = colcon_install.parents[1]
    source = workspace / "src" / "sim_real_bridge"
    result = _colcon(workspace, "test", "--return-code-on-test-failure", timeout_s=1200)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    summary = _colcon(workspace, "test-result", "--all", "--verbose", timeout_s=60)
    results = re.search(r"Summary: (\d+) tests?, (\d+) errors?, (\d+) failures?, (\d+) skipped", summary.stdout)
    assert results, summary.stdout + summary.stderr
    _tests, errors, failures, _skipped = map(int, results.groups())
    assert summary.returncode == 0 and errors == 0 and failures == 0, summary.stdout
    # pytest ran exactly the tests CMakeLists.txt selects for colcon test, and those are not a handful.
    xunit = workspace / "build" / "sim_real_bridge" / "test_results" / "sim_real_bridge" / "pytest.xunit.xml"
    assert xunit.is_file(), summary.stdout
    # A module skipped as a whole is one entry whose class name is the junit prefix alone
    # ("sim_real_bridge", not "sim_real_bridge.test.test_x"); --collect-only counts none.
    cases = ET.parse(xunit).getroot().iter("testcase")
    ran = sum(1 for case in cases if case.get("classname", "").partition(".")[2])
    expression = re.search(r"PYTEST_ADDOPTS=-m '([^']+)'", (source / "CMakeLists.txt").read_text()).group(1)
    assert ran == _collected(source, expression) > 100
