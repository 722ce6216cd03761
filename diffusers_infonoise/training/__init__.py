"""What the training scripts share, one concept per module (scripts → this layer → the core).

* :mod:`.args`: the shared command-line options and the sampler they build;
* :mod:`.datasets`: image and captioned data, transforms, augmentation, batch order;
* :mod:`.loop`: the training loop, loss, optimizer and EMA;
* :mod:`.monitor`: the schedule during training (logs, figures, the π check across ranks);
* :mod:`.checkpoints`: accelerate checkpoints with the sampler state, resume, pruning;
* :mod:`.outputs`: sample grids, model cards, the stored schedule, Hub pushes;
* :mod:`.lora`: LoRA adapters (peft);
* :mod:`.text_to_image`: what the Stable Diffusion and SD3 scripts share.

Nothing here re-implements the sampler, the paths or the stored schedule: it calls the core.
"""

from __future__ import annotations

from .args import (  # noqa: F401
    add_common_training_args,
    add_noise_sampler_args,
    add_text_to_image_args,
    baseline_density_params,
    build_noise_sampler,
    check_text_to_image_args,
    resolve_infonoise_base,
)
from .checkpoints import (  # noqa: F401
    SAMPLER_SUBDIR,
    maybe_save_checkpoint,
    optimizer_steps_per_epoch,
    prune_checkpoints,
    register_model_checkpointing,
    register_sampler_checkpointing,
    resolve_resume_checkpoint,
    resume_training_state,
)
from .datasets import (  # noqa: F401
    DEFAULT_CAPTIONED_DATASET,
    AugmentedImageDataset,
    CaptionedImageDataset,
    EpochShuffleSampler,
    captioned_dataloader,
    collate_captioned,
    image_transform,
    load_captioned_dataset,
    load_image_dataset,
)
from .loop import (  # noqa: F401
    backward_and_step,
    ema_weights,
    finish_micro_batch,
    make_accelerator,
    make_optimizer_and_lr_scheduler,
    per_sample_mse,
    run_training_loop,
    size_warmup_to_run,
    tracker_config,
    training_length,
    training_target,
    weighted_loss,
)
from .lora import (  # noqa: F401
    SD3_LORA_TARGETS,
    UNET_LORA_TARGETS,
    add_lora_adapter,
    load_lora_layers,
    lora_layers,
)
from .monitor import (  # noqa: F401
    ScheduleMonitor,
    describe_noise_schedule,
    show_noise_schedule,
)
from .outputs import (  # noqa: F401
    push_output_dir,
    render_model_card,
    save_image_grid,
    store_learned_schedule,
)
from .text_to_image import (  # noqa: F401
    encode_latents,
    log_validation_images,
    prepare_text_to_image_training,
    save_text_to_image_outputs,
    setup_trained_model,
    start_text_to_image_run,
    weight_dtype_of,
)

__all__ = [
    "add_noise_sampler_args",
    "add_common_training_args",
    "baseline_density_params",
    "build_noise_sampler",
    "add_text_to_image_args",
    "check_text_to_image_args",
    "resolve_infonoise_base",
    "load_image_dataset",
    "image_transform",
    "DEFAULT_CAPTIONED_DATASET",
    "load_captioned_dataset",
    "AugmentedImageDataset",
    "CaptionedImageDataset",
    "EpochShuffleSampler",
    "collate_captioned",
    "captioned_dataloader",
    "per_sample_mse",
    "training_target",
    "tracker_config",
    "weighted_loss",
    "make_optimizer_and_lr_scheduler",
    "backward_and_step",
    "finish_micro_batch",
    "make_accelerator",
    "size_warmup_to_run",
    "training_length",
    "run_training_loop",
    "ema_weights",
    "describe_noise_schedule",
    "show_noise_schedule",
    "ScheduleMonitor",
    "SAMPLER_SUBDIR",
    "register_sampler_checkpointing",
    "resolve_resume_checkpoint",
    "optimizer_steps_per_epoch",
    "resume_training_state",
    "maybe_save_checkpoint",
    "prune_checkpoints",
    "register_model_checkpointing",
    "save_image_grid",
    "render_model_card",
    "push_output_dir",
    "store_learned_schedule",
    "encode_latents",
    "weight_dtype_of",
    "start_text_to_image_run",
    "UNET_LORA_TARGETS",
    "SD3_LORA_TARGETS",
    "add_lora_adapter",
    "lora_layers",
    "load_lora_layers",
    "setup_trained_model",
    "prepare_text_to_image_training",
    "log_validation_images",
    "save_text_to_image_outputs",
]
