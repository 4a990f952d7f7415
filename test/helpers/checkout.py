"""Copies of the source checkout as a fresh clone would have it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def source_files(repo: Path) -> list[str]:
    """Files git tracks, plus untracked ones it does not ignore (uncommitted work)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, check=True, capture_output=True,
    ).stdout.decode()
    return [p for p in out.split("\0") if p and (repo / p).is_file()]


def copy_checkout(repo: Path, target: Path) -> Path:
    """Copies the checkout's source files (no build output, no venv) into ``target``."""
    for rel in source_files(repo):
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, target / rel)
    return target
