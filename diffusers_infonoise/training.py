"""What the training scripts share: arguments, data, the per-step loss, schedule logging,
checkpoint hooks, model cards and Hub pushes.

The scripts in ``training_scripts/`` stay thin: they parse arguments, build the model and pipeline,
and run the loop; everything else is here, written once. Nothing here re-implements the sampler,
the paths or the serialization: it calls :mod:`diffusers_infonoise`.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
from typing import Callable, Iterable

import numpy as np
import torch

from .samplers import SAMPLER_NAMES, NoiseLevels, TrainingTimestepSampler, make_sampler
from .serialization import load_sampler_state, save_sampler_state

logger = logging.getLogger(__name__)

__all__ = [
    "add_noise_sampler_args",
    "add_common_training_args",
    "build_noise_sampler",
    "describe_noise_schedule",
    "show_noise_schedule",
    "load_image_dataset",
    "image_transform",
    "weighted_loss",
    "training_target",
    "tracker_config",
    "per_sample_mse",
    "make_optimizer_and_lr_scheduler",
    "backward_and_step",
    "finish_micro_batch",
    "ScheduleMonitor",
    "register_sampler_checkpointing",
    "resolve_resume_checkpoint",
    "optimizer_steps_per_epoch",
    "resume_training_state",
    "size_warmup_to_run",
    "prune_checkpoints",
    "maybe_save_checkpoint",
    "save_image_grid",
    "render_model_card",
    "push_output_dir",
    # text-to-image
    "add_text_to_image_args",
    "check_text_to_image_args",
    "load_captioned_dataset",
    "AugmentedImageDataset",
    "CaptionedImageDataset",
    "EpochShuffleSampler",
    "collate_captioned",
    "captioned_dataloader",
    "encode_latents",
    "weight_dtype_of",
    "make_accelerator",
    "start_text_to_image_run",
    "UNET_LORA_TARGETS",
    "SD3_LORA_TARGETS",
    "add_lora_adapter",
    "lora_layers",
    "load_lora_layers",
    "setup_trained_model",
    "register_model_checkpointing",
    "prepare_text_to_image_training",
    "log_validation_images",
    "store_learned_schedule",
    "training_length",
    "run_training_loop",
    "resolve_infonoise_base",
    "ema_weights",
    "save_text_to_image_outputs",
]


# ----------------------------------------------------------------------------------------------
# arguments
# ----------------------------------------------------------------------------------------------


def _gate_arg(value: str):
    from .estimator import GATE_RULES

    if value.lower() in ("none", "off"):
        return None
    if value in GATE_RULES:
        return value
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"accepted values: {', '.join(GATE_RULES)}, none, or a positive float pivot (VE sigma); got {value!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"the pivot must be > 0, got {value}")
    return v


def _cap_arg(value: str):
    if value.lower() in ("none", "auto"):
        return value.lower()
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"accepted values: 'none', 'auto' or a float > 0, got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"accepted values: 'none', 'auto' or a float > 0, got {value!r}")
    return v


def _warmup_arg(value: str):
    if value == "auto":
        return "auto"
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"accepted values: 'auto' or an int >= 0, got {value!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"accepted values: 'auto' or an int >= 0, got {value!r}")
    return v


def add_noise_sampler_args(parser: argparse.ArgumentParser) -> None:
    """``--noise_sampler``, its ``--infonoise_*`` hyperparameters, baseline density parameters,
    ``--snr_gamma`` and ``--show_noise_schedule``."""
    g = parser.add_argument_group("training-noise sampler (diffusers-infonoise)")
    g.add_argument("--noise_sampler", type=str, default="infonoise", choices=SAMPLER_NAMES,
                   help="Distribution of training noise levels. 'infonoise' adapts it to the conditional-entropy rate.")
    g.add_argument("--infonoise_num_bins", type=int, default=64, help="Bins uniform in log sigma.")
    g.add_argument("--infonoise_warmup_steps", type=_warmup_arg, default="auto",
                   help="Optimizer steps on the base density; 'auto': a tenth of the run, between one refresh and 500.")
    g.add_argument("--infonoise_refresh_every", type=int, default=50, help="Optimizer steps between refreshes of pi.")
    g.add_argument("--infonoise_ema_decay", type=float, default=0.9, help="Weight on the old bin value at a refresh.")
    g.add_argument("--infonoise_min_count", type=int, default=8,
                   help="Samples a bin needs to be updated; a bin with fewer keeps them for the next refresh.")
    g.add_argument("--infonoise_smoothing", type=float, default=1.0, help="Gaussian smoothing width in bins (0: off).")
    g.add_argument("--infonoise_gate", type=_gate_arg, default="auto",
                   help="Clean-end gate: 'auto' (a tenth of the smallest gap between the data's values: 0.2 on binarized "
                        "data, none on 8-bit or continuous data), 'profile' (the paper's rule, repaired), 'paper' (as "
                        "first implemented), 'none', or a pinned VE sigma such as 0.2 (METHOD.md 5.5).")
    g.add_argument("--infonoise_gate_fallback", type=float, default=0.2,
                   help="Pivot used while the gate rule has nothing to go on (no data seen yet) or misfires.")
    g.add_argument("--infonoise_floor", type=float, default=0.05,
                   help="Share of the effective allocation pi*w given to the base density (METHOD.md 5.7).")
    g.add_argument("--infonoise_floor_space", type=str, default="phi", choices=("phi", "pi"),
                   help="'phi': the floor mixes in pi*w (METHOD.md 5.7); 'pi': the former mixing in pi (comparison only).")
    g.add_argument("--infonoise_mmse_cap", type=_cap_arg, default=None,
                   help="Cap on the estimated x0 MMSE: 'none', 'auto' (the per-dimension variance of the data the "
                        "model is trained on: pixels, or the VAE latents; it bounds the Bayes MMSE) or a value. "
                        "Default: auto for epsilon/v prediction (the x0-space error of an imperfect model grows like "
                        "sigma^2 at high noise there), none otherwise.")
    g.add_argument("--infonoise_base", type=str, default=None,
                   help="Warm-up/floor density name (default: EDM log-normal on edm, uniform t on ddpm, logit-normal on flow).")
    g.add_argument("--edm_p_mean", type=float, default=-1.2, help="P_mean of 'edm_lognormal'.")
    g.add_argument("--edm_p_std", type=float, default=1.2, help="P_std of 'edm_lognormal'.")
    g.add_argument("--logit_mean", type=float, default=0.0,
                   help="Mean of 'logit_normal' on the flow noise level s = sigma/(1+sigma); POSITIVE means MORE noise "
                        "(SD3 paper convention; diffusers' own SD3 script uses the opposite sign).")
    g.add_argument("--logit_std", type=float, default=1.0, help="Std of 'logit_normal'.")
    g.add_argument("--mode_scale", type=float, default=1.29, help="Scale of SD3 'mode' sampling.")
    g.add_argument("--snr_gamma", type=float, default=None,
                   help="Min-SNR-gamma loss weighting (Hang et al. 2023); the sampler is told about it.")
    g.add_argument("--show_noise_schedule", action="store_true",
                   help="Print and plot the training-noise density these options produce, then exit.")


def add_common_training_args(parser: argparse.ArgumentParser, *, defaults: dict | None = None) -> None:
    """The optimizer, schedule, logging, checkpoint and Hub arguments of diffusers' example scripts."""
    d = {"learning_rate": 1e-4, "train_batch_size": 16, "lr_warmup_steps": 500, **(defaults or {})}
    a = parser.add_argument
    a("--output_dir", type=str, default=d.get("output_dir", "infonoise-model"))
    a("--cache_dir", type=str, default=None, help="Where downloaded datasets and models are cached.")
    a("--seed", type=int, default=None, help="A seed for reproducible training.")
    a("--train_batch_size", type=int, default=d["train_batch_size"], help="Batch size per device.")
    a("--max_train_steps", type=int, default=d.get("max_train_steps"), help="Total optimizer steps; overrides the epoch count.")
    a("--gradient_accumulation_steps", type=int, default=1)
    a("--learning_rate", type=float, default=d["learning_rate"])
    a("--lr_scheduler", type=str, default="cosine",
      help='One of "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup".')
    a("--lr_warmup_steps", type=int, default=d["lr_warmup_steps"])
    a("--adam_beta1", type=float, default=0.95 if d.get("unconditional") else 0.9)
    a("--adam_beta2", type=float, default=0.999)
    a("--adam_weight_decay", type=float, default=1e-6 if d.get("unconditional") else 1e-2)
    a("--adam_epsilon", type=float, default=1e-08)
    a("--max_grad_norm", type=float, default=1.0, help="Gradient clipping norm.")
    a("--mixed_precision", type=str, default=None, choices=["no", "fp16", "bf16"])
    a("--dataloader_num_workers", type=int, default=0)
    a("--checkpointing_steps", type=int, default=500, help="Save an accelerate checkpoint every X optimizer steps.")
    a("--checkpoints_total_limit", type=int, default=None, help="Max number of checkpoints to keep.")
    a("--resume_from_checkpoint", type=str, default=None, help='A checkpoint-* folder or "latest".')
    a("--logging_dir", type=str, default="logs", help="Tensorboard log directory, relative to output_dir.")
    a("--push_to_hub", action="store_true")
    a("--hub_model_id", type=str, default=None)
    a("--hub_token", type=str, default=None)
    a("--hub_private_repo", action="store_true")


