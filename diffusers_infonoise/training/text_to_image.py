"""What the text-to-image scripts (Stable Diffusion on VP, SD3 on flow) share: latents, LoRA, the
run's setup, validation images and the saved pipeline."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from ..logs import get_logger
from ..sampler import SamplerStart, TrainingTimestepSampler
from .args import option_errors
from .checkpoints import register_model_checkpointing, register_sampler_checkpointing
from .datasets import DataConfig, captioned_dataloader
from .loop import AcceleratorConfig, OptimizerConfig, RunConfig, make_optimizer_and_lr_scheduler, start_run, training_length
from .lora import add_lora_adapter, lora_layers
from .outputs import (
    HubTarget,
    check_finite_weights,
    log_saved_outputs,
    push_output_dir,
    recorded_start,
    render_model_card,
    save_image_grid,
)
from .script_run import ScriptRun

logger = get_logger(__name__)

__all__ = [
    "TextToImageConfig",
    "encode_latents",
    "weight_dtype_of",
    "load_pretrained_parts",
    "setup_trained_model",
    "TextToImageRun",
    "setup_text_to_image_run",
    "prepare_text_to_image_training",
    "validation_callback",
    "log_validation_images",
    "finish_text_to_image_run",
    "save_text_to_image_outputs",
]


def encode_latents(vae, pixel_values: torch.Tensor) -> torch.Tensor:
    """VAE latents as the diffusion model sees them: ``(z − shift_factor)·scaling_factor`` with
    ``z = vae.encode(x).latent_dist.sample()``; ``shift_factor`` only where the VAE has one (SD3)."""
    latents = vae.encode(pixel_values.to(vae.device, vae.dtype)).latent_dist.sample()
    shift = getattr(vae.config, "shift_factor", None)
    if shift is not None:
        latents = latents - shift
    return latents * vae.config.scaling_factor


def weight_dtype_of(accelerator) -> torch.dtype:
    """The dtype of frozen modules under ``accelerator``'s mixed precision (float32 without)."""
    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(accelerator.mixed_precision, torch.float32)


@dataclass(frozen=True)
class TextToImageConfig:
    """What the text-to-image layer needs from the command line, as explicit values
    (:func:`~diffusers_infonoise.training.args.text_to_image_config`)."""

    run: RunConfig
    optimizer: OptimizerConfig
    accelerator: AcceleratorConfig
    data: DataConfig
    pretrained_model_name_or_path: str = ""
    revision: str | None = None
    variant: str | None = None
    hub: HubTarget = HubTarget()
    tracker: dict = field(default_factory=dict)
    output_dir: str = "infonoise-text-to-image"
    seed: int | None = None
    show_noise_schedule: bool = False
    use_lora: bool = False
    lora_rank: int = 4
    lora_alpha: float | None = None
    mixed_precision: str = "no"
    use_ema: bool = False
    gradient_checkpointing: bool = False
    validation_prompts: tuple = ()
    validation_inference_steps: int = 25
    validation_guidance_scale: float | None = None
    learning_rate: float = 1e-4


def load_pretrained_parts(pretrained_model_name_or_path: str, *, revision: str | None = None, variant: str | None = None, **parts) -> dict:
    """``{name: cls.from_pretrained(model, subfolder=name)}`` for each ``name=cls``, named as the
    pipeline's components (tokenizers get no ``variant``), e.g. ``tokenizer=CLIPTokenizer, vae=AutoencoderKL``."""
    out = {}
    for name, cls in parts.items():
        kwargs = {"subfolder": name, "revision": revision}
        if "Tokenizer" not in cls.__name__:
            kwargs["variant"] = variant
        out[name] = cls.from_pretrained(pretrained_model_name_or_path, **kwargs)
    return out


