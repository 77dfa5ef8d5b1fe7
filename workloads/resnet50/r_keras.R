# ResNet-50 v1.5 feature extraction (inference), in R: Keras 3 on TensorFlow through reticulate.
#
# The network is cut after the global average pool: one 2048-D feature per 224x224 image. The same
# model as workloads/resnet50/keras.py, written in R; inference is keras-tf's (predict_on_batch,
# through runtime$extract_features), random inputs (seed 0), the canonical weights by default.

source(file.path(workloads_dir, "runtime", "r_keras.R"), local = TRUE)

MATCHED <- c(
  "v1.5: the stride of a downsampling block sits on its 3x3 convolution",
  "strided convolutions and the max pool pad explicitly on both sides (ZeroPadding2D + 'valid'), as PyTorch's padding=k%/%2",
  "batch-norm epsilon 1e-5 (Keras' default is 1e-3), momentum 0.9 (= PyTorch's 0.1); inference uses the moving statistics",
  "input NCHW as every framework; channels_last models transpose it in the graph (Permute)",
  "convolution kernels stored HWIO: canonical OIHW transposed (numpy's transpose, called from R)",
  "parameter count: trainable weights only (Keras' count_params() adds the moving statistics)",
  "inference is keras-tf's (predict_on_batch, the Python harness's loop), called from R through reticulate"
)

# --- model --------------------------------------------------------------------------------------

STAGES <- list(c(64, 3, 1), c(128, 4, 2), c(256, 6, 2), c(512, 3, 2))  # (width, blocks, first stride)
EXPANSION <- 4L

resnet50_features <- function(s, data_format) {
  channel_axis <- if (data_format == "channels_first") 1L else -1L
  canonical <- import("workloads.common.canonical")

  conv <- function(x, filters, size, stride, name) {
    padding <- "same"
    if (stride > 1 && size > 1) {  # symmetric padding, as PyTorch's padding=size%/%2
      x <- layer_zero_padding_2d(x, size %/% 2, data_format = data_format)
      padding <- "valid"
    }
    layer_conv_2d(x, filters, size, strides = stride, padding = padding, use_bias = FALSE,
                  data_format = data_format, name = name)
  }
  # phrase: batch-norm
  batch_norm <- function(x, name)
    layer_batch_normalization(x, channel_axis, momentum = 0.9, epsilon = canonical$BN_EPSILON, name = name)
  # end phrase

  bottleneck <- function(x, width, stride, name) {  # phrase: residual-block
    out_channels <- width * EXPANSION
    y <- x |>
      conv(width, 1, 1, paste0(name, "_conv1")) |> batch_norm(paste0(name, "_bn1")) |> layer_activation_relu() |>
      conv(width, 3, stride, paste0(name, "_conv2")) |> batch_norm(paste0(name, "_bn2")) |> layer_activation_relu() |>  # v1.5 stride
      conv(out_channels, 1, 1, paste0(name, "_conv3")) |> batch_norm(paste0(name, "_bn3"))
    shortcut <- x
    if (stride != 1 || x$shape[[if (channel_axis == 1L) 2L else 4L]] != out_channels) {
      shortcut <- x |>
        conv(out_channels, 1, stride, paste0(name, "_shortcut_conv")) |> batch_norm(paste0(name, "_shortcut_bn"))
    }
    layer_add(list(y, shortcut)) |> layer_activation_relu()
  }

  images <- layer_input(shape = s$image_shape)  # (3, 224, 224) NCHW, as the harness gives them
  x <- if (data_format == "channels_first") images else layer_permute(images, c(2, 3, 1))  # -> NHWC
  x <- x |>
    conv(64, 7, 2, "stem_conv") |> batch_norm("stem_bn") |> layer_activation_relu() |>
    layer_zero_padding_2d(1, data_format = data_format) |>
    layer_max_pooling_2d(3, strides = 2, data_format = data_format)
  for (stage in seq_along(STAGES)) {
    width <- STAGES[[stage]][[1]]; blocks <- STAGES[[stage]][[2]]; stride <- STAGES[[stage]][[3]]
    for (block in seq_len(blocks) - 1)
      x <- bottleneck(x, width, if (block == 0) stride else 1, sprintf("stage%d_block%d", stage, block))
  }
  features <- layer_global_average_pooling_2d(x, data_format = data_format)  # -> (N, 2048)  # phrase: global-avg-pool
  keras_model(images, features, name = "resnet50_v1_5_features")
}

# --- canonical weights --------------------------------------------------------------------------

# Kernels OIHW -> HWIO; batch norm takes (gamma, beta, moving_mean, moving_variance). Layer
# "stage1_block0_conv1" holds canonical "stage1.block0.conv1".
load_canonical <- function(model, params) {
  params <- canonical_list(params)
  loaded <- 0L
  for (layer in model$layers) {
    name <- gsub("_", ".", layer$name, fixed = TRUE)
    if (is_layer(layer, keras$layers$Conv2D)) {
      layer$set_weights(list(oihw_to_hwio(params[[paste0(name, ".kernel")]])))
      loaded <- loaded + 1L
    } else if (is_layer(layer, keras$layers$BatchNormalization)) {
      parts <- c("gamma", "beta", "moving_mean", "moving_variance")
      layer$set_weights(unname(lapply(parts, function(part) params[[paste0(name, ".", part)]])))
      loaded <- loaded + length(parts)
    }
  }
  stopifnot("every canonical array is loaded" = loaded == length(params))
}

# --- run ----------------------------------------------------------------------------------------

ResNet50Workload <- r_workload("ResNet50Workload", runtime$FeatureExtraction, list(
  build_model = function(self, run, policy) resnet50_features(run$settings, policy$data_format),
  load_canonical = function(self, model, params) load_canonical(model, params)
))
implementation <- ResNet50Workload()
run <- implementation$run  # what workloads/cell.R hands the harness
parity <- implementation$parity
