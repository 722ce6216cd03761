"""How the package is put together: no import cycles (function-level and TYPE_CHECKING imports included), the path
kinds branched on in paths.py only (elsewhere a path's facts are read from its class), and ``--show_noise_schedule``
as one path of the script's run (:meth:`~diffusers_infonoise.training.ScriptRun.show`), which the loop knows nothing of."""

from __future__ import annotations

import ast
import re

from helpers import ROOT
from helpers.imports import cycles, import_graph

PACKAGE = ROOT / "diffusers_infonoise"
PATH_KINDS = {"ve", "vp", "flow"}


def test_the_package_has_no_import_cycles():
    graph = import_graph("diffusers_infonoise")
    assert {"diffusers_infonoise", "diffusers_infonoise.sampler.infonoise", "diffusers_infonoise.training.loop"} <= graph.keys()
    assert "diffusers_infonoise.sampler" in graph["diffusers_infonoise"]  # the graph sees the package's imports
    # a depth-first walk finds a cycle wherever there is one
    assert cycles(graph) == []


def test_the_import_graph_counts_function_level_and_type_checking_imports(tmp_path, monkeypatch):
    import helpers.imports as imports

    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .version import __version__\nfrom .a import f\n")
    (pkg / "version.py").write_text("__version__ = '1'\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.b import g\ndef f():\n    pass\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def g():\n    from .. import __version__\n")
    monkeypatch.setattr(imports, "ROOT", tmp_path)
    graph = imports.import_graph("pkg")
    assert graph["pkg.a"] == {"typing", "pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg"}
    assert cycles(graph) == [["pkg", "pkg.a", "pkg.sub.b", "pkg"]]


def _kind_like(node: ast.AST) -> bool:
    """A path kind read from a path, a config or a scheduler: ``x.kind``, ``kind``, ``path_kind``, ``c["kind"]``,
    ``c.get("kind")``, ``scheduler_kind(s)``."""
    if isinstance(node, ast.Name):
        return node.id in ("kind", "path_kind")
    if isinstance(node, ast.Attribute):
        return node.attr in ("kind", "path_kind")
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        first = node.args[0] if node.args else None
        return name == "scheduler_kind" or (name == "get" and isinstance(first, ast.Constant) and first.value == "kind")
    return False


def _names_a_kind(node: ast.AST) -> bool:
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return any(isinstance(v, ast.Constant) and v.value in PATH_KINDS for v in values)


def path_kind_branches(source: str) -> list[int]:
    """The lines of ``source`` that compare a path kind with a named kind (``path.kind == "vp"``,
    ``scheduler_kind(s) in ("ve", "flow")``) or with another path's kind (``a.kind == b.kind``). A ``prediction_type``
    of ``"flow"`` is the loss's, not the path's, and a kind looked up in a table (``path.kind in family.kinds``) is data."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        kinds = [o for o in operands if _kind_like(o)]
        if kinds and (len(kinds) > 1 or any(_names_a_kind(o) for o in operands if not _kind_like(o))):
            lines.append(node.lineno)
    return lines


def test_path_kinds_are_branched_on_in_paths_py_only():
    found = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "paths.py" or path.parent != PACKAGE
        for line in path_kind_branches(path.read_text())
    }
    assert found == set()
    assert path_kind_branches((PACKAGE / "paths.py").read_text())  # where they are, the finder finds them


def test_the_path_kind_finder_finds_each_form():
    source = """
if scheduler_kind(s) == "flow": pass
if path.kind != "ve": pass
if kind in ("vp", "flow"): pass
if meta.get("kind") == path.kind: pass
if payload["path"]["kind"] == "vp": pass
if prediction_type == "flow": pass
if path.kind in FAMILIES[name].kinds: pass
"""
    assert path_kind_branches(source) == [2, 3, 4, 5, 6]


def test_showing_the_schedule_is_the_runs_one_path_not_the_loops():
    """``--show_noise_schedule`` is :meth:`ScriptRun.show`: no script tests for a missing accelerator, and the loop
    neither shows nor is told to."""
    scripts = sorted((ROOT / "training_scripts").glob("*.py"))
    loop = PACKAGE / "training" / "loop.py"
    assert len(scripts) >= 5
    for path in [*scripts, loop]:
        assert not re.search(r"accelerator\s+is\s+(not\s+)?None", path.read_text()), path.name
    assert not re.search(r"show", loop.read_text(), re.I)
    for path in scripts:
        if path.name != "__init__.py":
            assert path.read_text().count("run.show(") == 1, path.name
