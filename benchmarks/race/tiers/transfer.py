"""The transfer tier (issues 30 and 32): tasks whose informative noise window moves, each beside its unmoved
reference, InfoNoise against a sweep of logit-normal's location (whose best point is the task's oracle); its summary,
the regret against that oracle (:mod:`benchmarks.race.transfer`), is every tier's whose races carry a sweep."""

from __future__ import annotations

from benchmarks.race.arms import RECOMMENDED_ARM, RECOMMENDED_TAG
from benchmarks.race.races import Race
from benchmarks.race.tier import SummaryPart, Tier
from benchmarks.race.transfer import markdown, plot_regret, summarize_transfer


def regret_summary(races: list[Race], runs: list[dict], summary: dict) -> dict | None:
    """The summary's ``transfer`` part (:func:`benchmarks.race.transfer.summarize_transfer`): the regret against each
    sweep's best point, of the races that carry a sweep; None where none does (``--only`` may leave them out)."""
    return summarize_transfer(races, runs, summary) if any(r.sweep for r in races) else None


#: a tier's summary part (:attr:`benchmarks.race.tier.Tier.summaries`) for races with a sweep: the regret, its sections
#: of the report and its figure ``quality_race_<tier>_regret.png``
REGRET = SummaryPart("transfer", regret_summary, markdown=markdown, figure=plot_regret, figure_name="regret")


#: the estimator before issue 31, on today's code: InfoNoise with an EMA of β = 0.9 a refresh and no clean-end bound
FORMER_ESTIMATOR = "infonoise-ema_decay=0.9-clean_end_bound=false"


#: the transfer tier's sweep of logit-normal's location (issue 30): the centre of ln σ (VE σ) at −2, −1, 1, 2, in the
#: library's convention (``mean`` > 0: more noise; the harness passes ``--logit_mean`` with diffusers' sign, −mean);
#: the centre 0 with std 1 is the default ``logit_normal`` itself, whose runs the sweep reuses
TRANSFER_SWEEP = ("logit_normal@mean=-2", "logit_normal@mean=-1", "logit_normal", "logit_normal@mean=1", "logit_normal@mean=2")
#: InfoNoise with logit-normal(0, 1) as its warm-up and floor base (``--infonoise_base logit_normal``; issue 31)
WARMUP_BASE_ARM = "infonoise-base=logit_normal"
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


def transfer_races() -> list[Race]:
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


def transfer_priority(races: list[Race]) -> tuple:
    """The transfer tier's run order (:attr:`benchmarks.race.tier.Tier.priority`)."""
    return tuple(
        # per task, the fixed arms first (the defaults, then the sweep: they do not change when the estimator does), then
        # InfoNoise, the next task after; the adaptive peers last
        # breadth first: seed 0 of every task's fixed arms (the defaults and the sweep: they do not change when the
        # estimator does) and InfoNoise arms, then seeds 1-2 task by task, then the adaptive peers; a tier that runs over
        # several sessions has every task's oracle and regret from the first
        [(r.name, which, (0,)) for r in races for which in ("fixed", "infonoise")]
        + [(r.name, which, (1, 2)) for r in races for which in ("fixed", "infonoise")]
        + [(r.name, "peers") for r in races]
        # issue 32's recommended arm last, so that the runs queued before it keep their order
        + [(r.name, "recommended") for r in races]
    )


TIERS = [
    Tier(
        "transfer",
        transfer_races,
        sizing="first pass sized for about 5 h of 2 cores: 1000 samples per evaluation at a third, two thirds and the "
        "end; 450 steps at 16x16, 300 at 32x32, 600 on DNA, fine-tunes 240; 3 seeds of InfoNoise, the former estimator "
        "(issue 31's control) and the two defaults, 1 "
        "of each sweep point and adaptive peer; no jitter samplings (the seeds' std includes the evaluation's); the "
        "fine-tunes' unmoved references are the from-scratch tasks of the same data; then (issue 32) 1 seed of logit-normal "
        "fitted to a profile, a fine-tune's pretrain at step 0 or a from-scratch task's pilot of a quarter of its steps",
        priority=transfer_priority(transfer_races()),
        summaries=(REGRET,),
    ),
]
