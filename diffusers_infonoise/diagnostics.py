"""Offline diagnostics: where a training-noise schedule spends compute (METHOD.md §2-§6).

The paper's diagnostic compares two densities on one axis, ``log σ`` (VE σ; METHOD.md §1):

* the **entropy-rate profile** ``ρ̂(log σ) ∝ gate(σ)·mmse(σ)/σ²`` (§2, §5.5), measured on a frozen
  model (:func:`profile_from_model`), on a finite data set through its optimal empirical denoiser
  (:func:`profile_from_dataset`), or known in closed form (:func:`analytic_mmse_gaussian`,
  :func:`analytic_mmse_two_point`);
* the **effective allocation** ``φ = π·w`` of a schedule (§4): how much weighted training signal each
  noise level gets (:func:`allocation`). InfoNoise sets ``π ∝ ρ̂/w`` so that ``φ ∝ ρ̂``.

Mass of φ outside ρ̂'s window is wasted compute (§6); :func:`window_mass`, :func:`total_variation`
and :func:`wasted_mass` turn that into numbers. :func:`plot_schedule`, :func:`plot_level_histogram`
and :func:`plot_profile` draw it (matplotlib's Agg canvas through :class:`matplotlib.figure.Figure`,
never a display; callers save the returned figures, or pass ``path=``).

Conventions: every ``log_sigma`` / ``sigmas`` here is the VE noise level (natural log), float64,
increasing. Densities are **per unit log σ** and normalised on the grid they are given on: each
grid point is the centre of a cell whose edges are the midpoints to its neighbours
(:func:`grid_edges`); on a uniform grid of K points these are exactly the K bins of
:class:`~diffusers_infonoise.estimator.ProfileEstimator`. ``mmse`` values are per element (the mean
over the elements of one sample): a constant factor cancels in every normalised quantity (§3).

matplotlib and tqdm are optional dependencies (extras ``train`` / ``benchmarks``): they are imported
only by the functions that need them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from . import densities as D
from .estimator import GateResult, ProfileEstimator, apply_gate
from .generation import EDM_TIMESTEP_SCALE, call_model, model_output
from .paths import FlowPath, NoisePath, VEPath, VPPath, path_from_scheduler, scheduler_kind
from .samplers import (
    SAMPLER_NAMES,
    InfoNoiseTrainingTimestepSampler,
    KingmaGaoSampler,
    NoiseLevels,
    TrainingTimestepSampler,
    _check_path_prediction,
    default_prediction_type,
    make_sampler,
)
from .serialization import read_schedule
from .weighting import validate_loss_weighting, validate_prediction_type, x0_loss_weight

__all__ = [
    "Profile",
    "Allocation",
    "log_sigma_grid",
    "grid_edges",
    "default_objective",
    "load_learned_sampler",
    "make_denoise_fn",
    "profile_from_errors",
    "profile_from_model",
    "profile_from_dataset",
    "allocation",
    "normalize_density",
    "profile_window",
    "window_mass",
    "wasted_mass",
    "total_variation",
    "compare_allocations",
    "analytic_mmse_gaussian",
    "analytic_mmse_two_point",
    "plot_schedule",
    "plot_level_histogram",
    "plot_profile",
    "plot_allocations",
    "call_model",
]

_F64 = torch.float64

#: Paper's Figure 1 / EDM training range (VE σ), the default grid of data-set profiles.
DEFAULT_SIGMA_RANGE = (0.002, 80.0)


# ================================================================================================
# grids and normalisation
# ================================================================================================


def _as_grid(log_sigma) -> torch.Tensor:
    x = torch.as_tensor(log_sigma, dtype=_F64).detach().cpu().flatten()
    if x.numel() < 2:
        raise ValueError(f"log_sigma: need at least 2 grid points, got {x.numel()}")
    if not bool(torch.isfinite(x).all()) or not bool((x[1:] > x[:-1]).all()):
        raise ValueError("log_sigma: must be finite and strictly increasing (VE log sigma)")
    return x


def grid_edges(log_sigma) -> torch.Tensor:
    """(K+1,) float64 cell edges of a (K,) increasing log-σ grid: midpoints between neighbours,
    the two ends extended by half the adjacent gap. On a uniform grid of bin centres this returns
    the bins' edges exactly.

    Raises:
        ValueError: fewer than two points, or a grid that is not finite and strictly increasing.
    """
    x = _as_grid(log_sigma)
    mid = 0.5 * (x[1:] + x[:-1])
    first = x[0] - (mid[0] - x[0])
    last = x[-1] + (x[-1] - mid[-1])
    return torch.cat([first.reshape(1), mid, last.reshape(1)])


def _widths(log_sigma) -> torch.Tensor:
    e = grid_edges(log_sigma)
    return e[1:] - e[:-1]


def log_sigma_grid(source=None, num_levels: int = 64, *, sigma_min: float | None = None, sigma_max: float | None = None) -> torch.Tensor:
    """(num_levels,) float64 log σ (VE σ): centres of ``num_levels`` equal bins in log σ.

    Args:
        source: a diffusers scheduler, a :class:`~diffusers_infonoise.paths.NoisePath`, a sampler
            (its path), or ``None`` (then ``sigma_min``/``sigma_max`` or the EDM range 0.002..80).
            For a path the range is its ``log_sigma_range`` (METHOD.md §5.1), so with
            ``num_levels = num_bins`` the grid is exactly the InfoNoise estimator's bin centres.
        num_levels: K >= 2.
        sigma_min, sigma_max: override the range (VE σ, 0 < sigma_min < sigma_max).

    Raises:
        ValueError: bad ``num_levels`` or range. TypeError: unsupported scheduler.
    """
    if isinstance(num_levels, bool) or not isinstance(num_levels, int) or num_levels < 2:
        raise ValueError(f"num_levels: must be an int >= 2, got {num_levels!r}")
    if source is None:
        lo, hi = math.log(DEFAULT_SIGMA_RANGE[0]), math.log(DEFAULT_SIGMA_RANGE[1])
    else:
        path = _path_of(source)
        lo, hi = path.log_sigma_range
    if sigma_min is not None:
        lo = math.log(sigma_min) if sigma_min > 0 else math.nan
    if sigma_max is not None:
        hi = math.log(sigma_max) if sigma_max > 0 else math.nan
    if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
        raise ValueError(f"sigma_min, sigma_max: need 0 < sigma_min < sigma_max, got range exp({lo}), exp({hi})")
    edges = torch.linspace(lo, hi, num_levels + 1, dtype=_F64)
    return 0.5 * (edges[1:] + edges[:-1])


def _path_of(source) -> NoisePath:
    if isinstance(source, NoisePath):
        return source
    if isinstance(source, TrainingTimestepSampler):
        return source.path
    return path_from_scheduler(source)


def normalize_density(p, log_sigma) -> torch.Tensor:
    """``p / Σ_k p_k·width_k``: a non-negative (K,) function on the grid made a density per unit
    log σ (float64). Raises ``ValueError`` for negative, non-finite or all-zero values."""
    p = torch.as_tensor(p, dtype=_F64).detach().cpu().flatten()
    w = _widths(log_sigma)
    if p.shape != w.shape:
        raise ValueError(f"p: shape {tuple(p.shape)} does not match the grid's ({w.numel()},)")
    if not bool(torch.isfinite(p).all()) or bool((p < 0).any()):
        raise ValueError("p: must be finite and non-negative on the grid")
    z = float((p * w).sum())
    if not z > 0:
        raise ValueError("p: has no mass on the grid")
    return p / z


# ================================================================================================
# results
# ================================================================================================


def _jsonable(v):
    if isinstance(v, torch.Tensor):
        return [None if not math.isfinite(x) else float(x) for x in v.detach().cpu().to(_F64).flatten().tolist()]
    if isinstance(v, GateResult):
        return {"pivot": v.pivot, "source": v.source, "reason": v.reason, "auto_pivot": v.auto_pivot}
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


@dataclass
class Profile:
    """An entropy-rate profile on a log-σ grid (METHOD.md §2-§3, §5.5-§5.6, §6).

    All tensors are (K,) float64 on the CPU, indexed by the grid point.

    Attributes:
        log_sigma: evaluated VE log σ, increasing. On a VP path these are the exact table values of
            the integer steps evaluated (the nearest step to each requested σ, duplicates removed).
        mmse: the unweighted x0-space error per element, ``e(σ)`` (a model) or the Bayes/empirical
            MMSE (a data set).
        mmse_se: its Monte-Carlo standard error (same units), or ``None``.
        q: ``mmse/σ²``, the ungated entropy rate per unit log σ (I-MMSE, §2), not normalised.
        rho_hat: the gated profile ``r = q·σ³/(σ³ + c³)`` normalised per unit log σ on the grid (§5.5-6).
        gate: the :class:`~diffusers_infonoise.estimator.GateResult` used (pivot c, VE σ, and why).
        w: the x0-space loss weight ``w(σ)`` (§4) of ``loss_weighting``/``prediction_type``.
        pi: the InfoNoise density ``π ∝ ρ̂/w`` per unit log σ, normalised on the grid (no floor).
        timesteps: the native model levels evaluated (VP int t, EDM ``c_noise``, flow ``s·N``), or ``None``.
        num_samples: (x0, ε) pairs averaged per grid point.
        meta: plain-JSON description (source, path, prediction type, weighting, ...).
    """

    log_sigma: torch.Tensor
    mmse: torch.Tensor
    mmse_se: torch.Tensor | None
    q: torch.Tensor
    rho_hat: torch.Tensor
    gate: GateResult
    w: torch.Tensor
    pi: torch.Tensor
    timesteps: torch.Tensor | None = None
    num_samples: int = 0
    meta: dict = field(default_factory=dict)

    @property
    def sigmas(self) -> torch.Tensor:
        """(K,) VE σ of the grid."""
        return torch.exp(self.log_sigma)

    @property
    def edges(self) -> torch.Tensor:
        """(K+1,) log-σ cell edges used for every normalisation (:func:`grid_edges`)."""
        return grid_edges(self.log_sigma)

    @property
    def widths(self) -> torch.Tensor:
        return _widths(self.log_sigma)

    def to_dict(self) -> dict:
        """A plain-JSON dict (NaN/inf → null)."""
        return _jsonable(
            {
                "log_sigma": self.log_sigma,
                "sigma": self.sigmas,
                "mmse": self.mmse,
                "mmse_se": self.mmse_se,
                "q": self.q,
                "rho_hat": self.rho_hat,
                "gate": self.gate,
                "w": self.w,
                "pi": self.pi,
                "timesteps": self.timesteps,
                "num_samples": int(self.num_samples),
                "meta": self.meta,
            }
        )


@dataclass
class Allocation:
    """The effective allocation of a schedule on a log-σ grid (METHOD.md §4).

    Attributes (all (K,) float64 on the CPU):
        name: the sampler's name (``"infonoise"``, ``"edm_lognormal"``, ...).
        log_sigma: the grid (VE log σ).
        pi: the training density per unit log σ: the average of π over each grid cell, normalised
            on the grid (mass outside the grid is dropped).
        w: the x0-space loss weight at the grid points.
        phi: ``π·w`` normalised per unit log σ on the grid. For a Kingma-Gao sampler, whose draws
            carry importance weights ``base/π``, the effective allocation is ``base·w``.
        meta: plain-JSON description (prediction type, weighting, the sampler's ``describe()``).
    """

    name: str
    log_sigma: torch.Tensor
    pi: torch.Tensor
    w: torch.Tensor
    phi: torch.Tensor
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _jsonable({"name": self.name, "log_sigma": self.log_sigma, "pi": self.pi, "w": self.w, "phi": self.phi, "meta": self.meta})


# ================================================================================================
# profiles
# ================================================================================================


def default_objective(noise_scheduler) -> tuple[str, Any, float | None]:
    """``(prediction_type, loss_weighting, snr_gamma)`` assumed for ``noise_scheduler``'s training loss.

    The stored schedule's values when the scheduler's config carries one (unless its weighting was
    a custom callable), else :func:`~diffusers_infonoise.samplers.default_prediction_type` with
    ``"edm"`` weighting on a VE (EDM) path and ``"none"`` on VP and flow paths: the conventions of
    diffusers' EDM, DDPM and flow-matching training.

    Raises:
        TypeError: unsupported scheduler. ScheduleError: a corrupted stored schedule.
    """
    stored = read_schedule(noise_scheduler)
    if stored is not None and stored["loss_weighting"] != "custom":
        return stored["prediction_type"], stored["loss_weighting"], stored.get("snr_gamma")
    kind = scheduler_kind(noise_scheduler)
    return default_prediction_type(noise_scheduler), ("edm" if kind == "ve" else "none"), None


def load_learned_sampler(noise_scheduler, **overrides) -> InfoNoiseTrainingTimestepSampler:
    """The :class:`InfoNoiseTrainingTimestepSampler` stored in ``noise_scheduler``'s config.

    Built with the stored prediction type, loss weighting, ``snr_gamma``, hyperparameters, base
    density and (flow) shift, then loaded with the stored π and m̂ (so its ``density`` is the learned
    π). ``overrides`` replace any of those keyword arguments.

    Raises:
        ValueError: the config carries no learned schedule (message says so), or a stored custom
            loss weighting with no ``loss_weighting`` override.
        ScheduleError: a corrupted or unknown-version payload.
    """
    payload = read_schedule(noise_scheduler)
    if payload is None:
        raise ValueError(
            "noise_scheduler: its config carries no learned InfoNoise schedule (no '_infonoise_schedule' entry); "
            "it was not saved by a run with an InfoNoise sampler"
        )
    if payload["loss_weighting"] == "custom" and "loss_weighting" not in overrides:
        raise ValueError("loss_weighting: the stored schedule used a custom callable weighting; pass loss_weighting=")
    # the one reader of stored schedules: every setting not overridden is the stored one
    mu = _stored_mu(noise_scheduler, overrides.pop("mu", None))
    return InfoNoiseTrainingTimestepSampler.from_scheduler(noise_scheduler, mu=mu, **overrides)


def _stored_mu(noise_scheduler, mu):
    """``mu`` for a dynamically shifted flow scheduler: the given one, else the stored schedule's shift."""
    if mu is not None or not getattr(noise_scheduler.config, "use_dynamic_shifting", False):
        return mu
    stored = read_schedule(noise_scheduler)
    if stored is not None and (stored.get("path") or {}).get("kind") == "flow":
        return math.log(float(stored["path"].get("shift", 1.0)))
    return None




def profile_from_errors(
    sigmas,
    mmse,
    mmse_se=None,
    *,
    gate: str | float | None = "auto",
    gate_fallback: float = 0.2,
    smoothing: float = 0.0,
    loss_weighting="none",
    prediction_type: str = "sample",
    snr_gamma: float | None = None,
    sigma_data: float = 0.5,
    timesteps=None,
    num_samples: int = 0,
    meta: dict | None = None,
) -> Profile:
    """Form ρ̂ and π from x0-space errors measured on a grid (METHOD.md §5.4-§5.6, §4).

    Uses the estimator's own machinery (no re-implementation): unfilled (non-finite) points are
    interpolated and log m̂ optionally smoothed by
    :meth:`~diffusers_infonoise.estimator.ProfileEstimator.filled_m_hat`, the pivot is decided by
    :meth:`~diffusers_infonoise.estimator.ProfileEstimator.resolve_gate` (pinned, automatic with its
    two misfire fallbacks, or off) and applied by :func:`~diffusers_infonoise.estimator.apply_gate`.

    Args:
        sigmas: (K,) VE σ, strictly increasing, finite, > 0.
        mmse: (K,) x0-space errors ``e(σ)`` (>= 0; NaN where unknown, at least two finite).
        mmse_se: optional (K,) standard errors, stored as is.
        gate, gate_fallback: as for :class:`~diffusers_infonoise.estimator.ProfileEstimator` (§5.5).
        smoothing: Gaussian kernel width in grid points on log m̂ (0 = none, the default offline).
        loss_weighting, prediction_type, snr_gamma, sigma_data: the training loss whose ``w(σ)``
            (§4) defines ``π ∝ ρ̂/w``. The default (``"none"`` on ``"sample"``) gives ``π = ρ̂``.
        timesteps, num_samples, meta: stored in the result.

    Raises:
        ValueError: shapes differ, a bad grid, negative errors, fewer than two finite errors, or a
            weight that is not finite and > 0 on the grid.
    """
    sig = torch.as_tensor(sigmas, dtype=_F64).detach().cpu().flatten()
    if not bool((sig > 0).all()):
        raise ValueError("sigmas: must be > 0 (VE sigma)")
    x = torch.log(sig)
    edges = grid_edges(x)
    m = torch.as_tensor(mmse, dtype=_F64).detach().cpu().flatten()
    if m.shape != sig.shape:
        raise ValueError(f"mmse: shape {tuple(m.shape)} does not match sigmas' {tuple(sig.shape)}")
    finite = torch.isfinite(m)
    if bool((m[finite] < 0).any()):
        raise ValueError("mmse: squared errors must be >= 0")
    if int(finite.sum()) < 2:
        raise ValueError("mmse: need at least two finite values to form a profile")
    est = ProfileEstimator(edges, smoothing=smoothing, gate=gate, gate_fallback=gate_fallback, min_count=1)
    est.m_hat = torch.where(finite, m, torch.full_like(m, math.nan))
    m_filled = est.filled_m_hat()
    q = m_filled / sig**2
    gate_result = est.resolve_gate(sig, m_filled)
    r = apply_gate(sig, q, gate_result.pivot)
    rho = normalize_density(r, x)
    validate_loss_weighting(loss_weighting, snr_gamma)
    validate_prediction_type(prediction_type)
    w = x0_loss_weight(loss_weighting, prediction_type, sig, snr_gamma=snr_gamma, sigma_data=sigma_data)
    if not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
        raise ValueError("loss_weighting: the x0-space weight w(sigma) must be finite and > 0 on the grid")
    pi = normalize_density(rho / w, x)
    se = None if mmse_se is None else torch.as_tensor(mmse_se, dtype=_F64).detach().cpu().flatten()
    meta = dict(meta or {})
    meta.setdefault("prediction_type", prediction_type)
    meta.setdefault("loss_weighting", loss_weighting if isinstance(loss_weighting, str) else "custom")
    meta.setdefault("snr_gamma", snr_gamma)
    meta.setdefault("smoothing", smoothing)
    return Profile(
        log_sigma=x,
        mmse=m,
        mmse_se=se,
        q=q,
        rho_hat=rho,
        gate=gate_result,
        w=w,
        pi=pi,
        timesteps=None if timesteps is None else torch.as_tensor(timesteps).detach().cpu(),
        num_samples=int(num_samples),
        meta=meta,
    )


# ------------------------------------------------------------------------------------------------
# model calls
# ------------------------------------------------------------------------------------------------


def _per_sample(coeff: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return coeff.to(device=like.device, dtype=like.dtype).reshape(-1, *([1] * (like.ndim - 1)))


def make_denoise_fn(
    noise_scheduler,
    prediction_type: str | None = None,
    *,
    model_input_fn: Callable | None = None,
    edm_timestep_scale: float = EDM_TIMESTEP_SCALE,
    mu: float | None = None,
) -> Callable:
    """The default ``denoise_fn(model, x_noisy, levels, model_kwargs) -> x0_hat`` of a scheduler's path.

    ``x_noisy`` is a (B, ...) batch on the path (``a·x0 + b·ε``; METHOD.md §1), ``levels`` a
    :class:`~diffusers_infonoise.samplers.NoiseLevels` of B levels on the same device (``timesteps``:
    VP int64 t, VE float32 ``c_noise = 0.25·ln σ``, flow float32 ``s·N``; ``sigmas``: float32 VE σ),
    ``model_kwargs`` per-batch keyword arguments (``encoder_hidden_states`` ...). The result is the
    model's estimate of x0 (float32, x_noisy's shape).

    What the model is fed (``model_input_fn(x_noisy, levels) -> (sample, timestep)`` overrides it):

    * VP: ``(x_t, t)``; the output is read as ``prediction_type`` (default the scheduler's):
      ``epsilon`` → ``(x − b·ε̂)/a``, ``v_prediction`` → ``a·x − b·v̂``, ``sample`` → x̂0.
    * flow: ``(x_s, s·N)``; ``flow`` (velocity ``v = ε − x0``, default) → ``x − s·v̂``;
      ``sample`` (SD3 ``precondition_outputs``) → x̂0.
    * VE/EDM: ``(c_in·x, edm_timestep_scale·c_noise)`` with the scheduler's ``precondition_inputs``;
      the output F becomes ``D = c_skip·x + c_out·F`` by the scheduler's ``precondition_outputs``
      (the EDM scheduler's ``prediction_type`` only sets the sign of c_out; METHOD.md §3 trap).
      ``edm_timestep_scale`` is the factor a training script puts on ``c_noise`` before the UNet
      (METHOD.md §7); it must match the one used in training (default
      :data:`~diffusers_infonoise.generation.EDM_TIMESTEP_SCALE`, the training scripts' value).

    Raises:
        TypeError: unsupported scheduler. ValueError: a ``prediction_type`` the path cannot read.
    """
    path = path_from_scheduler(noise_scheduler, mu=mu)
    if prediction_type is None:
        prediction_type = default_prediction_type(noise_scheduler)
    validate_prediction_type(prediction_type)
    if not (isinstance(edm_timestep_scale, (int, float)) and math.isfinite(edm_timestep_scale) and edm_timestep_scale > 0):
        raise ValueError(f"edm_timestep_scale: must be a finite float > 0, got {edm_timestep_scale!r}")

    if isinstance(path, VPPath):
        if prediction_type not in ("epsilon", "v_prediction", "sample"):
            raise ValueError(f"prediction_type: a VP model outputs epsilon, v_prediction or sample, got {prediction_type!r}")
        alphas_cumprod = path.alphas_cumprod.to(_F64)

        def to_x0(x, out, levels):
            ac = alphas_cumprod[levels.timesteps.detach().cpu().long()]
            a, b = _per_sample(ac.sqrt(), x), _per_sample((1 - ac).sqrt(), x)
            if prediction_type == "epsilon":
                return (x - b * out) / a
            if prediction_type == "v_prediction":
                return a * x - b * out
            return out

    elif isinstance(path, FlowPath):
        if prediction_type not in ("flow", "sample"):
            raise ValueError(f"prediction_type: a flow model outputs flow (velocity) or sample, got {prediction_type!r}")

        def to_x0(x, out, levels):
            if prediction_type == "sample":
                return out
            s = FlowPath.sigma_to_s(levels.sigmas.detach().cpu())
            return x - _per_sample(s, x) * out

    else:
        if prediction_type not in ("sample", "edm_f", "epsilon"):
            raise ValueError(f"prediction_type: not a loss parameterization of an EDM model: {prediction_type!r}")

        def to_x0(x, out, levels):
            if model_input_fn is None:  # model_output already returned D
                return out
            sig = _per_sample(levels.sigmas.detach().to(_F64), x)
            return noise_scheduler.precondition_outputs(x, out, sig)

    def denoise_fn(model, x_noisy, levels, model_kwargs=None):
        if model_input_fn is None:  # the one model call (generation.model_output)
            out = model_output(model, noise_scheduler, x_noisy, levels.timesteps, levels.sigmas, model_kwargs=model_kwargs,
                               edm_timestep_scale=edm_timestep_scale)
        else:
            sample, timestep = model_input_fn(x_noisy, levels)
            out = call_model(model, sample, timestep, model_kwargs)
        if out.shape != x_noisy.shape:
            raise ValueError(
                f"model: its output has shape {tuple(out.shape)}, the noisy input {tuple(x_noisy.shape)}; "
                "the model does not fit this data (channels or resolution)"
            )
        return to_x0(x_noisy.float(), out, levels).float()

    denoise_fn.path = path  # type: ignore[attr-defined]
    denoise_fn.prediction_type = prediction_type  # type: ignore[attr-defined]
    return denoise_fn


def _levels_on_path(path: NoisePath, sigmas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact VE σ (float64) and native timesteps of a requested σ grid on ``path``."""
    if isinstance(path, VPPath):
        table = path.sigmas_table
        finite_t = torch.nonzero(torch.isfinite(table)).flatten()
        t = path.sigma_to_timesteps(sigmas).clamp(int(finite_t.min()), int(finite_t.max()))
        t = torch.unique(t)  # sorted; σ_t increases with t
        return table[t].clone(), t.to(torch.int64)
    return sigmas.clone(), path.sigma_to_timesteps(sigmas).to(torch.float32)


def _progress(total: int, enabled: bool, desc: str):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # optional dependency
        return None
    return tqdm(total=total, desc=desc, leave=False)


def _grid_sigmas(sigmas, num_levels, source) -> torch.Tensor:
    if sigmas is not None:
        sig = torch.as_tensor(sigmas, dtype=_F64).detach().cpu().flatten()
        if sig.numel() < 2 or not bool(torch.isfinite(sig).all()) or not bool((sig > 0).all()):
            raise ValueError("sigmas: need at least 2 finite VE sigmas > 0")
        sig = torch.unique(sig)  # sorted, no duplicates
        if sig.numel() < 2:
            raise ValueError("sigmas: need at least 2 distinct values")
        return sig
    return torch.exp(log_sigma_grid(source, num_levels))


@torch.no_grad()
def profile_from_model(
    model,
    noise_scheduler,
    x0: torch.Tensor,
    *,
    sigmas=None,
    num_levels: int = 32,
    prediction_type: str | None = None,
    loss_weighting=None,
    snr_gamma: float | None = None,
    model_kwargs: dict | None = None,
    batch_size: int = 64,
    num_noise_draws: int = 1,
    generator: torch.Generator | None = None,
    device=None,
    progress: bool = True,
    model_input_fn: Callable | None = None,
    denoise_fn: Callable | None = None,
    edm_timestep_scale: float = EDM_TIMESTEP_SCALE,
    mu: float | None = None,
    gate: str | float | None = "auto",
    gate_fallback: float = 0.2,
    smoothing: float = 0.0,
) -> Profile:
    """The entropy-rate profile of a frozen model on a probe batch (METHOD.md §3, §6).

    For every grid level σ and every probe sample (times ``num_noise_draws`` noise draws) it forms
    ``x = a·x0 + b·ε`` on the scheduler's path, asks the model for x̂0 and records the unweighted
    x0-space error ``e = mean over elements of (x̂0 − x0)²`` (§3: every parameterization is read back
    to x0, so no conversion factor enters). ``e(σ)`` is the mean over probe samples and draws, its
    standard error that of the per-sample averages over the probe set (the draws of one sample are
    not independent of each other). Then :func:`profile_from_errors` forms ``ρ̂`` (gated as the
    online estimator gates, §5.5) and ``π ∝ ρ̂/w``. Runs under ``torch.no_grad``; the model is not
    put in eval mode by this function (call ``model.eval()`` first).

    Args:
        model: a diffusers denoiser (``UNet2DModel``, ``UNet1DModel``, ``UNet2DConditionModel``,
            ``SD3Transformer2DModel``) or any callable ``model(sample, timestep=..., **model_kwargs)``.
        noise_scheduler: its scheduler (defines the path: VP, VE/EDM or flow; METHOD.md §1).
        x0: (N, ...) clean probe data (latents for latent models), any float dtype; N >= 1.
        sigmas: (K,) VE σ to evaluate, or ``None`` for ``num_levels`` centres of equal log-σ bins over
            the path's range (:func:`log_sigma_grid`). On a VP path each σ is moved to the nearest
            integer step (the exact table σ is reported; duplicates removed; a zero-terminal-SNR last
            step, σ = inf, is never evaluated).
        prediction_type: the training loss's parameterization (default :func:`default_objective`).
            On VP and flow it is also how the model's output is read (see :func:`make_denoise_fn`).
        loss_weighting, snr_gamma: the training loss weighting, for ``w(σ)`` and π (METHOD.md §4).
            ``None``: :func:`default_objective` (the stored schedule's, else ``"edm"`` on EDM,
            ``"none"`` on VP and flow).
        model_kwargs: extra keyword arguments of the model (``encoder_hidden_states``,
            ``pooled_projections``, ``class_labels`` ...). Tensors whose first dimension is N are
            taken per probe sample (row i goes with ``x0[i]``) and moved to ``device``; anything
            else is passed unchanged.
        batch_size: model batch size (levels, draws and samples are mixed within a batch).
        num_noise_draws: noise draws per probe sample and level.
        generator: ``torch.Generator`` for the noise (drawn on its device; default CPU, unseeded).
        device: where the model runs (default: the model's device, else CPU).
        progress: show a tqdm progress bar (if tqdm is installed).
        model_input_fn: ``(x_noisy, levels) -> (sample, timestep)`` replacing what the model is fed,
            keeping the default output reading (e.g. a script's own ``c_noise`` scaling).
        denoise_fn: ``(model, x_noisy, levels, model_kwargs) -> x0_hat`` replacing the whole model
            call (see :func:`make_denoise_fn` for the arguments). Exclusive with ``model_input_fn``.
        edm_timestep_scale: factor on EDM's ``c_noise`` before the model (METHOD.md §7); default
            :data:`~diffusers_infonoise.generation.EDM_TIMESTEP_SCALE`, what the training scripts use.
        mu: dynamic-shift ``mu`` of a flow scheduler with ``use_dynamic_shifting=True`` (default: the
            stored schedule's shift when the config carries one).
        gate, gate_fallback, smoothing: see :func:`profile_from_errors`.

    Returns:
        :class:`Profile` (``timesteps`` holds the native levels evaluated; ``meta`` the settings).

    Raises:
        ValueError: bad arguments (each names the argument), a model output whose shape differs from
            its input (a model/data mismatch), or non-finite model outputs everywhere.
        TypeError: unsupported scheduler.
    """
    if denoise_fn is not None and model_input_fn is not None:
        raise ValueError("denoise_fn, model_input_fn: pass at most one (denoise_fn replaces the whole model call)")
    for arg, value in (("batch_size", batch_size), ("num_noise_draws", num_noise_draws)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{arg}: must be an int >= 1, got {value!r}")
    if not torch.is_tensor(x0) or not x0.is_floating_point() or x0.ndim < 1 or x0.shape[0] < 1:
        raise ValueError("x0: expected a floating-point tensor of shape (N, ...) with N >= 1")
    mu = _stored_mu(noise_scheduler, mu)
    path = path_from_scheduler(noise_scheduler, mu=mu)
    d_pred, d_weight, d_gamma = default_objective(noise_scheduler)
    if prediction_type is None:
        prediction_type = d_pred
    if loss_weighting is None:
        loss_weighting, snr_gamma = d_weight, (d_gamma if snr_gamma is None else snr_gamma)
    validate_prediction_type(prediction_type)
    _check_path_prediction(path, prediction_type)
    validate_loss_weighting(loss_weighting, snr_gamma)
    if denoise_fn is None:
        denoise_fn = make_denoise_fn(
            noise_scheduler, prediction_type, model_input_fn=model_input_fn, edm_timestep_scale=edm_timestep_scale, mu=mu
        )
    if device is None:
        device = next(model.parameters()).device if isinstance(model, torch.nn.Module) and any(True for _ in model.parameters()) else "cpu"
    device = torch.device(device)

    sig_req = _grid_sigmas(sigmas, num_levels, path)
    sig, timesteps = _levels_on_path(path, sig_req)
    k_levels, n, d = sig.numel(), x0.shape[0], num_noise_draws
    kwargs_all = dict(model_kwargs or {})
    per_sample_keys = [k for k, v in kwargs_all.items() if torch.is_tensor(v) and v.ndim >= 1 and v.shape[0] == n]

    total = k_levels * d * n
    errors = torch.empty(total, dtype=_F64)
    gen_device = generator.device if generator is not None else torch.device("cpu")
    bar = _progress(total, progress, "profile_from_model")
    x0_cpu = x0.detach()
    for start in range(0, total, batch_size):
        idx = torch.arange(start, min(start + batch_size, total))
        lvl, img = idx // (d * n), idx % n
        xb = x0_cpu[img.to(x0_cpu.device)].to(device=device, dtype=torch.float32)
        noise = torch.randn(xb.shape, generator=generator, device=gen_device, dtype=torch.float32).to(device)
        s64 = sig[lvl]
        x_noisy = path.add_noise(xb, noise, s64)
        levels = NoiseLevels(
            timesteps=timesteps[lvl].to(device),
            sigmas=s64.to(torch.float32).to(device),
            log_snr=(-2.0 * torch.log(s64)).to(torch.float32).to(device),
        )
        kw = {k: (v[img.to(v.device)].to(device) if k in per_sample_keys else v) for k, v in kwargs_all.items()}
        x0_hat = denoise_fn(model, x_noisy, levels, kw)
        if x0_hat.shape != xb.shape:
            raise ValueError(f"denoise_fn: returned shape {tuple(x0_hat.shape)}, expected {tuple(xb.shape)}")
        err = (x0_hat.to(_F64) - xb.to(_F64)).pow(2).reshape(xb.shape[0], -1).mean(1)
        errors[idx] = err.cpu()
        if bar is not None:
            bar.update(len(idx))
    if bar is not None:
        bar.close()

    e = errors.view(k_levels, d, n)
    finite = torch.isfinite(e)
    num_nonfinite = int((~finite).sum())
    per_sample = torch.where(finite, e, torch.zeros_like(e)).sum(1) / finite.sum(1).clamp_min(1)  # (K, N)
    ok = finite.any(1)  # (K, N)
    cnt = ok.sum(1)
    mean = torch.where(cnt > 0, (per_sample * ok).sum(1) / cnt.clamp_min(1), torch.full((k_levels,), math.nan, dtype=_F64))
    if n >= 2:
        var = (((per_sample - mean[:, None]) ** 2) * ok).sum(1) / (cnt - 1).clamp_min(1)
        se = torch.sqrt(var / cnt.clamp_min(1))
    else:  # one probe sample: spread over the draws
        flat = e[:, :, 0]
        se = flat.std(1, unbiased=True) / math.sqrt(d) if d >= 2 else torch.full((k_levels,), math.nan, dtype=_F64)
    if int(torch.isfinite(mean).sum()) < 2:
        raise ValueError("model: its outputs were non-finite at (almost) every level; cannot form a profile")
    meta = {
        "source": "model",
        "model": type(model).__name__,
        "scheduler": type(noise_scheduler).__name__,
        "path": path.config(),
        "num_probe_samples": int(n),
        "num_noise_draws": int(d),
        "edm_timestep_scale": float(edm_timestep_scale),
        "num_nonfinite": num_nonfinite,
    }
    return profile_from_errors(
        sig,
        mean,
        se,
        gate=gate,
        gate_fallback=gate_fallback,
        smoothing=smoothing,
        loss_weighting=loss_weighting,
        prediction_type=prediction_type,
        snr_gamma=snr_gamma,
        sigma_data=path.sigma_data if isinstance(path, VEPath) else 0.5,
        timesteps=timesteps,
        num_samples=n * d,
        meta=meta,
    )


@torch.no_grad()
def profile_from_dataset(
    x: torch.Tensor,
    *,
    sigmas=None,
    num_levels: int = 32,
    sigma_min: float = DEFAULT_SIGMA_RANGE[0],
    sigma_max: float = DEFAULT_SIGMA_RANGE[1],
    num_noise_draws: int = 256,
    chunk_size: int = 4096,
    query_batch_size: int = 256,
    generator: torch.Generator | None = None,
    device=None,
    dtype: torch.dtype = torch.float64,
    progress: bool = False,
    gate: str | float | None = "auto",
    gate_fallback: float = 0.2,
    smoothing: float = 0.0,
    loss_weighting="none",
    prediction_type: str = "sample",
    snr_gamma: float | None = None,
    sigma_data: float = 0.5,
) -> Profile:
    """The optimal-empirical-denoiser profile of a finite data set (METHOD.md §2, §6). No network.

    For the data set ``{x_i}`` (uniform prior over its N points) the posterior given
    ``x = x_j + σ·ε`` has weights ``w_i(x) = softmax_i(−‖x − x_i‖²/(2σ²))`` and the MMSE is
    ``mmse(σ) = E_{j,ε}[Σ_i w_i‖x_i‖² − ‖Σ_i w_i x_i‖²]`` (the posterior variance), divided here by
    the number of elements D (per element, like model errors). It is evaluated exactly per query by
    one streaming pass over the data in chunks of ``chunk_size`` points, with distances from
    ``‖x‖² − 2x·x_i + ‖x_i‖²`` and a running log-sum-exp (so only a (query batch × chunk) block is in
    memory: 60k MNIST images of 784 dimensions take the data plus a few MB). The posterior variance
    is computed about the query, ``Σ w_i‖x_i − x‖² − ‖Σ w_i x_i − x‖²`` (same value, less
    cancellation). The expectation is Monte Carlo over ``num_noise_draws`` queries per level, each
    with its own uniformly drawn j and ε; ``mmse_se`` is its standard error.

    **This describes memorisation for small data sets** (METHOD.md §7): the empirical denoiser
    knows the N points, so for σ below the typical nearest-neighbour distance its mmse is ≈ 0 even
    for continuous data (1.5k 8x8 digits: ≈ 0 below σ ≈ 0.3), and the profile looks "discrete". It
    approaches the population profile only as N grows. For data from two points ±1 (each half the
    time) it is the two-point profile of :func:`analytic_mmse_two_point`.

    Args:
        x: (N, ...) data, any float dtype, scaled as the model sees it (e.g. images in [−1, 1]); N >= 2.
        sigmas: (K,) VE σ, or ``None`` for ``num_levels`` log-uniform bin centres over
            ``[sigma_min, sigma_max]`` (default the EDM range 0.002..80).
        num_noise_draws: queries (j, ε) per level.
        chunk_size: data points per block of the streaming pass.
        query_batch_size: queries evaluated together.
        generator: ``torch.Generator`` for j and ε (default CPU, unseeded).
        device: where to compute (default x's device).
        dtype: compute dtype (float64 default: at small σ the softmax logits need it).
        progress: tqdm progress bar over levels.
        gate, gate_fallback, smoothing, loss_weighting, prediction_type, snr_gamma, sigma_data: see
            :func:`profile_from_errors` (default: π = ρ̂).

    Returns:
        :class:`Profile`.

    Raises:
        ValueError: bad arguments (each names the argument).
    """
    if not torch.is_tensor(x) or not x.is_floating_point() or x.ndim < 1 or x.shape[0] < 2:
        raise ValueError("x: expected a floating-point tensor of shape (N, ...) with N >= 2")
    for arg, value in (("num_noise_draws", num_noise_draws), ("chunk_size", chunk_size), ("query_batch_size", query_batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{arg}: must be an int >= 1, got {value!r}")
    if sigmas is None:
        sig = torch.exp(log_sigma_grid(None, num_levels, sigma_min=sigma_min, sigma_max=sigma_max))
    else:
        sig = _grid_sigmas(sigmas, num_levels, None)
    device = torch.device(device) if device is not None else x.device
    n = x.shape[0]
    data = x.detach().reshape(n, -1).to(device)
    dim = data.shape[1]
    # translation leaves the posterior variance unchanged; centring makes norms smaller
    data = data - data.to(dtype).mean(0).to(data.dtype)
    store_dtype = dtype if n * dim <= 50_000_000 else data.dtype
    data = data.to(store_dtype)
    norms = data.to(dtype).pow(2).sum(1)  # (N,)
    gen_device = generator.device if generator is not None else torch.device("cpu")

    k_levels = sig.numel()
    mmse = torch.empty(k_levels, dtype=_F64)
    se = torch.empty(k_levels, dtype=_F64)
    bar = _progress(k_levels, progress, "profile_from_dataset")
    for k in range(k_levels):
        s = float(sig[k])
        values = []
        for q0 in range(0, num_noise_draws, query_batch_size):
            nq = min(query_batch_size, num_noise_draws - q0)
            j = torch.randint(n, (nq,), generator=generator, device=gen_device).to(device)
            eps = torch.randn((nq, dim), generator=generator, device=gen_device, dtype=torch.float64).to(device, dtype)
            xq = data[j].to(dtype) + s * eps
            values.append(_posterior_variance(xq, data, norms, s, chunk_size, dtype).cpu())
        v = torch.cat(values).to(_F64) / dim
        mmse[k] = v.mean()
        se[k] = v.std(unbiased=True) / math.sqrt(v.numel()) if v.numel() >= 2 else math.nan
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    meta = {
        "source": "dataset",
        "num_data": int(n),
        "dim": int(dim),
        "num_noise_draws": int(num_noise_draws),
        "note": "optimal empirical denoiser: describes memorisation of this finite data set (METHOD.md section 7)",
    }
    return profile_from_errors(
        sig,
        mmse,
        se,
        gate=gate,
        gate_fallback=gate_fallback,
        smoothing=smoothing,
        loss_weighting=loss_weighting,
        prediction_type=prediction_type,
        snr_gamma=snr_gamma,
        sigma_data=sigma_data,
        num_samples=num_noise_draws,
        meta=meta,
    )


def _posterior_variance(xq, data, norms, sigma, chunk_size, dtype) -> torch.Tensor:
    """(Q,) ``Σ_i w_i‖x_i − x‖² − ‖Σ_i w_i x_i − x‖²`` for queries ``xq`` (Q, D), streaming over data."""
    nq = xq.shape[0]
    qn = xq.pow(2).sum(1)  # (Q,)
    run_max = torch.full((nq,), -math.inf, dtype=dtype, device=xq.device)
    run_sum = torch.zeros(nq, dtype=dtype, device=xq.device)
    run_mean = torch.zeros_like(xq)  # Σ p_i x_i
    run_d = torch.zeros(nq, dtype=dtype, device=xq.device)  # Σ p_i ‖x_i − x‖²
    inv = 1.0 / (2.0 * sigma * sigma)
    for c0 in range(0, data.shape[0], chunk_size):
        xc = data[c0 : c0 + chunk_size].to(dtype)
        # ‖x − x_i‖² = ‖x‖² − 2x·x_i + ‖x_i‖², (Q, C); few full passes over the block (CPU-bound)
        dist = torch.addmm(qn[:, None] + norms[None, c0 : c0 + chunk_size], xq, xc.T, alpha=-2.0).clamp_min_(0)
        new_max = torch.maximum(run_max, -dist.min(1).values * inv)  # running max of the logits −d/(2σ²)
        scale = torch.exp(run_max - new_max)  # exp(-inf) = 0 at the first chunk
        p = dist.mul(-inv).sub_(new_max[:, None]).exp_()
        run_sum = run_sum * scale + p.sum(1)
        run_mean = torch.addmm(run_mean * scale[:, None], p, xc)
        run_d = run_d * scale + torch.einsum("qc,qc->q", p, dist)
        run_max = new_max
    mean = run_mean / run_sum[:, None]
    return (run_d / run_sum - (mean - xq).pow(2).sum(1)).clamp_min(0)


# ================================================================================================
# allocations and summary numbers
# ================================================================================================


def allocation(
    name_or_sampler,
    noise_scheduler=None,
    *,
    log_sigma=None,
    num_levels: int = 64,
    loss_weighting=None,
    prediction_type: str | None = None,
    snr_gamma: float | None = None,
    mu: float | None = None,
    **sampler_kwargs,
) -> Allocation:
    """The effective allocation ``φ = π·w`` of a schedule, per unit log σ on a grid (METHOD.md §4).

    Args:
        name_or_sampler: a :class:`~diffusers_infonoise.samplers.TrainingTimestepSampler` or a name of
            :data:`~diffusers_infonoise.samplers.SAMPLER_NAMES` (built by
            :func:`~diffusers_infonoise.samplers.make_sampler` on ``noise_scheduler``). The name
            ``"infonoise"`` on a scheduler whose config carries a learned schedule gives the learned π
            (:func:`load_learned_sampler`, with the stored weighting); without one, its base density.
        noise_scheduler: required with a name.
        log_sigma: (K,) grid (VE log σ, increasing), or ``None`` for :func:`log_sigma_grid` of the
            sampler's path with ``num_levels`` points (64 = the estimator's default bins).
        loss_weighting, prediction_type, snr_gamma: the training loss whose x0-space weight ``w`` is
            applied. ``None`` (default): a sampler's own; for a name, :func:`default_objective` of the
            scheduler (a stored schedule's, else ``"edm"`` on EDM, ``"none"`` on VP and flow).
        mu: dynamic-shift ``mu`` for flow schedulers with ``use_dynamic_shifting=True`` (names only;
            default: the stored schedule's shift when the config carries one).
        **sampler_kwargs: density parameters for :func:`make_sampler` (``P_mean``, ``mean``, ...).

    π on the grid is the cell average ``mass(cell)/width`` of the sampler's density (exact for the
    piecewise-constant InfoNoise and VP uniform-t densities), renormalised on the grid.

    Raises:
        ValueError: unknown sampler name (the message lists the accepted names), a name without a
            scheduler, a schedule with no mass on the grid, or ``w`` not finite and > 0.
        TypeError: neither a name nor a sampler.
    """
    if isinstance(name_or_sampler, str):
        name = name_or_sampler
        if name not in SAMPLER_NAMES:
            raise ValueError(f"name: unknown sampler {name!r}; accepted: {', '.join(SAMPLER_NAMES)}")
        if noise_scheduler is None:
            raise ValueError(f"noise_scheduler: a scheduler is needed to build the sampler {name!r}")
        mu = _stored_mu(noise_scheduler, mu)
        d_pred, d_weight, d_gamma = default_objective(noise_scheduler)
        pt = prediction_type if prediction_type is not None else d_pred
        lw = loss_weighting if loss_weighting is not None else d_weight
        sg = snr_gamma if (snr_gamma is not None or loss_weighting is not None) else d_gamma
        if name == "infonoise" and read_schedule(noise_scheduler) is not None:
            # the learned π, read with the requested (default: the stored) weighting
            sampler = load_learned_sampler(noise_scheduler, prediction_type=pt, loss_weighting=lw, snr_gamma=sg, mu=mu, **sampler_kwargs)
        else:
            sampler = make_sampler(name, noise_scheduler, prediction_type=pt, loss_weighting=lw, snr_gamma=sg, mu=mu, **sampler_kwargs)
    elif isinstance(name_or_sampler, TrainingTimestepSampler):
        sampler = name_or_sampler
        name = sampler.name
        if sampler_kwargs or mu is not None:
            raise ValueError("sampler_kwargs, mu: only used when a sampler is built by name")
    else:
        raise TypeError(f"name_or_sampler: expected a sampler name or a TrainingTimestepSampler, got {type(name_or_sampler).__name__}")

    x = log_sigma_grid(sampler.path, num_levels) if log_sigma is None else _as_grid(log_sigma)
    edges = grid_edges(x)
    sig = torch.exp(x)
    effective = sampler.base if isinstance(sampler, KingmaGaoSampler) else sampler.density
    masses = D.bin_masses(effective, edges)
    if not float(masses.sum()) > 0:
        raise ValueError(f"log_sigma: the {name!r} schedule has no mass on this grid")
    pi = normalize_density(masses / (edges[1:] - edges[:-1]), x)
    if isinstance(name_or_sampler, str) or (loss_weighting is None and prediction_type is None):
        w = sampler.x0_loss_weight(sig)
        pt, lw, sg = sampler.prediction_type, sampler.loss_weighting, sampler.snr_gamma
    else:
        pt = prediction_type if prediction_type is not None else sampler.prediction_type
        lw = loss_weighting if loss_weighting is not None else sampler.loss_weighting
        sg = snr_gamma if loss_weighting is not None else sampler.snr_gamma
        w = x0_loss_weight(lw, pt, sig, snr_gamma=sg, sigma_data=sampler.sigma_data)
    if not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
        raise ValueError("loss_weighting: the x0-space weight w(sigma) must be finite and > 0 on the grid")
    phi = normalize_density(pi * w, x)
    meta = {
        "prediction_type": pt,
        "loss_weighting": lw if isinstance(lw, str) else "custom",
        "snr_gamma": sg,
        "sampler": sampler.describe(),
        "effective": "base*w (importance-weighted)" if isinstance(sampler, KingmaGaoSampler) else "pi*w",
    }
    return Allocation(name=name, log_sigma=x, pi=pi, w=w, phi=phi, meta=meta)


def _cdf_at_edges(p, log_sigma) -> tuple[torch.Tensor, torch.Tensor]:
    dens = normalize_density(p, log_sigma)
    edges = grid_edges(log_sigma)
    cdf = torch.cat([torch.zeros(1, dtype=_F64), torch.cumsum(dens * (edges[1:] - edges[:-1]), 0)])
    cdf = cdf / cdf[-1]
    return edges, cdf


def profile_window(rho, log_sigma, central: float = 0.9) -> tuple[float, float]:
    """``(lo, hi)`` in log σ: the central ``central`` interval of the density ``rho`` on the grid
    (its ``(1 − central)/2`` and ``(1 + central)/2`` quantiles; piecewise-constant density per cell).

    Raises:
        ValueError: ``central`` outside (0, 1], or an invalid density/grid.
    """
    if not 0 < central <= 1:
        raise ValueError(f"central: must be in (0, 1], got {central}")
    edges, cdf = _cdf_at_edges(rho, log_sigma)
    lo_q, hi_q = (1 - central) / 2, (1 + central) / 2
    return _quantile(edges, cdf, lo_q), _quantile(edges, cdf, hi_q)


def _quantile(edges, cdf, q) -> float:
    k = int(torch.searchsorted(cdf, torch.tensor(q, dtype=_F64), right=False).clamp(1, cdf.numel() - 1)) - 1
    # skip empty cells: first cell whose upper cdf reaches q
    mass = float(cdf[k + 1] - cdf[k])
    frac = 0.0 if mass <= 0 else (q - float(cdf[k])) / mass
    return float(edges[k] + min(max(frac, 0.0), 1.0) * (edges[k + 1] - edges[k]))


def window_mass(phi, rho, log_sigma, central: float = 0.9) -> float:
    """Share of the φ-mass inside ρ̂'s central ``central`` window (:func:`profile_window`) (METHOD.md §6).

    Both are normalised on the grid first; InfoNoise's φ ∝ ρ̂ gives ``central``. Returns a float in [0, 1].
    """
    lo, hi = profile_window(rho, log_sigma, central)
    edges, cdf = _cdf_at_edges(phi, log_sigma)
    e, c = edges.numpy(), cdf.numpy()
    return float(np.interp(hi, e, c) - np.interp(lo, e, c))


def wasted_mass(phi, rho, log_sigma, threshold: float = 0.01) -> float:
    """Share of the φ-mass on grid cells where ρ̂ is below ``threshold`` times its peak (METHOD.md §7:
    "draws where the InfoNoise π is below 1% of its peak"). Float in [0, 1]."""
    p = normalize_density(phi, log_sigma)
    r = normalize_density(rho, log_sigma)
    width = _widths(log_sigma)
    return float((p * width)[r < threshold * r.max()].sum())


def total_variation(p, q, log_sigma) -> float:
    """``½ ∫ |p̂ − q̂| d log σ`` of the two densities normalised on the grid; a float in [0, 1]."""
    a, b = normalize_density(p, log_sigma), normalize_density(q, log_sigma)
    return float(0.5 * ((a - b).abs() * _widths(log_sigma)).sum())


def compare_allocations(profile: Profile, allocations: Sequence[Allocation], central: float = 0.9) -> dict:
    """Summary numbers of each allocation against a profile, on the profile's grid.

    Each allocation is re-evaluated on ``profile.log_sigma`` when its grid differs (by linear
    interpolation of φ in log σ, zero outside). Returns ``{name: {"window_mass", "total_variation",
    "wasted_mass"}}`` plus ``"_profile": {"window": (lo, hi), "central": central}``.
    """
    x = profile.log_sigma
    out: dict = {"_profile": {"window_log_sigma": list(profile_window(profile.rho_hat, x, central)), "central": central}}
    for a in allocations:
        if a.log_sigma.shape == x.shape and torch.allclose(a.log_sigma, x):
            phi = a.phi
        else:
            phi = torch.from_numpy(np.interp(x.numpy(), a.log_sigma.numpy(), a.phi.numpy(), left=0.0, right=0.0))
        out[a.name] = {
            "window_mass": window_mass(phi, profile.rho_hat, x, central),
            "total_variation": total_variation(phi, profile.rho_hat, x),
            "wasted_mass": wasted_mass(phi, profile.rho_hat, x),
        }
    return out


# ================================================================================================
# analytic cases (METHOD.md §2)
# ================================================================================================


def analytic_mmse_gaussian(sigmas, s_d: float = 1.0) -> torch.Tensor:
    """Per-element MMSE of Gaussian data ``x0 ~ N(0, s_d²)`` at VE σ: ``σ²·s_d²/(σ² + s_d²)`` (METHOD.md §2).

    Args:
        sigmas: VE σ, any shape (float64 result of the same shape; σ = inf gives s_d²).
        s_d: data standard deviation (> 0).
    """
    if not s_d > 0:
        raise ValueError(f"s_d: must be > 0, got {s_d}")
    s = torch.as_tensor(sigmas, dtype=_F64)
    return s_d**2 / (1.0 + s_d**2 / s**2)


def analytic_mmse_two_point(sigmas, num_points: int = 4001) -> torch.Tensor:
    """Per-element MMSE of two-point data ``x0 ∈ {−1, +1}`` (equally likely) at VE σ (METHOD.md §2).

    ``E[x0|x] = tanh(x/σ²)``, so ``mmse = 1 − E[tanh²(x/σ²)] = E[sech²(x/σ²)]``, and by symmetry
    ``x = 1 + σz``: ``mmse(σ) = ∫ φ(z)·sech²(1/σ² + z/σ) dz``. Computed by the trapezoid rule on a
    grid that resolves both the Gaussian (z ∈ [−12, 12]) and the sech² bump at ``z = −1/σ`` (width
    ∝ σ), in log space (no underflow of the small-σ tail above 1e-300). Relative accuracy is about
    1e-8 for σ in [0.05, 1e3].

    Args:
        sigmas: VE σ > 0, any shape. num_points: nodes per region.

    Returns:
        float64 tensor of the shape of ``sigmas``.
    """
    s_all = torch.as_tensor(sigmas, dtype=_F64)
    flat = s_all.flatten().tolist()
    out = np.empty(len(flat))
    for i, s in enumerate(flat):
        if not s > 0:
            raise ValueError(f"sigmas: must be > 0, got {s}")
        if math.isinf(s):
            out[i] = 1.0
            continue
        centre = -1.0 / s
        z = np.union1d(np.linspace(-12.0, 12.0, num_points), np.linspace(centre - 40 * s, centre + 40 * s, num_points))
        y = np.abs(1.0 / s**2 + z / s)
        log_sech2 = math.log(4.0) - 2.0 * y - 2.0 * np.log1p(np.exp(-2.0 * y))
        log_phi = -0.5 * z**2 - 0.5 * math.log(2 * math.pi)
        f = np.exp(log_phi + log_sech2)
        out[i] = float(np.trapezoid(f, z)) if hasattr(np, "trapezoid") else float(np.trapz(f, z))
    return torch.from_numpy(out).reshape(s_all.shape)


# ================================================================================================
# plots (matplotlib Figure objects: Agg canvas, no display)
# ================================================================================================


def _figure(nrows: int = 1, height: float = 3.2, sharex: bool = True):
    try:
        from matplotlib.figure import Figure
    except ImportError as err:  # optional dependency
        raise ImportError("plotting needs matplotlib: pip install matplotlib (or the 'train' extra)") from err
    fig = Figure(figsize=(7.0, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, 1, sharex=sharex, squeeze=False)[:, 0]
    return fig, axes


def _save(fig, path):
    if path is not None:
        fig.savefig(path, dpi=120)
    return fig


def _sigma_ticks(ax):
    """A secondary x axis in σ for a log-σ axis."""
    sec = ax.secondary_xaxis("top", functions=(np.exp, lambda s: np.log(np.clip(s, 1e-300, None))))
    sec.set_xscale("log")
    sec.set_xlabel("σ (VE)")
    return sec


def _fine_grid(sampler: TrainingTimestepSampler, n: int = 400) -> torch.Tensor:
    lo, hi = sampler.path.log_sigma_range
    return torch.linspace(lo, hi, n + 1, dtype=_F64)[:-1] + (hi - lo) / (2 * n)


def plot_schedule(sampler: TrainingTimestepSampler, path=None, *, title: str | None = None):
    """Draw a sampler's training density and effective allocation on the log-σ axis (VE σ).

    Top panel: the current π per unit log σ, the base density (adaptive samplers' ``.base``, the
    warm-up and floor density) and, for InfoNoise once its estimator has two filled bins, the
    estimated profile ρ̂ (``sampler.profile()``), with the gate pivot. Bottom panel: the effective
    allocation ``φ = π·w`` normalised (``base·w`` for Kingma-Gao, whose importance weights cancel π;
    METHOD.md §4-§5) against ρ̂. Works for any sampler (InfoNoise, fixed, Kingma-Gao) on any path.

    Args:
        sampler: a :class:`~diffusers_infonoise.samplers.TrainingTimestepSampler`.
        path: optional file to save the figure to (PNG/PDF/SVG by extension).
        title: figure title (default: sampler name, path kind, weighting and optimizer step).

    Returns:
        :class:`matplotlib.figure.Figure` (not registered with pyplot; nothing is displayed).

    Raises:
        TypeError: not a sampler. ImportError: matplotlib missing.
    """
    if not isinstance(sampler, TrainingTimestepSampler):
        raise TypeError(f"sampler: expected a TrainingTimestepSampler, got {type(sampler).__name__}")
    x = _fine_grid(sampler)
    xn = x.numpy()
    pi = torch.exp(sampler.density.log_prob(x))
    base = torch.exp(sampler.base.log_prob(x)) if hasattr(sampler, "base") else None
    prof = None
    if isinstance(sampler, InfoNoiseTrainingTimestepSampler) and sampler.estimator.is_ready:
        prof = sampler.profile()
    # φ per grid cell (cell-average π times w): on the estimator's bins for adaptive samplers, where
    # π is constant per bin, so that φ is comparable point by point with ρ̂
    grid = sampler.estimator.centers if hasattr(sampler, "estimator") else x
    alloc = allocation(sampler, log_sigma=grid)

    fig, (ax0, ax1) = _figure(2)
    ax0.plot(xn, pi.numpy(), color="C0", lw=2, label="π (current)")
    if base is not None:
        ax0.plot(xn, base.numpy(), color="C7", ls="--", label="base density")
    if prof is not None:
        px = prof["log_sigma"].numpy()
        ax0.plot(px, prof["rho_hat"].numpy(), color="C3", marker=".", ms=3, lw=1, label="ρ̂ (estimated profile)")
        ax1.plot(px, prof["rho_hat"].numpy(), color="C3", marker=".", ms=3, lw=1, label="ρ̂")
        pivot = prof["gate"].pivot
        if pivot is not None:
            for ax in (ax0, ax1):
                ax.axvline(math.log(pivot), color="C3", ls=":", lw=1)
            ax0.plot([], [], color="C3", ls=":", label=f"gate pivot c = {pivot:.3g} ({prof['gate'].source})")
    ax0.set_ylabel("density per unit log σ")
    ax0.legend(fontsize=8)
    label = "φ = base·w (importance-weighted)" if isinstance(sampler, KingmaGaoSampler) else "φ = π·w (normalised)"
    if isinstance(sampler, InfoNoiseTrainingTimestepSampler) and sampler.estimator.is_ready:
        # the check of METHOD.md §5: TV(φ, ρ̂) ≤ η + 0.02
        label += f", TV(φ, ρ̂) = {sampler.allocation_total_variation():.2f} (floor {sampler.floor:g})"
    ax1.plot(alloc.log_sigma.numpy(), alloc.phi.numpy(), color="C2", lw=2, drawstyle="steps-mid", label=label)
    ax1.set_ylabel("effective allocation")
    ax1.set_xlabel("log σ (VE)")
    ax1.legend(fontsize=8)
    _sigma_ticks(ax0)
    if title is None:
        lw = sampler.loss_weighting if isinstance(sampler.loss_weighting, str) else "custom"
        title = (f"{sampler.name} on the {sampler.path.kind} path · {sampler.prediction_type}, weighting {lw} · "
                 f"step {sampler.optimizer_step}")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_level_histogram(log_sigmas, sampler: TrainingTimestepSampler | None = None, path=None, *, bins: int = 60,
                         title: str | None = None):
    """Histogram of drawn noise levels (log σ, VE), as a density per unit log σ, with π overlaid.

    Args:
        log_sigmas: (B,) drawn log σ (tensor or array; non-finite values, e.g. a zero-SNR step, are dropped).
        sampler: optional; its current π (``sampler.density``) is drawn over the histogram's range.
        path: optional file to save to. bins: histogram bins. title: optional title.

    Returns:
        :class:`matplotlib.figure.Figure`. With no finite value the histogram is empty (labelled
        ``n = 0``) and only π is drawn: a training loop may call this before anything was drawn.
    """
    v = torch.as_tensor(log_sigmas, dtype=_F64).detach().cpu().flatten()
    v = v[torch.isfinite(v)]
    fig, (ax,) = _figure(1, height=3.5)
    if sampler is not None:
        lo, hi = sampler.path.log_sigma_range
        if v.numel():
            lo, hi = min(lo, float(v.min())), max(hi, float(v.max()))
    elif v.numel():
        lo, hi = float(v.min()), float(v.max())
    else:
        lo, hi = math.log(DEFAULT_SIGMA_RANGE[0]), math.log(DEFAULT_SIGMA_RANGE[1])
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    if v.numel():
        ax.hist(v.numpy(), bins=bins, range=(lo, hi), density=True, color="C0", alpha=0.5, label=f"drawn levels (n = {v.numel()})")
    else:
        ax.plot([], [], color="C0", alpha=0.5, label="drawn levels (n = 0)")
        ax.set_xlim(lo, hi)
    if sampler is not None:
        x = torch.linspace(lo, hi, 600, dtype=_F64)
        ax.plot(x.numpy(), torch.exp(sampler.density.log_prob(x)).numpy(), color="C3", lw=2, label=f"π ({sampler.name})")
    ax.set_xlabel("log σ (VE)")
    ax.set_ylabel("density per unit log σ")
    ax.legend(fontsize=8)
    _sigma_ticks(ax)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_allocations(allocations: Sequence[Allocation], path=None, *, rho=None, title: str | None = None, central: float = 0.9):
    """Effective allocations φ of several schedules on one log-σ axis (VE σ), optionally against a
    profile ``rho`` (a (K,) density on the first allocation's grid), labelled with their share of
    mass inside ρ's central window when given.

    Returns:
        :class:`matplotlib.figure.Figure`.

    Raises:
        ValueError: no allocation.
    """
    if not allocations:
        raise ValueError("allocations: need at least one Allocation")
    fig, (ax,) = _figure(1, height=4.0)
    x0 = allocations[0].log_sigma
    if rho is not None:
        rho = normalize_density(rho, x0)
        ax.plot(x0.numpy(), rho.numpy(), color="k", lw=2.5, label="ρ̂ (stored profile)")
        lo, hi = profile_window(rho, x0, central)
        ax.axvspan(lo, hi, color="C7", alpha=0.12, label=f"ρ̂ central {central:.0%} window")
    for i, a in enumerate(allocations):
        label = f"φ {a.name}"
        if rho is not None and a.log_sigma.shape == x0.shape and torch.allclose(a.log_sigma, x0):
            label += f": {window_mass(a.phi, rho, x0, central):.0%} in window, TV {total_variation(a.phi, rho, x0):.2f}"
        ax.plot(a.log_sigma.numpy(), a.phi.numpy(), color=f"C{i}", lw=1.6, label=label)
    ax.set_xlabel("log σ (VE)")
    ax.set_ylabel("density per unit log σ")
    ax.legend(fontsize=7)
    _sigma_ticks(ax)
    fig.suptitle(title or "Effective allocations φ = π·w", fontsize=10)
    return _save(fig, path)


def plot_profile(profile: Profile, allocations: Sequence[Allocation] = (), path=None, *, title: str | None = None, central: float = 0.9):
    """The paper's Figure 4: the profile ρ̂ (with a ±2 standard-error band when known) and the
    effective allocations φ of schedules overlaid, each labelled with its share of mass inside ρ̂'s
    central window (shaded) (METHOD.md §6).

    Returns:
        :class:`matplotlib.figure.Figure`.
    """
    x = profile.log_sigma.numpy()
    fig, (ax,) = _figure(1, height=4.0)
    rho = profile.rho_hat.numpy()
    ax.plot(x, rho, color="k", lw=2.5, label="ρ̂ (entropy-rate profile)")
    if profile.mmse_se is not None and bool(torch.isfinite(profile.mmse_se).all()):
        scale = (profile.rho_hat / profile.q.clamp_min(1e-300) / profile.sigmas**2).numpy()  # ρ̂ per unit mmse
        band = 2 * profile.mmse_se.numpy() * scale
        ax.fill_between(x, np.clip(rho - band, 0, None), rho + band, color="k", alpha=0.15, lw=0)
    lo, hi = profile_window(profile.rho_hat, profile.log_sigma, central)
    ax.axvspan(lo, hi, color="C7", alpha=0.12, label=f"ρ̂ central {central:.0%} window")
    summary = compare_allocations(profile, allocations, central)
    for i, a in enumerate(allocations):
        s = summary[a.name]
        ax.plot(a.log_sigma.numpy(), a.phi.numpy(), color=f"C{i}", lw=1.6,
                label=f"φ {a.name}: {s['window_mass']:.0%} in window, TV {s['total_variation']:.2f}")
    if profile.gate.pivot is not None:
        ax.axvline(math.log(profile.gate.pivot), color="k", ls=":", lw=1, label=f"gate pivot c = {profile.gate.pivot:.3g}")
    ax.set_xlabel("log σ (VE)")
    ax.set_ylabel("density per unit log σ")
    ax.legend(fontsize=7)
    _sigma_ticks(ax)
    fig.suptitle(title or "Entropy-rate profile and effective allocations", fontsize=10)
    return _save(fig, path)
