"""Attribution quality without ROS: sim and stand-in side by side in-process, analysed, scored.

Each scenario runs through ``sim_real_bridge.sim.lockstep.run_lockstep``: the simulator and
the stand-in step at the physics rate (1 kHz) on the same command program, the stand-in
hearing each command 0-2 ms later; their streams reach the monitor with a clock offset on
the real side and receive delays of 1 ms plus exponential jitter, in order per stream.
``analyse_run`` hands those columns to the engine as replay does and runs it at the live
node's 20 ms ticks. Events are
scored against the truth the demo would record (from each injection's effect start) with
the matching rule of ``sim_real_bridge.evaluation.scoring.score_events``.

Usage:
    python bench/attribution_eval.py --json --seeds A:B [--robot NAME] [--workers N]
    python bench/attribution_eval.py --json [--scenarios DIR_OR_FILE ...] [--only STEM ...] [--cache DIR]

``--seeds A:B`` runs the generated scenarios of seeds A .. B-1 (``sim-real-bridge scenarios
generate``), in parallel over the cores, and prints one JSON object: ``per_robot`` -> robot
-> category -> {precision, recall, f1, median_delay_s, p90_delay_s, n_events, n_truth}, the
same pooled over every robot in ``overall``, ``kind_accuracy`` (matched events whose kind
is the injected kind), ``nominal_false_per_hour`` (events per hour of scenarios without
injections), per-robot versions of those two, and a row per scenario. Seeds below 10000
are for development; seeds from 100000 up are for outside evaluation only. A line per
finished seed goes to stderr (a range of 80 takes 10-13 minutes on two cores).

``--scenarios`` runs scenario files (default: the built-in library and
test/data/scenarios_extra) one after the other and prints per scenario the events and
scores plus an ``aggregate`` block (per-category figures, nominal events per ten minutes,
whether the product targets are met).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import multiprocessing
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim_real_bridge.core.engine import DivergenceEngine, EngineConfig  # noqa: E402
from sim_real_bridge.evaluation.scoring import CATEGORIES, match_matrix, score_events  # noqa: E402
from sim_real_bridge.evaluation.summary import TruthCollector  # noqa: E402
from sim_real_bridge.sim.lockstep import LockstepRun, Transport, run_lockstep  # noqa: E402

_POSE_WHICH = {"ee_pose": "ee", "object_pose": "object"}


# --------------------------------------------------------------------------- adapter
TICK_NS = 20_000_000  # the live node's timer


def analyse_run(run: LockstepRun, config: EngineConfig | None = None) -> DivergenceEngine:
    """The run's columns through the engine as replay hands a recording over, ticked
    every 20 ms of receive time like the live node; returns the engine after finish."""
    engine = DivergenceEngine(config)
    names = tuple(run.joint_names)
    recv = [run.commands.recv_ns]
    for recv_ns in run.commands.recv_ns.tolist():
        engine.add_command(recv_ns)
    for side, streams in run.streams.items():
        for stream, cols in streams.items():
            v = cols.values
            recv.append(cols.recv_ns)
            if stream == "joint_states":
                engine.add_joint_states(side, cols.stamp_ns, cols.recv_ns, names, v["position"], v["velocity"],
                                        v["effort"])
            elif stream == "wrench":
                engine.add_wrench(side, cols.stamp_ns, cols.recv_ns, v["force"], v["torque"])
            else:
                engine.add_pose(side, stream, cols.stamp_ns, cols.recv_ns, v["position"], v["orientation"])
    received = np.concatenate([r for r in recv if len(r)])
    first, last = int(received.min()), int(received.max())
    engine.run(np.arange((first // TICK_NS + 1) * TICK_NS, last + TICK_NS, TICK_NS, dtype=np.int64))
    engine.finish()
    return engine


# --------------------------------------------------------------------------- one run
def truth_of(run: LockstepRun) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(truth, injections without effect) as the live demo records them from the stand-in's labels."""
    labels = TruthCollector()
    duration_s = run.scenario.duration_s
    labels.add(duration_s, [{**label, "active": False} for label in run.labels])
    return labels.truth(duration_s), labels.without_effect(duration_s)


