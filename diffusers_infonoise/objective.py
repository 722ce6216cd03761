"""The training loss a sampler is told, as one frozen value (:class:`Objective`), and what diffusers' loss options
mean for it, written once.

A loss is three facts (METHOD.md §3-4): the parameterization its per-sample error is in (``prediction_type``), the
weight it puts on that error (``loss_weighting``) and Min-SNR's γ (``snr_gamma``). :mod:`.weighting` holds the
formulas on VE σ (``x0_error_factor``, ``loss_weight``, ``x0_loss_weight``); this module holds the value they are
applied to and where it comes from: diffusers' script options (:meth:`Objective.from_options`), a stored schedule or
a profile's record (:meth:`Objective.recorded`), a scheduler's path (:func:`default_objective`).

What diffusers' options mean:

================================ ================================================================================
diffusers option                 objective
================================ ================================================================================
``--prediction_type`` (VP)       ``prediction_type`` (default: the scheduler's). ``sample`` is the x0 loss, which
                                 diffusers' train_unconditional.py weights by ``SNR = ᾱ/(1 − ᾱ)``:
                                 ``loss_weighting="snr"`` (w = SNR on x0, the ε error; ``snr_weighted_sample``)
``--snr_gamma`` (VP)             ``loss_weighting="min_snr"``, ``snr_gamma``
``--prediction_type`` (EDM)      only the sign of c_out: the loss is on the denoiser D with EDM's λ(σ),
                                 ``prediction_type="sample"``, ``loss_weighting="edm"``
``--precondition_outputs`` 1/0   flow: ``prediction_type="sample"`` (x0 = x − s·v̂) / ``"flow"`` (velocity ε − x0)
``--weighting_scheme``           flow: ``sigma_sqrt`` (u = s⁻²) and ``cosmap`` (u = 2/(π(1 − 2s + 2s²))) weight the
                                 loss (``loss_weighting`` of that name) and draw s uniformly; ``logit_normal`` and
                                 ``mode`` are sampling densities (unweighted loss; :func:`scheme_density`, InfoNoise's
                                 base density: warm-up and floor); ``none``: uniform s, unweighted
``--logit_mean``, ``--logit_std`` logit-normal ``u`` indexing diffusers' descending table, so ``s ≈ 1 − u``: a
                                 POSITIVE mean means LESS noise, the SD3 paper's mean with the sign reversed
                                 (:func:`diffusers_density_params` gives the paper's, which the densities take)
``--mode_scale``                 the scale of SD3's mode density
================================ ================================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Union

import torch

from .paths import FlowPath, VEPath, VPPath, path_class, scheduler_kind
from .schedule_io import read_schedule
from .weighting import loss_weight, validate_loss_weighting, validate_prediction_type, x0_loss_weight

__all__ = [
    "LOSS_WEIGHTING_SCHEMES",
    "DENSITY_SCHEMES",
    "WEIGHTING_SCHEMES",
    "Objective",
    "default_objective",
    "scheme_density",
    "diffusers_density_params",
]

#: ``--weighting_scheme`` values that weight the loss (diffusers' ``compute_loss_weighting_for_sd3``)
LOSS_WEIGHTING_SCHEMES = ("sigma_sqrt", "cosmap")
#: ``--weighting_scheme`` values that are sampling densities (``compute_density_for_timestep_sampling``)
DENSITY_SCHEMES = ("logit_normal", "mode")
#: every ``--weighting_scheme`` of diffusers' flow scripts
WEIGHTING_SCHEMES = ("none", *LOSS_WEIGHTING_SCHEMES, *DENSITY_SCHEMES)

LossWeighting = Union[str, Callable[[torch.Tensor], torch.Tensor]]


@dataclass(frozen=True)
class Objective:
    """A training loss as the sampler sees it (METHOD.md §3-4).

    Attributes:
        prediction_type: what the per-sample error measures (:data:`~diffusers_infonoise.weighting.PREDICTION_TYPES`).
        loss_weighting: the weight the loss applies in its own parameterization: a name of
            :data:`~diffusers_infonoise.weighting.LOSS_WEIGHTINGS` or a callable of VE σ (default ``"none"``).
        snr_gamma: γ of Min-SNR (``loss_weighting="min_snr"`` only).

    Raises:
        ValueError: an unknown prediction type or weighting, ``min_snr`` without a γ > 0, a γ for another weighting.
        TypeError: a weighting that is neither a name nor a callable.
    """

    prediction_type: str
    loss_weighting: LossWeighting = "none"
    snr_gamma: float | None = None

    def __post_init__(self):
        validate_prediction_type(self.prediction_type)
        validate_loss_weighting(self.loss_weighting, self.snr_gamma)

    # -- where it comes from --------------------------------------------------------------------
    @classmethod
    def of_path(cls, noise_scheduler) -> "Objective":
        """The loss a user of ``noise_scheduler``'s path trains with by default: the path's prediction type and
        weighting (:meth:`~diffusers_infonoise.paths.NoisePath.default_prediction_type`, ``default_loss_weighting``:
        VP the scheduler's ``prediction_type``, unweighted; flow the velocity, unweighted; EDM the denoiser D with
        EDM's λ(σ)).

        Raises:
            TypeError: an unsupported scheduler.
        """
        path = path_class(noise_scheduler)
        prediction_type = path.default_prediction_type(noise_scheduler.config)
        return cls(prediction_type, path.default_loss_weighting(prediction_type))

    @classmethod
    def recorded(cls, record: dict | None) -> "Objective | None":
        """The objective a record carries (a stored schedule's payload, a profile's ``meta``: the keys of
        :meth:`record`), or None when there is no record or its weighting was a custom callable (not stored)."""
        if not record or not record.get("prediction_type") or record.get("loss_weighting") in (None, "custom"):
            return None
        return cls(record["prediction_type"], record["loss_weighting"], record.get("snr_gamma"))

    @classmethod
    def from_options(
        cls,
        noise_scheduler,
        *,
        prediction_type: str | None = None,
        snr_gamma: float | None = None,
        weighting_scheme: str | None = None,
        precondition_outputs: int | bool | None = None,
        snr_weighted_sample: bool = False,
    ) -> "Objective":
        """The loss a script trains on ``noise_scheduler`` with diffusers' options (the module's table).

        Args:
            noise_scheduler: the script's training scheduler (DDPM/DDIM: VP; FlowMatchEuler: flow; EDM).
            prediction_type: ``--prediction_type`` (VP default: the scheduler's config; EDM: a sign only).
            snr_gamma: VP ``--snr_gamma`` (Min-SNR-γ), or None.
            weighting_scheme: flow ``--weighting_scheme`` (:data:`WEIGHTING_SCHEMES`); None counts as ``"none"``.
            precondition_outputs: SD3's ``--precondition_outputs`` (1: the loss is on x0 = x − s·v̂); None where the
                script has none (Flux: the loss is on the velocity).
            snr_weighted_sample: a VP ``sample`` loss weighted by SNR, as diffusers' train_unconditional.py weights
                it (``loss_weighting="snr"``, no Min-SNR form). False (default): the plain x0 loss of diffusers'
                text-to-image scripts and of this package's scripts.

        Raises:
            ValueError: an option that does not belong to the scheduler's path (``snr_gamma`` or ``prediction_type``
                on flow, ``weighting_scheme`` off flow), an unknown scheme or prediction type, a ``snr_gamma`` that is
                not a finite number > 0 (``True`` is not γ = 1), or options that contradict each other
                (``prediction_type="sample"`` with ``precondition_outputs=0`` on flow).
        """
        path = path_class(noise_scheduler)
        if snr_gamma is not None and not (
            isinstance(snr_gamma, (int, float)) and not isinstance(snr_gamma, bool) and math.isfinite(snr_gamma) and snr_gamma > 0
        ):
            raise ValueError(f"snr_gamma: must be a finite number > 0 (diffusers' --snr_gamma, e.g. 5.0) or None, got {snr_gamma!r}")
        if path.takes_weighting_scheme:
            return cls._flow(prediction_type, snr_gamma, weighting_scheme, precondition_outputs)
        if weighting_scheme not in (None, "none"):
            raise ValueError(
                f"weighting_scheme: {weighting_scheme!r} is a flow-matching option; this is a {scheduler_kind(noise_scheduler)} "
                "scheduler (use snr_gamma for Min-SNR on VP)"
            )
        if precondition_outputs:
            raise ValueError("precondition_outputs: a flow-matching option (SD3); this scheduler is not a flow scheduler")
        if path.preconditioned:  # EDM: the loss on the denoiser D with EDM's weight, whatever the output sign
            if snr_gamma is not None:
                raise ValueError("snr_gamma: Min-SNR weighting is for VP (DDPM) models; EDM weights with lambda(sigma)")
            if prediction_type not in (None, *VEPath.scheduler_prediction_types, "sample"):
                raise ValueError(
                    f"prediction_type: {prediction_type!r} is not an EDM option; accepted: epsilon or v_prediction "
                    "(EDM schedulers' sign of c_out; the loss is on the denoiser D either way) or sample"
                )
            return cls("sample", "edm")
        pt = prediction_type or noise_scheduler.config.prediction_type
        if pt not in VPPath.scheduler_prediction_types:
            raise ValueError(f"prediction_type: {pt!r} is not a VP option; accepted: {', '.join(VPPath.scheduler_prediction_types)}")
        if pt == "sample" and snr_weighted_sample:
            # diffusers' train_unconditional.py weights its x0 loss by SNR = ᾱ/(1 − ᾱ): the ε error (METHOD.md §4)
            if snr_gamma is not None:
                raise ValueError(
                    "snr_gamma: diffusers' sample (x0) loss is SNR-weighted (train_unconditional.py) and has no "
                    "Min-SNR form; leave snr_gamma unset"
                )
            return cls("sample", "snr")
        return cls(pt, "min_snr" if snr_gamma else "none", float(snr_gamma) if snr_gamma else None)

    @classmethod
    def _flow(cls, prediction_type, snr_gamma, weighting_scheme, precondition_outputs) -> "Objective":
        if snr_gamma is not None:
            raise ValueError("snr_gamma: Min-SNR weighting is for VP (DDPM) models; flow scripts weight with weighting_scheme")
        if prediction_type not in (None, *FlowPath.prediction_types):
            raise ValueError(
                f"prediction_type: a flow model's loss is on the velocity ('flow') or, with "
                f"precondition_outputs, on x0 ('sample'); got {prediction_type!r}"
            )
        preconditioned = "sample" if precondition_outputs else "flow"
        if precondition_outputs is not None and prediction_type is not None and prediction_type != preconditioned:
            raise ValueError(
                f"prediction_type: {prediction_type!r} contradicts precondition_outputs={int(precondition_outputs)} "
                "(1: the loss is on x0, 'sample'; 0: on the velocity, 'flow'); give one of them"
            )
        scheme = weighting_scheme or "none"
        if scheme not in WEIGHTING_SCHEMES:
            raise ValueError(f"weighting_scheme: accepted values are {', '.join(WEIGHTING_SCHEMES)}, got {scheme!r}")
        return cls(
            prediction_type or preconditioned,
            scheme if scheme in LOSS_WEIGHTING_SCHEMES else "none",
        )

    # -- what it is -------------------------------------------------------------------------
    def override(self, prediction_type: str | None = None, loss_weighting=None, snr_gamma: float | None = None) -> "Objective":
        """This objective with the given values in place of its own (None: keep). ``snr_gamma`` goes with the
        weighting: a new ``loss_weighting`` takes the given γ (or none), an unchanged one keeps its own unless
        ``snr_gamma`` is given."""
        if loss_weighting is None:
            loss_weighting, snr_gamma = self.loss_weighting, (self.snr_gamma if snr_gamma is None else snr_gamma)
        return Objective(self.prediction_type if prediction_type is None else prediction_type, loss_weighting, snr_gamma)

    def keywords(self) -> dict:
        """``{"prediction_type", "loss_weighting", "snr_gamma"}``: the samplers' keyword arguments."""
        return {"prediction_type": self.prediction_type, "loss_weighting": self.loss_weighting, "snr_gamma": self.snr_gamma}

    def record(self) -> dict:
        """:meth:`keywords` in plain JSON (a callable weighting is ``"custom"``): what payloads, profiles and model
        cards record."""
        return {**self.keywords(), "loss_weighting": self.loss_weighting if isinstance(self.loss_weighting, str) else "custom"}

    def loss_weight(self, sigmas: torch.Tensor, *, sigma_data: float = 0.5) -> torch.Tensor:
        """u(σ): the weight on the loss's own per-sample error at VE ``sigmas`` (float64, their shape;
        :func:`~diffusers_infonoise.weighting.loss_weight`)."""
        return loss_weight(self.loss_weighting, self.prediction_type, sigmas, snr_gamma=self.snr_gamma, sigma_data=sigma_data)

    def x0_loss_weight(self, sigmas: torch.Tensor, *, sigma_data: float = 0.5) -> torch.Tensor:
        """w(σ) = u/c: the weight on the x0-space error at VE ``sigmas`` (float64, their shape; METHOD.md §4,
        :func:`~diffusers_infonoise.weighting.x0_loss_weight`)."""
        return x0_loss_weight(self.loss_weighting, self.prediction_type, sigmas, snr_gamma=self.snr_gamma, sigma_data=sigma_data)


