"""Attribution rules on hand-made tick features: one case per category and the priorities."""

from __future__ import annotations

import numpy as np
import pytest

from sim_real_bridge.core.attribution import AttributionConfig, attribute
from sim_real_bridge.core.fits import DelayFit
from sim_real_bridge.core.tick_features import TickFeatures
from sim_real_bridge.errors import ConfigError

CFG = AttributionConfig()


def feats(**kw) -> TickFeatures:
    base = dict(t_ns=0, joints_valid=True, wrench_valid=True,
                fit=DelayFit(0.0, 1.0, 0.0, 0.0, 0.0),
                ee_error_m=0.0, sim_tip_velocity_m_s=np.array([0.2, 0, 0]),
                real_tip_velocity_m_s=np.array([0.2, 0, 0]))
    base.update(kw)
    return TickFeatures(**base)


def active(f: TickFeatures, cfg: AttributionConfig = CFG) -> dict:
    return {c: kind for c, (_, kind, _) in attribute(f, cfg).active.items()}


def test_quiet_tick_is_none() -> None:
    verdict = attribute(feats(), CFG)
    assert verdict.active == {} and verdict.top == "none"
    assert set(verdict.scores) == {"dynamics", "contact", "sensor", "human", "unauthored"}


def test_dynamics_latency_and_gain() -> None:
    fit = DelayFit(delay_s=0.06, gain=1.0, explained=0.95)
    assert active(feats(joint_residual_rad=0.03, effort_residual=0.2, fit=fit)) == {"dynamics": "actuation_latency"}
    fit = DelayFit(delay_s=0.0, gain=0.6, explained=0.9)
    assert active(feats(joint_residual_rad=0.03, effort_residual=0.2, fit=fit)) == {"dynamics": "gain"}


def test_joints_lagging_by_different_delays_are_a_gain_not_a_latency() -> None:
    common = DelayFit(delay_s=0.05, gain=1.0, explained=0.95, joint_delay_share=0.01)
    assert active(feats(joint_residual_rad=0.03, effort_residual=0.2, fit=common)) == {"dynamics": "actuation_latency"}
    apart = DelayFit(delay_s=0.05, gain=1.0, explained=0.95, joint_delay_share=0.6)
    assert active(feats(joint_residual_rad=0.03, effort_residual=0.2, fit=apart)) == {"dynamics": "gain"}


def test_dynamics_needs_the_fit_to_explain_and_in_contact_more_than_a_surface_moves_the_joints() -> None:
    fit = DelayFit(delay_s=0.06, gain=1.0, explained=0.2)
    assert active(feats(joint_residual_rad=0.03, fit=fit)) == {}
    fit = DelayFit(delay_s=0.06, gain=1.0, explained=0.95)
    assert active(feats(joint_residual_rad=0.015, fit=fit)) == {"dynamics": "actuation_latency"}
    assert "dynamics" not in active(feats(joint_residual_rad=0.015, fit=fit, sim_contact_recent=True))
    assert active(feats(joint_residual_rad=0.03, fit=fit, sim_contact_recent=True)) == {"dynamics": "actuation_latency"}


def test_a_joint_that_does_not_follow_its_command_without_pushing_harder_has_stalled() -> None:
    still = DelayFit(delay_s=0.0, gain=0.05, explained=0.99, identifiable=True)
    assert active(feats(joint_residual_rad=0.04, effort_residual=0.3, fit=still)) == {"unauthored": "joint_stall"}
    # its drive pushing harder against it: friction
    assert active(feats(joint_residual_rad=0.04, effort_residual=6.0, fit=still)) == {"dynamics": "joint_friction"}
    # a joint that follows most of its command is a softer loop
    softer = DelayFit(delay_s=0.0, gain=0.7, explained=0.99, identifiable=True)
    assert active(feats(joint_residual_rad=0.04, effort_residual=0.3, fit=softer)) == {"dynamics": "gain"}


def test_friction_like_load_is_dynamics() -> None:
    fit = DelayFit(delay_s=0.03, gain=0.9, explained=0.9)
    # 8 N m over 0.06 rad: 133 N m/rad, far below an external load held by the position loop
    f = feats(joint_residual_rad=0.06, effort_residual=8.0, fit=fit)
    assert active(f) == {"dynamics": "joint_friction"}


