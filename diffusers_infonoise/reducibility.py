"""How fast each noise level is still learning: the reducibility R̂ of target C (docs/METHOD.md §4.1, candidate C).

:class:`LearningExponents` fits, on coarse groups of the estimator's bins, the rate at which a level's training error
falls with the level's own draws, ``β = −d ln e / d ln n`` (a learning-curve exponent: e ∝ n^−β), from the windows of
errors the estimator folds in at each refresh. ``R̂ = β·m̂`` is then the x0 error a level sheds per e-fold of its draws,
and target C draws ``π ∝ ρ̂·R̂`` (its derivation: docs/METHOD.md §4.1).

The fit, per bin k, is a discounted least-squares line of ``y = ln(mean error of a window)`` on
``x = ln(training draws of bin k so far, at the window's middle)``; a group pools its bins' centred sums (a mean per bin,
so that a group's levels may differ in their error's size), and ``β_g = max(0, −slope_g)``. A bin emits a point once it
holds ``min_count`` samples (fewer are carried to the next refresh, as the estimator's §5.4 carry-over), so that
``ln`` of a window's mean is not taken on one or two samples. All statistics are float64 and summed over processes
(they are read from the estimator's merged windows), so every rank holds the same state.
"""

from __future__ import annotations

import math

import torch

__all__ = ["LearningExponents", "NUM_GROUPS", "MIN_POINTS", "MEMORY_FACTOR", "PLATEAU", "fit_horizon"]

#: coarse groups of bins the exponent is fitted on (8 of 64 bins: about 1.3 ln-units of VE σ each on the EDM grid;
#: K groups of one bin when K < 8)
NUM_GROUPS = 8
#: points (windows) a bin needs before its group's exponent counts; a group needs one such bin
MIN_POINTS = 3
#: the fit's horizon in units of the estimator's memory H (docs/METHOD.md §5.10: an eighth of the run): over one H a
#: level's ln-draws spread by about 1/8 e-fold, too little to read a slope through the windows' noise; 4·H, about half
#: the run, spreads them by about 1/2 (:func:`fit_horizon`)
MEMORY_FACTOR = 4
#: a level that sheds less than this share of its error per e-fold of its draws is not learning: when no group's
#: exponent reaches it (a plateau), the budget says nothing about where to draw, and π follows ρ̂/w
PLATEAU = 0.01
#: a group's exponent needs its points' ln-draws to spread by at least this much (standard deviation, e-folds)
MIN_SPREAD = 0.05


def fit_horizon(memory: float, step: int) -> float:
    """The fit's horizon in optimizer steps: ``MEMORY_FACTOR·H`` (``memory`` H, the estimator's), and at least half the
    steps so far, so that H's cap of 500 steps (§5.10) does not shrink the ln-draws' spread in a long run below what a
    slope can be read from (in a run of T ≤ 4000 steps H = T/8 and this is 4·H)."""
    return max(MEMORY_FACTOR * float(memory), 0.5 * float(step))


_STATE_KEYS = ("draws", "open_sums", "open_counts", "weight", "sum_x", "sum_y", "sum_xx", "sum_xy", "points")


