"""Does ``sim-real-bridge fit`` recover injected departures, and does the corrected model help?

For each built-in robot of ``ROBOTS`` and each scenario with a known injection (gain,
joint_friction, payload, actuation_latency, contact friction, stiffness, object_mass)
the simulator and the stand-in run the scenario on that robot in-process
(``offline.synthetic.simulated_messages``), the recording is written as a rosbag2
MCAP bag and read back as a user's would be. The
fit gets one 3 s window inside the injection (for contact kinds: the first one in
which the arm touches something) with the default parameters of the injection's
category, as the monitor's event would choose them; the other windows of the same
injection are held out.

Keys, over all robots and again per robot under ``per_robot``: ``recovered_share``
(injected parameters the fit included whose fitted value is within 10% of the injected
one or whose 95% interval holds it), ``residual_reduction_fit`` and
``residual_reduction_heldout`` (mean over scenarios of 1 - after/before of the joint
residual RMS), ``fit_wall_s_median`` (one window), ``fit_wall_over_rollout_median``
(a fit's wall time over that of one rollout of its window with the nominal model,
measured in the same run), and ``passes``: each of the issue's acceptance thresholds
(``THRESHOLDS``) met or not. Per scenario: every injected parameter with its fitted
value, and the parameters changed that nothing injected.

Usage:
    python bench/fit_eval.py --json [--only dynamics_gain ...] [--robots arm7 ur6]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sim_real_bridge.fit.command import FitRequest, fit_recordings  # noqa: E402
from sim_real_bridge.fit.identify import joint_rms_rad  # noqa: E402
from sim_real_bridge.fit.model import FitModel, resolve_model  # noqa: E402
from sim_real_bridge.fit.parameters import history_steps  # noqa: E402
from sim_real_bridge.fit.recording import read_recording  # noqa: E402
from sim_real_bridge.fit.windows import FitWindow, window_data  # noqa: E402
from sim_real_bridge.offline.synthetic import simulated_messages, write_synthetic_bag  # noqa: E402
from sim_real_bridge.sim.physics import CONTACT_GEOM_NAMES  # noqa: E402
from sim_real_bridge.sim.scenario import load_scenario  # noqa: E402

#: Built-in robots evaluated (the scenarios run on each).
ROBOTS: tuple[str, ...] = ("arm7", "ur6")
SCENARIOS: tuple[str, ...] = ("dynamics_gain", "dynamics_joint_friction", "dynamics_payload",
                              "dynamics_actuation_latency", "contact_friction", "contact_stiffness",
                              "contact_object_mass")
WINDOW_S = 3.0
#: Candidate window starts inside the injections (8-22 s of the built-in scenarios).
STARTS_S: tuple[float, ...] = (8.5, 11.5, 14.5, 17.5)
RUN_S = 21.0
NS_PER_S = 1_000_000_000
#: The issue's acceptance: (key, "min" or "max", threshold).
THRESHOLDS: tuple[tuple[str, str, float], ...] = (
    ("recovered_share", "min", 0.8),
    ("residual_reduction_fit", "min", 0.5),
    ("residual_reduction_heldout", "min", 0.3),
    ("fit_wall_s_median", "max", 60.0),
)


def truth_values(injection: Any, fit_model: FitModel) -> dict[str, float]:
    """The parameter values the injection makes true, by fit parameter name."""
    model, p, kind = fit_model.model, injection.params, injection.kind
    if kind == "gain":
        return {f"gain:{j}": float(model.actuator(fit_model.actuator_of_joint[j]).gainprm[0]) * p["scale"]
                for j in p["joints"]}
    if kind == "joint_friction":
        out = {}
        for j in p["joints"]:
            dof = int(model.joint(j).dofadr[0])
            out[f"damping:{j}"] = float(model.dof_damping[dof]) + p["damping_nm_s_per_rad"]
            out[f"frictionloss:{j}"] = float(model.dof_frictionloss[dof]) + p["frictionloss_nm"]
        return out
    if kind == "payload":
        return {"payload": p["mass_kg"]}
    if kind == "actuation_latency":
        return {"delay": p["delay_s"]}
    if kind == "friction":
        return {f"friction:{g}": float(model.geom_friction[model.geom(g).id, 0]) * p["scale"] for g in CONTACT_GEOM_NAMES}
    if kind == "stiffness":
        return {f"solref:{g}": float(model.geom_solref[model.geom(g).id, 0]) / np.sqrt(p["scale"])
                for g in CONTACT_GEOM_NAMES}
    if kind == "object_mass":
        return {"mass:object": float(model.body("object").mass[0]) * p["scale"]}
    return {}


def _windows(rec: Any, fit_model: FitModel, contact: bool) -> list[FitWindow]:
    t0 = rec.first_command_ns
    out = []
    for start in STARTS_S:
        window = FitWindow(f"t{start:g}", rec.source, t0 + int(start * NS_PER_S), t0 + int((start + WINDOW_S) * NS_PER_S),
                           "contact" if contact else "dynamics")
        if contact:
            wd = window_data(rec, window, fit_model.timestep_s, history_steps(fit_model.timestep_s))
            if not fit_model.contacts(wd)[0]:
                continue
        out.append(window)
    return out


def evaluate(name: str, robot: str, workdir: Path) -> dict[str, Any]:
    """Simulate, fit one window, replay the held-out ones; the scenario's figures."""
    scenario = load_scenario(name, robot=robot)
    [injection] = scenario.injections
    bag = workdir / f"{robot}-{name}"
    write_synthetic_bag(bag, items=simulated_messages(name, duration_s=RUN_S, robot=robot))
    rec = read_recording(bag)
    path, builtin = resolve_model(robot)
    fit_model = FitModel(path, rec.joint_names, builtin)
    windows = _windows(rec, fit_model, injection.category == "contact")
    if not windows:
        return {"error": "no window with contact"}
    spans = [((windows[0].start_ns - rec.first_command_ns) / NS_PER_S, (windows[0].end_ns - rec.first_command_ns) / NS_PER_S)]
    request = FitRequest(inputs=[bag], model=robot, params=[injection.category], spans_s=spans)
    result = fit_recordings([rec], request)
    truth = truth_values(injection, fit_model)
    fitted = {p["name"]: p for p in result["parameters"]}
    per_param = {}
    for pname, value in truth.items():
        if pname not in fitted:
            continue
        p = fitted[pname]
        within = abs(p["fitted"] - value) <= 0.1 * abs(value)
        inside = p["interval95"] is not None and p["interval95"][0] <= value <= p["interval95"][1]
        per_param[pname] = {"injected": value, "before": p["before"], "fitted": p["fitted"],
                            "half_interval": p["half_interval"], "identifiable": p["identifiable"],
                            "recovered": bool(within or inside)}
    spurious = [p["name"] for p in result["parameters"] if p["name"] not in truth and p["identifiable"]
                and abs(p["applied"] - p["before"]) > 0.1 * max(abs(p["before"]), 1e-3)]
    heldout = _heldout(rec, fit_model, windows[1:], result["_spec"])
    rollout_s = _rollout_wall_s(rec, fit_model, windows[0])
    fit_window = result["windows"][0]
    return {"robot": robot, "kind": injection.kind, "fit_window_s": spans[0], "parameters": per_param,
            "not_fitted": sorted(set(truth) - set(fitted)), "spurious_changes": spurious,
            "selected_by_screening": (result["screening"] or {}).get("selected"),
            "fit_joint_rms_before_rad": fit_window["joint_rms_before_rad"],
            "fit_joint_rms_after_rad": fit_window["joint_rms_after_rad"],
            "residual_reduction_fit": fit_window["joint_reduction"], **heldout, "fit_wall_s": result["wall_s"],
            "rollout_wall_s": rollout_s, "fit_wall_over_rollout": result["wall_s"] / rollout_s}


