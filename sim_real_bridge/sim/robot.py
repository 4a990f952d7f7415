"""A simulated robot without ROS: physics + trajectory follower + sampled output streams.

The ``sim_robot`` node wraps one of these; the ``reality_standin`` node wraps one with a
``RealityModel``. Tests run both side by side in-process with ``run_headless``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.reality import RealityModel, StreamSample
from sim_real_bridge.sim.tasks import TaskProgram
from sim_real_bridge.sim.trajectory import JointTrajectoryData, TrajectoryFollower

#: Output streams and their default publish rates, Hz.
DEFAULT_RATES_HZ: dict[str, float] = {
    "joint_states": 500.0,
    "wrench": 500.0,
    "ee_pose": 100.0,
    "object_pose": 100.0,
}


class SimulatedRobot:
    """Steps an ArmPhysics at its timestep, follows trajectories, emits stream samples.

    Args:
        physics: the robot's own physics (a fresh ArmPhysics by default).
        rates_hz: publish rate per stream (0 disables a stream); each period must be a
            whole number of physics timesteps.
        reality: optional RealityModel (the stand-in) acting on this robot's physics;
            when its scenario's robot has no wrench sensor, no wrench stream is sampled.

    Raises:
        ConfigError: a rate is negative or not a whole number of timesteps.
    """

    def __init__(
        self,
        physics: ArmPhysics | None = None,
        rates_hz: Mapping[str, float] | None = None,
        reality: RealityModel | None = None,
    ) -> None:
        self.physics = physics if physics is not None else ArmPhysics()
        self.reality = reality
        rates = dict(DEFAULT_RATES_HZ)
        if rates_hz:
            unknown = set(rates_hz) - set(DEFAULT_RATES_HZ)
            if unknown:
                raise ConfigError(f"unknown stream(s) {sorted(unknown)}; known: {list(DEFAULT_RATES_HZ)}")
            rates.update(rates_hz)
        if reality is not None and not reality.sensors.wrench:
            rates["wrench"] = 0.0
        step_ns = self.physics.timestep_ns
        self._period_steps: dict[str, int] = {}
        for stream, rate in rates.items():
            if rate < 0:
                raise ConfigError(f"rate of {stream} must be >= 0 Hz, got {rate}")
            if rate == 0:
                continue
            steps = 1e9 / rate / step_ns
            if abs(steps - round(steps)) > 1e-6 or round(steps) < 1:
                raise ConfigError(
                    f"rate of {stream} ({rate} Hz) must divide the physics rate {1e9 / step_ns:.0f} Hz"
                )
            self._period_steps[stream] = int(round(steps))
        self.rates_hz = rates
        self.follower = TrajectoryFollower(self.physics.joint_names, self.physics.q_rad)
        self.first_command_ns: int | None = None
        self._step_ns = step_ns
        self._step_index = int(round(self.physics.time_ns / step_ns))

    @property
    def streams(self) -> tuple[str, ...]:
        """The streams this robot samples (rate above 0)."""
        return tuple(self._period_steps)

    @property
    def time_ns(self) -> int:
        """Physics time, ns since reset, on the step grid.

        MuJoCo's clock is a float sum of steps, a few ns off the grid after minutes;
        counting steps keeps every stamp and every "is it time yet" exact.
        """
        return self._step_index * self._step_ns

    @property
    def elapsed_ns(self) -> int | None:
        """Time since the first command (None before it)."""
        if self.first_command_ns is None:
            return None
        return self.time_ns - self.first_command_ns

    def command(self, trajectory: JointTrajectoryData, start_ns: int | None = None) -> None:
        """Follow a new trajectory (replaces the current one) from now or ``start_ns``.

        Raises:
            TrajectoryError: the trajectory does not fit the arm.
        """
        now = self.time_ns
        if start_ns is not None:
            trajectory = JointTrajectoryData(trajectory.joint_names, trajectory.points, start_ns)
        self.follower.set_goal(trajectory, now)
        if self.first_command_ns is None:
            self.first_command_ns = now

    def recover(self) -> None:
        """After an unstable step: reset the state to home at the same time, and hold home.

        Model changes (the reality model's injections) are kept; the time is kept so
        stamps keep increasing.
        """
        physics = self.physics
        physics.reset()
        # MuJoCo's own reset on instability zeroes the time: restore it from the step count.
        physics.data.time = self._step_index * physics.model.opt.timestep
        physics.forward()
        self.follower = TrajectoryFollower(physics.joint_names, physics.q_rad)

    def advance(self, until_ns: int, max_steps: int | None = None) -> list[StreamSample]:
        """Step physics to the first step time at or after ``until_ns`` (or ``max_steps``
        steps); return samples due meanwhile.

        The trajectory's targets for every step are sampled at once (the goal cannot
        change during a call); stability is checked once, after the last step.

        Returns:
            samples in time order, stamped with physics time (ns); sensor injections of
            the reality model already applied.

        Raises:
            SimulationError: the physics became unstable during the call.
        """
        physics = self.physics
        step_ns = self._step_ns
        now_ns = self.time_ns
        count = max(0, -(-(until_ns - now_ns) // step_ns))
        if max_steps is not None:
            count = min(count, max_steps)
        times_ns = now_ns + step_ns * np.arange(count, dtype=np.int64)
        targets, _ = self.follower.sample_many(times_ns)
        reality = self.reality
        first = self.first_command_ns
        periods = list(self._period_steps.items())
        samples: list[StreamSample] = []
        for i in range(count):
            q_target = targets[i]
            if reality is not None:
                elapsed = None if first is None else int(times_ns[i]) - first
                q_target = reality.before_step(int(times_ns[i]), elapsed, q_target)
            physics.set_position_targets(q_target)
            physics.step_unchecked()
            self._step_index += 1
            due = [stream for stream, n in periods if self._step_index % n == 0]
            if due:
                samples.extend(self._sample(due))
        physics.check_stable()
        if reality is not None and samples:
            samples = reality.filter_samples(samples, self.first_command_ns)
        return samples

    def _sample(self, streams: list[str]) -> list[StreamSample]:
        physics = self.physics
        stamp = self.time_ns
        out = []
        for stream in streams:
            if stream == "joint_states":
                values = {"position": physics.q_rad, "velocity": physics.qd_rad_s, "effort": physics.effort}
            elif stream == "wrench":
                force, torque = physics.wrench_at_sensor()
                values = {"force": force, "torque": torque}
            elif stream == "ee_pose":
                pos, quat = physics.ee_pose()
                values = {"position": pos, "orientation": quat}
            else:
                pos, quat = physics.object_pose()
                values = {"position": pos, "orientation": quat}
            out.append(StreamSample(stream, stamp, values))
        return out


@dataclass
class StreamLog:
    """Samples of one robot run, per stream: stamps (k,) and value arrays (k, m)."""

    stamps_ns: dict[str, np.ndarray] = field(default_factory=dict)
    values: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    @classmethod
    def from_samples(cls, samples: list[StreamSample]) -> "StreamLog":
        """Group samples by stream."""
        log = cls()
        grouped: dict[str, list[StreamSample]] = {}
        for sample in samples:
            grouped.setdefault(sample.stream, []).append(sample)
        for stream, items in grouped.items():
            log.stamps_ns[stream] = np.array([s.stamp_ns for s in items], dtype=np.int64)
            log.values[stream] = {
                key: np.vstack([s.values[key] for s in items]) for key in items[0].values
            }
        return log

    def field(self, stream: str, key: str) -> np.ndarray:
        """Values of one field, shape (k, m); empty (0, 0) when the stream has none."""
        if stream not in self.values:
            return np.zeros((0, 0))
        return self.values[stream][key]

    def window(self, stream: str, key: str, start_ns: int, end_ns: int) -> np.ndarray:
        """Values with stamps in [start_ns, end_ns), shape (k, m)."""
        if stream not in self.stamps_ns:
            return np.zeros((0, 0))
        stamps = self.stamps_ns[stream]
        mask = (stamps >= start_ns) & (stamps < end_ns)
        return self.values[stream][key][mask]


def run_headless(robot: SimulatedRobot, program: TaskProgram, duration_s: float, chunk_ms: int = 20) -> StreamLog:
    """Play ``program`` into ``robot`` from its current time for ``duration_s``.

    The first segment is sent at the current physics time (t = 0 of the scenario), each
    later one at its offset, as the task_player does.
    """
    t0 = robot.time_ns
    end_ns = t0 + int(round(duration_s * 1e9))
    pending = list(program.segments)
    samples: list[StreamSample] = []
    chunk_ns = chunk_ms * 1_000_000
    while robot.time_ns < end_ns:
        while pending and t0 + pending[0][0] <= robot.time_ns:
            robot.command(pending.pop(0)[1])
        next_ns = min(end_ns, robot.time_ns + chunk_ns)
        if pending:
            next_ns = min(next_ns, t0 + pending[0][0])
        samples.extend(robot.advance(next_ns))
    return StreamLog.from_samples(samples)
