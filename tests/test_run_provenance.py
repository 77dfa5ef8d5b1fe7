"""What the host records about a run beside the cells: each distinct package list once
(packages/<sha256>.txt) and its GPUs' facts (run.json, through NVML when nvidia-ml-py is there)."""
from __future__ import annotations

import hashlib
import os
import sys
import types

import pytest

from orchestrator.run_settings import RunSettings
from orchestrator.backends.contract import Backend
from orchestrator import frameworks, host
from orchestrator.runner import packages_path, run_cells
from orchestrator.results import read_cell_file
from workloads.common import provenance
from workloads.common.result import Cell, Result
from support.records import measured

REGISTRY = frameworks.discover()
NUMPY_ONLY = ["numpy==2.1.0", "pip==24.0"]
WITH_TORCH = ["numpy==2.1.0", "pip==24.0", "torch==2.9.0"]


class PackagesBackend(Backend):
    """Every cell 'runs' ok and reports the package list its framework's environment holds."""

    name = "packages"

    def __init__(self, lists: dict[str, list[str]]):
        self.lists = lists

    def run_cell(self, job):
        result = measured(Result(cell=job.cell))
        result.provenance.packages = list(self.lists[job.cell.framework])
        result.provenance.packages_sha256 = provenance.packages_digest(result.provenance.packages)
        return result


def cells(*names: str) -> list[Cell]:
    return [Cell(name, workload, profile="smoke", data="synthetic") for name in names for workload in ("cnn", "gru")]


def test_each_distinct_package_list_is_written_once_and_stays_in_the_cell(tmp_path):
    backend = PackagesBackend({"jax": NUMPY_ONLY, "pytorch": WITH_TORCH, "tensorflow": NUMPY_ONLY})
    run_cells(cells("jax", "pytorch", "tensorflow"), backend, REGISTRY, RunSettings(results_dir=tmp_path / "run",
                                                                                    data_dir=tmp_path / "data"))
    written = sorted((tmp_path / "run" / "packages").iterdir())
    assert len(written) == 2  # six cells, two environments
    for listing in (NUMPY_ONLY, WITH_TORCH):
        text = "\n".join(listing) + "\n"
        digest = hashlib.sha256(text.encode()).hexdigest()
        path = tmp_path / "run" / "packages" / f"{digest}.txt"
        assert path.read_text() == text and path in written
        assert path.stat().st_mode & 0o777 == 0o644
        assert packages_path(tmp_path / "run", f"sha256:{digest}") == path
    result = read_cell_file(tmp_path / "run" / "cells" / f"{cells('pytorch')[0].key}.json")
    assert result.provenance.packages == WITH_TORCH  # the list stays in the cell's JSON too
    assert result.provenance.packages_sha256 == provenance.packages_digest(WITH_TORCH)


