"""Several processes: a free TCP port, ``accelerate launch`` of a script on CPU processes (every multi-process run
and resume of the tests goes through it), and the refreshes that such a run's log reports."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

# CPU processes with one intra-op thread each (two ranks on a 2-core machine), their logs as they come
LAUNCH_ENV = {"ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}


def free_port() -> int:
    """A free local TCP port (for a process group or ``accelerate launch --main_process_port``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch(script: str | Path, *args, num_processes: int = 2, timeout: int = 600) -> str:
    """Run ``script`` (a path) with ``args`` under ``accelerate launch --multi_gpu`` on ``num_processes`` CPU
    processes, from the repository root and on a fresh port each call; return its log (stdout and stderr).

    The test fails with the log's tail when the run exits non-zero, and when it still runs after ``timeout`` seconds
    (a hang: a collective that some ranks never reach), once the launcher and every rank are stopped."""
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        str(num_processes),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        str(script),
        *map(str, args),
    ]
    env = {**os.environ, **LAUNCH_ENV}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM, not SIGKILL: torch's elastic agent (what accelerate launch runs) starts each rank in a session of
        # its own and stops them on SIGTERM; killed outright, it would leave the ranks running, holding the pipe open
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            log, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            log = "(no log: the ranks outlived the launcher)"
        pytest.fail(f"{num_processes}-process run of {Path(script).name} {args} hung for {timeout} s:\n{log[-3000:]}")
    assert proc.returncode == 0, log[-5000:]
    return log


def refreshes_in_log(log: str, processes: int) -> dict[int, str]:
    """``{step: pi hash}`` of the refresh lines in a multi-process run's log. Each refresh is logged once, by the main
    process (issue 28: the package's INFO lines came once per rank), saying that all ``processes`` hold that π (the
    monitor gathers π from every rank and stops the run if they differ)."""
    lines = re.findall(r"step (\d+): pi refreshed \(hash ([0-9a-f]+), the same on all (\d+) process", log)
    steps = [int(step) for step, _, _ in lines]
    assert len(steps) == len(set(steps)), f"a refresh logged more than once (once per rank?): {steps}"
    assert {int(n) for _, _, n in lines} <= {processes}, lines
    return {int(step): h for step, h, _ in lines}
