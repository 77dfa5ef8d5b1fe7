"""The local backend: each cell in a fresh subprocess inside its framework's own virtual environment.

Environments are built on first use from the same pinned requirements the image uses, one per
(framework, variant, requirements, Python), and cached. Every cell gets its own HOME and cache
directories, so frameworks' caches (~/.keras, ~/.cache/...) neither leak between runs nor persist.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from orchestrator import environments, host
from orchestrator.backends import (Backend, CellJob, cell_request, collect, gpu_mismatch, inherited_speed_variables, remove_work,
                                   write_cell_document)
from orchestrator.backends.cell_processes import RunningCells, run_in_own_process_group
from orchestrator.backends.contract import unmeasured_cells_for
from orchestrator.backends.options import BackendOptions
from orchestrator.environments import EnvironmentBuildError
from orchestrator.errors import UserError
from orchestrator.frameworks import WORKLOADS_DIR, Framework, Variant
from workloads.common import safe_files
from workloads.common.result import Result

READY_MARKER = ".rosetta-ready"
ENVIRONMENTS_AT_ONCE = 2  # environments built at once before a run (orchestrator/environments.py)
# Variables a local cell inherits from the host besides the speed variables every backend passes
# (orchestrator/backends/__init__.py: SPEED_VARIABLES); everything else is left out so runs are
# reproducible. These describe this host (its PATH, its libraries, its proxies, its GPU numbering)
# and mean nothing inside a container.
_PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
                   "CURL_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
                   "no_proxy", "CUDA_VISIBLE_DEVICES", "ROSETTA_OFFLINE", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")


# What an environment holds beyond its pins, in its folder's name: a change here builds each anew
# (2: every module's bytecode written at install; see environments._uv_steps).
ENVIRONMENT_LAYOUT = "2"


def default_cache_dir() -> Path:
    return Path(os.environ.get("ROSETTA_CACHE_DIR") or Path.home() / ".cache" / "rosetta-bench")


def _host_python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


@functools.lru_cache(maxsize=None)
def find_python(version: str) -> str | None:
    """An interpreter of Python `version` ("3.8") on this host: this one, python3.8 on PATH, or
    pyenv's (whose shims refuse versions that are installed but not selected)."""
    if version == _host_python_version():
        return sys.executable
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(map(str, pyenv_root.glob(f"versions/{version}.*/bin/python{version}")), reverse=True)
    for candidate in filter(None, candidates):
        try:
            answer = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                    capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if answer.returncode == 0 and answer.stdout.strip() == version:
            return candidate
    return None


def _python_for(variant: Variant) -> str:
    """The interpreter a variant's environment is built from."""
    return (find_python(variant.python) if variant.python else None) or sys.executable


