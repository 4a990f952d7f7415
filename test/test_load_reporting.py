"""A degraded run says so: the demo's closing lines and the report mark its scores as
not representative, with when and how (lag, gaps, slow robots)."""

from __future__ import annotations

from types import SimpleNamespace

from sim_real_bridge.offline.report import render_report
from sim_real_bridge.offline.report_data import RunReportData
from sim_real_bridge.ros.demo_session import degradation

LOAD = {"max_lag_s": 3.2, "behind_s": 6.0, "behind_share": 0.2, "degraded": True,
        "behind_episodes": [{"start_s": 4.0, "end_s": 10.0, "max_lag_s": 3.2}],
        "dropped_grid_times": 60, "dropped_s": 1.2, "gaps": [{"start_s": 6.0, "end_s": 7.18, "grid_times": 60}]}
KEPT_UP = {"max_lag_s": 0.12, "behind_s": 0.0, "behind_share": 0.0, "degraded": False, "behind_episodes": [],
           "dropped_grid_times": 0, "dropped_s": 0.0, "gaps": []}


def test_a_run_behind_with_a_gap_and_a_slow_robot_is_degraded_with_each_reason() -> None:
    result = degradation(LOAD, {"sim_robot: simulation": 0.72, "reality_standin: simulation": 0.99})
    assert result["degraded"] is True
    lag, gap, slow = result["reasons"]
    assert "3.20 s behind" in lag and "4.0 to 10.0 s" in lag
    assert "1.20 s of backlog dropped" in gap and "6.0 to 7.2 s" in gap
    assert "sim_robot: simulation 0.72" in slow and "reality_standin" not in slow
    assert result["slow_nodes"] == {"sim_robot: simulation": 0.72}


def test_a_run_behind_many_times_says_how_many_spans_are_not_listed() -> None:
    episodes = [{"start_s": float(k), "end_s": k + 0.5, "max_lag_s": 0.8} for k in range(8)]
    lag, = degradation({**KEPT_UP, "max_lag_s": 0.8, "behind_episodes": episodes}, {})["reasons"]
    assert "4.0 to 4.5 s and 3 more" in lag and "5.0 to 5.5 s" not in lag


def test_a_run_that_kept_up_is_not_degraded() -> None:
    assert degradation(KEPT_UP, {"sim_robot: simulation": 1.0}) == {"degraded": False, "reasons": [], "slow_nodes": {}}


def test_the_report_marks_a_degraded_run_and_only_that() -> None:
    degraded = RunReportData(name="r", duration_s=20.0, joint_names=["a"], load=LOAD)
    line = degraded.degradation()
    assert line is not None and "3.20 s behind" in line and "1.20 s dropped" in line
    assert "not representative" in render_report(degraded)
    assert "not representative" not in render_report(RunReportData(name="r", duration_s=20.0, joint_names=["a"],
                                                                   load=KEPT_UP))


def test_the_report_gives_each_robots_realtime_factor_and_a_slow_one_alone_degrades() -> None:
    speeds = {**KEPT_UP, "degraded": True, "realtime_factor_by_side": {"sim": 0.62, "real": 1.0},
              "slow_sides": {"sim": 0.62}}
    line = RunReportData(name="r", duration_s=20.0, joint_names=["a"], load=speeds).degradation()
    assert line is not None and "realtime factor sim 0.62, real 1.00 (slower than real time)" in line
    assert "behind" not in line  # it kept up: only the slow robot is said
    line = RunReportData(name="r", duration_s=20.0, joint_names=["a"],
                         load={**LOAD, "realtime_factor_by_side": {"sim": 1.0, "real": 1.0}}).degradation()
    assert "3.20 s behind" in line and "realtime factor sim 1.00, real 1.00" in line


def test_replay_reads_each_sides_realtime_factor_from_its_stamps_over_log_time() -> None:
    import numpy as np

    from sim_real_bridge.offline.replay.job import _with_robot_speeds
    from sim_real_bridge.offline.replay_engine import JointStream

    def stream(side: str, stamp_step_ns: int) -> JointStream:
        recv = 10**18 + 2_000_000 * np.arange(500, dtype=np.int64)  # 1 s of log time
        stamp = 10**18 + stamp_step_ns * np.arange(500, dtype=np.int64)
        empty = np.zeros((500, 1))
        return JointStream(side, recv, stamp, ("j",), empty, empty, empty)

    half_speed_sim = SimpleNamespace(streams=[stream("sim", 1_000_000), stream("real", 2_000_000)])
    load = _with_robot_speeds(KEPT_UP, half_speed_sim)
    assert load["realtime_factor_by_side"] == {"sim": 0.5, "real": 1.0}
    assert load["slow_sides"] == {"sim": 0.5} and load["degraded"] is True
    both_real_time = SimpleNamespace(streams=[stream("sim", 2_000_000), stream("real", 2_000_000)])
    assert _with_robot_speeds(KEPT_UP, both_real_time)["degraded"] is False
