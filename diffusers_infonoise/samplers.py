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
is the VDM++ adaptive importance sampler that keeps the objective. :func:`make_sampler` builds any
of them by name.
"""

from __future__ import annotations

import hashlib
import logging
import math
import warnings
from dataclasses import dataclass

import torch

from . import densities as D
from .estimator import ProfileEstimator
from .paths import FlowPath, NoisePath, VEPath, VPPath, path_from_scheduler, scheduler_kind
from .weighting import (
    loss_weight,
    validate_loss_weighting,
    validate_prediction_type,
    x0_error_factor,
    x0_loss_weight,
)

logger = logging.getLogger(__name__)

__all__ = [
    "NoiseLevels",
    "TrainingTimestepSampler",
    "FixedDensitySampler",
    "InfoNoiseTrainingTimestepSampler",
    "KingmaGaoSampler",
    "SAMPLER_NAMES",
    "make_sampler",
    "base_density",
    "default_prediction_type",
    "default_loss_weighting",
    "default_warmup_steps",
    "SCHEDULE_SETTINGS",
]


@dataclass
class NoiseLevels:
    """One batch of training noise levels.

    Attributes:
        timesteps: (B,) what the model and scheduler take: int64 t for VP (DDPM), float32
            ``c_noise = 0.25·ln σ`` for VE/EDM, float32 ``s·num_train_timesteps`` for flow.
        sigmas: (B,) float32 VE σ (``inf`` at a zero-terminal-SNR VP step).
        log_snr: (B,) float32 λ = −2·log σ.
        loss_weights: (B,) float32 importance weights to multiply the per-sample loss with
            (Kingma-Gao only), else ``None``.
    """

    timesteps: torch.Tensor
    sigmas: torch.Tensor
    log_snr: torch.Tensor
    loss_weights: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.sigmas.shape[0]

    def to(self, device) -> "NoiseLevels":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return NoiseLevels(move(self.timesteps), move(self.sigmas), move(self.log_snr), move(self.loss_weights))


def default_prediction_type(noise_scheduler) -> str:
    """The loss parameterization a script most likely uses with ``noise_scheduler``.

    VP: the scheduler's ``prediction_type``. Flow: ``"flow"`` (velocity). EDM: ``"sample"`` — the
    network is trained through the denoiser D; the EDM scheduler's ``prediction_type`` only picks
    the sign of ``c_out`` and is *not* a loss parameterization (METHOD.md §3, trap).
    """
    kind = scheduler_kind(noise_scheduler)
    if kind == "ve":
        return "sample"
    if kind == "flow":
        return "flow"
    return noise_scheduler.config.prediction_type


def default_loss_weighting(path: NoisePath, prediction_type: str) -> str:
    """The loss weighting a user of ``path`` trains with by default (METHOD.md §4): the EDM recipe
    (``"edm"``, λ(σ) on the denoiser error) for the x0/D loss on VE paths, an unweighted loss
    (``"none"``) everywhere else (an unweighted F loss on VE already *is* the EDM weighting)."""
    return "edm" if path.kind == "ve" and prediction_type == "sample" else "none"


def _check_path_prediction(path: NoisePath, prediction_type: str) -> None:
    allowed = {
        "ve": ("sample", "edm_f", "epsilon"),
        "vp": ("epsilon", "v_prediction", "sample"),
        "flow": ("flow", "sample"),
    }[path.kind]
    if prediction_type not in allowed:
        raise ValueError(
            f"prediction_type: {prediction_type!r} is not a loss parameterization of the {path.kind} path; "
            f"accepted: {', '.join(allowed)}"
        )


class TrainingTimestepSampler:
    """Common interface: draws, noising, loss conversion, densities and state (see module docstring).

    Args:
        path: the corruption path (:func:`~diffusers_infonoise.paths.path_from_scheduler`).
        prediction_type: what the per-sample loss given to :meth:`update` measures
            (:data:`~diffusers_infonoise.weighting.PREDICTION_TYPES`).
        loss_weighting: the weight the user's loss applies in its own parameterization
            (``"none"``, ``"edm"``, ``"min_snr"``, ``"sigma_sqrt"``, ``"cosmap"`` or a callable of VE σ).
            ``None`` (default): :func:`default_loss_weighting` (``"edm"`` for the D loss on VE paths).
        snr_gamma: γ of Min-SNR (``loss_weighting="min_snr"`` only).
    """

    name = "fixed"

    def __init__(self, path: NoisePath, *, prediction_type: str, loss_weighting=None, snr_gamma: float | None = None):
        if not isinstance(path, NoisePath):
            raise TypeError(f"path: expected a NoisePath, got {type(path).__name__}")
        self.path = path
        self.prediction_type = validate_prediction_type(prediction_type)
        _check_path_prediction(path, prediction_type)
        if loss_weighting is None:
            loss_weighting = default_loss_weighting(path, prediction_type)
        self.loss_weighting = validate_loss_weighting(loss_weighting, snr_gamma)
        self.snr_gamma = snr_gamma
        self.sigma_data = path.sigma_data if isinstance(path, VEPath) else 0.5
        self.optimizer_step = 0
        self._cell_cache: tuple[int, torch.Tensor] | None = None

    # -- the density ------------------------------------------------------------------------
    @property
    def density(self) -> D.Density:
        """The current training density of log σ (VE σ), truncated to the path's range."""
        raise NotImplementedError

    def _density_version(self) -> int:
        return 0

    def log_prob(self, sigmas: torch.Tensor) -> torch.Tensor:
        """log π per unit log σ at VE ``sigmas`` (any shape; float64; ``-inf`` outside the range)."""
        return self.density.log_prob(torch.log(torch.as_tensor(sigmas, dtype=torch.float64).cpu()))

    def timestep_probabilities(self) -> torch.Tensor:
        """VP paths: (num_train_timesteps,) float64 probability of each integer t, summing to 1.

        The probability of step t is the π-mass of t's cell on the log-σ axis (METHOD.md §5.8).

        Raises:
            ValueError: on a continuous path (VE or flow), which has no integer timesteps.
        """
        if not isinstance(self.path, VPPath):
            raise ValueError(f"timestep_probabilities: only defined for integer-timestep (vp) paths, this path is {self.path.kind!r}")
        version = self._density_version()
        if self._cell_cache is None or self._cell_cache[0] != version:
            masses = D.bin_masses(self.density, self.path.cell_edges())
            self._cell_cache = (version, masses / masses.sum())
        return self._cell_cache[1]

    def x0_loss_weight(self, sigmas: torch.Tensor) -> torch.Tensor:
        """w(σ): the weight the configured loss puts on the x0-space error (METHOD.md §4)."""
        return x0_loss_weight(
            self.loss_weighting, self.prediction_type, sigmas, snr_gamma=self.snr_gamma, sigma_data=self.sigma_data
        )

    def loss_weight(self, sigmas: torch.Tensor) -> torch.Tensor:
        """u(σ): the weight the configured loss puts on its own per-sample error (float64)."""
        return loss_weight(
            self.loss_weighting, self.prediction_type, sigmas, snr_gamma=self.snr_gamma, sigma_data=self.sigma_data
        )

    # -- drawing ----------------------------------------------------------------------------
    def sample(self, batch_size: int, *, device=None, generator: torch.Generator | None = None) -> NoiseLevels:
        """Draw ``batch_size`` noise levels from the current density.

        Args:
            batch_size: number of levels (0 allowed).
            device: where the returned tensors live (default: the generator's device, else CPU).
            generator: a ``torch.Generator`` for reproducible draws; the uniforms are drawn on its device.

        Returns:
            :class:`NoiseLevels` with (batch_size,) tensors.

        Raises:
            ValueError: negative or non-integer ``batch_size``.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0:
            raise ValueError(f"batch_size: must be a non-negative int, got {batch_size!r}")
        gen_device = generator.device if generator is not None else torch.device("cpu")
        out_device = torch.device(device) if device is not None else gen_device
        u = torch.rand(batch_size, generator=generator, dtype=torch.float64, device=gen_device).cpu()
        if isinstance(self.path, VPPath):
            cum = torch.cumsum(self.timestep_probabilities(), 0)
            t = D.searchsorted(cum, u * cum[-1], right=True).clamp(max=self.path.num_train_timesteps - 1)
            sigmas = self.path.sigmas_table[t]
            timesteps = t.to(torch.int64)
        else:
            log_sigmas = self.density.icdf(u)
            sigmas = torch.exp(log_sigmas)
            timesteps = self.path.sigma_to_timesteps(sigmas).to(torch.float32)
        levels = NoiseLevels(
            timesteps=timesteps.to(out_device),
            sigmas=sigmas.to(torch.float32).to(out_device),
            log_snr=(-2.0 * torch.log(sigmas)).to(torch.float32).to(out_device),
        )
        levels.loss_weights = self._importance_weights(sigmas, levels)
        return levels

    def _importance_weights(self, sigmas: torch.Tensor, levels: NoiseLevels):
        return None

    def add_noise(self, x0: torch.Tensor, noise: torch.Tensor, levels: NoiseLevels) -> torch.Tensor:
        """Noisy sample ``a·x0 + b·noise`` for (B, ...) ``x0`` and ``noise`` at ``levels``; x0's dtype.

        Correct on all three paths without grid lookups: EDM ``x0 + σ·ε``, VP
        ``sqrt(ᾱ_t)·x0 + sqrt(1 − ᾱ_t)·ε``, flow ``(1 − s)·x0 + s·ε``.

        Raises:
            ValueError: when shapes of ``x0``, ``noise`` and ``levels`` disagree.
        """
        if x0.shape != noise.shape:
            raise ValueError(f"noise: shape {tuple(noise.shape)} differs from x0's {tuple(x0.shape)}")
        if x0.shape[0] != len(levels):
            raise ValueError(f"levels: {len(levels)} levels for a batch of {x0.shape[0]} samples")
        if isinstance(self.path, VPPath):
            # exact table values, not the float32-rounded sigmas
            ac = self.path.alphas_cumprod.to(torch.float64)[levels.timesteps.cpu()]
            a, b = ac.sqrt(), (1 - ac).sqrt()
            shape = (-1,) + (1,) * (x0.ndim - 1)
            return a.to(x0).view(shape) * x0 + b.to(x0).view(shape) * noise
        return self.path.add_noise(x0, noise, levels.sigmas.to(torch.float64))

    # -- statistics -------------------------------------------------------------------------
    def _validated_errors(self, levels: NoiseLevels, per_sample_loss: torch.Tensor) -> torch.Tensor:
        """Check a (B,) loss against ``levels`` and convert it to the x0-space error (float64)."""
        if not isinstance(levels, NoiseLevels):
            raise TypeError(f"levels: expected the NoiseLevels returned by sample(), got {type(levels).__name__}")
        if not torch.is_tensor(per_sample_loss) or not per_sample_loss.is_floating_point():
            raise TypeError("per_sample_loss: expected a floating-point tensor of shape (batch_size,)")
        if per_sample_loss.ndim != 1:
            raise ValueError(
                f"per_sample_loss: expected shape (batch_size,), got {tuple(per_sample_loss.shape)}; "
                "reduce over all but the batch dimension first (e.g. loss.mean(dim=list(range(1, loss.ndim))))"
            )
        if per_sample_loss.shape[0] != len(levels):
            raise ValueError(f"per_sample_loss: {per_sample_loss.shape[0]} losses for {len(levels)} levels")
        loss = per_sample_loss.detach().to("cpu", torch.float64)
        if bool((loss < 0).any()):
            raise ValueError("per_sample_loss: squared errors must be >= 0, got a negative value")
        factor = x0_error_factor(self.prediction_type, levels.sigmas.detach().cpu().to(torch.float64), sigma_data=self.sigma_data)
        with torch.no_grad():
            # 0·inf (an exact ε error at σ = inf) must count as non-finite, not as a value
            return torch.where(torch.isfinite(factor), factor * loss, torch.full_like(loss, math.inf))

    def update(self, levels: NoiseLevels, per_sample_loss: torch.Tensor) -> None:
        """Record the (B,) unweighted per-sample loss in the model's own parameterization.

        Fixed-density samplers only validate it. Raises ``ValueError``/``TypeError`` on a loss that
        is negative, of the wrong shape or not matching ``levels``. NaN/inf losses are ignored
        (adaptive samplers count them).
        """
        self._validated_errors(levels, per_sample_loss)

    def step(self) -> None:
        """Call once per optimizer step (not per micro-batch)."""
        self.optimizer_step += 1

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Tensors, numbers, strings and None for an exact resume; written without pickle by
        :func:`~diffusers_infonoise.serialization.save_sampler_state` (safetensors + JSON)."""
        return {"name": self.name, "optimizer_step": self.optimizer_step}

    def load_state_dict(self, state: dict) -> None:
        if state.get("name") != self.name:
            raise ValueError(f"state_dict: saved by a {state.get('name')!r} sampler, this is a {self.name!r} sampler")
        self.optimizer_step = int(state["optimizer_step"])

    def describe(self) -> dict:
        """Plain-JSON summary (name, path, parameterization, density) for logs and model cards."""
        return {
            "name": self.name,
            "path": self.path.config(),
            "prediction_type": self.prediction_type,
            "loss_weighting": self.loss_weighting if isinstance(self.loss_weighting, str) else "custom",
            "snr_gamma": self.snr_gamma,
        }


