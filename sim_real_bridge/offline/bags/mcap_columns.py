"""MCAP files read into one buffer per read, messages located with numpy.

The mcap library reads the file's summary (schemas, channels, statistics, chunk
indexes). The chunks that hold wanted messages are then read with one call each into
one buffer, decompressed where needed and checked against their CRC; the chunks' message
indexes (arrays of :data:`MESSAGE_INDEX_ENTRY`) locate every message record, whose heads
(:data:`MESSAGE_HEAD`) are checked against them in one vectorized pass. No Python object
is made per message. bench/read_bench.py measures this against the mcap library's own
``iter_messages``, which serves files without chunk indexes here.
"""

from __future__ import annotations

import struct
import zlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
import numpy as np
from mcap.reader import make_reader
from mcap.records import Channel, ChunkIndex, Message, Schema
from mcap.stream_reader import StreamReader

from sim_real_bridge.offline.bags.raw import ChannelInfo, RawMessages

OPCODE_MESSAGE = 0x05
OPCODE_CHUNK = 0x06
OPCODE_MESSAGE_INDEX = 0x07
#: A Chunk record up to its compression name; then compressed size (uint64) and records.
CHUNK_HEAD = np.dtype({
    "names": ["opcode", "length", "message_start_time", "message_end_time", "uncompressed_size",
              "uncompressed_crc", "compression_length"],
    "formats": ["u1", "<u8", "<u8", "<u8", "<u8", "<u4", "<u4"],
    "offsets": [0, 1, 9, 17, 25, 33, 37],
    "itemsize": 41,
})
#: A Message Index record before its entries.
MESSAGE_INDEX_HEAD = np.dtype({
    "names": ["opcode", "length", "channel_id", "entries_length"],
    "formats": ["u1", "<u8", "<u2", "<u4"],
    "offsets": [0, 1, 9, 11],
    "itemsize": 15,
})
#: One entry of a Message Index: a message's log time and its record's offset in the chunk's records.
MESSAGE_INDEX_ENTRY = np.dtype([("log_time", "<u8"), ("offset", "<u8")])
#: A Message record before its payload.
MESSAGE_HEAD = np.dtype({
    "names": ["opcode", "length", "channel_id", "sequence", "log_time", "publish_time"],
    "formats": ["u1", "<u8", "<u2", "<u4", "<u8", "<u8"],
    "offsets": [0, 1, 9, 11, 15, 23],
    "itemsize": 31,
})
#: Bytes of a Message record's fields before the payload (its head less opcode and length).
MESSAGE_FIELDS_BYTES = MESSAGE_HEAD.itemsize - 9
_MAX_TIME = 2**64 - 1


