"""Many runs: jobs in this process, a process pool (``--workers``) or a dask cluster
(``--dask``), the roll-up of their results, and what `sim-real-bridge replay` prints.

One run writes its outputs straight into ``--out``; several runs write theirs into
``--out/<run name>/`` beside the roll-up ``--out/summary.json`` and ``--out/report.html``.
A single run that fails is an error (one line, exit code 2, nothing written); among
several, the others complete, the roll-up lists the failures and the exit code is 1.
"""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim_real_bridge.errors import BagError, ConfigError
from sim_real_bridge.offline.replay.job import REPORT_NAME, SUMMARY_NAME, _finite, remove_outputs, replay_run, write_json
from sim_real_bridge.offline.replay.runs import RunResult, RunSpec, discover_runs
from sim_real_bridge.offline.replay_config import ReplayConfig, load_replay_config

#: A replay shows a progress bar once it has taken this long (on a terminal).
PROGRESS_AFTER_S = 2.0
#: How long to wait for a dask scheduler before giving up.
DASK_CONNECT_TIMEOUT_S = 10.0


@dataclass
class ReplayRequest:
    """What `sim-real-bridge replay` was asked to do.

    Attributes:
        sim, real: ``--sim``/``--real``: a namespace or a joint_states topic per side.
        dask: a dask.distributed scheduler address: jobs run there instead of here.
    """

    inputs: list[Path]
    out_dir: Path
    workers: int = 1
    config_path: Path | None = None
    sim: str | None = None
    real: str | None = None
    dask: str | None = None


class Progress:
    """Lines per finished run; a rich progress bar too, on a terminal, once the replay
    has taken :data:`PROGRESS_AFTER_S` (quiet when stdout is not a terminal either)."""

    def __init__(self, runs: Sequence[RunSpec], stream: Any = None, extra: int = 0) -> None:
        self.stream = stream or sys.stderr
        self.names = [run.name for run in runs]
        self.total = len(runs) + extra
        self.done = 0
        self.started = time.monotonic()
        self.rich: Any = None
        self.tasks: dict[str, Any] = {}
        self.fractions: dict[str, float] = {}
        self.terminal = all(getattr(s, "isatty", lambda: False)() for s in (self.stream, sys.stdout))

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.rich is not None:
            self.rich.stop()

    def _bar(self) -> Any:
        """The rich progress display, started once the replay has taken long enough."""
        if self.rich is None and self.terminal and time.monotonic() - self.started >= PROGRESS_AFTER_S:
            from rich.console import Console
            from rich.progress import BarColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

            self.rich = RichProgress(TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
                                     console=Console(file=self.stream))
            self.overall = self.rich.add_task("all runs", total=self.total, completed=self.done)
            self.tasks = {name: self.rich.add_task(f"  {name}", total=1.0, completed=self.fractions.get(name, 0.0))
                          for name in self.names}
            self.rich.start()
        return self.rich

    def poll(self) -> None:
        """Start the bar when it is due (called while waiting for jobs)."""
        self._bar()

    def update(self, name: str, fraction: float) -> None:
        """A run's analysis is ``fraction`` done."""
        self.fractions[name] = fraction
        bar = self._bar()
        if bar is not None and name in self.tasks:
            bar.update(self.tasks[name], completed=fraction)

    def finished(self, result: RunResult) -> None:
        """A run ended: one line, and the bars advance."""
        self.done += 1
        if result.ok:
            events = len(result.summary["events"]) if result.summary else 0
            line = f"replay [{self.done}/{self.total}] {result.name}: ok, {events} events, {_data_text(result)}"
        else:
            line = f"replay [{self.done}/{self.total}] {result.name}: FAILED: {result.error}"
        bar = self._bar()
        if bar is not None:
            if result.name in self.tasks:
                bar.update(self.tasks[result.name], completed=1.0,
                           description=f"  {result.name} {'ok' if result.ok else 'FAILED'}")
            bar.advance(self.overall)
            bar.console.print(line)
        else:
            print(line, file=self.stream, flush=True)


def _worker_failed(run: RunSpec, error: BaseException) -> RunResult:
    return RunResult(run.name, run.bags, False, f"bag(s) {', '.join(run.bags)}: worker failed: {error}")


