"""The import graph of a folder of the repository (benchmarks/, the package), read from the source with ``ast`` so
that imports inside functions and under ``TYPE_CHECKING`` count, and the import cycles in it."""

from __future__ import annotations

import ast

from helpers import ROOT


def import_graph(folder: str) -> dict[str, set[str]]:
    """The modules under ``folder`` (a top-level folder of the repository, e.g. ``"benchmarks"``) and, per module, what
    it imports anywhere in it (at the top, in a function, under TYPE_CHECKING): ``from a.b import c`` is an import of
    the module ``a.b.c`` where that is one, else of ``a.b`` (the package's ``__init__``). Every other import (the
    library, torch, ``tests``/``helpers``) is kept under its own name."""
    modules = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
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
