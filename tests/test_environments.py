"""Framework environments built with uv or pip (orchestrator/environments.py): pip's configuration
read as pip merges it, handed to uv, and real builds from a local wheel folder that pip's own
configuration names, with no index at all: what a host with a mirror or pre-downloaded wheels has."""
import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from orchestrator import environments
from orchestrator.environments import PipConfiguration, uv_install_options


def test_pips_precedence_variables_over_the_install_section_over_global():
    config = PipConfiguration.parse("\n".join([
        "global.find-links='/opt/wheels'",
        "global.index-url='https://mirror.example/simple'",
        "install.index-url='https://install.example/simple'",
        ":env:.find-links='/srv/wheels /srv/more-wheels'",
        "global.cert='/etc/ssl/corp.pem'",
        "download.index-url='https://ignored.example/simple'",  # another command's section
        "not a setting line",
    ]))
    assert config.values["index-url"] == "https://install.example/simple"
    assert config.several("find-links") == ["/srv/wheels", "/srv/more-wheels"]
    assert config.values["cert"] == "/etc/ssl/corp.pem"


def test_uv_is_given_what_pip_would_use():
    config = PipConfiguration.parse("\n".join([
        "global.index-url='https://mirror.example/simple'",
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/more/simple'",
        "global.find-links='/opt/wheels'", "global.constraint='/etc/pip/constraints.txt'",
        "global.trusted-host='mirror.example'", "global.cert='/etc/ssl/corp.pem'", ":env:.no-index='1'",
        ":env:.default-timeout='180'", "global.proxy='http://proxy.example:3128'"]))
    flags, variables = uv_install_options(config)
    assert flags[:2] == ["--index-strategy", "unsafe-best-match"]  # pip's best match over every index
    pairs = list(zip(flags[2::2], flags[3::2]))
    assert ("--index-url", "https://mirror.example/simple") in pairs
    assert ("--extra-index-url", "file:///opt/pypi/simple") in pairs and ("--extra-index-url", "file:///opt/more/simple") in pairs
    assert ("--find-links", "/opt/wheels") in pairs and ("--constraint", "/etc/pip/constraints.txt") in pairs
    assert ("--allow-insecure-host", "mirror.example") in pairs and "--no-index" in flags
    assert variables == {"SSL_CERT_FILE": "/etc/ssl/corp.pem", "UV_HTTP_TIMEOUT": "180",
                         "HTTPS_PROXY": "http://proxy.example:3128"}
    cuda_flags, _ = uv_install_options(config, local_wheels=False)
    assert "--find-links" not in cuda_flags  # a local CPU wheel must not stand in for a CUDA build


def test_pip_config_is_read_from_pips_own_files_and_variables(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /from/the/file\nindex-url = https://file.example/simple\n"
                    "[install]\nconstraint = /from/install/constraints.txt\n")
    environ = {**os.environ, "PIP_CONFIG_FILE": str(conf), "PIP_INDEX_URL": "https://variable.example/simple"}
    environ.pop("PIP_FIND_LINKS", None)
    config = PipConfiguration.read(environ=environ)
    assert config.several("find-links") == ["/from/the/file"]
    assert config.values["index-url"] == "https://variable.example/simple"
    assert config.several("constraint") == ["/from/install/constraints.txt"]


def make_wheel(folder: Path, name: str, version: str) -> Path:
    """A real, minimal pure-Python wheel: a module saying its version, METADATA, WHEEL, RECORD."""
    dist_info = f"{name}-{version}.dist-info"
    files = {f"{name}.py": f"VERSION = {version!r}\n",
             f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: rosetta-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = "\n".join(record) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@pytest.mark.parametrize("installer", [environments.UV, environments.PIP])
def test_an_environment_takes_its_packages_from_the_wheel_folder_pips_config_names(tmp_path, monkeypatch, installer):
    """No index at all (no-index) and the wheel folder named only in a pip configuration file: both
    installers build the environment from there, and the pin decides the version."""
    if installer == environments.UV and environments.uv_binary() is None:
        pytest.skip("uv is not installed (it is a dependency of the project: pip install -e .)")
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "rosettaprobe", "1.0")
    make_wheel(wheels, "rosettaprobe", "2.0")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nno-index = true\nfind-links = {wheels}\n")
    for variable in [name for name in os.environ if name.startswith(("PIP_", "UV_"))]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    requirements = tmp_path / "requirements-cpu.txt"
    requirements.write_text("rosettaprobe==1.0\n")
    request = environments.BuildRequest(venv=tmp_path / "venv", python=sys.executable, requirements=requirements,
                                        label="probe/cpu")
    used = environments.build(request, tmp_path / "build.log", installer=installer)
    assert used == installer, (tmp_path / "build.log").read_text()
    # each module's bytecode written at install, by either installer: a cell never writes it
    # (PYTHONDONTWRITEBYTECODE), so without it every cell would compile its framework again on import
    assert list((tmp_path / "venv").glob("lib/python*/site-packages/__pycache__/rosettaprobe.*.pyc"))
    version = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c", "import rosettaprobe; "
                              "print(rosettaprobe.VERSION)"], capture_output=True, text=True, check=True).stdout
    assert version.strip() == "1.0"
    log = (tmp_path / "build.log").read_text()
    assert f"built with {installer}" in log and "# exit 0 after" in log


def test_a_failed_build_names_its_log(tmp_path, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nno-index = true\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    requirements = tmp_path / "requirements-cpu.txt"
    requirements.write_text("this-package-does-not-exist-rosetta==0.0.1\n")
    request = environments.BuildRequest(venv=tmp_path / "venv", python=sys.executable, requirements=requirements,
                                        label="missing/cpu")
    with pytest.raises(environments.EnvironmentBuildError,
                       match=rf"building the missing/cpu environment failed; see {tmp_path / 'build.log'}"):
        environments.build(request, tmp_path / "build.log")


def test_several_builds_run_two_at_a_time_and_one_failure_stops_none():
    import threading

    running, peak, lock, done = [0], [0], threading.Lock(), []
    barrier = threading.Barrier(2, timeout=30)

    def build(name, fail=False):
        def one():
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            if name in ("a", "b"):
                barrier.wait()  # both first builds are in flight at once, or this times out
            with lock:
                running[0] -= 1
                done.append(name)
            if fail:
                raise environments.EnvironmentBuildError(f"{name} failed")
        return one

    environments.build_several([build("a", fail=True), build("b"), build("c")], at_once=2)
    assert peak[0] == 2 and sorted(done) == ["a", "b", "c"]


def test_uv_builds_what_it_serves_and_pip_the_python_36_rows(monkeypatch):
    """CNTK's Python 3.6 environments come from pip (CNTK imports pip as it loads; uv installs none)."""
    monkeypatch.setattr(environments, "uv_binary", lambda: "/usr/bin/uv")
    versions = {"/py36": (3, 6), "/py38": (3, 8), "/py311": (3, 11)}
    monkeypatch.setattr(environments, "python_version", versions.get)
    assert environments.choose_installer("/py36") == environments.PIP
    assert environments.choose_installer("/py38") == environments.UV
    assert environments.choose_installer("/py311") == environments.UV
    assert environments.choose_installer("/py311", environments.PIP) == environments.PIP
    monkeypatch.setattr(environments, "uv_binary", lambda: None)
    assert environments.choose_installer("/py311") == environments.PIP
