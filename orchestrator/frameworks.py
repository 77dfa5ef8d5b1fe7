"""Framework discovery: a folder is the registration.

A framework is `images/<name>/metadata.toml` (its variants and their pinned requirements) plus
`workloads/<workload>/<module>.<suffix>` for each workload it implements (`.py` unless its
`[language]` table names another language; the module is its name with dashes as underscores,
unless `module` names another: the Keras 3 rows share keras.py). Nothing else lists them.

What the image side needs of the registration (the module, and `import_env`: the variables set
before the framework is imported) it reads from workloads/frameworks.json, which `image_side_json`
writes from the metadata: `python -m orchestrator.frameworks > workloads/frameworks.json`
(workloads/common/naming.py says why JSON; tests/test_images.py keeps the file current).
"""
from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import UserError
from workloads.common.hyperparams import WORKLOADS

PROJECT_ROOT = Path(__file__).resolve().parent.parent
IMAGES_DIR = PROJECT_ROOT / "images"
WORKLOADS_DIR = PROJECT_ROOT / "workloads"
DEVICES = ("cpu", "cuda")
# The placeholders a cell command may hold; each backend fills them in (workloads/ADDING_A_FRAMEWORK.md).
PYTHON_PLACEHOLDER = "{python}"  # the interpreter of the framework's environment
WORKLOADS_PLACEHOLDER = "{workloads}"  # the workloads folder as the cell sees it
LANGUAGE_KEYS = {"name", "command", "suffix", "program", "install", "project_files"}
MODULE_NAME = re.compile(r"[a-z][a-z0-9_]*")  # workloads/<workload>/<module>.<suffix>: an importable name
VARIABLE_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
IMAGE_SIDE_FILE = WORKLOADS_DIR / "frameworks.json"


@dataclass(frozen=True)
class Language:
    """How a framework's cells run: metadata.toml's `[language]` table, Python's unless it has one.

    Whatever the language, a cell is `<command> --cell FILE` (the cell document) and ends with one
    result JSON and an exit code: the contract in workloads/ADDING_A_FRAMEWORK.md."""

    name: str = "Python"
    command: tuple[str, ...] = (PYTHON_PLACEHOLDER, "-m", "workloads")  # the backend appends --cell FILE
    suffix: str = "py"  # workloads/<workload>/<module>.<suffix>
    program: str | None = None  # what the host must have on PATH to run a cell locally (Rscript, julia)
    install: str = ""  # how to get that program, named in the reason when it is missing
    project_files: tuple[str, ...] = ()  # images/<fw>/ files the image needs beside the workloads (Project.toml)

    @property
    def uses_python_environment(self) -> bool:
        """Whether its cells need the framework's Python environment (R's reticulate does; Julia not)."""
        return any(PYTHON_PLACEHOLDER in part for part in self.command)

    def command_line(self, *, python: str, workloads: str) -> list[str]:
        """The command with its placeholders filled in (without --cell FILE, which the backend adds)."""
        return [part.replace(PYTHON_PLACEHOLDER, python).replace(WORKLOADS_PLACEHOLDER, workloads)
                for part in self.command]

    def missing_reason(self) -> str:
        """Why a local cell cannot run on a host without the program: the report shows it."""
        reason = f"defined, not run here: {self.name} is not installed here: no `{self.program}` on PATH"
        return f"{reason}; {self.install}" if self.install else reason


PYTHON = Language()


@dataclass(frozen=True)
class Variant:
    name: str
    device: str  # cpu or cuda
    requirements: Path
    cuda: str | None = None
    base_image: str | None = None  # the default BASE_IMAGE of this variant's image
    gpus: str = ""  # which GPUs its CUDA build can target, for the list and the report
    package: str | None = None  # overrides the framework's package (e.g. tensorflow-cpu vs tensorflow)
    # the newest GPU architecture its CUDA build can target (e.g. "8.6" for CUDA 11.2); None: any
    max_compute_capability: str | None = None
    # pip constraints for building sdists in isolation (PIP_CONSTRAINT), e.g. chainer's setuptools<81
    build_constraints: Path | None = None
    # the Python its image runs (major.minor), when it is not the framework's (e.g. "3.8" on an old
    # CUDA base); the local backend can only build environments for its own Python
    python: str | None = None


