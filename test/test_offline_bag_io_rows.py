"""Rows gathered for the batch decoders: the bytes of each message, wherever it lies."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.offline.bag_io import _LEAD, _rows_at


@pytest.mark.parametrize("width", [1, 7, 8, 12, 61, 300])
@pytest.mark.parametrize("where", ["middle", "at_start", "at_end"])
def test_rows_hold_each_message_bytes(width, where):
    rng = np.random.default_rng(width)
    buf = rng.integers(0, 256, size=4 * width + 40, dtype=np.uint8)
    starts = np.array([9, 13, 2 * width + 20], dtype=np.int64)
    if where == "at_start":  # no room for the bytes before the first message
        starts[0] = 0
    elif where == "at_end":  # no room for padding after the last message, if it needs some
        starts[-1] = buf.size - width
    rows, lead = _rows_at(buf, starts, width)
    padded = (width + _LEAD) % 8 == 0  # rows end with the message: none past the buffer
    assert lead == (_LEAD if where == "middle" or (where == "at_end" and padded) else 0)
    assert rows.shape[0] == starts.size and rows.shape[1] >= lead + width
    for row, start in zip(rows, starts.tolist(), strict=True):
        assert row[lead : lead + width].tobytes() == buf[start : start + width].tobytes()
    if lead:  # rows padded to whole words: every float64 of a CDR payload lands aligned
        assert rows.shape[1] % 8 == 0 and rows[:, lead + 4 :].ctypes.data % 8 == 0


def test_no_rows():
    rows, _ = _rows_at(np.zeros(10, dtype=np.uint8), np.zeros(0, dtype=np.int64), 4)
    assert rows.shape[0] == 0
