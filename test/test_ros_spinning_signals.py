"""run_node under real signals: status 0 however many SIGINT / SIGTERM arrive on the way out.

Each case runs a node in its own process (as an executable does) and signals it from
here: the first SIGINT while it spins, then a burst of SIGINT and SIGTERM while it
writes its summary (a slow one, so the burst surely lands there) or while the
interpreter exits (an atexit hook that waits). And a stop signal whose
KeyboardInterrupt is swallowed where it lands still ends the node.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is part of the make test environment")

pytestmark = pytest.mark.ros

_NODE = """
import atexit, sys, time
import rclpy
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from sim_real_bridge.ros.spinning import run_node

SLOW = sys.argv[1]


def say(text):
    print(text, flush=True)


class Slow(Node):
    def __init__(self):
        super().__init__("signal_probe")
        self.create_timer(0.01, lambda: None)

    def log_summary(self):
        say("SUMMARY_START")
        if SLOW == "summary":
            time.sleep(0.6)
        say("SUMMARY_DONE")


def at_exit():
    say("ATEXIT_START")
    if SLOW == "exit":
        time.sleep(0.6)
    say("ATEXIT_DONE")


atexit.register(at_exit)
rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
sys.exit(run_node(Slow, "signal_probe", before_spin=lambda: say("SPINNING")))
"""


def _wait_for_line(process: subprocess.Popen, marker: str, seen: list[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.strip() == marker:
            return
    raise AssertionError(f"{marker} never printed; output: {''.join(seen)}")


def _burst(pid: int, count: int) -> None:
    for index in range(count):
        os.kill(pid, signal.SIGINT if index % 2 == 0 else signal.SIGTERM)
        time.sleep(0.02)


@pytest.mark.parametrize("slow_part", ["summary", "exit"])
def test_signals_during_shutdown_leave_status_0(slow_part: str, tmp_path: Path, repo_root: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(repo_root), PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [sys.executable, "-c", _NODE, slow_part], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    seen: list[str] = []
    try:
        _wait_for_line(process, "SPINNING", seen)
        process.send_signal(signal.SIGINT)
        _wait_for_line(process, "SUMMARY_START" if slow_part == "summary" else "ATEXIT_START", seen)
        _burst(process.pid, 12)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = "".join(seen) + out
    assert process.returncode == 0, f"status {process.returncode}\n{output}\n{err}"
    assert "SUMMARY_DONE" in output and "ATEXIT_DONE" in output, output
    assert "stopped by SIGINT: shut down cleanly" in err
    assert "KeyboardInterrupt" not in err and "Traceback" not in err, err


def test_sigterm_alone_is_a_clean_stop(tmp_path: Path, repo_root: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(repo_root), PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [sys.executable, "-c", _NODE, "none"], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    seen: list[str] = []
    try:
        _wait_for_line(process, "SPINNING", seen)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "SUMMARY_DONE" in "".join(seen) + out
    assert "stopped by SIGTERM: shut down cleanly" in err


def test_a_stop_signal_during_a_callback_lets_it_finish_then_ends_the_node() -> None:
    """While spinning a stop signal raises nothing (a KeyboardInterrupt could land inside
    the executor's construction of a Task, or in a finalizer where Python drops it): the
    callback finishes, then the node ends and writes its summary."""
    from rclpy.node import Node
    from rclpy.signals import SignalHandlerOptions

    from sim_real_bridge.ros import spinning

    class Probe(Node):
        def __init__(self) -> None:
            super().__init__("signal_probe")
            self.finished = 0
            self.interrupted_inside = 0
            self.summaries = 0
            self.create_timer(0.01, self._fire)

        def _fire(self) -> None:
            if self.finished:
                return
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.3)  # a handler that raised would interrupt this sleep
                self.finished += 1
            except KeyboardInterrupt:
                self.interrupted_inside += 1

        def log_summary(self) -> None:
            self.summaries += 1

    handlers = {sig: signal.getsignal(sig) for sig in spinning.STOP_SIGNALS}
    spinning._interrupted.clear()
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    nodes: list[Probe] = []

    def factory() -> Probe:
        nodes.append(Probe())
        return nodes[0]

    try:
        status = spinning.run_node(factory, "signal_probe")
    finally:
        rclpy.try_shutdown()
        spinning._interrupted.clear()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert status == 0
    assert nodes[0].interrupted_inside == 0, "the stop signal raised inside the callback"
    assert nodes[0].finished == 1 and nodes[0].summaries == 1


def test_a_stop_signal_during_executor_construction_waits_until_it_is_built() -> None:
    """A SIGINT inside a constructor would leave a half-built object whose __del__ fails."""
    from sim_real_bridge.ros import spinning

    handlers = {sig: signal.getsignal(sig) for sig in spinning.STOP_SIGNALS}
    spinning._interrupted.clear()
    finished_block = False
    try:
        with pytest.raises(KeyboardInterrupt):
            with spinning._stop_signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)  # a handler that raised would interrupt this sleep
                finished_block = True
        assert finished_block
        assert spinning.interrupted()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # later signals are ignored
    finally:
        spinning._interrupted.clear()
        spinning._stop_signal.clear()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
