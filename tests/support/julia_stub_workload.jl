# A stand-in for workloads/resnet50/knet.jl with the same shape and no framework (no Knet, no CUDA.jl):
# tests/test_languages.py runs workloads/cell.jl on it under a real Julia, to check the cell contract
# (the cell document read, the clocks, the result JSON, the exit codes) where Knet cannot be installed.

using Random

const MATCHED = ["a stand-in workload: an 8x8 matrix product per batch"]
const SETTINGS = Dict{String,Any}("batch_size" => 4, "batches" => 3, "warmup_batches" => 1, "feature_size" => 8)

function run(run)
    run.settings = copy(SETTINGS)
    s = run.settings
    run.cell["precision"] == "fp32" || throw(Unsupported("the stand-in runs fp32 only"))
    run.provenance["device"] = "cpu"
    run.provenance["framework_version"] = "stand-in on Julia $(VERSION)"
    images = phase(run, "data_load") do
        rand(MersenneTwister(0), Float32, s["feature_size"], s["batch_size"] * s["batches"])
    end
    weights = phase(run, "model_build") do
        ones(Float32, s["feature_size"], s["feature_size"])
    end
    run.metrics["parameter_count"] = length(weights)
    batch(i) = images[:, (i - 1) * s["batch_size"] + 1:i * s["batch_size"]]
    phase(run, "warmup") do
        weights * batch(1)
    end
    features = timed_batches(run, 1:s["batches"]) do i
        weights * batch(i)
    end
    get(ENV, "STAND_IN_DIVERGES", "") == "1" && throw(Diverged("diverged: the test asked for it"))
    all(isfinite, features) || throw(Diverged("diverged: non-finite features"))
end

function parity(run, folder)
    run.settings = copy(SETTINGS)
    return Dict("features" => [Float64[1, 2], Float64[3, 4]])
end