def test_a_joint_friction_found_a_moment_ago_goes_on_while_the_joints_drag_along_their_motion() -> None:
    # seeds 508, 528, 551: between reversals the flip fit cannot tell friction from a steady
    # push; the efforts of the moving joints all pushing back along their motion can
    stiff = dict(joint_residual_rad=0.01, effort_residual=10.0, fit=DelayFit(explained=0.99), friction_along_share=0.8)
    recent = dict(last_kind={"dynamics": "joint_friction"}, since_established_s={"dynamics": 1.0})
    verdict = attribute(feats(**stiff, **recent), CFG)
    assert {c: a[1] for c, a in verdict.active.items()} == {"dynamics": "joint_friction"}
    assert verdict.kept == "dynamics"  # it does not extend itself: friction_kept_s runs from the fit's
    assert active(feats(**stiff)) == {"human": "push"}  # no friction found before: a person
    assert active(feats(**stiff, last_kind={"dynamics": "joint_friction"},
                        since_established_s={"dynamics": 3.0})) == {"human": "push"}
    assert active(feats(**{**stiff, "friction_along_share": 0.4}, **recent)) == {"human": "push"}
    # a flicker of friction is not kept (a hand's damping flips with the motion for a moment)
    flicker = dict(last_kind={"dynamics": "joint_friction"}, since_active_s={"dynamics": 0.5})
    assert active(feats(**stiff, **flicker)) == {"human": "push"}
    # a load the wrist feels is no joint's friction
    felt = dict(external_force_n=np.array([0.0, 8.0, 0.0]), force_residual_n=8.0)
    assert "human" in active(feats(**stiff, **recent, **felt))
    assert not attribute(feats(**stiff), CFG).kept


def test_a_load_that_lags_the_joints_more_than_the_servo_stiffness_allows_is_no_person() -> None:
    # seeds 508, 517 (ur6): a joint friction before its first reversal, 3.7 N m for 6.4 mrad
    # (560 N m/rad); a person pushing a position-held arm meets the servo's stiffness
    # (99% of push ticks at 800 N m/rad or more)
    lagging = dict(joint_residual_rad=0.0064, effort_residual=3.7, fit=DelayFit(explained=0.9))
    assert "human" not in active(feats(**lagging))
    assert active(feats(**{**lagging, "effort_residual": 6.4})) == {"human": "push"}


def test_stiff_external_load_without_wrist_force_is_human() -> None:
    f = feats(joint_residual_rad=0.015, effort_residual=20.0, fit=DelayFit(explained=0.99))
    assert active(f) == {"human": "push"}
    f = feats(joint_residual_rad=0.015, effort_residual=20.0, real_tip_velocity_m_s=np.zeros(3))
    assert active(f) == {"human": "hold"}
    # a load that turned round as the arm moved on is a hand holding it, though the arm drags it along
    f = feats(joint_residual_rad=0.015, effort_residual=20.0, fit=DelayFit(explained=0.99), load_reversed=True)
    assert active(f) == {"human": "hold"}
    assert attribute(f, CFG).active["human"][2]["load_reversed"] == "true"


def test_a_stiff_residual_the_fit_explains_as_a_delay_is_the_actuation_not_a_person() -> None:
    # seed 114: a 17 ms latency on arm7 (effort 1.5 N m per mrad, like a push) lags the
    # joints by a delay the fit finds; a push's residual does not grow with the arm's speed
    load = dict(joint_residual_rad=0.008, effort_residual=12.0)
    lag = DelayFit(delay_s=0.03, gain=1.0, explained=0.99, identifiable=True)
    assert set(active(feats(**load, fit=lag))) == {"dynamics"}
    assert active(feats(**load, fit=DelayFit(delay_s=0.0, gain=1.0, explained=0.99, identifiable=True))) == {
        "human": "push"}


def test_a_light_push_on_a_link_near_the_base_is_a_person() -> None:
    # 15 N on a forearm link is 2-3 N m at the joints; a nominal run's free-space effort
    # residual stays under 0.5 N m on every built-in robot
    f = feats(joint_residual_rad=0.0012, effort_residual=2.6, fit=DelayFit(explained=0.99))
    assert active(f) == {"human": "push"}
    assert active(feats(joint_residual_rad=0.0012, effort_residual=0.5, fit=DelayFit(explained=0.99))) == {}


def test_vertical_felt_load_is_payload() -> None:
    f = feats(joint_residual_rad=0.007, effort_residual=11.0, external_force_n=np.array([0.3, -0.5, 19.0]),
              real_contact=True)
    assert active(f) == {"dynamics": "payload"}


def test_a_vertical_load_is_a_weight_only_when_it_pulls_the_tool_down() -> None:
    # A hand holding the tool up against the sim's descent reads -z (as the table's push
    # does) and the real tool is above the sim's: a person, not a weight (seed 9's hold).
    load = dict(joint_residual_rad=0.002, effort_residual=8.0, ee_offset_m=np.array([0.0013, -0.0002, 0.0019]))
    assert active(feats(**load, external_force_n=np.array([3.1, -0.6, -11.4]))) == {"human": "push"}
    # a downward pull with the tool lifted (a bias along +z while a person pushes it up): a person
    assert active(feats(**load, external_force_n=np.array([0.0, 0.0, 8.0]))) == {"human": "push"}
    load["ee_offset_m"] = np.array([-0.0023, 0.0009, -0.0026])
    assert active(feats(**load, external_force_n=np.array([0.0, 0.0, 8.0]))) == {"dynamics": "payload"}


