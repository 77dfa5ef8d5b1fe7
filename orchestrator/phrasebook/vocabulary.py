"""The phrasebook's vocabulary, read from workloads/common/phrasebook.toml (declared once)."""
from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

from orchestrator.errors import UserError
from workloads.common.hyperparams import WORKLOADS

VOCABULARY_FILE = Path(__file__).resolve().parent.parent.parent / "workloads" / "common" / "phrasebook.toml"
CONCEPT_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


@dataclasses.dataclass(frozen=True)
class Concept:
    id: str
    meaning: str  # one line
    workloads: tuple[str, ...]  # where it occurs: a framework with files for any of them writes it


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    concepts: tuple[Concept, ...]
    # implementation -> concept -> why that framework cannot express it (one line)
    not_expressible: dict[str, dict[str, str]]

    def ids(self) -> list[str]:
        return [concept.id for concept in self.concepts]

    def get(self, concept_id: str) -> Concept:
        for concept in self.concepts:
            if concept.id == concept_id:
                return concept
        raise UserError(f"no concept {concept_id!r} in the phrasebook; pick one of {', '.join(self.ids())} "
                        f"(or declare it in {VOCABULARY_FILE.name})")


def load_vocabulary(path: Path = VOCABULARY_FILE) -> Vocabulary:
    """The declared concepts, in the file's order, and the reasons; a malformed entry is a UserError."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise UserError(f"cannot read the phrasebook's vocabulary {path}: {error}") from None
    concepts, seen = [], set()
    for entry in data.get("concept", []):
        concept_id, meaning, workloads = entry.get("id"), entry.get("meaning"), entry.get("workloads")
        if not (isinstance(concept_id, str) and CONCEPT_ID.fullmatch(concept_id)) or concept_id in seen:
            raise UserError(f"{path}: concept id {concept_id!r} is missing, repeated or not lower-case-with-dashes")
        if not isinstance(meaning, str) or not meaning or "\n" in meaning:
            raise UserError(f"{path}: concept {concept_id!r} needs a one-line meaning")
        if not (isinstance(workloads, list) and workloads and set(workloads) <= set(WORKLOADS)):
            raise UserError(f"{path}: concept {concept_id!r}: workloads must name some of {', '.join(WORKLOADS)}")
        seen.add(concept_id)
        concepts.append(Concept(concept_id, meaning, tuple(workloads)))
    reasons = data.get("not_expressible", {})
    for implementation, table in reasons.items():
        for concept_id, reason in table.items():
            if concept_id not in seen or not isinstance(reason, str) or not reason or "\n" in reason:
                raise UserError(f"{path}: not_expressible.{implementation}.{concept_id}: "
                                f"a declared concept and a one-line reason")
    return Vocabulary(tuple(concepts), {name: dict(table) for name, table in reasons.items()})
