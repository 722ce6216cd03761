"""The trainers' flags for the fitted fixed densities (METHOD.md §6.1): which family of :mod:`.recommend` each trainer
offers on which path, the flags that set it, the draws those flags really give (each trainer's own indexing, integer
truncation and shift, re-implemented from its source), and :func:`recommend_fixed_density`, which fits every family
of the training's path kind, clamps each fit to what the trainer represents, and gives each trainer's flags with
``TV(π, π*)`` and the loss's effective batch beside its default's.

* :data:`TRAINERS` (every trainer's scripts per path kind), :data:`TRAINER_SOURCES`, :data:`TRAINER_NAMES`,
  :data:`UNSUPPORTED`; :class:`Draws`; :class:`Recommendation`.

Sources of every trainer flag and of the sampling arithmetic below (read in the repository snapshot named; the flag
names, their defaults and how each script turns them into a noise level):

==================== ======================================== ===============================================================
trainer              repository @ commit (version)            files read
==================== ======================================== ===============================================================
diffusers            huggingface/diffusers @ 58eb52c0         examples/dreambooth/train_dreambooth_lora_sd3.py, _flux.py (and
                     (0.40.0.dev0)                            the other flow scripts), examples/text_to_image/
                                                              train_text_to_image_sdxl.py, src/diffusers/training_utils.py,
                                                              src/diffusers/schedulers/scheduling_flow_match_euler_discrete.py
kohya                kohya-ss/sd-scripts @ 48d368fa           library/train_util.py, library/sd3_train_utils.py,
                     (v0.10.1-5)                              library/flux_train_utils.py, sd3_train_network.py,
                                                              flux_train_network.py
simpletuner          bghira/SimpleTuner @ bc8e6ab7 (4.8.0)    simpletuner/helpers/models/common.py (sample_flow_sigmas, the
                                                              VP timestep draw), helpers/training/custom_schedule.py,
                                                              field_registry/sections/advanced.py, documentation/OPTIONS.md
onetrainer           Nerogar/OneTrainer @ 23df3832            modules/util/config/TrainConfig.py, modules/modelSetup/mixin/
                                                              ModelSetupNoiseMixin.py, ModelSetupFlowMatchingMixin.py,
                                                              modules/modelSetup/BaseFluxSetup.py
ai-toolkit           ostris/ai-toolkit @ 27a03a91 (0.12.26)   toolkit/config_modules.py, jobs/process/BaseSDTrainProcess.py,
                                                              toolkit/samplers/custom_flowmatch_sampler.py
musubi-tuner         kohya-ss/musubi-tuner @ 30c658c4         src/musubi_tuner/training/trainer_base.py
                                                              (get_noisy_model_input_and_timesteps), training/parser_common.py,
                                                              training/timesteps.py, modules/scheduling_flow_match_discrete.py
diffusers-infonoise  this package                             diffusers_infonoise/training/args.py (--noise_sampler ...)
==================== ======================================== ===============================================================

The arithmetic, per mechanism (x = ln σ of the continuous draw before a trainer quantises it; N = 1000 table steps):

* **table index** (diffusers' flow scripts; kohya FLUX.1 and musubi-tuner ``--timestep_sampling sigma``):
  ``i = int(u·N)`` indexes the descending table ``s_i = shift(k₀, (N − i)/N)``; u = sigmoid of a normal (or uniform),
  so x = ln k₀ − logit(u) is rounded *up* to the next level; ``i = 0`` is s = 1 (σ = ∞). A float32 sigmoid of
  z ≥ 24·ln 2 is exactly 1.0, and ``int(1.0·N) = N`` is one past the table: an ``IndexError`` (:data:`Z_SAT`).
* **floor** (kohya SD3): ``t = int(u'·N)``, s = t/N, with ``logit(u') = x``: rounded *down*; t = 0 is σ = 0.
* **ceil** (OneTrainer flow): ``t = int(shift(k, u)·N)`` (float32), s = (t + 1)/N: rounded *up*; t = N − 1 is
  s = 1 (σ = ∞), and t = N (a sigmoid of 1.0, or the float32 shift of a uniform u near 1 for most shifts above 2)
  indexes past its table.
* **continuous** (kohya FLUX.1 and musubi-tuner ``--timestep_sampling shift``, SimpleTuner): s = shift(sigmoid(·)),
  no table.
* **integer t** (VP: kohya ``randint(min, max)``, diffusers/SimpleTuner ``multinomial`` of timestep-bias weights,
  OneTrainer ``int(N·strength)``), **ai-toolkit**'s ``randint(min, max)`` over ``linspace(1000, 1, 1000)``.

Sign conventions (METHOD.md §1): diffusers' flow scripts draw ``u`` and index the scheduler's descending table,
so their noise level is ``s ≈ shift(1 − u)`` with the scheduler's own ``shift`` and a positive ``--logit_mean``
means *less* noise; kohya's SD3 ``--weighting_scheme`` and its FLUX.1 ``--timestep_sampling shift``, SimpleTuner,
OneTrainer and musubi-tuner draw the noise level itself (the SD3 paper's convention: positive = more noise) and then
apply their own shift flag.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .. import densities
from ..objective import Objective
from ..paths import PATH_CLASSES, NoisePath
from .grid import _F64, Allocation
from .recommend import (
    FamilyFit,
    NotAdapted,
    RecommendTarget,
    _allocation,
    _round,
    _target,
    density_masses,
    draw_moments,
    draw_tv,
    fit_families,
    fitted_parameters,
    loss_variance_ratio,
)

__all__ = [
    "TRAINERS",
    "TRAINER_SOURCES",
    "TRAINER_NAMES",
    "UNSUPPORTED",
    "PILE_UP",
    "CRASH",
    "Z_SAT",
    "MIN_TV_GAIN",
    "N_EFF_MARGIN",
    "Draws",
    "Recommendation",
    "recommend_fixed_density",
]

#: float32 ``sigmoid(z)`` is exactly 1.0 for z ≥ 24·ln 2 (1 + e^(−z) rounds to 1 below half an ulp of 1, 2^-24)
Z_SAT = 24 * math.log(2)
#: at most this share of a fit's draws may land beyond a trainer's representable levels on each side (METHOD.md §6.1)
PILE_UP = 0.05
#: at most this probability per draw of a draw that crashes the trainer (an index past its table)
CRASH = 1e-12
#: the table of kohya's, OneTrainer's, ai-toolkit's and musubi-tuner's flow scripts (their num_train_timesteps)
TRAINER_STEPS = 1000
#: a fit's share of draws where a model's error reaches σ² above which its rows warn
MODEL_ERROR_SHARE = 0.05
#: a row is a recommendation only when its TV(π, π*) is at least this much below its default's (METHOD.md §6.1): it
#: moves at least 1% of the draws to where π* puts them; a smaller gain is not worth changing a trainer's flags for
MIN_TV_GAIN = 0.01
#: a row warns of a noisier loss when its n_eff is below its default's by more than this share (METHOD.md §6.1)
N_EFF_MARGIN = 0.05
#: train_unconditional.py's one loss on the EDM path (its --prediction_type only picks the sign of c_out)
_EDM_RECIPE = {"prediction_type": "sample", "loss_weighting": "edm"}
#: the losses of the flow trainers' scripts: the velocity, or the x0 error of a preconditioned output, unweighted
_FLOW_LOSS = {"prediction_type": "flow", "loss_weighting": "none"}
_X0_LOSS = {"prediction_type": "sample", "loss_weighting": "none"}


def _logit(p):
    p = torch.as_tensor(p, dtype=_F64)
    return torch.log(p) - torch.log1p(-p)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


# ----------------------------------------------------------------------------------------------
# The draws a trainer really makes, on the target's grid
# ----------------------------------------------------------------------------------------------


@dataclass
class Draws:
    """The noise levels a trainer draws with given flags: discrete ``levels`` (L,) VE ln σ (±inf allowed: σ = 0 or
    ∞) with ``probs`` (L,), or a continuous ``density`` of ln σ; ``crash`` is the probability per draw of an index
    past the trainer's table (an exception in the trainer); ``note``: a change the trainer's arithmetic forced on the
    printed numbers, in words."""

    levels: torch.Tensor | None = None
    probs: torch.Tensor | None = None
    density: densities.Density | None = None
    crash: float = 0.0
    note: str | None = None

    def masses(self, target: RecommendTarget) -> tuple[torch.Tensor, float, float]:
        """``(masses (K,), below, above)`` on the target's cells: a continuous density's CDF differences; a level's
        mass spread over its own cell (midpoints to its neighbouring levels, METHOD.md §5.8) clipped to the grid, a
        level outside the grid (or at σ = 0, ∞) counted below or above. A crash counts as neither."""
        if self.density is not None:
            m, below, above = density_masses(self.density, target)
            scale = 1.0 - self.crash
            return m * scale, below * scale, above * scale
        e = target.edges
        lo, hi = float(e[0]), float(e[-1])
        x, p = self.levels.to(_F64), self.probs.to(_F64).clamp_min(0)
        order = torch.argsort(x)
        x, p = x[order], p[order]
        below, above = float(p[x < lo].sum()), float(p[x > hi].sum())
        finite = torch.isfinite(x)
        xf = x[finite]
        mid = 0.5 * (xf[1:] + xf[:-1])
        first = (xf[0] - (mid[0] - xf[0])).reshape(1) if xf.numel() > 1 else xf[:1] - 0.5
        last = (xf[-1] + (xf[-1] - mid[-1])).reshape(1) if xf.numel() > 1 else xf[-1:] + 0.5
        cell = torch.cat([first, mid, last])
        inside = (xf >= lo) & (xf <= hi)
        masses = torch.zeros(e.numel() - 1, dtype=_F64)
        if bool(inside.any()):
            idx = torch.nonzero(inside).flatten()
            a, b = int(idx[0]), int(idx[-1])
            xp = cell[a : b + 2].clamp(lo, hi).numpy()
            cum = np.concatenate([[0.0], np.cumsum(p[finite][a : b + 1].numpy())])
            at = np.interp(e.numpy(), xp, cum)
            masses = torch.from_numpy(np.clip(np.diff(at), 0.0, None))
        return masses, below, above


def _continuous(density: densities.Density) -> Draws:
    return Draws(density=density)


def _table_index(law: densities.Density, log_k0: float, n: int, crash_below: float | None) -> Draws:
    """diffusers' flow scripts (train_dreambooth_lora_sd3.py: ``indices = (u * num_train_timesteps).long()``,
    ``timesteps = noise_scheduler_copy.timesteps[indices]``), kohya's FLUX.1 and musubi-tuner's ``sigma`` sampling: the
    table ``s_i = shift(k₀, (N − i)/N)`` (FlowMatchEulerDiscreteScheduler.__init__), i = int(N·u). ``law``: of
    x = ln k₀ − logit(u); level i holds x in (ℓ_{i+1}, ℓ_i]; i = N (x below ``crash_below``) is past the table."""
    i = torch.arange(n, dtype=_F64)
    lev = log_k0 + _logit((n - i) / n)  # i = 0: +inf (s = 1)
    lower = torch.cat([lev[1:], torch.tensor([-math.inf if crash_below is None else crash_below], dtype=_F64)])
    upper = lev.clone()
    upper[0] = math.inf
    f_hi, f_lo = law.cdf(upper), law.cdf(lower)
    crash = 0.0 if crash_below is None else float(law.cdf(torch.tensor(crash_below, dtype=_F64)))
    return Draws(levels=lev, probs=(f_hi - f_lo).clamp_min(0), crash=crash)


def _floor_levels(law: densities.Density, n: int) -> Draws:
    """kohya's SD3 (library/sd3_train_utils.py, get_noisy_model_input_and_timesteps: ``u = (u * shift) / (1 + (shift
    - 1) * u)``, ``indices = (u * (t_max - t_min) + t_min).long()``, ``sigmas = timesteps / 1000``) with the default
    t range [0, 1000): level t = logit(t/N) holds x = logit(u') in [logit(t/N), logit((t + 1)/N)); t = 0 is σ = 0."""
    t = torch.arange(n, dtype=_F64)
    lev = _logit(t / n)  # t = 0: -inf
    lower = lev.clone()
    upper = torch.cat([lev[1:], torch.tensor([math.inf], dtype=_F64)])
    return Draws(levels=lev, probs=(law.cdf(upper) - law.cdf(lower)).clamp_min(0))


def _ceil_levels(law: densities.Density, n: int, crash_above: float | None) -> Draws:
    """OneTrainer's flow models (ModelSetupNoiseMixin._get_timestep_discrete: ``timestep = num_train_timesteps * shift
    * timestep / ((shift - 1) * timestep + num_train_timesteps)``, ``timestep.int()``; ModelSetupFlowMatchingMixin:
    ``sigma = (timestep + 1) / num_train_timesteps``): level j = logit((j + 1)/N) holds x = logit(shift(u)) in
    [logit(j/N), logit((j + 1)/N)); j = N − 1 is σ = ∞; x above ``crash_above`` is t = N, past the table."""
    j = torch.arange(n, dtype=_F64)
    lev = _logit((j + 1) / n)  # j = N - 1: +inf
    lower = _logit(j / n)
    upper = torch.cat([lower[1:], torch.tensor([math.inf if crash_above is None else crash_above], dtype=_F64)])
    crash = 0.0 if crash_above is None else float(1.0 - law.cdf(torch.tensor(crash_above, dtype=_F64)))
    return Draws(levels=lev, probs=(law.cdf(upper) - law.cdf(lower)).clamp_min(0), crash=crash)


def _uniform_levels(levels: torch.Tensor) -> Draws:
    return Draws(levels=levels, probs=torch.full_like(levels, 1.0 / levels.numel()))


def _vp_draws(path: NoisePath, probs: torch.Tensor) -> Draws:
    """Integer VP steps t with ``probs`` (N,), each at its table σ (METHOD.md §5.8)."""
    return Draws(levels=torch.log(path.sigmas_table), probs=probs / probs.sum())


class _OrderStatistics(densities.Density):
    """ai-toolkit's default ``timestep_type: sigmoid`` (toolkit/samplers/custom_flowmatch_sampler.py,
    set_train_timesteps: ``t = sigmoid(randn(n))``, ``timesteps = sort((1 - t) * 1000, descending)``, a new table every
    step; jobs/process/BaseSDTrainProcess.py: ``randint(min_noise_steps, max_noise_steps)`` with the default max 999):
    one of the n draws ``x = ln σ = −z ~ N(0, 1)`` chosen uniformly among all but the one of least noise. CDF
    ``(n·F(x) − (1 − (1 − F(x))ⁿ))/(n − 1)``, F the standard normal's."""

    def __init__(self, n: int):
        self.n, self.base = n, densities.Normal(0.0, 1.0)

    def cdf(self, x):
        f = self.base.cdf(torch.as_tensor(x, dtype=_F64))
        return ((self.n * f - (1 - (1 - f) ** self.n)) / (self.n - 1)).clamp(0, 1)

    def describe(self):
        return {"name": "ai-toolkit sigmoid table", "n": self.n}


# ----------------------------------------------------------------------------------------------
# float32 re-implementations at the noisy end: where an index goes past a table
# ----------------------------------------------------------------------------------------------


def _onetrainer_crash_u(shift: float, n: int = TRAINER_STEPS) -> float | None:
    """The smallest float32 u < 1 (a sigmoid's or a uniform draw near 1) for which OneTrainer's shift and truncation
    give ``int(T) ≥ N`` (ModelSetupNoiseMixin._get_timestep_discrete, float32 as it runs), or None when only u = 1.0
    does. Scans u = 1 − j·2⁻²⁴ (the float32 values below 1, which is also torch.rand's grid)."""
    j = torch.arange(1, 1 << 14, dtype=torch.float32)
    u = 1.0 - j * 2.0**-24
    t = u * n + 0.0
    big = n * shift * t / ((shift - 1) * t + n)
    bad = torch.nonzero(big.int() >= n).flatten()
    return None if bad.numel() == 0 else float(u[int(bad.max())])


def _onetrainer_uniform_crash(shift: float, n: int = TRAINER_STEPS) -> float:
    """Probability per draw that OneTrainer's UNIFORM draw (``torch.rand``: multiples of 2⁻²⁴ in [0, 1)) shifted by
    ``shift`` indexes past its table."""
    u = _onetrainer_crash_u(shift, n)
    return 0.0 if u is None else round((1.0 - u) * 2**24) / 2.0**24  # every grid value from u up (conservative)


def _onetrainer_crash_x(shift: float, n: int = TRAINER_STEPS) -> float:
    """The ln σ (after the shift) above which OneTrainer's LOGIT_NORMAL draw indexes past its table: a sigmoid of
    z ≥ :data:`Z_SAT` is 1.0; a sigmoid at or above the first crashing u of :func:`_onetrainer_crash_u` too."""
    u = _onetrainer_crash_u(shift, n)
    z = Z_SAT if u is None else float(_logit(u - 2.0**-25))
    return z + math.log(shift)


#: how far (relative) a printed UNIFORM shift may move from the fit to avoid OneTrainer's crash at the table's end
ONETRAINER_SHIFT_MOVE = 0.01


class Unrepresentable(ValueError):
    """A fitted setting that no value the trainer represents comes near: the row is dropped with this reason."""


def _onetrainer_uniform_shift(shift: float, n: int = TRAINER_STEPS) -> float:
    """The 4-significant-digit shift nearest ``shift`` whose UNIFORM draws never index past OneTrainer's table: whether
    one does depends on float32 rounding (none in [1, 1.5]; 55% of the shifts in [2, 2.5] do, 88% in [3, 5]), so the
    neighbours in the fourth digit are tried, outward, within :data:`ONETRAINER_SHIFT_MOVE` of ``shift``.

    Raises:
        Unrepresentable: no such shift that near (a farther one would draw elsewhere than the fit).
    """
    k = _round(shift)
    if _onetrainer_uniform_crash(k, n) == 0.0:
        return k
    step = 10.0 ** (math.floor(math.log10(abs(k))) - 3)
    for i in range(1, int(ONETRAINER_SHIFT_MOVE * k / step) + 1):
        for cand in (_round(k + i * step), _round(k - i * step)):
            if cand > 0 and _onetrainer_uniform_crash(cand, n) == 0.0:
                return cand
    raise Unrepresentable(
        f"no timestep_shift within {ONETRAINER_SHIFT_MOVE:.0%} of the fit {_fmt(k)} keeps OneTrainer's float32 UNIFORM draws "
        "inside its table (each gives t = 1000 near u = 1): no row"
    )


# ----------------------------------------------------------------------------------------------
# The clamp: the KL-closest member whose draws stay where the trainer represents them (METHOD.md §6.1)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """Where a trainer's draws are representable, in ln σ of the continuous draw before it is quantised: at most
    :data:`PILE_UP` of the draws below ``lo`` or above ``hi`` (they land on an edge level, at σ = 0 or ∞, or off the
    path's range), at most :data:`CRASH` below ``crash_lo`` or above ``crash_hi`` (past the table)."""

    lo: float
    hi: float
    crash_lo: float | None = None
    crash_hi: float | None = None


def _normal_z(eps: float) -> float:
    return float(torch.special.ndtri(torch.tensor(1.0 - eps, dtype=_F64)))


def _kl_normal(m: float, s: float, mu: float, var: float) -> float:
    """KL(π*‖N(m, s²)) up to a constant: ``ln s + (var + (mu − m)²)/(2s²)``."""
    return math.log(s) + (var + (mu - m) ** 2) / (2 * s * s)


def _clamped_normal(mu: float, var: float, bounds: Bounds) -> tuple[float, float]:
    """The normal N(m, s²) closest to π* (its moments ``mu``, ``var``) in KL subject to :class:`Bounds`: each
    limit is a half-plane ``m − z·s ≥ B`` or ``m + z·s ≤ B`` (z the normal quantile of its share). The optimum is the
    unconstrained one (moment matching), or on one boundary line, where ``d/ds`` of the KL is the quadratic
    ``s² ∓ z·d·s − (var + d²) = 0`` (d = mu − B), or at a corner of two lines; the feasible candidate of least KL."""
    cons = []
    zp, zc = _normal_z(PILE_UP), _normal_z(CRASH / 10)  # a tenth: room for the 4 digits the flags print
    # the crash limits also move in by 1e-3·|B|, twice what printing m to 4 digits can move it when m ≈ B: a very
    # narrow fit (s ~ 1e-5) pressed against a limit would otherwise cross it once rounded
    crash_lo = None if bounds.crash_lo is None else bounds.crash_lo + 1e-3 * abs(bounds.crash_lo)
    crash_hi = None if bounds.crash_hi is None else bounds.crash_hi - 1e-3 * abs(bounds.crash_hi)
    for side, b, z in (("lo", bounds.lo, zp), ("hi", bounds.hi, zp), ("lo", crash_lo, zc), ("hi", crash_hi, zc)):
        if b is not None and math.isfinite(b):
            cons.append((side, b, z))

    def feasible(m, s):
        return s > 0 and all((m - z * s >= b - 1e-9) if side == "lo" else (m + z * s <= b + 1e-9) for side, b, z in cons)

    cands = [(mu, math.sqrt(var))]
    for side, b, z in cons:
        d = mu - b
        root = math.sqrt(z * z * d * d + 4 * (var + d * d))
        s = (-z * d + root) / 2 if side == "lo" else (z * d + root) / 2
        cands.append((b + z * s if side == "lo" else b - z * s, s))
    for i in range(len(cons)):
        for j in range(i + 1, len(cons)):
            (si, bi, zi), (sj, bj, zj) = cons[i], cons[j]
            gi, gj = (-zi if si == "lo" else zi), (-zj if sj == "lo" else zj)  # m + g·s = b
            if abs(gi - gj) > 1e-12:
                s = (bi - bj) / (gi - gj)
                cands.append((bi - gi * s, s))
    ok = [c for c in cands if feasible(*c)]
    if not ok:  # the range is narrower than any normal the limits allow: its centre, the widest that fits
        lo, hi = bounds.lo, bounds.hi
        return 0.5 * (lo + hi), max((hi - lo) / (2 * zp), 1e-6)
    return min(ok, key=lambda c: _kl_normal(c[0], c[1], mu, var))


def _clamped_location(loc: float, base: str, bounds: Bounds) -> float:
    """A shift family's location clamped to :class:`Bounds` (the KL in the location is unimodal: the constrained
    optimum is the nearest feasible location); ``base``: ``"logistic"`` or ``"normal"`` (unit scale)."""

    def z(eps):
        return math.log((1 - eps) / eps) if base == "logistic" else _normal_z(eps)

    lo, hi = bounds.lo + z(PILE_UP), bounds.hi - z(PILE_UP)
    if bounds.crash_lo is not None:
        lo = max(lo, bounds.crash_lo + z(CRASH / 10))
    if bounds.crash_hi is not None:
        hi = min(hi, bounds.crash_hi - z(CRASH / 10))
    if lo > hi:
        return 0.5 * (lo + hi)
    return min(max(loc, lo), hi)


# ----------------------------------------------------------------------------------------------
# The settings: flags, the draws they give, and the trainer's limits
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainerSetting:
    """One way a trainer sets its density. ``family``: a family of :data:`~.recommend.FAMILIES` whose fit (clamped to
    ``bounds``) ``build`` turns into ``(flags, draws)``: the flags printed (4 significant digits) and the
    :class:`Draws` the trainer makes with exactly those numbers; ``None`` for a fixed choice (``build`` takes no fit).
    ``bounds``: the trainer's representable range for a fitted normal or shift (None: nothing to clamp)."""

    family: str | None
    build: Callable[[dict, NoisePath], tuple[str, Draws]]
    bounds: Callable[[NoisePath], Bounds] | None = None


@dataclass(frozen=True)
class TrainerScripts:
    """A trainer's scripts for one path kind: its default (flags and draws), the settings it offers, and the loss it
    trains by default in this package's terms (what to pass as the training's objective: the fit depends on w).

    ``losses``: the objectives (``prediction_type``, ``loss_weighting``) the scripts train, each with the flags that
    select it (its first is the scripts' default), or None where the loss is the user's to choose (a VP model's
    prediction type, Min-SNR): a row is fitted for the training's objective when it is one of them, else for the first
    (:func:`_row_target`). ``indexes_table``: the scripts draw an index into the training scheduler's own table, which
    a ``use_dynamic_shifting`` scheduler leaves unshifted (mu = 0 whatever the inference mu)."""

    trainer: str
    kind: str
    scripts: str
    default_flags: str
    default_draws: Callable[[NoisePath], Draws]
    settings: tuple[TrainerSetting, ...]
    source: str
    loss: str = "flow velocity (noise - latents): prediction_type flow"
    losses: tuple[tuple[dict, str], ...] | None = ((_FLOW_LOSS, ""),)
    indexes_table: bool = False

    def trains(self, path: NoisePath) -> bool:
        """Whether these scripts train on ``path`` (a path of their kind)."""
        return isinstance(path, PATH_CLASSES[self.kind])


_DIFFUSERS = "huggingface/diffusers@58eb52c0"
_KOHYA = "kohya-ss/sd-scripts@48d368fa"
_SIMPLETUNER = "bghira/SimpleTuner@bc8e6ab7"
_ONETRAINER = "Nerogar/OneTrainer@23df3832"
_AI_TOOLKIT = "ostris/ai-toolkit@27a03a91"
_MUSUBI = "kohya-ss/musubi-tuner@30c658c4"

#: the trainers (``--trainer``) and where their flags were read
TRAINER_SOURCES = {
    "diffusers": _DIFFUSERS,
    "kohya": _KOHYA,
    "simpletuner": _SIMPLETUNER,
    "onetrainer": _ONETRAINER,
    "ai-toolkit": _AI_TOOLKIT,
    "musubi-tuner": _MUSUBI,
    "diffusers-infonoise": "this package's training scripts",
}
TRAINER_NAMES = tuple(TRAINER_SOURCES)

_N = TRAINER_STEPS
_LOGIT_LO, _LOGIT_HI = math.log(1 / (_N - 1)), math.log(_N - 1)  # logit(1/N), logit((N-1)/N)


def _grid(path: NoisePath) -> Bounds:
    lo, hi = path.log_sigma_range
    return Bounds(lo, hi)


def _normal(p: dict) -> tuple[float, float]:
    return (p["mean"], p["std"]) if "mean" in p else (p["P_mean"], p["P_std"])


# diffusers' flow scripts ------------------------------------------------------------------------


def _diffusers_table_bounds(path: NoisePath) -> Bounds:
    n, k = path.num_train_timesteps, path.log_shift
    return Bounds(k + math.log(1 / (n - 1)), k + math.log(n - 1), crash_lo=k - Z_SAT)


def _diffusers_ln(p: dict, path: NoisePath) -> tuple[str, Draws]:
    m, s = _normal(p)
    mean_u, std = _round(path.log_shift - m), _round(s)  # --logit_mean counts the other way on the table (METHOD.md §1)
    law = densities.Normal(path.log_shift - mean_u, std)
    flags = f"--weighting_scheme logit_normal --logit_mean {_fmt(mean_u)} --logit_std {_fmt(std)}"
    return flags, _table_index(law, path.log_shift, path.num_train_timesteps, path.log_shift - Z_SAT)


def _diffusers_default_ln(path: NoisePath) -> Draws:
    return _table_index(densities.Normal(path.log_shift, 1.0), path.log_shift, path.num_train_timesteps, path.log_shift - Z_SAT)


def _diffusers_default_uniform(path: NoisePath) -> Draws:
    return _table_index(densities.Logistic(path.log_shift), path.log_shift, path.num_train_timesteps, None)


# kohya ------------------------------------------------------------------------------------------


def _kohya_sd3_bounds(path: NoisePath) -> Bounds:
    return Bounds(_LOGIT_LO, _LOGIT_HI)


def _kohya_sd3(family: str):
    def build(p: dict, path: NoisePath) -> tuple[str, Draws]:
        if family == "logit_normal":
            m, s = _round(p["mean"]), _round(p["std"])
            flags = f"--weighting_scheme logit_normal --logit_mean {_fmt(m)} --logit_std {_fmt(s)} --training_shift 1.0"
            law = densities.Normal(m, s)
        elif family == "shift_uniform":
            k = _round(p["shift"])
            flags, law = f"--weighting_scheme uniform --training_shift {_fmt(k)}", densities.Logistic(math.log(k))
        else:
            k = _round(p["shift"])
            flags = f"--weighting_scheme logit_normal --logit_mean 0 --logit_std 1 --training_shift {_fmt(k)}"
            law = densities.Normal(math.log(k), 1.0)
        return flags, _floor_levels(law, _N)

    return build


def _kohya_sd3_range(p: dict, path: NoisePath) -> tuple[str, Draws]:
    # t = int(u * (max - min) + min) in [min, max - 1], s = t/1000; t = 0 (sigma = 0) left out
    a, b = max(1, round(_N * p["s_min"])), min(_N, round(_N * p["s_max"]) + 1)
    flags = f"--weighting_scheme uniform --training_shift 1.0 --min_timestep {a} --max_timestep {b}"
    return flags, _uniform_levels(_logit(torch.arange(a, b, dtype=_F64) / _N))


_RAW = " --model_prediction_type raw"


def _kohya_flux(family: str):
    def build(p: dict, path: NoisePath) -> tuple[str, Draws]:
        if family == "logit_normal":
            scale, k = _round(p["std"]), _round(math.exp(p["mean"]))
            flags = f"--timestep_sampling shift --sigmoid_scale {_fmt(scale)} --discrete_flow_shift {_fmt(k)}" + _RAW
            return flags, _continuous(densities.Normal(math.log(k), scale))
        k = _round(p["shift"])
        if family == "shift_logit_normal":
            flags = f"--timestep_sampling shift --sigmoid_scale 1.0 --discrete_flow_shift {_fmt(k)}" + _RAW
            return flags, _continuous(densities.Normal(math.log(k), 1.0))
        flags = f"--timestep_sampling sigma --weighting_scheme uniform --discrete_flow_shift {_fmt(k)}" + _RAW
        return flags, _table_index(densities.Logistic(math.log(k)), math.log(k), _N, None)

    return build


# SimpleTuner ------------------------------------------------------------------------------------


def _simpletuner_flow(family: str):
    def build(p: dict, path: NoisePath) -> tuple[str, Draws]:
        if family == "logit_normal":
            scale, k = _round(p["std"]), _round(math.exp(p["mean"]))
            return f"--flow_sigmoid_scale {_fmt(scale)} --flow_schedule_shift {_fmt(k)}", _continuous(densities.Normal(math.log(k), scale))
        k = _round(p["shift"])
        if family == "shift_uniform":
            return f"--flow_use_uniform_schedule --flow_schedule_shift {_fmt(k)}", _continuous(densities.Logistic(math.log(k)))
        return f"--flow_sigmoid_scale 1.0 --flow_schedule_shift {_fmt(k)}", _continuous(densities.Normal(math.log(k), 1.0))

    return build


def _range_bias(segmented: bool):
    """diffusers' train_text_to_image_sdxl.py and SimpleTuner (generate_timestep_weights): weights 1 everywhere,
    ``multiplier`` on ``weights[begin:end]`` (end exclusive), ``torch.multinomial(weights, bsz)``; SimpleTuner draws one
    timestep per segment of the batch unless ``--disable_segmented_timestep_sampling``
    (helpers/models/common.py): its flag is part of the row. The multiplier is the smallest integer that puts 99% of
    the draws inside the range."""

    def build(p: dict, path: NoisePath) -> tuple[str, Draws]:
        n, lo, hi = path.num_train_timesteps, p["t_min"], p["t_max"]
        inside = hi - lo + 1
        mult = max(1, math.ceil(99 * (n - inside) / inside))
        probs = torch.ones(n, dtype=_F64)
        probs[lo : hi + 1] = mult
        flags = f"--timestep_bias_strategy range --timestep_bias_begin {lo} --timestep_bias_end {hi + 1} --timestep_bias_multiplier {mult}"
        if segmented:
            flags += " --disable_segmented_timestep_sampling"
        return flags, _vp_draws(path, probs)

    return build


def _uniform_t(path: NoisePath) -> Draws:
    return _vp_draws(path, torch.ones(path.num_train_timesteps, dtype=_F64))


def _vp_steps(lo: int, hi: int, path: NoisePath) -> Draws:
    probs = torch.zeros(path.num_train_timesteps, dtype=_F64)
    probs[lo : hi + 1] = 1.0
    return _vp_draws(path, probs)


# OneTrainer -------------------------------------------------------------------------------------

_ONETRAINER_LN = '"timestep_distribution": "LOGIT_NORMAL", "noising_bias": {}, "noising_weight": {}, "timestep_shift": {}'


def _onetrainer_bounds(path: NoisePath) -> Bounds:
    return Bounds(_LOGIT_LO, _LOGIT_HI, crash_hi=_onetrainer_crash_x(1.0))


def _onetrainer_uniform_bounds(path: NoisePath) -> Bounds:
    return Bounds(_LOGIT_LO, _LOGIT_HI)


def _onetrainer_flow(family: str):
    def build(p: dict, path: NoisePath) -> tuple[str, Draws]:
        if family == "logit_normal":
            bias, weight = _round(p["mean"]), _round(p["std"] - 1.0)  # its scale is noising_weight + 1
            flags = _ONETRAINER_LN.format(_fmt(bias), _fmt(weight), "1.0")
            return flags, _ceil_levels(densities.Normal(bias, weight + 1.0), _N, _onetrainer_crash_x(1.0))
        k = _round(p["shift"])
        if family == "shift_uniform":
            safe = _onetrainer_uniform_shift(k)
            draws = _ceil_levels(densities.Logistic(math.log(safe)), _N, None)
            draws.crash = _onetrainer_uniform_crash(safe)
            if safe != k:
                draws.note = (
                    f"shift {_fmt(k)} moved to {_fmt(safe)}: with {_fmt(k)} OneTrainer's float32 shift of a uniform draw near 1 "
                    "gives t = 1000, past its table"
                )
            return f'"timestep_distribution": "UNIFORM", "timestep_shift": {_fmt(safe)}', draws
        flags = _ONETRAINER_LN.format("0.0", "0.0", _fmt(k))
        return flags, _ceil_levels(densities.Normal(math.log(k), 1.0), _N, _onetrainer_crash_x(k))

    return build


def _onetrainer_flow_range(p: dict, path: NoisePath) -> tuple[str, Draws]:
    # t = int(N*min) + (int(N*max) - int(N*min))*rand, int(), s = (t + 1)/N: s in [int(N*min) + 1, int(N*max)]/N;
    # half a step inside so that no rounding of the strength misses its integer; s = 1 (sigma = inf) left out
    a = max(round(_N * p["s_min"]) - 1, 0)
    b = min(round(_N * p["s_max"]), _N - 1)
    flags = (
        f'"timestep_distribution": "UNIFORM", "min_noising_strength": {(a + 0.5) / _N:.6g}, "max_noising_strength": '
        f'{(b + 0.5) / _N:.6g}, "timestep_shift": 1.0'
    )
    return flags, _uniform_levels(_logit(torch.arange(a + 1, b + 1, dtype=_F64) / _N))


def _onetrainer_vp_range(p: dict, path: NoisePath) -> tuple[str, Draws]:
    # t in [int(N*min), int(N*max)): half a step inside, no rounding can miss the step
    n, lo, hi = path.num_train_timesteps, p["t_min"], p["t_max"]
    flags = (
        f'"timestep_distribution": "UNIFORM", "min_noising_strength": {(lo + 0.5) / n:.6g}, "max_noising_strength": '
        f"{min(1.0, (hi + 1.5) / n):.6g}"
    )
    return flags, _vp_steps(lo, hi, path)


# ai-toolkit -------------------------------------------------------------------------------------


def _ai_toolkit_levels(lo: int, hi: int) -> Draws:
    """``timesteps = linspace(1000, 1, 1000)``, index ``randint(min, max)`` with max clipped to 999 (exclusive), s = t/1000."""
    i = torch.arange(lo, min(hi, _N - 1), dtype=_F64)
    return _uniform_levels(_logit((_N - i) / _N))


def _ai_toolkit_range(p: dict, path: NoisePath) -> tuple[str, Draws]:
    # index i of linspace(1000, 1) is s = 1 - i/1000, i in [min, max) and max <= 999: s in [0.002, 1]; i = 0 (s = 1,
    # sigma = inf) left out
    lo = max(1, _N - round(_N * p["s_max"]))
    hi = min(_N - 1, _N - round(_N * p["s_min"]) + 1)
    # one YAML key a line: what pastes under train: (a comma-separated line is no YAML mapping)
    return f"timestep_type: linear\nmin_denoising_steps: {lo}\nmax_denoising_steps: {hi}", _ai_toolkit_levels(lo, hi)


# musubi-tuner -----------------------------------------------------------------------------------


def _musubi(family: str):
    def build(p: dict, path: NoisePath) -> tuple[str, Draws]:
        if family == "logit_normal":
            scale, k = _round(p["std"]), _round(math.exp(p["mean"]))
        else:
            scale, k = 1.0, _round(p["shift"])
        flags = f"--timestep_sampling shift --discrete_flow_shift {_fmt(k)} --sigmoid_scale {_fmt(scale)}"
        return flags, _continuous(densities.Normal(math.log(k), scale))

    return build


def _musubi_range(p: dict, path: NoisePath) -> tuple[str, Draws]:
    # uniform: t = rand * (max - min)/1000 + min/1000, continuous s in [min, max)/1000
    a, b = max(1, round(_N * p["s_min"])), min(_N - 1, round(_N * p["s_max"]))
    law = densities.Truncated(densities.Logistic(0.0), float(_logit(a / _N)), float(_logit(b / _N)))
    return f"--timestep_sampling uniform --min_timestep {a} --max_timestep {b}", _continuous(law)


# this package -----------------------------------------------------------------------------------


def _truncated(path: NoisePath, law: densities.Density) -> Draws:
    lo, hi = path.log_sigma_range
    return _continuous(densities.Truncated(law, lo, hi))


def _infonoise_edm(p: dict, path: NoisePath) -> tuple[str, Draws]:
    m, s = _round(p["P_mean"]), _round(p["P_std"])
    return f"--noise_sampler edm_lognormal --edm_p_mean {_fmt(m)} --edm_p_std {_fmt(s)}", _truncated(path, densities.Normal(m, s))


def _infonoise_flow(p: dict, path: NoisePath) -> tuple[str, Draws]:
    mean_u, s = _round(path.log_shift - p["mean"]), _round(p["std"])
    flags = f"--noise_sampler logit_normal --logit_mean {_fmt(mean_u)} --logit_std {_fmt(s)}"
    return flags, _truncated(path, densities.Normal(path.log_shift - mean_u, s))


#: every trainer's scripts per path kind: default and settings, as read in :data:`TRAINER_SOURCES`
TRAINERS: tuple[TrainerScripts, ...] = (
    TrainerScripts(
        "diffusers",
        "flow",
        "train_dreambooth_lora_sd3.py, train_dreambooth_sd3.py",
        "--weighting_scheme logit_normal --logit_mean 0 --logit_std 1 (on the scheduler's shifted table)",
        _diffusers_default_ln,
        (TrainerSetting("logit_normal", _diffusers_ln, _diffusers_table_bounds),),
        f"{_DIFFUSERS}: examples/dreambooth/train_dreambooth_lora_sd3.py, src/diffusers/training_utils.py",
        "x0 loss of the preconditioned output with --precondition_outputs 1 (its default): prediction_type sample; 0: flow",
        ((_X0_LOSS, ""), (_FLOW_LOSS, " --precondition_outputs 0")),
        indexes_table=True,
    ),
    TrainerScripts(
        "diffusers",
        "flow",
        "train_dreambooth_lora_flux.py, train_dreambooth_flux.py and the other flow scripts (sana, lumina2, hidream, qwen_image, ...)",
        "--weighting_scheme none (uniform on the scheduler's table)",
        _diffusers_default_uniform,
        (TrainerSetting("logit_normal", _diffusers_ln, _diffusers_table_bounds),),
        f"{_DIFFUSERS}: examples/dreambooth/train_dreambooth_lora_flux.py",
        indexes_table=True,
    ),
    TrainerScripts(
        "diffusers",
        "vp",
        "train_text_to_image_sdxl.py (the other VP scripts draw t uniformly and take no flag for it)",
        "--timestep_bias_strategy none (uniform t)",
        _uniform_t,
        (TrainerSetting("timestep_range", _range_bias(segmented=False)),),
        f"{_DIFFUSERS}: examples/text_to_image/train_text_to_image_sdxl.py (generate_timestep_weights, torch.multinomial)",
        "the scheduler's prediction_type; --snr_gamma is loss_weighting min_snr",
        None,
    ),
    TrainerScripts(
        "kohya",
        "vp",
        "train_network.py, sdxl_train_network.py, train_db.py, fine_tune.py, sdxl_train.py",
        "no --min_timestep/--max_timestep (uniform t in 0..999)",
        _uniform_t,
        (
            TrainerSetting(
                "timestep_range",
                lambda p, path: (f"--min_timestep {p['t_min']} --max_timestep {p['t_max'] + 1}", _vp_steps(p["t_min"], p["t_max"], path)),
            ),
        ),
        f"{_KOHYA}: library/train_util.py (get_timesteps: randint(min_timestep, max_timestep))",
        "epsilon (v_prediction with --v_parameterization); --min_snr_gamma is loss_weighting min_snr",
        None,
    ),
    TrainerScripts(
        "kohya",
        "flow",
        "sd3_train.py, sd3_train_network.py",
        "--weighting_scheme uniform --training_shift 1.0",
        lambda path: _floor_levels(densities.Logistic(0.0), _N),
        (
            TrainerSetting("logit_normal", _kohya_sd3("logit_normal"), _kohya_sd3_bounds),
            TrainerSetting("shift_uniform", _kohya_sd3("shift_uniform"), _kohya_sd3_bounds),
            TrainerSetting("shift_logit_normal", _kohya_sd3("shift_logit_normal"), _kohya_sd3_bounds),
            TrainerSetting("timestep_range", _kohya_sd3_range),
        ),
        f"{_KOHYA}: library/sd3_train_utils.py (get_noisy_model_input_and_timesteps: t = int(shift(u)*1000), s = t/1000)",
        "x0 loss (the output times -s plus x_s, against the latents): prediction_type sample",
        ((_X0_LOSS, ""),),
    ),
    TrainerScripts(
        "kohya",
        "flow",
        "flux_train.py, flux_train_network.py",
        "--timestep_sampling sigma --weighting_scheme uniform --discrete_flow_shift 3.0 (with --model_prediction_type raw)",
        lambda path: _table_index(densities.Logistic(math.log(3.0)), math.log(3.0), _N, None),
        (
            TrainerSetting("logit_normal", _kohya_flux("logit_normal"), _grid),
            TrainerSetting("shift_uniform", _kohya_flux("shift_uniform"), _grid),
            TrainerSetting("shift_logit_normal", _kohya_flux("shift_logit_normal"), _grid),
        ),
        f"{_KOHYA}: library/flux_train_utils.py (get_noisy_model_input_and_timesteps; FLUX.1 takes no min/max_timestep)",
        "flow velocity with --model_prediction_type raw (prediction_type flow), part of every row; kohya's default "
        "sigma_scaled compares an x0 estimate with the velocity target, which no w of METHOD.md section 4 describes",
    ),
    TrainerScripts(
        "simpletuner",
        "flow",
        "every flow-matching model (--flow_schedule_auto_shift off)",
        "--flow_sigmoid_scale 1.0 --flow_schedule_shift 3 (documented defaults; some model classes set their own shift)",
        lambda path: _continuous(densities.Normal(math.log(3.0), 1.0)),
        (
            TrainerSetting("logit_normal", _simpletuner_flow("logit_normal"), _grid),
            TrainerSetting("shift_uniform", _simpletuner_flow("shift_uniform"), _grid),
            TrainerSetting("shift_logit_normal", _simpletuner_flow("shift_logit_normal"), _grid),
        ),
        f"{_SIMPLETUNER}: simpletuner/helpers/models/common.py (sample_flow_sigmas), helpers/training/custom_schedule.py",
    ),
    TrainerScripts(
        "simpletuner",
        "vp",
        "SD 1.x/2.x, SDXL and the other DDPM models",
        "--timestep_bias_strategy none (uniform t)",
        _uniform_t,
        (TrainerSetting("timestep_range", _range_bias(segmented=True)),),
        f"{_SIMPLETUNER}: simpletuner/helpers/training/custom_schedule.py (generate_timestep_weights, segmented_timestep_selection)",
        "the model's prediction_type (epsilon or v_prediction)",
        None,
    ),
    TrainerScripts(
        "onetrainer",
        "flow",
        "every flow-matching model (training config keys; dynamic_timestep_shifting false)",
        '"timestep_distribution": "UNIFORM", "timestep_shift": 1.0',
        lambda path: _ceil_levels(densities.Logistic(0.0), _N, None),
        (
            TrainerSetting("logit_normal", _onetrainer_flow("logit_normal"), _onetrainer_bounds),
            TrainerSetting("shift_uniform", _onetrainer_flow("shift_uniform"), _onetrainer_uniform_bounds),
            TrainerSetting("shift_logit_normal", _onetrainer_flow("shift_logit_normal"), _onetrainer_bounds),
            TrainerSetting("timestep_range", _onetrainer_flow_range),
        ),
        f"{_ONETRAINER}: modules/modelSetup/mixin/ModelSetupNoiseMixin.py (_get_timestep_discrete; LOGIT_NORMAL: N(bias, weight + 1)), "
        "ModelSetupFlowMatchingMixin.py (sigma = (t + 1)/N)",
    ),
    TrainerScripts(
        "onetrainer",
        "vp",
        "SD 1.x/2.x, SDXL (training config keys)",
        '"timestep_distribution": "UNIFORM", "min_noising_strength": 0.0, "max_noising_strength": 1.0',
        _uniform_t,
        (TrainerSetting("timestep_range", _onetrainer_vp_range),),
        f"{_ONETRAINER}: modules/modelSetup/mixin/ModelSetupNoiseMixin.py (_get_timestep_discrete)",
        "the model's prediction_type (epsilon or v_prediction)",
        None,
    ),
    TrainerScripts(
        "ai-toolkit",
        "flow",
        "flow-matching models (noise_scheduler: flowmatch; content_or_style: balanced; YAML keys under train:)",
        "timestep_type: sigmoid",
        lambda path: _continuous(_OrderStatistics(_N)),
        (
            TrainerSetting(None, lambda p, path: ("timestep_type: sigmoid", _continuous(_OrderStatistics(_N)))),
            TrainerSetting(None, lambda p, path: ("timestep_type: linear", _ai_toolkit_levels(0, _N - 1))),
            TrainerSetting("timestep_range", _ai_toolkit_range),
        ),
        f"{_AI_TOOLKIT}: jobs/process/BaseSDTrainProcess.py, toolkit/samplers/custom_flowmatch_sampler.py (set_train_timesteps)",
    ),
    TrainerScripts(
        "musubi-tuner",
        "flow",
        "wan_train_network.py, hv_train_network.py, fpack_train_network.py, flux_kontext_train_network.py, "
        "qwen_image_train_network.py and the other network trainers (their shared trainer_base.py)",
        "--timestep_sampling sigma (uniform s on the unshifted table: --discrete_flow_shift is not applied in training)",
        lambda path: _table_index(densities.Logistic(0.0), 0.0, _N, None),
        (
            TrainerSetting("logit_normal", _musubi("logit_normal"), _grid),
            TrainerSetting("shift_logit_normal", _musubi("shift_logit_normal"), _grid),
            TrainerSetting("timestep_range", _musubi_range),
        ),
        f"{_MUSUBI}: src/musubi_tuner/training/trainer_base.py (get_noisy_model_input_and_timesteps)",
        "flow velocity (noise - latents), --weighting_scheme none: prediction_type flow",
    ),
    TrainerScripts(
        "diffusers-infonoise",
        "ve",
        "train_unconditional.py (--noise_sampler edm_lognormal)",
        "--noise_sampler edm_lognormal --edm_p_mean -1.2 --edm_p_std 1.2",
        lambda path: _truncated(path, densities.Normal(-1.2, 1.2)),
        (TrainerSetting("edm_lognormal", _infonoise_edm),),
        "diffusers_infonoise/training/args.py",
        "the EDM recipe: prediction_type sample, loss_weighting edm",
        ((_EDM_RECIPE, ""),),  # --diffusion edm trains through D with λ(σ) whatever --prediction_type says
    ),
    TrainerScripts(
        "diffusers-infonoise",
        "flow",
        "train_unconditional.py, train_text_to_image_sd3.py, train_text_to_image_flux.py (--noise_sampler logit_normal)",
        "--noise_sampler logit_normal --logit_mean 0 --logit_std 1",
        lambda path: _truncated(path, densities.Normal(path.log_shift, 1.0)),
        (TrainerSetting("logit_normal", _infonoise_flow),),
        "diffusers_infonoise/training/args.py (--logit_mean in diffusers' meaning, on the scheduler's shift)",
        "flow velocity: prediction_type flow",
        None,
    ),
)

#: (trainer, path kind) combinations without a setting, and why (the one line printed for them)
UNSUPPORTED: dict[tuple[str, str], str] = {
    ("diffusers", "ve"): "no example script samples EDM's log-normal; train_dreambooth_lora_sdxl.py --do_edm_style_training draws "
    "uniform indices of the EDM scheduler's table and has no P_mean/P_std flag",
    ("kohya", "ve"): "no EDM (VE) path: its scripts train VP (SD 1.x/2.x, SDXL) and flow (SD3, FLUX.1, Lumina) models",
    ("simpletuner", "ve"): "no EDM (VE) path with a log-normal flag",
    ("onetrainer", "ve"): "no EDM (VE) path with a log-normal setting",
    ("ai-toolkit", "ve"): "no EDM (VE) path with a log-normal setting",
    ("ai-toolkit", "vp"): "min_denoising_steps/max_denoising_steps index the scheduler's own inference table, whose order and "
    "offset (timestep_spacing, steps_offset) the model's scheduler config decides; not converted here",
    ("musubi-tuner", "ve"): "its models are flow-matching (video and image): no EDM (VE) path",
    ("musubi-tuner", "vp"): "its models are flow-matching (video and image): no VP path",
    ("diffusers-infonoise", "vp"): "its fixed VP samplers have no parameters (uniform, log_uniform, cosine); "
    "train with --noise_sampler infonoise",
}


# ----------------------------------------------------------------------------------------------
# The rows
# ----------------------------------------------------------------------------------------------


def _figures(draws: Draws, target: RecommendTarget) -> dict:
    """TV(π, π*), RV and n_eff/batch of a row's draws, its crash probability, and the masses (for comparisons)."""
    masses, below, above = draws.masses(target)
    rv = loss_variance_ratio(masses, target, below, above)
    out = {"tv": draw_tv(masses, target), "rv": rv, "n_eff_per_batch": 1.0 / rv, "crash_probability": draws.crash}
    out["_masses"] = (masses, below, above)
    return out


def _clamp(setting: TrainerSetting, target: RecommendTarget, params: dict, path: NoisePath | None = None) -> tuple[dict, str | None]:
    """The fit's parameters clamped to the setting's :class:`Bounds` (on ``path``, the one the trainer draws on;
    default the target's)
    intersected with the target's grid, and a sentence when the clamp changed them (METHOD.md §6.1): the trainer's own
    range, and the grid's where it is the narrower."""
    if setting.bounds is None or setting.family == "timestep_range":
        return params, None
    own = setting.bounds(target.path if path is None else path)
    lo, hi = float(target.edges[0]), float(target.edges[-1])
    b = Bounds(max(own.lo, lo), min(own.hi, hi), own.crash_lo, own.crash_hi)
    if setting.family in ("logit_normal", "edm_lognormal"):
        mu, var = draw_moments(target)
        m, s = _clamped_normal(mu, var, b)
        keys = ("mean", "std") if "mean" in params else ("P_mean", "P_std")
        new = {keys[0]: m, keys[1]: s}
        was = f"N({mu:.4g}, {math.sqrt(var):.4g}^2)"
        now = f"N({m:.4g}, {s:.4g}^2)"
    else:
        loc = math.log(params["shift"])
        new_loc = _clamped_location(loc, "logistic" if setting.family == "shift_uniform" else "normal", b)
        new, was, now = {"shift": math.exp(new_loc)}, f"shift {params['shift']:.4g}", f"shift {math.exp(new_loc):.4g}"
    changed = any(abs(new[k] - params[k]) > 1e-6 * max(1.0, abs(params[k])) for k in new)
    if not changed:
        return params, None
    grid = []
    if lo > own.lo:
        grid.append(f"below VE sigma {math.exp(lo):.3g}")
    if hi < own.hi:
        grid.append(f"above VE sigma {math.exp(hi):.3g}")
    why = (
        f"clamped from {was} to {now} in ln sigma: the trainer represents VE sigma {math.exp(own.lo):.3g}..{math.exp(own.hi):.3g} "
        f"(at most {PILE_UP:.0%} of draws beyond each end"
        + (", a crash chance below 1e-12" if b.crash_lo is not None or b.crash_hi is not None else "")
        + ")"
        + (f", and rho_hat's grid has no level {' or '.join(grid)}" if grid else "")
    )
    return new, why


def _model_error_share(masses: torch.Tensor, target: RecommendTarget) -> float:
    if target.model_error is None:
        return 0.0
    return float(masses[target.model_error].sum())


def _pair(a: float, b: float, digits: int = 2) -> tuple[str, str]:
    """``a`` and ``b`` printed with ``digits`` significant digits, or more (up to 6) until they differ."""
    for d in range(digits, 7):
        sa, sb = f"{a:.{d}g}", f"{b:.{d}g}"
        if sa != sb:
            break
    return sa, sb


def _warnings(fig: dict, default: dict, target: RecommendTarget) -> list[str]:
    """The row's warnings (METHOD.md §6.1): its n_eff below its default's by more than :data:`N_EFF_MARGIN`, its
    draws where a model's error reaches σ², an index past the table."""
    out = []
    a, b = fig["n_eff_per_batch"], default["n_eff_per_batch"]
    sa, sb = _pair(a, b, 3)
    if a < 0.5 * b:
        out.append(f"n_eff {sa}x batch, below half the default's {sb}x: the weighted loss is {b / a:.1f}x noisier per step")
    elif a < b * (1 - N_EFF_MARGIN):
        out.append(f"n_eff {sa}x batch, {1 - a / b:.1%} below the default's {sb}x")
    share = _model_error_share(fig["_masses"][0], target)
    if share >= MODEL_ERROR_SHARE:
        out.append(
            f"{share:.0%} of these draws go where the model's error reaches sigma^2 (no better than returning its input: "
            "model error, not data; METHOD.md 5.10)"
        )
    if fig["crash_probability"] > CRASH:
        out.append(f"an index past the trainer's table with probability {fig['crash_probability']:.2g} per draw")
    return out


def _same_draws(a: dict, b: dict) -> bool:
    (ma, la, ha), (mb, lb, hb) = a["_masses"], b["_masses"]
    return (
        float((ma - mb).abs().max()) < 1e-12
        and abs(la - lb) < 1e-12
        and abs(ha - hb) < 1e-12
        and abs(a["crash_probability"] - b["crash_probability"]) < 1e-15
    )


def _public(fig: dict) -> dict:
    return {k: v for k, v in fig.items() if not k.startswith("_")}


def _objective_text(objective: dict) -> str:
    gamma = objective.get("snr_gamma")
    return f"prediction_type {objective['prediction_type']}, loss_weighting {objective['loss_weighting']}" + (
        f" (snr_gamma {gamma:g})" if gamma is not None else ""
    )


def _row_target(t: TrainerScripts, target: RecommendTarget) -> tuple[RecommendTarget, str, str | None]:
    """``(target, flags, note)`` of a trainer's row (METHOD.md §6.1): the training's target when its objective is one
    the scripts train (``t.losses`` None: any), with the flags that select it; else the target for the scripts'
    default loss (w rebuilt from it on the same ρ̂ and m̂), and a sentence naming both losses."""
    if t.losses is None:
        return target, "", None
    same = {k: target.objective.get(k) for k in ("prediction_type", "loss_weighting")}
    for loss, flags in t.losses:
        if loss == same:
            return target, flags, None
    loss, flags = t.losses[0]
    w = Objective(**loss).x0_loss_weight(torch.exp(target.log_sigma), sigma_data=target.path.data_scale or 0.5)
    own = RecommendTarget(
        log_sigma=target.log_sigma,
        rho_hat=target.rho_hat,
        w=w.to(_F64),
        path=target.path,
        objective={**loss, "snr_gamma": None},
        source=target.source,
        m_hat=target.m_hat,
        s_hat=target.s_hat,
        model_error=target.model_error,
        warnings=target.warnings,
        dynamic_shift=target.dynamic_shift,
    )
    note = (
        f"fitted for this trainer's loss ({_objective_text(own.objective)}), not the one given "
        f"({_objective_text(target.objective)}): its scripts train no other"
    )
    return own, flags, note


def _draw_path(t: TrainerScripts, target: RecommendTarget) -> NoisePath:
    """The path whose table the scripts index: a dynamic-shift scheduler's own table is unshifted (diffusers' Flux
    scripts train on it, mu = 0), whatever mu the target's path carries."""
    if t.indexes_table and target.dynamic_shift and target.path.log_shift != 0.0:
        return dataclasses.replace(target.path, shift=1.0)
    return target.path


def _trainer_rows(target: RecommendTarget, trainer: str) -> list[dict]:
    rows = []
    for t in TRAINERS:
        if t.trainer != trainer or not t.trains(target.path):
            continue
        own, loss_flags, loss_note = _row_target(t, target)
        path = _draw_path(t, own)
        notes = [loss_note] if loss_note else []
        if path is not own.path:
            notes.append(
                f"its scripts index the scheduler's own table, unshifted for a use_dynamic_shifting scheduler (mu = 0 "
                f"in training, not the given mu {own.path.log_shift:.4g}): the rows are the draws of that table"
            )
        default = _figures(t.default_draws(path), own)
        settings, dropped = [], []
        for s in t.settings:
            clamped = None
            if s.family is None:
                flags, draws = s.build({}, path)
            else:
                params, clamped = _clamp(s, own, fitted_parameters(own, s.family), path)
                try:
                    flags, draws = s.build(params, path)
                except Unrepresentable as err:
                    dropped.append(f"{s.family}: {err}")
                    continue
            flags += loss_flags
            fig = _figures(draws, own)
            label = s.family or flags
            if _same_draws(fig, default):
                dropped.append(
                    f"{label}: the default already fits (the fit gives the default's draws)" if s.family else f"{flags}: the default itself"
                )
                continue
            if fig["tv"] > default["tv"] - MIN_TV_GAIN:
                a, b = _pair(fig["tv"], default["tv"], 3)
                dropped.append(
                    f"{label}: the default already fits as well (TV {a} vs the default's {b}; a row must be {MIN_TV_GAIN} lower)"
                )
                continue
            warnings = _warnings(fig, default, own)
            if draws.note:
                warnings.insert(0, draws.note)
            if clamped:
                warnings.insert(0, clamped)
            warnings[:0] = own.warnings  # the target's own (a stored π still moving) first: it is the fit's premise
            settings.append({"family": s.family, "flags": flags, **_public(fig), "clamped": clamped, "warnings": warnings})
        dw = _warnings(default, default, own)
        rows.append(
            {
                "trainer": trainer,
                "scripts": t.scripts,
                "source": t.source,
                "loss": t.loss,
                "objective": {k: ("custom" if callable(v) else v) for k, v in own.objective.items()},
                "notes": notes,
                "default": {"flags": t.default_flags, **_public(default), "warnings": dw},
                "settings": settings,
                "dropped": dropped,
            }
        )
    kind = target.path.kind
    return rows or [{"trainer": trainer, "unsupported": UNSUPPORTED.get((trainer, kind), f"no setting for a {kind} path")}]


@dataclass
class Recommendation:
    """The result of :func:`recommend_fixed_density`: the target, the fit of every family of its path kind, and per
    trainer the flags of each setting with ``TV(π, π*)``, ``RV`` and ``n_eff/batch`` beside the trainer default's
    (``trainers``: plain dicts; an entry with ``"unsupported"`` says why a trainer has no setting for the path).
    ``refused``: why nothing is fitted (a stored schedule saved before it adapted, ``target`` then None, or one that
    has not settled), with empty fits and rows."""

    target: RecommendTarget | None
    families: dict[str, FamilyFit]
    trainers: list[dict]
    refused: str | None = None
    notes: list = field(default_factory=list)

    def allocations(self) -> list[Allocation]:
        """The fitted families' effective allocations φ on the target's grid (to draw with
        :func:`~diffusers_infonoise.diagnostics.plot_allocations`)."""
        return [_allocation(n, f.density, self.target) for n, f in self.families.items()]

    def to_dict(self) -> dict:
        return {
            "target": None if self.target is None else self.target.to_dict(),
            "criterion": "KL(pi*||pi_theta) in closed form, reported as TV(pi, pi*) on the target's grid with pi* = "
            "rho_hat/w normalised, and RV = E[(w*s)^2]/E[w*m]^2 of the draws (docs/METHOD.md 6.1)",
            "refused": self.refused,
            "notes": list(self.notes),
            "families": {n: f.to_dict() for n, f in self.families.items()},
            "trainers": self.trainers,
        }


def recommend_fixed_density(source, noise_scheduler=None, *, trainers="all", description: str | None = None, **training) -> Recommendation:
    """Fit every family of the training's path kind to π* and give each trainer's flags, clamped to what the trainer
    represents, with the TV and effective batch of the draws those flags really give (METHOD.md §6.1).

    Args:
        source, noise_scheduler, **training: as :func:`~.recommend.recommend_parameters` (the stored payload, Profile
            or its dict, or RecommendTarget; the training's scheduler, ``prediction_type``, ``loss_weighting``,
            ``snr_gamma``, ``mu``).
        trainers: ``"all"``, a name of :data:`TRAINER_SOURCES` or a list of them.
        description: where ``source`` came from, in words (a file name): its errors and the output name it.

    Returns:
        a :class:`Recommendation`; ``refused`` set (no fits, no rows) for a stored schedule saved before it adapted
        (``target`` None) or that has not settled.

    Raises:
        ValueError: an unknown trainer name; a single trainer (not ``"all"``) without a setting for the path kind
            (the message names ``trainer`` and says why).
    """
    names = list(TRAINER_NAMES) if trainers == "all" else [trainers] if isinstance(trainers, str) else list(trainers)
    unknown = [n for n in names if n not in TRAINER_NAMES]
    if unknown:
        raise ValueError(f"trainer: unknown {', '.join(unknown)}; accepted: all, {', '.join(TRAINER_NAMES)}")
    try:
        target = _target(source, noise_scheduler, training, description)
    except NotAdapted as err:
        return Recommendation(None, {}, [], refused=str(err))
    if trainers != "all":
        for n in names:
            if not any(t.trainer == n and t.trains(target.path) for t in TRAINERS):
                why = UNSUPPORTED.get((n, target.path.kind), "no setting")
                raise ValueError(f"trainer: {n} does not support a {target.path.kind} path: {why}")
    if target.unsettled:
        return Recommendation(target, {}, [], refused=target.unsettled, notes=list(target.notes))
    fits = fit_families(target)
    rows = [row for n in names for row in _trainer_rows(target, n)]
    return Recommendation(target, fits, rows, notes=list(target.notes))
