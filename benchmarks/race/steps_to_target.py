"""The quality race's steps-to-target speedup (issue 6): how many training steps one run needs to reach
another run's final quality, on curves smoothed by a centred moving average (a race's ``smoothing``; 1: the raw
curves), linear between evaluations; :func:`paired_speedups` pairs runs by seed."""

from __future__ import annotations

import numpy as np


def smooth(values, window: int = 3) -> np.ndarray:
    """Centred moving average over ``window`` neighbouring evaluations (shrinking at the ends)."""
    v = np.asarray(values, float)
    h = window // 2
    return np.array([v[max(0, i - h) : i + h + 1].mean() for i in range(len(v))])


def steps_to_reach(steps, values, target: float) -> tuple[float | None, str]:
    """First step at which the (smoothed) curve is ≤ target, linear between evaluations."""
    for i, (s, v) in enumerate(zip(steps, values)):
        if v <= target:
            if i == 0:
                return float(s), "at_first_eval"
            s0, v0 = steps[i - 1], values[i - 1]
            return float(s0 + (s - s0) * (v0 - target) / (v0 - v)), "interpolated"
    return None, "not_reached"


def speedup(base: dict, other: dict, metric: str, window: int = 3) -> dict:
    """Steps ``base`` needs to reach its own final quality / steps ``other`` needs, both curves smoothed over ``window``
    evaluations (1: raw)."""
    sb, qb = base["steps"], smooth(base["quality"][metric], window)
    so, qo = other["steps"], smooth(other["quality"][metric], window)
    target = float(qb[-1])
    nb, _ = steps_to_reach(sb, qb, target)
    no, how = steps_to_reach(so, qo, target)
    out = {"target": target, "baseline_steps": nb, "steps": no, "how": how}
    if no is None:
        out["speedup"] = None
        out["speedup_upper_bound"] = nb / so[-1]
    else:
        out["speedup"] = nb / no
        if how == "at_first_eval":
            out["speedup_is_lower_bound"] = True
    return out


def paired_speedups(baseline_runs: list, runs: list, metric: str, window: int = 3) -> dict:
    """:func:`speedup` of ``runs`` against ``baseline_runs`` seed by seed (the seeds both have), their
    median (a not-reached seed with its upper bound) and how many did not reach the target."""
    per_seed = [
        {"seed": rb["seed"], **speedup(rb, ri[0], metric, window)}
        for rb in baseline_runs
        if (ri := [r for r in runs if r["seed"] == rb["seed"]])
    ]
    vals = [p["speedup"] if p["speedup"] is not None else p["speedup_upper_bound"] for p in per_seed]
    return {
        "per_seed": per_seed,
        "median": float(np.median(vals)) if vals else None,
        "num_not_reached": sum(p["speedup"] is None for p in per_seed),
    }
