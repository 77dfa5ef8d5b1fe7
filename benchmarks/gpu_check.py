"""Run PyTorch's and JAX's CUDA cells in fp32, tf32, fp16 and bf16 with interpreters that already have
CUDA builds of them, and print what each cell measured and what precision the framework says it used.

    python benchmarks/gpu_check.py --python /opt/venv/bin/python            # one interpreter for both
    python benchmarks/gpu_check.py --python-for pytorch=/venvs/torch/bin/python \\
        --python-for jax=/venvs/jax/bin/python --profile full --require-cuda

No Docker and no network: every cell goes through the real harness, `python -m orchestrator
run-matrix --backend local --python <interpreter>`, on synthetic data (the smoke profile by
default; --profile full for the study's sizes), one results folder per framework under
--results-dir. Per cell it prints the status, the steady throughput (training: samples/s after the
first step; ResNet-50: images/s), its achieved FLOP/s and % of the device's peak in the cell's
precision (orchestrator/report/ceiling.py: the datasheet table for a GPU), the precision switches the framework recorded
(provenance.extras: autocast, allow_tf32, tf32, matmul_precision, ...), the device, the GPU's name
and its driver, and what the host's telemetry measured around the cell (orchestrator/telemetry/:
the GPU's mean and peak watts, joules per sample or image of the steady phase, and how: the
energy counter, integrated power samples, or none with the reason). On a machine without a GPU every CUDA cell is recorded as unsupported before it
starts, and the last line says plainly that no CUDA path ran.

Exit status: 0 when no cell failed (with --require-cuda: and at least one cell ran on CUDA),
1 otherwise, 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator import frameworks as framework_registry, host  # noqa: E402
from orchestrator.errors import UserError  # noqa: E402
from orchestrator.report import ceiling  # noqa: E402
from orchestrator.report.groups import device_identity  # noqa: E402
from orchestrator.report.metadata import recorded_invocations  # noqa: E402
from orchestrator.results import load_cells  # noqa: E402
from workloads.common import declaration  # noqa: E402
from workloads.common.result import Result  # noqa: E402

FRAMEWORKS = ("pytorch", "jax")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
# What a framework records about the precision it ran in (provenance.extras), in this order.
PRECISION_KEYS = ("tf32", "allow_tf32", "autocast", "matmul_precision", "jax_default_matmul_precision",
                  "compute_dtype", "dtype", "policy", "loss_scale", "loss_scaling", "NVIDIA_TF32_OVERRIDE")
TIMEOUT_S = {"smoke": 900, "full": 7200}


def cuda_variant(framework: framework_registry.Framework) -> str | None:
    """The framework's CUDA variant that the default matrix runs (matrix.toml), else its first one."""
    from orchestrator import matrix

    try:
        entries = {entry.name: entry for entry in matrix.load(None, framework_registry.discover()).frameworks}
    except UserError:
        entries = {}
    listed = entries[framework.name].variants if framework.name in entries else []
    cuda = [name for name, variant in framework.variants.items() if variant.device == "cuda"]
    return next((name for name in listed if name in cuda), cuda[0] if cuda else None)


def pairs(given: list[str], what: str) -> dict[str, str]:
    chosen = {}
    for text in given:
        name, equals, value = text.partition("=")
        if not equals or not name or not value:
            raise UserError(f"{what} {text!r}: give FRAMEWORK=VALUE, e.g. {what} pytorch=...")
        if name not in FRAMEWORKS:
            raise UserError(f"{what} {text!r}: this check runs {', '.join(FRAMEWORKS)}")
        chosen[name] = value
    return chosen


def comma_list(text: str, valid: tuple[str, ...], what: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in items if item not in valid]
    if not items or unknown:
        raise UserError(f"--{what} {text!r}: choose from {', '.join(valid)}")
    return items


def precision_used(result: Result) -> str:
    """What the framework recorded about its precision: "allow_tf32=false, autocast=none"."""
    extras = result.provenance.extras
    return ", ".join(f"{key}={extras[key]}" for key in PRECISION_KEYS if key in extras) or "-"


