"""``sim-real-bridge fit``: recordings and a model in; fit.json, the corrected model, fit.html out.

:func:`fit_recordings` does the work and returns plain data (the worker and the bench
call it); :func:`run_fit` adds the files. The output directory is written whole or not
at all: files go to a temporary directory renamed into place at the end.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from sim_real_bridge.fit.errors import FitError
from sim_real_bridge.fit.identify import (FitSettings, ParameterResult, StagedResult, fit_staged, joint_rms_rad,
                                          wrench_rms)
from sim_real_bridge.fit.model import FitModel, Rollout, builtin_models, resolve_model
from sim_real_bridge.fit.parameters import apply_values, build_parameters, check_names, expand_names, history_steps
from sim_real_bridge.fit.recording import Recording, read_recordings
from sim_real_bridge.fit.windows import (DEFAULT_WINDOW_S, FitWindow, WindowData, check_motion, chunk_windows,
                                         default_params, event_windows, span_windows, window_data)

NS_PER_S = 1_000_000_000
MODEL_FILE = "model_fitted.xml"


@dataclass(frozen=True)
class FitRequest:
    """One ``fit`` invocation.

    Attributes:
        inputs: bags, bag directories or snapshot files.
        model: an MJCF file or a built-in robot name.
        out_dir: where fit.json, fit.html and the corrected model go.
        params: parameter names, kinds or groups (None: from the windows' event categories).
        spans_s: explicit windows (start, end) in seconds from each recording's first command.
        window_s: longest window taken from an event or a chunk.
        max_windows: windows per recording without events or spans.
        side: namespace of the real robot's topics.
        settings: optimizer settings.
        joint_map: explicit joint pairs, model joint name -> recorded joint name (the
            others pair by name, as replay pairs them).
    """

    inputs: Sequence[Path]
    model: str
    out_dir: Path | None = None
    params: Sequence[str] | None = None
    spans_s: Sequence[tuple[float, float]] = ()
    window_s: float = DEFAULT_WINDOW_S
    max_windows: int = 2
    side: str = "/real"
    settings: FitSettings = field(default_factory=FitSettings)
    joint_map: dict[str, str] = field(default_factory=dict)


def pick_windows(rec: Recording, request: FitRequest) -> tuple[list[FitWindow], list[str]]:
    """The fit windows of one recording: spans, else its events, else chunks with motion."""
    if request.spans_s:
        return span_windows(rec, request.spans_s), []
    windows, notes = event_windows(rec, request.window_s)
    if not windows:
        windows = chunk_windows(rec, request.window_s, request.max_windows)
        notes.append(f"{rec.source}: no dynamics or contact event: {len(windows)} window(s) after the first command")
    return windows, notes


def fit_recordings(recordings: Sequence[Recording], request: FitRequest) -> dict[str, Any]:
    """Fit and return fit.json's content plus the corrected spec and rollouts (keys ``_spec``, ``_plots``).

    Raises:
        ModelMismatchError, NoMotionError, UnknownParameterError, FitError: one line each.
    """
    started = time.perf_counter()
    check_names(request.params or [])
    model_path, builtin = resolve_model(request.model)
    fit_model = FitModel(model_path, recordings[0].joint_names, builtin, request.joint_map)
    windows: list[tuple[Recording, FitWindow]] = []
    notes: list[str] = []
    for rec in recordings:
        picked, more = pick_windows(rec, request)
        notes += more
        windows += [(rec, w) for w in picked]
    if not windows:
        raise FitError(f"{', '.join(r.source for r in recordings)}: no window with motion after the first command")
    for rec, window in windows:
        check_motion(rec, window)
    steps = history_steps(fit_model.timestep_s)
    data = [window_data(rec, w, fit_model.timestep_s, steps) for rec, w in windows]
    names = list(request.params) if request.params else default_params([w for _, w in windows])
    facts = fit_model.facts(data)
    full = expand_names(names, facts)
    if not full:
        raise FitError(f"parameters {', '.join(names)} apply to nothing in these windows (no contact?)")
    params = build_parameters(full, fit_model.spec, fit_model.model, facts)
    staged = fit_staged(fit_model, data, params, request.settings)
    corrected = apply_values(fit_model.fresh_spec(), params, [r.applied for r in staged.parameters])
    nthread = request.settings.nthread
    before = fit_model.rollout([fit_model.spec.compile()] * len(data), data, nthread)
    after = fit_model.rollout([corrected.compile()] * len(data), data, nthread)
    out = {
        "model": str(model_path), "robot": _robot_name(model_path) if builtin else None,
        "inputs": [r.source for r in recordings], "requested": names, "renamed_joints": fit_model.renamed,
        "parameters": [_parameter_entry(r, r.param.name in {p.name for p in _final_params(staged)})
                       for r in staged.parameters],
        "screening": _screening_entry(staged),
        "windows": [_window_entry(rec, w, wd, b, a) for (rec, w), wd, b, a in zip(windows, data, before, after)],
        "changes": [_change_entry(r) for r in staged.parameters if r.identifiable],
        "corrected_model": MODEL_FILE,
        "notes": notes, "fit_wall_s": staged.wall_s, "wall_s": time.perf_counter() - started,
    }
    out["residual"] = _overall(out["windows"])
    out["_spec"] = corrected
    out["_plots"] = list(zip(data, before, after))
    return out


def _robot_name(model_path: Path) -> str | None:
    return next((name for name, path in builtin_models().items() if path.resolve() == model_path.resolve()), None)


def _final_params(staged: StagedResult) -> list:
    return [r.param for r in staged.final.parameters] if staged.final else []


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _parameter_entry(r: ParameterResult, selected: bool) -> dict[str, Any]:
    p = r.param
    half = _finite(r.half_interval)
    return {"name": p.name, "kind": p.kind, "element": p.element, "unit": p.unit, "attribute": p.attribute,
            "before": p.nominal, "fitted": r.fitted, "half_interval": half,
            "interval95": [r.fitted - half, r.fitted + half] if half is not None else None,
            "identifiable": r.identifiable, "at_bound": r.at_bound, "fitted_in_final_stage": selected,
            "applied": r.applied, "bounds": [p.lower, p.upper]}


def _screening_entry(staged: StagedResult) -> dict[str, Any] | None:
    if staged.screening is None:
        return None
    return {"parameters": [_parameter_entry(r, r.param.name in staged.selected) for r in staged.screening.parameters],
            "selected": staged.selected, "wall_s": staged.screening.wall_s,
            "cost_before": staged.screening.cost_before, "cost_after": staged.screening.cost_after}


def _change_entry(r: ParameterResult) -> dict[str, Any]:
    return {"parameter": r.param.name, "attribute": r.param.attribute, "before": r.param.nominal, "after": r.applied,
            "unit": r.param.unit}


def _window_entry(rec: Recording, window: FitWindow, wd: WindowData, before: Rollout, after: Rollout) -> dict:
    rms_before, rms_after = joint_rms_rad(wd, before), joint_rms_rad(wd, after)
    return {"label": window.label, "source": window.source, "category": window.category,
            "start_s": (window.start_ns - rec.first_command_ns) / NS_PER_S,
            "end_s": (window.end_ns - rec.first_command_ns) / NS_PER_S,
            "joint_rms_before_rad": rms_before, "joint_rms_after_rad": rms_after,
            "joint_reduction": 1.0 - rms_after / rms_before if rms_before > 0 else 0.0,
            "force_rms_before_n": wrench_rms(wd, before), "force_rms_after_n": wrench_rms(wd, after)}


def _overall(windows: list[dict[str, Any]]) -> dict[str, float]:
    before = float(np.sqrt(np.mean([w["joint_rms_before_rad"] ** 2 for w in windows])))
    after = float(np.sqrt(np.mean([w["joint_rms_after_rad"] ** 2 for w in windows])))
    return {"joint_rms_before_rad": before, "joint_rms_after_rad": after,
            "joint_reduction": 1.0 - after / before if before > 0 else 0.0}


def write_outputs(result: dict[str, Any], out_dir: Path) -> None:
    """fit.json, the corrected MJCF and fit.html, all in place at once (a temporary directory renamed)."""
    from sim_real_bridge.fit.report import write_report  # noqa: PLC0415 - plotly only when writing

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        spec = result["_spec"]
        (staging / MODEL_FILE).write_text(spec.to_xml())
        public = {k: v for k, v in result.items() if not k.startswith("_")}
        (staging / "fit.json").write_text(json.dumps(public, indent=1, default=_json_default))
        write_report(public, result["_plots"], staging / "fit.html")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} to fit.json")


def run_fit(request: FitRequest) -> int:
    """Fit, write the outputs, print one summary line per parameter changed; returns 0."""
    check_names(request.params or [])
    recordings = read_recordings(request.inputs, request.side)
    result = fit_recordings(recordings, request)
    if request.out_dir is None:
        raise FitError("fit: --out is required")
    write_outputs(result, request.out_dir)
    for change in result["changes"]:
        if change["before"] != change["after"]:
            print(f"{change['attribute']}: {change['before']:.4g} -> {change['after']:.4g} {change['unit']}".rstrip())
    res = result["residual"]
    print(f"joint residual RMS {res['joint_rms_before_rad']:.3g} -> {res['joint_rms_after_rad']:.3g} rad "
          f"({100 * res['joint_reduction']:.0f}% less) in {len(result['windows'])} window(s); "
          f"wrote {request.out_dir}/fit.json, fit.html, {MODEL_FILE}")
    return 0
