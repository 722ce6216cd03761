#!/usr/bin/env python
"""Fine-tune Stable Diffusion (1.x / 2.x, VP) for text-to-image with an InfoNoise training-noise schedule.

diffusers' ``examples/text_to_image/train_text_to_image.py`` (and ``train_text_to_image_lora.py``
with ``--use_lora``), with the training timesteps drawn by a noise sampler:

* ``--noise_sampler`` unset: uniform t, diffusers' own sampling (the run is diffusers' run);
  ``--noise_sampler infonoise`` learns the schedule online (``--infonoise_*``); any other name of
  ``diffusers_infonoise.SAMPLER_NAMES`` selects that baseline.
* The sampler is told the loss the script trains: the scheduler's (or ``--prediction_type``'s)
  parameterization and, with ``--snr_gamma``, Min-SNR-γ (METHOD.md §4). ``--noise_offset`` and
  ``--input_perturbation`` keep diffusers' meaning; the sampler still gets the unweighted loss.
* The saved pipeline's scheduler is the *training* ``DDPMScheduler``, with the trained
  ``prediction_type`` and the learned schedule (``_infonoise_schedule``) in its config. With
  ``--use_lora`` the output folder holds the LoRA weights and that scheduler in ``scheduler/``.

Run single-process with ``python`` or multi-process with ``accelerate launch``, e.g. on CPU::

    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 --num_machines 1 \\
        --mixed_precision no --dynamo_backend no training_scripts/train_text_to_image.py \\
        --pretrained_model_name_or_path stable-diffusion-v1-5/stable-diffusion-v1-5 --dataset_name fashion_mnist ...

Everything shared with the other training scripts lives in :mod:`diffusers_infonoise.training`.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

import torch
from accelerate.logging import get_logger
from diffusers import AutoencoderKL, DDPMScheduler, StableDiffusionPipeline, UNet2DConditionModel
from transformers import CLIPTextModel, CLIPTokenizer

from diffusers_infonoise.generation import model_output
from diffusers_infonoise.training import (
    UNET_LORA_TARGETS,
    add_text_to_image_args,
    build_noise_sampler,
    check_text_to_image_args,
    encode_latents,
    log_validation_images,
    per_sample_mse,
    prepare_text_to_image_training,
    run_training_loop,
    save_text_to_image_outputs,
    setup_trained_model,
    start_text_to_image_run,
    text_to_image_config,
    training_target,
    weight_dtype_of,
)

logger = get_logger(__name__, log_level="INFO")

#: what diffusers' script samples when no --noise_sampler is given
DEFAULT_NOISE_SAMPLER = "uniform"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Fine-tune Stable Diffusion (text-to-image) with InfoNoise.")
    add_text_to_image_args(parser, defaults={"resolution": 512, "output_dir": "sd-model-finetuned-infonoise",
                                             "validation_inference_steps": 20})
    g = parser.add_argument_group("Stable Diffusion")
    g.add_argument("--prediction_type", type=str, default=None, choices=("epsilon", "v_prediction", "sample"),
                   help="The loss parameterization (registered in the saved scheduler). Default: the scheduler's "
                        "(epsilon for SD 1.x and 2.x-base, v_prediction for SD 2.x 768).")
    g.add_argument("--noise_offset", type=float, default=0.0,
                   help="Offset noise (diffusers' meaning): add noise_offset·N(0, 1) per sample and channel to ε.")
    g.add_argument("--input_perturbation", type=float, default=0.0,
                   help="Input perturbation (diffusers' meaning, Ning et al. 2023): the model input is noised with "
                        "ε + input_perturbation·N(0, I) while the target keeps ε.")
    args = parser.parse_args(argv)
    check_text_to_image_args(parser, args)
    if args.noise_sampler is None:
        args.noise_sampler = DEFAULT_NOISE_SAMPLER
    return args


def load_noise_scheduler(args) -> DDPMScheduler:
    """The training scheduler: ``DDPMScheduler`` from the model's ``scheduler`` folder (as diffusers'
    script does), with ``--prediction_type`` registered when given."""
    scheduler = DDPMScheduler.from_pretrained(args.pretrained_model_name_or_path, subfolder="scheduler",
                                              revision=args.revision)
    if args.prediction_type is not None:
        scheduler.register_to_config(prediction_type=args.prediction_type)
    return scheduler


def build_sampler(args, noise_scheduler):
    """The training-noise sampler for the loss this script trains (parameterization, Min-SNR)."""
    return build_noise_sampler(args, noise_scheduler, prediction_type=noise_scheduler.config.prediction_type,
                               loss_weighting="min_snr" if args.snr_gamma else "none", snr_gamma=args.snr_gamma)


def main(argv=None) -> dict:
    """Train; returns ``{"global_step", "step_times", "total_batch_size", "sampler"}``."""
    args = parse_args(argv)
    cfg = text_to_image_config(args)
    noise_scheduler = load_noise_scheduler(args)
    sampler = build_sampler(args, noise_scheduler)
    accelerator = start_text_to_image_run(cfg, sampler)
    if accelerator is None:  # --show_noise_schedule: the schedule is shown, there is nothing to train
        return {"sampler": sampler}
    weight_dtype, device = weight_dtype_of(accelerator), accelerator.device

    # -- models: frozen text encoder and VAE, trained UNet (or its LoRA) ------------------------------
    load = dict(revision=args.revision)
    tokenizer = CLIPTokenizer.from_pretrained(args.pretrained_model_name_or_path, subfolder="tokenizer", **load)
    text_encoder = CLIPTextModel.from_pretrained(args.pretrained_model_name_or_path, subfolder="text_encoder",
                                                 variant=args.variant, **load)
    vae = AutoencoderKL.from_pretrained(args.pretrained_model_name_or_path, subfolder="vae", variant=args.variant, **load)
    unet = UNet2DConditionModel.from_pretrained(args.pretrained_model_name_or_path, subfolder="unet",
                                                variant=args.variant, **load)
    params, ema = setup_trained_model(cfg, unet, frozen=(vae, text_encoder), model_cls=UNet2DConditionModel,
                                      lora_targets=UNET_LORA_TARGETS, device=device, weight_dtype=weight_dtype)

    # -- data, optimizer, schedule, checkpoint hooks, trackers ------------------------------------
    unet, optimizer, lr_scheduler, dataloader, epoch_setters = prepare_text_to_image_training(
        accelerator, cfg, unet, params=params, ema=ema, sampler=sampler, model_cls=UNet2DConditionModel,
        subfolder="unet", pipeline_cls=StableDiffusionPipeline, tracker_project="text2image-fine-tune-infonoise")

    # one in-memory pipeline: prompt encoding for training, images for validation
    pipeline = StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
                                       unet=accelerator.unwrap_model(unet), scheduler=copy.deepcopy(noise_scheduler),
                                       safety_checker=None, feature_extractor=None, requires_safety_checker=False)

    def compute_loss(batch, levels):
        with torch.no_grad():
            latents = encode_latents(vae, batch["pixel_values"]).to(weight_dtype)
            prompt_embeds, _ = pipeline.encode_prompt(batch["captions"], device, 1, False)
        noise = torch.randn_like(latents)
        if args.noise_offset:
            noise = noise + args.noise_offset * torch.randn(latents.shape[:2] + (1, 1), device=device, dtype=latents.dtype)
        model_noise = noise + args.input_perturbation * torch.randn_like(noise) if args.input_perturbation else noise
        noisy = sampler.add_noise(latents, model_noise, levels)
        pred = model_output(unet, noise_scheduler, noisy, levels.timesteps, model_kwargs={"encoder_hidden_states": prompt_embeds})
        return per_sample_mse(pred, training_target(sampler, noise_scheduler, latents, noise, levels))

    def validate(step):
        log_validation_images(accelerator, pipeline, args.validation_prompts, step=step, seed=args.seed,
                              num_inference_steps=args.validation_inference_steps,
                              guidance_scale=args.validation_guidance_scale,
                              output_dir=os.path.join(args.output_dir, "validation"))

    result = run_training_loop(accelerator, cfg.run, model=unet, optimizer=optimizer, lr_scheduler=lr_scheduler,
                               dataloader=dataloader, epoch_setters=epoch_setters, sampler=sampler,
                               compute_loss=compute_loss, params_to_clip=params, ema=ema,
                               validate=validate)

    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        final = pipeline
        if not args.use_lora:  # the base model's other components (safety checker, ...) come along
            final = StableDiffusionPipeline.from_pretrained(
                args.pretrained_model_name_or_path, unet=accelerator.unwrap_model(unet), vae=vae,
                text_encoder=text_encoder, tokenizer=tokenizer, scheduler=noise_scheduler, revision=args.revision,
                variant=args.variant)
        details = {"EMA": "yes" if ema is not None else "no"}
        if args.noise_offset:
            details["noise offset"] = args.noise_offset
        if args.input_perturbation:
            details["input perturbation"] = args.input_perturbation
        save_text_to_image_outputs(
            accelerator, cfg, pipeline=final, model_key="unet", noise_scheduler=noise_scheduler, sampler=sampler,
            ema=ema, result=result,
            card={"base_model": args.pretrained_model_name_or_path, "pipeline_class": "StableDiffusionPipeline",
                  "family": "stable-diffusion", "license": "creativeml-openrail-m", "details": details,
                  "extra_tags": ["stable-diffusion", "stable-diffusion-diffusers"]},
        )
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return {**result, "sampler": sampler}


if __name__ == "__main__":
    main()
    sys.exit(0)
