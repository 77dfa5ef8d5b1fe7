"""Matrix validation: every unknown key or name is refused with the valid choices listed."""
import pytest

from orchestrator import frameworks, matrix
from orchestrator.errors import UserError

REGISTRY = frameworks.discover()

GOOD = """
[defaults]
profile = "smoke"
data = "synthetic"
repeat = 2
workloads = ["cnn", "gru"]
precisions = ["fp32", "bf16"]

[frameworks.pytorch]
variants = ["cpu"]
"""


def test_parse_and_expand_interleaves_repeats_across_frameworks():
    parsed = matrix.parse(GOOD, REGISTRY)
    cells = parsed.cells(REGISTRY)
    assert len(cells) == 2 * 2 * 2  # repeats x workloads x precisions
    assert [c.repeat for c in cells] == [0, 0, 0, 0, 1, 1, 1, 1]  # every cell once before any repeats
    assert {c.profile for c in cells} == {"smoke"} and {c.data for c in cells} == {"synthetic"}
    assert len({c.key for c in cells}) == len(cells)


def test_default_matrix_file_is_valid():
    loaded = matrix.load(None, REGISTRY)
    assert loaded.profile == "full" and [e.name for e in loaded.frameworks][0] == "pytorch"
    assert {e.name for e in loaded.frameworks} == set(REGISTRY)  # every framework has a row


@pytest.mark.parametrize("text, expected", [
    ("[defaults]\nprofle = 'smoke'\n[frameworks.pytorch]\n", "unknown key 'profle'; valid keys: profile"),
    ("colour = 1\n[frameworks.pytorch]\n", "unknown key 'colour'; valid keys: defaults, frameworks"),
    ("[frameworks.tourch]\n", "unknown framework 'tourch'; choose from "),
    ("[frameworks.pytorch]\nvariants = ['cu99']\n", "unknown variant 'cu99'; choose from cpu, cu130, cu118"),
    ("[defaults]\nworkloads = ['cnn', 'lstm']\n[frameworks.pytorch]\n", "unknown workload 'lstm'; choose from cnn, resnet50, gru"),
    ("[defaults]\nprecisions = ['fp8']\n[frameworks.pytorch]\n", "unknown precision 'fp8'; choose from fp32, tf32, fp16, bf16"),
    ("[defaults]\nprofile = 'huge'\n[frameworks.pytorch]\n", "unknown profile 'huge'; choose from smoke, full"),
    ("[defaults]\nrepeat = 0\n[frameworks.pytorch]\n", "repeat must be a whole number from 1 to 100"),
    ("[defaults]\n", "no [frameworks.<name>] table; choose from "),
    ("[frameworks.pytorch]\nvariants = ['cpu'\n", "not valid TOML"),
    ("[frameworks.pytorch]\nspeed = 'fast'\n", "unknown key 'speed'; valid keys: variants, workloads, precisions"),
])
def test_bad_matrix_names_the_fix(text, expected):
    with pytest.raises(UserError) as error:
        matrix.parse(text, REGISTRY, source="m.toml")
    message = str(error.value)
    assert expected in message and message.startswith("m.toml") and "\n" not in message


def test_missing_matrix_file(tmp_path):
    with pytest.raises(UserError, match="not found; pass --matrix FILE"):
        matrix.load(tmp_path / "nope.toml", REGISTRY)


def test_narrowing_from_the_command_line():
    parsed = matrix.narrow(matrix.parse(GOOD, REGISTRY), REGISTRY, workloads=["resnet50"], precisions=["fp32"],
                           profile="full", repeat=1)
    cells = parsed.cells(REGISTRY)
    assert [(c.workload, c.precision, c.profile, c.repeat) for c in cells] == [("resnet50", "fp32", "full", 0)]
    with pytest.raises(UserError, match="unknown framework 'no-such-framework'; choose from .*pytorch"):
        matrix.narrow(matrix.parse(GOOD, REGISTRY), REGISTRY, names=["no-such-framework"])
    with pytest.raises(UserError, match="unknown variant 'rocm'"):
        matrix.narrow(matrix.parse(GOOD, REGISTRY), REGISTRY, variants=["rocm"])


def test_framework_registration_is_the_folder():
    pytorch = REGISTRY["pytorch"]
    assert pytorch.workloads == ("cnn", "resnet50", "gru")
    assert {"cpu", "cu118", "cu126", "cu128", "cu130"} <= set(pytorch.variants)
    for variant in pytorch.variants.values():
        assert variant.requirements.is_file()
        pins = [line for line in variant.requirements.read_text().splitlines()
                if line and not line.startswith(("#", "--"))]  # options such as --extra-index-url
        assert pins and all("==" in line for line in pins), "image and environment requirements must be pinned"
