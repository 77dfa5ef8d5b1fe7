"""FLOPs per sample, counted from a workload's model definition, never typed in.

Each workload's declaration describes its forward pass in shapes (``flop_model(settings)`` in
`workloads/<workload>/__init__.py` starts a FlopTrace at its input's shape and calls its methods
below layer by layer, as its frameworks' models do); the trace follows the activation's shape and counts what the usual MFU convention counts (the one
PyTorch's ``torch.utils.flop_counter.FlopCounterMode`` counts, which a test holds this to):

- a convolution: 2 x (output elements) x (input channels x kernel height x kernel width);
- a matrix product (a dense layer, a GRU's input and recurrent projections): 2 x M x K x N;
- nothing else: biases, activations, pooling, batch norm, dropout, the embedding lookup and the
  loss are memory-bound elementwise work that no peak figure is quoted for.

Training counts the forward pass and the backward pass: for every convolution and product, the
gradient of its weights (as many FLOPs as its forward) and the gradient of its input (as many
again), except where the input needs no gradient: the images a first convolution reads, and the
GRU's initial state at step 0 (zeros, no parameter behind them). So a training sample is about 3x
its forward pass. Standard library only (Python 3.6): every image imports it.
"""
from typing import Optional, Tuple

from workloads.common.declaration import TRAINING


class FlopTrace:
    """One sample's forward pass, walked by its shapes: ``shape`` is (channels, height, width) for
    images, (steps, features) for sequences, (features,) after flattening."""

    def __init__(self, shape: Tuple[int, ...]):
        self.shape = tuple(shape)
        self.requires_grad = False  # the input: data, not a function of any parameter
        self.forward = 0
        self.weight_gradients = 0
        self.input_gradients = 0
        self._saved = []  # type: List[Tuple[Tuple[int, ...], bool]]

    # --- what is counted ------------------------------------------------------------------------

    def _product(self, flops: int, input_needs_gradient: Optional[bool] = None) -> None:
        """A convolution or matrix product of `flops` forward FLOPs, whose weights are trained."""
        self.forward += flops
        self.weight_gradients += flops
        if self.requires_grad if input_needs_gradient is None else input_needs_gradient:
            self.input_gradients += flops

    def conv(self, out_channels: int, size: int, stride: int = 1, padding: Optional[int] = None) -> None:
        """A square convolution; ``padding`` None is "same" (size // 2)."""
        channels, height, width = self.shape
        padding = size // 2 if padding is None else padding
        height = (height + 2 * padding - size) // stride + 1
        width = (width + 2 * padding - size) // stride + 1
        self._product(2 * out_channels * height * width * channels * size * size)
        self.shape, self.requires_grad = (out_channels, height, width), True

    def dense(self, out_features: int) -> None:
        (features,) = self.shape
        self._product(2 * features * out_features)
        self.shape, self.requires_grad = (out_features,), True

    def embedding(self, size: int) -> None:
        """A lookup (not counted); its output depends on a trained table, so it needs a gradient."""
        (steps,) = self.shape
        self.shape, self.requires_grad = (steps, size), True

    def gru(self, hidden: int) -> None:
        """A one-layer GRU over every step, keeping the last step's output: per step, the input
        projection (features -> 3 x hidden) and the recurrent one (hidden -> 3 x hidden)."""
        steps, features = self.shape
        gates = 3 * hidden
        self._product(steps * 2 * features * gates)
        self._product(2 * hidden * gates, input_needs_gradient=False)  # step 0 reads h0 = 0
        self._product((steps - 1) * 2 * hidden * gates, input_needs_gradient=True)
        self.shape, self.requires_grad = (hidden,), True

    # --- what only changes the shape ------------------------------------------------------------

    def pool(self, size: int, stride: int, padding: int = 0) -> None:
        channels, height, width = self.shape
        self.shape = (channels, (height + 2 * padding - size) // stride + 1, (width + 2 * padding - size) // stride + 1)

    def global_pool(self) -> None:
        self.shape = (self.shape[0],)

    def flatten(self) -> None:
        size = 1
        for extent in self.shape:
            size *= extent
        self.shape = (size,)

    def branch(self) -> None:
        """Remember the activation here: a residual block's shortcut starts from it (``shortcut``)."""
        self._saved.append((self.shape, self.requires_grad))

    def shortcut(self) -> Tuple[Tuple[int, ...], bool]:
        """Walk the shortcut from the remembered activation; ``rejoin(main)`` comes back. Returns the
        main path's end, to hand to ``rejoin``."""
        main = (self.shape, self.requires_grad)
        self.shape, self.requires_grad = self._saved[-1]
        return main

    def rejoin(self, main: Optional[Tuple[Tuple[int, ...], bool]] = None) -> None:
        """The residual sum: the block's output has the main path's shape (an identity shortcut
        adds nothing to count)."""
        self._saved.pop()
        if main is not None:
            self.shape, self.requires_grad = main

    # --- the totals -----------------------------------------------------------------------------

    @property
    def training(self) -> int:
        """Forward and backward, per sample."""
        return self.forward + self.weight_gradients + self.input_gradients


def per_sample(workload) -> FlopTrace:
    """A declared workload's (workloads.common.declaration.Workload) FLOPs per sample, counted."""
    return workload.flop_model(workload.settings_for("full"))  # the profile never changes the model


def headline_rate(workload) -> str:
    """The throughput metric a result's achieved FLOP/s is of: a training workload's steady rate
    (every step after the first: compilation and autotuning are not the model's FLOPs), an
    inference workload's rate over its timed pass."""
    return workload.steady or workload.throughput


def headline_per_sample(workload) -> int:
    """FLOPs per sample of the phase ``headline_rate`` times: forward and backward for training,
    forward alone for inference."""
    trace = per_sample(workload)
    return trace.training if workload.kind == TRAINING else trace.forward


def record(workload, result) -> None:
    """Fill in ``result.metrics``' FLOPs per sample and achieved FLOP/s (the measured headline
    rate times the counted FLOPs): what a % of peak divides by the device's peak. Left None where
    the workload counts no FLOPs or the rate was not measured (docs/MEASURED.md, FLOP/s)."""
    if workload.flop_model is None:
        return
    metrics = result.metrics
    metrics.flops_per_sample = float(headline_per_sample(workload))
    rate = workload.metric(headline_rate(workload)).value(result)
    if rate is not None:
        metrics.achieved_flops_per_s = float(rate) * metrics.flops_per_sample
