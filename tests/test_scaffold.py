"""The scaffold every workload file shares (workloads/common/scaffold.py), checked framework-free.

The scaffold's order (the device first, the data inside data_load, the model and its canonical
start inside model_build, the loop after), the same start (FAIRNESS.md: same-start) and the parity
check's own build run on a stand-in runtime here; the real frameworks run it in their unit tests
and in tests/test_e2e.py. The workload files are read as text (the host imports no framework):
each fills in the contract with one class whose methods are the contract's, none misspelt.
"""
import ast
import contextlib
from pathlib import Path

import numpy as np
import pytest

from workloads.common import canonical, declaration, scaffold
from workloads.common.harness import Policy, Run, no_wait
from workloads.common.result import Cell

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ROOT / "workloads"


def smoke_run(workload: str, **cell) -> Run:
    return Run(Cell("stand-in", workload, profile="smoke", data="synthetic", **cell), device="cpu")


def open_phases(run: Run) -> list:
    """The phases open at each moment (run.phase wrapped on this one run)."""
    opened, original = [], run.phase

    @contextlib.contextmanager
    def phase(name):
        opened.append(name)
        with original(name):
            yield
        opened.pop()

    run.phase = phase
    return opened


class Recorder:
    """Each step the scaffold calls, with the phase it ran in."""

    def note(self, run, step, value=None):
        self.steps.append((step, tuple(self.opened)))
        return value


class StandInTraining(Recorder, scaffold.Training):
    def __init__(self, opened):
        self.steps, self.opened = [], opened

    def select_device(self, run):
        run.declare_sync(no_wait, "nothing: a stand-in")
        return self.note(run, "select_device", Policy("cpu", run.precision))

    def build_model(self, run, policy):
        return self.note(run, "build_model", {"built": "benchmark"})

    def build_parity_model(self, run, policy, batch):
        return self.note(run, "build_parity_model", {"built": "parity", "batch": len(batch["x"])})

    def load_canonical(self, model, params):
        model["loaded"] = params
        self.note(None, "load_canonical")

    def make_optimizer(self, model, run, policy):
        return self.note(run, "make_optimizer", "optimizer")

    def train(self, run, policy, model, optimizer, data):
        self.trained = (model, optimizer, len(data.x_train))
        self.note(run, "train")

    def parity_steps(self, run, policy, model, optimizer, batch):
        self.note(run, "parity_steps")
        return {"logits": np.zeros(1), "model": model, "optimizer": optimizer}


class StandInFeatures(Recorder, scaffold.FeatureExtraction):
    def __init__(self, opened):
        self.steps, self.opened = [], opened

    def select_device(self, run):
        run.declare_sync(no_wait, "nothing: a stand-in")
        return self.note(run, "select_device", Policy("cpu", run.precision))

    def build_model(self, run, policy):
        return self.note(run, "build_model", {})

    def load_canonical(self, model, params):
        model["loaded"] = params
        self.note(None, "load_canonical")

    def extract(self, run, policy, model, images):
        self.extracted = (model, images.shape)
        self.note(run, "extract")

    def parity_features(self, run, policy, model, batch):
        self.note(run, "parity_features")
        return {"features": np.zeros(1), "model": model}


def test_a_training_cell_runs_the_steps_in_their_phases_from_the_canonical_start():
    run = smoke_run("cnn")
    opened = open_phases(run)
    implementation = StandInTraining(opened)
    implementation.run(run)
    assert implementation.steps == [("select_device", ()), ("build_model", ("model_build",)),
                                    ("load_canonical", ("model_build",)), ("make_optimizer", ("model_build",)),
                                    ("train", ())]
    assert set(run.result.phases) == {"data_load", "model_build"}  # the data: loaded inside data_load
    model, optimizer, samples = implementation.trained
    assert optimizer == "optimizer" and samples == run.settings.max_train_batches * run.settings.batch_size
    assert model["built"] == "benchmark" and run.result.provenance.extras["init"] == "canonical"
    expected = canonical.parameters("cnn")
    assert sorted(model["loaded"]) == sorted(expected)
    assert all(np.array_equal(model["loaded"][name], expected[name]) for name in expected)


def test_init_framework_keeps_the_framework_start_and_loads_nothing():
    run = smoke_run("gru", init="framework")
    implementation = StandInTraining(open_phases(run))
    implementation.run(run)
    assert [step for step, _ in implementation.steps] == ["select_device", "build_model", "make_optimizer", "train"]
    assert "loaded" not in implementation.trained[0] and run.result.provenance.extras["init"] == "framework"


