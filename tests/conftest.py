"""Shared fixtures: one intra-op thread, accelerate's process-wide state reset after each in-process
run, the training scripts as modules, a free TCP port. (The repository root, from which ``benchmarks``
imports as a package, is on the path through pytest's ``pythonpath`` setting in pyproject.toml.)"""

from __future__ import annotations

import importlib.util
import re
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


def assert_option_error(capsys, match: str, main, argv) -> str:
    """``main(argv)`` exits with status 2 and one line ``<script>: error: ...`` on stderr matching ``match``."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("usage:") and not line.startswith(" ")]
    assert info.value.code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and ": error: " in lines[0] and re.search(match, lines[0]), err
    return lines[0]


def refreshes_in_log(log: str, processes: int) -> dict[int, str]:
    """``{step: pi hash}`` of the refresh lines in a multi-process run's log. Each refresh is logged once, by the main
    process (issue 28: the package's INFO lines came once per rank), saying that all ``processes`` hold that π (the
    monitor gathers π from every rank and stops the run if they differ)."""
    lines = re.findall(r"step (\d+): pi refreshed \(hash ([0-9a-f]+), the same on all (\d+) process", log)
    steps = [int(step) for step, _, _ in lines]
    assert len(steps) == len(set(steps)), f"a refresh logged more than once (once per rank?): {steps}"
    assert {int(n) for _, _, n in lines} <= {processes}, lines
    return {int(step): h for step, h, _ in lines}
