"""What the rectified-flow text-to-image scripts (SD3, Flux) share: diffusers' ``--weighting_scheme``
and ``--precondition_outputs``, the ``mu`` of the training path on a dynamic-shift scheduler, and the
sampler they give.

``--weighting_scheme`` names one of two kinds of thing, as in diffusers:

================  ================================  ==========================================
scheme            loss weight u(s), told the        sampling without ``--noise_sampler``
                  sampler as its ``loss_weighting``
================  ================================  ==========================================
``logit_normal``  none                              logit-normal(``--logit_mean``,
                                                    ``--logit_std``)
``mode``          none                              SD3's mode density (``--mode_scale``)
``none``          none                              uniform s
``sigma_sqrt``    ``s⁻²``                           uniform s
``cosmap``        ``2/(π(1 − 2s + 2s²))``           uniform s
================  ================================  ==========================================

**The training path of a dynamic-shift scheduler** (Flux: ``use_dynamic_shifting=True``). At
inference the pipeline shifts its sigmas by ``mu``, computed from the image's sequence length.
diffusers' Flux training scripts draw their levels from the scheduler's *unshifted* table, so the
levels trained on are those of ``mu = 0`` (shift 1), and that is the path the sampler is built on
(``--training_mu``, default 0). The learned π is a density of VE σ, so it does not depend on that
choice; the base density does (it is defined in the unshifted s and then shifted, METHOD.md §1).
With aspect-ratio buckets the inference ``mu`` changes from batch to batch while the training path
(``mu = 0``) does not: one profile on VE σ serves every resolution (docs/METHOD.md §1, note on
resolution-dependent shifts).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import torch

from ..argtypes import positive_int
from ..integration import DENSITY_SCHEMES, LOSS_WEIGHTING_SCHEMES
from ..samplers import NoiseLevels, TrainingTimestepSampler
from .args import build_noise_sampler

__all__ = [
    "FLOW_WEIGHTING_SCHEMES",
    "add_flow_args",
    "check_flow_args",
    "FlowLoss",
    "flow_loss",
    "load_flow_scheduler",
    "training_mu",
    "build_flow_sampler",
    "flow_x0_estimate",
]

# the kinds of --weighting_scheme, defined once with the drop-in's mapping (integration.sampler_settings)
_LOSS_WEIGHTS, _DENSITIES = LOSS_WEIGHTING_SCHEMES, DENSITY_SCHEMES
FLOW_WEIGHTING_SCHEMES = ("none", *_LOSS_WEIGHTS, *_DENSITIES)


def add_flow_args(parser: argparse.ArgumentParser, *, default_scheme: str, precondition_outputs: bool,
                  max_sequence_length: int) -> None:
    """``--weighting_scheme`` (default ``default_scheme``, the diffusers script's), with
    ``precondition_outputs`` also ``--precondition_outputs``, ``--max_sequence_length`` (T5 tokens) and
    ``--training_mu``."""
    g = parser.add_argument_group("rectified flow")
    g.add_argument("--weighting_scheme", type=str, default=None, choices=FLOW_WEIGHTING_SCHEMES,
                   help=f"diffusers' meaning (default {default_scheme}): sigma_sqrt and cosmap weight the loss (the sampler "
                        "is told), logit_normal and mode are sampling densities, used when --noise_sampler is not given "
                        "and as InfoNoise's warm-up/floor density when it is; none, sigma_sqrt and cosmap sample s "
                        "uniformly when --noise_sampler is not given.")
    if precondition_outputs:
        g.add_argument("--precondition_outputs", type=int, nargs="?", const=1, default=1, choices=(0, 1),
                       help="1 (default, as diffusers): the loss is on x0 = x - s*v_pred (prediction_type 'sample'); "
                            "0: the loss is on the velocity noise - x0 (prediction_type 'flow').")
    g.add_argument("--max_sequence_length", type=positive_int, default=max_sequence_length, help="T5 tokens per prompt.")
    g.add_argument("--training_mu", type=float, default=None,
                   help="Schedulers with dynamic shifting (Flux): the mu of the training levels' path. Default 0: the "
                        "scheduler's unshifted table, which diffusers' Flux training scripts draw from; inference shifts "
                        "by the image size.")


def check_flow_args(parser: argparse.ArgumentParser, args) -> None:
    """``parser.error`` on flow options that conflict (``--snr_gamma``; two sampling densities)."""
    if args.snr_gamma is not None:
        parser.error("--snr_gamma is Min-SNR for VP models; flow models weight their loss with --weighting_scheme")
    if args.training_mu is not None and not (math.isfinite(args.training_mu) and abs(args.training_mu) <= 20):
        parser.error(f"--training_mu must be a finite number with |mu| <= 20 (a shift of exp(mu)), got {args.training_mu}")
    if args.noise_sampler not in (None, "infonoise", "kingma_gao") and args.weighting_scheme in _DENSITIES \
            and args.noise_sampler != args.weighting_scheme:
        parser.error(f"--weighting_scheme {args.weighting_scheme} is a sampling density and --noise_sampler "
                     f"{args.noise_sampler} another one; give one of them (or --noise_sampler infonoise, which starts "
                     f"from {args.weighting_scheme})")


@dataclass(frozen=True)
class FlowLoss:
    """The loss and sampling a flow script's options give (:func:`flow_loss`)."""

    scheme: str
    loss_weighting: str  # the weight on the loss: "sigma_sqrt", "cosmap" or "none"
    density: str  # the density of s: "logit_normal", "mode" or "uniform"
    noise_sampler: str  # --noise_sampler, or the density when it is not given
    prediction_type: str  # "sample" (x0, with --precondition_outputs 1) or "flow" (velocity)


def flow_loss(args, *, default_scheme: str) -> FlowLoss:
    """The :class:`FlowLoss` of a flow script's parsed options."""
    scheme = args.weighting_scheme or default_scheme
    density = scheme if scheme in _DENSITIES else "uniform"
    return FlowLoss(scheme=scheme, loss_weighting=scheme if scheme in _LOSS_WEIGHTS else "none", density=density,
                    noise_sampler=args.noise_sampler or density,
                    prediction_type="sample" if getattr(args, "precondition_outputs", 0) else "flow")


def load_flow_scheduler(args):
    """The model's own ``FlowMatchEulerDiscreteScheduler`` (its ``shift``, or dynamic shifting, included)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler.from_pretrained(args.pretrained_model_name_or_path, subfolder="scheduler",
                                                           revision=args.revision)


def training_mu(noise_scheduler, mu: float | None) -> float | None:
    """The ``mu`` of the training path: None for a static shift, ``mu`` (default 0, the unshifted table)
    with dynamic shifting (module docstring).

    Raises:
        ValueError: a ``mu`` for a scheduler without dynamic shifting.
    """
    if not noise_scheduler.config.get("use_dynamic_shifting", False):
        if mu is not None:
            raise ValueError("--training_mu: the scheduler has a static shift (use_dynamic_shifting=False); its shift "
                             f"{noise_scheduler.config.shift} is the training path's")
        return None
    return 0.0 if mu is None else float(mu)


def build_flow_sampler(args, noise_scheduler, *, default_scheme: str) -> TrainingTimestepSampler:
    """The training-noise sampler of a flow script, told its loss (:func:`flow_loss`) and built on the
    training path (:func:`training_mu`)."""
    loss = flow_loss(args, default_scheme=default_scheme)
    return build_noise_sampler(args, noise_scheduler, prediction_type=loss.prediction_type,
                               loss_weighting=loss.loss_weighting, name=loss.noise_sampler, default_base=loss.density,
                               mu=training_mu(noise_scheduler, args.training_mu))


def flow_x0_estimate(velocity: torch.Tensor, noisy: torch.Tensor, levels: NoiseLevels) -> torch.Tensor:
    """diffusers' output preconditioning of flow models: the x0 estimate ``x − s·v̂`` (shape of ``noisy``)."""
    s = levels.scheduler_sigmas.to(velocity.dtype).view(-1, *([1] * (velocity.ndim - 1)))
    return noisy - s * velocity
