"""What each tier of the quality race runs (issue 6): :class:`Race` (one data set, one diffusion path,
its samplers and seeds, the training budget), the race's denoiser (:func:`unet_config`), its
schedulers (:func:`train_scheduler`; :func:`eval_scheduler`, the fixed inference sampler), the tiers
(:func:`tier_races`), what each tier leaves out (:data:`TIER_SIZING`) and the order its runs start in
(:data:`TIER_PRIORITY`, :func:`run_priority`), and what an arm's name means (:func:`parse_arm`)."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

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


#: the tag of a fixed density fitted at run time (``logit_normal#recommended``, :mod:`benchmarks.race.recommended`);
#: ``#recommended-pilot=<f>`` fits it from scratch on a pilot of the share f of the race's steps instead of
#: :data:`DEFAULT_PILOT_FRACTION`
RECOMMENDED_TAG = "recommended"
#: the share of a race's steps a from-scratch ``#recommended`` arm's pilot trains (the first pass of issue 32)
DEFAULT_PILOT_FRACTION = 0.25
#: the fixed densities a ``#recommended`` arm may name: the normals in ln σ (METHOD.md §6.1's one 2-parameter family)
RECOMMENDABLE = ("logit_normal", "edm_lognormal")


@dataclass(frozen=True)
class Arm:
    """What a race's sampler name says (:func:`parse_arm`): ``<sampler>[-<option>...][@<key>=<value>,...][#<tag>]``.

    ``name`` is the library's sampler (``--noise_sampler``); ``options`` are InfoNoise-style variant options
    (``<flag>_<value>`` or ``<flag>=<value>``: ``--infonoise_<flag> <value>``, for the adaptive samplers);
    ``params`` the parameters of a fixed density in the library's convention (the keywords of
    :func:`diffusers_infonoise.baselines.base_density`: logit_normal's ``mean`` is the centre of ln σ on VE, > 0
    more noise; ``std``; edm_lognormal's ``P_mean``, ``P_std``; mode's ``scale``); ``tag`` a label only (the same
    arguments under another name, e.g. ``infonoise#v2`` for InfoNoise re-run on newer code), except
    :data:`RECOMMENDED_TAG`: ``logit_normal#recommended`` is the fixed density whose parameters are fitted at run time
    to a profile of the race's model on its data (:mod:`benchmarks.race.recommended`)."""

    name: str
    options: tuple = ()
    params: tuple = ()  # ((key, value), ...), in the order given
    tag: str = ""

    @property
    def recommended(self) -> bool:
        """Whether the arm's parameters are resolved at run time from a profile (``#recommended[-pilot=<f>]``)."""
        return self.tag == RECOMMENDED_TAG or self.tag.startswith(f"{RECOMMENDED_TAG}-pilot=")

    @property
    def pilot_fraction(self) -> float | None:
        """A ``#recommended`` arm's pilot share of the race's steps (from scratch): ``f`` of ``-pilot=<f>``, else
        :data:`DEFAULT_PILOT_FRACTION`; ``None`` for other arms."""
        if not self.recommended:
            return None
        return float(self.tag.partition("=")[2]) if "=" in self.tag else DEFAULT_PILOT_FRACTION

    @property
    def kind(self) -> str:
        """``"infonoise"`` (InfoNoise and its variants), ``"fixed"`` (a fixed density) or ``"adaptive"`` (another
        adaptive sampler: Kingma & Gao, the loss slope)."""
        from diffusers_infonoise.sampler import FIXED_DENSITY_NAMES

        return "infonoise" if self.name == "infonoise" else "fixed" if self.name in FIXED_DENSITY_NAMES else "adaptive"


def parse_arm(arm: str) -> Arm:
    """The :class:`Arm` of a sampler name such as ``infonoise``, ``infonoise-gate_none``, ``logit_normal@mean=-2``,
    ``logit_normal@mean=-1.3,std=0.8``, ``infonoise#v2`` or ``logit_normal#recommended``.

    Raises:
        ValueError: an unknown sampler, a parameter that is not ``<key>=<number>``, parameters on an adaptive
            sampler or variant options on a fixed density, ``#recommended`` on a sampler other than
            :data:`RECOMMENDABLE` or with @parameters (they are fitted) (naming the arm and what is accepted).
    """
    from diffusers_infonoise.sampler import FIXED_DENSITY_NAMES, SAMPLER_NAMES

    head, _, tag = arm.partition("#")
    head, at, text = head.partition("@")
    name, *options = head.split("-")
    if name not in SAMPLER_NAMES:
        raise ValueError(f"arm {arm!r}: unknown sampler {name!r}; accepted: {', '.join(SAMPLER_NAMES)}")
    params = []
    for item in text.split(",") if at else ():
        key, eq, value = item.partition("=")
        try:
            params.append((key, float(value)))
        except ValueError:
            eq = ""
        if not (key and eq):
            raise ValueError(f"arm {arm!r}: parameter {item!r} is not <key>=<number>")
    if params and name not in FIXED_DENSITY_NAMES:
        raise ValueError(f"arm {arm!r}: @parameters are a fixed density's ({', '.join(FIXED_DENSITY_NAMES)})")
    if options and name in FIXED_DENSITY_NAMES:
        raise ValueError(f"arm {arm!r}: -<flag>_<value> options are for the adaptive samplers, not a fixed density")
    if tag.startswith(f"{RECOMMENDED_TAG}-pilot="):
        try:
            fraction = float(tag.partition("=")[2])
        except ValueError:
            fraction = math.nan
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"arm {arm!r}: #{RECOMMENDED_TAG}-pilot=<f> takes the pilot's share of the race's steps, a number in (0, 1]")
    if Arm(name, tag=tag).recommended and (name not in RECOMMENDABLE or params or options):
        raise ValueError(
            f"arm {arm!r}: #{RECOMMENDED_TAG} fits the parameters of {' or '.join(RECOMMENDABLE)} at run time; "
            f"name one of them without @parameters or options"
        )
    return Arm(name, tuple(options), tuple(params), tag)


def run_arm(run: dict) -> str:
    """The arm a finished run trained: its sampler name, or for an arm resolved at run time (``#recommended``) the
    explicit arm it resolved to (``resolved_arm`` of its result, e.g. ``logit_normal@mean=-1.2,std=0.9``)."""
    return run.get("resolved_arm") or run["sampler"]


def split_arms(text: str) -> list[str]:
    """A comma-separated list of arm names (``--samplers``), where a comma inside ``@key=value,key=value`` does not
    separate two arms: ``"infonoise,logit_normal@mean=-1.3,std=0.8"`` is two arms."""
    arms: list[str] = []
    for piece in text.split(","):
        if arms and "@" in arms[-1] and "#" not in arms[-1] and re.fullmatch(r"\w+=[^@#]*(#.*)?", piece):
            arms[-1] += "," + piece  # the next parameter of the previous arm
        elif piece:
            arms.append(piece)
    return arms


#: the Race fields that only the transfer tier sets
TRANSFER_FIELDS = {"jitter": True, "sweep": (), "task": "", "reference": None}
#: the Race fields left out of a results file where they keep their defaults (so that older files compare)
OMITTED_AT_DEFAULT = {**TRANSFER_FIELDS, "infonoise_arm": "infonoise"}


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


def _seeds(samplers, n, more=None):
    more = more or {}
    return {s: list(range(more.get(s, n))) for s in samplers}


