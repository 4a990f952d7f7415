"""DivergenceEngine: both robots' streams in, residual records and attributed gap events out.

The one analysis entry point, shared unchanged by the live monitor node and by offline
replay. It never reads a clock: every input carries ``stamp_ns`` (the message's stamp)
and ``recv_ns`` (when the monitor received it, on the monitor's clock), and ``tick``
takes the monitor's ``now_ns``.

Time base. Each side's stamps are mapped onto the monitor clock with a per-side offset
tracked as the lower envelope of ``recv_ns - stamp_ns`` over all the side's streams (a
leaky minimum, so it follows slow drift): queueing and backlog only ever add delay, so
however late one topic is delivered, the freshest stream sets the offset. A clock reset
is read from the stamps of each stream: a stream whose stamps jump back by more than
``clock_reset_s`` (or forward beyond what the receive clock advanced, into the
envelope's future) crossed it. The first stream to cross opens a new epoch (counted,
offset re-initialised); each other stream keeps the old offset until it crosses too, so
its backlogged samples stamped before the reset still map where they belong. Mapped
sample times therefore stay continuous across resets, so a reset makes no gap.

Late streams. A grid time waits for a stream that is late but still delivering (or
silent no longer than the delivery bursts it has shown, where the stamps continued
after the silence) up to ``max_backlog_s``; a stream silent for longer is a stall.

Analysis grid. Analysis runs at fixed times ``k / analysis_rate_hz`` on the monitor
time base (absolute multiples, so live and replay use the same grid). A grid time t is
analysed once every stream seen so far has a sample at or after t, or once
``now_ns - horizon_s`` has passed t and the late streams are stalled (see Late streams). Results
depend on the data, not on when ``tick`` is called, except when a stream stalls.

At each grid time the engine interpolates both sides (joints, wrench, poses), forms
residuals (real minus sim), updates the stream health trackers, the F/T bias tracker,
stall timers and, every ``fit_period_s``, a delay/gain/offset fit of the real joints on
the sim joints over the last ``fit_window_s``; then :func:`attribution.attribute` scores
the categories and the :class:`EventTracker` debounces them into events.

Replay: :func:`analyze_streams` feeds recorded messages in receive order and ticks at
the same period as the live node, so replay gives the live run's events.
"""

from __future__ import annotations

import math
import weakref
from bisect import bisect_left, bisect_right, insort
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

import numpy as np

from sim_real_bridge.core.attribution import (
    CATEGORIES,
    AttributionConfig,
    DelayFit,
    TickFeatures,
    attribute,
)
from sim_real_bridge.core.events import ACTION_CLOSE, ACTION_OPEN, EventConfig, EventRecord, EventTracker
from sim_real_bridge.core.features import (
    ALL_INACTIVE,
    DROPOUT_INACTIVE,
    FeatureConfig,
    HealthFlag,
    HealthMarks,
    HealthRows,
    HealthTicks,
    StreamHealth,
    add_planned,
    add_rows,
    add_ticks,
    plan_jitter,
    plan_marks,
    plan_rows,
    plan_tick_feeds,
)
from sim_real_bridge.core.ledger import CategoryShareRecord, ResidualLedger, residual_energy
from sim_real_bridge.core.rows import stack_rows
from sim_real_bridge.errors import ConfigError

SIDES: tuple[str, ...] = ("sim", "real")
POSE_KINDS: tuple[str, ...] = ("ee", "object")
PHASE_FREE = 0
PHASE_CONTACT = 1

__all__ = [
    "ColumnStream",
    "ContactRecord",
    "DivergenceEngine",
    "EngineConfig",
    "EventRecord",
    "JointDivergenceRecord",
    "PoseDivergenceRecord",
    "SummaryRecord",
    "TickOutput",
    "analyze_streams",
]


# --------------------------------------------------------------------------- config
@dataclass
class EngineConfig:
    """Parameters of the divergence engine (monitor parameters; nested blocks by prefix).

    Attributes:
        analysis_rate_hz: analysis grid rate; also the rate of joint records.
        pose_rate_hz: rate of pose records (<= analysis rate).
        contact_rate_hz: rate of contact records (<= analysis rate).
        summary_window_s: window of the ledger's "window" shares.
        horizon_s: longest wait for a slow stream before a grid time is analysed anyway.
        max_interp_gap_s: never interpolate across samples further apart than this.
        buffer_s: history kept per stream.
        offset_leak: rate (s per s) at which the clock-offset envelope may rise.
        clock_reset_s: stamp discontinuity of one stream that counts as a clock reset.
        fit_window_s: window of the delay/gain/offset fit.
        fit_period_s: how often the fit runs.
        fit_max_delay_s: largest delay the fit tries.
        fit_delay_step_s: delay grid step of the fit.
        fit_min_motion_rad: the fit needs this much sim motion (std over the window).
        smooth_tau_s: time constant of the residual smoothing used by attribution.
        contact_force_n: force norm above which a side is in contact.
        contact_release_n: force norm below which a side leaves contact (hysteresis).
        wrench_window_s: wrench is compared as means over this window (contact chatters).
        tool_weight_tau_s: time constant of the free-space (tool weight) force learned
            from the sim side, in the world frame; contact is the departure from it.
        stall_speed_rad_s: a real joint slower than this ...
        stall_sim_speed_rad_s: ... while its sim twin is faster than this is stalling.
        tip_velocity_window_s: window of the finite-difference tip velocity.
        object_velocity_window_s: window of the growth rate of the object pose error.
        ledger_q_scale_rad: joint residual scale of the ledger energy.
        ledger_force_scale_n: force residual scale of the ledger energy.
        compensate_latency: remove the estimated latency from the published residuals.
        max_backlog_s: analysis never lags ``now`` by more than this (skips ahead).
        stats_max_samples: analysis ticks kept for the max/p95 figures of run_summary
            (rms figures cover the whole run).
        features: stream health thresholds.
        attribution: attribution thresholds.
        events: event debouncing.
    """

    analysis_rate_hz: float = 50.0
    pose_rate_hz: float = 25.0
    contact_rate_hz: float = 50.0
    summary_window_s: float = 10.0
    horizon_s: float = 0.3
    max_interp_gap_s: float = 0.05
    buffer_s: float = 4.0
    offset_leak: float = 0.002
    clock_reset_s: float = 0.5
    fit_window_s: float = 1.0
    fit_period_s: float = 0.1
    fit_max_delay_s: float = 0.25
    fit_delay_step_s: float = 0.01
    fit_min_motion_rad: float = 0.005
    smooth_tau_s: float = 0.1
    contact_force_n: float = 2.0
    contact_release_n: float = 1.0
    wrench_window_s: float = 0.1
    tool_weight_tau_s: float = 2.0
    stall_speed_rad_s: float = 0.02
    stall_sim_speed_rad_s: float = 0.1
    tip_velocity_window_s: float = 0.1
    object_velocity_window_s: float = 0.3
    ledger_q_scale_rad: float = 0.01
    ledger_force_scale_n: float = 2.0
    compensate_latency: bool = False
    max_backlog_s: float = 3.0
    stats_max_samples: int = 180_000
    features: FeatureConfig = field(default_factory=FeatureConfig)
    attribution: AttributionConfig = field(default_factory=AttributionConfig)
    events: EventConfig = field(default_factory=EventConfig)

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid parameter."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (bool, FeatureConfig, AttributionConfig, EventConfig)):
                continue
            if not (np.isfinite(value) and value > 0):
                raise ConfigError(f"EngineConfig.{f.name} must be finite and > 0, got {value}")
        if self.pose_rate_hz > self.analysis_rate_hz or self.contact_rate_hz > self.analysis_rate_hz:
            raise ConfigError("EngineConfig.pose_rate_hz and contact_rate_hz must be <= analysis_rate_hz")
        if self.contact_release_n > self.contact_force_n:
            raise ConfigError("EngineConfig.contact_release_n must be <= contact_force_n")
        self.features.validate()
        self.attribution.validate()
        self.events.validate()

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> "EngineConfig":
        """Build from fully flattened names, as ROS parameters hold them (scalars only).

        Dict-valued fields come as one name per entry and are regrouped over their defaults:
        ``{"events.min_duration_by_category.human": 0.3}`` sets that entry and keeps the
        others. Unknown names raise ConfigError (through :meth:`from_dict`).
        """
        defaults = cls()
        grouped: dict[str, Any] = {}
        for name, value in values.items():
            block, _, rest = name.partition(".")
            head, _, key = rest.partition(".")
            sub = getattr(defaults, block, None)
            if key and is_dataclass(sub) and isinstance(getattr(sub, head, None), dict):
                grouped.setdefault(f"{block}.{head}", dict(getattr(sub, head)))[key] = value
            else:
                grouped[name] = value
        return cls.from_dict(grouped)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "EngineConfig":
        """Build from flat or nested parameters: ``{"horizon_s": .., "attribution": {..}}`` or
        ``{"attribution.human_force_n": ..}``; unknown keys raise ConfigError."""
        nested: dict[str, dict[str, Any]] = {"features": {}, "attribution": {}, "events": {}}
        top: dict[str, Any] = {}
        names = {f.name for f in fields(cls)}
        for key, value in values.items():
            if "." in key:
                block, sub = key.split(".", 1)
                if block not in nested:
                    raise ConfigError(f"unknown engine parameter block {block!r} in {key!r}")
                nested[block][sub] = value
            elif key in nested:
                if not isinstance(value, Mapping):
                    raise ConfigError(f"engine parameter {key!r} must be a mapping")
                nested[key].update(value)
            elif key in names:
                top[key] = value
            else:
                raise ConfigError(f"unknown engine parameter {key!r}")
        sub_cls = {"features": FeatureConfig, "attribution": AttributionConfig, "events": EventConfig}
        for block, params in nested.items():
            allowed = {f.name for f in fields(sub_cls[block])}
            unknown = sorted(set(params) - allowed)
            if unknown:
                raise ConfigError(f"unknown {block} parameter(s): {', '.join(unknown)}")
            top[block] = sub_cls[block](**params)
        out = cls(**top)
        out.validate()
        return out


# --------------------------------------------------------------------------- records
@dataclass
class JointDivergenceRecord:
    """Per-joint residuals (real minus sim) at one analysis time."""

    stamp_ns: int
    names: tuple[str, ...]
    position_residual_rad: np.ndarray
    velocity_residual_rad_s: np.ndarray
    effort_residual: np.ndarray
    clock_offset_s: float
    clock_offset_std_s: float
    latency_s: float
    latency_std_s: float
    latency_compensated: bool


@dataclass
class PoseDivergenceRecord:
    """End-effector (and object) pose divergence at one analysis time; quaternions wxyz."""

    stamp_ns: int
    sim_ee_position_m: np.ndarray
    sim_ee_orientation_wxyz: np.ndarray
    real_ee_position_m: np.ndarray
    real_ee_orientation_wxyz: np.ndarray
    ee_position_error_m: np.ndarray
    ee_position_error_norm_m: float
    ee_orientation_error_rad: float
    has_object: bool = False
    sim_object_position_m: np.ndarray = field(default_factory=lambda: np.full(3, np.nan))
    sim_object_orientation_wxyz: np.ndarray = field(default_factory=lambda: np.array([1.0, 0, 0, 0]))
    real_object_position_m: np.ndarray = field(default_factory=lambda: np.full(3, np.nan))
    real_object_orientation_wxyz: np.ndarray = field(default_factory=lambda: np.array([1.0, 0, 0, 0]))
    object_position_error_norm_m: float = float("nan")
    object_orientation_error_rad: float = float("nan")


@dataclass
class ContactRecord:
    """Wrist wrench of both sides and their residual (real minus sim) at one analysis time."""

    stamp_ns: int
    sim_force_n: np.ndarray
    sim_torque_nm: np.ndarray
    real_force_n: np.ndarray
    real_torque_nm: np.ndarray
    residual_force_n: np.ndarray
    residual_torque_nm: np.ndarray
    force_residual_norm_n: float
    torque_residual_norm_nm: float
    sim_contact_phase: int
    real_contact_phase: int


@dataclass
class SummaryRecord:
    """Ledger and health of the engine (DivergenceSummary)."""

    stamp_ns: int
    elapsed_s: float
    window_s: float
    ledger: list[CategoryShareRecord]
    unexplained_share_run: float
    unexplained_share_window: float
    joint_position_rms_rad: float
    ee_position_rms_m: float
    force_residual_rms_n: float
    event_count: int
    open_event_count: int
    rejected_count: int
    rejected_by_reason: dict[str, int]
    clock_offset_s: float
    latency_s: float
    clock_resets: int


@dataclass
class TickOutput:
    """Everything produced since the previous tick."""

    joints: list[JointDivergenceRecord] = field(default_factory=list)
    poses: list[PoseDivergenceRecord] = field(default_factory=list)
    contacts: list[ContactRecord] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)


@dataclass
class ColumnStream:
    """One input stream as whole columns, for :meth:`DivergenceEngine.plan_columns`.

    Attributes:
        side: "sim" or "real".
        stream: "joint_states", "wrench", "ee_pose", "object_pose" or "command".
        recv_ns: (n,) receive times of the accepted rows, non-decreasing.
        seq: (n,) position of each row in the overall feed order (ties of recv_ns).
        stamp_ns: (n,) stamps (commands: unused).
        values: (n, w) rows as the matching ``on_*`` method takes them: joint_states
            [q, qd, effort] in ``names`` order (NaN where absent), wrench [force, torque],
            poses [position, orientation wxyz]; commands: None.
        names: joint names of a joint_states stream.
        commands: per row (start_ns, joint names, points) of a command stream.
        refused_recv_ns: receive times of rows the intake refused, with their reasons.
        refused_reasons: one reason per refused row.
    """

    side: str
    stream: str
    recv_ns: np.ndarray
    seq: np.ndarray
    stamp_ns: np.ndarray
    values: np.ndarray | None = None
    names: tuple[str, ...] = ()
    commands: Sequence[tuple[int, Sequence[str], Sequence[Any]]] = ()
    refused_recv_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    refused_reasons: Sequence[str] = ()


@dataclass
class _PlannedStream:
    column: ColumnStream
    recv: np.ndarray
    series: "_Series | None" = None
    health: StreamHealth | None = None
    marks: HealthMarks | None = None
    rows: HealthRows | None = None
    health_width: int = 0
    health_values: np.ndarray | None = None  # the series' values the health tracker sees
    clock: "_ClockPlan | None" = None
    side_rows: np.ndarray | None = None  # this stream's rows' positions in the side's feed order
    lists: tuple[Sequence[int], Sequence[int], Sequence[int]] = ((), (), ())  # for add_planned without rows
    refused_list: list[int] = field(default_factory=list)
    fed: int = 0
    refused_fed: int = 0
    # Per tick of plan_ticks (by its index): the rows fed by then, the newest receive time
    # fed, and the tracker's feeds (with its state after them).
    tick_cuts: list[int] | None = None
    tick_recv: list[int | None] | None = None
    health_ticks: HealthTicks | None = None


@dataclass
class _TickPlan:
    """The tick times of :meth:`DivergenceEngine.plan_ticks` and what feeding each takes.

    Planned streams keep, per tick index, the rows fed by then (``tick_cuts``) and the
    state after them. While the ticks are fed in order and nothing else is fed, every
    stream is fed exactly through tick ``fed``: the next tick only moves the rows
    visible and sets the states it keeps (``_PlannedStream.fed`` is brought up to date
    before any other feed).
    """

    times: list[int]
    reveal: list[tuple["_Series", list[int]]]  # the series of the rest, with their rows visible at each tick
    recv: list[tuple["_Series", list[int | None]]]  # those with a tracker, with their newest receive time
    health: list[HealthTicks]  # their trackers' feeds
    clocks: list[tuple["_ClockMap", "_ClockPlan"]]
    other: dict[int, list["_PlannedStream"]]  # tick -> the streams it feeds as any feed: commands, refusals
    fed: int = -1  # every stream is fed exactly through this tick (-1: not so)
    # Per tick: the newest time every joint and wrench stream seen has reached (None: no
    # stream seen), for the joint series of ``joints`` (see DivergenceEngine.tick).
    ready_ns: list[int | None] | None = None
    joints: dict[str, "_Series"] | None = None


# --------------------------------------------------------------------------- helpers
@dataclass
class _GridCache:
    """What ``_Series.sample`` and ``window_mean`` give at every grid time from the whole
    planned stream, with the rows that must be visible for the answer to be the same.

    A query at grid time k is served when rows ``need[k] - 1`` and ``first[k]`` are
    visible (``first[k] >= start`` and ``need[k] <= n``): then the visible rows
    bracket it exactly as the whole stream does.
    """

    t0_ns: int
    step_ns: int
    max_gap_ns: int
    need: np.ndarray
    first: np.ndarray
    values: np.ndarray
    window_ns: int | None = None
    w_need: np.ndarray | None = None
    w_first: np.ndarray | None = None
    w_values: np.ndarray | None = None


#: Largest grid a planned series caches (rows); longer recordings sample live.
MAX_GRID_ROWS = 4_000_000