def test_a_payload_sagging_the_moving_tool_is_no_obstacle() -> None:
    # A payload's weight sags the tool ~1 cm while it moves: still a payload, not an obstacle.
    f = feats(joint_residual_rad=0.007, effort_residual=11.0, external_force_n=np.array([0.5, -1.0, 19.5]),
              ee_error_m=0.015)
    assert active(f) == {"dynamics": "payload"}
    # A vertical load that displaces the tool by centimetres and stops it is something in the way.
    f.ee_error_m = 0.05
    f.load_dragged = False
    assert active(f) == {"unauthored": "obstacle"}


def test_a_weight_pulling_harder_than_the_table_pushes_is_a_payload_not_contact() -> None:
    # Seed 203: the sim has just lifted the tool off the table (recent contact, its push
    # 0.3 N) while the real tool reads a 20 N pull down: no table pulls, a weight does.
    load = dict(joint_residual_rad=0.005, effort_residual=10.0, external_force_n=np.array([0.1, 0.1, 20.0]),
                force_residual_n=20.0, ee_offset_m=np.array([-0.003, -0.0014, -0.0035]), sim_contact_recent=True)
    assert active(feats(**load, sim_force_n=0.3)) == {"dynamics": "payload"}
    # a table still pushing 30 N may push 20 N less: a contact residual
    assert "contact" in active(feats(**load, sim_contact=True, sim_force_n=30.0))


def test_without_a_wrist_sensor_a_load_sagging_the_tool_is_payload() -> None:
    load = dict(joint_residual_rad=0.01, effort_residual=12.0, wrench_valid=False,
                external_force_n=np.full(3, np.nan))
    assert active(feats(**load, ee_offset_m=np.array([0.001, -0.0005, -0.003]))) == {"dynamics": "payload"}
    # the tool pushed sideways (and a little down) is a person
    assert active(feats(**load, ee_offset_m=np.array([0.003, 0.001, -0.0015]))) == {"human": "push"}
    # no pose to tell: a person, as before
    assert active(feats(**load)) == {"human": "push"}


def test_without_a_wrist_sensor_a_payload_found_a_moment_ago_stays_one_as_its_sag_turns() -> None:
    # Seed 469 (arm7): a payload's sag is 46 degrees off vertical in part of the wipe (the
    # arm is stiffer in some directions): it flickered between payload and push.
    load = dict(joint_residual_rad=0.003, effort_residual=6.0, wrench_valid=False, external_force_n=np.full(3, np.nan),
                ee_offset_m=np.array([-0.0021, 0.0009, -0.0022]))  # cos to -z 0.69
    assert active(feats(**load)) == {"human": "push"}
    payload_now = dict(last_kind={"dynamics": "payload"}, since_active_s={"dynamics": 0.02})
    assert active(feats(**load, **payload_now)) == {"dynamics": "payload"}
    assert active(feats(**load, last_kind={"dynamics": "payload"}, since_active_s={"dynamics": 5.0})) == {
        "human": "push"}  # (a payload of long ago)
    # a sag mostly sideways is a person, payload or not
    assert active(feats(**{**load, "ee_offset_m": np.array([0.003, 0.001, -0.0015])}, **payload_now)) == {
        "human": "push"}


def test_in_contact_joints_pushing_back_along_their_motion_with_the_wrist_as_modelled_is_joint_friction() -> None:
    # Seed 226: friction in a joint during a wipe's contact; the wrist reads the contact
    # as the sim models it (the table's friction would be felt there).
    rubbing = dict(sim_contact_recent=True, sim_contact=True, sim_force_n=30.0, effort_residual=1.0,
                   joint_residual_rad=0.001, friction_nm=0.9, friction_share=0.9)
    assert active(feats(**rubbing, force_residual_n=0.5, external_force_n=np.array([0.2, 0.4, 0.1]))) == {
        "dynamics": "joint_friction"}
    # a contact residual at the wrist is the contact's
    felt = {**rubbing, "effort_residual": 6.7}
    assert active(feats(**felt, force_residual_n=8.0, external_force_n=np.array([0.0, 8.0, 0.5]))) == {
        "contact": "friction"}
    # and an effort residual that does not flip with the motion is nothing here
    assert active(feats(**{**rubbing, "friction_share": 0.2}, force_residual_n=0.5)) == {}
    # Seed 558: before the flip fit has seen a reversal, efforts pushing back almost only
    # along the motion with the wrist as modelled are friction starting, in contact too
    starting = {**rubbing, "friction_nm": 0.0, "friction_share": 0.0, "friction_along_share": 0.85}
    assert active(feats(**starting, force_residual_n=0.5)) == {"dynamics": "joint_friction"}
    assert active(feats(**{**starting, "friction_along_share": 0.6}, force_residual_n=0.5)) == {}


