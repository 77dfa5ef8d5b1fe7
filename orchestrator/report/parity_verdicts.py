"""A run's parity verdicts, for the gate (FAIRNESS.md: parity-gate): run-matrix keeps its parity
check in the run folder's parity/ folder (cells/ as any run keeps them); the verdicts are computed
again from those cells (orchestrator/parity.py), never taken from parity.json: the cells are read
as untrusted as every other (orchestrator.results.load_cells, docs/RUN-GUARANTEES.md)."""
from __future__ import annotations

import os
from pathlib import Path

from orchestrator import parity
from orchestrator.errors import UserError
from orchestrator.report.gate import FAILED, NOT_CHECKED, PASSED, ParityRecord, Verdict
from orchestrator.results import load_cells
from orchestrator.run_folder import PARITY_FOLDER

LONGEST_WHY = 300  # characters of a failure's why in a table cell


def run_record(results_dir: str | os.PathLike) -> ParityRecord | None:
    """The verdicts of ``results_dir/parity/``; None when the run has no parity check there."""
    folder = Path(results_dir) / PARITY_FOLDER
    if os.path.islink(folder) or not folder.is_dir():
        return None  # a link is never followed (docs/RUN-GUARANTEES.md)
    try:
        loaded = load_cells(folder)
    except UserError as error:
        return ParityRecord({}, missing=f"the parity check left no readable result ({error})"[:LONGEST_WHY],
                            summary="no readable result in parity/")
    record = record_of(parity.compare(loaded.results))
    if loaded.unreadable:
        record.summary += f"; {len(loaded.unreadable)} unreadable parity result(s) left out"
    return record


def record_of(comparisons: list[parity.Comparison]) -> ParityRecord:
    """Each comparison's verdict, keyed as a summary row is: (workload, framework, variant, mode, options)."""
    verdicts = {(item.workload, item.name, item.variant, item.mode, item.options): verdict(item)
                for item in comparisons}
    return ParityRecord(verdicts, summary=f"{parity.counts(comparisons)} (parity/parity.md)")


def verdict(comparison: parity.Comparison) -> Verdict:
    if comparison.status == parity.PASS:
        return Verdict(PASSED)
    why = " ".join(comparison.note.split())[:LONGEST_WHY]
    if comparison.status in (parity.NOT_CHECKED, "unsupported"):
        return Verdict(NOT_CHECKED, why or comparison.status)
    if comparison.status == parity.FAIL:
        return Verdict(FAILED, why or "outputs differ from the reference's")
    return Verdict(FAILED, f"its parity cell {comparison.status}" + (f": {why}" if why else ""))
