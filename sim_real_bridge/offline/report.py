"""report.html: one self-contained file per run, and a roll-up across runs; opens offline.

Plotly draws every plot (figures built as plain dicts, :mod:`plot_spec`); plotly.js is embedded once, inline, and a Content Security
Policy forbids the page any network request. Figure data travels as JSON in
``<script type="application/json">`` blocks (every ``<``, ``>`` and ``&`` escaped), and
every piece of text from a run (bag, joint, topic and kind names) is HTML-escaped both in
the page and in plot labels, so no name can inject markup.

Sections carry stable ids: ``#overview``, ``#joints``, ``#contact``, ``#timeline``,
``#ledger``, ``#timing``, ``#calibration``, ``#snapshots`` (run report);
``#overview``, ``#runs``, ``#events``, ``#residuals``, ``#predictivity`` (roll-up).
A section without data says so instead of disappearing.
"""

from __future__ import annotations

import functools
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
from plotly.offline import get_plotlyjs

from sim_real_bridge.evaluation.predictivity import episode_predictivity
from sim_real_bridge.evaluation.scoring import CATEGORIES
from sim_real_bridge.errors import ConfigError
from sim_real_bridge.offline import plot_spec as ps
from sim_real_bridge.offline.report_data import (
    CATEGORY_COLORS,
    DEFAULT_MAX_POINTS,
    RunReportData,
    category_color,
    minmax_downsample,
)

