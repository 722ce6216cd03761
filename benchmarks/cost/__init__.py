"""What InfoNoise costs in a training run, each an entry point: the sampler's per-step overhead
(``python -m benchmarks.cost.sampler_overhead``), the training scripts' step time with InfoNoise against their
default sampler (``.unconditional_step_time``, ``.t2i_step_time``, both attributing time to the sampler code with
``.attribution``'s profiler) and the profile start's share of a run (``.profile_cost``)."""
