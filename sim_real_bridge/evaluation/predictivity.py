"""Sim-to-real predictivity across runs: does success in the simulator predict success on the robot?

Definitions used, each checked against its source:

- SRCC, the Sim-vs-Real Correlation Coefficient of Kadian et al., "Sim2Real
  Predictivity: Does Evaluation in Simulation Predict Real-World Performance?"
  (IEEE RA-L 2020, arXiv:1912.06321): the sample Pearson correlation between the
  performance (success rate, or SPL) of each evaluated model in simulation and the same
  model's performance in reality, across the models. Here a "model" is any policy or
  condition group of runs; its performance is the mean success of its runs.
- MMRV, the Mean Maximum Rank Violation of Li et al., "Evaluating Real-World Robot
  Manipulation Policies in Simulation" (SIMPLER, arXiv:2405.05941), as computed by
  ``simpler_env/utils/metrics.py`` in simpler-env/SimplerEnv: for policy i,
  RankViolation(i, j) = |real_i - real_j| when (sim_i > sim_j) != (real_i > real_j),
  else 0; MMRV = mean over i of max over j of RankViolation(i, j). 0 is perfect. A pair
  tied in simulation but not in reality is a violation for the policy reality ranks
  higher (the simulator failed to separate them); a pair tied in reality weighs 0.

Undefined results: Pearson and Spearman correlations are undefined when either input
is constant (zero variance). The functions here raise ConfigError then, because a
number would be a lie; :func:`episode_predictivity`, which summarizes whatever the
labels allow, reports None with the reason instead, so that a roll-up never fails on
a uniform batch.

Pure numpy; no clock, no ROS.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sim_real_bridge.errors import ConfigError

DEFAULT_GROUP = "all"


def _pair(x: Sequence[float], y: Sequence[float], what: str) -> tuple[np.ndarray, np.ndarray]:
    """Validate two paired 1-D samples and return them as float arrays."""
    try:
        xa = np.asarray(x, dtype=float)
        ya = np.asarray(y, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what}: inputs must be numeric: {exc}") from exc
    if xa.ndim != 1 or ya.ndim != 1:
        raise ConfigError(f"{what}: inputs must be 1-D, got shapes {xa.shape} and {ya.shape}")
    if xa.shape != ya.shape:
        raise ConfigError(f"{what}: inputs differ in length ({xa.size} vs {ya.size})")
    if xa.size < 2:
        raise ConfigError(f"{what}: needs at least 2 paired values, got {xa.size}")
    if not (np.all(np.isfinite(xa)) and np.all(np.isfinite(ya))):
        raise ConfigError(f"{what}: inputs must be finite (no NaN or inf)")
    return xa, ya


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Return the sample Pearson correlation of paired values x and y.

    Raises:
        ConfigError: fewer than 2 pairs, different lengths, non-finite values, or a
            constant input (the correlation is undefined).
    """
    xa, ya = _pair(x, y, "pearson")
    xc = xa - xa.mean()
    yc = ya - ya.mean()
    sxx = float(np.dot(xc, xc))
    syy = float(np.dot(yc, yc))
    if sxx == 0.0 or syy == 0.0:
        which = "x" if sxx == 0.0 else "y"
        raise ConfigError(f"pearson: {which} is constant, so the correlation is undefined")
    r = float(np.dot(xc, yc)) / np.sqrt(sxx * syy)
    return float(np.clip(r, -1.0, 1.0))


