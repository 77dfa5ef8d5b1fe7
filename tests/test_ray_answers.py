"""A Ray node's answer is untrusted data, and every way a task can end gives its cell a result.

The driver's dispatch (orchestrator/backends/ray/driver.py) runs here under the real runner with a
stand-in for Ray's cluster side (`StandInRay`: two nodes, and for each cell the outcomes of its
tries, scripted: an answer, or one of Ray's own exceptions to raise from `get`), because a real
cluster cannot run out of memory, fill its object store or hand back a forged answer on demand.
tests/test_ray_backend.py runs the same dispatch on a real cluster, a hostile node included.

Skipped when Ray is not installed (its exceptions are Ray's own), unless ROSETTA_REQUIRE_RAY=1."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
from pathlib import Path

import pytest

from orchestrator.run_settings import RunSettings
from orchestrator import frameworks
from orchestrator.backends import registry
from workloads.common.result import Cell, Metrics, Provenance, Result

HAVE_RAY = importlib.util.find_spec("ray") is not None
if os.environ.get("ROSETTA_REQUIRE_RAY") == "1" and not HAVE_RAY:
    raise ImportError("ROSETTA_REQUIRE_RAY=1 but Ray is not installed: pip install -e \".[ray]\"")
pytestmark = pytest.mark.skipif(not HAVE_RAY, reason="Ray is not installed (pip install -e \".[ray]\")")
REGISTRY = frameworks.discover()
NODES = ("a" * 56, "b" * 56)  # Ray's node ids are 56 hex digits
DRIVER_REVISION = "driver-revision-of-this-test"
NODE_REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def ray_exceptions(monkeypatch):
    """Ray's exception module. Importing Ray fixes its authentication mode for this process, and the
    real clusters of tests/test_ray_backend.py (maybe run later in it) use token mode: set it first."""
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    import ray.exceptions

    return ray.exceptions


class StandInRay:
    """What the driver asks of the `ray` module, with the cluster replaced: `nodes` lists two live
    CPU nodes, a task submitted never runs, and `get` gives each try of a cell the next outcome
    scripted for its key (a value is returned, an exception raised; a callable is called with the
    job first). Every task is finished as soon as `wait` is asked."""

    __version__ = "stand-in"

    def __init__(self, exceptions, script: dict[str, list]):
        import ray.util.scheduling_strategies  # the real strategy objects: only built, never used

        self.exceptions = exceptions
        self.util = ray.util
        self.script = script
        self.tries: list[tuple[str, str]] = []  # (cell key, node id) of each try, in order

    def nodes(self) -> list[dict]:
        return [{"NodeID": node, "Alive": True, "NodeManagerAddress": f"10.0.0.{number}",
                 "Resources": {"CPU": 1.0}, "Labels": {}} for number, node in enumerate(NODES, start=1)]

    def remote(self, function):
        return StandInTask(self)

    def put(self, value):
        return value

    def wait(self, refs, *, num_returns, timeout, fetch_local):
        return list(refs), []

    def get(self, ref, timeout=None):
        outcome = ref.outcome(ref.job) if callable(ref.outcome) else ref.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def cancel(self, ref, force=False):
        pass

    def shutdown(self):
        pass


class StandInTask:
    def __init__(self, ray: StandInRay):
        self.ray = ray
        self.node = None

    def options(self, *, scheduling_strategy, **ignored):
        self.node = scheduling_strategy.node_id
        return self

    def remote(self, job, *ignored):
        self.ray.tries.append((job.cell.key, self.node))
        return StandInRef(job, self.ray.script[job.cell.key].pop(0))


class StandInRef:
    def __init__(self, job, outcome):
        self.job, self.outcome = job, outcome


def ok_result(cell: Cell) -> Result:
    return Result(cell, phases={"train": 1.0}, metrics=Metrics(steady_samples_per_s=1.0, images_per_s=1.0),
                  provenance=Provenance(framework_version="0.0-stand-in"))


def answer(cell: Cell, **changes) -> dict:
    """A node's honest answer for `cell` (answer.FIELDS), with `changes`."""
    return {"result": json.dumps(ok_result(cell).to_dict()).encode(), "log": f"cell {cell.key} ran\n".encode(),
            "wall_time_s": 1.5, "hostname": "node-1.example", "gpus": None, "git_revision": NODE_REVISION,
            **changes}


