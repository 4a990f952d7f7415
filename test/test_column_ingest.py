"""Column ingest (replay's fast path) gives the row-by-row engine's results exactly.

The same recorded streams go through :func:`replay_columns` twice: fed whole columns
between ticks (:meth:`DivergenceEngine.plan_columns`) and fed row by row through the
intake. The runs must agree: events (category and window within 0.1 s, in practice
identical), residual statistics (within 1%, in practice identical), every published
record, and the problem counts. Streams the column path cannot take (clock resets,
arrivals out of order) fall back to the row-by-row path, with the same results.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from sim_real_bridge.offline.replay_engine import (
    CommandStream,
    JointStream,
    PoseStream,
    ReplayOutcome,
    WrenchStream,
    replay_columns,
)

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
NAMES = tuple(f"joint{i}" for i in range(1, 8))
WINDOW_TOLERANCE_S = 0.1
STAT_TOLERANCE = 0.01


def _streams(seed: int = 5) -> list:
    """Both sides at 500 Hz for 12 s; on the real side a lag and gain, a push, a dropout, a
    NaN burst, a frozen and a saturated wrench, a delivery backlog and irregular stamps."""
    rng = np.random.default_rng(seed)
    n = 6000
    base = T0 + np.arange(n, dtype=np.int64) * 2_000_000
    t_s = np.arange(n) * 0.002
    streams: list = [CommandStream("sim", np.array([T0 - 5_000_000]), [0], [NAMES], [[]])]
    for side, lag_ns in (("sim", 300_000), ("real", 700_000)):
        q = 0.4 * np.sin(0.8 * t_s[:, None] + np.arange(7)) * (t_s[:, None] > 0.5)
        qd = np.gradient(q, 0.002, axis=0)
        if side == "real":
            q = np.roll(q, 15, axis=0) * 1.02 + 0.01
        q = q + rng.normal(0, 1e-4, q.shape)
        eff = 2.0 * np.sin(q)
        stamps = base.copy()
        recv = stamps + lag_ns + rng.integers(0, 200_000, n)
        keep = np.ones(n, dtype=bool)
        force = np.tile([0.0, 0.0, -9.0], (n, 1)) + rng.normal(0, 0.05, (n, 3))
        torque = rng.normal(0, 0.01, (n, 3))
        if side == "real":
            keep[3000:3300] = False  # dropout, 0.6 s
            q[1500:1520, 1] = np.nan  # NaN burst
            recv[4000:4150] = recv[4150]  # delivered late, all at once
            force[4500:4800] = force[4500]  # frozen
            force[5200:5400, 0] = 7.5  # pinned component: saturation
            force[2000:2600, 0] += 30.0  # push
            stamps[5600:] += rng.integers(-700_000, 700_000, n - 5600)  # irregular stamps
            stamps[5600:] = np.maximum.accumulate(stamps[5600:])
        recv = np.maximum.accumulate(recv)
        streams.append(JointStream(side, recv[keep], stamps[keep], NAMES, q[keep], qd[keep], eff[keep]))
        streams.append(WrenchStream(side, recv + 20_000, stamps, "tool0", force, torque))
        m = n // 5
        pos = np.column_stack([0.4 + 0.05 * np.sin(t_s[::5]), np.zeros(m), 0.3 * np.ones(m)])
        quat = np.tile([1.0, 0.0, 0.0, 0.0], (m, 1))
        streams.append(PoseStream(side, "ee_pose", recv[::5] + 30_000, stamps[::5], "world", pos, quat))
        streams.append(PoseStream(side, "object_pose", recv[::5] + 40_000, stamps[::5], "world", pos + 0.1, quat))
    return streams


def _both(streams: list) -> tuple[ReplayOutcome, ReplayOutcome]:
    columns = replay_columns(streams, column_ingest=True)
    rows = replay_columns(streams, column_ingest=False)
    assert not rows.engine.columns_planned
    return columns, rows


def _records(outcome: ReplayOutcome) -> list:
    out = []
    for now, tick in outcome.ticks:
        for r in tick.joints:
            out.append((now, "j", r.stamp_ns, r.position_residual_rad.tolist(), r.clock_offset_s, r.clock_offset_std_s,
                        r.latency_s))
        for r in tick.contacts:
            out.append((now, "c", r.stamp_ns, r.residual_force_n.tolist(), r.sim_contact_phase, r.real_contact_phase))
        for r in tick.poses:
            out.append((now, "p", r.stamp_ns, r.ee_position_error_norm_m, r.object_position_error_norm_m))
        for r in tick.events:
            out.append((now, "e", r.id, r.action, r.start_ns, r.end_ns))
    return json.loads(json.dumps(out, default=float).replace("NaN", "null"))


def _assert_same_analysis(columns: ReplayOutcome, rows: ReplayOutcome) -> None:
    a, b = columns.engine.run_summary(), rows.engine.run_summary()
    # The acceptance's tolerances first (they say what "the same" means to a user) ...
    events_a = [(e["category"], e["start_s"], e["end_s"]) for e in a["events"]]
    events_b = [(e["category"], e["start_s"], e["end_s"]) for e in b["events"]]
    assert len(events_a) == len(events_b), (events_a, events_b)
    for (cat, start, end), (cat_b, start_b, end_b) in zip(events_a, events_b, strict=True):
        assert cat == cat_b and abs(start - start_b) <= WINDOW_TOLERANCE_S and abs(end - end_b) <= WINDOW_TOLERANCE_S
    for name, stats in b["residuals"]["joints"].items():
        for key, value in stats.items():
            assert abs(a["residuals"]["joints"][name][key] - value) <= STAT_TOLERANCE * abs(value)
    # ... then what the column path promises: the very same state at every tick.
    assert json.dumps(a, sort_keys=True, default=float) == json.dumps(b, sort_keys=True, default=float)
    assert _records(columns) == _records(rows)
    assert columns.problems == rows.problems
    assert [(s.stamp_ns, s.rejected_count, s.clock_offset_s, s.event_count) for s in columns.summaries] == [
        (s.stamp_ns, s.rejected_count, s.clock_offset_s, s.event_count) for s in rows.summaries]


def test_column_ingest_equals_row_by_row_on_streams_with_pathologies() -> None:
    columns, rows = _both(_streams())
    assert columns.engine.columns_planned
    summary = rows.engine.run_summary()
    categories = {e["category"] for e in summary["events"]}
    # The comparison covers real detections, opened and closed.
    assert "sensor" in categories and len(summary["events"]) >= 3, summary["events"]
    assert summary["counts"]["analysis_ticks"] > 500
    _assert_same_analysis(columns, rows)


def test_column_ingest_counts_refusals_and_flags_as_the_intake() -> None:
    streams = _streams()
    real_joints = streams[5]
    assert isinstance(real_joints, JointStream) and real_joints.side == "real"
    stamps = real_joints.stamp_ns.copy()
    stamps[700:705] = 0  # zero stamps: refused
    streams[5] = JointStream("real", real_joints.recv_ns, stamps, NAMES, real_joints.position, real_joints.velocity,
                             real_joints.effort)
    columns, rows = _both(streams)
    assert columns.engine.columns_planned
    assert columns.problems["real/joint_states"]["zero_stamp"] == 5
    assert columns.problems["real/joint_states"]["non_finite"] == 20
    assert columns.engine.run_summary()["counts"]["rejected"] == {"real/joint_states: zero_stamp": 5}
    _assert_same_analysis(columns, rows)


@pytest.mark.parametrize("case", ["clock_reset", "out_of_order"])
def test_streams_the_column_path_cannot_take_fall_back_with_the_same_results(case: str) -> None:
    streams = _streams()
    real = [k for k, s in enumerate(streams) if getattr(s, "side", "") == "real" and not isinstance(s, CommandStream)]
    if case == "clock_reset":
        # The real robot's clock jumps back 3 s at 8 s (a simulator restart): every real stream crosses it.
        for k in real:
            s = streams[k]
            stamps = s.stamp_ns.copy()
            stamps[stamps >= T0 + 8 * NS] -= 3 * NS
            streams[k] = type(s)(**{**s.__dict__, "stamp_ns": stamps})
    else:
        s = streams[6]
        assert isinstance(s, WrenchStream) and s.side == "real"
        stamps = s.stamp_ns.copy()
        stamps[[1000, 1001]] = stamps[[1001, 1000]]  # two samples swapped on the way
        streams[6] = WrenchStream("real", s.recv_ns, stamps, s.frame_ids, s.force_n, s.torque_nm)
    columns, rows = _both(streams)
    if case == "out_of_order":
        assert columns.problems["real/wrench"]["stamp_backwards"] == 1
    assert not columns.engine.columns_planned
    _assert_same_analysis(columns, rows)


def test_bench_bag_layout_of_a_simulated_scenario_takes_the_column_path(tmp_path) -> None:
    """A demo-like recording (MuJoCo sim and stand-in, human push) replays identically both ways."""
    from sim_real_bridge.offline.bag_io import open_bags
    from sim_real_bridge.offline.replay import _read_streams
    from sim_real_bridge.offline.replay_config import ReplayConfig
    from sim_real_bridge.offline.synthetic import simulated_messages, write_synthetic_bag

    bag = write_synthetic_bag(tmp_path / "push", items=simulated_messages("human_push", 10.0))
    config = ReplayConfig()
    with open_bags([bag]) as opened:
        streams, _ = _read_streams(opened, config, None, None, [])
    columns = replay_columns(streams, config.engine_config(), config.intake, config.tick_period_s, 1.0)
    rows = replay_columns(streams, config.engine_config(), config.intake, config.tick_period_s, 1.0,
                          column_ingest=False)
    assert columns.engine.columns_planned
    assert [e["category"] for e in rows.engine.run_summary()["events"]] == ["human"]
    _assert_same_analysis(columns, rows)


def test_recorded_tick_times_are_followed_the_same_way_by_both_paths() -> None:
    """A live monitor ticks when it can (timer, input arrival, late under load): replay
    given those times ticks exactly then, column ingest or not."""
    rng = np.random.default_rng(11)
    streams = _streams()
    steps = rng.integers(1_000_000, 40_000_000, 800)
    steps[300:310] = 400_000_000  # a monitor stalled for 4 s
    ticks = T0 + np.cumsum(steps)
    columns = replay_columns(streams, column_ingest=True, tick_times_ns=ticks)
    rows = replay_columns(streams, column_ingest=False, tick_times_ns=ticks)
    fixed = replay_columns(streams)
    assert columns.engine.columns_planned
    assert {now for now, _ in columns.ticks} <= set(ticks.tolist()) | {columns.last_recv_ns}
    _assert_same_analysis(columns, rows)
    # The stall changed the analysis (a skip ahead): recorded ticks are not decoration.
    assert columns.engine.analysis_count != fixed.engine.analysis_count


@pytest.mark.parametrize("block_ticks", [2048, 97])
def test_grid_wide_analysis_serves_the_column_path_and_equals_the_per_tick_path(monkeypatch, block_ticks) -> None:
    """The column path analyses with whole-grid numpy (samples, window means, world-frame
    forces, sim motion, delay fits, stream-health rows and jitter statistics), a block of
    grid times at a time; the row path computes each per tick. Both must agree, and the
    grid-wide parts must really be used."""
    from sim_real_bridge.core import engine as engine_module

    monkeypatch.setattr(engine_module, "PLAN_BLOCK_TICKS", block_ticks)
    streams = _streams(seed=8)
    sim_wrench = streams[2]
    assert isinstance(sim_wrench, WrenchStream) and sim_wrench.side == "sim"
    force, torque = sim_wrench.force_n.copy(), sim_wrench.torque_nm.copy()
    # The sim's wrench barely moves while the real one is frozen: motion at the threshold's scale.
    noise = np.random.default_rng(3).normal(0, 1e-5, (600, 6))
    force[4300:4900] = force[4300] + noise[:, :3]
    torque[4300:4900] = torque[4300] + noise[:, 3:]
    streams[2] = WrenchStream("sim", sim_wrench.recv_ns, sim_wrench.stamp_ns, sim_wrench.frame_ids, force, torque)
    columns, rows = _both(streams)
    engine = columns.engine
    plan = engine._grid_plan
    assert plan is not None and rows.engine._grid_plan is None
    assert plan.served >= 0.9 * engine.analysis_count
    ready = engine._ticks.ready_ns  # the readiness of recent grid times, per tick
    assert ready is not None and sum(r is not None for r in ready) >= 0.9 * len(ready)
    assert plan.fits_served >= 0.9 * plan.fits_planned > 50
    planned = [p for p in engine._planned if p.health is not None]
    assert planned and all(p.rows is not None for p in planned)
    assert engine._health[("real", "joint_states")]._jitter_table
    summary = rows.engine.run_summary()
    assert summary["ledger"]["categories"] and summary["events"]
    _assert_same_analysis(columns, rows)


def _state(engine) -> dict:
    """What readers of an engine's inputs see: stream health, clock maps, series, counts."""
    from sim_real_bridge.core.engine import POSE_KINDS, SIDES

    out: dict = {"first_recv_ns": engine.first_recv_ns, "rejected": dict(engine.rejected),
                 "commands": (engine.command_count, engine.first_command_ns)}
    for key, h in engine._health.items():
        out[key] = (h.sample_count, h._last_stamp_ns, h._last_recv_ns, h._last_time_ns, h._first_recv_ns,
                    h._burst_silence_ns, h._burst_at_ns, h._period_cache, h._since_period, h.period_s,
                    list(h._intervals_s), list(h._stamp_intervals_s), list(h._delays_s), list(h._gaps),
                    list(h._marks), None if h._last_values is None else h._last_values.tolist())
    for side in SIDES:
        clock = engine._clock[side]
        out[("clock", side)] = (clock.offset_ns, clock.spread_s, clock.delivery_delays_s(), clock._count,
                                dict(clock._last_stamp), dict(clock._epoch))
        series = [engine._joints[side], engine._wrench[side]] + [engine._poses[(side, k)] for k in POSE_KINDS]
        out[("series", side)] = [(len(s), s.last_ns, s.last_recv_ns, s.times.tolist()) for s in series]
    return out


