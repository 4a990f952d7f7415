"""Read rosbag2 bags (MCAP or sqlite3, split, one or several) into columns, with rosbags.

Fast paths decode whole batches of raw CDR with numpy instead of building one Python
message per sample: within a topic, messages of one serialized length almost always
share one layout (same frame id, joint names and array lengths), so the first
message of each length is parsed, checked against rosbags' own deserializer, and
every other message of that length is checked byte for byte against it outside
the stamp and float regions. Messages that do not match are deserialized one by
one with rosbags, so the columns are always equal to what rosbags decodes.

Column types: JointState, WrenchStamped, PoseStamped and Imu; every other type goes
through :meth:`BagSet.iter_messages`. Raw messages come from MCAP chunks scanned in
one loop (rosbags' index and decompression) or one SQL query per sqlite3 file;
anything else (per-message compression, unchunked MCAP) uses rosbags' reader.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.interfaces import Connection, MessageDefinitionFormat
from rosbags.rosbag2 import Reader
from rosbags.rosbag2.reader import DirectoryReader
from rosbags.rosbag2.storage_mcap import McapReader, decompress
from rosbags.rosbag2.storage_sqlite3 import Sqlite3Reader
from rosbags.typesys import get_types_from_idl, get_types_from_msg
from rosbags.typesys.store import Typestore

from sim_real_bridge.capture.typestore import build_typestore, new_typestore
from sim_real_bridge.errors import BagError

JOINT_STATE = "sensor_msgs/msg/JointState"
WRENCH_STAMPED = "geometry_msgs/msg/WrenchStamped"
POSE_STAMPED = "geometry_msgs/msg/PoseStamped"
IMU = "sensor_msgs/msg/Imu"
NS_PER_S = 1_000_000_000
_MCAP_MAGIC = b"\x89MCAP0\r\n"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_CDR_LE = b"\x00\x01"


@dataclass(frozen=True)
class JointStateColumns:
    """sensor_msgs/JointState as arrays, N messages of J joints, ordered by recv_ns.

    Attributes:
        stamp_ns: (N,) header stamps, int64 ns.
        recv_ns: (N,) bag log times, int64 ns.
        names: the J joint names; messages naming them in another order are reordered.
        position: (N, J); velocity, effort: (N, J), NaN where a message left them empty.
        slow_count: messages that needed per-message deserialization.
    """

    stamp_ns: np.ndarray
    recv_ns: np.ndarray
    names: tuple[str, ...]
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    slow_count: int = 0

    def __len__(self) -> int:
        return int(self.stamp_ns.shape[0])


@dataclass(frozen=True)
class WrenchColumns:
    """geometry_msgs/WrenchStamped as arrays: force_n (N, 3), torque_nm (N, 3)."""

    stamp_ns: np.ndarray
    recv_ns: np.ndarray
    frame_id: str
    force_n: np.ndarray
    torque_nm: np.ndarray
    slow_count: int = 0

    def __len__(self) -> int:
        return int(self.stamp_ns.shape[0])


@dataclass(frozen=True)
class PoseColumns:
    """geometry_msgs/PoseStamped as arrays: position_m (N, 3), orientation_wxyz (N, 4)."""

    stamp_ns: np.ndarray
    recv_ns: np.ndarray
    frame_id: str
    position_m: np.ndarray
    orientation_wxyz: np.ndarray
    slow_count: int = 0

    def __len__(self) -> int:
        return int(self.stamp_ns.shape[0])


@dataclass(frozen=True)
class ImuColumns:
    """sensor_msgs/Imu as arrays: orientation_wxyz (N, 4), angular_velocity_rad_s (N, 3),
    linear_acceleration_m_s2 (N, 3); covariances are dropped."""

    stamp_ns: np.ndarray
    recv_ns: np.ndarray
    frame_id: str
    orientation_wxyz: np.ndarray
    angular_velocity_rad_s: np.ndarray
    linear_acceleration_m_s2: np.ndarray
    slow_count: int = 0

    def __len__(self) -> int:
        return int(self.stamp_ns.shape[0])


Columns = JointStateColumns | WrenchColumns | PoseColumns | ImuColumns


@dataclass(frozen=True)
class TopicInfo:
    """One logical topic of a BagSet: its type, count and the bags holding it."""

    topic: str
    msgtype: str
    message_count: int
    bags: tuple[str, ...]


@dataclass
class _Source:
    """One opened bag: a rosbags Reader and its connections keyed by logical topic."""

    label: str
    reader: Reader
    by_topic: dict[str, list[Connection]]
    logical_of: dict[str, str]


def _sniff(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            head = handle.read(16)
    except OSError as exc:
        raise BagError(f"bag {path}: cannot open: {exc.strerror or exc}") from exc
    if head.startswith(_MCAP_MAGIC):
        return ".mcap"
    if head.startswith(_SQLITE_MAGIC):
        return ".db3"
    raise BagError(f"bag {path}: not a rosbag2 bag (neither an MCAP nor an sqlite3 file, nor a bag directory)")


def _expand(path: Path) -> list[Path]:
    """Return the rosbags-readable paths for one user path."""
    if not path.exists():
        raise BagError(f"bag {path} does not exist")
    if path.is_dir():
        if (path / "metadata.yaml").is_file():
            return [path]
        files = sorted(p for p in path.iterdir() if p.suffix in (".mcap", ".db3") and p.is_file())
        if not files:
            raise BagError(f"bag {path}: directory has no metadata.yaml and no .mcap or .db3 file")
        return files
    if path.suffix in (".mcap", ".db3"):
        return [path]
    if path.name == "metadata.yaml":
        return [path.parent]
    suffix = _sniff(path)
    raise BagError(f"bag {path}: looks like a {suffix} file; rename it to end in {suffix}")


def _register_bag_types(typestore: Typestore, connections: Iterable[Connection]) -> set[str]:
    """Register types the bag defines that the typestore lacks; return the still unknown."""
    unknown: set[str] = set()
    for conn in connections:
        if conn.msgtype in typestore.types:
            continue
        msgdef = conn.msgdef
        try:
            if msgdef.format == MessageDefinitionFormat.MSG and msgdef.data:
                typestore.register(get_types_from_msg(msgdef.data, conn.msgtype))
            elif msgdef.format == MessageDefinitionFormat.IDL and msgdef.data:
                typestore.register(get_types_from_idl(msgdef.data))
        except Exception:  # noqa: BLE001 - an unparsable definition leaves the type unknown
            pass
        if conn.msgtype not in typestore.types:
            unknown.add(conn.msgtype)
    return unknown


class BagSet:
    """Several opened bags seen as one set of logical topics merged by log time.

    Build with :func:`open_bags`; use as a context manager or call :meth:`close`.
    """

    def __init__(self, sources: list[_Source], typestore: Typestore, unknown_types: set[str]) -> None:
        self._sources = sources
        self.typestore = typestore
        self.unknown_types = unknown_types

    @property
    def labels(self) -> list[str]:
        """The bags in this set, as given."""
        return [s.label for s in self._sources]

    def close(self) -> None:
        """Close every bag."""
        for source in self._sources:
            try:
                source.reader.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self._sources = []

    def __enter__(self) -> BagSet:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- metadata ------------------------------------------------------------------
    def topics(self) -> dict[str, TopicInfo]:
        """Return every logical topic with its type, message count and bags."""
        info: dict[str, TopicInfo] = {}
        for source in self._sources:
            for topic, conns in source.by_topic.items():
                count = sum(c.msgcount for c in conns)
                msgtype = conns[0].msgtype
                if topic in info:
                    old = info[topic]
                    if old.msgtype != msgtype:
                        raise BagError(
                            f"topic {topic} is {old.msgtype} in bag {old.bags[0]} but {msgtype} in bag {source.label}"
                        )
                    info[topic] = TopicInfo(topic, msgtype, old.message_count + count, (*old.bags, source.label))
                else:
                    info[topic] = TopicInfo(topic, msgtype, count, (source.label,))
        return info

    def topic_types(self) -> dict[str, str]:
        """Return logical topic -> message type."""
        return {t: i.msgtype for t, i in self.topics().items()}

    def time_range_ns(self) -> tuple[int, int]:
        """Return (first, last) log time over all bags."""
        starts = [s.reader.start_time for s in self._sources if s.reader.message_count]
        ends = [s.reader.end_time - 1 for s in self._sources if s.reader.message_count]
        if not starts:
            raise BagError(f"bags {', '.join(self.labels)} hold no messages")
        return min(starts), max(ends)

    def _info(self, topic: str) -> TopicInfo:
        topics = self.topics()
        if topic not in topics:
            raise BagError(
                f"topic {topic} not found in bag(s) {', '.join(self.labels)}; available: {', '.join(sorted(topics))}"
            )
        info = topics[topic]
        if info.msgtype in self.unknown_types:
            raise BagError(
                f"unknown message type {info.msgtype} of topic {topic} in bag(s) {', '.join(info.bags)}: "
                "no definition in the bag nor in the typestore"
            )
        return info

    # -- raw access ----------------------------------------------------------------
    def iter_raw(
        self, topics: Sequence[str], start_ns: int | None = None, stop_ns: int | None = None
    ) -> Iterator[tuple[str, int, bytes]]:
        """Yield (logical topic, log time ns, raw CDR) of ``topics`` merged by log time.

        ``start_ns`` is inclusive, ``stop_ns`` exclusive.
        """
        for topic in topics:
            self._info(topic)
        streams = [self._iter_source(source, topics, start_ns, stop_ns) for source in self._sources]
        yield from heapq.merge(*streams, key=lambda item: item[1])

    def _iter_source(
        self, source: _Source, topics: Sequence[str], start_ns: int | None, stop_ns: int | None
    ) -> Iterator[tuple[str, int, bytes]]:
        wanted = {id(c): t for t in topics for c in source.by_topic.get(t, [])}
        conns = [c for t in topics for c in source.by_topic.get(t, [])]
        if not conns:
            return
        current = ", ".join(topics)
        try:
            for conn, stamp, data in source.reader.messages(conns, start_ns, stop_ns):
                topic = wanted.get(id(conn))
                if topic is None:
                    topic = next(t for t in topics for c in source.by_topic.get(t, []) if c == conn)
                yield topic, stamp, data
        except BagError:
            raise
        except Exception as exc:  # noqa: BLE001 - rosbags, zstd, lz4 and struct errors alike
            raise BagError(f"bag {source.label}: topic {current}: cannot read (corrupt or truncated?): {exc}") from exc

    def _collect(
        self, topics: Sequence[str], start_ns: int | None, stop_ns: int | None, may_be_empty: Iterable[str] = ()
    ) -> dict[str, tuple[np.ndarray, list[bytes]]]:
        """Read raw messages of several topics in one pass over each bag (topics of
        ``may_be_empty`` may have none in the window; the others raise BagError)."""
        infos = {t: self._info(t) for t in topics}
        recv: dict[str, list[int]] = {t: [] for t in topics}
        datas: dict[str, list[bytes]] = {t: [] for t in topics}
        for source in self._sources:
            if not (
                _scan_mcap_chunks(source, topics, start_ns, stop_ns, recv, datas)
                or _query_sqlite(source, topics, start_ns, stop_ns, recv, datas)
            ):
                for topic, stamp, data in self._iter_source(source, topics, start_ns, stop_ns):
                    recv[topic].append(stamp)
                    datas[topic].append(data)
        out = {}
        optional = set(may_be_empty)
        for topic in topics:
            if not datas[topic] and topic not in optional:
                window = "" if start_ns is None and stop_ns is None else f" in window [{start_ns}, {stop_ns}) ns"
                raise BagError(f"topic {topic} of bag(s) {', '.join(infos[topic].bags)} has no messages{window}")
            stamps = np.asarray(recv[topic], dtype=np.int64)
            order = np.argsort(stamps, kind="stable")
            if np.any(order != np.arange(order.size)):
                stamps = stamps[order]
                datas[topic] = [datas[topic][i] for i in order]
            out[topic] = (stamps, datas[topic])
        return out

    # -- decoded access ------------------------------------------------------------
    def iter_messages(
        self, topic: str, start_ns: int | None = None, stop_ns: int | None = None
    ) -> Iterator[tuple[int, Any]]:
        """Yield (log time ns, rosbags message object) for any type, by log time."""
        msgtype = self._info(topic).msgtype
        for _, stamp, data in self.iter_raw([topic], start_ns, stop_ns):
            yield stamp, self._deserialize(data, msgtype, topic)

    def read_all(
        self, column_topics: Sequence[str], message_topics: Sequence[str], start_ns: int | None = None,
        stop_ns: int | None = None,
    ) -> tuple[dict[str, Columns], dict[str, list[tuple[int, Any]]]]:
        """:meth:`read_many` of ``column_topics`` and every message of ``message_topics``
        (as :meth:`iter_messages` yields them, possibly none), reading each bag once.

        A small topic read on its own costs a pass over every chunk that holds it,
        which in a recording is nearly every chunk: one pass serves all topics.
        """
        decoders = self._decoders(column_topics)
        kinds = {t: self._info(t).msgtype for t in message_topics}
        everything = list(dict.fromkeys([*decoders, *kinds]))
        raw = self._collect(everything, start_ns, stop_ns, may_be_empty=[t for t in kinds if t not in decoders])
        columns = {topic: decoders[topic](self, topic, *raw[topic]) for topic in decoders}
        messages = {}
        for topic, msgtype in kinds.items():
            stamps, datas = raw[topic]
            messages[topic] = [(stamp, self._deserialize(data, msgtype, topic))
                               for stamp, data in zip(stamps.tolist(), datas, strict=True)]
        return columns, messages

    def _deserialize(self, data: bytes, msgtype: str, topic: str) -> Any:
        try:
            return self.typestore.deserialize_cdr(data, msgtype)
        except Exception as exc:  # noqa: BLE001 - rosbags raises several serde errors
            info = self.topics().get(topic)
            where = ", ".join(info.bags if info is not None else self.labels)
            raise BagError(f"topic {topic} in bag(s) {where}: cannot deserialize {msgtype}: {exc}") from exc

    def read_columns(self, topic: str, start_ns: int | None = None, stop_ns: int | None = None) -> Columns:
        """Decode a JointState, WrenchStamped or PoseStamped topic into columns.

        ``start_ns`` is inclusive, ``stop_ns`` exclusive (log time).

        Raises:
            BagError: missing topic, unknown or unsupported type, unreadable bag, or
                no message in the window; the message names bag(s) and topic.
        """
        return self.read_many([topic], start_ns, stop_ns)[topic]

    def read_many(
        self, topics: Sequence[str], start_ns: int | None = None, stop_ns: int | None = None
    ) -> dict[str, Columns]:
        """Like :meth:`read_columns` for several topics, reading each bag once."""
        decoders = self._decoders(topics)
        raw = self._collect(list(decoders), start_ns, stop_ns)
        return {topic: decoders[topic](self, topic, *raw[topic]) for topic in decoders}

    def _decoders(self, topics: Sequence[str]) -> dict[str, Any]:
        """The column decoder of each topic (BagError for a type without columns)."""
        decoders = {}
        for topic in topics:
            info = self._info(topic)
            decoder = _DECODERS.get(info.msgtype)
            if decoder is None:
                raise BagError(
                    f"topic {topic} in bag(s) {', '.join(info.bags)} is {info.msgtype}; columns exist for "
                    f"{', '.join(sorted(_DECODERS))}; use iter_messages"
                )
            decoders[topic] = decoder
        return decoders


def _storages_of(reader: Reader, kind: type) -> list[Any] | None:
    """Return the storages of a bag when all are of ``kind`` and hold raw (uncompressed) messages."""
    storage = getattr(reader, "storage", None)
    if isinstance(storage, kind):
        return [storage]
    if (
        isinstance(storage, DirectoryReader)
        and storage.metadata.compression_mode != "message"
        and storage.storages
        and all(isinstance(s, kind) for s in storage.storages)
    ):
        return list(storage.storages)
    return None


def _query_sqlite(
    source: _Source,
    topics: Sequence[str],
    start_ns: int | None,
    stop_ns: int | None,
    recv: dict[str, list[int]],
    datas: dict[str, list[bytes]],
) -> bool:
    """Append raw messages of ``topics`` from sqlite3 storages with one query each.

    Returns False when the bag is not sqlite3 so the caller uses rosbags' reader.
    """
    storages = _storages_of(source.reader, Sqlite3Reader)
    if storages is None:
        return False
    wanted = set(topics)
    start = -(2**63) if start_ns is None else int(start_ns)
    stop = 2**63 - 1 if stop_ns is None else int(stop_ns)
    try:
        for storage in storages:
            by_id = {}
            for conn in storage.connections:
                logical = source.logical_of.get(conn.topic)
                if logical in wanted:
                    by_id[conn.id] = logical
            if not by_id or storage.dbconn is None:
                continue
            # One scan of the messages table (rosbag2 has no index on topic_id).
            marks = ",".join("?" for _ in by_id)
            rows = storage.dbconn.execute(
                f"SELECT topic_id, timestamp, data FROM messages WHERE topic_id IN ({marks}) "
                "AND timestamp >= ? AND timestamp < ?",
                (*by_id, start, stop),
            ).fetchall()
            per_topic: dict[str, tuple[list[int], list[bytes]]] = {t: (recv[t], datas[t]) for t in by_id.values()}
            targets = {topic_id: per_topic[topic] for topic_id, topic in by_id.items()}
            for topic_id, stamp, data in rows:
                stamps, payloads = targets[topic_id]
                stamps.append(stamp)
                payloads.append(data)
    except Exception as exc:  # noqa: BLE001 - apsw raises its own error classes
        raise BagError(
            f"bag {source.label}: topic {', '.join(topics)}: cannot read (corrupt or truncated?): {exc}"
        ) from exc
    return True


_U64 = np.arange(8)
_U16 = np.arange(2)


def _gather(buf: np.ndarray, offsets: np.ndarray, width: np.ndarray, dtype: str) -> np.ndarray:
    """Read one little-endian integer of ``len(width)`` bytes at each offset."""
    return buf[offsets[:, None] + width].view(dtype).ravel()


def _indexed_chunk_messages(
    bio: Any, chunk: Any, raw: bytes, channels: Mapping[int, Any], start: int, stop: int
) -> dict[int, tuple[list[int], list[bytes]]] | None:
    """Slice the wanted messages out of a decompressed chunk using its message indexes.

    Every index entry is checked against the record it points at (opcode, channel,
    log time, length within the chunk); a mismatch means a corrupt file and raises
    ValueError. Without indexes it returns None and the caller walks the chunk
    record by record instead.
    """
    buf = np.frombuffer(raw, dtype=np.uint8)
    out: dict[int, tuple[list[int], list[bytes]]] = {}
    for channel_id in channels:
        index_offset = chunk.message_index_offsets.get(channel_id)
        if index_offset is None:
            if chunk.channel_count.get(channel_id, 0):
                return None
            continue
        where = f"chunk at offset {chunk.chunk_start_offset}, channel {channel_id}"
        bio.seek(index_offset)
        head = bio.read(15)
        if len(head) != 15:
            raise ValueError(f"message index of {where} is truncated")
        opcode, _, index_channel, records_len = struct.unpack("<BQHI", head)
        if opcode != 0x07 or index_channel != channel_id or records_len % 16:
            raise ValueError(f"message index of {where} is invalid")
        records = bio.read(records_len)
        if len(records) != records_len:
            raise ValueError(f"message index of {where} is truncated")
        pairs = np.frombuffer(records, dtype="<u8").reshape(-1, 2)
        log_times = pairs[:, 0].astype(np.int64)
        offsets = pairs[:, 1].astype(np.int64)
        if offsets.size == 0:
            continue
        if offsets.min() < 0 or offsets.max() + 31 > buf.size:
            raise ValueError(f"message index of {where} points outside the chunk")
        lengths = _gather(buf, offsets + 1, _U64, "<u8").astype(np.int64)
        ends = offsets + 9 + lengths
        if (
            not np.all(buf[offsets] == 0x05)
            or not np.all(_gather(buf, offsets + 9, _U16, "<u2") == channel_id)
            or not np.array_equal(_gather(buf, offsets + 15, _U64, "<u8").astype(np.int64), log_times)
            or lengths.min() < 22
            or ends.max() > buf.size
        ):
            raise ValueError(f"message index of {where} disagrees with the chunk's records")
        keep = (log_times >= start) & (log_times < stop)
        starts = (offsets + 31)[keep].tolist()
        out[channel_id] = (
            log_times[keep].tolist(),
            [raw[a:b] for a, b in zip(starts, ends[keep].tolist(), strict=True)],
        )
    return out


def _scan_mcap_chunks(
    source: _Source,
    topics: Sequence[str],
    start_ns: int | None,
    stop_ns: int | None,
    recv: dict[str, list[int]],
    datas: dict[str, list[bytes]],
) -> bool:
    """Append the raw messages of ``topics`` by reading MCAP chunks directly.

    rosbags' generic reader builds several objects per record; this reads each chunk,
    decompresses it with rosbags' own checked ``decompress`` and slices the wanted
    messages out by the chunk's message indexes (numpy), or walks its records with
    ``struct.unpack_from`` when there are none. Returns False (nothing appended) when the bag is
    not chunked MCAP, so the caller uses rosbags' reader instead. Messages come
    unordered; the caller sorts them.
    """
    storages = _storages_of(source.reader, McapReader)
    if storages is None or any(not s.chunks for s in storages if s.statistics and s.statistics.message_count):
        return False
    wanted = set(topics)
    start = -1 if start_ns is None else int(start_ns)
    stop = 2**63 if stop_ns is None else int(stop_ns)
    collected: dict[str, tuple[list[int], list[bytes]]] = {t: ([], []) for t in topics}
    unpack_len = struct.Struct("<Q").unpack_from
    unpack_msg = struct.Struct("<H4xQ").unpack_from
    try:
        for storage in storages:
            by_channel = {}
            for conn in storage.connections:
                logical = source.logical_of.get(conn.topic)
                if logical in wanted:
                    by_channel[conn.id] = collected[logical]
            if not by_channel:
                continue
            bio = storage.bio
            assert bio is not None
            for chunk in storage.chunks:
                if chunk.message_end_time < start or chunk.message_start_time >= stop:
                    continue
                if not any(chunk.channel_count.get(cid, 0) for cid in by_channel):
                    continue
                bio.seek(chunk.chunk_start_offset + 9 + 24)
                (crc,) = struct.unpack("<I", bio.read(4))
                bio.seek(chunk.chunk_start_offset + 9 + 40 + len(chunk.compression))
                compressed = bio.read(chunk.compressed_size)
                if len(compressed) != chunk.compressed_size:
                    raise ValueError(f"chunk at offset {chunk.chunk_start_offset} is truncated")
                raw = decompress(compressed, chunk.compression, chunk.uncompressed_size, crc)
                indexed = _indexed_chunk_messages(bio, chunk, raw, by_channel, start, stop)
                if indexed is not None:
                    for channel_id, (log_times, payloads) in indexed.items():
                        by_channel[channel_id][0].extend(log_times)
                        by_channel[channel_id][1].extend(payloads)
                    continue
                end = len(raw)
                pos = 0
                while pos < end:
                    (length,) = unpack_len(raw, pos + 1)
                    body = pos + 9
                    pos = body + length
                    if pos > end:
                        raise ValueError(f"record overruns chunk at offset {chunk.chunk_start_offset}")
                    if raw[body - 9] == 0x05:
                        channel_id, log_time = unpack_msg(raw, body)
                        target = by_channel.get(channel_id)
                        if target is not None and start <= log_time < stop:
                            target[0].append(log_time)
                            target[1].append(raw[body + 22 : pos])
    except Exception as exc:  # noqa: BLE001 - rosbags ReaderError, zstd/lz4 and struct errors
        raise BagError(
            f"bag {source.label}: topic {', '.join(topics)}: cannot read (corrupt or truncated?): {exc}"
        ) from exc
    for topic, (stamps, payloads) in collected.items():
        recv[topic].extend(stamps)
        datas[topic].extend(payloads)
    return True


def open_bags(
    paths: Sequence[Path | str] | Path | str,
    *,
    topic_maps: Sequence[Mapping[str, str] | None] | None = None,
    typestore: Typestore | None = None,
) -> BagSet:
    """Open rosbag2 bags: directories (split or not), ``.mcap`` or ``.db3`` files.

    Args:
        paths: one path or several; topics of the same logical name are merged by time.
        topic_maps: per path, bag topic -> logical topic (e.g. two bags that both
            record ``/joint_states`` mapped to ``/sim/joint_states`` and
            ``/real/joint_states``). Unmapped topics keep their names; a mapped
            topic the bag lacks raises.
        typestore: base typestore; by default ROS 2 standard types plus ours. Types
            only the bags define are added to a private store (or to the one given).

    Raises:
        BagError: a path is missing, not a bag, corrupt or truncated, or a mapped
            topic is absent; the message names the bag.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise BagError("no bag given")
    if topic_maps is not None and len(topic_maps) != len(paths):
        raise BagError(f"{len(topic_maps)} topic maps for {len(paths)} bags")
    sources: list[_Source] = []
    try:
        for index, raw_path in enumerate(paths):
            mapping = dict(topic_maps[index] or {}) if topic_maps is not None else {}
            first_source = len(sources)
            for bag_path in _expand(Path(raw_path)):
                label = str(bag_path)
                try:
                    reader = Reader(bag_path)
                    reader.open()
                except BagError:
                    raise
                except Exception as exc:  # noqa: BLE001 - rosbags ReaderError and OS errors
                    raise BagError(f"bag {label}: cannot open (corrupt or truncated?): {exc}") from exc
                by_topic: dict[str, list[Connection]] = {}
                for conn in reader.connections:
                    by_topic.setdefault(mapping.get(conn.topic, conn.topic), []).append(conn)
                logical_of = {c.topic: mapping.get(c.topic, c.topic) for c in reader.connections}
                sources.append(_Source(label, reader, by_topic, logical_of))
            if mapping:
                present = {c.topic for s in sources[first_source:] for c in s.reader.connections}
                missing = sorted(set(mapping) - present)
                if missing:
                    raise BagError(f"bag {raw_path}: mapped topic(s) {', '.join(missing)} not found")
        connections = [c for source in sources for c in source.reader.connections]
        store = typestore if typestore is not None else build_typestore()
        unknown: set[str] = set()
        if any(c.msgtype not in store.types for c in connections):
            # The shared store stays untouched; bag-defined types go into a private one.
            store = typestore if typestore is not None else new_typestore()
            unknown = _register_bag_types(store, connections)
    except BaseException:
        for source in sources:
            try:
                source.reader.close()
            except Exception:  # noqa: BLE001
                pass
        raise
    return BagSet(sources, store, unknown)


