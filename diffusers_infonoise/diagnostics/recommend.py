"""The fixed training density closest to a profile, and the flags that set it in the trainer you use
(METHOD.md §6.1).

A trainer that will not run an adaptive sampler still offers a family of fixed densities: logit-normal
``(mean, std)`` on the flow noise level, a flow ``shift`` on uniform or on logit-normal(0, 1) sampling, EDM's
log-normal ``(P_mean, P_std)``, a timestep range. Given the entropy-rate profile ρ̂ of your model on your data
(a stored schedule, or a profile measured by forward passes) and the training you will run (its path,
prediction type and loss weighting, hence ``w(σ)``, METHOD.md §4), :func:`fit_families` finds in each family
the parameters θ whose effective allocation ``φ_θ = π_θ·w`` (normalised) is closest to ρ̂ in total variation on
the profile's grid (:mod:`.trainers` turns them into each trainer's flags, beside the TV of the trainer's
default). Everything is on VE ``log σ`` (natural log); a family's density is truncated to the training path's
σ range, as the trainers' draws are.

* :func:`target_from_schedule`, :func:`target_from_profile`: the :class:`RecommendTarget` (grid, ρ̂, w, path).
* :func:`fit_families` and :func:`recommend_parameters` (plain data, for tools and benchmarks).
* :data:`FAMILIES`.

The trainers' flags for these fits are :mod:`.trainers` (:func:`~.trainers.recommend_fixed_density`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .. import densities
from ..objective import Objective, default_objective
from ..paths import PATH_CLASSES, NoisePath, path_from_scheduler
from .grid import _F64, Allocation, _widths, grid_edges, normalize_density, profile_arrays

__all__ = [
    "FAMILIES",
    "RecommendTarget",
    "FamilyFit",
    "target_from_schedule",
    "target_from_profile",
    "family_density",
    "allocation_tv",
    "fit_family",
    "fit_families",
    "recommend_parameters",
]


# ----------------------------------------------------------------------------------------------
# The target: ρ̂ and the training's w on one grid
# ----------------------------------------------------------------------------------------------


@dataclass
class RecommendTarget:
    """What a fixed density is fitted to (METHOD.md §6.1).

    Attributes:
        log_sigma: (K,) float64 grid, VE log σ, increasing (cell centres; cells between midpoints).
        rho_hat: (K,) float64 ρ̂ per unit log σ, normalised on the grid (the target φ ∝ ρ̂, METHOD.md §4).
        w: (K,) float64 x0-space loss weight ``w(σ)`` of the training the user will run (METHOD.md §4), > 0.
        path: the training's :class:`~diffusers_infonoise.paths.NoisePath` (its σ range truncates every family).
        objective: ``{"prediction_type", "loss_weighting", "snr_gamma"}`` of that training.
        source: where ρ̂ came from, in words.

    Derived on construction: ``edges`` ((K+1,) cell edges clipped to the path's σ range), ``widths`` ((K,) cell
    widths) and ``rho_mass`` ((K,) ρ̂'s cell masses, summing to 1).
    """

    log_sigma: torch.Tensor
    rho_hat: torch.Tensor
    w: torch.Tensor
    path: NoisePath
    objective: dict
    source: str = ""

    def __post_init__(self):
        lo, hi = self.path.log_sigma_range
        # a trainer draws nothing outside the path's range: cells are clipped to it
        self.edges = grid_edges(self.log_sigma).clamp(lo, hi)
        self.widths = _widths(self.log_sigma)
        self.rho_mass = self.rho_hat * self.widths / float((self.rho_hat * self.widths).sum())

    def to_dict(self) -> dict:
        return {
            "log_sigma": self.log_sigma.tolist(),
            "rho_hat": self.rho_hat.tolist(),
            "w": self.w.tolist(),
            "path": self.path.config(),
            "objective": {k: ("custom" if callable(v) else v) for k, v in self.objective.items()},
            "source": self.source,
        }


def _training_scheduler(noise_scheduler, path_config: dict | None, what: str):
    """The training's scheduler: the given one, else the one a recorded path config determines."""
    if noise_scheduler is not None:
        return noise_scheduler
    if not isinstance(path_config, dict) or not isinstance(path_config.get("kind"), str) or path_config["kind"] not in PATH_CLASSES:
        raise ValueError(f"noise_scheduler: {what} does not record its path; pass the scheduler of the training you will run")
    try:
        return PATH_CLASSES[path_config["kind"]].scheduler_from_config(path_config)
    except (TypeError, ValueError) as err:  # a recorded value of the wrong type (null, a string) names nothing by itself
        raise ValueError(
            f"noise_scheduler: {what}'s recorded path {path_config} does not build a scheduler ({err}); pass the scheduler of "
            "the training you will run"
        ) from None


def target_from_schedule(
    payload: dict,
    noise_scheduler=None,
    *,
    prediction_type: str | None = None,
    loss_weighting=None,
    snr_gamma: float | None = None,
    mu: float | None = None,
    source: str = "stored schedule",
) -> RecommendTarget:
    """The target of a stored schedule (a validated payload, :func:`~diffusers_infonoise.schedule_io.read_schedule_from`)
    for a training on ``noise_scheduler``'s path.

    The stored m̂ is an x0-space error, independent of w; it is rebuilt into ρ̂ exactly as a run that starts from the
    schedule rebuilds it (METHOD.md §5.9 'stored': :meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.load_schedule`
    with the payload's own settings, gate and data statistics; onto another path or grid through VE σ). The grid is
    the training sampler's bin centres (the payload's number of bins over the training path's range).

    Args:
        payload: the stored schedule.
        noise_scheduler: the training's diffusers scheduler (VP, EDM or flow); default: the payload's own path's
            (a VP payload needs its scheduler: the ᾱ table is not stored).
        prediction_type, loss_weighting, snr_gamma: the training's loss (METHOD.md §3-4); default: the payload's when
            the training is on the payload's path kind, else the path's conventions.
        mu: dynamic-shift ``mu`` of a flow scheduler with ``use_dynamic_shifting`` (default: the stored shift).
        source: a description for the output.

    Raises:
        ValueError: a schedule saved before it adapted (it holds no ρ̂), a VP payload without its scheduler, or a bad
            objective (each naming the argument). ScheduleError: a corrupted payload.
    """
    from ..sampler import InfoNoiseTrainingTimestepSampler
    from ..schedule_io import stored_mu

    scheduler = _training_scheduler(noise_scheduler, payload.get("path"), "the schedule")
    mu = stored_mu(scheduler, payload) if mu is None else mu
    path = path_from_scheduler(scheduler, mu=mu)
    # the payload's loss when the training is on its path kind, else the path's conventions; the given values win
    same = Objective.recorded(payload) if path.records(payload["path"]) else None
    objective = (same or default_objective(scheduler)).override(prediction_type, loss_weighting, snr_gamma)
    sampler = InfoNoiseTrainingTimestepSampler.from_stored(scheduler, payload, **objective.keywords(), mu=mu)
    if payload.get("adapted") is False or not sampler.estimator.is_ready:
        raise ValueError(f"{source}: the stored schedule was saved before it adapted; it holds no estimate of rho_hat to fit")
    prof = sampler.profile()
    return RecommendTarget(
        log_sigma=prof["log_sigma"].clone(),
        rho_hat=normalize_density(prof["rho_hat"], prof["log_sigma"]),
        w=prof["w"].to(_F64),
        path=path,
        objective=objective.keywords(),
        source=source,
    )


def target_from_profile(
    profile,
    noise_scheduler=None,
    *,
    prediction_type: str | None = None,
    loss_weighting=None,
    snr_gamma: float | None = None,
    mu: float | None = None,
    source: str = "profile",
) -> RecommendTarget:
    """The target of a measured profile (a :class:`~diffusers_infonoise.diagnostics.Profile` of
    :func:`~diffusers_infonoise.diagnostics.profile_from_model`, or its ``to_dict()``: the ``"profile"`` of
    ``infonoise profile``'s JSON) for a training on ``noise_scheduler``'s path, on the profile's own grid.

    Args:
        profile: the profile (its ``rho_hat`` on its ``log_sigma``, VE; gated as measured).
        noise_scheduler: the training's scheduler; default: the one the profile's recorded path determines
            (``meta["path"]``; a VP path needs its scheduler).
        prediction_type, loss_weighting, snr_gamma: the training's loss; default: the profile's (its ``meta``) when
            the training is on the profile's path kind, else the path's conventions.
        mu: dynamic-shift ``mu`` of a flow scheduler with ``use_dynamic_shifting``.
        source: a description for the output.

    Raises:
        ValueError: a profile without valid ``log_sigma``/``rho_hat`` (:func:`~.grid.profile_arrays`), one that does not
            record its path and no scheduler, or a weight ``w`` that is not finite and > 0 on the grid.
        TypeError: a profile that is neither a Profile nor a dict.
    """
    x, rho, meta = profile_arrays(profile)
    scheduler = _training_scheduler(noise_scheduler, meta.get("path"), "the profile")
    path = path_from_scheduler(scheduler, mu=mu)
    same = Objective.recorded(meta) if path.records(meta.get("path")) else None
    objective = (same or default_objective(scheduler)).override(prediction_type, loss_weighting, snr_gamma)
    w = objective.x0_loss_weight(torch.exp(x), sigma_data=path.data_scale or 0.5)
    if not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
        raise ValueError("loss_weighting: the x0-space weight w(sigma) must be finite and > 0 on the profile's grid")
    return RecommendTarget(
        log_sigma=x.clone(),
        rho_hat=normalize_density(rho, x),
        w=w,
        path=path,
        objective=objective.keywords(),
        source=source,
    )


# ----------------------------------------------------------------------------------------------
# The families, in VE log σ (METHOD.md §6.1)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Family:
    kinds: tuple[str, ...]
    params: tuple[str, ...]
    meaning: str


#: the fixed-density families a trainer offers, by name: path kinds, parameters and their meaning
FAMILIES: dict[str, _Family] = {
    "logit_normal": _Family(
        ("flow",),
        ("mean", "std"),
        "flow noise level s = sigmoid(z), z ~ N(mean, std^2) (SD3 paper's convention: mean > 0 is more noise); "
        "ln sigma = logit(s) = z, a normal in ln sigma",
    ),
    "shift_uniform": _Family(("flow",), ("shift",), "uniform s, then s -> shift*s/(1+(shift-1)*s): logistic in ln sigma at ln(shift)"),
    "shift_logit_normal": _Family(("flow",), ("shift",), "logit-normal(0, 1) s, then the shift: N(ln shift, 1) in ln sigma"),
    "edm_lognormal": _Family(("ve",), ("P_mean", "P_std"), "ln sigma ~ N(P_mean, P_std^2) (Karras et al. 2022)"),
    "timestep_range": _Family(
        ("vp", "flow"),
        ("t_min", "t_max", "s_min", "s_max"),
        "uniform within a range: VP integer t in [t_min, t_max] (inclusive); flow unshifted s in [s_min, s_max]",
    ),
}


def family_density(name: str, params: dict, path: NoisePath) -> densities.Density:
    """The density per unit log σ (VE) of family ``name`` with ``params`` on ``path`` (METHOD.md §6.1).

    ``logit_normal``: ``Normal(mean, std)`` (ln σ = logit(s) on the flow path, METHOD.md §1); ``edm_lognormal``:
    ``Normal(P_mean, P_std)``; ``shift_uniform``: ``Logistic(ln shift)``; ``shift_logit_normal``:
    ``Normal(ln shift, 1)``; ``timestep_range``: on VP uniform mass over the cells of the integer steps
    ``t_min..t_max`` (METHOD.md §5.8), on flow the logistic (uniform s) restricted to ``[logit s_min, logit s_max]``.

    Raises:
        ValueError: an unknown family, one not defined on the path's kind, or parameters out of range.
    """
    if name not in FAMILIES:
        raise ValueError(f"family: unknown {name!r}; accepted: {', '.join(FAMILIES)}")
    if path.kind not in FAMILIES[name].kinds:
        raise ValueError(f"family: {name!r} is defined on {'/'.join(FAMILIES[name].kinds)} paths, not on a {path.kind} path")
    if name == "logit_normal":
        return densities.Normal(params["mean"], params["std"])
    if name == "edm_lognormal":
        return densities.Normal(params["P_mean"], params["P_std"])
    if name in ("shift_uniform", "shift_logit_normal"):
        if not params["shift"] > 0:
            raise ValueError(f"shift: must be > 0, got {params['shift']}")
        loc = math.log(params["shift"])
        return densities.Logistic(loc) if name == "shift_uniform" else densities.Normal(loc, 1.0)
    if path.is_discrete:  # VP's integer t; else flow's unshifted s
        lo, hi = int(params["t_min"]), int(params["t_max"])
        if not 0 <= lo <= hi < path.num_train_timesteps:
            raise ValueError(f"t_min, t_max: need 0 <= t_min <= t_max < {path.num_train_timesteps}, got {lo}, {hi}")
        probs = torch.zeros(path.num_train_timesteps, dtype=_F64)
        probs[lo : hi + 1] = 1.0
        return densities.Piecewise(path.cell_edges(), probs)
    s_lo, s_hi = float(params["s_min"]), float(params["s_max"])
    if not 0.0 <= s_lo < s_hi <= 1.0:
        raise ValueError(f"s_min, s_max: need 0 <= s_min < s_max <= 1, got {s_lo}, {s_hi}")
    return densities.Truncated(densities.Logistic(0.0), _logit(s_lo), _logit(s_hi))


def _logit(s: float) -> float:
    return -math.inf if s <= 0 else math.inf if s >= 1 else math.log(s / (1 - s))


def _cell_masses(density: densities.Density, target: RecommendTarget) -> torch.Tensor:
    return densities.bin_masses(density, target.edges)


def allocation_tv(density: densities.Density, target: RecommendTarget) -> float:
    """``TV(φ, ρ̂)`` of a training density on the target's grid, φ = π·w normalised (METHOD.md §6.1): π on a cell is
    the density's mass there (inside the path's σ range) over the cell's width. 1.0 when it has no mass on the grid.

    The value of :func:`~diffusers_infonoise.diagnostics.total_variation` on the cell masses (½ Σ_k |φ_k − ρ̂_k|, each
    normalised to sum 1), computed from masses the target holds so that a solver can call it thousands of times.
    """
    phi = _cell_masses(density, target) * target.w
    z = float(phi.sum())
    if not z > 0:
        return 1.0
    return float(0.5 * (phi / z - target.rho_mass).abs().sum())


def _allocation(name: str, density: densities.Density, target: RecommendTarget) -> Allocation:
    x = target.log_sigma
    pi = normalize_density(_cell_masses(density, target) / target.widths, x)
    return Allocation(name, x, pi, target.w, normalize_density(pi * target.w, x), {"density": density.describe()})


@dataclass
class FamilyFit:
    """The member of a family closest to ρ̂: ``params`` (plain floats/ints), ``tv`` = TV(φ_fit, ρ̂), its density."""

    name: str
    params: dict
    tv: float
    density: densities.Density = field(repr=False)

    def to_dict(self) -> dict:
        return {"params": dict(self.params), "tv": self.tv}


def _round(v: float, digits: int = 4) -> float:
    """``v`` to ``digits`` significant digits: what the flags print, so the reported TV is the flags' own."""
    return float(f"{v:.{digits}g}")


def _fit_normal(target: RecommendTarget, names: tuple[str, str]) -> dict:
    """2-D: grid search over (mean at the cell centres) × (24 log-spaced std), then bounded Nelder-Mead on (mean, ln std)."""
    from scipy.optimize import minimize

    e = target.edges
    lo, hi = float(e[0]), float(e[-1])
    h = float(target.widths.median())
    bounds = [(lo, hi), (math.log(h / 4), math.log(hi - lo))]

    def tv(p):
        return allocation_tv(densities.Normal(float(p[0]), math.exp(float(p[1]))), target)

    starts = [(float(m), math.log(s)) for m in target.log_sigma.clamp(lo, hi) for s in np.geomspace(h / 2, hi - lo, 24)]
    best = np.array(min(starts, key=tv))
    # a simplex of one cell in the mean and 0.1 in ln std, inside the bounds
    step = np.array([h if best[0] + h <= hi else -h, 0.1 if best[1] + 0.1 <= bounds[1][1] else -0.1])
    simplex = np.array([best, best + [step[0], 0.0], best + [0.0, step[1]]])
    opts = {"xatol": 1e-5, "fatol": 1e-9, "maxiter": 800, "initial_simplex": simplex}
    res = minimize(tv, best, method="Nelder-Mead", bounds=bounds, options=opts)
    p = res.x if res.fun <= tv(best) else best
    return {names[0]: _round(p[0]), names[1]: _round(math.exp(p[1]))}


def _fit_shift(target: RecommendTarget, make: Callable[[float], densities.Density]) -> dict:
    """1-D in ln shift: a grid of 4K points over the grid's span, then bounded Brent between the best point's neighbours."""
    from scipy.optimize import minimize_scalar

    e = target.edges
    grid = np.linspace(float(e[0]), float(e[-1]), 4 * target.log_sigma.numel() + 1)

    def tv(loc):
        return allocation_tv(make(float(loc)), target)

    k = int(np.argmin([tv(v) for v in grid]))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
    res = minimize_scalar(tv, bounds=(lo, hi), method="bounded", options={"xatol": 1e-6})
    loc = float(res.x) if res.fun <= tv(grid[k]) else float(grid[k])
    return {"shift": _round(math.exp(loc))}


def _fit_range(target: RecommendTarget) -> dict:
    """Exhaustive over every range a trainer's integer flags can express (METHOD.md §6.1): ``N(N+1)/2`` intervals
    ``[i/N, j/N]`` in the CDF coordinate of uniform sampling (VP: uniform t, each step 1/N; flow: unshifted s), whose
    mass in each grid cell is the overlap with the cell's CDF interval, in closed form."""
    path = target.path
    n = int(path.num_train_timesteps)
    base = path.uniform_density() if path.is_discrete else densities.Logistic(0.0)
    g = base.cdf(target.edges).numpy()
    w = target.w.numpy()
    r = target.rho_mass.numpy()
    p = np.arange(n + 1) / n
    best_tv, best = math.inf, (0, n)
    for i in range(n):
        q = p[i + 1 :, None]
        m = np.clip(np.minimum(q, g[None, 1:]) - np.maximum(p[i], g[None, :-1]), 0.0, None)
        phi = m * w
        z = phi.sum(1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            tv = np.where(z[:, 0] > 0, 0.5 * np.abs(phi / z - r).sum(1), np.inf)
        j = int(np.argmin(tv))
        if tv[j] < best_tv:
            best_tv, best = float(tv[j]), (i, i + 1 + j)
    i, j = best
    if path.is_discrete:
        return {"t_min": i, "t_max": j - 1}
    return {"s_min": i / n, "s_max": j / n}


def fit_family(target: RecommendTarget, name: str) -> FamilyFit:
    """The member of family ``name`` (:data:`FAMILIES`) whose effective allocation is closest to ρ̂ in TV on the
    target's grid (METHOD.md §6.1). Continuous parameters are rounded to 4 significant digits (what the flags
    print) and the TV is that of the rounded parameters.

    Raises:
        ValueError: an unknown family or one not defined on the target's path kind. ImportError: no scipy.
    """
    if name not in FAMILIES:
        raise ValueError(f"family: unknown {name!r}; accepted: {', '.join(FAMILIES)}")
    if target.path.kind not in FAMILIES[name].kinds:
        raise ValueError(f"family: {name!r} is defined on {'/'.join(FAMILIES[name].kinds)} paths, not on a {target.path.kind} path")
    try:
        import scipy.optimize  # noqa: F401
    except ImportError as err:  # optional dependency
        raise ImportError("recommend needs scipy: pip install scipy (or the 'benchmarks' extra)") from err
    if name == "logit_normal":
        params = _fit_normal(target, ("mean", "std"))
    elif name == "edm_lognormal":
        params = _fit_normal(target, ("P_mean", "P_std"))
    elif name == "shift_uniform":
        params = _fit_shift(target, densities.Logistic)
    elif name == "shift_logit_normal":
        params = _fit_shift(target, lambda loc: densities.Normal(loc, 1.0))
    else:
        params = _fit_range(target)
    density = family_density(name, params, target.path)
    return FamilyFit(name, params, allocation_tv(density, target), density)


def fit_families(target: RecommendTarget, families=None) -> dict[str, FamilyFit]:
    """:func:`fit_family` for each family of ``families`` (default: every family defined on the target's path kind)."""
    names = [n for n, f in FAMILIES.items() if target.path.kind in f.kinds] if families is None else list(families)
    return {n: fit_family(target, n) for n in names}


def _target(source, noise_scheduler, training: dict) -> RecommendTarget:
    from ..schedule_io import FORMAT

    if isinstance(source, RecommendTarget):
        if training or noise_scheduler is not None:
            raise ValueError("source: a RecommendTarget already holds its training; pass no scheduler or loss with it")
        return source
    if isinstance(source, dict) and source.get("format") == FORMAT:
        return target_from_schedule(source, noise_scheduler, **training)
    return target_from_profile(source, noise_scheduler, **training)


def recommend_parameters(source, noise_scheduler=None, *, families=None, **training) -> dict:
    """The fitted parameters per family as plain data, for tools and benchmarks:
    ``{family: {"params": {...}, "tv": float}}`` (METHOD.md §6.1).

    Args:
        source: a stored schedule payload (``format`` = the schedule format), a measured
            :class:`~diffusers_infonoise.diagnostics.Profile` or its ``to_dict()``, or a :class:`RecommendTarget`.
        noise_scheduler: the training's scheduler (its path), as :func:`target_from_schedule` /
            :func:`target_from_profile` take it.
        families: names of :data:`FAMILIES` (default: those of the training's path kind).
        **training: ``prediction_type``, ``loss_weighting``, ``snr_gamma``, ``mu`` of the training (defaults there).
    """
    target = _target(source, noise_scheduler, training)
    return {n: f.to_dict() for n, f in fit_families(target, families).items()}
