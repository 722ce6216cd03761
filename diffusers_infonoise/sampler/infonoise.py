"""InfoNoise: the training-noise density follows the conditional-entropy rate (METHOD.md §4-§5).

:class:`InfoNoiseTrainingTimestepSampler` learns ``π ∝ ρ̂/w`` online from the training losses. Its stored schedule
is written (:meth:`~InfoNoiseTrainingTimestepSampler.to_payload`) and read
(:meth:`~InfoNoiseTrainingTimestepSampler.load_schedule`) here, beside each other; :mod:`..schedule_io` keeps the
stored format and its sources. The ``"profile"`` start measures a model here too
(:meth:`~InfoNoiseTrainingTimestepSampler.start_from_model`); which start a run takes is :mod:`.starts`'.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Callable, Iterable

import numpy as np
import torch

from .. import densities
from ..data_statistics import BOUND_WORK_PER_SECOND, MAX_BOUND_WORK, ValueTally, per_element_bayes_mmse, per_element_bound_work
from ..estimator import ProfileEstimator
from ..logs import get_logger
from ..paths import NoisePath, path_from_scheduler
from ..reducibility import LearningExponents, fit_horizon
from ..schedule_io import FORMAT, VERSION, ScheduleError, StoredSchedule, read_schedule, stored_mu, write_schedule
from .adaptive import _AdaptiveSampler, _stored_when, apply_data_statistics, estimator_for
from .base import as_count, default_prediction_type
from .batches import X0_BATCH_KEYS, batch_size_of, batch_stream, forward_passes, stratified_levels, world
from .settings import SCHEDULE_SETTINGS, InfoNoiseSettings, default_mmse_cap
from .starts import describe_bound

logger = get_logger(__name__)

#: the study target spaces whose draws carry a per-sample factor (settings.InfoNoiseSettings.target_space)
IMPORTANCE_TARGET_SPACES = ("importance", "rho_draws")

__all__ = [
    "InfoNoiseTrainingTimestepSampler",
    "stored_estimator",
]


class InfoNoiseTrainingTimestepSampler(_AdaptiveSampler):
    """InfoNoise: the training-noise density follows the conditional-entropy rate (METHOD.md §5).

    From the per-sample losses of training it estimates ``m̂(σ)`` (x0 MMSE proxy), forms the
    entropy rate per unit log σ ``q = m̂/σ²`` (I-MMSE, §2), gates the clean end (§5.5), and sets
    ``π ∝ φ/w`` with ``φ = (1 − η)·ρ̂ + η·φ_base`` (§4, §5.7), so that the effective allocation
    ``φ = π·w`` follows ``ρ̂`` up to the floor η: ``TV(φ, ρ̂) ≤ η``
    (``tv_phi_rho`` of :meth:`metrics`, logged at every refresh). Before ``warmup_steps``
    optimizer steps it draws from the base.

    Build it with :meth:`from_scheduler` (or :meth:`from_stored`). Args (all keyword):
        prediction_type: the parameterization of the per-sample loss given to :meth:`update`.
        loss_weighting, snr_gamma: the weight the user's loss applies (METHOD.md §4).
        **settings: the fields of :class:`~diffusers_infonoise.sampler.settings.InfoNoiseSettings` (``num_bins``,
            ``warmup_steps``, ``floor``, ``gate``, ...), each described there. ``mmse_cap`` defaults to ``"auto"``
            for ``epsilon`` and ``v_prediction`` losses, to None for the others (:func:`~.settings.default_mmse_cap`).

    Raises:
        ValueError / TypeError: for invalid arguments, each naming the argument and accepted values.
    """

    name = "infonoise"
    learns_schedule = True

    _title = "InfoNoise"
    _settings_class = InfoNoiseSettings

    def __init__(self, path: NoisePath, **kwargs):
        super().__init__(path, **kwargs)
        if self.settings.target_space in IMPORTANCE_TARGET_SPACES and path.is_discrete:
            raise ValueError(
                f"target_space: {self.settings.target_space!r} weights each draw by its density, which a VP path's integer "
                "timesteps do not have; it is for the EDM and flow paths (give 'phi', the default, 'pi' or 'reducible')"
            )
        # target C's learning exponents (docs/METHOD.md §4.1): fitted from the windows of training errors
        reducible = self.settings.target_space == "reducible"
        self.reducibility = LearningExponents(self.estimator.num_bins, min_count=self.settings.min_count) if reducible else None

    def _observe_window(self):
        if self.reducibility is not None and self.estimator.last_window is not None:
            memory = fit_horizon(self._memory_steps(), self.optimizer_step)
            self.reducibility.observe(self.optimizer_step, *self.estimator.last_window, memory=memory)

    def _reducibility_mass(self) -> torch.Tensor | None:
        """(K,) bin masses of target C's draws ``ρ̂·R̂`` normalised (``target_space="reducible"``, docs/METHOD.md §4.1),
        or None when another target is set, no group's exponent is fitted yet or none learns (a plateau; π then follows
        ``ρ̂/w``)."""
        if self.reducibility is None:
            return None
        r = self.reducibility.reducibility(self.estimator.centers, self.estimator.filled_m_hat())
        if r is None:
            return None
        draws = self._rho_mass(self.settings.temperature) * r
        return draws / draws.sum() if float(draws.sum()) > 0 else None

    def _statistic(self, levels, errors):
        return errors

    def _bin_weights(self) -> torch.Tensor:
        w = self.objective.x0_loss_weight(torch.exp(self.estimator.centers), sigma_data=self.sigma_data)
        if not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
            raise ValueError("loss_weighting: the x0-space weight w(sigma) must be finite and > 0 on the grid")
        return w

    def _rho_mass(self, temperature: float = 1.0) -> torch.Tensor:
        """(K,) bin masses of ρ̂, or of the tempered target ``ρ̂^τ`` normalised (``temperature`` τ)."""
        rho, _ = self.estimator.profile()
        rho_mass = (rho if temperature == 1.0 else rho**temperature) * self.estimator.widths
        return rho_mass / rho_mass.sum()

    def _build_probs(self) -> torch.Tensor:
        """π's bin masses from the target ρ̂ (``ρ̂^τ`` with a ``temperature`` τ ≠ 1) and the floor (METHOD.md
        §4, §5.6-7)."""
        rho_mass = self._rho_mass(self.settings.temperature)
        reducible = self._reducibility_mass()
        if reducible is not None:  # a study knob: target C, draws ∝ ρ̂·R̂ (docs/METHOD.md §4.1), the weighting kept
            return (1 - self.settings.floor) * reducible + self.settings.floor * self.base_masses
        if self.settings.target_space in ("pi", "rho_draws"):  # study knobs (settings.py): the draws follow ρ̂
            return (1 - self.settings.floor) * rho_mass + self.settings.floor * self.base_masses
        if self.settings.target_space == "importance":  # a study knob: draws ∝ ρ̂·ŝ, ŝ ≈ m̂ (docs/METHOD.md §4)
            draws = rho_mass * self.estimator.filled_m_hat()
            return (1 - self.settings.floor) * draws / draws.sum() + self.settings.floor * self.base_masses
        w = self._bin_weights()
        if self.settings.floor_space == "pi":  # a study knob (settings.py): the floor mixed in π-space
            target = rho_mass / w
            return (1 - self.settings.floor) * target / target.sum() + self.settings.floor * self.base_masses
        phi_base = self.base_masses * w
        phi = (1 - self.settings.floor) * rho_mass + self.settings.floor * phi_base / phi_base.sum()
        probs = phi / w
        return probs / probs.sum()

    def state_dict(self):
        """:meth:`~.adaptive._AdaptiveSampler.state_dict`, with target C's fit (``reducibility``) when it is set."""
        state = super().state_dict()
        if self.reducibility is not None:
            state["reducibility"] = self.reducibility.state_dict()
        return state

    def load_state_dict(self, state):
        """:meth:`~.adaptive._AdaptiveSampler.load_state_dict`, with target C's fit loaded first (π is checked against
        it); a refused state leaves the fit as it was."""
        fit = state.get("reducibility") if isinstance(state, dict) and self.reducibility is not None else None
        edges = state.get("edges") if isinstance(state, dict) else None
        if fit is None or edges is None or len(edges) != self.estimator.num_bins + 1:
            return super().load_state_dict(state)  # no fit to load, or another grid (refused there, naming the option)
        before = self.reducibility.state_dict()
        self.reducibility.load_state_dict(fit)  # checked before anything changes
        try:
            super().load_state_dict(state)
        except Exception:
            self.reducibility.load_state_dict(before)
            raise

    def _importance_weights(self, sigmas, timesteps, levels):
        """The per-sample factor ``c·ρ̂(σ)/(π(σ)·w(σ))`` of the importance study spaces (``target_space``
        ``"importance"``, ``"rho_draws"``; None otherwise and while on the base): the loss's effective allocation
        is then ρ̂ per unit ln σ, and ``c = 1/Σ_k ρ̂_k/w_k`` (bin masses, w at the centres) makes its mean under π 1
        (docs/METHOD.md §4)."""
        if self.settings.target_space not in IMPORTANCE_TARGET_SPACES or self.probs is None:
            return None
        cached = getattr(self, "_importance_table", None)
        if cached is None or cached[0] is not self.probs:  # once per π (a refresh or a load makes a new one), not per batch
            rho_mass = self._rho_mass(self.settings.temperature)
            c = 1.0 / float((rho_mass / self._bin_weights()).sum())
            cached = self._importance_table = (self.probs, c * rho_mass / self.estimator.widths)
        x = torch.log(sigmas.to(torch.float64))
        k = densities.searchsorted(self.estimator.edges, x, right=True).sub(1).clamp(0, len(cached[1]) - 1)
        pi_density = torch.exp(self.density.log_prob(x))
        w = self.objective.x0_loss_weight(torch.exp(x), sigma_data=self.sigma_data).to(torch.float64)
        return (cached[1][k] / (pi_density * w)).to(torch.float32).to(levels.sigmas.device)

    def _effective_allocation(self) -> torch.Tensor:
        """(K,) float64 bin masses of the effective allocation ``φ = π·w`` normalised (METHOD.md §4); with an
        importance study space (``target_space``), ``π·w`` times the per-sample factor: ρ̂ (or ρ̂^τ) itself."""
        if self.settings.target_space in IMPORTANCE_TARGET_SPACES and self.probs is not None:
            return self._rho_mass(self.settings.temperature)
        probs = self.probs if self.probs is not None else self.base_masses
        phi = probs * self._bin_weights()
        return phi / phi.sum()

    def _allocation_total_variation(self, *, target: bool = False) -> float:
        """``TV(φ, ρ̂) = ½·Σ_k |φ_k − ρ̂_k|`` on the bins, the check of METHOD.md §5: at most ``floor``
        (plus 0.02) for an adapted sampler whose estimate did not move since its last refresh. With a
        ``temperature`` τ ≠ 1, φ follows ``ρ̂^τ`` instead, and this measures how far that is from the entropy
        rate; ``target=True`` measures TV(φ, ρ̂^τ), which the floor bounds.

        Raises:
            RuntimeError: before two bins hold an estimate.
        """
        rho_mass = self._rho_mass(self.settings.temperature if target else 1.0)
        return float(0.5 * (self._effective_allocation() - rho_mass).abs().sum())

    def _draws_total_variation(self, *, target: bool = False) -> float:
        """``TV(π, ρ̂) = ½·Σ_k |π_k − ρ̂_k|`` on the bins: how far the draws are from the entropy rate. With
        ``target_space="pi"`` (whose draws follow the target, docs/METHOD.md §5.10) the floor bounds it by ``floor``
        when ``temperature`` is 1; ``target=True`` measures TV(π, ρ̂^τ), which the floor bounds for any τ.

        Raises:
            RuntimeError: before two bins hold an estimate.
        """
        probs = self.probs if self.probs is not None else self.base_masses
        rho_mass = self._rho_mass(self.settings.temperature if target else 1.0)
        return float(0.5 * (probs / probs.sum() - rho_mass).abs().sum())

    def _schedule_settings(self) -> dict:
        """What besides m̂ and the data statistics decides this sampler's π: its loss (``prediction_type``,
        ``loss_weighting`` name or ``"custom"``, ``snr_gamma``), base density and the
        :data:`~.settings.SCHEDULE_SETTINGS` but ``num_bins`` (the grid is compared on its own), in the form of
        :func:`_stored_pi_settings`."""
        return {
            **self.objective.record(),
            "base": self.base_description,
            "hyperparameters": {k: getattr(self.settings, k) for k in SCHEDULE_SETTINGS if k != "num_bins"},
        }

    def _measured_mass(self) -> float:
        """The share of π's mass in bins that hold a measured m̂ (the others are interpolated or
        extrapolated, METHOD.md §5.4): a first refresh from 2 of 64 bins can report a small TV(φ, ρ̂)
        with most of π resting on extrapolation."""
        probs = self.probs if self.probs is not None else self.base_masses
        return float(probs[~torch.isnan(self.estimator.m_hat)].sum())

    def metrics(self, prefix: str = "infonoise/") -> dict[str, float]:
        """The sampler's figures as plain floats for a tracker: ``accelerator.log(sampler.metrics(), step=global_step)``.

        Keys (after ``prefix``): ``adapted`` (0/1), ``num_updates``, ``filled_bins``, ``measured_mass``
        (:meth:`measured_mass`), ``pi_sigma_p10``/``_p50``/``_p90`` (VE σ quantiles of π), and once an
        estimate exists ``tv_phi_rho`` (TV(φ, ρ̂), METHOD.md §5's check: ≤ floor + 0.02; with ``target_space="pi"``
        also ``tv_pi_rho``, TV(π, ρ̂), which the floor bounds there instead; with a ``temperature`` τ ≠ 1 also
        ``tv_phi_target``, TV(φ, ρ̂^τ), and with both ``tv_pi_target``, TV(π, ρ̂^τ): the distance the floor bounds
        then) and, when a gate applies, ``gate_pivot`` (VE σ). Cheap (bin arithmetic on the CPU; no
        synchronisation).
        """
        q = torch.exp(self.density.icdf(torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)))
        out = {
            "adapted": float(self.is_adapted),
            "num_updates": float(self.num_updates),
            "filled_bins": float(self.estimator.num_filled),
            "measured_mass": self._measured_mass(),
            "pi_sigma_p10": float(q[0]),
            "pi_sigma_p50": float(q[1]),
            "pi_sigma_p90": float(q[2]),
        }
        if self.estimator.is_ready:
            out["tv_phi_rho"] = self._allocation_total_variation()
            if self.settings.target_space != "phi":  # a study variant: its draws, not φ = π·w, follow ρ̂
                out["tv_pi_rho"] = self._draws_total_variation()
            if self.settings.temperature != 1.0:  # a tempered target: the floor bounds the distance to ρ̂^τ, not to ρ̂
                out["tv_phi_target"] = self._allocation_total_variation(target=True)
                if self.settings.target_space == "pi":
                    out["tv_pi_target"] = self._draws_total_variation(target=True)
            if self.estimator.last_gate.pivot is not None:
                out["gate_pivot"] = float(self.estimator.last_gate.pivot)
        return {prefix + k: v for k, v in out.items()}

    def _describe_refresh(self) -> dict:
        gate = self.estimator.last_gate
        extra = {"tv_phi_target": self._allocation_total_variation(target=True)} if self.settings.temperature != 1.0 else {}
        if self.settings.target_space != "phi":  # a study variant: its draws, not φ = π·w, follow the target
            extra["tv_pi_rho"] = self._draws_total_variation()
            if self.settings.temperature != 1.0:
                extra["tv_pi_target"] = self._draws_total_variation(target=True)
        if self.reducibility is not None:  # target C: each group's learning exponent (null until fitted)
            extra["learning_exponents"] = [round(v, 4) if v is not None else None for v in _floats(self.reducibility.exponents())]
        return {
            "step": self.optimizer_step,
            "tv_phi_rho": self._allocation_total_variation(),
            **extra,
            "filled_bins": self.estimator.num_filled,
            "measured_mass": self._measured_mass(),
            "gate": gate.source,
            "gate_pivot": gate.pivot,
            "gate_reason": gate.reason,
            "mmse_cap": self.estimator.mmse_cap,
        }

    def profile(self) -> dict:
        """The current estimate on the bin centres (float64 (K,) tensors): ``log_sigma``, ``m_hat``
        (filled and smoothed), ``q = m̂/σ²``, ``rho_hat`` (gated, per unit log σ), ``w``, ``pi``
        (density per unit log σ), ``phi`` (the effective allocation π·w, per unit log σ) and the gate
        decision.

        Raises:
            RuntimeError: before any bin holds an estimate.
        """
        rho, q = self.estimator.profile()
        x = self.estimator.centers
        return {
            "log_sigma": x,
            "m_hat": self.estimator.filled_m_hat(),
            "q": q,
            "rho_hat": rho,
            "w": self.objective.x0_loss_weight(torch.exp(x), sigma_data=self.sigma_data),
            "pi": torch.exp(self.density.log_prob(x)),
            "phi": self._effective_allocation() / self.estimator.widths,
            "gate": self.estimator.last_gate,
        }

    @classmethod
    def from_scheduler(
        cls,
        noise_scheduler,
        prediction_type: str | None = None,
        loss_weighting=None,
        *,
        snr_gamma: float | None = None,
        mu: float | None = None,
        use_stored_schedule: bool = True,
        **kwargs,
    ) -> "InfoNoiseTrainingTimestepSampler":
        """Build a sampler for a diffusers scheduler (see :func:`~diffusers_infonoise.paths.path_from_scheduler`).

        Args:
            noise_scheduler: DDPM/DDIM (VP), EDMEuler/EDMDPMSolverMultistep (VE) or FlowMatchEulerDiscrete.
            prediction_type: the parameterization of the losses given to :meth:`update`. Default: the
                stored schedule's when the config carries one, else :func:`default_prediction_type`
                (VP: the scheduler's; flow: ``"flow"``; EDM: ``"sample"``, the denoiser error).
            loss_weighting: the weight the training loss applies (class docstring). Default: the stored
                schedule's (with its ``snr_gamma``) when there is one, else
                :func:`default_loss_weighting` (``"edm"`` on EDM schedulers, ``"none"`` elsewhere).
            snr_gamma, **kwargs: see the class docstring. With a stored schedule, every setting it carries
                (:meth:`~.settings.InfoNoiseSettings.stored_keywords`: those that decide π, the base,
                ``refresh_every``, ``ema_decay``, ``memory``, ``min_count``) not given here is the stored one, so
                that ``from_scheduler(scheduler)`` reproduces the stored π exactly; an explicit argument is the only
                way to change one.
            mu: dynamic-shift ``mu`` for flow schedulers with ``use_dynamic_shifting=True``.
            use_stored_schedule: when the scheduler's config carries a learned schedule
                (:meth:`save_to_scheduler`), start from it (:meth:`load_schedule`). ``False`` starts from
                the base density.

        Raises:
            TypeError: unsupported scheduler. ValueError: bad arguments. ScheduleError: a corrupted
            stored schedule (pass ``use_stored_schedule=False`` to ignore it).
        """
        stored = read_schedule(noise_scheduler) if use_stored_schedule else None
        return cls._build(noise_scheduler, stored, prediction_type, loss_weighting, snr_gamma, mu, kwargs)

    @classmethod
    def from_stored(cls, noise_scheduler, payload: dict | None = None, **overrides) -> "InfoNoiseTrainingTimestepSampler":
        """The sampler of the schedule stored in ``noise_scheduler``'s config (or of ``payload``, a validated payload
        already read from it, :func:`~diffusers_infonoise.schedule_io.read_schedule`): built with the stored
        prediction type, loss weighting, ``snr_gamma``, settings, base density and (flow) shift, and loaded
        with the stored m̂ and π (:meth:`load_schedule`), so that its ``density`` is the learned π.
        ``overrides`` replace any of those keyword arguments (``mu`` too: by default the stored shift of a
        dynamic-shift flow scheduler).

        Raises:
            ValueError: the config carries no learned schedule, or a stored custom loss weighting with no
                ``loss_weighting`` override. ScheduleError: a corrupted or unknown-version payload.
        """
        stored = StoredSchedule.from_scheduler(noise_scheduler).payload if payload is None else payload
        if stored["loss_weighting"] == "custom" and "loss_weighting" not in overrides:
            raise ValueError("loss_weighting: the stored schedule used a custom callable weighting; pass loss_weighting=")
        mu = overrides.pop("mu", None)
        mu = stored_mu(noise_scheduler, stored) if mu is None else mu
        return cls._build(
            noise_scheduler,
            stored,
            overrides.pop("prediction_type", None),
            overrides.pop("loss_weighting", None),
            overrides.pop("snr_gamma", None),
            mu,
            overrides,
        )

    @classmethod
    def _build(cls, noise_scheduler, stored, prediction_type, loss_weighting, snr_gamma, mu, kwargs):
        path = path_from_scheduler(noise_scheduler, mu=mu)
        if stored is not None:
            if loss_weighting is None and stored.get("loss_weighting") != "custom":
                loss_weighting = stored["loss_weighting"]
                snr_gamma = stored.get("snr_gamma") if snr_gamma is None else snr_gamma
            if prediction_type is None:
                prediction_type = stored["prediction_type"]
            kwargs = {**InfoNoiseSettings.stored_keywords(stored), **kwargs}  # an explicit argument is the only way to change one
        if prediction_type is None:
            prediction_type = default_prediction_type(noise_scheduler)
        InfoNoiseSettings.check_keywords(kwargs, "from_scheduler")
        sampler = cls(path, prediction_type=prediction_type, loss_weighting=loss_weighting, snr_gamma=snr_gamma, **kwargs)
        if stored is not None:
            sampler.load_schedule(stored)
        return sampler

    def to_payload(self) -> dict:
        """The JSON-ready payload of this sampler's schedule: what :meth:`save_to_scheduler` stores in a scheduler
        config and :meth:`load_schedule` reads back (format :data:`~diffusers_infonoise.schedule_io.FORMAT`, version
        :data:`~diffusers_infonoise.schedule_io.VERSION`).

        Fields: ``format``, ``version``, ``package_version``, ``path`` (the path's config), ``prediction_type``,
        ``loss_weighting`` (name or ``"custom"``), ``snr_gamma``, ``edges`` (K+1 log-σ edges, VE σ), ``pi`` (K bin
        masses summing to 1), ``rho_hat`` (K densities per unit log σ, or null before adaptation), ``m_hat`` (K
        x0-space errors, null where never filled), ``base``, ``hyperparameters`` (the stored settings,
        :data:`~.settings.STORED_SETTINGS`), ``gate``, ``optimizer_steps``, ``warmup_steps_resolved``,
        ``num_updates``, ``adapted``, ``data`` (the data statistics the m̂ cap and the gate were resolved from:
        ``variance``, ``min_gap``, null when not measured), ``tv_phi_rho`` (TV(φ, ρ̂) of the stored π, METHOD.md §5;
        null before adaptation), ``start`` (how the run began, METHOD.md §5.9: :attr:`start_record`, kept through
        resumes; null when not recorded; payloads written before it have no such field) and, for a tempered target
        (``temperature`` τ ≠ 1), ``tv_phi_target`` (TV(φ, ρ̂^τ), which the floor bounds), and for
        a study ``target_space`` other than ``"phi"`` ``tv_pi_rho`` (TV(π, ρ̂)), and for ``target_space="reducible"``
        ``reducibility`` (target C's fit, :meth:`~diffusers_infonoise.reducibility.LearningExponents.state_dict` as lists),
        and ``pi_moves`` (:attr:`~.adaptive._AdaptiveSampler.pi_moves`: the optimizer step and the total variation of
        each of π's last changes; payloads written before it have none).
        """
        from ..version import __version__

        est = self.estimator
        rho = _floats(est.profile()[0]) if est.is_ready else None
        probs = self.probs if self.probs is not None else self.base_masses
        tv = self._allocation_total_variation() if (self.is_adapted and est.is_ready) else None
        gate = est.last_gate
        return {
            "format": FORMAT,
            "version": VERSION,
            "package_version": __version__,
            "path": self.path.config(),
            **self.objective.record(),
            "edges": _floats(self.estimator.edges),
            "pi": _floats(probs),
            "rho_hat": rho,
            "m_hat": _floats(est.m_hat),
            "base": self.base_description,
            "hyperparameters": self.settings.stored(),
            "gate": {"pivot": gate.pivot, "source": gate.source, "reason": gate.reason},
            "optimizer_steps": int(self.optimizer_step),
            # what warmup_steps="auto" became for this run (a tenth of its length)
            "warmup_steps_resolved": int(self.warmup_steps),
            "num_updates": int(self.num_updates),
            "adapted": bool(self.is_adapted),
            "data": {"variance": self.data.variance, "min_gap": est.data_min_gap},
            "tv_phi_rho": tv,
            "start": None if self.start_record is None else dict(self.start_record),
            **(
                {"tv_phi_target": self._allocation_total_variation(target=True)}
                if tv is not None and self.settings.temperature != 1.0
                else {}
            ),
            **({"tv_pi_rho": self._draws_total_variation()} if tv is not None and self.settings.target_space != "phi" else {}),
            **({"reducibility": _fit_lists(self.reducibility.state_dict())} if self.reducibility is not None else {}),
            "pi_moves": {k: list(v) for k, v in self.pi_moves.items()},
        }

    def load_schedule(self, payload: dict, *, source: str | None = None) -> None:
        """Start from a stored schedule (a validated payload, :func:`~diffusers_infonoise.schedule_io.read_schedule`):
        the one way a stored schedule enters a sampler (METHOD.md §5.9, 'stored').

        * m̂ (an x0-space error, the same quantity at equal VE σ on every path; capped at the payload's own
          resolved ``mmse_cap`` when it had one and this sampler has none) is taken on this sampler's grid
          as it is; a payload of another grid (another ``num_bins`` or σ range) or another path is interpolated
          in ln m̂ onto this grid's bin centres, flat beyond its ends (logged).
        * The data statistics (V of the m̂ cap, the value grid of the gate) are the payload's until this run's
          own data replaces them, at the first refresh.
        * π: when the payload's loss, weighting, base and :data:`~.settings.SCHEDULE_SETTINGS` equal this sampler's on the
          same grid, the stored π, checked against its own m̂ (an edited π is refused); otherwise π is rebuilt
          from m̂ for this sampler's settings, so that π·w follows ρ̂ for the loss trained now.
        * No warm-up, unless this sampler was built with an explicit ``warmup_steps``: that one is honoured
          (the base density until it ends, with the stored m̂ already in the estimate) and saved. A payload
          saved before its own warm-up ended keeps the base density and this sampler's warm-up.
        * Before step 1 it is the run's start (:meth:`record_start`: ``"stored"``, ``source`` (where the payload
          was read from, for the record and the log) and the payload's optimizer steps).

        Raises:
            ScheduleError: a π that does not follow from its m̂, or an adapted payload with fewer than two
                filled bins. ValueError: a stored grid that does not overlap this sampler's.
        """
        stored = StoredSchedule(payload)
        same_path = payload["path"] == self.path.config()
        if stored.num_filled < 2:
            if payload.get("adapted") is not False:
                raise ScheduleError("_infonoise_schedule: marked adapted, but m_hat holds fewer than two filled bins")
            return  # saved before anything was estimated: nothing to start from
        edges = stored.edges
        interpolated = _load_stored_m_hat(self.estimator, stored, self.settings)
        if interpolated:
            logger.info(
                f"stored schedule: m_hat of {edges.numel() - 1} bins on the {payload['path']['kind']} path "
                f"{payload['path']} interpolated onto this sampler's {self.estimator.num_bins} bins on "
                f"{self.path.config()} (through VE sigma, METHOD.md 5.9)"
            )
        data = payload.get("data") or {}
        self._set_provisional_data(data.get("variance"), data.get("min_gap"))
        self.record_start(
            {"choice": "stored", "source": None if source is None else str(source), "source_optimizer_steps": payload["optimizer_steps"]}
        )
        if payload.get("adapted") is False:
            return
        self.plan_run(start="stored")  # the stored m̂ already is an adapted estimate: no automatic warm-up
        stored_pi = torch.tensor(payload["pi"], dtype=torch.float64)
        mine = self._schedule_settings()
        if self.reducibility is not None and (payload.get("hyperparameters") or {}).get("target_space") == "reducible":
            # target C's fit, which π follows besides m̂ (docs/METHOD.md §4.1): on another grid it does not apply
            if interpolated:
                logger.info("stored schedule: target C's fit is for its own grid and is dropped; pi ~ rho_hat/w until refitted")
            elif not isinstance(payload.get("reducibility"), dict):
                raise ScheduleError("_infonoise_schedule: reducibility: a schedule of target_space 'reducible' stores its fit as an object")
            else:
                try:
                    self.reducibility.load_state_dict(payload["reducibility"])
                except ValueError as err:
                    raise ScheduleError(f"_infonoise_schedule: {err}") from None
        if not interpolated and same_path and mine == _stored_pi_settings(payload):
            # π is a function of m̂ and the stored settings: check it, so that an edited π cannot bypass the
            # floor or the estimate (one refresh's arithmetic)
            self._check_probs_follow_estimate(stored_pi, "_infonoise_schedule")
            probs = stored_pi
        else:
            if not interpolated:
                changed = _settings_differences(_stored_pi_settings(payload), mine)
                what = (
                    f"settings differ (stored -> this sampler's): {'; '.join(changed)}"
                    if changed
                    else f"its path {payload['path']} differs from this sampler's {self.path.config()}"
                )
                logger.info(f"stored schedule: {what}; rebuilding pi from the stored m_hat")
            probs = self._build_probs()
        if self.warmup_steps == 0 or self.optimizer_step >= self.warmup_steps:  # else: the base until the warm-up ends
            moved = self._set_probs(probs)  # drops cached cell masses: π changed without a new num_updates
            self.num_updates = max(self.num_updates, 1)
            self.last_refresh = self._describe_refresh() | ({} if moved is None else {"pi_moved": moved})
            self._check_measured_mass(stored=_stored_when(payload))

    def save_to_scheduler(self, noise_scheduler) -> bool:
        """Write the learned schedule (:meth:`to_payload`) into ``noise_scheduler``'s config
        (:func:`~diffusers_infonoise.schedule_io.write_schedule`); returns True.

        Warns (``UserWarning``) when the schedule has not adapted yet: saved before the warm-up ended (a
        mid-run save, or a run shorter than its warm-up), or no bin filled; what is stored is then the base
        density.
        """
        if not self.is_adapted:
            why = (
                f"saved at optimizer step {self.optimizer_step}, before the warm-up of {self.warmup_steps} steps ended"
                if self.optimizer_step < self.warmup_steps
                else f"saved at optimizer step {self.optimizer_step}, and only {self.estimator.num_filled} bins held "
                f"{self.estimator.min_count} samples so far"
            )
            fix = (
                "num_training_steps sizes the automatic warm-up to a tenth of the run, at least one refresh "
                f"(refresh_every={self.settings.refresh_every}); a smaller warmup_steps or refresh_every adapts sooner"
                if self.optimizer_step < self.warmup_steps
                else "fewer num_bins or a lower min_count fill sooner"
            )
            self._warn_once(
                "unadapted", f"noise sampler: the schedule has not adapted ({why}); the saved schedule is the base density ({fix})"
            )
        write_schedule(noise_scheduler, self.to_payload())
        return True

    @torch.no_grad()
    def start_from_model(
        self, loss_fn: Callable, batches: Iterable, *, samples_per_bin: int | str = "auto", data_bound: bool = False, progress: bool = True
    ) -> dict:
        """The ``"profile"`` start (METHOD.md §5.9): measure the model's x0 error before step 1 and start from it.

        ``samples_per_bin`` levels in every bin (:func:`~.batches.stratified_levels`, from the sampler's seed, the same
        on every rank) are given to ``loss_fn(batch, levels)`` on the training ``batches`` under ``torch.no_grad``:
        forward passes only. ``"auto"`` (default): the estimator's ``min_count``, fewer (at least 1) when that would
        cost more than :data:`~.adaptive.PROFILE_SHARE` of the run's training compute (the ``profile_forward_passes``
        of :meth:`plan_run`, at this batch size and world size: a LoRA run at batch 1 gets 1 a bin, 64 passes against
        a 1000-step run's 1000 steps). A per-sample loss is a mean over every pixel or latent, so one sample a bin is
        already a usable estimate, and the bins are smoothed. Each per-sample loss goes through :meth:`update`, the
        same §3 conversion and bins as training, with the cap V from this data; then one refresh with nothing to
        average (β = 0, and every bin that got its samples counts as filled) makes the measured m̂ the estimate, and π
        is built from it, without a warm-up (unless the sampler was given an explicit one). Under data parallelism
        every rank measures its share (the same number of batches on each) and all hold the identical π afterwards.
        Call ``model.eval()`` first if the model behaves differently in training.

        ``batches``: any iterable of training batches. A DataLoader or a list is iterated again when it runs out; a
        one-shot iterator (a generator, ``iter(loader)``) is read once, and the batches it gave are cycled when it
        runs out (they are kept until the start ends: at most its forward passes, which the budget above bounds).

        The data (METHOD.md §5.4, §5.5): a ``loss_fn`` that noises through ``sampler.add_noise`` (or calls
        ``sampler.observe_data``) shows the sampler its x0. One that noises by hand (diffusers' flow scripts write
        ``(1 - s) * x0 + s * noise`` themselves) shows none; then the batch itself is observed when it holds x0
        unambiguously (:func:`~.batches.clean_data_of`), and its statistics (V of the m̂ cap, the value grid of the
        gate) hold until the run's own data replaces them at its first refresh. A start that saw no data says so
        (``"data"`` ``"none"`` and a logged warning): the gate then uses its fallback until the run's data reaches it.
        Losses that are not finite (NaN/inf) are left out of the estimate, as in training, and counted: a warning
        (``UserWarning``) names how many and at which VE σ; their bins are interpolated from the others.

        ``data_bound`` (default False, an option; METHOD.md §5.10): for data on at most 16 values (binarized pixels,
        one-hot tokens), each element's values are tallied on the same batches, and the measured m̂ is bounded at
        every bin by the per-element posterior mean's x0 error
        (:func:`~diffusers_infonoise.data_statistics.per_element_bayes_mmse`), a bound on the Bayes MMSE like σ² and
        V: what the pretrained model's error exceeds it by is model error on this data, which the first steps remove
        and the start would otherwise read as entropy rate. Data on more values (8-bit images, latents) is left as
        measured, with a warning; the record says which (``"bound"``). Measured: sooner on two binarized fine-tunes,
        9.5-15% worse on a fine-tune onto data scaled by 0.25 (docs/results.md, tiers bound*), hence not the default.

        Returns:
            ``{"samples_per_bin", "forward_passes", "samples", "seconds", "filled_bins", "data", "nonfinite_losses",
            "bound", "tv_phi_rho"}`` (this rank's passes, samples and non-finite losses; ``data``: ``"loss_fn"``,
            ``"batches"`` or ``"none"``, where the data statistics came from; ``nonfinite_sigma``: their VE σ range,
            when any; ``bound``: ``{"values", "samples", "bins_lowered"}`` of the per-element bound, ``"off"`` when
            not asked for, or ``"none: <why>"``).
            The sampler records the start (:attr:`start_record`).

        Raises:
            ValueError: ``samples_per_bin`` neither ``"auto"`` nor an int >= 1, ``batches`` that yield nothing, or a
            model none of whose losses (on any process) is finite.
        """
        if not (isinstance(samples_per_bin, str) and samples_per_bin == "auto"):
            if as_count(samples_per_bin) is None or samples_per_bin < 1:
                raise ValueError(f"samples_per_bin: must be 'auto' or an int >= 1, got {samples_per_bin!r}")
            samples_per_bin = int(samples_per_bin)
        rank, world_size = world()
        stream = batch_stream(batches)
        first = next(stream)
        size = batch_size_of(first)
        n = samples_per_bin
        if n == "auto":
            n = self.estimator.min_count
            budget = self._run_plan.profile_forward_passes
            if budget is not None:
                affordable = int(budget * size * world_size / self.estimator.num_bins)
                n = max(1, min(n, affordable))
        gen = torch.Generator().manual_seed(int(self.seed) * 1_000_003 + 17)
        levels = stratified_levels(self, n, generator=gen)
        mine = levels[torch.arange(rank, len(levels), world_size)]  # this rank's share, in a fixed order
        # every rank runs the same number of forward passes (DDP's forward may synchronise buffers)
        total_batches = max(1, math.ceil(math.ceil(len(levels) / world_size) / size))
        start = time.perf_counter()
        est = self.estimator
        est.merge()  # every rank: what was recorded before this start, so that the start's own count can be told apart
        counted_before = float(est.merged_counts.sum())
        tally = ValueTally() if data_bound else None
        self.value_tally = tally  # what loss_fn shows the sampler (add_noise, observe_data) is tallied too
        try:
            seen = forward_passes(self, loss_fn, stream, first, mine, total_batches, progress=progress and rank == 0, tally=tally)
        finally:
            self.value_tally = None
        est.merge()
        counted = float(est.merged_counts.sum()) - counted_before  # over every process: the same decision on every rank
        nonfinite, done, fed, sig = seen.nonfinite, seen.samples, seen.batch_data, seen.nonfinite_sigmas
        where = f"VE sigma {float(sig.min()):.4g} to {float(sig.max()):.4g}" if sig is not None else ""
        if counted == 0:
            raise ValueError(
                f"loss_fn: none of the losses of the profile start was finite on any of {world_size} process(es) (here {nonfinite} of "
                f"{done} NaN/inf, at {where}): the pretrained model cannot be measured, nor trained from as it is; check its "
                "weights and the loss (dtype, parameterization, mixed precision), or start with init 'base'"
            )
        fed.resolve(freeze=True)  # every rank alike (a collective under data parallelism)
        self._set_provisional_data(fed.variance, fed.min_gap)
        data = "loss_fn" if seen.shown else "batches" if fed.variance is not None or fed.min_gap is not None else "none"
        if nonfinite:
            warnings.warn(
                f"noise sampler profile start: {nonfinite} of {done} losses were not finite (NaN/inf) at {where} and were left "
                "out: the bins there hold no measurement, and pi there is interpolated from the others (METHOD.md 5.4). The model "
                "may be broken at those noise levels (a non-finite loss in training skips the step)",
                UserWarning,
                stacklevel=3,
            )
        bound, bound_record = self._per_element_bound(tally, levels.sigmas) if data_bound else (None, "off")
        self.plan_run(start="profile")  # the measured m̂ is an adapted estimate: no automatic warm-up
        self._refresh_now(ema_decay=0.0, min_count=n, m_hat_bound=bound, what="pi from the pretrained model's profile")
        if bound is not None:
            bound_record = {**bound_record, "bins_lowered": est.num_bounded}
        seconds = time.perf_counter() - start
        info = {
            "samples_per_bin": n,
            "forward_passes": total_batches,
            "samples": done,
            "seconds": round(seconds, 3),
            "filled_bins": self.estimator.num_filled,
            "data": data,
            "nonfinite_losses": nonfinite,
            "bound": bound_record,
        }
        if sig is not None:
            info["nonfinite_sigma"] = [float(sig.min()), float(sig.max())]
        if self.is_adapted:
            info["tv_phi_rho"] = round(self._allocation_total_variation(), 4)
        kept = ("samples_per_bin", "forward_passes", "filled_bins", "data", "nonfinite_losses") + (("bound",) if data_bound else ())
        record = {k: info[k] for k in kept}
        self.record_start({"choice": "profile", "source": "the pretrained model", "levels": len(levels), **record})
        logger.info(
            f"noise sampler profile start: {total_batches} forward passes ({done} samples on this process, {n} a bin, "
            f"{len(levels)} levels over {world_size} process(es)) in {seconds:.1f} s; {info['filled_bins']} of "
            f"{self.estimator.num_bins} bins filled"
            + (f"; {nonfinite} non-finite losses left out ({where})" if nonfinite else "")
            + (f"; {describe_bound(bound_record)}" if data_bound else "")
        )
        if data == "none":
            logger.warning(
                "noise sampler profile start: saw no training data: loss_fn showed none (sampler.add_noise or "
                "sampler.observe_data) and the batches hold no tensor that is x0 unambiguously (a tensor, a tuple's first item, "
                f"or a dict's {'/'.join(X0_BATCH_KEYS)}); the gate uses its fallback and the m_hat cap none until the run's "
                "data (sampler.observe_data(x0) each step) reaches them at its first refresh"
            )
        return info

    def _per_element_bound(self, tally: ValueTally, level_sigmas: torch.Tensor) -> tuple[torch.Tensor | None, dict | str]:
        """The per-element bound of a profile start on every bin (METHOD.md §5.10) from ``tally`` (a collective: every
        rank alike), with its record; ``(None, why)`` for data it does not apply to, with a warning (it was asked for).

        A bin's m̂ is the mean error over the levels measured in it (``level_sigmas``, VE σ, every rank's), so it is
        bounded by the mean of the bound over those levels. On a continuous path they are spread uniformly in ln σ
        across the bin: the mean over the bin, by 3-point Gauss-Legendre in ln σ (the value at the centre alone would be
        lower where the bound rises steeply: 5x at σ = 0.15 for ±1 data, 64 bins). On a VP table they are table steps:
        the bound at the measured steps, its ln interpolated from a grid of ln σ (every quarter bin, at most 0.05 apart:
        within 1% for ±1 data), averaged bin by bin."""
        resolved = tally.resolve()
        est = self.estimator
        why = None
        if resolved is None:
            why = tally.refused
        elif resolved[0].numel() < 2:
            why = "the data takes one value"
        else:
            values, counts = resolved
            if self.path.is_discrete:
                lo, hi = float(est.edges[0]), float(est.edges[-1])  # every 0.05 in ln σ at least: ln B curves as −g²/4σ²
                nodes = torch.linspace(lo, hi, max(4 * est.num_bins, math.ceil((hi - lo) / 0.05)) + 1, dtype=torch.float64)
            else:
                offsets = torch.tensor([-math.sqrt(0.6), 0.0, math.sqrt(0.6)], dtype=torch.float64)
                nodes = (est.centers[:, None] + 0.5 * est.widths[:, None] * offsets[None, :]).reshape(-1)  # (3K,)
            work = per_element_bound_work(counts, nodes.numel())
            if work > MAX_BOUND_WORK:
                why = (
                    f"{values.numel()} values on {counts.shape[0]} elements would take about {work / BOUND_WORK_PER_SECOND:.0f} s "
                    f"of CPU on every process (at most {MAX_BOUND_WORK / BOUND_WORK_PER_SECOND:.0f} s are spent on it)"
                )
        if why is not None:
            warnings.warn(
                f"noise sampler profile start: the bound by the data (data_bound, --infonoise_profile_bound data) was not applied: "
                f"{why}; the measured errors are kept as they are (METHOD.md 5.10)",
                UserWarning,
                stacklevel=4,
            )
            return None, f"none: {why}"
        at_nodes = per_element_bayes_mmse(values, counts, torch.exp(nodes))
        if self.path.is_discrete:
            log_at_nodes = torch.log(at_nodes.clamp_min(1e-300)).numpy()

            def bound_at(log_sigmas: torch.Tensor) -> torch.Tensor:
                return torch.exp(torch.from_numpy(np.interp(log_sigmas.numpy(), nodes.numpy(), log_at_nodes)))

            # σ = inf (a zero-terminal-SNR step) is the grid's top: the bound there is the variance, reached long before
            log_sig = torch.log(level_sigmas.double().clamp(min=1e-300, max=1e300)).clamp(float(nodes[0]), float(nodes[-1]))
            k = est.bin_index(log_sig)
            num = torch.zeros(est.num_bins, dtype=torch.float64).index_add_(0, k, bound_at(log_sig))
            den = torch.zeros(est.num_bins, dtype=torch.float64).index_add_(0, k, torch.ones_like(log_sig))
            # a bin without a measured level holds no measurement to bound: its centre's value (bound_m_hat skips it)
            bound = torch.where(den > 0, num / den.clamp_min(1), bound_at(est.centers))
        else:
            bound = at_nodes.reshape(est.num_bins, 3) @ (torch.tensor([5.0, 8.0, 5.0], dtype=torch.float64) / 18.0)
        return bound, {"values": int(values.numel()), "samples": int(round(float(counts[0].sum())))}


