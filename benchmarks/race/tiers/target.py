"""What InfoNoise allocates (issue 47): the fair race that scores a target. ``fair``: the transfer tier's tasks at their
budgets, with an oracle re-run with every seed and six evaluations a run; ``fair_budget``: the budget tier's three
fine-tunes at 800 steps, likewise. Their summary part is :mod:`benchmarks.race.fair` (beside the transfer tier's regret).
"""

from __future__ import annotations

import dataclasses

from benchmarks.race.arms import RECOMMENDED_ARM
from benchmarks.race.fair import markdown as fair_markdown
from benchmarks.race.fair import summarize_fair
from benchmarks.race.races import Race, seed_lists
from benchmarks.race.tier import SummaryPart, Tier
from benchmarks.race.tiers.tracking import budget_races
from benchmarks.race.tiers.transfer import transfer_races

#: the fair race's summary part: the oracle's mean, regrets with their noise, speed-ups on raw curves
FAIR = SummaryPart("fair", summarize_fair, markdown=fair_markdown)

#: every arm's seeds in a fair race
FAIR_SEEDS = 3
#: the evaluations of a run (at every sixth of the budget)
FAIR_EVALUATIONS = 6
#: the arms every fair race compares: InfoNoise as the library ships it and the two defaults a user picks without a sweep
FAIR_ARMS = ("infonoise", "logit_normal", "edm_lognormal")

#: per transfer task, the best centre of the transfer tier's one-seed sweep of logit-normal's location (ln σ) and its
#: better neighbour; both neighbours where the best lies at the sweep's edge (the fine-tune onto x0 × 0.25: −2, so −3
#: and −1) or the two are within the seeds' spread of each other. From quality_race_transfer's final qualities.
FAIR_ORACLES = {
    "tf-bin16": ("logit_normal", "logit_normal@mean=1"),  # 46.8; +1: 53.3, −1: 55.8
    "tf-bin16-x0.25": ("logit_normal@mean=-1", "logit_normal@mean=-2"),  # 58.3; −2: 63.4, 0: 71.2
    "tf-bin16-x4": ("logit_normal@mean=1", "logit_normal@mean=2"),  # 45.0; +2: 48.0, 0: 63.2
    "tf-deq16": ("logit_normal@mean=-1", "logit_normal"),  # 83.3; 0: 86.4, −2: 124.9
    "tf-dna64": ("logit_normal@mean=1", "logit_normal@mean=2", "logit_normal"),  # 0.107; +2: 0.119, 0: 0.121
    "tf-dna2mer32": ("logit_normal@mean=1", "logit_normal"),  # 0.175; 0: 0.176 (every arm within 2.3%)
    "tf-ft16-x0.25": ("logit_normal@mean=-2", "logit_normal@mean=-3", "logit_normal@mean=-1"),  # 70.0; −1: 86.9; −3 unraced
}
#: the same for the budget tier's fine-tunes at 800 steps (its 3-seed finals; the best centre's unraced neighbours added)
FAIR_BUDGET_ORACLES = {
    "tf-ft-bm2bm-x0.25-800": ("logit_normal@mean=-1.5", "logit_normal@mean=-1"),  # 40.0, 40.3 (−2: 46.8)
    "tk-ft-digits16-800": ("logit_normal", "logit_normal@mean=0.5"),  # 86.7; 0.5 led 0 at 400 steps (124.2 vs 125.6)
    "tk-ft-bd-x0.25-800": ("logit_normal", "logit_normal@mean=-0.5", "logit_normal@mean=0.5"),  # 67.7; +0.5: 72.2
}


def _fair(race: Race, centres: tuple, evaluations: int = FAIR_EVALUATIONS, extra: tuple = ()) -> Race:
    """``race`` with the fair arms, its oracle's centres and ``extra`` arms, :data:`FAIR_SEEDS` seeds each, evaluated
    ``evaluations`` times at equal intervals, InfoNoise as the library ships it compared with logit-normal(0, 1), speed-ups
    read on each seed's raw curve."""
    arms = tuple(dict.fromkeys((*FAIR_ARMS, *centres, *extra)))
    every = race.steps // evaluations
    return dataclasses.replace(
        race,
        samplers=arms,
        seeds=seed_lists(arms, FAIR_SEEDS),
        sweep=centres,
        baseline="logit_normal",
        infonoise_arm="infonoise",
        eval_every=every,
        eval_steps=tuple(every * (i + 1) for i in range(evaluations)),
        sampler_extra_args={},
        extra_args=(),
        jitter=False,
        smoothing=1,
    )


def fair_races() -> list[Race]:
    """Issue 47, step 1: the transfer tier's tasks (the 32x32 two left out: an evaluation there costs about 4 minutes of
    2 cores, so six a run are for a lent GPU) with the fair oracle (:data:`FAIR_ORACLES`), the library's InfoNoise and
    the two defaults, 3 seeds each, evaluated at every sixth of the budget (1000 samples each, as the transfer tier).
    With them the fixed density ``infonoise recommend`` prints for the task (:data:`RECOMMENDED_ARM`, pilot and profile
    counted: benchmarks/race/recommended.py), scored against the same oracle (issue 48)."""
    races = {r.name: r for r in transfer_races()}
    return [_fair(races[name], centres, extra=(RECOMMENDED_ARM,)) for name, centres in FAIR_ORACLES.items()]


