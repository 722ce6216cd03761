#!/usr/bin/env python
"""Train an unconditional diffusion model with an InfoNoise (or baseline) training-noise schedule.

In the style of diffusers' ``examples/unconditional_image_generation/train_unconditional.py``, with
``--diffusion {ddpm,edm,flow}`` and ``--noise_sampler``. Run it single-process with ``python`` or
``accelerate launch``, or multi-process, e.g. on CPU::

    ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes 2 --num_machines 1 \\
        --mixed_precision no --dynamo_backend no training_scripts/train_unconditional.py --dataset_name mnist ...

Installed with the package it is the command ``infonoise-train-unconditional`` and the module
``diffusers_infonoise.training_scripts.train_unconditional`` (``python -m`` or ``accelerate launch -m``).

Everything shared with the text-to-image scripts lives in :mod:`diffusers_infonoise.training`.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from accelerate.logging import get_logger
from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler, UNet1DModel, UNet2DModel
from diffusers.training_utils import EMAModel

from diffusers_infonoise.argtypes import positive_float, positive_int
from diffusers_infonoise.generation import generate_images, model_output
from diffusers_infonoise.paths import path_class, scheduler_kind
from diffusers_infonoise.sampler import apply_start
from diffusers_infonoise.training import (
    accelerator_config,
    add_common_training_args,
    add_noise_sampler_args,
    batch_loader,
    build_noise_sampler,
    check_sources,
    check_unet_config,
    data_config,
    default_unet,
    ema_weights,
    hub_target,
    log_images,
    make_optimizer_and_lr_scheduler,
    optimizer_config,
    option_errors,
    per_sample_mse,
    register_model_checkpointing,
    register_sampler_checkpointing,
    run_config,
    run_training_loop,
    sampler_start,
    save_samples,
    save_unconditional_outputs,
    save_unconditional_pipeline,
    script_epilog,
    show_noise_schedule,
    start_run,
    tracker_config,
    training_length,
    training_target,
    unconditional_dataset,
)

logger = get_logger(__name__, log_level="INFO")

PREDICTION_TYPES = {"ddpm": ("epsilon", "v_prediction", "sample"), "edm": ("epsilon", "v_prediction"), "flow": ("flow",)}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Train an unconditional diffusion model with InfoNoise.", epilog=script_epilog("train_unconditional")
    )
    a = parser.add_argument
    a(
        "--dataset_name",
        type=str,
        default=None,
        help="A built-in offline data set (mnist, fashion_mnist, binarized_mnist, digits, binarized_digits), a Hub "
        "dataset name or a local save_to_disk folder. Default: mnist.",
    )
    a("--dataset_config_name", type=str, default=None)
    a("--train_data_dir", type=str, default=None, help="A folder of images (datasets' imagefolder).")
    a("--image_column", type=str, default="image")
    a(
        "--sequence_column",
        type=str,
        default=None,
        help="Train on sequences instead of images: a column of equal-length strings over --alphabet (e.g. DNA), "
        "one-hot in {-1, 1}, with a 1-D UNet (UNet1DModel); samples are written as FASTA.",
    )
    a("--alphabet", type=str, default="ACGT", help="Letters of --sequence_column; channel k is the k-th letter.")
    a("--max_train_samples", type=positive_int, default=None, help="Truncate the training set (debugging, quick runs).")
    a("--resolution", type=positive_int, default=16)
    a("--center_crop", action="store_true")
    a("--random_flip", action="store_true")
    a(
        "--model_config_name_or_path",
        type=str,
        default=None,
        help="Train from scratch: a UNet2DModel config (JSON file or folder); a UNet1DModel config with --sequence_column.",
    )
    a(
        "--pretrained_model_name_or_path",
        type=str,
        default=None,
        help="Fine-tune: a saved pipeline folder or Hub repo id; its unet/ and scheduler/ (with any stored InfoNoise "
        "schedule) are loaded. Its path and prediction type must agree with --diffusion and --prediction_type.",
    )
    a("--revision", type=str, default=None, help="Revision of --pretrained_model_name_or_path on the Hub.")
    a("--eval_batch_size", type=positive_int, default=16, help="Images in each sample grid.")
    a("--num_epochs", type=positive_int, default=100)
    a("--save_images_epochs", type=positive_int, default=10)
    a("--save_model_epochs", type=positive_int, default=10)
    a("--use_ema", action="store_true")
    a("--ema_inv_gamma", type=float, default=1.0)
    a("--ema_power", type=float, default=3 / 4)
    a("--ema_max_decay", type=float, default=0.9999)
    a(
        "--diffusion",
        type=str,
        default="ddpm",
        choices=list(PREDICTION_TYPES),
        help="Corruption path: ddpm (VP, DDPMScheduler), edm (VE with EDM preconditioning and weighting), "
        "flow (rectified flow, FlowMatchEulerDiscreteScheduler).",
    )
    a(
        "--prediction_type",
        type=str,
        default=None,
        help="ddpm: epsilon (default), v_prediction or sample. edm: epsilon (default) or v_prediction, which only pick "
        "the sign of c_out (the network is trained through the denoiser D). flow: flow (velocity).",
    )
    a("--ddpm_num_steps", type=positive_int, default=1000)
    a("--ddpm_beta_schedule", type=str, default="linear")
    a("--ddpm_num_inference_steps", type=positive_int, default=100)
    a("--num_inference_steps", type=positive_int, default=None, help="Sampling steps for edm (default 40) and flow (default 50).")
    a("--sigma_data", type=positive_float, default=0.5, help="EDM sigma_data (data in [-1, 1]).")
    a("--sigma_min", type=positive_float, default=0.002)
    a("--sigma_max", type=positive_float, default=80.0)
    a("--flow_shift", type=positive_float, default=1.0, help="Static shift of the flow scheduler.")
    a("--logger", type=str, default="tensorboard", choices=["tensorboard", "wandb", "none"])
    add_common_training_args(parser, defaults={"unconditional": True, "output_dir": "ddpm-model-16"})
    add_noise_sampler_args(parser)
    args = parser.parse_args(argv)

    allowed = PREDICTION_TYPES[args.diffusion]
    if args.model_config_name_or_path and args.pretrained_model_name_or_path:
        parser.error("--model_config_name_or_path (from scratch) and --pretrained_model_name_or_path (fine-tuning): give one")
    if args.prediction_type is None and not args.pretrained_model_name_or_path:
        args.prediction_type = allowed[0]  # a pretrained model's own is read from its scheduler (build_scheduler)
    elif args.prediction_type is not None and args.prediction_type not in allowed:
        parser.error(
            f"--prediction_type {args.prediction_type} is not valid with --diffusion {args.diffusion}; accepted: {', '.join(allowed)}"
        )
    if args.sigma_min >= args.sigma_max:
        parser.error(f"--sigma_min {args.sigma_min} must be below --sigma_max {args.sigma_max}")
    # a fine-tune takes the pretrained scheduler as it is: the path options given here are checked against it
    args.scheduler_flags_given = {f: getattr(args, f) for f in _SCHEDULER_FLAGS if getattr(args, f) != parser.get_default(f)}
    if args.snr_gamma is not None and args.diffusion != "ddpm":
        parser.error("--snr_gamma (Min-SNR) applies to --diffusion ddpm only")
    if args.dataset_name and args.train_data_dir:
        parser.error("--dataset_name and --train_data_dir: give one of them")
    if args.sequence_column and not args.dataset_name:
        parser.error("--sequence_column needs --dataset_name (a Hub data set or save_to_disk folder with that column)")
    check_sources(parser, args, "--pretrained_model_name_or_path", "--infonoise_schedule_from")
    return args


_DIFFUSION_PATHS = {"ddpm": "vp", "edm": "ve", "flow": "flow"}
#: the path options of a from-scratch run and the scheduler config key each one sets
_SCHEDULER_FLAGS = {
    "ddpm_num_steps": "num_train_timesteps",
    "ddpm_beta_schedule": "beta_schedule",
    "sigma_data": "sigma_data",
    "sigma_min": "sigma_min",
    "sigma_max": "sigma_max",
    "flow_shift": "shift",
}
_SCHEDULERS = {"ddpm": DDPMScheduler, "edm": EDMEulerScheduler, "flow": FlowMatchEulerDiscreteScheduler}


def load_pretrained_scheduler(args):
    """The pretrained pipeline's training scheduler (its config, with any stored schedule, in the class of
    ``--diffusion``), and ``--prediction_type`` resolved against it.

    Raises:
        ValueError: a scheduler of another path than ``--diffusion``, or a prediction type other than
            ``--prediction_type``, naming both.
    """
    import diffusers

    where = args.pretrained_model_name_or_path
    config = DDPMScheduler.load_config(where, subfolder="scheduler", revision=args.revision)
    loaded = getattr(diffusers, config.get("_class_name", ""), None)
    if loaded is None:
        raise ValueError(f"--pretrained_model_name_or_path: {where} has an unknown scheduler {config.get('_class_name')!r}")
    kind = scheduler_kind(loaded.from_config(config))
    if kind != _DIFFUSION_PATHS[args.diffusion]:
        theirs = next(name for name, k in _DIFFUSION_PATHS.items() if k == kind)
        raise ValueError(
            f"--pretrained_model_name_or_path: {where} has a {config['_class_name']} ({kind} path), but "
            f"--diffusion {args.diffusion} trains a {_DIFFUSION_PATHS[args.diffusion]} path; pass "
            f"--diffusion {theirs}"
        )
    sched = _SCHEDULERS[args.diffusion].from_config(config)
    differ = [
        f"--{flag} {value} (the pretrained scheduler has {key}={sched.config.get(key)!r})"
        for flag, value in getattr(args, "scheduler_flags_given", {}).items()
        if (key := _SCHEDULER_FLAGS[flag]) in sched.config and sched.config.get(key) != value
    ]
    if differ:
        raise ValueError(
            f"--pretrained_model_name_or_path: a fine-tune trains on the pretrained model's own path, and "
            f"{'; '.join(differ)}; drop the option(s), or train from scratch with --model_config_name_or_path"
        )
    theirs = sched.config.get("prediction_type")  # VP: the loss; EDM: the sign of c_out; flow: none
    if args.diffusion != "flow":
        if args.prediction_type is not None and args.prediction_type != theirs:
            raise ValueError(
                f"--prediction_type {args.prediction_type}: the pretrained model {where} predicts "
                f"{theirs!r} (its scheduler's prediction_type); pass --prediction_type {theirs}"
            )
    return sched, theirs or PREDICTION_TYPES[args.diffusion][0]


def build_scheduler(args):
    """The training scheduler (a pretrained pipeline's, or one of ``--diffusion``'s options), the loss
    parameterization the sampler sees, and the loss weighting."""
    if args.pretrained_model_name_or_path:
        sched, prediction_type = load_pretrained_scheduler(args)
        if args.diffusion == "ddpm":
            return sched, prediction_type, ("min_snr" if args.snr_gamma else "none")
        return sched, "sample" if args.diffusion == "edm" else "flow", "edm" if args.diffusion == "edm" else "none"
    if args.diffusion == "ddpm":
        sched = DDPMScheduler(
            num_train_timesteps=args.ddpm_num_steps, beta_schedule=args.ddpm_beta_schedule, prediction_type=args.prediction_type
        )
        return sched, args.prediction_type, ("min_snr" if args.snr_gamma else "none")
    if args.diffusion == "edm":
        sched = EDMEulerScheduler(
            sigma_min=args.sigma_min, sigma_max=args.sigma_max, sigma_data=args.sigma_data, prediction_type=args.prediction_type
        )
        return sched, "sample", "edm"  # loss on the denoiser D with EDM's λ(σ)
    return FlowMatchEulerDiscreteScheduler(shift=args.flow_shift), "flow", "none"


def build_unet(args, channels: int, length: int | None = None):
    """The denoiser: ``UNet2DModel`` for images; ``UNet1DModel`` for sequences (``length`` given).

    Raises:
        ValueError: ``--model_config_name_or_path`` names a model of the other kind.
    """
    cls = UNet1DModel if length is not None else UNet2DModel
    if args.pretrained_model_name_or_path:
        model = cls.from_pretrained(args.pretrained_model_name_or_path, subfolder="unet", revision=args.revision)
        check_unet_config(
            model.config, channels=channels, length=length, resolution=args.resolution, option="--pretrained_model_name_or_path"
        )
        return model
    if args.model_config_name_or_path:
        config = cls.load_config(args.model_config_name_or_path)
        if config.get("_class_name", cls.__name__) != cls.__name__:
            raise ValueError(
                f"--model_config_name_or_path: a {config['_class_name']} config; this data needs a "
                f"{cls.__name__} config ({'--sequence_column given' if length else 'images'})"
            )
        model = cls.from_config(config)
        check_unet_config(model.config, channels=channels, length=length, resolution=args.resolution)
        return model
    return default_unet(channels, resolution=args.resolution, length=length)


def main(argv=None):
    args = parse_args(argv)
    with option_errors():  # a mistake in the options ends in one line, as argparse's do
        noise_scheduler, prediction_type, loss_weighting = build_scheduler(args)
        sampler = build_noise_sampler(
            args, noise_scheduler, prediction_type=prediction_type, loss_weighting=loss_weighting, snr_gamma=args.snr_gamma
        )
        start = sampler_start(args, sampler, noise_scheduler, pretrained_model=bool(args.pretrained_model_name_or_path))
    if args.show_noise_schedule and start.choice != "profile":  # nothing to measure: shown before anything is loaded
        if start.choice == "stored":
            apply_start(sampler, start)
        show_noise_schedule(sampler, args.output_dir, start=start)
        return

    accelerator = start_run(accelerator_config(args, report_to=args.logger))

    # -- data: images, or one-hot sequences -------------------------------------------------------
    dataset, collate, channels, length = unconditional_dataset(
        data_config(args), sequence_column=args.sequence_column, alphabet=args.alphabet
    )
    dataloader, order = batch_loader(dataset, data_config(args), collate_fn=collate)
    dataloader = accelerator.prepare(dataloader)

    # -- model, EMA, optimizer -----------------------------------------------------------------------
    model = build_unet(args, channels, length)
    model_cls = type(model)  # before accelerate.prepare, which may wrap it (DistributedDataParallel)
    ema = None
    if args.use_ema:
        ema = EMAModel(
            model.parameters(),
            decay=args.ema_max_decay,
            use_ema_warmup=True,
            inv_gamma=args.ema_inv_gamma,
            power=args.ema_power,
            model_cls=model_cls,
            model_config=model.config,
        )
    _, max_steps, _ = training_length(run_config(args), dataloader)
    optimizer, lr_scheduler = make_optimizer_and_lr_scheduler(
        optimizer_config(args), model.parameters(), max_steps=max_steps, num_processes=accelerator.num_processes
    )
    model, optimizer, lr_scheduler = accelerator.prepare(model, optimizer, lr_scheduler)
    if ema is not None:
        ema.to(accelerator.device)

    # Each rank draws its own levels; the schedule (π) is shared through the sampler's all-reduce.
    sampler.manual_seed(args.seed or 0)
    register_sampler_checkpointing(accelerator, sampler)
    register_model_checkpointing(accelerator, model_cls=model_cls, subfolder="unet", ema=ema)
    if accelerator.is_main_process and not args.show_noise_schedule:
        accelerator.init_trackers("train_unconditional", config=tracker_config(args))
    num_inference_steps = args.num_inference_steps or (
        args.ddpm_num_inference_steps if args.diffusion == "ddpm" else path_class(noise_scheduler).default_inference_steps
    )

    def compute_loss(x0, levels):
        noise = torch.randn_like(x0)
        noisy = sampler.add_noise(x0, noise, levels)
        pred = model_output(model, noise_scheduler, noisy, levels.timesteps, levels.sigmas)
        return per_sample_mse(pred, training_target(sampler, noise_scheduler, x0, noise, levels))

    alphabet = args.alphabet if args.sequence_column else None

    def on_epoch_end(epoch, global_step, last):
        if not accelerator.is_main_process:
            return
        unet = accelerator.unwrap_model(model)
        if (epoch + 1) % args.save_model_epochs == 0 and not last:
            save_unconditional_pipeline(unet, ema, noise_scheduler, sampler, args.output_dir)
        if (epoch + 1) % args.save_images_epochs == 0 or last:
            with ema_weights(ema, unet.parameters()):
                images = generate_images(
                    unet.eval(),
                    noise_scheduler,
                    args.eval_batch_size,
                    num_inference_steps=num_inference_steps,
                    generator=torch.Generator(device=unet.device).manual_seed(args.seed or 0),
                )
            unet.train()
            save_samples(images, os.path.join(args.output_dir, f"samples_epoch_{epoch:04d}"), alphabet=alphabet)
            if alphabet is None:
                log_images(accelerator, "samples", images, global_step)

    epoch_setters = [order] + ([dataset] if hasattr(dataset, "set_epoch") else [])
    result = run_training_loop(
        accelerator,
        run_config(args),
        model=model,
        optimizer=optimizer,
        lr_scheduler=lr_scheduler,
        dataloader=dataloader,
        epoch_setters=epoch_setters,
        sampler=sampler,
        compute_loss=compute_loss,
        params_to_clip=list(model.parameters()),
        ema=ema,
        on_epoch_end=on_epoch_end,
        start=start,
        show_schedule=args.show_noise_schedule,  # a profile start: measured on the data, then shown; nothing trained
    )
    if args.show_noise_schedule:
        return
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        unet = accelerator.unwrap_model(model)
        save_unconditional_outputs(
            args.output_dir,
            unet=unet,
            ema=ema,
            noise_scheduler=noise_scheduler,
            sampler=sampler,
            global_step=result["global_step"],
            num_samples=args.eval_batch_size,
            num_inference_steps=num_inference_steps,
            seed=args.seed or 0,
            alphabet=alphabet,
            hub=hub_target(args),
            card=dict(
                dataset_name=args.dataset_name or (None if args.train_data_dir else "mnist"),
                resolution=args.resolution,
                num_channels=channels,
                diffusion=args.diffusion,
                prediction_type=noise_scheduler.config.get("prediction_type", prediction_type),
                total_batch_size=result["total_batch_size"],
                base_model=args.pretrained_model_name_or_path,
                start=start.choice,
            ),
        )
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main()
    sys.exit(0)
