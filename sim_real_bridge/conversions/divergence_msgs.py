"""Engine records -> GapEvent and DivergenceSummary messages; the colours of the categories.

Writers take a namespace holding the message classes (``sim_real_bridge.msg`` of rclpy,
or an object with the same attribute names), so this module imports no ROS package and
serves the live node and offline replay alike (the per-row messages are written from
columns by :mod:`sim_real_bridge.conversions.cdr`). For rosbags, whose message dataclasses
need every field at construction, :func:`rosbags_namespace` gives such a namespace of
factories that fill every field with its ROS default first.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
from rosbags.interfaces import Nodetype

from sim_real_bridge.conversions.robot_msgs import set_stamp


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
    msg.lag_s = float(record.lag_s)
    msg.max_lag_s = float(record.max_lag_s)
    msg.behind_share = float(record.behind_share)
    msg.dropped_grid_times = int(record.dropped_grid_times)
    msg.dropped_s = float(record.dropped_s)
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


def _numeric_sequence(spec: Any, node_type: Nodetype) -> Any:
    """The numpy dtype of an array or sequence field of numbers; None for any other field."""
    if node_type not in (Nodetype.ARRAY, Nodetype.SEQUENCE):
        return None
    (element_type, element_spec), _ = spec
    return _NUMPY_OF.get(element_spec[0]) if element_type == Nodetype.BASE else None


_CLASSES: dict[tuple[int, str], type] = {}


def _rosbags_class(typestore: Any, msgtype: str) -> type:
    """The rosbags class of msgtype, subclassed so numeric sequences assigned as lists
    become the numpy arrays rosbags' serializer needs (rclpy wants lists)."""
    key = (id(typestore), msgtype)
    cls = _CLASSES.get(key)
    if cls is not None:
        return cls
    base = typestore.types[msgtype]
    numeric = {name: dtype for name, (node_type, spec) in typestore.fielddefs[msgtype][1]
               if (dtype := _numeric_sequence(spec, node_type)) is not None}
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


def _default_maker(typestore: Any, node_type: Nodetype, spec: Any) -> Callable[[], Any]:
    """A function making a field's ROS default: a fresh value each call where it is mutable."""
    if node_type == Nodetype.BASE:
        value = _base_default(spec[0])
        return lambda: value
    if node_type == Nodetype.NAME:
        return functools.partial(rosbags_default, typestore, spec)
    (element_type, element_spec), length = spec
    count = int(length) if node_type == Nodetype.ARRAY else 0  # a sequence starts empty
    dtype = _numeric_sequence(spec, node_type)
    if dtype is not None:
        return functools.partial(np.zeros, count, dtype)
    if element_type == Nodetype.BASE:
        element = _base_default(element_spec[0])
        return lambda: [element] * count
    return lambda: [rosbags_default(typestore, element_spec) for _ in range(count)]


_MAKERS: dict[tuple[int, str], tuple[type, list[tuple[str, Callable[[], Any]]]]] = {}


def rosbags_default(typestore: Any, msgtype: str) -> Any:
    """A rosbags message of ``msgtype`` with every field at its ROS default (zeros, '', [])."""
    key = (id(typestore), msgtype)
    if key not in _MAKERS:
        _MAKERS[key] = (_rosbags_class(typestore, msgtype),
                        [(name, _default_maker(typestore, node_type, spec))
                         for name, (node_type, spec) in typestore.fielddefs[msgtype][1]])
    cls, makers = _MAKERS[key]
    # Every field is set here, so the dataclass __init__ (and its checks) can be skipped.
    msg = cls.__new__(cls)
    msg.__dict__.update({name: make() for name, make in makers})
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

    ``rosbags_namespace(store).GapEvent()`` builds a complete rosbags message (every
    field at its default), so ``gap_event_msg(rosbags_namespace(store), key_value, rec, t)``
    works as with ``sim_real_bridge.msg``; ``rosbags_namespace(store, "diagnostic_msgs").KeyValue``
    gives the evidence's KeyValue.
    """
    return _RosbagsNamespace(typestore, package)
