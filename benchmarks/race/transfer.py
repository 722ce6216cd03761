"""The transfer tier's measures and report (issue 30): tasks whose informative noise window moves, one InfoNoise run
against the best point of a sweep.

Per task (a race with a ``sweep``): each arm's final quality over seeds; the oracle, the sweep point with the best
mean final quality (what a user finds with one run per point); each arm's regret ``quality / oracle − 1`` (lower is
better for every metric of the races, so regret ≥ 0 means worse than the oracle); the strongest fixed arm (the best
final quality among every fixed density, defaults and sweep) and the steps InfoNoise needs to reach its final
quality (the paper's speed-up); TV(φ, ρ̂) of every InfoNoise run; where the informative window sits (the mode and the
10-90% range of the final ρ̂ of the InfoNoise runs, in VE σ) against where each arm draws (the 10-90% range of its π).
Across tasks: each arm's worst-case regret and the runs it needed to be chosen (one for an arm used as it is, one per
sweep point for the oracle, one plus its pilot's and profile's share of a run for a fixed density recommended from a
profile, ``logit_normal#recommended``: :mod:`benchmarks.race.recommended`). :func:`summarize_transfer` computes it from
the runs and the races' summaries; :func:`markdown` and :func:`plot_regret` report it.

Arms are names (:func:`benchmarks.race.tiers.parse_arm`), so arms added later (InfoNoise re-run under a new label,
``infonoise#v2``, or a variant, ``infonoise-<flag>_<value>``; a fixed density with parameters read from a pilot,
``logit_normal@mean=-1.3,std=0.8``) enter every table and figure without a change here: fixed arms count towards the
strongest fixed arm, InfoNoise arms get the steps-to-target and TV columns.
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.race.allocation_metrics import base_density
from benchmarks.race.arms import parse_arm, run_arm
from benchmarks.race.races import Race
from benchmarks.race.steps_to_target import steps_to_reach
from benchmarks.race.summary import seed_stats

#: the name the oracle has in the cross-task summary (it is no single arm: the sweep point that was best per task)
ORACLE = "oracle (best sweep point)"


def arm_order(arms) -> list[str]:
    """InfoNoise arms first, then the fixed densities, then the other adaptive samplers, each group in the given order."""
    rank = {"infonoise": 0, "fixed": 1, "adaptive": 2}
    return sorted(dict.fromkeys(arms), key=lambda a: rank[parse_arm(a).kind])


def regret(value: float, oracle: float) -> float:
    """``value / oracle − 1``: how much worse than the oracle a lower-is-better quality is (0: as good)."""
    return float(value) / float(oracle) - 1.0


def choose_oracle(race: Race, finals: dict) -> dict | None:
    """The sweep point of ``race`` with the lowest mean final quality among those with runs (``finals``: arm →
    :func:`~benchmarks.race.summary.seed_stats` of the final quality), the sweep's means, and whether every point
    ran (a partial sweep's oracle can only be worse than the full one's, so its regrets are lower bounds). None
    without any sweep point."""
    sweep = {a: finals[a]["mean"] for a in race.sweep if a in finals}
    if not sweep:
        return None
    best = min(sweep, key=sweep.get)
    return {"arm": best, "final_mean": sweep[best], "sweep": sweep, "complete": len(sweep) == len(race.sweep)}


def strongest_fixed(finals: dict) -> str | None:
    """The fixed arm (defaults and sweep points alike) with the lowest mean final quality."""
    fixed = {a: f["mean"] for a, f in finals.items() if parse_arm(a).kind == "fixed"}
    return min(fixed, key=fixed.get) if fixed else None


def steps_to_target(target_runs: list[dict], runs: list[dict], metric: str) -> dict:
    """The paper's speed-up: the steps each of ``runs`` needs to reach the final quality of ``target_runs`` (their mean
    curve; the same steps), against the steps that curve needs itself (its budget, unless it got there sooner), on
    the evaluated steps linearly interpolated (no smoothing: the tier evaluates at a third, two thirds and the end).
    Per run: ``speedup`` (None when the target is not reached: then ``speedup_upper_bound`` = the target's steps /
    the budget) and ``at_first_eval`` (reached at the first evaluation: the speed-up is a lower bound); the median
    over runs, not-reached runs entering with their upper bound."""
    steps = target_runs[0]["steps"]
    curve = np.mean([r["quality"][metric] for r in target_runs if r["steps"] == steps], axis=0)
    target = float(curve[-1])
    base_steps, _ = steps_to_reach(steps, curve, target)
    per_run = []
    for r in runs:
        n, how = steps_to_reach(r["steps"], r["quality"][metric], target)
        entry = {"seed": r["seed"], "steps": n, "how": how}
        if n is None:
            entry.update(speedup=None, speedup_upper_bound=base_steps / r["steps"][-1])
        else:
            entry.update(speedup=base_steps / n, at_first_eval=how == "at_first_eval")
        per_run.append(entry)
    values = [p["speedup"] if p["speedup"] is not None else p["speedup_upper_bound"] for p in per_run]
    return {
        "target": target,
        "target_steps": base_steps,
        "per_seed": per_run,
        "median": float(np.median(values)) if values else None,
        "num_not_reached": sum(p["speedup"] is None for p in per_run),
    }


def _quantiles_sigma(edges: np.ndarray, masses: np.ndarray, qs=(0.1, 0.9)) -> list[float]:
    """VE-σ quantiles of bin masses on log-σ ``edges`` (uniform inside a bin)."""
    cdf = np.concatenate([[0.0], np.cumsum(masses / masses.sum())])
    return [float(np.exp(np.interp(q, cdf, edges))) for q in qs]


def window(runs: list[dict]) -> dict | None:
    """Where the informative window sits: the mode of the final ρ̂ (per unit ln σ) and its 10-90% range, in VE σ, per
    InfoNoise run with a stored schedule and their median; None without one."""
    per_run = []
    for r in runs:
        sch = r.get("schedule") or {}
        if not sch.get("rho_hat") or not sch.get("edges"):
            continue
        edges, rho = np.asarray(sch["edges"], float), np.asarray(sch["rho_hat"], float)
        centres = 0.5 * (edges[1:] + edges[:-1])
        q10, q90 = _quantiles_sigma(edges, rho * np.diff(edges))
        per_run.append({"seed": r["seed"], "mode_sigma": float(np.exp(centres[int(np.argmax(rho))])), "sigma_q10": q10, "sigma_q90": q90})
    if not per_run:
        return None
    med = {k: float(np.median([p[k] for p in per_run])) for k in ("mode_sigma", "sigma_q10", "sigma_q90")}
    return {**med, "per_run": per_run, "source": "final rho_hat stored by the InfoNoise runs"}


def draws(race: Race, arm: str, runs: list[dict]) -> dict | None:
    """Where an arm puts its draws: the 10-90% range of its π in VE σ. A fixed density's from its inverse CDF (a
    ``#recommended`` arm's as each run resolved it, median over its runs); an adaptive arm's final π (InfoNoise's stored
    schedule, another sampler's last checkpoint), median over its runs; None when an adaptive arm recorded no final π."""
    import torch

    found = []
    if parse_arm(arm).kind == "fixed":
        for name in [run_arm(r) for r in runs] or [arm]:
            q = torch.exp(base_density(race, name).icdf(torch.tensor([0.1, 0.9], dtype=torch.float64)))
            found.append((float(q[0]), float(q[1])))
        source = "the density" + (" as its runs resolved it (median)" if parse_arm(arm).recommended else "")
    else:
        for r in runs:
            own = r.get("schedule") if (r.get("schedule") or {}).get("pi") else r.get("final_pi")
            if own and own.get("pi") and own.get("edges"):
                found.append(_quantiles_sigma(np.asarray(own["edges"], float), np.asarray(own["pi"], float)))
        source = "final pi of its runs (median)"
    if not found:
        return None
    return {"sigma_q10": float(np.median([f[0] for f in found])), "sigma_q90": float(np.median([f[1] for f in found])), "source": source}


