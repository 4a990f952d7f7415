"""The simulator parameters a fit knows, and how each maps onto a MuJoCo MjSpec.

Names are ``KIND`` or ``KIND:ELEMENT``:

============  ===========  ========================================================  ===========
kind          element      what it sets                                              unit
============  ===========  ========================================================  ===========
damping       joint        joint ``damping``                                          N m s/rad
frictionloss  joint        joint ``frictionloss`` (dry friction)                      N m
armature      joint        joint ``armature`` (rotor inertia)                         kg m^2
gain          joint        kp of the position actuator driving the joint (kv kept)    N m/rad
payload       body         mass of the uncompensated tool load (inertia of a 3 cm     kg
                           sphere), body ``payload`` (else ``tool``)
delay         --           ``delay`` of every actuator (ctrl history, linear interp)  s
friction      geom         sliding friction of a geom                                 --
solref        geom         contact time constant solref[0] (larger: softer)           s
mass          body         body mass, inertia scaled with it                          kg
============  ===========  ========================================================  ===========

A kind without an element expands to every element it applies to (``damping``: every
recorded joint; ``friction``: every geom in contact). Group names expand to the
defaults of a gap category: ``dynamics`` (gain, damping, frictionloss, armature of each
joint, payload, delay) and ``contact`` (friction and solref of the geoms governing the
contacts, mass of the free bodies in contact).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import mujoco
import numpy as np

from sim_real_bridge.fit.errors import UnknownParameterError

#: Kinds set per joint, on a body, on a geom, or once for the model.
JOINT_KINDS: tuple[str, ...] = ("gain", "damping", "frictionloss", "armature")
GEOM_KINDS: tuple[str, ...] = ("friction", "solref")
BODY_KINDS: tuple[str, ...] = ("mass",)
MODEL_KINDS: tuple[str, ...] = ("payload", "delay")
KINDS: tuple[str, ...] = JOINT_KINDS + MODEL_KINDS + GEOM_KINDS + BODY_KINDS
GROUPS: dict[str, tuple[str, ...]] = {
    "dynamics": JOINT_KINDS + MODEL_KINDS,
    "contact": GEOM_KINDS + BODY_KINDS,
}
UNITS: dict[str, str] = {"gain": "N m/rad", "damping": "N m s/rad", "frictionloss": "N m", "armature": "kg m^2",
                         "payload": "kg", "delay": "s", "friction": "", "solref": "s", "mass": "kg"}
#: Largest actuation delay a fit considers, s (sizes the actuators' ctrl history).
MAX_DELAY_S = 0.2
#: Radius of the sphere whose inertia a payload gets, m (as the stand-in's payload).
PAYLOAD_RADIUS_M = 0.03
PAYLOAD_BODIES: tuple[str, ...] = ("payload", "tool")


@dataclass(frozen=True)
class ModelFacts:
    """What parameter expansion needs to know of the model and the windows.

    Attributes:
        joints: the recorded joints (model names).
        actuators: actuator name per joint (same order).
        contact_geoms: geoms whose parameters govern a contact seen in the windows.
        contact_bodies: free bodies touched in the windows.
        payload_body: body the payload goes on, or "" when the model has none.
    """

    joints: tuple[str, ...]
    actuators: tuple[str, ...]
    contact_geoms: tuple[str, ...] = ()
    contact_bodies: tuple[str, ...] = ()
    payload_body: str = ""


@dataclass
class FitParameter:
    """One scalar parameter: its name, where it goes, nominal value and bounds."""

    name: str
    kind: str
    element: str
    nominal: float
    lower: float
    upper: float
    apply: Callable[[mujoco.MjSpec, float], None] = field(repr=False)
    attribute: str = ""

    @property
    def unit(self) -> str:
        """Physical unit of the value."""
        return UNITS[self.kind]

    @property
    def scale(self) -> float:
        """Typical magnitude, for the optimizer's variable scaling."""
        return max(abs(self.nominal), 0.05 * (self.upper - self.lower), 1e-6)


def payload_body(model: mujoco.MjModel) -> str:
    """The body a payload is put on (``payload``, else ``tool``), or ""."""
    for name in PAYLOAD_BODIES:
        if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name) >= 0:
            return name
    return ""


def expand_names(names: Sequence[str], facts: ModelFacts) -> list[str]:
    """Full parameter names (``kind:element``) for names, kinds and groups.

    Raises:
        UnknownParameterError: a name, kind, group or element the model does not have.
    """
    out: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        kinds = GROUPS.get(name, (name,) if ":" not in name else ())
        if kinds:
            for kind in kinds:
                _check_kind(kind)
                out += _elements_of(kind, facts)
            continue
        kind, element = name.split(":", 1)
        _check_kind(kind)
        if element not in _known_elements(kind, facts):
            raise UnknownParameterError(
                f"parameter {name!r}: {kind} applies to {', '.join(_known_elements(kind, facts)) or 'nothing here'}"
            )
        out.append(name)
    return list(dict.fromkeys(out))