def _planned_and_per_message(streams: list, config: Any, ticks: np.ndarray) -> tuple[Any, Any, Any, Any]:
    """A planned engine (columns and ticks planned), the problems its plan counted, an
    engine fed row by row through replay's feeders, and feed_rows(t): feed that one
    every row received before t (all left with None), in replay's order."""
    from sim_real_bridge.core.engine import DivergenceEngine
    from sim_real_bridge.offline import replay_engine as replay

    recv = [np.asarray(s.recv_ns, dtype=np.int64) for s in streams]
    recv_all = np.concatenate(recv)
    ids = np.concatenate([np.full(r.size, k) for k, r in enumerate(recv)])
    rows = np.concatenate([np.arange(r.size) for r in recv])
    order = np.lexsort((rows, ids, recv_all))
    planned = DivergenceEngine()
    problems = replay._plan_columns(planned, config, streams, order, [r.size for r in recv], {})
    planned.plan_ticks(ticks)
    by_row = DivergenceEngine()
    feeders = []
    for s in streams:
        if isinstance(s, JointStream):
            feeders.append(replay._vector_joint_feeder(by_row, config, s))
        elif isinstance(s, WrenchStream):
            feeders.append(replay._vector_wrench_feeder(by_row, config, s))
        elif isinstance(s, PoseStream):
            feeders.append(replay._vector_pose_feeder(by_row, config, s))
        else:
            feeders.append(lambda i, r, s=s: by_row.on_command(int(s.start_ns[i]), r, s.joint_names[i], s.points[i]))
    sorted_recv, sorted_ids, sorted_rows = recv_all[order].tolist(), ids[order].tolist(), rows[order].tolist()
    fed = [0]

    def feed_rows(t: int | None) -> None:
        n = fed[0]
        while n < len(sorted_recv) and (t is None or sorted_recv[n] < t):
            feeders[sorted_ids[n]](sorted_rows[n], sorted_recv[n])
            n += 1
        fed[0] = n

    return planned, problems, by_row, feed_rows