def baseline_density_params(args, name: str | None) -> dict | None:
    """The density parameters the baseline flags give sampler/base ``name`` (``--edm_p_mean/--edm_p_std``,
    ``--logit_mean/--logit_std``, ``--mode_scale``), or None for a density without parameters."""
    return {
        "edm_lognormal": {"P_mean": args.edm_p_mean, "P_std": args.edm_p_std},
        "logit_normal": {"mean": args.logit_mean, "std": args.logit_std},
        "mode": {"scale": args.mode_scale},
    }.get(name)


def build_noise_sampler(
    args, noise_scheduler, *, prediction_type: str, loss_weighting="none", snr_gamma: float | None = None,
) -> TrainingTimestepSampler:
    """The sampler ``args.noise_sampler`` names, with the parameters of :func:`add_noise_sampler_args`.

    A base density named by ``--infonoise_base`` gets its parameters from the baseline flags too. The
    m̂ cap's ``auto`` is measured by the sampler on the data the script noises through it
    (``sampler.add_noise``): pixels, or VAE latents.
    """
    common = {"prediction_type": prediction_type, "loss_weighting": loss_weighting, "snr_gamma": snr_gamma}
    name = args.noise_sampler
    if name in ("infonoise", "kingma_gao"):
        base = args.infonoise_base
        if isinstance(base, str) and baseline_density_params(args, base) is not None:
            base = (base, baseline_density_params(args, base))
        kw = {
            "num_bins": args.infonoise_num_bins,
            "floor_space": args.infonoise_floor_space,
            "warmup_steps": args.infonoise_warmup_steps,
            "refresh_every": args.infonoise_refresh_every,
            "ema_decay": args.infonoise_ema_decay,
            "min_count": args.infonoise_min_count,
            "smoothing": args.infonoise_smoothing,
            "floor": args.infonoise_floor,
            "base": base,
        }
        if name == "infonoise":
            kw.update(gate=args.infonoise_gate, gate_fallback=args.infonoise_gate_fallback)
            cap = getattr(args, "infonoise_mmse_cap", None)
            if cap is not None:  # unset: the library's default (auto for ε and v)
                kw["mmse_cap"] = None if cap == "none" else cap
        return make_sampler(name, noise_scheduler, **common, **kw)
    return make_sampler(name, noise_scheduler, **common, **(baseline_density_params(args, name) or {}))


def describe_noise_schedule(sampler: TrainingTimestepSampler) -> str:
    """A short text table of the sampler's density: quantiles of σ and of the allocation π·w."""
    from .densities import bin_masses

    lo, hi = sampler.path.log_sigma_range
    edges = torch.linspace(lo, hi, 401, dtype=torch.float64)
    mass = bin_masses(sampler.density, edges)
    centres = 0.5 * (edges[1:] + edges[:-1])
    phi = mass * sampler.x0_loss_weight(torch.exp(centres))
    phi = phi / phi.sum()

    def quantiles(m):
        c = torch.cumsum(m / m.sum(), 0)
        idx = [torch.searchsorted(c, torch.tensor(q, dtype=torch.float64)).clamp(max=399) for q in (0.05, 0.25, 0.5, 0.75, 0.95)]
        return [math.exp(float(centres[i])) for i in idx]

    d = sampler.describe()
    lines = [
        f"noise sampler: {d['name']}  path: {sampler.path.kind}  prediction_type: {sampler.prediction_type}  "
        f"loss_weighting: {d['loss_weighting']}",
        f"VE sigma range: [{math.exp(lo):.4g}, {math.exp(hi):.4g}]",
        "             5%       25%      50%      75%      95%   (VE sigma quantiles)",
        "pi:     " + " ".join(f"{v:8.3g}" for v in quantiles(mass)),
        "pi*w:   " + " ".join(f"{v:8.3g}" for v in quantiles(phi)),
    ]
    return "\n".join(lines)


def show_noise_schedule(sampler: TrainingTimestepSampler, output_dir: str) -> str:
    """Print :func:`describe_noise_schedule` and save the schedule plot; returns the PNG path.
    Under a multi-process launch only global rank 0 (``RANK``) prints and writes."""
    from .diagnostics import plot_schedule

    path = os.path.join(output_dir, "noise_schedule.png")
    if int(os.environ.get("RANK", "0")) != 0:
        return path
    print(describe_noise_schedule(sampler))
    os.makedirs(output_dir, exist_ok=True)
    fig = plot_schedule(sampler, title=f"training-noise density: {sampler.name}")
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")
    return path


# ----------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------


def load_image_dataset(args, *, split: str = "train"):
    """A ``datasets.Dataset`` from ``--dataset_name`` (a built-in offline name, a Hub name, a local
    ``save_to_disk`` directory) or ``--train_data_dir`` (an image folder); MNIST when neither is set.

    Raises:
        ValueError: both or a bad name; FileNotFoundError (with the install command) for a missing asset.
    """
    import datasets

    from .data import is_builtin_dataset, load_builtin_dataset

    name = getattr(args, "dataset_name", None)
    data_dir = getattr(args, "train_data_dir", None)
    if name and data_dir:
        raise ValueError("--dataset_name and --train_data_dir: give one of them, not both")
    max_samples = getattr(args, "max_train_samples", None)
    if data_dir:
        ds = datasets.load_dataset("imagefolder", data_dir=data_dir, cache_dir=args.cache_dir, split="train")
    elif name is None or is_builtin_dataset(name):
        ds = load_builtin_dataset(name or "mnist", split, max_samples=max_samples, seed=args.seed or 0)
        max_samples = None
    elif os.path.isdir(name) and os.path.exists(os.path.join(name, "dataset_info.json")):
        ds = datasets.load_from_disk(name)
    elif os.path.isdir(name) and os.path.exists(os.path.join(name, "dataset_dict.json")):
        ds = datasets.load_from_disk(name)[split]
    else:
        ds = datasets.load_dataset(name, getattr(args, "dataset_config_name", None), cache_dir=args.cache_dir, split=split)
    if max_samples is not None:
        ds = ds.shuffle(seed=args.seed or 0).select(range(min(max_samples, len(ds))))
    return ds


def image_transform(resolution: int, *, center_crop: bool = False, random_flip: bool = False, channels: int = 1) -> Callable:
    """PIL image → float32 tensor (channels, resolution, resolution) in [−1, 1] (no torchvision).

    Resize (bilinear, shorter side to ``resolution``), crop (center or random), optional horizontal
    flip; mode ``"L"`` for 1 channel, ``"RGB"`` for 3.
    """
    from PIL import Image

    mode = {1: "L", 3: "RGB"}.get(channels)
    if mode is None:
        raise ValueError(f"channels: accepted values are 1 and 3, got {channels}")

    def transform(image, rng: np.random.Generator | None = None):
        rng = rng or np.random.default_rng()
        image = image.convert(mode)
        w, h = image.size
        scale = resolution / min(w, h)
        image = image.resize((max(resolution, round(w * scale)), max(resolution, round(h * scale))), Image.BILINEAR)
        w, h = image.size
        if center_crop:
            left, top = (w - resolution) // 2, (h - resolution) // 2
        else:
            left, top = int(rng.integers(0, w - resolution + 1)), int(rng.integers(0, h - resolution + 1))
        image = image.crop((left, top, left + resolution, top + resolution))
        if random_flip and rng.random() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        arr = np.asarray(image, dtype=np.float32) / 127.5 - 1.0
        arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
        return torch.from_numpy(np.ascontiguousarray(arr))

    return transform


# ----------------------------------------------------------------------------------------------
# loss
# ----------------------------------------------------------------------------------------------


