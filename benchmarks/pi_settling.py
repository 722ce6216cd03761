"""When has π settled? The threshold of ``infonoise recommend``'s warning (METHOD.md §6.1), measured on π's history.

Every InfoNoise run of a quality race writes π at each refresh (``<run>/schedule/history.jsonl``, the training
monitor). For each refresh k from the fourth on (the third after π left the base), S_k is the sum of the total
variations of π's last three changes (what a stored schedule saved there carries in ``pi_moves``,
:data:`~diffusers_infonoise.diagnostics.recommend.SETTLED_MOVES`) and D_k = TV(π_k, π at the run's end): how far π
still went. A schedule saved at refresh k (a mid-run checkpoint, a run cut short) is fitted by ``infonoise
recommend``; the warning's threshold on S_k should say when D_k is large::

    python -m benchmarks.pi_settling    # reads benchmarks/results/quality_race_*/runs/*/schedule/history.jsonl

The run folders are not committed: the races that write them (``python -m benchmarks.quality_race --tier fair ...``,
benchmarks/README.md) must have run on this machine. Writes ``pi_settling.json`` and ``pi_settling.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks import RESULTS
from diffusers_infonoise.diagnostics.recommend import MAX_SETTLED_MOVE, SETTLED_MOVES

#: D_k above this counts as "π still went far": twice the threshold, the distance two faithful estimates may lie apart
FAR = 2 * MAX_SETTLED_MOVE


def tv(a, b) -> float:
    return 0.5 * float(np.abs(np.asarray(a) - np.asarray(b)).sum())


def run_history(path: Path) -> dict:
    """One run's refreshes: steps, π's moves (TV between consecutive refreshes), S_k and D_k from the third refresh
    after π left the base (its first entry's move from the base is not in the history file: the sums start at the
    second entry, so S_k holds three moves between refreshes)."""
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steps = [e["step"] for e in entries]
    probs = [np.asarray(e["probs"], float) for e in entries]
    moves = [tv(probs[i], probs[i - 1]) for i in range(1, len(probs))]
    points = []
    for k in range(SETTLED_MOVES, len(probs)):
        points.append({"step": steps[k], "s": sum(moves[k - SETTLED_MOVES : k]), "d": tv(probs[k], probs[-1]), "last": k == len(probs) - 1})
    return {"steps": steps, "moves": moves, "points": points}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=str(RESULTS))
    args = p.parse_args(argv)
    results = Path(args.results)
    runs = {}
    for h in sorted(results.glob("quality_race_*/runs/*/schedule/history.jsonl")):
        run_id = h.parent.parent.name
        race, arm, seed = run_id.split("__")
        runs[f"{h.parents[2].name.removeprefix('quality_race_')}/{run_id}"] = {
            "race": race,
            "arm": arm,
            "seed": seed,
            **run_history(h),
        }
    if not runs:
        sys.exit(f"no schedule histories under {results}/quality_race_*/runs: run a quality race first (benchmarks/README.md)")
    mid = [(rid, pt) for rid, r in runs.items() for pt in r["points"] if not pt["last"]]
    quiet = [pt["d"] for _, pt in mid if pt["s"] <= MAX_SETTLED_MOVE]
    moving = [pt["d"] for _, pt in mid if pt["s"] > MAX_SETTLED_MOVE]
    summary = {
        "threshold": MAX_SETTLED_MOVE,
        "far": FAR,
        "mid_run_points": len(mid),
        "below_threshold": {"n": len(quiet), "d_max": max(quiet, default=None), "n_far": sum(d > FAR for d in quiet)},
        "above_threshold": {
            "n": len(moving),
            "d_median": float(np.median(moving)) if moving else None,
            "n_far": sum(d > FAR for d in moving),
        },
        "end_of_run_s": {rid: round(r["points"][-1]["s"], 4) for rid, r in runs.items() if r["points"]},
    }
    out = {
        "command": "python -m benchmarks.pi_settling " + " ".join(argv if argv is not None else sys.argv[1:]),
        "how": f"for each InfoNoise run's refreshes (<run>/schedule/history.jsonl) from the {SETTLED_MOVES + 1}th on: S_k, the "
        f"sum of the TVs of pi's last {SETTLED_MOVES} moves between refreshes (what a schedule saved there carries in pi_moves), "
        "and D_k = TV(pi_k, pi at the run's end), how far pi still went; a mid-run refresh is one before the run's last",
        "summary": summary,
        "runs": {rid: {**r, "points": [_rounded(pt) for pt in r["points"]]} for rid, r in runs.items()},
    }
    (results / "pi_settling.json").write_text(json.dumps(out, indent=1))
    (results / "pi_settling.md").write_text("\n".join(markdown(out)) + "\n")
    print("\n".join(markdown(out)))
    return out


def markdown(out: dict) -> list[str]:
    s = out["summary"]
    b, a = s["below_threshold"], s["above_threshold"]
    L = [
        "# When has π settled? (`infonoise recommend`'s warning, METHOD.md §6.1)",
        "",
        f"Command: `{out['command'].strip()}`. How: {out['how']}.",
        "",
        f'Threshold: S_k ≤ {s["threshold"]:g} (the sum of π\'s last {SETTLED_MOVES} moves in TV). "Far": D_k > {s["far"]:g}.',
        "",
        "| mid-run refreshes | n | D_k (how far π still went) | D_k > far |",
        "|---|---|---|---|",
        f"| S_k ≤ {s['threshold']:g} (settled: no warning) | {b['n']} | max {_f(b['d_max'])} | {b['n_far']} |",
        f"| S_k > {s['threshold']:g} (still moving: warned) | {a['n']} | median {_f(a['d_median'])} | {a['n_far']} |",
        "",
        "Per run (tier/run): π's moves between refreshes, then S_k / D_k at each refresh from the third (the last is the "
        "run's end, where D = 0):",
        "",
        "| run | moves (TV) | S_k / D_k |",
        "|---|---|---|",
    ]
    for rid, r in out["runs"].items():
        moves = " ".join(f"{m:.3f}" for m in r["moves"])
        pts = " ".join(f"{p['s']:.3f}/{p['d']:.2f}" for p in r["points"])
        L.append(f"| {rid} | {moves} | {pts} |")
    return L


def _rounded(point: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in point.items()}


def _f(v) -> str:
    return "—" if v is None else f"{v:.3f}"


if __name__ == "__main__":
    main()
