#!/usr/bin/env python3
"""Live load: the divergence_monitor against a bare rclpy subscriber at 4 x 1 kHz.

One run, four processes besides this one:

- a publisher playing both robots: ``/sim`` and ``/real`` 7-joint ``joint_states`` and
  ``wrench``, each at 1 kHz (4000 messages/s), stamped on an exact 1 kHz grid of the
  system clock (sample instants, as a robot's hardware clock would; publication
  catches up in bursts when the process is descheduled); it reports how many it
  published and the rate it achieved;
- a bare rclpy subscriber on the same four topics with the monitor's input QoS
  (best effort, depth 500), which only counts messages: the baseline;
- the monitor itself (``python -m sim_real_bridge.nodes.divergence_monitor``);
- while the monitor listens, a probe that sleeps 2 ms at a time and counts the sleeps
  the machine held more than 5 ms longer (``machine_stalls``): stalls of the machine
  itself, which no figure of the monitor's can be read without on a shared host.

The publisher runs twice for the same duration, once with the baseline listening and
once with the monitor; each listener's CPU time (user + system, from
``/proc/<pid>/stat``) over its publishing window gives ``monitor_cpu_over_bare``.

``dropped``: messages published minus messages the monitor took in (accepted, i.e.
``messages - refused`` of each input stream's /diagnostics status, read after the
publisher stopped).

``p99_latency_ms``: for each ``/divergence/joints`` message received by this process,
its arrival (the DDS reception stamp, system clock) minus the publication time of the
later of the matched pair covering its stamp t (the first sample whose stamp, mapped
by the monitor's reported transport floor, is at or after t; see run_bench). That
sample reached the monitor no earlier than it was published, so this bounds the
latency from the later arrival of the matched pair to the divergence message from
above (it also includes the output's own transport to this process). Samples are
stamped on whole milliseconds of the system clock, as a hardware clock ticks.
All processes share the system clock.

Usage: ``python bench/live_load.py [--json] [--duration-s 20] [--rate-hz 1000]``.
DDS is pinned to localhost; ROS_DOMAIN_ID defaults to 109 unless set.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOPICS = ("/sim/joint_states", "/real/joint_states", "/sim/wrench", "/real/wrench")
N_JOINTS = 7
CLK_TCK = os.sysconf("SC_CLK_TCK")
STALL_MS = 5.0  # a sleep held this much longer than asked counts as a machine stall
REPORT_WITHIN_S = 3.0  # a lag must show on /diagnostics (1 Hz) or /divergence/summary (1 Hz) within this


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env.pop("ROS_LOCALHOST_ONLY", None)
    env.setdefault("ROS_DOMAIN_ID", "109")
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process, from /proc/<pid>/stat."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# ------------------------------------------------------------------ roles (child processes)
def run_publisher(duration_s: float, rate_hz: float, pub_times_path: str | None = None) -> None:
    """Publish both robots' streams at rate_hz each for duration_s; print counts as JSON.

    With ``pub_times_path``, the system time at which each sample's four messages were
    published is saved there (numpy .npy, one int64 per sample).
    """
    import math

    import numpy as np

    import rclpy
    from geometry_msgs.msg import WrenchStamped
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState

    rclpy.init()
    node = rclpy.create_node("live_load_publisher")
    qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=50, reliability=ReliabilityPolicy.BEST_EFFORT)
    names = [f"joint{i}" for i in range(1, N_JOINTS + 1)]
    pubs = {}
    msgs = {}
    for side in ("sim", "real"):
        pubs[(side, "js")] = node.create_publisher(JointState, f"/{side}/joint_states", qos)
        pubs[(side, "w")] = node.create_publisher(WrenchStamped, f"/{side}/wrench", qos)
        js = JointState()
        js.name = names
        msgs[(side, "js")] = js
        w = WrenchStamped()
        w.header.frame_id = "ft_sensor"
        msgs[(side, "w")] = w
    # Wait for the listener to match every topic (discovery), at most 10 s.
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(p.get_subscription_count() == 0 for p in pubs.values()):
        time.sleep(0.05)
    print(json.dumps({"ready": True}), flush=True)
    period_ns = int(1e9 / rate_hz)
    count = 0
    pub_times = np.zeros(int(duration_s * rate_hz) + 10, dtype=np.int64)
    # A hardware clock samples on whole periods of its time base: start on one.
    start_wall_ns = -(-time.time_ns() // period_ns) * period_ns
    while time.time_ns() < start_wall_ns:
        pass
    start = time.monotonic_ns()
    end = start + int(duration_s * 1e9)
    while True:
        now = time.monotonic_ns()
        if now >= end:
            break
        due = (now - start) // period_ns + 1
        while count < due:
            # Stamped like a robot's hardware clock: the sample instant on an exact 1 kHz
            # grid; a late publication (this process descheduled) shows as transport delay.
            stamp_ns = start_wall_ns + count * period_ns
            sec, nanosec = divmod(stamp_ns, 1_000_000_000)
            t = count / rate_hz
            q = [0.3 * math.sin(t + i) for i in range(N_JOINTS)]
            qd = [0.3 * math.cos(t + i) for i in range(N_JOINTS)]
            for side in ("sim", "real"):
                js = msgs[(side, "js")]
                js.header.stamp.sec, js.header.stamp.nanosec = sec, nanosec
                js.header.frame_id = str(count)
                js.position = q
                js.velocity = qd
                js.effort = q
                pubs[(side, "js")].publish(js)
                w = msgs[(side, "w")]
                w.header.stamp.sec, w.header.stamp.nanosec = sec, nanosec
                w.wrench.force.z = -5.0 + 0.01 * math.sin(t)
                pubs[(side, "w")].publish(w)
            if count < pub_times.size:
                pub_times[count] = time.time_ns()
            count += 1
        sleep_ns = start + count * period_ns - time.monotonic_ns()
        if sleep_ns > 0:
            time.sleep(sleep_ns * 1e-9)
    elapsed_s = (time.monotonic_ns() - start) * 1e-9
    if pub_times_path:
        np.save(pub_times_path, pub_times[:count])
    print(json.dumps({"published_per_topic": count, "elapsed_s": elapsed_s, "start_stamp_ns": start_wall_ns,
                      "period_ns": period_ns, "achieved_rate_hz": count / elapsed_s}), flush=True)
    node.destroy_node()
    rclpy.shutdown()


def run_bare() -> None:
    """Count messages on the four topics with the monitor's input QoS until SIGINT."""
    import rclpy
    from geometry_msgs.msg import WrenchStamped
    from rclpy.executors import ExternalShutdownException
    from sensor_msgs.msg import JointState

    from sim_real_bridge.nodes.divergence_monitor import INPUT_QOS

    rclpy.init()
    node = rclpy.create_node("live_load_bare")
    counts = dict.fromkeys(TOPICS, 0)

    def counter(topic: str):
        def on_message(_msg: object) -> None:
            counts[topic] += 1
        return on_message

    for topic in TOPICS:
        kind = JointState if topic.endswith("joint_states") else WrenchStamped
        node.create_subscription(kind, topic, counter(topic), INPUT_QOS)
    print(json.dumps({"ready": True}), flush=True)
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RuntimeError as error:  # rclpy can fail a take under SIGINT: the counts stand
        print(f"spin ended: {error}", file=sys.stderr)
    print(json.dumps({"received": counts}), flush=True)


