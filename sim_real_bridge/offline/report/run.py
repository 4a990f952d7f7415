"""One run's report.html: overview, joint and contact residuals, events, ledger, timing,
calibration and snapshots, each section a function that adds its figures to the page.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.evaluation.scoring import CATEGORIES
from sim_real_bridge.offline import plot_spec as ps
from sim_real_bridge.offline.report.page import Page, badge, cards, esc, fmt, href, note, palette_legend
from sim_real_bridge.offline.report.traces import band, box_stats, event_end, shade_events, time_trace
from sim_real_bridge.offline.report_data import DEFAULT_MAX_POINTS, RunReportData, category_color

RUN_SECTIONS: tuple[str, ...] = (
    "overview", "joints", "contact", "timeline", "ledger", "timing", "calibration", "snapshots",
)
_PHASE_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")
_JOINT_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf")


def _overview(page: Page, data: RunReportData) -> None:
    counts = data.events_by_category()
    overall = (data.scores or {}).get("overall", {})
    items = [
        ("duration", fmt(data.duration_s, " s", digits=4)),
        ("events", str(len(data.events))),
        ("median latency", fmt(data.median_latency_s(), " ms", 1e3)),
        ("median clock offset", fmt(data.median_clock_offset_s(), " ms", 1e3)),
        ("realtime factor", fmt(data.realtime_factor, " x")),
        ("joint RMS residual", fmt(data.position_rms_rad(), " mrad", 1e3)),
        ("force RMS residual", fmt(data.force_rms_n(), " N")),
        ("snapshots", str(len(data.snapshots))),
    ]
    if overall.get("macro_f1") is not None:
        items.append(("macro F1 vs truth", fmt(overall["macro_f1"])))
    if data.scenario:
        items.insert(0, ("scenario", data.scenario))
    page.add("overview", cards(items))
    if data.degradation():
        page.add("overview", f'<div class="warn">{esc(data.degradation())}</div>')
    for warning in data.warnings:
        page.add("overview", f'<div class="warn">{esc(warning)}</div>')
    _analyses(page, data)
    cats = list(counts)
    fig = ps.Figure(ps.bar(
        x=[esc(c) for c in cats], y=[counts[c] for c in cats],
        marker_color=[category_color(c) for c in cats], text=[counts[c] for c in cats], textposition="auto",
        hovertemplate="%{x}: %{y} events<extra></extra>",
    ))
    fig.update_layout(title="Events by category", yaxis_title="events", showlegend=False)
    fig.update_yaxes(rangemode="tozero", dtick=max(1, math.ceil(max(counts.values(), default=0) / 5)))
    page.figure("overview", fig, 280)


def _analyses(page: Page, data: RunReportData) -> None:
    """What ran and what was skipped (and why); the segments when the recording has gaps."""
    if data.analyses:
        items = "".join(
            f'<li class="{"ran" if a.get("ran") else "skipped"}"><b>{esc(a.get("analysis", ""))}</b>: '
            f'{"ran" if a.get("ran") else "skipped"}{": " + esc(a["detail"]) if a.get("detail") else ""}</li>'
            for a in data.analyses)
        page.add("overview", f'<ul class="analyses">{items}</ul>')
    if len(data.segments) > 1:
        spans = ", ".join(f"{float(s['start_s']):.1f} s to {float(s['end_s']):.1f} s" for s in data.segments)
        page.add("overview", f'<div class="warn">The recording has gaps: analysed in {len(data.segments)} '
                             f'segments ({esc(spans)}); nothing between them.</div>')


def _joints(page: Page, data: RunReportData, max_points: int) -> None:
    j = data.joints
    if j is None:
        page.add("joints", note("No joint residuals in this run."))
    else:
        panels = [("position residual (rad)", j.position_rad)]
        if j.velocity_rad_s is not None:
            panels.append(("velocity residual (rad/s)", j.velocity_rad_s))
        if j.effort_nm is not None:
            panels.append(("effort residual (N m)", j.effort_nm))
        fig = ps.subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.05)
        for row, (label, arr) in enumerate(panels, start=1):
            for k, name in enumerate(data.joint_names):
                fig.add_trace(time_trace(
                    j.t_s, arr[:, k], max_points, name=esc(name), legendgroup=f"j{k}", showlegend=row == 1,
                    line={"width": 1.1, "color": _JOINT_COLORS[k % len(_JOINT_COLORS)]},
                ), row=row, col=1)
            fig.update_yaxes(title_text=label, row=row, col=1)
        fig.update_xaxes(title_text="time (s)", row=len(panels), col=1)
        shapes = shade_events(fig, data.events, data.duration_s, len(panels))
        fig.update_layout(title="Per-joint residual (real minus sim); shaded: events by category")
        page.add("joints", palette_legend(CATEGORIES))
        page.figure("joints", fig, 260 * len(panels) + 80, shapes)
    p = data.pose
    if p is not None:
        rows = 2 if p.orientation_error_rad is not None else 1
        fig = ps.subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.08)
        fig.add_trace(time_trace(p.t_s, p.position_error_m * 1e3, max_points, name="position error (mm)"),
                      row=1, col=1)
        fig.update_yaxes(title_text="EE position error (mm)", row=1, col=1)
        if p.orientation_error_rad is not None:
            fig.add_trace(time_trace(p.t_s, np.degrees(p.orientation_error_rad), max_points,
                                      name="orientation error (deg)"), row=2, col=1)
            fig.update_yaxes(title_text="EE orientation error (deg)", row=2, col=1)
        fig.update_xaxes(title_text="time (s)", row=rows, col=1)
        shapes = shade_events(fig, data.events, data.duration_s, rows)
        fig.update_layout(title="End-effector pose error", showlegend=False)
        page.figure("joints", fig, 220 * rows + 60, shapes)


def _contact(page: Page, data: RunReportData, max_points: int) -> None:
    c = data.contact
    if c is None:
        page.add("contact", note("No wrench residuals in this run."))
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
    fig = ps.subplots(rows=1, cols=len(channels), subplot_titles=[esc(ch) for ch, _ in channels])
    for col, (_label, values) in enumerate(channels, start=1):
        for ph in phases:
            sel = values[in_phase[ph] & np.isfinite(values)]
            if sel.size == 0:
                continue
            st = box_stats(sel)
            fig.add_trace(ps.box(
                x=[esc(ph)], q1=[st["q1"]], median=[st["median"]], q3=[st["q3"]],
                lowerfence=[st["lowerfence"]], upperfence=[st["upperfence"]], mean=[st["mean"]],
                name=esc(ph), marker_color=colors[ph], showlegend=False,
                hovertext=f"{esc(ph)}: {sel.size} samples",
            ), row=1, col=col)
    fig.update_layout(title="Residual distribution by contact phase (box: quartiles, whiskers: 1.5 IQR)")
    page.figure("contact", fig, 360)

    fig = ps.subplots(rows=len(channels), cols=1, shared_xaxes=True, vertical_spacing=0.08)
    for row, (label, values) in enumerate(channels, start=1):
        for ph in phases:
            masked = np.where(in_phase[ph], values, np.nan)
            fig.add_trace(time_trace(c.t_s, masked, max_points, name=esc(ph), legendgroup=esc(ph),
                                      showlegend=row == 1, connectgaps=False,
                                      line={"width": 1.1, "color": colors[ph]}), row=row, col=1)
        fig.update_yaxes(title_text=esc(label), row=row, col=1)
    fig.update_xaxes(title_text="time (s)", row=len(channels), col=1)
    shapes = shade_events(fig, data.events, data.duration_s, len(channels))
    fig.update_layout(title="Contact residual over time, coloured by phase")
    page.figure("contact", fig, 230 * len(channels) + 90, shapes)


def _timeline(page: Page, data: RunReportData) -> None:
    if not data.events and not data.truth:
        page.add("timeline", note("No events were detected in this run."))
    else:
        fig = ps.Figure()
        truth = data.truth or []
        cats = list(dict.fromkeys(list(CATEGORIES) + [str(e["category"]) for e in data.events + truth]))
        order: list[str] = []
        for cat in cats:
            order.append(esc(cat))
            if data.truth is not None:
                order.append(esc(f"{cat} (truth)"))
        min_width = 2e-3 * max(data.duration_s, 1.0)
        for is_truth, entries in ((False, data.events), (True, truth)):
            for cat in cats:
                mine = [e for e in entries if str(e["category"]) == cat]
                if not mine:
                    continue
                starts = [float(e["start_s"]) for e in mine]
                widths = [max(event_end(e, data.duration_s) - s, min_width) for e, s in zip(mine, starts)]
                hover = [
                    "<br>".join(esc(f"{k}: {e.get(k)}") for k in ("kind", "start_s", "end_s", "severity", "snapshot")
                                if e.get(k) is not None)
                    for e in mine
                ]
                label = esc(f"{cat} (truth)" if is_truth else cat)
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
                fig.add_trace(ps.bar(x=[esc(c) for c in cats], y=[per[c].get(metric) for c in cats],
                                     name=metric, marker_color=color))
            delays = [per[c].get("median_delay_s") for c in cats]
            fig.add_trace(ps.scatter(
                x=[esc(c) for c in cats], y=[1.08] * len(cats), mode="text", showlegend=False,
                text=[f"delay {fmt(d, ' s')}; {per[c].get('n_events', 0)} ev / {per[c].get('n_truth', 0)} truth"
                      for d, c in zip(delays, cats)],
            ))
            fig.update_layout(title="Detection scores against truth", barmode="group",
                              yaxis={"range": [0, 1.15], "title": "score"})
            page.figure("timeline", fig, 320)


def _ledger(page: Page, data: RunReportData) -> None:
    total = sum(data.ledger.values())
    if not data.ledger or total <= 0:
        page.add("ledger", note("No residual ledger in this run."))
        return
    fig = ps.Figure()
    for cat, share in sorted(data.ledger.items(), key=lambda kv: -kv[1]):
        pct = 100.0 * share / total
        fig.add_trace(ps.bar(
            orientation="h", y=["whole run"], x=[pct], name=esc(cat), marker_color=category_color(cat),
            text=f"{esc(cat)} {pct:.0f}%" if pct >= 6 else "", textposition="inside",
            hovertemplate=f"{esc(cat)}: {pct:.1f}% of the residual<extra></extra>",
        ))
    fig.update_layout(barmode="stack", title="Share of the residual each category accounts for",
                      xaxis={"range": [0, 100], "title": "% of residual energy"})
    page.figure("ledger", fig, 220)


def _timing(page: Page, data: RunReportData, max_points: int) -> None:
    tm = data.timing
    if tm is None:
        page.add("timing", note("No latency or clock-offset estimates in this run."))
        return
    fig = ps.subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    lat_std = None if tm.latency_std_s is None else tm.latency_std_s * 1e3
    off_std = None if tm.clock_offset_std_s is None else tm.clock_offset_std_s * 1e3
    band(fig, tm.t_s, tm.latency_s * 1e3, lat_std, "rgb(21,101,192)", "latency (ms)", 1, max_points)
    band(fig, tm.t_s, tm.clock_offset_s * 1e3, off_std, "rgb(106,27,154)", "clock offset (ms)", 2, max_points)
    fig.update_yaxes(title_text="latency (ms)", row=1, col=1)
    fig.update_yaxes(title_text="clock offset (ms)", row=2, col=1)
    fig.update_xaxes(title_text="time (s)", row=2, col=1)
    fig.update_layout(title="Estimates over time with ±1 standard deviation")
    page.add("timing", cards([
        ("median latency", fmt(data.median_latency_s(), " ms", 1e3)),
        ("median clock offset", fmt(data.median_clock_offset_s(), " ms", 1e3)),
    ]))
    page.figure("timing", fig, 480)


def _calibration(page: Page, data: RunReportData) -> None:
    rows = data.calibration
    if not rows:
        page.add("calibration", note("No calibration fit in this run."))
        return
    names = [esc(r.name) for r in rows]
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
    page.add("calibration", note(
        "What a delay, gain and offset change to the simulator would buy: each joint's RMS residual as "
        "recorded and with its fitted parameters applied (label: relative change)."))
    page.figure("calibration", fig, 560)


def _snapshots(page: Page, data: RunReportData) -> None:
    by_path: dict[str, list[Mapping[str, Any]]] = {p: [] for p in data.snapshots}
    for ev in data.events:
        snap = ev.get("snapshot")
        if snap:
            by_path.setdefault(str(snap), []).append(ev)
    if not by_path:
        page.add("snapshots", note("No failure snapshots were written in this run."))
        return
    items = []
    for path, evs in by_path.items():
        why = " ".join(f"{badge(str(e['category']))}{esc(e.get('kind') or '')} at {float(e['start_s']):.2f} s"
                       for e in evs)
        items.append(f'<li><a href="{href(path)}">{esc(path)}</a> {why}</li>')
    page.add("snapshots", f'<ul class="snaps">{"".join(items)}</ul>')


def render_report(data: RunReportData, max_points: int = DEFAULT_MAX_POINTS) -> str:
    """Return the HTML text of one run's report (see :func:`write_report`)."""
    return _run_page(data, max_points).render()


def _run_page(data: RunReportData, max_points: int) -> Page:
    if not isinstance(data, RunReportData):
        raise ConfigError(f"render_report needs a RunReportData, got {type(data).__name__}")
    subtitle = f"{len(data.joint_names)} joints, {data.duration_s:.1f} s"
    if data.scenario:
        subtitle = f"scenario {data.scenario}; {subtitle}"
    page = Page(f"sim_real_bridge report: {data.name}", subtitle, RUN_SECTIONS)
    _overview(page, data)
    _joints(page, data, max_points)
    _contact(page, data, max_points)
    _timeline(page, data)
    _ledger(page, data)
    _timing(page, data, max_points)
    _calibration(page, data)
    _snapshots(page, data)
    return page


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
