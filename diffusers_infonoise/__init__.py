"""diffusers-infonoise: data-adaptive training-noise schedules (InfoNoise) for Hugging Face diffusers.

The public names; see METHOD.md (shipped in the repository's docs) for the mathematics.
"""

__version__ = "0.1.0"

from .densities import Density  # noqa: E402
from .paths import FlowPath, NoisePath, VEPath, VPPath, path_from_scheduler  # noqa: E402
from .samplers import (  # noqa: E402
    SAMPLER_NAMES,
    FixedDensitySampler,
    InfoNoiseTrainingTimestepSampler,
    KingmaGaoSampler,
    NoiseLevels,
    TrainingTimestepSampler,
    make_sampler,
)
from .schedule_io import ScheduleError, read_schedule, write_schedule  # noqa: E402
from .weighting import x0_error_factor, x0_loss_weight  # noqa: E402

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
    "SAMPLER_NAMES",
    "make_sampler",
    "ScheduleError",
    "read_schedule",
    "write_schedule",
    "x0_error_factor",
    "x0_loss_weight",
]
