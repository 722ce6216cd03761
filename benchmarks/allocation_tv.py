"""TV(φ, ρ̂) of every run in quality-race results files (METHOD.md §5's check; issue 10).

For each run: its effective allocation φ = π·w on the bins of the InfoNoise schedule of the same race
and seed, against that schedule's final ρ̂ (an InfoNoise run against its own ρ̂). Reads the committed
results (``quality_race_<tier>.json`` and ``quality_race_<tier>_runs_*.json``) and writes
``allocation_tv_<tier>.json`` beside them::

    python -m benchmarks.allocation_tv --tier full    # also: quick, gate, recheck
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from benchmarks import RESULTS
from benchmarks.race.allocation_metrics import allocation_tv
from benchmarks.race.restore import committed_runs
from benchmarks.race.tiers import tier_races


def runs_of(tier: str, results: Path) -> list[dict]:
    """The runs the committed results of ``tier`` under ``results`` hold (:func:`benchmarks.race.restore.committed_runs`)."""
    return [run for run, _ in committed_runs(results, tier).values()]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tier", default="full", choices=("quick", "full", "gate", "recheck", "recheck_full", "recheck_paths", "gpu"))
    p.add_argument("--results", default=str(RESULTS))
    args = p.parse_args(argv)
    results = Path(args.results)
    runs = runs_of(args.tier, results)
    table = collections.defaultdict(dict)
    for race in tier_races(args.tier):
        rr = [r for r in runs if r["race"] == race.name]
        refs = {r["seed"]: r.get("schedule") for r in rr if r["sampler"] == "infonoise"}
        for r in sorted(rr, key=lambda r: (r["sampler"], r["seed"])):
            tv = allocation_tv(race, r, refs.get(r["seed"]))
            floor = ((r.get("schedule") or {}).get("hyperparameters") or {}).get("floor_space", "pi" if r.get("schedule") else None)
            table[race.name].setdefault(r["sampler"], []).append(
                {
                    "seed": r["seed"],
                    "tv_phi_rho": None if tv is None else round(tv, 4),
                    "final": r["quality"][r["primary_metric"]][-1],
                    "metric": r["primary_metric"],
                    "floor_space": floor,
                }
            )
    out = {
        "command": "python -m benchmarks.allocation_tv " + " ".join(argv if argv is not None else sys.argv[1:]),
        "tier": args.tier,
        "how": "phi = pi*w on the InfoNoise schedule's bins (w of the run's loss, METHOD.md 4) vs that schedule's final "
        "rho_hat; a fixed density is measured against the InfoNoise run of the same race and seed. Runs whose "
        "schedule has no floor_space were made with the former pi-space floor.",
        "races": table,
    }
    path = results / f"allocation_tv_{args.tier}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    for race, by in table.items():
        for s, lst in by.items():
            tvs = [x["tv_phi_rho"] for x in lst if x["tv_phi_rho"] is not None]
            print(f"{race:28s} {s:28s} TV(phi, rho) {sum(tvs) / len(tvs):.3f}" if tvs else f"{race:28s} {s:28s} —")
    print(f"wrote {path}")
    return out


if __name__ == "__main__":
    main()
