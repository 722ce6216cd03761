"""The fair race's measures (issue 47, step 1): InfoNoise against an oracle that is not biased low, on curves that
are not smoothed.

Per task (a race whose ``sweep`` holds the best centre of an earlier one-seed sweep and its better neighbour, each
re-run with every seed): the **oracle** is the re-run centre with the best *mean* final quality over its seeds (the
lowest of several single runs is biased low by about the seeds' spread); each arm's **regret** against it, with the
seeds' noise beside it (the standard error of the difference of the two means and Welch's t, so that a gap can be
read as resolved or not); the **stronger default**, logit-normal(0, 1) or EDM log-normal, whichever has the better
mean final quality (what a user picks without a sweep); and for each InfoNoise arm the **steps to target**: the steps
each of its seeds needs to reach the final quality of the stronger default and of the oracle (their mean curves), on
the raw curves, linear between evaluations (:func:`benchmarks.race.transfer.steps_to_target`). Lower quality is
better for every metric of the races. :func:`summarize_fair` computes it from the races' summaries and the runs,
:func:`markdown` reports it.
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.race.arms import parse_arm
from benchmarks.race.races import Race
from benchmarks.race.transfer import recommended_entry, regret, steps_to_target

#: the densities a user trains with when no sweep was made: logit-normal(0, 1) (SD3, Flux) and EDM's log-normal
DEFAULTS = ("logit_normal", "edm_lognormal")
#: the seeds an arm needs for a comparison this race decides
MIN_SEEDS = 3
#: a recommended fixed density serves where its regret against the fair oracle is at most this (issue 48's bar), and
#: is honest where it misses only if the command warned on the row it printed
RECOMMENDED_BAR = 0.05


def welch(a, b) -> dict:
    """The difference of the means of ``a`` and ``b`` (samples, e.g. one final quality per seed), its standard error
    ``sqrt(var_a/n_a + var_b/n_b)`` (sample variances, ddof 1), Welch's t = difference / standard error and its
    Welch–Satterthwaite degrees of freedom; the standard error (and t) None with fewer than 2 values on a side."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    diff = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2:
        return {"diff": diff, "se": None, "t": None, "dof": None}
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if va + vb > 0 else None
    return {"diff": diff, "se": se, "t": diff / se if se > 0 else None, "dof": dof}


def paired(a: dict, b: dict) -> dict:
    """The relative difference of two arms paired by seed: ``a``, ``b`` map a seed to a final quality; per seed both hold,
    ``d = a/b − 1``; its mean, standard error (ddof 1, over √n), t and the seeds used (se and t None with fewer than 2).
    Arms of one race share each seed's initial weights, data order and evaluation noise (the scripts' ``--seed``), so
    the seed's luck cancels in ``d``: a gap the unpaired (Welch) comparison leaves inside the seeds' spread can be
    resolved (docs/results.md, "Which target")."""
    seeds = sorted(set(a) & set(b))
    d = np.array([a[s] / b[s] - 1.0 for s in seeds], float)
    if len(d) < 2:
        return {"mean": float(d.mean()) if len(d) else None, "se": None, "t": None, "seeds": seeds}
    se = float(d.std(ddof=1) / math.sqrt(len(d)))
    return {"mean": float(d.mean()), "se": se, "t": float(d.mean() / se) if se > 0 else None, "seeds": seeds}


def _by_seed(runs: list[dict], metric: str) -> dict:
    return {r["seed"]: r["quality"][metric][-1] for r in runs}


def _arm_entry(values: list[float], oracle_values: list[float], tv: dict | None) -> dict:
    oracle_mean = float(np.mean(oracle_values))
    w = welch(values, oracle_values)
    return {
        "final_mean": float(np.mean(values)),
        "final_std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
        "per_seed": [float(v) for v in values],
        "regret": regret(np.mean(values), oracle_mean),
        # the regret's standard error from the seeds of both arms (the oracle's mean is itself an estimate)
        "regret_se": None if w["se"] is None else w["se"] / oracle_mean,
        "welch_t": w["t"],
        "seeds": len(values),
        "tv_phi_rho": tv,
    }


def recommended_verdict(regret_value: float, entry: dict) -> str:
    """``"within"`` (regret ≤ :data:`RECOMMENDED_BAR`), else ``"warned"`` when the command printed a warning on the row
    of every run, ``"warned on some runs"``, or ``"silent miss"``."""
    if regret_value <= RECOMMENDED_BAR:
        return "within"
    warned = [bool(p.get("printed", {}).get("warnings")) for p in entry["per_run"]]
    return "warned" if all(warned) else "warned on some runs" if any(warned) else "silent miss"


