"""Building a framework's virtual environment for the local backend: with uv, or with pip.

uv creates and fills an environment several times faster than pip (measured by
benchmarks/environment_build.py), so it builds every environment it can serve; pip builds the
rest (no uv on this host, or CNTK's Python 3.6, see UV_OLDEST_PYTHON) and whatever `installer="pip"`
asks for.

Both installers must take packages from the same places, so a host with a mirror, a proxy, a CA
bundle or a folder of pre-downloaded wheels behaves the same whichever builds. pip reads its own
configuration files and PIP_* variables; uv reads neither. `PipConfiguration` therefore asks pip
what it would use (`pip config list`: every configuration file and variable, merged as pip merges
them) and `uv_install_options` hands the same settings to uv as flags and variables. uv is also
told to pick the best match across all indexes, as pip does, instead of its stricter default
(first index that has the package): a pinned CPU wheel in a local folder must win over the same
version's CUDA build on the index, exactly as it does with pip.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

UV = "uv"
PIP = "pip"
INSTALLERS = (UV, PIP)
# The oldest Python whose environments uv builds here. uv itself serves 3.6 and 3.7 too (its tier 2),
# but its environments hold no pip, and the one row on those Pythons, CNTK 2.7 (Python 3.6), imports
# pip when it loads: its environments come from pip, as its images' do (images/cntk/Dockerfile.j2).
UV_OLDEST_PYTHON = (3, 8)

# pip's settings (as `pip config list` names them) that say where packages come from, and how uv
# is given each: a flag repeated per value, a flag alone, or a variable. Settings not listed here
# (progress bars, caches, verbosity) do not change what is installed.
_UV_REPEATED_FLAGS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links",
                      "constraint": "--constraint", "trusted-host": "--allow-insecure-host",
                      "only-binary": "--only-binary", "no-binary": "--no-binary"}
_UV_SINGLE_FLAGS = {"index-url": "--index-url"}
_UV_SWITCHES = {"no-index": ["--no-index"], "pre": ["--prerelease", "allow"]}
_UV_VARIABLES = {"cert": "SSL_CERT_FILE", "client-cert": "SSL_CLIENT_CERT", "proxy": "HTTPS_PROXY",
                 "timeout": "UV_HTTP_TIMEOUT", "default-timeout": "UV_HTTP_TIMEOUT"}
# pip's own precedence, lowest first: the [global] section, the command's own section, then variables.
_SECTIONS = ("global", "install", ":env:")
_TRUE = {"1", "true", "yes", "on"}


class EnvironmentBuildError(Exception):
    """An environment could not be built; the message names the log to read."""


@dataclass(frozen=True)
class PipConfiguration:
    """The settings pip would install with on this host: option name -> value (a list for the
    options that take several), from its configuration files and PIP_* variables."""

    values: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, python: str = sys.executable, environ: dict[str, str] | None = None) -> "PipConfiguration":
        """Ask pip (`python -m pip config list`): it knows which files it reads and how it merges them."""
        try:
            completed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True,
                                       timeout=60, env=dict(os.environ if environ is None else environ))
        except (OSError, subprocess.TimeoutExpired):
            return cls()
        if completed.returncode != 0:
            return cls()
        return cls.parse(completed.stdout)

    @classmethod
    def parse(cls, listing: str) -> "PipConfiguration":
        """`section.option='value'` lines; for each option the highest-precedence section wins."""
        found: dict[str, tuple[int, str]] = {}
        for line in listing.splitlines():
            name, equals, quoted = line.partition("=")
            section, dot, option = name.rpartition(".")
            if not equals or not dot or section not in _SECTIONS:
                continue
            try:
                value = ast.literal_eval(quoted)
            except (ValueError, SyntaxError):
                continue
            if not isinstance(value, str):
                continue
            rank = _SECTIONS.index(section)
            if option not in found or rank >= found[option][0]:
                found[option] = (rank, value)
        return cls({option: value for option, (_, value) in found.items()})

    def several(self, option: str) -> list[str]:
        """An option that takes several values (pip separates them by white space)."""
        return self.values.get(option, "").split()

    def switched_on(self, option: str) -> bool:
        return self.values.get(option, "").strip().lower() in _TRUE


def uv_install_options(config: PipConfiguration, *, local_wheels: bool = True) -> tuple[list[str], dict[str, str]]:
    """The uv flags and variables that make `uv pip install` take packages where pip would.

    `local_wheels=False` leaves out find-links folders (a CUDA variant: a local CPU wheel of the
    same version must not stand in for its CUDA build)."""
    flags = ["--index-strategy", "unsafe-best-match"]  # pip's rule: the best match over every index
    for option, flag in _UV_SINGLE_FLAGS.items():
        if config.values.get(option):
            flags += [flag, config.values[option].strip()]
    for option, flag in _UV_REPEATED_FLAGS.items():
        if option == "find-links" and not local_wheels:
            continue
        for value in config.several(option):
            flags += [flag, value]
    for option, switch in _UV_SWITCHES.items():
        if config.switched_on(option):
            flags += switch
    variables = {variable: config.values[option].strip() for option, variable in _UV_VARIABLES.items()
                 if config.values.get(option, "").strip()}
    return flags, variables


def uv_binary() -> str | None:
    """uv's executable: the one the `uv` package installed beside this host's Python, else PATH's."""
    try:
        from uv import find_uv_bin
    except ImportError:
        return shutil.which(UV)
    try:
        return find_uv_bin()
    except FileNotFoundError:
        return shutil.which(UV)


