"""Write rosbag2 MCAP bags with rosbags (no ROS install needed), crash-safely.

Two output shapes, chosen by the path:

- ``something.mcap``: one self-contained MCAP file (ros2 profile, message
  definitions as schemas, the rosbag2 metadata record). ``ros2 bag info/play FILE``,
  Foxglove and rosbags' MCAP storage reader all open it. Failure snapshots use this.
- any other path: a rosbag2 bag directory (``metadata.yaml`` + ``<name>.mcap``), what
  ``ros2 bag record -o`` makes. The demo recorder uses this.

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
import struct
import threading
import weakref
from collections import defaultdict
from collections.abc import Iterator, Sequence
from io import BytesIO, StringIO
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import rosbags.rosbag2.writer as rosbags_writer
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.enums import CompressionMode
from rosbags.rosbag2.errors import WriterError
from rosbags.rosbag2.storage_mcap import McapWriter, PendingChunk, write_record, write_string, write_uint16
from rosbags.rosbag2.storage_mcap import decompress as mcap_decompress
from rosbags.rosbag2.storage_mcap import write_uint32, write_uint64
from rosbags.rosbag2.writer import zstd as rosbags_zstd  # what rosbags compresses messages with
from rosbags.typesys import get_types_from_msg
from rosbags.typesys.store import Typestore
from ruamel.yaml import YAML

from sim_real_bridge.errors import SnapshotError

PARTIAL_SUFFIX = ".partial"
# rosbag2 metadata version 9 is what Jazzy and Kilted write and read.
ROSBAG2_VERSION = 9
_MCAP_MAGIC = b"\x89MCAP0\r\n"


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


#: rosbags' MCAP writer closes a chunk after the message that takes it past this size.
_CHUNK_BYTES = 2**20
#: An MCAP message record before its payload: opcode, record length, channel, sequence,
#: log time, publish time (rosbags writes the log time as both, sequence 0).
_MESSAGE_HEAD = np.dtype(
    {"names": ["opcode", "length", "channel", "sequence", "log_time", "publish_time"],
     "formats": ["u1", "<u8", "<u2", "<u4", "<u8", "<u8"], "offsets": [0, 1, 9, 11, 15, 23], "itemsize": 31}
)


class _McapStorage(McapWriter):
    """rosbags' MCAP storage writer plus :meth:`write_many`; the file is the same, byte
    for byte, as rosbags writes it message by message (same records, chunks, indexes)."""

    def write_many(self, channel_ids: np.ndarray, timestamps: np.ndarray, datas: Sequence[bytes | memoryview]
                   ) -> None:
        """:meth:`write` of many messages in order: their records are joined and written
        with one call per chunk."""
        count = len(datas)
        if count and int(timestamps.min()) < 0:
            raise OverflowError("MCAP log times are unsigned: a timestamp is negative")
        sizes = np.fromiter(map(len, datas), dtype=np.int64, count=count) + _MESSAGE_HEAD.itemsize
        ends = np.cumsum(sizes)
        done = 0
        while done < count:
            pos = self.chunk.bio.tell()
            chunk_ends = ends[done:] - (int(ends[done - 1]) if done else 0) + pos
            stop = min(count, done + 1 + int(np.searchsorted(chunk_ends, _CHUNK_BYTES, side="right")))
            self._append(channel_ids[done:stop], timestamps[done:stop], datas[done:stop], sizes[done:stop],
                         chunk_ends[: stop - done] - sizes[done:stop])
            done = stop
            if self.chunk.bio.tell() > _CHUNK_BYTES:
                self.close_chunk()

    def _append(self, channel_ids: np.ndarray, timestamps: np.ndarray, datas: Sequence[bytes | memoryview],
                sizes: np.ndarray, offsets: np.ndarray) -> None:
        """Write message records (``sizes`` bytes each) into the open chunk; ``offsets``
        are where they start in it."""
        count = len(datas)
        head = np.zeros(count, dtype=_MESSAGE_HEAD)
        head["opcode"] = 0x05
        head["length"] = sizes - 9
        head["channel"] = channel_ids
        head["log_time"] = timestamps
        head["publish_time"] = timestamps
        heads = head.tobytes()
        size = _MESSAGE_HEAD.itemsize
        pieces: list[Any] = [None] * (2 * count)
        pieces[::2] = [heads[i : i + size] for i in range(0, size * count, size)]
        pieces[1::2] = datas
        chunk = self.chunk
        records = b"".join(pieces)
        if chunk.bio.tell() == 0:  # the chunk's bytes are these: shared, not copied
            chunk.bio = BytesIO(records)
            chunk.bio.seek(0, os.SEEK_END)
        else:
            chunk.bio.write(records)
        first, last = int(timestamps.min()), int(timestamps.max())
        chunk.message_start_time = min(first, chunk.message_start_time)
        chunk.message_end_time = max(last, chunk.message_end_time)
        self.message_start_time = min(first, self.message_start_time)
        self.message_end_time = max(last, self.message_end_time)
        # Channels in order of their first message here: the order of the chunk's message
        # indexes. Their entries go in as one (k, 2) array per channel (see close_chunk).
        ids, first_at, counts = np.unique(channel_ids, return_index=True, return_counts=True)
        entries = np.column_stack([timestamps, offsets]).astype("<u8")
        for k in np.argsort(first_at, kind="stable").tolist():
            cid = int(ids[k])
            self.channel_stats[cid] += int(counts[k])
            chunk.msgs[cid].append(entries if ids.size == 1 else entries[channel_ids == cid])  # type: ignore[arg-type]

    def close_chunk(self) -> None:
        """rosbags' ``close_chunk`` with each message index packed by numpy (same bytes)."""
        rec = BytesIO()
        write_uint64(rec, self.chunk.message_start_time)
        write_uint64(rec, self.chunk.message_end_time)
        write_uint64(rec, self.chunk.bio.tell())
        write_uint32(rec, 0)

        compressed = self.compressor(self.chunk.bio.getvalue())
        write_string(rec, self.compression)
        write_uint64(rec, len(compressed))

        # write_record of the fields and then the records, without copying the records into it
        chunk_start = self.bio.tell()
        self.bio.write(b"\x06")
        write_uint64(self.bio, rec.tell() + len(compressed))
        self.bio.write(rec.getbuffer())
        self.bio.write(compressed)
        chunk_end = self.bio.tell()

        offsets: list[tuple[int, int]] = []
        for cid, msgs in self.chunk.msgs.items():
            offsets.append((cid, self.bio.tell()))
            entries = _index_bytes(msgs)
            rec = BytesIO()
            write_uint16(rec, cid)
            write_uint32(rec, len(entries))
            rec.write(entries)
            write_record(self.bio, 0x07, rec)

        rec = BytesIO()
        write_uint64(rec, self.chunk.message_start_time)
        write_uint64(rec, self.chunk.message_end_time)
        write_uint64(rec, chunk_start)
        write_uint64(rec, chunk_end - chunk_start)
        write_uint32(rec, len(offsets) * 10)
        for cid, offset in offsets:
            write_uint16(rec, cid)
            write_uint64(rec, offset)
        write_uint64(rec, self.bio.tell() - chunk_end)
        write_string(rec, self.compression)
        write_uint64(rec, len(compressed))
        write_uint64(rec, self.chunk.bio.tell())
        self.chunks.append(rec)

        self.chunk = PendingChunk(2**63 - 1, 0, BytesIO(), defaultdict(list))


