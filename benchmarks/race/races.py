"""What a race is: :class:`Race` (one data set, one diffusion path, its samplers and seeds, the training budget), the
race's denoiser (:func:`unet_config`), its schedulers (:func:`train_scheduler`; :func:`eval_scheduler`, the fixed
inference sampler), the pretrains fine-tuning races start from (:data:`PRETRAINS`, :func:`tier_pretrains`) and the
budgets of ``--smoke`` (:func:`smoke_races`). The tiers that run races are :mod:`benchmarks.race.tiers`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from benchmarks.race.arms import RECOMMENDED_ARM

ALL_SAMPLERS = ("infonoise", "edm_lognormal", "logit_normal", "uniform", "log_uniform", "cosine", "kingma_gao")
NUM_INFERENCE_STEPS = 18  # steps of every race's fixed inference sampler
EVAL_SEED = 1234  # the sampling seed of every evaluation (common random numbers across runs)
JITTER_SEEDS = (1, 2, 3)  # EVAL_SEED + each: the extra samplings of a final model that measure the evaluation jitter


def unet_config(resolution: int, channels: tuple, kind: str = "image", in_channels: int | None = None) -> dict:
    """The race's denoiser: a ``UNet2DModel`` (images, ``in_channels`` 1) or a ``UNet1DModel`` (one-hot DNA or
    k-mer tokens, length ``resolution``, ``in_channels`` the alphabet's size, 4 by default) of temporal-ResNet
    blocks, which take the noise level in every block."""
    levels = len(channels)
    if kind == "dna":
        return {
            "_class_name": "UNet1DModel",
            "sample_size": resolution,
            "in_channels": in_channels or 4,
            "out_channels": in_channels or 4,
            "extra_in_channels": 0,
            "time_embedding_type": "positional",
            "use_timestep_embedding": True,
            "flip_sin_to_cos": False,
            "freq_shift": 1,
            "block_out_channels": list(channels),
            "down_block_types": ["DownResnetBlock1D"] * levels,
            "up_block_types": ["UpResnetBlock1D"] * (levels - 1),
            "mid_block_type": "MidResTemporalBlock1D",
            "out_block_type": "OutConv1DBlock",
            "act_fn": "mish",
            "norm_num_groups": 8,
            "layers_per_block": 1,
        }
    return {
        "_class_name": "UNet2DModel",
        "sample_size": resolution,
        "in_channels": 1,
        "out_channels": 1,
        "layers_per_block": 1,
        "block_out_channels": list(channels),
        "norm_num_groups": 8,
        "down_block_types": ["DownBlock2D"] * levels,
        "up_block_types": ["UpBlock2D"] * levels,
    }


@dataclass
class Race:
    """One race: the samplers (each with its seeds) trained on one data set and path with the same budget,
    against ``baseline``. Each sampler is an arm name (:func:`parse_arm`): ``infonoise-<option>...`` is a variant
    of InfoNoise (:func:`benchmarks.race.harness.variant_args`), ``logit_normal@mean=-2`` a fixed density with
    explicit parameters, ``infonoise#tag`` the same arm re-run under another label."""

    name: str
    dataset: str
    diffusion: str  # edm, ddpm, flow
    samplers: tuple
    baseline: str
    seeds: dict  # sampler -> list of seeds
    steps: int
    eval_every: int
    channels: tuple = (16, 32)
    batch_size: int = 64
    learning_rate: float = 1e-3
    lr_warmup_steps: int = 100
    num_samples: int = 2000
    sample_batch: int = 1000
    extra_args: tuple = ("--infonoise_warmup_steps", "200")
    #: fine-tuning races: the :class:`Pretrain` (of :data:`PRETRAINS`) every run starts from, instead of a fresh UNet
    pretrained: str | None = None
    #: more arguments of one sampler; ``{pretrained:NAME}`` stands for that pretrain's folder
    sampler_extra_args: dict = field(default_factory=dict)
    #: the checkpoints that are evaluated (default: every ``eval_every`` steps)
    eval_steps: tuple | None = None
    #: another budget for the pretrains (``--smoke``)
    pretrain_steps: int | None = None
    #: keep the evaluated checkpoints (the margin study profiles them offline afterwards)
    keep_checkpoints: bool = False
    #: measure the evaluation jitter on the seed-0 runs of InfoNoise and the baseline (extra samplings)
    jitter: bool = True
    #: transfer tier: the arms of one fixed family's location sweep, whose best point is the task's oracle
    sweep: tuple = ()
    #: transfer tier: what the task moves, and the race of its unmoved reference
    task: str = ""
    reference: str | None = None
    #: the InfoNoise arm every other arm is compared with (speedups, the curves' "ahead" counts, the fixed arms'
    #: TV(φ, ρ̂) against its ρ̂, the π figure, the transfer table's window): a tier without a plain ``infonoise`` arm
    #: names its default arm here (``content``, ``draws``, ``learnability``, ``budget``); the ``bound`` tiers, whose
    #: reports predate it, name none and compare with nothing
    infonoise_arm: str = "infonoise"
    #: the steps-to-target speed-up's centred moving average, in evaluations (1: each seed's raw curve, the fair tiers)
    smoothing: int = 3