class FixedDensitySampler(TrainingTimestepSampler):
    """Draws from a fixed density of log σ (a baseline). ``density`` is truncated to the path's range."""

    def __init__(self, path: NoisePath, density: D.Density, *, name: str = "fixed", **kwargs):
        super().__init__(path, **kwargs)
        lo, hi = path.log_sigma_range
        self.name = name
        self._density = density if isinstance(density, D.Piecewise) else D.Truncated(density, lo, hi)

    @property
    def density(self):
        return self._density

    def describe(self):
        return {**super().describe(), "density": self._density.describe()}


# ----------------------------------------------------------------------------------------------
# base densities by name
# ----------------------------------------------------------------------------------------------


def _flow_offset(path: NoisePath) -> float:
    return math.log(path.shift) if isinstance(path, FlowPath) else 0.0


def base_density(name: str, path: NoisePath, **params) -> D.Density:
    """The fixed density of a baseline sampler on ``path``, per unit log σ (VE σ).

    ``uniform``: uniform t on VP (every integer step has mass 1/N), uniform flow level s (shifted),
    uniform position on EDM's ρ-ramp on VE. ``edm_lognormal`` (``P_mean=-1.2, P_std=1.2``).
    ``logit_normal`` (``mean=0, std=1``) on the flow level s in the SD3 paper's convention: a
    positive ``mean`` means *more* noise; since ``logit(s) = log σ`` it is a normal density in log σ,
    translated by ``log(shift)`` on a shifted flow path. ``mode`` (``scale=1.29``, SD3).
    ``log_uniform``: uniform log σ over the path's range. ``cosine`` (``sigma_data``, default the
    path's σ_data on VE, else 1): ``σ = σ_data·tan(πu/2)``.

    Raises:
        ValueError: unknown name or parameter.
    """
    def take(**defaults):
        unknown = set(params) - set(defaults)
        if unknown:
            raise ValueError(f"{name}: unknown parameter(s) {sorted(unknown)}; accepted: {sorted(defaults) or 'none'}")
        return {**defaults, **params}

    off = _flow_offset(path)
    lo, hi = path.log_sigma_range
    if name == "uniform":
        take()
        if isinstance(path, VPPath):
            return D.Piecewise(path.cell_edges(), torch.ones(path.num_train_timesteps, dtype=torch.float64))
        if isinstance(path, FlowPath):
            return D.Shifted(D.Logistic(0.0), off)
        return D.KarrasRamp(path.sigma_min, path.sigma_max)
    if name == "edm_lognormal":
        p = take(P_mean=-1.2, P_std=1.2)
        return D.Normal(p["P_mean"], p["P_std"])
    if name == "logit_normal":
        p = take(mean=0.0, std=1.0)
        return D.Shifted(D.Normal(p["mean"], p["std"]), off)
    if name == "mode":
        p = take(scale=1.29)
        return D.Shifted(D.Mode(p["scale"]), off)
    if name == "log_uniform":
        take()
        return D.Uniform(lo, hi)
    if name == "cosine":
        p = take(sigma_data=path.sigma_data if isinstance(path, VEPath) else 1.0)
        return D.Cosine(p["sigma_data"])
    raise ValueError(f"name: unknown base density {name!r}; accepted: {', '.join(_FIXED_NAMES)}")


