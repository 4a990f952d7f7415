"""Stand-in for ROS 2 ``message_filters`` (Kilted API) where the package is not installed.

Mirrors the Python API of message_filters 7.1 (ROS 2 Kilted): the names, the
constructor signatures, the callback conventions and the matching rules, so that
code written against the real package runs unchanged on top of this one. Method
names are camelCase because the upstream API is (``registerCallback``,
``getElemAfterTime``, ...). Import it through ``sim_real_bridge.ros.filters``, which
prefers the real package when it is importable.

Behaviour kept on purpose, because callers and the conformance suite rely on it:

- ``TimeSynchronizer`` signals the earliest stamp present in every queue, one set per
  incoming message, then drops every queued message older than that stamp.
- ``ApproximateTimeSynchronizer`` is the pure-Python policy of upstream: for the new
  message, each other queue contributes its stamps within ``slop`` of it, nearest
  first; the first combination (in that order) whose span is strictly below ``slop``
  is signalled and removed. ``queue_offset`` (nanoseconds per input) shifts a queue's
  keys; as upstream, only a message arriving on an input with zero offset can
  complete a set, because the arriving message is looked up under its unshifted stamp.
- ``Cache`` keeps messages in arrival order (a ring buffer of ``cache_size``), and
  answers queries in that order, with stamps as :class:`rclpy.time.Time`.
- Headerless messages are dropped (with a warning) unless ``allow_headerless`` is
  set, in which case they are stamped with the current ROS time.

Not provided: ``TimeSequencer``, ``DeltaFilter`` and ``InputAligner``.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from typing import Any, Callable, Optional, Sequence, Union

import rclpy.logging
from builtin_interfaces.msg import Time as TimeMsg
from rclpy.clock import ROSClock
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.time import Time

__all__ = [
    "ApproximateTimeSynchronizer",
    "Cache",
    "Chain",
    "SimpleFilter",
    "Subscriber",
    "TimeSynchronizer",
]

_HEADERLESS_WARNING = (
    "dropping a message without header.stamp: pass allow_headerless=True to stamp "
    "headerless messages with the current ROS time"
)


def _has_stamp(msg: Any) -> bool:
    return hasattr(msg, "header") and hasattr(msg.header, "stamp")


def _stamp_to_time(stamp: Any) -> Time:
    """Return ``stamp`` (rclpy Time or builtin_interfaces/Time) as an rclpy Time."""
    if hasattr(stamp, "nanoseconds"):
        return stamp
    return Time.from_msg(stamp)


def _stamp_to_ns(stamp: Any) -> int:
    """Return ``stamp`` (rclpy Time or builtin_interfaces/Time) in integer nanoseconds."""
    if isinstance(stamp, TimeMsg):
        return stamp.sec * 1_000_000_000 + stamp.nanosec
    if hasattr(stamp, "nanoseconds"):
        return stamp.nanoseconds
    return Time.from_msg(stamp).nanoseconds  # raises TypeError like upstream


class SimpleFilter:
    """Base of every filter: holds output callbacks and calls them on output."""

    def __init__(self) -> None:
        self.callbacks: dict[int, tuple[Callable[..., Any], tuple[Any, ...]]] = {}

    def registerCallback(self, callback: Callable[..., Any], *args: Any) -> int:
        """Register ``callback``, called with the filter's output followed by ``args``.

        Returns:
            A connection id for :meth:`unregisterCallback`.
        """
        conn = len(self.callbacks)
        self.callbacks[conn] = (callback, args)
        return conn

    def signalMessage(self, *msg: Any) -> None:
        """Call every registered callback with ``msg`` followed by its own ``args``."""
        for callback, args in list(self.callbacks.values()):
            callback(*(msg + args))

    def unregisterCallback(self, conn: int) -> None:
        """Forget the callback registered under ``conn`` (unknown ids are ignored)."""
        self.callbacks.pop(conn, None)


class Subscriber(SimpleFilter):
    """Source filter wrapping an rclpy subscription; every message is passed on."""

    def __init__(
        self,
        node: Node,
        msg_type: Any,
        topic: str,
        qos_profile: Union[QoSProfile, int] = QoSProfile(depth=10),
        **kwargs: Any,
    ) -> None:
        """Create the subscription.

        Args:
            node: Node that owns the subscription.
            msg_type: Message class of the topic.
            topic: Topic name (relative names resolve against the node's namespace).
            qos_profile: QoS profile, or a KEEP_LAST history depth.
            **kwargs: Passed on to ``node.create_subscription`` (e.g. callback_group).
        """
        SimpleFilter.__init__(self)
        self.node = node
        self.topic = topic
        self.sub = self.node.create_subscription(
            msg_type=msg_type,
            topic=self.topic,
            callback=self.callback,
            qos_profile=qos_profile,
            **kwargs,
        )

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
    """Ring buffer of the last ``cache_size`` messages, queried by stamp."""

    def __init__(self, f: SimpleFilter, cache_size: int = 1, allow_headerless: bool = False):
        """Connect to ``f`` and keep its last ``cache_size`` messages.

        Args:
            f: Input filter.
            cache_size: Number of messages kept.
            allow_headerless: Stamp headerless messages with the current ROS time
                instead of dropping them.
        """
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
        if not _has_stamp(msg):
            if not self.allow_headerless:
                rclpy.logging.get_logger("message_filters_cache").warning(
                    _HEADERLESS_WARNING, once=True
                )
                return
            stamp = ROSClock().now()
        else:
            stamp = _stamp_to_time(msg.header.stamp)
        self.cache_times.append(stamp)
        self.cache_msgs.append(msg)
        if len(self.cache_msgs) > self.cache_size:
            del self.cache_msgs[0]
            del self.cache_times[0]
        self.signalMessage(msg)

    def getInterval(self, from_stamp: Time, to_stamp: Time) -> list[Any]:
        """Return the cached messages stamped within [from_stamp, to_stamp], in arrival order."""
        assert from_stamp <= to_stamp
        return [
            msg
            for msg, time in zip(self.cache_msgs, self.cache_times)
            if from_stamp <= time <= to_stamp
        ]

    def getElemAfterTime(self, stamp: Time) -> Optional[Any]:
        """Return the first cached message (arrival order) stamped at or after ``stamp``."""
        for msg, time in zip(self.cache_msgs, self.cache_times):
            if time >= stamp:
                return msg
        return None

    def getElemBeforeTime(self, stamp: Time) -> Optional[Any]:
        """Return the last cached message (arrival order) stamped at or before ``stamp``."""
        for msg, time in zip(reversed(self.cache_msgs), reversed(self.cache_times)):
            if time <= stamp:
                return msg
        return None

    def getLatestTime(self) -> Optional[Time]:
        """Return the stamp of the most recently cached message, or None."""
        if not self.cache_times:
            return None
        return self.cache_times[-1]

    def getLastestTime(self) -> Optional[Time]:
        """Deprecated upstream spelling of :meth:`getLatestTime`."""
        warnings.warn(
            "Cache.getLastestTime is deprecated; use Cache.getLatestTime",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.getLatestTime()

    def getOldestTime(self) -> Optional[Time]:
        """Return the stamp of the least recently cached message, or None."""
        if not self.cache_times:
            return None
        return self.cache_times[0]

    def getLast(self) -> Optional[Any]:
        """Return the first cached message stamped at or after the latest stamp, or None."""
        latest = self.getLatestTime()
        if latest is None:
            return None
        return self.getElemAfterTime(latest)


class Chain(SimpleFilter):
    """Runs messages through filters added with :meth:`addFilter`, in order."""

    def __init__(self, message_filter: Optional[SimpleFilter] = None) -> None:
        SimpleFilter.__init__(self)
        self.incoming_connection: Optional[int] = None
        if message_filter is not None:
            self.connectInput(message_filter)
        self._filters: list[Any] = []
        self._output_conns: list[int] = []

    def connectInput(self, message_filter: SimpleFilter) -> None:
        """Take input from ``message_filter``; a chain has one input."""
        if self.incoming_connection is not None:
            raise RuntimeError("Already connected")
        self.incoming_connection = message_filter.registerCallback(self.add)

    def add(self, message: Any) -> None:
        """Feed ``message`` to the first filter, or pass it on if the chain is empty."""
        if self._filters:
            self._filters[0].add(message)
        else:
            self.signalMessage(message)

    def addFilter(self, message_filter: Any) -> None:
        """Append ``message_filter``; its output becomes the chain's output."""
        if self._filters:
            last = self._filters[-1]
            last.callbacks.pop(self._output_conns[-1])
            self._output_conns[-1] = last.registerCallback(message_filter.add)
        self._filters.append(message_filter)
        self._output_conns.append(message_filter.registerCallback(self.signalMessage))

    def getFilter(self, index: int) -> Any:
        """Return the filter added at position ``index``."""
        return self._filters[index]


class TimeSynchronizer(SimpleFilter):
    """Signals one message per input when all inputs hold the exact same stamp.

    The callback receives ``msg_1, ..., msg_n`` in the order of ``fs``.
    """

    def __init__(self, fs: Sequence[SimpleFilter], queue_size: int) -> None:
        """Connect to the inputs ``fs``, keeping up to ``queue_size`` stamps per input."""
        SimpleFilter.__init__(self)
        self.connectInput(fs)
        self.queue_size = queue_size
        self.lock = threading.Lock()

    def connectInput(self, fs: Sequence[SimpleFilter]) -> None:
        """Take input from the filters ``fs``, one queue per input."""
        self.queues: list[dict[int, Any]] = [{} for _ in fs]
        self.input_connections = [
            f.registerCallback(self.add, queue, index)
            for index, (f, queue) in enumerate(zip(fs, self.queues))
        ]

    @staticmethod
    def _trim(queue: dict[int, Any], queue_size: int) -> None:
        while len(queue) > queue_size:
            del queue[min(queue)]

    def add(self, msg: Any, my_queue: dict[int, Any], my_queue_index: Optional[int] = None):
        """Queue ``msg`` under its stamp and signal the earliest complete set, if any."""
        with self.lock:
            stamp_ns = _stamp_to_ns(msg.header.stamp)
            my_queue[stamp_ns] = msg
            self._trim(my_queue, self.queue_size)
            common = set(self.queues[0]).intersection(*self.queues[1:])
            if not common:
                return
            signaled_ns = min(common)
            msgs = [queue.pop(signaled_ns) for queue in self.queues]
            # Matches the C++ policy: nothing older than a signalled set can complete one.
            for queue in self.queues:
                for key in [key for key in queue if key < signaled_ns]:
                    del queue[key]
            self.signalMessage(*msgs)


class ApproximateTimeSynchronizer(TimeSynchronizer):
    """Signals one message per input when their stamps lie within ``slop`` seconds."""

    def __init__(
        self,
        fs: Sequence[SimpleFilter],
        queue_size: int,
        slop: float,
        queue_offset: Union[Sequence[int], bool] = False,
        allow_headerless: bool = False,
        sync_arrival_time: bool = False,
    ) -> None:
        """Connect to the inputs ``fs``.

        Args:
            fs: Input filters; the callback receives one message of each, in order.
            queue_size: Stamps kept per input.
            slop: Largest stamp spread of a set, in seconds (a set's spread must be
                strictly smaller).
            queue_offset: Per-input offsets in nanoseconds subtracted from the stamps,
                or False for none.
            allow_headerless: Stamp headerless messages with the current ROS time
                instead of dropping them.
            sync_arrival_time: Stamp every message with the current ROS time at
                arrival, ignoring its header.
        """
        TimeSynchronizer.__init__(self, fs, queue_size)
        self.slop = Duration(seconds=slop)
        self.allow_headerless = allow_headerless
        self.queue_offset = queue_offset
        self.sync_arrival_time = sync_arrival_time

    def add(self, msg: Any, my_queue: dict[int, Any], my_queue_index: Optional[int] = None):
        """Queue ``msg`` and signal the first set around it within ``slop``, if any."""
        if self.sync_arrival_time or not _has_stamp(msg):
            if not (self.allow_headerless or self.sync_arrival_time):
                rclpy.logging.get_logger("message_filters_approx").warning(
                    _HEADERLESS_WARNING, once=True
                )
                return
            stamp_ns = ROSClock().now().nanoseconds
        else:
            stamp_ns = _stamp_to_ns(msg.header.stamp)
        key_ns = stamp_ns
        if my_queue_index is not None and self.queue_offset:
            key_ns -= self.queue_offset[my_queue_index]
        slop_ns = self.slop.nanoseconds
        with self.lock:
            my_queue[key_ns] = msg
            self._trim(my_queue, self.queue_size)
            if my_queue_index is None:
                other_queues = self.queues
            else:
                other_queues = self.queues[:my_queue_index] + self.queues[my_queue_index + 1 :]
            candidates = []
            for queue in other_queues:
                near = [key for key in queue if abs(key - key_ns) <= slop_ns]
                if not near:
                    return
                near.sort(key=lambda key: abs(key - key_ns))  # stable: arrival order on ties
                candidates.append(near)
            for combo in itertools.product(*candidates):
                keys = list(combo)
                if my_queue_index is not None:
                    keys.insert(my_queue_index, stamp_ns)
                if max(keys) - min(keys) >= slop_ns:
                    continue
                if any(key not in queue for queue, key in zip(self.queues, keys)):
                    continue
                msgs = [queue.pop(key) for queue, key in zip(self.queues, keys)]
                self.signalMessage(*msgs)
                return
