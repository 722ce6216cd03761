"""InfoGrid: inference steps placed by the learned profile (METHOD.md §8).

Entropic time ``τ(σ) = ∫_{σ_min}^{σ} g d log s / ∫_{σ_min}^{σ_max} g d log s`` for an entropy-rate
density ``g`` per unit log σ, and N steps at ``σ_i = τ⁻¹(1 − i/N)``, i = 0..N−1, then 0. The
choices of ``g`` (:data:`GRID_DENSITIES`):

* ``"rho"``: the gated profile ρ̂, which the training density follows (φ = π·w ≈ ρ̂);
* ``"q"``: the ungated rate ``q = m̂/σ²`` (I-MMSE);
* ``"q_sigma"``: ``q·σ``, the extra σ factor by which the paper's v1 says its inference grid
  differs from the training density.

All σ here are VE σ (``x = a·(x0 + σ·ε)``), whatever the path: :func:`scheduler_grid_kwargs`
converts them to what each diffusers scheduler's ``set_timesteps`` (and so each pipeline's
``sigmas=``/``timesteps=`` argument) takes, and :func:`set_infogrid` sets them and checks that the
scheduler then steps through the σ named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .paths import VPPath, path_from_scheduler, scheduler_kind

__all__ = [
    "GRID_DENSITIES",
    "DEFAULT_GRID_DENSITY",
    "InferenceGrid",
    "entropic_time_sigmas",
    "infogrid",
    "scheduler_grid_kwargs",
    "set_infogrid",
    "scheduler_sigmas_as_ve",
]

GRID_DENSITIES = ("rho", "q", "q_sigma")
#: the choice of METHOD.md §8 the benchmarks pick: q·σ gave the lowest FD (or within 0.5%) in every row of
#: benchmarks/results/infogrid_recheck.md (0.23-0.43 of the default spacing at NFE 4, 0.72-0.90 at 18)
DEFAULT_GRID_DENSITY = "q_sigma"


@dataclass(frozen=True)
class InferenceGrid:
    """N inference noise levels.

    Attributes:
        sigmas: (N,) float64 VE σ, decreasing, from σ_max; the final step to 0 is the scheduler's.
        density: which entropy-rate density placed them (:data:`GRID_DENSITIES`), or ``"given"``.
    """

    sigmas: torch.Tensor
    density: str = "given"

    def __len__(self) -> int:
        return self.sigmas.numel()

    def for_scheduler(self, noise_scheduler, *, mu: float | None = None) -> dict:
        """:func:`scheduler_grid_kwargs` of this grid."""
        return scheduler_grid_kwargs(noise_scheduler, self.sigmas, mu=mu)


def entropic_time_sigmas(log_sigma: torch.Tensor, density: torch.Tensor, num_inference_steps: int, *,
                         edges: torch.Tensor | None = None) -> torch.Tensor:
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


def _profile_arrays(source, density: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(log σ, g, edges) of a sampler, an offline Profile, or a scheduler/pipeline with a stored schedule."""
    from .diagnostics.grid import Profile
    from .samplers import InfoNoiseTrainingTimestepSampler

    if not isinstance(source, (InfoNoiseTrainingTimestepSampler, Profile)):
        from .diagnostics.profiles import load_learned_sampler

        scheduler = getattr(source, "scheduler", source)  # a pipeline or its scheduler
        source = load_learned_sampler(scheduler)
    if isinstance(source, Profile):
        x, q, rho, edges, path = source.log_sigma, source.q, source.rho_hat, source.edges, None
    else:
        if source.estimator.num_filled < 2:
            raise ValueError("source: the sampler has no estimate yet (fewer than two bins filled); train it first")
        if source.estimator.mmse_cap is not None:
            import warnings

            warnings.warn("infogrid: this schedule's m̂ is capped at the data's variance (an epsilon/v loss, METHOD.md "
                          "§5.4), which hides the model's own error at large sigma; measured on DDPM-epsilon, its grid "
                          "sampled worse than trailing spacing. Prefer the model's offline profile "
                          "(diagnostics.profile_from_model) for the grid of an epsilon/v model (METHOD.md §8)",
                          UserWarning, stacklevel=3)
        p = source.profile()
        x, q, rho, edges, path = p["log_sigma"], p["q"], p["rho_hat"], source.edges, source.path
    g = {"rho": rho, "q": q, "q_sigma": q * torch.exp(x)}[density]
    return x, g, edges, path