def run_hog() -> None:
    """Role ``hog``: keep one core busy until killed (the load a test run or a build puts beside the monitor)."""
    count = 0
    while True:
        count += 1


def run_probe(duration_s: float) -> None:
    """Role ``probe``: sleep 2 ms at a time for duration_s and report how much longer the
    machine held each sleep. A stall seen here is the machine's (the host descheduled it,
    or every core was busy), not the monitor's: its latency figures read against this."""
    sleep_s, stalls_ms, samples = 0.002, [], 0
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        start = time.monotonic()
        time.sleep(sleep_s)
        late_ms = (time.monotonic() - start - sleep_s) * 1e3
        samples += 1
        if late_ms > STALL_MS:
            stalls_ms.append(late_ms)
    print(json.dumps({"probe": {"samples": samples, f"stalls_over_{STALL_MS:g}ms": len(stalls_ms),
                                "stall_max_ms": max(stalls_ms, default=0.0),
                                "stalled_s": sum(stalls_ms) * 1e-3}}), flush=True)


# ------------------------------------------------------------------ orchestration
def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    # stderr to a file: a full pipe would block a chatty child.
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=log,
                            text=True, env=env, cwd=REPO)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def _log_text(proc: subprocess.Popen) -> str:
    log = proc.log  # type: ignore[attr-defined]
    log.seek(0)
    return log.read()


