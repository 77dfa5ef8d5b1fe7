"""`export`: a run's results as one tidy table for notebooks: one row per cell and repeat, with
its identity, status, the workload's headline figure and every other metric, and the provenance
that says where it was measured (device, versions, image digest).

The CSV is made to be opened in a spreadsheet, and its strings come from cells, which are
untrusted (docs/RUN-GUARANTEES.md, the trust model): none of them is read there as a formula."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

from orchestrator import run_folder
from orchestrator.commands._shared import console, left_out
from orchestrator.errors import UserError

HELP = "export a run's results as a tidy table (one row per cell and repeat) for notebooks"
ORDER = 74  # after compare: both read a run's results

FORMATS = ["csv"]
DEFAULT_FILE = run_folder.CELLS_CSV
STDOUT = "-"
# RFC 4180's line end: the CSV writer then quotes a field holding a carriage return as well as one
# holding a line feed, so a CR from a result can neither end a row nor start a formula's cell.
LINE_END = "\r\n"

# What a spreadsheet takes for the start of a formula (OWASP, "CSV Injection"): a cell beginning
# with one of these is given a leading single quote, which makes it text (and which a spreadsheet
# does not show). A plain numeral ("-3.5") is no formula and stays as it is.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMERAL = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")

IDENTITY = ["workload", "framework", "variant", "precision", "mode", "profile", "data", "init", "options", "repeat"]
# pct_of_peak: achieved_flops_per_s (a metric) over peak_flops_per_s, a fraction; peak_source says
# where the peak comes from, or why it is unknown (orchestrator/report/ceiling.py).
OUTCOME = ["status", "reason", "headline_metric", "headline", "pct_of_peak", "peak_flops_per_s", "peak_source"]
# Provenance a reader filters or groups by; the rest stays in each cell's JSON.
PROVENANCE = ["device", "gpu_name", "gpu_model", "gpu_driver", "cpu_model", "framework_version", "cuda_version",
              "cudnn_version", "backend", "image_digest", "git_revision", "hostname", "cluster_node", "data_source",
              "started_at", "wall_time_s", "key"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", type=Path, metavar="RUN", help="a run folder (results/<run-id>)")
    parser.add_argument("--format", choices=FORMATS, default=FORMATS[0], help="output format (default: csv)")
    parser.add_argument("--out", help=f"output file, or {STDOUT} for standard output (default: RUN/{DEFAULT_FILE})")


def main(args: argparse.Namespace) -> int:
    unreadable: list = []
    export(args.results_dir, out=args.out, format=args.format, unreadable=unreadable)
    return left_out(unreadable)


def tidy_frame(results_dir: Path, unreadable: list | None = None) -> pd.DataFrame:
    """The run's results, one row per cell and repeat: identity, outcome, metrics, provenance.
    `unreadable` receives the cell files left out (results.Unreadable: each with why)."""
    from orchestrator.report.ceiling import cpu_peaks
    from orchestrator.report.frame import report_frame
    from orchestrator.report.metadata import recorded_invocations
    from orchestrator.results import CELLS_FOLDER, METRIC_COLUMNS, derived_metrics, load_cells
    from workloads.common import declaration

    results_dir = Path(results_dir)
    if not results_dir.is_dir() or not (results_dir / CELLS_FOLDER).is_dir():
        raise UserError(f"{results_dir} is not a run folder (no {CELLS_FOLDER}/ in it); pass a folder run-matrix "
                        f"wrote, e.g. results/<run-id>")
    loaded = load_cells(results_dir)
    if unreadable is not None:
        unreadable += loaded.unreadable
    frame = report_frame(loaded.results, cpu_peaks(recorded_invocations(results_dir)))
    declared = declaration.declared()
    frame["headline_metric"] = [declared[name].headline if name in declared else None for name in frame["workload"]]
    # the headline figure of each row, from the column its workload's declaration names
    frame["headline"] = [row.get(metric) if isinstance(metric, str) else None
                         for metric, row in zip(frame["headline_metric"], frame.to_dict("records"))]
    frame["headline"] = pd.to_numeric(frame["headline"], errors="coerce").astype("float64")
    derived = list(dict.fromkeys(name for metrics in derived_metrics().values() for name in metrics))
    metrics = list(METRIC_COLUMNS) + derived
    columns = IDENTITY + OUTCOME + metrics + PROVENANCE
    return frame[columns].sort_values(IDENTITY, kind="stable", ignore_index=True)


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with every string that a spreadsheet would run as a formula made text (see
    FORMULA_STARTS); numbers, and strings that are plain numerals, unchanged."""
    frame = frame.copy()
    for column in frame.select_dtypes(include=["object", "string"]).columns:
        frame[column] = frame[column].map(formula_neutralised)
    return frame


def formula_neutralised(value):
    """`value`, with a leading single quote when it is a string a spreadsheet would read as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not _NUMERAL.fullmatch(value):
        return "'" + value
    return value


def export(results_dir: Path, *, out: str | None = None, format: str = "csv",
           unreadable: list | None = None) -> Path | None:
    """Write the run's tidy table as ``format``; returns the file written (None: standard output).
    `unreadable` receives the cell files left out, as for `tidy_frame`."""
    from workloads.common import safe_files

    if format not in FORMATS:
        raise UserError(f"--format {format!r}: choose from {', '.join(FORMATS)}")
    text = spreadsheet_safe(tidy_frame(results_dir, unreadable)).to_csv(index=False, lineterminator=LINE_END)
    if out == STDOUT:
        sys.stdout.write(text)
        return None
    path = Path(out) if out else Path(results_dir) / DEFAULT_FILE
    try:
        # the default file is inside the run folder: no link on the way from it is followed
        safe_files.write_text_atomic(path, text, below=None if out else results_dir)
    except OSError as error:  # a folder where the file belongs, a link, a missing folder, a full disk
        problem = f"{error.filename}: {error.strerror}" if error.filename and error.strerror else str(error)
        raise UserError(f"cannot write {path} ({problem}); pass --out FILE in a writable folder, or --out - "
                        f"for standard output") from None
    console.print(f"export: {path}", markup=False)
    return path
