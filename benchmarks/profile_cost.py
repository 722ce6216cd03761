"""What ``--infonoise_init profile`` costs in a 1000-step run (issue 22: at most 5% of the run).

Each case runs the unmodified training script in this process through its ``main([...])`` with
``--max_train_steps 1000`` (``--steps``; what the profile is sized to) and ``--noise_sampler infonoise
--infonoise_init profile``, from a pretrained pipeline folder (random weights: the cost does not depend on
them). The profile start's own report (forward passes, samples, seconds;
:func:`diffusers_infonoise.starts.start_from_model`) is taken from the loop's ``apply_start`` call. The run
is then timed over its first ``--measure_steps`` optimizer steps (a timestamp at the end of each, from the
loop's call of ``ScheduleMonitor.after_step``) and stopped there. The share is ``profile seconds /
(profile seconds + steps x the median step time)``, the time of a whole run extrapolated from the median
(robust to the stalls of a shared machine); the profile's seconds include the first model calls of the run
(allocation, the data loader's start), which the first step would otherwise pay, so the share is an upper bound.

Cases: the tiny SD, SD3 and Flux stand-ins of ``tests/helpers/tiny_pipelines.py`` (16x16 images, 8x8 latents) at
batch 8, full fine-tuning, and SD with LoRA at batch 1, on the built-in Fashion-MNIST; the race's 16x16 UNet
(channels 16, 32) on MNIST 16x16 at batch 64, EDM, as the finetune tier runs it.

    python benchmarks/profile_cost.py                     # writes benchmarks/results/profile_cost.json
    python benchmarks/profile_cost.py --cases sd unet16 --measure_steps 30 --output /tmp/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for extra in (REPO, REPO / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

os.environ.setdefault("TQDM_DISABLE", "1")  # before tqdm is imported: it reads the variable then

import torch  # noqa: E402

from benchmarks.t2i_step_time import build_model, load_script  # noqa: E402

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

    from benchmarks.race_tiers import unet_config

    torch.manual_seed(0)
    UNet2DModel.from_config(unet_config(16, (16, 32))).save_pretrained(os.path.join(folder, "unet"))
    EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5).save_pretrained(os.path.join(folder, "scheduler"))
    return folder


def case_args(case: str, model: str, out: str, opts) -> list[str]:
    script, kind, batch, lora = CASES[case]
    common = ["--pretrained_model_name_or_path", model, "--output_dir", out, "--train_batch_size", str(batch)]
    common += ["--max_train_steps", str(opts.steps), "--seed", "0", "--noise_sampler", "infonoise", "--infonoise_init", "profile"]
    if kind is None:
        from benchmarks.race_data import load_data

        data = load_data("mnist16")
        args = common + data["script_args"] + ["--diffusion", "edm", "--logger", "none", "--learning_rate", "3e-4"]
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


class _Enough(Exception):
    """Raised from the loop once the timed window is over (the rest of the run is not needed)."""


def run_case(case: str, opts, tmp: str) -> dict:
    import diffusers_infonoise.training as training
    import diffusers_infonoise.training.loop as loop

    script_name, kind, batch, _ = CASES[case]
    script = load_script(script_name)
    model = save_unet16(os.path.join(tmp, case)) if kind is None else build_model(kind, "tiny", os.path.join(tmp, case))
    seen: dict = {"stamps": []}
    original_apply, original_after = loop.apply_start, training.ScheduleMonitor.after_step

    def apply_start(sampler, start, **kw):
        seen["info"] = original_apply(sampler, start, **kw)
        seen["min_count"], seen["num_bins"] = sampler.estimator.min_count, sampler.estimator.num_bins
        seen["stamps"].append(time.perf_counter())  # the start of step 1
        return seen["info"]

    def after_step(self, accelerator, global_step):
        seen["stamps"].append(time.perf_counter())
        if global_step >= opts.measure_steps:
            raise _Enough
        return original_after(self, accelerator, global_step)

    loop.apply_start, training.ScheduleMonitor.after_step = apply_start, after_step
    try:
        script.main(case_args(case, model, os.path.join(tmp, case + "_out"), opts))
        raise RuntimeError(f"{case}: the run ended before {opts.measure_steps} steps")
    except _Enough:
        pass
    finally:
        loop.apply_start, training.ScheduleMonitor.after_step = original_apply, original_after
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    if "info" not in seen:
        raise RuntimeError(f"{case}: the run did not report a profile start")
    info, stamps = seen["info"], seen["stamps"]
    step_s = [b - a for a, b in zip(stamps, stamps[1:])]
    median = statistics.median(step_s)
    run_s = opts.steps * median
    return {
        "script": f"training_scripts/{script_name}.py",
        "batch_size": batch,
        "args": case_args(case, "<model>", "<out>", opts),
        "profile": info,
        "min_count": seen["min_count"],
        "num_bins": seen["num_bins"],
        "seconds_per_forward_pass": round(info["seconds"] / info["forward_passes"], 5),
        "measured_steps": len(step_s),
        "median_step_s": round(median, 5),
        "mean_step_s": round(sum(step_s) / len(step_s), 5),
        "forward_pass_over_step": round(info["seconds"] / info["forward_passes"] / median, 3),
        "run_s_extrapolated": round(run_s, 1),
        "share_of_run": round(info["seconds"] / (info["seconds"] + run_s), 5),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument("--steps", type=int, default=1000, help="the run's --max_train_steps (what the profile is sized to)")
    p.add_argument("--measure_steps", type=int, default=100, help="optimizer steps timed (then the run is stopped)")
    p.add_argument("--limit", type=float, default=0.05, help="the issue's bound on the profile's share")
    p.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "profile_cost.json"))
    opts = p.parse_args(argv)
    import logging

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
