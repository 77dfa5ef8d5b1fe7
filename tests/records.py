"""Result records as the harness writes them, for tests that build their own, and a stand-in
interpreter that writes them from a real subprocess.

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


def fake_interpreter(tmp_path: Path, body: str) -> str:
    """An executable that takes `python -m workloads --cell FILE`, reads the cell document and does `body`
    (where `ok(cell)` makes an ok result with what an ok result carries)."""
    script = tmp_path / "fake-python"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent("""
        import os, sys, time
        from workloads.common.cell import CellRequest
        request = CellRequest.read(sys.argv[sys.argv.index("--cell") + 1])
        out = request.out
        open(os.environ["TMPDIR"] + "/../../pid", "w").write(str(os.getpid()))
    """) + OK_RESULT_IMPORTS + f"def ok(cell):\n    return {ok_result_source('cell')}\n" + textwrap.dedent(body))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)
