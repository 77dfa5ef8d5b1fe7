"""Per-framework device, precision and provenance switches, shared by that framework's workloads.

Model code is never shared: it lives in workloads/<workload>/<framework>.py, side by side.
"""
