"""cdr's batch helpers give what the per-record conversions give."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.conversions import cdr


@pytest.mark.parametrize("values", [
    [np.arange(3.0), np.arange(3.0) + 1],
    [[1, 2], [3, 4], [5, 6]],
    [np.array([True, False]), np.array([1, 2], dtype=np.int64)],
    [np.empty(0), np.empty(0)],
    [np.zeros((2, 2)), np.ones((2, 2))],
])
def test_rows_is_np_array_of_floats(values: list) -> None:
    got = cdr._rows(values)
    want = np.array(values, dtype=float)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


def test_rows_of_ragged_values_raise_as_np_array() -> None:
    with pytest.raises(ValueError):
        cdr._rows([np.arange(3.0), np.arange(2.0)])


@pytest.mark.parametrize("values", [[np.float64(1.0), np.float64(2.0)], [1.0, 2.0], []])
def test_rows_of_scalars_or_nothing_are_np_array(values: list) -> None:
    assert np.array_equal(cdr._rows(values), np.array(values, dtype=float))


def test_fill_splits_rows() -> None:
    got = cdr._fill(b"\x00" * 6, [(2, np.array([[1, 2], [3, 4], [5, 6]], dtype=np.uint8))])
    assert got == [b"\x00\x00\x01\x02\x00\x00", b"\x00\x00\x03\x04\x00\x00", b"\x00\x00\x05\x06\x00\x00"]