def _finetune_races() -> list[Race]:
    """Issue 22: fine-tune MNIST 16x16 pretrains onto shifted data (binarized MNIST 16x16, the 8x8 digits at 16x16,
    binarized and continuous), 400 steps evaluated at 100, 200 and 400. InfoNoise as the library runs it by default
    (``infonoise``: ``auto``, which is ``profile`` for a pretrained model without a stored schedule), from its base
    (``infonoise-init_base``, the warm-up), and from the InfoNoise pretrain's stored schedule
    (``infonoise-init_stored``), against the pretrain's own density and logit-normal. Every run starts from the
    same fixed-density pretrain; the fine-tune's learning rate is a third of the pretrain's. On binarized MNIST,
    ``infonoise-ema_decay_0.5``: the profile start with a faster EMA of m̂, the check of why the profile start lagged
    (its step-0 errors keep 0.9^8 = 0.43 of the weight after the run's 8 refreshes at the default 0.9)."""
    common = dict(steps=400, eval_every=100, eval_steps=(100, 200, 400), learning_rate=3e-4, lr_warmup_steps=20, extra_args=())
    stored = {"infonoise-init_stored": ("--infonoise_schedule_from", "{pretrained:edm-infonoise-mnist16}/scheduler")}
    edm = ("infonoise", "infonoise-init_base", "infonoise-init_stored", "edm_lognormal", "logit_normal")
    fast_ema = ("infonoise-ema_decay_0.5",)
    races = [
        Race(
            f"ft-edm-{d}",
            d,
            "edm",
            edm + (fast_ema if d == "binarized_mnist16" else ()),
            "edm_lognormal",
            _seeds(edm + fast_ema, 3),
            pretrained="edm-edm_lognormal-mnist16",
            sampler_extra_args=stored,
            **common,
        )
        for d in ("binarized_mnist16", "binarized_digits16", "digits16")
    ]
    ddpm = ("infonoise", "infonoise-init_base", "uniform")
    flow = ("infonoise", "infonoise-init_base", "logit_normal")
    races += [
        Race(
            "ft-ddpm-binarized_mnist16",
            "binarized_mnist16",
            "ddpm",
            ddpm,
            "uniform",
            _seeds(ddpm, 2),
            pretrained="ddpm-uniform-mnist16",
            **common,
        ),
        Race(
            "ft-flow-binarized_mnist16",
            "binarized_mnist16",
            "flow",
            flow,
            "logit_normal",
            _seeds(flow, 2),
            pretrained="flow-logit_normal-mnist16",
            **common,
        ),
    ]
    # Transfer: from-scratch runs whose InfoNoise starts from a received schedule (no warm-up) against the default
    # warm-up, with logit-normal as the fixed reference: another seed's 600-step run of the same race, and the
    # 8x8 binarized digits' schedule in a 16x16 run of the same digits
    received = ("infonoise", "infonoise-init_stored", "logit_normal")
    scratch = dict(eval_every=150, extra_args=())
    races += [
        Race("tr-edm-binarized_mnist16", "binarized_mnist16", "edm", received, "logit_normal", _seeds(received, 3), steps=600,
             sampler_extra_args={"infonoise-init_stored": ("--infonoise_schedule_from",
                                                           "{pretrained:edm-infonoise-binarized_mnist16-s1}")}, **scratch),
        Race("tr8-edm-binarized_digits16", "binarized_digits16", "edm", received, "logit_normal", _seeds(received, 2), steps=600,
             sampler_extra_args={"infonoise-init_stored": ("--infonoise_schedule_from",
                                                           "{pretrained:edm-infonoise-binarized_digits-s1}")},
             **{**scratch, "eval_every": 200}),
    ]  # fmt: skip
    return races


def _margin_races() -> list[Race]:
    """Issue 24: why InfoNoise only ties logit-normal on binarized data. The library's defaults throughout (the
    automatic warm-up, a tenth of the run; the former races pinned it). Budget: binarized MNIST 16x16 and DNA at 4x
    the former races' budget (2400 and 3200 steps) with InfoNoise, logit-normal and EDM log-normal, the evaluated
    checkpoints kept for the offline profiles and the re-evaluation (Heun, the InfoGrid; benchmarks/margin_eval.py).
    Width: at the former budget, InfoNoise with a tempered target φ ∝ ρ̂^τ, τ = 0.64 = (0.80/1.00)², the τ that makes
    a Gaussian-like π as wide as logit-normal's (std of ln σ 0.80 vs 1.00, issue 10's measure), against the same-code
    InfoNoise and logit-normal."""
    three = ("infonoise", "logit_normal", "edm_lognormal")
    wide = ("infonoise", "infonoise-temperature_0.64", "logit_normal")
    dna = dict(channels=(32, 64), sample_batch=2000, extra_args=())
    return [
        Race("m4x-edm-binarized_mnist16", "binarized_mnist16", "edm", three, "edm_lognormal", _seeds(three, 3), steps=2400,
             eval_every=300, eval_steps=(300, 600, 1200, 1800, 2400), extra_args=(), keep_checkpoints=True),
        Race("mw-edm-binarized_mnist16", "binarized_mnist16", "edm", wide, "logit_normal", _seeds(wide, 3), steps=600,
             eval_every=150, extra_args=()),
        Race("mw-edm-dna64", "dna64", "edm", wide, "logit_normal", _seeds(wide, 3), steps=800, eval_every=160, **dna),
        Race("m4x-edm-dna64", "dna64", "edm", three, "edm_lognormal", _seeds(three, 2), steps=3200, eval_every=400,
             eval_steps=(400, 800, 1600, 2400, 3200), keep_checkpoints=True, **dna),
    ]  # fmt: skip


#: the estimator before issue 31, on today's code: InfoNoise with an EMA of β = 0.9 a refresh and no clean-end bound
FORMER_ESTIMATOR = "infonoise-ema_decay=0.9-clean_end_bound=false"


#: the transfer tier's sweep of logit-normal's location (issue 30): the centre of ln σ (VE σ) at −2, −1, 1, 2, in the
#: library's convention (``mean`` > 0: more noise; the harness passes ``--logit_mean`` with diffusers' sign, −mean);
#: the centre 0 with std 1 is the default ``logit_normal`` itself, whose runs the sweep reuses
TRANSFER_SWEEP = ("logit_normal@mean=-2", "logit_normal@mean=-1", "logit_normal", "logit_normal@mean=1", "logit_normal@mean=2")
#: InfoNoise with logit-normal(0, 1) as its warm-up and floor base (``--infonoise_base logit_normal``; issue 31)
WARMUP_BASE_ARM = "infonoise-base=logit_normal"
#: the transfer tier's fixed density recommended from a profile (issue 32; :mod:`benchmarks.race.recommended`)
RECOMMENDED_ARM = f"logit_normal#{RECOMMENDED_TAG}"
#: the same with a pilot of half the race's steps (from scratch; a fine-tune profiles its pretrain either way)
RECOMMENDED_HALF_PILOT_ARM = f"logit_normal#{RECOMMENDED_TAG}-pilot=0.5"
#: the arms of every transfer task, each one's seeds (the defaults and InfoNoise 3, the sweep and the peers 1)
TRANSFER_ARMS = (
    "infonoise",
    "logit_normal",
    "edm_lognormal",
    *(a for a in TRANSFER_SWEEP if a != "logit_normal"),
    "kingma_gao",
    "loss_slope",
    # the estimator before issue 31: today's defaults measured as they were, on the same code as the tracking
    # estimator the library now uses (docs/METHOD.md §5.10)
    FORMER_ESTIMATOR,
    # issue 31's warm-up question: the warm-up (and floor) base logit-normal(0, 1) instead of the EDM path's EDM
    # log-normal, which trails logit-normal on every binarized race (docs/METHOD.md §5.10, "What the warm-up is for")
    WARMUP_BASE_ARM,
    # issue 32: logit-normal fitted to a profile (a fine-tune's pretrain at step 0, else a pilot of a quarter of the
    # run), resolved at run time (benchmarks/race/recommended.py); started after every other arm (TIER_PRIORITY)
    RECOMMENDED_ARM,
    # the same fitted from scratch on a pilot of half the run (a quarter-run pilot's model is too young: its profile
    # fits logit-normal(0.20, 0.53) at x4, the end-of-run models' (0.87-1.02, 0.87-0.98), the oracle (1, 1))
    RECOMMENDED_HALF_PILOT_ARM,
)


