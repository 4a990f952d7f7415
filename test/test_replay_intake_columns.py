"""Replay's intake checks on whole columns: the same verdicts as the per-message intake.

The column checks find non-finite rows through row sums (a NaN or an infinity makes
the sum non-finite) and recheck only those rows, and keep refusal reasons as small
codes; these tests hold them to the plain per-row forms, overflowing sums and
absent (all-NaN) velocity and effort arrays included, and the column path's problem
counts to the row-by-row path's with every refusal reason the intake knows.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.core import intake, validation
from sim_real_bridge.core.engine import DivergenceEngine
from sim_real_bridge.offline import replay_engine as replay
from sim_real_bridge.offline.replay_engine import JointStream, PoseStream, WrenchStream, replay_columns

NS = 1_000_000_000
T0 = 1_700_000_000 * NS
NAMES = tuple(f"joint{i}" for i in range(1, 4))


def _rowwise_non_finite(*columns: np.ndarray) -> np.ndarray:
    bad = np.zeros(columns[0].shape[0], dtype=bool)
    for col in columns:
        if col.size:
            bad |= ~np.isfinite(col.reshape(col.shape[0], -1)).all(axis=1)
    return bad


def _messy(rng: np.random.Generator, n: int, width: int) -> np.ndarray:
    """Rows with NaN, infinities of both signs, and finite values whose sum overflows."""
    values = rng.normal(size=(n, width))
    for value, share in ((np.nan, 0.05), (np.inf, 0.03), (-np.inf, 0.03), (1.7e308, 0.05)):
        values[rng.random((n, width)) < share] = value
    values[rng.random(n) < 0.05] = np.nan  # whole rows absent
    return values


@pytest.mark.parametrize("seed", range(5))
def test_non_finite_rows_equal_the_per_row_check(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = _messy(rng, 500, 3), _messy(rng, 500, 4)
    assert np.array_equal(replay._non_finite(a, b), _rowwise_non_finite(a, b))
    assert np.array_equal(replay._non_finite(a, np.zeros((500, 0))), _rowwise_non_finite(a))
    overflow = np.full((4, 3), 1.7e308)  # every sum overflows, every value finite
    assert not replay._non_finite(overflow).any()


@pytest.mark.parametrize("seed", range(5))
def test_joint_rows_ignore_absent_velocity_and_effort_as_the_intake(seed: int) -> None:
    rng = np.random.default_rng(seed)
    q, qd, eff = _messy(rng, 400, 3), _messy(rng, 400, 3), _messy(rng, 400, 3)
    qd[::3] = np.nan  # velocity not published in these messages
    values = np.concatenate([q, qd, eff], axis=1)
    expected = _rowwise_non_finite(q, replay._sent(qd), replay._sent(eff))
    assert np.array_equal(replay._joint_non_finite(values, (3, 6)), expected)
    for i in range(0, 400, 7):  # the per-message rule itself
        row = validation.has_non_finite(q[i]) or any(
            validation.has_non_finite(v) for v in (qd[i], eff[i]) if not np.isnan(v).all())
        assert bool(expected[i]) == row


def _streams(n: int = 1500) -> list:
    rng = np.random.default_rng(3)
    base = T0 + np.arange(n, dtype=np.int64) * 2_000_000
    t_s = np.arange(n) * 0.002
    streams: list = []
    for side in ("sim", "real"):
        q = 0.3 * np.sin(0.8 * t_s[:, None] + np.arange(3))
        stamps = base.copy()
        recv = base + 300_000  # every stream ties with the others of its side
        force = np.tile([0.0, 0.0, -9.0], (n, 1)) + rng.normal(0, 0.05, (n, 3))
        torque = rng.normal(0, 0.01, (n, 3))
        frames: list[str] = ["tool0"] * n
        pos = np.column_stack([0.4 + 0.05 * np.sin(t_s), np.zeros(n), 0.3 * np.ones(n)])
        quat = np.tile([1.0, 0.0, 0.0, 0.0], (n, 1))
        if side == "real" and n > 800:
            q[100:110, 1] = np.nan
            q[120, 0] = np.inf
            stamps[200:203] = 0
            stamps[300:302] += 10 * NS  # from the future
            force[400:405] = np.nan
            frames[500:504] = ["base"] * 4
            pos[700:702] = np.inf
        with np.errstate(invalid="ignore"):  # sin(inf): a NaN effort on the row with an infinite position
            effort = 2.0 * np.sin(q)
        streams.append(JointStream(side, recv, stamps, NAMES, q, np.zeros_like(q), effort))
        streams.append(WrenchStream(side, recv.copy(), stamps, frames, force, torque))
        streams.append(PoseStream(side, "ee_pose", recv.copy(), stamps, ["world"] * n, pos, quat))
    return streams


def test_column_path_counts_every_refusal_and_flag_as_the_row_by_row_path() -> None:
    config = intake.IntakeConfig(expected_frames={"wrench": "tool0", "pose": "world"})
    streams = _streams()
    columns = replay_columns(streams, intake_config=config, column_ingest=True)
    rows = replay_columns(streams, intake_config=config, column_ingest=False)
    assert columns.engine.columns_planned and not rows.engine.columns_planned
    assert columns.problems == rows.problems
    assert columns.problems["real/joint_states"] == {
        "non_finite": 11, "zero_stamp": 3, "future_stamp": 2}
    assert columns.problems["real/wrench"]["frame_mismatch"] == 4
    assert columns.problems["real/ee_pose"]["non_finite"] == 2
    assert list(columns.problems["real/wrench"]) == list(rows.problems["real/wrench"])
    a, b = columns.engine.run_summary(), rows.engine.run_summary()
    assert a["counts"]["rejected"] == b["counts"]["rejected"]


def test_rows_received_at_one_time_keep_stream_then_row_order() -> None:
    streams = _streams(50)
    seen: list = []

    def plan_columns(self: DivergenceEngine, columns: list) -> bool:
        seen.extend(columns)
        return False

    recv = [np.asarray(s.recv_ns, dtype=np.int64) for s in streams]
    recv_all = np.concatenate(recv)
    ids = np.concatenate([np.full(r.size, k) for k, r in enumerate(recv)])
    rows = np.concatenate([np.arange(r.size) for r in recv])
    expected = np.empty(recv_all.size, dtype=np.int64)
    expected[np.lexsort((rows, ids, recv_all))] = np.arange(recv_all.size)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DivergenceEngine, "plan_columns", plan_columns)
        replay_columns(streams)
    assert np.array_equal(np.concatenate([np.asarray(c.seq) for c in seen]), expected)


def test_report_series_hold_every_record_at_the_engine_s_seconds() -> None:
    from sim_real_bridge.offline.replay import _report_data

    outcome = replay_columns(_streams())
    engine = outcome.engine
    summary = {"events": [], "duration_s": 3.0}
    data = _report_data("run", summary, outcome, engine.run_summary(), {}, [], None)
    joints = [r for _, out in outcome.ticks for r in out.joints]
    contacts = [r for _, out in outcome.ticks for r in out.contacts]
    poses = [r for _, out in outcome.ticks for r in out.poses]
    assert joints and contacts and poses
    for series, records in ((data.joints, joints), (data.contact, contacts), (data.pose, poses)):
        assert series.t_s.tolist() == [engine.to_seconds(r.stamp_ns) for r in records]
    assert np.array_equal(data.timing.latency_std_s, [r.latency_std_s for r in joints], equal_nan=True)
    assert np.array_equal(data.joints.effort_nm, [r.effort_residual for r in joints], equal_nan=True)
    assert data.contact.force_residual_n.tolist() == [r.force_residual_norm_n for r in contacts]
    assert np.array_equal(data.pose.orientation_error_rad, [r.ee_orientation_error_rad for r in poses], equal_nan=True)


def test_side_by_side_is_concatenate_along_columns() -> None:
    from sim_real_bridge.offline.replay_engine import _side_by_side

    rng = np.random.default_rng(5)
    for rows in (0, 1, 1000):
        blocks = [rng.normal(size=(rows, 7)), np.full((rows, 7), np.nan), rng.normal(size=(rows, 3))[:, ::-1]]
        want = np.concatenate(blocks, axis=1)
        got = _side_by_side(blocks)
        assert got.dtype == want.dtype and got.flags.c_contiguous
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
    mixed = [np.ones((4, 2), dtype=np.float32), np.arange(8).reshape(4, 2)]
    assert _side_by_side(mixed).dtype == np.concatenate(mixed, axis=1).dtype
    with pytest.raises(ValueError):
        _side_by_side([np.zeros((3, 2)), np.zeros((4, 2))])
