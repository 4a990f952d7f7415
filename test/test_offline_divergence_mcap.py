"""write_divergence_mcap: every output row becomes one message of its topic, in log-time
order, with the values of the columns it came from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rosbags.highlevel import AnyReader

from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.core.events import ACTION_CLOSE, ACTION_OPEN, EventRecord
from sim_real_bridge.core.ledger import CategoryShareRecord
from sim_real_bridge.core.outputs import ContactColumns, EngineOutput, JointColumns, PoseColumns, SummaryRecord
from sim_real_bridge.offline.divergence_mcap import DIVERGENCE_TOPICS, write_divergence_mcap

T0 = 1_700_000_000_000_000_000
STEP = 20_000_000
NAMES = tuple(f"joint{i}" for i in range(1, 8))


def _output(rows: int = 50) -> EngineOutput:
    rng = np.random.default_rng(3)
    t = T0 + STEP * np.arange(rows, dtype=np.int64)
    decision = t + 5_000_000
    joints = JointColumns(t, decision, NAMES, *rng.normal(size=(3, rows, 7)), rng.normal(size=rows),
                          np.full(rows, 1e-4), np.full(rows, 0.01), np.zeros(rows))
    every_other = np.arange(0, rows, 2)
    quat = np.tile([1.0, 0.0, 0.0, 0.0], (len(every_other), 1))
    ee = np.hstack((rng.normal(size=(len(every_other), 3)), quat))
    poses = PoseColumns(t[every_other], decision[every_other], ee, ee + [0.01, 0, 0, 0, 0, 0, 0],
                        np.full(len(every_other), 0.01), np.zeros(len(every_other)),
                        np.zeros(len(every_other), dtype=bool), np.full((len(every_other), 7), np.nan),
                        np.full((len(every_other), 7), np.nan), np.full(len(every_other), np.nan),
                        np.full(len(every_other), np.nan))
    contacts = ContactColumns(t, decision, rng.normal(size=(rows, 6)), rng.normal(size=(rows, 6)),
                              np.zeros(rows, dtype=int), np.ones(rows, dtype=int))
    opened = EventRecord("ev0001-contact", "contact", "contact", 0.7, int(t[10]), int(t[12]), True, ACTION_OPEN)
    closed = EventRecord("ev0001-contact", "contact", "contact", 0.7, int(t[10]), int(t[30]), False, ACTION_CLOSE)
    summary = SummaryRecord(int(t[25]), 0.5, 10.0, [CategoryShareRecord("contact", 1.0, 1.0, 1)], 0.0, 0.0,
                            0.01, 0.01, 1.0, 1, 1, 0, {}, 0.0, 0.0, 0)
    return EngineOutput(joints=joints, poses=poses, contacts=contacts,
                        events=[(int(decision[12]), opened), (int(decision[40]), closed)], summaries=[summary])


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[EngineOutput, list[tuple[str, int, object]]]:
    output = _output()
    path = write_divergence_mcap(tmp_path_factory.mktemp("mcap") / "divergence.mcap", output, markers_period_s=0.1)
    messages = []
    with AnyReader([Path(path)], default_typestore=build_typestore()) as reader:
        for connection, log_ns, data in reader.messages():
            messages.append((connection.topic, log_ns, reader.deserialize(data, connection.msgtype)))
    return output, messages


def test_every_row_is_one_message_of_its_topic(written: tuple) -> None:
    output, messages = written
    counts = {topic: sum(1 for m in messages if m[0] == topic) for topic in DIVERGENCE_TOPICS}
    assert counts["/divergence/joints"] == len(output.joints)
    assert counts["/divergence/pose"] == len(output.poses)
    assert counts["/divergence/contact"] == len(output.contacts)
    assert counts["/divergence/events"] == 2
    assert counts["/divergence/summary"] == 1
    # A marker per 0.1 s of poses (poses every 40 ms: every third pose).
    assert counts["/divergence/markers"] == len(range(0, len(output.poses), 3))


def test_messages_are_in_log_time_order_at_their_decision_times(written: tuple) -> None:
    output, messages = written
    log_times = [log_ns for _, log_ns, _ in messages]
    assert log_times == sorted(log_times)
    joint_logs = [log_ns for topic, log_ns, _ in messages if topic == "/divergence/joints"]
    assert joint_logs == output.joints.decision_ns.tolist()


def test_joint_messages_carry_the_columns(written: tuple) -> None:
    output, messages = written
    joints = [msg for topic, _, msg in messages if topic == "/divergence/joints"]
    for k, msg in enumerate(joints):
        assert list(msg.name) == list(NAMES)
        np.testing.assert_array_equal(msg.position_residual_rad, output.joints.position_residual_rad[k])
        stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        assert stamp == output.joints.t_ns[k]


def test_contact_messages_carry_the_residual(written: tuple) -> None:
    output, messages = written
    contacts = [msg for topic, _, msg in messages if topic == "/divergence/contact"]
    residual = output.contacts.residual
    for k, msg in enumerate(contacts):
        got = [msg.residual.force.x, msg.residual.force.y, msg.residual.force.z]
        np.testing.assert_allclose(got, residual[k, :3])


def test_events_keep_their_actions_in_order(written: tuple) -> None:
    _, messages = written
    events = [msg for topic, _, msg in messages if topic == "/divergence/events"]
    assert [e.id for e in events] == ["ev0001-contact", "ev0001-contact"]
    assert [e.open for e in events] == [True, False]


def test_an_existing_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "divergence.mcap"
    path.write_bytes(b"stale")
    write_divergence_mcap(path, _output(45))
    assert path.read_bytes()[:8] != b"stale"
    with AnyReader([path], default_typestore=build_typestore()) as reader:
        assert sum(c.msgcount for c in reader.connections if c.topic == "/divergence/joints") == 45
