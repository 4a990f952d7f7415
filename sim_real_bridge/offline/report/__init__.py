"""report.html: one self-contained file per run, and a roll-up across runs; opens offline.

Plotly draws every plot (figures built as plain dicts, :mod:`plot_spec`); :mod:`.page`
embeds plotly.js once and forbids the page any network request, :mod:`.run` builds one
run's sections, :mod:`.rollup` the roll-up's, :mod:`.traces` the plot data they share.

Sections carry stable ids: ``#overview``, ``#joints``, ``#contact``, ``#timeline``,
``#ledger``, ``#timing``, ``#calibration``, ``#snapshots`` (run report);
``#overview``, ``#runs``, ``#events``, ``#residuals``, ``#predictivity`` (roll-up).
A section without data says so instead of disappearing.
"""

from sim_real_bridge.offline.report.rollup import (
    ROLLUP_SECTIONS,
    render_rollup_report,
    rollup_rows,
    write_rollup_report,
)
from sim_real_bridge.offline.report.run import RUN_SECTIONS, render_report, write_report
from sim_real_bridge.offline.report_data import CATEGORY_COLORS

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
