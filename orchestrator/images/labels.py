"""An image's labels: what it was built from, written at build time and read back by `pull`, the
lock and a cell's provenance; every label name is made here."""
from __future__ import annotations

from orchestrator import __version__, host
from orchestrator.frameworks import Framework, Variant
from orchestrator.images.context import pinned_version, requirements_hash, sources_hash

LABEL = "io.rosetta-bench"
SOURCES_LABEL = f"{LABEL}.sources-sha256"  # value: sources_hash() of what the image was built from
REVISION_LABEL = "org.opencontainers.image.revision"  # value: the project's git revision at build time





# The labels a lock entry records and `pull` checks (orchestrator/images/lock.py): entry field -> label.
LOCK_LABELS = {"framework": f"{LABEL}.framework", "variant": f"{LABEL}.variant", "source_revision": REVISION_LABEL,
               "requirements_sha256": f"{LABEL}.requirements-sha256", "sources_sha256": SOURCES_LABEL,
               "framework_version": f"{LABEL}.framework-version"}


def image_labels(framework: Framework, variant: Variant) -> dict[str, str]:
    return {
        "org.opencontainers.image.title": f"Rosetta Bench {framework.display_name} ({variant.name})",
        "org.opencontainers.image.version": __version__,
        REVISION_LABEL: host.git_revision() or "unknown",
        f"{LABEL}.framework": framework.name,
        f"{LABEL}.framework-version": pinned_version(framework, variant),
        f"{LABEL}.variant": variant.name,
        f"{LABEL}.device": variant.device,
        f"{LABEL}.cuda": variant.cuda or ("from the wheel" if variant.device == "cuda" else "none"),
        f"{LABEL}.requirements-sha256": requirements_hash(framework, variant),
        SOURCES_LABEL: sources_hash(framework, variant),
    }


def read(image) -> dict[str, str]:
    """An image's labels, as the SDK reports them (`Image.labels`, else its Config's): {} for none.
    The one reader of an image's labels (a cell's provenance, the lock's checks)."""
    labels = getattr(image, "labels", None)
    if labels is None:
        labels = ((getattr(image, "attrs", None) or {}).get("Config") or {}).get("Labels")
    return {str(key): str(value) for key, value in (labels or {}).items()}
