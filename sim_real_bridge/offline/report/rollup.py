"""The roll-up report across runs: runs, events and residuals per run, sim-to-real predictivity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.evaluation.predictivity import episode_predictivity
from sim_real_bridge.evaluation.scoring import CATEGORIES
from sim_real_bridge.offline import plot_spec as ps
from sim_real_bridge.offline.report.page import Page, cards, esc, fmt, href, note
from sim_real_bridge.offline.report_data import RunReportData, category_color

ROLLUP_SECTIONS: tuple[str, ...] = ("overview", "runs", "events", "residuals", "predictivity")


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

    A summary dict may carry, besides the summary.json keys: name, report_href,
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


def _rollup_page(runs: Sequence[RunReportData | Mapping[str, Any]], predictivity: Mapping[str, Any] | None) -> Page:
    if not runs:
        raise ConfigError("the roll-up report needs at least one run")
    rows = rollup_rows(runs)
    if predictivity is None:
        labelled = _labelled(rows)
        if len(labelled) >= 2:
            predictivity = episode_predictivity(labelled)
    # Runs may share a name (same scenario twice); number them so bars do not merge.
    xs = [esc(f"{i + 1}. {r['name']}") for i, r in enumerate(rows)]
    total_s = sum(float(r["duration_s"] or 0.0) for r in rows)
    page = Page("sim_real_bridge roll-up", f"{len(rows)} runs, {total_s:.1f} s in all", ROLLUP_SECTIONS)
    _overview_section(page, rows, total_s)
    _runs_section(page, rows)
    _events_section(page, rows, xs)
    _residuals_section(page, rows, xs)
    _predictivity_section(page, predictivity)
    return page


def _overview_section(page: Page, rows: Sequence[Mapping[str, Any]], total_s: float) -> None:
    totals = {c: 0 for c in CATEGORIES}
    for r in rows:
        for c, n in r["events_by_category"].items():
            totals[c] = totals.get(c, 0) + int(n)
    f1s = [r["macro_f1"] for r in rows if r["macro_f1"] is not None]
    page.add("overview", cards([
        ("runs", str(len(rows))),
        ("recorded time", fmt(total_s, " s", digits=5)),
        ("events", str(sum(totals.values()))),
        ("mean macro F1", fmt(float(np.mean(f1s))) if f1s else "n/a"),
        ("runs with labels", str(len(_labelled(rows)))),
    ]))
    for r in rows:
        for w in r["warnings"]:
            page.add("overview", f'<div class="warn">{esc(r["name"])}: {esc(w)}</div>')


def _runs_section(page: Page, rows: Sequence[Mapping[str, Any]]) -> None:
    items = []
    for i, r in enumerate(rows):
        name = esc(f"{i + 1}. {r['name']}")
        link = f'<a href="{href(r["report_href"])}">{name}</a>' if r.get("report_href") else name
        extra = []
        if r.get("scenario"):
            extra.append(f"scenario {esc(r['scenario'])}")
        if r.get("duration_s") is not None:
            extra.append(f"{float(r['duration_s']):.1f} s")
        extra.append(f"{sum(r['events_by_category'].values())} events")
        if r.get("sim_success") is not None or r.get("real_success") is not None:
            extra.append(f"success sim {esc(r.get('sim_success'))} / real {esc(r.get('real_success'))}")
        items.append(f"<li>{link}: {'; '.join(extra)}</li>")
    page.add("runs", f'<ul class="runs">{"".join(items)}</ul>')


def _events_section(page: Page, rows: Sequence[Mapping[str, Any]], xs: list[str]) -> None:
    fig = ps.Figure()
    cats = list(dict.fromkeys(list(CATEGORIES) + [c for r in rows for c in r["events_by_category"]]))
    for c in cats:
        fig.add_trace(ps.bar(x=xs, y=[r["events_by_category"].get(c, 0) for r in rows], name=esc(c),
                             marker_color=category_color(c)))
    fig.update_layout(barmode="stack", title="Events per category per run", yaxis_title="events")
    page.figure("events", fig, 380)


def _residuals_section(page: Page, rows: Sequence[Mapping[str, Any]], xs: list[str]) -> None:
    have_q = any(r["position_rms_rad"] is not None for r in rows)
    have_f = any(r["force_rms_n"] is not None for r in rows)
    if not (have_q or have_f):
        page.add("residuals", note("No residual figures in these runs."))
        return
    fig = ps.subplots(rows=1, cols=2, subplot_titles=["joint RMS residual (mrad)", "force RMS residual (N)"])
    fig.add_trace(ps.bar(x=xs, y=[None if r["position_rms_rad"] is None else r["position_rms_rad"] * 1e3
                                  for r in rows], marker_color="#455A64", showlegend=False), row=1, col=1)
    fig.add_trace(ps.bar(x=xs, y=[r["force_rms_n"] for r in rows], marker_color="#E69F00", showlegend=False),
                  row=1, col=2)
    page.figure("residuals", fig, 380)


def _predictivity_section(page: Page, pred: Mapping[str, Any] | None) -> None:
    if pred is None:
        page.add("predictivity", note(
            "No predictivity: it needs at least two runs labelled with both sim_success and real_success."))
        return
    pol = pred.get("policy", {})
    epi = pred.get("episode", {})
    page.add("predictivity", cards([
        ("SRCC (Pearson across policies)", fmt(pol.get("srcc"))),
        ("Spearman across policies", fmt(pol.get("spearman"))),
        ("MMRV (lower is better)", fmt(pol.get("mmrv"))),
        ("episode Pearson", fmt(epi.get("pearson"))),
        ("episode Spearman", fmt(epi.get("spearman"))),
        ("labelled runs", str(pred.get("n_runs", "n/a"))),
    ]))
    reasons = [v for k, v in list(pol.items()) + list(epi.items()) if k.endswith("_reason")]
    for reason in reasons:
        page.add("predictivity", f'<div class="warn">{esc(reason)}</div>')
    page.add("predictivity", note(
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
            mode="markers+text", text=[esc(g["group"]) for g in groups], textposition="top center",
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
