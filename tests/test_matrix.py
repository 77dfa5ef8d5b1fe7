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
    assert len(cells) == 2 * 2 * 2 * 2  # repeats x workloads x precisions x PyTorch's modes (eager, compiled)
    assert [c.repeat for c in cells] == [0] * 8 + [1] * 8  # every cell once before any repeats
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
                           profile="full", repeat=1, modes=["eager"])
    cells = parsed.cells(REGISTRY)
    assert [(c.workload, c.precision, c.mode, c.profile, c.repeat) for c in cells] == [
        ("resnet50", "fp32", "eager", "full", 0)]
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


# --- framework options and init -------------------------------------------------------------------

OPTIONS = """
[defaults]
profile = "smoke"
data = "synthetic"
workloads = ["cnn"]
init = "framework"

[frameworks.mindspore]
variants = ["cpu"]
modes = ["graph"]
options = { onednn_max_cpu_isa = ["avx2", "all"] }

[frameworks.pytorch]
variants = ["cpu"]
modes = ["eager"]
options = { channels_last = "off" }
"""


def test_an_option_list_expands_into_one_cell_per_value_and_defaults_are_dropped():
    cells = matrix.parse(OPTIONS, REGISTRY).cells(REGISTRY)
    assert [(c.framework, c.options, c.init) for c in cells] == [
        ("mindspore", {}, "framework"), ("mindspore", {"onednn_max_cpu_isa": "all"}, "framework"),
        ("pytorch", {}, "framework")]  # channels_last=off is the default: the same cell as none given
    assert [c.key for c in cells] == [
        "mindspore__cpu__cnn__fp32__graph__smoke__synthetic__init-framework__r0",
        "mindspore__cpu__cnn__fp32__graph__smoke__synthetic__init-framework__onednn_max_cpu_isa-all__r0",
        "pytorch__cpu__cnn__fp32__eager__smoke__synthetic__init-framework__r0"]


def test_init_defaults_to_canonical():
    cells = matrix.parse(GOOD, REGISTRY).cells(REGISTRY)
    assert {c.init for c in cells} == {"canonical"} and all("init" not in c.key for c in cells)
    assert matrix.load(None, REGISTRY).init == "canonical"


def test_command_line_options_go_to_every_selected_framework_that_declares_them():
    parsed = matrix.narrow(matrix.parse(OPTIONS, REGISTRY), REGISTRY, names=["mindspore", "paddle", "pytorch"],
                           options=["onednn_max_cpu_isa=all", "channels_last=off,on"], init="canonical",
                           modes=["default"])  # one mode each: the options are the point
    cells = parsed.cells(REGISTRY)
    assert [(c.framework, c.options) for c in cells] == [
        ("mindspore", {"onednn_max_cpu_isa": "all"}),  # the file's [avx2, all] replaced
        ("paddle", {}), ("paddle", {"channels_last": "on"}),
        ("pytorch", {}), ("pytorch", {"channels_last": "on"})]
    assert {c.init for c in cells} == {"canonical"}


@pytest.mark.parametrize("argument, expected", [
    (["executor=simple"], "--option executor: no selected framework (pytorch) declares it; executor is an option "
                          "of caffe2: select one with --frameworks"),
    (["colour=red"], "--option colour: no selected framework (pytorch) declares it; options: "),
    (["channels_last=sideways"], "--option channels_last=sideways refused: option channels_last='sideways' for "
                                 "pytorch: choose from off, on"),
    (["channels_last"], "--option 'channels_last': give NAME=VALUE, e.g. --option channels_last=on"),
    (["channels_last="], "give NAME=VALUE"),
    (["channels_last=on", "channels_last=off"], "--option channels_last is given twice"),
    (["channels_last=on,on"], "--option channels_last: value 'on' is given twice"),
])
def test_bad_command_line_options_name_the_fix(argument, expected):
    with pytest.raises(UserError) as error:
        matrix.narrow(matrix.parse(GOOD, REGISTRY), REGISTRY, options=argument)
    assert expected in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("table, expected", [
    ("options = { executor = 'simple' }",
     "[frameworks.pytorch]: pytorch has no option 'executor' (its options: channels_last)"),
    ("options = { channels_last = 'maybe' }", "option channels_last='maybe' for pytorch: choose from off, on"),
    ("options = 'channels_last=on'", "options must be a table, e.g. options = { channels_last = \"on\" }"),
    ("options = { channels_last = [] }", "options.channels_last must be a value or a non-empty list"),
    ("options = { channels_last = [1] }", "options.channels_last must be a value or a non-empty list"),
    ("options = { channels_last = ['on', 'on'] }", "options.channels_last gives 'on' twice"),
])
def test_bad_matrix_options_name_file_framework_and_fix(table, expected):
    with pytest.raises(UserError) as error:
        matrix.parse(f"[frameworks.pytorch]\n{table}\n", REGISTRY, source="m.toml")
    assert str(error.value).startswith("m.toml") and expected in str(error.value)


