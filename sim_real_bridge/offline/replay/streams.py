"""A run's recorded streams, decoded into the columns replay hands the engine.

Every stream but the two sides' ``joint_states`` is optional: a stream that is off,
not in the recording or empty is left out, and why is kept (:attr:`RunStreams.absent`)
for the summary's list of analyses that ran and were skipped. The topics of a run are
read in one pass over its bags.

JointState topics are read as columns when every message names the same joints with
one value each; a topic whose messages disagree (empty arrays, repeated names, a joint
missing now and then, a value count that does not match the names) is handed over in
runs of messages that agree, so the engine refuses and counts the bad ones by reason as
the live monitor does, and analyses the rest. A joint whose position is never finite
in the whole recording (a joint without an encoder) is left out with a warning, so the
side's other joints are analysed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import is_
from typing import Any

import numpy as np

from sim_real_bridge.core.config import EngineConfig
from sim_real_bridge.core.intake import IntakeConfig, check_rows
from sim_real_bridge.errors import BagError
from sim_real_bridge.offline.bags import JOINT_STATE, NS_PER_S, columns_from_raw
from sim_real_bridge.offline.bags.cdr_layout import DecodeError, LayoutGroup, decode_groups
from sim_real_bridge.offline.replay.topics import missing_joint_states, run_topics
from sim_real_bridge.offline.replay_config import SIDES, ReplayConfig
from sim_real_bridge.offline.replay_engine import CommandStream, JointStream, PoseStream, Stream, WrenchStream

#: The message type each stream must have (checked before anything is read).
STREAM_TYPES = {"joint_states": JOINT_STATE, "wrench": "geometry_msgs/msg/WrenchStamped",
                "ee_pose": "geometry_msgs/msg/PoseStamped", "object_pose": "geometry_msgs/msg/PoseStamped",
                "joint_trajectory": "trajectory_msgs/msg/JointTrajectory"}
#: Stream order per side, as the live node subscribes.
STREAM_RANK = {"joint_states": 0, "wrench": 1, "ee_pose": 2, "object_pose": 3, "joint_trajectory": 4}
#: Receive-time lag spread (p99 above the minimum) beyond which a recording is suspect.
LAG_WARNING_S = 0.1
_JOINT_FIELDS = ("position", "velocity", "effort")


@dataclass
class RunStreams:
    """What :func:`read_run_streams` read.

    Attributes:
        streams: the engine's input streams, per side in the live node's order.
        wanted: (side, stream) -> topic of every stream read.
        absent: (side, stream) -> why it was not read ("off", "... not in the recording").
        extra: messages of the truth and tick-time topics the recording holds.
        warnings: signs of a recorder that fell behind, explicitly named topics missing.
    """

    streams: list[Stream] = field(default_factory=list)
    wanted: dict[tuple[str, str], str] = field(default_factory=dict)
    absent: dict[tuple[str, str], str] = field(default_factory=dict)
    extra: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _select(bags: Any, config: ReplayConfig, out: RunStreams) -> None:
    """Fill ``out.wanted`` and ``out.absent`` from the recording's topics."""
    topics = bags.topics()
    labels = ", ".join(bags.labels)
    for side, chosen in run_topics(config, topics, labels).items():
        for stream, topic in chosen.items():
            if stream == "joint_trajectory" and side == "real":
                continue  # only the sim side's copy of the commands starts the run clock
            if not topic:
                out.absent[(side, stream)] = "off"
            elif topic not in topics:
                if stream == "joint_states":
                    raise missing_joint_states(bags, side, topic, labels)
                out.absent[(side, stream)] = f"{topic} not in the recording"
                if f"{side}_topics.{stream}" in config.explicit:
                    out.warnings.append(f"topic {topic} ({side} {stream}) not in bag(s) {labels}; analysed without it")
            elif topics[topic].message_count == 0 and stream != "joint_states":
                out.absent[(side, stream)] = f"{topic} has no messages"
            else:
                out.wanted[(side, stream)] = topic


def _extra_topics(bags: Any, config: ReplayConfig) -> list[str]:
    """The run-level topics replay reads besides the streams (truth, tick times) that the bag holds."""
    topics = bags.topics()
    return [t for t in (config.injections_topic, config.ticks_topic)
            if t and t in topics and topics[t].message_count > 0]


