"""The training loop and what each step does: target, per-sample loss, weighting, optimizer step,
sampler update; the optimizer and learning-rate schedule; the EMA swap."""

from __future__ import annotations

import contextlib
import logging
import math
import os
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterable

import torch

from ..logs import get_logger
from ..sampler import NoiseLevels, SamplerStart, TrainingTimestepSampler, apply_start, batch_size_of
from ..weighting import per_sample_mse
from .checkpoints import (
    check_model_output,
    check_no_foreign_checkpoints,
    maybe_save_checkpoint,
    optimizer_steps_per_epoch,
    resume_checkpoint,
    resume_training_state,
)
from .monitor import ScheduleMonitor, truncate_history

logger = get_logger(__name__)

__all__ = [
    "RunConfig",
    "OptimizerConfig",
    "AcceleratorConfig",
    "start_run",
    "MAX_NONFINITE_STEPS",
    "NonFiniteSteps",
    "per_sample_mse",
    "training_target",
    "weighted_loss",
    "make_optimizer_and_lr_scheduler",
    "backward_and_step",
    "finish_micro_batch",
    "start_sampler",
    "training_length",
    "total_batch_size",
    "run_training_loop",
    "ema_weights",
]


@dataclass(frozen=True)
class RunConfig:
    """What the training loop and the checkpoints need from the command line
    (:func:`~diffusers_infonoise.training.args.run_config`), so that the layer below the scripts never
    reads an argparse namespace."""

    output_dir: str
    train_batch_size: int
    gradient_accumulation_steps: int = 1
    max_train_steps: int | None = None
    num_train_epochs: int = 1
    max_grad_norm: float | None = 1.0
    checkpointing_steps: int = 500
    checkpoints_total_limit: int | None = None
    resume_from_checkpoint: str | None = None
    schedule_plot_steps: int = 500
    validation_epochs: int = 1
    validation_prompts: tuple = ()

    def __post_init__(self):
        g = self.max_grad_norm
        if g is not None and (isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g) or g < 0):
            # clip_grad_norm_ scales by max_norm/norm: a negative value would turn every step uphill, NaN poison it
            raise ValueError(f"--max_grad_norm: must be a finite number >= 0 (0: no clipping), got {g!r}")


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW and the learning-rate schedule as diffusers' example scripts build them
    (:func:`~diffusers_infonoise.training.args.optimizer_config`)."""

    learning_rate: float
    lr_scheduler: str = "constant"
    lr_warmup_steps: int = 0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_weight_decay: float = 1e-2
    adam_epsilon: float = 1e-8
    scale_lr: bool = False


@dataclass(frozen=True)
class AcceleratorConfig:
    """How :func:`start_run` builds the run's ``Accelerator`` and the set-up diffusers' scripts do first
    (:func:`~diffusers_infonoise.training.args.accelerator_config`). ``report_to`` None: no tracker."""

    output_dir: str
    logging_dir: str = "logs"
    gradient_accumulation_steps: int = 1
    mixed_precision: str | None = None
    report_to: str | None = None
    seed: int | None = None
    allow_tf32: bool = False


def start_run(cfg: AcceleratorConfig):
    """The run's ``Accelerator`` (gradient accumulation, mixed precision, the tracker, logging under
    ``output_dir/logging_dir``), after diffusers' scripts' set-up: their logging format, the global
    seed, the output folder (main process) and TF32 matmuls (``allow_tf32``)."""
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration, set_seed

    accelerator = Accelerator(
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        mixed_precision=cfg.mixed_precision,
        log_with=cfg.report_to,
        project_config=ProjectConfiguration(project_dir=cfg.output_dir, logging_dir=os.path.join(cfg.output_dir, cfg.logging_dir)),
    )
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
    if cfg.seed is not None:
        set_seed(cfg.seed)
    if accelerator.is_main_process:
        os.makedirs(cfg.output_dir, exist_ok=True)
    if cfg.allow_tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
    return accelerator


def training_target(
    sampler: TrainingTimestepSampler, noise_scheduler, x0: torch.Tensor, noise: torch.Tensor, levels: NoiseLevels
) -> torch.Tensor:
    """The regression target for the sampler's ``prediction_type`` (shape of ``x0``).

    ``sample`` → x0 (on EDM the prediction is the denoiser D); ``epsilon`` → ε; ``v_prediction`` →
    ``sqrt(ᾱ)·ε − sqrt(1 − ᾱ)·x0`` (``get_velocity``); ``flow`` → ``ε − x0`` (diffusers' velocity).
    """
    pt = sampler.prediction_type
    if pt == "sample":
        return x0
    if pt == "epsilon":
        return noise
    if pt == "v_prediction":
        return noise_scheduler.get_velocity(x0, noise, levels.timesteps)
    if pt == "flow":
        return noise - x0
    raise ValueError(f"prediction_type: the training scripts do not build targets for {pt!r}")


def weighted_loss(sampler: TrainingTimestepSampler, levels: NoiseLevels, per_sample: torch.Tensor) -> torch.Tensor:
    """The scalar to backpropagate: mean of ``u(σ)·L`` (the user's loss weighting), times the
    importance weights of samplers that carry them (Kingma-Gao). The sampler only changes π."""
    # on the loss's device: a host copy here would synchronise every step
    dtype = torch.float32 if per_sample.device.type == "mps" else torch.float64
    u = sampler.objective.loss_weight(levels.sigmas.detach().to(per_sample.device, dtype), sigma_data=sampler.sigma_data).to(torch.float32)
    if levels.loss_weights is not None:
        u = u * levels.loss_weights.to(per_sample.device, torch.float32)
    return (u * per_sample).mean()


def make_optimizer_and_lr_scheduler(
    cfg: OptimizerConfig, params, *, max_steps: int, num_processes: int, batch_size: int = 1, gradient_accumulation_steps: int = 1
) -> tuple:
    """``(optimizer, lr_scheduler)`` as diffusers' example scripts build them.

    AdamW on ``params`` with ``--learning_rate`` and the ``--adam_*`` arguments (:class:`OptimizerConfig`);
    with ``--scale_lr`` (where the script has that flag) the rate is multiplied by
    ``gradient_accumulation_steps``, the per-device ``batch_size`` and ``num_processes``. The schedule is diffusers' ``get_scheduler``
    (``--lr_scheduler``) over ``max_steps`` optimizer steps with ``--lr_warmup_steps`` of warm-up,
    both counts times ``num_processes``: once prepared by accelerate, the scheduler steps once per
    process at every optimizer step.
    """
    from diffusers.optimization import get_scheduler

    lr = cfg.learning_rate
    if cfg.scale_lr:
        lr *= gradient_accumulation_steps * batch_size * num_processes
    optimizer = torch.optim.AdamW(
        params, lr=lr, betas=(cfg.adam_beta1, cfg.adam_beta2), weight_decay=cfg.adam_weight_decay, eps=cfg.adam_epsilon
    )
    lr_scheduler = get_scheduler(
        cfg.lr_scheduler,
        optimizer=optimizer,
        num_warmup_steps=cfg.lr_warmup_steps * num_processes,
        num_training_steps=max_steps * num_processes,
    )
    return optimizer, lr_scheduler


#: optimizer steps in a row with a non-finite loss or gradient before the run stops with an error
MAX_NONFINITE_STEPS = 3


def backward_and_step(accelerator, loss: torch.Tensor, *, optimizer, lr_scheduler, params, max_grad_norm: float | None) -> bool:
    """The update of one micro-batch, inside ``accelerator.accumulate(model)``: backpropagate
    ``loss``; when the gradients are synchronized (an optimizer step) clip those of ``params`` to
    ``max_grad_norm`` (0 or None: no clipping); step the optimizer and the LR schedule and zero the
    gradients (the prepared optimizer and schedule skip the steps between accumulation boundaries).

    Returns False when this optimizer step was *not* applied because its gradient norm was not finite
    (a NaN/inf loss in any micro-batch, or an fp16 overflow): the gradients are dropped instead, so
    no non-finite value reaches the weights. The norm is the all-reduced one, so every process decides alike.
    """
    accelerator.backward(loss)
    if not accelerator.sync_gradients:
        optimizer.step()  # the prepared optimizer skips it between accumulation boundaries
        lr_scheduler.step()
        optimizer.zero_grad()
        return True
    norm = accelerator.clip_grad_norm_(params, max_grad_norm or math.inf)
    finite = norm is None or bool(torch.isfinite(torch.as_tensor(norm)).all())
    if finite:
        optimizer.step()
        lr_scheduler.step()
    optimizer.zero_grad()
    return finite


class NonFiniteSteps:
    """Counts optimizer steps that were not applied (:func:`backward_and_step` returned False) and stops
    the run, naming the step and the likely causes, after ``limit`` in a row."""

    def __init__(self, limit: int = MAX_NONFINITE_STEPS):
        self.limit, self.total, self.in_a_row = limit, 0, 0

    def record(self, applied: bool, step: int) -> None:
        if applied:
            self.in_a_row = 0
            return
        self.total += 1
        self.in_a_row += 1
        logger.warning(f"step {step}: non-finite loss or gradient; the update was not applied ({self.total} so far)")
        if self.in_a_row >= self.limit:
            raise RuntimeError(
                f"step {step}: {self.in_a_row} optimizer steps in a row had a non-finite loss or gradient and none was "
                "applied; the weights are those of the last finite step. Likely causes: a loss weight that is infinite "
                "at some noise level, a (pretrained) model whose output is not finite at some noise levels (a profile start "
                "warns where), --sigma_data <= 0, an fp16 overflow (try --mixed_precision bf16 or no), training data of a scale "
                "whose squares overflow float32 (values beyond about 1e18: array columns are trained as stored; rescale them), "
                "or a learning rate that is too high"
            )


def finish_micro_batch(
    accelerator,
    sampler: TrainingTimestepSampler,
    monitor: ScheduleMonitor,
    levels: NoiseLevels,
    per_sample: torch.Tensor,
    *,
    ema=None,
    params=None,
    applied: bool = True,
) -> bool:
    """After :func:`backward_and_step`, outside ``accelerate.accumulate``: the sampler and the
    ``monitor`` get the micro-batch's unweighted per-sample loss; at an optimizer step (synchronized
    gradients) the sampler then counts the step (``sampler.step()``, which may refresh π) and the
    EMA, if any, follows ``params``. Returns whether this micro-batch ended an optimizer step."""
    sampler.update(levels, per_sample.detach())
    monitor.observe(levels, per_sample.detach())
    if not accelerator.sync_gradients:
        return False
    sampler.step()
    if ema is not None and applied:  # a step that was not applied leaves the weights, and their EMA, as they are
        ema.step(params)
    return True


def start_sampler(accelerator, sampler: TrainingTimestepSampler, start: SamplerStart, *, model, compute_loss: Callable, dataloader) -> dict:
    """Apply ``start`` before step 1 of a fresh run (:func:`~diffusers_infonoise.apply_start`, which logs it). A
    ``"profile"`` start measures ``compute_loss`` on the dataloader's batches with ``model`` in eval mode, without
    gradients (:meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.start_from_model`); its forward passes
    and time are logged to the trackers as ``infonoise/start_forward_passes`` and ``infonoise/start_seconds``. Returns
    ``apply_start``'s description."""
    # logged by apply_start, here and not where it was chosen: the scripts choose it before start_run configures logging
    model.eval()
    info = apply_start(sampler, start, loss_fn=compute_loss, batches=dataloader, progress=accelerator.is_local_main_process)
    model.train()
    if start.choice == "profile":
        accelerator.log(
            {"infonoise/start_forward_passes": float(info["forward_passes"]), "infonoise/start_seconds": float(info["seconds"])}, step=0
        )
    return info


def training_length(run: RunConfig, dataloader) -> tuple[int, int, int]:
    """``(steps_per_epoch, max_steps, num_epochs)`` in optimizer steps for a *prepared* dataloader
    (:func:`optimizer_steps_per_epoch`)."""
    steps_per_epoch = optimizer_steps_per_epoch(run.gradient_accumulation_steps, dataloader)
    max_steps = run.max_train_steps or run.num_train_epochs * steps_per_epoch
    return steps_per_epoch, max_steps, math.ceil(max_steps / steps_per_epoch)


def total_batch_size(accelerator, run: RunConfig) -> int:
    """Examples per optimizer step, over all processes and accumulated micro-batches."""
    return run.train_batch_size * accelerator.num_processes * run.gradient_accumulation_steps


def run_training_loop(
    accelerator,
    run: RunConfig,
    *,
    model,
    optimizer,
    lr_scheduler,
    dataloader,
    epoch_setters: Iterable,
    sampler: TrainingTimestepSampler,
    compute_loss: Callable,
    params_to_clip,
    ema=None,
    validate: Callable | None = None,
    on_epoch_end: Callable | None = None,
    start: SamplerStart | None = None,
    option_errors: Callable[[], ContextManager] = contextlib.nullcontext,
    model_output: dict | None = None,
) -> dict:
    """The one training loop of every script, resume included.

    Per micro-batch: levels from ``sampler`` → ``compute_loss(batch, levels)`` gives the (B,)
    unweighted per-sample loss in the sampler's parameterization → the user's loss weighting
    (:func:`weighted_loss`) → backward, clip, optimizer. The sampler then gets the unweighted loss
    (``sampler.update``) and, once per optimizer step, ``sampler.step()``. Logged every optimizer
    step: ``train_loss`` (mean over processes and accumulation), ``lr``, ``step_time_s``,
    ``ema_decay`` with an EMA, the loss per noise-level quartile and the schedule's scalars.

    Args:
        batch: a tensor, a tuple whose first item is one, or a dict of them (the batch size is read from it).
        epoch_setters: objects with ``set_epoch`` (dataset and batch order), called at each epoch.
        validate: ``validate(step)`` on the main process every ``--validation_epochs`` epochs, with the EMA
            weights when there is an EMA (text-to-image).
        on_epoch_end: ``on_epoch_end(epoch, global_step, last)`` on every process after each epoch
            (``last``: the run ends after it).
        start: where the sampler starts (METHOD.md §5.9; :func:`~diffusers_infonoise.training.args.sampler_start`):
            applied once, before step 1 of a run that does not resume (a resumed sampler's state is the
            checkpoint's), by :func:`start_sampler`.
        option_errors: what the steps before step 1 that read the options' sources (the checkpoint a resume names,
            the batches a start reads) run inside: the scripts' :func:`~.args.option_errors` ends a mistake there in
            one line; by default it is raised.
        model_output: what the network's output means (``{"prediction_type": ...}``, the scheduler's), recorded in each
            checkpoint; a resume of a checkpoint that recorded another is refused (:func:`~.checkpoints.check_model_output`).

    Returns:
        ``{"global_step", "step_times", "total_batch_size", "max_steps"}``; ``step_times`` holds
        the wall time of each optimizer step (data loading included).
    """
    import time

    from tqdm.auto import tqdm

    _, max_steps, num_epochs = training_length(run, dataloader)
    with option_errors():  # a checkpoint that does not fit the options: one line, as argparse's, before any step
        resume_dir = resume_checkpoint(run)
        check_model_output(resume_dir, model_output)
    # the warm-up and the profile start's budget, settled once from the run's length and the start it applies (a
    # resumed run applies none: its checkpoint brings the sampler's state)
    sampler.plan_run(int(max_steps), start=None if resume_dir else start)
    total_batch = total_batch_size(accelerator, run)
    with option_errors():
        global_step, first_epoch, skip_batches = resume_training_state(accelerator, run, sampler, dataloader, resume_dir)
        if global_step > max_steps:
            raise ValueError(
                f"--resume_from_checkpoint: the checkpoint is at optimizer step {global_step}, past this run's "
                f"{max_steps} (--max_train_steps / --num_train_epochs); a resume never trains past the run's end "
                "and cannot go back: raise --max_train_steps, or resume from an earlier checkpoint-N"
            )
        check_no_foreign_checkpoints(run, global_step, max_steps)
    if global_step == max_steps and max_steps > 0 and run.resume_from_checkpoint:
        # a requeued job, or a kill during the final save: the checkpoint already is the end of the run
        logger.warning(
            f"--resume_from_checkpoint: the checkpoint is at optimizer step {global_step}, the run's last "
            f"({max_steps}); nothing is left to train, no step is taken and the weights, EMA and schedule "
            "stay as they are (the final outputs are written from them)"
        )
        return {"global_step": global_step, "step_times": [], "total_batch_size": total_batch, "max_steps": max_steps}

    if resume_dir and accelerator.is_main_process:
        truncate_history(run.output_dir, global_step)
    monitor = ScheduleMonitor(sampler, run.output_dir, plot_every=run.schedule_plot_steps or None)
    if start is not None and global_step > 0:
        logger.info(f"noise sampler: resumed at step {global_step} with the checkpoint's schedule ({start.choice} start not repeated)")
    if start is not None and global_step == 0:  # after the monitor: it logs the start's π at step 1
        with option_errors():  # the start reads the first batches: an unreadable example ends in one line, before any step
            start_sampler(accelerator, sampler, start, model=model, compute_loss=compute_loss, dataloader=dataloader)
    logger.info(
        f"***** Running training: {num_epochs} epochs, {max_steps} optimizer steps, total batch {total_batch}, "
        f"sampler {sampler.name} ({sampler.prediction_type}, weighting "
        f"{sampler.describe()['loss_weighting']}), path {sampler.path.kind} *****"
    )
    progress = tqdm(total=max_steps, initial=global_step, disable=not accelerator.is_local_main_process, desc="steps")
    nonfinite = NonFiniteSteps()
    step_times: list[float] = []
    train_loss = 0.0
    last = time.perf_counter()
    for epoch in range(first_epoch, num_epochs):
        model.train()
        loader = accelerator.skip_first_batches(dataloader, skip_batches) if skip_batches else dataloader
        skip_batches = 0
        # accelerate's loaders call set_epoch(<their own iteration count>) when iterated; a loader that
        # a resumed run never iterated before would restart at epoch 0, so set it explicitly
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        for obj in epoch_setters:
            obj.set_epoch(epoch)
        for batch in loader:
            with accelerator.accumulate(model):
                levels = sampler.sample(batch_size_of(batch), device=accelerator.device)  # the sampler's per-rank stream
                per_sample = compute_loss(batch, levels)
                loss = weighted_loss(sampler, levels, per_sample)
                train_loss += accelerator.gather(loss.detach().reshape(1)).mean().item() / run.gradient_accumulation_steps
                applied = backward_and_step(
                    accelerator,
                    loss,
                    optimizer=optimizer,
                    lr_scheduler=lr_scheduler,
                    params=params_to_clip,
                    max_grad_norm=run.max_grad_norm,
                )
            if not finish_micro_batch(accelerator, sampler, monitor, levels, per_sample, ema=ema, params=params_to_clip, applied=applied):
                continue
            global_step += 1
            nonfinite.record(applied, global_step)
            progress.update(1)
            logs = {"train_loss": train_loss, "lr": lr_scheduler.get_last_lr()[0]}
            if ema is not None:
                logs["ema_decay"] = ema.cur_decay_value
            if nonfinite.total:
                logs["nonfinite_steps"] = float(nonfinite.total)
            train_loss = 0.0
            logs.update(monitor.after_step(accelerator, global_step))
            now = time.perf_counter()
            step_times.append(now - last)
            logs["step_time_s"] = step_times[-1]
            progress.set_postfix(loss=f"{logs['train_loss']:.4f}")
            accelerator.log(logs, step=global_step)
            maybe_save_checkpoint(accelerator, run, global_step, model_output)
            last = time.perf_counter()  # checkpoint writes are not part of a step's time
            if global_step >= max_steps:
                break
        if (
            validate is not None
            and accelerator.is_main_process
            and run.validation_prompts
            and epoch % run.validation_epochs == 0
            and global_step < max_steps
        ):
            with ema_weights(ema, params_to_clip):
                validate(global_step)
            last = time.perf_counter()
        done = global_step >= max_steps or epoch == num_epochs - 1
        if on_epoch_end is not None:
            on_epoch_end(epoch, global_step, done)
            last = time.perf_counter()
        if done:
            break
    progress.close()
    return {"global_step": global_step, "step_times": step_times, "total_batch_size": total_batch, "max_steps": max_steps}


class ema_weights:
    """Context manager: the EMA weights in ``parameters`` inside, the trained ones restored after (no-op without EMA)."""

    def __init__(self, ema, parameters):
        self.ema, self.parameters = ema, list(parameters) if ema is not None else None

    def __enter__(self):
        if self.ema is not None:
            self.ema.store(self.parameters)
            self.ema.copy_to(self.parameters)

    def __exit__(self, *exc):
        if self.ema is not None:
            self.ema.restore(self.parameters)
        return False