def test_planned_columns_fed_at_any_times_leave_the_per_message_state() -> None:
    """feed_columns at planned tick times, between them, past several at once and at
    unplanned times: after each call, every input state equals the per-message engine's
    fed the same rows (stream health, clock map, series)."""
    from sim_real_bridge.core import intake

    streams = _streams()
    config = intake.IntakeConfig()
    ticks = T0 + np.arange(1, 600, dtype=np.int64) * 20_000_000
    planned, problems, by_row, feed_rows = _planned_and_per_message(streams, config, ticks)
    assert problems is not None
    rng = np.random.default_rng(4)
    times = sorted(set(ticks[rng.choice(ticks.size, 150, replace=False)].tolist())
                   | set((T0 + rng.integers(0, 12 * NS, 60)).tolist()))
    # Earlier than a time already fed, unplanned and planned: nothing new.
    times += [times[-1] - 1, int(ticks[ticks < times[-1]][-3])]
    for t in [*times, None]:
        planned.feed_columns(t)
        feed_rows(t)
        assert _state(planned) == _state(by_row), t


def test_a_plan_row_fills_every_slot_of_the_per_tick_reads_in_order() -> None:
    import ast
    import inspect
    import textwrap

    from sim_real_bridge.core.engine import DivergenceEngine, _Pure

    names = _Pure.__slots__
    pure = _Pure()
    for k, name in enumerate(names):
        setattr(pure, name, k)
    assert pure.as_row() == tuple(range(len(names)))
    # _analyse unpacks a row (planned, or as_row of the per-tick reads) into locals of the
    # same names, in the same order: its unpacking must list the slots as they are.
    tree = ast.parse(textwrap.dedent(inspect.getsource(DivergenceEngine._analyse)))
    unpacked = [[elt.id for elt in node.targets[0].elts] for node in ast.walk(tree)
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple)
                and len(node.targets[0].elts) > 10]
    assert unpacked == [list(names)]


