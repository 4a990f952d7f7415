"""Attribution: per analysis tick, which gap category (if any) explains the divergence.

Transparent rules over the features the engine computes (all named thresholds live in
:class:`AttributionConfig`). Each rule yields a score 0..1 for its category; a category
is active when its score reaches ``active_score``. The rules, in priority order:

1. sensor: a health flag of the real stream (dropout, nonfinite, frozen, stamp_jitter,
   saturation, ft_bias_drift). dropout/nonfinite/frozen make the real stream
   untrustworthy (a jittered stamp only raises the residuals' noise, which the
   thresholds follow): of joint_states, they suppress every other category at that
   tick; of the wrench, it is left out as on a robot without one (the joints' efforts
   stand in); of a pose stream, that pose is left out (no obstacle or slip from it).
2. contact: the sim is (or just was) in contact and the real-minus-sim force residual,
   relative to ``contact_force_n`` plus ``contact_force_rel`` of the sim force (or, in a
   light contact with no stiff load on the joints, to ``contact_share`` of the sim force,
   at least ``contact_share_min_n``), is large,
   and the joints stay near their sim twins (a joint residual beyond
   ``contact_actuation_rad`` that the delay/gain fit explains is dynamics, with the
   wrist's residual or without one: the arm's actuation changed, which changes how hard
   it presses, or it trails its twin while the surface pushes back as modelled);
   unless a free-space cause (dynamics, human) was active as the contact began: the
   contact residual is then that cause pressing on (a softer loop presses more softly),
   and stays attributed to it for that contact phase. Without a wrist sensor the joints'
   effort residual stands in for the force residual (kind from the tool's displacement).
3. human / unauthored-obstacle: the real sensor feels an external wrench (or the joints
   an external effort) while the sim sees no contact. The arm pushed *away* (the real
   tip moves while the residual grows) is ``human/push``; the arm *blocked* while the
   sim moves through is ``human/hold``; either is ``unauthored/obstacle`` once it has
   carried the tool further off its path than a hand moves a position-held arm
   (``obstacle_ee_error_m``), unless the real tool drags a felt load along (a hand).
4. unauthored: a stalled joint (real velocity ~0 while the sim joint moves, no external
   wrench, the joints fallen behind their twins by ``dynamics_residual_rad``, for
   ``stall_min_s``, or ``stall_undriven_min_s`` while its drive has not pushed harder
   along its twin's motion since it stopped: stiction holds a pushing drive), or an
   object pose divergence growing with no tool at the object (a contact elsewhere, as
   a wipe beside it, leaves it alone) and the sim's object still, or a persistent joint
   residual the delay/gain/offset fit does not explain.
5. dynamics: free space (in contact, see 2), joint residual above
   ``dynamics_residual_rad`` and explained by the delay/gain/offset fit (explained share
   >= ``dynamics_min_explained``, delay and gain within plausible bounds). Joint friction
   also by its own signature: an effort residual along each joint's motion that flips
   sign when the motion does
   (fitted per joint by the scan): such a load is no person, and friction too small to
   move the joints is found from the efforts alone. Between reversals the fit cannot
   tell; a friction it found a moment ago goes on while every moving joint's effort
   pushes back along its motion (``friction_along_share``) and the wrist feels no load,
   and before the first reversal efforts that push back almost only along the motion
   (``friction_onset_share``) with nothing at the wrist are friction starting (in
   modelled contact too, with the wrist reading the contact as modelled).

The joint and effort thresholds are in units of the noise of their residuals as well:
each is at least ``noise_factor`` times the noise the scan measures on the run (per
joint, from row-to-row changes), so a robot with noisy encoders or effort readings needs
no other config; on a quiet robot the configured values hold.

Evidence is a dict of short key-value strings.

What the streams cannot tell apart (tuned against the MuJoCo stand-in; see
bench/attribution_eval.py):

- kind, not category: a softer position loop (``gain``) lags like a delay; it is told
  from a latency by the joints' delays disagreeing (``gain_joint_delay_share``), so a
  gain change on one moving joint alone can be labelled ``actuation_latency``; a hand
  ``hold`` that does not stop the arm (a 3 kN/m hand against a stiffer position loop) is
  labelled ``push``.
- an obstacle is a load like a hand's (on a link, or at the tool) until it has pushed
  the tool ``obstacle_ee_error_m`` off its path: a lighter touch is ``human``. The brief
  contact before an obstacle carries the tool that far is absorbed by the human
  min-duration and the unauthored tail.
- in a push, the box's friction on the table and its mass give the same force (mu m g):
  a friction change during a push is reported as ``object_mass``.
- contact gaps show only in contact, obstacles only when reached: the stand-in's truth
  starts there (``effect_start_s``), since before it nothing differs to detect.
- a payload, or a gain or latency change too small to move the joints by
  ``contact_actuation_rad``, that starts during a contact phase shows as a contact
  residual felt by the joints, so it is reported as ``contact`` there; a cause already
  seen in free space as the contact began, or found as dynamics in the contact, is
  carried through the rest of that phase (and a contact-model gap in such a phase is
  then reported as that cause).
- F/T bias drift is reported once it exceeds ``ft_unfelt_force_n`` in free space (or
  the contact threshold in contact): at 1 N/s, 1.1 s (wipe) to 1.5 s (reach) after it
  starts in bench/attribution_eval.py, 1.2 s live in ``sensor_ft_bias_drift``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from sim_real_bridge.core.attribution_config import AttributionConfig
from sim_real_bridge.core.fits import DelayFit
from sim_real_bridge.core.health import UNTRUSTED
from sim_real_bridge.core.tick_features import Attribution, TickFeatures

__all__ = ["CATEGORIES", "NONE", "Attribution", "AttributionConfig", "TickFeatures", "above_noise", "attribute",
           "tools_clear_of_object", "untrusts_residuals"]

CATEGORIES: tuple[str, ...] = ("dynamics", "contact", "sensor", "human", "unauthored")
NONE = "none"
#: Event kinds are the injection kinds' names where a health detector has another name.
_SENSOR_EVENT_KINDS = {"nonfinite": "nan_burst", "sample_loss": "dropout"}


def _norm(v: np.ndarray) -> float:
    """Euclidean norm of a short vector (math.hypot: a numpy call per tick costs more than the sum)."""
    return math.hypot(*v)


def _ramp(value: float, threshold: float) -> float:
    """0.5 at threshold, 1.0 at twice the threshold, linear; 0 for non-finite input."""
    if not math.isfinite(value) or threshold <= 0:
        return 0.0
    return float(min(1.0, max(0.0, 0.5 * value / threshold)))


def _common_evidence(f: TickFeatures, ext_n: float) -> dict[str, str]:
    """The evidence every firing rule shows (formatted only for a category that fires)."""
    return {"external_force_n": f"{ext_n:.2f}", "effort_residual": f"{f.effort_residual:.2f}",
            "joint_residual_rad": f"{f.joint_residual_rad:.4f}", "ee_error_m": f"{f.ee_error_m:.4f}"}


@dataclass(slots=True)
class _Scores:
    """The scores of one tick as the rules set them, with each category's kind and evidence."""

    dynamics: float = 0.0
    contact: float = 0.0
    sensor: float = 0.0
    human: float = 0.0
    unauthored: float = 0.0
    #: the unauthored score is a consequence of an earlier slip, not new evidence of one
    consequence: bool = False
    #: a category whose score continues its own earlier direct evidence without extending it
    kept: str = ""
    kinds: dict[str, str] = field(default_factory=dict)
    evidence: dict[str, dict[str, str]] = field(default_factory=dict)

    def put(self, category: str, score: float, kind: str, evidence: dict[str, str]) -> None:
        setattr(self, category, score)
        self.kinds[category] = kind
        self.evidence[category] = evidence


