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
    "ScheduleMonitor",
    "register_sampler_checkpointing",
    "resolve_resume_checkpoint",
    "prune_checkpoints",
    "save_image_grid",
    "render_model_card",
    "push_output_dir",
]


# ----------------------------------------------------------------------------------------------
# arguments
# ----------------------------------------------------------------------------------------------


def _gate_arg(value: str):
    if value.lower() in ("none", "off"):
        return None
    if value == "auto":
        return "auto"
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"accepted values: auto, none, or a positive float pivot (VE sigma); got {value!r}")
    if not v > 0:
        raise argparse.ArgumentTypeError(f"the pivot must be > 0, got {value}")
    return v


def add_noise_sampler_args(parser: argparse.ArgumentParser) -> None:
    """``--noise_sampler``, its ``--infonoise_*`` hyperparameters, baseline density parameters,
    ``--snr_gamma`` and ``--show_noise_schedule``."""
    g = parser.add_argument_group("training-noise sampler (diffusers-infonoise)")
    g.add_argument("--noise_sampler", type=str, default="infonoise", choices=SAMPLER_NAMES,
                   help="Distribution of training noise levels. 'infonoise' adapts it to the conditional-entropy rate.")
    g.add_argument("--infonoise_num_bins", type=int, default=64, help="Bins uniform in log sigma.")
    g.add_argument("--infonoise_warmup_steps", type=int, default=500, help="Optimizer steps on the base density.")
    g.add_argument("--infonoise_refresh_every", type=int, default=50, help="Optimizer steps between refreshes of pi.")
    g.add_argument("--infonoise_ema_decay", type=float, default=0.9, help="Weight on the old bin value at a refresh.")
    g.add_argument("--infonoise_min_count", type=int, default=8, help="New samples a bin needs to be updated.")
    g.add_argument("--infonoise_smoothing", type=float, default=1.0, help="Gaussian smoothing width in bins (0: off).")
    g.add_argument("--infonoise_gate", type=_gate_arg, default="auto",
                   help="Clean-end gate pivot: 'auto', 'none', or a VE sigma such as 0.2 (paper: 0.15 images, 0.2 other data).")
    g.add_argument("--infonoise_gate_fallback", type=float, default=0.2, help="Pivot used when the automatic gate misfires.")
    g.add_argument("--infonoise_floor", type=float, default=0.05, help="Mixing weight of the base density (no bin starves).")
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


def build_noise_sampler(
    args, noise_scheduler, *, prediction_type: str, loss_weighting="none", snr_gamma: float | None = None
) -> TrainingTimestepSampler:
    """The sampler ``args.noise_sampler`` names, with the parameters of :func:`add_noise_sampler_args`."""
    common = {"prediction_type": prediction_type, "loss_weighting": loss_weighting, "snr_gamma": snr_gamma}
    name = args.noise_sampler
    if name in ("infonoise", "kingma_gao"):
        kw = {
            "num_bins": args.infonoise_num_bins,
            "warmup_steps": args.infonoise_warmup_steps,
            "refresh_every": args.infonoise_refresh_every,
            "ema_decay": args.infonoise_ema_decay,
            "min_count": args.infonoise_min_count,
            "smoothing": args.infonoise_smoothing,
            "floor": args.infonoise_floor,
            "base": args.infonoise_base,
        }
        if name == "infonoise":
            kw.update(gate=args.infonoise_gate, gate_fallback=args.infonoise_gate_fallback)
        return make_sampler(name, noise_scheduler, **common, **kw)
    params = {
        "edm_lognormal": {"P_mean": args.edm_p_mean, "P_std": args.edm_p_std},
        "logit_normal": {"mean": args.logit_mean, "std": args.logit_std},
        "mode": {"scale": args.mode_scale},
    }.get(name, {})
    return make_sampler(name, noise_scheduler, **common, **params)


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
        return [math.exp(float(centres[torch.searchsorted(c, torch.tensor(q, dtype=torch.float64)).clamp(max=399)])) for q in (0.05, 0.25, 0.5, 0.75, 0.95)]

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
    """Print :func:`describe_noise_schedule` and save the schedule plot; returns the PNG path."""
    from .diagnostics import plot_schedule

    print(describe_noise_schedule(sampler))
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "noise_schedule.png")
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

    def __init__(self, sampler: TrainingTimestepSampler, output_dir: str | None):
        self.sampler = sampler
        self.output_dir = output_dir
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
        logger.info(f"step {global_step}: pi refreshed (hash {self.sampler.pi_hash()}, gate {self.sampler.estimator.last_gate.source} "
                    f"{self.sampler.estimator.last_gate.pivot})")
        logs = {"infonoise/num_updates": float(self.sampler.num_updates)}
        gate = self.sampler.estimator.last_gate
        if gate.pivot is not None:
            logs["infonoise/gate_pivot"] = float(gate.pivot)
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
                               "(base density, warm-up from now)")

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
