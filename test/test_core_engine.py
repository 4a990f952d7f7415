"""DivergenceEngine on synthetic streams whose answer is known: residuals, events,
timing, summaries, refused rows, and live (message by message through advance())
against replay (whole columns through run())."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest

from sim_real_bridge.core import validation
from sim_real_bridge.core.attribution_config import AttributionConfig
from sim_real_bridge.core.engine import DivergenceEngine, EngineConfig
from sim_real_bridge.core.events import ACTION_CLOSE, ACTION_OPEN
from sim_real_bridge.core.intake import IntakeConfig
from sim_real_bridge.errors import ConfigError

MS = 1_000_000
S = 1_000_000_000
RATE_HZ = 100  # joint_states and wrench of both sides
TICK_NS = 20 * MS  # the live node's analysis timer
T0_RECV_NS = 100 * S  # the monitor's clock at the first sample
SIM_CLOCK_NS = 1 * S  # the sim's stamps start here ...
REAL_CLOCK_NS = 23 * S  # ... and the real robot's clock is 22 s ahead of the sim's
NAMES = tuple(f"joint{i}" for i in range(1, 7))
COMMAND_AT_S = 0.1  # the first command is received 0.1 s in: times in summary.json count from it

WINDOW_TOLERANCE_S = 0.1
STAT_TOLERANCE = 0.01


# ------------------------------------------------------------------ synthetic recordings
@dataclass
class Stream:
    """One stream of one side as columns, rows in receive order."""

    kind: str  # "joint_states", "wrench", "ee_pose" or "command"
    side: str
    stamp_ns: np.ndarray
    recv_ns: np.ndarray
    values: dict[str, np.ndarray] = field(default_factory=dict)
    names: tuple[str, ...] = NAMES
    frame_ids: list[str] | str = ""


@dataclass
class Scenario:
    """What differs between the sides (times in s of the run)."""

    duration_s: float = 8.0
    push: tuple[float, float] | None = None  # a hand pushes the real arm: effort, a little q, a wrist force
    latency: tuple[float, float] | None = None  # the real arm lags the sim by 60 ms
    nan: tuple[float, float] | None = None  # the real joint positions are NaN
    wrench: bool = True
    ee_pose: bool = False
    identical_recv: bool = False  # both sides received at the same instants
    seed: int = 1


LATENCY_S = 0.06


def _motion(t_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, 6) positions and velocities of a smooth motion (two frequencies per joint)."""
    t = t_s[:, None]
    j = np.arange(6)
    q = 0.4 * np.sin(2 * np.pi * 0.4 * t + j) + 0.1 * np.sin(2 * np.pi * 1.3 * t + 2 * j)
    qd = 0.4 * 2 * np.pi * 0.4 * np.cos(2 * np.pi * 0.4 * t + j) + 0.1 * 2 * np.pi * 1.3 * np.cos(2 * np.pi * 1.3 * t + 2 * j)
    return q, qd


def _inside(t_s: np.ndarray, window: tuple[float, float] | None) -> np.ndarray:
    return np.zeros(len(t_s), dtype=bool) if window is None else (t_s >= window[0]) & (t_s < window[1])


def make_recording(sc: Scenario) -> list[Stream]:
    """Both sides' streams: 100 Hz joint_states and wrench, 25 Hz ee poses, one command.

    Receive time = sample time + 1 ms + exponential jitter (mean 0.3 ms) per stream.
    """
    rng = np.random.default_rng(sc.seed)
    t_s = np.arange(int(sc.duration_s * RATE_HZ)) / RATE_HZ
    t_ns = (t_s * 1e9).round().astype(np.int64)
    shared_jitter = rng.exponential(3e5, len(t_s)).astype(np.int64)
    streams = [Stream("command", "sim", np.zeros(1, np.int64), np.array([T0_RECV_NS + int(COMMAND_AT_S * S)]))]
    for side, clock in (("sim", SIM_CLOCK_NS), ("real", REAL_CLOCK_NS)):
        real = side == "real"
        lag = np.where(_inside(t_s, sc.latency), LATENCY_S, 0.0) if real else 0.0
        q, qd = _motion(t_s - lag)
        effort = 0.5 * np.sin(q)
        force = np.zeros((len(t_s), 3))
        if real:
            pushed = _inside(t_s, sc.push)
            q[pushed] += 0.01
            effort[pushed] += 15.0
            force[pushed] = [8.0, 0.0, 0.0]  # horizontal: not a payload
            q[_inside(t_s, sc.nan)] = np.nan
        stamp = clock + t_ns

        def recv() -> np.ndarray:
            jitter = shared_jitter if sc.identical_recv else rng.exponential(3e5, len(t_s)).astype(np.int64)
            return np.maximum.accumulate(T0_RECV_NS + t_ns + 1 * MS + jitter)

        streams.append(Stream("joint_states", side, stamp, recv(), dict(q=q, qd=qd, effort=effort)))
        if sc.wrench:
            streams.append(Stream("wrench", side, stamp, recv(), dict(force=force, torque=np.zeros_like(force)),
                                  frame_ids="tool0"))
        if sc.ee_pose:
            every = slice(0, None, 4)
            position = np.column_stack((0.5 + 0.1 * q[:, 0], 0.1 * q[:, 1], np.full(len(t_s), 0.6)))[every]
            orientation = np.tile([0.0, 1.0, 0.0, 0.0], (len(position), 1))
            streams.append(Stream("ee_pose", side, stamp[every], recv()[every],
                                  dict(position=position, orientation=orientation), frame_ids="world"))
    return streams


