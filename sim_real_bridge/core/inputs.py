"""StreamInputs: the engine's intake stage, rows handed over to time-sorted columns.

Rows are handed over as they come (``add_*``: one message, or whole recorded columns)
and staged; :meth:`StreamInputs.take_in` checks them
(:mod:`~sim_real_bridge.core.intake`), maps them onto the monitor clock in receive
order (:mod:`~sim_real_bridge.core.clock`) and keeps them per side and stream
(:class:`~sim_real_bridge.core.read_stage.SideStreams`) with their health marks
(:mod:`~sim_real_bridge.core.health`). Refused rows are counted by reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim_real_bridge.core import intake
from sim_real_bridge.core.buffers import StreamBuffer
from sim_real_bridge.core.clock import ClockMap
from sim_real_bridge.core.config import EngineConfig
from sim_real_bridge.core.health import StreamHealth
from sim_real_bridge.core.joint_names import pair_joints
from sim_real_bridge.core.read_stage import JointMap, SideStreams
from sim_real_bridge.errors import ConfigError

SIDES: tuple[str, ...] = ("sim", "real")
STREAMS: tuple[str, ...] = ("joint_states", "wrench", "ee_pose", "object_pose")
ONSET_SPEED_RAD_S = 0.003  # joint speed that counts as the arm leaving rest
ONSET_QUIET_S = 0.2  # rest needed before a motion onset counts as the run start
ONSET_MAX_REST_RAD_S = 0.05  # faster than this at the start, the arm was not at rest


@dataclass
class _Staged:
    """Rows handed over and not yet taken in: one call of an ``add_*`` method."""

    seq: int
    stamp_ns: np.ndarray
    recv_ns: np.ndarray
    values: np.ndarray
    names: tuple[str, ...] = ()
    frame_ids: Sequence[str] | str = ""


@dataclass
class _PendingHealth:
    """Rows stored whose health marks the next analysis batch takes in."""

    health: StreamHealth
    stamp_ns: np.ndarray
    recv_ns: np.ndarray
    time_ns: np.ndarray
    values: np.ndarray
    crossed_reset: bool


class StreamInputs:
    """Both sides' streams: staged, checked, clock-mapped and stored rows.

    Args:
        config: engine parameters (clock and health settings are read here).
        intake_config: how rows are checked.
        joint_map: explicit joint pairs (sim name -> real name); others pair by name.
    """

    def __init__(self, config: EngineConfig, intake_config: intake.IntakeConfig | None = None,
                 joint_map: dict[str, str] | None = None) -> None:
        self.config = config
        self.intake = intake_config or intake.IntakeConfig()
        self._explicit_joints = dict(joint_map or {})
        self.clock = {side: ClockMap(config.offset_leak, int(config.clock_reset_s * 1e9)) for side in SIDES}
        self.sides = {side: SideStreams() for side in SIDES}
        self._staged: dict[tuple[str, str], list[_Staged]] = {(s, t): [] for s in SIDES for t in STREAMS}
        self._seq = 0
        self._layout: dict[str, tuple[str, ...]] = {}
        self.newest_handed_ns: dict[tuple[str, str], int] = {}
        self._health_pending: list[_PendingHealth] = []
        self._last_stamp_ns: dict[tuple[str, str], int] = {}
        #: Joints analysed (None until both sides' joints were seen).
        self.joints: JointMap | None = None
        self.warnings: list[str] = []
        self.problems: dict[str, Counter] = {}  # "side/stream" -> reason -> rows (refused or flagged)
        self.rejected: Counter = Counter()  # "side/stream: reason" -> rows refused
        self.first_recv_ns: int | None = None
        self.onset_ns: int | None = None
        self._onset_done = False

    def add_joint_states(self, side: str, stamp_ns: Any, recv_ns: Any, names: Sequence[str], q_rad: Any,
                         qd_rad_s: Any = None, effort: Any = None) -> None:
        """Hand over joint_states rows: one message (arrays of shape (n,)) or many ((m, n)).

        Velocity and effort may be None or empty (NaN: not sent).
        """
        q = np.atleast_2d(np.asarray(q_rad, dtype=float))
        blank = np.full(q.shape, np.nan)
        qd = blank if qd_rad_s is None or np.size(qd_rad_s) == 0 else np.atleast_2d(np.asarray(qd_rad_s, float))
        eff = blank if effort is None or np.size(effort) == 0 else np.atleast_2d(np.asarray(effort, float))
        if not (q.shape == qd.shape == eff.shape and q.shape[1] == len(names)):
            self.note_refused(side, "joint_states", "length_mismatch", len(q))
            return
        self._stage(side, "joint_states", stamp_ns, recv_ns, np.hstack((q, qd, eff)), names=tuple(map(str, names)))

    def add_wrench(self, side: str, stamp_ns: Any, recv_ns: Any, force_n: Any, torque_nm: Any,
                   frame_ids: Sequence[str] | str = "") -> None:
        """Hand over wrench rows (sensor frame): force and torque (3,) or (m, 3)."""
        values = np.hstack((np.atleast_2d(np.asarray(force_n, float)), np.atleast_2d(np.asarray(torque_nm, float))))
        self._stage(side, "wrench", stamp_ns, recv_ns, values, frame_ids=frame_ids)

    def add_pose(self, side: str, stream: str, stamp_ns: Any, recv_ns: Any, position_m: Any, orientation_wxyz: Any,
                 frame_ids: Sequence[str] | str = "") -> None:
        """Hand over ``ee_pose`` or ``object_pose`` rows (world frame): (3,)/(4,) or (m, 3)/(m, 4)."""
        if stream not in ("ee_pose", "object_pose"):
            raise ConfigError(f"unknown pose stream {stream!r}; expected ee_pose or object_pose")
        values = np.hstack((np.atleast_2d(np.asarray(position_m, float)),
                            np.atleast_2d(np.asarray(orientation_wxyz, float))))
        self._stage(side, stream, stamp_ns, recv_ns, values, frame_ids=frame_ids)

    def note_refused(self, side: str, stream: str, reason: str, count: int = 1) -> None:
        """Count rows refused before they reached the engine (malformed messages)."""
        self.rejected[f"{side}/{stream}: {reason}"] += count
        self.problems.setdefault(f"{side}/{stream}", Counter())[reason] += count

    def last_stamp_ns(self, side: str, stream: str) -> int | None:
        """The stamp of the newest row of a stream the checks accepted (taken in so far)."""
        return self._last_stamp_ns.get((side, stream))

    def has_staged_joints(self, side: str) -> bool:
        """Whether the side's joints were handed over (taken in or not)."""
        return bool(self._staged[(side, "joint_states")]) or self.sides[side].joints is not None

    def _stage(self, side: str, stream: str, stamp_ns: Any, recv_ns: Any, values: np.ndarray,
               names: tuple[str, ...] = (), frame_ids: Sequence[str] | str = "") -> None:
        if side not in SIDES:
            raise ConfigError(f"unknown side {side!r}; expected one of {SIDES}")
        stamp = np.atleast_1d(np.asarray(stamp_ns, dtype=np.int64))
        recv = np.atleast_1d(np.asarray(recv_ns, dtype=np.int64))
        if self.first_recv_ns is None and recv.size:
            self.first_recv_ns = int(recv[0])
        self._seq += 1
        self._staged[(side, stream)].append(_Staged(self._seq, stamp, recv, values, names, frame_ids))
        if stream in ("joint_states", "wrench") and stamp.size:
            offset = self.clock[side].offset_ns or 0
            newest = int(stamp.max()) + offset
            self.newest_handed_ns[(side, stream)] = max(newest, self.newest_handed_ns.get((side, stream), newest))

    def take_in(self) -> None:
        """Check, map and store every staged row."""
        for side in SIDES:
            batches = []
            for stream_id, stream in enumerate(STREAMS):
                staged, self._staged[(side, stream)] = self._staged[(side, stream)], []
                for chunk in _merged(staged):
                    rows = self._checked(side, stream, chunk)
                    if rows is not None:
                        batches.append((chunk.seq, stream_id, *rows))
            if batches:
                self._store(side, batches)
        if not self._onset_done:
            self._find_motion_onset()

    def _checked(self, side: str, stream: str, chunk: _Staged) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The chunk's accepted rows (stamp, recv, values in the side's layout), counted by reason."""
        values = chunk.values
        names_reason = None
        if stream == "joint_states":
            order, names_reason = intake.joint_order(chunk.names, self._layout.get(side), self.intake.limits)
            if order is not None:
                if side not in self._layout:
                    self._layout[side] = chunk.names
                n = len(chunk.names)
                if len(order) != n or (order != np.arange(n)).any():
                    values = values[:, np.concatenate((order, n + order, 2 * n + order))]
        nonfinite = intake.nonfinite_rows(values, joint_blocks=stream == "joint_states")
        checked = intake.check_rows(self.intake, stream, chunk.stamp_ns, chunk.recv_ns, nonfinite, chunk.frame_ids,
                                    names_reason)
        counts = checked.counts()
        if counts:
            problems = self.problems.setdefault(f"{side}/{stream}", Counter())
            problems.update(counts)
            for reason, count in counts.items():
                if reason not in ("non_finite",) or stream.endswith("_pose"):
                    self.rejected[f"{side}/{stream}: {reason}"] += count
        keep = checked.keep
        if not keep.any():
            return None
        stamps = chunk.stamp_ns[keep]
        previous = self._last_stamp_ns.get((side, stream), stamps[0])
        backwards = int(np.count_nonzero(np.diff(np.concatenate(([previous], stamps))) < 0))
        self._last_stamp_ns[(side, stream)] = int(stamps[-1])
        if backwards:  # counted, not refused: stamp jitter is what the sensor category is about
            self.problems.setdefault(f"{side}/{stream}", Counter())["stamp_backwards"] += backwards
        return stamps, chunk.recv_ns[keep], values[keep]

    def _store(self, side: str, batches: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Map a side's accepted rows onto the monitor clock (in receive order) and keep them."""
        batches.sort(key=lambda batch: batch[0])
        ids = np.concatenate([np.full(len(stamp), stream_id) for _, stream_id, stamp, _, _ in batches])
        stamps = np.concatenate([stamp for _, _, stamp, _, _ in batches])
        recvs = np.concatenate([recv for _, _, _, recv, _ in batches])
        # Each row's index among its own stream's rows (in hand-over order).
        local = np.empty(len(ids), dtype=np.intp)
        for stream_id in np.unique(ids).tolist():
            mine = ids == stream_id
            local[mine] = np.arange(int(mine.sum()))
        order = np.argsort(recvs, kind="stable")
        mapped, crossed = self.clock[side].map(ids[order], stamps[order], recvs[order])
        for stream_id in np.unique(ids).tolist():
            mine = ids[order] == stream_id
            rows = order[mine]
            values = np.concatenate([v for _, sid, _, _, v in batches if sid == stream_id])[local[rows]]
            self._keep(side, STREAMS[stream_id], stamps[rows], recvs[rows], mapped[mine], values,
                       stream_id in crossed)

    def _keep(self, side: str, stream: str, stamp: np.ndarray, recv: np.ndarray, time: np.ndarray,
              values: np.ndarray, crossed_reset: bool) -> None:
        streams = self.sides[side]
        cfg = self.config.features
        drawn: slice | np.ndarray = slice(None)  # the rows the buffer keeps (the health sees all)
        if stream == "joint_states":
            if streams.joints is None:
                streams.joints = StreamBuffer(values.shape[1])
                streams.joint_health = StreamHealth(cfg, f"{side}/joint_states")
            n = values.shape[1] // 3
            velocity = values[:, n:2 * n]
            # A velocity the robot did not send (all NaN) is absent, not non-finite.
            health_values = np.hstack((values[:, :n], np.where(np.isnan(velocity).all(axis=1)[:, None], 0.0, velocity)))
            buffer, health = streams.joints, streams.joint_health
        elif stream == "wrench":
            if streams.wrench is None:
                streams.wrench = StreamBuffer(6)
                streams.wrench_health = StreamHealth(cfg, f"{side}/wrench", judges_saturation=True)
            buffer, health, health_values = streams.wrench, streams.wrench_health, values
        else:
            if getattr(streams, stream) is None:
                setattr(streams, stream, StreamBuffer(7))
                setattr(streams, f"{stream}_health", StreamHealth(cfg, f"{side}/{stream}"))
            buffer, health, health_values = getattr(streams, stream), getattr(streams, f"{stream}_health"), values
            drawn = np.isfinite(values).all(axis=1)  # a non-finite pose is judged, never drawn
        buffer.extend(time[drawn], recv[drawn], values[drawn])
        # Health marks are taken in with the analysis (in batches), in arrival order.
        self._health_pending.append(_PendingHealth(health, stamp, recv, time, health_values, crossed_reset))
        if self.joints is None and all(self.sides[s].joints is not None for s in SIDES):
            self._pair_joints()

    def _pair_joints(self) -> None:
        """Pair the sides' joints once both hold joint rows (a side's layout is fixed by
        its first batch of names even when every row of it was refused)."""
        self.joints, warnings = pair_joints(self._layout["sim"], self._layout["real"], self._explicit_joints)
        self.warnings += warnings
        if not len(self.joints.names):
            self.warnings.append(f"no joint of the sim side ({', '.join(self._layout['sim'])}) pairs with one of "
                                 f"the real side ({', '.join(self._layout['real'])})")

    def flush_health(self) -> None:
        """Take the health marks of the rows stored since the last batch, in arrival order.

        Each stream's rows go in as one batch (split only where its side's clock was
        reset): the health's statistics are the same for any batching, and one call per
        stream costs a fraction of one per stored chunk."""
        pending, self._health_pending = self._health_pending, []
        runs: dict[StreamHealth, list[_PendingHealth]] = {}
        for rows in pending:
            if rows.crossed_reset:
                _add_health(rows.health, runs.pop(rows.health, []))
                rows.health.reset_stamps()
            runs.setdefault(rows.health, []).append(rows)
        for health, run in runs.items():
            _add_health(health, run)

    def waited_streams(self) -> list[tuple[StreamBuffer, StreamHealth]]:
        """The streams a grid time waits for (joints and wrench of both sides)."""
        out = []
        for side in SIDES:
            streams = self.sides[side]
            for buffer, health in ((streams.joints, streams.joint_health), (streams.wrench, streams.wrench_health)):
                if buffer is not None and health is not None:
                    out.append((buffer, health))
        return out

    def trim(self, before_ns: int, marks_before_ns: int) -> None:
        """Forget rows older than before_ns and health marks older than marks_before_ns."""
        for streams in self.sides.values():
            for buffer in (streams.joints, streams.wrench, streams.ee_pose, streams.object_pose):
                if buffer is not None:
                    buffer.trim(before_ns)
            for health in (streams.joint_health, streams.wrench_health, streams.ee_pose_health,
                           streams.object_pose_health):
                if health is not None:
                    health.trim(marks_before_ns)
        for clock in self.clock.values():
            clock.trim(keep=20_000)

    def _find_motion_onset(self) -> None:
        """Watch the real arm leave its initial rest: the run start as the robots lived it.

        Robots start a trajectory on receipt, so the real arm's first motion out of rest is
        when the run started for it; the first command's receipt can lag that by the
        monitor's backlog. An arm already moving during the first ONSET_QUIET_S gives no
        onset.
        """
        buffer = self.sides["real"].joints
        if buffer is None or len(buffer) < 2 or "real" not in self._layout:
            return
        n = len(self._layout["real"])
        times, speed = buffer.time_ns, np.abs(np.nan_to_num(buffer.values[:, n:2 * n])).max(axis=1)
        rest_end = int(times[0]) + int(ONSET_QUIET_S * 1e9)
        if int(times[-1]) < rest_end:
            return
        quiet = int(np.searchsorted(times, rest_end, side="right"))
        rest = float(speed[:quiet].max())
        if rest > ONSET_MAX_REST_RAD_S:
            self._onset_done = True
            return
        moving = np.flatnonzero(speed[quiet:] > max(ONSET_SPEED_RAD_S, 3.0 * rest))
        if moving.size:
            self.onset_ns = int(times[quiet + moving[0]])
            self._onset_done = True