def _rollout_wall_s(rec: Any, fit_model: FitModel, window: FitWindow, repeats: int = 5) -> float:
    """The baseline: median wall time of one rollout of the fit window with the nominal model."""
    wd = window_data(rec, window, fit_model.timestep_s, history_steps(fit_model.timestep_s))
    model = fit_model.spec.compile()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fit_model.rollout([model], [wd], 1)
        times.append(time.perf_counter() - started)
    return float(np.median(times))


def _heldout(rec: Any, fit_model: FitModel, windows: list[FitWindow], corrected: Any) -> dict[str, Any]:
    if not windows:
        return {"residual_reduction_heldout": None, "heldout_windows": 0}
    steps = history_steps(fit_model.timestep_s)
    data = [window_data(rec, w, fit_model.timestep_s, steps) for w in windows]
    before = fit_model.rollout([fit_model.spec.compile()] * len(data), data, 2)
    after = fit_model.rollout([corrected.compile()] * len(data), data, 2)
    b = np.sqrt(np.mean([joint_rms_rad(wd, r) ** 2 for wd, r in zip(data, before)]))
    a = np.sqrt(np.mean([joint_rms_rad(wd, r) ** 2 for wd, r in zip(data, after)]))
    return {"residual_reduction_heldout": float(1 - a / b) if b > 0 else 0.0, "heldout_windows": len(data),
            "heldout_joint_rms_before_rad": float(b), "heldout_joint_rms_after_rad": float(a)}


