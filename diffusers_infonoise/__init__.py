"""diffusers-infonoise: data-adaptive training-noise schedules (InfoNoise) for Hugging Face diffusers.

The public names; see METHOD.md (shipped in the repository's docs) for the mathematics.
"""

__version__ = "0.3.0"

from .densities import Density  # noqa: E402
from .integration import infonoise_sampler  # noqa: E402
from .paths import FlowPath, NoisePath, VEPath, VPPath, path_from_scheduler  # noqa: E402
from .sampler import (  # noqa: E402
    SAMPLER_NAMES,
    FixedDensitySampler,
    InfoNoiseSettings,
    InfoNoiseTrainingTimestepSampler,
    KingmaGaoSampler,
    LossSlopeSampler,
    NoiseLevels,
    SamplerStart,
    TrainingTimestepSampler,
    apply_start,
    choose_start,
    make_sampler,
    start_from_model,
)
from .schedule_io import ScheduleError, StoredSchedule, read_schedule, read_schedule_from, write_schedule  # noqa: E402
from .weighting import per_sample_mse, x0_error_factor, x0_loss_weight  # noqa: E402

#: public names whose modules import diffusers' pipelines or the diagnostics: loaded on first use
#: (``import diffusers_infonoise`` stays light for spawned worker processes)
_LAZY = {
    "InfoNoiseUnconditionalPipeline": "pipeline",
    "InferenceGrid": "scheduler_grids",
    "infogrid": "inference_grid",
    "scheduler_grid_kwargs": "scheduler_grids",
    "set_infogrid": "scheduler_grids",
    "load_learned_sampler": "diagnostics",
    "profile_from_model": "diagnostics",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "__version__",
    "Density",
    "NoisePath",
    "VEPath",
    "VPPath",
    "FlowPath",
    "path_from_scheduler",
    "NoiseLevels",
    "TrainingTimestepSampler",
    "FixedDensitySampler",
    "InfoNoiseTrainingTimestepSampler",
    "KingmaGaoSampler",
    "LossSlopeSampler",
    "InfoNoiseSettings",
    "SAMPLER_NAMES",
    "make_sampler",
    "infonoise_sampler",
    "ScheduleError",
    "read_schedule",
    "read_schedule_from",
    "StoredSchedule",
    "write_schedule",
    "SamplerStart",
    "choose_start",
    "apply_start",
    "start_from_model",
    "per_sample_mse",
    "x0_error_factor",
    "x0_loss_weight",
    *_LAZY,
]
