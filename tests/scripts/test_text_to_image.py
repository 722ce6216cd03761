"""End-to-end tests of training_scripts/train_text_to_image.py (SD, VP), offline (SD3: test_sd3.py).

Tiny random pipelines (benchmarks/tiny_pipelines.py) are built once per session and saved to a
temporary folder that serves as ``--pretrained_model_name_or_path``; the scripts run in-process
through ``main(argv)`` for a few optimizer steps on 16x16 images. Every value compared against is
computed independently: diffusers' own Min-SNR and SD3 weighting functions, the scheduler config
on disk, and stock diffusers pipelines loading the outputs.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shutil

import numpy as np
import pytest
import torch

from benchmarks.tiny_pipelines import RESOLUTION, save_tiny_sd_pipeline, write_captioned_image_folder

from helpers import ROOT
from helpers.launch import accelerate_launch, refreshes_in_log
from helpers.scripts import assert_option_error, load_training_script
from helpers.text_to_image import (
    FAST,
    INFONOISE,
    assert_same_sampler_state,
    front_matter_tags,
    sampler_state,
    scheduler_config_and_payload,
    tensorboard_tags,
)

sd_script = load_training_script("train_text_to_image")


pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


@pytest.fixture(scope="module")
def sd_model(tmp_path_factory):
    return save_tiny_sd_pipeline(str(tmp_path_factory.mktemp("tiny_sd") / "model"))


# ----------------------------------------------------------------------------------------------
# Stable Diffusion (VP)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["train_text_to_image", "train_text_to_image_sdxl", "train_text_to_image_sd3", "train_text_to_image_flux"])
def test_source_and_start_mistakes_end_in_one_line(name, sd_model, tmp_path, capsys, monkeypatch):
    """Issue 28: a mistyped model folder that looks like owner/name was tried on the Hub, and a start that does not
    apply ended in a traceback. Both end as argparse ends a bad option: one line, exit status 2, nothing written."""
    script = sd_script if name == "train_text_to_image" else load_training_script(name, f"{name}_options")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    out = ["--output_dir", str(tmp_path / "out"), "--max_train_steps", "1"]
    want = r"--pretrained_model_name_or_path: no such file or folder: runs/zA \(tried as a local path because \./runs exists\)"
    assert_option_error(capsys, want, script.main, ["--pretrained_model_name_or_path", "runs/zA", *out])
    model = ["--pretrained_model_name_or_path", sd_model, *out]
    missing = [*model, "--train_data_dir", "runs/images"]
    assert_option_error(capsys, r"argument --train_data_dir: no such folder: runs/images$", script.main, missing)
    if name == "train_text_to_image":  # a start for a fixed density, found once the scheduler is read
        argv = ["--pretrained_model_name_or_path", sd_model, "--noise_sampler", "uniform", "--infonoise_init", "profile", *out]
        assert_option_error(capsys, r"--infonoise_init profile: starts an InfoNoise sampler", script.main, argv)
        # a folder without images is found once the data is read (after the model, whose loading bars precede it):
        # an argparse-style error line and status 2 too, not a traceback
        with pytest.raises(SystemExit) as info:
            out_data = ["--output_dir", str(tmp_path / "out_data"), "--cache_dir", str(tmp_path / "cache")]
            script.main([*model[:2], *out_data, "--train_data_dir", "runs"])
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if ": error: " in line]
        assert info.value.code == 2 and "Traceback" not in err and len(errors) == 1, err
        assert re.search(r"error: --train_data_dir: runs holds no image datasets' imagefolder reads .*metadata\.jsonl", errors[0])
        assert not [p for p in (tmp_path / "out_data").rglob("*") if p.is_file()]  # the folder as accelerate made it: empty
    assert not (tmp_path / "out").exists()


def test_sd_sampler_defaults_and_min_snr_match_diffusers(sd_model):
    """No --noise_sampler: uniform t (diffusers' own draw). --snr_gamma: the sampler is told Min-SNR
    and the weight the loop applies is diffusers' min(SNR, γ)/SNR (ε) or /(SNR + 1) (v)."""
    from diffusers.training_utils import compute_snr

    args = sd_script.parse_args(["--pretrained_model_name_or_path", sd_model])
    sched = sd_script.load_noise_scheduler(args)
    sampler = sd_script.build_sampler(args, sched)
    assert sampler.name == "uniform" and sampler.objective.loss_weighting == "none"
    assert type(sched).__name__ == "DDPMScheduler" and sched.config.prediction_type == "epsilon"
    probs = sampler.timestep_probabilities()
    torch.testing.assert_close(probs, torch.full_like(probs, 1 / 1000))

    for prediction_type, divisor in (("epsilon", lambda snr: snr), ("v_prediction", lambda snr: snr + 1)):
        args = sd_script.parse_args(
            ["--pretrained_model_name_or_path", sd_model, "--snr_gamma", "5", "--prediction_type", prediction_type, *INFONOISE]
        )
        sched = sd_script.load_noise_scheduler(args)
        sampler = sd_script.build_sampler(args, sched)
        assert sampler.name == "infonoise" and sampler.objective.loss_weighting == "min_snr" and sampler.objective.snr_gamma == 5
        assert sampler.prediction_type == prediction_type == sched.config.prediction_type
        t = torch.tensor([0, 10, 100, 400, 999])
        snr = compute_snr(sched, t).double()
        expected = torch.minimum(snr, torch.full_like(snr, 5.0)) / divisor(snr)
        sigmas = sampler.path.sigmas_table[t]
        torch.testing.assert_close(sampler.objective.loss_weight(sigmas, sigma_data=sampler.sigma_data), expected, rtol=1e-5, atol=0)
        torch.testing.assert_close(
            sampler.objective.x0_loss_weight(sigmas, sigma_data=sampler.sigma_data),
            torch.minimum(snr, torch.full_like(snr, 5.0)),
            rtol=1e-5,
            atol=0,
        )


def test_sd_show_noise_schedule(sd_model, tmp_path, capsys):
    """A fine-tune starts from the model's profile (auto): --show_noise_schedule measures it on the data as the run
    would and shows it, saying so (issue 28: it showed the base density without a word), and trains nothing."""
    out = tmp_path / "show"
    argv = ["--pretrained_model_name_or_path", sd_model, "--output_dir", str(out), "--snr_gamma", "5", "--show_noise_schedule"]
    small = [*FAST, "--max_train_steps", "4", "--max_train_samples", "8"]
    result = sd_script.main([*argv, *small, *INFONOISE, "--infonoise_warmup_steps", "0"])
    assert result["sampler"].name == "infonoise" and result["sampler"].is_adapted and result["global_step"] == 0
    printed = capsys.readouterr().out
    assert "infonoise" in printed and "min_snr" in printed and "vp" in printed
    assert "shown: the profile start: the pretrained model's errors on the training data" in printed
    assert sorted(p.name for p in out.iterdir()) == ["noise_schedule.png"] and (out / "noise_schedule.png").stat().st_size > 0
    sd_script.main([*argv, *INFONOISE, "--infonoise_init", "base", "--output_dir", str(tmp_path / "base")])
    assert "shown: the base density (the warm-up's" in capsys.readouterr().out


@pytest.mark.slow
def test_sd_full_finetune_saves_pipeline_with_learned_schedule(sd_model, tmp_path):
    """Full fine-tuning on the built-in Fashion-MNIST captions with EMA, v-prediction, Min-SNR,
    offset noise and input perturbation; the saved pipeline reloads with stock diffusers."""
    from diffusers import DDPMScheduler, StableDiffusionPipeline

    from diffusers_infonoise import InfoNoiseTrainingTimestepSampler, read_schedule

    out = tmp_path / "sd_full"
    result = sd_script.main(
        [
            "--pretrained_model_name_or_path",
            sd_model,
            "--output_dir",
            str(out),
            "--dataset_name",
            "fashion_mnist",
            "--max_train_samples",
            "8",
            "--max_train_steps",
            "4",
            "--checkpointing_steps",
            "2",
            "--use_ema",
            "--prediction_type",
            "v_prediction",
            "--snr_gamma",
            "5",
            "--noise_offset",
            "0.1",
            "--input_perturbation",
            "0.1",
            "--validation_prompts",
            "a photo of a bag",
            "a photo of a dress",
            "--validation_epochs",
            "1",
            "--random_flip",
            *FAST,
            *INFONOISE,
        ]
    )
    assert result["global_step"] == 4 and len(result["step_times"]) == 4
    sampler = result["sampler"]
    assert sampler.is_adapted and sampler.optimizer_step == 4

    pipe = StableDiffusionPipeline.from_pretrained(str(out))
    assert isinstance(pipe.scheduler, DDPMScheduler)
    assert pipe.scheduler.config.prediction_type == "v_prediction"
    payload = read_schedule(pipe.scheduler)
    assert payload["prediction_type"] == "v_prediction" and payload["loss_weighting"] == "min_snr"
    assert payload["snr_gamma"] == 5 and payload["adapted"] and payload["optimizer_steps"] == 4
    # the stored schedule is the one training ended with, and fine-tuning can continue from it
    resumed = InfoNoiseTrainingTimestepSampler.from_scheduler(pipe.scheduler, loss_weighting="min_snr", snr_gamma=5, num_bins=16)
    torch.testing.assert_close(resumed.probs, sampler.probs)
    # the trained (EMA) UNet was saved, not the base one
    base_unet = StableDiffusionPipeline.from_pretrained(sd_model).unet
    assert any(not torch.equal(a, b) for a, b in zip(pipe.unet.parameters(), base_unet.parameters()))

    image = pipe("a photo of a bag", num_inference_steps=2, output_type="np", generator=torch.Generator().manual_seed(0)).images
    assert image.shape == (1, RESOLUTION, RESOLUTION, 3) and np.isfinite(image).all()

    tags, card = front_matter_tags(out / "README.md")
    assert {"text-to-image", "infonoise", "stable-diffusion"} <= set(tags) and "lora" not in tags
    assert "base_model:" not in card and "a photo of a dress" in card and "noise_schedule.png" in card  # a local folder
    assert f"`{sd_model}` (`StableDiffusionPipeline`; a local folder, not a Hub repo)" in card
    assert (out / "noise_schedule.png").exists() and (out / "validation.png").exists()
    assert list((out / "schedule").glob("schedule_*.png")) and list((out / "schedule").glob("drawn_levels_*.png"))
    assert (out / "checkpoint-2" / "unet").is_dir() and (out / "checkpoint-2" / "unet_ema").is_dir()
    tb = tensorboard_tags(str(out))
    assert "validation_final" in tb["images"]
    assert {"train_loss", "step_time_s", "infonoise/num_updates"} <= tb["scalars"]


@pytest.mark.slow
def test_sd_lora_from_image_folder(sd_model, tmp_path, caplog):
    """LoRA (peft) on an image folder with metadata.jsonl: the output holds the adapter and the
    training scheduler; stock diffusers loads both onto the base pipeline; the last log line says so."""
    from diffusers import DDPMScheduler, StableDiffusionPipeline
    from safetensors.torch import load_file

    data = write_captioned_image_folder(str(tmp_path / "images"), num_images=6)
    out = tmp_path / "sd_lora"
    with caplog.at_level(logging.INFO):
        result = sd_script.main(
            [
                "--pretrained_model_name_or_path",
                sd_model,
                "--output_dir",
                str(out),
                "--train_data_dir",
                data,
                "--use_lora",
                "--lora_rank",
                "4",
                "--max_train_steps",
                "3",
                "--checkpointing_steps",
                "100",
                "--learning_rate",
                "1e-2",
                "--report_to",
                "none",
                *FAST,
                *INFONOISE,
            ]
        )
    assert result["global_step"] == 3
    assert not (out / "unet").exists() and not (out / "model_index.json").exists()
    saved = [r.getMessage() for r in caplog.records if r.getMessage().startswith("saved in ")]
    files = "the LoRA adapter and scheduler/, noise_schedule.png, README.md (the model card)"
    assert saved == [f"saved in {out.resolve()}: {files}"]
    lora = load_file(str(out / "pytorch_lora_weights.safetensors"))
    assert lora and all(k.startswith("unet.") and "lora" in k for k in lora)
    assert any(float(v.abs().max()) > 0 for k, v in lora.items() if "lora_B" in k or "lora.up" in k)

    config, payload = scheduler_config_and_payload(str(out))
    assert config["_class_name"] == "DDPMScheduler" and config["prediction_type"] == "epsilon"
    assert payload["prediction_type"] == "epsilon" and payload["optimizer_steps"] == 3

    pipe = StableDiffusionPipeline.from_pretrained(sd_model)
    pipe.load_lora_weights(str(out))
    pipe.scheduler = DDPMScheduler.from_pretrained(str(out), subfolder="scheduler")
    assert "_infonoise_schedule" in pipe.scheduler.config
    image = pipe("a red dress", num_inference_steps=2, output_type="np").images
    assert image.shape == (1, RESOLUTION, RESOLUTION, 3) and np.isfinite(image).all()

    tags, _ = front_matter_tags(out / "README.md")
    assert {"text-to-image", "infonoise", "lora"} <= set(tags)


@pytest.mark.slow
def test_sd_resume_from_checkpoint_is_exact(sd_model, tmp_path):
    """Interrupted at step 2 and resumed: the sampler state, the UNet and the EMA at step 4 equal the
    uninterrupted run's (data order, augmentations, noise and level draws are all restored)."""
    from safetensors.torch import load_file

    common = [
        "--pretrained_model_name_or_path",
        sd_model,
        "--max_train_samples",
        "6",
        "--max_train_steps",
        "4",
        "--checkpointing_steps",
        "2",
        "--use_ema",
        "--random_flip",
        "--noise_offset",
        "0.05",
        "--report_to",
        "none",
        *FAST,
        *INFONOISE,
    ]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    sd_script.main([*common, "--output_dir", str(full)])
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-2", resumed / "checkpoint-2")
    result = sd_script.main([*common, "--output_dir", str(resumed), "--resume_from_checkpoint", "latest"])
    assert result["global_step"] == 4 and len(result["step_times"]) == 2  # 6 examples, batch 2: epoch 1 included
    assert_same_sampler_state(full / "checkpoint-4" / "noise_sampler" / "rank_0", resumed / "checkpoint-4" / "noise_sampler" / "rank_0")
    for sub in ("unet", "unet_ema"):
        a = load_file(str(full / "checkpoint-4" / sub / "diffusion_pytorch_model.safetensors"))
        b = load_file(str(resumed / "checkpoint-4" / sub / "diffusion_pytorch_model.safetensors"))
        assert all(torch.equal(a[k], b[k]) for k in a), sub


@pytest.mark.slow
def test_sd_resume_of_the_wrong_kind_ends_in_one_line(sd_model, tmp_path, capsys):
    """--use_ema on a checkpoint saved without EMA, or a LoRA checkpoint resumed without --use_lora, ended in
    diffusers' Hub-connection or missing-config messages (the missing folder was taken for a Hub id); --use_lora on
    a full fine-tune's checkpoint in peft's. Each is one line naming --resume_from_checkpoint, the folder and the option."""
    common = ["--pretrained_model_name_or_path", sd_model, "--max_train_samples", "4", "--checkpointing_steps", "1", "--report_to", "none"]
    common += [*FAST, *INFONOISE]
    full, lora = tmp_path / "full", tmp_path / "lora"
    sd_script.main([*common, "--output_dir", str(full), "--max_train_steps", "1"])
    sd_script.main([*common, "--output_dir", str(lora), "--max_train_steps", "1", "--use_lora"])
    for folder, extra, says in (
        (full, ["--use_ema"], r"--resume_from_checkpoint: \S*full/checkpoint-1 has no unet_ema: it was saved without --use_ema"),
        (full, ["--use_lora"], r"\S*full/checkpoint-1 has no pytorch_lora_weights.safetensors: it is not a LoRA checkpoint .*--use_lora"),
        (lora, [], r"--resume_from_checkpoint: \S*lora/checkpoint-1 has no unet: .*\(a LoRA checkpoint: pass --use_lora\)"),
    ):  # fmt: skip
        argv = [*common, "--output_dir", str(folder), "--max_train_steps", "2", "--resume_from_checkpoint", "latest", *extra]
        capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            sd_script.main(argv)
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if ": error: " in line]  # after the models' loading bars
        assert info.value.code == 2 and "Traceback" not in err and len(errors) == 1 and re.search(says, errors[0]), err