def _index_bytes(msgs: Sequence[tuple[int, int] | np.ndarray]) -> bytes:
    """One channel's message index entries of a chunk as bytes: (log time, offset) tuples
    as rosbags' ``write`` appends them, (k, 2) uint64 arrays as ``write_many`` does."""
    parts: list[np.ndarray] = []
    run: list[tuple[int, int]] = []
    for entry in msgs:
        if isinstance(entry, np.ndarray):
            if run:
                parts.append(np.asarray(run, dtype="<u8"))
                run = []
            parts.append(entry)
        else:
            run.append(entry)
    if run:
        parts.append(np.asarray(run, dtype="<u8"))
    return b"".join(part.tobytes() for part in parts)


#: What a :class:`_Writer` on this thread is doing while rosbags' code dumps YAML.
_YAML_HOOK = threading.local()


class _NotTemplated(Exception):
    """Data a YAML template does not cover (see :func:`_skeleton`)."""


#: A placeholder for an int in a :func:`_skeleton`.
_INT = object()


def _skeleton(data: Any, ints: list[int]) -> Any:
    """``data`` as a hashable tree with every int replaced by :data:`_INT` (the ints are
    appended to ``ints`` in walk order); raises _NotTemplated for other kinds of data."""
    kind = type(data)
    if kind is int:
        ints.append(data)
        return _INT
    if kind is dict:
        return ("map", tuple((key, _skeleton(value, ints)) for key, value in data.items()))
    if kind is list:
        return ("seq", tuple(_skeleton(value, ints) for value in data))
    if kind is str or kind is bool or data is None:
        return data
    raise _NotTemplated


