"""Engine records -> divergence messages (JointDivergence, PoseDivergence, ContactResidual,
GapEvent, DivergenceSummary) and rviz markers.

Writers take a namespace holding the message classes (``sim_real_bridge.msg`` of rclpy,
or an object with the same attribute names), so this module imports no ROS package and
serves the live node and offline replay alike. For rosbags, whose message dataclasses
need every field at construction, :func:`rosbags_namespace` gives such a namespace of
factories that fill every field with its ROS default first.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from sim_real_bridge.conversions.robot_msgs import set_stamp


_ORIGIN_M = np.zeros(3)
_IDENTITY_WXYZ = np.array([1.0, 0.0, 0.0, 0.0])


def _vector(target: Any, values: np.ndarray) -> None:
    target.x, target.y, target.z = (float(v) for v in values[:3])


def _pose(target: Any, position_m: np.ndarray, orientation_wxyz: np.ndarray) -> None:
    _vector(target.position, position_m)
    w, x, y, z = (float(v) for v in orientation_wxyz[:4])
    target.orientation.w, target.orientation.x, target.orientation.y, target.orientation.z = w, x, y, z


def _floats(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=float).ravel()]


def joint_divergence_msg(msgs: Any, record: Any, frame_id: str = "") -> Any:
    """JointDivergence from a JointDivergenceRecord."""
    msg = msgs.JointDivergence()
    set_stamp(msg.header.stamp, record.stamp_ns)
    msg.header.frame_id = frame_id
    msg.name = list(record.names)
    msg.position_residual_rad = _floats(record.position_residual_rad)
    msg.velocity_residual_rad_s = _floats(record.velocity_residual_rad_s)
    msg.effort_residual = _floats(record.effort_residual)
    msg.clock_offset_s = float(record.clock_offset_s)
    msg.clock_offset_std_s = float(record.clock_offset_std_s)
    msg.latency_s = float(record.latency_s)
    msg.latency_std_s = float(record.latency_std_s)
    msg.latency_compensated = bool(record.latency_compensated)
    return msg


def pose_divergence_msg(msgs: Any, record: Any, frame_id: str = "world") -> Any:
    """PoseDivergence from a PoseDivergenceRecord."""
    msg = msgs.PoseDivergence()
    set_stamp(msg.header.stamp, record.stamp_ns)
    msg.header.frame_id = frame_id
    _pose(msg.sim_ee_pose, record.sim_ee_position_m, record.sim_ee_orientation_wxyz)
    _pose(msg.real_ee_pose, record.real_ee_position_m, record.real_ee_orientation_wxyz)
    _vector(msg.ee_position_error_m, record.ee_position_error_m)
    msg.ee_position_error_norm_m = float(record.ee_position_error_norm_m)
    msg.ee_orientation_error_rad = float(record.ee_orientation_error_rad)
    msg.has_object = bool(record.has_object)
    if record.has_object:
        _pose(msg.sim_object_pose, record.sim_object_position_m, record.sim_object_orientation_wxyz)
        _pose(msg.real_object_pose, record.real_object_position_m, record.real_object_orientation_wxyz)
        msg.object_position_error_norm_m = float(record.object_position_error_norm_m)
        msg.object_orientation_error_rad = float(record.object_orientation_error_rad)
    else:
        # Stated, not left to defaults: rosbags' default quaternion is all zeros, ROS's is identity.
        for pose in (msg.sim_object_pose, msg.real_object_pose):
            _pose(pose, _ORIGIN_M, _IDENTITY_WXYZ)
        msg.object_position_error_norm_m = math.nan
        msg.object_orientation_error_rad = math.nan
    return msg


def contact_residual_msg(msgs: Any, record: Any, frame_id: str = "") -> Any:
    """ContactResidual from a ContactRecord."""
    msg = msgs.ContactResidual()
    set_stamp(msg.header.stamp, record.stamp_ns)
    msg.header.frame_id = frame_id
    for wrench, force, torque in (
        (msg.sim_wrench, record.sim_force_n, record.sim_torque_nm),
        (msg.real_wrench, record.real_force_n, record.real_torque_nm),
        (msg.residual, record.residual_force_n, record.residual_torque_nm),
    ):
        _vector(wrench.force, force)
        _vector(wrench.torque, torque)
    msg.force_residual_norm_n = float(record.force_residual_norm_n)
    msg.torque_residual_norm_nm = float(record.torque_residual_norm_nm)
    msg.sim_contact_phase = int(record.sim_contact_phase)
    msg.real_contact_phase = int(record.real_contact_phase)
    return msg


def gap_event_msg(msgs: Any, key_value_cls: type, record: Any, stamp_ns: int, snapshot: str = "") -> Any:
    """GapEvent from an EventRecord (times on the monitor time base)."""
    msg = msgs.GapEvent()
    set_stamp(msg.header.stamp, stamp_ns)
    msg.id = record.id
    msg.category = record.category
    msg.kind = record.kind
    msg.severity = float(record.severity)
    set_stamp(msg.start, record.start_ns)
    set_stamp(msg.end, record.end_ns)
    msg.open = bool(record.open)
    msg.evidence = [key_value_cls(key=str(k), value=str(v)) for k, v in sorted(record.evidence.items())]
    msg.snapshot = snapshot
    return msg


def divergence_summary_msg(msgs: Any, key_value_cls: type, record: Any) -> Any:
    """DivergenceSummary from a SummaryRecord."""
    msg = msgs.DivergenceSummary()
    set_stamp(msg.header.stamp, record.stamp_ns)
    msg.elapsed_s = float(record.elapsed_s)
    msg.window_s = float(record.window_s)
    msg.ledger = [
        msgs.CategoryShare(category=row.category, share_run=float(row.share_run),
                           share_window=float(row.share_window), event_count=int(row.event_count))
        for row in record.ledger
    ]
    msg.unexplained_share_run = float(record.unexplained_share_run)
    msg.unexplained_share_window = float(record.unexplained_share_window)
    msg.joint_position_rms_rad = float(record.joint_position_rms_rad)
    msg.ee_position_rms_m = float(record.ee_position_rms_m)
    msg.force_residual_rms_n = float(record.force_residual_rms_n)
    msg.event_count = int(record.event_count)
    msg.open_event_count = int(record.open_event_count)
    msg.rejected_count = int(record.rejected_count)
    msg.rejected_by_reason = [key_value_cls(key=str(k), value=str(v)) for k, v in sorted(record.rejected_by_reason.items())]
    msg.clock_offset_s = float(record.clock_offset_s)
    msg.latency_s = float(record.latency_s)
    msg.clock_resets = int(record.clock_resets)
    return msg


#: RGBA of each category in rviz (the report uses the same hues).
CATEGORY_RGBA: dict[str, tuple[float, float, float, float]] = {
    "dynamics": (0.00, 0.45, 0.70, 1.0),
    "contact": (0.90, 0.62, 0.00, 1.0),
    "sensor": (0.80, 0.47, 0.65, 1.0),
    "human": (0.84, 0.37, 0.00, 1.0),
    "unauthored": (0.35, 0.70, 0.90, 1.0),
    "none": (0.0, 0.62, 0.45, 1.0),
}


def divergence_markers(viz: Any, record: Any, open_categories: list[str], stamp_ns: int, frame_id: str = "world") -> Any:
    """MarkerArray: sim and real end effector, the error between them, and a label.

    Args:
        viz: namespace with ``Marker`` and ``MarkerArray`` (visualization_msgs.msg).
        record: the latest PoseDivergenceRecord.
        open_categories: categories of the events open now (first one colours the label).
        stamp_ns: marker stamp.
        frame_id: frame of the poses.
    """
    colour = CATEGORY_RGBA[open_categories[0] if open_categories else "none"]
    markers = []

    def marker(marker_id: int, kind: int, ns: str) -> Any:
        m = viz.Marker()
        set_stamp(m.header.stamp, stamp_ns)
        m.header.frame_id = frame_id
        m.ns, m.id, m.type, m.action = ns, marker_id, kind, viz.Marker.ADD
        m.pose.orientation.w = 1.0
        return m

    for marker_id, (position, rgba, ns) in enumerate((
        (record.sim_ee_position_m, (0.2, 0.4, 1.0, 0.8), "sim_ee"),
        (record.real_ee_position_m, (1.0, 0.3, 0.2, 0.8), "real_ee"),
    )):
        m = marker(marker_id, viz.Marker.SPHERE, ns)
        _vector(m.pose.position, position)
        m.scale.x = m.scale.y = m.scale.z = 0.04
        m.color.r, m.color.g, m.color.b, m.color.a = rgba
        markers.append(m)
    line = marker(2, viz.Marker.ARROW, "ee_error")
    for position in (record.sim_ee_position_m, record.real_ee_position_m):
        p = copy.copy(line.pose.position)
        _vector(p, position)
        line.points.append(p)
    line.scale.x, line.scale.y, line.scale.z = 0.005, 0.012, 0.012
    line.color.r, line.color.g, line.color.b, line.color.a = colour
    markers.append(line)
    text = marker(3, viz.Marker.TEXT_VIEW_FACING, "label")
    _vector(text.pose.position, np.asarray(record.real_ee_position_m) + np.array([0.0, 0.0, 0.12]))
    text.scale.z = 0.05
    text.color.r, text.color.g, text.color.b, text.color.a = colour
    label = ", ".join(open_categories) if open_categories else "in agreement"
    text.text = f"{label}  |  ee error {1000 * float(record.ee_position_error_norm_m):.1f} mm"
    markers.append(text)
    return viz.MarkerArray(markers=markers)


# ------------------------------------------------------------------ rosbags adapters
_NUMPY_OF = {
    "bool": np.bool_, "byte": np.uint8, "char": np.uint8, "octet": np.uint8,
    "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16,
    "int32": np.int32, "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64,
    "float32": np.float32, "float64": np.float64,
}


def _base_default(name: str) -> Any:
    if name == "string" or name == "wstring":
        return ""
    if name == "bool":
        return False
    if name in ("float32", "float64"):
        return 0.0
    return 0


_CLASSES: dict[tuple[int, str], type] = {}


def _rosbags_class(typestore: Any, msgtype: str) -> type:
    """The rosbags class of msgtype, subclassed so numeric sequences assigned as lists
    become the numpy arrays rosbags' serializer needs (rclpy wants lists)."""
    key = (id(typestore), msgtype)
    cls = _CLASSES.get(key)
    if cls is not None:
        return cls
    base = typestore.types[msgtype]
    numeric = {}
    for name, (node_type, spec) in typestore.fielddefs[msgtype][1]:
        if int(node_type) in (3, 4) and int(spec[0][0]) == 1 and spec[0][1][0] in _NUMPY_OF:
            numeric[name] = _NUMPY_OF[spec[0][1][0]]
    if not numeric:
        _CLASSES[key] = base
        return base

    def __setattr__(self: Any, name: str, value: Any) -> None:  # noqa: N807
        dtype = numeric.get(name)
        if dtype is not None and not isinstance(value, np.ndarray):
            value = np.asarray(value, dtype=dtype)
        object.__setattr__(self, name, value)

    cls = type(base.__name__, (base,), {"__setattr__": __setattr__, "__slots__": ()} if hasattr(base, "__slots__")
               else {"__setattr__": __setattr__})
    _CLASSES[key] = cls
    return cls


