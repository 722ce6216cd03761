#!/usr/bin/env python
"""Fine-tune Flux.1 (rectified flow, dynamic shift) for text-to-image, full or LoRA, with an InfoNoise
training-noise schedule.

In the style of diffusers' ``examples/dreambooth/train_dreambooth_lora_flux.py`` on a captioned data
set (the training layer's; no prior preservation), with its arguments in diffusers' meaning:
``--weighting_scheme`` (default ``none`` as there; the table in
:mod:`diffusers_infonoise.training.flow`), ``--logit_mean --logit_std --mode_scale``,
``--guidance_scale`` (the guidance embedding of guidance-distilled models such as FLUX.1-dev) and
``--max_sequence_length`` (T5 tokens). The loss is on the velocity ``ε − x0`` (the sampler's
``prediction_type="flow"``), weighted by ``--weighting_scheme``.

**Which mu.** Flux's scheduler shifts its sigmas by ``mu`` at inference, from the image size. Like
diffusers' Flux scripts, this one trains on the unshifted levels, i.e. the path of ``mu = 0``
(``--training_mu``): the sampler is built on it. The learned π is a density of VE σ = s/(1 − s),
so the saved schedule describes the trained levels whatever shift inference then applies.

The model sees packed latents (2x2 patches, ``FluxPipeline._pack_latents``), latent image ids and
text ids, and ``timestep = s`` (the transformer scales it by 1000). Saved: the LoRA weights (or the
full pipeline) and ``scheduler/`` with the learned schedule; validation images come from
``FluxPipeline.__call__``.

    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 --num_machines 1 \\
        --mixed_precision no --dynamo_backend no training_scripts/train_text_to_image_flux.py \\
        --pretrained_model_name_or_path black-forest-labs/FLUX.1-dev --use_lora --noise_sampler infonoise ...
"""

from __future__ import annotations

import argparse
import copy
import sys

import torch
from accelerate.logging import get_logger
from diffusers import AutoencoderKL, FluxPipeline, FluxTransformer2DModel
from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

from diffusers_infonoise import training
from diffusers_infonoise.generation import model_output

logger = get_logger(__name__, log_level="INFO")

DEFAULT_WEIGHTING_SCHEME = "none"  # diffusers' Flux scripts'


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Fine-tune Flux.1 (text-to-image) with InfoNoise.", epilog=training.script_epilog("train_text_to_image_flux")
    )
    training.add_text_to_image_args(
        parser, defaults={"resolution": 512, "output_dir": "flux-finetuned-infonoise", "validation_inference_steps": 28}
    )
    training.add_flow_args(parser, default_scheme=DEFAULT_WEIGHTING_SCHEME, precondition_outputs=False, max_sequence_length=512)
    parser.add_argument(
        "--guidance_scale",
        type=float,
        default=3.5,
        help="The guidance embedding's value in training (guidance-distilled models; diffusers' default).",
    )
    args = parser.parse_args(argv)
    training.check_text_to_image_args(parser, args)
    training.check_flow_args(parser, args)
    if args.resolution % 16:
        parser.error(f"--resolution must be a multiple of 16 (the VAE's 8x and the 2x2 packing), got {args.resolution}")
    return args


load_noise_scheduler = training.load_flow_scheduler  # the model's FlowMatchEulerDiscreteScheduler (dynamic shifting)


def build_sampler(args, noise_scheduler):
    """The training-noise sampler, told the loss (velocity, ``--weighting_scheme``), on the path of ``--training_mu``."""
    return training.build_flow_sampler(args, noise_scheduler, default_scheme=DEFAULT_WEIGHTING_SCHEME)


def loss_and_pipeline(args, run):
    """``(compute_loss, pipeline)``: the loss ``compute_loss(batch, levels)`` on the run's transformer and the one
    in-memory pipeline it encodes and packs prompts with (validation draws images from it, and it is the saved model)."""
    sampler, noise_scheduler, vae, transformer = run.sampler, run.noise_scheduler, run.parts["vae"], run.model
    device, dtype = run.device, run.weight_dtype

    # one in-memory pipeline: prompt encoding and packing for training, images for validation, the saved model
    pipeline = FluxPipeline(**run.parts, transformer=run.unwrapped, scheduler=copy.deepcopy(noise_scheduler))
    guided, scale = run.unwrapped.config.guidance_embeds, pipeline.vae_scale_factor

    def compute_loss(batch, levels):
        with torch.no_grad():
            latents = training.encode_latents(vae, batch["pixel_values"]).to(dtype)
            prompt_embeds, pooled_embeds, text_ids = pipeline.encode_prompt(
                batch["captions"], None, device=device, max_sequence_length=args.max_sequence_length
            )
        noise = torch.randn_like(latents)
        noisy = sampler.add_noise(latents, noise, levels)  # (1 − s)·x0 + s·ε
        b, c, h, w = noisy.shape
        pred = model_output(  # the transformer sees 2x2-packed latents and timestep s (it multiplies by 1000)
            transformer,
            noise_scheduler,
            noisy,
            levels.scheduler_sigmas.to(device, dtype),
            pack=lambda x: FluxPipeline._pack_latents(x, b, c, h, w),
            unpack=lambda out: FluxPipeline._unpack_latents(out, h * scale, w * scale, scale),
            model_kwargs={
                "guidance": torch.full((b,), args.guidance_scale, device=device) if guided else None,
                "pooled_projections": pooled_embeds,
                "encoder_hidden_states": prompt_embeds,
                "txt_ids": text_ids,
                "img_ids": FluxPipeline._prepare_latent_image_ids(b, h // 2, w // 2, device, dtype),
            },
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
            "tokenizer_2": T5TokenizerFast,
            "text_encoder": CLIPTextModel,
            "text_encoder_2": T5EncoderModel,
            "vae": AutoencoderKL,
            "transformer": FluxTransformer2DModel,
        },
        trained="transformer",
        lora_targets=training.SD3_LORA_TARGETS,
        pipeline_cls=FluxPipeline,
        tracker_project="text2image-fine-tune-flux-infonoise",
    )
    if run.showing:  # --show_noise_schedule: the schedule is shown (a profile start measured with the loss first), nothing is trained
        return run.show(lambda: loss_and_pipeline(args, run)[0])
    compute_loss, pipeline = loss_and_pipeline(args, run)

    sample_kwargs = {"max_sequence_length": args.max_sequence_length, "height": args.resolution, "width": args.resolution}
    return run.finish(
        run.train(compute_loss, pipeline, **sample_kwargs),
        pipeline=pipeline,
        validation_kwargs=sample_kwargs,
        card={
            "base_model": args.pretrained_model_name_or_path,
            "pipeline_class": "FluxPipeline",
            "family": "flux",
            "license": "other",
            "extra_tags": ["flux", "flux-diffusers"],
            "details": {
                "weighting scheme": args.weighting_scheme or DEFAULT_WEIGHTING_SCHEME,
                "training path shift": sampler.path.config().get("shift"),
                "guidance scale": args.guidance_scale,
                "EMA": "yes" if run.ema is not None else "no",
            },
        },
    )


if __name__ == "__main__":
    main()
    sys.exit(0)
