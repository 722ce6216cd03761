"""Tests for ``diagnostics.recommend`` and ``infonoise recommend`` (docs/METHOD.md §6.1, issues 32 and 48).

The fit is KL(π*‖π_θ) in closed form (issue 48; it replaced the TV(φ, ρ̂) search of issue 32, so every expected value
below changed by design): π* = ρ̂/w on the cells, a normal in ln σ takes π*'s mean and variance with Sheppard's
correction (grouped variance − h²/12, floored at h²/12), a shift of a base the base's location statistic, a range
π*'s 1%-99% quantiles. The expected values are computed here from those definitions by hand (two cells, a normal
binned exactly on the cells, a uniform π*), never read from the code under test.

Targets built from point values: a stored schedule (or a profile) whose ρ̂ is ``π_θ·w`` at the grid's centres for a
member θ, with ``w`` written out from METHOD.md §4 (flow velocity ``((1 + σ)/σ)²``, EDM ``(σ² + σ_d²)/(σ·σ_d)²``). Then
π* holds point values of π_θ: the cell masses are ``h·π_θ(c_k)``, whose mean and variance are π_θ's to far below the
4 significant digits printed (the midpoint rule on a normal's infinite grid errs by exp(−2π²s²/h²)), so the fitted std
is ``sqrt(s² − h²/12)`` (Sheppard) and the mean is m, each within 1e-3 (the rounding) plus the tail cut at the grid's ends.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import warnings

import pytest
import torch
from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

from benchmarks.tiny_pipelines import tiny_unet2d
from diffusers_infonoise import densities, make_sampler
from diffusers_infonoise.cli import main
from diffusers_infonoise.diagnostics import (
    allocation_tv,
    analytic_mmse_gaussian,
    draw_moments,
    draw_tv,
    log_sigma_grid,
    loss_variance_ratio,
    profile_from_errors,
    recommend_fixed_density,
    recommend_parameters,
    target_from_profile,
    total_variation,
)
from diffusers_infonoise.diagnostics.recommend import RecommendTarget, family_density, fitted_parameters
from diffusers_infonoise.paths import FlowPath, path_from_scheduler
from diffusers_infonoise.schedule_io import read_schedule

from helpers.cli import assert_one_line_error, run, save_before_adapting


def normal_pdf(x, m, s):
    return torch.exp(-0.5 * ((x - m) / s) ** 2) / (s * math.sqrt(2 * math.pi))


def flow_velocity_w(sig):
    return ((1 + sig) / sig) ** 2  # METHOD.md §4: unweighted flow velocity, w = 1/s²


def edm_w(sig, sd=0.5):
    return (sig**2 + sd**2) / (sig * sd) ** 2  # METHOD.md §4: EDM's λ(σ)


def errors_for(sig, rho_shape):
    """x0 errors whose ``m̂/σ²`` is proportional to ``rho_shape``, scaled so that ``m̂ ≤ σ²`` (the Bayes bound of
    METHOD.md §5.10: no predictor is worse than the identity's σ²); ρ̂ is normalised, so the scale does not change it."""
    return sig**2 * rho_shape / rho_shape.max()


def stored_schedule(scheduler, pi_of_log_sigma, w_of_sigma, *, prediction_type, loss_weighting, num_bins=64, refreshes=3):
    """A schedule stored the way a run stores it, whose measured x0 errors make ρ̂ = m̂/σ² (no gate, no smoothing)
    proportional to ``π·w`` at the bin centres: its draw density π* ∝ ρ̂/w is π's. ``refreshes`` refreshes of π
    (a fit needs 3: METHOD.md §6.1)."""
    s = make_sampler(
        "infonoise",
        scheduler,
        prediction_type=prediction_type,
        loss_weighting=loss_weighting,
        gate=None,
        smoothing=0.0,
        mmse_cap=None,  # these "errors" are the target's by construction, not a model's
        warmup_steps=0,
        num_bins=num_bins,
    )
    x = s.estimator.centers
    sig = torch.exp(x)
    s.estimator.accumulate(x, errors_for(sig, pi_of_log_sigma(x) * w_of_sigma(sig)))
    for _ in range(refreshes):
        assert s._refresh_now(ema_decay=0.0, min_count=1)
    s.save_to_scheduler(scheduler)
    return read_schedule(scheduler), float(x[1] - x[0])


def numbers_after(flags: str, name: str) -> float:
    return float(re.search(re.escape(name) + r"[\" :]+(-?[0-9.e+-]+)", flags).group(1))


def sheppard_std(s, h):
    return math.sqrt(s * s - h * h / 12)


def target_of_masses(path, masses, w=None, **kw):
    """A target on the path's uniform grid of ``len(masses)`` cells whose π* has exactly these cell masses: ρ̂ ∝
    masses·w/h (π* = ρ̂/w)."""
    x = log_sigma_grid(path, masses.numel())
    w = torch.ones_like(x) if w is None else w
    h = float(x[1] - x[0])
    rho = masses * w / h
    return RecommendTarget(log_sigma=x, rho_hat=rho / float((rho * h).sum()), w=w, path=path, objective={}, **kw), x, h


# ----------------------------------------------------------------------------------------------
# the fit: hand-computed moments (METHOD.md §6.1)
# ----------------------------------------------------------------------------------------------


def test_a_two_level_draw_density_has_its_hand_computed_mean_and_variance():
    """π* with mass 1/4 in cell 3 and 3/4 in cell 6 of 10 equal cells (width h): mean c₃ + (3/4)·3h, grouped variance
    (1/4)(3/4)(3h)² = 1.6875h², Sheppard's variance 1.6875h² − h²/12; the EDM weight changes nothing (π* is given)."""
    path = path_from_scheduler(EDMEulerScheduler())
    masses = torch.zeros(10, dtype=torch.float64)
    masses[3], masses[6] = 0.25, 0.75
    x = log_sigma_grid(path, 10)
    target, x, h = target_of_masses(path, masses, w=edm_w(torch.exp(x)))
    mean, var = draw_moments(target)
    assert mean == pytest.approx(float(x[3]) + 0.75 * 3 * h, abs=1e-12)
    assert var == pytest.approx(1.6875 * h * h - h * h / 12, rel=1e-12)
    fit = fitted_parameters(target, "edm_lognormal")
    assert fit["P_mean"] == pytest.approx(mean) and fit["P_std"] == pytest.approx(math.sqrt(var))
    # one cell: no width the grid resolves, the floor h²/12 (a uniform cell's variance)
    one = torch.zeros(10, dtype=torch.float64)
    one[4] = 1.0
    assert draw_moments(target_of_masses(path, one)[0]) == pytest.approx((float(x[4]), h * h / 12), rel=1e-12)


def test_a_log_normal_binned_on_the_cells_is_recovered_exactly():
    """π*'s cell masses are N(−0.9, 0.7²)'s exact integrals over the cells (erf differences written out here): the
    moments with Sheppard's correction give back (−0.9, 0.7) to 1e-9 (the tails beyond the EDM range, 7.5σ out,
    hold 1e-13), for any weight w."""
    path = path_from_scheduler(EDMEulerScheduler())
    x = log_sigma_grid(path, 48)
    h = float(x[1] - x[0])
    edges = torch.cat([x - h / 2, x[-1:] + h / 2])
    cdf = 0.5 * (1 + torch.erf((edges + 0.9) / (0.7 * math.sqrt(2))))
    target, _, _ = target_of_masses(path, cdf[1:] - cdf[:-1], w=edm_w(torch.exp(x)))
    mean, var = draw_moments(target)
    assert mean == pytest.approx(-0.9, abs=1e-9) and math.sqrt(var) == pytest.approx(0.7, abs=1e-9)
    assert fitted_parameters(target, "edm_lognormal") == pytest.approx({"P_mean": -0.9, "P_std": 0.7}, abs=1e-9)
    # rounded to the 4 significant digits the flags print
    assert recommend_parameters(target, families=["edm_lognormal"])["edm_lognormal"]["params"] == {"P_mean": -0.9, "P_std": 0.7}


def test_a_logistic_shift_takes_the_binned_kl_location_not_the_mean():
    """shift_uniform is Logistic(ln k): its KL-closest location to π* maximises Σ_k p_k·ln P_k(loc) (P_k the
    logistic's cell mass): found here by a grid search of that sum, independent of the module's bisection. For a
    logistic binned on the cells at ln 2.5 it is ln 2.5 (up to the tail beyond the grid, 0.3%); for a skewed π* (two
    cells) it differs from π*'s mean, which shift_logit_normal (base N(0, 1), mean 0) takes."""
    path = path_from_scheduler(FlowMatchEulerDiscreteScheduler())
    x = log_sigma_grid(path, 64)
    h = float(x[1] - x[0])
    edges = torch.cat([x - h / 2, x[-1:] + h / 2])

    def by_grid_search(masses):
        locs = torch.linspace(-3, 3, 60001, dtype=torch.float64)[:, None]
        cell = torch.sigmoid(edges[None, 1:] - locs) - torch.sigmoid(edges[None, :-1] - locs)
        return float(locs[torch.argmax((masses * torch.log(cell.clamp_min(1e-300))).sum(1)), 0])

    binned = torch.sigmoid(edges[1:] - math.log(2.5)) - torch.sigmoid(edges[:-1] - math.log(2.5))
    for masses in (
        binned / binned.sum(),
        torch.zeros(64, dtype=torch.float64).index_put_((torch.tensor([20, 40]),), torch.tensor([0.8, 0.2], dtype=torch.float64)),
    ):
        target, _, _ = target_of_masses(path, masses)
        loc = math.log(fitted_parameters(target, "shift_uniform")["shift"])
        assert loc == pytest.approx(by_grid_search(target.pi_mass), abs=2e-4)
    assert (
        abs(math.log(fitted_parameters(target_of_masses(path, binned / binned.sum())[0], "shift_uniform")["shift"]) - math.log(2.5)) < 0.01
    )
    mean = 0.8 * float(x[20]) + 0.2 * float(x[40])
    assert math.log(fitted_parameters(target, "shift_logit_normal")["shift"]) == pytest.approx(mean, abs=1e-12)
    assert abs(loc - mean) > 0.3  # the logistic's location statistic is not the mean of a skewed π*


def test_a_range_covers_the_draw_densitys_central_98_percent():
    """VP: π* uniform over the steps 200..449 on the table's own cells (a profile at every step's σ, whose cells are
    the steps' cells, METHOD.md §5.8): its 1% and 99% quantiles lie inside steps 202 and 447 (2.5 and 247.5 steps in).
    Flow: π* uniform in s on [0.2505, 0.7505] (the logistic restricted, on 4096 cells): quantiles at s = 0.2555 and
    0.7455, widened to the table's 1/1000: [0.255, 0.746]."""
    sched = DDPMScheduler()
    path = path_from_scheduler(sched)
    x = torch.log(path.sigmas_table)
    probs = torch.zeros(1000, dtype=torch.float64)
    probs[200:450] = 1.0
    prof = profile_from_errors(
        torch.exp(x), errors_for(torch.exp(x), probs * (1 / torch.exp(x) ** 2) / path.cell_edges().diff()), gate=None
    )
    target = target_from_profile(prof, sched, prediction_type="epsilon", loss_weighting="none")
    assert fitted_parameters(target, "timestep_range") == {"t_min": 202, "t_max": 447}

    flow = path_from_scheduler(FlowMatchEulerDiscreteScheduler())
    lo, hi = math.log(0.2505 / 0.7495), math.log(0.7505 / 0.2495)
    xs = log_sigma_grid(flow, 4096)
    hs = float(xs[1] - xs[0])
    e = torch.cat([xs - hs / 2, xs[-1:] + hs / 2]).clamp(lo, hi)
    masses = torch.sigmoid(e[1:]) - torch.sigmoid(e[:-1])
    assert fitted_parameters(target_of_masses(flow, masses / masses.sum())[0], "timestep_range") == {"s_min": 0.255, "s_max": 0.746}


def test_tv_and_the_loss_variance_ratio_by_hand():
    """Draws with masses 1/2, 1/2 in cells 2 and 5 of a target whose π* is all in cell 2: TV = 1/2. RV = E[(w·ŝ)²] /
    E[w·m̂]² with w·m̂ = 1 and 3 there (ŝ = m̂): (1 + 9)/2 / 2² = 1.25; with ŝ twice m̂ in cell 5: (1 + 36)/2 / 4.
    A draw outside the grid counts with the edge cell on its side."""
    path = path_from_scheduler(EDMEulerScheduler())
    pi = torch.zeros(8, dtype=torch.float64)
    pi[2] = 1.0
    m_hat = torch.ones(8, dtype=torch.float64)
    m_hat[5] = 3.0
    target, _, _ = target_of_masses(path, pi, m_hat=m_hat)
    draws = torch.zeros(8, dtype=torch.float64)
    draws[2] = draws[5] = 0.5
    assert draw_tv(draws, target) == pytest.approx(0.5, abs=1e-12)
    assert loss_variance_ratio(draws, target) == pytest.approx(1.25, rel=1e-12)
    s_hat = m_hat.clone()
    s_hat[5] = 6.0
    assert loss_variance_ratio(draws, target_of_masses(path, pi, m_hat=m_hat, s_hat=s_hat)[0]) == pytest.approx(37 / 2 / 4, rel=1e-12)
    half = torch.zeros(8, dtype=torch.float64)
    half[2] = 0.5  # the other half above the grid: counted at the last cell (w·m̂ = 1) and as a mismatch
    assert draw_tv(half, target) == pytest.approx(0.5, abs=1e-12) and loss_variance_ratio(half, target, above=0.5) == pytest.approx(1.0)
    assert "per-level loss's RMS taken as its mean" in " ".join(target.notes)


def test_a_profiles_spread_is_used_only_where_it_is_a_losss_and_every_unused_series_is_said():
    """ŝ² = m̂² + n·se² (n probe samples) from a model's profile. A data set's profile records the spread of posterior
    variances across queries, not of a loss: not used, and said (it was "not stored"). A negative or NaN se, or a q
    with a hole, is not used either, and the note says which (q with a hole was dropped without a word)."""
    sched = FlowMatchEulerDiscreteScheduler()
    x = log_sigma_grid(path_from_scheduler(sched), 32)
    sig = torch.exp(x)
    m = sig**2 * 0.25 / (sig**2 + 0.25)  # Gaussian data's MMSE, std 0.5
    prof = profile_from_errors(sig, m, m * 0.01, gate=None, num_samples=64).to_dict()

    def target(meta=None, **series):
        return target_from_profile({**prof, **series, "meta": {**prof.get("meta", {}), **(meta or {})}}, sched)

    model = target({"source": "model", "num_probe_samples": 64})
    q = torch.tensor(prof["q"], dtype=torch.float64)
    se = torch.tensor(prof["mmse_se"], dtype=torch.float64)
    assert not model.notes and torch.allclose(model.s_hat, torch.sqrt((q * sig**2) ** 2 + 64 * se**2), rtol=1e-12)
    (note,) = target({"source": "dataset"}).notes
    assert note.endswith("(a data set's profile records the spread of posterior variances, not of the loss)")
    (note,) = target({"source": "model", "num_probe_samples": 64}, mmse_se=[-v for v in prof["mmse_se"]]).notes
    assert note.endswith("the profile's mmse_se holds NaN or negative values, not used")
    holed = target({"source": "model", "num_probe_samples": 64}, q=[None if i == 3 else v for i, v in enumerate(prof["q"])])
    assert holed.notes[0] == "m_hat taken as rho_hat*sigma^2 (METHOD.md 2): the profile's q holds NaN or negative values, not used"
    assert torch.allclose(holed.m_hat, holed.rho_hat * sig**2, rtol=1e-12)


# ----------------------------------------------------------------------------------------------
# round trips through stored schedules and profiles
# ----------------------------------------------------------------------------------------------


def test_logit_normal_in_flow_s_is_a_normal_in_log_sigma():
    """METHOD.md §6.1: logit-normal(m, s) on the flow noise level is exactly N(m, s²) in ln σ, since ln σ = logit(s)
    on the flow path (paths.FlowPath: σ = s/(1 − s)). The logit-normal density in s, written out, against the
    family's density moved to s with its Jacobian (densities.log_prob_in)."""
    m, sd = 0.4, 0.7
    s = torch.linspace(0.01, 0.99, 99, dtype=torch.float64)
    logit = torch.log(s / (1 - s))
    by_hand = torch.exp(-0.5 * ((logit - m) / sd) ** 2) / (sd * math.sqrt(2 * math.pi) * s * (1 - s))
    path = path_from_scheduler(FlowMatchEulerDiscreteScheduler())
    fam = family_density("logit_normal", {"mean": m, "std": sd}, path)
    assert torch.allclose(torch.exp(densities.log_prob_in(fam, "flow_s", s)), by_hand, rtol=1e-12)
    assert torch.allclose(torch.log(FlowPath.s_to_sigma(s)), logit, atol=1e-12)


def test_ai_toolkits_row_is_yaml_printed_a_key_a_line(capsys, tmp_path):
    """ai-toolkit reads a YAML config: its range row is one key a line (a comma-separated line is no YAML mapping), and
    the command prints those lines under the row, so that they paste under train: as they are. A narrow π* =
    N(0.5, 0.3²) in ln σ on the unshifted flow table: the row's integers are those of the fit's timestep range, index i
    of linspace(1000, 1) being s = 1 − i/1000 (i = 1000 − 1000·s)."""
    import yaml

    sched = FlowMatchEulerDiscreteScheduler()
    payload, _ = stored_schedule(sched, lambda x: normal_pdf(x, 0.5, 0.3), flow_velocity_w, prediction_type="flow", loss_weighting="none")
    (row,) = recommend_fixed_density(payload, sched, trainers="ai-toolkit").trainers
    (rng,) = [x for x in row["settings"] if x["family"] == "timestep_range"]
    keys = yaml.safe_load(rng["flags"])
    fit = fitted_parameters(recommend_fixed_density(payload, sched).target, "timestep_range")
    assert keys == {
        "timestep_type": "linear",
        "min_denoising_steps": 1000 - round(1000 * fit["s_max"]),
        "max_denoising_steps": 1000 - round(1000 * fit["s_min"]) + 1,
    }
    (tmp_path / "s.json").write_text(json.dumps(payload))
    rc, out, err = run(capsys, "recommend", tmp_path / "s.json", "--trainer", "ai-toolkit")
    assert rc == 0, err
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("timestep_range") and "the lines below" in line)
    assert yaml.safe_load("\n".join(line.strip() for line in lines[at + 1 : at + 4])) == keys