def _read_json_line(proc: subprocess.Popen, key: str, timeout_s: float) -> dict:
    end = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                raise RuntimeError(f"process exited ({proc.returncode}): {_log_text(proc)[-2000:]}")
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if key in data:
            return data
    raise RuntimeError(f"no {key!r} line within {timeout_s} s")


def _publish_and_measure(listener_pid: int, duration_s: float, rate_hz: float, env: dict[str, str],
                         pub_times_path: str = "") -> dict:
    pub = _start([__file__, "--role", "publisher", "--duration-s", str(duration_s), "--rate-hz", str(rate_hz),
                  "--pub-times", pub_times_path], env)
    _read_json_line(pub, "ready", 30.0)
    cpu0, wall0, start_ns = cpu_seconds(listener_pid), time.monotonic(), time.time_ns()
    result = _read_json_line(pub, "published_per_topic", duration_s + 30.0)
    cpu1, wall1, end_ns = cpu_seconds(listener_pid), time.monotonic(), time.time_ns()
    result["window_ns"] = (start_ns, end_ns)
    pub.wait(timeout=10)
    result["listener_cpu_s"] = cpu1 - cpu0
    result["listener_wall_s"] = wall1 - wall0
    return result


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def run_bench(duration_s: float, rate_hz: float, monitor_params: list[str] | None = None, hog: int = 0) -> dict:
    """Both phases (with ``hog`` busy loops running beside them); returns the result dict."""
    hogs = [_start([__file__, "--role", "hog"], _env()) for _ in range(hog)]
    try:
        return _run_phases(duration_s, rate_hz, monitor_params)
    finally:
        for proc in hogs:
            proc.kill()
            proc.wait()


