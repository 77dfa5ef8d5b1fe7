"""What every command shares at run time: the console it reports on and its exit codes."""
from rich.console import Console

from orchestrator.errors import EXIT_CELLS_FAILED, EXIT_INTERRUPTED, EXIT_USER_ERROR  # noqa: F401 (commands read them here)

console = Console(stderr=True, highlight=False, soft_wrap=True)  # progress and messages; tables go to stdout

LEFT_OUT_SHOWN = 20  # files named one per line; the rest counted


def left_out(unreadable) -> int:
    """Name each cell file a command could not use (results.Unreadable: its path and why), one line
    each, and return the exit code that says so: EXIT_CELLS_FAILED when any was left out, else 0.
    What the rest holds is still rendered (docs/RUN-GUARANTEES.md, the trust model)."""
    for item in list(unreadable)[:LEFT_OUT_SHOWN]:
        console.print(f"left out {item.path}: {item.reason}", markup=False)
    if len(unreadable) > LEFT_OUT_SHOWN:
        console.print(f"... and {len(unreadable) - LEFT_OUT_SHOWN} more file(s) left out", markup=False)
    return EXIT_CELLS_FAILED if unreadable else 0