# -- CDR layouts -------------------------------------------------------------------
# Offsets are into the whole serialized buffer; CDR aligns relative to the payload,
# which starts after the 4-byte encapsulation header.


def _align(offset: int, size: int) -> int:
    return offset + (-(offset - 4)) % size


def _read_string(buf: bytes, offset: int) -> tuple[str, int]:
    offset = _align(offset, 4)
    (length,) = struct.unpack_from("<I", buf, offset)
    offset += 4
    if length == 0 or offset + length > len(buf):
        raise ValueError("bad string")
    return buf[offset : offset + length - 1].decode("utf-8"), offset + length


def _header_end(buf: bytes) -> tuple[str, int]:
    if buf[:2] != _CDR_LE:
        raise ValueError("not little-endian CDR")
    frame_id, offset = _read_string(buf, 12)
    return frame_id, offset


def _f64_seq(buf: bytes, offset: int) -> tuple[int, int, int]:
    """Return (data offset, count, end offset) of a float64 sequence."""
    offset = _align(offset, 4)
    (count,) = struct.unpack_from("<I", buf, offset)
    offset += 4
    if count:
        offset = _align(offset, 8)
    end = offset + 8 * count
    if end > len(buf):
        raise ValueError("sequence overruns buffer")
    return offset, count, end


