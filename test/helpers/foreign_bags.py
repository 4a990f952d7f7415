"""Recordings other tools write, for tests: not ours, not rosbag2's.

- :func:`write_teleop_mcap`: a bare ``.mcap`` (no metadata.yaml, no rosbag2 metadata
  record, zstd chunks) of a GELLO / SO-100 / ALOHA style teleoperation rig: the leader
  arm a person moves and the follower arm that tracks it, joint states only, joint
  names with a per-arm prefix, position encoders that hold one value while a joint is
  idle, and bytes after each CDR payload (some serializers pad messages).
- :func:`write_stack_mcap`: a simulator and its robot as a ros2_control stack records
  them (Gazebo, MuJoCo, Isaac Sim topic names from config/stacks/): joint states on
  the simulator's clock and the robot's, in different joint orders, the mirrored
  commands, no wrench, trailing bytes, no metadata.yaml.
- :func:`write_json_mcap`: an MCAP whose messages are JSON (as Foxglove bridges write).

``edit`` (of both rig writers) sees every JointState before it is written, as
``edit(arm, index, fields)`` with fields ``log_ns``, ``stamp_ns``, ``names``,
``position``, ``velocity``; it returns the fields to write (changed or not), or None to
leave the message out: bad messages, strays, gaps.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from mcap.writer import CompressionType, Writer
from rosbags.typesys.store import Typestore

from sim_real_bridge.capture.typestore import build_typestore

JOINT_STATE = "sensor_msgs/msg/JointState"
NS_PER_S = 1_000_000_000
TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
#: edit(arm, index, fields) -> fields to write, or None to drop the message.
MessageEdit = Callable[[str, int, dict[str, Any]], "dict[str, Any] | None"]
#: Joints of the arms these rigs use, without the per-arm prefix.
ARM_JOINTS = {
    7: ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper"),  # GELLO on a 6-axis arm, ALOHA
    6: ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"),  # SO-100/101
}


@dataclass(frozen=True)
class TeleopRecording:
    """What :func:`write_teleop_mcap` wrote (for the tests to check against).

    Attributes:
        path: the .mcap file.
        leader_topic, follower_topic: the two JointState topics.
        leader_names, follower_names: joint names as published (prefix included).
        stamp_ns: (N,) header stamps of the leader's messages (the follower's are the same instants).
        leader_q_rad, follower_q_rad: (N, J) positions as published (quantized).
        trailing_bytes: bytes appended to each CDR payload.
    """

    path: Path
    leader_topic: str
    follower_topic: str
    leader_names: tuple[str, ...]
    follower_names: tuple[str, ...]
    stamp_ns: np.ndarray
    leader_q_rad: np.ndarray
    follower_q_rad: np.ndarray
    trailing_bytes: int


def joint_state_cdr(store: Typestore, stamp_ns: int, names: tuple[str, ...], position: np.ndarray,
                    velocity: np.ndarray | None = None, effort: np.ndarray | None = None, frame_id: str = "",
                    trailing: bytes = b"") -> bytes:
    """A JointState's CDR bytes (rosbags' serializer), with ``trailing`` bytes after them."""
    types = store.types
    header = types["std_msgs/msg/Header"](
        types["builtin_interfaces/msg/Time"](stamp_ns // NS_PER_S, stamp_ns % NS_PER_S), frame_id)
    empty = np.zeros(0)
    msg = types[JOINT_STATE](header, list(names), np.asarray(position, float),
                             empty if velocity is None else np.asarray(velocity, float),
                             empty if effort is None else np.asarray(effort, float))
    return bytes(store.serialize_cdr(msg, JOINT_STATE)) + trailing


def _add_joint_state(writer: Writer, channel: int, store: Typestore, arm: str, index: int, fields: dict[str, Any],
                     trailing: bytes, edit: MessageEdit | None) -> None:
    """Write one JointState (after ``edit``, which may drop it)."""
    if edit is not None:
        edited = edit(arm, index, dict(fields))
        if edited is None:
            return
        fields = edited
    data = joint_state_cdr(store, int(fields["stamp_ns"]), tuple(fields["names"]), fields["position"],
                           fields.get("velocity"), trailing=trailing)
    writer.add_message(channel, int(fields["log_ns"]), data, int(fields["log_ns"]))


def _leader_motion(rng: np.random.Generator, t_s: np.ndarray, joints: int) -> np.ndarray:
    """(N, J) joint angles of a person moving the leader: smooth strokes, with every joint
    idle (held still) for stretches."""
    q = np.zeros((t_s.size, joints))
    for j in range(joints):
        freq = rng.uniform(0.1, 0.4, size=3)
        phase = rng.uniform(0, 2 * np.pi, size=3)
        q[:, j] = sum(0.3 * np.sin(2 * np.pi * f * t_s + p) for f, p in zip(freq, phase, strict=True))
        idle = np.sin(2 * np.pi * rng.uniform(0.05, 0.1) * t_s + rng.uniform(0, 6)) > 0.3
        for run in np.split(np.arange(t_s.size), np.flatnonzero(np.diff(idle)) + 1):
            if idle[run[0]]:
                q[run, j] = q[run[0], j]
    return q


def write_teleop_mcap(path: Path, *, joints: int = 7, duration_s: float = 6.0, rate_hz: float = 100.0,
                      seed: int = 0, trailing_bytes: int = 4, leader_prefix: str = "leader_",
                      follower_prefix: str = "follower_", leader_topic: str = "/leader/joint_states",
                      follower_topic: str = "/follower/joint_states", follower_lag_s: float = 0.03,
                      encoder_step_rad: float = 2 * np.pi / 4096, start_ns: int = 1_700_000_000 * NS_PER_S,
                      edit: MessageEdit | None = None) -> TeleopRecording:
    """Write a leader/follower teleoperation recording as a bare MCAP file.

    The follower tracks the leader ``follower_lag_s`` late with a small error; both
    arms' encoders quantize to ``encoder_step_rad`` (so an idle joint repeats one value).
    The leader publishes positions only; the follower positions and velocities.
    """
    store = build_typestore()
    rng = np.random.default_rng(seed)
    base = ARM_JOINTS.get(joints) or tuple(f"joint{j + 1}" for j in range(joints))
    leader_names = tuple(f"{leader_prefix}{n}" for n in base)
    follower_names = tuple(f"{follower_prefix}{n}" for n in base)
    count = int(duration_s * rate_hz)
    t_s = np.arange(count) / rate_hz
    stamp_ns = start_ns + np.round(t_s * NS_PER_S).astype(np.int64)
    leader = _leader_motion(rng, t_s, joints)
    lagged = np.stack([np.interp(t_s - follower_lag_s, t_s, leader[:, j]) for j in range(joints)], axis=1)
    follower = lagged + 0.002 * np.sin(2 * np.pi * 1.3 * t_s)[:, None]
    leader_q = np.round(leader / encoder_step_rad) * encoder_step_rad
    follower_q = np.round(follower / encoder_step_rad) * encoder_step_rad
    follower_dq = np.gradient(follower_q, t_s, axis=0)
    pad = bytes(range(1, trailing_bytes + 1))
    with path.open("wb") as stream:
        writer = Writer(stream, chunk_size=64 * 1024, compression=CompressionType.ZSTD)
        writer.start(profile="ros2", library="teleop-rig-recorder 0.3")
        schema = writer.register_schema(JOINT_STATE, "ros2msg", store.generate_msgdef(JOINT_STATE)[0].encode())
        channels = {topic: writer.register_channel(topic, "cdr", schema) for topic in (leader_topic, follower_topic)}
        for i, stamp in enumerate(stamp_ns.tolist()):
            recv = stamp + int(rng.integers(200_000, 900_000))
            for arm, topic, fields in (
                    ("leader", leader_topic, {"log_ns": recv, "stamp_ns": stamp, "names": leader_names,
                                              "position": leader_q[i], "velocity": None}),
                    ("follower", follower_topic, {"log_ns": recv + 50_000, "stamp_ns": stamp,
                                                  "names": follower_names, "position": follower_q[i],
                                                  "velocity": follower_dq[i]})):
                _add_joint_state(writer, channels[topic], store, arm, i, fields, pad, edit)
        writer.finish()
    return TeleopRecording(path, leader_topic, follower_topic, leader_names, follower_names, stamp_ns, leader_q,
                           follower_q, trailing_bytes)


def write_json_mcap(path: Path, *, count: int = 20, topic: str = "/joint_states",
                    start_ns: int = 1_700_000_000 * NS_PER_S) -> Path:
    """An MCAP of JointState-like JSON messages with a JSON schema (no ROS 2 profile)."""
    schema = {"type": "object", "properties": {"name": {"type": "array"}, "position": {"type": "array"}}}
    with path.open("wb") as stream:
        writer = Writer(stream)
        writer.start(profile="", library="json-bridge")
        schema_id = writer.register_schema("sensor_msgs/msg/JointState", "jsonschema", json.dumps(schema).encode())
        channel = writer.register_channel(topic, "json", schema_id)
        for i in range(count):
            t = start_ns + i * 10_000_000
            data = json.dumps({"name": ["a", "b"], "position": [0.1 * i, -0.1 * i]}).encode()
            writer.add_message(channel, t, data, t)
        writer.finish()
    return path


@dataclass(frozen=True)
class StackTopics:
    """The topics a sim/robot stack publishes (as config/stacks/<name>.yaml maps them)."""

    sim_joint_states: str
    real_joint_states: str
    sim_commands: str
    real_commands: str


_CONTROLLER_TOPICS = {"sim_commands": "/sim/joint_trajectory_controller/joint_trajectory",
                      "real_commands": "/joint_trajectory_controller/joint_trajectory"}
#: Each stack's topics: joint_state_broadcaster publishes <controller_manager namespace>/joint_states;
#: Isaac Sim's ROS2 Publish Joint State node, here in namespace isaac.
STACKS = {
    "ros2_control_gz": StackTopics("/sim/joint_states", "/joint_states", **_CONTROLLER_TOPICS),
    "mujoco_ros2_control": StackTopics("/sim/joint_states", "/joint_states", **_CONTROLLER_TOPICS),
    "isaac_sim": StackTopics("/isaac/joint_states", "/joint_states", **_CONTROLLER_TOPICS),
}
UR_JOINTS = ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint",
             "wrist_3_joint")


def _trajectory_cdr(store: Typestore, names: tuple[str, ...], targets: np.ndarray, step_s: float) -> bytes:
    """A JointTrajectory with a zero stamp (start on receipt), one point per target row."""
    types = store.types
    header = types["std_msgs/msg/Header"](types["builtin_interfaces/msg/Time"](0, 0), "")
    empty = np.zeros(0)
    points = []
    for k, target in enumerate(targets, start=1):
        sec, nanosec = divmod(int(round(k * step_s * NS_PER_S)), NS_PER_S)
        points.append(types["trajectory_msgs/msg/JointTrajectoryPoint"](
            np.asarray(target, float), empty, empty, empty, types["builtin_interfaces/msg/Duration"](sec, nanosec)))
    msg = types[TRAJECTORY](header, list(names), points)
    return bytes(store.serialize_cdr(msg, TRAJECTORY))


def write_stack_mcap(path: Path, stack: str, *, duration_s: float = 5.0, rate_hz: float = 100.0, seed: int = 0,
                     real_lag_s: float = 0.02, real_offset_rad: float = 0.01, trailing_bytes: int = 4,
                     sim_clock_start_s: float = 12.5, wall_start_ns: int = 1_700_000_000 * NS_PER_S,
                     edit: MessageEdit | None = None) -> Path:
    """A simulator and its robot as a ros2_control stack records them (see the module docstring).

    The simulator follows one commanded trajectory, stamping on simulation time
    (``sim_clock_start_s`` at the start); the robot follows it ``real_lag_s`` late with
    ``real_offset_rad`` on every joint, stamping on the wall clock, its joints in
    alphabetical order (as a broadcaster may list them).
    """
    topics = STACKS[stack]
    store = build_typestore()
    rng = np.random.default_rng(seed)
    count = int(duration_s * rate_hz)
    t_s = np.arange(count) / rate_hz
    sim_q = 0.4 * np.sin(2 * np.pi * 0.3 * t_s[:, None] + np.arange(len(UR_JOINTS)))
    real_q = np.stack([np.interp(t_s - real_lag_s, t_s, sim_q[:, j]) for j in range(len(UR_JOINTS))], axis=1)
    real_q += real_offset_rad
    order = np.argsort(UR_JOINTS)
    real_names = tuple(UR_JOINTS[j] for j in order)
    pad = bytes(range(1, trailing_bytes + 1))
    with path.open("wb") as stream:
        writer = Writer(stream, chunk_size=64 * 1024, compression=CompressionType.ZSTD)
        writer.start(profile="ros2", library="stack-recorder")
        schemas = {t: writer.register_schema(t, "ros2msg", store.generate_msgdef(t)[0].encode())
                   for t in (JOINT_STATE, TRAJECTORY)}
        joint_channels = {arm: writer.register_channel(topic, "cdr", schemas[JOINT_STATE])
                          for arm, topic in (("sim", topics.sim_joint_states), ("real", topics.real_joint_states))}
        command = _trajectory_cdr(store, UR_JOINTS, sim_q[:: int(rate_hz)], 1.0)
        for topic in (topics.sim_commands, topics.real_commands):
            channel = writer.register_channel(topic, "cdr", schemas[TRAJECTORY])
            writer.add_message(channel, wall_start_ns - 5_000_000, command, wall_start_ns - 5_000_000)
        for i, t in enumerate(t_s.tolist()):
            wall_ns = wall_start_ns + int(round(t * NS_PER_S))
            sim_stamp = int(round((sim_clock_start_s + t) * NS_PER_S))
            recv = wall_ns + int(rng.integers(300_000, 1_500_000))
            velocity = np.gradient(sim_q, t_s, axis=0)[i]
            _add_joint_state(writer, joint_channels["sim"], store, "sim", i, {
                "log_ns": recv, "stamp_ns": sim_stamp, "names": UR_JOINTS, "position": sim_q[i],
                "velocity": velocity}, pad, edit)
            _add_joint_state(writer, joint_channels["real"], store, "real", i, {
                "log_ns": recv + 80_000, "stamp_ns": wall_ns, "names": real_names, "position": real_q[i, order],
                "velocity": velocity[order]}, pad, edit)
        writer.finish()
    return path