def test_a_link_planted_at_a_package_file_is_replaced_never_written_through(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    digest = hashlib.sha256(("\n".join(NUMPY_ONLY) + "\n").encode()).hexdigest()
    (tmp_path / "run" / "packages").mkdir(parents=True)
    os.symlink(target, tmp_path / "run" / "packages" / f"{digest}.txt")
    run_cells(cells("jax"), PackagesBackend({"jax": NUMPY_ONLY}), REGISTRY, RunSettings(results_dir=tmp_path / "run",
                                                                                        data_dir=tmp_path / "data",
                                                                                        force=True))
    assert target.read_text() == "keep me\n"
    written = tmp_path / "run" / "packages" / f"{digest}.txt"
    assert not written.is_symlink() and written.read_text() == "\n".join(NUMPY_ONLY) + "\n"


def test_a_digest_that_does_not_match_the_list_never_names_the_file(tmp_path):
    class Lying(PackagesBackend):
        def run_cell(self, job):
            result = super().run_cell(job)
            result.provenance.packages_sha256 = "sha256:../../escape"
            return result

    run_cells(cells("jax")[:1], Lying({"jax": NUMPY_ONLY}), REGISTRY, RunSettings(results_dir=tmp_path / "run",
                                                                                  data_dir=tmp_path / "data"))
    digest = provenance.packages_digest(NUMPY_ONLY)
    assert [p.name for p in (tmp_path / "run" / "packages").iterdir()] == [f"{digest[7:]}.txt"]
    result = read_cell_file(tmp_path / "run" / "cells" / f"{cells('jax')[0].key}.json")
    assert result.provenance.packages_sha256 == digest
    assert result.provenance.extras["packages_sha256_recorded"] == "sha256:../../escape"


def test_a_cell_without_a_package_list_writes_nothing(tmp_path):
    run_cells(cells("jax")[:1], PackagesBackend({"jax": []}), REGISTRY, RunSettings(results_dir=tmp_path / "run",
                                                                                    data_dir=tmp_path / "data"))
    assert not (tmp_path / "run" / "packages").exists()


# --- the host's GPUs ------------------------------------------------------------------------------

class NVMLError(Exception):
    pass


def fake_pynvml(*, init_fails: bool = False) -> types.ModuleType:
    """pynvml's calls as nvidia-ml-py answers them for one H200 (ECC unsupported, to show a gap)."""
    module = types.ModuleType("pynvml")
    module.NVMLError, module.NVML_CLOCK_SM, module.NVML_CLOCK_MEM = NVMLError, 1, 2
    module.shut_down = False

    def init():
        if init_fails:
            raise NVMLError("NVML Shared Library Not Found")

    def unsupported(*_):
        raise NVMLError("Not Supported")

    module.nvmlInit = init
    module.nvmlShutdown = lambda: setattr(module, "shut_down", True)
    module.nvmlSystemGetDriverVersion = lambda: "570.124.06"
    module.nvmlSystemGetCudaDriverVersion = lambda: 12080
    module.nvmlDeviceGetCount = lambda: 1
    module.nvmlDeviceGetHandleByIndex = lambda index: f"handle{index}"
    module.nvmlDeviceGetName = lambda handle: b"NVIDIA H200"  # bytes in older releases
    module.nvmlDeviceGetUUID = lambda handle: "GPU-1234"
    module.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=143771 * 2 ** 20)
    module.nvmlDeviceGetMaxClockInfo = lambda handle, clock: {1: 1980, 2: 3201}[clock]
    module.nvmlDeviceGetClockInfo = lambda handle, clock: 345
    module.nvmlDeviceGetPowerManagementLimit = lambda handle: 700000  # milliwatts
    module.nvmlDeviceGetPersistenceMode = lambda handle: 1
    module.nvmlDeviceGetEccMode = unsupported
    module.nvmlDeviceGetMigMode = lambda handle: (0, 0)
    module.nvmlDeviceGetCudaComputeCapability = lambda handle: (9, 0)
    return module


def test_gpu_facts_come_from_nvml_when_it_answers(monkeypatch):
    module = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    assert host.gpu_facts() == [{
        "index": 0, "name": "NVIDIA H200", "uuid": "GPU-1234", "memory_total_mib": 143771,
        "sm_clock_max_mhz": 1980, "memory_clock_max_mhz": 3201, "sm_clock_mhz": 345, "power_limit_w": 700.0,
        "persistence_mode": "Enabled", "mig_mode": "Disabled", "compute_capability": "9.0",
        "driver": "570.124.06", "cuda_driver_version": "12.8", "source": "nvml"}]  # no ecc_mode: not supported
    assert module.shut_down


def test_gpu_facts_fall_back_to_nvidia_smi_then_to_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_fails=True))  # no driver library
    monkeypatch.setattr(host.shutil, "which", lambda name: "/usr/bin/nvidia-smi")

    def smi(command, **_):
        if command[1] == "-L":
            return types.SimpleNamespace(returncode=0, stdout="GPU 0: NVIDIA H200 (UUID: GPU-1234)\n")
        assert command[1].startswith("--query-gpu=name,uuid,memory.total")
        return types.SimpleNamespace(returncode=0, stdout="NVIDIA H200, GPU-1234, 143771, 1980, 3201, 345, 700.00, "
                                                          "Enabled, [N/A], Disabled, 9.0, 570.124.06\n")

    monkeypatch.setattr(host.subprocess, "run", smi)
    [gpu] = host.gpu_facts()
    assert gpu["source"] == "nvidia-smi" and gpu["name"] == "NVIDIA H200" and gpu["power_limit_w"] == "700.00"
    assert "ecc_mode" not in gpu and gpu["driver"] == "570.124.06"
    monkeypatch.setattr(host.shutil, "which", lambda name: None)  # no driver at all
    assert host.gpu_facts() == []


@pytest.mark.skipif(host.gpus() != [], reason="this host has a GPU")
def test_without_a_gpu_the_facts_are_empty():
    assert host.gpu_facts() == []


def test_doctor_shows_the_gpu_facts(monkeypatch, capsys):
    from orchestrator.__main__ import main

    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    monkeypatch.setattr(host, "docker_engine", lambda: host.DockerStatus(False, "no Docker engine answered"))
    assert main(["doctor"]) == 0
    assert ("GPU 0: NVIDIA H200, 143771 MiB, compute capability 9.0, 700.0 W limit, persistence Enabled, "
            "MIG Disabled, driver 570.124.06 (nvml)") in capsys.readouterr().out
