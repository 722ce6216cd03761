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
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import RESULTS, write_results
from benchmarks.race.data import load_data
from diffusers_infonoise.argtypes import positive_int


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


def per_element_bayes_mmse(x0: np.ndarray, sigmas: np.ndarray) -> np.ndarray | None:
    """The x0 error per element (VE σ) of the per-element posterior mean on ``x0`` ((N, ...) data in the training
    scale), at ``sigmas``: the library's bound of a profile start (:func:`diffusers_infonoise.data_statistics.
    per_element_bayes_mmse`, docs/METHOD.md §5.10) with each element's empirical frequencies as they are (no pseudo-count:
    the benchmark tallies up to 20000 samples); None when the data takes more than 16 values."""
    import torch

    from diffusers_infonoise.data_statistics import ValueTally
    from diffusers_infonoise.data_statistics import per_element_bayes_mmse as bound

    tally = ValueTally()
    tally.observe(torch.from_numpy(np.asarray(x0, dtype=np.float64)).reshape(len(x0), -1))
    resolved = tally.resolve()
    if resolved is None:
        return None
    return bound(*resolved, torch.as_tensor(sigmas, dtype=torch.float64), prior_count=0.0).numpy()


def _bounded_profile(profile: dict, bound: np.ndarray) -> dict:
    """``profile`` with its m̂ bounded by ``bound`` as well (at its levels), through the same bound by σ² and the same
    gate (n = 3) as the sampler's profile: ρ̂ ∝ min(m̂, bound, σ²)/σ² · σ³/(σ³ + c³), per unit ln σ."""
    sigma = np.asarray(profile["sigma"], dtype=np.float64)
    m = np.minimum(np.minimum(np.asarray(profile["mmse"], dtype=np.float64), bound), sigma**2)
    c = (profile.get("gate") or {}).get("pivot")
    q = m / sigma**2 * (1.0 if c is None else sigma**3 / (sigma**3 + c**3))
    return {"log_sigma": profile["log_sigma"], "rho_hat": list(q / np.trapezoid(q, profile["log_sigma"]))}


def _data_x0(dataset: Path, limit: int = 20000) -> np.ndarray | None:
    """Up to ``limit`` samples of an image data set in the training scale, as the scripts map them: 8-bit images to
    [−1, 1], a column of float arrays as it is; None for data of another kind."""
    from datasets import Image, load_from_disk

    ds = load_from_disk(str(dataset))
    if "image" not in ds.column_names:
        return None
    x = np.stack([np.asarray(v, dtype=np.float32) for v in ds[: min(limit, len(ds))]["image"]])
    # 8-bit images map to [−1, 1]; a column of arrays (the transfer tier's scaled data) already holds x0
    return x / 127.5 - 1.0 if isinstance(ds.features["image"], Image) else x


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
    p.add_argument("--tier", choices=("finetune", "tracking", "cadence"), default="finetune", help="the tier whose fine-tunes are compared")
    p.add_argument("--runs", type=str, required=True, help="comma-separated run ids of that tier")
    p.add_argument("--num_samples", type=positive_int, default=1024, help="probe samples of each offline profile")
    p.add_argument("--results", type=Path, default=RESULTS / "finetune_lag.json")
    p.add_argument(
        "--per_element_bound",
        action="store_true",
        help="also bound the pretrained model's m̂ by the per-element Bayes denoiser's error (image data on at most 16 "
        "values) and compare that start with the final model",
    )
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
        final_profile = _profile(root / "runs" / run_id, dataset, work / run_id, args.num_samples)
        final = _on_bins(final_profile, edges)
        tv = lambda a, b: round(0.5 * float(np.abs(a - b).sum()), 3)  # noqa: E731
        rows[run_id] = {
            "tv_online_vs_final_model": tv(online, final),
            "tv_online_vs_pretrained_model": tv(online, start),
            "tv_pretrained_vs_final_model": tv(start, final),
        }
        if args.per_element_bound:
            x0 = _data_x0(dataset)
            levels = np.asarray(pretrained_cache[key]["sigma"], dtype=np.float64)
            bound = None if x0 is None else per_element_bayes_mmse(x0, levels)
            if bound is not None:
                bounded = _on_bins(_bounded_profile(pretrained_cache[key], bound), edges)
                final_at = np.exp(np.interp(np.log(levels), final_profile["log_sigma"], np.log(final_profile["mmse"])))
                rows[run_id] |= {
                    "tv_pretrained_bounded_vs_final_model": tv(bounded, final),
                    "pretrained_bounded_rho_hat": _shape(bounded, edges),
                    "by_sigma": {
                        "sigma": [round(float(x), 4) for x in levels],
                        "mmse_pretrained": [float(f"{x:.4g}") for x in pretrained_cache[key]["mmse"]],
                        "mmse_final": [float(f"{x:.4g}") for x in final_at],
                        "per_element_bayes_mmse": [float(f"{x:.4g}") for x in bound],
                    },
                }
        rows[run_id] |= {
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
        "method": __doc__.split("\n\n")[1].replace("\n", " "),
        "num_samples": args.num_samples,
        "results": rows,
    }
    write_results(args.results, "finetune_lag", result, started=t0)


if __name__ == "__main__":
    main()
