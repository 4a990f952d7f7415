"""Per-message input checks: the cached joint-name checks answer like the first time."""

from __future__ import annotations

import numpy as np

from sim_real_bridge.core import validation
from sim_real_bridge.core.validation import InputLimits, check_joint_state

Q = np.zeros(3)


def test_name_checks_depend_on_the_names_and_the_reference_not_on_the_cache() -> None:
    limits = InputLimits()
    names = ("a", "b", "c")
    for _ in range(3):  # repeated calls hit the cache and must answer the same
        assert check_joint_state(names, Q, Q, Q, None, limits) is None
        assert check_joint_state(names, Q, Q, Q, ("a", "b", "c"), limits) is None
        assert check_joint_state(names, Q, Q, Q, ("a", "b"), limits) == validation.UNKNOWN_JOINT
        assert check_joint_state(names, Q, Q, Q, ("a", "b", "c", "d"), limits) == validation.MISSING_JOINT
        assert check_joint_state(("a", "a", "c"), Q, Q, Q, None, limits) == validation.DUPLICATE_NAMES
        assert check_joint_state(["a", "b", "c"], Q, Q, Q, None, limits) is None  # a list works too


def test_length_checks_are_never_cached_away() -> None:
    limits = InputLimits()
    names = ("a", "b", "c")
    assert check_joint_state(names, Q, Q, Q, None, limits) is None
    assert check_joint_state(names, np.zeros(2), Q, Q, None, limits) == validation.LENGTH_MISMATCH
    assert check_joint_state(names, Q, np.zeros(0), Q, None, limits) is None


def test_the_cache_stays_bounded() -> None:
    limits = InputLimits()
    for k in range(1000):
        check_joint_state((f"j{k}", "x", "y"), Q, Q, Q, None, limits)
    assert validation._check_names.cache_info().currsize <= 256
