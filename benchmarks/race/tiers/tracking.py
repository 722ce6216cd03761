"""The tracking estimator's tiers (issue 31): the library's default estimator on fine-tunes and from scratch
(``tracking``), its cadence and starts (``cadence``), the data-bounded profile start (``bound``, ``bound_gpu``,
``bound_transfer``, ``bound_transfer_cpu``), the variant drawing on ρ̂ (``draws``), what decides a fine-tune's best
density (``content``, ``learnability``) and longer budgets (``budget``)."""

from __future__ import annotations

import dataclasses

from benchmarks.race.races import Race, seed_lists
from benchmarks.race.tier import Tier
from benchmarks.race.tiers.transfer import FORMER_ESTIMATOR, REGRET, TRANSFER_SWEEP, transfer_races


def tracking_races() -> list[Race]:
    """Issue 31: the tracking estimator (docs/METHOD.md §5.10: a memory sized to the run, the clean-end bound), the
    library's default, against the same-code control (:data:`FORMER_ESTIMATOR`) and logit-normal, the best fixed
    density of every earlier binarized and fine-tune race, 3 seeds each: the finetune tier's three fine-tunes as it
    ran them (the EDM log-normal MNIST 16x16 pretrain fine-tuned for 400 steps onto binarized MNIST 16x16, binarized
    digits and digits at 16x16, evaluated at 100, 200 and 400 steps; InfoNoise's ``auto`` start is ``profile`` there,
    and their final models are what ``benchmarks.finetune_lag`` profiles), and from scratch binarized MNIST 16x16 (600
    steps) and DNA (800 steps) with the library's automatic warm-up, evaluated from a quarter of the run on."""
    arms = ("infonoise", FORMER_ESTIMATOR, "logit_normal")
    seeds = seed_lists(arms, 3)
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


def cadence_races() -> list[Race]:
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
            seeds=seed_lists(arms + starts + (PAPER_GATE_ARM,), 3),
            sampler_extra_args={
                CLAIRVOYANT_ARM: ("--infonoise_schedule_from", f"{{run:{r.name}__infonoise__s0}}/scheduler"),
                BOUNDED_START_ARM: ("--infonoise_schedule_from", f"{{start:{r.name}-bounded}}"),
                OFFLINE_START_ARM: ("--infonoise_schedule_from", f"{{start:{r.name}-profile}}"),
            },
        )
        for r in tracking_races()
        if r.pretrained
    ]


#: issue 31's option, the profile start bounded by the data (``--infonoise_profile_bound data``, docs/METHOD.md §5.10),
#: and its same-code control, the default start (the pretrained model's errors as measured) named explicitly. The bound
#: was the library's default from d04ffcb to 43ddd5b, where the first runs of the bounded arm ran as plain
#: ``infonoise``; those still in the results (the bound_transfer tier's) are filed under :data:`BOUNDED_PROFILE_ARM`,
#: each with ``relabelled_from`` (``benchmarks/race/relabel.py``); the default went back to ``none`` on their results
BOUNDED_PROFILE_ARM = "infonoise-profile_bound_data"
UNBOUNDED_START_ARM = "infonoise-profile_bound_none"


def bound_races(num_seeds: int = 3) -> list[Race]:
    """Issue 31, third round: the profile start bounded by the data (:data:`BOUNDED_PROFILE_ARM`, docs/METHOD.md §5.10)
    against its same-code control :data:`UNBOUNDED_START_ARM` and logit-normal(0, 1), ``num_seeds`` seeds each, on the
    tracking tier's binarized fine-tunes (same races, budgets and run ids, so that ``--reuse cadence`` takes
    logit-normal's runs). Continuous digits is left out: its data takes more than 16 values, so the bound leaves its
    start as measured."""
    arms = (BOUNDED_PROFILE_ARM, UNBOUNDED_START_ARM, "logit_normal")
    return [
        dataclasses.replace(r, samplers=arms, seeds=seed_lists(arms, num_seeds))
        for r in tracking_races()
        if r.pretrained and r.dataset.startswith("binarized")
    ]


