"""Synthetic recorded bags shaped like a ``demo --record`` recording (tests and benches).

Both robots follow the same smooth 7-joint motion; the real side can lag, carry an
offset, and be pushed (an external force on its wrist with the matching joint
deflection). Streams and rates are those of the demo graph: joint_states and wrench
at 500 Hz, ee_pose and object_pose at 100 Hz per side, mirrored commands on
``/sim/joint_trajectory`` and ``/real/joint_trajectory``, labels on
``/reality/injections``. Log time is stamp plus a small transport delay, as the
recorder writes it.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from rosbags.rosbag2 import StoragePlugin, Writer

from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.conversions.divergence_msgs import rosbags_default

NS_PER_S = 1_000_000_000
JOINTS: tuple[str, ...] = tuple(f"joint{i}" for i in range(1, 8))
#: One message of a bag: (topic, msgtype, log time ns, rosbags message).
BagMessage = tuple[str, str, int, Any]


@dataclass
class SyntheticRun:
    """What to write.

    Attributes:
        duration_s: recorded time.
        sides: which sides' robot streams to write.
        offset_rad: constant position offset of the real joints.
        delay_s: how far the real motion lags the sim motion.
        push: (start_s, end_s, force_n) external push on the real wrist, or None.
        injections: labels published on /reality/injections (category, kind, start_s, end_s).
        scenario: scenario name in the labels.
        commands: write the mirrored commands.
        poses: write ee_pose and object_pose.
        start_ns: log time of the first message.
        joint_rate_hz, wrench_rate_hz, pose_rate_hz: stream rates.
        seed: noise seed.
    """

    duration_s: float = 6.0
    sides: tuple[str, ...] = ("sim", "real")
    offset_rad: float = 0.0
    delay_s: float = 0.0
    push: tuple[float, float, float] | None = None
    injections: list[dict[str, Any]] = field(default_factory=list)
    scenario: str = "synthetic"
    commands: bool = True
    poses: bool = True
    start_ns: int = 1_700_000_000 * NS_PER_S
    joint_rate_hz: float = 500.0
    wrench_rate_hz: float = 500.0
    pose_rate_hz: float = 100.0
    seed: int = 0


def _motion(t_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Joint positions and velocities (k, 7) of the shared motion."""
    phase = np.arange(len(JOINTS)) * 0.7
    freq = 0.25 + 0.05 * np.arange(len(JOINTS))
    q = 0.4 * np.sin(2 * np.pi * freq * t_s[:, None] + phase)
    qd = 0.4 * 2 * np.pi * freq * np.cos(2 * np.pi * freq * t_s[:, None] + phase)
    return q, qd


