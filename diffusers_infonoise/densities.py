"""Densities over ``x = log σ`` (VE σ), each with its CDF and inverse CDF (METHOD.md §1, §5.8).

Every training-noise distribution in this package is one of these objects, so all of them can be
drawn, compared and integrated on the same axis. All methods take and return float64 tensors
of any shape; ``log_prob`` is the log density **per unit log σ**. To move to another coordinate
``u`` multiply by the Jacobian ``|d log σ/du|`` (METHOD.md §1); :func:`log_prob_in` does that for
λ, σ and the flow noise level s.

Closed forms used (u ~ U(0, 1); derivations in the docstrings):

* :class:`Normal` – EDM log-normal ``ln σ ~ N(P_mean, P_std²)`` (Karras et al. 2022), and the
  SD3 logit-normal on the flow noise level, since ``logit(s) = log σ`` exactly.
* :class:`Logistic` – uniform flow noise level s (``log σ = logit(s)``, s uniform).
* :class:`Uniform` – log-uniform σ.
* :class:`KarrasRamp` – uniform position on EDM's ρ-ramp between σ_max and σ_min.
* :class:`Cosine` – ``σ = σ_data·tan(πu/2)``.
* :class:`Mode` – SD3 mode sampling on the flow noise level.
* :class:`Piecewise` – piecewise-constant density on bins (the learned InfoNoise π).
* :class:`Shifted`, :class:`Truncated` – translation (a flow ``shift``) and restriction to a range.
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = [
    "Density",
    "Normal",
    "Logistic",
    "Uniform",
    "KarrasRamp",
    "Cosine",
    "Mode",
    "Piecewise",
    "Shifted",
    "Truncated",
    "DensityRangeError",
    "bin_masses",
    "log_prob_in",
]

_F64 = torch.float64
_TINY = 1e-300


def _t(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=_F64)


def searchsorted(sorted_sequence: torch.Tensor, values: torch.Tensor, *, right: bool = False) -> torch.Tensor:
    """``torch.searchsorted`` of a 1-D sorted sequence; on CPU computed by NumPy (same results,
    including ±inf and NaN), returned as int64.

    Why: on CPU ``torch.searchsorted`` opens an OpenMP parallel region once there are more than
    ~200 queries. When the cores are busy (data-loader workers, other jobs), every such call waits
    for a time slice of the other threads: measured 18 ms per call instead of ~10 µs on a loaded
    2-core machine, which made the sampler's per-step cost 20x larger. NumPy's is single-threaded.
    """
    if sorted_sequence.device.type != "cpu" or values.device.type != "cpu" or sorted_sequence.ndim != 1:
        return torch.searchsorted(sorted_sequence, values, right=right)
    seq = sorted_sequence.detach().numpy()
    val = values.detach().to(sorted_sequence.dtype).numpy()
    return torch.from_numpy(np.asarray(np.searchsorted(seq, val, side="right" if right else "left"), dtype=np.int64))


class Density:
    """A distribution of ``log σ`` with ``log_prob``, ``cdf``, ``icdf`` and inverse-CDF ``sample``."""

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def cdf(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def icdf(self, p: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def sample(self, n: int, *, generator: torch.Generator | None = None, device=None) -> torch.Tensor:
        """``n`` draws of log σ (float64, shape (n,)) by inverse CDF of ``torch.rand``."""
        dev = generator.device if generator is not None else (device or "cpu")
        u = torch.rand(n, generator=generator, dtype=_F64, device=dev)
        return self.icdf(u.cpu()).to(device or dev)

    def describe(self) -> dict:
        """A plain-JSON description (name and parameters) for logs, cards and payloads."""
        return {"name": type(self).__name__}


class Normal(Density):
    """``log σ ~ N(mean, std²)``. EDM's training density is ``Normal(−1.2, 1.2)`` (Karras et al. 2022)."""

    def __init__(self, mean: float, std: float):
        if not std > 0:
            raise ValueError(f"std: must be > 0, got {std}")
        self.mean, self.std = float(mean), float(std)

    def log_prob(self, x):
        z = (_t(x) - self.mean) / self.std
        return -0.5 * z**2 - math.log(self.std) - 0.5 * math.log(2 * math.pi)

    def cdf(self, x):
        return 0.5 * torch.special.erfc(-(_t(x) - self.mean) / (self.std * math.sqrt(2)))

    def icdf(self, p):
        return self.mean + self.std * math.sqrt(2) * torch.special.erfinv(2 * _t(p) - 1)

    def describe(self):
        return {"name": "Normal", "mean": self.mean, "std": self.std}


