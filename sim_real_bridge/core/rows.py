"""A run's per-tick rows (small float64 arrays) stacked into one 2-D array by their bytes.

np.array and np.concatenate take each small row through their general conversion (~1,800
instructions a row, several M for a minute of ticks); joining the rows' bytes copies them
(~450 a row). The engine's statistics, the report and the divergence.mcap writer stack
thousands of such rows per replay.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

#: The float64 of the messages and of the engine (native float64 equals it on little-endian hosts).
_F64 = np.dtype("<f8")


def join_rows(rows: Sequence[Any], width: int) -> np.ndarray | None:
    """``rows`` as a (len(rows), width) float64 array of their joined bytes when every row
    is a C-contiguous float64 array of exactly ``width`` values (the bytes are then those
    np.array would give); None for any other rows."""
    n = len(rows)
    try:
        data = bytearray().join(rows)  # TypeError, BufferError: a row that is no contiguous buffer
        if (len(data) != 8 * width * n or list(map(len, rows)).count(width) != n
                or list(map(operator.attrgetter("dtype"), rows)).count(_F64) != n):
            return None
    except (TypeError, BufferError, AttributeError):
        return None
    return np.frombuffer(data, dtype=_F64).reshape(n, width)


def stack_rows(rows: Sequence[Any]) -> np.ndarray:
    """``np.array(rows)``, by :func:`join_rows` where it applies (rows of one length)."""
    joined = join_rows(rows, len(rows[0])) if len(rows) else None
    return joined if joined is not None else np.array(rows)
