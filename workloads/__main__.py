"""Run one cell inside a framework's environment and write exactly one JSON result.

    python -m workloads cnn --framework pytorch --profile smoke --precision fp32 \
        --device auto --data synthetic --data-dir DIR --out result.json

Exit codes (the contract with the host): 0 = ok, 3 = unsupported here (reason in the result),
anything else = failed (the result says why when it could still be written).
"""
import argparse
import importlib
import os
import sys
import time
import traceback
from pathlib import Path
from typing import List, Optional

import numpy as np

from workloads.common import canonical, hyperparams, naming
from workloads.common.harness import Run, Unsupported
from workloads.common.result import EXIT_OK, EXIT_UNSUPPORTED, Cell

EXIT_FAILED = 1


def available_frameworks(workload: str) -> List[str]:
    """A file is the registration: workloads/<workload>/<framework>.py."""
    folder = Path(__file__).parent / workload
    return sorted(name for p in folder.glob("*.py") if not p.stem.startswith("_") for name in naming.frameworks_of(p.stem))


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workloads", description=__doc__.split("\n")[0])
    parser.add_argument("workload", choices=hyperparams.WORKLOADS)
    parser.add_argument("--framework", default=os.environ.get("ROSETTA_FRAMEWORK"),
                        help="default: $ROSETTA_FRAMEWORK (set in each framework's image)")
    parser.add_argument("--variant", default="cpu", help="recorded in the result (the image or environment used)")
    parser.add_argument("--profile", choices=hyperparams.PROFILES, default="full")
    parser.add_argument("--precision", choices=hyperparams.PRECISIONS, default="fp32")
    parser.add_argument("--device", choices=hyperparams.DEVICES, default="auto")
    parser.add_argument("--data", choices=hyperparams.DATA_SOURCES, default="real")
    parser.add_argument("--data-dir", default=None, help="dataset cache (default: $ROSETTA_DATA_DIR or ~/.cache/rosetta-bench/data)")
    parser.add_argument("--repeat", type=int, default=0, help="repeat index, recorded in the result")
    parser.add_argument("--parity", metavar="DIR", help="parity check instead of the benchmark: load the canonical "
                        "weights and batch in DIR (weights.npz, batch.npz) and record the model's outputs")
    parser.add_argument("--export-onnx", metavar="OUT", help="with --parity: also export the model on those weights "
                        "to ONNX in OUT (model.onnx, model.onnx.data, export.json); PyTorch's resnet50 only")
    parser.add_argument("--onnx-model", metavar="DIR", help="the exported ONNX model an inference engine runs "
                        "(model.onnx, model.onnx.data, export.json; default: $ROSETTA_ONNX_MODEL)")
    parser.add_argument("--out", help="where to write the JSON result (default: $ROSETTA_RESULTS_DIR/<cell>.json)")
    args = parser.parse_args(argv)
    if not args.framework:
        parser.error("--framework is required (or set ROSETTA_FRAMEWORK)")
    if args.export_onnx and not args.parity:
        parser.error("--export-onnx needs --parity DIR: the canonical weights to export")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    choices = available_frameworks(args.workload)
    if args.framework not in choices:
        print(f"error: no {args.workload} workload for framework {args.framework!r}; "
              f"choose from {', '.join(choices)}", file=sys.stderr)
        return 2
    cell = Cell(framework=args.framework, workload=args.workload, variant=args.variant,
                precision=args.precision, profile=args.profile, data=args.data, repeat=args.repeat)
    out = args.out or os.path.join(os.environ.get("ROSETTA_RESULTS_DIR", "."), f"{cell.key}.json")
    run = Run(cell, device=args.device, data_dir=args.data_dir)
    code = EXIT_OK
    try:
        os.environ.update(naming.environment(args.framework))  # e.g. KERAS_BACKEND, before the import
        if args.onnx_model:
            os.environ["ROSETTA_ONNX_MODEL"] = args.onnx_model  # read by workloads/runtime/onnxruntime.py
        start = time.perf_counter()
        module = importlib.import_module(f"workloads.{args.workload}.{naming.module_name(args.framework)}")
        run.result.phases["framework_import"] = time.perf_counter() - start
        run.result.provenance.extras["matched"] = " | ".join(getattr(module, "MATCHED", ()))
        if args.parity:
            if args.precision != "fp32":
                raise Unsupported("the parity check runs in fp32 only")
            weights, batch = canonical.load(args.parity)
            if args.export_onnx:
                if not hasattr(module, "export_onnx"):
                    raise Unsupported(f"{args.framework} has no ONNX export for {args.workload}")
                outputs = module.export_onnx(run, weights, batch, args.export_onnx)
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
    run.finish().write(out)
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