@pytest.mark.slow
def test_sd_two_processes_share_pi(sd_model, tmp_path):
    """``accelerate launch`` with two CPU processes (LoRA): both ranks hold the same π after every
    refresh, each draws from its own stream, and only the main process writes the outputs."""
    out = tmp_path / "ddp"
    log = accelerate_launch(
        ROOT / "training_scripts" / "train_text_to_image.py",
        "--pretrained_model_name_or_path",
        sd_model,
        "--output_dir",
        str(out),
        "--max_train_samples",
        "8",
        "--max_train_steps",
        "3",
        "--checkpointing_steps",
        "3",
        "--use_lora",
        "--validation_prompts",
        "a photo of a bag",
        *FAST,
        *INFONOISE,
    )
    assert sorted(refreshes_in_log(log, 2)) == [1, 2, 3], log[-5000:]
    ckpt = out / "checkpoint-3" / "noise_sampler"
    (t0, v0), (t1, v1) = sampler_state(ckpt / "rank_0"), sampler_state(ckpt / "rank_1")
    # one π and one stream position on both ranks (each rank's draws differ: its rank seeds them)
    assert torch.equal(t0["probs"], t1["probs"]) and v0["values"]["num_draws"] == v1["values"]["num_draws"] == 3
    _, payload = scheduler_config_and_payload(str(out))
    assert payload["optimizer_steps"] == 3 and payload["num_updates"] == 3
    assert (out / "pytorch_lora_weights.safetensors").is_file() and (out / "validation.png").is_file()
    events = list((out / "logs").rglob("events.out.tfevents.*"))
    assert events and len({e.name.rsplit(".", 2)[-2] for e in events}) == 1  # one writer process


