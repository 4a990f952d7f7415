"""Plot data shared by the run report's figures: downsampled time traces, bands, event shading."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sim_real_bridge.offline import plot_spec as ps
from sim_real_bridge.offline.report_data import category_color, minmax_downsample


def f32(a: np.ndarray) -> np.ndarray:
    """Plot data in float32: half the bytes, and far below any residual's precision need."""
    return np.asarray(a, dtype=np.float32)


def event_end(ev: Mapping[str, Any], duration_s: float) -> float:
    end = ev.get("end_s")
    return float(duration_s) if end is None else float(end)


def shade_events(fig: ps.Figure, events: Sequence[Mapping[str, Any]], duration_s: float,
                  rows: int) -> list[dict[str, Any]]:
    """Shapes shading each event's window in its category colour on every row of a time
    figure (what ``add_vrect`` draws), for :meth:`Page.figure`."""
    refs = []
    for row in range(1, rows + 1):
        x_ref, y_ref = fig.axis_refs(row, 1)
        refs.append((x_ref, f"{y_ref} domain"))
    shapes = []
    for ev in events:
        start = float(ev["start_s"])
        end = max(event_end(ev, duration_s), start + 1e-3 * max(duration_s, 1.0))
        for x_ref, y_ref in refs:
            shapes.append({"type": "rect", "x0": start, "x1": end, "y0": 0, "y1": 1, "xref": x_ref, "yref": y_ref,
                           "fillcolor": category_color(str(ev["category"])), "opacity": 0.15,
                           "line": {"width": 0}, "layer": "below"})
    return shapes


def time_trace(t_s: np.ndarray, y: np.ndarray, max_points: int, **kwargs: Any) -> dict[str, Any]:
    t, v = minmax_downsample(t_s, y, max_points)
    kwargs.setdefault("line", {"width": 1.2})
    return ps.scatter(x=f32(t), y=f32(v), mode="lines", **kwargs)


def box_stats(values: np.ndarray) -> dict[str, float]:
    """Tukey box statistics computed here, so the page does not carry every sample."""
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    iqr = q3 - q1
    lo = float(values[values >= q1 - 1.5 * iqr].min())
    hi = float(values[values <= q3 + 1.5 * iqr].max())
    return {"q1": float(q1), "median": float(med), "q3": float(q3), "lowerfence": lo, "upperfence": hi,
            "mean": float(values.mean())}


def band(fig: ps.Figure, t: np.ndarray, y: np.ndarray, std: np.ndarray | None, color: str, name: str,
          row: int, max_points: int) -> None:
    if std is not None:
        lo_t, lo = minmax_downsample(t, y - std, max_points)
        hi_t, hi = minmax_downsample(t, y + std, max_points)
        fig.add_trace(ps.scatter(x=f32(hi_t), y=f32(hi), mode="lines", line={"width": 0}, showlegend=False,
                                 hoverinfo="skip"), row=row, col=1)
        fig.add_trace(ps.scatter(x=f32(lo_t), y=f32(lo), mode="lines", line={"width": 0}, fill="tonexty",
                                 fillcolor=color.replace("rgb", "rgba").replace(")", ",0.2)"),
                                 name=f"{name} ±1σ", hoverinfo="skip"), row=row, col=1)
    fig.add_trace(time_trace(t, y, max_points, name=name, line={"width": 1.5, "color": color}), row=row, col=1)