def setup_trained_model(
    cfg: TextToImageConfig, model, *, frozen: Iterable, model_cls, lora_targets: Iterable[str], device, weight_dtype: torch.dtype
) -> tuple[list, object]:
    """Ready the models of a text-to-image run for training; returns ``(params, ema)``.

    The ``frozen`` modules (VAE, text encoders) get no gradients and move to ``device`` in
    ``weight_dtype``. With ``--use_lora`` the trained ``model`` moves there too and gets a LoRA
    adapter on ``lora_targets`` (:func:`add_lora_adapter`; its weights stay float32 under fp16).
    ``params`` are the trainable parameters, ``ema`` an ``EMAModel`` of ``model`` (``model_cls``)
    with ``--use_ema`` (else None); ``--gradient_checkpointing`` is enabled on ``model``.
    """
    from diffusers.training_utils import EMAModel, cast_training_params

    for module in frozen:
        module.requires_grad_(False)
        module.to(device, dtype=weight_dtype)
    if cfg.use_lora:
        model.to(device, dtype=weight_dtype)
        add_lora_adapter(model, rank=cfg.lora_rank, alpha=cfg.lora_alpha, target_modules=lora_targets)
        if cfg.mixed_precision == "fp16":
            cast_training_params(model, dtype=torch.float32)  # LoRA weights train in float32
    params = [p for p in model.parameters() if p.requires_grad]
    ema = EMAModel(model.parameters(), model_cls=model_cls, model_config=model.config) if cfg.use_ema else None
    if cfg.gradient_checkpointing:
        model.enable_gradient_checkpointing()
    return params, ema


def prepare_text_to_image_training(
    accelerator,
    cfg: TextToImageConfig,
    model,
    *,
    params,
    ema,
    sampler: TrainingTimestepSampler,
    model_cls,
    subfolder: str,
    pipeline_cls,
    tracker_project: str,
) -> tuple:
    """Everything between the built model and the training loop of a text-to-image run.

    The captioned dataloader (:func:`captioned_dataloader`, prepared); the optimizer and LR schedule
    (:func:`make_optimizer_and_lr_scheduler` over :func:`training_length`'s steps); ``model``, the
    optimizer and the schedule prepared; the EMA on the device; the sampler's per-rank stream seeded
    from ``--seed`` (π is shared through the sampler's all-reduce), then the device-specific global
    seed; the checkpoint hooks of the model
    (:func:`register_model_checkpointing` under ``subfolder``; with ``--use_lora`` the adapter through
    ``pipeline_cls.save_lora_weights`` with prefix ``subfolder``) and of the sampler
    (:func:`register_sampler_checkpointing`); the trackers, as ``tracker_project``, on the main process.

    Returns ``(model, optimizer, lr_scheduler, dataloader, epoch_setters)``: ``model`` as
    prepared, ``epoch_setters`` the dataset and batch order for :func:`run_training_loop`.
    """
    from accelerate.utils import set_seed

    with option_errors():  # a data set that does not fit the options: one line, as argparse's, not a traceback
        dataloader, dataset, order = captioned_dataloader(cfg.data)
    dataloader = accelerator.prepare(dataloader)
    _, max_steps, _ = training_length(cfg.run, dataloader)
    optimizer, lr_scheduler = make_optimizer_and_lr_scheduler(
        cfg.optimizer,
        params,
        max_steps=max_steps,
        num_processes=accelerator.num_processes,
        batch_size=cfg.run.train_batch_size,
        gradient_accumulation_steps=cfg.run.gradient_accumulation_steps,
    )
    model, optimizer, lr_scheduler = accelerator.prepare(model, optimizer, lr_scheduler)
    if ema is not None:
        ema.to(accelerator.device)

    # Each rank draws its own levels from the sampler's stream; π is shared through the sampler's all-reduce.
    sampler.manual_seed(cfg.seed or 0)
    if cfg.seed is not None:
        set_seed(cfg.seed, device_specific=True)
    register_model_checkpointing(
        accelerator,
        model_cls=model_cls,
        subfolder=subfolder,
        ema=ema,
        lora_pipeline_cls=pipeline_cls if cfg.use_lora else None,
        lora_prefix=subfolder,
    )
    register_sampler_checkpointing(accelerator, sampler)
    if accelerator.is_main_process and not cfg.show_noise_schedule:
        accelerator.init_trackers(tracker_project, config=cfg.tracker)
    return model, optimizer, lr_scheduler, dataloader, (dataset, order)