@dataclass(frozen=True, slots=True)
class _Wrist:
    """What the wrist and the joints tell of an external force at one tick."""

    ext: np.ndarray  # the real minus sim wrist force (N)
    ext_n: float  # its norm, 0 where not finite
    felt: bool  # the joints carry it (J^T F): a real force, not a sensor artefact
    hand_sized: bool  # the wrist reads at least human_force_n
    loaded: bool  # a stiff external load on the joints
    stiffness: float  # effort residual over joint residual (N m/rad)
    free: bool  # the sim is not (and was not just) in contact
    vertical: bool  # the force is mostly vertical
    weight: bool  # mostly vertical and pulling the tool down (the sensor reads +z), tool not raised


def attribute(features: TickFeatures, config: AttributionConfig) -> Attribution:
    """Apply the rules to one tick's features; see the module docstring."""
    f, cfg = features, _noise_scaled(config, features)
    scores = _Scores()
    suppressed = _sensor_rule(f, cfg, scores)
    if not suppressed:
        wrist = _wrist(f, cfg)
        _wrench_rules(f, cfg, wrist, scores)
        _unauthored_rules(f, cfg, wrist, scores)
        _dynamics_rule(f, cfg, wrist, scores)
    tail = not suppressed and (_unauthored_tail(f, cfg, scores) or scores.consequence)
    values = {"dynamics": scores.dynamics, "contact": scores.contact, "sensor": scores.sensor,
              "human": scores.human, "unauthored": scores.unauthored}
    active: dict[str, tuple[float, str, dict[str, str]]] = {}
    if max(values.values()) >= cfg.active_score:  # (most ticks no category is active)
        for c in CATEGORIES:
            if values[c] >= cfg.active_score:
                active[c] = (round(float(values[c]), 6), scores.kinds.get(c, ""), scores.evidence.get(c, {}))
    top = max(active, key=lambda c: active[c][0]) if active else NONE
    return Attribution(f.t_ns, values, active, top, tail, scores.kept)


