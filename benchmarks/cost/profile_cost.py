"""What ``--infonoise_init profile`` costs in a 1000-step run (issue 22: at most 5% of the run).

Each case runs the unmodified training script in this process through its ``main([...])`` with
``--max_train_steps 1000`` (``--steps``; what the profile is sized to), ``--noise_sampler infonoise
--infonoise_init profile`` and a tensorboard tracker, from a pretrained pipeline folder (random weights: the
cost does not depend on them), and is timed from outside by what the run itself reports: the profile start's
forward passes and seconds (``infonoise/start_forward_passes``, ``infonoise/start_seconds``) and each optimizer
step's wall time (``step_time_s``), which the training loop logs to the tracker, read back from the run's event
files; the profile's samples a bin, filled bins and TV(φ, ρ̂) from the start's log record
(:func:`diffusers_infonoise.apply_start`), and ``min_count``/``num_bins`` from the script's own
parse of the arguments. The share is ``profile seconds / (profile seconds + steps x the median step time)``,
the median over the first ``--measure_steps`` steps (robust to the stalls of a shared machine; the whole run's
measured time is also given); the profile's seconds include the first model calls of the run (allocation, the
data loader's start), which the first step would otherwise pay, so the share is an upper bound.

Cases: the tiny SD, SD3 and Flux stand-ins of ``benchmarks/tiny_pipelines.py`` (16x16 images, 8x8 latents) at
batch 8, full fine-tuning, and SD with LoRA at batch 1, on the built-in Fashion-MNIST; the race's 16x16 UNet
(channels 16, 32) on MNIST 16x16 at batch 64, EDM, as the finetune tier runs it.

    python -m benchmarks.cost.profile_cost                 # writes benchmarks/results/profile_cost.json
    python -m benchmarks.cost.profile_cost --cases sd unet16 --steps 200 --measure_steps 30 --output /tmp/x.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import RESULTS, training_script
from benchmarks.cost.t2i_step_time import build_model

#: case: (script, stand-in kind or None for the UNet, batch size, LoRA)
CASES = {
    "sd": ("train_text_to_image", "sd", 8, False),
    "sd_lora_b1": ("train_text_to_image", "sd", 1, True),
    "sd3": ("train_text_to_image_sd3", "sd3", 8, False),
    "flux": ("train_text_to_image_flux", "flux", 8, False),
    "unet16": ("train_unconditional", None, 64, False),
}


def save_unet16(folder: str) -> str:
    """A random pipeline folder (``unet/``, ``scheduler/``) of the finetune tier's 16x16 EDM UNet."""
    from diffusers import EDMEulerScheduler, UNet2DModel

    from benchmarks.race.races import unet_config

    torch.manual_seed(0)
    UNet2DModel.from_config(unet_config(16, (16, 32))).save_pretrained(os.path.join(folder, "unet"))
    EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5).save_pretrained(os.path.join(folder, "scheduler"))
    return folder


def case_args(case: str, model: str, out: str, opts) -> list[str]:
    script, kind, batch, lora = CASES[case]
    common = ["--pretrained_model_name_or_path", model, "--output_dir", out, "--train_batch_size", str(batch)]
    common += ["--max_train_steps", str(opts.steps), "--seed", "0", "--noise_sampler", "infonoise", "--infonoise_init", "profile"]
    if kind is None:
        from benchmarks.race.data import load_data

        data = load_data("mnist16")
        args = common + data["script_args"] + ["--diffusion", "edm", "--logger", "tensorboard", "--learning_rate", "3e-4"]
        return args + ["--schedule_plot_steps", "-1", "--save_images_epochs", "1000000000", "--save_model_epochs", "1000000000"]
    args = common + ["--dataset_name", "fashion_mnist", "--resolution", "16", "--max_train_samples", "2048", "--report_to", "tensorboard"]
    args += ["--checkpointing_steps", "1000000", "--lr_warmup_steps", "0"]
    if kind == "sd3":
        args += ["--max_sequence_length", "77"]
    if kind == "flux":
        args += ["--max_sequence_length", "16"]
    if lora:
        args += ["--use_lora", "--lora_rank", "4"]
    return args


