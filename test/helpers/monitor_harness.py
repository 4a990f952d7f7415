"""A divergence_monitor node plus a peer node playing both robots, in one executor.

Shared by test_divergence_monitor.py, test_faults.py and test_fuzz_monitor.py. The
peer publishes sim and real ``joint_states`` and ``wrench`` at ``RATE_HZ`` stamped on
the monitor's clock (or, with ``sim_clock=True``, on a ``/clock`` the peer publishes
itself, as a simulator would), and records every monitor output.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import WrenchStamped
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState

from sim_real_bridge.msg import ContactResidual, DivergenceSummary, GapEvent, JointDivergence
from sim_real_bridge.nodes.divergence_monitor import DivergenceMonitor

JOINTS = [f"joint{i}" for i in range(1, 8)]
RATE_HZ = 200.0
LEVEL_OK, LEVEL_WARN, LEVEL_ERROR, LEVEL_STALE = b"\x00", b"\x01", b"\x02", b"\x03"


def set_stamp(msg: Any, stamp_ns: int) -> None:
    """Write an integer-ns stamp into ``msg.header.stamp``."""
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 1_000_000_000)


class Harness:
    """A monitor node plus a publisher node playing both robots.

    Args:
        output_dir: the monitor's ``output_dir``.
        sim_clock: run the monitor on ``use_sim_time`` with the peer publishing /clock.
        **parameters: further monitor parameters (dotted names as keyword dicts are
            not possible, so pass them through ``extra_parameters``).
        extra_parameters: monitor parameters whose names are not identifiers.
    """

    def __init__(self, output_dir: Path, sim_clock: bool = False,
                 extra_parameters: dict[str, object] | None = None, **parameters: object) -> None:
        params = [Parameter("output_dir", value=str(output_dir)),
                  Parameter("snapshot_pre_s", value=1.0), Parameter("snapshot_post_s", value=0.5)]
        # The executor serves the inputs here, so a spin delivers and analyses them in
        # step with the test; the input thread has its own tests.
        merged = {"input_thread": False, **parameters, **(extra_parameters or {})}
        params += [Parameter(k, value=v) for k, v in merged.items()]
        self.sim_clock = sim_clock
        self.sim_time_ns = 1_000 * 1_000_000_000
        if sim_clock:
            params.append(Parameter("use_sim_time", value=True))
        self.monitor = DivergenceMonitor(parameter_overrides=params)
        self.peer = rclpy.create_node("robots_under_test")
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.pubs = {
            (side, stream): self.peer.create_publisher(kind, f"/{side}/{stream}", qos)
            for side in ("sim", "real") for stream, kind in (("joint_states", JointState), ("wrench", WrenchStamped))
        }
        self.clock_pub = self.peer.create_publisher(Clock, "/clock", qos) if sim_clock else None
        self.received: dict[str, list] = {"joints": [], "contact": [], "events": [], "summary": [], "diagnostics": []}
        for topic, kind, key in (
            ("/divergence/joints", JointDivergence, "joints"), ("/divergence/contact", ContactResidual, "contact"),
            ("/divergence/events", GapEvent, "events"), ("/divergence/summary", DivergenceSummary, "summary"),
            ("/diagnostics", DiagnosticArray, "diagnostics"),
        ):
            self.peer.create_subscription(kind, topic, self.received[key].append, qos)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.monitor)
        self.executor.add_node(self.peer)
        self.t = 0.0
        self._sample_ns: int | None = None
        self._schedule: tuple[float, int, float] | None = None  # (start, its clock ns, next sample)
        if sim_clock:
            self.publish_clock()

    def publish_clock(self) -> None:
        """Publish the peer's simulated time on /clock (sim_clock mode)."""
        assert self.clock_pub is not None
        msg = Clock()
        msg.clock.sec, msg.clock.nanosec = divmod(self.sim_time_ns, 1_000_000_000)
        self.clock_pub.publish(msg)

    def now_ns(self) -> int:
        """Stamp for the next message: the simulated time, the sample instant during
        :meth:`play`, or else the monitor's clock."""
        if self.sim_clock:
            return self.sim_time_ns
        if self._sample_ns is not None:
            return self._sample_ns
        return self.monitor.get_clock().now().nanoseconds

    def joint_state(self, q: list[float], stamp_ns: int | None = None, names: list[str] | None = None) -> JointState:
        msg = JointState(name=list(names if names is not None else JOINTS), position=list(q),
                         velocity=[0.0] * len(q), effort=[0.0] * len(q))
        set_stamp(msg, self.now_ns() if stamp_ns is None else stamp_ns)
        return msg

    def wrench(self, fz: float, stamp_ns: int | None = None, frame_id: str = "ft_sensor") -> WrenchStamped:
        msg = WrenchStamped()
        set_stamp(msg, self.now_ns() if stamp_ns is None else stamp_ns)
        msg.header.frame_id = frame_id
        msg.wrench.force.z = fz
        return msg

    def play(self, seconds: float, real_offset_rad: Callable[[float], float] = lambda t: 0.0,
             sides: tuple[str, ...] = ("sim", "real"), extra: Callable[[], None] | None = None,
             streams: tuple[str, ...] = ("joint_states", "wrench")) -> None:
        """Publishes ``seconds`` worth of samples of both robots, spinning in between.

        The sample count is fixed (``seconds * RATE_HZ``) however loaded the machine is:
        samples are due on the RATE_HZ schedule and published late, in a burst, when the
        process fell behind. Messages are stamped with their sample instant on the RATE_HZ grid, as a robot's
        hardware clock would; a late publication (this process busy spinning the
        monitor) shows as transport delay, not as stamp jitter. A call soon after the
        previous one (under a second) resumes its schedule, publishing the samples due
        in between first: the robots kept sampling while the test checked something.
        """
        period = 1.0 / RATE_HZ
        now = time.monotonic()
        if self._schedule is not None and now - self._schedule[2] < 1.0:
            start_mono, start_clock_ns, next_pub = self._schedule
        else:
            start_mono, start_clock_ns = now, self.monitor.get_clock().now().nanoseconds
            next_pub = now
        remaining = int(round(seconds * RATE_HZ))
        while remaining > 0:
            if time.monotonic() >= next_pub:
                remaining -= 1
                self._sample_ns = start_clock_ns + int((next_pub - start_mono) * 1e9)
                next_pub += period
                self.t += period
                if self.sim_clock:
                    self.sim_time_ns += int(period * 1e9)
                    self.publish_clock()
                q_sim = [0.3 * math.sin(self.t + i) for i in range(len(JOINTS))]
                for side in sides:
                    offset = real_offset_rad(self.t) if side == "real" else 0.0
                    if "joint_states" in streams:
                        self.pubs[(side, "joint_states")].publish(self.joint_state([q + offset for q in q_sim]))
                    if "wrench" in streams:
                        self.pubs[(side, "wrench")].publish(self.wrench(-5.0))
                if extra is not None:
                    extra()
                self._sample_ns = None
            self.executor.spin_once(timeout_sec=0.001)
        self._schedule = (start_mono, start_clock_ns, next_pub)

    def spin_until(self, condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if condition():
                return True
            self.executor.spin_once(timeout_sec=0.05)
        return condition()

    def statuses(self) -> dict[str, object]:
        """The latest DiagnosticStatus of each name seen on /diagnostics."""
        latest: dict[str, object] = {}
        for array in self.received["diagnostics"]:
            for status in array.status:
                latest[status.name] = status
        return latest

    def values(self, status_name: str) -> dict[str, str]:
        """Key-values of the latest status named ``status_name`` ({} if none yet)."""
        status = self.statuses().get(status_name)
        return {kv.key: kv.value for kv in getattr(status, "values", [])}

    def close(self) -> None:
        self.executor.shutdown()
        self.monitor.destroy_node()
        self.peer.destroy_node()