def per_sample_mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(B,) float32 mean squared error over all but the batch dimension."""
    return ((pred.float() - target.float()) ** 2).mean(dim=list(range(1, pred.ndim)))


def training_target(sampler: TrainingTimestepSampler, noise_scheduler, x0: torch.Tensor, noise: torch.Tensor,
                    levels: NoiseLevels) -> torch.Tensor:
    """The regression target for the sampler's ``prediction_type`` (shape of ``x0``).

    ``sample`` → x0 (on EDM the prediction is the denoiser D); ``epsilon`` → ε; ``v_prediction`` →
    ``sqrt(ᾱ)·ε − sqrt(1 − ᾱ)·x0`` (``get_velocity``); ``flow`` → ``ε − x0`` (diffusers' velocity).
    """
    pt = sampler.prediction_type
    if pt == "sample":
        return x0
    if pt == "epsilon":
        return noise
    if pt == "v_prediction":
        return noise_scheduler.get_velocity(x0, noise, levels.timesteps)
    if pt == "flow":
        return noise - x0
    raise ValueError(f"prediction_type: the training scripts do not build targets for {pt!r}")


def tracker_config(args) -> dict:
    """``vars(args)`` restricted to what trackers accept as hyperparameters (int, float, str, bool)."""
    return {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool))}


def weighted_loss(sampler: TrainingTimestepSampler, levels: NoiseLevels, per_sample: torch.Tensor) -> torch.Tensor:
    """The scalar to backpropagate: mean of ``u(σ)·L`` (the user's loss weighting), times the
    importance weights of samplers that carry them (Kingma-Gao). The sampler only changes π."""
    u = sampler.loss_weight(levels.sigmas.detach().cpu().double()).to(per_sample.device, torch.float32)
    if levels.loss_weights is not None:
        u = u * levels.loss_weights.to(per_sample.device, torch.float32)
    return (u * per_sample).mean()


# ----------------------------------------------------------------------------------------------
# optimizer and the per-micro-batch update
# ----------------------------------------------------------------------------------------------


def make_optimizer_and_lr_scheduler(args, params, *, max_steps: int, num_processes: int) -> tuple:
    """``(optimizer, lr_scheduler)`` as diffusers' example scripts build them.

    AdamW on ``params`` with ``--learning_rate`` and the ``--adam_*`` arguments; with ``--scale_lr``
    (where the script has that flag) the rate is multiplied by the gradient accumulation steps, the
    per-device batch size and ``num_processes``. The schedule is diffusers' ``get_scheduler``
    (``--lr_scheduler``) over ``max_steps`` optimizer steps with ``--lr_warmup_steps`` of warm-up,
    both counts times ``num_processes``: once prepared by accelerate, the scheduler steps once per
    process at every optimizer step.
    """
    from diffusers.optimization import get_scheduler

    lr = args.learning_rate
    if getattr(args, "scale_lr", False):
        lr *= args.gradient_accumulation_steps * args.train_batch_size * num_processes
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(args.adam_beta1, args.adam_beta2),
                                  weight_decay=args.adam_weight_decay, eps=args.adam_epsilon)
    lr_scheduler = get_scheduler(args.lr_scheduler, optimizer=optimizer,
                                 num_warmup_steps=args.lr_warmup_steps * num_processes,
                                 num_training_steps=max_steps * num_processes)
    return optimizer, lr_scheduler


def backward_and_step(accelerator, args, loss: torch.Tensor, *, optimizer, lr_scheduler, params) -> None:
    """The update of one micro-batch, inside ``accelerator.accumulate(model)``: backpropagate
    ``loss``; when the gradients are synchronized (an optimizer step) clip those of ``params`` to
    ``--max_grad_norm`` (0 or None: no clipping); step the optimizer and the LR schedule and zero the
    gradients (the prepared optimizer and schedule skip the steps between accumulation boundaries)."""
    accelerator.backward(loss)
    if accelerator.sync_gradients and args.max_grad_norm:
        accelerator.clip_grad_norm_(params, args.max_grad_norm)
    optimizer.step()
    lr_scheduler.step()
    optimizer.zero_grad()


def finish_micro_batch(accelerator, sampler: TrainingTimestepSampler, monitor: ScheduleMonitor, levels: NoiseLevels,
                       per_sample: torch.Tensor, *, ema=None, params=None) -> bool:
    """After :func:`backward_and_step`, outside ``accelerate.accumulate``: the sampler and the
    ``monitor`` get the micro-batch's unweighted per-sample loss; at an optimizer step (synchronized
    gradients) the sampler then counts the step (``sampler.step()``, which may refresh π) and the
    EMA, if any, follows ``params``. Returns whether this micro-batch ended an optimizer step."""
    sampler.update(levels, per_sample.detach())
    monitor.observe(levels, per_sample.detach())
    if not accelerator.sync_gradients:
        return False
    sampler.step()
    if ema is not None:
        ema.step(params)
    return True


# ----------------------------------------------------------------------------------------------
# monitoring the schedule during training
# ----------------------------------------------------------------------------------------------


class ScheduleMonitor:
    """Per-step bookkeeping of the noise schedule for trackers, plots and cross-rank checks.

    * ``observe(levels, per_sample_x0_error)`` every micro-batch: collects drawn log σ and the loss
      per noise-level quartile (four equal-width log-σ intervals of the path's range, q1 = cleanest).
    * ``after_step(accelerator, global_step)`` every optimizer step: returns scalars to log and,
      when the adaptive sampler refreshed π, saves and logs the schedule plot and the histogram of
      drawn levels, and checks that every rank holds the same π (its hash is logged).
    """

    def __init__(self, sampler: TrainingTimestepSampler, output_dir: str | None, *, plot_every: int | None = None):
        self.sampler = sampler
        self.output_dir = output_dir
        # Rendering the two figures takes ~1-4 s of CPU: with plot_every=N they are drawn at the
        # first refresh and then at a refresh at least N optimizer steps after the last plot
        # (None: at every refresh). The π check and the logged scalars happen at every refresh.
        self.plot_every = plot_every
        self._last_plot: int | None = None
        lo, hi = sampler.path.log_sigma_range
        self.quartile_edges = torch.linspace(lo, hi, 5, dtype=torch.float64)
        self._drawn: list[torch.Tensor] = []
        self._q_sum = torch.zeros(4, dtype=torch.float64)
        self._q_cnt = torch.zeros(4, dtype=torch.float64)
        self._seen_updates = getattr(sampler, "num_updates", 0)

    def observe(self, levels: NoiseLevels, per_sample_loss: torch.Tensor) -> None:
        x = torch.log(levels.sigmas.detach().cpu().double())
        self._drawn.append(x)
        q = (torch.searchsorted(self.quartile_edges[1:-1], torch.nan_to_num(x, posinf=1e300), right=True)).clamp(0, 3)
        loss = per_sample_loss.detach().cpu().double()
        ok = torch.isfinite(loss)
        self._q_sum.index_add_(0, q[ok], loss[ok])
        self._q_cnt.index_add_(0, q[ok], torch.ones_like(loss[ok]))

    def after_step(self, accelerator, global_step: int) -> dict:
        logs = {}
        for i in range(4):
            if self._q_cnt[i] > 0:
                logs[f"loss_q{i + 1}"] = float(self._q_sum[i] / self._q_cnt[i])
        self._q_sum.zero_()
        self._q_cnt.zero_()
        updates = getattr(self.sampler, "num_updates", 0)
        if updates != self._seen_updates:
            self._seen_updates = updates
            logs.update(self._on_refresh(accelerator, global_step))
        elif len(self._drawn) > 10_000:
            self._drawn = self._drawn[-1000:]
        return logs

    def _on_refresh(self, accelerator, global_step: int) -> dict:
        from .diagnostics import plot_level_histogram, plot_schedule

        probs = self.sampler.probs.to(accelerator.device, torch.float64)
        gathered = accelerator.gather(probs.unsqueeze(0))
        if not bool((gathered == gathered[0:1]).all()):
            raise RuntimeError("noise sampler: ranks hold different schedules after a refresh (statistics were not reduced)")
        # Every rank logs its own hash (a plain ``logging`` logger, not accelerate's main-only one), tagged
        # with its rank, so that a multi-process log shows the schedules agree.
        logger.info(f"[rank {accelerator.process_index}] step {global_step}: pi refreshed (hash {self.sampler.pi_hash()}, "
                    f"gate {self.sampler.estimator.last_gate.source} {self.sampler.estimator.last_gate.pivot})")
        logs = {"infonoise/num_updates": float(self.sampler.num_updates)}
        refresh = getattr(self.sampler, "last_refresh", {}) or {}
        if refresh.get("tv_phi_rho") is not None:  # the check of METHOD.md §5: TV(φ, ρ̂) ≤ η + 0.02
            logs["infonoise/tv_phi_rho"] = float(refresh["tv_phi_rho"])
        gate = self.sampler.estimator.last_gate
        if gate.pivot is not None:
            logs["infonoise/gate_pivot"] = float(gate.pivot)
        if accelerator.is_main_process and self.output_dir:
            # one JSON line per refresh: how π moved during training (read by the online-vs-offline study)
            os.makedirs(os.path.join(self.output_dir, "schedule"), exist_ok=True)
            with open(os.path.join(self.output_dir, "schedule", "history.jsonl"), "a") as f:
                f.write(json.dumps({"step": global_step, "probs": self.sampler.probs.tolist(),
                                    "gate_pivot": gate.pivot, "gate_source": gate.source,
                                    "tv_phi_rho": refresh.get("tv_phi_rho")}) + "\n")
        if self.plot_every is not None and self._last_plot is not None and global_step - self._last_plot < self.plot_every:
            if len(self._drawn) > 10_000:
                self._drawn = self._drawn[-1000:]
            return logs
        self._last_plot = global_step
        drawn = torch.cat(self._drawn) if self._drawn else torch.zeros(0, dtype=torch.float64)
        self._drawn = []
        if accelerator.is_main_process and self.output_dir:
            import matplotlib.pyplot as plt

            folder = os.path.join(self.output_dir, "schedule")
            os.makedirs(folder, exist_ok=True)
            figs = {"schedule": plot_schedule(self.sampler, title=f"step {global_step}"),
                    "drawn_levels": plot_level_histogram(drawn, sampler=self.sampler)}
            for name, fig in figs.items():
                fig.savefig(os.path.join(folder, f"{name}_{global_step:07d}.png"), dpi=80)
                _log_figure(accelerator, f"infonoise/{name}", fig, global_step)
                plt.close(fig)
        return logs


def _log_figure(accelerator, tag: str, fig, step: int) -> None:
    for tracker in accelerator.trackers:
        if tracker.name == "tensorboard":
            tracker.writer.add_figure(tag, fig, global_step=step, close=False)
        elif tracker.name == "wandb":
            import wandb

            tracker.log({tag: wandb.Image(fig)}, step=step)


# ----------------------------------------------------------------------------------------------
# checkpoints
# ----------------------------------------------------------------------------------------------

SAMPLER_SUBDIR = "noise_sampler"


def register_sampler_checkpointing(accelerator, sampler: TrainingTimestepSampler, generator: torch.Generator | None) -> None:
    """Save and restore the sampler (and its drawing generator) with ``accelerator.save_state``/``load_state``.

    The state goes to ``checkpoint-*/noise_sampler/`` as safetensors + JSON (no pickle); each rank
    writes its own generator state (``rank_{i}``) since every rank draws its own levels. Loading a
    checkpoint without it warns and keeps the fresh sampler.
    """

    def folder(root: str) -> str:
        return os.path.join(root, SAMPLER_SUBDIR, f"rank_{accelerator.process_index}")

    def save_hook(models, weights, output_dir):
        save_sampler_state(sampler, folder(output_dir), generator=generator)

    def load_hook(models, input_dir):
        path = folder(input_dir)
        if not load_sampler_state(sampler, path, generator=generator):
            fallback = os.path.join(input_dir, SAMPLER_SUBDIR, "rank_0")
            if load_sampler_state(sampler, fallback):
                logger.warning(f"{input_dir}: no sampler state for rank {accelerator.process_index}; loaded rank 0's "
                               "schedule, this rank's draws restart from its seed")
            else:
                logger.warning(f"{input_dir}: the checkpoint has no noise-sampler state; the sampler starts afresh "
                               "(base density, empty statistics, draws from its seed); its step count continues from "
                               "the checkpoint, so pi adapts at the first refresh with enough new samples")

    accelerator.register_save_state_pre_hook(save_hook)
    accelerator.register_load_state_pre_hook(load_hook)
    # Every rank must write its generator state, not only the main process: accelerate calls the
    # pre-hooks on every process.


def resolve_resume_checkpoint(output_dir: str, resume_from_checkpoint: str | None) -> str | None:
    """The checkpoint folder ``--resume_from_checkpoint`` names (``"latest"``: the newest
    ``checkpoint-N`` in ``output_dir``), or None when there is none."""
    if not resume_from_checkpoint:
        return None
    if resume_from_checkpoint != "latest":
        path = resume_from_checkpoint if os.path.isdir(resume_from_checkpoint) else os.path.join(output_dir, resume_from_checkpoint)
        if not os.path.isdir(path):
            raise ValueError(f"--resume_from_checkpoint: {resume_from_checkpoint!r} is neither 'latest' nor a checkpoint folder")
        return path
    found = [d for d in os.listdir(output_dir) if re.fullmatch(r"checkpoint-\d+", d)] if os.path.isdir(output_dir) else []
    if not found:
        return None
    return os.path.join(output_dir, max(found, key=lambda d: int(d.split("-")[1])))


def optimizer_steps_per_epoch(args, dataloader) -> int:
    """Optimizer steps in one pass over a *prepared* dataloader: ``ceil(len(dataloader) /
    gradient_accumulation_steps)``, at least 1. Its length is this process's batches, and accelerate
    also steps at the end of the dataloader, so an epoch's last update may take fewer than
    ``gradient_accumulation_steps`` micro-batches (the next epoch's accumulation starts afresh)."""
    return max(1, math.ceil(len(dataloader) / args.gradient_accumulation_steps))


def resume_training_state(accelerator, args, sampler: TrainingTimestepSampler, dataloader) -> tuple[int, int, int]:
    """Resume from ``--resume_from_checkpoint``; returns ``(global_step, first_epoch, skip_batches)``.

    ``(0, 0, 0)`` without a checkpoint to resume from (when ``"latest"`` finds none, a warning says
    the run starts afresh). Otherwise ``accelerator.load_state`` restores the checkpoint (the
    registered hooks bring back the model, the EMA and the sampler), ``global_step`` is the ``N`` of
    ``checkpoint-N``, and a sampler the checkpoint held no state for counts its steps from there.
    Epochs are counted in optimizer steps (:func:`optimizer_steps_per_epoch` of the *prepared*
    ``dataloader``): the run continues in epoch ``first_epoch`` after the ``skip_batches``
    micro-batches of the updates that epoch had finished.
    """
    resume_dir = resolve_resume_checkpoint(args.output_dir, args.resume_from_checkpoint)
    if args.resume_from_checkpoint and resume_dir is None:
        logger.warning(f"--resume_from_checkpoint {args.resume_from_checkpoint}: no checkpoint found, starting afresh")
    if not resume_dir:
        return 0, 0, 0
    accelerator.print(f"Resuming from {resume_dir}")
    accelerator.load_state(resume_dir)
    global_step = int(os.path.basename(resume_dir.rstrip("/")).split("-")[1])
    if sampler.optimizer_step != global_step:
        sampler.optimizer_step = global_step  # a checkpoint without sampler state: count from here
    first_epoch, updates_done = divmod(global_step, optimizer_steps_per_epoch(args, dataloader))
    return global_step, first_epoch, updates_done * args.gradient_accumulation_steps


def maybe_save_checkpoint(accelerator, args, global_step: int) -> None:
    """Every ``--checkpointing_steps`` optimizer steps: prune to ``--checkpoints_total_limit`` (main
    process) and ``accelerator.save_state`` into ``output_dir/checkpoint-<step>`` (all processes)."""
    if global_step % args.checkpointing_steps:
        return
    if accelerator.is_main_process:
        prune_checkpoints(args.output_dir, args.checkpoints_total_limit)
    accelerator.wait_for_everyone()
    accelerator.save_state(os.path.join(args.output_dir, f"checkpoint-{global_step}"))


def prune_checkpoints(output_dir: str, total_limit: int | None) -> None:
    """Delete the oldest ``checkpoint-N`` folders so that at most ``total_limit − 1`` remain before a save."""
    if not total_limit:
        return
    found = sorted((d for d in os.listdir(output_dir) if re.fullmatch(r"checkpoint-\d+", d)), key=lambda d: int(d.split("-")[1]))
    for d in found[: max(0, len(found) - total_limit + 1)]:
        shutil.rmtree(os.path.join(output_dir, d))


# ----------------------------------------------------------------------------------------------
# outputs
# ----------------------------------------------------------------------------------------------


def save_image_grid(images: torch.Tensor, path: str, *, nrow: int | None = None) -> str:
    """Save (B, C, H, W) images in [0, 1] as one PNG grid; returns ``path``."""
    from PIL import Image

    b, c, h, w = images.shape
    nrow = nrow or int(math.ceil(math.sqrt(b)))
    ncol = int(math.ceil(b / nrow))
    grid = np.ones((ncol * (h + 2) + 2, nrow * (w + 2) + 2, c), dtype=np.float32)
    arr = images.detach().cpu().float().clamp(0, 1).permute(0, 2, 3, 1).numpy()
    for i in range(b):
        r, q = divmod(i, nrow)
        grid[2 + r * (h + 2): 2 + r * (h + 2) + h, 2 + q * (w + 2): 2 + q * (w + 2) + w] = arr[i]
    img = (grid * 255).round().astype(np.uint8)
    Image.fromarray(img[..., 0] if c == 1 else img).save(path)
    return path


def render_model_card(template: str, output_path: str, **context) -> str:
    """Render ``model_cards/<template>`` (Jinja2) with ``context`` into ``output_path``; returns the text."""
    import jinja2

    here = os.path.dirname(os.path.abspath(__file__))
    search = [os.path.join(os.path.dirname(here), "model_cards"), os.path.join(here, "model_cards")]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(search), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    text = env.get_template(template).render(**context)
    with open(output_path, "w") as f:
        f.write(text)
    return text


def push_output_dir(output_dir: str, *, repo_id: str, token: str | None = None, private: bool = False,
                    commit_message: str = "Upload InfoNoise-trained pipeline") -> str:
    """Create the Hub repository and upload the final pipeline, card and plots (not ``checkpoint-*``
    folders or logs). Returns the repository id."""
    from huggingface_hub import create_repo, upload_folder

    repo_id = create_repo(repo_id, exist_ok=True, private=private, token=token).repo_id
    upload_folder(repo_id=repo_id, folder_path=output_dir, token=token, commit_message=commit_message,
                  ignore_patterns=["checkpoint-*", "checkpoint-*/**", "logs/**", "step_*", "epoch_*"])
    return repo_id


# ----------------------------------------------------------------------------------------------
# text-to-image: what train_text_to_image.py (Stable Diffusion, VP) and
# train_text_to_image_sd3.py (SD3, rectified flow) share
# ----------------------------------------------------------------------------------------------

DEFAULT_CAPTIONED_DATASET = "fashion_mnist"


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
    g.add_argument("--pretrained_model_name_or_path", type=str, required=True,
                   help="A diffusers pipeline folder or Hub id (the base model to fine-tune).")
    g.add_argument("--revision", type=str, default=None, help="Revision of the pretrained model.")
    g.add_argument("--variant", type=str, default=None, help="Variant of the model files, e.g. fp16.")
    g = parser.add_argument_group("data")
    g.add_argument("--dataset_name", type=str, default=None,
                   help="A built-in offline captioned data set (fashion_mnist: 'a photo of a sneaker', ...; mnist, digits: "
                        "'a handwritten digit 7'), a Hub data set name, or a local save_to_disk folder. Default: "
                        f"{DEFAULT_CAPTIONED_DATASET} when --train_data_dir is not given either.")
    g.add_argument("--dataset_config_name", type=str, default=None)
    g.add_argument("--train_data_dir", type=str, default=None,
                   help="A folder of images with a metadata.jsonl giving each file_name its caption (datasets' imagefolder).")
    g.add_argument("--image_column", type=str, default="image")
    g.add_argument("--caption_column", type=str, default="text",
                   help="Column holding a caption or a list of captions (one is drawn per example and epoch).")
    g.add_argument("--max_train_samples", type=int, default=None, help="Truncate the training set (debugging, quick runs).")
    g.add_argument("--resolution", type=int, default=d["resolution"], help="Training images are resized and cropped to this.")
    g.add_argument("--center_crop", action="store_true", help="Center crop (default: random crop).")
    g.add_argument("--random_flip", action="store_true", help="Random horizontal flips.")
    g = parser.add_argument_group("training")
    g.add_argument("--num_train_epochs", type=int, default=100)
    g.add_argument("--gradient_checkpointing", action="store_true")
    g.add_argument("--scale_lr", action="store_true",
                   help="Scale the learning rate by GPUs, gradient accumulation steps and batch size.")
    g.add_argument("--use_ema", action="store_true", help="Keep an EMA of the trained model and save it (full fine-tuning).")
    g.add_argument("--allow_tf32", action="store_true", help="Allow TF32 matmuls on Ampere and newer GPUs.")
    g.add_argument("--report_to", type=str, default="tensorboard", help='"tensorboard", "wandb" or "none".')
    g.add_argument("--schedule_plot_steps", type=int, default=500,
                   help="Save and log the schedule plot and the histogram of drawn levels at a refresh of pi at most "
                        "every this many optimizer steps (rendering takes about a second of CPU); 0: at every refresh.")
    g = parser.add_argument_group("LoRA (peft)")
    g.add_argument("--use_lora", action="store_true", help="Train LoRA adapters on the attention projections only.")
    g.add_argument("--lora_rank", type=int, default=4, help="LoRA rank r.")
    g.add_argument("--lora_alpha", type=float, default=None, help="LoRA alpha (default: the rank, scale 1).")
    g = parser.add_argument_group("validation")
    g.add_argument("--validation_prompts", type=str, nargs="+", default=None,
                   help="Prompts sampled every --validation_epochs epochs and at the end; logged to the tracker.")
    g.add_argument("--validation_epochs", type=int, default=5)
    g.add_argument("--validation_inference_steps", type=int, default=d.get("validation_inference_steps", 25))
    g.add_argument("--validation_guidance_scale", type=float, default=None, help="Default: the pipeline's.")
    add_common_training_args(parser, defaults=d)
    add_noise_sampler_args(parser)
    parser.set_defaults(lr_scheduler=d["lr_scheduler"], noise_sampler=None)


def check_text_to_image_args(parser: argparse.ArgumentParser, args) -> None:
    """Cross-argument checks shared by the text-to-image scripts (``parser.error`` on a conflict)."""
    if args.dataset_name and args.train_data_dir:
        parser.error("--dataset_name and --train_data_dir: give one of them")
    if args.dataset_name is None and args.train_data_dir is None:
        args.dataset_name = DEFAULT_CAPTIONED_DATASET
    if args.use_lora and args.use_ema:
        parser.error("--use_ema applies to full fine-tuning; LoRA runs train adapters only")
    if args.lora_rank < 1:
        parser.error(f"--lora_rank must be >= 1, got {args.lora_rank}")
    if args.report_to == "none":
        args.report_to = None
    for name in ("validation_epochs", "checkpointing_steps", "gradient_accumulation_steps", "train_batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")


def load_captioned_dataset(args):
    """The training ``datasets.Dataset`` of :func:`load_image_dataset`, checked for the image and
    caption columns (``ValueError`` naming the columns there are)."""
    ds = load_image_dataset(args)
    for flag, col in (("--image_column", args.image_column), ("--caption_column", args.caption_column)):
        if col not in ds.column_names:
            raise ValueError(f"{flag}: {col!r} is not a column of the data set; its columns are {ds.column_names}")
    return ds


class AugmentedImageDataset(torch.utils.data.Dataset):
    """(C, R, R) float32 images in [−1, 1] from an image column, through :func:`image_transform`.

    The random crop and flip depend only on ``(seed, epoch, index)``, not on a global random state:
    the same examples whatever ``--dataloader_num_workers`` is (each worker would otherwise carry a
    copy of one generator and repeat the others' augmentations), and a resumed run sees the
    uninterrupted one's. Call :meth:`set_epoch` at each epoch.
    """

    def __init__(self, dataset, *, image_column: str, resolution: int, center_crop: bool = False,
                 random_flip: bool = False, seed: int = 0, channels: int = 1):
        self.dataset, self.image_column = dataset, image_column
        self.transform = image_transform(resolution, center_crop=center_crop, random_flip=random_flip, channels=channels)
        self.seed, self.epoch = int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def _rng(self, index: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.epoch, int(index)])

    def __getitem__(self, index: int):
        return self.transform(self.dataset[int(index)][self.image_column], self._rng(index))


class CaptionedImageDataset(AugmentedImageDataset):
    """``{"pixel_values": (3, R, R) float32 in [−1, 1], "caption": str}`` examples of a captioned data set.

    As :class:`AugmentedImageDataset`; the choice among several captions also depends only on
    ``(seed, epoch, index)``. Images are converted to RGB (the built-in sets are grayscale).
    """

    def __init__(self, dataset, *, image_column: str, caption_column: str, resolution: int, center_crop: bool = False,
                 random_flip: bool = False, seed: int = 0):
        super().__init__(dataset, image_column=image_column, resolution=resolution, center_crop=center_crop,
                         random_flip=random_flip, seed=seed, channels=3)
        self.caption_column = caption_column

    def __getitem__(self, index: int) -> dict:
        example = self.dataset[int(index)]
        rng = self._rng(index)
        caption = example[self.caption_column]
        if isinstance(caption, (list, tuple, np.ndarray)) and len(caption) > 0:
            caption = caption[int(rng.integers(len(caption)))]
        if not isinstance(caption, str):
            raise ValueError(f"--caption_column {self.caption_column!r}: example {index} holds {type(caption).__name__}, "
                             "expected a string or a list of strings")
        return {"pixel_values": self.transform(example[self.image_column], rng), "caption": caption}


class EpochShuffleSampler(torch.utils.data.Sampler):
    """A permutation of ``range(n)`` seeded by ``(seed, epoch)``; the same on every process.

    accelerate shards its batches across processes and ``skip_first_batches`` replays it exactly,
    so a resumed run continues with the batches the interrupted one would have seen.
    """

    def __init__(self, n: int, seed: int = 0):
        self.n, self.seed, self.epoch = int(n), int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())


def collate_captioned(examples: list[dict]) -> dict:
    """Stack ``pixel_values`` (B, 3, R, R) and list the captions."""
    return {"pixel_values": torch.stack([ex["pixel_values"] for ex in examples]).contiguous(),
            "captions": [ex["caption"] for ex in examples]}


def captioned_dataloader(args) -> tuple[torch.utils.data.DataLoader, CaptionedImageDataset, EpochShuffleSampler]:
    """The training DataLoader (``drop_last``) with its dataset and sampler (both take ``set_epoch``)."""
    ds = CaptionedImageDataset(load_captioned_dataset(args), image_column=args.image_column,
                               caption_column=args.caption_column, resolution=args.resolution,
                               center_crop=args.center_crop, random_flip=args.random_flip, seed=args.seed or 0)
    if len(ds) < args.train_batch_size:
        raise ValueError(f"--train_batch_size {args.train_batch_size} is larger than the data set ({len(ds)} examples)")
    order = EpochShuffleSampler(len(ds), seed=args.seed or 0)
    # its own generator: creating an iterator then draws the worker base seed from it, not from the
    # global random state, which a resumed run must find exactly as the interrupted one left it
    loader = torch.utils.data.DataLoader(ds, batch_size=args.train_batch_size, sampler=order, collate_fn=collate_captioned,
                                         num_workers=args.dataloader_num_workers, drop_last=True,
                                         generator=torch.Generator().manual_seed(args.seed or 0))
    return loader, ds, order


def encode_latents(vae, pixel_values: torch.Tensor) -> torch.Tensor:
    """VAE latents as the diffusion model sees them: ``(z − shift_factor)·scaling_factor`` with
    ``z = vae.encode(x).latent_dist.sample()``; ``shift_factor`` only where the VAE has one (SD3)."""
    latents = vae.encode(pixel_values.to(vae.device, vae.dtype)).latent_dist.sample()
    shift = getattr(vae.config, "shift_factor", None)
    if shift is not None:
        latents = latents - shift
    return latents * vae.config.scaling_factor


def weight_dtype_of(accelerator) -> torch.dtype:
    """The dtype of frozen modules under ``accelerator``'s mixed precision (float32 without)."""
    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(accelerator.mixed_precision, torch.float32)


def make_accelerator(args):
    """An ``Accelerator`` for diffusers-style scripts: gradient accumulation, mixed precision,
    ``--report_to`` tracker, logging under ``output_dir/logging_dir``."""
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    return Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=args.mixed_precision,
        log_with=args.report_to,
        project_config=ProjectConfiguration(project_dir=args.output_dir,
                                            logging_dir=os.path.join(args.output_dir, args.logging_dir)),
    )