def _local_jobs(runs: Sequence[RunSpec], config: ReplayConfig, out_dirs: Sequence[Path], workers: int,
                done: Callable[[int, RunResult], None], progress: Progress | None) -> None:
    if workers <= 1 or len(runs) <= 1:
        for i, (run, out) in enumerate(zip(runs, out_dirs, strict=True)):
            callback = (lambda f, name=run.name: progress.update(name, f)) if progress is not None else None
            done(i, replay_run(run, config, out, callback))
        return
    # forkserver: workers never fork this process, whose progress thread may hold locks.
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=min(workers, len(runs)), mp_context=context) as pool:
        pending = {pool.submit(replay_run, run, config, out): i
                   for i, (run, out) in enumerate(zip(runs, out_dirs, strict=True))}
        while pending:
            finished, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            if progress is not None:
                progress.poll()
            for future in finished:
                i = pending.pop(future)
                try:
                    done(i, future.result())
                except Exception as error:  # noqa: BLE001 - a worker that died
                    done(i, _worker_failed(runs[i], error))


def _dask_client(address: str) -> Any:
    """A client of the dask.distributed scheduler at ``address``.

    Raises:
        ConfigError: dask.distributed is not installed, or the scheduler cannot be reached.
    """
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError("--dask needs dask.distributed: pip install 'sim_real_bridge[dask]' "
                          "(or dask[distributed])") from None
    try:
        return Client(address, timeout=DASK_CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError) as error:
        raise ConfigError(f"--dask {address}: cannot reach the scheduler: {error}") from None


def _dask_jobs(runs: Sequence[RunSpec], config: ReplayConfig, out_dirs: Sequence[Path], address: str,
               done: Callable[[int, RunResult], None]) -> None:
    """The same per-run jobs on a dask.distributed cluster (its workers must see the bags
    and the output directory at the same paths)."""
    from distributed import as_completed

    with _dask_client(address) as client:
        futures = {client.submit(replay_run, run, config, str(out), pure=False): i
                   for i, (run, out) in enumerate(zip(runs, out_dirs, strict=True))}
        for future in as_completed(list(futures)):
            i = futures[future]
            try:
                done(i, future.result())
            except Exception as error:  # noqa: BLE001 - a worker that died
                done(i, _worker_failed(runs[i], error))


def run_jobs(runs: Sequence[RunSpec], config: ReplayConfig, out_dirs: Sequence[Path], workers: int = 1,
             progress: Progress | None = None, dask: str | None = None) -> list[RunResult]:
    """Run every per-run job, here (workers=1), in a process pool, or on the dask
    scheduler at ``dask``; results in run order.

    Raises:
        ConfigError: ``dask`` is given and cannot be used.
    """
    results: dict[int, RunResult] = {}

    def done(i: int, result: RunResult) -> None:
        results[i] = result
        if progress is not None:
            progress.finished(result)

    if dask:
        _dask_jobs(runs, config, out_dirs, dask, done)
    else:
        _local_jobs(runs, config, out_dirs, workers, done, progress)
    return [results[i] for i in range(len(runs))]


def _rollup(out_dir: Path, results: Sequence[RunResult], discovery_failures: Sequence[RunResult]) -> None:
    """The roll-up summary.json and report.html of several runs."""
    from sim_real_bridge.evaluation.predictivity import episode_predictivity
    from sim_real_bridge.offline.report import write_rollup_report

    rows: dict[str, dict[str, Any]] = {}
    for result in results:
        if result.ok and result.rollup_row is not None:
            rows[result.name] = {**result.rollup_row, "report_href": f"{Path(result.out_dir).name}/{REPORT_NAME}"}
    failures = [{"name": r.name, "bags": list(r.bags), "error": r.error}
                for r in list(discovery_failures) + [r for r in results if not r.ok]]
    labelled = [{"sim_success": r["sim_success"], "real_success": r["real_success"],
                 **({"policy": r["policy"]} if r.get("policy") is not None else {})}
                for r in rows.values() if r.get("sim_success") is not None and r.get("real_success") is not None]
    predictivity = None
    if len(labelled) >= 2:
        try:
            predictivity = episode_predictivity(labelled)
        except ConfigError as error:
            failures.append({"name": "predictivity", "bags": [], "error": str(error)})
    report_rows = list(rows.values()) + [
        {"name": f["name"], "duration_s": 0.0, "warnings": [f"FAILED: {f['error']}"]} for f in failures
    ]
    if report_rows:
        write_rollup_report(out_dir / REPORT_NAME, report_rows, predictivity)
    listing = [{"name": r.name, "bags": list(r.bags), "ok": r.ok, "error": r.error,
                "summary": f"{Path(r.out_dir).name}/{SUMMARY_NAME}" if r.ok and r.out_dir else None,
                **({"row": rows[r.name]} if r.name in rows else {})} for r in results]
    write_json(out_dir / SUMMARY_NAME, _finite({"runs": listing, "failures": failures, "predictivity": predictivity}))


