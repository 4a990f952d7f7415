"""Fits of closed events' snapshots in a separate process, never blocking the caller.

The live monitor submits a snapshot when an event closes and polls for results from
its timer; each fit runs in a worker process (``concurrent.futures``), so the analysis
keeps its pace. Results are plain dicts shaped like ``msg/FitResult.msg``; failures
come back as a result with ``error`` set (one line), never as an exception.
"""

from __future__ import annotations

import math
import multiprocessing
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import Any, Sequence

from sim_real_bridge.errors import SimRealBridgeError

FIT_CATEGORIES = ("dynamics", "contact")


def empty_result(event_id: str = "", category: str = "", snapshot: str = "") -> dict[str, Any]:
    """A FitResult-shaped dict with no parameters and no error yet."""
    return {"event_id": event_id, "category": category, "snapshot": snapshot, "error": "",
            "names": [], "before": [], "fitted": [], "half_interval": [], "identifiable": [],
            "joint_rms_before_rad": math.nan, "joint_rms_after_rad": math.nan, "corrected_model": "", "wall_s": 0.0}


def fit_snapshot(snapshot: str, model: str, params: Sequence[str] | None = None, out_dir: str | None = None,
                 event_id: str = "", category: str = "") -> dict[str, Any]:
    """Fit one snapshot; return a FitResult-shaped dict (``error`` set when it could not)."""
    from sim_real_bridge.fit.command import FitRequest, fit_recordings, write_outputs  # noqa: PLC0415
    from sim_real_bridge.fit.recording import read_recordings  # noqa: PLC0415

    out = empty_result(event_id, category, snapshot)
    try:
        request = FitRequest(inputs=[Path(snapshot)], model=model, params=list(params) if params else None)
        result = fit_recordings(read_recordings(request.inputs, request.side), request)
        if out_dir:
            write_outputs(result, Path(out_dir))
            out["corrected_model"] = str(Path(out_dir).resolve() / result["corrected_model"])
    except SimRealBridgeError as error:
        out["error"] = str(error)
        return out
    for p in result["parameters"]:
        out["names"].append(p["name"])
        out["before"].append(float(p["before"]))
        out["fitted"].append(float(p["fitted"]))
        out["half_interval"].append(math.inf if p["half_interval"] is None else float(p["half_interval"]))
        out["identifiable"].append(bool(p["identifiable"]))
    out["joint_rms_before_rad"] = result["residual"]["joint_rms_before_rad"]
    out["joint_rms_after_rad"] = result["residual"]["joint_rms_after_rad"]
    out["wall_s"] = result["wall_s"]
    return out


class FitWorker:
    """A pool of fit processes: :meth:`submit` returns at once, :meth:`poll` collects.

    Args:
        model: MJCF file or built-in robot name fitted.
        out_root: each fit's outputs go to ``out_root/<event id>`` (None: no files).
        max_workers: concurrent fits (each is one process).
        max_pending: submissions beyond this are refused (counted in ``refused``).
    """

    def __init__(self, model: str, out_root: Path | str | None = None, max_workers: int = 1,
                 max_pending: int = 4) -> None:
        self.model = model
        self.out_root = Path(out_root) if out_root is not None else None
        self.max_pending = max_pending
        self.refused = 0
        # spawn: the caller may hold threads (rclpy executors) that fork would copy mid-state.
        self._pool = ProcessPoolExecutor(max_workers=max_workers, mp_context=multiprocessing.get_context("spawn"))
        self._pending: list[tuple[Future, dict[str, str]]] = []  # each with its event, for a crash's result

    def submit(self, snapshot: Path | str, event_id: str = "", category: str = "",
               params: Sequence[str] | None = None) -> bool:
        """Queue a fit of ``snapshot``; False (and counted) when too many are pending."""
        if len(self._pending) >= self.max_pending:
            self.refused += 1
            return False
        out_dir = str(self.out_root / _safe(event_id or Path(snapshot).stem)) if self.out_root else None
        future = self._pool.submit(fit_snapshot, str(snapshot), self.model, list(params) if params else None,
                                   out_dir, event_id, category)
        self._pending.append((future, {"event_id": event_id, "category": category, "snapshot": str(snapshot)}))
        return True

    @property
    def pending(self) -> int:
        """Fits submitted and not yet collected."""
        return len(self._pending)

    def poll(self) -> list[dict[str, Any]]:
        """Results of the fits finished since the last poll (never waits)."""
        done = [(f, what) for f, what in self._pending if f.done()]
        self._pending = [(f, what) for f, what in self._pending if not f.done()]
        results = []
        for future, what in done:
            try:
                results.append(future.result())
            except Exception as exc:  # noqa: BLE001 - a crashed worker process becomes an error result
                results.append({**empty_result(**what), "error": f"fit process failed: {exc}"})
        return results

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until a pending fit finishes (or ``timeout_s``); for scripts and tests, not the monitor."""
        if self._pending:
            wait_futures([f for f, _ in self._pending], timeout=timeout_s, return_when=FIRST_COMPLETED)

    def close(self, wait: bool = True) -> None:
        """Stop the pool (waiting for running fits when ``wait``)."""
        self._pool.shutdown(wait=wait, cancel_futures=not wait)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "fit"