def start_text_to_image_run(args, *, load_noise_scheduler: Callable, build_sampler: Callable) -> tuple:
    """The start of a text-to-image script's run; returns ``(noise_scheduler, sampler, accelerator)``.

    The training scheduler is the script's ``load_noise_scheduler(args)``, the noise sampler its
    ``build_sampler(args, noise_scheduler)``. With ``--show_noise_schedule`` the sampler's density is
    printed and plotted (:func:`show_noise_schedule`), there is nothing to train and ``accelerator``
    is None. Otherwise ``accelerator`` is the run's ``Accelerator`` (:func:`make_accelerator`), after
    the set-up diffusers' scripts do first: their logging format, the global seed (``--seed``), the
    output folder (main process) and TF32 matmuls (``--allow_tf32``).
    """
    from accelerate.utils import set_seed

    noise_scheduler = load_noise_scheduler(args)
    sampler = build_sampler(args, noise_scheduler)
    if args.show_noise_schedule:
        show_noise_schedule(sampler, args.output_dir)
        return noise_scheduler, sampler, None
    accelerator = make_accelerator(args)
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
    if args.seed is not None:
        set_seed(args.seed)
    if accelerator.is_main_process:
        os.makedirs(args.output_dir, exist_ok=True)
    if args.allow_tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
    return noise_scheduler, sampler, accelerator


