#!/usr/bin/env python
"""Train an unconditional diffusion model with an InfoNoise (or baseline) training-noise schedule.

In the style of diffusers' ``examples/unconditional_image_generation/train_unconditional.py``, with
``--diffusion {ddpm,edm,flow}`` and ``--noise_sampler``. Run it single-process with ``python`` or
``accelerate launch``, or multi-process, e.g. on CPU::

    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 --num_machines 1 \\
        --mixed_precision no --dynamo_backend no training_scripts/train_unconditional.py --dataset_name mnist ...

Installed with the package it is the command ``infonoise-train-unconditional`` and the module
``diffusers_infonoise.training_scripts.train_unconditional`` (``python -m`` or ``accelerate launch -m``).

The script holds its parts (the UNet of the data: 2-D for images, 1-D for one-hot sequences) and its loss: the
network's output on the noised data, read through the scheduler's path (``model_output``), against the target of the
loss the sampler is told (``training_target``). The path's facts (its scheduler, prediction types, pipeline,
sampling steps) are the path's (:mod:`diffusers_infonoise.paths`); the run's setup, training and saving are
:class:`~diffusers_infonoise.training.UnconditionalRun`'s.
"""

from __future__ import annotations

import argparse
import sys

import torch
from accelerate.logging import get_logger
from diffusers import UNet1DModel, UNet2DModel

from diffusers_infonoise import training
from diffusers_infonoise.generation import model_output
from diffusers_infonoise.weighting import per_sample_mse

logger = get_logger(__name__, log_level="INFO")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Train an unconditional diffusion model with InfoNoise.", epilog=training.script_epilog("train_unconditional")
    )
    training.add_unconditional_args(parser)
    args = parser.parse_args(argv)
    training.check_unconditional_args(parser, args)
    return args


def build_unet(cfg, channels: int, length: int | None = None):
    """The denoiser: ``UNet2DModel`` for images; ``UNet1DModel`` for sequences (``length`` given); pretrained, of
    ``--model_config_name_or_path`` or the default one (:func:`~diffusers_infonoise.training.unconditional_model`)."""
    return training.unconditional_model(UNet1DModel if length is not None else UNet2DModel, cfg, channels=channels, length=length)


def training_loss(run):
    """The loss, ``compute_loss(x0, levels)``: the UNet's output on the noised data, read through the scheduler's path,
    against the target of the sampler's parameterization (per sample, unweighted)."""
    model, sampler, noise_scheduler = run.model, run.sampler, run.noise_scheduler

    def compute_loss(x0, levels):
        noise = torch.randn_like(x0)
        noisy = sampler.add_noise(x0, noise, levels)
        pred = model_output(model, noise_scheduler, noisy, levels.timesteps, levels.sigmas)
        return per_sample_mse(pred, training.training_target(sampler, noise_scheduler, x0, noise, levels))

    return compute_loss


def main(argv=None) -> dict:
    """Train; returns ``{"global_step", "step_times", "total_batch_size", "sampler"}``."""
    args = parse_args(argv)
    cfg = training.unconditional_config(args)
    with training.option_errors():  # a mistake in the options ends in one line, as argparse's do
        noise_scheduler, objective = training.unconditional_scheduler(cfg)
        sampler = training.build_noise_sampler(args, noise_scheduler, objective=objective)
        start = training.sampler_start(args, sampler, noise_scheduler, pretrained_model=bool(cfg.pretrained_model_name_or_path))
    run = training.setup_unconditional_run(cfg, noise_scheduler=noise_scheduler, sampler=sampler, start=start, build_model=build_unet)
    if run.showing:  # --show_noise_schedule: the schedule is shown (a profile start measured with the loss first), nothing is trained
        return run.show(lambda: training_loss(run))
    return run.finish(run.train(training_loss(run)))


if __name__ == "__main__":
    main()
    sys.exit(0)