def test_the_parity_check_builds_its_own_model_and_loads_the_given_weights_outside_the_phases():
    run = smoke_run("cnn")
    implementation = StandInTraining(open_phases(run))
    params, batch = {"conv1.kernel": np.ones(2)}, canonical.parity_batch("cnn")
    outputs = implementation.parity(run, params, batch)
    assert implementation.steps == [("select_device", ()), ("build_parity_model", ()), ("load_canonical", ()),
                                    ("make_optimizer", ()), ("parity_steps", ())]
    assert outputs["model"] == {"built": "parity", "batch": len(batch["x"]), "loaded": params}
    assert outputs["optimizer"] == "optimizer" and run.result.phases == {}
    assert "init" not in run.result.provenance.extras  # the parity check always loads the weights it is given


def test_an_inference_cell_extracts_from_random_images_after_the_canonical_start():
    run = smoke_run("resnet50")
    opened = open_phases(run)
    implementation = StandInFeatures(opened)
    implementation.run(run)
    assert implementation.steps == [("select_device", ()), ("build_model", ("model_build",)),
                                    ("load_canonical", ("model_build",)), ("extract", ())]
    model, shape = implementation.extracted
    assert shape[1:] == run.settings.image_shape and run.result.provenance.data_source == "random"
    assert sorted(model["loaded"]) == sorted(canonical.parameters("resnet50"))
    implementation.steps.clear()
    outputs = implementation.parity(smoke_run("resnet50"), {"stem.conv.kernel": np.ones(1)},
                                    canonical.parity_batch("resnet50"))
    assert [step for step, _ in implementation.steps] == ["select_device", "build_model", "load_canonical",
                                                          "parity_features"]
    assert set(outputs["model"]["loaded"]) == {"stem.conv.kernel"}


def test_the_contract_is_enforced_when_a_workload_file_is_imported():
    class Forgetful(scaffold.Training):  # a workload file that forgot load_canonical (and a runtime's loops)
        def build_model(self, run, policy):
            return None

    with pytest.raises(TypeError, match="load_canonical"):
        Forgetful()
    for abstract in (scaffold.Implementation, scaffold.Training, scaffold.FeatureExtraction):
        with pytest.raises(TypeError):
            abstract()


# --- the workload files, read as text --------------------------------------------------------------

def workload_files():
    return sorted(path for name in declaration.declared() for path in (WORKLOADS / name).glob("*.py")
                  if path.name != "__init__.py")


def runtime_source(tree: ast.Module, path: Path) -> Path:
    """The runtime module a workload file imports as `runtime` (a module file, or a package)."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "workloads.runtime":
            for alias in node.names:
                if alias.asname == "runtime":
                    module = WORKLOADS / "runtime" / alias.name
                    return module / "__init__.py" if module.is_dir() else module.with_suffix(".py")
    raise AssertionError(f"{path} does not import its runtime as `runtime`")


def class_node(tree: ast.Module, class_name: str) -> ast.ClassDef:
    [node] = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name]
    return node


def methods(tree: ast.Module, class_name: str) -> set:
    return {item.name for item in class_node(tree, class_name).body if isinstance(item, ast.FunctionDef)}


def scaffold_base(tree: ast.Module, class_name: str):
    """The scaffold class a runtime's class derives from (scaffold.Training, scaffold.TrainingWithLoss...)."""
    [base] = [ast.unparse(base) for base in class_node(tree, class_name).bases]
    assert base.startswith("scaffold."), base
    return getattr(scaffold, base[len("scaffold."):])


def contract_methods(kind_class) -> set:
    return {name for klass in kind_class.__mro__ for name, value in vars(klass).items() if callable(value)}


