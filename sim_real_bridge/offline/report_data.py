"""What a run report shows, as plain data: filled by replay or the demo, drawn by report.py.

Everything here is arrays, dicts and strings: no bag reading, no ROS, no clock, so the
per-bag job that fills a :class:`RunReportData` stays a pure function of its inputs.
Times are seconds from the first mirrored command, as in the summary JSON.

The one category palette of the project's plots lives here (:data:`CATEGORY_COLORS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim_real_bridge.evaluation.scoring import CATEGORIES
from sim_real_bridge.errors import ConfigError

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
CATEGORY_COLORS: dict[str, str] = {
    "dynamics": "#0072B2",
    "contact": "#E69F00",
    "sensor": "#009E73",
    "human": "#CC79A7",
    "unauthored": "#D55E00",
    "unexplained": "#999999",
}
FALLBACK_COLOR = "#555555"
DEFAULT_MAX_POINTS = 4000


def category_color(category: str) -> str:
    """Return the palette colour of a category (grey for one the palette does not know)."""
    return CATEGORY_COLORS.get(category, FALLBACK_COLOR)


def _as_1d(name: str, values: Any, n: int | None = None) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ConfigError(f"{name} must be 1-D, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ConfigError(f"{name} has {arr.shape[0]} samples, t_s has {n}")
    return arr


def _as_time(name: str, values: Any) -> np.ndarray:
    t = _as_1d(name, values)
    if not np.all(np.isfinite(t)):
        raise ConfigError(f"{name} must be finite")
    if t.size > 1 and np.any(np.diff(t) < 0):
        raise ConfigError(f"{name} must be non-decreasing")
    return t


def _optional_2d(name: str, values: Any, n: int, j: int) -> np.ndarray | None:
    if values is None:
        return None
    arr = np.asarray(values, dtype=float)
    if arr.shape != (n, j):
        raise ConfigError(f"{name} must have shape ({n}, {j}), got {arr.shape}")
    return arr


@dataclass
class JointSeries:
    """Per-joint residuals (real minus sim) over time.

    Attributes:
        t_s: (N,) sample times, non-decreasing.
        position_rad: (N, J) position residual.
        velocity_rad_s: (N, J) velocity residual, or None.
        effort_nm: (N, J) effort residual, or None.
    """

    t_s: np.ndarray
    position_rad: np.ndarray
    velocity_rad_s: np.ndarray | None = None
    effort_nm: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.t_s = _as_time("joints.t_s", self.t_s)
        pos = np.asarray(self.position_rad, dtype=float)
        if pos.ndim != 2 or pos.shape[0] != self.t_s.size:
            raise ConfigError(f"joints.position_rad must have shape ({self.t_s.size}, J), got {pos.shape}")
        self.position_rad = pos
        n, j = pos.shape
        self.velocity_rad_s = _optional_2d("joints.velocity_rad_s", self.velocity_rad_s, n, j)
        self.effort_nm = _optional_2d("joints.effort_nm", self.effort_nm, n, j)

    @property
    def n_joints(self) -> int:
        return int(self.position_rad.shape[1])


@dataclass
class ContactSeries:
    """Wrench residuals with the contact phase each side was in.

    Attributes:
        t_s: (N,) sample times.
        force_residual_n: (N,) norm of the force residual.
        torque_residual_nm: (N,) norm of the torque residual, or None.
        sim_phase: (N,) phase labels of the simulator (str, or bool for in contact).
        real_phase: (N,) phase labels of the real robot, same encoding.
    """

    t_s: np.ndarray
    force_residual_n: np.ndarray
    torque_residual_nm: np.ndarray | None = None
    sim_phase: Sequence[Any] | np.ndarray | None = None
    real_phase: Sequence[Any] | np.ndarray | None = None

    def __post_init__(self) -> None:
        self.t_s = _as_time("contact.t_s", self.t_s)
        n = self.t_s.size
        self.force_residual_n = _as_1d("contact.force_residual_n", self.force_residual_n, n)
        if self.torque_residual_nm is not None:
            self.torque_residual_nm = _as_1d("contact.torque_residual_nm", self.torque_residual_nm, n)
        for name in ("sim_phase", "real_phase"):
            raw = getattr(self, name)
            if raw is None:
                continue
            arr = np.asarray(raw)
            if arr.ndim != 1 or arr.shape[0] != n:
                raise ConfigError(f"contact.{name} must have shape ({n},), got {arr.shape}")
            setattr(self, name, arr)

    def phase_labels(self) -> np.ndarray:
        """Return (N,) labels combining both sides' phases, e.g. "sim contact / real free"."""
        def side(arr: np.ndarray | None, who: str) -> np.ndarray | None:
            if arr is None:
                return None
            if arr.dtype == bool:
                return np.where(arr, f"{who} contact", f"{who} free")
            return np.char.add(f"{who} ", arr.astype(str))

        sim = side(self.sim_phase, "sim")  # type: ignore[arg-type]
        real = side(self.real_phase, "real")  # type: ignore[arg-type]
        if sim is None and real is None:
            return np.full(self.t_s.size, "all samples")
        if sim is None:
            return real  # type: ignore[return-value]
        if real is None:
            return sim
        return np.char.add(np.char.add(sim, " / "), real)


