"""The quality race's report (issue 6): the results file ``quality_race_<tier>.json`` (meta, design,
summary and one compact line per run; the runs move to ``quality_race_<tier>_runs_<race>.json`` files
when it would grow too large), the figures, and ``quality_race_<tier>.md`` (the summary table, a
section per race, and the hand-written ``## Reading`` of the previous file, kept)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from benchmarks.race.data import DATASETS
from benchmarks.race.figures import plot_curves, plot_pi
from benchmarks.race.races import NUM_INFERENCE_STEPS, OMITTED_AT_DEFAULT
from benchmarks.race.tiers import get_tier

# ----------------------------------------------------------------------------------------------
# the results file
# ----------------------------------------------------------------------------------------------


def results_meta(invocation: dict, out_json: Path, *, report_only: bool, note: str | None, tier: str, runs: list) -> dict:
    """The results' meta: this invocation's, or for a report-only one the previous results file's with
    the command that regenerated it; with the note, the tier's sizing and the runs reused from another tier."""
    previous = json.loads(out_json.read_text()) if out_json.exists() else {}
    meta = invocation
    if report_only and previous.get("meta"):
        meta = {**previous["meta"], "report_regenerated_with": invocation["command"]}
    if note:
        meta["note"] = note
    sizing = get_tier(tier).sizing
    if sizing:
        meta["sizing"] = sizing
    reused = sorted({r["reused_from"].rsplit("/runs/", 1)[0] for r in runs if r.get("reused_from")})
    if reused:
        meta["reused_runs"] = {"from": reused, "run_ids": sorted(r["run_id"] for r in runs if r.get("reused_from"))}
    return meta


def design(races, tier: str) -> dict:
    """How the race is run and measured, as the results file records it."""
    return {
        "each_run": "one in-process call of training_scripts/train_unconditional.py main(argv) (see each run's 'command')",
        "inference": f"EMA weights; EDM: EDMEulerScheduler (Karras sigmas, rho 7), {NUM_INFERENCE_STEPS} steps; "
        f"DDPM: DDIM eta 0 trailing, {NUM_INFERENCE_STEPS} steps; flow: FlowMatchEuler, {NUM_INFERENCE_STEPS} steps",
        "metric": "Fréchet distance of the penultimate features (small CNN trained once on the training split) vs the "
        "held-out split; binarized data: fd_thresholded (samples > 0.5) reported, fd (continuous) also given; "
        "DNA: Jensen-Shannon distance of pooled k-mer distributions (k=4..6, mean) reported, k-mer spectrum "
        "FDs also given",
        "speedup": "steps the baseline needs to reach its own final quality / steps InfoNoise needs, on curves "
        f"smoothed by a centred moving average over {_smoothing(races)}, linear interpolation between evaluations, "
        "paired by seed; median over seeds",
        "datasets": {r.dataset: DATASETS[r.dataset].note for r in races},
        "races": [{k: v for k, v in asdict(r).items() if k not in OMITTED_AT_DEFAULT or v != OMITTED_AT_DEFAULT[k]} for r in races],
        "other_tiers": get_tier(tier).other_tiers,
    }


def _smoothing(races) -> str:
    """The races' speed-up smoothing in words (:attr:`~benchmarks.race.races.Race.smoothing`)."""
    windows = sorted({r.smoothing for r in races})
    return " or ".join("1 evaluation (the raw curves)" if w == 1 else f"{w} evaluations" for w in windows)


def compact_run(r: dict) -> dict:
    """A run as the results file keeps it: without the classifier (in the summary) and the jitter's
    values, the schedule's edges as ``[first, last, count]``, π and ρ̂ to 4 significant digits."""
    r = json.loads(json.dumps(r))
    r.pop("classifier", None)  # the same for every run of a data set: in the summary
    if r.get("jitter"):
        r["jitter"] = {"seeds": r["jitter"]["seeds"], "std": r["jitter"]["std"]}
    sch = r.get("schedule")
    if sch and sch.get("edges"):
        e = sch.pop("edges")
        sch["edges_linspace"] = [e[0], e[-1], len(e)]  # the grid is uniform in log sigma
        for k in ("pi", "rho_hat"):
            if sch.get(k):
                sch[k] = [float(f"{v:.4g}") for v in sch[k]]
    return r


