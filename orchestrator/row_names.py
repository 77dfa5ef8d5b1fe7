"""A row's name: one rule for every table that names a framework's rows (the report and its grid,
`compare`, the parity table), so that one row reads the same wherever it appears."""
from __future__ import annotations

from workloads.common.result import CANONICAL_INIT


def row_name(framework, options, init, kernel: str = "", mode: str = "") -> str:
    """"pytorch [compiled]", "tensorflow [graph, channels_last=on]", "pytorch [init=framework]",
    "pytorch [eager, gru=cudnn]": a row's name says how it ran, its mode first (a result from before
    modes were declared names none), the GRU's kernel included (FAIRNESS.md: gru-kernel-named)."""
    how = ([mode] if mode else []) + ([options] if options else [])
    if init and init != CANONICAL_INIT:
        how.append(f"init={init}")
    if kernel:
        how.append(f"gru={kernel}")
    return f"{framework} [{', '.join(how)}]" if how else str(framework)
