"""The margin study's second look at the finished runs of the quality race's ``margin`` tier (issue 24).

For every run of a race with kept checkpoints (the 4x-budget races):

* **Evaluation.** The final EMA model scored again with other inference samplers: EDM Heun (Karras et al.'s
  Algorithm 1, Karras σ with ρ = 7, 18 steps = NFE 35), Euler at NFE 8 on the Karras spacing, and Euler at NFE 8 on
  the model's InfoGrid (METHOD.md §8: the stored schedule of an InfoNoise run, the offline profile of the final model
  for a fixed-density run; density ``q_sigma``). The race's own Euler NFE 18 score is in its result.
* **Estimate noise.** For the InfoNoise runs, the online π at every kept checkpoint's step (``schedule/history.jsonl``)
  against the π that the offline profile of that checkpoint's raw model gives (``profile_from_model`` on held-out
  data, on the sampler's own 64 bins, through the same estimator settings, gate, cap and floor): their TV, next to
  the TV between consecutive online refreshes (how much π still moves).

Writes ``benchmarks/results/margin_eval.json`` and ``.md`` (the exact command and seeds in both).

    python -m benchmarks.margin_eval --root benchmarks/results/quality_race_margin --jobs 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from benchmarks import RESULTS
from benchmarks.race.data import DATASETS, load_data
from benchmarks.race.tiers import EVAL_SEED, tier_races

PROBE = 512  # held-out samples of an offline profile
HEUN_STEPS = 18  # Karras et al.: NFE 2·18 − 1 = 35
LOW_NFE = 8


def heun_sample(unet, scheduler, n: int, *, steps: int, generator, sample_batch: int):
    """EDM's deterministic Heun sampler (Karras et al. 2022, Algorithm 1) through the package's one model call
    (D from ``generation.model_output``): ``steps`` Karras σ (ρ = 7) then 0; NFE ``2·steps − 1``."""
    import torch

    from diffusers_infonoise.generation import is_1d_model, model_output

    cfg, device = unet.config, next(unet.parameters()).device
    size = (cfg.sample_size,) if is_1d_model(unet) else (cfg.sample_size, cfg.sample_size)
    lo, hi, rho = float(scheduler.config.sigma_min), float(scheduler.config.sigma_max), 7.0
    ramp = torch.linspace(0, 1, steps, dtype=torch.float64)
    sig = (hi ** (1 / rho) + ramp * (lo ** (1 / rho) - hi ** (1 / rho))) ** rho
    sig = torch.cat([sig, torch.zeros(1, dtype=torch.float64)])
    out = []
    for i in range(0, n, sample_batch):
        b = min(sample_batch, n - i)
        x = torch.randn((b, cfg.in_channels, *size), generator=generator, dtype=torch.float64).to(device) * sig[0]

        def denoise(x, s):
            level = torch.full((b,), float(s), dtype=torch.float64, device=device)
            return model_output(unet, scheduler, x.float(), 0.25 * torch.log(level).float(), level.float()).double()

        with torch.no_grad():
            for j in range(steps):
                s, s_next = sig[j], sig[j + 1]
                d = (x - denoise(x, s)) / s
                x_next = x + (s_next - s) * d
                if s_next > 0:  # the second-order correction
                    d2 = (x_next - denoise(x_next, s_next)) / s_next
                    x_next = x + (s_next - s) * 0.5 * (d + d2)
                x = x_next
        out.append(((x.float().clamp(-1, 1) + 1) / 2).cpu())
    return torch.cat(out)


def euler_sample(unet, scheduler, n: int, *, steps: int | None = None, sigmas=None, generator, sample_batch: int):
    import torch

    from diffusers_infonoise.generation import generate_images

    out = []
    for i in range(0, n, sample_batch):
        b = min(sample_batch, n - i)
        out.append(generate_images(unet, scheduler, b, num_inference_steps=steps or LOW_NFE, sigmas=sigmas, generator=generator).cpu())
    return torch.cat(out)


def _probe(dataset: str, n: int):
    """``n`` held-out samples in the model's space ({-1, 1} images, or one-hot DNA in {-1, 1}): (N, C, ...) float32."""
    import torch

    from benchmarks import dna as DNA

    data = load_data(dataset)
    held = data["heldout"][:n]
    if DATASETS[dataset].kind == "dna":
        from diffusers_infonoise.data import one_hot_sequences

        return one_hot_sequences(list(held), DNA.ALPHABET).float()
    x = torch.as_tensor(np.asarray(held, dtype=np.float32) / 127.5 - 1.0)
    return x[:, None]


