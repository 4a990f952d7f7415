"""reality_standin: a STAND-IN for the physical robot, for demos and tests only.

In a real deployment the robot's own driver (for example ros2_control's
joint_state_broadcaster and force_torque_sensor_broadcaster) publishes the ``/real``
topics and this node does not run.

It is ``sim_robot`` (same model, same topics, run in namespace ``/real``) plus a
``RealityModel`` that makes its world depart from the simulator as a scenario says
(config/scenarios/, schema in docs/ROBOT.md): the scenario's robot (or ``robot``), its
``sensors`` block applied to what it publishes (no ``wrench`` topic at all for a robot
without an F/T sensor), its injections. Scenario time starts at the first trajectory it
receives.

Extra topics:

- publishes ``/reality/injections`` (sim_real_bridge/msg/InjectionArray, reliable,
  transient local) at ``injections_rate_hz`` and whenever the active set changes:
  every injection of the scenario with its window and whether it is active now;
  ``elapsed_s`` is negative before the first command. For scoring only: the monitor
  never reads it.

Extra parameters: ``seed`` (-1: the scenario's own), ``injections_rate_hz``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import rclpy
from rclpy.signals import SignalHandlerOptions
from diagnostic_msgs.msg import KeyValue
from rcl_interfaces.msg import ParameterDescriptor

from sim_real_bridge.msg import Injection as InjectionMsg
from sim_real_bridge.msg import InjectionArray
from sim_real_bridge.nodes.sim_robot import SimRobotNode
from sim_real_bridge.ros.qos import LATCHED_QOS
from sim_real_bridge.ros.spinning import run_node
from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.reality import RealityModel

NODE_NAME = "reality_standin"
INJECTIONS_TOPIC = "/reality/injections"
_NS_PER_S = 1_000_000_000


def _param_text(value: Any) -> str:
    if isinstance(value, tuple):
        return json.dumps(list(value))
    return str(value)


class RealityStandinNode(SimRobotNode):
    """The simulated robot plus a scenario's departures: the physical robot's stand-in."""

    def __init__(self, **kwargs: Any) -> None:
        self._last_active: tuple[int, ...] | None = None
        self._last_effects = 0
        super().__init__(NODE_NAME, publish_clock_default=False, **kwargs)
        self._injections_pub = self.create_publisher(InjectionArray, INJECTIONS_TOPIC, LATCHED_QOS)
        rate = float(self.get_parameter("injections_rate_hz").value)
        self._injections_timer = self.create_timer(1.0 / rate, self.publish_injections, clock=self._steady)
        self.get_logger().info(
            f"STAND-IN for the physical robot: scenario {self.scenario.name!r} on {self.scenario.robot} "
            f"({len(self.scenario.injections)} injection(s), seed {self.scenario.seed}, sensors "
            f"{self.scenario.sensors}) from {self.scenario.source}"
        )

    def make_reality(self, physics: ArmPhysics) -> RealityModel:
        """Build the scenario's RealityModel on the stand-in's physics."""
        describe = ParameterDescriptor
        self.declare_parameter("seed", -1, describe(description="Random seed; -1 uses the scenario's seed."))
        self.declare_parameter(
            "injections_rate_hz", 10.0, describe(description="Rate of /reality/injections, Hz.")
        )
        seed = int(self.get_parameter("seed").value)
        rng = np.random.default_rng(self.scenario.seed if seed < 0 else seed)
        return RealityModel(physics, self.scenario, rng)

    def injection_array(self) -> InjectionArray:
        """The scenario's injections with their state now."""
        elapsed = self.robot.elapsed_ns
        msg = InjectionArray()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(max(0, self.ros_now_ns()), _NS_PER_S)
        msg.scenario = self.scenario.name
        msg.elapsed_s = -1.0 if elapsed is None else elapsed / _NS_PER_S
        reality = self.robot.reality
        for inj, active in reality.injection_states(elapsed):
            effect_s = reality.effect_start_s(inj)
            msg.injections.append(
                InjectionMsg(
                    category=inj.category,
                    kind=inj.kind,
                    start_s=float(inj.start_s),
                    end_s=float(inj.end_s),
                    effect_start_s=float("nan") if effect_s is None else float(effect_s),
                    active=bool(active),
                    params=[KeyValue(key=k, value=_param_text(v)) for k, v in inj.params.items()],
                )
            )
        return msg

    def publish_injections(self) -> None:
        """Publish /reality/injections now."""
        msg = self.injection_array()
        self._last_active = tuple(i for i, inj in enumerate(msg.injections) if inj.active)
        self._last_effects = len(self.robot.reality.effect_ns)
        self._injections_pub.publish(msg)

    def after_tick(self) -> None:
        active = tuple(i for i, (_, on) in enumerate(self.robot.reality.injection_states(self.robot.elapsed_ns)) if on)
        if active != self._last_active or len(self.robot.reality.effect_ns) != self._last_effects:
            self.publish_injections()

    def on_first_command(self) -> None:
        super().on_first_command()
        self.publish_injections()

    def extra_status_values(self) -> dict[str, Any]:
        reality = self.robot.reality
        values: dict[str, Any] = {"scenario": self.scenario.name, "stand_in": True}
        values["active_injections"] = ",".join(i.kind for i in reality.active_injections(self.robot.elapsed_ns))
        for stream, n in reality.samples_dropped.items():
            values[f"dropped.{stream}"] = n
        return values


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``reality_standin`` executable."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    raise SystemExit(run_node(RealityStandinNode, NODE_NAME))


if __name__ == "__main__":
    main()
