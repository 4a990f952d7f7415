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


@pytest.mark.parametrize("width", [12, 13, 16, 20, 61, 104, 300])
@pytest.mark.parametrize("at_start", [False, True])
def test_rows_differ_equals_a_plain_byte_compare(width, at_start):
    from sim_real_bridge.offline.bag_io import _rows_differ

    rng = np.random.default_rng(width)
    template = rng.integers(0, 256, size=width, dtype=np.uint8)
    variable = [(4, 12)] + ([(13, min(width, 13 + 8 * (width // 40)))] if width > 20 else [])
    messages = np.tile(template, (width + 2, 1))
    for i in range(width):  # message i differs in byte i (in a variable region or not)
        messages[i, i] ^= 1 << (i % 8)
    messages[-1, -1] ^= 0x80
    buf = np.concatenate([np.zeros(0 if at_start else 9, dtype=np.uint8), *[np.append(m, rng.integers(0, 256, 8, dtype=np.uint8)) for m in messages]])
    starts = np.arange(messages.shape[0], dtype=np.int64) * (width + 8) + (0 if at_start else 9)
    rows, lead = _rows_at(buf, starts, width)
    assert (lead == 0) == at_start
    fixed = np.ones(width, dtype=bool)
    for begin, end in variable:
        fixed[begin:end] = False
    plain = ((messages != template) & fixed).any(axis=1)
    assert _rows_differ(rows, lead, template, variable).tolist() == plain.tolist()


@pytest.mark.parametrize("begin", [0, 4, 8, 16])
def test_floats_copied_out_equal_the_block(begin):
    from sim_real_bridge.offline.bag_io import _columns, _copy_floats

    rng = np.random.default_rng(begin)
    rows = rng.integers(0, 256, size=(9, 48), dtype=np.uint8)
    got = np.empty((9, 3))
    _copy_floats(rows, begin, got)
    assert got.tobytes() == rows[:, begin : begin + 24].tobytes()
    picked = _columns(got, [2, 0])
    assert picked.flags.c_contiguous and picked.view(np.uint64).tolist() == got[:, [2, 0]].view(np.uint64).tolist()