def python_version(python: str) -> tuple[int, int] | None:
    try:
        answer = subprocess.run([python, "-c", "import sys; print('%d %d' % sys.version_info[:2])"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = answer.stdout.split()
    return (int(parts[0]), int(parts[1])) if answer.returncode == 0 and len(parts) == 2 else None


def choose_installer(python: str, requested: str | None = None) -> str:
    """uv where it is at hand and serves `python`; pip otherwise, or when `requested`."""
    if requested == PIP:
        return PIP
    version = python_version(python)
    if uv_binary() and version is not None and version >= UV_OLDEST_PYTHON:
        return UV
    return PIP


@dataclass
class BuildRequest:
    """One environment to build: where, from which interpreter and requirements, for which device."""

    venv: Path
    python: str  # the interpreter the environment is made from
    requirements: Path
    device: str = "cpu"  # a CUDA variant gets no local wheels (see uv_install_options)
    build_constraints: Path | None = None  # constraints for building sdists (chainer's setuptools<81)
    label: str = ""  # "pytorch/cpu", for messages


def build(request: BuildRequest, log_path: Path, *, installer: str | None = None,
          config: PipConfiguration | None = None) -> str:
    """Build the environment (the caller removes any half-built one first); the installer used.

    Raises EnvironmentBuildError naming `log_path`, where every command and its output are kept."""
    chosen = choose_installer(request.python, installer)
    steps, environment = (_uv_steps if chosen == UV else _pip_steps)(request, config)
    with open(log_path, "w") as log:
        log.write(f"# {request.label or request.venv.name}: built with {chosen}\n")
        for step in steps:
            log.write(f"$ {' '.join(step)}\n")
            log.flush()
            started = time.perf_counter()
            completed = subprocess.run(step, stdout=log, stderr=subprocess.STDOUT, env=environment, check=False,
                                       stdin=subprocess.DEVNULL)
            log.write(f"# exit {completed.returncode} after {time.perf_counter() - started:.1f} s\n")
            if completed.returncode != 0:
                raise EnvironmentBuildError(f"building the {request.label} environment failed; see {log_path}")
    return chosen


def _uv_steps(request: BuildRequest, config: PipConfiguration | None) -> tuple[list[list[str]], dict[str, str]]:
    uv = uv_binary() or UV
    config = config if config is not None else PipConfiguration.read()
    flags, variables = uv_install_options(config, local_wheels=request.device != "cuda")
    if request.build_constraints:
        flags += ["--build-constraint", str(request.build_constraints)]
    environment = {name: value for name, value in os.environ.items() if not name.startswith("VIRTUAL_ENV")}
    environment.update(variables)
    environment.setdefault("UV_NO_PROGRESS", "1")
    python = str(request.venv / "bin" / "python")
    return ([[uv, "venv", "--quiet", "--python", request.python, str(request.venv)],
             # --compile-bytecode: pip writes each module's .pyc at install, uv only when asked; a cell
             # runs with PYTHONDONTWRITEBYTECODE, so without them every cell would compile its framework's
             # Python source again on import (TensorFlow and Keras: seconds per cell)
             [uv, "pip", "install", "--python", python, "--compile-bytecode", *flags, "-r", str(request.requirements)]],
            environment)


def _pip_steps(request: BuildRequest, config: PipConfiguration | None) -> tuple[list[list[str]], dict[str, str]]:
    """pip reads its configuration itself; only what differs per variant is set here."""
    environment = dict(os.environ)
    if request.device == "cuda":
        environment.pop("PIP_FIND_LINKS", None)  # a local CPU wheel must not stand in for a CUDA build
    if request.build_constraints:
        # reaches pip's isolated sdist builds too, which a requirements file cannot
        environment["PIP_CONSTRAINT"] = " ".join([*(config or PipConfiguration.read()).several("constraint"),
                                                 str(request.build_constraints)])
    python = str(request.venv / "bin" / "python")
    return ([[request.python, "-m", "venv", str(request.venv)],
             [python, "-m", "pip", "install", "--no-input", "-r", str(request.requirements)]], environment)


def build_several(builds: list[Callable[[], object]], *, at_once: int = 2) -> None:
    """Run environment builds `at_once` at a time (an install waits on the network and the disk
    more than on the CPU, so two overlap well even on two cores). Each callable reports its own
    failure; the first exception other than a build error is raised once all have ended."""
    from concurrent.futures import ThreadPoolExecutor

    if len(builds) <= 1 or at_once <= 1:
        for one in builds:
            _run_build(one)
        return
    with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="rosetta-env") as pool:
        futures = [pool.submit(_run_build, one) for one in builds]
    for future in futures:
        future.result()


def _run_build(one: Callable[[], object]) -> None:
    try:
        one()
    except EnvironmentBuildError:
        pass  # recorded by the backend: that framework's cells fail with the reason
