"""How long ``infonoise recommend`` takes on the largest inputs it accepts (issue 48): a stored schedule of 65,536 bins
(``--infonoise_num_bins`` accepts it) and a measured profile of 200,000 points, each fitted for every trainer on the
flow path (the path with the most rows). The fit is closed form (docs/METHOD.md §6.1); the TV(φ, ρ̂) search it
replaced took 124 s at 16,384 bins and did not finish in 300 s at 65,536.

Times the library call behind the command (:func:`~diffusers_infonoise.diagnostics.recommend_fixed_density`, the
schedule's sampler rebuilt from its payload included) and writes ``recommend_speed.json``::

    python -m benchmarks.recommend_speed
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from benchmarks import RESULTS


def _schedule(num_bins: int):
    """A flow (shift 3) scheduler storing a settled schedule of ``num_bins`` bins: Gaussian data's exact x0 MMSE
    (s_d = 0.5) in every bin, π refreshed three times."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    from diffusers_infonoise import make_sampler
    from diffusers_infonoise.diagnostics import analytic_mmse_gaussian
    from diffusers_infonoise.schedule_io import read_schedule

    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    sampler = make_sampler("infonoise", scheduler, num_bins=num_bins, warmup_steps=0, gate=None, mmse_cap=None)
    x = sampler.estimator.centers
    sampler.estimator.accumulate(x, analytic_mmse_gaussian(torch.exp(x), 0.5))
    for _ in range(3):
        sampler._refresh_now(ema_decay=0.0, min_count=1)
    sampler.save_to_scheduler(scheduler)
    return read_schedule(scheduler), scheduler


def _profile(num_points: int):
    from diffusers import FlowMatchEulerDiscreteScheduler

    from diffusers_infonoise.diagnostics import analytic_mmse_gaussian, log_sigma_grid, profile_from_errors

    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    sig = torch.exp(log_sigma_grid(scheduler, num_points))
    return profile_from_errors(sig, analytic_mmse_gaussian(sig, 0.5), gate=None, meta={"source": "model"}), scheduler


def _timed(source, scheduler, repeats: int) -> dict:
    from diffusers_infonoise.diagnostics import recommend_fixed_density

    times, rec = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        rec = recommend_fixed_density(source, scheduler, prediction_type="flow", loss_weighting="none")
        times.append(time.perf_counter() - t0)
    rows = sum(len(r.get("settings", [])) + 1 for r in rec.trainers if "settings" in r)
    return {"seconds": times, "seconds_min": min(times), "rows": rows, "families": {n: f.params for n, f in rec.families.items()}}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num_bins", type=int, default=65_536)
    p.add_argument("--num_points", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--output", default=str(RESULTS / "recommend_speed.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    payload, scheduler = _schedule(args.num_bins)
    build_schedule = time.perf_counter() - t0
    schedule = _timed(payload, scheduler, args.repeats)
    t0 = time.perf_counter()
    profile, scheduler = _profile(args.num_points)
    build_profile = time.perf_counter() - t0
    prof = _timed(profile, scheduler, args.repeats)
    out = {
        "command": "python -m benchmarks.recommend_speed " + " ".join(argv if argv is not None else sys.argv[1:]),
        "what": "seconds of recommend_fixed_density (every trainer's rows on the flow path, shift 3) on a stored schedule "
        "and on a profile, one thread; building the inputs is not counted (build_seconds)",
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "cpu_count": os.cpu_count(), "torch_threads": 1},
        "schedule": {"num_bins": args.num_bins, "build_seconds": build_schedule, **schedule},
        "profile": {"num_points": args.num_points, "build_seconds": build_profile, **prof},
    }
    path = Path(args.output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"schedule of {args.num_bins} bins: {schedule['seconds_min']:.2f} s ({schedule['rows']} rows)")
    print(f"profile of {args.num_points} points: {prof['seconds_min']:.2f} s ({prof['rows']} rows)")
    print(f"wrote {path}")
    return out


if __name__ == "__main__":
    main()