def test_rotation_angles_on_columns_equal_the_per_tick_ones() -> None:
    from sim_real_bridge.core.engine import _quat_angle, _quat_angle_rows

    rng = np.random.default_rng(3)
    q1, q2 = rng.normal(size=(200, 4)), rng.normal(size=(200, 4))
    q2[:50] = q1[:50] * rng.uniform(0.5, 2.0, size=(50, 1))  # the same rotation: dot may round past 1
    q1[60], q2[61], q1[62] = np.nan, np.inf, 0.0
    rows = _quat_angle_rows(q1, q2)
    for k in range(200):
        one = _quat_angle(q1[k], q2[k])
        assert rows[k] == one or (np.isnan(rows[k]) and np.isnan(one)), k
    assert np.isnan(rows[60]) and np.isnan(rows[61]) and np.isnan(rows[62])


def test_the_short_std_equals_numpy_std_bit_for_bit() -> None:
    from collections import deque

    from sim_real_bridge.core.engine import _std

    rng = np.random.default_rng(5)
    delays = rng.integers(0, 5_000_000, size=3000)
    for lo, size in ((0, 3), (7, 500), (100, 129), (900, 2000)):
        window = delays[lo:lo + size]
        assert _std(window) == float(np.std(window))
        assert _std(deque(window.tolist())) == float(np.std(deque(window.tolist())))
        floats = window * 1e-9 + rng.normal(size=window.size) * 1e-4
        assert _std(floats) == float(np.std(floats))