def offline_profile(unet, scheduler, probe, sampler, *, seed: int):
    """The offline profile of ``unet`` on the sampler's bin centres, and the π the sampler's settings give from it."""
    import torch

    from diffusers_infonoise.diagnostics import profile_from_model

    centres = torch.exp(sampler.estimator.centers)
    prof = profile_from_model(
        unet.eval(), scheduler, probe, sigmas=centres, prediction_type="sample", loss_weighting="edm", num_noise_draws=2,
        batch_size=256, generator=torch.Generator().manual_seed(seed), progress=False,
    )  # fmt: skip
    return prof


def pi_from_m_hat(sampler, m_hat):
    """π (bin masses) that ``sampler``'s settings give from an x0-error profile on its bins (one β = 0 estimate)."""
    import torch

    sampler.estimator.m_hat = torch.as_tensor(m_hat, dtype=torch.float64).clone()
    return sampler._build_probs()


def _load_run(result_path: str, threads: int) -> SimpleNamespace:
    """A finished run of the margin tier: its result, race, folder, final EMA model, the EDM scheduler it is
    sampled with, its scorer and the held-out probe of its data set."""
    import torch
    from diffusers import EDMEulerScheduler, UNet1DModel, UNet2DModel

    from benchmarks.race.sample_quality import Scorer

    torch.set_num_threads(threads)
    r = json.loads(Path(result_path).read_text())
    race = next(x for x in tier_races("margin") if x.name == r["race"])
    out_dir = Path(result_path).with_suffix("")
    cls = UNet1DModel if DATASETS[race.dataset].kind == "dna" else UNet2DModel
    return SimpleNamespace(
        result=r, race=race, out_dir=out_dir, cls=cls, unet=cls.from_pretrained(out_dir / "unet").eval(),
        sched=EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5, prediction_type="epsilon"),
        scorer=Scorer(race.dataset), probe=_probe(race.dataset, PROBE),
    )  # fmt: skip


def _generator():
    import torch

    return torch.Generator().manual_seed(EVAL_SEED)  # common random numbers across runs and samplers


def evaluate_run(job) -> dict:
    """Re-evaluate one finished run (a worker's job ``(result_path, threads)``)."""
    from diffusers_infonoise import InfoNoiseTrainingTimestepSampler, infogrid, read_schedule

    run = _load_run(*job)
    r, race, out_dir, unet, sched, scorer = run.result, run.race, run.out_dir, run.unet, run.sched, run.scorer
    stored = read_schedule(json.loads((out_dir / "scheduler" / "scheduler_config.json").read_text()))
    t0 = time.time()
    n, batch = race.num_samples, race.sample_batch
    scores = {"heun_nfe35": scorer.score(heun_sample(unet, sched, n, steps=HEUN_STEPS, generator=_generator(), sample_batch=batch))}
    scores["euler_karras_nfe8"] = scorer.score(euler_sample(unet, sched, n, steps=LOW_NFE, generator=_generator(), sample_batch=batch))
    if stored is not None:
        grid, source = infogrid(InfoNoiseTrainingTimestepSampler.from_stored(_carrying(sched, stored)), LOW_NFE), "stored"
    else:
        grid, source = _offline_grid(unet, sched, run.probe), "offline"
    scores["euler_infogrid_nfe8"] = scorer.score(euler_sample(unet, sched, n, sigmas=grid, generator=_generator(), sample_batch=batch))
    entry = {"run_id": r["run_id"], "race": r["race"], "dataset": r["dataset"], "sampler": r["sampler"], "seed": r["seed"],
             "primary_metric": scorer.primary, "euler_nfe18": {k: v[-1] for k, v in r["quality"].items()},
             "scores": {k: {m: float(v) for m, v in s.items()} for k, s in scores.items()}, "infogrid_source": source,
             "infogrid_sigmas": [round(float(s), 5) for s in grid.sigmas]}  # fmt: skip
    if stored is not None:
        entry.update(_offline_grid_score(run))
    if stored is not None and (out_dir / "schedule" / "history.jsonl").exists():
        entry["online_vs_offline"] = online_vs_offline(out_dir, stored, sched, run.probe, run.cls)
    entry["seconds"] = round(time.time() - t0, 1)
    return entry


