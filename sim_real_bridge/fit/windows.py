"""Fit windows: stretches of a recording a fit compares the model with, and their data.

Windows come from the monitor's events in the file (``/divergence/events``: a bag of
``demo --record`` or a failure snapshot), from explicit spans, or, when there are
neither, from the recording cut into pieces after its first command. Each event's
category chooses the default parameters (:data:`CATEGORY_PARAMS`); categories that are
no simulator parameter (sensor, human, unauthored) give no window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from sim_real_bridge.fit.errors import FitError, NoMotionError
from sim_real_bridge.fit.recording import Recording

NS_PER_S = 1_000_000_000
#: Parameter groups a fit uses by default for windows of each event category.
CATEGORY_PARAMS: dict[str, tuple[str, ...]] = {"dynamics": ("dynamics",), "contact": ("contact",)}
#: Default parameters of windows without an event.
UNCATEGORIZED_PARAMS: tuple[str, ...] = ("dynamics",)
#: A window whose joints (measured and commanded) move less than this holds no motion, rad.
MIN_MOTION_RAD = 2e-3
DEFAULT_WINDOW_S = 3.0
MIN_WINDOW_S = 0.5


@dataclass(frozen=True)
class FitWindow:
    """One window of one recording, log-clock ns; ``category`` of its event or None."""

    label: str
    source: str
    start_ns: int
    end_ns: int
    category: str | None = None
    event_id: str = ""

    @property
    def duration_s(self) -> float:
        """Length in seconds."""
        return (self.end_ns - self.start_ns) / NS_PER_S


@dataclass(frozen=True)
class WindowData:
    """What a fit compares in one window; times are seconds from the window start.

    Attributes:
        window: the window.
        joint_names: J recorded joints.
        joint_t_s: (n,) measured joint times; q_rad (n, J) measured positions.
        q0_rad, qd0_rad_s: (J,) measured state at the start.
        ctrl_t_s: (k,) physics-step grid from 0; ctrl_q_rad (k, J) commanded targets on it.
        history_q_rad: (h, J) commanded targets on the h steps before the start (oldest first).
        wrench_t_s: (m,) or None; wrench (m, 6) force_n then torque_nm, or None.
        object_t_s: (p,) or None; object_pos_m (p, 3) or None.
        object0: (pos (3,), quat wxyz (4,), linear velocity (3,)) at the start, or None.
    """

    window: FitWindow
    joint_names: tuple[str, ...]
    joint_t_s: np.ndarray
    q_rad: np.ndarray
    q0_rad: np.ndarray
    qd0_rad_s: np.ndarray
    ctrl_t_s: np.ndarray
    ctrl_q_rad: np.ndarray
    history_q_rad: np.ndarray
    wrench_t_s: np.ndarray | None = None
    wrench: np.ndarray | None = None
    object_t_s: np.ndarray | None = None
    object_pos_m: np.ndarray | None = None
    object0: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def _usable_span(rec: Recording) -> tuple[int, int]:
    return rec.first_command_ns, int(rec.stamp_ns[-1]) - 20_000_000


def event_windows(rec: Recording, max_window_s: float = DEFAULT_WINDOW_S) -> tuple[list[FitWindow], list[str]]:
    """Windows of the dynamics and contact events of ``rec``, and notes on events skipped."""
    lo, hi = _usable_span(rec)
    windows: list[FitWindow] = []
    skipped: list[str] = []
    for event in rec.events:
        if event.category not in CATEGORY_PARAMS:
            skipped.append(f"event {event.event_id} ({event.category}): no simulator parameter explains it")
            continue
        start = max(event.start_ns, lo)
        end = min(max(event.end_ns, start + int(MIN_WINDOW_S * NS_PER_S)), hi, start + int(max_window_s * NS_PER_S))
        if end - start < int(MIN_WINDOW_S * NS_PER_S):
            skipped.append(f"event {event.event_id} ({event.category}): less than {MIN_WINDOW_S} s of data")
            continue
        windows.append(FitWindow(f"{event.category}-{event.event_id}", rec.source, start, end, event.category,
                                 event.event_id))
    return windows, skipped


def span_windows(rec: Recording, spans_s: Sequence[tuple[float, float]]) -> list[FitWindow]:
    """Windows at ``spans_s`` (start, end) seconds from the first command.

    Raises:
        FitError: a span outside the recording or shorter than MIN_WINDOW_S.
    """
    lo, hi = _usable_span(rec)
    out = []
    for a_s, b_s in spans_s:
        start, end = lo + int(a_s * NS_PER_S), lo + int(b_s * NS_PER_S)
        if start < lo or end > hi or end - start < int(MIN_WINDOW_S * NS_PER_S):
            raise FitError(f"{rec.source}: window {a_s:g}:{b_s:g} s is not a span of at least {MIN_WINDOW_S} s "
                           f"within 0:{(hi - lo) / NS_PER_S:.2f} s after the first command")
        out.append(FitWindow(f"t{a_s:g}-{b_s:g}", rec.source, start, end))
    return out


def chunk_windows(rec: Recording, window_s: float = DEFAULT_WINDOW_S, limit: int = 2) -> list[FitWindow]:
    """Up to ``limit`` consecutive windows with motion, from the first command on."""
    lo, hi = _usable_span(rec)
    step = int(window_s * NS_PER_S)
    out = []
    start = lo
    while start + step <= hi and len(out) < limit:
        window = FitWindow(f"t{(start - lo) / NS_PER_S:g}-{(start - lo + step) / NS_PER_S:g}", rec.source,
                           start, start + step)
        if motion_rad(rec, window) >= MIN_MOTION_RAD:
            out.append(window)
        start += step
    return out


def motion_rad(rec: Recording, window: FitWindow) -> float:
    """Largest joint travel (max - min) in the window, measured or commanded, rad."""
    mask = (rec.stamp_ns >= window.start_ns) & (rec.stamp_ns <= window.end_ns)
    measured = float(np.max(np.ptp(rec.q_rad[mask], axis=0))) if np.count_nonzero(mask) > 1 else 0.0
    grid = np.linspace(window.start_ns, window.end_ns, 50).astype(np.int64)
    commanded = float(np.max(np.ptp(rec.commanded_q(grid), axis=0)))
    return max(measured, commanded)


def check_motion(rec: Recording, window: FitWindow) -> None:
    """Raise NoMotionError when nothing moves in ``window``."""
    travel = motion_rad(rec, window)
    if travel < MIN_MOTION_RAD:
        a = (window.start_ns - rec.first_command_ns) / NS_PER_S
        b = (window.end_ns - rec.first_command_ns) / NS_PER_S
        raise NoMotionError(f"{rec.source}: window {window.label} ({a:.2f}-{b:.2f} s after the first command) "
                            f"holds no motion (joints travel {travel:.2g} rad < {MIN_MOTION_RAD:g})")


def default_params(windows: Sequence[FitWindow]) -> list[str]:
    """Parameter groups for the windows' categories (union, in category order)."""
    names: list[str] = []
    for window in windows:
        names += CATEGORY_PARAMS.get(window.category or "", UNCATEGORIZED_PARAMS)
    return list(dict.fromkeys(names))


