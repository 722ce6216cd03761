"""The fixed training density closest to a profile's draw density, and how good it is (METHOD.md §6.1).

A trainer that will not run an adaptive sampler still offers a family of fixed densities: logit-normal
``(mean, std)`` on the flow noise level, a flow ``shift`` on uniform or on logit-normal(0, 1) sampling, EDM's
log-normal ``(P_mean, P_std)``, a timestep range. Given the entropy-rate profile ρ̂ of your model on your data
(a stored schedule, or a profile measured by forward passes) and the training you will run (its path, prediction
type and loss weighting, hence ``w(σ)``, METHOD.md §4), the target is the draw density InfoNoise would use,
``π* ∝ ρ̂/w`` (:meth:`RecommendTarget.draw_density`), and :func:`fit_families` finds in each family the member
closest to it in KL(π*‖π_θ), in closed form: for a family normal in ln σ, the mean and variance of ln σ under π*
(moment matching, with Sheppard's correction for the cells); for a shift of a fixed base, the location that
matches the base's location statistic; for a range, π*'s central quantiles. Each fit is reported with
``TV(π_θ, π*)`` on the profile's grid and the relative variance of the weighted loss it implies,
``RV = E_π[(w·ŝ)²]/(E_π[w·m̂])²`` (the batch's effective size is ``batch/RV``). Everything is on VE ``log σ``
(natural log).

* :func:`target_from_schedule`, :func:`target_from_profile`: the :class:`RecommendTarget` (grid, ρ̂, w, m̂, path;
  for a stored schedule whether it has settled, for a measured profile where its clean end is model error).
* :func:`fit_family`, :func:`fit_families`, :func:`recommend_parameters` (plain data, for tools and benchmarks).
* :func:`draw_moments`, :func:`draw_tv`, :func:`loss_variance_ratio`: the pieces, for tests and the trainers' rows.
* :data:`FAMILIES`.

The trainers' flags for these fits, clamped to what each trainer represents, are :mod:`.trainers`
(:func:`~.trainers.recommend_fixed_density`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .. import densities
from ..objective import Objective, default_objective
from ..paths import PATH_CLASSES, NoisePath, path_from_scheduler
from .grid import _F64, Allocation, _widths, grid_edges, normalize_density, profile_arrays

__all__ = [
    "FAMILIES",
    "MIN_SETTLED_REFRESHES",
    "SETTLED_MOVES",
    "judged_moves",
    "MAX_SETTLED_MOVE",
    "NotAdapted",
    "RANGE_TAIL",
    "RecommendTarget",
    "FamilyFit",
    "target_from_schedule",
    "target_from_profile",
    "family_density",
    "draw_moments",
    "draw_tv",
    "loss_variance_ratio",
    "allocation_tv",
    "fit_family",
    "fit_families",
    "recommend_parameters",
]

#: a stored schedule is fitted only after this many refreshes of π from the run's own measurements (METHOD.md §6.1)
MIN_SETTLED_REFRESHES = 3
#: a stored π has settled when its last SETTLED_MOVES changes (``pi_moves``) moved it by at most MAX_SETTLED_MOVE in
#: all (their sum bounds TV(π, π SETTLED_MOVES changes before)): the library's tolerance of an estimate against its
#: target (METHOD.md §5, TV ≤ 0.05). Measured on π's history in the fair races' runs (benchmarks/results/pi_settling.md):
#: after the mid-run refreshes at or below it π moved at most 0.058 further; after a third of those above it, over 0.1
SETTLED_MOVES = 3
MAX_SETTLED_MOVE = 0.05
#: a range family covers π*'s central quantiles [RANGE_TAIL, 1 − RANGE_TAIL] (METHOD.md §6.1)
RANGE_TAIL = 0.01


# ----------------------------------------------------------------------------------------------
# The target: π* = ρ̂/w on the profile's grid, and what the loss variance needs
# ----------------------------------------------------------------------------------------------


@dataclass
class RecommendTarget:
    """What a fixed density is fitted to (METHOD.md §6.1).

    Attributes:
        log_sigma: (K,) float64 grid, VE log σ, increasing (cell centres; cells between midpoints).
        rho_hat: (K,) float64 ρ̂ per unit log σ, normalised on the grid (the target φ ∝ ρ̂, METHOD.md §4).
        w: (K,) float64 x0-space loss weight ``w(σ)`` of the training the user will run (METHOD.md §4), > 0.
        path: the training's :class:`~diffusers_infonoise.paths.NoisePath` (its σ range bounds every draw).
        objective: ``{"prediction_type", "loss_weighting", "snr_gamma"}`` of that training.
        source: where ρ̂ came from, in words.
        m_hat: (K,) float64 x0-space error estimate per cell (VE σ, any constant factor), for the loss variance;
            default ``ρ̂·σ²`` (METHOD.md §2 without the gate: the shape is all RV needs).
        s_hat: (K,) float64 RMS of the per-sample x0 error per cell, or None: then ``ŝ = m̂`` (:attr:`notes` says so).
        model_error: (K,) bool, cells where a measured model's error reaches the identity predictor's ``σ²``
            (METHOD.md §5.10: no better than returning its input: model error, not data), or None.
        unsettled: why a stored schedule is not fitted (within its warm-up, too few refreshes), or None.
        notes: what the figures rest on, in words (one line each).
        warnings: what every fitted row's warning begins with (a stored π still moving, :func:`pi_still_moving`).
        dynamic_shift: the training's flow scheduler has ``use_dynamic_shifting`` (its own table is unshifted; the
            path carries the given ``mu``'s shift).

    Derived on construction: ``edges`` ((K+1,) cell edges clipped to the path's σ range), ``widths`` ((K,) cell
    widths before clipping), ``rho_mass`` ((K,) ρ̂'s cell masses) and ``pi_mass`` ((K,) π*'s cell masses on the
    clipped cells, :meth:`draw_density` times their widths, summing to 1).
    """

    log_sigma: torch.Tensor
    rho_hat: torch.Tensor
    w: torch.Tensor
    path: NoisePath
    objective: dict
    source: str = ""
    m_hat: torch.Tensor | None = None
    s_hat: torch.Tensor | None = None
    model_error: torch.Tensor | None = None
    unsettled: str | None = None
    notes: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    dynamic_shift: bool = False

    def __post_init__(self):
        lo, hi = self.path.log_sigma_range
        # a trainer draws nothing outside the path's range: cells are clipped to it
        self.edges = grid_edges(self.log_sigma).clamp(lo, hi)
        self.widths = _widths(self.log_sigma)
        self.rho_mass = self.rho_hat * self.widths / float((self.rho_hat * self.widths).sum())
        if self.m_hat is None:
            self.m_hat = self.rho_hat * torch.exp(2 * self.log_sigma)
            if not any(n.startswith(_M_HAT_NOTE) for n in self.notes):  # a source may have said why already
                self.notes.append(f"{_M_HAT_NOTE} (METHOD.md 2; only rho_hat is stored)")
        if self.s_hat is None and not any(n.startswith(_S_HAT_NOTE) for n in self.notes):
            self.notes.append(f"{_S_HAT_NOTE} (its spread is not stored)")
        mass = self.draw_density() * (self.edges[1:] - self.edges[:-1])
        if not float(mass.sum()) > 0:
            e = grid_edges(self.log_sigma)
            raise ValueError(
                f"source: rho_hat of {self.source or 'the source'} has no mass inside the training path's VE sigma range "
                f"{math.exp(lo):.3g}..{math.exp(hi):.3g} (its mass lies in {_mass_range(self.rho_mass, e)}); give the "
                "scheduler of the training you will run (--scheduler), or a profile measured on its levels"
            )
        self.pi_mass = mass / mass.sum()

    def draw_density(self) -> torch.Tensor:
        """(K,) π* per unit log σ: the draw density the fits aim at (METHOD.md §4: π ∝ ρ̂/w, so that φ = π·w ∝ ρ̂),
        normalised on the grid. The one place the target is defined: another target (a tempered ρ̂, a floor) is
        another body here."""
        return normalize_density(self.rho_hat / self.w, self.log_sigma)

    def to_dict(self) -> dict:
        return {
            "log_sigma": self.log_sigma.tolist(),
            "rho_hat": self.rho_hat.tolist(),
            "w": self.w.tolist(),
            "pi_star_mass": self.pi_mass.tolist(),
            "path": self.path.config(),
            "objective": {k: ("custom" if callable(v) else v) for k, v in self.objective.items()},
            "source": self.source,
            "unsettled": self.unsettled,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
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


class NotAdapted(ValueError):
    """A stored schedule saved before it adapted: it holds no ρ̂ to fit (METHOD.md §6.1: refused like an unsettled one)."""


def _mass_range(mass: torch.Tensor, edges: torch.Tensor) -> str:
    """``"VE sigma a..b"``: the cells holding ``mass`` (> 0), in words."""
    idx = torch.nonzero(mass > 0).flatten()
    if idx.numel() == 0:
        return "no cell"
    return f"VE sigma {math.exp(float(edges[int(idx[0])])):.3g}..{math.exp(float(edges[int(idx[-1]) + 1])):.3g}"


def _dynamic(scheduler) -> bool:
    return bool(getattr(getattr(scheduler, "config", None), "use_dynamic_shifting", False))


def _memory_steps(payload: dict) -> float:
    """The estimator's memory H in optimizer steps (METHOD.md §5.10) as far as a payload tells it: an explicit
    ``memory``; the former EMA rule (``ema_decay`` β per ``refresh_every``): ``refresh_every/(1 − β)``; ``"auto"``:
    ``min(500, max(refresh_every, L/8))`` with the run's length L taken as its saved ``optimizer_steps`` (a schedule
    saved at the end of its run; the sample-rate term is not stored)."""
    hp = payload.get("hyperparameters") or {}
    every = float(hp.get("refresh_every") or 1)
    if hp.get("ema_decay") is not None:
        return every / max(1e-9, 1.0 - float(hp["ema_decay"]))
    memory = hp.get("memory", "auto")
    if memory not in (None, "auto"):
        return float(memory)
    return min(500.0, max(every, float(payload.get("optimizer_steps") or 0) / 8))


def schedule_settledness(payload: dict) -> tuple[str | None, str | None]:
    """``(refusal, warning)`` for fitting a stored schedule (METHOD.md §6.1), each a sentence or None.

    A payload holds no history of π, only its counters: the refusal is a run still within its warm-up
    (``optimizer_steps < warmup_steps_resolved``: π is the base density) or one whose π was refreshed fewer than
    :data:`MIN_SETTLED_REFRESHES` times; the warning, a run whose steps since its warm-up are fewer than the
    estimator's memory (:func:`_memory_steps`), so that its m̂ still weighs the warm-up's younger model by more
    than e⁻¹. Whether the last refreshes still moved π is :func:`pi_still_moving`'s (a warning on every fitted row)."""
    steps, warmup = int(payload.get("optimizer_steps") or 0), int(payload.get("warmup_steps_resolved") or 0)
    updates = int(payload.get("num_updates") or 0)
    if steps < warmup:
        return f"the run was saved within its warm-up (step {steps} of {warmup}): pi is still the base density", None
    if updates < MIN_SETTLED_REFRESHES:
        return (
            f"pi was refreshed {updates} time(s) (at least {MIN_SETTLED_REFRESHES} are needed before a fit: the first turns "
            "the warm-up's samples into pi, and a change is seen only over the next ones)",
            None,
        )
    memory = _memory_steps(payload)
    if steps - warmup < memory:
        return None, (
            f"{steps - warmup} steps since the warm-up, fewer than the estimator's memory (~{memory:.0f} steps): m_hat still "
            "weighs the warm-up's younger model"
        )
    return None, None