@dataclass
class TextToImageRun(ScriptRun):
    """A text-to-image run between its start and its end (:func:`setup_text_to_image_run`; the fields of
    :class:`~.script_run.ScriptRun`).

    ``parts``: the frozen components by pipeline name (tokenizers, text encoders, VAE), on the device;
    ``model``: the ``trained`` one as prepared by accelerate (``unwrapped`` for building a pipeline), ``params`` its
    trainable parameters.
    """

    parts: dict = field(default_factory=dict)
    trained: str = ""
    params: list = field(default_factory=list)
    weight_dtype: torch.dtype = torch.float32

    def train(self, compute_loss: Callable, pipeline, **validation_kwargs) -> dict:
        """:meth:`~.script_run.ScriptRun.run_loop` with ``compute_loss(batch, levels)``; validation images from ``pipeline``."""
        validate = validation_callback(self.accelerator, pipeline, self.cfg, **validation_kwargs)
        return self.run_loop(compute_loss, params_to_clip=self.params, validate=validate)

    def finish(
        self, result: dict, *, card: dict, pipeline=None, build_pipeline: Callable | None = None, validation_kwargs: dict | None = None
    ) -> dict:
        """:func:`finish_text_to_image_run`; returns ``result`` with the sampler. The card's details say where
        the sampler started (METHOD.md §5.9): its record from step 0, kept through resumes."""
        if self.start is not None and self.sampler.learns_schedule:
            card = {**card, "details": {**card.get("details", {}), "InfoNoise start": "{}: {}".format(*recorded_start(self.sampler))}}
        finish_text_to_image_run(
            self.accelerator,
            self.cfg,
            pipeline=pipeline,
            build_pipeline=build_pipeline,
            model_key=self.trained,
            noise_scheduler=self.noise_scheduler,
            sampler=self.sampler,
            ema=self.ema,
            result=result,
            card=card,
            validation_kwargs=validation_kwargs,
        )
        return {**result, "sampler": self.sampler}


def setup_text_to_image_run(
    cfg: TextToImageConfig,
    *,
    noise_scheduler,
    sampler: TrainingTimestepSampler,
    parts: dict,
    trained: str,
    lora_targets: Iterable[str],
    pipeline_cls,
    tracker_project: str,
    start: SamplerStart | None = None,
) -> TextToImageRun:
    """Everything a text-to-image script does before its loss, given its training ``noise_scheduler`` and
    ``sampler`` (built from the command line, :mod:`.args`) and where the sampler starts (``start``,
    :func:`~diffusers_infonoise.training.args.sampler_start`; applied before step 1): the ``Accelerator``
    (:func:`~.loop.start_run`), the
    components ``parts`` of ``cfg.pretrained_model_name_or_path`` (name → class,
    :func:`load_pretrained_parts`), the ``trained`` one set up for training (:func:`setup_trained_model`,
    the others frozen) and :func:`prepare_text_to_image_training`."""
    run = TextToImageRun(cfg=cfg, noise_scheduler=noise_scheduler, sampler=sampler, trained=trained, start=start)
    if not run.prepares_training:
        return run
    run.accelerator = accelerator = start_run(cfg.accelerator)
    run.weight_dtype = weight_dtype_of(accelerator)
    run.parts = load_pretrained_parts(cfg.pretrained_model_name_or_path, revision=cfg.revision, variant=cfg.variant, **parts)
    model = run.parts.pop(trained)
    frozen = [m for name, m in run.parts.items() if not name.startswith("tokenizer")]
    model_cls = type(model)
    run.params, run.ema = setup_trained_model(
        cfg, model, frozen=frozen, model_cls=model_cls, lora_targets=lora_targets, device=accelerator.device, weight_dtype=run.weight_dtype
    )
    run.model, run.optimizer, run.lr_scheduler, run.dataloader, run.epoch_setters = prepare_text_to_image_training(
        accelerator,
        cfg,
        model,
        params=run.params,
        ema=run.ema,
        sampler=sampler,
        model_cls=model_cls,
        subfolder=trained,
        pipeline_cls=pipeline_cls,
        tracker_project=tracker_project,
    )
    return run


