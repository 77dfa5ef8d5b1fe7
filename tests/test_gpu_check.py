"""benchmarks/gpu_check.py on a machine without a GPU: it runs its CUDA cells through the real
`run-matrix --backend local --python`, names every cell and says plainly that no CUDA path ran."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import host

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(host.gpus() != [], reason="this host has a GPU: the check would really run its cells")
def test_without_a_gpu_every_cell_is_named_and_no_cuda_path_ran(tmp_path):
    completed = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--frameworks", "pytorch,jax",
                                "--workloads", "cnn", "--precisions", "fp32,bf16", "--python", sys.executable,
                                "--results-dir", str(tmp_path / "check")],
                               cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = completed.stdout
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "host GPUs: none found" in out
    for cell in ("pytorch/cu130 cnn fp32", "pytorch/cu130 cnn bf16", "jax/cu129 cnn fp32", "jax/cu129 cnn bf16"):
        rows = [line for line in out.splitlines() if line.startswith(cell + " ")]  # one per mode
        assert rows and all("unsupported: no GPU runtime on this host" in row for row in rows), rows
    assert re.search(r"no CUDA path ran: all \d+ cell\(s\) were unsupported \(no GPU on this host\)", out), out
    assert "--backend local --python " + sys.executable in out  # through the harness's own --python
    assert sorted(p.name for p in (tmp_path / "check").iterdir()) == ["jax", "pytorch"]
    required = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--frameworks", "jax",
                               "--workloads", "cnn", "--precisions", "tf32", "--require-cuda",
                               "--results-dir", str(tmp_path / "again")],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert required.returncode == 1 and "no CUDA path ran" in required.stdout


def test_bad_arguments_are_one_line(tmp_path):
    completed = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--frameworks", "mxnet"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2
    assert completed.stderr.strip() == "error: --frameworks 'mxnet': choose from pytorch, jax"
