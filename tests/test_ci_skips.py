"""No silent skips in CI: under CI=true a skip that tests/ci-skips.toml does not list fails its test
(tests/conftest.py), a listed one stays a skip and is printed with the list's why; every entry of
the list names a test that exists and says why."""
import ast
import fnmatch
import os
import subprocess
import sys
from pathlib import Path

import pytest

import conftest

TESTS = Path(__file__).resolve().parent

INNER_TESTS = '''
import pytest

def test_that_skips():
    pytest.skip("nothing to run here")

def test_that_passes():
    assert True
'''


def run_inner_pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    """pytest on a throwaway test file, with this suite's conftest loaded as a plugin."""
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    environment = {name: value for name, value in os.environ.items() if name != "CI"}
    environment["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(TESTS.parent)])
    if ci is not None:
        environment["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-q", "-p", "no:cacheprovider",
                           "test_inner.py"], cwd=tmp_path, capture_output=True, text=True, env=environment,
                          timeout=120)


def test_an_unlisted_skip_fails_under_ci_and_stays_a_skip_elsewhere(tmp_path):
    in_ci = run_inner_pytest(tmp_path, "true")
    assert in_ci.returncode == 1, in_ci.stdout
    assert "1 failed, 1 passed" in in_ci.stdout
    assert ("skipped under CI=true (nothing to run here), and tests/ci-skips.toml does not list "
            "test_inner.py::test_that_skips") in in_ci.stdout
    outside = run_inner_pytest(tmp_path, None)
    assert outside.returncode == 0 and "1 passed, 1 skipped" in outside.stdout, outside.stdout
    assert "test_inner.py::test_that_skips: nothing to run here" in outside.stdout  # the skips section


class Report:
    """What pytest hands the report hook for a skipped test."""

    def __init__(self, nodeid: str):
        self.nodeid, self.outcome, self.skipped = nodeid, "skipped", True
        self.longrepr = ("tests/x.py", 1, "Skipped: no Julia here")
        self.user_properties = []


def test_a_listed_skip_stays_a_skip_with_the_lists_reason(monkeypatch):
    monkeypatch.setattr(conftest, "IN_CI", True)
    entry = conftest.allowed_skips()[0]
    listed = Report(entry["test"].replace("*", "x"))
    conftest._refuse_unlisted_skip(listed)
    assert listed.outcome == "skipped" and listed.user_properties == [("allowed skip", entry["why"])]
    unlisted = Report("tests/test_nowhere.py::test_nothing")
    conftest._refuse_unlisted_skip(unlisted)
    assert unlisted.outcome == "failed" and "(no Julia here)" in unlisted.longrepr


@pytest.mark.parametrize("entry", conftest.allowed_skips(), ids=lambda entry: entry["test"])
def test_every_listed_skip_names_a_test_that_exists_and_says_why(entry):
    path, _, name = entry["test"].partition("::")
    assert len(entry["why"].split()) >= 5, "say why this class of machine cannot run it"
    source = TESTS.parent / path
    assert source.is_file(), f"{path} does not exist"
    functions = [node.name for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.FunctionDef)]
    assert any(fnmatch.fnmatchcase(function, name.split("[")[0]) for function in functions), \
        f"{path} has no test matching {name}"
