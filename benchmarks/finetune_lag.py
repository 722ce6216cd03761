"""How far the online estimate of a fine-tune lags behind the model it trains (issue 22's "find out why").

For finished runs of the quality race's ``finetune`` or ``tracking`` tier (``--tier``), it profiles offline (``infonoise profile``, the
command a user runs) the pretrained model the runs start from and each run's final saved model (its EMA
weights), on the run's training data, and compares them with the online ρ̂ the run stored at its end: TV
distances on the run's bins, the mean and std of ln σ under each, and the mass above σ = e. Every ρ̂ here
is gated as the run gated (pivot 0.2 on binarized data). Writes ``results/finetune_lag.json`` with the
command, the machine and the per-run figures.

    python -m benchmarks.finetune_lag --out /path/to/bench_results \\
        --runs ft-edm-binarized_digits16__infonoise__s0,ft-edm-binarized_digits16__infonoise-init_base__s0
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import RESULTS
from benchmarks.race.data import load_data


def _profile(model: Path, dataset: Path, out: Path, num_samples: int) -> dict:
    """The offline profile of a saved pipeline on the training data (``infonoise profile``); one already written
    to ``out`` with the same settings is read back (an interrupted benchmark resumes)."""
    done = out / "profile.json"
    if done.is_file() and json.loads(done.read_text())["settings"].get("num_samples") == num_samples:
        return json.loads(done.read_text())["profile"]
    cmd = [sys.executable, "-m", "diffusers_infonoise.cli", "profile", "--model", str(model), "--dataset", str(dataset),
           "--split", "train", "--num-samples", str(num_samples), "--num-levels", "32", "--seed", "0",
           "--samplers", "logit_normal", "--output", str(out), "--no-progress"]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    return json.loads((out / "profile.json").read_text())["profile"]


def _on_bins(profile: dict, edges: np.ndarray) -> np.ndarray:
    """An offline ρ̂ (a density per unit ln σ at its levels) as masses on a run's bins (linear interpolation)."""
    centres = 0.5 * (edges[1:] + edges[:-1])
    mass = np.interp(centres, profile["log_sigma"], profile["rho_hat"], left=0.0, right=0.0) * np.diff(edges)
    return mass / mass.sum()


def _shape(mass: np.ndarray, edges: np.ndarray) -> dict:
    centres = 0.5 * (edges[1:] + edges[:-1])
    mean = float((mass * centres).sum())
    return {
        "mean_ln_sigma": round(mean, 3),
        "std_ln_sigma": round(float(np.sqrt((mass * (centres - mean) ** 2).sum())), 3),
        "mass_sigma_above_e": round(float(mass[centres > 1.0].sum()), 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="the quality race's --out (holds quality_race_<tier>/)")
    p.add_argument("--tier", type=str, default="finetune", help="the tier whose fine-tunes are compared (finetune, tracking)")
    p.add_argument("--runs", type=str, required=True, help="comma-separated run ids of that tier")
    p.add_argument("--num_samples", type=int, default=1024, help="probe samples of each offline profile")
    p.add_argument("--results", type=Path, default=RESULTS / "finetune_lag.json")
    args = p.parse_args()

    root = args.out / f"quality_race_{args.tier}"
    work = root / "lag_profiles"
    t0 = time.time()
    pretrained_cache: dict = {}
    rows = {}
    for run_id in args.runs.split(","):
        run = json.loads((root / "runs" / f"{run_id}.json").read_text())
        edges = np.asarray(run["schedule"]["edges"], dtype=np.float64)
        online = np.asarray(run["schedule"]["rho_hat"], dtype=np.float64) * np.diff(edges)
        online /= online.sum()
        script_args = load_data(run["dataset"])["script_args"]  # the run's --dataset_name, built if missing
        dataset = Path(script_args[script_args.index("--dataset_name") + 1])
        pre_name = run["hyperparameters"]["pretrained"]["name"]
        key = (pre_name, run["dataset"])
        if key not in pretrained_cache:
            out = work / f"{pre_name}__{run['dataset']}"
            pretrained_cache[key] = _profile(root / "pretrained" / pre_name, dataset, out, args.num_samples)
        start = _on_bins(pretrained_cache[key], edges)
        final = _on_bins(_profile(root / "runs" / run_id, dataset, work / run_id, args.num_samples), edges)
        tv = lambda a, b: round(0.5 * float(np.abs(a - b).sum()), 3)  # noqa: E731
        rows[run_id] = {
            "tv_online_vs_final_model": tv(online, final),
            "tv_online_vs_pretrained_model": tv(online, start),
            "tv_pretrained_vs_final_model": tv(start, final),
            "online_rho_hat": _shape(online, edges),
            "pretrained_model_rho_hat": _shape(start, edges),
            "final_model_rho_hat": _shape(final, edges),
            "tv_phi_rho": run["schedule"].get("tv_phi_rho"),
            "ema_decay": run["schedule"]["hyperparameters"]["ema_decay"],
            "memory": run["schedule"]["hyperparameters"].get("memory"),  # the tracking estimator's (None before it)
            "num_updates": run["schedule"]["num_updates"],
        }
        print(run_id, json.dumps(rows[run_id]))
    result = {
        "benchmark": "the online estimate of a fine-tune against offline profiles of its start and end (issues 22, 31)",
        "tier": args.tier,
        "command": " ".join(["python", "-m", "benchmarks.finetune_lag"] + sys.argv[1:]),
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
        "num_samples": args.num_samples,
        "results": rows,
        "machine": {"platform": platform.platform(), "wall_s": round(time.time() - t0, 1)},
    }
    args.results.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