def write_results_json(doc: dict, path: Path, limit: int = 190_000) -> None:
    """Summary indented; one compact line per run. When the file would pass ``limit`` bytes, the runs go
    to one ``<stem>_runs_<race>.json`` file per race (each committed file stays small)."""
    runs = [compact_run(r) for r in doc["runs"]]
    head = {k: v for k, v in doc.items() if k != "runs"}

    def compose(head, runs):
        text = json.dumps({**head, "runs": "@RUNS@"}, indent=1, default=float)
        if len(text) > limit // 2:  # a large summary (full tier): compact
            text = json.dumps({**head, "runs": "@RUNS@"}, separators=(",", ":"), default=float)
        lines = ",\n".join(json.dumps(r, separators=(",", ":"), default=float) for r in runs)
        return text.replace('"@RUNS@"', "[\n" + lines + "\n]") + "\n"

    text = compose(head, runs)
    if len(text.encode()) > limit:
        files = {}
        for race in sorted({r["race"] for r in runs}):
            part = path.with_name(f"{path.stem}_runs_{race}.json")
            part.write_text(compose({"race": race}, [r for r in runs if r["race"] == race]))
            files[race] = part.name
        text = compose({**head, "runs_files": files}, [])
    path.write_text(text)


def write_report(tier_name: str, tier: str, races, runs: list, summary: dict, meta: dict, out: Path, parts: tuple = ()) -> Path:
    """Write ``quality_race_<tier_name>.json``, its two figures and ``.md`` under ``out``, with the tier's own ``parts``
    (:class:`~benchmarks.race.tier.SummaryPart`: their sections and figures); returns the JSON's path."""
    out_json = out / f"quality_race_{tier_name}.json"
    write_results_json({"meta": meta, "design": design(races, tier), "summary": summary, "runs": runs}, out_json)
    plot_curves(races, runs, summary, out / f"quality_race_{tier_name}_curves.png")
    plot_pi(races, runs, out / f"quality_race_{tier_name}_pi.png")
    for part in parts:
        if summary.get(part.key) and part.figure:
            part.figure(summary[part.key], out / _part_figure(tier_name, part))
    # a report-only pass times nothing: state the runs' own worker time instead of a wall time
    meta.setdefault("runs_worker_time_s", round(sum(r["wall_time_s"]["total"] for r in runs if isinstance(r.get("wall_time_s"), dict)), 1))
    write_markdown(tier_name, races, summary, meta, out / f"quality_race_{tier_name}.md", parts)
    return out_json


def _part_figure(tier_name: str, part) -> str:
    return f"quality_race_{tier_name}_{part.figure_name or part.key}.png"


# ----------------------------------------------------------------------------------------------
# the markdown report
# ----------------------------------------------------------------------------------------------


def _fmt(s: dict) -> str:
    return f"{s['mean']:.3g} ± {s['std']:.2g} [{', '.join(f'{v:.3g}' for v in s['per_seed'])}]"


def _per_seed_speedups(sp: dict) -> str:
    """The seeds' speedups of :func:`benchmarks.race.steps_to_target.paired_speedups`, ``<x`` for a seed that
    did not reach the target (x its upper bound)."""
    return ", ".join(f"{p['speedup']:.2f}" if p["speedup"] is not None else f"<{p['speedup_upper_bound']:.2f}" for p in sp["per_seed"])


def command_lines(meta: dict) -> list[str]:
    """The results file's command lines: the last invocation that ran runs (a tier filled over several, with --only
    or --restore, says how the rest were made in its note) and, for a report-only one, the command that re-reported."""
    lines = [f"Command (the last invocation that ran; the note says how the rest were made): `{meta['command']}`  "]
    if meta.get("report_regenerated_with"):
        lines.append(f"Re-reported with: `{meta['report_regenerated_with']}`  ")
    return lines


def write_markdown(tier, races, summary, meta, path: Path, parts: tuple = ()):
    reading = ""
    if path.exists():
        old = path.read_text()
        if "\n## Reading" in old:
            reading = old[old.index("\n## Reading") :]
    L = [
        f"# Quality race — `{tier}` tier",
        "",
        *command_lines(meta),
        (
            f"Wall time: {meta['wall_time_s']:.0f} s with {meta['jobs']} job(s) × {meta['threads']} thread(s)"
            if meta.get("wall_time_s") is not None
            else f"Report only (no run here); the runs' worker time: {meta['runs_worker_time_s']:.0f} s"
        )
        + f"; load average at start/end {meta['load_start']} / {meta['load_end']}.  ",
        f"Figures: [`quality_race_{tier}_curves.png`](quality_race_{tier}_curves.png), "
        f"[`quality_race_{tier}_pi.png`](quality_race_{tier}_pi.png); data: [`quality_race_{tier}.json`](quality_race_{tier}.json).",
        "",
        "Inference: EMA weights of `checkpoint-N/unet_ema`; EDM path: `EDMEulerScheduler` (deterministic Euler, Karras σ), "
        f"{NUM_INFERENCE_STEPS} steps; one fixed sampling seed for every evaluation. Metric: Fréchet distance in the "
        "penultimate features of a small CNN trained once on the data set's training split, against the held-out split "
        "(lower is better). Binarized data: `fd_thresholded` (samples thresholded at 0.5) is the reported metric; "
        "`fd` (continuous samples as they are) is also given. DNA: Jensen-Shannon distance of the pooled k-mer "
        "distributions (k = 4..6, mean) against held-out sequences.",
        "",
    ]
    if meta.get("note"):
        L += [f"Note: {meta['note']}", ""]
    if meta.get("sizing"):
        L += [f"Sizing: {meta['sizing']}.", ""]
    if meta.get("reused_runs"):
        L += [
            f"Reused (same run id, training arguments and evaluation): {len(meta['reused_runs']['run_ids'])} runs from "
            f"{', '.join(meta['reused_runs']['from'])}.",
            "",
        ]
    L += [
        "## Summary",
        "",
        "Lower is better; speedup = steps the sampler needs to reach its own final quality / steps "
        "InfoNoise needs (paired by seed; `<x`: InfoNoise did not reach it within the budget, x is the upper bound).",
        "",
        summary_table(races, summary),
        "",
    ]
    for part in parts:
        if summary.get(part.key) and part.markdown:
            L += part.markdown(summary[part.key], _part_figure(tier, part))
    for race in races:
        if summary.get(race.name):
            L += _race_section(race, summary[race.name])
    L.append(reading.strip("\n") if reading else "## Reading\n\n(to be written)")
    path.write_text("\n".join(L) + "\n")


