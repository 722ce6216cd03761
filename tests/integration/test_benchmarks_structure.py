"""How benchmarks/ is put together: no import cycles (function-level imports included), nothing imported from tests/,
and every tier a :class:`~benchmarks.race.tier.Tier` of one family module, asked for its races, order and summary."""

from __future__ import annotations

import importlib.util

import pytest

from benchmarks.race import tiers
from benchmarks.race.tiers.target import FAIR
from benchmarks.race.tiers.transfer import REGRET

from helpers import ROOT
from helpers.imports import cycles, import_graph


def test_benchmarks_have_no_import_cycles():
    graph = import_graph("benchmarks")
    assert {"benchmarks.race.summary", "benchmarks.race.transfer", "benchmarks.race.harness"} <= graph.keys()
    assert cycles(graph) == []


def test_cycle_finder_finds_a_function_level_cycle():
    # the finder itself: summary -> transfer at the top, transfer -> summary in a function
    graph = {"a.summary": {"a.transfer", "numpy"}, "a.transfer": {"a.summary"}, "a.other": {"a.summary"}}
    assert cycles(graph) == [["a.summary", "a.transfer", "a.summary"]]


def test_benchmarks_import_nothing_from_tests():
    imported = {m for found in import_graph("benchmarks").values() for m in found}
    assert not {m for m in imported if m.split(".")[0] in ("tests", "helpers")}
    # the tiny pipelines the benchmarks build are theirs, and the tests import them from there
    assert importlib.util.find_spec("benchmarks.tiny_pipelines") is not None
    assert not (ROOT / "tests" / "helpers" / "tiny_pipelines.py").exists()


def test_every_tier_is_one_family_modules_tier():
    names = [t.name for family in tiers.FAMILIES for t in family.TIERS]
    assert tiers.TIERS == tuple(names) and len(set(names)) == len(names) == 23
    assert tiers.TIERS[:3] == ("quick", "full", "gpu") and tiers.TIERS[-3:] == ("fair", "fair_candidates", "fair_budget")
    for name in tiers.TIERS:
        tier = tiers.get_tier(name)
        assert tier.name == name and tier.races()
        # a regret summary (the transfer tier's, or the fair race's with its re-run oracle) belongs to exactly the
        # tiers whose races carry a sweep
        assert bool({REGRET, FAIR} & set(tier.summaries)) == any(r.sweep for r in tier.races()), name
    assert [t for t in tiers.TIERS if FAIR in tiers.get_tier(t).summaries] == ["fair", "fair_candidates", "fair_budget"]
    assert [t for t in tiers.TIERS if REGRET in tiers.get_tier(t).summaries] == [
        "transfer",
        "bound_transfer",
        "bound_transfer_cpu",
        "draws",
        "content",
        "budget",
    ]
    assert tiers.get_tier("gpu").notice.startswith("note: --tier gpu")
    assert set(tiers.get_tier("quick").other_tiers) == {"full", "gpu"}
    assert [t for t in tiers.TIERS if tiers.get_tier(t).other_tiers] == ["quick"]


def test_unknown_tier_names_the_tiers():
    with pytest.raises(ValueError, match=r"unknown tier 'nope'; accepted: quick, full, gpu, .*budget"):
        tiers.tier_races("nope")
