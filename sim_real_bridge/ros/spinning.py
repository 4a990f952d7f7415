"""Running one node until Ctrl-C, SIGTERM or external shutdown: the same for every node.

Each executable calls ``rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)``
and then :func:`run_node`: our own handlers turn SIGINT and SIGTERM into
KeyboardInterrupt, so the context stays valid until the node has written what it
writes on the way out (summaries, the last events) and been destroyed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node

from sim_real_bridge.errors import SimRealBridgeError

#: Exit status of a node whose parameters were refused at start-up.
EXIT_BAD_PARAMETERS = 2

_interrupted = threading.Event()


def _interrupt(signum: int, frame: Any) -> None:
    _interrupted.set()
    raise KeyboardInterrupt


def interrupted() -> bool:
    """Whether SIGINT or SIGTERM arrived since :func:`run_node` started."""
    return _interrupted.is_set()


def run_node(node_factory: Callable[[], Node], name: str, before_spin: Callable[[], None] | None = None) -> int:
    """Build the node, spin it until interrupted, clean up; returns the exit status.

    Args:
        node_factory: builds the node; a :class:`SimRealBridgeError` raised there (bad
            parameters) is logged as fatal and gives status 2.
        name: the node's name, for that log line.
        before_spin: called once the node is built, right before spinning.

    On the way out the node's ``log_summary()`` (if it has one) runs with the context
    still valid, then the node is destroyed.
    """
    # Explicit, because a shell starting us in the background leaves SIGINT ignored.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    node = None
    try:
        try:
            node = node_factory()
        except SimRealBridgeError as error:
            rclpy.logging.get_logger(name).fatal(f"cannot start: {error}")
            return EXIT_BAD_PARAMETERS
        if before_spin is not None:
            before_spin()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        # A KeyboardInterrupt raised inside rclpy's C++ take_message surfaces as a pybind11
        # RuntimeError, and a handle destroyed under a running callback as InvalidHandle:
        # neither is an error once an interrupt was asked for.
        if rclpy.ok() and not _interrupted.is_set():
            raise
    finally:
        try:
            if node is not None:
                if hasattr(node, "log_summary"):
                    node.log_summary()
                node.destroy_node()
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: stop here, as asked
        rclpy.try_shutdown()
    return 0