def _records_at(buf: np.ndarray, positions: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The ``dtype`` records starting at byte ``positions`` of ``buf`` (all inside it)."""
    items = np.ndarray((buf.size - dtype.itemsize + 1,), dtype=np.dtype((np.void, dtype.itemsize)), buffer=buf,
                       strides=(1,))
    return items[positions].view(dtype)


def _decompress(data: memoryview, compression: str, size: int) -> bytes:
    if compression == "zstd":
        import zstandard  # noqa: PLC0415 - only files with compressed chunks need it

        return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    if compression == "lz4":
        import lz4.frame  # noqa: PLC0415

        return lz4.frame.decompress(data)
    raise ValueError(f"unsupported chunk compression {compression!r}")


def _channel_infos(schemas: Mapping[int, Schema], channels: Mapping[int, Channel], counts: Mapping[int, int]
                   ) -> dict[int, ChannelInfo]:
    out = {}
    for channel_id, channel in channels.items():
        schema = schemas.get(channel.schema_id)
        out[channel_id] = ChannelInfo(
            channel_id, channel.topic, schema.name if schema else "", channel.message_encoding,
            schema.encoding if schema else "", schema.data.decode("utf-8", "replace") if schema else "",
            int(counts.get(channel_id, 0)))
    return out


class McapFile:
    """One MCAP file, any profile (rosbag2 files and bare ones alike).

    Raises:
        McapError, OSError, ValueError: not an MCAP file, or a damaged one.
    """

    def __init__(self, path: Path, label: str) -> None:
        self.path = path
        self.label = label
        self._file = path.open("rb")
        try:
            reader = make_reader(self._file)
            reader.get_header()
            self._summary = reader.get_summary()
            if self._summary is not None and self._summary.statistics is not None:
                stats = self._summary.statistics
                self.channels = _channel_infos(self._summary.schemas, self._summary.channels,
                                               stats.channel_message_counts)
                self.message_count = int(stats.message_count)
                self._range = (int(stats.message_start_time), int(stats.message_end_time))
            else:
                self._scan()
        except BaseException:
            self._file.close()
            raise

    def _scan(self) -> None:
        """Channels, counts and times read from every record (a file without statistics)."""
        schemas: dict[int, Schema] = {}
        channels: dict[int, Channel] = {}
        counts: dict[int, int] = defaultdict(int)
        first, last = _MAX_TIME, 0
        self._file.seek(0)
        for record in StreamReader(self._file).records:
            if isinstance(record, Schema):
                schemas[record.id] = record
            elif isinstance(record, Channel):
                channels[record.id] = record
            elif isinstance(record, Message):
                counts[record.channel_id] += 1
                first, last = min(first, record.log_time), max(last, record.log_time)
        self.channels = _channel_infos(schemas, channels, counts)
        self.message_count = sum(counts.values())
        self._range = (first, last)

    def time_range_ns(self) -> tuple[int, int] | None:
        """(first, last) log time, None without messages."""
        return self._range if self.message_count else None

    def close(self) -> None:
        self._file.close()

    def read(self, wanted: Mapping[int, str], start_ns: int | None, stop_ns: int | None
             ) -> dict[str, list[RawMessages]]:
        """Raw messages of the ``wanted`` channels (id -> logical topic) in [start_ns, stop_ns).

        Raises:
            ValueError, McapError: the file is damaged where these messages are.
        """
        wanted = {cid: topic for cid, topic in wanted.items() if self.channels[cid].message_count}
        if not wanted or not self.message_count:
            return {}
        start = 0 if start_ns is None else max(0, int(start_ns))
        stop = _MAX_TIME if stop_ns is None else int(stop_ns)
        if self._summary is None or not self._summary.chunk_indexes:
            return self._read_with_library(wanted, start, stop)
        chunks = [c for c in self._summary.chunk_indexes
                  if c.message_end_time >= start and c.message_start_time < stop
                  and (not c.message_index_offsets or any(cid in c.message_index_offsets for cid in wanted))]
        if not chunks:
            return {}
        span, records = self._read_chunks(chunks)
        runs = self._index_runs(chunks, span, records, wanted)
        return _locate(records, runs, wanted, start, stop)

    def _read_with_library(self, wanted: Mapping[int, str], start: int, stop: int) -> dict[str, list[RawMessages]]:
        """Messages through the mcap library (files without chunk indexes)."""
        found: dict[str, tuple[list[int], list[bytes]]] = {topic: ([], []) for topic in wanted.values()}
        self._file.seek(0)
        reader = make_reader(self._file)
        for _, channel, message in reader.iter_messages(starting_at=start, ending_before=stop, log_time_order=False):
            topic = wanted.get(channel.id)
            if topic is not None:
                found[topic][0].append(message.log_time)
                found[topic][1].append(message.data)
        return {topic: [RawMessages.of(times, datas)] for topic, (times, datas) in found.items() if times}

    def _read_chunks(self, chunks: Sequence[ChunkIndex]) -> tuple[np.ndarray, list[tuple[np.ndarray, int, int]]]:
        """(the chunks and their message indexes as read from the file, one after the
        other; per chunk, (buffer, start, size) of its records, decompressed where needed)."""
        lengths = [c.chunk_length + c.message_index_length for c in chunks]
        span = np.empty(sum(lengths), dtype=np.uint8)
        view = memoryview(span)  # type: ignore[arg-type]
        at = 0
        records = []
        for chunk, length in zip(chunks, lengths, strict=True):
            self._file.seek(chunk.chunk_start_offset)
            got = self._file.readinto(view[at : at + length]) or 0
            if got < chunk.chunk_length:
                raise ValueError(f"chunk at offset {chunk.chunk_start_offset} is truncated")
            records.append(_chunk_records(span, at, chunk))
            at += length
        return span, records

    def _index_runs(self, chunks: Sequence[ChunkIndex], span: np.ndarray, records: list[tuple[np.ndarray, int, int]],
                    wanted: Mapping[int, str]) -> list[tuple[int, int, np.ndarray]]:
        """(chunk number, channel id, index entries) of each wanted channel in each chunk."""
        runs = []
        at = 0
        for number, chunk in enumerate(chunks):
            if not chunk.message_index_offsets:
                buf, begin, _ = records[number]
                runs += [(number, cid, entries) for cid, entries in _walk(buf, begin, chunk, wanted).items()]
            for cid in wanted:
                offset = chunk.message_index_offsets.get(cid)
                if offset is not None:
                    runs.append((number, cid, self._index_entries(span, at, chunk, cid, offset)))
            at += chunk.chunk_length + chunk.message_index_length
        return runs

    def _index_entries(self, span: np.ndarray, at: int, chunk: ChunkIndex, cid: int, offset: int) -> np.ndarray:
        """The entries of one Message Index record, from ``span`` (``chunk`` read at ``at``) or the file."""
        where = at + offset - chunk.chunk_start_offset
        source = span
        if not at <= where <= at + chunk.chunk_length + chunk.message_index_length - MESSAGE_INDEX_HEAD.itemsize:
            self._file.seek(offset)
            head = self._file.read(MESSAGE_INDEX_HEAD.itemsize)
            entries_length = np.frombuffer(head, MESSAGE_INDEX_HEAD, 1)[0]["entries_length"] if len(head) == 15 else 0
            source = np.frombuffer(head + self._file.read(int(entries_length)), dtype=np.uint8)
            where = 0
        if where + MESSAGE_INDEX_HEAD.itemsize > source.size:
            raise ValueError(f"message index of chunk at offset {chunk.chunk_start_offset}, channel {cid} is truncated")
        head = np.frombuffer(source, MESSAGE_INDEX_HEAD, 1, where)[0]
        size = int(head["entries_length"])
        if (head["opcode"] != OPCODE_MESSAGE_INDEX or head["channel_id"] != cid or size % MESSAGE_INDEX_ENTRY.itemsize
                or where + MESSAGE_INDEX_HEAD.itemsize + size > source.size):
            raise ValueError(f"message index of chunk at offset {chunk.chunk_start_offset}, channel {cid} is invalid")
        return np.frombuffer(source, MESSAGE_INDEX_ENTRY, size // MESSAGE_INDEX_ENTRY.itemsize,
                             where + MESSAGE_INDEX_HEAD.itemsize)


def _chunk_records(span: np.ndarray, at: int, chunk: ChunkIndex) -> tuple[np.ndarray, int, int]:
    """(buffer, start, size) of a chunk's records (``span`` itself where they are stored
    plain), after checking the chunk's head and CRC."""
    head = np.frombuffer(span, CHUNK_HEAD, 1, at)[0]
    name_end = at + CHUNK_HEAD.itemsize + int(head["compression_length"])
    if head["opcode"] != OPCODE_CHUNK or name_end + 8 > at + chunk.chunk_length:
        raise ValueError(f"no chunk record at offset {chunk.chunk_start_offset}")
    compression = span[at + CHUNK_HEAD.itemsize : name_end].tobytes().decode("utf-8", "replace")
    (stored,) = struct.unpack_from("<Q", span, name_end)  # type: ignore[call-overload]
    begin = name_end + 8
    size = int(head["uncompressed_size"])
    if begin + stored > at + chunk.chunk_length or (not compression and stored != size):
        raise ValueError(f"chunk at offset {chunk.chunk_start_offset} overruns its record")
    data = memoryview(span)[begin : begin + stored]  # type: ignore[arg-type]
    if compression:
        data = memoryview(_decompress(data, compression, size))
        if len(data) != size:
            raise ValueError(f"chunk at offset {chunk.chunk_start_offset} decompresses to {len(data)} bytes, "
                             f"not {size}")
    crc = int(head["uncompressed_crc"])
    if crc and zlib.crc32(data) != crc:
        raise ValueError(f"chunk at offset {chunk.chunk_start_offset}: CRC mismatch")
    return (np.frombuffer(data, dtype=np.uint8), 0, size) if compression else (span, begin, size)


