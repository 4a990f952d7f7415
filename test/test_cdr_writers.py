"""The CDR writers' bytes are the messages of their columns: rosbags reads them back to the
column values, its serializer gives the same bytes, and rclpy serializes the same message
to them (up to the padding bytes rclpy leaves as they were in memory)."""

from __future__ import annotations

import importlib
import math
from typing import Any

import numpy as np
import pytest

from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.conversions import cdr
from sim_real_bridge.conversions.cdr_layout import CdrLayout
from sim_real_bridge.conversions import divergence_msgs as convert
from sim_real_bridge.core.events import EventRecord
from sim_real_bridge.core.ledger import CategoryShareRecord
from sim_real_bridge.core.outputs import ContactColumns, JointColumns, PoseColumns, SummaryRecord

STORE = build_typestore()
RNG = np.random.default_rng(4)
T0 = 1_700_000_001_234_567_891
LONG_FRAME = "robot/" + "very_long_frame_name_" * 20 + "wörld"
FRAMES = ["", "base", LONG_FRAME]
JOINT_NAMES = {
    0: (),
    1: ("joint1",),
    2: ("", "elbow"),  # an empty name
    7: tuple(f"panda_joint{i}" * (i + 1) for i in range(7)),
}
JOINT_DIVERGENCE = "sim_real_bridge/msg/JointDivergence"
POSE_DIVERGENCE = "sim_real_bridge/msg/PoseDivergence"
CONTACT_RESIDUAL = "sim_real_bridge/msg/ContactResidual"
MARKER_ARRAY = "visualization_msgs/msg/MarkerArray"


# ------------------------------------------------------------------ columns
def _with_odd_values(values: np.ndarray) -> np.ndarray:
    """Random values with a NaN, an infinity and a negative zero among them."""
    flat = values.reshape(-1)
    flat[::3] = np.nan
    flat[-1] = -0.0
    if flat.size > 2:
        flat[1] = -np.inf
    return values


def _joint_columns(n_joints: int, rows: int = 5) -> JointColumns:
    t = T0 + 20_000_037 * np.arange(rows, dtype=np.int64)
    arrays = _with_odd_values(RNG.normal(size=(3, rows, n_joints))) if n_joints else np.zeros((3, rows, 0))
    return JointColumns(t, t + 5_000_000, JOINT_NAMES[n_joints], arrays[0], arrays[1], arrays[2],
                        _with_odd_values(RNG.normal(size=rows)), np.full(rows, 1e-4), np.linspace(0, 0.02, rows),
                        np.full(rows, np.inf))


def _pose(rows: int) -> np.ndarray:
    quat = RNG.normal(size=(rows, 4))
    return np.hstack([RNG.normal(size=(rows, 3)), quat / np.linalg.norm(quat, axis=1, keepdims=True)])


def _pose_columns(rows: int = 6) -> PoseColumns:
    t = T0 + 40_000_011 * np.arange(rows, dtype=np.int64)
    has_object = np.arange(rows) % 2 == 0
    sim, real = _pose(rows), _pose(rows)
    norm = np.linalg.norm(real[:, :3] - sim[:, :3], axis=1)
    norm[1] = np.nan
    return PoseColumns(t, t + 1_000, sim, real, norm, RNG.random(rows), has_object, _pose(rows), _pose(rows),
                       RNG.random(rows), np.where(has_object, RNG.random(rows), np.nan))


def _contact_columns(rows: int = 6) -> ContactColumns:
    t = T0 + 2_000_003 * np.arange(rows, dtype=np.int64)
    return ContactColumns(t, t + 7, _with_odd_values(RNG.normal(size=(rows, 6))), RNG.normal(size=(rows, 6)),
                          np.arange(rows) % 2, (np.arange(rows) + 1) % 2)


# ------------------------------------------------------------------ expected messages
def _rosbags_types(package: str) -> Any:
    return convert.rosbags_namespace(STORE, package)


def _rclpy_types(package: str) -> Any:
    return importlib.import_module(f"{package}.msg")


def _floats(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.ravel(values)]