def _transfer_races() -> list[Race]:
    """Issue 30: tasks whose informative noise window moves, each beside its unmoved reference, with the same arms
    and budget: InfoNoise with the library's defaults (no pinned warm-up), the path defaults (logit-normal(0, 1),
    EDM log-normal(−1.2, 1.2)), the sweep of logit-normal's centre (:data:`TRANSFER_SWEEP`, whose best point is the
    task's oracle), Kingma & Gao and the loss slope. Sized for about 5 hours of 2 cores (``--plan``): 1000 samples
    per evaluation, evaluations at a third, two thirds and the end; 450 steps at 16x16, 300 at 32x32, 600 on DNA;
    the fine-tunes 240 steps at a third of the learning rate from an EDM log-normal pretrain of binarized MNIST
    16x16 (1200 steps): a full fine-tune at the new resolution (the script has no LoRA for unconditional UNets) and
    one onto data scaled by 0.25. The fine-tunes' references are the from-scratch tasks of the same data."""
    main = ("infonoise", FORMER_ESTIMATOR, WARMUP_BASE_ARM, "logit_normal", "edm_lognormal")
    seeds = {a: [0, 1, 2] if a in main else [0] for a in TRANSFER_ARMS}
    common = dict(
        samplers=TRANSFER_ARMS,
        diffusion="edm",
        baseline="logit_normal",
        seeds=seeds,
        sweep=TRANSFER_SWEEP,
        num_samples=1000,
        sample_batch=1000,
        extra_args=(),
        jitter=False,
    )
    img16 = dict(steps=450, eval_every=150, **common)
    dna = dict(steps=600, eval_every=200, channels=(32, 64), **common)
    tune = dict(
        steps=240, eval_every=80, learning_rate=3e-4, lr_warmup_steps=20, pretrained="edm-edm_lognormal-binarized_mnist16", **common
    )
    return [
        Race("tf-bin16", "binarized_mnist16", task="binarized MNIST 16x16 (reference)", **img16),
        Race("tf-bin16-x0.25", "binarized_mnist16_x0.25", task="data scale: x0 times 0.25", reference="tf-bin16", **img16),
        Race("tf-bin16-x4", "binarized_mnist16_x4", task="data scale: x0 times 4", reference="tf-bin16", **img16),
        Race("tf-deq16", "dequantized_mnist16", task="continuous (dequantized) against binarized", reference="tf-bin16", **img16),
        Race("tf-dna64", "dna64", task="DNA, one-hot over 4 letters (reference)", **dna),
        Race("tf-dna2mer32", "dna2mer32", task="vocabulary: 2-mer tokens, one-hot over 16 letters", reference="tf-dna64", **dna),
        Race("tf-ft16-x0.25", "binarized_mnist16_x0.25", task="fine-tune onto data scaled by 0.25", reference="tf-bin16-x0.25", **tune),
        Race("tf-bin32", "binarized_mnist32", steps=300, eval_every=100, task="resolution: 32x32", reference="tf-bin16", **common),
        Race("tf-ft16to32", "binarized_mnist32", task="fine-tune 16x16 -> 32x32", reference="tf-bin32", **tune),
    ]  # fmt: skip


def _tracking_races() -> list[Race]:
    """Issue 31: the tracking estimator (docs/METHOD.md §5.10: a memory sized to the run, the clean-end bound), the
    library's default, against the same-code control (:data:`FORMER_ESTIMATOR`) and logit-normal, the best fixed
    density of every earlier binarized and fine-tune race, 3 seeds each: the finetune tier's three fine-tunes as it
    ran them (the EDM log-normal MNIST 16x16 pretrain fine-tuned for 400 steps onto binarized MNIST 16x16, binarized
    digits and digits at 16x16, evaluated at 100, 200 and 400 steps; InfoNoise's ``auto`` start is ``profile`` there,
    and their final models are what ``benchmarks.finetune_lag`` profiles), and from scratch binarized MNIST 16x16 (600
    steps) and DNA (800 steps) with the library's automatic warm-up, evaluated from a quarter of the run on."""
    arms = ("infonoise", FORMER_ESTIMATOR, "logit_normal")
    seeds = _seeds(arms, 3)
    tune = dict(steps=400, eval_every=100, eval_steps=(100, 200, 400), learning_rate=3e-4, lr_warmup_steps=20, extra_args=(), jitter=False)
    races = [
        Race(f"tk-ft-{d}", d, "edm", arms, "logit_normal", seeds, pretrained="edm-edm_lognormal-mnist16", **tune)
        for d in ("binarized_mnist16", "binarized_digits16", "digits16")
    ]
    races += [
        Race("tk-edm-binarized_mnist16", "binarized_mnist16", "edm", arms, "logit_normal", seeds, steps=600, eval_every=150,
             extra_args=(), jitter=False),
        Race("tk-edm-dna64", "dna64", "edm", arms, "logit_normal", seeds, steps=800, eval_every=200, channels=(32, 64),
             sample_batch=2000, extra_args=(), jitter=False),
    ]  # fmt: skip
    return races


#: issue 31's run-sized cadence for the 400-step fine-tunes: a refresh every L/40 steps instead of 50, then also the
#: memory at L/16 instead of L/8 (nearer the drift/scatter optimum H* ≈ 0.06·L of docs/METHOD.md §5.10)
CADENCE_ARMS = ("infonoise-refresh_every=10", "infonoise-refresh_every=10-memory=25")


#: the diagnostic of the first quarter: π fixed from step 0 at the schedule the default's seed-0 run ended with (a
#: stored start that never refreshes), i.e. the target of the *final* model known in advance. Ahead of logit-normal
#: early, the gap is the estimate's lag; behind it, the target itself (π ∝ ρ̂/w) is what trails early in a fine-tune.
CLAIRVOYANT_ARM = "infonoise-init_stored-refresh_every=400"
#: the other way to start: no profile of the pretrained model, the automatic warm-up (a tenth of the run) on
#: logit-normal(0, 1), the best fixed density of these fine-tunes, then tracking (§5.10, "What the warm-up is for")
BASE_START_ARM = "infonoise-init_base-base=logit_normal"
#: issue 31's start, stored from an offline profile of the pretrained model (``benchmarks.bounded_start``, run first):
#: its m̂ bounded by the per-element posterior mean's error (a data-only bound on the Bayes MMSE, binarized data), and
#: the same profile unbounded (the control of the stored start's mechanics); both then track as the default does
BOUNDED_START_ARM = "infonoise-init_stored#per_element_bound"
OFFLINE_START_ARM = "infonoise-init_stored#offline_profile"
#: the paper's pinned clean-end gate for continuous images (c ≈ 0.15 on CIFAR-10, docs/METHOD.md §5 step 5), where the
#: value-grid rule gives none (8-bit-like data: a pivot below σ_min); run on the continuous fine-tune only
PAPER_GATE_ARM = "infonoise-gate=0.15"