class Logistic(Density):
    """``log σ = loc + logit(u)``: a uniform flow noise level ``s = σ/(1+σ)`` when ``loc = 0``."""

    def __init__(self, loc: float = 0.0):
        self.loc = float(loc)

    def log_prob(self, x):
        z = _t(x) - self.loc
        return torch.nn.functional.logsigmoid(z) + torch.nn.functional.logsigmoid(-z)

    def cdf(self, x):
        return torch.sigmoid(_t(x) - self.loc)

    def icdf(self, p):
        return self.loc + torch.logit(_t(p))

    def describe(self):
        return {"name": "Logistic", "loc": self.loc}


class Uniform(Density):
    """Uniform in log σ on ``[low, high]`` (log-uniform σ)."""

    def __init__(self, low: float, high: float):
        if not high > low:
            raise ValueError(f"high: must be > low, got low={low}, high={high}")
        self.low, self.high = float(low), float(high)

    def log_prob(self, x):
        x = _t(x)
        inside = (x >= self.low) & (x <= self.high)
        return torch.where(inside, _t(-math.log(self.high - self.low)), _t(-math.inf))

    def cdf(self, x):
        return ((_t(x) - self.low) / (self.high - self.low)).clamp(0, 1)

    def icdf(self, p):
        return self.low + _t(p) * (self.high - self.low)

    def describe(self):
        return {"name": "Uniform", "low": self.low, "high": self.high}


class KarrasRamp(Density):
    """Uniform position u on EDM's ramp ``σ(u) = (σ_max^(1/ρ) + u·(σ_min^(1/ρ) − σ_max^(1/ρ)))^ρ``.

    With ``A = σ_min^(1/ρ)``, ``B = σ_max^(1/ρ)``: ``F(x) = (e^(x/ρ) − A)/(B − A)``,
    ``p(x) = e^(x/ρ)/(ρ·(B − A))``, ``F⁻¹(q) = ρ·log(A + q·(B − A))``.
    """

    def __init__(self, sigma_min: float, sigma_max: float, rho: float = 7.0):
        if not (0 < sigma_min < sigma_max) or not rho > 0:
            raise ValueError(f"sigma_min, sigma_max, rho: need 0 < sigma_min < sigma_max and rho > 0, got {sigma_min}, {sigma_max}, {rho}")
        self.sigma_min, self.sigma_max, self.rho = float(sigma_min), float(sigma_max), float(rho)
        self._a, self._b = sigma_min ** (1 / rho), sigma_max ** (1 / rho)

    def log_prob(self, x):
        x = _t(x)
        inside = (x >= math.log(self.sigma_min)) & (x <= math.log(self.sigma_max))
        lp = x / self.rho - math.log(self.rho * (self._b - self._a))
        return torch.where(inside, lp, _t(-math.inf))

    def cdf(self, x):
        return ((torch.exp(_t(x) / self.rho) - self._a) / (self._b - self._a)).clamp(0, 1)

    def icdf(self, p):
        return self.rho * torch.log(self._a + _t(p) * (self._b - self._a))

    def describe(self):
        return {"name": "KarrasRamp", "sigma_min": self.sigma_min, "sigma_max": self.sigma_max, "rho": self.rho}


class Cosine(Density):
    """``σ = σ_data·tan(πu/2)``: ``F(x) = (2/π)·atan(e^x/σ_d)``, ``p(x) = (2/π)·σσ_d/(σ² + σ_d²)``."""

    def __init__(self, sigma_data: float = 0.5):
        if not sigma_data > 0:
            raise ValueError(f"sigma_data: must be > 0, got {sigma_data}")
        self.sigma_data = float(sigma_data)

    def log_prob(self, x):
        z = _t(x) - math.log(self.sigma_data)
        # (2/π)·e^z/(1 + e^(2z)) = (1/π)/cosh(z)
        return -math.log(math.pi) - torch.log(torch.cosh(z))

    def cdf(self, x):
        return (2 / math.pi) * torch.atan(torch.exp(_t(x)) / self.sigma_data)

    def icdf(self, p):
        return torch.log(self.sigma_data * torch.tan(0.5 * math.pi * _t(p)))

    def describe(self):
        return {"name": "Cosine", "sigma_data": self.sigma_data}