def default_objective(noise_scheduler) -> Objective:
    """The objective assumed for ``noise_scheduler``'s training loss: the stored schedule's when its config carries
    one (unless its weighting was a custom callable), else :meth:`Objective.of_path`.

    Raises:
        TypeError: unsupported scheduler. ScheduleError: a corrupted stored schedule.
    """
    return Objective.recorded(read_schedule(noise_scheduler)) or Objective.of_path(noise_scheduler)


def scheme_density(weighting_scheme: str | None) -> str:
    """The density of s a ``--weighting_scheme`` draws: ``"logit_normal"``, ``"mode"`` or ``"uniform"`` (the others)."""
    return weighting_scheme if weighting_scheme in DENSITY_SCHEMES else "uniform"


def diffusers_density_params(name: str | None, *, logit_mean: float = 0.0, logit_std: float = 1.0, mode_scale: float = 1.29) -> dict | None:
    """The parameters of the density ``name`` from diffusers' options, or None for a density without them.

    ``logit_normal``: ``{"mean", "std"}`` with the SD3 paper's mean, ``−logit_mean`` (diffusers' mean indexes a
    descending table: > 0 is less noise); ``mode``: ``{"scale": mode_scale}``.
    """
    return {
        "logit_normal": {"mean": 0.0 - float(logit_mean), "std": float(logit_std)},  # 0.0 - x: no -0.0
        "mode": {"scale": float(mode_scale)},
    }.get(name)
