"""InfoGrid against each scheduler's own spacing at low NFE (issue 14, METHOD.md §8).

On the final models of quality-race runs (their ``runs/<race>__<sampler>__s<seed>/`` pipeline
folders, EMA weights and the training scheduler), sample with N = 4, 6, 8, 12, 18 steps of:

* ``default``: the scheduler's own spacing: Karras ρ = 7 on EDM (``EDMEulerScheduler``), trailing
  on DDPM (``EulerDiscreteScheduler`` with ``timestep_spacing="trailing"``: deterministic DDIM is Euler
  on the same ODE, and DDIM takes no custom grid), the flow shift on flow;
* ``stored-<g>``: the InfoGrid of the schedule stored in the scheduler config (InfoNoise runs), for
  each density g of :data:`~diffusers_infonoise.inference_grid.GRID_DENSITIES`;
* ``offline-<g>``: the InfoGrid of the model's offline profile (``profile_from_model`` on held-out
  data), so that models trained with a fixed density (EDM log-normal, logit-normal, uniform) get one.

Scores are the race's own (FD in the race's feature space; thresholded FD on binary data; k-mer JS
on DNA), on the same number of samples with the same sampling seed as the race's evaluation. The
command, seeds and every figure go to ``results/infogrid_<name>.json`` and ``.md``; every InfoNoise
row states its run's TV(φ, ρ̂).

    python -m benchmarks.infogrid --runs benchmarks/results/quality_race_recheck/runs --name recheck
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import RESULTS
from benchmarks import dna as DNA
from benchmarks.race.sample_quality import Scorer
from benchmarks.race.tiers import EVAL_SEED, Race, eval_scheduler, tier_races

NFES = (4, 6, 8, 12, 18)


def default_scheduler(diffusion: str):
    """The scheduler whose own spacing is the baseline (module docstring)."""
    from diffusers import EulerDiscreteScheduler

    if diffusion == "ddpm":
        return EulerDiscreteScheduler(
            num_train_timesteps=1000, beta_schedule="linear", prediction_type="epsilon", timestep_spacing="trailing"
        )
    race = Race(name="", dataset="", diffusion=diffusion, samplers=(), baseline="", seeds={}, steps=0, eval_every=0)
    return eval_scheduler(race)


def _race_of(run_name: str) -> tuple[str, str, int]:
    race, sampler, seed = run_name.split("__")
    return race, sampler, int(seed.lstrip("s"))


def grids_for(scheduler, nfe: int, *, densities, cache: dict) -> dict:
    """Every grid of one run at ``nfe`` steps: name → VE σ (None: the scheduler's own spacing)."""
    from diffusers_infonoise.inference_grid import infogrid
    from diffusers_infonoise.schedule_io import read_schedule

    out = {"default": None}
    stored = read_schedule(scheduler)
    for density in densities:
        if stored is not None:
            out[f"stored-{density}"] = infogrid(scheduler, nfe, density=density).sigmas
        out[f"offline-{density}"] = infogrid(cache["profile"], nfe, density=density).sigmas
    return out


def offline_profile(unet, scheduler, race: Race, data: dict, probe: int):
    """The model's profile on ``probe`` held-out samples (x0 in [−1, 1]), 32 levels, the automatic gate."""
    import torch

    from diffusers_infonoise.diagnostics import profile_from_model

    rng = np.random.default_rng(0)
    if race.dataset.startswith("dna"):
        from diffusers_infonoise.data import one_hot_sequences

        seqs = data["heldout"]
        x0 = one_hot_sequences([seqs[i] for i in rng.permutation(len(seqs))[:probe]], DNA.ALPHABET)
    else:
        imgs = data["heldout"][rng.permutation(len(data["heldout"]))[:probe]]
        x0 = torch.from_numpy(imgs.astype(np.float32) / 127.5 - 1.0)[:, None]
    return profile_from_model(
        unet,
        scheduler,
        x0.float(),
        num_levels=32,
        num_noise_draws=2,
        batch_size=256,
        generator=torch.Generator().manual_seed(0),
        progress=False,
    )


def evaluate_run(run_dir: str, nfes=NFES, probe: int = 512, num_samples: int | None = None, densities=("rho", "q", "q_sigma")) -> dict:
    import torch
    from diffusers import DDPMPipeline

    from diffusers_infonoise.generation import generate_images
    from diffusers_infonoise.pipeline import InfoNoiseUnconditionalPipeline
    from diffusers_infonoise.schedule_io import read_schedule

    torch.set_num_threads(1)
    run_dir = Path(run_dir)
    race_name, sampler_name, seed = _race_of(run_dir.name)
    race = _find_race(race_name)
    scorer = Scorer(race.dataset)
    index = json.loads((run_dir / "model_index.json").read_text())
    cls = InfoNoiseUnconditionalPipeline if isinstance(index["_class_name"], list) else DDPMPipeline
    pipe = cls.from_pretrained(str(run_dir))
    unet, train_sched = pipe.unet.eval(), pipe.scheduler
    n = num_samples or race.num_samples
    t0 = time.time()
    cache = {"profile": offline_profile(unet, train_sched, race, scorer.data, probe)}
    stored = read_schedule(train_sched)
    rows = []
    for nfe in nfes:
        for grid_name, sigmas in grids_for(train_sched, nfe, densities=densities, cache=cache).items():
            sched = default_scheduler(race.diffusion)
            gen = torch.Generator().manual_seed(EVAL_SEED)
            images = torch.cat(
                [
                    generate_images(unet, sched, min(race.sample_batch, n - i), num_inference_steps=nfe, generator=gen, sigmas=sigmas).cpu()
                    for i in range(0, n, race.sample_batch)
                ]
            )
            score = scorer.score(images)
            rows.append(
                {
                    "nfe": nfe,
                    "grid": grid_name,
                    "primary": score[scorer.primary],
                    "scores": score,
                    "sigmas": None if sigmas is None else [round(float(s), 6) for s in sigmas],
                }
            )
            print(f"[{run_dir.name}] nfe {nfe} {grid_name}: {scorer.primary} {score[scorer.primary]:.4g}", flush=True)
    return {
        "run": run_dir.name,
        "race": race_name,
        "dataset": race.dataset,
        "diffusion": race.diffusion,
        "sampler": sampler_name,
        "seed": seed,
        "metric": scorer.primary,
        "num_samples": n,
        "probe": probe,
        "tv_phi_rho": None if stored is None else stored.get("tv_phi_rho"),
        "rows": rows,
        "seconds": round(time.time() - t0, 1),
    }


def _find_race(name: str) -> Race:
    for tier in ("recheck", "recheck_full", "recheck_paths", "full", "quick", "gate"):
        for race in tier_races(tier):
            if race.name == name:
                return race
    raise ValueError(f"race {name!r}: not in any tier of benchmarks/race/tiers/")


def summarize(results: list[dict]) -> dict:
    """Per race, sampler and NFE: the mean primary score over seeds of each grid, and the best InfoGrid's
    ratio to the default spacing."""
    table: dict = {}
    for r in results:
        for row in r["rows"]:
            key = (r["race"], r["sampler"], row["nfe"])
            table.setdefault(key, {}).setdefault(row["grid"], []).append(row["primary"])
    out = []
    for (race, sampler, nfe), grids in sorted(table.items()):
        means = {g: float(np.mean(v)) for g, v in grids.items()}
        out.append(
            {
                "race": race,
                "sampler": sampler,
                "nfe": nfe,
                "means": means,
                "seeds": len(grids["default"]),
                "ratio_to_default": {g: means[g] / means["default"] for g in means if g != "default"},
            }
        )
    return {"rows": out}


def write_markdown(name: str, results: list[dict], summary: dict, command: str, path: Path) -> None:
    grids = sorted({g for row in summary["rows"] for g in row["means"]} - {"default"})
    lines = [
        f"# InfoGrid vs the default spacing: {name}",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs; sampling seed {EVAL_SEED}; "
        f"{results[0]['num_samples'] if results else 0} samples per cell. Scores: the race's primary metric "
        "(lower is better); in brackets the ratio to the default spacing.",
        "",
    ]
    tvs = {r["run"]: r["tv_phi_rho"] for r in results}
    lines.append("TV(φ, ρ̂) of the InfoNoise runs: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(tvs.items()) if v is not None) + ".")
    lines.append("")
    lines.append("| race | sampler | NFE | seeds | default | " + " | ".join(grids) + " |")
    lines.append("|---|---|---|---|---|" + "---|" * len(grids))
    for row in summary["rows"]:
        cells = []
        for g in grids:
            if g in row["means"]:
                cells.append(f"{row['means'][g]:.4g} ({row['ratio_to_default'][g]:.2f})")
            else:
                cells.append("")
        lines.append(
            f"| {row['race']} | {row['sampler']} | {row['nfe']} | {row['seeds']} | {row['means']['default']:.4g} | "
            + " | ".join(cells)
            + " |"
        )
    path.write_text("\n".join(lines) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, help="a quality-race runs/ folder")
    p.add_argument("--name", required=True, help="results/infogrid_<name>.json and .md")
    p.add_argument("--match", default="", help="comma-separated substrings; a run is kept when its name has one")
    p.add_argument("--nfe", default=",".join(map(str, NFES)))
    p.add_argument("--num_samples", type=int, default=None, help="default: the race's")
    p.add_argument("--probe", type=int, default=512, help="held-out samples of the offline profile")
    p.add_argument("--densities", default="rho,q,q_sigma", help="InfoGrid densities (METHOD.md §8)")
    p.add_argument("--workers", type=int, default=2)
    opts = p.parse_args(argv)
    command = "python -m benchmarks.infogrid " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    runs = sorted(d for d in Path(opts.runs).iterdir() if d.is_dir() and (d / "model_index.json").is_file())
    if opts.match:
        keys = opts.match.split(",")
        runs = [d for d in runs if any(k in d.name for k in keys)]
    nfes = tuple(int(v) for v in opts.nfe.split(","))
    print(f"{len(runs)} runs: " + ", ".join(d.name for d in runs), flush=True)
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(opts.workers) as pool:
        results = pool.starmap(evaluate_run, [(str(d), nfes, opts.probe, opts.num_samples, tuple(opts.densities.split(","))) for d in runs])
    summary = summarize(results)
    out = RESULTS / f"infogrid_{opts.name}.json"
    out.write_text(json.dumps({"command": command, "nfe": nfes, "eval_seed": EVAL_SEED, "summary": summary, "runs": results}, indent=1))
    write_markdown(opts.name, results, summary, command, out.with_suffix(".md"))
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