def _merged(staged: list[_Staged]) -> list[_Staged]:
    """Consecutive chunks of one stream joined where they name the same joints (a live
    node hands over one message at a time; the checks run on whole columns)."""
    out: list[_Staged] = []
    run: list[_Staged] = []
    for chunk in staged + [None]:  # type: ignore[list-item]
        if run and (chunk is None or chunk.names != run[0].names):
            out.append(run[0] if len(run) == 1 else _joined(run))
            run = []
        if chunk is not None:
            run.append(chunk)
    return out


def _joined(run: list[_Staged]) -> _Staged:
    frames = [c.frame_ids for c in run]
    same_frame = all(isinstance(f, str) and f == frames[0] for f in frames)
    frame_ids = frames[0] if same_frame else [
        f for c in run for f in ([c.frame_ids] * len(c.stamp_ns) if isinstance(c.frame_ids, str) else list(c.frame_ids))]
    return _Staged(run[0].seq, np.concatenate([c.stamp_ns for c in run]), np.concatenate([c.recv_ns for c in run]),
                   np.concatenate([c.values for c in run]), run[0].names, frame_ids)


def _add_health(health: StreamHealth, run: list[_PendingHealth]) -> None:
    """One stream's pending rows into its health, as one batch."""
    if run:
        health.add(np.concatenate([rows.stamp_ns for rows in run]), np.concatenate([rows.recv_ns for rows in run]),
                   np.concatenate([rows.time_ns for rows in run]), np.concatenate([rows.values for rows in run]))
