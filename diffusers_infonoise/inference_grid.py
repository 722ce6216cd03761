"""InfoGrid: inference steps placed by the learned profile (METHOD.md §8).

Entropic time ``τ(σ) = ∫_{σ_min}^{σ} g d log s / ∫_{σ_min}^{σ_max} g d log s`` for an entropy-rate
density ``g`` per unit log σ, and N steps at ``σ_i = τ⁻¹(1 − i/N)``, i = 0..N−1, then 0. The
choices of ``g`` (:data:`GRID_DENSITIES`):

* ``"rho"``: the gated profile ρ̂, which the training density follows (φ = π·w ≈ ρ̂);
* ``"q"``: the ungated rate ``q = m̂/σ²`` (I-MMSE);
* ``"q_sigma"``: ``q·σ``, the extra σ factor by which the paper's v1 says its inference grid
  differs from the training density.

All σ here are VE σ (``x = a·(x0 + σ·ε)``), whatever the path:
:func:`~diffusers_infonoise.scheduler_grids.scheduler_grid_kwargs` converts them to what each diffusers
scheduler's ``set_timesteps`` (and so each pipeline's ``sigmas=``/``timesteps=`` argument) takes, and
:func:`~diffusers_infonoise.scheduler_grids.set_infogrid` sets them and checks that the scheduler then steps
through the σ named (re-exported here).
"""

from __future__ import annotations

import torch

from .paths import path_from_scheduler
from .schedule_io import StoredSchedule, stored_mu
from .scheduler_grids import InferenceGrid, nearest_table_steps, scheduler_grid_kwargs, scheduler_sigmas_as_ve, set_infogrid

__all__ = [
    "GRID_DENSITIES",
    "DEFAULT_GRID_DENSITY",
    "DEFAULT_GRID_STEPS",
    "InferenceGrid",
    "entropic_time_sigmas",
    "infogrid",
    "infogrid_caveat",
    "scheduler_grid_kwargs",
    "set_infogrid",
    "scheduler_sigmas_as_ve",
]

GRID_DENSITIES = ("rho", "q", "q_sigma")
#: the InfoGrid's number of steps when none is given, where the path's default is larger: DDPMPipeline's 1000 is the
#: ancestral sampler's whole table, which an entropic-time grid cannot hold (on a 1000-step DDPM path its levels fall
#: on repeated table steps from about 180 steps); the grid is a few-step grid (METHOD.md §8 measures NFE 4-18)
DEFAULT_GRID_STEPS = 50
#: the choice of METHOD.md §8 the benchmarks pick: q·σ gave the lowest FD (or within 0.5%) in every row of
#: benchmarks/results/infogrid_recheck.md (0.23-0.43 of the default spacing at NFE 4, 0.72-0.90 at 18)
DEFAULT_GRID_DENSITY = "q_sigma"


def entropic_time_sigmas(
    log_sigma: torch.Tensor, density: torch.Tensor, num_inference_steps: int, *, edges: torch.Tensor | None = None
) -> torch.Tensor:
    """(N,) float64 VE σ at equal increments of entropic time (METHOD.md §8), decreasing from σ_max.

    Args:
        log_sigma: (K,) increasing log σ of the grid points.
        density: (K,) the density g per unit log σ at those points (any scale, >= 0, not all 0),
            constant on each cell.
        num_inference_steps: N >= 1.
        edges: (K+1,) cell edges in log σ; default midpoints, the outer cells as wide as their
            neighbours (:func:`diagnostics.grid.grid_edges`).

    Raises:
        ValueError: N < 1, shapes that disagree, or a density that is negative, non-finite or all 0.
    """
    from .diagnostics.grid import grid_edges

    if isinstance(num_inference_steps, bool) or not isinstance(num_inference_steps, int) or num_inference_steps < 1:
        raise ValueError(f"num_inference_steps: must be an int >= 1, got {num_inference_steps!r}")
    x = torch.as_tensor(log_sigma, dtype=torch.float64).flatten()
    g = torch.as_tensor(density, dtype=torch.float64).flatten()
    if g.shape != x.shape:
        raise ValueError(f"density: {g.numel()} values for {x.numel()} grid points")
    if not bool(torch.isfinite(g).all()) or bool((g < 0).any()) or float(g.sum()) <= 0:
        raise ValueError("density: must be finite, >= 0 and not all 0")
    e = grid_edges(x) if edges is None else torch.as_tensor(edges, dtype=torch.float64).flatten()
    if e.numel() != x.numel() + 1:
        raise ValueError(f"edges: expected {x.numel() + 1} cell edges, got {e.numel()}")
    cdf = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(g * (e[1:] - e[:-1]), 0)])
    cdf = cdf / cdf[-1]
    tau = 1.0 - torch.arange(num_inference_steps, dtype=torch.float64) / num_inference_steps
    # τ⁻¹ of the piecewise-linear CDF (flat stretches, where g = 0, resolve to their upper end)
    idx = torch.searchsorted(cdf, tau, right=False).clamp(1, cdf.numel() - 1)
    lo, hi = cdf[idx - 1], cdf[idx]
    frac = torch.where(hi > lo, (tau - lo) / (hi - lo), torch.ones_like(tau))
    return torch.exp(e[idx - 1] + frac * (e[idx] - e[idx - 1]))


