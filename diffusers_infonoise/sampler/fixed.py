"""The fixed training densities InfoNoise is compared with, by name (:func:`base_density`), and the
sampler that draws from one (:class:`FixedDensitySampler`); also the warm-up and floor densities."""

from __future__ import annotations

from .. import densities
from ..logs import get_logger
from ..paths import NoisePath
from .base import TrainingTimestepSampler

logger = get_logger(__name__)

__all__ = [
    "FIXED_DENSITY_NAMES",
    "FixedDensitySampler",
    "base_density",
]

#: the fixed densities by name (:func:`base_density`), the baselines InfoNoise is compared with
FIXED_DENSITY_NAMES = ("uniform", "edm_lognormal", "logit_normal", "mode", "log_uniform", "cosine")


class FixedDensitySampler(TrainingTimestepSampler):
    """Draws from a fixed density of log σ (a baseline). ``density`` is truncated to the path's range."""

    def __init__(self, path: NoisePath, density: densities.Density, *, name: str = "fixed", **kwargs):
        super().__init__(path, **kwargs)
        lo, hi = path.log_sigma_range
        self.name = name
        self._density = density if isinstance(density, densities.Piecewise) else densities.Truncated(density, lo, hi)

    @property
    def density(self):
        return self._density

    def describe(self):
        return {**super().describe(), "density": self._density.describe()}


def base_density(name: str, path: NoisePath, **params) -> densities.Density:
    """The fixed density of a baseline sampler on ``path``, per unit log σ (VE σ).

    ``uniform``: uniform t on VP (every integer step has mass 1/N), uniform flow level s (shifted),
    uniform position on EDM's ρ-ramp on VE. ``edm_lognormal`` (``P_mean=-1.2, P_std=1.2``).
    ``logit_normal`` (``mean=0, std=1``) on the flow level s in the SD3 paper's convention: a
    positive ``mean`` means *more* noise; since ``logit(s) = log σ`` it is a normal density in log σ,
    translated by ``log(shift)`` on a shifted flow path. ``mode`` (``scale=1.29``, SD3).
    ``log_uniform``: uniform log σ over the path's range. ``cosine`` (``sigma_data``, default the
    path's σ_data on VE, else 1): ``σ = σ_data·tan(πu/2)``.

    Raises:
        ValueError: unknown name or parameter.
    """

    def take(**defaults):
        unknown = set(params) - set(defaults)
        if unknown:
            raise ValueError(f"{name}: unknown parameter(s) {sorted(unknown)}; accepted: {sorted(defaults) or 'none'}")
        return {**defaults, **params}

    off = path.log_shift
    lo, hi = path.log_sigma_range
    if name == "uniform":
        take()
        return path.uniform_density()
    if name == "edm_lognormal":
        p = take(P_mean=-1.2, P_std=1.2)
        return densities.Normal(p["P_mean"], p["P_std"])
    if name == "logit_normal":
        p = take(mean=0.0, std=1.0)
        return densities.Shifted(densities.Normal(p["mean"], p["std"]), off)
    if name == "mode":
        p = take(scale=1.29)
        return densities.Shifted(densities.Mode(p["scale"]), off)
    if name == "log_uniform":
        take()
        return densities.Uniform(lo, hi)
    if name == "cosine":
        p = take(sigma_data=path.data_scale or 1.0)
        return densities.Cosine(p["sigma_data"])
    raise ValueError(f"name: unknown base density {name!r}; accepted: {', '.join(FIXED_DENSITY_NAMES)}")


def _resolve_base(path: NoisePath, base) -> tuple[densities.Density, dict]:
    """``base`` may be None (the path's conventional density, METHOD.md §5.2), a name, a
    ``(name, params)`` pair, or a Density."""
    if base is None:
        base = path.default_base
    if isinstance(base, densities.Density):
        density, desc = base, {"density": base.describe()}
    elif not (
        isinstance(base, str)
        or (isinstance(base, (tuple, list)) and len(base) == 2 and isinstance(base[0], str) and isinstance(base[1], dict))
    ):
        raise ValueError(
            f"base: expected None, a density name ({', '.join(FIXED_DENSITY_NAMES)}), a (name, params) pair or a Density, got {base!r}"
        )
    else:
        name, params = (base, {}) if isinstance(base, str) else base
        try:
            density = base_density(name, path, **params)
        except ValueError as err:
            raise ValueError(f"base: {err}") from None
        desc = {"name": name, **params}
    lo, hi = path.log_sigma_range
    if not isinstance(density, densities.Piecewise):
        density = densities.Truncated(density, lo, hi)
    return density, desc
