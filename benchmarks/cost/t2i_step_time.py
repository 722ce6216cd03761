"""Per-step wall time of the text-to-image scripts with ``--noise_sampler infonoise`` against each
script's default sampler (issue 4: the ratio must be below 1.02).

The default sampler is what the script draws without ``--noise_sampler``, i.e. diffusers' own
sampling: uniform t for ``train_text_to_image.py`` (SD) and ``train_text_to_image_sdxl.py`` (SDXL),
logit-normal(0, 1) for ``train_text_to_image_sd3.py`` (SD3, ``--weighting_scheme logit_normal``),
uniform s for ``train_text_to_image_flux.py`` (Flux, ``--weighting_scheme none``). SDXL and Flux
have a tiny stand-in only (``--size tiny``).

Method (as ``benchmarks/cost/unconditional_step_time.py``). Both configurations run the unmodified script
in this one process through its ``main([...])`` (same seed, model, data, loss), alternating run by
run and swapping which goes first at every repeat, after one untimed warm-up run. ``main`` returns
the wall time of every optimizer step (the loop measures from the end of one step to the end of the
next: data loading, VAE and text encoding, the draws, forward/backward/AdamW, ``sampler.update``/
``step``, the refreshes of π every ``--refresh_every`` steps and tracker logging are in it;
start-up and the final save are not). The window is steps ``--skip``+1 .. ``--steps``; InfoNoise's
warm-up is ``--skip`` steps and its ``min_count`` 1, so π is adapted at step ``--skip``, just before
the window (checked: ``adapted_before_window``), where the schedule plots are drawn (then at most
every 500 steps); the window holds refreshes at their steady-state rate. Per run: the mean
step time over the window and its median step. Per repeat: the ratio infonoise / default of the
window means. Headline: the median of those ratios over the repeats.

On a shared machine two runs differ by several percent whatever the sampler, so the benchmark also
measures, in separate profiled runs of each configuration (:mod:`benchmarks.cost.attribution`:
:mod:`cProfile` around ``main``, nothing replaced), the time of every outermost call whose cost
depends on the sampler (its ``sample``/``add_noise``/``update``/``step``, the loop's
``weighted_loss``, ``ScheduleMonitor.observe``/``after_step``) and reports the *attributed ratio*
``1 + (sampler time/step with InfoNoise − with the default) / (default profiled step time)``: the
same quantity, without the run-to-run noise of the rest of the step. The profiler adds a cost to
every Python call, in the sampler code and in the rest of the step alike, so the ratio is one of
profiled times. On a GPU the profiler sees the host's time in each call (kernel launches, and the
wait of a call that synchronises), not its kernels' device time; run with ``CUDA_LAUNCH_BLOCKING=1``
to have each call's kernels finish inside it (every run is then synchronous).

Models are random pipelines built from configs (``benchmarks/tiny_pipelines.py``): ``--size small``
(64x64, a few million parameters; for CPUs) or ``--size full`` (SD 1.5's UNet/VAE/CLIP-L at 512x512;
SD3-medium's transformer and VAE, with two-layer text encoders of the real widths). Nothing is
downloaded. ``--synthetic_data`` uses random captioned images instead of the built-in Fashion-MNIST
(for machines without it or without ``datasets``).

Usage::

    python -m benchmarks.cost.t2i_step_time                  # CPU, --size small, writes benchmarks/results/t2i_step_time.json
    python -m benchmarks.cost.t2i_step_time --size full --mixed_precision bf16 --synthetic_data \\
        --output benchmarks/results/t2i_step_time_h200.json   # on a GPU
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

import torch

from benchmarks import RESULTS, training_script
from benchmarks.cost.attribution import METHOD, attributable_ratio, profile_window

SCRIPTS = {
    "sd": ("train_text_to_image", "uniform"),
    "sd3": ("train_text_to_image_sd3", "logit_normal"),
    "sdxl": ("train_text_to_image_sdxl", "uniform"),
    "flux": ("train_text_to_image_flux", "uniform"),  # diffusers' Flux default --weighting_scheme none: uniform s
}


def build_model(kind: str, size: str, folder: str, dtype: str = "float32") -> str:
    """Save a random pipeline of ``size`` to ``folder`` (weights stored in ``dtype``); returns ``folder``."""
    from benchmarks.tiny_pipelines import save_tiny_flux_pipeline, save_tiny_sd3_pipeline, save_tiny_sd_pipeline, save_tiny_sdxl_pipeline

    if kind in ("sdxl", "flux"):
        if size != "tiny":
            raise ValueError(f"--size {size}: the {kind} stand-in exists in the tiny size only")
        return {"sdxl": save_tiny_sdxl_pipeline, "flux": save_tiny_flux_pipeline}[kind](folder)
    build = save_tiny_sd_pipeline if kind == "sd" else save_tiny_sd3_pipeline
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))  # halves the files (and their loading) with bfloat16
    try:
        if torch.cuda.is_available():
            with torch.device("cuda"):  # random init of the full-size models is much faster there
                return build(folder, size=size)
        return build(folder, size=size)
    finally:
        torch.set_default_dtype(previous)


def save_synthetic_data(folder: str, num_images: int = 64, side: int = 96) -> str:
    """Random captioned RGB images (columns ``image``, ``text``) saved as a ``datasets`` folder that the scripts
    load with ``--dataset_name FOLDER``; returns ``folder``."""
    import datasets
    import numpy as np
    from PIL import Image

    from benchmarks.tiny_pipelines import CAPTIONS

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)) for _ in range(num_images)]
    captions = [CAPTIONS[i % len(CAPTIONS)] for i in range(num_images)]
    features = datasets.Features({"image": datasets.Image(), "text": datasets.Value("string")})
    datasets.Dataset.from_dict({"image": images, "text": captions}, features=features).save_to_disk(folder)
    return folder


def script_args(kind: str, sampler: str | None, model: str, output_dir: str, opts) -> list[str]:
    from benchmarks.tiny_pipelines import SIZES

    args = [
        "--pretrained_model_name_or_path",
        model,
        "--output_dir",
        output_dir,
        "--dataset_name",
        opts.dataset,
        "--resolution",
        str(SIZES[opts.size]["resolution"]),
        "--train_batch_size",
        str(opts.batch_size),
        "--max_train_samples",
        str(opts.max_train_samples),
        "--max_train_steps",
        str(opts.steps),
        "--lr_warmup_steps",
        "0",
        "--seed",
        "0",
        "--checkpointing_steps",
        "1000000",
        "--report_to",
        opts.report_to,
        "--infonoise_warmup_steps",
        str(opts.skip),
        "--infonoise_refresh_every",
        str(opts.refresh_every),
        "--infonoise_min_count",
        str(opts.min_count),
        "--mixed_precision",
        opts.mixed_precision,
    ]
    if kind == "sd3":
        args += ["--max_sequence_length", "77"]
    if kind == "flux":
        args += ["--max_sequence_length", "16"]
    if opts.mixed_precision != "no":
        args += ["--allow_tf32"]
    if opts.use_lora:
        args += ["--use_lora", "--lora_rank", str(opts.lora_rank)]
    if sampler is not None:
        args += ["--noise_sampler", sampler]
    return args


def run(script, kind: str, sampler: str | None, model: str, opts, extra_args=()) -> dict:
    """One run of the unmodified script (``extra_args`` appended to its arguments override them); ``main``'s result
    (``step_times``: the loop's wall time of each optimizer step) with the run's wall time ``run_total_s`` and the
    steps at which the schedule plots were drawn."""
    from accelerate.state import AcceleratorState, GradientState

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        result = script.main([*script_args(kind, sampler, model, os.path.join(tmp, "out"), opts), *extra_args])
        total = time.perf_counter() - t0
        folder = Path(tmp, "out", "schedule")
        plotted = sorted({int(f.stem.rsplit("_", 1)[1]) for f in folder.glob("*.png")}) if folder.is_dir() else []
    # the next run in this process starts a fresh Accelerator
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    return {**result, "run_total_s": total, "schedule_plotted_at_steps": plotted}


def timed_run(script, kind: str, sampler: str | None, model: str, opts) -> dict:
    """One run of the script, not profiled: the loop's per-step wall times over the window (steps ``opts.skip`` + 1
    .. ``opts.steps``)."""
    r = run(script, kind, sampler, model, opts)
    window = r["step_times"][opts.skip : opts.steps]
    plotted = r["schedule_plotted_at_steps"]
    return {
        "sampler": r["sampler"].name,
        "window_steps": len(window),
        "mean_step_s": sum(window) / len(window),
        "median_step_s": statistics.median(window),
        "max_step_s": max(window),
        "first_steps_s": r["step_times"][: opts.skip + 1],
        "run_total_s": r["run_total_s"],
        # InfoNoise: pi is first adapted (and the plots drawn) at the first refresh with enough statistics
        "schedule_plotted_at_steps": plotted,
        "adapted_before_window": bool(plotted) and plotted[0] <= opts.skip if sampler == "infonoise" else None,
    }


def profiled_run(script, kind: str, sampler: str | None, model: str, opts) -> dict:
    """The sampler-dependent code's time per step of the window, from two profiled runs
    (:func:`benchmarks.cost.attribution.profile_window`)."""
    return profile_window(lambda extra_args: run(script, kind, sampler, model, opts, extra_args), opts.skip, opts.steps)


def bench_script(kind: str, opts, tmp: str) -> dict:
    name, default = SCRIPTS[kind]
    script = training_script(name)
    t0 = time.perf_counter()
    model = build_model(kind, opts.size, os.path.join(tmp, f"{kind}_{opts.size}"), opts.model_dtype)
    build_s = time.perf_counter() - t0
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if not opts.no_warmup_run:
        timed_run(script, kind, None, model, opts)  # warm-up run: imports, caches, kernels; not recorded
    runs, ratios, attributed = [], [], []
    for rep in range(opts.repeats):
        order = ("infonoise", None) if rep % 2 == 0 else (None, "infonoise")
        res = {sampler: timed_run(script, kind, sampler, model, opts) for sampler in order}
        for sampler in order:  # after the timed runs, which paid the lazy imports and first calls (they would not cancel)
            r = res[sampler] = {**res[sampler], **profiled_run(script, kind, sampler, model, opts), "repeat": rep}
            runs.append(r)
            print(
                f"{kind} repeat {rep} {r['sampler']:12s} mean {r['mean_step_s'] * 1e3:8.1f} ms/step  median "
                f"{r['median_step_s'] * 1e3:8.1f} ms  max {r['max_step_s'] * 1e3:8.1f} ms  profiled: step "
                f"{r['profiled_mean_step_s'] * 1e3:8.1f} ms, sampler calls {r['sampler_code_s_per_step'] * 1e3:7.2f} ms/step",
                flush=True,
            )
            if r["reentries"]:
                print(f"  WARNING: calls into the sampler code from outside callers reached from it: {r['reentries']}", flush=True)
        ratios.append(res["infonoise"]["mean_step_s"] / res[None]["mean_step_s"])
        attributed.append(attributable_ratio(res["infonoise"], res[None]))
    assert all(r["sampler"] in ("infonoise", default) for r in runs)
    if not all(r["adapted_before_window"] for r in runs if r["sampler"] == "infonoise"):
        print(f"{kind}: WARNING: InfoNoise was not adapted before the timed window", flush=True)
    med = {s: statistics.median(r["median_step_s"] for r in runs if r["sampler"] == s) for s in ("infonoise", default)}
    mean = {s: statistics.median(r["mean_step_s"] for r in runs if r["sampler"] == s) for s in ("infonoise", default)}
    return {
        "script": f"training_scripts/{name}.py",
        "default_sampler": default,
        "script_args": {s or "default": script_args(kind, s, "<model>", "<tmp>", opts) for s in ("infonoise", None)},
        "model_build_s": build_s,
        "runs": runs,
        "ratios_per_repeat": ratios,
        "median_ratio": statistics.median(ratios),
        "ratio_of_median_steps": med["infonoise"] / med[default],
        "attributed_ratios_per_repeat": attributed,
        "median_attributed_ratio": statistics.median(attributed),
        "median_sampler_s_per_step": {
            s: statistics.median(r["sampler_code_s_per_step"] for r in runs if r["sampler"] == s) for s in ("infonoise", default)
        },
        "median_mean_step_s": mean,
        "median_median_step_s": med,
        "adapted_before_window": all(r["adapted_before_window"] for r in runs if r["sampler"] == "infonoise"),
        "passed": statistics.median(ratios) < opts.threshold,
        "passed_attributed": statistics.median(attributed) < opts.threshold,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scripts", nargs="+", default=["sd", "sd3"], choices=list(SCRIPTS))
    p.add_argument("--size", default="small", choices=["tiny", "small", "full"])
    p.add_argument("--steps", type=int, default=60, help="optimizer steps per run (end of the timed window)")
    p.add_argument("--skip", type=int, default=10, help="steps before the window (also InfoNoise's warm-up)")
    p.add_argument("--refresh_every", type=int, default=50, help="InfoNoise refresh period (the scripts' default)")
    p.add_argument(
        "--min_count",
        type=int,
        default=1,
        help="InfoNoise's min_count: 1 so that pi is adapted at the end of the --skip warm-up steps even with "
        "small batches (the default 8 needs about 8 samples per bin first); it does not change the cost "
        "of a step",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--max_train_samples", type=int, default=2048)
    p.add_argument("--dataset", default="fashion_mnist")
    p.add_argument("--synthetic_data", action="store_true", help="random captioned images instead of --dataset")
    p.add_argument("--mixed_precision", default="no", choices=["no", "fp16", "bf16"])
    p.add_argument("--report_to", default="tensorboard")
    p.add_argument("--use_lora", action="store_true", help="LoRA fine-tuning (faster steps: a stricter test of the overhead)")
    p.add_argument("--lora_rank", type=int, default=16)
    p.add_argument(
        "--model_dtype",
        default="float32",
        choices=["float32", "bfloat16", "float16"],
        help="dtype of the saved random pipeline (LoRA casts the frozen model to the mixed-precision dtype)",
    )
    p.add_argument(
        "--no_warmup_run", action="store_true", help="skip the untimed warm-up run (the first --skip steps of each run are untimed anyway)"
    )
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: 1 on CPU, where a second OpenMP thread spins against other jobs)"
    )
    p.add_argument("--threshold", type=float, default=1.02)
    p.add_argument("--output", default=str(RESULTS / "t2i_step_time.json"))
    opts = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    torch.set_num_threads(opts.threads or (torch.get_num_threads() if cuda else 1))
    import logging

    logging.getLogger().setLevel(logging.WARNING)
    load_start = os.getloadavg()
    t_start = time.time()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if opts.synthetic_data:
            opts.dataset = save_synthetic_data(os.path.join(tmp, "synthetic"))
        for kind in opts.scripts:
            results[kind] = bench_script(kind, opts, tmp)
    import diffusers

    from benchmarks.tiny_pipelines import SIZES

    result = {
        "benchmark": "per-step wall time of the text-to-image scripts, --noise_sampler infonoise vs the script's default",
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "method": (
            "Both samplers run the unmodified script in one process via main([...]), alternating run by run with the "
            "order swapped each repeat, after one untimed warm-up run. main() returns the wall time of each optimizer "
            f"step; the window is steps {opts.skip + 1}..{opts.steps} (InfoNoise's warm-up is {opts.skip} steps with "
            f"min_count {opts.min_count}, so pi is adapted at step {opts.skip}, where the schedule plots are drawn, and "
            "refreshed every refresh_every steps in the window; checked per run: adapted_before_window). Everything in "
            "the training loop (data, VAE and text encoding, draws, forward/backward/AdamW, sampler update/step, "
            "refreshes, tracker logging) is included; start-up and the final save are not. Ratio per repeat = mean step "
            "time infonoise / default over the window; the headline per script is the median over repeats. " + METHOD
        ),
        "config": {
            "size": opts.size,
            "resolution": SIZES[opts.size]["resolution"],
            "steps": opts.steps,
            "window_start": opts.skip,
            "refresh_every": opts.refresh_every,
            "infonoise_min_count": opts.min_count,
            "repeats": opts.repeats,
            "batch_size": opts.batch_size,
            "dataset": opts.dataset,
            "max_train_samples": opts.max_train_samples,
            "mixed_precision": opts.mixed_precision,
            "report_to": opts.report_to,
            "torch_threads": torch.get_num_threads(),
            "training": (f"LoRA rank {opts.lora_rank}" if opts.use_lora else "full fine-tuning") + ", AdamW, constant lr",
            "model_dtype": opts.model_dtype,
            "warmup_run": not opts.no_warmup_run,
        },
        "results": results,
        "threshold": opts.threshold,
        "passed": all(r["passed"] for r in results.values()),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "diffusers": diffusers.__version__,
            "cpu_count": os.cpu_count(),
            "device": torch.cuda.get_device_name(0) if cuda else "cpu",
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
        },
        "wall_s": time.time() - t_start,
    }
    Path(opts.output).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.output).write_text(json.dumps(result, indent=1) + "\n")
    for kind, r in results.items():
        print(
            f"{kind}: step time ratio infonoise/{r['default_sampler']}: median {r['median_ratio']:.4f} over "
            f"{opts.repeats} repeats ({', '.join(f'{x:.4f}' for x in r['ratios_per_repeat'])}), ratio of median steps "
            f"{r['ratio_of_median_steps']:.4f}, attributed ratio {r['median_attributed_ratio']:.4f}; "
            f"threshold {opts.threshold}: {'PASS' if r['passed'] else 'FAIL'}"
        )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
