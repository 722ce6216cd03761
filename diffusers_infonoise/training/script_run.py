"""A script's run between its setup and its end (:class:`ScriptRun`), and its one other ending: ``--show_noise_schedule``,
where the schedule the run would start from is shown and nothing is trained (:meth:`ScriptRun.show`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..sampler import SamplerStart, TrainingTimestepSampler, apply_start
from .args import option_errors
from .loop import run_training_loop, start_sampler, total_batch_size, training_length
from .monitor import show_noise_schedule

__all__ = ["ScriptRun"]


@dataclass
class ScriptRun:
    """What every script's run holds between its setup and its end (:class:`~.text_to_image.TextToImageRun`,
    :class:`~.unconditional.UnconditionalRun`): its config ``cfg`` (with ``run`` and ``show_noise_schedule``), the
    training ``noise_scheduler``, the ``sampler`` and its ``start``, and what accelerate prepared. A run that only shows
    its schedule and does not measure the model (:attr:`prepares_training` False) has nothing else set."""

    cfg: object
    noise_scheduler: object
    sampler: TrainingTimestepSampler
    start: SamplerStart | None = None
    accelerator: object = None
    model: object = None
    ema: object = None
    optimizer: object = None
    lr_scheduler: object = None
    dataloader: object = None
    epoch_setters: tuple = ()

    @property
    def showing(self) -> bool:
        """``--show_noise_schedule``: the script ends in :meth:`show`, nothing is trained."""
        return bool(self.cfg.show_noise_schedule)

    @property
    def measures_start(self) -> bool:
        """Whether the start is measured on the data with the model (a ``"profile"`` start), before step 1 or for :meth:`show`."""
        return self.start is not None and self.start.choice == "profile"

    @property
    def prepares_training(self) -> bool:
        """Whether the setup prepares the accelerator, data and model: for training, and for showing a start measured
        with the model; showing any other start needs the sampler only."""
        return not self.showing or self.measures_start

    @property
    def device(self):
        return self.accelerator.device

    @property
    def unwrapped(self):
        """The trained model without accelerate's wrapper (to build a pipeline, save or sample it)."""
        return self.accelerator.unwrap_model(self.model)

    def run_loop(self, compute_loss: Callable, *, params_to_clip, **callbacks) -> dict:
        """:func:`~.loop.run_training_loop` of this run with ``compute_loss`` and ``callbacks`` (``validate``, ``on_epoch_end``)."""
        return run_training_loop(
            self.accelerator,
            self.cfg.run,
            model=self.model,
            optimizer=self.optimizer,
            lr_scheduler=self.lr_scheduler,
            dataloader=self.dataloader,
            epoch_setters=self.epoch_setters,
            sampler=self.sampler,
            compute_loss=compute_loss,
            params_to_clip=params_to_clip,
            ema=self.ema,
            start=self.start,
            option_errors=option_errors,
            model_output={"prediction_type": getattr(self.noise_scheduler.config, "prediction_type", None)},
            **callbacks,
        )

    def show(self, build_loss: Callable[[], Callable] | None = None) -> dict:
        """``--show_noise_schedule``: apply the start as a fresh run would, print and plot the density it gives
        (:func:`~.monitor.show_noise_schedule`), and train and save nothing. A ``"stored"`` start rebuilds the stored
        schedule; a ``"profile"`` start is measured on the data as the run measures it (:func:`~.loop.start_sampler`, its
        budget planned from the run's length), with the loss ``build_loss()`` (the script's ``compute_loss``, built only
        then, on the model and data the setup prepared for it).

        Returns:
            ``{"sampler", "shown"}`` (the plot's path), and after a measured start ``{"global_step": 0, "step_times": [],
            "total_batch_size", "max_steps"}`` as the loop counts them.
        """
        sampler, start, output_dir = self.sampler, self.start, self.cfg.run.output_dir
        if not self.measures_start:
            if start is not None and start.choice == "stored":
                apply_start(sampler, start)
            return {"sampler": sampler, "shown": show_noise_schedule(sampler, output_dir, start=start)}
        _, max_steps, _ = training_length(self.cfg.run, self.dataloader)
        sampler.plan_run(int(max_steps), start=start)
        info = start_sampler(self.accelerator, sampler, start, model=self.model, compute_loss=build_loss(), dataloader=self.dataloader)
        shown = show_noise_schedule(sampler, output_dir, start=start, info=info)
        counts = {"global_step": 0, "step_times": [], "total_batch_size": total_batch_size(self.accelerator, self.cfg.run)}
        return {**counts, "max_steps": max_steps, "shown": shown, "sampler": sampler}