def test_a_schedule_built_from_logit_normal_gives_back_its_mean_and_std():
    """The SD3 table's shift of 3 is in the path; diffusers' --logit_mean counts the other way on it (METHOD.md §1):
    u ~ logit-normal(logit_mean, std) indexes the descending table, so ln σ = ln 3 − logit_mean + std·z."""
    m, sd = 0.7, 0.6
    sched = FlowMatchEulerDiscreteScheduler(shift=3.0)
    payload, h = stored_schedule(sched, lambda x: normal_pdf(x, m, sd), flow_velocity_w, prediction_type="flow", loss_weighting="none")
    fit = recommend_parameters(payload, sched)["logit_normal"]
    assert fit["params"]["mean"] == pytest.approx(m, abs=1e-3)
    assert fit["params"]["std"] == pytest.approx(sheppard_std(sd, h), abs=1e-3)
    assert fit["tv"] < 1e-3 and fit["n_eff_per_batch"] == pytest.approx(1 / fit["rv"])
    rec = recommend_fixed_density(payload, sched, trainers=["diffusers", "kohya", "simpletuner"])
    flags = {(r["trainer"], r["scripts"].split(",")[0]): r["settings"][0]["flags"] for r in rec.trainers}
    diffusers = flags[("diffusers", "train_dreambooth_lora_sd3.py")]
    assert numbers_after(diffusers, "--logit_mean") == pytest.approx(math.log(3.0) - m, abs=1e-3)
    # kohya's SD3 scripts train the x0 loss only: the row is fitted for it, says so, and on a schedule of that loss
    # (w = 1, π* = ρ̂ = the same normal) gives the noise level's own mean
    (sd3,) = [r for r in rec.trainers if r["scripts"].startswith("sd3_train.py")]
    assert "this trainer's loss (prediction_type sample" in sd3["notes"][0] and "(prediction_type flow" in sd3["notes"][0]
    x0_payload, _ = stored_schedule(sched, lambda x: normal_pdf(x, m, sd), torch.ones_like, prediction_type="sample", loss_weighting="none")
    (sd3,) = [r for r in recommend_fixed_density(x0_payload, sched, trainers="kohya").trainers if r["scripts"].startswith("sd3")]
    assert not sd3["notes"] and numbers_after(sd3["settings"][0]["flags"], "--logit_mean") == pytest.approx(m, abs=1e-3)
    assert math.log(numbers_after(flags[("kohya", "flux_train.py")], "--discrete_flow_shift")) == pytest.approx(m, abs=1e-3)
    simpletuner = flags[("simpletuner", "every flow-matching model (--flow_schedule_auto_shift off)")]
    assert math.log(numbers_after(simpletuner, "--flow_schedule_shift")) == pytest.approx(m, abs=1e-3)