def aggregate(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The keys of the issue from the scenarios' figures (keyed ``robot/scenario``)."""
    ok = [r for r in results.values() if "error" not in r]
    recovered = [p["recovered"] for r in ok for p in r["parameters"].values()]
    heldout = [r["residual_reduction_heldout"] for r in ok if r["residual_reduction_heldout"] is not None]
    out = {
        "recovered_share": float(np.mean(recovered)) if recovered else None,
        "recovered": int(np.sum(recovered)), "injected_parameters_fitted": len(recovered),
        "residual_reduction_fit": float(np.mean([r["residual_reduction_fit"] for r in ok])) if ok else None,
        "residual_reduction_heldout": float(np.mean(heldout)) if heldout else None,
        "fit_wall_s_median": float(np.median([r["fit_wall_s"] for r in ok])) if ok else None,
        "fit_wall_over_rollout_median": float(np.median([r["fit_wall_over_rollout"] for r in ok])) if ok else None,
        "scenarios": len(results), "failed": sorted(k for k, r in results.items() if "error" in r),
    }
    return {**out, "passes": passes(out)}


def passes(figures: dict[str, Any]) -> dict[str, bool]:
    """Each acceptance threshold met (False when its figure is missing)."""
    out = {}
    for key, sense, limit in THRESHOLDS:
        value = figures.get(key)
        out[key] = value is not None and (value >= limit if sense == "min" else value <= limit)
    return out


def report(results: dict[str, dict[str, Any]], robots: list[str]) -> dict[str, Any]:
    """All robots' figures, each robot's under ``per_robot``, the thresholds and the scenarios."""
    per_robot = {robot: aggregate({k: r for k, r in results.items() if k.split("/", 1)[0] == robot})
                 for robot in robots}
    return {**aggregate(results), "robots": robots, "per_robot": per_robot,
            "thresholds": {key: {sense: limit} for key, sense, limit in THRESHOLDS}, "per_scenario": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    parser.add_argument("--robots", nargs="*", default=list(ROBOTS), help="built-in robots")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="fit_eval.") as tmp:
        for robot in args.robots:
            for name in args.only or SCENARIOS:
                res = evaluate(name, robot, Path(tmp))
                results[f"{robot}/{name}"] = res
                if not args.json:
                    print(f"{robot}/{name}: {json.dumps(res, default=float)}", flush=True)
    out = {**report(results, list(args.robots)), "elapsed_s": time.perf_counter() - started}
    print(json.dumps(out, default=float) if args.json else json.dumps({k: v for k, v in out.items()
                                                                         if k != "per_scenario"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
