"""The text-to-image scripts' options at the edge (Stable Diffusion, SDXL, SD3, Flux): diffusers' model,
data, training, LoRA and validation arguments and :class:`TextToImageConfig`; the VP scripts'
``--prediction_type``/``--noise_offset``/``--input_perturbation``, their training scheduler and sampler;
the flow scripts' ``--weighting_scheme``/``--precondition_outputs``/``--training_mu`` (:class:`FlowLoss`),
their scheduler and sampler. The options all scripts share are :mod:`.args`."""

from __future__ import annotations

import argparse
import math

from ..argtypes import existing_dir_arg, positive_float, positive_int
from ..objective import DENSITY_SCHEMES, WEIGHTING_SCHEMES, Objective, scheme_density
from ..sampler import FIXED_DENSITY_NAMES, TrainingTimestepSampler
from .args import (
    add_common_training_args,
    add_noise_sampler_args,
    build_noise_sampler,
    check_mixed_precision_device,
    check_sources,
    script_configs,
)
from .datasets import DEFAULT_CAPTIONED_DATASET
from .flow import FlowLoss, training_mu
from .text_to_image import TextToImageConfig

__all__ = [
    "add_text_to_image_args",
    "check_text_to_image_args",
    "text_to_image_config",
    "DEFAULT_VP_NOISE_SAMPLER",
    "add_vp_args",
    "load_vp_scheduler",
    "build_vp_sampler",
    "add_flow_args",
    "check_flow_args",
    "flow_loss",
    "load_flow_scheduler",
    "build_flow_sampler",
]

#: what diffusers' VP scripts sample when no --noise_sampler is given
DEFAULT_VP_NOISE_SAMPLER = "uniform"


def add_text_to_image_args(parser: argparse.ArgumentParser, *, defaults: dict | None = None) -> None:
    """The arguments of diffusers' text-to-image examples that both text-to-image scripts take.

    Model (``--pretrained_model_name_or_path --revision --variant``), data (``--dataset_name
    --dataset_config_name --train_data_dir --image_column --caption_column --max_train_samples
    --resolution --center_crop --random_flip``), training (``--num_train_epochs
    --gradient_checkpointing --scale_lr --use_ema --allow_tf32 --report_to``), LoRA (``--use_lora
    --lora_rank --lora_alpha``), validation (``--validation_prompts --validation_epochs
    --validation_inference_steps --validation_guidance_scale``), then
    :func:`add_common_training_args` and :func:`add_noise_sampler_args`.

    ``--noise_sampler`` defaults to ``None`` here: each script resolves it (diffusers' own sampling
    unless InfoNoise or another sampler is asked for) and documents how.
    """
    d = {"resolution": 512, "output_dir": "infonoise-text-to-image", "lr_scheduler": "constant", **(defaults or {})}
    g = parser.add_argument_group("model")
    g.add_argument(
        "--pretrained_model_name_or_path",
        type=str,
        required=True,
        help="A diffusers pipeline folder or Hub id (the base model to fine-tune).",
    )
    g.add_argument("--revision", type=str, default=None, help="Revision of the pretrained model.")
    g.add_argument("--variant", type=str, default=None, help="Variant of the model files, e.g. fp16.")
    g = parser.add_argument_group("data")
    g.add_argument(
        "--dataset_name",
        type=str,
        default=None,
        help="A built-in offline captioned data set (fashion_mnist: 'a photo of a sneaker', ...; mnist, digits: "
        "'a handwritten digit 7'), a Hub data set name, or a local save_to_disk folder. Default: "
        f"{DEFAULT_CAPTIONED_DATASET} when --train_data_dir is not given either.",
    )
    g.add_argument("--dataset_config_name", type=str, default=None)
    g.add_argument(
        "--train_data_dir",
        type=existing_dir_arg,
        default=None,
        help="A folder of images with a metadata.jsonl giving each file_name its caption (datasets' imagefolder).",
    )
    g.add_argument("--image_column", type=str, default="image")
    g.add_argument(
        "--caption_column",
        type=str,
        default="text",
        help="Column holding a caption or a list of captions (one is drawn per example and epoch).",
    )
    g.add_argument("--max_train_samples", type=positive_int, default=None, help="Truncate the training set (debugging, quick runs).")
    g.add_argument("--resolution", type=positive_int, default=d["resolution"], help="Training images are resized and cropped to this.")
    g.add_argument("--center_crop", action="store_true", help="Center crop (default: random crop).")
    g.add_argument("--random_flip", action="store_true", help="Random horizontal flips.")
    g = parser.add_argument_group("training")
    g.add_argument("--num_train_epochs", type=positive_int, default=100)
    g.add_argument("--gradient_checkpointing", action="store_true")
    g.add_argument("--scale_lr", action="store_true", help="Scale the learning rate by GPUs, gradient accumulation steps and batch size.")
    g.add_argument("--use_ema", action="store_true", help="Keep an EMA of the trained model and save it (full fine-tuning).")
    g.add_argument("--allow_tf32", action="store_true", help="Allow TF32 matmuls on Ampere and newer GPUs.")
    g.add_argument("--report_to", type=str, default="tensorboard", help='"tensorboard", "wandb" or "none".')
    g = parser.add_argument_group("LoRA (peft)")
    g.add_argument("--use_lora", action="store_true", help="Train LoRA adapters on the attention projections only.")
    g.add_argument("--lora_rank", type=positive_int, default=4, help="LoRA rank r.")
    g.add_argument("--lora_alpha", type=positive_float, default=None, help="LoRA alpha (default: the rank, scale 1).")
    g = parser.add_argument_group("validation")
    g.add_argument(
        "--validation_prompts",
        type=str,
        nargs="+",
        default=None,
        help="Prompts sampled every --validation_epochs epochs and at the end; logged to the tracker.",
    )
    g.add_argument("--validation_epochs", type=positive_int, default=5)
    g.add_argument("--validation_inference_steps", type=positive_int, default=d.get("validation_inference_steps", 25))
    g.add_argument("--validation_guidance_scale", type=float, default=None, help="Default: the pipeline's.")
    add_common_training_args(parser, defaults=d)
    add_noise_sampler_args(parser)
    parser.set_defaults(lr_scheduler=d["lr_scheduler"], noise_sampler=None)


