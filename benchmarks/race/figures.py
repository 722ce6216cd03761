"""The quality race's figures (issue 6): quality against training steps, per race (:func:`plot_curves`),
and the final InfoNoise π of each race against its baseline's density (:func:`plot_pi`)."""

from __future__ import annotations

import math

import numpy as np

from benchmarks.race.allocation_metrics import base_density


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _panel_grid(plt, n: int, width: float, height: float):
    """A figure of ``n`` panels, at most 3 a row; the unused cells are blank. Returns the figure and the panels' axes."""
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    return fig, axes.ravel()[:n]


def _save(plt, fig, path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_curves(races, runs, summary, path):
    """Each race's primary metric (and ``fd`` beside ``fd_thresholded``) against optimizer steps: per
    sampler the mean over seeds, the min–max band and each seed; the train-vs-held-out floor."""
    plt = _pyplot()
    panels = []
    for race in races:
        if race.name not in summary:
            continue
        metric = summary[race.name]["primary_metric"]
        panels.append((race, metric))
        if metric == "fd_thresholded" and any("fd" in f for f in summary[race.name]["final"].values()):
            panels.append((race, "fd"))  # the continuous samples' FD beside (not measured at a scale > 1)
    if not panels:
        return
    fig, axes = _panel_grid(plt, len(panels), 4.6, 3.6)
    for ax, (race, metric) in zip(axes, panels):
        entry = summary[race.name]
        for i, s in enumerate(race.samplers):
            lst = [r for r in runs if r["race"] == race.name and r["sampler"] == s]
            if not lst:
                continue
            steps = np.array(lst[0]["steps"])
            vals = np.array([r["quality"][metric] for r in lst if r["steps"] == list(steps)])
            color = "C3" if s == race.infonoise_arm else f"C{i % 10 if i % 10 != 3 else 9}"
            ax.plot(steps, vals.mean(0), color=color, lw=2, label=f"{s} (n={len(vals)})")
            ax.fill_between(steps, vals.min(0), vals.max(0), color=color, alpha=0.2)
            for v in vals:
                ax.plot(steps, v, color=color, lw=0.6, alpha=0.6)
        floor = entry.get("floor", {})
        f = floor.get("train_vs_heldout")
        if isinstance(f, (int, float)):
            ax.axhline(f, color="k", ls="--", lw=1, label=f"floor train vs held-out {f:.3g}")
        jit = entry.get("jitter", {}).get(metric)
        title = f"{race.dataset} ({race.diffusion}) · {metric}"
        if jit:
            title += f"\njitter (std) {jit['mean_std']:.2g}"
        ax.set_title(title, fontsize=9)
        ax.set_yscale("log")
        ax.set_xlabel("optimizer steps")
        ax.set_ylabel(metric + " (lower is better)")
        ax.legend(fontsize=7)
    fig.suptitle("quality vs training steps (EMA weights; EDM Euler 18 steps; mean, min–max band and seeds)", fontsize=10)
    _save(plt, fig, path)


def plot_pi(races, runs, path):
    """Each race's final InfoNoise π per seed (density per unit log σ) with ρ̂ and the gate's pivot,
    against the baseline's density (and EDM log-normal's on the EDM path). Only the race's ``infonoise_arm``'s runs
    are drawn when the race has them, else one arm's (a tier's InfoNoise variants would otherwise pass for more seeds
    of it)."""
    plt = _pyplot()
    import torch

    panels = [race for race in races if any(r["race"] == race.name and r.get("schedule") for r in runs)]
    if not panels:
        return
    fig, axes = _panel_grid(plt, len(panels), 4.8, 3.4)
    for ax, race in zip(axes, panels):
        lst = sorted([r for r in runs if r["race"] == race.name and r.get("schedule")], key=lambda r: r["seed"])
        lst = [r for r in lst if r["sampler"] == race.infonoise_arm] or [r for r in lst if r["sampler"] == lst[0]["sampler"]]
        edges = np.asarray(lst[0]["schedule"]["edges"])
        centres = (edges[1:] + edges[:-1]) / 2
        x = torch.linspace(edges[0], edges[-1], 400, dtype=torch.float64)
        extra = (("edm_lognormal", ":"),) if race.baseline != "edm_lognormal" and race.diffusion == "edm" else ()
        for name, style in ((race.baseline, "--"),) + extra:
            dens = torch.exp(base_density(race, name).log_prob(x)).numpy()
            ax.plot(x.numpy(), dens, color="k", ls=style, lw=1.2, label=f"{name} (base)")
        for r in lst:
            pi = np.asarray(r["schedule"]["pi"]) / np.diff(edges)
            ax.step(
                centres,
                pi,
                where="mid",
                color="C3",
                lw=1.2,
                alpha=0.8,
                label=f"{r['sampler']}: final π, seeds {', '.join(str(q['seed']) for q in lst)}" if r is lst[0] else None,
            )
        rho = lst[0]["schedule"].get("rho_hat")
        if rho:
            ax.plot(centres, rho, color="C0", lw=1, alpha=0.8, label=f"ρ̂ (seed {lst[0]['seed']})")
        gate = lst[0]["schedule"].get("gate") or {}
        if gate.get("pivot"):
            ax.axvline(math.log(gate["pivot"]), color="C0", ls=":", lw=1, label=f"gate c={gate['pivot']:.3g} ({gate.get('source')})")
        ax.set_title(f"{race.dataset} ({race.diffusion}) after {lst[0]['schedule'].get('optimizer_steps')} steps", fontsize=9)
        ax.set_xlabel("log σ (VE)")
        ax.set_ylabel("density per unit log σ")
        ax.legend(fontsize=7)
    _save(plt, fig, path)