#: issue 47, step 3 on the budget tier's fine-tunes: B (``target_space=importance``), the best-measured candidate of
#: the fair_candidates tier (never behind the default on six tasks, ahead at x4), beside the fair arms
FAIR_BUDGET_CANDIDATES = ("infonoise-target_space=importance",)


def fair_budget_races() -> list[Race]:
    """Issue 47, steps 1 and 3 on the fine-tunes at the longer budget: the budget tier's three 800-step fine-tunes
    with their fair oracles (:data:`FAIR_BUDGET_ORACLES`) and candidate B (:data:`FAIR_BUDGET_CANDIDATES`), likewise,
    evaluated every 100 steps (8 evaluations)."""
    races = {r.name: r for r in budget_races()}
    return [_fair(races[name], centres, evaluations=8, extra=FAIR_BUDGET_CANDIDATES) for name, centres in FAIR_BUDGET_ORACLES.items()]


#: issue 47, step 3: the candidates raced beside the fair arms (run with ``--reuse fair``: only these are new), per task.
#: B (``target_space=importance``: φ = ρ̂ by draws ∝ ρ̂·m̂ and a per-sample factor) was the one candidate closer to
#: the oracle than the paper's target on most tasks in step 2 (benchmarks/results/target_candidates.md); on the
#: x0 × 0.25 fine-tune also the split φ = ρ̂ by draws (``rho_draws``: draws ∝ ρ̂, factor ∝ 1/w) vs by weights (today's).
#: C (``target_space=reducible``: draws ∝ ρ̂·R̂, R̂ the error a level sheds per e-fold of its draws) has no step 2 (no
#: stored schedule holds a loss history) and is raced on every one of these tasks.
_C = "infonoise-target_space=reducible"
CANDIDATE_ARMS = {
    "tf-ft16-x0.25": ("infonoise-target_space=importance", "infonoise-target_space=rho_draws", _C),
    "tf-dna64": ("infonoise-target_space=importance", _C),
    "tf-bin16-x4": ("infonoise-target_space=importance", _C),
    "tf-dna2mer32": ("infonoise-target_space=importance", _C),  # a near-oracle task: a candidate must not lose there
    # the two other near-oracle tasks, where a default that changes must not lose either: B only (C was level with the
    # default on the fine-tune and both DNA tasks, so it is no candidate for the default)
    "tf-bin16": ("infonoise-target_space=importance",),
    "tf-deq16": ("infonoise-target_space=importance",),
}


def candidate_races() -> list[Race]:
    """The fair races of :data:`CANDIDATE_ARMS`' tasks with their candidate arms added, 3 seeds each."""
    races = {r.name: r for r in fair_races()}
    out = []
    for name, arms in CANDIDATE_ARMS.items():
        race = races[name]
        samplers = (*(a for a in race.samplers if a != RECOMMENDED_ARM), *arms)
        out.append(dataclasses.replace(race, samplers=samplers, seeds=seed_lists(samplers, FAIR_SEEDS)))
    return out


#: the fair tier's tasks raced in the first pass (every arm but the recommended one), and the others in the order the
#: tier runs them whole: continuous data first (where the former recommend fit lost most, +37%), then the reference
FAIR_FIRST_PASS = ("tf-ft16-x0.25", "tf-bin16-x4", "tf-dna64", "tf-dna2mer32")
FAIR_SECOND_PASS = ("tf-deq16", "tf-bin16", "tf-bin16-x0.25")


def fair_tier_priority() -> tuple:
    """The fair tier's order: the recommended arm on the first pass's tasks (whose other runs are committed and come
    back with ``--restore``), then each other task whole, every seed, one after the other (a task decides only with
    3 seeds of every arm, so a tier cut short by a session's end leaves whole tasks rather than one seed of each)."""
    return tuple([(name, "recommended") for name in FAIR_FIRST_PASS] + [(name, "all") for name in FAIR_SECOND_PASS])


def fair_priority(races: list[Race]) -> tuple:
    """Breadth first: seed 0 of every task's arms, then seeds 1 and 2 task by task (a tier that runs over several
    sessions has every task's first comparison from the first)."""
    return tuple([(r.name, "all", (0,)) for r in races] + [(r.name, "all", (1, 2)) for r in races])


TIERS = [
    Tier(
        "fair",
        fair_races,
        sizing="the transfer tier's tasks but the two at 32x32 (for a lent GPU); 3 seeds of every arm; 6 evaluations a run; "
        "the oracle's two (three at the sweep's edge) best centres of the transfer tier's sweep; the recommended arm "
        "(a pilot of a quarter of the run from scratch, a profile of 256 probes); resume with --restore",
        priority=fair_tier_priority(),
        summaries=(FAIR,),
    ),
    Tier(
        "fair_candidates",
        candidate_races,
        sizing="the fair races of three failures and one near-oracle task with issue 47's candidates B and C (and on "
        "x0 x 0.25 the split by draws) added, and of two more near-oracle tasks with B, 3 seeds each; run with --reuse fair "
        "so that only the candidates' runs are new",
        priority=fair_priority(candidate_races()),
        summaries=(FAIR,),
    ),
    Tier(
        "fair_budget",
        fair_budget_races,
        sizing="the budget tier's three 800-step fine-tunes; 3 seeds of every arm, candidate B's (importance) included; "
        "8 evaluations a run",
        priority=fair_priority(fair_budget_races()),
        summaries=(FAIR,),
    ),
]
