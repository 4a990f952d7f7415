"""Published kinematic (DH) and inertial tables of the UR5e and the Franka Panda, and MJCF from them.

The built-in models ``assets/ur6.xml`` and ``assets/panda7.xml`` are written by
``python -m sim_real_bridge.sim.dh`` from the tables below (and tested against them:
test/test_sim_robots.py checks the MuJoCo forward kinematics and the link inertials
against these numbers). Geometry is simple geoms (capsules, cylinders), no meshes.

Sources:

- UR5e: Universal Robots, "DH parameters for calculations of kinematics and dynamics"
  (universal-robots.com/articles/ur/application-installation/dh-parameters-for-calculations-
  of-kinematics-and-dynamics/): standard DH (a, d, alpha), link masses and centres of mass
  in the DH frame of each link; the inertia tensors about the centres of mass, in the same
  frames, as UR publishes them in Universal_Robots_ROS2_Description
  config/ur5e/physical_parameters.yaml ("tensor"). Joint ranges, speed and torque limits
  from config/ur5e/joint_limits.yaml there (UR5e user manual; elbow limited to +-pi).
- Franka Emika Panda: Franka's published modified (Craig) DH parameters
  (frankaemika.github.io/docs/control_parameters.html, "Denavit-Hartenberg parameters"),
  joint ranges, speed and torque limits from the same page; link masses, centres of mass
  and inertia tensors from C. Gaz, M. Cognetti, A. Oliva, P. Robuffo Giordano,
  A. De Luca, "Dynamic identification of the Franka Emika Panda robot with retrieval of
  feasible parameters using penalty-based optimization", IEEE RA-L 4(4):4147-4154, 2019
  (each link's parameters in its own DH frame).

Conventions. Standard DH (UR): ``T(i-1 -> i) = Rz(q_i) Tz(d_i) Tx(a_i) Rx(alpha_i)``; the
MuJoCo body of link i sits at frame i-1 and turns about its z axis, so the next body is
at ``(a_i, 0, d_i)`` with orientation ``Rx(alpha_i)``. Modified DH (Panda):
``T(i-1 -> i) = Rx(alpha_{i-1}) Tx(a_{i-1}) Rz(q_i) Tz(d_i)``; body i is frame i itself.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ASSETS_DIR = Path(__file__).resolve().parent / "assets"


@dataclass(frozen=True)
class DhLink:
    """One link of a DH chain.

    Attributes:
        joint: joint name.
        body: body (link) name.
        a_m, d_m, alpha_rad: the DH row (standard: a_i, d_i, alpha_i; modified:
            a_{i-1}, d_i, alpha_{i-1}).
        range_rad: joint limits (lower, upper).
        mass_kg: link mass.
        com_m: centre of mass in the link's DH frame.
        inertia: (ixx, iyy, izz, ixy, ixz, iyz) about the centre of mass, kg m^2, in the
            link's DH frame.
        kp_nm_per_rad: stiffness of the position actuator (this project's choice).
        torque_nm: actuator torque limit.
        radius_m: radius of the link's simple geom.
        collides: whether the link's geom touches the world (forearm, wrist and tool only).
    """

    joint: str
    body: str
    a_m: float
    d_m: float
    alpha_rad: float
    range_rad: tuple[float, float]
    mass_kg: float
    com_m: tuple[float, float, float]
    inertia: tuple[float, float, float, float, float, float]
    kp_nm_per_rad: float
    torque_nm: float
    radius_m: float
    collides: bool


@dataclass(frozen=True)
class DhRobot:
    """A DH table plus what the MJCF needs around it."""

    name: str
    title: str
    convention: str  # "standard" or "modified"
    links: tuple[DhLink, ...]
    flange_d_m: float  # modified DH: the flange row's d (standard DH: 0, the last d is the flange)
    base_yaw_rad: float
    tool_yaw_rad: float  # the tool's turn about the flange axis (keeps the home wrist mid-range)
    seed_q_rad: tuple[float, ...]  # posture the home IK starts from
    sources: str


_PI2 = math.pi / 2
_TWO_PI = 2 * math.pi

UR5E = DhRobot(
    name="ur6",
    title="a 6-joint arm built from the UR5e's published DH and inertial parameters",
    convention="standard",
    links=(
        DhLink("shoulder_pan_joint", "shoulder_link", 0.0, 0.1625, _PI2, (-_TWO_PI, _TWO_PI), 3.761,
               (0.0, -0.02561, 0.00193), (0.00700210, 0.00648091, 0.00657286, 0.00000073, -0.00001053, 0.00049994),
               4000.0, 150.0, 0.06, False),
        DhLink("shoulder_lift_joint", "upper_arm_link", -0.425, 0.0, 0.0, (-_TWO_PI, _TWO_PI), 8.058,
               (0.2125, 0.0, 0.11336), (0.01505885, 0.33388086, 0.33247207, -0.00005400, 0.00000563, -0.00000181),
               4000.0, 150.0, 0.055, False),
        DhLink("elbow_joint", "forearm_link", -0.3922, 0.0, 0.0, (-math.pi, math.pi), 2.846,
               (0.15, 0.0, 0.0265), (0.00399632, 0.07879254, 0.07848510, -0.00001365, 0.00137272, -0.00000660),
               2500.0, 150.0, 0.045, True),
        DhLink("wrist_1_joint", "wrist_1_link", 0.0, 0.1333, _PI2, (-_TWO_PI, _TWO_PI), 1.37,
               (0.0, -0.0018, 0.01634), (0.00165491, 0.00135962, 0.00126279, -0.00000282, -0.00000438, 0.00010157),
               600.0, 28.0, 0.04, True),
        DhLink("wrist_2_joint", "wrist_2_link", 0.0, 0.0997, -_PI2, (-_TWO_PI, _TWO_PI), 1.3,
               (0.0, 0.0018, 0.01634), (0.00135617, 0.00127827, 0.00096614, -0.00000274, 0.00000444, -0.00005048),
               600.0, 28.0, 0.04, True),
        DhLink("wrist_3_joint", "wrist_3_link", 0.0, 0.0996, 0.0, (-_TWO_PI, _TWO_PI), 0.365,
               (0.0, 0.0, -0.001159), (0.00018694, 0.00018908, 0.00025756, 0.00000006, -0.00000017, -0.00000092),
               300.0, 28.0, 0.038, True),
    ),
    flange_d_m=0.0,
    base_yaw_rad=0.0,
    tool_yaw_rad=0.0,
    seed_q_rad=(0.0, -1.2, -1.6, -1.9, 1.57, 0.0),
    sources=(
        "Universal Robots, 'DH parameters for calculations of kinematics and dynamics' (UR5e: standard DH a, d,\n"
        "  alpha; link masses; centres of mass in each link's DH frame); inertia tensors about the centres of mass\n"
        "  in the same frames as UR publishes them in Universal_Robots_ROS2_Description\n"
        "  config/ur5e/physical_parameters.yaml; joint ranges, 180 deg/s and 150/28 N m limits from\n"
        "  config/ur5e/joint_limits.yaml there (UR5e user manual; elbow limited to +-pi)."
    ),
)

PANDA = DhRobot(
    name="panda7",
    title="a 7-joint arm built from the Franka Emika Panda's published DH and identified inertial parameters",
    convention="modified",
    links=(
        DhLink("panda_joint1", "panda_link1", 0.0, 0.333, 0.0, (-2.8973, 2.8973), 4.970684,
               (0.003875, 0.002081, -0.04762), (0.70337, 0.70661, 0.0091170, -0.00013900, 0.0067720, 0.019169),
               3000.0, 87.0, 0.06, False),
        DhLink("panda_joint2", "panda_link2", 0.0, 0.0, -_PI2, (-1.7628, 1.7628), 0.646926,
               (-0.003141, -0.02872, 0.003495), (0.0079620, 2.8110e-2, 2.5995e-2, -3.925e-3, 1.0254e-2, 7.04e-4),
               3000.0, 87.0, 0.06, False),
        DhLink("panda_joint3", "panda_link3", 0.0, 0.316, _PI2, (-2.8973, 2.8973), 3.228604,
               (2.7518e-2, 3.9252e-2, -6.6502e-2), (3.7242e-2, 3.6155e-2, 1.083e-2, -4.761e-3, -1.1396e-2, -1.2805e-2),
               2500.0, 87.0, 0.055, False),
        DhLink("panda_joint4", "panda_link4", 0.0825, 0.0, _PI2, (-3.0718, -0.0698), 3.587895,
               (-5.317e-2, 1.04419e-1, 2.7454e-2), (2.5853e-2, 1.9552e-2, 2.8323e-2, 7.796e-3, -1.332e-3, 8.641e-3),
               2500.0, 87.0, 0.05, True),
        DhLink("panda_joint5", "panda_link5", -0.0825, 0.384, -_PI2, (-2.8973, 2.8973), 1.225946,
               (-1.1953e-2, 4.1065e-2, -3.8437e-2), (3.5549e-2, 2.9474e-2, 8.627e-3, -2.117e-3, -4.037e-3, 2.29e-4),
               400.0, 12.0, 0.05, True),
        DhLink("panda_joint6", "panda_link6", 0.0, 0.0, _PI2, (-0.0175, 3.7525), 1.666555,
               (6.0149e-2, -1.4117e-2, -1.0517e-2), (1.964e-3, 4.354e-3, 5.433e-3, 1.09e-4, -1.158e-3, 3.41e-4),
               300.0, 12.0, 0.045, True),
        DhLink("panda_joint7", "panda_link7", 0.088, 0.0, _PI2, (-2.8973, 2.8973), 0.735522,
               (1.0517e-2, -4.252e-3, 6.1597e-2), (1.2516e-2, 1.0027e-2, 4.815e-3, -4.28e-4, -1.196e-3, -7.41e-4),
               150.0, 12.0, 0.045, True),
    ),
    flange_d_m=0.107,
    base_yaw_rad=0.0,
    # Tool pointing down with its x axis along world -x would need joint 7 at +-pi (its
    # limit is 2.8973): mounted half a turn round, it needs about 0.
    tool_yaw_rad=math.pi,
    seed_q_rad=(0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785 - math.pi / 2),
    sources=(
        "Franka Emika, 'Robot and interface specifications' (frankaemika.github.io/docs/control_parameters.html):\n"
        "  modified DH parameters (flange d = 0.107 m), joint ranges, speed and torque limits; link masses,\n"
        "  centres of mass and inertia tensors (in each link's DH frame) from Gaz, Cognetti, Oliva, Robuffo\n"
        "  Giordano, De Luca, 'Dynamic identification of the Franka Emika Panda robot with retrieval of feasible\n"
        "  parameters using penalty-based optimization', IEEE RA-L 4(4):4147-4154, 2019."
    ),
)

DH_ROBOTS: dict[str, DhRobot] = {UR5E.name: UR5E, PANDA.name: PANDA}


# ----------------------------------------------------------------------- transforms
def rot_x(angle_rad: float) -> np.ndarray:
    """Rotation about x, shape (3, 3)."""
    c, s = math.cos(angle_rad), math.sin(angle_rad)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def rot_z(angle_rad: float) -> np.ndarray:
    """Rotation about z, shape (3, 3)."""
    c, s = math.cos(angle_rad), math.sin(angle_rad)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _homogeneous(rot: np.ndarray, pos: np.ndarray) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3] = rot
    out[:3, 3] = pos
    return out


def dh_link_frames(robot: DhRobot, q_rad: np.ndarray) -> list[np.ndarray]:
    """Frames of the DH links 1..n and the flange, relative to the base, each (4, 4).

    Computed from the DH rows alone (no MuJoCo), for testing the MJCF against the table.
    """
    frames = []
    current = np.eye(4)
    for link, q in zip(robot.links, np.asarray(q_rad, dtype=float)):
        if robot.convention == "standard":
            step = (_homogeneous(rot_z(q), np.zeros(3)) @ _homogeneous(np.eye(3), np.array([0.0, 0.0, link.d_m]))
                    @ _homogeneous(rot_x(link.alpha_rad), np.array([link.a_m, 0.0, 0.0])))
        else:
            step = (_homogeneous(rot_x(link.alpha_rad), np.array([link.a_m, 0.0, 0.0]))
                    @ _homogeneous(rot_z(q), np.array([0.0, 0.0, link.d_m])))
        current = current @ step
        frames.append(current)
    frames.append(current @ _homogeneous(np.eye(3), np.array([0.0, 0.0, robot.flange_d_m])))
    return frames


def body_placement(robot: DhRobot, index: int) -> tuple[np.ndarray, np.ndarray]:
    """Position (3,) and rotation (3, 3) of link body ``index`` in its parent body.

    For the standard convention body i sits at frame i-1: its placement comes from the
    previous row; for the modified convention it comes from its own row.
    """
    if robot.convention == "standard":
        if index == 0:
            return np.zeros(3), np.eye(3)
        prev = robot.links[index - 1]
        return np.array([prev.a_m, 0.0, prev.d_m]), rot_x(prev.alpha_rad)
    link = robot.links[index]
    rot = rot_x(link.alpha_rad)
    return np.array([link.a_m, 0.0, 0.0]) + rot @ np.array([0.0, 0.0, link.d_m]), rot


def inertial_in_body(robot: DhRobot, index: int) -> tuple[np.ndarray, np.ndarray]:
    """Centre of mass (3,) and inertia matrix (3, 3) of link ``index`` in its MuJoCo body frame."""
    link = robot.links[index]
    ixx, iyy, izz, ixy, ixz, iyz = link.inertia
    tensor = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    com = np.asarray(link.com_m, dtype=float)
    if robot.convention == "modified":
        return com, tensor
    # Standard DH: the link's DH frame i is its body frame moved by Tz(d) Tx(a) Rx(alpha).
    rot = rot_x(link.alpha_rad)
    return np.array([link.a_m, 0.0, link.d_m]) + rot @ com, rot @ tensor @ rot.T


def flange_in_last_body(robot: DhRobot) -> np.ndarray:
    """Position of the flange (where the tool mounts) in the last link's body, (3,)."""
    last = robot.links[-1]
    if robot.convention == "standard":
        return np.array([last.a_m, 0.0, last.d_m])
    return np.array([0.0, 0.0, robot.flange_d_m])


# ----------------------------------------------------------------------------- MJCF
def _f(values) -> str:
    # Rounded first: sin/cos of right angles leave 1e-17 residues (and -0.0).
    return " ".join(f"{float(v) + 0.0:.10g}" for v in np.round(np.ravel(values), 12))


def _quat(rot: np.ndarray) -> str:
    w = math.sqrt(max(0.0, 1.0 + rot[0, 0] + rot[1, 1] + rot[2, 2])) / 2
    if w > 1e-6:
        q = np.array([w, (rot[2, 1] - rot[1, 2]) / (4 * w), (rot[0, 2] - rot[2, 0]) / (4 * w),
                      (rot[1, 0] - rot[0, 1]) / (4 * w)])
    else:  # a half turn: MuJoCo reads axis-angle from the vector part
        axis = np.sqrt(np.clip((np.diag(rot) + 1.0) / 2.0, 0.0, None))
        q = np.array([0.0, *axis])
    return _f(np.round(q, 9))


def _link_geom(robot: DhRobot, index: int) -> str:
    """A capsule from the body origin to the next body (or the flange): the link's shape."""
    link = robot.links[index]
    end = body_placement(robot, index + 1)[0] if index + 1 < len(robot.links) else flange_in_last_body(robot)
    cls = ' class="collide_arm"' if link.collides else ""
    material = "joint" if index % 2 else "link"
    if np.linalg.norm(end) < 1e-6:
        return f'<geom name="{link.body}_geom"{cls} type="sphere" size="{link.radius_m:g}" material="{material}"/>'
    return (f'<geom name="{link.body}_geom"{cls} type="capsule" fromto="0 0 0 {_f(end)}" '
            f'size="{link.radius_m:g}" material="{material}"/>')


TOOL_XML = """<!-- Wrist F/T sensor: measures what the tool exerts on the flange, in the sensor frame. -->
<body name="tool" pos="{flange}" quat="{quat}" gravcomp="1">
  <inertial pos="0 0 0.05" mass="0.4" diaginertia="0.0008 0.0008 0.0003"/>
  <site name="ft_sensor" pos="0 0 0" size="0.012" rgba="0.1 0.8 0.2 1"/>
  <geom name="ft_geom" type="cylinder" fromto="0 0 0 0 0 0.015" size="0.042" material="joint"/>
  <geom name="tool_shaft" class="collide_arm" type="capsule" fromto="0 0 0.015 0 0 0.1" size="0.015" material="tool"/>
  <geom name="tool_tip" class="collide_arm" type="sphere" pos="0 0 0.12" size="0.02" material="tool"
        solref="0.05 1" solimp="0.3 0.95 0.01" priority="2"/>
  <geom name="pusher_pr" class="collide_arm" type="box" pos="0.0200 0.0261 0.095" euler="0 0 0.2000" size="0.0204 0.004 0.012" material="tool"/>
  <geom name="pusher_pl" class="collide_arm" type="box" pos="-0.0200 0.0261 0.095" euler="0 0 -0.2000" size="0.0204 0.004 0.012" material="tool"/>
  <geom name="pusher_nr" class="collide_arm" type="box" pos="0.0200 -0.0261 0.095" euler="0 0 -0.2000" size="0.0204 0.004 0.012" material="tool"/>
  <geom name="pusher_nl" class="collide_arm" type="box" pos="-0.0200 -0.0261 0.095" euler="0 0 0.2000" size="0.0204 0.004 0.012" material="tool"/>
  <site name="ee" pos="0 0 0.12" size="0.005"/>
  <body name="payload" pos="0 0 0.06">
    <inertial pos="0 0 0" mass="1e-6" diaginertia="1e-9 1e-9 1e-9"/>
  </body>
</body>"""


def _column(robot: DhRobot) -> str:
    """A column in the base up to the first joint when the table puts it above the base."""
    top = body_placement(robot, 0)[0]
    if np.linalg.norm(top) < 1e-6:
        return ""
    return f'      <geom name="column_geom" type="capsule" fromto="0 0 0.05 {_f(top)}" size="0.06" material="link"/>\n'


def _chain_xml(robot: DhRobot) -> str:
    """Nested link bodies from the DH table, the tool at the flange."""
    inner = TOOL_XML.format(flange=_f(flange_in_last_body(robot)), quat=_quat(rot_z(robot.tool_yaw_rad)))
    for index in reversed(range(len(robot.links))):
        link = robot.links[index]
        pos, rot = body_placement(robot, index)
        com, tensor = inertial_in_body(robot, index)
        full = (tensor[0, 0], tensor[1, 1], tensor[2, 2], tensor[0, 1], tensor[0, 2], tensor[1, 2])
        body = [
            f'<body name="{link.body}" pos="{_f(pos)}" quat="{_quat(rot)}" gravcomp="1">',
            f'  <inertial pos="{_f(com)}" mass="{_f(link.mass_kg)}" fullinertia="{_f(full)}"/>',
            f'  <joint name="{link.joint}" axis="0 0 1" range="{_f(link.range_rad)}"/>',
            f"  {_link_geom(robot, index)}",
            *("  " + line for line in inner.splitlines()),
            "</body>",
        ]
        inner = "\n".join(body)
    return inner


HEADER = """<!--
  sim_real_bridge built-in robot `{name}`: {title}.
  Generated by `python -m sim_real_bridge.sim.dh` from the tables in sim_real_bridge/sim/dh.py;
  test/test_sim_robots.py checks its kinematics and inertials against them.

  Sources:
  {sources}

  Simple geoms, no meshes. Position actuators (kp this project's choice, critically damped,
  torque limits the vendor's); link gravity compensated (gravcomp), a `payload` is not.
  The scene (table, box, obstacle, payload body, tool with its wrist F/T sensor) is the
  one of arm.xml: units metres, kilograms, seconds, radians; timestep 1 ms. Only the
  forearm, wrist and tool collide, with the world only (see arm.xml for the collision bits).
-->
"""

SCENE_HEAD = """<mujoco model="sim_real_bridge_{name}">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="0.001" integrator="implicitfast" cone="pyramidal">
    <flag warmstart="enable"/>
  </option>
  <size memory="4M"/>

  <visual>
    <global offwidth="960" offheight="720"/>
    <quality shadowsize="2048"/>
  </visual>

  <default>
    <joint damping="0.5" armature="0.1"/>
    <geom contype="0" conaffinity="0" friction="0.5 0.005 0.0001"/>
    <position ctrlrange="-6.3 6.3" dampratio="1"/>
    <default class="collide_arm">
      <geom contype="2" conaffinity="1"/>
    </default>
    <default class="world">
      <geom contype="1" conaffinity="1"/>
    </default>
  </default>

  <asset>
    <texture name="grid" type="2d" builtin="checker" rgb1="0.30 0.32 0.36" rgb2="0.24 0.26 0.30"
             width="256" height="256" mark="edge" markrgb="0.4 0.4 0.45"/>
    <material name="floor" texture="grid" texrepeat="8 8" reflectance="0.05"/>
    <material name="table" rgba="0.55 0.42 0.30 1"/>
    <material name="link" rgba="0.92 0.92 0.94 1"/>
    <material name="joint" rgba="0.25 0.27 0.30 1"/>
    <material name="tool" rgba="0.20 0.45 0.80 1"/>
    <material name="object" rgba="0.90 0.45 0.15 1"/>
  </asset>

  <worldbody>
    <light name="key" pos="0.6 -1.0 2.2" dir="-0.2 0.5 -1" diffuse="0.6 0.6 0.6" castshadow="true"/>
    <light name="fill" pos="-1 1 2" dir="0.5 -0.5 -1" diffuse="0.3 0.3 0.3" castshadow="false"/>
    <camera name="overview" pos="1.35 -1.35 1.3" xyaxes="0.71 0.71 0 -0.38 0.38 0.84"/>

    <geom name="floor" class="world" type="plane" size="2 2 0.05" material="floor"/>
    <geom name="table" class="world" type="box" pos="0.6 0 0.2" size="0.35 0.5 0.2" material="table"/>
    <geom name="pedestal" type="cylinder" pos="0 0 0.2" size="0.09 0.2" material="joint"/>
    <body name="obstacle_body" mocap="true" pos="{obstacle}">
      <geom name="obstacle" type="box" size="0.03 0.03 0.15" rgba="0.8 0.1 0.1 0" contype="1" conaffinity="1"/>
    </body>

    <body name="base" pos="0 0 0.4" quat="{base_quat}">
      <geom name="base_geom" type="cylinder" size="0.08 0.025" pos="0 0 0.025" material="joint"/>
{column}"""

SCENE_TAIL = """    </body>

    <body name="object" pos="0.6 0 0.44">
      <freejoint name="object_free"/>
      <geom name="object_geom" class="world" type="box" size="0.04 0.04 0.04" mass="0.5" priority="1" friction="0.6 0.005 0.0001" material="object"/>
    </body>
  </worldbody>
"""


def model_xml(robot: DhRobot, home_q_rad: np.ndarray, obstacle_m: tuple[float, float, float]) -> str:
    """The MJCF text of ``robot`` with its home keyframe."""
    indent = " " * 6
    chain = "\n".join(indent + line for line in _chain_xml(robot).splitlines())
    actuators = "\n".join(
        f'    <position name="act{i + 1}" joint="{link.joint}" kp="{link.kp_nm_per_rad:g}" '
        f'forcerange="{-link.torque_nm:g} {link.torque_nm:g}"/>'
        for i, link in enumerate(robot.links)
    )
    home = _f(np.round(home_q_rad, 4))
    return (
        HEADER.format(name=robot.name, title=robot.title, sources=robot.sources.replace("\n", "\n  "))
        + SCENE_HEAD.format(name=robot.name, obstacle=_f(obstacle_m), base_quat=_quat(rot_z(robot.base_yaw_rad)),
                            column=_column(robot))
        + chain + "\n" + SCENE_TAIL
        + f"\n  <actuator>\n{actuators}\n  </actuator>\n\n"
        + '  <sensor>\n    <force name="ft_force" site="ft_sensor"/>\n    <torque name="ft_torque" site="ft_sensor"/>\n'
        + "  </sensor>\n\n"
        + f'  <keyframe>\n    <key name="home" qpos="{home}  0.6 0 0.44 1 0 0 0"\n         ctrl="{home}"/>\n'
        + "  </keyframe>\n</mujoco>\n"
    )


def write_model(robot: DhRobot, out_dir: Path = ASSETS_DIR) -> Path:
    """Write ``<name>.xml``: the chain, then a home posture solved by IK (tool down above the table)."""
    import tempfile

    from sim_real_bridge.sim.physics import ArmPhysics
    from sim_real_bridge.sim.robots import robot_spec
    from sim_real_bridge.sim.tasks import solve_ik

    spec = robot_spec(robot.name)
    seed = np.asarray(robot.seed_q_rad, dtype=float)
    obstacle = spec.injection_defaults[("obstacle", "position_m")]
    with tempfile.TemporaryDirectory() as tmp:
        draft = Path(tmp) / f"{robot.name}.xml"
        draft.write_text(model_xml(robot, seed, obstacle))
        physics = ArmPhysics(draft)
        home = solve_ik(physics, np.asarray(spec.home_tip_m), seed_q_rad=seed)
    path = out_dir / f"{robot.name}.xml"
    path.write_text(model_xml(robot, home, obstacle))
    return path


def main(argv: list[str] | None = None) -> int:
    """Write the MJCF of the DH robots (all, or the named ones)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("robots", nargs="*", metavar="ROBOT", help=f"any of {', '.join(DH_ROBOTS)} (default: all)")
    parser.add_argument("--out", type=Path, default=ASSETS_DIR)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.robots) - set(DH_ROBOTS))
    if unknown:
        parser.error(f"unknown robot(s) {', '.join(unknown)}; known: {', '.join(DH_ROBOTS)}")
    for name in args.robots or list(DH_ROBOTS):
        print(write_model(DH_ROBOTS[name], args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
