"""Test session setup: DDS pinned to localhost, one ROS_DOMAIN_ID per test session."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

_DOMAIN_LOCK_DIR = Path("/tmp/sim_real_bridge_domains")
_domain_lock_file = None


def _claim_domain_id() -> int:
    """Return a ROS_DOMAIN_ID no other live test session on this machine holds."""
    global _domain_lock_file
    _DOMAIN_LOCK_DIR.mkdir(parents=True, exist_ok=True)
    for domain_id in range(11, 101):
        handle = open(_DOMAIN_LOCK_DIR / f"{domain_id}.lock", "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _domain_lock_file = handle  # held until the interpreter exits
        return domain_id
    raise RuntimeError(f"no free ROS_DOMAIN_ID left under {_DOMAIN_LOCK_DIR}")


# Set before anything imports rclpy, so every node and child process inherits them.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.pop("ROS_LOCALHOST_ONLY", None)
os.environ["ROS_DOMAIN_ID"] = str(_claim_domain_id())
os.environ.setdefault("MUJOCO_GL", "osmesa")

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """Root of the source checkout."""
    return REPO_ROOT
