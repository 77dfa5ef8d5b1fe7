"""The CPU threads every framework is given: the same intra-op and inter-op counts in every cell
(docs/FAIRNESS.md: same-threads).

A run's `--threads N` reaches the cell in its document (workloads/common/cell.py); without it a cell
takes the CPUs it may use: its CPU affinity, capped by its cgroup's CPU quota (a container's CPU
limit), so the local backend's cells get the host's usable CPUs and a Docker cell its container's.
Before the framework is imported, `python -m workloads` sets the variables the math libraries and
some frameworks read only then (`environment`); each runtime's `select_device` then sets the
framework's own switches and records what the framework reports back (`Run.record_threads`).
Standard library only (Python 3.6): the host and every image share it.
"""
import math
import os
from typing import Dict, Optional

from workloads.common.provenance import cgroup_cpu_quota, cpu_affinity

# Read once, at import or at the first parallel region, by the OpenMP runtimes and math libraries
# every framework links (intra-op), TensorFlow's two pools, and MXNet's engine (its CPU workers run
# independent operators at once: its inter-op pool).
_INTRA_OP = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")
_INTER_OP = ("TF_NUM_INTEROP_THREADS", "MXNET_CPU_WORKER_NTHREADS")


# JAX (and Keras on JAX): no switch sizes XLA's CPU thread pools, and JAX reports none back; the
# XLA_FLAGS once suggested for it (intra_op_parallelism_threads) are not honoured by every jaxlib.
JAX_THREADS = ("cannot obey: JAX has no switch for its CPU thread pools (XLA sizes them from the CPUs the process "
               "may use) and reports no count")


def usable_cpus() -> int:
    """The CPUs this cell may use: its affinity (else every CPU), capped by its cgroup's quota."""
    cpus = cpu_affinity() or os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    if quota is not None:
        cpus = min(cpus, max(1, int(math.ceil(quota))))
    return cpus


def resolve(requested: Optional[int]) -> int:
    """The run's --threads, or (None) the CPUs this cell may use."""
    return usable_cpus() if requested is None else requested


def environment(threads: int) -> Dict[str, str]:
    """What a cell sets before its framework is imported, so that libraries reading them only then
    start with ``threads`` threads in each pool."""
    return {name: str(threads) for name in _INTRA_OP + _INTER_OP}


def set_once(setters, threads: int) -> None:
    """Call each framework switch that takes a thread count once per process (MindSpore's raise
    RuntimeError when called again): a second cell in one process keeps the first one's count."""
    for setter in setters:
        try:
            setter(threads)
        except RuntimeError:
            pass


def problem(requested: int, intra_op: Optional[int], inter_op: Optional[int], note: str = "") -> str:
    """Why a framework's threads are not the requested ones, or "": a count it reports that
    differs, a pool it cannot set or does not report (``note`` says which and why)."""
    problems = ["{} {} reported".format(what, count) for what, count in (("intra-op", intra_op),
                                                                          ("inter-op", inter_op))
                if count is not None and count != requested]
    if note:
        problems.append(note)
    return "; ".join(problems)


def set_tensorflow_threads(tf, run) -> None:
    """The run's threads through TensorFlow's own switches, read back (FAIRNESS.md: same-threads), for
    the TensorFlow row and Keras on TensorFlow alike (`tf`: the imported module; nothing is imported
    here). They hold only before its runtime starts; TF_NUM_*_THREADS were set before the import too."""
    note = ""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(run.threads)
        tf.config.threading.set_inter_op_parallelism_threads(run.threads)
    except RuntimeError as error:  # the runtime had started in this process
        note = "TensorFlow's runtime had started ({})".format(error)
    # 0 means "TensorFlow's default": not a count it reports
    run.record_threads(tf.config.threading.get_intra_op_parallelism_threads() or None,
                       tf.config.threading.get_inter_op_parallelism_threads() or None,
                       "tf.config.threading.set_intra_op_parallelism_threads, set_inter_op_parallelism_threads", note)


def set_torch_threads(torch, run) -> None:
    """The run's threads through PyTorch's own switches, read back (FAIRNESS.md: same-threads), for the
    PyTorch row and Keras on torch alike (`torch`: the imported module; nothing is imported here). The
    inter-op pool takes its size only before it first runs (so: before any work)."""
    torch.set_num_threads(run.threads)
    note = ""
    try:
        torch.set_num_interop_threads(run.threads)
    except RuntimeError as error:  # the pool already started in this process
        note = "the inter-op pool had started ({})".format(error)
    inter_op = torch.get_num_interop_threads()
    run.record_threads(torch.get_num_threads(), inter_op, "torch.set_num_threads, torch.set_num_interop_threads",
                       note if inter_op != run.threads else "")
