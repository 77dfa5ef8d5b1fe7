"""The Rosetta phrasebook: each concept of the vocabulary, in every framework, from the marked code.

The vocabulary is declared once (workloads/common/phrasebook.toml: each concept's id, its one-line
meaning, the workloads it occurs in, and what a framework cannot express, with why). Workload and
runtime files mark where each framework writes a concept with a comment, so every snippet is code
that runs and passed parity, never prose typed beside it. The host reads the files as text (it
imports no framework) and prints the same phrasebook in three places: code.html (beside the
implementations), docs/PHRASEBOOK.md and `python -m orchestrator phrasebook`.

    vocabulary.py  the declared concepts and reasons
    markers.py     the marker comments: finding them, a snippet's lines, checking them
    book.py        the phrasebook: concept x implementation -> snippet or reason
    render.py      Markdown, the terminal (rich) and code.html's part
"""
from orchestrator.phrasebook.book import Cell, Phrasebook, build
from orchestrator.phrasebook.markers import Snippet
from orchestrator.phrasebook.vocabulary import Concept, Vocabulary, load_vocabulary

__all__ = ["Cell", "Concept", "Phrasebook", "Snippet", "Vocabulary", "build", "load_vocabulary"]
