"""The Rosetta view (code.html): each workload's implementations side by side, section by section.

Every ``workloads/<workload>/<framework>.py`` (and the R and Julia rows' ``.R`` and ``.jl``) is
written with the same sections in the same order,
each opened by a marker line ``# --- <section> ------`` (model, canonical weights, run; some
frameworks add "loss and optimizer" or their own nets); what comes before the first marker is the
file's header (its docstring, imports and MATCHED list). The run section is the file's class for the
scaffold every workload shares (workloads/common/scaffold.py): the steps that are this framework's. The files are read as text from
this checkout and highlighted with Pygments, never imported (the host imports no framework), and
their sections are aligned by name, so that two frameworks' models sit side by side.

Each highlighted line carries an anchor, ``code-<workload>-<implementation>-<line>``, which the
phrasebook (orchestrator/phrasebook/, printed below the implementations) links to.

Next to each implementation: what it had to match (as the run recorded it from the module's
MATCHED, the report's "What had to be matched"; else read from the file), and the run's measured
headline figures of every framework the file serves (keras.py serves the three Keras 3 rows).
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pandas as pd
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name

from orchestrator import frameworks
from orchestrator.errors import UserError
from orchestrator.phrasebook import build as build_phrasebook
from orchestrator.phrasebook.book import key_of
from orchestrator.phrasebook.markers import LANGUAGES
from orchestrator.phrasebook.render import html_context as phrasebook_context
from orchestrator.report.formatting import format_relative, formatter
from orchestrator.report.groups import device_label
from orchestrator.report.tables import matched_points
from workloads.common import declaration

WORKLOADS_DIR = Path(__file__).resolve().parent.parent.parent / "workloads"
SECTION_MARKER = re.compile(r"^# --- (?P<name>.+?) -*\s*$")
HEADER_SECTION = "header"
PREFERRED_PAIR = ("pytorch", "tensorflow")  # shown first; any two can be picked on the page
CSS_CLASS = "highlight"


def code_context(summaries: dict[str, pd.DataFrame], frame: pd.DataFrame, *,
                 workloads_dir: Path = WORKLOADS_DIR) -> dict:
    """What code.html.j2 prints: per declared workload with implementation files, its aligned
    section names and one entry per implementation (its sections as highlighted HTML, what it
    had to match, the run's figures); the implementations to choose from and the default pair."""
    formatter_ = HtmlFormatter(cssclass=CSS_CLASS, linenos="inline")
    recorded = _recorded_matched(frame)
    workloads, keys, anchors, stems = [], [], {}, {}
    for name, workload in declaration.declared().items():
        files = sorted(path for path in (workloads_dir / name).glob("*")
                       if path.suffix in LANGUAGES and path.name != "__init__.py")
        if not files:
            continue
        implementations = []
        for path in files:
            key = _key(path.stem)
            serves = _frameworks_of(path.stem)
            status = path.stat()
            file, anchor = f"workloads/{name}/{path.name}", f"code-{name}-{key}"
            text, sections = _highlighted(path, status.st_mtime_ns, status.st_size, anchor)
            matched, source = _matched(recorded, name, serves, text)
            anchors[file] = anchor
            implementations.append({
                "key": key, "serves": serves, "file": file,
                "sections": sections,
                "matched": matched, "matched_source": source,
                "figures": _figures(summaries.get(name), serves, workload),
            })
            if key not in keys:
                keys.append(key)
                stems[key] = path.stem
        workloads.append({"workload": name, "title": workload.title, "description": workload.description,
                          "section_names": aligned([list(item["sections"]) for item in implementations]),
                          "implementations": implementations, "runtime": False})
    runtimes = _runtimes(workloads_dir / "runtime", stems, anchors)
    if runtimes["implementations"]:
        workloads.append(runtimes)
    default = [key for key in PREFERRED_PAIR if key in keys]
    default += [key for key in keys if key not in default][:2 - len(default)]
    return {"workloads": workloads, "choices": [{"key": key, "serves": _served(workloads, key)} for key in keys],
            "default_pair": default, "pygments_css": formatter_.get_style_defs(f".{CSS_CLASS}"),
            **_phrasebook(anchors)}


def _runtimes(folder: Path, stems: dict[str, str], anchors: dict[str, str]) -> dict:
    """The runtimes side by side, as one more block of the page: each implementation's
    workloads/runtime/<module>.py (or .R, or the package's modules, their sections named by module),
    split at its own section markers, so that the phrasebook's snippets from the runtimes (the
    step, the device policy, the synchronisation) have lines to link to."""
    implementations = []
    for key, stem in stems.items():
        files = sorted(path for path in folder.glob(f"{stem}.*") if path.suffix in LANGUAGES)
        if (folder / stem).is_dir():
            files += sorted((folder / stem).glob("*.py"))
        sections: dict[str, str] = {}
        for path in files:
            package = path.parent != folder
            anchor = f"code-runtime-{key}" + (f"-{path.stem}" if package else "")
            status = path.stat()
            _, parts = _highlighted(path, status.st_mtime_ns, status.st_size, anchor.replace("_", "-"))
            anchors[f"workloads/runtime/{path.relative_to(folder)}"] = anchor.replace("_", "-")
            sections.update({(f"{path.name}: {name}" if package else name): html for name, html in parts.items()})
        if sections:
            implementations.append({"key": key, "serves": _frameworks_of(stem), "sections": sections,
                                    "file": ", ".join(f"workloads/runtime/{path.relative_to(folder)}" for path in files),
                                    "matched": [], "matched_source": "", "figures": []})
    return {"workload": "runtime", "title": "The runtimes: device policy, steps and loops",
            "description": ("What each framework's three workloads share (workloads/runtime/): choosing the device, "
                            "the training step, evaluation and inference, written once per framework."),
            "section_names": aligned([list(item["sections"]) for item in implementations]),
            "implementations": implementations, "runtime": True}


def _phrasebook(anchors: dict[str, str]) -> dict:
    """The phrasebook's part of the page, its snippets linked to the lines above; a vocabulary
    that cannot be read leaves the page without it, saying why (the implementations still print)."""
    try:
        return {"phrasebook": phrasebook_context(build_phrasebook(), anchors), "phrasebook_problem": ""}
    except UserError as error:
        return {"phrasebook": None, "phrasebook_problem": str(error)}


@functools.lru_cache(maxsize=256)
def _highlighted(path: Path, modified_ns: int, size: int, anchor: str) -> tuple[str, dict[str, str]]:
    """A workload file's text and its sections as highlighted HTML, each line anchored as
    ``<anchor>-<line>``. Highlighting is most of what the code view costs: kept per file version
    (its modification time and size), so a process that writes several reports highlights each file once."""
    text = path.read_text(encoding="utf-8", errors="replace")
    lexer = get_lexer_by_name(LANGUAGES[path.suffix])
    return text, {section: highlight(code, lexer, HtmlFormatter(cssclass=CSS_CLASS, linenos="inline",
                                                                linenostart=first_line, lineanchors=anchor))
                  for section, (first_line, code) in split_sections(text).items()}


def split_sections(text: str) -> dict[str, tuple[int, str]]:
    """A workload file's sections by name, in file order: (first line number, code). The lines
    before the first marker are the header; a marker line opens its section."""
    sections: dict[str, tuple[int, list[str]]] = {}
    name, start, lines = HEADER_SECTION, 1, []
    for number, line in enumerate(text.splitlines(), start=1):
        match = SECTION_MARKER.match(line)
        if match:
            if lines:
                sections[name] = (start, lines)
            name, start, lines = match.group("name").strip(), number, []
            while name in sections:  # a repeated marker keeps both parts apart
                name += " (continued)"
        lines.append(line)
    if lines:
        sections[name] = (start, lines)
    return {section: (first, "\n".join(body).strip("\n") + "\n") for section, (first, body) in sections.items()}


def aligned(orders: list[list[str]]) -> list[str]:
    """One order of section names that keeps every file's own order where they agree: a name one
    file has and the order so far lacks goes right after the name it follows in that file."""
    merged: list[str] = []
    for order in orders:
        previous = None
        for name in order:
            if name not in merged:
                merged.insert(merged.index(previous) + 1 if previous in merged else
                              (0 if previous is None else len(merged)), name)
            previous = name
    return merged


def read_matched(text: str) -> list[str]:
    """The module's MATCHED tuple, read from its source without importing it ([] without one)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(target, ast.Name) and target.id == "MATCHED"
                                                for target in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return []
            return [str(point) for point in value] if isinstance(value, (tuple, list)) else []
    return []


def _key(stem: str) -> str:
    """How the page names an implementation: its framework ("mxnet-module"), or "keras" for the
    one file the Keras 3 rows share (the phrasebook's rule, so its columns are these)."""
    return key_of(stem, _frameworks_of(stem))


@functools.lru_cache(maxsize=1)
def _modules() -> dict[str, list[str]]:
    return frameworks.served_by_module(frameworks.discover())


def _frameworks_of(stem: str) -> list[str]:
    """The frameworks a workload file serves (metadata.toml's module: keras.py serves the Keras 3 rows)."""
    return _modules().get(stem, [stem.replace("_", "-")])


def _served(workloads: list[dict], key: str) -> list[str]:
    for workload in workloads:
        for item in workload["implementations"]:
            if item["key"] == key:
                return item["serves"]
    return []


def _recorded_matched(frame: pd.DataFrame) -> dict[tuple[str, str], str]:
    """What each (framework, workload) recorded it had to match in this run (provenance extras)."""
    if "matched" not in frame:
        return {}
    known = frame.dropna(subset=["matched"])
    return {(framework, workload): text for framework, workload, text
            in zip(known["framework"], known["workload"], known["matched"]) if text}


def _matched(recorded: dict, workload: str, serves: list[str], text: str) -> tuple[list[str], str]:
    for framework in serves:
        if (framework, workload) in recorded:
            return matched_points(recorded[(framework, workload)]), "as this run recorded it"
    return read_matched(text), "from the file (no result of this run records it)"


def _figures(summary: pd.DataFrame | None, serves: list[str], workload: declaration.Workload) -> list[str]:
    """The run's headline figure of every row of the frameworks the file serves, one line each."""
    if summary is None or summary.empty:
        return []
    headline = workload.headline_metric
    write = formatter(headline)
    lines = []
    for _, row in summary[summary["framework"].isin(serves)].iterrows():
        where = (f"{row['row_name']} · {row['variant']} · {row['precision']} · "
                 f"{device_label(row['device_kind'], row['device_model'])}")
        if row["ranked"]:
            lines.append(f"{where}: {write(row['median'])} {headline.heading} "
                         f"({format_relative(row['relative_to_best'])} the group's best, "
                         f"median of {row['ok_repeats']})")
        elif row["status"] == "ok":  # kept out of the ranking by the gate (FAIRNESS.md: ranking-gate)
            lines.append(f"{where}: not ranked ({row['not_ranked']})")
        else:
            lines.append(f"{where}: {row['note'] or row['status']}")
    return lines
