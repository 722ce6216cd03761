"""Training-noise samplers: InfoNoise and the baselines it is compared with (METHOD.md §4-§5), in one place.

Every sampler draws noise levels for a training batch on one log-σ axis and hands back what the
model and the scheduler take::

    levels = sampler.sample(batch_size, device=device, generator=generator)
    noisy = sampler.add_noise(x0, noise, levels)
    ...  # model forward, per-sample unweighted loss in the model's own parameterization
    sampler.update(levels, per_sample_loss)
    ...  # backward, optimizer.step()
    sampler.step()  # once per optimizer step

Modules: :mod:`.base` (the interface every sampler answers, :class:`NoiseLevels`), :mod:`.fixed` (the fixed densities,
:class:`FixedDensitySampler`), :mod:`.settings` (:class:`AdaptiveSettings`, :class:`InfoNoiseSettings`: the adaptive
samplers' settings, defined once up to the command line), :mod:`.adaptive` (what the adaptive samplers share: estimator,
the run's plan, refresh, state),
:mod:`.infonoise` (:class:`InfoNoiseTrainingTimestepSampler`, its stored schedule written and read, its profile
start), :mod:`.kingma_gao` (VDM++'s importance sampler, the objective-preserving contrast), :mod:`.loss_slope` (CDCD-style
time warping from the slope of the loss), :mod:`.batches` (what a profile start measures on), :mod:`.starts` (which
start a run takes). :func:`make_sampler` builds any of them by name.
"""

from __future__ import annotations

from ..paths import path_from_scheduler
from . import starts
from .adaptive import PROFILE_SHARE
from .base import NoiseLevels, RunPlan, TrainingTimestepSampler, default_loss_weighting, default_prediction_type
from .batches import X0_BATCH_KEYS, batch_size_of, clean_data_of, stratified_levels
from .fixed import FIXED_DENSITY_NAMES, FixedDensitySampler, base_density
from .infonoise import InfoNoiseTrainingTimestepSampler
from .kingma_gao import KingmaGaoSampler
from .loss_slope import LossSlopeSampler
from .settings import SCHEDULE_SETTINGS, STORED_SETTINGS, AdaptiveSettings, InfoNoiseSettings, LossSlopeSettings, default_warmup_steps
from .starts import *  # noqa: F401,F403  (the start policy: START_CHOICES, SamplerStart, choose_start, apply_start, ...)

__all__ = [
    "NoiseLevels",
    "RunPlan",
    "TrainingTimestepSampler",
    "FixedDensitySampler",
    "AdaptiveSettings",
    "InfoNoiseSettings",
    "LossSlopeSettings",
    "InfoNoiseTrainingTimestepSampler",
    "KingmaGaoSampler",
    "LossSlopeSampler",
    "SAMPLER_NAMES",
    "make_sampler",
    "unread_settings",
    "base_density",
    "default_prediction_type",
    "default_loss_weighting",
    "default_warmup_steps",
    "FIXED_DENSITY_NAMES",
    "SCHEDULE_SETTINGS",
    "STORED_SETTINGS",
    "PROFILE_SHARE",
    *starts.__all__,
    "stratified_levels",
    "batch_size_of",
    "clean_data_of",
    "X0_BATCH_KEYS",
]

#: the adaptive samplers besides InfoNoise, by name: built from a path with the settings they read
_ADAPTIVE_BASELINES = {"kingma_gao": KingmaGaoSampler, "loss_slope": LossSlopeSampler}

#: every sampler :func:`make_sampler` builds: InfoNoise, the fixed densities, the adaptive baselines
SAMPLER_NAMES = ("infonoise", *FIXED_DENSITY_NAMES, *_ADAPTIVE_BASELINES)


def unread_settings(name: str) -> tuple[str, ...]:
    """The settings of :class:`InfoNoiseSettings` that sampler ``name`` does not read: every one for a fixed density,
    none for InfoNoise, those a baseline's ``_settings_class`` has not (Kingma & Gao: the gate, the m̂ cap, the target's
    settings; the loss slope: the gate and the target's).

    Raises:
        ValueError: unknown name (the message lists the accepted ones).
    """
    if name not in SAMPLER_NAMES:
        raise ValueError(f"name: unknown sampler {name!r}; accepted: {', '.join(SAMPLER_NAMES)}")
    if name in FIXED_DENSITY_NAMES:
        return InfoNoiseSettings.names()
    return _ADAPTIVE_BASELINES.get(name, InfoNoiseTrainingTimestepSampler)._unread_settings


def make_sampler(name: str, noise_scheduler, **kwargs) -> TrainingTimestepSampler:
    """Any training-noise sampler by name, behind one interface.

    Args:
        name: one of :data:`SAMPLER_NAMES`.
        noise_scheduler: a supported diffusers scheduler (see :func:`~diffusers_infonoise.paths.path_from_scheduler`).
        **kwargs: ``prediction_type``, ``loss_weighting``, ``snr_gamma``, ``mu`` for every sampler;
            the density parameters of :func:`base_density` for fixed samplers (``P_mean``, ``P_std``;
            ``mean``, ``std``; ``scale``; ``sigma_data``); the settings each adaptive sampler reads for it:
            :class:`InfoNoiseSettings` for ``infonoise`` (and ``use_stored_schedule``), :class:`AdaptiveSettings` for
            ``kingma_gao``, :class:`LossSlopeSettings` for ``loss_slope``.

    Raises:
        ValueError: unknown name or keyword (the message lists the accepted ones); a setting of InfoNoise's that the
            sampler does not read (naming it).
    """
    if name not in SAMPLER_NAMES:
        raise ValueError(f"name: unknown sampler {name!r}; accepted: {', '.join(SAMPLER_NAMES)}")
    common = {k: kwargs.pop(k) for k in ("prediction_type", "loss_weighting", "snr_gamma") if k in kwargs}
    mu = kwargs.pop("mu", None)
    if name == "infonoise":
        InfoNoiseSettings.check_keywords(kwargs, name, extra=("use_stored_schedule",))
        return InfoNoiseTrainingTimestepSampler.from_scheduler(noise_scheduler, mu=mu, **common, **kwargs)
    path = path_from_scheduler(noise_scheduler, mu=mu)
    common.setdefault("prediction_type", default_prediction_type(noise_scheduler))
    if name in _ADAPTIVE_BASELINES:
        cls = _ADAPTIVE_BASELINES[name]
        cls._settings_class.check_keywords(kwargs, name, reader=cls._title)
        return cls(path, **common, **kwargs)
    return FixedDensitySampler(path, base_density(name, path, **kwargs), name=name, **common)