def honest(job) -> dict:
    return answer(job.cell)


def matrix(count: int) -> list[Cell]:
    return [Cell("pytorch", "cnn", variant="cpu", profile="smoke", data="synthetic", repeat=repeat)
            for repeat in range(count)]


def run(tmp_path, monkeypatch, ray: StandInRay, cells: list[Cell], max_retries: int = 2) -> dict[str, Result]:
    """The real runner over the stand-in cluster; the results it filed, by cell key."""
    from orchestrator import host
    from orchestrator.backends.ray.driver import RayBackend
    from orchestrator.runner import run_cells

    monkeypatch.setattr(host, "git_revision", lambda: DRIVER_REVISION)
    options = registry.BackendOptions(backend="ray", node_backend="local", max_retries=max_retries)
    backend = RayBackend(REGISTRY, options, lambda line: None, ray=ray)
    summary = run_cells(cells, backend, REGISTRY, RunSettings(results_dir=tmp_path / "run", data_dir=tmp_path / "data"))
    return {result.cell.key: result for result in summary.results}


def test_a_nodes_answer_is_checked_plain_data_and_a_bad_one_fails_only_its_cell(tmp_path, monkeypatch,
                                                                                 ray_exceptions):
    cells = matrix(12)
    elsewhere = Cell("..", "cnn", variant="cpu", profile="smoke", data="synthetic")
    hostile = [
        ("a dict of plain values", lambda job: ok_result(job.cell)),  # the object itself, as Ray would unpickle it
        ("unknown field(s) 'run'", lambda job: {**answer(job.cell), "run": "rm -rf /"}),
        ("missing git_revision", lambda job: {k: v for k, v in answer(job.cell).items() if k != "git_revision"}),
        ("bad result (must be bytes, not Result)", lambda job: answer(job.cell, result=ok_result(job.cell))),
        ("bad log (must be bytes, not str)", lambda job: answer(job.cell, log="text")),
        ("bad wall_time_s (nan is not", lambda job: answer(job.cell, wall_time_s=float("nan"))),
        ("bad wall_time_s (must be a number, not bool)", lambda job: answer(job.cell, wall_time_s=True)),
        ("bad hostname (must be 1 to 253", lambda job: answer(job.cell, hostname="node\n" + "x" * 5000)),
        ("bad git_revision (not a git revision", lambda job: answer(job.cell, git_revision="../../etc/passwd")),
        ("not valid JSON", lambda job: answer(job.cell, result=b"{\"status\": \"ok\"")),
        ("its result names another cell", lambda job: answer(job.cell, result=json.dumps(
            ok_result(elsewhere).to_dict()).encode())),
    ]
    script = {cell.key: [outcome] for cell, (_, outcome) in zip(cells, hostile)}
    script[cells[-1].key] = [honest]  # and the matrix goes on to an honest answer
    results = run(tmp_path, monkeypatch, StandInRay(ray_exceptions, script), cells)

    for cell, (said, _) in zip(cells, hostile):
        result = results[cell.key]
        assert result.status == "failed" and said in result.reason, (said, result.reason)
        assert result.reason.isprintable() and len(result.reason) < 400, result.reason
        assert result.cell == cell and result.provenance.cluster["node_id"] in NODES
    good = results[cells[-1].key]
    assert good.status == "ok" and good.wall_time_s == 1.5 and good.provenance.cluster["hostname"] == "node-1.example"
    # filed under the driver's names only: one result and one log per cell of the matrix, nothing else
    assert sorted(path.name for path in (tmp_path / "run" / "cells").iterdir()) == sorted(
        f"{cell.key}.json" for cell in cells)
    assert sorted(path.name for path in (tmp_path / "run" / "logs").iterdir()) == sorted(
        f"{cell.key}.log" for cell in cells)
    assert (tmp_path / "run" / "logs" / f"{cells[-1].key}.log").read_text() == f"cell {cells[-1].key} ran\n"
    assert {path.name for path in tmp_path.iterdir()} <= {"data", "run"}  # nothing named ".." or elsewhere