class _StartReport(logging.Handler):
    """Keeps the profile start's report, the record :func:`diffusers_infonoise.apply_start` logs
    (``noise sampler start: profile (<reason>); samples_per_bin 6, forward_passes 45, ...``), as numbers."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.info: dict | None = None

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("noise sampler start:") and "; " in message:
            pairs = (item.split(" ", 1) for item in message.rsplit("; ", 1)[1].split(", "))
            self.info = {k: _number(v) for k, v in pairs}


def _number(text: str):
    """A logged value as an int or float, else as it was logged (``data loss_fn``)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def logged_scalars(output_dir: str) -> dict[str, dict[int, float]]:
    """Every scalar the run logged to its tensorboard tracker under ``output_dir``: ``{tag: {step: value}}``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, dict[int, float]] = {}
    for events in sorted(Path(output_dir).rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return out


def run_case(case: str, opts, tmp: str) -> dict:
    script_name, kind, batch, _ = CASES[case]
    script = training_script(script_name)
    model = save_unet16(os.path.join(tmp, case)) if kind is None else build_model(kind, "tiny", os.path.join(tmp, case))
    out_dir = os.path.join(tmp, case + "_out")
    argv = case_args(case, model, out_dir, opts)
    report = _StartReport()
    starts_logger = logging.getLogger("diffusers_infonoise.sampler.starts")
    level = starts_logger.level
    starts_logger.addHandler(report)
    starts_logger.setLevel(logging.INFO)
    try:
        script.main(argv)
    finally:
        starts_logger.removeHandler(report)
        starts_logger.setLevel(level)
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    scalars = logged_scalars(out_dir)
    if report.info is None or "infonoise/start_seconds" not in scalars:
        raise RuntimeError(f"{case}: the run did not report a profile start")
    parsed = script.parse_args(argv)
    info = {
        "start": "profile",
        **report.info,
        "forward_passes": int(scalars["infonoise/start_forward_passes"][0]),
        "seconds": round(float(scalars["infonoise/start_seconds"][0]), 3),
    }
    times = scalars["step_time_s"]
    step_s = [times[k] for k in sorted(times)]
    if len(step_s) < opts.measure_steps:
        raise RuntimeError(f"{case}: the run logged {len(step_s)} step times, fewer than --measure_steps {opts.measure_steps}")
    whole_run_s = sum(step_s)
    step_s = step_s[: opts.measure_steps]
    median = statistics.median(step_s)
    run_s = opts.steps * median
    return {
        "script": f"training_scripts/{script_name}.py",
        "batch_size": batch,
        "args": case_args(case, "<model>", "<out>", opts),
        "profile": info,
        "min_count": parsed.infonoise_min_count,
        "num_bins": parsed.infonoise_num_bins,
        "seconds_per_forward_pass": round(info["seconds"] / info["forward_passes"], 5),
        "measured_steps": len(step_s),
        "median_step_s": round(median, 5),
        "mean_step_s": round(sum(step_s) / len(step_s), 5),
        "forward_pass_over_step": round(info["seconds"] / info["forward_passes"] / median, 3),
        "run_s_extrapolated": round(run_s, 1),
        "run_s_measured": round(whole_run_s, 1),
        "share_of_run": round(info["seconds"] / (info["seconds"] + run_s), 5),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument("--steps", type=int, default=1000, help="the run's --max_train_steps (what the profile is sized to)")
    p.add_argument("--measure_steps", type=int, default=100, help="the first optimizer steps whose median step time is taken")
    p.add_argument("--limit", type=float, default=0.05, help="the issue's bound on the profile's share")
    p.add_argument("--output", default=str(RESULTS / "profile_cost.json"))
    opts = p.parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")  # before the scripts import tqdm: it reads the variable then
    logging.getLogger().setLevel(logging.WARNING)
    load_start, t_start = os.getloadavg(), time.time()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in opts.cases:
            results[case] = r = run_case(case, opts, tmp)
            print(
                f"{case}: profile {r['profile']['forward_passes']} forward passes ({r['profile']['samples_per_bin']} a bin) in "
                f"{r['profile']['seconds']:.2f} s ({r['forward_pass_over_step']:.2f} of a step); median step "
                f"{r['median_step_s']:.3f} s; share of a {opts.steps}-step run {100 * r['share_of_run']:.2f}%",
                flush=True,
            )
    import diffusers

    out = {
        "benchmark": "the profile start's cost as a share of a run (issue 22)",
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
        "results": results,
        "limit": opts.limit,
        "passed": all(r["share_of_run"] <= opts.limit for r in results.values()),
        "machine": {
            "platform": platform.platform(),
            "torch": torch.__version__,
            "diffusers": diffusers.__version__,
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
        },
        "wall_s": round(time.time() - t_start, 1),
    }
    Path(opts.output).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.output).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {opts.output}; passed: {out['passed']}")
    return 0 if out["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