def test_efforts_pushing_back_almost_only_along_the_motion_before_any_reversal_are_friction_starting() -> None:
    # Seed 674: 1 N m of friction in a reach (effort noise 0.08 N m) moved no joint by a
    # millimetre; the flip fit found it at the first reversal, 4.7 s after it began.
    rubbing = dict(effort_residual=1.0, joint_residual_rad=0.001, effort_noise=0.08, friction_along_share=0.85)
    assert active(feats(**rubbing)) == {"dynamics": "joint_friction"}
    # efforts leading and trailing the motion in turn (a latency, a gain) are not it
    assert active(feats(**{**rubbing, "friction_along_share": 0.6})) == {}
    # nor is what the effort noise could give, nor a load the wrist feels
    assert active(feats(**{**rubbing, "effort_residual": 0.2})) == {}
    assert active(feats(**rubbing, external_force_n=np.array([0.0, 1.5, 0.0]))) == {}
    # a stiff load (3 N m over 2 mrad) is a person's, along the motion or not
    assert active(feats(**{**rubbing, "effort_residual": 3.0, "joint_residual_rad": 0.002})) == {"human": "push"}


def test_unfelt_wrist_force_is_sensor_bias() -> None:
    f = feats(effort_residual=0.2, external_force_n=np.array([0.0, 0.0, 3.0]))
    assert active(f) == {"sensor": "ft_bias_drift"}
    # in contact the threshold is the contact one: 3 N of chatter-level residual is not bias
    f = feats(effort_residual=0.2, external_force_n=np.array([0.0, 0.0, 3.0]), sim_contact_recent=True,
              sim_force_n=30.0, force_residual_n=3.0)
    assert active(f) == {}


def test_joint_and_effort_thresholds_are_in_units_of_the_measured_noise() -> None:
    load = dict(joint_residual_rad=0.015, effort_residual=20.0)
    assert active(feats(**load, effort_noise=5.0)) == {"human": "push"}  # 20 N m: 4 sigma
    assert active(feats(**load, effort_noise=8.0)) == {}  # 2.5 sigma: within the noise
    fit = DelayFit(delay_s=0.06, gain=1.0, explained=0.95)
    assert active(feats(joint_residual_rad=0.03, fit=fit, joint_noise_rad=0.005)) == {"dynamics": "actuation_latency"}
    assert active(feats(joint_residual_rad=0.03, fit=fit, joint_noise_rad=0.012)) == {}
    # where the efforts are too noisy to feel a wrist force, its absence from them is no bias
    bias = dict(effort_residual=0.2, external_force_n=np.array([0.0, 0.0, 3.0]))
    assert active(feats(**bias, effort_noise=0.1)) == {"sensor": "ft_bias_drift"}
    assert active(feats(**bias, effort_noise=1.0)) == {}


def test_in_contact_a_large_joint_residual_the_fit_explains_is_the_actuation() -> None:
    contact = dict(sim_contact_recent=True, sim_contact=True, sim_force_n=40.0, force_residual_n=20.0,
                   external_force_n=np.array([0.0, -3.0, 20.0]), effort_residual=9.0)
    fit = DelayFit(delay_s=0.05, gain=0.86, explained=0.99)
    assert active(feats(**contact, joint_residual_rad=0.06, fit=fit)) == {"dynamics": "actuation_latency"}
    assert active(feats(**contact, joint_residual_rad=0.005, fit=fit)) == {"contact": "stiffness"}  # mm: the table
    unexplained = DelayFit(delay_s=0.05, gain=0.86, explained=0.3)
    assert active(feats(**contact, joint_residual_rad=0.06, fit=unexplained)) == {"contact": "stiffness"}
    # a joint stopped while its twin moves (seed 102: a stall during a wipe) is no gain
    stalled = dict(stalled_joints=("shoulder_pan_joint",), stall_s=0.1)
    assert active(feats(**contact, **stalled, joint_residual_rad=0.03, fit=DelayFit(gain=0.0, explained=1.0))) == {
        "unauthored": "joint_stall"}


def test_in_contact_with_the_wrist_as_modelled_joints_off_their_twins_as_the_fit_explains_are_the_actuation() -> None:
    # Seed 200: friction in the joints of an arm pushing a box. The box is pushed as the
    # sim pushes it (the wrist reads 0.5 N more), yet the joints trail their twins by
    # 0.037 rad and the drives push 3.9 N m harder: that was nothing until a reversal.
    pushing = dict(sim_contact_recent=True, sim_contact=True, real_contact=True, sim_force_n=20.0,
                   force_residual_n=0.5, external_force_n=np.array([0.4, 0.2, 0.1]))
    fit = DelayFit(delay_s=0.0, gain=0.81, explained=0.93)
    assert active(feats(**pushing, joint_residual_rad=0.037, effort_residual=3.9, fit=fit)) == {
        "dynamics": "joint_friction"}
    # the same lag with drives that do not push harder is a softer or later loop
    assert active(feats(**pushing, joint_residual_rad=0.037, effort_residual=0.3, fit=fit)) == {"dynamics": "gain"}
    latency = DelayFit(delay_s=0.08, gain=1.0, explained=0.9)
    assert active(feats(**pushing, joint_residual_rad=0.03, effort_residual=0.3, fit=latency)) == {
        "dynamics": "actuation_latency"}
    # a lag under contact_actuation_rad, or one the fit does not explain, is nothing here
    assert active(feats(**pushing, joint_residual_rad=0.015, effort_residual=3.9, fit=fit)) == {}
    unexplained = DelayFit(delay_s=0.0, gain=0.81, explained=0.3)
    assert active(feats(**pushing, joint_residual_rad=0.037, effort_residual=3.9, fit=unexplained)) == {}
    # and a stalled joint is left to the stall rule (it needs stall_min_s)
    stalled = dict(stalled_joints=("joint4",), stall_s=0.3)
    assert active(feats(**pushing, **stalled, joint_residual_rad=0.037, effort_residual=0.3, fit=fit)) == {
        "unauthored": "joint_stall"}