class Mode(Density):
    """SD3 mode sampling on the flow noise level (Esser et al. 2024, eq. 20), unshifted.

    ``s = f(u) = 1 − u − scale·(cos²(πu/2) − 1 + u)`` decreases from 1 to 0, so
    ``F_s(s) = 1 − f⁻¹(s)`` and, with ``x = logit(s)``, ``p(x) = s(1 − s)/|f'(u)|``,
    ``f'(u) = −1 − scale + scale·(π/2)·sin(πu)``. ``f`` is monotone for ``scale < 1/(π/2 − 1) ≈ 1.75``.
    Positive ``scale`` concentrates on middle noise levels. This uses the SD3 paper's convention
    (s is the noise level), not diffusers' table indexing, which reverses it (METHOD.md §1).
    """

    MAX_SCALE = 1.0 / (math.pi / 2 - 1)

    def __init__(self, scale: float = 1.29):
        if not (-1.0 < scale < self.MAX_SCALE):
            raise ValueError(f"mode_scale: must lie in (-1, {self.MAX_SCALE:.3f}) for a monotone map, got {scale}")
        self.scale = float(scale)

    def _f(self, u):
        return 1 - u - self.scale * (torch.cos(0.5 * math.pi * u) ** 2 - 1 + u)

    def _f_inv(self, s):
        lo, hi = torch.zeros_like(s), torch.ones_like(s)
        for _ in range(60):  # bisection on the decreasing map; 2⁻⁶⁰ is below float64 resolution
            mid = 0.5 * (lo + hi)
            above = self._f(mid) > s
            lo, hi = torch.where(above, mid, lo), torch.where(above, hi, mid)
        return 0.5 * (lo + hi)

    def cdf(self, x):
        return 1 - self._f_inv(torch.sigmoid(_t(x)))

    def icdf(self, p):
        return torch.logit(self._f(1 - _t(p)))

    def log_prob(self, x):
        x = _t(x)
        u = self._f_inv(torch.sigmoid(x))
        fprime = -1 - self.scale + self.scale * 0.5 * math.pi * torch.sin(math.pi * u)
        return torch.nn.functional.logsigmoid(x) + torch.nn.functional.logsigmoid(-x) - torch.log(fprime.abs())

    def describe(self):
        return {"name": "Mode", "scale": self.scale}


class Piecewise(Density):
    """Piecewise-constant density on bins ``edges`` (K+1,) with masses ``probs`` (K,) (METHOD.md §5.8).

    Uniform in log σ inside a bin; draws by inverse CDF. ``probs`` is normalised here.
    """

    def __init__(self, edges: torch.Tensor, probs: torch.Tensor):
        edges, probs = _t(edges).flatten(), _t(probs).flatten()
        if edges.numel() != probs.numel() + 1:
            raise ValueError(f"edges/probs: need len(edges) == len(probs) + 1, got {edges.numel()} and {probs.numel()}")
        if not bool((edges[1:] > edges[:-1]).all()):
            raise ValueError("edges: must be strictly increasing")
        if not bool(torch.isfinite(probs).all()) or bool((probs < 0).any()) or not float(probs.sum()) > 0:
            raise ValueError("probs: must be finite, non-negative and not all zero")
        self.edges = edges
        self.probs = probs / probs.sum()
        self.cum = torch.cat([torch.zeros(1, dtype=_F64), torch.cumsum(self.probs, 0)])
        self.cum[-1] = 1.0

    @property
    def widths(self) -> torch.Tensor:
        return self.edges[1:] - self.edges[:-1]

    @property
    def densities(self) -> torch.Tensor:
        """(K,) density per unit log σ in each bin."""
        return self.probs / self.widths

    def log_prob(self, x):
        x = _t(x)
        k = searchsorted(self.edges, x, right=True) - 1
        inside = (x >= self.edges[0]) & (x <= self.edges[-1])
        k = k.clamp(0, self.probs.numel() - 1)
        return torch.where(inside, torch.log(self.densities[k]), _t(-math.inf))

    def cdf(self, x):
        x = _t(x)
        k = (searchsorted(self.edges, x, right=True) - 1).clamp(0, self.probs.numel() - 1)
        frac = ((x - self.edges[k]) / self.widths[k]).clamp(0, 1)
        return (self.cum[k] + frac * self.probs[k]).clamp(0, 1)

    def icdf(self, p):
        p = _t(p)
        k = (searchsorted(self.cum, p, right=True) - 1).clamp(0, self.probs.numel() - 1)
        # zero-mass bins are never chosen: searchsorted(right=True) skips repeated cumulative values
        frac = ((p - self.cum[k]) / self.probs[k].clamp_min(_TINY)).clamp(0, 1)
        return self.edges[k] + frac * self.widths[k]

    def describe(self):
        return {"name": "Piecewise", "edges": self.edges.tolist(), "probs": self.probs.tolist()}