def test_sd_min_snr_on_a_zero_terminal_snr_pipeline_trains_finite(sd_model, tmp_path, monkeypatch):
    """rescale_betas_zero_snr=True: the last step has SNR = 0, where Min-SNR's weight is 0·inf; with diffusers'
    convention (weight 1 there) every step is applied and the saved UNet is finite. Every batch here holds
    that step (t = 999, σ = inf)."""
    import shutil

    from safetensors.torch import load_file

    build = sd_script.build_sampler

    def with_last_step(args, sched):
        sampler = build(args, sched)
        draw = sampler.sample

        def sample(n, **kw):
            levels = draw(n, **kw)
            levels.timesteps[0], levels.sigmas[0], levels.log_snr[0] = 999, math.inf, -math.inf
            return levels

        sampler.sample = sample
        return sampler

    monkeypatch.setattr(sd_script, "build_sampler", with_last_step)

    model = tmp_path / "zero_snr"
    shutil.copytree(sd_model, model)
    cfg_path = model / "scheduler" / "scheduler_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(rescale_betas_zero_snr=True)  # with the pipeline's ε prediction, as in the reported failure
    cfg_path.write_text(json.dumps(cfg))
    out = tmp_path / "out"
    result = sd_script.main(
        [
            "--pretrained_model_name_or_path",
            str(model),
            "--output_dir",
            str(out),
            "--snr_gamma",
            "5",
            "--dataset_name",
            "fashion_mnist",
            "--max_train_samples",
            "8",
            "--max_train_steps",
            "3",
            *FAST,
            "--noise_sampler",
            "uniform",
        ]
    )
    assert result["global_step"] == 3
    weights = load_file(out / "unet" / "diffusion_pytorch_model.safetensors")
    assert all(bool(torch.isfinite(w).all()) for w in weights.values())