def window_data(rec: Recording, window: FitWindow, timestep_s: float, history_steps: int = 0) -> WindowData:
    """Measured streams of ``window`` and the commanded targets on the physics grid."""
    t0 = window.start_ns
    step_ns = int(round(timestep_s * NS_PER_S))
    steps = (window.end_ns - t0) // step_ns
    grid = t0 + step_ns * np.arange(-history_steps, steps + 1, dtype=np.int64)
    ctrl = rec.commanded_q(grid)
    mask = (rec.stamp_ns > t0) & (rec.stamp_ns <= t0 + steps * step_ns)
    q0, qd0 = rec.state_at(t0)
    extra: dict[str, object] = {}
    if rec.has_wrench:
        wmask = (rec.wrench_stamp_ns > t0) & (rec.wrench_stamp_ns <= t0 + steps * step_ns)
        if np.count_nonzero(wmask) > 1:
            extra["wrench_t_s"] = (rec.wrench_stamp_ns[wmask] - t0) / NS_PER_S
            extra["wrench"] = np.hstack([rec.force_n[wmask], rec.torque_nm[wmask]])
    if rec.has_object:
        omask = (rec.object_stamp_ns > t0) & (rec.object_stamp_ns <= t0 + steps * step_ns)
        if np.count_nonzero(omask) > 1:
            extra["object_t_s"] = (rec.object_stamp_ns[omask] - t0) / NS_PER_S
            extra["object_pos_m"] = rec.object_pos_m[omask]
        extra["object0"] = _object_start(rec, t0)
    return WindowData(window=window, joint_names=rec.joint_names, joint_t_s=(rec.stamp_ns[mask] - t0) / NS_PER_S,
                      q_rad=rec.q_rad[mask], q0_rad=q0, qd0_rad_s=qd0,
                      ctrl_t_s=np.arange(steps + 1) * timestep_s, ctrl_q_rad=ctrl[history_steps:],
                      history_q_rad=ctrl[:history_steps], **extra)


def _object_start(rec: Recording, t0: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    stamps = rec.object_stamp_ns
    i = int(np.clip(np.searchsorted(stamps, t0), 1, len(stamps) - 1))
    dt_s = (stamps[i] - stamps[i - 1]) / NS_PER_S
    velocity = (rec.object_pos_m[i] - rec.object_pos_m[i - 1]) / dt_s if dt_s > 0 else np.zeros(3)
    near = i if abs(stamps[i] - t0) < abs(stamps[i - 1] - t0) else i - 1
    return rec.object_pos_m[near].copy(), rec.object_quat_wxyz[near].copy(), velocity
