"""The drop-in for diffusers' own training scripts: their command-line options mapped to the
sampler's settings, and one call that builds, seeds, sizes and checkpoints the sampler.

diffusers' example scripts (``train_unconditional.py``, ``train_text_to_image.py``,
``train_dreambooth_lora_sd3.py``, ``train_dreambooth_lora_flux.py``) choose their loss with a few
options. The sampler must be told the loss it sees (METHOD.md §3–4): which parameterization the
per-sample error is in (``prediction_type``) and which weight the loss puts on it
(``loss_weighting``). What each option means is written once, in :mod:`diffusers_infonoise.objective`
(:meth:`~diffusers_infonoise.objective.Objective.from_options`, its table); :func:`sampler_settings` adds the
base density a flow script draws with (``--weighting_scheme logit_normal``/``mode``).

:func:`infonoise_sampler` adds what a script must not get wrong: the warm-up sized to
``--max_train_steps``, the per-rank random stream seeded from ``--seed`` (every rank draws other
levels; nothing the script re-seeds repeats them), and the sampler registered with
``accelerator.register_for_checkpointing`` so that ``save_state``/``load_state`` resume it exactly.
"""

from __future__ import annotations

from collections.abc import Mapping

from .objective import DENSITY_SCHEMES, LOSS_WEIGHTING_SCHEMES, Objective, diffusers_density_params
from .paths import path_class
from .sampler import InfoNoiseTrainingTimestepSampler
from .weighting import per_sample_mse  # the snippets' per-sample loss (update() detaches it)

__all__ = ["LOSS_WEIGHTING_SCHEMES", "DENSITY_SCHEMES", "sampler_settings", "infonoise_sampler", "per_sample_mse"]


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
        prediction_type, snr_gamma, weighting_scheme, precondition_outputs: as
            :meth:`~diffusers_infonoise.objective.Objective.from_options`; a VP ``sample`` loss is SNR-weighted,
            as diffusers' train_unconditional.py trains it. Pass ``weighting_scheme`` as the script has it: its
            default is ``logit_normal`` in the SD3 DreamBooth script and ``none`` in the Flux one.
        logit_mean, logit_std, mode_scale: the parameters of the density schemes, in diffusers' meaning
            (:func:`~diffusers_infonoise.objective.diffusers_density_params`).

    Returns:
        ``{"prediction_type", "loss_weighting", "snr_gamma", "base"}`` for
        :meth:`InfoNoiseTrainingTimestepSampler.from_scheduler` (``base`` None off flow: the path's own).

    Raises:
        ValueError: as :meth:`~diffusers_infonoise.objective.Objective.from_options`.
    """
    objective = Objective.from_options(
        noise_scheduler,
        prediction_type=prediction_type,
        snr_gamma=snr_gamma,
        weighting_scheme=weighting_scheme,
        precondition_outputs=precondition_outputs,
        snr_weighted_sample=True,
    )
    base = None
    if path_class(noise_scheduler).takes_weighting_scheme:  # the density diffusers draws with
        scheme = weighting_scheme or "none"
        params = diffusers_density_params(scheme, logit_mean=logit_mean, logit_std=logit_std, mode_scale=mode_scale)
        base = "uniform" if params is None else (scheme, params)
    return {**objective.keywords(), "base": base}


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
