"""``train_unconditional.py`` resumed: the sampler's state and next draws, gradient accumulation, mid-epoch
and fresh-folder resumes bit for bit, two processes, interrupted saves, SIGKILL at any moment, a non-finite
loss, and a resume from the last checkpoint (issue 20)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import ROOT
from helpers.launch import accelerate_launch, refreshes_in_log
from helpers.scripts import assert_option_error
from helpers.unconditional import (
    SCRIPT,
    assert_same_state,
    base_args,
    flatten_state,
    saved_sampler_state,
    scheduler_payload,
)

pytestmark = pytest.mark.slow


def test_resume_restores_sampler_state_and_next_draws(script, unet_config, tmp_path, draws, caplog):
    out = tmp_path / "run"
    args = base_args(unet_config, out, "--checkpointing_steps", 2, "--use_ema")
    script.main(args + ["--max_train_steps", "4"])
    straight = list(draws)
    assert [c["step"] for c in straight] == [0, 1, 2, 3]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert (out / "checkpoint-2" / "unet_ema" / "config.json").is_file()
    saved = saved_sampler_state(out / "checkpoint-2")
    assert saved["optimizer_step"] == 2 and saved["num_updates"] == 1 and saved["probs"] is not None

    # resume from checkpoint-2 ("latest" once checkpoint-4 is gone) to step 4
    import shutil

    shutil.rmtree(out / "checkpoint-4")
    draws.clear()
    script.main(args + ["--max_train_steps", "4", "--resume_from_checkpoint", "latest"])
    resumed = list(draws)
    assert [c["step"] for c in resumed] == [2, 3]
    # the live sampler before its first draw is exactly the saved one (π, m̂, open sums, counts, step,
    # the position of its random stream)
    assert_same_state(flatten_state(resumed[0]["state"]), saved)
    # ... which is the uninterrupted run's state at that step
    assert_same_state(flatten_state(straight[2]["state"]), saved)
    assert saved["num_draws"] == 2
    # and it draws what the uninterrupted run drew at the same steps (π next changes at step 4's
    # refresh, from losses that depend on the data order, which is not part of the promise)
    for a, b in zip(resumed, straight[2:]):
        assert a["step"] == b["step"]
        assert torch.equal(a["timesteps"], b["timesteps"]), a["step"]
    assert scheduler_payload(out)["optimizer_steps"] == 4

    # a checkpoint without sampler state: warns and continues with a fresh sampler at the right step
    shutil.rmtree(out / "checkpoint-4")
    shutil.rmtree(out / "checkpoint-2" / "noise_sampler")
    draws.clear()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="diffusers_infonoise.training"):
        script.main(args + ["--max_train_steps", "3", "--resume_from_checkpoint", "latest"])
    assert any("no noise-sampler state" in r.getMessage() for r in caplog.records), caplog.text
    assert [c["step"] for c in draws] == [2]
    assert draws[0]["state"]["num_updates"] == 0 and draws[0]["state"]["probs"] is None
    assert scheduler_payload(out)["optimizer_steps"] == 3


# ----------------------------------------------------------------------------------------------
# gradient accumulation
# ----------------------------------------------------------------------------------------------


def test_gradient_accumulation_counts_optimizer_steps_and_resumes(script, unet_config, tmp_path, draws):
    out = tmp_path / "accum"
    # 64 samples, batch 8: 8 micro-batches per epoch, i.e. updates of 3, 3 and 2 micro-batches
    # (accelerate also steps at the end of the data loader)
    args = base_args(unet_config, out, "--gradient_accumulation_steps", 3, "--checkpointing_steps", 3, "--max_train_steps", 6)
    script.main(args)
    pattern = [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5]
    # the sampler stepped once per optimizer step, not per micro-batch
    assert [c["step"] for c in draws] == pattern
    payload = scheduler_payload(out)
    assert payload["optimizer_steps"] == 6
    assert payload["adapted"] is True and payload["num_updates"] == 3  # refreshes at steps 2, 4, 6
    assert "training steps | 6 (batch 24)" in (out / "README.md").read_text()

    # resuming at an epoch boundary starts the next epoch at its first micro-batch
    straight = list(draws)
    draws.clear()
    script.main(args + ["--resume_from_checkpoint", "checkpoint-3"])
    assert [c["step"] for c in draws] == pattern[8:]
    for a, b in zip(draws[:3], straight[8:11]):  # step 3, before π's next refresh
        assert torch.equal(a["timesteps"], b["timesteps"])
    assert scheduler_payload(out)["optimizer_steps"] == 6


# ----------------------------------------------------------------------------------------------
# two processes
# ----------------------------------------------------------------------------------------------


def test_two_process_run_shares_pi(unet_config, tmp_path):
    """Two processes: every refresh gives both ranks the same π, each rank checkpoints the same sampler state,
    only the main process writes the outputs, and the mid-run checkpoint resumed (in a fresh folder, through the
    load hooks, which need the model's own class, not the DDP wrapper's) ends bit for bit where the straight run
    ends. Two launches: each costs about 25 s of start-up on a 2-core machine."""
    import shutil

    from safetensors.torch import load_file

    out = tmp_path / "ddp"
    args = base_args(
        unet_config,
        out,
        "--logger",
        "tensorboard",
        "--max_train_steps",
        6,
        "--infonoise_refresh_every",
        1,
        "--schedule_plot_steps",
        2,
        "--checkpointing_steps",
        4,
        # a few-step model is worse than both trivial predictors (x0 = x_sigma and E[x0]) at every sigma, so with
        # the Bayes bounds its q is min(sigma^2, V)/sigma^2 and pi would not move (docs/METHOD.md 5.10)
        "--infonoise_clean_end_bound",
        "false",
    )
    log = accelerate_launch(SCRIPT, *args)

    hashes = refreshes_in_log(log, 2)
    assert sorted(hashes) == [2, 3, 4, 5, 6], log[-5000:]
    assert len(set(hashes.values())) == 5  # π moved at each refresh

    # 64 samples over 2 ranks with batch 8: 4 optimizer steps an epoch, 16 samples each
    payload = scheduler_payload(out)
    assert payload["optimizer_steps"] == 6 and payload["num_updates"] == 5
    # each rank checkpointed the sampler: the same π, the same stream position (seed, draws: 4 steps
    # of one batch) and the same open statistics (summed over the ranks)
    ckpt = out / "checkpoint-4"
    s0, s1 = saved_sampler_state(ckpt, 0), saved_sampler_state(ckpt, 1)
    assert torch.equal(s0["probs"], s1["probs"]) and s0["num_draws"] == s1["num_draws"] == 4
    assert torch.equal(s0["estimator.counts"], s1["estimator.counts"])
    assert (ckpt / "random_states_0.pkl").is_file() and (ckpt / "random_states_1.pkl").is_file()
    # only the main process wrote the outputs: one tracker run, one set of plots
    # (tensorboard's add_hparams writes a second event file in a sub-folder, from the same process)
    events = list((out / "logs").rglob("events.out.tfevents.*"))
    writers = {e.name.rsplit(".", 2)[-2] for e in events}  # events.out.tfevents.<time>.<host>.<pid>.<n>
    assert events and len(writers) == 1, events
    # the tracker got the loss, lr, loss per noise-level quartile, the schedule scalars and images
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = {"scalars": set(), "images": set()}
    for e in events:
        acc = EventAccumulator(str(e), size_guidance={"images": 0, "scalars": 0})
        acc.Reload()
        for kind in tags:
            tags[kind] |= set(acc.Tags()[kind])
    assert {"train_loss", "lr", "step_time_s", "infonoise/num_updates"} <= tags["scalars"], tags  # the keys of every script
    assert any(t.startswith("loss_q") for t in tags["scalars"]), tags
    assert {"infonoise/schedule", "infonoise/drawn_levels", "samples"} <= tags["images"], tags
    # (plots at the first refresh, then at most every --schedule_plot_steps 2 steps: 2, 4 and 6, not 3 or 5)
    assert sorted(p.name for p in (out / "schedule").glob("*.png")) == sorted(
        f"{kind}_{s:07d}.png" for kind in ("drawn_levels", "schedule") for s in (2, 4, 6)
    )
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            "README.md",
            "checkpoint-4",
            "logs",
            "model_index.json",
            "noise_schedule.png",
            "samples.png",
            "samples_epoch_0001.png",  # the last epoch's (the second: 4 steps an epoch)
            "schedule",
            "scheduler",
            "unet",
        ]
    )

    # bit for bit on 2 processes: checkpoint-4 resumed in a fresh folder ends where the straight run ends
    again = tmp_path / "ddp_again"
    again.mkdir()
    shutil.copytree(ckpt, again / "checkpoint-4")
    accelerate_launch(SCRIPT, *[x if x != str(out) else str(again) for x in args], "--resume_from_checkpoint", "latest")
    assert scheduler_payload(again)["optimizer_steps"] == 6
    assert scheduler_payload(out)["pi"] == scheduler_payload(again)["pi"]
    wa, wb = (load_file(d / "unet" / "diffusion_pytorch_model.safetensors") for d in (out, again))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_resume_mid_epoch_reproduces_the_uninterrupted_weights(script, unet_config, tmp_path):
    """64 examples, batch 8: checkpoint-2 is mid-epoch. The batch order (seeded by seed and epoch), the
    augmentation, the noise and the sampler's draws are all restored, so the weights are identical."""
    from safetensors.torch import load_file

    common = ["--checkpointing_steps", 2, "--max_train_steps", 4, "--random_flip", "--noise_sampler", "infonoise"]
    import shutil

    script.main(base_args(unet_config, tmp_path / "straight", *common))
    # an interrupted run: only checkpoint-2 of the same run survives
    shutil.copytree(tmp_path / "straight" / "checkpoint-2", tmp_path / "cut" / "checkpoint-2")
    script.main(base_args(unet_config, tmp_path / "cut", *common, "--resume_from_checkpoint", "latest"))
    a = load_file(str(tmp_path / "straight" / "unet" / "diffusion_pytorch_model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "unet" / "diffusion_pytorch_model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=0, msg=k)


def test_a_nonfinite_loss_never_reaches_the_weights(script, unet_config, tmp_path, monkeypatch, caplog):
    """NaN injected into the loss: the step is not applied (weights and EMA stay finite, the run goes on);
    three in a row stop the run with an error naming the step, and nothing is saved."""
    real = script.per_sample_mse
    calls = {"n": 0}

    def sometimes_nan(pred, target):
        calls["n"] += 1
        out = real(pred, target)
        return out * float("nan") if calls["n"] in poisoned else out

    monkeypatch.setattr(script, "per_sample_mse", sometimes_nan)
    poisoned = {2}  # one bad micro-batch (= optimizer step 2)
    out = tmp_path / "one_nan"
    with caplog.at_level(logging.WARNING):
        script.main(base_args(unet_config, out, "--diffusion", "edm", "--max_train_steps", 4, "--use_ema"))
    assert any("step 2: non-finite loss or gradient" in r.getMessage() for r in caplog.records), caplog.text
    from diffusers import UNet2DModel

    unet = UNet2DModel.from_pretrained(out / "unet")
    assert all(bool(torch.isfinite(p).all()) for p in unet.parameters())

    calls["n"] = 0
    poisoned = set(range(1, 100))  # every step
    out = tmp_path / "all_nan"
    with pytest.raises(RuntimeError, match=r"step 3: 3 optimizer steps in a row had a non-finite loss"):
        script.main(base_args(unet_config, out, "--diffusion", "edm", "--max_train_steps", 6))
    assert not (out / "unet").exists() and not (out / "README.md").exists()


def test_an_interrupted_checkpoint_save_leaves_the_last_complete_one(script, unet_config, tmp_path, monkeypatch, caplog):
    """A failure in the middle of writing checkpoint-4 (here: the sampler state raises) leaves checkpoint-2
    intact and visible (checkpoints are written under a temporary name, renamed when complete, pruned
    after); `latest` resumes from it, and a folder that lost its completion marker is skipped with a warning."""
    from diffusers_infonoise.training import checkpoints as C

    out = tmp_path / "interrupted"
    args = base_args(unet_config, out, "--diffusion", "edm", "--checkpointing_steps", 2, "--checkpoints_total_limit", 1)
    real = C.save_sampler_state
    calls = {"n": 0}

    def fail_on_second(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("killed while writing checkpoint-4")
        return real(*a, **k)

    monkeypatch.setattr(C, "save_sampler_state", fail_on_second)
    with pytest.raises(KeyboardInterrupt):
        script.main(args + ["--max_train_steps", "6"])
    monkeypatch.setattr(C, "save_sampler_state", real)
    assert (out / "checkpoint-2" / C.COMPLETE_MARKER).is_file() and not (out / "checkpoint-4").exists()
    assert C.resolve_resume_checkpoint(str(out), "latest") == str(out / "checkpoint-2")
    script.main(args + ["--max_train_steps", "6", "--resume_from_checkpoint", "latest"])
    assert scheduler_payload(out)["optimizer_steps"] == 6
    assert sorted(p.name for p in out.glob("*checkpoint-*")) == ["checkpoint-6"]  # pruned after the save, tmp gone
    # a folder without the marker was not written by this package (its interrupted saves leave .checkpoint-N.tmp): refused
    (out / "checkpoint-8").mkdir()
    with pytest.raises(ValueError, match=r"latest: the newest checkpoint \S*checkpoint-8 has no infonoise_checkpoint.json"):
        C.resolve_resume_checkpoint(str(out), "latest")
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        C.resolve_resume_checkpoint(str(out), str(out / "checkpoint-8"))


def test_sigkill_at_any_moment_keeps_a_resumable_checkpoint(unet_config, tmp_path):
    """SIGKILL the script at several moments while it checkpoints every step; each time `latest` is a complete
    checkpoint that resumes."""
    import signal

    from diffusers_infonoise.training.checkpoints import is_complete_checkpoint, resolve_resume_checkpoint

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    out = tmp_path / "killed"
    cmd = [
        sys.executable,
        str(SCRIPT),
        *base_args(
            unet_config, out, "--diffusion", "edm", "--checkpointing_steps", 1, "--checkpoints_total_limit", 1, "--max_train_steps", 400
        ),
    ]
    for delay in (0.0, 0.4, 1.1):
        proc = subprocess.Popen(
            cmd + (["--resume_from_checkpoint", "latest"] if out.exists() else []),
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 300
        start = max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")) if out.exists() and list(out.glob("checkpoint-*")) else 0
        while time.time() < deadline and not any(int(p.name.split("-")[1]) > start + 1 for p in out.glob("checkpoint-*")):
            time.sleep(0.05)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        latest = resolve_resume_checkpoint(str(out), "latest")
        assert latest is not None and is_complete_checkpoint(latest), sorted(p.name for p in out.iterdir())
    proc = subprocess.run(
        cmd[:-2] + ["--max_train_steps", str(int(Path(latest).name.split("-")[1]) + 2), "--resume_from_checkpoint", "latest"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


def test_resume_in_a_fresh_folder_is_exact(script, unet_config, tmp_path):
    """The reliability issue's reproduction: 128 digits, batch 16 (8 batches an epoch), checkpoint-10 is in
    epoch 1; resumed in a fresh folder, π, the stored statistics and the weights equal the uninterrupted run's."""
    import shutil

    from safetensors.torch import load_file

    common = [
        "--model_config_name_or_path",
        unet_config,
        "--diffusion",
        "edm",
        "--dataset_name",
        "digits",
        "--resolution",
        "8",
        "--max_train_samples",
        "128",
        "--train_batch_size",
        "16",
        "--infonoise_num_bins",
        "8",
        "--infonoise_min_count",
        "1",
        "--infonoise_warmup_steps",
        "4",
        "--infonoise_refresh_every",
        "3",
        "--checkpointing_steps",
        "10",
        "--max_train_steps",
        "16",
        "--logger",
        "none",
        "--seed",
        "0",
        "--eval_batch_size",
        "2",
        "--num_inference_steps",
        "2",
        "--lr_warmup_steps",
        "0",
    ]
    script.main(common + ["--output_dir", str(tmp_path / "a")])
    (tmp_path / "b").mkdir()
    shutil.copytree(tmp_path / "a" / "checkpoint-10", tmp_path / "b" / "checkpoint-10")
    script.main(common + ["--output_dir", str(tmp_path / "b"), "--resume_from_checkpoint", "latest"])
    pa, pb = scheduler_payload(tmp_path / "a"), scheduler_payload(tmp_path / "b")
    assert pa["pi"] == pb["pi"] and pa["m_hat"] == pb["m_hat"] and pb["optimizer_steps"] == 16
    wa = load_file(tmp_path / "a" / "unet" / "diffusion_pytorch_model.safetensors")
    wb = load_file(tmp_path / "b" / "unet" / "diffusion_pytorch_model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_resuming_a_finished_run_trains_nothing_and_says_so(script, unet_config, tmp_path, caplog, capsys):
    """A requeued job, or a kill during the final save: ``--resume_from_checkpoint latest`` from the last
    checkpoint used to train one more step and overwrite the model (12 -> 13, issue 20). It takes no step,
    writes the same weights and schedule, and says so; a checkpoint past the run's end is an error."""
    from safetensors.torch import load_file

    out = tmp_path / "done"
    common = ["--diffusion", "edm", "--max_train_steps", 4, "--checkpointing_steps", 2, "--use_ema"]
    script.main(base_args(unet_config, out, *common))
    weights = out / "unet" / "diffusion_pytorch_model.safetensors"
    before, payload = load_file(str(weights)), scheduler_payload(out)
    with caplog.at_level(logging.WARNING):
        script.main(base_args(unet_config, out, *common, "--resume_from_checkpoint", "latest"))
    assert any(
        "the checkpoint is at optimizer step 4, the run's last (4); nothing is left to train" in r.getMessage() for r in caplog.records
    ), caplog.text
    after = load_file(str(weights))
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert scheduler_payload(out) == payload and payload["optimizer_steps"] == 4
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    argv = base_args(unet_config, out, *common[:2], "--max_train_steps", 3, "--resume_from_checkpoint", "latest")
    says = r"--resume_from_checkpoint: the checkpoint is at optimizer step 4, past this run's 3 .* never trains past the run's end"
    assert_option_error(capsys, says, script.main, argv)
    # a checkpoint of other options (another grid, another sampler, a name that is no checkpoint) is one line naming the
    # option, as argparse's errors, before any step; these ended in a traceback from accelerate's load_state
    for extra, cause in (
        (["--infonoise_num_bins", 32], "--infonoise_num_bins (the grid): 16 -> 32"),
        (["--noise_sampler", "logit_normal"], "saved by a 'infonoise' sampler"),
    ):
        argv = base_args(unet_config, out, *common, *extra, "--resume_from_checkpoint", "latest")
        line = assert_option_error(
            capsys, r"--resume_from_checkpoint: \S*checkpoint-4: its noise-sampler state does not load", script.main, argv
        )
        named = "(--diffusion, --noise_sampler, --sigma_data, --prediction_type, --infonoise_base, --infonoise_num_bins)"
        assert cause in line and named in line, line
        assert line.endswith("or train into another --output_dir"), line
    argv = base_args(unet_config, out, *common, "--resume_from_checkpoint", "checkpoint-99")
    assert_option_error(capsys, "--resume_from_checkpoint: 'checkpoint-99' is neither 'latest' nor a checkpoint folder", script.main, argv)
    assert load_file(str(weights)).keys() == before.keys() and all(torch.equal(before[k], load_file(str(weights))[k]) for k in before)
    assert scheduler_payload(out) == payload and sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


# ----------------------------------------------------------------------------------------------
# checkpoints this package did not write, and resumes that do not fit
# ----------------------------------------------------------------------------------------------


def _diffusers_checkpoint(folder: Path) -> None:
    """A ``checkpoint-N`` as diffusers' own ``train_unconditional.py`` writes it: ``accelerator.save_state`` (with the
    UNet in ``unet/``, as its hook saves it), and no completion marker of this package."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from diffusers import UNet2DModel

    from helpers.unconditional import TINY_UNET

    accelerator = Accelerator(cpu=True)
    model = UNet2DModel(**{k: v for k, v in TINY_UNET.items() if k != "_class_name"})
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    accelerator.save_state(str(folder))
    model.save_pretrained(str(folder / "unet"))
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_checkpoints_of_another_program_are_never_deleted(script, unet_config, tmp_path, capsys):
    """A ``checkpoint-N`` without this package's marker (diffusers' own script, an older version, a copy that lost the
    file) was called an interrupted save: ``latest`` skipped it and started afresh, and the pruning of
    --checkpoints_total_limit or the rename of a save over the same name deleted it. Now ``latest`` refuses it in one
    line, a save that would replace one is refused before any step, and the pruning counts and deletes only this
    package's checkpoints."""
    from diffusers_infonoise.training.checkpoints import COMPLETE_MARKER

    out = tmp_path / "shared"
    for step in (1, 2, 6):
        _diffusers_checkpoint(out / f"checkpoint-{step}")
    before = {step: _tree(out / f"checkpoint-{step}") for step in (1, 2, 6)}
    args = base_args(unet_config, out, "--diffusion", "edm", "--checkpointing_steps", 2, "--checkpoints_total_limit", 1)
    args += ["--max_train_steps", "4"]
    says = r"--output_dir: this run saves checkpoint-2, and \S*checkpoint-2 has no infonoise_checkpoint.json, so this package did not"
    line = assert_option_error(capsys, says, script.main, args)
    assert "move it out of --output_dir, or train into another --output_dir" in line, line
    (out / "checkpoint-2").rename(out / "checkpoint-3")  # no longer where this run saves
    before[3] = before.pop(2)
    script.main(args)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-3", "checkpoint-4", "checkpoint-6"]
    assert (out / "checkpoint-4" / COMPLETE_MARKER).is_file()  # this run's own, pruned to one
    says = r"--resume_from_checkpoint latest: the newest checkpoint \S*checkpoint-6 has no infonoise_checkpoint.json"
    assert_option_error(capsys, says, script.main, args + ["--max_train_steps", "8", "--resume_from_checkpoint", "latest"])
    says = r"--resume_from_checkpoint: \S*checkpoint-6 is not a complete checkpoint of this package .*diffusers' own training script"
    assert_option_error(capsys, says, script.main, args + ["--max_train_steps", "8", "--resume_from_checkpoint", str(out / "checkpoint-6")])
    assert {step: _tree(out / f"checkpoint-{step}") for step in (1, 3, 6)} == before


def test_a_resume_that_does_not_fit_ends_in_one_line(script, unet_config, tmp_path, capsys, caplog):
    """A killed and resumed run's schedule/history.jsonl repeated the refreshes logged after its checkpoint; a resume
    on another process count said nothing; a checkpoint of another model size, without the EMA it is asked for, with a
    damaged optimizer.bin, or in a folder not named checkpoint-<step> ended in a traceback (IndexError, "invalid
    literal for int()", torch's size mismatch or zip error). Each is one line naming --resume_from_checkpoint and the
    folder, or a warning, and the history is the uninterrupted run's."""
    import json
    import shutil

    from diffusers_infonoise.training.checkpoints import COMPLETE_MARKER

    out = tmp_path / "run"
    args = base_args(unet_config, out, "--diffusion", "edm", "--checkpointing_steps", 2, "--max_train_steps", 4)
    script.main(args)

    def history_steps():
        return [json.loads(line)["step"] for line in (out / "schedule" / "history.jsonl").read_text().splitlines()]

    straight = history_steps()
    assert straight == [2, 4]
    # the kill came after step 4's refresh and before checkpoint-4; the checkpoint says 2 processes saved it
    shutil.rmtree(out / "checkpoint-4")
    marker = out / "checkpoint-2" / COMPLETE_MARKER
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "num_processes": 2}))
    with caplog.at_level(logging.WARNING, logger="diffusers_infonoise"):
        script.main(args + ["--resume_from_checkpoint", "latest"])
    assert history_steps() == straight
    assert any(
        "saved by a run on 2 process(es), this one runs on 1" in r.getMessage() and "not an exact one" in r.getMessage()
        for r in caplog.records
    ), caplog.text

    bigger = tmp_path / "bigger.json"
    bigger.write_text(json.dumps({**json.loads(Path(unet_config).read_text()), "block_out_channels": [8, 32]}))
    for name in ("ck", "checkpoint-4.bak", "checkpoint-3"):
        shutil.copytree(out / "checkpoint-2", out / name)
    (out / "checkpoint-3" / "optimizer.bin").write_bytes((out / "checkpoint-2" / "optimizer.bin").read_bytes()[:100])
    named = r"--resume_from_checkpoint: \S*{}: a checkpoint folder is named checkpoint-<step>.* says step 2"
    does_not_load = r"--resume_from_checkpoint: \S*{} does not load into this run \({}"
    size_mismatch = does_not_load.format("checkpoint-2", "RuntimeError: .*size mismatch")
    for extra, says in (
        (["--resume_from_checkpoint", "ck"], named.format("ck")),
        (["--resume_from_checkpoint", "checkpoint-4.bak"], named.format(r"checkpoint-4\.bak")),
        (["--resume_from_checkpoint", "checkpoint-3"], does_not_load.format("checkpoint-3", "RuntimeError: PytorchStreamReader")),
        (["--resume_from_checkpoint", "checkpoint-2", "--model_config_name_or_path", bigger], size_mismatch),
        (["--resume_from_checkpoint", "checkpoint-2", "--use_ema"], r"\S*checkpoint-2 has no unet_ema: it was saved without --use_ema"),
        # EDM's prediction type is the sign of c_out: the sampler's loss is the same, the network's target is not
        (["--resume_from_checkpoint", "checkpoint-2", "--prediction_type", "v_prediction"],
         r"\S*checkpoint-2 trained the network with another output \(--prediction_type epsilon -> v_prediction\)"),
    ):  # fmt: skip
        assert_option_error(capsys, says, script.main, args + ["--max_train_steps", "6", *map(str, extra)])