def judged_moves(payload: dict) -> tuple[list, list, bool]:
    """``(steps, tvs, whole)``: the changes of a stored π that tell whether it settled (METHOD.md §6.1), from the
    payload's ``pi_moves``, and whether they are all its changes since the run's start. The first refresh of a run
    that started on its base density is left out: it turns the warm-up's samples into π, a jump that says nothing of
    settling. ``whole`` is True when the history holds every refresh (``num_updates`` of them, no start)."""
    moves = payload.get("pi_moves") or {}
    steps, tvs = list(moves.get("steps") or []), list(moves.get("tv") or [])
    start = (payload.get("start") or {}).get("choice", "base")  # no record: a run from before starts were recorded
    whole = start == "base" and 0 < len(tvs) == int(payload.get("num_updates") or 0)
    return (steps[1:], tvs[1:], True) if whole else (steps, tvs, False)


def pi_still_moving(payload: dict) -> str | None:
    """A warning when a stored π was still moving (METHOD.md §6.1), else None: its last :data:`SETTLED_MOVES` changes
    after the first (:func:`judged_moves`) moved it by more than :data:`MAX_SETTLED_MOVE` in total variation, summed;
    or, for a run whose whole history is kept, fewer than :data:`SETTLED_MOVES` such changes (too few to tell). None
    for payloads that keep fewer changes of a longer history (written before π's moves were kept, or a state resumed
    from one): not judged."""
    steps, tvs, whole = judged_moves(payload)
    if len(tvs) < SETTLED_MOVES:
        if not whole:
            return None
        return (
            f"pi moved too few times to tell whether it settled: {len(tvs)} change(s) after its first refresh (which "
            f"turns the warm-up into pi), {SETTLED_MOVES} are needed (METHOD.md 6.1): a longer run may fit elsewhere"
        )
    steps, tvs = steps[-SETTLED_MOVES:], tvs[-SETTLED_MOVES:]
    if sum(tvs) <= MAX_SETTLED_MOVE:
        return None
    return (
        f"pi was still moving: its last {SETTLED_MOVES} refreshes (steps {steps[0]}-{steps[-1]}) moved it by TV "
        f"{' + '.join(f'{t:.3f}' for t in tvs)} = {sum(tvs):.3f}, above the {MAX_SETTLED_MOVE:g} of a settled run "
        "(METHOD.md 6.1): a longer run would fit elsewhere"
    )


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
    the training sampler's bin centres (the payload's number of bins over the training path's range); ``m_hat`` is
    the rebuilt sampler's (filled and capped). Whether the run had settled (:func:`schedule_settledness`) is
    ``unsettled`` (a refusal) or a note.

    Args:
        payload: the stored schedule.
        noise_scheduler: the training's diffusers scheduler (VP, EDM or flow); default: the payload's own path's
            (a VP payload needs its scheduler: the ᾱ table is not stored).
        prediction_type, loss_weighting, snr_gamma: the training's loss (METHOD.md §3-4); default: the payload's when
            the training is on the payload's path kind, else the path's conventions.
        mu: dynamic-shift ``mu`` of a flow scheduler with ``use_dynamic_shifting`` (default: the stored shift).
        source: a description for the output.

    Raises:
        NotAdapted: a schedule saved before it adapted (it holds no ρ̂; a ValueError, which
            :func:`~.trainers.recommend_fixed_density` turns into a refusal).
        ValueError: a VP payload without its scheduler, or a bad objective (each naming the argument).
        ScheduleError: a corrupted payload.
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
        raise NotAdapted(
            f"the schedule was saved before it adapted (at optimizer step {int(payload.get('optimizer_steps') or 0)}): it holds "
            "no estimate of rho_hat to fit"
        )
    prof = sampler.profile()
    refusal, note = schedule_settledness(payload)
    moving = pi_still_moving(payload)
    return RecommendTarget(
        log_sigma=prof["log_sigma"].clone(),
        rho_hat=normalize_density(prof["rho_hat"], prof["log_sigma"]),
        w=prof["w"].to(_F64),
        path=path,
        objective=objective.keywords(),
        source=source,
        m_hat=prof["m_hat"].to(_F64).clone(),
        unsettled=refusal,
        notes=[note] if note else [],
        warnings=[moving] if moving else [],
        dynamic_shift=_dynamic(scheduler),
    )