def _parse_extra(bags: Any, topic: str, raw: Any) -> list[tuple[int, Any]]:
    """(log time, message) of a truth or tick-time topic; parsed straight from the bytes
    where a direct parser exists (rosbags' deserializer makes an object per part)."""
    from sim_real_bridge.offline.bag_io import INJECTION_ARRAY, TIME, injection_array_parser, time_parser

    msgtype = bags.topics()[topic].msgtype
    make = {INJECTION_ARRAY: injection_array_parser, TIME: time_parser}.get(msgtype)
    parse = make(bags.typestore) if make is not None else None
    got = []
    for i, stamp in enumerate(raw.recv_ns.tolist()):
        data = raw.payload(i)
        parsed = None if parse is None else parse(data)
        got.append((stamp, bags.deserialize(data, msgtype, topic) if parsed is None else parsed))
    return got


def read_run_streams(bags: Any, config: ReplayConfig, start_ns: int | None = None,
                     stop_ns: int | None = None) -> RunStreams:
    """Decode every stream of a run, in one pass over its bags.

    Raises:
        BagError: a side's joint_states topic is missing (the message proposes pairs)
            or empty in the window, a topic has another type than its stream's, or a
            message cannot be decoded; the message names the bag(s) and topic.
    """
    out = RunStreams()
    _select(bags, config, out)
    extra_topics = _extra_topics(bags, config)
    topics = bags.topics()
    for (_, stream), topic in out.wanted.items():  # one topic may serve two streams: check each
        bags.check_types({topic: STREAM_TYPES[stream]})
    bags.check_types({topic: topics[topic].msgtype for topic in extra_topics})
    raw = bags.read_raw([*out.wanted.values(), *extra_topics], start_ns, stop_ns)
    frames_needed = {k for k, v in config.intake.expected_frames.items() if v}
    gap_s = float(config.engine.get("segment_gap_s", EngineConfig.segment_gap_s))
    for (side, stream), topic in list(out.wanted.items()):
        where = f"topic {topic} in bag(s) {', '.join(topics[topic].bags)}"
        if not len(raw[topic]):
            window = "" if start_ns is None and stop_ns is None else f" in window [{start_ns}, {stop_ns}) ns"
            if stream == "joint_states":
                raise BagError(f"topic {topic} of bag(s) {', '.join(topics[topic].bags)} has no messages{window}")
            del out.wanted[(side, stream)]
            out.absent[(side, stream)] = f"{topic} has no messages{window}"
            continue
        if stream == "joint_trajectory":
            out.streams.append(CommandStream(side, raw[topic].recv_ns.copy()))
        elif stream == "joint_states":
            parts, stamp_ns = joint_streams(raw[topic], bags.typestore, where, side)
            out.streams.extend(parts)
            out.warnings.extend(recording_warnings(topic, stamp_ns, raw[topic].recv_ns, config.intake, gap_s))
        else:
            col = columns_from_raw(raw[topic], STREAM_TYPES[stream], bags.typestore, where)
            frames: Any = col.frame_id
            kind = "wrench" if stream == "wrench" else "pose"
            if kind in frames_needed:
                frames = [m.header.frame_id for _, m in bags.iter_messages(topic, start_ns, stop_ns)]
            if stream == "wrench":
                out.warnings.extend(recording_warnings(topic, col.stamp_ns, col.recv_ns, config.intake, gap_s))
                out.streams.append(WrenchStream(side, col.recv_ns, col.stamp_ns, frames, col.force_n, col.torque_nm))
            else:
                out.streams.append(PoseStream(side, stream, col.recv_ns, col.stamp_ns, frames, col.position_m,
                                              col.orientation_wxyz))
    out.extra = {topic: _parse_extra(bags, topic, raw[topic]) for topic in extra_topics}
    for side in SIDES:
        out.warnings.extend(_drop_dead_joints(out.streams, side, out.wanted[(side, "joint_states")]))
    out.streams.sort(key=_stream_rank)
    return out


def _stream_rank(stream: Stream) -> tuple[int, int]:
    if isinstance(stream, CommandStream):
        name = "joint_trajectory"
    elif isinstance(stream, PoseStream):
        name = stream.stream
    else:
        name = "joint_states" if isinstance(stream, JointStream) else "wrench"
    return SIDES.index(stream.side), STREAM_RANK[name]