class _Series:
    """Time-sorted samples of one stream (monitor-time ns, float rows), bounded by age."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._grid: _GridCache | None = None
        self.loaded = False
        self.t = np.zeros(0, dtype=np.int64)
        self.v = np.zeros((0, width))
        self._buf_t = np.zeros(256, dtype=np.int64)
        self._buf_v = np.zeros((256, width))
        self._n = 0
        self._start = 0
        self.last_recv_ns: int | None = None

    def __len__(self) -> int:
        return self._n - self._start

    def add(self, t_ns: int, row: np.ndarray) -> None:
        if self._n == len(self._buf_t):
            live = self._n - self._start
            cap = max(256, 2 * live)
            new_t = np.zeros(cap, dtype=np.int64)
            new_v = np.zeros((cap, self.width))
            new_t[:live] = self._buf_t[self._start:self._n]
            new_v[:live] = self._buf_v[self._start:self._n]
            self._buf_t, self._buf_v, self._n, self._start = new_t, new_v, live, 0
        pos = self._n
        if self._n > self._start and t_ns < self._buf_t[self._n - 1]:
            # Rare out-of-order arrival: insert at its sorted place.
            pos = self._start + int(np.searchsorted(self._buf_t[self._start:self._n], t_ns, side="right"))
            self._buf_t[pos + 1:self._n + 1] = self._buf_t[pos:self._n].copy()
            self._buf_v[pos + 1:self._n + 1] = self._buf_v[pos:self._n].copy()
        self._buf_t[pos] = t_ns
        self._buf_v[pos] = row
        self._n += 1

    def load(self, t_ns: np.ndarray, values: np.ndarray) -> None:
        """Hold a whole planned stream; rows become visible with :meth:`reveal`."""
        self._buf_t = np.ascontiguousarray(t_ns, dtype=np.int64)
        self._buf_v = np.ascontiguousarray(values, dtype=float)
        self._n = self._start = 0
        self.loaded = True

    def plan_grid(self, step_ns: int, max_gap_ns: int, window_ns: int | None = None) -> None:
        """Precompute ``sample`` (and ``window_mean`` over ``window_ns``) at every multiple
        of step_ns over the loaded stream, with the same arithmetic as the live path."""
        times, vals = self._buf_t, self._buf_v
        size = times.size
        if size == 0 or step_ns <= 0:
            return
        t0 = (int(times[0]) // step_ns) * step_ns
        count = (int(times[-1]) - t0) // step_ns + 2
        if count > MAX_GRID_ROWS:
            return
        q = t0 + np.arange(count, dtype=np.int64) * step_ns
        idx = np.searchsorted(times, q, side="right")
        lo = np.clip(idx - 1, 0, size - 1)
        t_lo = times[lo]
        after = idx > 0
        inside = after & (idx < size)
        exact = after & (t_lo == q)
        span = (times[np.minimum(idx, size - 1)] - t_lo).astype(float)
        out = np.full((count, self.width), np.nan)
        # Interpolated only where bracketed within the gap (the rest stays NaN), exact rows copied.
        rows = np.flatnonzero(inside & ~exact & (span <= max_gap_ns))
        if rows.size:
            s, lo_r = span[rows], lo[rows]
            w = np.where(s > 0, (q[rows] - t_lo[rows]) / np.where(s > 0, s, 1.0), 0.0)
            interp = vals[lo_r]
            interp *= (1 - w)[:, None]
            upper = vals[lo_r + 1]
            upper *= w[:, None]
            interp += upper
            out[rows] = interp
        rows = np.flatnonzero(exact)
        out[rows] = vals[lo[rows]]
        big = np.iinfo(np.int64).max
        need = np.where(exact, idx, np.where(inside, idx + 1, big))
        cache = _GridCache(t0, step_ns, max_gap_ns, need, idx - 1, out)
        if window_ns is not None:
            first = np.searchsorted(times, q - window_ns, side="right")
            cache.window_ns = int(window_ns)
            cache.w_need, cache.w_first = idx, first
            cache.w_values = self._window_means(first, idx)
        self._grid = cache

    def _window_means(self, first: np.ndarray, end: np.ndarray) -> np.ndarray:
        """The live mean of rows first[k]..end[k] - 1 of the loaded stream for each k (NaN
        rows where empty): its own reduction, from 0.0 with the rows added in order, then
        divided (reduceat or cumsums round differently), all windows at once."""
        vals = self._buf_v
        size, width = vals.shape
        means = np.full((first.size, width), np.nan)
        rows = np.flatnonzero(end > first)
        if not rows.size:
            return means
        # Longest windows first: the k-th rows of all windows longer than k are a prefix.
        rows = rows[np.argsort(first[rows] - end[rows], kind="stable")]
        start, lengths = first[rows], end[rows] - first[rows]
        longest = int(lengths[0])
        longer = np.searchsorted(-lengths, -np.arange(longest), side="left")  # windows longer than k
        # Window k-th rows gathered at once, column-major and k-major (each step adds a
        # contiguous block); zeros pad windows running past the stream's end (never added).
        padded = np.zeros((width, size + longest))
        padded[:, :size] = vals.T
        windows = np.lib.stride_tricks.sliding_window_view(padded, longest, axis=1)
        steps = np.ascontiguousarray(windows.transpose(2, 0, 1)[:, :, start])  # (k, column, window)
        sums = np.zeros((width, rows.size))
        for k, n in enumerate(longer.tolist()):
            if n == rows.size:
                sums += steps[k]
            else:
                sums[:, :n] += steps[k, :, :n]
        means[rows] = (sums / lengths).T
        return means

    def _grid_row(self, t_ns: int, max_gap_ns: int) -> np.ndarray | None:
        g = self._grid
        if g is None or max_gap_ns != g.max_gap_ns:
            return None
        k, r = divmod(t_ns - g.t0_ns, g.step_ns)
        if r or k < 0 or k >= g.need.size or g.need[k] > self._n or g.first[k] < self._start:
            return None
        return g.values[k].copy()

    def reveal(self, n: int) -> None:
        """Make the first n planned rows visible (as if added one by one)."""
        self._n = n

    def trim(self, before_ns: int) -> None:
        k = self._start + int(np.searchsorted(self._buf_t[self._start:self._n], before_ns, side="left"))
        self._start = min(k, max(self._start, self._n - 2))

    @property
    def times(self) -> np.ndarray:
        return self._buf_t[self._start:self._n]

    @property
    def values(self) -> np.ndarray:
        return self._buf_v[self._start:self._n]

    @property
    def last_ns(self) -> int | None:
        if self._n <= self._start:
            return None
        return self._buf_t.item(self._n - 1)  # (item: a Python int without a numpy scalar)

    def window_mean(self, start_ns: int, end_ns: int) -> np.ndarray:
        """Mean of the samples with start_ns < t <= end_ns; NaN row when there are none."""
        g = self._grid
        if g is not None and g.window_ns == end_ns - start_ns and g.w_values is not None:
            k, r = divmod(end_ns - g.t0_ns, g.step_ns)
            if not r and 0 <= k < g.need.size and g.w_need[k] <= self._n and g.w_first[k] >= self._start:
                return g.w_values[k].copy()
        times = self.times
        lo = int(np.searchsorted(times, start_ns, side="right"))
        hi = int(np.searchsorted(times, end_ns, side="right"))
        if hi <= lo:
            return np.full(self.width, np.nan)
        return self.values[lo:hi].mean(axis=0)

    def sample(self, t_ns: np.ndarray | int, max_gap_ns: int, cols: int | None = None) -> np.ndarray:
        """Linear interpolation at times t (scalar or (m,)); NaN rows where unbracketed or gapped.

        A time up to max_gap_ns past the newest sample holds the newest value. ``cols``
        limits an array query to the first columns.
        """
        scalar = np.ndim(t_ns) == 0
        if scalar:
            return self._sample_one(int(t_ns), max_gap_ns)
        tq = np.atleast_1d(np.asarray(t_ns, dtype=np.int64))
        width = self.width if cols is None else min(cols, self.width)
        g = self._grid
        if g is not None and max_gap_ns == g.max_gap_ns and tq.size:
            k, r = np.divmod(tq - g.t0_ns, g.step_ns)
            if not r.any() and k.min() >= 0 and k.max() < g.need.size:
                if g.need[k].max() <= self._n and g.first[k].min() >= self._start:
                    return g.values[k, :width]
        out = np.full((tq.size, width), np.nan)
        times = self.times
        if times.size == 0:
            return out[0] if scalar else out
        vals = self.values if cols is None else self.values[:, :width]
        idx = np.searchsorted(times, tq, side="right")
        hi = np.clip(idx, 0, times.size - 1)
        lo = np.clip(idx - 1, 0, times.size - 1)
        t_lo = times[lo]
        t_hi = times[hi]
        span = (t_hi - t_lo).astype(float)
        inside = (idx > 0) & (idx < times.size) & (span <= max_gap_ns)
        w = np.where(span > 0, (tq - t_lo) / np.where(span > 0, span, 1.0), 0.0)
        interp = vals[lo] * (1 - w)[:, None] + vals[hi] * w[:, None]
        out[inside] = interp[inside]
        hold = (idx >= times.size) & (tq - times[-1] <= max_gap_ns)
        out[hold] = vals[-1]
        exact = (idx > 0) & (times[lo] == tq)
        out[exact] = vals[lo][exact]
        return out[0] if scalar else out


    def _sample_one(self, t_ns: int, max_gap_ns: int) -> np.ndarray:
        """``sample`` at one time (same arithmetic, without the array machinery)."""
        cached = self._grid_row(t_ns, max_gap_ns) if self._grid is not None else None
        if cached is not None:
            return cached
        start, n = self._start, self._n
        size = n - start
        if size == 0:
            return np.full(self.width, np.nan)
        times = self._buf_t
        idx = int(np.searchsorted(times[start:n], t_ns, side="right"))
        lo = min(max(idx - 1, 0), size - 1)
        if idx > 0 and int(times[start + lo]) == t_ns:
            return self._buf_v[start + lo].copy()
        if idx >= size:
            if t_ns - int(times[n - 1]) <= max_gap_ns:
                return self._buf_v[n - 1].copy()
            return np.full(self.width, np.nan)
        if idx == 0:
            return np.full(self.width, np.nan)
        t_lo = int(times[start + lo])
        span = float(int(times[start + idx]) - t_lo)
        if span > max_gap_ns:
            return np.full(self.width, np.nan)
        w = (t_ns - t_lo) / span if span > 0 else 0.0
        return self._buf_v[start + lo] * (1 - w) + self._buf_v[start + idx] * w


def _std(values: Any) -> float:
    """``float(np.std(values))`` with the same float operations (mean, deviations, squares,
    their pairwise sums), without the dispatch that costs more than the sums on short arrays."""
    x = np.asarray(values, dtype=float)
    dev = x - np.add.reduce(x) / x.size
    np.multiply(dev, dev, out=dev)
    return float(np.sqrt(np.add.reduce(dev) / x.size))


class _ClockMap:
    """Maps one side's stamps onto the monitor clock, per stream, across clock resets.

    The offset is the lower envelope of ``recv - stamp`` over every stream of the side
    (a leaky minimum): queueing and backlog only ever add delay, so the envelope is the
    transport floor however late one topic is delivered. Resets are read from the stamps
    of each stream, never from the delay: a stream whose stamp goes back by more than
    ``reset_ns``, or lands more than ``reset_ns`` in the future of the envelope (after the
    stream had stamps before), crossed a clock discontinuity. The first stream to cross
    opens a new epoch (counted, offset re-initialised); the other streams keep the old
    offset until they cross too, so backlogged samples stamped before the reset still map
    where they belong.
    """

    def __init__(self, leak: float, reset_ns: int) -> None:
        self.leak = leak
        self.reset_ns = reset_ns
        self.resets = 0
        self._offsets: dict[int, int] = {}  # epoch -> offset (ns)
        self._last_recv: dict[int, int] = {}  # epoch -> newest recv of the epoch
        self._epoch: dict[str, int] = {}  # stream -> epoch
        self._last_stamp: dict[str, tuple[int, int]] = {}  # stream -> (stamp, recv)
        self._delays: deque = deque(maxlen=500)
        self._stream_delays: dict[str, deque] = {}
        self._count = 0
        self._spread_at = 0
        self._spread_cache: float | None = None
        self._plan: _ClockPlan | None = None  # planned samples fed (feed_planned), synced lazily

    def delivery_delays_s(self) -> dict[str, dict[str, float]]:
        """Per stream, p50/p99/max of the recent delivery delay beyond the transport floor."""
        self._sync()
        out = {}
        for stream, delays in sorted(self._stream_delays.items()):
            a = np.asarray(delays, dtype=float) * 1e-9
            p50, p99 = np.percentile(a, [50, 99])
            out[stream] = {"p50": float(p50), "p99": float(p99), "max": float(a.max())}
        return out

    @property
    def offset_ns(self) -> int | None:
        """Offset of the newest epoch, or None before the first sample."""
        return self._offsets[max(self._offsets)] if self._offsets else None

    def map(self, stamp_ns: int, recv_ns: int, stream: str = "") -> tuple[int, bool]:
        """Return (monitor time of the stamp, whether this stream crossed a clock reset here)."""
        self._sync()
        self._plan = None
        d = recv_ns - stamp_ns
        reset = False
        if not self._offsets:
            self._offsets[0] = d
            self._last_recv[0] = recv_ns
        epoch = self._epoch.get(stream)
        if epoch is None:
            epoch = max(self._offsets)
        else:
            last, last_recv = self._last_stamp[stream]
            offset = self._offsets.get(epoch)
            if offset is None:  # epoch forgotten (stream silent across several resets)
                epoch = max(self._offsets)
                offset = self._offsets[epoch]
            backwards = stamp_ns < last - self.reset_ns
            # Forward: the stamp outran the receive clock and landed in the envelope's future.
            forward = (stamp_ns - last) - (recv_ns - last_recv) > self.reset_ns and d < offset - self.reset_ns
            if backwards or forward:
                reset = True
                epoch += 1
                if epoch not in self._offsets:
                    epoch = max(self._offsets) + 1
                    self._offsets[epoch] = d
                    self._last_recv[epoch] = recv_ns
                    self.resets += 1
                    for old in sorted(self._offsets)[:-4]:
                        del self._offsets[old]
                        del self._last_recv[old]
        self._epoch[stream] = epoch
        self._last_stamp[stream] = (stamp_ns, recv_ns)
        offset = self._offsets[epoch]
        dt = max(0, recv_ns - self._last_recv[epoch])
        offset = min(offset + int(self.leak * dt), d)
        self._offsets[epoch] = offset
        self._last_recv[epoch] = max(self._last_recv[epoch], recv_ns)
        self._delays.append(d - offset)
        self._count += 1
        per_stream = self._stream_delays.get(stream)
        if per_stream is None:
            per_stream = self._stream_delays[stream] = deque(maxlen=2000)
        per_stream.append(d - offset)
        return stamp_ns + offset, reset

    def plan(self, stamp_ns: np.ndarray, recv_ns: np.ndarray, stream_ids: np.ndarray,
             stream_names: Sequence[str]) -> "_ClockPlan | None":
        """The offsets ``map`` would give a fresh map fed these samples in this order, on
        whole columns; None when a clock reset (or receive times out of order) would need
        the per-sample path.

        Without resets the leaky envelope is offset_k = min_j<=k (d_j + sum_{j<i<=k}
        floor(leak (recv_i - recv_i-1))), a cumulative minimum: integer-exact.
        """
        stamp = np.asarray(stamp_ns, dtype=np.int64)
        recv = np.asarray(recv_ns, dtype=np.int64)
        if self._offsets or stamp.size == 0 or np.any(np.diff(recv) < 0):
            return None
        d = recv - stamp
        steps = np.zeros(recv.size, dtype=np.int64)
        steps[1:] = (self.leak * np.diff(recv).astype(np.float64)).astype(np.int64)
        climb = np.cumsum(steps)
        offsets = climb + np.minimum.accumulate(d - climb)
        stream_ids = np.asarray(stream_ids, dtype=np.int64)
        rows = [np.flatnonzero(stream_ids == k) for k in range(len(stream_names))]
        for idx in rows:
            if idx.size < 2:
                continue
            # map's reset tests between a stream's consecutive samples: its stamp went back, or
            # outran the receive clock (rare: only those samples are checked against the envelope).
            stamp_step = np.diff(stamp[idx])
            if np.any(stamp_step < -self.reset_ns):
                return None
            cur = idx[1:][stamp_step - np.diff(recv[idx]) > self.reset_ns]
            if cur.size and np.any(d[cur] < offsets[cur - 1] - self.reset_ns):
                return None
        return _ClockPlan(stamp, recv, offsets, d - offsets, stream_ids, list(stream_names), rows)

    def feed_planned(self, plan: "_ClockPlan", hi: int) -> None:
        """Take the planned samples up to row hi (exclusive): the state ``map`` leaves.

        The offset is set now; the delay histories and per-stream stamps, which only
        summaries and ``map`` read, are brought up to date when read (:meth:`_sync`).
        """
        if hi <= plan.fed:
            return
        self._offsets[0] = plan.offsets.item(hi - 1)
        self._last_recv[0] = plan.recv.item(hi - 1)
        self._count += hi - plan.fed
        plan.fed = hi
        self._plan = plan

    def feed_tick(self, plan: "_ClockPlan", k: int) -> None:
        """``feed_planned`` of the rows fed by tick k of ``plan.plan_ticks``, from the state kept for it."""
        hi = plan.tick_fed[k]  # type: ignore[index]
        if hi <= plan.fed:
            return
        self._offsets[0] = plan.tick_offsets[k]  # type: ignore[index]
        self._last_recv[0] = plan.tick_recv[k]  # type: ignore[index]
        self._count += hi - plan.fed
        plan.fed = hi
        self._plan = plan

    def _sync(self) -> None:
        """Bring the delay histories and per-stream stamps up to the planned rows fed."""
        plan = self._plan
        if plan is None or plan.synced >= plan.fed:
            return
        lo, hi = plan.synced, plan.fed
        self._delays.extend(plan.delays[max(lo, hi - 500):hi].tolist())
        for k, idx in enumerate(plan.rows):
            # (searched in place: a list of every planned row for bisect cost more than the rest)
            a, b = np.searchsorted(idx, (lo, hi)).tolist()
            if b <= a:
                continue
            stream = plan.names[k]
            last = int(idx[b - 1])
            self._epoch[stream] = 0
            self._last_stamp[stream] = (int(plan.stamp[last]), int(plan.recv[last]))
            per_stream = self._stream_delays.get(stream)
            if per_stream is None:
                per_stream = self._stream_delays[stream] = deque(maxlen=2000)
            per_stream.extend(plan.delays[idx[max(a, b - 2000):b]].tolist())
        plan.synced = hi

    @property
    def spread_s(self) -> float:
        """Std of the delivery delay over recent samples (refreshed every 100 samples)."""
        if self._spread_cache is not None and self._count - self._spread_at < 100:
            return self._spread_cache  # (delays are never dropped: once over 2, always)
        plan = self._plan
        if plan is not None and plan.synced < plan.fed:
            # Planned rows not synced yet. A plan is made for a fresh map only, so every
            # delay so far is one of the plan's: the history is its last 500 fed.
            if min(500, plan.fed) <= 2:
                return 0.0
            planned = plan.spreads.get(plan.fed)
            if planned is None and plan.fed >= 500 and plan.tick_fed is not None and (
                    plan.fed > plan.spreads_end or plan.replans < 8):
                planned = plan.plan_spreads(plan.fed)
            if planned is not None:
                self._spread_cache = planned
            else:
                self._spread_cache = _std(plan.delays_f_all()[max(0, plan.fed - 500):plan.fed]) * 1e-9
        elif len(self._delays) <= 2:
            return 0.0
        else:
            self._spread_cache = _std(self._delays) * 1e-9
        self._spread_at = self._count
        return self._spread_cache


@dataclass
class _ClockPlan:
    """One side's samples in feed order with their planned offsets (see ``_ClockMap.plan``)."""

    stamp: np.ndarray
    recv: np.ndarray
    offsets: np.ndarray
    delays: np.ndarray
    stream_ids: np.ndarray
    names: list[str]
    rows: list[np.ndarray]
    fed: int = 0
    synced: int = 0
    delays_f: np.ndarray | None = None  # the delays as floats, made when the spread first reads them
    # Per tick of plan_ticks (by index): the rows fed by then, the offset and receive time after them.
    tick_fed: list[int] | None = None
    tick_offsets: list[int] | None = None
    tick_recv: list[int] | None = None
    # Rows fed -> the spread (s) of the delays so far, where a map read once per tick of
    # plan_ticks refreshes it (see plan_spreads); the last of them; how often a read off
    # that schedule planned them again.
    spreads: dict[int, float] = field(default_factory=dict)
    spreads_end: int = -1
    replans: int = 0

    def delays_f_all(self) -> np.ndarray:
        """The delays as floats (np.std converts the same way), made when first read."""
        if self.delays_f is None:
            self.delays_f = self.delays.astype(float)
        return self.delays_f

    def plan_ticks(self, cuts: np.ndarray) -> None:
        """Keep, for each tick, the rows fed by then (``cuts``) and the state after them."""
        fed = np.asarray(cuts, dtype=np.int64)
        last = np.maximum(fed - 1, 0)
        self.tick_fed = fed.tolist()
        self.tick_offsets = self.offsets[last].tolist()
        self.tick_recv = self.recv[last].tolist()

    def plan_spreads(self, fed_now: int, batch: int = 64) -> float:
        """The spread at ``fed_now`` rows, and the next ones :attr:`_ClockMap.spread_s`
        will refresh after it if read once per tick from now on (up to ``batch`` in all,
        kept in :attr:`spreads`), at once: for each window of 500 delays, :func:`_std`'s
        float operations (each window is reduced along contiguous memory, pairwise as a
        1-D array is). A read off that schedule finds no entry: it plans again from there
        (a few times), then computes its own."""
        window = 500
        if fed_now <= self.spreads_end:
            self.replans += 1
        due = [fed_now]
        spread_at = fed_now
        for fed in self.tick_fed[bisect_right(self.tick_fed, fed_now):]:  # type: ignore[index]
            if len(due) == batch:
                break
            if fed - spread_at >= 100:  # spread_s's refresh rule
                due.append(fed)
                spread_at = fed
        self.spreads_end = due[-1]
        ends = np.asarray(due, dtype=np.int64)
        rows = np.lib.stride_tricks.sliding_window_view(self.delays_f_all(), window)[ends - window]
        dev = rows - (np.add.reduce(rows, axis=1) / window)[:, None]
        np.multiply(dev, dev, out=dev)
        self.spreads = dict(zip(due, (np.sqrt(np.add.reduce(dev, axis=1) / window) * 1e-9).tolist(), strict=True))
        return self.spreads[fed_now]


