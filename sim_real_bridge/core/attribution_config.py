"""The attribution rules' named thresholds (monitor parameters ``attribution.*``).

What each rule tests is in :mod:`sim_real_bridge.core.attribution`; here are the numbers
it tests against, each with the physical quantity it is in. The joint and effort
thresholds are floors: the rules raise them to ``noise_factor`` times the noise measured
on the run.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from sim_real_bridge.errors import ConfigError


@dataclass
class AttributionConfig:
    """Named thresholds of the attribution rules (monitor parameters ``attribution.*``).

    Attributes:
        active_score: score at or above which a category counts as active.
        noise_factor: a joint or effort threshold is at least this many times the noise
            (standard deviation) of its residual measured on the run.
        noise_tau_s: time constant of that noise estimate.
        friction_tau_s: time constant of the per-joint fit of the effort residual to the
            joint's direction of motion (friction flips with it, an external load does not).
        friction_min_share: the largest effort residual is friction when at least this
            share of its mean square is a torque along the joint's motion that flips with it.
        friction_min_nm: that torque's least amplitude (at least ``noise_factor`` times the
            effort noise) for joint friction.
        friction_along_share: with the wrist feeling no load, effort residuals this much
            of whose square pushes back along the moving joints' motion (smoothed over
            ``friction_tau_s``) are friction in the joints, not a person's load on a link
            (which pushes some joints along their motion and some against it); this reads
            a friction before the joints reverse (the fit needs them moving both ways),
            while the fit found one within ``friction_kept_s`` in a run of at least
            ``established_min_s`` (a hand's damping flips with the motion too, for a moment).
        friction_kept_s: see friction_along_share.
        friction_onset_share: before the fit has seen a reversal, effort residuals of at
            least ``friction_min_nm`` this much of whose square pushes back along the moving
            joints' motion, with nothing felt at the wrist and no stiff load, are friction
            in the joints starting (a latency's or a gain's efforts lead and trail the
            motion in turn, so their share swings round a half).
        established_min_s: a category active this long without a break is established
            (a flicker of it is not).
        joint_residual_floor_rad: joint residual (smoothed L-inf) below this is noise.
        dynamics_residual_rad: smoothed joint residual (L-inf over joints) that starts
            a dynamics score (score 1 at 2x).
        dynamics_min_explained: share of the residual energy the delay/gain/offset fit
            must explain for dynamics.
        dynamics_max_delay_s: largest plausible actuation delay of the fit.
        dynamics_max_gain_dev: a fitted gain below 1 minus this (the worst joint follows
            a small part of its command's motion) is a stalled joint, not a softer loop.
        gain_joint_delay_share: when delays fitted joint by joint explain this share of
            what the common delay leaves, the joints lag each by its own time constant:
            a changed position-loop gain, not a latency (which delays every joint alike).
        effort_residual_nm: smoothed effort residual (L-inf) that counts as an external
            or unmodelled load (at least ``noise_factor`` times the measured effort noise;
            a nominal run's free-space residual beyond its noise stays under 0.5 N m,
            a 15 N push on a forearm link gives 2-3 N m).
        contact_effort_nm: in modelled contact without a wrist sensor, the smoothed effort
            residual that is a contact gap (at least ``noise_factor`` times the effort
            noise). The sim's contact predicts the joints' load: in nominal contact the
            residual stays under 0.45 N m on the three built-in robots (p99 over seeds
            480:560), a heavier object in a push gives 1-2 N m.
        contact_force_n: absolute part of the force-residual threshold in contact.
        contact_force_rel: relative part (times the sim force norm).
        contact_share: while the sim is in contact, a force residual this share of the sim's
            force is a contact gap too, if it is at least ``contact_share_min_n`` and the
            joints carry no stiff load (one on a link is not the contact's): the
            contact's own force changed by that much (a push's box sliding on a table whose
            friction fell by 40 % gives about 1.5-2 N against 3.5 N modelled; in nominal
            contact a residual above 1.5 N and 40 % of the modelled force lasts under
            0.3 s on the development seeds).
        contact_share_min_n: see contact_share.
        contact_torque_nm: torque residual threshold in contact.
        contact_recent_s: the sim counts as in contact this long after its contact ends.
        contact_carry_s: a dynamics or human cause active this recently when the sim's
            contact begins, after an active run of at least ``contact_carry_min_s``, is
            carried through that contact phase.
        contact_carry_min_s: see contact_carry_s (a flicker of a cause is not carried).
        contact_sliding_m_s: the sim's tool moving this fast in contact slides: the kind of a
            contact residual is then read from its tangential/normal ratio against the sim's
            own (the modelled friction coefficient).
        friction_ratio_tolerance: a residual whose tangential/normal ratio departs from the
            sim's by more than this share of it is friction, else stiffness.
        contact_depth_min_m: in contact, a tool height offset (real minus sim) this large
            tells a changed surface (depth and force change oppositely) from a changed load
            on it (together: no contact gap); below it the force residual is contact's.
        contact_actuation_rad: in contact, a smoothed joint residual this large that the
            delay/gain fit explains is dynamics (a contact model's change moves the
            position-held joints by a few mrad; an actuation change, by centiradians).
        human_force_n: wrist force residual that, with the tool pushed off its path by
            ``obstacle_ee_error_m``, is an unmodelled obstacle.
        felt_min_nm: a wrist force residual is "felt" (real, not a sensor artefact) when
            the effort residual is at least max(felt_min_nm, felt_lever_m * force).
        latency_min_s: a fitted delay at least this long (with the gain kept) is a lag
            of the actuation: a free-space load it explains is no external load.
        felt_lever_m: see felt_min_nm (a short lever: the sensor to the nearest joint).
        wrist_lever_max_m: the longest lever a wrist force has on a joint (about the arm's
            reach): in contact, a stiff load whose effort residual exceeds this times the
            wrist force residual acts on a link (a person), not at the tool.
        external_stiffness_nm_per_rad: effort residual over joint residual at or above
            which a free-space load is external (an agent or payload held by the
            position loop, which meets the servo's stiffness) rather than the actuation
            (gain, latency, joint friction: the joint lags, a low ratio). Over seeds
            0:160 and 480:560, 99% of push and payload ticks and 97% of hold ticks were
            at 800 N m/rad or more, 96% of joint-friction ticks below.
        ft_unfelt_force_n: wrist force residual not felt by the joints that is sensor bias;
            also the least vertical force that makes a felt load a payload.
        payload_vertical_cos: a felt free-space load whose wrist force is this vertical
            (world frame) is a payload.
        payload_sag_cos: without a wrist force, a felt free-space load that displaces the
            tool this straight down (cos to -z of real minus sim tool position) is a
            payload: a weight sags the tool mostly down, a person moves it mostly along
            the push.
        payload_kept_sag_cos: a payload found within ``payload_kept_s`` stays one while
            the sag is at least this straight down (cos to -z; the sag's direction turns
            with the arm's pose: its stiffness differs by direction).
        payload_kept_s: how recently (a few analysis ticks) that payload was found.
        obstacle_ee_error_m: a loaded arm (a felt wrist force of ``human_force_n``, or in
            free space an effort residual beyond ``effort_residual_nm``) whose tool is this
            far off its path, no joint stalled, ran into something rigid: a hand pushing
            or holding a position-held arm moves its tool less (a stiffer loop than a
            person's pull; on a compliant arm a hand could move it further). An obstacle
            keeps carrying the tool off as the sim moves on through it (7-46 cm in the
            development seeds), a hand at the tool moved it 1-5 cm.
        blocked_speed_ratio: real tip speed below this fraction of the sim's = blocked.
        hold_reference_s: a person's load starts in the direction (over the joints) of
            its effort residuals' mean over this long (see ``core/load_reversal.py``).
        hold_against_cos: pointing against that direction (cosine at most minus this)
            for ``hold_against_s`` on end, the load has turned round with the arm's
            position: a hand holding the arm where it was, not a push.
        hold_against_s: see ``hold_against_cos``.
        hold_reset_s: the human category idle this long, a load is a new one.
        load_moving_m_s: the sim's tool moving along a wrist force's axis at least this
            fast shows whether the real tool is blocked by it (an obstacle) or drags it (a
            hand holding on).
        dragged_speed_ratio: the real tool moving along that axis at least this fraction
            of the sim's speed drags what pulls it; slower, it is blocked.
        stall_min_s: a joint stalled this long is a stalled joint: a joint friction's
            stiction holds a joint for less, at a start or a reversal, until its drive
            pushes past it.
        stall_undriven_min_s: a stalled joint whose drive has not pushed harder along its
            twin's motion (by ``friction_min_nm``, raised to the effort noise) since it
            stopped is a stalled joint this soon: its drive gives nothing.
        object_error_m: object position error (real vs sim) needed for object_slip.
        object_slip_speed_m_s: growth rate of the object error, with the sim in free
            space (nothing modelled touches the object), that is a slip.
        object_drift_m: once the object has wandered this far on its own (or while a slip
            was seen within object_slip_linger_s), contact residuals at the object (the
            tool within object_touch_m of it on either side) are consequences of the
            slip (unauthored), not contact modelling.
        object_touch_m: with the real tool (ee) this close to the real object's centre the
            tool may be touching it: its motion is then a push, not a slip.
        object_still_m_s: a slip is the real object moving while the sim's stays still
            (slower than this); a moving sim object means the sim tool pushes it.
        object_slip_linger_s: such contact residuals count as the slip while it was seen
            this recently; later they are a known consequence and raise nothing.
        unexplained_residual_rad: residual the fit cannot explain that is unauthored.
        unexplained_min_s: how long the unexplained residual must persist.
        sensor_recovery_s: residual-based categories stay suppressed this long after an
            untrusted joint stream recovers, a wrench stream stays left out this long
            after it does (smoothing and fit windows still hold bad data).
        unauthored_linger_s: human or dynamics evidence within this long after the last
            direct unauthored evidence is attributed to the same unauthored cause (its
            tail); the tail never extends itself.
        tail_own_cause_s: a human or dynamics cause established within this long goes on
            as itself: an unauthored blip inside it (a joint friction sticking its joint
            for a tick) leaves no tail.
        sensor_suppresses: whether an untrusted real stream suppresses other categories.
    """

    active_score: float = 0.5
    noise_factor: float = 3.0
    noise_tau_s: float = 2.0
    friction_tau_s: float = 1.0
    friction_min_share: float = 0.65
    friction_min_nm: float = 0.3
    friction_along_share: float = 0.6
    friction_kept_s: float = 2.0
    friction_onset_share: float = 0.8
    established_min_s: float = 0.2
    joint_residual_floor_rad: float = 0.004
    dynamics_residual_rad: float = 0.006
    dynamics_min_explained: float = 0.6
    dynamics_max_delay_s: float = 0.25
    dynamics_max_gain_dev: float = 0.6
    gain_joint_delay_share: float = 0.25
    effort_residual_nm: float = 2.0
    contact_effort_nm: float = 1.0
    contact_force_n: float = 2.0
    contact_force_rel: float = 0.05
    contact_share: float = 0.4
    contact_share_min_n: float = 1.5
    contact_torque_nm: float = 0.6
    contact_recent_s: float = 0.3
    contact_carry_s: float = 0.5
    contact_carry_min_s: float = 0.2
    contact_actuation_rad: float = 0.02
    contact_depth_min_m: float = 0.0002
    contact_sliding_m_s: float = 0.1
    friction_ratio_tolerance: float = 0.3
    human_force_n: float = 4.0
    felt_min_nm: float = 1.0
    latency_min_s: float = 0.02
    felt_lever_m: float = 0.15
    wrist_lever_max_m: float = 1.2
    external_stiffness_nm_per_rad: float = 800.0
    ft_unfelt_force_n: float = 0.8
    payload_vertical_cos: float = 0.9
    payload_sag_cos: float = 0.7
    payload_kept_sag_cos: float = 0.5
    payload_kept_s: float = 0.25
    obstacle_ee_error_m: float = 0.04
    blocked_speed_ratio: float = 0.3
    hold_reference_s: float = 0.2
    hold_against_cos: float = 0.3
    hold_against_s: float = 0.1
    hold_reset_s: float = 1.0
    load_moving_m_s: float = 0.02
    dragged_speed_ratio: float = 0.8
    stall_min_s: float = 0.2
    stall_undriven_min_s: float = 0.12
    object_error_m: float = 0.0015
    object_slip_speed_m_s: float = 0.002
    object_drift_m: float = 0.004
    object_touch_m: float = 0.085
    object_still_m_s: float = 0.001
    object_slip_linger_s: float = 3.0
    unexplained_residual_rad: float = 0.05
    unexplained_min_s: float = 1.0
    sensor_recovery_s: float = 1.0
    unauthored_linger_s: float = 1.0
    tail_own_cause_s: float = 0.5
    sensor_suppresses: bool = True

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid field."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                continue
            if not np.isfinite(value) or value < 0:
                raise ConfigError(f"AttributionConfig.{f.name} must be finite and >= 0, got {value}")
        for name in ("noise_tau_s", "friction_tau_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"AttributionConfig.{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.active_score <= 1:
            raise ConfigError(f"AttributionConfig.active_score must be in (0, 1], got {self.active_score}")
        if not 0 <= self.dynamics_min_explained <= 1:
            raise ConfigError(
                f"AttributionConfig.dynamics_min_explained must be in [0, 1], got {self.dynamics_min_explained}"
            )

    @classmethod
    def from_dict(cls, values: dict) -> "AttributionConfig":
        """Build from a parameter dict (keys = field names); unknown keys are an error."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(f"unknown attribution parameter(s): {', '.join(unknown)}")
        out = cls(**values)
        out.validate()
        return out
