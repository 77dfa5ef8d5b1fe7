"""Are a variant's pins installable where its image runs? Checked without building the image.

Many variants cannot be built on a given host: their base (NVIDIA's CUDA images, an old Ubuntu) is not
reachable, or their Python is not the host's. `check-pins` asks pip, on the host, to find every pinned
distribution for the variant's Python and its base's glibc (`pip install --dry-run --no-deps
--python-version X --platform manylinux_...`), then checks the pins against each other from the
distributions' own metadata: every dependency they declare for that Python is pinned too, at a version
they accept. Wheels are required; a pin that has only a source distribution for that target is
reported (the image build would have to compile it). It needs the package index; where the index
serves no separate metadata file pip downloads the wheels themselves.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from orchestrator.frameworks import Framework, Variant

# glibc of the bases the images use (what manylinux wheels they accept); an unknown base is taken
# as the oldest manylinux2014 system, so the check errs towards refusing a wheel
BASE_GLIBC = (
    (r"ubuntu:?18\.04", (2, 27)),
    (r"ubuntu:?20\.04|bullseye", (2, 31)),
    (r"ubuntu:?22\.04", (2, 35)),
    (r"bookworm", (2, 36)),
    (r"ubuntu:?24\.04", (2, 39)),
    (r"trixie", (2, 41)),
)
OLDEST_GLIBC = (2, 17)
UNREACHABLE = re.compile(r"Failed to establish a new connection|Name or service not known|Could not fetch URL|"
                         r"Read timed out|Connection refused")
NO_DISTRIBUTION = re.compile(r"No matching distribution found for ([A-Za-z0-9_.\-]+)")


@dataclass
class PinCheck:
    framework: str
    variant: str
    python: str
    glibc: tuple[int, int]
    problems: list[str] = field(default_factory=list)  # the image would not build as pinned
    warnings: list[str] = field(default_factory=list)  # it would build, less reproducibly or slower
    pins: int = 0
    unchecked: str | None = None  # why pip could not answer (an index out of reach), if it could not

    @property
    def ok(self) -> bool:
        return not self.problems and not self.unchecked


def base_glibc(base_image: str | None) -> tuple[int, int]:
    for pattern, glibc in BASE_GLIBC:
        if base_image and re.search(pattern, base_image):
            return glibc
    return OLDEST_GLIBC


def platform_tags(glibc: tuple[int, int]) -> list[str]:
    """Every Linux x86_64 wheel platform a system with this glibc accepts (pip takes no range)."""
    major, minor = glibc
    tags = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
    return tags + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]


def pinned(requirements: Path) -> dict[str, str]:
    """name -> version of each `name==version` line (options such as --extra-index-url are pip's)."""
    pins = {}
    for line in requirements.read_text().splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        requirement = Requirement(line)
        versions = [s.version for s in requirement.specifier if s.operator == "=="]
        pins[canonicalize_name(requirement.name)] = versions[0] if versions else ""
    return pins


def marker_environment(python: str) -> dict[str, str]:
    """The environment markers of CPython `python` on Linux x86_64, whatever the host runs."""
    environment = default_environment()
    environment.update(python_version=python, python_full_version=f"{python}.0", implementation_name="cpython",
                       implementation_version=f"{python}.0", platform_python_implementation="CPython",
                       os_name="posix", sys_platform="linux", platform_system="Linux", platform_machine="x86_64")
    return environment


def pip_command(requirements: Path, python: str, glibc: tuple[int, int], scratch: Path,
                source_builds: set[str]) -> list[str]:
    """pip's --target is required with --platform even in a dry run; nothing is written there."""
    # --ignore-requires-python: pip 23 compares some distributions' Requires-Python with the host's
    # Python, not --python-version's; check_variant compares them with the target's itself
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
               "--ignore-requires-python",
               "--quiet", "--report", str(scratch / "report.json"), "--target", str(scratch / "target"), "--implementation", "cp", "--python-version", python,
               "--only-binary=:all:"]
    for name in sorted(source_builds):
        command += ["--no-binary", name]
    for tag in platform_tags(glibc):
        command += ["--platform", tag]
    return command + ["-r", str(requirements)]