def _stamp(target: Any, stamp_ns: int) -> None:
    target.sec, target.nanosec = divmod(int(stamp_ns), 1_000_000_000)


def _set_pose(target: Any, pose_wxyz: np.ndarray) -> None:
    p, q = target.position, target.orientation
    p.x, p.y, p.z = _floats(pose_wxyz[:3])
    q.w, q.x, q.y, q.z = _floats(pose_wxyz[3:7])


def _joint_msg(types: Any, c: JointColumns, k: int, frame_id: str) -> Any:
    msg = types("sim_real_bridge").JointDivergence()
    _stamp(msg.header.stamp, c.t_ns[k])
    msg.header.frame_id = frame_id
    msg.name = list(c.names)
    msg.position_residual_rad = _floats(c.position_residual_rad[k])
    msg.velocity_residual_rad_s = _floats(c.velocity_residual_rad_s[k])
    msg.effort_residual = _floats(c.effort_residual[k])
    msg.clock_offset_s, msg.clock_offset_std_s = float(c.clock_offset_s[k]), float(c.clock_offset_std_s[k])
    msg.latency_s, msg.latency_std_s = float(c.latency_s[k]), float(c.latency_std_s[k])
    return msg


def _pose_msg(types: Any, c: PoseColumns, k: int, frame_id: str) -> Any:
    msg = types("sim_real_bridge").PoseDivergence()
    _stamp(msg.header.stamp, c.t_ns[k])
    msg.header.frame_id = frame_id
    _set_pose(msg.sim_ee_pose, c.sim_ee[k])
    _set_pose(msg.real_ee_pose, c.real_ee[k])
    e = msg.ee_position_error_m
    e.x, e.y, e.z = _floats(c.real_ee[k, :3] - c.sim_ee[k, :3])
    msg.ee_position_error_norm_m = float(c.ee_position_error_norm_m[k])
    msg.ee_orientation_error_rad = float(c.ee_orientation_error_rad[k])
    msg.has_object = bool(c.has_object[k])
    absent = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])  # the message default: origin, identity
    _set_pose(msg.sim_object_pose, c.sim_object[k] if msg.has_object else absent)
    _set_pose(msg.real_object_pose, c.real_object[k] if msg.has_object else absent)
    msg.object_position_error_norm_m = float(c.object_position_error_norm_m[k]) if msg.has_object else math.nan
    msg.object_orientation_error_rad = float(c.object_orientation_error_rad[k]) if msg.has_object else math.nan
    return msg


def _contact_msg(types: Any, c: ContactColumns, k: int, frame_id: str) -> Any:
    msg = types("sim_real_bridge").ContactResidual()
    _stamp(msg.header.stamp, c.t_ns[k])
    msg.header.frame_id = frame_id
    for wrench, values in ((msg.sim_wrench, c.sim_wrench[k]), (msg.real_wrench, c.real_wrench[k]),
                           (msg.residual, c.real_wrench[k] - c.sim_wrench[k])):
        f, t = wrench.force, wrench.torque
        f.x, f.y, f.z, t.x, t.y, t.z = _floats(values)
    msg.force_residual_norm_n = float(np.linalg.norm(c.real_wrench[k, :3] - c.sim_wrench[k, :3]))
    msg.torque_residual_norm_nm = float(np.linalg.norm(c.real_wrench[k, 3:] - c.sim_wrench[k, 3:]))
    msg.sim_contact_phase, msg.real_contact_phase = int(c.sim_contact_phase[k]), int(c.real_contact_phase[k])
    return msg


