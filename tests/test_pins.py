"""check-pins: a variant's pins resolved by pip for its image's Python and glibc, without a build."""
import json
from pathlib import Path

import pytest

from orchestrator import pins
from orchestrator.__main__ import main
from orchestrator.frameworks import Framework, Variant


def make_framework(tmp_path: Path, requirements: str, python: str = "3.10",
                   base_image: str = "nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04") -> tuple[Framework, Variant]:
    file = tmp_path / "requirements-test.txt"
    file.write_text(requirements)
    variant = Variant(name="test", device="cpu", requirements=file, base_image=base_image, python=python)
    return Framework(name="demo", display_name="Demo", folder=tmp_path, variants={"test": variant},
                     default_variant="test", workloads=()), variant


@pytest.mark.parametrize("base, glibc", [
    ("ubuntu:18.04", (2, 27)), ("nvidia/cuda:11.2.2-cudnn8-runtime-ubuntu20.04", (2, 31)),
    ("nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04", (2, 35)), ("python:3.11-slim-bookworm", (2, 36)),
    ("python:3.9-slim-bullseye", (2, 31)), ("registry.example/custom:1", pins.OLDEST_GLIBC), (None, pins.OLDEST_GLIBC),
])
def test_glibc_of_the_base(base, glibc):
    assert pins.base_glibc(base) == glibc


def test_platform_tags_cover_every_older_manylinux():
    tags = pins.platform_tags((2, 31))
    assert tags[0] == "manylinux_2_31_x86_64" and "manylinux_2_17_x86_64" in tags and "manylinux2014_x86_64" in tags
    assert "manylinux_2_32_x86_64" not in tags and "manylinux_2_34_x86_64" not in tags


def test_pins_are_read_from_requirement_lines_only(tmp_path):
    file = tmp_path / "r.txt"
    file.write_text("# comment\n--extra-index-url https://example.invalid/simple\nTyping_Extensions==4.16.0  # why\n"
                    "numpy==1.26.4\n\n")
    assert pins.pinned(file) == {"typing-extensions": "4.16.0", "numpy": "1.26.4"}


def test_dependencies_are_checked_against_the_pins_for_the_target_python():
    report = {"install": [{"metadata": {"name": "keras", "version": "2.2.5", "requires_dist": [
        "numpy>=1.9.1", "h5py", "scipy>=1.6", 'dataclasses; python_version < "3.7"',
        'pytest; extra == "tests"', 'enum34; python_version < "3.4"']}}]}
    result = pins.PinCheck("demo", "test", "3.6", (2, 27))
    pins._check_dependencies(report, {"keras": "2.2.5", "numpy": "1.19.5", "scipy": "1.5.4"},
                             pins.marker_environment("3.6"), result)
    assert result.problems == ["keras==2.2.5 needs scipy>=1.6, but scipy==1.5.4 is pinned"]
    assert [w.split(" ")[0] for w in result.warnings] == ["h5py", 'dataclasses;']
    newer = pins.PinCheck("demo", "test", "3.11", (2, 36))
    pins._check_dependencies(report, {"keras": "2.2.5", "numpy": "1.19.5", "scipy": "1.6.0", "h5py": "3.1.0"},
                             pins.marker_environment("3.11"), newer)
    assert newer.ok and newer.warnings == []  # dataclasses is only needed before 3.7


def test_a_pin_without_a_wheel_is_retried_as_a_source_build(tmp_path):
    framework, variant = make_framework(tmp_path, "chainer==7.8.1\n")
    commands = []

    def fake_pip(command, **kwargs):
        commands.append(command)
        if "--no-binary" not in command:
            return type("Completed", (), {"returncode": 1, "stderr": "ERROR: No matching distribution found for chainer==7.8.1\n"})
        report = Path(command[command.index("--report") + 1])
        report.write_text(json.dumps({"install": [{"metadata": {"name": "chainer", "version": "7.8.1",
                                                                "requires_python": ">=3.5.0"}}]}))
        return type("Completed", (), {"returncode": 0, "stderr": ""})

    result = pins.check_variant(framework, variant, run=fake_pip)
    assert result.ok and len(commands) == 2 and commands[1][commands[1].index("--no-binary") + 1] == "chainer"
    assert "--python-version" in commands[0] and commands[0][commands[0].index("--python-version") + 1] == "3.10"
    assert result.warnings == ["chainer==7.8.1 has no wheel for Python 3.10 on glibc 2.35: the image build builds "
                               "its source distribution"]


def test_an_index_out_of_reach_leaves_the_variant_not_checked_rather_than_failed(tmp_path):
    framework, variant = make_framework(tmp_path, "--extra-index-url https://vendor.invalid/simple/\nvendor-gpu==3.3.1\n")
    calls = []

    def unreachable(command, **kwargs):
        calls.append(command)
        return type("Completed", (), {"returncode": 1, "stderr": (
            "WARNING: Retrying after connection broken by 'NewConnectionError(... Failed to establish a new connection: "
            "[Errno -2] Name or service not known')': /simple/vendor-gpu/\n"
            "ERROR: No matching distribution found for vendor-gpu==3.3.1\n")})

    result = pins.check_variant(framework, variant, run=unreachable)
    assert not result.ok and result.problems == [] and len(calls) == 1  # no pointless retry as a source build
    assert "https://vendor.invalid/simple/" in result.unchecked


def test_real_pip_finds_good_pins_and_names_bad_ones(tmp_path):
    """pip against the package index: small distributions only."""
    (tmp_path / "good").mkdir()
    framework, variant = make_framework(tmp_path / "good", "python-dateutil==2.9.0.post0\n")
    good = pins.check_variant(framework, variant)
    assert good.ok, good.problems
    assert any(w.startswith("six>=1.5 (needed by python-dateutil==2.9.0.post0) is not pinned") for w in good.warnings)

    (tmp_path / "old").mkdir()
    framework, variant = make_framework(tmp_path / "old", "dataclasses==0.8\n")  # a wheel for Python 3.6 only
    old = pins.check_variant(framework, variant)
    assert old.problems == ["dataclasses==0.8 requires Python >=3.6, <3.7, the image has 3.10"]

    (tmp_path / "missing").mkdir()
    framework, variant = make_framework(tmp_path / "missing", "six==99.0\n")
    missing = pins.check_variant(framework, variant)
    assert len(missing.problems) == 1 and "six==99.0" in missing.problems[0] and "Python 3.10, glibc 2.35" in missing.problems[0]


def test_check_pins_command_reports_each_variant(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pins, "check_variant", lambda framework, variant: pins.PinCheck(
        framework.name, variant.name, "3.6", (2, 27), problems=["scipy==9 is not there"] if variant.name == "cu100" else []))
    assert main(["check-pins", "cntk"]) == 1
    err = capsys.readouterr().err
    assert "cntk cpu: ok" in err and "cntk cu100: not installable" in err and "problem: scipy==9 is not there" in err
    assert "1 ok, 1 not installable, 0 not checked" in err
    assert main(["check-pins", "cntk", "--variant", "cpu"]) == 0
    assert main(["check-pins", "caffe3"]) == 2
