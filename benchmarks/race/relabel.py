"""File a tier's finished runs of one arm under another arm's name, when a library default changed after they ran so
that the old name no longer says what ran (issue 31: the data-bounded profile start was the default for the commits
that ran the bound tiers, and ran there as plain ``infonoise``; the default went back to the unbounded start).

Each run's result, log and folder are renamed to the new run id; the result keeps its ``command`` and ``code`` as they
ran and records ``relabelled_from`` (the old sampler and run id, and why). Nothing is re-run or re-scored.

    python -m benchmarks.race.relabel --out <out> --tier bound --arm infonoise --to infonoise-profile_bound_data \\
        --why "ran at a commit whose default was --infonoise_profile_bound data"
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def relabel(runs: Path, arm: str, to: str, why: str) -> list[str]:
    """Rename every run of ``arm`` under ``runs`` (a tier's ``runs/`` folder) to ``to``; returns the new run ids.

    Raises:
        ValueError: a run of ``to`` is there already (it would be overwritten).
    """
    done = []
    for result in sorted(runs.glob(f"*__{arm}__s*.json")):
        r = json.loads(result.read_text())
        if r.get("sampler") != arm:
            continue
        new_id = r["run_id"].replace(f"__{arm}__", f"__{to}__")
        if (runs / f"{new_id}.json").exists():
            raise ValueError(f"--to {to}: {runs / new_id}.json exists already")
        r.update(sampler=to, run_id=new_id, relabelled_from={"sampler": arm, "run_id": result.stem, "why": why})
        (runs / f"{new_id}.json").write_text(json.dumps(r, indent=1))
        result.unlink()
        for old in (runs / f"{result.stem}.log", runs / result.stem):
            if old.exists():
                old.rename(runs / (new_id + old.suffix if old.is_file() else new_id))
        done.append(new_id)
    return done


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="the quality race's --out (holds quality_race_<tier>/)")
    p.add_argument("--tier", required=True)
    p.add_argument("--arm", required=True, help="the arm the runs were made as")
    p.add_argument("--to", required=True, help="the arm they are filed under")
    p.add_argument("--why", required=True, help="recorded in each run's relabelled_from")
    args = p.parse_args()
    ids = relabel(args.out / f"quality_race_{args.tier}" / "runs", args.arm, args.to, args.why)
    print(f"{len(ids)} runs of {args.arm} filed as {args.to}: {', '.join(ids)}")


if __name__ == "__main__":
    main()
