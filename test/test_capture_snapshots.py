"""Failure snapshots: the window around an event, readable back with rosbags; caps; confinement."""

from __future__ import annotations

import os

import numpy as np
import pytest
from rosbags.highlevel import AnyReader

from sim_real_bridge.capture import bag_writer as bag_writer_module
from sim_real_bridge.capture.paths import confined_path, safe_name
from sim_real_bridge.capture.snapshots import SnapshotBuffer, SnapshotWriter, list_snapshots, recover
from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.errors import SnapshotError

S = 1_000_000_000
T0 = 1_700_000_000 * S


@pytest.fixture(scope="module")
def store():
    return build_typestore()


def _header(store, stamp_ns):
    time_cls = store.types["builtin_interfaces/msg/Time"]
    return store.types["std_msgs/msg/Header"](stamp=time_cls(sec=stamp_ns // S, nanosec=stamp_ns % S), frame_id="base")


def stream(store, duration_s: float = 20.0, rate_hz: float = 50.0):
    """Yield (topic, msgtype, recv_ns, raw) of a small live graph, in receive order."""
    js = store.types["sensor_msgs/msg/JointState"]
    ws = store.types["geometry_msgs/msg/WrenchStamped"]
    wrench = store.types["geometry_msgs/msg/Wrench"]
    vec = store.types["geometry_msgs/msg/Vector3"]
    traj = store.types["trajectory_msgs/msg/JointTrajectory"]
    point = store.types["trajectory_msgs/msg/JointTrajectoryPoint"]
    duration = store.types["builtin_interfaces/msg/Duration"]
    div = store.types["sim_real_bridge/msg/JointDivergence"]
    period = round(S / rate_hz)
    for i in range(round(duration_s * rate_hz)):
        t = T0 + i * period
        for side, offset in (("sim", 0), ("real", 1_000)):
            msg = js(header=_header(store, t), name=["j1", "j2"], position=np.array([i, -i], float),
                     velocity=np.zeros(2), effort=np.zeros(2))
            yield f"/{side}/joint_states", "sensor_msgs/msg/JointState", t + offset, store.serialize_cdr(msg, msg.__msgtype__)
            msg = ws(header=_header(store, t), wrench=wrench(force=vec(x=i, y=0.0, z=1.0), torque=vec(x=0.0, y=0.0, z=0.0)))
            yield f"/{side}/wrench", "geometry_msgs/msg/WrenchStamped", t + offset + 10, store.serialize_cdr(msg, msg.__msgtype__)
        msg = div(header=_header(store, t), name=["j1", "j2"], position_residual_rad=np.array([0.1, 0.2]),
                  velocity_residual_rad_s=np.zeros(2), effort_residual=np.zeros(2), clock_offset_s=0.0,
                  clock_offset_std_s=0.0, latency_s=0.01, latency_std_s=0.001, latency_compensated=True)
        yield "/divergence/joints", "sim_real_bridge/msg/JointDivergence", t + 5_000, store.serialize_cdr(msg, msg.__msgtype__)
        if i % 10 == 0:
            msg = traj(header=_header(store, t), joint_names=["j1", "j2"],
                       points=[point(positions=np.array([1.0, 2.0]), velocities=np.zeros(0), accelerations=np.zeros(0),
                                     effort=np.zeros(0), time_from_start=duration(sec=0, nanosec=100_000_000))])
            for topic in ("/bridge/joint_trajectory", "/sim/joint_trajectory", "/real/joint_trajectory"):
                yield topic, "trajectory_msgs/msg/JointTrajectory", t + 100, store.serialize_cdr(msg, msg.__msgtype__)


TOPICS = {"/sim/joint_states", "/real/joint_states", "/sim/wrench", "/real/wrench", "/divergence/joints",
          "/bridge/joint_trajectory", "/sim/joint_trajectory", "/real/joint_trajectory"}


def test_snapshot_holds_every_topic_of_its_window_in_order(store, tmp_path):
    writer = SnapshotWriter(tmp_path / "snapshots", store, pre_s=10.0, post_s=2.0, label="wipe_friction")
    event_ns = T0 + 12 * S + 3_000_000
    fed = []
    results = []
    request = None
    for topic, msgtype, recv_ns, raw in stream(store):
        writer.add_message(topic, msgtype, recv_ns, raw)
        fed.append((topic, recv_ns, raw))
        if request is None and recv_ns >= event_ns:
            request = writer.request("ev-7", event_ns)
            assert request.path == tmp_path / "snapshots" / "000001_wipe_friction_ev-7.mcap"
            assert not request.path.exists()
        results += writer.poll(recv_ns)
    assert [r.request.event_id for r in results] == ["ev-7"]
    result = results[0]
    assert result.error is None and result.path == request.path and result.path.is_file()

    expected = [(t, s, r) for t, s, r in fed if event_ns - 10 * S <= s <= event_ns + 2 * S]
    with AnyReader([result.path]) as reader:
        assert {c.topic for c in reader.connections} == TOPICS
        got = [(c.topic, s, bytes(d)) for c, s, d in reader.messages()]
        first_js = next(d for t, _, d in got if t == "/sim/joint_states")
        decoded = reader.deserialize(first_js, "sensor_msgs/msg/JointState")
    assert result.message_count == len(expected) == len(got)
    assert sorted(got, key=lambda m: (m[1], m[0])) == sorted(expected, key=lambda m: (m[1], m[0]))
    stamps = [s for _, s, _ in got]
    assert stamps == sorted(stamps)
    assert stamps[0] <= event_ns <= stamps[-1]
    assert stamps[0] >= event_ns - 10 * S and stamps[-1] <= event_ns + 2 * S
    assert stamps[0] - (event_ns - 10 * S) < S // 10 and (event_ns + 2 * S) - stamps[-1] < S // 10
    for topic in TOPICS:
        per_topic = [s for t, s, _ in got if t == topic]
        assert per_topic == sorted(per_topic) and per_topic
    assert list(decoded.name) == ["j1", "j2"]


def test_snapshot_waits_for_its_post_window_and_repeats_return_the_first_request(store, tmp_path):
    writer = SnapshotWriter(tmp_path, store, pre_s=1.0, post_s=2.0)
    for topic, msgtype, recv_ns, raw in stream(store, duration_s=3.0):
        writer.add_message(topic, msgtype, recv_ns, raw)
    first = writer.request("e/1", T0 + S)
    assert writer.request("e/1", T0 + 2 * S) is first
    assert writer.poll(T0 + 3 * S - 1) == []
    assert writer.pending == [first]
    done = writer.poll(T0 + 3 * S)
    assert [r.path for r in done] == [first.path] and writer.pending == []
    assert writer.poll(T0 + 10 * S) == []
    assert writer.request("e/1", T0) is first


def test_flush_writes_pending_snapshots_with_what_is_buffered(store, tmp_path):
    writer = SnapshotWriter(tmp_path, store, pre_s=1.0, post_s=5.0)
    for topic, msgtype, recv_ns, raw in stream(store, duration_s=2.0):
        writer.add_message(topic, msgtype, recv_ns, raw)
    writer.request("late", T0 + int(1.5 * S))
    results = writer.flush()
    assert len(results) == 1 and results[0].error is None
    with AnyReader([results[0].path]) as reader:
        stamps = [s for _, s, _ in reader.messages()]
    assert stamps[0] >= T0 + S // 2 and stamps[-1] <= T0 + 2 * S


def test_disk_cap_deletes_oldest_snapshots_first(store, tmp_path):
    probe = SnapshotWriter(tmp_path / "probe", store, pre_s=0.5, post_s=0.5)
    for item in stream(store, duration_s=1.0):
        probe.add_message(*item)
    probe.request("p", T0 + S // 2)
    size = probe.flush()[0].size_bytes

    writer = SnapshotWriter(tmp_path / "capped", store, pre_s=0.5, post_s=0.5, max_total_bytes=int(2.5 * size))
    results = []
    for topic, msgtype, recv_ns, raw in stream(store, duration_s=6.0):
        writer.add_message(topic, msgtype, recv_ns, raw)
        for k in range(1, 6):
            if recv_ns == T0 + k * S:
                writer.request(f"ev{k}", recv_ns - S // 2)
        results += writer.poll(recv_ns)
    assert [r.error for r in results] == [None] * 5
    kept = list_snapshots(tmp_path / "capped")
    assert [p.name for p in kept] == ["000004_ev4.mcap", "000005_ev5.mcap"]
    assert sum(p.stat().st_size for p in kept) <= int(2.5 * size)
    deleted = [p.name for r in results for p in r.deleted]
    assert deleted == ["000001_ev1.mcap", "000002_ev2.mcap", "000003_ev3.mcap"]
    assert SnapshotWriter(tmp_path / "capped", store).request("next", T0).path.name == "000006_next.mcap"


def test_cap_of_zero_bytes_fails_with_snapshot_error_and_leaves_nothing(store, tmp_path):
    writer = SnapshotWriter(tmp_path, store, pre_s=1.0, post_s=0.0, max_total_bytes=0)
    for item in stream(store, duration_s=1.0):
        writer.add_message(*item)
    writer.request("e", T0 + S // 2)
    (result,) = writer.poll(T0 + S)
    assert result.path is None
    with pytest.raises(SnapshotError, match=r"000001_e\.mcap needs at least \d+ bytes, over the disk cap of 0 bytes"):
        raise result.error
    assert os.listdir(tmp_path) == []


def test_snapshot_larger_than_cap_after_writing_is_removed(store, tmp_path):
    writer = SnapshotWriter(tmp_path, store, pre_s=1.0, post_s=0.0, max_total_bytes=10**6)
    writer.add_message("/x", "std_msgs/msg/String", T0, store.serialize_cdr(
        store.types["std_msgs/msg/String"](data="x" * (10**6 - 100)), "std_msgs/msg/String"))
    writer.request("big", T0)
    (result,) = writer.poll(T0)
    with pytest.raises(SnapshotError, match=r"000001_big\.mcap of \d+ bytes exceeds the disk cap of 1000000 bytes; removed"):
        raise result.error
    assert os.listdir(tmp_path) == []


def test_disk_full_while_writing_reports_error_and_keeps_going(store, tmp_path, monkeypatch):
    writer = SnapshotWriter(tmp_path, store, pre_s=1.0, post_s=0.0)
    for item in stream(store, duration_s=1.0):
        writer.add_message(*item)
    real_fsync = bag_writer_module.fsync_path

    def no_space(path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bag_writer_module, "fsync_path", no_space)
    writer.request("full", T0 + S // 2)
    (failed,) = writer.poll(T0 + S)
    with pytest.raises(SnapshotError, match=r"cannot write bag .*000001_full\.mcap: No space left on device"):
        raise failed.error
    assert os.listdir(tmp_path) == []
    monkeypatch.setattr(bag_writer_module, "fsync_path", real_fsync)
    writer.request("after", T0 + S // 2)
    (ok,) = writer.poll(T0 + S)
    assert ok.error is None and ok.path.is_file()


def test_unwritable_snapshot_directory_raises_snapshot_error(store, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SnapshotError, match=r"cannot create snapshot directory .*file/snaps"):
        SnapshotWriter(blocker / "snaps", store)


@pytest.mark.parametrize(
    ("label", "event_id"),
    [("../../escape", "../../../etc/passwd"), ("/abs/scenario", "/tmp/evil"), ("..", ".."), ("a/../../b", "x\x00y")],
)
def test_names_never_leave_the_snapshot_directory(store, tmp_path, label, event_id):
    out_dir = tmp_path / "inner" / "snapshots"
    writer = SnapshotWriter(out_dir, store, pre_s=0.0, post_s=0.0, label=label)
    writer.add_message("/../../topic", "std_msgs/msg/String", T0,
                       store.serialize_cdr(store.types["std_msgs/msg/String"](data="hi"), "std_msgs/msg/String"))
    request = writer.request(event_id, T0)
    assert request.path.parent == out_dir.resolve()
    (result,) = writer.poll(T0)
    assert result.error is None
    assert [p.parent for p in tmp_path.rglob("*") if p.is_file()] == [out_dir.resolve()]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("../etc/passwd", "etc_passwd"), ("/abs/path", "abs_path"), ("..", "unnamed"), ("", "unnamed"),
     ("ok-name_1.2", "ok-name_1.2"), (".hidden", "hidden"), ("a..b", "a_b"), ("/sim/joint_states", "sim_joint_states")],
)
def test_safe_name(name, expected):
    assert safe_name(name) == expected


def test_confined_path_rejects_a_symlinked_escape(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    assert confined_path(root, "../x") == root.resolve() / "x"
    with pytest.raises(SnapshotError, match="escapes the capture directory"):
        confined_path(root, "link", "x")


def test_buffer_keeps_its_horizon_and_memory_cap():
    buffer = SnapshotBuffer(horizon_ns=10, max_bytes=1_000)
    for t in range(100):
        buffer.add("/a", "std_msgs/msg/String", t, b"x" * 10)
    assert [m.recv_stamp_ns for m in buffer.window(0, 1_000)] == list(range(89, 100))
    buffer.add("/b", "std_msgs/msg/String", 100, b"y" * 995)
    assert buffer.nbytes <= 1_000 and buffer.dropped_for_memory > 0
    assert [m.topic for m in buffer.window(0, 1_000)] == ["/b"]
    buffer.add("/b", "std_msgs/msg/Int32", 100, b"z")
    assert buffer.topics() == {"/a": "std_msgs/msg/String", "/b": "std_msgs/msg/Int32"}
    assert [m.data for m in buffer.window(0, 1_000)] == [b"z"]
    assert len(buffer) == 1


def test_bad_parameters_raise():
    with pytest.raises(SnapshotError, match="horizon .* must be >= 0"):
        SnapshotBuffer(horizon_ns=-1)
    with pytest.raises(SnapshotError, match=r"pre_s \(-1.0\) and post_s \(2.0\) must be >= 0"):
        SnapshotWriter("/nonexistent-never-created", pre_s=-1.0)
    with pytest.raises(SnapshotError, match=r"max_total_bytes \(-5\) must be >= 0"):
        SnapshotWriter("/nonexistent-never-created", max_total_bytes=-5)


def test_construction_recovers_partials(store, tmp_path):
    (tmp_path / ".000003_x.mcap.partial" / "000003_x").mkdir(parents=True)
    writer = SnapshotWriter(tmp_path, store)
    assert [(p.name, a) for p, a in writer.recovered] == [(".000003_x.mcap.partial", "removed")]
    assert os.listdir(tmp_path) == []
    assert recover(tmp_path) == []


def test_failure_capture_logs_events_and_snapshot_outcomes(store, tmp_path):
    from sim_real_bridge.capture.event_log import read_event_log
    from sim_real_bridge.capture.failure_capture import FailureCapture

    capture = FailureCapture(tmp_path / "run", store, pre_s=1.0, post_s=0.5, label="demo")
    relative = None
    for topic, msgtype, recv_ns, raw in stream(store, duration_s=3.0):
        capture.add_message(topic, msgtype, recv_ns, raw)
        if relative is None and recv_ns >= T0 + S:
            relative = capture.record_event({"id": "e1", "category": "human", "start_s": 1.0}, recv_ns)
            assert capture.record_event({"id": "e1", "category": "human", "end_s": 1.2}, recv_ns) == relative
        capture.poll(recv_ns)
    capture.record_event({"id": "e2", "category": "sensor"}, T0 + int(2.9 * S))
    assert [r.error for r in capture.close()] == [None]
    assert relative == "snapshots/000001_demo_e1.mcap" and (tmp_path / "run" / relative).is_file()
    lines = read_event_log(tmp_path / "run" / "events.jsonl").events
    assert [(line["type"], line["id"]) for line in lines] == [
        ("event", "e1"), ("event", "e1"), ("snapshot", "e1"), ("event", "e2"), ("snapshot", "e2")]
    assert lines[0]["snapshot"] == relative and lines[2]["ok"] is True and lines[2]["messages"] > 0


def test_late_poll_still_gets_the_whole_pre_window(store, tmp_path):
    writer = SnapshotWriter(tmp_path, store, pre_s=1.0, post_s=0.5)
    writer.request("e", T0 + 2 * S)
    for item in stream(store, duration_s=6.0):
        writer.add_message(*item)
    (result,) = writer.poll(T0 + 6 * S)  # 3.5 s later than due
    with AnyReader([result.path]) as reader:
        stamps = [s for _, s, _ in reader.messages()]
    assert stamps[0] - (T0 + S) < S // 10 and stamps[-1] <= T0 + int(2.5 * S)
    assert writer.buffer.hold_from_ns is None


def test_background_capture_writes_off_the_calling_thread_and_logs_the_same(store, tmp_path, monkeypatch):
    import threading

    from sim_real_bridge.capture import failure_capture
    from sim_real_bridge.capture.event_log import read_event_log
    from sim_real_bridge.capture.failure_capture import FailureCapture

    capture = FailureCapture(tmp_path / "run", store, pre_s=1.0, post_s=0.5, label="demo", background=True)
    release = threading.Event()
    writers: list[str] = []
    real_write = capture.snapshots.write

    def held_write(job):
        writers.append(threading.current_thread().name)
        assert release.wait(timeout=30)
        return real_write(job)

    monkeypatch.setattr(capture.snapshots, "write", held_write)
    results = []
    for topic, msgtype, recv_ns, raw in stream(store, duration_s=3.0):
        capture.add_message(topic, msgtype, recv_ns, raw)
        if recv_ns >= T0 + S and not capture.snapshots._requests:
            capture.record_event({"id": "e1", "category": "human"}, recv_ns)
        results += capture.poll(recv_ns)  # returns while the writer is held: not on this thread
    started = threading.Event()
    for _ in range(3000):  # the writer thread picks the job up on its own time
        if writers:
            break
        started.wait(0.01)
    assert results == [] and capture.writing == 1 and writers == ["snapshot_writer"]
    capture.record_event({"id": "e2", "category": "sensor"}, T0 + int(2.9 * S))
    release.set()
    results += capture.close()
    assert sorted((r.request.event_id, r.error) for r in results) == [("e1", None), ("e2", None)]
    for result in results:
        with AnyReader([result.path]) as reader:
            assert sum(1 for _ in reader.messages()) == result.message_count > 0
    lines = read_event_log(tmp_path / "run" / "events.jsonl").events
    order = [(line["type"], line["id"]) for line in lines]
    assert sorted(order) == [("event", "e1"), ("event", "e2"), ("snapshot", "e1"), ("snapshot", "e2")]
    assert order.index(("event", "e1")) < order.index(("snapshot", "e1"))

    # A full queue (writer stuck) makes the caller write the snapshot itself: nothing lost.
    stuck = FailureCapture(tmp_path / "run2", store, pre_s=0.1, post_s=0.0, background=True)
    gate = threading.Event()
    inner = stuck.snapshots.write
    monkeypatch.setattr(stuck.snapshots, "write",
                        lambda job: inner(job) if threading.current_thread().name != "snapshot_writer" or gate.wait(30)
                        else None)
    n = failure_capture.WRITER_QUEUE_SIZE + 3
    for k, (topic, msgtype, recv_ns, raw) in enumerate(stream(store, duration_s=1.0)):
        stuck.add_message(topic, msgtype, recv_ns, raw)
        if k < n:
            stuck.record_event({"id": f"e{k}", "category": "sensor"}, recv_ns)
        stuck.poll(recv_ns)
    assert stuck.written_inline >= 2
    gate.set()
    done = stuck.close()
    assert len(list_snapshots(tmp_path / "run2" / "snapshots")) == n, done


def test_a_log_that_fails_on_the_writer_thread_reports_with_the_snapshot(store, tmp_path, monkeypatch):
    from sim_real_bridge.capture.failure_capture import FailureCapture
    from sim_real_bridge.errors import SnapshotError

    capture = FailureCapture(tmp_path / "run", store, pre_s=0.5, post_s=0.0, background=True)
    real_append = capture.log.append

    def full_disk(entry):
        if entry.get("type") == "snapshot":
            raise SnapshotError("event log run/events.jsonl: No space left on device")
        return real_append(entry)

    monkeypatch.setattr(capture.log, "append", full_disk)
    results = []
    for topic, msgtype, recv_ns, raw in stream(store, duration_s=1.5):
        capture.add_message(topic, msgtype, recv_ns, raw)
        if recv_ns >= T0 + S and not capture.snapshots._requests and not results:
            capture.record_event({"id": "e1", "category": "sensor"}, recv_ns)
        results += capture.poll(recv_ns)
    results += capture.close()
    assert [(r.request.event_id, str(r.error)) for r in results] == [
        ("e1", "event log run/events.jsonl: No space left on device")]
    assert results[0].path.is_file()  # the snapshot itself was written
