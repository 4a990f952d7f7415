"""StreamHealth: the detectors of a stream wrong in itself, causal and gated by its twin."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.core.health import FeatureConfig, StreamFlags, StreamHealth
from sim_real_bridge.core.health_windows import latched, per_window, window_sum
from sim_real_bridge.errors import ConfigError

MS = 1_000_000
S = 1_000_000_000
PERIOD_NS = 10 * MS  # a 100 Hz stream
DELAY_NS = 2 * MS  # receive time = stamp + this


def _moving_values(n: int, width: int = 2) -> np.ndarray:
    """(n, width) values that change every sample (a moving arm)."""
    t = np.arange(n)[:, None] * PERIOD_NS * 1e-9
    return 0.3 * np.sin(2 * np.pi * 0.5 * t + np.arange(width)) + 0.01 * np.arange(width)


def _health(values: np.ndarray, keep: np.ndarray | None = None, batch: int = 25,
            config: FeatureConfig | None = None, name: str = "real/wrench",
            judges_saturation: bool = True) -> StreamHealth:
    """A StreamHealth fed the rows of ``values`` (sample k stamped k periods after 1 s), in batches."""
    health = StreamHealth(config or FeatureConfig(), name, judges_saturation=judges_saturation)
    stamp = 1 * S + PERIOD_NS * np.arange(len(values), dtype=np.int64)
    rows = np.arange(len(values)) if keep is None else np.flatnonzero(keep)
    for lo in range(0, len(rows), batch):
        r = rows[lo:lo + batch]
        health.add(stamp[r], stamp[r] + DELAY_NS, stamp[r], values[r])
    return health


def _grid(start_s: float, end_s: float) -> np.ndarray:
    """Analysis times every 20 ms on the stream's time base (stamps start at 1 s)."""
    return (1 * S + np.arange(int(start_s * 50), int(end_s * 50)) * 20 * MS).astype(np.int64)


def _late(t: np.ndarray) -> np.ndarray:
    """Decision times long after t (everything had arrived)."""
    return t + 100 * S


def _active_times_s(flags: StreamFlags, detector: str, t: np.ndarray) -> np.ndarray:
    return (t[flags.active[detector]] - 1 * S) * 1e-9


def test_a_clean_moving_stream_raises_nothing() -> None:
    health = _health(_moving_values(800))
    t = _grid(0.5, 7.5)
    flags = health.flags(t, t + 5 * MS, np.ones((len(t), 2), dtype=bool))
    assert set(flags.active) == {"dropout", "sample_loss", "nonfinite", "frozen", "saturation", "stamp_jitter"}
    assert not flags.any_active().any()
    assert health.sample_count == 800
    assert health.stats_at(t[-1:])[0, 0] == pytest.approx(0.01)  # the period learned from the stamps


def test_non_finite_samples_flag_while_they_last_plus_the_hold() -> None:
    values = _moving_values(600)
    values[300:311, 1] = np.nan  # 3.00 .. 3.10 s
    health = _health(values)
    t = _grid(1.0, 5.0)
    flags = health.flags(t, _late(t), np.ones((len(t), 2), dtype=bool))
    active = _active_times_s(flags, "nonfinite", t)
    assert active.min() == pytest.approx(3.0) and active.max() == pytest.approx(3.2)  # hold 0.1 s
    assert np.all(flags.severity["nonfinite"][flags.active["nonfinite"]] > 0.5)
    assert flags.any_active({"nonfinite"}).tolist() == flags.active["nonfinite"].tolist()
    assert not flags.any_active({"frozen", "saturation"}).any()  # only the detectors asked for


@pytest.mark.parametrize("twin_moves", [True, False])
def test_a_frozen_stream_flags_only_while_the_twin_moves(twin_moves: bool) -> None:
    values = _moving_values(600)
    values[300:330] = values[300]  # 30 bit-identical samples from 3.0 s
    health = _health(values)
    t = _grid(1.0, 5.0)
    flags = health.flags(t, _late(t), np.full((len(t), 2), twin_moves))
    active = _active_times_s(flags, "frozen", t)
    if not twin_moves:
        assert active.size == 0  # a still robot holds its values
        return
    # The 8th identical sample (3.07 s) starts it; it lasts until the hold after the last.
    assert active.min() == pytest.approx(3.08) and active.max() == pytest.approx(3.38)
    k = int(np.flatnonzero(flags.active["frozen"])[-1])
    assert int(flags.evidence("frozen", k)["identical_samples"]) >= 25