RUN_SECTIONS: tuple[str, ...] = (
    "overview", "joints", "contact", "timeline", "ledger", "timing", "calibration", "snapshots",
)
ROLLUP_SECTIONS: tuple[str, ...] = ("overview", "runs", "events", "residuals", "predictivity")
_SECTION_TITLES = {
    "overview": "Overview",
    "joints": "Joint residuals",
    "contact": "Contact residual by phase",
    "timeline": "Event timeline",
    "ledger": "Residual ledger",
    "timing": "Latency and clock offset",
    "calibration": "Calibration fit",
    "snapshots": "Snapshots",
    "runs": "Runs",
    "events": "Events per run",
    "residuals": "Residuals per run",
    "predictivity": "Sim-to-real predictivity",
}
_PHASE_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")
_JOINT_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf")
_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
)
_PLOT_CONFIG = {"responsive": True, "displaylogo": False, "showLink": False, "scrollZoom": False}
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:22px;font-weight:600}
header .sub{opacity:.8;font-size:13px;margin-top:4px}
nav{position:sticky;top:0;z-index:10;background:#fff;border-bottom:1px solid #ddd;padding:6px 24px}
nav a{margin-right:14px;color:#1565c0;text-decoration:none;font-size:14px}
main{padding:8px 24px 40px;max-width:1400px}
section{background:#fff;border:1px solid #e0e0e0;border-radius:6px;padding:12px 18px;margin:14px 0}
section h2{font-size:18px;margin:4px 0 10px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin-bottom:8px}
.card{border:1px solid #e0e0e0;border-radius:6px;padding:8px 14px;min-width:130px;background:#fcfcfc}
.card .v{font-size:20px;font-weight:600}
.card .k{font-size:12px;color:#666}
.warn{background:#fff3e0;border-left:4px solid #fb8c00;padding:6px 10px;margin:6px 0;font-size:14px}
.note{color:#666;font-style:italic}
.badge{display:inline-block;color:#fff;border-radius:3px;padding:0 6px;font-size:12px;margin-right:6px}
.legend span{margin-right:12px;font-size:13px}
ul.snaps li,ul.runs li,ul.analyses li{margin:3px 0;font-size:14px}
ul.analyses li.skipped{color:#8d6e63}
.plot{width:100%}
"""
_BOOT_JS = """
(function () {
  var cfg = %s;
  var blocks = document.querySelectorAll('script.fig-data');
  var pending = [];
  blocks.forEach(function (block) {
    var spec = JSON.parse(block.textContent);
    var div = document.getElementById(block.getAttribute('data-target'));
    pending.push(Plotly.newPlot(div, spec.data, spec.layout, cfg));
  });
  Promise.all(pending).then(function () {
    document.body.setAttribute('data-plots-ready', String(pending.length));
  }, function (err) { console.error('report plot failed: ' + err); });
})();
"""


def _esc(value: Any) -> str:
    """HTML-escape any value's text (also used for plot labels, which plotly parses as HTML)."""
    return html.escape(str(value), quote=True)


def _href(path: str) -> str:
    """Return an escaped relative link; percent-encoding the colon keeps any scheme out."""
    return _esc(quote(str(path).replace(os.sep, "/"), safe="/._-~"))


def _fmt(value: float | None, unit: str = "", scale: float = 1.0, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value * scale:.{digits}g}{unit}"


class _Page:
    """Collects sections and figures, then renders one HTML document."""

    def __init__(self, title: str, subtitle: str, sections: Sequence[str]) -> None:
        self.title = title
        self.subtitle = subtitle
        self.sections = list(sections)
        self.body: dict[str, list[str]] = {s: [] for s in sections}
        self._n_figs = 0
        self._encoded: ps.Encoded = {}  # plot data's base64 texts, for ps.to_json

    def add(self, section: str, fragment: str) -> None:
        self.body[section].append(fragment)

    def figure(self, section: str, fig: ps.Figure, height: int,
               shapes: Sequence[Mapping[str, Any]] = ()) -> None:
        """Add a figure; ``shapes`` are appended to its layout."""
        self._n_figs += 1
        fig_id = f"fig-{section}-{self._n_figs}"
        fig.update_layout(
            height=height, margin={"l": 70, "r": 20, "t": 40, "b": 45},
            paper_bgcolor="#ffffff", plot_bgcolor="#ffffff", font={"size": 12},
            hovermode="closest", legend={"orientation": "h", "y": -0.15},
        )
        fig.update_xaxes(showgrid=True, gridcolor="#eeeeee", zeroline=False, linecolor="#999", showline=True)
        fig.update_yaxes(showgrid=True, gridcolor="#eeeeee", zeroline=False, linecolor="#999", showline=True,
                         automargin=True)
        if shapes:
            fig.layout["shapes"] = list(fig.layout.get("shapes", ())) + list(shapes)
        spec = ps.to_json(fig, script_safe=True, encoded=self._encoded)
        self.add(
            section,
            f'<div class="plot" id="{fig_id}" style="height:{height}px"></div>'
            f'<script type="application/json" class="fig-data" data-target="{fig_id}">'
            f"{spec}</script>",
        )

    def render(self) -> str:
        head, tail = self.render_around_plotly()
        return head + _plotly_js().decode("utf-8") + tail

    def render_around_plotly(self) -> tuple[str, str]:
        """The page's text before and after plotly.js, which goes in between verbatim."""
        nav = "".join(f'<a href="#{s}">{_esc(_SECTION_TITLES[s])}</a>' for s in self.sections)
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_esc(self.title)}</title><style>{_CSS}</style></head><body>",
            f'<header><h1>{_esc(self.title)}</h1><div class="sub">{_esc(self.subtitle)}</div></header>',
            f"<nav>{nav}</nav><main>",
        ]
        for s in self.sections:
            parts.append(f'<section id="{s}"><h2>{_esc(_SECTION_TITLES[s])}</h2>')
            parts.extend(self.body[s])
            parts.append("</section>")
        parts.append("</main>")
        # plotly.js is ours (the installed package), inserted verbatim once.
        parts.append("<script>")
        tail = ["</script>", f"<script>{_BOOT_JS % json.dumps(_PLOT_CONFIG)}</script>", "</body></html>"]
        return "\n".join(parts), "\n".join(tail)

    def write(self, path: Path) -> Path:
        """Write the page to ``path`` (UTF-8), plotly.js as the bytes read once per process."""
        head, tail = self.render_around_plotly()
        return _write(path, (head.encode("utf-8"), _plotly_js(), tail.encode("utf-8")))


@functools.cache
def _plotly_js() -> bytes:
    """plotly.js of the installed plotly package, UTF-8 (4.6 MB: read once per process)."""
    return get_plotlyjs().encode("utf-8")


def _note(text: str) -> str:
    return f'<p class="note">{_esc(text)}</p>'


def _cards(items: Sequence[tuple[str, str]]) -> str:
    cells = "".join(f'<div class="card"><div class="v">{_esc(v)}</div><div class="k">{_esc(k)}</div></div>'
                    for k, v in items)
    return f'<div class="cards">{cells}</div>'


def _badge(category: str) -> str:
    return f'<span class="badge" style="background:{category_color(category)}">{_esc(category)}</span>'


def _palette_legend(categories: Sequence[str]) -> str:
    return '<div class="legend">' + "".join(f"<span>{_badge(c)}</span>" for c in categories) + "</div>"


def _f32(a: np.ndarray) -> np.ndarray:
    """Plot data in float32: half the bytes, and far below any residual's precision need."""
    return np.asarray(a, dtype=np.float32)


def _event_end(ev: Mapping[str, Any], duration_s: float) -> float:
    end = ev.get("end_s")
    return float(duration_s) if end is None else float(end)


def _shade_events(fig: ps.Figure, events: Sequence[Mapping[str, Any]], duration_s: float,
                  rows: int) -> list[dict[str, Any]]:
    """Shapes shading each event's window in its category colour on every row of a time
    figure (what ``add_vrect`` draws), for :meth:`_Page.figure`."""
    refs = []
    for row in range(1, rows + 1):
        x_ref, y_ref = fig.axis_refs(row, 1)
        refs.append((x_ref, f"{y_ref} domain"))
    shapes = []
    for ev in events:
        start = float(ev["start_s"])
        end = max(_event_end(ev, duration_s), start + 1e-3 * max(duration_s, 1.0))
        for x_ref, y_ref in refs:
            shapes.append({"type": "rect", "x0": start, "x1": end, "y0": 0, "y1": 1, "xref": x_ref, "yref": y_ref,
                           "fillcolor": category_color(str(ev["category"])), "opacity": 0.15,
                           "line": {"width": 0}, "layer": "below"})
    return shapes


def _time_trace(t_s: np.ndarray, y: np.ndarray, max_points: int, **kwargs: Any) -> dict[str, Any]:
    t, v = minmax_downsample(t_s, y, max_points)
    kwargs.setdefault("line", {"width": 1.2})
    return ps.scatter(x=_f32(t), y=_f32(v), mode="lines", **kwargs)


def _overview(page: _Page, data: RunReportData) -> None:
    counts = data.events_by_category()
    overall = (data.scores or {}).get("overall", {})
    items = [
        ("duration", _fmt(data.duration_s, " s", digits=4)),
        ("events", str(len(data.events))),
        ("median latency", _fmt(data.median_latency_s(), " ms", 1e3)),
        ("median clock offset", _fmt(data.median_clock_offset_s(), " ms", 1e3)),
        ("realtime factor", _fmt(data.realtime_factor, " x")),
        ("joint RMS residual", _fmt(data.position_rms_rad(), " mrad", 1e3)),
        ("force RMS residual", _fmt(data.force_rms_n(), " N")),
        ("snapshots", str(len(data.snapshots))),
    ]
    if overall.get("macro_f1") is not None:
        items.append(("macro F1 vs truth", _fmt(overall["macro_f1"])))
    if data.scenario:
        items.insert(0, ("scenario", data.scenario))
    page.add("overview", _cards(items))
    if data.degradation():
        page.add("overview", f'<div class="warn">{_esc(data.degradation())}</div>')
    for warning in data.warnings:
        page.add("overview", f'<div class="warn">{_esc(warning)}</div>')
    _analyses(page, data)
    cats = list(counts)
    fig = ps.Figure(ps.bar(
        x=[_esc(c) for c in cats], y=[counts[c] for c in cats],
        marker_color=[category_color(c) for c in cats], text=[counts[c] for c in cats], textposition="auto",
        hovertemplate="%{x}: %{y} events<extra></extra>",
    ))
    fig.update_layout(title="Events by category", yaxis_title="events", showlegend=False)
    fig.update_yaxes(rangemode="tozero", dtick=max(1, math.ceil(max(counts.values(), default=0) / 5)))
    page.figure("overview", fig, 280)


def _analyses(page: _Page, data: RunReportData) -> None:
    """What ran and what was skipped (and why); the segments when the recording has gaps."""
    if data.analyses:
        items = "".join(
            f'<li class="{"ran" if a.get("ran") else "skipped"}"><b>{_esc(a.get("analysis", ""))}</b>: '
            f'{"ran" if a.get("ran") else "skipped"}{": " + _esc(a["detail"]) if a.get("detail") else ""}</li>'
            for a in data.analyses)
        page.add("overview", f'<ul class="analyses">{items}</ul>')
    if len(data.segments) > 1:
        spans = ", ".join(f"{float(s['start_s']):.1f} s to {float(s['end_s']):.1f} s" for s in data.segments)
        page.add("overview", f'<div class="warn">The recording has gaps: analysed in {len(data.segments)} '
                             f'segments ({_esc(spans)}); nothing between them.</div>')


def _joints(page: _Page, data: RunReportData, max_points: int) -> None:
    j = data.joints
    if j is None:
        page.add("joints", _note("No joint residuals in this run."))
    else:
        panels = [("position residual (rad)", j.position_rad)]
        if j.velocity_rad_s is not None:
            panels.append(("velocity residual (rad/s)", j.velocity_rad_s))
        if j.effort_nm is not None:
            panels.append(("effort residual (N m)", j.effort_nm))
        fig = ps.subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.05)
        for row, (label, arr) in enumerate(panels, start=1):
            for k, name in enumerate(data.joint_names):
                fig.add_trace(_time_trace(
                    j.t_s, arr[:, k], max_points, name=_esc(name), legendgroup=f"j{k}", showlegend=row == 1,
                    line={"width": 1.1, "color": _JOINT_COLORS[k % len(_JOINT_COLORS)]},
                ), row=row, col=1)
            fig.update_yaxes(title_text=label, row=row, col=1)
        fig.update_xaxes(title_text="time (s)", row=len(panels), col=1)
        shapes = _shade_events(fig, data.events, data.duration_s, len(panels))
        fig.update_layout(title="Per-joint residual (real minus sim); shaded: events by category")
        page.add("joints", _palette_legend(CATEGORIES))
        page.figure("joints", fig, 260 * len(panels) + 80, shapes)
    p = data.pose
    if p is not None:
        rows = 2 if p.orientation_error_rad is not None else 1
        fig = ps.subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.08)
        fig.add_trace(_time_trace(p.t_s, p.position_error_m * 1e3, max_points, name="position error (mm)"),
                      row=1, col=1)
        fig.update_yaxes(title_text="EE position error (mm)", row=1, col=1)
        if p.orientation_error_rad is not None:
            fig.add_trace(_time_trace(p.t_s, np.degrees(p.orientation_error_rad), max_points,
                                      name="orientation error (deg)"), row=2, col=1)
            fig.update_yaxes(title_text="EE orientation error (deg)", row=2, col=1)
        fig.update_xaxes(title_text="time (s)", row=rows, col=1)
        shapes = _shade_events(fig, data.events, data.duration_s, rows)
        fig.update_layout(title="End-effector pose error", showlegend=False)
        page.figure("joints", fig, 220 * rows + 60, shapes)


def _box_stats(values: np.ndarray) -> dict[str, float]:
    """Tukey box statistics computed here, so the page does not carry every sample."""
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    iqr = q3 - q1
    lo = float(values[values >= q1 - 1.5 * iqr].min())
    hi = float(values[values <= q3 + 1.5 * iqr].max())
    return {"q1": float(q1), "median": float(med), "q3": float(q3), "lowerfence": lo, "upperfence": hi,
            "mean": float(values.mean())}


def _contact(page: _Page, data: RunReportData, max_points: int) -> None:
    c = data.contact
    if c is None:
        page.add("contact", _note("No wrench residuals in this run."))
        return
    labels = c.phase_labels().tolist()
    phases = list(dict.fromkeys(labels))
    colors = {ph: _PHASE_COLORS[i % len(_PHASE_COLORS)] for i, ph in enumerate(phases)}
    # Each sample's phase as its index in phases: one pass over the labels, where comparing
    # the label array with every phase, for every channel, compares strings char by char.
    index = {ph: i for i, ph in enumerate(phases)}
    codes = np.fromiter(map(index.__getitem__, labels), np.intp, len(labels))
    in_phase = {ph: codes == i for ph, i in index.items()}
    channels = [("force residual (N)", c.force_residual_n)]
    if c.torque_residual_nm is not None:
        channels.append(("torque residual (N m)", c.torque_residual_nm))
    fig = ps.subplots(rows=1, cols=len(channels), subplot_titles=[_esc(ch) for ch, _ in channels])
    for col, (_label, values) in enumerate(channels, start=1):
        for ph in phases:
            sel = values[in_phase[ph] & np.isfinite(values)]
            if sel.size == 0:
                continue
            st = _box_stats(sel)
            fig.add_trace(ps.box(
                x=[_esc(ph)], q1=[st["q1"]], median=[st["median"]], q3=[st["q3"]],
                lowerfence=[st["lowerfence"]], upperfence=[st["upperfence"]], mean=[st["mean"]],
                name=_esc(ph), marker_color=colors[ph], showlegend=False,
                hovertext=f"{_esc(ph)}: {sel.size} samples",
            ), row=1, col=col)
    fig.update_layout(title="Residual distribution by contact phase (box: quartiles, whiskers: 1.5 IQR)")
    page.figure("contact", fig, 360)

    fig = ps.subplots(rows=len(channels), cols=1, shared_xaxes=True, vertical_spacing=0.08)
    for row, (label, values) in enumerate(channels, start=1):
        for ph in phases:
            masked = np.where(in_phase[ph], values, np.nan)
            fig.add_trace(_time_trace(c.t_s, masked, max_points, name=_esc(ph), legendgroup=_esc(ph),
                                      showlegend=row == 1, connectgaps=False,
                                      line={"width": 1.1, "color": colors[ph]}), row=row, col=1)
        fig.update_yaxes(title_text=_esc(label), row=row, col=1)
    fig.update_xaxes(title_text="time (s)", row=len(channels), col=1)
    shapes = _shade_events(fig, data.events, data.duration_s, len(channels))
    fig.update_layout(title="Contact residual over time, coloured by phase")
    page.figure("contact", fig, 230 * len(channels) + 90, shapes)


def _timeline(page: _Page, data: RunReportData) -> None:
    if not data.events and not data.truth:
        page.add("timeline", _note("No events were detected in this run."))
    else:
        fig = ps.Figure()
        truth = data.truth or []
        cats = list(dict.fromkeys(list(CATEGORIES) + [str(e["category"]) for e in data.events + truth]))
        order: list[str] = []
        for cat in cats:
            order.append(_esc(cat))
            if data.truth is not None:
                order.append(_esc(f"{cat} (truth)"))
        min_width = 2e-3 * max(data.duration_s, 1.0)
        for is_truth, entries in ((False, data.events), (True, truth)):
            for cat in cats:
                mine = [e for e in entries if str(e["category"]) == cat]
                if not mine:
                    continue
                starts = [float(e["start_s"]) for e in mine]
                widths = [max(_event_end(e, data.duration_s) - s, min_width) for e, s in zip(mine, starts)]
                hover = [
                    "<br>".join(_esc(f"{k}: {e.get(k)}") for k in ("kind", "start_s", "end_s", "severity", "snapshot")
                                if e.get(k) is not None)
                    for e in mine
                ]
                label = _esc(f"{cat} (truth)" if is_truth else cat)
                fig.add_trace(ps.bar(
                    orientation="h", base=starts, x=widths, y=[label] * len(mine), name=label,
                    marker={"color": category_color(cat), "opacity": 0.45 if is_truth else 0.9,
                            "pattern": {"shape": "/" if is_truth else ""}},
                    hovertext=hover, hovertemplate="%{hovertext}<extra>" + label + "</extra>",
                    showlegend=False,
                ))
        fig.update_yaxes(categoryorder="array", categoryarray=order[::-1], type="category")
        fig.update_xaxes(title_text="time (s)", range=[0, max(data.duration_s, 1e-3)])
        fig.update_layout(title="Events by category" + (" beside the injected truth" if data.truth else ""),
                          barmode="overlay")
        page.figure("timeline", fig, 90 + 34 * len(order))
    if data.scores:
        per = data.scores.get("per_category", {})
        cats = [c for c in per if per[c].get("n_events") or per[c].get("n_truth")]
        if cats:
            fig = ps.Figure()
            for metric, color in (("precision", "#546E7A"), ("recall", "#90A4AE"), ("f1", "#263238")):
                fig.add_trace(ps.bar(x=[_esc(c) for c in cats], y=[per[c].get(metric) for c in cats],
                                     name=metric, marker_color=color))
            delays = [per[c].get("median_delay_s") for c in cats]
            fig.add_trace(ps.scatter(
                x=[_esc(c) for c in cats], y=[1.08] * len(cats), mode="text", showlegend=False,
                text=[f"delay {_fmt(d, ' s')}; {per[c].get('n_events', 0)} ev / {per[c].get('n_truth', 0)} truth"
                      for d, c in zip(delays, cats)],
            ))
            fig.update_layout(title="Detection scores against truth", barmode="group",
                              yaxis={"range": [0, 1.15], "title": "score"})
            page.figure("timeline", fig, 320)


def _ledger(page: _Page, data: RunReportData) -> None:
    total = sum(data.ledger.values())
    if not data.ledger or total <= 0:
        page.add("ledger", _note("No residual ledger in this run."))
        return
    fig = ps.Figure()
    for cat, share in sorted(data.ledger.items(), key=lambda kv: -kv[1]):
        pct = 100.0 * share / total
        fig.add_trace(ps.bar(
            orientation="h", y=["whole run"], x=[pct], name=_esc(cat), marker_color=category_color(cat),
            text=f"{_esc(cat)} {pct:.0f}%" if pct >= 6 else "", textposition="inside",
            hovertemplate=f"{_esc(cat)}: {pct:.1f}% of the residual<extra></extra>",
        ))
    fig.update_layout(barmode="stack", title="Share of the residual each category accounts for",
                      xaxis={"range": [0, 100], "title": "% of residual energy"})
    page.figure("ledger", fig, 220)


def _band(fig: ps.Figure, t: np.ndarray, y: np.ndarray, std: np.ndarray | None, color: str, name: str,
          row: int, max_points: int) -> None:
    if std is not None:
        lo_t, lo = minmax_downsample(t, y - std, max_points)
        hi_t, hi = minmax_downsample(t, y + std, max_points)
        fig.add_trace(ps.scatter(x=_f32(hi_t), y=_f32(hi), mode="lines", line={"width": 0}, showlegend=False,
                                 hoverinfo="skip"), row=row, col=1)
        fig.add_trace(ps.scatter(x=_f32(lo_t), y=_f32(lo), mode="lines", line={"width": 0}, fill="tonexty",
                                 fillcolor=color.replace("rgb", "rgba").replace(")", ",0.2)"),
                                 name=f"{name} ±1σ", hoverinfo="skip"), row=row, col=1)
    fig.add_trace(_time_trace(t, y, max_points, name=name, line={"width": 1.5, "color": color}), row=row, col=1)


def _timing(page: _Page, data: RunReportData, max_points: int) -> None:
    tm = data.timing
    if tm is None:
        page.add("timing", _note("No latency or clock-offset estimates in this run."))
        return
    fig = ps.subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    lat_std = None if tm.latency_std_s is None else tm.latency_std_s * 1e3
    off_std = None if tm.clock_offset_std_s is None else tm.clock_offset_std_s * 1e3
    _band(fig, tm.t_s, tm.latency_s * 1e3, lat_std, "rgb(21,101,192)", "latency (ms)", 1, max_points)
    _band(fig, tm.t_s, tm.clock_offset_s * 1e3, off_std, "rgb(106,27,154)", "clock offset (ms)", 2, max_points)
    fig.update_yaxes(title_text="latency (ms)", row=1, col=1)
    fig.update_yaxes(title_text="clock offset (ms)", row=2, col=1)
    fig.update_xaxes(title_text="time (s)", row=2, col=1)
    fig.update_layout(title="Estimates over time with ±1 standard deviation")
    page.add("timing", _cards([
        ("median latency", _fmt(data.median_latency_s(), " ms", 1e3)),
        ("median clock offset", _fmt(data.median_clock_offset_s(), " ms", 1e3)),
    ]))
    page.figure("timing", fig, 480)


def _calibration(page: _Page, data: RunReportData) -> None:
    rows = data.calibration
    if not rows:
        page.add("calibration", _note("No calibration fit in this run."))
        return
    names = [_esc(r.name) for r in rows]
    fig = ps.subplots(
        rows=2, cols=3, specs=[[{"colspan": 3}, None, None], [{}, {}, {}]], vertical_spacing=0.2,
        row_heights=[0.6, 0.4],
        subplot_titles=["RMS residual before and after the fit (mrad)", "fitted delay (ms)", "fitted gain",
                        "fitted offset (mrad)"],
    )
    before = [r.rms_before_rad * 1e3 for r in rows]
    after = [r.rms_after_rad * 1e3 for r in rows]
    gain_pct = [(-100.0 * (1 - r.rms_after_rad / r.rms_before_rad)) if r.rms_before_rad > 0 else 0.0 for r in rows]
    fig.add_trace(ps.bar(x=names, y=before, name="as recorded", marker_color="#B0BEC5"), row=1, col=1)
    fig.add_trace(ps.bar(x=names, y=after, name="with fit", marker_color="#2E7D32",
                         text=[f"{g:+.0f}%" for g in gain_pct], textposition="outside"), row=1, col=1)
    fig.add_trace(ps.bar(x=names, y=[r.delay_s * 1e3 for r in rows], marker_color="#0072B2", showlegend=False),
                  row=2, col=1)
    fig.add_trace(ps.bar(x=names, y=[r.gain for r in rows], marker_color="#0072B2", showlegend=False),
                  row=2, col=2)
    fig.add_trace(ps.bar(x=names, y=[r.offset_rad * 1e3 for r in rows], marker_color="#0072B2", showlegend=False),
                  row=2, col=3)
    fig.update_layout(barmode="group")
    page.add("calibration", _note(
        "What a delay, gain and offset change to the simulator would buy: each joint's RMS residual as "
        "recorded and with its fitted parameters applied (label: relative change)."))
    page.figure("calibration", fig, 560)


def _snapshots(page: _Page, data: RunReportData) -> None:
    by_path: dict[str, list[Mapping[str, Any]]] = {p: [] for p in data.snapshots}
    for ev in data.events:
        snap = ev.get("snapshot")
        if snap:
            by_path.setdefault(str(snap), []).append(ev)
    if not by_path:
        page.add("snapshots", _note("No failure snapshots were written in this run."))
        return
    items = []
    for path, evs in by_path.items():
        why = " ".join(f"{_badge(str(e['category']))}{_esc(e.get('kind') or '')} at {float(e['start_s']):.2f} s"
                       for e in evs)
        items.append(f'<li><a href="{_href(path)}">{_esc(path)}</a> {why}</li>')
    page.add("snapshots", f'<ul class="snaps">{"".join(items)}</ul>')


def render_report(data: RunReportData, max_points: int = DEFAULT_MAX_POINTS) -> str:
    """Return the HTML text of one run's report (see :func:`write_report`)."""
    return _run_page(data, max_points).render()


def _run_page(data: RunReportData, max_points: int) -> _Page:
    if not isinstance(data, RunReportData):
        raise ConfigError(f"render_report needs a RunReportData, got {type(data).__name__}")
    subtitle = f"{len(data.joint_names)} joints, {data.duration_s:.1f} s"
    if data.scenario:
        subtitle = f"scenario {data.scenario}; {subtitle}"
    page = _Page(f"sim_real_bridge report: {data.name}", subtitle, RUN_SECTIONS)
    _overview(page, data)
    _joints(page, data, max_points)
    _contact(page, data, max_points)
    _timeline(page, data)
    _ledger(page, data)
    _timing(page, data, max_points)
    _calibration(page, data)
    _snapshots(page, data)
    return page


def _write(path: Path, chunks: Sequence[bytes]) -> Path:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("wb") as out:
            out.writelines(chunks)
        tmp.replace(path)
    except OSError as exc:
        raise ConfigError(f"cannot write report {path}: {exc}") from exc
    return path


def write_report(path: Path, data: RunReportData, max_points: int = DEFAULT_MAX_POINTS) -> Path:
    """Write one run's self-contained report.html and return its path.

    Args:
        path: the file to write (parent directories are created).
        data: what to show.
        max_points: the most samples per drawn trace (min/max envelope beyond it).

    Raises:
        ConfigError: data is not a RunReportData or the file cannot be written.
    """
    return _run_page(data, max_points).write(path)


def _rollup_row(run: RunReportData | Mapping[str, Any], index: int) -> dict[str, Any]:
    """Normalize a RunReportData, a roll-up row or a summary JSON dict into a roll-up row."""
    if isinstance(run, RunReportData):
        return run.rollup_row()
    if not isinstance(run, Mapping):
        raise ConfigError(f"runs[{index}] must be a RunReportData or a dict, got {type(run).__name__}")
    residuals = run.get("residuals") or {}
    counts = run.get("events_by_category")
    if counts is None:
        counts = {c: 0 for c in CATEGORIES}
        for ev in run.get("events") or []:
            counts[str(ev.get("category"))] = counts.get(str(ev.get("category")), 0) + 1
    timing = run.get("timing") or {}
    overall = (run.get("scores") or {}).get("overall", {})
    name = run.get("name") or run.get("bag") or run.get("scenario") or f"run {index + 1}"
    return {
        "name": str(name),
        "scenario": run.get("scenario"),
        "duration_s": run.get("duration_s"),
        "events_by_category": dict(counts),
        "position_rms_rad": run.get("position_rms_rad", residuals.get("position_rms_rad")),
        "force_rms_n": run.get("force_rms_n", residuals.get("force_rms_n")),
        "latency_s": run.get("latency_s", timing.get("latency_s")),
        "macro_f1": run.get("macro_f1", overall.get("macro_f1")),
        "sim_success": run.get("sim_success"),
        "real_success": run.get("real_success"),
        "policy": run.get("policy", run.get("group")),
        "report_href": run.get("report_href"),
        "warnings": list(run.get("warnings") or []),
    }


def rollup_rows(runs: Sequence[RunReportData | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return one roll-up row per run (RunReportData, roll-up rows, or summary JSON dicts).

    A summary dict may carry, besides the DESIGN.md summary keys: name, report_href,
    position_rms_rad / force_rms_n (or inside "residuals"), sim_success, real_success,
    policy (or group), warnings.
    """
    return [_rollup_row(r, i) for i, r in enumerate(runs)]


def _labelled(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"sim_success": r["sim_success"], "real_success": r["real_success"],
         **({"policy": r["policy"]} if r.get("policy") is not None else {})}
        for r in rows if r.get("sim_success") is not None and r.get("real_success") is not None
    ]


def render_rollup_report(
    runs: Sequence[RunReportData | Mapping[str, Any]], predictivity: Mapping[str, Any] | None = None
) -> str:
    """Return the HTML text of the roll-up report (see :func:`write_rollup_report`)."""
    return _rollup_page(runs, predictivity).render()


def _rollup_page(runs: Sequence[RunReportData | Mapping[str, Any]], predictivity: Mapping[str, Any] | None) -> _Page:
    if not runs:
        raise ConfigError("the roll-up report needs at least one run")
    rows = rollup_rows(runs)
    if predictivity is None:
        labelled = _labelled(rows)
        if len(labelled) >= 2:
            predictivity = episode_predictivity(labelled)
    names = [r["name"] for r in rows]
    # Runs may share a name (same scenario twice); number them so bars do not merge.
    xs = [_esc(f"{i + 1}. {n}") for i, n in enumerate(names)]
    total_s = sum(float(r["duration_s"] or 0.0) for r in rows)
    page = _Page("sim_real_bridge roll-up", f"{len(rows)} runs, {total_s:.1f} s in all", ROLLUP_SECTIONS)

    totals = {c: 0 for c in CATEGORIES}
    for r in rows:
        for c, n in r["events_by_category"].items():
            totals[c] = totals.get(c, 0) + int(n)
    f1s = [r["macro_f1"] for r in rows if r["macro_f1"] is not None]
    page.add("overview", _cards([
        ("runs", str(len(rows))),
        ("recorded time", _fmt(total_s, " s", digits=5)),
        ("events", str(sum(totals.values()))),
        ("mean macro F1", _fmt(float(np.mean(f1s))) if f1s else "n/a"),
        ("runs with labels", str(len(_labelled(rows)))),
    ]))
    for r in rows:
        for w in r["warnings"]:
            page.add("overview", f'<div class="warn">{_esc(r["name"])}: {_esc(w)}</div>')

    items = []
    for i, r in enumerate(rows):
        name = _esc(f"{i + 1}. {r['name']}")
        link = f'<a href="{_href(r["report_href"])}">{name}</a>' if r.get("report_href") else name
        extra = []
        if r.get("scenario"):
            extra.append(f"scenario {_esc(r['scenario'])}")
        if r.get("duration_s") is not None:
            extra.append(f"{float(r['duration_s']):.1f} s")
        extra.append(f"{sum(r['events_by_category'].values())} events")
        if r.get("sim_success") is not None or r.get("real_success") is not None:
            extra.append(f"success sim {_esc(r.get('sim_success'))} / real {_esc(r.get('real_success'))}")
        items.append(f"<li>{link}: {'; '.join(extra)}</li>")
    page.add("runs", f'<ul class="runs">{"".join(items)}</ul>')

    fig = ps.Figure()
    cats = list(dict.fromkeys(list(CATEGORIES) + [c for r in rows for c in r["events_by_category"]]))
    for c in cats:
        fig.add_trace(ps.bar(x=xs, y=[r["events_by_category"].get(c, 0) for r in rows], name=_esc(c),
                             marker_color=category_color(c)))
    fig.update_layout(barmode="stack", title="Events per category per run", yaxis_title="events")
    page.figure("events", fig, 380)

    have_q = any(r["position_rms_rad"] is not None for r in rows)
    have_f = any(r["force_rms_n"] is not None for r in rows)
    if have_q or have_f:
        fig = ps.subplots(rows=1, cols=2, subplot_titles=["joint RMS residual (mrad)", "force RMS residual (N)"])
        fig.add_trace(ps.bar(x=xs, y=[None if r["position_rms_rad"] is None else r["position_rms_rad"] * 1e3
                                      for r in rows], marker_color="#455A64", showlegend=False), row=1, col=1)
        fig.add_trace(ps.bar(x=xs, y=[r["force_rms_n"] for r in rows], marker_color="#E69F00", showlegend=False),
                      row=1, col=2)
        page.figure("residuals", fig, 380)
    else:
        page.add("residuals", _note("No residual figures in these runs."))

    _predictivity_section(page, predictivity)
    return page


def _predictivity_section(page: _Page, pred: Mapping[str, Any] | None) -> None:
    if pred is None:
        page.add("predictivity", _note(
            "No predictivity: it needs at least two runs labelled with both sim_success and real_success."))
        return
    pol = pred.get("policy", {})
    epi = pred.get("episode", {})
    page.add("predictivity", _cards([
        ("SRCC (Pearson across policies)", _fmt(pol.get("srcc"))),
        ("Spearman across policies", _fmt(pol.get("spearman"))),
        ("MMRV (lower is better)", _fmt(pol.get("mmrv"))),
        ("episode Pearson", _fmt(epi.get("pearson"))),
        ("episode Spearman", _fmt(epi.get("spearman"))),
        ("labelled runs", str(pred.get("n_runs", "n/a"))),
    ]))
    reasons = [v for k, v in list(pol.items()) + list(epi.items()) if k.endswith("_reason")]
    for reason in reasons:
        page.add("predictivity", f'<div class="warn">{_esc(reason)}</div>')
    page.add("predictivity", _note(
        "SRCC: Pearson correlation of per-policy success rates in sim and reality (Kadian et al. 2020). "
        "MMRV: mean over policies of the largest real-success gap among pairs the simulator orders "
        "differently from reality (SIMPLER, Li et al. 2024)."))
    groups = pred.get("groups") or []
    if groups:
        fig = ps.Figure()
        fig.add_trace(ps.scatter(x=[0, 1], y=[0, 1], mode="lines", line={"dash": "dot", "color": "#999"},
                                 name="sim = real", hoverinfo="skip"))
        fig.add_trace(ps.scatter(
            x=[g["sim_success_rate"] for g in groups], y=[g["real_success_rate"] for g in groups],
            mode="markers+text", text=[_esc(g["group"]) for g in groups], textposition="top center",
            marker={"size": [8 + 2 * min(int(g["n_runs"]), 10) for g in groups], "color": "#1565C0"},
            name="policy / group", hovertemplate="%{text}: sim %{x:.2f}, real %{y:.2f}<extra></extra>",
        ))
        fig.update_layout(title="Success rate in simulation vs reality",
                          xaxis={"range": [-0.05, 1.05], "title": "sim success rate"},
                          yaxis={"range": [-0.05, 1.1], "title": "real success rate"})
        page.figure("predictivity", fig, 420)


def write_rollup_report(
    path: Path,
    runs: Sequence[RunReportData | Mapping[str, Any]],
    predictivity: Mapping[str, Any] | None = None,
) -> Path:
    """Write the roll-up report across runs and return its path.

    Args:
        path: the file to write.
        runs: RunReportData, roll-up rows (RunReportData.rollup_row()) or summary JSON
            dicts; each may carry report_href, a link to its own report relative to path.
        predictivity: the dict of core.predictivity.episode_predictivity; when None it
            is computed from the runs that carry both success labels (two at least).

    Raises:
        ConfigError: no runs, a run of the wrong type, or the file cannot be written.
    """
    return _rollup_page(runs, predictivity).write(path)


__all__ = [
    "CATEGORY_COLORS",
    "ROLLUP_SECTIONS",
    "RUN_SECTIONS",
    "render_report",
    "render_rollup_report",
    "rollup_rows",
    "write_report",
    "write_rollup_report",
]