def _noise_scaled(cfg: AttributionConfig, f: TickFeatures) -> AttributionConfig:
    """The config with its joint and effort thresholds raised to noise_factor times the
    measured noise (itself, on a robot quieter than the thresholds)."""
    scaled = {name: above_noise(cfg, getattr(cfg, name), noise) for name, noise in (
        ("dynamics_residual_rad", f.joint_noise_rad), ("unexplained_residual_rad", f.joint_noise_rad),
        ("felt_min_nm", f.effort_noise), ("effort_residual_nm", f.effort_noise),
        ("contact_effort_nm", f.effort_noise))}
    if all(value == getattr(cfg, name) for name, value in scaled.items()):
        return cfg  # (a robot quieter than the thresholds: no copy)
    return replace(cfg, **scaled)


def above_noise(cfg: AttributionConfig, threshold: float, noise: float) -> float:
    """A threshold raised to ``noise_factor`` times the noise of its residual."""
    return max(threshold, cfg.noise_factor * noise)


def _sensor_rule(f: TickFeatures, cfg: AttributionConfig, scores: _Scores) -> bool:
    """1. sensor: the worst health flag; whether an untrusted stream suppresses the rest."""
    worst: tuple[str, float, dict[str, str]] | None = None
    untrusted = False
    for flag in f.sensor_flags:  # (mostly none)
        if worst is None or flag[1] > worst[1]:
            worst = flag
        untrusted = untrusted or untrusts_residuals(flag[0], flag[2].get("stream", ""))
    if worst is not None:
        name, severity, flag_evidence = worst
        scores.put("sensor", max(cfg.active_score, min(1.0, 0.5 + 0.5 * severity)), _SENSOR_EVENT_KINDS.get(name, name),
                   {"flag": name, **flag_evidence})
    recovering = f.since_untrusted_s < cfg.sensor_recovery_s
    return (untrusted or recovering) and cfg.sensor_suppresses


def untrusts_residuals(detector: str, stream: str) -> bool:
    """Whether a health flag makes every residual untrustworthy: an untrusted joint
    stream does. A wrench or pose stream's fault only takes that stream out of the
    analysis (the scan drops it at those rows; the joints' efforts stand in for a wrench)."""
    return detector in UNTRUSTED and stream.endswith("joint_states")


def _wrist(f: TickFeatures, cfg: AttributionConfig) -> _Wrist:
    ext = f.external_force_n
    ext_n = math.hypot(*ext)
    if not math.isfinite(ext_n):
        ext_n = 0.0  # a non-finite component: no force known
    effort = f.effort_residual
    stiffness = effort / max(f.joint_residual_rad, 1e-6)
    vertical = ext_n > 0 and abs(ext[2]) / ext_n >= cfg.payload_vertical_cos
    return _Wrist(
        ext=ext, ext_n=ext_n, stiffness=stiffness, free=not f.sim_contact_recent,
        felt=f.joints_valid and effort >= max(cfg.felt_min_nm, cfg.felt_lever_m * ext_n),
        hand_sized=f.wrench_valid and ext_n >= cfg.human_force_n,
        loaded=f.joints_valid and effort >= cfg.effort_residual_nm and stiffness >= cfg.external_stiffness_nm_per_rad,
        vertical=vertical, weight=vertical and ext[2] > 0 and not f.ee_offset_m[2] > 0)


