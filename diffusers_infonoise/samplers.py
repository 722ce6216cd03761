"""Training-noise samplers: InfoNoise and the baselines it is compared with (METHOD.md §4-§5).

Every sampler draws noise levels for a training batch on one log-σ axis and hands back what the
model and the scheduler take::

    levels = sampler.sample(batch_size, device=device, generator=generator)
    noisy = sampler.add_noise(x0, noise, levels)
    ...  # model forward, per-sample unweighted loss in the model's own parameterization
    sampler.update(levels, per_sample_loss)
    ...  # backward, optimizer.step()
    sampler.step()  # once per optimizer step

:class:`InfoNoiseTrainingTimestepSampler` learns ``π ∝ ρ̂/w`` online; :class:`FixedDensitySampler`
draws from a fixed density (EDM log-normal, logit-normal, uniform t, ...); :class:`KingmaGaoSampler`
is the VDM++ adaptive importance sampler that keeps the objective; :class:`~diffusers_infonoise.loss_slope.LossSlopeSampler`
draws from the slope of the training loss over ln σ (CDCD-style time warping). :func:`make_sampler` builds any
of them by name.
"""

from __future__ import annotations

import math

import torch

from . import densities
from .adaptive import _ADAPTIVE_KEYS, _AdaptiveSampler, default_warmup_steps  # noqa: F401
from .baselines import FIXED_DENSITY_NAMES, FixedDensitySampler, _resolve_base, base_density  # noqa: F401
from .logs import get_logger
from .loss_slope import LossSlopeSampler
from .paths import NoisePath, path_from_scheduler
from .sampler_base import (  # noqa: F401
    NoiseLevels,
    TrainingTimestepSampler,
    _check_path_prediction,
    default_loss_weighting,
    default_prediction_type,
)
from .schedule_io import SCHEDULE_SETTINGS  # noqa: F401

logger = get_logger(__name__)

__all__ = [
    "NoiseLevels",
    "TrainingTimestepSampler",
    "FixedDensitySampler",
    "InfoNoiseTrainingTimestepSampler",
    "KingmaGaoSampler",
    "LossSlopeSampler",
    "SAMPLER_NAMES",
    "make_sampler",
    "base_density",
    "default_prediction_type",
    "default_loss_weighting",
    "default_warmup_steps",
    "SCHEDULE_SETTINGS",
]


