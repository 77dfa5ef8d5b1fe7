"""Run one cell inside a framework's environment and write exactly one JSON result.

    python -m workloads --cell cell.json        # how the backends run it: one cell document
    python -m workloads cnn --framework pytorch --profile smoke --precision fp32 \
        --device auto --data synthetic --data-dir DIR --out result.json    # by hand: the same, as arguments

The cell document (workloads/common/cell.py) holds the cell and where things are; the arguments
build the same document. Exit codes (the contract with the host): 0 = ok, 3 = unsupported here
(reason in the result), anything else = failed (the result says why when it could still be written).
"""
import argparse
import importlib
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, List, Optional

import numpy as np

from workloads.common import canonical, hyperparams, modes, naming, options, threads as thread_rules
from workloads.common.cell import MOST_THREADS, CellDocumentError, CellRequest, unsafe_name_problem
from workloads.common.harness import Run, Unsupported
from workloads.common.result import EXIT_OK, EXIT_UNSUPPORTED, INITS, Cell
from workloads.common.strict_json import quoted

EXIT_FAILED = 1
# The by-hand defaults are the documents' own.
_DEFAULT_CELL = Cell(framework="", workload="")
_DEFAULT_REQUEST = CellRequest(cell=_DEFAULT_CELL)


def available_frameworks(workload: str) -> List[str]:
    """A file is the registration: workloads/<workload>/<framework>.py."""
    folder = Path(__file__).parent / workload
    return sorted(name for p in folder.glob("*.py") if not p.stem.startswith("_") for name in naming.frameworks_of(p.stem))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workloads", description=__doc__.split("\n")[0])
    parser.add_argument("--cell", metavar="FILE", help="the cell document (JSON) that says everything below; "
                        "the backends run cells this way")
    # Every option defaults to None here, so that --cell can tell whether any was given too.
    parser.add_argument("workload", nargs="?", help=f"one of {', '.join(hyperparams.WORKLOADS)}")
    parser.add_argument("--framework", help="default: $ROSETTA_FRAMEWORK (set in each framework's image)")
    parser.add_argument("--variant", help="recorded in the result (the image or environment used; default: cpu)")
    parser.add_argument("--profile", choices=hyperparams.PROFILES, help="default: full")
    parser.add_argument("--precision", choices=hyperparams.PRECISIONS, help="default: fp32")
    parser.add_argument("--mode", choices=modes.KINDS, help="how the framework runs the model "
                        "(workloads/common/modes.py; default: the framework's default mode)")
    parser.add_argument("--device", choices=hyperparams.DEVICES, help="default: auto")
    parser.add_argument("--data", choices=hyperparams.DATA_SOURCES, help="default: real")
    parser.add_argument("--data-dir", help="dataset cache (default: $ROSETTA_DATA_DIR or ~/.cache/rosetta-bench/data)")
    parser.add_argument("--repeat", type=int, help="repeat index, recorded in the result (default: 0)")
    parser.add_argument("--init", choices=INITS, help="canonical = start from the canonical weights every framework "
                        "loads (default); framework = the framework's own initialisers")
    parser.add_argument("--option", action="append", metavar="NAME=VALUE",
                        help=f"a framework option, repeatable ({', '.join(options.every_name())}; "
                        "workloads/common/options.py)")
    parser.add_argument("--parity", metavar="DIR", help="parity check instead of the benchmark: load the canonical "
                        "weights and batch in DIR (weights.npz, batch.npz) and record the model's outputs")
    parser.add_argument("--export-onnx", metavar="OUT", help="with --parity: also export the model on those weights "
                        "to ONNX in OUT (model.onnx, model.onnx.data, export.json); PyTorch's resnet50 only")
    parser.add_argument("--onnx-model", metavar="DIR", help="the exported ONNX model an inference engine runs "
                        "(model.onnx, model.onnx.data, export.json; default: $ROSETTA_ONNX_MODEL)")
    parser.add_argument("--out", help="where to write the JSON result (default: $ROSETTA_RESULTS_DIR/<cell>.json)")
    parser.add_argument("--threads", type=int, help="the framework's intra-op and inter-op CPU threads (default: the "
                        "CPUs this process may use: its affinity, capped by its cgroup's CPU quota)")
    return parser