def check_names(names: Sequence[str]) -> None:
    """Check the kinds and groups of ``names`` before any data is read (elements need the model).

    Raises:
        UnknownParameterError: a kind or group the fit does not know.
    """
    for raw in names:
        name = raw.strip()
        if name and name not in GROUPS:
            _check_kind(name.split(":", 1)[0])


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        known = ", ".join([f"{k}:JOINT" for k in JOINT_KINDS] + list(MODEL_KINDS)
                          + [f"{k}:GEOM" for k in GEOM_KINDS] + [f"{k}:BODY" for k in BODY_KINDS] + list(GROUPS))
        raise UnknownParameterError(f"unknown parameter {kind!r} (known: {known})")


def _known_elements(kind: str, facts: ModelFacts) -> tuple[str, ...]:
    if kind in JOINT_KINDS:
        return facts.joints
    if kind in GEOM_KINDS:
        return facts.contact_geoms
    if kind in BODY_KINDS:
        return facts.contact_bodies
    return ()


def _elements_of(kind: str, facts: ModelFacts) -> list[str]:
    if kind == "payload":
        return ["payload"] if facts.payload_body else []
    if kind == "delay":
        return ["delay"]
    return [f"{kind}:{element}" for element in _known_elements(kind, facts)]


def build_parameters(names: Sequence[str], spec: mujoco.MjSpec, model: mujoco.MjModel,
                     facts: ModelFacts) -> list[FitParameter]:
    """FitParameters for full names (see :func:`expand_names`), nominal values from ``model``.

    ``model`` is ``spec`` compiled; nothing is changed in either.
    """
    joint_actuator = dict(zip(facts.joints, facts.actuators))
    out = []
    for name in names:
        kind, _, element = name.partition(":")
        if kind == "gain":
            out.append(_gain(name, model, joint_actuator[element]))
        elif kind in ("damping", "frictionloss", "armature"):
            out.append(_joint_attr(name, kind, model, element))
        elif kind == "payload":
            out.append(_payload(name, model, facts.payload_body))
        elif kind == "delay":
            out.append(_delay(name, model))
        elif kind in GEOM_KINDS:
            out.append(_geom_attr(name, kind, model, element))
        else:
            out.append(_body_mass(name, model, element))
    return out


def _gain(name: str, model: mujoco.MjModel, actuator: str) -> FitParameter:
    act = model.actuator(actuator)
    kp = float(act.gainprm[0])
    kv = float(-act.biasprm[2])

    def apply(spec: mujoco.MjSpec, value: float) -> None:
        target = spec.actuator(actuator)
        target.gainprm[0] = value
        target.biasprm[1] = -value
        # Keep the damping the model had (a dampratio would change it with kp).
        target.biasprm[2] = -kv

    return FitParameter(name, "gain", actuator, kp, 0.05 * kp, 5.0 * kp, apply,
                        f"actuator {actuator}: kp (gainprm[0], -biasprm[1]); kv {kv:.4g} kept")


def _joint_attr(name: str, kind: str, model: mujoco.MjModel, joint: str) -> FitParameter:
    dof = int(model.joint(joint).dofadr[0])
    nominal = float({"damping": model.dof_damping, "frictionloss": model.dof_frictionloss,
                     "armature": model.dof_armature}[kind][dof])
    upper = {"damping": max(50.0, 20 * nominal), "frictionloss": max(50.0, 20 * nominal),
             "armature": max(5.0, 20 * nominal)}[kind]

    def apply(spec: mujoco.MjSpec, value: float) -> None:
        target = spec.joint(joint)
        if kind == "damping":
            target.damping[0] = value  # [0]: the linear coefficient
        else:
            setattr(target, kind, value)

    return FitParameter(name, kind, joint, nominal, 0.0, upper, apply, f"joint {joint}: {kind}")


def _payload(name: str, model: mujoco.MjModel, body: str) -> FitParameter:
    nominal = float(model.body(body).mass[0])

    def apply(spec: mujoco.MjSpec, value: float) -> None:
        target = spec.body(body)
        inertia = max(0.4 * value * PAYLOAD_RADIUS_M**2, 1e-9)
        target.explicitinertial = True
        target.mass = max(value, 1e-6)
        target.inertia = [inertia] * 3

    return FitParameter(name, "payload", body, nominal, 0.0, 10.0, apply,
                        f"body {body}: mass, inertia of a {PAYLOAD_RADIUS_M * 100:.0f} cm sphere")