def test_each_of_rays_errors_is_that_cells_result_and_the_matrix_goes_on(tmp_path, monkeypatch, ray_exceptions):
    errors = ray_exceptions
    cells = matrix(6)
    out_of_memory = errors.OutOfMemoryError("Task was killed due to the node running low on memory.\nMemory on "
                                            "the node was 31.2GB / 32GB")
    script = {
        cells[0].key: [out_of_memory, honest],  # the worker killed: tried again on the other node
        cells[1].key: [out_of_memory, out_of_memory, out_of_memory],  # every try: failed after --max-retries
        cells[2].key: [errors.RuntimeEnvSetupError("pip install failed\nERROR: no matching distribution")],
        cells[3].key: [errors.ObjectStoreFullError("Failed to put object in object store: full")],
        cells[4].key: [errors.RpcError("gRPC UNAVAILABLE\nconnection reset")],  # any other RayError
        cells[5].key: [honest],
    }
    ray = StandInRay(errors, script)
    results = run(tmp_path, monkeypatch, ray, cells, max_retries=2)

    assert len(results) == len(cells)
    retried = results[cells[0].key]
    assert retried.status == "ok" and retried.provenance.cluster["tries"] == "2"
    assert "OutOfMemoryError" in retried.provenance.cluster["try_1"]
    first, second = [node for key, node in ray.tries if key == cells[0].key]
    assert first != second  # the retry went to the other node
    exhausted = results[cells[1].key]
    assert exhausted.status == "failed" and exhausted.reason.startswith("lost 3 time(s) to the cluster")
    assert "OutOfMemoryError" in exhausted.reason and exhausted.provenance.cluster["tries"] == "3"
    expected = {2: "could not set up the task's runtime environment (pip install failed)",
                3: "had no room for the cell's answer (ObjectStoreFullError",
                4: "Ray failed the task on node 10.0.0."}
    for index, said in expected.items():
        result = results[cells[index].key]
        assert result.status == "failed" and said in result.reason, result.reason
        assert "\n" not in result.reason
    assert results[cells[5].key].status == "ok"
    on_disk = {path.stem: json.loads(path.read_text()) for path in (tmp_path / "run" / "cells").iterdir()}
    assert sorted(on_disk) == sorted(cell.key for cell in cells)


def test_a_task_cancelled_by_someone_else_gives_its_cell_a_failed_result(tmp_path, monkeypatch, ray_exceptions):
    """Not this run's cancel (which files nothing: the run is stopping) but `ray cancel`, or the
    cluster's: the cell is failed, saying so, never silently missing from the run."""
    cells = matrix(2)
    broke = ray_exceptions.RayTaskError("run_on_node", "Traceback ...", ValueError("the node side broke"))
    script = {cells[0].key: [ray_exceptions.TaskCancelledError()], cells[1].key: [broke]}
    results = run(tmp_path, monkeypatch, StandInRay(ray_exceptions, script), cells)

    assert sorted(results) == sorted(cell.key for cell in cells)
    cancelled = results[cells[0].key]
    assert cancelled.status == "failed" and re.fullmatch(
        r"its task was cancelled on node 10\.0\.0\.[12]/(a{6}|b{6}), not by this run \(`ray cancel`, or the cluster "
        r"cancelled it\); run it again with --resume", cancelled.reason), cancelled.reason
    assert re.fullmatch(r"on node 10\.0\.0\.[12]/(a{6}|b{6}): the node side broke", results[cells[1].key].reason)
    assert (tmp_path / "run" / "cells" / f"{cells[0].key}.json").is_file()


