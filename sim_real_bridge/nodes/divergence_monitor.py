"""divergence_monitor: both robots' streams in; divergence topics, events, snapshots out.

Subscribes (sensor-data QoS, through the message_filters API) to each side's
``joint_states`` and ``wrench`` and, where configured, ``ee_pose`` and
``object_pose``, plus the mirrored commands; feeds
:class:`~sim_real_bridge.core.engine.DivergenceEngine` and publishes what it finds:

- ``/divergence/joints`` (JointDivergence), ``/divergence/pose`` (PoseDivergence),
  ``/divergence/contact`` (ContactResidual) at the engine's output rates;
- ``/divergence/events`` (GapEvent) when an event opens and when it closes;
- ``/divergence/summary`` (DivergenceSummary) at ``summary_rate_hz``;
- ``/divergence/markers`` (MarkerArray) at ``markers_rate_hz``;
- ``/diagnostics``: one status per input stream, plus alignment and snapshots.

Each event gets an MCAP snapshot of its window and a line in ``events.jsonl`` under
``output_dir``; on shutdown the run summary is written to ``monitor_summary.json``.

Under load (a starved process, a busy machine) the monitor says how far behind it is
and degrades in a stated way instead of going silent:

- lag: now minus the newest grid time analysed (:mod:`~sim_real_bridge.core.lag`). It
  is on ``/diagnostics`` (status ``divergence_monitor: lag``: WARN above ``lag.warn_s``,
  0.5 s, ERROR above ``lag.error_s``, 2 s, judged on the largest lag since the previous
  report so that a stall between two reports is not missed), in every
  ``/divergence/summary`` (lag now, largest of the run, share of the run behind, grid
  times dropped) and in the run summary's ``load`` block.
- behind (lag above ``lag.warn_s``, until it is back under half of it): the node
  advances the analysis every ``lag.behind_tick_period_s`` (0.2 s, from the input thread
  or the timer, whichever holds the lock) instead of on each message that completes a
  grid time, so each step takes in and analyses a larger batch at once (the per-step
  costs dominate: about half the CPU per second of data). Every grid time is still
  analysed and published, in bursts at that reduced rate; event detection goes on.
- far behind (lag above the engine's ``max_backlog_s``, 2 s, while data comes in):
  newest data first. The backlog is dropped as one gap, counted (``dropped_grid_times``)
  and listed with its times in the run summary; the analysis resumes at the newest grid
  times. A backlog under that is caught up. Until caught up, queued inputs stamped
  before the grid time it resumed at (less 0.2 s) are skipped unread and counted
  (``inputs_skipped_behind``): they could only fill the gap.
- after a stall of the node itself (no tick for ``lag.away_s``), queued inputs are taken
  in (for up to 0.5 s) before the next analysis step, so the silence of the node is not
  judged as a silence of the robots' streams.
"""

from __future__ import annotations

import gc
import json
import os
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import rclpy
from diagnostic_msgs.msg import KeyValue
from geometry_msgs.msg import PoseStamped, WrenchStamped
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message, serialize_message
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory
from visualization_msgs import msg as viz_msgs

import sim_real_bridge.msg as srb_msgs
from sim_real_bridge.capture.bag_writer import BagWriter
from sim_real_bridge.capture.failure_capture import FailureCapture
from sim_real_bridge.capture.typestore import build_typestore
from sim_real_bridge.conversions import cdr
from sim_real_bridge.conversions import divergence_msgs as convert
from sim_real_bridge.conversions.robot_msgs import joint_state_to_arrays, pose_to_arrays, wrench_to_arrays
from sim_real_bridge.core import intake, validation
from sim_real_bridge.core.engine import DivergenceEngine, EngineConfig
from sim_real_bridge.core.events import ACTION_CLOSE, ACTION_OPEN, EventRecord
from sim_real_bridge.core.outputs import EngineOutput, JointColumns, PoseColumns
from sim_real_bridge.core.stream_status import StreamStatus
from sim_real_bridge.errors import ConfigError, SnapshotError
from sim_real_bridge.ros.diagnostics import ERROR, OK, STALE, WARN, DiagnosticsPublisher, make_status
from sim_real_bridge.ros.live_fits import LiveFits
from sim_real_bridge.ros.filters import message_filters
from sim_real_bridge.ros.input_thread import InputThread, take_queued
from sim_real_bridge.ros.qos import OUTPUT_QOS
from sim_real_bridge.ros.spinning import run_node

NODE_NAME = "divergence_monitor"
#: Where the input recording and snapshots keep the engine's tick times (log time = stamp = now).
TICKS_TOPIC = "/divergence_monitor/ticks"
TICKS_TYPE = "builtin_interfaces/msg/Time"
SUMMARY_FILE = "monitor_summary.json"
LEVELS = {0: OK, 1: WARN, 2: ERROR, 3: STALE}
#: After a stall, queued inputs are taken in for at most this long before the analysis
#: steps (what is left is taken in by the input thread; the streams are not silent then).
DRAIN_MAX_S = 0.5
#: While behind, after a backlog was dropped, inputs stamped this long before the grid
#: time the analysis resumed at are skipped unread (counted): newest data first.
SKIP_MARGIN_S = 0.2
#: Header stamp of a little-endian CDR message: after the 4-byte encapsulation.
STAMP = struct.Struct("<iI")