def test_contact_residual_felt_by_the_joints() -> None:
    f = feats(sim_contact_recent=True, sim_contact=True, sim_force_n=35.0, force_residual_n=12.0,
              external_force_n=np.array([0.0, -12.0, 3.0]), effort_residual=6.7, joint_residual_rad=0.006)
    assert active(f) == {"contact": "friction"}  # along the table: its friction
    f.real_tool_object_m = 0.04
    assert active(f) == {"contact": "object_mass"}  # along the table, at the object: what it weighs
    f.external_force_n = np.array([0.0, -3.0, 12.0])
    assert active(f) == {"contact": "stiffness"}  # along the table's normal: how hard it is
    f.force_residual_n = 2.0
    f.external_force_n = np.array([0.0, -2.0, 0.0])
    f.effort_residual = 1.0  # (the joints carrying 6.7 N m of it would be a load on a link)
    assert active(f) == {}


def test_a_light_contacts_force_changed_by_a_share_of_itself_is_a_contact_gap() -> None:
    """A push's box on a table whose friction fell: 1.9 N less against 3.5 N modelled."""
    f = feats(sim_contact_recent=True, sim_contact=True, sim_force_n=3.5, force_residual_n=1.9,
              external_force_n=np.array([0.0, -1.9, 0.0]), effort_residual=1.2, joint_residual_rad=0.001,
              real_tool_object_m=0.04)
    assert active(f) == {"contact": "object_mass"}  # (at the box, mu m g: see the module notes)
    f.force_residual_n = 1.2  # under contact_share_min_n: too small to tell from the noise
    assert active(f) == {}
    f.force_residual_n, f.sim_force_n = 1.9, 30.0  # a 6 % share of a wipe's press: no gap
    assert active(f) == {}
    f.sim_force_n, f.sim_contact = 3.5, False  # the sim's contact just ended: its force is a transient
    assert active(f) == {}
    # Seed 458: joints loaded far beyond what the wrist force explains carry a load on a
    # link, not the contact at the tool: the contact's share threshold is not theirs
    # (60 N m over 30 mrad the fit explains: by the share alone it would read as the actuation)
    f.sim_contact, f.effort_residual, f.joint_residual_rad = True, 60.0, 0.03
    f.fit = DelayFit(delay_s=0.0, gain=0.6, explained=0.9)
    assert set(active(f)) == {"human"}


def test_in_contact_joints_loaded_beyond_what_the_wrist_force_explains_are_pushed_by_a_person() -> None:
    # seed 107: a 45 N push on a forearm link during a wipe; the wrist feels a little of it
    contact = dict(sim_contact_recent=True, sim_contact=True, sim_force_n=30.0, joint_residual_rad=0.004)
    pushed = feats(**contact, force_residual_n=3.0, external_force_n=np.array([1.0, -2.0, 2.0]), effort_residual=9.0)
    assert active(pushed) == {"human": "push"}
    # the same effort with a wrist force that explains it on a short lever: the table differs
    table = feats(**contact, force_residual_n=15.0, external_force_n=np.array([0.0, -1.0, 15.0]), effort_residual=9.0)
    assert active(table) == {"contact": "stiffness"}
    # a soft load (the arm's own actuation: low effort per radian) is not a person
    soft = feats(**{**contact, "joint_residual_rad": 0.04}, force_residual_n=3.0,
                 external_force_n=np.array([1.0, -2.0, 2.0]), effort_residual=9.0)
    assert "human" not in active(soft)