def test_a_result_records_the_checkout_its_node_ran_and_the_drivers_beside_it(tmp_path, monkeypatch,
                                                                              ray_exceptions):
    cells = matrix(3)
    script = {cells[0].key: [honest], cells[1].key: [lambda job: answer(job.cell, git_revision=None)],
              cells[2].key: [lambda job: answer(job.cell, git_revision=NODE_REVISION + "-dirty")]}
    results = run(tmp_path, monkeypatch, StandInRay(ray_exceptions, script), cells)

    revisions = [results[cell.key].provenance.git_revision for cell in cells]
    assert revisions == [NODE_REVISION, "unknown", NODE_REVISION + "-dirty"]  # never the driver's
    assert {results[cell.key].provenance.cluster["driver_git_revision"] for cell in cells} == {DRIVER_REVISION}
    on_disk = json.loads((tmp_path / "run" / "cells" / f"{cells[0].key}.json").read_text())
    assert on_disk["provenance"]["git_revision"] == NODE_REVISION


def test_the_node_makes_an_answer_of_plain_values_that_the_driver_accepts(tmp_path):
    """What node.py sends is what answer.py accepts: the same FIELDS, plain types only."""
    from orchestrator.backends.ray import answer as node_answer

    cell = matrix(1)[0]
    log = tmp_path / "cell.log"
    log.write_bytes(b"x" * 10)
    made = node_answer.make(ok_result(cell), node_answer.log_tail(log), 2.0, hostname=socket.gethostname(),
                            gpus="0", git_revision=NODE_REVISION)
    assert {type(value) for value in made.values()} <= {bytes, float, str}
    checked = node_answer.check(made, cell, "10.0.0.1/aaaaaa")
    assert checked.result == ok_result(cell) and checked.log == b"x" * 10 and checked.gpus == "0"
    other = matrix(2)[1]
    assert node_answer.check(made, other, "10.0.0.1/aaaaaa").result.status == "failed"  # filed under `other`


def test_a_log_is_shipped_capped_to_its_last_bytes(tmp_path, monkeypatch):
    from orchestrator.backends.ray import answer as node_answer

    monkeypatch.setattr(node_answer, "LOG_LIMIT_BYTES", 8)
    log = tmp_path / "cell.log"
    log.write_bytes(b"0123456789abcdef")
    assert node_answer.log_tail(log) == b"89abcdef"
    assert node_answer.log_tail(tmp_path / "none.log") == b""
    with pytest.raises(node_answer.Refused, match=r"bad log \(larger than 8 bytes\)"):
        node_answer.check(answer(matrix(1)[0], log=b"0123456789"), matrix(1)[0], "10.0.0.1/aaaaaa")


def test_the_trust_model_says_what_a_ray_node_can_do_each_line_naming_a_test_that_exists():
    """docs/RUN-GUARANTEES.md's "What a Ray node can do", docs/RAY.md and the README say that cluster
    membership is full trust; each line of the section names the tests that check it."""
    root = Path(__file__).resolve().parent.parent
    guarantees = (root / "docs" / "RUN-GUARANTEES.md").read_text()
    assert "### What a Ray node can do" in guarantees
    section = guarantees.split("### What a Ray node can do", 1)[1].split("\n#", 1)[0]
    lines = section.split("\n- ")[1:]
    assert len(lines) >= 5 and "Cluster membership is full trust" in lines[0]
    for line in lines:
        named = re.findall(r"(test_\w+\.py)::(\w+)", line)
        assert named, f"names no test: {line[:80]}"
        for file, test in named:
            assert re.search(rf"^def {test}\(", (root / "tests" / file).read_text(), re.M), (file, test)
    assert "Every member of the cluster is fully trusted" in (root / "docs" / "RAY.md").read_text()
    assert "fully trusted" in (root / "README.md").read_text()