def _wrench_rules(f: TickFeatures, cfg: AttributionConfig, w: _Wrist, scores: _Scores) -> None:
    """An external force: obstacle, sensor bias, contact, payload or an agent (first that holds)."""
    if (w.hand_sized and w.felt and math.isfinite(f.ee_error_m)
            and f.ee_error_m >= cfg.obstacle_ee_error_m and f.load_dragged is False):
        # unmodelled obstacle: the tool is pushed off its path by a force the sim lacks
        # (and stops against it; a tool that moves on against the force drags a hand)
        cos = 0.0
        speed_sim = _norm(f.sim_tip_velocity_m_s)
        if speed_sim > 1e-6 and w.ext_n > 1e-9:
            cos = float(np.dot(w.ext, -np.asarray(f.sim_tip_velocity_m_s)) / (w.ext_n * speed_sim))
        score = max(_ramp(w.ext_n, cfg.human_force_n), _ramp(f.ee_error_m, cfg.obstacle_ee_error_m))
        scores.put("unauthored", score, "obstacle",
                   {**_common_evidence(f, w.ext_n), "force_vs_motion_cos": f"{cos:.2f}"})
    elif f.wrench_valid and not w.felt and f.joints_valid and w.ext_n >= (
            cfg.ft_unfelt_force_n if w.free else cfg.contact_force_n + cfg.contact_force_rel * f.sim_force_n
    ) and cfg.felt_lever_m * w.ext_n >= above_noise(cfg, 0.0, f.effort_noise):
        # the wrist sensor reports a force the joints do not feel (and would, above their
        # noise): sensor bias
        s = max(cfg.active_score, _ramp(w.ext_n, cfg.ft_unfelt_force_n))
        if s > scores.sensor:
            scores.put("sensor", s, "ft_bias_drift", _common_evidence(f, w.ext_n))
    elif f.wrench_valid and not w.free and not _weight_past_table(f, cfg, w):
        _contact_rule(f, cfg, w, scores)
    elif not w.free and not f.wrench_valid:
        _contact_without_wrench(f, cfg, w, scores)
    elif _blocked_off_path(f, cfg) and not w.hand_sized:
        # pushed off its path further than a hand moves a position-held arm, by what the
        # wrist does not feel (a felt load the tool drags along is a hand): something
        # rigid the arm ran into with a link
        scores.put("unauthored", _ramp(f.ee_error_m, cfg.obstacle_ee_error_m), "obstacle",
                   {**_common_evidence(f, w.ext_n), "on_link": "true"})
    elif w.loaded and not _lags(f.fit, cfg):
        # (a load the fit explains as a delay moves with the arm's speed: the actuation's)
        if f.wrench_valid and w.ext_n >= cfg.ft_unfelt_force_n and w.weight:
            # a weight pulls the tool down (the sensor reads the table's push up as -z, a
            # weight's pull as +z) and sags it; a hand lifting or holding it up is not one
            scores.put("dynamics", _ramp(w.ext_n, cfg.ft_unfelt_force_n), "payload", _common_evidence(f, w.ext_n))
        elif not f.wrench_valid and (sag_cos := _sag_cos(f)) >= _payload_sag_min(f, cfg):
            # no wrist sensor: a weight shows as the tool sagging mostly straight down
            scores.put("dynamics", _ramp(f.effort_residual, cfg.effort_residual_nm), "payload",
                       {**_common_evidence(f, w.ext_n), "tool_sag_cos": f"{sag_cos:.2f}"})
        else:
            _agent(f, cfg, w, scores)


def _weight_past_table(f: TickFeatures, cfg: AttributionConfig, w: _Wrist) -> bool:
    """A weight pulling the tool down by more than the sim's whole contact force: a table
    can at most stop pushing, so this is no contact gap (the sim just left the surface)."""
    return w.weight and float(w.ext[2]) > cfg.contact_force_n + f.sim_force_n


def _blocked_off_path(f: TickFeatures, cfg: AttributionConfig) -> bool:
    """A loaded arm whose tool is ``obstacle_ee_error_m`` off its path, no joint
    stalled (a stalled joint also carries the tool off its path: that is the stall)."""
    return (f.joints_valid and not f.stalled_joints and f.effort_residual >= cfg.effort_residual_nm
            and math.isfinite(f.ee_error_m) and f.ee_error_m >= cfg.obstacle_ee_error_m)


def _agent(f: TickFeatures, cfg: AttributionConfig, w: _Wrist, scores: _Scores) -> None:
    """A person pushes or holds the arm: a stiff external load the sim lacks (unless the
    load flips with the joints' motion: that is friction in the joints)."""
    if _frictional(f, cfg):
        _put_friction(f, cfg, w, scores)
        return
    if _friction_kept(f, cfg, w):
        scores.put("dynamics", _ramp(f.effort_residual, cfg.effort_residual_nm), "joint_friction",
                   {**_common_evidence(f, w.ext_n), "friction_along_share": f"{f.friction_along_share:.2f}"})
        scores.kept = "dynamics"
        return
    speed_sim = _norm(f.sim_tip_velocity_m_s)
    blocked = speed_sim > 0.05 and _norm(f.real_tip_velocity_m_s) < cfg.blocked_speed_ratio * speed_sim
    # (a hold: the hand stops the arm, or its pull turned round as the arm moved past it)
    scores.put("human", _ramp(f.effort_residual, cfg.effort_residual_nm),
               "hold" if blocked or f.load_reversed else "push",
               {**_common_evidence(f, w.ext_n), "stiffness_nm_per_rad": f"{w.stiffness:.0f}",
                "load_reversed": str(f.load_reversed).lower()})


