"""torch.compile's inductor as the compiled mode uses it, written once for the two rows that hand a
step to it: PyTorch's compiled mode (workloads/runtime/pytorch.py) and Keras 3 on torch with
jit_compile=True (workloads/runtime/keras/).

`compile_caches` puts inductor's and Triton's caches in the cell's own temporary folder, so every
compiled cell compiles cold (docs/FAIRNESS.md: modes-compared), and refuses the CPU's compiled mode
where inductor would find no C++ compiler or no Python headers; `set_up` runs inductor's own setup,
which no model's compilation is part of, as a phase of its own before the model is built;
`counting_backend` is inductor itself, counting each graph it compiles in ``samples.traces``. The
caller passes inductor's compile function in: nothing is imported here (standard library only,
Python 3.6: every image carries workloads/common/, and an image imports only numpy and its one
framework).
"""
import hashlib
import importlib.util
import os
import shutil
import sysconfig
import tempfile

from workloads.common.harness import Unsupported


def compile_caches(device_type):
    """Point inductor's and Triton's caches into the cell's own temporary folder (each backend gives
    a cell its own TMPDIR, removed after it), so no compiled kernel outlives the cell or comes from
    another run; refuse the CPU's compiled mode where inductor would find no C++ compiler. What the
    compiler is, for the "compiler" extra. Before the first compilation (inductor reads them then)."""
    scratch = tempfile.gettempdir()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(scratch, "torchinductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(scratch, "triton")
    caches = "caches in the cell's temporary folder ({})".format(scratch)
    if device_type == "cuda":
        return "inductor: Triton kernels; {}".format(caches)
    cxx = os.environ.get("CXX") or "g++"  # what inductor's C++ builder runs on Linux
    found = shutil.which(cxx)
    if found is None:
        raise Unsupported("torch.compile on the CPU needs a C++ compiler: {} is not on PATH here".format(cxx))
    if importlib.util.find_spec("setuptools") is None:  # torch.utils.cpp_extension imports it
        raise Unsupported("torch.compile on the CPU needs setuptools, which torch.utils.cpp_extension imports: "
                          "it is not installed in this environment")
    headers = sysconfig.get_paths()["include"]  # each CPU kernel is built as a Python extension
    if not os.path.isfile(os.path.join(headers, "Python.h")):
        raise Unsupported("torch.compile on the CPU needs Python's C headers: no Python.h in {} "
                          "(Debian: python3-dev)".format(headers))
    return "inductor: C++/OpenMP kernels built by {}; {}".format(found, caches)


COMPILER_SETUP = "compiler_setup"  # the phase set_up times (result.phases, phase_spans)


def set_up(run, torch, device_type):
    """Inductor's setup, timed as a phase of its own before the model is built, so that the first
    step holds the model's compilation and nothing else (docs/FAIRNESS.md: modes-compared). On the
    CPU inductor first compiles C++ probes of the vector instructions it may use and a precompiled
    header of its kernels' prelude (about 13 s on a 2-core CPU, the same for every model); on a GPU,
    Triton builds its driver helpers. XLA has no such step: its first compilation of a trivial
    function takes 0.03 s here. One trivial function is compiled and run with plain inductor (not
    counted in ``samples.traces``); everything it leaves stays in the cell's own caches, and the
    model's kernels still compile cold, in the first step. After ``run.declare_sync``."""
    probe = torch.compile(_trivial, backend="inductor", dynamic=False)
    with run.phase(COMPILER_SETUP):
        probe(torch.ones(16, device=device_type))


def _trivial(x):
    return (x * 2.0 + 1.0).relu().sum()


def counting_backend(run, compile_graph, label="torch.compile graph", context=None):
    """A torch.compile backend that hands each graph to ``compile_graph`` (inductor's compile_fx) and
    counts it in ``samples.traces`` as "<label> N": a graph of the same code and input shapes compiled
    twice is a recompilation, which the report flags; the graphs a graph break splits a step into are
    counted apart. Two compiled functions that may hold the same graph (Keras' train and predict
    steps of a model without dropout) take a backend each, labelled apart: that is no recompilation.
    ``context(example_inputs)``, if given, says what else a graph was rightly compiled anew for
    (PyTorch's grad mode: the same code traced for training and for evaluation), part of its identity."""
    seen = {}

    def backend(graph, example_inputs):
        shapes = [tuple(item.shape) for item in example_inputs if hasattr(item, "shape")]
        extra = context(example_inputs) if context is not None else ""
        identity = hashlib.sha256("{}{}{}".format(graph.code, shapes, extra).encode()).hexdigest()
        seen.setdefault(identity, "{} {}".format(label, len(seen) + 1))
        run.note_trace(seen[identity])
        return compile_graph(graph, example_inputs)
    return backend
