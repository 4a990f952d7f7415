"""bag_io's check of message index entries against the records they point at."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from sim_real_bridge.offline import bag_io


def _record(channel: int, log_time: int, payload: bytes) -> bytes:
    body = struct.pack("<HIQQ", channel, 0, log_time, log_time) + payload
    return b"\x05" + struct.pack("<Q", len(body)) + body


def _args(buf: bytes, offsets: list[int], channels: list[int] | int, times: list[int]) -> tuple:
    n = len(offsets)
    return (np.frombuffer(buf, dtype=np.uint8).copy(), np.zeros(n, dtype=np.int64), np.full(n, len(buf)),
            channels if isinstance(channels, int) else np.asarray(channels, dtype=np.int64),
            np.asarray(times, dtype=np.int64), np.asarray(offsets, dtype=np.int64), lambda i: f"entry {i}")


def test_entries_give_payload_starts_and_sizes() -> None:
    first, second = _record(3, 10, b"abc"), _record(4, 2**62, b"")
    starts, sizes = bag_io._check_entries(*_args(first + second, [0, len(first)], [3, 4], [10, 2**62]))
    assert starts.tolist() == [31, len(first) + 31] and sizes.tolist() == [3, 0]


@pytest.mark.parametrize("lead", range(9))
@pytest.mark.parametrize("padded", [False, True])
def test_entries_are_read_at_every_alignment(lead: int, padded: bool) -> None:
    """The heads are read from aligned words: every byte offset, buffer given or padded."""
    rng = np.random.default_rng(lead)
    records, offsets, times, sizes = [b"\xaa" * lead], [], [], []
    for i in range(12):
        size = int(rng.integers(0, 20))
        log_time = int(rng.integers(0, 2**63))
        offsets.append(sum(map(len, records)))
        times.append(log_time)
        sizes.append(size)
        records.append(_record(0xFFFF - i, log_time, bytes(rng.integers(0, 256, size, dtype=np.uint8))))
    data = b"".join(records)
    buf = np.frombuffer(data, dtype=np.uint8).copy()
    if padded:
        buf = bag_io._padded_bytes(len(data))
        buf[:] = np.frombuffer(data, dtype=np.uint8)
        assert bag_io._aligned_words(buf).ctypes.data == buf.ctypes.data  # read in place
    args = _args(data, offsets, [0xFFFF - i for i in range(12)], times)
    starts, got = bag_io._check_entries(buf, *args[1:])
    assert starts.tolist() == [o + 31 for o in offsets] and got.tolist() == sizes
    for i in range(12):
        wrong = list(times)
        wrong[i] ^= 1 << int(rng.integers(0, 63))
        with pytest.raises(ValueError, match=f"entry {i} disagrees"):
            bag_io._check_entries(buf, *_args(data, offsets, [0xFFFF - i for i in range(12)], wrong)[1:])


@pytest.mark.parametrize("channels, times, offsets", [
    ([9], [10], [0]),  # another channel
    (9, [10], [0]),  # another channel, given once for all entries
    ([3], [11], [0]),  # another log time
    ([3], [10], [-1]),  # before the chunk
    ([3], [10], [40]),  # past the chunk
])
def test_disagreeing_entries_raise(channels: list[int] | int, times: list[int], offsets: list[int]) -> None:
    with pytest.raises(ValueError, match="entry 0 disagrees"):
        bag_io._check_entries(*_args(_record(3, 10, b"abc") + b"\x00" * 8, offsets, channels, times))


@pytest.mark.parametrize("field, value", [(0, b"\x06"), (1, (3).to_bytes(8, "little")), (1, (2**40).to_bytes(8, "little"))])
def test_records_that_disagree_raise(field: int, value: bytes) -> None:
    """A wrong opcode, a length below a message head's or past the chunk."""
    record = bytearray(_record(3, 10, b"abc"))
    record[field : field + len(value)] = value
    with pytest.raises(ValueError, match="entry 0 disagrees"):
        bag_io._check_entries(*_args(bytes(record), [0], [3], [10]))


def test_entry_of_a_too_short_chunk_raises() -> None:
    with pytest.raises(ValueError, match="past the chunks"):
        bag_io._check_entries(*_args(b"\x05" * 10, [0], [3], [10]))