_PLANS: dict[tuple[int, str], tuple[type, list[tuple[str, int, Any, Any]]]] = {}


def _plan(typestore: Any, msgtype: str) -> tuple[type, list[tuple[str, int, Any, Any]]]:
    """How to build a default message of msgtype: (class, [(field, how, a, b)]), cached."""
    key = (id(typestore), msgtype)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    steps: list[tuple[str, int, Any, Any]] = []
    for name, (node_type, spec) in typestore.fielddefs[msgtype][1]:
        kind = int(node_type)
        if kind == 1:  # base type: an immutable default
            steps.append((name, 0, _base_default(spec[0]), None))
        elif kind == 2:  # nested message
            steps.append((name, 1, spec, None))
        else:  # 3 array (fixed length), 4 sequence
            (elem_kind, elem_spec), length = spec
            count = int(length) if kind == 3 else 0
            if int(elem_kind) == 1 and elem_spec[0] in _NUMPY_OF:
                steps.append((name, 2, count, _NUMPY_OF[elem_spec[0]]))
            elif int(elem_kind) == 1:
                steps.append((name, 3, count, _base_default(elem_spec[0])))
            else:
                steps.append((name, 4, count, elem_spec))
    plan = (_rosbags_class(typestore, msgtype), steps)
    _PLANS[key] = plan
    return plan


