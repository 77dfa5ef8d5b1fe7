"""The cell document: everything the host asks of one workload run, in one JSON file.

A backend writes it into the cell's work folder and runs ``python -m workloads --cell FILE`` (or
another language's entry script, workloads/cell.R or workloads/cell.jl, which read the same file);
run by hand, ``python -m workloads cnn --framework pytorch ... --out result.json`` builds the same
document from its arguments. Standard library only (Python 3.6): the host and every image share it.

Paths are as the workload sees them (inside a container: the mount points).
"""
import dataclasses  # novermin (Python 3.6 images install the dataclasses backport)
import json
import os
import re
from dataclasses import dataclass  # novermin
from typing import Optional, Union

from workloads.common import safe_files, strict_json
from workloads.common.result import Cell
from workloads.common.strict_json import json_kind, quoted

# Bump when a field changes meaning, so that an image older than the host says so plainly.
CELL_DOCUMENT_VERSION = 3  # 2: the cell's init and framework options; 3: the run's threads and the cell's mode


# A name that becomes part of a file name (the cell's key, hence the default result path): letters
# and digits in runs joined by single '.', '_', '+' or '-'. No '/', no '..', no leading dot, no '__'
# (the key's separator), so no name can escape the results folder or make two cells share a key.
SAFE_NAME = re.compile(r"[A-Za-z0-9]+(?:[._+-][A-Za-z0-9]+)*\Z")
SAFE_NAME_MAX = 64
PATH_NAMES = ("framework", "variant", "workload", "precision", "profile", "data", "init", "mode")
# The document comes from the host through a file another process could have replaced (a shared
# work folder, a mount): read bounded, never through a link or from a FIFO, nesting capped
# (strict_json), every field typed (docs/RUN-GUARANTEES.md, the trust model).
LONGEST_CELL_DOCUMENT = 1 << 20  # bytes: a document is a few hundred
DEEPEST_CELL_DOCUMENT = 3  # levels: the document, its cell, the cell's options
LARGEST_REPEAT = 2 ** 31 - 1  # a repeat index; the host's matrix never comes near it
MOST_THREADS = 4096  # --threads: far above any machine's CPUs, far below what would exhaust one's processes


class CellDocumentError(ValueError):
    """A cell document this version of the workloads cannot read."""


def unsafe_name_problem(cell) -> Optional[str]:
    """What makes one of the cell's names unfit to be part of a file name, or None.

    Checked before any other check names the value, so that a hostile value is refused as such."""
    for field_name in PATH_NAMES:
        value = getattr(cell, field_name)
        if not isinstance(value, str) or (not value and field_name in ("framework", "workload", "mode")):
            continue  # the caller's own checks name a missing framework or workload; no mode: the default
        if len(value) > SAFE_NAME_MAX or not SAFE_NAME.match(value):
            return (f"invalid {field_name} {value[:SAFE_NAME_MAX]!r}: a name is letters and digits joined by single "
                    f"'.', '_', '+' or '-' (at most {SAFE_NAME_MAX} characters), as it becomes part of a file name")
    options = getattr(cell, "options", None)
    for name, value in (options.items() if isinstance(options, dict) else ()):
        for what, text in (("option name", name), ("option value", value)):
            if isinstance(text, str) and (len(text) > SAFE_NAME_MAX or not SAFE_NAME.match(text)):
                return (f"invalid {what} {text[:SAFE_NAME_MAX]!r}: letters and digits joined by single '.', '_', "
                        f"'+' or '-' (at most {SAFE_NAME_MAX} characters), as it becomes part of a file name")
    return None


