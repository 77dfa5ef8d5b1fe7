"""The GRU workload: a sentiment classifier trained on IMDB (the study's settings)."""
from dataclasses import dataclass  # novermin
from typing import Optional

from workloads.common.declaration import (FIRST_STEP, SAMPLES_PER_S, STEADY_SAMPLES_PER_S, TEST_ACCURACY, TOKENS,
                                          TRAIN_TIME, TRAINING, Workload)
from workloads.common.flops import FlopTrace


@dataclass(frozen=True)
class GRUSettings:
    """GRU sentiment classifier on IMDB (training)."""

    vocabulary: int = 30_000
    sequence_length: int = 150
    embedding_size: int = 125
    hidden_size: int = 100
    classes: int = 2
    start_char: int = 1
    oov_char: int = 2
    index_from: int = 3
    learning_rate: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    batch_size: int = 64
    epochs: int = 3
    max_train_batches: Optional[int] = None
    max_eval_batches: Optional[int] = None
    parameter_count: int = 3_818_302  # cuDNN-style GRU: two bias vectors per gate


def canonical_layers(layers, s: GRUSettings) -> None:
    """The parity check's canonical parameters, layer by layer (workloads/common/canonical.py)."""
    layers.embedding("embedding", s.vocabulary, s.embedding_size)
    layers.gru("gru", s.embedding_size, s.hidden_size)
    layers.dense("dense", s.hidden_size, s.classes)


def flop_model(s: GRUSettings) -> FlopTrace:
    """The forward pass in shapes (workloads/common/flops.py): FLOPs per sample."""
    trace = FlopTrace((s.sequence_length,))
    trace.embedding(s.embedding_size)
    trace.gru(s.hidden_size)
    trace.dense(s.classes)
    return trace


WORKLOAD = Workload(
    name="gru",
    title="GRU — IMDB sentiment training",
    kind=TRAINING,
    order=3,
    settings=GRUSettings,
    # smoke: 8 training batches (7 timed after the first step) and 2 evaluation batches: eight steps
    # leave the GRU at chance whatever the evaluation's size (the CNN's eight evaluation batches show
    # its first steps beat chance), and a GRU's evaluation costs as much as its training on a CPU
    smoke=dict(epochs=1, max_train_batches=8, max_eval_batches=2),
    metrics=(STEADY_SAMPLES_PER_S, FIRST_STEP, TRAIN_TIME, SAMPLES_PER_S, TEST_ACCURACY),
    headline="steady_samples_per_s",
    throughput="samples_per_s",
    steady="steady_samples_per_s",
    dataset="imdb",
    parity_batch=8,
    parity_input=TOKENS,
    parity_outputs=("logits", "logits_after_training"),
    canonical_layers=canonical_layers,
    flop_model=flop_model,
    accuracy_target=0.86,  # the study's figure after its epochs on the real data
    accuracy_tolerance=0.03,
    description="embedding 30k x 125, GRU(100), dense 2, Adam 1e-3, batch 64, 3 epochs",
)
