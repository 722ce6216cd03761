"""InfoNoise does what it promises (issue 10, METHOD.md §4-§5): the effective allocation φ = π·w
follows ρ̂ within the floor on every path and loss weighting, no sample is thrown away (batch 1
adapts like batch 256), the defaults are right (EDM weighting, the m̂ cap from the data seen,
a run-sized warm-up), and a run that never adapts says so.

References are built here: the analytic Gaussian ρ, the hand-written w(σ) of METHOD.md §4, the base
masses from scipy / the ᾱ table (helpers.reference).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

from diffusers_infonoise import InfoNoiseTrainingTimestepSampler, make_sampler
from diffusers_infonoise.sampler import default_warmup_steps
from diffusers_infonoise.schedule_io import read_schedule

from helpers.reference import factor_by_hand, gauss_mmse, grid_by_hand, total_variation, weight_by_hand

K = 64
S_D = 0.5
SCHEDULERS = {"ve": EDMEulerScheduler, "vp": DDPMScheduler, "flow": FlowMatchEulerDiscreteScheduler}


def _feed(sampler, steps, batch, seed=0, *, mmse=None, extra_eps_error=0.0):
    """Exact Bayes losses of Gaussian data N(0, S_D²) (plus an optional constant ε-space residual),
    with the clean data noised through the sampler as a training loop does."""
    mmse = mmse or (lambda s: gauss_mmse(s, S_D))
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        levels = sampler.sample(batch, generator=gen)
        x0 = torch.randn(batch, 8, generator=gen, dtype=torch.float64) * S_D
        sampler.add_noise(x0, torch.randn_like(x0), levels)
        sig = levels.sigmas.double().numpy()
        loss = mmse(sig) / factor_by_hand(sampler.prediction_type, sig)
        loss = loss + extra_eps_error * (sig**2 / factor_by_hand(sampler.prediction_type, sig))
        sampler.update(levels, torch.from_numpy(np.nan_to_num(loss, posinf=1e30)))
        sampler.step()
    return sampler


def _pi_masses(sampler, sig, width):
    return torch.exp(sampler._log_prob(torch.from_numpy(sig))).numpy() * width


CASES = [
    ("ve", "sample", "edm"),
    ("ve", "sample", "none"),
    ("ve", "edm_f", "none"),
    ("vp", "epsilon", "none"),
    ("vp", "epsilon", "min_snr"),
    ("vp", "v_prediction", "none"),
    ("vp", "v_prediction", "min_snr"),
    ("flow", "flow", "none"),
    ("flow", "flow", "sigma_sqrt"),
    ("flow", "flow", "cosmap"),
    ("flow", "sample", "none"),
]


@pytest.mark.parametrize("kind,pred,weighting", CASES)
def test_phi_follows_rho_within_the_floor_on_every_path_and_weighting(kind, pred, weighting):
    floor = 0.05
    sched = SCHEDULERS[kind]()
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(
        sched,
        prediction_type=pred,
        loss_weighting=weighting,
        snr_gamma=5.0 if weighting == "min_snr" else None,
        warmup_steps=2,
        refresh_every=1,
        num_bins=K,
        floor=floor,
    )
    _feed(sampler, steps=8, batch=8192)
    assert sampler.is_adapted
    edges, _ = grid_by_hand(kind, sched)
    width = edges[1] - edges[0]
    sig = np.exp(0.5 * (edges[1:] + edges[:-1]))
    rho = gauss_mmse(sig, S_D) / sig**2  # Gaussian data: no gate ("auto" sees continuous values)
    pi = _pi_masses(sampler, sig, width)
    phi = pi * weight_by_hand(pred, weighting, sig)
    tv = total_variation(phi, rho)
    assert tv <= floor + 0.02, tv
    # the library reports the same figure, at every refresh
    assert sampler._allocation_total_variation() == pytest.approx(tv, abs=0.01)
    assert sampler.last_refresh["tv_phi_rho"] == pytest.approx(sampler._allocation_total_variation())
    assert sampler.estimator.last_gate.source == "data" and sampler.estimator.last_gate.pivot is None


def test_pi_space_floor_is_the_hybrid_the_phi_floor_removes():
    """Under the EDM weighting the former π-space floor hands most of φ back to the base's clean end
    (METHOD.md §5.7): TV(φ, ρ̂) far above η, while the φ-space floor stays within η + 0.02."""
    tvs = {}
    for space in ("pi", "phi"):
        s = InfoNoiseTrainingTimestepSampler.from_scheduler(
            EDMEulerScheduler(), warmup_steps=2, refresh_every=1, floor=0.05, floor_space=space, gate=0.2
        )
        _feed(s, steps=6, batch=8192)
        tvs[space] = s._allocation_total_variation()
    assert tvs["phi"] <= 0.07 and tvs["pi"] > 0.3, tvs


@pytest.mark.parametrize("kind", ["ve", "vp", "flow"])
def test_batch_one_adapts_within_its_warmup_and_matches_batch_256(kind):
    steps = 3000
    samplers = {}
    for batch in (1, 256):
        s = InfoNoiseTrainingTimestepSampler.from_scheduler(SCHEDULERS[kind](), num_training_steps=steps)
        assert s.warmup_steps == 300  # a tenth of the run
        _feed(s, steps=s.warmup_steps, batch=batch, seed=batch)
        assert s.is_adapted, f"batch {batch}: not adapted at the end of its warm-up"
        _feed(s, steps=steps - s.warmup_steps, batch=batch, seed=batch + 1)
        samplers[batch] = s
    # nothing thrown away: at batch 1, every sample reached the statistics
    est = samplers[1].estimator
    assert float(est.total_counts.sum()) == steps
    tv = total_variation(samplers[1].probs.numpy(), samplers[256].probs.numpy())
    assert tv <= 0.05, tv


def test_the_readme_ddpm_quickstart_gets_the_cap_without_writing_anything():
    """An ε-model's constant residual error becomes σ²·err in x0 space: uncapped, π puts most draws at
    the top of the VP table; the default cap, measured from the x0 given to add_noise, brings π back to
    the Bayes π (METHOD.md §5.4)."""

    def run(**kw):
        s = InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler(), warmup_steps=2, refresh_every=1, **kw)
        return _feed(s, steps=8, batch=8192, extra_eps_error=0.05)

    exact = _feed(InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler(), warmup_steps=2, refresh_every=1), steps=8, batch=8192)
    capped = run()
    uncapped = run(mmse_cap=None)
    assert capped.settings.mmse_cap == pytest.approx(S_D**2, rel=0.05)  # per-dimension variance
    p_exact, p_cap, p_raw = (x.timestep_probabilities().clone() for x in (exact, capped, uncapped))
    top = slice(900, 1000)
    assert float(p_raw[top].sum()) > 0.5 > 0.2 > float(p_cap[top].sum())
    assert total_variation(p_cap.numpy(), p_exact.numpy()) < 0.1
    assert total_variation(p_raw.numpy(), p_exact.numpy()) > 0.4


def test_defaults_follow_what_each_path_trains():
    assert InfoNoiseTrainingTimestepSampler.from_scheduler(EDMEulerScheduler()).objective.loss_weighting == "edm"
    assert make_sampler("infonoise", EDMEulerScheduler()).objective.loss_weighting == "edm"
    assert make_sampler("edm_lognormal", EDMEulerScheduler()).objective.loss_weighting == "edm"
    assert make_sampler("infonoise", EDMEulerScheduler(), prediction_type="edm_f").objective.loss_weighting == "none"
    assert make_sampler("infonoise", DDPMScheduler()).objective.loss_weighting == "none"
    assert make_sampler("infonoise", DDPMScheduler()).settings.mmse_cap == "auto"
    assert make_sampler("infonoise", DDPMScheduler(prediction_type="v_prediction")).settings.mmse_cap == "auto"
    assert make_sampler("infonoise", EDMEulerScheduler()).settings.mmse_cap is None
    assert make_sampler("infonoise", FlowMatchEulerDiscreteScheduler()).settings.mmse_cap is None


def test_warmup_is_sized_to_the_run():
    # a tenth of the run, at least one refresh, at most 500; 500 when the length is unknown
    assert [default_warmup_steps(n, 50) for n in (None, 100, 600, 3000, 10_000)] == [500, 50, 60, 300, 500]
    s = make_sampler("infonoise", EDMEulerScheduler())
    assert s.warmup_steps == 500
    s.plan_run(600)
    assert s.warmup_steps == 60
    assert make_sampler("infonoise", EDMEulerScheduler(), warmup_steps=7, num_training_steps=600).warmup_steps == 7


def test_a_run_that_never_adapts_says_so():
    sched = EDMEulerScheduler()
    with pytest.warns(UserWarning, match="never leaves the base"):
        make_sampler("infonoise", sched, warmup_steps=100).plan_run(50)
    s = make_sampler("infonoise", sched, warmup_steps=100)
    _feed(s, steps=3, batch=4)
    # a mid-run save says when it was saved, not that the run ended (issue 20)
    with pytest.warns(UserWarning, match=r"has not adapted \(saved at optimizer step 3, before the warm-up of 100 steps ended\)"):
        s.save_to_scheduler(sched)
    # warm-up over, but the statistics never filled two bins (one level, min_count too high)
    s = make_sampler("infonoise", sched, warmup_steps=2, refresh_every=1, min_count=10_000)
    with pytest.warns(UserWarning, match="bins have 10000 samples"):
        _feed(s, steps=3, batch=4)
    assert not s.is_adapted
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an adapted run is silent
        _feed(make_sampler("infonoise", sched, warmup_steps=2, refresh_every=1), steps=3, batch=512).save_to_scheduler(sched)


def test_data_statistics_by_hand_and_the_gate_they_give():
    # per-dimension variances by hand: dim 0 {1, 3} -> 1, dim 1 {-1, -1} -> 0, mean 0.5;
    # values {-1, 1, 3}: smallest gap 2 -> pivot 0.2
    s = make_sampler("infonoise", DDPMScheduler(), warmup_steps=1, refresh_every=1)
    s.observe_data(torch.tensor([[1.0, -1.0], [3.0, -1.0]]))
    s.update(s.sample(4096, generator=torch.Generator().manual_seed(0)), torch.ones(4096))
    s.step()
    assert s.data.variance == pytest.approx(0.5) and s.estimator.mmse_cap == pytest.approx(0.5)
    assert s.estimator.data_min_gap == pytest.approx(2.0)
    assert s.estimator.last_gate.source == "data" and s.estimator.last_gate.pivot == pytest.approx(0.2)
    # 8-bit images in [-1, 1]: gap 2/255, pivot ~0.0008, below the VP table's sigma_min (~0.01): no gate
    s = make_sampler("infonoise", DDPMScheduler(), warmup_steps=1, refresh_every=1)
    s.observe_data(torch.arange(256, dtype=torch.float32).reshape(4, 64) / 127.5 - 1)
    s.update(s.sample(4096, generator=torch.Generator().manual_seed(0)), torch.ones(4096))
    s.step()
    assert s.estimator.data_min_gap == pytest.approx(2 / 255, rel=1e-4)
    assert s.estimator.last_gate.source == "data" and s.estimator.last_gate.pivot is None
    # no data seen at all: the pinned fallback, and the reason says why
    s = make_sampler("infonoise", EDMEulerScheduler(), warmup_steps=1, refresh_every=1)
    s.update(s.sample(512, generator=torch.Generator().manual_seed(0)), torch.ones(512))
    s.step()
    assert s.estimator.last_gate.source == "fallback" and "no training data" in s.estimator.last_gate.reason


@pytest.mark.parametrize("kind", ["ve", "vp", "flow"])
def test_stored_schedule_comes_back_whole(kind):
    """from_scheduler(scheduler) with no other argument reproduces the stored π bit for bit, cap, gate,
    floor and a non-default num_bins included; an explicit argument changes it."""
    sched = SCHEDULERS[kind]()
    a = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, num_bins=24, warmup_steps=2, refresh_every=1, floor=0.1, smoothing=0.5)
    _feed(a, steps=5, batch=2048, extra_eps_error=0.05 if kind == "vp" else 0.0)
    a.save_to_scheduler(sched)
    reloaded = type(sched).from_config(sched.config)
    b = InfoNoiseTrainingTimestepSampler.from_scheduler(reloaded)
    assert torch.equal(a.probs, b.probs)
    assert b.settings.num_bins == 24 and b.settings.floor == 0.1
    assert b.estimator.mmse_cap == a.estimator.mmse_cap
    ga, gb = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(a.sample(500, generator=ga).sigmas, b.sample(500, generator=gb).sigmas)
    from diffusers_infonoise.diagnostics import load_learned_sampler

    assert torch.equal(load_learned_sampler(reloaded).probs, a.probs)
    c = InfoNoiseTrainingTimestepSampler.from_scheduler(reloaded, floor=0.3)
    assert not torch.equal(c.probs, a.probs) and c.settings.floor == 0.3


def test_data_statistics_survive_bad_and_uneven_data():
    """A NaN in x0 is left out (the cap stays finite and on); batches of another shape fall back to the
    variance over all elements (by hand: values ±1 with mean 0 have variance 1)."""
    s = make_sampler("infonoise", DDPMScheduler(), warmup_steps=1, refresh_every=1)
    x = torch.sign(torch.randn(64, 3, generator=torch.Generator().manual_seed(0)))
    x[0, 0] = math.nan
    s.observe_data(x)
    s.observe_data(torch.sign(torch.randn(64, 5, generator=torch.Generator().manual_seed(1))))  # another shape
    s.update(s.sample(4096, generator=torch.Generator().manual_seed(0)), torch.ones(4096))
    s.step()
    assert s.data.variance == pytest.approx(1.0, abs=0.05) and s.estimator.mmse_cap == s.data.variance
    assert s.estimator.data_min_gap == pytest.approx(2.0)


def test_an_epsilon_run_that_never_shows_its_data_warns():
    s = make_sampler("infonoise", DDPMScheduler(), warmup_steps=1, refresh_every=1)
    with pytest.warns(UserWarning, match="mmse_cap='auto'.*saw no training data"):
        s.update(s.sample(4096, generator=torch.Generator().manual_seed(0)), torch.ones(4096))
        s.step()
    short = make_sampler("infonoise", DDPMScheduler(), num_training_steps=30)  # warm-up: one refresh, 50 > 30
    with pytest.warns(UserWarning, match="never leaves the base density"):
        short.step()  # at the first step, once the start is known (issue 28)
    with pytest.raises(ValueError, match=r"from_scheduler: unknown parameter\(s\) \['bogus'\]"):
        InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler(), bogus=1)
    with pytest.raises(ValueError, match="base: "):
        make_sampler("infonoise", DDPMScheduler(), base="foo")


@pytest.mark.parametrize("steps", [500, 5000])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("kind,pred,weighting", [("vp", "epsilon", "min_snr"), ("flow", "sample", "none")])
def test_lora_sized_runs_adapt_and_stay_put_with_the_defaults(kind, pred, weighting, batch, steps):
    """The common fine-tuning run (issue 13): batch 1-4, 500-5000 steps, every default (warm-up a
    tenth of the run, refresh every 50, 64 bins, min count 8, carry-over). π adapts, φ follows ρ
    within the floor, and the last tenth of the run moves π little."""
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(
        SCHEDULERS[kind](),
        prediction_type=pred,
        loss_weighting=weighting,
        snr_gamma=5.0 if weighting == "min_snr" else None,
        num_training_steps=steps,
    )
    _feed(sampler, steps=steps * 9 // 10, batch=batch, seed=batch)
    assert sampler.is_adapted
    before = sampler.probs.clone()
    _feed(sampler, steps=steps - steps * 9 // 10, batch=batch, seed=batch + 7)
    assert float(sampler.estimator.total_counts.sum()) == steps * batch  # no sample thrown away
    edges = sampler.estimator.edges.numpy()
    sig = np.exp(0.5 * (edges[1:] + edges[:-1]))
    phi = _pi_masses(sampler, sig, edges[1] - edges[0]) * weight_by_hand(pred, weighting, sig)
    tv = total_variation(phi, gauss_mmse(sig, S_D) / sig**2)
    assert tv <= 0.05 + 0.02, tv  # measured 0.02-0.04
    assert total_variation(before.numpy(), sampler.probs.numpy()) <= 0.02


def test_metrics_for_a_tracker_and_the_mass_on_measured_bins():
    """``sampler.metrics()`` (issue 20): the refresh figures as floats for ``accelerator.log``. Checked against the
    draws themselves: the share of draws in bins that hold a measured m̂, and the quantiles of drawn σ."""
    sched = EDMEulerScheduler()
    s = make_sampler("infonoise", sched, warmup_steps=1, refresh_every=1, min_count=1, num_bins=16)
    # errors at two levels only: two measured bins, the other 14 interpolated or extrapolated
    sig = torch.tensor([0.3, 0.3, 2.0, 2.0], dtype=torch.float32)
    from diffusers_infonoise import NoiseLevels

    s.update(NoiseLevels(0.25 * torch.log(sig), sig, -2 * torch.log(sig)), torch.tensor([0.05, 0.06, 0.2, 0.21]))
    s.step()
    m = s.metrics()
    assert set(m) == {
        f"infonoise/{k}"
        for k in (
            "adapted",
            "num_updates",
            "filled_bins",
            "measured_mass",
            "pi_sigma_p10",
            "pi_sigma_p50",
            "pi_sigma_p90",
            "tv_phi_rho",
            "gate_pivot",
        )
    }
    assert m["infonoise/adapted"] == 1.0 and m["infonoise/filled_bins"] == 2.0 and m["infonoise/num_updates"] == 1.0
    assert all(isinstance(v, float) for v in m.values())
    assert m["infonoise/tv_phi_rho"] == pytest.approx(s._allocation_total_variation()) and m["infonoise/tv_phi_rho"] <= 0.07
    assert s.last_refresh["measured_mass"] == m["infonoise/measured_mass"]
    drawn = s.sample(200_000, generator=torch.Generator().manual_seed(0)).sigmas.double()
    measured = torch.tensor([float(torch.log(torch.tensor(v))) for v in (0.3, 2.0)], dtype=torch.float64)
    lo = s.estimator.bin_index(measured)
    in_measured = torch.isin(s.estimator.bin_index(torch.log(drawn)), lo).double().mean()
    assert abs(float(in_measured) - m["infonoise/measured_mass"]) < 0.005
    assert 0.05 < m["infonoise/measured_mass"] < 0.95  # most of π rests on the two measured bins' neighbours too
    for q, key in ((0.1, "p10"), (0.5, "p50"), (0.9, "p90")):
        assert math.log(float(torch.quantile(drawn[:100_000], q)) / m[f"infonoise/pi_sigma_{key}"]) == pytest.approx(0, abs=0.02)


def test_a_tempered_target_follows_rho_to_the_tau_and_reports_both_distances():
    """temperature τ ≠ 1 (the margin-study variant, docs/METHOD.md §5): φ follows ρ̂^τ normalised within
    the floor, by hand from the analytic Gaussian ρ; TV(φ, ρ̂) is reported against the untempered rate
    (and is then larger than the floor), TV(φ, ρ̂^τ) as tv_phi_target; the stored schedule keeps τ."""
    tau, floor = 0.25, 0.05
    sched = EDMEulerScheduler()
    s = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, warmup_steps=2, refresh_every=1, floor=floor, temperature=tau)
    _feed(s, steps=8, batch=8192)
    edges, _ = grid_by_hand("ve", sched)
    width = edges[1] - edges[0]
    sig = np.exp(0.5 * (edges[1:] + edges[:-1]))
    rho = gauss_mmse(sig, S_D) / sig**2
    phi = _pi_masses(s, sig, width) * weight_by_hand("sample", "edm", sig)
    tv_target, tv_rho = total_variation(phi, rho**tau), total_variation(phi, rho)
    assert tv_target <= floor + 0.02, tv_target
    # τ = 0.25 moves φ from ρ by TV(ρ^τ, ρ) = 0.19 on this grid, well past the floor's share
    assert tv_rho == pytest.approx(total_variation(rho**tau, rho), abs=floor + 0.02) and tv_rho > 0.1, tv_rho
    assert s._allocation_total_variation(target=True) == pytest.approx(tv_target, abs=0.01)
    assert s._allocation_total_variation() == pytest.approx(tv_rho, abs=0.01)
    assert s.last_refresh["tv_phi_target"] == pytest.approx(s._allocation_total_variation(target=True))
    assert s.metrics()["infonoise/tv_phi_target"] == s.last_refresh["tv_phi_target"]  # what a tracker logs
    s.save_to_scheduler(sched)
    b = InfoNoiseTrainingTimestepSampler.from_scheduler(type(sched).from_config(sched.config))
    assert b.settings.temperature == tau and torch.equal(b.probs, s.probs)
    assert sched.config["_infonoise_schedule"]["tv_phi_target"] == pytest.approx(tv_target, abs=0.01)
    for bad in (0.0, -1.0, 5.0, True, "1"):
        with pytest.raises(ValueError, match="temperature"):
            InfoNoiseTrainingTimestepSampler.from_scheduler(EDMEulerScheduler(), temperature=bad)


def test_target_space_pi_draws_on_rho_and_leaves_the_weight_to_scale_them():
    """target_space="pi" (issue 31's study variant): π itself is (1 − η)·ρ + η·base, by hand from the analytic Gaussian ρ
    and the EDM log-normal base (no division by w), so φ = π·w is tilted by the EDM weight, far from ρ; tv_pi_rho is
    TV(π, ρ) by hand; the stored schedule keeps the setting; the other adaptive samplers, floor_space='pi' with it and
    bad values are refused."""
    floor = 0.4  # large, so that a π without the floor, or with it mixed in φ, is far from the expected one
    sched = EDMEulerScheduler()
    s = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, warmup_steps=2, refresh_every=1, floor=floor, target_space="pi")
    _feed(s, steps=8, batch=8192)
    edges, base = grid_by_hand("ve", sched)
    width = edges[1] - edges[0]
    sig = np.exp(0.5 * (edges[1:] + edges[:-1]))
    rho = gauss_mmse(sig, S_D) / sig**2
    rho = rho / rho.sum()
    pi = _pi_masses(s, sig, width)
    expected = (1 - floor) * rho + floor * base
    assert total_variation(pi, expected) <= 0.02, total_variation(pi, expected)
    assert total_variation(pi, rho) > 0.15 and total_variation(rho, base) > 0.3  # the floor is visible
    w = weight_by_hand("sample", "edm", sig)
    assert total_variation(pi * w, rho) > 0.2  # φ = π·w, far from ρ: not the method
    assert s._allocation_total_variation() == pytest.approx(total_variation(pi * w, s._rho_mass().numpy()), abs=1e-6)
    assert s.last_refresh["tv_pi_rho"] == pytest.approx(total_variation(pi, s._rho_mass().numpy()), abs=1e-6)
    assert s.metrics()["infonoise/tv_pi_rho"] == s.last_refresh["tv_pi_rho"]  # what a tracker logs
    s.save_to_scheduler(sched)
    assert read_schedule(sched)["tv_pi_rho"] == pytest.approx(s.last_refresh["tv_pi_rho"])
    b = InfoNoiseTrainingTimestepSampler.from_scheduler(type(sched).from_config(sched.config))
    assert b.settings.target_space == "pi" and torch.equal(b.probs, s.probs)
    for bad in ("x", None, 1):
        with pytest.raises(ValueError, match="target_space"):
            InfoNoiseTrainingTimestepSampler.from_scheduler(EDMEulerScheduler(), target_space=bad)
    with pytest.raises(ValueError, match="floor_space"):
        InfoNoiseTrainingTimestepSampler.from_scheduler(EDMEulerScheduler(), target_space="pi", floor_space="pi")
    for other in ("kingma_gao", "loss_slope"):
        with pytest.raises(ValueError, match="target_space"):
            make_sampler(other, EDMEulerScheduler(), target_space="pi")


@pytest.mark.parametrize("space", ["importance", "rho_draws"])
def test_importance_target_spaces_realise_rho_by_draws_and_a_per_sample_factor(space):
    """target_space="importance" / "rho_draws" (issue 47's candidate B and its split, docs/METHOD.md §4): the draws are
    (1 − η)·ρ·ŝ + η·base with ŝ = m̂ (or 1), by hand from Gaussian data of std 0.125 (≠ σ_d, so that B differs from
    the paper's ρ/w: METHOD.md §2's ρ ∝ m/σ², m = σ²s²/(σ²+s²)); each draw's factor c·ρ/(π·w) has mean 1 under π and
    the draws weighted by w·factor follow ρ (the effective allocation); VP is refused."""
    s_d, floor = 0.125, 0.2
    sched = EDMEulerScheduler()
    s = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, warmup_steps=2, refresh_every=1, floor=floor, target_space=space)
    _feed(s, steps=8, batch=8192, mmse=lambda sig: gauss_mmse(sig, s_d))
    edges, base = grid_by_hand("ve", sched)
    width = edges[1] - edges[0]
    sig = np.exp(0.5 * (edges[1:] + edges[:-1]))
    m = gauss_mmse(sig, s_d)
    rho = m / sig**2
    draws = rho * m if space == "importance" else rho
    expected = (1 - floor) * draws / draws.sum() + floor * base
    pi = _pi_masses(s, sig, width)
    assert total_variation(pi, expected) <= 0.02, total_variation(pi, expected)
    levels = s.sample(200_000, generator=torch.Generator().manual_seed(1))
    factor = levels.loss_weights.double()
    assert float(factor.mean()) == pytest.approx(1.0, abs=0.02)
    w = torch.from_numpy(weight_by_hand("sample", "edm", levels.sigmas.double().numpy()))
    k = np.clip(np.searchsorted(edges, np.log(levels.sigmas.double().numpy())) - 1, 0, len(sig) - 1)
    phi = np.bincount(k, weights=(w * factor).numpy(), minlength=len(sig))
    assert total_variation(phi, rho) <= 0.03, total_variation(phi, rho)
    assert s._allocation_total_variation() == pytest.approx(0.0, abs=1e-12)  # φ = ρ̂ by construction
    assert s.metrics()["infonoise/tv_pi_rho"] == pytest.approx(total_variation(pi, rho), abs=0.02)
    s.save_to_scheduler(sched)
    assert read_schedule(sched)["tv_pi_rho"] == pytest.approx(s.metrics()["infonoise/tv_pi_rho"])
    with pytest.raises(ValueError, match="target_space: .* VP path"):
        InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler(), target_space=space)
    with pytest.raises(ValueError, match="floor_space"):
        InfoNoiseTrainingTimestepSampler.from_scheduler(sched, target_space=space, floor_space="pi")
