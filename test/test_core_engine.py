"""DivergenceEngine on synthetic streams: clean, latency, NaN burst, clock reset, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.core.engine import DivergenceEngine, EngineConfig, analyze_streams
from sim_real_bridge.core.events import ACTION_CLOSE, ACTION_OPEN
from sim_real_bridge.errors import ConfigError

NAMES = [f"joint{i}" for i in range(1, 8)]
RATE_HZ = 250
T0_RECV_NS = 5_000_000_000  # monitor clock at the first sample
REAL_OFFSET_NS = 77_000_000_000  # the real robot's clock is elsewhere


def q_of(t_s: float) -> tuple[np.ndarray, np.ndarray]:
    phase = 2 * np.pi * 0.4 * t_s + np.arange(7)
    return 0.4 * np.sin(phase), 0.4 * 2 * np.pi * 0.4 * np.cos(phase)


def make_streams(
    duration_s: float = 8.0,
    latency_s: float = 0.0,
    latency_window: tuple[float, float] = (3.0, 6.0),
    nan_window: tuple[float, float] | None = None,
    reset_at_s: float | None = None,
    effort_push: tuple[float, float] | None = None,
    wrench_bias_window: tuple[float, float] | None = None,
    seed: int = 0,
) -> list[dict]:
    """Messages in receive order: both sides' joint_states and wrench, ee poses, one command."""
    rng = np.random.default_rng(seed)
    msgs: list[dict] = [dict(type="command", stamp_ns=0, recv_ns=T0_RECV_NS + 100_000_000, names=NAMES, points=[])]
    last = {}
    for k in range(int(duration_s * RATE_HZ)):
        t = k / RATE_HZ
        for side in ("sim", "real"):
            tq = t - latency_s if side == "real" and latency_window[0] <= t < latency_window[1] else t
            q, qd = q_of(tq)
            eff = 0.5 * np.sin(q)
            if side == "real" and effort_push and effort_push[0] <= t < effort_push[1]:
                q = q + 0.01
                eff = eff + 15.0
            if side == "real" and nan_window and nan_window[0] <= t < nan_window[1]:
                q = q * np.nan
            stamp = int(t * 1e9) + (REAL_OFFSET_NS if side == "real" else 0)
            if side == "real" and reset_at_s is not None and t >= reset_at_s:
                stamp -= 60_000_000_000
            for kind in ("joint_state", "wrench", "pose"):
                recv = T0_RECV_NS + int(t * 1e9) + int(1e6 + rng.exponential(3e5))
                recv = max(recv, last.get((side, kind), 0) + 1)
                last[(side, kind)] = recv
                if kind == "joint_state":
                    msgs.append(dict(type=kind, side=side, stamp_ns=stamp, recv_ns=recv, names=NAMES,
                                     q_rad=q, qd_rad_s=qd, effort=eff))
                elif kind == "wrench":
                    force = np.zeros(3)
                    if side == "real" and wrench_bias_window and wrench_bias_window[0] <= t < wrench_bias_window[1]:
                        force = np.array([0.0, 0.0, 6.0])
                    msgs.append(dict(type=kind, side=side, stamp_ns=stamp, recv_ns=recv, force_n=force,
                                     torque_nm=np.zeros(3)))
                elif k % 5 == 0:
                    msgs.append(dict(type=kind, side=side, which="ee", stamp_ns=stamp, recv_ns=recv,
                                     position_m=np.array([0.5, 0.0, 0.6]) + 0.1 * np.array([q[0], q[1], 0.0]),
                                     orientation_wxyz=np.array([0.0, 1.0, 0.0, 0.0])))
    msgs.sort(key=lambda m: m["recv_ns"])
    return msgs


def run(msgs: list[dict], **kw):
    engine, outputs = analyze_streams(msgs, **kw)
    return engine, outputs, engine.run_summary()


@pytest.fixture(scope="module")
def clean():
    return run(make_streams())


@pytest.fixture(scope="module")
def latency():
    return run(make_streams(latency_s=0.08))


