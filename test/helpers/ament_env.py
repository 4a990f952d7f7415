"""The ament prefix holding this package, for tests that run launch or ros2 commands."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_MARKER = Path("share") / "ament_index" / "resource_index" / "packages" / "sim_real_bridge"


def package_prefix() -> Path | None:
    """Install prefix whose ament index lists sim_real_bridge, if any.

    That of the imported generated messages (`make build` installs into the venv,
    colcon into install/sim_real_bridge), else sys.prefix.
    """
    candidates = []
    try:
        import sim_real_bridge.msg as msg_module
    except ImportError:
        pass
    else:
        # PREFIX/lib/pythonX.Y/site-packages/sim_real_bridge/msg/__init__.py
        candidates.append(Path(msg_module.__file__).resolve().parents[5])
    candidates.append(Path(sys.prefix))
    return next((prefix for prefix in candidates if (prefix / _MARKER).is_file()), None)


def ament_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: os.environ) with the package's prefix on AMENT_PREFIX_PATH and
    this interpreter's bin/ first on PATH, so `ros2` is the one beside it."""
    env = dict(os.environ if base is None else base)
    prefix = package_prefix()
    paths = [p for p in env.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    if prefix is not None and str(prefix) not in paths:
        paths.insert(0, str(prefix))
    if paths:
        env["AMENT_PREFIX_PATH"] = os.pathsep.join(paths)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def ensure_package_in_ament_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Puts the package's prefix on AMENT_PREFIX_PATH of this process (for in-process launch)."""
    value = ament_environment().get("AMENT_PREFIX_PATH")
    if value:
        monkeypatch.setenv("AMENT_PREFIX_PATH", value)
