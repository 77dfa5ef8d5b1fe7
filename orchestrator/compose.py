"""docker-compose.yml, rendered from the frameworks' metadata: one service per framework, running
its default variant's image under the tag `build` gives it. The committed file is this rendering
(`python -m orchestrator compose` writes it, `--check` compares), never a second list of tags.
"""
from __future__ import annotations

from pathlib import Path

import jinja2

from orchestrator import frameworks, images, onnx_export

COMPOSE_FILE = frameworks.PROJECT_ROOT / "docker-compose.yml"
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
TEMPLATE = "docker-compose.yml.j2"


def render(registry: dict[str, frameworks.Framework] | None = None) -> str:
    known = registry if registry is not None else frameworks.discover()
    services = [{"name": name,
                 "image": images.image_tag(framework, framework.variants[framework.default_variant]),
                 "exported_model": onnx_export.needs_export(framework)}
                for name, framework in known.items()]
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES_DIR), trim_blocks=True,
                                     lstrip_blocks=True, keep_trailing_newline=True,
                                     undefined=jinja2.StrictUndefined, autoescape=False)
    return environment.get_template(TEMPLATE).render(services=services)


def is_current(path: Path = COMPOSE_FILE) -> bool:
    """Whether the file on disk is what the metadata renders."""
    return path.is_file() and path.read_text() == render()


def write(path: Path = COMPOSE_FILE) -> bool:
    """Write the rendering; returns whether the file changed."""
    rendered = render()
    if path.is_file() and path.read_text() == rendered:
        return False
    path.write_text(rendered)
    return True
