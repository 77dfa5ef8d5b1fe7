"""The parity check: the same canonical weights and batch in every framework, outputs compared.

Each framework's own environment (the same backends as run-matrix) loads the canonical,
framework-neutral parameters (workloads/common/canonical.py), runs the forward pass and, for the
training workloads, canonical.PARITY_STEPS optimizer steps, and records its outputs. They are
compared with the reference framework's: max absolute difference and max |a - b| / max |ref|.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workloads.common import canonical, options as framework_options
from workloads.common.result import Result

REFERENCE = "pytorch"


@dataclass
class Comparison:
    workload: str
    framework: str
    status: str  # pass, FAIL, or the cell's own status (failed, unsupported...)
    parameter_count: int | None
    expected_count: int
    differences: dict[str, tuple[float, float]]  # output -> (max abs, max relative)
    note: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "pass"


def write_canonical(data_dir: Path, workloads: list[str]) -> None:
    for workload in workloads:
        canonical.write(Path(data_dir) / "parity" / workload, workload)


def row_name(result: Result) -> str:
    """The framework, with its non-default options when it ran with any: "pytorch (channels_last=on)"."""
    label = framework_options.label(result.cell.options)
    return f"{result.cell.framework} ({label})" if label else result.cell.framework


def compare(results: list[Result], tolerance: float = canonical.PARITY_TOLERANCE,
            reference: str = REFERENCE) -> list[Comparison]:
    """One Comparison per (workload, framework and options), the reference framework (its
    defaults) first; every row is compared with the reference at its defaults."""
    by_cell = {(r.cell.workload, row_name(r)): r for r in results}
    comparisons = []
    for workload in dict.fromkeys(r.cell.workload for r in results):
        expected = canonical.parameter_count(canonical.parameters(workload))
        base = by_cell.get((workload, reference))
        frameworks = sorted({f for w, f in by_cell if w == workload}, key=lambda f: (f != reference, f))
        for framework in frameworks:
            result = by_cell[(workload, framework)]
            count = result.metrics.parameter_count
            if result.status != "ok" or not result.outputs:
                comparisons.append(Comparison(workload, framework, result.status, count, expected, {},
                                              result.reason or "no outputs recorded"))
                continue
            if base is None or base.status != "ok":
                comparisons.append(Comparison(workload, framework, "FAIL", count, expected, {},
                                              f"no {reference} reference outputs to compare with"))
                continue
            differences, problems = {}, []
            for name, expected_output in base.outputs.items():
                if name not in result.outputs:
                    problems.append(f"missing output {name!r}")
                    continue
                ours, theirs = np.asarray(result.outputs[name]), np.asarray(expected_output)
                if ours.shape != theirs.shape:
                    problems.append(f"{name}: shape {ours.shape} != {theirs.shape}")
                    continue
                absolute = float(np.max(np.abs(ours - theirs)))
                differences[name] = (absolute, absolute / max(float(np.max(np.abs(theirs))), 1e-30))
            if count != expected:
                problems.append(f"parameter count {count} != canonical {expected}")
            problems += [f"{name}: relative difference {rel:.1e} > {tolerance:.0e}"
                         for name, (_, rel) in differences.items() if not rel <= tolerance]
            comparisons.append(Comparison(workload, framework, "FAIL" if problems else "pass", count, expected,
                                          differences, "; ".join(problems)))
    return comparisons


def markdown(comparisons: list[Comparison], tolerance: float = canonical.PARITY_TOLERANCE) -> str:
    lines = [f"# Parity check against {REFERENCE}", "",
             f"Canonical weights and batch (workloads/common/canonical.py), fp32; pass when every output's "
             f"max |a - b| / max |{REFERENCE}| <= {tolerance:.0e} and the parameter count matches.", ""]
    for workload in dict.fromkeys(c.workload for c in comparisons):
        lines += [f"## {workload}", "", "| framework | parameters | output | max abs diff | max rel diff | result |",
                  "|---|---:|---|---:|---:|---|"]
        for item in (c for c in comparisons if c.workload == workload):
            count = f"{item.parameter_count:,}" if item.parameter_count is not None else "-"
            rows = item.differences.items() or [("-", None)]
            for name, difference in rows:
                absolute, relative = (f"{difference[0]:.2e}", f"{difference[1]:.2e}") if difference else ("-", "-")
                verdict = item.status + (f": {item.note}" if item.note else "")
                lines.append(f"| {item.framework} | {count} | {name} | {absolute} | {relative} | "
                             f"{verdict.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)