def _walk(buf: np.ndarray, begin: int, chunk: ChunkIndex, wanted: Mapping[int, str]) -> dict[int, np.ndarray]:
    """Index entries of the wanted channels' messages, found by walking a chunk's records
    one by one (a chunk without message indexes)."""
    found: dict[int, list[tuple[int, int]]] = defaultdict(list)
    end = chunk.uncompressed_size
    pos = 0
    while pos < end:
        if pos + 9 > end:
            raise ValueError(f"record overruns chunk at offset {chunk.chunk_start_offset}")
        opcode = int(buf[begin + pos])
        (length,) = struct.unpack_from("<Q", buf, begin + pos + 1)  # type: ignore[call-overload]
        if pos + 9 + length > end:
            raise ValueError(f"record overruns chunk at offset {chunk.chunk_start_offset}")
        if opcode == OPCODE_MESSAGE and length >= MESSAGE_FIELDS_BYTES:
            channel_id, log_time = struct.unpack_from("<H4xQ", buf, begin + pos + 9)  # type: ignore[call-overload]
            if channel_id in wanted:
                found[channel_id].append((log_time, pos))
        pos += 9 + length
    return {cid: np.array(pairs, dtype="<u8").view(MESSAGE_INDEX_ENTRY).reshape(-1) for cid, pairs in found.items()}