def test_diffusers_logit_mean_reproduces_the_fitted_density_through_diffusers_own_table():
    """The flags' sign, checked against diffusers itself: draw as train_dreambooth_lora_sd3.py does (u = sigmoid of
    N(logit_mean, logit_std), index = int(u·N), s = the shift-3 scheduler's sigmas[index]) and read ln σ = logit(s):
    the fitted (m, sqrt(s² − h²/12)) within the table's rounding."""
    m, sd = -0.5, 0.8
    path = path_from_scheduler(FlowMatchEulerDiscreteScheduler(shift=3.0))
    x = log_sigma_grid(path, 64)
    h = float(x[1] - x[0])
    target = target_from_profile(
        profile_from_errors(torch.exp(x), errors_for(torch.exp(x), normal_pdf(x, m, sd) * flow_velocity_w(torch.exp(x))), gate=None),
        FlowMatchEulerDiscreteScheduler(shift=3.0),
        prediction_type="flow",
        loss_weighting="none",
    )
    row = next(r for r in recommend_fixed_density(target, trainers="diffusers").trainers if "sd3" in r["scripts"])
    flags = row["settings"][0]["flags"]
    logit_mean, logit_std = numbers_after(flags, "--logit_mean"), numbers_after(flags, "--logit_std")
    table = FlowMatchEulerDiscreteScheduler(shift=3.0)
    g = torch.Generator().manual_seed(0)
    u = torch.sigmoid(torch.randn(200_000, generator=g, dtype=torch.float64) * logit_std + logit_mean)
    s = table.sigmas[(u * 1000).long()].double()
    z = torch.log(s / (1 - s))
    assert abs(float(z.mean()) - m) < 0.01 and abs(float(z.std()) - sheppard_std(sd, h)) < 0.01


