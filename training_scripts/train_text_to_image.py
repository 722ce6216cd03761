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
import logging
import os
import sys

import torch
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from diffusers import AutoencoderKL, DDPMScheduler, StableDiffusionPipeline, UNet2DConditionModel
from diffusers.optimization import get_scheduler
from diffusers.training_utils import EMAModel, cast_training_params
from transformers import CLIPTextModel, CLIPTokenizer

from diffusers_infonoise.training import (
    UNET_LORA_TARGETS,
    add_lora_adapter,
    add_text_to_image_args,
    build_noise_sampler,
    captioned_dataloader,
    check_text_to_image_args,
    encode_latents,
    log_validation_images,
    make_accelerator,
    per_sample_mse,
    register_model_checkpointing,
    register_sampler_checkpointing,
    resolve_infonoise_base,
    run_training_loop,
    save_text_to_image_outputs,
    show_noise_schedule,
    tracker_config,
    training_length,
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
    if args.noise_sampler in ("infonoise", "kingma_gao"):
        resolve_infonoise_base(args, None)
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
    noise_scheduler = load_noise_scheduler(args)
    sampler = build_sampler(args, noise_scheduler)
    if args.show_noise_schedule:
        show_noise_schedule(sampler, args.output_dir)
        return {"sampler": sampler}

    accelerator = make_accelerator(args)
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
    if args.seed is not None:
        set_seed(args.seed)
    if accelerator.is_main_process:
        os.makedirs(args.output_dir, exist_ok=True)
    if args.allow_tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
    weight_dtype = weight_dtype_of(accelerator)
    device = accelerator.device

    # -- models: frozen text encoder and VAE, trained UNet (or its LoRA) ------------------------------
    load = dict(revision=args.revision)
    tokenizer = CLIPTokenizer.from_pretrained(args.pretrained_model_name_or_path, subfolder="tokenizer", **load)
    text_encoder = CLIPTextModel.from_pretrained(args.pretrained_model_name_or_path, subfolder="text_encoder",
                                                 variant=args.variant, **load)
    vae = AutoencoderKL.from_pretrained(args.pretrained_model_name_or_path, subfolder="vae", variant=args.variant, **load)
    unet = UNet2DConditionModel.from_pretrained(args.pretrained_model_name_or_path, subfolder="unet",
                                                variant=args.variant, **load)
    for frozen in (vae, text_encoder):
        frozen.requires_grad_(False)
        frozen.to(device, dtype=weight_dtype)
    if args.use_lora:
        unet.to(device, dtype=weight_dtype)
        add_lora_adapter(unet, rank=args.lora_rank, alpha=args.lora_alpha, target_modules=UNET_LORA_TARGETS)
        if args.mixed_precision == "fp16":
            cast_training_params(unet, dtype=torch.float32)  # LoRA weights train in float32
    params = [p for p in unet.parameters() if p.requires_grad]
    ema = EMAModel(unet.parameters(), model_cls=UNet2DConditionModel, model_config=unet.config) if args.use_ema else None
    if args.gradient_checkpointing:
        unet.enable_gradient_checkpointing()

    # -- data, optimizer, schedule ----------------------------------------------------------------
    dataloader, dataset, order = captioned_dataloader(args)
    dataloader = accelerator.prepare(dataloader)
    _, max_steps, _ = training_length(args, dataloader)
    lr = args.learning_rate
    if args.scale_lr:
        lr *= args.gradient_accumulation_steps * args.train_batch_size * accelerator.num_processes
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(args.adam_beta1, args.adam_beta2),
                                  weight_decay=args.adam_weight_decay, eps=args.adam_epsilon)
    lr_scheduler = get_scheduler(args.lr_scheduler, optimizer=optimizer,
                                 num_warmup_steps=args.lr_warmup_steps * accelerator.num_processes,
                                 num_training_steps=max_steps * accelerator.num_processes)
    unet, optimizer, lr_scheduler = accelerator.prepare(unet, optimizer, lr_scheduler)
    if ema is not None:
        ema.to(device)

    # Each rank draws its own levels (and ε); the schedule π is shared through the sampler's all-reduce.
    draw_gen = torch.Generator().manual_seed((args.seed or 0) * 1000 + accelerator.process_index)
    if args.seed is not None:
        set_seed(args.seed, device_specific=True)
    register_model_checkpointing(accelerator, model_cls=UNet2DConditionModel, subfolder="unet", ema=ema,
                                 lora_pipeline_cls=StableDiffusionPipeline if args.use_lora else None, lora_prefix="unet")
    register_sampler_checkpointing(accelerator, sampler, draw_gen)
    if accelerator.is_main_process:
        accelerator.init_trackers("text2image-fine-tune-infonoise", config=tracker_config(args))

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
        pred = unet(noisy, levels.timesteps, encoder_hidden_states=prompt_embeds, return_dict=False)[0]
        return per_sample_mse(pred, training_target(sampler, noise_scheduler, latents, noise, levels))

    def validate(step):
        log_validation_images(accelerator, pipeline, args.validation_prompts, step=step, seed=args.seed,
                              num_inference_steps=args.validation_inference_steps,
                              guidance_scale=args.validation_guidance_scale,
                              output_dir=os.path.join(args.output_dir, "validation"))

    result = run_training_loop(accelerator, args, model=unet, optimizer=optimizer, lr_scheduler=lr_scheduler,
                               dataloader=dataloader, epoch_setters=(dataset, order), sampler=sampler,
                               draw_gen=draw_gen, compute_loss=compute_loss, params_to_clip=params, ema=ema,
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
            accelerator, args, pipeline=final, model_key="unet", noise_scheduler=noise_scheduler, sampler=sampler,
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
