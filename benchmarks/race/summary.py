"""The quality race's aggregation (issue 6): per race, each sampler's final quality and its quality at
a quarter, half and all of the budget (mean, std, min, max over seeds), InfoNoise's and its variants'
steps-to-target speedups against the other samplers (paired by seed), the evaluation jitter, the
real-vs-real floors, and the allocation measures of :mod:`benchmarks.race.allocation_metrics`."""

from __future__ import annotations

import numpy as np

from benchmarks.race.allocation_metrics import allocation_tv, allocation_width, base_mass_where_pi_small
from benchmarks.race.races import Race
from benchmarks.race.steps_to_target import paired_speedups


def nearest_evaluation(steps, target: float) -> int:
    """The index of the evaluated step nearest ``target``; of two equally near, the later one (half of a 240-step race
    evaluated at 80, 160 and 240 is 160, not 80, which the quarter column already shows)."""
    return min(range(len(steps)), key=lambda j: (abs(steps[j] - target), -steps[j]))


def seed_stats(vals) -> dict:
    """Mean, std (ddof 1; 0 for one value), min, max and the values (one per seed)."""
    vals = [float(v) for v in vals]
    return {
        "mean": float(np.mean(vals)),
        "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0,
        "min": min(vals),
        "max": max(vals),
        "per_seed": vals,
    }


def summarize(races: list[Race], runs: list[dict], scorers: dict, tier_summaries: tuple = ()) -> dict:
    """Each race's entry (the module docstring), then each of ``tier_summaries`` (the tier's own parts,
    :attr:`benchmarks.race.tier.Tier.summaries`) under its key, where it has something to add."""
    summary = {}
    for race in races:
        rr = [r for r in runs if r["race"] == race.name]
        if not rr:
            continue
        metric = rr[0]["primary_metric"]
        metrics = [metric] + [
            m for m in ("fd", "fd_thresholded", "fd_k4", "js_k4", "frac_grey_pixels") if m in rr[0]["quality"] and m != metric
        ]
        by = {s: sorted([r for r in rr if r["sampler"] == s], key=lambda r: r["seed"]) for s in race.samplers}
        entry = {
            "dataset": race.dataset,
            "path": race.diffusion,
            "primary_metric": metric,
            "baseline": race.baseline,
            "inference": rr[0]["inference"]["scheduler"],
            "budget_steps": race.steps,
            "final": {},
            "at_budget": {},
            "speedup_vs": {},
            "speedup_smoothing": race.smoothing,
            "wall_time_s": {},
        }
        for s, lst in by.items():
            if not lst:
                continue
            entry["final"][s] = {m: seed_stats([r["quality"][m][-1] for r in lst]) for m in metrics}
            entry["wall_time_s"][s] = seed_stats([r["wall_time_s"]["total"] for r in lst])
            entry["at_budget"][s] = {}
            for frac in (0.25, 0.5, 1.0):
                target = frac * race.steps
                vals = {m: [] for m in metrics}
                for r in lst:
                    i = nearest_evaluation(r["steps"], target)
                    for m in metrics:
                        vals[m].append(r["quality"][m][i])
                entry["at_budget"][s][f"{int(frac * 100)}%"] = {m: seed_stats(v) for m, v in vals.items()}
        ref = race.infonoise_arm
        if race.eval_steps and by.get(ref):
            entry["curve"] = curve(race, by, metric)
        if by.get(ref):
            for b in race.samplers:
                if b == ref or not by.get(b):
                    continue
                per_metric = {}
                for m in (metric,) + tuple(x for x in ("fd",) if x != metric and x in metrics):
                    per_metric[m] = {
                        **paired_speedups(by[b], by[ref], m, race.smoothing),
                        "note": "a not-reached seed enters the median with its upper bound (baseline steps / budget)",
                    }
                entry["speedup_vs"][b] = per_metric
        # each InfoNoise variant against the fixed densities, on the primary metric (same pairing by seed)
        entry["variant_speedup_vs"] = {}
        for v in (x for x in race.samplers if x.startswith("infonoise-") and x != ref and by.get(x)):
            for b in (x for x in (race.baseline, "logit_normal") if by.get(x)):
                sp = paired_speedups(by[b], by[v], metric, race.smoothing)
                if sp["per_seed"]:
                    entry["variant_speedup_vs"].setdefault(v, {})[b] = sp
        jit = [r["jitter"] for r in rr if r.get("jitter")]
        if jit:
            entry["jitter"] = {
                m: {
                    "mean_std": float(np.mean([j["std"][m] for j in jit])),
                    "per_run": {r["run_id"]: r["jitter"]["std"][m] for r in rr if r.get("jitter")},
                }
                for m in jit[0]["std"]
            }
            entry["jitter"]["how"] = (
                f"std over {len(jit[0]['seeds'])} sampling seeds of the same final EMA model ({race.num_samples} samples each)"
            )
        sc = scorers.get(race.dataset)
        if sc is not None:
            entry["floor"] = sc.floors()
            if getattr(sc, "classifier_info", None):
                entry["classifier"] = sc.classifier_info
        refs = {r["seed"]: r.get("schedule") for r in by.get(ref, [])}
        entry["tv_phi_rho"] = {}
        for s, lst in by.items():
            tvs = [allocation_tv(race, r, refs.get(r["seed"])) for r in lst]
            if lst and all(t is not None for t in tvs):
                entry["tv_phi_rho"][s] = seed_stats(tvs)
        entry["pi_width"] = {}
        for s, lst in by.items():
            ws = [allocation_width(race, r, refs.get(r["seed"])) for r in lst]
            if lst and all(w is not None for w in ws):
                entry["pi_width"][s] = {k: seed_stats([w[k] for w in ws]) for k in ws[0]}
        waste = [base_mass_where_pi_small(r["schedule"], race) for r in by.get(ref, []) if r.get("schedule")]
        if waste:
            entry["base_mass_where_final_pi_below_1pct_of_peak"] = seed_stats(waste)
            entry["base_mass_where_unfloored_pi_below_1pct_of_peak"] = seed_stats(
                [base_mass_where_pi_small(r["schedule"], race, unfloored=True) for r in by[ref] if r.get("schedule")]
            )
            entry["gate"] = {r["run_id"]: r["schedule"]["gate"] for r in by[ref] if r.get("schedule")}
        summary[race.name] = entry
    for part in tier_summaries:  # they build on the races' entries
        value = part.summarize(races, runs, summary)
        if value is not None:
            summary[part.key] = value
    return summary


