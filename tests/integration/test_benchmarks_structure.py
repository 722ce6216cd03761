"""How benchmarks/ is put together: no import cycles (function-level imports included), nothing imported from tests/,
and every tier a :class:`~benchmarks.race.tier.Tier` of one family module, asked for its races, order and summary."""

from __future__ import annotations

import ast
import importlib.util

import pytest

from benchmarks.race import tiers
from benchmarks.race.tiers.target import FAIR
from benchmarks.race.tiers.transfer import REGRET

from helpers import ROOT


def import_graph() -> dict[str, set[str]]:
    """benchmarks' modules and, per module, the benchmarks modules it imports anywhere in it (at the top, in a
    function, under TYPE_CHECKING): ``from a.b import c`` is an import of the module ``a.b.c`` where that is one,
    else of ``a.b``. Every other import (the library, torch, ``tests``/``helpers``) is kept under its own name."""
    modules = {}
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, one level up per extra dot
                    base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])])
                found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles among the graph's own modules (each once, from its first module in a depth-first walk)."""
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node] & graph.keys()):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_benchmarks_have_no_import_cycles():
    graph = import_graph()
    assert {"benchmarks.race.summary", "benchmarks.race.transfer", "benchmarks.race.harness"} <= graph.keys()
    assert cycles(graph) == []


def test_cycle_finder_finds_a_function_level_cycle():
    # the finder itself: summary -> transfer at the top, transfer -> summary in a function
    graph = {"a.summary": {"a.transfer", "numpy"}, "a.transfer": {"a.summary"}, "a.other": {"a.summary"}}
    assert cycles(graph) == [["a.summary", "a.transfer", "a.summary"]]


def test_benchmarks_import_nothing_from_tests():
    imported = {m for found in import_graph().values() for m in found}
    assert not {m for m in imported if m.split(".")[0] in ("tests", "helpers")}
    # the tiny pipelines the benchmarks build are theirs, and the tests import them from there
    assert importlib.util.find_spec("benchmarks.tiny_pipelines") is not None
    assert not (ROOT / "tests" / "helpers" / "tiny_pipelines.py").exists()


def test_every_tier_is_one_family_modules_tier():
    names = [t.name for family in tiers.FAMILIES for t in family.TIERS]
    assert tiers.TIERS == tuple(names) and len(set(names)) == len(names) == 22
    assert tiers.TIERS[:3] == ("quick", "full", "gpu") and tiers.TIERS[-3:] == ("budget", "fair", "fair_budget")
    for name in tiers.TIERS:
        tier = tiers.get_tier(name)
        assert tier.name == name and tier.races()
        # a regret summary (the transfer tier's, or the fair race's with its re-run oracle) belongs to exactly the
        # tiers whose races carry a sweep
        assert bool({REGRET, FAIR} & set(tier.summaries)) == any(r.sweep for r in tier.races()), name
    assert [t for t in tiers.TIERS if FAIR in tiers.get_tier(t).summaries] == ["fair", "fair_budget"]
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