def test_without_a_wrist_sensor_a_contact_gap_shows_in_the_joint_efforts() -> None:
    # seed 150 (ur6 wipe, no F/T sensor): a softer table lets the tool sink 1.7 mm and the
    # joints carry 7 N m the sim's do not while they stay on their twins
    contact = dict(sim_contact_recent=True, sim_contact=True, wrench_valid=False, external_force_n=np.full(3, np.nan),
                   effort_residual=7.0, joint_residual_rad=0.0025)
    assert active(feats(**contact, ee_offset_m=np.array([0.0002, 0.0001, -0.0017]))) == {"contact": "stiffness"}
    assert active(feats(**contact, ee_offset_m=np.array([0.0015, -0.001, 0.0002]))) == {"contact": "friction"}
    # nominal contact efforts stay under 0.5 N m on every built-in robot
    assert active(feats(**{**contact, "effort_residual": 0.5})) == {}
    # a heavier object in a push (seed 492, panda7, mass x1.7): 1.5 N m, under the free-space
    # load threshold, beyond contact_effort_nm; on a robot whose efforts are noisier it is noise
    push = dict(ee_offset_m=np.array([0.0012, -0.0004, 0.0001]), real_tool_object_m=0.08)
    assert active(feats(**{**contact, "effort_residual": 1.5}, **push)) == {"contact": "object_mass"}
    assert active(feats(**{**contact, "effort_residual": 1.5, "effort_noise": 0.6}, **push)) == {}
    # the joints off their twins: the arm's own motion differs (a stall, a gain), not the contact
    assert active(feats(**{**contact, "joint_residual_rad": 0.03})) == {}
    # the sim pushes an object that is not where the real one is (seed 132, after a stall)
    displaced = dict(object_free_drift_m=0.0064, sim_tool_object_m=0.02, real_tool_object_m=0.2)
    assert active(feats(**contact, **displaced)) == {}
    # seed 419 (panda7 wipe): 1.1 N m on one joint that flips with its motion, as the flip
    # fit finds it, is friction in that joint (read as contact friction for 3 s before)
    rubbing = {**contact, "effort_residual": 1.1, "joint_residual_rad": 0.001, "friction_nm": 0.95,
               "friction_share": 0.85}
    assert active(feats(**rubbing, ee_offset_m=np.array([0.0015, -0.001, 0.0002]))) == {"dynamics": "joint_friction"}
    assert active(feats(**{**rubbing, "friction_share": 0.2}, ee_offset_m=np.array([0.0015, -0.001, 0.0002]))) == {
        "contact": "friction"}


def test_sliding_a_residual_at_the_sims_friction_ratio_is_the_surface_off_it_the_friction() -> None:
    # the sim's tool slides at 0.3 m/s pressing 20 N with 9.4 N of drag (ratio 0.47)
    sliding = dict(sim_contact_recent=True, sim_contact=True, sim_force_n=22.1, effort_residual=8.0,
                   joint_residual_rad=0.004, sim_contact_force_n=np.array([0.0, 9.4, -20.0]),
                   sim_tip_velocity_m_s=np.array([0.0, 0.3, 0.0]), real_tip_velocity_m_s=np.array([0.0, 0.3, 0.0]))
    # 18 N more normal force and 8.5 N more drag: the same law, a stiffer table
    assert active(feats(**sliding, force_residual_n=19.9, external_force_n=np.array([0.0, 8.5, -18.0]))) == {
        "contact": "stiffness"}
    # 8 N more normal force with 17 N more drag (seed 33 at full speed): the friction changed
    assert active(feats(**sliding, force_residual_n=18.8, external_force_n=np.array([0.0, 17.0, -8.0]))) == {
        "contact": "friction"}
    # (seed 83 mid-stroke: a normal residual above the drag, still off the sim's ratio)
    assert active(feats(**sliding, force_residual_n=21.0, external_force_n=np.array([0.0, 15.0, -17.0]))) == {
        "contact": "friction"}


def test_in_contact_the_tool_depth_tells_a_changed_surface_from_a_changed_load() -> None:
    # the tool presses 15 N less on the table (the sensor reads the table's push as -z)
    contact = dict(sim_contact_recent=True, sim_contact=True, sim_force_n=40.0, force_residual_n=15.0,
                   external_force_n=np.array([0.0, 1.0, 15.0]), effort_residual=7.0, joint_residual_rad=0.002)
    # ... and sinks 2 mm deeper: a softer table
    assert active(feats(**contact, ee_offset_m=np.array([0.0, 0.0, -0.002]))) == {"contact": "stiffness"}
    # ... and rises 1.5 mm: the table is as modelled, the arm presses less (a weaker gain)
    assert active(feats(**contact, ee_offset_m=np.array([0.0, 0.0, 0.0015]))) == {}
    # within a fifth of a millimetre the depth tells nothing: the force residual is contact's
    assert active(feats(**contact, ee_offset_m=np.array([0.0, 0.0, 0.0001]))) == {"contact": "stiffness"}


def test_obstacle_pushes_the_tool_off_its_path() -> None:
    f = feats(sim_contact_recent=True, sim_force_n=30.0, force_residual_n=35.0,
              external_force_n=np.array([0.0, -16.0, 33.0]), effort_residual=27.0,
              joint_residual_rad=0.02, ee_error_m=0.05, load_dragged=False)
    assert active(f) == {"unauthored": "obstacle"}
    # 3 cm off its path under a felt force: as far as a hand at the tool moves it
    assert "unauthored" not in active(feats(sim_contact_recent=True, sim_force_n=30.0, force_residual_n=35.0,
                                            external_force_n=np.array([0.0, -16.0, 33.0]), effort_residual=27.0,
                                            joint_residual_rad=0.02, ee_error_m=0.03, load_dragged=False))


