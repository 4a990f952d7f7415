"""Attribution quality on scenarios, without ROS: sim and stand-in side by side, scored.

For each scenario the simulator (SimulatedRobot) and the stand-in (SimulatedRobot with a
RealityModel) step in lockstep at the physics rate (1 kHz) on the same command
program; the stand-in receives each command a little later, as over a network. Their
samples (joint_states and wrench at 500 Hz, poses at 100 Hz) get a clock offset on the
real side and realistic receive delays (base + exponential jitter), are sorted in
receive order and fed to the DivergenceEngine through ``analyze_streams`` (ticks every
20 ms, like the live node). Events are scored against the scenario's injections with
``core.scoring.score_events``.

Usage:
    python bench/attribution_eval.py --json [--scenarios DIR_OR_FILE ...] [--cache DIR]

Prints one JSON object: per scenario the events, the scores and timing; an "aggregate"
block with per-category precision/recall/F1, median detection delay, nominal false
events per ten minutes and whether the product targets are met (F1 >= 0.9, median
delay <= 0.5 s, nominal <= 1 event per 10 min).
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim_real_bridge.core.engine import EngineConfig, analyze_streams  # noqa: E402
from sim_real_bridge.core.scoring import CATEGORIES, score_events  # noqa: E402

REAL_CLOCK_OFFSET_NS = 1_234_567_890_123  # the real robot's clock runs elsewhere
MONITOR_EPOCH_NS = 1_700_000_000_000_000_000


def simulate(
    scenario_path: Path, seed_offset: int = 0, cmd_delay_ms: int | None = None, recv_jitter_ms: float = 0.4
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run sim and stand-in side by side; return (messages in receive order, meta).

    Args:
        scenario_path: scenario YAML.
        seed_offset: varies the transport randomness.
        cmd_delay_ms: how much later the stand-in hears each command (None: 0-2 ms at random).
        recv_jitter_ms: mean of the exponential part of the receive delays.
    """
    from sim_real_bridge.sim.physics import ArmPhysics
    from sim_real_bridge.sim.reality import RealityModel
    from sim_real_bridge.sim.robot import SimulatedRobot
    from sim_real_bridge.sim.scenario import load_scenario
    from sim_real_bridge.sim.tasks import build_program

    scenario = load_scenario(scenario_path)
    rng = np.random.default_rng(scenario.seed + 1000 * seed_offset)
    program = build_program(scenario.task, scenario.duration_s)
    sim = SimulatedRobot()
    real_physics = ArmPhysics()
    real = SimulatedRobot(physics=real_physics,
                          reality=RealityModel(real_physics, scenario, np.random.default_rng(scenario.seed)))
    step_ns = sim.physics.timestep_ns
    names = list(sim.physics.joint_names)
    pre_roll_ns = 500_000_000  # streams flow before the first command
    end_ns = pre_roll_ns + int(round(scenario.duration_s * 1e9))
    pending_sim = [(pre_roll_ns + off, traj) for off, traj in program.segments]
    if cmd_delay_ms is None:
        cmd_delay_ns = int(rng.integers(0, 3)) * step_ns  # the stand-in hears commands 0-2 ms later
    else:
        cmd_delay_ns = int(cmd_delay_ms) * step_ns
    pending_real = [(t + cmd_delay_ns, traj) for t, traj in pending_sim]
    messages: list[dict[str, Any]] = []

    last_recv: dict[tuple[str, str], int] = {}

    def emit(side: str, samples: list, true_ns: int) -> None:
        for s in samples:
            stamp = s.stamp_ns + (REAL_CLOCK_OFFSET_NS if side == "real" else 0)
            # One writer per topic: DDS delivers in order, so delays queue (FIFO).
            recv = MONITOR_EPOCH_NS + true_ns + int(1_000_000 + rng.exponential(recv_jitter_ms * 1e6))
            recv = max(recv, last_recv.get((side, s.stream), 0) + 1)
            last_recv[(side, s.stream)] = recv
            v = s.values
            if s.stream == "joint_states":
                messages.append(dict(type="joint_state", side=side, stamp_ns=stamp, recv_ns=recv, names=names,
                                     q_rad=v["position"], qd_rad_s=v["velocity"], effort=v["effort"]))
            elif s.stream == "wrench":
                messages.append(dict(type="wrench", side=side, stamp_ns=stamp, recv_ns=recv,
                                     force_n=v["force"], torque_nm=v["torque"]))
            else:
                which = "ee" if s.stream == "ee_pose" else "object"
                messages.append(dict(type="pose", side=side, which=which, stamp_ns=stamp, recv_ns=recv,
                                     position_m=v["position"], orientation_wxyz=v["orientation"]))

    while sim.time_ns < end_ns:
        now = sim.time_ns
        while pending_sim and pending_sim[0][0] <= now:
            t_cmd, traj = pending_sim.pop(0)
            sim.command(traj)
            messages.append(dict(type="command", stamp_ns=0, recv_ns=MONITOR_EPOCH_NS + now + 300_000,
                                 names=names, points=[]))
        while pending_real and pending_real[0][0] <= real.time_ns:
            real.command(pending_real.pop(0)[1])
        emit("sim", sim.advance(now + step_ns), now + step_ns)
        emit("real", real.advance(now + step_ns), now + step_ns)
    messages.sort(key=lambda m: m["recv_ns"])
    # Truth as the live demo records it: from when each injection changed reality.
    from sim_real_bridge.core.summary import TruthCollector

    labels = TruthCollector()
    reality = real.reality
    labels.add(scenario.duration_s, [
        {"category": i.category, "kind": i.kind, "start_s": i.start_s, "end_s": i.end_s, "active": False,
         "effect_start_s": float("nan") if reality.effect_start_s(i) is None else reality.effect_start_s(i)}
        for i in scenario.injections])
    truth = labels.truth(scenario.duration_s)
    meta = {"name": scenario.name, "task": scenario.task, "duration_s": scenario.duration_s, "truth": truth,
            "without_effect": labels.without_effect(scenario.duration_s)}
    return messages, meta