def bound_transfer_races() -> list[Race]:
    """Issue 31: the transfer tier's two fine-tunes (onto x0 × 0.25 and 16x16 → 32x32, both binarized: the bound
    applies) at its budget, InfoNoise with the data-bounded start (:data:`BOUNDED_PROFILE_ARM`) beside its same-code
    control :data:`UNBOUNDED_START_ARM` (the default), EDM log-normal and the whole logit-normal sweep (its best point is
    the task's oracle), 3 seeds each, all on the same code and machine (a lent GPU: the transfer tier's own runs were
    made on CPUs)."""
    arms = (BOUNDED_PROFILE_ARM, UNBOUNDED_START_ARM, "edm_lognormal", *TRANSFER_SWEEP)
    return [dataclasses.replace(r, samplers=arms, seeds=seed_lists(arms, 3)) for r in transfer_races() if r.pretrained]


def bound_transfer_cpu_races() -> list[Race]:
    """The fine-tune onto x0 × 0.25 of :func:`bound_transfer_races`, on 2 CPU cores: both starts, EDM log-normal and the
    sweep's best point there (logit-normal centred at ln σ = −2), 3 seeds each, the replicate of the GPU tier's loss."""
    arms = (BOUNDED_PROFILE_ARM, UNBOUNDED_START_ARM, "edm_lognormal", "logit_normal@mean=-2")
    return [dataclasses.replace(r, samplers=arms, seeds=seed_lists(arms, 3)) for r in bound_transfer_races() if r.name == "tf-ft16-x0.25"]


#: issue 31's study variant whose draws, not its effective allocation, follow ρ̂ (``target_space="pi"``, settings.py)
DRAWS_ARM = "infonoise-target_space_pi"


def draws_races() -> list[Race]:
    """Issue 31, fourth round: the best fixed density of the fine-tune onto x0 × 0.25 draws its levels where the ρ̂ of
    InfoNoise's final model is (``benchmarks/results/finetune_target.json``), while InfoNoise's ``π ∝ ρ̂/w`` draws
    higher. The variant drawing on ρ̂ (:data:`DRAWS_ARM`) beside the default (:data:`UNBOUNDED_START_ARM`, the same-code
    control) and the fixed arms, 3 seeds each, on that fine-tune (as :func:`bound_transfer_cpu_races`) and, as the
    controls where InfoNoise's π is level with the best fixed density, the binarized MNIST and binarized digits
    fine-tunes of :func:`bound_races` (same races and run ids, so that ``--reuse bound`` / ``--reuse
    bound_transfer_cpu`` take the fixed arms' runs); and the binarized digits fine-tune onto x0 × 0.25, a second window far
    below σ_data, with logit-normal centred at ln σ = −2, −1 and 0, 2 seeds."""
    races = []
    for r in bound_races() + bound_transfer_cpu_races():
        if r.name in ("tk-ft-binarized_mnist16", "tk-ft-binarized_digits16", "tf-ft16-x0.25"):
            arms = (DRAWS_ARM,) + tuple(a for a in r.samplers if a != BOUNDED_PROFILE_ARM)
            races.append(dataclasses.replace(r, samplers=arms, seeds=seed_lists(arms, 3), infonoise_arm=UNBOUNDED_START_ARM))
    # a second fine-tune whose window lies far below σ_data: the binarized digits one onto x0 × 0.25, with a short
    # logit-normal sweep for its best fixed density (2 seeds: the rule's test, not a tier of its own)
    digits = next(r for r in races if r.name == "tk-ft-binarized_digits16")
    arms = (DRAWS_ARM, UNBOUNDED_START_ARM, "logit_normal", "logit_normal@mean=-2", "logit_normal@mean=-1")
    races.append(
        dataclasses.replace(
            digits, name="tk-ft-binarized_digits16-x0.25", dataset="binarized_digits16_x0.25", samplers=arms, seeds=seed_lists(arms, 2)
        )
    )
    return races


