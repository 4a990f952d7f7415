"""run_node, which every node's executable runs: exit status, Ctrl-C races, clean-up."""

from __future__ import annotations

import signal

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is part of the make test environment")
from rclpy.node import Node  # noqa: E402
from rclpy.signals import SignalHandlerOptions  # noqa: E402

from sim_real_bridge.errors import ConfigError  # noqa: E402
from sim_real_bridge.ros import spinning  # noqa: E402

pytestmark = pytest.mark.ros


@pytest.fixture(autouse=True)
def fresh_context():
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    spinning._interrupted.clear()
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    yield
    rclpy.try_shutdown()
    spinning._interrupted.clear()
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


class _Probe(Node):
    """Raises from a timer callback; records its clean-up."""

    def __init__(self, error: BaseException, interrupt_first: bool) -> None:
        super().__init__("spinning_probe")
        self.summaries = 0
        self._error = error
        self._interrupt_first = interrupt_first
        self.create_timer(0.01, self._fire)

    def _fire(self) -> None:
        if self._interrupt_first:
            spinning._interrupted.set()  # as our SIGINT handler does before the error surfaces
        raise self._error

    def log_summary(self) -> None:
        self.summaries += 1


def test_bad_parameters_give_status_2() -> None:
    def factory() -> Node:
        raise ConfigError("parameter rate_hz must be positive")

    assert spinning.run_node(factory, "probe") == spinning.EXIT_BAD_PARAMETERS


def test_error_surfacing_from_rclpy_after_ctrl_c_is_a_clean_exit() -> None:
    # A KeyboardInterrupt inside rclpy's C++ take surfaces as a pybind11 RuntimeError.
    probes = []

    def factory() -> Node:
        probes.append(_Probe(RuntimeError("Unable to convert call argument '0' to Python object"), True))
        return probes[0]

    assert spinning.run_node(factory, "probe") == 0
    assert probes[0].summaries == 1
    assert not rclpy.ok()


def test_ctrl_c_in_a_callback_is_a_clean_exit_with_the_summary() -> None:
    probes = []

    def factory() -> Node:
        probes.append(_Probe(KeyboardInterrupt(), False))
        return probes[0]

    assert spinning.run_node(factory, "probe") == 0
    assert probes[0].summaries == 1


def test_a_real_error_without_an_interrupt_is_raised_after_clean_up() -> None:
    probes = []

    def factory() -> Node:
        probes.append(_Probe(RuntimeError("a bug"), False))
        return probes[0]

    with pytest.raises(RuntimeError, match="a bug"):
        spinning.run_node(factory, "probe")
    assert probes[0].summaries == 1


def test_sigint_and_sigterm_handlers_are_ours_while_running() -> None:
    seen = {}

    def factory() -> Node:
        seen["handlers"] = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
        return _Probe(KeyboardInterrupt(), False)

    spinning.run_node(factory, "probe")
    assert seen["handlers"] == (spinning._interrupt, spinning._interrupt)
