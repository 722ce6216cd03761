"""The loss-slope sampler: CDCD-style time warping, an adaptive baseline that is not InfoNoise (METHOD.md §5.11).

Dieleman et al. (2022, "Continuous diffusion for categorical data", §3 "time warping"), and DeepMind's Simplex
Diffusion Models after them, fit a monotone function F of the noise level to the training loss and use F,
normalised, as the CDF of the noise levels drawn in training: the density is ∝ dF/dt, so the draws go where the
loss still changes with the noise level. Here the axis is ln σ (VE σ) and the loss is the one InfoNoise already
bins (:class:`~diffusers_infonoise.estimator.ProfileEstimator`), so the two differ only in what they make of it.
"""

from __future__ import annotations

import torch

from .adaptive import _AdaptiveSampler
from .settings import LossSlopeSettings

__all__ = ["LossSlopeSampler", "isotonic_increasing"]


def isotonic_increasing(values: torch.Tensor) -> torch.Tensor:
    """The least-squares non-decreasing fit of a (K,) sequence (pool adjacent violators, equal weights).

    Returns a (K,) tensor of the input's dtype. Raises ValueError for an input that is not 1-D and finite.
    """
    values = torch.as_tensor(values)
    if values.ndim != 1 or not bool(torch.isfinite(values).all()):
        raise ValueError(f"values: expected a finite 1-D tensor, got shape {tuple(values.shape)}")
    means: list[float] = []
    counts: list[int] = []
    for v in values.tolist():
        means.append(float(v))
        counts.append(1)
        while len(means) > 1 and means[-2] > means[-1]:  # pool the violating pair into one block
            m, c = means.pop(), counts.pop()
            means[-1] = (means[-1] * counts[-1] + m * c) / (counts[-1] + c)
            counts[-1] += c
    return torch.tensor([m for m, c in zip(means, counts) for _ in range(c)], dtype=values.dtype)


class LossSlopeSampler(_AdaptiveSampler):
    """Noise levels drawn from the slope of the training loss over ln σ (CDCD-style time warping; METHOD.md §5.11).

    The loss it fits is the one InfoNoise bins: each sample's **unweighted x0-space error** ``e`` (the per-sample
    loss converted by METHOD.md §3, the same for every ``prediction_type``), on the K bins uniform in ln σ (VE σ)
    of the estimator, with InfoNoise's EMA, ``min_count`` carry-over, interpolation of unfilled bins and smoothing
    (METHOD.md §5.4), and its ``mmse_cap`` (default ``"auto"`` for ε and v losses, none otherwise). At a refresh:

    1. ``F_k``: the least-squares **non-decreasing** fit over ln σ of the bins' ``m̂_k``
       (:func:`isotonic_increasing`; a running maximum would let one noisy bin flatten every bin above it),
    2. the slope at each bin centre by central differences, one-sided at the two end bins,
       ``s_k = (F_{k+1} − F_{k−1}) / 2`` (``F_1 − F_0`` and ``F_{K−1} − F_{K−2}`` at the ends), i.e. the masses of
       ``dF/d ln σ`` on the bins (F linear in ln σ between centres), normalised: F is the CDF of the draws,
    3. the floor in π-space, ``π = (1 − η)·s/Σs + η·π_base`` (η = ``floor``, default 0.05); where F is flat
       everywhere (Σs = 0) π stays on the base.

    No ρ̂, no w and no gate: the loss weighting of the run does not enter π, and the draws carry no importance
    weights (the objective changes, as with InfoNoise). The warm-up, base density, refresh cadence, EMA,
    ``min_count``, grid and data statistics are InfoNoise's (:class:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler`),
    with the same defaults. For Gaussian data of variance s² the Bayes error is ``mmse(σ) = σ²s²/(σ²+s²)``, so F is
    that and ``dF/d ln σ = 2σ²s⁴/(σ²+s²)²``, peaked at σ = s (the test of this class).

    Args:
        path: the corruption path. Keywords: ``prediction_type``, ``loss_weighting``, ``snr_gamma`` and the settings it
            reads, :class:`~.settings.LossSlopeSettings` (InfoNoise's but the gate and the target's: the floor is always
            mixed in π).

    Raises:
        ValueError: invalid arguments, each naming the argument and the accepted values; a setting of InfoNoise's
            target (``gate``, ``temperature``, ...), naming it.
        TypeError: a keyword that is no setting.
    """

    name = "loss_slope"
    _title = "the loss-slope sampler"
    # no gate and no ρ̂ to temper or place; the floor always mixed in π
    _settings_class = LossSlopeSettings

    def _statistic(self, levels, errors):
        return errors  # the unweighted x0-space error, binned as InfoNoise bins it

    def fitted_loss(self) -> torch.Tensor:
        """(K,) float64 F on the bin centres: the non-decreasing fit of the capped, filled, smoothed m̂.

        Raises:
            RuntimeError: before two bins hold an estimate.
        """
        m = self.estimator.filled_m_hat()
        if self.estimator.mmse_cap is not None:
            m = m.clamp(max=self.estimator.mmse_cap)
        return isotonic_increasing(m)

    def _build_probs(self) -> torch.Tensor:
        f = self.fitted_loss()
        slope = torch.empty_like(f)
        slope[1:-1] = (f[2:] - f[:-2]) / 2
        slope[0], slope[-1] = f[1] - f[0], f[-1] - f[-2]
        total = float(slope.sum())
        if not total > 0:
            return self.base_masses.clone()
        return (1 - self.settings.floor) * slope / total + self.settings.floor * self.base_masses
