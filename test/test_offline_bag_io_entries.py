"""bag_io's check of message index entries against the records they point at."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import numpy as np
import pytest

from sim_real_bridge.offline import bag_io


def _record(channel: int, log_time: int, payload: bytes) -> bytes:
    body = struct.pack("<HIQQ", channel, 0, log_time, log_time) + payload
    return b"\x05" + struct.pack("<Q", len(body)) + body


def _args(buf: bytes, offsets: list[int], channels: list[int], times: list[int]) -> tuple:
    chunks = [SimpleNamespace(uncompressed_size=len(buf), chunk_start_offset=0)]
    n = len(offsets)
    return (np.frombuffer(buf, dtype=np.uint8).copy(), chunks, np.zeros(n, dtype=np.int64),
            np.zeros(1, dtype=np.int64), np.asarray(channels, dtype=np.int64), np.asarray(times, dtype=np.int64),
            np.asarray(offsets, dtype=np.int64))


def test_words_reads_values_at_every_byte() -> None:
    buf = np.frombuffer(b"\x01\x02\x03\x04", dtype=np.uint8)
    assert bag_io._words(buf, "<u2").tolist() == [0x0201, 0x0302, 0x0403]
    assert bag_io._words(buf, "<i8").size == 0


def test_entries_give_payload_starts_and_sizes() -> None:
    first, second = _record(3, 10, b"abc"), _record(4, 2**62, b"")
    starts, sizes = bag_io._check_entries(*_args(first + second, [0, len(first)], [3, 4], [10, 2**62]))
    assert starts.tolist() == [31, len(first) + 31] and sizes.tolist() == [3, 0]


@pytest.mark.parametrize("channels, times, offsets", [
    ([9], [10], [0]),  # another channel
    ([3], [11], [0]),  # another log time
    ([3], [10], [-1]),  # before the chunk
    ([3], [10], [40]),  # past the chunk
])
def test_disagreeing_entries_raise(channels: list[int], times: list[int], offsets: list[int]) -> None:
    with pytest.raises(ValueError, match="disagrees"):
        bag_io._check_entries(*_args(_record(3, 10, b"abc") + b"\x00" * 8, offsets, channels, times))


def test_entry_of_a_too_short_chunk_raises() -> None:
    with pytest.raises(ValueError, match="past the chunks"):
        bag_io._check_entries(*_args(b"\x05" * 10, [0], [3], [10]))