def load_or_simulate(
    path: Path, cache: Path | None, cmd_delay_ms: int | None = None, recv_jitter_ms: float = 0.4
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Simulate a scenario, or read the cached run of the same inputs."""
    if cache is not None:
        import hashlib

        sim_dir = REPO / "sim_real_bridge" / "sim"
        h = hashlib.sha1(path.read_bytes())
        for source in sorted(sim_dir.rglob("*")):
            if source.suffix in (".py", ".xml"):
                h.update(source.read_bytes())
        h.update(Path(__file__).read_bytes())
        h.update(repr((cmd_delay_ms, recv_jitter_ms)).encode())
        digest = h.hexdigest()[:12]
        cached = cache / f"{path.stem}-{digest}.pkl"
        if cached.exists():
            with cached.open("rb") as fh:
                return pickle.load(fh)
    result = simulate(path, cmd_delay_ms=cmd_delay_ms, recv_jitter_ms=recv_jitter_ms)
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        with cached.open("wb") as fh:
            pickle.dump(result, fh)
    return result


def evaluate(messages: list[dict[str, Any]], meta: dict[str, Any], config: EngineConfig | None = None) -> dict[str, Any]:
    """Run the engine on one scenario's messages and score its events."""
    engine, _ = analyze_streams(messages, config)
    summary = engine.run_summary()
    events = [{k: e[k] for k in ("category", "kind", "start_s", "end_s", "severity")} for e in summary["events"]]
    scores = score_events(events, meta["truth"], duration_s=meta["duration_s"])
    return {"events": events, "truth": meta["truth"], "scores": scores, "timing": summary["timing"]}


def aggregate(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Pool events and truths over scenarios (each scenario's own matching) per category."""
    per_cat: dict[str, dict[str, Any]] = {}
    for cat in CATEGORIES:
        n_ev = m_ev = n_tr = m_tr = 0
        delays: list[float] = []
        for res in results.values():
            block = res["scores"]["per_category"][cat]
            n_ev += block["n_events"]
            m_ev += block["matched_events"]
            n_tr += block["n_truth"]
            m_tr += block["matched_truth"]
            delays += block["delays_s"]
        p = 1.0 if n_ev == 0 else m_ev / n_ev
        r = 1.0 if n_tr == 0 else m_tr / n_tr
        per_cat[cat] = {"precision": p, "recall": r, "f1": 0.0 if p + r == 0 else 2 * p * r / (p + r),
                        "n_events": n_ev, "n_truth": n_tr,
                        "median_delay_s": float(np.median(delays)) if delays else None}
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--scenarios", nargs="*", type=Path,
                        default=[REPO / "config" / "scenarios", REPO / "test" / "data" / "scenarios_extra"],
                        help="scenario files or directories")
    parser.add_argument("--cache", type=Path, default=None, help="cache simulated runs here")
    parser.add_argument("--only", nargs="*", default=None, help="scenario stems to run")
    parser.add_argument("--cmd-delay-ms", type=int, default=None,
                        help="the stand-in hears commands this much later (default: 0-2 ms at random)")
    parser.add_argument("--recv-jitter-ms", type=float, default=0.4, help="mean receive-delay jitter")
    args = parser.parse_args(argv)
    paths: list[Path] = []
    for p in args.scenarios:
        paths += sorted(p.glob("*.yaml")) if p.is_dir() else [p]
    if args.only:
        paths = [p for p in paths if p.stem in args.only]
    results: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    for path in paths:
        messages, meta = load_or_simulate(path, args.cache, args.cmd_delay_ms, args.recv_jitter_ms)
        res = evaluate(messages, meta)
        res["duration_s"] = meta["duration_s"]
        results[f"{path.parent.name}/{path.stem}"] = res
        if not args.json:
            ev = [(e["category"], e["kind"], round(e["start_s"], 2), round(e["end_s"], 2)) for e in res["events"]]
            tr = [(t["category"], t["kind"], t["start_s"], t["end_s"]) for t in res["truth"]]
            print(f"{path.stem}: macro_f1={res['scores']['overall']['macro_f1']:.2f} truth={tr} events={ev}",
                  flush=True)
    out = {"scenarios": results, "aggregate": aggregate(results), "elapsed_s": time.perf_counter() - started}
    if args.json:
        print(json.dumps(out, default=float))
    else:
        print(json.dumps(out["aggregate"], indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
