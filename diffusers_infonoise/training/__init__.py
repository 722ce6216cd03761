"""What the training scripts share, one concept per module (scripts → this layer → the core).

* :mod:`.args`: the shared command-line options, and the edge where they become the sampler, its start and frozen
  configs; :mod:`.unconditional_args`: train_unconditional.py's own options; :mod:`.text_to_image_args`: the
  text-to-image scripts' own options (VP and flow included);
* :mod:`.datasets`: image and captioned data, transforms, augmentation, batch order;
* :mod:`.loop`: the training loop, loss, optimizer and EMA;
* :mod:`.script_run`: a script's run between its setup and its end, and ``--show_noise_schedule``'s;
* :mod:`.monitor`: the schedule during training (logs, figures, the π check across ranks);
* :mod:`.checkpoints`: accelerate checkpoints with the sampler state, resume, pruning;
* :mod:`.outputs`: sample grids, model cards, the stored schedule, Hub pushes;
* :mod:`.lora`: LoRA adapters (peft);
* :mod:`.models`: train_unconditional's default UNets and the check that a config fits the data;
* :mod:`.unconditional`: train_unconditional's run (:class:`UnconditionalRun`) and its training scheduler;
* :mod:`.text_to_image`: what the text-to-image scripts share;
* :mod:`.flow`: what the rectified-flow scripts (SD3, Flux) share;
* :mod:`.vp`: what the VP scripts (Stable Diffusion, SDXL) share.

Nothing here re-implements the sampler, the paths or the stored schedule: it calls the core.
"""

from __future__ import annotations

from . import (
    args,
    checkpoints,
    datasets,
    flow,
    loop,
    lora,
    models,
    monitor,
    outputs,
    script_run,
    text_to_image,
    text_to_image_args,
    unconditional,
    unconditional_args,
    vp,
)
from .args import *  # noqa: F401,F403
from .checkpoints import *  # noqa: F401,F403
from .datasets import *  # noqa: F401,F403
from .flow import *  # noqa: F401,F403
from .loop import *  # noqa: F401,F403
from .lora import *  # noqa: F401,F403
from .models import *  # noqa: F401,F403
from .monitor import *  # noqa: F401,F403
from .outputs import *  # noqa: F401,F403
from .script_run import *  # noqa: F401,F403
from .text_to_image import *  # noqa: F401,F403
from .text_to_image_args import *  # noqa: F401,F403
from .unconditional import *  # noqa: F401,F403
from .unconditional_args import *  # noqa: F401,F403
from .vp import *  # noqa: F401,F403

__all__ = [
    *args.__all__,
    *datasets.__all__,
    *loop.__all__,
    *script_run.__all__,
    *monitor.__all__,
    *checkpoints.__all__,
    *outputs.__all__,
    *lora.__all__,
    *models.__all__,
    *unconditional.__all__,
    *unconditional_args.__all__,
    *text_to_image.__all__,
    *text_to_image_args.__all__,
    *flow.__all__,
    *vp.__all__,
]
