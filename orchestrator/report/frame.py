"""The report's frame: ``orchestrator.results.to_frame`` plus what only the report reads.

``to_frame`` flattens every result into one row of figures; the report also needs, per result,
how the cell was run (its init, non-default options and GRU kernel: part of the row's name), the device's
model (for like-for-like groups), the cluster node that ran it, the raw per-step times and trace
counts (the slow-step check) and the recorded fast paths and provenance a reviewer reads (the
details section). They are added here, from the same results in the same order, so that
results.py stays the host's one reader.
"""
from __future__ import annotations

import pandas as pd

from orchestrator.report import ceiling, energy
from orchestrator.results import to_frame
from workloads.common import declaration
from workloads.common import options as framework_options
from workloads.common.result import CANONICAL_INIT, FRAMEWORK_INIT, Result

# Recorded in provenance.extras by the frameworks (the fairness conventions): shown by name, in this
# order, before any other extra. "matched" has its own section of the report.
NAMED_EXTRAS = (("mode", "mode"), ("optimizer", "optimizer"), ("gru_kernel", "GRU kernel"), ("layout", "layout"), ("tf32", "TF32"),
                ("threads", "threads"))
# Extras every row should carry: a missing one says "not recorded". The optimizer only where a
# workload trains; any other named extra wherever another result of the same workload records it
# (the GRU kernel: in the workload whose frameworks record one).
EXPECTED_EXTRAS = ("layout", "tf32")
TRAINING_EXTRAS = ("optimizer",)
OPTION_PREFIX = "option."
NOT_SHOWN_EXTRAS = {"matched", "init"}
NOT_RECORDED = "not recorded"
NODE_ID_SHOWN = 8  # hex digits of a cluster node's id shown in the report (Ray's are 56)


def report_frame(results: list[Result], cpu_peaks: dict[str, dict] | None = None) -> pd.DataFrame:
    """``to_frame(results)`` with the report's own columns added (see the module's docstring).
    `cpu_peaks`: the run's CPU probes by CPU model (ceiling.cpu_peaks of run.json), which a CPU
    result's % of peak is of; without them a CPU row's peak is unknown."""
    frame = to_frame(results)
    frame["init"] = [init_of(result) for result in results]
    frame["options"] = [framework_options.label(result.cell.options or {}) for result in results]
    frame["gpu_model"] = [(result.provenance.gpu or {}).get("name") or None for result in results]
    # each result's device peak in its precision and its % of peak (ceiling.py)
    for name, values in ceiling.frame_columns(frame, cpu_peaks or {}).items():
        frame[name] = values
    frame["cluster_node"] = [cluster_node(result) for result in results]
    # the GRU kernel that ran, as the framework recorded it: part of a GRU row's name (summary.py)
    frame["gru_kernel"] = [result.provenance.extras.get("gru_kernel") or "" for result in results]
    frame["step_times"] = [list(result.samples.batch_times_s or []) for result in results]
    frame["epoch_steps"] = [list(result.samples.epoch_steps or []) for result in results]
    frame["traces"] = [dict(result.samples.traces or {}) for result in results]
    frame["threads_problem"] = [thread_problem(result) for result in results]
    # inference: the untimed warm-up batches that ran before the timed ones (the step plot says so)
    frame["warmup_batches"] = [_count(result.settings.get("warmup_batches")) for result in results]
    recorded: dict[str, set[str]] = {}
    for result in results:
        recorded.setdefault(result.cell.workload, set()).update(
            key for key, _ in NAMED_EXTRAS if result.provenance.extras.get(key))
    frame["details"] = [details(result, expected=recorded.get(result.cell.workload, set())) for result in results]
    for name, values in energy.frame_columns(results).items():
        frame[name] = values
    return frame


def thread_problem(result: Result) -> str:
    """Where the framework did not take the run's threads, or could not say (docs/FAIRNESS.md:
    same-threads), as the cell recorded it; "" where it did, or for a result from before the rule."""
    provenance = result.provenance
    if provenance.threads_requested is None or not provenance.threads_note:
        return ""
    return f"{provenance.threads_requested} asked: {provenance.threads_note}"


def init_of(result: Result) -> str:
    """How the cell's model started: "framework" when the cell or the framework's record says so."""
    if FRAMEWORK_INIT in (result.cell.init, result.provenance.extras.get("init")):
        return FRAMEWORK_INIT
    return result.cell.init or CANONICAL_INIT


