"""What attribution looks at for one analysis time, and what it says of it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from sim_real_bridge.core.fits import DelayFit


@dataclass(slots=True)
class TickFeatures:
    """Everything attribution looks at for one analysis time (filled by the engine).

    Joint arrays are shape (J,) in the engine's joint order; NaN where unknown.
    """

    t_ns: int
    joints_valid: bool = False
    joint_residual_rad: float = 0.0
    effort_residual: float = 0.0
    joint_noise_rad: float = 0.0  # noise of the noisiest joint's residual
    effort_noise: float = 0.0
    #: the largest friction-like effort residual (N m): along each joint's motion, flipping with it
    friction_nm: float = 0.0
    #: of the largest effort residual, the share that friction-like part carries (0..1)
    friction_share: float = 0.0
    #: of the effort residuals' square, the share pushing back along the moving joints' motion (smoothed)
    friction_along_share: float = 0.0
    force_residual_n: float = 0.0
    torque_residual_nm: float = 0.0
    sim_force_n: float = 0.0
    #: the sim's contact force beyond the tool's weight (N, world, the sensor's sign)
    sim_contact_force_n: Sequence[float] = (0.0, 0.0, 0.0)
    external_force_n: Sequence[float] = (0.0, 0.0, 0.0)
    wrench_valid: bool = False
    sim_contact: bool = False
    sim_contact_recent: bool = False
    real_contact: bool = False
    sim_tip_velocity_m_s: np.ndarray = field(default_factory=lambda: np.zeros(3))
    real_tip_velocity_m_s: np.ndarray = field(default_factory=lambda: np.zeros(3))
    ee_error_m: float = float("nan")
    #: real minus sim tool position (m, world), NaN while the ee pose is untrusted
    ee_offset_m: Sequence[float] = (math.nan, math.nan, math.nan)
    object_error_m: float = float("nan")
    object_tool_error_m: float = float("nan")
    object_error_speed_m_s: float = float("nan")
    object_free_drift_m: float = 0.0
    real_tool_object_m: float = float("nan")
    sim_tool_object_m: float = float("nan")
    sim_object_speed_m_s: float = float("nan")
    stalled_joints: tuple[str, ...] = ()
    stall_s: float = 0.0
    #: the longest-stalled joint's drive has not pushed harder along its twin's motion since
    stall_undriven: bool = False
    fit: DelayFit | None = None
    unexplained_s: float = 0.0
    #: active stream health detectors: (name, severity, evidence)
    sensor_flags: list[tuple[str, float, dict[str, str]]] = field(default_factory=list)
    since_untrusted_s: float = float("inf")
    since_active_s: dict[str, float] = field(default_factory=dict)
    #: per category, time since it was last active in a run of at least ``established_min_s``
    since_established_s: dict[str, float] = field(default_factory=dict)
    last_kind: dict[str, str] = field(default_factory=dict)
    #: the free-space cause (dynamics or human) active as this contact phase began, or ""
    contact_carry: str = ""
    #: with a wrist force beyond human_force_n: whether the real tool last moved along with
    #: the sim's against it (dragging a hand) rather than stopping (blocked); None unknown
    load_dragged: bool | None = None
    #: a person's load has turned against its first direction (see core/load_reversal.py)
    load_reversed: bool = False


@dataclass(slots=True)
class Attribution:
    """Scores of one tick, the active categories and their kind/evidence."""

    t_ns: int
    scores: dict[str, float]
    active: dict[str, tuple[float, str, dict[str, str]]]
    top: str
    #: the unauthored score is the tail of an earlier unauthored cause, not new evidence
    tail: bool = False
    #: a category whose score continues its earlier direct evidence (it does not extend it)
    kept: str = ""