_FIXED_NAMES = ("uniform", "edm_lognormal", "logit_normal", "mode", "log_uniform", "cosine")
_PATH_DEFAULT_BASE = {"ve": "edm_lognormal", "vp": "uniform", "flow": "logit_normal"}


def _resolve_base(path: NoisePath, base) -> tuple[D.Density, dict]:
    """``base`` may be None (the path's conventional density, METHOD.md §5.2), a name, a
    ``(name, params)`` pair, or a Density."""
    if base is None:
        base = _PATH_DEFAULT_BASE[path.kind]
    if isinstance(base, D.Density):
        density, desc = base, {"density": base.describe()}
    else:
        name, params = (base, {}) if isinstance(base, str) else base
        density, desc = base_density(name, path, **params), {"name": name, **params}
    lo, hi = path.log_sigma_range
    if not isinstance(density, D.Piecewise):
        density = D.Truncated(density, lo, hi)
    return density, desc


# ----------------------------------------------------------------------------------------------
# adaptive samplers
# ----------------------------------------------------------------------------------------------


_DEFAULT_WARMUP_STEPS = 500  # when the run's length is unknown (METHOD.md §5.2)
#: the settings, besides m̂ and the data statistics, that determine π: a stored schedule is rebuilt
#: from them (:meth:`InfoNoiseTrainingTimestepSampler.from_scheduler`), the one list of them
SCHEDULE_SETTINGS = ("num_bins", "smoothing", "floor", "floor_space", "gate", "gate_fallback", "mmse_cap")
#: every hyperparameter an adaptive sampler takes (the settings above plus how statistics are collected)
_ADAPTIVE_KEYS = frozenset(SCHEDULE_SETTINGS) | {
    "warmup_steps", "num_training_steps", "refresh_every", "ema_decay", "min_count", "base",
}
_FLOOR_SPACES = ("phi", "pi")
_OBSERVE_SAMPLES = 4096  # x0 samples the data statistics (cap V, value grid) are measured on
_OBSERVE_VALUES = 1 << 16  # values of one batch the value grid is measured on