def steady_rate(result: Result) -> str:
    """The steady throughput the workload declares (training: after the first step), with its unit."""
    workload = declaration.get(result.cell.workload)
    metric = workload.metric(workload.steady or workload.throughput or workload.headline)
    value = metric.value(result) if result.status == "ok" else None
    return f"{value:,.1f} {metric.unit}" if value is not None else "-"


def flops_and_peak(result: Result, probes: dict[str, dict]) -> tuple[str, str]:
    """The cell's achieved FLOP/s and its % of its device's peak in its precision ("peak unknown"
    and why where there is none: ceiling.py), "-" for a cell that is not ok."""
    achieved = result.metrics.achieved_flops_per_s
    if result.status != "ok" or achieved is None:
        return "-", "-" if result.status != "ok" else ceiling.NOT_COUNTED
    provenance = result.provenance
    kind, model = device_identity(provenance.device, gpu_of(result)[0], provenance.cpu_model)
    peak = ceiling.device_peak(kind, model, result.cell.precision, probes)
    share = (ceiling.format_fraction_of_peak(achieved / peak.flops_per_s) if peak.flops_per_s
             else peak.source[:90])
    return ceiling.format_flops(achieved), share


def gpu_of(result: Result) -> tuple[str, str]:
    provenance = result.provenance
    name = provenance.gpu_name or provenance.gpu.get("name") or "-"
    driver = provenance.gpu_driver or provenance.gpu.get("driver") or "-"
    return name, driver


def run(framework: str, variant: str, python: str, args, folder: Path) -> int:
    command = [sys.executable, "-m", "orchestrator", "run-matrix", "--backend", "local", "--python", python,
               "--frameworks", framework, "--variants", variant, "--workloads", ",".join(args.workloads),
               "--precisions", ",".join(args.precisions), "--profile", args.profile, "--data", "synthetic",
               "--repeat", "1", "--results-dir", str(folder), "--timeout", str(args.timeout), "--no-report"]
    print(f"$ {' '.join(command)}", flush=True)
    return subprocess.run(command, cwd=ROOT, check=False).returncode


def watts(result: Result) -> str:
    """The GPU's mean and peak power over the cell: "287 W mean, 300 W peak"."""
    gpu = result.energy.gpu if result.energy is not None else None
    if gpu is None or gpu.mean_w is None:
        return "-"
    return f"{gpu.mean_w:,.0f} W mean" + (f", {gpu.peak_w:,.0f} W peak" if gpu.peak_w is not None else "")


def joules_per_sample(result: Result) -> str:
    """Joules per sample (image) of the steady phase, gross and net of idle power, and the method;
    else why there is none."""
    energy = result.energy
    if energy is None:
        return "not sampled"
    unit = "image" if declaration.get(result.cell.workload).kind != declaration.TRAINING else "sample"
    if energy.joules_per_sample is None:
        reasons = [device.reason for device in (energy.gpu, energy.cpu) if device.method == "none" and device.reason]
        return f"- ({(energy.reason or '; '.join(reasons) or 'not measured')[:90]})"
    net = f", {energy.net_joules_per_sample:.3g} net" if energy.net_joules_per_sample is not None else ""
    return (f"{energy.joules_per_sample:.3g} J/{unit}{net} "
            f"({'+'.join(energy.basis_devices)}: GPU {energy.gpu.method}, CPU {energy.cpu.method})")


