"""A tier's finished runs brought back from its committed results, so that a tier can be resumed on a machine (or in a
session) that does not have its run folders: ``python -m benchmarks.quality_race --tier T --restore`` writes each run
that the committed ``quality_race_<T>.json`` (or its ``_runs_<race>.json`` parts) holds and that has no result yet
back as ``runs/<run_id>.json``, the way the harness wrote it, so that only the runs it lacks are trained and the report
aggregates all of them.

What the results file compacted (:func:`benchmarks.race.report.compact_run`) comes back as follows: the schedule's
log-σ edges from ``edges_linspace`` (the grid is uniform in log σ; rounded to 6 digits as the harness stores them), π
and ρ̂ at the 4 significant digits kept. A restored run records ``restored_from`` (the file). Nothing is re-run or
re-scored; the run's ``command`` and ``code`` stay as they ran.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def committed_runs(out: Path, tier_name: str) -> dict[str, tuple[dict, str]]:
    """``{run_id: (run, file name)}`` of the committed results of ``tier_name`` under ``out`` (none when absent)."""
    main = Path(out) / f"quality_race_{tier_name}.json"
    if not main.exists():
        return {}
    doc = json.loads(main.read_text())
    files = [main] + [main.with_name(n) for n in (doc.get("runs_files") or {}).values()]
    found = {}
    for f in files:
        runs = doc["runs"] if f == main else json.loads(f.read_text())["runs"]
        for r in runs:
            found[r["run_id"]] = (r, f.name)
    return found


def expanded(run: dict) -> dict:
    """A committed run as the harness wrote it (module docstring): its schedule's edges rebuilt."""
    r = json.loads(json.dumps(run))
    sch = r.get("schedule")
    if sch and sch.get("edges_linspace"):
        first, last, count = sch.pop("edges_linspace")
        sch["edges"] = [round(float(v), 6) for v in np.linspace(first, last, int(count))]
    return r


def restore_runs(specs, out: Path, tier_name: str) -> list[str]:
    """Write every committed run of ``tier_name`` that is one of ``specs`` (same run id) and has no result yet to its
    result path; returns the run ids restored."""
    found = committed_runs(out, tier_name)
    done = []
    for sp in specs:
        if sp.run_id not in found or sp.result_path.exists():
            continue
        run, name = found[sp.run_id]
        sp.result_path.parent.mkdir(parents=True, exist_ok=True)
        sp.result_path.write_text(json.dumps({**expanded(run), "restored_from": f"benchmarks/results/{name}"}, indent=1))
        done.append(sp.run_id)
    return done
