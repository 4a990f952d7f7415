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
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.signals import SignalHandlerOptions

from sim_real_bridge.core import validation
from sim_real_bridge.core.engine import DivergenceEngine
from sim_real_bridge.core.stream_status import StreamStatus
from sim_real_bridge.errors import SnapshotError
from sim_real_bridge.evaluation.analyses import live_analyses
from sim_real_bridge.ros.diagnostics import ERROR, OK, STALE, WARN, DiagnosticsPublisher, make_status
from sim_real_bridge.ros.filters import message_filters
from sim_real_bridge.ros.input_thread import InputThread, take_queued
from sim_real_bridge.ros.live_fits import LiveFits
from sim_real_bridge.ros.monitor_inputs import (
    COMMAND_QOS, COMMAND_STREAM, INPUT_QOS, STEPPING_STREAMS, STREAMS, decode_input, feed_input, header_stamp_ns,
)
from sim_real_bridge.ros.monitor_lag import LagState, lag_status
from sim_real_bridge.ros.monitor_outputs import MonitorOutputs
from sim_real_bridge.ros.monitor_params import (
    InputTopic, MonitorSettings, declare_monitor_parameters, read_monitor_settings,
)
from sim_real_bridge.ros.monitor_recording import MonitorRecording
from sim_real_bridge.ros.spinning import run_node

NODE_NAME = "divergence_monitor"
SUMMARY_FILE = "monitor_summary.json"
LEVELS = {0: OK, 1: WARN, 2: ERROR, 3: STALE}
#: After a stall, queued inputs are taken in for at most this long before the analysis
#: steps (what is left is taken in by the input thread; the streams are not silent then).
DRAIN_MAX_S = 0.5
#: While behind, after a backlog was dropped, inputs stamped this long before the grid
#: time the analysis resumed at are skipped unread (counted): newest data first.
SKIP_MARGIN_S = 0.2


