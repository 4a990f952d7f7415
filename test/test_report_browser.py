"""report.html in a real browser: headless Chromium driven over the DevTools protocol.

Checks that the run report and the roll-up load with no console error, no exception
and no network request, and that every section is on screen with all its plots drawn.
The run report's screenshot goes to tmp_path; set SIM_REAL_BRIDGE_UPDATE_SCREENSHOT=1
to refresh docs/report.png (the README's picture) from it.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.report_synth import synthetic_run
from websockets.sync.client import connect

from sim_real_bridge.offline.report import ROLLUP_SECTIONS, RUN_SECTIONS, write_report, write_rollup_report

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parent.parent
WINDOW = (1400, 3000)
START_TIMEOUT_S = 60.0
LOAD_TIMEOUT_S = 90.0


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    if found is None:
        pytest.fail(
            "Chromium is not installed, so report.html cannot be checked in a browser. "
            "Install it with `make venv` (tools/ensure_system.sh) or "
            "`apt-get install -y chromium`.",
            pytrace=False,
        )
    return found


class Cdp:
    """A minimal Chrome DevTools Protocol client over one websocket, one page session."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0
        self.session: str | None = None
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, timeout_s: float = 30.0) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session is not None and not method.startswith("Target."):
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no reply to {method} within {timeout_s} s")
            reply = json.loads(self.ws.recv(timeout=remaining))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method} failed: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                msg = json.loads(self.ws.recv(timeout=remaining))
            except TimeoutError:
                return
            if "method" in msg:
                self.events.append(msg)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cdp]:
    exe = _chromium()
    profile = tmp_path_factory.mktemp("chromium-profile")
    args = [
        exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
        "--disable-extensions", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
        "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
        f"--window-size={WINDOW[0]},{WINDOW[1]}", "about:blank",
    ]
    log = (profile / "chromium.log").open("wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            log.close()
            pytest.fail(f"Chromium did not start: {(profile / 'chromium.log').read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)
    port, path = port_file.read_text().splitlines()[:2]
    try:
        with connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=30) as ws:
            cdp = Cdp(ws)
            target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            cdp.session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Network", "Page"):
                cdp.send(f"{domain}.enable")
            cdp.send("Emulation.setDeviceMetricsOverride",
                     {"width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False})
            yield cdp
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _load(cdp: Cdp, page: Path) -> dict[str, Any]:
    """Open page, wait until every plot is drawn, and return what the browser reported."""
    cdp.events.clear()
    uri = page.resolve().as_uri()
    cdp.send("Page.navigate", {"url": uri})
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    ready = None
    # The URL check keeps the previous page's ready flag from counting for this one.
    probe = (f"location.href === {json.dumps(uri)} && document.readyState === 'complete' && document.body"
             " ? document.body.getAttribute('data-plots-ready') : null")
    while time.monotonic() < deadline:
        ready = cdp.evaluate(probe)
        if ready is not None:
            break
        cdp.drain(0.25)
    cdp.drain(0.5)  # late console messages
    errors = []
    for ev in cdp.events:
        method, params = ev["method"], ev.get("params", {})
        if method == "Runtime.exceptionThrown":
            errors.append(json.dumps(params.get("exceptionDetails", {}))[:500])
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            errors.append(json.dumps(params.get("args", []))[:500])
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            errors.append(params["entry"].get("text", "")[:500])
    requests = [ev["params"]["request"]["url"] for ev in cdp.events if ev["method"] == "Network.requestWillBeSent"]
    return {"ready": ready, "errors": errors, "requests": requests}


_SECTION_STATE = """
(function (ids) {
  var out = {};
  ids.forEach(function (id) {
    var s = document.getElementById(id);
    if (!s) { out[id] = null; return; }
    var r = s.getBoundingClientRect();
    out[id] = {height: r.height, width: r.width,
               plots: s.querySelectorAll('div.plot').length,
               drawn: s.querySelectorAll('div.plot.js-plotly-plot .main-svg').length > 0 ?
                      s.querySelectorAll('div.plot.js-plotly-plot').length : 0,
               traces: s.querySelectorAll('div.plot .trace, div.plot .point, div.plot .bars').length,
               text: s.innerText.length};
  });
  return out;
})(%s)
"""


def _check_page(cdp: Cdp, page: Path, sections: tuple[str, ...]) -> dict[str, Any]:
    state = _load(cdp, page)
    assert state["ready"] is not None, "the page never signalled that its plots were drawn"
    assert state["errors"] == [], f"console errors: {state['errors']}"
    remote = [u for u in state["requests"] if not u.startswith(("file:", "data:", "blob:", "about:"))]
    assert remote == [], f"the report made network requests: {remote}"
    found = cdp.evaluate(_SECTION_STATE % json.dumps(list(sections)))
    for sid in sections:
        info = found[sid]
        assert info is not None, f"section #{sid} missing"
        assert info["height"] > 40 and info["width"] > 400, f"section #{sid} not rendered: {info}"
        assert info["drawn"] == info["plots"], f"section #{sid}: {info['drawn']} of {info['plots']} plots drawn"
        if info["plots"]:
            assert info["traces"] > 0, f"section #{sid} has plots without traces"
    assert int(state["ready"]) == sum(found[s]["plots"] for s in sections)
    return found


def test_checks_catch_console_errors_and_requests(browser: Cdp, tmp_path: Path) -> None:
    """The checks above can fail: a page with an error, a request and an undrawn plot."""
    page = tmp_path / "broken.html"
    page.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>'
        '<section id="overview"><div class="plot"></div></section>'
        '<img src="http://127.0.0.1:9/x.png">'
        "<script>console.error('boom'); document.body.setAttribute('data-plots-ready', '1');</script>"
        "</body></html>"
    )
    state = _load(browser, page)
    assert any("boom" in e for e in state["errors"])
    assert "http://127.0.0.1:9/x.png" in state["requests"]
    with pytest.raises(AssertionError, match="console errors"):
        _check_page(browser, page, ("overview",))


def test_run_report_renders_in_chromium(browser: Cdp, tmp_path: Path) -> None:
    page = write_report(tmp_path / "report.html", synthetic_run())
    found = _check_page(browser, page, RUN_SECTIONS)
    for sid in ("joints", "contact", "timeline", "ledger", "timing", "calibration"):
        assert found[sid]["plots"] >= 1, f"#{sid} should carry a plot"
    shot = browser.send("Page.captureScreenshot", {"format": "png"}, timeout_s=60)
    png = base64.b64decode(shot["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == WINDOW
    (tmp_path / "report.png").write_bytes(png)
    if os.environ.get("SIM_REAL_BRIDGE_UPDATE_SCREENSHOT") == "1":
        (REPO_ROOT / "docs").mkdir(exist_ok=True)
        (REPO_ROOT / "docs" / "report.png").write_bytes(png)


def test_hostile_names_stay_text_in_chromium(browser: Cdp, tmp_path: Path) -> None:
    hostile = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
    run = synthetic_run(name=hostile, duration_s=5.0, joint_names=[hostile, "j1", "j2", "j3", "j4", "j5"])
    run.warnings.append(hostile)
    page = write_report(tmp_path / "hostile.html", run)
    _check_page(browser, page, RUN_SECTIONS)
    assert browser.evaluate("typeof window.__pwned") == "undefined"
    assert browser.evaluate("document.querySelector('header h1').textContent").endswith(hostile)
    assert browser.evaluate("document.querySelectorAll('main img').length") == 0


def test_empty_run_report_renders_every_section(browser: Cdp, tmp_path: Path) -> None:
    from sim_real_bridge.offline.report_data import RunReportData

    page = write_report(tmp_path / "empty.html", RunReportData(name="empty", duration_s=0.0, joint_names=[]))
    found = _check_page(browser, page, RUN_SECTIONS)
    assert all(found[s]["text"] > 0 for s in RUN_SECTIONS)


def test_rollup_report_renders_in_chromium(browser: Cdp, tmp_path: Path) -> None:
    rows = []
    for i, (sim_ok, real_ok, policy) in enumerate([(1, 1, "a"), (1, 0, "a"), (0, 0, "b"), (1, 1, "c")]):
        row = synthetic_run(name=f"bag_{i}", duration_s=5.0, seed=i).rollup_row()
        row.update(sim_success=bool(sim_ok), real_success=bool(real_ok), policy=policy,
                   report_href=f"bag_{i}/report.html")
        rows.append(row)
    page = write_rollup_report(tmp_path / "rollup.html", rows)
    found = _check_page(browser, page, ROLLUP_SECTIONS)
    assert found["predictivity"]["plots"] == 1
    assert browser.evaluate("document.querySelectorAll('#runs a').length") == len(rows)