def test_clean_streams_give_no_events_and_rated_records(clean) -> None:
    engine, outputs, summary = clean
    assert summary["events"] == []
    joints = [r for o in outputs for r in o.joints]
    # analysis at 50 Hz over ~8 s of 250 Hz input
    assert 370 <= len(joints) <= 400
    assert np.all(np.diff([r.stamp_ns for r in joints]) == 20_000_000)
    assert max(float(np.max(np.abs(r.position_residual_rad))) for r in joints) < 0.01
    poses = [r for o in outputs for r in o.poses]
    assert 0.4 * len(joints) <= len(poses) <= 0.6 * len(joints)  # 25 Hz
    contacts = [r for o in outputs for r in o.contacts]
    assert all(r.sim_contact_phase == 0 and r.real_contact_phase == 0 for r in contacts)
    assert summary["timing"]["clock_resets"] == 0
    # the real clock runs 77 s ahead: the offset brings real stamps back onto the sim base
    assert summary["timing"]["clock_offset_s"] == pytest.approx(-77.0, abs=0.002)
    assert {c["joint"] for c in summary["calibration"]} == set(NAMES)
    assert all(c["gain"] == pytest.approx(1.0, abs=0.01) for c in summary["calibration"])
    assert all(c["delay_s"] == pytest.approx(0.0, abs=0.006) for c in summary["calibration"])


def test_latency_gives_a_dynamics_event_in_its_window(latency) -> None:
    _, outputs, summary = latency
    events = summary["events"]
    assert [e["category"] for e in events] == ["dynamics"]
    e = events[0]
    # the window is 3..6 s of stream time; times are from the command, received 0.1 s in
    assert 2.9 - 0.5 <= e["start_s"] <= 2.9 + 0.5
    assert 5.9 - 0.5 <= e["end_s"] <= 5.9 + 1.5
    assert e["kind"] == "latency" and 0 < e["severity"] <= 1
    assert 0.04 <= float(e["evidence"]["fit_delay_s"]) <= 0.1
    recs = [r for o in outputs for r in o.events]
    assert [r.action for r in recs if r.action != "update"] == [ACTION_OPEN, ACTION_CLOSE]


def test_nan_burst_is_a_sensor_event_only() -> None:
    _, _, summary = run(make_streams(nan_window=(3.0, 3.5)))
    cats = [(e["category"], e["kind"]) for e in summary["events"]]
    assert cats == [("sensor", "nonfinite")]
    assert summary["events"][0]["start_s"] == pytest.approx(2.9, abs=0.2)


def test_infinite_inputs_are_a_sensor_event_without_numpy_warnings() -> None:
    import warnings

    msgs = make_streams(duration_s=6.0)
    for m in msgs:
        t_ns = m["stamp_ns"] - (REAL_OFFSET_NS if m.get("side") == "real" else 0)
        if m["type"] in ("joint_state", "wrench") and 3.0e9 <= t_ns < 3.5e9:
            # Both sides infinite at once: residuals and motion checks meet inf - inf.
            if m["type"] == "joint_state":
                m["q_rad"] = np.full(7, np.inf)
            else:
                m["force_n"] = np.array([np.inf, 0.0, -np.inf])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # inf - inf is NaN by design, not a warning
        _, _, summary = run(msgs)
    assert [(e["category"], e["kind"]) for e in summary["events"]] == [("sensor", "nonfinite")]


def test_clock_reset_is_counted_without_false_events() -> None:
    engine, outputs, summary = run(make_streams(reset_at_s=4.0))
    assert summary["timing"]["clock_resets"] == 1
    assert summary["events"] == []
    joints = [r for o in outputs for r in o.joints]
    assert np.all(np.diff([r.stamp_ns for r in joints]) == 20_000_000)  # no hole in the analysis
    assert engine.summary(T0_RECV_NS + 8 * 10**9).clock_resets == 1


def test_external_load_without_wrist_force_is_human() -> None:
    _, _, summary = run(make_streams(effort_push=(3.0, 5.0)))
    assert [e["category"] for e in summary["events"]] == ["human"]


def test_wrist_force_the_joints_do_not_feel_is_sensor_bias() -> None:
    _, _, summary = run(make_streams(wrench_bias_window=(3.0, 5.0)))
    assert [(e["category"], e["kind"]) for e in summary["events"]] == [("sensor", "ft_bias_drift")]


def test_same_input_gives_identical_output(latency) -> None:
    msgs = make_streams(latency_s=0.08)
    _, outputs2, summary2 = run(msgs)
    _, outputs1, summary1 = latency
    assert summary1["events"] == summary2["events"]
    j1 = [r.position_residual_rad for o in outputs1 for r in o.joints]
    j2 = [r.position_residual_rad for o in outputs2 for r in o.joints]
    assert len(j1) == len(j2) and all(np.array_equal(a, b, equal_nan=True) for a, b in zip(j1, j2))


