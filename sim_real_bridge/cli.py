"""The ``sim-real-bridge`` command line.

    sim-real-bridge demo [--scenario NAME|PATH] [--duration S] [--summary PATH] [--record DIR]
    sim-real-bridge replay BAG_OR_DIR... --out DIR [--workers N | --dask ADDRESS] [--config YAML]
                           [--sim NS_OR_TOPIC --real NS_OR_TOPIC]
    sim-real-bridge inspect BAG... [--json]
    sim-real-bridge fit BAG_OR_SNAPSHOT... --model MJCF_OR_ROBOT --out DIR [--params NAMES]
    sim-real-bridge scenarios [generate --seed S --count N --out DIR [--robot NAME]]
    sim-real-bridge graph {demo,bridge}

Subcommands import what they need when they run, so ``replay`` and ``scenarios``
work from a plain ``pip install`` without ROS 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from sim_real_bridge.errors import SimRealBridgeError


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a seed >= 0, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="sim-real-bridge",
        description="Audit a simulator against its physical twin: aligned residuals and attributed gap events.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run the built-in MuJoCo robot, its stand-in, the mirror and the monitor")
    demo.add_argument("--scenario", default="tour", help="built-in scenario name or path to a scenario YAML (default: tour)")
    demo.add_argument("--duration", type=_positive_float, default=None, help="seconds to run (default: the scenario's duration_s)")
    demo.add_argument("--summary", type=Path, default=None, help="where to write the summary JSON (default: OUT/summary.json)")
    demo.add_argument("--record", type=Path, default=None, help="record every topic to this directory as a rosbag2 MCAP bag")
    demo.add_argument("--out", type=Path, default=Path("out/demo"), help="output directory for snapshots, event log and logs (default: out/demo)")
    demo.add_argument("--no-live", action="store_true", help="no live terminal view; print progress lines instead")
    demo.add_argument("--robot", default=None, help="built-in robot (arm7, ur6, panda7; default: the scenario's robot)")

    replay = sub.add_parser("replay", help="analyse recorded rosbag2 bags (MCAP or sqlite3) without ROS")
    replay.add_argument("bags", nargs="+", type=Path, metavar="BAG_OR_DIR", help="bag files, bag directories, or directories of bags")
    replay.add_argument("--out", type=Path, required=True, help="output directory for summary.json, report.html, divergence.mcap")
    where = replay.add_mutually_exclusive_group()
    where.add_argument("--workers", type=_positive_int, default=1, help="bags processed in parallel here (default: 1)")
    where.add_argument("--dask", metavar="ADDRESS", default=None,
                       help="run the per-bag jobs on this dask.distributed scheduler (e.g. tcp://host:8786); "
                            "its workers must see the bags and --out at the same paths")
    replay.add_argument("--config", type=Path, default=None, help="topic mapping and analysis parameters (YAML)")
    replay.add_argument("--sim", metavar="NS_OR_TOPIC", default=None,
                        help="the reference side: a namespace (/leader: /leader/joint_states, /leader/wrench ...) "
                             "or its joint_states topic")
    replay.add_argument("--real", metavar="NS_OR_TOPIC", default=None,
                        help="the real side: a namespace or its joint_states topic (see `sim-real-bridge inspect`)")

    inspect = sub.add_parser("inspect", help="list a recording's topics, rates and the sim/real pairs replay would use")
    inspect.add_argument("bags", nargs="+", type=Path, metavar="BAG",
                         help="bag files or directories, read as one recording")
    inspect.add_argument("--json", action="store_true", help="print one JSON object")

    scenarios = sub.add_parser("scenarios", help="list the built-in scenarios, or generate random ones")
    scenario_sub = scenarios.add_subparsers(dest="scenarios_command", metavar="generate")
    generate = scenario_sub.add_parser(
        "generate", help="write N random valid scenarios, deterministic per seed (seeds >= 100000: outside evaluation)"
    )
    generate.add_argument("--seed", type=_seed, required=True, help="seed of the first scenario (scenario i has seed S+i)")
    generate.add_argument("--count", type=_positive_int, default=1, help="number of scenarios (default: 1)")
    generate.add_argument("--out", type=Path, required=True, help="directory for gen_<seed>.yaml files")
    generate.add_argument("--robot", default=None, help="built-in robot for every scenario (default: drawn per scenario)")

    fit = sub.add_parser("fit", help="fit simulator parameters to recorded real runs (mujoco.sysid)")
    fit.add_argument("inputs", nargs="+", type=Path, metavar="BAG_OR_SNAPSHOT", help="bags, bag directories or snapshot files")
    fit.add_argument("--model", required=True, help="MJCF file or built-in robot name (e.g. arm7)")
    fit.add_argument("--out", type=Path, required=True, help="output directory for fit.json, fit.html and model_fitted.xml")
    fit.add_argument("--params", default=None, help="comma-separated parameter names, kinds or groups (default: from the events' categories)")
    fit.add_argument("--window", action="append", default=[], metavar="START:END", help="fit window, seconds after the first command (repeatable)")

    graph = sub.add_parser("graph", help="print the node graph the launch files and the demo start")
    graph.add_argument("which", choices=("demo", "bridge"))
    return parser


def _cmd_demo(args: argparse.Namespace) -> int:
    from sim_real_bridge.ros.demo_session import DemoRequest, run_demo

    return run_demo(
        DemoRequest(
            scenario=args.scenario,
            duration_s=args.duration,
            summary_path=args.summary,
            record_dir=args.record,
            out_dir=args.out,
            live=not args.no_live,
            robot=args.robot,
        )
    )


def _cmd_replay(args: argparse.Namespace) -> int:
    from sim_real_bridge.offline.replay import ReplayRequest, run_replay

    return run_replay(ReplayRequest(inputs=list(args.bags), out_dir=args.out, workers=args.workers,
                                    config_path=args.config, sim=args.sim, real=args.real, dask=args.dask))


def _cmd_inspect(args: argparse.Namespace) -> int:
    import json

    from sim_real_bridge.offline.bags.inspect import format_inspection, inspect_bags

    inspection = inspect_bags(args.bags)
    print(json.dumps(inspection.as_dict()) if args.json else format_inspection(inspection))
    return 0


def _cmd_fit(args: argparse.Namespace) -> int:
    from sim_real_bridge.fit.command import FitRequest, run_fit
    from sim_real_bridge.fit.errors import FitError

    spans = []
    for text in args.window:
        try:
            start, end = (float(v) for v in text.split(":"))
        except ValueError:
            raise FitError(f"--window {text!r}: expected START:END in seconds") from None
        spans.append((start, end))
    params = [p for p in args.params.split(",")] if args.params else None
    return run_fit(FitRequest(inputs=args.inputs, model=args.model, out_dir=args.out, params=params, spans_s=spans))


def _cmd_scenarios(args: argparse.Namespace) -> int:
    if args.scenarios_command == "generate":
        _generate_scenarios(args)
    else:
        _list_scenarios()
    return 0


def _list_scenarios() -> None:
    from sim_real_bridge.sim.scenario import load_scenario, scenario_names

    for name in scenario_names():
        scenario = load_scenario(name)
        kinds = ", ".join(f"{i.category}/{i.kind}" for i in scenario.injections) or "no injections"
        print(f"{name:24s} {scenario.robot:7s} {scenario.task:8s} {scenario.duration_s:6.1f} s  {kinds}")


def _generate_scenarios(args: argparse.Namespace) -> None:
    from sim_real_bridge.sim.generate import write_scenarios
    from sim_real_bridge.sim.scenario import load_scenario

    for path in write_scenarios(args.seed, args.count, args.out, args.robot):
        scenario = load_scenario(path)
        kinds = ", ".join(f"{i.category}/{i.kind}" for i in scenario.injections) or "no injections"
        print(f"{path}  {scenario.robot:7s} {scenario.task:6s} {scenario.duration_s:6.1f} s  {kinds}")


def _cmd_graph(args: argparse.Namespace) -> int:
    from sim_real_bridge.resources import share_path
    from sim_real_bridge.ros.graph import GRAPHS, GraphOptions
    from sim_real_bridge.ros.runner import ros_arguments

    for spec in GRAPHS[args.which](GraphOptions(config_dir=share_path("config"))):
        print(f"{spec.fully_qualified_name}: {spec.executable} {' '.join(ros_arguments(spec))}")
        for topic in spec.publishes:
            print(f"    publishes {topic.name} [{topic.msg_type}]")
    return 0


COMMANDS = {"demo": _cmd_demo, "replay": _cmd_replay, "inspect": _cmd_inspect, "fit": _cmd_fit,
            "scenarios": _cmd_scenarios, "graph": _cmd_graph}


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code.

    Errors of ours are printed as one line naming what is at fault, with exit code 2.
    """
    args = build_parser().parse_args(argv)
    try:
        code = COMMANDS[args.command](args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader left (`sim-real-bridge scenarios | head`): stop quietly; point stdout
        # at devnull so that the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except SimRealBridgeError as error:
        print(f"sim-real-bridge {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
