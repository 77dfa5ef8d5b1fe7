# Run one cell of a workload written in Julia:
#     julia --project=/opt/rosetta/julia workloads/cell.jl --cell FILE
#
# The contract of every language (workloads/ADDING_A_FRAMEWORK.md), kept here without Python: read
# the cell document (workloads/common/cell.py), write exactly one result JSON of the project's schema
# (schema/result.schema.json, workloads/common/result.py) atomically, exit 0 (ok), 3 (unsupported
# here, the reason in the result), 2 (a document this code cannot run) or 1 (failed). The clocks
# follow workloads/common/harness.py: the device is synchronised before every clock read, the warm
# pass is its own untimed phase, one sample per timed batch, the median batch makes the metrics.

using Dates
using JSON
using Printf
using Statistics

const CELL_DOCUMENT_VERSION = 3  # workloads/common/cell.py
const SCHEMA_VERSION = 4          # workloads/common/result.py
const EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_UNSUPPORTED = 0, 1, 2, 3

"""Raised where the cell cannot run here (a GPU the host lacks, a precision the row does not run)."""
struct Unsupported <: Exception
    reason::String
end

"""A finished cell whose figures must not be ranked (the validity gate): status failed, this reason."""
struct Diverged <: Exception
    reason::String
end

"""One cell's run: what the document asked, and the result record, filled in as it runs."""
mutable struct Run
    cell::Dict{String,Any}
    device::String            # requested: auto, cpu or cuda
    parity::Union{Nothing,String}
    sync::Function            # set by the workload once the device is known
    phases::Dict{String,Float64}
    phase_spans::Dict{String,Vector{Vector{Float64}}}  # wall-clock [start, end] per phase: the host's energy attribution
    metrics::Dict{String,Any}
    samples::Dict{String,Any}
    provenance::Dict{String,Any}
    extras::Dict{String,String}
    outputs::Dict{String,Any}
    settings::Dict{String,Any}
    started_at::String
end

function Run(document)
    cell = Dict{String,Any}(document["cell"])
    provenance = Dict{String,Any}(
        "platform" => string(Sys.KERNEL, "-", Sys.MACHINE), "hostname" => gethostname(),
        "cpu_model" => Sys.cpu_info()[1].model, "cpu_count" => Sys.CPU_THREADS,
        "interpreter" => joinpath(Sys.BINDIR, "julia"), "user_id" => Int(ccall(:getuid, Cint, ())),
        "git_revision" => get(ENV, "ROSETTA_GIT_REVISION", nothing))
    parity = get(document, "parity", nothing)
    Run(cell, string(get(document, "device", "auto")), parity === nothing ? nothing : string(parity), () -> nothing,
        Dict{String,Float64}(), Dict{String,Vector{Vector{Float64}}}(), Dict{String,Any}(),
        Dict{String,Any}("batch_times_s" => Float64[]), provenance,
        Dict{String,String}("language" => "Julia", "julia_version" => string(VERSION)), Dict{String,Any}(),
        Dict{String,Any}(), Dates.format(now(UTC), "yyyy-mm-ddTHH:MM:SS") * "+00:00")
end

"""Time `f()` as phase `name`, the device synchronised before both clock reads."""
function phase(f, run::Run, name::String)
    run.sync()
    began, start = time(), time_ns()
    value = f()
    run.sync()
    run.phases[name] = get(run.phases, name, 0.0) + (time_ns() - start) / 1e9
    push!(get!(run.phase_spans, name, Vector{Float64}[]), [began, time()])
    return value
end

"""The timed forward-only pass: one synchronised sample per batch, `forward(batch)` returning the
features on the host (the copy included: docs/FAIRNESS.md, host-copy)."""
function timed_batches(forward, run::Run, batches)
    times = run.samples["batch_times_s"]
    features = nothing
    began = time()
    for batch in batches
        run.sync()
        start = time_ns()
        features = forward(batch)
        run.sync()
        push!(times, (time_ns() - start) / 1e9)
    end
    run.phases["inference"] = sum(times)
    run.phase_spans["inference"] = [[began, time()]]
    return features
end

