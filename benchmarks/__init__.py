"""The benchmarks of diffusers-infonoise, run from the repository root as ``python -m benchmarks.<entry point>``
(``benchmarks/README.md`` lists every entry point with the command that reproduces each results file).

What the entry points share: where the repository and the committed results are (:data:`REPO`,
:data:`RESULTS`) and the training scripts as modules (:func:`training_script`), whose ``main(argv)`` the
benchmarks call unmodified."""

from __future__ import annotations

import functools
import importlib.util
import json
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """The repository's commit (short hash, ``+dirty`` with uncommitted changes), recorded with every result so that
    "the same code" can be checked; ``"unknown"`` outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


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


def write_results(path: Path, entry_point: str, result: dict, *, started: float) -> None:
    """Write ``result`` as ``path`` (JSON) with what makes it reproducible: ``command`` (``python -m
    benchmarks.<entry_point>`` and this process's arguments), ``code`` (:func:`code_version`) and ``machine``
    (platform and wall seconds since ``started``, a ``time.time()``)."""
    result = {
        "command": shlex.join(["python", "-m", f"benchmarks.{entry_point}", *sys.argv[1:]]),
        "code": code_version(),
        **result,
        "machine": {"platform": platform.platform(), "wall_s": round(time.time() - started, 1)},
    }
    Path(path).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