def _friction_kept(f: TickFeatures, cfg: AttributionConfig, w: _Wrist) -> bool:
    """A joint friction found a moment ago (within ``friction_kept_s`` of a run of at
    least ``established_min_s``) goes on while the joints' efforts push back along their
    motion (``friction_along_share``) and the wrist feels no load: between reversals the
    flip fit cannot tell friction from a steady push."""
    return (f.joints_valid and w.ext_n < cfg.human_force_n and f.friction_along_share >= cfg.friction_along_share
            and f.last_kind.get("dynamics") == "joint_friction"
            and f.since_established_s.get("dynamics", math.inf) <= cfg.friction_kept_s)


def _friction_starting(f: TickFeatures, cfg: AttributionConfig, w: _Wrist) -> bool:
    """Efforts pushing back along the moving joints' motion (``friction_onset_share``),
    above the friction floor, with nothing at the wrist and no stiff load: a friction
    before the joints' first reversal shows the flip fit what it is."""
    return (f.friction_along_share >= cfg.friction_onset_share and f.effort_residual >= _friction_min(f, cfg)
            and w.ext_n < cfg.ft_unfelt_force_n and not w.loaded)


def _put_friction_starting(f: TickFeatures, cfg: AttributionConfig, w: _Wrist, scores: _Scores) -> None:
    """Joint friction starting, scored by the effort residual over the friction floor."""
    scores.put("dynamics", _ramp(f.effort_residual, _friction_min(f, cfg)), "joint_friction",
               {**_common_evidence(f, w.ext_n), "friction_along_share": f"{f.friction_along_share:.2f}"})


def _frictional(f: TickFeatures, cfg: AttributionConfig) -> bool:
    """The largest effort residual is mostly a torque along its joint's motion that flips
    with it (friction), of at least ``friction_min_nm`` above the effort noise."""
    return f.joints_valid and f.friction_share >= cfg.friction_min_share and f.friction_nm >= _friction_min(f, cfg)


def _friction_min(f: TickFeatures, cfg: AttributionConfig) -> float:
    return above_noise(cfg, cfg.friction_min_nm, f.effort_noise)


def _put_friction(f: TickFeatures, cfg: AttributionConfig, w: _Wrist, scores: _Scores, **extra: str) -> None:
    scores.put("dynamics", _ramp(f.friction_nm, _friction_min(f, cfg)), "joint_friction",
               {**_common_evidence(f, w.ext_n), "friction_nm": f"{f.friction_nm:.2f}",
                "friction_share": f"{f.friction_share:.2f}", **extra})


def _payload_sag_min(f: TickFeatures, cfg: AttributionConfig) -> float:
    """How straight down a sag must be to be a weight: less for a payload found a moment ago."""
    kept = (f.last_kind.get("dynamics") == "payload"
            and f.since_active_s.get("dynamics", math.inf) <= cfg.payload_kept_s)
    return cfg.payload_kept_sag_cos if kept else cfg.payload_sag_cos


def _sag_cos(f: TickFeatures) -> float:
    """How straight down the real tool is displaced from the sim's (cos to -z; NaN unknown)."""
    norm = math.hypot(*f.ee_offset_m)
    return -float(f.ee_offset_m[2]) / norm if norm > 0 else math.nan


