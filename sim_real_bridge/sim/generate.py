"""Random valid scenarios, deterministic per seed: `sim-real-bridge scenarios generate`.

Scenario ``seed + i`` of ``generate(seed, count)`` is ``generate_scenario(seed + i)``: each
scenario is a pure function of its own seed (and the robot, when one is asked for), so
``--seed 5 --count 3`` writes the scenarios of seeds 5, 6 and 7.

What a scenario draws (see docs/ROBOT.md, "Generated scenarios"):

- the robot (unless given) and its sensors: a wrist F/T sensor or joint states only,
  encoder resolution, joint and effort noise;
- a task, and 0 to 3 injections of random kinds compatible with it (contact kinds where
  the tool touches the table or the box; wrench kinds only with a wrench sensor), each
  magnitude between its kind's strong and weak ends (``KindSpec.generator_range``: from
  a clear effect down to near the detection limit), at random times: injections of
  different categories may overlap, injections of one category never do (nor come within
  3 s of each other), most end mid-task;
- nominal scenarios (no injection) from 30 s to 10 minutes, half of them with idle
  stretches (the arm resting at home); injected ones from 20 s to 90 s.

Seeds below 10000 are for development; seeds from 100000 up are reserved for outside
evaluation.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.sim.robots import ROBOTS, RobotSpec, robot_spec
from sim_real_bridge.sim.scenario import KINDS, parse_scenario
from sim_real_bridge.sim.tasks import TASKS, TaskProgram, build_program

#: Seeds from here up are for outside evaluation only.
EVALUATION_SEEDS_FROM = 100_000
#: Seeds below this are for development.
DEVELOPMENT_SEEDS_BELOW = 10_000

_INJECTION_COUNTS = (0, 1, 2, 3)
_INJECTION_COUNT_P = (0.25, 0.35, 0.25, 0.15)
_ENCODER_RESOLUTIONS_RAD = (0.0, 0.0, 1e-5, 1e-4, 1.5e-3)
_JOINT_NOISES_RAD = (0.0, 0.0, 2e-5, 1e-4, 3e-4)
_EFFORT_NOISES = (0.0, 0.0, 0.02, 0.1, 0.3)
#: Same-category injections stay this far apart (the scoring widens truth by 0.5 s and 2 s).
_SAME_CATEGORY_GAP_S = 3.0
#: An obstacle is put where the tool passes at least this high (clear of the table and the box).
_OBSTACLE_TIP_MIN_Z_M = 0.52
_TASKS_WITH_CONTACT = {"friction": ("wipe", "push", "tour"), "stiffness": ("wipe", "tour"),
                       "object_mass": ("push", "tour")}
#: Contact kinds that change reality only in one kind of phase: the object's mass while
#: the tool pushes it; the surface's stiffness while the tool presses into it (in a push
#: the force is the object's friction: even the softest surface in range moves the push
#: force by 0.4 N median, 1.1-1.7 N p90, against 0.15/0.35 N nominal, and 0.3-4x by nothing).
_CONTACT_PHASE = {"object_mass": "push", "stiffness": "wipe"}


def generate(seed: int, count: int, robot: str | None = None) -> list[dict[str, Any]]:
    """``count`` scenarios, those of seeds ``seed`` .. ``seed + count - 1``.

    Raises:
        ConfigError: a negative seed, a count below 1, or an unknown robot.
    """
    if seed < 0 or count < 1:
        raise ConfigError(f"seed must be >= 0 and count >= 1, got seed {seed}, count {count}")
    return [generate_scenario(seed + i, robot) for i in range(count)]


def write_scenarios(seed: int, count: int, out_dir: Path, robot: str | None = None) -> list[Path]:
    """Write ``gen_<seed>.yaml`` files into ``out_dir`` (created); returns their paths."""
    scenarios = generate(seed, count, robot)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output directory {out_dir}: {exc.strerror}") from None
    paths = []
    for data in scenarios:
        path = out_dir / f"{data['name']}.yaml"
        try:
            path.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120))
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror}") from None
        paths.append(path)
    return paths


def generate_scenario(seed: int, robot: str | None = None) -> dict[str, Any]:
    """One random scenario as a YAML-ready mapping, validated; a pure function of (seed, robot).

    Raises:
        ConfigError: unknown robot.
    """
    rng = np.random.default_rng(seed)
    drawn_robot = str(rng.choice(list(ROBOTS)))  # drawn even when given, so the rest is the same
    spec = robot_spec(robot or drawn_robot)
    sensors = _draw_sensors(rng)
    task = str(rng.choice(TASKS))
    count = int(rng.choice(_INJECTION_COUNTS, p=_INJECTION_COUNT_P))
    nominal = count == 0
    duration_s = _round(rng.uniform(30.0, 600.0) if nominal else rng.uniform(20.0, 90.0), 1)
    idle = _draw_idle(rng, duration_s) if rng.random() < (0.5 if nominal else 0.2) else []
    program = build_program(task, duration_s, spec.name, tuple((w["start_s"], w["end_s"]) for w in idle))
    injections: list[dict[str, Any]] = []
    for _ in range(count):
        entry = _draw_injection(rng, spec, sensors["wrench"], program, duration_s, injections)
        if entry is not None:
            injections.append(entry)
    injections.sort(key=lambda e: e["start_s"])
    data: dict[str, Any] = {
        "name": f"gen_{seed}",
        "seed": int(seed),
        "duration_s": duration_s,
        "task": task,
        "robot": spec.name,
        "description": f"generated: sim-real-bridge scenarios generate --seed {seed}"
                       + (f" --robot {robot}" if robot else ""),
        "sensors": sensors,
    }
    if idle:
        data["idle"] = idle
    data["injections"] = injections
    parse_scenario(data, source=f"generated scenario of seed {seed}")  # a bug here must not write a bad file
    return data


# -------------------------------------------------------------------------- draws
def _round(value: float, digits: int = 3) -> float:
    return float(round(float(value), digits))


def _significant(value: float, digits: int = 4) -> float:
    if value == 0:
        return 0.0
    return float(round(value, digits - 1 - int(math.floor(math.log10(abs(value))))))


def _draw_sensors(rng: np.random.Generator) -> dict[str, Any]:
    return {
        "wrench": bool(rng.random() < 0.75),
        "encoder_resolution_rad": float(rng.choice(_ENCODER_RESOLUTIONS_RAD)),
        "joint_noise_rad": float(rng.choice(_JOINT_NOISES_RAD)),
        "effort_noise": float(rng.choice(_EFFORT_NOISES)),
    }


def _draw_idle(rng: np.random.Generator, duration_s: float) -> list[dict[str, float]]:
    windows: list[dict[str, float]] = []
    for _ in range(int(rng.integers(1, 4))):
        length = rng.uniform(5.0, min(60.0, duration_s / 3))
        start = _round(rng.uniform(0.0, duration_s - length), 1)
        end = _round(start + length, 1)
        if all(end + 1.0 < w["start_s"] or start > w["end_s"] + 1.0 for w in windows):
            windows.append({"start_s": start, "end_s": end})
    return sorted(windows, key=lambda w: w["start_s"])


def _compatible_kinds(task: str, wrench: bool) -> list[str]:
    kinds = []
    for kind in KINDS:
        if kind in _TASKS_WITH_CONTACT and task not in _TASKS_WITH_CONTACT[kind]:
            continue
        if kind == "ft_bias_drift" and not wrench:
            continue
        kinds.append(kind)
    return kinds


def _draw_injection(
    rng: np.random.Generator,
    spec: RobotSpec,
    wrench: bool,
    program: TaskProgram,
    duration_s: float,
    placed: list[dict[str, Any]],
) -> dict[str, Any] | None:
    """One injection clear of same-category ones already placed (None after 20 tries)."""
    kinds = _compatible_kinds(program.task, wrench)
    for _ in range(20):
        kind = str(rng.choice(kinds))
        category = KINDS[kind].category
        window = _draw_window(rng, kind, program, duration_s, placed)
        if window is None:
            continue
        start_s, end_s = window
        clash = any(e["category"] == category and start_s < e["end_s"] + _SAME_CATEGORY_GAP_S
                    and e["start_s"] < end_s + _SAME_CATEGORY_GAP_S for e in placed)
        if clash:
            continue
        params = _draw_params(rng, kind, spec, wrench, program, start_s, end_s)
        if params is None:
            continue
        return {"category": category, "kind": kind, "start_s": start_s, "end_s": end_s, "params": params}
    return None


def _draw_window(
    rng: np.random.Generator, kind: str, program: TaskProgram, duration_s: float, placed: list[dict[str, Any]]
) -> tuple[float, float] | None:
    """Start and end: over a contact phase for contact kinds; else anywhere, often overlapping another."""
    length = rng.uniform(2.0, min(15.0, 0.8 * duration_s))
    if kind in _TASKS_WITH_CONTACT:
        windows = [w for w in _contact_windows(kind, program) if w[0] + 1.0 < duration_s]
        if not windows:
            return None
        low_start, low_end = windows[int(rng.integers(len(windows)))]
        latest = min(low_start + 0.5 * (low_end - low_start), duration_s - 1.5)
        start = rng.uniform(max(0.5, low_start - 2.0), max(0.6, latest))
    elif placed and rng.random() < 0.5:
        other = placed[int(rng.integers(len(placed)))]
        start = rng.uniform(other["start_s"], other["end_s"])  # overlaps another injection
    else:
        start = rng.uniform(0.5, max(0.6, duration_s - length))
    end = duration_s if rng.random() < 0.2 else min(duration_s, start + length)
    start_s, end_s = _round(start, 2), _round(end, 2)
    if end_s - start_s < 1.0:
        return None
    return start_s, end_s


def _contact_windows(kind: str, program: TaskProgram) -> list[tuple[float, float]]:
    """Where the kind can act: the phases of ``_CONTACT_PHASE``, every low-tool stretch otherwise."""
    windows = program.contact_windows_s()
    if kind not in _CONTACT_PHASE:
        return windows
    phases = [p for p in program.phases if p.name == _CONTACT_PHASE[kind]]
    return [w for w in windows if any(p.start_s <= w[0] < p.end_s for p in phases)]


def _magnitudes(rng: np.random.Generator, kind: str) -> dict[str, float]:
    """Each magnitude parameter at one common level between its strong and weak ends (geometric)."""
    level = rng.random()
    return {name: _significant(strong * (weak / strong) ** level)
            for name, (strong, weak) in KINDS[kind].generator_range.items()}


def _horizontal(rng: np.random.Generator) -> list[float]:
    angle = rng.uniform(0.0, 2 * math.pi)
    return [_round(math.cos(angle)), _round(math.sin(angle)), 0.0]


def _draw_params(
    rng: np.random.Generator, kind: str, spec: RobotSpec, wrench: bool, program: TaskProgram,
    start_s: float, end_s: float,
) -> dict[str, Any] | None:
    params: dict[str, Any] = _magnitudes(rng, kind)
    if kind in ("gain", "joint_friction"):
        if rng.random() < 0.5:
            count = int(rng.integers(1, 4))
            params["joints"] = [str(j) for j in rng.choice(spec.joint_names, size=count, replace=False)]
    elif kind == "joint_stall":
        params["joint"] = str(rng.choice(spec.joint_names))
    elif kind in ("push", "hold"):
        params["link"] = str(rng.choice(spec.human_links))
        if kind == "push":
            direction = _horizontal(rng)
            direction[2] = _round(rng.uniform(-0.5, 0.5))
            params["direction"] = direction
    elif kind == "object_slip":
        params["direction"] = _horizontal(rng)
    elif kind == "ft_bias_drift":
        sign = 1.0 if rng.random() < 0.5 else -1.0
        params = {key: sign * value for key, value in params.items()}
        params["axis"] = str(rng.choice(["x", "y", "z"]))
    elif kind in ("dropout", "nan_burst", "frozen", "stamp_jitter"):
        streams = ["joint_states", "ee_pose", "object_pose"] + (["wrench"] if wrench else [])
        params["stream"] = str(rng.choice(streams))
    elif kind == "obstacle":
        return _obstacle_params(rng, spec, program, start_s, end_s)
    return params


def _obstacle_params(
    rng: np.random.Generator, spec: RobotSpec, program: TaskProgram, start_s: float, end_s: float
) -> dict[str, Any] | None:
    """A box on the tool's path where it passes high, 0.3-6 s after the window opens (None if it never does)."""
    from sim_real_bridge.sim.physics import ArmPhysics

    physics = ArmPhysics(robot=spec.name)
    times = np.arange(start_s + 0.3, min(end_s - 0.2, start_s + 6.0), 0.1)
    tips = [physics.forward_kinematics(_commanded_q(program, t))[0] for t in times]
    high = [tip for tip in tips if tip[2] >= _OBSTACLE_TIP_MIN_Z_M]
    if not high:
        return None
    tip = high[int(rng.integers(len(high)))]
    half = [_round(rng.uniform(0.02, 0.05)), _round(rng.uniform(0.02, 0.05)), _round(rng.uniform(0.05, 0.12))]
    centre = [_round(tip[0]), _round(tip[1]), _round(tip[2] + half[2] - 0.02)]
    return {"position_m": centre, "half_size_m": half}


def _commanded_q(program: TaskProgram, t_s: float) -> np.ndarray:
    """The program's commanded joint positions at ``t_s`` (the nearest trajectory point)."""
    t_ns = int(t_s * 1e9)
    offset, trajectory = program.segments[0]
    for seg_offset, seg in program.segments:
        if seg_offset <= t_ns:
            offset, trajectory = seg_offset, seg
    times = np.array([p.time_from_start_ns for p in trajectory.points])
    k = int(np.clip(np.searchsorted(times, t_ns - offset), 0, len(times) - 1))
    return np.asarray(trajectory.points[k].positions, dtype=float)
