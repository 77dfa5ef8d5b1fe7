# ResNet-50 v1.5 feature extraction (inference), in Julia's Knet: the original study's Julia row.
#
# The network is cut after the global average pool: one 2048-D feature per 224x224 image. Knet is
# Julia arrays all the way down: column-major, so a batch is (width, height, channels, batch), the
# reverse of the NCHW order every other row is fed; kernels are (width, height, in, out). conv4 runs
# cuDNN on a GPU (mode=1: cross-correlation, as every other framework; Knet's default mode 0 flips the
# kernel). Run by workloads/cell.jl, which reads the cell document and writes the result JSON.

# Knet 1.4's conv4 leaves cuDNN's default math type, under which Ampere and newer GPUs may run float32
# convolutions in TF32: NVIDIA's switch, set before cuDNN and cuBLAS are loaded, keeps both in true fp32.
ENV["NVIDIA_TF32_OVERRIDE"] = "0"

using Knet
using CUDA
using NPZ
using Pkg
using Random
using Statistics

const MATCHED = [
    "v1.5: the stride of a downsampling block sits on its 3x3 convolution",
    "conv4 with mode=1 (cross-correlation, as PyTorch); Knet's default mode=0 is a true convolution",
    "Julia arrays are column-major: canonical OIHW kernels become (W, H, I, O) by permutedims(k, (4, 3, 2, 1)), NCHW images (W, H, C, N)",
    "strided convolutions and the max pool pad symmetrically, as PyTorch's padding=k÷2",
    "batch norm in inference mode on its moving statistics, epsilon 1e-5 (canonical.BN_EPSILON)",
    "features leave the device inside every timed batch (Array(features)), as every row copies them to the host",
    "true fp32 on a GPU: NVIDIA_TF32_OVERRIDE=0 (Knet's conv4 sets no cuDNN math type) and CUDA.math_mode DEFAULT_MATH",
    "parameter count: convolution kernels and batch-norm gamma and beta (the moving statistics are state)",
]

# --- settings -----------------------------------------------------------------------------------
# workloads/resnet50/__init__.py's ResNet50Settings and its smoke overrides, which Julia cannot
# import: tests/test_languages.py checks that these equal the Python declaration.

const SETTINGS = Dict{String,Any}("image_shape" => [3, 224, 224], "feature_size" => 2048, "batch_size" => 32,
                                  "batches" => 40, "warmup_batches" => 5, "parameter_count" => 23_508_032)
const SMOKE = Dict{String,Any}("batches" => 3, "warmup_batches" => 2, "batch_size" => 8)
const SEED = 0  # workloads/common/hyperparams.py
const BN_EPSILON = 1e-5
const STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, first stride)
const EXPANSION = 4

version_of(package::Module) = string(Pkg.dependencies()[Base.PkgId(package).uuid].version)  # Julia 1.8 has no pkgversion

settings_for(profile) = profile == "smoke" ? merge(SETTINGS, SMOKE) : copy(SETTINGS)

# --- device -------------------------------------------------------------------------------------

function select_device(run)
    run.cell["precision"] == "fp32" || throw(Unsupported("the Knet row runs fp32 only (Knet has no mixed-precision policy)"))
    has_gpu = CUDA.functional()
    run.device == "cuda" && !has_gpu && throw(Unsupported("no CUDA GPU visible to CUDA.jl on this host"))
    device = has_gpu && run.device != "cpu" ? "cuda" : "cpu"
    if device == "cuda"
        declare_sync!(run, CUDA.synchronize, "CUDA.synchronize: every kernel queued on the GPU")  # phrase: device-sync
        CUDA.math_mode!(CUDA.DEFAULT_MATH)  # true fp32: no TF32 tensor-core math (docs/FAIRNESS.md: true-precision)
        run.provenance["gpu_name"] = CUDA.name(CUDA.device())
        run.provenance["cuda_version"] = string(CUDA.runtime_version())
    end
    device == "cpu" && declare_sync!(run, () -> nothing, "nothing: on the CPU Knet computes on Julia Arrays, " *
                                     "in the calling thread, each call returning finished")
    run.provenance["device"] = device
    run.provenance["framework_version"] = "Knet $(version_of(Knet)) / CUDA.jl $(version_of(CUDA)) on Julia $(VERSION)"
    run.extras["tf32"] = device == "cuda" ? "off (NVIDIA_TF32_OVERRIDE=$(ENV["NVIDIA_TF32_OVERRIDE"]), CUDA.math_mode DEFAULT_MATH)" : "n/a (CPU)"
    return device == "cuda" ? KnetArray{Float32} : Array{Float32}  # phrase: device-placement
end

# --- model --------------------------------------------------------------------------------------

struct ConvBN
    kernel            # (w, h, in, out)
    gamma; beta       # (1, 1, out, 1), trainable
    mean; variance    # (1, 1, out, 1), moving statistics
    stride::Int
    padding::Int
end

function (layer::ConvBN)(x)
    y = conv4(layer.kernel, x; stride = layer.stride, padding = layer.padding, mode = 1)  # phrase: conv3x3-same
    return layer.gamma .* (y .- layer.mean) ./ sqrt.(layer.variance .+ Float32(BN_EPSILON)) .+ layer.beta  # phrase: batch-norm
end

struct Bottleneck
    conv1::ConvBN; conv2::ConvBN; conv3::ConvBN
    shortcut::Union{Nothing,ConvBN}
end

# phrase: residual-block
function (block::Bottleneck)(x)
    y = relu.(block.conv1(x))
    y = relu.(block.conv2(y))  # v1.5: the stride is here, on the 3x3 convolution
    y = block.conv3(y)
    return relu.(y .+ (block.shortcut === nothing ? x : block.shortcut(x)))
