"""The trainers' flags for the fitted fixed densities (METHOD.md §6.1): which family of :mod:`.recommend` each trainer
offers on which path, the flags that set it, and :func:`recommend_fixed_density`, which fits every family of the
training's path kind and gives each trainer's flags beside the TV of its default.

* :data:`TRAINERS` (every trainer's scripts per path kind), :data:`TRAINER_SOURCES`, :data:`TRAINER_NAMES`,
  :data:`UNSUPPORTED`; :class:`Recommendation`.

Sources of every trainer flag below (read in the repository snapshot named; the flag names, their defaults and
how each script turns them into a noise level):

==================== ======================================== ===============================================================
trainer              repository @ commit (version)            files read
==================== ======================================== ===============================================================
diffusers            huggingface/diffusers @ 58eb52c0         examples/dreambooth/train_dreambooth_lora_sd3.py, _flux.py (and
                     (0.40.0.dev0)                            the other flow scripts), examples/text_to_image/
                                                              train_text_to_image_sdxl.py, src/diffusers/training_utils.py
kohya                kohya-ss/sd-scripts @ 48d368fa           library/train_util.py, library/sd3_train_utils.py,
                     (v0.10.1-5)                              library/flux_train_utils.py, sd3_train_network.py,
                                                              flux_train_network.py
simpletuner          bghira/SimpleTuner @ bc8e6ab7 (4.8.0)    simpletuner/helpers/models/common.py (sample_flow_sigmas),
                                                              helpers/training/custom_schedule.py, field_registry/
                                                              sections/advanced.py, documentation/OPTIONS.md
onetrainer           Nerogar/OneTrainer @ 23df3832            modules/util/config/TrainConfig.py, modules/modelSetup/mixin/
                                                              ModelSetupNoiseMixin.py, ModelSetupFlowMatchingMixin.py
ai-toolkit           ostris/ai-toolkit @ 27a03a91 (0.12.26)   toolkit/config_modules.py, jobs/process/BaseSDTrainProcess.py,
                                                              toolkit/samplers/custom_flowmatch_sampler.py
diffusers-infonoise  this package                             diffusers_infonoise/training/args.py (--noise_sampler ...)
==================== ======================================== ===============================================================

Sign conventions (METHOD.md §1): diffusers' flow scripts draw ``u`` and index the scheduler's descending table,
so their noise level is ``s ≈ shift(1 − u)`` with the scheduler's own ``shift`` and a positive ``--logit_mean``
means *less* noise; kohya's SD3 ``--weighting_scheme`` and its FLUX.1 ``--timestep_sampling shift``, SimpleTuner
and OneTrainer draw the noise level itself (the SD3 paper's convention: positive = more noise) and then apply
their own shift flag.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from .. import densities
from ..paths import PATH_CLASSES, NoisePath
from .grid import _F64, Allocation
from .recommend import FamilyFit, RecommendTarget, _allocation, _target, allocation_tv, fit_families, fit_family

__all__ = [
    "TRAINERS",
    "TRAINER_SOURCES",
    "TRAINER_NAMES",
    "UNSUPPORTED",
    "Recommendation",
    "recommend_fixed_density",
]


def _flag_values(family: str, params: dict, path: NoisePath) -> dict:
    """What a trainer's flag template may name, from a family's fitted parameters: the parameters (4 significant
    digits) and the conversions the trainers' conventions need (METHOD.md §1, §6.1)."""
    g = {k: (f"{v:.4g}" if isinstance(v, float) else str(v)) for k, v in params.items()}
    if family == "logit_normal":
        m, s = params["mean"], params["std"]
        # diffusers indexes the descending table that carries the scheduler's shift: ln sigma = ln(shift) - logit_mean
        g.update(diffusers_mean=f"{path.log_shift - m:.4g}", exp_mean=f"{math.exp(m):.4g}", std_minus_1=f"{s - 1.0:.4g}")
    elif family == "timestep_range" and not path.is_discrete:  # flow's s
        lo, hi = params["s_min"], params["s_max"]
        # kohya SD3: s = t/1000 with t in [min, max); ai-toolkit: index i of linspace(1000, 1) is s = 1 - i/1000, i in [min, max)
        g.update(t_lo=round(1000 * lo), t_hi=round(1000 * hi), i_lo=round(1000 * (1 - hi)), i_hi=min(999, round(1000 * (1 - lo)) + 1))
    elif family == "timestep_range":
        n, lo, hi = path.num_train_timesteps, params["t_min"], params["t_max"]
        # OneTrainer picks int(N*strength): half a step inside, no rounding can miss the step
        g.update(t_end=hi + 1, strength_lo=f"{(lo + 0.5) / n:.6g}", strength_hi=f"{min(1.0, (hi + 1.5) / n):.6g}")
    return g


