"""report.html and the roll-up as files: sections, no network, escaping, size, palette, errors."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from helpers.report_synth import synthetic_run
from plotly.offline import get_plotlyjs

from sim_real_bridge.evaluation.scoring import CATEGORIES
from sim_real_bridge.errors import ConfigError
from sim_real_bridge.offline.report import (
    ROLLUP_SECTIONS,
    RUN_SECTIONS,
    render_report,
    render_rollup_report,
    rollup_rows,
    write_report,
    write_rollup_report,
)
from sim_real_bridge.offline.report_data import (
    CATEGORY_COLORS,
    CalibrationRow,
    ContactSeries,
    JointSeries,
    PoseSeries,
    RunReportData,
    TimingSeries,
    category_color,
    minmax_downsample,
)

HOSTILE = '<img src=x onerror=alert(1)>"</script><script>alert(2)</script>&amp;'


class _Tags(HTMLParser):
    """Collects start tags with their attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(text: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(text)
    return parser.tags


def _figures(text: str) -> list[dict]:
    blocks = re.findall(r'<script type="application/json" class="fig-data" data-target="[^"]+">(.*?)</script>',
                        text, flags=re.S)
    return [json.loads(b) for b in blocks]


def _section_ids(text: str) -> list[str]:
    return [a["id"] for t, a in _tags(text) if t == "section"]


def test_run_report_has_every_section(tmp_path: Path) -> None:
    path = write_report(tmp_path / "out" / "report.html", synthetic_run())
    text = path.read_text(encoding="utf-8")
    assert _section_ids(text) == list(RUN_SECTIONS)
    for sid in RUN_SECTIONS:
        assert f'href="#{sid}"' in text
    figs = _figures(text)
    assert len(figs) >= 8
    assert all(fig["data"] for fig in figs)


def test_sections_stay_when_data_is_missing() -> None:
    text = render_report(RunReportData(name="bare", duration_s=1.0, joint_names=["a"]))
    assert _section_ids(text) == list(RUN_SECTIONS)
    assert text.count('class="note"') >= 6


def test_report_loads_nothing_from_the_network() -> None:
    text = render_report(synthetic_run())
    for tag, attrs in _tags(text):
        if tag == "script":
            assert "src" not in attrs, f"script loads {attrs['src']}"
        for key in ("src", "href", "data", "srcset", "poster", "action"):
            value = attrs.get(key) or ""
            assert not re.match(r"\s*(https?:)?//", value), f"<{tag} {key}={value}> reaches the network"
    assert not re.search(r"@import|url\(\s*['\"]?https?:", text.split("<script>")[0])
    csp = [a["content"] for t, a in _tags(text) if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0] and "connect-src 'none'" in csp[0]
    assert get_plotlyjs() in text
    assert text.count(get_plotlyjs()[:200]) == 1


def test_text_from_the_run_is_escaped() -> None:
    run = synthetic_run(name=HOSTILE, duration_s=5.0, joint_names=[HOSTILE, "b", "c"])
    run.warnings.append(HOSTILE)
    run.events[0]["kind"] = HOSTILE
    run.events[0]["snapshot"] = "javascript:alert(3)"
    run.calibration[0].name = HOSTILE
    text = render_report(run)
    body = text.replace(get_plotlyjs(), "")
    assert HOSTILE not in body
    assert "<img" not in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body
    scripts = [a for t, a in _tags(body) if t == "script"]
    assert len(scripts) == len(_figures(body)) + 2  # plotly.js and the boot script
    hrefs = [a["href"] for t, a in _tags(body) if t == "a"]
    assert all(not h.lower().startswith("javascript:") for h in hrefs)
    assert "javascript%3Aalert%283%29" in hrefs
    # Plot labels are HTML-escaped too (plotly parses them as HTML).
    names = [tr.get("name") for fig in _figures(body) for tr in fig["data"] if tr.get("name")]
    assert any(n.startswith("&lt;img") for n in names)
    assert not any("<img" in n for n in names)


def test_snapshot_links_are_relative_and_list_their_events(tmp_path: Path) -> None:
    run = synthetic_run()
    text = write_report(tmp_path / "report.html", run).read_text()
    links = [a["href"] for t, a in _tags(text) if t == "a" and not a["href"].startswith("#")]
    assert links == run.snapshots
    assert "friction at" in text and "push at" in text


def _raw_series_bytes(run: RunReportData) -> int:
    n = run.joints.t_s.size
    return 8 * n * (1 + 3 * len(run.joint_names)) + 8 * n * 6


def test_long_run_size_is_bounded_by_downsampling() -> None:
    runs = {d: synthetic_run(duration_s=d, rate_hz=500.0) for d in (300.0, 600.0)}
    sizes = {d: len(render_report(r).encode()) for d, r in runs.items()}
    js = len(get_plotlyjs().encode())
    payload = {d: s - js for d, s in sizes.items()}
    # Twice the samples, essentially the same file: traces are capped, not proportional.
    assert payload[600.0] < 1.1 * payload[300.0]
    assert payload[600.0] < 0.1 * _raw_series_bytes(runs[600.0])


def test_max_points_caps_every_time_trace() -> None:
    run = synthetic_run(duration_s=60.0, rate_hz=500.0)
    checked = 0
    for fig in _figures(render_report(run, max_points=1000)):
        for tr in fig["data"]:
            x = tr.get("x")
            if isinstance(x, dict) and x.get("dtype") == "f4":
                assert len(base64.b64decode(x["bdata"])) // 4 <= 1000
                checked += 1
    assert checked >= 3 * len(run.joint_names)


def test_category_colours_are_the_palette_everywhere() -> None:
    run = synthetic_run()
    seen = 0
    for fig in _figures(render_report(run)):
        for tr in fig["data"]:
            name = (tr.get("name") or "").replace(" (truth)", "")
            color = (tr.get("marker") or {}).get("color")
            if name in CATEGORY_COLORS and isinstance(color, str):
                assert color == CATEGORY_COLORS[name], f"{name} drawn in {color}"
                seen += 1
        for shape in fig["layout"].get("shapes", []):
            assert shape["fillcolor"] in CATEGORY_COLORS.values()
    assert seen >= 5
    assert category_color("not-a-category") not in CATEGORY_COLORS.values()


def test_open_event_runs_to_the_end_of_the_run() -> None:
    run = synthetic_run(duration_s=20.0)
    run.events = [{"category": "unauthored", "kind": "joint_stall", "start_s": 12.0, "end_s": None}]
    timeline = [f for f in _figures(render_report(run)) if "beside the injected truth" in json.dumps(f["layout"])]
    bars = [tr for tr in timeline[0]["data"] if tr.get("name") == "unauthored"]
    assert bars[0]["base"] == [12.0] and bars[0]["x"] == [8.0]


def test_minmax_downsample_keeps_extremes_and_order() -> None:
    rng = np.random.default_rng(0)
    t = np.arange(100_000) / 500.0
    y = rng.standard_normal(t.size)
    y[12_345] = 50.0
    y[67_890] = -40.0
    td, yd = minmax_downsample(t, y, 1000)
    assert td.size <= 1000
    assert np.all(np.diff(td) >= 0)
    assert yd.max() == 50.0 and yd.min() == -40.0
    assert set(td.tolist()) <= set(t.tolist())


def test_minmax_downsample_small_trace_unchanged_and_nan_gap_kept() -> None:
    t = np.arange(10.0)
    y = np.arange(10.0)
    td, yd = minmax_downsample(t, y, 100)
    np.testing.assert_array_equal(yd, y)
    y2 = np.arange(10_000.0)
    y2[4000:6000] = np.nan
    _, yd2 = minmax_downsample(np.arange(10_000.0), y2, 100)
    assert np.isnan(yd2).any() and np.nanmax(yd2) == 9999.0


def test_minmax_downsample_errors() -> None:
    with pytest.raises(ConfigError, match="max_points must be >= 2"):
        minmax_downsample(np.arange(3.0), np.arange(3.0), 1)
    with pytest.raises(ConfigError, match="1-D of one length"):
        minmax_downsample(np.arange(3.0), np.arange(4.0))


def test_phase_labels_combine_both_sides() -> None:
    c = ContactSeries(t_s=[0, 1, 2], force_residual_n=[1, 2, 3], sim_phase=[True, False, True],
                      real_phase=["grip", "free", "free"])
    assert c.phase_labels().tolist() == ["sim contact / real grip", "sim free / real free", "sim contact / real free"]
    assert ContactSeries(t_s=[0], force_residual_n=[1]).phase_labels().tolist() == ["all samples"]
    assert ContactSeries(t_s=[0], force_residual_n=[1], real_phase=[False]).phase_labels().tolist() == ["real free"]


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: JointSeries(t_s=[0, 1], position_rad=np.zeros((3, 2))), r"position_rad must have shape \(2, J\)"),
        (lambda: JointSeries(t_s=[0, 1], position_rad=np.zeros((2, 2)), velocity_rad_s=np.zeros((2, 3))),
         r"velocity_rad_s must have shape \(2, 2\)"),
        (lambda: JointSeries(t_s=[1, 0], position_rad=np.zeros((2, 1))), "non-decreasing"),
        (lambda: JointSeries(t_s=[0, np.nan], position_rad=np.zeros((2, 1))), "must be finite"),
        (lambda: JointSeries(t_s=[[0, 1]], position_rad=np.zeros((2, 1))), "must be 1-D"),
        (lambda: ContactSeries(t_s=[0, 1], force_residual_n=[1]), "has 1 samples, t_s has 2"),
        (lambda: ContactSeries(t_s=[0, 1], force_residual_n=[1, 2], sim_phase=["a"]), r"sim_phase must have shape"),
        (lambda: PoseSeries(t_s=[0, 1], position_error_m=[0, 0], orientation_error_rad=[0]), "orientation_error_rad"),
        (lambda: TimingSeries(t_s=[0], clock_offset_s=[0], latency_s=[0], latency_std_s=[-1]), "latency_std_s must be"),
        (lambda: CalibrationRow("j", float("nan"), 1, 0, 1, 1), "delay_s must be finite"),
        (lambda: CalibrationRow("j", 0, 1, 0, -1, 1), "RMS values must be >= 0"),
        (lambda: RunReportData(name="r", duration_s=-1, joint_names=[]), "duration_s must be finite and >= 0"),
        (lambda: RunReportData(name="r", duration_s=1, joint_names=["a"],
                               joints=JointSeries(t_s=[0], position_rad=np.zeros((1, 2)))),
         "2 columns but 1 joint names"),
        (lambda: RunReportData(name="r", duration_s=1, joint_names=[], events=[{"start_s": 0}]),
         r"events\[0\] needs 'category'"),
        (lambda: RunReportData(name="r", duration_s=1, joint_names=[],
                               events=[{"category": "sensor", "start_s": 2, "end_s": 1}]),
         r"events\[0\] has a bad window"),
        (lambda: RunReportData(name="r", duration_s=1, joint_names=[], truth=["x"]), r"truth\[0\] must be a mapping"),
        (lambda: RunReportData(name="r", duration_s=1, joint_names=[], ledger={"contact": -0.1}),
         "ledger share of 'contact'"),
    ],
)
def test_report_data_rejects_bad_input(build, match) -> None:
    with pytest.raises(ConfigError, match=match):
        build()


