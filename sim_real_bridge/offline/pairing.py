"""Which two JointState topics of a recording are the reference (sim) and real sides.

Recordings made by other tools name their topics and joints their own way: a
teleoperation rig records ``/leader/joint_states`` with ``leader_joint1..`` and
``/follower/joint_states`` with ``follower_joint1..``. Two topics pair when their joint
names match, exactly or after stripping each topic's common prefix (cut at a separator:
``leader_``, ``arm/``). :func:`propose_pairs` ranks every such pair; replay and
``sim-real-bridge inspect`` show them with the flags that select them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

JOINT_STATE = "sensor_msgs/msg/JointState"
#: Characters a stripped prefix ends with.
SEPARATORS = "_/.:-"
#: Words in a topic or joint name that mark the reference side (a leader arm, a simulator).
REFERENCE_WORDS = frozenset({"sim", "simulation", "leader", "master", "reference", "ref", "command", "commanded",
                             "target", "desired", "teleop", "twin"})
#: Words that mark the real side (the follower arm, the robot's own measurements).
REAL_WORDS = frozenset({"real", "follower", "puppet", "robot", "measured", "hardware", "hw", "feedback", "physical"})


class PairProposal(NamedTuple):
    """A proposed (sim, real) pair of JointState topics.

    Attributes:
        sim_topic: the reference side's topic (a simulator, or a teleoperation leader).
        real_topic: the real side's topic.
        name_map: sim joint name -> real joint name, for every joint the two share.
    """

    sim_topic: str
    real_topic: str
    name_map: dict[str, str]

    def flags(self) -> str:
        """The replay flags that select this pair."""
        return f"--sim {self.sim_topic} --real {self.real_topic}"

    def unmatched(self, joint_names_by_topic: Mapping[str, Sequence[str]]) -> tuple[list[str], list[str]]:
        """(sim joints, real joints) this pair leaves out."""
        sim = [n for n in joint_names_by_topic[self.sim_topic] if n not in self.name_map]
        real_used = set(self.name_map.values())
        return sim, [n for n in joint_names_by_topic[self.real_topic] if n not in real_used]


def strip_common_prefix(names: Sequence[str]) -> tuple[str, list[str]]:
    """(prefix, the names without it): the longest prefix all names share that ends with
    a separator and leaves every name non-empty ('' when there is none)."""
    if not names:
        return "", []
    common = os.path.commonprefix(list(names))
    cut = max(common.rfind(sep) for sep in SEPARATORS) + 1
    prefix = common[:cut]
    if any(len(name) == len(prefix) for name in names):
        prefix = ""
    return prefix, [name[len(prefix):] for name in names]


def match_joints(sim_names: Sequence[str], real_names: Sequence[str]) -> dict[str, str]:
    """sim joint name -> real joint name for the joints two topics share: by equal names,
    or by equal names once each side's common prefix is stripped, whichever matches more."""
    exact = {name: name for name in sim_names if name in set(real_names)}
    _, sim_rest = strip_common_prefix(sim_names)
    _, real_rest = strip_common_prefix(real_names)
    real_by_rest = {rest: name for rest, name in zip(real_rest, real_names, strict=True)}
    stripped = {name: real_by_rest[rest] for rest, name in zip(sim_rest, sim_names, strict=True)
                if rest in real_by_rest}
    if len(set(stripped.values())) != len(stripped):  # prefixes stripped into duplicates: no mapping
        stripped = {}
    return exact if len(exact) >= len(stripped) else stripped


def _words(text: str) -> set[str]:
    return {word for word in re.split(r"[^a-z0-9]+", text.lower()) if word}


def _reference_lean(topic: str, names: Sequence[str]) -> int:
    """How much a topic looks like the reference side (positive) or the real side (negative)."""
    prefix, _ = strip_common_prefix(names)
    words = _words(topic) | _words(prefix)
    return len(words & REFERENCE_WORDS) - len(words & REAL_WORDS)


def propose_pairs(topic_infos: Mapping[str, Any], joint_names_by_topic: Mapping[str, Sequence[str]]
                  ) -> list[PairProposal]:
    """Every pair of JointState topics whose joints match, best first.

    Args:
        topic_infos: topic -> its info (``msgtype`` and ``message_count`` attributes,
            as :meth:`BagSet.topics` gives them).
        joint_names_by_topic: the joint names of each JointState topic's messages.

    A pair needs at least half the joints of its smaller side to match. Pairs that
    match more joints come first, then exact name matches, then pairs whose topic or
    joint names say which side is which (sim/leader/master vs real/follower/puppet);
    within a pair, that lean decides the sim side (else the topic sorted first).
    """
    topics = sorted(t for t, info in topic_infos.items()
                    if info.msgtype == JOINT_STATE and info.message_count > 0 and joint_names_by_topic.get(t))
    ranked: list[tuple[tuple[Any, ...], PairProposal]] = []
    for i, first in enumerate(topics):
        for second in topics[i + 1:]:
            lean = _reference_lean(first, joint_names_by_topic[first]) - _reference_lean(
                second, joint_names_by_topic[second])
            sim, real = (second, first) if lean < 0 else (first, second)
            sim_names, real_names = joint_names_by_topic[sim], joint_names_by_topic[real]
            name_map = match_joints(sim_names, real_names)
            if not name_map or 2 * len(name_map) < min(len(sim_names), len(real_names)):
                continue
            exact = all(s == r for s, r in name_map.items())
            key = (-len(name_map), not exact, lean == 0, sim, real)
            ranked.append((key, PairProposal(sim, real, name_map)))
    return [proposal for _, proposal in sorted(ranked, key=lambda item: item[0])]
