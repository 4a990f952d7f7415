"""divergence.mcap: the /divergence/* topics of a replay, as the live node publishes them.

Log times are the monitor times that produced each message (a grid time's decision,
an event's tick, a summary's stamp), so a player replays them in the live order.
Message definitions of the custom types are embedded: Foxglove, PlotJuggler and
rosbags open the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim_real_bridge.core.events import ACTION_CLOSE, ACTION_OPEN
from sim_real_bridge.core.outputs import EngineOutput

DIVERGENCE_TOPICS: dict[str, str] = {
    "/divergence/summary": "sim_real_bridge/msg/DivergenceSummary",
    "/divergence/joints": "sim_real_bridge/msg/JointDivergence",
    "/divergence/pose": "sim_real_bridge/msg/PoseDivergence",
    "/divergence/contact": "sim_real_bridge/msg/ContactResidual",
    "/divergence/events": "sim_real_bridge/msg/GapEvent",
    "/divergence/markers": "visualization_msgs/msg/MarkerArray",
}
_SUMMARY, _JOINTS, _POSE, _CONTACT, _EVENTS, _MARKERS = range(len(DIVERGENCE_TOPICS))


def _marker_rows(decision_ns: np.ndarray, period_ns: int) -> list[int]:
    """Pose rows that also go out as markers: the first, then each at least period_ns after the last."""
    rows: list[int] = []
    next_ns = None
    for k, t in enumerate(decision_ns.tolist()):
        if next_ns is None or t >= next_ns:
            rows.append(k)
            next_ns = t + period_ns
    return rows


def _open_categories_at(output: EngineOutput, times_ns: list[int]) -> list[list[str]]:
    """The categories with an open event at each time (sorted times)."""
    out: list[list[str]] = []
    open_now: dict[str, str] = {}
    events = sorted(output.events, key=lambda item: item[0])
    i = 0
    for t in times_ns:
        while i < len(events) and events[i][0] <= t:
            record = events[i][1]
            if record.action == ACTION_OPEN:
                open_now[record.id] = record.category
            elif record.action == ACTION_CLOSE:
                open_now.pop(record.id, None)
            i += 1
        out.append(sorted(set(open_now.values())))
    return out


def write_divergence_mcap(path: Path, output: EngineOutput, pose_frame_id: str = "world",
                          markers_period_s: float | None = 0.1) -> Path:
    """Write a replay's outputs to ``path`` (replaced if present)."""
    from sim_real_bridge.capture.bag_writer import BagWriter
    from sim_real_bridge.capture.typestore import build_typestore
    from sim_real_bridge.conversions import cdr

    kinds: list[np.ndarray] = []
    times: list[np.ndarray] = []
    datas: list[bytes] = []

    def add(kind: int, log_ns: np.ndarray | list[int], payloads: list[bytes]) -> None:
        kinds.append(np.full(len(payloads), kind, dtype=np.uint8))
        times.append(np.asarray(log_ns, dtype=np.int64))
        datas.extend(payloads)

    add(_SUMMARY, [r.stamp_ns for r in output.summaries], [cdr.divergence_summary_cdr(r) for r in output.summaries])
    if output.joints is not None:
        add(_JOINTS, output.joints.decision_ns, cdr.joint_divergence_cdr(output.joints))
    poses = output.poses
    if poses is not None and len(poses):
        add(_POSE, poses.decision_ns, cdr.pose_divergence_cdr(poses, pose_frame_id))
        if markers_period_s:
            rows = _marker_rows(poses.decision_ns, int(markers_period_s * 1e9))
            stamps = poses.decision_ns[rows].tolist()
            add(_MARKERS, stamps, cdr.divergence_markers_cdr(
                poses, rows, _open_categories_at(output, stamps), stamps, pose_frame_id))
    if output.contacts is not None:
        add(_CONTACT, output.contacts.decision_ns, cdr.contact_residual_cdr(output.contacts))
    add(_EVENTS, [t for t, _ in output.events], [cdr.gap_event_cdr(r, t) for t, r in output.events])
    kind = np.concatenate(kinds)
    log_ns = np.concatenate(times)
    order = np.lexsort((kind, log_ns))  # by log time, then topic in the live node's publishing order
    path = Path(path)
    path.unlink(missing_ok=True)
    topics = list(DIVERGENCE_TOPICS)
    with BagWriter(path, build_typestore()) as bag:
        for topic, msgtype in DIVERGENCE_TOPICS.items():
            bag.add_topic(topic, msgtype)
        bag.write_many_by_index(topics, kind[order], log_ns[order], [datas[i] for i in order.tolist()])
    return path