def _cadence_races() -> list[Race]:
    """Issue 31, second round: the tracking tier's fine-tunes (same races, budgets and run ids, so that
    ``--reuse tracking`` takes runs made there) with the default estimator, logit-normal(0, 1) and the run-sized
    cadence of :data:`CADENCE_ARMS`, :data:`CLAIRVOYANT_ARM` and :data:`BASE_START_ARM`, 3 seeds each, all on the same code;
    on continuous digits also :data:`PAPER_GATE_ARM`, on the binarized ones :data:`BOUNDED_START_ARM` and
    :data:`OFFLINE_START_ARM` (their starts written first by ``benchmarks.bounded_start``)."""
    arms = ("infonoise", "logit_normal", *CADENCE_ARMS, CLAIRVOYANT_ARM, BASE_START_ARM)
    starts = (BOUNDED_START_ARM, OFFLINE_START_ARM)
    return [
        dataclasses.replace(
            r,
            samplers=arms + ((PAPER_GATE_ARM,) if r.dataset == "digits16" else starts),
            seeds=_seeds(arms + starts + (PAPER_GATE_ARM,), 3),
            sampler_extra_args={
                CLAIRVOYANT_ARM: ("--infonoise_schedule_from", f"{{run:{r.name}__infonoise__s0}}/scheduler"),
                BOUNDED_START_ARM: ("--infonoise_schedule_from", f"{{start:{r.name}-bounded}}"),
                OFFLINE_START_ARM: ("--infonoise_schedule_from", f"{{start:{r.name}-profile}}"),
            },
        )
        for r in _tracking_races()
        if r.pretrained
    ]


#: issue 31's option, the profile start bounded by the data (``--infonoise_profile_bound data``, docs/METHOD.md §5.10),
#: and its same-code control, the default start (the pretrained model's errors as measured) named explicitly. The bound
#: was the library's default from d04ffcb to 43ddd5b, where the first runs of the bounded arm ran as plain
#: ``infonoise``; those still in the results (the bound_transfer tier's) are filed under :data:`BOUNDED_PROFILE_ARM`,
#: each with ``relabelled_from`` (``benchmarks/race/relabel.py``); the default went back to ``none`` on their results
BOUNDED_PROFILE_ARM = "infonoise-profile_bound_data"
UNBOUNDED_START_ARM = "infonoise-profile_bound_none"


def _bound_races(num_seeds: int = 3) -> list[Race]:
    """Issue 31, third round: the profile start bounded by the data (:data:`BOUNDED_PROFILE_ARM`, docs/METHOD.md §5.10)
    against its same-code control :data:`UNBOUNDED_START_ARM` and logit-normal(0, 1), ``num_seeds`` seeds each, on the
    tracking tier's binarized fine-tunes (same races, budgets and run ids, so that ``--reuse cadence`` takes
    logit-normal's runs). Continuous digits is left out: its data takes more than 16 values, so the bound leaves its
    start as measured."""
    arms = (BOUNDED_PROFILE_ARM, UNBOUNDED_START_ARM, "logit_normal")
    return [
        dataclasses.replace(r, samplers=arms, seeds=_seeds(arms, num_seeds))
        for r in _tracking_races()
        if r.pretrained and r.dataset.startswith("binarized")
    ]


def _bound_transfer_races() -> list[Race]:
    """Issue 31: the transfer tier's two fine-tunes (onto x0 × 0.25 and 16x16 → 32x32, both binarized: the bound
    applies) at its budget, InfoNoise with the data-bounded start (:data:`BOUNDED_PROFILE_ARM`) beside its same-code
    control :data:`UNBOUNDED_START_ARM` (the default), EDM log-normal and the whole logit-normal sweep (its best point is
    the task's oracle), 3 seeds each, all on the same code and machine (a lent GPU: the transfer tier's own runs were
    made on CPUs)."""
    arms = (BOUNDED_PROFILE_ARM, UNBOUNDED_START_ARM, "edm_lognormal", *TRANSFER_SWEEP)
    return [dataclasses.replace(r, samplers=arms, seeds=_seeds(arms, 3)) for r in _transfer_races() if r.pretrained]


def _bound_transfer_cpu_races() -> list[Race]:
    """The fine-tune onto x0 × 0.25 of :func:`_bound_transfer_races`, on 2 CPU cores: both starts, EDM log-normal and the
    sweep's best point there (logit-normal centred at ln σ = −2), 3 seeds each, the replicate of the GPU tier's loss."""
    arms = (BOUNDED_PROFILE_ARM, UNBOUNDED_START_ARM, "edm_lognormal", "logit_normal@mean=-2")
    return [dataclasses.replace(r, samplers=arms, seeds=_seeds(arms, 3)) for r in _bound_transfer_races() if r.name == "tf-ft16-x0.25"]


#: issue 31's study variant whose draws, not its effective allocation, follow ρ̂ (``target_space="pi"``, settings.py)
DRAWS_ARM = "infonoise-target_space_pi"


def _draws_races() -> list[Race]:
    """Issue 31, fourth round: the best fixed density of the fine-tune onto x0 × 0.25 draws its levels where the ρ̂ of
    InfoNoise's final model is (``benchmarks/results/finetune_target.json``), while InfoNoise's ``π ∝ ρ̂/w`` draws
    higher. The variant drawing on ρ̂ (:data:`DRAWS_ARM`) beside the default (:data:`UNBOUNDED_START_ARM`, the same-code
    control) and the fixed arms, 3 seeds each, on that fine-tune (as :func:`_bound_transfer_cpu_races`) and, as the
    controls where InfoNoise's π is level with the best fixed density, the binarized MNIST and binarized digits
    fine-tunes of :func:`_bound_races` (same races and run ids, so that ``--reuse bound`` / ``--reuse
    bound_transfer_cpu`` take the fixed arms' runs); and the binarized digits fine-tune onto x0 × 0.25, a second window far
    below σ_data, with logit-normal centred at ln σ = −2, −1 and 0, 2 seeds."""
    races = []
    for r in _bound_races() + _bound_transfer_cpu_races():
        if r.name in ("tk-ft-binarized_mnist16", "tk-ft-binarized_digits16", "tf-ft16-x0.25"):
            arms = (DRAWS_ARM,) + tuple(a for a in r.samplers if a != BOUNDED_PROFILE_ARM)
            races.append(dataclasses.replace(r, samplers=arms, seeds=_seeds(arms, 3), infonoise_arm=UNBOUNDED_START_ARM))
    # a second fine-tune whose window lies far below σ_data: the binarized digits one onto x0 × 0.25, with a short
    # logit-normal sweep for its best fixed density (2 seeds: the rule's test, not a tier of its own)
    digits = next(r for r in races if r.name == "tk-ft-binarized_digits16")
    arms = (DRAWS_ARM, UNBOUNDED_START_ARM, "logit_normal", "logit_normal@mean=-2", "logit_normal@mean=-1")
    races.append(
        dataclasses.replace(
            digits, name="tk-ft-binarized_digits16-x0.25", dataset="binarized_digits16_x0.25", samplers=arms, seeds=_seeds(arms, 2)
        )
    )
    return races


