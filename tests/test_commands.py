"""The command convention (a module in orchestrator/commands/ is a verb) and the backend registry
(one entry is a backend `--backend` offers and `auto` may pick)."""
import argparse
import inspect
import json
import sys

import pytest

from orchestrator.backends.contract import Backend
from orchestrator.backends.options import BackendOptions
from orchestrator import commands
from orchestrator.__main__ import build_parser, main
from orchestrator.backends import registry
from orchestrator.errors import UserError
from workloads.common.result import Result
from support.records import measured

VERBS = ["run-matrix", "build", "push", "publish", "pull", "compose", "parity", "check-pins", "report", "compare",
         "export", "phrasebook", "list", "doctor"]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return next(a for a in parser._actions if flag in a.option_strings)


def test_the_verbs_in_help_order():
    assert list(commands.discover()) == VERBS
    assert list(subcommands(build_parser())) == VERBS


@pytest.mark.parametrize("verb", VERBS)
def test_every_command_module_follows_the_convention(verb):
    module = commands.discover()[verb]
    assert module.__name__ == f"orchestrator.commands.{verb.replace('-', '_')}"
    assert isinstance(module.HELP, str) and module.HELP and "\n" not in module.HELP
    assert list(inspect.signature(module.add_arguments).parameters) == ["parser"]
    assert list(inspect.signature(module.main).parameters) == ["args"]
    assert module.__doc__, "a command module says what its command does"


def test_shared_options_are_defined_once_and_read_back_as_options_objects(tmp_path):
    parser = build_parser()
    for verb in ("run-matrix", "parity"):
        args = parser.parse_args([verb, "--backend", "local", "--python", "/p", "--cache-dir", str(tmp_path),
                                  "--gpus", "1", "--pull", "--registry", "r:5000/", "--frameworks", "a, b,"])
        options = commands.common_args.backend_options(args)
        assert options == BackendOptions(backend="local", python="/p", cache_dir=tmp_path, gpus="1",
                                                  pull=True, build=options.build)
        assert options.build.registry == "r:5000" and args.frameworks == ["a", "b"]
    verbs = subcommands(parser)
    for flag in ("--backend", "--cache-dir", "--gpus", "--pull", "--timeout", "--registry", "--workloads", "--option"):
        assert option(verbs["run-matrix"], flag).help == option(verbs["parity"], flag).help, flag


@pytest.fixture
def dropped_in(tmp_path, monkeypatch):
    """A command module in a folder that the package also searches, as if dropped into commands/."""
    def drop(name: str, source: str):
        (tmp_path / f"{name}.py").write_text(source)
        monkeypatch.setattr(commands, "__path__", [*commands.__path__, str(tmp_path)])
        monkeypatch.delitem(sys.modules, f"orchestrator.commands.{name}", raising=False)
    yield drop
    for name in [name for name in sys.modules if name.startswith("orchestrator.commands.say_")]:
        del sys.modules[name]


def test_a_module_dropped_into_commands_becomes_a_verb(dropped_in, capsys):
    dropped_in("say_hello", '''"""`say-hello`: a test command."""
from orchestrator.errors import UserError

HELP = "greet someone"


def add_arguments(parser):
    parser.add_argument("name")


def main(args):
    if args.name == "nobody":
        raise UserError("say-hello needs a name; pass one")
    print(f"hello {args.name}")
    return 3
''')
    assert list(commands.discover()) == VERBS + ["say-hello"]  # no ORDER: after the others
    assert main(["say-hello", "world"]) == 3
    assert capsys.readouterr().out == "hello world\n"
    assert main(["say-hello", "nobody"]) == 2  # UserError: caught once, in main
    assert capsys.readouterr().err.strip() == "error: say-hello needs a name; pass one"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert "say-hello" in out and "greet someone" in out


def test_order_places_a_dropped_in_verb(dropped_in):
    dropped_in("say_first", '"""x"""\nHELP = "first"\nORDER = 0\n'
                            'def add_arguments(parser): pass\ndef main(args): return 0\n')
    assert list(commands.discover())[0] == "say-first"


def test_a_module_missing_part_of_the_convention_is_named(dropped_in):
    dropped_in("say_nothing", '"""x"""\nHELP = "nothing"\n')
    with pytest.raises(TypeError, match="say_nothing.py is a command module but lacks add_arguments, main"):
        commands.discover()


class RecordingBackend(Backend):
    """A backend that 'runs' each cell by writing an ok result, and remembers how it was made."""

    name = "recording"
    made_with = None

    def __init__(self, options):
        RecordingBackend.made_with = options

    def run_cell(self, job):
        return measured(Result(cell=job.cell, status="ok"))


