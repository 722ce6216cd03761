"""What a tier of the quality race is (:class:`Tier`): its races, what it leaves out, the order its runs start in and
its own parts of the summary. The tiers themselves are :mod:`benchmarks.race.tiers`, one module per family."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from benchmarks.race.arms import parse_arm
from benchmarks.race.races import Race


@dataclass(frozen=True)
class SummaryPart:
    """A tier's own part of the summary, stored under ``key``: ``summarize(races, runs, summary)`` returns it (None where
    it has nothing to add; it builds on the races' entries in ``summary``); ``markdown(part, tier_name)`` its sections
    of the report (lines), ``figure(part, path)`` its figure, drawn as ``quality_race_<tier>_<key>.png`` (or
    ``figure_name``'s suffix)."""

    key: str
    summarize: Callable
    markdown: Callable | None = None
    figure: Callable | None = None
    figure_name: str | None = None


@dataclass(frozen=True)
class Tier:
    """One tier (``--tier``).

    ``build`` returns its races, in the tier's order (:meth:`races`). ``sizing``: what it leaves out of its issue's
    specification to fit its time budget (recorded in the results). ``priority``: the order its runs start in, rules
    ``(race, which runs)`` or ``(race, which runs, seeds)`` (:meth:`run_priority`); "pair" = InfoNoise and the race's
    baseline, "others" = the other samplers, "main" = InfoNoise, EDM log-normal and logit-normal, "variants" =
    InfoNoise's variants, "rest" = the samplers neither main nor a variant, "fixed" / "infonoise" / "peers" = the arms
    of that kind (:attr:`~benchmarks.race.arms.Arm.kind`: fixed densities, InfoNoise and its variants, the other
    adaptive ones; a ``#recommended`` arm is none of them), "recommended" = the ``#recommended`` arms, "all"; without
    rules, the race order. ``summaries``: the tier's own parts of the summary and the report, :class:`SummaryPart`
    each (:func:`benchmarks.race.summary.summarize`, :func:`benchmarks.race.report.write_report`). ``notice``: printed
    when the tier starts. ``other_tiers``: the results' note on tiers its results file does not hold."""

    name: str
    build: Callable[[], list[Race]]
    sizing: str | None = None
    priority: tuple = ()
    summaries: tuple = ()
    notice: str | None = None
    other_tiers: dict = field(default_factory=dict)

    def races(self) -> list[Race]:
        """The tier's races, in the tier's order."""
        return self.build()

    def run_priority(self, spec) -> int:
        """Rank of a run (a :class:`~benchmarks.race.harness.RunSpec`: its race, sampler and seed) in :attr:`priority`,
        one past the last rule where none takes it; without rules, its race's place in the tier (the race order)."""
        rules = self.priority
        if not rules:
            names = [r.name for r in self.races()]
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