def test_a_bad_init_is_refused():
    with pytest.raises(UserError, match=r"m.toml \[defaults\]: unknown init 'random'; choose from canonical, framework"):
        matrix.parse("[defaults]\ninit = 'random'\n[frameworks.pytorch]\n", REGISTRY, source="m.toml")
    with pytest.raises(UserError, match="command line: unknown init 'random'"):
        matrix.narrow(matrix.parse(GOOD, REGISTRY), REGISTRY, init="random")


# --- repeats and their order ----------------------------------------------------------------------

def test_repeats_default_to_three_in_the_full_profile_and_one_in_smoke():
    unset = "[frameworks.pytorch]\nvariants = ['cpu']\n"
    assert matrix.parse(unset, REGISTRY).repeats == 3  # profile full by default
    assert matrix.parse("[defaults]\nprofile = 'smoke'\n" + unset, REGISTRY).repeats == 1
    assert matrix.narrow(matrix.parse(unset, REGISTRY), REGISTRY, profile="smoke").repeats == 1
    assert matrix.parse("[defaults]\nrepeat = 2\n" + unset, REGISTRY).repeats == 2  # the file says
    assert matrix.narrow(matrix.parse(unset, REGISTRY), REGISTRY, repeat=5).repeats == 5  # --repeat says
    default = matrix.load(None, REGISTRY)
    assert default.repeat is None and default.repeats == 3  # matrix.toml leaves it unset on purpose


def test_cells_are_shuffled_within_each_repeat_in_a_seeded_order():
    parsed = matrix.narrow(matrix.parse(GOOD, REGISTRY), REGISTRY, names=["pytorch", "jax", "tensorflow"], repeat=3)
    cells = parsed.cells(REGISTRY)
    assert len(cells) == (2 + 1 + 2) * 2 * 2 * 3  # the frameworks' modes (jax: compiled only) x workloads x ...
    ordered = matrix.run_order(cells, seed=7)
    assert ordered == matrix.run_order(cells, seed=7)  # the same seed, the same order
    assert ordered != matrix.run_order(cells, seed=8)
    per_repeat = len(cells) // 3
    for repeat in range(3):  # every cell once before any runs again, in an order of its own each repeat
        chunk = ordered[repeat * per_repeat:(repeat + 1) * per_repeat]
        assert {c.repeat for c in chunk} == {repeat}
        assert sorted(c.key for c in chunk) == sorted(c.key for c in cells if c.repeat == repeat)
    firsts = [[c.framework for c in ordered[r * per_repeat:(r + 1) * per_repeat]] for r in range(3)]
    assert firsts[0] != firsts[1] or firsts[1] != firsts[2]  # not the same order every repeat
    assert [c.key for c in ordered[:per_repeat]] != [c.key for c in cells[:per_repeat]]  # not the matrix order


def test_accelerator_types_name_a_gpu_model_per_cuda_variant():
    """matrix.toml: a CUDA variant's cells can require a GPU model (the Ray backend places them)."""
    parsed = matrix.parse('[frameworks.mxnet]\nvariants = ["cpu", "cu112"]\naccelerator_types = { cu112 = "A100" }\n',
                          REGISTRY)
    assert parsed.accelerator_types() == {("mxnet", "cu112"): "A100"}
    with pytest.raises(UserError, match=r"accelerator_types names 'cpu', not a CUDA variant of mxnet; choose from cu112"):
        matrix.parse('[frameworks.mxnet]\naccelerator_types = { cpu = "A100" }\n', REGISTRY)
    with pytest.raises(UserError, match=r"accelerator_types.cu112 must be a GPU model name"):
        matrix.parse('[frameworks.mxnet]\naccelerator_types = { cu112 = 3 }\n', REGISTRY)


# --- execution modes (workloads/common/modes.py) -----------------------------------------------------

def test_every_framework_declares_its_modes_in_the_one_table():
    """docs/FAIRNESS.md, modes-compared: each registered framework says which modes it runs and what
    each means there, in workloads/common/modes.py and nowhere else."""
    from workloads.common import modes

    assert set(modes.MODES) == set(REGISTRY)
    for name, declared in modes.MODES.items():
        names = [mode.name for mode in declared]
        assert 1 <= len(names) <= 2 and len(set(names)) == len(names), name  # its default, and one more
        assert set(names) <= set(modes.KINDS) and all(mode.meaning.strip() for mode in declared), name
    assert [m.name for m in modes.MODES["pytorch"]] == ["eager", "compiled"]
    assert [m.name for m in modes.MODES["tensorflow"]] == ["graph", "compiled"]
    assert [m.name for m in modes.MODES["jax"]] == ["compiled"] and [m.name for m in modes.MODES["chainer"]] == ["eager"]
    assert [m.name for m in modes.MODES["paddle"]] == ["eager", "graph"]  # paddle.jit.to_static
    assert [m.name for m in modes.MODES["keras-torch"]] == ["eager", "compiled"]  # jit_compile=True: torch.compile
    assert modes.default("tensorflow") == "graph" and modes.resolve("tensorflow", "") == "graph"
    for name in ("mxnet", "mindspore"):  # a second mode added after the default: old keys and rows unchanged
        assert [m.name for m in modes.MODES[name]] == ["graph", "eager"] and modes.resolve(name, "") == "graph"
    assert [m.name for m in modes.MODES["mxnet-module"]] == ["graph"]
    assert "mxnet-module has no eager mode" in modes.unsupported("mxnet-module", "eager")


