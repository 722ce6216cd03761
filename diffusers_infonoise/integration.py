"""The drop-in for diffusers' own training scripts: their command-line options mapped to the
sampler's settings, and one call that builds, seeds, sizes and checkpoints the sampler.

diffusers' example scripts (``train_unconditional.py``, ``train_text_to_image.py``,
``train_dreambooth_lora_sd3.py``, ``train_dreambooth_lora_flux.py``) choose their loss with a few
options. The sampler must be told the loss it sees (METHOD.md §3–4): which parameterization the
per-sample error is in (``prediction_type``) and which weight the loss puts on it
(``loss_weighting``). :func:`sampler_settings` is that mapping, written once:

=============================== ==================================================================
diffusers option                sampler setting
=============================== ==================================================================
``--prediction_type`` (VP)      ``prediction_type`` (default: the scheduler's); ``sample`` is
                                train_unconditional.py's x0 loss weighted by ``SNR = ᾱ/(1 − ᾱ)``:
                                ``loss_weighting="snr"`` (w = SNR on x0, the ε error)
``--snr_gamma`` (VP)            ``loss_weighting="min_snr"``, ``snr_gamma``
``--precondition_outputs`` 1/0  flow: ``prediction_type="sample"`` (x0 target) / ``"flow"`` (velocity)
``--weighting_scheme``          ``sigma_sqrt``/``cosmap``: ``loss_weighting`` of that name (a weight
                                on the loss) and a uniform base; ``logit_normal``/``mode``: InfoNoise's
                                base density (warm-up and floor), the density diffusers draws with
                                ``--logit_mean/--logit_std/--mode_scale`` (its ``logit_mean`` is
                                the SD3 paper's with the sign reversed); ``none``: uniform s
=============================== ==================================================================

:func:`infonoise_sampler` adds what a script must not get wrong: the warm-up sized to
``--max_train_steps``, the per-rank random stream seeded from ``--seed`` (every rank draws other
levels; nothing the script re-seeds repeats them), and the sampler registered with
``accelerator.register_for_checkpointing`` so that ``save_state``/``load_state`` resume it exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .paths import scheduler_kind
from .sampler import InfoNoiseTrainingTimestepSampler
from .weighting import per_sample_mse  # the snippets' per-sample loss (update() detaches it)

__all__ = ["LOSS_WEIGHTING_SCHEMES", "DENSITY_SCHEMES", "sampler_settings", "infonoise_sampler", "per_sample_mse"]

#: ``--weighting_scheme`` values that weight the loss (diffusers' ``compute_loss_weighting_for_sd3``)
LOSS_WEIGHTING_SCHEMES = ("sigma_sqrt", "cosmap")
#: ``--weighting_scheme`` values that are sampling densities (``compute_density_for_timestep_sampling``)
DENSITY_SCHEMES = ("logit_normal", "mode")
_SCHEMES = ("none", *LOSS_WEIGHTING_SCHEMES, *DENSITY_SCHEMES)


def sampler_settings(
    noise_scheduler,
    *,
    prediction_type: str | None = None,
    snr_gamma: float | None = None,
    weighting_scheme: str | None = None,
    precondition_outputs: int | bool | None = None,
    logit_mean: float = 0.0,
    logit_std: float = 1.0,
    mode_scale: float = 1.29,
) -> dict:
    """The sampler settings for the loss a diffusers script trains with these options.

    Args:
        noise_scheduler: the script's training scheduler (DDPM/DDIM: VP; FlowMatchEuler: flow; EDM).
        prediction_type: VP scripts' ``--prediction_type`` (default: the scheduler's config).
        snr_gamma: VP scripts' ``--snr_gamma`` (Min-SNR-γ weighting), or None.
        weighting_scheme: flow scripts' ``--weighting_scheme`` (see the module table); None counts as
            ``"none"``. Pass the script's value: its default is ``logit_normal`` in the SD3 DreamBooth
            script and ``none`` in the Flux one.
        precondition_outputs: SD3's ``--precondition_outputs`` (1: the loss is on x0 = x − s·v̂);
            Flux's scripts have none (the loss is on the velocity): leave it None.
        logit_mean, logit_std, mode_scale: the parameters of the density schemes.

    Returns:
        ``{"prediction_type", "loss_weighting", "snr_gamma", "base"}`` for
        :meth:`InfoNoiseTrainingTimestepSampler.from_scheduler`.

    Raises:
        ValueError: an option that does not belong to the scheduler's path (``--snr_gamma`` or
        ``--prediction_type`` on flow, ``--weighting_scheme`` off flow), an unknown scheme or prediction
        type, a ``snr_gamma`` that is not a finite number > 0 (``True`` is not γ = 1), or options that
        contradict each other (``prediction_type="sample"`` with ``precondition_outputs=0`` on flow).
    """
    kind = scheduler_kind(noise_scheduler)
    if snr_gamma is not None and not (
        isinstance(snr_gamma, (int, float)) and not isinstance(snr_gamma, bool) and math.isfinite(snr_gamma) and snr_gamma > 0
    ):
        raise ValueError(f"snr_gamma: must be a finite number > 0 (diffusers' --snr_gamma, e.g. 5.0) or None, got {snr_gamma!r}")
    if kind == "flow":
        if snr_gamma is not None:
            raise ValueError("snr_gamma: Min-SNR weighting is for VP (DDPM) models; flow scripts weight with weighting_scheme")
        if prediction_type not in (None, "flow", "sample"):
            raise ValueError(
                f"prediction_type: a flow model's loss is on the velocity ('flow') or, with "
                f"precondition_outputs, on x0 ('sample'); got {prediction_type!r}"
            )
        if (
            precondition_outputs is not None
            and prediction_type is not None
            and prediction_type != ("sample" if precondition_outputs else "flow")
        ):
            raise ValueError(
                f"prediction_type: {prediction_type!r} contradicts precondition_outputs={int(precondition_outputs)} "
                "(1: the loss is on x0, 'sample'; 0: on the velocity, 'flow'); give one of them"
            )
        scheme = weighting_scheme or "none"
        if scheme not in _SCHEMES:
            raise ValueError(f"weighting_scheme: accepted values are {', '.join(_SCHEMES)}, got {scheme!r}")
        # diffusers' scripts index a descending table with u ~ logit-normal(mean): their mean > 0 means
        # less noise, the opposite of the SD3 paper's convention this package's density uses
        base = {
            "logit_normal": ("logit_normal", {"mean": 0.0 - float(logit_mean), "std": float(logit_std)}),
            "mode": ("mode", {"scale": float(mode_scale)}),
        }.get(scheme, "uniform")  # as diffusers draws
        return {
            "prediction_type": prediction_type or ("sample" if precondition_outputs else "flow"),
            "loss_weighting": scheme if scheme in LOSS_WEIGHTING_SCHEMES else "none",
            "snr_gamma": None,
            "base": base,
        }
    if weighting_scheme not in (None, "none"):
        raise ValueError(
            f"weighting_scheme: {weighting_scheme!r} is a flow-matching option; this is a {kind} "
            "scheduler (use snr_gamma for Min-SNR on VP)"
        )
    if precondition_outputs:
        raise ValueError("precondition_outputs: a flow-matching option (SD3); this scheduler is not a flow scheduler")
    if kind == "ve":  # EDM: the loss on the denoiser D with EDM's weight, whatever the output sign
        if snr_gamma is not None:
            raise ValueError("snr_gamma: Min-SNR weighting is for VP (DDPM) models; EDM weights with lambda(sigma)")
        if prediction_type not in (None, "epsilon", "v_prediction", "sample"):
            raise ValueError(
                f"prediction_type: {prediction_type!r} is not an EDM option; accepted: epsilon or v_prediction "
                "(EDM schedulers' sign of c_out; the loss is on the denoiser D either way) or sample"
            )
        return {"prediction_type": "sample", "loss_weighting": "edm", "snr_gamma": None, "base": None}
    pt = prediction_type or noise_scheduler.config.prediction_type
    if pt not in ("epsilon", "v_prediction", "sample"):
        raise ValueError(f"prediction_type: {pt!r} is not a VP option; accepted: epsilon, v_prediction, sample")
    if pt == "sample":
        # diffusers' train_unconditional.py weights its x0 loss by SNR = ᾱ/(1 − ᾱ): the ε error (METHOD.md §4)
        if snr_gamma is not None:
            raise ValueError(
                "snr_gamma: diffusers' sample (x0) loss is SNR-weighted (train_unconditional.py) and has no "
                "Min-SNR form; leave snr_gamma unset"
            )
        return {"prediction_type": "sample", "loss_weighting": "snr", "snr_gamma": None, "base": None}
    return {
        "prediction_type": pt,
        "loss_weighting": "min_snr" if snr_gamma else "none",
        "snr_gamma": float(snr_gamma) if snr_gamma else None,
        "base": None,
    }


def infonoise_sampler(
    noise_scheduler,
    args=None,
    *,
    accelerator=None,
    mu: float | None = None,
    seed: int | None = None,
    num_training_steps: int | None = None,
    **overrides,
) -> InfoNoiseTrainingTimestepSampler:
    """An InfoNoise sampler for a diffusers training script, in one call.

    Reads diffusers' option names from ``args`` (an argparse namespace, any object with attributes,
    or a mapping such as ``vars(args)``; missing ones count as unset): ``prediction_type``,
    ``snr_gamma``, ``weighting_scheme``, ``precondition_outputs``, ``logit_mean``, ``logit_std``,
    ``mode_scale`` (:func:`sampler_settings`), ``max_train_steps`` (sizes the warm-up, a tenth of
    the run) and ``seed``. Keyword arguments win over ``args``; ``overrides`` go to
    :meth:`InfoNoiseTrainingTimestepSampler.from_scheduler` (``num_bins``, ``floor``, ``gate``,
    ``warmup_steps``, a ``prediction_type`` other than the option's, ...).

    With ``accelerator``, the sampler is registered for checkpointing
    (``accelerator.register_for_checkpointing(sampler)``): call this before ``accelerator.load_state``.

    Args:
        mu: the flow path's shift for schedulers with ``use_dynamic_shifting=True`` (Flux). diffusers'
            Flux training scripts draw from the scheduler's unshifted table: ``mu=0.0`` is that
            training distribution's path (METHOD.md §1).

    Raises:
        ValueError: as :func:`sampler_settings` and ``from_scheduler``.
    """

    def option(name, default=None):
        if isinstance(args, Mapping):  # vars(args), or a config dict
            return args.get(name, default)
        return getattr(args, name, default) if args is not None else default

    settings = sampler_settings(
        noise_scheduler,
        prediction_type=option("prediction_type"),
        snr_gamma=option("snr_gamma"),
        weighting_scheme=option("weighting_scheme"),
        precondition_outputs=option("precondition_outputs"),
        logit_mean=option("logit_mean", 0.0),
        logit_std=option("logit_std", 1.0),
        mode_scale=option("mode_scale", 1.29),
    )
    if settings["base"] is None:
        del settings["base"]  # the path's own base
    settings.update(overrides)
    steps = num_training_steps if num_training_steps is not None else option("max_train_steps")
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(noise_scheduler, mu=mu, num_training_steps=steps, **settings)
    seed = seed if seed is not None else option("seed")
    sampler.manual_seed(int(seed or 0))
    if accelerator is not None:
        accelerator.register_for_checkpointing(sampler)
    return sampler
