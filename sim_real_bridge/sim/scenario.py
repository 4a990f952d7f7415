"""Scenarios for the physical-robot stand-in: what departs from the simulator, and when.

A scenario is a YAML file (built-in ones live in config/scenarios/)::

    name: wipe_friction
    seed: 3
    duration_s: 30
    task: wipe
    robot: arm7                 # optional: arm7 (default), ur6, panda7
    sensors: {wrench: true}     # optional: what the physical robot has (see Sensors)
    idle: [{start_s: 40, end_s: 70}]   # optional: the arm rests at home through these windows
    injections:
      - {category: contact, kind: friction, start_s: 8, end_s: 22, params: {scale: 0.4}}

Times are seconds from the first mirrored command. Every kind's parameters have
defaults (see ``KINDS``); those that name a link or a joint or place something in the
workspace default per robot (``RobotSpec.injection_defaults``). Files are validated on
load; errors name the file, the entry and the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from sim_real_bridge.errors import ScenarioError
from sim_real_bridge.resources import share_path
from sim_real_bridge.sim.kinds import (  # noqa: F401 - re-exported: the scenario's vocabulary
    CATEGORIES,
    KINDS,
    STREAMS,
    BadValue,
    Check,
    KindSpec,
    ParamSpec,
    number,
)
from sim_real_bridge.sim.robots import DEFAULT_ROBOT, ROBOTS, RobotSpec, robot_spec
from sim_real_bridge.sim.tasks import TASKS

_TOP_FIELDS = ("name", "seed", "duration_s", "task", "injections")
_OPTIONAL_TOP_FIELDS = ("description", "robot", "sensors", "idle")
_ENTRY_FIELDS = ("category", "kind", "start_s", "end_s")
_OPTIONAL_ENTRY_FIELDS = ("params",)
#: Kinds that act on the wrench stream whatever their parameters say.
_WRENCH_KINDS = frozenset({"ft_bias_drift"})


@dataclass(frozen=True)
class Sensors:
    """What the physical robot measures, applied by the stand-in to what it publishes.

    Attributes:
        wrench: it has a wrist force/torque sensor; false: joint states only (no wrench
            stream at all).
        encoder_resolution_rad: > 0: joint positions are quantized to this step.
        joint_noise_rad: standard deviation of Gaussian noise on joint positions.
        effort_noise: standard deviation of Gaussian noise on joint efforts (N m).
    """

    wrench: bool = True
    encoder_resolution_rad: float = 0.0
    joint_noise_rad: float = 0.0
    effort_noise: float = 0.0

    @property
    def ideal(self) -> bool:
        """Whether the robot measures exactly what the simulator does."""
        return self == Sensors()


#: The sensors block's numeric fields with their checkers.
SENSOR_FIELDS: dict[str, Check] = {
    "encoder_resolution_rad": number(0.0, 0.1),
    "joint_noise_rad": number(0.0, 0.1),
    "effort_noise": number(0.0, 100.0),
}


@dataclass(frozen=True)
class Injection:
    """One validated injection; ``params`` has every parameter (defaults filled in)."""

    category: str
    kind: str
    start_s: float
    end_s: float
    params: Mapping[str, Any] = field(default_factory=dict)
    index: int = 0

    @property
    def start_ns(self) -> int:
        """Window start, ns from the first mirrored command."""
        return int(round(self.start_s * 1e9))

    @property
    def end_ns(self) -> int:
        """Window end, ns from the first mirrored command."""
        return int(round(self.end_s * 1e9))

    def active(self, elapsed_ns: int | None) -> bool:
        """Whether the window holds ``elapsed_ns`` (start inclusive, end exclusive)."""
        return elapsed_ns is not None and self.start_ns <= elapsed_ns < self.end_ns


@dataclass(frozen=True)
class Scenario:
    """A validated scenario."""

    name: str
    seed: int
    duration_s: float
    task: str
    injections: tuple[Injection, ...]
    source: str = "<memory>"
    description: str = ""
    robot: str = DEFAULT_ROBOT
    sensors: Sensors = Sensors()
    idle: tuple[tuple[float, float], ...] = ()


def builtin_scenario_dir() -> Path:
    """Directory of the built-in scenarios (source checkout, ament share or package data).

    Raises:
        ConfigError: the package's config/scenarios is installed nowhere.
    """
    return share_path("config", "scenarios")


def scenario_names() -> list[str]:
    """Names of the built-in scenarios."""
    return sorted(p.stem for p in builtin_scenario_dir().glob("*.yaml"))


def resolve_scenario_path(name_or_path: str | Path) -> Path:
    """Path of a scenario given a built-in name or a file path.

    Raises:
        ScenarioError: neither a file nor a built-in name.
    """
    text = str(name_or_path)
    path = Path(text)
    if path.suffix in (".yaml", ".yml") or "/" in text:
        if not path.is_file():
            raise ScenarioError(f"{text}: scenario file not found")
        return path
    candidate = builtin_scenario_dir() / f"{text}.yaml"
    if not candidate.is_file():
        raise ScenarioError(
            f"{text}: no such built-in scenario (known: {', '.join(scenario_names())})"
        )
    return candidate


def load_scenario(name_or_path: str | Path, robot: str | None = None) -> Scenario:
    """Load and validate a scenario by built-in name or path.

    Args:
        name_or_path: built-in scenario name or YAML path.
        robot: run it on this built-in robot instead of the file's ``robot`` (its
            parameters are then checked against, and default for, that robot).

    Raises:
        ScenarioError: the file is missing, not YAML, or invalid; the message names the
            file, the entry (``injections[i]``) and the field.
    """
    path = resolve_scenario_path(name_or_path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from exc
    return parse_scenario(data, source=str(path), robot=robot)


def parse_scenario(data: Any, source: str = "<memory>", robot: str | None = None) -> Scenario:
    """Validate a scenario given as a mapping (as read from YAML).

    Args:
        data: the mapping.
        source: file name for messages.
        robot: overrides the mapping's ``robot`` (see ``load_scenario``).

    Raises:
        ScenarioError: naming ``source``, the entry and the field.
    """

    def fail(where: str, message: str) -> ScenarioError:
        return ScenarioError(f"{source}: {where}: {message}")

    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: top level must be a mapping, got {type(data).__name__}")
    for key in data:
        if key not in _TOP_FIELDS and key not in _OPTIONAL_TOP_FIELDS:
            raise fail(str(key), f"unknown field (expected {', '.join(_TOP_FIELDS + _OPTIONAL_TOP_FIELDS)})")
    for key in _TOP_FIELDS:
        if key not in data:
            raise fail(key, "missing field")
    header = _parse_header(data, fail)
    spec = _parse_robot(data.get("robot", DEFAULT_ROBOT) if robot is None else robot,
                        "robot" if robot is None else "robot (override)", fail)
    sensors = _parse_sensors(data.get("sensors"), fail)
    idle = _parse_idle(data.get("idle"), header["duration_s"], fail)
    entries = data["injections"]
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise fail("injections", f"must be a list, got {type(entries).__name__}")
    injections = tuple(
        _parse_injection(entry, i, header["duration_s"], spec, sensors, fail) for i, entry in enumerate(entries)
    )
    return Scenario(**header, injections=injections, source=source, robot=spec.name, sensors=sensors, idle=idle)


def _parse_header(data: dict, fail: Callable[[str, str], ScenarioError]) -> dict[str, Any]:
    name = data["name"]
    if not isinstance(name, str) or not name:
        raise fail("name", f"must be a non-empty string, got {name!r}")
    seed = data["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise fail("seed", f"must be a non-negative integer, got {seed!r}")
    try:
        duration_s = number(0.0, 86400.0, True)(data["duration_s"])
    except BadValue as exc:
        raise fail("duration_s", str(exc)) from None
    task = data["task"]
    if task not in TASKS:
        raise fail("task", f"must be one of {', '.join(TASKS)}, got {task!r}")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise fail("description", f"must be a string, got {description!r}")
    return {"name": name, "seed": seed, "duration_s": duration_s, "task": task, "description": description}


def _parse_robot(value: Any, where: str, fail: Callable[[str, str], ScenarioError]) -> RobotSpec:
    if not isinstance(value, str) or value not in ROBOTS:
        raise fail(where, f"must be one of {', '.join(ROBOTS)}, got {value!r}")
    return robot_spec(value)


def _parse_sensors(value: Any, fail: Callable[[str, str], ScenarioError]) -> Sensors:
    if value is None:
        return Sensors()
    if not isinstance(value, dict):
        raise fail("sensors", f"must be a mapping, got {type(value).__name__}")
    known = ("wrench", *SENSOR_FIELDS)
    for key in value:
        if key not in known:
            raise fail(f"sensors.{key}", f"unknown field (expected {', '.join(known)})")
    wrench = value.get("wrench", True)
    if not isinstance(wrench, bool):
        raise fail("sensors.wrench", f"must be true or false, got {wrench!r}")
    numbers = {}
    for key, check in SENSOR_FIELDS.items():
        try:
            numbers[key] = check(value.get(key, 0.0))
        except BadValue as exc:
            raise fail(f"sensors.{key}", str(exc)) from None
    return Sensors(wrench=wrench, **numbers)


def _parse_idle(value: Any, duration_s: float, fail: Callable[[str, str], ScenarioError]) -> tuple[tuple[float, float], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise fail("idle", f"must be a list, got {type(value).__name__}")
    windows = []
    for i, item in enumerate(value):
        where = f"idle[{i}]"
        if not isinstance(item, dict) or set(item) != {"start_s", "end_s"}:
            raise fail(where, f"must be a mapping with start_s and end_s, got {item!r}")
        times = _window_times(item, where, duration_s, fail)
        windows.append((times["start_s"], times["end_s"]))
    return tuple(windows)


def _window_times(entry: dict, where: str, duration_s: float, fail: Callable[[str, str], ScenarioError]) -> dict[str, float]:
    times = {}
    for key in ("start_s", "end_s"):
        try:
            times[key] = number(-math.inf, math.inf)(entry[key])
        except BadValue as exc:
            raise fail(f"{where}.{key}", str(exc)) from None
    if times["start_s"] < 0:
        raise fail(f"{where}.start_s", f"{times['start_s']} is before the run starts (0)")
    if times["end_s"] > duration_s:
        raise fail(f"{where}.end_s", f"{times['end_s']} is after the run ends (duration_s {duration_s})")
    if times["end_s"] <= times["start_s"]:
        raise fail(f"{where}.end_s", f"{times['end_s']} is not after start_s {times['start_s']}")
    return times


def _parse_injection(
    entry: Any,
    index: int,
    duration_s: float,
    robot: RobotSpec,
    sensors: Sensors,
    fail: Callable[[str, str], ScenarioError],
) -> Injection:
    where = f"injections[{index}]"
    if not isinstance(entry, dict):
        raise fail(where, f"must be a mapping, got {type(entry).__name__}")
    for key in entry:
        if key not in _ENTRY_FIELDS and key not in _OPTIONAL_ENTRY_FIELDS:
            raise fail(f"{where}.{key}", f"unknown field (expected {', '.join(_ENTRY_FIELDS + _OPTIONAL_ENTRY_FIELDS)})")
    for key in _ENTRY_FIELDS:
        if key not in entry:
            raise fail(f"{where}.{key}", "missing field")
    kind = entry["kind"]
    if kind not in KINDS:
        raise fail(f"{where}.kind", f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
    spec = KINDS[kind]
    category = entry["category"]
    if category not in CATEGORIES:
        raise fail(f"{where}.category", f"unknown category {category!r} (known: {', '.join(CATEGORIES)})")
    if category != spec.category:
        raise fail(f"{where}.category", f"kind {kind!r} belongs to category {spec.category!r}, not {category!r}")
    times = _window_times(entry, where, duration_s, fail)
    params = _parse_params(entry.get("params"), kind, where, robot, fail)
    if not sensors.wrench and (kind in _WRENCH_KINDS or params.get("stream") == "wrench"):
        field_name = f"{where}.kind" if kind in _WRENCH_KINDS else f"{where}.params.stream"
        raise fail(field_name, f"{kind} on the wrench stream needs a wrench sensor, and sensors.wrench is false")
    return Injection(category=category, kind=kind, start_s=times["start_s"], end_s=times["end_s"], params=params,
                     index=index)


def _parse_params(raw: Any, kind: str, where: str, robot: RobotSpec,
                  fail: Callable[[str, str], ScenarioError]) -> dict[str, Any]:
    spec = KINDS[kind]
    raw_params = raw or {}
    if not isinstance(raw_params, dict):
        raise fail(f"{where}.params", f"must be a mapping, got {type(raw_params).__name__}")
    for key in raw_params:
        if key not in spec.params:
            raise fail(f"{where}.params.{key}", f"unknown parameter for {kind!r} (known: {', '.join(spec.params)})")
    params: dict[str, Any] = {}
    for key, param in spec.params.items():
        value = raw_params.get(key, param.default_for(kind, key, robot))
        try:
            params[key] = param.check(value, robot)
        except BadValue as exc:
            raise fail(f"{where}.params.{key}", str(exc)) from None
    return params

