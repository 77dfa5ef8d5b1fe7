"""docker-compose.yml is rendered from the frameworks' metadata, never kept by hand."""
import argparse

import yaml

from orchestrator import compose, frameworks, images
from orchestrator.commands import compose as compose_command


def test_committed_compose_file_is_what_the_metadata_renders():
    assert compose.COMPOSE_FILE.read_text() == compose.render(), \
        "docker-compose.yml is stale: run `python -m orchestrator compose`"


def test_one_service_per_framework_running_its_default_image():
    registry = frameworks.discover()
    services = yaml.safe_load(compose.render(registry))["services"]
    assert set(services) == set(registry)
    for name, framework in registry.items():
        tag = images.image_tag(framework, framework.variants[framework.default_variant])
        assert services[name]["image"] == "${ROSETTA_REGISTRY:-}" + tag
        assert services[name]["network_mode"] == "none" and services[name]["cap_drop"] == ["ALL"]
        assert services[name]["read_only"] and services[name]["user"].startswith("${ROSETTA_UID")


def parse(*argv):
    parser = argparse.ArgumentParser()
    compose_command.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_compose_command_writes_and_checks(tmp_path, capsys):
    target = tmp_path / "docker-compose.yml"
    assert compose_command.main(parse("--check", "--file", str(target))) == 1  # missing
    target.write_text(compose.render().replace("rosetta-pytorch:", "rosetta-pytorch-old:"))
    assert compose_command.main(parse("--check", "--file", str(target))) == 1
    assert "differs from what images/*/metadata.toml renders" in capsys.readouterr().err
    assert compose_command.main(parse("--file", str(target))) == 0
    assert target.read_text() == compose.render()
    assert compose_command.main(parse("--check", "--file", str(target))) == 0
    assert compose_command.HELP and "\n" not in compose_command.HELP
