"""The reality stand-in's departures from the simulator, applied as a scenario says.

A STAND-IN: in a real deployment the robot's own driver publishes the /real streams and
nothing here runs. ``RealityModel`` changes the stand-in's physics at each step
(dynamics, contact, human and unauthored kinds) and transforms the samples it
publishes: first what the scenario's ``sensors`` block says the physical robot
measures (quantized, noisy joint states), then the sensor kinds, according to the time
elapsed since the first mirrored command.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Iterable

import numpy as np

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.scenario import Injection, Scenario, Sensors

#: Kinds that change the physics (model parameters or applied forces).
PHYSICAL_KINDS = frozenset(
    {
        "actuation_latency", "gain", "joint_friction", "payload",
        "friction", "stiffness", "object_mass",
        "push", "hold",
        "object_slip", "obstacle", "joint_stall",
    }
)
#: Kinds that change only the published samples.
SENSOR_KINDS = frozenset({"ft_bias_drift", "dropout", "nan_burst", "frozen", "stamp_jitter"})

_AXES = {"x": 0, "y": 1, "z": 2}
#: Kinds that change reality only once the arm touches something: the geom it must touch
#: (None: anything). Until then the injected world behaves exactly like the simulator.
TOUCH_KINDS: dict[str, str | None] = {"obstacle": "obstacle", "friction": None, "stiffness": None,
                                      "object_mass": "object_geom"}
#: Thresholds of "the injection changes the physics now" (see RealityModel._acts_now):
#: actuator torque difference and joint speed.
_EFFECT_TORQUE_NM = 1e-5
_EFFECT_SPEED_RAD_S = 1e-6
#: Least distance between a new obstacle and the arm before the obstacle collides, m.
_OBSTACLE_CLEARANCE_M = 0.002
#: A frozen stream takes effect once the true value leaves the latched one by more than
#: this, per field (rad, rad/s, N m, N, m): a resting arm's readings settle by less.
_FROZEN_EFFECT_ATOL = {"position": 1e-6, "velocity": 1e-5, "effort": 1e-4, "force": 1e-4, "torque": 1e-4,
                       "orientation": 1e-6}
#: Gain of the creep force towards the drift velocity, N/(m/s).
_CREEP_GAIN_N_S_PER_M = 40.0


@dataclass(frozen=True)
class StreamSample:
    """One outgoing sample of a named stream.

    ``values`` holds float arrays: joint_states {position, velocity, effort} (n,);
    wrench {force, torque} (3,); ee_pose and object_pose {position (3,), orientation
    (4,) wxyz}.
    """

    stream: str
    stamp_ns: int
    values: dict[str, np.ndarray]
    #: Physics time the sample was taken (None: ``stamp_ns``); the sensor kinds may move
    #: the stamp (stamp_jitter), never this.
    time_ns: int | None = None

    def __post_init__(self) -> None:
        if self.time_ns is None:
            object.__setattr__(self, "time_ns", self.stamp_ns)


class RealityModel:
    """Applies a scenario's injections to a stand-in's physics and outgoing samples.

    Args:
        physics: the stand-in's own ArmPhysics (never the simulator's), of the scenario's robot.
        scenario: the validated scenario.
        rng: random generator for the sensor kinds (seed it from the scenario); the
            sensors block's noise draws from a generator spawned from it, so that noise
            leaves the sensor kinds' draws unchanged.
    """

    def __init__(self, physics: ArmPhysics, scenario: Scenario, rng: np.random.Generator) -> None:
        if physics.robot_name and physics.robot_name != scenario.robot:
            raise ConfigError(f"scenario {scenario.name!r} is for robot {scenario.robot!r}, "
                              f"the physics is {physics.robot_name!r}")
        self.physics = physics
        self.scenario = scenario
        self.rng = rng
        self.sensors: Sensors = scenario.sensors
        self._ideal_sensors = scenario.sensors.ideal
        self._noise_rng = rng.spawn(1)[0]
        self._physical = [inj for inj in scenario.injections if inj.kind in PHYSICAL_KINDS]
        self._sensor = [inj for inj in scenario.injections if inj.kind in SENSOR_KINDS]
        self._active_physical: frozenset[int] = frozenset()
        self._target_history: deque[tuple[int, np.ndarray]] = deque()
        self._hold_anchor: dict[int, np.ndarray] = {}
        self._last_values: dict[str, dict[str, np.ndarray]] = {}
        self._frozen_values: dict[int, dict[str, np.ndarray]] = {}
        self._needs_history = any(inj.kind == "actuation_latency" for inj in self._physical)
        self._max_delay_ns = max(
            (int(inj.params["delay_s"] * 1e9) for inj in self._physical if inj.kind == "actuation_latency"),
            default=0,
        )
        self.samples_dropped: dict[str, int] = {}
        #: injection index -> elapsed ns when it first changed reality (see effect_start_s).
        self.effect_ns: dict[int, int] = {}
        # Obstacles (by index in _physical) placed clear of the arm, so colliding; see _place_obstacles.
        self._obstacle_clear: set[int] = set()
        self._obstacle_steps: dict[int, int] = {}

    # ------------------------------------------------------------------ queries
    def active_injections(self, elapsed_ns: int | None) -> list[Injection]:
        """Injections whose window holds ``elapsed_ns`` (none before the first command)."""
        return [inj for inj in self.scenario.injections if inj.active(elapsed_ns)]

    def injection_states(self, elapsed_ns: int | None) -> list[tuple[Injection, bool]]:
        """Every injection of the scenario with whether it is active now."""
        return [(inj, inj.active(elapsed_ns)) for inj in self.scenario.injections]

    def effect_start_s(self, inj: Injection) -> float | None:
        """Seconds from the first command when ``inj`` first changed reality, None if not yet.

        Loads act from their start. An obstacle acts from the arm's first touch and the
        contact kinds (friction, stiffness, object_mass) from the first contact in their
        window; actuation kinds (gain, actuation_latency, joint_friction, joint_stall) from
        the first moment the position loop or the joint moves; sensor kinds from the first
        sample they change (a frozen stream once the true value leaves the latched one).
        Before that the stand-in's world and streams equal the simulator's, so there is no
        gap to detect.
        """
        ns = self.effect_ns.get(inj.index)
        return None if ns is None else ns * 1e-9

    def _maybe_note_effects(self, elapsed_ns: int | None, q_target_rad: np.ndarray, q_out_rad: np.ndarray) -> None:
        if elapsed_ns is None or len(self.effect_ns) == len(self.scenario.injections):
            return
        for inj in self.scenario.injections:
            if inj.index in self.effect_ns or not inj.active(elapsed_ns) or inj.kind in SENSOR_KINDS:
                continue
            if self._acts_now(inj, q_target_rad, q_out_rad):
                self._note_effect(inj, elapsed_ns)

    def _acts_now(self, inj: Injection, q_target_rad: np.ndarray, q_out_rad: np.ndarray) -> bool:
        """Whether a physical injection makes the stand-in's physics differ from nominal now.

        Contact kinds act on touch; actuation kinds only where the position loop works (a
        softer loop or a stalled joint changes nothing while the arm holds still at its
        target, a delay nothing while the target stands still, friction nothing at rest);
        loads (payload, push, hold, creep) act at once.
        """
        physics = self.physics
        p = inj.params
        if inj.kind in TOUCH_KINDS:
            return physics.arm_touches(TOUCH_KINDS[inj.kind])
        if inj.kind in ("gain", "joint_stall"):
            names = p["joints"] if inj.kind == "gain" else [p["joint"]]
            idx = [physics.joint_names.index(n) for n in names]
            scale = p["scale"] if inj.kind == "gain" else 0.0
            kp = physics.nominal_kp()[idx]
            torque = abs(scale - 1.0) * kp * np.abs(np.asarray(q_target_rad)[idx] - physics.q_rad[idx])
            return bool(np.max(torque) > _EFFECT_TORQUE_NM)
        if inj.kind == "actuation_latency":
            torque = physics.nominal_kp() * np.abs(np.asarray(q_out_rad) - np.asarray(q_target_rad))
            return bool(np.max(torque) > _EFFECT_TORQUE_NM)
        if inj.kind == "joint_friction":
            idx = [physics.joint_names.index(n) for n in p["joints"]]
            return bool(np.max(np.abs(physics.qd_rad_s[idx])) > _EFFECT_SPEED_RAD_S)
        return True

    def _note_effect(self, inj: Injection, elapsed_ns: int | None) -> None:
        if elapsed_ns is not None and inj.index not in self.effect_ns:
            self.effect_ns[inj.index] = elapsed_ns

    # ------------------------------------------------------------------ physics
    def before_step(self, now_ns: int, elapsed_ns: int | None, q_target_rad: np.ndarray) -> np.ndarray:
        """Apply physical injections for the step starting at ``now_ns``.

        Args:
            now_ns: physics time.
            elapsed_ns: time since the first mirrored command (None before it).
            q_target_rad: targets the controller wants now, shape (n,).

        Returns:
            targets the actuators actually get, shape (n,).
        """
        active = frozenset(i for i, inj in enumerate(self._physical) if inj.active(elapsed_ns))
        if active != self._active_physical:
            self._reconfigure(active)
        if any(self._physical[i].kind == "obstacle" and i not in self._obstacle_clear for i in active):
            self._place_obstacles(active)
        if self._needs_history:
            self._target_history.append((now_ns, np.array(q_target_rad, dtype=float)))
            horizon = now_ns - self._max_delay_ns
            while len(self._target_history) > 1 and self._target_history[1][0] <= horizon:
                self._target_history.popleft()
        q_out = q_target_rad
        if not active:
            self._maybe_note_effects(elapsed_ns, q_target_rad, q_out)
            return q_out
        self.physics.clear_external_forces()
        for i in active:
            inj = self._physical[i]
            kind = inj.kind
            if kind == "actuation_latency":
                q_out = self._delayed_target(now_ns - int(inj.params["delay_s"] * 1e9))
            elif kind == "push":
                self._apply_push(inj, elapsed_ns)
            elif kind == "hold":
                self._apply_hold(i, inj)
            elif kind == "object_slip":
                self._apply_creep(inj)
        self._maybe_note_effects(elapsed_ns, q_target_rad, q_out)
        return q_out

    def _delayed_target(self, t_ns: int) -> np.ndarray:
        chosen = self._target_history[0][1]
        for stamp, q in self._target_history:
            if stamp > t_ns:
                break
            chosen = q
        return chosen

    def _reconfigure(self, active: frozenset[int]) -> None:
        """Rebuild the model parameters from nominal for the new set of active injections."""
        physics = self.physics
        physics.restore_nominal()
        names = physics.joint_names
        n = len(names)
        gain = np.ones(n)
        damping_scale = np.ones(n)
        extra_damping = np.zeros(n)
        extra_friction = np.zeros(n)
        for i in sorted(active):
            inj = self._physical[i]
            p = inj.params
            kind = inj.kind
            if kind == "gain":
                for name in p["joints"]:
                    gain[names.index(name)] *= p["scale"]
            elif kind == "joint_friction":
                for name in p["joints"]:
                    extra_damping[names.index(name)] += p["damping_nm_s_per_rad"]
                    extra_friction[names.index(name)] += p["frictionloss_nm"]
            elif kind == "payload":
                physics.set_payload(p["mass_kg"])
            elif kind == "friction":
                physics.set_contact_friction_scale(p["scale"])
            elif kind == "stiffness":
                physics.set_contact_stiffness_scale(p["scale"])
            elif kind == "object_mass":
                physics.set_body_mass_scale("object", p["scale"])
            elif kind == "object_slip":
                physics.set_contact_friction_scale(p["friction_scale"], ("object_geom",))
            elif kind == "obstacle":
                physics.set_obstacle(True, np.array(p["position_m"]), np.array(p["half_size_m"]))
                physics.set_obstacle_collides(i in self._obstacle_clear)
            elif kind == "joint_stall":
                j = names.index(p["joint"])
                gain[j] = 0.0
                damping_scale[j] = 0.0
                extra_friction[j] += p["frictionloss_nm"]
            elif kind == "hold" and i not in self._active_physical:
                self._hold_anchor[i] = physics.body_com_pos(p["link"])
        physics.set_actuator_gain_scale(gain)
        physics.set_actuator_damping_scale(damping_scale)
        physics.set_joint_friction(extra_damping, extra_friction)
        for i in list(self._hold_anchor):
            if i not in active:
                del self._hold_anchor[i]
        self._active_physical = active

    def _place_obstacles(self, active: frozenset[int]) -> None:
        """Let an obstacle collide once it is clear of the arm.

        Nothing materialises inside a robot: an obstacle whose spot the arm occupies at its
        start (or touches within ``_OBSTACLE_CLEARANCE_M``) is shown but passed through until
        the arm has moved away; from then on it is solid.
        """
        for i in active:
            if self._physical[i].kind != "obstacle" or i in self._obstacle_clear:
                continue
            # The mocap body moves with the next step: judge from the step after placement.
            steps = self._obstacle_steps.get(i, 0) + 1
            self._obstacle_steps[i] = steps
            if steps >= 2 and self.physics.obstacle_arm_distance_m() > _OBSTACLE_CLEARANCE_M:
                self._obstacle_clear.add(i)
                self.physics.set_obstacle_collides(True)

    def _apply_push(self, inj: Injection, elapsed_ns: int) -> None:
        p = inj.params
        direction = np.asarray(p["direction"]) / np.linalg.norm(p["direction"])
        ramp_ns = p["ramp_s"] * 1e9
        if ramp_ns > 0:
            level = min(1.0, (elapsed_ns - inj.start_ns) / ramp_ns, (inj.end_ns - elapsed_ns) / ramp_ns)
        else:
            level = 1.0
        self._add_force(p["link"], max(0.0, level) * p["force_n"] * direction)

    def _apply_hold(self, i: int, inj: Injection) -> None:
        p = inj.params
        link = p["link"]
        pos = self.physics.body_com_pos(link)
        vel = self.physics.body_com_vel(link)
        force = -p["stiffness_n_per_m"] * (pos - self._hold_anchor[i]) - p["damping_n_s_per_m"] * vel
        norm = np.linalg.norm(force)
        if norm > p["max_force_n"]:
            force *= p["max_force_n"] / norm
        self._add_force(link, force)

    def _apply_creep(self, inj: Injection) -> None:
        p = inj.params
        direction = np.array(p["direction"], dtype=float)
        direction[2] = 0.0
        norm = np.linalg.norm(direction)
        if norm == 0.0 or p["drift_speed_m_s"] == 0.0:
            return
        target_vel = direction / norm * p["drift_speed_m_s"]
        vel = self.physics.body_com_vel("object")
        force = _CREEP_GAIN_N_S_PER_M * (target_vel - vel)
        force[2] = 0.0
        magnitude = np.linalg.norm(force)
        if magnitude > p["max_force_n"]:
            force *= p["max_force_n"] / magnitude
        self._add_force("object", force)

    def _add_force(self, body: str, force_n: np.ndarray) -> None:
        bid = self.physics.body_id(body)
        self.physics.data.xfrc_applied[bid, :3] += force_n

    # ------------------------------------------------------------------ sensors
    def filter_samples(self, samples: Iterable[StreamSample], first_command_ns: int | None) -> list[StreamSample]:
        """Apply sensor injections to outgoing samples (drop, NaN, freeze, drift, jitter).

        Args:
            samples: in time order; stamps are physics time (ns).
            first_command_ns: physics time of the first mirrored command (None before it).
        """
        out = []
        for sample in samples:
            elapsed = None if first_command_ns is None else sample.stamp_ns - first_command_ns
            result = self._filter_one(sample, elapsed)
            if result is not None:
                out.append(result)
        return out

    def measure(self, sample: StreamSample) -> StreamSample:
        """What the physical robot's sensors report for a true sample (the sensors block).

        Joint positions get Gaussian noise (``joint_noise_rad``) and are then quantized to
        ``encoder_resolution_rad``; efforts get Gaussian noise (``effort_noise``). Other
        streams and ideal sensors pass unchanged.
        """
        sensors = self.sensors
        if self._ideal_sensors or sample.stream != "joint_states":
            return sample
        values = dict(sample.values)
        q = values["position"]
        if sensors.joint_noise_rad > 0:
            q = q + self._noise_rng.normal(0.0, sensors.joint_noise_rad, q.shape)
        if sensors.encoder_resolution_rad > 0:
            q = np.round(q / sensors.encoder_resolution_rad) * sensors.encoder_resolution_rad
        values["position"] = q
        if sensors.effort_noise > 0:
            effort = values["effort"]
            values["effort"] = effort + self._noise_rng.normal(0.0, sensors.effort_noise, effort.shape)
        return replace(sample, values=values)

    def _filter_one(self, sample: StreamSample, elapsed_ns: int | None) -> StreamSample | None:
        sample = self.measure(sample)
        stream = sample.stream
        values = sample.values
        stamp_ns = sample.stamp_ns
        touched = False
        active = [inj for inj in self._sensor if inj.active(elapsed_ns)]
        for inj in self._sensor:
            if inj.kind == "frozen" and not inj.active(elapsed_ns):
                self._frozen_values.pop(inj.index, None)
        drop = False
        for inj in active:
            p = inj.params
            kind = inj.kind
            if kind == "ft_bias_drift" and stream == "wrench":
                seconds = (elapsed_ns - inj.start_ns) * 1e-9
                axis = _AXES[p["axis"]]
                if not touched:
                    values = {k: v.copy() for k, v in values.items()}
                    touched = True
                values["force"][axis] += p["force_rate_n_per_s"] * seconds
                values["torque"][axis] += p["torque_rate_nm_per_s"] * seconds
                if seconds > 0:
                    self._note_effect(inj, elapsed_ns)
            elif kind == "frozen" and p["stream"] == stream:
                latched = self._frozen_values.get(inj.index)
                if latched is None:
                    latched = self._last_values.get(stream, values)
                    self._frozen_values[inj.index] = {k: v.copy() for k, v in latched.items()}
                    latched = self._frozen_values[inj.index]
                values = {k: v.copy() for k, v in latched.items()}
                touched = True
                if any(not np.allclose(latched[k], sample.values[k], rtol=0.0, atol=_FROZEN_EFFECT_ATOL[k])
                       for k in latched):
                    self._note_effect(inj, elapsed_ns)
            elif kind == "nan_burst" and p["stream"] == stream:
                if self.rng.random() < p["probability"]:
                    values = {k: np.full_like(v, np.nan) for k, v in values.items()}
                    touched = True
                    self._note_effect(inj, elapsed_ns)
            elif kind == "dropout" and p["stream"] == stream:
                if self.rng.random() < p["probability"]:
                    drop = True
                    self._note_effect(inj, elapsed_ns)
            elif kind == "stamp_jitter" and p["stream"] == stream:
                stamp_ns += int(round(self.rng.normal(0.0, p["std_ms"] * 1e6)))
                self._note_effect(inj, elapsed_ns)
        if not any(inj.kind == "frozen" and inj.params["stream"] == stream for inj in active):
            self._last_values[stream] = sample.values
        if drop:
            self.samples_dropped[stream] = self.samples_dropped.get(stream, 0) + 1
            return None
        if not touched and stamp_ns == sample.stamp_ns:
            return sample
        return replace(sample, stamp_ns=stamp_ns, values=values)