def test_list_smoothing_equals_the_masked_numpy_form() -> None:
    from sim_real_bridge.core.engine import _max_list, _smooth_list

    rng = np.random.default_rng(9)
    alpha = 0.04
    prev = rng.uniform(0, 2, 7)
    for _ in range(50):
        value = rng.uniform(0, 2, 7) ** 2
        value[rng.integers(0, 7)] = rng.choice([np.inf, np.nan, 1.0])
        finite = np.isfinite(value)
        expected = np.where(finite, (1 - alpha) * prev + alpha * np.where(finite, value, 0.0), prev)
        got = _smooth_list(prev.tolist(), value.tolist(), alpha)
        assert got == expected.tolist()
        assert _max_list(got) == float(np.max(expected))
        prev = expected
    assert _smooth_list(None, [1.0, 2.0], alpha) == [1.0, 2.0]
    assert _smooth_list([0.0, 0.0], [1e308, 1e308], 0.5) == [5e307, 5e307]  # (finite values, their sum not)
    assert np.isnan(_max_list([1.0, np.nan, 3.0])) and np.isnan(np.max([1.0, np.nan, 3.0]))
    assert _max_list([1.0, np.inf]) == np.inf


def test_smoothed_squares_never_hold_nan_while_some_of_the_past_is_kept() -> None:
    """The engine takes max for _max_list on its smoothed squared residuals: squares
    (inf where they overflow, never NaN), smoothed with 1 - alpha > 0, never become NaN;
    with alpha 1 (nothing kept) an inf would, which is why it then keeps _max_list."""
    from sim_real_bridge.core.engine import _max_list, _smooth_list

    rng = np.random.default_rng(11)
    for alpha in (0.04, 0.5, 0.999):
        state = None
        for _ in range(300):
            value = rng.uniform(0, 2, 7) ** 2
            value[rng.random(7) < 0.1] = np.inf
            value[rng.random(7) < 0.1] = 1e308
            state = _smooth_list(state, value.tolist(), alpha)
            assert not any(np.isnan(state)) and max(state) == _max_list(state)
    assert np.isnan(_max_list(_smooth_list([np.inf, 1.0], [1.0, 1.0], 1.0)))