#: the Race fields that only the transfer tier sets
TRANSFER_FIELDS = {"jitter": True, "sweep": (), "task": "", "reference": None}
#: the Race fields left out of a results file where they keep their defaults (so that older files compare)
OMITTED_AT_DEFAULT = {**TRANSFER_FIELDS, "infonoise_arm": "infonoise", "smoothing": 3}


@dataclass(frozen=True)
class Pretrain:
    """A model trained once from scratch, like the main job (a fixed density of its path, 1200 steps at batch 64,
    EMA): the start of the fine-tuning races, cached as a pipeline folder under ``<root>/pretrained/<name>``."""

    name: str
    dataset: str
    diffusion: str
    sampler: str
    steps: int = 1200
    batch_size: int = 64
    learning_rate: float = 1e-3
    lr_warmup_steps: int = 100
    channels: tuple = (16, 32)
    seed: int = 0


#: the pretrains of the finetune tier (issue 22): per path the density its users start from (EDM log-normal,
#: uniform t on DDPM-ε, logit-normal on flow, the SD3/Flux stand-in), and an EDM one trained with InfoNoise, whose
#: stored schedule the ``stored`` runs start from
PRETRAINS = {
    p.name: p
    for p in (
        Pretrain("edm-edm_lognormal-mnist16", "mnist16", "edm", "edm_lognormal"),
        Pretrain("edm-infonoise-mnist16", "mnist16", "edm", "infonoise"),
        Pretrain("ddpm-uniform-mnist16", "mnist16", "ddpm", "uniform"),
        Pretrain("flow-logit_normal-mnist16", "mnist16", "flow", "logit_normal"),
        # the transfer races' sources: another seed's from-scratch run of the same race, and an 8x8 run
        Pretrain("edm-infonoise-binarized_mnist16-s1", "binarized_mnist16", "edm", "infonoise", steps=600, seed=1),
        Pretrain("edm-infonoise-binarized_digits-s1", "binarized_digits", "edm", "infonoise", steps=600, seed=1),
        # the transfer tier's fine-tunes (to 32x32, to data scaled by 0.25) start from EDM's conventional density
        Pretrain("edm-edm_lognormal-binarized_mnist16", "binarized_mnist16", "edm", "edm_lognormal"),
        # the content tier's scale-only fine-tune of digits starts from binarized digits at 16x16
        Pretrain("edm-edm_lognormal-binarized_digits16", "binarized_digits16", "edm", "edm_lognormal"),
    )
}


def train_scheduler(race: Race):
    """The race's training path with the training script's default settings (the allocation measures rebuild the
    library's samplers on it)."""
    from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

    if race.diffusion == "edm":
        return EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5)
    if race.diffusion == "ddpm":
        return DDPMScheduler(num_train_timesteps=1000, beta_schedule="linear")
    return FlowMatchEulerDiscreteScheduler(shift=1.0)


def eval_scheduler(race: Race):
    """The race's fixed inference sampler (``NUM_INFERENCE_STEPS`` steps): EDM Euler (Karras σ), DDIM η = 0
    (trailing) or flow-matching Euler."""
    from diffusers import DDIMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

    if race.diffusion == "edm":
        return EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5, prediction_type="epsilon")
    if race.diffusion == "ddpm":
        return DDIMScheduler(num_train_timesteps=1000, beta_schedule="linear", prediction_type="epsilon", timestep_spacing="trailing")
    return FlowMatchEulerDiscreteScheduler(shift=1.0)


def seed_lists(samplers, n, more=None) -> dict:
    """Each sampler's seeds: ``0 .. n-1``, or ``0 .. more[sampler]-1`` where ``more`` names it."""
    more = more or {}
    return {s: list(range(more.get(s, n))) for s in samplers}


def tier_pretrains(races: list[Race]) -> list[Pretrain]:
    """The pretrains the races start from (and whose schedules they take), in the order of :data:`PRETRAINS`."""
    names = {r.pretrained for r in races if r.pretrained}
    for r in races:
        for args in r.sampler_extra_args.values():
            names |= {a.split("{pretrained:")[1].split("}")[0] for a in args if "{pretrained:" in a}
    steps = next((r.pretrain_steps for r in races if r.pretrain_steps), None)
    return [p if steps is None else dataclasses.replace(p, steps=steps) for name, p in PRETRAINS.items() if name in names]


def smoke_races(races: list[Race]) -> list[Race]:
    """The races with the budgets of ``--smoke``: a seconds-long check of the harness, not a measurement (a race
    with a sweep keeps InfoNoise, its baseline, one more sweep point, the loss slope and a ``#recommended`` arm)."""
    return [
        dataclasses.replace(
            r,
            samplers=(
                tuple(a for a in r.samplers if a in ("infonoise", r.baseline, r.sweep[1], "loss_slope", RECOMMENDED_ARM))
                if r.sweep
                else r.samplers
            ),
            steps=60,
            eval_every=30,
            num_samples=200,
            sample_batch=200,
            lr_warmup_steps=10,
            seeds={s: [0] for s in r.samplers},
            extra_args=("--infonoise_warmup_steps", "20", "--infonoise_refresh_every", "10"),
            eval_steps=None,
            pretrain_steps=30 if r.pretrained else None,
        )
        for r in races
    ]
