"""The phrasebook printed: Markdown (docs/PHRASEBOOK.md), the terminal (rich) and code.html's part.

All three print the same book (book.build) the same way: concepts down, in the vocabulary's order;
implementations across (the columns of code.html, the sections of the Markdown page); each cell the
marked code, or the one-line reason a framework cannot express the concept.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import jinja2
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from rich.console import Console, Group
from rich.padding import Padding
from rich.syntax import Syntax
from rich.text import Text

from orchestrator.errors import UserError
from orchestrator.phrasebook.book import Phrasebook

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"
MARKDOWN_PAGE = "docs/PHRASEBOOK.md"  # relative to the checkout; its links are relative to docs/
COMMAND = "python -m orchestrator phrasebook --markdown docs/PHRASEBOOK.md"
CSS_CLASS = "highlight"  # code.html's Pygments class (report/code_view.py)
TERMINAL_THEME = "ansi_dark"  # the terminal's own colours


def select(book: Phrasebook, concepts: list[str] | None, frameworks: list[str] | None) -> Phrasebook:
    """The book narrowed to the named concepts and frameworks (a framework a shared file serves,
    such as keras-jax, picks that file's column); a name it lacks is a UserError naming the choices."""
    known = [concept.id for concept in book.concepts]
    unknown = [name for name in concepts or [] if name not in known]
    if unknown:
        raise UserError(f"no concept {', '.join(map(repr, unknown))} in the phrasebook; choose from {', '.join(known)}")
    keys = []
    for name in frameworks or []:
        matches = [item.key for item in book.implementations if name == item.key or name in item.serves]
        if not matches:
            choices = ", ".join(item.key for item in book.implementations)
            raise UserError(f"no framework {name!r} in the phrasebook; choose from {choices}")
        keys += [key for key in matches if key not in keys]
    return book.select(concepts, keys)


# --- Markdown -------------------------------------------------------------------------------------

def markdown(book: Phrasebook) -> str:
    """docs/PHRASEBOOK.md: generated, never edited by hand (tests/test_phrasebook.py keeps it current)."""
    return _environment().get_template("phrasebook.md.j2").render(book=book, command=COMMAND, fence=_fence)


def _fence(code: str) -> str:
    """A code fence longer than any run of backticks in the code, so the code cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    return "`" * max(3, longest + 1)


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES_DIR), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                              autoescape=jinja2.select_autoescape(enabled_extensions=("html", "html.j2")))


# --- the terminal ---------------------------------------------------------------------------------

def terminal(book: Phrasebook, console: Console) -> None:
    """Each concept, then each framework's snippet highlighted (wrapped to the console's width) or
    its reason; frameworks whose workloads lack the concept are left out."""
    for number, concept in enumerate(book.concepts):
        if number:
            console.print()
        console.print(Text.assemble((concept.id, "bold"), ": ", concept.meaning))
        for item in book.implementations:
            cell = book.cell(concept.id, item.key)
            if cell.snippet is not None:
                snippet = cell.snippet
                where = f"{snippet.file}:{snippet.first_line}"
                code = Syntax(snippet.code, snippet.language, theme=TERMINAL_THEME, word_wrap=True,
                              background_color="default")
                console.print(Group(Text.assemble((item.key, "bold cyan"), "  ", (where, "dim")),
                                    Padding(code, (0, 0, 0, 2))))
            elif cell.applicable:
                console.print(Text.assemble((item.key, "bold cyan"), ": ", (cell.note, "italic")))


# --- code.html ------------------------------------------------------------------------------------

def html_context(book: Phrasebook, anchors: dict[str, str]) -> dict:
    """What code.html.j2's phrasebook prints: concepts, implementation keys and per cell the snippet
    as highlighted HTML (Pygments escapes the code) with ``link``, the side-by-side view's address
    of its first line (``anchors``: file -> the id prefix of that file's highlighted lines), or the
    note saying why there is none."""
    rows = []
    for concept in book.concepts:
        cells = []
        for item in book.implementations:
            cell = book.cell(concept.id, item.key)
            snippet = cell.snippet
            entry = {"key": item.key, "note": cell.note, "applicable": cell.applicable, "html": "", "link": "",
                     "where": ""}
            if snippet is not None:
                entry["where"] = f"{snippet.file}:{snippet.first_line}"
                entry["html"] = _highlighted(snippet.code, snippet.language)
                if snippet.file in anchors:
                    entry["link"] = f"#{item.key}/{anchors[snippet.file]}-{snippet.first_line}"
            cells.append(entry)
        rows.append({"id": concept.id, "meaning": concept.meaning, "cells": cells})
    return {"concepts": rows, "frameworks": [item.key for item in book.implementations],
            "serves": {item.key: list(item.serves) for item in book.implementations}}


@functools.lru_cache(maxsize=1024)
def _highlighted(code: str, language: str) -> str:
    return highlight(code, get_lexer_by_name(language), HtmlFormatter(cssclass=CSS_CLASS))