#: peft target modules of diffusers' LoRA scripts
UNET_LORA_TARGETS = ("to_k", "to_q", "to_v", "to_out.0")
SD3_LORA_TARGETS = ("attn.add_k_proj", "attn.add_q_proj", "attn.add_v_proj", "attn.to_add_out",
                    "attn.to_k", "attn.to_out.0", "attn.to_q", "attn.to_v")


def add_lora_adapter(model, *, rank: int, alpha: float | None = None, target_modules: Iterable[str]) -> list:
    """Freeze ``model`` and add a peft LoRA adapter (``LoraConfig``, Gaussian init, ``model.add_adapter``)
    on ``target_modules``; returns the trainable (LoRA) parameters."""
    from peft import LoraConfig

    model.requires_grad_(False)
    config = LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else rank, init_lora_weights="gaussian",
                        target_modules=list(target_modules))
    model.add_adapter(config)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(f"LoRA: none of the target modules {list(target_modules)} exist in {type(model).__name__}")
    return params


def lora_layers(model) -> dict:
    """The adapter weights of a peft-adapted diffusers model, in diffusers' LoRA format
    (what ``<Pipeline>.save_lora_weights`` takes)."""
    from diffusers.utils import convert_state_dict_to_diffusers
    from peft.utils import get_peft_model_state_dict

    return convert_state_dict_to_diffusers(get_peft_model_state_dict(model))