def _contact_rule(f: TickFeatures, cfg: AttributionConfig, w: _Wrist, scores: _Scores) -> None:
    """2. contact: modelled contact, force residual beyond what the model predicts."""
    thr = cfg.contact_force_n + cfg.contact_force_rel * f.sim_force_n
    if f.sim_contact and not w.loaded:  # a light contact's force changed by a share of itself
        thr = min(thr, max(cfg.contact_share_min_n, cfg.contact_share * f.sim_force_n))
    s = max(_ramp(f.force_residual_n, thr), _ramp(f.torque_residual_nm, cfg.contact_torque_nm))
    slip_recent = (f.last_kind.get("unauthored") == "object_slip"
                   and f.since_active_s.get("unauthored", math.inf) <= cfg.object_slip_linger_s)
    slipped_away = _object_displaced(f, cfg)
    if s >= cfg.active_score and w.felt and (slip_recent or slipped_away):
        # the object is not where the sim has it (it slipped): contact differs as a
        # result; after the slip has stopped this is no new gap, so it is not reported
        scores.put("unauthored", s if slip_recent else 0.0, "object_slip",
                   {"object_free_drift_m": f"{f.object_free_drift_m:.3f}",
                    "force_residual_n": f"{f.force_residual_n:.2f}"})
        scores.consequence = slip_recent  # (so the slip's linger runs from its own evidence)
    elif s >= cfg.active_score and w.felt and _actuation_in_contact(f, cfg):
        # a contact model changes the force on a position-held arm, its joints hardly move
        fit = f.fit
        if f.stalled_joints:
            # a joint stopped while its twin moves has stalled, in contact as in free space
            scores.put("unauthored", s, "joint_stall", {"in_contact": "true", "stalled": ",".join(f.stalled_joints),
                                                         "fit_gain": f"{fit.gain:.3f}"})
            return
        scores.put("dynamics", s, _actuation_kind(fit, cfg), {
            "in_contact": "true", "joint_residual_rad": f"{f.joint_residual_rad:.4f}",
            "fit_delay_s": f"{fit.delay_s:.3f}", "fit_gain": f"{fit.gain:.3f}", "fit_explained": f"{fit.explained:.2f}",
            "fit_joint_delay_share": f"{fit.joint_delay_share:.3f}",
            "force_residual_n": f"{f.force_residual_n:.2f}"})
    elif w.loaded and f.effort_residual > cfg.wrist_lever_max_m * w.ext_n:
        # the joints carry more than the wrist force could give them on the arm's longest
        # lever: a stiff load on a link (a person), not the contact at the tool
        _agent(f, cfg, w, scores)
    elif s >= cfg.active_score and w.felt and f.contact_carry:
        scores.put(f.contact_carry, s, f.last_kind.get(f.contact_carry, ""),
                   {"carried_into_contact": "true", "force_residual_n": f"{f.force_residual_n:.2f}",
                    "effort_residual": f"{f.effort_residual:.2f}"})
    elif s >= cfg.active_score and w.felt and _load_changed(f, cfg, w):
        return  # the surface is as modelled; what presses on it changed (a cause found elsewhere)
    elif s < cfg.active_score and _frictional(f, cfg):
        # the wrist feels the contact as modelled while the joints push back along their
        # motion: friction in the joints (the table's would be felt at the wrist)
        _put_friction(f, cfg, w, scores)
    elif s < cfg.active_score and _friction_starting(f, cfg, w):
        _put_friction_starting(f, cfg, w, scores)
    elif s < cfg.active_score and _actuation_in_contact(f, cfg) and not f.stalled_joints:
        # the wrist feels the contact as modelled while the joints are off their twins
        _put_actuation_in_contact(f, cfg, w, scores)
    elif w.felt or s < cfg.active_score:
        scores.put("contact", s, _contact_kind(f, cfg, w.ext), {
            "force_residual_n": f"{f.force_residual_n:.2f}", "sim_force_n": f"{f.sim_force_n:.2f}",
            "torque_residual_nm": f"{f.torque_residual_nm:.3f}", "effort_residual": f"{f.effort_residual:.2f}"})


def _put_actuation_in_contact(f: TickFeatures, cfg: AttributionConfig, w: _Wrist, scores: _Scores) -> None:
    """In modelled contact, joints off their twins as the delay/gain fit explains: the
    arm's own motion differs (a drive), not the surface it presses on. A drive that pushes
    harder while it falls behind works against friction in its joints."""
    fit = f.fit
    scores.put("dynamics", _ramp(f.joint_residual_rad, cfg.contact_actuation_rad), _drive_kind(f, fit, cfg), {
                   **_common_evidence(f, w.ext_n), "in_contact": "true", "fit_delay_s": f"{fit.delay_s:.3f}",
                   "fit_gain": f"{fit.gain:.3f}", "fit_explained": f"{fit.explained:.2f}"})


def tools_clear_of_object(real_tool_object_m: float | np.ndarray, sim_tool_object_m: float | np.ndarray,
                          cfg: AttributionConfig) -> bool | np.ndarray:
    """Both tools too far from the object to touch it (per value or per row): a contact
    elsewhere (the table wiped beside it) leaves it alone, so its motion is its own."""
    return (real_tool_object_m >= cfg.object_touch_m) & (sim_tool_object_m >= cfg.object_touch_m)


def _object_displaced(f: TickFeatures, cfg: AttributionConfig) -> bool:
    """A tool at the object (real or sim) while the object has drifted from where the sim has it."""
    at_object = f.real_tool_object_m < cfg.object_touch_m or f.sim_tool_object_m < cfg.object_touch_m
    return at_object and f.object_free_drift_m >= cfg.object_drift_m


def _contact_without_wrench(f: TickFeatures, cfg: AttributionConfig, w: _Wrist, scores: _Scores) -> None:
    """2b. contact without a wrist sensor: in modelled contact the joints carry an effort
    the sim's do not (a changed contact force on a position-held arm). Its direction is
    unknown, so the kind is read from where the tool went instead of the force. Not a
    contact gap: joints off their twins (the arm's own motion differs: a stall, a gain),
    an object that is not where the sim has it (the sim pushes an object the real tool
    does not reach), or an effort the flip fit finds flipping with its joint's motion
    (friction in that joint)."""
    if (not f.joints_valid or f.effort_residual < cfg.contact_effort_nm
            or f.joint_residual_rad >= cfg.contact_actuation_rad or _object_displaced(f, cfg)):
        return
    s = _ramp(f.effort_residual, cfg.contact_effort_nm)
    evidence = {"effort_residual": f"{f.effort_residual:.2f}", "joint_residual_rad": f"{f.joint_residual_rad:.4f}",
                "wrench": "missing"}
    if f.contact_carry:
        scores.put(f.contact_carry, s, f.last_kind.get(f.contact_carry, ""),
                   {**evidence, "carried_into_contact": "true"})
    elif _frictional(f, cfg):
        _put_friction(f, cfg, w, scores, wrench="missing")
    else:
        scores.put("contact", s, _contact_kind(f, cfg, -np.asarray(f.ee_offset_m, dtype=float)), evidence)