def _content_races() -> list[Race]:
    """Issue 31, fifth round: what decides whether a fine-tune's best density draws on ρ̂ (onto binarized MNIST
    × 0.25 from binarized MNIST, where :data:`DRAWS_ARM` leads the default) or above it (onto binarized digits
    × 0.25 from continuous MNIST, where logit-normal(0, 1) and the default lead). Each race changes one factor of
    one of those two: the pretrain, so that the fine-tune changes the data's scale only or also its content.
    ``tk-ft-bd2bd-x0.25``: the digits fine-tune of :func:`_draws_races` from a binarized-digits pretrain (scale
    only); ``tf-ft-m2bm-x0.25``: the MNIST one (``tf-ft16-x0.25``, 240 steps) from the continuous MNIST pretrain
    (content and scale). The same arms in both, 2 seeds: the variant, the default and logit-normal centred at
    ln σ = 0, −1, −2. Then each sweep widened around its best centre and EDM log-normal (the pretrains' density)
    added, 2 seeds, and a third seed of the default and of logit-normal centred at 0, −1 and −2.
    ``tf-ft-bm2bm-x0.25-400``: ``tf-ft16-x0.25`` itself at 400 steps (the budget of the digits races), 2 seeds, 3 for
    the variant, the default and logit-normal centred at −2; ``tf-ft-m2bm-x0.25-400``: the continuous MNIST pretrain's
    fine-tune at 400 steps too, those three arms, 2 seeds."""
    arms = (DRAWS_ARM, UNBOUNDED_START_ARM, "logit_normal", "logit_normal@mean=-1", "logit_normal@mean=-2")
    draws = {r.name: r for r in _draws_races()}

    def changed(source: str, name: str, samplers: tuple, seeds: dict, **fields) -> Race:
        fields.setdefault("infonoise_arm", UNBOUNDED_START_ARM)  # the report's reference: the default, named explicitly
        return dataclasses.replace(draws[source], name=name, samplers=samplers, seeds=seeds, **fields)

    digits = arms + ("logit_normal@mean=-1.5", "logit_normal@mean=-0.5", "edm_lognormal")
    mnist = arms + ("logit_normal@mean=-3", "logit_normal@mean=-2.5", "logit_normal@mean=-1.5", "edm_lognormal")
    third = {UNBOUNDED_START_ARM: 3, "logit_normal@mean=-1": 3, "logit_normal@mean=-2": 3, "logit_normal": 3}
    longer = dict(steps=400, eval_every=100, eval_steps=(100, 200, 400))  # the digits races' budget
    short = (DRAWS_ARM, UNBOUNDED_START_ARM, "logit_normal@mean=-2")
    from_mnist = dict(pretrained="edm-edm_lognormal-mnist16")
    return [
        changed("tk-ft-binarized_digits16-x0.25", "tk-ft-bd2bd-x0.25", digits, _seeds(digits, 2, third),
                pretrained="edm-edm_lognormal-binarized_digits16"),
        changed("tf-ft16-x0.25", "tf-ft-m2bm-x0.25", mnist, _seeds(mnist, 2, third), **from_mnist),
        # the one fine-tune where the default trails (tf-ft16-x0.25, 240 steps) at 400 steps: the early part of a run
        # (the default trails every fine-tune early) or the target?
        changed("tf-ft16-x0.25", "tf-ft-bm2bm-x0.25-400", arms, _seeds(arms, 2, dict.fromkeys(short, 3)), **longer),
        # and the continuous MNIST pretrain's at 400 steps too, so that the two pretrains compare at both budgets
        changed("tf-ft16-x0.25", "tf-ft-m2bm-x0.25-400", short, _seeds(short, 2), **longer, **from_mnist),
    ]  # fmt: skip


def _learnability_races() -> list[Race]:
    """Issue 31, sixth round: the learnability probe's prediction (``benchmarks.finetune_learnability``). Where a
    fine-tune's first 40 log-uniform steps lower the error lowest in σ (median σ 0.08–0.09 of the fall, against
    0.16–0.22 on the other five probed: the method leads or ties on four, trails by 6% on one), the best fixed density
    drew low on the one such fine-tune swept (binarized MNIST onto x0 × 0.25: logit-normal centred at ln σ = −2). The
    other is continuous digits (``tk-ft-digits16``), where only logit-normal(0, 1) was raced and leads the method by 3%:
    the probe says a density centred lower leads both. The cadence tier's race (same name and run ids, so ``--reuse
    cadence`` takes its logit-normal(0, 1) runs) with logit-normal centred at ln σ = −1 and −2 and the default on this
    code, 3 seeds, and centred at −3 and the variant drawing on ρ̂ (:data:`DRAWS_ARM`), 2 seeds. The prediction failed
    (every lower centre worse), so the sweep was then widened upwards, centred at 0.5 and 1, 2 seeds: is the best fixed
    density above 0?"""
    lower = ("logit_normal@mean=-1", "logit_normal@mean=-2", "logit_normal@mean=-3", DRAWS_ARM)
    arms = (UNBOUNDED_START_ARM, "logit_normal", *lower, "logit_normal@mean=0.5", "logit_normal@mean=1")
    two = {"logit_normal@mean=-3": 2, DRAWS_ARM: 2, "logit_normal@mean=0.5": 2, "logit_normal@mean=1": 2}
    digits = next(r for r in _cadence_races() if r.name == "tk-ft-digits16")
    return [
        dataclasses.replace(digits, samplers=arms, seeds=_seeds(arms, 3, two), sampler_extra_args={}, infonoise_arm=UNBOUNDED_START_ARM)
    ]