def _load_stored_m_hat(estimator: ProfileEstimator, stored: StoredSchedule, settings: InfoNoiseSettings) -> bool:
    """Put a stored schedule's m̂ (at least two filled bins) into ``estimator``, of a sampler with ``settings``
    (:meth:`~diffusers_infonoise.estimator.ProfileEstimator.load_m_hat`); returns whether it was interpolated."""
    m_hat = stored.m_hat
    cap = (stored.payload.get("hyperparameters") or {}).get("mmse_cap")
    capped = isinstance(cap, (int, float)) and not isinstance(cap, bool) and math.isfinite(cap) and cap > 0
    if capped and settings.mmse_cap is None:
        # a sampler without a cap of its own (e.g. EDM receiving a VP ε schedule) takes the m̂ the source's π
        # was built from: an ε-model's raw error grows as σ² and would send the draws to pure noise (§5.4)
        m_hat = m_hat.clamp(max=float(cap))
    return estimator.load_m_hat(stored.edges, m_hat)


def stored_estimator(stored: StoredSchedule, path: NoisePath) -> ProfileEstimator:
    """The estimate of a stored schedule on ``path`` (the scheduler's, as
    :meth:`~InfoNoiseTrainingTimestepSampler.from_stored` builds it), without building a sampler: the estimator that
    sampler holds, with the stored settings, m̂ and data statistics, so that its
    :meth:`~diffusers_infonoise.estimator.ProfileEstimator.profile` (q and ρ̂) is the sampler's. For the InfoGrid and
    diagnostics of a stored schedule; an estimate with fewer than two filled bins is left empty.

    Raises:
        ValueError: a stored grid that does not overlap ``path``'s, or stored settings that are invalid (naming them).
    """
    settings = InfoNoiseSettings(
        **{"mmse_cap": default_mmse_cap(stored.prediction_type), **InfoNoiseSettings.stored_keywords(stored.payload)}
    )
    estimator = estimator_for(path, settings)
    if stored.num_filled >= 2:
        _load_stored_m_hat(estimator, stored, settings)
    data = stored.payload.get("data") or {}
    variance, min_gap = data.get("variance"), data.get("min_gap")
    apply_data_statistics(estimator, settings, None if variance is None else float(variance), None if min_gap is None else float(min_gap))
    return estimator


