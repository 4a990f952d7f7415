"""sim_robot: a built-in MuJoCo arm, driven like a ros2_control joint_trajectory_controller.

The robot is ``robot`` (arm7, ur6, panda7), or the ``scenario``'s robot when ``robot`` is
empty, or the MJCF at ``model_path`` when set.

Topics (relative names; the demo runs it in namespace ``/sim``):

- subscribes ``~/joint_trajectory`` (trajectory_msgs/JointTrajectory, reliable): a new
  goal replaces the old one, from the current commanded state; ``time_from_start`` is
  honoured; a zero header stamp means "start on receipt";
- publishes ``joint_states`` (sensor_msgs/JointState), ``wrench``
  (geometry_msgs/WrenchStamped in frame ``ft_frame`` at the wrist sensor), ``ee_pose``
  and ``object_pose`` (geometry_msgs/PoseStamped in ``world_frame``), at their rates (a
  stream whose rate is 0 gets no publisher);
- publishes ``~/realtime_factor`` (std_msgs/Float64) every ``realtime_factor_period_s``:
  simulated time over wall time since the first step (1.0 = real time);
- publishes ``/clock`` (rosgraph_msgs/Clock) when ``use_sim_time`` and ``publish_clock``
  are both true;
- publishes ``/diagnostics``: real-time factor, steps, commands, bad commands by reason.

Physics steps at 1 kHz. Without ``use_sim_time`` it keeps pace with the wall clock
(steps owed are caught up on each tick, so the factor stays 1.0 while the CPU keeps
up). With ``use_sim_time`` and ``publish_clock`` it is the clock: it runs at
``sim_speed`` times real time (0 = as fast as it can). With ``use_sim_time`` and not
``publish_clock`` it follows /clock from another node. Stamps are the ROS time of the
physics step that produced each sample.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import rclpy
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticStatus
from geometry_msgs.msg import PoseStamped, WrenchStamped
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.clock import Clock, ClockType
from rclpy.signals import SignalHandlerOptions
from rclpy.node import Node
from rosgraph_msgs.msg import Clock as ClockMsg
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64
from trajectory_msgs.msg import JointTrajectory

from sim_real_bridge.conversions import robot_msgs
from sim_real_bridge.errors import ConfigError, SimulationError, TrajectoryError
from sim_real_bridge.ros import diagnostics
from sim_real_bridge.ros.diagnostics import DiagnosticsPublisher, InputProblems
from sim_real_bridge.ros.qos import COMMAND_QOS, STREAM_PUB_QOS
from sim_real_bridge.ros.spinning import run_node
from sim_real_bridge.sim.physics import ArmPhysics
from sim_real_bridge.sim.reality import RealityModel, StreamSample
from sim_real_bridge.sim.robot import DEFAULT_RATES_HZ, SimulatedRobot
from sim_real_bridge.sim.scenario import load_scenario

NODE_NAME = "sim_robot"
_NS_PER_S = 1_000_000_000


class SimRobotNode(Node):
    """The simulated robot node; ``reality_standin`` subclasses it with a RealityModel.

    Args:
        node_name: ROS node name.
        publish_clock_default: default of the ``publish_clock`` parameter.
        **kwargs: passed to ``rclpy.node.Node``.
    """

    def __init__(self, node_name: str = NODE_NAME, publish_clock_default: bool = True, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        self._declare_parameters(publish_clock_default)
        self._read_pacing_parameters()
        self.scenario = load_scenario(str(self.get_parameter("scenario").value),
                                      robot=str(self.get_parameter("robot").value) or None)
        physics = ArmPhysics(self.get_parameter("model_path").value or None, robot=self.scenario.robot)
        rates = {s: float(self.get_parameter(f"{s}_rate_hz").value) for s in DEFAULT_RATES_HZ}
        self.robot = SimulatedRobot(physics, rates_hz=rates, reality=self.make_reality(physics))
        self._joint_names = list(physics.joint_names)
        self._problems = InputProblems()
        self._commands = 0
        self._instabilities = 0
        self._create_topics()
        self._prepare_physics_thread()
        self._diagnostics = DiagnosticsPublisher(self, float(self.get_parameter("diagnostics_period_s").value))
        self._diagnostics.add(self._physics_status)
        mode = "clock source" if self._is_clock else ("following /clock" if self._use_sim_time else "wall clock")
        self.get_logger().info(
            f"{self.get_name()}: MuJoCo robot {physics.robot_name or '(custom)'} ({physics.model_path.name}), "
            f"physics 1 kHz, {mode}, streams {list(self._stream_pubs)}, commands on {self._trajectory_topic}"
        )

    def _declare_parameters(self, publish_clock_default: bool) -> None:
        def describe(text: str) -> ParameterDescriptor:
            return ParameterDescriptor(description=text)

        for stream, rate in DEFAULT_RATES_HZ.items():
            self.declare_parameter(
                f"{stream}_rate_hz", rate, describe(f"Publish rate of {stream}, Hz (must divide 1000; 0 disables).")
            )
        self.declare_parameter(
            "scenario", "nominal",
            describe("Built-in scenario name (config/scenarios/) or scenario YAML path: its robot is simulated "
                     "when robot is empty."),
        )
        self.declare_parameter("robot", "", describe("Built-in robot (arm7, ur6, panda7); empty: the scenario's."))
        self.declare_parameter("model_path", "", describe("MJCF model; empty: the built-in robot's model."))
        self.declare_parameter("world_frame", "world", describe("frame_id of ee_pose and object_pose."))
        self.declare_parameter("ft_frame", "ft_sensor", describe("frame_id of wrench (the wrist sensor site)."))
        self.declare_parameter("tick_period_s", 0.004, describe("Wall-clock period of the physics thread's loop, s."))
        self.declare_parameter("max_steps_per_tick", 200, describe("Most physics steps (1 ms) taken in one tick."))
        self.declare_parameter(
            "publish_clock", publish_clock_default,
            describe("With use_sim_time: publish /clock from physics time (else follow /clock)."),
        )
        self.declare_parameter(
            "sim_speed", 1.0,
            describe("With use_sim_time and publish_clock: sim seconds per wall second (0: as fast as possible)."),
        )
        self.declare_parameter("realtime_factor_period_s", 1.0, describe("Period of ~/realtime_factor, s."))
        self.declare_parameter("diagnostics_period_s", 1.0, describe("Period of /diagnostics, s."))

    def _read_pacing_parameters(self) -> None:
        """Frames, tick period, step cap and the clock mode (see the module docstring).

        Raises:
            ConfigError: a period, step cap or speed out of range.
        """
        self._world_frame = str(self.get_parameter("world_frame").value)
        self._ft_frame = str(self.get_parameter("ft_frame").value)
        self._max_steps = int(self.get_parameter("max_steps_per_tick").value)
        self._tick_period_s = float(self.get_parameter("tick_period_s").value)
        if self._tick_period_s <= 0 or self._max_steps < 1:
            raise ConfigError("tick_period_s must be > 0 and max_steps_per_tick >= 1")
        self._use_sim_time = bool(self.get_parameter("use_sim_time").value)
        self._is_clock = self._use_sim_time and bool(self.get_parameter("publish_clock").value)
        self._sim_speed = float(self.get_parameter("sim_speed").value) if self._is_clock else 1.0
        if self._sim_speed < 0:
            raise ConfigError(f"sim_speed must be >= 0, got {self._sim_speed}")

    def _create_topics(self) -> None:
        """A publisher per stream the robot has, ~/realtime_factor, /clock when it is the clock, commands in."""
        types = {"joint_states": JointState, "wrench": WrenchStamped, "ee_pose": PoseStamped, "object_pose": PoseStamped}
        self._stream_pubs = {
            stream: self.create_publisher(types[stream], stream, STREAM_PUB_QOS) for stream in self.robot.streams
        }
        self._rtf_pub = self.create_publisher(Float64, "~/realtime_factor", 10)
        self._clock_pub = self.create_publisher(ClockMsg, "/clock", 10) if self._is_clock else None
        self._trajectory_topic = self.resolve_topic_name("~/joint_trajectory")
        self._sub = self.create_subscription(JointTrajectory, "~/joint_trajectory", self._on_trajectory, COMMAND_QOS)

    def _prepare_physics_thread(self) -> None:
        """The physics thread and its clocks; it starts from the executor (see _start_physics)."""
        # Offset from physics time to ROS time (set on the first tick).
        self._t0_ns: int | None = None
        self._wall_start_ns: int | None = None
        self._sim_start_ns = self.robot.time_ns
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        # Physics runs on its own thread, paced by sleeping: an executor timer at 250 Hz
        # costs several times the stepping itself. Commands reach it under a lock.
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run_physics, name=f"{self.get_name()}_physics", daemon=True)
        # Started from the executor once every subclass __init__ has finished.
        self._start_timer = self.create_timer(0.001, self._start_physics, clock=self._steady)
        self._rtf_timer = self.create_timer(
            float(self.get_parameter("realtime_factor_period_s").value), self._publish_rtf, clock=self._steady
        )

    @property
    def input_problems(self) -> InputProblems:
        """Bad input counted by topic and reason (also in /diagnostics)."""
        return self._problems

    def make_reality(self, physics: ArmPhysics) -> RealityModel | None:
        """The reality model acting on ``physics`` (none: this is the simulator)."""
        return None

    # ---------------------------------------------------------------- time
    def ros_now_ns(self) -> int:
        """ROS time of the current physics state (0 before the first tick)."""
        return (self._t0_ns or 0) + self.robot.time_ns

    def physics_to_ros_ns(self, physics_ns: int) -> int:
        """ROS time of a physics time."""
        return (self._t0_ns or 0) + physics_ns

    @property
    def realtime_factor(self) -> float:
        """Simulated over wall time since the first tick (0.0 before two ticks)."""
        if self._wall_start_ns is None:
            return 0.0
        wall = time.monotonic_ns() - self._wall_start_ns
        return (self.robot.time_ns - self._sim_start_ns) / wall if wall > 0 else 0.0

    def _target_physics_ns(self) -> int | None:
        steady_ns = time.monotonic_ns()
        if self._t0_ns is None:
            if self._use_sim_time and not self._is_clock:
                ros_now = self.get_clock().now().nanoseconds
                if ros_now == 0:
                    return None  # no /clock yet
                self._t0_ns = ros_now - self.robot.time_ns
            elif self._is_clock:
                self._t0_ns = 0
            else:
                self._t0_ns = self.get_clock().now().nanoseconds - self.robot.time_ns
            self._wall_start_ns = steady_ns
            self._sim_start_ns = self.robot.time_ns
        if self._use_sim_time and not self._is_clock:
            return self.get_clock().now().nanoseconds - self._t0_ns
        if self._is_clock and self._sim_speed == 0:
            return self.robot.time_ns + self._max_steps * self.robot.physics.timestep_ns
        return self._sim_start_ns + int((steady_ns - self._wall_start_ns) * self._sim_speed)

    # ---------------------------------------------------------------- callbacks
    def _on_trajectory(self, msg: JointTrajectory) -> None:
        try:
            data = robot_msgs.joint_trajectory_to_data(msg)
            start_ns = None
            if data.start_ns > 0 and self._t0_ns is not None:
                start_ns = max(1, data.start_ns - self._t0_ns)
            with self._lock:
                first = self.robot.first_command_ns is None
                self.robot.command(data, start_ns=start_ns)
        except (TrajectoryError, ValueError, TypeError) as exc:
            reason = type(exc).__name__ if not isinstance(exc, TrajectoryError) else "bad_trajectory"
            if self._problems.record(self._trajectory_topic, reason):
                self.get_logger().warning(f"refused a trajectory on {self._trajectory_topic}: {exc}")
            return
        self._commands += 1
        if first:
            self.on_first_command()

    def on_first_command(self) -> None:
        """Called once, when the first trajectory is accepted (t = 0 of a scenario)."""
        self.get_logger().info("first command received: scenario time starts now")

    def _start_physics(self) -> None:
        self._start_timer.cancel()
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def _run_physics(self) -> None:
        next_s = time.monotonic()
        while not self._stop.is_set():
            try:
                self._on_tick()
            except Exception as exc:  # noqa: BLE001 - the context went away under us, or a bug
                if not self.context.ok() or self._stop.is_set():
                    return
                self.get_logger().error(f"physics loop stopped: {exc!r}")
                raise
            next_s += self._tick_period_s
            delay = next_s - time.monotonic()
            if delay < 0:  # behind: catch up on the next tick, never burst-sleep to zero
                next_s = time.monotonic()
                delay = 0.0
            self._stop.wait(delay)

    def destroy_node(self) -> None:
        """Stop the physics thread, then destroy the node."""
        if hasattr(self, "_thread"):  # absent when __init__ refused its parameters
            self._stop.set()
            if self._thread.is_alive() and threading.current_thread() is not self._thread:
                self._thread.join(timeout=5.0)
        super().destroy_node()

    def _on_tick(self) -> None:
        with self._lock:
            target = self._target_physics_ns()
            if target is None:
                return
            max_until = self.robot.time_ns + self._max_steps * self.robot.physics.timestep_ns
            try:
                samples = self.robot.advance(min(target, max_until))
            except SimulationError as exc:
                # Never crash on a numerical blow-up: report it, reset to home, carry on.
                self._instabilities += 1
                self.get_logger().error(f"{exc}; state reset to home (instability {self._instabilities})")
                self.robot.recover()
                return
        self.publish_samples(samples)
        if self._clock_pub is not None:
            clock = ClockMsg()
            clock.clock = _time_msg(self.ros_now_ns())
            self._clock_pub.publish(clock)
        self.after_tick()

    def after_tick(self) -> None:
        """Hook for subclasses, called after each tick's samples are published."""

    def publish_samples(self, samples: list[StreamSample]) -> None:
        """Convert samples to messages and publish them."""
        names = self._joint_names
        for sample in samples:
            stamp = max(0, self.physics_to_ros_ns(sample.stamp_ns))
            v = sample.values
            if sample.stream == "joint_states":
                msg = robot_msgs.joint_state_from_arrays(
                    JointState, stamp, names, v["position"], v["velocity"], v["effort"]
                )
            elif sample.stream == "wrench":
                msg = robot_msgs.wrench_from_arrays(WrenchStamped, stamp, self._ft_frame, v["force"], v["torque"])
            else:
                msg = robot_msgs.pose_from_arrays(
                    PoseStamped, stamp, self._world_frame, v["position"], v["orientation"]
                )
            self._stream_pubs[sample.stream].publish(msg)

    def _publish_rtf(self) -> None:
        if self._wall_start_ns is None:
            return
        self._rtf_pub.publish(Float64(data=float(self.realtime_factor)))

    def _physics_status(self) -> DiagnosticStatus:
        rtf = self.realtime_factor
        level = diagnostics.OK if rtf >= 0.98 or self._use_sim_time or self._wall_start_ns is None else diagnostics.WARN
        if self._instabilities:
            level = diagnostics.ERROR
        values = {
            "realtime_factor": rtf,
            "robot": self.robot.physics.robot_name or str(self.robot.physics.model_path),
            "sim_time_s": self.robot.time_ns / _NS_PER_S,
            "commands": self._commands,
            "instabilities": self._instabilities,
            "first_command": self.robot.first_command_ns is not None,
            **self._problems.as_values(),
        }
        values.update(self.extra_status_values())
        return diagnostics.make_status(
            f"{self.get_name()}: physics", level, f"real-time factor {rtf:.3f}", values
        )

    def extra_status_values(self) -> dict[str, Any]:
        """Additional key-values for /diagnostics (subclasses)."""
        return {}

    def log_summary(self) -> None:
        """Log the achieved real-time factor (called on shutdown)."""
        self.get_logger().info(
            f"{self.get_name()}: realtime_factor {self.realtime_factor:.4f} over "
            f"{(self.robot.time_ns - self._sim_start_ns) / _NS_PER_S:.1f} s simulated"
        )


def _time_msg(stamp_ns: int) -> Time:
    sec, nanosec = divmod(int(stamp_ns), _NS_PER_S)
    return Time(sec=sec, nanosec=nanosec)


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``sim_robot`` executable."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    raise SystemExit(run_node(SimRobotNode, NODE_NAME))


if __name__ == "__main__":
    main()