def content_races() -> list[Race]:
    """Issue 31, fifth round: what decides whether a fine-tune's best density draws on ρ̂ (onto binarized MNIST
    × 0.25 from binarized MNIST, where :data:`DRAWS_ARM` leads the default) or above it (onto binarized digits
    × 0.25 from continuous MNIST, where logit-normal(0, 1) and the default lead). Each race changes one factor of
    one of those two: the pretrain, so that the fine-tune changes the data's scale only or also its content.
    ``tk-ft-bd2bd-x0.25``: the digits fine-tune of :func:`draws_races` from a binarized-digits pretrain (scale
    only); ``tf-ft-m2bm-x0.25``: the MNIST one (``tf-ft16-x0.25``, 240 steps) from the continuous MNIST pretrain
    (content and scale). The same arms in both, 2 seeds: the variant, the default and logit-normal centred at
    ln σ = 0, −1, −2. Then each sweep widened around its best centre and EDM log-normal (the pretrains' density)
    added, 2 seeds, and a third seed of the default and of logit-normal centred at 0, −1 and −2.
    ``tf-ft-bm2bm-x0.25-400``: ``tf-ft16-x0.25`` itself at 400 steps (the budget of the digits races), 2 seeds, 3 for
    the variant, the default and logit-normal centred at −2; ``tf-ft-m2bm-x0.25-400``: the continuous MNIST pretrain's
    fine-tune at 400 steps too, those three arms, 2 seeds."""
    arms = (DRAWS_ARM, UNBOUNDED_START_ARM, "logit_normal", "logit_normal@mean=-1", "logit_normal@mean=-2")
    draws = {r.name: r for r in draws_races()}

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
        changed("tk-ft-binarized_digits16-x0.25", "tk-ft-bd2bd-x0.25", digits, seed_lists(digits, 2, third),
                pretrained="edm-edm_lognormal-binarized_digits16"),
        changed("tf-ft16-x0.25", "tf-ft-m2bm-x0.25", mnist, seed_lists(mnist, 2, third), **from_mnist),
        # the one fine-tune where the default trails (tf-ft16-x0.25, 240 steps) at 400 steps: the early part of a run
        # (the default trails every fine-tune early) or the target?
        changed("tf-ft16-x0.25", "tf-ft-bm2bm-x0.25-400", arms, seed_lists(arms, 2, dict.fromkeys(short, 3)), **longer),
        # and the continuous MNIST pretrain's at 400 steps too, so that the two pretrains compare at both budgets
        changed("tf-ft16-x0.25", "tf-ft-m2bm-x0.25-400", short, seed_lists(short, 2), **longer, **from_mnist),
    ]  # fmt: skip


def learnability_races() -> list[Race]:
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
    digits = next(r for r in cadence_races() if r.name == "tk-ft-digits16")
    return [
        dataclasses.replace(digits, samplers=arms, seeds=seed_lists(arms, 3, two), sampler_extra_args={}, infonoise_arm=UNBOUNDED_START_ARM)
    ]


