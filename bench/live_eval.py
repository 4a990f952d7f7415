"""Attribution quality live: every scenario run through the real node graph over DDS, scored.

Each scenario runs as ``sim-real-bridge demo --scenario NAME --no-live --out DIR/NAME``
(sim robot, stand-in, task player, mirror and monitor as separate processes over DDS,
on this machine's clock), one after the other. The summary JSON of each run (events,
truth recorded from ``/reality/injections``, scores) is pooled per category with the
same aggregation as ``bench/attribution_eval.py``.

Usage:
    python bench/live_eval.py --json [--scenarios NAME_OR_YAML ...] [--out DIR] [--hog N]
    python bench/live_eval.py --json --seeds A:B [--robot NAME] [--hog N]

``--seeds A:B`` runs the generated scenarios of seeds A..B-1 (``sim-real-bridge
scenarios generate``; seeds below 10000 are for development, from 100000 up for
outside evaluation only). ``--hog N`` runs N busy-loop processes beside every run, as a
test run or a build sharing the machine would: each scenario's row then says whether
the run was degraded (the monitor more than 0.5 s behind, gaps dropped, slow robots),
its largest lag and the command mirror's refusals.

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
    load = summary.get("load", {})
    return {"per_category": per_cat, "exit_code": summary.get("exit_code"),
            "realtime_factor": summary.get("realtime_factor"),
            "clock_resets": summary.get("timing", {}).get("clock_resets"),
            "max_lag_s": load.get("max_lag_s"), "dropped_s": load.get("dropped_s"),
            "degraded": summary.get("degradation", {}).get("degraded"),
            "degraded_reasons": summary.get("degradation", {}).get("reasons", []),
            "mirror_refusals": summary.get("mirror_refusals", {}).get("count"),
            "injections": len(summary.get("truth", []))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--scenarios", nargs="*", default=None,
                        help="scenario names or YAML paths (default: every built-in scenario)")
    parser.add_argument("--out", type=Path, default=Path("out/live_eval"), help="run directories go here")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per-scenario time limit")
    parser.add_argument("--seeds", default=None, metavar="A:B", help="generated scenarios of seeds A..B-1")
    parser.add_argument("--robot", default=None, help="robot of the generated scenarios (default: drawn per seed)")
    parser.add_argument("--hog", type=int, default=0, metavar="N", help="N busy-loop processes beside every run")
    args = parser.parse_args(argv)

    names = args.scenarios or sorted(p.stem for p in (REPO / "config" / "scenarios").glob("*.yaml"))
    if args.seeds:
        names = [str(p) for p in _generated(args.seeds, args.robot, args.out / "scenarios")]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hog)]
    try:
        rows, results = _run_all(names, args)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return _report(rows, results, args)


def _generated(seeds: str, robot: str | None, out_dir: Path) -> list[Path]:
    """Write the scenarios of seeds A..B-1 (``A:B``) into out_dir; their paths."""
    from sim_real_bridge.sim.generate import write_scenarios

    try:
        first, end = (int(x) for x in seeds.split(":"))
    except ValueError:
        raise SystemExit(f"--seeds must be A:B (integers), got {seeds!r}") from None
    if end <= first:
        raise SystemExit(f"--seeds A:B needs B > A, got {seeds!r}")
    return write_scenarios(first, end - first, out_dir, robot)


def _run_all(names: list[str], args: argparse.Namespace) -> tuple[dict, dict]:
    """Run every scenario; (rows, results for the aggregate)."""
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
    return rows, results


def _report(rows: dict, results: dict, args: argparse.Namespace) -> int:
    """Aggregate and print the JSON."""
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
    lagged = [r for r in rows.values() if (r.get("max_lag_s") or 0) > 0.5]
    nominal = [r for r in rows.values() if "error" not in r and not r.get("injections")]
    load = {"hog": args.hog, "load_average_1min": os.getloadavg()[0],
            "runs_behind": len(lagged), "runs_degraded": sum(bool(r.get("degraded")) for r in rows.values()),
            "degraded_whenever_behind": all(r.get("degraded") for r in lagged),
            "mirror_refusals_nominal": sum(r.get("mirror_refusals") or 0 for r in nominal),
            "mirror_refusals": sum(r.get("mirror_refusals") or 0 for r in rows.values())}
    print(json.dumps({"scenarios": rows, "aggregate": agg, "load": load}, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
