"""The PyTorch row's fairness rules (docs/FAIRNESS.md), checked on the real PyTorch in its cached CPU environment.

tests/support/fairness_probes.py runs there (one process for this module) and reports what the workloads
did; these tests check it. They skip where the pytorch/cpu environment has not been built. No
wall-clock figure is asserted.
"""
import pytest

from support.fairness_probes import facts
from workloads.common import canonical

pytestmark = pytest.mark.e2e  # the real PyTorch, in its cached environment (skipped where it is not built)


@pytest.fixture(scope="module")
def pytorch():
    return facts("pytorch")


@pytest.mark.parametrize("workload", ["cnn", "resnet50"])
def test_channels_last_gives_the_same_outputs_in_nhwc_memory(pytorch, workload):
    """channels_last=on: model and input batches really in NHWC memory, the outputs those of NCHW
    (parity's logits, and after two training steps, or the features) within the parity tolerance."""
    found = pytorch[f"{workload}_channels_last"]
    assert found["layout_off"] == "NCHW" and found["layout_on"] == "NHWC (channels_last)"
    assert found["conv_weights_nhwc"] and found["batch_nhwc"]
    assert found["max_relative"], found
    for name, difference in found["max_relative"].items():
        assert difference <= canonical.PARITY_TOLERANCE, (name, difference)


def test_channels_last_is_unsupported_for_the_gru_as_in_paddle(pytorch):
    found = pytorch["gru_channels_last"]
    assert found["refused"] == "channels_last lays out convolutions (NHWC); the GRU model has none"


@pytest.mark.parametrize("init, canonical_start", [("canonical", True), ("framework", False)])
def test_run_starts_from_the_canonical_weights_unless_told_otherwise(pytorch, init, canonical_start):
    found = pytorch[f"cnn_init_{init}"]
    assert found == {"equals_canonical": canonical_start, "extra": init}


@pytest.mark.parametrize("workload, optimizer", [("cnn", "SGD"), ("gru", "Adam")])
def test_the_optimizer_is_pytorchs_fused_kernel_and_says_so(pytorch, workload, optimizer):
    run = pytorch[f"{workload}_run"]
    assert run["status"] == "ok", run["reason"]
    assert run["extras"]["optimizer"].startswith(f"torch.optim.{optimizer}(fused=True)")
    assert run["extras"]["init"] == "canonical"


def test_gru_kernel_is_read_from_what_ran(pytorch):
    """On the CPU nn.GRU runs ATen's native GRU (no cuDNN, no oneDNN GRU): the autograd node says so."""
    kernel = pytorch["gru_run"]["extras"]["gru_kernel"]
    assert kernel.startswith("fused-cpu: ATen's native CPU GRU") and "over 20 time steps" in kernel
    assert "autograd node StackBackward0" in kernel


def test_the_compiled_gru_is_a_loop_over_one_compiled_step_from_the_same_start(pytorch):
    """docs/FAIRNESS.md, modes-compared: the compiled mode's GRU is the same parameters run as a
    Python loop over one torch.compile'd step (runtime.StepCompiledGRU): the same first loss as
    nn.GRU's (the same start, no dropout), the kernel read from what ran, and each graph compiled
    once: the embedding, the GRU step and the dense layer, for training and again for evaluation
    (another grad mode, the same code), none of them twice."""
    eager, compiled = pytorch["gru_run"], pytorch["gru_compiled_run"]
    assert compiled["status"] == "ok", compiled["reason"]
    kernel = compiled["extras"]["gru_kernel"]
    assert kernel.startswith("compiled-step: a Python loop over 20 time steps of one torch.compile'd (inductor) "
                             "GRU step") and "autograd node CompiledFunctionBackward" in kernel, kernel
    assert len(compiled["traces"]) == 6 and set(compiled["traces"].values()) == {1}, compiled["traces"]
    assert compiled["first_loss"] == pytest.approx(eager["first_loss"], rel=1e-5)


def test_inductors_own_setup_is_timed_apart_so_the_first_step_holds_the_models_compilation(pytorch):
    """docs/FAIRNESS.md, modes-compared: inductor's setup, the same for every model (its precompiled
    header among it), runs in the compiled cell's compiler_setup phase before the model is built; the
    model's graphs still compile in the first step (each counted once there); an eager cell has no
    such phase. The header is a file in the probe's own temporary folder, its time against the spans."""
    found, compiled, eager = pytorch["compiled_setup"], pytorch["gru_compiled_run"], pytorch["gru_run"]
    assert found["headers"] >= 1 and found["in_setup"] == found["before_the_first_step"] == found["headers"], found
    assert "compiler_setup" in compiled["phases"] and "compiler_setup" not in eager["phases"]
    assert compiled["traces"] and set(compiled["traces"].values()) == {1}


def test_the_compiled_gru_keeps_the_forward_hook_contract_of_nn_gru(pytorch):
    """A forward hook's returned value replaces the layer's outputs, and a removed hook runs no more,
    in runtime.StepCompiledGRU (whose hooks run inside its own forward) as in nn.GRU."""
    expected = {"replaced": True, "removed": True}
    assert pytorch["gru_forward_hook"] == {"eager": expected, "compiled": expected}


def test_tf32_is_not_applicable_on_the_cpu(pytorch):
    assert pytorch["cnn_run"]["extras"]["tf32"] == "n/a (CPU)"
    assert "allow_tf32" not in pytorch["cnn_run"]["extras"]


def test_host_copy_of_bf16_features_is_float32(pytorch):
    assert pytorch["to_host_bf16"] == "float32"