def test_render_report_rejects_other_types() -> None:
    with pytest.raises(ConfigError, match="needs a RunReportData, got dict"):
        render_report({"name": "x"})  # type: ignore[arg-type]


def test_unwritable_path_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "report.html.tmp").mkdir()
    with pytest.raises(ConfigError, match="cannot write report"):
        write_report(tmp_path / "taken" / "report.html", RunReportData(name="r", duration_s=1, joint_names=[]))


def _labelled_rows() -> list[dict]:
    rows = []
    for i, (s, r, p) in enumerate([(True, True, "a"), (True, False, "a"), (False, False, "b"), (True, True, "c")]):
        row = synthetic_run(name=f"bag_{i}", duration_s=4.0, seed=i).rollup_row()
        row.update(sim_success=s, real_success=r, policy=p, report_href=f"bag_{i}/report.html")
        rows.append(row)
    return rows


def test_rollup_report_sections_links_and_predictivity(tmp_path: Path) -> None:
    rows = _labelled_rows()
    text = write_rollup_report(tmp_path / "rollup.html", rows).read_text()
    assert _section_ids(text) == list(ROLLUP_SECTIONS)
    links = [a["href"] for t, a in _tags(text) if t == "a" and not a["href"].startswith("#")]
    assert links == [r["report_href"] for r in rows]
    figs = _figures(text)
    events_fig = figs[0]
    per_cat = {tr["name"]: tr["y"] for tr in events_fig["data"]}
    assert set(CATEGORIES) <= set(per_cat)
    assert per_cat["contact"] == [r["events_by_category"]["contact"] for r in rows]
    scatter = [tr for fig in figs for tr in fig["data"] if tr.get("name") == "policy / group"]
    assert sorted(scatter[0]["text"]) == ["a", "b", "c"]
    assert "MMRV" in text and "SRCC" in text