def _race_section(race, e: dict) -> list[str]:
    """The report's section of one race: inference, floors, jitter, classifier, the waste figure and the
    gate, the table of samplers and the speedups."""
    m = e["primary_metric"]
    L = [f"## {race.dataset} — {race.diffusion} path, budget {race.steps} steps, batch {race.batch_size}", ""]
    L.append(f"Inference: `{e['inference']}`, {NUM_INFERENCE_STEPS} steps, {race.num_samples} samples per evaluation.  ")
    fl = e.get("floor", {})
    if "train2000_vs_heldout" in fl:
        a_, b_ = fl["train2000_vs_heldout"], fl["heldout_half_vs_half"]
        L.append(
            f"Floors (real vs real): training subset (2000) vs held-out ({fl['sizes']['heldout']}) `js` **{a_['js']:.3g}**, "
            f"`fd` {a_['fd']:.3g}, `fd_k4` {a_['fd_k4']:.3g}; held-out halves `js` {b_['js']:.3g}, `fd` {b_['fd']:.3g}.  "
        )
    if "train_vs_heldout" in fl:
        L.append(
            f"Floors (real vs real, `fd`): train ({fl['sizes']['train']}) vs held-out ({fl['sizes']['heldout']}) "
            f"**{fl['train_vs_heldout']:.3g}**; train subset ({fl['sizes']['train_subset']}) vs held-out "
            f"{fl['train_subset_vs_heldout']:.3g}; held-out halves {fl['heldout_half_vs_half']:.3g}.  "
        )
    if e.get("jitter"):
        L.append(
            "Evaluation jitter: "
            + "; ".join(f"`{k}` std {v['mean_std']:.2g}" for k, v in e["jitter"].items() if isinstance(v, dict))
            + f" ({e['jitter']['how']}).  "
        )
    if e.get("classifier"):
        c = e["classifier"]
        L.append(
            f"Feature classifier: held-out accuracy {c['heldout_accuracy']:.3f} (train {c['train_accuracy']:.3f}), "
            f"{c['feature_dim']} features.  "
        )
    if e.get("base_mass_where_final_pi_below_1pct_of_peak"):
        w = e["base_mass_where_final_pi_below_1pct_of_peak"]
        w2 = e["base_mass_where_unfloored_pi_below_1pct_of_peak"]
        L.append(
            f"Mass of {race.baseline} draws where the final InfoNoise π is < 1% of its peak: {_fmt(w)}; "
            f"where the InfoNoise target before the floor mixing is: {_fmt(w2)}.  "
        )
        gates = {f"{g['source']} {g['pivot']}" + (f" ({g['reason']})" if g.get("reason") else "") for g in e["gate"].values()}
        L.append(f"Gate at the end of the InfoNoise runs: {'; '.join(sorted(gates))}.")
    cont = m == "fd_thresholded" and any("fd" in f for f in e["final"].values())
    L += [
        "",
        f"| sampler | final `{m}` mean ± std [seeds] | 25% | 50% | 100% | TV(φ, ρ̂) | π: std ln σ, σ 10–90% |"
        + (" final `fd` (continuous) |" if cont else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if cont else ""),
    ]
    for s in race.samplers:
        if s not in e["final"]:
            continue
        ab = e["at_budget"][s]
        tv = (e.get("tv_phi_rho") or {}).get(s)
        row = (
            f"| {s} | {_fmt(e['final'][s][m])} | "
            + " | ".join(f"{ab[k][m]['mean']:.3g} ± {ab[k][m]['std']:.2g}" for k in ("25%", "50%", "100%"))
            + " | "
            + (f"{tv['mean']:.2f}" if tv else "—")
            + " | "
        )
        wd = (e.get("pi_width") or {}).get(s)
        row += (f"{wd['std_log_sigma']['mean']:.2f}, {wd['sigma_q10']['mean']:.2g}–{wd['sigma_q90']['mean']:.2g}" if wd else "—") + " |"
        if cont:
            row += f" {_fmt(e['final'][s]['fd'])} |"
        L.append(row)
    L.append("")
    if e.get("curve"):
        L += _curve_table(e["curve"], m)
    for v, against in (e.get("variant_speedup_vs") or {}).items():
        cells = [
            f"vs `{b}` {'≤ ' if sp['num_not_reached'] else ''}**{sp['median']:.2f}** [{_per_seed_speedups(sp)}]"
            for b, sp in against.items()
        ]
        L.append(f"Steps-to-target speedup of `{v}` on `{m}`: " + "; ".join(cells) + ".  ")
    window = e.get("speedup_smoothing", 3)  # results files written before the setting smoothed over 3
    curves = "raw curves" if window == 1 else f"curves smoothed over {window} evaluations"
    for b, per_metric in e["speedup_vs"].items():
        for mm, sp in per_metric.items():
            seeds = ", ".join(
                (f"s{p['seed']}: {p['speedup']:.2f}" + ("≥" if p.get("speedup_is_lower_bound") else ""))
                if p["speedup"] is not None
                else f"s{p['seed']}: not reached (< {p['speedup_upper_bound']:.2f})"
                for p in sp["per_seed"]
            )
            med = f"{'≤ ' if sp['num_not_reached'] else ''}{sp['median']:.2f}"
            L.append(
                f"Steps-to-target speedup of InfoNoise vs `{b}` on `{mm}` (target: {b}'s own final quality, "
                f"{curves}): median **{med}** ({seeds}).  "
            )
    L.append("")
    return L


