"""Kingma & Gao's (VDM++) adaptive importance sampler: the objective-preserving contrast to InfoNoise (METHOD.md §5,
last paragraph)."""

from __future__ import annotations

import torch

from .. import densities
from .adaptive import _AdaptiveSampler
from .settings import AdaptiveSettings

__all__ = ["KingmaGaoSampler"]


class KingmaGaoSampler(_AdaptiveSampler):
    """VDM++ adaptive importance sampling (Kingma & Gao 2023), the objective-preserving contrast.

    The objective ``E_{σ~base}[u·L]`` is kept: levels are drawn from ``p ∝ base·E[u·L]`` on the
    log-σ bins (with VDM++'s uniform-λ base this is their ``p ∝ w·loss``), mixed with the base by
    ``floor``, and each draw carries ``levels.loss_weights = base(σ)/p(σ)`` to multiply the
    per-sample loss with. No gate and no ``ρ̂/w`` are involved (METHOD.md §5, last paragraph).

    Args: as :class:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler`, with the settings it reads,
    :class:`~.settings.AdaptiveSettings` (no gate, m̂ cap or target: its π has no ρ̂ to gate, cap, temper or place).
    It learns no schedule to store or start from (``learns_schedule`` False).

    Raises:
        ValueError: a setting of InfoNoise's target (``gate``, ``mmse_cap``, ``temperature``, ...), naming it; an
            invalid setting, naming it and the accepted values.
        TypeError: a keyword that is no setting.
    """

    name = "kingma_gao"
    _title = "Kingma & Gao's sampler"
    # its π is the base times E[u·L] (no gate, no ρ̂ to cap, temper or place; the floor mixed in π)
    _settings_class = AdaptiveSettings

    def _statistic(self, levels, errors):
        # u·L = w·e: the weighted loss the objective averages
        sigmas = levels.sigmas.detach().to(errors.device, errors.dtype)
        return self.objective.x0_loss_weight(sigmas, sigma_data=self.sigma_data).to(errors.dtype) * errors

    def _build_probs(self):
        # the VDM++ proposal p ∝ base·E[u·L], mixed with the base in π-space (its objective is kept
        # by the importance weights, so φ is not what this sampler targets)
        masses = self.estimator.filled_m_hat() * self.base_masses
        return (1 - self.settings.floor) * masses / masses.sum() + self.settings.floor * self.base_masses

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
