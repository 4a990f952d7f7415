"""Tests of joint, pose and wrench residuals and contact phases (sim_real_bridge.core.residuals)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import transforms3d.euler as te
import transforms3d.quaternions as tq
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_real_bridge.core.residuals import (
    ContactPhaseDetector,
    JointIndexMap,
    pose_error,
    pose_error_batch,
    wrench_residual,
)
from sim_real_bridge.errors import AlignmentError, ConfigError

# -- joints -----------------------------------------------------------------------------


def test_gather_reorders_by_name():
    jmap = JointIndexMap(["a", "b", "c"])
    np.testing.assert_allclose(jmap.gather(["c", "a", "b"], [3.0, 1.0, 2.0]), [1.0, 2.0, 3.0])


def test_missing_joints_are_nan_and_counted_extra_ones_ignored():
    jmap = JointIndexMap(["a", "b", "c"])
    out = jmap.gather(["b", "zz"], [2.0, 9.0])
    assert np.isnan(out[0]) and out[1] == 2.0 and np.isnan(out[2])
    jmap.gather(["b", "zz"], [2.0, 9.0])
    assert jmap.missing_counts == {"a": 2, "b": 0, "c": 2}
    assert jmap.extra_counts == {"zz": 2}


def test_residual_is_real_minus_sim_whatever_each_side_order():
    jmap = JointIndexMap(["j1", "j2", "j3"])
    res = jmap.residual(["j1", "j2", "j3"], [0.1, 0.2, 0.3], ["j3", "j1"], [0.5, 0.4])
    np.testing.assert_allclose(res[[0, 2]], [0.3, 0.2])
    assert np.isnan(res[1])


def test_empty_field_means_all_nan_without_counting():
    jmap = JointIndexMap(["a", "b"])
    assert np.isnan(jmap.gather(["a", "b"], [])).all()
    assert jmap.missing_counts == {"a": 0, "b": 0}


def test_gather_handles_columns_per_joint():
    jmap = JointIndexMap(["a", "b"])
    out = jmap.gather(["b", "a"], np.array([[2.0, 20.0], [1.0, 10.0]]))
    np.testing.assert_allclose(out, [[1.0, 10.0], [2.0, 20.0]])


def test_joint_map_errors():
    with pytest.raises(ConfigError, match="at least one joint name"):
        JointIndexMap([])
    with pytest.raises(ConfigError, match=r"duplicated: \['a'\]"):
        JointIndexMap(["a", "b", "a"])
    jmap = JointIndexMap(["a", "b"])
    with pytest.raises(AlignmentError, match="got 1 values for 2 joint names"):
        jmap.gather(["a", "b"], [1.0])
    with pytest.raises(AlignmentError, match="duplicated joint names in one message"):
        jmap.gather(["a", "a"], [1.0, 2.0])


@settings(max_examples=50, deadline=None)
@given(st.permutations(list("abcdef")), st.integers(0, 6))
def test_property_gather_inverts_any_order_and_subset(order, keep):
    jmap = JointIndexMap(list("abcdef"))
    names = order[:keep]
    values = np.array([ord(n) for n in names], dtype=float)
    out = jmap.gather(names, values)
    for i, name in enumerate("abcdef"):
        if name in names:
            assert out[i] == ord(name)
        else:
            assert np.isnan(out[i])


# -- poses ------------------------------------------------------------------------------


def test_pose_error_matches_a_known_rotation_and_translation():
    q_sim = te.euler2quat(0.1, -0.2, 0.3)
    q_delta = tq.axangle2quat([1.0, 2.0, -1.0], 0.05)
    q_real = tq.qmult(q_sim, q_delta)
    vec, norm, angle = pose_error([1.0, 2.0, 3.0], q_sim, [1.0, 2.03, 2.96], q_real)
    np.testing.assert_allclose(vec, [0.0, 0.03, -0.04], atol=1e-12)
    assert norm == pytest.approx(0.05)
    assert angle == pytest.approx(0.05, abs=1e-12)


def test_pose_error_treats_q_and_minus_q_as_the_same_rotation():
    q = te.euler2quat(0.4, 0.5, -0.6)
    _, _, angle = pose_error(np.zeros(3), q, np.zeros(3), -q)
    assert angle == pytest.approx(0.0, abs=1e-12)


def test_pose_error_keeps_precision_for_tiny_angles():
    q_sim = te.euler2quat(0.2, 0.0, 0.0)
    q_real = tq.qmult(q_sim, tq.axangle2quat([0, 0, 1], 1e-7))
    _, _, angle = pose_error(np.zeros(3), q_sim, np.zeros(3), q_real)
    assert angle == pytest.approx(1e-7, rel=1e-6)


def test_pose_error_normalizes_quaternions():
    q = np.array(te.euler2quat(0.1, 0.2, 0.3))
    _, _, angle = pose_error(np.zeros(3), 3.0 * q, np.zeros(3), q)
    assert angle == pytest.approx(0.0, abs=1e-7)


def test_pose_error_errors():
    with pytest.raises(AlignmentError, match="positions must have shape"):
        pose_error(np.zeros(2), [1, 0, 0, 0], np.zeros(3), [1, 0, 0, 0])
    with pytest.raises(AlignmentError, match="must have 4 components"):
        pose_error(np.zeros(3), [1, 0, 0], np.zeros(3), [1, 0, 0, 0])
    with pytest.raises(AlignmentError, match="zero-norm quaternion"):
        pose_error(np.zeros(3), [0, 0, 0, 0], np.zeros(3), [1, 0, 0, 0])
    with pytest.raises(AlignmentError, match="must both be"):
        pose_error_batch(np.zeros((2, 3)), np.ones((2, 4)), np.zeros((3, 3)), np.ones((3, 4)))


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-3, 3), min_size=6, max_size=6),
    st.lists(st.floats(-1, 1), min_size=3, max_size=3).filter(lambda a: np.linalg.norm(a) > 1e-3),
    st.floats(0.0, math.pi),
)
def test_property_batch_matches_scalar_and_recovers_the_angle(eulers, axis, angle):
    q_sim = np.array(te.euler2quat(*eulers[:3]))
    q_real = np.array(tq.qmult(q_sim, tq.axangle2quat(axis, angle)))
    p_sim, p_real = np.array(eulers[:3]), np.array(eulers[3:])
    vec, norm, ang = pose_error(p_sim, q_sim, p_real, q_real)
    bvec, bnorm, bang = pose_error_batch(p_sim[None], q_sim[None], p_real[None], q_real[None])
    assert ang == pytest.approx(angle, abs=1e-6)
    np.testing.assert_allclose(bvec[0], vec)
    assert bnorm[0] == pytest.approx(norm) and bang[0] == pytest.approx(ang, abs=1e-9)


# -- wrenches and contact ---------------------------------------------------------------


def test_wrench_residual_norms():
    res, f, t = wrench_residual([1, 2, 3, 0, 0, 0], [4, 6, 3, 0.3, 0.4, 0])
    np.testing.assert_allclose(res, [3, 4, 0, 0.3, 0.4, 0])
    assert f == pytest.approx(5.0) and t == pytest.approx(0.5)


def test_wrench_residual_rejects_wrong_shape():
    with pytest.raises(AlignmentError, match="shape \\(6,\\)"):
        wrench_residual(np.zeros(3), np.zeros(6))


def test_contact_phase_has_hysteresis():
    det = ContactPhaseDetector(on_threshold_n=5.0, off_threshold_n=2.0)
    forces = [0.0, 4.9, 5.0, 3.0, 2.1, 1.9, 4.0, 6.0]
    phases = [det.update(k, f) for k, f in enumerate(forces)]
    assert phases == [False, False, True, True, True, False, False, True]
    assert det.transitions == 3 and det.since_ns == 7


def test_contact_phase_debounce_and_vector_input():
    det = ContactPhaseDetector(on_threshold_n=5.0, off_threshold_n=2.0, min_on_samples=2)
    # Wrench vectors: only the first three components (force) count.
    assert det.update(0, [6.0, 0.0, 0.0, 9.0, 9.0, 9.0]) is False
    det.reset()
    phases = [det.update(k, [0.0, 3.0, f]) for k, f in enumerate([4.0, 0.0, 4.0, 4.0])]
    # Norms 5, 3, 5, 5: a dip breaks the streak, two in a row enter contact.
    assert phases == [False, False, False, True]
    assert det.since_ns == 3


def test_contact_phase_ignores_non_finite_and_resets():
    det = ContactPhaseDetector()
    det.update(0, 10.0)
    assert det.update(1, float("nan")) is True
    assert det.non_finite_count == 1
    det.reset()
    assert det.in_contact is False and det.since_ns is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"on_threshold_n": 2.0, "off_threshold_n": 2.0}, "off_threshold_n < on_threshold_n"),
        ({"off_threshold_n": -1.0}, "0 <= off_threshold_n"),
        ({"min_on_samples": 0}, "must be >= 1"),
    ],
)
def test_contact_phase_rejects_bad_settings(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ContactPhaseDetector(**kwargs)