def parse_args(argv: Optional[List[str]] = None) -> CellRequest:
    """The cell document, read from --cell FILE or built from the arguments."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.cell:
        others = sorted(name for name, value in vars(args).items() if name != "cell" and value is not None)
        if others:
            refuse(f"--cell FILE says everything; drop {', '.join(others)}")
        try:
            request = CellRequest.read(args.cell)
        except CellDocumentError as error:
            refuse(f"--cell {args.cell}: {error}")
    else:
        request = request_from_arguments(args)
    problem = request_problem(request)
    if problem:
        refuse(problem)
    return request


def refuse(problem: str) -> None:
    """One line naming the fix, exit 2 (argparse's usage block would bury it)."""
    print(f"python -m workloads: error: {problem}", file=sys.stderr)
    sys.exit(2)


def request_from_arguments(args: argparse.Namespace) -> CellRequest:
    """The by-hand form: the same document as --cell, each option not given at its default."""
    def given(value, default):
        return default if value is None else value

    cell = Cell(framework=given(args.framework, os.environ.get("ROSETTA_FRAMEWORK") or ""),
                workload=given(args.workload, ""),
                variant=given(args.variant, _DEFAULT_CELL.variant),
                precision=given(args.precision, _DEFAULT_CELL.precision),
                profile=given(args.profile, _DEFAULT_CELL.profile),
                data=given(args.data, _DEFAULT_CELL.data),
                repeat=given(args.repeat, _DEFAULT_CELL.repeat),
                init=given(args.init, _DEFAULT_CELL.init),
                options=dict(option.partition("=")[::2] for option in args.option or ()),
                mode=given(args.mode, _DEFAULT_CELL.mode))
    return CellRequest(cell=cell, device=given(args.device, _DEFAULT_REQUEST.device), data_dir=args.data_dir,
                       out=args.out, parity=args.parity, export_onnx=args.export_onnx, onnx_model=args.onnx_model,
                       threads=args.threads)


def request_problem(request: CellRequest) -> Optional[str]:
    """What makes a cell document unrunnable (checked the same way for --cell and for arguments), or None."""
    cell = request.cell
    unsafe = unsafe_name_problem(cell)
    if unsafe:
        return unsafe
    if not cell.workload:
        return f"name the workload ({', '.join(hyperparams.WORKLOADS)}) or give --cell FILE"
    if not cell.framework:
        return "--framework is required (or set ROSETTA_FRAMEWORK)"
    for what, value, choices in (("workload", cell.workload, hyperparams.WORKLOADS),
                                 ("profile", cell.profile, hyperparams.PROFILES),
                                 ("precision", cell.precision, hyperparams.PRECISIONS),
                                 ("device", request.device, hyperparams.DEVICES),
                                 ("data", cell.data, hyperparams.DATA_SOURCES),
                                 ("init", cell.init, INITS)):
        if value not in choices:
            return f"invalid {what} {quoted(value)}; choose from {', '.join(choices)}"
    if cell.mode and cell.mode not in modes.KINDS:
        return f"invalid mode {quoted(cell.mode)}; choose from {', '.join(modes.KINDS)}"
    try:
        options.check(cell.framework, cell.options)
    except options.OptionError as error:
        return str(error)
    if request.threads is not None and not 1 <= request.threads <= MOST_THREADS:
        return f"--threads {request.threads}: a whole number of threads from 1 to {MOST_THREADS}"
    if request.export_onnx and not request.parity:
        return "--export-onnx needs --parity DIR: the canonical weights to export"
    return out_problem(result_path(request))


def result_path(request: CellRequest) -> str:
    """--out, else $ROSETTA_RESULTS_DIR/<cell key>.json (the key is built from checked names)."""
    return request.out or os.path.join(os.environ.get("ROSETTA_RESULTS_DIR", "."), f"{request.cell.key}.json")


def out_problem(out: str) -> Optional[str]:
    """Why the result could not be written to ``out`` (checked before the run, not after it), or None."""
    if os.path.isdir(out):
        return f"--out {out} is a folder; name the JSON file to write, e.g. {os.path.join(out, 'result.json')}"
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.lexists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"cannot write the result to {out}: {parent} is not a folder; choose another --out"
    return None


def import_workload(cell: Cell):
    """The Python module of the cell's workload: workloads/<workload>/<module>.py."""
    return importlib.import_module(f"workloads.{cell.workload}.{naming.module_name(cell.framework)}")


def main(argv: Optional[List[str]] = None, load_workload: Optional[Callable[[Cell], Any]] = None) -> int:
    """Run one cell; its exit code. ``load_workload(cell)`` returns the object whose ``run`` and
    ``parity`` (and optional ``MATCHED``) the cell calls: the Python module by default; a workload in
    another language passes its own (workloads/common/foreign.py), everything else stays this code."""
    request = parse_args(argv)
    cell = request.cell
    if load_workload is None:
        choices = available_frameworks(cell.workload)
        if cell.framework not in choices:
            print(f"error: no {cell.workload} workload for framework {cell.framework!r}; "
                  f"choose from {', '.join(choices)}", file=sys.stderr)
            return 2
    cell.options = options.check(cell.framework, cell.options)  # defaults dropped: the same cell either way
    out = result_path(request)
    run = Run(cell, device=request.device, data_dir=request.data_dir, threads=request.threads)
    code = EXIT_OK
    try:
        # the run's threads, for the libraries that read them only at import (docs/FAIRNESS.md: same-threads)
        os.environ.update(thread_rules.environment(run.threads))
        run.result.provenance.environment.update(thread_rules.environment(run.threads))  # as set, recorded
        missing_mode = modes.unsupported(cell.framework, run.mode)
        if missing_mode:  # before the import: a mode the framework lacks costs nothing (modes.py)
            raise Unsupported(missing_mode)
        os.environ.update(naming.environment(cell.framework))  # e.g. KERAS_BACKEND, before the import
        os.environ.update(naming.precision_environment(cell.precision))  # no TF32 in fp32 cells, before any CUDA handle
        if request.onnx_model:
            os.environ["ROSETTA_ONNX_MODEL"] = request.onnx_model  # read by workloads/runtime/onnxruntime.py
        start = time.perf_counter()
        module = (load_workload or import_workload)(cell)
        run.result.phases["framework_import"] = time.perf_counter() - start
        run.result.provenance.extras["matched"] = " | ".join(module.MATCHED)  # part of every workload module
        if request.parity:
            if cell.precision != "fp32":
                raise Unsupported("the parity check runs in fp32 only")
            weights, batch = canonical.load(request.parity)
            if request.export_onnx:
                if not hasattr(module, "export_onnx"):
                    raise Unsupported(f"{cell.framework} has no ONNX export for {cell.workload}")
                outputs = module.export_onnx(run, weights, batch, request.export_onnx)
            else:
                outputs = module.parity(run, weights, batch)
            run.result.outputs = {name: np.asarray(value, dtype=np.float64).tolist() for name, value in outputs.items()}
        else:
            module.run(run)
    except Unsupported as reason:
        run.result.status, run.result.reason, code = "unsupported", str(reason), EXIT_UNSUPPORTED
    except Exception as error:  # noqa: BLE001 - recorded in the result, and the traceback kept on stderr
        traceback.print_exc()
        run.result.status, code = "failed", EXIT_FAILED
        run.result.reason = f"{type(error).__name__}: {error}".strip()
    try:
        run.finish().write(out)  # the validity gate may fail an otherwise finished cell here
        if code == EXIT_OK and run.result.status != "ok":
            code = EXIT_FAILED
    except OSError as error:  # changed under us since the check, a full disk, a link refused (safe_files)
        print(f"error: cannot write the result to {out} ({error}); choose another --out", file=sys.stderr)
        return 2
    print(f"{cell.key}: {run.result.status}" + (f" ({run.result.reason})" if run.result.reason else ""),
          file=sys.stderr)
    return code


if __name__ == "__main__":
    exit_code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is on disk; skip the framework's interpreter teardown (freeing every tensor and
    # thread pool), which would otherwise count against the harness overhead of each cell.
    os._exit(exit_code)