def _floats(t: torch.Tensor) -> list:
    # JSON has no NaN: unfilled bins are stored as null
    return [None if not math.isfinite(v) else float(v) for v in t.tolist()]


def _stored_pi_settings(payload: dict) -> dict:
    """What besides m̂ and the data statistics decides a (validated) payload's π, in the form of
    ``InfoNoiseTrainingTimestepSampler._schedule_settings``: a sampler whose settings equal these reproduces the
    stored π from the stored m̂."""
    hp = payload.get("hyperparameters") or {}
    return {
        "prediction_type": payload.get("prediction_type"),
        "loss_weighting": payload.get("loss_weighting"),
        "snr_gamma": payload.get("snr_gamma"),
        "base": payload.get("base"),
        "hyperparameters": {k: InfoNoiseSettings.stored_value(hp, k) for k in SCHEDULE_SETTINGS if k != "num_bins"},
    }


def _settings_differences(theirs: dict, mine: dict) -> list[str]:
    """``"key: theirs -> mine"`` for every setting that differs between two :func:`_stored_pi_settings`-shaped dicts
    (a stored schedule's and a sampler's), the hyperparameters one by one, in key order."""
    out = []
    for key in sorted(set(theirs) | set(mine)):
        a, b = theirs.get(key), mine.get(key)
        if isinstance(a, dict) and isinstance(b, dict) and key == "hyperparameters":
            out += [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        elif a != b:
            out.append(f"{key}: {a!r} -> {b!r}")
    return out


def _fit_lists(state: dict) -> dict:
    """A :class:`~diffusers_infonoise.reducibility.LearningExponents` state as JSON-ready lists (a stored schedule's
    ``reducibility``)."""
    return {k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