@dataclass
class CellRequest:
    """One cell and how to run it: the Cell, plus where things are as the workload sees them."""

    cell: Cell
    device: str = "auto"  # cpu, cuda, or auto (CUDA when the framework sees a GPU)
    data_dir: Optional[str] = None  # the dataset folder; None: $ROSETTA_DATA_DIR or ~/.cache/rosetta-bench/data
    out: Optional[str] = None  # the JSON result; None: $ROSETTA_RESULTS_DIR/<cell key>.json
    parity: Optional[str] = None  # parity check instead of the benchmark: the canonical files' folder
    export_onnx: Optional[str] = None  # with parity: export the model to ONNX into this folder
    onnx_model: Optional[str] = None  # the exported ONNX model an inference engine runs
    threads: Optional[int] = None  # every framework's intra-op and inter-op threads; None: the CPUs the cell may use

    def to_json(self) -> str:
        document = {"version": CELL_DOCUMENT_VERSION}
        document.update(dataclasses.asdict(self))
        return json.dumps(document, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: Union[str, bytes]) -> "CellRequest":
        try:
            document = strict_json.loads(text, DEEPEST_CELL_DOCUMENT)
        except strict_json.JSONRefused as error:
            raise CellDocumentError(str(error)) from None
        if not isinstance(document, dict):
            raise CellDocumentError("not a JSON object, but {}".format(json_kind(document)))
        version = document.pop("version", None)
        if type(version) is not int or version != CELL_DOCUMENT_VERSION:
            raise CellDocumentError(f"cell document version {quoted(version)}, this workload reads version "
                                    f"{CELL_DOCUMENT_VERSION}; the image and the host are out of step: rebuild it")
        cell = document.pop("cell", None)
        if not isinstance(cell, dict):
            raise CellDocumentError("no 'cell' object")
        return cls(cell=Cell(**_checked(Cell, cell)), **_checked(cls, document, skip=("cell",)))

    def write(self, path: Union[str, os.PathLike]) -> None:
        with open(path, "w") as stream:
            stream.write(self.to_json())

    @classmethod
    def read(cls, path: Union[str, os.PathLike]) -> "CellRequest":
        try:
            data = safe_files.read_bytes_bounded(path, LONGEST_CELL_DOCUMENT)
        except safe_files.UnsafePath as error:  # a link, a FIFO, a folder, more than LONGEST_CELL_DOCUMENT
            raise CellDocumentError(str(error).replace(str(path), "it", 1)) from None
        except OSError as error:
            raise CellDocumentError(f"cannot read it ({error.strerror or error})") from None
        return cls.from_json(data)


def _checked(kind, values: dict, skip=()) -> dict:
    """``values`` if its keys are exactly ``kind``'s fields (those without a default required) and
    each value has the field's type; a CellDocumentError naming the first problem otherwise."""
    fields = {field.name: field for field in dataclasses.fields(kind) if field.name not in skip}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise CellDocumentError(f"unknown field {quoted(unknown[0])} in {kind.__name__}")
    for name, field in fields.items():
        if name not in values:
            if field.default is dataclasses.MISSING:
                raise CellDocumentError(f"{kind.__name__} lacks {name!r}")
            continue
        value = values[name]
        if name == "options":  # Cell.options: names to values, both strings
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in value.items()):
                raise CellDocumentError(f"{kind.__name__}.options is {quoted(value)}, not an object of strings")
            continue
        if name == "threads":  # CellRequest.threads: None, or a whole number from 1 to MOST_THREADS
            if value is not None and not (type(value) is int and 1 <= value <= MOST_THREADS):
                raise CellDocumentError(f"{kind.__name__}.threads is {quoted(value)}, not a whole number from 1 to "
                                        f"{MOST_THREADS} (or null: the CPUs the cell may use)")
            continue
        expected = int if field.type is int else str
        optional = field.type is not int and field.type is not str  # Optional[str]
        if not (isinstance(value, expected) and not isinstance(value, bool)) and not (optional and value is None):
            raise CellDocumentError(f"{kind.__name__}.{name} is {quoted(value)}, not a {expected.__name__}")
        if name == "repeat" and not 0 <= value <= LARGEST_REPEAT:
            raise CellDocumentError(f"{kind.__name__}.repeat is {quoted(value)}, not a whole number from 0 to "
                                    f"{LARGEST_REPEAT}")
    return values
