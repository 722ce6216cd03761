"""Watching the schedule during training: logged scalars, the φ-vs-ρ̂ figure, drawn-level histograms,
the π check across ranks; ``--show_noise_schedule``."""

from __future__ import annotations

import hashlib
import json
import math
import os

import torch

from ..logs import get_logger
from ..sampler import FIXED_DENSITY_NAMES, NoiseLevels, SamplerStart, TrainingTimestepSampler
from ..sampler.starts import describe_bound

logger = get_logger(__name__)

__all__ = [
    "describe_noise_schedule",
    "shown_schedule",
    "show_noise_schedule",
    "ScheduleMonitor",
    "truncate_history",
]


def pi_hash(sampler) -> str:
    """Short SHA-256 of an adaptive sampler's current bin masses (π, or the base's before it adapts): equal on every
    rank under data parallelism, which the logs show."""
    data = (sampler.probs if sampler.probs is not None else sampler.base_masses).numpy().tobytes()
    return hashlib.sha256(data).hexdigest()[:16]


def describe_noise_schedule(sampler: TrainingTimestepSampler) -> str:
    """A short text table of the sampler's density: quantiles of σ and of the allocation π·w."""
    from ..densities import bin_masses

    lo, hi = sampler.path.log_sigma_range
    edges = torch.linspace(lo, hi, 401, dtype=torch.float64)
    mass = bin_masses(sampler.density, edges)
    centres = 0.5 * (edges[1:] + edges[:-1])
    phi = mass * sampler.objective.x0_loss_weight(torch.exp(centres), sigma_data=sampler.sigma_data)
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


def shown_schedule(sampler: TrainingTimestepSampler, start: SamplerStart | None = None, info: dict | None = None) -> str:
    """What the sampler's density is at step 1, in words: a fixed density, an adaptive baseline, the base density (of a ``"base"`` start, or
    of the warm-up before a start's schedule is taken), the stored schedule and its source, or the profile start with
    what it measured (``info``: :func:`~diffusers_infonoise.apply_start`'s)."""
    if not sampler.learns_schedule:
        if sampler.name in FIXED_DENSITY_NAMES:
            return f"the fixed {sampler.name} density"
        return f"the adaptive baseline {sampler.name} (the base density for its warm-up, then its own pi from the run's losses)"
    choice = start.choice if start is not None else "base"
    if sampler.probs is None:
        if choice == "base":
            return "the base density (the warm-up's; pi adapts to the run's own losses after it)"
        return f"the base density: the run draws from it for its {sampler.warmup_steps} warm-up steps, then from the {choice} start's pi"
    if choice == "stored":
        return f"the stored schedule from {start.source}, rebuilt for this run"
    info = info or {}
    bound = info.get("bound", "off")
    return (
        f"the profile start: the pretrained model's errors on the training data ({info.get('forward_passes', '?')} forward "
        f"passes, {sampler.estimator.num_filled} of {sampler.estimator.num_bins} bins measured"
        + (f"; {describe_bound(bound)}" if bound != "off" else "")
        + ")"
    )


def show_noise_schedule(
    sampler: TrainingTimestepSampler, output_dir: str, *, start: SamplerStart | None = None, info: dict | None = None
) -> str:
    """Print what is shown (:func:`shown_schedule`: the base density, a stored schedule or a profile start, after
    ``start`` was applied) and :func:`describe_noise_schedule`, and save the schedule plot; returns the PNG path.
    Under a multi-process launch only global rank 0 (``RANK``) prints and writes."""
    from ..diagnostics import plot_schedule

    path = os.path.join(output_dir, "noise_schedule.png")
    if int(os.environ.get("RANK", "0")) != 0:
        return path
    what = shown_schedule(sampler, start, info)
    print(f"shown: {what}")
    if sampler.is_adapted:  # the hash the training log gives at each refresh of π
        print(f"pi hash: {pi_hash(sampler)}")
    print(describe_noise_schedule(sampler))
    os.makedirs(output_dir, exist_ok=True)
    fig = plot_schedule(sampler, title=f"training-noise density at step 1: {what.split(':')[0].split(' (')[0]}")
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")
    return path


def truncate_history(output_dir: str | None, step: int) -> None:
    """Drop the lines of ``schedule/history.jsonl`` after optimizer ``step``: a run resumed from ``checkpoint-<step>``
    writes those steps again, so its history is the uninterrupted run's (a kill after a later refresh left them)."""
    path = os.path.join(output_dir or "", "schedule", "history.jsonl")
    if not output_dir or not os.path.isfile(path):
        return
    with open(path) as f:
        lines = f.readlines()
    kept = [line for line in lines if _history_step(line) <= step]
    if len(kept) != len(lines):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.writelines(kept)
        os.replace(tmp, path)  # a kill while rewriting leaves the old history, not half of it


def _history_step(line: str) -> float:
    try:
        return float(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return math.inf  # a line cut by a kill (not JSON): dropped with the later ones


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
        self._seen_updates = sampler.num_updates

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
        updates = self.sampler.num_updates
        if updates != self._seen_updates:
            self._seen_updates = updates
            logs.update(self._on_refresh(accelerator, global_step))
        elif len(self._drawn) > 10_000:
            self._drawn = self._drawn[-1000:]
        return logs

    def _on_refresh(self, accelerator, global_step: int) -> dict:
        from ..diagnostics import plot_level_histogram, plot_schedule

        probs = self.sampler.probs.to(accelerator.device, torch.float64)
        gathered = accelerator.gather(probs.unsqueeze(0))
        if not bool((gathered == gathered[0:1]).all()):
            raise RuntimeError("noise sampler: ranks hold different schedules after a refresh (statistics were not reduced)")
        # the gather above checked that every rank holds this π: the main process says so, once
        logger.info(
            f"step {global_step}: pi refreshed (hash {pi_hash(self.sampler)}, the same on all {accelerator.num_processes} "
            f"process(es); gate {self.sampler.estimator.last_gate.source} {self.sampler.estimator.last_gate.pivot})"
        )
        refresh = self.sampler.last_refresh
        gate = self.sampler.estimator.last_gate
        # TV(φ, ρ̂) among them: the check of METHOD.md §5, ≤ η + 0.02
        logs = self.sampler.metrics()
        if accelerator.is_main_process and self.output_dir:
            # one JSON line per refresh: how π moved during training (read by the online-vs-offline study)
            os.makedirs(os.path.join(self.output_dir, "schedule"), exist_ok=True)
            with open(os.path.join(self.output_dir, "schedule", "history.jsonl"), "a") as f:
                f.write(
                    json.dumps(
                        {
                            "step": global_step,
                            "probs": self.sampler.probs.tolist(),
                            "gate_pivot": gate.pivot,
                            "gate_source": gate.source,
                            "tv_phi_rho": refresh.get("tv_phi_rho"),
                        }
                    )
                    + "\n"
                )
        never = self.plot_every is not None and self.plot_every < 0
        if never or (self.plot_every is not None and self._last_plot is not None and global_step - self._last_plot < self.plot_every):
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
            figs = {
                "schedule": plot_schedule(self.sampler, title=f"step {global_step}"),
                "drawn_levels": plot_level_histogram(drawn, sampler=self.sampler),
            }
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
