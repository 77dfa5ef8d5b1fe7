"""Canonical weights: deterministic, the reference sizes, and the layout conversions on tiny tensors."""
import numpy as np
import pytest

from support.numpy_reference import conv_nchw_oihw, conv_nhwc_hwio
from workloads.common import canonical, declaration, hyperparams


@pytest.mark.parametrize("workload", hyperparams.WORKLOADS)
def test_deterministic_and_the_reference_size(workload):
    first, second = canonical.parameters(workload), canonical.parameters(workload)
    assert first.keys() == second.keys() and all(np.array_equal(first[k], second[k]) for k in first)
    assert canonical.parameter_count(first) == hyperparams.settings(workload, "full").parameter_count
    assert all(a.dtype == np.float32 for a in first.values())
    batch = canonical.parity_batch(workload)
    assert len(batch["x"]) == declaration.get(workload).parity_batch


def test_write_and_load_round_trip_without_pickle(tmp_path):
    canonical.write(tmp_path, "gru")
    weights, batch = canonical.load(tmp_path)
    assert np.array_equal(weights["gru.kernel"], canonical.parameters("gru")["gru.kernel"])
    assert batch["x"].dtype == np.int32 and (batch["x"][:4, -20:] == 0).all()


def test_oihw_to_hwio_gives_the_same_convolution():
    rng = np.random.default_rng(0)
    x, kernel = rng.normal(size=(2, 3, 5, 5)), rng.normal(size=(4, 3, 3, 3))
    expected = conv_nchw_oihw(x, kernel)
    got = conv_nhwc_hwio(x.transpose(0, 2, 3, 1), canonical.oihw_to_hwio(kernel)).transpose(0, 3, 1, 2)
    assert np.allclose(expected, got)


def test_nhwc_flatten_with_permuted_rows_equals_nchw_flatten():
    rng = np.random.default_rng(1)
    features, kernel = rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(3 * 4 * 5, 6))
    expected = features.reshape(2, -1) @ kernel
    got = features.transpose(0, 2, 3, 1).reshape(2, -1) @ canonical.nchw_rows_to_nhwc_rows(kernel, 3, 4, 5)
    assert np.allclose(expected, got)


def test_gate_reorder_and_dense_orientation():
    matrix = np.arange(2 * 9).reshape(2, 9)  # hidden 3: gates r | z | n
    reordered = canonical.gru_gates_rzn_to_zrn(matrix)
    assert np.array_equal(reordered[:, :3], matrix[:, 3:6]) and np.array_equal(reordered[:, 3:6], matrix[:, :3])
    assert np.array_equal(reordered[:, 6:], matrix[:, 6:])
    kernel, x = np.arange(6.0).reshape(2, 3), np.array([[1.0, 2.0]])
    assert np.allclose(x @ kernel, x @ canonical.dense_to_out_in(kernel).T)
