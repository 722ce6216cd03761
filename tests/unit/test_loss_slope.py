"""The loss-slope sampler (CDCD-style time warping, METHOD.md §5.11) against closed forms: for Gaussian data of
variance s² the Bayes x0 error is mmse(σ) = σ²s²/(σ²+s²), so F is known and so is its slope over ln σ,
dF/d ln σ = 2σ²s⁴/(σ²+s²)² = (s²/2)·sech²(ln σ − ln s), peaked at σ = s."""

from __future__ import annotations

import math

import pytest
import torch
from diffusers import EDMEulerScheduler

from diffusers_infonoise import LossSlopeSampler, make_sampler
from diffusers_infonoise.sampler.loss_slope import isotonic_increasing

S2 = 0.25  # the data's variance s² (s = 0.5)


def _fed_the_bayes_error(smoothing: float, s2: float = S2) -> LossSlopeSampler:
    """A loss-slope sampler on the EDM path whose m̂ is the Bayes error of N(0, s2) data at every bin centre."""
    scheduler = EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5)
    sampler = make_sampler("loss_slope", scheduler, warmup_steps=0, smoothing=smoothing)
    sig = torch.exp(sampler.estimator.centers)
    levels = sampler._levels_at(sig.repeat(8))
    sig = levels.sigmas.double()  # the float32 levels the sampler bins
    sampler.update(levels, sig**2 * s2 / (sig**2 + s2))  # prediction_type "sample": the loss is the x0 error
    assert sampler._refresh_now(ema_decay=0.0)
    return sampler


def _closed_form_pi(sampler: LossSlopeSampler, s2: float = S2) -> torch.Tensor:
    """The bin masses of dF/d ln σ, F(e_{k+1}) − F(e_k) with F = mmse at the edges, normalised, then the floor."""
    e = torch.exp(sampler.estimator.edges)
    f = e**2 * s2 / (e**2 + s2)
    slope = (f[1:] - f[:-1]) / (f[-1] - f[0])
    return (1 - sampler.settings.floor) * slope + sampler.settings.floor * sampler.base_masses


def test_pi_is_the_slope_of_the_gaussian_mmse_over_log_sigma():
    """Without smoothing the sampler's masses are central differences of F at the bin centres. Against the exact
    bin masses their error is h³F'''/6 − h³F'''/24 = h³F'''/8 per bin (h the bin width in ln σ), so
    TV ≈ ½·(1 − η)·(h²/8)·∫|F'''| / ∫F'. With F' = (s²/2)·sech²(u): ∫F' = s², ∫|F'''| = (s²/2)·4·max|d sech²/du|
    = (s²/2)·4·(4/(3√3)), hence TV ≈ ½·0.95·(h²/8)·(8/(3√3)) = 0.0025 at h = ln(80/0.002)/64."""
    sampler = _fed_the_bayes_error(smoothing=0.0)
    exact = _closed_form_pi(sampler)
    h = float(sampler.estimator.edges[1] - sampler.estimator.edges[0])
    predicted = 0.5 * 0.95 * h**2 / 8 * 8 / (3 * math.sqrt(3))
    tv = 0.5 * float((sampler.probs - exact).abs().sum())
    assert tv == pytest.approx(predicted, rel=0.1)
    assert float(sampler.probs.sum()) == pytest.approx(1.0, abs=1e-12) and bool((sampler.probs > 0).all())
    # the draws peak where the loss rises fastest: σ = s, within a bin
    mode = float(sampler.estimator.centers[int(sampler.probs.argmax())])
    assert abs(mode - math.log(math.sqrt(S2))) <= h
    # F is the fit of the Bayes error itself (already non-decreasing: the fit leaves it as it is)
    sig = torch.exp(sampler.estimator.centers).float().double()
    torch.testing.assert_close(sampler.fitted_loss(), sig**2 * S2 / (sig**2 + S2), rtol=1e-6, atol=0)


def test_the_library_defaults_keep_the_closed_form_and_its_peak():
    """With the default smoothing (1 bin on log m̂, as InfoNoise) π still follows the closed form closely and
    peaks at σ = s; for data of another scale (s² = 4) the peak moves with it, by ln 4 = 1.39 in ln σ."""
    for s2 in (S2, 4.0):
        sampler = _fed_the_bayes_error(smoothing=1.0, s2=s2)
        assert 0.5 * float((sampler.probs - _closed_form_pi(sampler, s2)).abs().sum()) < 0.02
        h = float(sampler.estimator.edges[1] - sampler.estimator.edges[0])
        assert abs(float(sampler.estimator.centers[int(sampler.probs.argmax())]) - 0.5 * math.log(s2)) <= h


def test_isotonic_fit_by_hand():
    # the violating pair (3, 2) is pooled into its mean; an already monotone sequence is left as it is
    assert isotonic_increasing(torch.tensor([1.0, 3.0, 2.0, 4.0])).tolist() == [1.0, 2.5, 2.5, 4.0]
    assert isotonic_increasing(torch.tensor([3.0, 1.0, 2.0])).tolist() == [2.0, 2.0, 2.0]
    assert isotonic_increasing(torch.tensor([0.0, 1.0, 5.0])).tolist() == [0.0, 1.0, 5.0]
    with pytest.raises(ValueError, match="values"):
        isotonic_increasing(torch.tensor([1.0, math.nan]))


def test_a_flat_loss_keeps_the_base_and_bad_settings_are_refused():
    sampler = _fed_the_bayes_error(smoothing=0.0, s2=S2)
    # a loss that never changes with σ has no slope: π is the base density
    sampler.estimator.m_hat[:] = 0.3
    torch.testing.assert_close(sampler._build_probs(), sampler.base_masses)
    sched = EDMEulerScheduler()
    with pytest.raises(ValueError, match="gate"):
        make_sampler("loss_slope", sched, gate="auto")
    with pytest.raises(ValueError, match="temperature"):
        make_sampler("loss_slope", sched, temperature=0.5)
    with pytest.raises(ValueError, match="loss_slope: unknown parameter"):
        make_sampler("loss_slope", sched, mean=0.0)


def test_the_training_script_builds_it_with_the_infonoise_flags(script):
    """``--noise_sampler loss_slope`` is one of the script's choices, and the adaptive flags reach it."""
    args = script.parse_args(["--noise_sampler", "loss_slope", "--diffusion", "edm", "--infonoise_warmup_steps", "7",
                              "--infonoise_floor", "0.1"])  # fmt: skip
    from diffusers_infonoise.objective import Objective
    from diffusers_infonoise.training import build_noise_sampler

    sampler = build_noise_sampler(args, EDMEulerScheduler(), objective=Objective("sample", "edm"))
    assert isinstance(sampler, LossSlopeSampler)
    assert (sampler.warmup_steps, sampler.settings.floor, "floor_space" in sampler.settings.stored()) == (7, 0.1, False)  # always in π