def summarize_transfer(races: list[Race], runs: list[dict], summary: dict) -> dict:
    """The transfer measures of every race with a sweep (module docstring), from the finished ``runs`` and the races'
    entries in ``summary`` (:func:`benchmarks.race.summary.summarize`: TV(φ, ρ̂))."""
    tasks = {}
    for race in (r for r in races if r.sweep):
        rr = [r for r in runs if r["race"] == race.name]
        if not rr:
            continue
        metric = rr[0]["primary_metric"]
        by = {a: sorted([r for r in rr if r["sampler"] == a], key=lambda r: r["seed"]) for a in race.samplers}
        by = {a: lst for a, lst in by.items() if lst}
        finals = {a: seed_stats([r["quality"][metric][-1] for r in lst]) for a, lst in by.items()}
        oracle = choose_oracle(race, finals)
        strongest = strongest_fixed(finals)
        tv = (summary.get(race.name) or {}).get("tv_phi_rho") or {}
        arms = {}
        for a in arm_order(by):
            lst = by[a]
            entry = {
                "kind": parse_arm(a).kind,
                "final": finals[a],
                "draws": draws(race, a, lst),
                "wall_time_s": float(np.mean([r["wall_time_s"]["total"] for r in lst])),
            }
            if oracle:
                entry["regret"] = regret(finals[a]["mean"], oracle["final_mean"])
                entry["regret_per_seed"] = [regret(v, oracle["final_mean"]) for v in finals[a]["per_seed"]]
            if a in tv:
                entry["tv_phi_rho"] = tv[a]
            if entry["kind"] == "infonoise" and strongest:
                entry["steps_to_strongest_fixed"] = {"arm": strongest, **steps_to_target(by[strongest], lst, metric)}
            if parse_arm(a).recommended:
                entry["recommended"] = recommended_entry(lst)
                entry["runs_to_choose"] = 1.0 + entry["recommended"]["run_share"]
            arms[a] = entry
        tasks[race.name] = {
            "task": race.task,
            "dataset": race.dataset,
            "reference": race.reference,
            "metric": metric,
            "budget_steps": race.steps,
            "pretrained": race.pretrained,
            "oracle": oracle,
            "strongest_fixed": strongest,
            "window": window(by.get(race.infonoise_arm, [])),
            "arms": arms,
        }
    return {"tasks": tasks, "worst_case": worst_case(tasks), "how": __doc__.split("\n\n")[1].replace("\n", " ")}


