"""training_scripts/train_text_to_image_sdxl.py end to end on a tiny offline SDXL pipeline: two text
encoders and pooled embeddings, micro-conditioning from the data transform, ε or v with Min-SNR, the
learned schedule in the saved scheduler, LoRA weights through diffusers' own ``load_lora_weights``."""

from __future__ import annotations

import json
import os

import pytest
import torch

from benchmarks.tiny_pipelines import RESOLUTION, save_tiny_sdxl_pipeline, write_captioned_image_folder

from helpers.scripts import load_training_script
from helpers.text_to_image import FAST as SHARED_FAST
from helpers.text_to_image import INFONOISE

sdxl_script = load_training_script("train_text_to_image_sdxl")

FAST = [*SHARED_FAST, "--report_to", "none"]


pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")


@pytest.fixture(scope="module")
def sdxl_model(tmp_path_factory):
    return save_tiny_sdxl_pipeline(str(tmp_path_factory.mktemp("tiny_sdxl") / "model"))


def test_micro_conditioning_comes_from_the_transform(tmp_path):
    """20x24 images resized to the shorter side 16 are 16x19 (round(24·0.8)): the original size is
    (20, 24), the center crop's corner (0, 1), the target (16, 16)."""
    from diffusers_infonoise.training import DataConfig, captioned_dataloader

    folder = write_captioned_image_folder(str(tmp_path / "imgs"), num_images=4, size=20)
    data = DataConfig(train_data_dir=folder, caption_column="text", resolution=RESOLUTION, center_crop=True, train_batch_size=2)
    loader, _, _ = captioned_dataloader(data)
    batch = next(iter(loader))
    assert batch["original_sizes"] == [(20, 24), (20, 24)] and batch["crop_top_lefts"] == [(0, 1), (0, 1)]
    ids = sdxl_script.time_ids(batch, RESOLUTION, "cpu")
    assert ids.tolist() == [[20, 24, 0, 1, 16, 16]] * 2
    # a random crop and flip stay inside the resized image, the flip mirroring the corner
    flipped = DataConfig(train_data_dir=folder, caption_column="text", resolution=RESOLUTION, random_flip=True, train_batch_size=4, seed=3)
    corners = [c for b in captioned_dataloader(flipped)[0] for c in b["crop_top_lefts"]]
    assert all(top == 0 and 0 <= left <= 3 for top, left in corners)


def test_sdxl_lora_v_prediction_min_snr_trains_and_loads(sdxl_model, tmp_path):
    from diffusers import DDPMScheduler, StableDiffusionXLPipeline
    from safetensors.torch import load_file

    out = tmp_path / "lora"
    result = sdxl_script.main(
        [
            "--pretrained_model_name_or_path",
            sdxl_model,
            "--output_dir",
            str(out),
            "--use_lora",
            "--dataset_name",
            "fashion_mnist",
            "--max_train_samples",
            "8",
            "--max_train_steps",
            "3",
            "--checkpointing_steps",
            "1000",
            "--learning_rate",
            "1e-3",
            "--prediction_type",
            "v_prediction",
            "--snr_gamma",
            "5",
            "--validation_prompts",
            "a photo of a bag",
            *FAST,
            *INFONOISE,
        ]
    )
    sampler = result["sampler"]
    assert (sampler.prediction_type, sampler.objective.loss_weighting, sampler.objective.snr_gamma) == ("v_prediction", "min_snr", 5.0)
    saved = DDPMScheduler.from_pretrained(out / "scheduler")
    payload = saved.config["_infonoise_schedule"]
    assert saved.config.prediction_type == "v_prediction" and payload["adapted"] and payload["optimizer_steps"] == 3
    # the m̂ cap is the variance of the VAE latents the run trained on
    assert payload["hyperparameters"]["mmse_cap"] == pytest.approx(sampler.data.variance) and sampler.data.variance > 0
    assert (out / "validation.png").is_file() and "StableDiffusionXLPipeline" in (out / "README.md").read_text()

    pipe = StableDiffusionXLPipeline.from_pretrained(sdxl_model)
    pipe.load_lora_weights(str(out))
    assert load_file(str(out / "pytorch_lora_weights.safetensors"))
    lora_b = [v for k, v in pipe.unet.state_dict().items() if "lora_B" in k]
    assert lora_b and any(float(v.abs().max()) > 0 for v in lora_b)  # trained, not the zero init
    images = pipe("a photo of a bag", height=RESOLUTION, width=RESOLUTION, num_inference_steps=2, output_type="pt").images
    assert images.shape == (1, 3, RESOLUTION, RESOLUTION) and bool(torch.isfinite(images).all())


def test_sdxl_full_finetune_saves_the_training_scheduler(sdxl_model, tmp_path):
    from diffusers import StableDiffusionXLPipeline

    out = tmp_path / "full"
    sdxl_script.main(
        [
            "--pretrained_model_name_or_path",
            sdxl_model,
            "--output_dir",
            str(out),
            "--dataset_name",
            "digits",
            "--max_train_samples",
            "8",
            "--max_train_steps",
            "2",
            "--checkpointing_steps",
            "1000",
            "--noise_offset",
            "0.05",
            *FAST,
            *INFONOISE,
        ]
    )
    pipe = StableDiffusionXLPipeline.from_pretrained(str(out))
    assert type(pipe.scheduler).__name__ == "DDPMScheduler"
    with open(os.path.join(out, "scheduler", "scheduler_config.json")) as f:
        assert json.load(f)["_infonoise_schedule"]["optimizer_steps"] == 2
    # without --noise_sampler the run is diffusers' own: uniform t
    again = sdxl_script.main(
        [
            "--pretrained_model_name_or_path",
            sdxl_model,
            "--output_dir",
            str(tmp_path / "b"),
            "--dataset_name",
            "digits",
            "--max_train_samples",
            "4",
            "--max_train_steps",
            "1",
            *FAST,
        ]
    )
    assert again["sampler"].name == "uniform"
