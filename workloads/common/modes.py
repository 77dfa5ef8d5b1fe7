"""Execution modes: how a framework runs the same model, each framework's declared once, in one table.

A mode is a run-wide dimension like precision (a cell's ``mode``, in its key and its row's name):
``eager`` runs operator by operator from the host language, ``graph`` hands the framework a whole
graph of its own kernels (tf.function, to_static, graph mode, a hybridized block, a static net),
``compiled`` hands the graph to a compiler that fuses operators and generates code (XLA,
torch.compile's inductor). A framework declares the modes its rows run, its default first, each
with what it means in that framework; a mode it does not declare is a recorded "unsupported"
result with the reason (docs/FAIRNESS.md: modes-compared), never a crash and never a silent
substitute. Compilation is paid in the first training step, which is timed apart
(docs/FAIRNESS.md: warm-up-apart).

Keyed by framework name (as images/<fw>/ names it). The host reads this table for the matrix, the
command line and the report; the harness checks a cell's mode against it before the framework is
imported (workloads/__main__.py) and each runtime reads the resolved name from ``run.mode``.
Standard library only (Python 3.6): the host and every image read this one table.
"""
from collections import OrderedDict
from typing import Dict, NamedTuple, Optional, Tuple

EAGER, GRAPH, COMPILED = "eager", "graph", "compiled"
KINDS = (EAGER, GRAPH, COMPILED)  # from least to most compiled: the report lists a framework's modes in this order
# What --modes and matrix.toml's ``modes`` accept: the kinds, and "default" for each framework's own
# default mode (its first), so that one run can ask every framework for the mode it runs unasked
# (a quick run, a check that is not about modes) without an unsupported cell for any of them.
DEFAULT = "default"
CHOICES = KINDS + (DEFAULT,)


class Mode(NamedTuple):
    """One way a framework runs: its run-wide name (one of KINDS) and what it is in that framework."""
    name: str
    meaning: str


_TF_GRAPH = Mode(GRAPH, "tf.function graphs of TensorFlow's own kernels, no XLA (jit_compile=False)")
_TF_XLA = Mode(COMPILED, "tf.function with XLA (jit_compile=True): every training and inference step one "
                         "XLA cluster, compiled in the first step")
_KERAS_TF = (Mode(GRAPH, "Keras compiles its train and predict steps as tf.function graphs without XLA "
                         "(jit_compile=False)"),
             Mode(COMPILED, "jit_compile=True: Keras' train and predict steps compiled by XLA in the first step"))
_GRAPH_ONLY = "{} runs a static graph only (no eager API in these rows)"