def _stamp(types: Any, t_ns: int) -> Any:
    return types["builtin_interfaces/msg/Time"](sec=int(t_ns // NS_PER_S), nanosec=int(t_ns % NS_PER_S))


def _header(types: Any, t_ns: int, frame: str) -> Any:
    return types["std_msgs/msg/Header"](stamp=_stamp(types, t_ns), frame_id=frame)


def _stamps(run: SyntheticRun, rate_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """A stream's stamps (ns) from 50 ms after the start, and their seconds since the start."""
    n = int(run.duration_s * rate_hz)
    stamps = run.start_ns + 50_000_000 + (np.arange(n) * NS_PER_S / rate_hz).astype(np.int64)
    return stamps, (stamps - run.start_ns) * 1e-9


def _pushed(run: SyntheticRun, t_s: np.ndarray, side: str) -> np.ndarray:
    """1.0 where the real wrist is being pushed, else 0.0."""
    push = run.push
    if side != "real" or push is None:
        return np.zeros_like(t_s)
    return ((t_s >= push[0]) & (t_s < push[1])).astype(float)


def messages(run: SyntheticRun) -> list[BagMessage]:
    """Every message of the run as (topic, msgtype, log time ns, rosbags message), by log time."""
    store = build_typestore()
    out: list[BagMessage] = []
    for side in run.sides:
        # One generator per side, so a one-sided bag holds the same samples as a two-sided one.
        rng = np.random.default_rng([run.seed, 0 if side == "sim" else 1])
        latency_ns = 300_000 if side == "sim" else 700_000
        out += _joint_state_messages(store.types, run, side, rng, latency_ns)
        out += _wrench_messages(store.types, run, side, rng, latency_ns)
        if run.poses:
            out += _pose_messages(store.types, run, side, latency_ns)
    if run.commands:
        out += _command_messages(store, run)
    if run.injections:
        labels = [(inj["category"], inj["kind"], inj["start_s"], inj["end_s"]) for inj in run.injections]
        out += _label_messages(store, run.scenario, labels, run.duration_s, run.start_ns)
    out.sort(key=lambda item: item[2])
    return out


def _joint_state_messages(types: Any, run: SyntheticRun, side: str, rng: np.random.Generator,
                          latency_ns: int) -> list[BagMessage]:
    stamps, t_s = _stamps(run, run.joint_rate_hz)
    q, qd = _motion(t_s - (run.delay_s if side == "real" else 0.0))
    pushed = _pushed(run, t_s, side)
    if side == "real":
        q = q + run.offset_rad + 0.03 * pushed[:, None] * (np.arange(len(JOINTS)) < 3)
    q = q + rng.normal(0, 1e-4, q.shape)
    effort = 2.0 * np.sin(q) + (8.0 * pushed[:, None] if side == "real" else 0.0)
    out = []
    for i in range(stamps.size):
        msg = types["sensor_msgs/msg/JointState"](
            header=_header(types, int(stamps[i]), ""), name=list(JOINTS), position=q[i], velocity=qd[i],
            effort=effort[i])
        out.append((f"/{side}/joint_states", "sensor_msgs/msg/JointState", int(stamps[i]) + latency_ns, msg))
    return out


def _wrench_messages(types: Any, run: SyntheticRun, side: str, rng: np.random.Generator,
                     latency_ns: int) -> list[BagMessage]:
    stamps, t_s = _stamps(run, run.wrench_rate_hz)
    n = stamps.size
    force = np.tile([0.0, 0.0, -9.0], (n, 1)) + rng.normal(0, 0.05, (n, 3))
    if run.push is not None:
        force[:, 0] += run.push[2] * _pushed(run, t_s, side)
    torque = rng.normal(0, 0.01, (n, 3))
    vec = types["geometry_msgs/msg/Vector3"]
    out = []
    for i in range(n):
        msg = types["geometry_msgs/msg/WrenchStamped"](
            header=_header(types, int(stamps[i]), "tool0"),
            wrench=types["geometry_msgs/msg/Wrench"](force=vec(*force[i]), torque=vec(*torque[i])))
        out.append((f"/{side}/wrench", "geometry_msgs/msg/WrenchStamped", int(stamps[i]) + latency_ns + 20_000, msg))
    return out


def _pose_messages(types: Any, run: SyntheticRun, side: str, latency_ns: int) -> list[BagMessage]:
    stamps, t_s = _stamps(run, run.pose_rate_hz)
    qq, _ = _motion(t_s - (run.delay_s if side == "real" else 0.0))
    out = []
    for which, base in (("ee_pose", np.array([0.4, 0.0, 0.3])), ("object_pose", np.array([0.5, 0.1, 0.02]))):
        for i in range(stamps.size):
            p = base + (0.1 * qq[i, :3] if which == "ee_pose" else 0.0)
            pose = types["geometry_msgs/msg/Pose"](
                position=types["geometry_msgs/msg/Point"](*p),
                orientation=types["geometry_msgs/msg/Quaternion"](0.0, 0.0, 0.0, 1.0))
            msg = types["geometry_msgs/msg/PoseStamped"](header=_header(types, int(stamps[i]), "world"), pose=pose)
            out.append((f"/{side}/{which}", "geometry_msgs/msg/PoseStamped", int(stamps[i]) + latency_ns, msg))
    return out


def _command_messages(store: Any, run: SyntheticRun) -> list[BagMessage]:
    """A hold-at-zero trajectory every 2 s, mirrored to both sides."""
    out = []
    for k in range(int(run.duration_s // 2) + 1):
        t_ns = run.start_ns + k * 2 * NS_PER_S
        msg = rosbags_default(store, "trajectory_msgs/msg/JointTrajectory")
        msg.joint_names = list(JOINTS)
        point = rosbags_default(store, "trajectory_msgs/msg/JointTrajectoryPoint")
        point.positions = np.zeros(len(JOINTS))
        point.time_from_start.sec = 2
        msg.points = [point]
        for side in ("sim", "real"):
            out.append((f"/{side}/joint_trajectory", "trajectory_msgs/msg/JointTrajectory", t_ns + 100_000, msg))
    return out


def _label_messages(store: Any, scenario: str, injections: Sequence[tuple[str, str, float, float]],
                    duration_s: float, start_ns: int) -> list[BagMessage]:
    """/reality/injections every 0.5 s: each (category, kind, start_s, end_s), active or not."""
    out = []
    for k in range(int(duration_s * 2)):
        elapsed = k * 0.5
        items = []
        for category, kind, start_s, end_s in injections:
            item = rosbags_default(store, "sim_real_bridge/msg/Injection")
            item.category, item.kind = category, kind
            item.start_s, item.end_s = float(start_s), float(end_s)
            item.active = start_s <= elapsed < end_s
            items.append(item)
        msg = rosbags_default(store, "sim_real_bridge/msg/InjectionArray")
        msg.scenario, msg.elapsed_s, msg.injections = scenario, elapsed, items
        out.append(("/reality/injections", "sim_real_bridge/msg/InjectionArray",
                    start_ns + int(elapsed * NS_PER_S) + 200_000, msg))
    return out


def _write(path: Path, items: Sequence[BagMessage], storage: str,
           topics: dict[str, str] | None = None) -> None:
    store = build_typestore()
    plugin = StoragePlugin.SQLITE3 if storage == "sqlite3" else StoragePlugin.MCAP
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        conns = {}
        for topic, msgtype in (topics or {t: m for t, m, _, _ in items}).items():
            conns[topic] = writer.add_connection(topic, msgtype, typestore=store)
        for topic, msgtype, log_ns, msg in items:
            writer.write(conns[topic], log_ns, store.serialize_cdr(msg, msgtype))


def simulated_messages(scenario: str | Path, duration_s: float | None = None,
                       start_ns: int = 1_700_000_000 * NS_PER_S, robot: str | None = None) -> list[BagMessage]:
    """A demo-like recording made in-process: MuJoCo sim and stand-in, no ROS.

    The simulator and the stand-in (with the scenario's injections) run the scenario's
    task headless on the scenario's robot; their samples become the robot topics, the
    program's segments the mirrored commands, and the injections the labels.

    Args:
        scenario: a built-in scenario name or a scenario file.
        duration_s: how long to run (default: the scenario's duration).
        start_ns: log time of the recording's start.
        robot: run on this built-in robot instead of the scenario's (``load_scenario``).

    Returns:
        (topic, msgtype, log time ns, rosbags message) by log time.
    """
    from sim_real_bridge.sim.physics import ArmPhysics
    from sim_real_bridge.sim.reality import RealityModel
    from sim_real_bridge.sim.robot import SimulatedRobot, run_headless
    from sim_real_bridge.sim.scenario import load_scenario
    from sim_real_bridge.sim.tasks import build_program

    spec = load_scenario(scenario, robot=robot)
    duration = float(duration_s or spec.duration_s)
    program = build_program(spec.task, duration, spec.robot, spec.idle)
    physics = ArmPhysics(robot=spec.robot)
    logs = {
        "sim": run_headless(SimulatedRobot(ArmPhysics(robot=spec.robot)), program, duration),
        "real": run_headless(SimulatedRobot(physics, reality=RealityModel(physics, spec, np.random.default_rng(spec.seed))),
                             program, duration),
    }
    store = build_typestore()
    out: list[BagMessage] = []
    for side, log in logs.items():
        out += _logged_messages(store.types, side, log, list(physics.joint_names), start_ns)
    out += _program_messages(store, program.segments, duration, start_ns)
    labels = [(inj.category, inj.kind, inj.start_s, inj.end_s) for inj in spec.injections]
    out += _label_messages(store, spec.name, labels, duration, start_ns)
    out.sort(key=lambda item: item[2])
    return out


def _logged_messages(types: Any, side: str, log: Any, names: list[str], start_ns: int) -> list[BagMessage]:
    """One side's logged samples (``run_headless``'s StreamLog) as robot topic messages."""
    latency_ns = 300_000 if side == "sim" else 700_000
    vec = types["geometry_msgs/msg/Vector3"]
    out = []
    for stream, stamps in log.stamps_ns.items():
        values = log.values[stream]
        topic = f"/{side}/{stream}"
        for i, stamp in enumerate((stamps + start_ns).tolist()):
            header = types["std_msgs/msg/Header"](stamp=_stamp(types, stamp), frame_id="")
            if stream == "joint_states":
                msgtype = "sensor_msgs/msg/JointState"
                msg = types[msgtype](header=header, name=names, position=values["position"][i],
                                     velocity=values["velocity"][i], effort=values["effort"][i])
            elif stream == "wrench":
                msgtype = "geometry_msgs/msg/WrenchStamped"
                header.frame_id = "tool0"
                msg = types[msgtype](header=header, wrench=types["geometry_msgs/msg/Wrench"](
                    force=vec(*values["force"][i]), torque=vec(*values["torque"][i])))
            else:
                msgtype = "geometry_msgs/msg/PoseStamped"
                header.frame_id = "world"
                w, x, y, z = values["orientation"][i]
                msg = types[msgtype](header=header, pose=types["geometry_msgs/msg/Pose"](
                    position=types["geometry_msgs/msg/Point"](*values["position"][i]),
                    orientation=types["geometry_msgs/msg/Quaternion"](x, y, z, w)))
            out.append((topic, msgtype, stamp + latency_ns, msg))
    return out


def _program_messages(store: Any, segments: Sequence[tuple[int, Any]], duration_s: float,
                      start_ns: int) -> list[BagMessage]:
    """The task program's segments as the mirrored commands on both sides."""
    from sim_real_bridge.conversions import divergence_msgs
    from sim_real_bridge.conversions.robot_msgs import joint_trajectory_from_data

    traj = divergence_msgs.rosbags_namespace(store, "trajectory_msgs")
    out = []
    for offset_ns, data in segments:
        if offset_ns > duration_s * NS_PER_S:
            break
        msg = joint_trajectory_from_data(traj.JointTrajectory, traj.JointTrajectoryPoint, data, stamp_ns=0)
        for side in ("sim", "real"):
            out.append((f"/{side}/joint_trajectory", "trajectory_msgs/msg/JointTrajectory",
                        start_ns + int(offset_ns) + 100_000, msg))
    return out


def write_synthetic_bag(path: Path | str, run: SyntheticRun | None = None, storage: str = "mcap",
                        split_at_s: float | None = None,
                        items: Sequence[BagMessage] | None = None) -> Path:
    """Write one rosbag2 bag directory (``storage`` "mcap" or "sqlite3").

    Args:
        path: the bag directory to create.
        run: what to synthesize (ignored when ``items`` is given).
        storage: "mcap" or "sqlite3".
        split_at_s: split into two files at this many seconds after the run's start, as
            ``ros2 bag record --max-bag-duration`` does (one metadata.yaml listing both).
        items: messages to write instead, e.g. from :func:`simulated_messages`.
    """
    path = Path(path)
    run = run or SyntheticRun()
    items = list(items) if items is not None else messages(run)
    topics = {t: m for t, m, _, _ in items}
    if split_at_s is None:
        _write(path, items, storage, topics)
        return path
    cut = run.start_ns + int(split_at_s * NS_PER_S)
    first = [i for i in items if i[2] < cut]
    second = [i for i in items if i[2] >= cut]
    part = path.with_name(f".{path.name}.part2")
    _write(path, first, storage, topics)
    _write(part, second, storage, topics)
    meta_path = path / "metadata.yaml"
    meta = yaml.safe_load(meta_path.read_text())
    meta2 = yaml.safe_load((part / "metadata.yaml").read_text())
    info, info2 = meta["rosbag2_bagfile_information"], meta2["rosbag2_bagfile_information"]
    suffix = ".db3" if storage == "sqlite3" else ".mcap"
    name2 = f"{path.name}_1{suffix}"
    shutil.move(str(part / info2["relative_file_paths"][0]), str(path / name2))
    shutil.rmtree(part)
    info["relative_file_paths"].append(name2)
    for entry in info2.get("files", []):
        info.setdefault("files", []).append({**entry, "path": name2})
    end = max(info["starting_time"]["nanoseconds_since_epoch"] + info["duration"]["nanoseconds"],
              info2["starting_time"]["nanoseconds_since_epoch"] + info2["duration"]["nanoseconds"])
    info["duration"]["nanoseconds"] = end - info["starting_time"]["nanoseconds_since_epoch"]
    info["message_count"] += info2["message_count"]
    counts2 = {t["topic_metadata"]["name"]: t["message_count"] for t in info2["topics_with_message_count"]}
    for entry in info["topics_with_message_count"]:
        entry["message_count"] += counts2.get(entry["topic_metadata"]["name"], 0)
    meta_path.write_text(yaml.safe_dump(meta, sort_keys=False))
    return path
