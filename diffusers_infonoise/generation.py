"""How an unconditional diffusers model is called and sampled on each path, in one place.

Training (every script), sampling and the diagnostics call the network through :func:`model_output`
(or, inside a scheduler's own sampling loop, :func:`call_model` with :func:`model_timesteps`), so the
EDM timestep scaling and preconditioning below can never differ between them (METHOD.md §7).

* VP (DDPM): ``unet(x_t, t)`` with integer t; the output is ε, v or x0 per ``prediction_type``.
* Flow: ``unet(x_s, s·N)``; the output is the velocity ``ε − x0`` (diffusers' convention).
* VE/EDM: ``F = unet(c_in·x, EDM_TIMESTEP_SCALE·c_noise)`` and ``D = c_skip·x + c_out·F`` through the
  scheduler's ``precondition_inputs``/``precondition_outputs`` (Karras et al. 2022, Table 1).
"""

from __future__ import annotations

from typing import Callable

import torch

from .paths import path_class

__all__ = ["EDM_TIMESTEP_SCALE", "model_timesteps", "call_model", "model_output", "generate_images", "is_1d_model"]

#: diffusers' positional time embedding barely separates EDM's c_noise = 0.25·ln σ (about −1.6..1.1);
#: scaled by 250 it spans about −390..280, the range of DDPM timesteps the embedding was built for.
EDM_TIMESTEP_SCALE = 250.0


def model_timesteps(noise_scheduler, timesteps: torch.Tensor) -> torch.Tensor:
    """What the UNet receives as ``timestep`` for the scheduler's native ``timesteps``.

    EDM schedulers: ``EDM_TIMESTEP_SCALE · c_noise``; every other scheduler: unchanged.
    """
    if path_class(noise_scheduler).preconditioned:
        return timesteps * EDM_TIMESTEP_SCALE
    return timesteps


def _model_dtype(model) -> torch.dtype | None:
    dtype = getattr(model, "dtype", None)
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(model, torch.nn.Module):
        for p in model.parameters():
            return p.dtype
    return None


def call_model(model, sample: torch.Tensor, timestep: torch.Tensor, model_kwargs: dict | None = None) -> torch.Tensor:
    """``model(sample, timestep=timestep, **model_kwargs)`` and its output tensor, as float32.

    ``timestep`` goes by keyword, which every diffusers denoiser accepts (``UNet2DModel``,
    ``UNet1DModel``, ``UNet2DConditionModel``: ``(sample, timestep, ...)``;
    ``SD3Transformer2DModel``: ``(hidden_states, ..., timestep=...)``). The input is cast to the
    model's dtype; ``.sample`` of a diffusers output and the first element of a tuple are unwrapped.
    """
    dtype = _model_dtype(model)
    if dtype is not None and sample.is_floating_point():
        sample = sample.to(dtype)
    out = model(sample, timestep=timestep, **(model_kwargs or {}))
    if hasattr(out, "sample"):
        out = out.sample
    elif isinstance(out, (tuple, list)):
        out = out[0]
    return out.float()