def test_replay_matches_live_with_other_tick_timing(latency) -> None:
    """A live node ticks on a jittery timer; replay ticks on a fixed grid: same events within 0.1 s."""
    msgs = make_streams(latency_s=0.08)
    engine = DivergenceEngine(EngineConfig())
    rng = np.random.default_rng(5)
    next_tick = msgs[0]["recv_ns"] + 7_000_000
    for m in msgs:
        while m["recv_ns"] >= next_tick:
            engine.tick(next_tick)
            next_tick += int(rng.uniform(5e6, 45e6))
        kw = {k: v for k, v in m.items() if k != "type"}
        {"joint_state": engine.on_joint_state, "wrench": engine.on_wrench, "pose": engine.on_pose,
         "command": engine.on_command}[m["type"]](**kw)
    engine.tick(msgs[-1]["recv_ns"])
    engine.finish()
    live = engine.run_summary()["events"]
    replay = latency[2]["events"]
    assert [e["category"] for e in live] == [e["category"] for e in replay]
    for a, b in zip(live, replay):
        assert abs(a["start_s"] - b["start_s"]) <= 0.1 and abs(a["end_s"] - b["end_s"]) <= 0.1


def test_summary_record(latency) -> None:
    engine = latency[0]
    rec = engine.summary(T0_RECV_NS + 8 * 10**9)
    assert rec.elapsed_s == pytest.approx(7.9, abs=0.01)
    assert rec.event_count == 1 and rec.open_event_count == 0
    shares = {r.category: r for r in rec.ledger}
    assert set(shares) == {"dynamics", "contact", "sensor", "human", "unauthored"}
    assert shares["dynamics"].event_count == 1 and shares["dynamics"].share_run > 0.5
    assert sum(r.share_run for r in rec.ledger) + rec.unexplained_share_run == pytest.approx(1.0)
    assert rec.joint_position_rms_rad > 0
    assert rec.latency_s >= 0.0


def test_summary_percentiles_are_each_series_own(latency) -> None:
    # run_summary takes several percentiles per numpy call: each must be the series' own.
    engine, _, summary = latency
    q_abs = np.asarray(engine._q_abs)
    for i, name in enumerate(engine.joint_names):
        assert summary["residuals"]["joints"][name]["p95_rad"] == float(np.percentile(q_abs[:, i], 95))
    checked = 0
    for side in ("sim", "real"):
        for stream, delays in engine._clock[side]._stream_delays.items():
            a = np.asarray(delays, dtype=float) * 1e-9
            got = summary["timing"]["delivery_delay_s"][f"{side}/{stream}"]
            assert (got["p50"], got["p99"]) == (float(np.percentile(a, 50)), float(np.percentile(a, 99)))
            checked += 1
    assert checked >= 4


def test_a_planned_clock_synced_now_and_then_keeps_the_histories_of_the_per_sample_map() -> None:
    # Planned rows reach the delay histories when read (_sync): at every point the
    # statistics, stamps and epochs equal those of a map fed sample by sample (histories
    # of 2000 overflowing, rows synced in several runs).
    from sim_real_bridge.core.engine import _ClockMap

    rng = np.random.default_rng(6)
    n = 9000
    recv = np.cumsum(rng.integers(100_000, 2_000_000, n)).astype(np.int64)
    stamp = recv - rng.integers(1_000_000, 9_000_000, n)
    ids = rng.choice(3, n, p=[0.6, 0.35, 0.05])
    names = ["joint_states", "wrench", "ee_pose"]
    planned, by_sample = _ClockMap(0.01, 10**9), _ClockMap(0.01, 10**9)
    plan = planned.plan(stamp, recv, ids, names)
    assert plan is not None
    fed = 0
    for hi in (3, 50, 1500, 2500, 2600, 7000, 9000):
        planned.feed_planned(plan, hi)
        for i in range(fed, hi):
            by_sample.map(int(stamp[i]), int(recv[i]), names[ids[i]])
        fed = hi
        assert planned.delivery_delays_s() == by_sample.delivery_delays_s(), hi
        assert planned._last_stamp == by_sample._last_stamp and planned._epoch == by_sample._epoch, hi
        assert plan.synced == hi
    assert set(planned.delivery_delays_s()) == set(names)


