"""Direct CDR writers of divergence records give rosbags' serializer's bytes exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.conversions import cdr
from sim_real_bridge.conversions import divergence_msgs as convert
from sim_real_bridge.core.outputs import ContactRecord, JointDivergenceRecord, PoseDivergenceRecord, SummaryRecord
from sim_real_bridge.core.events import EventRecord
from sim_real_bridge.core.ledger import CategoryShareRecord

STORE = build_typestore()
SRB = convert.rosbags_namespace(STORE)
RNG = np.random.default_rng(4)


def _rosbags(msg: object, msgtype: str) -> bytes:
    return bytes(STORE.serialize_cdr(msg, msgtype))


def _joint_record(joints: int) -> JointDivergenceRecord:
    return JointDivergenceRecord(
        stamp_ns=1_700_000_001_234_567_891, names=tuple(f"joint_{i}" * (i + 1) for i in range(joints)),
        position_residual_rad=RNG.normal(size=joints), velocity_residual_rad_s=np.full(joints, np.nan),
        effort_residual=RNG.normal(size=joints), clock_offset_s=1e-4, clock_offset_std_s=math.inf,
        latency_s=0.012, latency_std_s=0.0, latency_compensated=joints == 1)


def _contact_record() -> ContactRecord:
    v = RNG.normal(size=(6, 3))
    return ContactRecord(1_000_000_007, v[0], v[1], v[2], v[3], v[4], v[5], 1.5, float("nan"), 1, 0)


def _pose_record(has_object: bool) -> PoseDivergenceRecord:
    q = RNG.normal(size=(4, 4))
    rec = PoseDivergenceRecord(
        stamp_ns=5, sim_ee_position_m=RNG.normal(size=3), sim_ee_orientation_wxyz=q[0],
        real_ee_position_m=RNG.normal(size=3), real_ee_orientation_wxyz=q[1], ee_position_error_m=RNG.normal(size=3),
        ee_position_error_norm_m=0.2, ee_orientation_error_rad=0.1, has_object=has_object)
    if has_object:
        rec.sim_object_position_m, rec.sim_object_orientation_wxyz = RNG.normal(size=3), q[2]
        rec.real_object_position_m, rec.real_object_orientation_wxyz = RNG.normal(size=3), q[3]
        rec.object_position_error_norm_m, rec.object_orientation_error_rad = 0.3, 0.4
    return rec


@pytest.mark.parametrize("joints", [0, 1, 7])
def test_joint_divergence_bytes(joints: int) -> None:
    rec = _joint_record(joints)
    expected = _rosbags(convert.joint_divergence_msg(SRB, rec, "base"), "sim_real_bridge/msg/JointDivergence")
    assert cdr.joint_divergence_cdr(rec, "base") == expected


@pytest.mark.parametrize("frame", ["", "tool0"])
def test_contact_residual_bytes(frame: str) -> None:
    rec = _contact_record()
    expected = _rosbags(convert.contact_residual_msg(SRB, rec, frame), "sim_real_bridge/msg/ContactResidual")
    assert cdr.contact_residual_cdr(rec, frame) == expected


@pytest.mark.parametrize("has_object", [False, True])
def test_pose_divergence_bytes(has_object: bool) -> None:
    rec = _pose_record(has_object)
    expected = _rosbags(convert.pose_divergence_msg(SRB, rec, "world"), "sim_real_bridge/msg/PoseDivergence")
    assert cdr.pose_divergence_cdr(rec, "world") == expected


@pytest.mark.parametrize("kind", ["joints0", "joints7", "contact", "pose", "pose_object"])
def test_bytes_equal_rclpy_serialization_of_the_message_the_node_used_to_build(kind: str) -> None:
    """The monitor publishes these bytes raw: rclpy subscribers must read what the
    message objects built by divergence_msgs would have carried."""
    rclpy_serialization = pytest.importorskip("rclpy.serialization", reason="rclpy is part of make test")
    srb_msgs = pytest.importorskip("sim_real_bridge.msg", reason="built by make build")
    if kind.startswith("joints"):
        rec = _joint_record(int(kind[-1]))
        msg, data = convert.joint_divergence_msg(srb_msgs, rec), cdr.joint_divergence_cdr(rec)
    elif kind == "contact":
        rec = _contact_record()
        msg, data = convert.contact_residual_msg(srb_msgs, rec), cdr.contact_residual_cdr(rec)
    else:
        rec = _pose_record(kind == "pose_object")
        msg, data = convert.pose_divergence_msg(srb_msgs, rec, "world"), cdr.pose_divergence_cdr(rec, "world")
    # Compared as read back (repr: NaN equals NaN there): rclpy leaves CDR padding bytes
    # as they were in memory and pads the end, these writers zero and do not.
    decoded = rclpy_serialization.deserialize_message(data, type(msg))
    assert repr(decoded) == repr(rclpy_serialization.deserialize_message(rclpy_serialization.serialize_message(msg),
                                                                          type(msg)))


def test_many_joint_records_give_each_record_bytes() -> None:
    """The batched writer gives each record's own bytes, whatever layouts are mixed."""
    records = []
    for i in range(40):
        joints = 7 if i % 9 else 3
        velocity = RNG.normal(size=joints) if i % 5 else np.zeros(0)
        records.append(JointDivergenceRecord(
            stamp_ns=1_700_000_000_000_000_000 + i * 20_000_037, names=tuple(f"j{k}" for k in range(joints)),
            position_residual_rad=RNG.normal(size=joints), velocity_residual_rad_s=velocity,
            effort_residual=np.where(RNG.random(joints) < 0.2, np.nan, RNG.normal(size=joints)),
            clock_offset_s=RNG.normal(), clock_offset_std_s=math.inf if i == 3 else 1e-4, latency_s=0.01 * i,
            latency_std_s=0.0, latency_compensated=i % 2 == 0))
    assert cdr.joint_divergence_cdr_many(records, "base") == [cdr.joint_divergence_cdr(r, "base") for r in records]