def _budget_races() -> list[Race]:
    """Issue 31, sixth round: do the method's losses on fine-tunes close as the budget nears users' (LoRA and DreamBooth
    runs of 500-3000 steps)? On the fine-tune onto binarized MNIST × 0.25 from binarized MNIST the gap to the best fixed
    density narrowed from 23% at 240 steps to 12% at 400 (tier ``content``), and on continuous digits along the run,
    from 15% at 100 steps to 3% at 400 (tier ``learnability``). Both at 800 steps (evaluated at 200, 400 and 800; the
    learning rate constant after its warm-up as in every race, the memory H = L/8 sized to the longer run): the default
    (:data:`UNBOUNDED_START_ARM`, this code) against each one's best fixed density, 3 seeds; on MNIST × 0.25 also the
    variant drawing on ρ̂ (:data:`DRAWS_ARM`, ahead there at 400 steps), 2 seeds. Then, as the method led at 800 steps on
    MNIST × 0.25, the third fine-tune it trails at 400 steps (binarized digits onto x0 × 0.25 from continuous MNIST, the
    draws tier's, 6% behind logit-normal(0, 1)) at 800 steps too, those two arms, 3 seeds. Last, whether the best fixed
    density moves at 800 steps where the method now leads or ties: logit-normal centred at −1 and −1.5 on MNIST × 0.25,
    at 0.5 on digits × 0.25, 3 seeds. As the best centre on MNIST × 0.25 moved up with the budget (−2 at 240 and 400
    steps, −1.5 and −1 at 800), that fine-tune at 1600 steps too: the default and those two centres, 2 seeds; and at 3000
    steps, users' budget, the default and logit-normal centred at −1, 3 seeds (−0.5, behind −1 on the first seed, one).
    Last, continuous digits at 3000 steps, where the gap did not narrow from 400 to 800 steps: the default and
    logit-normal(0, 1), 3 seeds; and, as it trailed there too, the target known in advance at 800 and 3000 steps (π
    fixed from step 0 at the schedule the default's seed-0 run of that budget ended with, the cadence tier's diagnostic,
    3 seeds): if it trails as the default does, the target (π ∝ ρ̂/w), not the estimate's tracking, is what trails.
    The same diagnostic on MNIST × 0.25 at 800 steps, 3 seeds."""
    longest = dict(steps=800, eval_every=200, eval_steps=(200, 400, 800), infonoise_arm=UNBOUNDED_START_ARM)
    longer = dict(longest, steps=1600, eval_every=400, eval_steps=(400, 800, 1600))
    x1600 = (UNBOUNDED_START_ARM, "logit_normal@mean=-1.5", "logit_normal@mean=-1")
    users = dict(longest, steps=3000, eval_every=750, eval_steps=(750, 1500, 3000))
    x3000 = (UNBOUNDED_START_ARM, "logit_normal@mean=-1", "logit_normal@mean=-0.5")
    mnist = next(r for r in _content_races() if r.name == "tf-ft-bm2bm-x0.25-400")
    digits = next(r for r in _learnability_races() if r.name == "tk-ft-digits16")
    m_arms = (UNBOUNDED_START_ARM, "logit_normal@mean=-2", DRAWS_ARM, "logit_normal@mean=-1", "logit_normal@mean=-1.5")
    d_arms = (UNBOUNDED_START_ARM, "logit_normal")

    def known_target(race: Race, arms=d_arms, more=None) -> Race:  # the arms and π fixed at the default's final schedule
        fixed = f"infonoise-init_stored-refresh_every={race.steps}"  # CLAIRVOYANT_ARM at this budget: it never refreshes
        start = ("--infonoise_schedule_from", f"{{run:{race.name}__{UNBOUNDED_START_ARM}__s0}}/scheduler")
        arms = (*arms, fixed)
        return dataclasses.replace(race, samplers=arms, seeds=_seeds(arms, 3, more), sampler_extra_args={fixed: start})

    digits_x = next(r for r in _draws_races() if r.name == "tk-ft-binarized_digits16-x0.25")
    return [
        known_target(dataclasses.replace(mnist, name="tf-ft-bm2bm-x0.25-800", **longest), m_arms, {DRAWS_ARM: 2}),
        known_target(dataclasses.replace(digits, name="tk-ft-digits16-800", **longest)),
        dataclasses.replace(
            digits_x,
            name="tk-ft-bd-x0.25-800",
            samplers=(*d_arms, "logit_normal@mean=0.5"),
            seeds=_seeds((*d_arms, "logit_normal@mean=0.5"), 3),
            **longest,
        ),
        dataclasses.replace(mnist, name="tf-ft-bm2bm-x0.25-1600", samplers=x1600, seeds=_seeds(x1600, 2), **longer),
        dataclasses.replace(
            mnist, name="tf-ft-bm2bm-x0.25-3000", samplers=x3000, seeds=_seeds(x3000, 3, {"logit_normal@mean=-0.5": 1}), **users
        ),
        known_target(dataclasses.replace(digits, name="tk-ft-digits16-3000", **users)),
    ]


def tier_pretrains(races: list[Race]) -> list[Pretrain]:
    """The pretrains the races start from (and whose schedules they take), in the order of :data:`PRETRAINS`."""
    names = {r.pretrained for r in races if r.pretrained}
    for r in races:
        for args in r.sampler_extra_args.values():
            names |= {a.split("{pretrained:")[1].split("}")[0] for a in args if "{pretrained:" in a}
    steps = next((r.pretrain_steps for r in races if r.pretrain_steps), None)
    return [p if steps is None else dataclasses.replace(p, steps=steps) for name, p in PRETRAINS.items() if name in names]


#: every tier :func:`tier_races` knows (``--tier``)
TIERS = (
    "quick", "full", "gpu", "gate", "recheck", "recheck_full", "recheck_paths", "finetune", "margin", "transfer", "tracking",
    "cadence", "bound", "bound_gpu", "bound_transfer", "bound_transfer_cpu", "draws",
    "content", "learnability", "budget",
)  # fmt: skip


