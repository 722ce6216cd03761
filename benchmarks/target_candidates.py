"""Issue 47, step 2 (no training): where would each candidate target draw, and how close is that to the oracle?

For every task of the transfer and budget tiers whose InfoNoise runs stored their final schedule, this computes the
draw density π (per unit ln σ, VE σ, on the schedule's cells) each candidate target gives from the same ρ̂, and
compares it with the oracle's density: logit-normal(m*, 1), i.e. N(m*, 1) in ln σ on the EDM path (METHOD.md §6.1),
m* the best centre of the task's sweep, truncated to the path's σ range. It reports each candidate's 10/50/90% σ,
the shift of its median from the oracle's (ln-units) and TV(π, π_oracle).

The oracle is a one-parameter sweep (std fixed at 1), so it pins the *location* of good draws, not their width:
the median's shift is the primary figure, TV the secondary one.

Candidates (issue 47; w the x0-space loss weight, METHOD.md §4; m̂ ∝ ρ̂·σ² the x0 MMSE, METHOD.md §2):

* ``paper``   π ∝ ρ̂/w (today's default, METHOD.md §4)
* ``A(a,b)``  π ∝ ρ̂^a / w^b (``A(1,0)`` is drawing on ρ̂: the paper's discrete configuration, candidate D)
* ``B``       φ = ρ̂ realised by draws: π ∝ ρ̂·ŝ with ŝ the RMS x0 error, here ŝ ≈ m̂ ∝ ρ̂·σ² (the loss then carries a
  per-sample factor ∝ 1/(w·ŝ)); so π ∝ ρ̂²·σ²

Candidate C (information × reducibility) needs each level's loss drop per e-fold of its draws, which no stored
schedule holds: it is not scored here.

Usage::

    python -m benchmarks.target_candidates          # writes benchmarks/results/target_candidates.{json,md}
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from diffusers_infonoise.weighting import x0_loss_weight

RESULTS = Path(__file__).resolve().parent / "results"

#: task → (runs file, InfoNoise arm, oracle centre m* in ln σ, where m* comes from, what today's default did there)
TASKS = {
    "tf-bin16": ("quality_race_transfer_runs_tf-bin16.json", "infonoise", 0.0, "transfer sweep, 1 seed", "near"),
    "tf-bin16-x0.25": ("quality_race_transfer_runs_tf-bin16-x0.25.json", "infonoise", -1.0, "transfer sweep, 1 seed", "near"),
    "tf-bin16-x4": ("quality_race_transfer_runs_tf-bin16-x4.json", "infonoise", 1.0, "transfer sweep, 1 seed", "fails"),
    "tf-deq16": ("quality_race_transfer_runs_tf-deq16.json", "infonoise", -1.0, "transfer sweep, 1 seed", "near"),
    "tf-dna64": ("quality_race_transfer_runs_tf-dna64.json", "infonoise", 1.0, "transfer sweep, 1 seed", "fails"),
    "tf-dna2mer32": ("quality_race_transfer_runs_tf-dna2mer32.json", "infonoise", 1.0, "transfer sweep, 1 seed", "near"),
    "tf-ft16-x0.25": ("quality_race_transfer_runs_tf-ft16-x0.25.json", "infonoise", -2.0, "transfer sweep, 1 seed", "fails"),
    "tf-ft-bm2bm-x0.25-800": (
        "quality_race_budget_runs_tf-ft-bm2bm-x0.25-800.json",
        "infonoise-profile_bound_none",
        -1.5,
        "budget tier, 3 seeds",
        "fails",
    ),
    "tk-ft-digits16-800": (
        "quality_race_budget_runs_tk-ft-digits16-800.json",
        "infonoise-profile_bound_none",
        0.0,
        "budget tier, 3 seeds",
        "fails",
    ),
    "tk-ft-bd-x0.25-800": (
        "quality_race_budget_runs_tk-ft-bd-x0.25-800.json",
        "infonoise-profile_bound_none",
        0.0,
        "budget tier, 3 seeds",
        "near",
    ),
}


def candidate_pi(name: str, rho: torch.Tensor, w: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """A candidate's unnormalised draw density per unit ln σ at the cell centres.

    Args:
        name: ``"paper"``, ``"B"`` or ``"A(a,b)"`` (floats a, b).
        rho: ρ̂ per unit ln σ, shape (K,), ≥ 0.
        w: the x0-space loss weight at the centres, shape (K,), > 0 (METHOD.md §4).
        sigma: the centres' VE σ, shape (K,).

    Raises:
        ValueError: an unknown name.
    """
    if name == "paper":
        return rho / w
    if name == "B":
        return rho * (rho * sigma**2)  # π ∝ ρ̂·ŝ, ŝ ≈ m̂ ∝ ρ̂·σ² (METHOD.md §2)
    if name.startswith("A(") and name.endswith(")"):
        a, b = (float(v) for v in name[2:-1].split(","))
        return rho**a / w**b
    raise ValueError(f"candidate: unknown name {name!r}; expected 'paper', 'B' or 'A(a,b)'")


def normal_cell_masses(mean: float, std: float, edges: torch.Tensor) -> torch.Tensor:
    """N(mean, std²) in ln σ, truncated to [edges[0], edges[-1]] and renormalised: each cell's mass, shape (K,)."""
    cdf = 0.5 * (1 + torch.erf((edges.double() - mean) / (std * math.sqrt(2))))
    masses = cdf[1:] - cdf[:-1]
    return masses / masses.sum()


