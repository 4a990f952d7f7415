"""Starts a node graph as separate processes without ROS 2's `launch`.

Each :class:`~sim_real_bridge.ros.graph.NodeSpec` becomes one
``python -m sim_real_bridge.nodes.<executable> --ros-args ...`` process, with the
same name, namespace, parameter files and remappings the launch files give it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sim_real_bridge.errors import ConfigError
from sim_real_bridge.ros.graph import NodeSpec

_PACKAGE_PARENT = Path(__file__).resolve().parents[2]


def _param_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # Quoted so YAML keeps it a string ("1.0" or "true" stay strings).
        return '"' + value.replace('"', '\\"') + '"'
    return str(value)


def ros_arguments(spec: NodeSpec) -> list[str]:
    """Command-line ``--ros-args`` for one node, as launch_ros would pass them.

    With ``ROS_SECURITY_ENABLE=true`` each node also gets its SROS2 enclave.

    Args:
        spec: The node.

    Returns:
        Arguments starting with ``--ros-args``.
    """
    args = ["--ros-args", "-r", f"__node:={spec.name}"]
    if os.environ.get("ROS_SECURITY_ENABLE", "").lower() == "true":
        args += ["--enclave", spec.enclave]
    if spec.namespace:
        args += ["-r", f"__ns:={spec.namespace}"]
    for path in spec.parameter_files:
        args += ["--params-file", str(path)]
    for key, value in spec.parameters:
        args += ["-p", f"{key}:={_param_value(value)}"]
    for source, target in spec.remappings:
        args += ["-r", f"{source}:={target}"]
    return args


def node_command(spec: NodeSpec) -> list[str]:
    """The full command line that starts ``spec`` with this interpreter."""
    return [sys.executable, "-m", f"sim_real_bridge.nodes.{spec.executable}", *ros_arguments(spec)]


def graph_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for node processes: this package importable, DDS kept on localhost.

    A ROS_DOMAIN_ID already set is kept; ROS_AUTOMATIC_DISCOVERY_RANGE defaults to
    LOCALHOST so nothing of ours multicasts on the machine's network unless asked.
    """
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_PACKAGE_PARENT), env.get("PYTHONPATH", "")) if p
    )
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


@dataclass
class RunningNode:
    """A started node process and where its output goes."""

    spec: NodeSpec
    process: subprocess.Popen
    log_path: Path | None


class GraphRunner:
    """Starts, watches and stops the processes of a graph.

    Use as a context manager; leaving it sends SIGINT to every node (as Ctrl-C
    would), then SIGTERM and SIGKILL to any that do not exit in time.
    """

    def __init__(self, specs: Sequence[NodeSpec], log_dir: Path | None = None) -> None:
        """Prepares the runner.

        Args:
            specs: Nodes to start, in order.
            log_dir: If given, each node's stdout and stderr go to ``<name>.log`` there;
                otherwise they go to this process's stderr.
        """
        names = [spec.fully_qualified_name for spec in specs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"node graph has duplicate node names: {', '.join(duplicates)}")
        self._specs = list(specs)
        self._log_dir = log_dir
        self._log_files: list[IO[bytes]] = []
        self.nodes: list[RunningNode] = []

    def start(self) -> None:
        """Starts every node process."""
        env = graph_environment()
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
        for spec in self._specs:
            log_path = None
            out: IO[bytes] | int | None = None
            if self._log_dir is not None:
                log_path = self._log_dir / f"{spec.name}.log"
                handle = open(log_path, "wb")
                self._log_files.append(handle)
                out = handle
            process = subprocess.Popen(
                node_command(spec),
                env=env,
                stdout=out if out is not None else sys.stderr,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.nodes.append(RunningNode(spec, process, log_path))

    def failed(self) -> list[RunningNode]:
        """Nodes whose process has already exited."""
        return [node for node in self.nodes if node.process.poll() is not None]

    def stop(self, timeout_s: float = 10.0) -> dict[str, int]:
        """Stops every node; returns each node's exit code by name."""
        for node in self.nodes:
            if node.process.poll() is None:
                node.process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            remaining = max(0.1, deadline - time.monotonic())
            try:
                node.process.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                node.process.terminate()
                try:
                    node.process.wait(timeout=3.0)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()
        for handle in self._log_files:
            handle.close()
        self._log_files.clear()
        return {node.spec.name: node.process.returncode for node in self.nodes}

    def __enter__(self) -> GraphRunner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