def _offline_grid(unet, sched, probe):
    """The NFE-8 InfoGrid of the offline profile of ``unet`` (64 levels, 2 noise draws per held-out sample)."""
    import torch

    from diffusers_infonoise import infogrid
    from diffusers_infonoise.diagnostics import profile_from_model

    prof = profile_from_model(unet, sched, probe, num_levels=64, prediction_type="sample", loss_weighting="edm",
                              num_noise_draws=2, batch_size=256, generator=torch.Generator().manual_seed(0), progress=False)  # fmt: skip
    return infogrid(prof, LOW_NFE)


def _offline_grid_score(run: SimpleNamespace) -> dict:
    """The control of an InfoNoise run's InfoGrid row: its final model sampled (Euler, NFE 8) on the InfoGrid of its
    own offline profile, the source the fixed-density rows' grids come from, instead of its stored schedule."""
    grid = _offline_grid(run.unet, run.sched, run.probe)
    x = euler_sample(run.unet, run.sched, run.race.num_samples, sigmas=grid, generator=_generator(),
                     sample_batch=run.race.sample_batch)  # fmt: skip
    return {"run_id": run.result["run_id"], "euler_offline_infogrid_nfe8": {m: float(v) for m, v in run.scorer.score(x).items()},
            "offline_infogrid_sigmas": [round(float(s), 5) for s in grid.sigmas]}  # fmt: skip


def offline_grid_control(job) -> dict:
    """:func:`_offline_grid_score` of one finished run (a worker's job ``(result_path, threads)``)."""
    return _offline_grid_score(_load_run(*job))


def online_vs_offline(out_dir: Path, stored: dict, sched, probe, cls) -> list[dict]:
    """At each kept checkpoint N: TV between the online π of the refresh at N and the π of the offline profile of
    checkpoint N's raw model, and the TV between that online π and the one of the refresh before it."""

    from diffusers_infonoise import InfoNoiseTrainingTimestepSampler

    history = {}
    for line in (out_dir / "schedule" / "history.jsonl").read_text().splitlines():
        h = json.loads(line)
        history[h["step"]] = np.asarray(h["probs"], dtype=np.float64)
    rows = []
    for ck in sorted(out_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1])):
        step = int(ck.name.split("-")[1])
        if step not in history:
            continue
        sampler = InfoNoiseTrainingTimestepSampler.from_stored(_carrying(sched, stored))
        unet = cls.from_pretrained(ck / "unet").eval()
        prof = offline_profile(unet, sched, probe, sampler, seed=step)
        offline = pi_from_m_hat(sampler, prof.mmse).numpy()
        online = history[step]
        prev = max((s for s in history if s < step), default=None)
        rows.append({
            "step": step, "tv_online_offline": 0.5 * float(np.abs(online - offline).sum()),
            "tv_online_previous_refresh": None if prev is None else 0.5 * float(np.abs(online - history[prev]).sum()),
            "offline_pi_std_ln_sigma": _std_ln_sigma(sampler, offline), "online_pi_std_ln_sigma": _std_ln_sigma(sampler, online),
        })  # fmt: skip
        del unet
    return rows