def summarize_fair(races: list[Race], runs: list[dict], summary: dict) -> dict | None:
    """The fair race's part of the summary (module docstring): per task the oracle, the stronger default, each arm's
    regret with its noise, and each InfoNoise arm's steps to the stronger default's and the oracle's final quality;
    across tasks each arm's worst mean regret. Tasks whose oracle or defaults have fewer than :data:`MIN_SEEDS` seeds
    are reported but marked ``decides: False``. None without a race that has a sweep and runs."""
    tasks = {}
    for race in races:
        entry = summary.get(race.name)
        if not race.sweep or not entry:
            continue
        metric = entry["primary_metric"]
        finals = {a: f[metric] for a, f in entry["final"].items()}
        by = {a: sorted((r for r in runs if r["race"] == race.name and r["sampler"] == a), key=lambda r: r["seed"]) for a in finals}
        centres = [a for a in race.sweep if a in finals]
        defaults = [a for a in DEFAULTS if a in finals]
        if not centres:
            continue
        oracle = min(centres, key=lambda a: finals[a]["mean"])
        default = min(defaults, key=lambda a: finals[a]["mean"]) if defaults else None
        oracle_values = finals[oracle]["per_seed"]
        arms = {}
        oracle_by_seed = _by_seed(by[oracle], metric)
        for a in finals:
            arms[a] = _arm_entry(finals[a]["per_seed"], oracle_values, entry.get("tv_phi_rho", {}).get(a))
            arms[a]["paired_regret"] = paired(_by_seed(by[a], metric), oracle_by_seed)
            if parse_arm(a).kind == "infonoise" and a != "infonoise" and "infonoise" in finals:  # a candidate target
                arms[a]["paired_vs_infonoise"] = paired(_by_seed(by[a], metric), _by_seed(by["infonoise"], metric))
            if parse_arm(a).kind == "infonoise":
                for name, target in (("vs_default", default), ("vs_oracle", oracle)):
                    if target is not None:
                        arms[a][f"speedup_{name}"] = steps_to_target(by[target], by[a], metric)
            if parse_arm(a).recommended:
                arms[a]["recommended"] = rec = recommended_entry(by[a])
                arms[a]["verdict"] = recommended_verdict(arms[a]["regret"], rec)
        compared = [oracle, *defaults, *(a for a in finals if parse_arm(a).kind == "infonoise")]
        tasks[race.name] = {
            "task": race.task,
            "metric": metric,
            "budget_steps": race.steps,
            "evaluations": len(by[oracle][0]["steps"]),
            "oracle": oracle,
            "oracle_mean": float(np.mean(oracle_values)),
            "centres": {a: finals[a]["mean"] for a in centres},
            "stronger_default": default,
            "arms": arms,
            "decides": all(arms[a]["seeds"] >= MIN_SEEDS for a in compared),
        }
    if not tasks:
        return None
    worst = {}
    for name, t in tasks.items():
        for a, e in t["arms"].items():
            if a not in worst or e["regret"] > worst[a]["regret"]:
                worst[a] = {"regret": e["regret"], "task": name}
    return {
        "tasks": tasks,
        "worst_regret": worst,
        "how": (
            "oracle: the re-run sweep centre with the best mean final quality over its seeds; regret = an arm's mean final "
            "quality / the oracle's mean - 1, its standard error and Welch's t from both arms' seeds; paired: the mean over "
            "seeds of an arm's final / the oracle's (or the library's InfoNoise's) final of the same seed - 1, with its "
            "standard error and t (the seeds share initial weights, data order and evaluation noise); speed-ups on raw curves "
            "(linear between evaluations): the stronger default's (or the oracle's) mean-curve steps to its own final quality "
            "/ the steps each InfoNoise seed needs to reach it"
        ),
    }


def _speedups(sp: dict | None) -> str:
    if not sp:
        return "—"
    seeds = ", ".join(
        f"{p['speedup']:.2f}" + ("≥" if p.get("at_first_eval") else "") if p["speedup"] is not None else f"<{p['speedup_upper_bound']:.2f}"
        for p in sp["per_seed"]
    )
    return f"{sp['median']:.2f} [{seeds}]"


def _paired(p: dict | None) -> str:
    if not p or p["mean"] is None:
        return "—"
    return f"{100 * p['mean']:+.1f}%" + (f" ± {100 * p['se']:.1f}% (t {p['t']:+.1f})" if p["t"] is not None else "")


def _regret(e: dict) -> str:
    noise = f" ± {100 * e['regret_se']:.1f}%" if e["regret_se"] is not None else ""
    t = f" (t {e['welch_t']:+.1f})" if e["welch_t"] is not None else ""
    return f"{100 * e['regret']:+.1f}%{noise}{t}"


