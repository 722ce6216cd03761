"""Target C (issue 47, docs/METHOD.md §4.1): the learning exponent β = −d ln e/d ln n fitted from windows of errors
that follow a known power law, and the draws π = (1 − η)·ρ̂·β·m̂ (normalised) + η·base built by hand from it.

The learning curves here are written by hand: a bin's window mean is c_k·n^−β at the window's middle in draws, so the
exponent is known exactly; the draws' density is formed from the Gaussian MMSE (helpers.reference) and np.interp.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from diffusers import DDPMScheduler, EDMEulerScheduler

from diffusers_infonoise import InfoNoiseTrainingTimestepSampler
from diffusers_infonoise.reducibility import PLATEAU, LearningExponents, fit_horizon
from diffusers_infonoise.schedule_io import ScheduleError

from helpers.reference import gauss_mmse, grid_by_hand, total_variation


def _power_law_windows(exps, counts, scales, steps):
    """Feed ``steps`` windows of ``counts`` (K,) samples a bin whose mean is ``scales·n_mid^−exps`` exactly (n_mid: the
    bin's draws before the window plus half of it), one optimizer step apart, with no decay."""
    fit = LearningExponents(len(counts), num_groups=2, min_count=4)
    draws = np.zeros(len(counts))
    for step in range(1, steps + 1):
        n = np.asarray(counts, dtype=float) * (1 + step % 3)  # windows of varying size
        mean = scales * (draws + n / 2) ** (-exps)
        fit.observe(step, torch.tensor(mean * n), torch.tensor(n), memory=1e12)
        draws += n
    return fit


def test_exponent_is_the_power_law_of_each_group_whatever_the_size_of_its_bins_errors():
    """Two groups of two bins, e ∝ n^−0.5 and n^−0.2, each bin with its own scale (the per-bin mean removes it): the
    fitted exponents are 0.5 and 0.2, and R̂ = β·m̂ takes each group's exponent flat beyond the two groups' centres."""
    exps = np.array([0.5, 0.5, 0.2, 0.2])
    fit = _power_law_windows(exps, counts=[8, 20, 5, 40], scales=np.array([1.0, 3.0, 0.01, 7.0]), steps=6)
    assert fit.exponents().tolist() == pytest.approx([0.5, 0.2], abs=1e-9)
    centers = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)  # group centres 0.5 and 2.5
    m_hat = torch.tensor([1.0, 2.0, 4.0, 8.0], dtype=torch.float64)
    expected = [0.5 * 1.0, (0.5 - 0.3 * 0.25) * 2.0, (0.5 - 0.3 * 0.75) * 4.0, 0.2 * 8.0]  # linear between 0.5 and 2.5
    assert fit.reducibility(centers, m_hat).tolist() == pytest.approx(expected, abs=1e-9)


def test_a_rising_error_clips_at_zero_and_no_exponent_before_three_points():
    """An error that grows with the draws (forgetting) gives β = 0, not a negative rate; a group whose bins hold fewer
    than three points has no exponent (NaN), and no R̂ at all while no group has one."""
    rising = _power_law_windows(np.array([-0.3] * 4), counts=[10] * 4, scales=np.ones(4), steps=4)
    assert rising.exponents().tolist() == [0.0, 0.0]
    young = _power_law_windows(np.array([0.5] * 4), counts=[10] * 4, scales=np.ones(4), steps=2)
    assert bool(torch.isnan(young.exponents()).all())
    assert young.reducibility(torch.arange(4.0), torch.ones(4)) is None


def test_a_plateau_gives_no_r_hat_and_a_long_run_keeps_its_fit():
    """No group sheds more than PLATEAU of its error per e-fold: no R̂ (π follows ρ̂/w). A run of 60,000 steps whose
    estimator memory is capped at 500 steps keeps its groups fitted: the horizon grows to half the steps so far (at a
    fixed 2,000 steps ln n would spread by about 2,000/t, below MIN_SPREAD after about 40,000 steps)."""
    flat = _power_law_windows(np.array([PLATEAU / 2] * 4), counts=[10] * 4, scales=np.ones(4), steps=6)
    assert float(flat.exponents().max()) == pytest.approx(PLATEAU / 2) and flat.reducibility(torch.arange(4.0), torch.ones(4)) is None
    assert fit_horizon(500, 40_000) == 20_000 and fit_horizon(50, 300) == 200
    fit = LearningExponents(2, num_groups=1, min_count=4)
    draws = 0.0
    for step in range(100, 60_001, 100):
        fit.observe(step, torch.tensor([100 * (draws + 50) ** -0.3] * 2), torch.tensor([100.0] * 2), memory=fit_horizon(500, step))
        draws += 100
    assert fit.exponents().tolist() == pytest.approx([0.3], abs=1e-6)  # float64 sums of x ≈ 11 over 600 points