def _markers_msg(types: Any, c: PoseColumns, k: int, categories: list[str], stamp_ns: int, frame_id: str) -> Any:
    """The MarkerArray the monitor publishes, spelled out from its specification."""
    viz, geometry = types("visualization_msgs"), types("geometry_msgs")
    colour = convert.CATEGORY_RGBA[categories[0] if categories else "none"]
    sim_m, real_m = c.sim_ee[k, :3], c.real_ee[k, :3]
    label = ", ".join(categories) if categories else "in agreement"
    specs = [("sim_ee", viz.Marker.SPHERE, sim_m, (0.04,) * 3, (0.2, 0.4, 1.0, 0.8), ""),
             ("real_ee", viz.Marker.SPHERE, real_m, (0.04,) * 3, (1.0, 0.3, 0.2, 0.8), ""),
             ("ee_error", viz.Marker.ARROW, np.zeros(3), (0.005, 0.012, 0.012), colour, ""),
             ("label", viz.Marker.TEXT_VIEW_FACING, real_m + [0.0, 0.0, 0.12], (0.0, 0.0, 0.05), colour,
              f"{label}  |  ee error {1000 * float(c.ee_position_error_norm_m[k]):.1f} mm")]
    markers = []
    for marker_id, (ns, kind, position, scale, rgba, text) in enumerate(specs):
        m = viz.Marker()
        _stamp(m.header.stamp, stamp_ns)
        m.header.frame_id, m.ns, m.id, m.type, m.action, m.text = frame_id, ns, marker_id, kind, viz.Marker.ADD, text
        m.pose.position.x, m.pose.position.y, m.pose.position.z = _floats(position)
        m.pose.orientation.w = 1.0
        m.scale.x, m.scale.y, m.scale.z = scale
        m.color.r, m.color.g, m.color.b, m.color.a = rgba
        if ns == "ee_error":
            m.points = [geometry.Point(x=p[0], y=p[1], z=p[2]) for p in (_floats(sim_m), _floats(real_m))]
        markers.append(m)
    return viz.MarkerArray(markers=markers)


def _check(data: bytes, build: Any, msgtype: str) -> Any:
    """``data`` are rosbags' bytes of the message ``build(types)`` and rclpy's (where it is
    importable); returns the message rosbags reads from them."""
    assert data == bytes(STORE.serialize_cdr(build(_rosbags_types), msgtype))
    try:
        serialization = importlib.import_module("rclpy.serialization")
        _rclpy_types("sim_real_bridge")
    except ImportError:
        return STORE.deserialize_cdr(data, msgtype)
    theirs = serialization.serialize_message(build(_rclpy_types))
    # rclpy leaves padding bytes as they were in memory and may pad the end: the same
    # message once rosbags has read it and written it with zero padding.
    assert len(theirs) >= len(data)
    assert bytes(STORE.serialize_cdr(STORE.deserialize_cdr(theirs[:len(data)], msgtype), msgtype)) == data
    return STORE.deserialize_cdr(data, msgtype)


def _same(a: Any, b: Any) -> bool:
    return np.array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float), equal_nan=True)


def _stamp_ns(stamp: Any) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


# ------------------------------------------------------------------ column writers
def _written(write: Any, build: Any, columns: Any, frame_id: str, msgtype: str) -> list[Any]:
    """rosbags' reading of the message ``write`` makes of each row, each :func:`_check`-ed
    against ``build(types, columns, row, frame_id)``."""
    messages = write(columns, frame_id)
    assert len(messages) == len(columns)
    return [_check(data, lambda types, k=k: build(types, columns, k, frame_id), msgtype)
            for k, data in enumerate(messages)]


@pytest.mark.parametrize("frame_id", FRAMES)
@pytest.mark.parametrize("n_joints", sorted(JOINT_NAMES))
def test_joint_divergence_rows(n_joints: int, frame_id: str) -> None:
    c = _joint_columns(n_joints)
    for k, msg in enumerate(_written(cdr.joint_divergence_cdr, _joint_msg, c, frame_id, JOINT_DIVERGENCE)):
        assert _stamp_ns(msg.header.stamp) == c.t_ns[k] and msg.header.frame_id == frame_id
        assert tuple(msg.name) == c.names
        assert _same(msg.position_residual_rad, c.position_residual_rad[k])
        assert _same(msg.velocity_residual_rad_s, c.velocity_residual_rad_s[k])
        assert _same(msg.effort_residual, c.effort_residual[k])
        assert _same([msg.clock_offset_s, msg.clock_offset_std_s, msg.latency_s, msg.latency_std_s],
                     [c.clock_offset_s[k], c.clock_offset_std_s[k], c.latency_s[k], c.latency_std_s[k]])
        assert msg.latency_compensated is False


