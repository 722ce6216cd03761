"""Figures (matplotlib Figure objects on the Agg canvas, never a display): the schedule with φ and ρ̂,
drawn-level histograms, allocations against a profile."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from ..sampler import (
    InfoNoiseTrainingTimestepSampler,
    KingmaGaoSampler,
    TrainingTimestepSampler,
)
from .allocations import allocation, compare_allocations, profile_window, total_variation, window_mass
from .grid import _F64, DEFAULT_SIGMA_RANGE, Allocation, Profile, normalize_density

__all__ = [
    "plot_schedule",
    "plot_level_histogram",
    "plot_allocations",
    "plot_profile",
]


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
        sampler: a :class:`~diffusers_infonoise.TrainingTimestepSampler`.
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
    base = torch.exp(sampler.base.log_prob(x)) if sampler.base is not None else None
    prof = None
    if isinstance(sampler, InfoNoiseTrainingTimestepSampler) and sampler.estimator.is_ready:
        prof = sampler.profile()
    # φ per grid cell (cell-average π times w): on the estimator's bins for adaptive samplers, where
    # π is constant per bin, so that φ is comparable point by point with ρ̂
    estimator = getattr(sampler, "estimator", None)
    grid = estimator.centers if estimator is not None else x
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
        # the check of METHOD.md §5: TV(φ, ρ̂) ≤ η + 0.02; the draws-on-ρ̂ variant is far from it by design
        if sampler.settings.target_space == "pi":
            label += (
                f", TV(φ, ρ̂) = {sampler._allocation_total_variation():.2f} (draws on ρ̂: TV(π, ρ̂) = {sampler._draws_total_variation():.2f})"
            )
        else:
            label += f", TV(φ, ρ̂) = {sampler._allocation_total_variation():.2f} (floor {sampler.settings.floor:g})"
    ax1.plot(alloc.log_sigma.numpy(), alloc.phi.numpy(), color="C2", lw=2, drawstyle="steps-mid", label=label)
    ax1.set_ylabel("effective allocation")
    ax1.set_xlabel("log σ (VE)")
    ax1.legend(fontsize=8)
    _sigma_ticks(ax0)
    if title is None:
        lw = sampler.objective.record()["loss_weighting"]
        title = (
            f"{sampler.name} on the {sampler.path.kind} path · {sampler.prediction_type}, weighting {lw} · step {sampler.optimizer_step}"
        )
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_level_histogram(
    log_sigmas, sampler: TrainingTimestepSampler | None = None, path=None, *, bins: int = 60, title: str | None = None
):
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


def plot_allocations(
    allocations: Sequence[Allocation],
    path=None,
    *,
    rho=None,
    title: str | None = None,
    central: float = 0.9,
    rho_label: str = "ρ̂ (stored profile)",
):
    """Effective allocations φ of several schedules on one log-σ axis (VE σ), optionally against a
    profile ``rho`` (a (K,) density on the first allocation's grid, drawn as ``rho_label``), labelled with
    their share of mass inside ρ's central window when given.

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
        ax.plot(x0.numpy(), rho.numpy(), color="k", lw=2.5, label=rho_label)
        lo, hi = profile_window(rho, x0, central)
        ax.axvspan(lo, hi, color="C7", alpha=0.12, label=f"ρ̂ central {central:.0%} window")
    for i, a in enumerate(allocations):
        label = f"φ {a.name}"
        if rho is not None and a.log_sigma.shape == x0.shape and torch.allclose(a.log_sigma, x0):
            label += f": {window_mass(a.phi, rho, x0, central):.0%} in window, TV(φ, ρ̂) {total_variation(a.phi, rho, x0):.2f}"
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
        ax.plot(
            a.log_sigma.numpy(),
            a.phi.numpy(),
            color=f"C{i}",
            lw=1.6,
            label=f"φ {a.name}: {s['window_mass']:.0%} in window, TV(φ, ρ̂) {s['total_variation']:.2f}",
        )
    if profile.gate.pivot is not None:
        ax.axvline(math.log(profile.gate.pivot), color="k", ls=":", lw=1, label=f"gate pivot c = {profile.gate.pivot:.3g}")
    ax.set_xlabel("log σ (VE)")
    ax.set_ylabel("density per unit log σ")
    ax.legend(fontsize=7)
    _sigma_ticks(ax)
    fig.suptitle(title or "Entropy-rate profile and effective allocations", fontsize=10)
    return _save(fig, path)
