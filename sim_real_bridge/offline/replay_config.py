"""Replay settings: topic mapping, input checks and engine parameters, from YAML.

The file uses the live monitor's parameter names, so the monitor's own parameter
file works as it is. Accepted shapes (all keys optional; defaults match the live
graph of ``sim-real-bridge demo``):

    sim_topics: {joint_states: /sim/joint_states, wrench: /sim/wrench,
                 ee_pose: /sim/ee_pose, object_pose: /sim/object_pose,
                 joint_trajectory: /sim/joint_trajectory}
    real_topics: {...same streams, /real/...}
    injections_topic: /reality/injections   # labels for scoring; "" ignores them
    tick_period_s: 0.02                     # the live node's analysis timer
    summary_rate_hz: 1.0
    markers_rate_hz: 10.0
    pose_frame_id: world
    max_joints: 64
    max_future_s: 5.0
    stamps_on_node_clock: true
    expected_frames: {wrench: "", pose: ""}
    window_s: [start, end]                  # optional: seconds from the first message
    joint_map: {leader_joint1: follower_joint1}   # optional: sim joint name -> real joint name
    engine: {horizon_s: 0.3, attribution: {...}, ...}   # EngineConfig, flat or nested

or the same parameters under ``<node or /**>: ros__parameters:`` (dotted keys such as
``sim_topics.wrench`` or ``engine.attribution.human_force_n`` are accepted too). An
empty topic disables an optional stream (every stream but ``joint_states`` is
optional); relative topics resolve under ``/``. Joints pair by ``joint_map``, then by
equal names, then by equal names once each side's common prefix is stripped.
Parameters of the monitor that mean nothing offline (output_dir, snapshots,
diagnostics, use_sim_time) are ignored; any other unknown key raises ConfigError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from sim_real_bridge.core import validation
from sim_real_bridge.core.engine import EngineConfig
from sim_real_bridge.core.intake import IntakeConfig
from sim_real_bridge.errors import ConfigError

SIDES: tuple[str, ...] = ("sim", "real")
#: Streams of each side and whether replay needs them.
STREAMS: dict[str, bool] = {
    "joint_states": True,
    "wrench": False,
    "ee_pose": False,
    "object_pose": False,
    "joint_trajectory": False,
}
#: Monitor parameters that have no meaning offline.
IGNORED_KEYS: frozenset[str] = frozenset({
    "output_dir", "diagnostics_period_s", "stale_periods", "snapshot_pre_s", "snapshot_post_s",
    "snapshot_max_total_mb", "snapshot_label", "use_sim_time",
})


def _default_topics(side: str) -> dict[str, str]:
    return {stream: f"/{side}/{stream}" for stream in STREAMS}


@dataclass(frozen=True)
class ReplayConfig:
    """Everything a replay job needs besides its bags (plain data, picklable).

    Attributes:
        sim_topics, real_topics: stream -> bag topic ("" disables an optional stream).
        injections_topic: the stand-in's labels; "" ignores them.
        ticks_topic: the live monitor's tick times (in bags of ``demo --record``);
            when the bag has them, replay ticks then; "" ignores them.
        tick_period_s: analysis tick period on the log-time clock (the live timer).
        summary_rate_hz, markers_rate_hz: rates of /divergence/summary and markers.
        pose_frame_id: frame of the poses in PoseDivergence and markers.
        intake: the input checks of the live node.
        engine: engine parameters (as EngineConfig.from_dict takes them).
        window_s: optional (start, end) seconds from the bag's first message.
        joint_map: explicit joint pairs (sim name -> real name).
        sides: side -> a namespace or a joint_states topic (``--sim``/``--real``), that
            replaces the side's topics where the file did not name them
            (:func:`~sim_real_bridge.offline.replay.topics.side_topics`).
        explicit: the ``<side>_topics.<stream>`` keys the file named.
    """

    sim_topics: Mapping[str, str] = field(default_factory=lambda: _default_topics("sim"))
    real_topics: Mapping[str, str] = field(default_factory=lambda: _default_topics("real"))
    injections_topic: str = "/reality/injections"
    ticks_topic: str = "/divergence_monitor/ticks"
    tick_period_s: float = 0.02
    summary_rate_hz: float = 1.0
    markers_rate_hz: float = 10.0
    pose_frame_id: str = "world"
    intake: IntakeConfig = field(default_factory=IntakeConfig)
    engine: Mapping[str, Any] = field(default_factory=dict)
    window_s: tuple[float, float] | None = None
    joint_map: Mapping[str, str] = field(default_factory=dict)
    sides: Mapping[str, str] = field(default_factory=dict)
    explicit: frozenset[str] = frozenset()

    def topics(self, side: str) -> Mapping[str, str]:
        """The stream -> topic map of one side."""
        return self.sim_topics if side == "sim" else self.real_topics

    def engine_config(self) -> EngineConfig:
        """The validated EngineConfig."""
        return EngineConfig.from_flat(self.engine)

    def with_sides(self, sim: str | None = None, real: str | None = None) -> ReplayConfig:
        """This config with ``--sim``/``--real`` (a namespace or a joint_states topic) set.

        Raises:
            ConfigError: a value is not a topic name.
        """
        sides = dict(self.sides)
        for side, value in (("sim", sim), ("real", real)):
            if value:
                sides[side] = _resolve(value, f"--{side}")
        return replace(self, sides=sides)


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and name.split(".")[0] in ("sim_topics", "real_topics", "expected_frames", "engine"):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _resolve(topic: Any, what: str) -> str:
    if not isinstance(topic, str):
        raise ConfigError(f"{what} must be a topic name, got {topic!r}")
    topic = topic.strip()
    if topic and not topic.startswith("/"):
        topic = f"/{topic}"
    return topic


def _positive(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a number, got {value!r}") from None
    if not number > 0:
        raise ConfigError(f"{what} must be > 0, got {value!r}")
    return number


def _joint_map(value: Any, what: str) -> dict[str, str]:
    """``joint_map``: sim joint name -> real joint name, each real joint named once."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and k and v
                                                 for k, v in value.items()):
        raise ConfigError(f"{what} must map sim joint names to real joint names, got {value!r}")
    repeated = sorted({v for v in value.values() if list(value.values()).count(v) > 1})
    if repeated:
        raise ConfigError(f"{what}: real joint(s) {', '.join(repeated)} named for more than one sim joint")
    return dict(value)