def test_a_frozen_stream_seen_while_its_twin_moved_stays_frozen_while_it_repeats() -> None:
    values = _moving_values(900)
    values[300:600] = values[300]  # 300 identical samples from 3.0 s
    health = _health(values)
    t = _grid(1.0, 8.0)
    twin = np.zeros((len(t), 2), dtype=bool)
    twin[(t >= 1 * S + 3_200 * MS) & (t < 1 * S + 3_500 * MS)] = True  # the twin moves at 3.2-3.5 s only
    # (in batches, as the engine asks: the latch carries from one to the next)
    active = np.concatenate([health.flags(t[lo:lo + 40], _late(t[lo:lo + 40]), twin[lo:lo + 40]).active["frozen"]
                             for lo in range(0, len(t), 40)])
    on = (t[active] - 1 * S) * 1e-9
    # from the twin's first move to the hold after the last identical sample (5.99 s)
    assert on.min() == pytest.approx(3.2) and on.max() == pytest.approx(6.08)
    assert np.all(np.diff(on) < 0.021)  # one run, no break
    values[700:720] = values[700]  # a second run, its twin still: a still robot holds its values
    health = _health(values)
    assert not health.flags(t, _late(t), twin).active["frozen"][t >= 1 * S + 6_500 * MS].any()


def test_latched_holds_from_a_gate_while_the_run_goes_on() -> None:
    gate = np.array([0, 1, 0, 0, 0, 0, 1, 0], dtype=bool)
    goes_on = np.array([1, 1, 1, 0, 1, 1, 1, 1], dtype=bool)
    assert latched(gate, goes_on, False).astype(int).tolist() == [0, 1, 1, 0, 0, 0, 1, 1]
    assert latched(np.zeros(8, dtype=bool), goes_on, True).astype(int).tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    assert latched(np.zeros(0, dtype=bool), np.zeros(0, dtype=bool), True).tolist() == []


def test_fewer_repeats_than_frozen_samples_are_not_frozen() -> None:
    values = _moving_values(600)
    values[300:306] = values[300]  # 6 identical samples (frozen_samples is 8)
    health = _health(values)
    t = _grid(1.0, 5.0)
    assert not health.flags(t, _late(t), np.ones((len(t), 2), dtype=bool)).active["frozen"].any()


def _pinned() -> StreamHealth:
    values = _moving_values(700)
    values[300:400, 0] = 0.7  # component 0 pinned at a non-zero value for 1 s, component 1 moves
    return _health(values)


def test_a_component_pinned_while_its_twin_moves_is_saturation() -> None:
    health = _pinned()
    t = _grid(1.0, 6.0)
    flags = health.flags(t, _late(t), np.ones((len(t), 2), dtype=bool))
    active = _active_times_s(flags, "saturation", t)
    # Marked once the value repeated saturation_samples (25) times: the 26th pinned sample
    # (3.25 s), to the hold after the last (3.99 + 0.1 s).
    assert active.min() == pytest.approx(3.26) and active.max() == pytest.approx(4.08)
    assert not flags.active["frozen"].any()  # the other component moved


def test_an_idle_joint_held_at_a_non_zero_value_whose_twin_is_still_is_not_saturation() -> None:
    health = _pinned()
    t = _grid(1.0, 6.0)
    moving = np.ones((len(t), 2), dtype=bool)
    moving[:, 0] = False  # the sim twin of the pinned joint is still too
    assert not health.flags(t, _late(t), moving).active["saturation"].any()


def test_a_component_held_at_zero_is_not_saturation() -> None:
    values = _moving_values(700)
    values[300:400, 0] = 0.0
    health = _health(values)
    t = _grid(1.0, 6.0)
    assert not health.flags(t, _late(t), np.ones((len(t), 2), dtype=bool)).active["saturation"].any()


def _gap_health(name: str = "real/joint_states") -> StreamHealth:
    keep = np.ones(800, dtype=bool)
    keep[300:310] = False  # 10 periods lost from 3.0 s: samples 2.99 -> 3.10 s
    return _health(_moving_values(800), keep, name=name)


def test_a_gap_of_ten_periods_is_a_dropout_once_it_closed() -> None:
    health = _gap_health()
    t = _grid(1.0, 7.0)
    flags = health.flags(t, _late(t), None)
    active = _active_times_s(flags, "dropout", t)
    assert active.min() == pytest.approx(3.0) and active.max() == pytest.approx(3.2)  # gap + hold
    k = int(np.flatnonzero(flags.active["dropout"])[0])
    evidence = flags.evidence("dropout", k)
    assert float(evidence["gap_s"]) == pytest.approx(0.11) and float(evidence["period_s"]) == pytest.approx(0.01)
    assert "open" not in evidence