"""The metrics from the samples, as workloads/common/harness.py's Run.finish derives them."""
function finish!(run::Run)
    times = run.samples["batch_times_s"]
    if !isempty(times)
        batch_size = run.settings["batch_size"]
        middle = median(times)
        run.metrics["seconds_per_1000_images"] = middle / batch_size * 1000
        run.metrics["images_per_s"] = batch_size / middle
    end
    run.metrics["peak_host_memory_mb"] = Sys.maxrss() / 2^20
    run.provenance["process_threads"] = Threads.nthreads()
end

"""The result record (schema/result.schema.json), written atomically: a temporary file beside `out`,
then renamed over it (a rename replaces a link, never writes through it)."""
function write_result(run::Run, out::String, status::String, reason)
    run.provenance["extras"] = run.extras
    record = Dict{String,Any}(
        "schema_version" => SCHEMA_VERSION, "cell" => run.cell, "status" => status, "reason" => reason,
        "started_at" => run.started_at, "phases" => run.phases, "phase_spans" => run.phase_spans,
        "metrics" => run.metrics,
        "samples" => run.samples, "settings" => run.settings, "provenance" => run.provenance,
        "outputs" => run.outputs)
    temporary = joinpath(dirname(abspath(out)), "." * basename(out) * ".tmp")
    open(temporary, "w") do stream
        JSON.print(stream, record)
    end
    mv(temporary, out; force = true)
end

"""An error's message on one line (a JSON parser's runs over several, with a caret under the spot)."""
one_line(error) = join(split(sprint(showerror, error)), " ")

function refuse(problem::String)
    println(stderr, "workloads/cell.jl: error: ", problem)
    exit(EXIT_REFUSED)
end

function main(arguments)
    if arguments == ["--help"]  # the image's default command
        println("usage: julia workloads/cell.jl --cell FILE  (the cell document: workloads/common/cell.py)")
        return EXIT_OK
    end
    (length(arguments) == 2 && arguments[1] == "--cell") || refuse("usage: julia workloads/cell.jl --cell FILE")
    document = try
        JSON.parse(read(arguments[2], String))
    catch error
        refuse("--cell $(arguments[2]): cannot read the cell document ($(one_line(error)))")
    end
    version = get(document, "version", nothing)
    version == CELL_DOCUMENT_VERSION ||
        refuse("--cell $(arguments[2]): cell document version $(version); this image reads version $(CELL_DOCUMENT_VERSION)")
    run = Run(document)
    out = string(document["out"])
    workload, framework = run.cell["workload"], run.cell["framework"]
    file = joinpath(@__DIR__, workload, replace(framework, "-" => "_") * ".jl")
    isfile(file) || refuse("no $(workload) workload for framework $(framework) ($(file))")
    status, reason, code = "ok", nothing, EXIT_OK
    try
        start = time_ns()
        module_ = Module(Symbol(framework))
        Base.eval(module_, :(import Main: Unsupported, Diverged, phase, timed_batches))  # what this file provides
        Base.include(module_, file)  # imports the framework: its own phase, as in every row
        run.phases["framework_import"] = (time_ns() - start) / 1e9
        run.extras["matched"] = join(Base.invokelatest(() -> module_.MATCHED), " | ")
        if run.parity === nothing
            Base.invokelatest(module_.run, run)
        else
            run.cell["precision"] == "fp32" || throw(Unsupported("the parity check runs in fp32 only"))
            run.outputs = Base.invokelatest(module_.parity, run, run.parity)
        end
        finish!(run)
    catch error
        if error isa Unsupported
            status, reason, code = "unsupported", error.reason, EXIT_UNSUPPORTED
        elseif error isa Diverged
            finish!(run)  # the figures are kept, but the cell fails: never ranked
            status, reason, code = "failed", error.reason, EXIT_FAILED
        else
            Base.showerror(stderr, error, catch_backtrace())
            println(stderr)
            status, reason, code = "failed", string(nameof(typeof(error)), ": ", one_line(error)), EXIT_FAILED
        end
    end
    try
        write_result(run, out, status, reason)
    catch error
        println(stderr, "error: cannot write the result to $(out) ($(one_line(error))); choose another out")
        return EXIT_REFUSED
    end
    println(stderr, workload, ": ", status, reason === nothing ? "" : " ($(reason))")
    return code
end

exit(main(ARGS))