def tier_races(tier: str) -> list[Race]:
    """The races of a tier, in the tier's order."""
    if tier == "finetune":
        return _finetune_races()
    if tier == "margin":
        return _margin_races()
    if tier == "transfer":
        return _transfer_races()
    if tier == "tracking":
        return _tracking_races()
    if tier == "cadence":
        return _cadence_races()
    if tier == "bound":
        return _bound_races()
    if tier == "bound_transfer":
        return _bound_transfer_races()
    if tier == "bound_transfer_cpu":
        return _bound_transfer_cpu_races()
    if tier == "draws":
        return _draws_races()
    if tier == "content":
        return _content_races()
    if tier == "learnability":
        return _learnability_races()
    if tier == "budget":
        return _budget_races()
    if tier == "bound_gpu":  # the same races with seeds 3-9 (on a lent GPU; seeds 0-2 are the bound tier's)
        return [dataclasses.replace(r, seeds={a: list(range(3, 10)) for a in r.samplers}) for r in _bound_races()]
    if tier == "quick":
        samplers = ("infonoise", "edm_lognormal")
        return [
            Race(f"edm-{d}", d, "edm", samplers, "edm_lognormal", _seeds(samplers, 2), steps=800, eval_every=100, sample_batch=2000)
            for d in ("digits", "binarized_digits")
        ]
    if tier == "full":
        # Sized for ~2 h on 2 free cores (issue 6). A 16x16 evaluation (2000 samples x 18 steps) costs ~45 s
        # and a 16x16 step ~0.2 s on one core, so the 16x16 MNIST races run the pair the issue singles out
        # (infonoise vs edm_lognormal; 5 seeds on binarized MNIST) and every sampler runs on the 8x8 races.
        # The 8x8 EDM races use the quick tier's settings, so its finished runs are reused (--reuse quick).
        # Listed in priority order: runs start race by race.
        pair = ("infonoise", "edm_lognormal")
        five = {"infonoise": 5, "edm_lognormal": 5}
        small = dict(steps=800, eval_every=100, sample_batch=2000)
        mid = dict(steps=600, eval_every=120, extra_args=("--infonoise_warmup_steps", "150"))
        races = [Race("edm-binarized_mnist16", "binarized_mnist16", "edm", pair, "edm_lognormal", _seeds(pair, 5), **mid)]
        races += [
            Race(f"edm-{d}", d, "edm", ALL_SAMPLERS, "edm_lognormal", _seeds(ALL_SAMPLERS, 3), **small)
            for d in ("binarized_digits", "digits")
        ]
        # DDPM race + InfoNoise with its m̂ capped at the data variance (the diagnosis of its loss there:
        # the ε-model's x0-space error exceeds the data variance ~1000x at high noise)
        ddpm = ("infonoise", "uniform", "infonoise-mmse_cap_auto")
        races += [
            Race("ddpm-binarized_digits", "binarized_digits", "ddpm", ddpm, "uniform", _seeds(ddpm, 3), **small),
            Race(
                "flow-digits",
                "digits",
                "flow",
                ("infonoise", "logit_normal"),
                "logit_normal",
                _seeds(("infonoise", "logit_normal"), 3),
                **small,
            ),
            Race("edm-mnist16", "mnist16", "edm", pair, "edm_lognormal", _seeds(pair, 2), **mid),
        ]
        # DNA: one-hot 4 x 64 through UNet1DModel (--sequence_column); 5 seeds for the pair, 2 for the other
        # samplers (a 2000-sample evaluation of the 1-D UNet costs ~20 s)
        races.insert(
            1,
            Race(
                "edm-dna64",
                "dna64",
                "edm",
                ALL_SAMPLERS,
                "edm_lognormal",
                _seeds(ALL_SAMPLERS, 2, five),
                steps=800,
                eval_every=160,
                channels=(32, 64),
                sample_batch=2000,
                extra_args=("--infonoise_warmup_steps", "200"),
            ),
        )
        return races
    if tier == "gate":
        # Gate study: the quick tier's races (InfoNoise lost on continuous digits), same settings, plus
        # InfoNoise with the gate off and pinned lower. Sampler "infonoise-gate_X" = --infonoise_gate X.
        samplers = ("infonoise", "edm_lognormal", "infonoise-gate_none", "infonoise-gate_0.05")
        return [
            Race(f"edm-{d}", d, "edm", samplers, "edm_lognormal", _seeds(samplers, 2), steps=800, eval_every=100, sample_batch=2000)
            for d in ("digits", "binarized_digits")
        ]
    if tier == "recheck":
        # Issue 10: the corrected method (φ-space floor, carry-over, value-grid gate) on the quick tier's
        # races against EDM log-normal and logit-normal (the best fixed density found so far); the former
        # hybrid (π-space floor) as its own sampler on binarized digits. Sized for ~45 min on 2 cores:
        # 2 seeds, an evaluation every 160 steps.
        # A later session added the library's default warm-up (a tenth of the run, 80 steps; the races pin 200).
        both = ("infonoise", "edm_lognormal", "logit_normal")
        auto = ("infonoise-warmup_steps_auto",)
        return [
            Race(
                "edm-binarized_digits",
                "binarized_digits",
                "edm",
                both + ("infonoise-floor_space_pi",) + auto,
                "edm_lognormal",
                _seeds(both + ("infonoise-floor_space_pi",) + auto, 2),
                steps=800,
                eval_every=160,
                sample_batch=2000,
            ),
            Race(
                "edm-digits",
                "digits",
                "edm",
                both + auto,
                "edm_lognormal",
                _seeds(both + auto, 2),
                steps=800,
                eval_every=160,
                sample_batch=2000,
            ),
        ]
    if tier == "recheck_full":
        # Issue 10's re-measure of the full tier with the corrected method, cut to this session's ~100 min
        # of 2 cores (a 16x16 run costs ~10 min of a core next to other jobs): binarized MNIST 16x16 with 3
        # seeds of InfoNoise, EDM log-normal and logit-normal (the best fixed density so far), DNA with 5;
        # continuous MNIST 16x16 (never run before) with 1; the gate rules as their own samplers on DNA
        # (1 seed). Seeds 3 and 4 on binarized MNIST were added by a later session (the 5); the
        # π-floor variant there is left for a later run. Sizes as the former full tier (600 steps at 16x16,
        # 800 on DNA), 4 evaluations at 16x16.
        # A later session added the study of the method's settings on binarized MNIST 16x16 (2 seeds each; 1
        # for the profile gate, which applied no gate on DNA): the library's default warm-up (a tenth of the
        # run, 60 steps, where the races pin 150), logit-normal as the warm-up and floor base, twice as many
        # refreshes, a faster EMA, the former π-space floor, no gate, a larger floor, more smoothing; seeds 1-2
        # on continuous MNIST 16x16 with the gate rules that differ from `auto` (none) there; the π-space
        # floor on DNA (2 seeds).
        three = ("infonoise", "edm_lognormal", "logit_normal")
        gates = ("infonoise-gate_none", "infonoise-gate_profile")
        # "infonoise-warmup_steps_150" is InfoNoise as the race runs it (the race pins 150), rerun on the code
        # of the study: s0-s2 of the other samplers ran before the sampler owned its random stream (issue 13),
        # so this is the study's same-code control, and a measure of how much a seed's draws alone move a run.
        study = (
            "infonoise-warmup_steps_150",
            "infonoise-warmup_steps_auto",
            "infonoise-base=logit_normal",
            "infonoise-refresh_every_25",
            "infonoise-ema_decay_0.5",
            "infonoise-floor_space_pi",
            "infonoise-gate_none",
            # wider π (the adapted π is narrower than logit-normal's at the noisy end): a larger floor,
            # three times the smoothing
            "infonoise-floor_0.15",
            "infonoise-smoothing_3",
        )
        mid = dict(steps=600, eval_every=150, extra_args=("--infonoise_warmup_steps", "150"))
        dna = dict(steps=800, eval_every=160, channels=(32, 64), sample_batch=2000, extra_args=("--infonoise_warmup_steps", "200"))
        bin16 = three + study + ("infonoise-gate_profile",)
        # the other samplers on DNA (the former full tier ran them there): Kingma & Gao's adaptive density
        # shares the floor and carry-over InfoNoise got in issue 10; the fixed densities are unchanged by it
        others = ("kingma_gao", "uniform", "log_uniform", "cosine")
        dna_samplers = three + gates + ("infonoise-floor_space_pi", "infonoise-warmup_steps_auto", "infonoise-ema_decay_0.5") + others
        cont16 = three + ("infonoise-gate_0.2", "infonoise-gate_profile", "infonoise-warmup_steps_auto")
        return [
            Race(
                "edm-binarized_mnist16",
                "binarized_mnist16",
                "edm",
                bin16,
                "edm_lognormal",
                _seeds(
                    bin16,
                    2,
                    {
                        **{s: 5 for s in three},
                        "infonoise-gate_profile": 1,
                        # the faster adaptation led on seed 0, the library's default warm-up
                        # on seeds 0-1: all 5 seeds
                        "infonoise-refresh_every_25": 5,
                        "infonoise-ema_decay_0.5": 5,
                        "infonoise-warmup_steps_auto": 5,
                    },
                ),
                **mid,
            ),
            Race(
                "edm-dna64",
                "dna64",
                "edm",
                dna_samplers,
                "edm_lognormal",
                _seeds(
                    dna_samplers,
                    1,
                    {
                        **{s: 5 for s in three},
                        "infonoise-floor_space_pi": 2,
                        "kingma_gao": 2,
                        "infonoise-warmup_steps_auto": 5,
                        "infonoise-ema_decay_0.5": 2,
                    },
                ),
                **dna,
            ),
            Race(
                "edm-mnist16",
                "mnist16",
                "edm",
                cont16,
                "edm_lognormal",
                _seeds(cont16, 1, {**{s: 3 for s in three}, "infonoise-warmup_steps_auto": 3}),
                **mid,
            ),
        ]
    if tier == "recheck_paths":
        # Issue 10's re-measure of the other two paths, as in the former full tier: DDPM-ε (the m̂ cap now
        # on by default in the library) and flow, 3 seeds.
        small = dict(steps=800, eval_every=100, sample_batch=2000)
        return [
            Race(
                "ddpm-binarized_digits",
                "binarized_digits",
                "ddpm",
                ("infonoise", "uniform"),
                "uniform",
                _seeds(("infonoise", "uniform"), 3),
                **small,
            ),
            Race(
                "flow-digits",
                "digits",
                "flow",
                ("infonoise", "logit_normal"),
                "logit_normal",
                _seeds(("infonoise", "logit_normal"), 3),
                **small,
            ),
        ]
    if tier == "gpu":
        races = []
        for d in ("mnist", "binarized_mnist", "fashion_mnist"):
            races.append(
                Race(
                    f"edm-{d}",
                    d,
                    "edm",
                    ALL_SAMPLERS,
                    "edm_lognormal",
                    _seeds(ALL_SAMPLERS, 3),
                    steps=20000,
                    eval_every=2000,
                    channels=(32, 64, 128),
                    batch_size=128,
                    learning_rate=5e-4,
                    num_samples=10000,
                    sample_batch=2500,
                    extra_args=("--infonoise_warmup_steps", "1000"),
                )
            )
        return races
    raise ValueError(f"unknown tier {tier!r}")


