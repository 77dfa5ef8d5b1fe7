"""GRU sentiment classifier trained on IMDB, in TensorFlow's own low-level API (no Keras layers).

embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
workloads/gru/__init__.py. The GRU cell is written out (cuDNN's reset-after form) and run
over time-major input with tf.scan; on a GPU the same weights feed cuDNN's fused GRU kernel
(tf.raw_ops.CudnnRNNV3; FAIRNESS.md: fused-rnn) unless XLA is on (XLA cannot compile that op).
Adam's update is TensorFlow's own fused op, tf.raw_ops.ResourceApplyAdam, given the epsilon that
makes its form equal PyTorch's.
"""
import tensorflow as tf

from workloads.runtime import tensorflow as runtime

MATCHED = (
    "GRU written out in cuDNN's reset-after form, gates r, z, n, two bias vectors per gate: canonical as is",
    "on the CPU (and with XLA) a tf.scan over time steps, not a fused kernel; on a GPU cuDNN's fused GRU",
    "time-major (TNC) input to the GRU; the last time step's output feeds the dense layer",
    "Adam with epsilon after the square root of v-hat: the fused ResourceApplyAdam, whose epsilon-hat form "
    "equals it with epsilon passed as eps*sqrt(1-beta2^t); the embedding's sparse gradient made dense",
    "Glorot-uniform input kernels, orthogonal recurrent kernel, zero biases (Keras' defaults)",
)


# --- model --------------------------------------------------------------------------------------

def orthogonal(rows: int, columns: int) -> tf.Variable:
    q, r = tf.linalg.qr(tf.random.normal((max(rows, columns), min(rows, columns))))
    q *= tf.sign(tf.linalg.diag_part(r))
    return tf.Variable(q if rows >= columns else tf.transpose(q))


class GRUClassifier(tf.Module):
    def __init__(self, s, fused: bool):
        super().__init__()
        self.fused, hidden = fused, s.hidden_size  # fused: cuDNN's kernel (GPU only)
        self.traced_kernel = None  # "cudnn" or "scan": what the traced graph holds, set while tracing
        self.embeddings = tf.Variable(tf.random.uniform((s.vocabulary, s.embedding_size), -0.05, 0.05))
        # Canonical layout: x @ kernel, columns [reset | update | new]; two bias vectors per gate.
        self.kernel = runtime.glorot_uniform((s.embedding_size, 3 * hidden), s.embedding_size, 3 * hidden)
        self.recurrent_kernel = orthogonal(hidden, 3 * hidden)
        self.input_bias, self.recurrent_bias = runtime.zeros((3 * hidden,)), runtime.zeros((3 * hidden,))
        self.dense_kernel = runtime.glorot_uniform((hidden, s.classes), hidden, s.classes)
        self.dense_bias = runtime.zeros((s.classes,))

    def gru_step(self, h, x_projected):  # phrase: gru
        """One time step; x_projected = x @ kernel + input_bias, computed for all steps at once."""
        x_r, x_z, x_n = tf.split(x_projected, 3, axis=1)
        h_r, h_z, h_n = tf.split(tf.matmul(h, self.recurrent_kernel) + self.recurrent_bias, 3, axis=1)
        r = tf.sigmoid(x_r + h_r)
        z = tf.sigmoid(x_z + h_z)
        n = tf.tanh(x_n + r * h_n)  # reset-after: r scales (h U_n + b_hn)
        return (1.0 - z) * n + z * h

    def gru_scan(self, x):  # x: (time, batch, features)
        steps, batch = tf.shape(x)[0], tf.shape(x)[1]
        projected = tf.matmul(tf.reshape(x, [steps * batch, -1]), self.kernel) + self.input_bias
        projected = tf.reshape(projected, [steps, batch, -1])
        h0 = tf.zeros([batch, self.recurrent_kernel.shape[0]])
        return tf.scan(self.gru_step, projected, initializer=h0)  # (time, batch, hidden)

    def gru_cudnn(self, x, training):
        """cuDNN's GRU takes one flat parameter vector: per-gate (out, in) matrices, then biases."""
        steps, batch, hidden = tf.shape(x)[0], tf.shape(x)[1], self.recurrent_kernel.shape[0]
        matrices = tf.split(self.kernel, 3, axis=1) + tf.split(self.recurrent_kernel, 3, axis=1)  # r, z, n
        biases = tf.split(self.input_bias, 3) + tf.split(self.recurrent_bias, 3)
        params = tf.concat([tf.reshape(tf.transpose(m), [-1]) for m in matrices] + biases, axis=0)
        outputs, *_ = tf.raw_ops.CudnnRNNV3(
            input=x, input_h=tf.zeros([1, batch, hidden]), input_c=0, params=params,
            sequence_lengths=tf.fill([batch], steps), rnn_mode="gru", is_training=training, time_major=True)
        return outputs

    def __call__(self, tokens, training: bool = False):  # tokens: (batch, time)
        x = tf.gather(self.embeddings, tf.transpose(tokens))  # time-major (TNC; FAIRNESS.md: layouts)  # phrase: embedding
        self.traced_kernel = "cudnn" if self.fused else "scan"
        outputs = self.gru_cudnn(x, training) if self.fused else self.gru_scan(x)
        return tf.matmul(outputs[-1], self.dense_kernel) + self.dense_bias  # the last time step's output  # phrase: last-time-step


