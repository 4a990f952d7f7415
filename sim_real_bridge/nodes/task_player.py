"""task_player: plays a built-in command program (reach, wipe, push, tour) as JointTrajectory.

Topics (relative names; the demo remaps ``bridge/joint_trajectory`` to the command
mirror's input):

- publishes ``bridge/joint_trajectory`` (trajectory_msgs/JointTrajectory, reliable):
  one trajectory per cycle of the program (each starts and ends at the home pose; a
  cycle is sent when the previous one ends, so each new goal replaces a finished one);
  each header stamp is the cycle's scheduled time plus ``start_lead_s``, so the simulated
  and the real robot start a cycle at the same instant however late each receives it
  (joint_trajectory_controller honours a start stamp in the future); points carry
  positions and velocities;
- publishes ``heartbeat_topic`` (std_msgs/Empty) every ``heartbeat_period_s`` while the
  program runs (the command mirror's liveness input).

Parameters: ``scenario`` (its ``task`` and ``duration_s`` are used unless ``task`` /
``duration_s`` are set), ``wait_for_nodes`` (start once one of these nodes, by default
``command_mirror``, subscribes to the command topic, so that the first command sent is
the first one mirrored: scenario time starts there), ``wait_for_topics`` (and until each
of these topics has a subscriber: the demo graph lists both robots' command inputs, so
that neither misses the first command on a slow start), ``start_delay_s`` (then wait
this long, so that the robots have matched the mirror's outputs),
``heartbeat_topic``, ``heartbeat_period_s``. The program uses the node's clock, so
it follows /clock under ``use_sim_time``.
"""

from __future__ import annotations

from typing import Any

import rclpy
from rclpy.signals import SignalHandlerOptions
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from std_msgs.msg import Empty
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from sim_real_bridge.conversions import robot_msgs
from sim_real_bridge.errors import ConfigError
from sim_real_bridge.ros.qos import COMMAND_QOS
from sim_real_bridge.ros.spinning import run_node
from sim_real_bridge.sim.scenario import load_scenario
from sim_real_bridge.sim.tasks import TASKS, build_program

NODE_NAME = "task_player"
_NS_PER_S = 1_000_000_000


class TaskPlayerNode(Node):
    """Sends the cycles of a command program at their offsets from the first send."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)

        def describe(text: str) -> ParameterDescriptor:
            return ParameterDescriptor(description=text)

        self.declare_parameter("scenario", "nominal", describe("Scenario whose task and duration are played."))
        self.declare_parameter("task", "", describe(f"Program to play ({', '.join(TASKS)}); empty: the scenario's."))
        self.declare_parameter("duration_s", 0.0, describe("Program length, s; 0: the scenario's duration_s."))
        self.declare_parameter(
            "wait_for_nodes", ["command_mirror"],
            describe("Start once one of these nodes subscribes to the command topic; empty: any subscriber."),
        )
        self.declare_parameter(
            "wait_for_topics", [""],
            describe("Also wait until each of these topics has a subscriber (the robots' command inputs behind "
                     "the mirror, so that none misses the first command on a slow start); empty: none."),
        )
        # Seen by this node is not yet matched by the mirror's writers: on a loaded machine
        # discovery took over 2 s and a robot missed the first command.
        self.declare_parameter("start_delay_s", 4.0, describe("Wait after those subscribers appear, s."))
        self.declare_parameter(
            "heartbeat_topic", "/command_mirror/heartbeat", describe("std_msgs/Empty liveness topic; empty: none.")
        )
        self.declare_parameter("heartbeat_period_s", 0.2, describe("Heartbeat period, s."))
        self.declare_parameter(
            "start_lead_s", 0.1,
            describe("Each trajectory is stamped to start this long after it is sent, s (0: start on receipt)."),
        )
        scenario = load_scenario(str(self.get_parameter("scenario").value))
        task = str(self.get_parameter("task").value) or scenario.task
        duration_s = float(self.get_parameter("duration_s").value) or scenario.duration_s
        if task not in TASKS:
            raise ConfigError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
        self.program = build_program(task, duration_s)
        self._segments = list(self.program.segments)
        self._start_delay_ns = int(float(self.get_parameter("start_delay_s").value) * _NS_PER_S)
        self._start_lead_ns = int(float(self.get_parameter("start_lead_s").value) * _NS_PER_S)
        if self._start_lead_ns < 0:
            raise ConfigError(f"start_lead_s must be >= 0, got {self._start_lead_ns / _NS_PER_S}")
        self._wait_for_nodes = [str(n) for n in self.get_parameter("wait_for_nodes").value if str(n)]
        self._wait_for_topics = [str(t) for t in self.get_parameter("wait_for_topics").value if str(t)]
        self._publisher = self.create_publisher(JointTrajectory, "bridge/joint_trajectory", COMMAND_QOS)
        topic = str(self.get_parameter("heartbeat_topic").value)
        self._heartbeat_pub = self.create_publisher(Empty, topic, COMMAND_QOS) if topic else None
        self._ready_ns: int | None = None
        self._start_ns: int | None = None
        self.sent = 0
        self._timer = self.create_timer(0.005, self._on_tick)
        self._heartbeat_timer = self.create_timer(
            float(self.get_parameter("heartbeat_period_s").value), self._on_heartbeat
        )
        self.get_logger().info(
            f"task {task!r} for {duration_s:.1f} s: {len(self._segments)} cycle(s) "
            f"({', '.join(p.name for p in self.program.phases)}) on {self._publisher.topic_name}"
        )

    def _on_tick(self) -> None:
        now = self.get_clock().now().nanoseconds
        if now == 0:
            return  # no /clock yet
        if self._start_ns is None:
            if not self._consumer_present():
                return
            if self._ready_ns is None:
                self._ready_ns = now
            if now - self._ready_ns < self._start_delay_ns:
                return
            self._start_ns = now
        while self._segments and self._start_ns + self._segments[0][0] <= now:
            offset_ns, trajectory = self._segments.pop(0)
            # Scheduled time, not the send time: the robots then stay in step even when
            # this timer or delivery runs late on a loaded machine.
            stamp_ns = self._start_ns + offset_ns + self._start_lead_ns if self._start_lead_ns else 0
            msg = robot_msgs.joint_trajectory_from_data(
                JointTrajectory, JointTrajectoryPoint, trajectory, stamp_ns=stamp_ns
            )
            self._publisher.publish(msg)
            self.sent += 1
            phase = self.program.phases[self.sent - 1]
            self.get_logger().info(f"cycle {self.sent}: {phase.name} at t={offset_ns / _NS_PER_S:.1f} s")
        if not self._segments and self._timer is not None:
            self.get_logger().info("program sent in full")
            self._timer.cancel()

    def _consumer_present(self) -> bool:
        if any(self.count_subscribers(topic) == 0 for topic in self._wait_for_topics):
            return False
        if not self._wait_for_nodes:
            return self._publisher.get_subscription_count() > 0
        infos = self.get_subscriptions_info_by_topic(self._publisher.topic_name)
        return any(info.node_name in self._wait_for_nodes for info in infos)

    @property
    def finished(self) -> bool:
        """Whether every cycle has been sent."""
        return not self._segments

    def _on_heartbeat(self) -> None:
        if self._heartbeat_pub is None or self._start_ns is None:
            return
        end_ns = self._start_ns + self.program.duration_ns
        if self.get_clock().now().nanoseconds <= end_ns:
            self._heartbeat_pub.publish(Empty())


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``task_player`` executable."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    raise SystemExit(run_node(TaskPlayerNode, NODE_NAME))


if __name__ == "__main__":
    main()