def test_sd_lora_at_batch_one_adapts_from_the_base_density(sd_model, tmp_path):
    """The common LoRA fine-tune, started from the base density (``--infonoise_init base``): batch 1, every other
    InfoNoise default (warm-up a tenth of the run but at least one refresh of 50 steps, 64 bins, min count 8). The
    carry-over fills the bins across refreshes: π adapts within the run, every sample reached the statistics, and
    the cap is the latents' variance."""
    out = tmp_path / "lora1"
    result = sd_script.main(
        [
            "--pretrained_model_name_or_path",
            sd_model,
            "--output_dir",
            str(out),
            "--dataset_name",
            "fashion_mnist",
            "--max_train_samples",
            "16",
            "--resolution",
            str(RESOLUTION),
            "--train_batch_size",
            "1",
            "--seed",
            "0",
            "--lr_warmup_steps",
            "0",
            "--max_train_steps",
            "200",
            "--checkpointing_steps",
            "1000",
            "--use_lora",
            "--report_to",
            "none",
            "--schedule_plot_steps",
            "-1",
            "--noise_sampler",
            "infonoise",
            "--infonoise_init",
            "base",
        ]
    )
    sampler = result["sampler"]
    assert sampler.warmup_steps == 50 and sampler.is_adapted
    assert float(sampler.estimator.total_counts.sum()) == 200
    _, payload = scheduler_config_and_payload(str(out))
    assert payload["adapted"] and payload["hyperparameters"]["mmse_cap"] == pytest.approx(sampler.data.variance)
    assert payload["tv_phi_rho"] <= 0.05 + 1e-6