def _with_ints(data: Any, ints: Iterator[int]) -> Any:
    """A copy of ``data`` with its ints, in walk order, taken from ``ints``."""
    kind = type(data)
    if kind is int:
        return next(ints)
    if kind is dict:
        return {key: _with_ints(value, ints) for key, value in data.items()}
    if kind is list:
        return [_with_ints(value, ints) for value in data]
    return data


def _template(text_of: Any, data: Any, count: int) -> tuple[list[str], list[int]] | None:
    """(pieces, order) such that ruamel's text of ``data`` with ints ``v`` is
    ``pieces[0] + str(v[order[0]]) + pieces[1] + ...``; None when the sentinels that stand
    for the ints cannot be told apart in the text."""
    sentinels = [str(_SENTINEL + k) for k in range(count)]
    text = text_of(_with_ints(data, iter(_SENTINEL + k for k in range(count))))
    if any(text.count(sentinel) != 1 for sentinel in sentinels):
        return None
    order = sorted(range(count), key=lambda k: text.index(sentinels[k]))
    pieces, pos = [], 0
    for k in order:
        at = text.index(sentinels[k], pos)
        pieces.append(text[pos:at])
        pos = at + len(sentinels[k])
    pieces.append(text[pos:])
    return pieces, order


#: Ints that stand for the data's ints while a template is made: longer than any int64
#: (a shorter int cannot wrap a line the sentinel did not), and checked to occur once.
_SENTINEL = 10**21
#: (YAML settings, data skeleton) -> template of rosbags' metadata dumps; a bag's metadata
#: differs from the last one's only in its counts, times and durations.
_TEMPLATES: dict[Any, tuple[list[str], list[int]] | None] = {}
_MAX_TEMPLATES = 64


