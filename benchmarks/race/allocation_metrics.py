"""How a quality-race run allocates its training noise levels (issues 6 and 10): measures of its draw
density π on the bins of an InfoNoise schedule — TV(φ, ρ̂) between its effective allocation φ = π·w
and the schedule's final ρ̂ (:func:`allocation_tv`, METHOD.md §5), the width of π
(:func:`allocation_width`) and the baseline's mass where InfoNoise's π is negligible
(:func:`base_mass_where_pi_small`, METHOD.md §7). Schedules are the ``schedule`` records of the run
results (:func:`benchmarks.race.harness.stored_schedule`)."""

from __future__ import annotations

import numpy as np

from benchmarks.race.arms import parse_arm, run_arm
from benchmarks.race.races import Race, train_scheduler


def base_density(race: Race, sampler_name: str):
    """The density an arm draws from on the race's path (a fixed density with its explicit parameters,
    ``logit_normal@mean=-2``; an adaptive sampler's: its base density)."""
    from diffusers_infonoise import make_sampler

    arm = parse_arm(sampler_name)
    return make_sampler(arm.name, train_scheduler(race), **dict(arm.params)).density


def _infonoise_sampler(race: Race, num_bins: int):
    """The library's InfoNoise sampler on the race's path with ``num_bins`` bins (its grid and base masses)."""
    from diffusers_infonoise import make_sampler

    return make_sampler("infonoise", train_scheduler(race), num_bins=num_bins)


def base_mass_where_pi_small(schedule: dict, race: Race, *, unfloored: bool = False) -> float:
    """METHOD.md §7's waste figure: the mass of the baseline's density (EDM log-normal on the EDM path)
    in the bins where the final InfoNoise π is below 1% of its peak density. ``unfloored``: use the
    InfoNoise target before the floor mixing, ``(π − η·π_base)/(1 − η)`` (the floor alone keeps π
    above 1% of its peak wherever the base has mass)."""
    import torch

    from diffusers_infonoise.densities import bin_masses

    edges = torch.tensor(schedule["edges"], dtype=torch.float64)
    masses = np.asarray(schedule["pi"], float)
    if unfloored and (schedule["hyperparameters"].get("floor_space") or "pi") == "pi":
        eta = float(schedule["hyperparameters"]["floor"])
        own_base = _infonoise_sampler(race, len(masses)).base_masses.numpy()
        masses = np.clip((masses - eta * own_base) / (1 - eta), 0.0, None)
    elif unfloored and schedule.get("rho_hat"):  # φ-space floor: the target before mixing is ρ̂/w
        masses = np.asarray(schedule["rho_hat"], float) * np.diff(_schedule_edges(race, schedule)) / _x0_weight(race, schedule)
    pi = masses / np.diff(schedule["edges"])
    base = bin_masses(base_density(race, race.baseline), edges).numpy()
    base = base / base.sum()
    return float(base[pi < 0.01 * pi.max()].sum())


def _schedule_edges(race: Race, schedule: dict) -> np.ndarray:
    """A stored schedule's log-σ bin edges (rebuilt from the path's grid where a results file left them out)."""
    if schedule.get("edges"):
        return np.asarray(schedule["edges"], float)
    return _infonoise_sampler(race, len(schedule["pi"])).edges.numpy()


def _x0_weight(race: Race, schedule: dict) -> np.ndarray:
    """w(σ) of the run's loss (METHOD.md §4) at the centres of a stored schedule's bins (the library's)."""
    import torch

    from diffusers_infonoise import make_sampler

    edges = _schedule_edges(race, schedule)
    centres = torch.from_numpy(0.5 * (edges[1:] + edges[:-1]))
    ref = make_sampler(
        "uniform", train_scheduler(race), prediction_type=schedule["prediction_type"], loss_weighting=schedule["loss_weighting"]
    )
    return ref.objective.x0_loss_weight(torch.exp(centres), sigma_data=ref.sigma_data).numpy()


def _run_pi(race: Race, run: dict, edges: np.ndarray) -> np.ndarray:
    """A run's π masses on the bins ``edges``: its stored final π (an InfoNoise run, on its own bins; another adaptive
    sampler's from its last checkpoint, ``final_pi``), else its fixed (or not yet adapted adaptive sampler's base) density's
    (a ``#recommended`` arm's as resolved, :func:`~benchmarks.race.arms.run_arm`)."""
    import torch

    from diffusers_infonoise.densities import bin_masses

    own = (run.get("schedule") or {}).get("pi") or (run.get("final_pi") or {}).get("pi")
    if own and len(own) == len(edges) - 1:
        return np.asarray(own, float)
    return bin_masses(base_density(race, run_arm(run)), torch.from_numpy(np.asarray(edges, float))).numpy()


def _adaptive_without_schedule(run: dict) -> bool:
    """An adaptive sampler other than InfoNoise (Kingma & Gao, the loss slope) whose final π was not recorded
    (runs before ``final_pi``): it is unknown, and its base density would stand in for it wrongly."""
    return parse_arm(run["sampler"]).kind == "adaptive" and not (run.get("schedule") or {}).get("pi") and not run.get("final_pi")


def allocation_tv(race: Race, run: dict, reference: dict | None) -> float | None:
    """TV(φ, ρ̂) of a run (METHOD.md §5's check): its effective allocation φ = π·w on the bins of an
    InfoNoise schedule against that schedule's final ρ̂. An InfoNoise run is measured against its own ρ̂ (with an
    importance target space, φ = π·w times the per-sample factor: the TV its schedule records); a fixed density
    against ``reference``, the InfoNoise run of the same race and seed."""
    from diffusers_infonoise.sampler.infonoise import IMPORTANCE_TARGET_SPACES

    own = run.get("schedule") or {}
    if _adaptive_without_schedule(run):
        return None
    if own.get("rho_hat") and (own.get("hyperparameters") or {}).get("target_space") in IMPORTANCE_TARGET_SPACES:
        # the loss's per-sample factor makes φ = ρ̂^τ (METHOD.md §4.1), which π·w alone does not show: the library's
        # own measure, stored with the schedule
        return own.get("tv_phi_rho")
    ref = own if own.get("rho_hat") else reference
    if not ref or not ref.get("rho_hat"):
        return None
    edges = _schedule_edges(race, ref)
    rho = np.asarray(ref["rho_hat"], float) * np.diff(edges)
    phi = _run_pi(race, run, edges) * _x0_weight(race, ref)
    return 0.5 * float(np.abs(phi / phi.sum() - rho / rho.sum()).sum())


def allocation_width(race: Race, run: dict, reference: dict | None) -> dict | None:
    """How wide a run's draw density π is (the issue's "how wide the adapted π is next to the best fixed
    density"): the std of ln σ under π and its 10%/90% VE-σ quantiles, on the bins of its own InfoNoise
    schedule, or of ``reference`` (the same seed's InfoNoise run) for a fixed density."""
    own = run.get("schedule") or {}
    if _adaptive_without_schedule(run):
        return None
    ref = own if own.get("pi") else reference
    if not ref:
        return None
    edges = _schedule_edges(race, ref)
    pi = _run_pi(race, run, edges)
    pi = pi / pi.sum()
    centres = 0.5 * (edges[1:] + edges[:-1])
    mean = float((pi * centres).sum())
    cdf = np.concatenate([[0.0], np.cumsum(pi)])
    q10, q90 = (float(np.exp(np.interp(q, cdf, edges))) for q in (0.1, 0.9))
    return {"std_log_sigma": float(np.sqrt((pi * (centres - mean) ** 2).sum())), "sigma_q10": q10, "sigma_q90": q90}
