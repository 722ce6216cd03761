#!/usr/bin/env python
"""Fine-tune Stable Diffusion 3 (rectified flow) for text-to-image with an InfoNoise training-noise schedule.

In the style of diffusers' ``examples/dreambooth/train_dreambooth_sd3.py`` (and ``_lora_sd3.py``
with ``--use_lora``) on a captioned data set, with the SD3 arguments in diffusers' meaning:

``--weighting_scheme`` names one of two kinds of thing, as in diffusers:

================  ================================  ==========================================
scheme            loss weight u(s), told the        sampling without ``--noise_sampler``
                  sampler as its ``loss_weighting``
================  ================================  ==========================================
``logit_normal``  none                              logit-normal(``--logit_mean``,
(default)                                           ``--logit_std``)
``mode``          none                              SD3's mode density (``--mode_scale``)
``none``          none                              uniform s
``sigma_sqrt``    ``s⁻²``                           uniform s
``cosmap``        ``2/(π(1 − 2s + 2s²))``           uniform s
================  ================================  ==========================================

The densities are those of the unshifted level, then shifted with the scheduler's ``shift``, as
diffusers' index into its shifted table does.

Without ``--noise_sampler`` the run samples as diffusers' script does (the table's last column).
``--noise_sampler infonoise`` replaces that density by the learned one and uses it as its warm-up
and floor density (unless ``--infonoise_base`` names another); the loss weight stays, and the
sampler is told it. A fixed ``--noise_sampler`` conflicting with an explicit density scheme
(``--weighting_scheme mode --noise_sampler logit_normal``) is an error.

``--precondition_outputs`` (1, the default as in diffusers, or 0): with 1 the network's velocity
is turned into an x0 estimate ``x − s·v̂`` and the loss is on x0 (the sampler's
``prediction_type="sample"``); with 0 the loss is on the velocity ``ε − x0`` (``"flow"``). The
weight on the x0-space error is then ``u(s)`` or ``u(s)/s²`` (METHOD.md §4 rows ``sigma_sqrt`` and
``cosmap``). The scheduler's ``shift`` is respected: the sampler reads it from the scheduler.

Noise levels follow the SD3 paper: ``x = (1 − s)·x0 + s·ε``; the transformer's timestep is
``1000·s`` (``levels.timesteps``). ``--logit_mean`` > 0 means MORE noise (the SD3 paper's
convention; diffusers' own SD3 scripts index a descending table and so read the sign reversed).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

import torch
from accelerate.logging import get_logger
from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
from transformers import CLIPTextModelWithProjection, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

from diffusers_infonoise.generation import model_output
from diffusers_infonoise.training import (
    SD3_LORA_TARGETS,
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

WEIGHTING_SCHEMES = ("none", "sigma_sqrt", "cosmap", "logit_normal", "mode")
LOSS_WEIGHT_SCHEMES = ("sigma_sqrt", "cosmap")  # weights on the loss
DENSITY_SCHEMES = ("logit_normal", "mode")  # sampling densities
DEFAULT_WEIGHTING_SCHEME = "logit_normal"  # diffusers' default


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Fine-tune Stable Diffusion 3 (text-to-image) with InfoNoise.")
    add_text_to_image_args(parser, defaults={"resolution": 1024, "output_dir": "sd3-finetuned-infonoise",
                                             "validation_inference_steps": 25})
    g = parser.add_argument_group("Stable Diffusion 3")
    g.add_argument("--weighting_scheme", type=str, default=None, choices=WEIGHTING_SCHEMES,
                   help="diffusers' meaning: sigma_sqrt and cosmap weight the loss (the sampler is told), logit_normal "
                        "(default) and mode are sampling densities, used when --noise_sampler is not given and as "
                        "InfoNoise's warm-up/floor density when it is; none, sigma_sqrt and cosmap sample s uniformly "
                        "when --noise_sampler is not given.")
    g.add_argument("--precondition_outputs", type=int, nargs="?", const=1, default=1, choices=(0, 1),
                   help="1 (default, as diffusers): the loss is on x0 = x - s*v_pred (prediction_type 'sample'); "
                        "0: the loss is on the velocity noise - x0 (prediction_type 'flow').")
    g.add_argument("--max_sequence_length", type=int, default=77, help="T5 tokens per prompt.")
    args = parser.parse_args(argv)
    check_text_to_image_args(parser, args)
    if args.snr_gamma is not None:
        parser.error("--snr_gamma is Min-SNR for VP models; SD3 weights its loss with --weighting_scheme")
    resolve_sampling(parser, args)
    return args


def resolve_sampling(parser, args) -> None:
    """Set ``args.noise_sampler`` and ``args.loss_weighting`` from ``--weighting_scheme`` and
    ``--noise_sampler`` (see the module docstring)."""
    scheme = args.weighting_scheme or DEFAULT_WEIGHTING_SCHEME
    args.loss_weighting = scheme if scheme in LOSS_WEIGHT_SCHEMES else "none"
    if args.noise_sampler is None:
        args.noise_sampler = scheme_density(args)
    elif args.noise_sampler not in ("infonoise", "kingma_gao") and args.weighting_scheme in DENSITY_SCHEMES \
            and args.noise_sampler != args.weighting_scheme:
        parser.error(f"--weighting_scheme {args.weighting_scheme} is a sampling density and --noise_sampler "
                     f"{args.noise_sampler} another one; give one of them (or --noise_sampler infonoise, which starts "
                     f"from {args.weighting_scheme})")


def scheme_density(args) -> str:
    """The sampling density ``--weighting_scheme`` names (uniform s for the loss weightings); InfoNoise
    starts from it unless ``--infonoise_base`` says otherwise."""
    scheme = args.weighting_scheme or DEFAULT_WEIGHTING_SCHEME
    return scheme if scheme in DENSITY_SCHEMES else "uniform"


def load_noise_scheduler(args) -> FlowMatchEulerDiscreteScheduler:
    """The model's own ``FlowMatchEulerDiscreteScheduler`` (its ``shift`` included)."""
    return FlowMatchEulerDiscreteScheduler.from_pretrained(args.pretrained_model_name_or_path, subfolder="scheduler",
                                                           revision=args.revision)


