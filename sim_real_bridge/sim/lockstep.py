"""The simulator and the stand-in side by side in one process, with a transport model: columns out.

``run_lockstep(scenario)`` plays the scenario's command program into a simulated robot
and into the stand-in (a simulated robot with the scenario's ``RealityModel``) at the
physics rate (1 kHz), as the demo graph does over DDS, and returns what a monitor would
receive: per side and stream the header stamps, the receive times and the values as
columns, the mirrored commands, and the stand-in's truth labels. It knows nothing of
the analysis: adapters (bench/attribution_eval.py) turn the columns into whatever the
analysis takes.

Transport (``Transport``): the real robot's clock runs elsewhere (a fixed offset on its
stamps); each sample reaches the monitor a base delay plus exponential jitter after it
was taken, in order per stream (one writer per topic: DDS keeps order, delays queue);
the stand-in hears each command 0-2 ms after the simulator; streams flow for a pre-roll
before the first command. All times are integer nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.reality import RealityModel, StreamSample
from sim_real_bridge.sim.robot import SimulatedRobot
from sim_real_bridge.sim.scenario import Scenario
from sim_real_bridge.sim.tasks import build_program
from sim_real_bridge.sim.trajectory import JointTrajectoryData

SIDES: tuple[str, ...] = ("sim", "real")
#: Longest stretch a robot is stepped between two looks at its command schedule, ns.
_CHUNK_NS = 100_000_000


@dataclass(frozen=True)
class Transport:
    """How the streams and commands reach the monitor.

    Attributes:
        real_clock_offset_ns: added to every stamp of the real side (its clock runs elsewhere).
        monitor_epoch_ns: the monitor's clock at physics time 0.
        recv_base_ns: least delay from sampling to receipt.
        recv_jitter_mean_ns: mean of the exponential part of the receive delay.
        real_command_delay_ns: how much later the stand-in hears each command than the
            simulator; None: 0, 1 or 2 ms, drawn per run.
        command_recv_ns: delay from a command's mirroring to the monitor's receipt.
        pre_roll_ns: streams flow this long before the first command.
    """

    real_clock_offset_ns: int = 1_234_567_890_123
    monitor_epoch_ns: int = 1_700_000_000_000_000_000
    recv_base_ns: int = 1_000_000
    recv_jitter_mean_ns: float = 400_000.0
    real_command_delay_ns: int | None = None
    command_recv_ns: int = 300_000
    pre_roll_ns: int = 500_000_000


@dataclass(frozen=True)
class StreamColumns:
    """One stream of one side: k samples in receive order (also stamp order unless jittered).

    Attributes:
        stamp_ns: header stamps on the side's own clock, shape (k,), int64.
        recv_ns: receive times on the monitor's clock, shape (k,), int64, increasing.
        values: field -> array (k, m): joint_states position, velocity, effort (m = joints);
            wrench force, torque (3); ee_pose and object_pose position (3), orientation
            (4, w x y z).
    """

    stamp_ns: np.ndarray
    recv_ns: np.ndarray
    values: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        return int(self.stamp_ns.shape[0])


@dataclass(frozen=True)
class CommandColumns:
    """The mirrored commands, in order.

    Attributes:
        sim_ns: physics time at which the simulator took each command, shape (c,).
        real_ns: physics time at which the stand-in took it, shape (c,).
        recv_ns: the monitor's receive time of each command, shape (c,).
        trajectories: the commands themselves (start on receipt: stamp 0).
        phases: the program segment each command starts (reach, wipe, push, idle).
    """

    sim_ns: np.ndarray
    recv_ns: np.ndarray
    real_ns: np.ndarray
    trajectories: tuple[JointTrajectoryData, ...]
    phases: tuple[str, ...]


@dataclass(frozen=True)
class LockstepRun:
    """Everything one in-process run produced.

    Attributes:
        scenario: the scenario run.
        joint_names: the robot's joints, the column order of joint_states values.
        streams: side ("sim", "real") -> stream name -> columns. A stream the side never
            published (a robot without a wrench sensor) is absent.
        commands: the mirrored commands.
        labels: the stand-in's truth labels, one per injection: category, kind, start_s,
            end_s (scenario time), effect_start_s (NaN when it never changed reality),
            params.
        samples_dropped: samples the stand-in's sensor kinds dropped, by stream.
        first_command_recv_ns: the monitor's receive time of the first command (t = 0).
        transport: the transport model used.
    """

    scenario: Scenario
    joint_names: tuple[str, ...]
    streams: dict[str, dict[str, StreamColumns]]
    commands: CommandColumns
    labels: list[dict]
    samples_dropped: dict[str, int]
    first_command_recv_ns: int
    transport: Transport = field(default_factory=Transport)


def run_lockstep(
    scenario: Scenario,
    transport: Transport | None = None,
    transport_seed: int | None = None,
    rates_hz: Mapping[str, float] | None = None,
) -> LockstepRun:
    """Run the simulator and the stand-in on the scenario's program; return the columns.

    Args:
        scenario: a validated scenario (its robot, sensors, idle windows and injections).
        transport: the transport model (defaults: ``Transport()``).
        transport_seed: seeds the transport's randomness (default: the scenario's seed).
        rates_hz: stream rates of both robots (defaults: ``robot.DEFAULT_RATES_HZ``).
    """
    transport = transport or Transport()
    rng = np.random.default_rng(scenario.seed if transport_seed is None else transport_seed)
    program = build_program(scenario.task, scenario.duration_s, scenario.robot, scenario.idle)
    sim = SimulatedRobot(ArmPhysics(robot=scenario.robot), rates_hz=rates_hz)
    real_physics = ArmPhysics(robot=scenario.robot)
    reality = RealityModel(real_physics, scenario, np.random.default_rng(scenario.seed))
    real = SimulatedRobot(real_physics, rates_hz=rates_hz, reality=reality)
    step_ns = sim.physics.timestep_ns
    delay_ns = transport.real_command_delay_ns
    if delay_ns is None:
        delay_ns = int(rng.integers(0, 3)) * step_ns
    end_ns = transport.pre_roll_ns + int(round(scenario.duration_s * 1e9))
    offsets = np.array([offset for offset, _ in program.segments], dtype=np.int64)
    keep = transport.pre_roll_ns + offsets < end_ns
    trajectories = tuple(traj for (_, traj), k in zip(program.segments, keep) if k)
    sim_ns = transport.pre_roll_ns + offsets[keep]
    samples = {
        "sim": _play(sim, list(zip(sim_ns.tolist(), trajectories)), end_ns),
        "real": _play(real, list(zip((sim_ns + delay_ns).tolist(), trajectories)), end_ns),
    }
    streams = {side: _transport(side, blocks, transport, rng) for side, blocks in samples.items()}
    commands = CommandColumns(
        sim_ns=sim_ns,
        recv_ns=transport.monitor_epoch_ns + sim_ns + transport.command_recv_ns,
        real_ns=sim_ns + delay_ns,
        trajectories=trajectories,
        phases=tuple(phase.name for phase, k in zip(program.phases, keep) if k),
    )
    return LockstepRun(
        scenario=scenario,
        joint_names=tuple(sim.physics.joint_names),
        streams=streams,
        commands=commands,
        labels=_labels(reality, scenario),
        samples_dropped=dict(reality.samples_dropped),
        first_command_recv_ns=int(commands.recv_ns[0]),
        transport=transport,
    )


def _play(robot: SimulatedRobot, schedule: list[tuple[int, JointTrajectoryData]], end_ns: int) -> dict[str, list]:
    """Step ``robot`` to ``end_ns``, commanding each trajectory at its time; samples as blocks per stream."""
    blocks: dict[str, list[list[StreamSample]]] = {}
    pending = list(schedule)
    while robot.time_ns < end_ns:
        while pending and pending[0][0] <= robot.time_ns:
            robot.command(pending.pop(0)[1])
        until = min(end_ns, robot.time_ns + _CHUNK_NS)
        if pending:
            until = min(until, pending[0][0])
        chunk: dict[str, list[StreamSample]] = {}
        for sample in robot.advance(until):
            chunk.setdefault(sample.stream, []).append(sample)
        for stream, items in chunk.items():
            blocks.setdefault(stream, []).append(items)
    return blocks


def _transport(side: str, blocks: dict[str, list], transport: Transport, rng: np.random.Generator) -> dict[str, StreamColumns]:
    """Columns of one side: stamps (offset on the real side) and FIFO receive times."""
    offset = transport.real_clock_offset_ns if side == "real" else 0
    out = {}
    for stream in sorted(blocks):
        items = [s for block in blocks[stream] for s in block]
        taken_ns = np.array([s.time_ns for s in items], dtype=np.int64)
        stamp_ns = np.array([s.stamp_ns for s in items], dtype=np.int64) + offset
        delay_ns = transport.recv_base_ns + rng.exponential(transport.recv_jitter_mean_ns, len(items)).astype(np.int64)
        recv_ns = transport.monitor_epoch_ns + taken_ns + delay_ns
        # One writer per topic: a sample never overtakes the previous one (r_i >= r_{i-1} + 1).
        index = np.arange(len(items), dtype=np.int64)
        recv_ns = np.maximum.accumulate(recv_ns - index) + index
        values = {key: np.vstack([s.values[key] for s in items]) for key in items[0].values}
        out[stream] = StreamColumns(stamp_ns=stamp_ns, recv_ns=recv_ns, values=values)
    return out


def _labels(reality: RealityModel, scenario: Scenario) -> list[dict]:
    labels = []
    for inj in scenario.injections:
        effect_s = reality.effect_start_s(inj)
        labels.append({"category": inj.category, "kind": inj.kind, "start_s": inj.start_s, "end_s": inj.end_s,
                       "effect_start_s": float("nan") if effect_s is None else effect_s,
                       "params": dict(inj.params)})
    return labels
