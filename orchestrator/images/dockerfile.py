"""Each framework image's Dockerfile: one template, images/Dockerfile.j2, rendered with what the
framework declares, so that what differs between two images is written once, in their metadata.

What the template reads (images/<fw>/metadata.toml unless said otherwise):
- each variant's `base_image`: the build passes the variant's as BASE_IMAGE (the Dockerfile's default
  is the default variant's); where a base is not one of the official `python:` images, both stages
  install the distribution's python3 when the base has none;
- each variant's `build_constraints`: pip's constraints (PIP_CONSTRAINT) while it builds sdists;
- `import_env`: the variables set before the framework is imported (the same `python -m workloads`
  sets), e.g. the Keras rows' KERAS_BACKEND;
- the `[image]` table:
      env = { CUDA_HOME = "/usr/local/cuda" }          variables the image sets
      system_libraries = { libgomp1 = "libgomp.so.1" } apt package = library it provides; installed
                                                       at run time when the base lacks the library
      keep = ["setuptools"]                            build tools the framework imports at run time
                                                       (pip, setuptools and wheel are removed otherwise)
      packages = ["r-base-core"]                       apt packages the image always installs (a
                                                       language's runtime: R and reticulate)
      python_headers = true                            Python's C headers (python3-dev), installed
                                                       when the base lacks Python.h (torch.compile's
                                                       inductor builds its CPU kernels against them)
- the `[language]` table (orchestrator/frameworks.py): its command is the image's ENTRYPOINT, with
  `{python}` the environment's python and `{workloads}` /opt/rosetta/workloads.
An image that truly differs keeps images/<fw>/Dockerfile.j2, which extends the template and replaces
the blocks that differ (CNTK's Ubuntu 18.04 base and OpenMPI); a plain images/<fw>/Dockerfile is used
as written.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jinja2

from orchestrator.errors import UserError
from orchestrator.frameworks import IMAGES_DIR, PROJECT_ROOT, Framework

TEMPLATE = "Dockerfile.j2"
DEFAULT_BASE_IMAGE = "python:3.11-slim-bookworm"
BUILD_TOOLS = ("pip", "setuptools", "wheel")  # removed from the environment once it is installed
# The uv release an image's build installs its requirements with (then removes): pinned, as every
# image pin is. The images whose Python uv's wheel cannot serve (CNTK's 3.6) keep pip (their own blocks).
UV_VERSION = "0.13.9"
IMAGE_KEYS = {"env", "system_libraries", "keep", "packages", "python_headers"}
HEADERS_PACKAGE = "python3-dev"  # Debian's package of the distribution Python's C headers (Python.h)
IMAGE_PYTHON = "python"  # the environment's interpreter in the image: /opt/venv/bin comes first on PATH
IMAGE_WORKLOADS = "/opt/rosetta/workloads"  # where the template copies the workloads package
CONSTRAINTS_FILE = "build/build-constraints.txt"  # where the build context carries build_constraints


def variant_base(variant) -> str:
    return variant.base_image or DEFAULT_BASE_IMAGE


def has_build_constraints(framework: Framework) -> bool:
    return any(variant.build_constraints for variant in framework.variants.values())


def source(framework: Framework) -> Path:
    """The file a framework's Dockerfile comes from: its own, or the shared template."""
    for name in ("Dockerfile", "Dockerfile.j2"):
        if (framework.folder / name).is_file():
            return framework.folder / name
    return IMAGES_DIR / TEMPLATE


def render(framework: Framework) -> str:
    """The Dockerfile of the framework's image (one for all its variants: the base is a build argument)."""
    chosen = source(framework)
    if chosen.name == "Dockerfile":
        return chosen.read_text()
    # the framework's folder first, so that a framework outside images/ (a test's) finds its own file
    loader = jinja2.FileSystemLoader([str(framework.folder.parent), str(IMAGES_DIR)])
    environment = jinja2.Environment(loader=loader, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                                     undefined=jinja2.StrictUndefined, autoescape=False)
    environment.filters["comment"] = comment
    name = TEMPLATE if chosen.parent == IMAGES_DIR else f"{framework.folder.name}/{chosen.name}"
    shown = chosen.relative_to(PROJECT_ROOT) if chosen.is_relative_to(PROJECT_ROOT) else chosen
    return environment.get_template(name).render(template=shown.as_posix(), **template_values(framework))