def quantiles(masses: torch.Tensor, edges: torch.Tensor, qs=(0.1, 0.5, 0.9)) -> list[float]:
    """The ln σ at which the cell masses' CDF reaches each q (linear within a cell)."""
    cdf = torch.cat([torch.zeros(1, dtype=masses.dtype), masses.cumsum(0) / masses.sum()])
    out = []
    for q in qs:
        k = int(torch.searchsorted(cdf, torch.tensor(q, dtype=cdf.dtype)).clamp(1, len(edges) - 1))
        lo, hi = float(cdf[k - 1]), float(cdf[k])
        frac = 0.0 if hi == lo else (q - lo) / (hi - lo)
        out.append(float(edges[k - 1] + frac * (edges[k] - edges[k - 1])))
    return out


def task_rho(runs_file: Path, arm: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The mean over seeds of the arm's final ρ̂ (each normalised to mass 1 on its cells), its cells' edges in ln σ and
    the number of seeds."""
    runs = [r for r in json.loads(runs_file.read_text())["runs"] if r["sampler"] == arm and r.get("schedule")]
    if not runs:
        raise ValueError(f"{runs_file.name}: no run of arm {arm!r} stored a schedule")
    lo, hi, n = runs[0]["schedule"]["edges_linspace"]
    edges = torch.linspace(lo, hi, int(n), dtype=torch.float64)
    widths = edges[1:] - edges[:-1]
    rhos = []
    for r in runs:
        rho = torch.tensor(r["schedule"]["rho_hat"], dtype=torch.float64)
        rhos.append(rho / (rho * widths).sum())
    return torch.stack(rhos).mean(0), edges, len(runs)


def score(candidates: list[str]) -> dict:
    rows = {}
    for task, (runs_name, arm, centre, oracle_source, today) in TASKS.items():
        rho, edges, seeds = task_rho(RESULTS / runs_name, arm)
        centres = 0.5 * (edges[1:] + edges[:-1])
        widths = edges[1:] - edges[:-1]
        sigma = centres.exp()
        w = x0_loss_weight("edm", "sample", sigma, sigma_data=0.5).double()
        oracle = normal_cell_masses(centre, 1.0, edges)
        o_q = quantiles(oracle, edges)
        row = {
            "oracle_centre": centre,
            "oracle_source": oracle_source,
            "today": today,
            "seeds": seeds,
            "oracle_sigma_10_50_90": [round(math.exp(v), 4) for v in o_q],
            "rho_sigma_10_50_90": [round(math.exp(v), 4) for v in quantiles(rho * widths, edges)],
            "candidates": {},
        }
        for name in candidates:
            masses = candidate_pi(name, rho, w, sigma) * widths
            masses = masses / masses.sum()
            q = quantiles(masses, edges)
            row["candidates"][name] = {
                "sigma_10_50_90": [round(math.exp(v), 4) for v in q],
                "median_shift": round(q[1] - o_q[1], 3),
                "tv": round(0.5 * float((masses - oracle).abs().sum()), 3),
            }
        rows[task] = row
    summary = {}
    for name in candidates:
        shifts = [rows[t]["candidates"][name]["median_shift"] for t in rows]
        tvs = [rows[t]["candidates"][name]["tv"] for t in rows]
        closer = sum(abs(rows[t]["candidates"][name]["median_shift"]) < abs(rows[t]["candidates"]["paper"]["median_shift"]) for t in rows)
        summary[name] = {
            "mean_abs_median_shift": round(sum(map(abs, shifts)) / len(shifts), 3),
            "max_abs_median_shift": round(max(map(abs, shifts)), 3),
            "mean_tv": round(sum(tvs) / len(tvs), 3),
            "tasks_closer_than_paper": closer,
        }
    return {"tasks": rows, "summary": summary}


def markdown(result: dict, command: str) -> str:
    names = list(result["summary"])
    lines = [
        "# Issue 47, step 2: each candidate target's draws against the oracle's (no training)",
        "",
        f"Command: `{command}`. ρ̂: each task's InfoNoise runs' final stored schedules (mean over seeds, each normalised).",
        "Oracle: N(m*, 1) in ln σ (logit-normal(m*, 1) on the EDM path), m* the task's best sweep centre. "
        "Shift: the candidate's median ln σ minus the oracle's (positive: draws too noisy). "
        "The oracle pins the location only (its std is not swept).",
        "",
        "| candidate | mean abs shift | max abs shift | mean TV | tasks closer than paper |",
        "|---|---|---|---|---|",
    ]
    for n in names:
        s = result["summary"][n]
        lines.append(
            f"| {n} | {s['mean_abs_median_shift']} | {s['max_abs_median_shift']} | {s['mean_tv']} | "
            f"{s['tasks_closer_than_paper']}/{len(result['tasks'])} |"
        )
    lines += ["", "Per task: median shift (ln-units) / TV.", ""]
    lines.append("| task | today | m* (source) | ρ̂ σ 10/50/90% | " + " | ".join(names) + " |")
    lines.append("|---" * (4 + len(names)) + "|")
    for t, row in result["tasks"].items():
        cells = [f"{row['candidates'][n]['median_shift']:+.2f} / {row['candidates'][n]['tv']:.2f}" for n in names]
        rq = "/".join(f"{v:.3g}" for v in row["rho_sigma_10_50_90"])
        lines.append(f"| {t} | {row['today']} | {row['oracle_centre']} ({row['oracle_source']}) | {rq} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


DEFAULT_CANDIDATES = ["paper", "A(1,0)", "A(1,0.5)", "A(0.5,1)", "A(2,1)", "A(0.5,0.5)", "B"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", nargs="+", default=DEFAULT_CANDIDATES, help="e.g. paper 'A(1,0.5)' B")
    parser.add_argument("--out", default=str(RESULTS / "target_candidates"))
    args = parser.parse_args(argv)
    result = score(["paper", *[c for c in args.candidates if c != "paper"]])
    command = "python -m benchmarks.target_candidates" + (
        " --candidates " + " ".join(f"'{c}'" for c in args.candidates) if args.candidates != DEFAULT_CANDIDATES else ""
    )
    result["command"] = command
    Path(args.out + ".json").write_text(json.dumps(result, indent=1))
    Path(args.out + ".md").write_text(markdown(result, command))
    print(markdown(result, command))


if __name__ == "__main__":
    main()