def _optional_series(profile, key: str, k: int) -> torch.Tensor | None:
    """A (k,) float64 series ``key`` of a Profile or its dict (null → NaN), or None when absent or malformed."""
    from .grid import Profile

    if isinstance(profile, Profile):
        v = getattr(profile, key, None)
        return None if v is None else torch.as_tensor(v, dtype=_F64).flatten()
    data = profile.get("profile", profile) if isinstance(profile, dict) else None
    values = data.get(key) if isinstance(data, dict) else None
    if not isinstance(values, list) or len(values) != k:
        return None
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values):
        return None
    return torch.tensor([math.nan if v is None else float(v) for v in values], dtype=_F64)


_M_HAT_NOTE = "m_hat taken as rho_hat*sigma^2"
_S_HAT_NOTE = "the per-level loss's RMS taken as its mean m_hat"


def _profile_errors(profile, x: torch.Tensor, rho: torch.Tensor, meta: dict):
    """``(m_hat, s_hat, model_error, notes)`` of a profile (see :class:`RecommendTarget`): m̂ = q·σ² where the
    profile holds q (filled), else ρ̂·σ²; ŝ² = m̂² + n·se² from the standard errors over n probe samples of a model
    when both are recorded; model error where the measured error reaches σ² (VE σ). ``notes``: why a recorded q or
    se was not used."""
    k, sig2 = x.numel(), torch.exp(2 * x)
    notes = []
    q = _optional_series(profile, "q", k)
    m_hat = q * sig2 if q is not None and bool(torch.isfinite(q).all()) and bool((q >= 0).all()) else None
    if q is not None and m_hat is None:
        notes.append(f"{_M_HAT_NOTE} (METHOD.md 2): the profile's q holds NaN or negative values, not used")
    mmse = _optional_series(profile, "mmse", k)
    se = _optional_series(profile, "mmse_se", k)
    n = meta.get("num_probe_samples")
    s_hat = None
    if meta.get("source") == "dataset":  # its se is the spread of posterior variances over queries, not of a loss
        notes.append(f"{_S_HAT_NOTE} (a data set's profile records the spread of posterior variances, not of the loss)")
    elif se is not None and not bool((torch.isfinite(se) & (se >= 0)).all()):
        notes.append(f"{_S_HAT_NOTE}: the profile's mmse_se holds NaN or negative values, not used")
    elif m_hat is not None and se is not None and isinstance(n, int) and n >= 2:
        s_hat = torch.sqrt(m_hat**2 + n * se**2)
    model_error = None
    if mmse is not None and meta.get("source") == "model":
        model_error = torch.isfinite(mmse) & (mmse >= sig2)
    return m_hat, s_hat, model_error, notes


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

    ``m_hat`` is the profile's ``q·σ²`` (its measured error, filled), ``s_hat`` its per-sample spread where the
    standard errors and the number of probe samples are recorded, and ``model_error`` the cells where a model's
    measured error is at least σ² (METHOD.md §5.10's bound ``m̂ ≤ min(V, σ²)``, reached at the clean end).

    Args:
        profile: the profile (its ``rho_hat`` on its ``log_sigma``, VE; gated as measured).
        noise_scheduler: the training's scheduler; default: the one the profile's recorded path determines
            (``meta["path"]``; a VP path needs its scheduler).
        prediction_type, loss_weighting, snr_gamma: the training's loss; default: the profile's (its ``meta``) when
            the training is on the profile's path kind, else the path's conventions.
        mu: dynamic-shift ``mu`` of a flow scheduler with ``use_dynamic_shifting``.
        source: a description for the output.

    Raises:
        ValueError: a profile without valid ``log_sigma``/``rho_hat`` (:func:`~.grid.profile_arrays`), a ρ̂ zero on the
            whole grid or on the whole of the training path's σ range (the message gives both ranges), one that does not
            record its path and no scheduler, or a weight ``w`` that is not finite and > 0 on the grid.
        TypeError: a profile that is neither a Profile nor a dict.
    """
    x, rho, meta = profile_arrays(profile)
    if not float((rho * _widths(x)).sum()) > 0:
        raise ValueError(f"source: rho_hat of {source} is zero at every point of its grid: nothing to fit")
    scheduler = _training_scheduler(noise_scheduler, meta.get("path"), "the profile")
    path = path_from_scheduler(scheduler, mu=mu)
    same = Objective.recorded(meta) if path.records(meta.get("path")) else None
    objective = (same or default_objective(scheduler)).override(prediction_type, loss_weighting, snr_gamma)
    w = objective.x0_loss_weight(torch.exp(x), sigma_data=path.data_scale or 0.5)
    if not bool(torch.isfinite(w).all()) or bool((w <= 0).any()):
        raise ValueError("loss_weighting: the x0-space weight w(sigma) must be finite and > 0 on the profile's grid")
    m_hat, s_hat, model_error, notes = _profile_errors(profile, x, rho, meta)
    return RecommendTarget(
        log_sigma=x.clone(),
        rho_hat=normalize_density(rho, x),
        w=w,
        path=path,
        objective=objective.keywords(),
        source=source,
        m_hat=m_hat,
        s_hat=s_hat,
        model_error=model_error,
        notes=notes,
        dynamic_shift=_dynamic(scheduler),
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
    _check_family(name, path)
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


def _check_family(name: str, path: NoisePath) -> None:
    if name not in FAMILIES:
        raise ValueError(f"family: unknown {name!r}; accepted: {', '.join(FAMILIES)}")
    if path.kind not in FAMILIES[name].kinds:
        raise ValueError(f"family: {name!r} is defined on {'/'.join(FAMILIES[name].kinds)} paths, not on a {path.kind} path")


def _logit(s: float) -> float:
    return -math.inf if s <= 0 else math.inf if s >= 1 else math.log(s / (1 - s))


# ----------------------------------------------------------------------------------------------
# The fit: KL(π*‖π_θ) in closed form (METHOD.md §6.1)
# ----------------------------------------------------------------------------------------------


def draw_moments(target: RecommendTarget) -> tuple[float, float]:
    """``(mean, variance)`` of ln σ under π* (METHOD.md §6.1): the cell masses at the cell midpoints, the variance
    with Sheppard's correction ``− Σ_k p_k·h_k²/12`` (a normal binned on the cells has grouped variance
    ``s² + h²/12``, so a binned normal comes back exactly), floored at ``Σ_k p_k·h_k²/12`` (the variance of one
    uniform cell: a π* within one cell has no width the grid resolves).

    Returns floats: VE ln σ and its square.
    """
    e = target.edges
    mid, h2 = 0.5 * (e[1:] + e[:-1]), (e[1:] - e[:-1]) ** 2
    p = target.pi_mass
    mean = float((p * mid).sum())
    grouped = float((p * (mid - mean) ** 2).sum())
    cell = float((p * h2).sum()) / 12.0
    return mean, max(grouped - cell, cell)


def _logistic_location(target: RecommendTarget) -> float:
    """The location of ``Logistic(loc, 1)`` closest to π* in KL between cell masses: the root of
    ``Σ_k p_k·∂_loc ln P_k(loc) = 0``, ``P_k`` the logistic's mass in cell k. ``P_k(loc)`` is log-concave in loc (a
    log-concave density integrated over an interval, Prékopa), so the sum is concave and its derivative decreasing:
    bisection finds the unique root (to 1e-10 in ln σ). For a symmetric π* it is π*'s centre; it is not π*'s mean
    in general (METHOD.md §6.1)."""
    e, p = target.edges, target.pi_mass
    keep = p > 0
    a, b, p = e[:-1][keep], e[1:][keep], p[keep]

    def slope(loc: float) -> float:
        ya, yb = a - loc, b - loc
        # the logistic's mass of [a, b] from the side where it is not a difference of two numbers near 1
        upper = ya > 0
        mass = torch.where(upper, torch.sigmoid(-ya) - torch.sigmoid(-yb), torch.sigmoid(yb) - torch.sigmoid(ya))
        fa, fb = torch.sigmoid(ya) * torch.sigmoid(-ya), torch.sigmoid(yb) * torch.sigmoid(-yb)
        return float((p * (fa - fb) / mass.clamp_min(1e-300)).sum())

    lo, hi = float(e[0]) - 40.0, float(e[-1]) + 40.0
    for _ in range(200):
        midpoint = 0.5 * (lo + hi)
        if slope(midpoint) > 0:
            lo = midpoint
        else:
            hi = midpoint
        if hi - lo < 1e-10:
            break
    return 0.5 * (lo + hi)


def _quantile(target: RecommendTarget, alpha: float) -> float:
    """π*'s ``alpha`` quantile in ln σ (uniform within a cell)."""
    e, cum = target.edges, torch.cumsum(target.pi_mass, 0)
    k = int(torch.searchsorted(cum, torch.tensor(alpha, dtype=_F64)).clamp(max=cum.numel() - 1))
    before = float(cum[k - 1]) if k > 0 else 0.0
    frac = (alpha - before) / max(float(target.pi_mass[k]), 1e-300)
    return float(e[k] + min(max(frac, 0.0), 1.0) * (e[k + 1] - e[k]))


