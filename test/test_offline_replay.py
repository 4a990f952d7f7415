"""sim-real-bridge replay: tiny bags built in tmp_path with rosbags, every error path."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from rosbags.highlevel import AnyReader

from sim_real_bridge.cli import main as cli_main
from sim_real_bridge.errors import ConfigError
from sim_real_bridge.offline.replay import (
    DIVERGENCE_TOPICS,
    ReplayRequest,
    RunSpec,
    discover_runs,
    read_labels,
    replay_run,
    run_replay,
)
from sim_real_bridge.offline.replay_config import ReplayConfig, load_replay_config, replay_config_from_dict
from sim_real_bridge.offline.synthetic import SyntheticRun, messages, write_synthetic_bag

RUN = SyntheticRun(duration_s=3.0, offset_rad=0.02, joint_rate_hz=200.0, wrench_rate_hz=200.0, pose_rate_hz=50.0,
                   injections=[{"category": "dynamics", "kind": "gain", "start_s": 1.0, "end_s": 2.0}],
                   scenario="tiny")


def _replay(inputs: list[Path], out: Path, **kwargs: object) -> int:
    return run_replay(ReplayRequest(inputs=inputs, out_dir=out, **kwargs))


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _analysis(summary: dict) -> dict:
    """What must not depend on how the bag was stored."""
    return {k: summary[k] for k in ("events", "truth", "timing", "residuals", "calibration", "scores", "scenario",
                                    "duration_s")}


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bags")
    out = {
        "mcap": write_synthetic_bag(root / "mcap_bag", RUN, "mcap"),
        "sqlite3": write_synthetic_bag(root / "sqlite_bag", RUN, "sqlite3"),
        "split": write_synthetic_bag(root / "split_bag", RUN, "mcap", split_at_s=1.5),
        "sim_only": write_synthetic_bag(root / "pair" / "sim_side", SyntheticRun(**{**RUN.__dict__, "sides": ("sim",)})),
        "real_only": write_synthetic_bag(root / "pair" / "real_side",
                                         SyntheticRun(**{**RUN.__dict__, "sides": ("real",), "commands": False,
                                                         "injections": []})),
    }
    return out


@pytest.fixture(scope="module")
def reference(bags: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("reference")
    assert _replay([bags["mcap"]], out) == 0
    return out, _summary(out)


# ------------------------------------------------------------------ outputs
def test_single_bag_writes_summary_mcap_and_report(reference: tuple[Path, dict]) -> None:
    out, summary = reference
    for key in ("scenario", "duration_s", "events", "truth", "timing", "residuals", "scores", "calibration"):
        assert key in summary
    assert summary["scenario"] == "tiny"
    assert summary["truth"] == [{"category": "dynamics", "kind": "gain", "start_s": 1.0, "end_s": 2.0}]
    assert 2.5 < summary["duration_s"] < 3.5
    rms = [j["rms_rad"] for j in summary["residuals"]["joints"].values()]
    assert len(rms) == 7 and all(abs(r - 0.02) < 0.005 for r in rms)
    html = (out / "report.html").read_text()
    assert "<html" in html.lower() and "tiny" in html


def test_divergence_mcap_opens_with_anyreader_and_embeds_definitions(reference: tuple[Path, dict]) -> None:
    out, summary = reference
    with AnyReader([out / "divergence.mcap"]) as reader:
        conns = {c.topic: c for c in reader.connections}
        assert set(conns) == set(DIVERGENCE_TOPICS)
        assert "position_residual_rad" in conns["/divergence/joints"].msgdef.data
        joints = [reader.deserialize(d, c.msgtype) for c, _, d in reader.messages([conns["/divergence/joints"]])]
        summaries = list(reader.messages([conns["/divergence/summary"]]))
    assert len(joints) > 100
    assert list(joints[0].name) == [f"joint{i}" for i in range(1, 8)]
    assert np.allclose(np.median([j.position_residual_rad for j in joints], axis=0), 0.02, atol=0.002)
    assert len(summaries) >= 2


@pytest.mark.parametrize("kind", ["sqlite3", "split"])
def test_sqlite3_and_split_bags_give_the_mcap_results(bags: dict[str, Path], reference: tuple[Path, dict],
                                                      tmp_path: Path, kind: str) -> None:
    assert _replay([bags[kind]], tmp_path) == 0
    assert _analysis(_summary(tmp_path)) == _analysis(reference[1])


def test_two_one_sided_bags_are_paired_into_one_run(bags: dict[str, Path], reference: tuple[Path, dict],
                                                    tmp_path: Path) -> None:
    runs, failures = discover_runs([bags["sim_only"], bags["real_only"]], ReplayConfig())
    assert failures == [] and runs == [RunSpec("sim_side+real_side", (str(bags["sim_only"]), str(bags["real_only"])))]
    assert _replay([bags["sim_only"].parent], tmp_path) == 0
    assert _analysis(_summary(tmp_path)) == _analysis(reference[1])


def test_workers_give_the_same_outputs(bags: dict[str, Path], tmp_path: Path) -> None:
    inputs = [bags["mcap"], bags["sqlite3"], bags["split"]]
    assert _replay(inputs, tmp_path / "one", workers=1) == 0
    assert _replay(inputs, tmp_path / "two", workers=2) == 0
    for name in ("mcap_bag", "sqlite_bag", "split_bag"):
        one = _summary(tmp_path / "one" / name)
        two = _summary(tmp_path / "two" / name)
        assert one == two
    rollup = _summary(tmp_path / "two")
    assert [r["name"] for r in rollup["runs"]] == ["mcap_bag", "sqlite_bag", "split_bag"]
    assert all(r["ok"] for r in rollup["runs"]) and rollup["failures"] == []
    assert (tmp_path / "two" / "report.html").is_file()


def test_rollup_has_predictivity_from_labels(bags: dict[str, Path], tmp_path: Path) -> None:
    labels = {"mcap": (True, True), "sqlite3": (True, False), "split": (False, False)}
    copies = []
    for kind, (sim_ok, real_ok) in labels.items():
        copy = tmp_path / "bags" / kind
        shutil.copytree(bags[kind], copy)
        (copy / "labels.yaml").write_text(f"sim_success: {str(sim_ok).lower()}\nreal_success: {str(real_ok).lower()}\n")
        copies.append(copy)
    assert read_labels([str(copies[0])]) == {"sim_success": True, "real_success": True}
    assert _replay([tmp_path / "bags"], tmp_path / "out") == 0
    rollup = _summary(tmp_path / "out")
    assert rollup["predictivity"]["n_runs"] == 3
    assert rollup["predictivity"]["episode"]["pearson"] == pytest.approx(0.5)
    assert "predictivity" in (tmp_path / "out" / "report.html").read_text().lower()


def test_replay_runs_without_the_cycle_collector_and_leaves_no_cycles_of_its_state(
        bags: dict[str, Path], tmp_path: Path) -> None:
    import gc

    assert gc.isenabled()
    seen: list[bool] = []
    gc.collect()
    result = replay_run(RunSpec("mcap", (str(bags["mcap"]),)), ReplayConfig(), tmp_path / "out",
                        on_progress=lambda _: seen.append(gc.isenabled()))
    assert result.ok and seen and not any(seen)
    assert gc.isenabled()
    # The run's state goes with reference counting: no cycle holds the engine.
    import weakref

    from sim_real_bridge.offline.bag_io import open_bags
    from sim_real_bridge.offline.replay import _read_streams
    from sim_real_bridge.offline.replay_engine import replay_columns

    config = ReplayConfig()
    with open_bags([bags["mcap"]]) as opened:
        streams, _ = _read_streams(opened, config, None, None, [], {})
    gc.disable()
    try:
        outcome = replay_columns(streams, config.engine_config(), config.intake, config.tick_period_s, 1.0)
        engine = weakref.ref(outcome.engine)
        del outcome
        assert engine() is None
    finally:
        gc.enable()
    failed = replay_run(RunSpec("missing", (str(tmp_path / "no_such_bag"),)), ReplayConfig(), tmp_path / "out2")
    assert not failed.ok and gc.isenabled()
    gc.disable()
    try:
        replay_run(RunSpec("mcap", (str(bags["mcap"]),)), ReplayConfig(), tmp_path / "out3")
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()


# ------------------------------------------------------------------ errors
def _error_of(bag: Path, tmp_path: Path, config: ReplayConfig | None = None) -> str:
    result = replay_run(RunSpec(bag.name, (str(bag),)), config or ReplayConfig(), tmp_path / "out")
    assert not result.ok
    return result.error or ""


def test_missing_joint_states_topic_names_bag_and_topic_and_proposes_the_pair(bags: dict[str, Path],
                                                                              tmp_path: Path) -> None:
    config = replay_config_from_dict({"real_topics": {"joint_states": "/real/arm_states"}})
    error = _error_of(bags["mcap"], tmp_path, config)
    assert error.startswith("topic /real/arm_states (real joint_states) not found in bag(s) ")
    assert "mcap_bag" in error and "\n" not in error
    assert "--sim /sim/joint_states --real /real/joint_states" in error
    assert "sim_topics.joint_states: /sim/joint_states and real_topics.joint_states: /real/joint_states" in error


def test_missing_optional_topic_named_in_the_config_is_a_warning_and_a_skipped_analysis(
        bags: dict[str, Path], tmp_path: Path) -> None:
    config = replay_config_from_dict({"real_topics": {"wrench": "/real/ft_sensor"}})
    result = replay_run(RunSpec("mcap_bag", (str(bags["mcap"]),)), config, tmp_path / "out")
    assert result.ok, result.error
    summary = _summary(tmp_path / "out")
    assert any("/real/ft_sensor" in w and "mcap_bag" in w for w in summary["warnings"])
    contact = next(a for a in summary["analyses"] if a["analysis"] == "contact residuals")
    assert not contact["ran"]
    assert contact["detail"].startswith("no wrench topic on the real side (/real/ft_sensor not in the recording)")


def test_unknown_message_type_names_bag_and_topic(bags: dict[str, Path], tmp_path: Path) -> None:
    bag = tmp_path / "unknown_type"
    shutil.copytree(bags["sqlite3"], bag)
    db = next(bag.glob("*.db3"))
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE topics SET type = 'acme_msgs/msg/Mystery' "
                     "WHERE name = '/real/wrench'")
    meta = bag / "metadata.yaml"
    meta.write_text(meta.read_text().replace("geometry_msgs/msg/WrenchStamped", "acme_msgs/msg/Mystery"))
    error = _error_of(bag, tmp_path)
    assert re.search(r"unknown message type acme_msgs/msg/Mystery of topic /(sim|real)/wrench in bag\(s\) .*unknown_type",
                     error)


def test_truncated_bag_names_the_bag(bags: dict[str, Path], tmp_path: Path) -> None:
    bag = tmp_path / "truncated"
    shutil.copytree(bags["mcap"], bag)
    data_file = next(bag.glob("*.mcap"))
    raw = data_file.read_bytes()
    data_file.write_bytes(raw[: len(raw) // 2])
    error = _error_of(bag, tmp_path)
    assert "truncated" in error and str(bag) in error


def test_corrupt_chunk_names_bag_and_topic(bags: dict[str, Path], tmp_path: Path) -> None:
    bag = tmp_path / "corrupt"
    shutil.copytree(bags["mcap"], bag)
    data_file = next(bag.glob("*.mcap"))
    raw = bytearray(data_file.read_bytes())
    middle = len(raw) // 3
    raw[middle:middle + 64] = b"\xff" * 64
    data_file.write_bytes(bytes(raw))
    error = _error_of(bag, tmp_path)
    assert str(bag) in error
    assert re.search(r"topic /(sim|real)/\w+.*(corrupt or truncated|cannot deserialize)", error)


def test_empty_window_names_bag_and_topic(bags: dict[str, Path], tmp_path: Path) -> None:
    config = replay_config_from_dict({"window_s": [50, 60]})
    error = _error_of(bags["mcap"], tmp_path, config)
    assert "no messages in window" in error and "mcap_bag" in error and "/sim/joint_states" in error


def test_sides_that_never_overlap_are_an_empty_window(tmp_path: Path) -> None:
    sim = write_synthetic_bag(tmp_path / "late" / "a", SyntheticRun(duration_s=1.0, sides=("sim",)))
    real = write_synthetic_bag(tmp_path / "late" / "b", SyntheticRun(duration_s=1.0, sides=("real",), commands=False,
                                                                      start_ns=SyntheticRun().start_ns + 10**10))
    runs, _ = discover_runs([tmp_path / "late"], ReplayConfig())
    assert len(runs) == 2, "bags that do not overlap in time are not paired"
    result = replay_run(RunSpec("late", (str(sim), str(real))), ReplayConfig(), tmp_path / "out")
    assert not result.ok
    assert re.search(r"nothing to analyse: the sides' accepted messages never overlap in time: "
                     r"/sim/joint_states: \d+ message\(s\), accepted from 0\.\d+ to 1\.\d+ s; "
                     r"/real/joint_states: \d+ message\(s\), accepted from 10\.\d+ to 11\.\d+ s$", result.error)


def test_one_sided_bag_without_partner_fails_naming_the_topic(bags: dict[str, Path], tmp_path: Path) -> None:
    error = _error_of(bags["sim_only"], tmp_path)
    assert "/real/joint_states" in error and "sim_side" in error


def test_other_bags_complete_when_one_fails(bags: dict[str, Path], tmp_path: Path) -> None:
    broken = tmp_path / "inputs" / "broken"
    shutil.copytree(bags["mcap"], broken)
    data_file = next(broken.glob("*.mcap"))
    data_file.write_bytes(data_file.read_bytes()[:1000])
    shutil.copytree(bags["sqlite3"], tmp_path / "inputs" / "good")
    (tmp_path / "inputs" / "not_a_bag.mcap").write_bytes(b"hello")
    code = _replay([tmp_path / "inputs", tmp_path / "missing_bag"], tmp_path / "out", workers=2)
    assert code == 1
    rollup = _summary(tmp_path / "out")
    by_name = {r["name"]: r for r in rollup["runs"]}
    assert by_name["good"]["ok"] and (tmp_path / "out" / "good" / "summary.json").is_file()
    failed = {f["name"]: f["error"] for f in rollup["failures"]}
    assert set(failed) == {"broken", "not_a_bag", "missing_bag"}
    assert "broken" in failed["broken"]
    assert "not_a_bag.mcap" in failed["not_a_bag"]
    assert "missing_bag" in failed["missing_bag"] and "does not exist" in failed["missing_bag"]
    assert "FAILED" in (tmp_path / "out" / "report.html").read_text()


def test_cli_replay_exit_codes(bags: dict[str, Path], tmp_path: Path) -> None:
    assert cli_main(["replay", str(bags["mcap"]), "--out", str(tmp_path / "ok")]) == 0
    assert cli_main(["replay", str(tmp_path / "nope"), "--out", str(tmp_path / "bad")]) == 2
    assert not (tmp_path / "bad").exists()
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("sim_topics: {joint_states: ''}\n")
    assert cli_main(["replay", str(bags["mcap"]), "--out", str(tmp_path / "c"), "--config", str(bad_config)]) == 2


# ------------------------------------------------------------------ config
def test_config_defaults_match_the_live_graph() -> None:
    config = load_replay_config(None)
    assert config.sim_topics["joint_states"] == "/sim/joint_states"
    assert config.real_topics["wrench"] == "/real/wrench"
    assert config.tick_period_s == 0.02


def test_config_accepts_the_monitor_parameter_file(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("/**:\n  ros__parameters:\n    use_sim_time: false\n"
                    "divergence_monitor:\n  ros__parameters:\n    sim_topics.wrench: robot_a/ft\n"
                    "    engine.horizon_s: 0.5\n    engine:\n      attribution:\n        human_force_n: 9.0\n"
                    "    output_dir: somewhere\n")
    config = load_replay_config(path)
    assert config.sim_topics["wrench"] == "/robot_a/ft"
    engine = config.engine_config()
    assert engine.horizon_s == 0.5 and engine.attribution.human_force_n == 9.0


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("sim_topics: {joint_states: ''}\n", r"sim_topics.joint_states must name a topic"),
        ("sim_topics: {lidar: /x}\n", r"unknown stream 'lidar'"),
        ("colour: blue\n", r"unknown replay parameter 'colour'"),
        ("engine: {horizon_s: -1}\n", r"engine parameters: .*horizon_s"),
        ("tick_period_s: 0\n", r"tick_period_s must be > 0"),
        ("window_s: [5, 1]\n", r"window_s must satisfy"),
        ("sim_topics: [\n", r"not valid YAML"),
    ],
)
def test_bad_config_raises_naming_the_key(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "replay.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_replay_config(path)


def test_missing_config_file_raises(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"replay config .*nope.yaml: cannot read"):
        load_replay_config(tmp_path / "nope.yaml")


def test_bad_labels_file_raises(bags: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "labelled"
    shutil.copytree(bags["mcap"], copy)
    (copy / "labels.yaml").write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match=r"labels .*labels.yaml: expected a mapping"):
        read_labels([str(copy)])


def test_synthetic_messages_are_in_log_time_order() -> None:
    items = messages(SyntheticRun(duration_s=0.2))
    times = [t for _, _, t, _ in items]
    assert times == sorted(times) and {"/sim/joint_states", "/real/wrench"} <= {t for t, _, _, _ in items}


def test_config_dict_valued_engine_settings_keep_the_other_defaults() -> None:
    from sim_real_bridge.core.engine import EngineConfig

    defaults = EngineConfig().events.min_duration_by_category
    config = replay_config_from_dict({"engine.events.min_duration_by_category.contact": 0.2})
    assert config.engine_config().events.min_duration_by_category == {**defaults, "contact": 0.2}


def test_optional_topics_missing_give_warnings_and_strict_json(tmp_path: Path) -> None:
    bag = write_synthetic_bag(tmp_path / "no_poses", SyntheticRun(duration_s=2.0, poses=False, commands=False,
                                                                    joint_rate_hz=200.0, wrench_rate_hz=200.0))
    assert _replay([bag], tmp_path / "out") == 0
    text = (tmp_path / "out" / "summary.json").read_text()

    def no_constants(name: str) -> None:
        raise AssertionError(f"summary.json holds {name}")

    summary = json.loads(text, parse_constant=no_constants)
    assert "truth" not in summary and "scores" not in summary
    assert summary["residuals"]["ee_position_rms_m"] is None
    ran = {a["analysis"]: a for a in summary["analyses"]}
    assert ran["joint residuals"]["ran"] and ran["contact residuals"]["ran"]
    assert not ran["end-effector pose"]["ran"] and not ran["object pose"]["ran"]
    assert ran["end-effector pose"]["detail"].startswith(
        "no ee_pose topic on either side (/sim/ee_pose not in the recording; /real/ee_pose not in the recording)")
    assert "/real/object_pose not in the recording" in ran["object pose"]["detail"]
    assert not ran["run start at the first command"]["ran"]
    assert "/sim/joint_trajectory not in the recording" in ran["run start at the first command"]["detail"]
    assert not ran["scores against truth"]["ran"]
    html = (tmp_path / "out" / "report.html").read_text()
    assert "end-effector pose</b>: skipped: no ee_pose topic on either side" in html


def test_recording_warnings_name_lag_and_missing_samples(reference: tuple[Path, dict]) -> None:
    from sim_real_bridge.offline.replay import recording_warnings

    assert reference[1]["warnings"] == []
    stamps = np.arange(1000, dtype=np.int64) * 2_000_000 + 10**18
    recv = stamps + 300_000
    assert recording_warnings("/sim/joint_states", stamps, recv) == []
    lagging = recv + np.where(np.arange(1000) > 500, 1_500_000_000, 0)
    kept = np.r_[0:400, 600:1000]
    warnings = recording_warnings("/sim/joint_states", stamps[kept], lagging[kept])
    assert len(warnings) == 2
    assert re.match(r"/sim/joint_states: receive lag varies by 1\.500 s", warnings[0])
    assert re.match(r"/sim/joint_states: about 200 samples missing from 800", warnings[1])


# ------------------------------------------------------------------ shared summary (demo and replay)
def test_truth_collector_deduplicates_and_clips_to_the_run() -> None:
    from sim_real_bridge.evaluation.summary import TruthCollector

    labels = TruthCollector()
    push = {"category": "human", "kind": "push", "start_s": 5.0, "end_s": 12.0, "active": False}
    late = {"category": "contact", "kind": "friction", "start_s": 30.0, "end_s": 40.0, "active": False}
    labels.add(4.0, [push, late])
    labels.add(6.0, [{**push, "active": True}, late])
    assert labels.elapsed_s == 6.0 and labels.active == ["human/push"]
    assert labels.truth(10.0) == [{"category": "human", "kind": "push", "start_s": 5.0, "end_s": 10.0}]


def test_build_summary_scores_only_with_truth() -> None:
    from sim_real_bridge.evaluation.summary import build_summary

    monitor = {"events": [{"category": "human", "start_s": 5.2, "end_s": 9.0}], "timing": {"latency_s": 0.01},
               "residuals": {"joints": {}}, "calibration": [], "counts": {"rejected": {"real/wrench: zero_stamp": 2}}}
    without = build_summary(monitor, scenario="bag", duration_s=12.0, truth=None)
    assert "truth" not in without and "scores" not in without
    assert without["rejected"] == {"real/wrench: zero_stamp": 2}
    truth = [{"category": "human", "kind": "push", "start_s": 5.0, "end_s": 10.0}]
    scored = build_summary(monitor, scenario="s", duration_s=12.0, truth=truth, extra={"bags": ["b"]})
    assert scored["scores"]["per_category"]["human"]["recall"] == 1.0 and scored["bags"] == ["b"]