class LocalBackend(Backend):
    name = "local"

    def __init__(self, frameworks: dict[str, Framework], *, cache_dir: Path | None = None,
                 python: str | None = None, gpus: str | None = None,
                 log: Callable[[str], None] = print, installer: str | None = None):
        self.frameworks = frameworks
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.python = python
        self.gpus = gpus
        self.log = log
        self._failed_environments: dict[Path, str] = {}
        self._gpus_seen: list[str] | None = None
        self.installer = installer  # uv or pip; None: uv wherever it serves the variant's Python
        self._pip_configuration: environments.PipConfiguration | None = None
        self._running = RunningCells()
        if python and not Path(python).exists() and not shutil.which(python):
            raise UserError(f"--python {python}: no such interpreter; give the path of a Python that has the framework installed")

    # --- environments ---------------------------------------------------------------------------

    def environment_dir(self, variant: Variant, framework: str) -> Path:
        if not variant.requirements.is_file():
            raise UserError(f"{variant.requirements} is missing: every variant needs its pinned requirements")
        digest = hashlib.sha256(ENVIRONMENT_LAYOUT.encode())
        digest.update(variant.requirements.read_bytes())
        if variant.build_constraints:
            digest.update(variant.build_constraints.read_bytes())
        python = _python_for(variant)
        digest.update((sys.version if python == sys.executable else python).encode())
        # named after the framework whose environment it is: r-keras shares keras-tf's (same requirements)
        owner = self.frameworks[framework].environment_name if framework in self.frameworks else framework
        return self.cache_dir / "venvs" / f"{owner}-{variant.name}-{digest.hexdigest()[:12]}"

    def interpreter(self, framework: str, variant_name: str) -> str:
        """The Python that runs this framework's cells, building its environment on first use."""
        if self.python:
            return self.python
        variant = self.frameworks[framework].variant(variant_name)
        venv = self.environment_dir(variant, framework)
        python = venv / "bin" / "python"
        if venv in self._failed_environments:
            raise EnvironmentBuildError(self._failed_environments[venv])
        if (venv / READY_MARKER).is_file():
            return str(python)
        venv.parent.mkdir(parents=True, exist_ok=True)
        with open(venv.parent / f".{venv.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be building the same environment
            if not (venv / READY_MARKER).is_file():
                self._build_environment(venv, variant, framework)
        return str(python)

    def _build_environment(self, venv: Path, variant: Variant, framework: str) -> None:
        if venv.exists():
            shutil.rmtree(venv)  # a half-built environment from an interrupted run
        log_path = venv.parent / f"{venv.name}.log"
        request = environments.BuildRequest(venv=venv, python=_python_for(variant), requirements=variant.requirements,
                                            device=variant.device, build_constraints=variant.build_constraints,
                                            label=f"{framework}/{variant.name}")
        self.log(f"building the {framework}/{variant.name} environment from {variant.requirements.name} "
                 f"(first use only; log: {log_path})")
        started = time.perf_counter()
        try:
            installer = environments.build(request, log_path, installer=self.installer, config=self._pip_config())
        except environments.EnvironmentBuildError as error:
            self._failed_environments[venv] = str(error)
            raise
        (venv / READY_MARKER).write_text(variant.requirements.read_text())
        self.log(f"built the {framework}/{variant.name} environment with {installer} "
                 f"in {time.perf_counter() - started:.0f} s")

    def _pip_config(self) -> environments.PipConfiguration:
        """pip's configuration, read once per run (every environment is built from the same)."""
        if self._pip_configuration is None:
            self._pip_configuration = environments.PipConfiguration.read()
        return self._pip_configuration

    def prepare(self, jobs: list[CellJob]) -> None:
        """Build the environments these cells need and lack, two at a time, before the first cell
        starts (a build never overlaps a measured cell). A failed build is remembered: its cells fail
        with the reason when they come up."""
        if self.python:
            return
        wanted: dict[Path, tuple[str, str]] = {}
        for job in jobs:
            framework = self.frameworks[job.cell.framework]
            if not framework.language.uses_python_environment:
                continue
            venv = self.environment_dir(framework.variant(job.cell.variant), job.cell.framework)
            if not (venv / READY_MARKER).is_file():
                wanted.setdefault(venv, (job.cell.framework, job.cell.variant))
        if len(wanted) > 1:
            self.log(f"building {len(wanted)} environments, {ENVIRONMENTS_AT_ONCE} at a time")
        environments.build_several([functools.partial(self.interpreter, *pair) for pair in wanted.values()],
                                   at_once=ENVIRONMENTS_AT_ONCE)

    # --- cells ----------------------------------------------------------------------------------

    def cells_at_once(self, *, measured: bool) -> int:
        """A measured cell runs alone; cells that measure nothing run one per CPU, up to
        UNMEASURED_CELLS_AT_ONCE (each waited on by a thread of ConcurrentDispatch's)."""
        return 1 if measured else unmeasured_cells_for(os.cpu_count())

    def stop_cells(self) -> None:
        self._running.kill_all()

    def gpus_given(self) -> list[str] | None:
        """--gpus (which this backend sets as CUDA_VISIBLE_DEVICES), else the CUDA_VISIBLE_DEVICES a
        cell inherits, else every GPU. Indices are NVML's: set CUDA_DEVICE_ORDER=PCI_BUS_ID for
        CUDA's numbering to match it."""
        text = self.gpus if self.gpus is not None else os.environ.get("CUDA_VISIBLE_DEVICES")
        indices = [part.strip() for part in (text or "").split(",") if part.strip()]
        return indices or None

    def unsupported_reason(self, cell, variant: Variant) -> str | None:
        language = self.frameworks[cell.framework].language
        if language.program and not shutil.which(language.program):
            return language.missing_reason()  # R or Julia not installed on this host
        if language.uses_python_environment and (problem := self.python_mismatch(variant)):
            return problem
        if variant.device != "cuda":
            return None
        if not self._host_gpus():
            return "no GPU runtime on this host (nvidia-smi lists no GPU)"
        return gpu_mismatch(variant, host.gpu_compute_capabilities(), self.gpus)

    def python_mismatch(self, variant: Variant) -> str | None:
        """A variant pinned to another Python (CNTK's 3.6, an old CUDA base's 3.8) gets its
        environment from that Python when the host has it (pythonX.Y on PATH, or pyenv's);
        otherwise its image, or --python, can run it."""
        if self.python or not variant.python or find_python(variant.python):
            return None
        here = f"{sys.version_info.major}.{sys.version_info.minor}"
        return (f"defined, not run on this host: the {variant.name} variant needs Python {variant.python} "
                f"(this host runs {here} and has no python{variant.python}); run it in its image "
                f"(--backend docker), install that Python, or pass --python")

    def _host_gpus(self) -> list[str]:
        if self._gpus_seen is None:
            self._gpus_seen = host.gpus()
        return self._gpus_seen

    def run_cell(self, job: CellJob) -> Result:
        cell = job.cell
        language = self.frameworks[cell.framework].language
        python = None
        try:
            if language.uses_python_environment:
                python = self.interpreter(cell.framework, cell.variant)
        except EnvironmentBuildError as error:
            return Result(cell=cell, status="failed", reason=str(error))
        work = job.work_dir
        safe_files.remove_tree(work)  # left behind by a run killed outright
        try:
            (work / "home").mkdir(parents=True)
            (work / "tmp").mkdir()
            source = work / "source"
            source.mkdir()
            (source / "workloads").symlink_to(WORKLOADS_DIR)  # only the workloads package is importable
            out = work / "result.json"
            request = cell_request(cell, device=job.device, data_dir=str(job.data_dir), out=str(out),
                                   parity=job.parity, onnx_model=job.onnx_model,
                                   export_onnx=str(job.export_dir) if job.export_dir else None, threads=job.threads)
            command = language.command_line(python=python or "", workloads=str(source / "workloads"))
            command += ["--cell", str(write_cell_document(request, work))]
            job.log_path.parent.mkdir(parents=True, exist_ok=True)
            with safe_files.open_no_follow(job.log_path) as log:
                exit_code = run_in_own_process_group(command, timeout=job.timeout, running=self._running, stdout=log,
                                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=work,
                                                     env=self._cell_environment(work, source, job))
            result = collect(cell, exit_code=exit_code, result_file=out, log_path=job.log_path,
                             timed_out_after=job.timeout if exit_code is None else None)
        finally:  # ok, failed, timed out or interrupted (Ctrl-C, SIGTERM, SIGHUP): no work folder stays
            remove_work(self.log, work)
        result.provenance.interpreter = result.provenance.interpreter or python or language.program
        return result

    def _cell_environment(self, work: Path, source: Path, job: CellJob) -> dict[str, str]:
        environment = {name: os.environ[name] for name in _PASSED_THROUGH if name in os.environ}
        environment.update(inherited_speed_variables())
        home, temporary = work / "home", work / "tmp"
        environment.update(
            HOME=str(home), TMPDIR=str(temporary), XDG_CACHE_HOME=str(home / ".cache"),
            MPLCONFIGDIR=str(home / ".config" / "matplotlib"), PYTHONPATH=str(source),
            PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
            ROSETTA_DATA_DIR=str(job.data_dir))
        if job.git_revision:
            environment["ROSETTA_GIT_REVISION"] = job.git_revision
        if self.gpus is not None:
            environment["CUDA_VISIBLE_DEVICES"] = self.gpus
        return environment


def start(frameworks: dict, options: BackendOptions, log: Callable[[str], None]) -> LocalBackend:
    """The registry's factory (orchestrator/backends/registry.py)."""
    python = interpreter_path(options.python) if options.python else None
    return LocalBackend(frameworks, cache_dir=options.cache_dir, python=python, gpus=options.gpus, log=log)


def interpreter_path(python: str) -> str:
    """--python as an absolute path to an executable file, or one line saying what is wrong with it.

    Cells run in their own working directory, so a relative path would name another file (or
    none) there; a bare name (python3.8) is looked up on PATH now, once."""
    if os.sep not in python:
        found = shutil.which(python)
        if not found:
            raise UserError(f"--python {python}: no such interpreter on PATH; give the absolute path of a Python "
                            f"that has the framework installed")
        return os.path.abspath(found)
    path = Path(python)
    if not path.is_absolute():
        raise UserError(f"--python {python}: a relative path; cells run in another working directory, so give "
                        f"the absolute path ({Path.cwd() / path})")
    if not path.exists():
        raise UserError(f"--python {python}: no such interpreter; give the path of a Python that has the "
                        f"framework installed")
    if path.is_dir():
        raise UserError(f"--python {python}: a folder, not an interpreter; give the Python inside it "
                        f"(e.g. {path / 'bin' / 'python'})")
    if not path.is_file() or not os.access(path, os.X_OK):
        raise UserError(f"--python {python}: not an executable file; give the path of a Python interpreter "
                        f"(or make it executable: chmod +x)")
    return python
