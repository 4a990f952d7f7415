"""In-process simulated recordings: the scenario runs on the robot asked for."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.offline.synthetic import simulated_messages
from sim_real_bridge.sim.robots import ROBOTS


@pytest.mark.parametrize("robot", ["arm7", "ur6"])
def test_simulated_recording_runs_on_the_robot_asked_for(robot: str) -> None:
    items = simulated_messages("dynamics_gain", duration_s=2.0, robot=robot)
    names = ROBOTS[robot].joint_names
    by_topic: dict[str, list] = {}
    for topic, _, log_ns, msg in items:
        by_topic.setdefault(topic, []).append((log_ns, msg))
    for side in ("sim", "real"):
        states = by_topic[f"/{side}/joint_states"]
        assert len(states) == pytest.approx(2.0 * 500, abs=2)
        assert all(tuple(msg.name) == names and len(msg.position) == len(names) for _, msg in states)
        commands = by_topic[f"/{side}/joint_trajectory"]
        assert commands and all(tuple(msg.joint_names) == names for _, msg in commands)
    labels = by_topic["/reality/injections"]
    assert [(i.category, i.kind) for i in labels[0][1].injections] == [("dynamics", "gain")]
    # The arm moves: the recording can excite a fit.
    q = np.array([msg.position for _, msg in by_topic["/real/joint_states"]])
    assert np.ptp(q, axis=0).max() > 0.05
    log_ns = [log for _, _, log, _ in items]
    assert log_ns == sorted(log_ns)
