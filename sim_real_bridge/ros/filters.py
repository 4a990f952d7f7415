"""The one place ``message_filters`` is imported: the real package if installed, else ours.

Nodes write ``from sim_real_bridge.ros.filters import message_filters`` and use the
API that ROS 2 Jazzy's and Kilted's message_filters share. Where ROS 2's
message_filters is importable it is used as is; elsewhere
``sim_real_bridge.compat.message_filters`` stands in with that API's names,
signatures and matching rules.
"""

from __future__ import annotations

try:
    import message_filters

    USING_UPSTREAM_MESSAGE_FILTERS: bool = True
except ImportError:
    from sim_real_bridge.compat import message_filters

    USING_UPSTREAM_MESSAGE_FILTERS = False

__all__ = ["USING_UPSTREAM_MESSAGE_FILTERS", "message_filters"]