def test_windows_smaller_than_min_count_are_carried_into_one_point():
    """A bin's window of 3 samples (min_count 4) makes no point; the next window's 3 join it: one point of 6 samples,
    whose mean is the six samples' mean, at ln(0 + 6/2)."""
    fit = LearningExponents(2, num_groups=1, min_count=4)
    fit.observe(1, torch.tensor([3.0, 30.0]), torch.tensor([3.0, 10.0]), memory=1e12)
    assert fit.points.tolist() == [0.0, 1.0]
    fit.observe(2, torch.tensor([9.0, 30.0]), torch.tensor([3.0, 10.0]), memory=1e12)
    assert fit.points.tolist() == [1.0, 2.0]
    assert float(fit.sum_x[0]) == pytest.approx(6 * math.log(3.0))
    assert float(fit.sum_y[0]) == pytest.approx(6 * math.log(2.0))  # (3 + 9)/6
    assert fit.draws.tolist() == [6.0, 20.0]


def _sampler(**kwargs):
    settings = {"warmup_steps": 2, "refresh_every": 1, "floor": 0.2, "target_space": "reducible", **kwargs}
    return InfoNoiseTrainingTimestepSampler.from_scheduler(EDMEulerScheduler(), **settings)


def _feed_power_law(sampler, steps, batch, exps_by_group, s_d=0.125, seed=0):
    """Train-loop shaped feed: Gaussian data of std ``s_d``; every draw's x0 error is mmse(σ)·(D + n/2)^−β, D the bin's
    draws before this batch, n its draws in it, β its group's (8 groups of 8 bins): a learning curve known exactly."""
    edges, _ = grid_by_hand("ve", None)
    draws = np.zeros(64)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        levels = sampler.sample(batch, generator=gen)
        sig = levels.sigmas.double().numpy()
        k = np.clip(np.searchsorted(edges, np.log(sig)) - 1, 0, 63)
        n = np.bincount(k, minlength=64).astype(float)
        beta = np.asarray(exps_by_group)[np.arange(64) // 8]
        err = gauss_mmse(sig, s_d) * (np.maximum(draws + n / 2, 0.5) ** (-beta))[k]
        sampler.update(levels, torch.from_numpy(err))
        sampler.step()
        draws += n
    return sampler


def test_sampler_fits_each_groups_exponent_from_its_training_windows():
    """End to end through update/step: the refresh's windows reach the fit, whose exponents are the learning curves'
    (within 0.02 where every bin's windows emit at once; the tail groups carry small windows over)."""
    exps = [0.1, 0.2, 0.3, 0.4, 0.5, 0.4, 0.3, 0.2]
    s = _feed_power_law(_sampler(), steps=12, batch=4096, exps_by_group=exps)
    beta = s.reducibility.exponents().numpy()
    assert np.abs(beta[2:6] - exps[2:6]).max() < 0.02, beta
    logged = [None if math.isnan(b) else pytest.approx(round(float(b), 4)) for b in beta]
    assert s.last_refresh["learning_exponents"] == logged  # what each refresh logs (null: not fitted)


def test_draws_are_rho_times_r_hat_by_hand_and_fall_back_to_the_paper_rule_before_a_fit():
    """Gaussian data of std 0.125 (exact Bayes losses, constant: m̂ is their MMSE): before any exponent π is the paper's
    ρ/w; with a hand-set fit (β 0.5 on the lower four groups, 0.25 on the upper four), π = (1 − η)·ρ·β·m/Σ + η·base,
    ρ ∝ m/σ² (METHOD.md §2), β linear in ln σ between the groups' centres (np.interp)."""
    s_d, floor = 0.125, 0.2
    s = _sampler(refresh_every=100, gate=None)  # no refresh of training draws: the exponents stay unfitted
    paper = InfoNoiseTrainingTimestepSampler.from_scheduler(EDMEulerScheduler(), warmup_steps=2, refresh_every=100, floor=floor, gate=None)
    edges, base = grid_by_hand("ve", None)
    centres = 0.5 * (edges[1:] + edges[:-1])
    sig = np.exp(centres)
    m = gauss_mmse(sig, s_d)
    for sampler in (s, paper):
        sampler.estimator.load_m_hat(torch.from_numpy(edges), torch.from_numpy(m))
    assert torch.allclose(s._build_probs(), paper._build_probs(), atol=1e-12)
    fit = _power_law_windows(np.array([0.5, 0.5, 0.25, 0.25]), counts=[10] * 4, scales=np.ones(4), steps=4)
    state = {k: (v.repeat_interleave(16) if isinstance(v, torch.Tensor) else v) for k, v in fit.state_dict().items()}
    s.reducibility.load_state_dict(state)  # bins 0-31 as bins 0-1 of the small fit, 32-63 as 2-3: β 0.5 | 0.25
    beta = s.reducibility.exponents().numpy()
    assert beta == pytest.approx([0.5] * 4 + [0.25] * 4, abs=1e-9)
    group_centres = centres.reshape(8, 8).mean(axis=1)
    beta_bins = np.interp(centres, group_centres, beta)
    rho = m / sig**2
    draws = rho * beta_bins * m
    expected = (1 - floor) * draws / draws.sum() + floor * base
    assert total_variation(s._build_probs().numpy(), expected) < 0.01  # m̂'s smoothing of 1 bin is the difference


def test_resume_and_stored_schedule_carry_the_fit():
    """A checkpoint resumes the fit bit-exactly (the next refreshes give the same π); a stored schedule rebuilds the
    same π (checked against its m̂ and its fit, so an edited fit is refused); a VP path takes the target too."""
    a = _feed_power_law(_sampler(), steps=6, batch=2048, exps_by_group=[0.3] * 8)
    assert s_fitted(a)
    b = _sampler()
    b.load_state_dict(a.state_dict())
    _feed_power_law(a, steps=3, batch=2048, exps_by_group=[0.3] * 8, seed=5)
    _feed_power_law(b, steps=3, batch=2048, exps_by_group=[0.3] * 8, seed=5)
    assert torch.equal(a.probs, b.probs)
    sched = EDMEulerScheduler()
    a.save_to_scheduler(sched)
    c = InfoNoiseTrainingTimestepSampler.from_stored(sched)
    assert torch.allclose(c.probs, a.probs, atol=1e-12)
    payload = dict(sched.config["_infonoise_schedule"])
    payload["reducibility"] = {**payload["reducibility"], "sum_xy": [0.0] * 64}
    with pytest.raises(ScheduleError, match="does not follow"):
        InfoNoiseTrainingTimestepSampler.from_stored(sched, payload=payload)
    for bad in ({**payload["reducibility"], "draws": [-1.0] * 64}, {**payload["reducibility"], "sum_x": "abc"}, None):
        with pytest.raises(ScheduleError, match="reducibility"):
            InfoNoiseTrainingTimestepSampler.from_stored(sched, payload={**payload, "reducibility": bad})
    # a refused checkpoint (another grid) leaves the fit as it was; fewer bins than groups: one group a bin
    before = b.reducibility.state_dict()
    other = _sampler(num_bins=32)
    with pytest.raises(ValueError, match="num_bins"):
        b.load_state_dict(other.state_dict())
    assert all(torch.equal(before[k], v) for k, v in b.reducibility.state_dict().items() if k != "last_step")
    assert _sampler(num_bins=4).reducibility.num_groups == 4
    assert InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler(), target_space="reducible").reducibility is not None


def s_fitted(sampler) -> bool:
    return bool((~torch.isnan(sampler.reducibility.exponents())).any())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_bins": 1}, "num_bins"),
        ({"num_bins": 8, "num_groups": 0}, "num_groups"),
        ({"num_bins": 8, "min_count": 0}, "min_count"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LearningExponents(kwargs.pop("num_bins"), **kwargs)