def comment(text: str, width: int = 100) -> str:
    """Text as Dockerfile comment lines: the template writes sentences, this wraps them."""
    return textwrap.fill(" ".join(text.split()), width=width, initial_indent="# ", subsequent_indent="# ",
                         break_long_words=False, break_on_hyphens=False) + "\n"


def template_values(framework: Framework) -> dict:
    declared = image_table(framework)
    env = dict(framework.import_env)
    for variable, value in declared.get("env", {}).items():
        if variable in env:
            raise UserError(f"{framework.folder}/metadata.toml: [image] env sets {variable}, which its "
                            "import_env already sets")
        env[variable] = str(value)
    keep = set(declared.get("keep", ()))
    libraries = declared.get("system_libraries", {})
    bases: dict[str, list[str]] = {}
    for variant in framework.variants.values():
        bases.setdefault(variant_base(variant), []).append(variant.name)
    python_from_apt = any(not base.startswith("python:") for base in bases)
    headers = declared.get("python_headers", False)
    return {
        "name": framework.name,
        "display_name": framework.display_name,
        "default_base": variant_base(framework.variants[framework.default_variant]),
        "bases": "; ".join(f"{', '.join(names)}: {base}" for base, names in bases.items()),
        "python_from_apt": python_from_apt,
        "build_constraints": has_build_constraints(framework),
        "removed_tools": " ".join(["uv", *(tool for tool in BUILD_TOOLS if tool not in keep)]),
        "uv_version": UV_VERSION,
        "kept_tools": [tool for tool in BUILD_TOOLS if tool in keep],
        "system_libraries": [{"package": package, "library": library, "pattern": library.replace(".", r"\.")}
                             for package, library in libraries.items()],
        "runtime_packages": ["python3"] * python_from_apt + list(libraries) + [HEADERS_PACKAGE] * headers,
        "python_headers": headers,
        "headers_package": HEADERS_PACKAGE,
        "packages": list(declared.get("packages", ())),
        "env": env,
        # JSON is the exec form's syntax: ["python", "-m", "workloads"] for every Python framework
        "entrypoint": json.dumps(framework.language.command_line(python=IMAGE_PYTHON, workloads=IMAGE_WORKLOADS)),
    }


def image_table(framework: Framework) -> dict:
    """metadata.toml's [image] table, checked: a misspelt key must not silently drop a package."""
    declared = framework.image
    where = f"{framework.folder}/metadata.toml: [image]"
    unknown = set(declared) - IMAGE_KEYS
    if unknown:
        raise UserError(f"{where} has unknown keys {', '.join(sorted(unknown))}; known: {', '.join(sorted(IMAGE_KEYS))}")
    for key in ("env", "system_libraries"):
        if not isinstance(declared.get(key, {}), dict):
            raise UserError(f"{where} {key} must be a table, e.g. {key} = {{ NAME = \"value\" }}")
    if not isinstance(declared.get("python_headers", False), bool):
        raise UserError(f"{where} python_headers must be true or false")
    packages = declared.get("packages", [])
    if not (isinstance(packages, list) and all(isinstance(package, str) and package for package in packages)):
        raise UserError(f"{where} packages must be a list of apt package names, e.g. packages = [\"r-base-core\"]")
    wrong = set(declared.get("keep", ())) - set(BUILD_TOOLS)
    if wrong:
        raise UserError(f"{where} keep names {', '.join(sorted(wrong))}; it can keep {', '.join(BUILD_TOOLS)}")
    return declared
