"""XLA compilations that land inside a run's timed training steps, counted with jax.monitoring, for
the probes that run in a JAX-based framework's own environment (compiled_step_checks.py: JAX;
fairness_probes.py: Keras on JAX). Imported there only: the host has no JAX.

A compilation after the first step's clock stopped and before the training phase ended slows a
timed step: docs/FAIRNESS.md (steady-headline, every-step-finite) keeps every one-time cost in the
first step, timed apart.
"""
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"  # one event per XLA compilation


def timed_step_compiles(run) -> list:
    """From now on, one entry (its seconds) per XLA compilation inside ``run``'s timed training steps.
    JAX's compilation caches are emptied first, so that what an earlier run in this process compiled
    (the loss sum's add, say) cannot hide one of this run's compilations."""
    import jax

    jax.clear_caches()
    found = []

    def listen(event: str, seconds: float, **_) -> None:
        samples = run.result.samples
        if event == BACKEND_COMPILE and samples.first_step_s is not None and "train" not in run.result.phases:
            found.append(seconds)

    jax.monitoring.register_event_duration_secs_listener(listen)
    return found
