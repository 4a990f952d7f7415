"""Write rosbag2 MCAP bags with the mcap library (no ROS install needed), crash-safely.

Two output shapes, chosen by the path:

- ``something.mcap``: one self-contained MCAP file (ros2 profile, message definitions
  as schemas, the rosbag2 metadata record). ``ros2 bag info/play FILE``, Foxglove,
  rosbags and the mcap tools all open it. Failure snapshots use this.
- any other path: a rosbag2 bag directory (``metadata.yaml`` + ``<name>.mcap``), what
  ``ros2 bag record -o`` makes. The demo recorder uses this.

Every chunk carries the CRC of its records and the data section its own CRC (the
mcap library's Writer computes them).

Partial-file protocol: the bag is written under ``.<name>.partial/<name>`` next to the
target, its files fsynced when closed, then moved to the target with one atomic
rename and the parent directory fsynced. A crash leaves only a ``.partial`` entry, so
a target that exists is always complete; :func:`recover_partials` finishes or
removes those entries at start.
"""

from __future__ import annotations

import errno
import os
import shutil
import weakref
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np
import yaml
from mcap.records import Channel, Message, Schema
from mcap.stream_reader import StreamReader
from mcap.writer import CompressionType
from mcap.writer import Writer as McapWriter
from rosbags.typesys import get_types_from_msg
from rosbags.typesys.store import Typestore

from sim_real_bridge.errors import SnapshotError

PARTIAL_SUFFIX = ".partial"
# rosbag2 metadata version 9 is what Jazzy and Kilted write and read.
ROSBAG2_VERSION = 9
ROS_DISTRO = "kilted"
LIBRARY = "sim_real_bridge"
#: A chunk is closed once its records pass this size (rosbag2's MCAP default is 768 KiB).
CHUNK_BYTES = 1 << 20
_MCAP_MAGIC = b"\x89MCAP0\r\n"
_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def partial_dir_for(target: Path) -> Path:
    """Return the hidden work directory used while ``target`` is being written."""
    return target.parent / f".{target.name}{PARTIAL_SUFFIX}"


def fsync_path(path: Path) -> None:
    """fsync one file or directory."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    if path.is_dir():
        for child in path.iterdir():
            _fsync_tree(child)
    fsync_path(path)


def mcap_file_is_complete(path: Path) -> bool:
    """Return True when ``path`` starts and ends with the MCAP magic (writer closed it)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_MCAP_MAGIC))
            handle.seek(0, os.SEEK_END)
            if handle.tell() < 2 * len(_MCAP_MAGIC):
                return False
            handle.seek(-len(_MCAP_MAGIC), os.SEEK_END)
            tail = handle.read(len(_MCAP_MAGIC))
    except OSError:
        return False
    return head == _MCAP_MAGIC and tail == _MCAP_MAGIC


#: Per typestore, msgtype -> (message definition, RIHS01 hash); a registered type never
#: changes, and each bag would make them again.
_DEFINITIONS: weakref.WeakKeyDictionary[Typestore, dict[str, tuple[str, str]]] = weakref.WeakKeyDictionary()


def _definition(typestore: Typestore, msgtype: str) -> tuple[str, str]:
    """(message definition with dependencies, RIHS01 hash) of a type."""
    known = _DEFINITIONS.setdefault(typestore, {})
    if msgtype not in known:
        known[msgtype] = (typestore.generate_msgdef(msgtype, ros_version=2)[0], typestore.hash_rihs01(msgtype))
    return known[msgtype]