def _carrying(sched, stored: dict):
    """A copy of ``sched`` whose config carries the stored schedule ``stored``."""
    return type(sched).from_config({**sched.config, "_infonoise_schedule": stored})


def _std_ln_sigma(sampler, probs) -> float:
    c = sampler.estimator.centers.numpy()
    p = np.asarray(probs) / np.sum(probs)
    mean = float((p * c).sum())
    return math.sqrt(float((p * (c - mean) ** 2).sum()))


def write_report(entries: list[dict], path: Path, command: str) -> None:
    lines = ["# Margin study: the 4x-budget models under other inference samplers, and online vs offline π", "",
             f"Command: `{command}`  ", f"Sampling seed {EVAL_SEED} for every evaluation (common random numbers); "
             f"{PROBE} held-out samples per offline profile (2 noise draws each).", ""]  # fmt: skip
    by_race: dict = {}
    for e in entries:
        by_race.setdefault(e["race"], []).append(e)
    for race, es in by_race.items():
        m = es[0]["primary_metric"]
        header = "| sampler | Euler NFE 18 (race) | Heun NFE 35 | Euler Karras NFE 8 | Euler InfoGrid NFE 8 |"
        lines += [f"## {race} (`{m}`, lower is better; mean over seeds [per seed])", "", header, "|---|---|---|---|---|"]
        for s in sorted({e["sampler"] for e in es}):
            rows = sorted([e for e in es if e["sampler"] == s], key=lambda e: e["seed"])

            def cell(vals):
                return f"{np.mean(vals):.3g} [{', '.join(f'{v:.3g}' for v in vals)}]"

            lines.append(f"| {s} | {cell([e['euler_nfe18'][m] for e in rows])} | "
                         f"{cell([e['scores']['heun_nfe35'][m] for e in rows])} | "
                         f"{cell([e['scores']['euler_karras_nfe8'][m] for e in rows])} | "
                         f"{cell([e['scores']['euler_infogrid_nfe8'][m] for e in rows])} ({rows[0]['infogrid_source']}) |")  # fmt: skip
        lines += _rankings(es, m)
        ovo = [e for e in es if e.get("online_vs_offline")]
        if ovo:
            lines += ["", "Online π vs the π of the offline profile of the same checkpoint (TV on the 64 bins):", "",
                      "| seed | step | TV(online, offline) | TV(online, previous refresh) | std ln σ online / offline |",
                      "|---|---|---|---|---|"]  # fmt: skip
            for e in ovo:
                for row in e["online_vs_offline"]:
                    prev = "—" if row["tv_online_previous_refresh"] is None else f"{row['tv_online_previous_refresh']:.3f}"
                    lines.append(f"| {e['seed']} | {row['step']} | {row['tv_online_offline']:.3f} | {prev} | "
                                 f"{row['online_pi_std_ln_sigma']:.2f} / {row['offline_pi_std_ln_sigma']:.2f} |")  # fmt: skip
        lines.append("")
    path.write_text("\n".join(lines) + "\n")