def check_out_dir(out: Path) -> None:
    """Refuse an ``--out`` that cannot hold the outputs, before anything runs.

    Raises:
        ConfigError: ``out`` is a file, sits under a file, or its nearest existing
            directory is not writable.
    """
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, not a directory")
    probe = out.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"--out {out}: {probe} is a file, not a directory")
    try:
        tempfile.TemporaryDirectory(prefix=f".{out.name}.probe-", dir=out if out.is_dir() else probe).cleanup()
    except OSError as error:
        where = out if out.is_dir() else probe
        raise ConfigError(f"--out {out}: cannot write in {where}: {error.strerror or error}") from None


def run_replay(request: ReplayRequest, stream: Any = None) -> int:
    """Replay every run of the request; returns 0 when all succeeded, 1 when some of several failed.

    Raises:
        ConfigError: the replay config, ``--out`` or ``--dask`` is unusable (nothing runs).
        BagError: the one run failed (its message names the bag and topic; nothing is written).
    """
    config = load_replay_config(request.config_path).with_sides(request.sim, request.real)
    out_dir = Path(request.out_dir)
    check_out_dir(out_dir)
    runs, discovery_failures = discover_runs(request.inputs, config)
    if len(runs) + len(discovery_failures) == 1:
        return _replay_one(runs, discovery_failures, config, out_dir, request, stream)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dirs = [out_dir / run.name for run in runs]
    progress = Progress(runs, stream, extra=len(discovery_failures))
    for failure in discovery_failures:
        progress.finished(failure)
        if failure.name not in {run.name for run in runs}:
            remove_outputs(out_dir / failure.name)
    with progress:
        results = run_jobs(runs, config, out_dirs, request.workers, progress, request.dask)
    for result in results:
        if not result.ok:  # a run directory left empty by a failed run goes
            remove_outputs(out_dir / result.name)
    _rollup(out_dir, results, discovery_failures)
    failed = [r for r in results if not r.ok] + list(discovery_failures)
    print(f"replay: {sum(r.ok for r in results)} run(s) ok, {len(failed)} failed; "
          f"output in {out_dir}", file=progress.stream)
    return 1 if failed or not runs else 0


def _replay_one(runs: list[RunSpec], discovery_failures: list[RunResult], config: ReplayConfig, out_dir: Path,
                request: ReplayRequest, stream: Any) -> int:
    """One run into ``out_dir``; its failure is the command's error."""
    if discovery_failures:
        remove_outputs(out_dir, remove_empty_dir=False)
        raise BagError(discovery_failures[0].error or f"bag(s) {', '.join(discovery_failures[0].bags)}: failed")
    run = runs[0]
    with Progress(runs, stream) as progress:
        if request.dask:
            result = run_jobs(runs, config, [out_dir], dask=request.dask)[0]
        else:
            result = replay_run(run, config, out_dir, lambda fraction: progress.update(run.name, fraction))
        if not result.ok:
            raise BagError(result.error or f"bag(s) {', '.join(result.bags)}: failed")
        progress.finished(result)
    print(f"replay: 1 run ok; output in {out_dir}", file=progress.stream)
    return 0


def _data_text(result: RunResult) -> str:
    """How much recording the run analysed: its segments when gaps in the log split it."""
    segments = (result.summary or {}).get("segments", [])
    if len(segments) < 2:
        return f"{result.data_s:.1f} s of data"
    analysed_s = sum(segment["end_s"] - segment["start_s"] for segment in segments)
    return f"{analysed_s:.1f} s of data in {len(segments)} segments over {result.data_s:.1f} s"
