"""End-to-end tests of training_scripts/train_text_to_image_sd3.py (SD3, rectified flow), offline: diffusers'
``--weighting_scheme`` and ``--precondition_outputs``, ``--logit_mean`` in diffusers' meaning, full and LoRA
fine-tuning with the learned schedule saved and reloaded. Tiny random pipelines (benchmarks/tiny_pipelines.py);
every value compared against is computed independently (diffusers' own SD3 weighting functions, the
scheduler config on disk, stock diffusers pipelines loading the outputs)."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

from benchmarks.tiny_pipelines import RESOLUTION, save_tiny_sd3_pipeline

from helpers.scripts import load_training_script
from helpers.text_to_image import (
    FAST,
    INFONOISE,
    assert_same_sampler_state,
    front_matter_tags,
    tensorboard_tags,
)

sd3_script = load_training_script("train_text_to_image_sd3")

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


@pytest.fixture(scope="module")
def sd3_model(tmp_path_factory):
    return save_tiny_sd3_pipeline(str(tmp_path_factory.mktemp("tiny_sd3") / "model"))


# ----------------------------------------------------------------------------------------------
# Stable Diffusion 3 (rectified flow)
# ----------------------------------------------------------------------------------------------

# scheme → (sampler drawn without --noise_sampler, loss weighting the sampler is told)
SD3_SCHEMES = {
    "logit_normal": ("logit_normal", "none"),
    "mode": ("mode", "none"),
    "none": ("uniform", "none"),
    "sigma_sqrt": ("uniform", "sigma_sqrt"),
    "cosmap": ("uniform", "cosmap"),
}


@pytest.mark.parametrize("scheme", list(SD3_SCHEMES))
def test_sd3_weighting_scheme(sd3_model, tmp_path, scheme, capsys):
    """Each --weighting_scheme: diffusers' loss weight u(s) (compute_loss_weighting_for_sd3), the
    x0-space weight the sampler is told (u on the x0 loss, u/s² on the velocity loss; METHOD.md §4),
    the scheduler's shift, and --show_noise_schedule."""
    from diffusers.training_utils import compute_loss_weighting_for_sd3

    expected_sampler, expected_weighting = SD3_SCHEMES[scheme]
    s = torch.tensor([0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99], dtype=torch.float64)
    sigmas = s / (1 - s)
    u = compute_loss_weighting_for_sd3(scheme, sigmas=s).double()
    for precondition, prediction_type, x0_factor in (("1", "sample", torch.ones_like(s)), ("0", "flow", s**2)):
        args = sd3_script.parse_args(
            ["--pretrained_model_name_or_path", sd3_model, "--weighting_scheme", scheme, "--precondition_outputs", precondition]
        )
        sampler = sd3_script.build_sampler(args, sd3_script.load_noise_scheduler(args))
        assert (sampler.name, sampler.objective.loss_weighting, sampler.prediction_type) == (
            expected_sampler,
            expected_weighting,
            prediction_type,
        )
        assert sampler.path.kind == "flow" and sampler.path.shift == 3.0
        torch.testing.assert_close(sampler.objective.loss_weight(sigmas, sigma_data=sampler.sigma_data), u, rtol=1e-6, atol=0)
        torch.testing.assert_close(
            sampler.objective.x0_loss_weight(sigmas, sigma_data=sampler.sigma_data), u / x0_factor, rtol=1e-6, atol=0
        )
    out = tmp_path / scheme
    result = sd3_script.main(
        ["--pretrained_model_name_or_path", sd3_model, "--weighting_scheme", scheme, "--output_dir", str(out), "--show_noise_schedule"]
    )
    assert result["sampler"].name == expected_sampler
    assert "flow" in capsys.readouterr().out and (out / "noise_schedule.png").exists()


def test_sd3_noise_sampler_and_weighting_scheme_together(sd3_model):
    """InfoNoise starts from the scheme's density with its parameters; a fixed sampler that contradicts
    an explicit density scheme is refused; Min-SNR is refused on the flow path."""

    def build(*extra):
        args = sd3_script.parse_args(["--pretrained_model_name_or_path", sd3_model, *extra])
        return sd3_script.build_sampler(args, sd3_script.load_noise_scheduler(args))

    assert build("--noise_sampler", "infonoise").base_description == {"name": "logit_normal", "mean": 0.0, "std": 1.0}
    sampler = build("--noise_sampler", "infonoise", "--weighting_scheme", "mode", "--mode_scale", "0.5")
    assert sampler.base_description == {"name": "mode", "scale": 0.5}
    sampler = build("--noise_sampler", "infonoise", "--weighting_scheme", "cosmap", "--precondition_outputs", "0")
    assert sampler.base_description == {"name": "uniform"} and sampler.objective.loss_weighting == "cosmap"
    assert sampler.prediction_type == "flow"
    sampler = build("--noise_sampler", "infonoise", "--infonoise_base", "logit_normal", "--logit_mean", "0.5")
    assert sampler.base_description == {"name": "logit_normal", "mean": -0.5, "std": 1.0}  # diffusers' sign
    # a fixed sampler wins over the default scheme, and a loss-weight scheme combines with it
    assert build("--noise_sampler", "edm_lognormal").name == "edm_lognormal"
    sampler = build("--noise_sampler", "log_uniform", "--weighting_scheme", "sigma_sqrt")
    assert (sampler.name, sampler.objective.loss_weighting) == ("log_uniform", "sigma_sqrt")
    assert build("--noise_sampler", "mode", "--weighting_scheme", "mode").name == "mode"
    for bad in (["--noise_sampler", "logit_normal", "--weighting_scheme", "mode"], ["--snr_gamma", "5"]):
        with pytest.raises(SystemExit):
            sd3_script.parse_args(["--pretrained_model_name_or_path", sd3_model, *bad])