def infogrid(source, num_inference_steps: int, *, density: str = DEFAULT_GRID_DENSITY) -> InferenceGrid:
    """The InfoGrid of a learned schedule: N VE σ at equal increments of entropic time (METHOD.md §8).

    Args:
        source: an :class:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler` (its current
            estimate), an offline :class:`~diffusers_infonoise.diagnostics.Profile`
            (``profile_from_model``: for models trained with any density), or a scheduler or
            pipeline whose scheduler config carries a learned schedule.
        num_inference_steps: N >= 1.
        density: ``"rho"``, ``"q"`` or ``"q_sigma"`` (module docstring).

    Raises:
        ValueError: unknown ``density``; a source without an estimate or a stored schedule.
    """
    if density not in GRID_DENSITIES:
        raise ValueError(f"density: accepted values are {', '.join(GRID_DENSITIES)}, got {density!r}")
    x, g, edges, path = _profile_arrays(source, density)

    def grid(n: int) -> torch.Tensor | None:
        """The n-step grid, or None when it has fewer than n distinct levels on the path."""
        sig = entropic_time_sigmas(x, g, n, edges=edges)
        if path is None:
            return sig
        sig = sig.clamp(path.sigma_min, path.sigma_max)  # the outer bin edges reach half a bin past the range
        return None if sig.numel() > 1 and bool((sig[1:] >= sig[:-1]).any()) else sig

    sigmas = grid(num_inference_steps)
    if sigmas is None:
        lo, hi = 1, num_inference_steps  # the largest n that fits (grid(1) always does)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if grid(mid) is not None else (lo, mid)
        raise ValueError(f"num_inference_steps: {num_inference_steps} steps of this {density} grid do not fit the path's "
                         f"range as distinct levels: the entropic-time "
                         f"spacing crowds them where the profile is large; at most {lo} fit here")
    return InferenceGrid(sigmas, density)


# -- the conventions of each scheduler's set_timesteps -------------------------------------------

_EDM = ("EDMEulerScheduler",)
_SIGMA_VP = ("EulerDiscreteScheduler",)
_TIMESTEP_VP = ("DDPMScheduler", "DPMSolverMultistepScheduler")
_FLOW = ("FlowMatchEulerDiscreteScheduler",)
SUPPORTED_SCHEDULERS = _EDM + _SIGMA_VP + _TIMESTEP_VP + _FLOW


def _check_sigmas(sigmas) -> torch.Tensor:
    sig = torch.as_tensor(sigmas, dtype=torch.float64).flatten()
    if sig.numel() < 1 or not bool(torch.isfinite(sig).all()) or bool((sig <= 0).any()) or \
            (sig.numel() > 1 and bool((sig[1:] >= sig[:-1]).any())):
        raise ValueError("sigmas: expected finite VE sigmas > 0, strictly decreasing (without the final 0)")
    return sig