@pytest.mark.parametrize("frame_id", FRAMES)
def test_pose_divergence_rows(frame_id: str) -> None:
    c = _pose_columns()
    for k, msg in enumerate(_written(cdr.pose_divergence_cdr, _pose_msg, c, frame_id, POSE_DIVERGENCE)):
        assert _stamp_ns(msg.header.stamp) == c.t_ns[k] and msg.header.frame_id == frame_id
        q = msg.real_ee_pose.orientation
        assert _same([q.w, q.x, q.y, q.z], c.real_ee[k, 3:])
        assert _same(msg.ee_position_error_norm_m, c.ee_position_error_norm_m[k])
        assert msg.has_object == bool(c.has_object[k])
        p = msg.sim_object_pose.position
        assert _same([p.x, p.y, p.z], c.sim_object[k, :3] if msg.has_object else np.zeros(3))
        assert msg.sim_object_pose.orientation.w == (c.sim_object[k, 3] if msg.has_object else 1.0)
        assert math.isnan(msg.object_orientation_error_rad) != msg.has_object


@pytest.mark.parametrize("frame_id", FRAMES)
def test_contact_residual_rows(frame_id: str) -> None:
    c = _contact_columns()
    for k, msg in enumerate(_written(cdr.contact_residual_cdr, _contact_msg, c, frame_id, CONTACT_RESIDUAL)):
        f, t = msg.sim_wrench.force, msg.sim_wrench.torque
        assert _same([f.x, f.y, f.z, t.x, t.y, t.z], c.sim_wrench[k])
        assert _same(msg.residual.torque.z, c.residual[k, 5])
        assert _same(msg.force_residual_norm_n, c.force_residual_norm_n[k])
        assert (msg.sim_contact_phase, msg.real_contact_phase) == (c.sim_contact_phase[k], c.real_contact_phase[k])


@pytest.mark.parametrize("frame_id", FRAMES)
def test_divergence_markers_rows(frame_id: str) -> None:
    """Every category colour and labels of every length modulo 4 (the fields after the
    label align by where it ends), in rows picked out of order."""
    columns = _pose_columns(rows=12)
    columns.ee_position_error_norm_m[:] = [0.0007 * 10 ** (k % 5) for k in range(12)]
    columns.ee_position_error_norm_m[7] = np.nan
    opened = [[], ["contact", "sensor"]] + [[c] for c in convert.CATEGORY_RGBA if c != "none"]
    rows = [11, 0, 3, 4, 7, 5, 6, 2, 9]
    categories = [opened[i % len(opened)] for i in range(len(rows))]
    stamps = [T0 + 100_000_003 * i for i in range(len(rows))]
    messages = cdr.divergence_markers_cdr(columns, rows, categories, stamps, frame_id)
    assert len({len(STORE.deserialize_cdr(m, MARKER_ARRAY).markers[3].text) % 4 for m in messages}) == 4
    for data, k, c, stamp in zip(messages, rows, categories, stamps, strict=True):
        msg = _check(data, lambda types, k=k, c=c, stamp=stamp: _markers_msg(types, columns, k, c, stamp, frame_id),
                     MARKER_ARRAY)
        assert [m.ns for m in msg.markers] == ["sim_ee", "real_ee", "ee_error", "label"]
        assert {_stamp_ns(m.header.stamp) for m in msg.markers} == {stamp}
        arrow = msg.markers[2].points
        assert _same([arrow[1].x, arrow[1].y, arrow[1].z], columns.real_ee[k, :3])
        assert msg.markers[3].text.startswith(", ".join(c) if c else "in agreement")


def test_one_row_slices_give_the_rows_of_the_whole() -> None:
    """The live node writes the rows as they come: one row at a time gives the same bytes."""
    cases = [(cdr.joint_divergence_cdr, _joint_columns(7)), (cdr.pose_divergence_cdr, _pose_columns()),
             (cdr.contact_residual_cdr, _contact_columns())]
    for write, columns in cases:
        whole = write(columns)
        assert [write(columns.take(np.array([k])))[0] for k in range(len(columns))] == whole
        assert write(columns.take(np.array([], dtype=np.intp))) == []
    poses = _pose_columns()
    assert cdr.divergence_markers_cdr(poses, [3], [["human"]], [T0]) == \
        cdr.divergence_markers_cdr(poses, [1, 3], [[], ["human"]], [T0, T0])[1:]


