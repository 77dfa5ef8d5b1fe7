"""Per-framework images: one package, a module per concern.

A build context holds only what its image needs (the Dockerfile rendered from images/Dockerfile.j2,
the variant's pinned requirements and build constraints, an optional CA bundle and local wheels, the
common workload code and that framework's own files) and is written with fixed tar metadata, so the
same inputs give the same bytes and Docker's layer cache keeps working.

    labels.py      every label name, the labels an image is built with, the one reader of them
    context.py     names and tags, build arguments, the build context, the hashes of what it holds
    dockerfile.py  the Dockerfile rendered from the one template and the framework's metadata
    wheelhouse.py  which local wheels a build may offer pip, checked
    engine.py      build (and its dry run), pull, push, publish on a Docker engine, and its lost answers
    lock.py        images.lock: pinned digests, read bounded and checked, pulling by them
    resolve.py     the image a cell runs in: here, pulled by the lock, or built

What other modules use is named here.
"""
from orchestrator.images.context import (BuildOptions, base_image, build_arguments, build_context,  # noqa: F401
                                         context_files, image_repository, image_tag, pinned_version,
                                         requirements_hash, sources_hash)
from orchestrator.images.engine import (LOCAL_BASE_SCRIPT, build, dry_run, engine_errors, ensure_base_image,  # noqa: F401
                                        image_digest, publish, pull_image, push_image)
from orchestrator.images.labels import LABEL, REVISION_LABEL, SOURCES_LABEL, image_labels  # noqa: F401
from orchestrator.images.resolve import ensure_image  # noqa: F401
