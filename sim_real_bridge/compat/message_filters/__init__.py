"""Stand-in for ROS 2 ``message_filters`` where the package is not installed.

Provides the Python API that message_filters of ROS 2 Jazzy (4.11) and Kilted (7.x)
share, so code written against it runs unchanged on either: the names, the
constructor signatures, the callback conventions and the matching rules. Import it
through ``sim_real_bridge.ros.filters``, which prefers the real package when it is
importable. Method names are camelCase because the upstream API is.

What the two releases share, and so all there is here:

- ``SimpleFilter.registerCallback(cb, *args)`` and ``signalMessage(*msgs)``;
- ``Subscriber(node, msg_type, topic, qos_profile=..., **kwargs)``: the QoS only as a
  keyword (Jazzy's Subscriber takes ``*args`` and puts the callback fourth);
- ``Cache(f, cache_size=1, allow_headerless=False)`` with ``getInterval``,
  ``getElemAfterTime``, ``getElemBeforeTime``, ``getLastestTime`` (sic),
  ``getOldestTime``, ``getLast``;
- ``TimeSynchronizer(fs, queue_size)``: a set of messages with the same stamp, one
  per input, signalled in the order of ``fs``;
- ``ApproximateTimeSynchronizer(fs, queue_size, slop, allow_headerless=False)``:
  for the new message, each other queue's stamps within ``slop`` of it, nearest
  first; the first combination (in that order) whose spread is strictly below
  ``slop`` is signalled and removed. ``allow_headerless`` only as a keyword (Kilted
  put ``queue_offset`` fourth).

Kilted's additions (``queue_offset``, ``sync_arrival_time``, ``unregisterCallback``,
``Cache.getLatestTime``, ``Chain``, ...) are not here: code that needs them needs
Kilted's message_filters.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Optional, Sequence

import rclpy.logging
from rclpy.clock import ROSClock
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.time import Time

__all__ = ["ApproximateTimeSynchronizer", "Cache", "SimpleFilter", "Subscriber", "TimeSynchronizer"]

_HEADERLESS_WARNING = (
    "dropping a message without header.stamp: pass allow_headerless=True to stamp "
    "headerless messages with the current ROS time"
)


def _stamp(msg: Any, allow_headerless: bool, logger_name: str) -> Optional[Time]:
    """The message's header stamp as an rclpy Time; ROS time now or None if headerless."""
    if hasattr(msg, "header") and hasattr(msg.header, "stamp"):
        stamp = msg.header.stamp
        return stamp if hasattr(stamp, "nanoseconds") else Time.from_msg(stamp)
    if allow_headerless:
        return ROSClock().now()
    rclpy.logging.get_logger(logger_name).warning(_HEADERLESS_WARNING, once=True)
    return None


class SimpleFilter:
    """Base of every filter: holds output callbacks and calls them on output."""

    def __init__(self) -> None:
        self.callbacks: dict[int, tuple[Callable[..., Any], tuple[Any, ...]]] = {}

    def registerCallback(self, cb: Callable[..., Any], *args: Any) -> int:
        """Register ``cb``, called with the filter's output followed by ``args``; returns its id."""
        conn = len(self.callbacks)
        self.callbacks[conn] = (cb, args)
        return conn

    def signalMessage(self, *msg: Any) -> None:
        """Call every registered callback with ``msg`` followed by its own ``args``."""
        for cb, args in list(self.callbacks.values()):
            cb(*(msg + args))


class Subscriber(SimpleFilter):
    """Source filter wrapping an rclpy subscription; every message is passed on."""

    def __init__(self, node: Node, msg_type: Any, topic: str, *, qos_profile: Any = 10, **kwargs: Any) -> None:
        """Create the subscription.

        Args:
            node: Node that owns the subscription.
            msg_type: Message class of the topic.
            topic: Topic name (relative names resolve against the node's namespace).
            qos_profile: QoS profile, or a KEEP_LAST history depth.
            **kwargs: Passed on to ``node.create_subscription`` (e.g. callback_group, raw).
        """
        SimpleFilter.__init__(self)
        self.node = node
        self.topic = topic
        self.sub = node.create_subscription(msg_type, topic, self.callback, qos_profile=qos_profile, **kwargs)

    def callback(self, msg: Any) -> None:
        """Pass ``msg`` on to the connected filters."""
        self.signalMessage(msg)

    def getTopic(self) -> str:
        """Return the topic name given at construction."""
        return self.topic

    def __getattr__(self, key: str) -> Any:
        # Only reached for names the filter lacks: serve the subscription's attributes.
        if key == "sub":
            raise AttributeError(key)
        return getattr(self.sub, key)