def evaluate(engine: DivergenceEngine, meta: dict[str, Any]) -> dict[str, Any]:
    """Score an analysed run's events against its truth."""
    summary = engine.run_summary()
    events = [{k: e[k] for k in ("category", "kind", "start_s", "end_s", "severity")} for e in summary["events"]]
    scores = score_events(events, meta["truth"], duration_s=meta["duration_s"])
    return {"events": events, "truth": meta["truth"], "scores": scores, "timing": summary["timing"]}


def run_and_evaluate(run: LockstepRun) -> dict[str, Any]:
    """Analyse one lockstep run and score it; the scenario's facts beside the scores."""
    truth, without_effect = truth_of(run)
    scenario = run.scenario
    meta = {"truth": truth, "duration_s": scenario.duration_s}
    result = evaluate(analyse_run(run), meta)
    result.update(name=scenario.name, robot=scenario.robot, task=scenario.task, duration_s=scenario.duration_s,
                  nominal=not scenario.injections, without_effect=without_effect,
                  sensors=dataclasses.asdict(scenario.sensors))
    return result


def run_seed(task: tuple[int, str | None, Path | None]) -> dict[str, Any]:
    """Worker: generate the scenario of a seed, run it in lockstep (or read the cached
    run), analyse and score it."""
    from sim_real_bridge.sim.generate import generate_scenario
    from sim_real_bridge.sim.scenario import parse_scenario

    seed, robot, cache = task
    scenario = parse_scenario(generate_scenario(seed, robot), source=f"seed {seed}")
    started = time.perf_counter()
    run = _cached(cache, f"seed{seed}-{robot or 'any'}", repr(scenario).encode(), lambda: run_lockstep(scenario))
    result = run_and_evaluate(run)
    result.update(seed=seed, wall_s=round(time.perf_counter() - started, 2))
    return result


def _cached(cache: Path | None, stem: str, inputs: bytes, make: Any) -> LockstepRun:
    """make(), or its pickled result from an earlier call with the same inputs and simulator sources."""
    if cache is None:
        return make()
    digest = hashlib.sha1(inputs)
    for source in sorted((REPO / "sim_real_bridge" / "sim").rglob("*")):
        if source.suffix in (".py", ".xml"):
            digest.update(source.read_bytes())
    path = cache / f"{stem}-{digest.hexdigest()[:12]}.pkl"
    if path.exists():
        with path.open("rb") as fh:
            return pickle.load(fh)
    run = make()
    cache.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    with partial.open("wb") as fh:
        pickle.dump(run, fh)
    partial.replace(path)
    return run


