"""Runs of a replay: which bags each run reads, what a run returns, its labels.

Each command-line input becomes one or more runs:

- a bag (a ``.mcap`` or ``.db3`` file, or a directory with ``metadata.yaml``, split
  files included) is one run;
- a directory without ``metadata.yaml`` holds several bags (subdirectories with
  ``metadata.yaml``, ``.mcap`` and ``.db3`` files), each one run;
- pairing: a bag that has only one side's ``joint_states`` topic is merged into one
  run with the one-sided bag of the other side whose log-time range overlaps it
  most (both sides in two bags); a one-sided bag with no partner fails, naming the
  missing topic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sim_real_bridge.errors import BagError, ConfigError, SimRealBridgeError
from sim_real_bridge.offline.replay.topics import run_topics
from sim_real_bridge.offline.replay_config import SIDES, ReplayConfig

LABEL_KEYS = ("sim_success", "real_success", "policy")


@dataclass(frozen=True)
class RunSpec:
    """One run: its name and the bag paths it reads (one, or two for a split pair)."""

    name: str
    bags: tuple[str, ...]


@dataclass
class RunResult:
    """What one per-run job returns (plain data).

    Attributes:
        error: one line naming the bag and topic at fault (failed runs).
        out_dir: where the run's outputs are (or would have been).
        summary: the run's summary.json content.
        rollup_row: the run's row of the roll-up (report_href relative to the roll-up).
        cpu_s: CPU seconds the job took; data_s: seconds of recording it analysed.
    """

    name: str
    bags: tuple[str, ...]
    ok: bool
    error: str | None = None
    out_dir: str | None = None
    summary: dict[str, Any] | None = None
    rollup_row: dict[str, Any] | None = None
    cpu_s: float = 0.0
    data_s: float = 0.0


def _bags_in(path: Path) -> list[Path]:
    """The bags one input names (see the module docstring)."""
    if not path.exists():
        raise BagError(f"bag {path} does not exist")
    if path.is_file() or (path / "metadata.yaml").is_file():
        return [path]
    found = sorted(
        p for p in path.iterdir()
        if (p.is_dir() and (p / "metadata.yaml").is_file()) or (p.is_file() and p.suffix in (".mcap", ".db3"))
    )
    if not found:
        raise BagError(f"bag {path}: directory has no metadata.yaml and no bag in it (.mcap, .db3 or bag directories)")
    return found


def run_name(path: Path) -> str:
    """A run's name from its bag: the file's stem, or the directory's name."""
    return path.stem if path.is_file() else path.name


def _side_profile(path: Path, config: ReplayConfig) -> tuple[set[str], tuple[int, int] | None]:
    """Sides whose joint_states the bag holds, and its log-time range (None when empty)."""
    from sim_real_bridge.offline.bag_io import open_bags

    with open_bags(path) as bags:
        topics = bags.topics()
        chosen = run_topics(config, topics, ", ".join(bags.labels))
        sides = {s for s in SIDES if chosen[s]["joint_states"] in topics}
        try:
            span = bags.time_range_ns()
        except BagError:
            span = None
    return sides, span


def _pair_one_sided(bags: list[Path], profiles: dict[Path, tuple[set[str], tuple[int, int] | None]]
                    ) -> dict[Path, Path]:
    """sim-only bag -> the real-only bag whose log-time range overlaps it most."""
    one_sided = {s: [b for b in bags if profiles[b][0] == {s}] for s in SIDES}
    paired: dict[Path, Path] = {}
    for sim_bag in one_sided["sim"]:
        best, best_overlap = None, 0
        for real_bag in one_sided["real"]:
            if real_bag in paired.values():
                continue
            a, b = profiles[sim_bag][1], profiles[real_bag][1]
            overlap = 0 if a is None or b is None else min(a[1], b[1]) - max(a[0], b[0])
            if overlap > best_overlap:
                best, best_overlap = real_bag, overlap
        if best is not None:
            paired[sim_bag] = best
    return paired


