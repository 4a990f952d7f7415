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


class _Rec:
    def __init__(self, **fields: object) -> None:
        self.__dict__.update(fields)


def test_joined_is_concatenate_of_float64_rows() -> None:
    base = np.arange(24.0).reshape(4, 6)
    base[1, 2] = np.nan
    records = [_Rec(a=row[:3], b=row[3:]) for row in base]
    got = cdr._joined(records, ("a", "b"), 3)
    assert got.tobytes() == base.tobytes() and got.shape == (4, 6)
    assert cdr._joined(records, ("b",), 3).tobytes() == np.ascontiguousarray(base[:, 3:]).tobytes()
    assert cdr._joined([_Rec(a=np.zeros(0))] * 3, ("a",), 0).shape == (3, 0)


@pytest.mark.parametrize("odd", [
    np.arange(3, dtype=np.int64),  # 8-byte items that are not float64
    np.arange(3, dtype=np.float32),
    np.arange(3.0).astype(">f8"),
    np.arange(6.0)[::2],  # not contiguous
    np.arange(4.0),  # another length
    [0.0, 1.0, 2.0],
    np.float64(1.0),
    np.arange(3.0).reshape(1, 3),
])
def test_joined_refuses_anything_but_contiguous_float64_rows_of_the_width(odd: object) -> None:
    """A refusal sends the caller to the plain path, which converts (or refuses) as before."""
    records = [_Rec(a=np.arange(3.0)) for _ in range(5)]
    records[2].a = odd
    assert cdr._joined(records, ("a",), 3) is None


def test_stack_takes_the_first_values_when_joining_does_not_apply() -> None:
    records = [_Rec(a=np.arange(5.0) + i, b=np.arange(3, dtype=np.int64)) for i in range(4)]
    got = cdr._stack(records, ("a", "b"), 3)
    assert np.array_equal(got, np.hstack([np.array([r.a[:3] for r in records]), np.array([r.b for r in records])]))
