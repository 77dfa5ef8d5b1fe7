"""What the meters read and how often, and the names of the ways a figure was measured."""
from pathlib import Path

POWERCAP_ROOT = Path("/sys/class/powercap")
IDLE_WINDOW_S = 1.0  # idle power is measured over this window just before each cell (0: not measured)
GPU_INTERVAL_S = 0.1  # NVML readings, about 10 a second
# RAPL alone (no GPU sampled): a reading a second is plenty for phases of seconds, costs nothing
# (a few sysfs reads), and catches every wrap of a counter that wraps after minutes at full power.
CPU_INTERVAL_S = 1.0
MIB = 2 ** 20

COUNTER, INTEGRATION, NONE = "counter", "integration", "none"

# The phase the per-sample figures are of, by the kind of workload: the training steps after the
# first (compilation and autotuning land in the first), or inference's timed batches.
STEADY_PHASE, INFERENCE_PHASE = "steady", "inference"
