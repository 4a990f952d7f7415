"""The in-process lockstep runner: columns of both sides, the transport model, the labels (real MuJoCo)."""

from __future__ import annotations

import signal

import numpy as np
import pytest

from sim_real_bridge.sim.lockstep import Transport, _play, run_lockstep
from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.robot import SimulatedRobot
from sim_real_bridge.sim.tasks import build_program
from sim_real_bridge.sim.scenario import parse_scenario

pytestmark = pytest.mark.mujoco


def _scenario(robot: str = "panda7", injections: list | None = None, sensors: dict | None = None,
              duration_s: float = 2.0):
    return parse_scenario({"name": "lockstep", "seed": 11, "duration_s": duration_s, "task": "reach",
                           "robot": robot, "sensors": sensors or {}, "injections": injections or []})


def test_nominal_sides_agree_and_the_transport_is_applied():
    transport = Transport(real_command_delay_ns=0)
    run = run_lockstep(_scenario(), transport)
    assert run.joint_names == tuple(f"panda_joint{i}" for i in range(1, 8))
    assert set(run.streams["sim"]) == set(run.streams["real"]) == {"joint_states", "wrench", "ee_pose", "object_pose"}
    for stream, sim in run.streams["sim"].items():
        real = run.streams["real"][stream]
        # Same commands at the same time, no injection: the stand-in equals the simulator.
        for key, values in sim.values.items():
            np.testing.assert_array_equal(real.values[key], values)
        np.testing.assert_array_equal(real.stamp_ns - sim.stamp_ns, transport.real_clock_offset_ns)
        for side in (sim, real):
            assert side.stamp_ns.dtype == np.int64 and side.recv_ns.dtype == np.int64
            assert np.all(np.diff(side.recv_ns) > 0), "one writer per topic: in order"
        delay = sim.recv_ns - transport.monitor_epoch_ns - sim.stamp_ns
        assert delay.min() >= transport.recv_base_ns
        assert np.mean(delay) - transport.recv_base_ns == pytest.approx(transport.recv_jitter_mean_ns, rel=0.2)
    joints = run.streams["sim"]["joint_states"]
    assert joints.values["position"].shape == (len(joints), 7)
    # 500 Hz over the pre-roll and the run.
    assert len(joints) == pytest.approx((transport.pre_roll_ns * 1e-9 + 2.0) * 500, abs=2)
    commands = run.commands
    assert len(commands.trajectories) == 1 and commands.phases == ("reach",)
    assert commands.sim_ns[0] == transport.pre_roll_ns
    assert run.first_command_recv_ns == transport.monitor_epoch_ns + transport.pre_roll_ns + transport.command_recv_ns
    assert run.labels == []


def test_same_seeds_same_run_and_the_transport_seed_varies_only_the_transport():
    scenario = _scenario(duration_s=1.0)
    a, b = run_lockstep(scenario), run_lockstep(scenario)
    c = run_lockstep(scenario, transport=Transport(real_command_delay_ns=a.commands.real_ns[0] - a.commands.sim_ns[0]),
                     transport_seed=99)
    for side in ("sim", "real"):
        for stream, cols in a.streams[side].items():
            np.testing.assert_array_equal(cols.recv_ns, b.streams[side][stream].recv_ns)
            for key, values in cols.values.items():
                np.testing.assert_array_equal(values, c.streams[side][stream].values[key])
            assert not np.array_equal(cols.recv_ns, c.streams[side][stream].recv_ns)


def test_a_robot_without_wrench_sensor_sends_no_wrench_and_labels_carry_the_effect():
    injections = [{"category": "sensor", "kind": "stamp_jitter", "start_s": 0.5, "end_s": 1.5,
                   "params": {"stream": "joint_states", "std_ms": 3.0}},
                  {"category": "dynamics", "kind": "gain", "start_s": 1.0, "end_s": 2.0}]
    run = run_lockstep(_scenario("ur6", injections, sensors={"wrench": False}), Transport(real_command_delay_ns=0))
    assert "wrench" in run.streams["sim"] and "wrench" not in run.streams["real"]
    assert [(lab["kind"], lab["effect_start_s"]) for lab in run.labels] == [("stamp_jitter", pytest.approx(0.5, abs=0.003)),
                                                                             ("gain", 1.0)]
    real = run.streams["real"]["joint_states"]
    sim = run.streams["sim"]["joint_states"]
    # Jittered stamps, receive times still from when each sample was taken.
    jitter = (real.stamp_ns - run.transport.real_clock_offset_ns) - sim.stamp_ns
    assert np.std(jitter) > 1e6
    assert np.all(np.diff(real.recv_ns) > 0)
    taken_delay = real.recv_ns - run.transport.monitor_epoch_ns - sim.stamp_ns
    assert taken_delay.min() >= run.transport.recv_base_ns


def _give_up(signum: int, frame: object) -> None:
    raise TimeoutError("the lockstep run did not end")


def test_times_off_the_step_grid_still_end_and_stamps_stay_on_it() -> None:
    # After minutes of 1 ms steps MuJoCo's clock (a float sum) reads a few ns off the
    # step grid, and a schedule's times need not be on it: the run must step on to
    # each, not ask advance() for zero steps forever.
    physics = ArmPhysics(robot="arm7")
    physics.data.time = 0.1 - 4e-9
    robot = SimulatedRobot(physics)
    step_ns = physics.timestep_ns
    assert robot.time_ns == 100 * step_ns
    program = build_program("reach", 1.0, "arm7", ())
    start_ns = robot.time_ns + 4
    schedule = [(start_ns + offset, trajectory) for offset, trajectory in program.segments]
    previous = signal.signal(signal.SIGALRM, _give_up)
    signal.alarm(60)
    try:
        blocks = _play(robot, schedule, start_ns + 300_000_000)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert robot.time_ns == start_ns - 4 + 300_000_000 + step_ns
    stamps_ns = np.array([s.stamp_ns for block in blocks["joint_states"] for s in block])
    assert len(stamps_ns) == 150
    assert np.all(stamps_ns % step_ns == 0)
