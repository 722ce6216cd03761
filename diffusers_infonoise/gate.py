"""The clean-end gate of the entropy-rate profile (METHOD.md §5.5): ``r(σ) = q(σ)·σⁿ/(σⁿ + cⁿ)`` with
n = 3, and the rules that choose the pivot c (pinned, from the data's value grid, from the profile).
:class:`~diffusers_infonoise.estimator.ProfileEstimator` applies it (``resolve_gate``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = [
    "GateResult",
    "GATE_RULES",
    "GATE_EXPONENT",
    "parse_gate",
    "automatic_gate_pivot",
    "profile_gate_pivot",
    "data_grid_pivot",
    "apply_gate",
    "gated_shape",
    "log_gate",
]

GATE_EXPONENT = 3  # n of the paper's clean-end gate
AUTO_GATE_THRESHOLD = 0.002  # p of the automatic pivot rule (METHOD.md §5.5)
DATA_GRID_FRACTION = 0.1  # c = a tenth of the smallest gap between the data's values (METHOD.md §5.5, ours)

#: the gate rules a ``gate`` argument may name (besides a pinned float pivot and ``None``)
GATE_RULES = ("auto", "data", "profile", "paper")


@dataclass
class GateResult:
    """The pivot the gate used and why.

    ``source``: ``"pinned"`` (a float ``gate``), ``"data"`` (from the data's value grid), ``"profile"``
    (the repaired profile rule), ``"paper"`` (the paper's rule as first implemented), ``"fallback"``
    (``gate_fallback``, when the rule had nothing to go on or misfired) or ``"off"``. ``pivot`` is
    ``None`` when no gate applies.
    """

    pivot: float | None
    source: str
    reason: str = ""
    auto_pivot: float | None = None


def parse_gate(text: str) -> str | float | None:
    """A ``gate`` value from text (command lines): a rule of :data:`GATE_RULES`, ``none``/``off`` (no
    gate), each in any case, or a positive float pivot (VE σ).

    Raises:
        ValueError: anything else, naming the accepted values.
    """
    if text.lower() in ("none", "off"):
        return None
    if text.lower() in GATE_RULES:
        return text.lower()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"accepted values: {', '.join(GATE_RULES)}, none, or a positive float pivot (VE sigma); got {text!r}")
    return value


def automatic_gate_pivot(sigmas: torch.Tensor, m_hat: torch.Tensor, threshold: float = AUTO_GATE_THRESHOLD) -> float:
    """The automatic pivot c of METHOD.md §5.5 (ungated, before any fallback).

    On the per-dσ profile ``m̂/σ³`` normalised to max 1, c is the largest grid σ where it is still
    ``≥ threshold``, scanning from high σ down.

    Args:
        sigmas: (K,) VE σ of the bin centres, increasing. m_hat: (K,) x0-space errors.
    """
    per_dsigma = m_hat / sigmas**3
    per_dsigma = per_dsigma / per_dsigma.max()
    above = torch.nonzero(per_dsigma >= threshold).flatten()
    return float(sigmas[above.max()]) if above.numel() else float(sigmas[0])


def profile_gate_pivot(sigmas: torch.Tensor, m_hat: torch.Tensor, threshold: float = AUTO_GATE_THRESHOLD) -> float | None:
    """The paper's rule repaired (METHOD.md §5.5, ours): the onset of the per-dσ profile.

    On ``m̂/σ³`` normalised to max 1, c is the *smallest* grid σ where it reaches ``threshold``,
    scanning from the clean end up: below c the data has (almost) nothing left to resolve. A profile
    that is already above the threshold at σ_min (continuous data, or a trained network's model error
    at the clean end) needs no gate: ``None``.

    Args:
        sigmas: (K,) VE σ of the bin centres, increasing. m_hat: (K,) x0-space errors.
    """
    per_dsigma = m_hat / sigmas**3
    per_dsigma = per_dsigma / per_dsigma.max()
    above = torch.nonzero(per_dsigma >= threshold).flatten()
    if not above.numel() or int(above.min()) == 0:
        return None
    return float(sigmas[above.min()])


def data_grid_pivot(min_gap: float, fraction: float = DATA_GRID_FRACTION) -> float:
    """c from the data's own value grid (METHOD.md §5.5, ours): ``fraction`` of the smallest gap
    between distinct values of x0 (a gap of 2 on {−1, 1} gives the paper's 0.2; 8-bit images in
    [−1, 1] give ≈ 0.0008, below every path's σ_min, i.e. no gate; continuous data gives ≈ 0)."""
    return fraction * float(min_gap)


def log_gate(sigmas: torch.Tensor, pivot: float | None) -> torch.Tensor:
    """``log(σⁿ/(σⁿ + cⁿ)) = −softplus(n·(log c − log σ))`` with n = 3 (paper; METHOD.md §5.5), finite for
    every σ > 0 and pivot c > 0 (the gate itself underflows to 0 once c/σ ≳ 1e100); zeros when
    ``pivot`` is None. ``sigmas``: VE σ, any shape, float64."""
    if pivot is None:
        return torch.zeros_like(sigmas)
    return -torch.nn.functional.softplus(GATE_EXPONENT * (math.log(pivot) - torch.log(sigmas)))


def apply_gate(sigmas: torch.Tensor, q: torch.Tensor, pivot: float | None) -> torch.Tensor:
    """``r = q·σⁿ/(σⁿ + cⁿ)`` with n = 3 (paper); ``pivot=None`` returns q unchanged."""
    return q * torch.exp(log_gate(sigmas, pivot))


def gated_shape(sigmas: torch.Tensor, q: torch.Tensor, pivot: float | None) -> torch.Tensor:
    """:func:`apply_gate` up to a constant factor, with its largest value 1: the gated profile's shape
    computed in log space, so that a pivot far above the grid (every bin gated to ~0) still
    normalises to ρ̂ ∝ q·σⁿ instead of 0/0."""
    log_r = torch.log(q) + log_gate(sigmas, pivot)
    return torch.exp(log_r - log_r.max())
