"""High-rate subscriptions served by a thread of their own, beside the node's executor.

rclpy's executors rebuild and scan a wait set of every entity of the node (inputs,
timers, parameter services) on each wake; at 1 kHz per input that bookkeeping cost
the monitor more than its analysis. Subscriptions created with :attr:`InputThread.group`
are left alone by the executor (the group never lets it run them); the thread waits on
them alone and hands each message taken to its callback, under a lock the node's other
callbacks (timers) share, so the node's state is only ever touched by one at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from rclpy.callback_groups import CallbackGroup
from rclpy.exceptions import InvalidHandle
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.subscription import Subscription

#: Most messages taken from one subscription per wake, so one flooded input cannot hold off the rest.
MAX_BATCH = 64
#: Longest wait before the thread looks at its stop flag again (a guard condition wakes it sooner).
WAIT_TIMEOUT_NS = 200_000_000


class ExecutorExcluded(CallbackGroup):
    """A callback group whose entities no executor waits on or runs."""

    def can_execute(self, entity: Any) -> bool:
        return False

    def beginning_execution(self, entity: Any) -> bool:
        return False

    def ending_execution(self, entity: Any) -> None:
        pass


class InputThread:
    """Waits on its subscriptions in a thread; calls each one's callback per message.

    Args:
        node: the node owning the subscriptions.
        lock: held while callbacks run (once per wake, for every message taken then).
        on_error: called with the exception if a callback raises (the thread goes on).
    """

    def __init__(self, node: Node, lock: threading.Lock, on_error: Callable[[BaseException], None]) -> None:
        self.group = ExecutorExcluded()
        self._node = node
        self._lock = lock
        self._on_error = on_error
        self._subscriptions: list[Subscription] = []
        self._stop = threading.Event()
        self._wake = node.create_guard_condition(lambda: None, callback_group=self.group)
        self._thread: threading.Thread | None = None
        self.wakes = 0

    def add(self, subscription: Subscription) -> None:
        """Serve this subscription (created with ``callback_group=self.group``)."""
        if subscription.callback_group is not self.group:
            raise ValueError(f"{subscription.topic_name}: create it with callback_group=InputThread.group")
        self._subscriptions.append(subscription)

    def start(self) -> None:
        """Start serving (once)."""
        if self._thread is None and self._subscriptions:
            self._thread = threading.Thread(target=self._run, name=f"{self._node.get_name()}_inputs", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving; returns once the thread has finished its last batch."""
        self._stop.set()
        try:
            self._wake.trigger()
        except InvalidHandle:
            pass
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        context = self._node.context
        subs = list(self._subscriptions)
        wait_set = _rclpy.WaitSet(len(subs), 1, 0, 0, 0, 0, context.handle)
        while not self._stop.is_set():
            try:
                with ExitStack() as held:
                    held.enter_context(context.handle)
                    for sub in subs:
                        held.enter_context(sub.handle)
                    held.enter_context(self._wake.handle)
                    wait_set.clear_entities()
                    for sub in subs:
                        wait_set.add_subscription(sub.handle)
                    wait_set.add_guard_condition(self._wake.handle)
                    wait_set.wait(WAIT_TIMEOUT_NS)  # releases the GIL while it waits
                    ready = wait_set.get_ready_entities("subscription")
            except InvalidHandle:
                return  # the node or context is gone: nothing left to serve
            if self._stop.is_set() or not context.ok():
                return
            if not ready:
                continue
            self.wakes += 1
            with self._lock:
                for sub in subs:
                    if sub.handle.pointer in ready and not take_queued(sub, sub.callback, self._on_error):
                        return


def take_queued(sub: Subscription, deliver: Callable[[Any], None],
                on_error: Callable[[BaseException], None] | None = None) -> bool:
    """Hands up to MAX_BATCH messages queued on sub to ``deliver``, one by one.

    Returns False once the handle is gone (node destroyed, context shut down under
    Ctrl-C): there is nothing to take, as rclpy's executors treat it. With ``on_error``,
    an exception from ``deliver`` goes there and the next message is taken.
    """
    for _ in range(MAX_BATCH):
        try:
            with sub.handle:
                taken = sub.handle.take_message(sub.msg_type, sub.raw)
        except InvalidHandle:
            return False
        if taken is None:
            return True
        if on_error is None:
            deliver(taken[0])
            continue
        try:
            deliver(taken[0])
        except Exception as error:  # noqa: BLE001 - one bad callback must not stop every input
            on_error(error)
    return True