class _WriterYAML(YAML):
    """ruamel's YAML, as rosbags' writer module makes it, with shortcuts inside :class:`_Writer`.

    rosbags dumps YAML with pure-Python ruamel: an empty QoS list per connection, and
    the bag's metadata twice on close (metadata.yaml, and the copy embedded in the MCAP
    file). Inside a :class:`_Writer` call an empty list is written as ruamel writes it,
    the metadata.yaml text is not made when the writer drops that file, and metadata of
    a shape dumped before (the same keys, strings and lists: only ints differ) is
    written from the template made of ruamel's text that time. Elsewhere this is
    ruamel's YAML unchanged.
    """

    _plug_ins: list[str] | None = None

    def official_plug_ins(self) -> Any:
        """ruamel's list of plug-in modules, found once (ruamel globs its package directory
        for them in every YAML(); rosbags makes one per connection)."""
        if _WriterYAML._plug_ins is None:
            _WriterYAML._plug_ins = super().official_plug_ins()
        return list(_WriterYAML._plug_ins)

    def dump(self, data: Any, stream: Any = None, *, transform: Any = None) -> Any:
        """ruamel's ``dump``, or its output without running it (see the class)."""
        writer = getattr(_YAML_HOOK, "writer", None)
        if writer is not None and stream is not None and transform is None:
            if isinstance(data, list) and not data and not self.explicit_start:
                stream.write("[]\n")
                return None
            if writer.drop_metadata_file and isinstance(data, dict) and list(data) == ["rosbag2_bagfile_information"]:
                return None
            if isinstance(data, dict):
                stream.write(self._templated(data))
                return None
        return super().dump(data, stream, transform=transform)

    def _ruamel_text(self, data: Any) -> str:
        out = StringIO()
        super().dump(data, out)
        return out.getvalue()

    def _templated(self, data: dict[str, Any]) -> str:
        """ruamel's text of ``data``, from a template when one of its shape was made."""
        ints: list[int] = []
        try:
            key = (tuple(self.typ), self.default_flow_style, self.explicit_start, _skeleton(data, ints))
        except _NotTemplated:
            return self._ruamel_text(data)
        template = _TEMPLATES.get(key)
        if template is None:
            text = self._ruamel_text(data)
            if key not in _TEMPLATES:  # made once; kept only when it gives ruamel's text
                if len(_TEMPLATES) >= _MAX_TEMPLATES:
                    _TEMPLATES.clear()
                made = _template(self._ruamel_text, data, len(ints))
                _TEMPLATES[key] = made if made is not None and _fill(made, ints) == text else None
            return text
        return _fill(template, ints)


def _fill(template: tuple[list[str], list[int]], ints: Sequence[int]) -> str:
    pieces, order = template
    out = [pieces[0]]
    for k, piece in zip(order, pieces[1:], strict=True):
        out += (str(ints[k]), piece)
    return "".join(out)


# rosbags' writer module makes its YAML by this name when it dumps.
rosbags_writer.YAML = _WriterYAML


class _Writer(Writer):
    """rosbags' rosbag2 Writer with :meth:`write_many` (MCAP storage).

    Attributes:
        drop_metadata_file: the caller throws metadata.yaml away (a single-file bag), so
            its text is not made; the metadata embedded in the MCAP file is.
    """

    STORAGE_PLUGINS = {**Writer.STORAGE_PLUGINS, StoragePlugin.MCAP: _McapStorage}
    drop_metadata_file: bool = False

    def add_connection(self, *args: Any, **kwargs: Any) -> Any:
        """rosbags' ``add_connection``, its QoS YAML dumped by :class:`_WriterYAML`."""
        _YAML_HOOK.writer = self
        try:
            return super().add_connection(*args, **kwargs)
        finally:
            _YAML_HOOK.writer = None

    def close(self) -> None:
        """rosbags' ``close``, its YAML dumped by :class:`_WriterYAML`."""
        _YAML_HOOK.writer = self
        try:
            super().close()
        finally:
            _YAML_HOOK.writer = None

    def write_many(self, channel_ids: np.ndarray, timestamps: np.ndarray, datas: Sequence[bytes | memoryview]
                   ) -> None:
        """:meth:`write` of many messages in order, by connection id (same file)."""
        if not self.storage:
            raise WriterError("Bag was not opened.")
        if not isinstance(self.storage, _McapStorage):
            connections = {c.id: c for c in self.connections}
            for cid, timestamp, data in zip(channel_ids.tolist(), timestamps.tolist(), datas, strict=True):
                self.write(connections[cid], timestamp, data)
            return
        ids, counts = np.unique(channel_ids, return_counts=True)
        unknown = set(ids.tolist()) - set(self.counts)
        if unknown:
            raise WriterError(f"Tried to write to unknown connection ids {sorted(unknown)}.")
        if self.compression_mode == CompressionMode.MESSAGE:
            datas = [rosbags_zstd.compress(data) for data in datas]
        self.storage.write_many(channel_ids, timestamps, datas)
        for cid, count in zip(ids.tolist(), counts.tolist(), strict=True):
            self.counts[cid] += count
        if len(datas):
            self.min_timestamp = min(int(timestamps.min()), self.min_timestamp)
            self.max_timestamp = max(int(timestamps.max()), self.max_timestamp)


