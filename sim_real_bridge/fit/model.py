"""The model a fit corrects: an MJCF (or a built-in robot) matched to a recording's joints.

Holds the MjSpec, which actuator drives each recorded joint, the wrist force/torque
sensors and the free bodies, builds each window's initial state (joints and object
as measured, the actuators' ctrl history as commanded) and rolls windows out with
``mujoco.rollout``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import mujoco
import numpy as np
from mujoco import rollout

from sim_real_bridge.core.joint_names import pair_joints
from sim_real_bridge.fit.errors import FitError, ModelMismatchError
from sim_real_bridge.fit.parameters import ModelFacts, history_steps, payload_body
from sim_real_bridge.fit.windows import WindowData

_FULL = mujoco.mjtState.mjSTATE_FULLPHYSICS


def builtin_models() -> dict[str, Path]:
    """Built-in robots by name -> MJCF path (the shared registry when there is one)."""
    try:
        from sim_real_bridge.sim.robots import ROBOTS  # noqa: PLC0415 - present once the robots land
    except ImportError:
        from sim_real_bridge.sim.physics import DEFAULT_MODEL_PATH  # noqa: PLC0415

        return {"arm7": DEFAULT_MODEL_PATH}
    return {name: spec.model_path for name, spec in ROBOTS.items()}


def resolve_model(model: str | Path) -> tuple[Path, bool]:
    """(MJCF path, whether it is a built-in robot) of a built-in robot name or a file.

    A file is a built-in robot when it is one's own MJCF.

    Raises:
        FitError: neither a file nor a built-in robot.
    """
    text = str(model)
    robots = builtin_models()
    if text in robots:
        return robots[text], True
    path = Path(text)
    if not path.is_file():
        raise FitError(f"model {text}: no such MJCF file nor built-in robot (built-in: {', '.join(robots)})")
    # A built-in robot's own file is that robot: its simulator's load-time changes apply.
    return path, path.resolve() in {p.resolve() for p in robots.values()}


#: Geoms a built-in robot's MJCF compiles as colliding but the simulator switches off on load
#: (ArmPhysics: the stand-in's ``obstacle`` box).
BUILTIN_DISABLED_GEOMS: tuple[str, ...] = ("obstacle",)


def disable_builtin_extras(spec: mujoco.MjSpec) -> None:
    """Switch off the collisions the built-in robots' physics switches off on load."""
    for name in BUILTIN_DISABLED_GEOMS:
        geom = spec.geom(name)
        if geom is not None:
            geom.contype = 0
            geom.conaffinity = 0


@dataclass(frozen=True)
class Rollout:
    """A simulated window: step times t_s (k,), q_rad (k, J), wrench (k, 6) or None, object_pos_m (k, 3) or None."""

    t_s: np.ndarray
    q_rad: np.ndarray
    wrench: np.ndarray | None
    object_pos_m: np.ndarray | None


