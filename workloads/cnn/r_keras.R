# VGG-style CNN trained on CIFAR-10, in R: Keras 3 on TensorFlow through reticulate.
#
# conv(50)-conv(50)-pool-conv(100)-conv(100)-pool-dense(512)-dense(10), SGD with momentum, settings
# from workloads/cnn/__init__.py (run$settings). The same model as workloads/cnn/keras.py, written in
# R: what the reader should notice is how little changes (1-based dims in R, integers as 3L) and that
# the step and the loop are keras-tf's (workloads/runtime/r_keras.R).

source(file.path(workloads_dir, "runtime", "r_keras.R"), local = TRUE)

MATCHED <- c(
  "input NCHW as every framework; channels_last models transpose it in the graph (Permute) and transpose back before Flatten, so dense1's rows keep the canonical (C, H, W) order",
  "convolution kernels stored HWIO: canonical OIHW transposed (numpy's transpose, called from R); dense kernels (in, out) as is",
  "padding='same' on stride-1 3x3 convolutions pads 1 on each side, as PyTorch's padding=1",
  "SGD with momentum: keras-tf's optimizer (runtime.sgd_momentum), TensorFlow's ResourceApplyKerasMomentum",
  "loss SparseCategoricalCrossentropy(from_logits=TRUE): mean softmax cross-entropy, integer labels",
  "the training step and loops are keras-tf's (Keras' train_function, the Python harness's loops), called from R through reticulate"
)

# --- model --------------------------------------------------------------------------------------

vgg_style_cnn <- function(s, data_format, dropout = TRUE) {
  # phrase: conv3x3-same
  conv <- function(x, filters, name, activation = NULL)  # "same": pad 1 on each side, as PyTorch's padding=1
    layer_conv_2d(x, filters, 3L, padding = "same", activation = activation, data_format = data_format, name = name)
  # end phrase
  pool <- function(x) layer_max_pooling_2d(x, 2L, 2L, data_format = data_format)  # phrase: max-pool
  drop <- function(x, rate) layer_dropout(x, if (dropout) rate else 0)  # the parity check trains with dropout off  # phrase: dropout

  images <- layer_input(shape = s$image_shape)  # (channels, height, width), as the harness gives them
  x <- if (data_format == "channels_first") images else layer_permute(images, c(2, 3, 1))  # -> NHWC
  x <- x |>
    conv(s$conv1_filters, "conv1", activation = "relu") |>
    conv(s$conv1_filters, "conv2") |>
    pool() |> layer_activation_relu() |> drop(s$dropout_conv) |>
    conv(s$conv2_filters, "conv3", activation = "relu") |>
    conv(s$conv2_filters, "conv4") |>
    pool() |> layer_activation_relu() |> drop(s$dropout_conv)
  # phrase: flatten, dense
  if (data_format == "channels_last") x <- layer_permute(x, c(3, 1, 2))  # flatten in (C, H, W) order
  logits <- x |>
    layer_flatten() |>
    layer_dense(s$dense_units, activation = "relu", name = "dense1") |>
    drop(s$dropout_dense) |>
    layer_dense(s$classes, name = "dense2")  # logits: softmax lives in the loss
  # end phrase
  keras_model(images, logits, name = "vgg_style_cnn")
}

# --- loss and optimizer -------------------------------------------------------------------------

compile_model <- function(model, s, policy) {  # phrase: compile-step, sgd-momentum, softmax-cross-entropy
  model$compile(optimizer = runtime$sgd_momentum(learning_rate = s$learning_rate, momentum = s$momentum),
                loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE),
                jit_compile = policy$jit_compile)
  model
}

# --- canonical weights --------------------------------------------------------------------------

load_canonical <- function(model, params) {  # phrase: load-weights
  params <- canonical_list(params)
  for (name in c("conv1", "conv2", "conv3", "conv4"))  # kernels OIHW -> HWIO
    set_layer_weights(model, name, oihw_to_hwio(params[[paste0(name, ".kernel")]]), params[[paste0(name, ".bias")]])
  for (name in c("dense1", "dense2"))  # dense kernels are already (in, out)
    set_layer_weights(model, name, params[[paste0(name, ".kernel")]], params[[paste0(name, ".bias")]])
}

# --- run ----------------------------------------------------------------------------------------

CNNWorkload <- r_workload("CNNWorkload", runtime$Training, list(
  build_model = function(self, run, policy, dropout = TRUE)
    compile_model(vgg_style_cnn(run$settings, policy$data_format, dropout), run$settings, policy),
  # dropout off for the steps too: dropout is random and frameworks' generators differ
  build_parity_model = function(self, run, policy, batch) self$build_model(run, policy, dropout = FALSE),
  load_canonical = function(self, model, params) load_canonical(model, params)
))
implementation <- CNNWorkload()
run <- implementation$run  # what workloads/cell.R hands the harness
parity <- implementation$parity