class _Pure:
    """What the analysis at one grid time reads from the streams alone (see ``_pure_joints``)."""

    __slots__ = ("sim_row", "real_row", "joints_valid", "ee_sim", "ee_real", "obj_sim", "obj_real", "ee_err",
                 "ee_err_norm", "tip_sim", "tip_real", "obj_err", "obj_tool_err", "real_tool_object_m",
                 "sim_obj_speed", "sim_w", "real_w", "wrench_valid", "frame", "moving",
                 # derived from the above and the forces in the world frame (``_derive``):
                 # residuals, norms and masks
                 "res", "q_abs", "q_sq_sum", "joint_record", "world_sim_ok", "world_real_ok",
                 "raw_force", "torque_res", "force_norm", "contact_force_res", "contact_force_norm",
                 "torque_norm", "stalling", "slow_real", "ee_both", "obj_both", "energy",
                 # rotation angles real vs sim (rad), or None: computed when a pose record needs them
                 "ee_angle", "obj_angle",
                 # 3-vectors as float lists, for the analysis' state arithmetic in Python floats
                 "world_sim_l", "world_real_l", "raw_force_l", "torque_res_l", "obj_err_l",
                 # squared residuals as float lists, whether any joint is stalling
                 "q_sq_l", "eff_sq_l", "stalling_any")

    def as_row(self) -> tuple[Any, ...]:
        """The values in ``__slots__`` order: a row as the grid plan serves it."""
        return tuple(getattr(self, name) for name in _Pure.__slots__)


#: Where a row (``_Pure.__slots__`` order) holds what the joint record needs.
_ROW_RES, _ROW_JOINT_RECORD = _Pure.__slots__.index("res"), _Pure.__slots__.index("joint_record")