def rosbags_default(typestore: Any, msgtype: str) -> Any:
    """A rosbags message of ``msgtype`` with every field at its ROS default (zeros, '', [])."""
    cls, steps = _plan(typestore, msgtype)
    values: dict[str, Any] = {}
    for name, how, a, b in steps:
        if how == 0:
            values[name] = a
        elif how == 1:
            values[name] = rosbags_default(typestore, a)
        elif how == 2:
            values[name] = np.zeros(a, dtype=b)
        elif how == 3:
            values[name] = [b] * a
        else:
            values[name] = [rosbags_default(typestore, b) for _ in range(a)]
    # Every field is set here, so the dataclass __init__ (and its checks) can be skipped.
    msg = cls.__new__(cls)
    msg.__dict__.update(values)
    return msg


class _RosbagsFactory:
    """Callable like an rclpy message class: ``Cls(**fields)``; constants as attributes."""

    def __init__(self, typestore: Any, msgtype: str) -> None:
        self._typestore = typestore
        self._msgtype = msgtype
        for const_name, _, value in typestore.fielddefs[msgtype][0]:
            setattr(self, const_name, value)

    def __call__(self, **fields: Any) -> Any:
        msg = rosbags_default(self._typestore, self._msgtype)
        for name, value in fields.items():
            setattr(msg, name, value)
        return msg


class _RosbagsNamespace:
    """Attribute ``X`` is a factory of ``<package>/msg/X`` (like an rclpy ``pkg.msg`` module)."""

    def __init__(self, typestore: Any, package: str) -> None:
        self._typestore = typestore
        self._package = package

    def __getattr__(self, name: str) -> _RosbagsFactory:
        if name.startswith("_"):
            raise AttributeError(name)
        msgtype = f"{self._package}/msg/{name}"
        if msgtype not in self._typestore.types:
            raise AttributeError(f"no message type {msgtype} in the typestore")
        factory = _RosbagsFactory(self._typestore, msgtype)
        setattr(self, name, factory)
        return factory


def rosbags_namespace(typestore: Any, package: str = "sim_real_bridge") -> Any:
    """A namespace of rosbags message factories for the writers of this module.

    ``rosbags_namespace(store).JointDivergence()`` builds a complete rosbags message
    (every field at its default), so ``joint_divergence_msg(rosbags_namespace(store), rec)``
    works as with ``sim_real_bridge.msg``; use ``package="visualization_msgs"`` for
    markers and ``rosbags_namespace(store, "diagnostic_msgs").KeyValue`` for evidence.
    """
    return _RosbagsNamespace(typestore, package)
