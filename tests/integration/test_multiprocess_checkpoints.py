"""Two processes with diffusers' checkpoint patterns (issue 20): ``accelerator.save_state`` on the main
process only, and on every rank (with the collective gather of the model that FSDP's and DeepSpeed's saves make,
emulated: accelerate runs neither engine on a CPU; issue 28), each with a checkpoint mid-run and at the last step. Before the
fix the sampler's ``state_dict`` ran an ``all_reduce`` on the saving rank alone: the run hung, or the
collective met DDP's gradient all-reduce and a rank crashed. Each launch takes seconds; a hang fails
the test at its timeout instead of stalling the suite."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.launch import accelerate_launch

SCRIPT = ROOT / "tests" / "helpers" / "ddp_pattern_script.py"  # run by path, as accelerate launch runs a script
STEPS, EVERY = 6, 3  # checkpoints at step 3 (mid-run: open statistics, data statistics not frozen) and 6 (the last)


def launch(out: Path, *extra: str, timeout: int = 180) -> tuple[dict, dict]:
    out.mkdir(parents=True, exist_ok=True)
    args = ("--output_dir", out, "--max_train_steps", STEPS, "--checkpointing_steps", EVERY, *extra)
    accelerate_launch(SCRIPT, *args, timeout=timeout)
    return tuple(json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The reference: save-on-main and save-on-every-rank runs of the same batches (one launch each)."""
    root = tmp_path_factory.mktemp("ddp")
    return {pattern: (root / pattern, launch(root / pattern, "--save_on", pattern)) for pattern in ("main", "every")}


def test_both_patterns_finish_with_every_rank_holding_the_same_pi(uninterrupted):
    (_, (m0, m1)), (_, (e0, e1)) = uninterrupted["main"], uninterrupted["every"]
    assert m0["pi"] is not None and m0["optimizer_step"] == m1["optimizer_step"] == STEPS
    for a, b in ((m0, m1), (e0, e1), (m0, e0)):  # both ranks alike, and the saving pattern changes nothing
        assert a["pi"] == b["pi"] and a["m_hat"] == b["m_hat"] and a["weights"] == b["weights"]
        assert a["pi_moves"] == b["pi_moves"] and a["pi_moves"]["tv"]  # π's moves too (stored schedules carry them)
        assert a["mmse_cap"] == b["mmse_cap"] and a["min_gap"] == b["min_gap"] == 2.0  # data statistics of both ranks


@pytest.mark.parametrize("pattern", ["main", "every"])
def test_resume_from_the_mid_run_checkpoint_is_exact(uninterrupted, tmp_path, pattern):
    folder, (ref, _) = uninterrupted[pattern]
    ckpt = folder / f"checkpoint-{EVERY}"
    # save-on-main leaves rank 0's files only; the sampler's state in it must still be every rank's
    assert (ckpt / "custom_checkpoint_0.pkl").is_file()
    again = tmp_path / "again"
    shutil.copytree(ckpt, again / ckpt.name)
    r0, r1 = launch(again, "--save_on", pattern, "--resume_from_checkpoint", str(again / ckpt.name))
    for r in (r0, r1):
        assert r["pi"] == ref["pi"] and r["m_hat"] == ref["m_hat"] and r["weights"] == ref["weights"]
        assert r["pi_moves"] == ref["pi_moves"]
        assert r["optimizer_step"] == STEPS and r["num_draws"] == ref["num_draws"]
        assert r["mmse_cap"] == ref["mmse_cap"] and r["min_gap"] == ref["min_gap"]


def test_resume_from_the_last_checkpoint_trains_nothing(uninterrupted, tmp_path):
    folder, (ref, _) = uninterrupted["main"]
    again = tmp_path / "again"
    shutil.copytree(folder / f"checkpoint-{STEPS}", again / f"checkpoint-{STEPS}")
    r0, r1 = launch(again, "--save_on", "main", "--resume_from_checkpoint", str(again / f"checkpoint-{STEPS}"))
    for r in (r0, r1):
        assert r["global_step"] == r["optimizer_step"] == STEPS
        assert r["pi"] == ref["pi"] and r["weights"] == ref["weights"] and r["num_draws"] == ref["num_draws"]
        assert r["pi_moves"] == ref["pi_moves"]