def budget_races() -> list[Race]:
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
    mnist = next(r for r in content_races() if r.name == "tf-ft-bm2bm-x0.25-400")
    digits = next(r for r in learnability_races() if r.name == "tk-ft-digits16")
    m_arms = (UNBOUNDED_START_ARM, "logit_normal@mean=-2", DRAWS_ARM, "logit_normal@mean=-1", "logit_normal@mean=-1.5")
    d_arms = (UNBOUNDED_START_ARM, "logit_normal")

    def known_target(race: Race, arms=d_arms, more=None) -> Race:  # the arms and π fixed at the default's final schedule
        fixed = f"infonoise-init_stored-refresh_every={race.steps}"  # CLAIRVOYANT_ARM at this budget: it never refreshes
        start = ("--infonoise_schedule_from", f"{{run:{race.name}__{UNBOUNDED_START_ARM}__s0}}/scheduler")
        arms = (*arms, fixed)
        return dataclasses.replace(race, samplers=arms, seeds=seed_lists(arms, 3, more), sampler_extra_args={fixed: start})

    digits_x = next(r for r in draws_races() if r.name == "tk-ft-binarized_digits16-x0.25")
    return [
        known_target(dataclasses.replace(mnist, name="tf-ft-bm2bm-x0.25-800", **longest), m_arms, {DRAWS_ARM: 2}),
        known_target(dataclasses.replace(digits, name="tk-ft-digits16-800", **longest)),
        dataclasses.replace(
            digits_x,
            name="tk-ft-bd-x0.25-800",
            samplers=(*d_arms, "logit_normal@mean=0.5"),
            seeds=seed_lists((*d_arms, "logit_normal@mean=0.5"), 3),
            **longest,
        ),
        dataclasses.replace(mnist, name="tf-ft-bm2bm-x0.25-1600", samplers=x1600, seeds=seed_lists(x1600, 2), **longer),
        dataclasses.replace(
            mnist, name="tf-ft-bm2bm-x0.25-3000", samplers=x3000, seeds=seed_lists(x3000, 3, {"logit_normal@mean=-0.5": 1}), **users
        ),
        known_target(dataclasses.replace(digits, name="tk-ft-digits16-3000", **users)),
    ]


def bound_gpu_races() -> list[Race]:
    """The bound tier's races with seeds 3-9 (on a lent GPU; seeds 0-2 are the bound tier's)."""
    return [dataclasses.replace(r, seeds={a: list(range(3, 10)) for a in r.samplers}) for r in bound_races()]


TIERS = [
    Tier(
        "tracking",
        tracking_races,
        sizing="3 seeds of each arm; the finetune tier's three fine-tunes at its budget (400 steps, evaluated at 100, "
        "200, 400 with 2000 samples; no jitter samplings: the seeds' std includes the evaluation's) and two from-scratch "
        "races at the recheck_full tier's "
        "budgets (binarized MNIST 16x16 600 steps, DNA 800), with the library's automatic warm-up instead of a pinned one",
    ),
    Tier(
        "cadence",
        cadence_races,
        sizing="3 seeds of each arm on the tracking tier's fine-tunes, at its budget (400 steps, evaluated at 100, 200, "
        "400 with 2000 samples; no jitter samplings), continuous digits and binarized MNIST first",
    ),
    Tier(
        "bound",
        bound_races,
        sizing="3 seeds of each arm on the tracking tier's two binarized fine-tunes, at its budget (400 steps, evaluated "
        "at 100, 200, 400 with 2000 samples; no jitter samplings); logit-normal's runs reused from the cadence tier",
    ),
    Tier("bound_gpu", bound_gpu_races, sizing="seeds 3-9 of the bound tier's arms and races, on a lent GPU (one H200), at the same budget"),
    Tier(
        "bound_transfer",
        bound_transfer_races,
        sizing="the transfer tier's two fine-tunes at its budget (240 steps, 1000 samples at a third, two thirds "
        "and the end), 3 seeds of every arm, on a lent GPU (one H200): its own pretrain and classifiers, so its figures "
        "compare within this tier, not with the transfer tier's CPU runs",
        summaries=(REGRET,),
    ),
    Tier(
        "bound_transfer_cpu",
        bound_transfer_cpu_races,
        sizing="the bound_transfer tier's fine-tune onto x0 × 0.25 on 2 CPU cores, 3 seeds of four arms (both "
        "starts, EDM log-normal, logit-normal centred at ln σ = −2), at the same budget",
        summaries=(REGRET,),
    ),
    # the fine-tune onto x0 × 0.25 keeps the transfer tier's sweep in these
    Tier("draws", draws_races, summaries=(REGRET,)),
    Tier("content", content_races, summaries=(REGRET,)),
    Tier("learnability", learnability_races),
    Tier("budget", budget_races, summaries=(REGRET,)),
]
