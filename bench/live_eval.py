"""Attribution quality live: every scenario run through the real node graph over DDS, scored.

Each scenario runs as ``sim-real-bridge demo --scenario NAME --no-live --out DIR/NAME``
(sim robot, stand-in, task player, mirror and monitor as separate processes over DDS,
on this machine's clock), one after the other. The summary JSON of each run (events,
truth recorded from ``/reality/injections``, scores) is pooled per category with the
same aggregation as ``bench/attribution_eval.py``.

Usage:
    python bench/live_eval.py --json [--scenarios NAME_OR_YAML ...] [--out DIR]

Needs ROS 2 (rclpy) and the built messages; sets ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
and a ROS_DOMAIN_ID of its own when none is set. Prints one JSON object: per scenario the
scores, events, truth, realtime factor and clock resets; an "aggregate" block with
per-category precision/recall/F1 and median delay, the worst per-scenario median delay,
and whether the product targets hold on every scenario.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _aggregate_fn() -> Any:
    spec = importlib.util.spec_from_file_location("attribution_eval", REPO / "bench" / "attribution_eval.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module.aggregate


def run_one(scenario: str, out_dir: Path, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """Run one live demo; return its summary JSON plus exit code and wall time."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "sim_real_bridge.cli", "demo", "--scenario", scenario, "--no-live",
           "--out", str(out_dir)]
    t0 = time.monotonic()
    with open(out_dir / "demo.log", "w") as log:
        proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
    summary_path = out_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    summary["exit_code"] = proc.returncode
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    return summary


def scenario_row(summary: dict[str, Any]) -> dict[str, Any]:
    """The per-scenario figures: per injected category F1, events, truth and median delay."""
    scores = summary.get("scores", {})
    per_cat = {}
    for cat, block in scores.get("per_category", {}).items():
        if block["n_truth"] or block["n_events"]:
            per_cat[cat] = {"f1": block.get("f1"), "events": block["n_events"], "truth": block["n_truth"],
                            "median_delay_s": block.get("median_delay_s")}
    return {"per_category": per_cat, "exit_code": summary.get("exit_code"),
            "realtime_factor": summary.get("realtime_factor"),
            "clock_resets": summary.get("timing", {}).get("clock_resets")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--scenarios", nargs="*", default=None,
                        help="scenario names or YAML paths (default: every built-in scenario)")
    parser.add_argument("--out", type=Path, default=Path("out/live_eval"), help="run directories go here")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per-scenario time limit")
    args = parser.parse_args(argv)

    names = args.scenarios or sorted(p.stem for p in (REPO / "config" / "scenarios").glob("*.yaml"))
    env = dict(os.environ)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env.setdefault("ROS_DOMAIN_ID", str(random.randint(11, 100)))
    results: dict[str, dict[str, Any]] = {}
    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        summary = run_one(name, args.out / Path(name).stem, env, args.timeout_s)
        if "scores" not in summary:
            rows[name] = {"error": f"no summary (exit {summary.get('exit_code')}); see {args.out / Path(name).stem}/demo.log"}
            continue
        results[name] = {"scores": summary["scores"], "truth": summary.get("truth", []),
                         "events": summary.get("events", []), "duration_s": summary.get("duration_s", 0.0)}
        rows[name] = scenario_row(summary)
        if not args.json:
            print(name, json.dumps(rows[name]), flush=True)
    agg = _aggregate_fn()(results) if results else {}
    per_scenario_delays = [c["median_delay_s"] for r in rows.values() for c in r.get("per_category", {}).values()
                           if c.get("median_delay_s") is not None]
    per_scenario_f1 = [c["f1"] for r in rows.values() for c in r.get("per_category", {}).values() if c.get("truth")]
    if agg:
        agg["worst_scenario_median_delay_s"] = max(per_scenario_delays) if per_scenario_delays else None
        agg["worst_scenario_category_f1"] = min(per_scenario_f1) if per_scenario_f1 else None
        agg["every_scenario_targets_met"] = bool(
            all("error" not in r for r in rows.values())
            and (not per_scenario_f1 or min(per_scenario_f1) >= 0.9)
            and (not per_scenario_delays or max(per_scenario_delays) <= 0.5)
            and (agg.get("nominal_events_per_10min") is None or agg["nominal_events_per_10min"] <= 1.0))
    print(json.dumps({"scenarios": rows, "aggregate": agg}, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
