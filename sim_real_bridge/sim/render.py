"""Render a picture of the built-in scene (MuJoCo offscreen; needs MUJOCO_GL=osmesa or egl headless).

Usage: ``MUJOCO_GL=osmesa python -m sim_real_bridge.sim.render docs/scene.png [--robot ur6]``

The arm is shown mid-wipe (tool on the table), with the object and, translucent, the
obstacle box that only the ``obstacle`` injection enables.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import mujoco
import numpy as np

from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.robot import SimulatedRobot
from sim_real_bridge.sim.tasks import build_cycle


def render_scene(width: int = 800, height: int = 600, wipe_time_s: float = 3.4, robot_name: str = "arm7") -> np.ndarray:
    """RGB image (height, width, 3) uint8 of the scene ``wipe_time_s`` into a wipe cycle of ``robot_name``."""
    robot = SimulatedRobot(ArmPhysics(robot=robot_name))
    robot.command(build_cycle("wipe", robot_name))
    robot.advance(int(wipe_time_s * 1e9))
    physics = robot.physics
    physics.model.geom_rgba[physics.model.geom("obstacle").id] = [0.85, 0.15, 0.15, 0.35]
    physics.forward()
    camera = mujoco.MjvCamera()
    camera.lookat[:] = [0.35, 0.0, 0.55]
    camera.distance = 2.1
    camera.azimuth = -140
    camera.elevation = -22
    option = mujoco.MjvOption()
    option.frame = mujoco.mjtFrame.mjFRAME_SITE  # shows the F/T sensor and tool-tip frames
    renderer = mujoco.Renderer(physics.model, height=height, width=width)
    try:
        renderer.update_scene(physics.data, camera=camera, scene_option=option)
        return renderer.render().copy()
    finally:
        renderer.close()


def main(argv: list[str] | None = None) -> None:
    """Write the picture to the given PNG path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="PNG file to write")
    parser.add_argument("--robot", default="arm7", help="built-in robot (arm7, ur6, panda7)")
    args = parser.parse_args(argv)
    import matplotlib.image

    matplotlib.image.imsave(args.output, render_scene(robot_name=args.robot))


if __name__ == "__main__":
    main()
