"""The HTML page of a report: sections, embedded plotly.js, escaping, and the file write.

plotly.js is embedded once, inline, and a Content Security Policy forbids the page any
network request. Figure data travels as JSON in ``<script type="application/json">``
blocks (every ``<``, ``>`` and ``&`` escaped), and every piece of text from a run is
HTML-escaped both in the page and in plot labels, so no name can inject markup.
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

from plotly.offline import get_plotlyjs

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.offline import plot_spec as ps
from sim_real_bridge.offline.report_data import category_color

SECTION_TITLES = {
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




def esc(value: Any) -> str:
    """HTML-escape any value's text (also used for plot labels, which plotly parses as HTML)."""
    return html.escape(str(value), quote=True)


def href(path: str) -> str:
    """Return an escaped relative link; percent-encoding the colon keeps any scheme out."""
    return esc(quote(str(path).replace(os.sep, "/"), safe="/._-~"))


def fmt(value: float | None, unit: str = "", scale: float = 1.0, digits: int = 3) -> str:
    """``value * scale`` to ``digits`` significant digits with its unit; "n/a" when missing or not finite."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value * scale:.{digits}g}{unit}"


class Page:
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
        nav = "".join(f'<a href="#{s}">{esc(SECTION_TITLES[s])}</a>' for s in self.sections)
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(self.title)}</title><style>{_CSS}</style></head><body>",
            f'<header><h1>{esc(self.title)}</h1><div class="sub">{esc(self.subtitle)}</div></header>',
            f"<nav>{nav}</nav><main>",
        ]
        for s in self.sections:
            parts.append(f'<section id="{s}"><h2>{esc(SECTION_TITLES[s])}</h2>')
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


def note(text: str) -> str:
    """A paragraph saying what a section lacks."""
    return f'<p class="note">{esc(text)}</p>'


def cards(items: Sequence[tuple[str, str]]) -> str:
    """A row of (label, value) cards."""
    cells = "".join(f'<div class="card"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
                    for k, v in items)
    return f'<div class="cards">{cells}</div>'


def badge(category: str) -> str:
    """A category name on its colour."""
    return f'<span class="badge" style="background:{category_color(category)}">{esc(category)}</span>'


def palette_legend(categories: Sequence[str]) -> str:
    """The categories' badges in a row: the colours' key."""
    return '<div class="legend">' + "".join(f"<span>{badge(c)}</span>" for c in categories) + "</div>"


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