def _range_params(target: RecommendTarget, x_lo: float, x_hi: float) -> dict:
    """The integer range a trainer's flags express that holds ``[x_lo, x_hi]`` (VE ln σ), widened outward: VP, the
    steps whose cells hold the two ends; flow, unshifted s on the grid of 1/N."""
    path = target.path
    n = int(path.num_train_timesteps)
    if path.is_discrete:
        t = path.sigma_to_timesteps(torch.exp(torch.tensor([x_lo, x_hi], dtype=_F64)))
        return {"t_min": int(t[0]), "t_max": int(t[1])}
    s_lo = math.floor(n / (1 + math.exp(-x_lo)) + 1e-9)
    s_hi = math.ceil(n / (1 + math.exp(-x_hi)) - 1e-9)
    s_lo, s_hi = min(max(s_lo, 0), n - 1), min(max(s_hi, s_lo + 1), n)
    return {"s_min": s_lo / n, "s_max": s_hi / n}


def _round(v: float, digits: int = 4) -> float:
    """``v`` to ``digits`` significant digits: what the flags print, so the reported TV is the flags' own."""
    return float(f"{v:.{digits}g}")


def fitted_parameters(target: RecommendTarget, name: str) -> dict:
    """The KL-closest member of family ``name`` to π*, unrounded (METHOD.md §6.1): a normal in ln σ
    (``logit_normal``, ``edm_lognormal``) takes :func:`draw_moments`; ``shift_logit_normal`` the mean (the base
    N(0, 1) has mean 0); ``shift_uniform`` the logistic location of :func:`_logistic_location`; ``timestep_range``
    π*'s ``[RANGE_TAIL, 1 − RANGE_TAIL]`` quantiles widened to the trainer's integers.

    Raises:
        ValueError: an unknown family or one not defined on the target's path kind.
    """
    _check_family(name, target.path)
    if name in ("logit_normal", "edm_lognormal"):
        mean, var = draw_moments(target)
        keys = ("mean", "std") if name == "logit_normal" else ("P_mean", "P_std")
        return {keys[0]: mean, keys[1]: math.sqrt(var)}
    if name == "shift_logit_normal":
        return {"shift": math.exp(draw_moments(target)[0])}
    if name == "shift_uniform":
        return {"shift": math.exp(_logistic_location(target))}
    return _range_params(target, _quantile(target, RANGE_TAIL), _quantile(target, 1 - RANGE_TAIL))


