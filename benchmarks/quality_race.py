"""Quality race (issue 6): does InfoNoise reach the baselines' sample quality in fewer training steps?

Each run is ONE call of ``training_scripts/train_unconditional.py``'s ``main(argv)`` (the script is
imported by path and runs in-process in a worker process; no private training loop), with
``--use_ema --checkpointing_steps EVAL_EVERY --logger none``, a small ``UNet2DModel`` config
(``--model_config_name_or_path``), ``--noise_sampler NAME``, ``--diffusion edm`` (EDM
preconditioning and weighting; DDPM-ε and flow races in the full tier) and ``--seed S``. After the
run every ``checkpoint-N/unet_ema`` is sampled with
:func:`diffusers_infonoise.generation.generate_images` and a FIXED inference sampler — EDM:
``EDMEulerScheduler`` (deterministic Euler, Karras σ, ρ = 7, same σ_min/σ_max/σ_data as training),
18 steps (18 NFE); DDPM: ``DDIMScheduler`` η = 0, 18 steps; flow: ``FlowMatchEulerDiscreteScheduler``,
18 steps — 2000+ samples per evaluation with one fixed sampling seed (common random numbers across
runs), and scored against a random held-out split (:mod:`benchmarks.metrics`, :mod:`benchmarks.dna`).
Each run's result JSON is written as soon as it finishes; runs whose JSON exists are skipped
(resume); an interrupted run resumes from its latest checkpoint (``--resume_from_checkpoint latest``).
Checkpoints are deleted once evaluated.

Usage::

    python -m benchmarks.quality_race --tier quick            # ~10-15 min on 2 free cores
    python -m benchmarks.quality_race --tier full --jobs 2    # designed for ~2.5 h, resumable
    python -m benchmarks.quality_race --tier quick --report_only   # re-aggregate existing runs
    python -m benchmarks.quality_race --tier full --plan            # list the runs and the time estimate
    python -m benchmarks.quality_race --tier fair --restore         # resume from the committed runs (new machine)

Outputs: ``benchmarks/results/quality_race_<tier>.json`` (all runs + summary),
``quality_race_<tier>_curves.png``, ``quality_race_<tier>_pi.png``, ``quality_race_<tier>.md``; the
per-run JSONs, logs and model folders under ``benchmarks/results/quality_race_<tier>/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from benchmarks import RESULTS
from benchmarks.race.harness import finished_runs, print_plan, reuse_run, run_all, run_specs
from benchmarks.race.races import smoke_races
from benchmarks.race.report import results_meta, write_report
from benchmarks.race.restore import restore_runs
from benchmarks.race.sample_quality import Scorer
from benchmarks.race.summary import summarize
from benchmarks.race.tiers import TIERS, get_tier
from diffusers_infonoise.argtypes import positive_int


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--tier",
        choices=TIERS,
        default="quick",
    )
    p.add_argument("--jobs", type=positive_int, default=2, help="Runs in parallel (worker processes).")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads per worker.")
    p.add_argument("--out", type=str, default=str(RESULTS))
    p.add_argument("--only", type=str, default=None, help="Comma-separated race names to run.")
    p.add_argument("--samplers", type=str, default=None, help="Comma-separated samplers to run (default: the tier's).")
    p.add_argument(
        "--reuse",
        type=str,
        default=None,
        help="Another tier (e.g. quick) whose finished runs are copied "
        "instead of rerun when the run id, the training arguments (all but --output_dir) and the "
        "evaluation settings are the same.",
    )
    p.add_argument(
        "--note",
        type=str,
        default=None,
        help="Free text recorded in the results' meta and report (e.g. how the runs were made when this is --report_only).",
    )
    p.add_argument(
        "--restore",
        action="store_true",
        help="First write the runs this tier's committed results hold back as finished runs (benchmarks/race/restore.py), "
        "so that a tier resumed without its run folders trains only the runs it lacks.",
    )
    p.add_argument("--report_only", action="store_true", help="Aggregate the existing run results only.")
    p.add_argument("--plan", action="store_true", help="Print the runs and a time estimate, then exit.")
    p.add_argument("--schedule_plots", action="store_true", help="Keep the script's per-refresh schedule plots.")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="A seconds-long check of the harness (tiny budgets; results under quality_race_smoke*, not a measurement).",
    )
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    tier = get_tier(args.tier)
    if tier.notice:
        print(tier.notice, flush=True)

    races = tier.races()
    tier_name = args.tier
    if args.smoke:
        tier_name = f"smoke_{args.tier}"
        races = smoke_races(races)
    if args.only:
        keep = set(args.only.split(","))
        unknown = keep - {r.name for r in races} - {r.dataset for r in races}
        if unknown:
            raise SystemExit(
                f"quality_race: error: --only: no race or data set {sorted(unknown)} in the {args.tier} tier; "
                f"it has {', '.join(r.name for r in races)}"
            )
        races = [r for r in races if r.name in keep or r.dataset in keep]
    out = Path(args.out)
    root = out / f"quality_race_{tier_name}"
    specs = run_specs(
        races,
        tier=args.tier,
        results_tier=tier_name,
        root=root,
        samplers=args.samplers,
        threads=args.threads,
        schedule_plots=args.schedule_plots,
    )
    if args.plan:
        print_plan(specs, out, jobs=args.jobs, tier=args.tier, races=races)
        return
    if not args.report_only:
        print_plan(specs, out, jobs=args.jobs, tier=args.tier, races=races, runs=False)
    (root / "runs").mkdir(parents=True, exist_ok=True)
    if args.restore:
        print(f"restored {len(restore_runs(specs, out, tier_name))} runs from the committed results", flush=True)
    if args.reuse:
        for sp in specs:
            reuse_run(sp, out / f"quality_race_{args.reuse}" / "runs" / f"{sp.run_id}.json")
    t0 = time.time()
    load_start = os.getloadavg()
    errors = {} if args.report_only else run_all(specs, races, jobs=args.jobs, threads=args.threads, t0=t0)
    runs = finished_runs(specs)
    if not runs:
        print(f"no finished runs under {root / 'runs'}; nothing to report (the committed results are left as they are)")
        return
    scorers = {race.dataset: Scorer(race.dataset) for race in races}
    summary = summarize(races, runs, scorers, tier.summaries)
    import diffusers
    import torch

    wall = time.time() - t0
    invocation = {
        "command": "python " + shlex.join(["-m", "benchmarks.quality_race"] + (argv if argv is not None else sys.argv[1:])),
        "tier": args.tier,
        "jobs": args.jobs,
        "threads": args.threads,
        "wall_time_s": wall if not args.report_only else None,
        "load_start": [round(v, 2) for v in load_start],
        "load_end": [round(v, 2) for v in os.getloadavg()],
        "machine": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "diffusers": diffusers.__version__,
            "python": platform.python_version(),
        },
        "errors": errors,
    }
    meta = results_meta(
        invocation, out / f"quality_race_{tier_name}.json", report_only=args.report_only, note=args.note, tier=args.tier, runs=runs
    )
    out_json = write_report(tier_name, args.tier, races, runs, summary, meta, out, tier.summaries)
    print(f"wrote {out_json} ({out_json.stat().st_size / 1024:.0f} KB) in {wall:.0f} s; errors: {errors or 'none'}", flush=True)


if __name__ == "__main__":
    main()