# --- loss and optimizer -------------------------------------------------------------------------

loss_function = runtime.cross_entropy  # mean softmax cross-entropy of the logits


class Adam(tf.Module):
    """Adam as PyTorch and Keras compute it: w -= lr * m_hat / (sqrt(v_hat) + eps), run by
    TensorFlow's fused ResourceApplyAdam (one kernel per variable). That op computes
    w -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps_hat), the "epsilon hat" form:
    it equals PyTorch's exactly when eps_hat = eps * sqrt(1 - beta2^t), passed anew every step."""

    description = ("tf.raw_ops.ResourceApplyAdam (fused: one kernel per variable), epsilon passed as "
                   "eps*sqrt(1-beta2^t): PyTorch's epsilon-after-sqrt(v_hat) form")

    def __init__(self, variables, s):
        super().__init__()
        self.learning_rate, self.beta1, self.beta2, self.epsilon = s.learning_rate, s.beta1, s.beta2, s.epsilon
        self.step = tf.Variable(0.0, trainable=False)
        self.m = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]
        self.v = [tf.Variable(tf.zeros_like(v), trainable=False) for v in variables]

    def apply(self, gradients, variables):  # phrase: adam
        self.step.assign_add(1.0)
        beta1_power, beta2_power = self.beta1 ** self.step, self.beta2 ** self.step
        epsilon_hat = self.epsilon * tf.sqrt(1.0 - beta2_power)  # PyTorch's form (see the class)
        constant = lambda value: tf.constant(value, tf.float32)  # noqa: E731
        for gradient, m, v, variable in zip(gradients, self.m, self.v, variables):
            tf.raw_ops.ResourceApplyAdam(
                var=variable.handle, m=m.handle, v=v.handle, beta1_power=beta1_power, beta2_power=beta2_power,
                lr=constant(self.learning_rate), beta1=constant(self.beta1), beta2=constant(self.beta2),
                epsilon=epsilon_hat,
                grad=tf.convert_to_tensor(gradient),  # the embedding's IndexedSlices, made dense as PyTorch's
                use_nesterov=False)


# --- canonical weights --------------------------------------------------------------------------

def load_canonical(model: GRUClassifier, params: dict) -> None:
    """The model keeps the canonical layouts and gate order: every array is assigned as is."""
    model.embeddings.assign(params["embedding.embeddings"])
    model.kernel.assign(params["gru.kernel"])
    model.recurrent_kernel.assign(params["gru.recurrent_kernel"])
    model.input_bias.assign(params["gru.input_bias"])
    model.recurrent_bias.assign(params["gru.recurrent_bias"])
    model.dense_kernel.assign(params["dense.kernel"])
    model.dense_bias.assign(params["dense.bias"])


# --- run ----------------------------------------------------------------------------------------

class GRUWorkload(runtime.Training):
    """The steps the scaffold (workloads/common/scaffold.py) runs for this workload."""

    def build_model(self, run, policy):
        return GRUClassifier(run.settings, policy.fused_rnn)

    def load_canonical(self, model, params):
        load_canonical(model, params)

    def make_optimizer(self, model, run, policy):
        return Adam(model.trainable_variables, run.settings)

    def loss_function(self):
        return loss_function

    def train(self, run, policy, model, optimizer, data):
        super().train(run, policy, model, optimizer, data)
        run.set_provenance(extras={"gru_kernel": gru_kernel(model, policy, run.settings)})


def gru_kernel(model: GRUClassifier, policy, s) -> str:
    """The "gru_kernel" extra: what the traced (and run) graphs hold. CudnnRNNV3 has a GPU kernel
    only, so a step holding it ran cuDNN's GRU or failed: there is no silent fallback to detect."""
    if model.traced_kernel == "cudnn":
        return "cudnn: tf.raw_ops.CudnnRNNV3, cuDNN's fused GRU"
    why = "XLA cannot compile CudnnRNNV3" if policy.device == "cuda" else "TensorFlow has no fused CPU GRU kernel"
    how = "compiled by XLA" if policy.xla else "a graph while-loop of per-step ops"
    return f"scan: tf.scan over {s.sequence_length} time steps, {how} ({why})"


IMPLEMENTATION = GRUWorkload()
run, parity = IMPLEMENTATION.run, IMPLEMENTATION.parity  # what `python -m workloads` calls