#: Best effort (accepts reliable and best-effort publishers, like sensor-data QoS),
#: with a queue deep enough to ride out a backlog as long as the engine's max_backlog_s
#: (2 s) at 1 kHz, or a snapshot write at 1 kHz: a sample lost here would read as a dropout.
INPUT_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=2000, reliability=ReliabilityPolicy.BEST_EFFORT)
#: Direct CDR readers of the high-rate streams (rclpy's deserializer costs more than the analysis).
FAST_READERS = {"joint_states": cdr.read_joint_state, "wrench": cdr.read_wrench_stamped}
COMMAND_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=50, reliability=ReliabilityPolicy.BEST_EFFORT)

#: Streams of each side: parameter key -> (message type, ROS type name, required).
STREAMS: dict[str, tuple[type, str, bool]] = {
    "joint_states": (JointState, "sensor_msgs/msg/JointState", True),
    "wrench": (WrenchStamped, "geometry_msgs/msg/WrenchStamped", False),
    "ee_pose": (PoseStamped, "geometry_msgs/msg/PoseStamped", False),
    "object_pose": (PoseStamped, "geometry_msgs/msg/PoseStamped", False),
    "joint_trajectory": (JointTrajectory, "trajectory_msgs/msg/JointTrajectory", False),
}

#: Parameters of the node itself: name -> (default, description).
NODE_PARAMETERS: dict[str, tuple[Any, str]] = {
    "output_dir": ("sim_real_bridge_out", "Directory for snapshots, events.jsonl and monitor_summary.json."),
    "tick_period_s": (0.02, "Period of the analysis timer (s); outputs keep the engine's own rates."),
    "summary_rate_hz": (1.0, "Rate of /divergence/summary."),
    "markers_rate_hz": (10.0, "Rate of /divergence/markers."),
    "diagnostics_period_s": (1.0, "Period of /diagnostics."),
    "stale_periods": (3.0, "A stream is STALE after this many expected periods without a message."),
    "snapshot_pre_s": (10.0, "Seconds of raw streams kept before an event's start in its snapshot."),
    "snapshot_post_s": (2.0, "Seconds after an event's start in its snapshot."),
    "snapshot_max_total_mb": (500.0, "Disk cap of all snapshots; the oldest go first."),
    "snapshot_label": ("", "Prefix of snapshot file names (the scenario, for example)."),
    "pose_frame_id": ("world", "Frame of ee_pose and object_pose on both sides (for markers and checks)."),
    "expected_frames.wrench": ("", "Frame the wrench messages must carry on both sides; empty accepts any."),
    "expected_frames.pose": ("", "Frame the pose messages must carry on both sides; empty accepts any."),
    "max_joints": (64, "A joint_states message with more joints than this is refused as oversized."),
    "max_future_s": (5.0, "A stamp this far ahead of the receive time is refused (same clock only)."),
    "stamps_on_node_clock": (True, "Both sides stamp on this node's clock, so future stamps can be checked."),
    "input_thread": (True, "Take the joint_states, wrench and pose inputs on a thread waiting on them alone "
                           "(the executor's per-wake cost at 1 kHz was the node's largest); false: the "
                           "executor serves them with the node's other callbacks."),
    "fit.enabled": (False, "Fit simulator parameters to each closed dynamics or contact event's snapshot, in a "
                           "separate process, and publish the result on /divergence/fits (sim-real-bridge fit)."),
    "fit.model": ("arm7", "Model the live fits correct: a built-in robot name or an MJCF file."),
    "lag.warn_s": (0.5, "Lag (now minus the newest grid time analysed) above which /diagnostics warns and the "
                         "node advances in larger steps (behind)."),
    "lag.error_s": (2.0, "Lag above which /diagnostics reports an error."),
    "lag.behind_tick_period_s": (0.2, "While behind, the analysis advances at this period (larger batches)."),
    "lag.away_s": (0.1, "A gap between ticks this long means the node was starved: queued inputs are taken "
                        "in before it analyses again."),
    "record_inputs_path": ("", "Bag directory to record every input message to, as received (log time = "
                               "this node's receive time), and the analysis ticks, so replay repeats this "
                               "run's analysis; empty: off."),
}


def _engine_parameters(prefix: str, config: Any) -> dict[str, Any]:
    """Flattened ``engine.*`` parameters with the dataclass defaults.

    Nested configs and dict-valued fields (per-category values) become dotted names,
    since ROS parameters hold only scalars and arrays.
    """
    out: dict[str, Any] = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if is_dataclass(value):
            out.update(_engine_parameters(f"{prefix}{f.name}.", value))
        elif isinstance(value, dict):
            out.update({f"{prefix}{f.name}.{key}": item for key, item in value.items()})
        else:
            out[f"{prefix}{f.name}"] = value
    return out


