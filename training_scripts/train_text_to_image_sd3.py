#!/usr/bin/env python
"""Fine-tune Stable Diffusion 3 (rectified flow) for text-to-image with an InfoNoise training-noise schedule.

In the style of diffusers' ``examples/dreambooth/train_dreambooth_sd3.py`` (and ``_lora_sd3.py``
with ``--use_lora``) on a captioned data set, with the SD3 arguments in diffusers' meaning:

``--weighting_scheme`` keeps diffusers' meaning (a loss weight or a sampling density; the table in
:mod:`diffusers_infonoise.training.flow`). The densities are those of the unshifted level, then
shifted with the scheduler's ``shift``, as diffusers' index into its shifted table does.

Without ``--noise_sampler`` the run samples as diffusers' script does.
``--noise_sampler infonoise`` replaces that density by the learned one and uses it as its warm-up
and floor density (unless ``--infonoise_base`` names another); the loss weight stays, and the
sampler is told it. A fixed ``--noise_sampler`` conflicting with an explicit density scheme
(``--weighting_scheme mode --noise_sampler logit_normal``) is an error. A scheduler with dynamic
shifting trains on the path of ``--training_mu`` (default 0, the unshifted table).

``--precondition_outputs`` (1, the default as in diffusers, or 0): with 1 the network's velocity
is turned into an x0 estimate ``x − s·v̂`` and the loss is on x0 (the sampler's
``prediction_type="sample"``); with 0 the loss is on the velocity ``ε − x0`` (``"flow"``). The
weight on the x0-space error is then ``u(s)`` or ``u(s)/s²`` (METHOD.md §4 rows ``sigma_sqrt`` and
``cosmap``). The scheduler's ``shift`` is respected: the sampler reads it from the scheduler.

Noise levels follow the SD3 paper: ``x = (1 − s)·x0 + s·ε``; the transformer's timestep is
``1000·s`` (``levels.timesteps``). ``--logit_mean`` keeps diffusers' meaning: > 0 means LESS noise
(diffusers' scripts index a descending table with u, so s ≈ 1 − u; the SD3 paper's mean is its negative).
"""

from __future__ import annotations

import argparse
import copy
import sys

import torch
from accelerate.logging import get_logger
from diffusers import AutoencoderKL, SD3Transformer2DModel, StableDiffusion3Pipeline
from transformers import CLIPTextModelWithProjection, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

from diffusers_infonoise import training
from diffusers_infonoise.generation import model_output

logger = get_logger(__name__, log_level="INFO")

DEFAULT_WEIGHTING_SCHEME = "logit_normal"  # diffusers' SD3 scripts'


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Fine-tune Stable Diffusion 3 (text-to-image) with InfoNoise.", epilog=training.script_epilog("train_text_to_image_sd3")
    )
    training.add_text_to_image_args(
        parser, defaults={"resolution": 1024, "output_dir": "sd3-finetuned-infonoise", "validation_inference_steps": 25}
    )
    training.add_flow_args(parser, default_scheme=DEFAULT_WEIGHTING_SCHEME, precondition_outputs=True, max_sequence_length=77)
    args = parser.parse_args(argv)
    training.check_text_to_image_args(parser, args)
    training.check_flow_args(parser, args)
    return args


load_noise_scheduler = training.load_flow_scheduler  # the model's FlowMatchEulerDiscreteScheduler, its shift included


def build_sampler(args, noise_scheduler):
    """The training-noise sampler, told the loss: x0 (``sample``) or velocity (``flow``), and its weight."""
    return training.build_flow_sampler(args, noise_scheduler, default_scheme=DEFAULT_WEIGHTING_SCHEME)


def loss_and_pipeline(args, run):
    """``(compute_loss, pipeline)``: the loss ``compute_loss(batch, levels)`` on the run's transformer and the one
    in-memory pipeline it encodes prompts with (validation draws images from it, and it is the saved model)."""
    sampler, noise_scheduler, vae, transformer = run.sampler, run.noise_scheduler, run.parts["vae"], run.model

    # one in-memory pipeline: prompt encoding for training, images for validation, the saved model
    pipeline = StableDiffusion3Pipeline(**run.parts, transformer=run.unwrapped, scheduler=copy.deepcopy(noise_scheduler))

    def compute_loss(batch, levels):
        with torch.no_grad():
            latents = training.encode_latents(vae, batch["pixel_values"]).to(run.weight_dtype)
            prompt_embeds, _, pooled_embeds, _ = pipeline.encode_prompt(
                batch["captions"],
                None,
                None,
                device=run.device,
                do_classifier_free_guidance=False,
                max_sequence_length=args.max_sequence_length,
            )
        noise = torch.randn_like(latents)
        noisy = sampler.add_noise(latents, noise, levels)  # (1 − s)·x0 + s·ε
        pred = model_output(
            transformer,
            noise_scheduler,
            noisy,
            levels.timesteps,
            model_kwargs={"encoder_hidden_states": prompt_embeds, "pooled_projections": pooled_embeds},
        )
        if args.precondition_outputs:  # x0 estimate x − s·v̂ (diffusers' preconditioning)
            pred = training.flow_x0_estimate(pred, noisy, levels)
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
            "tokenizer_3": T5TokenizerFast,
            "text_encoder": CLIPTextModelWithProjection,
            "text_encoder_2": CLIPTextModelWithProjection,
            "text_encoder_3": T5EncoderModel,
            "vae": AutoencoderKL,
            "transformer": SD3Transformer2DModel,
        },
        trained="transformer",
        lora_targets=training.SD3_LORA_TARGETS,
        pipeline_cls=StableDiffusion3Pipeline,
        tracker_project="text2image-fine-tune-sd3-infonoise",
    )
    if run.showing:  # --show_noise_schedule: the schedule is shown (a profile start measured with the loss first), nothing is trained
        return run.show(lambda: loss_and_pipeline(args, run)[0])
    compute_loss, pipeline = loss_and_pipeline(args, run)

    return run.finish(
        run.train(compute_loss, pipeline, max_sequence_length=args.max_sequence_length),
        pipeline=pipeline,
        card={
            "base_model": args.pretrained_model_name_or_path,
            "pipeline_class": "StableDiffusion3Pipeline",
            "family": "sd3",
            "license": "other",
            "extra_tags": ["sd3", "sd3-diffusers"],
            "details": {
                "weighting scheme": args.weighting_scheme or DEFAULT_WEIGHTING_SCHEME,
                "precondition outputs": bool(args.precondition_outputs),
                "scheduler shift": noise_scheduler.config.shift,
                "EMA": "yes" if run.ema is not None else "no",
            },
        },
    )


if __name__ == "__main__":
    main()
    sys.exit(0)