def load_lora_layers(model, pipeline_cls, directory: str, *, prefix: str) -> None:
    """Load adapter weights written by ``pipeline_cls.save_lora_weights`` into the adapted ``model``.

    Raises:
        ValueError: when the folder's LoRA does not match the model's adapter (unexpected keys).
    """
    from diffusers.utils import convert_unet_state_dict_to_peft
    from peft.utils import set_peft_model_state_dict

    state = pipeline_cls.lora_state_dict(directory)
    if isinstance(state, tuple):  # (state_dict, network_alphas) on the SD loader, the state dict alone on SD3's
        state = state[0]
    state = {k[len(prefix) + 1:]: v for k, v in state.items() if k.startswith(prefix + ".")}
    result = set_peft_model_state_dict(model, convert_unet_state_dict_to_peft(state), adapter_name="default")
    unexpected = getattr(result, "unexpected_keys", None)
    if unexpected:
        raise ValueError(f"{directory}: LoRA weights that this adapter does not have: {unexpected[:5]}")


def setup_trained_model(args, model, *, frozen: Iterable, model_cls, lora_targets: Iterable[str], device,
                        weight_dtype: torch.dtype) -> tuple[list, object]:
    """Ready the models of a text-to-image run for training; returns ``(params, ema)``.

    The ``frozen`` modules (VAE, text encoders) get no gradients and move to ``device`` in
    ``weight_dtype``. With ``--use_lora`` the trained ``model`` moves there too and gets a LoRA
    adapter on ``lora_targets`` (:func:`add_lora_adapter`; its weights stay float32 under fp16).
    ``params`` are the trainable parameters, ``ema`` an ``EMAModel`` of ``model`` (``model_cls``)
    with ``--use_ema`` (else None); ``--gradient_checkpointing`` is enabled on ``model``.
    """
    from diffusers.training_utils import EMAModel, cast_training_params

    for module in frozen:
        module.requires_grad_(False)
        module.to(device, dtype=weight_dtype)
    if args.use_lora:
        model.to(device, dtype=weight_dtype)
        add_lora_adapter(model, rank=args.lora_rank, alpha=args.lora_alpha, target_modules=lora_targets)
        if args.mixed_precision == "fp16":
            cast_training_params(model, dtype=torch.float32)  # LoRA weights train in float32
    params = [p for p in model.parameters() if p.requires_grad]
    ema = EMAModel(model.parameters(), model_cls=model_cls, model_config=model.config) if args.use_ema else None
    if args.gradient_checkpointing:
        model.enable_gradient_checkpointing()
    return params, ema


