"""Diagnostics helpers: status building, periodic publication over DDS, bad-input counting."""

from __future__ import annotations

import time

import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.executors import SingleThreadedExecutor

from sim_real_bridge.ros import diagnostics
from sim_real_bridge.ros.diagnostics import DiagnosticsPublisher, InputProblems, make_status


def test_make_status_formats_values_and_levels() -> None:
    status = make_status("node: part", 1, "careful", {"count": 3, "ratio": 1 / 3, "ok": True},
                         hardware_id="arm")
    assert status.level == DiagnosticStatus.WARN
    assert (status.name, status.message, status.hardware_id) == ("node: part", "careful", "arm")
    assert [(kv.key, kv.value) for kv in status.values] == [
        ("count", "3"), ("ratio", "0.333333"), ("ok", "True")
    ]
    assert make_status("n", diagnostics.ERROR, "m").level == DiagnosticStatus.ERROR
    assert make_status("n", diagnostics.OK, "m").values == []


def test_input_problems_first_occurrence_and_counts() -> None:
    problems = InputProblems()
    assert problems.record("/a", "nan")
    assert not problems.record("/a", "nan")
    assert problems.record("/b", "nan")
    assert problems.record("/a", "short")
    assert problems.count() == 4
    assert problems.count("nan") == 3
    assert problems.by_reason() == {"nan": 3, "short": 1}
    assert problems.as_values() == {"bad_input./a.nan": 2, "bad_input./a.short": 1,
                                    "bad_input./b.nan": 1}


@pytest.mark.ros
def test_publisher_sends_every_provider_status() -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node("diagnostics_test", context=context)
        publisher = DiagnosticsPublisher(node, period_s=0.1)
        publisher.add(lambda: make_status("a", diagnostics.OK, "fine"))
        publisher.add(lambda: make_status("b", diagnostics.STALE, "old"))
        received: list[DiagnosticArray] = []
        node.create_subscription(DiagnosticArray, "/diagnostics", received.append, 10)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        deadline = time.monotonic() + 10.0
        while not received and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        assert received
        assert [s.name for s in received[0].status] == ["a", "b"]
        assert received[0].status[1].level == DiagnosticStatus.STALE
        assert publisher.publish_now().header.stamp.sec > 0
        executor.shutdown()
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
