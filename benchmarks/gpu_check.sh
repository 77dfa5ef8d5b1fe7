#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py): PyTorch and JAX CUDA cells in fp32, tf32, fp16 and bf16
# through --python, no Docker, no network. Arguments are passed on, e.g.
#   benchmarks/gpu_check.sh --python /opt/venv/bin/python --profile full --require-cuda
set -euo pipefail
exec python3 "$(dirname "$0")/gpu_check.py" "$@"
