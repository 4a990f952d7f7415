"""task_player: plays a built-in command program (reach, wipe, push, tour) as JointTrajectory.

Topics (relative names; the demo remaps ``bridge/joint_trajectory`` to the command
mirror's input):

- publishes ``bridge/joint_trajectory`` (trajectory_msgs/JointTrajectory, reliable):
  one trajectory per segment of the program (a task cycle, or an ``idle`` hold through
  one of the scenario's idle windows; each starts and ends at the home pose). Segments
  are timed by the program itself (``sim.schedule.ProgramSchedule``): a segment starts
  where the previous one ends by its own ``time_from_start``; it is sent ``start_lead_s``
  before that and stamped with it, so the simulated and the real robot start it at the
  same instant from home (joint_trajectory_controller honours a start stamp in the
  future). When this node runs late (a loaded machine delays its timer) the segment
  starts ``start_lead_s`` after it is sent instead and the rest of the program slips by
  as much (logged, ``slip_s``): no stamp is ever in the past, so no robot is told to be
  mid-trajectory already, a jump the command mirror's safety gate would refuse. Points
  carry positions and velocities;
- publishes ``heartbeat_topic`` (std_msgs/Empty) every ``heartbeat_period_s`` while the
  program runs (the command mirror's liveness input).

Parameters: ``scenario`` (its ``task``, ``duration_s``, ``robot`` and ``idle`` windows are
used unless ``task`` / ``duration_s`` / ``robot`` are set), ``wait_for_nodes`` (start once each
of these nodes, by default ``command_mirror``, subscribes to the command topic or to one of
``wait_for_topics``, so that the first command sent is the first one mirrored: scenario
time starts there; the demo graph adds ``divergence_monitor``, whose run clock starts at
the first command it hears), ``wait_for_topics`` (and until each
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
from sim_real_bridge.sim.schedule import DueSegment, ProgramSchedule
from sim_real_bridge.sim.tasks import TASKS, build_program

NODE_NAME = "task_player"
_NS_PER_S = 1_000_000_000
#: A late send beyond this is logged as a warning.
_SLIP_LOG_NS = 20_000_000


class TaskPlayerNode(Node):
    """Sends the cycles of a command program at their offsets from the first send."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)

        self._declare_parameters()
        scenario = load_scenario(str(self.get_parameter("scenario").value),
                                 robot=str(self.get_parameter("robot").value) or None)
        task = str(self.get_parameter("task").value) or scenario.task
        duration_s = float(self.get_parameter("duration_s").value) or scenario.duration_s
        if task not in TASKS:
            raise ConfigError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
        self.program = build_program(task, duration_s, scenario.robot, scenario.idle)
        self._start_delay_ns = int(float(self.get_parameter("start_delay_s").value) * _NS_PER_S)
        self._start_lead_ns = int(float(self.get_parameter("start_lead_s").value) * _NS_PER_S)
        if self._start_lead_ns < 0:
            raise ConfigError(f"start_lead_s must be >= 0, got {self._start_lead_ns / _NS_PER_S}")
        self.schedule = ProgramSchedule(self.program, self._start_lead_ns)
        self._wait_for_nodes = [str(n) for n in self.get_parameter("wait_for_nodes").value if str(n)]
        self._wait_for_topics = [str(t) for t in self.get_parameter("wait_for_topics").value if str(t)]
        self._publisher = self.create_publisher(JointTrajectory, "bridge/joint_trajectory", COMMAND_QOS)
        topic = str(self.get_parameter("heartbeat_topic").value)
        self._heartbeat_pub = self.create_publisher(Empty, topic, COMMAND_QOS) if topic else None
        self._ready_ns: int | None = None
        self._first_start_ns = 0
        self.sent = 0
        self._timer = self.create_timer(0.005, self._on_tick)
        self._heartbeat_timer = self.create_timer(
            float(self.get_parameter("heartbeat_period_s").value), self._on_heartbeat
        )
        self.get_logger().info(
            f"task {task!r} on {scenario.robot} for {duration_s:.1f} s: {len(self.program.segments)} segment(s) "
            f"({', '.join(p.name for p in self.program.phases)}) on {self._publisher.topic_name}"
        )

    def _declare_parameters(self) -> None:
        def describe(text: str) -> ParameterDescriptor:
            return ParameterDescriptor(description=text)

        self.declare_parameter("scenario", "nominal", describe("Scenario whose task and duration are played."))
        self.declare_parameter("task", "", describe(f"Program to play ({', '.join(TASKS)}); empty: the scenario's."))
        self.declare_parameter("duration_s", 0.0, describe("Program length, s; 0: the scenario's duration_s."))
        self.declare_parameter("robot", "", describe("Built-in robot (arm7, ur6, panda7); empty: the scenario's."))
        self.declare_parameter(
            "wait_for_nodes", ["command_mirror"],
            describe("Start once each of these nodes subscribes to the command topic or to one of "
                     "wait_for_topics; empty: any subscriber of the command topic."),
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

    @property
    def slip_s(self) -> float:
        """How much the program has slipped behind its own timing because this node ran late, s."""
        return self.schedule.slip_ns / _NS_PER_S

    def _on_tick(self) -> None:
        now = self.get_clock().now().nanoseconds
        if now == 0:
            return  # no /clock yet
        if not self.schedule.started:
            if not self._consumer_present():
                return
            if self._ready_ns is None:
                self._ready_ns = now
            if now - self._ready_ns < self._start_delay_ns:
                return
            self.schedule.start(now)
        due = self.schedule.due(now)
        if due is not None:
            self._send(due)
        if self.schedule.finished and self._timer is not None:
            self.get_logger().info(f"program sent in full (slipped {self.slip_s:.3f} s behind its own timing)")
            self._timer.cancel()
            self._timer = None

    def _send(self, due: DueSegment) -> None:
        stamp_ns = due.start_ns if self._start_lead_ns else 0
        msg = robot_msgs.joint_trajectory_from_data(JointTrajectory, JointTrajectoryPoint, due.trajectory,
                                                    stamp_ns=stamp_ns)
        self._publisher.publish(msg)
        self.sent += 1
        if due.slip_ns > _SLIP_LOG_NS:
            self.get_logger().warning(
                f"ran {due.slip_ns / _NS_PER_S:.3f} s late: segment {due.index + 1} starts that much later "
                f"(program {self.slip_s:.3f} s behind in all)"
            )
        if due.index == 0:
            self._first_start_ns = due.start_ns
        self.get_logger().info(
            f"segment {self.sent}: {due.phase} at t={(due.start_ns - self._first_start_ns) / _NS_PER_S:.1f} s"
        )

    def _consumer_present(self) -> bool:
        if any(self.count_subscribers(topic) == 0 for topic in self._wait_for_topics):
            return False
        if not self._wait_for_nodes:
            return self._publisher.get_subscription_count() > 0
        topics = [self._publisher.topic_name, *self._wait_for_topics]
        listening = {info.node_name for topic in topics for info in self.get_subscriptions_info_by_topic(topic)}
        return set(self._wait_for_nodes) <= listening

    @property
    def finished(self) -> bool:
        """Whether every segment has been sent."""
        return self.schedule.finished

    def _on_heartbeat(self) -> None:
        end_ns = self.schedule.end_ns
        if self._heartbeat_pub is None or end_ns is None:
            return
        if self.get_clock().now().nanoseconds <= end_ns:
            self._heartbeat_pub.publish(Empty())


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``task_player`` executable."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    raise SystemExit(run_node(TaskPlayerNode, NODE_NAME))


if __name__ == "__main__":
    main()
