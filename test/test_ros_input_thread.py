"""InputThread over real DDS: it serves its subscriptions, the executor never does,
callback errors are reported and do not stop it, and stop() ends it."""

from __future__ import annotations

import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy", reason="rclpy is part of the make test environment")
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from sim_real_bridge.ros.input_thread import InputThread  # noqa: E402

pytestmark = pytest.mark.ros

QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)


@pytest.fixture
def nodes():
    rclpy.init()
    listener = rclpy.create_node("input_thread_listener")
    talker = rclpy.create_node("input_thread_talker")
    yield listener, talker
    listener.destroy_node()
    talker.destroy_node()
    rclpy.try_shutdown()


def _wait_for(condition, timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and not condition():
        time.sleep(0.01)
    return condition()


def test_thread_serves_its_subscriptions_and_the_executor_does_not(nodes) -> None:
    listener, talker = nodes
    lock = threading.Lock()
    errors: list[BaseException] = []
    inputs = InputThread(listener, lock, errors.append)
    got: list[tuple[bytes, str]] = []
    sub = listener.create_subscription(String, "/input_thread_test", lambda data: got.append(
        (data, threading.current_thread().name)), QOS, raw=True, callback_group=inputs.group)
    inputs.add(sub)
    inputs.start()
    pub = talker.create_publisher(String, "/input_thread_test", QOS)
    assert _wait_for(lambda: pub.get_subscription_count() == 1)
    executor = SingleThreadedExecutor()
    executor.add_node(listener)
    for i in range(300):
        pub.publish(String(data=f"m{i}"))
    # The executor spinning meanwhile finds nothing of the thread's to run.
    end = time.monotonic() + 10.0
    while time.monotonic() < end and len(got) < 300:
        executor.spin_once(timeout_sec=0.01)
    inputs.stop()
    executor.shutdown()
    assert len(got) == 300
    assert {name for _, name in got} == {"input_thread_listener_inputs"}
    assert isinstance(got[0][0], bytes)  # raw, as subscribed
    assert not errors
    assert inputs.wakes >= 1


def test_a_failing_callback_is_reported_and_later_messages_still_arrive(nodes) -> None:
    listener, talker = nodes
    errors: list[BaseException] = []
    inputs = InputThread(listener, threading.Lock(), errors.append)
    got: list[str] = []

    def callback(msg: String) -> None:
        if msg.data == "bad":
            raise ValueError("cannot use this one")
        got.append(msg.data)

    sub = listener.create_subscription(String, "/input_thread_errors", callback, QOS, callback_group=inputs.group)
    inputs.add(sub)
    inputs.start()
    pub = talker.create_publisher(String, "/input_thread_errors", QOS)
    assert _wait_for(lambda: pub.get_subscription_count() == 1)
    for data in ("a", "bad", "b"):
        pub.publish(String(data=data))
    assert _wait_for(lambda: got == ["a", "b"])
    inputs.stop()
    assert [type(e) for e in errors] == [ValueError]


def test_callbacks_hold_the_lock_and_stop_ends_the_thread(nodes) -> None:
    listener, talker = nodes
    lock = threading.Lock()
    inputs = InputThread(listener, lock, lambda e: None)
    held: list[bool] = []
    sub = listener.create_subscription(String, "/input_thread_lock", lambda m: held.append(lock.locked()), QOS,
                                       callback_group=inputs.group)
    inputs.add(sub)
    inputs.start()
    pub = talker.create_publisher(String, "/input_thread_lock", QOS)
    assert _wait_for(lambda: pub.get_subscription_count() == 1)
    with lock:  # while a timer holds the lock, messages wait
        pub.publish(String(data="x"))
        time.sleep(0.3)
        assert held == []
    assert _wait_for(lambda: held == [True])
    inputs.stop()
    assert not inputs._thread.is_alive()


def test_a_subscription_outside_its_group_is_refused(nodes) -> None:
    listener, _ = nodes
    inputs = InputThread(listener, threading.Lock(), lambda e: None)
    sub = listener.create_subscription(String, "/input_thread_other", lambda m: None, QOS)
    with pytest.raises(ValueError, match="callback_group=InputThread.group"):
        inputs.add(sub)
