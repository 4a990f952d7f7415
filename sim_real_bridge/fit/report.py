"""fit.html: the fitted parameters and, per window, real vs sim-before vs sim-after overlays.

One self-contained page: plotly.js embedded once, inline (no network needed), a table
of the parameters and one figure per window with every joint's position (and the wrist
force when recorded).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from sim_real_bridge.fit.model import Rollout
from sim_real_bridge.fit.windows import WindowData

_COLOURS = {"real": "#222222", "before": "#d62728", "after": "#1f77b4"}


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def _parameter_table(result: dict[str, Any]) -> str:
    rows = []
    for p in result["parameters"]:
        interval = "–" if p["interval95"] is None else f"{p['interval95'][0]:.4g} … {p['interval95'][1]:.4g}"
        rows.append(f"<tr><td>{_fmt(p['name'])}</td><td>{_fmt(p['unit'])}</td><td>{_fmt(p['before'])}</td>"
                    f"<td>{_fmt(p['fitted'])}</td><td>{interval}</td><td>{_fmt(p['identifiable'])}</td>"
                    f"<td>{_fmt(p['applied'])}</td></tr>")
    head = ("<tr><th>parameter</th><th>unit</th><th>before</th><th>fitted</th><th>95% interval</th>"
            "<th>identifiable</th><th>in corrected model</th></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _window_table(result: dict[str, Any]) -> str:
    rows = [f"<tr><td>{_fmt(w['label'])}</td><td>{_fmt(w['category'])}</td><td>{w['start_s']:.2f}–{w['end_s']:.2f}</td>"
            f"<td>{_fmt(w['joint_rms_before_rad'])}</td><td>{_fmt(w['joint_rms_after_rad'])}</td>"
            f"<td>{100 * w['joint_reduction']:.0f}%</td></tr>" for w in result["windows"]]
    head = ("<tr><th>window</th><th>category</th><th>s after first command</th><th>joint RMS before, rad</th>"
            "<th>after, rad</th><th>reduction</th></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def window_figure(wd: WindowData, before: Rollout, after: Rollout) -> go.Figure:
    """Every joint's position (and the wrist force, if recorded): real, sim before, sim after."""
    n = len(wd.joint_names)
    rows = n + (1 if wd.wrench is not None and before.wrench is not None else 0)
    titles = [f"{name} (rad)" for name in wd.joint_names] + (["force |F| (N)"] if rows > n else [])
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, subplot_titles=titles, vertical_spacing=0.02)
    for j in range(n):
        series = (("real", wd.joint_t_s, wd.q_rad[:, j]), ("before", before.t_s, before.q_rad[:, j]),
                  ("after", after.t_s, after.q_rad[:, j]))
        for label, t, y in series:
            fig.add_trace(go.Scattergl(x=t, y=y, name=f"sim {label}" if label != "real" else "real",
                                       legendgroup=label, showlegend=j == 0, line={"color": _COLOURS[label]}),
                          row=j + 1, col=1)
    if rows > n:
        for label, t, y in (("real", wd.wrench_t_s, wd.wrench[:, :3]), ("before", before.t_s, before.wrench[:, :3]),
                            ("after", after.t_s, after.wrench[:, :3])):
            fig.add_trace(go.Scattergl(x=t, y=np.linalg.norm(y, axis=1), legendgroup=label, showlegend=False,
                                       line={"color": _COLOURS[label]}), row=rows, col=1)
    fig.update_layout(height=170 * rows, margin={"l": 60, "r": 20, "t": 40, "b": 40})
    fig.update_xaxes(title_text="s from window start", row=rows, col=1)
    return fig


def write_report(result: dict[str, Any], plots: Sequence[tuple[WindowData, Rollout, Rollout]], path: Path) -> None:
    """Write fit.html for a fit's result and its windows' rollouts."""
    res = result["residual"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>sim_real_bridge fit</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}</style></head><body>",
        f"<h1>Fit of {html.escape(Path(result['model']).name)}</h1>",
        f"<p>Joint residual RMS {res['joint_rms_before_rad']:.3g} rad before, {res['joint_rms_after_rad']:.3g} rad "
        f"after ({100 * res['joint_reduction']:.0f}% less). Parameters not identifiable from these windows keep "
        "their value in the corrected model.</p>",
        "<h2>Parameters</h2>", _parameter_table(result), "<h2>Windows</h2>", _window_table(result),
    ]
    for notes in result.get("notes", []):
        parts.append(f"<p>{html.escape(notes)}</p>")
    for i, (wd, before, after) in enumerate(plots):
        parts.append(f"<h3>{html.escape(wd.window.label)}</h3>")
        parts.append(pio.to_html(window_figure(wd, before, after), include_plotlyjs=i == 0, full_html=False))
    parts.append("</body></html>")
    Path(path).write_text("".join(parts), encoding="utf-8")