#: Per typestore, msgtype -> (message definition, RIHS01 hash), as rosbags' Writer makes
#: them; a registered type never changes, and each bag would make them again.
_DEFINITIONS: weakref.WeakKeyDictionary[Typestore, dict[str, tuple[str, str]]] = weakref.WeakKeyDictionary()


def _definition(typestore: Typestore, msgtype: str) -> tuple[str, str]:
    """(message definition with dependencies, RIHS01 hash) of a type, for Writer.add_connection."""
    known = _DEFINITIONS.setdefault(typestore, {})
    if msgtype not in known:
        known[msgtype] = (typestore.generate_msgdef(msgtype, ros_version=2)[0], typestore.hash_rihs01(msgtype))
    return known[msgtype]


def _os_error_text(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{exc.strerror or exc} ({name})" if name else str(exc)


class BagWriter:
    """Thin wrapper over rosbags' rosbag2 Writer (MCAP storage, metadata version 9).

    :meth:`write_many` writes a batch of messages with one call (a subclass of rosbags'
    MCAP storage writer joins their records); the file is the one rosbags writes
    message by message, byte for byte. Use as a context manager: on a clean exit the bag is finished and moved into
    place; on an exception the partial output is removed. Every filesystem failure is
    raised as :class:`SnapshotError` naming the path.

    Args:
        path: target, ``*.mcap`` for a single file, anything else for a bag directory.
        typestore: provides message definitions (embedded in the bag) and serializers.
    """

    def __init__(self, path: Path | str, typestore: Typestore) -> None:
        self.path = Path(path)
        self.typestore = typestore
        self.single_file = self.path.suffix == ".mcap"
        self._work_dir = partial_dir_for(self.path)
        self._bag_dir = self._work_dir / (self.path.stem if self.single_file else self.path.name)
        self._writer: _Writer | None = None
        self._connections: dict[str, Any] = {}
        self._msgtypes: dict[str, str] = {}
        self.message_count = 0

    # -- lifecycle -----------------------------------------------------------------
    def open(self) -> BagWriter:
        """Create the partial work directory and open the rosbags writer."""
        if self.path.exists():
            raise SnapshotError(f"cannot write bag {self.path}: it exists already")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._work_dir.exists():
                shutil.rmtree(self._work_dir)
            self._work_dir.mkdir()
            writer = _Writer(self._bag_dir, version=ROSBAG2_VERSION, storage_plugin=StoragePlugin.MCAP)
            writer.drop_metadata_file = self.single_file
            writer.open()
        except OSError as exc:
            self._discard()
            raise SnapshotError(f"cannot write bag {self.path}: {_os_error_text(exc)}") from exc
        except WriterError as exc:
            self._discard()
            raise SnapshotError(f"cannot write bag {self.path}: {exc}") from exc
        self._writer = writer
        return self

    def close(self) -> Path:
        """Finish the bag, fsync it and move it atomically to :attr:`path`; return it."""
        writer = self._require_open()
        self._writer = None
        try:
            writer.close()
            if self.single_file:
                produced = self._bag_dir / f"{self._bag_dir.name}.mcap"
                fsync_path(produced)
                os.replace(produced, self.path)
            else:
                _fsync_tree(self._bag_dir)
                os.replace(self._bag_dir, self.path)
            fsync_path(self.path.parent)
        except (OSError, WriterError) as exc:
            self._discard()
            detail = _os_error_text(exc) if isinstance(exc, OSError) else str(exc)
            raise SnapshotError(f"cannot write bag {self.path}: {detail}") from exc
        self._discard()
        return self.path

    def abort(self) -> None:
        """Drop everything written so far; the target is never created."""
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.abort()
            except Exception:  # noqa: BLE001 - best effort while already failing
                pass
        self._discard()

    def __enter__(self) -> BagWriter:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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
        writer = self._require_open()
        known = self._msgtypes.get(topic)
        if known is not None:
            if known != msgtype:
                raise SnapshotError(f"topic {topic} of bag {self.path} declared as {known}, not {msgtype}")
            return
        if msgtype not in self.typestore.types:
            raise SnapshotError(f"unknown message type {msgtype} for topic {topic} of bag {self.path}")
        msgdef, rihs01 = _definition(self.typestore, msgtype)
        try:
            self._connections[topic] = writer.add_connection(topic, msgtype, msgdef=msgdef, rihs01=rihs01)
        except OSError as exc:
            raise SnapshotError(f"cannot write bag {self.path}: {_os_error_text(exc)}") from exc
        self._msgtypes[topic] = msgtype

    def write(self, topic: str, stamp_ns: int, data: bytes | memoryview) -> None:
        """Write one serialized (CDR) message with log time ``stamp_ns``."""
        writer = self._require_open()
        connection = self._connections.get(topic)
        if connection is None:
            raise SnapshotError(f"topic {topic} was not added to bag {self.path}")
        try:
            writer.write(connection, int(stamp_ns), data)
        except OSError as exc:
            raise SnapshotError(f"cannot write bag {self.path}: {_os_error_text(exc)}") from exc
        self.message_count += 1

    def write_many(self, topics: Sequence[str], stamps_ns: Sequence[int], datas: Sequence[bytes | memoryview]
                   ) -> None:
        """:meth:`write` of many serialized messages in order, with one call: the file is the
        same, byte for byte, as written message by message."""
        writer = self._require_open()
        if not len(topics) == len(stamps_ns) == len(datas):
            raise ValueError(f"{len(topics)} topics, {len(stamps_ns)} stamps and {len(datas)} messages")
        self._write_ids(writer, self._connection_ids(topics), stamps_ns, datas)

    def write_many_by_index(self, topics: Sequence[str], which: Sequence[int] | np.ndarray, stamps_ns: Sequence[int],
                            datas: Sequence[bytes | memoryview]) -> None:
        """:meth:`write_many` of messages given by topic index: message k on ``topics[which[k]]``
        (no topic looked up per message)."""
        writer = self._require_open()
        if not len(which) == len(stamps_ns) == len(datas):
            raise ValueError(f"{len(which)} topic indexes, {len(stamps_ns)} stamps and {len(datas)} messages")
        self._write_ids(writer, self._connection_ids(topics)[np.asarray(which, dtype=np.intp)], stamps_ns, datas)

    def _connection_ids(self, topics: Sequence[str]) -> np.ndarray:
        try:
            return np.array([self._connections[topic].id for topic in topics], dtype=np.int64)
        except KeyError as exc:
            raise SnapshotError(f"topic {exc.args[0]} was not added to bag {self.path}") from None

    def _write_ids(self, writer: _Writer, ids: np.ndarray, stamps_ns: Sequence[int] | np.ndarray,
                   datas: Sequence[bytes | memoryview]) -> None:
        try:
            writer.write_many(ids, np.asarray(stamps_ns, dtype=np.int64), datas)
        except OSError as exc:
            raise SnapshotError(f"cannot write bag {self.path}: {_os_error_text(exc)}") from exc
        self.message_count += len(ids)

    def write_message(self, topic: str, stamp_ns: int, msg: object) -> None:
        """Serialize a rosbags message object of the topic's type and write it."""
        msgtype = self._msgtypes.get(topic)
        if msgtype is None:
            raise SnapshotError(f"topic {topic} was not added to bag {self.path}")
        self.write(topic, stamp_ns, self.typestore.serialize_cdr(msg, msgtype))

    # -- helpers -------------------------------------------------------------------
    def _require_open(self) -> _Writer:
        if self._writer is None:
            raise SnapshotError(f"bag {self.path} is not open")
        return self._writer

    def _discard(self) -> None:
        shutil.rmtree(self._work_dir, ignore_errors=True)


def _iter_complete_chunks(path: Path) -> Iterator[tuple[int, bytes]]:
    """Yield (opcode, body) of every record inside the complete chunks of an MCAP file.

    Stops quietly at the first torn or unreadable record: the writer died there.
    """
    with path.open("rb") as handle:
        data = handle.read()
    if not data.startswith(_MCAP_MAGIC):
        return
    pos = len(_MCAP_MAGIC)
    while pos + 9 <= len(data):
        opcode = data[pos]
        (length,) = struct.unpack_from("<Q", data, pos + 1)
        body_start, body_end = pos + 9, pos + 9 + length
        if body_end > len(data):
            return
        pos = body_end
        if opcode != 0x06:
            continue
        try:
            uncompressed_size, crc = struct.unpack_from("<QI", data, body_start + 16)
            (name_len,) = struct.unpack_from("<I", data, body_start + 28)
            compression = data[body_start + 32 : body_start + 32 + name_len].decode()
            (compressed_size,) = struct.unpack_from("<Q", data, body_start + 32 + name_len)
            start = body_start + 40 + name_len
            chunk = mcap_decompress(data[start : start + compressed_size], compression, uncompressed_size, crc)
        except Exception:  # noqa: BLE001 - a damaged chunk ends the salvage
            return
        inner = 0
        while inner + 9 <= len(chunk):
            (inner_len,) = struct.unpack_from("<Q", chunk, inner + 1)
            end = inner + 9 + inner_len
            if end > len(chunk):
                return
            yield chunk[inner], chunk[inner + 9 : end]
            inner = end


def _mcap_string(body: bytes, pos: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<I", body, pos)
    return body[pos + 4 : pos + 4 + length].decode(), pos + 4 + length


def salvage_mcap(source: Path | str, target: Path | str, typestore: Typestore) -> int:
    """Copy every message of the complete chunks of a torn MCAP file into a new bag.

    Message definitions come from the typestore, or from the schemas in the torn file
    for types the typestore lacks (registered into ``typestore``).

    Returns:
        the number of messages saved; 0 means nothing was written.
    """
    schemas: dict[int, tuple[str, str]] = {}
    channels: dict[int, tuple[str, str]] = {}
    messages: list[tuple[str, int, bytes]] = []
    for opcode, body in _iter_complete_chunks(Path(source)):
        try:
            if opcode == 0x03:
                (schema_id,) = struct.unpack_from("<H", body, 0)
                name, pos = _mcap_string(body, 2)
                _, pos = _mcap_string(body, pos)
                text, _ = _mcap_string(body, pos)
                schemas[schema_id] = (name, text)
            elif opcode == 0x04:
                channel_id, schema_id = struct.unpack_from("<HH", body, 0)
                topic, _ = _mcap_string(body, 4)
                channels[channel_id] = (topic, schemas[schema_id][0])
                name, text = schemas[schema_id]
                if name not in typestore.types and text:
                    typestore.register(get_types_from_msg(text, name))
            elif opcode == 0x05:
                channel_id, log_time = struct.unpack_from("<H4xQ", body, 0)
                if channel_id in channels:
                    messages.append((channels[channel_id][0], log_time, body[22:]))
        except Exception:  # noqa: BLE001 - keep what parsed before the damage
            break
    if not messages:
        return 0
    with BagWriter(target, typestore) as bag:
        for topic, msgtype in dict(channels.values()).items():
            if msgtype in typestore.types:
                bag.add_topic(topic, msgtype)
        for topic, log_time, data in messages:
            if topic in bag._msgtypes:
                bag.write(topic, log_time, data)
    return len(messages)


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