def details(result: Result, expected: set[str] = frozenset()) -> dict[str, str]:
    """What a reviewer needs to judge one result's figures, as labelled text (insertion-ordered):
    the fast paths it recorded, how it started, and the machine it ran on. A named extra that
    ``expected`` (or the conventions) asks for and the result lacks says "not recorded"."""
    provenance, extras = result.provenance, result.provenance.extras
    expected = set(expected) | set(EXPECTED_EXTRAS)
    if _trains(result.cell.workload):
        expected |= set(TRAINING_EXTRAS)
    shown: dict[str, str] = {}
    for key, label in NAMED_EXTRAS:
        if extras.get(key):
            shown[label] = str(extras[key])
        elif key in expected:
            shown[label] = NOT_RECORDED
    resolved = {key[len(OPTION_PREFIX):]: value for key, value in extras.items() if key.startswith(OPTION_PREFIX)}
    if resolved or result.cell.options:
        shown["options"] = framework_options.label({**resolved, **(result.cell.options or {})})
    init = init_of(result)
    shown["init"] = (f"{init} (each framework's own initialisers: accuracy not from the same start)"
                     if init == FRAMEWORK_INIT else init)
    node = cluster_node(result)
    if node:
        shown["node"] = node
        cluster = provenance.cluster or {}
        if cluster.get("accelerator_type"):
            shown["accelerator type"] = str(cluster["accelerator_type"])
        if cluster.get("tries") not in (None, ""):
            shown["tries"] = str(cluster["tries"])
    if provenance.cpu_affinity is not None:
        shown["CPU affinity"] = f"{provenance.cpu_affinity} CPUs"
    if provenance.cpu_affinity is not None or provenance.cpu_quota is not None:
        shown["CPU quota"] = f"{provenance.cpu_quota:g} CPUs" if provenance.cpu_quota is not None else "no limit"
    if provenance.process_threads is not None:
        shown["process threads"] = str(provenance.process_threads)
    if provenance.threads_requested is not None:
        shown["threads asked / reported"] = (
            f"{provenance.threads_requested} asked; " + ", ".join(
                f"{pool} {count if count is not None else 'not reported'}"
                for pool, count in (("intra-op", provenance.threads_intra_op), ("inter-op", provenance.threads_inter_op))))
    if provenance.environment:
        shown["environment"] = ", ".join(f"{name}={value}" for name, value in sorted(provenance.environment.items()))
    if provenance.gpu:
        shown["GPU"] = ", ".join(f"{name}={value}" for name, value in provenance.gpu.items())
    versions = [f"{name} {value}" for name, value in (("CUDA", provenance.cuda_version),
                                                      ("cuDNN", provenance.cudnn_version)) if value]
    if versions:
        shown["CUDA / cuDNN"] = ", ".join(versions)
    if provenance.packages_sha256:
        count = len(provenance.packages or [])
        count = f" ({count} package{'s' if count != 1 else ''})" if count else ""
        shown["packages"] = f"{provenance.packages_sha256}{count}"
    if provenance.image_revision:
        shown["image revision"] = provenance.image_revision
    if provenance.image_sources_sha256:
        shown["image sources"] = provenance.image_sources_sha256
    if energy_details := energy.details_text(result):
        shown["energy"] = energy_details
    named = {key for key, _ in NAMED_EXTRAS} | NOT_SHOWN_EXTRAS
    others = [f"{key}={value}" for key, value in sorted(extras.items())
              if key not in named and not key.startswith(OPTION_PREFIX) and value not in (None, "")]
    if others:
        shown["other extras"] = "; ".join(others)
    return shown


def cluster_node(result: Result) -> str | None:
    """Which cluster node ran the cell (provenance.cluster, filled in by a cluster backend such as
    Ray's): "hostname (address, node 1a2b3c4d)", the node id shortened; None for a cell run on this
    host. The node's own hostname, not the cell's (a container's hostname is its id)."""
    cluster = result.provenance.cluster or {}
    if not cluster:
        return None
    name = str(cluster.get("hostname") or cluster.get("node_address") or "")
    address = str(cluster.get("node_address") or "")
    node_id = str(cluster.get("node_id") or "")[:NODE_ID_SHOWN]
    where = [part for part in (address if address != name else "", f"node {node_id}" if node_id else "") if part]
    if not name:
        return ", ".join(where) or None
    return f"{name} ({', '.join(where)})" if where else name


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _trains(workload: str) -> bool:
    try:
        return declaration.get(workload).kind == declaration.TRAINING
    except ValueError:  # a workload no declaration describes any more
        return False