@pytest.mark.parametrize("path", workload_files(), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_workload_file_fills_in_the_contract_with_one_class(path):
    """The file's run and parity are its IMPLEMENTATION's (no scaffold of its own), whose class
    derives from its runtime's class for the workload's kind and overrides only the contract's
    methods (a misspelt hook would silently never run), in a `# --- run` section after the model
    and the canonical weights."""
    text = path.read_text()
    tree = ast.parse(text)
    kind = "Training" if declaration.get(path.parent.name).kind == declaration.TRAINING else "FeatureExtraction"
    assert not [node.name for node in tree.body if isinstance(node, ast.FunctionDef)
                and node.name in ("run", "parity")], "the scaffold's run and parity are not written out here"
    entry = [node for node in tree.body if isinstance(node, ast.Assign)
             and ast.unparse(node) == "run, parity = (IMPLEMENTATION.run, IMPLEMENTATION.parity)"]
    assert entry, "run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity"
    [implementation] = [node.value for node in tree.body if isinstance(node, ast.Assign)
                        and [ast.unparse(target) for target in node.targets] == ["IMPLEMENTATION"]]
    runtime_tree = ast.parse(runtime_source(tree, path).read_text())
    runtime_methods = methods(runtime_tree, kind)
    base = contract_methods(scaffold_base(runtime_tree, kind))
    made = ast.unparse(implementation.func)
    if made == f"runtime.{kind}":  # the runtime's class whole: a workload with nothing of its own (ONNX Runtime)
        assert runtime_methods >= {"build_model", "load_canonical"}
        assert "# --- run" in text
        return
    [klass] = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == made]
    assert [ast.unparse(b) for b in klass.bases] == [f"runtime.{kind}"]
    overridden = methods(tree, made)
    assert {"build_model", "load_canonical"} <= overridden
    assert overridden <= base | runtime_methods, sorted(overridden - base - runtime_methods)
    markers = [line for line in text.splitlines() if line.startswith("# --- ")]
    names = [marker[len("# --- "):].rstrip("- ") for marker in markers]
    assert names.index("model") < names.index("canonical weights") < names.index("run"), names
    assert text.index(f"class {made}(") > text.index(markers[names.index("run")])


def test_every_python_runtime_derives_its_classes_from_the_scaffold():
    runtimes = [path for path in sorted((WORKLOADS / "runtime").glob("*.py")) if path.name != "__init__.py"]
    runtimes += sorted((WORKLOADS / "runtime").glob("*/__init__.py"))
    for path in runtimes:
        tree = ast.parse(path.read_text())
        classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)
                   and node.name in ("Training", "FeatureExtraction")}
        assert classes, path
        for kind, klass in classes.items():
            assert issubclass(scaffold_base(tree, kind), getattr(scaffold, kind)), (path, kind)


def test_a_runtime_that_declares_no_device_sync_is_refused_before_any_work():
    """Every runtime declares its sync and what it waits for (FAIRNESS.md: explicit-sync): one that
    does not is refused by the scaffold, not timed with no wait at all."""
    class Silent(StandInTraining):
        def select_device(self, run):
            return self.note(run, "select_device", Policy("cpu", run.precision))

    run = smoke_run("cnn")
    implementation = Silent(open_phases(run))
    with pytest.raises(TypeError, match=r"Silent.select_device declared no device sync: call run.declare_sync"):
        implementation.run(run)
    assert [step for step, _ in implementation.steps] == ["select_device"]
    with pytest.raises(TypeError, match="declared no device sync"):
        implementation.parity(run, {}, {})


def test_a_declared_sync_is_what_the_clocks_wait_with_and_is_recorded():
    run = smoke_run("cnn")
    waits = []
    run.declare_sync(lambda: waits.append(1), "a list growing by one")
    with run.phase("data_load"):
        pass
    assert len(waits) == 2 and run.result.provenance.extras["sync"] == "a list growing by one"


RUNTIMES = sorted((WORKLOADS / "runtime").glob("*.py")) + sorted((WORKLOADS / "runtime" / "keras").glob("*.py"))


def test_every_runtime_declares_its_sync_and_none_assigns_it():
    """Read as text (the host imports no framework): each runtime module that picks a device declares
    a sync (`run.declare_sync`, or the Keras backends' `device_sync`), and none sets `run.sync` itself."""
    undeclared, assigned = [], []
    for path in RUNTIMES:
        source = path.read_text()
        if "def select_device(run" in source and "declare_sync(" not in source:
            undeclared.append(path.name)
        if "run.sync =" in source:
            assigned.append(path.name)
    assert not undeclared and not assigned, (undeclared, assigned)
    backends = (WORKLOADS / "runtime" / "keras" / "backends.py").read_text()
    assert backends.count("def device_sync(self, device: str)") == 3  # TensorFlow, JAX, torch
    knet = (WORKLOADS / "resnet50" / "knet.jl").read_text()
    assert knet.count("declare_sync!(run, ") == 2  # the GPU and the CPU
