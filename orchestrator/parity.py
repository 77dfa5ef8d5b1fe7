"""The parity check: the same canonical weights and batch in every framework, outputs compared.

Each framework's own environment (the same backends as run-matrix) loads the canonical,
framework-neutral parameters (workloads/common/canonical.py), runs the forward pass and, for the
training workloads, canonical.PARITY_STEPS optimizer steps, and records its outputs. They are
compared with the reference framework's (at its default options, on the same kind of device where
it ran there): max absolute difference and max |a - b| / max |ref|, and the parameter count with
the reference model's.

`parity` runs it on its own; `run-matrix` runs it beside the cells of every run (unless
--no-parity) into the run folder's parity/ folder, and the report ranks no row whose framework,
variant and options failed it (FAIRNESS.md: parity-gate).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from orchestrator import row_names
from workloads.common import canonical, declaration, modes, options as framework_options, safe_files
from workloads.common.result import Cell, Result

REFERENCE = "pytorch"
PASS, FAIL, NOT_CHECKED = "pass", "FAIL", "not checked"
PRECISION, PROFILE, DATA = "fp32", "full", "synthetic"  # what a parity cell runs (the canonical batch)
FILES = ("parity.md", "parity.json")


@dataclass
class Comparison:
    workload: str
    framework: str  # the row: the framework, its mode and non-default options: "pytorch [eager, channels_last=on]"
    status: str  # PASS, FAIL, NOT_CHECKED (no reference to compare with), or the cell's own status (failed...)
    parameter_count: int | None
    expected_count: int
    differences: dict[str, tuple[float, float]]  # output -> (max abs, max relative)
    note: str = ""
    variant: str = ""
    options: str = ""  # the non-default options' label, as the report names a row's ("channels_last=on")
    name: str = ""  # the cell's framework alone
    mode: str = ""  # the cell's mode as it asked for it ("" in a cell from before modes were declared)

    @property
    def passed(self) -> bool:
        return self.status == PASS


def write_canonical(data_dir: Path, workloads: list[str]) -> None:
    for workload in workloads:
        canonical.write(Path(data_dir) / "parity" / workload, workload)


def checked(workload: str) -> bool:
    """Whether a workload has a parity check: it declares its canonical weights."""
    return declaration.get(workload).canonical_layers is not None


def row_name(result: Result) -> str:
    """The framework, with its mode and its non-default options, as the report names its row:
    "pytorch [compiled, channels_last=on]" (orchestrator/row_names.py)."""
    return row_names.row_name(result.cell.framework, framework_options.label(result.cell.options), "",
                              mode=result.cell.mode)


def _is_reference(result: Result, reference: str) -> bool:
    """The reference framework at its default options and in its default mode."""
    return (result.cell.framework == reference and not result.cell.options
            and modes.resolve(reference, result.cell.mode) == modes.default(reference))


def cells_for(run_cells: list[Cell], default_variants: dict[str, str]) -> list[Cell]:
    """The parity cells of a run: one per workload (that has a parity check) and distinct framework,
    variant, mode and options among `run_cells` (parity holds in every mode), and the reference at
    its default options and mode (on its default variant, `default_variants`, where the run has none
    of its own) for each workload."""
    wanted: dict[tuple, Cell] = {}
    for cell in run_cells:
        if not checked(cell.workload):
            continue
        key = (cell.workload, cell.framework, cell.variant, cell.mode, framework_options.label(cell.options))
        wanted.setdefault(key, Cell(cell.framework, cell.workload, variant=cell.variant, precision=PRECISION,
                                    profile=PROFILE, data=DATA, options=dict(cell.options), mode=cell.mode))
    plain_mode = modes.default(REFERENCE)
    for workload in dict.fromkeys(cell.workload for cell in run_cells if checked(cell.workload)):
        plain = [key for key in wanted if key[0] == workload and key[1] == REFERENCE and not key[4]
                 and modes.resolve(REFERENCE, key[3]) == plain_mode]
        if not plain and REFERENCE in default_variants:
            variant = default_variants[REFERENCE]
            wanted[(workload, REFERENCE, variant, plain_mode, "")] = Cell(
                REFERENCE, workload, variant=variant, precision=PRECISION, profile=PROFILE, data=DATA, mode=plain_mode)

    def order(cell: Cell) -> tuple:  # per workload, the plain reference first: every other cell is compared with it
        plain = not cell.options and modes.resolve(cell.framework, cell.mode) == modes.default(cell.framework)
        return (cell.workload, cell.framework != REFERENCE, not plain, cell.framework, cell.variant,
                modes.resolve(cell.framework, cell.mode),
                framework_options.label(cell.options))
    return sorted(wanted.values(), key=order)


def compare(results: list[Result], tolerance: float = canonical.PARITY_TOLERANCE,
            reference: str = REFERENCE) -> list[Comparison]:
    """One Comparison per (workload, framework, variant, mode and options), the reference framework
    (its defaults) first; every one is compared with an ok reference at its defaults (its default
    mode), on the same device where one ran there."""
    comparisons = []
    for workload in dict.fromkeys(result.cell.workload for result in results):
        expected = declaration.get(workload).settings_for(PROFILE).parameter_count  # the canonical count
        rows = [result for result in results if result.cell.workload == workload]
        references = [result for result in rows if _is_reference(result, reference)
                      and result.status == "ok" and result.outputs]
        rows.sort(key=lambda result: (not _is_reference(result, reference), result.cell.framework, result.cell.mode,
                                      framework_options.label(result.cell.options), result.cell.variant))
        for result in rows:
            found = Comparison(workload, row_name(result), result.status, result.metrics.parameter_count, expected,
                               {}, variant=result.cell.variant, options=framework_options.label(result.cell.options),
                               name=result.cell.framework, mode=result.cell.mode)
            comparisons.append(found)
            if result.status != "ok":
                found.note = " ".join(str(result.reason or "no reason recorded").split())[:300]
                continue
            if not result.outputs:
                found.status, found.note = FAIL, "no outputs recorded"
                continue
            base = next((item for item in references if item.provenance.device == result.provenance.device),
                        references[0] if references else None)
            if base is None:
                found.status, found.note = NOT_CHECKED, f"no {reference} reference outputs to compare with"
                continue
            problems = []
            for name, expected_output in base.outputs.items():
                if name not in result.outputs:
                    problems.append(f"missing output {name!r}")
                    continue
                ours, theirs = np.asarray(result.outputs[name]), np.asarray(expected_output)
                if ours.shape != theirs.shape:
                    problems.append(f"{name}: shape {ours.shape} != {theirs.shape}")
                    continue
                absolute = float(np.max(np.abs(ours - theirs)))
                found.differences[name] = (absolute, absolute / max(float(np.max(np.abs(theirs))), 1e-30))
            if found.parameter_count != expected:
                problems.append(f"parameter count {found.parameter_count} != canonical {expected}")
            problems += [f"{name}: relative difference {rel:.1e} > {tolerance:.0e}"
                         for name, (_, rel) in found.differences.items() if not rel <= tolerance]
            found.status, found.note = (FAIL if problems else PASS), "; ".join(problems)
    return comparisons


def markdown(comparisons: list[Comparison], tolerance: float = canonical.PARITY_TOLERANCE) -> str:
    lines = [f"# Parity check against {REFERENCE}", "",
             f"Canonical weights and batch (workloads/common/canonical.py), fp32; pass when every output's "
             f"max |a - b| / max |{REFERENCE}| <= {tolerance:.0e} and the parameter count matches.", ""]
    for workload in dict.fromkeys(c.workload for c in comparisons):
        lines += [f"## {workload}", "",
                  "| framework | variant | parameters | output | max abs diff | max rel diff | result |",
                  "|---|---|---:|---|---:|---:|---|"]
        for item in (c for c in comparisons if c.workload == workload):
            count = f"{item.parameter_count:,}" if item.parameter_count is not None else "-"
            rows = item.differences.items() or [("-", None)]
            for name, difference in rows:
                absolute, relative = (f"{difference[0]:.2e}", f"{difference[1]:.2e}") if difference else ("-", "-")
                verdict = item.status + (f": {item.note}" if item.note else "")
                lines.append(f"| {item.framework} | {item.variant} | {count} | {name} | {absolute} | {relative} | "
                             f"{verdict.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


def write_files(comparisons: list[Comparison], folder: Path) -> None:
    """parity.md and parity.json into `folder`, each atomically, never through a link (the caller
    turns an OSError into its one line)."""
    records = json.dumps([vars(item) for item in comparisons], indent=2)
    for name, text in ((FILES[0], markdown(comparisons) + "\n"), (FILES[1], records + "\n")):
        safe_files.write_text_atomic(Path(folder) / name, text)


# neither passed nor failed: no reference to compare with, or a cell its framework cannot run (a
# recorded status, docs/RUN-GUARANTEES.md), such as Keras on torch's compiled GRU
NOT_JUDGED = (NOT_CHECKED, "unsupported")


def failures(comparisons: list[Comparison]) -> list[Comparison]:
    """The comparisons that failed: outputs out of tolerance, or a cell that failed or timed out."""
    return [item for item in comparisons if not item.passed and item.status not in NOT_JUDGED]


def counts(comparisons: list[Comparison]) -> str:
    """"4 passed, 1 failed, 2 not checked": the run's one line."""
    passed = sum(item.passed for item in comparisons)
    failed = len(failures(comparisons))
    return f"{passed} passed, {failed} failed, {len(comparisons) - passed - failed} not checked"
