"""fit: bad inputs give one line naming what is at fault (and exit code 2 on the CLI)."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import mujoco
import numpy as np
import pytest

from sim_real_bridge import cli
from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.conversions import divergence_msgs
from sim_real_bridge.conversions.robot_msgs import joint_trajectory_from_data
from sim_real_bridge.fit.command import FitRequest, fit_recordings
from sim_real_bridge.fit.errors import FitError, ModelMismatchError, NoMotionError, UnknownParameterError
from sim_real_bridge.fit.recording import EventSpan, Recording, read_recording
from sim_real_bridge.fit.windows import FitWindow, default_params, event_windows
from sim_real_bridge.fit.identify import Identification
from sim_real_bridge.fit.model import FitModel, resolve_model
from sim_real_bridge.fit.parameters import FitParameter
from sim_real_bridge.fit.worker import FitWorker
from sim_real_bridge.offline.synthetic import write_synthetic_bag
from sim_real_bridge.sim.physics import ARM_JOINT_NAMES, ArmPhysics
from sim_real_bridge.sim.trajectory import JointTrajectoryData, TrajectoryPoint

T0_NS = 1_700_000_000_000_000_000
NS_PER_S = 1_000_000_000


def _still_items(duration_s: float = 2.0, commands: bool = True) -> list:
    """A real arm that holds its home pose under a command to stay there."""
    store = build_typestore()
    types = store.types
    home = ArmPhysics().home_q_rad
    items = []
    for k in range(int(duration_s * 500)):
        stamp = T0_NS + k * 2_000_000
        header = types["std_msgs/msg/Header"](stamp=types["builtin_interfaces/msg/Time"](
            sec=stamp // 10**9, nanosec=stamp % 10**9), frame_id="")
        msg = types["sensor_msgs/msg/JointState"](header=header, name=list(ARM_JOINT_NAMES), position=home,
                                                  velocity=np.zeros(7), effort=np.zeros(7))
        items.append(("/real/joint_states", "sensor_msgs/msg/JointState", stamp + 500_000, msg))
    if commands:
        traj = divergence_msgs.rosbags_namespace(store, "trajectory_msgs")
        goal = JointTrajectoryData(ARM_JOINT_NAMES, (TrajectoryPoint(500_000_000, home),))
        msg = joint_trajectory_from_data(traj.JointTrajectory, traj.JointTrajectoryPoint, goal, stamp_ns=0)
        items.append(("/real/joint_trajectory", "trajectory_msgs/msg/JointTrajectory", T0_NS + 100_000_000, msg))
    items.sort(key=lambda item: item[2])
    return items


@pytest.fixture(scope="module")
def still_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_bag(tmp_path_factory.mktemp("fit") / "still", items=_still_items())


@pytest.fixture()
def other_robot_mjcf(tmp_path: Path) -> Path:
    path = tmp_path / "other.xml"
    path.write_text("""<mujoco><worldbody><body name="b"><joint name="shoulder" axis="0 0 1"/>
        <geom type="sphere" size="0.1" mass="1"/></body></worldbody>
        <actuator><position name="a" joint="shoulder" kp="10"/></actuator></mujoco>""")
    return path


def _fit(bag: Path, **kwargs) -> dict:
    request = FitRequest(inputs=[bag], **{"model": "arm7", **kwargs})
    return fit_recordings([read_recording(bag)], request)


def test_model_whose_joints_differ_names_them(still_bag: Path, other_robot_mjcf: Path) -> None:
    with pytest.raises(ModelMismatchError, match=r"other\.xml: recorded joint\(s\) joint1, .*joint7 not in the model "
                                                 r"\(model joints: shoulder\)"):
        _fit(still_bag, model=str(other_robot_mjcf), spans_s=[(0.2, 1.5)])


def test_window_without_motion_is_refused(still_bag: Path) -> None:
    with pytest.raises(NoMotionError, match=r"still: window t0\.2-1\.5 .* holds no motion"):
        _fit(still_bag, spans_s=[(0.2, 1.5)])


def test_recording_without_motion_has_no_window(still_bag: Path) -> None:
    with pytest.raises(FitError, match=r"still: no window with motion after the first command"):
        _fit(still_bag)


@pytest.mark.parametrize(("name", "pattern"), [
    ("stiction", r"unknown parameter 'stiction' \(known: gain:JOINT, .*delay, .*dynamics, contact\)"),
    ("damping:joint9", r"parameter 'damping:joint9': damping applies to joint1, .*joint7"),
    ("friction:table", r"parameter 'friction:table': friction applies to nothing here"),
])
def test_unknown_parameter_is_named(still_bag: Path, monkeypatch: pytest.MonkeyPatch, name: str, pattern: str) -> None:
    # A moving window is needed to reach the parameters: let the still arm count as moving.
    monkeypatch.setattr("sim_real_bridge.fit.windows.MIN_MOTION_RAD", 0.0)
    with pytest.raises(UnknownParameterError, match=pattern):
        _fit(still_bag, spans_s=[(0.2, 1.5)], params=[name])


def test_missing_commands_are_named(tmp_path: Path) -> None:
    bag = write_synthetic_bag(tmp_path / "nocmd", items=_still_items(commands=False))
    with pytest.raises(FitError, match=r"nocmd: no topic /real/joint_trajectory"):
        read_recording(bag)


def test_bad_window_text_and_span(still_bag: Path) -> None:
    with pytest.raises(FitError, match=r"window 0\.2:9 s is not a span"):
        _fit(still_bag, spans_s=[(0.2, 9.0)])


@pytest.mark.parametrize(("extra", "pattern"), [
    (["--params", "stiction"], "unknown parameter 'stiction'"),
    (["--window", "0.2:1.5"], "holds no motion"),
    (["--window", "a:b"], "--window 'a:b': expected START:END"),
])
def test_cli_prints_one_line_and_exits_2(still_bag: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                         extra: list[str], pattern: str) -> None:
    code = cli.main(["fit", str(still_bag), "--model", "arm7", "--out", str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("sim-real-bridge fit: error: ")
    assert pattern in err
    assert not (tmp_path / "out").exists()


def test_cli_names_a_model_that_is_neither_file_nor_robot(still_bag: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    code = cli.main(["fit", str(still_bag), "--model", "nosuchbot", "--out", str(tmp_path / "out")])
    assert code == 2
    assert "model nosuchbot: no such MJCF file nor built-in robot (built-in: arm7" in capsys.readouterr().err


def test_a_built_in_robots_own_file_is_that_robot(tmp_path: Path) -> None:
    path, builtin = resolve_model("ur6")
    assert builtin and resolve_model(str(path)) == (path, True)
    copy = tmp_path / "my_ur6.xml"
    copy.write_text(path.read_text())
    assert resolve_model(str(copy)) == (copy, False)


def test_model_joints_pair_with_the_recorded_ones_as_replay_pairs_them(tmp_path: Path) -> None:
    path, _ = resolve_model("arm7")
    spec = mujoco.MjSpec.from_file(str(path))
    for joint in ARM_JOINT_NAMES:
        spec.joint(joint).name = f"arm_{joint}"
    for actuator in spec.actuators:
        actuator.target = f"arm_{actuator.target}"
    (tmp_path / "renamed.xml").write_text(spec.to_xml())
    # Without each side's common prefix the names are equal.
    model = FitModel(tmp_path / "renamed.xml", ARM_JOINT_NAMES)
    assert model.joint_names == tuple(f"arm_{j}" for j in ARM_JOINT_NAMES)
    assert model.renamed["joint3"] == "arm_joint3" and model.actuator_of_joint["arm_joint3"] == "act3"
    # An explicit map wins over the names.
    swapped = FitModel(path, ARM_JOINT_NAMES, True, joint_map={"joint1": "joint2", "joint2": "joint1"})
    assert swapped.joint_names[:3] == ("joint2", "joint1", "joint3")
    with pytest.raises(ModelMismatchError, match=r"recorded joint\(s\) real_a not in the model"):
        FitModel(path, [*ARM_JOINT_NAMES[:6], "real_a"], True)


@pytest.mark.slow
def test_worker_returns_failures_as_results(still_bag: Path, tmp_path: Path) -> None:
    worker = FitWorker("arm7", out_root=tmp_path)
    try:
        assert worker.submit(still_bag, event_id="ev1", category="dynamics")
        results: list[dict] = []
        while not results:
            results = worker.poll()
            if not results:
                worker.wait(timeout_s=120)  # wait for the one fit, not a wall-clock assertion
    finally:
        worker.close()
    [result] = results
    assert result["event_id"] == "ev1"
    assert "no window with motion" in result["error"]
    assert result["names"] == []


def test_a_crashed_fit_process_still_names_its_event() -> None:
    worker = FitWorker("arm7")
    try:
        crashed: Future = Future()
        crashed.set_exception(RuntimeError("killed"))
        worker._pending.append((crashed, {"event_id": "ev7", "category": "contact", "snapshot": "s.mcap"}))
        [result] = worker.poll()
    finally:
        worker.close()
    assert result["event_id"] == "ev7" and result["category"] == "contact"
    assert result["error"] == "fit process failed: killed" and result["names"] == []


class _Node:
    """What LiveFits uses of a node: a publisher that keeps the messages."""

    def __init__(self) -> None:
        self.published: list = []
        self.warnings: list[str] = []
        self.context = SimpleNamespace(ok=lambda: True)

    def create_publisher(self, msg_type, topic, qos):
        self.topic = topic
        return SimpleNamespace(publish=self.published.append)

    def get_logger(self):
        return SimpleNamespace(warning=self.warnings.append)

    def get_name(self) -> str:
        return "monitor"


@pytest.mark.slow
def test_live_fits_hand_closed_events_to_another_process_and_publish(still_bag: Path, tmp_path: Path) -> None:
    import sim_real_bridge.msg as srb_msgs  # noqa: PLC0415 - the generated messages
    from sim_real_bridge.ros.live_fits import LiveFits  # noqa: PLC0415 - needs rclpy

    node = _Node()
    fits = LiveFits(node, "arm7", tmp_path)
    try:
        fits.event_closed("ev-sensor", "sensor")  # no simulator parameter: never fitted
        fits.snapshot_written("ev-sensor", still_bag)
        fits.event_closed("ev1", "dynamics")
        assert fits.submitted == 0  # the snapshot is not written yet
        fits.snapshot_written("ev1", still_bag)
        assert fits.submitted == 1 and fits._worker.pending == 1
        while not node.published:
            fits._worker.wait(timeout_s=120)  # the test waits; poll() itself never does
            fits.poll(now_ns=5_000_000_123)
    finally:
        fits.close()
    assert node.topic == "/divergence/fits"
    [msg] = node.published
    assert isinstance(msg, srb_msgs.FitResult)
    assert msg.event_id == "ev1" and msg.category == "dynamics" and "no window with motion" in msg.error
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (5, 123)
    assert node.warnings == [f"fit of ev1 failed: {msg.error}"]


def test_live_fits_poll_does_not_wait_for_a_running_fit(tmp_path: Path) -> None:
    from sim_real_bridge.ros.live_fits import LiveFits  # noqa: PLC0415 - needs rclpy

    node = _Node()
    fits = LiveFits(node, "arm7", tmp_path)
    try:
        running: Future = Future()  # never finishes
        fits._worker._pending.append((running, {"event_id": "ev1", "category": "dynamics", "snapshot": ""}))
        fits.poll(now_ns=1)
        assert node.published == [] and fits._worker.pending == 1
    finally:
        fits._worker._pending.clear()
        fits.close()


def test_events_choose_the_windows_and_the_default_parameters() -> None:
    stamps = T0_NS + np.arange(0, 20 * NS_PER_S, 10_000_000, dtype=np.int64)
    zeros = np.zeros((len(stamps), 1))
    events = (EventSpan("e1", "dynamics", "gain", T0_NS + 2 * NS_PER_S, T0_NS + 9 * NS_PER_S),
              EventSpan("e2", "sensor", "dropout", T0_NS + 10 * NS_PER_S, T0_NS + 11 * NS_PER_S),
              EventSpan("e3", "contact", "friction", T0_NS + 12 * NS_PER_S, T0_NS + 13 * NS_PER_S))
    rec = Recording("run.mcap", ("j",), stamps, zeros, zeros, commands=((T0_NS, None),), events=events)
    windows, notes = event_windows(rec)
    assert [(w.label, w.category, w.duration_s) for w in windows] == [("dynamics-e1", "dynamics", 3.0),
                                                                      ("contact-e3", "contact", 1.0)]
    assert notes == ["event e2 (sensor): no simulator parameter explains it"]
    assert default_params(windows) == ["dynamics", "contact"]
    assert default_params(windows[1:]) == ["contact"]
    assert default_params([FitWindow("t0-3", "run.mcap", 0, 3 * NS_PER_S)]) == ["dynamics"]  # no event


def _param(nominal: float = 2.0) -> FitParameter:
    return FitParameter("damping:joint1", "damping", "joint1", nominal, 0.0, 50.0, lambda spec, value: None)


@pytest.mark.parametrize(("fitted", "half", "identifiable"), [
    (3.0, 0.1, True),      # narrow interval: the fitted value goes into the corrected model
    (3.0, np.inf, False),  # the data cannot pin it down
    (3.0, 1.0, False),     # wider than 20% of the value
    (50.0, 0.1, False),    # stopped at its bound: not a value the data gave
])
def test_parameters_the_data_cannot_pin_down_are_reported_not_invented(fitted: float, half: float,
                                                                       identifiable: bool) -> None:
    result = Identification._judge(_param(), fitted, half)
    assert result.identifiable is identifiable and result.fitted == fitted
    assert result.applied == (fitted if identifiable else 2.0)


def test_the_wrench_is_compared_as_its_moving_average_and_the_joints_as_they_are() -> None:
    from sim_real_bridge.fit.identify import FitSettings, _Columns  # noqa: PLC0415

    columns = _Columns(SimpleNamespace(joint_names=("j",), has_wrench=True, object_body=""), FitSettings())
    t = np.arange(200) * 0.002
    values = np.zeros((200, columns.width))
    values[:, 0] = np.sin(t)
    values[:, 1] = 5.0 + 8.0 * (-1.0) ** np.arange(200)  # stick-slip chatter around 5 N
    values[:, 1:7][:3] = np.nan  # before the first wrench sample
    out = columns._average_wrench(t, values)
    assert np.array_equal(out[:, 0], values[:, 0])
    assert np.all(np.isnan(out[:3, 1])) and np.allclose(out[20:-20, 1], 5.0, atol=0.4)