# --------------------------------------------------------------------------- pooling
def pool_categories(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per category over scenarios: precision, recall, F1 of the pooled counts, delay median and p90."""
    out: dict[str, dict[str, Any]] = {}
    for cat in CATEGORIES:
        blocks = [res["scores"]["per_category"][cat] for res in results]
        n_ev = sum(b["n_events"] for b in blocks)
        m_ev = sum(b["matched_events"] for b in blocks)
        n_tr = sum(b["n_truth"] for b in blocks)
        m_tr = sum(b["matched_truth"] for b in blocks)
        delays = [d for b in blocks for d in b["delays_s"]]
        p = 1.0 if n_ev == 0 else m_ev / n_ev
        r = 1.0 if n_tr == 0 else m_tr / n_tr
        out[cat] = {"precision": p, "recall": r, "f1": 0.0 if p + r == 0 else 2 * p * r / (p + r),
                    "median_delay_s": float(np.median(delays)) if delays else None,
                    "p90_delay_s": float(np.percentile(delays, 90)) if delays else None,
                    "n_events": n_ev, "n_truth": n_tr}
    return out


def kind_accuracy(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Share of matched events whose kind is the kind of a truth entry they match."""
    matched = right = 0
    for res in results:
        events, truth = res["events"], res["truth"]
        if not events or not truth:
            continue
        matches = match_matrix(events, truth)
        for i, event in enumerate(events):
            hits = np.flatnonzero(matches[i])
            if hits.size:
                matched += 1
                right += any(truth[j].get("kind") == event["kind"] for j in hits)
    return {"kind_accuracy": right / matched if matched else None, "matched_events": matched}


def nominal_false_per_hour(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Events per hour over the scenarios without injections."""
    nominal = [res for res in results if res["nominal"]]
    hours = sum(res["duration_s"] for res in nominal) / 3600.0
    events = sum(len(res["events"]) for res in nominal)
    return {"nominal_false_per_hour": events / hours if hours else None, "nominal_hours": hours,
            "nominal_events": events}


def seeds_report(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``--seeds`` JSON: per robot and overall figures, kind accuracy, nominal false rate, rows."""
    robots = sorted({res["robot"] for res in results})
    by_robot = {robot: [res for res in results if res["robot"] == robot] for robot in robots}
    accuracy = kind_accuracy(results)
    nominal = nominal_false_per_hour(results)
    return {
        "per_robot": {robot: pool_categories(rows) for robot, rows in by_robot.items()},
        "overall": pool_categories(results),
        "kind_accuracy": accuracy["kind_accuracy"],
        "nominal_false_per_hour": nominal["nominal_false_per_hour"],
        "kind_accuracy_per_robot": {robot: kind_accuracy(rows)["kind_accuracy"] for robot, rows in by_robot.items()},
        "nominal_false_per_hour_per_robot": {robot: nominal_false_per_hour(rows)["nominal_false_per_hour"]
                                             for robot, rows in by_robot.items()},
        "matched_events": accuracy["matched_events"],
        "nominal_hours": nominal["nominal_hours"],
        "scenario_count": len(results),
        "scenarios": [_row(res) for res in results],
    }


def _row(res: dict[str, Any]) -> dict[str, Any]:
    return {"seed": res.get("seed"), "robot": res["robot"], "task": res["task"], "duration_s": res["duration_s"],
            "truth": [f"{t['category']}/{t['kind']}@{t['start_s']:.2f}-{t['end_s']:.2f}" for t in res["truth"]],
            "events": [f"{e['category']}/{e['kind']}@{e['start_s']:.2f}-"
                       f"{'open' if e['end_s'] is None else format(e['end_s'], '.2f')}" for e in res["events"]],
            "without_effect": [f"{w['category']}/{w['kind']}" for w in res["without_effect"]],
            "wall_s": res.get("wall_s")}


def aggregate(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ``--scenarios`` aggregate (also bench/live_eval.py's): pooled per category, targets."""
    per_cat = pool_categories(list(results.values()))
    nominal = [res for res in results.values() if not res["truth"]]
    nominal_s = sum(res["duration_s"] for res in nominal)
    nominal_events = sum(len(res["events"]) for res in nominal)
    rate = nominal_events * 600.0 / nominal_s if nominal_s else None
    worst_f1 = min((per_cat[c]["f1"] for c in CATEGORIES if per_cat[c]["n_truth"]), default=None)
    delays = [per_cat[c]["median_delay_s"] for c in CATEGORIES if per_cat[c]["median_delay_s"] is not None]
    per_scenario_f1 = {name: res["scores"]["overall"]["macro_f1"] for name, res in results.items()}
    return {
        "per_category": per_cat,
        "nominal_events_per_10min": rate,
        "worst_category_f1": worst_f1,
        "worst_median_delay_s": max(delays) if delays else None,
        "per_scenario_macro_f1": per_scenario_f1,
        "targets_met": bool(worst_f1 is not None and worst_f1 >= 0.9 and (not delays or max(delays) <= 0.5)
                            and (rate is None or rate <= 1.0)
                            and all(f >= 0.9 for f in per_scenario_f1.values())),
    }


# --------------------------------------------------------------------------- modes
def parse_seeds(text: str) -> range:
    """``A:B`` -> range(A, B) (B exclusive), 0 <= A < B."""
    try:
        first, last = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A:B with whole numbers, got {text!r}") from None
    if not 0 <= first < last:
        raise argparse.ArgumentTypeError(f"expected 0 <= A < B, got {text!r}")
    return range(first, last)


def run_seeds(seeds: range, robot: str | None, workers: int, cache: Path | None = None,
              on_done: Callable[[dict[str, Any], int, int], None] | None = None) -> list[dict[str, Any]]:
    """Every seed's result, in seed order, computed by ``workers`` processes; ``on_done``
    is called with each result as it comes, how many are done and how many in all."""
    tasks = [(seed, robot, cache) for seed in seeds]
    results: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        if workers <= 1:
            done = map(run_seed, tasks)
        else:
            pool = stack.enter_context(multiprocessing.get_context("fork").Pool(workers))
            done = pool.imap_unordered(run_seed, tasks, chunksize=1)
        for result in done:
            results.append(result)
            if on_done is not None:
                on_done(result, len(results), len(tasks))
    return sorted(results, key=lambda res: res["seed"])


def progress_line(started: float) -> Callable[[dict[str, Any], int, int], None]:
    """An ``on_done`` that prints one line per finished seed on stderr (stdout is the JSON)."""
    def report(result: dict[str, Any], done: int, total: int) -> None:
        print(f"[{done}/{total}] seed {result['seed']} ({result['robot']}, {result['task']}, "
              f"{result['duration_s']:.0f} s): {len(result['events'])} events, {len(result['truth'])} truth windows; "
              f"{time.perf_counter() - started:.0f} s elapsed", file=sys.stderr, flush=True)
    return report


def run_scenario_file(path: Path, cache: Path | None, transport: Transport) -> dict[str, Any]:
    """One scenario file, its lockstep run cached by inputs when ``cache`` is set."""
    from sim_real_bridge.sim.scenario import load_scenario

    run = _cached(cache, path.stem, path.read_bytes() + repr(transport).encode(),
                  lambda: run_lockstep(load_scenario(path), transport))
    return run_and_evaluate(run)


def _scenario_paths(args: argparse.Namespace) -> list[Path]:
    paths: list[Path] = []
    for p in args.scenarios:
        paths += sorted(p.glob("*.yaml")) if p.is_dir() else [p]
    if args.only:
        paths = [p for p in paths if p.stem in args.only]
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--seeds", type=parse_seeds, default=None, help="generated scenarios of seeds A..B-1")
    parser.add_argument("--robot", default=None, help="with --seeds: every scenario on this robot")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="with --seeds: processes")
    parser.add_argument("--scenarios", nargs="*", type=Path,
                        default=[REPO / "config" / "scenarios", REPO / "test" / "data" / "scenarios_extra"],
                        help="scenario files or directories (without --seeds)")
    parser.add_argument("--cache", type=Path, default=None, help="cache lockstep runs (scenario files and seeds) here")
    parser.add_argument("--only", nargs="*", default=None, help="scenario stems to run")
    parser.add_argument("--cmd-delay-ms", type=int, default=None,
                        help="the stand-in hears commands this much later (default: 0-2 ms at random)")
    parser.add_argument("--recv-jitter-ms", type=float, default=0.4, help="mean receive-delay jitter")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.seeds is not None:
        from sim_real_bridge.sim.robots import ROBOTS

        if args.robot is not None and args.robot not in ROBOTS:
            parser.error(f"--robot must be one of {', '.join(ROBOTS)}, got {args.robot!r}")
        report = seeds_report(run_seeds(args.seeds, args.robot, max(1, args.workers), args.cache,
                                        progress_line(started)))
        report.update(seeds=f"{args.seeds.start}:{args.seeds.stop}", robot=args.robot, workers=args.workers,
                      elapsed_s=round(time.perf_counter() - started, 1))
        print(json.dumps(report, default=float) if args.json else json.dumps(
            {k: v for k, v in report.items() if k != "scenarios"}, indent=1, default=float))
        return 0
    transport = Transport(
        real_command_delay_ns=None if args.cmd_delay_ms is None else args.cmd_delay_ms * 1_000_000,
        recv_jitter_mean_ns=args.recv_jitter_ms * 1e6,
    )
    results: dict[str, dict[str, Any]] = {}
    for path in _scenario_paths(args):
        res = run_scenario_file(path, args.cache, transport)
        results[f"{path.parent.name}/{path.stem}"] = res
        if not args.json:
            print(f"{path.stem}: macro_f1={res['scores']['overall']['macro_f1']:.2f} {json.dumps(_row(res))}",
                  flush=True)
    out = {"scenarios": results, "aggregate": aggregate(results), "elapsed_s": time.perf_counter() - started}
    print(json.dumps(out, default=float) if args.json else json.dumps(out["aggregate"], indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
