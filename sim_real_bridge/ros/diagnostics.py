"""/diagnostics helpers shared by the nodes (diagnostic_updater is not installable here).

- :func:`make_status` builds a ``diagnostic_msgs/DiagnosticStatus`` from plain values.
- :class:`DiagnosticsPublisher` publishes a ``DiagnosticArray`` on ``/diagnostics`` at a
  fixed period, one status per registered provider.
- :class:`InputProblems` counts bad input by reason and topic and tells the caller the
  first time each (topic, reason) is seen, so the node logs it once.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from rclpy.qos import QoSProfile

#: Levels, as DiagnosticStatus uses them (bytes of length 1).
OK: bytes = DiagnosticStatus.OK
WARN: bytes = DiagnosticStatus.WARN
ERROR: bytes = DiagnosticStatus.ERROR
STALE: bytes = DiagnosticStatus.STALE

DIAGNOSTICS_TOPIC = "/diagnostics"
# Same depth and reliability as diagnostic_updater's publisher, so rqt_robot_monitor matches.
DIAGNOSTICS_QOS = QoSProfile(depth=10)


def _level_bytes(level: bytes | int) -> bytes:
    if isinstance(level, int):
        return bytes([level])
    return level


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def make_status(
    name: str,
    level: bytes | int,
    message: str,
    values: Mapping[str, Any] | None = None,
    hardware_id: str = "",
) -> DiagnosticStatus:
    """Build a DiagnosticStatus.

    Args:
        name: Status name, conventionally ``"<node>: <component>"``.
        level: ``OK``, ``WARN``, ``ERROR`` or ``STALE`` (bytes or int 0..3).
        message: One-line summary.
        values: Key-values, formatted with ``str`` (floats with 6 significant digits).
        hardware_id: Optional hardware identifier.

    Returns:
        The status message.
    """
    return DiagnosticStatus(
        level=_level_bytes(level),
        name=name,
        message=message,
        hardware_id=hardware_id,
        values=[KeyValue(key=str(k), value=_format(v)) for k, v in (values or {}).items()],
    )


class DiagnosticsPublisher:
    """Publishes the statuses of registered providers on /diagnostics periodically.

    Args:
        node: Node that owns the publisher and the timer.
        period_s: Publishing period (diagnostic_updater's default is 1 s).
        topic: Topic name; absolute by default so namespaced nodes share it.
    """

    def __init__(self, node: Node, period_s: float = 1.0, topic: str = DIAGNOSTICS_TOPIC):
        self._node = node
        self._providers: list[Callable[[], DiagnosticStatus]] = []
        self._publisher = node.create_publisher(DiagnosticArray, topic, DIAGNOSTICS_QOS)
        self._timer = node.create_timer(period_s, self.publish_now)

    def add(self, provider: Callable[[], DiagnosticStatus]) -> None:
        """Register a function returning one status; it is called at every publication."""
        self._providers.append(provider)

    def publish_now(self) -> DiagnosticArray:
        """Publish one array with every provider's status now; return it."""
        array = DiagnosticArray()
        array.header.stamp = self._node.get_clock().now().to_msg()
        array.status = [provider() for provider in self._providers]
        self._publisher.publish(array)
        return array


class InputProblems:
    """Counts bad input by reason (and topic) so nodes report it and log it once."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}

    def record(self, topic: str, reason: str) -> bool:
        """Count one problem; return True the first time this (topic, reason) is seen."""
        key = (topic, reason)
        first = key not in self._counts
        self._counts[key] = self._counts.get(key, 0) + 1
        return first

    def count(self, reason: str | None = None) -> int:
        """Total problems, or those with ``reason``, over every topic."""
        return sum(n for (_, r), n in self._counts.items() if reason is None or r == reason)

    def by_reason(self) -> dict[str, int]:
        """Counts summed over topics, keyed by reason."""
        totals: dict[str, int] = {}
        for (_, reason), n in self._counts.items():
            totals[reason] = totals.get(reason, 0) + n
        return totals

    def as_values(self, prefix: str = "bad_input.") -> dict[str, int]:
        """Counts as diagnostic key-values, ``<prefix><topic>.<reason>``."""
        items = sorted(self._counts.items())
        return {f"{prefix}{topic}.{reason}": n for (topic, reason), n in items}