def register_model_checkpointing(accelerator, *, model_cls, subfolder: str, ema=None, lora_pipeline_cls=None,
                                 lora_prefix: str | None = None) -> None:
    """Checkpoints hold the trained model in diffusers format, as in diffusers' scripts.

    Full fine-tuning: ``checkpoint-N/<subfolder>/`` (``model_cls.save_pretrained``) and the EMA in
    ``<subfolder>_ema/``. LoRA (``lora_pipeline_cls`` given): only the adapter, as
    ``checkpoint-N/pytorch_lora_weights.safetensors`` (``save_lora_weights(<prefix>_lora_layers=...)``).
    Optimizer, LR schedule and random states stay with accelerate; the sampler with
    :func:`register_sampler_checkpointing`.
    """

    def unwrap(m):
        return accelerator.unwrap_model(m)

    def save_hook(models, weights, output_dir):
        if accelerator.is_main_process:
            for m in models:
                m = unwrap(m)
                if lora_pipeline_cls is not None:
                    lora_pipeline_cls.save_lora_weights(output_dir, **{f"{lora_prefix}_lora_layers": lora_layers(m)},
                                                        safe_serialization=True)
                else:
                    m.save_pretrained(os.path.join(output_dir, subfolder))
            if ema is not None:
                ema.save_pretrained(os.path.join(output_dir, f"{subfolder}_ema"))
        while weights:  # saved above, in diffusers format
            weights.pop()

    def load_hook(models, input_dir):
        while models:
            m = unwrap(models.pop())
            if lora_pipeline_cls is not None:
                load_lora_layers(m, lora_pipeline_cls, input_dir, prefix=lora_prefix)
                if accelerator.mixed_precision == "fp16":
                    from diffusers.training_utils import cast_training_params

                    cast_training_params(m, dtype=torch.float32)
            else:
                loaded = model_cls.from_pretrained(input_dir, subfolder=subfolder)
                m.register_to_config(**loaded.config)
                m.load_state_dict(loaded.state_dict())
                del loaded
        if ema is not None:
            from diffusers.training_utils import EMAModel

            loaded = EMAModel.from_pretrained(os.path.join(input_dir, f"{subfolder}_ema"), model_cls)
            ema.load_state_dict(loaded.state_dict())
            ema.to(accelerator.device)

    accelerator.register_save_state_pre_hook(save_hook)
    accelerator.register_load_state_pre_hook(load_hook)


def prepare_text_to_image_training(accelerator, args, model, *, params, ema, sampler: TrainingTimestepSampler,
                                   model_cls, subfolder: str, pipeline_cls, tracker_project: str) -> tuple:
    """Everything between the built model and the training loop of a text-to-image run.

    The captioned dataloader (:func:`captioned_dataloader`, prepared); the optimizer and LR schedule
    (:func:`make_optimizer_and_lr_scheduler` over :func:`training_length`'s steps); ``model``, the
    optimizer and the schedule prepared; the EMA on the device; each rank's generator of noise
    levels, seeded ``seed·1000 + rank`` (the schedule π is shared through the sampler's all-reduce),
    then the device-specific global seed; the checkpoint hooks of the model
    (:func:`register_model_checkpointing` under ``subfolder``; with ``--use_lora`` the adapter through
    ``pipeline_cls.save_lora_weights`` with prefix ``subfolder``) and of the sampler
    (:func:`register_sampler_checkpointing`); the trackers, as ``tracker_project``, on the main process.

    Returns ``(model, optimizer, lr_scheduler, dataloader, epoch_setters, draw_gen)``: ``model`` as
    prepared, ``epoch_setters`` the dataset and batch order for :func:`run_training_loop`.
    """
    from accelerate.utils import set_seed

    dataloader, dataset, order = captioned_dataloader(args)
    dataloader = accelerator.prepare(dataloader)
    _, max_steps, _ = training_length(args, dataloader)
    optimizer, lr_scheduler = make_optimizer_and_lr_scheduler(args, params, max_steps=max_steps,
                                                              num_processes=accelerator.num_processes)
    model, optimizer, lr_scheduler = accelerator.prepare(model, optimizer, lr_scheduler)
    if ema is not None:
        ema.to(accelerator.device)

    # Each rank draws its own levels (and ε); the schedule π is shared through the sampler's all-reduce.
    draw_gen = torch.Generator().manual_seed((args.seed or 0) * 1000 + accelerator.process_index)
    if args.seed is not None:
        set_seed(args.seed, device_specific=True)
    register_model_checkpointing(accelerator, model_cls=model_cls, subfolder=subfolder, ema=ema,
                                 lora_pipeline_cls=pipeline_cls if args.use_lora else None, lora_prefix=subfolder)
    register_sampler_checkpointing(accelerator, sampler, draw_gen)
    if accelerator.is_main_process:
        accelerator.init_trackers(tracker_project, config=tracker_config(args))
    return model, optimizer, lr_scheduler, dataloader, (dataset, order), draw_gen


def log_validation_images(accelerator, pipeline, prompts: list[str], *, step: int, seed: int | None,
                          num_inference_steps: int, guidance_scale: float | None = None, tag: str = "validation",
                          output_dir: str | None = None, **pipeline_kwargs) -> torch.Tensor:
    """One image per prompt from ``pipeline`` (seeded generator: the global random state is not
    touched), logged to the trackers (tensorboard ``add_images``, wandb captioned images) and saved
    as ``<output_dir>/<tag>_<step>.png``. Returns (N, 3, H, W) float32 in [0, 1] on the CPU."""
    from contextlib import nullcontext

    pipeline.set_progress_bar_config(disable=True)
    generator = torch.Generator(device=accelerator.device).manual_seed(seed or 0)
    kwargs = dict(pipeline_kwargs, num_inference_steps=num_inference_steps, generator=generator, output_type="pt")
    if guidance_scale is not None:
        kwargs["guidance_scale"] = guidance_scale
    context = torch.autocast(accelerator.device.type) if accelerator.mixed_precision in ("fp16", "bf16") else nullcontext()
    images = []
    with torch.no_grad(), context:
        for prompt in prompts:
            images.append(pipeline(prompt, **kwargs).images[0].float().cpu())
    images = torch.stack(images).clamp(0, 1)
    for tracker in accelerator.trackers:
        if tracker.name == "tensorboard":
            tracker.writer.add_images(tag, images.numpy(), step, dataformats="NCHW")
        elif tracker.name == "wandb":
            import wandb

            tracker.log({tag: [wandb.Image(img.permute(1, 2, 0).numpy(), caption=f"{i}: {p}")
                               for i, (img, p) in enumerate(zip(images, prompts))]}, step=step)
    if output_dir:
        os.makedirs(output_dir, exist_ok=True)
        save_image_grid(images, os.path.join(output_dir, f"{tag}_{step:07d}.png"), nrow=len(images))
    return images


def resolve_infonoise_base(args, default: str | None) -> None:
    """Give ``--infonoise_base`` (or ``default`` when it is unset) the parameters of its density
    from the baseline flags (``--edm_p_mean/--edm_p_std``, ``--logit_mean/--logit_std``,
    ``--mode_scale``), as ``(name, params)`` in ``args.infonoise_base``; other names stay as they are."""
    name = args.infonoise_base or default
    params = baseline_density_params(args, name)
    args.infonoise_base = (name, params) if params is not None else name


def store_learned_schedule(noise_scheduler, sampler: TrainingTimestepSampler) -> bool:
    """Write the InfoNoise schedule into ``noise_scheduler``'s config (True); for other samplers
    drop a payload inherited from the base model, which would no longer describe this training (False)."""
    from .serialization import CONFIG_KEY

    if hasattr(sampler, "save_to_scheduler"):
        sampler.save_to_scheduler(noise_scheduler)
        return True
    if noise_scheduler.config.get(CONFIG_KEY) is not None:
        noise_scheduler.register_to_config(**{CONFIG_KEY: None})
    return False


def size_warmup_to_run(sampler, max_steps: int) -> None:
    """Tell an adaptive sampler the run's length (its ``"auto"`` warm-up is sized to it); before a resume,
    which restores the warm-up the run started with."""
    if hasattr(sampler, "set_num_training_steps"):
        sampler.set_num_training_steps(int(max_steps))


def training_length(args, dataloader) -> tuple[int, int, int]:
    """``(steps_per_epoch, max_steps, num_epochs)`` in optimizer steps for a *prepared* dataloader
    (:func:`optimizer_steps_per_epoch`)."""
    steps_per_epoch = optimizer_steps_per_epoch(args, dataloader)
    max_steps = args.max_train_steps or args.num_train_epochs * steps_per_epoch
    return steps_per_epoch, max_steps, math.ceil(max_steps / steps_per_epoch)