# ----------------------------------------------------------------------------------------------
# How good a fit is: TV(π, π*) and the weighted loss's relative variance
# ----------------------------------------------------------------------------------------------


def draw_tv(masses: torch.Tensor, target: RecommendTarget) -> float:
    """``TV(π, π*) = ½(Σ_k |p_k − π*_k| + (1 − Σ_k p_k))`` (METHOD.md §6.1): ``masses`` (K,) the draws' masses in the
    target's cells; what is missing from 1 fell outside the grid (σ = 0, σ = ∞, levels beyond the path's range),
    where π* has none."""
    m = torch.as_tensor(masses, dtype=_F64)
    return float(0.5 * ((m - target.pi_mass).abs().sum() + max(0.0, 1.0 - float(m.sum()))))


def loss_variance_ratio(masses: torch.Tensor, target: RecommendTarget, below: float = 0.0, above: float = 0.0) -> float:
    """``RV = E_π[(w·ŝ)²] / (E_π[w·m̂])²`` of draws with cell masses ``masses`` (K,) (METHOD.md §6.1): the second
    moment of the weighted per-sample loss over its squared mean; a batch of B draws carries the information of
    ``B/RV`` (``n_eff/batch = 1/RV``). Draws outside the grid count with the edge cell on their side (``below``,
    ``above``: their masses). ŝ is the target's ``s_hat``, or m̂."""
    m = torch.as_tensor(masses, dtype=_F64).clone()
    m[0] += below
    m[-1] += above
    m = m / m.sum()
    wm = target.w * target.m_hat
    ws = target.w * (target.s_hat if target.s_hat is not None else target.m_hat)
    first = float((m * wm).sum())
    return float((m * ws**2).sum()) / first**2 if first > 0 else math.inf


