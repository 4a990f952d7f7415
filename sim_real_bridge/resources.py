"""Locate files the package ships (msg/, config/, ...) wherever it is installed."""

from __future__ import annotations

from pathlib import Path

from sim_real_bridge.errors import ConfigError

PACKAGE_NAME = "sim_real_bridge"
_PACKAGE_DIR = Path(__file__).resolve().parent


def _candidate_roots() -> list[tuple[str, Path]]:
    """Return (description, share root) pairs in lookup order."""
    roots: list[tuple[str, Path]] = []
    checkout = _PACKAGE_DIR.parent
    if (checkout / "package.xml").is_file():
        roots.append(("source checkout", checkout))
    try:
        from ament_index_python.packages import (  # noqa: PLC0415
            PackageNotFoundError,
            get_package_share_directory,
        )
    except ImportError:
        pass
    else:
        try:
            roots.append(("ament share", Path(get_package_share_directory(PACKAGE_NAME))))
        except (PackageNotFoundError, ValueError, LookupError, OSError):
            pass
    if _PACKAGE_DIR.parent.name in ("site-packages", "dist-packages"):
        # Installed by CMake or colcon under PREFIX/lib/pythonX.Y/site-packages, beside
        # PREFIX/share: found without a sourced setup file (AMENT_PREFIX_PATH unset).
        roots.append(("install prefix", _PACKAGE_DIR.parents[3] / "share" / PACKAGE_NAME))
    roots.append(("package data", _PACKAGE_DIR / "_share"))
    return roots


def share_path(*parts: str) -> Path:
    """Return the path of a shipped resource, e.g. ``share_path("msg")``.

    Looks in the source checkout (the repo root, when it holds package.xml), then
    the ament share directory, then the share directory of the install prefix the
    package sits in, then ``sim_real_bridge/_share`` package data.

    Raises:
        ConfigError: the resource exists in none of those places.
    """
    tried: list[str] = []
    for description, root in _candidate_roots():
        candidate = root.joinpath(*parts)
        if candidate.exists():
            return candidate
        tried.append(f"{description} {candidate}")
    raise ConfigError(f"resource {'/'.join(parts)!r} of {PACKAGE_NAME} not found; looked in: " + "; ".join(tried))
