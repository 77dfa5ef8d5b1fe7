"""The structure a newcomer can live in, checked from the tree: no import cycle among the host's
modules, no module past a screen's worth of ideas, a README read to the end."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LONGEST_MODULE = 400  # lines: past it, a module splits along its seams
LONGEST_README = 150
SIZED = ("orchestrator", "workloads/common", "workloads/runtime")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports, anywhere in it (inside functions too: a lazy
    import is still a dependency). `from pkg import name` depends on pkg.name where that is a module."""
    modules = {module_name(path): path for path in (ROOT / package).rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    prefix = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(prefix + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_host_has_no_import_cycle():
    assert cycles(import_graph("orchestrator")) == []


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("folder", SIZED)
def test_no_module_is_longer_than_a_screen_of_ideas(folder):
    long = {str(path.relative_to(ROOT)): lines for path in sorted((ROOT / folder).rglob("*.py"))
            if (lines := len(path.read_text().splitlines())) > LONGEST_MODULE}
    assert long == {}


def test_the_readme_is_read_to_the_end():
    assert len((ROOT / "README.md").read_text().splitlines()) < LONGEST_README
