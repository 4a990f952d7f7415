"""DivergenceEngine: both robots' streams in, residual columns and attributed gap events out.

The one analysis, called the same way by the live monitor and by replay:

1. intake (:mod:`~sim_real_bridge.core.inputs`): rows are handed over as they come
   (``add_*``: one message, or whole recorded columns), checked, mapped onto the
   monitor clock, and kept as time-sorted columns per stream with their health marks;
2. schedule: which grid times are due, and when each became due
   (:mod:`~sim_real_bridge.core.schedule`);
3. read stage: every stream sampled at a batch of due grid times
   (:mod:`~sim_real_bridge.core.read_stage`), the delay fits of the batch
   (:mod:`~sim_real_bridge.core.fits`);
4. scan: the stateful pass, attribution and events (:mod:`~sim_real_bridge.core.scan`);
5. outputs as columns (:mod:`~sim_real_bridge.core.outputs`).

The live node calls :meth:`DivergenceEngine.advance` with its clock (a few grid times
per call); replay calls :meth:`DivergenceEngine.run` with the live node's tick times
(thousands per batch). The engine never reads a clock: every row carries ``stamp_ns``
(its message's stamp) and ``recv_ns`` (when the monitor received it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sim_real_bridge.core import fits, intake, scan
from sim_real_bridge.core.attribution import CATEGORIES
from sim_real_bridge.core.config import EngineConfig, config_to_dict
from sim_real_bridge.core.events import ACTION_CLOSE, ACTION_OPEN, EventRecord, EventTracker
from sim_real_bridge.core.inputs import SIDES, STREAMS, StreamInputs
from sim_real_bridge.core.lag import BEHIND_S, LagMeter
from sim_real_bridge.core.ledger import ResidualLedger, residual_energy
from sim_real_bridge.core.outputs import (
    ContactColumns,
    EngineOutput,
    JointColumns,
    PoseColumns,
    SummaryRecord,
)
from sim_real_bridge.core.read_stage import (
    Grid,
    JointMap,
    ReadConfig,
    SideStreams,
    read_grid,
    read_health,
    read_joints,
)
from sim_real_bridge.core.schedule import NEVER_NS, decision_times, ready_times, receiving
from sim_real_bridge.core.statistics import RunStatistics

TRIM_EVERY_NS = 1_000_000_000

__all__ = ["DivergenceEngine", "EngineConfig", "EngineOutput", "config_to_dict"]


class DivergenceEngine:
    """Streams in, divergence columns and events out; see the module docstring.

    Args:
        config: engine parameters (validated).
        intake_config: how rows are checked.
        joint_map: explicit joint pairs (sim name -> real name); others pair by name.

    Raises:
        ConfigError: a parameter is invalid.
    """

    def __init__(self, config: EngineConfig | None = None, intake_config: intake.IntakeConfig | None = None,
                 joint_map: dict[str, str] | None = None) -> None:
        self.config = cfg = config or EngineConfig()
        cfg.validate()
        self.dt_ns = int(round(1e9 / cfg.analysis_rate_hz))
        self.horizon_ns = int(cfg.horizon_s * 1e9)
        #: The intake stage: staged, checked, clock-mapped and stored rows of both sides.
        self.inputs = StreamInputs(cfg, intake_config, joint_map)
        self._due_t: list[np.ndarray] = []  # live: grid times due, their joints published, rest not analysed yet
        self._due_decision: list[np.ndarray] = []
        self.first_command_ns: int | None = None
        self.command_count = 0
        self.next_grid_ns: int | None = None
        self.last_analysed_ns: int | None = None
        self.analysis_count = 0
        self.skipped_count = 0
        #: Replay: the (first, last) grid time analysed of each stretch of the recording.
        self.segments: list[tuple[int, int]] = []
        #: The (first, last) grid time of each span dropped unanalysed (more than max_backlog_s behind).
        self.gaps: list[tuple[int, int]] = []
        #: How far behind now the analysis ran (see :mod:`~sim_real_bridge.core.lag`).
        self.lag = LagMeter()
        self._trimmed_ns: int | None = None
        self._last_fit_ns: int | None = None
        self._state = scan.ScanState()
        self._events = EventTracker(cfg.events)
        self._ledger = ResidualLedger(CATEGORIES, cfg.summary_window_s)
        self.statistics = RunStatistics(cfg.stats_max_samples)
        self.summary_period_ns: int | None = None  # replay: summaries produced as the live node's timer would
        self._next_summary_ns: int | None = None
        #: Called with each batch's joint columns as soon as they are formed (live: published at once).
        self.joint_sink: Callable[[JointColumns], None] | None = None
        self._read = ReadConfig(
            max_gap_ns=int(cfg.max_interp_gap_s * 1e9), wrench_window_ns=int(cfg.wrench_window_s * 1e9),
            tip_window_ns=int(cfg.tip_velocity_window_s * 1e9), object_window_ns=int(cfg.object_velocity_window_s * 1e9),
            moving_window_ns=int(max(0.05, 2 * cfg.features.frozen_samples * 0.002) * 1e9),
            moving_threshold=cfg.features.frozen_motion_threshold,
            stall_speed_rad_s=cfg.stall_speed_rad_s, stall_sim_speed_rad_s=cfg.stall_sim_speed_rad_s)
        delay_step_ns = int(round(cfg.fit_delay_step_s * 1e9))
        self._fit = fits.FitConfig(
            window_ns=int(cfg.fit_window_s * 1e9), step_ns=self.dt_ns, delay_step_ns=delay_step_ns,
            delays_ns=delay_step_ns * np.arange(int(cfg.fit_max_delay_s / cfg.fit_delay_step_s + 1e-9) + 1),
            max_gap_ns=int(cfg.max_interp_gap_s * 1e9), min_motion_rad=cfg.fit_min_motion_rad)
        alpha = min(1.0, self.dt_ns * 1e-9 / cfg.smooth_tau_s)
        self._scan = scan.ScanConfig(
            dt_s=self.dt_ns * 1e-9, dt_ns=self.dt_ns, smooth_alpha=alpha,
            noise_alpha=min(1.0, self.dt_ns * 1e-9 / cfg.attribution.noise_tau_s),
            weight_alpha=min(1.0, self.dt_ns * 1e-9 / cfg.tool_weight_tau_s),
            contact_force_n=cfg.contact_force_n, contact_release_n=cfg.contact_release_n,
            contact_recent_ns=int(cfg.attribution.contact_recent_s * 1e9),
            contact_carry_ns=int(cfg.attribution.contact_carry_s * 1e9),
            contact_carry_min_ns=int(cfg.attribution.contact_carry_min_s * 1e9),
            object_lag_ns=int(cfg.object_velocity_window_s * 1e9), stall_speed_rad_s=cfg.stall_speed_rad_s,
            stall_sim_speed_rad_s=cfg.stall_sim_speed_rad_s,
            friction_alpha=min(1.0, self.dt_ns * 1e-9 / cfg.attribution.friction_tau_s), attribution=cfg.attribution)

    # ------------------------------------------------------------------ intake
    def add_joint_states(self, side: str, stamp_ns: Any, recv_ns: Any, names: Sequence[str], q_rad: Any,
                         qd_rad_s: Any = None, effort: Any = None) -> None:
        """Hand over joint_states rows: one message (arrays of shape (n,)) or many ((m, n)).

        Velocity and effort may be None or empty (NaN: not sent).
        """
        self.inputs.add_joint_states(side, stamp_ns, recv_ns, names, q_rad, qd_rad_s, effort)

    def add_wrench(self, side: str, stamp_ns: Any, recv_ns: Any, force_n: Any, torque_nm: Any,
                   frame_ids: Sequence[str] | str = "") -> None:
        """Hand over wrench rows (sensor frame): force and torque (3,) or (m, 3)."""
        self.inputs.add_wrench(side, stamp_ns, recv_ns, force_n, torque_nm, frame_ids)

    def add_pose(self, side: str, stream: str, stamp_ns: Any, recv_ns: Any, position_m: Any, orientation_wxyz: Any,
                 frame_ids: Sequence[str] | str = "") -> None:
        """Hand over ``ee_pose`` or ``object_pose`` rows (world frame): (3,)/(4,) or (m, 3)/(m, 4)."""
        self.inputs.add_pose(side, stream, stamp_ns, recv_ns, position_m, orientation_wxyz, frame_ids)

    def add_command(self, recv_ns: int) -> None:
        """A mirrored command was received (the first starts the run clock of the summary)."""
        if self.inputs.first_recv_ns is None:
            self.inputs.first_recv_ns = int(recv_ns)
        if self.first_command_ns is None:
            self.first_command_ns = int(recv_ns)
        self.command_count += 1

    def note_refused(self, side: str, stream: str, reason: str, count: int = 1) -> None:
        """Count rows refused before they reached the engine (malformed messages)."""
        self.inputs.note_refused(side, stream, reason, count)

    def last_stamp_ns(self, side: str, stream: str) -> int | None:
        """The stamp of the newest row of a stream the checks accepted (taken in so far)."""
        return self.inputs.last_stamp_ns(side, stream)

    def take_in(self) -> None:
        """Check, map and store every row handed over so far (advance and run do this)."""
        self.inputs.take_in()

    def analysis_due(self) -> bool:
        """Whether the next grid time may be due: every joint and wrench stream handed
        over has reached it (by its stamps and the side's current clock offset). Cheap:
        a live node asks it on every message and advances only when it holds."""
        t = self.next_grid_ns
        newest = self.inputs.newest_handed_ns
        if t is None:
            return all(self.inputs.has_staged_joints(side) for side in SIDES)
        return bool(newest) and all(stamp_ns >= t for stamp_ns in newest.values())

    @property
    def sides(self) -> dict[str, SideStreams]:
        """Each side's stored streams."""
        return self.inputs.sides

    @property
    def joints(self) -> JointMap | None:
        """Joints analysed (None until both sides' joints were seen)."""
        return self.inputs.joints

    @property
    def warnings(self) -> list[str]:
        """Warnings about the inputs (joint pairing)."""
        return self.inputs.warnings

    @property
    def problems(self) -> dict[str, Counter]:
        """"side/stream" -> reason -> rows refused or flagged."""
        return self.inputs.problems

    @property
    def rejected(self) -> Counter:
        """"side/stream: reason" -> rows refused."""
        return self.inputs.rejected

    @property
    def first_recv_ns(self) -> int | None:
        """When the monitor received the first row or command."""
        return self.inputs.first_recv_ns

    # ------------------------------------------------------------------ analysis
    def advance(self, now_ns: int) -> EngineOutput:
        """Live: take in what was handed over; publish the joints of every grid time due
        at now_ns at once (the joint sink), and analyse the rest in batches of
        ``live_batch_s`` of grid times (a few numpy calls for many rows, not one row)."""
        now_ns = int(now_ns)
        out = EngineOutput()
        t = self.next_grid_ns
        quiet = t is not None and now_ns < t + self.horizon_ns and not self.analysis_due()
        if not quiet:
            self.inputs.take_in()
            self._due_now(now_ns, out)
        if self._due_t and now_ns - int(self._due_decision[0][0]) >= int(self.config.live_batch_s * 1e9):
            out.extend(self._analyse_due())
        self._trim(now_ns)
        return out

    def _due_now(self, now_ns: int, out: EngineOutput) -> None:
        """Grid times due at now_ns: their joints go to the sink, the rest waits for the batch."""
        backlog_ns = int(self.config.max_backlog_s * 1e9)
        if (self.next_grid_ns is not None and self.next_grid_ns < now_ns - backlog_ns
                and receiving(np.array([now_ns], dtype=np.int64), self.inputs.waited_streams(), self.horizon_ns)[0]):
            # Further behind than the backlog allows while data comes in: newest data first.
            # The backlog is dropped as one counted gap; the analysis resumes a horizon before now.
            resume = max(self._resume_after_jump(now_ns), self.next_grid_ns + self.dt_ns)
            out.skipped = (resume - self.next_grid_ns) // self.dt_ns
            self.skipped_count += out.skipped
            self.gaps.append((self.next_grid_ns, resume - self.dt_ns))
            self.next_grid_ns = resume
        candidates = self._candidates(now_ns)
        if candidates is None or not len(candidates):
            return
        ready = ready_times(candidates, self.inputs.waited_streams(), self.horizon_ns, backlog_ns)
        due = int(np.argmin(ready <= now_ns)) if not (ready <= now_ns).all() else len(ready)
        if not due:
            return
        t_ns, decision = candidates[:due], np.full(due, now_ns, dtype=np.int64)
        out.due = due
        self.next_grid_ns = int(t_ns[-1]) + self.dt_ns
        self._due_t.append(t_ns)
        self._due_decision.append(decision)
        joints = read_joints(t_ns, decision, self.sides, self.joints, self._read)  # type: ignore[arg-type]
        with np.errstate(invalid="ignore"):  # inf - inf: a non-finite sample is NaN by design
            out.joints = self._joint_columns(t_ns, decision, joints["sim"], joints["real"],
                                             np.full(due, self._state.latency[0]), np.full(due, self._state.latency[1]))
        if self.joint_sink is not None and len(out.joints):
            self.joint_sink(out.joints)

    def _resume_after_jump(self, now_ns: int) -> int:
        """The grid time the analysis resumes at after dropping its backlog at now_ns: the
        first one whose horizon is still open (an older one would be judged by the stall
        rule on buffers that still lack what queued up meanwhile)."""
        return self._next_after(now_ns - self.horizon_ns)

    def lag_ns(self, now_ns: int) -> int | None:
        """Now minus the newest grid time analysed (None before the first)."""
        return self.lag.lag_ns(now_ns)

    def _analyse_due(self) -> EngineOutput:
        """The rest of the analysis of the grid times whose joints went out already."""
        t_ns, decision = np.concatenate(self._due_t), np.concatenate(self._due_decision)
        self._due_t, self._due_decision = [], []
        out = self._analyse(t_ns, decision)
        out.joints = None  # published when due
        return out

    def run(self, ticks_ns: np.ndarray, batch_rows: int = 1024,
            on_progress: Callable[[float], None] | None = None) -> EngineOutput:
        """Analyse every grid time the live node, ticking at ticks_ns, would have (replay).

        Ticks further apart than ``segment_gap_s`` split the run into segments: grid
        times in such a gap are not analysed (nothing was recorded), and each segment is
        listed in :attr:`segments`. Grid times decided after the last tick stay pending.
        """
        self.inputs.take_in()
        self.inputs.flush_health()
        ticks = np.sort(np.asarray(ticks_ns, dtype=np.int64))
        if not len(ticks) or self.joints is None:
            return EngineOutput()
        breaks = np.flatnonzero(np.diff(ticks) > int(self.config.segment_gap_s * 1e9)) + 1
        plans = [self._plan_segment(segment) for segment in np.split(ticks, breaks)]
        total = max(1, sum(len(rows) for _, _, rows in plans))
        parts: list[EngineOutput] = []
        done = 0
        for segment, (candidates, decision, rows) in enumerate(plans):
            if segment:
                self.lag.restart()
            for start in range(0, len(rows), batch_rows):
                chunk = rows[start:start + batch_rows]
                parts.append(self._analyse(candidates[chunk], decision[chunk]))
                done += len(chunk)
                if on_progress is not None:
                    on_progress(done / total)
        out = EngineOutput(skipped=self.skipped_count)
        out.joints, out.poses, out.contacts = (_concat([getattr(p, name) for p in parts])
                                               for name in ("joints", "poses", "contacts"))
        for part in parts:
            out.events += part.events
            out.summaries += part.summaries
            out.analysed += part.analysed
        return out

    def _plan_segment(self, ticks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(grid times, their decision times, the rows to analyse) of one segment of ticks."""
        backlog_ns = int(self.config.max_backlog_s * 1e9)
        if self.next_grid_ns is not None and self.segments:
            # After a gap in the recording: start where the data resumes, not in the gap.
            self.next_grid_ns = max(self.next_grid_ns, self._next_after(int(ticks[0]) - backlog_ns))
        none = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.intp)
        if self.joints is None:
            return none
        # Live, nothing is analysed before both sides' joints were received (they must pair first).
        paired_ns = max(self.sides[side].joints.first_recv_ns for side in SIDES)  # type: ignore[union-attr]
        if self.next_grid_ns is None:
            first_tick = int(np.searchsorted(ticks, paired_ns, side="left"))
            if first_tick == len(ticks):
                return none
            self.next_grid_ns = self._grid_origin(int(ticks[first_tick]))
        candidates = self._candidates(int(ticks[-1]))
        if candidates is None or not len(candidates):
            return none
        ready = ready_times(candidates, self.inputs.waited_streams(), self.horizon_ns, backlog_ns)
        arriving = receiving(ticks, self.inputs.waited_streams(), self.horizon_ns)
        plan = decision_times(candidates, np.maximum(ready, paired_ns), ticks, backlog_ns, arriving,
                              self._resume_after_jump)
        self.gaps += plan.gaps
        decision, skipped = plan.decision_ns, plan.skipped
        decided = decision != NEVER_NS
        self.skipped_count += int(skipped.sum())
        rows = np.flatnonzero(decided & ~skipped)
        undecided = np.flatnonzero(~decided & ~skipped)
        self.next_grid_ns = int(candidates[undecided[0]]) if undecided.size else max(
            int(candidates[-1]) + self.dt_ns, plan.resume_ns)
        if rows.size:
            self.segments.append((int(candidates[rows[0]]), int(candidates[rows[-1]])))
        return candidates, decision, rows

    def finish(self, now_ns: int | None = None) -> EngineOutput:
        """End of run: analyse what is due at now_ns (if given) and close every open event."""
        out = self.advance(now_ns) if now_ns is not None else EngineOutput()
        if self._due_t:
            out.extend(self._analyse_due())
        at = now_ns if now_ns is not None else (self.last_analysed_ns or 0)
        for record in self._events.finish():
            self._count_event(record)
            out.events.append((int(at), record))
        return out

    def _count_event(self, record: EventRecord) -> None:
        """The ledger's event count: an event opened, or closed as another category's."""
        if record.action == ACTION_OPEN:
            self._ledger.count_event(record.category)
        elif record.handed_over_from:
            self._ledger.move_event(record.handed_over_from, record.category)

    def _candidates(self, until_ns: int) -> np.ndarray | None:
        """Grid times from the next one up to until_ns (None before both sides' joints)."""
        if self.joints is None:
            return None
        if self.next_grid_ns is None:
            self.next_grid_ns = self._grid_origin(until_ns)
        if until_ns < self.next_grid_ns:
            return np.zeros(0, dtype=np.int64)
        return np.arange(self.next_grid_ns, until_ns + 1, self.dt_ns, dtype=np.int64)

    def _grid_origin(self, at_ns: int) -> int:
        """The first grid time, as the live node fixes it at its first tick with both sides'
        joints (at_ns): the first after each side's earliest sample received by then.

        A sample received later may map earlier (a stale start-up backlog mapped late
        until a fresher stream lowered the clock offset); it does not move the origin.
        """
        firsts = []
        for side in SIDES:
            buffer = self.sides[side].joints
            received = np.flatnonzero(buffer.recv_ns <= at_ns)  # type: ignore[union-attr]
            firsts.append(int(buffer.time_ns[received[0] if received.size else 0]))  # type: ignore[union-attr]
        return self._next_after(max(firsts) - 1)

    def _next_after(self, t_ns: int) -> int:
        return (t_ns // self.dt_ns + 1) * self.dt_ns

    def _analyse(self, t_ns: np.ndarray, decision_ns: np.ndarray) -> EngineOutput:
        """Read, fit and scan one batch of due grid times; their outputs."""
        assert self.joints is not None
        self.inputs.flush_health()
        self.next_grid_ns = max(self.next_grid_ns or 0, int(t_ns[-1]) + self.dt_ns)
        self.last_analysed_ns = int(t_ns[-1])
        self.analysis_count += len(t_ns)
        with np.errstate(invalid="ignore"):
            grid = read_grid(t_ns, decision_ns, self.sides, self.joints, self._read)
            read_health(grid, self.sides, self.joints, self._read)
            fit_rows = fits.schedule(t_ns, grid.joints_valid, self._last_fit_ns, int(self.config.fit_period_s * 1e9))
            if fit_rows:
                self._last_fit_ns = int(t_ns[fit_rows[-1]])
            windows = fits.fit_windows(t_ns[fit_rows], self.sides["sim"].joints, self.sides["real"].joints,  # type: ignore[arg-type]
                                       self.joints, self._fit)
            rows = scan.run(grid, windows, fit_rows, self.joints.names, self._state, self._scan)
            out = EngineOutput(analysed=len(t_ns))
            out.joints = self._joint_columns(
                t_ns, decision_ns, {"q": grid.sim_q_rad, "qd": grid.sim_qd_rad_s, "effort": grid.sim_effort},
                {"q": grid.real_q_rad, "qd": grid.real_qd_rad_s, "effort": grid.real_effort},
                rows.latency_s, rows.latency_std_s)
            self._events_and_ledger(grid, rows, out)
            self.statistics.add(grid, rows.sim_contact, ~rows.sim_contact_recent & ~rows.real_contact)
            out.poses = PoseColumns.from_grid(grid, int(round(1e9 / self.config.pose_rate_hz)))
            out.contacts = ContactColumns.from_grid(grid, rows.sim_contact, rows.real_contact,
                                                   int(round(1e9 / self.config.contact_rate_hz)))
        return out


    # ------------------------------------------------------------------ outputs
    def _timing(self, decision_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Clock offset (real minus sim) and its 1-sigma (s) as they stood at each decision."""
        sim, real = self.inputs.clock["sim"], self.inputs.clock["real"]
        offset = (real.offset_at(decision_ns) - sim.offset_at(decision_ns)) * 1e-9
        return offset, np.hypot(sim.spread_at(decision_ns), real.spread_at(decision_ns))

    def _joint_columns(self, t_ns: np.ndarray, decision_ns: np.ndarray, sim: dict[str, np.ndarray],
                       real: dict[str, np.ndarray], latency_s: np.ndarray, latency_std_s: np.ndarray) -> JointColumns:
        q_res = real["q"] - sim["q"]
        keep = np.isfinite(q_res).any(axis=1)
        offset, offset_std = self._timing(decision_ns[keep])
        return JointColumns(
            t_ns=t_ns[keep], decision_ns=decision_ns[keep], names=self.joints.names,  # type: ignore[union-attr]
            position_residual_rad=q_res[keep], velocity_residual_rad_s=(real["qd"] - sim["qd"])[keep],
            effort_residual=(real["effort"] - sim["effort"])[keep], clock_offset_s=offset,
            clock_offset_std_s=offset_std, latency_s=latency_s[keep], latency_std_s=latency_std_s[keep])

    def _events_and_ledger(self, grid: Grid, rows: scan.ScanRows, out: EngineOutput) -> None:
        """Debounce the verdicts into events; book each row's residual energy in the ledger."""
        energy = residual_energy(np.where(grid.joints_valid[:, None], grid.q_res_rad, np.nan),
                                 np.where(grid.wrench_valid, np.linalg.norm(grid.force_res_n, axis=1), np.nan),
                                 self.config.ledger_q_scale_rad, self.config.ledger_force_scale_n).tolist()
        for k, (t, decision, verdict) in enumerate(zip(grid.t_ns.tolist(), grid.decision_ns.tolist(), rows.verdicts,
                                                        strict=True)):
            records = self._events.update(t, verdict.active)
            if records:
                self._events.carry_over(records, out_of_contact=not rows.sim_contact[k])
            for record in records:
                self._count_event(record)
                out.events.append((decision, record))
            self._ledger.add(t, verdict.top, energy[k])
            self.lag.note(decision, t)
            if self.summary_period_ns is not None:
                if self._next_summary_ns is None or decision - self._next_summary_ns > self.summary_period_ns:
                    self._next_summary_ns = decision  # (the first, or after a gap: not one per period through it)
                while decision >= self._next_summary_ns:
                    out.summaries.append(self.summary(self._next_summary_ns))
                    self._next_summary_ns += self.summary_period_ns

    def _trim(self, now_ns: int) -> None:
        """Live: forget history older than any query reaches (now and then)."""
        if self._trimmed_ns is not None and now_ns - self._trimmed_ns < TRIM_EVERY_NS:
            return
        self._trimmed_ns = now_ns
        self.inputs.trim(now_ns - int(self.config.buffer_s * 1e9),
                         now_ns - int(self.config.features.history_s * 1e9))

    # ------------------------------------------------------------------ summaries
    @property
    def joint_names(self) -> tuple[str, ...] | None:
        """Analysed joint names (None before both sides' joints were seen)."""
        return self.joints.names if self.joints is not None else None

    @property
    def clock_resets(self) -> int:
        """Clock resets detected on either side."""
        return sum(clock.resets for clock in self.inputs.clock.values())

    def transport_floor_s(self) -> dict[str, float]:
        """Per side seen, the current offset from its stamps to the monitor clock (s)."""
        return {side: clock.offset_ns * 1e-9 for side, clock in self.inputs.clock.items() if clock.offset_ns is not None}

    def t0_ns(self) -> int:
        """The run's start on the monitor clock: the first command, or the real arm's
        motion onset when earlier, or the first sample."""
        if self.inputs.onset_ns is not None and self.first_command_ns is not None:
            return min(self.inputs.onset_ns, self.first_command_ns)
        if self.first_command_ns is not None:
            return self.first_command_ns
        return self.first_recv_ns or 0

    def to_seconds(self, t_ns: Any) -> Any:
        """Monitor-time stamps (int or array) as seconds from the run's start."""
        if np.ndim(t_ns):
            return (np.asarray(t_ns, dtype=np.int64) - self.t0_ns()) * 1e-9
        return (int(t_ns) - self.t0_ns()) * 1e-9

    def _offset_now(self) -> tuple[float, float]:
        sim, real = self.inputs.clock["sim"], self.inputs.clock["real"]
        if sim.offset_ns is None or real.offset_ns is None:
            return 0.0, 0.0
        now = np.array([self.last_analysed_ns or 0], dtype=np.int64)
        offset, std = self._timing(np.array([max(int(sim._recv[-1]), int(real._recv[-1]))]) if len(sim._recv)
                                   and len(real._recv) else now)
        return float(offset[0]), float(std[0])

    def summary(self, now_ns: int) -> SummaryRecord:
        """Ledger, rms figures, counts and timing at now_ns."""
        rows, un_run, un_win = self._ledger.rows()
        latency_s, _ = self._state.latency
        offset_s, _ = self._offset_now()
        return SummaryRecord(
            stamp_ns=int(now_ns), elapsed_s=max(0.0, (int(now_ns) - self.t0_ns()) * 1e-9) if self.first_recv_ns else 0.0,
            window_s=self.config.summary_window_s, ledger=rows, unexplained_share_run=un_run,
            unexplained_share_window=un_win, joint_position_rms_rad=self.statistics.rms("q"),
            ee_position_rms_m=self.statistics.rms("ee"), force_residual_rms_n=self.statistics.rms("f"),
            event_count=self._events.event_count, open_event_count=len(self._events.open_categories()),
            rejected_count=int(sum(self.rejected.values())), rejected_by_reason=dict(self.rejected),
            clock_offset_s=offset_s, latency_s=latency_s, clock_resets=self.clock_resets,
            lag_s=(self.lag.lag_ns(now_ns) or 0) * 1e-9, max_lag_s=self.lag.max_lag_ns * 1e-9,
            behind_share=self.lag.behind_share(),
            dropped_grid_times=self.skipped_count, dropped_s=self.skipped_count * self.dt_ns * 1e-9)

    def load_summary(self) -> dict[str, Any]:
        """How far behind the analysis ran and what it dropped (summary.json ``load``):
        lag figures from the run's start on (:class:`~sim_real_bridge.core.lag.LagMeter`),
        the gaps dropped, and ``degraded``: the lag exceeded BEHIND_S or grid times were
        dropped."""
        load = self.lag.as_dict(self.to_seconds, self.t0_ns() if self.first_command_ns is not None else None)
        load.update({
            "dropped_grid_times": self.skipped_count, "dropped_s": round(self.skipped_count * self.dt_ns * 1e-9, 3),
            "gaps": [{"start_s": round(self.to_seconds(a), 3), "end_s": round(self.to_seconds(b), 3),
                      "grid_times": (b - a) // self.dt_ns + 1, "first_grid_ns": a, "last_grid_ns": b}
                     for a, b in self.gaps],
        })
        load["degraded"] = bool(load["max_lag_s"] > BEHIND_S or self.skipped_count)
        return load

    def event_dicts(self) -> list[dict[str, Any]]:
        """Closed and open events as summary.json entries (seconds from the run's start)."""
        t0 = self.t0_ns()
        out = []
        for rec in list(self._events.closed) + self._events.open_events():
            out.append({"id": rec.id, "category": rec.category, "kind": rec.kind,
                        "start_s": round((rec.start_ns - t0) * 1e-9, 6), "end_s": round((rec.end_ns - t0) * 1e-9, 6),
                        "severity": rec.severity, "open": rec.action != ACTION_CLOSE, "evidence": dict(rec.evidence),
                        "snapshot": ""})
        out.sort(key=lambda e: (e["start_s"], e["category"]))
        return out

    def run_summary(self) -> dict[str, Any]:
        """summary.json content: events, timing, residuals, calibration, ledger, counts."""
        names = self.joint_names or ()
        latency_s, latency_std_s = self._state.latency
        offset_s, offset_std_s = self._offset_now()
        stream_names = dict(enumerate(STREAMS))
        return {
            "events": self.event_dicts(),
            "timing": {"clock_offset_s": offset_s, "clock_offset_std_s": offset_std_s, "latency_s": latency_s,
                       "latency_std_s": latency_std_s, "clock_resets": self.clock_resets,
                       "delivery_delay_s": {f"{side}/{stream}": stats for side in SIDES for stream, stats
                                            in self.inputs.clock[side].delivery_delays_s(stream_names).items()}},
            "residuals": self.statistics.residuals(names),
            "calibration": self.statistics.calibration(names, int(self.config.fit_max_delay_s * 1e9),
                                                       int(self.config.fit_delay_step_s * 1e9) // 2),
            "ledger": self._ledger.as_dict(),
            "segments": [{"start_s": round(self.to_seconds(a), 6), "end_s": round(self.to_seconds(b), 6)}
                         for a, b in self.segments],
            "load": self.load_summary(),
            "counts": {"analysis_ticks": self.analysis_count, "skipped_ticks": self.skipped_count,
                       "commands": self.command_count, "rejected": dict(self.rejected),
                       "events": self._events.event_count},
            "warnings": list(self.warnings),
        }


def _concat(parts: list[Any]) -> Any:
    parts = [p for p in parts if p is not None and len(p)]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else type(parts[0]).concat(parts)