def allocation_tv(density: densities.Density, target: RecommendTarget) -> float:
    """``TV(φ, ρ̂)`` of a training density on the target's grid, φ = π·w normalised (METHOD.md §4): π on a cell is the
    density's mass there (inside the path's σ range) over the cell's width. 1.0 when it has no mass on the grid. (The
    criterion of the fit before the KL fit of the draws; kept as the effective-allocation view of a fit.)"""
    phi = densities.bin_masses(density, target.edges) * target.w
    z = float(phi.sum())
    if not z > 0:
        return 1.0
    return float(0.5 * (phi / z - target.rho_mass).abs().sum())


def _allocation(name: str, density: densities.Density, target: RecommendTarget) -> Allocation:
    x = target.log_sigma
    pi = normalize_density(densities.bin_masses(density, target.edges) / target.widths, x)
    return Allocation(name, x, pi, target.w, normalize_density(pi * target.w, x), {"density": density.describe()})


@dataclass
class FamilyFit:
    """The member of a family closest to π*: ``params`` (plain floats/ints, as the flags print them), ``tv`` =
    TV(π_fit, π*) of the continuous family on the grid, ``rv`` its loss variance ratio, its density."""

    name: str
    params: dict
    tv: float
    rv: float
    density: densities.Density = field(repr=False)

    def to_dict(self) -> dict:
        return {"params": dict(self.params), "tv": self.tv, "rv": self.rv, "n_eff_per_batch": 1.0 / self.rv}