def test_a_flow_shift_is_given_back():
    """A profile whose π* is uniform s shifted by 2.5 (a logistic in ln σ at ln 2.5; point values) under the
    flow-velocity loss, and one of N(ln 0.4, 1): the shifts come back (the logistic's within its tail beyond the grid)."""
    path = path_from_scheduler(FlowMatchEulerDiscreteScheduler())
    x = log_sigma_grid(path, 64)
    sig = torch.exp(x)
    cases = {
        "shift_uniform": (2.5, lambda x, loc: torch.sigmoid(x - loc) * torch.sigmoid(loc - x)),  # logistic density
        "shift_logit_normal": (0.4, lambda x, loc: normal_pdf(x, loc, 1.0)),
    }
    for family, (k, pdf) in cases.items():
        prof = profile_from_errors(
            sig, errors_for(sig, pdf(x, math.log(k)) * flow_velocity_w(sig)), gate=None, meta={"path": path.config()}
        )
        fit = recommend_parameters(prof, prediction_type="flow", loss_weighting="none", families=[family])[family]
        assert abs(math.log(fit["params"]["shift"]) - math.log(k)) < 0.01, (family, fit)
        assert fit["tv"] < 0.01


def test_edm_log_normal_round_trip():
    pm, ps = -0.4, 0.9
    sched = EDMEulerScheduler()
    payload, h = stored_schedule(sched, lambda x: normal_pdf(x, pm, ps), edm_w, prediction_type="sample", loss_weighting="edm")
    rec = recommend_fixed_density(payload, sched)
    fit = rec.families["edm_lognormal"]
    assert fit.params["P_mean"] == pytest.approx(pm, abs=1e-3) and fit.params["P_std"] == pytest.approx(sheppard_std(ps, h), abs=1e-3)
    (row,) = [r for r in rec.trainers if r["trainer"] == "diffusers-infonoise"]
    assert numbers_after(row["settings"][0]["flags"], "--edm_p_mean") == pytest.approx(pm, abs=1e-3)
    assert row["default"]["tv"] > 0.2 > row["settings"][0]["tv"]  # EDM's (-1.2, 1.2) is elsewhere