class DivergenceMonitor(Node):
    """The live monitor; everything is created here, callbacks only feed and publish."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        for name, (default, description) in NODE_PARAMETERS.items():
            self.declare_parameter(name, default, ParameterDescriptor(description=description))
        for side in ("sim", "real"):
            for stream in STREAMS:
                self.declare_parameter(
                    f"{side}_topics.{stream}", f"{side}/{stream}",
                    ParameterDescriptor(description=f"{side} side {stream} topic; empty disables it."),
                )
        engine_defaults = _engine_parameters("engine.", EngineConfig())
        for name, default in engine_defaults.items():
            self.declare_parameter(name, default, ParameterDescriptor(description="see sim_real_bridge.core.engine.EngineConfig"))
        param = lambda name: self.get_parameter(name).value  # noqa: E731
        self._intake = intake.IntakeConfig(
            limits=validation.InputLimits(max_joints=int(param("max_joints")), max_future_s=float(param("max_future_s"))),
            stamps_on_node_clock=bool(param("stamps_on_node_clock")),
            expected_frames={"wrench": param("expected_frames.wrench"), "pose": param("expected_frames.pose")},
        )
        self._engine = DivergenceEngine(EngineConfig.from_flat(
            {name[len("engine."):]: param(name) for name in engine_defaults}
        ), self._intake)
        # Joint residuals leave as soon as they are formed, before the rest of the analysis.
        self._engine.joint_sink = self._publish_joints
        self._tick_ns = 0  # node time of the tick under way (the outputs' receive time in snapshots)
        self._seen_problems: dict[str, dict[str, int]] = {}
        self._topic_of: dict[str, str] = {}  # "side/stream" -> resolved topic
        self._pose_frame = param("pose_frame_id")
        self._output_dir = Path(param("output_dir")).expanduser().resolve()
        self._output_dir.mkdir(parents=True, exist_ok=True)

        self._pub_joints = self.create_publisher(srb_msgs.JointDivergence, "/divergence/joints", OUTPUT_QOS)
        self._pub_pose = self.create_publisher(srb_msgs.PoseDivergence, "/divergence/pose", OUTPUT_QOS)
        self._pub_contact = self.create_publisher(srb_msgs.ContactResidual, "/divergence/contact", OUTPUT_QOS)
        self._pub_events = self.create_publisher(srb_msgs.GapEvent, "/divergence/events", OUTPUT_QOS)
        self._pub_summary = self.create_publisher(srb_msgs.DivergenceSummary, "/divergence/summary", OUTPUT_QOS)
        self._pub_markers = self.create_publisher(viz_msgs.MarkerArray, "/divergence/markers", OUTPUT_QOS)
        self._fits = LiveFits(self, param("fit.model"), self._output_dir) if param("fit.enabled") else None

        self._clock_shift_ns = 0
        self._last_clock_ns: int | None = None
        # The clock's own check takes a lock per message; follow use_sim_time instead.
        self._sim_time = bool(self.get_parameter("use_sim_time").value)
        self.add_post_set_parameters_callback(self._note_sim_time)
        self.clock_jumps = 0
        self._snapshot_error: str | None = None
        self._snapshot_notice: Any | None = None
        self._capture: FailureCapture | None = None
        try:
            self._capture = FailureCapture(
                self._output_dir,
                pre_s=float(param("snapshot_pre_s")), post_s=float(param("snapshot_post_s")),
                max_total_bytes=int(float(param("snapshot_max_total_mb")) * 1e6),
                label=str(param("snapshot_label")),
                background=True,
            )
        except SnapshotError as error:
            self._snapshot_failed(str(error), self._now_ns())
        self._snapshot_paths: dict[str, str] = {}
        self._open_categories: dict[str, str] = {}
        self._latest_poses: PoseColumns | None = None  # the last pose rows published (markers show the last)
        self._latest_input_ns = 0
        self._logged_once: set[tuple[str, str]] = set()

        self._status: dict[str, StreamStatus] = {}
        self._inputs_bag: BagWriter | None = None
        if param("record_inputs_path"):
            self._inputs_bag = BagWriter(Path(param("record_inputs_path")).expanduser().resolve(), build_typestore())
            self._inputs_bag.open()
            self._inputs_bag.add_topic(TICKS_TOPIC, TICKS_TYPE)
        self._subscribers = []
        self._drain_sources: list[tuple[Any, Any]] = []
        self._input_sources: list[tuple[Any, Any]] = []  # (subscriber, handle) of every high-rate input
        self._lag = _LagState(
            warn_ns=int(float(param("lag.warn_s")) * 1e9), error_ns=int(float(param("lag.error_s")) * 1e9),
            behind_period_ns=int(float(param("lag.behind_tick_period_s")) * 1e9),
            away_ns=int(float(param("lag.away_s")) * 1e9))
        # Held by every callback that touches the engine: the input thread and the timers.
        self._lock = threading.Lock()
        self._inputs: InputThread | None = None
        if param("input_thread"):
            self._inputs = InputThread(self, self._lock, self._input_thread_error)
        stale_periods = float(param("stale_periods"))
        for side in ("sim", "real"):
            for stream, (msg_type, type_name, required) in STREAMS.items():
                topic = param(f"{side}_topics.{stream}")
                if not topic:
                    if required:
                        raise ConfigError(f"parameter {side}_topics.{stream} must name a topic")
                    continue
                resolved = self.resolve_topic_name(topic)
                self._status[resolved] = StreamStatus(resolved, stale_periods=stale_periods)
                self._topic_of[f"{side}/{stream}"] = resolved
                if self._inputs_bag is not None:
                    self._inputs_bag.add_topic(resolved, type_name)
                qos = COMMAND_QOS if stream == "joint_trajectory" else INPUT_QOS
                handle = self._input_callback(side, stream, resolved, msg_type, type_name)
                if stream != "joint_trajectory":
                    self._input_sources.append((None, handle))
                if self._inputs is not None and stream != "joint_trajectory":
                    subscriber = message_filters.Subscriber(self, msg_type, topic, qos_profile=qos, raw=True,
                                                            callback_group=self._inputs.group)
                    subscriber.registerCallback(handle)
                    self._inputs.add(subscriber.sub)
                    self._input_sources[-1] = (subscriber, handle)
                else:
                    subscriber = message_filters.Subscriber(self, msg_type, topic, qos_profile=qos, raw=True)
                    if stream == "joint_trajectory":
                        subscriber.registerCallback(self._locked(handle))
                    else:  # poses too: undrained, they queued for seconds
                        subscriber.registerCallback(self._draining(handle))
                        self._drain_sources.append((subscriber, handle))
                        self._input_sources[-1] = (subscriber, handle)
                self._subscribers.append(subscriber)

        # Input-driven ticks analyse each grid time as soon as its samples are in (see
        # on_message); the timer covers the rest: stalled streams, events, snapshots.
        self._tick_timer = self.create_timer(float(param("tick_period_s")), self._locked(self._on_tick))
        self._summary_timer = self.create_timer(1.0 / float(param("summary_rate_hz")), self._locked(self._on_summary))
        self._markers_timer = self.create_timer(1.0 / float(param("markers_rate_hz")), self._locked(self._on_markers))
        self._diagnostics = DiagnosticsPublisher(self, period_s=float(param("diagnostics_period_s")))
        for topic in self._status:
            self._diagnostics.add(self._locked(lambda topic=topic: self._stream_diagnostic(topic)))
        self._diagnostics.add(self._locked(self._alignment_diagnostic))
        self._diagnostics.add(self._locked(self._lag_diagnostic))
        self._diagnostics.add(self._locked(self._snapshot_diagnostic))
        if self._fits is not None:
            self._diagnostics.add(self._locked(self._fits.diagnostic))
        self._finished = False
        if self._inputs is not None:
            self._inputs.start()
        self.get_logger().info(
            f"monitoring {len(self._status)} streams; output in {self._output_dir}; "
            f"message_filters: {message_filters.__name__}"
        )

    # ------------------------------------------------------------------ input
    def _now_ns(self) -> int:
        """Node time, kept monotonic: a clock jumping back (simulator reset) shifts it forward.

        The engine then sees continuous receive times while the stamps jump, which its
        clock map treats as a clock reset per side (counted, offset re-learnt, no gap).
        """
        # Without sim time ROS time is the system clock: read it directly (once per message).
        raw_ns = self.get_clock().now().nanoseconds if self._sim_time else time.time_ns()
        if self._last_clock_ns is not None and raw_ns < self._last_clock_ns:
            self._clock_shift_ns += self._last_clock_ns - raw_ns
            self.clock_jumps += 1
            self.get_logger().warning(
                f"clock jumped back by {(self._last_clock_ns - raw_ns) * 1e-9:.3f} s (simulator reset?); "
                "analysis continues on a shifted time base"
            )
        self._last_clock_ns = raw_ns
        return raw_ns + self._clock_shift_ns

    def _note_sim_time(self, parameters: list[Parameter]) -> None:
        for parameter in parameters:
            if parameter.name == "use_sim_time":
                self._sim_time = bool(parameter.value)

    def _problem(self, topic: str, reason: str, recv_ns: int, refused: bool, count: int = 1) -> None:
        self._status[topic].on_problem(reason, recv_ns, refused, count)
        self._log_once(topic, reason, refused)

    def _log_once(self, topic: str, reason: str, refused: bool, detail: str = "") -> None:
        if (topic, reason) not in self._logged_once:
            self._logged_once.add((topic, reason))
            action = "refused" if refused else "flagged"
            self.get_logger().warning(
                f"{action} a message on {topic}: {reason}{f' ({detail})' if detail else ''}; "
                "further ones are only counted (see /diagnostics)"
            )

    def _input_callback(self, side: str, stream: str, topic: str, msg_type: type, type_name: str):
        reader = FAST_READERS.get(stream)

        def on_message(data: bytes) -> None:
            recv_ns = self._now_ns()
            self._status[topic].on_message(recv_ns)
            self._latest_input_ns = max(self._latest_input_ns, recv_ns)
            if self._lag.skip_before_ns is not None and self._stale(side, data):
                self._lag.skipped_inputs += 1  # older than the gap just dropped: of no use
                return
            if self._capture is not None:
                self._capture.add_message(topic, type_name, recv_ns, data)
            if self._inputs_bag is not None:
                self._record_input(topic, recv_ns, data)
            try:
                try:
                    msg = reader(data) if reader is not None else deserialize_message(data, msg_type)
                except ValueError:  # not plain little-endian CDR: rclpy's reader decides
                    msg = deserialize_message(data, msg_type)
            except Exception as error:  # noqa: BLE001 - a corrupt message must not stop the node
                self._refuse(side, stream, topic, "undecodable", recv_ns, str(error))
                return
            try:
                self._feed(side, stream, topic, msg, recv_ns)
            except Exception as error:  # noqa: BLE001 - no input may crash the monitor
                self._refuse(side, stream, topic, "unprocessable", recv_ns, f"{type(error).__name__}: {error}")
                return
            # The message that completes a grid time is analysed and published at once:
            # the latency is then the analysis, not the wait for the next timer tick.
            if stream in ("joint_states", "wrench") and self._lag.step_on_message(recv_ns, self._engine.analysis_due):
                self._on_tick()

        return on_message

    def _record_input(self, topic: str, recv_ns: int, data: bytes) -> None:
        """Write one input as received; a failing bag stops recording, never the analysis."""
        try:
            self._inputs_bag.write(topic, recv_ns, data)  # type: ignore[union-attr]
        except SnapshotError as error:
            self.get_logger().error(f"input recording stopped: {error}")
            self._inputs_bag.abort()  # type: ignore[union-attr]
            self._inputs_bag = None

    def _note_tick(self, now_ns: int) -> None:
        """Keep the engine's tick time with the inputs (recording, snapshots): replay then
        ticks when this node did, which matters where a stream stalled."""
        if self._inputs_bag is None and self._capture is None:
            return
        data = cdr.time_message(now_ns)
        if self._inputs_bag is not None:
            self._record_input(TICKS_TOPIC, now_ns, data)
        if self._capture is not None:
            self._capture.add_message(TICKS_TOPIC, TICKS_TYPE, now_ns, data)

    def _locked(self, callback: Callable[..., Any]) -> Callable[..., Any]:
        """The callback, run holding the lock the input thread holds while it feeds."""
        lock = self._lock

        def run(*args: Any) -> Any:
            with lock:
                return callback(*args)

        return run

    def _input_thread_error(self, error: BaseException) -> None:
        # The input callbacks refuse what they cannot process; this is a bug, said once.
        if ("input_thread", type(error).__name__) not in self._logged_once:
            self._logged_once.add(("input_thread", type(error).__name__))
            self.get_logger().error(f"input callback failed: {type(error).__name__}: {error}")

    def _draining(self, handle: Any) -> Any:
        """Callback that also takes what is queued on every high-rate input (bounded).

        At 1 kHz per stream the executor's per-message overhead dominates; messages that
        arrived together (both robots' joint_states and wrench) or a backlog are taken
        in one executor turn instead of one turn each. The executor finds nothing left
        to take for a subscription drained here, which it handles as a no-op.
        """
        def on_message(data: bytes) -> None:
            handle(data)
            for subscriber, source in self._drain_sources:
                if not take_queued(subscriber.sub, source):
                    return  # Ctrl-C shut the context down mid-drain

        return on_message

    def _refuse(self, side: str, stream: str, topic: str, reason: str, recv_ns: int, detail: str = "") -> None:
        """A message refused before the engine: counted by the engine, logged once here with its detail."""
        self._engine.note_refused(side, stream, reason)
        self._log_once(topic, reason, refused=True, detail=detail)

    def _feed(self, side: str, stream: str, topic: str, msg: Any, recv_ns: int) -> None:
        """Converts one message to arrays and hands it to the engine (which checks it)."""
        if stream == "joint_trajectory":
            if side == "sim":  # only the sim side's copy starts the run clock
                self._engine.add_command(recv_ns)
            return
        if stream == "joint_states":
            stamp_ns, names, q, qd, eff = joint_state_to_arrays(msg)
            reason = validation.check_joint_state(names, q, qd, eff, None, self._intake.limits)
            if reason in (validation.EMPTY, validation.LENGTH_MISMATCH, validation.OVERSIZED):
                self._refuse(side, stream, topic, reason, recv_ns)
                return
            self._engine.add_joint_states(side, stamp_ns, recv_ns, names, q, qd, eff)
        elif stream == "wrench":
            stamp_ns, frame_id, force, torque = wrench_to_arrays(msg)
            self._engine.add_wrench(side, stamp_ns, recv_ns, force, torque, frame_id)
        else:
            stamp_ns, frame_id, position, quat = pose_to_arrays(msg)
            self._engine.add_pose(side, stream, stamp_ns, recv_ns, position, quat, frame_id)

    def _report_problems(self, now_ns: int) -> None:
        """Count what the engine refused or flagged since last time per topic (once logged)."""
        for key, counts in self._engine.problems.items():
            seen = self._seen_problems.setdefault(key, {})
            topic = self._topic_of.get(key)
            if topic is None:
                continue
            for reason, count in counts.items():
                new = count - seen.get(reason, 0)
                if new > 0:
                    seen[reason] = count
                    refused = reason not in validation.FLAGGING_REASONS or key.endswith("_pose")
                    self._problem(topic, reason, now_ns, refused=refused, count=new)

    # ------------------------------------------------------------------ output
    def _record_output(self, topic: str, type_name: str, msg: Any, now_ns: int) -> None:
        if self._capture is not None:
            self._capture.add_message(topic, type_name, now_ns, serialize_message(msg))

    def _publish_joints(self, joints: JointColumns) -> None:
        live = self.context.ok()  # at shutdown (finish) the context may be gone already
        for data in cdr.joint_divergence_cdr(joints):
            if live:
                self._pub_joints.publish(data)
            if self._capture is not None:
                self._capture.add_message("/divergence/joints", "sim_real_bridge/msg/JointDivergence", self._tick_ns, data)

    def _publish(self, out: EngineOutput, now_ns: int) -> None:
        # Straight to CDR and published raw (rclpy message objects cost ~0.5 ms per grid
        # time on the latency path). Joints went out already (the engine's joint sink).
        published = []
        if out.poses is not None and len(out.poses):
            published += [(self._pub_pose, "/divergence/pose", "sim_real_bridge/msg/PoseDivergence", data)
                          for data in cdr.pose_divergence_cdr(out.poses, self._pose_frame)]
            self._latest_poses = out.poses
        if out.contacts is not None and len(out.contacts):
            published += [(self._pub_contact, "/divergence/contact", "sim_real_bridge/msg/ContactResidual", data)
                          for data in cdr.contact_residual_cdr(out.contacts)]
        live = self.context.ok()  # at shutdown (finish) the context may be gone already
        for publisher, topic, type_name, data in published:
            if live:
                publisher.publish(data)
            if self._capture is not None:
                self._capture.add_message(topic, type_name, now_ns, data)
        for _, record in out.events:
            self._on_event(record, now_ns)

    def _on_event(self, record: EventRecord, now_ns: int) -> None:
        if record.action == ACTION_OPEN:
            self._open_categories[record.id] = record.category
        elif record.action == ACTION_CLOSE:
            self._open_categories.pop(record.id, None)
            if self._fits is not None:
                self._fits.event_closed(record.id, record.category)
        entry = {
            "id": record.id, "action": record.action, "category": record.category, "kind": record.kind,
            "severity": record.severity, "start_s": self._engine.to_seconds(record.start_ns),
            "end_s": self._engine.to_seconds(record.end_ns), "evidence": dict(record.evidence),
        }
        if self._capture is not None:
            try:
                self._snapshot_paths[record.id] = self._capture.record_event(entry, record.start_ns)
            except SnapshotError as error:
                self._snapshot_failed(str(error), now_ns)
        msg = convert.gap_event_msg(srb_msgs, KeyValue, record, now_ns, self._snapshot_paths.get(record.id, ""))
        if self.context.ok():  # at shutdown (finish) the context may be gone already
            self._pub_events.publish(msg)
        self._record_output("/divergence/events", "sim_real_bridge/msg/GapEvent", msg, now_ns)
        if record.action == ACTION_OPEN:
            self.get_logger().info(f"gap event {record.id}: {record.category}/{record.kind} severity {record.severity:.2f}")

    def _snapshot_failed(self, error: str, now_ns: int) -> None:
        """Stops snapshots for good: ERROR in /diagnostics, one event, live topics go on."""
        if self._snapshot_error is not None:
            return
        self._snapshot_error = error
        self._capture = None
        self.get_logger().error(f"snapshots stopped: {error}; live topics keep flowing")
        notice = EventRecord(id="snapshot_failure", category="", kind="snapshot_failed", severity=1.0,
                             start_ns=now_ns, end_ns=now_ns, open=False, action=ACTION_CLOSE,
                             evidence={"error": error})
        self._snapshot_notice = convert.gap_event_msg(srb_msgs, KeyValue, notice, now_ns)
        self._publish_snapshot_notice()

    def _publish_snapshot_notice(self) -> None:
        # A failure at start-up happens before anyone subscribed; keep the notice until then.
        if self._snapshot_notice is not None and self._pub_events.get_subscription_count() > 0:
            self._pub_events.publish(self._snapshot_notice)
            self._snapshot_notice = None

    def _on_tick(self) -> None:
        now_ns = self._now_ns()
        self._publish_snapshot_notice()
        if self._lag.away(now_ns):
            # Take in what queued up first: the node's silence is not the streams'.
            self._lag.drained += self._take_queued_inputs()
            now_ns = self._now_ns()
        lag_ns = self._engine.lag_ns(now_ns)
        if not self._lag.step_due(now_ns, lag_ns):
            return
        self._tick_ns = now_ns
        gaps = len(self._engine.gaps)
        out = self._engine.advance(now_ns)
        if len(self._engine.gaps) > gaps:  # the backlog was dropped: skip what queued up before it
            self._lag.skip_before_ns = self._engine.next_grid_ns - int(SKIP_MARGIN_S * 1e9)
        self._lag.after_step(now_ns, self._engine.lag_ns(now_ns))
        if out.due or out.skipped:
            # Only ticks that found grid times due (or dropped) decide anything: replay needs those.
            self._note_tick(now_ns)
        self._publish(out, now_ns)
        self._report_problems(now_ns)
        if self._capture is not None:
            for result in self._capture.poll(now_ns):
                if result.error is not None:
                    self._snapshot_failed(str(result.error), now_ns)
                    break
                if self._fits is not None and result.path is not None:
                    self._fits.snapshot_written(result.request.event_id, result.path)
        if self._fits is not None:
            self._fits.poll(now_ns)

    def _stale(self, side: str, data: bytes) -> bool:
        """Whether a raw message's stamp, on the monitor clock, is older than skip_before_ns."""
        floor_s = self._engine.transport_floor_s().get(side)
        if floor_s is None or len(data) < 12 or data[1] != 1:  # only little-endian CDR is peeked at
            return False
        sec, nanosec = STAMP.unpack_from(data, 4)
        return sec * 1_000_000_000 + nanosec + int(floor_s * 1e9) < self._lag.skip_before_ns  # type: ignore[operator]

    def _take_queued_inputs(self) -> int:
        """Hand every input message queued on the high-rate subscriptions to its callback
        (for at most DRAIN_MAX_S); returns how many."""
        taken = 0

        def counted(handle: Callable[[Any], None]) -> Callable[[Any], None]:
            def deliver(data: Any) -> None:
                nonlocal taken
                taken += 1
                handle(data)
            return deliver

        self._lag.draining = True  # no analysis step per message while draining
        deadline = time.monotonic() + DRAIN_MAX_S
        try:
            while time.monotonic() < deadline:
                before = taken
                for subscriber, handle in self._input_sources:
                    if subscriber is not None and not take_queued(subscriber.sub, counted(handle),
                                                                  self._input_thread_error):
                        return taken
                if taken == before:
                    break
            else:
                self._lag.drains_cut_short += 1  # what is left may be judged silent (a hole, not a gap)
        finally:
            self._lag.draining = False
        return taken

    def _on_summary(self) -> None:
        record = self._engine.summary(self._now_ns())
        self._pub_summary.publish(convert.divergence_summary_msg(srb_msgs, KeyValue, record))

    def _on_markers(self) -> None:
        poses = self._latest_poses
        if poses is None:
            return
        categories = sorted(set(self._open_categories.values()))
        self._pub_markers.publish(cdr.divergence_markers_cdr(poses, [len(poses) - 1], [categories], [self._now_ns()],
                                                             self._pose_frame)[0])

    # ------------------------------------------------------------------ diagnostics
    def _stream_diagnostic(self, topic: str) -> Any:
        status = self._status[topic]
        level, message = status.level(self._now_ns(), self._latest_input_ns)
        return make_status(f"{NODE_NAME}: {topic}", LEVELS[level], message, status.values())

    def _alignment_diagnostic(self) -> Any:
        record = self._engine.summary(self._now_ns())
        values = {"clock_offset_s": record.clock_offset_s, "latency_s": record.latency_s,
                  "clock_resets": record.clock_resets, "clock_jumps": self.clock_jumps,
                  "events": record.event_count,
                  "rejected": record.rejected_count}
        values.update({f"transport_floor_s.{side}": v for side, v in self._engine.transport_floor_s().items()})
        values.update({f"rejected.{k}": v for k, v in sorted(record.rejected_by_reason.items())})
        level = OK if self._engine.analysis_count else WARN
        message = "aligned" if self._engine.analysis_count else "waiting for both robots' joint_states"
        return make_status(f"{NODE_NAME}: alignment", level, message, values)

    def _lag_diagnostic(self) -> Any:
        """How far behind the analysis is: the level of the largest lag since the last report."""
        now_ns = self._now_ns()
        lag_ns = self._engine.lag_ns(now_ns)
        meter = self._engine.lag
        self._lag.observe(lag_ns)
        if meter.max_lag_ns > self._lag.meter_max_ns:  # a lag the steps did not see (start-up, a batch)
            self._lag.meter_max_ns = meter.max_lag_ns
            self._lag.observe(meter.max_lag_ns)
        worst_ns = self._lag.take_window_max()
        values = {"lag_s": (lag_ns or 0) * 1e-9, "max_lag_s": worst_ns * 1e-9, "run_max_lag_s": meter.max_lag_ns * 1e-9,
                  "behind_share": meter.behind_share(), "behind": self._lag.behind,
                  "behind_mode_s": self._lag.behind_total_ns(now_ns) * 1e-9,
                  "dropped_grid_times": self._engine.skipped_count,
                  "dropped_s": self._engine.skipped_count * self._engine.dt_ns * 1e-9,
                  "inputs_taken_after_stalls": self._lag.drained,
                  "inputs_skipped_behind": self._lag.skipped_inputs, "drains_cut_short": self._lag.drains_cut_short}
        level = ERROR if worst_ns > self._lag.error_ns else WARN if worst_ns > self._lag.warn_ns else OK
        if level == OK:
            message = "keeping up"
        else:
            message = (f"behind by up to {worst_ns * 1e-9:.2f} s: analysing in steps of "
                       f"{self._lag.behind_period_ns * 1e-9:.1f} s")
            if self._engine.skipped_count:
                message += f"; {values['dropped_s']:.2f} s of backlog dropped in {len(self._engine.gaps)} gap(s)"
        return make_status(f"{NODE_NAME}: lag", level, message, values)

    def _snapshot_diagnostic(self) -> Any:
        if self._snapshot_error is not None:
            return make_status(f"{NODE_NAME}: snapshots", ERROR, f"snapshots stopped: {self._snapshot_error}")
        assert self._capture is not None
        return make_status(f"{NODE_NAME}: snapshots", OK, f"writing to {self._capture.snapshots.out_dir}",
                           {"pending": len(self._capture.snapshots.pending), "writing": self._capture.writing,
                            "written_inline": self._capture.written_inline, "events": len(self._snapshot_paths)})

    # ------------------------------------------------------------------ shutdown
    def log_summary(self) -> None:
        """Finish the run (see :meth:`finish`) and say where its summary went."""
        self.get_logger().info(f"run summary written to {self.finish()}")

    def finish(self) -> Path:
        """Closes open events, writes pending snapshots and the run summary; returns its path."""
        if self._inputs is not None:
            self._inputs.stop()
        with self._lock:
            return self._finish()

    def destroy_node(self) -> None:
        if self._inputs is not None:
            self._inputs.stop()
        if self._fits is not None:
            self._fits.close()
        super().destroy_node()

    def _finish(self) -> Path:
        if self._finished:
            return self._output_dir / SUMMARY_FILE
        self._finished = True
        now_ns = self._now_ns()
        self._note_tick(now_ns)
        self._tick_ns = now_ns
        out = self._engine.finish(now_ns)
        self._publish(out, now_ns)
        if self._capture is not None:
            for result in self._capture.close():
                if result.error is not None:
                    self._snapshot_failed(str(result.error), now_ns)
        if self._inputs_bag is not None:
            try:
                self._inputs_bag.close()
            except SnapshotError as error:
                self.get_logger().error(f"input recording lost: {error}")
            self._inputs_bag = None
        summary = self._engine.run_summary()
        for event in summary["events"]:
            event["snapshot"] = self._snapshot_paths.get(event["id"], "")
        summary["rejected_by_topic"] = {
            topic: dict(status.refused) for topic, status in self._status.items() if status.refused
        }
        summary["snapshot_error"] = self._snapshot_error
        summary["timing"]["clock_jumps"] = self.clock_jumps
        summary["load"]["behind_mode_s"] = round(self._lag.behind_total_ns(now_ns) * 1e-9, 3)
        summary["load"]["inputs_taken_after_stalls"] = self._lag.drained
        summary["load"]["inputs_skipped_behind"] = self._lag.skipped_inputs
        summary["load"]["drains_cut_short"] = self._lag.drains_cut_short
        path = self._output_dir / SUMMARY_FILE
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps(summary, indent=2, default=float))
        os.replace(partial, path)
        return path


