"""Where a fine-tune's first steps lower the model's error, by noise level (issue 31).

The step-0 profiles of two pretrains on the same new data can agree while the fine-tunes from them favour different
schedules (tier ``content``). This measures what the profiles do not: for each fine-tune race, a short fine-tune of
``--steps`` optimizer steps from its pretrain, drawing uniformly in ln σ (``log_uniform``, so that no level is
favoured), with the race's own arguments otherwise (its learning rate and warm-up, constant after it), then ``infonoise
profile`` (32 levels, ``--num_samples`` training examples) of the pretrained and of the short run's model. Per level:
the x0 error before and after, and the fall of the entropy-rate integrand it gives, ``(min(e_0, σ²) − min(e_k, σ²))/σ²``
(the sampler's ρ̂ bounded by σ², METHOD.md §5.10, ungated), whose 10/50/90% σ quantiles say where the first steps learn.

    python -m benchmarks.finetune_learnability --out /work/race/results --races draws:tf-ft16-x0.25,content:tf-ft-m2bm-x0.25 \\
        --steps 40 --results benchmarks/results/finetune_learnability.json

Writes the results file with the command, the code and the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from benchmarks import RESULTS, write_results
from benchmarks.finetune_lag import _profile
from benchmarks.race.data import load_data
from diffusers_infonoise.argtypes import positive_int


def _quantiles(density: np.ndarray, log_sigma: np.ndarray) -> list[float]:
    cdf = np.cumsum(density / density.sum())
    return [round(float(np.exp(np.interp(q, cdf, log_sigma))), 4) for q in (0.1, 0.5, 0.9)]


def main() -> None:
    from benchmarks.race.harness import RunSpec, pretrained_folder, run_one
    from benchmarks.race.tiers import tier_races

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="the quality race's --out (holds quality_race_<tier>/)")
    p.add_argument("--races", type=str, required=True, help="comma-separated TIER:RACE fine-tune races")
    p.add_argument("--steps", type=positive_int, default=40, help="optimizer steps of each short fine-tune")
    p.add_argument("--num_samples", type=positive_int, default=512, help="probe samples of each offline profile")
    p.add_argument("--results", type=Path, default=RESULTS / "finetune_learnability.json")
    args = p.parse_args()

    t0 = time.time()
    rows = {}
    for item in args.races.split(","):
        tier, _, name = item.partition(":")
        race = next((r for r in tier_races(tier) if r.name == name), None)
        if race is None or not race.pretrained or race.diffusion != "edm":
            raise SystemExit(f"--races: {item!r} is not an EDM fine-tune race (TIER:RACE)")
        root = args.out / f"quality_race_{tier}"
        short = dataclasses.replace(race, name=f"{race.name}-probe{args.steps}", steps=args.steps, eval_every=args.steps, eval_steps=None)
        spec = RunSpec(tier, short, "log_uniform", 0, str(root))
        if not spec.result_path.exists():
            run_one(spec)
        script_args = load_data(race.dataset)["script_args"]
        dataset = Path(script_args[script_args.index("--dataset_name") + 1])
        work = root / "target_profiles"
        before = _profile(pretrained_folder(root, race), dataset, work / race.pretrained, args.num_samples)
        after = _profile(spec.out_dir, dataset, work / spec.run_id, args.num_samples)
        sigma = np.asarray(before["sigma"], dtype=np.float64)
        e0 = np.asarray(before["mmse"], dtype=np.float64)
        ek = np.exp(np.interp(np.log(sigma), after["log_sigma"], np.log(after["mmse"])))
        fall = np.clip(np.minimum(e0, sigma**2) - np.minimum(ek, sigma**2), 0.0, None) / sigma**2
        rows[item] = {
            "pretrained": race.pretrained,
            "dataset": race.dataset,
            "final_quality_of_the_short_run": json.loads(spec.result_path.read_text())["quality"],
            "fall_sigma_10_50_90": _quantiles(fall, np.log(sigma)),
            "by_sigma": {
                "sigma": [round(float(x), 4) for x in sigma],
                "x0_error_pretrained": [float(f"{x:.4g}") for x in e0],
                f"x0_error_after_{args.steps}_steps": [float(f"{x:.4g}") for x in ek],
                "ratio": [round(float(x), 3) for x in ek / e0],
            },
        }
        print(item, json.dumps({k: rows[item][k] for k in ("pretrained", "fall_sigma_10_50_90")}), flush=True)
    result = {
        "benchmark": "where a fine-tune's first steps lower the model's error, by noise level (issue 31)",
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
        "steps": args.steps,
        "num_samples": args.num_samples,
        "results": rows,
    }
    write_results(args.results, "finetune_learnability", result, started=t0)


if __name__ == "__main__":
    main()