def test_a_gap_is_not_counted_again_as_samples_lost_after_it() -> None:
    # its missing samples are the gap's (the dropout detector's), not a share lost at random
    keep = np.ones(1000, dtype=bool)
    keep[400:450] = False  # half a second silent
    flags = _health(_moving_values(1000), keep).flags(t := _grid(1.0, 9.5), _late(t), None)
    assert flags.active["dropout"].any() and not flags.active["sample_loss"].any()


def test_a_gap_the_twin_shares_is_not_a_dropout() -> None:
    health, twin = _gap_health(), _gap_health("sim/joint_states")
    t = _grid(1.0, 7.0)
    assert not health.flags(t, _late(t), None, twin=twin).active["dropout"].any()
    # A twin without that gap does not hide it.
    clean_twin = _health(_moving_values(800), name="sim/joint_states")
    assert health.flags(t, _late(t), None, twin=clean_twin).active["dropout"].any()


def test_a_gap_is_not_judged_before_the_decision_could_know_it() -> None:
    health = _gap_health()
    t = np.array([1 * S + 3_020 * MS])  # in the gap
    # 20 ms after the last sample before the gap: nothing to tell yet (the limit is 50 ms).
    early = health.flags(t, np.array([1 * S + 2_990 * MS + DELAY_NS + 20 * MS]), None)
    assert not early.active["dropout"].any()
    assert health.flags(t, _late(t), None).active["dropout"].all()


def test_a_stream_gone_silent_is_an_open_dropout_after_warmup_only() -> None:
    health = _health(_moving_values(500))  # samples 1.00 .. 5.99 s, then nothing
    last_recv = 1 * S + 499 * PERIOD_NS + DELAY_NS
    t = np.array([last_recv + 300 * MS])
    flags = health.flags(t, t, None)
    assert flags.active["dropout"].all()
    assert flags.evidence("dropout", 0)["open"] == "true"
    # The other side silent too: the monitor lost both, not this sensor.
    silent_twin = _health(_moving_values(500), name="sim/joint_states")
    assert not health.flags(t, t, None, twin=silent_twin).active["dropout"].any()
    # Silent within warmup_s of the stream's first sample: not judged.
    young = _health(_moving_values(100))  # 1.00 .. 1.99 s
    t = np.array([1 * S + 99 * PERIOD_NS + DELAY_NS + 300 * MS])
    assert not young.flags(t, t, None).active["dropout"].any()


def test_a_stream_delivered_in_bursts_is_late_not_lost() -> None:
    config = FeatureConfig()
    health = StreamHealth(config, "real/wrench")
    stamp = 1 * S + PERIOD_NS * np.arange(900, dtype=np.int64)
    values = _moving_values(900)
    # Up to 6 s delivered as sampled; after that held 400 ms, then drained at once.
    live = stamp < 6 * S
    health.add(stamp[live], stamp[live] + DELAY_NS, stamp[live], values[live])
    held = np.flatnonzero((stamp >= 6 * S) & (stamp < 6 * S + 400 * MS))
    health.add(stamp[held], np.full(len(held), 6 * S + 400 * MS + DELAY_NS), stamp[held], values[held])
    now = np.array([7 * S])
    assert health.burst_silence_s(now)[0] == pytest.approx(0.4, rel=0.1)
    # A later silence shorter than 1.2 times that burst is not (yet) a dropout.
    after = 6 * S + 400 * MS + DELAY_NS + 300 * MS
    assert not health.flags(np.array([after]), np.array([after]), None).active["dropout"].any()


def _stamped(std_ns: np.ndarray, seed: int = 2) -> StreamHealth:
    """A 100 Hz stream whose stamps carry Gaussian noise of std_ns (per sample), added in
    batches of 20 as they arrive."""
    n = len(std_ns)
    nominal = 1 * S + PERIOD_NS * np.arange(n, dtype=np.int64)
    stamp = nominal + (np.random.default_rng(seed).normal(0, 1, n) * std_ns).astype(np.int64)
    health = StreamHealth(FeatureConfig(), "real/joint_states")
    recv = np.maximum.accumulate(nominal + 6 * MS)
    for lo in range(0, n, 20):
        sl = slice(lo, lo + 20)
        health.add(stamp[sl], recv[sl], stamp[sl], _moving_values(n)[sl])
    return health