#: What a tier leaves out of the issue's specification to fit its time budget (recorded in the results).
TIER_SIZING = {
    "tracking": "3 seeds of each arm; the finetune tier's three fine-tunes at its budget (400 steps, evaluated at 100, "
    "200, 400 with 2000 samples; no jitter samplings: the seeds' std includes the evaluation's) and two from-scratch "
    "races at the recheck_full tier's "
    "budgets (binarized MNIST 16x16 600 steps, DNA 800), with the library's automatic warm-up instead of a pinned one",
    "cadence": "3 seeds of each arm on the tracking tier's fine-tunes, at its budget (400 steps, evaluated at 100, 200, "
    "400 with 2000 samples; no jitter samplings), continuous digits and binarized MNIST first",
    "bound": "3 seeds of each arm on the tracking tier's two binarized fine-tunes, at its budget (400 steps, evaluated "
    "at 100, 200, 400 with 2000 samples; no jitter samplings); logit-normal's runs reused from the cadence tier",
    "bound_gpu": "seeds 3-9 of the bound tier's arms and races, on a lent GPU (one H200), at the same budget",
    "bound_transfer_cpu": "the bound_transfer tier's fine-tune onto x0 × 0.25 on 2 CPU cores, 3 seeds of four arms (both "
    "starts, EDM log-normal, logit-normal centred at ln σ = −2), at the same budget",
    "bound_transfer": "the transfer tier's two fine-tunes at its budget (240 steps, 1000 samples at a third, two thirds "
    "and the end), 3 seeds of every arm, on a lent GPU (one H200): its own pretrain and classifiers, so its figures "
    "compare within this tier, not with the transfer tier's CPU runs",
    "transfer": "first pass sized for about 5 h of 2 cores: 1000 samples per evaluation at a third, two thirds and the "
    "end; 450 steps at 16x16, 300 at 32x32, 600 on DNA, fine-tunes 240; 3 seeds of InfoNoise, the former estimator "
    "(issue 31's control) and the two defaults, 1 "
    "of each sweep point and adaptive peer; no jitter samplings (the seeds' std includes the evaluation's); the "
    "fine-tunes' unmoved references are the from-scratch tasks of the same data; then (issue 32) 1 seed of logit-normal "
    "fitted to a profile, a fine-tune's pretrain at step 0 or a from-scratch task's pilot of a quarter of its steps",
    "recheck_full": "cut to ~100 min on 2 shared cores, then seeds 3-4 added: 5 seeds of infonoise/edm_lognormal/"
    "logit_normal on binarized MNIST 16x16, 5 on DNA, 1 on MNIST 16x16, 1 seed of each gate rule on "
    "DNA; 4 evaluations at 16x16; then a settings study (2 seeds of 9 variants, a same-code control "
    "among them, and 1 of the profile gate on binarized MNIST 16x16), seeds 1-2 and 1 seed of two gate "
    "rules on MNIST 16x16, 2 seeds of the π-space floor on DNA, 2 seeds of kingma_gao and 1 of each "
    "other fixed density on DNA, 5 seeds of the default warm-up (a tenth of the run) on binarized MNIST "
    "16x16 and DNA, 3 on MNIST 16x16, and 2 of EMA 0.5 on DNA; the other samplers on the 8x8 races are left to the "
    "former full tier",
    "full": "sized for ~2 h on 2 cores: every sampler on digits and binarized digits (8x8, 3 seeds) and DNA (2 seeds, "
    "5 for infonoise/edm_lognormal); on 16x16 MNIST and binarized MNIST only infonoise vs edm_lognormal "
    "(a 2000-sample evaluation at 16x16 costs ~45 s per core), 600 steps; MNIST 16x16 runs last and may be "
    "cut; Inception-v3 FID only for final models (benchmarks/inception_fid.py, ~0.25 s per image per core)",
}

#: The order runs start in, as (race, which runs) or (race, which runs, seeds): "pair" = InfoNoise and the race's baseline,
#: "others" = the other samplers, "main" = InfoNoise, EDM log-normal and logit-normal, "variants" =
#: InfoNoise's variants, "rest" = the samplers neither main nor a variant, "fixed" / "infonoise" / "peers" =
#: the arms of that kind (:attr:`Arm.kind`: fixed densities, InfoNoise and its variants, the other adaptive
#: ones; a ``#recommended`` arm is none of them), "recommended" = the ``#recommended`` arms, "all". The full tier
#: puts the issue's central question first (binarized MNIST and DNA, InfoNoise vs EDM log-normal), then the other
#: paths, then every sampler.
TIER_PRIORITY = {
    # per task, the fixed arms first (the defaults, then the sweep: they do not change when the estimator does), then
    # InfoNoise, the next task after; the adaptive peers last
    # breadth first: seed 0 of every task's fixed arms (the defaults and the sweep: they do not change when the
    # estimator does) and InfoNoise arms, then seeds 1-2 task by task, then the adaptive peers; a tier that runs over
    # several sessions has every task's oracle and regret from the first
    "transfer": [(r.name, which, (0,)) for r in _transfer_races() for which in ("fixed", "infonoise")]
    + [(r.name, which, (1, 2)) for r in _transfer_races() for which in ("fixed", "infonoise")]
    + [(r.name, "peers") for r in _transfer_races()]
    # issue 32's recommended arm last, so that the runs queued before it keep their order
    + [(r.name, "recommended") for r in _transfer_races()],
    "recheck_full": [
        ("edm-binarized_mnist16", "main"),
        ("edm-dna64", "main"),
        ("edm-binarized_mnist16", "variants"),
        ("edm-mnist16", "main"),
        ("edm-dna64", "variants"),
        ("edm-mnist16", "variants"),
        ("edm-dna64", "rest"),
    ],
    "full": [
        ("edm-binarized_mnist16", "all"),
        ("edm-dna64", "pair"),
        ("ddpm-binarized_digits", "all"),
        ("flow-digits", "all"),
        ("edm-binarized_digits", "all"),
        ("edm-dna64", "others"),
        ("edm-digits", "all"),
        ("edm-mnist16", "all"),
    ],
}


def run_priority(tier: str, spec) -> int:
    """Rank of a run in ``TIER_PRIORITY[tier]`` (the race order of the tier when it has none)."""
    rules = TIER_PRIORITY.get(tier)
    names = [r.name for r in tier_races(tier)]
    if not rules:
        return names.index(spec.race.name) if spec.race.name in names else len(names)
    pair = spec.sampler in (spec.race.infonoise_arm, spec.race.baseline)
    arm = parse_arm(spec.sampler)
    variant = bool(arm.options)  # "infonoise-<flag>_<value>"
    for i, (race, which, *seeds) in enumerate(rules):  # (race, which) or (race, which, seeds)
        if race != spec.race.name or (seeds and spec.seed not in seeds[0]):
            continue
        main = spec.sampler in (spec.race.infonoise_arm, "edm_lognormal", "logit_normal")
        if (
            which == "all"
            or (which in ("pair", "others") and (which == "pair") == pair)
            or (which == "main" and main)
            or (which == "variants" and variant)
            or (which == "rest" and not main and not variant)
            or (which == "recommended" and arm.recommended)
            or (not arm.recommended and (which, arm.kind) in (("fixed", "fixed"), ("infonoise", "infonoise"), ("peers", "adaptive")))
        ):
            return i
    return len(rules)


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
