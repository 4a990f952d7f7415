"""Which analyses a run could make from what its recording holds, and why nothing, when nothing.

Only the two sides' joint_states are needed; every other analysis runs when both sides
(or the run) have its stream. summary.json and report.html list each analysis as ran or
skipped, with the reason (``contact residuals: skipped: no wrench topic on either side``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim_real_bridge.errors import BagError
from sim_real_bridge.evaluation.analyses import PAIRED
from sim_real_bridge.evaluation.analyses import entry as _entry
from sim_real_bridge.offline.replay.streams import RunStreams
from sim_real_bridge.offline.replay_config import SIDES, ReplayConfig
from sim_real_bridge.offline.replay_engine import JointStream

def _absent(read: RunStreams, side: str, stream: str) -> str:
    why = read.absent.get((side, stream), "")
    return f"{side}_topics.{stream} is empty" if why == "off" else why


def _paired(read: RunStreams, name: str, stream: str, loss: str, rows: int) -> dict[str, Any]:
    have = [side for side in SIDES if (side, stream) in read.wanted]
    if len(have) == 2:
        if rows:
            return _entry(name, True, f"{read.wanted[('sim', stream)]} vs {read.wanted[('real', stream)]}")
        return _entry(name, False, f"{read.wanted[('sim', stream)]} and {read.wanted[('real', stream)]} never "
                                   "cover an analysis time together")
    missing = [side for side in SIDES if side not in have]
    where = "either side" if len(missing) == 2 else f"the {missing[0]} side"
    reasons = "; ".join(r for r in (_absent(read, side, stream) for side in missing) if r)
    return _entry(name, False, f"no {stream} topic on {where}" + (f" ({reasons})" if reasons else "") + f": {loss}")


def _joint_field_sides(read: RunStreams, field: str) -> list[str]:
    """Sides whose joint_states never carry ``field`` (velocity or effort)."""
    missing = []
    for side in SIDES:
        values = [getattr(s, field) for s in read.streams if isinstance(s, JointStream) and s.side == side]
        if not any(v is not None and np.isfinite(v).any() for v in values):
            missing.append(side)
    return missing


def analyses(config: ReplayConfig, read: RunStreams, outcome: Any, has_truth: bool) -> list[dict[str, Any]]:
    """Every analysis with whether it ran and why not (see the module docstring)."""
    output, engine = outcome.output, outcome.engine
    joints = output.joints
    out = [_entry("joint residuals", True, f"{len(engine.joint_names or ())} joint(s) at {len(joints)} analysis "
                                           f"times: {read.wanted[('sim', 'joint_states')]} vs "
                                           f"{read.wanted[('real', 'joint_states')]}")]
    for field, name in (("velocity", "velocity residuals"), ("effort", "effort residuals")):
        missing = _joint_field_sides(read, field)
        sides = "both sides'" if len(missing) == 2 else f"the {missing[0]} side's" if missing else ""
        detail = f"{sides} joint_states carry no {field}" if missing else "both sides"
        out.append(_entry(name, not missing, detail))
    rows = {"wrench": len(output.contacts) if output.contacts is not None else 0,
            "ee_pose": len(output.poses) if output.poses is not None else 0,
            "object_pose": int(np.count_nonzero(output.poses.has_object)) if output.poses is not None else 0}
    for name, stream, loss in PAIRED:
        out.append(_paired(read, name, stream, loss, rows[stream]))
    if ("sim", "joint_trajectory") in read.wanted:
        out.append(_entry("run start at the first command", True, read.wanted[("sim", "joint_trajectory")]))
    else:
        why = _absent(read, "sim", "joint_trajectory")
        out.append(_entry("run start at the first command", False,
                          f"no commands ({why}): times count from the first sample"))
    topic = config.injections_topic
    truth_why = "a recording with injection labels" if has_truth else (
        "injections_topic is empty" if not topic else f"no {topic} in the recording (labels of the stand-in)")
    out.append(_entry("scores against truth", has_truth, truth_why))
    return out


def _side_text(read: RunStreams, outcome: Any, side: str, first_ns: int) -> tuple[str, tuple[int, int] | None]:
    """How a side's joint_states fared, and the log-time span of its accepted rows."""
    topic = read.wanted[(side, "joint_states")]
    total = sum(len(s.recv_ns) for s in read.streams if isinstance(s, JointStream) and s.side == side)
    counts = outcome.problems.get(topic, {})
    text = f"{topic}: {total} message(s)"
    if counts:
        text += " (" + ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items())) + ")"
    buffer = outcome.engine.sides[side].joints
    if buffer is None or not len(buffer):
        return text + ", none accepted", None
    recv = buffer.recv_ns
    span = (int(recv.min()), int(recv.max()))
    return text + f", accepted from {(span[0] - first_ns) * 1e-9:.3f} to {(span[1] - first_ns) * 1e-9:.3f} s", span


def nothing_analysable(labels: str, read: RunStreams, outcome: Any) -> BagError:
    """The error of a run with no analysis time: what each side's joint_states held,
    what was refused and how much, and why no time had both."""
    first_ns = outcome.first_recv_ns or 0
    texts, spans = zip(*(_side_text(read, outcome, side, first_ns) for side in SIDES), strict=True)
    pairing = [w for w in outcome.engine.warnings if w.startswith("no joint of the sim side")]
    if None in spans:
        why = "a side has no message the checks accept"
    elif pairing:
        why = pairing[0]
    elif spans[0][1] < spans[1][0] or spans[1][1] < spans[0][0]:
        why = "the sides' accepted messages never overlap in time"
    else:
        why = "no analysis time has finite joint positions on both sides"
    hint = " (name the pairs with joint_map: {SIM_JOINT: REAL_JOINT, ...} in a --config file)" if why in pairing else ""
    return BagError(f"bag(s) {labels}: nothing to analyse: {why}: {'; '.join(texts)}{hint}")
