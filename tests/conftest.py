"""Shared fixtures for the tests that drive a real Docker engine and a real image registry, and the
rule that CI never skips a test silently (tests/ci-skips.toml)."""
import fnmatch
import os
import shutil
import socket
import subprocess
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

# The local Debian base that CI makes with images/base/make-local-base.sh (no registry is reachable there).
BASE_IMAGE = os.environ.get("ROSETTA_BASE_IMAGE", "rosetta-base:bookworm")


def error_line(capsys) -> str:
    """The one line a refused command printed (`error: ...`), with no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    return lines[0]


def _skip_or_fail(reason: str):
    """CI sets ROSETTA_REQUIRE_DOCKER=1: there a missing engine is a failure, never a quiet skip."""
    if os.environ.get("ROSETTA_REQUIRE_DOCKER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_client():
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as error:  # noqa: BLE001 - any failure to reach the engine means: no engine here
        _skip_or_fail(f"no Docker engine answered ({str(error).splitlines()[0][:120]})")
    # Only the first answer is bounded short. Later calls wait on real work: deleting a large framework
    # image while the other test worker runs its own tests has taken the engine more than 30 s on CI.
    client.api.timeout = 600
    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        _skip_or_fail(f"base image {BASE_IMAGE} missing: run images/base/make-local-base.sh {BASE_IMAGE}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """A real image registry (Debian's docker-registry, Distribution 2.x) on 127.0.0.1."""
    binary = shutil.which("docker-registry")
    if not binary:
        _skip_or_fail("docker-registry is not installed (apt-get install docker-registry)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    folder = tmp_path_factory.mktemp("registry")
    config = folder / "config.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {folder / 'data'}\n"
                      f"  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n")
    with open(folder / "registry.log", "w") as log:
        process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://{address}/v2/", timeout=2).close()
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                pytest.fail(f"the registry did not start: {(folder / 'registry.log').read_text()[-500:]}")
            time.sleep(0.2)
    yield address
    process.terminate()
    process.wait(timeout=10)


def default_signal_dispositions() -> None:
    """For a child process (Popen's preexec_fn): Ctrl-C, hang-up and kill take their usual effect,
    whatever this test run inherited. A job started in the background with `&` by a
    non-interactive shell ignores SIGINT, one under nohup ignores SIGHUP, and an ignored signal
    stays ignored across exec: the orchestrator (rightly) leaves it so."""
    import signal

    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


@pytest.fixture
def ctrl_c_interrupts():
    """SIGINT raises KeyboardInterrupt in this process for the test, as at an interactive terminal,
    even when the test run was started with SIGINT ignored."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


# --- a command run in the test's own folder ------------------------------------------------------

@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """The test's folder as the working folder, the project's cache and data folders inside it:
    nothing a command does reaches the home folder (hermetic tests)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ROSETTA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ROSETTA_DATA_DIR", str(tmp_path / "data"))
    return tmp_path


# --- a stand-in for a framework's Python ---------------------------------------------------------

@pytest.fixture
def fake_interpreter(tmp_path):
    """`fake_interpreter(body)`: the path of an executable in the test's folder that takes a cell
    document as a framework's Python does and runs `body` (tests/support/records.py says what
    `body` sees)."""
    from support.records import write_fake_interpreter

    return lambda body: write_fake_interpreter(tmp_path, body)


# --- no silent skips in CI (tests/ci-skips.toml) ----------------------------------------------------

SKIP_LIST = Path(__file__).resolve().parent / "ci-skips.toml"
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def allowed_skips() -> list[dict]:
    """The entries of tests/ci-skips.toml, each with its `test` pattern and `why`."""
    with open(SKIP_LIST, "rb") as stream:
        entries = tomllib.load(stream).get("skip", [])
    for entry in entries:
        if not (isinstance(entry.get("test"), str) and isinstance(entry.get("why"), str) and entry["why"].strip()):
            raise pytest.UsageError(f"{SKIP_LIST}: every [[skip]] needs a `test` pattern and a `why`: {entry}")
    return entries


def allowed_skip(nodeid: str) -> dict | None:
    return next((entry for entry in allowed_skips() if fnmatch.fnmatchcase(nodeid, entry["test"])), None)


def node_id_of(nodeid: str) -> str:
    """The test's node id without the "@group" pytest-xdist's loadgroup appends."""
    return nodeid.split("@", 1)[0] if "@" in nodeid.rpartition("::")[2] else nodeid


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _refuse_unlisted_skip(report) -> None:
    """Under CI=true a skip not on tests/ci-skips.toml is a failure, saying what to do."""
    if not (IN_CI and report.skipped and not hasattr(report, "wasxfail")):
        return
    nodeid = node_id_of(report.nodeid)
    entry = allowed_skip(nodeid)
    if entry is not None:
        report.user_properties.append(("allowed skip", entry["why"]))
        return
    report.outcome = "failed"
    report.longrepr = (f"skipped under CI=true ({_skip_reason(report)}), and tests/ci-skips.toml does not list "
                       f"{nodeid}: give the test what it needs (.ci/run, a fixture), or list it there "
                       f"with why this machine cannot run it")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _refuse_unlisted_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _refuse_unlisted_skip(outcome.get_result())


def pytest_terminal_summary(terminalreporter):
    """Every skip of this run with its reason (and, in CI, the list's why), printed last but the totals."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    terminalreporter.section(f"skips ({len(skipped)})")
    for report in skipped:
        why = dict(report.user_properties).get("allowed skip") if hasattr(report, "user_properties") else None
        line = f"{node_id_of(report.nodeid)}: {_skip_reason(report)}"
        terminalreporter.write_line(line + (f" [allowed in CI: {why}]" if why else ""))


# --- two workers in CI (pytest-xdist, --dist loadgroup) ------------------------------------------------

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Each test module stays on one worker (its module-scoped fixtures run once), unless it names a
    group of its own: the modules that share the Docker engine's images and containers name one."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    # the longest groups first (xdist hands out groups in this order): each starts on a worker of its own
    # while the short ones fill in around them, instead of one starting last and running alone
    items.sort(key=lambda item: LONGEST_GROUPS.index(_group(item)) if _group(item) in LONGEST_GROUPS
               else len(LONGEST_GROUPS))


# measured in CI, longest first (each group's tests run one after another on one worker)
LONGEST_GROUPS = ("docker-engine", "e2e-second-modes-0", "e2e-every-framework-0", "e2e-every-framework-1",
                  "e2e-second-modes-1", "test_e2e", "e2e-other-pythons", "test_languages")


def _group(item) -> str:
    return item.get_closest_marker("xdist_group").args[0]
