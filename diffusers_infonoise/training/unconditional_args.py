"""train_unconditional.py's own options at the edge (the data, the model, EMA, the path and its scheduler, a
pretrained pipeline) and the :class:`~.unconditional.UnconditionalConfig` they become. The options every script
shares are :mod:`.args`."""

from __future__ import annotations

import argparse

from ..argtypes import existing_dir_arg, positive_float, positive_int
from ..paths import PATH_CLASSES
from .args import add_common_training_args, add_noise_sampler_args, check_sources, script_configs
from .models import local_model_config
from .unconditional import UnconditionalConfig

__all__ = ["add_unconditional_args", "check_unconditional_args", "unconditional_config", "DIFFUSION_PATHS", "SCHEDULER_FLAGS"]


#: ``--diffusion`` → the path it trains (:attr:`~diffusers_infonoise.paths.NoisePath.diffusion`)
DIFFUSION_PATHS = {cls.diffusion: kind for kind, cls in sorted(PATH_CLASSES.items(), key=lambda item: item[1].diffusion)}
#: the path options of a from-scratch run (diffusers' names) and the scheduler config key each one sets
SCHEDULER_FLAGS = {
    "ddpm_num_steps": "num_train_timesteps",
    "ddpm_beta_schedule": "beta_schedule",
    "sigma_data": "sigma_data",
    "sigma_min": "sigma_min",
    "sigma_max": "sigma_max",
    "flow_shift": "shift",
}


def add_unconditional_args(parser: argparse.ArgumentParser) -> None:
    """The arguments of train_unconditional.py: diffusers' ``train_unconditional.py`` ones (data, model, EMA, the
    DDPM scheduler), ``--diffusion`` with the EDM and flow path options, ``--sequence_column``/``--alphabet``, then
    :func:`add_common_training_args` and :func:`add_noise_sampler_args`."""
    a = parser.add_argument
    a(
        "--dataset_name",
        type=str,
        default=None,
        help="A built-in offline data set (mnist, fashion_mnist, binarized_mnist, digits, binarized_digits), a Hub "
        "dataset name or a local save_to_disk folder. Default: mnist.",
    )
    a("--dataset_config_name", type=str, default=None)
    a("--train_data_dir", type=existing_dir_arg, default=None, help="A folder of images (datasets' imagefolder).")
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
        choices=list(DIFFUSION_PATHS),
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


def check_unconditional_args(parser: argparse.ArgumentParser, args) -> None:
    """train_unconditional.py's cross-argument checks (``parser.error`` on a conflict). ``--prediction_type`` defaults
    to the path's first (:attr:`~diffusers_infonoise.paths.NoisePath.scheduler_prediction_types`) unless a pretrained
    model brings its own; the path options given (not left at their defaults) are recorded, for a fine-tune to check
    them against the pretrained scheduler."""
    allowed = PATH_CLASSES[DIFFUSION_PATHS[args.diffusion]].scheduler_prediction_types
    if args.model_config_name_or_path and args.pretrained_model_name_or_path:
        parser.error("--model_config_name_or_path (from scratch) and --pretrained_model_name_or_path (fine-tuning): give one")
    if args.model_config_name_or_path:
        try:  # read before anything is loaded or trained: an unreadable config ended the run in a traceback
            local_model_config(args.model_config_name_or_path)
        except ValueError as err:
            parser.error(str(err))
    if args.prediction_type is None and not args.pretrained_model_name_or_path:
        args.prediction_type = allowed[0]  # a pretrained model's own is read from its scheduler
    elif args.prediction_type is not None and args.prediction_type not in allowed:
        parser.error(
            f"--prediction_type {args.prediction_type} is not valid with --diffusion {args.diffusion}; accepted: {', '.join(allowed)}"
        )
    if args.sigma_min >= args.sigma_max:
        parser.error(f"--sigma_min {args.sigma_min} must be below --sigma_max {args.sigma_max}")
    # a fine-tune takes the pretrained scheduler as it is: the path options given here are checked against it
    args.scheduler_flags_given = [f for f in SCHEDULER_FLAGS if getattr(args, f) != parser.get_default(f)]
    # from scratch, a path option only another path's scheduler reads would be ignored without a word (as --snr_gamma
    # outside ddpm is refused); a fine-tune checks every given option against the pretrained scheduler instead
    takes = PATH_CLASSES[DIFFUSION_PATHS[args.diffusion]].scheduler_options
    readers = {f: [c.diffusion for c in PATH_CLASSES.values() if key in c.scheduler_options] for f, key in SCHEDULER_FLAGS.items()}
    unread = [f"--{f} ({' or '.join(readers[f])})" for f in args.scheduler_flags_given if SCHEDULER_FLAGS[f] not in takes]
    if unread and not args.pretrained_model_name_or_path:
        parser.error(f"{', '.join(unread)}: not read by --diffusion {args.diffusion}, whose scheduler takes none of it; drop it")
    if args.snr_gamma is not None and args.diffusion != "ddpm":
        parser.error("--snr_gamma (Min-SNR) applies to --diffusion ddpm only")
    if args.dataset_name and args.train_data_dir:
        parser.error("--dataset_name and --train_data_dir: give one of them")
    if args.sequence_column and not args.dataset_name:
        parser.error("--sequence_column needs --dataset_name (a Hub data set or save_to_disk folder with that column)")
    check_sources(parser, args, "--pretrained_model_name_or_path", "--dataset_name", "--infonoise_schedule_from")


def unconditional_config(args) -> UnconditionalConfig:
    """The :class:`UnconditionalConfig` of train_unconditional.py's parsed arguments (after
    :func:`check_unconditional_args`)."""
    return UnconditionalConfig(
        **script_configs(args, report_to=args.logger),
        path_kind=DIFFUSION_PATHS[args.diffusion],
        scheduler_options={**{key: getattr(args, flag) for flag, key in SCHEDULER_FLAGS.items()}, "prediction_type": args.prediction_type},
        scheduler_options_given={SCHEDULER_FLAGS[flag]: f"--{flag}" for flag in args.scheduler_flags_given},
        prediction_type=args.prediction_type,
        snr_gamma=args.snr_gamma,
        pretrained_model_name_or_path=args.pretrained_model_name_or_path,
        model_config_name_or_path=args.model_config_name_or_path,
        revision=args.revision,
        resolution=args.resolution,
        sequence_column=args.sequence_column,
        alphabet=args.alphabet,
        eval_batch_size=args.eval_batch_size,
        save_images_epochs=args.save_images_epochs,
        save_model_epochs=args.save_model_epochs,
        use_ema=args.use_ema,
        ema_inv_gamma=args.ema_inv_gamma,
        ema_power=args.ema_power,
        ema_max_decay=args.ema_max_decay,
        # diffusers' --ddpm_num_inference_steps is the ddpm default; the other paths take theirs (NoisePath)
        num_inference_steps=args.num_inference_steps or (args.ddpm_num_inference_steps if args.diffusion == "ddpm" else None),
    )
