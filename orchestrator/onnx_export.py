"""The model an inference engine runs: PyTorch's model on the canonical weights, exported to ONNX once.

ONNX Runtime runs a graph that another framework defined. A framework whose metadata.toml says
`model_source = "pytorch-onnx-export"` gets PyTorch's model of each workload it runs (the ones it
has a `workloads/<workload>/<framework>.py` for: today ResNet-50 only), exported by the workload
entry point (a cell document with `parity` and `export_onnx`; by hand, `python -m workloads
<workload> --framework pytorch --parity DIR --export-onnx OUT`) in PyTorch's own environment on the
backend in use: its virtual environment locally, its image under Docker. The export is cached in
the dataset folder, which containers already see (read-only, at /data):

    <data dir>/onnx/<workload>-<canonical weights sha256[:16]>-<PyTorch requirements sha256[:8]>/
        model.onnx, model.onnx.data, export.json

keyed by the canonical weights' identity and by the environment that exports them, checked
(sha256 of both files) and reused afterwards. export.json records how the model was exported
(torch, onnx and onnxscript versions, exporter, opset, input shape, file hashes) and by what
(backend, image or interpreter); every cell that runs the model copies it into its result.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from orchestrator.errors import first_line
from workloads.common import canonical
from workloads.common.data.checksum import file_digest
from workloads.common.result import Cell, Result, write_json_atomic

MODEL_SOURCE = "pytorch-onnx-export"  # metadata.toml: model_source
EXPORTER = "pytorch"  # the framework whose environment exports the model
FOLDER = "onnx"  # under the data dir
MODEL_FILES = ("model.onnx", "model.onnx.data")


def needs_export(framework) -> bool:
    return framework.extra.get("model_source") == MODEL_SOURCE


def weights_digest(params: dict[str, np.ndarray]) -> str:
    """The canonical weights' identity: sha256 over every array's name, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for name in sorted(params):
        array = np.ascontiguousarray(params[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape}\n".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def valid_export(folder: Path) -> dict | None:
    """export.json when the folder holds a complete export whose files match it, else None."""
    try:
        record = json.loads((folder / "export.json").read_text())
        files = record["files"]
        if set(files) != set(MODEL_FILES):
            return None
        if all(file_digest(folder / name, "sha256") == files[name] for name in MODEL_FILES):
            return record
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


@dataclass
class ModelSources:
    """Per cell that needs an exported model: its folder (relative to the data dir) or why there is none."""

    folders: dict[tuple[str, str], str] = field(default_factory=dict)  # (framework, workload) -> folder
    problems: dict[tuple[str, str], str] = field(default_factory=dict)  # (framework, workload) -> reason

    def folder(self, cell: Cell) -> str | None:
        return self.folders.get((cell.framework, cell.workload))

    def problem(self, cell: Cell) -> str | None:
        return self.problems.get((cell.framework, cell.workload))


def prepare(cells: list[Cell], backend, frameworks: dict, *, data_dir: Path, results_dir: Path,
            timeout: float | None, git_revision: str | None, log: Callable[[str], None]) -> ModelSources:
    """Export each workload's model once, before the cells that need it run (or find it cached). A
    failed export fails those cells with its reason; the rest of the matrix still runs."""
    sources = ModelSources()
    users: dict[str, set[str]] = {}  # workload -> the frameworks whose cells run its exported model
    for cell in cells:
        framework = frameworks[cell.framework]
        if (needs_export(framework) and cell.workload in framework.workloads
                and not backend.unsupported_reason(cell, framework.variant(cell.variant))):
            users.setdefault(cell.workload, set()).add(cell.framework)
    for workload in sorted(users):
        folder, problem = _ensure(workload, backend, frameworks, data_dir=Path(data_dir),
                                  results_dir=Path(results_dir), timeout=timeout, git_revision=git_revision,
                                  log=log)
        for name in sorted(users[workload]):
            if problem:
                sources.problems[(name, workload)] = problem
            else:
                sources.folders[(name, workload)] = folder
    return sources


def _ensure(workload: str, backend, frameworks: dict, *, data_dir: Path, results_dir: Path,
            timeout: float | None, git_revision: str | None,
            log: Callable[[str], None]) -> tuple[str | None, str | None]:
    from orchestrator import run_folder
    from orchestrator.backends import CellJob

    if EXPORTER not in frameworks:
        return None, f"no {EXPORTER} framework registered (images/{EXPORTER}/) to export the ONNX model"
    pytorch = frameworks[EXPORTER]
    variant = pytorch.variant(pytorch.default_variant)
    params = canonical.parameters(workload)
    weights = weights_digest(params)
    environment = hashlib.sha256(variant.requirements.read_bytes()).hexdigest()
    name = f"{workload}-{weights[:16]}-{environment[:8]}"
    final = data_dir / FOLDER / name
    relative = f"{FOLDER}/{name}"
    if final.is_dir():
        if valid_export(final) is not None:
            log(f"ONNX model: reusing {final}")
            return relative, None
        log(f"ONNX model: {final} is incomplete or does not match its export.json; exporting it again")
        shutil.rmtree(final)

    cell = Cell(framework=EXPORTER, workload=workload, variant=variant.name, precision="fp32", profile="full",
                data="synthetic")
    where = f"{EXPORTER}/{variant.name} on the {backend.name} backend"
    if reason := backend.unsupported_reason(cell, variant):
        return None, f"no ONNX model: {where} cannot export it ({reason})"
    incoming = data_dir / FOLDER / f".incoming-{name}-{uuid.uuid4().hex[:8]}"
    (incoming / "canonical").mkdir(parents=True)
    incoming.chmod(0o700)  # the export's to write, nobody else's
    # a backend whose cells run as another user (Docker's, when we are root) hands the folder over
    backend.make_writable_by_cells(incoming)
    canonical.write(incoming / "canonical", workload)
    work_dir, log_path = run_folder.cell_paths(results_dir, "onnx-export")  # never through a link
    job = CellJob(cell=cell, device="cpu", work_dir=work_dir,
                  log_path=log_path, data_dir=data_dir.resolve(), timeout=timeout, git_revision=git_revision,
                  parity=f"{FOLDER}/{incoming.name}/canonical", export_dir=incoming.resolve())
    log(f"ONNX model: exporting PyTorch's {workload} in {where} (once; cached in {final})")
    start = time.perf_counter()
    try:
        result = backend.run_cell(job)
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    result.wall_time_s = time.perf_counter() - start
    result.provenance.backend = result.provenance.backend or backend.name
    result.write(results_dir / "onnx-export.json")  # the export's own result, kept with the run
    shutil.rmtree(incoming / "canonical", ignore_errors=True)
    if result.status != "ok":
        shutil.rmtree(incoming, ignore_errors=True)
        hint = ""
        if backend.name == "docker":  # an image keeps its tag when its requirements or workloads change
            hint = (f"if PyTorch's image predates ONNX export (onnx, onnxscript, --export-onnx), rebuild it: "
                    f"`python -m orchestrator build {EXPORTER} --variant {variant.name}`; ")
        return None, (f"no ONNX model: exporting it in {where} {result.status} ({first_line(result.reason) or 'no reason recorded'}); "
                      f"{hint}log: {log_path}")
    record = valid_export(incoming)
    if record is None:
        shutil.rmtree(incoming, ignore_errors=True)
        return None, (f"no ONNX model: the export in {where} wrote no complete model.onnx / model.onnx.data / "
                      f"export.json; log: {log_path}")
    record.update(canonical_weights_sha256=weights, exported_by=_exported_by(result),
                  exported_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  pytorch_requirements=f"{variant.requirements.name} sha256 {environment}",
                  git_revision=git_revision)
    write_json_atomic(incoming / "export.json", record)
    (incoming / "export.json").chmod(0o644)  # read by the cells, a container's user among them
    incoming.chmod(0o755)
    try:
        incoming.rename(final)
    except OSError:  # another run finished the same export meanwhile: keep the first
        shutil.rmtree(incoming, ignore_errors=True)
    log(f"ONNX model: exported in {result.phases.get('export', 0):.1f} s -> {final}")
    return relative, None


def _exported_by(result: Result) -> str:
    provenance = result.provenance
    where = provenance.image_digest or provenance.image_id or provenance.interpreter or "?"
    return f"{provenance.backend} backend, {where}"