def _range_bias(params: dict, path: NoisePath) -> tuple[str, densities.Density]:
    """diffusers' train_text_to_image_sdxl.py and SimpleTuner: weights 1 everywhere, ``multiplier`` on
    ``weights[begin:end]`` (end exclusive, as their code slices). The multiplier is the smallest integer that puts
    99% of the draws inside the range; the TV reported is this mixture's."""
    n, lo, hi = path.num_train_timesteps, params["t_min"], params["t_max"]
    inside = hi - lo + 1
    mult = max(1, math.ceil(99 * (n - inside) / inside))
    probs = torch.ones(n, dtype=_F64)
    probs[lo : hi + 1] = mult
    flags = f"--timestep_bias_strategy range --timestep_bias_begin {lo} --timestep_bias_end {hi + 1} --timestep_bias_multiplier {mult}"
    return flags, densities.Piecewise(path.cell_edges(), probs)


@dataclass(frozen=True)
class TrainerSetting:
    """One way a trainer sets its density. ``family``: a family of :data:`FAMILIES` whose fit fills ``flags`` (a
    template of :func:`_flag_values`' names, or a function of the parameters and the path returning the flags and
    the density they realise), or ``None`` for a fixed choice whose density on a path is ``density``."""

    family: str | None
    flags: str | Callable[[dict, NoisePath], tuple[str, densities.Density]]
    density: Callable[[NoisePath], densities.Density] | None = None


@dataclass(frozen=True)
class TrainerScripts:
    """A trainer's scripts for one path kind: its default (flags and density), the settings it offers, and the loss
    it trains by default in this package's terms (what to pass as the training's objective: the fit depends on w)."""

    trainer: str
    kind: str
    scripts: str
    default_flags: str
    default_density: Callable[[NoisePath], densities.Density]
    settings: tuple[TrainerSetting, ...]
    source: str
    loss: str = "flow velocity (noise - latents): prediction_type flow"

    def trains(self, path: NoisePath) -> bool:
        """Whether these scripts train on ``path`` (a path of their kind)."""
        return isinstance(path, PATH_CLASSES[self.kind])


_DIFFUSERS = "huggingface/diffusers@58eb52c0"
_KOHYA = "kohya-ss/sd-scripts@48d368fa"
_SIMPLETUNER = "bghira/SimpleTuner@bc8e6ab7"
_ONETRAINER = "Nerogar/OneTrainer@23df3832"
_AI_TOOLKIT = "ostris/ai-toolkit@27a03a91"

#: the trainers (``--trainer``) and where their flags were read
TRAINER_SOURCES = {
    "diffusers": _DIFFUSERS,
    "kohya": _KOHYA,
    "simpletuner": _SIMPLETUNER,
    "onetrainer": _ONETRAINER,
    "ai-toolkit": _AI_TOOLKIT,
    "diffusers-infonoise": "this package's training scripts",
}
TRAINER_NAMES = tuple(TRAINER_SOURCES)


def _uniform_t(path: NoisePath) -> densities.Density:
    return path.uniform_density()


def _table_normal(path: NoisePath) -> densities.Density:
    return densities.Normal(path.log_shift, 1.0)  # logit-normal(0, 1) on a table that carries the scheduler's shift


_DIFFUSERS_LN = TrainerSetting("logit_normal", "--weighting_scheme logit_normal --logit_mean {diffusers_mean} --logit_std {std}")
_KOHYA_SD3 = "--weighting_scheme {} --training_shift {}"
_ONETRAINER_LN = '"timestep_distribution": "LOGIT_NORMAL", "noising_bias": {}, "noising_weight": {}, "timestep_shift": {}'