def _one_layout_joint_records(count: int) -> list[JointDivergenceRecord]:
    """Records as the engine makes them: one names tuple, rows of larger arrays."""
    names = tuple(f"joint{k}" for k in range(7))
    values = RNG.normal(size=(3, max(count, 6), 7))
    values[0, 2, 4], values[2, 5, 0] = np.nan, -np.inf
    return [JointDivergenceRecord(
        stamp_ns=1_700_000_000_000_000_000 + i * 20_000_037, names=names, position_residual_rad=values[0, i],
        velocity_residual_rad_s=values[1, i], effort_residual=values[2, i], clock_offset_s=RNG.normal(),
        clock_offset_std_s=math.nan if i == 1 else 1e-4, latency_s=0.01 * i, latency_std_s=0.0,
        latency_compensated=i % 2 == 0) for i in range(count)]


@pytest.mark.parametrize("change", ["none", "equal_names", "list_names", "other_names", "int_effort",
                                    "float32_position", "strided_velocity", "list_velocity", "empty_velocity",
                                    "longer_effort", "few"])
def test_many_joint_records_of_one_layout_give_each_record_bytes(change: str) -> None:
    """The one-template path for records sharing a layout, and every way a record can
    leave it (the batch then groups record by record or writes them one by one)."""
    records = _one_layout_joint_records(5 if change == "few" else 30)
    odd = records[11 % len(records)]
    if change == "equal_names":
        odd.names = tuple(list(odd.names))
    elif change == "list_names":
        odd.names = list(odd.names)
    elif change == "other_names":
        odd.names = odd.names[:6] + ("wrist",)
    elif change == "int_effort":
        odd.effort_residual = np.arange(7)
    elif change == "float32_position":
        odd.position_residual_rad = odd.position_residual_rad.astype(np.float32)
    elif change == "strided_velocity":
        odd.velocity_residual_rad_s = RNG.normal(size=14)[::2]
    elif change == "list_velocity":
        odd.velocity_residual_rad_s = [0.5] * 7
    elif change == "empty_velocity":
        for rec in records:
            rec.velocity_residual_rad_s = np.zeros(0)
    elif change == "longer_effort":
        odd.effort_residual = RNG.normal(size=8)
    one_template = change in ("none", "equal_names", "empty_velocity")
    assert (cdr._joint_batch(records, "base") is not None) == one_template
    assert cdr.joint_divergence_cdr_many(records, "base") == [cdr.joint_divergence_cdr(r, "base") for r in records]


