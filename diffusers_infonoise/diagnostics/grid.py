"""The log-σ grids of the diagnostics (VE σ, cells between midpoints), density normalisation, and
the two result types: :class:`Profile` (an entropy-rate profile) and :class:`Allocation` (φ = π·w)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..estimator import GateResult
from ..paths import NoisePath, path_from_scheduler
from ..sampler import (
    TrainingTimestepSampler,
)

__all__ = [
    "DEFAULT_SIGMA_RANGE",
    "grid_edges",
    "log_sigma_grid",
    "normalize_density",
    "Profile",
    "profile_arrays",
    "Allocation",
]


_F64 = torch.float64


#: Paper's Figure 1 / EDM training range (VE σ), the default grid of data-set profiles.
DEFAULT_SIGMA_RANGE = (0.002, 80.0)


def _as_grid(log_sigma) -> torch.Tensor:
    x = torch.as_tensor(log_sigma, dtype=_F64).detach().cpu().flatten()
    if x.numel() < 2:
        raise ValueError(f"log_sigma: need at least 2 grid points, got {x.numel()}")
    if not bool(torch.isfinite(x).all()) or not bool((x[1:] > x[:-1]).all()):
        raise ValueError("log_sigma: must be finite and strictly increasing (VE log sigma)")
    return x


def grid_edges(log_sigma) -> torch.Tensor:
    """(K+1,) float64 cell edges of a (K,) increasing log-σ grid: midpoints between neighbours,
    the two ends extended by half the adjacent gap. On a uniform grid of bin centres this returns
    the bins' edges exactly.

    Raises:
        ValueError: fewer than two points, or a grid that is not finite and strictly increasing.
    """
    x = _as_grid(log_sigma)
    mid = 0.5 * (x[1:] + x[:-1])
    first = x[0] - (mid[0] - x[0])
    last = x[-1] + (x[-1] - mid[-1])
    return torch.cat([first.reshape(1), mid, last.reshape(1)])


def _widths(log_sigma) -> torch.Tensor:
    e = grid_edges(log_sigma)
    return e[1:] - e[:-1]


def log_sigma_grid(source=None, num_levels: int = 64, *, sigma_min: float | None = None, sigma_max: float | None = None) -> torch.Tensor:
    """(num_levels,) float64 log σ (VE σ): centres of ``num_levels`` equal bins in log σ.

    Args:
        source: a diffusers scheduler, a :class:`~diffusers_infonoise.paths.NoisePath`, a sampler
            (its path), or ``None`` (then ``sigma_min``/``sigma_max`` or the EDM range 0.002..80).
            For a path the range is its ``log_sigma_range`` (METHOD.md §5.1), so with
            ``num_levels = num_bins`` the grid is exactly the InfoNoise estimator's bin centres.
        num_levels: K >= 2.
        sigma_min, sigma_max: override the range (VE σ, 0 < sigma_min < sigma_max).

    Raises:
        ValueError: bad ``num_levels`` or range. TypeError: unsupported scheduler.
    """
    if isinstance(num_levels, bool) or not isinstance(num_levels, int) or num_levels < 2:
        raise ValueError(f"num_levels: must be an int >= 2, got {num_levels!r}")
    if source is None:
        lo, hi = math.log(DEFAULT_SIGMA_RANGE[0]), math.log(DEFAULT_SIGMA_RANGE[1])
    else:
        path = _path_of(source)
        lo, hi = path.log_sigma_range
    if sigma_min is not None:
        lo = math.log(sigma_min) if sigma_min > 0 else math.nan
    if sigma_max is not None:
        hi = math.log(sigma_max) if sigma_max > 0 else math.nan
    if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
        raise ValueError(f"sigma_min, sigma_max: need 0 < sigma_min < sigma_max, got range exp({lo}), exp({hi})")
    edges = torch.linspace(lo, hi, num_levels + 1, dtype=_F64)
    return 0.5 * (edges[1:] + edges[:-1])


def _path_of(source) -> NoisePath:
    if isinstance(source, NoisePath):
        return source
    if isinstance(source, TrainingTimestepSampler):
        return source.path
    return path_from_scheduler(source)


def normalize_density(p, log_sigma) -> torch.Tensor:
    """``p / Σ_k p_k·width_k``: a non-negative (K,) function on the grid made a density per unit
    log σ (float64). Raises ``ValueError`` for negative, non-finite or all-zero values."""
    p = torch.as_tensor(p, dtype=_F64).detach().cpu().flatten()
    w = _widths(log_sigma)
    if p.shape != w.shape:
        raise ValueError(f"p: shape {tuple(p.shape)} does not match the grid's ({w.numel()},)")
    if not bool(torch.isfinite(p).all()) or bool((p < 0).any()):
        raise ValueError("p: must be finite and non-negative on the grid")
    z = float((p * w).sum())
    if not z > 0:
        raise ValueError("p: has no mass on the grid")
    return p / z


def _jsonable(v):
    if isinstance(v, torch.Tensor):
        return [None if not math.isfinite(x) else float(x) for x in v.detach().cpu().to(_F64).flatten().tolist()]
    if isinstance(v, GateResult):
        return {"pivot": v.pivot, "source": v.source, "reason": v.reason, "auto_pivot": v.auto_pivot}
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


@dataclass
class Profile:
    """An entropy-rate profile on a log-σ grid (METHOD.md §2-§3, §5.5-§5.6, §6).

    All tensors are (K,) float64 on the CPU, indexed by the grid point.

    Attributes:
        log_sigma: evaluated VE log σ, increasing. On a VP path these are the exact table values of
            the integer steps evaluated (the nearest step to each requested σ, duplicates removed).
        mmse: the unweighted x0-space error per element, ``e(σ)`` (a model) or the Bayes/empirical
            MMSE (a data set).
        mmse_se: its Monte-Carlo standard error (same units), or ``None``.
        q: ``mmse/σ²``, the ungated entropy rate per unit log σ (I-MMSE, §2), not normalised.
        rho_hat: the gated profile ``r = q·σ³/(σ³ + c³)`` normalised per unit log σ on the grid (§5.5-6).
        gate: the :class:`~diffusers_infonoise.estimator.GateResult` used (pivot c, VE σ, and why).
        w: the x0-space loss weight ``w(σ)`` (§4) of ``loss_weighting``/``prediction_type``.
        pi: the InfoNoise density ``π ∝ ρ̂/w`` per unit log σ, normalised on the grid (no floor).
        timesteps: the native model levels evaluated (VP int t, EDM ``c_noise``, flow ``s·N``), or ``None``.
        num_samples: (x0, ε) pairs averaged per grid point.
        meta: plain-JSON description (source, path, prediction type, weighting, ...).
    """

    log_sigma: torch.Tensor
    mmse: torch.Tensor
    mmse_se: torch.Tensor | None
    q: torch.Tensor
    rho_hat: torch.Tensor
    gate: GateResult
    w: torch.Tensor
    pi: torch.Tensor
    timesteps: torch.Tensor | None = None
    num_samples: int = 0
    meta: dict = field(default_factory=dict)

    @property
    def sigmas(self) -> torch.Tensor:
        """(K,) VE σ of the grid."""
        return torch.exp(self.log_sigma)

    @property
    def edges(self) -> torch.Tensor:
        """(K+1,) log-σ cell edges used for every normalisation (:func:`grid_edges`)."""
        return grid_edges(self.log_sigma)

    @property
    def widths(self) -> torch.Tensor:
        return _widths(self.log_sigma)

    def to_dict(self) -> dict:
        """A plain-JSON dict (NaN/inf → null)."""
        return _jsonable(
            {
                "log_sigma": self.log_sigma,
                "sigma": self.sigmas,
                "mmse": self.mmse,
                "mmse_se": self.mmse_se,
                "q": self.q,
                "rho_hat": self.rho_hat,
                "gate": self.gate,
                "w": self.w,
                "pi": self.pi,
                "timesteps": self.timesteps,
                "num_samples": int(self.num_samples),
                "meta": self.meta,
            }
        )


def profile_arrays(profile) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """``(log_sigma, rho_hat, meta)`` of a :class:`Profile`, or of its ``to_dict()`` (also wrapped as the ``"profile"``
    of ``infonoise profile``'s JSON), validated: the one reader of a stored profile.

    Raises:
        ValueError: no ``log_sigma``/``rho_hat``, an entry that is not a number (or an integer no float holds), a grid
            that is not finite and increasing, lengths that differ, a negative or non-finite ``rho_hat`` (naming its
            index and VE σ), or a ``meta`` that is not an object; each naming the field.
        TypeError: neither a Profile nor a dict.
    """
    from ..schedule_io import check_float_range, check_number_list

    if isinstance(profile, Profile):
        return profile.log_sigma, profile.rho_hat, profile.meta
    if not isinstance(profile, dict):
        raise TypeError(f"profile: expected a Profile or a dict, got {type(profile).__name__}")
    data = profile.get("profile", profile)
    if not isinstance(data, dict) or "log_sigma" not in data or "rho_hat" not in data:
        raise ValueError("profile: expected a Profile or its to_dict() with 'log_sigma' and 'rho_hat'")
    check_float_range(data, "profile", error=ValueError)
    for key in ("log_sigma", "rho_hat"):
        check_number_list(data[key], f"profile: {key}", error=ValueError)
    x, rho = _as_grid(data["log_sigma"]), torch.tensor(data["rho_hat"], dtype=_F64)
    if rho.numel() != x.numel():
        raise ValueError(f"profile: rho_hat holds {rho.numel()} values, log_sigma {x.numel()}: one a grid point")
    bad = [i for i, v in enumerate(rho.tolist()) if not (math.isfinite(v) and v >= 0)]
    if bad:
        i = bad[0]
        raise ValueError(
            f"profile: rho_hat must be finite and >= 0, got rho_hat[{i}] = {float(rho[i]):g} at VE sigma {math.exp(float(x[i])):.4g}"
        )
    meta = data.get("meta") or {}
    if not isinstance(meta, dict):
        raise ValueError(f"profile: meta must be an object, got {type(meta).__name__}")
    for key in ("prediction_type", "loss_weighting"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise ValueError(f"profile: meta.{key} must be a name (a string), got {meta[key]!r}")
    path = meta.get("path")
    if isinstance(path, dict):  # its numbers build the training's scheduler (recommend)
        for key in ("sigma_min", "sigma_max", "sigma_data", "shift"):
            v = path.get(key)
            if key in path and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0):
                raise ValueError(f"profile: meta.path.{key} must be a finite number > 0, got {v!r}")
    return x, rho, meta


@dataclass
class Allocation:
    """The effective allocation of a schedule on a log-σ grid (METHOD.md §4).

    Attributes (all (K,) float64 on the CPU):
        name: the sampler's name (``"infonoise"``, ``"edm_lognormal"``, ...).
        log_sigma: the grid (VE log σ).
        pi: the training density per unit log σ: the average of π over each grid cell, normalised
            on the grid (mass outside the grid is dropped).
        w: the x0-space loss weight at the grid points.
        phi: ``π·w`` normalised per unit log σ on the grid. For a Kingma-Gao sampler, whose draws
            carry importance weights ``base/π``, the effective allocation is ``base·w``.
        meta: plain-JSON description (prediction type, weighting, the sampler's ``describe()``).
    """

    name: str
    log_sigma: torch.Tensor
    pi: torch.Tensor
    w: torch.Tensor
    phi: torch.Tensor
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return _jsonable({"name": self.name, "log_sigma": self.log_sigma, "pi": self.pi, "w": self.w, "phi": self.phi, "meta": self.meta})