def _load_changed(f: TickFeatures, cfg: AttributionConfig, w: _Wrist) -> bool:
    """Along the table's normal (world z), a surface of changed stiffness lets the tool
    sink further where it presses less (or less far where it presses more); a changed
    load on an unchanged surface (the arm's gain, a weight) moves the tool's depth and its
    force together. Together here means the force residual and the tool's height offset
    have the same sign (the sensor reads the table's push on the tool as negative z)."""
    normal_n, depth_m = float(w.ext[2]), float(f.ee_offset_m[2])
    tangential_n = math.hypot(float(w.ext[0]), float(w.ext[1]))
    return (abs(normal_n) >= tangential_n and math.isfinite(depth_m) and abs(depth_m) >= cfg.contact_depth_min_m
            and normal_n * depth_m > 0)


def _actuation_in_contact(f: TickFeatures, cfg: AttributionConfig) -> bool:
    """In contact, a joint residual beyond ``contact_actuation_rad`` that the delay/gain
    fit explains is the actuation's, not the contact model's."""
    return (f.fit is not None and f.joints_valid and f.joint_residual_rad >= cfg.contact_actuation_rad
            and f.fit.explained >= cfg.dynamics_min_explained)


def _follows_little(fit: DelayFit, cfg: AttributionConfig) -> bool:
    """The fitted joint follows less than 1 - ``dynamics_max_gain_dev`` of its command's motion."""
    return fit.identifiable and fit.gain < 1.0 - cfg.dynamics_max_gain_dev


def _drive_kind(f: TickFeatures, fit: DelayFit, cfg: AttributionConfig) -> str:
    """Joints behind their twins: drives pushing harder work against friction in the
    joints; otherwise the fit's actuation kind."""
    return "joint_friction" if f.effort_residual >= cfg.effort_residual_nm else _actuation_kind(fit, cfg)


def _actuation_kind(fit: DelayFit, cfg: AttributionConfig) -> str:
    """A delay common to every moving joint, with the gain kept, is a latency; joints
    lagging by different delays (each its own loop's time constant) or a changed gain
    are a changed position-loop gain."""
    common = fit.joint_delay_share < cfg.gain_joint_delay_share
    return "actuation_latency" if fit.delay_s >= cfg.latency_min_s and abs(fit.gain - 1) < 0.2 and common else "gain"


def _lags(fit: DelayFit | None, cfg: AttributionConfig) -> bool:
    """The joints lag their twins by a delay the fit explains, with the gain kept: a
    residual that grows and fades with the arm's speed, which an external load does not."""
    return (fit is not None and fit.identifiable and fit.delay_s >= cfg.latency_min_s and abs(fit.gain - 1) < 0.2
            and fit.explained >= cfg.dynamics_min_explained)


def _contact_kind(f: TickFeatures, cfg: AttributionConfig, along: Sequence[float]) -> str:
    """What of the contact model a residual along ``along`` (world; the wrist force, or
    without one the tool's displacement) points at: along the table's normal (world z) its
    stiffness; along the surface its friction, or the object's mass while the real tool is
    at the object (what it pushes weighs more or less than modelled). While the tool
    slides, against the sim's own ratio of drag to normal force (see below)."""
    normal = abs(float(along[2]))
    tangential = math.hypot(float(along[0]), float(along[1]))
    if not math.isfinite(normal + tangential):
        return "stiffness"
    if tangential > normal and f.real_tool_object_m < cfg.object_touch_m:
        return "object_mass"
    sim = f.sim_contact_force_n
    sim_normal, sim_tangential = abs(float(sim[2])), math.hypot(float(sim[0]), float(sim[1]))
    if _norm(f.sim_tip_velocity_m_s) >= cfg.contact_sliding_m_s and sim_normal > 0 and normal > 0:
        # sliding, the modelled friction sets tangential/normal: a changed surface changes
        # both at that ratio, a changed friction breaks it
        friction_ratio = sim_tangential / sim_normal
        off = abs(tangential / normal - friction_ratio) > cfg.friction_ratio_tolerance * friction_ratio
        return "friction" if off else "stiffness"
    return "stiffness" if normal >= tangential else "friction"


