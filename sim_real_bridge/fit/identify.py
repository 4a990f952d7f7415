"""The fit itself: the model, the windows and the parameters wired into ``mujoco.sysid``.

Each window is one measured sequence of a ``ModelSequences``; candidate models are
compiled from the MjSpec with the parameters' modifiers (``apply_param_modifiers``),
rolled out from the window's measured start state under the recorded real commands
(shifted by the actuation delay being fitted), and compared with the real joint
positions, wrist wrench and object position in :func:`_residual`. ``mujoco.sysid.optimize``
(``mujoco.minimize`` Levenberg-Marquardt) fits, ``calculate_intervals`` gives the 95%
intervals. A parameter whose interval is infinite or wide is reported as not
identifiable and left at its nominal value in the corrected model.
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import mujoco
import numpy as np
from mujoco import rollout as mj_rollout

from sim_real_bridge.fit.model import FitModel, Rollout
from sim_real_bridge.fit.parameters import FitParameter, group_parameters, member_value
from sim_real_bridge.fit.windows import WindowData

#: Residual scales: what one unit of the least-squares residual is worth.
Q_SCALE_RAD = 1e-3
FORCE_SCALE_N = 1.0
TORQUE_SCALE_NM = 0.1
OBJECT_SCALE_M = 2e-3
#: The wrench is compared as its moving average over this span, s: contact-force chatter
#: (stick-slip at the sample rate) is not reproducible from a measured start state, the
#: two runs' phases part within milliseconds, and sample by sample it outweighed every
#: other residual (a push's object mass fitted 29% off where the truth left 27 times more
#: wrench residual than the joints'; averaged, the truth's wrench residual is the joints').
WRENCH_AVERAGE_S = 0.05
#: A parameter is identifiable when its 95% half-interval is at most this share of its
#: value (or of a twentieth of its bounds' span, for values near zero).
IDENTIFIABLE_SHARE = 0.2


@dataclass(frozen=True)
class FitSettings:
    """Optimizer settings: iterations, finite-difference step, threads, wrench and object use."""

    max_iters: int = 25
    fd_eps: float = 1e-6
    #: relative step below which the optimizer stops, and its damping's growth per failed step
    xtol: float = 1e-6
    mu_factor: float = 10**0.5
    nthread: int = 2
    use_wrench: bool = True
    use_object: bool = True


@dataclass
class ParameterResult:
    """One parameter after the fit."""

    param: FitParameter
    fitted: float
    half_interval: float
    identifiable: bool
    at_bound: bool

    @property
    def applied(self) -> float:
        """The value the corrected model gets (nominal when not identifiable)."""
        return self.fitted if self.identifiable else self.param.nominal


@dataclass
class FitResult:
    """What a fit found: parameters, the optimizer's trace, timing."""

    parameters: list[ParameterResult]
    iterations: int
    wall_s: float
    cost_before: float
    cost_after: float
    notes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _quiet_absl() -> Iterator[None]:
    """mujoco.sysid logs per call through absl; keep the console to our own lines."""
    from absl import logging as absl_logging  # noqa: PLC0415

    before = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        yield
    finally:
        absl_logging.set_verbosity(before)


