"""The built-in arm behind a small class with named accessors (dm_control style, no rclpy)."""

from __future__ import annotations

from pathlib import Path

import mujoco
import numpy as np

from sim_real_bridge.errors import SimulationError
from sim_real_bridge.sim.robots import ROBOTS, robot_spec

#: The MJCF model of the default robot (``arm7``).
DEFAULT_MODEL_PATH = ROBOTS["arm7"].model_path

#: Joint names of the default robot (``arm7``), base to tip.
ARM_JOINT_NAMES: tuple[str, ...] = ROBOTS["arm7"].joint_names

#: Geoms whose friction and stiffness the `contact` injections change.
CONTACT_GEOM_NAMES: tuple[str, ...] = ("table", "object_geom", "tool_tip", "tool_shaft")

#: MuJoCo warnings that mean the state blew up (MuJoCo then resets it).
_UNSTABLE = (mujoco.mjtWarning.mjWARN_BADQACC, mujoco.mjtWarning.mjWARN_BADQVEL, mujoco.mjtWarning.mjWARN_BADQPOS)

#: Collision bits of world geoms (see arm.xml).
_WORLD_CONTYPE = 1
_WORLD_CONAFFINITY = 1


class ArmPhysics:
    """MuJoCo physics of an arm, its table and object.

    Works with any of the built-in models (``sim.robots``) and any MJCF laid out like
    them: the arm's hinge joints are those of the bodies under the body ``base``, each
    driven by one position actuator; sites ``ee`` and ``ft_sensor``, sensors ``ft_force``
    and ``ft_torque``, bodies ``object`` (free joint ``object_free``), ``payload`` and
    ``obstacle_body`` (mocap, geom ``obstacle``). Arrays returned are copies; shapes are
    given as ``(n,)`` with n the arm's joint count.

    Args:
        model_path: MJCF file; overrides ``robot``.
        robot: built-in robot name (``arm7``, ``ur6``, ``panda7``); default ``arm7``.

    Raises:
        SimulationError: the model cannot be loaded or lacks a required name.
        ConfigError: ``robot`` is not a built-in robot.
    """

    def __init__(self, model_path: str | Path | None = None, robot: str | None = None) -> None:
        if model_path is not None:
            path = Path(model_path)
            self.robot_name = robot or ""
        else:
            spec = robot_spec(robot)
            path, self.robot_name = spec.model_path, spec.name
        try:
            self.model = mujoco.MjModel.from_xml_path(str(path))
        except (ValueError, FileNotFoundError) as exc:
            raise SimulationError(f"cannot load MuJoCo model {path}: {exc}") from exc
        self.model_path = path
        self.data = mujoco.MjData(self.model)
        self._scratch = mujoco.MjData(self.model)
        try:
            base = self.model.body("base").id
            self._joint_ids = np.array(self._arm_joints(base), dtype=int)
            self._joint_names = tuple(self.model.joint(int(j)).name for j in self._joint_ids)
            self._qpos_adr = self.model.jnt_qposadr[self._joint_ids].copy()
            self._dof_adr = self.model.jnt_dofadr[self._joint_ids].copy()
            self._actuator_ids = np.array([self._actuator_of(int(j)) for j in self._joint_ids], dtype=int)
            self._ee_site = self.model.site("ee").id
            self._ft_site = self.model.site("ft_sensor").id
            self._object_body = self.model.body("object").id
            self._object_qpos_adr = int(self.model.jnt_qposadr[self.model.joint("object_free").id])
            self._obstacle_geom = self.model.geom("obstacle").id
            self._obstacle_mocap = int(self.model.body_mocapid[self.model.body("obstacle_body").id])
            self._force_adr = int(self.model.sensor_adr[self.model.sensor("ft_force").id])
            self._torque_adr = int(self.model.sensor_adr[self.model.sensor("ft_torque").id])
        except KeyError as exc:
            raise SimulationError(f"model {path} lacks a required element: {exc}") from exc
        links = tuple(self.model.body(int(self.model.jnt_bodyid[j])).name for j in self._joint_ids)
        self._link_names = links + (("tool",) if "tool" in self._body_names() else ())
        # Geoms of the arm: every body under "base" (the tool included).
        arm_bodies = {b for b in range(self.model.nbody) if self._descends_from(b, base)}
        self._arm_geoms = np.array([g for g in range(self.model.ngeom) if int(self.model.geom_bodyid[g]) in arm_bodies])
        self._home_key = self.model.key("home").id if self.model.nkey else None
        # Pristine copies so that injections can be undone exactly.
        self._nominal_gainprm = self.model.actuator_gainprm.copy()
        self._nominal_biasprm = self.model.actuator_biasprm.copy()
        self._nominal_geom_friction = self.model.geom_friction.copy()
        self._nominal_geom_solref = self.model.geom_solref.copy()
        self._nominal_body_mass = self.model.body_mass.copy()
        self._nominal_body_inertia = self.model.body_inertia.copy()
        self._nominal_dof_damping = self.model.dof_damping.copy()
        self._nominal_dof_frictionloss = self.model.dof_frictionloss.copy()
        self._nominal_obstacle_pos = self.model.body_pos[self.model.body("obstacle_body").id].copy()
        self._nominal_geom_size = self.model.geom_size.copy()
        self._nominal_geom_rgba = self.model.geom_rgba.copy()
        self.set_obstacle(False)
        self.reset()

    def _body_names(self) -> set[str]:
        return {self.model.body(b).name for b in range(self.model.nbody)}

    def _arm_joints(self, base: int) -> list[int]:
        hinge = int(mujoco.mjtJoint.mjJNT_HINGE)
        joints = [j for j in range(self.model.njnt)
                  if int(self.model.jnt_type[j]) == hinge and self._descends_from(int(self.model.jnt_bodyid[j]), base)]
        if not joints:
            raise KeyError("hinge joints under body 'base'")
        return joints

    def _actuator_of(self, joint: int) -> int:
        for a in range(self.model.nu):
            if (int(self.model.actuator_trntype[a]) == int(mujoco.mjtTrn.mjTRN_JOINT)
                    and int(self.model.actuator_trnid[a, 0]) == joint):
                return a
        raise KeyError(f"an actuator for joint {self.model.joint(joint).name!r}")

    # ----------------------------------------------------------------- lifecycle
    def reset(self) -> None:
        """Reset to the ``home`` keyframe (arm above the table, object at rest)."""
        if self._home_key is not None:
            mujoco.mj_resetDataKeyframe(self.model, self.data, self._home_key)
        else:
            mujoco.mj_resetData(self.model, self.data)
        mujoco.mj_forward(self.model, self.data)

    def step(self, n: int = 1) -> None:
        """Advance physics by ``n`` timesteps (1 ms each by default).

        Raises:
            SimulationError: the state became non-finite (MuJoCo reset it and warned).
        """
        mujoco.mj_step(self.model, self.data, nstep=int(n))
        self.check_stable()

    def step_unchecked(self) -> None:
        """Advance one timestep without the stability check (call ``check_stable`` after a run of them)."""
        mujoco.mj_step(self.model, self.data)

    def check_stable(self) -> None:
        """Raise if MuJoCo has reported an unstable state since the last reset.

        Raises:
            SimulationError: naming the warning and the time.
        """
        warnings = self.data.warning
        for kind in _UNSTABLE:
            if warnings[kind].number:
                raise SimulationError(f"MuJoCo reported an unstable state ({kind.name}) at t={self.data.time:.3f} s")

    def forward(self) -> None:
        """Recompute derived quantities (positions, sensors) without advancing time."""
        mujoco.mj_forward(self.model, self.data)

    # ----------------------------------------------------------------- accessors
    @property
    def timestep_ns(self) -> int:
        """Physics timestep in nanoseconds."""
        return int(round(self.model.opt.timestep * 1e9))

    @property
    def time_ns(self) -> int:
        """Simulated time since reset, nanoseconds."""
        return int(round(self.data.time * 1e9))

    @property
    def joint_names(self) -> tuple[str, ...]:
        """Names of the arm joints, base to tip."""
        return self._joint_names

    @property
    def n_joints(self) -> int:
        """Number of arm joints."""
        return len(self._joint_names)

    @property
    def link_names(self) -> tuple[str, ...]:
        """Bodies of the arm's joints, base to tip, then ``tool``."""
        return self._link_names

    @property
    def home_q_rad(self) -> np.ndarray:
        """Home joint positions, shape (n,)."""
        if self._home_key is None:
            return np.zeros(self.n_joints)
        return self.model.key_qpos[self._home_key][self._qpos_adr].copy()

    @property
    def q_rad(self) -> np.ndarray:
        """Joint positions, shape (n,)."""
        return self.data.qpos[self._qpos_adr].copy()

    @property
    def qd_rad_s(self) -> np.ndarray:
        """Joint velocities, shape (n,)."""
        return self.data.qvel[self._dof_adr].copy()

    @property
    def effort(self) -> np.ndarray:
        """Actuator torques, N m, shape (n,)."""
        return self.data.actuator_force[self._actuator_ids].copy()

    @property
    def position_targets(self) -> np.ndarray:
        """Current actuator position targets, shape (n,)."""
        return self.data.ctrl[self._actuator_ids].copy()

    def set_position_targets(self, q_rad: np.ndarray) -> None:
        """Set the position actuators' targets, shape (n,)."""
        self.data.ctrl[self._actuator_ids] = q_rad

    def set_joint_state(self, q_rad: np.ndarray, qd_rad_s: np.ndarray | None = None) -> None:
        """Teleport the arm to ``q_rad`` (and targets with it); for tests and IK."""
        self.data.qpos[self._qpos_adr] = q_rad
        self.data.qvel[self._dof_adr] = 0.0 if qd_rad_s is None else qd_rad_s
        self.set_position_targets(q_rad)
        mujoco.mj_forward(self.model, self.data)

    def wrench_at_sensor(self) -> tuple[np.ndarray, np.ndarray]:
        """Wrist force/torque in the sensor frame ``ft_sensor``.

        Returns:
            (force_n, torque_nm), each shape (3,).
        """
        sd = self.data.sensordata
        return (
            sd[self._force_adr : self._force_adr + 3].copy(),
            sd[self._torque_adr : self._torque_adr + 3].copy(),
        )

    def ee_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Tool-tip pose in the world frame.

        Returns:
            (pos_m shape (3,), quat_wxyz shape (4,)).
        """
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self._ee_site])
        return self.data.site_xpos[self._ee_site].copy(), quat

    def object_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Object pose in the world frame: (pos_m shape (3,), quat_wxyz shape (4,))."""
        adr = self._object_qpos_adr
        return self.data.qpos[adr : adr + 3].copy(), self.data.qpos[adr + 3 : adr + 7].copy()

    @property
    def joint_range_rad(self) -> np.ndarray:
        """Joint limits (lower, upper) per arm joint, shape (n, 2)."""
        return self.model.jnt_range[self._joint_ids].copy()

    def forward_kinematics(self, q_rad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Put the arm at ``q_rad`` (n,) kinematically (no dynamics, time unchanged).

        Overwrites this instance's state: meant for a scratch ArmPhysics (IK).

        Returns:
            tool-tip (pos_m (3,), rotation (3, 3)); ``ee_jacobian()`` is then valid.
        """
        self.data.qpos[self._qpos_adr] = q_rad
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_comPos(self.model, self.data)
        return self.data.site_xpos[self._ee_site].copy(), self.ee_rotation()

    def ee_jacobian(self) -> np.ndarray:
        """Tool-tip Jacobian w.r.t. the arm joints: rows (linear 3, angular 3), shape (6, n)."""
        jacp = np.zeros((3, self.model.nv))
        jacr = np.zeros((3, self.model.nv))
        mujoco.mj_jacSite(self.model, self.data, jacp, jacr, self._ee_site)
        return np.vstack([jacp[:, self._dof_adr], jacr[:, self._dof_adr]])

    def ee_rotation(self) -> np.ndarray:
        """Tool-tip rotation matrix in the world frame, shape (3, 3)."""
        return self.data.site_xmat[self._ee_site].reshape(3, 3).copy()

    def _descends_from(self, body: int, ancestor: int) -> bool:
        while body > 0:
            if body == ancestor:
                return True
            body = int(self.model.body_parentid[body])
        return False

    def arm_touches(self, geom_name: str | None = None) -> bool:
        """Whether any arm geom is in contact with the named geom (any non-arm geom if None)."""
        con = self.data.contact[: self.data.ncon]
        if not len(con):
            return False
        arm1 = np.isin(con.geom1, self._arm_geoms)
        arm2 = np.isin(con.geom2, self._arm_geoms)
        if geom_name is None:
            return bool(np.any(arm1 ^ arm2))
        gid = self.model.geom(geom_name).id
        return bool(np.any((arm1 & (con.geom2 == gid)) | (arm2 & (con.geom1 == gid))))

    def contact_count(self, geom_name: str) -> int:
        """Number of active contacts involving the named geom."""
        gid = self.model.geom(geom_name).id
        con = self.data.contact[: self.data.ncon]
        return int(np.sum((con.geom1 == gid) | (con.geom2 == gid)))

    # --------------------------------------------------- hooks for the reality model
    def body_id(self, name: str) -> int:
        """Id of a body by name. Raises SimulationError when absent."""
        try:
            return self.model.body(name).id
        except KeyError as exc:
            raise SimulationError(f"model has no body named {name!r}") from exc

    def joint_index(self, name: str) -> int:
        """Index (0..n-1) of an arm joint by name. Raises SimulationError when absent."""
        if name not in self._joint_names:
            raise SimulationError(f"model has no arm joint named {name!r}")
        return self._joint_names.index(name)

    def nominal_kp(self) -> np.ndarray:
        """Nominal stiffness kp of each arm position actuator, N m/rad, shape (n,)."""
        return self._nominal_gainprm[self._actuator_ids, 0].copy()

    def set_actuator_gain_scale(self, scale: np.ndarray) -> None:
        """Scale each position actuator's stiffness kp (damping kv unchanged), shape (n,)."""
        ids = self._actuator_ids
        self.model.actuator_gainprm[ids, 0] = self._nominal_gainprm[ids, 0] * scale
        self.model.actuator_biasprm[ids, 1] = self._nominal_biasprm[ids, 1] * scale

    def set_actuator_damping_scale(self, scale: np.ndarray) -> None:
        """Scale each position actuator's damping kv, shape (n,)."""
        ids = self._actuator_ids
        self.model.actuator_biasprm[ids, 2] = self._nominal_biasprm[ids, 2] * scale

    def set_joint_friction(self, damping_nm_s: np.ndarray, frictionloss_nm: np.ndarray) -> None:
        """Add viscous damping and dry friction to the arm joints, each shape (n,)."""
        dofs = self._dof_adr
        self.model.dof_damping[dofs] = self._nominal_dof_damping[dofs] + damping_nm_s
        self.model.dof_frictionloss[dofs] = self._nominal_dof_frictionloss[dofs] + frictionloss_nm

    def set_contact_friction_scale(self, scale: float, geom_names: tuple[str, ...] = CONTACT_GEOM_NAMES) -> None:
        """Scale the sliding friction of the named geoms (MuJoCo uses the pair's max)."""
        for name in geom_names:
            gid = self.model.geom(name).id
            self.model.geom_friction[gid, 0] = self._nominal_geom_friction[gid, 0] * scale

    def set_contact_stiffness_scale(self, scale: float, geom_names: tuple[str, ...] = CONTACT_GEOM_NAMES) -> None:
        """Scale contact stiffness of the named geoms (solref time constant by 1/sqrt(scale))."""
        for name in geom_names:
            gid = self.model.geom(name).id
            self.model.geom_solref[gid, 0] = self._nominal_geom_solref[gid, 0] / np.sqrt(scale)

    def set_body_mass_scale(self, body_name: str, scale: float) -> None:
        """Scale a body's mass and inertia."""
        bid = self.body_id(body_name)
        self.model.body_mass[bid] = self._nominal_body_mass[bid] * scale
        self.model.body_inertia[bid] = self._nominal_body_inertia[bid] * scale
        self._update_constants()

    def set_payload(self, mass_kg: float, radius_m: float = 0.03) -> None:
        """Set the mass of the uncompensated ``payload`` body in the tool (0 removes it)."""
        bid = self.body_id("payload")
        if mass_kg <= 0.0:
            self.model.body_mass[bid] = self._nominal_body_mass[bid]
            self.model.body_inertia[bid] = self._nominal_body_inertia[bid]
        else:
            self.model.body_mass[bid] = mass_kg
            self.model.body_inertia[bid] = 0.4 * mass_kg * radius_m**2
        self._update_constants()

    def _update_constants(self) -> None:
        # Constraint regularisation uses inverse weights derived from the masses; recompute
        # them on a scratch MjData so that the running state is untouched.
        mujoco.mj_setConst(self.model, self._scratch)

    def set_external_force(self, body_name: str, force_n: np.ndarray, torque_nm: np.ndarray | None = None) -> None:
        """Apply a world-frame force (3,) and torque (3,) at a body's centre of mass."""
        bid = self.body_id(body_name)
        self.data.xfrc_applied[bid, :3] = force_n
        self.data.xfrc_applied[bid, 3:] = 0.0 if torque_nm is None else torque_nm

    def clear_external_forces(self) -> None:
        """Remove every applied external force."""
        self.data.xfrc_applied[:] = 0.0

    def body_com_pos(self, body_name: str) -> np.ndarray:
        """World position of a body's centre of mass, shape (3,)."""
        return self.data.xipos[self.body_id(body_name)].copy()

    def body_com_vel(self, body_name: str) -> np.ndarray:
        """World linear velocity of a body's centre of mass (its inertial frame), shape (3,)."""
        vel = np.zeros(6)
        mujoco.mj_objectVelocity(
            self.model, self.data, mujoco.mjtObj.mjOBJ_BODY, self.body_id(body_name), vel, 0
        )
        return vel[3:].copy()

    def set_obstacle(self, enabled: bool, pos_m: np.ndarray | None = None, half_size_m: np.ndarray | None = None) -> None:
        """Enable (collide and show) or disable the ``obstacle`` box; optionally move/resize it."""
        gid = self._obstacle_geom
        self.data.mocap_pos[self._obstacle_mocap] = self._nominal_obstacle_pos if pos_m is None else pos_m
        self.model.geom_size[gid] = self._nominal_geom_size[gid] if half_size_m is None else half_size_m
        self.model.geom_contype[gid] = _WORLD_CONTYPE if enabled else 0
        self.model.geom_conaffinity[gid] = _WORLD_CONAFFINITY if enabled else 0
        self.model.geom_rgba[gid, 3] = 1.0 if enabled else 0.0
        # Bounding radius must cover a resized box for the broad phase.
        self.model.geom_rbound[gid] = float(np.linalg.norm(self.model.geom_size[gid]))
        self.model.geom_aabb[gid, 3:] = self.model.geom_size[gid]

    def set_obstacle_collides(self, collides: bool) -> None:
        """Switch the obstacle's collisions only (it stays placed and shown)."""
        gid = self._obstacle_geom
        self.model.geom_contype[gid] = _WORLD_CONTYPE if collides else 0
        self.model.geom_conaffinity[gid] = _WORLD_CONAFFINITY if collides else 0

    def obstacle_arm_distance_m(self, distmax_m: float = 0.1) -> float:
        """Smallest signed distance from the obstacle box to any arm geom (capped at distmax_m).

        Uses the geom poses of the last step (the mocap body moves with the next step).
        """
        gid = self._obstacle_geom
        return min(
            (mujoco.mj_geomDistance(self.model, self.data, gid, int(g), distmax_m, None) for g in self._arm_geoms),
            default=distmax_m,
        )

    @property
    def obstacle_enabled(self) -> bool:
        """Whether the obstacle box currently collides."""
        return bool(self.model.geom_contype[self._obstacle_geom])

    def restore_nominal(self) -> None:
        """Undo every model change made through the hooks above."""
        self.model.actuator_gainprm[:] = self._nominal_gainprm
        self.model.actuator_biasprm[:] = self._nominal_biasprm
        self.model.geom_friction[:] = self._nominal_geom_friction
        self.model.geom_solref[:] = self._nominal_geom_solref
        masses_changed = not np.array_equal(self.model.body_mass, self._nominal_body_mass)
        self.model.body_mass[:] = self._nominal_body_mass
        self.model.body_inertia[:] = self._nominal_body_inertia
        if masses_changed:
            self._update_constants()
        self.model.dof_damping[:] = self._nominal_dof_damping
        self.model.dof_frictionloss[:] = self._nominal_dof_frictionloss
        self.set_obstacle(False)
        self.clear_external_forces()
