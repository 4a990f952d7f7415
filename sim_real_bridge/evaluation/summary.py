"""The run summary JSON, built one way for demo and replay.

``sim-real-bridge demo`` merges the monitor's run summary with the stand-in's labels
seen live; ``sim-real-bridge replay`` merges the replayed engine's run summary with the
labels recorded on ``/reality/injections``. Both call :func:`build_summary`, and both
collect the labels with :class:`TruthCollector`, so the two files share one schema.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from sim_real_bridge.evaluation.scoring import score_events

#: A simulated robot running slower than this share of real time degrades a run.
REALTIME_FACTOR_MIN = 0.9

#: Keys of the monitor/engine run summary copied into the summary JSON as they are.
COPIED_KEYS: tuple[tuple[str, Any], ...] = (
    ("timing", {}),
    ("residuals", {}),
    ("calibration", []),
)


class TruthCollector:
    """The stand-in's labels (InjectionArray messages), deduplicated across repeats.

    A truth window starts when the injection first changed reality (``effect_start_s``:
    an obstacle at the arm's first touch, contact kinds at the first contact in their
    window); the scenario's own start is kept as ``injected_start_s`` when it differs.
    An injection that ended without ever changing reality is no gap: it is left out of
    the truth and listed by :meth:`without_effect`. Labels without ``effect_start_s``
    (older recordings) use the scenario's start.
    """

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str, float], dict[str, Any]] = {}
        self.elapsed_s = 0.0
        self.active: list[str] = []

    def add(self, elapsed_s: float, injections: Iterable[Any]) -> None:
        """Note one InjectionArray: its ``elapsed_s`` and injections (objects or dicts with
        category, kind, start_s, end_s, active and optionally effect_start_s)."""
        self.elapsed_s = max(self.elapsed_s, float(elapsed_s))
        self.active = []
        for inj in injections:
            get = inj.get if isinstance(inj, Mapping) else lambda name, default=None, inj=inj: getattr(inj, name, default)
            category, kind, start_s = str(get("category")), str(get("kind")), float(get("start_s"))
            key = (category, kind, round(start_s, 6))
            raw_effect = get("effect_start_s", None)
            effect = None if raw_effect is None or not math.isfinite(float(raw_effect)) else float(raw_effect)
            known = self._seen.get(key, {}).get("effect_start_s")
            self._seen[key] = {
                "category": category, "kind": kind, "start_s": start_s, "end_s": float(get("end_s")),
                "labelled_effect": raw_effect is not None,
                "effect_start_s": known if known is not None else effect,
            }
            if get("active"):
                self.active.append(f"{category}/{kind}")

    def _entries(self) -> list[dict[str, Any]]:
        return sorted(self._seen.values(), key=lambda e: (e["start_s"], e["category"], e["kind"]))

    def truth(self, elapsed_s: float) -> list[dict[str, Any]]:
        """Truth entries of every injection that changed reality by ``elapsed_s``, ends clipped to it."""
        truth = []
        for entry in self._entries():
            start_s = entry["start_s"]
            if entry["labelled_effect"]:
                if entry["effect_start_s"] is None:
                    continue
                start_s = max(start_s, entry["effect_start_s"])
            if start_s <= elapsed_s:
                row = {"category": entry["category"], "kind": entry["kind"], "start_s": start_s,
                       "end_s": max(start_s, min(entry["end_s"], elapsed_s))}
                if abs(start_s - entry["start_s"]) > 0.01:
                    row["injected_start_s"] = entry["start_s"]
                truth.append(row)
        return truth

    def without_effect(self, elapsed_s: float) -> list[dict[str, Any]]:
        """Injections started by ``elapsed_s`` that never changed reality (no gap to detect)."""
        return [{"category": e["category"], "kind": e["kind"], "start_s": e["start_s"], "end_s": e["end_s"]}
                for e in self._entries()
                if e["labelled_effect"] and e["effect_start_s"] is None and e["start_s"] <= elapsed_s]


def build_summary(
    monitor_summary: Mapping[str, Any],
    *,
    scenario: str,
    duration_s: float,
    truth: list[dict[str, Any]] | None,
    events: list[dict[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary JSON of one run.

    Args:
        monitor_summary: ``DivergenceEngine.run_summary()`` (or the monitor's file).
        scenario: scenario name (or the bag's name when unknown).
        duration_s: seconds from the first mirrored command to the end of the run.
        truth: the stand-in's labels, or None when the run has none (then neither
            ``truth`` nor ``scores`` is written).
        events: the events to write, when the caller rewrote them (snapshot paths);
            default the monitor summary's.
        extra: further keys (realtime factor, exit codes, bag, warnings...).

    Returns:
        {"scenario", "duration_s", "events", ["truth"], "timing", "residuals",
        "calibration", ["scores"], "rejected", **extra}.
    """
    events = list(monitor_summary.get("events", [])) if events is None else events
    summary: dict[str, Any] = {"scenario": scenario, "duration_s": round(float(duration_s), 3), "events": events}
    if truth is not None:
        summary["truth"] = truth
    for key, default in COPIED_KEYS:
        summary[key] = monitor_summary.get(key, default)
    if truth is not None:
        summary["scores"] = score_events(events, truth, duration_s=float(duration_s))
    summary["rejected"] = monitor_summary.get("rejected", monitor_summary.get("counts", {}).get("rejected", {}))
    summary.update(extra or {})
    return summary
