"""Event log (JSON lines, fsync per event) and crash safety of the capture layer under kill -9."""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from rosbags.highlevel import AnyReader

from sim_real_bridge.capture import event_log as event_log_module
from sim_real_bridge.capture.event_log import EventLog, read_event_log
from sim_real_bridge.capture.snapshots import list_snapshots, recover
from sim_real_bridge.errors import SnapshotError

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_append_and_read_back(tmp_path):
    path = tmp_path / "logs" / "events.jsonl"
    with EventLog(path) as log:
        log.append({"id": "e1", "category": "contact", "severity": np.float64(0.5), "start_s": 1.25})
        log.append({"id": "e2", "category": "sensor", "severity": math.nan, "values": np.arange(3),
                    "snapshot": Path("snapshots/x.mcap")})
        assert log.count == 2
    contents = read_event_log(path)
    assert contents.torn_tail == b""
    assert contents.events == [
        {"id": "e1", "category": "contact", "severity": 0.5, "start_s": 1.25},
        {"id": "e2", "category": "sensor", "severity": None, "values": [0, 1, 2], "snapshot": "snapshots/x.mcap"},
    ]
    assert path.read_text().count("\n") == 2


def test_torn_last_line_is_reported_and_cut_on_reopen(tmp_path):
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        log.append({"id": "e1"})
    with path.open("ab") as handle:
        handle.write(b'{"id": "e2", "categ')
    contents = read_event_log(path)
    assert [e["id"] for e in contents.events] == ["e1"]
    assert contents.torn_tail == b'{"id": "e2", "categ'
    with EventLog(path) as log:
        assert log.dropped_torn_bytes == len(b'{"id": "e2", "categ')
        log.append({"id": "e3"})
    contents = read_event_log(path)
    assert [e["id"] for e in contents.events] == ["e1", "e3"] and contents.torn_tail == b""


def test_read_errors_name_the_file_and_line(tmp_path):
    with pytest.raises(SnapshotError, match=r"cannot read event log .*missing\.jsonl"):
        read_event_log(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\nnot json\n')
    with pytest.raises(SnapshotError, match=r"bad\.jsonl line 2 is not valid JSON"):
        read_event_log(bad)
    bad.write_text('{"id": 1}\n[1, 2]\n')
    with pytest.raises(SnapshotError, match=r"bad\.jsonl line 2 is not a JSON object"):
        read_event_log(bad)


def test_unwritable_log_raises_snapshot_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SnapshotError, match=r"cannot open event log .*file/events\.jsonl"):
        EventLog(blocker / "events.jsonl")

    log = EventLog(tmp_path / "events.jsonl")

    def no_space(_fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(event_log_module.os, "fsync", no_space)
    with pytest.raises(SnapshotError, match=r"cannot append to event log .*events\.jsonl: No space left on device"):
        log.append({"id": "e1"})
    monkeypatch.undo()
    log.close()
    with pytest.raises(SnapshotError, match="is closed"):
        log.append({"id": "e2"})
    with pytest.raises(TypeError, match="cannot store object in the event log"):
        EventLog(tmp_path / "other.jsonl").append({"x": object()})


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from sim_real_bridge.capture import bag_writer
    from sim_real_bridge.capture.event_log import EventLog
    from sim_real_bridge.capture.snapshots import SnapshotWriter
    from sim_real_bridge.capture.typestore import build_typestore

    out, n_good = Path(sys.argv[1]), int(sys.argv[2])
    store = build_typestore()
    string = store.types["std_msgs/msg/String"]
    writer = SnapshotWriter(out / "snapshots", store, pre_s=1.0, post_s=0.1)
    log = EventLog(out / "events.jsonl")
    original_write = bag_writer.BagWriter.write
    written = [0]

    def stalling_write(self, topic, stamp_ns, data):
        original_write(self, topic, stamp_ns, data)
        written[0] += 1
        if written[0] == 60:
            print("MIDWRITE", flush=True)
            time.sleep(120)

    t = 0
    for k in range(n_good + 1):
        if k == n_good:
            bag_writer.BagWriter.write = stalling_write
        for i in range(100):
            t += 10_000_000
            raw = store.serialize_cdr(string(data=f"{k}:{i}:" + "m" * 30_000), "std_msgs/msg/String")
            writer.add_message("/chatter", "std_msgs/msg/String", t, raw)
        writer.request(f"ev{k}", t - 50_000_000)
        log.append({"id": f"ev{k}", "stamp_ns": t - 50_000_000})
        print(f"ACK ev{k}", flush=True)
        t += 200_000_000
        for result in writer.poll(t):
            if result.error is not None:
                raise result.error
            print(f"SNAP {result.path.name}", flush=True)
    """
)


def test_kill_9_mid_snapshot_keeps_earlier_snapshots_and_acknowledged_events(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen([sys.executable, str(script), str(out), "3"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO_ROOT, env=env, text=True)
    acked, snapped = [], []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if not ready:
                assert proc.poll() is None, proc.stderr.read()
                continue
            line = proc.stdout.readline().strip()
            assert line, proc.stderr.read()
            if line == "MIDWRITE":
                break
            kind, name = line.split()
            (acked if kind == "ACK" else snapped).append(name)
        else:
            pytest.fail("child never reached the middle of a snapshot")
        proc.kill()  # SIGKILL: no cleanup handler runs
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -9
    assert acked == ["ev0", "ev1", "ev2", "ev3"]
    assert snapped == ["000001_ev0.mcap", "000002_ev1.mcap", "000003_ev2.mcap"]

    snapshots = out / "snapshots"
    partials = [p.name for p in snapshots.iterdir() if p.name.endswith(".partial")]
    assert partials == [".000004_ev3.mcap.partial"]  # the torn one never looks like a snapshot
    assert [p.name for p in list_snapshots(snapshots)] == snapped
    for name in snapped:
        with AnyReader([snapshots / name]) as reader:
            assert sum(1 for _ in reader.messages()) > 0

    contents = read_event_log(out / "events.jsonl")
    assert [e["id"] for e in contents.events][: len(acked)] == acked
    assert contents.torn_tail == b""

    actions = recover(snapshots)
    assert [(p.name, a) for p, a in actions] == [(".000004_ev3.mcap.partial", "removed")]
    assert sorted(p.name for p in snapshots.iterdir()) == snapped
    assert json.loads((out / "events.jsonl").read_text().splitlines()[-1])["id"] == "ev3"
