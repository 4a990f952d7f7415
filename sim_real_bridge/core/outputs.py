"""What the engine produces, as columns: one row per grid time published.

Each column set carries ``t_ns`` (the grid time, on the monitor time base) and
``decision_ns`` (when the monitor analysed it: the log time of a published message).
The live node publishes the rows of each batch as they come; replay writes whole
columns; the report plots them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from sim_real_bridge.core.events import EventRecord
from sim_real_bridge.core.ledger import CategoryShareRecord
from sim_real_bridge.core.read_stage import quat_angle

if TYPE_CHECKING:
    from sim_real_bridge.core.read_stage import Grid

PHASE_FREE = 0
PHASE_CONTACT = 1


class _Columns:
    """Shared behaviour of the column sets (dataclasses of equal-length arrays)."""

    t_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.t_ns)

    def take(self, rows: np.ndarray) -> Any:
        """The same columns at the given rows."""
        return type(self)(**{f.name: _take(getattr(self, f.name), rows) for f in fields(self)})  # type: ignore[arg-type]

    @classmethod
    def concat(cls, parts: list[Any]) -> Any:
        """Rows of several column sets of this type, in order."""
        first = parts[0]
        return cls(**{f.name: _concat([getattr(p, f.name) for p in parts]) for f in fields(first)})  # type: ignore[arg-type]


def _take(value: Any, rows: np.ndarray) -> Any:
    return value[rows] if isinstance(value, np.ndarray) else value


def _concat(values: list[Any]) -> Any:
    return np.concatenate(values) if isinstance(values[0], np.ndarray) else values[0]


@dataclass
class JointColumns(_Columns):
    """Per-joint residuals, (K, J) arrays in ``names`` order; timing per row."""

    t_ns: np.ndarray
    decision_ns: np.ndarray
    names: tuple[str, ...]
    position_residual_rad: np.ndarray
    velocity_residual_rad_s: np.ndarray
    effort_residual: np.ndarray
    clock_offset_s: np.ndarray
    clock_offset_std_s: np.ndarray
    latency_s: np.ndarray
    latency_std_s: np.ndarray



@dataclass
class PoseColumns(_Columns):
    """End-effector and object poses of both sides ((K, 3) positions, (K, 4) wxyz) and errors."""

    t_ns: np.ndarray
    decision_ns: np.ndarray
    sim_ee: np.ndarray  # (K, 7) position, orientation
    real_ee: np.ndarray
    ee_position_error_norm_m: np.ndarray
    ee_orientation_error_rad: np.ndarray
    has_object: np.ndarray
    sim_object: np.ndarray
    real_object: np.ndarray
    object_position_error_norm_m: np.ndarray
    object_orientation_error_rad: np.ndarray

    @classmethod
    def from_grid(cls, grid: Grid, period_ns: int) -> PoseColumns:
        """The grid times on the pose period where both sides' end effectors are known."""
        both = np.isfinite(grid.sim_ee).all(axis=1) & np.isfinite(grid.real_ee).all(axis=1)
        keep = (grid.t_ns % period_ns == 0) & both
        has_object = np.isfinite(grid.sim_object).all(axis=1) & np.isfinite(grid.real_object).all(axis=1)
        sim_ee, real_ee = grid.sim_ee[keep], grid.real_ee[keep]
        sim_obj, real_obj = grid.sim_object[keep], grid.real_object[keep]
        return cls(
            t_ns=grid.t_ns[keep], decision_ns=grid.decision_ns[keep], sim_ee=sim_ee, real_ee=real_ee,
            ee_position_error_norm_m=np.linalg.norm(real_ee[:, :3] - sim_ee[:, :3], axis=1),
            ee_orientation_error_rad=quat_angle(real_ee[:, 3:], sim_ee[:, 3:]), has_object=has_object[keep],
            sim_object=sim_obj, real_object=real_obj,
            object_position_error_norm_m=np.linalg.norm(real_obj[:, :3] - sim_obj[:, :3], axis=1),
            object_orientation_error_rad=quat_angle(real_obj[:, 3:], sim_obj[:, 3:]))



@dataclass
class ContactColumns(_Columns):
    """Wrist wrenches of both sides ((K, 6) force then torque, sensor frame) and contact phases."""

    t_ns: np.ndarray
    decision_ns: np.ndarray
    sim_wrench: np.ndarray
    real_wrench: np.ndarray
    sim_contact_phase: np.ndarray
    real_contact_phase: np.ndarray

    @classmethod
    def from_grid(cls, grid: Grid, sim_contact: np.ndarray, real_contact: np.ndarray,
                  period_ns: int) -> ContactColumns:
        """The grid times on the contact period where both sides' wrenches are known."""
        keep = (grid.t_ns % period_ns == 0) & grid.wrench_valid
        return cls(
            t_ns=grid.t_ns[keep], decision_ns=grid.decision_ns[keep], sim_wrench=grid.sim_wrench[keep],
            real_wrench=grid.real_wrench[keep],
            sim_contact_phase=np.where(sim_contact[keep], PHASE_CONTACT, PHASE_FREE),
            real_contact_phase=np.where(real_contact[keep], PHASE_CONTACT, PHASE_FREE))

    @property
    def residual(self) -> np.ndarray:
        """(K, 6) real minus sim."""
        return self.real_wrench - self.sim_wrench

    @property
    def force_residual_norm_n(self) -> np.ndarray:
        return np.linalg.norm(self.residual[:, :3], axis=1)

    @property
    def torque_residual_norm_nm(self) -> np.ndarray:
        return np.linalg.norm(self.residual[:, 3:], axis=1)



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
    lag_s: float = 0.0  # now minus the newest grid time analysed
    max_lag_s: float = 0.0  # of the run so far
    behind_share: float = 0.0  # share of the run so far spent more than BEHIND_S behind
    dropped_grid_times: int = 0  # dropped unanalysed (more than max_backlog_s behind)
    dropped_s: float = 0.0


@dataclass
class EngineOutput:
    """Everything produced by one call of the engine, in grid-time order."""

    joints: JointColumns | None = None
    poses: PoseColumns | None = None
    contacts: ContactColumns | None = None
    events: list[tuple[int, EventRecord]] = field(default_factory=list)  # (decision_ns, record)
    summaries: list[SummaryRecord] = field(default_factory=list)
    due: int = 0  # grid times that became due (live: their joints went out)
    analysed: int = 0
    skipped: int = 0

    def extend(self, other: EngineOutput) -> None:
        """Append another output's rows after this one's."""
        for name in ("joints", "poses", "contacts"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None and len(theirs):
                setattr(self, name, theirs if mine is None or not len(mine) else type(mine).concat([mine, theirs]))
        self.events += other.events
        self.summaries += other.summaries
        self.due += other.due
        self.analysed += other.analysed
        self.skipped += other.skipped
