#!/usr/bin/env python
"""Fine-tune Stable Diffusion XL (VP) for text-to-image, full or LoRA, with an InfoNoise training-noise
schedule.

diffusers' ``examples/text_to_image/train_text_to_image_sdxl.py`` (and ``_lora_sdxl.py`` with
``--use_lora``) on the training layer:

* two text encoders: the penultimate hidden states of CLIP-L and CLIP-G concatenated, and CLIP-G's
  pooled projection (``StableDiffusionXLPipeline.encode_prompt``);
* micro-conditioning: ``time_ids = (original_size, crops_coords_top_left, target_size)`` per image,
  the original size and crop corner as the data transform made them, the target size the
  training resolution;
* ε or v prediction (``--prediction_type``, default the scheduler's), ``--snr_gamma`` (Min-SNR-γ, the
  sampler is told), ``--noise_offset`` and ``--input_perturbation`` in diffusers' meaning;
* ``--noise_sampler`` unset: uniform t (diffusers' own); ``infonoise``: the learned schedule, whose
  m̂ cap is the variance of the VAE latents trained on (measured through ``sampler.add_noise``).

Validation images sample with the base model's inference scheduler (Euler for SDXL). The saved
pipeline's scheduler is the *training* ``DDPMScheduler``, with the trained ``prediction_type`` and
the learned schedule, as in ``train_text_to_image.py``; LoRA runs save the adapter and that
scheduler in ``scheduler/``.
"""

from __future__ import annotations

import argparse
import sys

import torch
from accelerate.logging import get_logger
from diffusers import AutoencoderKL, EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

from diffusers_infonoise import training
from diffusers_infonoise.generation import model_output

logger = get_logger(__name__, log_level="INFO")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Fine-tune Stable Diffusion XL (text-to-image) with InfoNoise.",
        epilog=training.script_epilog("train_text_to_image_sdxl"),
    )
    training.add_text_to_image_args(
        parser, defaults={"resolution": 1024, "output_dir": "sdxl-model-finetuned-infonoise", "validation_inference_steps": 25}
    )
    training.add_vp_args(parser, family="Stable Diffusion XL")
    args = parser.parse_args(argv)
    training.check_text_to_image_args(parser, args)
    return args


load_noise_scheduler = training.load_vp_scheduler  # DDPMScheduler from the model, --prediction_type registered
build_sampler = training.build_vp_sampler  # told the loss: the parameterization and --snr_gamma's Min-SNR


def time_ids(batch, resolution: int, device) -> torch.Tensor:
    """(B, 6) SDXL micro-conditioning: original (h, w), crop top-left (top, left), target (R, R)."""
    rows = [[*orig, *corner, resolution, resolution] for orig, corner in zip(batch["original_sizes"], batch["crop_top_lefts"])]
    return torch.tensor(rows, dtype=torch.float32, device=device)


def loss_and_pipeline(args, run):
    """``(compute_loss, pipeline)``: the loss ``compute_loss(batch, levels)`` on the run's UNet and the one in-memory
    pipeline it encodes prompts with (and validation draws images from)."""
    sampler, noise_scheduler, vae, unet = run.sampler, run.noise_scheduler, run.parts["vae"], run.model

    # one in-memory pipeline: prompt encoding for training, images for validation (the base model's scheduler)
    pipeline = StableDiffusionXLPipeline(
        **run.parts,
        unet=run.unwrapped,
        scheduler=EulerDiscreteScheduler.from_pretrained(args.pretrained_model_name_or_path, subfolder="scheduler", revision=args.revision),
    )

    def compute_loss(batch, levels):
        with torch.no_grad():
            latents = training.encode_latents(vae, batch["pixel_values"]).to(run.weight_dtype)
            prompt_embeds, _, pooled_embeds, _ = pipeline.encode_prompt(
                batch["captions"], device=run.device, num_images_per_prompt=1, do_classifier_free_guidance=False
            )
        noise, model_noise = training.vp_noise(latents, noise_offset=args.noise_offset, input_perturbation=args.input_perturbation)
        noisy = sampler.add_noise(latents, model_noise, levels)
        conditions = {"text_embeds": pooled_embeds, "time_ids": time_ids(batch, args.resolution, run.device).to(run.weight_dtype)}
        pred = model_output(
            unet,
            noise_scheduler,
            noisy,
            levels.timesteps,
            model_kwargs={"encoder_hidden_states": prompt_embeds, "added_cond_kwargs": conditions},
        )
        return training.per_sample_mse(pred, training.training_target(sampler, noise_scheduler, latents, noise, levels))

    return compute_loss, pipeline


def main(argv=None) -> dict:
    """Train; returns ``{"global_step", "step_times", "total_batch_size", "sampler"}``."""
    args = parse_args(argv)
    with training.option_errors():  # a mistake in the options ends in one line, as argparse's do
        noise_scheduler = load_noise_scheduler(args)
        sampler = build_sampler(args, noise_scheduler)
        start = training.sampler_start(args, sampler, noise_scheduler, pretrained_model=True)
    run = training.setup_text_to_image_run(
        training.text_to_image_config(args),
        noise_scheduler=noise_scheduler,
        sampler=sampler,
        start=start,
        parts={
            "tokenizer": CLIPTokenizer,
            "tokenizer_2": CLIPTokenizer,
            "text_encoder": CLIPTextModel,
            "text_encoder_2": CLIPTextModelWithProjection,
            "vae": AutoencoderKL,
            "unet": UNet2DConditionModel,
        },
        trained="unet",
        lora_targets=training.UNET_LORA_TARGETS,
        pipeline_cls=StableDiffusionXLPipeline,
        tracker_project="text2image-fine-tune-sdxl-infonoise",
    )
    if run.showing:  # --show_noise_schedule: the schedule is shown (a profile start measured with the loss first), nothing is trained
        return run.show(lambda: loss_and_pipeline(args, run)[0])
    compute_loss, pipeline = loss_and_pipeline(args, run)

    sample_kwargs = {"height": args.resolution, "width": args.resolution}
    return run.finish(
        run.train(compute_loss, pipeline, **sample_kwargs),
        pipeline=pipeline,
        validation_kwargs=sample_kwargs,
        card={
            "base_model": args.pretrained_model_name_or_path,
            "pipeline_class": "StableDiffusionXLPipeline",
            "family": "stable-diffusion-xl",
            "license": "openrail++",
            "extra_tags": ["stable-diffusion-xl", "stable-diffusion-xl-diffusers"],
            "details": training.vp_card_details(
                ema=run.ema,
                noise_offset=args.noise_offset,
                input_perturbation=args.input_perturbation,
                **{"micro-conditioning": "original size, crop, target size"},
            ),
        },
    )


if __name__ == "__main__":
    main()
    sys.exit(0)
