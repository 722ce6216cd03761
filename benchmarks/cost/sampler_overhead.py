"""Per-step cost of InfoNoise's ``sample`` + ``update`` + ``step`` against one training step.

The training step is a forward + backward + AdamW step of a small ``UNet2DModel`` (16x16, one
channel, block_out_channels (32, 64), one attention level) on a batch of 256; the sampler runs with
64 bins and its default ``refresh_every`` after its warm-up, so that the timed steps include the
periodic refreshes (amortised). Both are timed in the same process, interleaved repeat by repeat, on
all three paths (DDPM/VP, EDM/VE, flow matching). The headline is the largest of the three ratios
median(sampler time per step) / median(training step time).

Usage::

    python -m benchmarks.cost.sampler_overhead                 # writes benchmarks/results/sampler_overhead.json
    python -m benchmarks.cost.sampler_overhead --repeats 3 --output /tmp/overhead.json

Prints one line: ``sampler overhead: max X.XXX% of a training step (...)``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler, UNet2DModel

import diffusers_infonoise
from benchmarks import REPO, RESULTS
from diffusers_infonoise import InfoNoiseTrainingTimestepSampler

SCHEDULERS = {
    "vp": ("DDPMScheduler", DDPMScheduler, "epsilon", "none"),
    "ve": ("EDMEulerScheduler", EDMEulerScheduler, "sample", "edm"),
    "flow": ("FlowMatchEulerDiscreteScheduler", FlowMatchEulerDiscreteScheduler, "flow", "none"),
}


def build_unet() -> UNet2DModel:
    return UNet2DModel(
        sample_size=16,
        in_channels=1,
        out_channels=1,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    )


def train_step(model, optimizer, x0, noise, timesteps) -> None:
    noisy = x0 + noise  # the noising itself is not what is measured
    pred = model(noisy, timesteps).sample
    loss = torch.nn.functional.mse_loss(pred, noise)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def sampler_block(sampler, batch_size: int, steps: int, generator, losses) -> tuple[float, float]:
    """Mean and max seconds per step of sample + update + step over ``steps`` optimizer steps."""
    worst, start = 0.0, time.perf_counter()
    for i in range(steps):
        t0 = time.perf_counter()
        levels = sampler.sample(batch_size, generator=generator)
        sampler.update(levels, losses[i % len(losses)])
        sampler.step()
        worst = max(worst, time.perf_counter() - t0)
    return (time.perf_counter() - start) / steps, worst


def machine_info() -> dict:
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "diffusers": __import__("diffusers").__version__,
        "diffusers_infonoise": diffusers_infonoise.__version__,
    }
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            info["cpu_model"] = names[0]
    except OSError:
        pass
    return info


def _load_average():
    return [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _command(argv) -> str:
    """The command line as run from the repository root (interpreter path made relative when inside)."""
    exe = sys.executable
    if exe.startswith(str(REPO) + os.sep):
        exe = os.path.relpath(exe, REPO)
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(shlex.quote(a) for a in [exe, "-m", "benchmarks.cost.sampler_overhead", *args])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-bins", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats; medians are reported")
    parser.add_argument("--sampler-steps", type=int, default=200, help="optimizer steps per timed sampler block")
    parser.add_argument("--unet-steps", type=int, default=1, help="training steps per timed UNet block")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=str(RESULTS / "sampler_overhead.json"))
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    load_at_start = _load_average()

    # the samplers, past their warm-up so that the timed steps include refreshes
    samplers, losses = {}, {}
    gens = {k: torch.Generator().manual_seed(args.seed + i) for i, k in enumerate(SCHEDULERS)}
    for kind, (_, cls, pred, weighting) in SCHEDULERS.items():
        sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(
            cls(), prediction_type=pred, loss_weighting=weighting, num_bins=args.num_bins
        )
        losses[kind] = [torch.rand(args.batch_size, generator=gens[kind]) for _ in range(8)]
        sampler_block(sampler, args.batch_size, sampler.warmup_steps + sampler.settings.refresh_every, gens[kind], losses[kind])
        assert sampler.is_adapted
        samplers[kind] = sampler
    refresh_every = samplers["vp"].settings.refresh_every
    if args.sampler_steps % refresh_every:
        parser.error(f"--sampler-steps must be a multiple of refresh_every ({refresh_every}) to amortise refreshes evenly")

    model = build_unet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x0 = torch.randn(args.batch_size, 1, 16, 16)
    noise = torch.randn_like(x0)
    timesteps = samplers["vp"].sample(args.batch_size, generator=gens["vp"]).timesteps
    for _ in range(2):  # warm-up: allocator, AdamW state
        train_step(model, optimizer, x0, noise, timesteps)

    updates_before = {k: s.num_updates for k, s in samplers.items()}
    unet_times, sampler_times, sampler_worst = [], {k: [] for k in SCHEDULERS}, {k: [] for k in SCHEDULERS}
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.unet_steps):
            train_step(model, optimizer, x0, noise, timesteps)
        unet_times.append((time.perf_counter() - t0) / args.unet_steps)
        for kind, sampler in samplers.items():
            mean, worst = sampler_block(sampler, args.batch_size, args.sampler_steps, gens[kind], losses[kind])
            sampler_times[kind].append(mean)
            sampler_worst[kind].append(worst)

    # the machine may be shared: the 1/5/15-minute load averages put the absolute times in context
    machine = {**machine_info(), "load_average_at_start": load_at_start, "load_average_at_end": _load_average()}
    unet_median = statistics.median(unet_times)
    per_path = {}
    for kind, (cls_name, _, pred, weighting) in SCHEDULERS.items():
        med = statistics.median(sampler_times[kind])
        per_path[kind] = {
            "scheduler": cls_name,
            "prediction_type": pred,
            "loss_weighting": weighting,
            "sampler_seconds_per_step_median": med,
            "sampler_seconds_per_step_all": sampler_times[kind],
            "sampler_worst_single_step_seconds": max(sampler_worst[kind]),
            "ratio_median": med / unet_median,
            "ratio_per_repeat": [s / u for s, u in zip(sampler_times[kind], unet_times)],
            "pi_refreshes_in_timed_steps": samplers[kind].num_updates - updates_before[kind],
        }
    worst_kind = max(per_path, key=lambda k: per_path[k]["ratio_median"])
    result = {
        "benchmark": "sampler_overhead",
        "command": _command(argv),
        "settings": {
            "batch_size": args.batch_size,
            "num_bins": args.num_bins,
            "refresh_every": refresh_every,
            "warmup_steps": samplers["vp"].warmup_steps,
            "repeats": args.repeats,
            "sampler_steps_per_repeat": args.sampler_steps,
            "unet_steps_per_repeat": args.unet_steps,
            "unet": "UNet2DModel(sample_size=16, in/out_channels=1, block_out_channels=(32, 64), layers_per_block=1, "
            "down=(DownBlock2D, AttnDownBlock2D), up=(AttnUpBlock2D, UpBlock2D)); forward + backward + AdamW step",
            "timed_sampler_calls": "sample(batch) + update(levels, per_sample_loss) + step(), refreshes amortised",
        },
        "machine": machine,
        "unet_train_step_seconds_median": unet_median,
        "unet_train_step_seconds_all": unet_times,
        "per_path": per_path,
        "max_ratio_median": per_path[worst_kind]["ratio_median"],
        "max_ratio_path": worst_kind,
        "below_1_percent": per_path[worst_kind]["ratio_median"] < 0.01,
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    parts = ", ".join(f"{k} {1e3 * v['sampler_seconds_per_step_median']:.3f} ms" for k, v in per_path.items())
    print(
        f"sampler overhead: max {100 * result['max_ratio_median']:.3f}% of a training step ({worst_kind}); "
        f"sampler per step: {parts}; UNet step {unet_median:.3f} s (batch {args.batch_size}, "
        f"{torch.get_num_threads()} threads) -> {out}"
    )
    return result


if __name__ == "__main__":
    main()
