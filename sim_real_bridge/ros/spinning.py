"""Running one node until Ctrl-C, SIGTERM or external shutdown: the same for every node.

Each executable calls ``rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)``
and then :func:`run_node`: our own handlers turn the first SIGINT or SIGTERM into a
stop (a flag the spin loop checks after each callback while spinning, KeyboardInterrupt
before), so the context stays valid until the node has written what it writes on the
way out (summaries, the last events) and been destroyed.

Ctrl-C in a terminal running ``ros2 launch`` delivers SIGINT twice to every node (once
to the process group from the terminal, once forwarded by launch), 20 to 50 ms apart,
and launch follows up with SIGTERM if a node is still running after a few seconds.
So the first signal starts the shutdown and ignores every later SIGINT and SIGTERM:
an ignored signal stays ignored through interpreter exit, where Python resets its own
handlers to the default action (which would end the process with status -2). A node
whose shutdown hangs is still ended by SIGKILL, which launch sends last.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node

from sim_real_bridge.errors import SimRealBridgeError

#: Exit status of a node whose parameters were refused at start-up.
EXIT_BAD_PARAMETERS = 2
#: The signals that stop a node.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_interrupted = threading.Event()
_stop_signal: list[str] = []


def _note_stop(signum: int, frame: Any) -> None:
    # Ignore first: a second signal arriving while this handler runs is then ignored too.
    ignore_stop_signals()
    _interrupted.set()
    _stop_signal.append(signal.Signals(signum).name)


def _interrupt(signum: int, frame: Any) -> None:
    _note_stop(signum, frame)
    raise KeyboardInterrupt


def ignore_stop_signals() -> None:
    """Ignore SIGINT and SIGTERM from now on, through interpreter exit."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


@contextmanager
def _stop_signals_deferred() -> Iterator[None]:
    """Holds a stop signal back until the block is done, then interrupts as usual.

    For constructors whose ``__del__`` needs what ``__init__`` had not set yet when the
    KeyboardInterrupt landed (rclpy's Executor prints an AttributeError then).
    """
    pending: list[int] = []
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for signum in STOP_SIGNALS:
            signal.signal(signum, _interrupt)
        if pending:
            _interrupt(pending[0], None)


def interrupted() -> bool:
    """Whether SIGINT or SIGTERM arrived since :func:`run_node` started."""
    return _interrupted.is_set()


def run_node(node_factory: Callable[[], Node], name: str, before_spin: Callable[[], None] | None = None) -> int:
    """Build the node, spin it until interrupted, clean up; returns the exit status.

    Args:
        node_factory: builds the node; a :class:`SimRealBridgeError` raised there (bad
            parameters) is logged as fatal and gives status 2.
        name: the node's name, for the log lines.
        before_spin: called once the node is built, right before spinning.

    On the way out the node's ``log_summary()`` (if it has one) runs with the context
    still valid, then the node is destroyed and the exit is logged. From the first
    SIGINT or SIGTERM on, further ones are ignored (see the module docstring).
    """
    _stop_signal.clear()
    # Explicit, because a shell starting us in the background leaves SIGINT ignored.
    for signum in STOP_SIGNALS:
        signal.signal(signum, _interrupt)
    node = None
    status = 0
    try:
        try:
            node = node_factory()
        except SimRealBridgeError as error:
            rclpy.logging.get_logger(name).fatal(f"cannot start: {error}")
            status = EXIT_BAD_PARAMETERS
        else:
            if before_spin is not None:
                before_spin()
            _spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        # A KeyboardInterrupt raised inside rclpy's C++ take_message surfaces as a pybind11
        # RuntimeError, and a handle destroyed under a running callback as InvalidHandle:
        # neither is an error once an interrupt was asked for.
        if rclpy.ok() and not _interrupted.is_set():
            raise
    finally:
        _shut_down(node, name)
    return status


def _spin(node: Node) -> None:
    """rclpy.spin, ended by the flag a stop signal sets, checked after every callback.

    (No timeout for spin_once: with one, rclpy creates a timer for every wait.)
    """
    with _stop_signals_deferred():
        executor = rclpy.get_global_executor()
    executor.add_node(node)
    # While spinning a stop signal only sets the flag: raised, its KeyboardInterrupt could
    # land inside the construction of the executor's next Task, whose __del__ then prints
    # an AttributeError traceback. The loop sees the flag once the current callback returns.
    for signum in STOP_SIGNALS:
        signal.signal(signum, _note_stop)
    try:
        while executor.context.ok() and not _interrupted.is_set():
            executor.spin_once()
    finally:
        executor.remove_node(node)


def _shut_down(node: Node | None, name: str) -> None:
    """Runs the node's summary, destroys it, shuts the context down; logs the exit."""
    logger = node.get_logger() if node is not None else rclpy.logging.get_logger(name)
    try:
        if node is not None:
            if hasattr(node, "log_summary"):
                node.log_summary()
            node.destroy_node()
    except KeyboardInterrupt:
        pass  # the first signal, arriving during the clean-up after an external shutdown
    finally:
        rclpy.try_shutdown()
    if _stop_signal:
        logger.info(f"stopped by {_stop_signal[0]}: shut down cleanly")