def test_a_registered_backend_is_offered_and_runs_cells(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(registry.REGISTRY, "recording", registry.Registration(
        lambda frameworks, options, log: RecordingBackend(options), "recording", "cells pretend to run"))
    backend = option(subcommands(build_parser())["run-matrix"], "--backend")
    assert backend.choices == ("auto", "local", "docker", "ray", "recording")
    assert option(subcommands(build_parser())["parity"], "--backend").choices == backend.choices
    assert registry.auto_help() == "auto: Docker when an engine answers, else local"  # not ranked: never auto

    code = main(["run-matrix", "--backend", "recording", "--frameworks", "pytorch", "--variants", "cpu",
                 "--workloads", "cnn", "--profile", "smoke", "--data", "synthetic", "--gpus", "0", "--modes", "eager",
                 "--results-dir", str(tmp_path / "run"), "--data-dir", str(tmp_path / "data"), "--no-report"])
    assert code == 0, capsys.readouterr().err
    assert RecordingBackend.made_with.backend == "recording" and RecordingBackend.made_with.gpus == "0"
    [written] = (tmp_path / "run" / "cells").glob("*.json")
    assert json.loads(written.read_text())["status"] == "ok"


def test_auto_tries_registered_backends_by_rank(monkeypatch):
    monkeypatch.setitem(registry.REGISTRY, "busy", registry.Registration(
        lambda *_: None, "busy", "-", probe=lambda: (False, "the busy cluster is full"), auto_rank=-1,
        auto_note="busy when it has room"))
    monkeypatch.setattr(registry.host, "docker_engine", lambda: registry.host.DockerStatus(False, "no"))
    said = []
    assert registry.choose("auto", log=said.append) == "local"
    assert said == ["The busy cluster is full; no Docker engine answered; using the local backend "
                    "(per-framework virtual environments)."]
    assert registry.auto_help() == "auto: busy when it has room, else Docker when an engine answers, else local"


def test_an_unknown_backend_named_by_a_caller_is_a_user_error():
    with pytest.raises(UserError, match="unknown backend 'slurm'; choose from auto, local, docker, ray"):
        registry.choose("slurm")


class OrderRecordingBackend(RecordingBackend):
    """Remembers the cells it ran, in order; fails (once) the cells named in `fail`."""

    ran: list = []
    fail: set = set()

    def run_cell(self, job):
        OrderRecordingBackend.ran.append(job.cell)
        if job.cell.key in OrderRecordingBackend.fail:
            OrderRecordingBackend.fail.discard(job.cell.key)
            return Result(cell=job.cell, status="failed", reason="flaky")
        return measured(Result(cell=job.cell, status="ok"))


@pytest.fixture
def order_recording(monkeypatch):
    monkeypatch.setitem(registry.REGISTRY, "recording", registry.Registration(
        lambda frameworks, options, log: OrderRecordingBackend(options), "recording", "cells pretend to run"))
    OrderRecordingBackend.ran, OrderRecordingBackend.fail = [], set()
    return OrderRecordingBackend


def run_matrix_argv(tmp_path, folder: str, *extra: str) -> list[str]:
    return ["run-matrix", "--backend", "recording", "--frameworks", "pytorch,tensorflow,jax", "--variants", "cpu",
            "--workloads", "cnn,gru", "--profile", "smoke", "--data", "synthetic", "--results-dir",
            str(tmp_path / folder), "--data-dir", str(tmp_path / "data"), "--no-report", "--no-parity", *extra]


def invocations(tmp_path, folder: str) -> list[dict]:
    return json.loads((tmp_path / folder / "run.json").read_text())["invocations"]


def test_run_matrix_records_its_seed_and_order_and_the_same_seed_repeats_it(tmp_path, capsys, order_recording):
    argv = run_matrix_argv(tmp_path, "a", "--repeat", "2", "--seed", "11", "--option", "channels_last=off,on",
                           "--modes", "compiled", "--init", "framework")
    assert main(argv) == 0, capsys.readouterr().err
    first = [cell.key for cell in order_recording.ran]
    [record] = invocations(tmp_path, "a")
    assert record["seed"] == 11 and record["order"] == first and record["repeat"] == 2
    assert record["init"] == "framework" and record["options"] == {"pytorch": {"channels_last": ["off", "on"]}}
    assert record["modes"] == {"pytorch": ["compiled"], "tensorflow": ["compiled"], "jax": ["compiled"]}
    assert len(first) == 2 * 2 * 4  # repeats x workloads x (pytorch channels_last off and on, jax, tensorflow)
    assert [int(key[-1]) for key in first] == [0] * 8 + [1] * 8  # every cell once before any runs again
    assert {cell.init for cell in order_recording.ran} == {"framework"}
    assert {json.dumps(cell.options) for cell in order_recording.ran if cell.framework == "pytorch"} == \
        {"{}", '{"channels_last": "on"}'}
    assert all(not cell.options for cell in order_recording.ran if cell.framework != "pytorch")
    assert {cell.mode for cell in order_recording.ran} == {"compiled"}
    order_recording.ran = []
    assert main(run_matrix_argv(tmp_path, "b", "--repeat", "2", "--seed", "11", "--option", "channels_last=off,on",
                                "--modes", "compiled", "--init", "framework")) == 0
    assert [cell.key for cell in order_recording.ran] == first


def test_resume_keeps_the_runs_own_order(tmp_path, capsys, order_recording):
    assert main(run_matrix_argv(tmp_path, "r", "--seed", "5")) == 0
    planned = invocations(tmp_path, "r")[0]["order"]
    order_recording.fail = {planned[1], planned[3]}
    order_recording.ran = []
    assert main(run_matrix_argv(tmp_path, "r2", "--seed", "5")) == 1  # two cells failed
    assert [cell.key for cell in order_recording.ran] == planned
    order_recording.ran = []
    assert main(run_matrix_argv(tmp_path, "r2", "--resume")) == 0  # no --seed: the run's own
    assert [cell.key for cell in order_recording.ran] == [planned[1], planned[3]]
    resumed = invocations(tmp_path, "r2")
    assert resumed[-1]["seed"] == 5 and resumed[-1]["order"] == [planned[1], planned[3]]
    assert "already ok" in capsys.readouterr().err


def test_run_json_records_the_host_gpus_facts(tmp_path, order_recording, monkeypatch):
    from orchestrator import host

    facts = [{"index": 0, "name": "NVIDIA H200", "memory_total_mib": 143771, "source": "nvml"}]
    monkeypatch.setattr(host, "gpu_facts", lambda: facts)
    assert main(run_matrix_argv(tmp_path, "g", "--frameworks", "pytorch")) == 0
    assert invocations(tmp_path, "g")[0]["gpus"] == facts


def test_list_shows_each_frameworks_options_and_modes(capsys):
    from orchestrator.commands.list import describe_options

    assert describe_options("tensorflow") == "-"  # XLA is the compiled mode, no option
    assert describe_options("pytorch") == "channels_last: off|on (default off)"
    assert describe_options("jax") == "-"
    assert main(["list", "tensorflow"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "modes (--modes; the first is the default): graph: tf.function graphs" in shown
    assert "compiled: tf.function with XLA (jit_compile=True)" in shown


def test_parity_runs_options_beside_the_plain_reference(tmp_path, capsys, order_recording, monkeypatch):
    from orchestrator import parity

    monkeypatch.setattr(parity, "write_canonical", lambda data_dir, workloads: None)
    code = main(["parity", "--backend", "recording", "--frameworks", "pytorch,paddle,jax", "--workloads", "cnn",
                 "--option", "channels_last=on", "--results-dir", str(tmp_path / "p"),
                 "--data-dir", str(tmp_path / "data")])
    assert code == 1  # the pretend cells record no outputs: every comparison fails, which is fine here
    ran = [(cell.framework, cell.mode, cell.options, cell.init) for cell in order_recording.ran]
    assert ran == [("pytorch", "eager", {}, "canonical"), ("pytorch", "eager", {"channels_last": "on"}, "canonical"),
                   ("pytorch", "compiled", {}, "canonical"),  # parity holds in every mode
                   ("pytorch", "compiled", {"channels_last": "on"}, "canonical"),
                   ("paddle", "eager", {"channels_last": "on"}, "canonical"), ("jax", "compiled", {}, "canonical")]
    names = [row["framework"] for row in json.loads((tmp_path / "p" / "parity.json").read_text())]
    assert names == ["pytorch [eager]", "jax [compiled]", "paddle [eager, channels_last=on]", "pytorch [compiled]",
                     "pytorch [compiled, channels_last=on]", "pytorch [eager, channels_last=on]"]


def test_an_unsupported_parity_cell_is_not_checked_and_fails_nothing():
    """The `parity` command's exit status follows its counts: an unsupported cell (Keras on torch's
    compiled GRU) is "not checked", so it neither passes nor fails the check."""
    from orchestrator.parity import FAIL, PASS, Comparison, counts, failures

    def comparison(status):
        return Comparison("gru", "keras-torch [compiled]", status, 1, 1, {})

    passed, unsupported, failed = comparison(PASS), comparison("unsupported"), comparison(FAIL)
    assert failures([passed, unsupported]) == [] and counts([passed, unsupported]) == "1 passed, 0 failed, 1 not checked"
    assert failures([passed, unsupported, failed]) == [failed]
    assert failures([comparison("timeout")]) and counts([comparison("failed")]) == "0 passed, 1 failed, 0 not checked"