def run_training_loop(accelerator, args, *, model, optimizer, lr_scheduler, dataloader, epoch_setters: Iterable,
                      sampler: TrainingTimestepSampler, draw_gen: torch.Generator, compute_loss: Callable,
                      params_to_clip, ema=None, validate: Callable | None = None) -> dict:
    """The text-to-image training loop, resume included; returns ``{"global_step", "step_times"}``.

    Per micro-batch: levels from ``sampler`` → ``compute_loss(batch, levels)`` gives the (B,)
    unweighted per-sample loss in the sampler's parameterization → the user's loss weighting
    (:func:`weighted_loss`) → backward, clip, optimizer. The sampler then gets the unweighted loss
    (``sampler.update``) and, once per optimizer step, ``sampler.step()``. ``validate(step)`` runs on
    the main process every ``--validation_epochs`` epochs (with the EMA weights when there is an EMA).
    ``step_times`` holds the wall time of each optimizer step (data loading included).

    Args:
        epoch_setters: objects with ``set_epoch`` (dataset and batch order), called at each epoch.
    """
    import time

    from tqdm.auto import tqdm

    _, max_steps, num_epochs = training_length(args, dataloader)
    size_warmup_to_run(sampler, max_steps)
    global_step, first_epoch, skip_batches = resume_training_state(accelerator, args, sampler, dataloader)

    monitor = ScheduleMonitor(sampler, args.output_dir, plot_every=args.schedule_plot_steps or None)
    total_batch = args.train_batch_size * accelerator.num_processes * args.gradient_accumulation_steps
    logger.info(f"***** Running training: {num_epochs} epochs, {max_steps} optimizer steps, total batch {total_batch}, "
                f"sampler {sampler.name} ({sampler.prediction_type}, weighting "
                f"{sampler.describe()['loss_weighting']}), path {sampler.path.kind} *****")
    progress = tqdm(total=max_steps, initial=global_step, disable=not accelerator.is_local_main_process, desc="steps")
    step_times: list[float] = []
    train_loss = 0.0
    last = time.perf_counter()
    for epoch in range(first_epoch, num_epochs):
        model.train()
        loader = accelerator.skip_first_batches(dataloader, skip_batches) if skip_batches else dataloader
        skip_batches = 0
        # accelerate's loaders call set_epoch(<their own iteration count>) when iterated; a loader that
        # a resumed run never iterated before would restart at epoch 0, so set it explicitly
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        for obj in epoch_setters:
            obj.set_epoch(epoch)
        for batch in loader:
            with accelerator.accumulate(model):
                levels = sampler.sample(batch["pixel_values"].shape[0], generator=draw_gen, device=accelerator.device)
                per_sample = compute_loss(batch, levels)
                loss = weighted_loss(sampler, levels, per_sample)
                train_loss += accelerator.gather(loss.detach().reshape(1)).mean().item() / args.gradient_accumulation_steps
                backward_and_step(accelerator, args, loss, optimizer=optimizer, lr_scheduler=lr_scheduler,
                                  params=params_to_clip)
            if not finish_micro_batch(accelerator, sampler, monitor, levels, per_sample, ema=ema, params=params_to_clip):
                continue
            global_step += 1
            progress.update(1)
            logs = {"train_loss": train_loss, "lr": lr_scheduler.get_last_lr()[0]}
            train_loss = 0.0
            logs.update(monitor.after_step(accelerator, global_step))
            now = time.perf_counter()
            step_times.append(now - last)
            logs["step_time_s"] = step_times[-1]
            progress.set_postfix(loss=f"{logs['train_loss']:.4f}")
            accelerator.log(logs, step=global_step)
            maybe_save_checkpoint(accelerator, args, global_step)
            last = time.perf_counter()  # checkpoint writes are not part of a step's time
            if global_step >= max_steps:
                break
        if validate is not None and accelerator.is_main_process and args.validation_prompts \
                and epoch % args.validation_epochs == 0 and global_step < max_steps:
            with ema_weights(ema, params_to_clip):
                validate(global_step)
            last = time.perf_counter()
        if global_step >= max_steps:
            break
    progress.close()
    return {"global_step": global_step, "step_times": step_times, "total_batch_size": total_batch}


class ema_weights:
    """Context manager: the EMA weights in ``parameters`` inside, the trained ones restored after (no-op without EMA)."""

    def __init__(self, ema, parameters):
        self.ema, self.parameters = ema, list(parameters) if ema is not None else None

    def __enter__(self):
        if self.ema is not None:
            self.ema.store(self.parameters)
            self.ema.copy_to(self.parameters)

    def __exit__(self, *exc):
        if self.ema is not None:
            self.ema.restore(self.parameters)
        return False


def save_text_to_image_outputs(accelerator, args, *, pipeline, model_key: str, noise_scheduler,
                               sampler: TrainingTimestepSampler, ema=None, result: dict, card: dict) -> str:
    """The end of a text-to-image run, on the main process; returns the output folder.

    * ``noise_scheduler``, the *training* scheduler (its ``prediction_type`` as trained), gets the
      learned schedule (:func:`store_learned_schedule`);
    * full fine-tuning: ``pipeline`` (the trained ``model_key`` model with the EMA weights when
      there is an EMA, the training scheduler) is saved with ``save_pretrained``; LoRA: the adapter
      (``save_lora_weights``, ``<model_key>_lora_layers``) and ``scheduler/`` only;
    * ``noise_schedule.png``, validation images of the final weights (``validation.png``), and
      ``README.md`` from ``model_cards/text_to_image.md.j2`` (``card``: template variables the
      script adds: ``base_model``, ``pipeline_class``, ``family``, ``license``, ``extra_tags``,
      ``details``); pushed to the Hub with ``--push_to_hub``.
    """
    from .diagnostics import plot_schedule

    out = args.output_dir
    model = accelerator.unwrap_model(getattr(pipeline, model_key))
    learned = store_learned_schedule(noise_scheduler, sampler)
    pipeline.scheduler = noise_scheduler
    if ema is not None:
        ema.copy_to(model.parameters())
    if args.use_lora:
        type(pipeline).save_lora_weights(out, **{f"{model_key}_lora_layers": lora_layers(model)}, safe_serialization=True)
        noise_scheduler.save_pretrained(os.path.join(out, "scheduler"))
    else:
        pipeline.save_pretrained(out)
    import matplotlib.pyplot as plt

    fig = plot_schedule(sampler, title=f"{sampler.name} after {result['global_step']} steps")
    fig.savefig(os.path.join(out, "noise_schedule.png"), dpi=100)
    plt.close(fig)
    validation_grid = None
    if args.validation_prompts:
        model.eval()
        images = log_validation_images(accelerator, pipeline, args.validation_prompts, step=result["global_step"],
                                       seed=args.seed, num_inference_steps=args.validation_inference_steps,
                                       guidance_scale=args.validation_guidance_scale, tag="validation_final")
        validation_grid = "validation.png"
        save_image_grid(images, os.path.join(out, validation_grid), nrow=len(images))
    desc = sampler.describe()
    repo_id = args.hub_model_id or os.path.basename(os.path.abspath(out))
    tags = ["text-to-image", "diffusers", "diffusers-training", "infonoise", *card.get("extra_tags", [])]
    if args.use_lora:
        tags.append("lora")
    render_model_card(
        "text_to_image.md.j2", os.path.join(out, "README.md"),
        model_name=repo_id, repo_id=repo_id if args.push_to_hub else None, tags=tags,
        base_model=card["base_model"], pipeline_class=card["pipeline_class"], family=card.get("family", ""),
        license=card.get("license", "other"), details=card.get("details", {}),
        dataset_name=args.dataset_name, use_lora=args.use_lora, lora_rank=args.lora_rank,
        scheduler_class=type(noise_scheduler).__name__, prediction_type=sampler.prediction_type,
        loss_weighting=desc["loss_weighting"], snr_gamma=desc.get("snr_gamma"), sampler_name=sampler.name,
        learned_schedule=learned, hyperparameters=desc.get("hyperparameters", {}), global_step=result["global_step"],
        allocation=desc.get("last_refresh"),
        total_batch_size=result["total_batch_size"], learning_rate=args.learning_rate, resolution=args.resolution,
        mixed_precision=args.mixed_precision or "no", validation_prompts=args.validation_prompts or [],
        validation_grid=validation_grid, schedule_plot="noise_schedule.png",
        num_inference_steps=args.validation_inference_steps,
    )
    if args.push_to_hub:
        push_output_dir(out, repo_id=repo_id, token=args.hub_token, private=args.hub_private_repo)
    return out