def default_warmup_steps(num_training_steps: int | None, refresh_every: int) -> int:
    """The warm-up sized to the run (METHOD.md §5.2, ours): a tenth of ``num_training_steps``, at
    least one refresh and at most 500 optimizer steps; 500 when the run's length is unknown."""
    if num_training_steps is None:
        return _DEFAULT_WARMUP_STEPS
    return int(min(_DEFAULT_WARMUP_STEPS, max(refresh_every, num_training_steps // 10)))


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class _AdaptiveSampler(TrainingTimestepSampler):
    """Shared machinery: a binned estimator, warm-up in optimizer steps, periodic refresh, floor,
    and the statistics of the data it sees (for the m̂ cap and the value-grid gate)."""

    def __init__(
        self,
        path: NoisePath,
        *,
        prediction_type: str,
        loss_weighting=None,
        snr_gamma=None,
        num_bins: int = 64,
        warmup_steps: int | str = "auto",
        num_training_steps: int | None = None,
        refresh_every: int = 50,
        ema_decay: float = 0.9,
        min_count: int = 8,
        smoothing: float = 1.0,
        floor: float = 0.05,
        floor_space: str = "phi",
        base=None,
        gate="auto",
        gate_fallback: float = 0.2,
        mmse_cap: float | str | None = None,
    ):
        super().__init__(path, prediction_type=prediction_type, loss_weighting=loss_weighting, snr_gamma=snr_gamma)
        for arg, value, ok, accepted in (
            ("num_bins", num_bins, _is_int(num_bins) and num_bins >= 4, "an int >= 4"),
            ("warmup_steps", warmup_steps, warmup_steps == "auto" or (_is_int(warmup_steps) and warmup_steps >= 0),
             "'auto' or an int >= 0"),
            ("num_training_steps", num_training_steps, num_training_steps is None
             or (_is_int(num_training_steps) and num_training_steps >= 1), "None or an int >= 1"),
            ("refresh_every", refresh_every, _is_int(refresh_every) and refresh_every >= 1, "an int >= 1"),
            ("floor", floor, isinstance(floor, (int, float)) and not isinstance(floor, bool) and 0.0 <= floor <= 1.0,
             "a float in [0, 1]"),
            ("floor_space", floor_space, floor_space in _FLOOR_SPACES, "'phi' (METHOD.md §5.7) or 'pi' (the former "
             "mixing, kept for comparison)"),
            ("mmse_cap", mmse_cap, mmse_cap is None or mmse_cap == "auto" or (
                isinstance(mmse_cap, (int, float)) and not isinstance(mmse_cap, bool) and math.isfinite(mmse_cap)
                and mmse_cap > 0), "None, 'auto' (the data's per-dimension variance) or a finite float > 0"),
        ):
            if not ok:
                raise ValueError(f"{arg}: must be {accepted}, got {value!r}")
        lo, hi = path.log_sigma_range
        edges = torch.linspace(lo, hi, num_bins + 1, dtype=torch.float64)
        self.estimator = ProfileEstimator(
            edges, ema_decay=ema_decay, min_count=min_count, smoothing=smoothing, gate=gate, gate_fallback=gate_fallback,
            mmse_cap=None if mmse_cap in (None, "auto") else float(mmse_cap),
        )
        self.refresh_every, self.floor, self.floor_space = refresh_every, float(floor), floor_space
        self.num_training_steps = num_training_steps
        self._warmup_setting = warmup_steps
        self.base, self.base_description = _resolve_base(path, base)
        self.base_masses = D.bin_masses(self.base, edges)
        self.base_masses = self.base_masses / self.base_masses.sum()
        self.hyperparameters = {
            "num_bins": num_bins,
            "warmup_steps": warmup_steps,
            "refresh_every": refresh_every,
            "ema_decay": ema_decay,
            "min_count": min_count,
            "smoothing": smoothing,
            "floor": floor,
            "floor_space": floor_space,
            "gate": gate,
            "gate_fallback": gate_fallback,
            "mmse_cap": mmse_cap if mmse_cap in (None, "auto") else float(mmse_cap),
        }
        self.warmup_steps = self._resolved_warmup()
        self.probs: torch.Tensor | None = None  # (K,) learned bin masses; None while on the base
        self.num_updates = 0
        self.last_refresh: dict = {}
        self._warned: set[str] = set()
        # statistics of the x0 seen by add_noise/observe_data, kept on its device (no per-step sync)
        self._obs: dict | None = None
        self._obs_frozen = False
        self.data_variance: float | None = None

    # -- run length and warm-up -------------------------------------------------------------
    def _resolved_warmup(self) -> int:
        if self._warmup_setting == "auto":
            return default_warmup_steps(self.num_training_steps, self.refresh_every)
        return int(self._warmup_setting)

    def set_num_training_steps(self, num_training_steps: int) -> None:
        """Tell the sampler how many optimizer steps the run has: an ``"auto"`` warm-up is sized to it
        (:func:`default_warmup_steps`), and a run shorter than its warm-up is warned about.

        Raises:
            ValueError: ``num_training_steps`` is not an int >= 1.
        """
        if not (_is_int(num_training_steps) and num_training_steps >= 1):
            raise ValueError(f"num_training_steps: must be an int >= 1, got {num_training_steps!r}")
        self.num_training_steps = num_training_steps
        if not self.is_adapted:
            self.warmup_steps = self._resolved_warmup()
        if self.warmup_steps >= num_training_steps and not self.is_adapted:
            self._warn_once("short", f"noise sampler: the run has {num_training_steps} optimizer steps and the "
                                     f"warm-up {self.warmup_steps}; pi never leaves the base density. Pass "
                                     "warmup_steps='auto' or a smaller warmup_steps")

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, UserWarning, stacklevel=3)

    @property
    def edges(self) -> torch.Tensor:
        """(K+1,) log-σ bin edges (VE σ)."""
        return self.estimator.edges

    # -- the data the sampler sees -----------------------------------------------------------
    def set_mmse_cap(self, value: float | str | None) -> None:
        """Set the cap on m̂ (METHOD.md §5.4): a value (the per-dimension x0 variance of the training
        data, in the units of the data given to :meth:`add_noise`), ``"auto"`` (measured from that
        data) or ``None`` (no cap); it applies from the next refresh.

        Raises:
            ValueError: ``value`` is not None, ``"auto"`` or a finite float > 0.
        """
        if not (value is None or value == "auto" or (isinstance(value, (int, float)) and not isinstance(value, bool)
                                                     and math.isfinite(value) and value > 0)):
            raise ValueError(f"mmse_cap: must be None, 'auto' or a finite float > 0 (per-dimension x0 variance), got {value!r}")
        if value == "auto":
            self.estimator.mmse_cap = self.data_variance
            self.hyperparameters["mmse_cap"] = "auto" if self.data_variance is None else self.data_variance
        else:
            self.estimator.mmse_cap = None if value is None else float(value)
            self.hyperparameters["mmse_cap"] = self.estimator.mmse_cap

    def observe_data(self, x0: torch.Tensor) -> None:
        """Record statistics of a (B, ...) batch of clean training data: its per-dimension variance
        (V of the ``"auto"`` m̂ cap, METHOD.md §5.4) and the smallest gap between its values (the
        ``"auto"`` gate, §5.5). :meth:`add_noise` calls it, so a loop that noises through the sampler
        needs nothing else; a loop that noises by itself calls this once per batch. The statistics
        stay on ``x0``'s device (no synchronisation) and are reduced over processes at refreshes,
        until about 4096 samples are seen.

        Raises:
            ValueError: ``x0`` is not a floating-point tensor with a batch dimension.
        """
        if self._obs_frozen:
            return
        if not torch.is_tensor(x0) or not x0.is_floating_point() or x0.ndim < 2:
            raise ValueError("x0: expected a floating-point tensor of shape (batch_size, ...)")
        x = x0.detach()
        dtype = torch.float32 if x.device.type == "mps" else torch.float64
        x = x.to(dtype)
        if self._obs is None:
            self._obs = {"n": 0, "shape": tuple(x.shape[1:]), "sum": torch.zeros(x.shape[1:], dtype=dtype, device=x.device),
                         "sq": torch.zeros(x.shape[1:], dtype=dtype, device=x.device),
                         "gap": torch.full((), math.inf, dtype=dtype, device=x.device)}
        obs = self._obs
        if obs["n"] >= _OBSERVE_SAMPLES:
            return
        if obs["sum"].device != x.device or obs["sum"].dtype != dtype:  # e.g. resumed on another device
            for key in ("sum", "sq", "gap"):
                obs[key] = obs[key].to(x.device, dtype)
        if tuple(x.shape[1:]) == obs["shape"]:  # another shape (aspect-ratio buckets): value grid only
            obs["sum"] += x.sum(0)
            obs["sq"] += (x * x).sum(0)
            obs["n"] += x.shape[0]
        v = x.flatten()
        if v.numel() < 2:
            return
        if v.numel() > _OBSERVE_VALUES:
            v = v[:: v.numel() // _OBSERVE_VALUES + 1]
        v = torch.sort(v).values
        d = v[1:] - v[:-1]
        # gaps below float rounding of the data's range count as equal values
        tol = 1e-5 * (v[-1] - v[0]).abs().clamp_min(1e-12)
        gap = torch.where(d > tol, d, torch.full_like(d, math.inf)).amin() if d.numel() else obs["gap"]
        obs["gap"] = torch.minimum(obs["gap"], gap.to(obs["gap"].device))

    def _resolve_data_statistics(self) -> None:
        """At a refresh: reduce the observed statistics over processes (every rank calls this at the
        same steps) and set V and the value grid; frozen once enough samples were seen or π adapted."""
        if self._obs_frozen:
            return
        dist = torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1
        obs = self._obs
        if obs is None and not dist:
            return
        if obs is None:  # this rank saw nothing (yet): take part in the reductions with empty statistics
            return self._freeze_if_done(n=0)
        n = torch.tensor([float(obs["n"])], dtype=obs["sum"].dtype, device=obs["sum"].device)
        packed = torch.cat([n, obs["sum"].flatten(), obs["sq"].flatten()])
        gap = obs["gap"].clone().reshape(1)
        if dist:
            device = torch.device("cuda", torch.cuda.current_device()) if torch.distributed.get_backend() == "nccl" else torch.device("cpu")
            packed, gap = packed.to(device), gap.to(device)
            torch.distributed.all_reduce(packed)
            torch.distributed.all_reduce(gap, op=torch.distributed.ReduceOp.MIN)
        packed, gap = packed.cpu().to(torch.float64), float(gap.cpu())
        total = float(packed[0])
        if total > 0:
            k = obs["sum"].numel()
            mean, sq = packed[1:1 + k] / total, packed[1 + k:] / total
            self.data_variance = float((sq - mean**2).clamp_min(0).mean())
            if self.hyperparameters["mmse_cap"] == "auto" and self.data_variance > 0:
                self.estimator.mmse_cap = self.data_variance
            if math.isfinite(gap):
                self.estimator.set_data_grid(gap)
        self._freeze_if_done(n=total)

    def _freeze_if_done(self, n: float) -> None:
        if n >= _OBSERVE_SAMPLES or self.is_adapted:
            self._obs_frozen = True
            self._obs = None
            if self.hyperparameters["mmse_cap"] == "auto" and self.data_variance is not None:
                self.hyperparameters["mmse_cap"] = self.data_variance

    def add_noise(self, x0, noise, levels):
        self.observe_data(x0)
        return super().add_noise(x0, noise, levels)

    @property
    def is_adapted(self) -> bool:
        """True once a learned density replaced the base one."""
        return self.probs is not None

    @property
    def density(self):
        if self.probs is None:
            return self.base
        return D.Piecewise(self.edges, self.probs)

    def _density_version(self):
        return self.num_updates

    def _statistic(self, levels: NoiseLevels, errors: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _build_probs(self) -> torch.Tensor:
        """(K,) bin masses of the new π, floor included, from the current estimate."""
        raise NotImplementedError

    def update(self, levels, per_sample_loss):
        errors = self._validated_errors(levels, per_sample_loss)
        if errors.numel():
            self.estimator.accumulate(torch.log(levels.sigmas.detach().cpu().to(torch.float64)), self._statistic(levels, errors))

    @property
    def num_nonfinite(self) -> int:
        """How many per-sample losses were NaN/inf and left out of the statistics (this process)."""
        return self.estimator.num_nonfinite

    def step(self):
        """Count one optimizer step; refresh the estimate and the density when due (METHOD.md §5.3-4).

        Statistics are folded in every ``refresh_every`` steps from step 0; the density leaves the
        base at ``warmup_steps`` and is rebuilt at every refresh after that (each refresh is
        described in :attr:`last_refresh` and logged). Under data parallelism every process must
        call this at the same steps: the refresh sums statistics across ranks.

        Warns (``UserWarning``, once) when the warm-up ended with no bin filled.
        """
        self.optimizer_step += 1
        due = self.optimizer_step % self.refresh_every == 0 or self.optimizer_step == self.warmup_steps
        if not due:
            return
        self._resolve_data_statistics()
        self.estimator.refresh()
        if self.optimizer_step < self.warmup_steps:
            return
        if not self.estimator.is_ready:
            self._warn_once("unfilled", f"noise sampler: step {self.optimizer_step}, warm-up over, but only "
                                        f"{self.estimator.num_filled} of {self.estimator.num_bins} bins have "
                                        f"{self.estimator.min_count} samples yet; pi stays on the base density "
                                        "until two do (lower min_count, or call update() every step)")
            return
        self.probs = self._build_probs()
        self.num_updates += 1
        self._resolve_data_statistics()  # freezes the data statistics once adapted
        self.last_refresh = self._describe_refresh()
        logger.info(f"noise sampler: step {self.optimizer_step}: pi refreshed; " + ", ".join(
            f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in self.last_refresh.items() if k != "step"))

    def _describe_refresh(self) -> dict:
        return {"step": self.optimizer_step, "filled_bins": self.estimator.num_filled}

    def pi_hash(self) -> str:
        """Short SHA-256 of the current bin masses: equal on every rank under data parallelism."""
        data = (self.probs if self.probs is not None else self.base_masses).numpy().tobytes()
        return hashlib.sha256(data).hexdigest()[:16]

    def state_dict(self):
        state = super().state_dict()
        state.update(
            {
                "estimator": self.estimator.state_dict(),
                "probs": None if self.probs is None else self.probs.clone(),
                "num_updates": self.num_updates,
                "edges": self.edges.clone(),
                "warmup_steps": self.warmup_steps,
                "data": {"variance": self.data_variance, "min_gap": self.estimator.data_min_gap,
                         "mmse_cap": self.estimator.mmse_cap, "mmse_cap_auto": self.hyperparameters["mmse_cap"] == "auto",
                         "frozen": self._obs_frozen},
            }
        )
        if self._obs is not None:  # data statistics still being collected: resume them exactly
            state["data"].update(observed=self._obs["n"], sum=self._obs["sum"].cpu().clone(),
                                 sq=self._obs["sq"].cpu().clone(), gap=self._obs["gap"].cpu().clone().reshape(1))
        return state

    def load_state_dict(self, state):
        """Restore :meth:`state_dict` output (exact resume).

        Raises:
            ValueError: a state of another sampler or grid, missing keys, or invalid π.
        """
        if not isinstance(state, dict):
            raise ValueError(f"state_dict: expected the dict returned by state_dict(), got {type(state).__name__}")
        missing = [k for k in ("name", "optimizer_step", "estimator", "probs", "num_updates", "edges") if k not in state]
        if missing:
            raise ValueError(f"state_dict: missing key(s) {missing}")
        if state["name"] != self.name:
            raise ValueError(f"state_dict: saved by a {state['name']!r} sampler, this is a {self.name!r} sampler")
        edges = torch.as_tensor(state["edges"], dtype=torch.float64)
        if edges.shape != self.edges.shape or not torch.allclose(edges, self.edges, rtol=0, atol=1e-12):
            raise ValueError("state_dict: its log-sigma grid differs from this sampler's (num_bins or path changed)")
        if state["probs"] is not None:
            p = torch.as_tensor(state["probs"], dtype=torch.float64)
            if p.shape != (self.edges.numel() - 1,) or not bool(torch.isfinite(p).all()) or bool((p < 0).any()):
                raise ValueError(f"state_dict['probs']: expected {self.edges.numel() - 1} finite non-negative bin masses")
        super().load_state_dict(state)
        self.estimator.load_state_dict(state["estimator"])
        self.probs = None if state["probs"] is None else torch.as_tensor(state["probs"], dtype=torch.float64).clone()
        self.num_updates = int(state["num_updates"])
        self._cell_cache = None  # π changed without a new num_updates: drop cached cell masses
        if "warmup_steps" in state:  # states written before the run-sized warm-up have none
            self.warmup_steps = int(state["warmup_steps"])
        data = state.get("data")
        if isinstance(data, dict):
            self.data_variance = data.get("variance")
            self.estimator.set_data_grid(data.get("min_gap"))
            self.estimator.mmse_cap = data.get("mmse_cap")
            self.hyperparameters["mmse_cap"] = "auto" if data.get("mmse_cap_auto") else self.estimator.mmse_cap
            self._obs_frozen = bool(data.get("frozen", False))
            self._obs = None
            if "observed" in data:
                s, sq = torch.as_tensor(data["sum"]), torch.as_tensor(data["sq"])
                self._obs = {"n": int(data["observed"]), "shape": tuple(s.shape), "sum": s.clone(), "sq": sq.clone(),
                             "gap": torch.as_tensor(data["gap"]).reshape(()).to(s.dtype).clone()}

    def describe(self):
        return {
            **super().describe(),
            "base": self.base_description,
            "hyperparameters": dict(self.hyperparameters),
            "adapted": self.is_adapted,
            "optimizer_steps": self.optimizer_step,
            "warmup_steps_resolved": self.warmup_steps,
            "last_refresh": dict(self.last_refresh),
        }


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
        ema_decay: β, weight on the old bin value (default 0.9).
        min_count: samples a bin needs to be updated at a refresh (default 8); a bin with fewer keeps
            them open into the next refresh (§5.4).
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

    def _build_probs(self) -> torch.Tensor:
        """π's bin masses from ρ̂ and the floor (METHOD.md §4, §5.6-7)."""
        rho, _ = self.estimator.profile()
        rho_mass = rho * self.estimator.widths
        rho_mass = rho_mass / rho_mass.sum()
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

    def allocation_total_variation(self) -> float:
        """``TV(φ, ρ̂) = ½·Σ_k |φ_k − ρ̂_k|`` on the bins, the check of METHOD.md §5: at most ``floor``
        (plus 0.02) for an adapted sampler whose estimate did not move since its last refresh.

        Raises:
            RuntimeError: before two bins hold an estimate.
        """
        rho, _ = self.estimator.profile()
        rho_mass = rho * self.estimator.widths
        return float(0.5 * (self.effective_allocation() - rho_mass / rho_mass.sum()).abs().sum())

    def _describe_refresh(self) -> dict:
        gate = self.estimator.last_gate
        return {
            "step": self.optimizer_step,
            "tv_phi_rho": self.allocation_total_variation(),
            "filled_bins": self.estimator.num_filled,
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
                :data:`SCHEDULE_SETTINGS` (and the base, ``refresh_every``, ``ema_decay``,
                ``min_count``) not given here is the stored one, so that ``from_scheduler(scheduler)``
                reproduces the stored π exactly; an explicit argument is the only way to change one.
            mu: dynamic-shift ``mu`` for flow schedulers with ``use_dynamic_shifting=True``.
            use_stored_schedule: when the scheduler's config carries a learned schedule
                (:meth:`save_to_scheduler`), start from it: its m̂ and π, no warm-up. When this
                sampler's loss, weighting, floor, base or gate differ from the stored ones, π is
                rebuilt from the stored m̂ for the new settings (m̂ is an x0-space error, independent of
                the weighting). ``False`` starts from the base density.

        Raises:
            TypeError: unsupported scheduler. ValueError: bad arguments, or a stored schedule for
            another path or grid (pass ``use_stored_schedule=False`` to ignore it).
        """
        from .serialization import read_schedule

        path = path_from_scheduler(noise_scheduler, mu=mu)
        stored = read_schedule(noise_scheduler) if use_stored_schedule else None
        if stored is not None:
            if loss_weighting is None and stored.get("loss_weighting") != "custom":
                loss_weighting = stored["loss_weighting"]
                snr_gamma = stored.get("snr_gamma") if snr_gamma is None else snr_gamma
            if prediction_type is None:
                prediction_type = stored["prediction_type"]
            kwargs = {**stored_settings(stored), **kwargs}
        if prediction_type is None:
            prediction_type = default_prediction_type(noise_scheduler)
        sampler = cls(path, prediction_type=prediction_type, loss_weighting=loss_weighting, snr_gamma=snr_gamma, **kwargs)
        if stored is not None:
            sampler.load_schedule(stored)
        return sampler

    def _schedule_settings(self) -> dict:
        """What, besides m̂ and the data statistics, determines π: compared with a stored payload's values."""
        hp = {k: self.hyperparameters.get(k) for k in SCHEDULE_SETTINGS if k != "num_bins"}
        return {
            "prediction_type": self.prediction_type,
            "loss_weighting": self.loss_weighting if isinstance(self.loss_weighting, str) else "custom",
            "snr_gamma": self.snr_gamma,
            "base": self.base_description,
            "hyperparameters": hp,
        }

    def load_schedule(self, payload: dict) -> None:
        """Start from a stored schedule payload (:mod:`~diffusers_infonoise.serialization`).

        Takes its m̂ and π and skips the warm-up. If the payload's loss parameterization, weighting,
        base, floor, gate or smoothing differ from this sampler's, π is rebuilt from the stored m̂
        with this sampler's settings (logged), so that π·w follows ρ̂ for the loss actually trained.

        Raises:
            ValueError: when the payload's path or grid differs from this sampler's.
        """
        if payload["path"] != self.path.config():
            raise ValueError(
                f"noise_scheduler: the stored schedule was learned on path {payload['path']}, this sampler's is "
                f"{self.path.config()}; pass use_stored_schedule=False to start from the base density"
            )
        edges = torch.tensor(payload["edges"], dtype=torch.float64)
        if edges.shape != self.edges.shape or not torch.allclose(edges, self.edges, rtol=0, atol=1e-9):
            raise ValueError(
                f"num_bins: the stored schedule has {edges.numel() - 1} bins, this sampler {self.edges.numel() - 1}; "
                "use the same num_bins or pass use_stored_schedule=False"
            )
        m_hat = torch.tensor([math.nan if v is None else v for v in payload["m_hat"]], dtype=torch.float64)
        self.estimator.m_hat = m_hat
        data = payload.get("data") or {}
        if data.get("min_gap") is not None and self.estimator.data_min_gap is None:
            self.estimator.set_data_grid(float(data["min_gap"]))
        if data.get("variance") is not None and self.data_variance is None:
            self.data_variance = float(data["variance"])
            if self.hyperparameters["mmse_cap"] == "auto":
                self.set_mmse_cap("auto")
        if payload.get("adapted") is False:
            # saved before its warm-up ended: its "pi" is the binned base, not a learned schedule.
            # Keep the statistics, the base density and the warm-up.
            return
        mine = self._schedule_settings()
        theirs = {
            "prediction_type": payload.get("prediction_type"),
            "loss_weighting": payload.get("loss_weighting"),
            "snr_gamma": payload.get("snr_gamma"),
            "base": payload.get("base"),
            "hyperparameters": {k: payload.get("hyperparameters", {}).get(k) for k in mine["hyperparameters"]},
        }
        if mine == theirs or not self.estimator.is_ready:
            self.probs = torch.tensor(payload["pi"], dtype=torch.float64)
        else:
            changed = sorted(k for k in mine if mine[k] != theirs[k])
            logger.info(f"stored schedule: {', '.join(changed)} differ from this sampler's; rebuilding pi from the stored m_hat")
            self.probs = self._build_probs()
        self.num_updates = max(self.num_updates, 1)
        self._cell_cache = None  # π changed without a new num_updates: drop cached cell masses
        self.warmup_steps = 0  # the stored π already is an adapted schedule
        self.hyperparameters["warmup_steps"] = 0

    def save_to_scheduler(self, noise_scheduler) -> None:
        """Write the learned schedule into ``noise_scheduler``'s config (see :mod:`.serialization`).

        Warns (``UserWarning``) when the schedule never adapted: the run ended before its warm-up, or
        no bin ever filled; what is stored is then the base density.
        """
        from .serialization import write_schedule

        if not self.is_adapted:
            why = (f"the run ended at optimizer step {self.optimizer_step}, before its warm-up of {self.warmup_steps} "
                   "steps" if self.optimizer_step < self.warmup_steps else
                   f"only {self.estimator.num_filled} bins ever held {self.estimator.min_count} samples")
            self._warn_once("unadapted", f"noise sampler: the schedule never adapted ({why}); the saved schedule is "
                                         "the base density. Pass num_training_steps (or warmup_steps) to size the "
                                         "warm-up to the run")
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
        return self.x0_loss_weight(levels.sigmas.detach().cpu().to(torch.float64)) * errors

    def _build_probs(self):
        # the VDM++ proposal p ∝ base·E[u·L], mixed with the base in π-space (its objective is kept
        # by the importance weights, so φ is not what this sampler targets)
        masses = self.estimator.filled_m_hat() * self.base_masses
        return (1 - self.floor) * masses / masses.sum() + self.floor * self.base_masses

    def _importance_weights(self, sigmas, levels):
        sig = sigmas.to(torch.float64)
        if isinstance(self.path, VPPath):
            base_p = D.bin_masses(self.base, self.path.cell_edges())
            base_p = base_p / base_p.sum()
            ratio = base_p / self.timestep_probabilities().clamp_min(1e-300)
            w = ratio[levels.timesteps.cpu()]
        else:
            x = torch.log(sig)
            w = torch.exp(self.base.log_prob(x) - self.density.log_prob(x))
        return w.to(torch.float32).to(levels.sigmas.device)


# ----------------------------------------------------------------------------------------------
# factory
# ----------------------------------------------------------------------------------------------

SAMPLER_NAMES = ("infonoise", "uniform", "edm_lognormal", "logit_normal", "mode", "log_uniform", "cosine", "kingma_gao")


def stored_settings(payload: dict) -> dict:
    """The keyword arguments that rebuild the sampler of a stored schedule payload: every
    :data:`SCHEDULE_SETTINGS` entry, the statistics settings and the base density it records."""
    hp = payload.get("hyperparameters") or {}
    out = {k: hp[k] for k in (*SCHEDULE_SETTINGS, "refresh_every", "ema_decay", "min_count") if k in hp}
    out["num_bins"] = len(payload["pi"])
    base = payload.get("base")
    if isinstance(base, dict) and isinstance(base.get("name"), str):
        params = {k: v for k, v in base.items() if k != "name"}
        out["base"] = (base["name"], params) if params else base["name"]
    return out



def make_sampler(name: str, noise_scheduler, **kwargs) -> TrainingTimestepSampler:
    """Any training-noise sampler by name, behind one interface.

    Args:
        name: one of :data:`SAMPLER_NAMES`.
        noise_scheduler: a supported diffusers scheduler (see :func:`path_from_scheduler`).
        **kwargs: ``prediction_type``, ``loss_weighting``, ``snr_gamma``, ``mu`` for every sampler;
            the density parameters of :func:`base_density` for fixed samplers (``P_mean``, ``P_std``;
            ``mean``, ``std``; ``scale``; ``sigma_data``); the hyperparameters of
            :class:`InfoNoiseTrainingTimestepSampler` for ``infonoise`` and ``kingma_gao``.

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
    if name == "kingma_gao":
        unknown = set(kwargs) - _ADAPTIVE_KEYS
        if unknown:
            raise ValueError(f"kingma_gao: unknown parameter(s) {sorted(unknown)}; accepted: {sorted(_ADAPTIVE_KEYS)}")
        return KingmaGaoSampler(path, **common, **kwargs)
    return FixedDensitySampler(path, base_density(name, path, **kwargs), name=name, **common)
