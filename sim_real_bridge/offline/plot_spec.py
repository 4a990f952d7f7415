"""Plotly figures as plain dicts: the JSON plotly.js draws, without plotly's figure objects.

plotly.graph_objects validates every property on every assignment; a report of a dozen
figures spends most of its time there. The report needs a small part of that API, kept
here with the same names and meaning: traces are dicts (``{"type": "scatter", ...}``),
:func:`subplots` lays out axes as ``plotly.subplots.make_subplots`` does (same domains,
anchors, shared x axes and subplot titles; test_offline_report checks them against
plotly's), and numpy arrays go out as plotly.js typed arrays (``{"dtype", "bdata"}``,
as plotly.py writes them).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sim_real_bridge.errors import ConfigError

_TYPED = {"float32": "f4", "float64": "f8", "int8": "i1", "int16": "i2", "int32": "i4", "uint8": "u1",
          "uint16": "u2", "uint32": "u4"}


def _merge(into: dict[str, Any], update: Mapping[str, Any]) -> None:
    """Merge ``update`` into ``into``, nested dicts key by key (plotly's ``update``)."""
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value


def _axis_props(props: Mapping[str, Any]) -> dict[str, Any]:
    """Axis properties; ``title_text`` is ``title.text``, as plotly.py spells it."""
    out = dict(props)
    if "title_text" in out:
        out["title"] = {"text": out.pop("title_text")}
    return out


class Figure:
    """A plotly figure as ``data`` (trace dicts) and ``layout`` (dict).

    Args:
        data: traces to start with.
        layout: layout to start with.
    """

    def __init__(self, data: Sequence[Mapping[str, Any]] | Mapping[str, Any] = (),
                 layout: Mapping[str, Any] | None = None) -> None:
        traces = [data] if isinstance(data, Mapping) else list(data)
        self.data: list[dict[str, Any]] = [dict(t) for t in traces]
        self.layout: dict[str, Any] = dict(layout or {})
        # (row, col) -> (x axis name, y axis name), e.g. (2, 1) -> ("x2", "y2"); none: one plot.
        self._grid: dict[tuple[int, int], tuple[str, str]] = {}

    def add_trace(self, trace: Mapping[str, Any], row: int | None = None, col: int | None = None) -> Figure:
        """Append a trace, on the subplot at (row, col) when given."""
        out = dict(trace)
        if row is not None and col is not None:
            x, y = self.axis_refs(row, col)
            out["xaxis"], out["yaxis"] = x, y
        self.data.append(out)
        return self

    def axis_refs(self, row: int, col: int) -> tuple[str, str]:
        """The axis references ("x2", "y2") of the subplot at (row, col)."""
        if not self._grid:
            if (row, col) != (1, 1):
                raise ConfigError(f"figure has no subplot at row {row}, col {col}")
            return "x", "y"
        if (row, col) not in self._grid:
            raise ConfigError(f"figure has no subplot at row {row}, col {col}")
        return self._grid[(row, col)]

    def _axes(self, letter: str, row: int | None, col: int | None) -> list[str]:
        if row is not None and col is not None:
            ref = self.axis_refs(row, col)[0 if letter == "x" else 1]
            return [f"{letter}axis{ref[1:]}"]
        if not self._grid:
            return [f"{letter}axis"]
        return [f"{letter}axis{refs[0 if letter == 'x' else 1][1:]}" for refs in self._grid.values()]

    def update_layout(self, **props: Any) -> Figure:
        """Merge properties into the layout (nested dicts key by key); a ``title`` given as
        text (of the figure or of an axis) becomes ``{"text": ...}``, as plotly.py writes it,
        and ``xaxis_title``/``yaxis_title`` set that axis' title."""
        props = dict(props)
        for letter in ("x", "y"):
            if f"{letter}axis_title" in props:
                props.setdefault(f"{letter}axis", {})
                props[f"{letter}axis"] = {**props[f"{letter}axis"], "title": props.pop(f"{letter}axis_title")}
        for key, value in list(props.items()):
            if key == "title" and isinstance(value, str):
                props[key] = {"text": value}
            elif key[1:5] == "axis" and isinstance(value, Mapping) and isinstance(value.get("title"), str):
                props[key] = {**value, "title": {"text": value["title"]}}
        _merge(self.layout, props)
        return self

    def update_xaxes(self, row: int | None = None, col: int | None = None, **props: Any) -> Figure:
        """Merge properties into the x axis of (row, col), or into every x axis."""
        for name in self._axes("x", row, col):
            _merge(self.layout.setdefault(name, {}), _axis_props(props))
        return self

    def update_yaxes(self, row: int | None = None, col: int | None = None, **props: Any) -> Figure:
        """Merge properties into the y axis of (row, col), or into every y axis."""
        for name in self._axes("y", row, col):
            _merge(self.layout.setdefault(name, {}), _axis_props(props))
        return self

    def to_dict(self) -> dict[str, Any]:
        """``{"data": [...], "layout": {...}}`` (shared with the figure: copy before changing)."""
        return {"data": self.data, "layout": self.layout}


def subplots(rows: int = 1, cols: int = 1, shared_xaxes: bool = False, vertical_spacing: float | None = None,
             horizontal_spacing: float | None = None, row_heights: Sequence[float] | None = None,
             specs: Sequence[Sequence[Mapping[str, Any] | None]] | None = None,
             subplot_titles: Sequence[str] | None = None) -> Figure:
    """A figure with a grid of subplots laid out as ``plotly.subplots.make_subplots``.

    Rows count from the top; a spec ``{"colspan": n}`` spans n columns, ``None`` leaves a
    cell empty. Subplots are numbered row by row (axes x, x2, ...); with ``shared_xaxes``
    every x axis of a column matches its bottom one, whose tick labels alone show.
    """
    if rows < 1 or cols < 1:
        raise ConfigError(f"subplots needs rows, cols >= 1, got {rows}, {cols}")
    specs = specs or [[{} for _ in range(cols)] for _ in range(rows)]
    if len(specs) != rows or any(len(r) != cols for r in specs):
        raise ConfigError(f"specs must be {rows} rows of {cols} cells")
    h_space = 0.2 / cols if horizontal_spacing is None else horizontal_spacing
    v_space = (0.5 if subplot_titles else 0.3) / rows if vertical_spacing is None else vertical_spacing
    heights = list(row_heights) if row_heights is not None else [1.0] * rows
    widths = [(1.0 - h_space * (cols - 1)) / cols] * cols
    heights = [(1.0 - v_space * (rows - 1)) * h / sum(heights) for h in heights]
    fig = Figure()
    titles = list(subplot_titles or [])
    annotations = []
    n = 0
    cells: list[tuple[int, int, list[float], list[float]]] = []
    for r in range(rows):
        top = 1.0 - sum(heights[:r]) - v_space * r
        for c in range(cols):
            spec = specs[r][c]
            if spec is None:
                continue
            span = int(spec.get("colspan", 1))
            x0 = sum(widths[:c]) + h_space * c
            x1 = x0 + sum(widths[c:c + span]) + h_space * (span - 1)
            cells.append((r + 1, c + 1, [x0, min(1.0, x1)], [max(0.0, top - heights[r]), top]))
    for row, col, x_dom, y_dom in cells:
        n += 1
        suffix = "" if n == 1 else str(n)
        fig._grid[(row, col)] = (f"x{suffix}", f"y{suffix}")
        fig.layout[f"xaxis{suffix}"] = {"anchor": f"y{suffix}", "domain": x_dom}
        fig.layout[f"yaxis{suffix}"] = {"anchor": f"x{suffix}", "domain": y_dom}
        if n <= len(titles) and titles[n - 1]:
            annotations.append({"font": {"size": 16}, "showarrow": False, "text": titles[n - 1],
                                "x": (x_dom[0] + x_dom[1]) / 2, "xanchor": "center", "xref": "paper",
                                "y": y_dom[1], "yanchor": "bottom", "yref": "paper"})
    if shared_xaxes:
        for col in range(1, cols + 1):
            in_col = sorted(r for (r, c) in fig._grid if c == col)
            if len(in_col) < 2:
                continue
            bottom = fig._grid[(in_col[-1], col)][0]
            for r in in_col[:-1]:
                name = f"xaxis{fig._grid[(r, col)][0][1:]}"
                fig.layout[name].update({"matches": bottom, "showticklabels": False})
    if annotations:
        fig.layout["annotations"] = annotations
    return fig


# Stands for a typed array's base64 data in the JSON text until the data is spliced in:
# the JSON encoder and the script escaping then never scan the bulk of a figure.
_PAYLOAD = "@bdata@"
_PAYLOAD_JSON = json.dumps(_PAYLOAD)


# Base64 texts made for a page, by the length of their data: [(data, text), ...].
Encoded = dict[int, list[tuple[bytes, str]]]


def _base64(raw: bytes, encoded: Encoded | None) -> str:
    """``raw`` in base64; with ``encoded``, the text made before for equal data, if any."""
    if encoded is None:
        return base64.b64encode(raw).decode("ascii")
    made = encoded.setdefault(len(raw), [])
    for known, text in made:
        if known == raw:  # (a byte comparison, stopping at the first difference: no hash of every byte)
            return text
    text = base64.b64encode(raw).decode("ascii")
    made.append((raw, text))
    return text


def _typed(value: np.ndarray, payloads: list[str] | None = None, encoded: Encoded | None = None) -> Any:
    """A numpy array as a plotly.js typed array spec (lists for other dtypes); with
    ``payloads``, its data goes there and the spec holds :data:`_PAYLOAD` instead;
    with ``encoded``, data encoded before (see :func:`to_json`) is not encoded again."""
    code = _TYPED.get(str(value.dtype))
    if code is None or value.size == 0 or value.ndim != 1:
        return _plain(value.tolist(), payloads, encoded)
    text = _base64(np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes(), encoded)
    if payloads is None:
        return {"dtype": code, "bdata": text}
    payloads.append(text)
    return {"dtype": code, "bdata": _PAYLOAD}


def _plain(value: Any, payloads: list[str] | None = None, encoded: Encoded | None = None) -> Any:
    """JSON-ready: arrays typed, numpy scalars Python, non-finite floats null (as plotly.py)."""
    kind = type(value)
    # The plain JSON types first: they are nearly every value of a figure.
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _plain(v, payloads, encoded) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, payloads, encoded) for v in value]
    if isinstance(value, np.ndarray):
        return _typed(value, payloads, encoded)
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _script_safe(text: str) -> str:
    """JSON text made safe inside a <script> element (``&``, ``<``, ``>`` as \\u escapes)."""
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def to_json(fig: Figure | Mapping[str, Any], script_safe: bool = False,
            encoded: Encoded | None = None) -> str:
    """The figure as JSON for ``Plotly.newPlot`` (``{"data": ..., "layout": ...}``).

    Args:
        fig: the figure, or its dict.
        script_safe: escape ``&``, ``<`` and ``>`` (as ``\\u0026``...), for a <script> element.
        encoded: the base64 texts of array data made so far, kept across the figures of
            a page (an empty dict to start): an array drawn again (the same times in
            every trace) is encoded once.
    """
    spec = fig.to_dict() if isinstance(fig, Figure) else fig
    payloads: list[str] = []
    text = json.dumps(_plain(spec, payloads, encoded), separators=(",", ":"), allow_nan=False)
    pieces = text.split(_PAYLOAD_JSON)
    if len(pieces) != len(payloads) + 1:  # a text of the figure is the stand-in itself
        text = json.dumps(_plain(spec, None, encoded), separators=(",", ":"), allow_nan=False)
        return _script_safe(text) if script_safe else text
    if script_safe:
        pieces = [_script_safe(piece) for piece in pieces]
    # Base64 needs no JSON or script escaping: each payload goes in as the encoder writes it.
    out = [pieces[0]]
    for payload, piece in zip(payloads, pieces[1:], strict=True):
        out.extend(('"', payload, '"', piece))
    return "".join(out)


def _trace(kind: str, props: Mapping[str, Any]) -> dict[str, Any]:
    out = {"type": kind, **props}
    if "marker_color" in out:  # plotly.py's shorthand for marker.color
        out.setdefault("marker", {})
        out["marker"] = {**out["marker"], "color": out.pop("marker_color")}
    return out


def scatter(**props: Any) -> dict[str, Any]:
    """A scatter trace."""
    return _trace("scatter", props)


def bar(**props: Any) -> dict[str, Any]:
    """A bar trace."""
    return _trace("bar", props)


def box(**props: Any) -> dict[str, Any]:
    """A box trace (precomputed statistics: q1, median, q3, fences)."""
    return _trace("box", props)


__all__ = ["Figure", "bar", "box", "scatter", "subplots", "to_json"]