class InfoNoiseTrainingTimestepSampler(_AdaptiveSampler):
    """InfoNoise: the training-noise density follows the conditional-entropy rate (METHOD.md §5).

    From the per-sample losses of training it estimates ``m̂(σ)`` (x0 MMSE proxy), forms the
    entropy rate per unit log σ ``q = m̂/σ²`` (I-MMSE, §2), gates the clean end (§5.5), and sets
    ``π ∝ φ/w`` with ``φ = (1 − η)·ρ̂ + η·φ_base`` (§4, §5.7), so that the effective allocation
    ``φ = π·w`` follows ``ρ̂`` up to the floor η: ``TV(φ, ρ̂) ≤ η``
    (:meth:`allocation_total_variation`, logged at every refresh). Before ``warmup_steps``
    optimizer steps it draws from the base.

    Build it with :meth:`from_scheduler`. Args (all keyword):
        prediction_type: the parameterization of the per-sample loss given to :meth:`update`.
        loss_weighting, snr_gamma: the weight the user's loss applies (METHOD.md §4).
        num_bins: K bins uniform in log σ over the path's range (default 64).
        warmup_steps: optimizer steps on the base density; ``"auto"`` (default): a tenth of
            ``num_training_steps``, between ``refresh_every`` and 500, or 500 when the run's length
            is unknown (:func:`default_warmup_steps`).
        num_training_steps: the run's optimizer steps, if known (also :meth:`set_num_training_steps`).
        refresh_every: optimizer steps between refreshes (default 50).
        memory: H, the memory of the estimate in optimizer steps: a loss ``a`` steps old weighs
            ``exp(−a/H)`` in its bin's mean (docs/METHOD.md §5.10). ``"auto"`` (default): an eighth of
            ``num_training_steps``, at least the steps that bring ``num_bins·min_count`` samples at the
            measured rate, between ``refresh_every`` and 500 (500 when the run's length is unknown);
            :meth:`memory_steps` gives the value in force.
        ema_decay: ``None`` (default): the memory above. A float β in [0, 1): the former rule instead,
            ``m̂ ← β·m̂ + (1 − β)·mean`` once a refresh (0.9 was the default before 0.3; kept to compare with).
        min_count: samples a bin needs before its first value (default 8); until then they stay open
            into the next refresh (§5.4).
        smoothing: Gaussian kernel width in bins on log m̂ (default 1.0; 0 disables).
        gate: the clean-end gate (§5.5): ``"auto"`` (default; the pivot is a tenth of the smallest gap
            between the values of the data given to :meth:`add_noise`/:meth:`observe_data`: 0.2 for
            binarized or one-hot data in {−1, 1}, no gate for 8-bit or continuous data), ``"data"``
            (the same), ``"profile"`` (the paper's rule repaired), ``"paper"`` (as first
            implemented), a pinned pivot c (VE σ), or ``None``. Which rule fired and why is in
            ``estimator.last_gate``.
        gate_fallback: pivot used while a rule has nothing to go on (no data seen) or misfires
            (default 0.2, the paper's value for non-image data).
        mmse_cap: upper bound on m̂ before the profile is formed: ``"auto"`` (the default for
            ``epsilon`` and ``v_prediction`` losses) measures the data's per-dimension variance
            ``mean_i Var(x0_i)`` on the x0 given to :meth:`add_noise`/:meth:`observe_data`, which
            bounds the Bayes MMSE at every σ; a float sets it; ``None`` (the default for the other
            losses) disables it. An ε- or v-model's residual error, converted to x0 space by ``σ²``
            (METHOD.md §3), exceeds V at high noise by orders of magnitude (measured: m̂ ≈ 900–2800 vs
            0.53 on binarized digits, DDPM-ε), and ``π ∝ ρ̂/w`` with ``w = 1/σ²`` then puts >90% of
            the draws at σ > 30 (§5.4).
        floor: η, the floor's share of the effective allocation (default 0.05, §5.7).
        clean_end_bound: bound m̂ by σ² per element (VE σ), the identity predictor's x0 error, so that
            q = m̂/σ² ≤ 1 at the clean end (default True, docs/METHOD.md §5.10; assumes a per-sample loss
            that is a mean over elements). ``False``: the former profile (comparison only).
        temperature: τ of a tempered target, ``φ ∝ ρ̂^τ`` (default 1: the entropy rate itself, the method; τ < 1
            widens the allocation, a variant of the margin study of issue 24, docs/METHOD.md §5).
        floor_space: ``"phi"`` (default): ``φ ← (1 − η)·ρ̂ + η·φ_base``, then ``π ∝ φ/w``; ``"pi"``:
            the former ``π ← (1 − η)·π + η·π_base``, whose share of φ under EDM weighting is ~57%
            (kept only to compare with).
        base: the warm-up and floor density: ``None`` (EDM log-normal on VE, uniform t on VP,
            logit-normal(0, 1) on flow), a name of :func:`base_density`, ``(name, params)``, or a Density.

    Raises:
        ValueError / TypeError: for invalid arguments, each naming the argument and accepted values.
    """

    name = "infonoise"

    def __init__(self, path: NoisePath, *, prediction_type: str, mmse_cap="default", **kwargs):
        if mmse_cap == "default":
            # on by default where the conversion factor grows with σ (METHOD.md §5.4)
            mmse_cap = "auto" if prediction_type in ("epsilon", "v_prediction") else None
        super().__init__(path, prediction_type=prediction_type, mmse_cap=mmse_cap, **kwargs)

    def _statistic(self, levels, errors):
        return errors

    def _bin_weights(self) -> torch.Tensor:
        w = self.x0_loss_weight(torch.exp(self.estimator.centers))
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
        rho_mass = self._rho_mass(self.temperature)
        w = self._bin_weights()
        if self.floor_space == "pi":  # the former mixing (a hybrid with the base; comparison only)
            target = rho_mass / w
            return (1 - self.floor) * target / target.sum() + self.floor * self.base_masses
        phi_base = self.base_masses * w
        phi = (1 - self.floor) * rho_mass + self.floor * phi_base / phi_base.sum()
        probs = phi / w
        return probs / probs.sum()

    def effective_allocation(self) -> torch.Tensor:
        """(K,) float64 bin masses of the effective allocation ``φ = π·w`` normalised (METHOD.md §4)."""
        probs = self.probs if self.probs is not None else self.base_masses
        phi = probs * self._bin_weights()
        return phi / phi.sum()

    def allocation_total_variation(self, *, target: bool = False) -> float:
        """``TV(φ, ρ̂) = ½·Σ_k |φ_k − ρ̂_k|`` on the bins, the check of METHOD.md §5: at most ``floor``
        (plus 0.02) for an adapted sampler whose estimate did not move since its last refresh. With a
        ``temperature`` τ ≠ 1, φ follows ``ρ̂^τ`` instead, and this measures how far that is from the entropy
        rate; ``target=True`` measures TV(φ, ρ̂^τ), which the floor bounds.

        Raises:
            RuntimeError: before two bins hold an estimate.
        """
        rho_mass = self._rho_mass(self.temperature if target else 1.0)
        return float(0.5 * (self.effective_allocation() - rho_mass).abs().sum())

    def schedule_settings(self) -> dict:
        """What besides m̂ and the data statistics decides this sampler's π: its loss (``prediction_type``,
        ``loss_weighting`` name or ``"custom"``, ``snr_gamma``), base density and the
        :data:`SCHEDULE_SETTINGS` but ``num_bins`` (the grid is compared on its own), in the form of
        :func:`~diffusers_infonoise.schedule_io.payload_settings`."""
        return {
            "prediction_type": self.prediction_type,
            "loss_weighting": self.loss_weighting if isinstance(self.loss_weighting, str) else "custom",
            "snr_gamma": self.snr_gamma,
            "base": self.base_description,
            "hyperparameters": {k: self.hyperparameters.get(k) for k in SCHEDULE_SETTINGS if k != "num_bins"},
        }

    def measured_mass(self) -> float:
        """The share of π's mass in bins that hold a measured m̂ (the others are interpolated or
        extrapolated, METHOD.md §5.4): a first refresh from 2 of 64 bins can report a small TV(φ, ρ̂)
        with most of π resting on extrapolation."""
        probs = self.probs if self.probs is not None else self.base_masses
        return float(probs[~torch.isnan(self.estimator.m_hat)].sum())

    def metrics(self, prefix: str = "infonoise/") -> dict[str, float]:
        """The sampler's figures as plain floats for a tracker: ``accelerator.log(sampler.metrics(), step=global_step)``.

        Keys (after ``prefix``): ``adapted`` (0/1), ``num_updates``, ``filled_bins``, ``measured_mass``
        (:meth:`measured_mass`), ``pi_sigma_p10``/``_p50``/``_p90`` (VE σ quantiles of π), and once an
        estimate exists ``tv_phi_rho`` (TV(φ, ρ̂), METHOD.md §5's check: ≤ floor + 0.02) and, when a gate
        applies, ``gate_pivot`` (VE σ). Cheap (bin arithmetic on the CPU; no synchronisation).
        """
        q = torch.exp(self.density.icdf(torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)))
        out = {
            "adapted": float(self.is_adapted),
            "num_updates": float(self.num_updates),
            "filled_bins": float(self.estimator.num_filled),
            "measured_mass": self.measured_mass(),
            "pi_sigma_p10": float(q[0]),
            "pi_sigma_p50": float(q[1]),
            "pi_sigma_p90": float(q[2]),
        }
        if self.estimator.is_ready:
            out["tv_phi_rho"] = self.allocation_total_variation()
            if self.estimator.last_gate.pivot is not None:
                out["gate_pivot"] = float(self.estimator.last_gate.pivot)
        return {prefix + k: v for k, v in out.items()}

    def _describe_refresh(self) -> dict:
        gate = self.estimator.last_gate
        extra = {"tv_phi_target": self.allocation_total_variation(target=True)} if self.temperature != 1.0 else {}
        return {
            "step": self.optimizer_step,
            "tv_phi_rho": self.allocation_total_variation(),
            **extra,
            "filled_bins": self.estimator.num_filled,
            "measured_mass": self.measured_mass(),
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
            "w": self.x0_loss_weight(torch.exp(x)),
            "pi": torch.exp(self.density.log_prob(x)),
            "phi": self.effective_allocation() / self.estimator.widths,
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
            snr_gamma, **kwargs: see the class docstring. With a stored schedule, every setting of
                :data:`SCHEDULE_SETTINGS` (and the base, ``refresh_every``, ``ema_decay``, ``memory``,
                ``min_count``) not given here is the stored one, so that ``from_scheduler(scheduler)``
                reproduces the stored π exactly; an explicit argument is the only way to change one.
            mu: dynamic-shift ``mu`` for flow schedulers with ``use_dynamic_shifting=True``.
            use_stored_schedule: when the scheduler's config carries a learned schedule
                (:meth:`save_to_scheduler`), start from it (:meth:`load_schedule`). ``False`` starts from
                the base density.

        Raises:
            TypeError: unsupported scheduler. ValueError: bad arguments. ScheduleError: a corrupted
            stored schedule (pass ``use_stored_schedule=False`` to ignore it).
        """
        from .schedule_io import read_schedule

        stored = read_schedule(noise_scheduler) if use_stored_schedule else None
        return cls._build(noise_scheduler, stored, prediction_type, loss_weighting, snr_gamma, mu, kwargs)

    @classmethod
    def from_stored(cls, noise_scheduler, **overrides) -> "InfoNoiseTrainingTimestepSampler":
        """The sampler of the schedule stored in ``noise_scheduler``'s config: built with the stored
        prediction type, loss weighting, ``snr_gamma``, settings, base density and (flow) shift, and loaded
        with the stored m̂ and π (:meth:`load_schedule`), so that its ``density`` is the learned π.
        ``overrides`` replace any of those keyword arguments (``mu`` too: by default the stored shift of a
        dynamic-shift flow scheduler).

        Raises:
            ValueError: the config carries no learned schedule, or a stored custom loss weighting with no
                ``loss_weighting`` override. ScheduleError: a corrupted or unknown-version payload.
        """
        from .schedule_io import CONFIG_KEY, read_schedule, stored_mu

        stored = read_schedule(noise_scheduler)
        if stored is None:
            raise ValueError(
                f"noise_scheduler: its config carries no learned InfoNoise schedule (no '{CONFIG_KEY}' "
                "entry); it was not saved by a run with an InfoNoise sampler"
            )
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
        from .schedule_io import stored_settings

        path = path_from_scheduler(noise_scheduler, mu=mu)
        if stored is not None:
            if loss_weighting is None and stored.get("loss_weighting") != "custom":
                loss_weighting = stored["loss_weighting"]
                snr_gamma = stored.get("snr_gamma") if snr_gamma is None else snr_gamma
            if prediction_type is None:
                prediction_type = stored["prediction_type"]
            kwargs = {**stored_settings(stored), **kwargs}  # an explicit argument is the only way to change one
        if prediction_type is None:
            prediction_type = default_prediction_type(noise_scheduler)
        unknown = set(kwargs) - _ADAPTIVE_KEYS
        if unknown:
            raise ValueError(f"from_scheduler: unknown parameter(s) {sorted(unknown)}; accepted: {sorted(_ADAPTIVE_KEYS)}")
        sampler = cls(path, prediction_type=prediction_type, loss_weighting=loss_weighting, snr_gamma=snr_gamma, **kwargs)
        if stored is not None:
            sampler.load_schedule(stored)
        return sampler

    def load_schedule(self, payload: dict, *, source: str | None = None) -> None:
        """Start from a stored schedule (a validated payload, :func:`~diffusers_infonoise.schedule_io.read_schedule`):
        the one way a stored schedule enters a sampler (METHOD.md §5.9, 'stored').

        * m̂ (an x0-space error, the same quantity at equal VE σ on every path; capped at the payload's own
          resolved ``mmse_cap`` when it had one and this sampler has none) is taken on this sampler's grid
          as it is; a payload of another grid (another ``num_bins`` or σ range) or another path is interpolated
          in ln m̂ onto this grid's bin centres, flat beyond its ends (logged).
        * The data statistics (V of the m̂ cap, the value grid of the gate) are the payload's until this run's
          own data replaces them, at the first refresh.
        * π: when the payload's loss, weighting, base and :data:`SCHEDULE_SETTINGS` equal this sampler's on the
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
        from .schedule_io import ScheduleError, payload_settings, settings_differences

        edges = torch.tensor(payload["edges"], dtype=torch.float64)
        m_hat = torch.tensor([math.nan if v is None else v for v in payload["m_hat"]], dtype=torch.float64)
        same_path = payload["path"] == self.path.config()
        if int((~torch.isnan(m_hat)).sum()) < 2:
            if payload.get("adapted") is not False:
                raise ScheduleError("_infonoise_schedule: marked adapted, but m_hat holds fewer than two filled bins")
            return  # saved before anything was estimated: nothing to start from
        cap = (payload.get("hyperparameters") or {}).get("mmse_cap")
        capped = isinstance(cap, (int, float)) and not isinstance(cap, bool) and math.isfinite(cap) and cap > 0
        if capped and self.hyperparameters.get("mmse_cap") is None:
            # a sampler without a cap of its own (e.g. EDM receiving a VP ε schedule) takes the m̂ the source's π
            # was built from: an ε-model's raw error grows as σ² and would send the draws to pure noise (§5.4)
            m_hat = m_hat.clamp(max=float(cap))
        interpolated = self.estimator.load_m_hat(edges, m_hat)
        if interpolated:
            logger.info(
                f"stored schedule: m_hat of {edges.numel() - 1} bins on the {payload['path']['kind']} path "
                f"{payload['path']} interpolated onto this sampler's {self.estimator.num_bins} bins on "
                f"{self.path.config()} (through VE sigma, METHOD.md 5.9)"
            )
        data = payload.get("data") or {}
        self.set_provisional_data(data.get("variance"), data.get("min_gap"))
        self.record_start(
            {"choice": "stored", "source": None if source is None else str(source), "source_optimizer_steps": payload["optimizer_steps"]}
        )
        if payload.get("adapted") is False:
            return
        self.start_adapted()  # the stored m̂ already is an adapted estimate
        stored_pi = torch.tensor(payload["pi"], dtype=torch.float64)
        mine = self.schedule_settings()
        if not interpolated and same_path and mine == payload_settings(payload):
            # π is a function of m̂ and the stored settings: check it, so that an edited π cannot bypass the
            # floor or the estimate (one refresh's arithmetic)
            rebuilt = self._build_probs()
            tv = 0.5 * float((rebuilt - stored_pi).abs().sum())
            if mine["loss_weighting"] != "custom" and tv > 1e-6:
                raise ScheduleError(
                    f"_infonoise_schedule: its pi does not follow from its own m_hat and settings (TV "
                    f"{tv:.3g} from the pi they give): the payload was edited or corrupted"
                )
            probs = stored_pi
        else:
            if not interpolated:
                changed = settings_differences(payload_settings(payload), mine)
                what = (
                    f"settings differ (stored -> this sampler's): {'; '.join(changed)}"
                    if changed
                    else f"its path {payload['path']} differs from this sampler's {self.path.config()}"
                )
                logger.info(f"stored schedule: {what}; rebuilding pi from the stored m_hat")
            probs = self._build_probs()
        if self.warmup_steps == 0 or self.optimizer_step >= self.warmup_steps:  # else: the base until the warm-up ends
            self.probs = probs
            self.num_updates = max(self.num_updates, 1)
            self._cell_cache = None  # π changed without a new num_updates: drop cached cell masses
            self.last_refresh = self._describe_refresh()
            self._check_measured_mass()

    def save_to_scheduler(self, noise_scheduler) -> None:
        """Write the learned schedule into ``noise_scheduler``'s config (see :mod:`.schedule_io`).

        Warns (``UserWarning``) when the schedule has not adapted yet: saved before the warm-up ended (a
        mid-run save, or a run shorter than its warm-up), or no bin filled; what is stored is then the base
        density.
        """
        from .schedule_io import write_schedule

        if not self.is_adapted:
            why = (
                f"saved at optimizer step {self.optimizer_step}, before the warm-up of {self.warmup_steps} steps ended"
                if self.optimizer_step < self.warmup_steps
                else f"saved at optimizer step {self.optimizer_step}, and only {self.estimator.num_filled} bins held "
                f"{self.estimator.min_count} samples so far"
            )
            fix = (
                "num_training_steps sizes the automatic warm-up to a tenth of the run, at least one refresh "
                f"(refresh_every={self.refresh_every}); a smaller warmup_steps or refresh_every adapts sooner"
                if self.optimizer_step < self.warmup_steps
                else "fewer num_bins or a lower min_count fill sooner"
            )
            self._warn_once(
                "unadapted", f"noise sampler: the schedule has not adapted ({why}); the saved schedule is the base density ({fix})"
            )
        write_schedule(noise_scheduler, self)


class KingmaGaoSampler(_AdaptiveSampler):
    """VDM++ adaptive importance sampling (Kingma & Gao 2023), the objective-preserving contrast.

    The objective ``E_{σ~base}[u·L]`` is kept: levels are drawn from ``p ∝ base·E[u·L]`` on the
    log-σ bins (with VDM++'s uniform-λ base this is their ``p ∝ w·loss``), mixed with the base by
    ``floor``, and each draw carries ``levels.loss_weights = base(σ)/p(σ)`` to multiply the
    per-sample loss with. No gate and no ``ρ̂/w`` are involved (METHOD.md §5, last paragraph).
    """

    name = "kingma_gao"

    def __init__(self, path, **kwargs):
        kwargs.setdefault("gate", None)
        super().__init__(path, **kwargs)

    def _statistic(self, levels, errors):
        # u·L = w·e: the weighted loss the objective averages
        return self.x0_loss_weight(levels.sigmas.detach().to(errors.device, errors.dtype)).to(errors.dtype) * errors

    def _build_probs(self):
        # the VDM++ proposal p ∝ base·E[u·L], mixed with the base in π-space (its objective is kept
        # by the importance weights, so φ is not what this sampler targets)
        masses = self.estimator.filled_m_hat() * self.base_masses
        return (1 - self.floor) * masses / masses.sum() + self.floor * self.base_masses

    def _importance_weights(self, sigmas, timesteps, levels):
        sig = sigmas.to(torch.float64)
        if self.path.is_discrete:
            base_p = densities.bin_masses(self.base, self.path.cell_edges())
            base_p = base_p / base_p.sum()
            ratio = base_p / self.timestep_probabilities().clamp_min(1e-300)
            w = ratio[timesteps]
        else:
            x = torch.log(sig)
            w = torch.exp(self.base.log_prob(x) - self.density.log_prob(x))
        return w.to(torch.float32).to(levels.sigmas.device)


#: every sampler :func:`make_sampler` builds: InfoNoise, the fixed densities, Kingma & Gao, the loss slope
SAMPLER_NAMES = ("infonoise", *FIXED_DENSITY_NAMES, "kingma_gao", "loss_slope")


def make_sampler(name: str, noise_scheduler, **kwargs) -> TrainingTimestepSampler:
    """Any training-noise sampler by name, behind one interface.

    Args:
        name: one of :data:`SAMPLER_NAMES`.
        noise_scheduler: a supported diffusers scheduler (see :func:`path_from_scheduler`).
        **kwargs: ``prediction_type``, ``loss_weighting``, ``snr_gamma``, ``mu`` for every sampler;
            the density parameters of :func:`base_density` for fixed samplers (``P_mean``, ``P_std``;
            ``mean``, ``std``; ``scale``; ``sigma_data``); the hyperparameters of
            :class:`InfoNoiseTrainingTimestepSampler` for ``infonoise``, ``kingma_gao`` and ``loss_slope`` (its
            accepted ones: :class:`~diffusers_infonoise.loss_slope.LossSlopeSampler`).

    Raises:
        ValueError: unknown name or keyword (the message lists the accepted ones).
    """
    if name not in SAMPLER_NAMES:
        raise ValueError(f"name: unknown sampler {name!r}; accepted: {', '.join(SAMPLER_NAMES)}")
    common = {k: kwargs.pop(k) for k in ("prediction_type", "loss_weighting", "snr_gamma") if k in kwargs}
    mu = kwargs.pop("mu", None)
    if name == "infonoise":
        unknown = set(kwargs) - _ADAPTIVE_KEYS - {"use_stored_schedule"}
        if unknown:
            accepted = sorted(_ADAPTIVE_KEYS | {"use_stored_schedule"})
            raise ValueError(f"infonoise: unknown parameter(s) {sorted(unknown)}; accepted: {accepted}")
        return InfoNoiseTrainingTimestepSampler.from_scheduler(noise_scheduler, mu=mu, **common, **kwargs)
    path = path_from_scheduler(noise_scheduler, mu=mu)
    common.setdefault("prediction_type", default_prediction_type(noise_scheduler))
    if name in ("kingma_gao", "loss_slope"):
        unknown = set(kwargs) - _ADAPTIVE_KEYS
        if unknown:
            raise ValueError(f"{name}: unknown parameter(s) {sorted(unknown)}; accepted: {sorted(_ADAPTIVE_KEYS)}")
        return (KingmaGaoSampler if name == "kingma_gao" else LossSlopeSampler)(path, **common, **kwargs)
    return FixedDensitySampler(path, base_density(name, path, **kwargs), name=name, **common)