def test_sd_lora_by_default_starts_from_the_pretrained_models_profile(sd_model, tmp_path, caplog):
    """The default start of a fine-tune (``auto``; issue 22): the pretrained model's errors on the training latents,
    before step 1, within 5% of the run's compute (a 40-step run at batch 1 affords 2 samples a bin, by hand:
    max(2, int(0.05·3·40·1/64)) = 2); no warm-up, π adapted from the first step, the card says so."""

    out = tmp_path / "lora_profile"
    with caplog.at_level(logging.INFO):
        result = sd_script.main(
            [
                "--pretrained_model_name_or_path",
                sd_model,
                "--output_dir",
                str(out),
                "--dataset_name",
                "fashion_mnist",
                "--max_train_samples",
                "16",
                "--resolution",
                str(RESOLUTION),
                "--train_batch_size",
                "1",
                "--seed",
                "0",
                "--lr_warmup_steps",
                "0",
                "--max_train_steps",
                "40",
                "--checkpointing_steps",
                "1000",
                "--use_lora",
                "--report_to",
                "none",
                "--schedule_plot_steps",
                "-1",
                "--noise_sampler",
                "infonoise",
            ]
        )
    sampler = result["sampler"]
    assert sampler.warmup_steps == 0 and sampler.is_adapted
    # 5% of 40 steps x batch 1 is 2 forward-pass samples, under one a bin, so the floor holds: 1 level in each of
    # the 64 log-sigma bins that hold a step of SD's 1000-step table (by hand from its ᾱ)
    abar = np.asarray(sampler.path.alphas_cumprod, dtype=np.float64)
    log_sig = 0.5 * np.log((1 - abar) / abar)
    edges = np.linspace(*sampler.path.log_sigma_range, 65)
    n = 1 * len(np.unique(np.clip(np.searchsorted(edges[1:-1], log_sig, side="right"), 0, 63)))
    assert "init 'auto': a pretrained model is given" in caplog.text and f"{n} forward passes" in caplog.text
    est = sampler.estimator
    assert float(est.total_counts.sum()) == n  # the profile's samples, folded at its refresh
    assert float((est.merged_counts + est.counts).sum()) == 40  # the run's, open until its first refresh (step 50)
    _, payload = scheduler_config_and_payload(str(out))
    assert payload["warmup_steps_resolved"] == 0 and payload["tv_phi_rho"] <= 0.05 + 1e-6
    assert "InfoNoise start | profile" in (out / "README.md").read_text()