def check_variant(framework: Framework, variant: Variant, run=subprocess.run) -> PinCheck:
    python = variant.python or framework.python or f"{sys.version_info.major}.{sys.version_info.minor}"
    result = PinCheck(framework.name, variant.name, python, base_glibc(variant.base_image))
    if not framework.language.uses_python_environment:  # Julia's Project.toml: pip has nothing to check
        result.unchecked = (f"{framework.language.name}'s pins ({variant.requirements.name}) are not pip's; "
                            "its own package manager checks them when the image is built")
        return result
    pins = pinned(variant.requirements)
    result.pins = len(pins)
    # a constraints file in the host's pip configuration is the host's, not the image's; the rest of
    # it (the CA bundle, index mirrors) is how this host reaches the index, so it stays
    environment = {**os.environ, "PIP_CONSTRAINT": os.devnull}
    source_builds: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="rosetta-pins-") as scratch:
        while True:
            completed = run(pip_command(variant.requirements, python, result.glibc, Path(scratch), source_builds),
                            capture_output=True, text=True, env=environment, check=False)
            if completed.returncode == 0:
                break
            if UNREACHABLE.search(completed.stderr):
                indexes = [line.split()[-1] for line in variant.requirements.read_text().splitlines()
                           if line.startswith(("--index-url", "--extra-index-url", "-i "))]
                result.unchecked = ("a package index did not answer from this host"
                                    + (f" ({', '.join(indexes)})" if indexes else "") + ": run check-pins where it is reachable")
                return result
            missing = NO_DISTRIBUTION.search(completed.stderr)
            name = canonicalize_name(re.split(r"[=<>!~\[;]", missing.group(1))[0]) if missing else None
            if name and name in pins and name not in source_builds:
                source_builds.add(name)  # no wheel: is there a source distribution at least?
                continue
            errors = [line for line in completed.stderr.splitlines() if line.startswith("ERROR")]
            result.problems.append((errors[-1] if errors else completed.stderr.strip()[-300:])
                                   + f" (for Python {python}, glibc {result.glibc[0]}.{result.glibc[1]})")
            return result
        report = json.loads((Path(scratch) / "report.json").read_text())
    for item in report.get("install", []):
        metadata = item["metadata"]
        requires_python = metadata.get("requires_python")
        if requires_python and not SpecifierSet(requires_python).contains(Version(python), prereleases=True):
            result.problems.append(f"{metadata['name']}=={metadata['version']} requires Python {requires_python}, "
                                   f"the image has {python}")
    for name in sorted(source_builds):
        result.warnings.append(f"{name}=={pins[name]} has no wheel for Python {python} on glibc "
                               f"{result.glibc[0]}.{result.glibc[1]}: the image build builds its source distribution")
    _check_dependencies(report, pins, marker_environment(python), result)
    return result


def _check_dependencies(report: dict, pins: dict[str, str], environment: dict[str, str], result: PinCheck) -> None:
    for item in report.get("install", []):
        metadata = item["metadata"]
        for declared in metadata.get("requires_dist") or []:
            try:
                requirement = Requirement(declared)
            except InvalidRequirement:
                continue
            if requirement.marker and not requirement.marker.evaluate({**environment, "extra": ""}):
                continue
            needed_by = f"{metadata['name']}=={metadata['version']}"
            name = canonicalize_name(requirement.name)
            if name not in pins:
                result.warnings.append(f"{requirement} (needed by {needed_by}) is not pinned: "
                                       f"the build takes the newest release")
            elif pins[name] and not requirement.specifier.contains(Version(pins[name]), prereleases=True):
                result.problems.append(f"{needed_by} needs {requirement}, but {name}=={pins[name]} is pinned")