def test_rollup_from_summary_dicts_without_labels() -> None:
    summary = {"scenario": "push", "duration_s": 12.0,
               "events": [{"category": "human", "start_s": 1, "end_s": 2}, {"category": "human", "start_s": 5}],
               "timing": {"latency_s": 0.01}, "residuals": {"position_rms_rad": 0.002}}
    rows = rollup_rows([summary, synthetic_run(duration_s=3.0)])
    assert rows[0]["name"] == "push" and rows[0]["events_by_category"]["human"] == 2
    assert rows[0]["position_rms_rad"] == 0.002 and rows[0]["latency_s"] == 0.01
    text = render_rollup_report([summary])
    assert "No predictivity" in text
    assert _section_ids(text) == list(ROLLUP_SECTIONS)


def test_rollup_uses_given_predictivity() -> None:
    given = {"n_runs": 9, "episode": {"pearson": None, "pearson_reason": "pearson: x is constant"},
             "groups": [], "policy": {"n_groups": 1, "srcc": None, "srcc_reason": "srcc: needs 2 groups"}}
    text = render_rollup_report(_labelled_rows(), given)
    assert "srcc: needs 2 groups" in text and "pearson: x is constant" in text


def test_rollup_errors() -> None:
    with pytest.raises(ConfigError, match="at least one run"):
        render_rollup_report([])
    with pytest.raises(ConfigError, match=r"runs\[1\] must be a RunReportData or a dict, got str"):
        render_rollup_report([{"name": "a"}, "b"])  # type: ignore[list-item]