#: every trainer's scripts per path kind: default and settings, as read in :data:`TRAINER_SOURCES`
TRAINERS: tuple[TrainerScripts, ...] = (
    TrainerScripts(
        "diffusers",
        "flow",
        "train_dreambooth_lora_sd3.py, train_dreambooth_sd3.py",
        "--weighting_scheme logit_normal --logit_mean 0 --logit_std 1 (on the scheduler's shifted table)",
        _table_normal,
        (_DIFFUSERS_LN,),
        f"{_DIFFUSERS}: examples/dreambooth/train_dreambooth_lora_sd3.py, src/diffusers/training_utils.py",
        "x0 loss of the preconditioned output with --precondition_outputs 1 (its default): prediction_type sample; 0: flow",
    ),
    TrainerScripts(
        "diffusers",
        "flow",
        "train_dreambooth_lora_flux.py, train_dreambooth_flux.py and the other flow scripts (sana, lumina2, hidream, qwen_image, ...)",
        "--weighting_scheme none (uniform on the scheduler's table)",
        lambda path: densities.Logistic(path.log_shift),
        (_DIFFUSERS_LN,),
        f"{_DIFFUSERS}: examples/dreambooth/train_dreambooth_lora_flux.py",
    ),
    TrainerScripts(
        "diffusers",
        "vp",
        "train_text_to_image_sdxl.py (the other VP scripts draw t uniformly and take no flag for it)",
        "--timestep_bias_strategy none (uniform t)",
        _uniform_t,
        (TrainerSetting("timestep_range", _range_bias),),
        f"{_DIFFUSERS}: examples/text_to_image/train_text_to_image_sdxl.py (generate_timestep_weights)",
        "the scheduler's prediction_type; --snr_gamma is loss_weighting min_snr",
    ),
    TrainerScripts(
        "kohya",
        "vp",
        "train_network.py, sdxl_train_network.py, train_db.py, fine_tune.py, sdxl_train.py",
        "no --min_timestep/--max_timestep (uniform t in 0..999)",
        _uniform_t,
        (TrainerSetting("timestep_range", "--min_timestep {t_min} --max_timestep {t_end}"),),
        f"{_KOHYA}: library/train_util.py (get_timesteps: randint(min_timestep, max_timestep))",
        "epsilon (v_prediction with --v_parameterization); --min_snr_gamma is loss_weighting min_snr",
    ),
    TrainerScripts(
        "kohya",
        "flow",
        "sd3_train.py, sd3_train_network.py",
        _KOHYA_SD3.format("uniform", "1.0"),
        lambda path: densities.Logistic(0.0),
        (
            TrainerSetting("logit_normal", _KOHYA_SD3.format("logit_normal --logit_mean {mean} --logit_std {std}", "1.0")),
            TrainerSetting("shift_uniform", _KOHYA_SD3.format("uniform", "{shift}")),
            TrainerSetting("shift_logit_normal", _KOHYA_SD3.format("logit_normal --logit_mean 0 --logit_std 1", "{shift}")),
            TrainerSetting("timestep_range", _KOHYA_SD3.format("uniform", "1.0") + " --min_timestep {t_lo} --max_timestep {t_hi}"),
        ),
        f"{_KOHYA}: library/sd3_train_utils.py (get_noisy_model_input_and_timesteps: s = shift(u), t in [min, max)/1000)",
        "x0 loss (the output times -s plus x_s, against the latents): prediction_type sample",
    ),
    TrainerScripts(
        "kohya",
        "flow",
        "flux_train.py, flux_train_network.py",
        "--timestep_sampling sigma --weighting_scheme uniform --discrete_flow_shift 3.0",
        lambda path: densities.Logistic(math.log(3.0)),
        (
            TrainerSetting("logit_normal", "--timestep_sampling shift --sigmoid_scale {std} --discrete_flow_shift {exp_mean}"),
            TrainerSetting("shift_uniform", "--timestep_sampling sigma --weighting_scheme uniform --discrete_flow_shift {shift}"),
            TrainerSetting("shift_logit_normal", "--timestep_sampling shift --sigmoid_scale 1.0 --discrete_flow_shift {shift}"),
        ),
        f"{_KOHYA}: library/flux_train_utils.py (get_noisy_model_input_and_timesteps; FLUX.1 takes no min/max_timestep)",
        "flow velocity with --model_prediction_type raw (prediction_type flow); the default sigma_scaled compares an x0 "
        "estimate with the velocity target, which no w of METHOD.md section 4 describes",
    ),
    TrainerScripts(
        "simpletuner",
        "flow",
        "every flow-matching model (--flow_schedule_auto_shift off)",
        "--flow_sigmoid_scale 1.0 --flow_schedule_shift 3 (documented defaults; some model classes set their own shift)",
        lambda path: densities.Normal(math.log(3.0), 1.0),
        (
            TrainerSetting("logit_normal", "--flow_sigmoid_scale {std} --flow_schedule_shift {exp_mean}"),
            TrainerSetting("shift_uniform", "--flow_use_uniform_schedule --flow_schedule_shift {shift}"),
            TrainerSetting("shift_logit_normal", "--flow_sigmoid_scale 1.0 --flow_schedule_shift {shift}"),
        ),
        f"{_SIMPLETUNER}: simpletuner/helpers/models/common.py (sample_flow_sigmas), helpers/training/custom_schedule.py",
    ),
    TrainerScripts(
        "simpletuner",
        "vp",
        "SD 1.x/2.x, SDXL and the other DDPM models",
        "--timestep_bias_strategy none (uniform t)",
        _uniform_t,
        (TrainerSetting("timestep_range", _range_bias),),
        f"{_SIMPLETUNER}: simpletuner/helpers/training/custom_schedule.py (generate_timestep_weights)",
        "the model's prediction_type (epsilon or v_prediction)",
    ),
    TrainerScripts(
        "onetrainer",
        "flow",
        "every flow-matching model (training config keys; dynamic_timestep_shifting false)",
        '"timestep_distribution": "UNIFORM", "timestep_shift": 1.0',
        lambda path: densities.Logistic(0.0),
        (
            TrainerSetting("logit_normal", _ONETRAINER_LN.format("{mean}", "{std_minus_1}", "1.0")),
            TrainerSetting("shift_uniform", '"timestep_distribution": "UNIFORM", "timestep_shift": {shift}'),
            TrainerSetting("shift_logit_normal", _ONETRAINER_LN.format("0.0", "0.0", "{shift}")),
            TrainerSetting(
                "timestep_range",
                '"timestep_distribution": "UNIFORM", "min_noising_strength": {s_min}, "max_noising_strength": {s_max}, '
                '"timestep_shift": 1.0',
            ),
        ),
        f"{_ONETRAINER}: modules/modelSetup/mixin/ModelSetupNoiseMixin.py (_get_timestep_discrete; LOGIT_NORMAL: N(bias, weight + 1))",
    ),
    TrainerScripts(
        "onetrainer",
        "vp",
        "SD 1.x/2.x, SDXL (training config keys)",
        '"timestep_distribution": "UNIFORM", "min_noising_strength": 0.0, "max_noising_strength": 1.0',
        _uniform_t,
        (
            TrainerSetting(
                "timestep_range",
                '"timestep_distribution": "UNIFORM", "min_noising_strength": {strength_lo}, "max_noising_strength": {strength_hi}',
            ),
        ),
        f"{_ONETRAINER}: modules/modelSetup/mixin/ModelSetupNoiseMixin.py (_get_timestep_discrete)",
        "the model's prediction_type (epsilon or v_prediction)",
    ),
    TrainerScripts(
        "ai-toolkit",
        "flow",
        "flow-matching models (noise_scheduler: flowmatch; content_or_style: balanced; YAML keys under train:)",
        "timestep_type: sigmoid",
        lambda path: densities.Normal(0.0, 1.0),
        (
            TrainerSetting(None, "timestep_type: sigmoid", lambda path: densities.Normal(0.0, 1.0)),
            TrainerSetting(None, "timestep_type: linear", lambda path: densities.Logistic(0.0)),
            TrainerSetting("timestep_range", "timestep_type: linear, min_denoising_steps: {i_lo}, max_denoising_steps: {i_hi}"),
        ),
        f"{_AI_TOOLKIT}: jobs/process/BaseSDTrainProcess.py, toolkit/samplers/custom_flowmatch_sampler.py (set_train_timesteps)",
    ),
    TrainerScripts(
        "diffusers-infonoise",
        "ve",
        "train_unconditional.py (--noise_sampler edm_lognormal)",
        "--noise_sampler edm_lognormal --edm_p_mean -1.2 --edm_p_std 1.2",
        lambda path: densities.Normal(-1.2, 1.2),
        (TrainerSetting("edm_lognormal", "--noise_sampler edm_lognormal --edm_p_mean {P_mean} --edm_p_std {P_std}"),),
        "diffusers_infonoise/training/args.py",
        "the EDM recipe: prediction_type sample, loss_weighting edm",
    ),
    TrainerScripts(
        "diffusers-infonoise",
        "flow",
        "train_unconditional.py, train_text_to_image_sd3.py, train_text_to_image_flux.py (--noise_sampler logit_normal)",
        "--noise_sampler logit_normal --logit_mean 0 --logit_std 1",
        _table_normal,
        (TrainerSetting("logit_normal", "--noise_sampler logit_normal --logit_mean {diffusers_mean} --logit_std {std}"),),
        "diffusers_infonoise/training/args.py (--logit_mean in diffusers' meaning, on the scheduler's shift)",
        "flow velocity: prediction_type flow",
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
    ("diffusers-infonoise", "vp"): "its fixed VP samplers have no parameters (uniform, log_uniform, cosine); "
    "train with --noise_sampler infonoise",
}


def _setting_row(setting: TrainerSetting, target: RecommendTarget, fits: dict[str, FamilyFit]) -> dict:
    path = target.path
    if setting.family is None:
        return {"family": None, "flags": setting.flags, "tv": allocation_tv(setting.density(path), target)}
    fit = fits.get(setting.family) or fit_family(target, setting.family)
    if callable(setting.flags):  # flags that realise another density than the family's (a mixture)
        flags, density = setting.flags(fit.params, path)
        return {"family": setting.family, "flags": flags, "tv": allocation_tv(density, target)}
    return {"family": setting.family, "flags": setting.flags.format(**_flag_values(setting.family, fit.params, path)), "tv": fit.tv}


def _trainer_rows(target: RecommendTarget, fits: dict[str, FamilyFit], trainer: str) -> list[dict]:
    rows = [
        {
            "trainer": trainer,
            "scripts": t.scripts,
            "source": t.source,
            "loss": t.loss,
            "default": {"flags": t.default_flags, "tv": allocation_tv(t.default_density(target.path), target)},
            "settings": [_setting_row(s, target, fits) for s in t.settings],
        }
        for t in TRAINERS
        if t.trainer == trainer and t.trains(target.path)
    ]
    kind = target.path.kind
    return rows or [{"trainer": trainer, "unsupported": UNSUPPORTED.get((trainer, kind), f"no setting for a {kind} path")}]


@dataclass
class Recommendation:
    """The result of :func:`recommend_fixed_density`: the target, the fit of every family of its path kind, and per trainer the
    flags of each setting with ``TV(φ, ρ̂)`` beside the trainer default's (``trainers``: plain dicts; an entry with
    ``"unsupported"`` says why a trainer has no setting for the path)."""

    target: RecommendTarget
    families: dict[str, FamilyFit]
    trainers: list[dict]

    def allocations(self) -> list[Allocation]:
        """The fitted families' effective allocations φ on the target's grid (to draw with
        :func:`~diffusers_infonoise.diagnostics.plot_allocations`)."""
        return [_allocation(n, f.density, self.target) for n, f in self.families.items()]

    def to_dict(self) -> dict:
        return {
            "target": self.target.to_dict(),
            "criterion": "TV(phi, rho_hat) on the target's grid, phi = pi*w normalised (docs/METHOD.md 6.1)",
            "families": {n: f.to_dict() for n, f in self.families.items()},
            "trainers": self.trainers,
        }


def recommend_fixed_density(source, noise_scheduler=None, *, trainers="all", **training) -> Recommendation:
    """Fit every family of the training's path kind to ρ̂ and give each trainer's flags (METHOD.md §6.1).

    Args:
        source, noise_scheduler, **training: as :func:`recommend_parameters` (the stored payload, Profile or its dict,
            or RecommendTarget; the training's scheduler, ``prediction_type``, ``loss_weighting``, ``snr_gamma``, ``mu``).
        trainers: ``"all"``, a name of :data:`TRAINER_SOURCES` or a list of them.

    Raises:
        ValueError: an unknown trainer name; a single trainer (not ``"all"``) without a setting for the path kind
            (the message names ``trainer`` and says why).
    """
    names = list(TRAINER_NAMES) if trainers == "all" else [trainers] if isinstance(trainers, str) else list(trainers)
    unknown = [n for n in names if n not in TRAINER_NAMES]
    if unknown:
        raise ValueError(f"trainer: unknown {', '.join(unknown)}; accepted: all, {', '.join(TRAINER_NAMES)}")
    target = _target(source, noise_scheduler, training)
    if trainers != "all":
        for n in names:
            if not any(t.trainer == n and t.trains(target.path) for t in TRAINERS):
                why = UNSUPPORTED.get((n, target.path.kind), "no setting")
                raise ValueError(f"trainer: {n} does not support a {target.path.kind} path: {why}")
    fits = fit_families(target)
    rows = [row for n in names for row in _trainer_rows(target, fits, n)]
    return Recommendation(target, fits, rows)