def test_stack_rows_is_np_array_of_the_rows() -> None:
    from collections import deque

    from sim_real_bridge.core.rows import stack_rows

    rng = np.random.default_rng(5)
    block = rng.standard_normal((40, 21))
    block[3, 2] = np.nan
    views = [row[:7] for row in block]  # the engine's calibration rows: views into blocks
    cases = [views, deque(np.abs(r) for r in views), [rng.standard_normal(3) for _ in range(5)]]
    for rows in cases:
        got = stack_rows(rows)
        assert got.flags.writeable and got.dtype == np.float64
        np.testing.assert_array_equal(got, np.array(rows))
    others = [
        [np.arange(3.0), np.arange(2.0), np.arange(4.0)],  # ragged, the same bytes in all
        [row[::3] for row in block[:4]],  # not contiguous
        [np.arange(4.0), np.arange(4, dtype=np.float32)],  # another dtype after the first
        [np.arange(4.0), np.arange(4, dtype=np.int64)],  # 8-byte items that are not float64
        [np.arange(4, dtype=np.float32)] * 3,
        [[1.0, 2.0], [3.0, 4.0]],
        [np.zeros(0), np.zeros(0)],
        [],
    ]
    for rows in others:
        try:
            want = np.array(rows)
        except ValueError:
            with pytest.raises(ValueError):
                stack_rows(rows)
            continue
        got = stack_rows(rows)
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_malformed_input_is_counted_not_raised() -> None:
    engine = DivergenceEngine()
    assert engine.on_joint_state("sim", 0, 1, NAMES, np.zeros(7), np.zeros(7), np.zeros(7))
    assert not engine.on_joint_state("real", 0, 1, NAMES, np.zeros(6), np.zeros(7), np.zeros(7))
    assert not engine.on_joint_state("real", 0, 1, NAMES[:6], np.zeros(6), np.zeros(6), np.zeros(6))
    assert not engine.on_wrench("real", 0, 1, np.zeros(2), np.zeros(3))
    assert not engine.on_pose("real", "ee", 0, 1, np.zeros(3), np.zeros(3))
    engine.on_rejected("real", "joint_states", "non-finite stamp")
    rec = engine.summary(10)
    assert rec.rejected_count == 5
    assert rec.rejected_by_reason["real/joint_states: bad shape or names"] == 1
    assert rec.rejected_by_reason["real/joint_states: missing joints"] == 1
    assert rec.rejected_by_reason["real/joint_states: non-finite stamp"] == 1


def test_argument_errors() -> None:
    engine = DivergenceEngine()
    with pytest.raises(ConfigError, match="unknown side 'left'"):
        engine.on_wrench("left", 0, 0, np.zeros(3), np.zeros(3))
    with pytest.raises(ConfigError, match="unknown pose 'base'"):
        engine.on_pose("sim", "base", 0, 0, np.zeros(3), np.array([1.0, 0, 0, 0]))
    with pytest.raises(ConfigError, match="unknown message type 'imu'"):
        analyze_streams([{"type": "imu", "recv_ns": 0}])
    with pytest.raises(ConfigError, match="not in receive order"):
        analyze_streams([{"type": "command", "stamp_ns": 0, "recv_ns": 10, "names": [], "points": []},
                         {"type": "command", "stamp_ns": 0, "recv_ns": 5, "names": [], "points": []}])
    with pytest.raises(ConfigError, match="tick_period_s must be > 0"):
        analyze_streams([], tick_period_s=0.0)


def test_config_from_dict() -> None:
    cfg = EngineConfig.from_dict({"horizon_s": 0.5, "attribution.human_force_n": 9.0,
                                  "events": {"heal_s": 2.0}})
    assert cfg.horizon_s == 0.5 and cfg.attribution.human_force_n == 9.0 and cfg.events.heal_s == 2.0
    with pytest.raises(ConfigError, match="unknown engine parameter 'bogus'"):
        EngineConfig.from_dict({"bogus": 1})
    with pytest.raises(ConfigError, match="unknown attribution parameter"):
        EngineConfig.from_dict({"attribution.bogus": 1})
    with pytest.raises(ConfigError, match="unknown engine parameter block 'x'"):
        EngineConfig.from_dict({"x.y": 1})
    with pytest.raises(ConfigError, match="EngineConfig.horizon_s must be finite and > 0"):
        EngineConfig.from_dict({"horizon_s": -1.0})
    with pytest.raises(ConfigError, match="pose_rate_hz and contact_rate_hz must be <= analysis_rate_hz"):
        EngineConfig(pose_rate_hz=500.0).validate()


def test_config_from_flat_regroups_dict_fields_over_their_defaults() -> None:
    cfg = EngineConfig.from_flat({"horizon_s": 0.4, "events.min_duration_by_category.human": 0.5,
                                  "features.warmup_s": 1.0})
    default_contact = EngineConfig().events.min_duration_by_category["contact"]
    assert cfg.events.min_duration_by_category == {"human": 0.5, "contact": default_contact}
    assert cfg.horizon_s == 0.4 and cfg.features.warmup_s == 1.0
    with pytest.raises(ConfigError, match="unknown events parameter"):
        EngineConfig.from_flat({"events.bogus.human": 1.0})
    with pytest.raises(ConfigError, match="EventConfig.min_duration_by_category\\['human'\\] must be >= 0"):
        EngineConfig.from_flat({"events.min_duration_by_category.human": -1.0})


