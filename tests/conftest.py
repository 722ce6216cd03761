"""Shared fixtures: one intra-op thread, accelerate's process-wide state reset after each in-process run, and the
fixtures of helpers/unconditional.py and helpers/cli.py. What the tests share besides fixtures is in helpers/
(tests/ and the repository root are on the path through pytest's ``pythonpath`` in pyproject.toml, so that
``helpers`` and ``benchmarks`` import as packages)."""

from __future__ import annotations

import pytest
import torch

# the helpers' asserts report their operands as the tests' own do
pytest.register_assert_rewrite("helpers")

# the fixtures of the train_unconditional tests (script, unet_config, draws, dna_dataset) and of the cli tests (saved)
pytest_plugins = ["helpers.unconditional", "helpers.cli"]


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


@pytest.fixture
def fresh_accelerate_state():
    """Each in-process script run builds its own Accelerator; clear accelerate's process-wide state after it
    (modules that run scripts in-process use it for every test: ``pytestmark = usefixtures(...)``)."""
    yield
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
