"""Open rosbag2 bags and bare MCAP files as one set of logical topics merged by log time.

A bag is a rosbag2 directory (metadata.yaml and its files, split or not), a directory of
storage files without metadata.yaml, an MCAP file (with or without rosbag2's metadata;
found by its magic bytes whatever its name) or an sqlite3 ``.db3`` file. MCAP files are
read by :mod:`~sim_real_bridge.offline.bags.mcap_columns`; sqlite3 files and compressed
bag directories by rosbags (:mod:`~sim_real_bridge.offline.bags.rosbags_storage`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import numpy as np
import yaml
from rosbags.typesys import get_types_from_idl, get_types_from_msg
from rosbags.typesys.store import Typestore

from sim_real_bridge.capture.typestore import build_typestore, new_typestore
from sim_real_bridge.errors import BagError
from sim_real_bridge.offline.bags.cdr_layout import message_end
from sim_real_bridge.offline.bags.columns import Columns, check_column_type, columns_from_raw
from sim_real_bridge.offline.bags.mcap_columns import McapFile
from sim_real_bridge.offline.bags.raw import CDR, RawMessages, Storage
from sim_real_bridge.offline.bags.rosbags_storage import RosbagsStorage

MCAP_MAGIC = b"\x89MCAP0\r\n"
SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class TopicInfo:
    """One logical topic of a BagSet: its type, count, the bags holding it and its encoding."""

    topic: str
    msgtype: str
    message_count: int
    bags: tuple[str, ...]
    encoding: str = CDR


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


def _magic(path: Path) -> str:
    """``.mcap``, ``.db3`` or '' by the file's first bytes."""
    try:
        with path.open("rb") as handle:
            head = handle.read(16)
    except OSError as exc:
        raise BagError(f"bag {path}: cannot open: {exc.strerror or exc}") from exc
    if head.startswith(MCAP_MAGIC):
        return ".mcap"
    return ".db3" if head.startswith(SQLITE_MAGIC) else ""


def _open_file(path: Path, label: str) -> Storage:
    """One storage file, by its suffix or its magic bytes."""
    kind = path.suffix if path.suffix in (".mcap", ".db3") else _magic(path)
    if kind == ".mcap":
        return McapFile(path, label)
    if kind == ".db3" and path.suffix == ".db3":
        return RosbagsStorage(path, label)
    if kind == ".db3":
        raise BagError(f"bag {path}: looks like an sqlite3 bag; rename it to end in .db3")
    raise BagError(f"bag {path}: not a rosbag2 bag (neither an MCAP nor an sqlite3 file, nor a bag directory)")


def _open_directory(path: Path, metadata_cache: dict[Path, Any] | None) -> list[Storage]:
    """A rosbag2 directory: its MCAP files read directly when uncompressed, else with rosbags."""
    label = str(path)
    info = load_metadata_yaml(path / "metadata.yaml", metadata_cache)["rosbag2_bagfile_information"]
    files = [path / PurePath(name).name for name in info.get("relative_file_paths") or []]
    plain = info.get("compression_mode") in (None, "", "none", "NONE")
    if info.get("storage_identifier") == "mcap" and plain and files and all(f.suffix == ".mcap" for f in files):
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise BagError(f"bag {label}: file(s) {', '.join(missing)} listed in metadata.yaml do not exist")
        return [McapFile(file, label) for file in files]
    return [RosbagsStorage(path, label)]


def _open_path(path: Path, metadata_cache: dict[Path, Any] | None) -> list[Storage]:
    """The storages of one path the user gave."""
    if not path.exists():
        raise BagError(f"bag {path} does not exist")
    if path.name == "metadata.yaml" and path.is_file():
        path = path.parent
    if path.is_dir() and not (path / "metadata.yaml").is_file():
        files = sorted(p for p in path.iterdir() if p.suffix in (".mcap", ".db3") and p.is_file())
        if not files:
            raise BagError(f"bag {path}: directory has no metadata.yaml and no .mcap or .db3 file")
        return [storage for file in files for storage in _open_path(file, metadata_cache)]
    try:
        return _open_directory(path, metadata_cache) if path.is_dir() else [_open_file(path, str(path))]
    except BagError:
        raise
    except Exception as exc:  # noqa: BLE001 - mcap, rosbags, YAML and OS errors alike
        raise BagError(f"bag {path}: cannot open (corrupt or truncated?): {exc}") from exc