@dataclass(frozen=True)
class Framework:
    name: str
    display_name: str
    folder: Path
    variants: dict[str, Variant]
    default_variant: str
    workloads: tuple[str, ...]
    python: str | None = None
    package: str | None = None  # the pinned package whose version names the image tag
    runtime: str | None = None  # workloads/runtime/<runtime>.py, when shared (mxnet-module uses mxnet's)
    notes: str = ""
    image: dict = field(default_factory=dict)  # metadata.toml's [image] table (orchestrator/images/dockerfile.py)
    language: Language = PYTHON
    # whose Python environment the local backend gives its cells: its own, or another framework's
    # with the same requirements (r-keras runs on keras-tf's: the same engine, one environment)
    environment: str | None = None
    extra: dict = field(default_factory=dict)
    module: str | None = None  # metadata.toml's `module`: the workload files' name, when not the default
    # variables set before the framework is imported: by `python -m workloads`, and in the image
    import_env: dict[str, str] = field(default_factory=dict)

    @property
    def workload_module(self) -> str:
        """The name of its workload files, workloads/<workload>/<this>.<suffix>."""
        return self.module or default_module(self.name)

    def not_applicable(self) -> dict[str, str]:
        """The workloads this framework does not implement, each with the reason the report shows
        (metadata.toml's [not_applicable] table, e.g. an inference engine's training workloads)."""
        reasons = self.extra.get("not_applicable", {})
        return {workload: reasons.get(workload, f"not implemented (no workloads/{workload}/{self.source_name})")
                for workload in WORKLOADS if workload not in self.workloads}

    @property
    def source_name(self) -> str:
        """The file name of each of its workloads: workloads/<workload>/<this>."""
        return f"{self.workload_module}.{self.language.suffix}"

    @property
    def environment_name(self) -> str:
        return self.environment or self.name

    def variant(self, name: str) -> Variant:
        if name not in self.variants:
            raise UserError(f"framework {self.name!r} has no variant {name!r}; "
                            f"choose from {', '.join(self.variants)}")
        return self.variants[name]


def default_module(framework: str) -> str:
    return framework.replace("-", "_")


def implemented_workloads(module: str, workloads_dir: Path = WORKLOADS_DIR, suffix: str = "py") -> tuple[str, ...]:
    return tuple(w for w in WORKLOADS if (workloads_dir / w / f"{module}.{suffix}").is_file())


def load_module(metadata: dict, metadata_file: Path) -> tuple[str | None, dict[str, str]]:
    """metadata.toml's `module` and `import_env`, checked: they name a file to import and variables to set."""
    module = metadata.get("module")
    if module is not None and not (isinstance(module, str) and MODULE_NAME.fullmatch(module)):
        raise UserError(f"{metadata_file}: module = {module!r} must name the workload files, "
                        "workloads/<workload>/<module>.py: lowercase letters, digits and underscores")
    import_env = metadata.get("import_env", {})
    if not (isinstance(import_env, dict) and all(isinstance(name, str) and VARIABLE_NAME.fullmatch(name)
                                                 and isinstance(value, str) for name, value in import_env.items())):
        raise UserError(f"{metadata_file}: import_env must be a table of VARIABLE = \"value\" strings, the "
                        'variables set before the framework is imported (e.g. { KERAS_BACKEND = "jax" })')
    return module, dict(import_env)


def load_language(table: dict, metadata_file: Path) -> Language:
    """metadata.toml's [language] table, checked: a misspelt key must not silently run Python."""
    if not table:
        return PYTHON
    unknown = set(table) - LANGUAGE_KEYS
    if unknown:
        raise UserError(f"{metadata_file}: [language] has unknown keys {', '.join(sorted(unknown))}; "
                        f"known: {', '.join(sorted(LANGUAGE_KEYS))}")
    command = table.get("command")
    if not (isinstance(command, list) and command and all(isinstance(part, str) and part for part in command)):
        raise UserError(f"{metadata_file}: [language] needs command = [\"program\", \"argument\", ...], "
                        "the command a cell runs (the backend appends --cell FILE)")
    program = None if command[0] == PYTHON_PLACEHOLDER else table.get("program", command[0])
    for key in ("name", "suffix"):
        if not isinstance(table.get(key), str) or not table[key]:
            raise UserError(f"{metadata_file}: [language] needs {key} = \"...\" (e.g. name = \"R\", suffix = \"R\")")
    return Language(name=table["name"], command=tuple(command), suffix=table["suffix"].lstrip("."), program=program,
                    install=table.get("install", ""), project_files=tuple(table.get("project_files", ())))