def _hand_over(engine: DivergenceEngine, stream: Stream, rows: Any = slice(None)) -> None:
    """Give the engine rows of a stream: a slice (columns) or one index (one message)."""
    v = {name: col[rows] for name, col in stream.values.items()}
    stamp, recv = stream.stamp_ns[rows], stream.recv_ns[rows]
    frames = stream.frame_ids if isinstance(stream.frame_ids, str) else np.asarray(stream.frame_ids)[rows].tolist()
    if stream.kind == "joint_states":
        engine.add_joint_states(stream.side, stamp, recv, stream.names, v["q"], v["qd"], v["effort"])
    elif stream.kind == "wrench":
        engine.add_wrench(stream.side, stamp, recv, v["force"], v["torque"], frames)
    elif stream.kind == "ee_pose":
        engine.add_pose(stream.side, "ee_pose", stamp, recv, v["position"], v["orientation"], frames)
    else:
        for r in np.atleast_1d(recv).tolist():
            engine.add_command(r)


@dataclass
class Run:
    """An engine after a run, with everything it output."""

    engine: DivergenceEngine
    summary: dict[str, Any]
    joints_t_ns: np.ndarray
    position_residual_rad: np.ndarray
    records: list = field(default_factory=list)  # EventRecords in output order
    ticks_ns: list[int] = field(default_factory=list)  # live: ticks that analysed, skipped or published


def _last_recv(streams: list[Stream]) -> int:
    return max(int(s.recv_ns[-1]) for s in streams)


def _collect(engine: DivergenceEngine, outs: list, ticks: list[int] | None = None) -> Run:
    joints = [o.joints for o in outs if o.joints is not None and len(o.joints)]
    t = np.concatenate([j.t_ns for j in joints]) if joints else np.zeros(0, np.int64)
    res = np.concatenate([j.position_residual_rad for j in joints]) if joints else np.zeros((0, 0))
    records = [record for o in outs for _, record in o.events]
    return Run(engine, engine.run_summary(), t, res, records, ticks or [])