class Shifted(Density):
    """``base`` translated by ``offset`` in log σ: a flow ``shift`` is ``offset = log(shift)`` (METHOD.md §1)."""

    def __init__(self, base: Density, offset: float):
        self.base, self.offset = base, float(offset)

    def log_prob(self, x):
        return self.base.log_prob(_t(x) - self.offset)

    def cdf(self, x):
        return self.base.cdf(_t(x) - self.offset)

    def icdf(self, p):
        return self.base.icdf(p) + self.offset

    def describe(self):
        return {"name": "Shifted", "offset": self.offset, "base": self.base.describe()}


class DensityRangeError(ValueError):
    """A density with (almost) no mass (≤ 1e-12) in the path's training range ``[low, high]`` of log σ (VE σ): a
    :class:`Truncated` restriction of it would divide by zero. Raised by :class:`Truncated`; a ``ValueError``, so
    callers that catch those keep working, and its own type, so a caller can name the option that placed the density
    there without matching the message (``training/args.py``)."""

    def __init__(self, density: dict, low: float, high: float):
        self.density, self.low, self.high = density, float(low), float(high)
        super().__init__(f"the density {density} has (almost) no mass in the path's range log sigma in [{low:.3f}, {high:.3f}]")

    def __reduce__(self):  # pickled across processes (a DataLoader worker, a spawned rank) with its fields
        return type(self), (self.density, self.low, self.high)


class Truncated(Density):
    """``base`` restricted to ``[low, high]`` in log σ and renormalised (the path's training range)."""

    def __init__(self, base: Density, low: float, high: float):
        if not float(low) < float(high):  # NaN compares false: refused too; ±inf ends are a half-line (σ = 0 or ∞)
            raise ValueError(f"low, high: the range of log sigma must have low < high (infinite ends allowed), got [{low}, {high}]")
        self.base, self.low, self.high = base, float(low), float(high)
        self._f_lo = float(base.cdf(_t(low)))
        self._f_hi = float(base.cdf(_t(high)))
        self._z = self._f_hi - self._f_lo
        if not self._z > 1e-12:
            raise DensityRangeError(base.describe(), low, high)

    def log_prob(self, x):
        x = _t(x)
        inside = (x >= self.low) & (x <= self.high)
        return torch.where(inside, self.base.log_prob(x) - math.log(self._z), _t(-math.inf))

    def cdf(self, x):
        return ((self.base.cdf(_t(x).clamp(self.low, self.high)) - self._f_lo) / self._z).clamp(0, 1)

    def icdf(self, p):
        q = self._f_lo + _t(p) * self._z
        return self.base.icdf(q.clamp(self._f_lo, self._f_hi)).clamp(self.low, self.high)

    def describe(self):
        return {"name": "Truncated", "low": self.low, "high": self.high, "base": self.base.describe()}


def bin_masses(density: Density, edges: torch.Tensor) -> torch.Tensor:
    """(K,) probability of each bin ``[edges[k], edges[k+1]]``: differences of the CDF."""
    c = density.cdf(_t(edges))
    return (c[1:] - c[:-1]).clamp_min(0)


def log_prob_in(density: Density, coordinate: str, values: torch.Tensor) -> torch.Tensor:
    """Log density in another coordinate, with its Jacobian (METHOD.md §1).

    Args:
        coordinate: ``"log_sigma"`` (x = log σ), ``"log_snr"`` (λ = −2 log σ, ``|dx/dλ| = 1/2``),
            ``"sigma"`` (``|dx/dσ| = 1/σ``) or ``"flow_s"`` (s = σ/(1+σ), ``|dx/ds| = 1/(s(1−s))``).
        values: points in that coordinate (float64, any shape).

    Raises:
        ValueError: for an unknown coordinate.
    """
    v = _t(values)
    if coordinate == "log_sigma":
        return density.log_prob(v)
    if coordinate == "log_snr":
        return density.log_prob(-0.5 * v) - math.log(2.0)
    if coordinate == "sigma":
        return density.log_prob(torch.log(v)) - torch.log(v)
    if coordinate == "flow_s":
        return density.log_prob(torch.logit(v)) - torch.log(v) - torch.log1p(-v)
    raise ValueError(f"coordinate: unknown value {coordinate!r}; accepted: log_sigma, log_snr, sigma, flow_s")