MODES = {
    "pytorch": (Mode(EAGER, "eager PyTorch, operator by operator (PyTorch's default)"),
                Mode(COMPILED, "torch.compile (inductor): the model's forward and backward compiled to fused "
                               "C++/OpenMP kernels on the CPU, Triton kernels on a GPU, in the first step (the "
                               "GRU: a Python loop over one compiled GRU step, the time loop not unrolled)")),
    "keras-torch": (Mode(EAGER, "jit_compile=False: Keras' steps run eagerly on PyTorch"),
                    Mode(COMPILED, "jit_compile=True: Keras hands its train and predict steps to torch.compile "
                                   "(inductor), compiled in the first step (the GRU is not: under torch.compile "
                                   "Keras' GRU is a Python loop over the time steps, unrolled into one graph; that "
                                   "cell is unsupported)")),
    "tensorflow": (_TF_GRAPH, _TF_XLA),
    "keras-tf": _KERAS_TF,
    "r-keras": _KERAS_TF,  # the same Keras on TensorFlow, reached from R
    "jax": (Mode(COMPILED, "jax.jit: every step traced and compiled by XLA (JAX has no eager training loop "
                           "worth measuring: op-by-op dispatch is a debugging aid)"),),
    "keras-jax": (Mode(COMPILED, "Keras on JAX always jit-compiles its steps with XLA"),),
    "paddle": (Mode(EAGER, "dynamic graph (Paddle's default): no paddle.jit.to_static, nothing traced"),
               Mode(GRAPH, "paddle.jit.to_static(full_graph=True): the model's forward converted to a static "
                           "program (its backward derived as one) on its first call, one per train or eval mode "
                           "and input shape; the optimizer's update stays eager (no CINN compiler)")),
    "mindspore": (Mode(GRAPH, "GRAPH_MODE with mindspore.jit: every Cell call and step compiled to one static "
                              "graph on its first call"),
                  Mode(EAGER, "PyNative mode (MindSpore's own default): operator by operator from Python, no "
                              "mindspore.jit, nothing compiled")),
    "mxnet": (Mode(GRAPH, "hybridized Gluon blocks: one cached symbolic graph per block, built on the first "
                          "call"),
              Mode(EAGER, "imperative Gluon (Gluon's default, no hybridize): operator by operator from Python, "
                          "no graph built")),
    "mxnet-module": (Mode(GRAPH, _GRAPH_ONLY.format("MXNet's Module API (a symbolic graph)")),),
    "chainer": (Mode(EAGER, "define-by-run only: Chainer has no graph mode or compiler"),),
    "cntk": (Mode(GRAPH, _GRAPH_ONLY.format("CNTK")),),
    "keras-cntk": (Mode(GRAPH, _GRAPH_ONLY.format("Keras 2 on CNTK")),),
    "caffe2": (Mode(GRAPH, _GRAPH_ONLY.format("Caffe2 (a NetDef run by its executor)")),),
    "onnxruntime": (Mode(GRAPH, "the exported ONNX graph, optimised and run by an inference session (an "
                                "inference engine has no other mode)"),),
    "knet": (Mode(EAGER, "Julia functions over Knet's arrays (Julia compiles each method once; there is no "
                         "graph or whole-model compiler)"),),
}  # type: Dict[str, Tuple[Mode, ...]]


class ModeError(ValueError):
    """A mode name that is none of KINDS (one line naming the fix)."""


def declared(framework: str) -> "OrderedDict[str, Mode]":
    """``framework``'s modes, its default first; empty for a framework the table does not know."""
    return OrderedDict((mode.name, mode) for mode in MODES.get(framework, ()))


def default(framework: str) -> str:
    """The mode a cell of ``framework`` runs when none is asked for ("" for an unknown framework)."""
    modes = MODES.get(framework, ())
    return modes[0].name if modes else ""


def in_default_matrix(framework: str) -> "list[str]":
    """The modes a run that names none gives ``framework``: its default mode and, where it declares
    one, its compiled mode, the comparison a reader asks for first (docs/FAIRNESS.md:
    modes-compared). Its other modes (Paddle's to_static graph, MXNet's and MindSpore's eager) run
    when --modes or matrix.toml asks for them: each is a row of its own, and the slowest to run."""
    modes = declared(framework)
    picked = list(modes)[:1]
    if COMPILED in modes and COMPILED not in picked:
        picked.append(COMPILED)
    return picked


def chosen(framework: str, names) -> "list[str]":
    """The modes ``framework``'s cells run when ``names`` (each one of CHOICES) are asked for:
    "default" becomes its default mode, and a mode named twice that way runs once."""
    picked = []  # type: list
    for name in names:
        mode = default(framework) if name == DEFAULT else name
        if mode not in picked:
            picked.append(mode)
    return picked


def resolve(framework: str, mode: str) -> str:
    """The mode a cell runs: ``mode``, or the framework's default for "" (a result from before modes
    were declared, or a cell made by hand without one)."""
    return mode or default(framework)


def unsupported(framework: str, mode: str) -> Optional[str]:
    """Why ``framework`` cannot run ``mode`` (the reason its cell records), or None when it can."""
    if mode not in KINDS:
        raise ModeError("unknown mode {!r}; choose from {}".format(mode, ", ".join(KINDS)))
    modes = declared(framework)
    if not modes or mode in modes:
        return None
    return "{} has no {} mode: its rows run {}".format(
        framework, mode, "; ".join("{} ({})".format(name, item.meaning) for name, item in modes.items()))


def meaning(framework: str, mode: str) -> str:
    """What ``mode`` is in ``framework`` ("" where it does not declare it)."""
    item = declared(framework).get(resolve(framework, mode))
    return item.meaning if item else ""