def _delay(name: str, model: mujoco.MjModel) -> FitParameter:
    nominal = float(np.max(model.actuator_delay)) if model.nu else 0.0

    def apply(spec: mujoco.MjSpec, value: float) -> None:
        # A ctrl history just long enough, interpolated linearly; none without a delay.
        nsample = history_steps(spec.option.timestep, value) if value > 0 else 0
        for actuator in spec.actuators:
            actuator.delay = value
            actuator.nsample = nsample
            actuator.interp = 1 if nsample else 0

    return FitParameter(name, "delay", "", nominal, 0.0, MAX_DELAY_S, apply, "every actuator: delay")


def history_steps(timestep_s: float, delay_s: float = MAX_DELAY_S) -> int:
    """Physics steps of commanded targets a delay of ``delay_s`` reaches back to."""
    return int(np.ceil(delay_s / timestep_s)) + 2


def _geom_attr(name: str, kind: str, model: mujoco.MjModel, geom: str) -> FitParameter:
    gid = model.geom(geom).id
    if kind == "friction":
        nominal = float(model.geom_friction[gid, 0])
        lower, upper = 0.01, max(3.0, 3 * nominal)
    else:
        nominal = float(model.geom_solref[gid, 0])
        lower, upper = 2 * model.opt.timestep, max(1.0, 10 * nominal)

    def apply(spec: mujoco.MjSpec, value: float) -> None:
        getattr(spec.geom(geom), kind)[0] = value

    return FitParameter(name, kind, geom, nominal, lower, upper, apply, f"geom {geom}: {kind}[0]")


def _body_mass(name: str, model: mujoco.MjModel, body: str) -> FitParameter:
    compiled = model.body(body)
    mass = float(compiled.mass[0])
    inertia = compiled.inertia.copy()
    ipos, iquat = compiled.ipos.copy(), compiled.iquat.copy()

    def apply(spec: mujoco.MjSpec, value: float) -> None:
        target = spec.body(body)
        target.explicitinertial = True
        target.mass = value
        target.inertia = inertia * (value / mass)
        target.ipos = ipos
        target.iquat = iquat
        target.fullinertia = [np.nan] * 6

    return FitParameter(name, "mass", body, mass, 0.05 * mass, 50.0 * mass, apply,
                        f"body {body}: mass (inertia scaled with it)")


def apply_values(spec: mujoco.MjSpec, params: Sequence[FitParameter], values: Sequence[float]) -> mujoco.MjSpec:
    """Write ``values`` into ``spec`` (in place) and return it."""
    for param, value in zip(params, values, strict=True):
        param.apply(spec, float(value))
    return spec


#: Joint kinds whose shared screening factor scales the nominal values (others add to them).
SCALED_KINDS: frozenset[str] = frozenset({"gain"})


def group_parameters(params: Sequence[FitParameter]) -> tuple[list[FitParameter], dict[str, list[FitParameter]]]:
    """One shared parameter per joint kind with several joints, the other parameters as they are.

    A shared ``gain`` multiplies every joint's kp (nominal 1); a shared damping,
    frictionloss or armature is added to every joint's value (nominal 0), as one cause
    acting on the whole arm would.

    Returns:
        (screening parameters, members of each shared one by its name).
    """
    members: dict[str, list[FitParameter]] = {}
    for p in params:
        if p.kind in JOINT_KINDS:
            members.setdefault(p.kind, []).append(p)
    out: list[FitParameter] = []
    groups: dict[str, list[FitParameter]] = {}
    for p in params:
        group = members.get(p.kind, [])
        if len(group) < 2:
            out.append(p)
        elif p is group[0]:
            shared = _shared(p.kind, group)
            groups[shared.name] = group
            out.append(shared)
    return out, groups


def _shared(kind: str, group: list[FitParameter]) -> FitParameter:
    scaled = kind in SCALED_KINDS
    if scaled:
        lower, upper, nominal = max(p.lower / p.nominal for p in group), min(p.upper / p.nominal for p in group), 1.0
    else:
        lower, upper, nominal = -min(p.nominal - p.lower for p in group), min(p.upper - p.nominal for p in group), 0.0

    def apply(spec: mujoco.MjSpec, value: float) -> None:
        for p in group:
            p.apply(spec, p.nominal * value if scaled else p.nominal + value)

    what = "factor on" if scaled else "added to"
    return FitParameter(f"{kind}:*", kind, "*", nominal, lower, upper, apply,
                        f"{what} every joint's {kind} ({', '.join(p.element for p in group)})")


def member_value(shared: FitParameter, member: FitParameter, value: float) -> float:
    """A member's value implied by the shared parameter's ``value``."""
    return member.nominal * value if shared.kind in SCALED_KINDS else member.nominal + value
