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
import sys

import torch
from accelerate.logging import get_logger
from diffusers import AutoencoderKL, StableDiffusionPipeline, UNet2DConditionModel
from transformers import CLIPTextModel, CLIPTokenizer

from diffusers_infonoise import training
from diffusers_infonoise.generation import model_output

logger = get_logger(__name__, log_level="INFO")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Fine-tune Stable Diffusion (text-to-image) with InfoNoise.", epilog=training.script_epilog("train_text_to_image")
    )
    training.add_text_to_image_args(
        parser, defaults={"resolution": 512, "output_dir": "sd-model-finetuned-infonoise", "validation_inference_steps": 20}
    )
    training.add_vp_args(parser, family="Stable Diffusion")
    args = parser.parse_args(argv)
    training.check_text_to_image_args(parser, args)
    return args


load_noise_scheduler = training.load_vp_scheduler  # DDPMScheduler from the model, --prediction_type registered
build_sampler = training.build_vp_sampler  # told the loss: the parameterization and --snr_gamma's Min-SNR


def loss_and_pipeline(args, run):
    """``(compute_loss, pipeline)``: the loss ``compute_loss(batch, levels)`` on the run's UNet and the one in-memory
    pipeline it encodes prompts with (and validation draws images from)."""
    sampler, noise_scheduler, vae, unet = run.sampler, run.noise_scheduler, run.parts["vae"], run.model

    # one in-memory pipeline: prompt encoding for training, images for validation
    pipeline = StableDiffusionPipeline(
        **run.parts,
        unet=run.unwrapped,
        scheduler=copy.deepcopy(noise_scheduler),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )

    def compute_loss(batch, levels):
        with torch.no_grad():
            latents = training.encode_latents(vae, batch["pixel_values"]).to(run.weight_dtype)
            prompt_embeds, _ = pipeline.encode_prompt(batch["captions"], run.device, 1, False)
        noise, model_noise = training.vp_noise(latents, noise_offset=args.noise_offset, input_perturbation=args.input_perturbation)
        noisy = sampler.add_noise(latents, model_noise, levels)
        pred = model_output(unet, noise_scheduler, noisy, levels.timesteps, model_kwargs={"encoder_hidden_states": prompt_embeds})
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
        parts={"tokenizer": CLIPTokenizer, "text_encoder": CLIPTextModel, "vae": AutoencoderKL, "unet": UNet2DConditionModel},
        trained="unet",
        lora_targets=training.UNET_LORA_TARGETS,
        pipeline_cls=StableDiffusionPipeline,
        tracker_project="text2image-fine-tune-infonoise",
    )
    if run.showing:  # --show_noise_schedule: the schedule is shown (a profile start measured with the loss first), nothing is trained
        return run.show(lambda: loss_and_pipeline(args, run)[0])
    compute_loss, pipeline = loss_and_pipeline(args, run)

    def final_pipeline():
        if args.use_lora:
            return pipeline
        # full fine-tuning: the base model's other components (safety checker, ...) come along
        return StableDiffusionPipeline.from_pretrained(
            args.pretrained_model_name_or_path,
            unet=run.unwrapped,
            scheduler=noise_scheduler,
            revision=args.revision,
            variant=args.variant,
            **run.parts,
        )

    return run.finish(
        run.train(compute_loss, pipeline),
        build_pipeline=final_pipeline,
        card={
            "base_model": args.pretrained_model_name_or_path,
            "pipeline_class": "StableDiffusionPipeline",
            "family": "stable-diffusion",
            "license": "creativeml-openrail-m",
            "extra_tags": ["stable-diffusion", "stable-diffusion-diffusers"],
            "details": training.vp_card_details(ema=run.ema, noise_offset=args.noise_offset, input_perturbation=args.input_perturbation),
        },
    )


if __name__ == "__main__":
    main()
    sys.exit(0)
