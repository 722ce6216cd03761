"""The tiers of the quality race (``--tier``), one module per family, each listing its :class:`~benchmarks.race.tier.Tier`
objects in its ``TIERS``: :mod:`.scratch` (issues 6 and 10), :mod:`.finetune` (issue 22), :mod:`.margin` (issue 24),
:mod:`.transfer` (issues 30 and 32), :mod:`.tracking` (issue 31), :mod:`.target` (issue 47). A tier is added to its
family's ``TIERS``; a family, to :data:`FAMILIES`.

The names of :mod:`benchmarks.race.races`, :mod:`benchmarks.race.arms` and the families' arms are importable from here
too, where the tiers' users have always found them."""

from __future__ import annotations

from benchmarks.race.arms import DEFAULT_PILOT_FRACTION, RECOMMENDED_ARM, RECOMMENDED_TAG, Arm, parse_arm, run_arm, split_arms
from benchmarks.race.races import (
    ALL_SAMPLERS,
    EVAL_SEED,
    JITTER_SEEDS,
    NUM_INFERENCE_STEPS,
    OMITTED_AT_DEFAULT,
    PRETRAINS,
    Pretrain,
    Race,
    eval_scheduler,
    smoke_races,
    tier_pretrains,
    train_scheduler,
    unet_config,
)
from benchmarks.race.tier import Tier
from benchmarks.race.tiers import finetune, margin, scratch, target, tracking, transfer
from benchmarks.race.tiers.tracking import (
    BASE_START_ARM,
    BOUNDED_PROFILE_ARM,
    BOUNDED_START_ARM,
    CADENCE_ARMS,
    CLAIRVOYANT_ARM,
    DRAWS_ARM,
    OFFLINE_START_ARM,
    PAPER_GATE_ARM,
    UNBOUNDED_START_ARM,
)
from benchmarks.race.tiers.transfer import FORMER_ESTIMATOR, RECOMMENDED_HALF_PILOT_ARM, TRANSFER_ARMS, TRANSFER_SWEEP, WARMUP_BASE_ARM

#: the tier families, in the order ``--tier`` lists their tiers
FAMILIES = (scratch, finetune, margin, transfer, tracking, target)
#: every tier by name, in the families' order
REGISTRY: dict[str, Tier] = {}
for _family in FAMILIES:
    for _tier in _family.TIERS:
        if _tier.name in REGISTRY:  # two families defining one name would shadow a tier silently
            raise ValueError(f"tier {_tier.name!r} is defined twice ({_family.__name__})")
        REGISTRY[_tier.name] = _tier
#: every tier's name (``--tier``)
TIERS = tuple(REGISTRY)


def get_tier(name: str) -> Tier:
    """The tier called ``name``.

    Raises:
        ValueError: an unknown tier (naming it and the tiers there are).
    """
    if name not in REGISTRY:
        raise ValueError(f"unknown tier {name!r}; accepted: {', '.join(TIERS)}")
    return REGISTRY[name]


def tier_races(name: str) -> list[Race]:
    """The races of a tier, in the tier's order (:meth:`Tier.races`).

    Raises:
        ValueError: an unknown tier (:func:`get_tier`).
    """
    return get_tier(name).races()


def run_priority(name: str, spec) -> int:
    """Rank of a run in the tier's start order (:meth:`Tier.run_priority`).

    Raises:
        ValueError: an unknown tier (:func:`get_tier`).
    """
    return get_tier(name).run_priority(spec)


__all__ = [
    "ALL_SAMPLERS",
    "BASE_START_ARM",
    "BOUNDED_PROFILE_ARM",
    "BOUNDED_START_ARM",
    "CADENCE_ARMS",
    "CLAIRVOYANT_ARM",
    "DEFAULT_PILOT_FRACTION",
    "DRAWS_ARM",
    "EVAL_SEED",
    "FAMILIES",
    "FORMER_ESTIMATOR",
    "JITTER_SEEDS",
    "NUM_INFERENCE_STEPS",
    "OFFLINE_START_ARM",
    "OMITTED_AT_DEFAULT",
    "PAPER_GATE_ARM",
    "PRETRAINS",
    "RECOMMENDED_ARM",
    "RECOMMENDED_HALF_PILOT_ARM",
    "RECOMMENDED_TAG",
    "REGISTRY",
    "TIERS",
    "TRANSFER_ARMS",
    "TRANSFER_SWEEP",
    "UNBOUNDED_START_ARM",
    "WARMUP_BASE_ARM",
    "Arm",
    "Pretrain",
    "Race",
    "Tier",
    "eval_scheduler",
    "get_tier",
    "parse_arm",
    "run_arm",
    "run_priority",
    "smoke_races",
    "split_arms",
    "tier_pretrains",
    "tier_races",
    "train_scheduler",
    "unet_config",
]