def recommended_entry(runs: list[dict]) -> dict:
    """What a ``#recommended`` arm's runs resolved to (their ``recommended`` records): per run the arm, the fit's TV
    and the source; the mean share of a run its pilot and profile cost (``run_share``)."""
    per_run = [{"seed": r["seed"], "arm": r["resolved_arm"], "fit_tv": r["recommended"]["tv"], "source": r["recommended"]["source"]["kind"],
                "cost": {k: r["recommended"]["cost"][k] for k in ("pilot_steps", "profile_forward_passes", "run_share")},
                # since issue 48: the row the command printed (its flags, figures and warnings) that the run trained
                **({"printed": r["recommended"]["printed"]} if r["recommended"].get("printed") else {})}
               for r in runs]  # fmt: skip
    return {"per_run": per_run, "run_share": float(np.mean([p["cost"]["run_share"] for p in per_run]))}


def worst_case(tasks: dict) -> dict:
    """Each arm's largest regret over the tasks whose sweep is complete (and the task), with the runs it needs per
    task to be chosen: 1 for an arm used as it is, the sweep's size for the oracle (whose regret is 0), 1 + the share
    of a run its pilot and profile cost for a ``#recommended`` arm (the largest over the tasks)."""
    out = {}
    complete = {name: t for name, t in tasks.items() if t["oracle"] and t["oracle"]["complete"]}
    arms = arm_order(a for t in complete.values() for a in t["arms"])
    for a in arms:
        regrets = {name: t["arms"][a]["regret"] for name, t in complete.items() if a in t["arms"]}
        if not regrets:
            continue
        worst = max(regrets, key=regrets.get)
        runs = max(t["arms"][a].get("runs_to_choose", 1) for t in complete.values() if a in t["arms"])
        out[a] = {"regret": regrets[worst], "task": worst, "tasks": regrets, "runs_to_choose": runs}
    if complete:
        sizes = {len(t["oracle"]["sweep"]) for t in complete.values()}
        out[ORACLE] = {"regret": 0.0, "task": None, "tasks": {name: 0.0 for name in complete}, "runs_to_choose": max(sizes)}
    return out