def build_sampler(args, noise_scheduler):
    """The training-noise sampler, told the loss: x0 (``sample``) or velocity (``flow``), and its weight."""
    return build_noise_sampler(args, noise_scheduler, prediction_type="sample" if args.precondition_outputs else "flow",
                               loss_weighting=args.loss_weighting, default_base=scheme_density(args))


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

    # -- models: three frozen text encoders and the VAE, trained transformer (or its LoRA) ------------
    base, load = args.pretrained_model_name_or_path, dict(revision=args.revision)
    tokenizers = [CLIPTokenizer.from_pretrained(base, subfolder="tokenizer", **load),
                  CLIPTokenizer.from_pretrained(base, subfolder="tokenizer_2", **load),
                  T5TokenizerFast.from_pretrained(base, subfolder="tokenizer_3", **load)]
    text_encoders = [
        CLIPTextModelWithProjection.from_pretrained(base, subfolder="text_encoder", variant=args.variant, **load),
        CLIPTextModelWithProjection.from_pretrained(base, subfolder="text_encoder_2", variant=args.variant, **load),
        T5EncoderModel.from_pretrained(base, subfolder="text_encoder_3", variant=args.variant, **load),
    ]
    vae = AutoencoderKL.from_pretrained(base, subfolder="vae", variant=args.variant, **load)
    transformer = SD3Transformer2DModel.from_pretrained(base, subfolder="transformer", variant=args.variant, **load)
    params, ema = setup_trained_model(cfg, transformer, frozen=(vae, *text_encoders), model_cls=SD3Transformer2DModel,
                                      lora_targets=SD3_LORA_TARGETS, device=device, weight_dtype=weight_dtype)

    # -- data, optimizer, schedule, checkpoint hooks, trackers ------------------------------------
    transformer, optimizer, lr_scheduler, dataloader, epoch_setters = prepare_text_to_image_training(
        accelerator, cfg, transformer, params=params, ema=ema, sampler=sampler, model_cls=SD3Transformer2DModel,
        subfolder="transformer", pipeline_cls=StableDiffusion3Pipeline,
        tracker_project="text2image-fine-tune-sd3-infonoise")

    # one in-memory pipeline: prompt encoding for training, images for validation, the saved model
    pipeline = StableDiffusion3Pipeline(
        transformer=accelerator.unwrap_model(transformer), scheduler=copy.deepcopy(noise_scheduler), vae=vae,
        text_encoder=text_encoders[0], tokenizer=tokenizers[0], text_encoder_2=text_encoders[1],
        tokenizer_2=tokenizers[1], text_encoder_3=text_encoders[2], tokenizer_3=tokenizers[2],
    )

    def compute_loss(batch, levels):
        with torch.no_grad():
            latents = encode_latents(vae, batch["pixel_values"]).to(weight_dtype)
            prompt_embeds, _, pooled_embeds, _ = pipeline.encode_prompt(
                batch["captions"], None, None, device=device, do_classifier_free_guidance=False,
                max_sequence_length=args.max_sequence_length)
        noise = torch.randn_like(latents)
        noisy = sampler.add_noise(latents, noise, levels)  # (1 − s)·x0 + s·ε
        pred = model_output(transformer, noise_scheduler, noisy, levels.timesteps,
                            model_kwargs={"encoder_hidden_states": prompt_embeds, "pooled_projections": pooled_embeds})
        if args.precondition_outputs:  # x0 estimate x − s·v̂ (diffusers' preconditioning)
            s = levels.scheduler_sigmas.to(pred.dtype).view(-1, *([1] * (pred.ndim - 1)))  # flow s
            pred = noisy - s * pred
        return per_sample_mse(pred, training_target(sampler, noise_scheduler, latents, noise, levels))

    def validate(step):
        log_validation_images(accelerator, pipeline, args.validation_prompts, step=step, seed=args.seed,
                              num_inference_steps=args.validation_inference_steps,
                              guidance_scale=args.validation_guidance_scale,
                              output_dir=os.path.join(args.output_dir, "validation"),
                              max_sequence_length=args.max_sequence_length)

    result = run_training_loop(accelerator, cfg.run, model=transformer, optimizer=optimizer, lr_scheduler=lr_scheduler,
                               dataloader=dataloader, epoch_setters=epoch_setters, sampler=sampler,
                               compute_loss=compute_loss, params_to_clip=params, ema=ema,
                               validate=validate)

    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        shift = noise_scheduler.config.shift
        save_text_to_image_outputs(
            accelerator, cfg, pipeline=pipeline, model_key="transformer", noise_scheduler=noise_scheduler,
            sampler=sampler, ema=ema, result=result,
            card={"base_model": base, "pipeline_class": "StableDiffusion3Pipeline", "family": "sd3", "license": "other",
                  "details": {"weighting scheme": args.weighting_scheme or DEFAULT_WEIGHTING_SCHEME,
                              "precondition outputs": bool(args.precondition_outputs), "scheduler shift": shift,
                              "EMA": "yes" if ema is not None else "no"},
                  "extra_tags": ["sd3", "sd3-diffusers"]},
        )
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return {**result, "sampler": sampler}


if __name__ == "__main__":
    main()
    sys.exit(0)
