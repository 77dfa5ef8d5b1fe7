"""Download progress: the callback's shape, and the plain stderr bar used when none is given."""
import sys
import time
from typing import Callable, Optional

# Called with (bytes received so far, total bytes or None when the server does not say).
ProgressCallback = Callable[[int, Optional[int]], None]


class TextProgressBar:
    """A plain stderr progress bar, redrawn at most a few times a second."""

    def __init__(self, label: str, width: int = 30):
        self.label = label
        self.width = width
        self.last_draw = 0.0

    def __call__(self, done: int, total: Optional[int]) -> None:
        finished = total is not None and done >= total
        now = time.monotonic()
        if not finished and now - self.last_draw < 0.2:
            return
        self.last_draw = now
        if total:
            filled = int(self.width * min(done, total) / total)
            line = (f"\r{self.label} [{'#' * filled}{' ' * (self.width - filled)}] "
                    f"{100 * done / total:3.0f}% {done / 1e6:.1f}/{total / 1e6:.1f} MB")
        else:
            line = f"\r{self.label} {done / 1e6:.1f} MB"
        sys.stderr.write(line + ("\n" if finished else ""))
        sys.stderr.flush()