def check_text_to_image_args(parser: argparse.ArgumentParser, args) -> None:
    """Cross-argument checks shared by the text-to-image scripts (``parser.error`` on a conflict, on
    ``--mixed_precision fp16`` on the CPU, on a source that is not there: :func:`check_sources`)."""
    if args.dataset_name and args.train_data_dir:
        parser.error("--dataset_name and --train_data_dir: give one of them")
    if args.use_lora and args.use_ema:
        parser.error("--use_ema applies to full fine-tuning; LoRA runs train adapters only")
    if args.lora_rank < 1:
        parser.error(f"--lora_rank must be >= 1, got {args.lora_rank}")
    for name in ("validation_epochs", "checkpointing_steps", "gradient_accumulation_steps", "train_batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    check_mixed_precision_device(parser, args)
    check_sources(parser, args, "--pretrained_model_name_or_path", "--dataset_name", "--infonoise_schedule_from")


def text_to_image_config(args) -> TextToImageConfig:
    """The :class:`TextToImageConfig` of a text-to-image script's parsed arguments (after
    :func:`check_text_to_image_args`)."""
    return TextToImageConfig(
        **script_configs(args, default_dataset=DEFAULT_CAPTIONED_DATASET),
        pretrained_model_name_or_path=args.pretrained_model_name_or_path,
        revision=args.revision,
        variant=args.variant,
        use_lora=args.use_lora,
        lora_rank=args.lora_rank,
        lora_alpha=args.lora_alpha,
        mixed_precision=args.mixed_precision or "no",
        use_ema=args.use_ema,
        gradient_checkpointing=args.gradient_checkpointing,
        validation_prompts=tuple(args.validation_prompts or ()),
        validation_inference_steps=args.validation_inference_steps,
        validation_guidance_scale=args.validation_guidance_scale,
        learning_rate=args.learning_rate,
    )


# -- the VP text-to-image scripts (Stable Diffusion, SDXL) ----------------------------------------


def add_vp_args(parser: argparse.ArgumentParser, *, family: str) -> None:
    """``--prediction_type``, ``--noise_offset`` and ``--input_perturbation`` (diffusers' meaning)."""
    g = parser.add_argument_group(family)
    g.add_argument(
        "--prediction_type",
        type=str,
        default=None,
        choices=("epsilon", "v_prediction", "sample"),
        help="The loss parameterization (registered in the saved scheduler). Default: the scheduler's.",
    )
    g.add_argument(
        "--noise_offset",
        type=float,
        default=0.0,
        help="Offset noise (diffusers' meaning): add noise_offset·N(0, 1) per sample and channel to ε.",
    )
    g.add_argument(
        "--input_perturbation",
        type=float,
        default=0.0,
        help="Input perturbation (diffusers' meaning, Ning et al. 2023): the model input is noised with "
        "ε + input_perturbation·N(0, I) while the target keeps ε.",
    )


def load_vp_scheduler(args):
    """The training scheduler: ``DDPMScheduler`` from the model's ``scheduler`` folder (as diffusers'
    scripts do), with ``--prediction_type`` registered when given. It is saved with the pipeline (it carries
    the learned schedule): a config without ``clip_sample`` (SD's PNDM) gets ``False``, the SD pipelines'
    convention, not DDPM's default ``True`` (which they warn about and override)."""
    from diffusers import DDPMScheduler

    config = DDPMScheduler.load_config(args.pretrained_model_name_or_path, subfolder="scheduler", revision=args.revision)
    scheduler = DDPMScheduler.from_config({**config, "clip_sample": config.get("clip_sample", False)})
    if args.prediction_type is not None:
        scheduler.register_to_config(prediction_type=args.prediction_type)
    return scheduler


def build_vp_sampler(args, noise_scheduler) -> TrainingTimestepSampler:
    """The training-noise sampler for the loss a VP script trains (parameterization, Min-SNR); diffusers'
    own uniform t without ``--noise_sampler``."""
    return build_noise_sampler(
        args,
        noise_scheduler,
        objective=Objective.from_options(noise_scheduler, snr_gamma=args.snr_gamma),
        name=args.noise_sampler or DEFAULT_VP_NOISE_SAMPLER,
    )


# -- the rectified-flow scripts (SD3, Flux) ---------------------------------------------------------


def add_flow_args(parser: argparse.ArgumentParser, *, default_scheme: str, precondition_outputs: bool, max_sequence_length: int) -> None:
    """``--weighting_scheme`` (default ``default_scheme``, the diffusers script's), with
    ``precondition_outputs`` also ``--precondition_outputs``, ``--max_sequence_length`` (T5 tokens) and
    ``--training_mu``."""
    g = parser.add_argument_group("rectified flow")
    g.add_argument(
        "--weighting_scheme",
        type=str,
        default=None,
        choices=WEIGHTING_SCHEMES,
        help=f"diffusers' meaning (default {default_scheme}): sigma_sqrt and cosmap weight the loss (the sampler "
        "is told), logit_normal and mode are sampling densities, used when --noise_sampler is not given "
        "and as InfoNoise's warm-up/floor density when it is; none, sigma_sqrt and cosmap sample s "
        "uniformly when --noise_sampler is not given.",
    )
    if precondition_outputs:
        g.add_argument(
            "--precondition_outputs",
            type=int,
            nargs="?",
            const=1,
            default=1,
            choices=(0, 1),
            help="1 (default, as diffusers): the loss is on x0 = x - s*v_pred (prediction_type 'sample'); "
            "0: the loss is on the velocity noise - x0 (prediction_type 'flow').",
        )
    g.add_argument("--max_sequence_length", type=positive_int, default=max_sequence_length, help="T5 tokens per prompt.")
    g.add_argument(
        "--training_mu",
        type=float,
        default=None,
        help="Schedulers with dynamic shifting (Flux): the mu of the training levels' path. Default 0: the "
        "scheduler's unshifted table, which diffusers' Flux training scripts draw from; inference shifts "
        "by the image size.",
    )


def check_flow_args(parser: argparse.ArgumentParser, args) -> None:
    """``parser.error`` on flow options that conflict (``--snr_gamma``; two sampling densities)."""
    if args.snr_gamma is not None:
        parser.error("--snr_gamma is Min-SNR for VP models; flow models weight their loss with --weighting_scheme")
    if args.training_mu is not None and not (math.isfinite(args.training_mu) and abs(args.training_mu) <= 20):
        parser.error(f"--training_mu must be a finite number with |mu| <= 20 (a shift of exp(mu)), got {args.training_mu}")
    fixed = args.noise_sampler in FIXED_DENSITY_NAMES
    if fixed and args.weighting_scheme in DENSITY_SCHEMES and args.noise_sampler != args.weighting_scheme:
        parser.error(
            f"--weighting_scheme {args.weighting_scheme} is a sampling density and --noise_sampler "
            f"{args.noise_sampler} another one; give one of them (or --noise_sampler infonoise, which starts "
            f"from {args.weighting_scheme})"
        )


def flow_loss(args, noise_scheduler, *, default_scheme: str) -> FlowLoss:
    """The :class:`FlowLoss` of a flow script's parsed options on its ``noise_scheduler``
    (:meth:`~diffusers_infonoise.objective.Objective.from_options`)."""
    scheme = args.weighting_scheme or default_scheme
    density = scheme_density(scheme)
    return FlowLoss(
        scheme=scheme,
        objective=Objective.from_options(
            noise_scheduler, weighting_scheme=scheme, precondition_outputs=getattr(args, "precondition_outputs", None)
        ),
        density=density,
        noise_sampler=args.noise_sampler or density,
    )


def load_flow_scheduler(args):
    """The model's own ``FlowMatchEulerDiscreteScheduler`` (its ``shift``, or dynamic shifting, included)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler.from_pretrained(
        args.pretrained_model_name_or_path, subfolder="scheduler", revision=args.revision
    )


def build_flow_sampler(args, noise_scheduler, *, default_scheme: str) -> TrainingTimestepSampler:
    """The training-noise sampler of a flow script, told its loss (:func:`flow_loss`) and built on the
    training path (:func:`training_mu`)."""
    loss = flow_loss(args, noise_scheduler, default_scheme=default_scheme)
    return build_noise_sampler(
        args,
        noise_scheduler,
        objective=loss.objective,
        name=loss.noise_sampler,
        default_base=loss.density,
        mu=training_mu(noise_scheduler, args.training_mu),
    )
