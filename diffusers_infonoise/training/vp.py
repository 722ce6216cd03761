"""What the VP (DDPM) text-to-image scripts (Stable Diffusion, SDXL) share: diffusers' offset noise and
input perturbation, and their model card's details. Their options (``--prediction_type``,
``--noise_offset``, ``--input_perturbation``), the training scheduler and the sampler told the loss are
read at the edge, :mod:`diffusers_infonoise.training.args` (``add_vp_args``, ``load_vp_scheduler``,
``build_vp_sampler``)."""

from __future__ import annotations

import torch

__all__ = ["vp_noise", "vp_card_details"]


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