def average_ranks(x: Sequence[float]) -> np.ndarray:
    """Return 1-based ranks of x, ties sharing the mean of the ranks they span."""
    xa = np.asarray(x, dtype=float)
    if xa.ndim != 1:
        raise ConfigError(f"average_ranks: input must be 1-D, got shape {xa.shape}")
    order = np.argsort(xa, kind="mergesort")
    sorted_x = xa[order]
    # Group boundaries of equal values in sorted order; each group gets its mean rank.
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], xa.size]
    mean_rank = (starts + ends + 1) / 2.0
    ranks = np.empty(xa.size, dtype=float)
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Return Spearman's rank correlation: Pearson on ranks, ties averaged.

    Raises:
        ConfigError: as :func:`pearson` (a constant input has constant ranks).
    """
    xa, ya = _pair(x, y, "spearman")
    try:
        return pearson(average_ranks(xa), average_ranks(ya))
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("pearson:", "spearman:", 1)) from exc


def srcc(sim_success: Sequence[float], real_success: Sequence[float]) -> float:
    """Return the Sim-vs-Real Correlation Coefficient (Kadian et al. 2020).

    Args:
        sim_success: (M,) success rate of each of M policies or conditions in simulation.
        real_success: (M,) the same policies' success rate in reality, same order.

    Returns:
        The Pearson correlation across the M pairs, in [-1, 1].

    Raises:
        ConfigError: as :func:`pearson`.
    """
    try:
        return pearson(sim_success, real_success)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("pearson:", "srcc:", 1)) from exc


def mmrv(sim_success: Sequence[float], real_success: Sequence[float]) -> float:
    """Return the Mean Maximum Rank Violation (SIMPLER, Li et al. 2024); lower is better.

    Args:
        sim_success: (M,) performance of each policy in simulation.
        real_success: (M,) the same policies' performance in reality, same order.

    Returns:
        mean_i max_j |real_i - real_j| * 1[(sim_i > sim_j) != (real_i > real_j)], in the
        units of real_success (0 when the simulator orders every pair as reality does).

    Raises:
        ConfigError: fewer than 2 pairs, different lengths or non-finite values.
    """
    sim, real = _pair(sim_success, real_success, "mmrv")
    violated = (sim[:, None] > sim[None, :]) != (real[:, None] > real[None, :])
    weight = np.abs(real[:, None] - real[None, :])
    return float(np.mean(np.max(np.where(violated, weight, 0.0), axis=1)))


def _success_value(run: Mapping[str, Any], key: str, index: int) -> float:
    """Return a run's success label as a float in [0, 1] (bools become 0/1)."""
    if key not in run:
        raise ConfigError(f"runs[{index}] has no '{key}'")
    raw = run[key]
    if isinstance(raw, (bool, np.bool_)):
        return float(raw)
    try:
        value = float(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"runs[{index}].{key} must be a bool or a number in [0, 1], got {raw!r}") from exc
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"runs[{index}].{key} must be in [0, 1], got {value}")
    return value


def _try(fn: Any, x: np.ndarray, y: np.ndarray) -> tuple[float | None, str | None]:
    """Return (value, None) or (None, reason) when the statistic is undefined."""
    try:
        return fn(x, y), None
    except ConfigError as exc:
        return None, str(exc)


def episode_predictivity(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Summarize how well simulated success predicts real success over labelled runs.

    Args:
        runs: dicts with 'sim_success' and 'real_success' (bool, or a success rate in
            [0, 1]) and optionally 'policy' (or 'group'): the policy or condition the run
            evaluated. Runs without either key are grouped under "all".

    Returns:
        {"n_runs", "episode": {"pearson", "spearman", ...reasons},
         "groups": [{"group", "n_runs", "sim_success_rate", "real_success_rate"}],
         "policy": {"n_groups", "srcc", "spearman", "mmrv", ...reasons}}.
        "episode" correlates the per-run labels (with binary labels Pearson is the phi
        coefficient); "policy" compares per-group success rates, as SRCC and MMRV are
        defined. A statistic that is undefined (constant labels, fewer than 2 groups)
        is None and "<name>_reason" says why.

    Raises:
        ConfigError: fewer than 2 runs, or a run without valid success labels.
    """
    if len(runs) < 2:
        raise ConfigError(f"episode_predictivity needs at least 2 labelled runs, got {len(runs)}")
    sims: list[float] = []
    reals: list[float] = []
    groups: dict[str, list[int]] = {}
    for i, run in enumerate(runs):
        if not isinstance(run, Mapping):
            raise ConfigError(f"runs[{i}] must be a mapping, got {type(run).__name__}")
        sims.append(_success_value(run, "sim_success", i))
        reals.append(_success_value(run, "real_success", i))
        group = run.get("policy", run.get("group", DEFAULT_GROUP))
        groups.setdefault(str(group), []).append(i)
    sim = np.asarray(sims)
    real = np.asarray(reals)

    episode: dict[str, Any] = {}
    for name, fn in (("pearson", pearson), ("spearman", spearman)):
        value, reason = _try(fn, sim, real)
        episode[name] = value
        if reason is not None:
            episode[f"{name}_reason"] = reason

    rows = [
        {
            "group": name,
            "n_runs": len(idx),
            "sim_success_rate": float(sim[idx].mean()),
            "real_success_rate": float(real[idx].mean()),
        }
        for name, idx in groups.items()
    ]
    sim_rate = np.array([r["sim_success_rate"] for r in rows])
    real_rate = np.array([r["real_success_rate"] for r in rows])
    policy: dict[str, Any] = {"n_groups": len(rows)}
    for name, fn in (("srcc", srcc), ("spearman", spearman), ("mmrv", mmrv)):
        if len(rows) < 2:
            value, reason = None, f"{name}: needs at least 2 policies or groups, got {len(rows)}"
        else:
            value, reason = _try(fn, sim_rate, real_rate)
        policy[name] = value
        if reason is not None:
            policy[f"{name}_reason"] = reason
    return {"n_runs": len(runs), "episode": episode, "groups": rows, "policy": policy}
