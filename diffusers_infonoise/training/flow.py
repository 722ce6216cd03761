"""What the rectified-flow text-to-image scripts (SD3, Flux) share: the meaning of diffusers'
``--weighting_scheme`` and ``--precondition_outputs`` (:class:`FlowLoss`), the ``mu`` of the training path
on a dynamic-shift scheduler, and diffusers' x0 estimate. The options themselves are read at the edge,
:mod:`diffusers_infonoise.training.args` (``add_flow_args``, ``flow_loss``, ``build_flow_sampler``).

``--weighting_scheme`` names a loss weight (``sigma_sqrt``, ``cosmap``) or a sampling density (``logit_normal``,
``mode``), as in diffusers; what each one means for the loss and the density is the table of
:mod:`diffusers_infonoise.objective`.

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

from dataclasses import dataclass

import torch

from ..objective import Objective
from ..sampler import NoiseLevels

__all__ = [
    "FlowLoss",
    "training_mu",
    "flow_x0_estimate",
]


@dataclass(frozen=True)
class FlowLoss:
    """The loss and sampling a flow script's options give (:func:`~diffusers_infonoise.training.args.flow_loss`)."""

    scheme: str
    objective: Objective  # x0 ("sample", --precondition_outputs 1) or velocity ("flow"); weight "sigma_sqrt", "cosmap" or "none"
    density: str  # the density of s: "logit_normal", "mode" or "uniform"
    noise_sampler: str  # --noise_sampler, or the density when it is not given


def training_mu(noise_scheduler, mu: float | None) -> float | None:
    """The ``mu`` of the training path: None for a static shift, ``mu`` (default 0, the unshifted table)
    with dynamic shifting (module docstring).

    Raises:
        ValueError: a ``mu`` for a scheduler without dynamic shifting.
    """
    if not noise_scheduler.config.get("use_dynamic_shifting", False):
        if mu is not None:
            raise ValueError(
                "--training_mu: the scheduler has a static shift (use_dynamic_shifting=False); its shift "
                f"{noise_scheduler.config.shift} is the training path's"
            )
        return None
    return 0.0 if mu is None else float(mu)


def flow_x0_estimate(velocity: torch.Tensor, noisy: torch.Tensor, levels: NoiseLevels) -> torch.Tensor:
    """diffusers' output preconditioning of flow models: the x0 estimate ``x − s·v̂`` (shape of ``noisy``)."""
    s = levels.scheduler_sigmas.to(velocity.dtype).view(-1, *([1] * (velocity.ndim - 1)))
    return noisy - s * velocity
