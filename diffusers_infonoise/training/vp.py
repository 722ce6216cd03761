"""What the VP (DDPM) text-to-image scripts (Stable Diffusion, SDXL) share: the training scheduler with
``--prediction_type``, diffusers' ``--noise_offset`` and ``--input_perturbation``, and the sampler
told the loss (the parameterization and, with ``--snr_gamma``, Min-SNR-γ; METHOD.md §4)."""

from __future__ import annotations

import argparse

import torch

from ..samplers import TrainingTimestepSampler
from .args import build_noise_sampler

__all__ = ["DEFAULT_VP_NOISE_SAMPLER", "add_vp_args", "load_vp_scheduler", "build_vp_sampler", "vp_noise", "vp_card_details"]

#: what diffusers' VP scripts sample when no --noise_sampler is given
DEFAULT_VP_NOISE_SAMPLER = "uniform"


def add_vp_args(parser: argparse.ArgumentParser, *, family: str) -> None:
    """``--prediction_type``, ``--noise_offset`` and ``--input_perturbation`` (diffusers' meaning)."""
    g = parser.add_argument_group(family)
    g.add_argument("--prediction_type", type=str, default=None, choices=("epsilon", "v_prediction", "sample"),
                   help="The loss parameterization (registered in the saved scheduler). Default: the scheduler's.")
    g.add_argument("--noise_offset", type=float, default=0.0,
                   help="Offset noise (diffusers' meaning): add noise_offset·N(0, 1) per sample and channel to ε.")
    g.add_argument("--input_perturbation", type=float, default=0.0,
                   help="Input perturbation (diffusers' meaning, Ning et al. 2023): the model input is noised with "
                        "ε + input_perturbation·N(0, I) while the target keeps ε.")


def load_vp_scheduler(args):
    """The training scheduler: ``DDPMScheduler`` from the model's ``scheduler`` folder (as diffusers'
    scripts do), with ``--prediction_type`` registered when given."""
    from diffusers import DDPMScheduler

    scheduler = DDPMScheduler.from_pretrained(args.pretrained_model_name_or_path, subfolder="scheduler",
                                              revision=args.revision)
    if args.prediction_type is not None:
        scheduler.register_to_config(prediction_type=args.prediction_type)
    return scheduler


def build_vp_sampler(args, noise_scheduler) -> TrainingTimestepSampler:
    """The training-noise sampler for the loss a VP script trains (parameterization, Min-SNR); diffusers'
    own uniform t without ``--noise_sampler``."""
    return build_noise_sampler(args, noise_scheduler, prediction_type=noise_scheduler.config.prediction_type,
                               loss_weighting="min_snr" if args.snr_gamma else "none", snr_gamma=args.snr_gamma,
                               name=args.noise_sampler or DEFAULT_VP_NOISE_SAMPLER)


def vp_noise(latents: torch.Tensor, *, noise_offset: float = 0.0, input_perturbation: float = 0.0):
    """``(noise, model_noise)``: ε with diffusers' offset noise, and the ε that noises the model input
    (with input perturbation; the target keeps ``noise``)."""
    noise = torch.randn_like(latents)
    if noise_offset:
        noise = noise + noise_offset * torch.randn(latents.shape[:2] + (1, 1), device=latents.device, dtype=latents.dtype)
    model_noise = noise + input_perturbation * torch.randn_like(noise) if input_perturbation else noise
    return noise, model_noise


def vp_card_details(*, ema, noise_offset: float = 0.0, input_perturbation: float = 0.0, **more) -> dict:
    """The model card's run details of a VP script (EMA, offset noise, input perturbation, ``more``)."""
    details = {"EMA": "yes" if ema is not None else "no", **more}
    if noise_offset:
        details["noise offset"] = noise_offset
    if input_perturbation:
        details["input perturbation"] = input_perturbation
    return details
