"""The divergence monitor's ROS parameters: declared with descriptions, read once into settings.

Three groups, all declared by :func:`declare_monitor_parameters`:

- the node's own (:data:`NODE_PARAMETERS`);
- ``<side>_topics.<stream>`` for each side and stream of
  :data:`~sim_real_bridge.ros.monitor_inputs.STREAMS` (empty disables a stream);
- ``engine.*``: every field of :class:`~sim_real_bridge.core.engine.EngineConfig`,
  flattened to dotted names (see :func:`flat_engine_parameters`).

:func:`read_monitor_settings` reads them into a :class:`MonitorSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node

from sim_real_bridge.core import intake, validation
from sim_real_bridge.core.engine import EngineConfig
from sim_real_bridge.errors import ConfigError
from sim_real_bridge.ros.monitor_inputs import SIDES, STREAMS
from sim_real_bridge.ros.monitor_lag import LagLimits

ENGINE_PREFIX = "engine."
ENGINE_DESCRIPTION = "see sim_real_bridge.core.engine.EngineConfig"

#: Parameters of the node itself: name -> (default, description).
NODE_PARAMETERS: dict[str, tuple[Any, str]] = {
    "output_dir": ("sim_real_bridge_out", "Directory for snapshots, events.jsonl and monitor_summary.json."),
    "tick_period_s": (0.02, "Period of the analysis timer (s); outputs keep the engine's own rates."),
    "summary_rate_hz": (1.0, "Rate of /divergence/summary."),
    "markers_rate_hz": (10.0, "Rate of /divergence/markers."),
    "diagnostics_period_s": (1.0, "Period of /diagnostics."),
    "stale_periods": (3.0, "A stream is STALE after this many expected periods without a message."),
    "snapshot_pre_s": (10.0, "Seconds of raw streams kept before an event's start in its snapshot."),
    "snapshot_post_s": (2.0, "Seconds after an event's start in its snapshot."),
    "snapshot_max_total_mb": (500.0, "Disk cap of all snapshots; the oldest go first."),
    "snapshot_label": ("", "Prefix of snapshot file names (the scenario, for example)."),
    "pose_frame_id": ("world", "Frame of ee_pose and object_pose on both sides (for markers and checks)."),
    "expected_frames.wrench": ("", "Frame the wrench messages must carry on both sides; empty accepts any."),
    "expected_frames.pose": ("", "Frame the pose messages must carry on both sides; empty accepts any."),
    "max_joints": (64, "A joint_states message with more joints than this is refused as oversized."),
    "max_future_s": (5.0, "A stamp this far ahead of the receive time is refused (same clock only)."),
    "stamps_on_node_clock": (True, "Both sides stamp on this node's clock, so future stamps can be checked."),
    "input_thread": (True, "Take the joint_states, wrench and pose inputs on a thread waiting on them alone "
                           "(the executor's per-wake cost at 1 kHz was the node's largest); false: the "
                           "executor serves them with the node's other callbacks."),
    "fit.enabled": (False, "Fit simulator parameters to each closed dynamics or contact event's snapshot, in a "
                           "separate process, and publish the result on /divergence/fits (sim-real-bridge fit)."),
    "fit.model": ("arm7", "Model the live fits correct: a built-in robot name or an MJCF file."),
    "lag.warn_s": (0.5, "Lag (now minus the newest grid time analysed) above which /diagnostics warns and the "
                         "node advances in larger steps (behind)."),
    "lag.error_s": (2.0, "Lag above which /diagnostics reports an error."),
    "lag.behind_tick_period_s": (0.2, "While behind, the analysis advances at this period (larger batches)."),
    "lag.away_s": (0.1, "A gap between ticks this long means the node was starved: queued inputs are taken "
                        "in before it analyses again."),
    "record_inputs_path": ("", "Bag directory to record every input message to, as received (log time = "
                               "this node's receive time), and the analysis ticks, so replay repeats this "
                               "run's analysis; empty: off."),
}


@dataclass(frozen=True)
class InputTopic:
    """A stream the monitor subscribes to: ``topic`` as the parameter gives it (unresolved)."""

    side: str
    stream: str
    topic: str


@dataclass(frozen=True)
class SnapshotSettings:
    """The ``snapshot_*`` parameters (see :class:`~sim_real_bridge.capture.failure_capture.FailureCapture`)."""

    pre_s: float
    post_s: float
    max_total_bytes: int
    label: str


@dataclass(frozen=True)
class MonitorSettings:
    """Every parameter of the monitor, read and converted once at start-up."""

    output_dir: Path
    tick_period_s: float
    summary_rate_hz: float
    markers_rate_hz: float
    diagnostics_period_s: float
    stale_periods: float
    pose_frame_id: str
    intake: intake.IntakeConfig
    engine: EngineConfig
    snapshots: SnapshotSettings
    lag: LagLimits
    input_thread: bool
    fit_enabled: bool
    fit_model: str
    #: Bag directory of the input recording; None: off.
    record_inputs_path: Path | None
    #: Streams with a topic, side by side in the order of STREAMS.
    inputs: tuple[InputTopic, ...]


def flat_engine_parameters(prefix: str, config: Any) -> dict[str, Any]:
    """Flattened ``engine.*`` parameters with the dataclass defaults.

    Nested configs and dict-valued fields (per-category values) become dotted names,
    since ROS parameters hold only scalars and arrays.
    """
    out: dict[str, Any] = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if is_dataclass(value):
            out.update(flat_engine_parameters(f"{prefix}{f.name}.", value))
        elif isinstance(value, dict):
            out.update({f"{prefix}{f.name}.{key}": item for key, item in value.items()})
        else:
            out[f"{prefix}{f.name}"] = value
    return out


def declare_monitor_parameters(node: Node) -> None:
    """Declares the node's, the topic and the ``engine.*`` parameters with their defaults."""
    for name, (default, description) in NODE_PARAMETERS.items():
        node.declare_parameter(name, default, ParameterDescriptor(description=description))
    for side in SIDES:
        for stream in STREAMS:
            node.declare_parameter(
                f"{side}_topics.{stream}", f"{side}/{stream}",
                ParameterDescriptor(description=f"{side} side {stream} topic; empty disables it."),
            )
    for name, default in flat_engine_parameters(ENGINE_PREFIX, EngineConfig()).items():
        # One descriptor each: rclpy writes the parameter's name and type into it.
        node.declare_parameter(name, default, ParameterDescriptor(description=ENGINE_DESCRIPTION))