def _backlogged(msgs: list[dict], period_s: float = 1.0) -> list[dict]:
    """Deliver real joint_states and sim wrench in bursts: held up to period_s, then drained."""
    out = []
    period_ns = int(period_s * 1e9)
    drained = {}
    for m in msgs:
        m = dict(m)
        key = (m.get("side"), m["type"])
        if key in (("real", "joint_state"), ("sim", "wrench")):
            phase = 0 if key[0] == "real" else period_ns // 3  # the two topics burst out of step
            release = -(-(m["recv_ns"] - phase) // period_ns) * period_ns + phase
            drained[key] = max(release, drained.get(key, 0) + 20_000)  # ~20 us per drained message
            m["recv_ns"] = drained[key]
        out.append(m)
    out.sort(key=lambda m: m["recv_ns"])
    return out


def test_bursty_backlog_of_one_topic_is_no_reset_and_no_event(clean) -> None:
    engine, outputs, summary = run(_backlogged(make_streams(duration_s=8.0)))
    assert summary["timing"]["clock_resets"] == 0
    assert summary["events"] == []
    joints = [r for o in outputs for r in o.joints]
    # Once one burst has shown the stream delivers late (not missing), every grid time waits for it.
    late = [r for r in joints if r.stamp_ns >= T0_RECV_NS + 2_500_000_000]
    assert np.all(np.diff([r.stamp_ns for r in late]) == 20_000_000)
    # ... and aligns it as well as when nothing is late.
    clean_max = max(float(np.max(np.abs(r.position_residual_rad))) for o in clean[1] for r in o.joints)
    assert max(float(np.max(np.abs(r.position_residual_rad))) for r in late) <= 2 * clean_max


def test_clock_reset_under_backlog_is_counted_once() -> None:
    engine, outputs, summary = run(_backlogged(make_streams(reset_at_s=4.0)))
    assert summary["timing"]["clock_resets"] == 1
    assert summary["events"] == []


def _rest_then_motion(command_recv_s: float, move_at_s: float = 1.0, duration_s: float = 3.0) -> list[dict]:
    """Both arms rest, then move from move_at_s; the monitor hears the command at command_recv_s."""
    msgs: list[dict] = [dict(type="command", stamp_ns=0, recv_ns=T0_RECV_NS + int(command_recv_s * 1e9),
                             names=NAMES, points=[])]
    for k in range(int(duration_s * RATE_HZ)):
        t = k / RATE_HZ
        tm = max(0.0, t - move_at_s)
        q = 0.3 * (1 - np.cos(2 * np.pi * 0.5 * tm)) * np.ones(7)
        qd = 0.3 * np.pi * np.sin(2 * np.pi * 0.5 * tm) * np.ones(7)
        for side in ("sim", "real"):
            stamp = int(t * 1e9) + (REAL_OFFSET_NS if side == "real" else 0)
            msgs.append(dict(type="joint_state", side=side, stamp_ns=stamp, recv_ns=T0_RECV_NS + int(t * 1e9) + 10**6,
                             names=NAMES, q_rad=q, qd_rad_s=qd, effort=np.zeros(7)))
    msgs.sort(key=lambda m: m["recv_ns"])
    return msgs


def test_run_starts_when_the_arm_moved_if_the_command_was_heard_late() -> None:
    late, _ = analyze_streams(_rest_then_motion(command_recv_s=1.6))
    assert late.to_seconds(T0_RECV_NS + 10**9) == pytest.approx(0.0, abs=0.02)
    on_time, _ = analyze_streams(_rest_then_motion(command_recv_s=0.99))
    assert on_time.to_seconds(T0_RECV_NS + 990_000_000) == 0.0  # heard before the arm moved: the receipt
    # the first command was missed: a later one (5 s in) is the first heard
    missed, _ = analyze_streams(_rest_then_motion(command_recv_s=5.0, duration_s=6.0))
    assert missed.to_seconds(T0_RECV_NS + 10**9) == pytest.approx(0.0, abs=0.02)


def _without(msgs: list[dict], side: str, start_s: float, end_s: float) -> list[dict]:
    """The messages minus every joint_state and wrench of one side received in [start_s, end_s)."""
    lo, hi = T0_RECV_NS + int(start_s * 1e9), T0_RECV_NS + int(end_s * 1e9)
    return [m for m in msgs if not (m.get("side") == side and m["type"] in ("joint_state", "wrench")
                                    and lo <= m["recv_ns"] < hi)]


@pytest.mark.parametrize("side", ["sim", "real"])
def test_a_lost_stream_of_either_side_is_one_sensor_dropout_and_nothing_else(side: str) -> None:
    _, outputs, summary = run(_without(make_streams(), side, 3.0, 5.5))
    events = [(e["category"], e["kind"]) for e in summary["events"]]
    assert events == [("sensor", "dropout")], events
    opened = [r for o in outputs for r in o.events if r.action == ACTION_OPEN]
    assert len(opened) == 1 and opened[0].evidence["stream"].startswith(f"{side}/")
    # the analysis resumed after the stream came back
    joints = [r for o in outputs for r in o.joints]
    assert max(r.stamp_ns for r in joints) > T0_RECV_NS + 7 * 10**9


def test_position_only_joint_states_are_not_non_finite() -> None:
    msgs = make_streams(duration_s=4.0)
    for m in msgs:
        if m["type"] == "joint_state":
            m["qd_rad_s"], m["effort"] = [], []
    engine, outputs, summary = run(msgs)
    assert summary["events"] == []
    assert [r for o in outputs for r in o.joints], "position-only streams are analysed"
    flags = engine._health[("real", "joint_states")].flags(engine._last_t_ns)
    assert not any(f.active for f in flags if f.name == "nonfinite")


def test_transport_floor_is_each_sides_smallest_receive_delay() -> None:
    engine = DivergenceEngine()
    assert engine.transport_floor_s() == {}
    for k, extra_ns in enumerate((900_000, 300_000, 2_000_000, 450_000)):
        stamp = k * 1_000_000
        engine.on_joint_state("sim", stamp, T0_RECV_NS + stamp + extra_ns, NAMES, np.zeros(7))
        engine.on_joint_state("real", REAL_OFFSET_NS + stamp, T0_RECV_NS + stamp + 2 * extra_ns, NAMES, np.zeros(7))
    floor = engine.transport_floor_s()
    # The floor leaks upward slowly between samples; within 3 ms of samples it is the minimum.
    assert floor["sim"] == pytest.approx((T0_RECV_NS + 300_000) * 1e-9, abs=2e-5)
    assert floor["real"] == pytest.approx((T0_RECV_NS - REAL_OFFSET_NS + 600_000) * 1e-9, abs=2e-5)


def test_joint_records_go_to_a_sink_when_set_and_equal_the_tick_output(latency, monkeypatch) -> None:
    _, outputs, summary = latency
    expected = [r for out in outputs for r in out.joints]
    sunk: list = []
    original_init = DivergenceEngine.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.joint_record_sink = sunk.append

    monkeypatch.setattr(DivergenceEngine, "__init__", init)
    _, outputs_sunk, summary_sunk = run(make_streams(latency_s=0.08))
    assert not any(out.joints for out in outputs_sunk)
    assert len(sunk) == len(expected) > 100
    for got, want in zip(sunk, expected):
        assert got.stamp_ns == want.stamp_ns
        assert got.latency_s == want.latency_s and got.clock_offset_s == want.clock_offset_s
        assert np.array_equal(got.position_residual_rad, want.position_residual_rad, equal_nan=True)
        assert np.array_equal(got.effort_residual, want.effort_residual, equal_nan=True)
    assert summary_sunk["events"] == summary["events"]


def test_delay_fits_of_a_batch_have_the_bits_of_each_window_alone() -> None:
    """The plan fits windows in batches, the live path one at a time: same bits, including
    windows without motion, frozen joints, negative zeros and a shorter window."""
    import struct
    from dataclasses import astuple

    from sim_real_bridge.core.engine import _fits

    rng = np.random.default_rng(11)
    delays = np.arange(26) * 0.01
    for n in (50, 41):
        real = rng.normal(0, 0.3, (9, n, 7))
        sim = real.transpose(1, 0, 2)[:, :, None] + rng.normal(0, 0.01, (n, 9, 26, 7))  # (n, F, D, J)
        sim[:, :, :, 3] = -0.0  # a frozen joint
        sim[:, 2] = 0.1  # a window without motion
        real[5] = sim[:, 5, 0]  # a window in agreement
        batch = _fits(real, np.ascontiguousarray(sim), delays, 0.005)
        for f, (fit, counted) in enumerate(batch):
            alone = _fits(real[f:f + 1], np.ascontiguousarray(sim[:, f:f + 1]), delays, 0.005)
            assert [(struct.pack("<5d", *astuple(a)), c) for a, c in alone] == [
                (struct.pack("<5d", *astuple(fit)), counted)]
        assert not batch[2][1] and batch[5][0].explained == 1.0 and batch[0][1]


def test_delay_fits_match_the_direct_residual_sums() -> None:
    """_fits takes the centred residual's sums from xc and yc products: the same fits as
    building the residual at every delay (up to rounding), and the delay put in."""
    from sim_real_bridge.core.engine import _fits

    rng = np.random.default_rng(12)
    delays = np.arange(26) * 0.01
    n, windows, joints = 50, 6, 7
    t = np.arange(n)[:, None] * 0.02
    for true_delay, gain in ((0.0, 1.0), (0.05, 1.0), (0.12, 0.8)):
        phase = rng.uniform(0, 6, (windows, 1, joints))
        real = 1.0 + gain * 0.3 * np.sin(2.0 * (t[None] - true_delay) + phase)  # (F, n, J)
        real += rng.normal(0, 1e-4, real.shape)
        sim = 1.0 + 0.3 * np.sin(2.0 * (t[:, None, None, :] - delays[None, None, :, None])
                                 + phase.transpose(1, 0, 2)[:, :, None, :])  # (n, F, D, J)
        fits = _fits(real, np.ascontiguousarray(sim), delays, 0.005)
        rc = real.transpose(1, 0, 2)[:, :, None] - sim
        rc -= rc.mean(axis=0)
        xc = sim - sim.mean(axis=0)
        sxr, sxx = (xc * rc).sum(axis=0), (xc * xc).sum(axis=0)
        slope = sxr / sxx
        total = ((rc * rc).sum(axis=0) - slope * sxr).sum(axis=2)  # (F, D)
        for f, (fit, counted) in enumerate(fits):
            best = int(np.argmin(total[f]))
            assert counted and fit.delay_s == pytest.approx(delays[best]) == pytest.approx(true_delay)
            assert fit.gain == pytest.approx(gain, abs=0.02)
            sst = float(((real[f] - sim[:, f, 0]) ** 2).sum())
            assert fit.explained == pytest.approx(max(0.0, 1 - total[f, best] / sst), abs=1e-9)


def test_planned_window_means_equal_the_live_means_bit_for_bit() -> None:
    """_Series.plan_grid's window means (all grid times at once) are the live window_mean's
    values exactly: same summation order, signed zeros, NaN and inf included."""
    from sim_real_bridge.core.engine import _Series

    rng = np.random.default_rng(7)
    n = 4000
    times = np.cumsum(rng.integers(0, 4_000_000, n)).astype(np.int64)
    times[1000:1100] = times[1000]  # a burst at one time
    times[2000:] += 700_000_000  # a gap longer than the window
    times = np.sort(times)
    values = rng.normal(size=(n, 6)) * 10.0 ** rng.integers(-8, 8, size=(n, 6))
    values[rng.random((n, 6)) < 0.05] = -0.0
    values[300:400] = -0.0
    values[500:510, 2] = np.nan
    values[600:610, 3] = np.inf
    step, window = 20_000_000, 100_000_000
    planned, live = _Series(6), _Series(6)
    planned.load(times, values)
    planned.plan_grid(step, 50_000_000, window)
    planned.reveal(n)
    for t, row in zip(times.tolist(), values, strict=True):
        live.add(t, row)
    checked = 0
    for end in range(int(times[0]) // step * step, int(times[-1]) + step, step):
        a, b = planned.window_mean(end - window, end), live.window_mean(end - window, end)
        assert np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b)), end
        checked += int(np.isfinite(b).any())
    assert checked > 100 and planned._grid is not None and planned._grid.w_values is not None