def _flat_parameters(values: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted key -> value: the monitor's (or replay's) ``ros__parameters`` sections when
    the file has them, else the whole mapping."""
    if not any(isinstance(v, Mapping) and "ros__parameters" in v for v in values.values()):
        return _flatten(values)
    merged: dict[str, Any] = {}
    for key, section in values.items():
        if isinstance(section, Mapping) and "ros__parameters" in section:
            if key == "/**" or str(key).rstrip("/").split("/")[-1] in ("divergence_monitor", "replay"):
                merged.update(_flatten(section["ros__parameters"] or {}))
    return merged


@dataclass
class _Parsed:
    """What the keys of a file set, gathered key by key."""

    topics: dict[str, dict[str, str]] = field(default_factory=lambda: {s: _default_topics(s) for s in SIDES})
    frames: dict[str, str] = field(default_factory=lambda: {"wrench": "", "pose": ""})
    engine: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    explicit: set[str] = field(default_factory=set)
    joint_map: dict[str, str] = field(default_factory=dict)
    stamps_on_node_clock: bool = True


def _window(value: Any, what: str) -> tuple[float, float]:
    try:
        start, end = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be [start, end] in seconds, got {value!r}") from None
    if not (0 <= start < end):
        raise ConfigError(f"{what} must satisfy 0 <= start < end, got {value!r}")
    return start, end


def _apply(parsed: _Parsed, key: str, value: Any, source: str) -> None:
    """Take one dotted key into ``parsed``.

    Raises:
        ConfigError: an unknown key or a bad value.
    """
    head, _, rest = key.partition(".")
    what = f"{source}: {key}"
    if head in ("sim_topics", "real_topics") and rest:
        if rest not in STREAMS:
            raise ConfigError(f"{source}: unknown stream {rest!r} in {key}; streams: {', '.join(STREAMS)}")
        parsed.topics[head[:-7]][rest] = _resolve(value, what)
        parsed.explicit.add(key)
    elif head == "expected_frames" and rest in parsed.frames:
        parsed.frames[rest] = "" if value is None else str(value)
    elif head == "engine" and rest:
        parsed.engine[rest] = value
    elif key in ("injections_topic", "ticks_topic"):
        parsed.kwargs[key] = _resolve(value or "", what)
    elif key in ("tick_period_s", "summary_rate_hz", "markers_rate_hz"):
        parsed.kwargs[key] = _positive(value, what)
    elif key == "pose_frame_id":
        parsed.kwargs[key] = str(value)
    elif key in ("max_joints", "max_future_s"):
        number = _positive(value, what)
        parsed.limits[key] = int(number) if key == "max_joints" else number
    elif key == "stamps_on_node_clock":
        parsed.stamps_on_node_clock = bool(value)
    elif key == "window_s":
        parsed.kwargs[key] = _window(value, f"{source}: window_s")
    elif key == "joint_map":
        parsed.joint_map.update(_joint_map(value, f"{source}: joint_map"))
    elif head == "joint_map" and rest:  # a ROS parameter file: joint_map.<sim name>: <real name>
        parsed.joint_map.update(_joint_map({rest: value}, what))
    elif key not in IGNORED_KEYS and head not in IGNORED_KEYS:
        raise ConfigError(f"{source}: unknown replay parameter {key!r}")


def replay_config_from_dict(values: Mapping[str, Any], source: str = "<memory>") -> ReplayConfig:
    """Build a ReplayConfig from the mapping a YAML file holds (see the module docstring).

    Raises:
        ConfigError: an unknown key, a bad value, or a required stream disabled; the
            message names the file and key.
    """
    if not isinstance(values, Mapping):
        raise ConfigError(f"{source}: expected a mapping at the top, got {type(values).__name__}")
    parsed = _Parsed()
    for key, value in _flat_parameters(values).items():
        _apply(parsed, key, value, source)
    for side in SIDES:
        for stream, required in STREAMS.items():
            if required and not parsed.topics[side][stream]:
                raise ConfigError(f"{source}: {side}_topics.{stream} must name a topic")
    if parsed.joint_map:
        parsed.kwargs["joint_map"] = _joint_map(parsed.joint_map, f"{source}: joint_map")
    try:
        EngineConfig.from_flat(parsed.engine)
    except ConfigError as error:
        raise ConfigError(f"{source}: engine parameters: {error}") from None
    intake = IntakeConfig(limits=validation.InputLimits(**parsed.limits),
                          stamps_on_node_clock=parsed.stamps_on_node_clock, expected_frames=parsed.frames)
    return ReplayConfig(sim_topics=parsed.topics["sim"], real_topics=parsed.topics["real"], intake=intake,
                        engine=parsed.engine, explicit=frozenset(parsed.explicit), **parsed.kwargs)


def load_replay_config(path: Path | str | None) -> ReplayConfig:
    """Read a replay YAML file; None gives the defaults (the live graph's topics).

    Raises:
        ConfigError: the file is missing, not YAML, or invalid; the message names it.
    """
    if path is None:
        return ReplayConfig()
    path = Path(path)
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"replay config {path}: cannot read: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"replay config {path}: not valid YAML: {error}") from None
    return replay_config_from_dict(values or {}, source=f"replay config {path}")