def _joined(records: list[tuple[np.ndarray, int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(one buffer holding every chunk's records, where each chunk's records start in it)."""
    first = records[0][0]
    if all(buf is first for buf, _, _ in records):
        return first, np.array([begin for _, begin, _ in records], dtype=np.int64)
    parts = [buf[begin : begin + size] for buf, begin, size in records]
    sizes = np.array([size for _, _, size in records], dtype=np.int64)
    return np.concatenate(parts), np.cumsum(sizes) - sizes


def _locate(records: list[tuple[np.ndarray, int, int]], runs: list[tuple[int, int, np.ndarray]],
            wanted: Mapping[int, str], start: int, stop: int) -> dict[str, list[RawMessages]]:
    """Check every index entry against the record it points at; return the payloads
    logged in [start, stop) per topic."""
    runs = [run for run in runs if run[2].size]
    if not runs:
        return {}
    buf, bases = _joined(records)
    ends = bases + np.array([size for _, _, size in records], dtype=np.int64)
    counts = np.array([entries.size for _, _, entries in runs])
    chunk_of = np.repeat(np.array([run[0] for run in runs]), counts)
    channel = np.repeat(np.array([run[1] for run in runs]), counts)
    entries = np.concatenate([run[2] for run in runs])
    log_time = entries["log_time"]
    chunk_end = ends[chunk_of]
    if (entries["offset"] >= np.uint64(2**62)).any():
        raise ValueError("a message index entry points past its chunk's records")
    at = bases[chunk_of] + entries["offset"].astype(np.int64)
    if (at + MESSAGE_HEAD.itemsize > chunk_end).any():
        raise ValueError("a message index entry points past its chunk's records")
    head = _records_at(buf, at, MESSAGE_HEAD)
    length = head["length"].astype(np.int64)
    bad = (head["opcode"] != OPCODE_MESSAGE) | (head["channel_id"] != channel) | (head["log_time"] != log_time)
    bad |= (length < MESSAGE_FIELDS_BYTES) | (at + 9 + length > chunk_end)
    if bad.any():
        raise ValueError(f"message index of channel {int(channel[np.argmax(bad)])} disagrees with the chunk's records")
    keep = (log_time >= np.uint64(start)) & (log_time < np.uint64(stop))
    out: dict[str, list[RawMessages]] = defaultdict(list)
    for cid, topic in wanted.items():
        mine = np.flatnonzero(keep & (channel == cid)) if len(wanted) > 1 or not keep.all() else np.arange(keep.size)
        if mine.size:
            out[topic].append(RawMessages(log_time[mine].astype(np.int64), buf, at[mine] + MESSAGE_HEAD.itemsize,
                                          length[mine] - MESSAGE_FIELDS_BYTES))
    return dict(out)