def density_masses(density: densities.Density, target: RecommendTarget) -> tuple[torch.Tensor, float, float]:
    """``(masses (K,), below, above)`` of a continuous density on the target's grid: its cell masses and its mass
    below and above the grid's range."""
    c = density.cdf(target.edges)
    return (c[1:] - c[:-1]).clamp_min(0), float(c[0]), float(1.0 - c[-1])


def fit_family(target: RecommendTarget, name: str) -> FamilyFit:
    """The member of family ``name`` (:data:`FAMILIES`) closest to π* in KL (:func:`fitted_parameters`), with
    continuous parameters rounded to 4 significant digits (what the flags print) and the TV and RV of the rounded
    member on the target's grid (METHOD.md §6.1).

    Raises:
        ValueError: an unknown family or one not defined on the target's path kind.
    """
    params = {
        k: (_round(v) if isinstance(v, float) and k not in ("s_min", "s_max") else v) for k, v in fitted_parameters(target, name).items()
    }
    density = family_density(name, params, target.path)
    masses, below, above = density_masses(density, target)
    return FamilyFit(name, params, draw_tv(masses, target), loss_variance_ratio(masses, target, below, above), density)


def fit_families(target: RecommendTarget, families=None) -> dict[str, FamilyFit]:
    """:func:`fit_family` for each family of ``families`` (default: every family defined on the target's path kind)."""
    names = [n for n, f in FAMILIES.items() if target.path.kind in f.kinds] if families is None else list(families)
    return {n: fit_family(target, n) for n in names}