def _curve_table(c: dict, m: str) -> list[str]:
    """The learning curves at the evaluated steps: mean ± std per sampler, and on how many seeds InfoNoise is
    ahead of each other sampler (lower `m`)."""
    others = list(c["infonoise_ahead"])
    L = [f"Curves (`{m}` mean ± std over seeds at each evaluated step; InfoNoise ahead: seeds where its `{m}` is lower):", "",
         "| step | " + " | ".join(c["samplers"]) + " | " + " | ".join(f"InfoNoise ahead of {o}" for o in others) + " |",
         "|---|" + "---|" * (len(c["samplers"]) + len(others))]  # fmt: skip
    for i, st in enumerate(c["steps"]):
        cells = [f"{v[i]['mean']:.3g} ± {v[i]['std']:.2g}" for v in c["samplers"].values()]
        cells += [f"{c['infonoise_ahead'][o][i]['wins']}/{c['infonoise_ahead'][o][i]['seeds']}" for o in others]
        L.append(f"| {st} | " + " | ".join(cells) + " |")
    return L + [""]


def summary_table(races, summary) -> str:
    """One markdown table over the races: each sampler's final quality (mean ± std over seeds, n) and
    InfoNoise's steps-to-target speedup against it (median [per seed]); for README.md."""
    L = [
        "| data set (path, metric, budget) | sampler | final quality, mean ± std (n) | TV(φ, ρ̂) "
        "| InfoNoise speedup vs it: median [seeds] |",
        "|---|---|---|---|---|",
    ]
    for race in races:
        e = summary.get(race.name)
        if not e:
            continue
        m = e["primary_metric"]
        order = [race.infonoise_arm, race.baseline] + [x for x in race.samplers if x not in (race.infonoise_arm, race.baseline)]
        best = min(e["final"][x][m]["mean"] for x in order if x in e["final"])
        for i, x in enumerate(o for o in order if o in e["final"]):
            f = e["final"][x][m]
            q = f"{f['mean']:.3g} ± {f['std']:.2g} ({len(f['per_seed'])})"
            q = f"**{q}**" if f["mean"] == best else q
            sp = e["speedup_vs"].get(x, {}).get(m)
            if sp and sp["median"] is not None:
                cell = f"{'≤ ' if sp['num_not_reached'] > len(sp['per_seed']) / 2 else ''}{sp['median']:.2f} [{_per_seed_speedups(sp)}]"
            else:
                cell = "—"
            head = f"{race.dataset} ({race.diffusion}, `{m}`, {race.steps} steps)" if i == 0 else ""
            tv = (e.get("tv_phi_rho") or {}).get(x)
            tv = f"{tv['mean']:.2f}" if tv else "—"
            L.append(f"| {head} | {x}{' (baseline)' if x == race.baseline else ''} | {q} | {tv} | {cell} |")
    return "\n".join(L)
