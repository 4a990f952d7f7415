"""Read rosbag2 bags (MCAP or sqlite3, split, one or several) into columns, with rosbags.

Fast paths decode whole batches of raw CDR with numpy instead of building one Python
message per sample: within a topic, messages of one serialized length almost always
share one layout (same frame id, joint names and array lengths), so the first
message of each length is parsed, checked against rosbags' own deserializer, and
every other message of that length is checked byte for byte against it outside
the stamp and float regions. Messages that do not match are deserialized one by
one with rosbags, so the columns are always equal to what rosbags decodes.

Column types: JointState, WrenchStamped, PoseStamped and Imu; every other type goes
through :meth:`BagSet.iter_messages`. Raw messages come from MCAP chunks read into
one buffer and located by their message indexes (rosbags' chunk index and
decompression), or from one SQL query per sqlite3 file; anything else (per-message
compression, unchunked MCAP) uses rosbags' reader. A topic's messages stay in that
buffer (start and size per message) and batches of one length are gathered from it
as rows without a bytes object per message.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import yaml
from rosbags.interfaces import Connection, MessageDefinitionFormat, Nodetype
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


@dataclass(frozen=True)
class _Raw:
    """Serialized messages of one topic in one byte buffer: message i, logged at
    ``recv_ns[i]``, is ``buf[start[i] : start[i] + size[i]]`` (int64 arrays)."""

    recv_ns: np.ndarray
    buf: np.ndarray
    start: np.ndarray
    size: np.ndarray

    def __len__(self) -> int:
        return int(self.size.shape[0])

    def __getitem__(self, i: int) -> bytes:
        start = int(self.start[i])
        return self.buf[start : start + int(self.size[i])].tobytes()

    @classmethod
    def of(cls, recv_ns: Sequence[int], datas: Sequence[bytes]) -> _Raw:
        """Messages given one by one (sqlite3 rows, rosbags' reader)."""
        size = np.fromiter(map(len, datas), dtype=np.int64, count=len(datas))
        buf = np.frombuffer(b"".join(datas), dtype=np.uint8)
        return cls(np.asarray(recv_ns, dtype=np.int64).reshape(-1), buf, np.cumsum(size) - size, size)

    @classmethod
    def concat(cls, parts: Sequence[_Raw]) -> _Raw:
        """The messages of ``parts`` in order; distinct buffers are copied into one."""
        if not parts:
            return cls.of([], [])
        if len(parts) == 1:
            return parts[0]
        bufs = list({id(p.buf): p.buf for p in parts}.values())
        base = {id(bufs[0]): 0}
        buf = bufs[0]
        if len(bufs) > 1:
            buf = np.concatenate(bufs)
            ends = np.cumsum([b.size for b in bufs]).tolist()
            base = {id(b): end - b.size for b, end in zip(bufs, ends, strict=True)}
        return cls(
            np.concatenate([p.recv_ns for p in parts]),
            buf,
            np.concatenate([p.start + base[id(p.buf)] for p in parts]),
            np.concatenate([p.size for p in parts]),
        )

    def take(self, order: np.ndarray) -> _Raw:
        """The messages at ``order``."""
        return _Raw(self.recv_ns[order], self.buf, self.start[order], self.size[order])


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
    ) -> dict[str, _Raw]:
        """Read raw messages of several topics in one pass over each bag, by log time
        (topics of ``may_be_empty`` may have none in the window; the others raise BagError)."""
        infos = {t: self._info(t) for t in topics}
        parts: dict[str, list[_Raw]] = {t: [] for t in topics}
        for source in self._sources:
            if not (
                _scan_mcap_chunks(source, topics, start_ns, stop_ns, parts)
                or _query_sqlite(source, topics, start_ns, stop_ns, parts)
            ):
                recv: dict[str, list[int]] = {t: [] for t in topics}
                datas: dict[str, list[bytes]] = {t: [] for t in topics}
                for topic, stamp, data in self._iter_source(source, topics, start_ns, stop_ns):
                    recv[topic].append(stamp)
                    datas[topic].append(data)
                for topic in topics:
                    if datas[topic]:
                        parts[topic].append(_Raw.of(recv[topic], datas[topic]))
        out = {}
        optional = set(may_be_empty)
        for topic in topics:
            raw = _Raw.concat(parts[topic])
            if not len(raw) and topic not in optional:
                window = "" if start_ns is None and stop_ns is None else f" in window [{start_ns}, {stop_ns}) ns"
                raise BagError(f"topic {topic} of bag(s) {', '.join(infos[topic].bags)} has no messages{window}")
            if np.any(raw.recv_ns[1:] < raw.recv_ns[:-1]):
                raw = raw.take(np.argsort(raw.recv_ns, kind="stable"))
            out[topic] = raw
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
        stop_ns: int | None = None, parsers: Mapping[str, Callable[[bytes], Any]] | None = None,
    ) -> tuple[dict[str, Columns], dict[str, list[tuple[int, Any]]]]:
        """:meth:`read_many` of ``column_topics`` and every message of ``message_topics``
        (as :meth:`iter_messages` yields them, possibly none), reading each bag once.

        A small topic read on its own costs a pass over every chunk that holds it,
        which in a recording is nearly every chunk: one pass serves all topics.
        ``parsers`` (by topic) turn a message's bytes into what the caller wants of it,
        or None: that message is deserialized by rosbags as usual.
        """
        decoders = self._decoders(column_topics)
        kinds = {t: self._info(t).msgtype for t in message_topics}
        everything = list(dict.fromkeys([*decoders, *kinds]))
        raw = self._collect(everything, start_ns, stop_ns, may_be_empty=[t for t in kinds if t not in decoders])
        columns = {topic: decoders[topic](self, topic, raw[topic]) for topic in decoders}
        messages = {}
        for topic, msgtype in kinds.items():
            parse = (parsers or {}).get(topic)
            got = messages[topic] = []
            for i, stamp in enumerate(raw[topic].recv_ns.tolist()):
                data = raw[topic][i]
                parsed = None if parse is None else parse(data)
                got.append((stamp, self._deserialize(data, msgtype, topic) if parsed is None else parsed))
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
        return {topic: decoders[topic](self, topic, raw[topic]) for topic in decoders}

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
    parts: dict[str, list[_Raw]],
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
            per_topic: dict[str, tuple[list[int], list[bytes]]] = {t: ([], []) for t in by_id.values()}
            targets = {topic_id: per_topic[topic] for topic_id, topic in by_id.items()}
            for topic_id, stamp, data in rows:
                stamps, payloads = targets[topic_id]
                stamps.append(stamp)
                payloads.append(data)
            for topic, (stamps, payloads) in per_topic.items():
                if stamps:
                    parts[topic].append(_Raw.of(stamps, payloads))
    except Exception as exc:  # noqa: BLE001 - apsw raises its own error classes
        raise BagError(
            f"bag {source.label}: topic {', '.join(topics)}: cannot read (corrupt or truncated?): {exc}"
        ) from exc
    return True