def infogrid_caveat(sampler) -> str | None:
    """Why the InfoGrid of ``sampler``'s learned schedule (or of a
    :class:`~diffusers_infonoise.estimator.ProfileEstimator`'s estimate) is not the grid to sample with, or None when
    it is: the one decision behind :func:`infogrid`'s warning and the model card's advice. A schedule whose m̂ is capped
    at the data's variance (an ε/v loss, METHOD.md §5.4) hides the model's own error at large σ."""
    if getattr(sampler, "estimator", sampler).mmse_cap is None:
        return None
    return (
        "this schedule's m̂ is capped at the data's variance (an epsilon/v loss, METHOD.md §5.4), which hides the model's "
        "own error at large sigma; measured on DDPM-epsilon, its grid sampled worse than trailing spacing. Prefer the "
        "model's offline profile (diagnostics.profile_from_model) for the grid of an epsilon/v model (METHOD.md §8)"
    )


def _profile_arrays(source, density: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(log σ, g, edges, path) of a sampler, an offline Profile, or a scheduler/pipeline with a stored schedule (its
    estimate read without building a sampler: :func:`~diffusers_infonoise.sampler.infonoise.stored_estimator`)."""
    from .diagnostics.grid import Profile
    from .sampler import InfoNoiseTrainingTimestepSampler
    from .sampler.infonoise import stored_estimator

    if isinstance(source, Profile):
        x, q, rho, edges, path = source.log_sigma, source.q, source.rho_hat, source.edges, None
    else:
        if isinstance(source, InfoNoiseTrainingTimestepSampler):
            est, path = source.estimator, source.path
        else:
            scheduler = getattr(source, "scheduler", source)  # a pipeline or its scheduler
            stored = StoredSchedule.from_scheduler(scheduler)
            path = path_from_scheduler(scheduler, mu=stored_mu(scheduler, stored.payload))
            est = stored_estimator(stored, path)
        if est.num_filled < 2:
            raise ValueError("source: the sampler has no estimate yet (fewer than two bins filled); train it first")
        caveat = infogrid_caveat(est)
        if caveat is not None:
            import warnings

            warnings.warn(f"infogrid: {caveat}", UserWarning, stacklevel=3)
        rho, q = est.profile()
        x, edges = est.centers, est.edges
    g = {"rho": rho, "q": q, "q_sigma": q * torch.exp(x)}[density]
    return x, g, edges, path


def _grid_that_fits(x, g, edges, path, n: int) -> torch.Tensor | None:
    """The n-step grid of a profile (:func:`_profile_arrays`), or None when it has fewer than n distinct levels on the
    path (on a VP table: n distinct table steps, where DDPM/DPMSolver land it, or it would run fewer steps than asked)."""
    sig = entropic_time_sigmas(x, g, n, edges=edges)
    if path is None:
        return sig
    sig = sig.clamp(path.sigma_min, path.sigma_max)  # the outer bin edges reach half a bin past the range
    levels = nearest_table_steps(path, sig) if path.is_discrete else sig
    return None if sig.numel() > 1 and bool((levels[1:] >= levels[:-1]).any()) else sig


def infogrid(source, num_inference_steps: int, *, density: str = DEFAULT_GRID_DENSITY, fit: bool = False) -> InferenceGrid:
    """The InfoGrid of a learned schedule: N VE σ at equal increments of entropic time (METHOD.md §8).

    Args:
        source: an :class:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler` (its current
            estimate), an offline :class:`~diffusers_infonoise.diagnostics.Profile`
            (``profile_from_model``: for models trained with any density), or a scheduler or
            pipeline whose scheduler config carries a learned schedule.
        num_inference_steps: N >= 1.
        density: ``"rho"``, ``"q"`` or ``"q_sigma"`` (module docstring).
        fit: when N steps do not fit the path's range as distinct levels, return the grid of the most
            that do (``len(grid) < N``) instead of raising. On a VP table the levels must fall on N distinct
            table steps: a 1000-step DDPM path takes far fewer than its 1000 (the entropic-time spacing crowds
            them where the profile is large).

    Raises:
        ValueError: unknown ``density``; a source without an estimate or a stored schedule; N steps that do
            not fit, without ``fit`` (the message names the most that do).
    """
    if density not in GRID_DENSITIES:
        raise ValueError(f"density: accepted values are {', '.join(GRID_DENSITIES)}, got {density!r}")
    profile = _profile_arrays(source, density)
    grid = lambda n: _grid_that_fits(*profile, n)  # noqa: E731
    sigmas = grid(num_inference_steps)
    if sigmas is None:
        # the largest n below N that fits (grid(1) always does), scanned down: on a VP table whether n fits is not
        # monotone in n (its steps round onto the table), so a bisection could name a smaller n than fits; nor can
        # more steps fit than the table has finite ones
        path = profile[3]
        top = num_inference_steps - 1
        if path is not None and path.is_discrete:
            top = min(top, int(torch.isfinite(path.sigmas_table).sum()))
        lo = next(n for n in range(top, 0, -1) if n == 1 or grid(n) is not None)
        if fit:
            return InferenceGrid(grid(lo), density)
        raise ValueError(
            f"num_inference_steps: {num_inference_steps} steps of this {density} grid do not fit the path's "
            f"range as distinct levels: the entropic-time "
            f"spacing crowds them where the profile is large; at most {lo} fit here"
        )
    return InferenceGrid(sigmas, density)