def test_a_tool_that_keeps_pace_against_the_force_drags_a_hand_not_an_obstacle() -> None:
    free = dict(external_force_n=np.array([0.0, -40.0, 20.0]), effort_residual=30.0, joint_residual_rad=0.012,
                ee_error_m=0.045, fit=DelayFit(explained=0.99))
    assert active(feats(**free, load_dragged=False)) == {"unauthored": "obstacle"}
    # held back 3 cm by a hand at the tool: a person, whatever the drag
    assert active(feats(**{**free, "ee_error_m": 0.03}, load_dragged=False)) == {"human": "push"}
    assert active(feats(**free, load_dragged=True)) == {"human": "push"}
    # not yet seen moving along the force: nothing says it is in the way
    assert active(feats(**free)) == {"human": "push"}


def test_a_loaded_arm_pushed_further_off_its_path_than_a_hand_moves_it_ran_into_something() -> None:
    # a link blocked by a rigid body: the drive pushes at its limit, the wrist feels nothing
    blocked = dict(joint_residual_rad=0.1, effort_residual=150.0, fit=DelayFit(explained=0.5))
    assert active(feats(**blocked, ee_error_m=0.06)) == {"unauthored": "obstacle"}
    # a push or hold moves a position-held arm's tool by under 4 cm: a person
    assert active(feats(**blocked, ee_error_m=0.03)) == {"human": "push"}
    # a stalled joint carries the tool off its path too: not an obstacle
    assert "obstacle" not in active(feats(**blocked, ee_error_m=0.06, stalled_joints=("j2",), stall_s=0.5)).values()
    # in modelled contact the residual is the contact's to explain
    assert "unauthored" not in active(feats(**blocked, ee_error_m=0.06, sim_contact_recent=True, wrench_valid=False))


def test_a_stopped_joint_whose_drive_gives_nothing_is_a_stall_sooner_than_one_whose_drive_pushes() -> None:
    # Between stall_undriven_min_s and stall_min_s: a drive pushing harder may be stiction
    # about to break away; a drive that gave nothing more since the joint stopped has failed.
    stopped = dict(joint_residual_rad=0.02, stalled_joints=("j2",), stall_s=0.15, fit=DelayFit(gain=0.2, explained=0.9))
    assert CFG.stall_undriven_min_s < 0.15 < CFG.stall_min_s
    assert active(feats(**stopped, stall_undriven=True)) == {"unauthored": "joint_stall"}
    assert active(feats(**stopped, stall_undriven=False)) == {}
    assert active(feats(**{**stopped, "stall_s": 0.25}, stall_undriven=False)) == {"unauthored": "joint_stall"}


def test_stalled_joint_and_slipping_object() -> None:
    f = feats(joint_residual_rad=0.2, stalled_joints=("j2",), stall_s=0.5,
              fit=DelayFit(gain=0.0, explained=0.9))
    assert active(f) == {"unauthored": "joint_stall"}
    # a joint read as still while its twin moves, yet where its twin is (seed 113: velocity
    # readings just back from a frozen stream), has not stalled: a stall falls behind
    f.joint_residual_rad = 0.0001
    assert active(f) == {}
    f = feats(object_error_m=0.02, object_error_speed_m_s=0.01)
    assert active(f) == {"unauthored": "object_slip"}
    f = feats(object_error_m=0.02, object_error_speed_m_s=0.01, sim_contact_recent=True)
    assert "unauthored" not in active(f)  # the tool is pushing it: a contact matter


def test_unauthored_tail_keeps_its_cause() -> None:
    f = feats(joint_residual_rad=0.015, effort_residual=20.0, since_active_s={"unauthored": 0.4},
              last_kind={"unauthored": "obstacle"})
    assert active(f) == {"unauthored": "obstacle"}
    # Marked as a tail, so the engine measures the linger from the last direct evidence and
    # a lasting load after an unauthored blip does not stay unauthored for ever.
    assert attribute(f, CFG).tail
    f.since_active_s = {"unauthored": 3.0}
    assert active(f) == {"human": "push"}
    assert not attribute(f, CFG).tail


def test_a_cause_established_a_moment_before_an_unauthored_blip_is_no_tail_of_it() -> None:
    # seed 528: a joint friction sticks its joint for a tick (a stall's evidence); the
    # friction found up to 0.08 s before goes on as itself, not as the stall's tail
    friction = dict(effort_residual=3.0, joint_residual_rad=0.01, friction_nm=2.0, friction_share=0.7,
                    since_active_s={"unauthored": 0.04, "dynamics": 0.08},
                    last_kind={"unauthored": "joint_stall", "dynamics": "joint_friction"})
    f = feats(**friction, since_established_s={"dynamics": 0.08})
    assert active(f) == {"dynamics": "joint_friction"} and not attribute(f, CFG).tail
    f = feats(**friction, since_established_s={"dynamics": 0.6})
    assert active(f) == {"unauthored": "joint_stall"} and attribute(f, CFG).tail