end
# end phrase

struct ResNet50Features
    stem::ConvBN
    blocks::Vector{Bottleneck}
end

function (model::ResNet50Features)(x)  # x: (224, 224, 3, N) -> (2048, N)
    x = relu.(model.stem(x))
    x = pool(x; window = 3, stride = 2, padding = 1, mode = 0)  # max pool  # phrase: max-pool
    for block in model.blocks
        x = block(x)
    end
    return reshape(mean(x; dims = (1, 2)), :, size(x, 4))  # global average pool  # phrase: global-avg-pool
end

# Knet's own initialisers (xavier kernels, unit gamma): what --init framework means here.
function conv_bn(atype, in_channels, out_channels, size, stride; arrays = nothing, conv = "", bn = "")
    statistic(v) = atype(reshape(v, 1, 1, :, 1))
    if arrays === nothing
        kernel = xavier(Float32, size, size, in_channels, out_channels)
        gamma, beta = ones(Float32, out_channels), zeros(Float32, out_channels)
        mean_, variance = zeros(Float32, out_channels), ones(Float32, out_channels)
    else
        kernel = permutedims(arrays["$(conv).kernel"], (4, 3, 2, 1))  # OIHW -> (W, H, I, O)  # phrase: load-weights
        gamma, beta = arrays["$(bn).gamma"], arrays["$(bn).beta"]
        mean_, variance = arrays["$(bn).moving_mean"], arrays["$(bn).moving_variance"]
    end
    return ConvBN(atype(kernel), statistic(gamma), statistic(beta), statistic(mean_), statistic(variance),
                  stride, size ÷ 2)
end

function resnet50_features(atype; arrays = nothing)
    # canonical names: "<block>.conv1" with "<block>.bn1", ..., "<block>.shortcut.conv" with "<block>.shortcut.bn"
    layer(from, to, size, stride, conv, bn) = conv_bn(atype, from, to, size, stride; arrays = arrays, conv = conv, bn = bn)
    stem = layer(3, 64, 7, 2, "stem.conv", "stem.bn")
    blocks = Bottleneck[]
    channels = 64  # into the next block
    for (stage, (width, count, first_stride)) in enumerate(STAGES), block in 0:count-1
        name = "stage$(stage).block$(block)"
        stride = block == 0 ? first_stride : 1
        out_channels = width * EXPANSION
        shortcut = nothing
        if stride != 1 || channels != out_channels
            shortcut = layer(channels, out_channels, 1, stride, "$(name).shortcut.conv", "$(name).shortcut.bn")
        end
        push!(blocks, Bottleneck(layer(channels, width, 1, 1, "$(name).conv1", "$(name).bn1"),
                                 layer(width, width, 3, stride, "$(name).conv2", "$(name).bn2"),
                                 layer(width, out_channels, 1, 1, "$(name).conv3", "$(name).bn3"), shortcut))
        channels = out_channels
    end
    return ResNet50Features(stem, blocks)
end

function parameter_count(model::ResNet50Features)
    layers = [model.stem; [l for b in model.blocks for l in (b.conv1, b.conv2, b.conv3, b.shortcut) if l !== nothing]]
    return sum(length(l.kernel) + length(l.gamma) + length(l.beta) for l in layers)
end

# --- canonical weights --------------------------------------------------------------------------

# The canonical arrays' names (workloads/common/canonical.py): "stem.conv.kernel", "stem.bn.gamma", ...;
# NPZ reads a C-order array into a Julia array with the same indices, so only the layout changes.
load_canonical(folder) = NPZ.npzread(joinpath(folder, "weights.npz"))

# --- run ----------------------------------------------------------------------------------------

function run(run)
    run.settings = settings_for(run.cell["profile"])
    s = run.settings
    atype = select_device(run)

    images = phase(run, "data_load") do
        # random inputs (seed 0): timing does not depend on pixel values (Julia's own generator, not numpy's)
        run.provenance["data_source"] = "random"
        count = s["batch_size"] * max(s["batches"], s["warmup_batches"])
        rand(MersenneTwister(SEED), Float32, 224, 224, 3, count)  # phrase: seeding
    end

    model = phase(run, "model_build") do
        # The canonical arrays come from numpy's generator (canonical.py): outside a parity check a
        # Julia cell has none, so it keeps Knet's own initialisers (inference speed does not depend on them).
        run.extras["init"] = "framework (the canonical arrays reach the Julia row in the parity check only)"
        resnet50_features(atype)
    end
    run.metrics["parameter_count"] = parameter_count(model)
    batch(i) = atype(images[:, :, :, (i - 1) * s["batch_size"] + 1:i * s["batch_size"]])
    features = phase(run, "warmup") do
        local last
        for i in 1:s["warmup_batches"]
            last = Array(model(batch(i)))
        end
        last
    end
    @assert size(features) == (s["feature_size"], s["batch_size"])
    timed_batches(run, 1:s["batches"]) do i  # each batch's features checked (the validity gate)
        Array(model(batch(i)))  # the copy to the host is inside every timed batch
    end
end

# --- parity -------------------------------------------------------------------------------------

function parity(run, folder)
    run.settings = settings_for(run.cell["profile"])
    atype = select_device(run)
    model = resnet50_features(atype; arrays = load_canonical(folder))
    run.metrics["parameter_count"] = parameter_count(model)
    x = NPZ.npzread(joinpath(folder, "batch.npz"))["x"]         # (N, C, H, W) indices, as numpy's
    features = Array(model(atype(permutedims(x, (4, 3, 2, 1)))))  # (2048, N)
    return Dict("features" => [features[:, n] for n in 1:size(features, 2)])  # one row per image
end
