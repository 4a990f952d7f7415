"""`sim-real-bridge replay`: recorded bags through the live monitor's analysis, offline.

Runs (:mod:`.runs`). Each command-line input becomes one or more runs: a bag (a
``.mcap`` or ``.db3`` file, or a directory with ``metadata.yaml``) is one run; a
directory of bags is one run per bag; two one-sided bags (one side's joint_states
each) whose log times overlap are one run.

Topics (:mod:`.topics`). The live graph's names by default; ``--config`` names others;
``--sim``/``--real`` name a side by namespace or by its joint_states topic. When a
side's joint_states topic is missing, the error proposes the pairs of JointState topics
whose joints match, with the flags that select them. Only the two joint_states are
needed: every other stream is optional, and summary.json and report.html list which
analyses ran and which were skipped, and why (:mod:`.analyses`).

Outputs (:mod:`.job`). One run: ``OUT/summary.json`` (the demo's schema, plus
``analyses``, ``segments``, ``warnings`` and ``problems_by_topic``), ``OUT/divergence.mcap``
(the /divergence/* topics as the live node publishes them, message definitions
embedded) and ``OUT/report.html``, written to a temporary directory beside ``OUT`` and
moved in when complete. Several runs: those three files per run in ``OUT/<run name>/``,
plus the roll-up ``OUT/report.html`` and ``OUT/summary.json``
(``{"runs": [...], "failures": [...], "predictivity": ...}``).

Labels. A run's success labels (for predictivity in the roll-up) come from a
``labels.yaml`` in a bag directory or ``<bag file stem>.labels.yaml`` beside a bag file,
or from ``custom_data`` of the bag's metadata.yaml (:func:`.runs.read_labels`). Truth for
scoring comes from ``/reality/injections`` when the bag has it.

Errors. One run that fails is the command's error: one line naming the bag and topic,
exit code 2, nothing written and a previous run's outputs removed. Among several runs,
each is a job of its own: the others complete, the roll-up lists the failures and the
exit code is 1. A recording with gaps in its log time (a stray message hours later) is
analysed in segments, listed in summary.json; the gaps are not ticked through.

Fleet (:mod:`.fleet`). Each per-run job (:func:`replay_run`) is a pure function of its
inputs (bag paths, config, output directory) returning plain data, so it runs unchanged
in this process, a process pool (``--workers N``) or a dask.distributed cluster
(``--dask ADDRESS``).
"""

from sim_real_bridge.offline.divergence_mcap import DIVERGENCE_TOPICS, write_divergence_mcap
from sim_real_bridge.offline.replay.fleet import Progress, ReplayRequest, check_out_dir, run_jobs, run_replay
from sim_real_bridge.offline.replay.job import (
    MCAP_NAME,
    REPORT_NAME,
    SUMMARY_NAME,
    batch_collection,
    replay_run,
)
from sim_real_bridge.offline.replay.runs import LABEL_KEYS, RunResult, RunSpec, discover_runs, read_labels
from sim_real_bridge.offline.replay.streams import (
    LAG_WARNING_S,
    RunStreams,
    _read_streams,
    _read_ticks,
    _read_truth,
    read_run_streams,
    recording_warnings,
)

__all__ = [
    "DIVERGENCE_TOPICS",
    "LABEL_KEYS",
    "LAG_WARNING_S",
    "MCAP_NAME",
    "REPORT_NAME",
    "SUMMARY_NAME",
    "Progress",
    "ReplayRequest",
    "RunResult",
    "RunSpec",
    "RunStreams",
    "_read_streams",
    "_read_ticks",
    "_read_truth",
    "batch_collection",
    "check_out_dir",
    "discover_runs",
    "read_labels",
    "read_run_streams",
    "recording_warnings",
    "replay_run",
    "run_jobs",
    "run_replay",
    "write_divergence_mcap",
]
