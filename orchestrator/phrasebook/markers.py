"""The phrasebook's marker comments in workload and runtime files, read as text (never imported).

Two forms, both `#` comments (Python, R and Julia alike), naming one concept or several
(`# phrase: max-pool, dropout`):

    # phrase: sgd-momentum          a block: the lines up to the matching `# end phrase`
    ...                             (blocks nest; the innermost closes first)
    # end phrase

    torch.manual_seed(SEED)  # phrase: seeding
                                    one statement: in Python the statement that starts on the
                                    line (a `def` or `with` with its body); otherwise the line and
                                    the lines its open brackets carry on to (R's `function(...) {`)

A marker never starts with `# ---`, so code.html's section markers (report/code_view.py) are
untouched. The snippet is the marked lines, dedented, without the marker comments.
"""
from __future__ import annotations

import ast
import dataclasses
import re
import textwrap

_IDS = r"(?P<ids>[a-z0-9-]+(?:\s*,\s*[a-z0-9-]+)*)"
BLOCK_OPEN = re.compile(r"^\s*#\s*phrase:\s*" + _IDS + r"\s*$")
BLOCK_CLOSE = re.compile(r"^\s*#\s*end phrase\s*$")
LINE_MARKER = re.compile(r"\s*#\s*phrase:\s*" + _IDS + r"\s*$")
LANGUAGES = {".py": "python", ".R": "r", ".jl": "julia"}
_OPENING, _CLOSING = "([{", ")]}"
_QUOTES = {"python": "\"'", "r": "\"'", "julia": "\""}  # Julia's ' is also the transpose


@dataclasses.dataclass(frozen=True)
class Snippet:
    concept: str
    file: str  # relative to the checkout: workloads/cnn/pytorch.py
    first_line: int  # 1-based, the first line of code shown
    last_line: int
    code: str  # dedented, marker comments removed
    language: str  # python, r or julia (a Pygments lexer's name)


@dataclasses.dataclass
class FileMarkers:
    snippets: list[Snippet]
    problems: list[str]  # "workloads/x.py:12: why", for tests/test_phrasebook.py


def read_markers(text: str, file: str, language: str) -> FileMarkers:
    """Every marked snippet of one file, and what is wrong with its markers (unbalanced blocks, a
    marker on a line with no code)."""
    lines = text.splitlines()
    snippets, problems, open_blocks = [], [], []
    statement_ends = _python_statement_ends(text) if language == "python" else {}
    for number, line in enumerate(lines, start=1):
        if BLOCK_CLOSE.match(line):
            if not open_blocks:
                problems.append(f"{file}:{number}: `# end phrase` closes no open `# phrase:` block")
                continue
            start, ids = open_blocks.pop()
            snippets += [_snippet(concept, file, lines, start + 1, number - 1, language) for concept in ids]
            continue
        block = BLOCK_OPEN.match(line)
        if block:
            open_blocks.append((number, _split(block.group("ids"))))
            continue
        marker = LINE_MARKER.search(line)
        if marker:
            if not line[:marker.start()].strip() or line.lstrip().startswith("#"):
                problems.append(f"{file}:{number}: a `# phrase:` marker after a comment marks no code")
                continue
            end = statement_ends.get(number) or _bracket_end(lines, number, _QUOTES[language])
            snippets += [_snippet(concept, file, lines, number, end, language)
                         for concept in _split(marker.group("ids"))]
    problems += [f"{file}:{start}: `# phrase: {', '.join(ids)}` is never closed by `# end phrase`"
                 for start, ids in open_blocks]
    return FileMarkers(snippets, problems)


def strip_markers(code: str) -> str:
    """The code without marker comments: block lines dropped, line markers cut off."""
    kept = [LINE_MARKER.sub("", line) for line in code.splitlines()
            if not BLOCK_OPEN.match(line) and not BLOCK_CLOSE.match(line)]
    return "\n".join(kept)


def _split(ids: str) -> list[str]:
    return [part.strip() for part in ids.split(",")]


def _snippet(concept: str, file: str, lines: list[str], first: int, last: int, language: str) -> Snippet:
    body = strip_markers("\n".join(lines[first - 1:last]))
    return Snippet(concept, file, first, last, textwrap.dedent(body).strip("\n"), language)


def _python_statement_ends(text: str) -> dict[int, int]:
    """Line -> the last line of the outermost statement that starts on it (Python files only); {}
    for a file that does not parse (its snippets then fall back to brackets)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    ends: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            ends[node.lineno] = max(ends.get(node.lineno, 0), node.end_lineno or node.lineno)
    return ends


def _bracket_end(lines: list[str], start: int, quotes: str) -> int:
    """The last line of the expression that starts on line ``start``: the line itself, or the line
    that closes the brackets it leaves open (strings and comments skipped)."""
    depth = 0
    for number in range(start, len(lines) + 1):
        depth += _bracket_balance(lines[number - 1], quotes)
        if depth <= 0:
            return number
    return len(lines)


def _bracket_balance(line: str, quotes: str) -> int:
    balance, quote, escaped = 0, None, False
    for char in line:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = None
        elif char in quotes:
            quote = char
        elif char == "#":
            break
        elif char in _OPENING:
            balance += 1
        elif char in _CLOSING:
            balance -= 1
    return balance