def test_the_edm_row_of_this_packages_scripts_is_fitted_for_the_edm_recipe_whatever_loss_is_given():
    """train_unconditional.py --diffusion edm trains the EDM recipe (sample through D, λ(σ)) whatever --prediction_type
    says: a schedule of the unweighted ε loss (w = 1/σ²) with ρ̂ ∝ N(pm, ps)·w gives the row a recipe's schedule of the
    same ρ̂ (π = ρ̂/λ) gives, and the row says for which loss it is fitted."""
    pm, ps = -0.4, 0.9

    def eps_w(sig):
        return sig**-2

    def rows(pi, w, prediction_type, loss_weighting):
        payload, _ = stored_schedule(EDMEulerScheduler(), pi, w, prediction_type=prediction_type, loss_weighting=loss_weighting)
        (row,) = recommend_fixed_density(payload, EDMEulerScheduler(), trainers="diffusers-infonoise").trainers
        return row

    eps = rows(lambda x: normal_pdf(x, pm, ps), eps_w, "epsilon", "none")
    recipe = rows(lambda x: normal_pdf(x, pm, ps) * eps_w(torch.exp(x)) / edm_w(torch.exp(x)), edm_w, "sample", "edm")
    assert "this trainer's loss (prediction_type sample, loss_weighting edm)" in eps["notes"][0] and not recipe["notes"]
    for flag in ("--edm_p_mean", "--edm_p_std"):
        got = numbers_after(eps["settings"][0]["flags"], flag)
        assert got == pytest.approx(numbers_after(recipe["settings"][0]["flags"], flag), abs=2e-3)
    # and not the ε loss's own draws (π = ρ̂/w_ε = N(pm, ps)): the recipe's ρ̂/λ = N(pm, ps)·σ_d²/(σ² + σ_d²) sits lower
    assert numbers_after(eps["settings"][0]["flags"], "--edm_p_mean") < pm - 0.3


def test_allocation_tv_is_total_variation_on_cell_masses():
    path = path_from_scheduler(FlowMatchEulerDiscreteScheduler())
    x = log_sigma_grid(path, 40)
    sig = torch.exp(x)
    target = target_from_profile(
        profile_from_errors(sig, errors_for(sig, normal_pdf(x, 1.0, 0.5)), gate=None), FlowMatchEulerDiscreteScheduler()
    )
    dens = densities.Normal(-0.3, 1.4)
    masses = densities.bin_masses(dens, target.edges)
    widths = target.widths
    assert allocation_tv(dens, target) == pytest.approx(total_variation(masses / widths * target.w, target.rho_hat, x), abs=1e-12)


UNSUPPORTED_BY_KIND = {
    "ve": {"diffusers", "kohya", "simpletuner", "onetrainer", "ai-toolkit", "musubi-tuner"},
    "vp": {"ai-toolkit", "musubi-tuner", "diffusers-infonoise"},
    "flow": set(),
}


@pytest.mark.parametrize(
    "scheduler, prediction_type",
    [(FlowMatchEulerDiscreteScheduler(shift=3.0), "sample"), (DDPMScheduler(), None), (EDMEulerScheduler(), None)],
    ids=["flow-x0", "vp", "ve"],
)
def test_every_trainer_has_a_setting_far_closer_than_its_default(scheduler, prediction_type):
    """ρ̂ far from every default (narrow, at low noise: σ ≈ 0.08), for the loss each path trains by default (flow: the
    x0 loss of SD3's precondition_outputs, which kohya's SD3 scripts train): each trainer's best setting is far closer
    to π* than its default, in the TV of the draws its flags really give."""
    path = path_from_scheduler(scheduler)
    x = log_sigma_grid(path, 48)
    sig = torch.exp(x)
    target = target_from_profile(
        profile_from_errors(sig, errors_for(sig, normal_pdf(x, -2.5, 0.6)), gate=None), scheduler, prediction_type=prediction_type
    )
    rec = recommend_fixed_density(target)
    supported = [r for r in rec.trainers if "unsupported" not in r]
    assert supported
    for row in supported:
        assert min(s["tv"] for s in row["settings"]) < row["default"]["tv"] - 0.2, row
    assert {r["trainer"] for r in rec.trainers if "unsupported" in r} == UNSUPPORTED_BY_KIND[path.kind]


def test_unknown_or_unsupported_trainer_is_one_clear_error():
    sched = EDMEulerScheduler()
    payload, _ = stored_schedule(
        sched, lambda x: normal_pdf(x, 0.0, 1.0), edm_w, prediction_type="sample", loss_weighting="edm", num_bins=16
    )
    with pytest.raises(ValueError, match="trainer: kohya does not support a ve path"):
        recommend_fixed_density(payload, sched, trainers="kohya")
    with pytest.raises(ValueError, match="trainer: unknown nope"):
        recommend_fixed_density(payload, sched, trainers="nope")


# ----------------------------------------------------------------------------------------------
# the command
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipes(saved):  # helpers.cli's fixture
    """A tiny pipeline (benchmarks.tiny_pipelines.tiny_unet2d) whose EDM scheduler stores helpers.cli's schedule of Gaussian
    data's exact x0 MMSE, and the same pipeline with a plain scheduler."""
    root = saved["root"] / "recommend"
    unet = tiny_unet2d(8)
    for name in ("learned", "plain"):
        unet.save_pretrained(root / name / "unet")
        shutil.copytree(saved[name], root / name / "scheduler")
    return root


def test_recommend_a_stored_pipeline_writes_json_and_plot(capsys, pipes, tmp_path):
    rc, out, err = run(capsys, "recommend", pipes / "learned", "--json", tmp_path / "r.json", "--plot", tmp_path / "r.png")
    assert rc == 0, err
    data = json.loads((tmp_path / "r.json").read_text())
    assert set(data["families"]) == {"edm_lognormal"} and data["target"]["path"]["kind"] == "ve"
    assert data["target"]["objective"]["loss_weighting"] == "edm"
    rows = {r["trainer"]: r for r in data["trainers"]}
    assert "--edm_p_mean" in rows["diffusers-infonoise"]["settings"][0]["flags"] and "no EDM (VE) path" in rows["kohya"]["unsupported"]
    assert "kohya: nothing for a ve path" in out and "TV" in out
    assert (tmp_path / "r.png").stat().st_size > 0
    # the same schedule for a flow training (converted through VE sigma, METHOD.md §5.9): every flow trainer's flags
    rc, out, err = run(
        capsys, "recommend", pipes / "learned", "--scheduler", "flow", "--trainer", "onetrainer", "--json", tmp_path / "f.json"
    )
    assert rc == 0, err
    data = json.loads((tmp_path / "f.json").read_text())
    assert set(data["families"]) == {"logit_normal", "shift_uniform", "shift_logit_normal", "timestep_range"}
    assert data["target"]["objective"] == {"prediction_type": "flow", "loss_weighting": "none", "snr_gamma": None}
    assert [r["trainer"] for r in data["trainers"]] == ["onetrainer"] and '"timestep_distribution": "LOGIT_NORMAL"' in out


