"""Pairing the joints of the two sides by name.

Robots and their simulators rarely agree on names to the letter: a teleoperation rig
publishes ``leader_joint1`` and ``follower_joint1``, a UR driver ``ur_shoulder_pan_joint``
beside a simulator's ``shoulder_pan_joint``. Joints pair, in this order of preference:
by an explicit map (sim name -> real name), by equal names, then by equal names once
each side's common prefix is stripped. Joints left unpaired are reported, not analysed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from sim_real_bridge.core.read_stage import JointMap


def common_prefix(names: Sequence[str]) -> str:
    """The longest prefix all names share, cut back to a separator ('_', '/', '-', ':')
    so that ``joint1``/``joint2`` keep their ``joint``; empty for fewer than two names."""
    if len(names) < 2:
        return ""
    prefix = os.path.commonprefix(list(names))
    cut = max(prefix.rfind(sep) for sep in "_/-:")
    return prefix[:cut + 1] if cut >= 0 else ""


def strip_prefix(names: Sequence[str]) -> list[str]:
    """Names without their common prefix."""
    prefix = common_prefix(names)
    return [name[len(prefix):] for name in names]


def pair_joints(sim_names: Sequence[str], real_names: Sequence[str],
                explicit: Mapping[str, str] | None = None) -> tuple[JointMap, list[str]]:
    """Pair the sides' joints; returns the map (sim order) and warnings naming what did not pair."""
    sim_names, real_names = list(sim_names), list(real_names)
    real_at = {name: i for i, name in enumerate(real_names)}
    pairs: dict[int, int] = {}
    for sim_name, real_name in (explicit or {}).items():
        if sim_name in sim_names and real_name in real_at:
            pairs[sim_names.index(sim_name)] = real_at[real_name]
    for i, name in enumerate(sim_names):
        if i not in pairs and name in real_at and real_at[name] not in pairs.values():
            pairs[i] = real_at[name]
    if not pairs:
        stripped = {name: i for i, name in enumerate(strip_prefix(real_names))}
        for i, name in enumerate(strip_prefix(sim_names)):
            if name in stripped:
                pairs[i] = stripped[name]
    order = sorted(pairs)
    warnings = []
    unpaired_sim = [sim_names[i] for i in range(len(sim_names)) if i not in pairs]
    unpaired_real = [real_names[i] for i in range(len(real_names)) if i not in pairs.values()]
    if unpaired_sim:
        warnings.append(f"sim joint(s) without a real twin, not analysed: {', '.join(unpaired_sim)}")
    if unpaired_real:
        warnings.append(f"real joint(s) without a sim twin, not analysed: {', '.join(unpaired_real)}")
    joint_map = JointMap(
        names=tuple(sim_names[i] for i in order),
        sim_index=np.array(order, dtype=np.intp),
        real_index=np.array([pairs[i] for i in order], dtype=np.intp),
        sim_count=len(sim_names), real_count=len(real_names),
    )
    return joint_map, warnings