def _grid_rows(g: _GridCache, times_ns: np.ndarray, window: bool = False,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of grid cache g at times on its grid: (row, rows needed visible, first row
    needed). Times the cache cannot answer get row 0 and a need no stream reaches."""
    k, r = np.divmod(times_ns - g.t0_ns, g.step_ns)
    usable = (r == 0) & (k >= 0) & (k < g.need.size)
    kk = np.where(usable, k, 0)
    big = np.iinfo(np.int64).max
    need, first = (g.w_need, g.w_first) if window else (g.need, g.first)
    return kk, np.where(usable, need[kk], big), first[kk]


def _grid_query(series: _Series, times_ns: np.ndarray, window: bool = False,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``sample`` (or, with ``window``, ``window_mean``) of a planned series at times on
    its grid, from its grid cache: (values, rows needed visible, first row needed).
    Times the cache cannot answer get a need no stream reaches. None: no cache."""
    g = series._grid
    if g is None or (window and g.w_values is None):
        return None
    kk, need, first = _grid_rows(g, times_ns, window)
    return (g.w_values if window else g.values)[kk], need, first


#: Grid times a plan holds at once (blocks are built as the analysis reaches them).
PLAN_BLOCK_TICKS = 2048


class _GridPlan:
    """The stream-only part of the analysis (:meth:`DivergenceEngine._pure_joints` and ``_pure_rest``) for the
    grid times of planned columns, a block of grid times at a time in numpy columns with
    the per-tick arithmetic, and the delay fits the analysis will ask for, batched.

    A grid time is served when every row its answer depends on is visible and none is
    trimmed (the series' ``_n`` and ``_start``), exactly as the grid caches of
    :class:`_Series`; else :meth:`at` returns None and the engine computes it per tick.
    Blocks (``PLAN_BLOCK_TICKS``) keep the memory bounded on long recordings.
    """

    def __init__(self, engine: "DivergenceEngine", t0_ns: int, size: int, fit_ticks: list[int]) -> None:
        # A weak reference: the engine holds the plan, and a cycle would leave the run's
        # whole state to the cycle collector (replay runs with it off, see batch_collection).
        self._engine = weakref.ref(engine)
        self.t0_ns = t0_ns
        self.dt_ns = engine._dt_ns
        self.size = size
        self.block_ticks = int(PLAN_BLOCK_TICKS)
        self.fit_ticks = fit_ticks  # grid indices the analysis fits at when it takes every grid time
        self.served = 0
        self.fits_planned = 0
        self.fits_served = 0
        self._block = -1
        self.checks: list[tuple[_Series, list[int], list[int]]] = []
        self.columns: dict[str, Any] | None = None
        self.rows: list[tuple[Any, ...]] | None = None  # the columns row by row, made when first served
        self.empty: list[_Series] = []
        # grid index -> ((fit, counted), [(series, rows needed, first row needed)]) of the block
        self.fits: dict[int, tuple[tuple[Any, bool], list[tuple[_Series, int, int]]]] = {}

    def _load(self, block: int) -> None:
        """Build the columns and fits of one block of grid times (replacing the previous block)."""
        self._block = block
        self.rows = None
        lo = block * self.block_ticks
        hi = min(self.size, lo + self.block_ticks)
        times = self.t0_ns + np.arange(lo, hi, dtype=np.int64) * self.dt_ns
        engine = self._engine()
        assert engine is not None, "a grid plan outlived its engine"
        built = _plan_block(engine, times)
        self.fits = {}
        if built is None:
            self.columns, self.checks, self.empty = None, [], []
            return
        self.checks, self.columns, self.empty = built
        chosen = self.fit_ticks[bisect_left(self.fit_ticks, lo):bisect_left(self.fit_ticks, hi)]
        if chosen:
            self.fits = _plan_fits(engine, self.t0_ns + np.asarray(chosen, dtype=np.int64) * self.dt_ns, chosen)
            self.fits_planned += len(self.fits)

    def _index(self, t_ns: int) -> int | None:
        """Index of t_ns in the loaded block (loading its block), None off the grid or unplanned."""
        k, r = divmod(t_ns - self.t0_ns, self.dt_ns)
        if r or k < 0 or k >= self.size:
            return None
        block = k // self.block_ticks
        if block != self._block:
            self._load(block)
        return None if self.columns is None else k - block * self.block_ticks

    def at(self, t_ns: int, engine: "DivergenceEngine") -> tuple[Any, ...] | None:
        """The values of ``engine._pure_joints(t_ns)`` completed by ``_pure_rest`` as a
        row in ``_Pure.__slots__`` order, or None when not (yet) determined."""
        i = self._index(t_ns)
        if i is None:
            return None
        for series, need, first in self.checks:
            if need[i] > series._n or first[i] < series._start:
                return None
        for series in self.empty:
            if len(series):
                return None
        if self.rows is None:
            c = self.columns
            self.rows = list(zip(*(c[name] for name in _Pure.__slots__)))  # type: ignore[index]
        self.served += 1
        return self.rows[i]

    def fit_at(self, t_ns: int) -> tuple[Any, bool] | None:
        """``engine._fit_at(t_ns)`` when planned and determined by the visible rows, else None."""
        if self._index(t_ns) is None:
            return None
        entry = self.fits.get((t_ns - self.t0_ns) // self.dt_ns)
        if entry is None:
            return None
        result, checks = entry
        for series, need, first in checks:
            if need > series._n or first < series._start:
                return None
        self.fits_served += 1
        return result


def _build_grid_plan(engine: "DivergenceEngine") -> _GridPlan | None:
    """A :class:`_GridPlan` over the engine's planned series (None when a stream has no grid cache).

    The fits are planned where the analysis will fit when it takes every grid time in
    order: the first grid time with both sides' joints, then each ``fit_period_s`` later.
    """
    cfg = engine.config
    dt = engine._dt_ns
    j = len(engine.joint_names or ())
    joints = [engine._joints[s] for s in SIDES]
    if any(s._grid is None for s in joints):
        return None
    first_ns = max(int(s._buf_t[0]) for s in joints)
    last_ns = max(int(s._buf_t[-1]) for s in joints)
    t0 = -(-first_ns // dt) * dt
    size = max(0, (last_ns - t0) // dt + 2)
    if size == 0:
        return None
    period = cfg.fit_period_s * 1e9
    fit_ticks: list[int] = []
    last: int | None = None
    block = int(PLAN_BLOCK_TICKS)
    for lo in range(0, size, block):
        times = t0 + np.arange(lo, min(size, lo + block), dtype=np.int64) * dt
        valid = None
        for series in joints:
            got = _grid_query(series, times)
            if got is None:
                return None
            ok = np.isfinite(got[0][:, :j]).all(axis=1)
            valid = ok if valid is None else valid & ok
        for k, (t, ok) in enumerate(zip(times.tolist(), valid.tolist(), strict=True), start=lo):  # type: ignore[union-attr]
            if ok and (last is None or t - last >= period):
                fit_ticks.append(k)
                last = t
    return _GridPlan(engine, t0, size, fit_ticks)


def _plan_block(engine: "DivergenceEngine", times: np.ndarray,
                ) -> tuple[list[tuple[_Series, list[int], list[int]]], dict[str, Any], list[_Series]] | None:
    """Columns of the per-tick reads (``engine._pure_joints``, ``_pure_rest``) at ``times``, with the rows each answer needs per
    series (need, first) and the series never fed; None when a stream has no grid cache."""
    cfg = engine.config
    j = len(engine.joint_names or ())
    K = times.size
    big = np.iinfo(np.int64).max
    checks: dict[int, tuple[_Series, np.ndarray, np.ndarray]] = {}
    empty: list[_Series] = []

    def query(series: _Series, at_ns: np.ndarray, width: int, window: bool = False) -> np.ndarray | None:
        if not series.loaded:
            # A stream the bag does not have: NaN at every time while nothing is fed to it.
            empty.append(series)
            return np.full((K, width), np.nan)
        got = _grid_query(series, at_ns, window)
        if got is None:
            return None
        values, need, first = got
        _, old_need, old_first = checks.get(id(series), (series, np.zeros(K, dtype=np.int64),
                                                          np.full(K, big, dtype=np.int64)))
        checks[id(series)] = (series, np.maximum(old_need, need), np.minimum(old_first, first))
        return values

    c: dict[str, Any] = {}
    sim_row = query(engine._joints["sim"], times, 3 * j)
    real_row = query(engine._joints["real"], times, 3 * j)
    tip_ns = int(cfg.tip_velocity_window_s * 1e9)
    obj_ns = int(cfg.object_velocity_window_s * 1e9)
    win_ns = int(cfg.wrench_window_s * 1e9)
    ee = {s: query(engine._poses[(s, "ee")], times, 7) for s in SIDES}
    ee_past = {s: query(engine._poses[(s, "ee")], times - tip_ns, 7) for s in SIDES}
    obj = {s: query(engine._poses[(s, "object")], times, 7) for s in SIDES}
    obj_past = query(engine._poses[("sim", "object")], times - obj_ns, 7)
    wrench = {}
    for s in SIDES:
        series = engine._wrench[s]
        g = series._grid
        if series.loaded and (g is None or g.window_ns != win_ns):
            return None
        wrench[s] = query(series, times, 6, window=True)
    if (sim_row is None or real_row is None or obj_past is None or any(v is None for v in ee.values())
            or any(v is None for v in ee_past.values()) or any(v is None for v in obj.values())
            or any(v is None for v in wrench.values())):
        return None

    def finite(a: np.ndarray) -> np.ndarray:
        return np.isfinite(a).all(axis=1)

    def floats(a: np.ndarray) -> list[float]:
        return a.tolist()

    nan = np.full(K, np.nan)
    c["sim_row"], c["real_row"] = sim_row, real_row
    c["joints_valid"] = (finite(sim_row[:, :j]) & finite(real_row[:, :j])).tolist()
    c["ee_sim"], c["ee_real"], c["obj_sim"], c["obj_real"] = ee["sim"], ee["real"], obj["sim"], obj["real"]
    ee_err = ee["real"][:, :3] - ee["sim"][:, :3]
    c["ee_err"] = ee_err
    c["ee_err_norm"] = floats(np.where(finite(ee_err), _norm_rows(ee_err), nan))
    for s in SIDES:
        v = (ee[s][:, :3] - ee_past[s][:, :3]) / cfg.tip_velocity_window_s
        c[f"tip_{s}"] = np.where(finite(v)[:, None], v, 0.0)
    ee_ok = {s: finite(ee[s][:, :3]) for s in SIDES}
    obj_ok = {s: finite(obj[s][:, :3]) for s in SIDES}
    real_tool = _norm_rows(obj["real"][:, :3] - ee["real"][:, :3])
    sim_tool = _norm_rows(obj["sim"][:, :3] - ee["sim"][:, :3])
    c["real_tool_object_m"] = floats(np.where(obj_ok["real"] & ee_ok["real"], real_tool, nan))
    both_obj = obj_ok["sim"] & obj_ok["real"]
    c["obj_err"] = floats(np.where(both_obj, _norm_rows(obj["real"][:, :3] - obj["sim"][:, :3]), nan))
    c["obj_tool_err"] = floats(np.where(both_obj & ee_ok["sim"] & ee_ok["real"], np.abs(real_tool - sim_tool), nan))
    speed = _norm_rows(obj["sim"][:, :3] - obj_past[:, :3]) / cfg.object_velocity_window_s
    c["sim_obj_speed"] = floats(np.where(obj_ok["sim"] & finite(obj_past[:, :3]), speed, nan))
    sim_w, real_w = wrench["sim"], wrench["real"]
    c["sim_w"], c["real_w"] = sim_w, real_w
    c["wrench_valid"] = (finite(sim_w) & finite(real_w)).tolist()
    rots = {s: ee[s][:, 3:] for s in SIDES}
    with np.errstate(invalid="ignore"):
        ok = {s: finite(rots[s]) & (_norm_rows(rots[s]) > 0) for s in SIDES}
    any_ok = ok["sim"] | ok["real"]
    for side, w, other in (("sim", sim_w, "real"), ("real", real_w, "sim")):
        rot = np.where(ok[side][:, None], rots[side], rots[other])
        use = any_ok & finite(w[:, :3])
        with np.errstate(invalid="ignore", divide="ignore"):
            rotated = _rotate_rows(np.where(use[:, None], rot, 1.0), w[:, :3])
        c[f"world_{side}"] = np.where(use[:, None], rotated, w[:, :3])
    c["frame"] = np.where(any_ok, "world", "sensor").tolist()
    moving = _plan_moving(engine, times, checks, big, empty)
    if moving is None:
        return None
    c["moving"] = moving
    _derive_columns(engine, c)
    c["ee_angle"] = _quat_angle_rows(ee["real"][:, 3:], ee["sim"][:, 3:])
    c["obj_angle"] = _quat_angle_rows(obj["real"][:, 3:], obj["sim"][:, 3:])
    checks_list = [(v[0], v[1].tolist(), v[2].tolist()) for v in checks.values()]
    return checks_list, c, list({id(s): s for s in empty}.values())


#: Windows fitted together in the plan (their (n, F, D, J) arrays ~4.7 MB): the per-call
#: work of ``_fits`` spread over many windows, its loops over long runs of values.
FIT_WINDOWS = 64


def _plan_fits(engine: "DivergenceEngine", times: np.ndarray, ticks: list[int],
               ) -> dict[int, tuple[tuple[Any, bool], list[tuple[_Series, int, int]]]]:
    """The delay fits at grid times ``times`` (grid indices ``ticks``), batched: per index
    (result of ``engine._fit_at``, the rows each side must have visible); windows with
    missing samples are left to the per-tick fit.

    The sim samples of a window at all its delays lie on one regular grid of times (the
    fit's sample and delay steps are multiples of its step): that grid's rows are gathered
    once per window and viewed as (samples, windows, delays, joints) with strides. Fits
    whose samples are not so spaced (delays rounded off their step) or spread over more
    than 4 n D grid times are all left to the per-tick fit.
    """
    cfg = engine.config
    j = len(engine.joint_names or ())
    big = np.iinfo(np.int64).max
    sides = [engine._joints["real"], engine._joints["sim"]]
    grids = [s._grid for s in sides]
    if grids[0] is None or grids[1] is None or not ticks:
        return {}
    real_at, sim_at, delays = engine._fit_query(np.zeros(1, dtype=np.int64))
    real_back, sim_back = -real_at[0], -sim_at[0]  # ns before the fit time: real (n,), sim (D, n)
    n, d = real_back.size, delays.size
    step = int(np.gcd.reduce(sim_back.ravel()))
    if step <= 0:
        return {}
    span = int(sim_back.max()) // step + 1  # grid times from the earliest sample to the fit time
    at = span - 1 - sim_back // step  # (D, n): where each sample is on that grid, earliest first
    sample_step = int(at[0, 1] - at[0, 0]) if n > 1 else 0
    delay_step = int(at[0, 0] - at[1, 0]) if d > 1 else 0
    if span > 4 * n * d or not np.array_equal(
            at, at[0, 0] + sample_step * np.arange(n) - delay_step * np.arange(d)[:, None]):
        return {}
    used = np.zeros(span, dtype=bool)
    used[at.ravel()] = True
    # The joint positions alone, contiguous: windows are gathered from these rows.
    positions = [np.ascontiguousarray(g.values[:, :j]) for g in grids]
    finite = [np.isfinite(v).all(axis=1) for v in positions]
    rows, need, first = [], [], []
    whole = np.ones(len(ticks), dtype=bool)
    sim_grid = (span - 1 - np.arange(span)) * step
    for g, ok, back, cols in zip(grids, finite, (real_back, sim_grid), (slice(None), used), strict=True):
        # ``_grid_rows`` at every sample time of every window, from the fit times' rows: a
        # sample's row is its fit time's less its offset in grid steps, when both are on the grid.
        k, r = np.divmod(times - g.t0_ns, g.step_ns)
        back_rows, off = np.divmod(back, g.step_ns)
        if off[cols].any():
            return {}  # samples off the grid: no window is planned
        whole &= (r == 0) & (k - back_rows[cols].max() >= 0) & (k - back_rows[cols].min() < g.need.size)
        kk = np.clip(k[:, None] - back_rows, 0, g.need.size - 1)  # (windows, samples); unusable windows clipped
        rows.append(kk)
        kk = kk[:, cols]
        need.append(g.need[kk].max(axis=1))
        first.append(g.first[kk].min(axis=1))
        whole &= np.take(ok, kk).all(axis=1) & (need[-1] < big)
    checks = [[(side, a, b) for a, b in zip(nd.tolist(), fs.tolist(), strict=True)]
              for side, nd, fs in zip(sides, need, first, strict=True)]
    out: dict[int, tuple[tuple[Any, bool], list[tuple[_Series, int, int]]]] = {}
    # Windows reaching back before a side's first sample (the first second of a run): a
    # sample there is NaN whatever is visible, so where too few samples are left the fit
    # is none (_fit_at's coverage test), known now.
    starts = [int(side._buf_t[0]) if len(side._buf_t) else big for side in sides]
    in_range = ((times[:, None] - real_back >= starts[0])
                & (times[:, None] - sim_back.max(axis=0) >= starts[1])).sum(axis=1)
    on_grid = np.logical_and.reduce([(times - g.t0_ns) % g.step_ns == 0 for g in grids])
    for i in np.flatnonzero(~whole & on_grid & (in_range < FIT_MIN_COVERAGE * n)).tolist():
        out[ticks[i]] = ((None, False), [])
    picked = np.flatnonzero(whole).tolist()
    for b in range(0, len(picked), FIT_WINDOWS):
        sub = picked[b:b + FIT_WINDOWS]
        real = np.take(positions[0], rows[0][sub], axis=0)  # (windows, n, j)
        # Time-major rows: at each sample (and delay) the windows' joints are one contiguous run.
        grid = np.take(positions[1], rows[1][sub].T, axis=0)  # (span, windows, j)
        s = grid.strides
        sim = np.lib.stride_tricks.as_strided(  # (n, windows, d, j), read only
            grid[at[0, 0]], shape=(n, len(sub), d, j),
            strides=(sample_step * s[0], s[1], -delay_step * s[0], s[2]), writeable=False)
        fits = _fits(real, sim, delays, cfg.fit_min_motion_rad)
        for i, result in zip(sub, fits, strict=True):
            out[ticks[i]] = (result, [checks[0][i], checks[1][i]])
    return out


def _derive_columns(engine: "DivergenceEngine", c: dict[str, Any]) -> None:
    """``engine._derive`` on the grid plan's columns (same float operations, row by row)."""
    cfg = engine.config
    j = len(engine.joint_names or ())
    res = c["real_row"] - c["sim_row"]
    q_res, eff_res = res[:, :j], res[:, 2 * j:]
    c["res"] = res
    q_sq = q_res ** 2
    eff_sq = np.where(np.isfinite(eff_res), eff_res ** 2, 0.0)
    c["q_abs"] = np.abs(q_res)
    c["q_sq_sum"] = np.sum(q_sq, axis=1).tolist()
    c["joint_record"] = (np.asarray(c["joints_valid"]) | np.isfinite(q_res).any(axis=1)).tolist()
    c["world_sim_ok"] = np.isfinite(c["world_sim"]).all(axis=1).tolist()
    c["world_real_ok"] = np.isfinite(c["world_real"]).all(axis=1).tolist()
    c["raw_force"] = raw = c["world_real"] - c["world_sim"]
    sim_w, real_w = c["sim_w"], c["real_w"]
    c["torque_res"] = torque = real_w[:, 3:] - sim_w[:, 3:]
    c["force_norm"] = np.where(np.asarray(c["wrench_valid"]), _norm_rows(raw), np.nan).tolist()
    c["contact_force_res"] = force = real_w[:, :3] - sim_w[:, :3]
    c["contact_force_norm"] = _norm_rows(force).tolist()
    c["torque_norm"] = _norm_rows(torque).tolist()
    qd_sim, qd_real = c["sim_row"][:, j:2 * j], c["real_row"][:, j:2 * j]
    c["stalling"] = (np.abs(qd_real) < cfg.stall_speed_rad_s) & (np.abs(qd_sim) > cfg.stall_sim_speed_rad_s)
    c["slow_real"] = np.abs(qd_real) < 2 * cfg.stall_speed_rad_s
    c["ee_both"] = (np.isfinite(c["ee_sim"]).all(axis=1) & np.isfinite(c["ee_real"]).all(axis=1)).tolist()
    c["obj_both"] = (np.isfinite(c["obj_sim"]).all(axis=1) & np.isfinite(c["obj_real"]).all(axis=1)).tolist()
    # residual_energy row by row: the mean over finite joint residuals (all of them, on valid
    # rows with every residual finite; others through the function), plus the force term.
    q_scale, f_scale = cfg.ledger_q_scale_rad, cfg.ledger_force_scale_n  # > 0 (EngineConfig.validate)
    valid = np.asarray(c["joints_valid"], dtype=bool)
    whole = valid & np.isfinite(q_res).all(axis=1)
    energy = np.where(whole, ((q_res / q_scale) ** 2).mean(axis=1), 0.0)
    force_norm = np.asarray(c["force_norm"])
    with np.errstate(invalid="ignore"):
        energy = np.where(np.isfinite(force_norm), energy + (force_norm / f_scale) ** 2, energy)
    out = energy.tolist()
    for k in np.flatnonzero(valid & ~whole).tolist():
        out[k] = residual_energy(q_res[k], c["force_norm"][k], q_scale, f_scale)
    c["energy"] = out
    c["world_sim_l"], c["world_real_l"] = c["world_sim"].tolist(), c["world_real"].tolist()
    c["raw_force_l"], c["torque_res_l"] = raw.tolist(), torque.tolist()
    c["obj_err_l"] = (c["obj_real"][:, :3] - c["obj_sim"][:, :3]).tolist()
    c["q_sq_l"], c["eff_sq_l"] = q_sq.tolist(), eff_sq.tolist()
    c["stalling_any"] = c["stalling"].any(axis=1).tolist()


#: ``_side_moving``'s answers (joint_states, wrench), shared by the grid plan's rows (read only).
_MOVING = tuple({"joint_states": a, "wrench": b} for a in (False, True) for b in (False, True))


def _plan_moving(engine: "DivergenceEngine", times: np.ndarray,
                 checks: dict[int, tuple[_Series, np.ndarray, np.ndarray]], big: int,
                 empty: list[_Series]) -> list[dict[str, bool]] | None:
    """``engine._side_moving("sim", t)`` at every grid time, adding the rows it reads to ``checks``."""
    win_ns = int(max(0.05, 2 * engine.config.features.frozen_samples * 0.002) * 1e9)
    thr = engine.config.features.frozen_motion_threshold
    K = times.size
    out: dict[str, np.ndarray] = {}
    for topic, series in (("joint_states", engine._joints.get("sim")), ("wrench", engine._wrench["sim"])):
        if series is None or not series.loaded:
            if series is not None:
                empty.append(series)
            out[topic] = np.zeros(K, dtype=bool)  # never fed: fewer than two samples at any time
            continue
        st, sv = series._buf_t, series._buf_v
        if topic == "joint_states":
            sv = sv[:, : 2 * len(engine.joint_names or ())]
        lo = np.searchsorted(st, times - win_ns)
        hi = np.searchsorted(st, times, side="right")
        moving = np.zeros(K, dtype=bool)
        full = np.flatnonzero((hi - lo) >= 2)
        if full.size and st.size and sv.shape[1]:
            # The live test is max |v - v[lo]| > thr over the window, NaN ignored: a window's
            # second or last row past the threshold decides it (most windows of a moving arm).
            first = sv[lo[full]]
            with np.errstate(invalid="ignore"):
                moved = ((np.abs(sv[lo[full] + 1] - first) > thr).any(axis=1)
                         | (np.abs(sv[hi[full] - 1] - first) > thr).any(axis=1))
            moving[full[moved]] = True
            rest = full[~moved]
            if rest.size:
                moving[rest] = _windows_moved(sv, lo[rest], hi[rest], thr)
        _, need, first_row = checks.get(id(series), (series, np.zeros(K, dtype=np.int64),
                                                     np.full(K, big, dtype=np.int64)))
        checks[id(series)] = (series, np.maximum(need, hi), np.minimum(first_row, lo))
        out[topic] = moving
    return [_MOVING[i] for i in (2 * out["joint_states"] + out["wrench"]).tolist()]


def _windows_moved(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, thr: float) -> np.ndarray:
    """Per window of rows lo..hi - 1 (at least two, in order): max |v - v[lo]| > thr, NaN ignored."""
    # Rounding is monotone, so that max is max(vmax - v[lo], v[lo] - vmin) with the window's
    # NaN-ignoring max and min: one reduction per window (reduceat over the pairs lo, hi;
    # a pair with lo >= hi gives one row, never a window's). Only the rows the windows
    # read, one contiguous row per column (reduceat's segments are cheap along the last axis).
    a0, b0 = int(lo.min()), int(hi.max())
    span = np.ascontiguousarray(values[a0:b0].T)  # (columns, m)
    m = b0 - a0
    edges = np.minimum(np.column_stack((lo - a0, hi - a0)).ravel(), m - 1)
    vmax = np.fmax.reduceat(span, edges, axis=1)[:, ::2]
    vmin = np.fmin.reduceat(span, edges, axis=1)[:, ::2]
    # A window reaching the span's last row stops one short of it (an index must be < m).
    ends = (hi - a0) == m
    vmax[:, ends] = np.fmax(vmax[:, ends], span[:, m - 1:m])
    vmin[:, ends] = np.fmin(vmin[:, ends], span[:, m - 1:m])
    first = span[:, lo - a0]
    with np.errstate(invalid="ignore"):
        return ((vmax - first > thr) | (first - vmin > thr)).any(axis=0)


def _norm(x: np.ndarray) -> float:
    """Euclidean norm of a short 1-D float array, squares summed in order.

    Not ``x.dot(x)``: BLAS fuses multiply-adds as the CPU allows, while this sum is the
    same float operations as :func:`_norm_rows` on whole columns (the grid plan).
    """
    total = 0.0
    for v in x.tolist():
        total += v * v
    return math.sqrt(total)


def _norm3(v: Sequence[float]) -> float:
    """:func:`_norm` of a 3-vector of Python floats (the same ordered sum)."""
    x, y, z = v
    return math.sqrt(x * x + y * y + z * z)


def _sub3(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """a - b for 3-vectors of Python floats."""
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def _smooth_list(prev: list[float] | None, value: list[float], alpha: float) -> list[float]:
    """Exponential smoothing of float lists: ``(1 - alpha) * prev + alpha * value`` where
    value is finite, prev where not (a non-finite sample leaves its entry); value at first.

    Lists of values without NaN stay so while ``1 - alpha > 0``: only finite values are
    added, and (1 - alpha) * inf is inf (the engine's squared residuals: no NaN ever)."""
    if prev is None:
        return value
    keep = 1 - alpha
    return [keep * a + alpha * b if math.isfinite(b) else a for a, b in zip(prev, value, strict=True)]


def _max_list(values: list[float]) -> float:
    """np.max of a list of non-negative floats: NaN when any is (the sum is NaN then, only then)."""
    return max(values) if not math.isnan(sum(values)) else math.nan


def _ema3(prev: Sequence[float], value: Sequence[float], alpha: float) -> tuple[float, float, float]:
    """``(1 - alpha) * prev + alpha * value`` for 3-vectors, as numpy computes it elementwise."""
    keep = 1 - alpha
    return (keep * prev[0] + alpha * value[0], keep * prev[1] + alpha * value[1], keep * prev[2] + alpha * value[2])


def _norm_rows(x: np.ndarray) -> np.ndarray:
    """:func:`_norm` of every row of x (K, n), with the same float operations."""
    total = x[:, 0] * x[:, 0]
    for i in range(1, x.shape[1]):
        total = total + x[:, i] * x[:, i]
    return np.sqrt(total)


_FLOAT_EPS = float(np.finfo(float).eps)


def _rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate v (3,) by the unit quaternion q (wxyz) normalised: transforms3d's
    ``quat2mat(q / |q|) @ v`` written out, so :func:`_rotate_rows` repeats it on columns."""
    w, x, y, z = (q / _norm(q)).tolist()
    v0, v1, v2 = v.tolist()
    nq = w * w + x * x + y * y + z * z
    if nq < _FLOAT_EPS:
        return np.array([v0, v1, v2])
    s = 2.0 / nq
    X, Y, Z = x * s, y * s, z * s
    wX, wY, wZ = w * X, w * Y, w * Z
    xX, xY, xZ = x * X, x * Y, x * Z
    yY, yZ, zZ = y * Y, y * Z, z * Z
    return np.array([
        (1.0 - (yY + zZ)) * v0 + (xY - wZ) * v1 + (xZ + wY) * v2,
        (xY + wZ) * v0 + (1.0 - (xX + zZ)) * v1 + (yZ - wX) * v2,
        (xZ - wY) * v0 + (yZ + wX) * v1 + (1.0 - (xX + yY)) * v2,
    ])


def _rotate_rows(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """:func:`_rotate` of every row pair of q (K, 4) and v (K, 3)."""
    qn = q / _norm_rows(q)[:, None]
    w, x, y, z = qn[:, 0], qn[:, 1], qn[:, 2], qn[:, 3]
    v0, v1, v2 = v[:, 0], v[:, 1], v[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        nq = w * w + x * x + y * y + z * z
        s = 2.0 / nq
    X, Y, Z = x * s, y * s, z * s
    wX, wY, wZ = w * X, w * Y, w * Z
    xX, xY, xZ = x * X, x * Y, x * Z
    yY, yZ, zZ = y * Y, y * Z, z * Z
    out = np.column_stack([
        (1.0 - (yY + zZ)) * v0 + (xY - wZ) * v1 + (xZ + wY) * v2,
        (xY + wZ) * v0 + (1.0 - (xX + zZ)) * v1 + (yZ - wX) * v2,
        (xZ - wY) * v0 + (yZ + wX) * v1 + (1.0 - (xX + yY)) * v2,
    ])
    small = nq < _FLOAT_EPS
    out[small] = v[small]
    return out


def _quat_angle(q1: np.ndarray, q2: np.ndarray) -> float:
    """Rotation angle between two unit quaternions (wxyz), radians; NaN if unknown.

    The dot product is summed in order (not np.dot), as :func:`_quat_angle_rows` does on columns.
    """
    if not (np.isfinite(q1).all() and np.isfinite(q2).all()):
        return float("nan")
    n1, n2 = _norm(q1), _norm(q2)
    if n1 == 0 or n2 == 0:
        return float("nan")
    a0, a1, a2, a3 = q1.tolist()
    b0, b1, b2, b3 = q2.tolist()
    dot = abs(a0 * b0 + a1 * b1 + a2 * b2 + a3 * b3) / (n1 * n2)
    return float(2.0 * math.acos(min(1.0, dot)))


def _quat_angle_rows(q1: np.ndarray, q2: np.ndarray) -> list[float]:
    """:func:`_quat_angle` of every row pair of q1 and q2 (K, 4), with the same float operations."""
    n1, n2 = _norm_rows(q1), _norm_rows(q2)
    with np.errstate(invalid="ignore", divide="ignore"):
        dot = np.abs(q1[:, 0] * q2[:, 0] + q1[:, 1] * q2[:, 1] + q1[:, 2] * q2[:, 2] + q1[:, 3] * q2[:, 3]) / (n1 * n2)
    ok = (np.isfinite(q1).all(axis=1) & np.isfinite(q2).all(axis=1) & (n1 != 0) & (n2 != 0)).tolist()
    nan = float("nan")
    return [2.0 * math.acos(min(1.0, d)) if good else nan for d, good in zip(dot.tolist(), ok, strict=True)]


_IDENTITY = object()  # marks a joint name order equal to the engine's
_NAN3 = np.full(3, np.nan)  # an unknown 3-vector (read only)
_NAN3.flags.writeable = False
ONSET_SPEED_RAD_S = 0.003  # joint speed that counts as the arm leaving rest
ONSET_QUIET_S = 0.2  # rest needed before a motion onset counts as the run start
TRIM_EVERY_NS = 1_000_000_000  # how often the stream histories are trimmed to buffer_s (they hold up to 1 s more)
FIT_MIN_COVERAGE = 0.8  # share of the fit window that must have both sides' joints
ONSET_MAX_REST_RAD_S = 0.05  # faster than this at the start, the arm was not at rest


def _fits(real: np.ndarray, sim: np.ndarray, delays: np.ndarray,
          min_motion_rad: float) -> list[tuple[DelayFit | None, bool]]:
    """Delay/gain/offset fits of F windows at once: real (F, n, J), sim (n, F, D, J) at the
    D delays (any strides); per window (fit, whether its delay counts toward the latency estimate).

    Sums over a window's samples run sample after sample whatever F is or however the
    values lie in memory (np.mean over the leading axis, and einsum's reductions here: the
    tests hold both to it), so one window alone gives the bits it gets in a batch. The
    plan's views (one grid of rows per batch, samples and delays time-major, the F windows'
    joints one contiguous run at each) are fastest: their delays, stepping backwards in
    memory, are turned first, and then every loop here runs over runs of F * J values or more.

    The centred residual real - sim is yc - xc (both centred), so its sums come from the
    products of xc with yc and itself: two passes over the (n, F, D, J) values instead
    of building and squaring the residual at every delay. Its sum of squares is a
    difference of sums, exact to ~1e-16 of the signal's: far below any residual that
    matters (a perfect match, sst = 0, is caught first).
    """
    n, windows, d = sim.shape[0], sim.shape[1], sim.shape[2]
    sim0 = sim[:, :, 0]  # (n, F, J)
    # Every value below is computed per (window, delay, joint): reversing the delays changes no bit.
    turned = d > 1 and sim.strides[2] < 0
    x = sim[:, :, ::-1] if turned else sim
    # y (n, F, J) time-major: the sums with xc run over the F * J values of each sample at
    # once. With one joint, a window alone sums its samples pairwise (its only axis): a batch
    # keeps them window-major to do the same.
    if real.shape[2] > 1:
        y = np.ascontiguousarray(real.transpose(1, 0, 2))
    else:
        y = np.ascontiguousarray(real).transpose(1, 0, 2)
    yc = y - y.mean(axis=0)
    syy = np.einsum("nfj,nfj->fj", yc, yc)[:, None, :]
    xc = x - x.mean(axis=0)  # (n, F, D, J)
    sxy = np.einsum("nfdj,nfj->fdj", xc, yc)
    sxx = np.einsum("nfdj,nfdj->fdj", xc, xc)  # (F, D, J)
    if turned:
        sxy, sxx = sxy[:, ::-1], sxx[:, ::-1]
    # np.std of the delay-0 samples: the same centring, sum of squares and division.
    motion = np.max(np.sqrt(sxx[:, 0] / n), axis=1)  # (F,)
    sxr = sxy - sxx  # sum of xc * (yc - xc)
    slope = np.where(sxx > 1e-12, sxr / np.maximum(sxx, 1e-12), 0.0)
    sse = np.maximum((syy - 2.0 * sxy + sxx) - slope * sxr, 0.0)
    total = np.sum(sse, axis=2)  # (F, D)
    squares = np.ascontiguousarray((real - sim0.transpose(1, 0, 2)) ** 2)  # (F, n, J)
    worst = np.argmax(np.sum(squares, axis=1), axis=1)  # (F,)
    # Per window: its whole sum of squares (each window's values in one pairwise sum, as np.sum
    # of the window alone), best delay, that delay's total and gain slope.
    size = n * real.shape[2]
    sst = np.add.reduce(squares.reshape(windows, size), axis=1)
    best = np.argmin(total, axis=1)
    rows = np.arange(windows)
    tot = total[rows, best]
    with np.errstate(divide="ignore", invalid="ignore"):
        explained = 1.0 - tot / sst
    explained = np.where(explained > 0.0, explained, 0.0)  # max(0.0, explained) (NaN included)
    values = zip(sst.tolist(), delays[best].tolist(), (1.0 + slope[rows, best, worst]).tolist(), explained.tolist(),
                 np.sqrt(sst / size).tolist(), np.sqrt(tot / size).tolist(), (~(motion < min_motion_rad)).tolist(),
                 strict=True)
    out: list[tuple[DelayFit | None, bool]] = []
    for s, delay, gain, expl, rms, fit_rms, moved in values:
        if s <= 0:
            out.append((DelayFit(0.0, 1.0, 1.0, 0.0, 0.0), False))
        elif not moved:
            # Without motion, delay and gain are not identifiable; only an offset is.
            out.append((DelayFit(0.0, 1.0, expl, rms, fit_rms), False))
        else:
            out.append((DelayFit(delay, gain, expl, rms, fit_rms), True))
    return out


# --------------------------------------------------------------------------- engine
@dataclass(frozen=True, slots=True)
class _AnalysisConstants:
    """What the analysis at every grid time derives from the (fixed) config, derived once."""

    dt_s: float
    smooth_alpha: float  # of the smoothed residuals
    smooth_keep: float  # 1 - smooth_alpha
    weight_alpha: float  # of the tool weight
    contact_force_n: float
    contact_release_n: float
    contact_recent_ns: float
    object_lag_ns: int
    object_error_m: float
    fit_period_ns: float
    unexplained_residual_rad: float
    dynamics_min_explained: float
    contact_period_ns: int
    pose_period_ns: int
    horizon_ns: int
    backlog_ns: int

    @classmethod
    def of(cls, cfg: EngineConfig, dt_ns: int) -> "_AnalysisConstants":
        dt_s = dt_ns * 1e-9
        return cls(
            dt_s=dt_s, smooth_alpha=(alpha := min(1.0, dt_s / cfg.smooth_tau_s)), smooth_keep=1 - alpha,
            weight_alpha=min(1.0, dt_s / cfg.tool_weight_tau_s),
            contact_force_n=cfg.contact_force_n, contact_release_n=cfg.contact_release_n,
            contact_recent_ns=cfg.attribution.contact_recent_s * 1e9,
            object_lag_ns=int(cfg.object_velocity_window_s * 1e9), object_error_m=cfg.attribution.object_error_m,
            fit_period_ns=cfg.fit_period_s * 1e9,
            unexplained_residual_rad=cfg.attribution.unexplained_residual_rad,
            dynamics_min_explained=cfg.attribution.dynamics_min_explained,
            contact_period_ns=int(round(1e9 / cfg.contact_rate_hz)), pose_period_ns=int(round(1e9 / cfg.pose_rate_hz)),
            horizon_ns=int(cfg.horizon_s * 1e9), backlog_ns=int(cfg.max_backlog_s * 1e9),
        )


class DivergenceEngine:
    """Streams in, divergence records and events out; see the module docstring.

    Args:
        config: engine parameters (validated).

    Raises:
        ConfigError: a parameter is invalid.
    """

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        self.config.validate()
        cfg = self.config
        self._dt_ns = int(round(1e9 / cfg.analysis_rate_hz))
        self._max_gap_ns = int(cfg.max_interp_gap_s * 1e9)
        self._clock = {s: _ClockMap(cfg.offset_leak, int(cfg.clock_reset_s * 1e9)) for s in SIDES}
        self.joint_names: tuple[str, ...] | None = None
        self._joints: dict[str, _Series] = {}
        self._wrench = {s: _Series(6) for s in SIDES}
        self._poses = {(s, k): _Series(7) for s in SIDES for k in POSE_KINDS}
        self._health = {
            (s, topic): StreamHealth(cfg.features, f"{s}/{topic}")
            for s in SIDES for topic in ("joint_states", "wrench")
        }
        # The order the analysis reads the flags in: (stream, topic, tracker, the other side's
        # tracker of the topic, the same side's other tracker, whether only dropouts count).
        self._health_order = [
            (f"{side}/{topic}", topic, self._health[(side, topic)], self._health[(twin, topic)],
             self._health[(side, other)], side == "sim")
            for side, twin in (("real", "sim"), ("sim", "real"))
            for topic, other in (("joint_states", "wrench"), ("wrench", "joint_states"))
        ]
        self._events = EventTracker(cfg.events)
        self._ledger = ResidualLedger(CATEGORIES, cfg.summary_window_s)
        self._next_t_ns: int | None = None
        self._name_orders: dict[tuple, Any] = {}
        self._pending = TickOutput()
        #: If set, each joint record goes here as soon as it is formed, before the rest of
        #: its grid time's analysis (a live node publishes it at once), not to tick()'s output.
        self.joint_record_sink: Callable[[JointDivergenceRecord], None] | None = None
        self.rejected: Counter = Counter()
        self.first_command_ns: int | None = None
        self._motion_onset_ns: int | None = None
        self._onset_done = False
        self._onset_first_ns: int | None = None
        self._onset_threshold: float | None = None
        self._onset_scanned_ns = 0
        self.first_recv_ns: int | None = None
        self._last_command_ns: int | None = None
        self.command_count = 0
        # smoothed features
        self._feats = TickFeatures(t_ns=0)  # refilled by every analysis
        self._res_sq: list[float] | None = None  # smoothed squared joint residuals
        self._eff_sq: list[float] | None = None  # smoothed squared effort residuals
        # smoothed force and torque residuals, the tool's weight per frame (float triples)
        self._force_res: tuple[float, float, float] = (0.0, 0.0, 0.0)
        self._torque_res: tuple[float, float, float] = (0.0, 0.0, 0.0)
        self._tool_weight: dict[str, tuple[float, float, float] | None] = {"world": None, "sensor": None}
        self._last_t_ns: int | None = None
        self._contact = {s: False for s in SIDES}
        self._constants = _AnalysisConstants.of(cfg, self._dt_ns)
        self._sim_contact_last_ns: int | None = None
        self._stall_s: np.ndarray | None = None
        self._stall_any = False  # whether any _stall_s is above 0
        self._seen: tuple[dict[str, _Series], list[tuple[_Series, StreamHealth]]] | None = None
        self._unexplained_s = 0.0
        self._last_untrusted_ns: int | None = None
        self._obj_hist: deque = deque()
        self._obj_free_drift_m = 0.0
        self._obj_last_err: np.ndarray | None = None
        self._last_active_ns: dict[str, int] = {}
        self._last_kind: dict[str, str] = {}
        self._fit: DelayFit | None = None
        self._last_fit_ns: int | None = None
        self._fit_delays = np.empty(2001)  # the latest fitted delays (s), _fit_delays_n of them
        self._fit_delays_n = 0
        self._fit_delays_sorted: list[float] = []  # the same delays in order, for the median
        self._latency_cache: tuple[int, tuple[float, float]] | None = None
        self._fit_count = 0
        self._next_pose_ns: int | None = None
        self._next_contact_ns: int | None = None
        # run statistics
        # Run statistics: running sums for the rms figures; bounded sample history for
        # max/percentiles (the last stats_max_samples analysis ticks).
        keep = int(cfg.stats_max_samples)
        self._q_abs: deque = deque(maxlen=keep)
        self._ee_err_sq: deque = deque(maxlen=keep)
        self._force_free: deque = deque(maxlen=keep)
        self._force_contact: deque = deque(maxlen=keep)
        self._sums = {"q_sq": 0.0, "q_n": 0, "ee_sq": 0.0, "ee_n": 0, "f_sq": 0.0, "f_n": 0}
        self._calib_t: list[int] = []
        self._calib_free: list[bool] = []
        self._calib_sim: list[np.ndarray] = []
        self._calib_real: list[np.ndarray] = []
        self._last_attribution_top = "none"
        self._last_tick_ns: int | None = None
        self.analysis_count = 0
        self._planned: list[_PlannedStream] = []
        self._grid_plan: _GridPlan | None = None
        self._ticks: _TickPlan | None = None  # the ticks of plan_ticks
        self._trimmed_ns: int | None = None
        self._planned_sides: list[tuple[str, list[_PlannedStream]]] = []

    # ------------------------------------------------------------------ inputs
    def _side(self, side: str) -> str:
        if side not in SIDES:
            raise ConfigError(f"unknown side {side!r}; expected one of {SIDES}")
        return side

    def _map(self, side: str, stamp_ns: int, recv_ns: int, stream: str) -> int:
        if self.first_recv_ns is None:
            self.first_recv_ns = int(recv_ns)
        t_ns, crossed = self._clock[side].map(int(stamp_ns), int(recv_ns), stream)
        if crossed and (side, stream) in self._health:
            self._health[(side, stream)].reset_stamps()
        return t_ns

    def on_rejected(self, side: str, topic: str, reason: str) -> None:
        """Count a message the node rejected as malformed (by side/topic and reason)."""
        self.rejected[f"{side}/{topic}: {reason}"] += 1

    def on_joint_state(
        self,
        side: str,
        stamp_ns: int,
        recv_ns: int,
        names: Sequence[str],
        q_rad: Sequence[float],
        qd_rad_s: Sequence[float] | None = None,
        effort: Sequence[float] | None = None,
    ) -> bool:
        """Feed one joint_states message; returns False (and counts it) when malformed."""
        side = self._side(side)
        names = tuple(names) if not isinstance(names, tuple) else names
        q = np.asarray(q_rad, dtype=float).ravel()
        n = len(names)
        qd = np.full(n, np.nan) if qd_rad_s is None or len(qd_rad_s) == 0 else np.asarray(qd_rad_s, dtype=float).ravel()
        eff = np.full(n, np.nan) if effort is None or len(effort) == 0 else np.asarray(effort, dtype=float).ravel()
        if n == 0 or q.shape != (n,) or qd.shape != (n,) or eff.shape != (n,):
            self.on_rejected(side, "joint_states", "bad shape or names")
            return False
        # The name order of a stream rarely changes: validate it once per distinct tuple.
        cached = self._name_orders.get(names)
        if cached is None:
            str_names = tuple(str(x) for x in names)
            if len(set(str_names)) != n:
                self.on_rejected(side, "joint_states", "bad shape or names")
                return False
            if self.joint_names is None:
                self.joint_names = str_names
                self._joints = {s: _Series(3 * n) for s in SIDES}
                self._stall_s = np.zeros(n)
                self._stall_any = False
            index = {name: i for i, name in enumerate(str_names)}
            if any(name not in index for name in self.joint_names):
                self.on_rejected(side, "joint_states", "missing joints")
                return False
            order = np.array([index[name] for name in self.joint_names], dtype=np.intp)
            cached = order if not np.array_equal(order, np.arange(n)) else None
            if len(self._name_orders) > 64:
                self._name_orders.clear()
            self._name_orders[names] = cached if cached is not None else _IDENTITY
        elif cached is _IDENTITY:
            cached = None
        j = len(self.joint_names or ())
        if cached is None and n == j:
            row = np.concatenate((q, qd, eff))
        else:
            order = cached if cached is not None else np.arange(j)
            row = np.concatenate((q[order], qd[order], eff[order]))
        t_ns = self._map(side, stamp_ns, recv_ns, "joint_states")
        self._joints[side].add(t_ns, row)
        self._joints[side].last_recv_ns = int(recv_ns)
        # A velocity array the robot did not send (position-only JointState) is all NaN:
        # it is absent, not non-finite, so health sees the positions alone.
        health_row = row[: 2 * j] if not np.isnan(row[j: 2 * j]).all() else row[:j]
        self._health[(side, "joint_states")].add(int(stamp_ns), int(recv_ns), t_ns, health_row)
        return True

    def on_wrench(
        self, side: str, stamp_ns: int, recv_ns: int, force_n: Sequence[float], torque_nm: Sequence[float]
    ) -> bool:
        """Feed one wrench message (sensor frame); returns False when malformed."""
        side = self._side(side)
        f = np.asarray(force_n, dtype=float).ravel()
        tq = np.asarray(torque_nm, dtype=float).ravel()
        if f.shape != (3,) or tq.shape != (3,):
            self.on_rejected(side, "wrench", "bad shape")
            return False
        t_ns = self._map(side, stamp_ns, recv_ns, "wrench")
        row = np.concatenate([f, tq])
        self._wrench[side].add(t_ns, row)
        self._wrench[side].last_recv_ns = int(recv_ns)
        self._health[(side, "wrench")].add(int(stamp_ns), int(recv_ns), t_ns, row)
        return True

    def on_pose(
        self,
        side: str,
        which: str,
        stamp_ns: int,
        recv_ns: int,
        position_m: Sequence[float],
        orientation_wxyz: Sequence[float],
    ) -> bool:
        """Feed one ee or object pose (world frame); returns False when malformed."""
        side = self._side(side)
        if which not in POSE_KINDS:
            raise ConfigError(f"unknown pose {which!r}; expected one of {POSE_KINDS}")
        p = np.asarray(position_m, dtype=float).ravel()
        q = np.asarray(orientation_wxyz, dtype=float).ravel()
        if p.shape != (3,) or q.shape != (4,):
            self.on_rejected(side, f"{which}_pose", "bad shape")
            return False
        t_ns = self._map(side, stamp_ns, recv_ns, f"{which}_pose")
        self._poses[(side, which)].add(t_ns, np.concatenate([p, q]))
        return True

    def on_command(self, stamp_ns: int, recv_ns: int, names: Sequence[str], points: Sequence[Any]) -> None:
        """Note a mirrored command (its receipt starts the run clock of the summary)."""
        if self.first_recv_ns is None:
            self.first_recv_ns = int(recv_ns)
        if self.first_command_ns is None:
            self.first_command_ns = int(recv_ns)
        self._last_command_ns = int(recv_ns)
        self.command_count += 1

    # ------------------------------------------------------------------ column input (replay)
    def plan_columns(self, streams: Sequence[ColumnStream]) -> bool:
        """Take whole recorded streams to feed by receive time with :meth:`feed_columns`.

        Gives the engine the state the ``on_*`` methods give when fed the same rows one
        by one in ``seq`` order, at a fraction of the cost (clock map, series and stream
        health are computed on columns). Returns False, leaving the engine untouched,
        when the streams need the per-message path: a fresh engine is required, and
        clock resets, stamps mapped out of order, or joint streams naming different
        joint sets are left to it.
        """
        if self.first_recv_ns is not None or self.joint_names is not None or self.command_count:
            return False
        joint_streams = [c for c in streams if c.stream == "joint_states" and c.recv_ns.size]
        if not joint_streams or any(set(c.names) != set(joint_streams[0].names) or len(set(c.names)) != len(c.names)
                                    for c in joint_streams):
            return False
        first = min(joint_streams, key=lambda c: int(c.seq[0]))
        # Joints are sampled on the grid and, by the fit, at the fit's delays before it.
        fit_delays_ns = (np.arange(0.0, self.config.fit_max_delay_s + 1e-12, self.config.fit_delay_step_s)
                         * 1e9).astype(np.int64)
        step_ns = math.gcd(self._dt_ns, *[int(d) for d in fit_delays_ns])
        names = tuple(str(x) for x in first.names)
        j = len(names)
        planned: list[_PlannedStream] = []
        series: dict[tuple[str, str], _Series] = {}
        for col in streams:
            recv = np.asarray(col.recv_ns, dtype=np.int64)
            if recv.size and np.any(np.diff(recv) < 0):
                return False
            if col.stream not in ("joint_states", "wrench", "ee_pose", "object_pose", "command"):
                raise ConfigError(f"unknown column stream {col.stream!r}")
            refused = np.asarray(col.refused_recv_ns, dtype=np.int64).tolist()
            planned.append(_PlannedStream(col, recv, refused_list=refused))
        for side in SIDES:
            side_cols = [p for p in planned if p.column.side == side and p.column.stream != "command"
                         and p.recv.size]
            if not side_cols:
                continue
            seq = np.concatenate([np.asarray(p.column.seq, dtype=np.int64) for p in side_cols])
            order = np.argsort(seq, kind="stable")
            stamp = np.concatenate([np.asarray(p.column.stamp_ns, dtype=np.int64) for p in side_cols])[order]
            recv = np.concatenate([p.recv for p in side_cols])[order]
            ids = np.concatenate([np.full(p.recv.size, k, dtype=np.int64) for k, p in enumerate(side_cols)])[order]
            clock = self._clock[side].plan(stamp, recv, ids, [p.column.stream for p in side_cols])
            if clock is None:
                return False
            position = np.empty(seq.size, dtype=np.int64)
            position[order] = np.arange(seq.size)
            start = 0
            for p in side_cols:
                n = p.recv.size
                p.side_rows = position[start:start + n]
                start += n
                if np.any(np.diff(p.side_rows) <= 0):
                    return False
                p.clock = clock
                mapped = np.asarray(p.column.stamp_ns, dtype=np.int64) + clock.offsets[p.side_rows]
                if np.any(np.diff(mapped) < 0):
                    return False  # out-of-order arrivals: the per-message path inserts them
                col = p.column
                values = np.asarray(col.values, dtype=float)
                if col.stream == "joint_states":
                    index = {str(x): i for i, x in enumerate(col.names)}
                    order_j = np.array([index[x] for x in names], dtype=np.intp)
                    cols = np.concatenate([order_j, order_j + j, order_j + 2 * j])
                    values = values[:, cols] if not np.array_equal(order_j, np.arange(j)) else values
                    p.health_width = 2 * j
                elif col.stream == "wrench":
                    p.health_width = 6
                p.series = _Series(values.shape[1])
                p.series.load(mapped, values)
                p.series.plan_grid(step_ns if col.stream == "joint_states" else self._dt_ns, self._max_gap_ns,
                                   int(self.config.wrench_window_s * 1e9) if col.stream == "wrench" else None)
                if p.health_width:
                    p.health_values = p.series._buf_v[:, :p.health_width]
                    p.marks = plan_marks(self.config.features, p.health_values)
                    p.rows = plan_rows(self.config.features, col.stamp_ns, p.recv, mapped)
                    if p.rows is None:
                        p.lists = (np.asarray(col.stamp_ns, dtype=np.int64).tolist(), p.recv.tolist(),
                                   mapped.tolist())
                series[(side, col.stream)] = p.series
        self.joint_names = names
        self._stall_s = np.zeros(j)
        self._stall_any = False
        self._joints = {}
        for side in SIDES:
            found = series.get((side, "joint_states"))
            self._joints[side] = found if found is not None else _Series(3 * j)
            if (side, "wrench") in series:
                self._wrench[side] = series[(side, "wrench")]
            for kind in POSE_KINDS:
                if (side, f"{kind}_pose") in series:
                    self._poses[(side, kind)] = series[(side, f"{kind}_pose")]
        for p in planned:
            if p.health_width:
                p.health = self._health[(p.column.side, p.column.stream)]
        self._planned = planned
        self._planned_sides = [(side, plans) for side in SIDES
                               if (plans := [p for p in planned if p.column.side == side and p.clock is not None])]
        self._grid_plan = _build_grid_plan(self)
        return True

    def plan_ticks(self, ticks_ns: np.ndarray, inclusive: bool = False) -> None:
        """Tell planned columns the tick times to come: each tick feeds the rows received
        before it (``inclusive``: up to it) with :meth:`feed_columns` first. Precomputes
        what the feed sets and the analysis then reads of the stream trackers (the same values)."""
        self._sync_fed()
        ticks = np.sort(np.asarray(ticks_ns, dtype=np.int64)) + (1 if inclusive else 0)
        self._ticks = None
        if not self._planned_sides or not ticks.size:
            return
        # The rows each tick feeds, found at once (feed_columns finds the tick by its time).
        cuts = [np.searchsorted(p.recv, ticks, side="left") for p in self._planned]
        of_stream = {id(p): c for p, c in zip(self._planned, cuts, strict=True)}
        plan = _TickPlan(ticks.tolist(), [], [], [], [], {})
        for side, plans in self._planned_sides:
            clock = plans[0].clock
            clock.plan_ticks(sum(of_stream[id(p)] for p in plans))  # type: ignore[union-attr]
            plan.clocks.append((self._clock[side], clock))  # type: ignore[arg-type]
        for p, counts in zip(self._planned, cuts, strict=True):
            p.tick_cuts = counts.tolist()
            health = p.health is not None and p.marks is not None and p.health_values is not None
            if health:
                recv: list[int | None] = p.recv[np.maximum(counts - 1, 0)].tolist()
                for k in np.flatnonzero(counts == 0).tolist():
                    recv[k] = None
                p.tick_recv = recv
                if p.rows is not None:
                    p.health_ticks = plan_tick_feeds(p.health, p.marks, p.rows, p.health_values,  # type: ignore[arg-type]
                                                     counts)
            if p.series is None or p.refused_list or p.health_ticks is None and health:
                # Fed one by one at the ticks that move its rows or its refusals.
                moved = counts[1:] > counts[:-1]
                if p.refused_list:
                    refused = np.searchsorted(np.asarray(p.refused_list, dtype=np.int64), ticks, side="left")
                    moved |= refused[1:] > refused[:-1]
                for k in (np.flatnonzero(moved) + 1).tolist():
                    plan.other.setdefault(k, []).append(p)
            else:
                plan.reveal.append((p.series, p.tick_cuts))
                if p.health_ticks is not None:
                    plan.recv.append((p.series, p.tick_recv))  # type: ignore[arg-type]
                    plan.health.append(p.health_ticks)
            # The sim side's health reports dropouts only (see _analyse): no jitter statistics.
            if health and p.column.side != "sim":
                plan_jitter(p.health, np.asarray(p.column.stamp_ns, dtype=np.int64),  # type: ignore[arg-type]
                            np.concatenate((counts, [p.recv.size])))
        self._plan_ready(plan)
        self._ticks = plan

    def _plan_ready(self, plan: _TickPlan) -> None:
        """Per tick, what :meth:`_ready` compares a recent grid time with: the newest time
        of every joint and wrench stream seen (those with rows visible), when all four
        series move with the ticks (``plan.reveal``)."""
        if self.joint_names is None:
            return
        revealed = {id(series): cuts for series, cuts in plan.reveal}
        newest = None
        for side in SIDES:
            for series in (self._joints[side], self._wrench[side]):
                cuts = revealed.get(id(series))
                if cuts is None:
                    return
                n = np.asarray(cuts, dtype=np.int64)
                t = np.where(n > 0, series._buf_t[np.maximum(n - 1, 0)], np.iinfo(np.int64).max)
                newest = t if newest is None else np.minimum(newest, t)
        big = int(np.iinfo(np.int64).max)
        plan.ready_ns = [None if t == big else t for t in newest.tolist()]  # type: ignore[union-attr]
        plan.joints = self._joints

    @property
    def next_grid_ns(self) -> int | None:
        """The next grid time to analyse (None before both sides' joints arrived)."""
        return self._next_t_ns

    @property
    def columns_planned(self) -> bool:
        """Whether :meth:`plan_columns` took the input (else it is fed row by row)."""
        return bool(self._planned)

    def feed_columns(self, before_recv_ns: int | None = None) -> None:
        """Feed every planned row (and refusal) received before ``before_recv_ns`` (None: all)."""
        ticks = self._ticks
        if ticks is not None and before_recv_ns is not None:
            k = ticks.fed + 1
            if 0 < k < len(ticks.times) and ticks.times[k] == before_recv_ns:
                # Every stream fed exactly through tick k - 1 (the usual replay): the rows and
                # states plan_ticks kept for tick k.
                ticks.fed = k
                for series, cuts in ticks.reveal:
                    series._n = cuts[k]  # (series.reveal)
                for series, recvs in ticks.recv:
                    series.last_recv_ns = recvs[k]
                add_ticks(ticks.health, k)
                for clock, plan in ticks.clocks:
                    clock.feed_tick(plan, k)
                for p in ticks.other.get(k, ()):
                    p.fed = p.tick_cuts[k - 1]  # type: ignore[index]
                    self._feed_stream(p, p.tick_cuts[k], before_recv_ns, k)  # type: ignore[index]
                return
        self._sync_fed()
        planned = self._planned
        k = None  # the tick of plan_ticks at this time, if one: its rows and states are precomputed
        if ticks is not None and before_recv_ns is not None:
            k = bisect_left(ticks.times, before_recv_ns)
            if k == len(ticks.times) or ticks.times[k] != before_recv_ns:
                k = None
        cuts: Sequence[int]
        if k is not None:
            # A stream (a side) fed beyond a cut, by an earlier call with a later time, skips it either way.
            cuts = [p.tick_cuts[k] for p in planned]  # type: ignore[index]
        else:
            cuts = [p.recv.size if before_recv_ns is None
                    else max(p.fed, int(np.searchsorted(p.recv, before_recv_ns, side="left"))) for p in planned]
        if self.first_recv_ns is None:
            # The first row fed sets the run clock, as the first on_* call would.
            firsts = [int(p.recv[p.fed]) for p, hi in zip(planned, cuts) if hi > p.fed]
            if firsts:
                self.first_recv_ns = min(firsts)
        for p, hi in zip(planned, cuts):
            self._feed_stream(p, hi, before_recv_ns, k)
        for side, plans in self._planned_sides:
            # The side's rows received before a time are a prefix of its feed order (plan_columns).
            if k is not None:
                self._clock[side].feed_tick(plans[0].clock, k)  # type: ignore[arg-type]
            else:
                self._clock[side].feed_planned(plans[0].clock, sum(p.fed for p in plans))  # type: ignore[arg-type]
        if ticks is not None and k is not None and all(p.fed == p.tick_cuts[k] for p in planned):  # type: ignore[index]
            ticks.fed = k

    def _sync_fed(self) -> None:
        """Bring ``_PlannedStream.fed`` up to the ticks fed by ``_feed_next_tick`` (then
        leave it: the next feed is not the next tick's)."""
        ticks = self._ticks
        if ticks is not None and ticks.fed >= 0:
            for p in self._planned:
                p.fed = p.tick_cuts[ticks.fed]  # type: ignore[index]
            ticks.fed = -1

    def _feed_stream(self, p: _PlannedStream, hi: int, before_recv_ns: int | None, k: int | None) -> None:
        """Feed one planned stream's refusals received before ``before_recv_ns`` and its rows up to ``hi``."""
        if p.refused_list:
            col = p.column
            refused = p.refused_list
            r_hi = len(refused) if before_recv_ns is None else bisect_left(refused, before_recv_ns, p.refused_fed)
            for i in range(p.refused_fed, r_hi):
                self.on_rejected(col.side, col.stream, col.refused_reasons[i])
            p.refused_fed = max(p.refused_fed, r_hi)
        lo = p.fed
        if hi <= lo:
            return
        p.fed = hi
        series = p.series
        if series is None:  # commands
            for i in range(lo, hi):
                start_ns, names, points = p.column.commands[i]
                self.on_command(int(start_ns), int(p.recv[i]), names, points)
            return
        series._n = hi  # (series.reveal)
        health = p.health
        if health is None or p.marks is None or p.health_values is None:
            return
        if k is not None and p.health_ticks is not None:
            # (add_planned with the tick's state: hi is this tick's cut)
            series.last_recv_ns = p.tick_recv[k]  # type: ignore[index]
            add_rows(health, p.marks, lo, hi, p.health_values, p.rows, p.health_ticks.states[k])  # type: ignore[arg-type]
        else:
            series.last_recv_ns = p.recv.item(hi - 1)
            add_planned(health, p.marks, lo, hi, *p.lists, p.health_values, p.rows)

    # ------------------------------------------------------------------ ticking
    def _streams_seen(self) -> list[tuple[_Series, StreamHealth]]:
        """(series, health) of every joint and wrench stream seen (see :meth:`_ready`).

        Once all four are seen the list is final (a trimmed series keeps its newest rows)
        until the series are replaced, which replaces ``_joints``.
        """
        seen = self._seen
        if seen is not None and seen[0] is self._joints:
            return seen[1]
        out = []
        for side in SIDES:
            for topic, series in (("joint_states", self._joints.get(side)), ("wrench", self._wrench[side])):
                if series is None or not len(series):
                    continue
                out.append((series, self._health[(side, topic)]))
        if len(out) == 2 * len(SIDES):
            self._seen = (self._joints, out)
        return out

    def tick(self, now_ns: int) -> TickOutput:
        """Analyse every grid time that is ready at now_ns; return outputs since last tick."""
        now_ns = int(now_ns)
        self._last_tick_ns = now_ns
        joints = self._joints
        sim_q, real_q = joints.get("sim"), joints.get("real")
        if self.joint_names is not None and sim_q._n > sim_q._start and real_q._n > real_q._start:  # (both seen)
            if self._next_t_ns is None:
                first = max(int(self._joints[s].times[0]) for s in SIDES)
                self._next_t_ns = -(-first // self._dt_ns) * self._dt_ns
            backlog_ns = self._constants.backlog_ns
            if self._next_t_ns < now_ns - backlog_ns:
                self._next_t_ns = -(-(now_ns - backlog_ns) // self._dt_ns) * self._dt_ns
            horizon_ns = self._constants.horizon_ns
            streams: list[tuple[_Series, StreamHealth]] | None = None  # built only when a grid time is due
            # At a planned tick fed in order, _ready's test of a recent grid time was computed for it.
            ticks = self._ticks
            ready_ns = (ticks.ready_ns[ticks.fed] if ticks is not None and ticks.fed >= 0 and ticks.ready_ns is not None
                        and ticks.joints is joints else None)
            analysed = False
            # Infinite inputs (flagged and counted at intake) make inf - inf: NaN by design,
            # kept out of the residuals by the validity masks, not a warning on stderr.
            with np.errstate(invalid="ignore"):
                while self._next_t_ns <= now_ns:
                    t = self._next_t_ns
                    if ready_ns is not None and t > now_ns - horizon_ns:
                        if t > ready_ns:
                            break
                    else:
                        if streams is None:
                            streams = self._streams_seen()
                        if not self._ready(t, now_ns, horizon_ns, backlog_ns, streams):
                            break
                    # Advance first: an analysis cut short (Ctrl-C lands anywhere) is never repeated.
                    self._next_t_ns = t + self._dt_ns
                    analysed = True
                    self._analyse(t)
            if analysed and (self._trimmed_ns is None or self._next_t_ns - self._trimmed_ns >= TRIM_EVERY_NS):
                # Histories are trimmed now and then (buffer_s is far longer than any query reaches).
                self._trimmed_ns = self._next_t_ns
                self._trim(self._next_t_ns)
        if not self._onset_done:
            self._find_motion_onset()
        out, self._pending = self._pending, TickOutput()
        return out

    def analysis_due(self) -> bool:
        """Whether the next grid time has a sample at or after it on every joint and wrench
        stream seen (cheap): a caller ticking on input ticks only when this holds, and on a
        timer for the rest (stalls, outputs without input)."""
        t = self._next_t_ns
        if t is None:
            return self.joint_names is not None and all(len(self._joints[s]) for s in SIDES)
        for side in SIDES:
            for series in (self._joints[side], self._wrench[side]):
                if len(series) and (series.last_ns or -1) < t:
                    return False
        return True

    def _find_motion_onset(self) -> None:
        """Watch the real arm leave its initial rest: the run start as the robots lived it.

        Robots start a trajectory on receipt, so the real arm's first motion out of rest is
        when the run started for it. The first command's receipt here can lag that by the
        monitor's backlog, or be a later command when the first one was missed (discovery
        on a loaded machine); t0 is the earlier of the two. The rest level is learned over
        the first ``ONSET_QUIET_S`` of samples; an arm already moving then gives no onset.
        """
        if self._onset_done or "real" not in self._joints:
            return
        series = self._joints["real"]
        if len(series) < 2:
            return
        j = len(self.joint_names or ())
        times = series.times
        quiet_ns = int(ONSET_QUIET_S * 1e9)
        if self._onset_first_ns is None:
            self._onset_first_ns = int(times[0])
        rest_end = self._onset_first_ns + quiet_ns
        if self._onset_threshold is None:
            if int(times[-1]) < rest_end:
                return
            hi = int(np.searchsorted(times, rest_end, side="right"))
            rest = np.max(np.abs(np.nan_to_num(series.values[:hi, j:2 * j])))
            if rest > ONSET_MAX_REST_RAD_S:
                self._onset_done = True  # moving from the start: no rest to leave
                return
            self._onset_threshold = max(ONSET_SPEED_RAD_S, 3.0 * float(rest))
            self._onset_scanned_ns = rest_end
        lo = int(np.searchsorted(times, self._onset_scanned_ns, side="right"))
        if lo >= len(times):
            return
        speed = np.max(np.abs(np.nan_to_num(series.values[lo:, j:2 * j])), axis=1)
        moving = np.nonzero(speed > self._onset_threshold)[0]
        if moving.size:
            self._motion_onset_ns = int(times[lo + moving[0]])
            self._onset_done = True
        else:
            self._onset_scanned_ns = int(times[-1])

    @staticmethod
    def _ready(t: int, now_ns: int, horizon_ns: int, backlog_ns: int,
               streams: list[tuple[_Series, StreamHealth]]) -> bool:
        """Whether grid time t can be analysed: every stream reached it, or the late ones are
        silent for longer than their patience (a stall), or t is max_backlog_s old.

        A stream that is late but still delivering (or silent no longer than its patience:
        its learned delivery bursts, at least horizon_s) is a backlog in the monitor's
        queue, not a stall: waiting for it keeps load from faking dropouts.
        """
        if t > now_ns - horizon_ns:
            for s, _ in streams:
                n = s._n  # (s.last_ns inline: asked twice per grid time)
                if n <= s._start or s._buf_t.item(n - 1) < t:
                    return False
            return True
        if t <= now_ns - backlog_ns:
            return True
        for s, health in streams:
            if (s.last_ns or -1) < t and s.last_recv_ns is not None:
                patience_ns = max(horizon_ns, int(1.2 * health.burst_silence_ns(now_ns)))
                if s.last_recv_ns > now_ns - patience_ns:
                    return False
        return True

    def _trim(self, t_ns: int) -> None:
        before = t_ns - int(self.config.buffer_s * 1e9)
        for series in list(self._joints.values()) + list(self._wrench.values()) + list(self._poses.values()):
            series.trim(before)

    # ------------------------------------------------------------------ analysis
    def _pure_joints(self, t: int) -> "_Pure":
        """What the analysis at grid time t reads from the streams alone (no engine state),
        with :meth:`_pure_rest`: the per-tick twin of :meth:`_GridPlan.at`, which gives the
        same values for all grid times at once (same arithmetic: :func:`_norm` and
        :func:`_rotate` are sequential float operations, as the plan's numpy columns are).
        This part is all the joint record needs, so it leaves before the rest is read."""
        j = len(self.joint_names or ())
        gap = self._max_gap_ns
        p = _Pure()
        p.sim_row = sim_row = self._joints["sim"].sample(t, gap)
        p.real_row = real_row = self._joints["real"].sample(t, gap)
        p.joints_valid = bool(np.isfinite(sim_row[:j]).all() and np.isfinite(real_row[:j]).all())
        p.res = res = real_row - sim_row
        p.joint_record = bool(p.joints_valid or np.any(np.isfinite(res[:j])))
        return p

    def _pure_rest(self, p: "_Pure", t: int) -> None:
        """The rest of the per-tick reads after :meth:`_pure_joints`: poses, wrench, motion, derived values."""
        cfg = self.config
        gap = self._max_gap_ns
        ee = {s: self._poses[(s, "ee")].sample(t, gap) for s in SIDES}
        obj = {s: self._poses[(s, "object")].sample(t, gap) for s in SIDES}
        p.ee_sim, p.ee_real, p.obj_sim, p.obj_real = ee["sim"], ee["real"], obj["sim"], obj["real"]
        p.ee_err = ee_err = ee["real"][:3] - ee["sim"][:3]
        p.ee_err_norm = _norm(ee_err) if np.isfinite(ee_err).all() else float("nan")
        win_ns = int(cfg.tip_velocity_window_s * 1e9)
        tip_vel = {}
        for s in SIDES:
            past = self._poses[(s, "ee")].sample(t - win_ns, gap)[:3]
            v = (ee[s][:3] - past) / cfg.tip_velocity_window_s
            tip_vel[s] = v if np.isfinite(v).all() else np.zeros(3)
        p.tip_sim, p.tip_real = tip_vel["sim"], tip_vel["real"]
        p.obj_err = p.obj_tool_err = p.real_tool_object_m = float("nan")
        if np.isfinite(obj["real"][:3]).all() and np.isfinite(ee["real"][:3]).all():
            p.real_tool_object_m = _norm(obj["real"][:3] - ee["real"][:3])
        if np.isfinite(obj["sim"][:3]).all() and np.isfinite(obj["real"][:3]).all():
            p.obj_err = _norm(obj["real"][:3] - obj["sim"][:3])
            if np.isfinite(ee["sim"][:3]).all() and np.isfinite(ee["real"][:3]).all():
                p.obj_tool_err = abs(_norm(obj["real"][:3] - ee["real"][:3]) - _norm(obj["sim"][:3] - ee["sim"][:3]))
        p.sim_obj_speed = float("nan")
        if np.isfinite(obj["sim"][:3]).all():
            past = self._poses[("sim", "object")].sample(t - int(cfg.object_velocity_window_s * 1e9), gap)[:3]
            if np.isfinite(past).all():
                p.sim_obj_speed = _norm(obj["sim"][:3] - past) / cfg.object_velocity_window_s

        # wrench: window means (contact chatters sample to sample), in the world frame
        win_w_ns = int(cfg.wrench_window_s * 1e9)
        p.sim_w = sim_w = self._wrench["sim"].window_mean(t - win_w_ns, t)
        p.real_w = real_w = self._wrench["real"].window_mean(t - win_w_ns, t)
        p.wrench_valid = bool(np.isfinite(sim_w).all() and np.isfinite(real_w).all())
        world = {}
        rots = {side: ee[side][3:] for side in SIDES}
        ok = {side: bool(np.isfinite(r).all() and _norm(r) > 0) for side, r in rots.items()}
        for side, w in (("sim", sim_w), ("real", real_w)):
            # Both forces go to the world frame, or neither: with one side's pose missing (late),
            # the other's orientation stands in (the arms agree closely; a disagreement shows
            # in the joints), so a frame mix-up never reads as a force residual.
            rot = rots[side] if ok[side] else rots["real" if side == "sim" else "sim"]
            if (ok["sim"] or ok["real"]) and np.isfinite(w[:3]).all():
                world[side] = _rotate(rot, w[:3])
            else:
                world[side] = w[:3].copy()
        # Without any orientation both stay in the sensor frame, with a tool weight of its own.
        p.frame = "world" if ok["sim"] or ok["real"] else "sensor"
        p.moving = self._side_moving("sim", t)
        p.ee_angle = p.obj_angle = None
        self._derive(p, world["sim"], world["real"])

    def _derive(self, p: "_Pure", world_sim: np.ndarray, world_real: np.ndarray) -> None:
        """The residuals, squares, norms and masks ``_analyse`` takes from the stream values
        and the forces in the world frame (the per-tick twin of the grid plan's columns;
        same float operations)."""
        cfg = self.config
        j = len(self.joint_names or ())
        res = p.res  # with joint_record, from _pure_joints
        q_res, eff_res = res[:j], res[2 * j:]
        q_sq = q_res ** 2
        eff_sq = np.where(np.isfinite(eff_res), eff_res ** 2, 0.0)
        p.q_abs = np.abs(q_res)
        p.q_sq_sum = float(np.sum(q_sq))
        p.world_sim_ok = bool(np.isfinite(world_sim).all())
        p.world_real_ok = bool(np.isfinite(world_real).all())
        p.raw_force = world_real - world_sim
        p.torque_res = p.real_w[3:] - p.sim_w[3:]
        p.force_norm = _norm(p.raw_force) if p.wrench_valid else float("nan")
        p.contact_force_res = p.real_w[:3] - p.sim_w[:3]
        p.contact_force_norm = _norm(p.contact_force_res)
        p.torque_norm = _norm(p.torque_res)
        qd_sim, qd_real = p.sim_row[j:2 * j], p.real_row[j:2 * j]
        p.stalling = (np.abs(qd_real) < cfg.stall_speed_rad_s) & (np.abs(qd_sim) > cfg.stall_sim_speed_rad_s)
        p.slow_real = np.abs(qd_real) < 2 * cfg.stall_speed_rad_s
        p.ee_both = bool(np.isfinite(p.ee_sim).all() and np.isfinite(p.ee_real).all())
        p.obj_both = bool(np.isfinite(p.obj_sim).all() and np.isfinite(p.obj_real).all())
        p.energy = residual_energy(q_res if p.joints_valid else np.zeros(0), p.force_norm,
                                   cfg.ledger_q_scale_rad, cfg.ledger_force_scale_n)
        p.world_sim_l, p.world_real_l = world_sim.tolist(), world_real.tolist()
        p.raw_force_l, p.torque_res_l = p.raw_force.tolist(), p.torque_res.tolist()
        p.obj_err_l = (p.obj_real[:3] - p.obj_sim[:3]).tolist()
        p.q_sq_l, p.eff_sq_l = q_sq.tolist(), eff_sq.tolist()
        p.stalling_any = bool(p.stalling.any())

    def _analyse(self, t: int) -> None:
        cfg = self.config
        k = self._constants
        self.analysis_count += 1
        j = len(self.joint_names or ())
        dt_s = k.dt_s
        row = self._grid_plan.at(t, self) if self._grid_plan is not None else None
        p = None
        if row is None:
            p = self._pure_joints(t)  # the rest after the joint record (below)
            res, joint_record = p.res, p.joint_record
        else:
            res, joint_record = row[_ROW_RES], row[_ROW_JOINT_RECORD]
        q_res = res[:j]
        qd_res = res[j:2 * j]
        eff_res = res[2 * j:]
        self._last_t_ns = t
        # The joint record needs nothing this grid time's analysis decides (the latency
        # estimate is the fits' so far): it is formed first, so it can leave first. Like the
        # other records, it shares the per-tick arrays (see below).
        offset_s, offset_std_s = self._offset()
        if joint_record:
            latency_s, latency_std_s = self._latency()
            # The records are made with positional fields, in their order (keywords cost
            # twice the construction; test_column_ingest holds each field's value).
            record = JointDivergenceRecord(
                t, self.joint_names or (), q_res, qd_res, eff_res,  # residuals: position, velocity, effort
                offset_s, offset_std_s, latency_s, latency_std_s, False,  # clock offset, latency, compensated
            )
            if self.joint_record_sink is not None:
                self.joint_record_sink(record)
            else:
                self._pending.joints.append(record)
        if p is not None:
            self._pure_rest(p, t)
            row = p.as_row()
        # The row in _Pure.__slots__ order, into locals (test_column_ingest holds the order).
        (sim_row, real_row, joints_valid, ee_sim, ee_real, obj_sim, obj_real, ee_err,
         ee_err_norm, tip_sim, tip_real, obj_err, obj_tool_err, real_tool_object_m,
         sim_obj_speed, sim_w, real_w, wrench_valid, frame, moving,
         res, q_abs, q_sq_sum, joint_record, world_sim_ok, world_real_ok,
         raw_force, torque_res, force_norm, contact_force_res, contact_force_norm,
         torque_norm, stalling, slow_real, ee_both, obj_both, energy, ee_angle, obj_angle,
         world_sim_l, world_real_l, raw_force_l, torque_res_l, obj_err_l,
         q_sq_l, eff_sq_l, stalling_any) = row
        # 3-vector state in Python floats: the same float operations as numpy's elementwise
        # ones (x*x + y*y + z*z is _norm's ordered sum), at a fraction of a small-array call.
        world_sim = world_sim_l
        weight = self._tool_weight[frame]
        if world_sim_ok:
            if weight is None:
                weight = self._tool_weight[frame] = tuple(world_sim)
            elif _norm3(_sub3(world_sim, weight)) < k.contact_release_n:
                weight = self._tool_weight[frame] = _ema3(weight, world_sim, k.weight_alpha)
        base = weight if weight is not None else (0.0, 0.0, 0.0)
        contact = self._contact
        sim_force_n = 0.0
        if world_sim_ok:
            sim_force_n = _norm3(_sub3(world_sim, base))
            contact["sim"] = sim_force_n > (k.contact_release_n if contact["sim"] else k.contact_force_n)
        if world_real_ok:
            real_force_n = _norm3(_sub3(world_real_l, base))
            contact["real"] = real_force_n > (k.contact_release_n if contact["real"] else k.contact_force_n)
        sim_contact = contact["sim"]
        real_contact = contact["real"]
        if sim_contact:
            self._sim_contact_last_ns = t
        sim_contact_recent = self._sim_contact_last_ns is not None and (
            t - self._sim_contact_last_ns <= k.contact_recent_ns
        )

        # object creeping away from where the sim has it (relative velocity of the error)
        obj_speed = math.nan
        if math.isfinite(obj_err):
            err_vec = obj_err_l
            self._obj_hist.append((t, err_vec))
            lag_ns = k.object_lag_ns
            while len(self._obj_hist) > 1 and self._obj_hist[1][0] <= t - lag_ns:
                self._obj_hist.popleft()
            t_old, e_old = self._obj_hist[0]
            if t - t_old >= lag_ns // 2:
                obj_speed = _norm3(_sub3(err_vec, e_old)) / ((t - t_old) * 1e-9)
            # How far the object wandered on its own (nothing the sim models touching it).
            if obj_err < k.object_error_m:
                self._obj_free_drift_m = 0.0
            elif not sim_contact_recent and self._obj_last_err is not None:
                self._obj_free_drift_m += _norm3(_sub3(err_vec, self._obj_last_err))
            self._obj_last_err = err_vec
        else:
            self._obj_hist.clear()
            self._obj_last_err = None

        # smoothed residual magnitudes
        alpha = k.smooth_alpha  # of every smoothed residual
        res_sq, eff_sq = self._res_sq, self._eff_sq
        if joints_valid:
            if res_sq is not None and eff_sq is not None and math.isfinite(q_sq_sum) and math.isfinite(sum(eff_sq_l)):
                # _smooth_list's arithmetic where every value is finite (the usual), written out:
                # two calls and their tests per element were a third of the smoothing.
                keep = k.smooth_keep
                res_sq = [keep * a + alpha * b for a, b in zip(res_sq, q_sq_l, strict=True)]
                eff_sq = [keep * a + alpha * b for a, b in zip(eff_sq, eff_sq_l, strict=True)]
            else:
                res_sq = _smooth_list(res_sq, q_sq_l, alpha)
                eff_sq = _smooth_list(eff_sq, eff_sq_l, alpha)
            self._res_sq, self._eff_sq = res_sq, eff_sq
        if res_sq is None or eff_sq is None:
            joint_residual = effort_residual = 0.0
        elif k.smooth_keep > 0:  # (no NaN in the lists then: see _smooth_list; max is _max_list)
            joint_residual, effort_residual = math.sqrt(max(res_sq)), math.sqrt(max(eff_sq))
        else:
            joint_residual, effort_residual = math.sqrt(_max_list(res_sq)), math.sqrt(_max_list(eff_sq))

        # smoothed wrench residuals (an F/T bias shows as a force the joints do not feel)
        torque_res_vec = _NAN3
        if wrench_valid:
            torque_res_vec = torque_res
            # (_ema3 written out)
            keep = k.smooth_keep
            (fx, fy, fz), (rx, ry, rz) = self._force_res, raw_force_l
            self._force_res = (keep * fx + alpha * rx, keep * fy + alpha * ry, keep * fz + alpha * rz)
            (tx, ty, tz), (rx, ry, rz) = self._torque_res, torque_res_l
            self._torque_res = (keep * tx + alpha * rx, keep * ty + alpha * ry, keep * tz + alpha * rz)

        # stalled joints
        stalled: tuple[str, ...] = ()
        if joints_valid and self._stall_s is not None and (
                stalling_any or self._stall_any or cfg.attribution.stall_min_s <= 0):
            # (Nothing stalling and no stall time: the update below leaves all zeros.)
            # A stalled joint stays stalled until it moves again (the sim may pass by it).
            latched = (self._stall_s >= cfg.attribution.stall_min_s) & slow_real
            self._stall_s = np.where(stalling | latched, self._stall_s + dt_s, 0.0)
            names = self.joint_names or ()
            stalled = tuple(names[i] for i in np.flatnonzero(self._stall_s > 0).tolist())
            self._stall_any = bool(stalled)
        stall_s = float(np.max(self._stall_s)) if self._stall_s is not None and stalled else 0.0

        # delay/gain/offset fit
        if joints_valid and (self._last_fit_ns is None or t - self._last_fit_ns >= k.fit_period_ns):
            self._last_fit_ns = t
            self._fit = self._fit_delay(t)
        if (self._fit is not None and joint_residual > k.unexplained_residual_rad
                and self._fit.explained < k.dynamics_min_explained):
            self._unexplained_s += dt_s
        else:
            self._unexplained_s = 0.0

        # health: every pathology of the real streams; of the sim's, only a lost stream
        # (its silence would otherwise starve the residuals without a word).
        other_moving = moving
        flags = []
        now_ns = self._last_tick_ns
        for stream, topic, h, twin, sibling, dropout_only in self._health_order:
            if h.sample_count == 0:
                continue
            # (positional: other_moving, now_ns, twin, siblings, dropout_only)
            stream_flags = h.flags(t, other_moving.get(topic, True), now_ns, twin if twin.sample_count else None,
                                   (sibling,) if sibling.sample_count else (), dropout_only)
            if stream_flags is ALL_INACTIVE or stream_flags is DROPOUT_INACTIVE:
                continue
            for fl in stream_flags:
                if fl.active:  # attribution reads the active flags only
                    flags.append(HealthFlag(fl.name, True, fl.severity, {"stream": stream, **fl.evidence}))

        if flags and any(fl.name in ("dropout", "nonfinite", "frozen", "stamp_jitter") for fl in flags):
            self._last_untrusted_ns = t
        since_untrusted = (t - self._last_untrusted_ns) * 1e-9 if self._last_untrusted_ns is not None else math.inf
        cmd_age = (t - self._last_command_ns) * 1e-9 if self._last_command_ns is not None else math.inf
        # One TickFeatures, refilled every grid time (attribution keeps none of it): building
        # it from 30 keywords cost more than the rules that read it.
        feats = self._feats
        feats.t_ns = t
        feats.joints_valid = joints_valid
        feats.joint_names = self.joint_names or ()
        feats.q_residual_rad = q_res
        feats.joint_residual_rad = joint_residual
        feats.effort_residual = effort_residual
        feats.force_residual_n = _norm3(self._force_res)
        feats.torque_residual_nm = _norm3(self._torque_res)
        feats.sim_force_n = sim_force_n
        feats.external_force_n = self._force_res
        feats.wrench_valid = wrench_valid
        feats.sim_contact = sim_contact
        feats.sim_contact_recent = bool(sim_contact_recent)
        feats.real_contact = real_contact
        feats.sim_tip_velocity_m_s = tip_sim
        feats.real_tip_velocity_m_s = tip_real
        feats.ee_error_m = ee_err_norm
        feats.object_error_m = obj_err
        feats.object_tool_error_m = obj_tool_err
        feats.object_error_speed_m_s = obj_speed
        feats.object_free_drift_m = self._obj_free_drift_m
        feats.real_tool_object_m = real_tool_object_m
        feats.sim_object_speed_m_s = sim_obj_speed
        feats.stalled_joints = stalled
        feats.stall_s = stall_s
        feats.fit = self._fit
        feats.unexplained_s = self._unexplained_s
        feats.command_age_s = cmd_age
        feats.sensor_flags = flags
        feats.since_untrusted_s = since_untrusted
        feats.since_active_s = {c: (t - ns) * 1e-9 for c, ns in self._last_active_ns.items()}
        feats.last_kind = self._last_kind  # (read by attribute only, updated after it)
        verdict = attribute(feats, cfg.attribution)
        self._last_attribution_top = verdict.top
        for c, (_, kind, _) in verdict.active.items():
            if c == "unauthored" and verdict.tail:
                continue  # a tail is measured from the last direct evidence: it never extends itself
            self._last_active_ns[c] = t
            self._last_kind[c] = kind
        for rec in self._events.update(t, verdict.active):
            if rec.action == ACTION_OPEN:
                self._ledger.count_event(rec.category)
            self._pending.events.append(rec)

        # ledger and run statistics
        self._ledger.add(t, verdict.top, energy)
        if joints_valid:
            self._q_abs.append(q_abs)
            self._sums["q_sq"] += q_sq_sum
            self._sums["q_n"] += q_res.size
            if len(self._calib_sim) < 200_000:
                # Views: the rows are never written after (a plan block's or this tick's sample).
                self._calib_sim.append(sim_row[:j])
                self._calib_real.append(real_row[:j])
                self._calib_t.append(t)
                self._calib_free.append(not sim_contact_recent and not real_contact)
        if math.isfinite(ee_err_norm):
            self._ee_err_sq.append(ee_err_norm ** 2)
            self._sums["ee_sq"] += ee_err_norm ** 2
            self._sums["ee_n"] += 1
        if wrench_valid:
            (self._force_contact if sim_contact else self._force_free).append(force_norm)
            self._sums["f_sq"] += force_norm ** 2
            self._sums["f_n"] += 1

        # records (the joint record went out first, above). They share the per-tick arrays,
        # which are made for this grid time (or are its row of a plan block) and never
        # written after: no copies.
        if self._next_contact_ns is None or t >= self._next_contact_ns:
            self._next_contact_ns = t + k.contact_period_ns
            if wrench_valid:
                self._pending.contacts.append(ContactRecord(
                    t, sim_w[:3], sim_w[3:], real_w[:3], real_w[3:],  # sim force, torque; real force, torque
                    contact_force_res, torque_res_vec, contact_force_norm, torque_norm,  # residuals, their norms
                    PHASE_CONTACT if sim_contact else PHASE_FREE, PHASE_CONTACT if real_contact else PHASE_FREE,
                ))
        if self._next_pose_ns is None or t >= self._next_pose_ns:
            self._next_pose_ns = t + k.pose_period_ns
            if ee_both:
                ee_fields = (
                    t, ee_sim[:3], ee_sim[3:], ee_real[:3], ee_real[3:],  # sim position, orientation; real's
                    ee_err, ee_err_norm, ee_angle if ee_angle is not None else _quat_angle(ee_real[3:], ee_sim[3:]),
                )
                if obj_both:
                    record = PoseDivergenceRecord(
                        *ee_fields, True, obj_sim[:3], obj_sim[3:], obj_real[:3], obj_real[3:],  # as the ee's
                        obj_err, obj_angle if obj_angle is not None else _quat_angle(obj_real[3:], obj_sim[3:]),
                    )
                else:  # (the object fields' defaults)
                    record = PoseDivergenceRecord(*ee_fields)
                self._pending.poses.append(record)

    def _side_moving(self, side: str, t: int) -> dict[str, bool]:
        """Whether each stream of a side changed over the last frozen-detection window."""
        out = {}
        win_ns = int(max(0.05, 2 * self.config.features.frozen_samples * 0.002) * 1e9)
        thr = self.config.features.frozen_motion_threshold
        for topic, series in (("joint_states", self._joints.get(side)), ("wrench", self._wrench[side])):
            if series is None or len(series) < 2:
                out[topic] = False
                continue
            lo = int(np.searchsorted(series.times, t - win_ns))
            hi = int(np.searchsorted(series.times, t, side="right"))
            v = series.values[lo:hi]
            if topic == "joint_states":
                v = v[:, : 2 * len(self.joint_names or ())]
            out[topic] = bool(v.shape[0] >= 2 and np.nanmax(np.abs(v - v[0])) > thr) if v.size else False
        return out

    def _fit_delay(self, t: int) -> DelayFit | None:
        """Fit real(t) ~ sim(t - d) + (g - 1)(sim(t - d) - mean) + b per joint, best d over a grid."""
        planned = self._grid_plan.fit_at(t) if self._grid_plan is not None else None
        fit, counted = planned if planned is not None else self._fit_at(t)
        if counted:
            n = self._fit_delays_n
            self._fit_delays[n] = fit.delay_s
            self._fit_delays_n = n = n + 1
            insort(self._fit_delays_sorted, float(fit.delay_s))
            self._fit_count += 1
            if n > 2000:
                self._fit_delays[:n - 1000] = self._fit_delays[1000:n].copy()
                self._fit_delays_n = n - 1000
                self._fit_delays_sorted = sorted(self._fit_delays[:n - 1000].tolist())
        return fit

    def _fit_query(self, t_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Times of the fit at grid times t_ns (F,): real at (F, n), sim at (F, D, n); delays (D,) in s."""
        cfg = self.config
        n = max(8, int(cfg.fit_window_s * cfg.analysis_rate_hz))
        times = np.asarray(t_ns, dtype=np.int64)[:, None] - np.arange(n)[::-1] * self._dt_ns
        delays = np.arange(0.0, cfg.fit_max_delay_s + 1e-12, cfg.fit_delay_step_s)
        d_ns = (delays * 1e9).astype(np.int64)
        return times, times[:, None, :] - d_ns[None, :, None], delays

    def _fit_at(self, t: int) -> tuple[DelayFit | None, bool]:
        """The fit at t from the visible samples, and whether it counts toward the latency."""
        j = len(self.joint_names or ())
        times, query, delays = self._fit_query(np.array([t]))
        n = times.shape[1]
        real = self._joints["real"].sample(times[0], self._max_gap_ns, cols=j)
        # The delays' samples share their times (~124 of 1,300 distinct): each is sampled once.
        at, where = np.unique(query.ravel(), return_inverse=True)
        sim = self._joints["sim"].sample(at, self._max_gap_ns, cols=j)[where.reshape(len(delays), n)]  # (D, n, J)
        ok = np.all(np.isfinite(real), axis=1) & np.all(np.isfinite(sim), axis=(0, 2))
        if not ok.all():
            # Samples lost on the way (a loaded monitor's queue) leave holes: fit on the rest
            # when most of the window is there.
            if ok.sum() < FIT_MIN_COVERAGE * n:
                return None, False
            real, sim = real[ok], sim[:, ok]
        sim = np.ascontiguousarray(sim.transpose(1, 0, 2))[:, None]  # (n, 1, D, J)
        return _fits(real[None], sim, delays, self.config.fit_min_motion_rad)[0]

    def _latency(self) -> tuple[float, float]:
        if not self._fit_delays_n:
            return 0.0, 0.0
        # Asked at every analysis time; the delays change only when a fit adds one.
        if self._latency_cache is None or self._latency_cache[0] != self._fit_count:
            arr = self._fit_delays[:self._fit_delays_n]
            # np.median's value (the middle one, or the mean of the middle two) without its partition.
            ordered = self._fit_delays_sorted
            mid = len(ordered) // 2
            median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
            self._latency_cache = (self._fit_count, (median, _std(arr)))
        return self._latency_cache[1]

    def _offset(self) -> tuple[float, float]:
        sim, real = self._clock["sim"], self._clock["real"]
        if sim.offset_ns is None or real.offset_ns is None:
            return 0.0, 0.0
        return (real.offset_ns - sim.offset_ns) * 1e-9, math.hypot(sim.spread_s, real.spread_s)

    def transport_floor_s(self) -> dict[str, float]:
        """Per side seen, the current offset from its stamps to the monitor clock: the
        floor of its receive delay (seconds; stamps map to stamp plus this)."""
        return {side: clock.offset_ns * 1e-9 for side, clock in self._clock.items() if clock.offset_ns is not None}

    # ------------------------------------------------------------------ summaries
    @property
    def clock_resets(self) -> int:
        """Clock resets detected on either side."""
        return sum(c.resets for c in self._clock.values())

    def _t0_ns(self) -> int:
        if self._motion_onset_ns is not None and self.first_command_ns is not None:
            return min(self._motion_onset_ns, self.first_command_ns)
        if self.first_command_ns is not None:
            return self.first_command_ns
        return self.first_recv_ns or 0

    def summary(self, now_ns: int) -> SummaryRecord:
        """Ledger, rms figures, counts and timing at now_ns."""
        rows, un_run, un_win = self._ledger.rows()
        sums = self._sums
        q_rms = math.sqrt(sums["q_sq"] / sums["q_n"]) if sums["q_n"] else 0.0
        ee_rms = math.sqrt(sums["ee_sq"] / sums["ee_n"]) if sums["ee_n"] else 0.0
        f_rms = math.sqrt(sums["f_sq"] / sums["f_n"]) if sums["f_n"] else 0.0
        latency_s, _ = self._latency()
        offset_s, _ = self._offset()
        return SummaryRecord(
            stamp_ns=int(now_ns),
            elapsed_s=max(0.0, (int(now_ns) - self._t0_ns()) * 1e-9) if self.first_recv_ns is not None else 0.0,
            window_s=self.config.summary_window_s,
            ledger=rows,
            unexplained_share_run=un_run,
            unexplained_share_window=un_win,
            joint_position_rms_rad=q_rms,
            ee_position_rms_m=ee_rms,
            force_residual_rms_n=f_rms,
            event_count=self._events.event_count,
            open_event_count=len(self._events.open_categories()),
            rejected_count=int(sum(self.rejected.values())),
            rejected_by_reason=dict(self.rejected),
            clock_offset_s=offset_s,
            latency_s=latency_s,
            clock_resets=self.clock_resets,
        )

    def finish(self, now_ns: int | None = None) -> TickOutput:
        """End of run: analyse what remains (up to now_ns) and close every open event."""
        if now_ns is not None:
            out = self.tick(int(now_ns))
        else:
            out = TickOutput()
        for rec in self._events.finish():
            out.events.append(rec)
        return out

    def event_dicts(self) -> list[dict[str, Any]]:
        """Closed and open events as summary.json entries (seconds from the first command)."""
        t0 = self._t0_ns()
        out = []
        for rec in list(self._events.closed) + self._events.open_events():
            out.append({
                "id": rec.id,
                "category": rec.category,
                "kind": rec.kind,
                "start_s": round((rec.start_ns - t0) * 1e-9, 6),
                "end_s": round((rec.end_ns - t0) * 1e-9, 6),
                "severity": rec.severity,
                "open": rec.action != ACTION_CLOSE,
                "evidence": dict(rec.evidence),
                "snapshot": "",
            })
        out.sort(key=lambda e: (e["start_s"], e["category"]))
        return out

    def to_seconds(self, t_ns: Any) -> Any:
        """Convert a monitor-time stamp (int), or an array of them, to seconds from the first
        mirrored command (an exact integer difference, then one product)."""
        if np.ndim(t_ns):
            return (np.asarray(t_ns, dtype=np.int64) - self._t0_ns()) * 1e-9
        return (int(t_ns) - self._t0_ns()) * 1e-9

    def run_summary(self) -> dict[str, Any]:
        """summary.json content: events, timing, residuals, calibration, ledger, counts."""
        names = self.joint_names or ()
        residuals: dict[str, Any] = {"joints": {}}
        if self._q_abs:
            cols = stack_rows(self._q_abs).T.copy()  # one joint a contiguous row
            p95 = np.percentile(cols, 95, axis=1)  # (each row's own percentile, in one call)
            for i, name in enumerate(names):
                col = cols[i]
                residuals["joints"][name] = {
                    "rms_rad": float(np.sqrt(np.mean(col ** 2))),
                    "max_rad": float(np.max(col)),
                    "p95_rad": float(p95[i]),
                }

        def _stats(values: Iterable[float]) -> dict[str, Any]:
            values = list(values)
            if not values:
                return {"samples": 0, "rms_n": None, "max_n": None, "p95_n": None}
            a = np.asarray(values)
            return {"samples": int(a.size), "rms_n": float(np.sqrt(np.mean(a ** 2))),
                    "max_n": float(np.max(a)), "p95_n": float(np.percentile(a, 95))}

        residuals["wrench"] = {"free": _stats(self._force_free), "contact": _stats(self._force_contact)}
        residuals["ee_position_rms_m"] = float(np.sqrt(np.mean(self._ee_err_sq))) if self._ee_err_sq else None
        latency_s, latency_std_s = self._latency()
        offset_s, offset_std_s = self._offset()
        return {
            "events": self.event_dicts(),
            "timing": {"clock_offset_s": offset_s, "clock_offset_std_s": offset_std_s,
                       "latency_s": latency_s, "latency_std_s": latency_std_s,
                       "clock_resets": self.clock_resets,
                       "delivery_delay_s": {f"{side}/{stream}": stats for side in SIDES
                                            for stream, stats in self._clock[side].delivery_delays_s().items()}},
            "residuals": residuals,
            "calibration": self._calibration(),
            "ledger": self._ledger.as_dict(),
            "counts": {"analysis_ticks": self.analysis_count, "commands": self.command_count,
                       "rejected": dict(self.rejected), "events": self._events.event_count},
        }

    def _calibration(self) -> list[dict[str, Any]]:
        """Per-joint delay, gain, offset and residual rms after the fit (real on sim, free-space ticks).

        Keys: joint, delay_s, gain, offset_rad, rms_before_rad, residual_rms_rad, samples.
        """
        from sim_real_bridge.core.calibration import fit_joint_calibration

        n = min(len(self._calib_t), len(self._calib_sim), len(self._calib_real), len(self._calib_free))
        if n < 10:
            return []
        t = np.asarray(self._calib_t[:n], dtype=np.int64)
        # Rows of an analysis interrupted between appends would break the strict order.
        keep = np.concatenate(([True], np.diff(t) > 0))
        fits = fit_joint_calibration(
            t[keep], stack_rows(self._calib_sim[:n])[keep], stack_rows(self._calib_real[:n])[keep],
            np.asarray(self._calib_free[:n], dtype=bool)[keep], int(self.config.fit_max_delay_s * 1e9),
            joint_names=self.joint_names, delay_step_ns=int(self.config.fit_delay_step_s * 1e9) // 2,
        )

        # Joints without enough free-space samples get no row (keeps summary.json strict JSON).
        return [{"joint": c.name, "delay_s": float(c.delay_s), "gain": float(c.gain), "offset_rad": float(c.offset_rad),
                 "rms_before_rad": float(c.rms_before_rad), "residual_rms_rad": float(c.rms_after_rad),
                 "samples": int(c.n_samples)}
                for c in fits if all(np.isfinite([c.delay_s, c.gain, c.offset_rad, c.rms_before_rad, c.rms_after_rad]))]


# --------------------------------------------------------------------------- replay
_FEEDERS = {
    "joint_state": "on_joint_state",
    "wrench": "on_wrench",
    "pose": "on_pose",
    "command": "on_command",
    "rejected": "on_rejected",
}


def analyze_streams(
    messages: Iterable[Mapping[str, Any]],
    config: EngineConfig | None = None,
    tick_period_s: float = 0.02,
    end_ns: int | None = None,
) -> tuple[DivergenceEngine, list[TickOutput]]:
    """Offline replay: feed recorded messages in receive order, ticking like the live node.

    Args:
        messages: dicts {"type": "joint_state"|"wrench"|"pose"|"command"|"rejected", ...}
            whose other keys are the keyword arguments of the matching ``on_*`` method;
            every type but "rejected" carries ``recv_ns``. They must be in receive order.
        config: engine parameters.
        tick_period_s: period of ticks on the receive clock (the live node's timer).
        end_ns: final tick time; defaults to the last recv_ns plus the engine horizon.

    Returns:
        (engine after ``finish``, list of non-empty tick outputs in order).

    Raises:
        ConfigError: an unknown message type, or messages out of receive order.
    """
    engine = DivergenceEngine(config)
    period_ns = int(round(tick_period_s * 1e9))
    if period_ns <= 0:
        raise ConfigError(f"tick_period_s must be > 0, got {tick_period_s}")
    outputs: list[TickOutput] = []
    next_tick: int | None = None
    last_recv: int | None = None

    def _keep(out: TickOutput) -> None:
        if out.joints or out.poses or out.contacts or out.events:
            outputs.append(out)

    for msg in messages:
        kind = msg.get("type")
        if kind not in _FEEDERS:
            raise ConfigError(f"unknown message type {kind!r}")
        kwargs = {k: v for k, v in msg.items() if k != "type"}
        recv = kwargs.get("recv_ns")
        if recv is not None:
            recv = int(recv)
            if last_recv is not None and recv < last_recv:
                raise ConfigError(f"messages are not in receive order ({recv} < {last_recv})")
            if next_tick is None:
                next_tick = (recv // period_ns + 1) * period_ns
            while recv >= next_tick:
                _keep(engine.tick(next_tick))
                next_tick += period_ns
            last_recv = recv
        getattr(engine, _FEEDERS[kind])(**kwargs)
    if last_recv is not None and next_tick is not None:
        stop = end_ns if end_ns is not None else last_recv
        while next_tick <= stop:
            _keep(engine.tick(next_tick))
            next_tick += period_ns
    _keep(engine.finish())
    return engine, outputs


def config_to_dict(config: EngineConfig) -> dict[str, Any]:
    """EngineConfig as a nested dict (for parameters files and reports)."""
    return asdict(config)