_SUBPLOT_CASES = [
    {"rows": 3, "cols": 1, "shared_xaxes": True, "vertical_spacing": 0.05},
    {"rows": 2, "cols": 1, "shared_xaxes": True, "vertical_spacing": 0.08},
    {"rows": 1, "cols": 2, "subplot_titles": ["force", "torque"]},
    {"rows": 2, "cols": 3, "specs": [[{"colspan": 3}, None, None], [{}, {}, {}]], "vertical_spacing": 0.2,
     "row_heights": [0.6, 0.4], "subplot_titles": ["a", "b", "c", "d"]},
]


@pytest.mark.parametrize("case", _SUBPLOT_CASES, ids=lambda c: f"{c['rows']}x{c['cols']}")
def test_plain_dict_subplots_are_laid_out_as_plotly_lays_them_out(case: dict) -> None:
    from plotly.subplots import make_subplots

    from sim_real_bridge.offline import plot_spec

    ours = plot_spec.subplots(**case).layout
    theirs = make_subplots(**case).to_plotly_json()["layout"]
    theirs.pop("template", None)
    assert sorted(ours) == sorted(theirs)
    for key, axis in theirs.items():
        if key == "annotations":
            assert [a["text"] for a in ours[key]] == [a["text"] for a in axis]
            for a, b in zip(ours[key], axis, strict=True):
                assert a["x"] == pytest.approx(b["x"]) and a["y"] == pytest.approx(b["y"])
            continue
        assert {k: v for k, v in ours[key].items() if k != "domain"} == {k: v for k, v in axis.items() if k != "domain"}
        assert ours[key]["domain"] == pytest.approx(axis["domain"])