class _Columns:
    """Measured columns of a window in one TimeSeries layout: q (J), wrench (6), object (3)."""

    def __init__(self, fit_model: FitModel, settings: FitSettings) -> None:
        self.n_joints = len(fit_model.joint_names)
        self.use_wrench = settings.use_wrench and fit_model.has_wrench
        self.use_object = settings.use_object and bool(fit_model.object_body)
        self.width = self.n_joints + 6 + 3
        self.scale = np.concatenate([np.full(self.n_joints, Q_SCALE_RAD), np.full(3, FORCE_SCALE_N),
                                     np.full(3, TORQUE_SCALE_NM), np.full(3, OBJECT_SCALE_M)])

    def measured(self, wd: WindowData) -> tuple[np.ndarray, np.ndarray]:
        """(times (n,), values (n, width)) on the joint times; NaN where a stream is absent."""
        t = wd.joint_t_s
        out = np.full((len(t), self.width), np.nan)
        out[:, : self.n_joints] = wd.q_rad
        if self.use_wrench and wd.wrench is not None:
            out[:, self.n_joints:self.n_joints + 6] = _interp_rows(t, wd.wrench_t_s, wd.wrench, outside=np.nan)
        if self.use_object and wd.object_pos_m is not None:
            out[:, self.n_joints + 6:] = _interp_rows(t, wd.object_t_s, wd.object_pos_m, outside=np.nan)
        return t, self._average_wrench(t, out)

    def _average_wrench(self, t: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``values`` with the wrench columns replaced by their moving average (NaN kept NaN)."""
        if not self.use_wrench or len(t) < 2:
            return values
        width = max(1, int(round(WRENCH_AVERAGE_S / float(np.median(np.diff(t))))))
        kernel = np.ones(width)
        cols = slice(self.n_joints, self.n_joints + 6)
        wrench = values[:, cols]
        good = np.isfinite(wrench)
        total = np.apply_along_axis(np.convolve, 0, np.where(good, wrench, 0.0), kernel, "same")
        count = np.apply_along_axis(np.convolve, 0, good.astype(float), kernel, "same")
        out = values.copy()
        out[:, cols] = np.where(good, total / np.maximum(count, 1.0), np.nan)
        return out

    def predicted(self, fit_model: FitModel, model: mujoco.MjModel, state: np.ndarray,
                  sensordata: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Simulated values (n, width) at times ``t`` from a rollout's state and sensordata."""
        roll = fit_model._rollout_of(model, state, sensordata, len(state))
        out = np.zeros((len(t), self.width))
        out[:, : self.n_joints] = _interp_rows(t, roll.t_s, roll.q_rad)
        if self.use_wrench and roll.wrench is not None:
            out[:, self.n_joints:self.n_joints + 6] = _interp_rows(t, roll.t_s, roll.wrench)
        if self.use_object and roll.object_pos_m is not None:
            out[:, self.n_joints + 6:] = _interp_rows(t, roll.t_s, roll.object_pos_m)
        return self._average_wrench(t, out)


def _interp_rows(t: np.ndarray, src_t: np.ndarray, values: np.ndarray, outside: float | None = None) -> np.ndarray:
    """Linear interpolation of every column of ``values`` (k, m) at ``t`` (n,), one pass."""
    idx = np.clip(np.searchsorted(src_t, t), 1, len(src_t) - 1)
    t0, t1 = src_t[idx - 1], src_t[idx]
    w = np.clip((t - t0) / np.where(t1 > t0, t1 - t0, 1.0), 0.0, 1.0)[:, None]
    out = values[idx - 1] * (1 - w) + values[idx] * w
    if outside is not None:
        out[(t < src_t[0]) | (t > src_t[-1])] = outside
    return out


def _delayed_controls(fit_model: FitModel, wd: WindowData, shift_s: float) -> np.ndarray:
    """Controls on the window's steps (k-1, nu) as the actuators see them ``shift_s`` late."""
    ctrl = np.vstack([wd.history_q_rad, wd.ctrl_q_rad])[:, fit_model._ctrl_cols]
    times = (np.arange(len(ctrl)) - len(wd.history_q_rad)) * fit_model.timestep_s
    t_apply = wd.ctrl_t_s[:-1] - shift_s
    return _interp_rows(t_apply, times, ctrl)


class Identification:
    """One fit: a model, windows, parameters; :meth:`run` optimizes.

    Args:
        fit_model: the model matched to the recording.
        windows: the fit windows' data.
        params: the parameters to fit.
        settings: optimizer settings.
    """

    def __init__(self, fit_model: FitModel, windows: Sequence[WindowData], params: Sequence[FitParameter],
                 settings: FitSettings | None = None, initial: Sequence[float] | None = None) -> None:
        from mujoco import sysid  # noqa: PLC0415 - optional extra, imported when a fit runs

        self._sysid = sysid
        self.fit_model = fit_model
        self.windows = list(windows)
        self.params = list(params)
        self.settings = settings or FitSettings()
        self.columns = _Columns(fit_model, self.settings)
        self._delay_nominal = next((p.nominal for p in self.params if p.kind == "delay"), 0.0)
        self.param_dict = sysid.ParameterDict()
        for p in self.params:
            modifier = None if p.kind == "delay" else (lambda spec, sp, fp=p: fp.apply(spec, float(sp.value[0])))
            self.param_dict.add(sysid.Parameter(p.name, p.nominal, p.lower, p.upper, modifier=modifier))
        if initial is not None:
            self.param_dict.update_from_vector(np.clip(np.asarray(initial, dtype=float),
                                                       *self.param_dict.get_bounds()))
        with _quiet_absl():
            self.sequences = self._sequences()

    def _measured_ts(self, wd: WindowData) -> Any:
        t, values = self.columns.measured(wd)
        return self._sysid.TimeSeries.from_custom_map(t, values, [("measured", values.shape[1],
                                                                   self._sysid.SignalType.CustomObs)])

    def _sequences(self) -> Any:
        sysid = self._sysid
        measured, controls, states = [], [], []
        self._window_of_control: dict[int, WindowData] = {}
        for wd in self.windows:
            measured.append(self._measured_ts(wd))
            control = sysid.TimeSeries(wd.ctrl_t_s, self.fit_model.ctrl(wd))
            self._window_of_control[id(control)] = wd
            controls.append(control)
            states.append(self.fit_model.initial_state(self.fit_model.model, wd))
        return sysid.ModelSequences("fit", self.fit_model.fresh_spec(), [wd.window.label for wd in self.windows],
                                    states, controls, measured, allow_missing_sensors=True)

    # ---------------------------------------------------------------- residual
    def _custom_rollout(self, models, datas, control_signal, initial_states, param_dicts, **_: Any) -> list:
        """sysid's rollout hook: the controls shifted by each candidate's delay."""
        sysid = self._sysid
        controls = []
        for control, pdict in zip(control_signal, param_dicts, strict=True):
            wd = self._window_of_control[id(control)]
            delay = float(pdict["delay"].value[0]) if "delay" in pdict else self._delay_nominal
            controls.append(_delayed_controls(self.fit_model, wd, delay - self._delay_nominal))
        state, sensordata = mj_rollout.rollout(list(models), datas, np.stack(initial_states), np.stack(controls))
        out = []
        for i in range(len(models)):
            times = state[i][:, 0]
            out.append(sysid.SystemTrajectory(
                model=models[i], control=sysid.TimeSeries(control_signal[i].times[:-1], controls[i]),
                sensordata=sysid.TimeSeries(times, sensordata[i]), initial_state=initial_states[i],
                state=sysid.TimeSeries(times, state[i])))
        return out

    def _modify_residual(self, params, pred_sensordata, measured_sensordata, model, return_pred_all,
                         state=None, **_: Any) -> tuple:
        """Weighted difference of simulated and measured columns (NaN measured: no residual)."""
        t = measured_sensordata.times
        predicted = self.columns.predicted(self.fit_model, model, state, pred_sensordata.data, t)
        diff = (predicted - measured_sensordata.data) / self.columns.scale
        res = np.where(np.isfinite(diff), diff, 0.0).ravel()
        pred_ts = self._sysid.TimeSeries(t, predicted, measured_sensordata.signal_mapping)
        return res, pred_ts, measured_sensordata

    def residual_fn(self) -> Any:
        """The residual callable ``optimize`` takes (``build_residual_fn``)."""
        return self._sysid.build_residual_fn(
            models_sequences=[self.sequences], modify_residual=self._modify_residual,
            custom_rollout=self._custom_rollout, resample_true=False, n_threads=self.settings.nthread)

    # --------------------------------------------------------------------- run
    def costs(self, vectors: Sequence[Sequence[float]]) -> np.ndarray:
        """Least-squares cost at each parameter vector (one batched evaluation)."""
        x = np.asarray(vectors, dtype=float).T
        with _quiet_absl():
            residuals = self.residual_fn()(x, self.param_dict.copy())[0]
        stacked = np.concatenate([r.reshape(-1, x.shape[1]) for r in residuals], axis=0)
        return np.sum(stacked**2, axis=0)

    def run(self) -> FitResult:
        """Optimize, then compute the intervals at the optimum."""
        sysid = self._sysid
        residual_fn = self.residual_fn()
        x0 = self.param_dict.as_vector()
        started = time.perf_counter()
        trace_length = [0]

        def count(trace: list) -> None:
            trace_length[0] = len(trace)

        log = io.StringIO()
        with _quiet_absl():
            r0 = np.concatenate(residual_fn(x0, self.param_dict.copy())[0])
            fitted, result = sysid.optimize(
                initial_params=self.param_dict, residual_fn=residual_fn, optimizer="mujoco", verbose=False,
                max_iters=self.settings.max_iters, eps=self.settings.fd_eps,
                x_scale=np.array([p.scale for p in self.params]), iter_callback=count,
                xtol=self.settings.xtol, mu_factor=self.settings.mu_factor,
                output=log)
            x = fitted.as_vector()
            r1 = np.concatenate(residual_fn(x, fitted.copy())[0])
            _, half = sysid.calculate_intervals([r1], result.jac)
        wall = time.perf_counter() - started
        self.log = log.getvalue()
        results = [self._judge(p, float(x[i]), float(half[i]) if i < len(half) else np.inf)
                   for i, p in enumerate(self.params)]
        return FitResult(results, iterations=trace_length[0], wall_s=wall,
                         cost_before=float(r0 @ r0), cost_after=float(r1 @ r1))

    @staticmethod
    def _judge(param: FitParameter, value: float, half: float) -> ParameterResult:
        span = param.upper - param.lower
        reference = max(abs(value), 0.05 * span)
        identifiable = bool(np.isfinite(half) and half <= IDENTIFIABLE_SHARE * reference)
        at_bound = bool(min(value - param.lower, param.upper - value) <= 1e-3 * span)
        return ParameterResult(param, value, half, identifiable and not at_bound, at_bound)

    # ---------------------------------------------------------------- replay
    def simulate(self, spec: mujoco.MjSpec) -> list[Rollout]:
        """Roll every window out with the model ``spec`` compiles to (its own delay, if any)."""
        model = spec.compile()
        return self.fit_model.rollout([model] * len(self.windows), self.windows, self.settings.nthread)


def joint_rms_rad(wd: WindowData, roll: Rollout) -> float:
    """RMS over the window of the joint position residual (simulated - measured), rad."""
    predicted = _interp_rows(wd.joint_t_s, roll.t_s, roll.q_rad)
    return float(np.sqrt(np.mean((predicted - wd.q_rad) ** 2)))


def wrench_rms(wd: WindowData, roll: Rollout) -> float | None:
    """RMS of the force residual, N (None without a measured and a simulated wrench)."""
    if wd.wrench is None or roll.wrench is None:
        return None
    predicted = _interp_rows(wd.wrench_t_s, roll.t_s, roll.wrench[:, :3])
    return float(np.sqrt(np.mean((predicted - wd.wrench[:, :3]) ** 2)))


#: A screened kind is fitted joint by joint when resetting it to nominal undoes more than
#: this share of the screening's cost reduction.
SELECT_SHARE = 0.05


@dataclass
class StagedResult:
    """A screening fit (shared factors), the kinds it selected, and the final fit."""

    screening: FitResult | None
    selected: list[str]
    final: FitResult | None
    parameters: list[ParameterResult]
    wall_s: float


def fit_staged(fit_model: FitModel, windows: Sequence[WindowData], params: Sequence[FitParameter],
               settings: FitSettings | None = None) -> StagedResult:
    """Screen with one shared parameter per joint kind, then fit what matters joint by joint.

    With no kind spread over several joints the screening is skipped and every
    parameter is fitted at once. Parameters screened out are reported at their nominal
    value, not identifiable from this data as a change, and left as they are.
    """
    started = time.perf_counter()
    screened, groups = group_parameters(params)
    if not groups:
        final = Identification(fit_model, windows, params, settings).run()
        return StagedResult(None, [p.name for p in params], final, final.parameters, time.perf_counter() - started)
    screen_fit = Identification(fit_model, windows, screened, settings)
    screening = screen_fit.run()
    fitted = np.array([r.fitted for r in screening.parameters])
    resets = []
    for i, p in enumerate(screened):
        vector = fitted.copy()
        vector[i] = p.nominal
        resets.append(vector)
    gain = screen_fit.costs(resets) - screening.cost_after
    improvement = max(screening.cost_before - screening.cost_after, 1e-12)
    selected = [p.name for p, g in zip(screened, gain) if g > SELECT_SHARE * improvement]
    final_params: list[FitParameter] = []
    initial: list[float] = []
    for p, r in zip(screened, screening.parameters):
        if p.name not in selected:
            continue
        for member in groups.get(p.name, [p]):
            final_params.append(member)
            initial.append(member_value(p, member, r.fitted) if p.name in groups else r.fitted)
    final = Identification(fit_model, windows, final_params, settings, initial).run() if final_params else None
    by_name = {r.param.name: r for r in (final.parameters if final else [])}
    results = []
    for p in params:
        if p.name in by_name:
            results.append(by_name[p.name])
        else:
            results.append(ParameterResult(p, p.nominal, np.inf, False, False))
    return StagedResult(screening, selected, final, results, time.perf_counter() - started)
