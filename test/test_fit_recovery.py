"""fit with real MuJoCo: injected gain and payload are recovered; the corrected model, replayed, helps."""

from __future__ import annotations

import json
from pathlib import Path

import mujoco
import pytest

from sim_real_bridge import cli
from sim_real_bridge.fit.identify import joint_rms_rad
from sim_real_bridge.fit.model import FitModel, resolve_model
from sim_real_bridge.fit.parameters import history_steps
from sim_real_bridge.fit.recording import read_recording
from sim_real_bridge.fit.windows import FitWindow, window_data
from sim_real_bridge.offline.synthetic import simulated_messages, write_synthetic_bag

NS_PER_S = 1_000_000_000
# The built-in scenarios inject from 8 s on; 12.5 s of run gives a fit window and a held-out one.
RUN_S = 12.5


def _bag(tmp_path_factory: pytest.TempPathFactory, scenario: str) -> Path:
    return write_synthetic_bag(tmp_path_factory.mktemp("fit") / scenario, items=simulated_messages(scenario, RUN_S))


@pytest.fixture(scope="module")
def gain_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _bag(tmp_path_factory, "dynamics_gain")


@pytest.fixture(scope="module")
def payload_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _bag(tmp_path_factory, "dynamics_payload")


def _run(bag: Path, out: Path, params: str, window: str = "8.5:10.5", model: str = "arm7") -> dict:
    code = cli.main(["fit", str(bag), "--model", model, "--out", str(out), "--params", params, "--window", window])
    assert code == 0
    return json.loads((out / "fit.json").read_text())


def _renamed_arm7(directory: Path) -> Path:
    """arm7's MJCF with every joint named ``arm_jointN``: pairs with the bag's ``jointN`` as replay pairs them."""
    spec = mujoco.MjSpec.from_file(str(resolve_model("arm7")[0]))
    for joint in [f"joint{i}" for i in range(1, 8)]:
        spec.joint(joint).name = f"arm_{joint}"
    for actuator in spec.actuators:
        actuator.target = f"arm_{actuator.target}"
    path = directory / "renamed_arm.xml"
    path.write_text(spec.to_xml())
    return path


@pytest.mark.slow
@pytest.mark.parametrize("model", ["arm7", "renamed MJCF file"])
def test_fit_recovers_an_injected_gain(gain_bag: Path, tmp_path: Path, model: str) -> None:
    prefix = "" if model == "arm7" else "arm_"
    model = model if model == "arm7" else str(_renamed_arm7(tmp_path))
    result = _run(gain_bag, tmp_path / "out", "gain", model=model)
    fitted = {p["name"]: p for p in result["parameters"]}
    # dynamics_gain scales every joint's kp by 0.4.
    for joint, kp in zip([f"{prefix}joint{i}" for i in range(1, 8)], (2000, 2000, 1000, 1000, 500, 300, 100)):
        entry = fitted[f"gain:{joint}"]
        assert entry["before"] == pytest.approx(kp)
        assert entry["fitted"] == pytest.approx(0.4 * kp, rel=0.05)
        assert entry["identifiable"] and entry["applied"] == entry["fitted"]
    assert result["residual"]["joint_reduction"] > 0.9
    assert (tmp_path / "out" / "fit.html").read_text().count("<h3>") == 1


@pytest.mark.slow
def test_fit_recovers_an_injected_payload_among_the_dynamics_defaults(payload_bag: Path, tmp_path: Path) -> None:
    result = _run(payload_bag, tmp_path / "out", "dynamics")
    fitted = {p["name"]: p for p in result["parameters"]}
    assert fitted["payload"]["before"] == pytest.approx(1e-6)
    assert fitted["payload"]["fitted"] == pytest.approx(2.0, rel=0.05)
    assert fitted["payload"]["identifiable"]
    # The screening found the payload alone: every other parameter stays as it was.
    assert result["screening"]["selected"] == ["payload"]
    assert [c["parameter"] for c in result["changes"]] == ["payload"]
    assert all(p["applied"] == p["before"] for name, p in fitted.items() if name != "payload")


@pytest.mark.slow
def test_corrected_model_replayed_on_a_held_out_window_brings_the_residual_down(payload_bag: Path,
                                                                                 tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(payload_bag, out, "payload")
    corrected = out / "model_fitted.xml"
    rec = read_recording(payload_bag)
    window = FitWindow("held-out", rec.source, rec.first_command_ns + int(10.5 * NS_PER_S),
                       rec.first_command_ns + int(12.0 * NS_PER_S))
    rms = {}
    for label, path, builtin in (("before", Path(json.loads((out / "fit.json").read_text())["model"]), True),
                                 ("after", corrected, False)):
        model = FitModel(path, rec.joint_names, builtin)
        wd = window_data(rec, window, model.timestep_s, history_steps(model.timestep_s))
        [roll] = model.rollout([model.model], [wd])
        rms[label] = joint_rms_rad(wd, roll)
    assert 'name="payload"' in corrected.read_text()
    assert rms["after"] < 0.2 * rms["before"]