class Cache(SimpleFilter):
    """Ring buffer of the last ``cache_size`` messages (arrival order), queried by stamp."""

    def __init__(self, f: SimpleFilter, cache_size: int = 1, allow_headerless: bool = False) -> None:
        SimpleFilter.__init__(self)
        self.connectInput(f)
        self.cache_size = cache_size
        self.cache_msgs: list[Any] = []
        self.cache_times: list[Time] = []
        self.allow_headerless = allow_headerless

    def connectInput(self, f: SimpleFilter) -> None:
        """Take input from filter ``f``."""
        self.incoming_connection = f.registerCallback(self.add)

    def add(self, msg: Any) -> None:
        """Store ``msg`` (dropping the oldest beyond ``cache_size``) and pass it on."""
        stamp = _stamp(msg, self.allow_headerless, "message_filters_cache")
        if stamp is None:
            return
        self.cache_times.append(stamp)
        self.cache_msgs.append(msg)
        if len(self.cache_msgs) > self.cache_size:
            del self.cache_msgs[0]
            del self.cache_times[0]
        self.signalMessage(msg)

    def getInterval(self, from_stamp: Time, to_stamp: Time) -> list[Any]:
        """Return the cached messages stamped within [from_stamp, to_stamp], in arrival order."""
        assert from_stamp <= to_stamp
        return [msg for msg, time in zip(self.cache_msgs, self.cache_times) if from_stamp <= time <= to_stamp]

    def getElemAfterTime(self, stamp: Time) -> Optional[Any]:
        """Return the first cached message (arrival order) stamped at or after ``stamp``."""
        return next((msg for msg, time in zip(self.cache_msgs, self.cache_times) if time >= stamp), None)

    def getElemBeforeTime(self, stamp: Time) -> Optional[Any]:
        """Return the last cached message (arrival order) stamped at or before ``stamp``."""
        pairs = zip(reversed(self.cache_msgs), reversed(self.cache_times))
        return next((msg for msg, time in pairs if time <= stamp), None)

    def getLastestTime(self) -> Optional[Time]:
        """Return the stamp of the most recently cached message, or None (upstream's spelling)."""
        return self.cache_times[-1] if self.cache_times else None

    def getOldestTime(self) -> Optional[Time]:
        """Return the stamp of the least recently cached message, or None."""
        return self.cache_times[0] if self.cache_times else None

    def getLast(self) -> Optional[Any]:
        """Return the first cached message stamped at or after the latest stamp, or None."""
        latest = self.getLastestTime()
        return None if latest is None else self.getElemAfterTime(latest)


class TimeSynchronizer(SimpleFilter):
    """Signals one message per input (in the order of ``fs``) when all hold the same stamp."""

    def __init__(self, fs: Sequence[SimpleFilter], queue_size: int) -> None:
        SimpleFilter.__init__(self)
        self.connectInput(fs)
        self.queue_size = queue_size
        self.lock = threading.Lock()

    def connectInput(self, fs: Sequence[SimpleFilter]) -> None:
        """Take input from the filters ``fs``, one queue (stamp in ns -> message) per input."""
        self.queues: list[dict[int, Any]] = [{} for _ in fs]
        self.input_connections = [
            f.registerCallback(self.add, queue, index) for index, (f, queue) in enumerate(zip(fs, self.queues))
        ]

    def _queue(self, msg: Any, stamp_ns: int, my_queue: dict[int, Any]) -> None:
        my_queue[stamp_ns] = msg
        while len(my_queue) > self.queue_size:
            del my_queue[min(my_queue)]

    def add(self, msg: Any, my_queue: dict[int, Any], my_queue_index: Optional[int] = None) -> None:
        """Queue ``msg`` under its stamp and signal every set now complete, oldest first."""
        with self.lock:
            self._queue(msg, Time.from_msg(msg.header.stamp).nanoseconds, my_queue)
            for stamp_ns in sorted(set(self.queues[0]).intersection(*self.queues[1:])):
                self.signalMessage(*[queue.pop(stamp_ns) for queue in self.queues])


class ApproximateTimeSynchronizer(TimeSynchronizer):
    """Signals one message per input when their stamps lie within ``slop`` seconds."""

    def __init__(
        self, fs: Sequence[SimpleFilter], queue_size: int, slop: float, *, allow_headerless: bool = False
    ) -> None:
        """Connect to the inputs ``fs``.

        Args:
            fs: Input filters; the callback receives one message of each, in order.
            queue_size: Stamps kept per input.
            slop: A set's stamps must spread strictly less than this, in seconds.
            allow_headerless: Stamp headerless messages with the current ROS time
                instead of dropping them.
        """
        TimeSynchronizer.__init__(self, fs, queue_size)
        self.slop = Duration(seconds=slop)
        self.allow_headerless = allow_headerless

    def add(self, msg: Any, my_queue: dict[int, Any], my_queue_index: Optional[int] = None) -> None:
        """Queue ``msg`` and signal the first set around it within ``slop``, if any."""
        stamp = _stamp(msg, self.allow_headerless, "message_filters_approx")
        if stamp is None:
            return
        stamp_ns, slop_ns = stamp.nanoseconds, self.slop.nanoseconds
        with self.lock:
            self._queue(msg, stamp_ns, my_queue)
            others = self.queues if my_queue_index is None else [
                queue for index, queue in enumerate(self.queues) if index != my_queue_index
            ]
            candidates = []
            for queue in others:
                near = [key for key in queue if abs(key - stamp_ns) <= slop_ns]
                if not near:
                    return
                candidates.append(sorted(near, key=lambda key: abs(key - stamp_ns)))  # stable: ties by arrival
            for combo in itertools.product(*candidates):
                keys = list(combo)
                if my_queue_index is not None:
                    keys.insert(my_queue_index, stamp_ns)
                if max(keys) - min(keys) < slop_ns and all(key in queue for queue, key in zip(self.queues, keys)):
                    self.signalMessage(*[queue.pop(key) for queue, key in zip(self.queues, keys)])
                    return
