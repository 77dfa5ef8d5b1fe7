# Run one cell of a workload written in R:
#     Rscript --vanilla workloads/cell.R --python PYTHON --cell FILE
#
# The contract of every language (workloads/ADDING_A_FRAMEWORK.md): read the cell document, write
# exactly one result JSON, exit 0 (ok), 3 (unsupported here, the reason in the result) or anything
# else (failed). R keeps it by calling the project's own Python harness through reticulate:
# workloads.__main__.main reads the document, owns the clocks, the data and the validity gate, writes
# the result and returns the exit code; R supplies the workload's `run` and `parity` functions
# (workloads/<workload>/r_keras.R), wrapped by workloads/common/foreign.py. One source of truth.
#
# --python names the interpreter whose packages (Keras, TensorFlow, numpy) reticulate embeds: the
# backend fills it in from metadata.toml's [language] command (the environment's python).

arguments <- commandArgs(trailingOnly = TRUE)
python_at <- match("--python", arguments)
if (is.na(python_at) || python_at == length(arguments)) {
  message("workloads/cell.R: error: give --python PYTHON, the interpreter whose Keras the R workloads use")
  quit(status = 2, save = "no")
}
python <- arguments[[python_at + 1]]
arguments <- arguments[-c(python_at, python_at + 1)]
python_path <- unname(Sys.which(python))
if (!nzchar(python_path)) {
  message("workloads/cell.R: error: --python ", python, ": no such interpreter; give the path of the ",
          "environment's python (the keras-tf environment)")
  quit(status = 2, save = "no")
}

suppressPackageStartupMessages(library(reticulate))
use_python(python_path, required = TRUE)

# Where this script lives: the workload files sit beside it, workloads/<workload>/<module>.R.
script <- sub("^--file=", "", grep("^--file=", commandArgs(trailingOnly = FALSE), value = TRUE))
workloads_dir <- dirname(normalizePath(script))

harness <- import("workloads.common.harness")
foreign <- import("workloads.common.foreign")
naming <- import("workloads.common.naming")
workloads_main <- import("workloads.__main__")

# An Unsupported raised by Python code that R called reaches R as a plain error, and would reach
# Python again as a RuntimeError: while its class is still known (py_last_error), hand it back
# as a value, which foreign.ForeignWorkload raises again as the Unsupported it was.
guard <- function(f) {
  force(f)
  function(...) {
    py_clear_last_error()
    tryCatch(f(...), error = function(e) {
      last <- py_last_error()
      if (!is.null(last) && identical(last$type, "Unsupported")) {
        return(harness$Unsupported(trimws(last$value)))
      }
      message("R error: ", conditionMessage(e))
      stop(e)
    })
  }
}

# Source the cell's workload file into its own environment (timed by the harness as the
# framework_import phase: Keras and TensorFlow are imported there).
load_workload <- function(cell) {
  file <- file.path(workloads_dir, cell$workload, paste0(naming$module_name(cell$framework), ".R"))
  if (!file.exists(file)) stop("no ", cell$workload, " workload for ", cell$framework, " (", file, ")")
  workload <- new.env(parent = globalenv())
  sys.source(file, envir = workload)
  foreign$ForeignWorkload(guard(workload$run), guard(workload$parity), as.list(workload$MATCHED))
}

exit_code <- tryCatch(
  workloads_main$main(as.list(arguments), load_workload),
  error = function(e) {
    last <- py_last_error()
    if (!is.null(last) && identical(last$type, "SystemExit")) {  # argparse's refusal or --help
      code <- suppressWarnings(as.integer(trimws(last$value)))
      return(if (is.na(code)) 2L else code)
    }
    message("workloads/cell.R: ", conditionMessage(e))
    1L
  })
quit(status = exit_code, save = "no")