def replay(streams: list[Stream], config: EngineConfig | None = None, intake: IntakeConfig | None = None,
           ticks_ns: np.ndarray | None = None, **engine_kw: Any) -> Run:
    """All rows at once, analysed with run() at the live node's tick times (every 20 ms by default)."""
    engine = DivergenceEngine(config, intake, **engine_kw)
    for stream in streams:
        _hand_over(engine, stream)
    first = min(int(s.recv_ns[0]) for s in streams)
    if ticks_ns is None:
        ticks_ns = np.arange((first // TICK_NS + 1) * TICK_NS, _last_recv(streams) + TICK_NS, TICK_NS)
    out = engine.run(np.asarray(ticks_ns, dtype=np.int64))
    return _collect(engine, [out, engine.finish()])


def live(streams: list[Stream], config: EngineConfig | None = None, on_message: bool = False,
         **engine_kw: Any) -> Run:
    """One message at a time in receive order, advance() on a 20 ms timer (and, with
    on_message, after each joint_states or wrench message that makes a grid time due, as
    the node does)."""
    engine = DivergenceEngine(config, **engine_kw)
    order = sorted(((int(s.recv_ns[i]), k, i) for k, s in enumerate(streams) for i in range(len(s.recv_ns))))
    first = order[0][0]
    next_tick = (first // TICK_NS + 1) * TICK_NS
    outs, ticks = [], []

    def tick(now: int) -> None:
        unpaired = engine.next_grid_ns is None
        out = engine.advance(now)
        outs.append(out)
        if (out.analysed or out.skipped or (out.joints is not None and len(out.joints))
                or (unpaired and engine.next_grid_ns is not None)):
            ticks.append(now)

    for recv, k, i in order:
        while next_tick <= recv:
            tick(next_tick)
            next_tick += TICK_NS
        _hand_over(engine, streams[k], i)
        if on_message and streams[k].kind in ("joint_states", "wrench") and engine.analysis_due():
            tick(recv)
    end = _last_recv(streams) + TICK_NS
    while next_tick <= end:
        tick(next_tick)
        next_tick += TICK_NS
    outs.append(engine.finish(next_tick))
    return _collect(engine, outs, ticks)


def _events(run: Run) -> list[tuple[str, str]]:
    return [(e["category"], e["kind"]) for e in run.summary["events"]]


def _run_s(t_s: float) -> float:
    """A time of the synthetic run (s) in summary.json's time (s from the first command)."""
    return t_s - COMMAND_AT_S


# ------------------------------------------------------------------ residuals and events
@pytest.fixture(scope="module")
def clean() -> Run:
    return replay(make_recording(Scenario()))


def test_identical_streams_give_zero_residuals_and_no_events() -> None:
    run = replay(make_recording(Scenario(identical_recv=True)))
    assert run.summary["events"] == []
    assert len(run.joints_t_ns) > 350
    assert np.nanmax(np.abs(run.position_residual_rad)) < 1e-9
    joints = run.summary["residuals"]["joints"]
    assert set(joints) == set(NAMES)
    assert all(j["rms_rad"] < 1e-9 and j["max_rad"] < 1e-9 for j in joints.values())
    assert run.summary["residuals"]["wrench"]["free"]["rms_n"] == 0.0


def test_clean_streams_are_analysed_on_the_50_hz_grid_without_events(clean: Run) -> None:
    assert clean.summary["events"] == []
    assert np.all(np.diff(clean.joints_t_ns) == TICK_NS)  # 50 Hz, no hole
    assert 7.8 * 50 <= len(clean.joints_t_ns) <= 8 * 50
    # Receive jitter differs between the sides (mean 0.3 ms): alignment leaves a small residual.
    assert np.nanmax(np.abs(clean.position_residual_rad)) < 2e-3
    counts = clean.summary["counts"]
    assert counts["analysis_ticks"] == len(clean.joints_t_ns) and counts["skipped_ticks"] == 0
    assert counts["commands"] == 1 and counts["rejected"] == {} and counts["events"] == 0


def test_the_clock_offset_between_the_sides_is_recovered(clean: Run) -> None:
    timing = clean.summary["timing"]
    # Real stamps run 22 s ahead of the sim's; both are delivered with the same delay floor.
    assert timing["clock_offset_s"] == pytest.approx(-22.0, abs=2e-4)
    assert timing["clock_resets"] == 0
    floors = clean.engine.transport_floor_s()
    assert floors["sim"] == pytest.approx((T0_RECV_NS + 1 * MS - SIM_CLOCK_NS) * 1e-9, abs=2e-4)
    assert floors["real"] == pytest.approx((T0_RECV_NS + 1 * MS - REAL_CLOCK_NS) * 1e-9, abs=2e-4)
    delivery = timing["delivery_delay_s"]
    assert {"sim/joint_states", "real/joint_states", "sim/wrench", "real/wrench"} <= set(delivery)
    # Delays beyond the envelope: the exponential jitter (median 0.3 ms * ln 2).
    assert delivery["real/joint_states"]["p50"] == pytest.approx(3e-4 * math.log(2), abs=1e-4)


def test_a_push_in_free_space_is_a_human_event() -> None:
    run = replay(make_recording(Scenario(push=(3.0, 4.5))))
    assert _events(run) == [("human", "push")]
    event = run.summary["events"][0]
    assert event["start_s"] == pytest.approx(_run_s(3.0), abs=0.15)
    # The event ends after the push, at the latest when the smoothed effort residual (ema of
    # squares, 0.8 kept per 20 ms row) has fallen from 15 below the effort threshold.
    threshold_nm = AttributionConfig().effort_residual_nm
    rows = math.floor(math.log((threshold_nm / 15.0) ** 2) / math.log(0.8))
    assert _run_s(4.5) < event["end_s"] <= _run_s(4.5) + rows * 0.02 + 0.05
    assert not event["open"] and 0.5 <= event["severity"] <= 1.0
    assert float(event["evidence"]["effort_residual"]) > 4.0
    assert [r.action for r in run.records if r.action != "update"] == [ACTION_OPEN, ACTION_CLOSE]
    free = run.summary["residuals"]["wrench"]["free"]
    assert free["max_n"] == pytest.approx(8.0)


def test_the_real_arm_lagging_by_60_ms_is_a_dynamics_event_with_that_delay() -> None:
    run = replay(make_recording(Scenario(latency=(3.0, 6.0))))
    assert _events(run) == [("dynamics", "actuation_latency")]
    event = run.summary["events"][0]
    assert float(event["evidence"]["fit_delay_s"]) == pytest.approx(LATENCY_S, abs=0.011)
    assert event["start_s"] == pytest.approx(_run_s(3.0), abs=0.5)
    assert event["end_s"] == pytest.approx(_run_s(6.0), abs=1.0)


def test_a_lag_throughout_the_run_is_its_latency_and_each_joints_calibrated_delay() -> None:
    run = replay(make_recording(Scenario(latency=(0.0, 99.0), duration_s=6.0)))
    assert run.summary["timing"]["latency_s"] == pytest.approx(LATENCY_S, abs=0.011)
    calibration = {c["joint"]: c for c in run.summary["calibration"]}
    assert set(calibration) == set(NAMES)
    for joint in calibration.values():
        assert joint["delay_s"] == pytest.approx(LATENCY_S, abs=0.011)
        assert joint["gain"] == pytest.approx(1.0, abs=0.05)
        assert joint["residual_rms_rad"] < 0.2 * joint["rms_before_rad"]


def test_a_nan_burst_is_a_sensor_event_only() -> None:
    run = replay(make_recording(Scenario(nan=(3.0, 3.5))))
    assert _events(run) == [("sensor", "nan_burst")]
    assert run.summary["events"][0]["start_s"] == pytest.approx(_run_s(3.0), abs=0.05)
    assert run.engine.problems["real/joint_states"][validation.NON_FINITE] == 50
    assert run.summary["counts"]["rejected"] == {}  # flagged, not refused


# ------------------------------------------------------------------ joints, streams, refusals
def test_prefixed_joint_names_pair_and_an_extra_joint_is_warned() -> None:
    sim_names = tuple(f"leader_joint{i}" for i in range(1, 7))
    real_names = tuple(f"follower_joint{i}" for i in (4, 5, 6, 1, 2, 3)) + ("follower_gripper",)
    streams = make_recording(Scenario(duration_s=4.0, identical_recv=True))
    for s in streams:
        if s.kind == "joint_states" and s.side == "sim":
            s.names = sim_names
        elif s.kind == "joint_states":
            order = [3, 4, 5, 0, 1, 2]
            s.names = real_names
            s.values = {k: np.hstack((v[:, order], np.full((len(v), 1), 0.3))) for k, v in s.values.items()}
    run = replay(streams)
    assert run.engine.joint_names == sim_names
    assert run.summary["warnings"] == ["real joint(s) without a sim twin, not analysed: follower_gripper"]
    assert np.nanmax(np.abs(run.position_residual_rad)) < 1e-9  # each joint met its own twin
    assert run.summary["events"] == []


def test_a_recording_of_joints_only_runs() -> None:
    run = replay(make_recording(Scenario(wrench=False, push=(3.0, 4.5))))
    assert len(run.joints_t_ns) > 350
    assert run.summary["residuals"]["wrench"]["free"]["samples"] == 0
    # Without a wrist sensor, a stiff external load felt by the joints is still a human.
    assert [c for c, _ in _events(run)] == ["human"]


def test_poses_give_the_end_effector_error() -> None:
    streams = make_recording(Scenario(ee_pose=True, duration_s=4.0))
    for s in streams:
        if s.kind == "ee_pose" and s.side == "real":
            s.values["position"] = s.values["position"] + [0.0, 0.0, 0.004]
    run = replay(streams)
    assert run.summary["residuals"]["ee_position_rms_m"] == pytest.approx(0.004, rel=0.05)
    assert run.engine.summary(T0_RECV_NS + 4 * S).ee_position_rms_m == pytest.approx(0.004, rel=0.05)


def test_a_real_pose_stream_is_judged_like_the_others_without_silencing_the_joints() -> None:
    streams = make_recording(Scenario(ee_pose=True, duration_s=8.0, push=(2.0, 3.5)))
    pose = next(s for s in streams if s.kind == "ee_pose" and s.side == "real")
    t_s = (pose.stamp_ns - pose.stamp_ns[0]) / 1e9
    position = pose.values["position"].copy()
    frozen = (t_s >= 1.5) & (t_s < 3.0)  # while the sim's pose moves on
    position[frozen] = position[np.argmax(frozen)]
    position[(t_s >= 7.0) & (t_s < 7.2)] = np.nan
    pose.values["position"] = position
    kept = (t_s < 4.5) | (t_s >= 5.0)  # half a second lost
    pose.stamp_ns, pose.recv_ns = pose.stamp_ns[kept], pose.recv_ns[kept]
    pose.values = {name: values[kept] for name, values in pose.values.items()}
    run = replay(streams)
    sensor = [e for e in run.summary["events"] if e["category"] == "sensor"]
    assert [e["kind"] for e in sensor] == ["frozen", "dropout", "nan_burst"], [(e["kind"], e["start_s"], e["end_s"], e["evidence"]) for e in sensor]
    assert {e["evidence"]["stream"] for e in sensor} == {"real/ee_pose"}
    # The joints go on being analysed: the push during the frozen pose is found.
    assert [e["kind"] for e in run.summary["events"] if e["category"] == "human"] == ["push"]
    assert np.isfinite(run.summary["residuals"]["ee_position_rms_m"])  # the NaN poses are not drawn


def test_refused_rows_are_counted_by_reason() -> None:
    streams = make_recording(Scenario(duration_s=3.0))
    real_joints = next(s for s in streams if s.kind == "joint_states" and s.side == "real")
    real_wrench = next(s for s in streams if s.kind == "wrench" and s.side == "real")
    real_joints.stamp_ns = real_joints.stamp_ns.copy()
    real_joints.stamp_ns[100:103] = 0  # zero stamps
    real_wrench.stamp_ns = real_wrench.stamp_ns.copy()
    real_wrench.stamp_ns[50:55] = real_wrench.recv_ns[50:55] + 10 * S  # 10 s in the future
    real_wrench.frame_ids = ["tool0"] * len(real_wrench.stamp_ns)
    real_wrench.frame_ids[200:207] = ["flange"] * 7
    intake = IntakeConfig(expected_frames={"wrench": "tool0", "pose": "world"})
    for engine_run in (replay(streams, intake=intake), live(streams, intake_config=intake)):
        engine = engine_run.engine
        engine.add_joint_states("real", 5 * S, T0_RECV_NS + 5 * S, ("joint1", "joint2"), [0.0, 0.0])  # joints missing
        engine.add_joint_states("real", 5 * S, T0_RECV_NS + 5 * S, NAMES, np.zeros(5))  # lengths differ
        engine.finish(T0_RECV_NS + 5 * S)
        rejected = engine.run_summary()["counts"]["rejected"]
        assert rejected == {"real/joint_states: zero_stamp": 3, "real/wrench: future_stamp": 5,
                            "real/wrench: frame_mismatch": 7, "real/joint_states: missing_joint": 1,
                            "real/joint_states: length_mismatch": 1}
        assert engine.summary(T0_RECV_NS + 5 * S).rejected_count == 17
        assert engine_run.summary["events"] == []  # refused rows never reach the analysis


def test_a_side_whose_rows_are_all_refused_is_counted_not_raised() -> None:
    streams = make_recording(Scenario(duration_s=2.0))
    for s in streams:
        if s.side == "real" and s.kind != "command":
            s.stamp_ns = np.zeros_like(s.stamp_ns)  # a robot that does not stamp
    run = live(streams)
    assert len(run.joints_t_ns) == 0 and run.engine.joint_names is None
    assert run.summary["counts"]["rejected"] == {"real/joint_states: zero_stamp": 200, "real/wrench: zero_stamp": 200}


def test_position_only_joint_states_are_not_non_finite() -> None:
    streams = make_recording(Scenario(duration_s=4.0))
    for s in streams:
        if s.kind == "joint_states":
            s.values["qd"] = np.full_like(s.values["qd"], np.nan)  # velocity and effort not sent
            s.values["effort"] = np.full_like(s.values["effort"], np.nan)
    run = replay(streams)
    assert run.summary["events"] == [] and len(run.joints_t_ns) > 150
    assert "real/joint_states" not in run.engine.problems


def test_argument_errors_name_what_is_wrong() -> None:
    engine = DivergenceEngine()
    with pytest.raises(ConfigError, match="unknown side 'left'"):
        engine.add_wrench("left", 1, 1, np.zeros(3), np.zeros(3))
    with pytest.raises(ConfigError, match="unknown pose stream 'base_pose'"):
        engine.add_pose("sim", "base_pose", 1, 1, np.zeros(3), np.array([1.0, 0, 0, 0]))
    with pytest.raises(ConfigError, match="EngineConfig.horizon_s must be finite and > 0"):
        DivergenceEngine(EngineConfig(horizon_s=0.0))


def test_config_from_dict_and_flat_names() -> None:
    cfg = EngineConfig.from_dict({"horizon_s": 0.5, "attribution.human_force_n": 9.0, "events": {"heal_s": 2.0}})
    assert cfg.horizon_s == 0.5 and cfg.attribution.human_force_n == 9.0 and cfg.events.heal_s == 2.0
    flat = EngineConfig.from_flat({"events.min_duration_by_category.human": 0.5, "features.warmup_s": 1.0})
    assert flat.events.min_duration_by_category == {"human": 0.5, "contact": 0.3} and flat.features.warmup_s == 1.0
    with pytest.raises(ConfigError, match="unknown engine parameter 'bogus'"):
        EngineConfig.from_dict({"bogus": 1})
    with pytest.raises(ConfigError, match="unknown attribution parameter"):
        EngineConfig.from_dict({"attribution.bogus": 1})
    with pytest.raises(ConfigError, match="pose_rate_hz and contact_rate_hz must be <= analysis_rate_hz"):
        EngineConfig(pose_rate_hz=500.0).validate()


# ------------------------------------------------------------------ timing: resets, losses, run start
def _shift_stamps(streams: list[Stream], side: str, from_s: float, by_ns: int) -> None:
    for s in streams:
        if s.side == side and s.kind != "command":
            s.stamp_ns = s.stamp_ns + np.where(s.recv_ns >= T0_RECV_NS + int(from_s * S), by_ns, 0)


def test_a_clock_reset_is_counted_once_without_events_or_holes() -> None:
    streams = make_recording(Scenario())
    _shift_stamps(streams, "real", 4.0, -20 * S)  # the real robot's clock restarts 4 s in
    run = replay(streams)
    assert run.summary["timing"]["clock_resets"] == 1
    assert run.summary["events"] == []
    assert np.all(np.diff(run.joints_t_ns) == TICK_NS)
    assert np.nanmax(np.abs(run.position_residual_rad)) < 2e-3
    assert run.engine.summary(T0_RECV_NS + 8 * S).clock_resets == 1


def _without(streams: list[Stream], side: str, start_s: float, end_s: float,
             kinds: tuple[str, ...] = ("joint_states", "wrench")) -> list[Stream]:
    """The streams minus one side's rows of ``kinds`` received in [start_s, end_s)."""
    out = []
    for s in streams:
        if s.side == side and s.kind in kinds:
            keep = ~((s.recv_ns >= T0_RECV_NS + int(start_s * S)) & (s.recv_ns < T0_RECV_NS + int(end_s * S)))
            s = replace(s, stamp_ns=s.stamp_ns[keep], recv_ns=s.recv_ns[keep],
                        values={k: v[keep] for k, v in s.values.items()})
        out.append(s)
    return out


@pytest.mark.parametrize("side", ["sim", "real"])
def test_a_side_gone_silent_is_one_sensor_dropout_once_the_silence_lasts_side_silence_s(side: str) -> None:
    run = replay(_without(make_recording(Scenario()), side, 3.0, 5.0))
    assert _events(run) == [("sensor", "dropout")]
    opened = [r for r in run.records if r.action == ACTION_OPEN]
    assert len(opened) == 1 and opened[0].evidence["stream"].startswith(f"{side}/")
    # Every stream of the side silent: the monitor may have lost the side, so it waits
    # side_silence_s (1.5 s) before blaming the sensor.
    side_silence_s = EngineConfig().features.side_silence_s
    assert run.summary["events"][0]["start_s"] == pytest.approx(_run_s(3.0 + side_silence_s), abs=0.05)
    hold_s = EngineConfig().features.flag_hold_s  # a flag stays visible this long after its evidence
    assert run.summary["events"][0]["end_s"] == pytest.approx(_run_s(5.0 + hold_s), abs=0.05)
    assert run.joints_t_ns[-1] > T0_RECV_NS + 7 * S  # the analysis resumed (grid times on the monitor clock)


def test_one_lost_stream_is_a_dropout_after_dropout_periods() -> None:
    run = replay(_without(make_recording(Scenario()), "real", 3.0, 5.0, kinds=("wrench",)))
    assert _events(run) == [("sensor", "dropout")]
    event = run.summary["events"][0]
    assert event["evidence"]["stream"] == "real/wrench"
    # Open once the gap exceeds dropout_periods (5) periods of 10 ms.
    assert event["start_s"] == pytest.approx(_run_s(3.0 + 0.05), abs=0.03)
    assert event["end_s"] == pytest.approx(_run_s(5.0 + EngineConfig().features.flag_hold_s), abs=0.05)


def test_a_share_of_joint_samples_lost_is_a_dropout_that_leaves_the_joints_in_the_analysis() -> None:
    # 30% of the real joint samples lost from 2 s: few gaps of dropout_periods, but a
    # share of samples missing; the samples that arrive still carry the push at 4 s
    streams = make_recording(Scenario(push=(4.0, 5.5), duration_s=8.0))
    for i, s in enumerate(streams):
        if s.side == "real" and s.kind == "joint_states":
            lost = (s.recv_ns >= T0_RECV_NS + 2 * S) & (np.random.default_rng(5).random(len(s.recv_ns)) < 0.3)
            streams[i] = replace(s, stamp_ns=s.stamp_ns[~lost], recv_ns=s.recv_ns[~lost],
                                 values={k: v[~lost] for k, v in s.values.items()})
    run = replay(streams)
    sensor = [e for e in run.summary["events"] if e["category"] == "sensor"]
    assert sensor and all(e["kind"] == "dropout" for e in sensor), sensor
    assert any(float(e["evidence"].get("lost_share", 0)) >= 0.15 for e in sensor)
    assert ("human", "push") in _events(run)


def test_the_run_starts_at_the_first_command_or_the_real_arms_earlier_motion() -> None:
    streams = make_recording(Scenario(duration_s=4.0, identical_recv=True))
    # Both arms rest for 1 s, then move; the first command is heard only 1.6 s in.
    for s in streams:
        if s.kind == "joint_states":
            t_s = (s.stamp_ns - s.stamp_ns[0]) * 1e-9
            q, qd = _motion(np.maximum(t_s - 1.0, 0.0))
            s.values["q"], s.values["qd"] = q - _motion(np.zeros(1))[0], np.where(t_s[:, None] < 1.0, 0.0, qd)
    command = streams[0]
    command.recv_ns = np.array([T0_RECV_NS + int(1.6 * S)])
    late = replay(streams).engine
    assert late.to_seconds(T0_RECV_NS + 1 * S) == pytest.approx(0.0, abs=0.02)
    command.recv_ns = np.array([T0_RECV_NS + int(0.5 * S)])
    on_time = replay(streams).engine
    assert on_time.to_seconds(T0_RECV_NS + int(0.5 * S)) == 0.0


# ------------------------------------------------------------------ summaries
def test_the_summary_record_books_the_event_and_the_ledger() -> None:
    run = replay(make_recording(Scenario(push=(3.0, 4.5))))
    record = run.engine.summary(T0_RECV_NS + 8 * S)
    assert record.elapsed_s == pytest.approx(8.0 - COMMAND_AT_S, abs=0.01)
    assert record.event_count == 1 and record.open_event_count == 0
    shares = {r.category: r for r in record.ledger}
    assert set(shares) == {"dynamics", "contact", "sensor", "human", "unauthored"}
    assert shares["human"].event_count == 1 and shares["human"].share_run > 0.5
    assert sum(r.share_run for r in record.ledger) + record.unexplained_share_run == pytest.approx(1.0)
    assert record.joint_position_rms_rad == pytest.approx(0.01 * math.sqrt(1.5 / 8.0), rel=0.1)
    assert record.force_residual_rms_n > 0


def test_joints_go_to_the_sink_as_soon_as_they_are_due() -> None:
    streams = make_recording(Scenario(duration_s=3.0))
    sunk: list = []
    engine = DivergenceEngine()
    engine.joint_sink = sunk.append
    for stream in streams:
        _hand_over(engine, stream)
    engine.advance(T0_RECV_NS + 2 * S)
    assert sunk and sunk[-1].t_ns[-1] >= T0_RECV_NS + 2 * S - 40 * MS  # everything received by then
    t = np.concatenate([c.t_ns for c in sunk])
    assert np.all(np.diff(t) == TICK_NS)


# ------------------------------------------------------------------ live == replay
def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= STAT_TOLERANCE * max(abs(a), abs(b), 1e-12)


def assert_live_equals_replay(live_run: Run, replay_run: Run,
                              parts: tuple[str, ...] = ("events", "joints", "wrench", "ee")) -> None:
    """Same events (category, start and end within 0.1 s) and residual statistics within 1%."""
    a, b = live_run.summary, replay_run.summary
    if "events" in parts:
        assert [e["category"] for e in a["events"]] == [e["category"] for e in b["events"]]
        for x, y in zip(a["events"], b["events"], strict=True):
            assert abs(x["start_s"] - y["start_s"]) <= WINDOW_TOLERANCE_S, (x, y)
            assert abs(x["end_s"] - y["end_s"]) <= WINDOW_TOLERANCE_S, (x, y)
        assert a["timing"]["clock_resets"] == b["timing"]["clock_resets"]
        assert abs(a["timing"]["clock_offset_s"] - b["timing"]["clock_offset_s"]) < 1e-3
    if "joints" in parts:
        assert set(a["residuals"]["joints"]) == set(b["residuals"]["joints"])
        for name, stats in a["residuals"]["joints"].items():
            for key, value in stats.items():
                other = b["residuals"]["joints"][name][key]
                assert _close(value, other), (name, key, value, other)
        assert abs(a["counts"]["analysis_ticks"] - b["counts"]["analysis_ticks"]) <= 2
    if "wrench" in parts:
        for phase in ("free", "contact"):
            for key, value in a["residuals"]["wrench"][phase].items():
                other = b["residuals"]["wrench"][phase][key]
                assert _close(value, other), (phase, key, value, other)
    if "ee" in parts:
        value, other = a["residuals"]["ee_position_rms_m"], b["residuals"]["ee_position_rms_m"]
        assert _close(value, other), ("ee_position_rms_m", value, other)


LIVE_SCENARIO = Scenario(duration_s=9.0, push=(2.0, 3.0), latency=(4.0, 6.5), nan=(7.5, 7.9), ee_pose=True)


@pytest.fixture(scope="module")
def live_scenario() -> list[Stream]:
    return make_recording(LIVE_SCENARIO)


@pytest.fixture(scope="module")
def replayed(live_scenario: list[Stream]) -> Run:
    return replay(live_scenario)


@pytest.fixture(scope="module")
def live_on_messages(live_scenario: list[Stream]) -> Run:
    return live(live_scenario, on_message=True)


def test_the_live_equals_replay_scenario_has_an_event_of_each_kind(replayed: Run) -> None:
    assert [c for c, _ in _events(replayed)] == ["human", "dynamics", "sensor"]
    assert replayed.summary["residuals"]["ee_position_rms_m"] > 0


def test_live_on_the_timer_equals_replay(live_scenario: list[Stream], replayed: Run) -> None:
    assert_live_equals_replay(live(live_scenario), replayed)


def test_live_ticking_on_messages_too_equals_replay(live_scenario: list[Stream], replayed: Run,
                                                    live_on_messages: Run) -> None:
    # (End-effector poses: see the next test.)
    assert_live_equals_replay(live_on_messages, replayed, ("events", "joints", "wrench"))
    at_live_ticks = replay(live_scenario, ticks_ns=np.array(live_on_messages.ticks_ns))
    assert_live_equals_replay(live_on_messages, at_live_ticks, ("events", "joints", "wrench"))


def test_live_ticking_on_messages_reads_end_effector_poses_as_replay_at_its_ticks_does(
        live_scenario: list[Stream], live_on_messages: Run) -> None:
    # A grid time decided by the message that completed it holds the newest 25 Hz pose
    # received by then; replay decides at the ticks the monitor recorded, so it reads the same.
    at_live_ticks = replay(live_scenario, ticks_ns=np.array(live_on_messages.ticks_ns))
    assert_live_equals_replay(live_on_messages, at_live_ticks, ("ee",))


def _received_late(streams: list[Stream], side: str, kind: str, delay_ns: int) -> list[Stream]:
    return [replace(s, recv_ns=s.recv_ns + delay_ns) if (s.side, s.kind) == (side, kind) else s for s in streams]


def test_a_start_up_backlog_of_one_sides_joints_live_equals_replay() -> None:
    # The real joints of the first 0.5 s are received at once at 0.513 s: live pairs the
    # joints then, and only then analyses the grid times before.
    streams = make_recording(Scenario(duration_s=3.0))
    real = next(s for s in streams if (s.side, s.kind) == ("real", "joint_states"))
    held = real.recv_ns < T0_RECV_NS + 513 * MS
    real.recv_ns = real.recv_ns.copy()
    real.recv_ns[held] = T0_RECV_NS + 513 * MS + 20_000 * np.arange(held.sum())
    real.recv_ns = np.maximum.accumulate(real.recv_ns)
    replay_run = replay(streams)
    assert replay_run.summary["events"] == []
    assert np.nanmax(np.abs(replay_run.position_residual_rad)) < 2e-3
    assert_live_equals_replay(live(streams), replay_run)


def test_a_stale_start_up_backlog_mapped_early_later_does_not_move_the_first_grid_time() -> None:
    # The real joints' first sample comes 0.3 s late, alone: with nothing fresher from the
    # real side yet it maps late, and live fixes the first grid time from it at its next
    # tick. The real wrench then starts fresh (lowering the clock offset), so the rest of
    # the joints' backlog, received after it, maps 0.3 s earlier: replay, which has every
    # sample at once, must still start where live did.
    streams = make_recording(Scenario(duration_s=3.0))
    real = next(s for s in streams if (s.side, s.kind) == ("real", "joint_states"))
    t_ns = real.recv_ns - T0_RECV_NS
    real.recv_ns = real.recv_ns.copy()
    real.recv_ns[0] = T0_RECV_NS + 300 * MS
    backlog = (t_ns < 300 * MS) & (np.arange(len(t_ns)) > 0)
    real.recv_ns[backlog] = T0_RECV_NS + 365 * MS + 20_000 * np.arange(backlog.sum())
    real.recv_ns = np.maximum.accumulate(real.recv_ns)
    wrench = next(i for i, s in enumerate(streams) if (s.side, s.kind) == ("real", "wrench"))
    later = streams[wrench].recv_ns >= T0_RECV_NS + 345 * MS
    streams[wrench] = replace(streams[wrench], stamp_ns=streams[wrench].stamp_ns[later],
                              recv_ns=streams[wrench].recv_ns[later],
                              values={k: v[later] for k, v in streams[wrench].values.items()})
    live_run = live(streams)
    for replay_run in (replay(streams), replay(streams, ticks_ns=np.array(live_run.ticks_ns))):
        assert replay_run.joints_t_ns[0] == live_run.joints_t_ns[0]
        assert_live_equals_replay(live_run, replay_run, ("events", "joints"))


def test_a_late_stream_that_is_lost_is_judged_live_as_in_replay() -> None:
    # The real wrench is received 250 ms after its samples and lost from 2.5 to 3.5 s: grid
    # times it had not reached when it fell silent are due a horizon into the silence, live too.
    streams = _without(_received_late(make_recording(Scenario(duration_s=4.5)), "real", "wrench", 250 * MS),
                       "real", 2.5, 3.5)
    replay_run, live_run = replay(streams), live(streams)
    assert [c for c, _ in _events(replay_run)] == ["sensor"]
    # (The wrench statistics differ: see test_a_topic_delivered_in_bursts_live_equals_replay.)
    assert_live_equals_replay(live_run, replay_run, ("events", "joints"))


def _bursty(streams: list[Stream], period_s: float = 1.0) -> list[Stream]:
    """Real joint_states and sim wrench held up to period_s, then drained (~20 us a message)."""
    out = []
    period = int(period_s * S)
    for s in streams:
        if (s.side, s.kind) in (("real", "joint_states"), ("sim", "wrench")):
            phase = 7 * MS if s.side == "real" else period // 3  # the two topics burst out of step
            release = -(-(s.recv_ns - phase) // period) * period + phase
            s = replace(s, recv_ns=np.maximum.accumulate(release + 20_000 * np.arange(len(release)) % period))
        out.append(s)
    return out


@pytest.fixture(scope="module")
def bursty() -> list[Stream]:
    return _bursty(make_recording(Scenario(duration_s=5.0)))


def test_a_topic_delivered_in_bursts_is_no_reset_and_no_event(bursty: list[Stream]) -> None:
    run = replay(bursty)
    assert run.summary["timing"]["clock_resets"] == 0
    assert run.summary["events"] == []
    # Once a burst showed the stream is late (not lost), every grid time waits for it and
    # aligns it as well as when nothing is late.
    late = run.joints_t_ns >= T0_RECV_NS + int(2.5 * S)
    assert np.all(np.diff(run.joints_t_ns[late]) == TICK_NS)
    assert np.nanmax(np.abs(run.position_residual_rad[late])) < 2e-3


def test_a_topic_delivered_in_bursts_live_equals_replay(bursty: list[Stream]) -> None:
    assert_live_equals_replay(live(bursty), replay(bursty))


def test_non_finite_inputs_are_a_sensor_event_without_numpy_warnings() -> None:
    streams = make_recording(Scenario(duration_s=6.0))
    for s in streams:
        inside = (s.recv_ns >= T0_RECV_NS + 3 * S) & (s.recv_ns < T0_RECV_NS + int(3.5 * S))
        if s.kind == "joint_states":  # both sides at once: residuals meet inf - inf
            s.values["q"] = np.where(inside[:, None], np.inf, s.values["q"])
        elif s.kind == "wrench":
            s.values["force"] = np.where(inside[:, None], [np.inf, 0.0, -np.inf], s.values["force"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # inf - inf is NaN by design, not a warning
        run = replay(streams)
    assert _events(run) == [("sensor", "nan_burst")]