def test_untrusted_sensor_suppresses_the_rest() -> None:
    flag = ("nonfinite", 0.9, {"stream": "real/joint_states"})
    f = feats(joint_residual_rad=0.015, effort_residual=20.0, sensor_flags=[flag])
    verdict = attribute(f, CFG)
    assert list(verdict.active) == ["sensor"]
    assert verdict.active["sensor"][1] == "nan_burst"
    assert verdict.active["sensor"][2]["stream"] == "real/joint_states"
    # and for sensor_recovery_s after it clears
    f = feats(joint_residual_rad=0.015, effort_residual=20.0, since_untrusted_s=0.5)
    assert active(f) == {}
    assert active(f, AttributionConfig(sensor_suppresses=False)) == {"human": "push"}


def test_an_untrusted_wrench_is_left_out_not_the_joints() -> None:
    # A frozen wrist sensor is sensor, and the joints still tell their own load.
    flag = ("frozen", 0.9, {"stream": "real/wrench"})
    f = feats(joint_residual_rad=0.015, effort_residual=20.0, sensor_flags=[flag], wrench_valid=False,
              external_force_n=np.full(3, np.nan))
    assert active(f) == {"sensor": "frozen", "human": "push"}


def test_evidence_is_strings() -> None:
    f = feats(joint_residual_rad=0.015, effort_residual=20.0)
    _, _, evidence = attribute(f, CFG).active["human"]
    assert evidence and all(isinstance(k, str) and isinstance(v, str) for k, v in evidence.items())


def test_config_validation_and_from_dict() -> None:
    cfg = AttributionConfig.from_dict({"human_force_n": 6.0})
    assert cfg.human_force_n == 6.0
    with pytest.raises(ConfigError, match="unknown attribution parameter"):
        AttributionConfig.from_dict({"nope": 1.0})
    with pytest.raises(ConfigError, match="AttributionConfig.contact_force_n must be finite and >= 0"):
        AttributionConfig(contact_force_n=-1.0).validate()
    with pytest.raises(ConfigError, match="active_score must be in"):
        AttributionConfig(active_score=0.0).validate()
    with pytest.raises(ConfigError, match="dynamics_min_explained must be in"):
        AttributionConfig(dynamics_min_explained=1.5).validate()
    for name in ("noise_tau_s", "friction_tau_s"):
        with pytest.raises(ConfigError, match=f"AttributionConfig.{name} must be > 0"):
            AttributionConfig(**{name: 0.0}).validate()


def test_object_moving_because_the_sim_pushes_its_own_is_no_slip() -> None:
    base = dict(object_error_m=0.05, object_error_speed_m_s=0.02)
    assert active(feats(**base, sim_object_speed_m_s=0.0, real_tool_object_m=0.3)) == {"unauthored": "object_slip"}
    assert active(feats(**base, sim_object_speed_m_s=0.05, real_tool_object_m=0.3)) == {}
    assert active(feats(**base, sim_object_speed_m_s=0.0, real_tool_object_m=0.05)) == {}  # the tool touches it
    # in contact (the table wiped) with both tools far from it: the object moves on its own
    far = dict(sim_contact_recent=True, real_contact=True, sim_force_n=20.0, sim_object_speed_m_s=0.0)
    assert active(feats(**base, **far, real_tool_object_m=0.3, sim_tool_object_m=0.3)) == {"unauthored": "object_slip"}
    assert active(feats(**base, **far, real_tool_object_m=0.3, sim_tool_object_m=0.05)) == {}


def test_contact_residual_after_a_slip() -> None:
    contact = dict(sim_contact_recent=True, sim_force_n=20.0, force_residual_n=6.0,
                   external_force_n=np.array([0.0, 6.0, 0.0]), effort_residual=3.0, joint_residual_rad=0.003)
    recent = dict(since_active_s={"unauthored": 1.0}, last_kind={"unauthored": "object_slip"})
    assert active(feats(**contact, **recent)) == {"unauthored": "object_slip"}
    # a consequence of the slip, not new evidence of one: marked a tail, so the linger runs
    # from the slip's own last evidence and a later contact gap is not absorbed (seed 195)
    assert attribute(feats(**contact, **recent), CFG).tail
    assert not attribute(feats(object_error_m=0.05, object_error_speed_m_s=0.02, real_tool_object_m=0.3), CFG).tail
    # long after the slip, with the object left displaced: a known consequence, nothing new
    old = dict(since_active_s={"unauthored": 30.0}, last_kind={"unauthored": "object_slip"})
    assert active(feats(**contact, **old, object_free_drift_m=0.05, sim_tool_object_m=0.06)) == {}
    # ... but a contact away from the object (the tool on the table) is the contact's
    assert active(feats(**contact, **old, object_free_drift_m=0.05, sim_tool_object_m=0.4,
                        real_tool_object_m=0.4)) == {"contact": "friction"}
    # no slip at all: a contact gap
    assert active(feats(**contact)) == {"contact": "friction"}  # along the table, away from the object
