"""The built-in robots: names, model files and the facts scenarios and tasks need about each.

Pure data (no MuJoCo), so that scenario validation can check joint and link names
without loading a model; test/test_sim_robots.py checks every entry against its MJCF.

============  =========================================================  ==================================
name          model                                                      joints
============  =========================================================  ==================================
``arm7``      ``assets/arm.xml``: the project's own 7-joint arm           ``joint1`` .. ``joint7``
``ur6``       ``assets/ur6.xml``: UR5e DH and inertial parameters         ``shoulder_pan_joint`` .. ``wrist_3_joint``
``panda7``    ``assets/panda7.xml``: Franka Panda DH, Gaz et al. 2019     ``panda_joint1`` .. ``panda_joint7``
============  =========================================================  ==================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from sim_real_bridge.errors import ConfigError

ASSETS_DIR = Path(__file__).resolve().parent / "assets"

Waypoint = tuple[tuple[float, float, float], float]


@dataclass(frozen=True)
class RobotSpec:
    """One built-in robot.

    Attributes:
        name: the scenario's ``robot`` value.
        description: one line for listings.
        model_file: MJCF file name under ``sim/assets``.
        joint_names: arm joints, base to tip.
        link_names: bodies a ``push`` or ``hold`` may act on: the moving links and the tool.
        human_links: the links a person plausibly pushes or grabs (forearm to tool).
        velocity_max_rad_s: joint speed limits of the command mirror (config/robot_limits.yaml).
        home_tip_m: tool-tip position at the home keyframe (tool pointing down).
        reach_waypoints: the ``reach`` cycle's tool-tip legs (position, leg duration s).
        limits_file: the command mirror's limits for this robot, in the package's config/.
        injection_defaults: per-robot defaults of injection parameters that name links or
            joints or place things in the robot's workspace, by (kind, parameter).
    """

    name: str
    description: str
    model_file: str
    joint_names: tuple[str, ...]
    link_names: tuple[str, ...]
    human_links: tuple[str, ...]
    velocity_max_rad_s: tuple[float, ...]
    home_tip_m: tuple[float, float, float] = (0.40, 0.0, 0.65)
    reach_waypoints: tuple[Waypoint, ...] = (
        ((0.50, -0.25, 0.62), 1.5),
        ((0.65, 0.00, 0.68), 1.5),
        ((0.50, 0.25, 0.62), 1.5),
        ((0.38, 0.00, 0.75), 1.5),
    )
    injection_defaults: Mapping[tuple[str, str], Any] = field(default_factory=dict)
    limits_file: str = "robot_limits.yaml"

    @property
    def model_path(self) -> Path:
        """Absolute path of the robot's MJCF file."""
        return ASSETS_DIR / self.model_file


ARM7 = RobotSpec(
    name="arm7",
    description="the project's 7-joint arm (yaw/pitch alternating)",
    model_file="arm.xml",
    joint_names=tuple(f"joint{i}" for i in range(1, 8)),
    link_names=tuple(f"link{i}" for i in range(1, 8)) + ("tool",),
    human_links=("link4", "link5", "link6", "link7", "tool"),
    velocity_max_rad_s=(2.0,) * 7,
    injection_defaults={
        ("push", "link"): "link6",
        ("hold", "link"): "link6",
        ("joint_stall", "joint"): "joint4",
        ("obstacle", "position_m"): (0.47, 0.12, 0.55),
    },
)

UR6 = RobotSpec(
    name="ur6",
    description="a 6-joint arm like the UR5e (its published DH and inertial parameters)",
    model_file="ur6.xml",
    joint_names=("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint",
                 "wrist_3_joint"),
    link_names=("shoulder_link", "upper_arm_link", "forearm_link", "wrist_1_link", "wrist_2_link", "wrist_3_link",
                "tool"),
    human_links=("forearm_link", "wrist_1_link", "wrist_2_link", "wrist_3_link", "tool"),
    velocity_max_rad_s=(3.14,) * 6,
    injection_defaults={
        ("push", "link"): "wrist_1_link",
        ("hold", "link"): "wrist_1_link",
        ("joint_stall", "joint"): "elbow_joint",
        ("obstacle", "position_m"): (0.47, 0.12, 0.55),
    },
    limits_file="robot_limits_ur6.yaml",
)

PANDA7 = RobotSpec(
    name="panda7",
    description="a 7-joint arm like the Franka Emika Panda (its published DH, Gaz et al. 2019 inertials)",
    model_file="panda7.xml",
    joint_names=tuple(f"panda_joint{i}" for i in range(1, 8)),
    link_names=tuple(f"panda_link{i}" for i in range(1, 8)) + ("tool",),
    human_links=("panda_link4", "panda_link5", "panda_link6", "panda_link7", "tool"),
    velocity_max_rad_s=(2.175,) * 4 + (2.61,) * 3,
    injection_defaults={
        ("push", "link"): "panda_link6",
        ("hold", "link"): "panda_link6",
        ("joint_stall", "joint"): "panda_joint4",
        ("obstacle", "position_m"): (0.47, 0.12, 0.55),
    },
    limits_file="robot_limits_panda7.yaml",
)

#: Every built-in robot by name; ``arm7`` is the default.
ROBOTS: dict[str, RobotSpec] = {spec.name: spec for spec in (ARM7, UR6, PANDA7)}
DEFAULT_ROBOT = "arm7"


def robot_spec(name: str | None = None) -> RobotSpec:
    """The built-in robot ``name`` (``arm7`` when None or empty).

    Raises:
        ConfigError: no built-in robot has that name.
    """
    key = name or DEFAULT_ROBOT
    if key not in ROBOTS:
        raise ConfigError(f"unknown robot {key!r}; built-in robots: {', '.join(ROBOTS)}")
    return ROBOTS[key]
