"""The benchmarks of diffusers-infonoise, run from the repository root as ``python -m benchmarks.<entry point>``
(``benchmarks/README.md`` lists every entry point with the command that reproduces each results file).

What the entry points share: where the repository and the committed results are (:data:`REPO`,
:data:`RESULTS`) and the training scripts as modules (:func:`training_script`), whose ``main(argv)`` the
benchmarks call unmodified."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def training_script(name: str):
    """``training_scripts/<name>.py`` imported as a module named ``name`` (the scripts are not a package).

    Raises:
        FileNotFoundError: no such script (the message lists the scripts there are).
    """
    path = REPO / "training_scripts" / f"{name}.py"
    if not path.exists():
        there = ", ".join(sorted(p.stem for p in path.parent.glob("*.py")))
        raise FileNotFoundError(f"name: no training script {path.name!r}; there are {there}")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
