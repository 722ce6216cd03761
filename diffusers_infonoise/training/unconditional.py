"""What ``train_unconditional.py`` does besides its parts and its loss: the training scheduler of a new or a
pretrained model, its facts read from the path (:mod:`diffusers_infonoise.paths`), and the run from its start to
its end (:class:`UnconditionalRun`, as :class:`~.text_to_image.TextToImageRun` for the text-to-image scripts)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..objective import Objective
from ..paths import PATH_CLASSES, NoisePath, scheduler_kind
from ..sampler import SamplerStart, TrainingTimestepSampler
from .args import option_errors
from .checkpoints import register_model_checkpointing, register_sampler_checkpointing
from .datasets import DataConfig, batch_loader, unconditional_dataset
from .loop import AcceleratorConfig, OptimizerConfig, RunConfig, ema_weights, make_optimizer_and_lr_scheduler, start_run, training_length
from .outputs import HubTarget, log_images, save_samples, save_unconditional_outputs, save_unconditional_pipeline
from .script_run import ScriptRun

__all__ = [
    "UnconditionalConfig",
    "load_pretrained_scheduler",
    "unconditional_scheduler",
    "UnconditionalRun",
    "setup_unconditional_run",
]


@dataclass(frozen=True)
class UnconditionalConfig:
    """What ``train_unconditional.py``'s run needs from its command line, as explicit values
    (:func:`~diffusers_infonoise.training.unconditional_args.unconditional_config`).

    Attributes (besides the shared configs and diffusers' names):
        path_kind: the path ``--diffusion`` trains (``"vp"``, ``"ve"``, ``"flow"``; :attr:`path` its class).
        scheduler_options: a new model's scheduler config (config key → value; the path takes its
            :attr:`~diffusers_infonoise.paths.NoisePath.scheduler_options`).
        scheduler_options_given: config key → the option that set it, for the options given on the command line: a
            fine-tune checks them against the pretrained scheduler (:func:`load_pretrained_scheduler`).
        prediction_type: ``--prediction_type`` (None with a pretrained model that did not get one: its own).
        num_inference_steps: sampling steps of the sample grids and the saved samples (None: the path's default).
    """

    run: RunConfig
    optimizer: OptimizerConfig
    accelerator: AcceleratorConfig
    data: DataConfig
    path_kind: str = "vp"
    scheduler_options: dict = field(default_factory=dict)
    scheduler_options_given: dict = field(default_factory=dict)
    prediction_type: str | None = None
    snr_gamma: float | None = None
    pretrained_model_name_or_path: str | None = None
    model_config_name_or_path: str | None = None
    revision: str | None = None
    resolution: int = 16
    sequence_column: str | None = None
    alphabet: str = "ACGT"
    hub: HubTarget = HubTarget()
    tracker: dict = field(default_factory=dict)
    output_dir: str = "ddpm-model-16"
    seed: int | None = None
    show_noise_schedule: bool = False
    eval_batch_size: int = 16
    save_images_epochs: int = 10
    save_model_epochs: int = 10
    use_ema: bool = False
    ema_inv_gamma: float = 1.0
    ema_power: float = 3 / 4
    ema_max_decay: float = 0.9999
    num_inference_steps: int | None = None

    @property
    def path(self) -> type[NoisePath]:
        return PATH_CLASSES[self.path_kind]


def load_pretrained_scheduler(cfg: UnconditionalConfig):
    """The pretrained pipeline's training scheduler: its ``scheduler/`` config (with any stored schedule) in the class
    of ``cfg``'s path (:attr:`~diffusers_infonoise.paths.NoisePath.scheduler_class`). A fine-tune trains on the
    pretrained model's own path and output.

    Raises:
        ValueError: an unknown scheduler class, a scheduler of another path than ``--diffusion``'s, a path option given
            with another value than the pretrained scheduler's, or a ``--prediction_type`` other than its own, naming
            both.
    """
    import diffusers

    where, path = cfg.pretrained_model_name_or_path, cfg.path
    config = diffusers.DDPMScheduler.load_config(where, subfolder="scheduler", revision=cfg.revision)
    loaded = getattr(diffusers, config.get("_class_name", ""), None)
    if loaded is None:
        raise ValueError(f"--pretrained_model_name_or_path: {where} has an unknown scheduler {config.get('_class_name')!r}")
    kind = scheduler_kind(loaded.from_config(config))
    if PATH_CLASSES[kind] is not path:
        raise ValueError(
            f"--pretrained_model_name_or_path: {where} has a {config['_class_name']} ({kind} path), but "
            f"--diffusion {path.diffusion} trains a {cfg.path_kind} path; pass --diffusion {PATH_CLASSES[kind].diffusion}"
        )
    sched = getattr(diffusers, path.scheduler_class).from_config(config)
    differ = [
        f"{option} {cfg.scheduler_options[key]} (the pretrained scheduler has {key}={sched.config.get(key)!r})"
        for key, option in cfg.scheduler_options_given.items()
        if key in sched.config and sched.config.get(key) != cfg.scheduler_options[key]
    ]
    if differ:
        raise ValueError(
            f"--pretrained_model_name_or_path: a fine-tune trains on the pretrained model's own path, and "
            f"{'; '.join(differ)}; drop the option(s), or train from scratch with --model_config_name_or_path"
        )
    theirs = sched.config.get("prediction_type")  # VP: the loss; EDM: the sign of c_out; flow: none
    if theirs is not None and cfg.prediction_type not in (None, theirs):
        raise ValueError(
            f"--prediction_type {cfg.prediction_type}: the pretrained model {where} predicts "
            f"{theirs!r} (its scheduler's prediction_type); pass --prediction_type {theirs}"
        )
    return sched


def unconditional_scheduler(cfg: UnconditionalConfig) -> tuple[object, Objective]:
    """The run's training scheduler (a pretrained pipeline's, :func:`load_pretrained_scheduler`, or a new one of the
    path, :meth:`~diffusers_infonoise.paths.NoisePath.new_scheduler`) and the loss the script trains on it: the
    network's output read through the path, unweighted but for Min-SNR on VP
    (:meth:`~diffusers_infonoise.objective.Objective.from_options`; the loop applies the weight)."""
    if cfg.pretrained_model_name_or_path:
        noise_scheduler = load_pretrained_scheduler(cfg)
    else:
        noise_scheduler = cfg.path.new_scheduler(cfg.scheduler_options)
    return noise_scheduler, Objective.from_options(noise_scheduler, snr_gamma=cfg.snr_gamma)


@dataclass
class UnconditionalRun(ScriptRun):
    """An unconditional run between its start and its end (:func:`setup_unconditional_run`; the fields of
    :class:`~.script_run.ScriptRun`): ``model`` is the UNet as prepared by accelerate, ``channels`` and ``alphabet``
    (sequences only) describe the data."""

    channels: int = 0
    alphabet: str | None = None

    @property
    def num_inference_steps(self) -> int:
        return self.cfg.num_inference_steps or self.cfg.path.default_inference_steps

    def sample_images(self, unet) -> torch.Tensor:
        """``--eval_batch_size`` samples of ``unet`` (its EMA weights when there is an EMA), seeded by ``--seed``."""
        from ..generation import generate_images

        with ema_weights(self.ema, unet.parameters()):
            images = generate_images(
                unet.eval(),
                self.noise_scheduler,
                self.cfg.eval_batch_size,
                num_inference_steps=self.num_inference_steps,
                generator=torch.Generator(device=unet.device).manual_seed(self.cfg.seed or 0),
            )
        unet.train()
        return images

    def on_epoch_end(self, epoch: int, global_step: int, last: bool) -> None:
        """On the main process: the pipeline every ``--save_model_epochs`` epochs (but the last: :meth:`finish` saves
        it), sample images every ``--save_images_epochs`` epochs and after the last (logged for images)."""
        if not self.accelerator.is_main_process:
            return
        unet = self.unwrapped
        if (epoch + 1) % self.cfg.save_model_epochs == 0 and not last:
            save_unconditional_pipeline(unet, self.ema, self.noise_scheduler, self.sampler, self.cfg.output_dir)
        if (epoch + 1) % self.cfg.save_images_epochs == 0 or last:
            images = self.sample_images(unet)
            save_samples(images, os.path.join(self.cfg.output_dir, f"samples_epoch_{epoch:04d}"), alphabet=self.alphabet)
            if self.alphabet is None:
                log_images(self.accelerator, "samples", images, global_step)

    def train(self, compute_loss: Callable) -> dict:
        """:meth:`~.script_run.ScriptRun.run_loop` with ``compute_loss(x0, levels)`` and :meth:`on_epoch_end`."""
        return self.run_loop(compute_loss, params_to_clip=list(self.model.parameters()), on_epoch_end=self.on_epoch_end)

    def finish(self, result: dict) -> dict:
        """The end of the run: all processes wait, the main one saves (:func:`save_unconditional_outputs`: the
        pipeline, the schedule plot, samples and the model card), all wait again and the trackers end. Returns
        ``result`` with the sampler."""
        cfg, accelerator = self.cfg, self.accelerator
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            save_unconditional_outputs(
                cfg.output_dir,
                unet=self.unwrapped,
                ema=self.ema,
                noise_scheduler=self.noise_scheduler,
                sampler=self.sampler,
                global_step=result["global_step"],
                num_samples=cfg.eval_batch_size,
                num_inference_steps=self.num_inference_steps,
                seed=cfg.seed or 0,
                alphabet=self.alphabet,
                hub=cfg.hub,
                card=dict(
                    dataset_name=cfg.data.dataset_name or (None if cfg.data.train_data_dir else cfg.data.default_dataset),
                    resolution=cfg.resolution,
                    num_channels=self.channels,
                    diffusion=cfg.path.diffusion,
                    prediction_type=self.noise_scheduler.config.get("prediction_type", self.sampler.prediction_type),
                    total_batch_size=result["total_batch_size"],
                    base_model=cfg.pretrained_model_name_or_path,
                    start=self.start.choice,
                ),
            )
        accelerator.wait_for_everyone()
        accelerator.end_training()
        return {**result, "sampler": self.sampler}


def setup_unconditional_run(
    cfg: UnconditionalConfig,
    *,
    noise_scheduler,
    sampler: TrainingTimestepSampler,
    start: SamplerStart | None,
    build_model: Callable,
    tracker_project: str = "train_unconditional",
) -> UnconditionalRun:
    """Everything ``train_unconditional.py`` does before its loss, given its training ``noise_scheduler`` and
    ``sampler`` (:func:`unconditional_scheduler`, :mod:`.args`) and where the sampler starts (``start``, applied before
    step 1): the ``Accelerator`` (:func:`~.loop.start_run`); the images or one-hot sequences (:func:`unconditional_dataset`,
    :func:`batch_loader`, prepared); the model, ``build_model(cfg, channels, length)`` (the script's part; ``length``
    None for images), with its EMA under ``--use_ema``; the optimizer and LR schedule over
    :func:`training_length`'s steps; everything prepared; the sampler's per-rank stream seeded from ``--seed`` (π is
    shared through the sampler's all-reduce); the checkpoint hooks of the sampler and of the model (``unet/``); the
    trackers, as ``tracker_project``, on the main process. With ``--show_noise_schedule`` only what
    :meth:`~.script_run.ScriptRun.show` needs (:attr:`~.script_run.ScriptRun.prepares_training`)."""
    run = UnconditionalRun(cfg=cfg, noise_scheduler=noise_scheduler, sampler=sampler, start=start)
    if not run.prepares_training:
        return run
    run.accelerator = accelerator = start_run(cfg.accelerator)
    run.alphabet = cfg.alphabet if cfg.sequence_column else None
    # a data set or model that does not fit the options (a missing column or asset, a batch larger than the data, a UNet
    # of another size, a model folder or Hub id that cannot be read) is a mistake in the options: one line, as argparse's, not a traceback
    with option_errors():
        dataset, collate, run.channels, length = unconditional_dataset(cfg.data, sequence_column=cfg.sequence_column, alphabet=cfg.alphabet)
        dataloader, order = batch_loader(dataset, cfg.data, collate_fn=collate)
    run.dataloader = accelerator.prepare(dataloader)
    run.epoch_setters = (order, dataset) if hasattr(dataset, "set_epoch") else (order,)

    with option_errors():
        model = build_model(cfg, run.channels, length)
    model_cls = type(model)  # before accelerate.prepare, which may wrap it (DistributedDataParallel)
    if cfg.use_ema:
        from diffusers.training_utils import EMAModel

        run.ema = EMAModel(
            model.parameters(),
            decay=cfg.ema_max_decay,
            use_ema_warmup=True,
            inv_gamma=cfg.ema_inv_gamma,
            power=cfg.ema_power,
            model_cls=model_cls,
            model_config=model.config,
        )
    _, max_steps, _ = training_length(cfg.run, run.dataloader)
    optimizer, lr_scheduler = make_optimizer_and_lr_scheduler(
        cfg.optimizer, model.parameters(), max_steps=max_steps, num_processes=accelerator.num_processes
    )
    run.model, run.optimizer, run.lr_scheduler = accelerator.prepare(model, optimizer, lr_scheduler)
    if run.ema is not None:
        run.ema.to(accelerator.device)

    # Each rank draws its own levels; the schedule (π) is shared through the sampler's all-reduce.
    sampler.manual_seed(cfg.seed or 0)
    register_sampler_checkpointing(accelerator, sampler)
    register_model_checkpointing(accelerator, model_cls=model_cls, subfolder="unet", ema=run.ema)
    if accelerator.is_main_process and not cfg.show_noise_schedule:
        accelerator.init_trackers(tracker_project, config=cfg.tracker)
    return run
