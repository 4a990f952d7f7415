"""Messages, bags written by rosbags' own Writer, and checks of columns against rosbags'
deserializer: the reference the bag reading tests hold our columns to."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from mcap.writer import Writer as McapWriter
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import StoragePlugin, Writer

from sim_real_bridge.offline.bags import ImuColumns, JointStateColumns, PoseColumns, WrenchColumns

S = 1_000_000_000
T0 = 1_700_000_000 * S
JS, WS, PS = "sensor_msgs/msg/JointState", "geometry_msgs/msg/WrenchStamped", "geometry_msgs/msg/PoseStamped"
NAMES = ["joint_1", "joint_2", "joint_3"]


def header(store, stamp_ns, frame_id="base_link"):
    time_cls = store.types["builtin_interfaces/msg/Time"]
    return store.types["std_msgs/msg/Header"](stamp=time_cls(sec=stamp_ns // S, nanosec=stamp_ns % S), frame_id=frame_id)


def joint_state(store, stamp_ns, rng, names=NAMES, frame_id="base_link", velocity=True, effort=True):
    n = len(names)
    return store.types[JS](
        header=header(store, stamp_ns, frame_id), name=list(names), position=rng.normal(size=n),
        velocity=rng.normal(size=n) if velocity else np.zeros(0), effort=rng.normal(size=n) if effort else np.zeros(0))


def wrench(store, stamp_ns, rng, frame_id="ft_sensor"):
    vec = store.types["geometry_msgs/msg/Vector3"]
    f, t = rng.normal(size=3), rng.normal(size=3)
    return store.types[WS](header=header(store, stamp_ns, frame_id), wrench=store.types["geometry_msgs/msg/Wrench"](
        force=vec(x=f[0], y=f[1], z=f[2]), torque=vec(x=t[0], y=t[1], z=t[2])))


def pose(store, stamp_ns, rng, frame_id="world"):
    p, q = rng.normal(size=3), rng.normal(size=4)
    q /= np.linalg.norm(q)
    return store.types[PS](header=header(store, stamp_ns, frame_id), pose=store.types["geometry_msgs/msg/Pose"](
        position=store.types["geometry_msgs/msg/Point"](x=p[0], y=p[1], z=p[2]),
        orientation=store.types["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3])))


def write_bag(store, path: Path, messages, storage=StoragePlugin.MCAP, trailing: bytes = b"") -> Path:
    """Write (topic, log_ns, msg) with rosbags' own Writer, independent of our writer."""
    with Writer(path, version=9, storage_plugin=storage) as writer:
        conns = {}
        for topic, log_ns, msg in messages:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msg.__msgtype__, typestore=store)
            writer.write(conns[topic], log_ns, bytes(store.serialize_cdr(msg, msg.__msgtype__)) + trailing)
    return path


def robot_messages(store, prefix="", n=50, seed=0, t0=T0, period=2_000_000):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = t0 + i * period
        out.append((f"{prefix}/joint_states", t + 7, joint_state(store, t, rng)))
        out.append((f"{prefix}/wrench", t + 9, wrench(store, t, rng)))
        out.append((f"{prefix}/ee_pose", t + 11, pose(store, t, rng)))
    return out


def reference(paths, topic):
    """(log_ns, msg) of a topic as rosbags' AnyReader deserializes them, by log time
    (for bags without trailing bytes, which rosbags refuses)."""
    out = []
    for path in paths:
        with AnyReader([Path(path)]) as reader:
            conns = [c for c in reader.connections if c.topic == topic]
            out += [(t, reader.deserialize(d, c.msgtype)) for c, t, d in reader.messages(connections=conns)]
    return sorted(out, key=lambda item: item[0])


def stamp_of(msg):
    return msg.header.stamp.sec * S + msg.header.stamp.nanosec


def same(a, b):
    return np.array_equal(np.asarray(a, float).view(np.uint64), np.asarray(b, float).view(np.uint64))