# ----------------------------------------------------------------------------------------------
# the report
# ----------------------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f}%"


def _speedup_cell(sp: dict) -> str:
    seeds = ", ".join(
        f"{p['speedup']:.2f}" + ("≥" if p.get("at_first_eval") else "") if p["speedup"] is not None else f"<{p['speedup_upper_bound']:.2f}"
        for p in sp["per_seed"]
    )
    return f"{'≤ ' if sp['num_not_reached'] > len(sp['per_seed']) / 2 else ''}{sp['median']:.2f} [{seeds}]"


def markdown(tsum: dict, figure: str) -> list[str]:
    """The transfer sections of the tier's markdown: regret per task and arm, the worst cases, the speed-ups and TV,
    and where the window sits against each arm's draws."""
    tasks = tsum["tasks"]
    if not tasks:
        return []
    arms = arm_order(a for t in tasks.values() for a in t["arms"])
    L = [
        "## Transfer: regret against the best point of the sweep",
        "",
        "Regret = final quality / the oracle's − 1 (the oracle: the best sweep point of the task; lower quality is better, so "
        "+10% is 10% worse than the oracle); mean over seeds, the seeds' range in brackets where an arm has more than one. "
        "A task marked * has an incomplete sweep (its oracle can only improve: its regrets are lower bounds). "
        f"Figure: [`{figure}`]({figure}).",
        "",
        "| task | metric, budget | oracle | " + " | ".join(f"`{a}`" for a in arms) + " |",
        "|---|---|---|" + "---|" * len(arms),
    ]
    for name, t in tasks.items():
        o = t["oracle"]
        cells = []
        for a in arms:
            e = t["arms"].get(a)
            if not e or "regret" not in e:
                cells.append("—")
                continue
            spread = f" [{_pct(min(e['regret_per_seed']))}, {_pct(max(e['regret_per_seed']))}]" if len(e["regret_per_seed"]) > 1 else ""
            cells.append(_pct(e["regret"]) + spread)
        ocell = f"`{o['arm']}` {o['final_mean']:.3g}" + ("" if o["complete"] else " *") if o else "—"
        L.append(f"| {name}: {t['task']} | `{t['metric']}`, {t['budget_steps']} | {ocell} | " + " | ".join(cells) + " |")
    L += ["", "### Worst case across tasks (complete sweeps only)", ""]
    L += ["| arm | worst regret (task) | runs needed per task |", "|---|---|---|"]
    for a, w in tsum["worst_case"].items():
        where = f" ({w['task']})" if w["task"] else ""
        runs = w["runs_to_choose"]
        L.append(f"| `{a}` | {_pct(w['regret'])}{where} | {runs if isinstance(runs, int) else f'{runs:.2f}'} |")
    L += _recommended_section(tasks)
    L += [
        "",
        "### InfoNoise: steps to the strongest fixed arm's final quality, and TV(φ, ρ̂)",
        "",
        "Speed-up = the steps the strongest fixed arm (the best mean final quality of any fixed density, defaults and sweep) "
        "needs for its own final quality / the steps InfoNoise needs to reach it, per seed on the evaluated steps "
        "(linear in between; `<x`: not reached, x the upper bound; `≥`: reached at the first evaluation); median over seeds.",
        "",
        "| task | InfoNoise arm | final quality | regret | TV(φ, ρ̂) | strongest fixed arm | speed-up: median [seeds] |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, t in tasks.items():
        for a, e in t["arms"].items():
            if e["kind"] != "infonoise":
                continue
            f, tv, sp = e["final"], e.get("tv_phi_rho"), e.get("steps_to_strongest_fixed")
            tv_cell = f"{tv['mean']:.2f} ± {tv['std']:.2g}" if tv else "—"
            sp_cells = f"`{sp['arm']}` | {_speedup_cell(sp)}" if sp else "— | —"
            quality = f"{f['mean']:.3g} ± {f['std']:.2g} ({len(f['per_seed'])})"
            L.append(f"| {name} | `{a}` | {quality} | {_pct(e.get('regret'))} | {tv_cell} | {sp_cells} |")
    L += [
        "",
        "### Where the window sits, and where each arm draws",
        "",
        "Window: the mode and the 10–90% range of the final ρ̂ of the InfoNoise runs (median over seeds), VE σ. Each arm: the "
        "10–90% range of its π in VE σ (a fixed density's exactly; an adaptive arm's final π).",
        "",
        "| task | window: mode [10–90%] | " + " | ".join(f"`{a}`" for a in arms) + " |",
        "|---|---|" + "---|" * len(arms),
    ]
    for name, t in tasks.items():
        w = t["window"]
        wcell = f"{w['mode_sigma']:.2g} [{w['sigma_q10']:.2g}–{w['sigma_q90']:.2g}]" if w else "—"
        cells = []
        for a in arms:
            d = (t["arms"].get(a) or {}).get("draws")
            cells.append(f"{d['sigma_q10']:.2g}–{d['sigma_q90']:.2g}" if d else "—")
        L.append(f"| {name} | {wcell} | " + " | ".join(cells) + " |")
    return L + [""]


def _recommended_section(tasks: dict) -> list[str]:
    """The ``#recommended`` arms: what each run resolved to, from what, at what cost, beside its regret."""
    rows = [(name, a, e) for name, t in tasks.items() for a, e in t["arms"].items() if e.get("recommended")]
    if not rows:
        return []
    L = [
        "",
        "### Fixed densities recommended from a profile (`infonoise recommend`, issue 32)",
        "",
        "Each run's parameters fitted at run time (docs/METHOD.md §6.1) to a profile of the fine-tune's pretrain at step 0, or "
        "of a pilot of a quarter of the steps with the family's default (from scratch); fit TV = the fit's TV as the run "
        "recorded it (TV(φ_fit, ρ̂) of that profile for runs fitted before issue 48, TV(π_fit, π*) since). Cost: the "
        "pilot's steps and the profile's forward passes, as a share of one run (3 forward passes per trained sample); the "
        "arm needs 1 + that share of a run per task.",
        "",
        "| task | arm | resolved to | fit TV | from | pilot steps | profile forward passes | runs needed | regret |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, a, e in rows:
        for p in e["recommended"]["per_run"]:
            c = p["cost"]
            L.append(f"| {name} | `{a}` s{p['seed']} | `{p['arm']}` | {p['fit_tv']:.3f} | {p['source']} | {c['pilot_steps']} | "
                     f"{c['profile_forward_passes']} | {1 + c['run_share']:.2f} | {_pct(e.get('regret'))} |")  # fmt: skip
    return L


def plot_regret(tsum: dict, path) -> list[str]:
    """Regret per task (rows) and arm (columns), annotated in percent; colour clipped at 50%. Returns the arms plotted."""
    tasks = tsum["tasks"]
    if not tasks:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = arm_order(a for t in tasks.values() for a in t["arms"])
    grid = np.full((len(tasks), len(arms)), np.nan)
    for i, t in enumerate(tasks.values()):
        for j, a in enumerate(arms):
            if "regret" in (t["arms"].get(a) or {}):
                grid[i, j] = t["arms"][a]["regret"]
    fig, ax = plt.subplots(figsize=(1.0 * len(arms) + 3, 0.5 * len(tasks) + 2))
    im = ax.imshow(np.clip(grid, 0, 0.5), cmap="Reds", vmin=0, vmax=0.5, aspect="auto")
    for i in range(len(tasks)):
        for j in range(len(arms)):
            if not np.isnan(grid[i, j]):
                color = "white" if grid[i, j] > 0.3 else "black"
                ax.text(j, i, f"{100 * grid[i, j]:.0f}", ha="center", va="center", fontsize=7, color=color)
    ax.set_xticks(range(len(arms)), arms, rotation=45, ha="right", fontsize=7)
    labels = [f"{n}{'' if t['oracle'] and t['oracle']['complete'] else ' *'}" for n, t in tasks.items()]
    ax.set_yticks(range(len(tasks)), labels, fontsize=7)
    fig.colorbar(im, ax=ax, label="regret = quality / oracle − 1 (clipped at 0.5)")
    ax.set_title("regret (%) per task and arm against the best sweep point (* incomplete sweep)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return arms
