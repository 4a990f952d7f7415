"""The run summary JSON (DESIGN.md "Summary JSON"), built one way for demo and replay.

``sim-real-bridge demo`` merges the monitor's run summary with the stand-in's labels
seen live; ``sim-real-bridge replay`` merges the replayed engine's run summary with the
labels recorded on ``/reality/injections``. Both call :func:`build_summary`, and both
collect the labels with :class:`TruthCollector`, so the two files share one schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sim_real_bridge.core.scoring import score_events

#: Keys of the monitor/engine run summary copied into the summary JSON as they are.
COPIED_KEYS: tuple[tuple[str, Any], ...] = (
    ("timing", {}),
    ("residuals", {}),
    ("calibration", []),
)


class TruthCollector:
    """The stand-in's labels (InjectionArray messages), deduplicated across repeats."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str, float], dict[str, Any]] = {}
        self.elapsed_s = 0.0
        self.active: list[str] = []

    def add(self, elapsed_s: float, injections: Iterable[Any]) -> None:
        """Note one InjectionArray: its ``elapsed_s`` and injections (objects or dicts with
        category, kind, start_s, end_s, active)."""
        self.elapsed_s = max(self.elapsed_s, float(elapsed_s))
        self.active = []
        for inj in injections:
            get = inj.get if isinstance(inj, Mapping) else lambda name, inj=inj: getattr(inj, name)
            category, kind, start_s = str(get("category")), str(get("kind")), float(get("start_s"))
            self._seen[(category, kind, round(start_s, 6))] = {
                "category": category, "kind": kind, "start_s": start_s, "end_s": float(get("end_s")),
            }
            if get("active"):
                self.active.append(f"{category}/{kind}")

    def truth(self, elapsed_s: float) -> list[dict[str, Any]]:
        """Truth entries of every injection started by ``elapsed_s``, ends clipped to it."""
        truth = []
        for entry in sorted(self._seen.values(), key=lambda e: (e["start_s"], e["category"], e["kind"])):
            if entry["start_s"] <= elapsed_s:
                truth.append({**entry, "end_s": min(entry["end_s"], elapsed_s)})
        return truth


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
