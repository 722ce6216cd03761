"""What a fine-tune's best fixed density tracks, and in which noise range its lead is made (issue 31).

For one fine-tune race of the quality race (its runs finished under ``--out``), two measurements:

1. **Profiles.** ``infonoise profile`` (the command a user runs) of the pretrained model and of each run's final saved
   model (its EMA weights) on the race's training data, at 32 levels, beside the per-element posterior mean's error (a
   bound on the Bayes MMSE, docs/METHOD.md §5.10). From them, candidate targets per unit ln σ, each bounded by σ² and
   gated as the runs gated: ρ̂ of each final model, ρ̂ of the pretrained model, and the excess error the fine-tune
   has to remove, ``(e_pretrained − bound)/σ²``. Each is compared (TV, and its 10/50/90% quantiles in σ) with where
   the best fixed density draws (its π) and with its effective allocation ``φ = π·w``.
2. **Splices.** Samples drawn with the race's fixed inference sampler (18 Euler steps, the race's sampling seed and
   sample count, thresholded FD as the race scores them) with one run's model at σ ≥ c and another's below, for a
   list of c: the range where the two final models differ in what matters for the samples. c = 0 and c = ∞ give back
   each run's own final score.

    python -m benchmarks.finetune_target --out /work/race/results --tier draws --race tf-ft16-x0.25 \\
        --best 'logit_normal@mean=-2' --adaptive infonoise-profile_bound_none --seeds 0,1,2 --splice_seeds 0

Writes ``results/finetune_target.json`` with the command, the machine and the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import time
from pathlib import Path

import numpy as np

from benchmarks import REPO, RESULTS, write_results
from benchmarks.finetune_lag import _data_x0, _profile, per_element_bayes_mmse
from benchmarks.race.data import load_data
from diffusers_infonoise.argtypes import positive_int

SPLICE_LEVELS = (0.0, 0.03, 0.07, 0.15, 0.3, 0.7, 2.0, math.inf)


class SplicedDenoiser:
    """A UNet2DModel stand-in for sampling: ``above``'s output at VE σ ≥ ``c``, ``below``'s under it (EDM path: the
    network's timestep is ``EDM_TIMESTEP_SCALE·¼·ln σ``, diffusers' ``precondition_noise``)."""

    def __init__(self, above, below, c: float):
        self.above, self.below, self.c = above, below, c
        self.config, self.device = above.config, above.device

    def parameters(self):
        return self.above.parameters()

    def __call__(self, sample, timestep):
        from diffusers_infonoise.generation import EDM_TIMESTEP_SCALE

        sigma = math.exp(4.0 * float(timestep.flatten()[0]) / EDM_TIMESTEP_SCALE)
        return (self.above if sigma >= self.c else self.below)(sample, timestep=timestep)


def _flag(command: str, flag: str) -> str:
    a = shlex.split(command)
    return a[a.index(flag) + 1]


def _quantiles(density: np.ndarray, log_sigma: np.ndarray) -> list[float]:
    cdf = np.cumsum(density / density.sum())
    return [round(float(np.exp(np.interp(q, cdf, log_sigma))), 4) for q in (0.1, 0.5, 0.9)]


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    return round(0.5 * float(np.abs(a / a.sum() - b / b.sum()).sum()), 3)


def main() -> None:
    import torch

    from benchmarks.race.harness import pretrained_folder
    from benchmarks.race.tiers import parse_arm, tier_races
    from diffusers_infonoise.weighting import x0_loss_weight

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="the quality race's --out (holds quality_race_<tier>/)")
    p.add_argument("--tier", type=str, required=True)
    p.add_argument("--race", type=str, required=True, help="a fine-tune race of that tier")
    p.add_argument("--best", type=str, required=True, help="the race's best fixed arm (a logit_normal@mean=<m> point)")
    p.add_argument(
        "--adaptive", type=str, required=True, help="comma-separated InfoNoise arms compared with it (the first is spliced with it)"
    )
    p.add_argument("--seeds", type=str, default="0,1,2", help="seeds whose final models are profiled")
    p.add_argument("--splice_seeds", type=str, default="0", help="seeds whose two final models are spliced ('' for none)")
    p.add_argument("--num_samples", type=positive_int, default=512, help="probe samples of each offline profile")
    p.add_argument("--results", type=Path, default=RESULTS / "finetune_target.json")
    args = p.parse_args()

    race = next((r for r in tier_races(args.tier) if r.name == args.race), None)
    if race is None or not race.pretrained or race.diffusion != "edm":
        raise SystemExit(f"--race: {args.race!r} is not an EDM fine-tune race of the tier {args.tier!r}")
    best = parse_arm(args.best)
    if best.name != "logit_normal":
        raise SystemExit(f"--best: a logit_normal[@mean=<m>,std=<s>] arm, got {args.best!r}")
    root = args.out / f"quality_race_{args.tier}"
    work = root / "target_profiles"
    t0 = time.time()
    run_json = lambda arm, s: json.loads((root / "runs" / f"{race.name}__{arm}__s{s}.json").read_text())  # noqa: E731
    # a run's saved pipeline: its --output_dir (a run copied from another tier, --reuse, keeps the folder it ran in)
    model_dir = lambda arm, s: REPO / _flag(run_json(arm, s)["command"], "--output_dir")  # noqa: E731  (absolute stays)
    adaptive_arms = args.adaptive.split(",")
    script_args = load_data(race.dataset)["script_args"]
    dataset = Path(script_args[script_args.index("--dataset_name") + 1])

    # 1. profiles, on one grid in ln σ
    pre = _profile(pretrained_folder(root, race), dataset, work / race.pretrained, args.num_samples)
    log_sigma = np.linspace(math.log(0.002), math.log(80.0), 400)
    sigma = np.exp(log_sigma)
    at = lambda prof: np.exp(np.interp(log_sigma, prof["log_sigma"], np.log(prof["mmse"])))  # noqa: E731
    bound = per_element_bayes_mmse(_data_x0(dataset), sigma)
    if bound is None:
        raise SystemExit(f"--race: the data of {race.name} takes more than 16 values; the per-element bound needs fewer")
    c = (pre.get("gate") or {}).get("pivot")
    gate = np.ones_like(sigma) if c is None else sigma**3 / (sigma**3 + c**3)
    rate = lambda e: np.minimum(e, sigma**2) / sigma**2 * gate  # noqa: E731  (bounded by σ², gated: the sampler's ρ̂)
    # the runs' loss weight on the x0 error (the EDM recipe, the pretrain's σ_data), the library's (METHOD.md §4)
    sigma_data = json.loads((pretrained_folder(root, race) / "scheduler" / "scheduler_config.json").read_text())["sigma_data"]
    w = x0_loss_weight("edm", "sample", torch.from_numpy(sigma), sigma_data=sigma_data).numpy()
    m, s = dict(best.params).get("mean", 0.0), dict(best.params).get("std", 1.0)
    best_pi = np.exp(-0.5 * ((log_sigma - m) / s) ** 2)  # logit-normal on VE: ln σ ~ N(mean, std²)
    e_pre = at(pre)
    candidates = {
        "pretrained model's rho_hat": rate(e_pre),
        "per-element Bayes bound's rho": bound / sigma**2 * gate,
        "pretrained model's excess error (e - bound)/sigma^2, gated": np.clip(e_pre - bound, 0, None) / sigma**2 * gate,
    }
    by_sigma = {"sigma": [round(float(x), 4) for x in np.asarray(pre["sigma"])], "pretrained": [float(f"{x:.4g}") for x in pre["mmse"]]}
    by_sigma["per_element_bayes_mmse"] = [float(f"{x:.4g}") for x in per_element_bayes_mmse(_data_x0(dataset), np.asarray(pre["sigma"]))]
    adaptive_draws = {}
    for seed in [int(x) for x in args.seeds.split(",")]:
        for arm in (args.best, *adaptive_arms):
            prof = _profile(model_dir(arm, seed), dataset, work / f"{race.name}__{arm}__s{seed}", args.num_samples)
            candidates[f"{arm} s{seed} final model's rho_hat"] = rate(at(prof))
            by_sigma[f"{arm} s{seed}"] = [
                float(f"{x:.4g}") for x in np.exp(np.interp(np.log(pre["sigma"]), prof["log_sigma"], np.log(prof["mmse"])))
            ]
            if arm == args.best:
                continue
            sched = run_json(arm, seed)["schedule"]
            if sched is None:
                raise SystemExit(f"--adaptive: {arm!r} stored no InfoNoise schedule (an InfoNoise arm is needed)")
            edges = np.asarray(sched["edges"])
            pi = np.interp(log_sigma, 0.5 * (edges[1:] + edges[:-1]), np.asarray(sched["pi"]) / np.diff(edges))
            adaptive_draws[f"{arm} s{seed}"] = {
                "pi_sigma_10_50_90": _quantiles(pi, log_sigma),
                "phi_sigma_10_50_90": _quantiles(pi * w, log_sigma),
                "tv_pi_best_pi": _tv(pi, best_pi),
                "tv_phi_rho": sched.get("tv_phi_rho"),
            }
    targets = {
        k: {"tv_best_pi": _tv(v, best_pi), "tv_best_phi": _tv(v, best_pi * w), "sigma_10_50_90": _quantiles(v, log_sigma)}
        for k, v in candidates.items()
    }

    # 2. splices
    from diffusers import UNet2DModel

    from benchmarks.race.harness import sample
    from benchmarks.race.sample_quality import Scorer

    torch.set_num_threads(1)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # where the harness sampled the runs' evaluations
    scorer = Scorer(race.dataset)
    splices = {}
    for seed in [int(x) for x in args.splice_seeds.split(",") if x]:  # '' for none
        pair = (args.best, adaptive_arms[0])
        nets = {a: UNet2DModel.from_pretrained(model_dir(a, seed) / "unet").to(device).eval() for a in pair}
        recorded = {a: run_json(a, seed)["quality"][scorer.primary][-1] for a in nets}
        for above, below in (pair, pair[::-1]):
            rows = []
            for level in SPLICE_LEVELS:
                net = SplicedDenoiser(nets[above], nets[below], level)
                score = scorer.score(sample(net, race, run_json(above, seed)["inference"]["sampling_seed"]).cpu())[scorer.primary]
                rows.append({"c": level if math.isfinite(level) else "inf", scorer.primary: round(float(score), 2)})
                print(f"s{seed}: {above} at sigma >= {level}, {below} below: {scorer.primary} {score:.2f}", flush=True)
            splices[f"s{seed}: {above} above c, {below} below"] = {"rows": rows, "recorded_final": recorded}

    result = {
        "benchmark": "what a fine-tune's best fixed density tracks, and where its lead is made (issue 31)",
        "method": __doc__.split("\n\n")[1].replace("\n", " ") + " " + __doc__.split("\n\n")[2].replace("\n", " "),
        "race": race.name,
        "best": {
            "arm": args.best,
            "pi_sigma_10_50_90": _quantiles(best_pi, log_sigma),
            "phi_sigma_10_50_90": _quantiles(best_pi * w, log_sigma),
        },
        "adaptive": {"arms": adaptive_arms, "final_draws": adaptive_draws},
        "gate_pivot": c,
        "targets": targets,
        "x0_error_by_sigma": by_sigma,
        "splices": splices,
    }
    write_results(args.results, "finetune_target", result, started=t0)


if __name__ == "__main__":
    main()