@dataclass
class PoseSeries:
    """End-effector pose error over time.

    Attributes:
        t_s: (N,) sample times.
        position_error_m: (N,) distance between sim and real end-effector positions.
        orientation_error_rad: (N,) rotation angle between the two orientations.
    """

    t_s: np.ndarray
    position_error_m: np.ndarray
    orientation_error_rad: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.t_s = _as_time("pose.t_s", self.t_s)
        n = self.t_s.size
        self.position_error_m = _as_1d("pose.position_error_m", self.position_error_m, n)
        if self.orientation_error_rad is not None:
            self.orientation_error_rad = _as_1d("pose.orientation_error_rad", self.orientation_error_rad, n)


@dataclass
class TimingSeries:
    """Clock-offset and latency estimates over time, with their standard deviations.

    Attributes:
        t_s: (N,) estimate times.
        clock_offset_s: (N,) estimated real-minus-sim clock offset.
        latency_s: (N,) estimated real-robot latency.
        clock_offset_std_s: (N,) its standard deviation, or None.
        latency_std_s: (N,) its standard deviation, or None.
    """

    t_s: np.ndarray
    clock_offset_s: np.ndarray
    latency_s: np.ndarray
    clock_offset_std_s: np.ndarray | None = None
    latency_std_s: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.t_s = _as_time("timing.t_s", self.t_s)
        n = self.t_s.size
        self.clock_offset_s = _as_1d("timing.clock_offset_s", self.clock_offset_s, n)
        self.latency_s = _as_1d("timing.latency_s", self.latency_s, n)
        for name in ("clock_offset_std_s", "latency_std_s"):
            raw = getattr(self, name)
            if raw is not None:
                std = _as_1d(f"timing.{name}", raw, n)
                if np.any(std[np.isfinite(std)] < 0):
                    raise ConfigError(f"timing.{name} must be >= 0")
                setattr(self, name, std)


@dataclass
class CalibrationRow:
    """One joint's delay/gain/offset fit: what changing the simulator that way would buy.

    Attributes:
        name: the joint (or channel) fitted.
        delay_s: fitted extra delay of the real side.
        gain: fitted gain of real over sim.
        offset_rad: fitted constant offset.
        rms_before_rad: RMS residual as recorded.
        rms_after_rad: RMS residual with the fit applied to the simulator.
    """

    name: str
    delay_s: float
    gain: float
    offset_rad: float
    rms_before_rad: float
    rms_after_rad: float

    def __post_init__(self) -> None:
        for attr in ("delay_s", "gain", "offset_rad", "rms_before_rad", "rms_after_rad"):
            value = float(getattr(self, attr))
            if not math.isfinite(value):
                raise ConfigError(f"calibration row {self.name!r}: {attr} must be finite, got {value}")
            setattr(self, attr, value)
        if self.rms_before_rad < 0 or self.rms_after_rad < 0:
            raise ConfigError(f"calibration row {self.name!r}: RMS values must be >= 0")