def load_framework(folder: Path) -> Framework:
    metadata_file = folder / "metadata.toml"
    try:
        metadata = tomllib.loads(metadata_file.read_text())
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"{metadata_file}: not valid TOML ({error})") from error
    variants = {}
    for name, spec in metadata.get("variants", {}).items():
        if spec.get("device") not in DEVICES:
            raise UserError(f"{metadata_file}: variant {name!r} needs device = one of {', '.join(DEVICES)}")
        requirements = folder / spec.get("requirements", f"requirements-{name}.txt")
        variants[name] = Variant(name=name, device=spec["device"], requirements=requirements,
                                 cuda=spec.get("cuda"), base_image=spec.get("base_image"), gpus=spec.get("gpus", ""),
                                 package=spec.get("package"),
                                 max_compute_capability=spec.get("max_compute_capability"),
                                 build_constraints=folder / spec["build_constraints"] if "build_constraints" in spec else None,
                                 python=str(spec.get("python") or metadata.get("python") or "") or None)
    if not variants:
        raise UserError(f"{metadata_file}: declares no [variants.<name>] table")
    default_variant = metadata.get("default_variant", next(iter(variants)))
    known = {"display_name", "python", "default_variant", "notes", "variants", "package", "runtime", "image",
             "language", "environment", "module", "import_env"}
    language = load_language(metadata.get("language", {}), metadata_file)
    module, import_env = load_module(metadata, metadata_file)
    return Framework(name=folder.name, display_name=metadata.get("display_name", folder.name), folder=folder,
                     variants=variants, default_variant=default_variant,
                     workloads=implemented_workloads(module or default_module(folder.name), suffix=language.suffix),
                     python=metadata.get("python"),
                     package=metadata.get("package"), runtime=metadata.get("runtime"),
                     notes=metadata.get("notes", ""), image=metadata.get("image", {}),
                     language=language, environment=metadata.get("environment"),
                     extra={k: v for k, v in metadata.items() if k not in known},
                     module=module, import_env=import_env)


def discover(images_dir: Path = IMAGES_DIR) -> dict[str, Framework]:
    """Every framework registered under images/, by name."""
    found = {folder.name: load_framework(folder)
             for folder in sorted(images_dir.iterdir()) if (folder / "metadata.toml").is_file()}
    for framework in found.values():
        if framework.environment is not None and framework.environment not in found:
            raise UserError(f"{framework.folder}/metadata.toml: environment = {framework.environment!r} names no "
                            f"framework; name the one whose Python environment its cells share (e.g. keras-tf)")
    return found


def served_by_module(found: dict[str, Framework]) -> dict[str, list[str]]:
    """Workload module -> the frameworks whose workload files it is, by name (keras: the Keras 3 rows)."""
    served: dict[str, list[str]] = {}
    for name in sorted(found):
        served.setdefault(found[name].workload_module, []).append(name)
    return served


def image_side_json(found: dict[str, Framework]) -> str:
    """What workloads/common/naming.py reads, as JSON: each framework's workload module and import_env."""
    facts = {name: {"module": framework.workload_module, "import_env": dict(sorted(framework.import_env.items()))}
             for name, framework in sorted(found.items())}
    note = ("generated from images/<fw>/metadata.toml (module, import_env) by "
            "`python -m orchestrator.frameworks > workloads/frameworks.json`; edit the metadata, not this file")
    return json.dumps({"generated": note, "frameworks": facts}, indent=1) + "\n"


if __name__ == "__main__":  # python -m orchestrator.frameworks > workloads/frameworks.json
    print(image_side_json(discover()), end="")