def test_a_mode_a_framework_does_not_declare_is_unsupported_with_a_reason():
    from workloads.common import modes

    assert modes.unsupported("pytorch", "compiled") is None
    reason = modes.unsupported("chainer", "compiled")
    assert reason.startswith("chainer has no compiled mode: its rows run eager (") and "no graph mode" in reason
    assert "jax has no eager mode" in modes.unsupported("jax", "eager")
    with pytest.raises(modes.ModeError, match="unknown mode 'jit'; choose from eager, graph, compiled$"):
        modes.unsupported("jax", "jit")


def test_the_default_matrix_runs_each_frameworks_default_and_compiled_mode():
    default = matrix.load(None, REGISTRY)
    cells = [c for c in default.cells(REGISTRY) if c.variant == "cpu" and c.workload == "cnn" and c.repeat == 0]
    by_framework = {}
    for cell in cells:
        by_framework.setdefault(cell.framework, []).append(cell.mode)
    assert by_framework["pytorch"] == ["eager", "compiled"] and by_framework["tensorflow"] == ["graph", "compiled"]
    assert by_framework["keras-tf"] == ["graph", "compiled"] and by_framework["chainer"] == ["eager"]
    assert by_framework["jax"] == ["compiled"] and by_framework["paddle"] == ["eager"]  # to_static when asked
    assert by_framework["keras-torch"] == ["eager", "compiled"]
    # a default mode and a compiled one: MXNet's and MindSpore's graph (their default) alone, their eager
    # mode when asked; MXNet's Module API is graph only
    assert by_framework["mxnet"] == ["graph"] and by_framework["mindspore"] == ["graph"]
    asked = matrix.narrow(matrix.load(None, REGISTRY), REGISTRY, names=["mxnet", "mindspore"], modes=["default", "eager"],
                          workloads=["cnn"], precisions=["fp32"], repeat=1)
    assert [(c.framework, c.mode) for c in asked.cells(REGISTRY) if c.variant == "cpu"] == [
        ("mxnet", "graph"), ("mxnet", "eager"), ("mindspore", "graph"), ("mindspore", "eager")]
    assert by_framework["mxnet-module"] == ["graph"]
    assert "pytorch__cpu__cnn__fp32__compiled__full__real__r0" in {c.key for c in cells}  # the key names the mode


def test_modes_from_the_command_line_go_to_every_framework_and_the_file_may_narrow_them():
    parsed = matrix.narrow(matrix.parse(GOOD, REGISTRY), REGISTRY, names=["pytorch", "chainer"], modes=["compiled"],
                           workloads=["cnn"], precisions=["fp32"], repeat=1)
    assert [(c.framework, c.mode) for c in parsed.cells(REGISTRY)] == [("pytorch", "compiled"), ("chainer", "compiled")]
    narrowed = matrix.parse(GOOD.replace('variants = ["cpu"]', 'variants = ["cpu"]\nmodes = ["compiled"]'), REGISTRY)
    assert {c.mode for c in narrowed.cells(REGISTRY)} == {"compiled"}
    with pytest.raises(UserError, match=r"m.toml \[defaults\]: unknown mode 'jit'; choose from eager, graph, compiled, default"):
        matrix.parse("[defaults]\nmodes = ['jit']\n[frameworks.pytorch]\n", REGISTRY, source="m.toml")
    with pytest.raises(UserError, match="command line: unknown mode 'xla'"):
        matrix.narrow(matrix.parse(GOOD, REGISTRY), REGISTRY, modes=["xla"])


def test_the_default_keyword_runs_each_frameworks_own_default_mode_once():
    names = ["pytorch", "tensorflow", "jax", "mindspore"]
    quick = matrix.narrow(matrix.parse(GOOD, REGISTRY), REGISTRY, names=names, modes=["default"], workloads=["cnn"],
                          precisions=["fp32"], repeat=1)
    assert [(c.framework, c.mode) for c in quick.cells(REGISTRY)] == [
        ("pytorch", "eager"), ("tensorflow", "graph"), ("jax", "compiled"), ("mindspore", "graph")]
    both = matrix.narrow(matrix.parse(GOOD, REGISTRY), REGISTRY, names=names, modes=["default", "compiled"],
                         workloads=["cnn"], precisions=["fp32"], repeat=1)
    assert [(c.framework, c.mode) for c in both.cells(REGISTRY)] == [  # JAX's default is its compiled mode: once
        ("pytorch", "eager"), ("pytorch", "compiled"), ("tensorflow", "graph"), ("tensorflow", "compiled"),
        ("jax", "compiled"), ("mindspore", "graph"), ("mindspore", "compiled")]
    in_the_file = matrix.parse(GOOD.replace('variants = ["cpu"]', 'variants = ["cpu"]\nmodes = ["default"]'), REGISTRY)
    assert {c.mode for c in in_the_file.cells(REGISTRY)} == {"eager"}