def curve(race: Race, by: dict, metric: str) -> dict:
    """A race's learning curves at its evaluated steps (races with explicit ``eval_steps``, e.g. the 4x-budget
    ones): per step each sampler's ``metric`` over seeds, and per other sampler on how many seeds InfoNoise is
    lower (paired by seed; lower is better), which shows where the curves cross. InfoNoise: ``race.infonoise_arm``."""
    out = {"steps": list(race.eval_steps), "samplers": {}, "infonoise_ahead": {}}
    info = {r["seed"]: r for r in by[race.infonoise_arm]}
    for s, lst in by.items():
        if not lst:
            continue
        out["samplers"][s] = [seed_stats([r["quality"][metric][r["steps"].index(st)] for r in lst if st in r["steps"]])
                              for st in race.eval_steps]  # fmt: skip
        if s == race.infonoise_arm:
            continue
        ahead = []
        for st in race.eval_steps:
            pairs = [(info[r["seed"]], r) for r in lst if r["seed"] in info and st in r["steps"] and st in info[r["seed"]]["steps"]]
            wins = sum(a["quality"][metric][a["steps"].index(st)] < b["quality"][metric][b["steps"].index(st)] for a, b in pairs)
            ahead.append({"wins": int(wins), "seeds": len(pairs)})
        out["infonoise_ahead"][s] = ahead
    return out