def test_stamps_that_start_to_jitter_are_stamp_jitter() -> None:
    std_ns = np.where(np.arange(1100) < 500, 50_000, 2 * MS)  # 0.05 ms, then 2 ms from 6 s
    health = _stamped(std_ns)
    t = _grid(0.0, 11.0)
    flags = health.flags(t, t + 50 * MS, None)  # decided as the live monitor does
    active = flags.active["stamp_jitter"]
    stream_s = (t - 1 * S) * 1e-9
    assert not active[stream_s < 5.0].any()
    assert active[(stream_s >= 6.5) & (stream_s < 10.5)].all()
    k = int(np.flatnonzero(active)[-1])
    evidence = flags.evidence("stamp_jitter", k)
    assert float(evidence["quietest_mad_s"]) < 1e-4 and float(evidence["interval_mad_over_period"]) > 0.1


def test_stamps_that_jitter_by_nature_are_not_stamp_jitter() -> None:
    # a driver stamping on receipt: 1 ms of jitter on every stamp from the start
    for std_ns in (1 * MS, 50_000):
        health = _stamped(np.full(600, std_ns))
        t = _grid(1.0, 5.5)
        assert not health.flags(t, t + 50 * MS, None).active["stamp_jitter"].any()


def test_stamps_going_backwards_are_stamp_jitter_from_the_start() -> None:
    health = _stamped(np.full(600, 8 * MS))  # intervals of 10 +- 11 ms: many go backwards
    t = _grid(3.0, 5.5)
    flags = health.flags(t, _late(t), None)
    assert flags.active["stamp_jitter"].all()
    assert int(flags.evidence("stamp_jitter", 0)["backwards_stamps"]) > 0


def _lossy(probability: float, n: int = 1000, from_s: float = 4.0, seed: int = 3) -> np.ndarray:
    """Which of n samples (100 Hz) arrive when each from from_s on is lost with ``probability``."""
    keep = np.ones(n, dtype=bool)
    start = int(from_s * 100)
    keep[start:] = np.random.default_rng(seed).random(n - start) >= probability
    return keep


def test_a_share_of_samples_lost_is_sample_loss_not_jitter() -> None:
    # 30% of samples lost at random: gaps of five periods are rare, and the stamp
    # intervals spread like jitter, but they are whole periods: the samples are missing
    keep = _lossy(0.3)
    health = _health(_moving_values(1000), keep)
    t = _grid(1.0, 9.5)
    flags = health.flags(t, t + 50 * MS, None)
    stream_s = (t - 1 * S) * 1e-9
    loss = flags.active["sample_loss"]
    assert not loss[stream_s < 4.0].any()
    assert loss[stream_s >= 5.0].mean() > 0.9
    assert not flags.active["stamp_jitter"].any()
    k = int(np.flatnonzero(loss)[-1])
    assert float(flags.evidence("sample_loss", k)["lost_share"]) == pytest.approx(0.3, abs=0.12)


def test_most_samples_lost_is_sample_loss_though_the_median_interval_grew() -> None:
    keep = _lossy(0.73)
    flags = _health(_moving_values(1000), keep).flags(t := _grid(1.0, 9.5), t + 50 * MS, None)
    stream_s = (t - 1 * S) * 1e-9
    assert flags.active["sample_loss"][stream_s >= 5.0].mean() > 0.9
    assert not flags.active["stamp_jitter"].any()


def test_samples_the_twin_lost_too_or_jittered_stamps_are_no_sample_loss() -> None:
    keep = _lossy(0.3)
    t = _grid(1.0, 9.5)
    twin = _health(_moving_values(1000), _lossy(0.3, seed=4), name="sim/wrench")
    assert not _health(_moving_values(1000), keep).flags(t, _late(t), None, twin=twin).active["sample_loss"].any()
    jittered = _stamped(np.where(np.arange(1000) < 400, 50_000, 8 * MS))
    flags = jittered.flags(t, _late(t), None)
    assert not flags.active["sample_loss"].any() and flags.active["stamp_jitter"].any()


def test_intervals_that_are_not_whole_periods_are_no_sample_loss() -> None:
    # from 4 s, intervals of 10 and 15 ms in turn: a fifth fewer samples than the period
    # would bring, but none is missing (a lost sample leaves a whole number of periods)
    steps = np.where(np.arange(1000) < 400, PERIOD_NS, np.where(np.arange(1000) % 2 == 0, PERIOD_NS, 15 * MS))
    stamp = 1 * S + np.concatenate(([0], np.cumsum(steps[1:]))).astype(np.int64)
    health = StreamHealth(FeatureConfig(), "real/wrench", judges_saturation=True)
    values = _moving_values(1000)
    for lo in range(0, 1000, 25):
        sl = slice(lo, lo + 25)
        health.add(stamp[sl], stamp[sl] + DELAY_NS, stamp[sl], values[sl])
    t = _grid(1.0, 11.0)
    flags = health.flags(t, _late(t), None)
    assert not flags.active["sample_loss"].any() and flags.active["stamp_jitter"].any()