def _read_streams(bags: Any, config: ReplayConfig, start_ns: int | None, stop_ns: int | None,
                  warnings: list[str], extra: dict[str, list[tuple[int, Any]]] | None = None,
                  ) -> tuple[list[Stream], dict[tuple[str, str], str]]:
    """:func:`read_run_streams` as (streams, wanted), warnings and extra messages added to the given ones."""
    read = read_run_streams(bags, config, start_ns, stop_ns)
    warnings.extend(read.warnings)
    if extra is not None:
        extra.update(read.extra)
    return read.streams, read.wanted


# --------------------------------------------------------------------------- joint states
def joint_streams(raw: Any, typestore: Any, where: str, side: str) -> tuple[list[JointStream], np.ndarray]:
    """A JointState topic as engine streams (see the module docstring), and its stamps.

    Raises:
        BagError: a message cannot be decoded (named by ``where`` and its log time).
    """
    try:
        col = columns_from_raw(raw, JOINT_STATE, typestore, where)
    except BagError as error:
        try:
            groups = decode_groups(raw, JOINT_STATE, typestore)
        except DecodeError:
            raise error from None
        return _joint_runs(raw.recv_ns, groups, side)
    return [JointStream(side, col.recv_ns, col.stamp_ns, col.names, col.position, col.velocity, col.effort)], \
        col.stamp_ns


def _group_key(group: LayoutGroup) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """What messages must share to be one run: their names and value counts."""
    return tuple(group.layout.string_list("name")), tuple(group.layout.counts[f] for f in _JOINT_FIELDS)


def _key_arrays(groups: Sequence[LayoutGroup]) -> tuple[np.ndarray, list[np.ndarray]]:
    """(rows ascending, [position, velocity, effort] with one row each) of groups sharing a key."""
    rows = np.sort(np.concatenate([g.index for g in groups]))
    _, counts = _group_key(groups[0])
    fields = []
    for name, count in zip(_JOINT_FIELDS, counts, strict=True):
        values = np.full((rows.size, count), np.nan)
        if count:
            for group in groups:
                values[np.searchsorted(rows, group.index)] = group.values[name].reshape(group.index.size, count)
        fields.append(values)
    return rows, fields


def _joint_runs(recv_ns: np.ndarray, groups: Sequence[LayoutGroup], side: str
                ) -> tuple[list[JointStream], np.ndarray]:
    """Consecutive messages with the same names and value counts, one stream each."""
    count = int(recv_ns.size)
    keys: dict[tuple[Any, ...], list[LayoutGroup]] = {}
    row_key = np.empty(count, dtype=np.intp)
    stamp_ns = np.empty(count, dtype=np.int64)
    for group in groups:
        members = keys.setdefault(_group_key(group), [])
        members.append(group)
        row_key[group.index] = list(keys).index(_group_key(group))
        stamp_ns[group.index] = (group.values["header.stamp.sec"].astype(np.int64) * NS_PER_S
                                 + group.values["header.stamp.nanosec"])
    arrays = [(key[0], *_key_arrays(members)) for key, members in keys.items()]
    starts = np.flatnonzero(np.r_[True, row_key[1:] != row_key[:-1]])
    ends = np.r_[starts[1:], count]
    streams = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        names, rows, (q, qd, effort) = arrays[row_key[start]]
        lo = int(np.searchsorted(rows, start))
        part = slice(lo, lo + end - start)
        streams.append(JointStream(side, recv_ns[start:end], stamp_ns[start:end], names, q[part],
                                   qd[part] if qd.shape[1] else None, effort[part] if effort.shape[1] else None))
    return streams, stamp_ns


