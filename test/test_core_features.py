"""Stream health detectors: dropout, nonfinite, frozen, stamp jitter, saturation, F/T bias."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.core.features import FeatureConfig, StreamHealth
from sim_real_bridge.errors import ConfigError

MS = 1_000_000
PERIOD = 2 * MS


def feed(health: StreamHealth, n: int, start_k: int = 0, values=None, stamp_noise_ns=None, skip=()) -> None:
    rng = np.random.default_rng(0)
    for k in range(start_k, start_k + n):
        if k in skip:
            continue
        t = k * PERIOD
        stamp = t + (int(stamp_noise_ns(rng)) if stamp_noise_ns else 0)
        v = values(k) if values else np.array([np.sin(0.01 * k), np.cos(0.01 * k), 0.1 * k])
        health.add(stamp, t + MS, t, v)


def flag(health: StreamHealth, name: str, t_ns: int, **kw):
    return {f.name: f for f in health.flags(t_ns, **kw)}[name]


def test_healthy_stream_raises_nothing() -> None:
    h = StreamHealth(FeatureConfig(), "real/joint_states")
    feed(h, 500)
    assert h.period_s == pytest.approx(0.002)
    assert not any(f.active for f in h.flags(499 * PERIOD, other_moving=True))


def test_dropout_in_the_past_and_open_gap() -> None:
    h = StreamHealth(FeatureConfig(dropout_periods=5), "s")
    feed(h, 600, skip=range(200, 400))
    f = flag(h, "dropout", 300 * PERIOD)
    assert f.active and 0 < f.severity <= 1 and f.evidence["gap_s"] == "0.402"
    assert not flag(h, "dropout", 550 * PERIOD).active
    # nothing after sample 599: an open gap once 5 periods have passed
    assert not flag(h, "dropout", 602 * PERIOD).active
    assert flag(h, "dropout", 610 * PERIOD).active


def test_a_gap_the_twin_shares_is_lost_on_the_way_not_by_the_sensor() -> None:
    real, sim = StreamHealth(FeatureConfig(), "real/s"), StreamHealth(FeatureConfig(), "sim/s")
    feed(real, 600, skip=range(200, 400))
    feed(sim, 600, skip=range(250, 300))
    assert not flag(real, "dropout", 300 * PERIOD, twin=sim).active
    lonely = StreamHealth(FeatureConfig(), "sim/s")
    feed(lonely, 600, skip=range(500, 550))
    assert flag(real, "dropout", 300 * PERIOD, twin=lonely).active


def test_a_gap_inside_a_twin_silence_still_open_is_shared() -> None:
    # The sim went silent at 100 and is still silent; the real paused 200..300 (the
    # monitor heard nothing from either robot): the real gap is no dropout of its own.
    real, sim = StreamHealth(FeatureConfig(), "real/s"), StreamHealth(FeatureConfig(), "sim/s")
    feed(real, 400, skip=range(200, 300))
    feed(sim, 100)
    assert not flag(real, "dropout", 300 * PERIOD, twin=sim).active
    # A twin that delivered past the gap's start does not hide it.
    busy = StreamHealth(FeatureConfig(), "sim/s")
    feed(busy, 250)
    assert flag(real, "dropout", 300 * PERIOD, twin=busy).active


def test_open_gap_needs_receive_silence_of_the_stream_and_not_of_its_twin() -> None:
    real, sim = StreamHealth(FeatureConfig(warmup_s=0.1), "real/s"), StreamHealth(FeatureConfig(warmup_s=0.1), "sim/s")
    feed(real, 600)  # received at k * PERIOD + 1 ms
    feed(sim, 700)
    t = 650 * PERIOD
    assert flag(real, "dropout", t, now_ns=t + MS, twin=sim).active
    # backlogged, not silent: something of the stream was received just now
    real.add(400 * PERIOD, t, 400 * PERIOD, np.array([1.0, 2.0, 3.0]))
    assert not flag(real, "dropout", t, now_ns=t + MS).active
    # silent, but so is the twin: nothing reaches the monitor at all
    quiet = StreamHealth(FeatureConfig(warmup_s=0.1), "sim/s")
    feed(quiet, 600)
    assert not flag(real, "dropout", t + 40 * PERIOD, now_ns=t + 40 * PERIOD, twin=quiet).active


def test_a_silence_the_whole_side_shares_waits_for_side_silence_s() -> None:
    cfg = FeatureConfig(warmup_s=0.1, side_silence_s=1.0)
    real, sim = StreamHealth(cfg, "real/joint_states"), StreamHealth(cfg, "sim/joint_states")
    sibling = StreamHealth(cfg, "real/wrench")
    feed(real, 600)
    feed(sim, 1200)
    feed(sibling, 600)  # the whole real side stops at sample 599 (a stalled driver or host)
    t = 700 * PERIOD  # 0.2 s of silence
    assert not flag(real, "dropout", t, now_ns=t + MS, twin=sim, siblings=[sibling]).active
    t = 1150 * PERIOD  # 1.1 s of silence
    assert flag(real, "dropout", t, now_ns=t + MS, twin=sim, siblings=[sibling]).active
    # One stream silent while its sibling flows is a dropout after dropout_periods.
    flowing = StreamHealth(cfg, "real/wrench")
    feed(flowing, 1200)
    t = 700 * PERIOD
    assert flag(real, "dropout", t, now_ns=t + MS, twin=sim, siblings=[flowing]).active


def test_open_gap_waits_for_warmup_and_for_the_learned_delivery_bursts() -> None:
    h = StreamHealth(FeatureConfig(warmup_s=2.0), "s")
    feed(h, 600)
    t = 620 * PERIOD
    assert not flag(h, "dropout", t, now_ns=t).active  # 1.2 s of receive time: still warming up
    bursty = StreamHealth(FeatureConfig(warmup_s=0.1), "s")
    for k in range(2000):  # delivered in bursts every 0.5 s, stamps contiguous
        recv = (k * PERIOD // 500_000_000 + 1) * 500_000_000 + k * 1000
        bursty.add(k * PERIOD, recv, k * PERIOD, np.array([np.sin(0.01 * k), 1.0]))
    assert bursty.burst_silence_ns(4_000_000_000) > 400_000_000
    t = 2000 * PERIOD + 300_000_000
    assert not flag(bursty, "dropout", t, now_ns=t + 100_000_000).active
    assert flag(bursty, "dropout", t + 400_000_000, now_ns=t + 500_000_000).active


def test_nonfinite_marks_nearby_times_only() -> None:
    h = StreamHealth(FeatureConfig(flag_hold_s=0.05), "s")
    feed(h, 400, values=lambda k: np.array([np.nan if 100 <= k < 110 else 1.0 * k, 2.0]))
    assert flag(h, "nonfinite", 105 * PERIOD).active
    assert not flag(h, "nonfinite", 300 * PERIOD).active


def test_frozen_needs_identical_samples_and_a_moving_other_side() -> None:
    h = StreamHealth(FeatureConfig(frozen_samples=8), "s")
    feed(h, 300, values=lambda k: np.array([min(k, 150) * 0.01, 1.0]))
    assert flag(h, "frozen", 200 * PERIOD, other_moving=True).active
    assert not flag(h, "frozen", 200 * PERIOD, other_moving=False).active
    assert not flag(h, "frozen", 100 * PERIOD, other_moving=True).active


def test_stamp_jitter_from_interval_dispersion() -> None:
    h = StreamHealth(FeatureConfig(), "s")
    feed(h, 400, stamp_noise_ns=lambda rng: rng.normal(0, 4 * MS))
    f = flag(h, "stamp_jitter", 399 * PERIOD)
    assert f.active and float(f.evidence["interval_mad_over_period"]) > 0.25


def test_saturation_one_component_pinned() -> None:
    h = StreamHealth(FeatureConfig(saturation_samples=10), "s")
    feed(h, 200, values=lambda k: np.array([min(0.5 * k, 40.0), np.sin(0.1 * k)]))
    assert flag(h, "saturation", 190 * PERIOD).active
    assert not flag(h, "saturation", 20 * PERIOD).active
    assert not flag(h, "saturation", 190 * PERIOD, other_moving=False).active  # a still arm holds too


def test_reset_stamps_forgets_interval_history() -> None:
    h = StreamHealth(FeatureConfig(), "s")
    feed(h, 100)
    h.reset_stamps()
    assert h.delay_std_s is None
    feed(h, 50, start_k=100)
    assert h.delay_std_s == pytest.approx(0.0)


def test_config_errors() -> None:
    with pytest.raises(ConfigError, match="FeatureConfig.dropout_periods must be > 0"):
        StreamHealth(FeatureConfig(dropout_periods=0))
    with pytest.raises(ConfigError, match="FeatureConfig.frozen_samples must be >= 2"):
        StreamHealth(FeatureConfig(frozen_samples=1))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_live_jitter_statistics_equal_the_planned_table_and_numpy(seed: int) -> None:
    from sim_real_bridge.core.features import _jitter_stats, plan_jitter

    stamps, _, _, _ = _pathological_stream(seed)
    health = StreamHealth(FeatureConfig())
    size = health.config.jitter_window
    counts = np.arange(size + 1, stamps.size + 1, 37)
    plan_jitter(health, stamps, counts)
    intervals = (np.diff(stamps).astype(np.float64) * 1e-9).tolist()
    backwards_seen = 0
    for m in counts.tolist():
        window = intervals[m - 1 - size:m - 1]
        center, mad, backwards = _jitter_stats(window)
        a = np.asarray(window)
        assert (center, mad, backwards) == health._jitter_table[m]
        assert center == np.median(a) and mad == np.median(np.abs(a - np.median(a)))
        assert backwards == int((a <= 0).sum())
        backwards_seen += backwards
    assert backwards_seen > 0  # the repeated and backwards stamps were in some windows


@pytest.mark.parametrize("width", [1, 2, 7, 100, 101, 200])
def test_row_and_window_medians_equal_numpy(width: int) -> None:
    from sim_real_bridge.core.features import _median, _row_medians, _window_medians

    rng = np.random.default_rng(width)
    rows = rng.integers(0, 5, size=(300, width)).astype(np.float64) * 1e-3  # many ties
    rows[::7] += rng.normal(size=(rows[::7].shape)) * 1e-9
    assert np.array_equal(_row_medians(rows.copy()), np.median(rows, axis=1))
    runs = np.repeat(rng.integers(-2, 3, 60) * 1e-3, rng.integers(1, 3 * width + 2, 60))  # constant windows
    for values in (rows.ravel(), runs):
        ends = np.unique(rng.integers(1, values.size + 1, 400))
        got = _window_medians(values, ends, width)
        assert got.tolist() == [_median(values[max(0, e - width):e].tolist()) for e in ends.tolist()]


def test_planned_jitter_of_steady_stuck_and_backwards_clocks() -> None:
    from sim_real_bridge.core.features import _jitter_stats, plan_jitter

    steps = np.concatenate(([0], np.full(400, 2 * MS), np.zeros(300, dtype=np.int64), np.full(300, -MS),
                            np.full(300, 2 * MS), MS + np.arange(300) % 3 * MS))
    stamps = 10**9 + np.cumsum(steps)
    health = StreamHealth(FeatureConfig())
    size = health.config.jitter_window
    counts = np.arange(1, stamps.size + 1)
    plan_jitter(health, stamps, counts)
    intervals = (np.diff(stamps).astype(np.float64) * 1e-9).tolist()
    kinds = set()
    for m in range(size + 1, stamps.size + 1):
        window = intervals[m - 1 - size:m - 1]
        assert health._jitter_table[m] == _jitter_stats(window), m
        kinds.add((len(set(window)) == 1, health._jitter_table[m][2]))
    assert {(True, 0), (True, size), (False, 0)} <= kinds  # steady, stuck or backwards, and mixed windows


@pytest.mark.parametrize("width", [1, 6, 14])
@pytest.mark.parametrize("strided", [False, True])
def test_planned_marks_equal_the_marks_add_records(width: int, strided: bool) -> None:
    from sim_real_bridge.core.features import plan_marks

    cfg = FeatureConfig(frozen_samples=4, saturation_samples=6)
    rng = np.random.default_rng(width)
    n = 400
    block = rng.normal(size=(n, width + 3))
    values = block[:, :width] if strided else np.ascontiguousarray(block[:, :width])  # the engine's are strided
    values[50:60] = values[49]  # every component repeated: frozen
    values[100:130, 0] = 2.5  # one pinned: saturation
    values[140:150, 0] = 0.0  # pinned at zero: not saturation
    values[200:203, -1] = np.nan  # nonfinite
    values[300:310] = values[299]
    values[305, 0] = np.inf  # a nonfinite row inside a repeat run
    values[350:360, 0] = -0.0
    values[355, 0] = 0.0  # equal to -0.0
    health = StreamHealth(cfg)
    for i in range(n):
        health.add(i * PERIOD, i * PERIOD + MS, i * PERIOD, values[i].copy())
    marks = plan_marks(cfg, values)
    planned = [(i * PERIOD, kind, value) for i, kind, value in zip(marks.rows, marks.kinds, marks.values, strict=True)]
    expected = [m for m in health._marks]
    assert [m[:2] for m in planned] == [m[:2] for m in expected]
    assert np.array_equal([m[2] for m in planned], [m[2] for m in expected])
    # (one component pinned is the whole row repeated: no saturation)
    assert ({"nonfinite", "repeat", "saturation"} if width > 1 else {"nonfinite", "repeat"}) <= set(marks.kinds)


def test_prepared_states_do_not_depend_on_the_order_of_the_rows() -> None:
    from sim_real_bridge.core.features import plan_rows

    stamps, recvs, times, _ = _pathological_stream(2)
    cfg = FeatureConfig()
    ascending, shuffled = plan_rows(cfg, stamps, recvs, times), plan_rows(cfg, stamps, recvs, times)
    assert ascending is not None and shuffled is not None
    rows = np.sort(np.random.default_rng(0).integers(-1, stamps.size, 700))
    ascending.prepare(rows)
    shuffled.prepare(np.random.default_rng(1).permutation(rows))
    assert ascending.states == shuffled.states and len(ascending.states) == np.unique(rows[rows >= 0]).size


@pytest.mark.parametrize("windows", [(20, 31), (21, 40), (101, 200)])
def test_planned_tables_equal_the_live_tracker_for_other_windows(windows: tuple[int, int]) -> None:
    from sim_real_bridge.core.features import _jitter_stats, add_planned, plan_jitter, plan_marks, plan_rows

    cfg = FeatureConfig(period_window=windows[0], jitter_window=windows[1])
    stamps, recvs, times, values = _pathological_stream(3)
    rows = plan_rows(cfg, stamps, recvs, times)
    assert rows is not None
    marks = plan_marks(cfg, values)
    live, planned = StreamHealth(cfg), StreamHealth(cfg)
    cuts = np.arange(0, stamps.size + 1, 9)
    plan_jitter(planned, stamps, cuts[1:])
    assert planned._jitter_table
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        for i in range(lo, hi):
            live.add(int(stamps[i]), int(recvs[i]), int(times[i]), values[i])
        add_planned(planned, marks, lo, hi, (), (), (), values, rows)
        assert (planned._period_cache, planned._since_period) == (live._period_cache, live._since_period)
        assert list(planned._intervals_s) == list(live._intervals_s)
        if hi in planned._jitter_table:
            assert planned._jitter_table[hi] == _jitter_stats(live._stamp_intervals_s)


def _pathological_stream(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """4000 samples at 500 Hz: dropouts, repeated and backwards stamps, jitter, delivery bursts;
    values with a NaN burst, a frozen run and pinned components."""
    rng = np.random.default_rng(seed)
    n = 4000
    steps = np.full(n, 2_000_000, dtype=np.int64)
    steps[0] = 0
    steps[900] = 600_000_000  # dropout
    steps[2500] = 50_000_000  # short dropout
    steps[3000:3010] = 0  # repeated stamps
    steps[1200] = -1_000_000  # one stamp back
    steps[3500:] += rng.integers(-900_000, 900_000, n - 3500)  # jitter
    stamps = 1_000_000_000 + np.cumsum(steps)
    recvs = stamps + 300_000 + rng.integers(0, 100_000, n)
    recvs[1800:1900] = recvs[1900]  # delivered late, at once
    recvs[2200:2210] = recvs[2210]
    recvs = np.maximum.accumulate(recvs)
    times = np.maximum.accumulate(stamps + 50_000)
    values = rng.normal(size=(n, 3))
    values[1500:1520, 1] = np.nan  # nonfinite
    values[2000:2100] = values[2000]  # frozen
    values[2600:2700, 0] = 3.0  # one component pinned: saturation
    values[2800:2900, 2] = 0.0  # pinned at zero: not saturation
    return stamps, recvs, times, values


@pytest.mark.parametrize("read_every", [1, 5])
@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_planned_rows_leave_the_state_add_leaves(seed: int, prepared: bool, read_every: int) -> None:
    from sim_real_bridge.core.features import add_planned, plan_marks, plan_rows

    cfg = FeatureConfig()
    stamps, recvs, times, values = _pathological_stream(seed)
    rows = plan_rows(cfg, stamps, recvs, times)
    assert rows is not None and rows.gaps  # the dropouts were seen, the planned path taken
    marks = plan_marks(cfg, values)
    assert {"nonfinite", "repeat", "saturation"} <= set(marks.kinds)
    by_row, planned = StreamHealth(cfg), StreamHealth(cfg)
    rng = np.random.default_rng(seed)
    cuts = np.unique(np.concatenate(([0, stamps.size], rng.integers(1, stamps.size, 300))))
    if prepared:  # the states at the cuts computed at once (as plan_ticks does), else row by row on demand
        rows.prepare(cuts - 1)
    lists = (stamps.tolist(), recvs.tolist(), times.tolist())
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        for i in range(lo, hi):
            by_row.add(int(stamps[i]), int(recvs[i]), int(times[i]), values[i])
        add_planned(planned, marks, lo, hi, *lists, values, rows)
        # The deques fill when read: read them after some feeds only (and after each, the flags).
        assert planned._stamp_interval_count() == len(by_row._stamp_intervals_s)
        t = int(times[hi - 1])
        assert [(f.name, f.active, f.severity) for f in planned.flags(t, now_ns=int(recvs[hi - 1]))] == [
            (f.name, f.active, f.severity) for f in by_row.flags(t, now_ns=int(recvs[hi - 1]))]
        if hi % read_every and hi != stamps.size:
            continue
        for name in ("sample_count", "_last_stamp_ns", "_last_recv_ns", "_last_time_ns", "_first_recv_ns",
                     "_burst_silence_ns", "_burst_at_ns", "_period_cache", "_since_period"):
            assert getattr(planned, name) == getattr(by_row, name), (name, hi)
        for name in ("_intervals_s", "_stamp_intervals_s", "_delays_s", "_gaps", "_marks"):
            assert list(getattr(planned, name)) == list(getattr(by_row, name)), (name, hi)
        assert np.array_equal(planned._last_values, by_row._last_values, equal_nan=True)


def test_planned_rows_fill_the_deques_when_read_as_if_at_each_feed() -> None:
    from sim_real_bridge.core.features import add_planned, plan_marks, plan_rows

    cfg = FeatureConfig()
    stamps, recvs, times, values = _pathological_stream(1)
    rows = plan_rows(cfg, stamps, recvs, times)
    assert rows is not None
    marks = plan_marks(cfg, values)
    lazy, eager = StreamHealth(cfg), StreamHealth(cfg)
    cuts = list(range(0, stamps.size, 13)) + [stamps.size]
    for k, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])):
        for h in (lazy, eager):
            add_planned(h, marks, lo, hi, (), (), (), values, rows)
        eager._sync()
        if k % 40 == 39:  # a clock reset forgets the stamp history, pending rows included
            lazy.reset_stamps()
            eager.reset_stamps()
        if k % 17 == 16:
            for name in ("_intervals_s", "_stamp_intervals_s", "_delays_s"):
                assert list(getattr(lazy, name)) == list(getattr(eager, name)), (name, hi)
            assert lazy.period_s == eager.period_s and lazy.delay_std_s == eager.delay_std_s


_RULES = frozenset({"burst", "warmup", "twin", "siblings"})


def _reference_flags(h: StreamHealth, t_ns: int, other_moving: bool, now_ns: int | None, twin, siblings,
                     dropout_only: bool, rules: frozenset[str] = _RULES) -> list[tuple]:
    """The detectors' rules applied in full at every query (no shortcut), as (name, active,
    severity, evidence); ``rules`` names the receive-clock rules of the open gap to apply."""
    from sim_real_bridge.core.features import _clip01, _jitter_stats

    cfg = h.config
    hold_ns = int(cfg.flag_hold_s * 1e9)
    period = h.period_s
    active, severity, evidence = False, 0.0, {}
    for start, end in h._gaps:
        if start - hold_ns <= t_ns <= end + hold_ns:
            if twin is not None and twin.has_gap(start - hold_ns, end + hold_ns):
                continue
            gap_s = (end - start) * 1e-9
            active, severity = True, _clip01(gap_s / (10 * cfg.dropout_periods * (period or 0.01)))
            evidence = {"gap_s": f"{gap_s:.3f}", "period_s": f"{period or 0:.4f}"}
    if period is not None and h._last_time_ns is not None:
        open_gap_s = silent_s = (t_ns - h._last_time_ns) * 1e-9
        limit_s = cfg.dropout_periods * period
        if now_ns is not None and h._last_recv_ns is not None:
            silent_s = (now_ns - h._last_recv_ns) * 1e-9
            if "burst" in rules:
                limit_s = max(limit_s, 1.2e-9 * h.burst_silence_ns(now_ns))
            if "warmup" in rules and (now_ns - h._first_recv_ns) * 1e-9 < cfg.warmup_s:
                silent_s = 0.0
            if "twin" in rules and twin is not None and twin._last_recv_ns is not None:
                if (now_ns - twin._last_recv_ns) * 1e-9 > limit_s:
                    silent_s = 0.0
            if "siblings" in rules and siblings and all(
                    s._last_recv_ns is not None and (now_ns - s._last_recv_ns) * 1e-9 > limit_s for s in siblings):
                limit_s = max(limit_s, cfg.side_silence_s)
        if min(open_gap_s, silent_s) > limit_s:
            active, severity = True, max(severity, _clip01(open_gap_s / (10 * cfg.dropout_periods * period)))
            evidence = {"gap_s": f"{open_gap_s:.3f}", "open": "true", "period_s": f"{period:.4f}"}
    out = [("dropout", active, severity, evidence)]
    if dropout_only:
        return out
    near = [(kind, value) for time_ns, kind, value in h._marks if abs(time_ns - t_ns) <= hold_ns]
    bad = [0.5 + 0.5 * value for kind, value in near if kind == "nonfinite"]
    out.append(("nonfinite", True, max(bad), {"stream": h.name}) if bad else ("nonfinite", False, 0.0, {}))
    repeat_max = max([value for kind, value in near if kind == "repeat"], default=0.0)
    if repeat_max >= cfg.frozen_samples and other_moving:
        out.append(("frozen", True, _clip01(repeat_max / (4 * cfg.frozen_samples)),
                    {"identical_samples": str(int(repeat_max))}))
    else:
        out.append(("frozen", False, 0.0, {}))
    jitter = ("stamp_jitter", False, 0.0, {})
    iv = h._stamp_intervals_s
    if len(iv) >= cfg.jitter_window // 4 and period is not None:
        _, mad, backwards = _jitter_stats(iv)
        ratio = mad / period
        if ratio > cfg.jitter_mad_ratio or backwards > 0.05 * len(iv):
            jitter = ("stamp_jitter", True, _clip01(max(ratio / (4 * cfg.jitter_mad_ratio), backwards / len(iv))),
                      {"interval_mad_over_period": f"{ratio:.3f}",
                       "delay_std_s": f"{float(np.std(np.asarray(h._delays_s))):.4f}",
                       "backwards_stamps": str(backwards)})
    out.append(jitter)
    saturated = other_moving and any(kind == "saturation" for kind, _ in near)
    out.append(("saturation", saturated, 1.0 if saturated else 0.0, {}))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_flags_equal_the_rules_applied_in_full_per_message_and_planned(seed: int) -> None:
    from sim_real_bridge.core.features import add_planned, plan_jitter, plan_marks, plan_rows

    cfg = FeatureConfig(warmup_s=0.5, side_silence_s=0.4)
    stamps, recvs, times, values = _pathological_stream(seed)
    values[500:530] = np.nan  # nonfinite
    values[1500:1560] = values[1500]  # repeats: frozen
    values[2000:2060, 0] = 7.5  # one component pinned: saturation
    stamps[3600:3800:2] -= 1_500_000  # stamps jitter
    # The twin falls silent inside the stream's dropout, the sibling after it.
    twin_recvs = recvs.copy()
    twin_recvs[850:1000] = twin_recvs[1000]
    sib_recvs = recvs.copy()
    sib_recvs[1000:1400] = sib_recvs[1400]
    row, planned = StreamHealth(cfg, "real/joint_states"), StreamHealth(cfg, "real/joint_states")
    twin, sibling = StreamHealth(cfg, "sim/joint_states"), StreamHealth(cfg, "real/wrench")
    grid = np.arange(int(recvs[0]), int(recvs[-1]) + 2 * 10**9, 20_000_000)
    rows = plan_rows(cfg, stamps, recvs, times)
    assert rows is not None
    marks = plan_marks(cfg, values)
    plan_jitter(planned, stamps, np.searchsorted(recvs, grid, side="right"))
    lists = (stamps.tolist(), recvs.tolist(), times.tolist())
    fed = {id(row): 0, id(twin): 0, id(sibling): 0}
    queries = []
    for k, now in enumerate(grid.tolist()):
        for h, r in ((row, recvs), (twin, twin_recvs), (sibling, sib_recvs)):
            upto = int(np.searchsorted(r, now, side="right"))
            for i in range(fed[id(h)], upto):
                h.add(int(stamps[i]), int(r[i]), int(times[i]), values[i])
            if h is row:
                add_planned(planned, marks, fed[id(h)], upto, *lists, values, rows)
            fed[id(h)] = upto
        if not row.sample_count:
            continue
        t = now - 60_000_000 * (k % 3)
        args = (k % 5 != 0, now if k % 7 else None, twin if k % 4 else None, [sibling] if k % 6 else [], k % 8 == 0)
        want = _reference_flags(row, t, *args)
        for h in (row, planned):
            got = [(f.name, f.active, f.severity, dict(f.evidence)) for f in h.flags(t, *args)]
            assert got == want, (k, t)
        queries.append((t, args, want))
    assert {f[0] for _, _, want in queries for f in want if f[1]} == {
        "dropout", "nonfinite", "frozen", "stamp_jitter", "saturation"}
    # Each receive-clock rule decides some verdicts here: a shortcut that skipped one would fail above.
    for rule in _RULES:
        assert any(_reference_flags(row, t, *args, rules=_RULES - {rule})[0] != want[0] for t, args, want in queries
                   if args[1] is not None), rule


def test_marks_out_of_time_order_are_all_scanned() -> None:
    cfg = FeatureConfig(flag_hold_s=0.02)
    h = StreamHealth(cfg, "real/joint_states")
    rng = np.random.default_rng(4)
    times = []
    for k in range(1500):
        t = k * PERIOD - (60 * MS if k % 50 == 7 else 0)  # some samples mapped 60 ms back
        v = np.array([np.nan if k % 9 == 0 or k % 50 == 7 else 0.1 * k, 1.0 if 600 <= k < 700 else rng.normal()])
        h.add(k * PERIOD, k * PERIOD + MS, t, v)
        times.append(t)
        if k == 20:
            assert not h._marks_sorted
        if k % 5 == 0:
            for q in (t, t - 30 * MS, t - 61 * MS, t + 5 * MS):
                got = [(f.name, f.active, f.severity, dict(f.evidence)) for f in h.flags(q, now_ns=t + MS)]
                assert got == _reference_flags(h, q, True, t + MS, None, (), False), (k, q)
    assert any(a > b for a, b in zip(times, times[1:]))
    h.add(10**12, 10**12 + MS, 10**12, np.array([1.0, 2.0]))  # the history trimmed: the marks in order again
    assert not h._marks and h._marks_sorted


def test_planned_rows_refuse_a_tracker_fed_outside_the_plan() -> None:
    from sim_real_bridge.core.features import add_planned, plan_marks, plan_rows

    cfg = FeatureConfig()
    stamps, recvs, times, values = _pathological_stream(1)
    rows = plan_rows(cfg, stamps, recvs, times)
    assert rows is not None
    health = StreamHealth(cfg, "real/joint_states")
    health.add(int(stamps[0]), int(recvs[0]), int(times[0]), values[0])
    with pytest.raises(ConfigError, match=r"planned rows of stream 'real/joint_states' fed from row 0, "
                                          r"but its tracker holds 1 samples: it was fed outside the plan"):
        add_planned(health, plan_marks(cfg, values), 0, 10, (), (), (), values, rows)


@pytest.mark.parametrize("seed", [1, 2])
def test_flags_skip_the_dropout_rules_only_where_they_raise_nothing(seed: int) -> None:
    stamps, recvs, times, values = _pathological_stream(seed)
    cfg = FeatureConfig(history_s=30.0)  # every gap kept: their ends must rise
    health = StreamHealth(cfg)
    twin = StreamHealth(cfg)
    for i in range(stamps.size):
        health.add(int(stamps[i]), int(recvs[i]), int(times[i]), values[i])
        if i < 2000:  # the twin stops half-way: later silences are the stream's own
            twin.add(int(stamps[i]), int(recvs[i]), int(times[i]), values[i])
        if i % 7:
            continue
        ends = [end for _, end in health._gaps]
        assert ends == sorted(set(ends))
        for dt_ns in (0, 50 * MS, 99 * MS, 100 * MS, 101 * MS, 400 * MS, 2_000 * MS):
            t = int(times[i]) + dt_ns
            now = int(recvs[i]) + dt_ns
            expected = health._dropout(t, health._hold_ns, health.period_s, now, twin, (twin,))
            assert list(health.flags(t, now_ns=now, twin=twin, siblings=(twin,), dropout_only=True)) == [expected]
    assert health._gaps


def test_unique_equals_numpy_on_sorted_and_unsorted_cuts() -> None:
    from sim_real_bridge.core.features import _unique

    rng = np.random.default_rng(3)
    for values in (np.zeros(0, dtype=np.int64), np.array([5]), np.array([-1, -1, 0, 3, 3, 9]),
                   np.sort(rng.integers(-2, 50, 200)), rng.integers(-2, 50, 200)):
        assert np.array_equal(_unique(values), np.unique(values))