def table(results: list[Result], probes: dict[str, dict] | None = None) -> list[str]:
    headings = ("cell", "status", "steady throughput", "FLOP/s", "% of peak", "precision the framework reports",
                "device", "GPU", "driver", "GPU power", "energy")
    rows = []
    for result in results:
        cell = result.cell
        name, driver = gpu_of(result)
        status = result.status if result.status == "ok" else f"{result.status}: {(result.reason or '')[:90]}"
        rows.append((f"{cell.framework}/{cell.variant} {cell.workload} {cell.precision}", status, steady_rate(result),
                     *flops_and_peak(result, probes or {}), precision_used(result), result.provenance.device or "-", name, driver, watts(result),
                     joules_per_sample(result)))
    widths = [max(len(str(row[i])) for row in [headings, *rows]) for i in range(len(headings))]
    return [" | ".join(str(value).ljust(width) for value, width in zip(row, widths)).rstrip()
            for row in [headings, tuple("-" * width for width in widths), *rows]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter with CUDA builds of the frameworks "
                        "(default: this one)")
    parser.add_argument("--python-for", action="append", default=[], metavar="FRAMEWORK=PATH",
                        help="one framework's own interpreter, e.g. jax=/venvs/jax/bin/python (repeatable)")
    parser.add_argument("--variant-for", action="append", default=[], metavar="FRAMEWORK=VARIANT",
                        help="the CUDA variant recorded for a framework (default: the one matrix.toml runs), "
                        "e.g. pytorch=cu128")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help=f"default: {','.join(FRAMEWORKS)}")
    parser.add_argument("--workloads", default="cnn,resnet50,gru", help="default: cnn,resnet50,gru")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help=f"default: {','.join(PRECISIONS)}")
    parser.add_argument("--profile", choices=("smoke", "full"), default="smoke",
                        help="smoke (default: a few batches, minutes) or full (the study's sizes)")
    parser.add_argument("--results-dir", type=Path, help="default: results/gpu-check-<time>/")
    parser.add_argument("--timeout", type=float, help="seconds per cell (default: 900 smoke, 7200 full)")
    parser.add_argument("--require-cuda", action="store_true", help="exit 1 unless at least one cell ran on CUDA")
    args = parser.parse_args(argv)
    try:
        args.frameworks = comma_list(args.frameworks, FRAMEWORKS, "frameworks")
        args.workloads = comma_list(args.workloads, tuple(declaration.declared()), "workloads")
        args.precisions = comma_list(args.precisions, PRECISIONS, "precisions")
        pythons = pairs(args.python_for, "--python-for")
        variants = pairs(args.variant_for, "--variant-for")
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    args.timeout = args.timeout or TIMEOUT_S[args.profile]
    folder = args.results_dir or ROOT / "results" / f"gpu-check-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    known = framework_registry.discover()

    gpus = host.gpu_facts()
    print("host GPUs: " + ("; ".join(", ".join(f"{key}={value}" for key, value in gpu.items()) for gpu in gpus)
                           if gpus else "none found (no NVIDIA driver answers here)"), flush=True)
    results: list[Result] = []
    probes: dict[str, dict] = {}  # a CPU's peak, where a run measured one (run.json)
    for framework in args.frameworks:
        variant = variants.get(framework) or cuda_variant(known[framework])
        if variant not in known[framework].variants or known[framework].variants[variant].device != "cuda":
            print(f"error: {framework} has no CUDA variant {variant!r}", file=sys.stderr)
            return 2
        python = pythons.get(framework, args.python)
        code = run(framework, variant, python, args, folder / framework)
        if code == 2:
            print(f"error: run-matrix refused the {framework} cells (exit 2; its line above says why)", file=sys.stderr)
            return 2
        try:
            results += load_cells(folder / framework).results
            probes.update(ceiling.cpu_peaks(recorded_invocations(folder / framework)))
        except UserError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    results.sort(key=lambda r: (args.frameworks.index(r.cell.framework), args.workloads.index(r.cell.workload),
                                args.precisions.index(r.cell.precision), r.cell.key))
    print()
    print(f"GPU check ({args.profile} profile, synthetic data), results in {folder}:")
    for line in table(results, probes):
        print(line)
    on_cuda = [r for r in results if r.status == "ok" and r.provenance.device == "cuda"]
    failed = [r for r in results if r.status in ("failed", "timeout")]
    print()
    if on_cuda:
        print(f"{len(on_cuda)} of {len(results)} cell(s) ran on CUDA; {len(failed)} failed.")
    else:
        statuses = sorted({r.status for r in results})
        print(f"no CUDA path ran: all {len(results)} cell(s) were {' or '.join(statuses) or 'absent'} "
              f"({'no GPU on this host' if not gpus else 'see the reasons above'}); nothing here measures a GPU.")
    if failed or (args.require_cuda and not on_cuda):
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