def test_sd3_logit_mean_keeps_diffusers_meaning_positive_is_less_noise(sd3_model):
    """Our --logit_mean keeps diffusers' meaning (positive: less noise; issue 20: the same flags gave
    mean s 0.846 here and 0.156 in diffusers), and the shift translates it: on SD3's shift-3 scheduler
    logit-normal(0, 1) has its median at σ = 3 (s = 0.75)."""
    medians = {}
    for mean in (-1.0, 0.0, 1.0):
        args = sd3_script.parse_args(["--pretrained_model_name_or_path", sd3_model, "--logit_mean", str(mean)])
        sampler = sd3_script.build_sampler(args, sd3_script.load_noise_scheduler(args))
        levels = sampler.sample(20000, generator=torch.Generator().manual_seed(0))
        s = levels.timesteps.double() / 1000
        torch.testing.assert_close(s, levels.sigmas.double() / (1 + levels.sigmas.double()), rtol=1e-5, atol=1e-6)
        medians[mean] = float(levels.sigmas.double().median())
    assert medians[1.0] < medians[0.0] < medians[-1.0]
    assert abs(math.log(medians[0.0] / 3.0)) < 0.05
    assert abs(math.log(medians[1.0] / (3.0 / math.e))) < 0.05


@pytest.mark.slow
def test_sd3_full_finetune_saves_pipeline_with_learned_schedule(sd3_model, tmp_path):
    """SD3 full fine-tuning, velocity loss with sigma_sqrt weighting, InfoNoise; the saved
    StableDiffusion3Pipeline reloads with stock diffusers and generates."""
    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline

    from diffusers_infonoise import read_schedule

    out = tmp_path / "sd3_full"
    result = sd3_script.main(
        [
            "--pretrained_model_name_or_path",
            sd3_model,
            "--output_dir",
            str(out),
            "--max_train_samples",
            "8",
            "--max_train_steps",
            "3",
            "--checkpointing_steps",
            "100",
            "--weighting_scheme",
            "sigma_sqrt",
            "--precondition_outputs",
            "0",
            "--max_sequence_length",
            "16",
            "--validation_prompts",
            "a photo of a coat",
            *FAST,
            *INFONOISE,
        ]
    )
    assert result["global_step"] == 3 and result["sampler"].is_adapted
    pipe = StableDiffusion3Pipeline.from_pretrained(str(out))
    assert isinstance(pipe.scheduler, FlowMatchEulerDiscreteScheduler) and pipe.scheduler.config.shift == 3.0
    payload = read_schedule(pipe.scheduler)
    assert payload["prediction_type"] == "flow" and payload["loss_weighting"] == "sigma_sqrt"
    assert payload["path"]["shift"] == 3.0 and payload["adapted"] and payload["optimizer_steps"] == 3
    base = StableDiffusion3Pipeline.from_pretrained(sd3_model).transformer
    assert any(not torch.equal(a, b) for a, b in zip(pipe.transformer.parameters(), base.parameters()))
    image = pipe("a photo of a coat", num_inference_steps=2, output_type="np", max_sequence_length=16).images
    assert image.shape == (1, RESOLUTION, RESOLUTION, 3) and np.isfinite(image).all()
    tags, card = front_matter_tags(out / "README.md")
    assert {"text-to-image", "infonoise", "sd3"} <= set(tags) and "lora" not in tags
    assert "sigma_sqrt" in card and "validation.png" in card
    assert "validation_final" in tensorboard_tags(str(out))["images"]


@pytest.mark.slow
def test_sd3_lora_resume_and_reload(sd3_model, tmp_path):
    """SD3 LoRA with the default scheme (logit-normal base, x0 loss): resuming from checkpoint-2 gives
    the uninterrupted run's sampler state and adapter; the adapter and scheduler load onto the base."""
    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline
    from safetensors.torch import load_file

    common = [
        "--pretrained_model_name_or_path",
        sd3_model,
        "--max_train_samples",
        "6",
        "--max_train_steps",
        "4",
        "--checkpointing_steps",
        "2",
        "--use_lora",
        "--lora_rank",
        "2",
        "--learning_rate",
        "1e-2",
        "--max_sequence_length",
        "16",
        "--report_to",
        "none",
        *FAST,
        *INFONOISE,
    ]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    result = sd3_script.main([*common, "--output_dir", str(full)])
    assert result["sampler"].prediction_type == "sample"
    assert result["sampler"].base_description["name"] == "logit_normal"
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-2", resumed / "checkpoint-2")
    sd3_script.main([*common, "--output_dir", str(resumed), "--resume_from_checkpoint", "checkpoint-2"])
    assert_same_sampler_state(full / "checkpoint-4" / "noise_sampler" / "rank_0", resumed / "checkpoint-4" / "noise_sampler" / "rank_0")
    a = load_file(str(full / "pytorch_lora_weights.safetensors"))
    b = load_file(str(resumed / "pytorch_lora_weights.safetensors"))
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert all(k.startswith("transformer.") for k in a)

    pipe = StableDiffusion3Pipeline.from_pretrained(sd3_model)
    pipe.load_lora_weights(str(full))
    pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(str(full), subfolder="scheduler")
    assert pipe.scheduler.config["_infonoise_schedule"]["prediction_type"] == "sample"
    image = pipe("a photo of a bag", num_inference_steps=2, output_type="np", max_sequence_length=16).images
    assert image.shape == (1, RESOLUTION, RESOLUTION, 3) and np.isfinite(image).all()
    tags, _ = front_matter_tags(full / "README.md")
    assert {"text-to-image", "infonoise", "lora", "sd3"} <= set(tags)
