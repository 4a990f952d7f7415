"""Keep every file the capture layer writes inside its configured directory."""

from __future__ import annotations

import re
from pathlib import Path

from sim_real_bridge.errors import SnapshotError

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
MAX_NAME_CHARS = 80


def safe_name(name: str, *, fallback: str = "unnamed") -> str:
    """Turn any text (a topic, scenario or event id) into one harmless file name part.

    Path separators, ``..``, leading dots and every character outside
    ``[A-Za-z0-9_.-]`` are replaced, so the result can never name a parent, a hidden
    file or another directory.
    """
    cleaned = _UNSAFE.sub("_", str(name)).strip("._-")
    cleaned = re.sub(r"\.{2,}", "_", cleaned)[:MAX_NAME_CHARS].strip("._-")
    return cleaned or fallback


def confined_path(root: Path | str, *parts: str) -> Path:
    """Return ``root/part/...`` with every part sanitized, checked to stay inside root.

    Raises:
        SnapshotError: the resolved path would leave ``root`` (cannot happen with
            sanitized parts unless root itself is a symlink trick).
    """
    root_resolved = Path(root).resolve()
    candidate = root_resolved.joinpath(*(safe_name(p) for p in parts))
    resolved = candidate.resolve()
    if resolved != root_resolved and root_resolved not in resolved.parents:
        raise SnapshotError(f"path {candidate} escapes the capture directory {root_resolved}")
    return candidate