def _target(source, noise_scheduler, training: dict, description: str | None = None) -> RecommendTarget:
    from ..schedule_io import FORMAT

    if description is not None:
        training = {**training, "source": description}
    if isinstance(source, RecommendTarget):
        if training or noise_scheduler is not None:
            raise ValueError("source: a RecommendTarget already holds its training; pass no scheduler or loss with it")
        return source
    if isinstance(source, dict) and source.get("format") == FORMAT:
        return target_from_schedule(source, noise_scheduler, **training)
    return target_from_profile(source, noise_scheduler, **training)


def recommend_parameters(source, noise_scheduler=None, *, families=None, description: str | None = None, **training) -> dict:
    """The fitted parameters per family as plain data, for tools and benchmarks:
    ``{family: {"params": {...}, "tv": float, "rv": float, "n_eff_per_batch": float}}`` (METHOD.md §6.1).

    Args:
        source: a stored schedule payload (``format`` = the schedule format), a measured
            :class:`~diffusers_infonoise.diagnostics.Profile` or its ``to_dict()``, or a :class:`RecommendTarget`.
        noise_scheduler: the training's scheduler (its path), as :func:`target_from_schedule` /
            :func:`target_from_profile` take it.
        families: names of :data:`FAMILIES` (default: those of the training's path kind).
        description: where ``source`` came from, in words (a file name): its errors and the output name it.
        **training: ``prediction_type``, ``loss_weighting``, ``snr_gamma``, ``mu`` of the training (defaults there).

    Raises:
        ValueError: a stored schedule saved before it adapted or that has not settled (:func:`schedule_settledness`,
            the message says why), and
            the errors of the target's constructors and of :func:`fit_family`.
    """
    try:
        target = _target(source, noise_scheduler, training, description)
    except NotAdapted as err:
        raise ValueError(f"source: not fitted: {err}") from None
    if target.unsettled:
        raise ValueError(f"source: not fitted: {target.unsettled}")
    return {n: f.to_dict() for n, f in fit_families(target, families).items()}