def _check_windows(entries: Sequence[Mapping[str, Any]], what: str) -> list[dict[str, Any]]:
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{what}[{i}] must be a mapping, got {type(entry).__name__}")
        try:
            start = float(entry["start_s"])
            str(entry["category"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{what}[{i}] needs 'category' and a numeric 'start_s': {exc}") from exc
        end = entry.get("end_s")
        if not math.isfinite(start) or (end is not None and not float(end) >= start):
            raise ConfigError(f"{what}[{i}] has a bad window: start_s={start}, end_s={end}")
        out.append(dict(entry))
    return out


@dataclass
class RunReportData:
    """Everything report.html shows about one run (a bag or a demo session).

    Attributes:
        name: bag or run name (shown escaped; any text is fine).
        duration_s: run length.
        joint_names: the J joint names, in the column order of the joint series.
        scenario: scenario name, when known.
        joints, contact, pose, timing: the series, each optional.
        events: event dicts as in the summary JSON: category, kind, start_s, end_s
            (None = still open), severity, snapshot, evidence (dict).
        truth: the stand-in's labels (category, kind, start_s, end_s), or None.
        ledger: category -> share of the residual over the run (share_run), with
            "unexplained" for what no category took.
        calibration: one row per fitted joint.
        scores: the dict of core.scoring.score_events, or None.
        snapshots: snapshot paths, relative to the report's directory.
        warnings: things a reader must know (missing topics, dropped messages).
        realtime_factor: analysis speed over real time, when measured.
        load: how far behind the live monitor ran and what it dropped (summary.json
            ``load``, repeated by replay at the live ticks); ``load["degraded"]`` marks
            the scores as not representative of the analysis.
        sim_success, real_success, policy: episode labels for the roll-up, when known.
        report_href: relative link to this run's report, used by the roll-up.
        analyses: each analysis as ``{"analysis", "ran", "detail"}``: what ran, what was
            skipped and why (replay).
        segments: the stretches of the recording analysed (``{"start_s", "end_s"}``),
            split where the recording has gaps.
    """

    name: str
    duration_s: float
    joint_names: list[str]
    scenario: str | None = None
    joints: JointSeries | None = None
    contact: ContactSeries | None = None
    pose: PoseSeries | None = None
    timing: TimingSeries | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    truth: list[dict[str, Any]] | None = None
    ledger: dict[str, float] = field(default_factory=dict)
    calibration: list[CalibrationRow] = field(default_factory=list)
    scores: dict[str, Any] | None = None
    snapshots: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    realtime_factor: float | None = None
    load: dict[str, Any] | None = None
    sim_success: bool | float | None = None
    real_success: bool | float | None = None
    policy: str | None = None
    report_href: str | None = None
    analyses: list[dict[str, Any]] = field(default_factory=list)
    segments: list[dict[str, Any]] = field(default_factory=list)

    def degradation(self) -> str | None:
        """One line saying when and how the run was degraded, or None when it was not."""
        load = self.load or {}
        if not load.get("degraded"):
            return None
        parts = []
        if load.get("behind_share") or load.get("max_lag_s", 0.0) > 0.5:
            parts.append(f"the live monitor fell up to {load.get('max_lag_s', 0.0):.2f} s behind "
                         f"({load.get('behind_share', 0.0):.0%} of the run"
                         + "".join(f"; {e['start_s']:.1f} to {e['end_s']:.1f} s"
                                   for e in load.get("behind_episodes", [])[:5]) + ")")
        if load.get("dropped_grid_times"):
            parts.append(f"{load.get('dropped_s', 0.0):.2f} s dropped unanalysed in {len(load.get('gaps', []))} gap(s)"
                         + "".join(f"; {g['start_s']:.1f} to {g['end_s']:.1f} s" for g in load.get("gaps", [])[:5]))
        speeds = load.get("realtime_factor_by_side", {})
        if speeds:
            parts.append("robots' realtime factor " + ", ".join(f"{side} {f:.2f}" for side, f in speeds.items())
                         + (" (slower than real time)" if load.get("slow_sides") else ""))
        return "Degraded run: " + ", ".join(parts) + ". The scores are not representative of the analysis."

    def __post_init__(self) -> None:
        self.name = str(self.name)
        self.duration_s = float(self.duration_s)
        if not (math.isfinite(self.duration_s) and self.duration_s >= 0):
            raise ConfigError(f"duration_s must be finite and >= 0, got {self.duration_s}")
        self.joint_names = [str(n) for n in self.joint_names]
        if self.joints is not None and self.joints.n_joints != len(self.joint_names):
            raise ConfigError(
                f"joint series has {self.joints.n_joints} columns but {len(self.joint_names)} joint names"
            )
        self.events = _check_windows(self.events, "events")
        if self.truth is not None:
            self.truth = _check_windows(self.truth, "truth")
        ledger = {}
        for cat, share in self.ledger.items():
            value = float(share)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"ledger share of {cat!r} must be finite and >= 0, got {share}")
            ledger[str(cat)] = value
        self.ledger = ledger

    def events_by_category(self) -> dict[str, int]:
        """Return event counts per category, the five categories first, zeros included."""
        counts = {c: 0 for c in CATEGORIES}
        for ev in self.events:
            counts[str(ev["category"])] = counts.get(str(ev["category"]), 0) + 1
        return counts

    def position_rms_rad(self) -> float | None:
        """Return the RMS position residual over all joints and samples (NaN ignored)."""
        if self.joints is None:
            return None
        q = self.joints.position_rad[np.isfinite(self.joints.position_rad)]
        return float(np.sqrt(np.mean(q**2))) if q.size else None

    def force_rms_n(self) -> float | None:
        """Return the RMS force residual over the run (NaN ignored)."""
        if self.contact is None:
            return None
        f = self.contact.force_residual_n[np.isfinite(self.contact.force_residual_n)]
        return float(np.sqrt(np.mean(f**2))) if f.size else None

    def median_latency_s(self) -> float | None:
        """Return the median latency estimate, or None without timing data."""
        return _nanmedian(self.timing.latency_s) if self.timing is not None else None

    def median_clock_offset_s(self) -> float | None:
        """Return the median clock-offset estimate, or None without timing data."""
        return _nanmedian(self.timing.clock_offset_s) if self.timing is not None else None

    def rollup_row(self) -> dict[str, Any]:
        """Return this run as one roll-up row (the shape write_rollup_report accepts)."""
        overall = (self.scores or {}).get("overall", {})
        return {
            "name": self.name,
            "scenario": self.scenario,
            "duration_s": self.duration_s,
            "events_by_category": self.events_by_category(),
            "position_rms_rad": self.position_rms_rad(),
            "force_rms_n": self.force_rms_n(),
            "latency_s": self.median_latency_s(),
            "macro_f1": overall.get("macro_f1"),
            "sim_success": self.sim_success,
            "real_success": self.real_success,
            "policy": self.policy,
            "report_href": self.report_href,
            "warnings": list(self.warnings),
            "degraded": self.degradation(),
        }


def _nanmedian(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else None


def minmax_downsample(
    t_s: np.ndarray, y: np.ndarray, max_points: int = DEFAULT_MAX_POINTS
) -> tuple[np.ndarray, np.ndarray]:
    """Thin a trace to at most max_points samples, keeping each bucket's min and max.

    The samples are cut into max_points // 2 equal buckets; from each the minimum and
    the maximum are kept in time order, so spikes survive and a dense trace draws as
    its envelope. NaN is ignored within a bucket; an all-NaN bucket keeps a NaN (the
    gap stays visible).

    Args:
        t_s: (N,) times.
        y: (N,) values.
        max_points: the most samples returned, >= 2.

    Returns:
        (t_s, y) thinned, both (M,) with M <= max_points; unchanged when N <= max_points.
    """
    if max_points < 2:
        raise ConfigError(f"max_points must be >= 2, got {max_points}")
    t = np.asarray(t_s)
    v = np.asarray(y, dtype=float)
    if t.shape != v.shape or v.ndim != 1:
        raise ConfigError(f"t_s and y must be 1-D of one length, got {t.shape} and {v.shape}")
    n = v.size
    if n <= max_points:
        return t, v
    per_bucket = math.ceil(2 * n / max_points)
    n_buckets = math.ceil(n / per_bucket)
    padded = np.full(n_buckets * per_bucket, np.nan)
    padded[:n] = v
    rows = padded.reshape(n_buckets, per_bucket)
    finite = np.isfinite(rows)
    i_min = np.argmin(np.where(finite, rows, np.inf), axis=1)
    i_max = np.argmax(np.where(finite, rows, -np.inf), axis=1)
    pair = np.sort(np.stack([i_min, i_max], axis=1), axis=1)
    idx = (pair + (np.arange(n_buckets) * per_bucket)[:, None]).ravel()
    idx = np.minimum(idx, n - 1)
    # Drop the duplicate when min and max are the same sample.
    keep = np.r_[True, idx[1:] != idx[:-1]]
    idx = idx[keep]
    return t[idx], v[idx]
