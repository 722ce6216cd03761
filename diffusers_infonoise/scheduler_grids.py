"""A grid of inference noise levels on each diffusers scheduler (METHOD.md §8, last paragraph): what its
``set_timesteps`` takes to step through given VE σ (:func:`scheduler_grid_kwargs`), setting it and checking
the σ it then steps through (:func:`set_infogrid`). Where a grid comes from (the InfoGrid of a learned
profile) is :mod:`diffusers_infonoise.inference_grid`; this module knows the schedulers only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .paths import VPPath, path_class, path_from_scheduler

__all__ = [
    "InferenceGrid",
    "SUPPORTED_SCHEDULERS",
    "scheduler_grid_kwargs",
    "set_infogrid",
    "scheduler_sigmas_as_ve",
    "nearest_table_steps",
]


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


# -- the conventions of each scheduler's set_timesteps -------------------------------------------

_EDM = ("EDMEulerScheduler",)
_SIGMA_VP = ("EulerDiscreteScheduler",)
_TIMESTEP_VP = ("DDPMScheduler", "DPMSolverMultistepScheduler")
_FLOW = ("FlowMatchEulerDiscreteScheduler",)
SUPPORTED_SCHEDULERS = _EDM + _SIGMA_VP + _TIMESTEP_VP + _FLOW
#: config flags with which DPMSolverMultistepScheduler.set_timesteps refuses timesteps= (they re-space its levels)
_RESPACING_TIMESTEP_FLAGS = ("use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "use_lu_lambdas")


def _check_sigmas(sigmas) -> torch.Tensor:
    sig = torch.as_tensor(sigmas, dtype=torch.float64).flatten()
    if (
        sig.numel() < 1
        or not bool(torch.isfinite(sig).all())
        or bool((sig <= 0).any())
        or (sig.numel() > 1 and bool((sig[1:] >= sig[:-1]).any()))
    ):
        raise ValueError("sigmas: expected finite VE sigmas > 0, strictly decreasing (without the final 0)")
    return sig


def _flow_shift(noise_scheduler, mu: float | None) -> float:
    cfg = noise_scheduler.config
    for flag in ("shift_terminal", "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "invert_sigmas"):
        if cfg.get(flag):
            raise ValueError(
                f"noise_scheduler: {flag} re-spaces the sigmas it is given; a custom grid cannot be "
                "landed exactly (turn it off in the scheduler's config)"
            )
    if cfg.get("use_dynamic_shifting"):
        if mu is None:
            raise ValueError(
                "mu: the scheduler uses dynamic shifting and re-applies mu to the sigmas it is given; "
                "pass the pipeline's mu (Flux: calculate_shift of the image's sequence length)"
            )
        return math.exp(mu) if cfg.get("time_shift_type", "exponential") == "exponential" else float(mu)
    if mu is not None:
        raise ValueError("mu: the scheduler has use_dynamic_shifting=False (its static shift is in its config)")
    return float(cfg.shift)


def _check_range(sig: torch.Tensor, lo: float, hi: float) -> None:
    if float(sig[0]) > hi * (1 + 1e-3) or float(sig[-1]) < lo * (1 - 1e-3):  # float32 tables round
        raise ValueError(
            f"sigmas: [{float(sig[-1]):.4g}, {float(sig[0]):.4g}] leaves the scheduler's range of VE sigma [{lo:.4g}, {hi:.4g}]"
        )


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
            raise ValueError(
                f"noise_scheduler: EDMEulerScheduler with sigma_schedule={cfg.sigma_schedule!r} ignores "
                "the values of a custom grid; use sigma_schedule='karras'"
            )
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
        for flag in _RESPACING_TIMESTEP_FLAGS:  # DPMSolverMultistep refuses timesteps= under these ("DPM++ 2M Karras")
            if noise_scheduler.config.get(flag):
                raise ValueError(
                    f"noise_scheduler: {name} with {flag}=True refuses a custom grid (timesteps=); the grid already "
                    f"chooses the noise levels: {name}.from_config(scheduler.config, {flag}=False)"
                )
        path = path_from_scheduler(noise_scheduler)
        assert isinstance(path, VPPath)
        steps = torch.unique_consecutive(nearest_table_steps(path, sig))
        return {"timesteps": [int(t) for t in steps]}
    raise ValueError(
        f"noise_scheduler: {name} takes no custom grid of noise levels; supported: "
        f"{', '.join(SUPPORTED_SCHEDULERS)} (for a DDIM model, DDPM/DPMSolverMultistep take timesteps=, "
        "EulerDiscreteScheduler takes sigmas=)"
    )


def nearest_table_steps(path: VPPath, sigmas: torch.Tensor) -> torch.Tensor:
    """(N,) int64: the step of a VP path's ᾱ table nearest (in log σ) to each VE σ, among its finite σ; where a
    grid lands on DDPM/DPMSolver schedulers (``timesteps=``). Two σ in one table cell give the same step."""
    table = torch.log(path.sigmas_table)
    finite = torch.isfinite(table)
    ts = torch.arange(table.numel())[finite]
    idx = (table[finite][None, :] - torch.log(torch.as_tensor(sigmas, dtype=torch.float64))[:, None]).abs().argmin(dim=1)
    return ts[idx]


def scheduler_sigmas_as_ve(noise_scheduler) -> torch.Tensor:
    """The VE σ the scheduler will step through after ``set_timesteps`` (float64, without the final 0).

    Raises:
        ValueError: a scheduler other than :data:`SUPPORTED_SCHEDULERS` (DDIM, PNDM, LCM hold no σ to read)."""
    name = type(noise_scheduler).__name__
    if name not in SUPPORTED_SCHEDULERS:
        raise ValueError(f"noise_scheduler: {name} is not one whose noise levels can be read; supported: {', '.join(SUPPORTED_SCHEDULERS)}")
    if name in _TIMESTEP_VP:
        path = path_from_scheduler(noise_scheduler)
        return path.sigmas_table[noise_scheduler.timesteps.long().cpu()].to(torch.float64)
    return path_class(noise_scheduler).from_scheduler_sigmas(noise_scheduler.sigmas.to(torch.float64).cpu()[:-1])


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
            raise ValueError(f"noise_scheduler: {name} set other sigmas than the grid's ({got.tolist()[:4]}... vs {sig.tolist()[:4]}...)")
    return got