def test_recommend_from_a_measured_profile_and_from_its_json(capsys, pipes, tmp_path):
    common = ("--dataset", "digits", "--num-samples", 4, "--num-levels", 8, "--num-noise-draws", 1, "--no-progress")
    common += ("--edm-timestep-scale", 250)
    rc, out, err = run(capsys, "recommend", "--model", pipes / "plain", *common, "--json", tmp_path / "m.json")
    assert rc == 0, err
    data = json.loads((tmp_path / "m.json").read_text())
    assert len(data["target"]["rho_hat"]) == 8 and "edm_lognormal" in data["families"]
    rc, _, err = run(capsys, "profile", "--model", pipes / "plain", *common, "--output", tmp_path / "p", "--samplers", "edm_lognormal")
    assert rc == 0, err
    rc, out, err = run(capsys, "recommend", tmp_path / "p" / "profile.json", "--json", tmp_path / "j.json")
    assert rc == 0, err
    assert json.loads((tmp_path / "j.json").read_text())["families"] == data["families"]


def _sparse_schedule_pipeline(folder):
    """A pipeline folder (a tiny UNet, an EDM scheduler) whose stored schedule rests mostly on bins never measured:
    3 of 32 bins, at VE sigma about 7. Returns the schedule's (32,) bin centres (log VE sigma)."""
    scheduler = EDMEulerScheduler()
    s = make_sampler("infonoise", scheduler, warmup_steps=0, num_bins=32)
    x = s.estimator.centers
    near = torch.argsort((x - math.log(7.0)).abs())[:3]
    s.estimator.accumulate(x[near], analytic_mmse_gaussian(torch.exp(x[near]), 0.5))
    with pytest.warns(UserWarning, match="rests mostly on bins never measured"):  # the schedule is that sparse
        assert s._refresh_now(ema_decay=0.0, min_count=1)
    s.save_to_scheduler(scheduler)
    tiny_unet2d(8).save_pretrained(folder / "unet")
    scheduler.save_pretrained(folder / "scheduler")
    return x