def test_a_stream_that_slows_down_for_good_is_not_losing_samples() -> None:
    # every second sample from 4 s on: after the window has the new period, it is the stream's rate
    keep = np.ones(1400, dtype=bool)
    keep[400::2] = False
    flags = _health(_moving_values(1400), keep).flags(t := _grid(1.0, 13.5), _late(t), None)
    stream_s = (t - 1 * S) * 1e-9
    assert not flags.active["sample_loss"][stream_s >= 7.0].any()


def test_the_sim_side_is_judged_for_dropout_only() -> None:
    values = _moving_values(600)
    values[300:311] = np.nan
    health = _health(values, name="sim/joint_states")
    t = _grid(1.0, 5.0)
    flags = health.flags(t, _late(t), None, dropout_only=True)
    assert set(flags.active) == {"dropout"}


def test_a_stream_not_judged_for_saturation_never_raises_it() -> None:
    # Joint encoders: a quantized encoder holds one value while its joint creeps.
    values = _moving_values(600)
    values[200:400, 1] = 0.4
    t = _grid(1.0, 5.5)
    flags = _health(values, name="real/joint_states", judges_saturation=False).flags(
        t, _late(t), np.ones((len(t), 2), dtype=bool))
    assert not flags.active["saturation"].any()
    assert _health(values).flags(t, _late(t), np.ones((len(t), 2), dtype=bool)).active["saturation"].any()


def test_feeding_one_sample_at_a_time_or_in_batches_gives_the_same_flags() -> None:
    values = _moving_values(700)
    values[200:230] = values[200]
    values[400:500, 1] = 0.4
    values[600:603, 0] = np.inf
    keep = np.ones(700, dtype=bool)
    keep[300:312] = False
    t = _grid(1.0, 7.5)
    moving = np.ones((len(t), 2), dtype=bool)
    one = _health(values, keep, batch=1).flags(t, _late(t), moving)
    many = _health(values, keep, batch=64).flags(t, _late(t), moving)
    for detector in one.active:
        np.testing.assert_array_equal(one.active[detector], many.active[detector], err_msg=detector)
    assert all(one.active[d].any() for d in ("dropout", "nonfinite", "frozen", "saturation"))


def test_trim_keeps_what_recent_queries_need() -> None:
    values = _moving_values(800)
    values[700:711] = np.nan  # 8.00 .. 8.10 s
    health = _health(values)
    health.trim(1 * S + 6 * S)
    t = _grid(6.5, 7.9)
    flags = health.flags(t, _late(t), np.ones((len(t), 2), dtype=bool))
    assert _active_times_s(flags, "nonfinite", t).min() == pytest.approx(7.0)
    assert not flags.active["dropout"].any()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("dropout_periods", 0.0, r"FeatureConfig.dropout_periods must be > 0, got 0.0"),
    ("flag_hold_s", -1.0, r"FeatureConfig.flag_hold_s must be > 0"),
    ("frozen_samples", 1, r"FeatureConfig.frozen_samples must be >= 2, got 1"),
    ("jitter_window", 0, r"FeatureConfig.jitter_window must be >= 2"),
    ("loss_window", 1, r"FeatureConfig.loss_window must be >= 2, got 1"),
    ("loss_share", 0.0, r"FeatureConfig.loss_share must be > 0"),
])
def test_invalid_thresholds_are_named(field: str, value: float, message: str) -> None:
    config = FeatureConfig(**{field: value})
    with pytest.raises(ConfigError, match=message):
        config.validate()


def test_window_sums_from_one_cumulative_sum_equal_the_sliding_windows() -> None:
    history = np.random.default_rng(7).normal(0.01, 0.002, 300)
    ends = np.array([1, 5, 49, 50, 51, 120, 300])
    expected = per_window(history, ends, 50, lambda rows: np.sum(rows, axis=1))
    np.testing.assert_allclose(window_sum(history, ends, 50), expected, rtol=1e-12)
    # columns are summed each on its own
    stacked = window_sum(np.column_stack((history, 2 * history)), ends, 50)
    np.testing.assert_allclose(stacked, np.column_stack((expected, 2 * expected)), rtol=1e-12)
