"""Effective allocations φ = π·w of named schedules (METHOD.md §4) and the numbers that compare them
with ρ̂: window mass, wasted mass, total variation."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .. import densities
from ..objective import default_objective
from ..sampler import (
    SAMPLER_NAMES,
    KingmaGaoSampler,
    TrainingTimestepSampler,
    make_sampler,
)
from ..schedule_io import read_schedule
from .grid import _F64, Allocation, Profile, _as_grid, _widths, grid_edges, log_sigma_grid, normalize_density, profile_arrays
from .profiles import _stored_mu, load_learned_sampler

__all__ = [
    "allocation",
    "profile_window",
    "window_mass",
    "wasted_mass",
    "total_variation",
    "compare_allocations",
    "schedule_fit",
]


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
        name_or_sampler: a :class:`~diffusers_infonoise.TrainingTimestepSampler` or a name of
            :data:`~diffusers_infonoise.SAMPLER_NAMES` (built by
            :func:`~diffusers_infonoise.make_sampler` on ``noise_scheduler``). The name
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
        objective = default_objective(noise_scheduler).override(prediction_type, loss_weighting, snr_gamma)
        if name == "infonoise" and read_schedule(noise_scheduler) is not None:
            # the learned π, read with the requested (default: the stored) weighting
            sampler = load_learned_sampler(noise_scheduler, **objective.keywords(), mu=mu, **sampler_kwargs)
        else:
            sampler = make_sampler(name, noise_scheduler, **objective.keywords(), mu=mu, **sampler_kwargs)
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
    masses = densities.bin_masses(effective, edges)
    if not float(masses.sum()) > 0:
        raise ValueError(f"log_sigma: the {name!r} schedule has no mass on this grid")
    pi = normalize_density(masses / (edges[1:] - edges[:-1]), x)
    objective = sampler.objective
    if not isinstance(name_or_sampler, str):  # another loss than the sampler's: its γ goes with its weighting only
        objective = objective.override(prediction_type, loss_weighting, snr_gamma if loss_weighting is not None else None)
    w = objective.x0_loss_weight(sig, sigma_data=sampler.sigma_data)
    if not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
        raise ValueError("loss_weighting: the x0-space weight w(sigma) must be finite and > 0 on the grid")
    phi = normalize_density(pi * w, x)
    meta = {
        **objective.record(),
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


def schedule_fit(sampler, profile) -> dict:
    """How well a learned or shared schedule fits a profile of your data, before you train with it (METHOD.md §5.9).

    Args:
        sampler: an InfoNoise sampler holding the schedule (e.g. ``InfoNoiseTrainingTimestepSampler.from_stored``
            of the scheduler it is stored in).
        profile: a :class:`Profile` of your data (``profile_from_model`` of your model on it, or a data set's
            ``profile_from_empirical``), or its ``to_dict()`` (the ``"profile"`` of ``infonoise profile``'s JSON).

    Returns:
        ``{"tv_rho", "tv_phi", "tv_pi", "grid_points"}`` on the profile's grid (VE log σ): TV between the schedule's
        ρ̂ and the profile's, between the schedule's effective allocation φ = π·w and the profile's ρ̂ (what training
        with it would spend where your data resolves), and between its draws π and the profile's ρ̂ (what the study
        variant ``target_space="pi"`` matches instead, METHOD.md §5.10). The schedule's densities are interpolated linearly in
        log σ at the profile's points, zero outside its grid.

    Raises:
        ValueError: a sampler without an estimate, or a profile without valid ``log_sigma`` and ``rho_hat``
            (:func:`~.grid.profile_arrays`).
    """
    x, rho, _ = profile_arrays(profile)
    if not sampler.estimator.is_ready:
        raise ValueError("sampler: holds no estimate (fewer than two bins filled)")
    p = sampler.profile()
    centres = p["log_sigma"].numpy()

    def on_grid(values):
        return torch.from_numpy(np.interp(x.numpy(), centres, values.numpy(), left=0.0, right=0.0))

    return {
        "tv_rho": total_variation(on_grid(p["rho_hat"]), rho, x),
        "tv_phi": total_variation(on_grid(p["phi"]), rho, x),
        "tv_pi": total_variation(on_grid(p["pi"]), rho, x),
        "grid_points": int(x.numel()),
    }