def validation_callback(accelerator, pipeline, cfg: TextToImageConfig, **pipeline_kwargs) -> Callable[[int], None]:
    """``validate(step)`` for :func:`run_training_loop`: :func:`log_validation_images` of ``--validation_prompts``
    into ``<output_dir>/validation`` (``pipeline_kwargs`` go to the pipeline's call)."""

    def validate(step: int) -> None:
        log_validation_images(
            accelerator,
            pipeline,
            list(cfg.validation_prompts),
            step=step,
            seed=cfg.seed,
            num_inference_steps=cfg.validation_inference_steps,
            guidance_scale=cfg.validation_guidance_scale,
            output_dir=os.path.join(cfg.output_dir, "validation"),
            **pipeline_kwargs,
        )

    return validate


def log_validation_images(
    accelerator,
    pipeline,
    prompts: list[str],
    *,
    step: int,
    seed: int | None,
    num_inference_steps: int,
    guidance_scale: float | None = None,
    tag: str = "validation",
    output_dir: str | None = None,
    **pipeline_kwargs,
) -> torch.Tensor:
    """One image per prompt from ``pipeline`` (seeded generator: the global random state is not
    touched), logged to the trackers (tensorboard ``add_images``, wandb captioned images) and saved
    as ``<output_dir>/<tag>_<step>.png``. Returns (N, 3, H, W) float32 in [0, 1] on the CPU."""
    from contextlib import nullcontext

    pipeline.set_progress_bar_config(disable=True)
    generator = torch.Generator(device=accelerator.device).manual_seed(seed or 0)
    kwargs = dict(pipeline_kwargs, num_inference_steps=num_inference_steps, generator=generator, output_type="pt")
    if guidance_scale is not None:
        kwargs["guidance_scale"] = guidance_scale
    context = torch.autocast(accelerator.device.type) if accelerator.mixed_precision in ("fp16", "bf16") else nullcontext()
    images = []
    with torch.no_grad(), context:
        for prompt in prompts:
            images.append(pipeline(prompt, **kwargs).images[0].float().cpu())
    images = torch.stack(images).clamp(0, 1)
    for tracker in accelerator.trackers:
        if tracker.name == "tensorboard":
            tracker.writer.add_images(tag, images.numpy(), step, dataformats="NCHW")
        elif tracker.name == "wandb":
            import wandb

            tracker.log(
                {tag: [wandb.Image(img.permute(1, 2, 0).numpy(), caption=f"{i}: {p}") for i, (img, p) in enumerate(zip(images, prompts))]},
                step=step,
            )
    if output_dir:
        os.makedirs(output_dir, exist_ok=True)
        save_image_grid(images, os.path.join(output_dir, f"{tag}_{step:07d}.png"), nrow=len(images))
    return images


def finish_text_to_image_run(
    accelerator, cfg: TextToImageConfig, *, pipeline=None, build_pipeline: Callable | None = None, **outputs
) -> None:
    """The end of every text-to-image run: all processes wait, the main one saves
    (:func:`save_text_to_image_outputs` of ``pipeline``, or of ``build_pipeline()``, called there only,
    with ``outputs``), all wait again and the trackers end (``accelerator.end_training``)."""
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        save_text_to_image_outputs(accelerator, cfg, pipeline=build_pipeline() if build_pipeline else pipeline, **outputs)
    accelerator.wait_for_everyone()
    accelerator.end_training()


