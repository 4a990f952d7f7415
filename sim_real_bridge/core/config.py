"""EngineConfig: every parameter of the analysis, flat or nested, validated."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any

import numpy as np

from sim_real_bridge.core.attribution import AttributionConfig
from sim_real_bridge.core.events import EventConfig
from sim_real_bridge.core.health import FeatureConfig
from sim_real_bridge.errors import ConfigError


@dataclass
class EngineConfig:
    """Parameters of the divergence engine (monitor parameters; nested blocks by prefix).

    Attributes:
        analysis_rate_hz: analysis grid rate; also the rate of joint records.
        pose_rate_hz: rate of pose records (<= analysis rate).
        contact_rate_hz: rate of contact records (<= analysis rate).
        summary_window_s: window of the ledger's "window" shares.
        horizon_s: longest wait for a slow stream before a grid time is analysed anyway.
        max_interp_gap_s: never interpolate across samples further apart than this.
        buffer_s: history kept per stream.
        offset_leak: rate (s per s) at which the clock-offset envelope may rise.
        clock_reset_s: stamp discontinuity of one stream that counts as a clock reset.
        fit_window_s: window of the delay/gain/offset fit.
        fit_period_s: how often the fit runs.
        fit_max_delay_s: largest delay the fit tries.
        fit_delay_step_s: delay grid step of the fit.
        fit_min_motion_rad: the fit needs this much sim motion (std over the window).
        smooth_tau_s: time constant of the residual smoothing used by attribution.
        contact_force_n: force norm above which a side is in contact.
        contact_release_n: force norm below which a side leaves contact (hysteresis).
        wrench_window_s: wrench is compared as means over this window (contact chatters).
        tool_weight_tau_s: time constant of the free-space (tool weight) force learned
            from the sim side, in the world frame; contact is the departure from it.
        stall_speed_rad_s: a real joint slower than this ...
        stall_sim_speed_rad_s: ... while its sim twin is faster than this is stalling.
        tip_velocity_window_s: window of the finite-difference tip velocity.
        object_velocity_window_s: window of the growth rate of the object pose error.
        ledger_q_scale_rad: joint residual scale of the ledger energy.
        ledger_force_scale_n: force residual scale of the ledger energy.
        compensate_latency: remove the estimated latency from the published residuals.
        max_backlog_s: analysis never lags ``now`` by more than this: a backlog beyond it is
            dropped as one counted gap and the analysis resumes at the newest grid times.
        live_batch_s: live, joint residuals leave as each grid time is due; the rest of
            the analysis runs on the grid times due over this long, as one batch.
        segment_gap_s: replay: a gap this long in the recording splits it into segments
            (the gap is not analysed).
        stats_max_samples: analysis ticks kept for the max/p95 figures of run_summary
            (rms figures cover the whole run).
        features: stream health thresholds.
        attribution: attribution thresholds.
        events: event debouncing.
    """

    analysis_rate_hz: float = 50.0
    pose_rate_hz: float = 25.0
    contact_rate_hz: float = 50.0
    summary_window_s: float = 10.0
    horizon_s: float = 0.3
    max_interp_gap_s: float = 0.05
    buffer_s: float = 4.0
    offset_leak: float = 0.002
    clock_reset_s: float = 0.5
    fit_window_s: float = 1.0
    fit_period_s: float = 0.1
    fit_max_delay_s: float = 0.25
    fit_delay_step_s: float = 0.01
    fit_min_motion_rad: float = 0.005
    smooth_tau_s: float = 0.1
    contact_force_n: float = 2.0
    contact_release_n: float = 1.0
    wrench_window_s: float = 0.1
    tool_weight_tau_s: float = 2.0
    stall_speed_rad_s: float = 0.02
    stall_sim_speed_rad_s: float = 0.1
    tip_velocity_window_s: float = 0.1
    object_velocity_window_s: float = 0.3
    ledger_q_scale_rad: float = 0.01
    ledger_force_scale_n: float = 2.0
    compensate_latency: bool = False
    max_backlog_s: float = 2.0
    live_batch_s: float = 0.1
    segment_gap_s: float = 5.0
    stats_max_samples: int = 180_000
    features: FeatureConfig = field(default_factory=FeatureConfig)
    attribution: AttributionConfig = field(default_factory=AttributionConfig)
    events: EventConfig = field(default_factory=EventConfig)

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid parameter."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (bool, FeatureConfig, AttributionConfig, EventConfig)):
                continue
            if not (np.isfinite(value) and value > 0):
                raise ConfigError(f"EngineConfig.{f.name} must be finite and > 0, got {value}")
        if self.pose_rate_hz > self.analysis_rate_hz or self.contact_rate_hz > self.analysis_rate_hz:
            raise ConfigError("EngineConfig.pose_rate_hz and contact_rate_hz must be <= analysis_rate_hz")
        if self.contact_release_n > self.contact_force_n:
            raise ConfigError("EngineConfig.contact_release_n must be <= contact_force_n")
        self.features.validate()
        self.attribution.validate()
        self.events.validate()

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> "EngineConfig":
        """Build from fully flattened names, as ROS parameters hold them (scalars only).

        Dict-valued fields come as one name per entry and are regrouped over their defaults:
        ``{"events.min_duration_by_category.human": 0.3}`` sets that entry and keeps the
        others. Unknown names raise ConfigError (through :meth:`from_dict`).
        """
        defaults = cls()
        grouped: dict[str, Any] = {}
        for name, value in values.items():
            block, _, rest = name.partition(".")
            head, _, key = rest.partition(".")
            sub = getattr(defaults, block, None)
            if key and is_dataclass(sub) and isinstance(getattr(sub, head, None), dict):
                grouped.setdefault(f"{block}.{head}", dict(getattr(sub, head)))[key] = value
            else:
                grouped[name] = value
        return cls.from_dict(grouped)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "EngineConfig":
        """Build from flat or nested parameters: ``{"horizon_s": .., "attribution": {..}}`` or
        ``{"attribution.human_force_n": ..}``; unknown keys raise ConfigError."""
        nested: dict[str, dict[str, Any]] = {"features": {}, "attribution": {}, "events": {}}
        top: dict[str, Any] = {}
        names = {f.name for f in fields(cls)}
        for key, value in values.items():
            if "." in key:
                block, sub = key.split(".", 1)
                if block not in nested:
                    raise ConfigError(f"unknown engine parameter block {block!r} in {key!r}")
                nested[block][sub] = value
            elif key in nested:
                if not isinstance(value, Mapping):
                    raise ConfigError(f"engine parameter {key!r} must be a mapping")
                nested[key].update(value)
            elif key in names:
                top[key] = value
            else:
                raise ConfigError(f"unknown engine parameter {key!r}")
        sub_cls = {"features": FeatureConfig, "attribution": AttributionConfig, "events": EventConfig}
        for block, params in nested.items():
            allowed = {f.name for f in fields(sub_cls[block])}
            unknown = sorted(set(params) - allowed)
            if unknown:
                raise ConfigError(f"unknown {block} parameter(s): {', '.join(unknown)}")
            top[block] = sub_cls[block](**params)
        out = cls(**top)
        out.validate()
        return out


def config_to_dict(config: EngineConfig) -> dict[str, Any]:
    """EngineConfig as a nested dict (for parameters files and reports)."""
    return asdict(config)