def _unauthored_rules(f: TickFeatures, cfg: AttributionConfig, w: _Wrist, scores: _Scores) -> None:
    """4. unauthored: a stalled joint; the object moving away with nothing modelled touching it."""
    active_score = cfg.active_score
    stall_min_s = cfg.stall_undriven_min_s if f.stall_undriven else cfg.stall_min_s
    if (f.joints_valid and f.stalled_joints and f.stall_s >= stall_min_s
            and f.joint_residual_rad >= cfg.dynamics_residual_rad
            and scores.human < active_score and scores.unauthored < active_score):
        scores.put("unauthored", min(1.0, 0.5 + f.stall_s), "joint_stall",
                   {"stalled": ",".join(f.stalled_joints), "stall_s": f"{f.stall_s:.2f}"})
    untouched = (w.free and not f.real_contact) or tools_clear_of_object(
        f.real_tool_object_m, f.sim_tool_object_m, cfg)
    if (untouched and scores.unauthored < active_score and math.isfinite(f.object_error_m)
            and math.isfinite(f.object_error_speed_m_s) and f.object_error_m >= cfg.object_error_m
            and f.object_error_speed_m_s >= cfg.object_slip_speed_m_s
            and not (f.real_tool_object_m < cfg.object_touch_m)
            and not (f.sim_object_speed_m_s > cfg.object_still_m_s)):
        scores.put("unauthored", _ramp(f.object_error_speed_m_s, cfg.object_slip_speed_m_s), "object_slip",
                   {"object_error_m": f"{f.object_error_m:.3f}",
                    "object_error_speed_m_s": f"{f.object_error_speed_m_s:.3f}"})


def _dynamics_rule(f: TickFeatures, cfg: AttributionConfig, w: _Wrist, scores: _Scores) -> None:
    """5. dynamics: a free-space residual of the actuation the fit explains (else unexplained)."""
    fit = f.fit
    if (not f.joints_valid or fit is None or not w.free or f.stalled_joints
            or max(scores.human, scores.unauthored, scores.contact, scores.dynamics) >= cfg.active_score):
        return
    residual = f.joint_residual_rad
    if _frictional(f, cfg) and not w.loaded:
        # (a friction too small to move the joints by dynamics_residual_rad)
        _put_friction(f, cfg, w, scores)
    elif residual > cfg.dynamics_residual_rad and fit.explained >= cfg.dynamics_min_explained:
        score = _ramp(residual, cfg.dynamics_residual_rad)
        pushing = f.effort_residual >= cfg.effort_residual_nm
        if _follows_little(fit, cfg) and not pushing:
            # the worst joint follows a small part of its command's motion and its drive does
            # not push harder (as against friction): it has stalled, it is not a softer loop
            scores.put("unauthored", score, "joint_stall",
                       {**_common_evidence(f, w.ext_n), "fit_gain": f"{fit.gain:.3f}"})
            return
        kind = _drive_kind(f, fit, cfg)
        scores.put("dynamics", score, kind, {
            **_common_evidence(f, w.ext_n), "fit_delay_s": f"{fit.delay_s:.3f}", "fit_gain": f"{fit.gain:.3f}",
            "fit_explained": f"{fit.explained:.2f}", "fit_joint_delay_share": f"{fit.joint_delay_share:.3f}",
            "stiffness_nm_per_rad": f"{w.stiffness:.0f}"})
    elif residual > cfg.unexplained_residual_rad and f.unexplained_s >= cfg.unexplained_min_s:
        scores.put("unauthored", _ramp(residual, cfg.unexplained_residual_rad), "unexplained",
                   {**_common_evidence(f, w.ext_n), "fit_explained": f"{fit.explained:.2f}"})
    elif _friction_starting(f, cfg, w):
        _put_friction_starting(f, cfg, w, scores)


def _unauthored_tail(f: TickFeatures, cfg: AttributionConfig, scores: _Scores) -> bool:
    """An unauthored divergence (obstacle, stall) leaves the arm loaded or displaced for a
    while after its evidence fades; that tail is still the unauthored cause."""
    if scores.unauthored >= cfg.active_score:
        return False
    since_unauthored = f.since_active_s.get("unauthored", math.inf)
    tail_score = max(scores.human, scores.dynamics)
    own = "human" if scores.human >= scores.dynamics else "dynamics"
    if (since_unauthored > cfg.unauthored_linger_s or tail_score < cfg.active_score
            or f.since_established_s.get(own, math.inf) <= cfg.tail_own_cause_s):
        # (a cause established a moment ago goes on: a blip of unauthored evidence inside
        # it, such as a joint friction sticking for a tick, leaves it no tail)
        return False
    scores.human = scores.dynamics = 0.0
    scores.put("unauthored", tail_score, f.last_kind.get("unauthored", ""),
               {"after_unauthored_s": f"{since_unauthored:.2f}"})
    return True
