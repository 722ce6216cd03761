"""training_scripts/train_text_to_image_flux.py end to end on a tiny offline Flux pipeline (guidance
embedding, dynamic-shift scheduler): LoRA and full fine-tuning, the learned schedule in the saved
scheduler, LoRA weights through diffusers' own ``load_lora_weights``, sampling with diffusers' own
``FluxPipeline.__call__``, and a two-process run."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from benchmarks.tiny_pipelines import RESOLUTION, save_tiny_flux_pipeline

from helpers import ROOT
from helpers.launch import accelerate_launch, refreshes_in_log
from helpers.scripts import load_training_script
from helpers.text_to_image import FAST as SHARED_FAST
from helpers.text_to_image import INFONOISE

flux_script = load_training_script("train_text_to_image_flux")

FAST = [*SHARED_FAST, "--max_sequence_length", "16", "--dataset_name", "fashion_mnist", "--max_train_samples", "8", "--report_to", "none"]


pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


@pytest.fixture(scope="module")
def flux_model(tmp_path_factory):
    return save_tiny_flux_pipeline(str(tmp_path_factory.mktemp("tiny_flux") / "model"))


def _payload(folder) -> dict:
    with open(os.path.join(folder, "scheduler", "scheduler_config.json")) as f:
        return json.load(f)["_infonoise_schedule"]


def test_flux_lora_trains_stores_the_schedule_and_loads_in_diffusers(flux_model, tmp_path):
    from diffusers import FluxPipeline

    out = tmp_path / "lora"
    result = flux_script.main(
        [
            "--pretrained_model_name_or_path",
            flux_model,
            "--output_dir",
            str(out),
            "--use_lora",
            "--max_train_steps",
            "3",
            "--checkpointing_steps",
            "1000",
            "--learning_rate",
            "1e-3",
            "--validation_prompts",
            "a photo of a bag",
            *FAST,
            *INFONOISE,
        ]
    )
    sampler = result["sampler"]
    assert sampler.prediction_type == "flow" and sampler.objective.loss_weighting == "none"
    # diffusers' Flux scripts train on the unshifted table: the path of mu = 0, shift 1
    assert sampler.path.shift == 1.0
    payload = _payload(out)
    assert payload["adapted"] and payload["optimizer_steps"] == 3 and payload["path"]["shift"] == 1.0
    assert all(math.isfinite(float(v)) for v in sampler.estimator.m_hat[~torch.isnan(sampler.estimator.m_hat)])
    assert (out / "pytorch_lora_weights.safetensors").is_file() and (out / "validation.png").is_file()
    card = (out / "README.md").read_text()
    assert "FluxPipeline" in card and "lora" in card and "https://github.com/)" not in card

    # diffusers' own loader takes the adapter, its own __call__ samples, and the scheduler reloads the schedule
    from safetensors.torch import load_file

    pipe = FluxPipeline.from_pretrained(flux_model)
    pipe.load_lora_weights(str(out))
    saved = load_file(str(out / "pytorch_lora_weights.safetensors"))
    loaded = {k: v for k, v in pipe.transformer.state_dict().items() if "lora_B" in k}
    assert saved and loaded and any(float(v.abs().max()) > 0 for v in loaded.values())  # trained, not the zero init
    images = pipe(
        "a photo of a bag",
        height=RESOLUTION,
        width=RESOLUTION,
        num_inference_steps=2,
        max_sequence_length=16,
        output_type="pt",
        generator=torch.Generator().manual_seed(0),
    ).images
    assert images.shape == (1, 3, RESOLUTION, RESOLUTION) and bool(torch.isfinite(images).all())
    from diffusers import FlowMatchEulerDiscreteScheduler

    from diffusers_infonoise.diagnostics import load_learned_sampler

    stored = load_learned_sampler(FlowMatchEulerDiscreteScheduler.from_pretrained(out / "scheduler"))
    assert torch.equal(stored.probs, sampler.probs)


def test_flux_full_finetune_with_a_loss_weighting_and_a_training_mu(flux_model, tmp_path):
    from diffusers import FluxPipeline

    out = tmp_path / "full"
    result = flux_script.main(
        [
            "--pretrained_model_name_or_path",
            flux_model,
            "--output_dir",
            str(out),
            "--max_train_steps",
            "2",
            "--checkpointing_steps",
            "1000",
            "--weighting_scheme",
            "cosmap",
            "--training_mu",
            "0.5",
            *FAST,
            *INFONOISE,
        ]
    )
    sampler = result["sampler"]
    assert sampler.objective.loss_weighting == "cosmap" and sampler.path.shift == pytest.approx(math.exp(0.5))
    pipe = FluxPipeline.from_pretrained(str(out))
    assert pipe.scheduler.config["_infonoise_schedule"]["optimizer_steps"] == 2
    # without --noise_sampler the run draws as diffusers' script does: uniform s for cosmap
    again = flux_script.main(
        [
            "--pretrained_model_name_or_path",
            flux_model,
            "--output_dir",
            str(tmp_path / "b"),
            "--max_train_steps",
            "1",
            "--weighting_scheme",
            "cosmap",
            *FAST,
        ]
    )
    assert again["sampler"].name == "uniform"


def test_flux_refuses_conflicting_options(flux_model, tmp_path, capsys):
    base = ["--pretrained_model_name_or_path", flux_model, "--output_dir", str(tmp_path)]
    # issue 20: --lora_alpha 0 trained nothing and exited 0; --max_sequence_length 0 was taken
    for bad, message in (
        (["--use_lora", "--lora_alpha", "0"], "--lora_alpha: expected a finite number > 0"),
        (["--max_sequence_length", "0"], "--max_sequence_length: expected an integer >= 1"),
    ):
        with pytest.raises(SystemExit):
            flux_script.parse_args([*base, *bad])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        flux_script.parse_args([*base, "--snr_gamma", "5"])
    with pytest.raises(SystemExit):
        flux_script.parse_args([*base, "--resolution", "20"])
    with pytest.raises(SystemExit):
        flux_script.parse_args([*base, "--weighting_scheme", "mode", "--noise_sampler", "logit_normal"])


def test_flux_lora_two_processes_share_pi(flux_model, tmp_path):
    out = tmp_path / "ddp"
    log = accelerate_launch(
        ROOT / "training_scripts" / "train_text_to_image_flux.py",
        "--pretrained_model_name_or_path",
        flux_model,
        "--output_dir",
        str(out),
        "--use_lora",
        "--max_train_steps",
        "2",
        "--checkpointing_steps",
        "2",
        *FAST,
        *INFONOISE,
    )
    assert sorted(refreshes_in_log(log, 2)) == [1, 2], log[-5000:]
    assert _payload(out)["optimizer_steps"] == 2
    assert (out / "checkpoint-2" / "noise_sampler" / "rank_1").is_dir()