def test_recommend_profiles_a_model_on_its_stored_grid_without_the_schedules_training_warnings(capsys, tmp_path):
    """A profile measures the model at the bin centres of the schedule stored with it and uses nothing else of it.
    It loaded the schedule into a sampler for them, whose training-time warning about π ('step 0: pi rests mostly on
    bins never measured ... a longer warmup_steps') came out raw, with a file and line, from a command that trains
    nothing."""
    x = _sparse_schedule_pipeline(tmp_path / "pipe")
    common = ("--dataset", "digits", "--num-samples", 4, "--num-noise-draws", 1, "--no-progress", "--json", tmp_path / "r.json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, _, err = run(capsys, "recommend", "--model", tmp_path / "pipe", *common)
    assert rc == 0 and "warning" not in err.lower(), err
    assert not [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    # the profile is still measured at the stored schedule's bin centres
    target = json.loads((tmp_path / "r.json").read_text())["target"]
    assert torch.allclose(torch.tensor(target["log_sigma"], dtype=torch.float64), x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("command", ["show", "recommend"])
def test_a_commands_warnings_are_one_line_each_shown_once(capsys, tmp_path, command):
    """The sparse schedule's warning (π rests on bins never measured) concerns the π that show and recommend SOURCE
    report, so it stays; it came out as Python shows it (a file, a line number, 'UserWarning', the source line) and twice
    from show, which reads the schedule twice. Now: once, one line led by the command."""
    _sparse_schedule_pipeline(tmp_path / "pipe")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        before = warnings.showwarning
        rc, _, err = run(capsys, command, tmp_path / "pipe")
        assert warnings.showwarning is before  # the command puts the caller's display back
    assert rc == 0, err
    lines = [line for line in err.splitlines() if "never measured" in line]
    assert len(lines) == 1 and lines[0].startswith(f"infonoise {command}: warning: noise sampler: "), err
    assert "UserWarning" not in err and ".py:" not in err and "_check_measured_mass" not in err, err


def test_recommend_errors_are_one_line_naming_the_argument(capsys, pipes, tmp_path):
    rc, _, err = run(capsys, "recommend", pipes / "plain")
    assert_one_line_error(rc, err, "SOURCE:", "holds no stored InfoNoise schedule")
    rc, _, err = run(capsys, "recommend", "--model", pipes / "plain")
    assert_one_line_error(rc, err, "--dataset:", "needs data")
    rc, _, err = run(capsys, "recommend", pipes / "learned", "--trainer", "kohya")
    assert_one_line_error(rc, err, "--trainer:", "kohya does not support a ve path", "no EDM (VE) path")
    rc, _, err = run(capsys, "recommend")
    assert_one_line_error(rc, err, "SOURCE:")
    rc, _, err = run(capsys, "recommend", pipes / "learned", "--model", pipes / "plain", "--dataset", "digits")
    assert_one_line_error(rc, err, "SOURCE, --model")
    # measuring's flags with a SOURCE: its grid is the source's (they were ignored without a word)
    rc, _, err = run(capsys, "recommend", pipes / "learned", "--num-levels", 16, "--gate", "none")
    assert_one_line_error(rc, err, "--num-levels, --gate:", "SOURCE already holds rho_hat on its own grid")
    # a bare VP payload does not hold its alphas_cumprod table: the training's scheduler is needed
    payload, _ = stored_schedule(
        DDPMScheduler(), lambda x: normal_pdf(x, 0.0, 1.0), lambda sig: 1 / sig**2, prediction_type="epsilon", loss_weighting="none"
    )
    (tmp_path / "vp.json").write_text(json.dumps(payload))
    rc, _, err = run(capsys, "recommend", tmp_path / "vp.json")
    assert_one_line_error(rc, err, "--scheduler:", "alphas_cumprod")
    rc, out, err = run(capsys, "recommend", tmp_path / "vp.json", "--scheduler", "ddpm", "--trainer", "kohya")
    assert rc == 0 and "--min_timestep" in out, err


@pytest.mark.parametrize(
    "argv,flag,says",
    [
        (("--prediction-type", "flow"), "--prediction-type", "'flow' is not a loss parameterization of the ve path"),
        (("--scheduler", "flow", "--prediction-type", "epsilon"), "--prediction-type", "of the flow path; accepted: flow, sample"),
        (("--loss-weighting", "min_snr"), "--snr-gamma", "'min_snr' needs a finite float"),
        (("--snr-gamma", "5"), "--snr-gamma", "only used with loss_weighting='min_snr'"),
        (("--mu", "1"), "--mu", "only flow-matching schedulers take a dynamic shift"),
        (("--scheduler", "flow", "--mu", "1"), "--mu", "the built-in 'flow' scheduler has no dynamic shifting"),
    ],
)
@pytest.mark.parametrize("source", ["stored", "measured"])
def test_recommend_errors_name_the_flag_not_the_librarys_argument(capsys, pipes, argv, flag, says, source):
    """The library's errors lead with its argument (``prediction_type: ...``); the command's name the flag the user
    types, for a stored schedule and for a profile measured here alike (the two reached the library apart)."""
    if source == "stored":
        head = (pipes / "learned",)
    else:
        head = ("--model", pipes / "plain", "--dataset", "digits", "--num-samples", 2, "--num-levels", 4, "--no-progress")
    rc, _, err = run(capsys, "recommend", *head, *argv)
    assert_one_line_error(rc, err, f"infonoise recommend: error: {flag}: ", says)


def test_recommend_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["recommend", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "--trainer" in out and "kohya" in out and "--scheduler" in out


def test_a_flow_timestep_range_from_the_clean_end_is_a_density():
    """s_min = 0 is σ = 0, log σ = -inf: uniform s on [0, 0.75] is the logistic density cut at log 3 on the left
    half-line, whose CDF at log σ = 0 (s = 1/2) is (1/2)/(3/4) = 2/3. A range check on Truncated once refused the
    infinite end, and with it every recommendation whose best range reached the clean end."""
    from diffusers_infonoise.diagnostics.recommend import family_density

    path = path_from_scheduler(FlowMatchEulerDiscreteScheduler())
    dens = family_density("timestep_range", {"s_min": 0.0, "s_max": 0.75}, path)
    assert float(dens.cdf(torch.tensor(0.0, dtype=torch.float64))) == pytest.approx(2 / 3, rel=1e-9)
    full = family_density("timestep_range", {"s_min": 0.0, "s_max": 1.0}, path)
    assert float(full.cdf(torch.tensor(0.0, dtype=torch.float64))) == pytest.approx(0.5, rel=1e-9)


# ----------------------------------------------------------------------------------------------
# issue 48: settled profiles, model error, warnings in the row's line, no no-op rows, VP profiles
# ----------------------------------------------------------------------------------------------


def test_an_unsettled_schedule_is_refused_with_its_reason_and_no_flags(capsys, tmp_path):
    """A stored schedule whose π was refreshed once (the warm-up's samples only): the library refuses it naming the
    source; the command prints why, no flags, and exits 0 (nothing wrong with the command)."""
    sched = EDMEulerScheduler()
    payload, _ = stored_schedule(
        sched, lambda x: normal_pdf(x, 0.0, 1.0), edm_w, prediction_type="sample", loss_weighting="edm", refreshes=1
    )
    with pytest.raises(ValueError, match="source: not fitted: pi was refreshed 1 time"):
        recommend_parameters(payload, sched)
    assert recommend_fixed_density(payload, sched).refused.startswith("pi was refreshed 1 time")
    (tmp_path / "s.json").write_text(json.dumps(payload))
    rc, out, err = run(capsys, "recommend", tmp_path / "s.json", "--json", tmp_path / "r.json", "--plot", tmp_path / "r.png")
    assert rc == 0, err
    assert "no flags: stored schedule" in out and "pi was refreshed 1 time(s)" in out
    assert f"--plot: {tmp_path / 'r.png'} not written" in out and not (tmp_path / "r.png").exists()  # said, not silent
    assert "--edm_p_mean" not in out and "TV" not in out
    assert json.loads((tmp_path / "r.json").read_text())["refused"].startswith("pi was refreshed 1 time")
    # saved within its warm-up: the base density, refused as such
    within = dict(payload, optimizer_steps=3, warmup_steps_resolved=10)
    assert "within its warm-up (step 3 of 10)" in recommend_fixed_density(within, sched).refused
    # three refreshes at step 0: fitted, with a note that m̂ still weighs the warm-up (0 steps < the memory)
    settled = dict(payload, num_updates=3)
    rec = recommend_fixed_density(settled, sched)
    assert rec.refused is None and any("fewer than the estimator's memory" in n for n in rec.notes)
    assert not any("memory" in n for n in recommend_fixed_density(dict(settled, optimizer_steps=4000), sched).notes)


def test_a_model_profile_whose_clean_end_is_model_error_says_so_in_its_rows():
    """A model whose x0 error is 0.01 at every σ below 0.1 does no better than returning its input there (σ² ≤ 0.01,
    the bound of METHOD.md §5.10): each row that puts 5% of its draws there warns; the Bayes profile of Gaussian data
    (error σ²s²/(σ² + s²) < σ²) does not."""
    sched = EDMEulerScheduler()
    x = log_sigma_grid(sched, 32)
    sig = torch.exp(x)
    bayes = analytic_mmse_gaussian(sig, 0.5)
    young = torch.where(sig < 0.1, torch.full_like(sig, 0.01), bayes)
    for errors, warned in ((young, True), (bayes, False)):
        prof = profile_from_errors(sig, errors, gate=None, loss_weighting="edm", meta={"source": "model"})
        rec = recommend_fixed_density(prof, sched)
        (row,) = [r for r in rec.trainers if "settings" in r]
        warnings = [w for x in row["settings"] for w in x["warnings"]] + row["default"]["warnings"]
        said = [w for w in warnings if "model's error reaches sigma^2" in w]
        assert bool(said) == warned, (said, row)


def test_the_n_eff_warning_is_in_the_rows_line_and_a_no_op_row_is_dropped(capsys, tmp_path):
    """A flow profile with π* = N(−1, 1) in ln σ under the x0 loss: its logit-normal fit draws where m̂ varies more
    than kohya's SD3 default's draws (its scripts train the x0 loss), and its line says so. A VP profile whose π* sits
    at both ends of the table: its 1%-99% range is the whole table, diffusers' bias multiplier 1, the default: no row, a line instead."""
    flow = path_from_scheduler(FlowMatchEulerDiscreteScheduler())
    x = log_sigma_grid(flow, 64)
    sig = torch.exp(x)
    prof = profile_from_errors(sig, errors_for(sig, normal_pdf(x, -1.0, 1.0)), gate=None, meta={"path": flow.config()})
    (tmp_path / "flow.json").write_text(json.dumps({"profile": prof.to_dict()}))
    rc, out, err = run(capsys, "recommend", tmp_path / "flow.json", "--trainer", "kohya", "--prediction-type", "sample")
    assert rc == 0, err
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("logit_normal") and "--weighting_scheme logit_normal" in ln]
    assert re.search(r"n_eff [0-9.]+x batch +--weighting_scheme .* \| warning: n_eff [0-9.]+x batch, [0-9.]+% below the default's", line), (
        line
    )

    vp = path_from_scheduler(DDPMScheduler())
    xv = torch.log(vp.sigmas_table)
    ends = torch.zeros(1000, dtype=torch.float64)
    ends[:20], ends[-20:] = 1.0, 1.0
    prof = profile_from_errors(torch.exp(xv), errors_for(torch.exp(xv), ends * torch.exp(-2 * xv) / vp.cell_edges().diff()), gate=None)
    (tmp_path / "vp.json").write_text(json.dumps({"profile": prof.to_dict()}))
    rc, out, err = run(capsys, "recommend", tmp_path / "vp.json", "--scheduler", "ddpm", "--trainer", "diffusers")
    assert rc == 0, err
    assert "(timestep_range: the default already fits (the fit gives the default's draws))" in out
    assert "--timestep_bias_multiplier" not in out


@pytest.fixture(scope="module")
def vp_pipe(tmp_path_factory):
    root = tmp_path_factory.mktemp("vp")
    tiny_unet2d(8).save_pretrained(root / "pipe" / "unet")
    DDPMScheduler().save_pretrained(root / "pipe" / "scheduler")
    return root


def test_a_vp_profile_json_reads_the_scheduler_it_records(capsys, vp_pipe, tmp_path):
    """A VP profile does not store its ᾱ table: ``recommend profile.json`` reads the scheduler ``infonoise profile``
    recorded (its scheduler_source); when that is gone it names what to pass in terms of what was profiled, not a flag
    the user never gave alone."""
    common = ("--dataset", "digits", "--num-samples", 4, "--num-levels", 8, "--num-noise-draws", 1, "--no-progress")
    pipe = vp_pipe / "pipe"
    rc, _, err = run(capsys, "profile", "--model", pipe, *common, "--output", tmp_path / "p", "--samplers", "uniform")
    assert rc == 0, err
    rc, out, err = run(capsys, "recommend", tmp_path / "p" / "profile.json", "--trainer", "kohya")
    assert rc == 0, err
    assert "training: vp path" in out and "--min_timestep" in out
    data = json.loads((tmp_path / "p" / "profile.json").read_text())
    data["profile"]["meta"]["scheduler_source"] = str(tmp_path / "gone" / "scheduler_config.json")
    (tmp_path / "moved.json").write_text(json.dumps(data))
    rc, _, err = run(capsys, "recommend", tmp_path / "moved.json")
    assert_one_line_error(
        rc, err, "SOURCE:", "alphas_cumprod table is not stored", "cannot be read here", f"the model you profiled ({pipe})"
    )
    rc, out, err = run(capsys, "recommend", tmp_path / "moved.json", "--scheduler", pipe, "--trainer", "kohya")
    assert rc == 0 and "--min_timestep" in out, err


def test_a_schedule_saved_before_it_adapted_is_a_refusal_like_an_unsettled_one(capsys, tmp_path):
    """One step of a 5-step warm-up: the payload holds no ρ̂. The command says "no flags: <why>" with status 0, as for a
    run within its warm-up (METHOD.md §6.1), not an error; the library's recommend_parameters raises as for any
    refusal, and recommend_fixed_density returns the reason with no target."""
    sched = save_before_adapting(tmp_path / "young")
    rc, out, err = run(capsys, "recommend", tmp_path / "young")
    assert rc == 0 and not err.strip(), err
    assert out.startswith("no flags: stored schedule") and "saved before it adapted (at optimizer step 1)" in out
    payload = read_schedule(sched)
    assert recommend_fixed_density(payload, sched).target is None
    with pytest.raises(ValueError, match="source: not fitted: the schedule was saved before it adapted"):
        recommend_parameters(payload, sched)


def test_recommend_input_errors_name_the_users_input(capsys, tmp_path):
    """An empty SOURCE; a ρ̂ of zeros (not the internal ``p``); a ρ̂ wholly above the training path's σ range, whose
    error gives both ranges (the flow path's s in [1/1000, 999/1000]: VE σ 1/999..999); NaN in a stored m̂ named by
    its index as inf is."""
    rc, _, err = run(capsys, "recommend", "")
    assert_one_line_error(rc, err, "SOURCE: is empty")
    x = torch.linspace(8.0, 9.0, 8, dtype=torch.float64)
    for name, rho in (("zero", torch.zeros(8, dtype=torch.float64)), ("high", torch.ones(8, dtype=torch.float64))):
        (tmp_path / f"{name}.json").write_text(json.dumps({"log_sigma": x.tolist(), "rho_hat": rho.tolist()}))
    rc, _, err = run(capsys, "recommend", tmp_path / "zero.json", "--scheduler", "flow")
    assert_one_line_error(rc, err, f"SOURCE: rho_hat of profile {tmp_path / 'zero.json'} is zero at every point")
    rc, _, err = run(capsys, "recommend", tmp_path / "high.json", "--scheduler", "flow")
    assert_one_line_error(rc, err, f"VE sigma range {1 / 999:.3g}..{999:.3g}", f"its mass lies in VE sigma {math.exp(8 - 1 / 14):.3g}..")
    sched = FlowMatchEulerDiscreteScheduler()
    payload, _ = stored_schedule(sched, lambda v: normal_pdf(v, 0.0, 1.0), flow_velocity_w, prediction_type="flow", loss_weighting="none")
    payload["m_hat"][5] = math.nan
    (tmp_path / "nan.json").write_text(json.dumps(payload))
    rc, _, err = run(capsys, "recommend", tmp_path / "nan.json")
    assert_one_line_error(rc, err, "got m_hat[5] = nan in the bin")
