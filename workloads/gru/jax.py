"""GRU sentiment classifier trained on IMDB, in JAX: a Flax linen model, an Optax optimizer, one jax.jit step.

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/gru/__init__.py. JAX has no fused cuDNN GRU (FAIRNESS.md: fused-rnn cannot apply): the cell is
written out in the canonical reset-after form and run by jax.lax.scan over time-major input, with
the input projections of all time steps hoisted out of the loop into one matmul. Flax's own
nn.GRUCell is reset-after too, but with four bias vectors, not six (the reset and update gates
have an input bias only): 200 parameters fewer, and different gradient steps than the cuDNN /
PyTorch model; it also runs six separate matmuls per time step.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from workloads.runtime import jax as runtime

MATCHED = (
    "GRU written out in the canonical (cuDNN / PyTorch) reset-after form, gate order r, z, n, two bias "
    "vectors per gate: canonical kernels (in, 3*hidden) and biases as is (flax.linen.GRUCell has no "
    "recurrent bias on r and z)",
    "time-major (TNC) scan; the last time step's output feeds the dense layer; no masking of padding",
    "optax.adam(eps=1e-8, eps_root=0) adds epsilon after the square root of v-hat, as PyTorch",
    "Keras' initialisers, as the Keras rows: Glorot-uniform kernel, orthogonal recurrent kernel, zero "
    "biases, uniform(-0.05, 0.05) embedding",
    "token indices and labels int32 (JAX's default integer without x64)",
)


# --- model --------------------------------------------------------------------------------------

class GRU(nn.Module):  # phrase: gru
    """One GRU layer over (time, batch, features); returns the last time step's output (batch, hidden)."""

    hidden: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x):
        features, hidden = x.shape[-1], self.hidden
        kernel = self.param("kernel", nn.initializers.glorot_uniform(), (features, 3 * hidden))
        recurrent_kernel = self.param("recurrent_kernel", nn.initializers.orthogonal(), (hidden, 3 * hidden))
        input_bias = self.param("input_bias", nn.initializers.zeros, (3 * hidden,))
        recurrent_bias = self.param("recurrent_bias", nn.initializers.zeros, (3 * hidden,))
        x, kernel, recurrent_kernel, input_bias, recurrent_bias = nn.dtypes.promote_dtype(
            x, kernel, recurrent_kernel, input_bias, recurrent_bias, dtype=self.dtype)
        projected = x @ kernel + input_bias  # every time step's input projection in one matmul

        def step(h, projected_t):
            xr, xz, xn = jnp.split(projected_t, 3, axis=-1)
            hr, hz, hn = jnp.split(h @ recurrent_kernel + recurrent_bias, 3, axis=-1)
            r = nn.sigmoid(xr + hr)
            z = nn.sigmoid(xz + hz)
            n = jnp.tanh(xn + r * hn)  # reset-after: r scales (h U_n + b_hn)
            h = (1 - z) * n + z * h
            return h, None

        h0 = jnp.zeros((x.shape[1], hidden), x.dtype)
        last, _ = jax.lax.scan(step, h0, projected)  # phrase: last-time-step
        return last


class GRUClassifier(nn.Module):
    s: object
    dtype: object = jnp.float32  # compute dtype; parameters stay float32

    @nn.compact
    def __call__(self, tokens):  # tokens: (batch, time)
        s = self.s
        embed = nn.Embed(s.vocabulary, s.embedding_size, embedding_init=_uniform(0.05), dtype=self.dtype,  # phrase: embedding
                         name="embedding")
        x = embed(jnp.transpose(tokens))  # time-major (TNC), the RNN layout of cuDNN (FAIRNESS.md: layouts)
        x = GRU(s.hidden_size, self.dtype, name="gru")(x)
        return nn.Dense(s.classes, kernel_init=nn.initializers.glorot_uniform(), dtype=self.dtype,
                        name="dense")(x).astype(jnp.float32)  # logits: softmax lives in the loss


def _uniform(limit):
    """uniform(-limit, limit), Keras' embedding initialiser (Flax's is a scaled normal)."""
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -limit, limit)
    return init


def init_params(model, run):
    tokens = jnp.zeros((1, run.settings.sequence_length), jnp.int32)
    return runtime.initial_variables(run, model, tokens)["params"]


OPTIMIZER = "optax.adam(eps_root=0), epsilon after sqrt(v_hat) as PyTorch"


def make_optimizer(s) -> optax.GradientTransformation:
    # optax adds epsilon after the square root of v-hat (eps_root=0), as PyTorch and the Adam paper.
    return optax.adam(s.learning_rate, b1=s.beta1, b2=s.beta2, eps=s.epsilon, eps_root=0.0)  # phrase: adam


def make_loss(model):
    def loss_of(params, tokens, labels, dropout_key):  # no dropout in this model
        logits = model.apply({"params": params}, tokens)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    return loss_of


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(params: dict, canonical_params: dict) -> dict:
    """Everything is already in the canonical layout (gates r, z, n; kernels (in, out)). Returns new params."""
    array = lambda name: jnp.asarray(canonical_params[name])  # noqa: E731
    loaded = {
        "embedding": {"embedding": array("embedding.embeddings")},
        "gru": {"kernel": array("gru.kernel"), "recurrent_kernel": array("gru.recurrent_kernel"),
                "input_bias": array("gru.input_bias"), "recurrent_bias": array("gru.recurrent_bias")},
        "dense": {"kernel": array("dense.kernel"), "bias": array("dense.bias")},
    }
    assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(params)
    for new, old in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(params)):
        assert new.shape == old.shape, (new.shape, old.shape)
    return loaded


# --- run ----------------------------------------------------------------------------------------

class GRUWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        model = GRUClassifier(run.settings, dtype=policy.compute_dtype)
        return runtime.Model(model, init_params(model, run), make_loss(model))

    def load_canonical(self, model, params):
        model.params = load_canonical(model.params, params)

    def make_optimizer(self, model, run, policy):
        return make_optimizer(run.settings)

    def describe_optimizer(self):
        return OPTIMIZER

    def train(self, run, policy, model, optimizer, data):
        # the model's only recurrence: lax.scan cannot fall back to, or be replaced by, another kernel
        run.set_provenance(extras={"gru_kernel": f"scan: lax.scan over {run.settings.sequence_length} time "
                                                 "steps, an XLA while loop inside the jitted step (JAX has no "
                                                 "cuDNN GRU)"})
        super().train(run, policy, model, optimizer, data)


IMPLEMENTATION = GRUWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
