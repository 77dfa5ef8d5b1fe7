"""What of a local wheelhouse (--wheelhouse, default $PIP_FIND_LINKS) goes into an image's build
context, and how it is read.

The folder is the user's, shared with pip for any other work, so anything may lie in it
(docs/RUN-GUARANTEES.md, bad input). Each `*.whl` entry is decided by its name first, then, only
for a wheel the build would take, by what it is:

- A name that is no wheel file name (letters, digits and `_.+!-` only, as PEP 427 escapes every
  other character, and what `packaging.utils.parse_wheel_filename` reads), or not UTF-8: skipped
  with a one-line warning. pip ignores such a file in a find-links folder too, so the image gets
  the wheels pip would have taken; the file is never opened.
- A wheel of a package the requirements do not name, of another version, or a CPU build offered
  to a CUDA variant: skipped silently, as pip would not pick it either; never opened.
- A wheel the build would take that is a link, a folder, a FIFO or a device, or larger than
  LARGEST_WHEEL: refused in one line. It was put there for this build, and building without it
  would silently install another build of the package from the index (a local wheel is usually a
  special build: PyTorch's CPU wheel); a link is never followed into a build context (it would copy
  a file from outside the folder the user named), a FIFO would block the build, and the context is
  held in memory whole.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from orchestrator.errors import UserError
from workloads.common import safe_files
from workloads.common.strict_json import quoted

# The largest wheel copied into a context: CUDA builds of PyTorch are about 2.5 GB; anything
# larger is no wheel worth holding in memory while the context is assembled.
LARGEST_WHEEL = 4 << 30
_WHEEL_NAME = re.compile(r"[A-Za-z0-9_.+!-]{1,250}\.whl", re.ASCII)
Warn = Callable[[str], None]


@dataclass(frozen=True)
class LocalWheel:
    """A wheel chosen for a build context: a regular file of `size` bytes, read without a link."""

    path: Path
    size: int

    def read(self) -> bytes:
        try:
            return safe_files.read_bytes_bounded(self.path, LARGEST_WHEEL)
        except OSError as error:  # swapped for a link, a FIFO or a larger file since it was chosen
            raise UserError(f"--wheelhouse: {self.path.name} cannot be copied into the build context "
                            f"({error.strerror or error}); put the wheel file itself there") from None


def matching_wheels(wheelhouse: Path | None, pins: dict[str, str], *, cuda: bool,
                    warn: Warn | None = None) -> list[LocalWheel]:
    """The wheels in `wheelhouse` the build takes: of a package `pins` names (canonical name ->
    pinned version, "" for any), of that version, and not a CPU build when `cuda`; sorted by name.
    What is skipped and why: see the module's docstring."""
    if not wheelhouse:
        return []
    try:
        names = sorted(entry.name for entry in os.scandir(wheelhouse) if entry.name.endswith(".whl"))
    except OSError as error:
        raise UserError(f"--wheelhouse {wheelhouse}: cannot be read ({error.strerror or error}); give a folder "
                        "of .whl files") from None
    chosen = []
    for name in names:
        parsed = _parse(name)
        if isinstance(parsed, str):
            if warn:
                warn(f"--wheelhouse {wheelhouse}: skipped {quoted(name, 80)}: not a wheel file name ({parsed}); "
                     "pip ignores it too")
            continue
        project, version = parsed
        if project not in pins or (cuda and version.local == "cpu") or not _is_pinned(version, pins[project]):
            continue
        chosen.append(_checked(wheelhouse / name))
    return chosen


def _parse(name: str) -> tuple[str, Version] | str:
    """(canonical project name, version), or why `name` is no wheel file name."""
    if not _WHEEL_NAME.fullmatch(name):
        return "only letters, digits and _.+!- may name a wheel"
    try:
        project, version, _, _ = parse_wheel_filename(name)
    except (InvalidWheelFilename, InvalidVersion) as error:
        return " ".join(str(error).split())[:120]
    return canonicalize_name(project), version


def _is_pinned(version: Version, pin: str) -> bool:
    """Whether a wheel's version is the pinned one ("" pins none); a local label the pin lacks
    does not matter: torch 2.6.0+cpu is the pin torch==2.6.0."""
    if not pin:
        return True
    try:
        pinned = Version(pin)
    except InvalidVersion:
        return False
    return version == pinned or (not pinned.local and Version(version.public) == pinned)


def _checked(path: Path) -> LocalWheel:
    """The wheel at `path` if it is a regular file (not a link) of at most LARGEST_WHEEL bytes."""
    fix = "put the wheel file itself there, or remove it"
    try:
        info = os.lstat(path)
    except OSError as error:
        raise UserError(f"--wheelhouse: {path.name} cannot be read ({error.strerror or error}); {fix}") from None
    if stat.S_ISLNK(info.st_mode):
        raise UserError(f"--wheelhouse: {path.name} is a symbolic link, which is never followed into a build "
                        f"context; {fix}")
    if not stat.S_ISREG(info.st_mode):
        what = "a folder" if stat.S_ISDIR(info.st_mode) else "a FIFO or device"
        raise UserError(f"--wheelhouse: {path.name} is {what}, not a wheel file; {fix}")
    if info.st_size > LARGEST_WHEEL:
        raise UserError(f"--wheelhouse: {path.name} is {info.st_size} bytes, larger than {LARGEST_WHEEL}; {fix}")
    return LocalWheel(path, info.st_size)
