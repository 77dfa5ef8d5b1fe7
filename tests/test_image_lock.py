"""images.lock without an engine: reading and writing it, the registry setting, what a missing,
stale or mismatched entry says. The real publish -> pull round trip is in test_images.py."""
import dataclasses
import json
import os

import pytest

from orchestrator import frameworks, images
from orchestrator.images import lock as image_lock
from orchestrator.__main__ import main
from orchestrator.errors import UserError

PYTORCH = frameworks.discover()["pytorch"]
CPU = PYTORCH.variant("cpu")


def entry(**changes) -> image_lock.LockEntry:
    fields = dict(framework="pytorch", variant="cpu", registry="127.0.0.1:5000", repository="rosetta-pytorch",
                  tag="cpu-2.13.0", digest="sha256:" + "a" * 64, platform="linux/amd64", source_revision="0" * 40,
                  requirements_sha256=images.requirements_hash(PYTORCH, CPU), sources_sha256=images.sources_hash(PYTORCH, CPU),
                  framework_version="2.13.0", published="2026-12-03T00:00:00+00:00")
    return image_lock.LockEntry(**{**fields, **changes})


def test_the_lock_round_trips_and_is_written_sorted(tmp_path):
    path = tmp_path / "images.lock"
    entries = {("pytorch", "cpu"): entry(), ("jax", "cpu"): entry(framework="jax", repository="rosetta-jax")}
    image_lock.write(entries, path)
    assert image_lock.read(path) == entries
    document = json.loads(path.read_text())
    assert list(document["images"]) == ["jax", "pytorch"] and "do not edit by hand" in document["comment"]
    assert image_lock.read(tmp_path / "absent.lock") == {}


def test_the_committed_lock_is_readable_and_names_only_real_variants():
    for (framework, variant), found in image_lock.read(image_lock.LOCK_FILE).items():
        assert variant in frameworks.discover()[framework].variants
        assert found.digest.startswith("sha256:")


@pytest.mark.parametrize("content, said", [
    ("{not json", "not valid JSON"),
    ('{"schema": 99, "images": {}}', "its schema is 99, not 1"),
    ('{"schema": 1, "images": {"pytorch": {"cpu": {"digest": "sha256:0"}}}}', "the entry for pytorch/cpu: it lacks"),
])
def test_a_broken_lock_is_one_line(tmp_path, content, said):
    path = tmp_path / "images.lock"
    path.write_text(content)
    with pytest.raises(UserError, match=said):
        image_lock.read(path)


def test_the_registry_is_the_option_else_the_variable_else_the_projects(monkeypatch):
    monkeypatch.delenv(image_lock.REGISTRY_VARIABLE, raising=False)
    assert image_lock.registry() == image_lock.DEFAULT_REGISTRY
    monkeypatch.setenv(image_lock.REGISTRY_VARIABLE, "mirror.lan:5000/")  # docker-compose.yml's form works too
    assert image_lock.registry() == "mirror.lan:5000"
    assert image_lock.registry("127.0.0.1:5000") == "127.0.0.1:5000"
    assert entry().reference("mirror.lan:5000") == "mirror.lan:5000/rosetta-pytorch@sha256:" + "a" * 64


def test_a_missing_entry_says_how_to_publish_it(tmp_path, capsys):
    lock = tmp_path / "images.lock"
    image_lock.write({}, lock)
    assert main(["pull", "pytorch", "--variant", "cu126", "--lock", str(lock)]) == 2
    err = capsys.readouterr().err
    assert "pytorch/cu126 has no entry in images.lock" in err
    assert "python -m orchestrator publish pytorch --variant cu126 --registry R" in err and "Traceback" not in err


def test_a_stale_entry_names_what_changed():
    assert image_lock.stale(entry(), PYTORCH, CPU) is None
    said = image_lock.stale(entry(sources_sha256="0" * 64), PYTORCH, CPU)
    assert "stale" in said and "workload sources" in said and "requirements" not in said
    said = image_lock.stale(entry(requirements_sha256="0" * 64, sources_sha256="0" * 64), PYTORCH, CPU)
    assert "workload sources or Dockerfile and requirements" in said and "publish pytorch --variant cpu" in said


class _Image:
    def __init__(self, digests, labels):
        self.attrs = {"RepoDigests": digests}
        self.labels = labels


def test_verify_refuses_another_digest_or_other_labels():
    pinned = entry()
    reference = pinned.reference()
    labels = {"io.rosetta-bench.framework": "pytorch", "io.rosetta-bench.variant": "cpu",
              "org.opencontainers.image.revision": "0" * 40,
              "io.rosetta-bench.requirements-sha256": pinned.requirements_sha256,
              images.SOURCES_LABEL: pinned.sources_sha256, "io.rosetta-bench.framework-version": "2.13.0"}
    image_lock.verify(_Image([reference], labels), pinned, reference)
    with pytest.raises(UserError, match="does not match images.lock's sha256:aaaa"):
        image_lock.verify(_Image(["127.0.0.1:5000/rosetta-pytorch@sha256:" + "b" * 64], labels), pinned, reference)
    with pytest.raises(UserError, match=r"io.rosetta-bench.variant='cu126' \(lock: 'cpu'\)"):
        image_lock.verify(_Image([reference], {**labels, "io.rosetta-bench.variant": "cu126"}), pinned, reference)


def test_publish_refuses_a_dirty_checkout(monkeypatch, tmp_path, capsys):
    from orchestrator import host

    monkeypatch.setattr(host, "git_revision", lambda: "abc-dirty")
    assert main(["publish", "pytorch", "--registry", "127.0.0.1:9", "--lock", str(tmp_path / "l")]) == 2
    assert "commit first (or pass --allow-dirty" in capsys.readouterr().err
    assert not (tmp_path / "l").exists()


def test_merge_lock_takes_the_latest_entry_of_each_image(tmp_path):
    older, newer = tmp_path / "a.lock", tmp_path / "b.lock"
    image_lock.write({("pytorch", "cpu"): entry(published="2026-12-02T00:00:00+00:00", digest="sha256:" + "1" * 64)},
                     older)
    image_lock.write({("pytorch", "cpu"): entry(digest="sha256:" + "2" * 64),
                      ("jax", "cpu"): entry(framework="jax", repository="rosetta-jax")}, newer)
    target = tmp_path / "images.lock"
    assert main(["publish", "--merge-lock", str(newer), str(older), "--lock", str(target)]) == 0
    merged = image_lock.read(target)
    assert merged[("pytorch", "cpu")].digest == "sha256:" + "2" * 64 and ("jax", "cpu") in merged
    assert main(["publish", "pytorch", "--merge-lock", str(older), "--lock", str(target)]) == 2


def test_the_lock_variable_points_commands_at_another_lock(tmp_path, monkeypatch):
    path = tmp_path / "other.lock"
    monkeypatch.setenv(image_lock.LOCK_VARIABLE, str(path))
    assert image_lock.lock_path() == path
    monkeypatch.delenv(image_lock.LOCK_VARIABLE)
    assert image_lock.lock_path() == image_lock.LOCK_FILE and os.path.basename(image_lock.LOCK_FILE) == "images.lock"


def test_every_field_of_an_entry_has_its_shape_checked_on_reading():
    names = {field.name for field in dataclasses.fields(image_lock.LockEntry)} - {"framework", "variant"}
    assert set(image_lock.FIELD_SHAPES) == names
    for name, (shape, _) in image_lock.FIELD_SHAPES.items():
        assert shape.fullmatch(getattr(entry(), name)), name  # what publish writes is what read accepts
