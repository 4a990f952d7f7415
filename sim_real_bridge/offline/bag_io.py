"""The bag reading API under its first name; it lives in :mod:`sim_real_bridge.offline.bags`."""

from sim_real_bridge.offline.bags import *  # noqa: F403
from sim_real_bridge.offline.bags import __all__  # noqa: F401