def _register_bag_types(typestore: Typestore, storages: Iterable[Storage]) -> set[str]:
    """Register the ROS 2 types the bags define and the typestore lacks; return those still unknown."""
    unknown: set[str] = set()
    for channel in (c for s in storages for c in s.channels.values()):
        if channel.encoding != CDR or channel.msgtype in typestore.types:
            continue
        try:
            if channel.definition_format == "ros2msg" and channel.definition:
                typestore.register(get_types_from_msg(channel.definition, channel.msgtype))
            elif channel.definition_format == "ros2idl" and channel.definition:
                typestore.register(get_types_from_idl(channel.definition))
        except Exception:  # noqa: BLE001, S110 - an unparsable definition leaves the type unknown
            pass
        if channel.msgtype not in typestore.types:
            unknown.add(channel.msgtype)
    return unknown


def open_bags(
    paths: Sequence[Path | str] | Path | str,
    *,
    topic_maps: Sequence[Mapping[str, str] | None] | None = None,
    typestore: Typestore | None = None,
    metadata_cache: dict[Path, Any] | None = None,
) -> BagSet:
    """Open bags: rosbag2 directories (split or not), MCAP files (bare or rosbag2's), ``.db3`` files.

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
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not paths:
        raise BagError("no bag given")
    if topic_maps is not None and len(topic_maps) != len(paths):
        raise BagError(f"{len(topic_maps)} topic maps for {len(paths)} bags")
    sources: list[tuple[Storage, dict[str, str]]] = []
    try:
        for index, raw_path in enumerate(paths):
            mapping = dict(topic_maps[index] or {}) if topic_maps is not None else {}
            storages = _open_path(Path(raw_path), metadata_cache)
            missing = sorted(set(mapping) - {c.topic for s in storages for c in s.channels.values()})
            sources += [(storage, mapping) for storage in storages]
            if missing:
                raise BagError(f"bag {raw_path}: mapped topic(s) {', '.join(missing)} not found")
        store = typestore if typestore is not None else build_typestore()
        unknown: set[str] = set()
        storages = [storage for storage, _ in sources]
        if any(c.encoding == CDR and c.msgtype not in store.types for s in storages for c in s.channels.values()):
            store = typestore if typestore is not None else new_typestore()  # the shared store stays untouched
            unknown = _register_bag_types(store, storages)
        return BagSet(sources, store, unknown)
    except BaseException:
        for storage, _ in sources:
            storage.close()
        raise


class BagSet:
    """Several opened bags seen as one set of logical topics merged by log time.

    Build with :func:`open_bags`; use as a context manager or call :meth:`close`.
    """

    def __init__(self, sources: list[tuple[Storage, dict[str, str]]], typestore: Typestore,
                 unknown_types: set[str]) -> None:
        self._sources = sources
        self.typestore = typestore
        self.unknown_types = unknown_types
        self._topics = self._gather_topics()

    @property
    def labels(self) -> list[str]:
        """The bags in this set, as given."""
        return list(dict.fromkeys(storage.label for storage, _ in self._sources))

    def close(self) -> None:
        """Close every bag."""
        for storage, _ in self._sources:
            storage.close()
        self._sources = []

    def __enter__(self) -> BagSet:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- metadata ------------------------------------------------------------------
    def _gather_topics(self) -> dict[str, TopicInfo] | BagError:
        info: dict[str, TopicInfo] = {}
        for storage, mapping in self._sources:
            for channel in storage.channels.values():
                topic = mapping.get(channel.topic, channel.topic)
                old = info.get(topic)
                if old is None:
                    info[topic] = TopicInfo(topic, channel.msgtype, channel.message_count, (storage.label,),
                                            channel.encoding)
                elif old.msgtype != channel.msgtype:
                    # Reported when the topics are asked for: the other topics stay readable.
                    return BagError(f"topic {topic} is {old.msgtype} in bag {old.bags[0]} but {channel.msgtype} "
                                    f"in bag {storage.label}")
                else:
                    bags = old.bags if storage.label in old.bags else (*old.bags, storage.label)
                    info[topic] = TopicInfo(topic, old.msgtype, old.message_count + channel.message_count, bags,
                                            old.encoding)
        return info

    def topics(self) -> dict[str, TopicInfo]:
        """Every logical topic with its type, message count, bags and encoding.

        Raises:
            BagError: one topic has two types in the bags.
        """
        if isinstance(self._topics, BagError):
            raise self._topics
        return dict(self._topics)

    def topic_types(self) -> dict[str, str]:
        """Logical topic -> message type."""
        return {t: i.msgtype for t, i in self.topics().items()}

    def time_range_ns(self) -> tuple[int, int]:
        """(first, last) log time over all bags."""
        spans = [span for storage, _ in self._sources if (span := storage.time_range_ns()) is not None]
        if not spans:
            raise BagError(f"bags {', '.join(self.labels)} hold no messages")
        return min(s[0] for s in spans), max(s[1] for s in spans)

    def _info(self, topic: str) -> TopicInfo:
        topics = self.topics()
        if topic not in topics:
            raise BagError(f"topic {topic} not found in bag(s) {', '.join(self.labels)}; "
                           f"available: {', '.join(sorted(topics)) or 'none'}")
        return topics[topic]

    def _where(self, topic: str) -> str:
        return f"topic {topic} in bag(s) {', '.join(self._info(topic).bags)}"

    def _decodable(self, topic: str, expected: str | None = None) -> TopicInfo:
        """The topic's info once it is known to hold ROS 2 CDR messages of a known type
        (``expected``, when given)."""
        info = self._info(topic)
        if info.encoding != CDR:
            raise BagError(f"{self._where(topic)}: messages are {info.encoding}, not ROS 2 CDR")
        if info.msgtype in self.unknown_types:
            wanted = f", expected {expected}" if expected is not None else ""
            raise BagError(f"unknown message type {info.msgtype} of topic {topic} in bag(s) {', '.join(info.bags)}"
                           f"{wanted}: no definition in the bag nor in the typestore")
        if expected is not None and info.msgtype != expected:
            raise BagError(f"{self._where(topic)} is {info.msgtype}, expected {expected}")
        return info

    def check_types(self, expected: Mapping[str, str]) -> None:
        """Check that each topic of ``expected`` (topic -> message type) holds ROS 2 CDR
        messages of that type.

        Raises:
            BagError: one line naming the topic, its bags, the type found and the type expected.
        """
        for topic, msgtype in expected.items():
            self._decodable(topic, msgtype)

    # -- raw access ----------------------------------------------------------------
    def _collect(self, topics: Sequence[str], start_ns: int | None, stop_ns: int | None,
                 may_be_empty: Iterable[str] = ()) -> dict[str, RawMessages]:
        """Raw messages of ``topics`` by log time, reading each bag once (topics of
        ``may_be_empty`` may have none in the window; the others raise BagError)."""
        infos = {topic: self._info(topic) for topic in topics}
        parts: dict[str, list[RawMessages]] = {topic: [] for topic in topics}
        for storage, mapping in self._sources:
            wanted = {c.id: mapping.get(c.topic, c.topic) for c in storage.channels.values()
                      if mapping.get(c.topic, c.topic) in parts}
            try:
                for topic, found in storage.read(wanted, start_ns, stop_ns).items():
                    parts[topic] += found
            except Exception as exc:  # noqa: BLE001 - mcap, rosbags, zstd, lz4 and numpy errors alike
                raise BagError(f"bag {storage.label}: topic {', '.join(topics)}: cannot read "
                               f"(corrupt or truncated?): {exc}") from exc
        out = {}
        optional = set(may_be_empty)
        for topic in topics:
            raw = RawMessages.concat(parts[topic]).in_log_order()
            if not len(raw) and topic not in optional:
                window = "" if start_ns is None and stop_ns is None else f" in window [{start_ns}, {stop_ns}) ns"
                raise BagError(f"topic {topic} of bag(s) {', '.join(infos[topic].bags)} has no messages{window}")
            out[topic] = raw
        return out

    def read_raw(self, topics: Sequence[str], start_ns: int | None = None, stop_ns: int | None = None
                 ) -> dict[str, RawMessages]:
        """The serialized messages of ``topics`` (each by log time, possibly none), one pass over each bag."""
        return self._collect(list(dict.fromkeys(topics)), start_ns, stop_ns, may_be_empty=topics)

    def iter_raw(self, topics: Sequence[str], start_ns: int | None = None, stop_ns: int | None = None
                 ) -> Iterator[tuple[str, int, bytes]]:
        """Yield (logical topic, log time ns, raw message) of ``topics`` merged by log time.

        ``start_ns`` is inclusive, ``stop_ns`` exclusive.
        """
        raw = self.read_raw(topics, start_ns, stop_ns)
        names = list(raw)
        which = np.concatenate([np.full(len(raw[t]), k) for k, t in enumerate(names)] or [np.zeros(0, int)])
        position = np.concatenate([np.arange(len(raw[t])) for t in names] or [np.zeros(0, int)])
        recv = np.concatenate([raw[t].recv_ns for t in names] or [np.zeros(0, np.int64)])
        for i in np.argsort(recv, kind="stable").tolist():
            topic = names[which[i]]
            yield topic, int(recv[i]), raw[topic].payload(int(position[i]))

    # -- decoded access ------------------------------------------------------------
    def deserialize(self, data: bytes, msgtype: str, topic: str) -> Any:
        """rosbags' message of one serialized message; bytes after its fields are
        accepted (as rclpy does).

        Raises:
            BagError: the bytes do not hold a ``msgtype``; names the topic.
        """
        try:
            return self.typestore.deserialize_cdr(data, msgtype)
        except Exception as exc:  # noqa: BLE001 - rosbags raises several serde errors
            error: Exception = exc
        try:
            end = message_end(data, msgtype, self.typestore)
            if end < len(data):
                return self.typestore.deserialize_cdr(data[:end], msgtype)
        except Exception:  # noqa: BLE001, S110 - rosbags' first error says more
            pass
        raise BagError(f"{self._where(topic)}: cannot deserialize {msgtype}: {error}") from error

    def iter_messages(self, topic: str, start_ns: int | None = None, stop_ns: int | None = None
                      ) -> Iterator[tuple[int, Any]]:
        """Yield (log time ns, rosbags message object) for any type, by log time."""
        msgtype = self._decodable(topic).msgtype
        raw = self.read_raw([topic], start_ns, stop_ns)[topic]
        for i, stamp in enumerate(raw.recv_ns.tolist()):
            yield stamp, self.deserialize(raw.payload(i), msgtype, topic)

    def read_columns(self, topic: str, start_ns: int | None = None, stop_ns: int | None = None, *,
                     expected_type: str | None = None) -> Columns:
        """Decode a JointState, WrenchStamped, PoseStamped or Imu topic into columns.

        ``start_ns`` is inclusive, ``stop_ns`` exclusive (log time).

        Raises:
            BagError: missing topic, another type than ``expected_type``, not CDR, a type
                without columns, unreadable bag, or no message in the window; the
                message names bag(s) and topic.
        """
        expected = None if expected_type is None else {topic: expected_type}
        return self.read_many([topic], start_ns, stop_ns, expected_types=expected)[topic]

    def read_many(self, topics: Sequence[str], start_ns: int | None = None, stop_ns: int | None = None, *,
                  expected_types: Mapping[str, str] | None = None) -> dict[str, Columns]:
        """Like :meth:`read_columns` for several topics, reading each bag once."""
        return self.read_all(topics, (), start_ns, stop_ns, expected_types=expected_types)[0]

    def read_all(
        self, column_topics: Sequence[str], message_topics: Sequence[str], start_ns: int | None = None,
        stop_ns: int | None = None, parsers: Mapping[str, Callable[[bytes], Any]] | None = None, *,
        expected_types: Mapping[str, str] | None = None,
    ) -> tuple[dict[str, Columns], dict[str, list[tuple[int, Any]]]]:
        """:meth:`read_many` of ``column_topics`` and every message of ``message_topics``
        (as :meth:`iter_messages` yields them, possibly none), reading each bag once.

        A small topic read on its own costs a pass over every chunk that holds it,
        which in a recording is nearly every chunk: one pass serves all topics.
        ``parsers`` (by topic) turn a message's bytes into what the caller wants of it,
        or None: that message is deserialized by rosbags as usual. ``expected_types``
        (topic -> type) are checked before anything is read.
        """
        expected = dict(expected_types or {})
        wanted = dict.fromkeys([*column_topics, *message_topics])
        types = {t: self._decodable(t, expected.get(t)).msgtype for t in wanted}
        for topic in column_topics:
            check_column_type(types[topic], self._where(topic))
        optional = [t for t in message_topics if t not in column_topics]
        raw = self._collect(list(types), start_ns, stop_ns, may_be_empty=optional)
        columns = {t: columns_from_raw(raw[t], types[t], self.typestore, self._where(t)) for t in column_topics}
        messages = {}
        for topic in message_topics:
            parse = (parsers or {}).get(topic)
            got = messages[topic] = []
            for i, stamp in enumerate(raw[topic].recv_ns.tolist()):
                data = raw[topic].payload(i)
                parsed = None if parse is None else parse(data)
                got.append((stamp, self.deserialize(data, types[topic], topic) if parsed is None else parsed))
        return columns, messages