class LearningExponents:
    """Per coarse group of bins, the exponent ``β = −d ln e / d ln n`` of a level's error against its own draws.

    Args:
        num_bins: K, the estimator's bins (uniform in ln σ, VE σ).
        num_groups: G contiguous groups of about K/G bins the exponent is fitted on (default :data:`NUM_GROUPS`; K when
            K is smaller).
        min_count: samples a bin's window needs before it makes a point (smaller windows are carried over).

    Raises:
        ValueError: an invalid argument, naming it.
    """

    def __init__(self, num_bins: int, *, num_groups: int = NUM_GROUPS, min_count: int = 8):
        if not (isinstance(num_bins, int) and num_bins >= 2):
            raise ValueError(f"num_bins: must be an int >= 2, got {num_bins!r}")
        if not (isinstance(num_groups, int) and num_groups >= 1):
            raise ValueError(f"num_groups: must be an int >= 1, got {num_groups!r}")
        num_groups = min(num_groups, num_bins)
        if not (isinstance(min_count, int) and min_count >= 1):
            raise ValueError(f"min_count: must be an int >= 1, got {min_count!r}")
        self.num_bins, self.num_groups, self.min_count = num_bins, num_groups, min_count
        self.group = torch.arange(num_bins) * num_groups // num_bins  # (K,) the group of each bin
        for key in _STATE_KEYS:
            setattr(self, key, torch.zeros(num_bins, dtype=torch.float64))
        self.last_step = 0

    def observe(self, step: int, window_sums: torch.Tensor, window_counts: torch.Tensor, memory: float) -> None:
        """Fold in one refresh's window: ``window_sums``/``window_counts`` (K,) float64, the x0 errors of the training
        draws since the last refresh (all processes), at optimizer ``step``. Every earlier point's weight decays by
        ``exp(−(step − last step)/memory)`` (``memory``: optimizer steps, the fit's horizon, :func:`fit_horizon`)."""
        sums = torch.as_tensor(window_sums, dtype=torch.float64).cpu()
        counts = torch.as_tensor(window_counts, dtype=torch.float64).cpu()
        decay = math.exp(-max(0, int(step) - self.last_step) / float(memory))
        for key in ("weight", "sum_x", "sum_y", "sum_xx", "sum_xy"):
            setattr(self, key, getattr(self, key) * decay)
        self.open_sums = self.open_sums + sums
        self.open_counts = self.open_counts + counts
        emit = (self.open_counts >= self.min_count) & (self.open_sums > 0)
        n = torch.where(emit, self.open_counts, torch.zeros_like(self.open_counts))
        x = torch.log(self.draws + 0.5 * n.clamp_min(1.0))  # ln of the bin's draws at the window's middle
        y = torch.log(torch.where(emit, self.open_sums / self.open_counts.clamp_min(1.0), torch.ones_like(n)))
        # each point weighs its samples (a window's mean is that much less noisy)
        self.weight, self.sum_x, self.sum_y = self.weight + n, self.sum_x + n * x, self.sum_y + n * y
        self.sum_xx, self.sum_xy = self.sum_xx + n * x * x, self.sum_xy + n * x * y
        self.points = self.points + emit.to(torch.float64)
        self.draws = self.draws + torch.where(emit, self.open_counts, torch.zeros_like(n))
        self.open_sums = torch.where(emit, torch.zeros_like(n), self.open_sums)
        self.open_counts = torch.where(emit, torch.zeros_like(n), self.open_counts)
        self.last_step = int(step)

    def exponents(self) -> torch.Tensor:
        """(G,) float64 ``β_g = max(0, −slope_g)``, NaN for a group not fitted yet (no bin with :data:`MIN_POINTS` points,
        or its points' ln-draws spread by less than :data:`MIN_SPREAD`)."""
        w = self.weight.clamp_min(1e-300)
        cxx = (self.sum_xx - self.sum_x**2 / w).clamp_min(0.0) * (self.weight > 0)
        cxy = (self.sum_xy - self.sum_x * self.sum_y / w) * (self.weight > 0)
        g = self.num_groups
        den = torch.zeros(g, dtype=torch.float64).index_add_(0, self.group, cxx)
        num = torch.zeros(g, dtype=torch.float64).index_add_(0, self.group, cxy)
        total = torch.zeros(g, dtype=torch.float64).index_add_(0, self.group, self.weight)
        points = torch.stack([self.points[self.group == i].max() for i in range(g)])  # the group's best-sampled bin
        ready = (points >= MIN_POINTS) & (den > MIN_SPREAD**2 * total) & (total > 0)
        beta = (-num / den.clamp_min(1e-300)).clamp_min(0.0)
        return torch.where(ready, beta, torch.full_like(beta, math.nan))

    def reducibility(self, centers: torch.Tensor, m_hat: torch.Tensor) -> torch.Tensor | None:
        """(K,) float64 ``R̂ = β·m̂``: the x0 error each bin sheds per e-fold of its draws, β interpolated linearly in
        ln σ between the fitted groups' centres (``centers``: the (K,) bin centres, ln VE σ) and flat beyond them;
        ``m_hat``: (K,) the filled x0 error. None while no group is fitted, or none learns faster than :data:`PLATEAU`."""
        beta = self.exponents()
        fitted = ~torch.isnan(beta)
        if not bool(fitted.any()) or float(beta[fitted].max()) < PLATEAU:
            return None
        centers = torch.as_tensor(centers, dtype=torch.float64)
        group_centers = torch.zeros(self.num_groups, dtype=torch.float64).index_add_(0, self.group, centers)
        group_centers = group_centers / torch.bincount(self.group, minlength=self.num_groups)
        xp, fp = group_centers[fitted], beta[fitted]
        if xp.numel() == 1:
            per_bin = fp.expand(self.num_bins).clone()
        else:
            j = torch.searchsorted(xp, centers).clamp(1, xp.numel() - 1)
            t = ((centers - xp[j - 1]) / (xp[j] - xp[j - 1])).clamp(0, 1)
            per_bin = fp[j - 1] + t * (fp[j] - fp[j - 1])
        return per_bin * torch.as_tensor(m_hat, dtype=torch.float64)

    def state_dict(self) -> dict:
        """Every statistic (CPU float64 (K,) tensors) and the last step, for an exact resume."""
        return {**{key: getattr(self, key).clone() for key in _STATE_KEYS}, "last_step": self.last_step}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output (also a stored schedule's ``reducibility``, as lists).

        Raises:
            ValueError: missing keys, or a statistic of another shape, not finite, or (but the cross sums) negative.
        """
        if not isinstance(state, dict) or any(k not in state for k in (*_STATE_KEYS, "last_step")):
            raise ValueError(f"reducibility: expected a dict with {', '.join((*_STATE_KEYS, 'last_step'))}")
        values = {}
        for key in _STATE_KEYS:
            try:
                v = torch.as_tensor(state[key], dtype=torch.float64)
            except (TypeError, ValueError, RuntimeError):
                raise ValueError(f"reducibility[{key!r}]: expected {self.num_bins} finite numbers") from None
            if v.shape != (self.num_bins,) or not bool(torch.isfinite(v).all()):
                raise ValueError(f"reducibility[{key!r}]: expected {self.num_bins} finite numbers")
            if key not in ("sum_x", "sum_y", "sum_xy") and bool((v < 0).any()):
                raise ValueError(f"reducibility[{key!r}]: expected values >= 0")
            values[key] = v.clone()
        step = state["last_step"]
        if not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
            raise ValueError(f"reducibility['last_step']: expected an int >= 0, got {step!r}")
        for key, v in values.items():
            setattr(self, key, v)
        self.last_step = step
