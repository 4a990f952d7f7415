"""Injection kinds: what each does to the stand-in, its documented parameters, their checks.

Every parameter has a default; the ones that name a link or a joint or place something
in the workspace default per robot (``RobotSpec.injection_defaults``) and are checked
against that robot's names. ``KindSpec.generator_range`` gives the magnitudes the
scenario generator draws from (strong -> weak: a clear effect down to near the
detection limit). The table is documented in docs/ROBOT.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from sim_real_bridge.sim.robots import ARM7, RobotSpec

#: Gap categories, in the order the tour visits them.
CATEGORIES: tuple[str, ...] = ("dynamics", "contact", "sensor", "human", "unauthored")

#: Streams the sensor injections can act on.
STREAMS: tuple[str, ...] = ("joint_states", "wrench", "ee_pose", "object_pose")

Check = Callable[..., Any]


@dataclass(frozen=True)
class ParamSpec:
    """One documented parameter.

    Attributes:
        default: the default (``arm7``'s when ``per_robot``).
        description: what it means, with its unit.
        check: ``check(value, robot)`` returns the clean value or raises.
        per_robot: the default comes from the robot's ``injection_defaults``.
    """

    default: Any
    description: str
    check: Check
    per_robot: bool = False

    def default_for(self, kind: str, name: str, robot: RobotSpec) -> Any:
        """The default on ``robot``."""
        if self.per_robot:
            return robot.injection_defaults[(kind, name)]
        return self.default


@dataclass(frozen=True)
class KindSpec:
    """An injection kind: its category, what it does, its parameters, and its generator range.

    ``generator_range`` maps magnitude parameters to (strong, weak): the scenario
    generator draws between a clear effect and one near the detection limit.
    """

    category: str
    description: str
    params: Mapping[str, ParamSpec]
    generator_range: Mapping[str, tuple[float, float]] = field(default_factory=dict)


class BadValue(ValueError):
    """Raised by checkers; the scenario loader turns it into a ScenarioError naming file, entry and field."""


def number(low: float, high: float, low_open: bool = False) -> Check:
    def check(value: Any, robot: RobotSpec = ARM7) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise BadValue(f"must be a finite number, got {value!r}")
        if value < low or (low_open and value == low) or value > high:
            bracket = "(" if low_open else "["
            raise BadValue(f"must be in {bracket}{low}, {high}], got {value!r}")
        return float(value)

    return check


def _choice(options: tuple[str, ...]) -> Check:
    def check(value: Any, robot: RobotSpec = ARM7) -> str:
        if value not in options:
            raise BadValue(f"must be one of {', '.join(options)}, got {value!r}")
        return str(value)

    return check


def _vector3(nonzero: bool = False, positive: bool = False) -> Check:
    def check(value: Any, robot: RobotSpec = ARM7) -> tuple[float, float, float]:
        if (
            not isinstance(value, (list, tuple))
            or len(value) != 3
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
        ):
            raise BadValue(f"must be a list of 3 finite numbers, got {value!r}")
        if nonzero and not any(value):
            raise BadValue("must not be the zero vector")
        if positive and min(value) <= 0:
            raise BadValue(f"must have positive entries, got {value!r}")
        return tuple(float(v) for v in value)

    return check


def _joints(value: Any, robot: RobotSpec = ARM7) -> tuple[str, ...]:
    if value == "all":
        return robot.joint_names
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not names or not all(n in robot.joint_names for n in names):
        raise BadValue(f"must be 'all', a joint name or a list of joint names of {robot.name} "
                   f"({', '.join(robot.joint_names)}), got {value!r}")
    return tuple(names)


def _joint(value: Any, robot: RobotSpec = ARM7) -> str:
    if value not in robot.joint_names:
        raise BadValue(f"must be one of {', '.join(robot.joint_names)} (joints of {robot.name}), got {value!r}")
    return str(value)


def _link(value: Any, robot: RobotSpec = ARM7) -> str:
    if value not in robot.link_names:
        raise BadValue(f"must be one of {', '.join(robot.link_names)} (links of {robot.name}), got {value!r}")
    return str(value)


def _p(default: Any, description: str, check: Check, per_robot: bool = False) -> ParamSpec:
    return ParamSpec(default, description, check, per_robot)


#: Every injection kind with its documented parameters and defaults.
KINDS: dict[str, KindSpec] = {
    # ------------------------------------------------------------------ dynamics
    "actuation_latency": KindSpec(
        "dynamics",
        "Commanded joint targets reach the actuators late (a transport/servo delay).",
        {"delay_s": _p(0.06, "delay added to every commanded target, s", number(0.0, 1.0, True))},
        {"delay_s": (0.12, 0.015)},
    ),
    "gain": KindSpec(
        "dynamics",
        "Position-loop stiffness kp of the actuators is scaled (damping kv unchanged).",
        {
            "scale": _p(0.4, "factor on kp", number(0.0, 5.0, True)),
            "joints": _p("all", "'all', a joint name or a list of joint names", _joints),
        },
        {"scale": (0.3, 0.8)},
    ),
    "joint_friction": KindSpec(
        "dynamics",
        "Extra dry and viscous friction in the joints.",
        {
            "frictionloss_nm": _p(4.0, "added dry (Coulomb) friction, N m", number(0.0, 200.0)),
            "damping_nm_s_per_rad": _p(8.0, "added viscous damping, N m s/rad", number(0.0, 500.0)),
            "joints": _p("all", "'all', a joint name or a list of joint names", _joints),
        },
        {"frictionloss_nm": (6.0, 0.5), "damping_nm_s_per_rad": (10.0, 1.0)},
    ),
    "payload": KindSpec(
        "dynamics",
        "An uncompensated mass is attached to the tool (the controller does not know it).",
        {"mass_kg": _p(2.0, "payload mass, kg", number(0.0, 10.0, True))},
        {"mass_kg": (3.0, 0.4)},
    ),
    # ------------------------------------------------------------------- contact
    "friction": KindSpec(
        "contact",
        "Sliding friction of the table, object and tool is scaled.",
        {"scale": _p(0.3, "factor on the sliding friction coefficient", number(0.0, 5.0, True))},
        {"scale": (0.2, 0.7)},
    ),
    "stiffness": KindSpec(
        "contact",
        "Contact stiffness of the table, object and tool is scaled (softer or harder surfaces).",
        {"scale": _p(0.05, "factor on contact stiffness (solref time constant / sqrt(scale))", number(0.0, 4.0, True))},
        {"scale": (0.03, 0.3)},
    ),
    "object_mass": KindSpec(
        "contact",
        "The object is heavier (or lighter) than the simulator believes.",
        {"scale": _p(4.0, "factor on the object's mass and inertia", number(0.0, 50.0, True))},
        {"scale": (6.0, 1.5)},
    ),
    # -------------------------------------------------------------------- sensor
    "ft_bias_drift": KindSpec(
        "sensor",
        "The force/torque sensor's bias drifts linearly from the window's start (thermal drift).",
        {
            "force_rate_n_per_s": _p(1.0, "force bias growth, N/s", number(-50.0, 50.0)),
            "torque_rate_nm_per_s": _p(0.05, "torque bias growth, N m/s", number(-5.0, 5.0)),
            "axis": _p("z", "sensor axis that drifts", _choice(("x", "y", "z"))),
        },
        {"force_rate_n_per_s": (2.0, 0.2), "torque_rate_nm_per_s": (0.1, 0.01)},
    ),
    "dropout": KindSpec(
        "sensor",
        "Samples of one stream are lost.",
        {
            "stream": _p("wrench", "stream that loses samples", _choice(STREAMS)),
            "probability": _p(1.0, "fraction of samples dropped in the window", number(0.0, 1.0, True)),
        },
        {"probability": (1.0, 0.3)},
    ),
    "nan_burst": KindSpec(
        "sensor",
        "Samples of one stream carry NaN values.",
        {
            "stream": _p("wrench", "stream whose values become NaN", _choice(STREAMS)),
            "probability": _p(1.0, "fraction of samples turned to NaN in the window", number(0.0, 1.0, True)),
        },
        {"probability": (1.0, 0.1)},
    ),
    "frozen": KindSpec(
        "sensor",
        "One stream repeats its last value (stamps keep advancing).",
        {"stream": _p("joint_states", "stream that freezes", _choice(STREAMS))},
    ),
    "stamp_jitter": KindSpec(
        "sensor",
        "Header stamps of one stream get Gaussian noise (values unchanged).",
        {
            "stream": _p("joint_states", "stream whose stamps jitter", _choice(STREAMS)),
            "std_ms": _p(4.0, "standard deviation of the stamp noise, ms", number(0.0, 100.0, True)),
        },
        {"std_ms": (8.0, 1.0)},
    ),
    # --------------------------------------------------------------------- human
    "push": KindSpec(
        "human",
        "A person pushes a link with a steady force (ramped in and out).",
        {
            "force_n": _p(40.0, "force magnitude, N", number(0.0, 300.0, True)),
            "direction": _p((0.0, 1.0, 0.0), "world-frame direction (normalised)", _vector3(nonzero=True)),
            "link": _p("link6", "body pushed (a link of the robot, or tool)", _link, per_robot=True),
            "ramp_s": _p(0.2, "rise and fall time, s", number(0.0, 5.0)),
        },
        {"force_n": (60.0, 10.0)},
    ),
    "hold": KindSpec(
        "human",
        "A person grabs a link and holds it where it was (spring-damper, force limited).",
        {
            "stiffness_n_per_m": _p(3000.0, "hand stiffness, N/m", number(0.0, 1e5, True)),
            "damping_n_s_per_m": _p(80.0, "hand damping, N s/m", number(0.0, 1e4)),
            "max_force_n": _p(120.0, "largest force the hand applies, N", number(0.0, 500.0, True)),
            "link": _p("link6", "body held (a link of the robot, or tool)", _link, per_robot=True),
        },
        {"max_force_n": (150.0, 30.0)},
    ),
    # ---------------------------------------------------------------- unauthored
    "object_slip": KindSpec(
        "unauthored",
        "The object loses grip on the table and creeps (a slick or vibrating surface).",
        {
            "friction_scale": _p(0.05, "factor on the object's sliding friction", number(0.0, 1.0, True)),
            "drift_speed_m_s": _p(0.02, "creep speed the object approaches, m/s", number(0.0, 0.5)),
            "direction": _p((-1.0, 0.0, 0.0), "world-frame creep direction (normalised; z ignored)", _vector3(nonzero=True)),
            "max_force_n": _p(2.0, "largest creep force, N", number(0.0, 50.0)),
        },
        {"drift_speed_m_s": (0.03, 0.005)},
    ),
    "obstacle": KindSpec(
        "unauthored",
        "A box the simulator lacks appears in the workspace (default: across the reach and wipe paths). "
        "If the arm occupies its spot at `start_s` it is shown but turns solid only once the arm is clear "
        "of it (nothing materialises inside the robot).",
        {
            "position_m": _p((0.47, 0.12, 0.55), "box centre in the world frame, m", _vector3(), per_robot=True),
            "half_size_m": _p((0.03, 0.03, 0.15), "box half extents, m", _vector3(positive=True)),
        },
    ),
    "joint_stall": KindSpec(
        "unauthored",
        "One joint's drive stalls: the actuator gives no torque and the joint sticks.",
        {
            "joint": _p("joint4", "joint that stalls", _joint, per_robot=True),
            "frictionloss_nm": _p(300.0, "holding friction of the stalled joint, N m", number(0.0, 5000.0, True)),
        },
    ),
}