@dataclass
class _Layout:
    """Where the variable parts of one serialized layout are."""

    regions: dict[str, tuple[int, int]]  # name -> (offset, float64 count)
    end: int
    extra: dict[str, Any]


def _layout_joint_state(buf: bytes) -> _Layout:
    frame_id, offset = _header_end(buf)
    offset = _align(offset, 4)
    (count,) = struct.unpack_from("<I", buf, offset)
    offset += 4
    names = []
    for _ in range(count):
        name, offset = _read_string(buf, offset)
        names.append(name)
    regions = {}
    for field_name in ("position", "velocity", "effort"):
        data_offset, n, offset = _f64_seq(buf, offset)
        regions[field_name] = (data_offset, n)
    return _Layout(regions, offset, {"names": tuple(names), "frame_id": frame_id})


def _layout_fixed(count: int) -> Any:
    def layout(buf: bytes) -> _Layout:
        frame_id, offset = _header_end(buf)
        offset = _align(offset, 8)
        if offset + 8 * count > len(buf):
            raise ValueError("message too short")
        return _Layout({"values": (offset, count)}, offset + 8 * count, {"frame_id": frame_id})

    return layout


def _batch(rows: np.ndarray, layout: _Layout, template: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Check rows against the template outside variable regions; decode the matching ones."""
    width = rows.shape[1]
    fixed = np.ones(width, dtype=bool)
    fixed[4:12] = False
    for offset, n in layout.regions.values():
        fixed[offset : offset + 8 * n] = False
    ok = (rows[:, fixed] == template[fixed]).all(axis=1)
    good = rows[ok]
    out: dict[str, np.ndarray] = {
        "sec": np.ascontiguousarray(good[:, 4:8]).view("<i4").ravel().astype(np.int64),
        "nanosec": np.ascontiguousarray(good[:, 8:12]).view("<u4").ravel().astype(np.int64),
    }
    for name, (offset, n) in layout.regions.items():
        block = np.ascontiguousarray(good[:, offset : offset + 8 * n])
        out[name] = block.view("<f8").reshape(good.shape[0], n).astype(np.float64)
    return ok, out


def _groups(datas: list[bytes]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield (indices, uint8 rows) for each serialized length."""
    lengths = np.fromiter((len(d) for d in datas), dtype=np.int64, count=len(datas))
    for length in np.unique(lengths):
        index = np.flatnonzero(lengths == length)
        if index.size == len(datas):
            joined = b"".join(datas)
        else:
            joined = b"".join([datas[i] for i in index])
        yield index, np.frombuffer(joined, dtype=np.uint8).reshape(index.size, int(length))


# Distinct byte templates tried per serialized length before the rest goes one by one.
_MAX_TEMPLATES = 8


def _fast_batches(
    datas: list[bytes], parse: Any, accept: Any
) -> Iterator[tuple[np.ndarray, _Layout, dict[str, np.ndarray]]]:
    """Yield (message indices, layout, decoded arrays) for every batch the fast path takes.

    ``parse(buf) -> _Layout`` may raise ValueError/struct.error for layouts it does not
    know; ``accept(buf, layout, out) -> bool`` checks the template message's decoded
    row 0 against rosbags. Rows not yielded are left to the per-message path.
    """
    for index, rows in _groups(datas):
        remaining = np.arange(index.size)
        tried = 0
        while remaining.size and tried < _MAX_TEMPLATES:
            tried += 1
            first = int(remaining[0])
            sample = datas[int(index[first])]
            try:
                layout = parse(sample)
            except (ValueError, struct.error, UnicodeDecodeError):
                remaining = remaining[1:]
                continue
            candidates = rows if remaining.size == index.size else rows[remaining]
            ok, out = _batch(candidates, layout, rows[first])
            if not accept(sample, layout, out):
                remaining = remaining[1:]
                continue
            yield index[remaining[ok]], layout, out
            remaining = remaining[~ok]


def _stamp_ns(sec: np.ndarray, nanosec: np.ndarray) -> np.ndarray:
    return sec * NS_PER_S + nanosec


def _stamp_matches(msg: Any, out: dict[str, np.ndarray]) -> bool:
    return (
        out["sec"].size > 0
        and int(out["sec"][0]) == msg.header.stamp.sec
        and int(out["nanosec"][0]) == msg.header.stamp.nanosec
    )


def _bits_equal(expected: Any, got: np.ndarray) -> bool:
    expected = np.asarray(expected, dtype=np.float64)
    return expected.shape == got.shape and np.array_equal(expected.view(np.uint64), got.view(np.uint64))


def _decode_joint_states(bags: BagSet, topic: str, recv_ns: np.ndarray, datas: list[bytes]) -> JointStateColumns:
    count = len(datas)
    names = tuple(bags._deserialize(datas[0], JOINT_STATE, topic).name)
    width = len(names)
    stamp = np.empty(count, dtype=np.int64)
    columns = {f: np.full((count, width), np.nan) for f in ("position", "velocity", "effort")}
    done = np.zeros(count, dtype=bool)

    def accept(sample: bytes, layout: _Layout, out: dict[str, np.ndarray]) -> bool:
        group_names = layout.extra["names"]
        if len(set(group_names)) != width or set(group_names) != set(names):
            return False
        if any(n not in (0, width) for _, n in layout.regions.values()):
            return False
        msg = bags._deserialize(sample, JOINT_STATE, topic)
        return _stamp_matches(msg, out) and all(
            _bits_equal(getattr(msg, f), out[f][0]) for f in ("position", "velocity", "effort")
        )

    for target, layout, out in _fast_batches(datas, _layout_joint_state, accept):
        group_names = layout.extra["names"]
        perm = np.asarray([group_names.index(n) for n in names], dtype=np.intp)
        stamp[target] = _stamp_ns(out["sec"], out["nanosec"])
        for field_name in ("position", "velocity", "effort"):
            if layout.regions[field_name][1] == width:
                columns[field_name][target] = out[field_name][:, perm]
        done[target] = True
    slow = np.flatnonzero(~done)
    for i in slow:
        msg = bags._deserialize(datas[i], JOINT_STATE, topic)
        msg_names = list(msg.name)
        if sorted(msg_names) != sorted(names):
            raise BagError(
                f"topic {topic} in bag(s) {', '.join(bags.labels)}: joint names change at log time "
                f"{int(recv_ns[i])} ns: {msg_names} instead of {list(names)}"
            )
        perm_list = [msg_names.index(n) for n in names]
        stamp[i] = msg.header.stamp.sec * NS_PER_S + msg.header.stamp.nanosec
        for field_name in ("position", "velocity", "effort"):
            values = np.asarray(getattr(msg, field_name), dtype=np.float64)
            if values.size == width:
                columns[field_name][i] = values[perm_list]
            elif values.size != 0:
                raise BagError(
                    f"topic {topic} in bag(s) {', '.join(bags.labels)}: {field_name} has {values.size} values "
                    f"for {width} joints at log time {int(recv_ns[i])} ns"
                )
    return JointStateColumns(
        stamp, recv_ns, names, columns["position"], columns["velocity"], columns["effort"], int(slow.size)
    )


def _decode_fixed(
    bags: BagSet, topic: str, datas: list[bytes], msgtype: str, count: int, extract: Any
) -> tuple[np.ndarray, np.ndarray, str, int]:
    """Decode a header + ``count`` float64 message type; returns (stamp, values, frame_id, slow)."""
    n = len(datas)
    frame_id = bags._deserialize(datas[0], msgtype, topic).header.frame_id
    stamp = np.empty(n, dtype=np.int64)
    values = np.empty((n, count), dtype=np.float64)
    done = np.zeros(n, dtype=bool)

    def accept(sample: bytes, layout: _Layout, out: dict[str, np.ndarray]) -> bool:
        msg = bags._deserialize(sample, msgtype, topic)
        return _stamp_matches(msg, out) and _bits_equal(extract(msg), out["values"][0])

    for target, _, out in _fast_batches(datas, _layout_fixed(count), accept):
        stamp[target] = _stamp_ns(out["sec"], out["nanosec"])
        values[target] = out["values"]
        done[target] = True
    slow = np.flatnonzero(~done)
    for i in slow:
        msg = bags._deserialize(datas[i], msgtype, topic)
        stamp[i] = msg.header.stamp.sec * NS_PER_S + msg.header.stamp.nanosec
        values[i] = extract(msg)
    return stamp, values, frame_id, int(slow.size)


def _wrench_values(msg: Any) -> list[float]:
    f, t = msg.wrench.force, msg.wrench.torque
    return [f.x, f.y, f.z, t.x, t.y, t.z]


def _pose_values(msg: Any) -> list[float]:
    p, q = msg.pose.position, msg.pose.orientation
    return [p.x, p.y, p.z, q.x, q.y, q.z, q.w]


def _decode_wrenches(bags: BagSet, topic: str, recv_ns: np.ndarray, datas: list[bytes]) -> WrenchColumns:
    stamp, values, frame_id, slow = _decode_fixed(bags, topic, datas, WRENCH_STAMPED, 6, _wrench_values)
    return WrenchColumns(stamp, recv_ns, frame_id, values[:, :3].copy(), values[:, 3:].copy(), slow)


def _decode_poses(bags: BagSet, topic: str, recv_ns: np.ndarray, datas: list[bytes]) -> PoseColumns:
    stamp, values, frame_id, slow = _decode_fixed(bags, topic, datas, POSE_STAMPED, 7, _pose_values)
    return PoseColumns(stamp, recv_ns, frame_id, values[:, :3].copy(), values[:, [6, 3, 4, 5]].copy(), slow)


def _imu_values(msg: Any) -> list[float]:
    q, w, a = msg.orientation, msg.angular_velocity, msg.linear_acceleration
    return [
        q.x, q.y, q.z, q.w, *msg.orientation_covariance,
        w.x, w.y, w.z, *msg.angular_velocity_covariance,
        a.x, a.y, a.z, *msg.linear_acceleration_covariance,
    ]


def _decode_imus(bags: BagSet, topic: str, recv_ns: np.ndarray, datas: list[bytes]) -> ImuColumns:
    stamp, values, frame_id, slow = _decode_fixed(bags, topic, datas, IMU, 37, _imu_values)
    return ImuColumns(
        stamp, recv_ns, frame_id, values[:, [3, 0, 1, 2]].copy(), values[:, 13:16].copy(), values[:, 25:28].copy(), slow
    )


_DECODERS = {
    IMU: _decode_imus,
    JOINT_STATE: _decode_joint_states,
    WRENCH_STAMPED: _decode_wrenches,
    POSE_STAMPED: _decode_poses,
}