def test_plain_dict_traces_serialise_as_plotly_writes_them() -> None:
    import plotly.graph_objects as go
    import plotly.io as pio

    from sim_real_bridge.offline import plot_spec

    x = np.linspace(0.0, 1.0, 7, dtype=np.float32)
    y = np.array([0.0, np.nan, 2.0, 3.0, 4.0, 5.0, 6.0], dtype=np.float32)
    ours = json.loads(plot_spec.to_json(plot_spec.Figure(plot_spec.scatter(x=x, y=y, mode="lines", marker_color="red"))))
    theirs = json.loads(pio.to_json(go.Figure(go.Scatter(x=x, y=y, mode="lines", marker_color="red")), validate=False))
    assert ours["data"] == theirs["data"]
    fig = plot_spec.Figure().update_layout(title="t", yaxis_title="events", xaxis={"title": "s", "range": [0, 1]})
    assert fig.layout == {"title": {"text": "t"}, "yaxis": {"title": {"text": "events"}},
                          "xaxis": {"title": {"text": "s"}, "range": [0, 1]}}
    with pytest.raises(ConfigError, match="no subplot at row 2"):
        plot_spec.subplots(rows=1, cols=1).axis_refs(2, 1)


def test_contact_traces_take_each_phase_as_its_labels_say() -> None:
    run = synthetic_run(duration_s=20.0, rate_hz=100.0)
    c = run.contact
    n = c.t_s.size
    c.real_phase = np.array(["free", "grip", "slide", "grip"] * (n // 4) + ["free"] * (n % 4))
    labels = c.phase_labels()
    titles = ("Residual distribution by contact phase", "Contact residual over time")
    boxes, lines = (f["data"] for f in _figures(render_report(run, max_points=10 * n))
                    if f["layout"].get("title", {}).get("text", "").startswith(titles))
    channels = [c.force_residual_n, c.torque_residual_nm]
    phases = list(dict.fromkeys(labels.tolist()))
    assert len(phases) == 6 and len(lines) == len(channels) * len(phases)
    for k, (values, ph) in enumerate((v, ph) for v in channels for ph in phases):
        want = np.where(labels == ph, values, np.nan).astype(np.float32)
        got = np.frombuffer(base64.b64decode(lines[k]["y"]["bdata"]), "<f4")
        assert lines[k]["name"] == ph and np.array_equal(got, want, equal_nan=True)
        box = next(b for b in boxes if b["xaxis"] == ("x" if k < len(phases) else "x2") and b["name"] == ph)
        sel = values[(labels == ph) & np.isfinite(values)]
        assert box["median"] == [float(np.percentile(sel, 50))] and box["hovertext"] == f"{ph}: {sel.size} samples"


def test_arrays_drawn_again_are_encoded_once_with_the_same_text() -> None:
    from sim_real_bridge.offline import plot_spec

    rng = np.random.default_rng(4)
    t = np.arange(500, dtype=np.float32)
    ys = [rng.standard_normal(500).astype(np.float32) for _ in range(3)]
    late = t.copy()
    late[-1] = -1.0  # equal length, equal up to the last byte
    figs = [plot_spec.Figure([plot_spec.scatter(x=t, y=y) for y in ys]),
            plot_spec.Figure([plot_spec.scatter(x=late, y=ys[0]), plot_spec.scatter(x=t[:10], y=t.copy())])]
    encoded: plot_spec.Encoded = {}
    for fig in figs:
        assert plot_spec.to_json(fig, script_safe=True, encoded=encoded) == plot_spec.to_json(fig, script_safe=True)
    made = [raw for texts in encoded.values() for raw, _ in texts]
    assert sorted(made) == sorted({a.tobytes() for a in (t, *ys, late, t[:10])})
