"""The rosbags typestore: ROS 2 standard types plus sim_real_bridge's own messages."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.resources import PACKAGE_NAME, share_path

# The venv and the targeted distribution are Kilted; Jazzy readers accept the same
# definitions for every type we use.
_STORE_PREFERENCE = ("ROS2_KILTED", "ROS2_JAZZY", "LATEST")


def _base_store() -> Stores:
    for name in _STORE_PREFERENCE:
        if hasattr(Stores, name):
            return getattr(Stores, name)
    return Stores.LATEST  # pragma: no cover


def custom_msg_types(msg_dir: Path | None = None) -> dict:
    """Parse every ``msg/*.msg`` of the package into rosbags type definitions.

    Raises:
        ConfigError: msg/ is missing, empty, or a definition does not parse.
    """
    msg_dir = share_path("msg") if msg_dir is None else Path(msg_dir)
    files = sorted(msg_dir.glob("*.msg"))
    if not files:
        raise ConfigError(f"no .msg files in {msg_dir}")
    types: dict = {}
    for path in files:
        name = f"{PACKAGE_NAME}/msg/{path.stem}"
        try:
            types.update(get_types_from_msg(path.read_text(encoding="utf-8"), name))
        except Exception as exc:  # rosbags raises its own parser errors
            raise ConfigError(f"cannot parse message definition {path}: {exc}") from exc
    return types


@lru_cache(maxsize=4)
def _cached_typestore(msg_dir: str | None) -> Typestore:
    store = get_typestore(_base_store())
    store.register(custom_msg_types(None if msg_dir is None else Path(msg_dir)))
    return store


def build_typestore(msg_dir: Path | None = None) -> Typestore:
    """Return a typestore with ROS 2 Kilted standard types and sim_real_bridge/msg/*.

    The result is cached and shared; register extra types on a copy if needed.
    """
    return _cached_typestore(None if msg_dir is None else str(Path(msg_dir).resolve()))


def new_typestore(msg_dir: Path | None = None) -> Typestore:
    """Return a fresh, unshared typestore like :func:`build_typestore` (safe to extend)."""
    store = get_typestore(_base_store())
    store.register(custom_msg_types(msg_dir))
    return store
