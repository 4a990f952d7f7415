"""Recordings other tools write, for tests: not ours, not rosbag2's.

- :func:`write_teleop_mcap`: a bare ``.mcap`` (no metadata.yaml, no rosbag2 metadata
  record, zstd chunks) of a GELLO / SO-100 / ALOHA style teleoperation rig: the leader
  arm a person moves and the follower arm that tracks it, joint states only, joint
  names with a per-arm prefix, position encoders that hold one value while a joint is
  idle, and bytes after each CDR payload (some serializers pad messages).
- :func:`write_json_mcap`: an MCAP whose messages are JSON (as Foxglove bridges write).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from mcap.writer import CompressionType, Writer
from rosbags.typesys.store import Typestore

from sim_real_bridge.capture.typestore import build_typestore

JOINT_STATE = "sensor_msgs/msg/JointState"
NS_PER_S = 1_000_000_000
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
                      ) -> TeleopRecording:
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
            writer.add_message(channels[leader_topic], recv, joint_state_cdr(
                store, stamp, leader_names, leader_q[i], trailing=pad), recv)
            writer.add_message(channels[follower_topic], recv + 50_000, joint_state_cdr(
                store, stamp, follower_names, follower_q[i], follower_dq[i], trailing=pad), recv + 50_000)
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