def _flow_shift(noise_scheduler, mu: float | None) -> float:
    cfg = noise_scheduler.config
    for flag in ("shift_terminal", "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "invert_sigmas"):
        if cfg.get(flag):
            raise ValueError(f"noise_scheduler: {flag} re-spaces the sigmas it is given; a custom grid cannot be "
                             "landed exactly (turn it off in the scheduler's config)")
    if cfg.get("use_dynamic_shifting"):
        if mu is None:
            raise ValueError("mu: the scheduler uses dynamic shifting and re-applies mu to the sigmas it is given; "
                             "pass the pipeline's mu (Flux: calculate_shift of the image's sequence length)")
        return math.exp(mu) if cfg.get("time_shift_type", "exponential") == "exponential" else float(mu)
    if mu is not None:
        raise ValueError("mu: the scheduler has use_dynamic_shifting=False (its static shift is in its config)")
    return float(cfg.shift)


def _check_range(sig: torch.Tensor, lo: float, hi: float) -> None:
    if float(sig[0]) > hi * (1 + 1e-3) or float(sig[-1]) < lo * (1 - 1e-3):  # float32 tables round
        raise ValueError(f"sigmas: [{float(sig[-1]):.4g}, {float(sig[0]):.4g}] leaves the scheduler's range of VE sigma "
                         f"[{lo:.4g}, {hi:.4g}]")


def scheduler_grid_kwargs(noise_scheduler, sigmas, *, mu: float | None = None) -> dict:
    """What ``noise_scheduler.set_timesteps`` (and a pipeline's call) takes to step through VE ``sigmas``.

    ===================================== ==========================================================
    scheduler                             returned
    ===================================== ==========================================================
    EDMEulerScheduler (karras schedule)   ``{"sigmas": ramp}``: its ``sigmas=`` is a position in [0, 1]
                                          on the Karras ramp, inverted here so the σ are the ones named
    EulerDiscreteScheduler (VP)           ``{"sigmas": [σ_0..σ_{N−1}, 0]}`` (its last entry is the final σ)
    FlowMatchEulerDiscreteScheduler       ``{"sigmas": s'}`` with the scheduler's shift (or ``mu``)
                                          un-applied: it re-applies it to what it is given
    DDPMScheduler, DPMSolverMultistep     ``{"timesteps": [t...]}``: the nearest integer steps of the
                                          ᾱ table, duplicates removed (so possibly fewer than N)
    ===================================== ==========================================================

    Args:
        sigmas: (N,) VE σ, strictly decreasing, > 0.
        mu: the pipeline's dynamic shift, for flow schedulers with ``use_dynamic_shifting=True``.

    Raises:
        ValueError: a scheduler that takes no custom grid (DDIM, EDM DPM-Solver: use DDPM/DPMSolver or
        EDMEuler/Euler), a config that re-spaces given sigmas, or σ outside the scheduler's range.
    """
    sig = _check_sigmas(sigmas)
    name = type(noise_scheduler).__name__
    if mu is not None and name not in _FLOW:
        raise ValueError(f"mu: only flow-matching schedulers take a dynamic shift; {name} does not")
    if name in _SIGMA_VP + _TIMESTEP_VP + _FLOW:
        path = path_from_scheduler(noise_scheduler, mu=mu) if name in _FLOW else path_from_scheduler(noise_scheduler)
        _check_range(sig, path.sigma_min, path.sigma_max)
    if name in _EDM:
        cfg = noise_scheduler.config
        if cfg.sigma_schedule != "karras":
            raise ValueError(f"noise_scheduler: EDMEulerScheduler with sigma_schedule={cfg.sigma_schedule!r} ignores "
                             "the values of a custom grid; use sigma_schedule='karras'")
        lo, hi, rho = float(cfg.sigma_min), float(cfg.sigma_max), float(cfg.rho)
        _check_range(sig, lo, hi)
        ramp = (sig ** (1 / rho) - hi ** (1 / rho)) / (lo ** (1 / rho) - hi ** (1 / rho))
        return {"sigmas": ramp.clamp(0, 1).to(torch.float64)}
    if name in _SIGMA_VP:
        return {"sigmas": [*(float(s) for s in sig), 0.0]}
    if name in _FLOW:
        k = _flow_shift(noise_scheduler, mu)
        s = sig / (1 + sig)
        unshifted = s / (k - (k - 1) * s)  # the inverse of s = k·s'/(1 + (k − 1)·s')
        return {"sigmas": [float(v) for v in unshifted]}
    if name in _TIMESTEP_VP:
        path = path_from_scheduler(noise_scheduler)
        assert isinstance(path, VPPath)
        table = torch.log(path.sigmas_table)
        finite = torch.isfinite(table)
        ts = torch.arange(table.numel())[finite]
        idx = (table[finite][None, :] - torch.log(sig)[:, None]).abs().argmin(dim=1)
        steps = torch.unique_consecutive(ts[idx])
        return {"timesteps": [int(t) for t in steps]}
    raise ValueError(f"noise_scheduler: {name} takes no custom grid of noise levels; supported: "
                     f"{', '.join(SUPPORTED_SCHEDULERS)} (for a DDIM model, DDPM/DPMSolverMultistep take timesteps=, "
                     "EulerDiscreteScheduler takes sigmas=)")


def scheduler_sigmas_as_ve(noise_scheduler) -> torch.Tensor:
    """The VE σ the scheduler will step through after ``set_timesteps`` (float64, without the final 0)."""
    name = type(noise_scheduler).__name__
    if name in _TIMESTEP_VP:
        path = path_from_scheduler(noise_scheduler)
        return path.sigmas_table[noise_scheduler.timesteps.long().cpu()].to(torch.float64)
    sig = noise_scheduler.sigmas.to(torch.float64).cpu()[:-1]
    if scheduler_kind(noise_scheduler) == "flow":
        return sig / (1 - sig)
    return sig


def set_infogrid(noise_scheduler, grid, *, device=None, mu: float | None = None, rtol: float = 1e-4) -> torch.Tensor:
    """``noise_scheduler.set_timesteps`` with the grid, checked: returns the VE σ it now steps through.

    Args:
        grid: an :class:`InferenceGrid` or (N,) VE σ.
        mu: flow schedulers with dynamic shifting: the pipeline's ``mu``.
        rtol: the relative error allowed between the σ named and the σ set (float32 rounding; VP
            timestep schedulers land on the nearest table step instead, and are not checked by it).

    Raises:
        ValueError: as :func:`scheduler_grid_kwargs`, or when the scheduler ends up on other σ.
    """
    sig = grid.sigmas if isinstance(grid, InferenceGrid) else _check_sigmas(grid)
    kwargs = scheduler_grid_kwargs(noise_scheduler, sig, mu=mu)
    name = type(noise_scheduler).__name__
    if name in _EDM:
        noise_scheduler.set_timesteps(num_inference_steps=len(sig), device=device, **kwargs)
    elif name in _FLOW and mu is not None:
        noise_scheduler.set_timesteps(device=device, mu=mu, **kwargs)
    else:
        noise_scheduler.set_timesteps(device=device, **kwargs)
    got = scheduler_sigmas_as_ve(noise_scheduler)
    if name not in _TIMESTEP_VP:
        if got.shape != sig.shape or not torch.allclose(got, sig, rtol=rtol, atol=0):
            raise ValueError(f"noise_scheduler: {name} set other sigmas than the grid's ({got.tolist()[:4]}... vs "
                             f"{sig.tolist()[:4]}...)")
    return got