@pytest.mark.parametrize("change", ["none", "float32", "list", "strided", "longer", "int"])
def test_many_contact_pose_and_marker_records_with_odd_arrays_give_each_record_bytes(change: str) -> None:
    """Arrays the joined gather refuses take the plain gather: same bytes."""
    def odd(values: np.ndarray) -> object:
        if change == "float32":
            return values.astype(np.float32)
        if change == "list":
            return [float(v) for v in values]
        if change == "strided":
            return np.repeat(values, 2)[::2]
        if change == "longer":
            return np.append(values, 9.0)
        if change == "int":
            return np.round(values * 10).astype(np.int64)
        return values

    contacts = [_contact_record() for _ in range(10)]
    contacts[3].real_torque_nm = odd(contacts[3].real_torque_nm)
    assert cdr.contact_residual_cdr_many(contacts, "tool0") == [cdr.contact_residual_cdr(r, "tool0") for r in contacts]
    poses = [_pose_record(i % 2 == 0) for i in range(10)]
    poses[4].real_ee_orientation_wxyz = odd(poses[4].real_ee_orientation_wxyz)
    poses[4].sim_object_position_m = odd(poses[4].sim_object_position_m)
    poses[7].sim_ee_position_m = odd(poses[7].sim_ee_position_m)
    assert cdr.pose_divergence_cdr_many(poses, "world") == [cdr.pose_divergence_cdr(r, "world") for r in poses]
    if change == "longer":  # the single marker writer refuses those
        return
    stamps = [1_700_000_000_000_000_000 + i * 100_000_003 for i in range(10)]
    opened = [[]] * 10
    assert cdr.divergence_markers_cdr_many(poses, opened, stamps, "world") == [
        cdr.divergence_markers_cdr(r, c, t, "world") for r, c, t in zip(poses, opened, stamps)]


@pytest.mark.parametrize("open_categories", [[], ["contact", "sensor"]])
def test_divergence_markers_bytes(open_categories: list[str]) -> None:
    rec = PoseDivergenceRecord(
        stamp_ns=5, sim_ee_position_m=RNG.normal(size=3), sim_ee_orientation_wxyz=np.array([1.0, 0, 0, 0]),
        real_ee_position_m=RNG.normal(size=3), real_ee_orientation_wxyz=np.array([1.0, 0, 0, 0]),
        ee_position_error_m=RNG.normal(size=3), ee_position_error_norm_m=0.0123, ee_orientation_error_rad=0.1)
    viz = convert.rosbags_namespace(STORE, "visualization_msgs")
    msg = convert.divergence_markers(viz, rec, open_categories, 1_700_000_000_123_456_789, "world")
    expected = _rosbags(msg, "visualization_msgs/msg/MarkerArray")
    assert cdr.divergence_markers_cdr(rec, open_categories, 1_700_000_000_123_456_789, "world") == expected


def test_many_contact_records_give_each_record_bytes() -> None:
    records = [_contact_record() for _ in range(12)]
    for i, rec in enumerate(records):
        rec.stamp_ns = 1_700_000_000_000_000_000 + i * 20_000_037
        rec.sim_contact_phase, rec.real_contact_phase = i % 3, (i + 1) % 3
    records[4].torque_residual_norm_nm = -math.inf
    assert cdr.contact_residual_cdr_many(records, "tool0") == [cdr.contact_residual_cdr(r, "tool0") for r in records]


