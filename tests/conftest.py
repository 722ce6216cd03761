"""Shared fixtures: one intra-op thread, accelerate's process-wide state reset after each in-process
run, the training scripts as modules, a free TCP port. (The repository root, from which ``benchmarks``
imports as a package, is on the path through pytest's ``pythonpath`` setting in pyproject.toml.)"""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

# the fixtures of the train_unconditional tests (script, unet_config, draws, dna_dataset)
pytest_plugins = ["_unconditional"]


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


@pytest.fixture
def fresh_accelerate_state():
    """Each in-process script run builds its own Accelerator; clear accelerate's process-wide state after it
    (modules that run scripts in-process use it for every test: ``pytestmark = usefixtures(...)``)."""
    yield
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def free_port() -> int:
    """A free local TCP port (for a process group or ``accelerate launch --main_process_port``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