def assert_joint_columns(cols, ref, names=NAMES):
    assert isinstance(cols, JointStateColumns)
    assert cols.names == tuple(names)
    assert cols.recv_ns.tolist() == [t for t, _ in ref]
    assert cols.stamp_ns.tolist() == [stamp_of(m) for _, m in ref]
    for field in ("position", "velocity", "effort"):
        expected = []
        for _, m in ref:
            values = np.asarray(getattr(m, field), float)
            if values.size == 0:
                expected.append(np.full(len(names), np.nan))
            else:
                expected.append(values[[list(m.name).index(n) for n in names]])
        assert same(getattr(cols, field), expected), field


def assert_wrench_columns(cols, ref):
    assert isinstance(cols, WrenchColumns)
    assert cols.recv_ns.tolist() == [t for t, _ in ref]
    assert cols.stamp_ns.tolist() == [stamp_of(m) for _, m in ref]
    assert same(cols.force_n, [[m.wrench.force.x, m.wrench.force.y, m.wrench.force.z] for _, m in ref])
    assert same(cols.torque_nm, [[m.wrench.torque.x, m.wrench.torque.y, m.wrench.torque.z] for _, m in ref])


def assert_pose_columns(cols, ref):
    assert isinstance(cols, PoseColumns)
    assert cols.recv_ns.tolist() == [t for t, _ in ref]
    assert cols.stamp_ns.tolist() == [stamp_of(m) for _, m in ref]
    assert same(cols.position_m, [[m.pose.position.x, m.pose.position.y, m.pose.position.z] for _, m in ref])
    q = [[m.pose.orientation.w, m.pose.orientation.x, m.pose.orientation.y, m.pose.orientation.z] for _, m in ref]
    assert same(cols.orientation_wxyz, q)



def assert_imu_columns(cols, ref):
    assert isinstance(cols, ImuColumns)
    assert cols.recv_ns.tolist() == [t for t, _ in ref]
    assert cols.stamp_ns.tolist() == [stamp_of(m) for _, m in ref]
    assert same(cols.orientation_wxyz, [[m.orientation.w, m.orientation.x, m.orientation.y, m.orientation.z]
                                        for _, m in ref])
    assert same(cols.angular_velocity_rad_s, [[m.angular_velocity.x, m.angular_velocity.y, m.angular_velocity.z]
                                              for _, m in ref])
    assert same(cols.linear_acceleration_m_s2,
                [[m.linear_acceleration.x, m.linear_acceleration.y, m.linear_acceleration.z] for _, m in ref])


def imu(store, stamp_ns, rng, frame_id="imu_link"):
    vec, quat = store.types["geometry_msgs/msg/Vector3"], store.types["geometry_msgs/msg/Quaternion"]
    q, w, a = rng.normal(size=4), rng.normal(size=3), rng.normal(size=3)
    return store.types["sensor_msgs/msg/Imu"](
        header=header(store, stamp_ns, frame_id), orientation=quat(x=q[0], y=q[1], z=q[2], w=q[3]),
        orientation_covariance=rng.normal(size=9), angular_velocity=vec(x=w[0], y=w[1], z=w[2]),
        angular_velocity_covariance=rng.normal(size=9), linear_acceleration=vec(x=a[0], y=a[1], z=a[2]),
        linear_acceleration_covariance=rng.normal(size=9))


def write_with_mcap_library(store, path: Path, messages, **options) -> Path:
    """(topic, log_ns, msg) written by the mcap library's Writer with ``options``."""
    with path.open("wb") as stream:
        writer = McapWriter(stream, **options)
        writer.start(profile="ros2", library="test")
        channels: dict[str, int] = {}
        for topic, log_ns, msg in messages:
            if topic not in channels:
                text = store.generate_msgdef(msg.__msgtype__)[0].encode()
                channels[topic] = writer.register_channel(
                    topic, "cdr", writer.register_schema(msg.__msgtype__, "ros2msg", text))
            writer.add_message(channels[topic], log_ns, bytes(store.serialize_cdr(msg, msg.__msgtype__)), log_ns)
        writer.finish()
    return path
