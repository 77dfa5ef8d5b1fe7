"""Result records as the harness writes them, for tests that build their own, and a stand-in
interpreter that writes them from a real subprocess (write_fake_interpreter).

An ok result carries its timed phases, its headline figure and the framework version it measured
(orchestrator.results.ok_result_problem; docs/RUN-GUARANTEES.md, the trust model): one without is
a failed cell or an unreadable file. Tests that check other things give their records these."""
from __future__ import annotations

import hashlib
import stat
import sys
import textwrap
from pathlib import Path

from orchestrator.results import CELLS_FOLDER, cell_path
from workloads.common import declaration, safe_files
from workloads.common.result import Result

STAND_IN_VERSION = "0.0-stand-in"

# For a stand-in interpreter's script: the imports, and the source of an ok result of the cell that
# `cell_expression` names, with what an ok result carries.
OK_RESULT_IMPORTS = "from workloads.common.result import Metrics, Provenance, Result\n"


def ok_result_source(cell_expression: str) -> str:
    return (f"Result({cell_expression}, phases={{'train': 1.0}}, "
            f"metrics=Metrics(steady_samples_per_s=1.0, images_per_s=1.0), "
            f"provenance=Provenance(framework_version={STAND_IN_VERSION!r}))")


def measured(result: Result, rate: float = 1.0) -> Result:
    """`result` (changed in place, and returned) with what an ok result carries, where the test
    left it out: a phase, the framework version, and `rate` as its headline figure. A result
    that is not ok is returned as it is."""
    if result.status != "ok":
        return result
    headline = declaration.get(result.cell.workload).headline_metric
    if not result.phases:
        result.phases = {"inference" if result.cell.workload == "resnet50" else "train": 1.0}
    if not result.provenance.framework_version:
        result.provenance.framework_version = STAND_IN_VERSION
    if headline.derive is None and headline.value(result) is None:
        setattr(result.metrics, headline.name, rate)
    return result


def cell_file(folder: Path, result: Result) -> Path:
    """Where a test files `result`: its cell's own path, or, for a cell with a hostile name (a
    framework called "<b>fw"), which no run would file, a plain name made of its key's digest."""
    try:
        return cell_path(folder, result.cell)
    except safe_files.UnsafePath:
        digest = hashlib.sha256(result.cell.key.encode("utf-8")).hexdigest()[:16]
        return Path(folder) / CELLS_FOLDER / f"hostile-{digest}.json"


ROOT = Path(__file__).resolve().parents[2]


def write_fake_interpreter(folder: Path, body: str) -> str:
    """An executable in `folder` standing in for a framework's Python: it takes
    `python -m workloads --cell FILE`, reads the cell document into `request` (`cell` and `out` are
    its cell and its result's path) and runs `body`, where `ok(cell)` makes an ok result with what
    an ok result carries. os, socket, sys and time are imported; the checkout is importable
    wherever it runs (a Ray node's worker starts elsewhere). The tests' fixture is conftest's
    `fake_interpreter`; this is its one implementation, for module-scoped users too."""
    script = Path(folder) / "fake-python"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""
        import os, socket, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from workloads.common.cell import CellRequest
        request = CellRequest.read(sys.argv[sys.argv.index("--cell") + 1] if "--cell" in sys.argv else sys.argv[-1])
        cell, out = request.cell, request.out
    """) + OK_RESULT_IMPORTS + f"def ok(cell):\n    return {ok_result_source('cell')}\n" + textwrap.dedent(body))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)
