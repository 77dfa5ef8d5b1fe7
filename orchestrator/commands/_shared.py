"""What every command shares at run time: the console it reports on and its exit codes."""
from rich.console import Console

console = Console(stderr=True, highlight=False, soft_wrap=True)  # progress and messages; tables go to stdout

EXIT_CELLS_FAILED = 1  # the command ran, but a cell (or a check) failed
EXIT_USER_ERROR = 2  # a UserError: the message names the fix
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM
