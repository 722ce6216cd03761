"""Tests for ``diagnostics.recommend`` and ``infonoise recommend`` (docs/METHOD.md §6.1, issue 32).

The targets are built honestly: a stored schedule (or a profile) whose ρ̂ is ``π_θ·w`` for a known member θ of a
family, with ``w`` written out by hand from METHOD.md §4 (flow velocity: ``((1 + σ)/σ)²``; EDM:
``(σ² + σ_d²)/(σ·σ_d)²``). ρ̂ holds point values at the grid's centres while the fit compares cell averages. The cell average of a density f
over a cell of width h is ``f + h²·f''/24 + O(h⁴)`` (Taylor); for a normal of std s it is, to that order, the density
of a normal of variance ``s² + h²/12``, so the fitted std is ``sqrt(s² − h²/12) ≈ s − h²/(24·s)`` (observed to the
digit): the scale tolerance is twice that, ``h²/(12·s)``. A location is unbiased for a symmetric π under a symmetric
w; the flow-velocity and EDM weights are not symmetric in ln σ and move it by a few h²/24 (measured 0.004 = 1.03·h²/12
for the shift on 64 bins): the location tolerance is ``h²/6``. Both plus 1e-3 for the 4 significant digits the
parameters are rounded to.
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
    log_sigma_grid,
    profile_from_errors,
    recommend_fixed_density,
    recommend_parameters,
    target_from_profile,
    total_variation,
)
from diffusers_infonoise.diagnostics.recommend import family_density
from diffusers_infonoise.paths import FlowPath, path_from_scheduler
from diffusers_infonoise.schedule_io import read_schedule

from helpers.cli import assert_one_line_error, run


def location_tol(h):
    return h**2 / 6 + 1e-3


def scale_tol(h, s):
    return h**2 / (12 * s) + 1e-3


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


def stored_schedule(scheduler, pi_of_log_sigma, w_of_sigma, *, prediction_type, loss_weighting, num_bins=64):
    """A schedule stored the way a run stores it, whose measured x0 errors make ρ̂ = m̂/σ² (no gate, no
    smoothing) proportional to ``π·w`` at the bin centres: its target allocation φ ∝ ρ̂ is π's."""
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
    assert s._refresh_now(ema_decay=0.0, min_count=1)
    s.save_to_scheduler(scheduler)
    return read_schedule(scheduler), float(x[1] - x[0])


def numbers_after(flags: str, name: str) -> float:
    return float(re.search(re.escape(name) + r"[\" :]+(-?[0-9.e+-]+)", flags).group(1))


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


def test_a_schedule_built_from_logit_normal_gives_back_its_mean_and_std():
    """The SD3 table's shift of 3 is in the path; diffusers' --logit_mean counts the other way on it (METHOD.md §1):
    u ~ logit-normal(logit_mean, std) indexes the descending table, so ln σ = ln 3 − logit_mean + std·z."""
    m, sd = 0.7, 0.6
    sched = FlowMatchEulerDiscreteScheduler(shift=3.0)
    payload, h = stored_schedule(sched, lambda x: normal_pdf(x, m, sd), flow_velocity_w, prediction_type="flow", loss_weighting="none")
    fit = recommend_parameters(payload, sched)["logit_normal"]
    assert abs(fit["params"]["mean"] - m) < location_tol(h)
    assert abs(fit["params"]["std"] - sd) < scale_tol(h, sd)
    assert fit["tv"] < h**2 / 12
    rec = recommend_fixed_density(payload, sched, trainers=["diffusers", "kohya", "simpletuner"])
    flags = {(r["trainer"], r["scripts"].split(",")[0]): r["settings"][0]["flags"] for r in rec.trainers}
    diffusers = flags[("diffusers", "train_dreambooth_lora_sd3.py")]
    assert abs(numbers_after(diffusers, "--logit_mean") - (math.log(3.0) - m)) < location_tol(h)
    assert abs(numbers_after(flags[("kohya", "sd3_train.py")], "--logit_mean") - m) < location_tol(h)  # the noise level itself
    assert abs(math.log(numbers_after(flags[("kohya", "flux_train.py")], "--discrete_flow_shift")) - m) < location_tol(h)
    simpletuner = flags[("simpletuner", "every flow-matching model (--flow_schedule_auto_shift off)")]
    assert abs(math.log(numbers_after(simpletuner, "--flow_schedule_shift")) - m) < location_tol(h)


def test_diffusers_logit_mean_reproduces_the_fitted_density_through_diffusers_own_table():
    """The flags' sign, checked against diffusers itself: draw as train_dreambooth_lora_sd3.py does (u = sigmoid of
    N(logit_mean, logit_std), index = int(u·N), s = the shift-3 scheduler's sigmas[index]) and read ln σ = logit(s)."""
    m, sd = -0.5, 0.8
    path = path_from_scheduler(FlowMatchEulerDiscreteScheduler(shift=3.0))
    x = log_sigma_grid(path, 64)
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
    assert abs(float(z.mean()) - m) < 0.01 and abs(float(z.std()) - sd) < 0.01


def test_a_flow_shift_on_uniform_sampling_is_given_back():
    """A profile whose target is uniform s shifted by 2.5 (a logistic in ln σ at ln 2.5) under the flow-velocity loss:
    the shift comes back, and so does shift 0.4 on logit-normal(0, 1)."""
    path = path_from_scheduler(FlowMatchEulerDiscreteScheduler())
    x = log_sigma_grid(path, 64)
    sig = torch.exp(x)
    cases = {
        "shift_uniform": (2.5, lambda x, loc: torch.sigmoid(x - loc) * torch.sigmoid(loc - x)),  # logistic density
        "shift_logit_normal": (0.4, lambda x, loc: normal_pdf(x, loc, 1.0)),
    }
    h = float(x[1] - x[0])
    for family, (k, pdf) in cases.items():
        prof = profile_from_errors(
            sig, errors_for(sig, pdf(x, math.log(k)) * flow_velocity_w(sig)), gate=None, meta={"path": path.config()}
        )
        fit = recommend_parameters(prof, prediction_type="flow", loss_weighting="none", families=[family])[family]
        assert abs(math.log(fit["params"]["shift"]) - math.log(k)) < location_tol(h), (family, fit)
        assert fit["tv"] < h**2 / 12  # what is left is the point-value/cell-average mismatch, O(h²)


def test_edm_log_normal_round_trip():
    pm, ps = -0.4, 0.9
    sched = EDMEulerScheduler()
    payload, h = stored_schedule(sched, lambda x: normal_pdf(x, pm, ps), edm_w, prediction_type="sample", loss_weighting="edm")
    rec = recommend_fixed_density(payload, sched)
    fit = rec.families["edm_lognormal"]
    assert abs(fit.params["P_mean"] - pm) < location_tol(h) and abs(fit.params["P_std"] - ps) < scale_tol(h, ps)
    (row,) = [r for r in rec.trainers if r["trainer"] == "diffusers-infonoise"]
    assert abs(numbers_after(row["settings"][0]["flags"], "--edm_p_mean") - pm) < location_tol(h)
    assert row["default"]["tv"] > 0.2 > fit.tv  # EDM's (-1.2, 1.2) is elsewhere


@pytest.mark.parametrize("kind", ["vp", "flow"])
def test_a_timestep_range_is_given_back_exactly(kind):
    """The target is the allocation of uniform t on [200, 599] (VP, each step's mass spread over its cell,
    METHOD.md §5.8) or uniform s on [0.25, 0.75] (flow): the exhaustive search finds exactly that range."""
    if kind == "vp":
        sched, truth = DDPMScheduler(), {"t_min": 200, "t_max": 599}
        path = path_from_scheduler(sched)
        probs = torch.zeros(1000, dtype=torch.float64)
        probs[200:600] = 1.0
        dens = densities.Piecewise(path.cell_edges(), probs)
        pt, w = "epsilon", lambda sig: 1 / sig**2
    else:
        sched, truth = FlowMatchEulerDiscreteScheduler(), {"s_min": 0.25, "s_max": 0.75}
        path = path_from_scheduler(sched)
        dens = densities.Truncated(densities.Logistic(0.0), math.log(0.25 / 0.75), math.log(0.75 / 0.25))
        pt, w = "flow", flow_velocity_w
    x = log_sigma_grid(path, 64)
    edges = torch.linspace(*path.log_sigma_range, 65, dtype=torch.float64)
    cell_pi = densities.bin_masses(dens, edges) / (edges[1:] - edges[:-1])
    prof = profile_from_errors(torch.exp(x), errors_for(torch.exp(x), cell_pi * w(torch.exp(x))), gate=None)
    rec = recommend_fixed_density(prof, sched, prediction_type=pt, loss_weighting="none")
    fit = rec.families["timestep_range"]
    assert fit.params == pytest.approx(truth) and fit.tv < 1e-9
    # each trainer's flags express that range in its own convention (end exclusive where its code slices or draws
    # randint(min, max); OneTrainer takes int(N * strength); ai-toolkit's index i of linspace(1000, 1) is s = 1 - i/1000)
    flags = " | ".join(s["flags"] for r in rec.trainers if "settings" in r for s in r["settings"] if s["family"] == "timestep_range")
    expected = {
        "vp": [
            "--min_timestep 200 --max_timestep 600",
            "--timestep_bias_begin 200 --timestep_bias_end 600",
            '"min_noising_strength": 0.2005',
        ],
        "flow": [
            "--min_timestep 250 --max_timestep 750",
            '"min_noising_strength": 0.25, "max_noising_strength": 0.75',
            "min_denoising_steps: 250, max_denoising_steps: 751",
        ],
    }[kind]
    for e in expected:
        assert e in flags, (e, flags)
    if kind == "vp":
        lo, hi = (numbers_after(flags, f'"{k}_noising_strength"') for k in ("min", "max"))
        assert (int(1000 * lo), int(1000 * hi)) == (200, 600)  # OneTrainer draws t in [int(N*min), int(N*max))


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
    "ve": {"diffusers", "kohya", "simpletuner", "onetrainer", "ai-toolkit"},
    "vp": {"ai-toolkit", "diffusers-infonoise"},
    "flow": set(),
}


@pytest.mark.parametrize(
    "scheduler, prediction_type",
    [(FlowMatchEulerDiscreteScheduler(shift=3.0), "sample"), (DDPMScheduler(), None), (EDMEulerScheduler(), None)],
    ids=["flow-x0", "vp", "ve"],
)
def test_every_setting_is_at_least_as_close_as_the_trainer_default(scheduler, prediction_type):
    """ρ̂ far from every default (narrow, at low noise: σ ≈ 0.08), for the loss each path trains by default (flow: the
    x0 loss of SD3's precondition_outputs, which kohya's SD3 scripts train): every trainer's every fitted setting has
    TV ≤ its default's, and its best is far closer."""
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
        for s in row["settings"]:
            if s["family"] is not None:
                assert s["tv"] <= row["default"]["tv"] + 1e-12, (row["trainer"], s)
        assert min(s["tv"] for s in row["settings"]) < row["default"]["tv"] - 0.2, row
    assert {r["trainer"] for r in rec.trainers if "unsupported" in r} == UNSUPPORTED_BY_KIND[path.kind]


def test_under_the_velocity_loss_a_family_may_not_reach_a_default_but_the_best_setting_does():
    """What holds in general: a family that holds the trainer's default fits at least as well as the default, so each
    trainer's best setting does. A family that does not hold it can be worse: with the flow-velocity loss (w = 1/s²)
    uniform-s sampling puts φ at the clean end whatever the shift (measured TV 0.94 against SimpleTuner's default
    logit-normal shifted by 3 at 0.85)."""
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    path = path_from_scheduler(scheduler)
    x = log_sigma_grid(path, 48)
    sig = torch.exp(x)
    rec = recommend_fixed_density(
        target_from_profile(profile_from_errors(sig, errors_for(sig, normal_pdf(x, -2.5, 0.6)), gate=None), scheduler)
    )
    assert rec.target.objective["prediction_type"] == "flow"
    for row in rec.trainers:
        assert min(s["tv"] for s in row["settings"]) <= row["default"]["tv"] + 1e-12, row
    (simpletuner,) = [r for r in rec.trainers if r["trainer"] == "simpletuner"]
    assert rec.families["shift_uniform"].tv > simpletuner["default"]["tv"]


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
        (("--scheduler", "flow", "--mu", "1"), "--mu", "use_dynamic_shifting=False"),
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