def test_stamps_beyond_int32_seconds_are_refused() -> None:
    columns = _contact_columns()
    columns.t_ns[2] = 2**31 * 1_000_000_000
    with pytest.raises(ValueError, match="header.stamp: a stamp beyond the int32 seconds"):
        cdr.contact_residual_cdr(columns)


def test_a_string_needs_room_for_its_nul() -> None:
    with pytest.raises(ValueError, match="string text: a size of at least 1"):
        CdrLayout().string("text", size=0)


# ------------------------------------------------------------------ per-record writers
def _summary_record(rows: int, reasons: int) -> SummaryRecord:
    categories = ["dynamics", "contact", "sensör", "human", "x"][:rows]
    ledger = [CategoryShareRecord(category=c, share_run=RNG.random(), share_window=math.nan if i == 1 else 0.25,
                                  event_count=i) for i, c in enumerate(categories)]
    return SummaryRecord(
        stamp_ns=T0, elapsed_s=12.5, window_s=10.0, ledger=ledger, unexplained_share_run=0.1,
        unexplained_share_window=math.inf, joint_position_rms_rad=RNG.random(), ee_position_rms_m=math.nan,
        force_residual_rms_n=np.float64(0.3), event_count=4, open_event_count=1, rejected_count=7,
        rejected_by_reason={f"reason_{k}" * (k + 1): k * 3 for k in reversed(range(reasons))}, clock_offset_s=-1e-3,
        latency_s=0.02, clock_resets=2)


@pytest.mark.parametrize(("rows", "reasons"), [(0, 0), (1, 2), (5, 3)])
def test_divergence_summary_record(rows: int, reasons: int) -> None:
    rec = _summary_record(rows, reasons)

    def build(types: Any) -> Any:
        return convert.divergence_summary_msg(types("sim_real_bridge"), types("diagnostic_msgs").KeyValue, rec)

    msg = _check(cdr.divergence_summary_cdr(rec), build, "sim_real_bridge/msg/DivergenceSummary")
    assert [row.category for row in msg.ledger] == [row.category for row in rec.ledger]
    assert [(kv.key, kv.value) for kv in msg.rejected_by_reason] == sorted(
        (k, str(v)) for k, v in rec.rejected_by_reason.items())
    assert _stamp_ns(msg.header.stamp) == T0 and math.isinf(msg.unexplained_share_window)


@pytest.mark.parametrize(("evidence", "snapshot"), [
    ({}, ""), ({"b": 0.25, "a": "x", "ünï": "ö" * 3}, "snap/e1.mcap"), ({"k" * 5: "v"}, LONG_FRAME)])
def test_gap_event_record(evidence: dict, snapshot: str) -> None:
    for open_, severity in ((True, 0.899795), (False, math.nan)):
        rec = EventRecord(id="ev0001-dynamics", category="dynamics", kind="gain" if open_ else "", severity=severity,
                          start_ns=T0 - 200_000_000, end_ns=T0, open=open_, action="open" if open_ else "close",
                          evidence=evidence)

        def build(types: Any, rec: EventRecord = rec) -> Any:
            return convert.gap_event_msg(types("sim_real_bridge"), types("diagnostic_msgs").KeyValue, rec,
                                         T0 + 5, snapshot)

        msg = _check(cdr.gap_event_cdr(rec, T0 + 5, snapshot), build, "sim_real_bridge/msg/GapEvent")
        assert (msg.id, msg.open, msg.snapshot) == (rec.id, open_, snapshot)
        assert [kv.key for kv in msg.evidence] == sorted(evidence)
        assert _stamp_ns(msg.start) == rec.start_ns and _stamp_ns(msg.header.stamp) == T0 + 5