def test_many_pose_records_give_each_record_bytes() -> None:
    """Records with and without an object share one layout."""
    records = [_pose_record(i % 3 == 0) for i in range(12)]
    for i, rec in enumerate(records):
        rec.stamp_ns = 1_700_000_000_000_000_000 + i * 40_000_011
    records[5].ee_position_error_norm_m = math.nan
    assert cdr.pose_divergence_cdr_many(records, "world") == [cdr.pose_divergence_cdr(r, "world") for r in records]


def test_many_markers_give_each_message_bytes() -> None:
    """Every category colour and labels of every length modulo 4 (the padding after the text)."""
    categories = [[]] + [[c] for c in convert.CATEGORY_RGBA if c != "none"] + [["contact", "sensor"]]
    records, opened, stamps = [], [], []
    for i in range(16):
        records.append(_pose_record(False))
        records[-1].ee_position_error_norm_m = 0.0007 * 10 ** (i % 4)
        opened.append(categories[i % len(categories)])
        stamps.append(1_700_000_000_123_456_789 + i * 100_000_003)
    assert len({len(cdr._markers_label(r, c)) % 4 for r, c in zip(records, opened)}) == 4
    expected = [cdr.divergence_markers_cdr(r, c, t, "world") for r, c, t in zip(records, opened, stamps)]
    assert cdr.divergence_markers_cdr_many(records, opened, stamps, "world") == expected
    viz = convert.rosbags_namespace(STORE, "visualization_msgs")
    assert expected[3] == _rosbags(convert.divergence_markers(viz, records[3], opened[3], stamps[3], "world"),
                                   "visualization_msgs/msg/MarkerArray")


def _summary_record(rows: int, reasons: int) -> SummaryRecord:
    categories = ["dynamics", "contact", "sensör", "human", "x"][:rows]
    ledger = [CategoryShareRecord(category=c, share_run=RNG.random(), share_window=math.nan if i == 1 else 0.25,
                                  event_count=i) for i, c in enumerate(categories)]
    return SummaryRecord(
        stamp_ns=1_700_000_001_234_567_891, elapsed_s=12.5, window_s=10.0, ledger=ledger, unexplained_share_run=0.1,
        unexplained_share_window=math.inf, joint_position_rms_rad=RNG.random(), ee_position_rms_m=math.nan,
        force_residual_rms_n=np.float64(0.3), event_count=4, open_event_count=1, rejected_count=7,
        rejected_by_reason={f"reason_{k}" * (k + 1): k * 3 for k in reversed(range(reasons))}, clock_offset_s=-1e-3,
        latency_s=0.02,
        clock_resets=2)


@pytest.mark.parametrize(("rows", "reasons"), [(0, 0), (1, 2), (5, 3)])
def test_divergence_summary_bytes(rows: int, reasons: int) -> None:
    rec = _summary_record(rows, reasons)
    key_value = convert.rosbags_namespace(STORE, "diagnostic_msgs").KeyValue
    expected = _rosbags(convert.divergence_summary_msg(SRB, key_value, rec), "sim_real_bridge/msg/DivergenceSummary")
    assert cdr.divergence_summary_cdr(rec) == expected


@pytest.mark.parametrize(("evidence", "snapshot"), [
    ({}, ""), ({"b": 0.25, "a": "x", "ünï": "ö" * 3}, "snap/e1.mcap"), ({"k" * 5: "v"}, "abc")])
def test_gap_event_bytes(evidence: dict, snapshot: str) -> None:
    for open_, severity in ((True, 0.899795), (False, math.nan)):
        rec = EventRecord(id="ev0001-dynamics", category="dynamics", kind="gain" if open_ else "", severity=severity,
                          start_ns=1_700_000_001_220_000_000, end_ns=1_700_000_001_420_000_001, open=open_,
                          action="open" if open_ else "close", evidence=evidence)
        key_value = convert.rosbags_namespace(STORE, "diagnostic_msgs").KeyValue
        expected = _rosbags(convert.gap_event_msg(SRB, key_value, rec, 1_700_000_001_440_000_000, snapshot),
                            "sim_real_bridge/msg/GapEvent")
        assert cdr.gap_event_cdr(rec, 1_700_000_001_440_000_000, snapshot) == expected
