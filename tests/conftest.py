"""Shared fixtures: one intra-op thread, the training scripts as modules, the repository on sys.path
(so that ``benchmarks`` imports as a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(autouse=True, scope="module")
def single_thread():
    """Run each module's tests on one intra-op thread.

    On a 2-core machine that is also running other jobs, torch's two OpenMP threads spin against
    each other and small float64 ops become tens of times slower; one thread is faster and
    deterministic.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def load_training_script(name: str, module_name: str | None = None):
    """``training_scripts/<name>.py`` imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(module_name or name, ROOT / "training_scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
