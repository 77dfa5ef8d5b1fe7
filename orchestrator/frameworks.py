"""Framework discovery: a folder is the registration.

A framework is `images/<name>/metadata.toml` (its variants and their pinned requirements) plus
`workloads/<workload>/<name>.py` for each workload it implements. Nothing else lists them.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import UserError
from workloads.common.hyperparams import WORKLOADS
from workloads.common.naming import module_name

PROJECT_ROOT = Path(__file__).resolve().parent.parent
IMAGES_DIR = PROJECT_ROOT / "images"
WORKLOADS_DIR = PROJECT_ROOT / "workloads"
DEVICES = ("cpu", "cuda")


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
    image: dict = field(default_factory=dict)  # metadata.toml's [image] table (orchestrator/dockerfiles.py)
    extra: dict = field(default_factory=dict)

    def not_applicable(self) -> dict[str, str]:
        """The workloads this framework does not implement, each with the reason the report shows
        (metadata.toml's [not_applicable] table, e.g. an inference engine's training workloads)."""
        reasons = self.extra.get("not_applicable", {})
        return {workload: reasons.get(workload, f"not implemented (no workloads/{workload}/{module_name(self.name)}.py)")
                for workload in WORKLOADS if workload not in self.workloads}

    def variant(self, name: str) -> Variant:
        if name not in self.variants:
            raise UserError(f"framework {self.name!r} has no variant {name!r}; "
                            f"choose from {', '.join(self.variants)}")
        return self.variants[name]


def implemented_workloads(framework: str, workloads_dir: Path = WORKLOADS_DIR) -> tuple[str, ...]:
    return tuple(w for w in WORKLOADS if (workloads_dir / w / f"{module_name(framework)}.py").is_file())


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
    known = {"display_name", "python", "default_variant", "notes", "variants", "package", "runtime", "image"}
    return Framework(name=folder.name, display_name=metadata.get("display_name", folder.name), folder=folder,
                     variants=variants, default_variant=default_variant,
                     workloads=implemented_workloads(folder.name), python=metadata.get("python"),
                     package=metadata.get("package"), runtime=metadata.get("runtime"),
                     notes=metadata.get("notes", ""), image=metadata.get("image", {}),
                     extra={k: v for k, v in metadata.items() if k not in known})


def discover(images_dir: Path = IMAGES_DIR) -> dict[str, Framework]:
    """Every framework registered under images/, by name."""
    return {folder.name: load_framework(folder)
            for folder in sorted(images_dir.iterdir()) if (folder / "metadata.toml").is_file()}
