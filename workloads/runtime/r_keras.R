# Keras 3 on TensorFlow from R: everything the three R workloads share, written once.
#
# R reaches Keras the way R's own keras package does: the Python Keras 3, through reticulate. The
# layer functions below are that package's idiom (`x |> layer_dense(units = 10)`), written out here
# because Debian packages reticulate but not keras. The device, precision and provenance switches,
# the training step and the loops are the Keras-TF row's runtime (workloads/runtime/keras/): the
# R row and keras-tf run the same engine, the same step and the same loops, so what differs between
# them is R (the report's "R overhead" line). So is the scaffold around them (workloads/common/
# scaffold.py): an R workload is a class of the runtime's (`r_workload`), whose steps are R functions.
#
# reticulate 1.28 (Debian 12) predates numpy 2's C API, so numpy arrays stay numpy objects in R
# (no copy into R arrays): R rearranges the canonical arrays with numpy's own functions (`np$...`).

keras <- import("keras")
np <- import("numpy")
builtins <- import_builtins()
runtime <- import("workloads.runtime.keras")
foreign <- import("workloads.common.foreign")

# --- the scaffold's R part ---------------------------------------------------------------------------
#
# A workload class in R: keras-tf's runtime class for the workload's kind (runtime$Training or
# runtime$FeatureExtraction), with foreign$Bridged mixed in first, which records what R adds to the
# provenance once the runtime's select_device has run (in Python: an Unsupported it raises then
# reaches the harness as itself). `steps` are the class's methods, R functions taking `self` first.

r_version <- paste(R.version$major, R.version$minor, sep = ".")
reticulate_version <- as.character(packageVersion("reticulate"))

r_workload <- function(name, kind, steps) {
  provenance <- list(
    provenance_note = sprintf(" from R %s (reticulate %s)", r_version, reticulate_version),
    provenance_extras = dict(language = "R", r_version = r_version, reticulate_version = reticulate_version,
                             bridge = "reticulate: R calls Python Keras; the loops are the Python harness's"))
  PyClass(name, inherit = list(foreign$Bridged, kind), defs = c(provenance, lapply(steps, converting)))
}

# PyClass gives a method its `self` with R's usual conversion (a Python list read from it becomes an R
# list) but its other Python objects without it. A step gets them as R code gets the objects it makes
# itself (the model it built, when loading its weights), converted as PyClass converts `self`.
converting <- function(step) {
  force(step)
  function(self, ...) {
    arguments <- lapply(list(...), function(argument) {
      if (inherits(argument, "python.builtin.object")) assign("convert", TRUE, envir = as.environment(argument))
      argument
    })
    do.call(step, c(list(self), arguments))
  }
}

# --- layers, in R keras' idiom ------------------------------------------------------------------
#
# Each layer function applies a new layer to `object`, the tensor before it. R evaluates arguments
# lazily: in `x |> conv() |> layer_dropout(0.25)` the Dropout layer would be created before the
# promise of its input built the layers upstream. Keras draws a layer's default seed when the layer
# is created, so that order would give the layers other seeds than keras-tf's (the same model, another
# dropout stream): each function forces its input first, so layers are created in the Python order.

shape_of <- function(shape) tuple(as.list(as.integer(unlist(shape))))

layer_input <- function(shape, dtype = "float32") keras$Input(shape = shape_of(shape), dtype = dtype)

layer_conv_2d <- function(object, filters, kernel_size, strides = 1L, padding = "valid", use_bias = TRUE,
                          activation = NULL, data_format, name = NULL) {
  force(object)
  keras$layers$Conv2D(as.integer(filters), as.integer(kernel_size), strides = as.integer(strides),
                      padding = padding, use_bias = use_bias, activation = activation,
                      data_format = data_format, name = name)(object)
}

layer_max_pooling_2d <- function(object, pool_size, strides = NULL, data_format) {
  force(object)
  keras$layers$MaxPooling2D(as.integer(pool_size), strides = if (is.null(strides)) NULL else as.integer(strides),
                            data_format = data_format)(object)
}

layer_zero_padding_2d <- function(object, padding, data_format) {
  force(object)
  keras$layers$ZeroPadding2D(as.integer(padding), data_format = data_format)(object)
}

layer_global_average_pooling_2d <- function(object, data_format) {
  force(object)
  keras$layers$GlobalAveragePooling2D(data_format = data_format)(object)
}

layer_batch_normalization <- function(object, axis, momentum, epsilon, name) {
  force(object)
  keras$layers$BatchNormalization(axis = as.integer(axis), momentum = momentum, epsilon = epsilon,
                                  name = name)(object)
}

layer_activation_relu <- function(object) {
  force(object)
  keras$layers$ReLU()(object)
}

layer_dropout <- function(object, rate) {
  force(object)
  keras$layers$Dropout(rate)(object)
}

layer_permute <- function(object, dims) {
  force(object)
  keras$layers$Permute(shape_of(dims))(object)
}

layer_flatten <- function(object) {
  force(object)
  keras$layers$Flatten()(object)
}

layer_dense <- function(object, units, activation = NULL, name = NULL) {
  force(object)
  keras$layers$Dense(as.integer(units), activation = activation, name = name)(object)
}

layer_embedding <- function(object, input_dim, output_dim, name = NULL) {
  force(object)
  keras$layers$Embedding(as.integer(input_dim), as.integer(output_dim), name = name)(object)
}

layer_gru <- function(object, units, reset_after = TRUE, name = NULL) {
  force(object)
  keras$layers$GRU(as.integer(units), reset_after = reset_after, name = name)(object)
}

layer_add <- function(inputs) keras$layers$Add()(inputs)

keras_model <- function(inputs, outputs, name) keras$Model(inputs, outputs, name = name)

is_layer <- function(layer, class) builtins$isinstance(layer, class)

# --- canonical weights ----------------------------------------------------------------------------

# The canonical arrays as an R list by name (a Python dict when Python handed them over, as parity does).
canonical_list <- function(params) if (inherits(params, "python.builtin.object")) py_to_r(params) else params

# Convolution kernels: canonical OIHW -> Keras' HWIO.
oihw_to_hwio <- function(kernel) np$ascontiguousarray(np$transpose(kernel, list(2L, 3L, 1L, 0L)))

set_layer_weights <- function(model, name, ...) model$get_layer(name)$set_weights(list(...))