def _unique_names(runs: list[RunSpec]) -> list[RunSpec]:
    """Runs renamed ``name_2``, ``name_3`` ... where names repeat."""
    names: dict[str, int] = {}
    unique = []
    for run in runs:
        count = names.get(run.name, 0)
        names[run.name] = count + 1
        unique.append(run if count == 0 else RunSpec(f"{run.name}_{count + 1}", run.bags))
    return unique


def discover_runs(inputs: Sequence[Path | str], config: ReplayConfig) -> tuple[list[RunSpec], list[RunResult]]:
    """Expand the inputs into runs, pairing one-sided bags (see the module docstring).

    Returns:
        (runs, failures): inputs that cannot be read or paired become failed results.
    """
    bags: list[Path] = []
    failures: list[RunResult] = []
    for raw in inputs:
        path = Path(raw)
        try:
            bags.extend(_bags_in(path))
        except BagError as error:
            failures.append(RunResult(run_name(path), (str(path),), False, str(error)))
    profiles: dict[Path, tuple[set[str], tuple[int, int] | None]] = {}
    for bag in bags:
        try:
            profiles[bag] = _side_profile(bag, config)
        except SimRealBridgeError:
            profiles[bag] = ({"sim", "real"}, None)  # the job itself reports the error
    paired = _pair_one_sided(bags, profiles)
    runs: list[RunSpec] = []
    for bag in bags:
        if bag in paired.values():
            continue
        if bag in paired:
            partner = paired[bag]
            runs.append(RunSpec(f"{run_name(bag)}+{run_name(partner)}", (str(bag), str(partner))))
        else:
            runs.append(RunSpec(run_name(bag), (str(bag),)))
    return _unique_names(runs), failures


def _custom_labels(meta: Path, metadata_cache: dict[Path, Any] | None) -> dict[str, Any]:
    """Labels in ``custom_data`` of a bag's metadata.yaml (values as YAML text)."""
    from sim_real_bridge.offline.bag_io import load_metadata_yaml

    try:
        info = (load_metadata_yaml(meta, metadata_cache) or {}).get("rosbag2_bagfile_information", {})
    except yaml.YAMLError:
        return {}
    custom = info.get("custom_data") or {}
    labels = {}
    for key in LABEL_KEYS:
        if key in custom:
            value = custom[key]
            labels[key] = yaml.safe_load(value) if key != "policy" and isinstance(value, str) else value
    return labels


def read_labels(bag_paths: Sequence[str], metadata_cache: dict[Path, Any] | None = None) -> dict[str, Any]:
    """Success labels of a run: a ``labels.yaml`` in a bag directory or
    ``<bag file stem>.labels.yaml`` beside a bag file, with keys ``sim_success``,
    ``real_success`` (bool or rate in [0, 1]) and optional ``policy``; or ``custom_data``
    of the bag's metadata.yaml with the same keys.

    ``metadata_cache``: see :func:`~sim_real_bridge.offline.bag_io.load_metadata_yaml`
    (a job gives the same one to :func:`~sim_real_bridge.offline.bag_io.open_bags`).

    Raises:
        ConfigError: a labels file is not valid YAML or not a mapping.
    """
    labels: dict[str, Any] = {}
    for raw in bag_paths:
        path = Path(raw)
        meta = path / "metadata.yaml" if path.is_dir() else None
        if meta is not None and meta.is_file():
            labels.update(_custom_labels(meta, metadata_cache))
        label_file = path / "labels.yaml" if path.is_dir() else path.with_name(f"{path.stem}.labels.yaml")
        if label_file.is_file():
            try:
                data = yaml.safe_load(label_file.read_text())
            except yaml.YAMLError as error:
                raise ConfigError(f"labels {label_file}: not valid YAML: {error}") from None
            if not isinstance(data, dict):
                raise ConfigError(f"labels {label_file}: expected a mapping with sim_success, real_success")
            labels.update({k: data[k] for k in LABEL_KEYS if k in data})
    return labels