def test_planned_motion_windows_equal_the_per_tick_test() -> None:
    """_plan_moving's window max/min form gives _side_moving's verdict at every grid time:
    windows at the stream's end, gaps, NaN values and a still stream included."""
    from sim_real_bridge.core.engine import DivergenceEngine, EngineConfig, _plan_moving

    engine = DivergenceEngine(EngineConfig())
    engine.joint_names = ("a", "b")
    rng = np.random.default_rng(4)
    t = np.cumsum(rng.integers(1_000_000, 3_000_000, 3000)).astype(np.int64)
    values = np.cumsum(rng.normal(0, 1e-3, (t.size, 6)), axis=0)
    values[500:900] = values[500]  # still
    values[1200:1210, 1] = np.nan
    values[2000:2100, :] = values[2000] + rng.normal(0, 1e-9, (100, 6))  # below the threshold
    t = np.delete(t, np.s_[1500:1600])  # a gap
    values = np.delete(values, np.s_[1500:1600], axis=0)
    values[-100:] = values[-100]
    values[-1] += 1.0  # still to the end but for the newest sample: only windows holding it move
    from sim_real_bridge.core.engine import _Series
    engine._joints = {"sim": _Series(6), "real": _Series(6)}
    engine._joints["sim"].load(t, values)
    engine._wrench["sim"].load(t, values)
    times = np.arange(t[0] - 50_000_000, t[-1] + 50_000_000, 20_000_000, dtype=np.int64)
    planned = _plan_moving(engine, times, {}, np.iinfo(np.int64).max, [])
    for series in (engine._joints["sim"], engine._wrench["sim"]):
        series.reveal(t.size)
    per_tick = [engine._side_moving("sim", int(x)) for x in times]
    assert planned == per_tick
    middle = slice(1000, 1500)  # a block of grid times reading rows in the middle of the stream
    assert _plan_moving(engine, times[middle], {}, np.iinfo(np.int64).max, []) == per_tick[middle]
    assert any(p["wrench"] for p in planned) and not all(p["wrench"] for p in planned)