def test_planned_grid_samples_equal_the_live_samples_bit_for_bit() -> None:
    """_Series.plan_grid's samples (interpolated rows only, exact hits copied) are the live
    sample's values at every grid time: exact hits, repeated times, gaps over the limit,
    signed zeros, NaN and inf, and times past the newest sample."""
    from sim_real_bridge.core.engine import _Series

    rng = np.random.default_rng(11)
    n = 3000
    step = 10_000_000
    times = np.cumsum(rng.integers(0, 6_000_000, n)).astype(np.int64)
    times[::7] = times[::7] // step * step  # some samples exactly on the grid
    times[1000:1040] = times[1000]  # repeated times
    times[2000:] += 300_000_000  # a gap longer than the limit
    times = np.sort(times)
    values = rng.normal(size=(n, 5)) * 10.0 ** rng.integers(-6, 6, size=(n, 5))
    values[rng.random((n, 5)) < 0.05] = -0.0
    values[500:510, 1] = np.nan
    values[600:610, 4] = np.inf
    planned, live = _Series(5), _Series(5)
    planned.load(times, values)
    planned.plan_grid(step, 50_000_000)
    planned.reveal(n)
    for t, row in zip(times.tolist(), values, strict=True):
        live.add(t, row)
    on_grid = set(times[::7].tolist())
    served = exact = 0
    for t in range(int(times[0]) // step * step, int(times[-1]) + 3 * step, step):
        row = planned._grid_row(t, 50_000_000)  # (None: past the newest sample, left to the live path)
        if row is None:
            continue
        b = live.sample(t, 50_000_000)
        assert np.array_equal(row, b, equal_nan=True) and np.array_equal(np.signbit(row), np.signbit(b)), t
        served += 1
        exact += int(t in on_grid)
    assert served > 0.9 * (times[-1] - times[0]) / step and exact > 50


@pytest.mark.parametrize("case", ["steady", "backlog", "backwards", "forward"])
def test_planned_clock_offsets_and_resets_equal_the_per_sample_map(case: str) -> None:
    """_ClockMap.plan gives the offsets map gives sample by sample, and declines (None)
    exactly when map sees a clock reset: a stamp going back, or outrunning the receive
    clock; a delivery backlog is neither."""
    from sim_real_bridge.core.engine import _ClockMap

    rng = np.random.default_rng(len(case))
    n, reset_ns, leak = 4000, 500_000_000, 1e-3
    ids = rng.integers(0, 2, n)
    stamp = 1_700_000_000_000_000_000 + np.cumsum(rng.integers(500_000, 1_500_000, n)).astype(np.int64)
    recv = stamp + 2_000_000 + rng.integers(0, 3_000_000, n)
    if case == "backlog":
        recv[1000:1400] = recv[1400] + 2_000_000_000  # held back 2 s, delivered at once
    elif case == "backwards":
        stamp[(np.arange(n) >= 2500) & (ids == 1)] -= 3_000_000_000
    elif case == "forward":
        stamp[(np.arange(n) >= 3000) & (ids == 0)] += 3_000_000_000
    recv = np.maximum.accumulate(recv)
    names = ["a", "b"]
    live = _ClockMap(leak, reset_ns)
    offsets, resets = [], 0
    for s, r, k in zip(stamp.tolist(), recv.tolist(), ids.tolist(), strict=True):
        mapped, reset = live.map(s, r, names[k])
        offsets.append(mapped - s)
        resets += reset
    plan = _ClockMap(leak, reset_ns).plan(stamp, recv, ids, names)
    assert (plan is None) == (resets > 0) == (case in ("backwards", "forward"))
    if plan is not None:
        assert plan.offsets.tolist() == offsets


@pytest.mark.parametrize("reads", ["every_tick", "irregular"])
def test_planned_clock_spreads_equal_the_per_sample_map(reads: str) -> None:
    """A planned clock fed tick by tick gives the delay spread the per-sample map gives,
    read at every tick (the schedule plan_spreads computes at once) or irregularly (reads
    off that schedule plan again or compute their own)."""
    from sim_real_bridge.core.engine import _ClockMap

    rng = np.random.default_rng(7)
    n = 20_000  # ~170 refreshes: several batches of plan_spreads
    ids = rng.integers(0, 3, n)
    stamp = 1_700_000_000_000_000_000 + np.cumsum(rng.integers(500_000, 1_500_000, n)).astype(np.int64)
    recv = np.maximum.accumulate(stamp + 2_000_000 + rng.integers(0, 3_000_000, n))
    names = ["a", "b", "c"]
    planned = _ClockMap(1e-3, 500_000_000)
    plan = planned.plan(stamp, recv, ids, names)
    assert plan is not None
    cuts = np.arange(0, n + 1, 23)
    plan.plan_ticks(cuts)
    live = _ClockMap(1e-3, 500_000_000)
    fed = 0
    read = rng.random(cuts.size) < (1.0 if reads == "every_tick" else 0.3)
    for k, hi in enumerate(cuts.tolist()):
        planned.feed_tick(plan, k)
        for i in range(fed, hi):
            live.map(int(stamp[i]), int(recv[i]), names[ids[i]])
        fed = hi
        if read[k] or k == cuts.size - 1:
            assert planned.spread_s == live.spread_s, k
    assert plan.spreads and plan.spreads_end > 0
    if reads == "every_tick":
        assert plan.replans == 0  # batches planned one after the other, none again
    else:
        assert plan.replans > 0