# A chunk record's bytes before its records, besides the compression name: opcode,
# length, start and end time, uncompressed size, crc, name length, compressed size.
_CHUNK_HEAD = 49
_INDEX_HEAD = struct.Struct("<BQHI")  # message index record: opcode, length, channel, entries' length
_MESSAGE_HEAD = 31  # message record bytes before the payload: opcode, length, channel, sequence, two times
#: Bytes allocated past the end of a chunk buffer: the words read around a record head
#: (see :func:`_check_entries`) may reach that far past its last byte.
_SLACK = 32


def _padded_bytes(size: int) -> np.ndarray:
    """An uninitialized byte buffer of ``size`` that :func:`_aligned_words` reads in place:
    a view of a word-aligned allocation :data:`_SLACK` bytes longer (zeroed there)."""
    whole = np.empty((size + _SLACK + 7) // 8, dtype="<u8")
    whole[-(_SLACK // 8) - 1 :] = 0
    return whole.view(np.uint8)[:size]


def _aligned_words(buf: np.ndarray) -> np.ndarray:
    """``buf`` as aligned little-endian 64-bit words with :data:`_SLACK` bytes past its end
    (the allocation of :func:`_padded_bytes` itself, else a padded copy)."""
    base = buf.base
    while isinstance(base, np.ndarray) and base.dtype != np.uint64 and base.base is not None:
        base = base.base
    if (
        isinstance(base, np.ndarray) and base.dtype == np.dtype("<u8") and base.ndim == 1 and base.flags.c_contiguous
        and buf.ctypes.data == base.ctypes.data and base.size * 8 >= buf.size + _SLACK
    ):
        return base
    words = np.zeros((buf.size + _SLACK + 7) // 8, dtype="<u8")
    words.view(np.uint8)[: buf.size] = buf
    return words


def _index_entries(span: np.ndarray, span_offset: int, bio: Any, offset: int, channel_id: int, chunk: Any
                   ) -> memoryview:
    """The (log time, offset) pairs (16 bytes each, little-endian) of one message index
    record, from ``span`` (the file bytes read from ``span_offset``) when it holds the
    record, else read from the file."""
    rel = offset - span_offset
    if 0 <= rel and rel + _INDEX_HEAD.size <= span.size:
        opcode, _, index_channel, entries_len = _INDEX_HEAD.unpack_from(span, rel)  # type: ignore[call-overload]
        begin = rel + _INDEX_HEAD.size
        entries = memoryview(span)[begin : begin + entries_len]  # type: ignore[arg-type]
    else:
        bio.seek(offset)
        head = bio.read(_INDEX_HEAD.size)
        if len(head) != _INDEX_HEAD.size:
            raise ValueError(f"message index of chunk at offset {chunk.chunk_start_offset}, channel {channel_id} "
                             "is truncated")
        opcode, _, index_channel, entries_len = _INDEX_HEAD.unpack(head)
        entries = memoryview(bio.read(entries_len))
    if opcode != 0x07 or index_channel != channel_id or entries_len % 16:
        raise ValueError(f"message index of chunk at offset {chunk.chunk_start_offset}, channel {channel_id} "
                         "is invalid")
    if len(entries) != entries_len:
        raise ValueError(f"message index of chunk at offset {chunk.chunk_start_offset}, channel {channel_id} "
                         "is truncated")
    return entries


def _indexed_chunk_messages(
    span: np.ndarray, span_offset: int, bio: Any, chunk: Any, channels: Mapping[int, str]
) -> list[tuple[int, memoryview]] | None:
    """(channel id, its (log time, offset) pairs as :func:`_index_entries` gives them) of
    the wanted channels' messages by the chunk's message indexes, one entry per channel;
    unchecked (see :func:`_check_entries`). None when a wanted channel has messages but no index."""
    out = []
    for channel_id in channels:
        index_offset = chunk.message_index_offsets.get(channel_id)
        if index_offset is None:
            if chunk.channel_count.get(channel_id, 0):
                return None
            continue
        out.append((channel_id, _index_entries(span, span_offset, bio, index_offset, channel_id, chunk)))
    return out


def _walked_chunk_messages(
    records: np.ndarray, chunk: Any, channels: Mapping[int, str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(channel ids, log times, record offsets in the chunk) of the wanted channels'
    messages, in record order, for a chunk without message indexes: its records walked
    one by one."""
    found: tuple[list[int], list[int], list[int]] = ([], [], [])
    unpack_len = struct.Struct("<Q").unpack_from
    unpack_msg = struct.Struct("<H4xQ").unpack_from
    end = records.size
    pos = 0
    while pos < end:
        (length,) = unpack_len(records, pos + 1)
        record = pos
        pos += 9 + length
        if pos > end:
            raise ValueError(f"record overruns chunk at offset {chunk.chunk_start_offset}")
        if records[record] == 0x05:
            channel_id, log_time = unpack_msg(records, record + 9)
            if channel_id in channels:
                found[0].append(channel_id)
                found[1].append(log_time)
                found[2].append(record)
    return tuple(np.asarray(column, dtype=np.int64) for column in found)  # type: ignore[return-value]


def _check_entries(
    buf: np.ndarray, base: np.ndarray, chunk_size: np.ndarray, channel: np.ndarray | int, log_time: np.ndarray,
    offset: np.ndarray, name: Callable[[int], str],
) -> tuple[np.ndarray, np.ndarray]:
    """Check every index entry against the record it points at (opcode, channel, log time,
    length within its chunk); return the payloads' (starts in ``buf``, sizes).

    Entry i points at ``offset[i]`` of a chunk whose ``chunk_size[i]`` record bytes start at
    ``base[i]`` of ``buf``. The heads are read as aligned 64-bit words (numpy gathers
    unaligned values one costly call each) and their fields shifted out.

    Raises:
        ValueError: an entry disagrees (a corrupt file), naming its chunk and channel (``name(i)``).
    """
    inside = (offset >= 0) & (offset + _MESSAGE_HEAD <= chunk_size)
    all_inside = bool(inside.all())
    where = base + (offset if all_inside else np.where(inside, offset, 0))
    if where.size and int(where.max()) > buf.size - 23:  # past the last opcode .. log time
        raise ValueError("a message index entry points past the chunks' records")
    words = _aligned_words(buf)
    word = where >> 3
    shift = ((where & 7) << 3).view(np.uint64)
    back = np.uint64(63) - shift
    one = np.uint64(1)
    w0, w1, w2, w3 = words[word], words[word + 1], words[word + 2], words[word + 3]
    # Bytes 0-7, 8-15 and 16-23 of each record: (low >> shift) | (high << (64 - shift)), in
    # two steps so that a shift of 0 keeps the low word alone.
    x0 = (w0 >> shift) | ((w1 << one) << back)
    x1 = (w1 >> shift) | ((w2 << one) << back)
    x2 = (w2 >> shift) | ((w3 << one) << back)
    length = ((x0 >> np.uint64(8)) | (x1 << np.uint64(56))).view(np.int64)
    record_channel = (x1 >> np.uint64(8)) & np.uint64(0xFFFF)
    record_time = (x1 >> np.uint64(56)) | (x2 << np.uint64(8))
    bad = (x0 & np.uint64(0xFF)) != np.uint64(0x05)
    bad |= record_channel.view(np.int64) != channel
    bad |= record_time != log_time.view(np.uint64)
    bad |= length < _MESSAGE_HEAD - 9
    bad |= length > chunk_size - offset - 9
    if not all_inside:
        bad |= ~inside
    if bad.any():
        raise ValueError(f"message index of {name(int(np.argmax(bad)))} disagrees with the chunk's records")
    return where + _MESSAGE_HEAD, length - (_MESSAGE_HEAD - 9)


def _read_mcap_chunks(bio: Any, chunks: Sequence[Any], channels: Mapping[int, str], start: int, stop: int
                      ) -> dict[str, _Raw]:
    """The wanted messages of ``chunks``, each read with its message indexes in one call.

    The index entries of each topic are gathered in one run (chunk by chunk, channel by
    channel), so the topics' messages come out as slices of one checked array."""
    spans = [c.chunk_length + c.message_index_length for c in chunks]
    ends = np.cumsum(spans).tolist()
    file_buf = _padded_bytes(ends[-1])
    view = memoryview(file_buf)  # type: ignore[arg-type]
    got = []
    for chunk, span, end in zip(chunks, spans, ends, strict=True):
        bio.seek(chunk.chunk_start_offset)
        got.append(bio.readinto(view[end - span : end]) or 0)
        if got[-1] < min(span, _CHUNK_HEAD + len(chunk.compression) + chunk.compressed_size):
            raise ValueError(f"chunk at offset {chunk.chunk_start_offset} is truncated")
    # Uncompressed chunks are used where they were read; others are decompressed into one buffer.
    in_place = all(not c.compression for c in chunks)
    buf = file_buf if in_place else _padded_bytes(sum(c.uncompressed_size for c in chunks))
    topics = list(dict.fromkeys(channels.values()))
    # Per topic: its entries' bytes, and per run of them: count, chunk, channel (an int,
    # or an array for the entries of a walked chunk).
    entries: dict[str, list[Any]] = {t: [] for t in topics}
    runs: dict[str, list[tuple[int, int, Any]]] = {t: [] for t in topics}
    bases = []
    out_pos = 0
    for i, (chunk, span, end, read) in enumerate(zip(chunks, spans, ends, got, strict=True)):
        span_start = end - span
        head = span_start + _CHUNK_HEAD + len(chunk.compression)
        (crc,) = struct.unpack_from("<I", file_buf, span_start + 33)  # type: ignore[call-overload]
        raw = decompress(view[head : head + chunk.compressed_size], chunk.compression, chunk.uncompressed_size, crc)
        if in_place:
            bases.append(head)
        else:
            bases.append(out_pos)
            buf[out_pos : out_pos + chunk.uncompressed_size] = np.frombuffer(raw, dtype=np.uint8)
            out_pos += chunk.uncompressed_size
        indexed = _indexed_chunk_messages(file_buf[span_start : span_start + read], chunk.chunk_start_offset, bio,
                                          chunk, channels)
        if indexed is not None:
            for channel_id, pairs in indexed:
                if len(pairs):
                    topic = channels[channel_id]
                    entries[topic].append(pairs)
                    runs[topic].append((len(pairs) // 16, i, channel_id))
            continue
        ids, times, offsets = _walked_chunk_messages(buf[bases[i] : bases[i] + chunk.uncompressed_size], chunk,
                                                     channels)
        for topic in topics:
            mine = np.flatnonzero(np.isin(ids, [c for c, t in channels.items() if t == topic]))
            if mine.size:
                entries[topic].append(np.stack([times[mine], offsets[mine]], axis=1).astype("<i8").tobytes())
                runs[topic].append((int(mine.size), i, ids[mine]))
    every_run = [run for topic in topics for run in runs[topic]]
    if not every_run:
        return {}
    pairs = np.frombuffer(b"".join([e for topic in topics for e in entries[topic]]), dtype="<i8").reshape(-1, 2)
    log_time, offset = pairs[:, 0].copy(), pairs[:, 1].copy()
    counts = np.fromiter((run[0] for run in every_run), dtype=np.int64, count=len(every_run))
    run_chunk = np.fromiter((run[1] for run in every_run), dtype=np.int64, count=len(every_run))
    channel_ids = [run[2] for run in every_run]
    channel: np.ndarray | int
    if any(isinstance(c, np.ndarray) for c in channel_ids):
        channel = np.concatenate([c if isinstance(c, np.ndarray) else np.full(n, c, dtype=np.int64)
                                  for n, c in zip(counts.tolist(), channel_ids, strict=True)])
    elif len(set(channel_ids)) == 1:
        channel = channel_ids[0]
    else:
        channel = np.repeat(np.asarray(channel_ids, dtype=np.int64), counts)
    run_ends = np.cumsum(counts)

    def name(entry: int) -> str:
        run = int(np.searchsorted(run_ends, entry, side="right"))
        channel_id = channel if isinstance(channel, int) else int(channel[entry])
        return f"chunk at offset {chunks[int(run_chunk[run])].chunk_start_offset}, channel {channel_id}"

    base = np.repeat(np.asarray(bases, dtype=np.int64)[run_chunk], counts)
    chunk_size = np.repeat(np.asarray([c.uncompressed_size for c in chunks], dtype=np.int64)[run_chunk], counts)
    starts, sizes = _check_entries(buf, base, chunk_size, channel, log_time, offset, name)
    within = (log_time >= start) & (log_time < stop)
    everything = bool(within.all())
    out = {}
    first = 0
    for topic in topics:
        last = first + sum(run[0] for run in runs[topic])
        if everything:
            keep: Any = slice(first, last)
        else:
            keep = first + np.flatnonzero(within[first:last])
        if last > first and (everything or keep.size):
            out[topic] = _Raw(log_time[keep], buf, starts[keep], sizes[keep])
        first = last
    return out


def _scan_mcap_chunks(
    source: _Source,
    topics: Sequence[str],
    start_ns: int | None,
    stop_ns: int | None,
    parts: dict[str, list[_Raw]],
) -> bool:
    """Append the raw messages of ``topics`` by reading MCAP chunks directly.

    rosbags' generic reader builds several objects per record; this reads the chunks
    that hold wanted messages into one buffer, checks them with rosbags' own
    ``decompress`` and finds the messages by the chunks' message indexes (numpy), or
    walks the records with ``struct.unpack_from`` when there are none. No message
    is copied out. Returns False (nothing appended) when the bag is not chunked MCAP,
    so the caller uses rosbags' reader instead. Messages come unordered; the caller
    sorts them.
    """
    storages = _storages_of(source.reader, McapReader)
    if storages is None or any(not s.chunks for s in storages if s.statistics and s.statistics.message_count):
        return False
    wanted = set(topics)
    start = -1 if start_ns is None else int(start_ns)
    stop = 2**63 if stop_ns is None else int(stop_ns)
    try:
        for storage in storages:
            channels = {}
            for conn in storage.connections:
                logical = source.logical_of.get(conn.topic)
                if logical in wanted:
                    channels[conn.id] = logical
            chunks = [
                chunk for chunk in storage.chunks
                if chunk.message_end_time >= start and chunk.message_start_time < stop
                and any(chunk.channel_count.get(cid, 0) for cid in channels)
            ]
            if not chunks:
                continue
            assert storage.bio is not None
            for topic, raw in _read_mcap_chunks(storage.bio, chunks, channels, start, stop).items():
                parts[topic].append(raw)
    except Exception as exc:  # noqa: BLE001 - rosbags ReaderError, zstd/lz4 and struct errors
        raise BagError(
            f"bag {source.label}: topic {', '.join(topics)}: cannot read (corrupt or truncated?): {exc}"
        ) from exc
    return True


def load_metadata_yaml(meta: Path, cache: dict[Path, Any] | None = None) -> Any:
    """The parsed YAML of a bag's ``metadata.yaml`` (libyaml's parser when PyYAML has it).

    With ``cache``, a file is parsed once for everyone given that cache (a replay job
    reads labels and opens the bag from the same file): the result is shared, read only.

    Raises:
        OSError, UnicodeDecodeError, yaml.YAMLError: as reading and parsing the file do.
    """
    if cache is not None and meta in cache:
        return cache[meta]
    info = yaml.load(meta.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe
    if cache is not None:
        cache[meta] = info
    return info


def _open_reader(bag_path: Path, metadata_cache: dict[Path, Any] | None = None) -> Reader:
    """rosbags' Reader of one bag, opened.

    A bag directory of one uncompressed MCAP file opens the file itself when the
    file's summary agrees with metadata.yaml on every topic, type, count and the time
    range (then the two readers give the same topics, connections and messages):
    rosbags reads metadata.yaml with a pure-Python YAML parser, most of an open's
    time. Anything else, or any doubt, opens the bag as rosbags does.
    """
    single = _single_mcap(bag_path, metadata_cache)
    if single is not None:
        file_path, info = single
        reader = Reader(file_path)
        try:
            reader.open()
            if _summary_agrees(reader, info):
                return reader
            reader.close()
        except Exception:  # noqa: BLE001 - the bag is opened as rosbags does, which reports the error
            if reader.is_open:
                reader.close()
    reader = Reader(bag_path)
    reader.open()
    return reader


def _single_mcap(bag_path: Path, metadata_cache: dict[Path, Any] | None = None) -> tuple[Path, dict[str, Any]] | None:
    """(the MCAP file, bag information) of a bag directory of one uncompressed MCAP file."""
    meta = bag_path / "metadata.yaml"
    if not meta.is_file():
        return None
    try:
        info = load_metadata_yaml(meta, metadata_cache)["rosbag2_bagfile_information"]
        files = info["relative_file_paths"]
        if (
            not isinstance(info["version"], int) or info["version"] > 9 or info["storage_identifier"] != "mcap"
            or info.get("compression_mode") not in (None, "", "none", "NONE") or len(files) != 1
        ):
            return None
        file_path = bag_path / PurePath(files[0]).name
        return (file_path, info) if file_path.suffix == ".mcap" and file_path.is_file() else None
    except Exception:  # noqa: BLE001 - anything unexpected: rosbags reads the bag
        return None


def _summary_agrees(reader: Reader, info: dict[str, Any]) -> bool:
    """Whether an MCAP file's reader sees what rosbags' reader of its bag directory would."""
    count = info["message_count"]
    start = info["starting_time"]["nanoseconds_since_epoch"]
    end = start + info["duration"]["nanoseconds"] + 1
    topics = [(t["topic_metadata"]["name"], t["topic_metadata"]["type"], t["topic_metadata"]["serialization_format"],
               t["message_count"]) for t in info["topics_with_message_count"]]
    return (
        [(c.topic, c.msgtype, c.ext.serialization_format, c.msgcount) for c in reader.connections] == topics
        and reader.message_count == count
        and (not count or (reader.start_time, reader.end_time) == (start, end))
    )


def open_bags(
    paths: Sequence[Path | str] | Path | str,
    *,
    topic_maps: Sequence[Mapping[str, str] | None] | None = None,
    typestore: Typestore | None = None,
    metadata_cache: dict[Path, Any] | None = None,
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
        metadata_cache: shared with :func:`load_metadata_yaml` by a caller that reads
            the bags' metadata.yaml too (parsed once).

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
                    reader = _open_reader(bag_path, metadata_cache)
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


# -- small message types, decoded directly ------------------------------------------
INJECTION_ARRAY = "sim_real_bridge/msg/InjectionArray"
TIME = "builtin_interfaces/msg/Time"
_STRING = (Nodetype.BASE, ("string", 0))
_FLOAT64 = (Nodetype.BASE, ("float64", 0))
#: The field definitions :func:`injection_array_parser` decodes (as a typestore holds them).
_INJECTION_FIELDS = {
    INJECTION_ARRAY: [("header", (Nodetype.NAME, "std_msgs/msg/Header")), ("scenario", _STRING),
                      ("elapsed_s", _FLOAT64),
                      ("injections", (Nodetype.SEQUENCE, ((Nodetype.NAME, "sim_real_bridge/msg/Injection"), 0)))],
    "sim_real_bridge/msg/Injection": [
        ("category", _STRING), ("kind", _STRING), ("start_s", _FLOAT64), ("end_s", _FLOAT64),
        ("effect_start_s", _FLOAT64), ("active", (Nodetype.BASE, ("bool", 0))),
        ("params", (Nodetype.SEQUENCE, ((Nodetype.NAME, "diagnostic_msgs/msg/KeyValue"), 0)))],
    "diagnostic_msgs/msg/KeyValue": [("key", _STRING), ("value", _STRING)],
    "std_msgs/msg/Header": [("stamp", (Nodetype.NAME, TIME)), ("frame_id", _STRING)],
    TIME: [("sec", (Nodetype.BASE, ("int32", 0))), ("nanosec", (Nodetype.BASE, ("uint32", 0)))],
}
_U32 = struct.Struct("<I")
_TIME = struct.Struct("<iI")
_F64 = struct.Struct("<d")
_INJECTION_VALUES = struct.Struct("<3d?")


def _cdr_string(body: bytes, pos: int) -> tuple[str, int]:
    """(string, position after it) at ``pos`` (aligned) of a CDR payload.

    Raises:
        ValueError: where rosbags' deserializer refuses the string.
    """
    (size,) = _U32.unpack_from(body, pos)
    end = pos + 4 + size
    if size < 1 or end > len(body) or body[end - 1] != 0:
        raise ValueError("bad string")
    return body[pos + 4 : end - 1].decode(), end


def _fields_are(typestore: Typestore, expected: Mapping[str, list[tuple[str, Any]]]) -> bool:
    """Whether ``typestore`` defines each type of ``expected`` with exactly those fields."""
    try:
        return all(list(typestore.fielddefs[name][1]) == fields for name, fields in expected.items())
    except (KeyError, TypeError, IndexError):
        return False


def _sequence_length(body: bytes, pos: int, max_count: int) -> tuple[int, int]:
    """(the length of the CDR sequence at ``pos``, where its items start).

    Raises:
        ValueError: a length rosbags refuses (over ``max_count``, or more items than bytes left).
    """
    (count,) = _U32.unpack_from(body, pos)
    pos += 4
    if pos + count > len(body) or count > max_count:
        raise ValueError("bad sequence")
    return count, pos


def injection_array_parser(typestore: Typestore) -> Callable[[bytes], Any] | None:
    """A parser of sim_real_bridge/msg/InjectionArray CDR bytes into the message rosbags'
    deserializer makes of them (its classes, equal values), or None for a typestore that
    defines these types otherwise.

    rosbags' generated deserializer costs ~0.2 M instructions per message (one call and
    one object per nested message). The parser returns None for any message rosbags would
    refuse or that is not little-endian (deserialize that one with rosbags). The
    injections that follow ``elapsed_s`` repeat from message to message: each distinct
    run of those bytes is decoded once and its Injection objects are shared by the
    messages holding it (read them, do not change them).
    """
    if not _fields_are(typestore, _INJECTION_FIELDS):
        return None
    types = typestore.types
    array_cls, injection_cls = types[INJECTION_ARRAY], types["sim_real_bridge/msg/Injection"]
    key_value_cls, header_cls, time_cls = (
        types["diagnostic_msgs/msg/KeyValue"], types["std_msgs/msg/Header"], types[TIME])
    max_count = typestore.max_sequence_length
    decoded: dict[bytes, list[Any]] = {}

    def injections_of(tail: bytes) -> list[Any]:
        # ``tail`` starts 8-byte aligned (after elapsed_s), so alignment within it is as in the message.
        count, pos = _sequence_length(tail, 0, max_count)
        out = []
        for _ in range(count):
            category, pos = _cdr_string(tail, (pos + 3) & -4)
            kind, pos = _cdr_string(tail, (pos + 3) & -4)
            pos = (pos + 7) & -8
            start_s, end_s, effect_start_s, active = _INJECTION_VALUES.unpack_from(tail, pos)
            n_params, pos = _sequence_length(tail, (pos + 25 + 3) & -4, max_count)
            params = []
            for _ in range(n_params):
                key, pos = _cdr_string(tail, (pos + 3) & -4)
                value, pos = _cdr_string(tail, (pos + 3) & -4)
                params.append(key_value_cls(key, value))
            out.append(injection_cls(category, kind, start_s, end_s, effect_start_s, active, params))
        if pos + 3 < len(tail):  # rosbags: more than padding after the message
            raise ValueError("trailing bytes")
        return out

    def parse(data: bytes) -> Any:
        if len(data) < 4 or data[:2] != _CDR_LE:
            return None
        body = bytes(data[4:])
        try:
            sec, nanosec = _TIME.unpack_from(body, 0)
            frame_id, pos = _cdr_string(body, 8)
            scenario, pos = _cdr_string(body, (pos + 3) & -4)
            pos = (pos + 7) & -8
            (elapsed_s,) = _F64.unpack_from(body, pos)
            tail = body[pos + 8 :]
            injections = decoded.get(tail)
            if injections is None:
                injections = decoded[tail] = injections_of(tail)
        except (struct.error, UnicodeDecodeError, ValueError):
            return None
        return array_cls(header_cls(time_cls(sec, nanosec), frame_id), scenario, elapsed_s, list(injections))

    return parse


def time_parser(typestore: Typestore) -> Callable[[bytes], Any] | None:
    """A parser of builtin_interfaces/msg/Time CDR bytes into rosbags' message (None for a
    typestore that defines Time otherwise); it returns None for a message rosbags would
    refuse or that is not little-endian."""
    if not _fields_are(typestore, {TIME: _INJECTION_FIELDS[TIME]}):
        return None
    time_cls = typestore.types[TIME]

    def parse(data: bytes) -> Any:
        if not 12 <= len(data) <= 15 or data[:2] != _CDR_LE:
            return None
        return time_cls(*_TIME.unpack_from(data, 4))

    return parse


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


def _equal_rows(rows: np.ndarray, template: np.ndarray) -> np.ndarray:
    """Whether each row equals ``template``, compared 8 (or 4) bytes at a time where it is
    long enough: numpy's per-row reduction over many single bytes costs more than the bytes.
    Several words are XORed and OR-reduced per row (a third of the instructions of ``==``
    then ``all``)."""
    width = template.size
    if width < 4:
        return (rows == template).all(axis=1)
    word = "<u8" if width >= 8 else "<u4"
    size = 8 if width >= 8 else 4
    whole = width - width % size
    if whole == size:
        ok = rows[:, :size].view(word).ravel() == template[:size].view(word)[0]
    else:
        ok = np.bitwise_or.reduce(rows[:, :whole].view(word) ^ template[:whole].view(word), axis=1) == 0
    if whole < width:  # the last word, overlapping the ones compared already
        ok &= rows[:, -size:].view(word).ravel() == template[-size:].view(word)[0]
    return ok


#: Bytes gathered before each message: CDR aligns 8-byte values relative to the payload
#: after the 4-byte encapsulation header, so rows that start 4 bytes early (and are a
#: multiple of 8 bytes long) hold every float64 and every compared word 8-byte aligned.
_LEAD = 4


def _rows_at(buf: np.ndarray, starts: np.ndarray, width: int) -> tuple[np.ndarray, int]:
    """(rows, lead): the ``width`` bytes of ``buf`` from each of ``starts`` as the columns
    ``lead : lead + width`` of (n, k) uint8 rows.

    Each row is gathered as one opaque item (one copy each: rows of a (n, width) byte
    view are copied byte by byte). Rows start :data:`_LEAD` bytes early and are padded to
    a multiple of 8 bytes where ``buf`` has those bytes: numpy's word compares and float
    copies on unaligned data go through buffers, several times the instructions.
    """
    lead, span = _LEAD, (width + _LEAD + 7) & -8
    if not starts.size or int(starts.min()) < lead or int(starts.max()) - lead + span > buf.size:
        lead, span = 0, width
    items = np.ndarray((max(buf.size - span + 1, 0),), dtype=np.dtype((np.void, span)), buffer=buf, strides=(1,))
    return items[starts - lead if lead else starts].view(np.uint8).reshape(starts.size, span), lead


def _word_masks(span: int, lead: int, width: int, variable: Sequence[tuple[int, int]]) -> np.ndarray:
    """Per 8-byte word of a row (``span`` bytes, the message at ``lead``): the mask of its
    bytes compared with the template, those of the message outside the ``variable`` regions."""
    mask = np.zeros(span, dtype=np.uint8)
    mask[lead : lead + width] = 0xFF
    for begin, end in variable:
        mask[lead + begin : lead + end] = 0
    return mask.view("<u8")


@dataclass(frozen=True)
class _WordCompare:
    """How :func:`_rows_differ` compares word-padded rows of one span and lead: runs of
    whole template words (first, last) and single words of which a mask is compared."""

    expected: np.ndarray
    mask: np.ndarray
    runs: list[tuple[int, int]]
    partial: list[int]

    @classmethod
    def of(cls, span: int, lead: int, template: np.ndarray, variable: Sequence[tuple[int, int]]
           ) -> _WordCompare | None:
        """The comparison of rows of ``span`` bytes with the message at ``lead``; None
        when they are not word-padded (see :func:`_rows_at`)."""
        if not lead or span % 8:
            return None
        padded = np.zeros(span, dtype=np.uint8)
        padded[lead : lead + template.size] = template
        mask = _word_masks(span, lead, template.size, variable)
        full = mask == np.uint64(2**64 - 1)
        whole = np.flatnonzero(full)
        runs = [(int(run[0]), int(run[-1]) + 1) for run in np.split(whole, np.flatnonzero(np.diff(whole) != 1) + 1)
                if run.size]
        return cls(padded.view("<u8"), mask, runs, np.flatnonzero(~full & (mask != 0)).tolist())


def _rows_differ(rows: np.ndarray, lead: int, template: np.ndarray, variable: Sequence[tuple[int, int]],
                 compare: _WordCompare | None = None) -> np.ndarray:
    """Whether each row differs from ``template`` (at ``lead``) outside the ``variable`` regions.

    Word-padded rows (see :func:`_rows_at`) are compared one word column at a time for
    all rows: numpy runs one loop per column instead of one short loop per row (the
    per-row loop overhead costs several times the compares). ``compare`` is
    ``_WordCompare.of`` these rows' span, lead, template and regions, when known.
    """
    count, span = rows.shape
    width = template.size
    if compare is None:
        compare = _WordCompare.of(span, lead, template, variable)
    if compare is None or rows.ctypes.data % 8:
        ok = np.ones(count, dtype=bool)
        pos = 0
        for begin, end in [*variable, (width, width)]:
            if begin > pos:
                ok &= _equal_rows(rows[:, lead + pos : lead + begin], template[pos:begin])
            pos = max(pos, end)
        return ~ok
    words = rows.view("<u8")
    expected, mask = compare.expected, compare.mask
    differ = np.empty((sum(last - first for first, last in compare.runs) + len(compare.partial), count), dtype=bool)
    row = 0
    for first, last in compare.runs:
        # Compared as a transposed copy: numpy's compare of strided words costs more than the copy.
        columns = np.ascontiguousarray(words[:, first:last].T)
        np.not_equal(columns, expected[first:last, None], out=differ[row : row + last - first])
        row += last - first
    for j in compare.partial:
        np.not_equal(words[:, j] & mask[j], expected[j] & mask[j], out=differ[row])
        row += 1
    return np.logical_or.reduce(differ, axis=0) if row else np.zeros(count, dtype=bool)


def _copy_floats(rows: np.ndarray, begin: int, out: np.ndarray) -> None:
    """Copy the ``out.shape[1]`` float64 at byte ``begin`` of each row into ``out``; one
    column at a time where they are aligned (see :func:`_rows_at`): a copy of a (rows, n)
    block runs one short loop per row, several times the copy."""
    n = out.shape[1]
    if begin % 8 or rows.shape[1] % 8 or rows.ctypes.data % 8:
        out[...] = rows[:, begin : begin + 8 * n].view("<f8")
        return
    floats = rows.view("<f8")
    first = begin // 8
    for k in range(n):
        out[:, k] = floats[:, first + k]


def _columns(values: np.ndarray, picks: Sequence[int]) -> np.ndarray:
    """``values[:, picks]`` as a new C-contiguous float64 array, copied one column at a time
    (see :func:`_copy_floats`)."""
    out = np.empty((values.shape[0], len(picks)), dtype=np.float64)
    for k, j in enumerate(picks):
        out[:, k] = values[:, j]
    return out


#: Bytes of rows gathered and decoded at a time: the column passes over them then read
#: the processor's cache, not memory.
_BLOCK_BYTES = 1 << 20


def _batch(
    buf: np.ndarray, starts: np.ndarray, layout: _Layout, template: np.ndarray
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Check the messages at ``starts`` against the template outside the stamp and float
    regions; decode the matching ones (in blocks of rows, see :data:`_BLOCK_BYTES`)."""
    width = template.size
    count = starts.size
    variable = sorted([(4, 12), *((offset, offset + 8 * n) for offset, n in layout.regions.values())])
    ok = np.empty(count, dtype=bool)
    sec = np.empty(count, dtype=np.int64)
    nanosec = np.empty(count, dtype=np.int64)
    floats = {name: np.empty((count, n), dtype=np.float64) for name, (_, n) in layout.regions.items()}
    compares: dict[int, _WordCompare | None] = {}
    step = max(1, _BLOCK_BYTES // (width + 16))
    kept = 0
    for first in range(0, count, step):
        rows, lead = _rows_at(buf, starts[first : first + step], width)
        if lead not in compares:
            compares[lead] = _WordCompare.of(rows.shape[1], lead, template, variable)
        differ = _rows_differ(rows, lead, template, variable, compares[lead])
        ok[first : first + step] = ~differ
        good = rows[~differ] if differ.any() else rows
        end = kept + good.shape[0]
        sec[kept:end] = good[:, lead + 4 : lead + 8].view("<i4")[:, 0]
        nanosec[kept:end] = good[:, lead + 8 : lead + 12].view("<u4")[:, 0]
        for name, (offset, _) in layout.regions.items():
            _copy_floats(good, lead + offset, floats[name][kept:end])
        kept = end
    return ok, {"sec": sec[:kept], "nanosec": nanosec[:kept], **{name: v[:kept] for name, v in floats.items()}}


# Distinct byte templates tried per serialized length before the rest goes one by one.
_MAX_TEMPLATES = 8


def _fast_batches(
    raw: _Raw, parse: Any, accept: Any
) -> Iterator[tuple[np.ndarray, _Layout, dict[str, np.ndarray]]]:
    """Yield (message indices, layout, decoded arrays) for every batch the fast path takes.

    Messages are batched by serialized length. ``parse(buf) -> _Layout`` may raise
    ValueError/struct.error for layouts it does not know; ``accept(buf, layout, out) ->
    bool`` checks the template message's decoded row 0 against rosbags. Messages not
    yielded are left to the per-message path.
    """
    sizes = raw.size
    lengths = sizes[:1].tolist() if sizes.size and (sizes == sizes[0]).all() else np.unique(sizes).tolist()
    for length in lengths:
        if length < 16:
            continue  # too short for a header: rosbags' deserializer reports it
        index = np.flatnonzero(raw.size == length)
        starts = raw.start[index]
        remaining = np.arange(index.size)
        tried = 0
        while remaining.size and tried < _MAX_TEMPLATES:
            tried += 1
            first = int(remaining[0])
            sample = raw[int(index[first])]
            try:
                layout = parse(sample)
            except (ValueError, struct.error, UnicodeDecodeError):
                remaining = remaining[1:]
                continue
            candidates = starts if remaining.size == index.size else starts[remaining]
            ok, out = _batch(raw.buf, candidates, layout, np.frombuffer(sample, dtype=np.uint8))
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


def _decode_joint_states(bags: BagSet, topic: str, raw: _Raw) -> JointStateColumns:
    count = len(raw)
    recv_ns = raw.recv_ns
    names = tuple(bags._deserialize(raw[0], JOINT_STATE, topic).name)
    width = len(names)
    fields = ("position", "velocity", "effort")
    stamp = np.empty(count, dtype=np.int64)
    columns: dict[str, np.ndarray] = {}
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

    for target, layout, out in _fast_batches(raw, _layout_joint_state, accept):
        group_names = layout.extra["names"]
        perm = [group_names.index(n) for n in names]
        in_order = perm == list(range(width))
        everything = target.size == count  # one batch of every message, in order: no scatter
        if everything:
            stamp = _stamp_ns(out["sec"], out["nanosec"])
        else:
            stamp[target] = _stamp_ns(out["sec"], out["nanosec"])
        for field_name in fields:
            if layout.regions[field_name][1] == width:
                if everything:
                    columns[field_name] = out[field_name] if in_order else _columns(out[field_name], perm)
                else:
                    _nan_column(columns, field_name, count, width)[target] = out[field_name][:, perm]
        done[target] = True
    slow = np.flatnonzero(~done)
    for i in slow:
        msg = bags._deserialize(raw[i], JOINT_STATE, topic)
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
                _nan_column(columns, field_name, count, width)[i] = values[perm_list]
            elif values.size != 0:
                raise BagError(
                    f"topic {topic} in bag(s) {', '.join(bags.labels)}: {field_name} has {values.size} values "
                    f"for {width} joints at log time {int(recv_ns[i])} ns"
                )
    position, velocity, effort = (_nan_column(columns, f, count, width) for f in fields)
    return JointStateColumns(stamp, recv_ns, names, position, velocity, effort, int(slow.size))


def _nan_column(columns: dict[str, np.ndarray], name: str, count: int, width: int) -> np.ndarray:
    """``columns[name]``, created all NaN (no values) when missing."""
    if name not in columns:
        columns[name] = np.full((count, width), np.nan)
    return columns[name]


def _decode_fixed(
    bags: BagSet, topic: str, raw: _Raw, msgtype: str, count: int, extract: Any
) -> tuple[np.ndarray, np.ndarray, str, int]:
    """Decode a header + ``count`` float64 message type; returns (stamp, values, frame_id, slow)."""
    n = len(raw)
    frame_id = bags._deserialize(raw[0], msgtype, topic).header.frame_id
    stamp = np.empty(n, dtype=np.int64)
    values = np.empty((n, count), dtype=np.float64)
    done = np.zeros(n, dtype=bool)

    def accept(sample: bytes, layout: _Layout, out: dict[str, np.ndarray]) -> bool:
        msg = bags._deserialize(sample, msgtype, topic)
        return _stamp_matches(msg, out) and _bits_equal(extract(msg), out["values"][0])

    for target, _, out in _fast_batches(raw, _layout_fixed(count), accept):
        if target.size == n:  # one batch of every message, in order: no scatter
            stamp, values = _stamp_ns(out["sec"], out["nanosec"]), out["values"]
        else:
            stamp[target] = _stamp_ns(out["sec"], out["nanosec"])
            values[target] = out["values"]
        done[target] = True
    slow = np.flatnonzero(~done)
    for i in slow:
        msg = bags._deserialize(raw[i], msgtype, topic)
        stamp[i] = msg.header.stamp.sec * NS_PER_S + msg.header.stamp.nanosec
        values[i] = extract(msg)
    return stamp, values, frame_id, int(slow.size)


def _wrench_values(msg: Any) -> list[float]:
    f, t = msg.wrench.force, msg.wrench.torque
    return [f.x, f.y, f.z, t.x, t.y, t.z]


def _pose_values(msg: Any) -> list[float]:
    p, q = msg.pose.position, msg.pose.orientation
    return [p.x, p.y, p.z, q.x, q.y, q.z, q.w]


def _decode_wrenches(bags: BagSet, topic: str, raw: _Raw) -> WrenchColumns:
    stamp, values, frame_id, slow = _decode_fixed(bags, topic, raw, WRENCH_STAMPED, 6, _wrench_values)
    return WrenchColumns(stamp, raw.recv_ns, frame_id, _columns(values, [0, 1, 2]), _columns(values, [3, 4, 5]), slow)


def _decode_poses(bags: BagSet, topic: str, raw: _Raw) -> PoseColumns:
    stamp, values, frame_id, slow = _decode_fixed(bags, topic, raw, POSE_STAMPED, 7, _pose_values)
    return PoseColumns(stamp, raw.recv_ns, frame_id, _columns(values, [0, 1, 2]), _columns(values, [6, 3, 4, 5]),
                       slow)


def _imu_values(msg: Any) -> list[float]:
    q, w, a = msg.orientation, msg.angular_velocity, msg.linear_acceleration
    return [
        q.x, q.y, q.z, q.w, *msg.orientation_covariance,
        w.x, w.y, w.z, *msg.angular_velocity_covariance,
        a.x, a.y, a.z, *msg.linear_acceleration_covariance,
    ]


def _decode_imus(bags: BagSet, topic: str, raw: _Raw) -> ImuColumns:
    stamp, values, frame_id, slow = _decode_fixed(bags, topic, raw, IMU, 37, _imu_values)
    return ImuColumns(
        stamp, raw.recv_ns, frame_id, _columns(values, [3, 0, 1, 2]), _columns(values, [13, 14, 15]),
        _columns(values, [25, 26, 27]), slow,
    )


_DECODERS = {
    IMU: _decode_imus,
    JOINT_STATE: _decode_joint_states,
    WRENCH_STAMPED: _decode_wrenches,
    POSE_STAMPED: _decode_poses,
}