class FitModel:
    """An MJCF matched to the recorded joints.

    Recorded joints pair with the model's as replay pairs the sides (``pair_joints``):
    by ``joint_map``, then by equal names, then by equal names without each side's
    common prefix (``ur_shoulder_pan_joint`` and ``shoulder_pan_joint``).
    ``joint_names`` are the model's names of the recorded joints, in the recorded order.

    Args:
        path: the MJCF file.
        joint_names: the recorded joints.
        builtin: a built-in robot's model (its simulator's load-time changes are made).
        joint_map: explicit pairs, model joint name -> recorded joint name.

    Raises:
        FitError: the file does not load.
        ModelMismatchError: a recorded joint the model lacks or drives with no actuator,
            or an actuator on no recorded joint.
    """

    def __init__(self, path: Path, joint_names: Sequence[str], builtin: bool = False,
                 joint_map: dict[str, str] | None = None) -> None:
        self.path = Path(path)
        self.recorded_names = tuple(joint_names)
        self.joint_names = self.recorded_names
        self.builtin = builtin
        try:
            self.spec = mujoco.MjSpec.from_file(str(self.path))
            if builtin:
                disable_builtin_extras(self.spec)
            pin_servo_damping(self.spec, self.spec.compile())
            self.model = self.spec.compile()
        except (ValueError, FileNotFoundError) as exc:
            raise FitError(f"model {self.path}: cannot load: {exc}") from exc
        self.timestep_s = float(self.model.opt.timestep)
        self.joint_names = self._pair_names(joint_map or {})
        self.actuator_of_joint = self._match_joints()
        self.history_steps = history_steps(self.timestep_s)
        self.free_bodies = tuple(
            self.model.body(int(self.model.jnt_bodyid[j])).name for j in range(self.model.njnt)
            if self.model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE)
        self.object_body = self.free_bodies[0] if len(self.free_bodies) == 1 else ""
        self._qpos_adr = np.array([self.model.jnt_qposadr[self.model.joint(n).id] for n in self.joint_names])
        self._dof_adr = np.array([self.model.jnt_dofadr[self.model.joint(n).id] for n in self.joint_names])
        self._ctrl_cols = np.array([self.joint_names.index(self.model.joint(int(self.model.actuator_trnid[a, 0])).name)
                                    for a in range(self.model.nu)])
        self._wrench_adr = self._wrench_sensor_adr()

    def _pair_names(self, joint_map: dict[str, str]) -> tuple[str, ...]:
        """The model's name of each recorded joint (recorded order).

        Raises:
            ModelMismatchError: a recorded joint that pairs with no joint of the model.
        """
        model = self.model
        model_joints = [model.joint(j).name for j in range(model.njnt) if model.jnt_type[j] != mujoco.mjtJoint.mjJNT_FREE]
        pairs, _ = pair_joints(model_joints, self.recorded_names, joint_map)
        model_name_of = {self.recorded_names[r]: name for name, r in zip(pairs.names, pairs.real_index.tolist())}
        missing = [n for n in self.recorded_names if n not in model_name_of]
        if missing:
            raise ModelMismatchError(f"model {self.path}: recorded joint(s) {', '.join(missing)} not in the model "
                                     f"(model joints: {', '.join(model_joints)})")
        return tuple(model_name_of[n] for n in self.recorded_names)

    @property
    def renamed(self) -> dict[str, str]:
        """Recorded joint name -> model joint name, for the joints whose names differ."""
        return {r: m for r, m in zip(self.recorded_names, self.joint_names) if r != m}

    def _match_joints(self) -> dict[str, str]:
        model = self.model
        where = f"model {self.path}"
        out: dict[str, str] = {}
        for a in range(model.nu):
            if model.actuator_trntype[a] != mujoco.mjtTrn.mjTRN_JOINT:
                raise ModelMismatchError(f"{where}: actuator {model.actuator(a).name} drives no joint")
            joint = model.joint(int(model.actuator_trnid[a, 0])).name
            if joint not in self.joint_names:
                raise ModelMismatchError(f"{where}: actuator {model.actuator(a).name} drives joint {joint}, "
                                         f"which the recording lacks (recorded: {', '.join(self.joint_names)})")
            out[joint] = model.actuator(a).name
        unactuated = [n for n in self.joint_names if n not in out]
        if unactuated:
            raise ModelMismatchError(f"{where}: no actuator drives recorded joint(s) {', '.join(unactuated)}")
        return out

    def _wrench_sensor_adr(self) -> np.ndarray | None:
        model = self.model
        found = {}
        for kind in (mujoco.mjtSensor.mjSENS_FORCE, mujoco.mjtSensor.mjSENS_TORQUE):
            ids = [s for s in range(model.nsensor) if model.sensor_type[s] == kind]
            if len(ids) != 1:
                return None
            found[kind] = int(model.sensor_adr[ids[0]])
        force, torque = found.values()
        return np.concatenate([np.arange(force, force + 3), np.arange(torque, torque + 3)])

    @property
    def has_wrench(self) -> bool:
        """Whether the model has one wrist force and one torque sensor."""
        return self._wrench_adr is not None

    def facts(self, windows: Sequence[WindowData]) -> ModelFacts:
        """What parameter names expand to, with the contacts of the nominal model in ``windows``."""
        geoms: dict[str, None] = {}
        bodies: dict[str, None] = {}
        for wd in windows:
            g, b = self.contacts(wd)
            geoms.update(dict.fromkeys(g))
            bodies.update(dict.fromkeys(b))
        return ModelFacts(joints=self.joint_names,
                          actuators=tuple(self.actuator_of_joint[n] for n in self.joint_names),
                          contact_geoms=tuple(geoms), contact_bodies=tuple(bodies),
                          payload_body=payload_body(self.model))

    # ------------------------------------------------------------------ windows
    def fresh_spec(self) -> mujoco.MjSpec:
        """The model as loaded for the fit (servo damping pinned), to write values into."""
        return self.spec.copy()

    def initial_state(self, model: mujoco.MjModel, wd: WindowData) -> np.ndarray:
        """Full physics state at the window's start (time 0) for ``model`` (same joints as self.model)."""
        data = mujoco.MjData(model)
        if model.nkey:
            mujoco.mj_resetDataKeyframe(model, data, 0)
        data.time = 0.0
        data.qpos[self._qpos_adr] = wd.q0_rad
        data.qvel[self._dof_adr] = wd.qd0_rad_s
        if wd.object0 is not None and self.object_body:
            body = model.body(self.object_body)
            joint = int(model.body_jntadr[body.id])
            qadr, vadr = int(model.jnt_qposadr[joint]), int(model.jnt_dofadr[joint])
            pos, quat, vel = wd.object0
            data.qpos[qadr:qadr + 3] = pos
            data.qpos[qadr + 3:qadr + 7] = quat / np.linalg.norm(quat)
            data.qvel[vadr:vadr + 3] = vel
            data.qvel[vadr + 3:vadr + 6] = 0.0
        data.ctrl[:] = wd.ctrl_q_rad[0][self._ctrl_cols]
        if model.nhistory and len(wd.history_q_rad):
            for a in range(model.nu):
                nsample = int(model.actuator_history[a, 0])
                values = np.ascontiguousarray(wd.history_q_rad[-nsample:, self._ctrl_cols[a]][:, None])
                times = -self.timestep_s * np.arange(len(values), 0, -1, dtype=float)[:, None]
                mujoco.mj_initCtrlHistory(model, data, a, times, values)
        state = np.empty(mujoco.mj_stateSize(model, _FULL))
        mujoco.mj_getState(model, data, state, _FULL)
        return state

    def ctrl(self, wd: WindowData) -> np.ndarray:
        """Controls (k, nu) in actuator order on the window's physics grid."""
        return wd.ctrl_q_rad[:, self._ctrl_cols]

    def rollout(self, models: Sequence[mujoco.MjModel], windows: Sequence[WindowData],
                nthread: int | None = None) -> list[Rollout]:
        """Simulate each window with the paired model (one mujoco.rollout call)."""
        states = [self.initial_state(m, wd) for m, wd in zip(models, windows, strict=True)]
        steps = max(len(wd.ctrl_t_s) - 1 for wd in windows)
        controls = np.zeros((len(windows), steps, self.model.nu))
        for i, wd in enumerate(windows):
            ctrl = self.ctrl(wd)[:-1]
            controls[i, : len(ctrl)] = ctrl
            controls[i, len(ctrl):] = ctrl[-1]
        datas = [mujoco.MjData(models[0]) for _ in range(nthread or 1)]
        state, sensordata = rollout.rollout(list(models), datas, np.stack(states), controls)
        return [self._rollout_of(models[i], state[i], sensordata[i], len(windows[i].ctrl_t_s) - 1)
                for i in range(len(windows))]

    def _rollout_of(self, model: mujoco.MjModel, state: np.ndarray, sensordata: np.ndarray, steps: int) -> Rollout:
        state, sensordata = state[:steps], sensordata[:steps]
        q = state[:, 1 + self._qpos_adr]
        wrench = sensordata[:, self._wrench_adr] if self._wrench_adr is not None else None
        obj = None
        if self.object_body:
            joint = int(model.body_jntadr[model.body(self.object_body).id])
            adr = 1 + int(model.jnt_qposadr[joint])
            obj = state[:, adr:adr + 3]
        return Rollout(state[:, 0].copy(), q, wrench, obj)

    def contacts(self, wd: WindowData, stride: int = 5) -> tuple[list[str], list[str]]:
        """Geoms governing the contacts of the arm (and of free bodies it touches) in the
        nominal model's run of ``wd``, and the free bodies the arm touches."""
        model = self.model
        data = mujoco.MjData(model)
        mujoco.mj_setState(model, data, self.initial_state(model, wd), _FULL)
        arm_root = int(model.jnt_bodyid[model.joint(self.joint_names[0]).id])
        arm = {b for b in range(model.nbody) if _descends(model, b, arm_root)}
        free = {model.body(n).id for n in self.free_bodies}
        pairs: set[tuple[int, int]] = set()
        for k, ctrl in enumerate(self.ctrl(wd)[:-1]):
            data.ctrl[:] = ctrl
            mujoco.mj_step(model, data)
            if k % stride == 0 and data.ncon:
                pairs.update(zip(data.contact.geom1[: data.ncon].tolist(), data.contact.geom2[: data.ncon].tolist()))
        body_of = model.geom_bodyid
        touched = {int(body_of[g]) for pair in pairs for g in pair
                   if int(body_of[g]) in free and any(int(body_of[o]) in arm for o in pair)}
        geoms: dict[str, None] = {}
        for g1, g2 in sorted(pairs):
            b1, b2 = int(body_of[g1]), int(body_of[g2])
            if not ({b1, b2} & (arm | touched)):
                continue
            p1, p2 = model.geom_priority[g1], model.geom_priority[g2]
            for g in ([g1] if p1 > p2 else [g2] if p2 > p1 else [g1, g2]):
                if model.geom(g).name:
                    geoms[model.geom(g).name] = None
        return list(geoms), [model.body(b).name for b in sorted(touched)]


def pin_servo_damping(spec: mujoco.MjSpec, model: mujoco.MjModel) -> None:
    """Write each position actuator's compiled kv into ``spec`` in place of a ``dampratio``.

    MuJoCo turns a dampratio into kv from the inertia at compile time; a fitted mass or
    armature would then change the servo's damping, which a real controller keeps.
    """
    for a, actuator in enumerate(spec.actuators):
        if actuator.biastype == mujoco.mjtBias.mjBIAS_AFFINE and actuator.biasprm[2] > 0:
            actuator.biasprm[2] = model.actuator_biasprm[a, 2]


def _descends(model: mujoco.MjModel, body: int, ancestor: int) -> bool:
    while body > 0:
        if body == ancestor:
            return True
        body = int(model.body_parentid[body])
    return False
