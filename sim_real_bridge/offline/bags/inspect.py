"""What a recording holds: topics, types, counts, rates, spans, and the sim/real pairs
replay would use (``sim-real-bridge inspect BAG``)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sim_real_bridge.errors import BagError
from sim_real_bridge.offline.bags.cdr_layout import LayoutError, walk
from sim_real_bridge.offline.bags.columns import JOINT_STATE, NS_PER_S
from sim_real_bridge.offline.bags.open import BagSet, open_bags
from sim_real_bridge.offline.bags.raw import CDR, RawMessages
from sim_real_bridge.offline.pairing import PairProposal, propose_pairs

#: The topics replay reads when no config or flag names others.
DEFAULT_PAIR = ("/sim/joint_states", "/real/joint_states")


@dataclass(frozen=True)
class TopicStats:
    """One topic of a recording.

    Attributes:
        first_ns, last_ns: log times of its first and last message (None without messages).
        joints: the joint names of its first message (JointState topics), else None.
    """

    topic: str
    msgtype: str
    encoding: str
    message_count: int
    first_ns: int | None
    last_ns: int | None
    joints: tuple[str, ...] | None = None

    @property
    def duration_s(self) -> float:
        return 0.0 if self.first_ns is None or self.last_ns is None else (self.last_ns - self.first_ns) / NS_PER_S

    @property
    def rate_hz(self) -> float | None:
        """Messages per second over its span (None for fewer than two messages)."""
        if self.message_count < 2 or not self.duration_s:
            return None
        return (self.message_count - 1) / self.duration_s


@dataclass(frozen=True)
class Inspection:
    """A recording's topics and the sim/real pairs replay would use.

    Attributes:
        default_pair: :data:`DEFAULT_PAIR` when the recording has both topics, else None.
        proposals: JointState pairs whose joints match, best first.
        problems: topic -> why its joint names could not be read.
    """

    bags: list[str]
    topics: list[TopicStats]
    default_pair: tuple[str, str] | None
    proposals: list[PairProposal]
    problems: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, with each topic's duration and rate."""
        return {
            "bags": self.bags,
            "topics": [{**asdict(t), "joints": list(t.joints) if t.joints is not None else None,
                        "duration_s": t.duration_s, "rate_hz": t.rate_hz} for t in self.topics],
            "default_pair": list(self.default_pair) if self.default_pair else None,
            "proposals": [{"sim_topic": p.sim_topic, "real_topic": p.real_topic, "name_map": p.name_map,
                           "flags": p.flags()} for p in self.proposals],
            "problems": self.problems,
        }


def first_joint_names(bags: BagSet, topics: Sequence[str], raw: Mapping[str, RawMessages] | None = None
                      ) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """(topic -> the joint names of its first message, topic -> why they could not be read),
    for JointState ``topics`` (their ``raw`` messages when read already)."""
    names: dict[str, tuple[str, ...]] = {}
    problems: dict[str, str] = {}
    raw = bags.read_raw(topics) if raw is None else raw
    for topic in topics:
        if not len(raw[topic]):
            continue
        try:
            layout = walk(raw[topic].payload(0), JOINT_STATE, bags.typestore)
            names[topic] = tuple(layout.string_list("name"))
        except LayoutError as error:
            problems[topic] = f"cannot read its first message: {error}"
    return names, problems


def inspect_bags(paths: Sequence[Path | str]) -> Inspection:
    """Open ``paths`` as one recording and describe it.

    Raises:
        BagError: a path is not a readable bag.
    """
    with open_bags(list(paths)) as bags:
        infos = bags.topics()
        raw = bags.read_raw(list(infos))
        joint_topics = [t for t, i in infos.items() if i.msgtype == JOINT_STATE and i.encoding == CDR]
        problems: dict[str, str] = {}
        names: dict[str, tuple[str, ...]] = {}
        if joint_topics:
            try:
                names, problems = first_joint_names(bags, joint_topics, raw)
            except BagError as error:  # e.g. an unknown type: the listing stays useful
                problems = {t: str(error) for t in joint_topics}
        labels = bags.labels
    stats = []
    for topic, info in sorted(infos.items()):
        times = raw[topic].recv_ns
        stats.append(TopicStats(topic, info.msgtype, info.encoding, len(times),
                                int(times[0]) if len(times) else None, int(times[-1]) if len(times) else None,
                                names.get(topic)))
    for topic, info in infos.items():
        if info.encoding != CDR:
            problems[topic] = f"messages are {info.encoding}, not ROS 2 CDR: replay cannot read them"
    default = DEFAULT_PAIR if all(t in names for t in DEFAULT_PAIR) else None
    proposals = [p for p in propose_pairs(infos, names) if (p.sim_topic, p.real_topic) != default]
    return Inspection(labels, stats, default, proposals, problems)


def _joints_text(joints: tuple[str, ...] | None) -> str:
    if joints is None:
        return ""
    if len(joints) <= 3:
        return f"{len(joints)}: {', '.join(joints)}"
    return f"{len(joints)}: {joints[0]} .. {joints[-1]}"


def format_inspection(inspection: Inspection) -> str:
    """The inspection as the ``inspect`` command prints it."""
    rows = [("topic", "type", "encoding", "count", "duration_s", "rate_hz", "joints")]
    for t in inspection.topics:
        rate = f"{t.rate_hz:.1f}" if t.rate_hz is not None else "-"
        rows.append((t.topic, t.msgtype, t.encoding, str(t.message_count), f"{t.duration_s:.2f}", rate,
                     _joints_text(t.joints)))
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines = [f"bag(s): {', '.join(inspection.bags)}"]
    lines += ["  ".join(cell.rjust(w) if k in (3, 4, 5) else cell.ljust(w)
                        for k, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip() for row in rows]
    lines.append("")
    bags = " ".join(shlex.quote(b) for b in inspection.bags)
    if inspection.default_pair is not None:
        lines.append(f"replay uses {inspection.default_pair[0]} (sim) and {inspection.default_pair[1]} (real): "
                     f"sim-real-bridge replay {bags} --out OUT")
    elif not inspection.proposals:
        lines.append(f"no sim/real pair: {DEFAULT_PAIR[0]} and {DEFAULT_PAIR[1]} are not both here, and no two "
                     "JointState topics share their joint names")
    else:
        lines.append(f"{DEFAULT_PAIR[0]} and {DEFAULT_PAIR[1]} are not both here; pairs of JointState topics whose "
                     "joints match, best first:")
    if inspection.default_pair is not None and inspection.proposals:
        lines.append("other pairs of JointState topics whose joints match:")
    for rank, proposal in enumerate(inspection.proposals, 1):
        renamed = sum(1 for s, r in proposal.name_map.items() if s != r)
        how = f", names differ by a prefix ({renamed} renamed)" if renamed else ""
        lines.append(f"  {rank}. sim {proposal.sim_topic}, real {proposal.real_topic}: "
                     f"{len(proposal.name_map)} joints match{how}")
        lines.append(f"     sim-real-bridge replay {bags} {proposal.flags()} --out OUT")
    lines += [f"topic {topic}: {problem}" for topic, problem in sorted(inspection.problems.items())]
    return "\n".join(lines)
