"""Reproduce the paper's Figure 1 toy: two-point data x0 ∈ {−1, +1} (METHOD.md §2).

Three independent routes to the conditional-entropy rate per unit log σ (VE σ):

1. analytic (I-MMSE): ``dH(x0|x_σ)/d log σ = mmse(σ)/σ²`` with ``mmse = 1 − E[tanh²(x/σ²)]``
   (:func:`diffusers_infonoise.diagnostics.analytic_mmse_two_point`);
2. numerical: ``H(x0|x_σ) = E[h_b(p(x0 = 1 | x))]`` by scipy quadrature of the binary entropy of the
   posterior, differentiated by central differences in log σ (no MMSE involved);
3. data set: the optimal-empirical-denoiser profile of a large random sample of ±1 data
   (:func:`diffusers_infonoise.diagnostics.profile_from_dataset`, Monte Carlo with standard errors).

Writes ``benchmarks/results/figure1_two_point.png`` and ``figure1_two_point.json``. CPU, about a
minute. Run: ``python -m benchmarks.figures_toy [--num-data 10000] [--num-noise-draws 2000]``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from scipy import integrate, special

from benchmarks import RESULTS
from diffusers_infonoise import diagnostics as dg


def conditional_entropy_two_point(sigma: float) -> float:
    """H(x0 | x0 + σε) in nats for equiprobable x0 = ±1, by quadrature (symmetry: condition on x0 = +1)."""

    def f(z):
        logit = 2.0 * (1.0 + sigma * z) / sigma**2  # log p(+1|x)/p(−1|x)
        a = abs(logit)
        h = math.log1p(math.exp(-a)) + a * special.expit(-a)  # binary entropy of sigmoid(logit), stable
        return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) * h

    return integrate.quad(f, -np.inf, np.inf, epsabs=1e-15, epsrel=1e-12, limit=500)[0]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-levels", type=int, default=48)
    parser.add_argument("--sigma-min", type=float, default=0.05)
    parser.add_argument("--sigma-max", type=float, default=20.0)
    parser.add_argument("--num-data", type=int, default=10000, help="size of the random ±1 data set")
    parser.add_argument("--num-noise-draws", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    t0 = time.time()

    log_sigma = dg.log_sigma_grid(None, args.num_levels, sigma_min=args.sigma_min, sigma_max=args.sigma_max)
    sig = torch.exp(log_sigma)
    analytic = (dg.analytic_mmse_two_point(sig) / sig**2).numpy()

    h = 1e-3
    entropy = np.array([conditional_entropy_two_point(float(s)) for s in sig])
    numeric = np.array(
        [
            (conditional_entropy_two_point(float(s) * math.exp(h)) - conditional_entropy_two_point(float(s) * math.exp(-h))) / (2 * h)
            for s in sig
        ]
    )

    g = torch.Generator().manual_seed(args.seed)
    data = (torch.randint(0, 2, (args.num_data, 1), generator=g) * 2 - 1).double()
    prof = dg.profile_from_dataset(data, sigmas=sig, num_noise_draws=args.num_noise_draws, generator=g, gate=None)
    ds_rate = (prof.mmse / sig**2).numpy()
    ds_se = (prof.mmse_se / sig**2).numpy()

    # agreement where the profile is not negligible (≥ 1% of its peak)
    keep = analytic >= 0.01 * analytic.max()
    rel_numeric = np.abs(numeric[keep] / analytic[keep] - 1)
    z_dataset = (ds_rate - analytic) / np.where(ds_se > 0, ds_se, np.nan)
    rho = dg.normalize_density(torch.from_numpy(analytic), log_sigma)
    lo, hi = dg.profile_window(rho, log_sigma, 0.9)
    total_h = float(np.sum(analytic * dg.grid_edges(log_sigma).diff().numpy()))

    summary = {
        "description": "Figure 1 toy: two-point data x0 = ±1; entropy rate dH(x0|x_sigma)/dlog sigma (nats per unit log sigma, VE sigma)",
        "grid": {"sigma_min": args.sigma_min, "sigma_max": args.sigma_max, "num_levels": args.num_levels},
        "max_relative_deviation_analytic_vs_numerical_derivative": float(rel_numeric.max()),
        "points_compared": int(keep.sum()),
        "dataset": {
            "num_data": args.num_data,
            "fraction_plus_one": float((data > 0).double().mean()),
            "num_noise_draws": args.num_noise_draws,
            "max_abs_z_vs_analytic": float(np.nanmax(np.abs(z_dataset[keep]))),
        },
        "peak_sigma": float(sig[int(np.argmax(analytic))]),
        "central_90pct_window_sigma": [math.exp(lo), math.exp(hi)],
        "integral_of_rate_nats": total_h,
        "log2_nats": math.log(2),
        "runtime_s": None,
        "log_sigma": log_sigma.tolist(),
        "analytic_rate": analytic.tolist(),
        "numerical_derivative_rate": numeric.tolist(),
        "conditional_entropy_nats": entropy.tolist(),
        "dataset_rate": ds_rate.tolist(),
        "dataset_rate_se": ds_se.tolist(),
    }

    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 6.0), layout="constrained")
    ax0, ax1 = fig.subplots(2, 1, sharex=True)
    x = log_sigma.numpy()
    ax0.plot(x, entropy / math.log(2), color="C0", lw=2)
    ax0.set_ylabel("H(x0 | x_σ) [bits]")
    ax0.set_title("two-point data x0 = ±1: the conditional entropy falls from 1 bit to 0 in a window", fontsize=9)
    ax1.axvspan(lo, hi, color="C7", alpha=0.15, label="central 90% window")
    ax1.plot(x, analytic, color="k", lw=2.5, label="analytic mmse/σ² (I-MMSE)")
    ax1.plot(x, numeric, color="C1", ls="--", lw=1.8, label=f"numerical dH/d log σ (max rel. dev. {rel_numeric.max():.1e})")
    ax1.errorbar(
        x, ds_rate, yerr=2 * ds_se, fmt="o", ms=3, color="C3", lw=1, label=f"empirical denoiser, {args.num_data} samples (±2 s.e.)"
    )
    ax1.set_xlabel("log σ (VE)")
    ax1.set_ylabel("entropy rate per unit log σ [nats]")
    ax1.legend(fontsize=8)
    sec = ax0.secondary_xaxis("top", functions=(np.exp, lambda s: np.log(np.clip(s, 1e-300, None))))
    sec.set_xscale("log")
    sec.set_xlabel("σ (VE)")

    args.output.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output / "figure1_two_point.png", dpi=130)
    summary["runtime_s"] = round(time.time() - t0, 1)
    with open(args.output / "figure1_two_point.json", "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=1)
    print(
        "max relative deviation analytic vs numerical derivative: "
        f"{summary['max_relative_deviation_analytic_vs_numerical_derivative']:.2e} "
        f"({summary['points_compared']} points); dataset max |z| {summary['dataset']['max_abs_z_vs_analytic']:.2f}; "
        f"peak sigma {summary['peak_sigma']:.3g}; window {summary['central_90pct_window_sigma'][0]:.3g}.."
        f"{summary['central_90pct_window_sigma'][1]:.3g}; "
        f"integral {total_h:.4f} nats (log 2 = {math.log(2):.4f}); {summary['runtime_s']} s"
    )
    print(f"wrote {args.output / 'figure1_two_point.png'} and {args.output / 'figure1_two_point.json'}")
    return summary


if __name__ == "__main__":
    main()