def _os_error_text(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{exc.strerror or exc} ({name})" if name else str(exc)


def _bag_metadata(file_name: str, topics: Sequence[tuple[str, str, str, int]], first_ns: int, last_ns: int
                  ) -> dict[str, Any]:
    """rosbag2's bag information (metadata.yaml, version 9) of one MCAP file holding
    ``topics`` (name, type, RIHS01 hash, message count) logged from ``first_ns`` to ``last_ns``."""
    count = sum(c for *_, c in topics)
    start, duration = (first_ns, last_ns - first_ns) if count else (0, 0)
    return {
        "version": ROSBAG2_VERSION,
        "storage_identifier": "mcap",
        "relative_file_paths": [file_name],
        "duration": {"nanoseconds": duration},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": count,
        "topics_with_message_count": [
            {"topic_metadata": {"name": name, "type": msgtype, "serialization_format": "cdr",
                                "offered_qos_profiles": [], "type_description_hash": rihs01},
             "message_count": n}
            for name, msgtype, rihs01, n in topics
        ],
        "compression_format": "",
        "compression_mode": "",
        "files": [{"path": file_name, "starting_time": {"nanoseconds_since_epoch": start},
                   "duration": {"nanoseconds": duration}, "message_count": count}],
        "custom_data": None,
        "ros_distro": ROS_DISTRO,
    }


def _yaml_text(data: Any) -> str:
    return yaml.dump(data, Dumper=_YAML_DUMPER, default_flow_style=False, sort_keys=False)


class BagWriter:
    """A rosbag2 MCAP bag written through the mcap library's Writer (metadata version 9).

    Use as a context manager: on a clean exit the bag is finished and moved into place;
    on an exception the partial output is removed. Every filesystem failure is raised
    as :class:`SnapshotError` naming the path.

    Args:
        path: target, ``*.mcap`` for a single file, anything else for a bag directory.
        typestore: provides message definitions (embedded in the bag) and serializers.
        chunk_bytes: a chunk is closed once its records pass this size.
    """

    def __init__(self, path: Path | str, typestore: Typestore, *, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.path = Path(path)
        self.typestore = typestore
        self.single_file = self.path.suffix == ".mcap"
        self.chunk_bytes = chunk_bytes
        self._work_dir = partial_dir_for(self.path)
        self._bag_dir = self._work_dir / (self.path.stem if self.single_file else self.path.name)
        self._file: IO[bytes] | None = None
        self._mcap: McapWriter | None = None
        self._schemas: dict[str, int] = {}
        self._channels: dict[str, int] = {}
        self._msgtypes: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._first_ns = 2**64
        self._last_ns = -1
        self.message_count = 0

    @property
    def topics(self) -> dict[str, str]:
        """The topics added so far: topic -> message type."""
        return dict(self._msgtypes)

    # -- lifecycle -----------------------------------------------------------------
    def open(self) -> BagWriter:
        """Create the partial work directory and start the MCAP file."""
        if self.path.exists():
            raise SnapshotError(f"cannot write bag {self.path}: it exists already")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._work_dir.exists():
                shutil.rmtree(self._work_dir)
            self._bag_dir.mkdir(parents=True)
            self._file = (self._bag_dir / f"{self._bag_dir.name}.mcap").open("xb")
            self._mcap = McapWriter(self._file, chunk_size=self.chunk_bytes, compression=CompressionType.NONE,
                                    enable_crcs=True, enable_data_crcs=True)
            self._mcap.start(profile="ros2", library=LIBRARY)
        except OSError as exc:
            self._discard()
            raise SnapshotError(f"cannot write bag {self.path}: {_os_error_text(exc)}") from exc
        return self

    def close(self) -> Path:
        """Finish the bag, fsync it and move it atomically to :attr:`path`; return it."""
        mcap = self._require_open()
        self._mcap = None
        file_name = f"{self._bag_dir.name}.mcap"
        topics = [(t, m, _definition(self.typestore, m)[1], self._counts[t]) for t, m in self._msgtypes.items()]
        info = _bag_metadata(file_name, topics, self._first_ns, self._last_ns)
        try:
            mcap.add_metadata("rosbag2", {"serialized_metadata": _yaml_text(info)})
            mcap.finish()
            assert self._file is not None
            self._file.close()
            if self.single_file:
                produced = self._bag_dir / file_name
                fsync_path(produced)
                os.replace(produced, self.path)
            else:
                (self._bag_dir / "metadata.yaml").write_text(_yaml_text({"rosbag2_bagfile_information": info}))
                _fsync_tree(self._bag_dir)
                os.replace(self._bag_dir, self.path)
            fsync_path(self.path.parent)
        except OSError as exc:
            self._discard()
            raise SnapshotError(f"cannot write bag {self.path}: {_os_error_text(exc)}") from exc
        self._discard()
        return self.path

    def abort(self) -> None:
        """Drop everything written so far; the target is never created."""
        self._mcap = None
        self._discard()

    def __enter__(self) -> BagWriter:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- writing -------------------------------------------------------------------
    def add_topic(self, topic: str, msgtype: str) -> None:
        """Declare a topic; its message definition (with dependencies) is embedded.

        Raises:
            SnapshotError: the type is unknown to the typestore or the topic was
                declared with another type.
        """
        mcap = self._require_open()
        known = self._msgtypes.get(topic)
        if known is not None:
            if known != msgtype:
                raise SnapshotError(f"topic {topic} of bag {self.path} declared as {known}, not {msgtype}")
            return
        if msgtype not in self.typestore.types:
            raise SnapshotError(f"unknown message type {msgtype} for topic {topic} of bag {self.path}")
        msgdef, rihs01 = _definition(self.typestore, msgtype)
        try:
            if msgtype not in self._schemas:
                self._schemas[msgtype] = mcap.register_schema(msgtype, "ros2msg", msgdef.encode())
            self._channels[topic] = mcap.register_channel(
                topic, "cdr", self._schemas[msgtype], {"offered_qos_profiles": "[]", "topic_type_hash": rihs01})
        except OSError as exc:
            raise SnapshotError(f"cannot write bag {self.path}: {_os_error_text(exc)}") from exc
        self._msgtypes[topic] = msgtype
        self._counts[topic] = 0

    def write(self, topic: str, stamp_ns: int, data: bytes | memoryview) -> None:
        """Write one serialized (CDR) message with log time ``stamp_ns``."""
        mcap = self._require_open()
        channel = self._channels.get(topic)
        if channel is None:
            raise SnapshotError(f"topic {topic} was not added to bag {self.path}")
        stamp = int(stamp_ns)
        if stamp < 0:
            raise SnapshotError(f"cannot write bag {self.path}: log time {stamp} ns is negative")
        try:
            mcap.add_message(channel, stamp, data, stamp)
        except OSError as exc:
            raise SnapshotError(f"cannot write bag {self.path}: {_os_error_text(exc)}") from exc
        self._counts[topic] += 1
        self._first_ns = min(self._first_ns, stamp)
        self._last_ns = max(self._last_ns, stamp)
        self.message_count += 1

    def write_many(self, topics: Sequence[str], stamps_ns: Sequence[int] | np.ndarray,
                   datas: Sequence[bytes | memoryview]) -> None:
        """:meth:`write` of many serialized messages, in order."""
        if not len(topics) == len(stamps_ns) == len(datas):
            raise ValueError(f"{len(topics)} topics, {len(stamps_ns)} stamps and {len(datas)} messages")
        self._write(list(topics), stamps_ns, datas)

    def write_many_by_index(self, topics: Sequence[str], which: Sequence[int] | np.ndarray,
                            stamps_ns: Sequence[int] | np.ndarray, datas: Sequence[bytes | memoryview]) -> None:
        """:meth:`write_many` of messages given by topic index: message k on ``topics[which[k]]``."""
        if not len(which) == len(stamps_ns) == len(datas):
            raise ValueError(f"{len(which)} topic indexes, {len(stamps_ns)} stamps and {len(datas)} messages")
        self._write([topics[k] for k in np.asarray(which, dtype=np.intp).tolist()], stamps_ns, datas)

    def _write(self, topics: list[str], stamps_ns: Sequence[int] | np.ndarray,
               datas: Sequence[bytes | memoryview]) -> None:
        mcap = self._require_open()
        missing = set(topics) - self._channels.keys()
        if missing:
            raise SnapshotError(f"topic {sorted(missing)[0]} was not added to bag {self.path}")
        stamps = np.asarray(stamps_ns, dtype=np.int64).reshape(-1)
        if not stamps.size:
            return
        if int(stamps.min()) < 0:
            raise SnapshotError(f"cannot write bag {self.path}: log time {int(stamps.min())} ns is negative")
        channels = self._channels
        try:
            for topic, stamp, data in zip(topics, stamps.tolist(), datas, strict=True):
                mcap.add_message(channels[topic], stamp, data, stamp)
        except OSError as exc:
            raise SnapshotError(f"cannot write bag {self.path}: {_os_error_text(exc)}") from exc
        for topic, count in Counter(topics).items():
            self._counts[topic] += count
        self._first_ns = min(self._first_ns, int(stamps.min()))
        self._last_ns = max(self._last_ns, int(stamps.max()))
        self.message_count += len(topics)

    def write_message(self, topic: str, stamp_ns: int, msg: object) -> None:
        """Serialize a rosbags message object of the topic's type and write it."""
        msgtype = self._msgtypes.get(topic)
        if msgtype is None:
            raise SnapshotError(f"topic {topic} was not added to bag {self.path}")
        self.write(topic, stamp_ns, self.typestore.serialize_cdr(msg, msgtype))

    # -- helpers -------------------------------------------------------------------
    def _require_open(self) -> McapWriter:
        if self._mcap is None:
            raise SnapshotError(f"bag {self.path} is not open")
        return self._mcap

    def _discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        shutil.rmtree(self._work_dir, ignore_errors=True)


def _complete_records(path: Path) -> Iterator[Any]:
    """The records of an MCAP file up to where it is torn (chunks are whole or left out)."""
    with path.open("rb") as handle:
        try:
            yield from StreamReader(handle, validate_crcs=True).records
        except Exception:  # noqa: BLE001, S110 - the writer died there
            return


def salvage_mcap(source: Path | str, target: Path | str, typestore: Typestore) -> int:
    """Copy every message of the complete chunks of a torn MCAP file into a new bag.

    Message definitions come from the typestore, or from the schemas in the torn file
    for types the typestore lacks (registered into ``typestore``).

    Returns:
        the number of messages saved; 0 means nothing was written.
    """
    schemas: dict[int, Schema] = {}
    topics: dict[int, tuple[str, str]] = {}
    messages: list[tuple[str, int, bytes]] = []
    for record in _complete_records(Path(source)):
        if isinstance(record, Schema):
            schemas[record.id] = record
        elif isinstance(record, Channel) and record.schema_id in schemas:
            schema = schemas[record.schema_id]
            if schema.name not in typestore.types and schema.encoding == "ros2msg" and schema.data:
                try:
                    typestore.register(get_types_from_msg(schema.data.decode(), schema.name))
                except Exception:  # noqa: BLE001, S110 - its messages are left out
                    pass
            topics[record.id] = (record.topic, schema.name)
        elif isinstance(record, Message) and record.channel_id in topics:
            messages.append((topics[record.channel_id][0], record.log_time, record.data))
    if not messages:
        return 0
    with BagWriter(target, typestore) as bag:
        for topic, msgtype in dict(topics.values()).items():
            if msgtype in typestore.types:
                bag.add_topic(topic, msgtype)
        kept = [m for m in messages if m[0] in bag.topics]
        bag.write_many([m[0] for m in kept], [m[1] for m in kept], [m[2] for m in kept])
    return len(kept)


def recover_partials(
    directory: Path | str, *, salvage: bool = False, typestore: Typestore | None = None
) -> list[tuple[Path, str]]:
    """Finish or remove every ``.partial`` work entry left in ``directory`` by a crash.

    A work directory whose bag was closed (complete MCAP, and metadata.yaml for a bag
    directory) but not yet moved is moved into place, unless the target exists. With
    ``salvage`` (for long recordings, never for failure snapshots) a torn MCAP keeps
    the messages of its complete chunks in a new, valid bag at the target; anything
    else is removed.

    Returns:
        (path, action) pairs, action ``"finished"``, ``"salvaged"`` or ``"removed"``.
    """
    directory = Path(directory)
    actions: list[tuple[Path, str]] = []
    if not directory.is_dir():
        return actions
    for work in sorted(directory.glob(f".*{PARTIAL_SUFFIX}")):
        target = directory / work.name[1 : -len(PARTIAL_SUFFIX)]
        finished = False
        if work.is_dir() and not target.exists():
            if target.suffix == ".mcap":
                produced = work / target.stem / f"{target.stem}.mcap"
                if mcap_file_is_complete(produced):
                    fsync_path(produced)
                    os.replace(produced, target)
                    finished = True
            else:
                bag = work / target.name
                mcap = bag / f"{target.name}.mcap"
                if (bag / "metadata.yaml").is_file() and mcap_file_is_complete(mcap):
                    _fsync_tree(bag)
                    os.replace(bag, target)
                    finished = True
        salvaged = False
        if salvage and not finished and work.is_dir() and not target.exists():
            stem = target.stem if target.suffix == ".mcap" else target.name
            torn = work / stem / f"{stem}.mcap"
            if torn.is_file():
                store = typestore
                if store is None:
                    from sim_real_bridge.capture.typestore import new_typestore  # noqa: PLC0415

                    store = new_typestore()
                salvage_work = directory / f".{target.name}.salvage"
                shutil.rmtree(salvage_work, ignore_errors=True)
                salvage_work.mkdir()
                try:
                    moved = salvage_work / torn.name
                    os.replace(torn, moved)
                    salvaged = salvage_mcap(moved, target, store) > 0
                finally:
                    shutil.rmtree(salvage_work, ignore_errors=True)
        if work.is_dir():
            shutil.rmtree(work, ignore_errors=True)
        else:
            work.unlink(missing_ok=True)
        action = "finished" if finished else "salvaged" if salvaged else "removed"
        actions.append((work if action == "removed" else target, action))
    if actions:
        fsync_path(directory)
    return actions


def merge_bags(primary: Path | str, secondary: Path | str, target: Path | str, typestore: Typestore) -> int:
    """Write one bag holding every message of ``primary`` plus those of ``secondary`` on
    topics ``primary`` does not have, in log-time order; returns the message count.

    The demo records the monitor's inputs as the monitor received them (primary) and
    the rest of the graph with its own recorder (secondary).

    Raises:
        SnapshotError: a source cannot be read or the target cannot be written.
    """
    import heapq

    from rosbags.rosbag2 import Reader

    try:
        with Reader(Path(primary)) as first, Reader(Path(secondary)) as second:
            own = {c.topic for c in first.connections}
            extra = [c for c in second.connections if c.topic not in own]
            count = 0
            with BagWriter(target, typestore) as bag:
                for conn in list(first.connections) + extra:
                    bag.add_topic(conn.topic, conn.msgtype)
                streams = (
                    ((t, c.topic, d) for c, t, d in first.messages()),
                    ((t, c.topic, d) for c, t, d in second.messages(connections=extra)) if extra else iter(()),
                )
                for log_time, topic, data in heapq.merge(*streams, key=lambda item: item[0]):
                    bag.write(topic, log_time, data)
                    count += 1
    except SnapshotError:
        raise
    except Exception as error:  # noqa: BLE001 - rosbags raises several types for unreadable bags
        raise SnapshotError(f"cannot merge bags {primary} and {secondary} into {target}: {error}") from error
    return count