def _drop_dead_joints(streams: list[Stream], side: str, topic: str) -> list[str]:
    """Leave out the joints of a side whose position is never finite (a joint without an
    encoder, a gripper reporting NaN), so the others are analysed; returns the warning.

    A side whose every joint is dead keeps them all: the engine then refuses its rows
    as non-finite and the error counts them.
    """
    parts = [(k, s) for k, s in enumerate(streams) if isinstance(s, JointStream) and s.side == side]
    names = list(dict.fromkeys(name for _, s in parts for name in s.names))
    alive = {name for _, s in parts if s.position.shape[1] == len(s.names)
             for name, finite in zip(s.names, np.isfinite(s.position).any(axis=0).tolist(), strict=True) if finite}
    dead = [name for name in names if name not in alive]
    if not dead or len(dead) == len(names):
        return []
    for k, s in parts:
        if s.position.shape[1] != len(s.names):
            continue  # refused by the engine as it is (length_mismatch)
        keep = [j for j, name in enumerate(s.names) if name in alive]
        columns = [None if v is None else v[:, keep] for v in (s.velocity, s.effort)]
        streams[k] = replace(s, names=tuple(s.names[j] for j in keep), position=s.position[:, keep],
                             velocity=columns[0], effort=columns[1])
    return [f"{topic}: joint(s) {', '.join(dead)} never have a finite position: left out of the analysis"]


# --------------------------------------------------------------------------- checks and run-level topics
def recording_warnings(topic: str, stamp_ns: np.ndarray, recv_ns: np.ndarray,
                       intake: IntakeConfig | None = None, segment_gap_s: float = math.inf) -> list[str]:
    """Signs that the recorder fell behind: receive lag that swings, stamps missing.

    A bag whose log times lag the stamps by a varying amount, or that misses samples,
    holds another stream than the live monitor received, so replay cannot repeat it.
    Stamps the intake refuses (zero, far in the future) are counted as refused, not
    taken for lag or gaps: one stamp a year ahead is not a year of lag.
    """
    out: list[str] = []
    stamp_ns, recv_ns = np.asarray(stamp_ns), np.asarray(recv_ns)
    if intake is not None and len(stamp_ns):
        keep = check_rows(intake, "joint_states", stamp_ns, recv_ns, np.zeros(len(stamp_ns), dtype=bool)).keep
        stamp_ns, recv_ns = stamp_ns[keep], recv_ns[keep]
    if len(stamp_ns) < 3:
        return out
    lag_s = (recv_ns - stamp_ns) * 1e-9
    spread = float(np.percentile(lag_s, 99) - lag_s.min())
    if spread > LAG_WARNING_S:
        out.append(f"{topic}: receive lag varies by {spread:.3f} s (p99 above min): the recorder fell behind")
    steps = np.diff(stamp_ns if np.all(stamp_ns[1:] >= stamp_ns[:-1]) else np.sort(stamp_ns))
    # a gap long enough to split the run into segments is no missing samples: the log paused
    steps = steps[(steps > 0) & (steps < segment_gap_s * 1e9)]
    if steps.size:
        period = float(np.median(steps))
        missing = int(np.sum(np.maximum(0, np.round(steps / period) - 1)))
        if missing > 0.01 * len(stamp_ns):
            out.append(f"{topic}: about {missing} samples missing from {len(stamp_ns)} (stamp gaps): "
                       "dropped by the recorder or never sent")
    return out


def _read_truth(config: ReplayConfig, extra: Mapping[str, list[tuple[int, Any]]]) -> Any:
    """(TruthCollector, scenario name) from the injections topic read with the streams."""
    from sim_real_bridge.evaluation.summary import TruthCollector

    topic = config.injections_topic
    if not topic or topic not in extra:
        return None, None
    collector = TruthCollector()
    scenario = None
    previous: list[Any] = []
    for _, msg in extra[topic]:
        injections = msg.injections
        if injections and len(injections) == len(previous) and all(map(is_, injections, previous)):
            # The very objects of the message before (the direct parser shares repeats):
            # adding them again would change nothing but the elapsed time.
            collector.elapsed_s = max(collector.elapsed_s, float(msg.elapsed_s))
        else:
            collector.add(msg.elapsed_s, injections)
        previous = injections
        scenario = str(msg.scenario) or scenario
    return collector, scenario


def _read_ticks(config: ReplayConfig, extra: Mapping[str, list[tuple[int, Any]]]) -> np.ndarray | None:
    """The live monitor's tick times, when the bag recorded them (``demo --record``)."""
    topic = config.ticks_topic
    if not topic or topic not in extra:
        return None
    times = np.array([log_ns for log_ns, _ in extra[topic]], dtype=np.int64)
    return times if times.size else None
