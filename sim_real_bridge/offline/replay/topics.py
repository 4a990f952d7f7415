"""Which topic of a recording each stream of each side reads.

By default the live graph's names (``/sim/joint_states``, ``/real/wrench`` ...), or
those of ``--config``. ``--sim`` and ``--real`` name a side without a config file:

- a namespace (``--sim /leader``): the side's streams are ``/leader/joint_states``,
  ``/leader/wrench`` and so on;
- a topic of the recording (``--sim /leader/joint_states``): that topic is the side's
  joint_states, and its other streams are looked for beside it (``/leader/wrench`` ...).

Topics a ``--config`` file names stay as named; only ``joint_states`` follows the flag.
When a side's joint_states topic is not in the recording, the error proposes the
JointState topics whose joints match (:func:`~sim_real_bridge.offline.pairing.propose_pairs`)
with the flags and config keys that select them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from sim_real_bridge.errors import BagError
from sim_real_bridge.offline.replay_config import SIDES, STREAMS, ReplayConfig

JOINT_STATE = "sensor_msgs/msg/JointState"
#: Pairs a missing-topic error proposes at most.
MAX_PROPOSALS = 3


def _namespace_of(topic: str) -> str:
    """``/leader/joint_states`` -> ``/leader``; ``/joint_states`` -> ``""``."""
    return topic.rstrip("/").rsplit("/", 1)[0]


def side_topics(config: ReplayConfig, side: str, available: Collection[str], labels: str) -> dict[str, str]:
    """stream -> topic of one side ("" for a stream that is off).

    Args:
        config: the replay config (``config.sides`` holds ``--sim``/``--real``).
        side: "sim" or "real".
        available: the recording's topics.
        labels: the bags, for error messages.

    Raises:
        BagError: ``--<side>`` names neither a topic nor a namespace with joint_states
            in the recording.
    """
    topics = dict(config.topics(side))
    chosen = config.sides.get(side, "")
    if not chosen:
        return topics
    if chosen in available:
        namespace, joint_states = _namespace_of(chosen), chosen
    else:
        namespace = chosen.rstrip("/")
        joint_states = f"{namespace}/joint_states"
        if joint_states not in available:
            joints = sorted(t for t in available if t.endswith("joint_states")) or sorted(available)
            raise BagError(f"--{side} {chosen}: bag(s) {labels} have neither a topic {chosen} nor "
                           f"{joint_states}; topics: {', '.join(joints) or 'none'}")
    for stream in STREAMS:
        if f"{side}_topics.{stream}" not in config.explicit:
            topics[stream] = f"{namespace}/{stream}"
    topics["joint_states"] = joint_states
    return topics


def run_topics(config: ReplayConfig, available: Collection[str], labels: str) -> dict[str, dict[str, str]]:
    """side -> stream -> topic for a recording (see :func:`side_topics`)."""
    return {side: side_topics(config, side, available, labels) for side in SIDES}


def _selection_hint(proposals: list[Any]) -> str:
    """What selects the pairs found (flags and config keys), or how to name one."""
    if not proposals:
        return ("no two JointState topics share their joint names: name the pair with --sim TOPIC --real TOPIC "
                "(or sim_topics.joint_states and real_topics.joint_states in a --config file)")
    shown = proposals[:MAX_PROPOSALS]
    first = shown[0]
    flags = " or ".join(p.flags() for p in shown)
    return (f"JointState topics whose joints match: {flags} "
            f"(or sim_topics.joint_states: {first.sim_topic} and real_topics.joint_states: {first.real_topic} "
            "in a --config file)")


def missing_joint_states(bags: Any, side: str, topic: str, labels: str) -> BagError:
    """The error for a side whose joint_states topic the recording lacks, proposing pairs.

    Reads the first message of each JointState topic (only on this error path).
    """
    from sim_real_bridge.offline.bags.inspect import first_joint_names
    from sim_real_bridge.offline.pairing import propose_pairs

    infos: Mapping[str, Any] = bags.topics()
    joint_topics = [t for t, i in infos.items()
                    if i.msgtype == JOINT_STATE and i.message_count > 0 and i.encoding == "cdr"]
    try:
        names, _ = first_joint_names(bags, joint_topics)
    except BagError:
        names = {}
    hint = _selection_hint(propose_pairs(infos, names))
    return BagError(f"topic {topic} ({side} joint_states) not found in bag(s) {labels}; {hint}; "
                    f"available: {', '.join(sorted(infos)) or 'none'}")