def _rankings(es: list[dict], m: str) -> list[str]:
    """Per inference sampler, the samplers' order by mean ``m``, InfoNoise against logit-normal seed by seed, and
    the end-to-end row: InfoNoise on its own InfoGrid at NFE 8 against logit-normal on the Karras steps at NFE 8."""
    cols = {"Euler NFE 18": lambda e: e["euler_nfe18"][m], "Heun NFE 35": lambda e: e["scores"]["heun_nfe35"][m],
            "Euler Karras NFE 8": lambda e: e["scores"]["euler_karras_nfe8"][m],
            "Euler InfoGrid NFE 8": lambda e: e["scores"]["euler_infogrid_nfe8"][m]}  # fmt: skip
    by = {s: {e["seed"]: e for e in es if e["sampler"] == s} for s in sorted({e["sampler"] for e in es})}
    out = [""]
    for name, get in cols.items():
        order = sorted(by, key=lambda s: np.mean([get(e) for e in by[s].values()]))
        line = f"{name}: order " + " < ".join(order)
        if "infonoise" in by and "logit_normal" in by:
            seeds = sorted(set(by["infonoise"]) & set(by["logit_normal"]))
            wins = sum(get(by["infonoise"][k]) < get(by["logit_normal"][k]) for k in seeds)
            line += f"; InfoNoise below logit-normal on {wins}/{len(seeds)} seeds"
        out.append(line + ".  ")
    if "infonoise" in by and "logit_normal" in by:
        seeds = sorted(set(by["infonoise"]) & set(by["logit_normal"]))
        a = [by["infonoise"][k]["scores"]["euler_infogrid_nfe8"][m] for k in seeds]
        b = [by["logit_normal"][k]["scores"]["euler_karras_nfe8"][m] for k in seeds]
        wins = sum(x < y for x, y in zip(a, b))
        ctrl = [by["infonoise"][k].get("euler_offline_infogrid_nfe8", {}).get(m) for k in seeds]
        if all(c is not None for c in ctrl):
            own = [by["infonoise"][k]["scores"]["euler_infogrid_nfe8"][m] for k in seeds]
            ln = [by["logit_normal"][k]["scores"]["euler_infogrid_nfe8"][m] for k in seeds]
            out.append(f"Control, InfoGrid NFE 8 from the same source (an offline profile of the final model): InfoNoise "
                       f"{np.mean(ctrl):.3g} [{', '.join(f'{v:.3g}' for v in ctrl)}] (on its stored schedule's grid "
                       f"{np.mean(own):.3g}) against logit-normal {np.mean(ln):.3g}; InfoNoise lower on "
                       f"{sum(x < y for x, y in zip(ctrl, ln))}/{len(seeds)} seeds.  ")  # fmt: skip
        out.append(f"End to end at NFE 8 (InfoNoise on its own InfoGrid against logit-normal on Karras steps): "
                   f"{np.mean(a):.3g} [{', '.join(f'{v:.3g}' for v in a)}] against {np.mean(b):.3g} "
                   f"[{', '.join(f'{v:.3g}' for v in b)}]; InfoNoise lower on {wins}/{len(seeds)} seeds.")  # fmt: skip
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=str(RESULTS / "quality_race_margin"), help="the margin tier's run folder")
    p.add_argument("--races", default="m4x-edm-binarized_mnist16,m4x-edm-dna64")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(RESULTS / "margin_eval"))
    p.add_argument("--add_offline_grid", action="store_true",
                   help="only add the offline-profile InfoGrid control to the InfoNoise runs of an existing --out JSON")  # fmt: skip
    args = p.parse_args(argv)
    os.environ.setdefault("TQDM_DISABLE", "1")
    races = set(args.races.split(","))
    todo = sorted(str(f) for f in (Path(args.root) / "runs").glob("*.json") if f.name.split("__")[0] in races)
    import multiprocessing as mp

    command = "python -m benchmarks.margin_eval " + " ".join(a for a in (argv or sys.argv[1:]))
    out = Path(args.out)
    if args.add_offline_grid:
        doc = json.loads(out.with_suffix(".json").read_text())
        entries, runs = doc["runs"], Path(args.root) / "runs"
        need = [e for e in entries if e["infogrid_source"] == "stored" and "euler_offline_infogrid_nfe8" not in e]
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            jobs = [(str(runs / f"{e['run_id']}.json"), args.threads) for e in need]
            added = {c["run_id"]: c for c in pool.imap(offline_grid_control, jobs)}
        for e in entries:
            e.update(added.get(e["run_id"], {}))
        command = f"{doc['command']}`, then `{command}"
    else:
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            entries = list(pool.imap(evaluate_run, [(f, args.threads) for f in todo]))
    out.with_suffix(".json").write_text(json.dumps({"command": command, "runs": entries}, indent=1))
    write_report(entries, out.with_suffix(".md"), command)
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