class DivergenceMonitor(Node):
    """The live monitor; everything is created here, callbacks only feed and publish."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        declare_monitor_parameters(self)
        settings = read_monitor_settings(self)
        self._intake = settings.intake
        self._engine = DivergenceEngine(settings.engine, settings.intake)
        self._output_dir = settings.output_dir
        self._output_dir.mkdir(parents=True, exist_ok=True)
        self._clock_shift_ns = 0
        self._last_clock_ns: int | None = None
        # The clock's own check takes a lock per message; follow use_sim_time instead.
        self._sim_time = bool(self.get_parameter("use_sim_time").value)
        self.add_post_set_parameters_callback(self._note_sim_time)
        self.clock_jumps = 0
        self._fits = LiveFits(self, settings.fit_model, self._output_dir) if settings.fit_enabled else None
        self._recording = MonitorRecording(self.get_logger())
        self._outputs = MonitorOutputs(self, self._engine, self._recording, self._fits, settings.pose_frame_id)
        # Joint residuals leave as soon as they are formed, before the rest of the analysis.
        self._engine.joint_sink = self._outputs.publish_joints
        self._start_recording(settings)
        self._status: dict[str, StreamStatus] = {}  # resolved topic -> its health (in /diagnostics)
        self._topic_of: dict[str, str] = {}  # "side/stream" -> resolved topic
        self._seen_problems: dict[str, dict[str, int]] = {}
        self._logged_once: set[tuple[str, str]] = set()
        self._latest_input_ns = 0
        self._lag = LagState(settings.lag)
        # Held by every callback that touches the engine: the input thread and the timers.
        self._lock = threading.Lock()
        self._inputs = InputThread(self, self._lock, self._input_thread_error) if settings.input_thread else None
        self._subscribers: list[Any] = []
        self._drain_sources: list[tuple[Any, Any]] = []  # (subscriber, handle) drained by the executor
        self._input_sources: list[tuple[Any, Any]] = []  # (subscriber, handle) of every high-rate input
        for entry in settings.inputs:
            self._subscribe(entry, settings.stale_periods)
        self._start_timers(settings)
        self._finished = False
        if self._inputs is not None:
            self._inputs.start()
        self.get_logger().info(
            f"monitoring {len(self._status)} streams; output in {self._output_dir}; "
            f"message_filters: {message_filters.__name__}"
        )

    def _start_recording(self, settings: MonitorSettings) -> None:
        """Snapshots (a failure stops them, not the node) and the input recording, if asked for."""
        try:
            self._recording.start_snapshots(self._output_dir, settings.snapshots)
        except SnapshotError as error:
            self._outputs.snapshot_failed(str(error), self._now_ns())
        if settings.record_inputs_path is not None:
            self._recording.start_input_recording(settings.record_inputs_path)

    def _subscribe(self, entry: InputTopic, stale_periods: float) -> None:
        """Subscribes to one input stream: on the input thread, or on the executor with draining."""
        spec = STREAMS[entry.stream]
        resolved = self.resolve_topic_name(entry.topic)
        self._status[resolved] = StreamStatus(resolved, stale_periods=stale_periods)
        self._topic_of[f"{entry.side}/{entry.stream}"] = resolved
        self._recording.add_input_topic(resolved, spec.type_name)
        handle = self._input_callback(entry.side, entry.stream, resolved, spec.msg_type, spec.type_name)
        if entry.stream == COMMAND_STREAM:
            subscriber = message_filters.Subscriber(self, spec.msg_type, entry.topic, qos_profile=COMMAND_QOS,
                                                    raw=True)
            subscriber.registerCallback(self._locked(handle))
        elif self._inputs is not None:
            subscriber = message_filters.Subscriber(self, spec.msg_type, entry.topic, qos_profile=INPUT_QOS,
                                                    raw=True, callback_group=self._inputs.group)
            subscriber.registerCallback(handle)
            self._inputs.add(subscriber.sub)
            self._input_sources.append((subscriber, handle))
        else:  # poses too: undrained, they queued for seconds
            subscriber = message_filters.Subscriber(self, spec.msg_type, entry.topic, qos_profile=INPUT_QOS, raw=True)
            subscriber.registerCallback(self._draining(handle))
            self._drain_sources.append((subscriber, handle))
            self._input_sources.append((subscriber, handle))
        self._subscribers.append(subscriber)

    def _start_timers(self, settings: MonitorSettings) -> None:
        # Input-driven ticks analyse each grid time as soon as its samples are in (see
        # on_message); the timer covers the rest: stalled streams, events, snapshots.
        self._tick_timer = self.create_timer(settings.tick_period_s, self._locked(self._on_tick))
        self._summary_timer = self.create_timer(1.0 / settings.summary_rate_hz, self._locked(self._on_summary))
        self._markers_timer = self.create_timer(1.0 / settings.markers_rate_hz, self._locked(self._on_markers))
        self._diagnostics = DiagnosticsPublisher(self, period_s=settings.diagnostics_period_s)
        for topic in self._status:
            self._diagnostics.add(self._locked(lambda topic=topic: self._stream_diagnostic(topic)))
        self._diagnostics.add(self._locked(self._alignment_diagnostic))
        self._diagnostics.add(self._locked(lambda: lag_status(NODE_NAME, self._engine, self._lag, self._now_ns())))
        self._diagnostics.add(self._locked(lambda: self._recording.diagnostic(NODE_NAME)))
        if self._fits is not None:
            self._diagnostics.add(self._locked(self._fits.diagnostic))

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

    def _input_callback(self, side: str, stream: str, topic: str, msg_type: type,
                        type_name: str) -> Callable[[bytes], None]:
        def on_message(data: bytes) -> None:
            recv_ns = self._now_ns()
            self._status[topic].on_message(recv_ns)
            self._latest_input_ns = max(self._latest_input_ns, recv_ns)
            if self._lag.skip_before_ns is not None and self._stale(side, data):
                self._lag.skipped_inputs += 1  # older than the gap just dropped: of no use
                return
            self._recording.add_input(topic, type_name, recv_ns, data)
            try:
                msg = decode_input(data, stream, msg_type)
            except Exception as error:  # noqa: BLE001 - a corrupt message must not stop the node
                self._refuse(side, stream, topic, "undecodable", recv_ns, str(error))
                return
            try:
                reason = feed_input(self._engine, self._intake.limits, side, stream, msg, recv_ns)
            except Exception as error:  # noqa: BLE001 - no input may crash the monitor
                self._refuse(side, stream, topic, "unprocessable", recv_ns, f"{type(error).__name__}: {error}")
                return
            if reason is not None:
                self._refuse(side, stream, topic, reason, recv_ns)
            # The message that completes a grid time is analysed and published at once:
            # the latency is then the analysis, not the wait for the next timer tick.
            if stream in STEPPING_STREAMS and self._lag.step_on_message(recv_ns, self._engine.analysis_due):
                self._on_tick()

        return on_message

    def _stale(self, side: str, data: bytes) -> bool:
        """Whether a raw message's stamp, on the monitor clock, is older than skip_before_ns."""
        floor_s = self._engine.transport_floor_s().get(side)
        if floor_s is None:
            return False
        stamp_ns = header_stamp_ns(data)  # only little-endian CDR is peeked at
        skip_before_ns = self._lag.skip_before_ns
        return stamp_ns is not None and skip_before_ns is not None and stamp_ns + int(floor_s * 1e9) < skip_before_ns

    def _locked(self, callback: Callable[..., Any]) -> Callable[..., Any]:
        """The callback, run holding the lock the input thread holds while it feeds."""
        lock = self._lock

        def run(*args: Any) -> Any:
            with lock:
                return callback(*args)

        return run

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
                    if not take_queued(subscriber.sub, counted(handle), self._input_thread_error):
                        return taken
                if taken == before:
                    break
            else:
                self._lag.drains_cut_short += 1  # what is left may be judged silent (a hole, not a gap)
        finally:
            self._lag.draining = False
        return taken

    # ------------------------------------------------------------------ bad input
    def _refuse(self, side: str, stream: str, topic: str, reason: str, recv_ns: int, detail: str = "") -> None:
        """A message refused before the engine: counted by the engine, logged once here with its detail."""
        self._engine.note_refused(side, stream, reason)
        self._log_once(topic, reason, refused=True, detail=detail)

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
                    self._status[topic].on_problem(reason, now_ns, refused, new)
                    self._log_once(topic, reason, refused)

    def _log_once(self, topic: str, reason: str, refused: bool, detail: str = "") -> None:
        if (topic, reason) not in self._logged_once:
            self._logged_once.add((topic, reason))
            action = "refused" if refused else "flagged"
            self.get_logger().warning(
                f"{action} a message on {topic}: {reason}{f' ({detail})' if detail else ''}; "
                "further ones are only counted (see /diagnostics)"
            )

    def _input_thread_error(self, error: BaseException) -> None:
        # The input callbacks refuse what they cannot process; this is a bug, said once.
        if ("input_thread", type(error).__name__) not in self._logged_once:
            self._logged_once.add(("input_thread", type(error).__name__))
            self.get_logger().error(f"input callback failed: {type(error).__name__}: {error}")

    # ------------------------------------------------------------------ analysis steps
    def _on_tick(self) -> None:
        now_ns = self._now_ns()
        self._outputs.publish_snapshot_notice()
        if self._lag.away(now_ns):
            # Take in what queued up first: the node's silence is not the streams'.
            self._lag.drained += self._take_queued_inputs()
            now_ns = self._now_ns()
        lag_ns = self._engine.lag_ns(now_ns)
        if not self._lag.step_due(now_ns, lag_ns):
            return
        self._outputs.tick_ns = now_ns
        gaps = len(self._engine.gaps)
        unpaired = self._engine.next_grid_ns is None
        out = self._engine.advance(now_ns)
        if len(self._engine.gaps) > gaps:  # the backlog was dropped: skip what queued up before it
            self._lag.skip_before_ns = self._engine.next_grid_ns - int(SKIP_MARGIN_S * 1e9)
        self._lag.after_step(now_ns, self._engine.lag_ns(now_ns))
        if out.due or out.skipped or (unpaired and self._engine.next_grid_ns is not None):
            # Only ticks that found grid times due (or dropped) decide anything, and the one
            # that fixed the first grid time from what had come in: replay needs those.
            self._recording.note_tick(now_ns)
        self._outputs.publish(out, now_ns)
        self._report_problems(now_ns)
        for result in self._recording.poll(now_ns):
            if result.error is not None:
                self._outputs.snapshot_failed(str(result.error), now_ns)
                break
            if self._fits is not None and result.path is not None:
                self._fits.snapshot_written(result.request.event_id, result.path)
        if self._fits is not None:
            self._fits.poll(now_ns)

    def _on_summary(self) -> None:
        self._outputs.publish_summary(self._now_ns())

    def _on_markers(self) -> None:
        self._outputs.publish_markers(self._now_ns())

    # ------------------------------------------------------------------ diagnostics
    def _stream_diagnostic(self, topic: str) -> DiagnosticStatus:
        status = self._status[topic]
        level, message = status.level(self._now_ns(), self._latest_input_ns)
        return make_status(f"{NODE_NAME}: {topic}", LEVELS[level], message, status.values())

    def _alignment_diagnostic(self) -> DiagnosticStatus:
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
        path = self._output_dir / SUMMARY_FILE
        if self._finished:
            return path
        self._finished = True
        now_ns = self._now_ns()
        self._recording.note_tick(now_ns)
        self._outputs.tick_ns = now_ns
        self._outputs.publish(self._engine.finish(now_ns), now_ns)
        for result in self._recording.close_snapshots():
            if result.error is not None:
                self._outputs.snapshot_failed(str(result.error), now_ns)
        self._recording.close_input_recording()
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(json.dumps(self._run_summary(now_ns), indent=2, default=float))
        os.replace(partial, path)
        return path

    def _run_summary(self, now_ns: int) -> dict[str, Any]:
        """The engine's run summary with what the node knows: snapshots, refusals by topic, load."""
        summary = self._engine.run_summary()
        for event in summary["events"]:
            event["snapshot"] = self._recording.snapshot_paths.get(event["id"], "")
        summary["rejected_by_topic"] = {
            topic: dict(status.refused) for topic, status in self._status.items() if status.refused
        }
        summary["snapshot_error"] = self._recording.error
        summary["analyses"] = live_analyses(self._topic_of, lambda topic: self._status[topic].count,
                                            len(self._engine.joint_names or ()))
        summary["timing"]["clock_jumps"] = self.clock_jumps
        summary["load"]["behind_mode_s"] = round(self._lag.behind_total_ns(now_ns) * 1e-9, 3)
        summary["load"]["inputs_taken_after_stalls"] = self._lag.drained
        summary["load"]["inputs_skipped_behind"] = self._lag.skipped_inputs
        summary["load"]["drains_cut_short"] = self._lag.drains_cut_short
        return summary


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
