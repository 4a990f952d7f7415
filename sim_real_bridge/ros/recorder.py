"""Records topics to a rosbag2 MCAP bag with rosbags (no rosbag2 needed).

Used by ``sim-real-bridge demo --record DIR``: every topic the graph declares, plus
the stand-in's labels and the monitor's events, subscribed raw (serialized CDR, no
Python message built) and written with the receive time as log time, as
``ros2 bag record`` does.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from sim_real_bridge.capture.bag_writer import BagWriter
from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.errors import ConfigError
from sim_real_bridge.ros.graph import NodeSpec, TopicSpec
from sim_real_bridge.ros.monitor_inputs import SIDES, STREAMS
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

#: Topics recorded besides those the graph's nodes declare.
EXTRA_TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("/divergence/events", "sim_real_bridge/msg/GapEvent"),
    TopicSpec("/bridge/refusals", "sim_real_bridge/msg/GapEvent"),
)


#: Best effort matches every publisher; a deep queue rides out bursts.
RECORD_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT)


def message_class(type_name: str) -> type:
    """The rclpy message class of ``pkg/msg/Type``.

    Raises:
        ConfigError: The name is malformed or the type is not installed.
    """
    parts = type_name.split("/")
    if len(parts) != 3 or parts[1] != "msg":
        raise ConfigError(f"message type must look like pkg/msg/Type, got {type_name!r}")
    try:
        return getattr(importlib.import_module(f"{parts[0]}.msg"), parts[2])
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"message type {type_name} is not installed: {error}") from None


def _monitor_stream(name: str) -> bool:
    """Whether a remapped name is one of the monitor's ``<side>/<stream>`` inputs."""
    side, _, stream = name.partition("/")
    return side in SIDES and stream in STREAMS


def monitor_input_topics(specs: Sequence[NodeSpec]) -> frozenset[str]:
    """The topics the graph's divergence_monitor records in its own input recording (its
    :data:`~sim_real_bridge.ros.monitor_inputs.STREAMS`, remapped by the graph).

    Their copies in the demo's recording would be thrown away at the merge; recording
    them twice costs the demo process as much CPU as the monitor's own input thread.
    """
    return frozenset(
        target for spec in specs if spec.executable == "divergence_monitor"
        for source, target in spec.remappings if _monitor_stream(source)
    )


def recorded_topics(specs: Sequence[NodeSpec], skip: Collection[str] = ()) -> list[TopicSpec]:
    """Every topic the nodes publish, plus :data:`EXTRA_TOPICS`, once each, except ``skip``."""
    topics: dict[str, TopicSpec] = {}
    for topic in [t for spec in specs for t in spec.publishes] + list(EXTRA_TOPICS):
        if topic.name not in skip:
            topics.setdefault(topic.name, topic)
    return list(topics.values())


class TopicRecorder:
    """Raw subscriptions on ``node`` that write every message to one bag."""

    def __init__(self, node: Any, out_dir: Path, specs: Sequence[NodeSpec], skip: Collection[str] = ()) -> None:
        """Opens ``out_dir`` as a rosbag2 bag directory and subscribes.

        Args:
            node: The rclpy node to subscribe on.
            out_dir: Bag directory to create (must not exist).
            specs: The graph whose topics are recorded.
            skip: Topics not to record (another recording holds them).
        """
        self._node = node
        self._writer = BagWriter(Path(out_dir), build_typestore())
        self._writer.open()
        self._subscriptions = []
        for topic in recorded_topics(specs, skip):
            self._writer.add_topic(topic.name, topic.msg_type)
            self._subscriptions.append(
                node.create_subscription(
                    message_class(topic.msg_type), topic.name, self._writer_callback(topic.name),
                    RECORD_QOS, raw=True,
                )
            )

    def _writer_callback(self, topic: str):
        clock = self._node.get_clock()

        def write(data: bytes) -> None:
            self._writer.write(topic, clock.now().nanoseconds, data)

        return write

    @property
    def message_count(self) -> int:
        """Messages written so far."""
        return self._writer.message_count

    def close(self) -> Path:
        """Stops recording and finishes the bag; returns its path."""
        for subscription in self._subscriptions:
            self._node.destroy_subscription(subscription)
        self._subscriptions.clear()
        return self._writer.close()
