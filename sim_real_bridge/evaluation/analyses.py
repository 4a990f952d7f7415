"""The analyses a run makes, as summary.json lists them for replay and for the live monitor.

Only the two sides' joint_states are needed; every other analysis runs when both sides
have its stream. Each entry is ``{"analysis", "ran", "detail"}``: what ran on which
topics, or why it was skipped (``contact residuals: skipped: no wrench topic on the real
side``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sim_real_bridge.core.inputs import SIDES

#: Paired analyses: (name, stream, what is lost without it).
PAIRED = (
    ("contact residuals", "wrench", "contact, obstacle and F/T-bias events need forces on both sides"),
    ("end-effector pose", "ee_pose", "no tool position error"),
    ("object pose", "object_pose", "no object slip events"),
)


def entry(name: str, ran: bool, detail: str) -> dict[str, Any]:
    """One analysis of the list."""
    return {"analysis": name, "ran": ran, "detail": detail}


def live_analyses(topic_of: Mapping[str, str], received: Callable[[str], int],
                  joint_count: int) -> list[dict[str, Any]]:
    """The live monitor's analyses.

    Args:
        topic_of: ``"side/stream"`` -> the topic subscribed (absent: the stream's
            parameter was empty).
        received: topic -> messages received on it so far.
        joint_count: joints analysed (0 until both joint_states have paired).
    """
    def pair(stream: str) -> tuple[list[str], list[str]]:
        subscribed = [side for side in SIDES if f"{side}/{stream}" in topic_of]
        silent = [topic_of[f"{side}/{stream}"] for side in subscribed if not received(topic_of[f"{side}/{stream}"])]
        return subscribed, silent

    sim_js, real_js = topic_of.get("sim/joint_states", ""), topic_of.get("real/joint_states", "")
    out = [entry("joint residuals", joint_count > 0,
                 f"{joint_count} joint(s): {sim_js} vs {real_js}" if joint_count
                 else f"no joint pairs yet: {sim_js} vs {real_js}")]
    for name, stream, loss in PAIRED:
        subscribed, silent = pair(stream)
        if len(subscribed) < 2:
            missing = [side for side in SIDES if side not in subscribed]
            where = "either side" if len(missing) == 2 else f"the {missing[0]} side"
            out.append(entry(name, False, f"no {stream} topic on {where} (its parameter is empty): {loss}"))
        elif silent:
            out.append(entry(name, False, f"nothing received on {', '.join(silent)}: {loss}"))
        else:
            out.append(entry(name, True, f"{topic_of[f'sim/{stream}']} vs {topic_of[f'real/{stream}']}"))
    commands = topic_of.get("sim/joint_trajectory")
    out.append(entry("run start at the first command", bool(commands and received(commands)),
                     commands if commands and received(commands)
                     else "no commands received: times count from the first sample"))
    return out
