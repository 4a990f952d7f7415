"""package.xml declares, by rosdep key, every third-party module the package and its tests import.

`rosdep install --from-paths src` installs what package.xml lists and nothing else: a
module imported but not declared is missing on a ROS machine (the report without
plotly), a key declared but not used is a stale dependency.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# Modules that are not ROS packages, with their rosdep keys as rosdistro's
# rosdep/python.yaml names them (pip keys, *-pip, where it has no system package), or
# as rosdep/sim_real_bridge.yaml of this repository defines them where rosdistro has none.
PYTHON_KEYS = {
    "numpy": "python3-numpy",
    "scipy": "python3-scipy",
    "dask": "python3-dask-distributed",
    "distributed": "python3-dask-distributed",
    "yaml": "python3-yaml",
    "ruamel": "python3-ruamel.yaml",
    "transforms3d": "python3-transforms3d",
    "rich": "python3-rich",
    "matplotlib": "python3-matplotlib",
    "plotly": "python3-plotly",
    "mujoco": "python3-mujoco-sysid-pip",
    "absl": "python3-mujoco-sysid-pip",  # absl-py comes with mujoco[sysid] (fit quiets its logging)
    "rosbags": "python3-rosbags-pip",
    "pytest": "python3-pytest",
    "hypothesis": "python3-hypothesis",
    "websockets": "python3-websockets",
    "mcap": "python3-mcap-pip",
    "zstandard": "python3-zstandard",
    "lz4": "python3-lz4",
    "mcap_ros2": "mcap-ros2-support",
}
OWN_KEYS = {"python3-plotly", "python3-mujoco-sysid-pip", "python3-dask-distributed", "python3-mcap-pip"}
# Declared, though nothing imports a module of that name.
RUNTIME_NOT_IMPORTED = {"rosidl_default_runtime"}  # what the generated messages need
TEST_NOT_IMPORTED = {
    "ament_cmake_pytest",  # CMakeLists.txt registers the suite with it
    "launch_testing",  # the pytest plugin launch_pytest runs on
    "python3-pytest-timeout",  # setup.cfg's timeout
    "ros2cli", "ros2interface", "ros2topic",  # the `ros2` verbs the launch test runs
}
# Our own modules, and test modules that import another test module's fixtures.
LOCAL = {"sim_real_bridge", "helpers", "conftest"} | {path.stem for path in (ROOT / "test").glob("test_*.py")}


def _declared(*tags: str) -> set[str]:
    root = ET.parse(ROOT / "package.xml").getroot()
    return {element.text.strip() for tag in tags for element in root.findall(tag)}


def _imports(paths: list[Path]) -> dict[str, set[str]]:
    """Top-level third-party modules imported (or pytest.importorskip-ed) -> files."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip"
                  and node.args and isinstance(node.args[0], ast.Constant)):
                names = [node.args[0].value]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in LOCAL:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _key(module: str) -> str:
    """The module's rosdep key: from PYTHON_KEYS, else its own name as a ROS package."""
    if module in PYTHON_KEYS:
        return PYTHON_KEYS[module]
    spec = importlib.util.find_spec(module)
    if spec is not None and spec.origin:
        # A ROS package installs PREFIX/share/<name>/package.xml beside PREFIX/lib/pythonX.Y/.../<name>.
        parents = Path(spec.origin).parents
        assert any((parent / "share" / module / "package.xml").is_file() for parent in parents), (
            f"{module} is neither a ROS package nor in PYTHON_KEYS: add its rosdep key there"
        )
    return module


@pytest.fixture(scope="module")
def package_imports() -> dict[str, set[str]]:
    """What the installed package runs: its modules and the launch files."""
    return _imports(sorted((ROOT / "sim_real_bridge").rglob("*.py")) + sorted((ROOT / "launch").glob("*.py")))


@pytest.fixture(scope="module")
def test_imports() -> dict[str, set[str]]:
    return _imports(sorted((ROOT / "test").rglob("*.py")))


def test_every_runtime_import_is_declared(package_imports: dict[str, set[str]]) -> None:
    declared = _declared("depend", "exec_depend")
    missing = {module: files for module, files in package_imports.items() if _key(module) not in declared}
    assert not missing, f"imported but not in package.xml (depend/exec_depend): {missing}"


def test_every_test_import_is_declared(test_imports: dict[str, set[str]]) -> None:
    declared = _declared("depend", "exec_depend", "test_depend")
    missing = {module: files for module, files in test_imports.items() if _key(module) not in declared}
    assert not missing, f"imported by tests but not in package.xml: {missing}"


def test_no_declared_dependency_is_unused(
    package_imports: dict[str, set[str]], test_imports: dict[str, set[str]]
) -> None:
    runtime_keys = {_key(module) for module in package_imports}
    test_keys = {_key(module) for module in test_imports}
    stale_runtime = _declared("exec_depend") - runtime_keys - RUNTIME_NOT_IMPORTED
    stale_test = _declared("test_depend") - test_keys - TEST_NOT_IMPORTED
    assert not stale_runtime, f"exec_depend that nothing imports: {sorted(stale_runtime)}"
    assert not stale_test, f"test_depend that no test imports: {sorted(stale_test)}"


@pytest.mark.parametrize("key", sorted(OWN_KEYS))
def test_keys_rosdistro_lacks_are_defined_here(key: str) -> None:
    rules = yaml.safe_load((ROOT / "rosdep" / "sim_real_bridge.yaml").read_text())
    assert key in _declared("depend", "exec_depend", "test_depend")
    assert {"debian", "ubuntu"} <= set(rules[key]), rules.get(key)
