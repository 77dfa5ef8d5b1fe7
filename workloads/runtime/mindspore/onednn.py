"""oneDNN's instruction-set cap for MindSpore's CPU kernels: the framework option `onednn_max_cpu_isa`.

On the CPU, MindSpore 2.10 hands oneDNN its convolution weights in the plain OIHW layout. On a
CPU with AVX-512, oneDNN 3.10 then picks a wrapper whose inner kernel is its reference (scalar)
convolution: 3x3 and 7x7 convolutions run at about 0.3 GMAC/s, 50-100 times slower than the
im2col + GEMM kernel it picks when its instruction set is capped at AVX2 (about 20 GMAC/s on 2
cores; 1x1 convolutions and matmuls run as fast either way). So the framework option
`onednn_max_cpu_isa` (workloads/common/options.py: avx2, the default, or all) sets oneDNN's own
switch ONEDNN_MAX_CPU_ISA, overriding any inherited value, before the first oneDNN primitive
exists (the package's select_device calls `set_onednn_isa`); oneDNN's effective
instruction set is then read back from its library and recorded (a cap that did not take effect
fails the cell). FAIRNESS.md: explicit-options.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

import mindspore as ms

from workloads.common.harness import Run

# The onednn_max_cpu_isa option's values as oneDNN's ONEDNN_MAX_CPU_ISA spells them (module docstring).
ONEDNN_ISA = {"avx2": "AVX2", "all": "ALL"}
# dnnl_cpu_isa_t: each instruction set's bits include every older one's (checked: AVX2 0x7, AVX-512 0x27).
_ONEDNN_ISA_BITS = {0x1: "SSE41", 0x3: "AVX", 0x7: "AVX2", 0xF: "AVX2_VNNI", 0x1F: "AVX2_VNNI_2",
                    0x27: "AVX512_CORE", 0x67: "AVX512_CORE_VNNI", 0xE7: "AVX512_CORE_BF16"}
_AVX2_BITS = 0x7


def onednn_effective_isa() -> int | None:
    """oneDNN's instruction set for this process (dnnl_get_effective_cpu_isa, from the libdnnl MindSpore
    loads), or None where that library is not found. The first read fixes it: call it only once
    ONEDNN_MAX_CPU_ISA is set."""
    library = Path(ms.__file__).parent / "lib" / "libdnnl.so.3"
    if not library.is_file():
        return None
    function = ctypes.CDLL(str(library)).dnnl_get_effective_cpu_isa
    function.restype = ctypes.c_int
    return int(function())


def set_onednn_isa(run: Run) -> dict:
    """Set ONEDNN_MAX_CPU_ISA from the onednn_max_cpu_isa option (an inherited value does not win), read
    oneDNN's effective instruction set back, and return what to record. Before the first oneDNN primitive."""
    chosen = run.option("onednn_max_cpu_isa")
    inherited = os.environ.get("ONEDNN_MAX_CPU_ISA")
    os.environ["ONEDNN_MAX_CPU_ISA"] = ONEDNN_ISA[chosen]
    effective = onednn_effective_isa()
    named = "unknown (libdnnl not found)" if effective is None else \
        f"{_ONEDNN_ISA_BITS.get(effective, 'unnamed')} ({effective:#x})"
    if chosen == "avx2" and effective is not None and effective & ~_AVX2_BITS:
        raise RuntimeError(f"oneDNN runs {named} although ONEDNN_MAX_CPU_ISA=AVX2 was set: a oneDNN primitive "
                           f"was made before select_device, so the onednn_max_cpu_isa option came too late")
    extras = {"onednn_max_cpu_isa": f"{ONEDNN_ISA[chosen]} (option onednn_max_cpu_isa={chosen})",
              "onednn_effective_isa": named}
    if inherited is not None and inherited != ONEDNN_ISA[chosen]:
        extras["onednn_max_cpu_isa_inherited"] = f"{inherited} (overridden by the option)"
    return extras