class _LagState:
    """The node's side of the lag: behind or not, when to step, the worst lag since the last report."""

    def __init__(self, warn_ns: int, error_ns: int, behind_period_ns: int, away_ns: int) -> None:
        self.warn_ns, self.error_ns = warn_ns, error_ns
        self.behind_period_ns, self.away_ns = behind_period_ns, away_ns
        self.behind = False
        self.draining = False
        self.drained = 0
        self.skipped_inputs = 0
        self.drains_cut_short = 0
        self.meter_max_ns = 0  # the engine's largest lag when last reported
        #: While set (after a backlog was dropped, until caught up): inputs stamped before it are skipped.
        self.skip_before_ns: int | None = None
        self._last_tick_ns: int | None = None
        self._last_step_ns = 0
        self._window_max_ns = 0
        self._behind_since_ns: int | None = None
        self._behind_ns = 0

    def away(self, now_ns: int) -> bool:
        """Whether the node went without a tick for away_ns (starved); notes this tick."""
        away = self._last_tick_ns is not None and now_ns - self._last_tick_ns > self.away_ns
        self._last_tick_ns = now_ns
        return away

    def step_on_message(self, now_ns: int, grid_time_due: Callable[[], bool]) -> bool:
        """Whether an input message should step the analysis: keeping up, the one that
        completes a grid time; behind, one every behind_period (the input thread steps
        itself, so a timer kept off the lock cannot silence the outputs)."""
        if self.draining:
            return False
        if self.behind:
            return now_ns - self._last_step_ns >= self.behind_period_ns
        return grid_time_due()

    def observe(self, lag_ns: int | None) -> None:
        if lag_ns is not None:
            self._window_max_ns = max(self._window_max_ns, lag_ns)

    def step_due(self, now_ns: int, lag_ns: int | None) -> bool:
        """Whether to advance the analysis now: always when keeping up, every behind_period when behind."""
        self.observe(lag_ns)
        if lag_ns is not None and lag_ns > self.warn_ns and not self.behind:
            self.behind, self._behind_since_ns = True, now_ns
        return not self.behind or now_ns - self._last_step_ns >= self.behind_period_ns

    def after_step(self, now_ns: int, lag_ns: int | None) -> None:
        self._last_step_ns = now_ns
        if self.behind and lag_ns is not None and lag_ns < self.warn_ns // 2:
            self._behind_ns += now_ns - (self._behind_since_ns or now_ns)
            self.behind, self._behind_since_ns = False, None
            self.skip_before_ns = None

    def take_window_max(self) -> int:
        """The largest lag seen since the last call (then forgotten)."""
        worst, self._window_max_ns = self._window_max_ns, 0
        return worst

    def behind_total_ns(self, now_ns: int) -> int:
        """Time spent in the behind mode so far."""
        open_ns = now_ns - self._behind_since_ns if self._behind_since_ns is not None else 0
        return self._behind_ns + open_ns


def _freeze_start_up_objects() -> None:
    # Everything built so far lives for the whole run: keep it out of the cyclic
    # collector, whose full passes over it are the longest pauses of the input path.
    gc.collect()
    gc.freeze()


def main(args: list[str] | None = None) -> int:
    """Runs the monitor until Ctrl-C; writes the run summary on the way out."""
    # The snapshot writer thread holds the GIL in slices of this length at most while
    # the executor thread waits (the default 5 ms would be the latency budget).
    sys.setswitchinterval(0.0005)
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    return run_node(DivergenceMonitor, NODE_NAME, before_spin=_freeze_start_up_objects)


if __name__ == "__main__":
    raise SystemExit(main())