def _run_phases(duration_s: float, rate_hz: float, monitor_params: list[str] | None) -> dict:
    """The bare phase, then the monitor phase."""
    import numpy as np
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from sim_real_bridge.msg import DivergenceSummary, JointDivergence

    load_before = os.getloadavg()[0]
    env = _env()
    os.environ.update({k: env[k] for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID")})
    os.environ.pop("ROS_LOCALHOST_ONLY", None)

    # Phase 1: the bare subscriber.
    bare = _start([__file__, "--role", "bare"], env)
    _read_json_line(bare, "ready", 30.0)
    bare_run = _publish_and_measure(bare.pid, duration_s, rate_hz, env)
    time.sleep(0.5)
    lines = [line for line in _stop(bare).splitlines() if "received" in line]
    if not lines:
        raise RuntimeError(f"the bare subscriber reported no counts (exit {bare.returncode}): {_log_text(bare)[-2000:]}")
    bare_counts = json.loads(lines[0])["received"]

    # Phase 2: the monitor, watched from this process.
    rclpy.init()
    node = rclpy.create_node("live_load_watch")
    outputs: list[tuple[int, int]] = []  # (stamp, arrival) of each /divergence/joints
    sources: list[int] = []  # when the monitor published each (DDS source stamp, system clock)
    statuses: dict[str, dict[str, str]] = {}
    watching = threading.Event()

    def on_joints(msg: JointDivergence, info: dict) -> None:
        # Arrival as DDS stamped it on reception (system clock), before this process's own
        # executor got to the callback: that delay is the watcher's, not the monitor's.
        if watching.is_set():
            outputs.append((msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec,
                            int(info["received_timestamp"])))
            sources.append(int(info["source_timestamp"]))

    floors_s: list[float] = []  # every transport floor the monitor reported while watched

    def on_diag(msg: DiagnosticArray) -> None:
        for status in msg.status:
            statuses[status.name] = {kv.key: kv.value for kv in status.values}
            if watching.is_set() and status.name.endswith(": alignment"):
                floors_s.extend(float(kv.value) for kv in status.values if kv.key.startswith("transport_floor_s."))
            if watching.is_set() and status.name.endswith(": lag"):
                values = {kv.key: kv.value for kv in status.values}
                lag_reports.append((time.time_ns(), status.level[0] if isinstance(status.level, bytes) else status.level,
                                    float(values.get("max_lag_s", 0.0))))

    lag_reports: list[tuple[int, int, float]] = []  # (arrival, level, largest lag since the last report)

    def on_summary(msg: DivergenceSummary) -> None:
        if watching.is_set():
            lag_reports.append((time.time_ns(), 1 if msg.lag_s > 0.5 else 0, float(msg.lag_s)))

    qos = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
    node.create_subscription(JointDivergence, "/divergence/joints", on_joints, qos)
    node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, qos)
    node.create_subscription(DivergenceSummary, "/divergence/summary", on_summary, qos)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    with tempfile.TemporaryDirectory(prefix="live_load_") as out_dir:
        monitor = _start(["-m", "sim_real_bridge.nodes.divergence_monitor", "--ros-args",
                          "-p", f"output_dir:={out_dir}",
                          *(x for p in monitor_params or [] for x in ("-p", p))], env)
        time.sleep(3.0)  # start-up and discovery
        watching.set()
        pub_times_path = str(Path(out_dir) / "pub_times.npy")
        probe = _start([__file__, "--role", "probe", "--duration-s", str(duration_s)], env)
        monitor_run = _publish_and_measure(monitor.pid, duration_s, rate_hz, env, pub_times_path)
        machine = _read_json_line(probe, "probe", 30.0)["probe"]
        probe.wait(timeout=10)
        pub_times = np.load(pub_times_path)
        time.sleep(2.5)  # let the last /diagnostics (1 Hz) report the final counts
        watching.clear()
        _stop(monitor)
        monitor_log = _log_text(monitor)
        events_path = Path(out_dir) / "events.jsonl"
        logged = [json.loads(line) for line in events_path.read_text().splitlines()] if events_path.is_file() else []
        summary_path = Path(out_dir) / "monitor_summary.json"
        monitor_load = json.loads(summary_path.read_text()).get("load", {}) if summary_path.is_file() else {}
    executor.shutdown()
    node.destroy_node()
    rclpy.shutdown()

    published = monitor_run["published_per_topic"] * len(TOPICS)
    accepted = 0
    per_topic = {}
    for topic in TOPICS:
        values = statuses.get(f"divergence_monitor: {topic}", {})
        got = int(values.get("messages", 0)) - int(values.get("refused", 0))
        per_topic[topic] = got
        accepted += got
    # Only grid times inside the publishing window: after it, the engine analyses the
    # stalled streams once its horizon has passed, which is not a latency.
    # The engine maps a stamp s to s + floor (floor: that side's transport floor, the
    # smallest receive delay, which it reports in /diagnostics) and analyses grid time t
    # once every stream holds a sample mapped at or after t: the pair covering t is
    # sample k, the first with stamp >= t - floor. Stamps and grid times are whole
    # periods of the system clock, so any floor in [0, period) gives the same k; a
    # larger floor reported falls back to the first with stamp >= t - period, an
    # earlier sample (an upper bound). Sample k reached the monitor no earlier than it
    # was published: output arrival minus that publication bounds the latency above.
    first, period = monitor_run["start_stamp_ns"], monitor_run["period_ns"]
    floor_max_ns = int(max(floors_s) * 1e9) if floors_s else period
    floor_ns = floor_max_ns if 0 <= floor_max_ns < period else period
    lat_list, upper_list = [], []
    for stamp, arrival in outputs:
        k = -(-(stamp - floor_ns - first) // period)
        if 0 <= k < pub_times.size - 2 and stamp <= first + (pub_times.size - 2) * period:
            lat_list.append(arrival - pub_times[k])
            upper_list.append(arrival - stamp)
    lat = np.asarray(lat_list, dtype=float) * 1e-6
    from_stamp = np.asarray(upper_list, dtype=float) * 1e-6
    bare_cpu = bare_run["listener_cpu_s"]
    return {
        "monitor_cpu_over_bare": monitor_run["listener_cpu_s"] / bare_cpu if bare_cpu > 0 else None,
        "p99_latency_ms": float(np.percentile(lat, 99)) if lat.size else None,
        "dropped": published - accepted,
        "monitor_cpu_s": monitor_run["listener_cpu_s"],
        "bare_cpu_s": bare_cpu,
        "monitor_cpu_share": monitor_run["listener_cpu_s"] / monitor_run["listener_wall_s"],
        "bare_cpu_share": bare_cpu / bare_run["listener_wall_s"],
        "median_latency_ms": float(np.median(lat)) if lat.size else None,
        "max_latency_ms": float(np.max(lat)) if lat.size else None,
        "joint_outputs": int(lat.size),
        "joint_outputs_total": len(outputs),
        "max_silence_s": _max_silence_s([a for _, a in outputs], monitor_run["window_ns"]),
        "silences_over_half_s": _silences([a for _, a in outputs], monitor_run["window_ns"], 0.5),
        # The same from when the monitor published (a silence here is the monitor's, not the transport's).
        "max_silence_at_publication_s": _max_silence_s(sources, monitor_run["window_ns"]),
        "published": published,
        "monitor_accepted_per_topic": per_topic,
        "bare_received": sum(bare_counts.values()),
        "bare_dropped": bare_run["published_per_topic"] * len(TOPICS) - sum(bare_counts.values()),
        "achieved_rate_hz": {"bare_phase": bare_run["achieved_rate_hz"],
                             "monitor_phase": monitor_run["achieved_rate_hz"]},
        "target_rate_hz": rate_hz,
        # Other processes share the cores: the figures above depend on this.
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "machine_stalls": machine,
        "duration_s": duration_s,
        "monitor_exit": monitor.returncode,
        "monitor_events": [{k: e.get(k) for k in ("action", "category", "kind", "start_s", "evidence")}
                           for e in logged if e.get("type") == "event"],
        "transport_floor_max_ms": floor_max_ns * 1e-6 if floors_s else None,
        "p99_latency_from_stamp_ms": float(np.percentile(from_stamp, 99)) if from_stamp.size else None,
        "publisher_lateness_p99_ms": float(np.percentile(
            (pub_times - (first + period * np.arange(pub_times.size))) * 1e-6, 99)) if pub_times.size else None,
        "latency_percentiles_ms": {str(q): float(np.percentile(lat, q)) for q in (50, 90, 95, 99, 99.9)} if lat.size else {},
        "monitor_log_tail": monitor_log.splitlines()[-3:] if monitor.returncode else [],
        **_load_figures(outputs, lag_reports, monitor_load, first + (pub_times.size - 1) * period),
    }


def _load_figures(outputs: list[tuple[int, int]], lag_reports: list[tuple[int, int, float]],
                  monitor_load: dict, data_end_ns: int) -> dict:
    """Lag and gaps as this process saw them, against what the monitor reported.

    ``observed_lag_s``: before each /divergence/joints message, its arrival minus the grid
    time of the previous one (all on the system clock): the lag of what was published,
    which the lag of what was analysed can only exceed. Each stretch where it exceeded
    0.5 s must be followed within REPORT_WITHIN_S by a /diagnostics lag status of WARN or
    ERROR or a /divergence/summary whose lag exceeded 0.5 s (``lag_reported``).
    ``gaps_observed``: grid times with data (from the first joints message to the last
    sample published) that never came out; ``gaps_reported``: exactly those the monitor
    listed as dropped in that span (its gaps carry their grid times on the same clock).
    """
    figures: dict = {"max_lag_s": monitor_load.get("max_lag_s"), "behind_share": monitor_load.get("behind_share"),
                     "gaps_dropped": monitor_load.get("dropped_grid_times"), "monitor_gaps": monitor_load.get("gaps"),
                     "monitor_load": {k: monitor_load.get(k) for k in (
                         "behind_mode_s", "inputs_taken_after_stalls", "inputs_skipped_behind", "drains_cut_short")}}
    if len(outputs) < 2:
        return {**figures, "lag_reported": None, "gaps_reported": None}
    stamps = [t for t, _ in outputs]
    arrivals = [a for _, a in outputs]
    lags = [(arrivals[i + 1], (arrivals[i + 1] - stamps[i]) * 1e-9) for i in range(len(outputs) - 1)]
    late = [(at, lag) for at, lag in lags if lag > 0.5]
    warned = [when for when, level, _ in lag_reports if level >= 1]
    unreported = [at for at, lag in late
                  if not any(at - 1e9 * lag <= when <= at + REPORT_WITHIN_S * 1e9 for when in warned)]
    grid_ns = min(b - a for a, b in zip(sorted(stamps), sorted(stamps)[1:]) if b > a)
    unique = sorted(set(stamps))
    # Grid times with data (from the first output to the last sample published) never output,
    # against those the monitor dropped in the same span.
    last_ns = min(data_end_ns, max(unique[-1], max((g["last_grid_ns"] for g in monitor_load.get("gaps", [])),
                                                   default=unique[-1])))
    expected = set(range(unique[0], last_ns + 1, grid_ns))
    missing = expected - set(unique)
    dropped = {t for g in monitor_load.get("gaps", []) for t in range(g["first_grid_ns"], g["last_grid_ns"] + 1, grid_ns)}
    observed_gaps = len(missing)
    figures.update({
        "observed_max_lag_s": max(lag for _, lag in lags), "late_outputs": len(late),
        "lag_reported": not unreported, "lag_unreported_outputs": len(unreported),
        # [s from the first output, lag s] of the late outputs no report covered, and when reports warned.
        "lag_unreported": [[round((at - arrivals[0]) * 1e-9, 2), round(lag, 3)] for at, lag in late
                           if at in set(unreported)][:20],
        "lag_warned_at_s": [round((when - arrivals[0]) * 1e-9, 2) for when in warned][:40],
        "gaps_observed": int(observed_gaps),
        "gaps_reported": missing == (dropped & expected),
        "gaps_missing_not_dropped": len(missing - dropped), "gaps_dropped_but_output": len(dropped & set(unique)),
        # [first, last] grid time (s from the first output) of each run of grid times missing but not dropped.
        "missing_not_dropped_at_s": _runs_s(sorted(missing - dropped), grid_ns, unique[0])[:20],
    })
    return figures


def _runs_s(times_ns: list[int], grid_ns: int, origin_ns: int) -> list[list[float]]:
    """[first, last] (s from origin_ns) of each run of consecutive grid times in times_ns (sorted)."""
    runs: list[list[int]] = []
    for t in times_ns:
        if runs and t - runs[-1][1] == grid_ns:
            runs[-1][1] = t
        else:
            runs.append([t, t])
    return [[round((a - origin_ns) * 1e-9, 2), round((b - origin_ns) * 1e-9, 2)] for a, b in runs]


def _silences(arrivals_ns: list[int], window_ns: tuple[int, int], longer_s: float) -> list[list[float]]:
    """[start (s from the publishing window's start), length (s)] of each silence of the
    joints output longer than longer_s (from the first output on)."""
    start, end = window_ns
    edges = sorted(a for a in arrivals_ns if start <= a <= end) + [end]
    return [[round((a - start) * 1e-9, 2), round((b - a) * 1e-9, 2)] for a, b in zip(edges, edges[1:])
            if b - a > longer_s * 1e9]


def _max_silence_s(arrivals_ns: list[int], window_ns: tuple[int, int]) -> float | None:
    """Longest time without a /divergence/joints message during the publishing window,
    from the first output on (start-up excluded) to the window's end."""
    start, end = window_ns
    inside = sorted(a for a in arrivals_ns if start <= a <= end)
    if not inside:
        return None
    edges = inside + [end]
    return max(b - a for a, b in zip(edges, edges[1:])) * 1e-9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--rate-hz", type=float, default=1000.0)
    parser.add_argument("--monitor-param", action="append", default=[], metavar="NAME:=VALUE",
                        help="extra monitor parameter (repeatable)")
    parser.add_argument("--pub-times", default="", help=argparse.SUPPRESS)
    parser.add_argument("--hog", type=int, default=0, metavar="N",
                        help="run N busy-loop processes beside the listener in both phases")
    parser.add_argument("--role", choices=("bench", "publisher", "bare", "probe", "hog"), default="bench",
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "publisher":
        run_publisher(args.duration_s, args.rate_hz, args.pub_times or None)
        return 0
    if args.role == "bare":
        run_bare()
        return 0
    if args.role == "probe":
        run_probe(args.duration_s)
        return 0
    if args.role == "hog":
        run_hog()
        return 0
    result = run_bench(args.duration_s, args.rate_hz, args.monitor_param, args.hog)
    result["monitor_params"] = args.monitor_param
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