def _scalars(engine) -> dict:
    """The input state a tick reads, read without moving rows fed by plan into the deques."""
    from sim_real_bridge.core.engine import POSE_KINDS, SIDES

    out: dict = {"first_recv_ns": engine.first_recv_ns, "rejected": dict(engine.rejected),
                 "commands": (engine.command_count, engine.first_command_ns, engine._last_command_ns)}
    for key, h in engine._health.items():
        out[key] = (h.sample_count, h._last_stamp_ns, h._last_recv_ns, h._last_time_ns, h._first_recv_ns,
                    h._burst_silence_ns, h._burst_at_ns, h._period_cache, h._since_period,
                    h._stamp_interval_count(), list(h._gaps), list(h._marks))
    for side in SIDES:
        clock = engine._clock[side]
        out[("clock", side)] = (clock.offset_ns, dict(clock._last_recv), clock._count)
        series = [engine._joints[side], engine._wrench[side]] + [engine._poses[(side, k)] for k in POSE_KINDS]
        out[("series", side)] = [(len(s), s.last_ns, s.last_recv_ns) for s in series]
    return out


def test_planned_ticks_fed_in_order_leave_the_per_message_state() -> None:
    """The usual replay feeds the planned ticks in order, and feed_columns then only sets
    what plan_ticks kept for each (commands and refusals fed as they fall due). An
    unplanned time, skipped ticks, a repeated tick and an earlier time leave that path and
    come back to it: after every call the state equals the per-message engine's (the
    scalars each time, the deques, filled when read, now and then)."""
    from sim_real_bridge.core import intake

    streams = _streams(seed=6)
    streams[0] = CommandStream("sim", T0 + np.array([-5_000_000, 3 * NS + 7, 7 * NS]), [0, 0, 0],
                               [NAMES] * 3, [[]] * 3)
    for k, s in enumerate(streams):
        if isinstance(s, WrenchStream) and s.side == "real":
            stamps = s.stamp_ns.copy()
            stamps[[700, 701, 2500, 5001]] = 0  # refused: zero stamps
            streams[k] = WrenchStream(s.side, s.recv_ns, stamps, s.frame_ids, s.force_n, s.torque_nm)
    config = intake.IntakeConfig()
    ticks = T0 + np.arange(1, 620, dtype=np.int64) * 20_000_000
    planned, problems, by_row, feed_rows = _planned_and_per_message(streams, config, ticks)
    assert problems is not None and sum(problems["real/wrench"].values()) >= 4
    times = ticks.tolist()
    times = [*times[:100], times[100] + 7_000_000, *times[101:200], *times[205:300], times[299], *times[300:400],
             times[395], *times[400:]]
    in_order = 0
    for step, t in enumerate([*times, None]):
        planned.feed_columns(t)
        feed_rows(t)
        in_order += planned._ticks.fed >= 0 and t == planned._ticks.times[planned._ticks.fed]
        assert _scalars(planned) == _scalars(by_row), t
        if step % 37 == 36 or t is None:
            assert _state(planned) == _state(by_row), t
    assert in_order > 0.9 * len(times)
    assert by_row.rejected and by_row.command_count == 3