def read_monitor_settings(node: Node) -> MonitorSettings:
    """Reads the declared parameters.

    Raises:
        ConfigError: a required stream has no topic, or an ``engine.*`` value is refused.
    """
    def param(name: str) -> Any:
        return node.get_parameter(name).value

    limits = validation.InputLimits(max_joints=int(param("max_joints")), max_future_s=float(param("max_future_s")))
    intake_config = intake.IntakeConfig(
        limits=limits,
        stamps_on_node_clock=bool(param("stamps_on_node_clock")),
        expected_frames={"wrench": param("expected_frames.wrench"), "pose": param("expected_frames.pose")},
    )
    engine_names = flat_engine_parameters(ENGINE_PREFIX, EngineConfig())
    engine_config = EngineConfig.from_flat({name[len(ENGINE_PREFIX):]: param(name) for name in engine_names})
    record_inputs = param("record_inputs_path")
    return MonitorSettings(
        output_dir=Path(param("output_dir")).expanduser().resolve(),
        tick_period_s=float(param("tick_period_s")),
        summary_rate_hz=float(param("summary_rate_hz")),
        markers_rate_hz=float(param("markers_rate_hz")),
        diagnostics_period_s=float(param("diagnostics_period_s")),
        stale_periods=float(param("stale_periods")),
        pose_frame_id=param("pose_frame_id"),
        intake=intake_config,
        engine=engine_config,
        snapshots=SnapshotSettings(
            pre_s=float(param("snapshot_pre_s")), post_s=float(param("snapshot_post_s")),
            max_total_bytes=int(float(param("snapshot_max_total_mb")) * 1e6), label=str(param("snapshot_label")),
        ),
        lag=LagLimits(
            warn_ns=int(float(param("lag.warn_s")) * 1e9), error_ns=int(float(param("lag.error_s")) * 1e9),
            behind_period_ns=int(float(param("lag.behind_tick_period_s")) * 1e9),
            away_ns=int(float(param("lag.away_s")) * 1e9),
        ),
        input_thread=bool(param("input_thread")),
        fit_enabled=bool(param("fit.enabled")),
        fit_model=param("fit.model"),
        record_inputs_path=Path(record_inputs).expanduser().resolve() if record_inputs else None,
        inputs=_input_topics(param),
    )


def _input_topics(param: Any) -> tuple[InputTopic, ...]:
    """The streams with a topic; a required one without is refused."""
    inputs = []
    for side in SIDES:
        for stream, spec in STREAMS.items():
            topic = param(f"{side}_topics.{stream}")
            if not topic:
                if spec.required:
                    raise ConfigError(f"parameter {side}_topics.{stream} must name a topic")
                continue
            inputs.append(InputTopic(side, stream, topic))
    return tuple(inputs)
