"""The phrasebook: each declared concept against each implementation (a framework's files, named
as code.html names them: keras.py serves the three Keras 3 rows), from the marker comments.

An implementation's files are its workload files (workloads/<workload>/<module>.<suffix>), its
runtime (workloads/runtime/<module>.py or .R, or the package workloads/runtime/<module>/) and its
language's cell entry (workloads/cell.R, workloads/cell.jl). It must mark every concept that
occurs in a workload it implements, once, or say in the vocabulary why it cannot.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from orchestrator import frameworks
from orchestrator.parity import REFERENCE
from orchestrator.phrasebook.markers import LANGUAGES, Snippet, read_markers
from orchestrator.phrasebook.vocabulary import Concept, Vocabulary, load_vocabulary
from workloads.common.hyperparams import WORKLOADS

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent


@dataclasses.dataclass(frozen=True)
class Implementation:
    key: str  # pytorch, keras, mxnet-module, r-keras, knet
    serves: tuple[str, ...]  # the frameworks its files are (keras: keras-jax, keras-tf, keras-torch)
    workloads: tuple[str, ...]  # the workloads it has files for
    files: tuple[str, ...]  # every file read for its markers, relative to the checkout


@dataclasses.dataclass(frozen=True)
class Cell:
    """One concept in one implementation: its snippet, or why there is none."""

    snippet: Snippet | None = None
    reason: str | None = None  # declared: the framework cannot express it
    applicable: bool = True  # False: the concept occurs in none of its workloads

    @property
    def note(self) -> str:
        if self.snippet is not None:
            return ""
        if not self.applicable:
            return "not in its workloads"
        return self.reason or "not marked"


@dataclasses.dataclass
class Phrasebook:
    concepts: list[Concept]
    implementations: list[Implementation]
    cells: dict[tuple[str, str], Cell]  # (concept id, implementation key)
    problems: list[str]  # what tests/test_phrasebook.py fails on: bad markers, missing concepts

    def cell(self, concept: str, key: str) -> Cell:
        return self.cells[(concept, key)]

    def select(self, concepts: list[str] | None = None, keys: list[str] | None = None) -> "Phrasebook":
        """The same phrasebook narrowed to some concepts and implementations (in the book's order)."""
        chosen = [item for item in self.concepts if not concepts or item.id in concepts]
        implementations = [item for item in self.implementations if not keys or item.key in keys]
        return Phrasebook(chosen, implementations, self.cells, self.problems)


def implementations(root: Path = PROJECT_ROOT) -> list[Implementation]:
    """Every implementation with workload files: the parity check's reference first (every other
    row matched its outputs), then by name."""
    found = frameworks.discover(root / "images")
    served = frameworks.served_by_module(found)
    workloads_dir = root / "workloads"
    result = []
    for module, names in sorted(served.items(), key=lambda item: (REFERENCE not in item[1], key_of(*item))):
        suffix = found[names[0]].language.suffix
        implemented = tuple(workload for workload in WORKLOADS
                            if (workloads_dir / workload / f"{module}.{suffix}").is_file())
        if not implemented:
            continue
        files = [f"workloads/{workload}/{module}.{suffix}" for workload in implemented]
        runtime = workloads_dir / "runtime"
        files += [str(path.relative_to(root)) for path in sorted(runtime.glob(f"{module}.*"))
                  if path.suffix in LANGUAGES]
        if (runtime / module).is_dir():
            files += [str(path.relative_to(root)) for path in sorted((runtime / module).glob("*.py"))]
        if suffix != "py" and (workloads_dir / f"cell.{suffix}").is_file():
            files.append(f"workloads/cell.{suffix}")
        result.append(Implementation(key_of(module, names), tuple(names), implemented, tuple(files)))
    return result


def key_of(module: str, serves: list[str]) -> str:
    """How code.html names an implementation: its framework, or the module a shared file is."""
    return serves[0] if len(serves) == 1 else module


def build(root: Path = PROJECT_ROOT, vocabulary: Vocabulary | None = None) -> Phrasebook:
    """Read every implementation's markers into the phrasebook (and what is wrong with them)."""
    vocabulary = vocabulary or load_vocabulary()
    declared = set(vocabulary.ids())
    items = implementations(root)
    problems: list[str] = []
    marked: dict[tuple[str, str], Snippet] = {}
    for item in items:
        for file in item.files:
            path = root / file
            found = _read(path, file)
            problems += found.problems
            for snippet in found.snippets:
                where = f"{file}:{snippet.first_line}"
                if snippet.concept not in declared:
                    problems.append(f"{where}: `{snippet.concept}` is no concept of the vocabulary")
                elif (snippet.concept, item.key) in marked:
                    first = marked[(snippet.concept, item.key)]
                    problems.append(f"{where}: `{snippet.concept}` is marked again for {item.key} "
                                    f"(first at {first.file}:{first.first_line}); mark it once")
                else:
                    marked[(snippet.concept, item.key)] = snippet
    keys = {item.key for item in items}
    problems += [f"not_expressible names {key!r}, which is no implementation" for key in vocabulary.not_expressible
                 if key not in keys]
    cells = {}
    for concept in vocabulary.concepts:
        for item in items:
            applicable = bool(set(concept.workloads) & set(item.workloads))
            reason = vocabulary.not_expressible.get(item.key, {}).get(concept.id)
            snippet = marked.get((concept.id, item.key))
            if snippet is not None and reason:
                problems.append(f"{item.key} marks `{concept.id}` and also says it cannot express it: drop one")
            elif applicable and snippet is None and not reason:
                shared = "/".join(workload for workload in concept.workloads if workload in item.workloads)
                problems.append(f"{item.key} implements {shared} but marks no `{concept.id}` "
                                f"in {', '.join(item.files)}; mark it, or declare why not in not_expressible")
            cells[(concept.id, item.key)] = Cell(snippet, reason, applicable)
    return Phrasebook(list(vocabulary.concepts), items, cells, problems)


def _read(path: Path, file: str):
    status = path.stat()
    return _read_cached(path, status.st_mtime_ns, status.st_size, file)


@functools.lru_cache(maxsize=256)
def _read_cached(path: Path, modified_ns: int, size: int, file: str):
    return read_markers(path.read_text(encoding="utf-8", errors="replace"), file, LANGUAGES[path.suffix])
