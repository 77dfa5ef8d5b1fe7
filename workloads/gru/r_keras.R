# GRU sentiment classifier trained on IMDB, in R: Keras 3 on TensorFlow through reticulate.
#
# embedding(30000, 125) -> GRU(100) -> last time step -> dense(2), Adam, settings from
# workloads/gru/__init__.py (run$settings). The same model as workloads/gru/keras.py, written in R;
# the GRU kernel that runs is recorded as in keras-tf (runtime$watch_gru_kernel).

source(file.path(workloads_dir, "runtime", "r_keras.R"), local = TRUE)

MATCHED <- c(
  "GRU reset_after=TRUE is the canonical (cuDNN) form; Keras orders gates z, r, n: canonical r, z, n reordered (numpy, called from R); kernels (in, 3*hidden) as is",
  "GRU biases stacked (2, 3*hidden): row 0 the input bias, row 1 the recurrent bias",
  "batch-major (batch, time, features) input, Keras' only RNN layout; the last time step's output; no masking of padding",
  "Adam in PyTorch's epsilon form, and the embedding's sparse gradient summed to a dense one: keras-tf's optimizer (runtime.adam)",
  "the training step and loops are keras-tf's (Keras' train_function, the Python harness's loops), called from R through reticulate"
)

# --- model --------------------------------------------------------------------------------------

gru_classifier <- function(s) {  # phrase: embedding, gru, last-time-step
  tokens <- layer_input(shape = s$sequence_length, dtype = "int32")  # (batch, time)
  # reset_after = TRUE (Keras' default): the reset gate after the recurrent matmul, two bias
  # vectors per gate, the form cuDNN implements. Returns the last time step's output.
  logits <- tokens |>
    layer_embedding(s$vocabulary, s$embedding_size, name = "embedding") |>
    layer_gru(s$hidden_size, reset_after = TRUE, name = "gru") |>
    layer_dense(s$classes, name = "dense")  # logits: softmax lives in the loss
  keras_model(tokens, logits, name = "gru_classifier")
}

# --- loss and optimizer -------------------------------------------------------------------------

compile_model <- function(model, s, policy) {  # phrase: adam
  model$compile(optimizer = runtime$adam(learning_rate = s$learning_rate, beta_1 = s$beta1, beta_2 = s$beta2,
                                         epsilon = s$epsilon),
                loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE),
                jit_compile = policy$jit_compile)
  model
}

# --- canonical weights --------------------------------------------------------------------------

# The last axis's three gate blocks, canonical [r, z, n] -> Keras' [z, r, n].
gates_rzn_to_zrn <- function(matrix) {
  gates <- np$split(matrix, 3L, axis = -1L)
  names(gates) <- c("r", "z", "n")
  np$ascontiguousarray(np$concatenate(list(gates$z, gates$r, gates$n), axis = -1L))
}

load_canonical <- function(model, params) {
  params <- canonical_list(params)
  set_layer_weights(model, "embedding", params[["embedding.embeddings"]])
  set_layer_weights(model, "gru",
                    gates_rzn_to_zrn(params[["gru.kernel"]]),
                    gates_rzn_to_zrn(params[["gru.recurrent_kernel"]]),
                    np$stack(list(gates_rzn_to_zrn(params[["gru.input_bias"]]),
                                  gates_rzn_to_zrn(params[["gru.recurrent_bias"]]))))
  set_layer_weights(model, "dense", params[["dense.kernel"]], params[["dense.bias"]])
}

# --- run ----------------------------------------------------------------------------------------

GRUWorkload <- r_workload("GRUWorkload", runtime$Training, list(
  build_model = function(self, run, policy, watch_kernel = TRUE) {
    if (watch_kernel) runtime$watch_gru_kernel(run)  # which GRU kernel actually runs (extras gru_kernel)
    compile_model(gru_classifier(run$settings), run$settings, policy)
  },
  build_parity_model = function(self, run, policy, batch)  # the parity check records no kernel
    self$build_model(run, policy, watch_kernel = FALSE),
  load_canonical = function(self, model, params) load_canonical(model, params)
))
implementation <- GRUWorkload()
run <- implementation$run  # what workloads/cell.R hands the harness
parity <- implementation$parity