def _fits(out: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    if out.shape != like.shape:
        raise ValueError(
            f"model: its output has shape {tuple(out.shape)}, the noisy input {tuple(like.shape)}; "
            "the model does not fit this data (channels or resolution)"
        )
    return out


def model_output(
    model,
    noise_scheduler,
    noisy: torch.Tensor,
    timesteps: torch.Tensor,
    sigmas: torch.Tensor | None = None,
    *,
    model_kwargs: dict | None = None,
    edm_timestep_scale: float = EDM_TIMESTEP_SCALE,
    pack: Callable | None = None,
    unpack: Callable | None = None,
) -> torch.Tensor:
    """The network's prediction for a noisy (B, ...) batch, in the parameterization it is trained in:
    the one model call of training, the text-to-image scripts and the diagnostics.

    Args:
        model: a diffusers denoiser (UNet or transformer).
        noisy: the noisy sample ``x`` (EDM: ``x0 + σ·ε``, unscaled).
        timesteps: (B,) native timesteps (:class:`~diffusers_infonoise.NoiseLevels`).
        sigmas: (B,) VE σ; required on EDM, where the result is the denoiser ``D`` (an x0 estimate).
        model_kwargs: passed to the model (``encoder_hidden_states``, ``pooled_projections``, ...).
        edm_timestep_scale: the factor on EDM's ``c_noise`` (METHOD.md §7); it must be the training's.
        pack, unpack: for a model that sees its input in another layout: ``pack(x)`` is what it is fed
            (Flux: ``FluxPipeline._pack_latents``, 2x2 patches), ``unpack(out)`` turns its output back into
            the shape of ``noisy`` (``_unpack_latents``). Default: the identity.

    Returns:
        float32, shaped like ``noisy``: VP ε/v/x0, flow velocity (or x0), EDM ``D``.

    Raises:
        ValueError: ``sigmas`` missing on an EDM scheduler, or an output shaped unlike ``noisy`` (a model
            that does not fit the data's channels or resolution).
    """

    def call(x, t):
        out = call_model(model, x if pack is None else pack(x), t, model_kwargs)
        return _fits(out if unpack is None else unpack(out), noisy)

    if not path_class(noise_scheduler).preconditioned:
        return call(noisy, timesteps)
    if sigmas is None:
        raise ValueError("sigmas: required for EDM schedulers (the preconditioning depends on sigma)")
    shape = (-1,) + (1,) * (noisy.ndim - 1)
    sig = sigmas.to(device=noisy.device, dtype=noisy.dtype).view(shape)
    x_in = noise_scheduler.precondition_inputs(noisy, sig)
    f = call(x_in, timesteps * edm_timestep_scale)
    return noise_scheduler.precondition_outputs(noisy, f.to(noisy.dtype), sig).float()


@torch.no_grad()
def is_1d_model(model) -> bool:
    """Whether ``model`` (or its ``config``) is a 1-D diffusers model (``UNet1DModel``): inputs (B, C, L)."""
    from diffusers import UNet1DModel

    config = getattr(model, "config", model)
    return isinstance(model, UNet1DModel) or getattr(config, "_class_name", None) == "UNet1DModel"


def _initial_noise_scale(scheduler) -> float:
    """The scale of the initial noise: ``init_noise_sigma``. EDM schedulers compute it from their config's
    σ_max, ``(σ_max² + 1)^½``; the same formula of the first σ stepped keeps it right for a custom grid."""
    if type(scheduler).__name__.startswith("EDM"):
        return (float(scheduler.sigmas[0]) ** 2 + 1) ** 0.5
    return getattr(scheduler, "init_noise_sigma", 1.0)


@torch.no_grad()  # sampling only: without it every step's activations stay alive for autograd (GBs)
def generate_images(
    unet,
    noise_scheduler,
    batch_size: int,
    *,
    num_inference_steps: int = 50,
    generator: torch.Generator | None = None,
    device=None,
    progress: bool = False,
    sigmas=None,
) -> torch.Tensor:
    """Sample ``batch_size`` images with the scheduler's own ``step``; returns (B, C, H, W) float32 in [0, 1],
    or (B, C, L) for a 1-D model (``UNet1DModel``, e.g. one-hot sequences; ``L = config.sample_size``).

    Works for DDPM/DDIM (the loop of ``DDPMPipeline``), ``FlowMatchEulerDiscreteScheduler`` and the
    EDM schedulers (``scale_model_input`` and ``init_noise_sigma`` are honoured; the EDM network is
    called with :func:`model_timesteps`). A copy of the scheduler is used, so training state is untouched.

    ``sigmas``: a grid of VE σ to step through instead of the scheduler's own spacing of
    ``num_inference_steps`` (an :class:`~diffusers_infonoise.scheduler_grids.InferenceGrid`, e.g. the
    InfoGrid; set with :func:`~diffusers_infonoise.scheduler_grids.set_infogrid`).
    """
    import copy

    from diffusers.utils.torch_utils import randn_tensor
    from tqdm.auto import tqdm

    scheduler = copy.deepcopy(noise_scheduler)
    device = device or next(unet.parameters()).device
    cfg = unet.config
    if is_1d_model(unet):
        size = (cfg.sample_size,)
    else:
        size = cfg.sample_size if isinstance(cfg.sample_size, (tuple, list)) else (cfg.sample_size, cfg.sample_size)
    dtype = next(unet.parameters()).dtype
    x = randn_tensor((batch_size, cfg.in_channels, *size), generator=generator, device=device, dtype=dtype)
    if sigmas is not None:
        from .scheduler_grids import set_infogrid

        set_infogrid(scheduler, sigmas, device=device)
    else:
        scheduler.set_timesteps(num_inference_steps, device=device)
    x = x * _initial_noise_scale(scheduler)
    for t in tqdm(scheduler.timesteps, disable=not progress, desc="sampling"):
        x_in = scheduler.scale_model_input(x, t) if hasattr(scheduler, "scale_model_input") else x
        t_batch = t.expand(batch_size) if torch.is_tensor(t) else torch.full((batch_size,), t, device=device)
        out = call_model(unet, x_in, model_timesteps(scheduler, t_batch)).to(x.dtype)
        x = scheduler.step(out, t, x, generator=generator).prev_sample
    return (x.float() / 2 + 0.5).clamp(0, 1)