def save_text_to_image_outputs(
    accelerator,
    cfg: TextToImageConfig,
    *,
    pipeline,
    model_key: str,
    noise_scheduler,
    sampler: TrainingTimestepSampler,
    ema=None,
    result: dict,
    card: dict,
    validation_kwargs: dict | None = None,
) -> str:
    """The end of a text-to-image run, on the main process; returns the output folder.

    * ``noise_scheduler``, the *training* scheduler (its ``prediction_type`` as trained), gets the
      learned schedule (``sampler.save_to_scheduler``: a fixed density drops one inherited from the base model);
    * full fine-tuning: ``pipeline`` (the trained ``model_key`` model with the EMA weights when
      there is an EMA, the training scheduler) is saved with ``save_pretrained``; LoRA: the adapter
      (``save_lora_weights``, ``<model_key>_lora_layers``) and ``scheduler/`` only;
    * ``noise_schedule.png``, validation images of the final weights (``validation.png``), and
      ``README.md`` from ``model_cards/text_to_image.md.j2`` (``card``: template variables the
      script adds: ``base_model``, ``pipeline_class``, ``family``, ``license``, ``extra_tags``,
      ``details``); pushed to the Hub with ``--push_to_hub``. ``validation_kwargs`` go to the
      pipeline's call (e.g. Flux's ``height``, ``width``, ``max_sequence_length``).
    """
    from ..diagnostics import plot_schedule

    out = cfg.output_dir
    model = accelerator.unwrap_model(getattr(pipeline, model_key))
    learned = sampler.save_to_scheduler(noise_scheduler)
    pipeline.scheduler = noise_scheduler
    if ema is not None:
        ema.copy_to(model.parameters())
    check_finite_weights(model, f"the trained {model_key}")
    if cfg.use_lora:
        type(pipeline).save_lora_weights(out, **{f"{model_key}_lora_layers": lora_layers(model)}, safe_serialization=True)
        noise_scheduler.save_pretrained(os.path.join(out, "scheduler"))
    else:
        pipeline.save_pretrained(out)
    import matplotlib.pyplot as plt

    fig = plot_schedule(sampler, title=f"{sampler.name} after {result['global_step']} steps")
    fig.savefig(os.path.join(out, "noise_schedule.png"), dpi=100)
    plt.close(fig)
    validation_grid = None
    if cfg.validation_prompts:
        model.eval()
        images = log_validation_images(
            accelerator,
            pipeline,
            list(cfg.validation_prompts),
            step=result["global_step"],
            seed=cfg.seed,
            num_inference_steps=cfg.validation_inference_steps,
            guidance_scale=cfg.validation_guidance_scale,
            tag="validation_final",
            **(validation_kwargs or {}),
        )
        validation_grid = "validation.png"
        save_image_grid(images, os.path.join(out, validation_grid), nrow=len(images))
    desc = sampler.describe()
    repo_id = cfg.hub.repo_id or os.path.basename(os.path.abspath(out))
    tags = ["text-to-image", "diffusers", "diffusers-training", "infonoise", *card.get("extra_tags", [])]
    if cfg.use_lora:
        tags.append("lora")
    render_model_card(
        "text_to_image.md.j2",
        os.path.join(out, "README.md"),
        model_name=repo_id,
        repo_id=repo_id if cfg.hub.push else None,
        tags=tags,
        base_model=card["base_model"],
        pipeline_class=card["pipeline_class"],
        family=card.get("family", ""),
        license=card.get("license", "other"),
        details=card.get("details", {}),
        dataset_name=cfg.data.dataset_name or (None if cfg.data.train_data_dir else cfg.data.default_dataset),
        use_lora=cfg.use_lora,
        lora_rank=cfg.lora_rank,
        scheduler_class=type(noise_scheduler).__name__,
        prediction_type=sampler.prediction_type,
        loss_weighting=desc["loss_weighting"],
        snr_gamma=desc.get("snr_gamma"),
        sampler_name=sampler.name,
        learned_schedule=learned,
        hyperparameters=desc.get("hyperparameters", {}),
        global_step=result["global_step"],
        allocation=desc.get("last_refresh"),
        total_batch_size=result["total_batch_size"],
        learning_rate=cfg.learning_rate,
        resolution=cfg.data.resolution,
        mixed_precision=cfg.mixed_precision,
        validation_prompts=list(cfg.validation_prompts),
        validation_grid=validation_grid,
        schedule_plot="noise_schedule.png",
        num_inference_steps=cfg.validation_inference_steps,
    )
    if cfg.hub.push:
        push_output_dir(out, repo_id=repo_id, token=cfg.hub.token, private=cfg.hub.private)
    weights = "the LoRA adapter and scheduler/" if cfg.use_lora else "the pipeline"
    validation = [validation_grid] if validation_grid else []
    saved = [weights, "noise_schedule.png", *validation, "README.md (the model card)"]
    log_saved_outputs(out, saved, repo_id=repo_id if cfg.hub.push else None)
    return out
