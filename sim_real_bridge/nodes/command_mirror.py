"""command_mirror: one JointTrajectory in, the same to the simulator and (gated) to the robot.

Topics (relative names by default; set them with the ``topics.*`` parameters, for
example from a params file, or remap them with ``--ros-args -r from:=to``; remapping
applies to whatever name the parameter gives):

- subscribes ``topics.input`` (default ``bridge/joint_trajectory``;
  trajectory_msgs/JointTrajectory, reliable): the only command input. The node
  subscribes to nothing else that carries commands, so a command published on any
  other topic never reaches its outputs;
- subscribes ``topics.real_joint_states`` (default ``real/joint_states``;
  sensor_msgs/JointState, sensor-data QoS): the last measured real position, for the
  max-step check and the hold;
- subscribes ``~/heartbeat`` (std_msgs/Empty): commander liveness, re-arms the gate;
- publishes ``topics.sim_output`` and ``topics.real_output`` (defaults
  ``sim/joint_trajectory`` and ``real/joint_trajectory``; reliable): the input message
  itself, unchanged (content and ``header.stamp``). The real side only gets commands
  the safety gate (``sim_real_bridge.commands.safety``) accepts, plus the hold described
  below. The three trajectory topics must resolve to three different names (else the
  mirror would feed itself, or refused commands meant for the simulator would reach
  the robot), checked at startup;
- publishes ``bridge/refusals`` (sim_real_bridge/msg/GapEvent): one event per refused
  command. ``category`` is empty (a refusal is not a sim-to-real gap), ``kind`` is
  ``command_refused:<reason>``, ``evidence`` holds reason, detail, topic, command
  stamp and whether the sim side got it;
- publishes ``/diagnostics`` at ``diagnostics_period_s``: counts of forwarded and
  refused commands (by reason), holds, bad input, and the heartbeat state.

Safety behaviour:

- A refused command never reaches the real robot. With ``forward_refused_to_sim`` it
  still reaches the simulator (unless it is structurally unusable: malformed,
  non-finite or naming unknown joints) so the refusal shows up as divergence.
- When the heartbeat deadline passes, the real robot is sent once a hold: a single
  point at its last measured position (joints with limits only), zero velocity,
  ``time_from_start`` 0. ``hold_on_timeout: false`` turns this off at startup.
- Parameters may change at run time only toward safety, else the change is refused
  with a reason: limits may be narrowed within the startup (hard) limits, never
  widened; ``max_step_rad`` and ``heartbeat_timeout_s`` may only decrease;
  ``rearm_commands`` may only increase or become 0; ``hold_on_timeout`` may not be
  switched off; ``joint_names``, ``diagnostics_period_s`` and the ``topics.*`` names
  are fixed.
- Bad input never raises out of a callback: it is counted by reason, reported in
  /diagnostics and logged once per (topic, reason).
- With no limits configured (empty ``joint_names``) every command is refused for the
  real robot (``unknown_joint``): the gate fails closed.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import rclpy
from diagnostic_msgs.msg import KeyValue
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.exceptions import ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import JointState
from std_msgs.msg import Empty
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from sim_real_bridge.commands import safety
from sim_real_bridge.commands.safety import GateConfig, JointLimits, SafetyGate, TrajectoryPoints
from sim_real_bridge.errors import ConfigError
from sim_real_bridge.msg import GapEvent
from sim_real_bridge.ros import diagnostics
from sim_real_bridge.ros.diagnostics import DiagnosticsPublisher, InputProblems
from sim_real_bridge.ros.qos import COMMAND_QOS, OUTPUT_QOS, SENSOR_QOS
from sim_real_bridge.ros.spinning import run_node

NODE_NAME = "command_mirror"
REFUSAL_KIND_PREFIX = "command_refused:"
HEARTBEAT_POLL_PERIOD_S = 0.02

_LIMIT_PARAMS = ("joint_names", "position_lower_rad", "position_upper_rad", "velocity_max_rad_s")
#: Topic-name parameters and their defaults (relative, so namespaces and remapping apply).
TOPIC_PARAMS: dict[str, str] = {
    "topics.input": "bridge/joint_trajectory",
    "topics.sim_output": "sim/joint_trajectory",
    "topics.real_output": "real/joint_trajectory",
    "topics.real_joint_states": "real/joint_states",
}
_TOPIC_DESCRIPTIONS = {
    "topics.input": "JointTrajectory input, the only command source.",
    "topics.sim_output": "JointTrajectory output to the simulator.",
    "topics.real_output": "JointTrajectory output to the real robot (safety-gated).",
    "topics.real_joint_states": "JointState of the real robot (measured position).",
}
_FIXED_PARAMS = ("joint_names", "diagnostics_period_s", *TOPIC_PARAMS)
_NS_PER_S = 1_000_000_000

# Bad-input reasons for joint_states (commands use the gate's reasons).
BAD_STATE_LENGTH = "length_mismatch"
BAD_STATE_NON_FINITE = "non_finite"


def trajectory_points(msg: Any) -> TrajectoryPoints:
    """The points of a JointTrajectory as plain sequences (duck-typed on field names)."""
    return TrajectoryPoints(
        positions_rad=[list(p.positions) for p in msg.points],
        velocities_rad_s=[list(p.velocities) for p in msg.points],
        time_from_start_ns=[
            int(p.time_from_start.sec) * _NS_PER_S + int(p.time_from_start.nanosec)
            for p in msg.points
        ],
    )


def _stamp_ns(stamp: Any) -> int:
    return int(stamp.sec) * _NS_PER_S + int(stamp.nanosec)


class CommandMirror(Node):
    """Mirrors commands to the simulator and, through the safety gate, to the robot."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self._declare_parameters()
        values = {name: self._param(name) for name in self._param_names}
        self._hard_limits, self._hard_config = self._build(values)
        self._values = values
        self._gate = SafetyGate(self._hard_limits, self._hard_config)
        self._measured_q: Optional[dict[str, float]] = None
        self._forwarded_sim = 0
        self._forwarded_real = 0
        self._refused = {reason: 0 for reason in safety.REFUSAL_REASONS}
        self._refused_since_report = 0
        self._holds_sent = 0
        self._last_refusal = ""
        self._problems = InputProblems()
        self._logged_refusals: set[str] = set()
        self._problems_reported = 0

        topics = self._resolve_topics(values)
        self._sim_pub = self.create_publisher(
            JointTrajectory, values["topics.sim_output"], COMMAND_QOS
        )
        self._real_pub = self.create_publisher(
            JointTrajectory, values["topics.real_output"], COMMAND_QOS
        )
        self._refusal_pub = self.create_publisher(GapEvent, "bridge/refusals", OUTPUT_QOS)
        self._command_sub = self.create_subscription(
            JointTrajectory, values["topics.input"], self._on_command, COMMAND_QOS
        )
        self._state_sub = self.create_subscription(
            JointState, values["topics.real_joint_states"], self._on_joint_states, SENSOR_QOS
        )
        self.get_logger().info(
            f"mirroring {topics['topics.input']} to {topics['topics.sim_output']} and "
            f"(gated) {topics['topics.real_output']}; measured state from "
            f"{topics['topics.real_joint_states']}"
        )
        self._heartbeat_sub = self.create_subscription(
            Empty, "~/heartbeat", self._on_heartbeat, COMMAND_QOS
        )
        self._poll_timer = self.create_timer(HEARTBEAT_POLL_PERIOD_S, self._poll_heartbeat)
        self._diagnostics = DiagnosticsPublisher(self, values["diagnostics_period_s"])
        self._diagnostics.add(self._status)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        if len(self._hard_limits) == 0:
            self.get_logger().warning(
                "no joint limits configured (joint_names is empty): every command to "
                "the real robot will be refused; load config/robot_limits.yaml"
            )

    @property
    def topics(self) -> dict[str, str]:
        """Resolved (namespaced, remapped) name of each ``topics.*`` parameter."""
        return {
            "topics.input": self._command_sub.topic_name,
            "topics.sim_output": self._sim_pub.topic_name,
            "topics.real_output": self._real_pub.topic_name,
            "topics.real_joint_states": self._state_sub.topic_name,
        }

    @property
    def gate_state(self) -> str:
        """Heartbeat state of the gate: idle, armed or tripped."""
        return self._gate.state

    @property
    def measured_q_rad(self) -> Optional[dict[str, float]]:
        """Last measured real position by joint name (a copy), or None before any."""
        return None if self._measured_q is None else dict(self._measured_q)

    # --- parameters ----------------------------------------------------------------

    def _declare_parameters(self) -> None:
        def describe(text: str) -> ParameterDescriptor:
            return ParameterDescriptor(description=text)

        self.declare_parameter(
            "joint_names", Parameter.Type.STRING_ARRAY, describe("Joints with limits.")
        )
        self.declare_parameter(
            "position_lower_rad", Parameter.Type.DOUBLE_ARRAY,
            describe("Lower position limit per joint (rad)."),
        )
        self.declare_parameter(
            "position_upper_rad", Parameter.Type.DOUBLE_ARRAY,
            describe("Upper position limit per joint (rad)."),
        )
        self.declare_parameter(
            "velocity_max_rad_s", Parameter.Type.DOUBLE_ARRAY,
            describe("Maximum speed per joint (rad/s)."),
        )
        self.declare_parameter(
            "max_step_rad", 0.5,
            describe("Largest distance of a command's first point from the measured position."),
        )
        self.declare_parameter(
            "heartbeat_timeout_s", 1.0,
            describe("Longest commander silence (after a trajectory's end) before a hold."),
        )
        self.declare_parameter(
            "rearm_commands", 2,
            describe("Timely commands in a row that re-arm a tripped gate; 0: heartbeats only."),
        )
        self.declare_parameter(
            "hold_on_timeout", True,
            describe("On heartbeat timeout, command the real robot to hold its measured position."),
        )
        self.declare_parameter(
            "forward_refused_to_sim", False,
            describe("Send refused (well-formed) commands to the simulator anyway."),
        )
        self.declare_parameter(
            "diagnostics_period_s", 1.0, describe("Period of /diagnostics publication.")
        )
        for name, default in TOPIC_PARAMS.items():
            self.declare_parameter(
                name, default, describe(_TOPIC_DESCRIPTIONS[name] + " Fixed at startup.")
            )
        self._param_names = (
            *_LIMIT_PARAMS, "max_step_rad", "heartbeat_timeout_s", "rearm_commands",
            "hold_on_timeout", "forward_refused_to_sim", "diagnostics_period_s",
            *TOPIC_PARAMS,
        )

    def _param(self, name: str) -> Any:
        if name in _LIMIT_PARAMS:
            try:
                value = self.get_parameter(name).value
            except ParameterUninitializedException:
                return []  # no limits file given: the gate fails closed
            return list(value) if value is not None else []
        return self.get_parameter(name).value

    def _resolve_topics(self, values: dict[str, Any]) -> dict[str, str]:
        """Fully qualified, remapped name of each topic parameter.

        Raises:
            ConfigError: A name is not a valid topic name, or two of the trajectory
                topics resolve to the same name.
        """
        resolved: dict[str, str] = {}
        for name in TOPIC_PARAMS:
            value = values[name]
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{name} must be a non-empty topic name, got {value!r}")
            try:
                resolved[name] = self.resolve_topic_name(value)
            except RuntimeError as error:  # rclpy's RCLError: the name is invalid
                raise ConfigError(
                    f"{name} is not a valid topic name ({value!r}): {error}"
                ) from None
        trajectory = ("topics.input", "topics.sim_output", "topics.real_output")
        for index, first in enumerate(trajectory):
            for second in trajectory[index + 1:]:
                if resolved[first] == resolved[second]:
                    raise ConfigError(
                        f"{first} and {second} both resolve to {resolved[first]}; the "
                        "command input and the two outputs must be different topics"
                    )
        return resolved

    @staticmethod
    def _build(values: dict[str, Any]) -> tuple[JointLimits, GateConfig]:
        limits = JointLimits(
            values["joint_names"],
            values["position_lower_rad"],
            values["position_upper_rad"],
            values["velocity_max_rad_s"],
        )
        config = GateConfig(
            max_step_rad=values["max_step_rad"],
            heartbeat_timeout_s=values["heartbeat_timeout_s"],
            rearm_commands=values["rearm_commands"],
        )
        period = values["diagnostics_period_s"]
        if not (isinstance(period, float) and math.isfinite(period) and period > 0.0):
            raise ConfigError(f"diagnostics_period_s must be a positive number, got {period}")
        return limits, config

    def _unsafe_change(self, new: dict[str, Any], limits: JointLimits, config: GateConfig) -> str:
        """Why ``new`` is less safe than the startup configuration ('' if it is not)."""
        for name in _FIXED_PARAMS:
            if new[name] != self._values[name]:
                return f"{name} cannot change at run time"
        loosened = limits.loosened_from(self._hard_limits)
        if loosened:
            return "limits may only be narrowed at run time: " + "; ".join(loosened)
        hard = self._hard_config
        if config.max_step_rad > hard.max_step_rad:
            return f"max_step_rad may not exceed its startup value {hard.max_step_rad}"
        if config.heartbeat_timeout_s > hard.heartbeat_timeout_s:
            return (
                f"heartbeat_timeout_s may not exceed its startup value {hard.heartbeat_timeout_s}"
            )
        if config.rearm_commands != 0 and (
            hard.rearm_commands == 0 or config.rearm_commands < hard.rearm_commands
        ):
            return f"rearm_commands may only increase from {hard.rearm_commands} or become 0"
        if self._values["hold_on_timeout"] and not new["hold_on_timeout"]:
            return "hold_on_timeout cannot be switched off at run time"
        return ""

    def _on_set_parameters(self, params: list[Parameter]) -> SetParametersResult:
        new = dict(self._values)
        for param in params:
            if param.name in new:
                value = param.value
                new[param.name] = list(value) if param.name in _LIMIT_PARAMS else value
        if new == self._values:
            return SetParametersResult(successful=True)
        try:
            limits, config = self._build(new)
        except ConfigError as error:
            return self._refuse_change(str(error))
        reason = self._unsafe_change(new, limits, config)
        if reason:
            return self._refuse_change(reason)
        self._values = new
        self._gate.reconfigure(limits, config)
        self.get_logger().info("safety parameters updated")
        return SetParametersResult(successful=True)

    def _refuse_change(self, reason: str) -> SetParametersResult:
        self.get_logger().warning(f"refused parameter change: {reason}")
        return SetParametersResult(successful=False, reason=reason)

    # --- callbacks -----------------------------------------------------------------

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _on_command(self, msg: JointTrajectory) -> None:
        now_ns = self._now_ns()
        try:
            points = trajectory_points(msg)
            names = list(msg.joint_names)
        except (AttributeError, TypeError, ValueError) as error:
            decision = safety.GateDecision(False, safety.REASON_MALFORMED, str(error))
        else:
            decision = self._gate.check(names, points, self._measured_q, now_ns)
        if decision.tripped:
            self._on_trip()
        if decision.accepted:
            self._sim_pub.publish(msg)
            self._real_pub.publish(msg)
            self._forwarded_sim += 1
            self._forwarded_real += 1
            return
        to_sim = (
            self._values["forward_refused_to_sim"]
            and decision.reason not in safety.STRUCTURAL_REASONS
        )
        if to_sim:
            self._sim_pub.publish(msg)
            self._forwarded_sim += 1
        self._record_refusal(msg, decision, to_sim)

    def _record_refusal(self, msg: Any, decision: safety.GateDecision, to_sim: bool) -> None:
        self._refused[decision.reason] += 1
        self._refused_since_report += 1
        self._last_refusal = f"{decision.reason}: {decision.detail}"
        topic = self._command_sub.topic_name
        if decision.reason not in self._logged_refusals:
            self._logged_refusals.add(decision.reason)
            self.get_logger().warning(
                f"refused a command on {topic} for the real robot ({decision.reason}): "
                f"{decision.detail}; further refusals for this reason are only counted"
            )
        now = self.get_clock().now().to_msg()
        event = GapEvent()
        event.header.stamp = now
        event.id = f"refusal-{sum(self._refused.values())}"
        event.category = ""
        event.kind = REFUSAL_KIND_PREFIX + decision.reason
        event.severity = 1.0
        event.start = now
        event.end = now
        event.open = False
        stamp = getattr(getattr(msg, "header", None), "stamp", None)
        event.evidence = [
            KeyValue(key="reason", value=decision.reason),
            KeyValue(key="detail", value=decision.detail),
            KeyValue(key="topic", value=topic),
            KeyValue(key="command_stamp_ns", value=str(_stamp_ns(stamp)) if stamp else ""),
            KeyValue(key="forwarded_to_sim", value=str(to_sim).lower()),
        ]
        self._refusal_pub.publish(event)

    def _on_joint_states(self, msg: JointState) -> None:
        topic = self._state_sub.topic_name
        if len(msg.name) != len(msg.position):
            self._bad_input(topic, BAD_STATE_LENGTH, f"{len(msg.name)} names, "
                            f"{len(msg.position)} positions")
            return
        if not all(math.isfinite(q) for q in msg.position):
            self._bad_input(topic, BAD_STATE_NON_FINITE, "non-finite position")
            return
        measured = dict(self._measured_q or {})
        measured.update(zip(msg.name, (float(q) for q in msg.position)))
        self._measured_q = measured

    def _bad_input(self, topic: str, reason: str, detail: str) -> None:
        if self._problems.record(topic, reason):
            self.get_logger().warning(
                f"ignoring bad input on {topic} ({reason}): {detail}; "
                "further occurrences are only counted"
            )

    def _on_heartbeat(self, _msg: Empty) -> None:
        self._gate.heartbeat(self._now_ns())

    def _poll_heartbeat(self) -> None:
        if self._gate.poll(self._now_ns()):
            self._on_trip()

    def _on_trip(self) -> None:
        timeout = self._gate.config.heartbeat_timeout_s
        if not self._values["hold_on_timeout"]:
            self.get_logger().warning(f"heartbeat timed out ({timeout} s); hold disabled")
            return
        names = [n for n in self._gate.limits.names if n in (self._measured_q or {})]
        if not names:
            self.get_logger().error(
                f"heartbeat timed out ({timeout} s) but no measured real position to hold"
            )
            return
        hold = JointTrajectory()
        hold.header.stamp = self.get_clock().now().to_msg()
        hold.joint_names = names
        point = JointTrajectoryPoint()
        point.positions = [self._measured_q[n] for n in names]
        point.velocities = [0.0] * len(names)
        hold.points = [point]
        self._real_pub.publish(hold)
        self._holds_sent += 1
        self.get_logger().warning(
            f"heartbeat timed out ({timeout} s): real robot told to hold its measured position"
        )

    # --- diagnostics ---------------------------------------------------------------

    def _status(self):
        state = self._gate.state
        new_problems = self._problems.count() - self._problems_reported
        if state == safety.STATE_TRIPPED:
            level, message = diagnostics.ERROR, "heartbeat timed out: commands to the robot refused"
        elif self._refused_since_report or new_problems:
            level = diagnostics.WARN
            message = f"{self._refused_since_report} commands refused since last report"
        elif state == safety.STATE_IDLE:
            level, message = diagnostics.OK, "waiting for the first command"
        else:
            level, message = diagnostics.OK, "forwarding"
        values: dict[str, Any] = {
            "gate_state": state,
            "forwarded_sim": self._forwarded_sim,
            "forwarded_real": self._forwarded_real,
            "refused_total": sum(self._refused.values()),
        }
        values.update({f"refused.{reason}": n for reason, n in self._refused.items()})
        values.update(
            {
                "holds_sent": self._holds_sent,
                "last_refusal": self._last_refusal,
                "measured_joints": len(self._measured_q or {}),
                "heartbeat_timeout_s": self._gate.config.heartbeat_timeout_s,
                "input_topic": self._command_sub.topic_name,
                "sim_output_topic": self._sim_pub.topic_name,
                "real_output_topic": self._real_pub.topic_name,
                "real_joint_states_topic": self._state_sub.topic_name,
            }
        )
        values.update(self._problems.as_values())
        self._refused_since_report = 0
        self._problems_reported = self._problems.count()
        return diagnostics.make_status(f"{NODE_NAME}: safety gate", level, message, values)


def main(args: Optional[list[str]] = None) -> None:
    """Run the node until Ctrl-C or shutdown; exit with status 2 on invalid parameters."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    raise SystemExit(run_node(CommandMirror, NODE_NAME))


if __name__ == "__main__":
    main()