def test_each_record_field_holds_what_it_names() -> None:
    """The engine makes its records with positional fields: each must hold what its name
    says, planned or per tick. The real arm lags (position residual, not velocity), its
    end effector is shifted along x and turned 0.1 rad, its object shifted along y."""
    streams = _streams(seed=4)
    for k, s in enumerate(streams):
        if isinstance(s, PoseStream) and s.side == "real":
            ee = s.stream == "ee_pose"
            quat = np.tile([np.cos(0.05), np.sin(0.05), 0.0, 0.0] if ee else [1.0, 0.0, 0.0, 0.0], (s.recv_ns.size, 1))
            shift = [0.01, 0.0, 0.0] if ee else [0.0, 0.03, 0.0]
            streams[k] = PoseStream(s.side, s.stream, s.recv_ns, s.stamp_ns, s.frame_ids, s.position_m + shift, quat)
    for outcome in _both(streams):
        joints = [r for _, tick in outcome.ticks for r in tick.joints]
        contacts = [r for _, tick in outcome.ticks for r in tick.contacts]
        poses = [r for _, tick in outcome.ticks for r in tick.poses]
        assert len(joints) > 400 and len(contacts) > 400 and len(poses) > 200
        late = joints[len(joints) // 2:]
        for r in joints:
            assert r.names == tuple(NAMES) and r.latency_compensated is False
            assert r.position_residual_rad.shape == r.velocity_residual_rad_s.shape == r.effort_residual.shape == (7,)
            assert r.clock_offset_std_s >= 0 and r.latency_std_s >= 0
        moving = [r for r in late if np.isfinite(r.position_residual_rad).all()]
        # Positions 0.01 rad above the sim's (and lagged); the same speeds, lagged.
        assert np.mean([r.position_residual_rad.mean() for r in moving]) > 0.005
        assert abs(np.mean([r.velocity_residual_rad_s.mean() for r in moving])) < 0.002
        assert all(not np.array_equal(r.effort_residual, r.position_residual_rad) for r in moving)
        assert abs(late[-1].latency_s - 0.03) < 0.015 and abs(late[-1].clock_offset_s) < 0.005
        for r in contacts:
            np.testing.assert_array_equal(r.residual_force_n, r.real_force_n - r.sim_force_n)
            np.testing.assert_array_equal(r.residual_torque_nm, r.real_torque_nm - r.sim_torque_nm)
            assert r.force_residual_norm_n == pytest.approx(np.linalg.norm(r.residual_force_n))
            assert r.torque_residual_norm_nm == pytest.approx(np.linalg.norm(r.residual_torque_nm))
            assert np.linalg.norm(r.sim_force_n) > 5 > np.linalg.norm(r.sim_torque_nm)  # ~9 N of weight, ~0.01 N m
            assert r.sim_contact_phase in (0, 1) and r.real_contact_phase in (0, 1)
        assert {r.real_contact_phase for r in contacts} == {0, 1}  # the push
        for r in poses:
            np.testing.assert_allclose(r.ee_position_error_m, [0.01, 0.0, 0.0], atol=1e-4)  # (the arms move)
            np.testing.assert_array_equal(r.ee_position_error_m, r.real_ee_position_m - r.sim_ee_position_m)
            assert r.ee_position_error_norm_m == pytest.approx(np.linalg.norm(r.ee_position_error_m))
            assert r.ee_orientation_error_rad == pytest.approx(0.1, abs=1e-9)
            assert r.real_ee_orientation_wxyz[1] == pytest.approx(np.sin(0.05)) and r.sim_ee_orientation_wxyz[0] == 1.0
            assert r.has_object and r.object_position_error_norm_m == pytest.approx(0.03, abs=1e-4)
            assert r.real_object_position_m[1] - r.sim_object_position_m[1] == pytest.approx(0.03)
            assert r.object_orientation_error_rad == pytest.approx(0.0, abs=1e-9)
            assert r.sim_object_position_m[2] - r.sim_ee_position_m[2] == pytest.approx(0.1)  # the object 0.1 m above