def markdown(part: dict, figure: str | None = None) -> list[str]:
    """The fair race's sections of the tier's report."""
    L = [
        "## The fair oracle: regret and steps to target on raw curves",
        "",
        f"How: {part['how']}. A task marked * has an arm with fewer than {MIN_SEEDS} seeds and decides nothing. "
        "`≥`: reached at the first evaluation (a lower bound); `<x`: not reached within the budget (x an upper bound).",
        "",
        "| task | metric, budget, evaluations | oracle (mean) | arm | final, mean ± std (seeds) | TV(φ, ρ̂) | regret ± se (Welch t) "
        "| regret paired by seed ± se (t) | speed-up vs the stronger default | speed-up vs the oracle |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, t in part["tasks"].items():
        first = True
        ordered = sorted(t["arms"], key=lambda a: (parse_arm(a).kind != "infonoise", a not in DEFAULTS, a))
        for a in ordered:
            e = t["arms"][a]
            tv = f"{e['tv_phi_rho']['mean']:.2f}" if e.get("tv_phi_rho") else "—"
            label = f"`{a}`" + (" (stronger default)" if a == t["stronger_default"] else "") + (" (oracle)" if a == t["oracle"] else "")
            head = (
                f"{name}{'' if t['decides'] else ' *'}",
                f"`{t['metric']}`, {t['budget_steps']}, {t['evaluations']}",
                f"`{t['oracle']}` {t['oracle_mean']:.3g}",
            )
            L.append(
                "| "
                + " | ".join(
                    [
                        *(head if first else ("", "", "")),
                        label,
                        f"{e['final_mean']:.3g} ± {e['final_std']:.2g} ({e['seeds']})",
                        tv,
                        _regret(e),
                        _paired(e.get("paired_regret")),
                        _speedups(e.get("speedup_vs_default")),
                        _speedups(e.get("speedup_vs_oracle")),
                    ]
                )
                + " |"
            )
            first = False
    candidates = [(name, a, e) for name, t in part["tasks"].items() for a, e in t["arms"].items() if e.get("paired_vs_infonoise")]
    if candidates:
        L += ["", "Candidate targets against the library's InfoNoise, paired by seed (final / InfoNoise's final − 1):", ""]
        L += ["| task | arm | paired difference ± se (t) | seeds |", "|---|---|---|---|"]
        L += [f"| {n} | `{a}` | {_paired(e['paired_vs_infonoise'])} | {len(e['paired_vs_infonoise']['seeds'])} |" for n, a, e in candidates]
    L += ["", "Worst mean regret across tasks:", "", "| arm | worst regret (task) |", "|---|---|"]
    for a, w in sorted(part["worst_regret"].items(), key=lambda kv: kv[1]["regret"]):
        L.append(f"| `{a}` | {100 * w['regret']:+.1f}% ({w['task']}) |")
    return L + _recommended_markdown(part) + [""]


def _recommended_markdown(part: dict) -> list[str]:
    rows = [(name, a, e) for name, t in part["tasks"].items() for a, e in t["arms"].items() if e.get("recommended")]
    if not rows:
        return []
    L = [
        "",
        "## The fixed density `infonoise recommend` prints, against the fair oracle",
        "",
        "Each run trains the row the command prints for this package's scripts on a profile of a pilot (a quarter of the "
        "run with logit-normal(0, 1), from scratch) or of the fine-tune's pretrain (step 0), or the trainer's default "
        "where it prints none; its warnings as printed. Runs needed: 1 + the pilot's and the profile's share of a run. "
        f"Verdict: within {100 * RECOMMENDED_BAR:.0f}% of the oracle, else whether the command warned.",
        "",
        "| task | regret ± se (t) | verdict | runs needed | per seed: printed flags; TV(π, π*) vs the default's; warnings |",
        "|---|---|---|---|---|",
    ]
    for name, a, e in rows:
        seeds = []
        for p in e["recommended"]["per_run"]:
            shown = p.get("printed") or {}
            tv = f"TV {shown['row']['tv']:.3f} vs {shown['default']['tv']:.3f}" if shown.get("row") else "no row printed"
            warn = "; ".join(shown.get("warnings") or []) or "no warning"
            seeds.append(f"s{p['seed']}: `{shown.get('flags', p['arm'])}`; {tv}; {warn}")
        L.append(f"| {name} | {_regret(e)} | {e['verdict']} | {1 + e['recommended']['run_share']:.2f} | {'<br>'.join(seeds)} |")
    return L
