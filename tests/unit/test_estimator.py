"""The online estimator and InfoNoise's π (METHOD.md §2-§5).

The end-to-end tests feed a sampler the exact Bayes-optimal errors of Gaussian and two-point data
and compare its π with the analytic ρ/w of METHOD.md, built here from the closed forms, on a grid
and base masses computed here too (scipy / the scheduler's ᾱ table).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

from diffusers_infonoise import InfoNoiseTrainingTimestepSampler, NoiseLevels
from diffusers_infonoise.estimator import ProfileEstimator

from helpers.reference import factor_by_hand, gauss_mmse, grid_by_hand, total_variation, two_point_mmse, weight_by_hand

F64 = torch.float64
K = 64
S_D = 0.5


def test_two_point_reference_against_monte_carlo():
    """The reference itself: mmse = E[(x0 − tanh(x/σ²))²] by simulation (x0 = ±1)."""
    gen = torch.Generator().manual_seed(0)
    n = 400_000
    for sigma in (0.3, 0.6, 1.0, 2.0, 8.0):
        x0 = torch.randint(0, 2, (n,), generator=gen, dtype=F64) * 2 - 1
        x = x0 + sigma * torch.randn(n, generator=gen, dtype=F64)
        err = (x0 - torch.tanh(x / sigma**2)) ** 2
        se = float(err.std()) / math.sqrt(n)
        assert float(two_point_mmse(sigma)) == pytest.approx(float(err.mean()), abs=5 * se)
    assert float(two_point_mmse(0.01)) == 0.0 and float(two_point_mmse(1e4)) == pytest.approx(1.0, abs=1e-7)


# ----------------------------------------------------------------------------------------------
# end to end: exact Bayes-optimal errors → π ≈ analytic ρ/w
# ----------------------------------------------------------------------------------------------


def _hand_paper_pivot(sig, m, fallback):
    """METHOD.md §5.5, the rule as first implemented (``gate="paper"``): c = largest σ with normalised
    m/σ³ ≥ 0.002; fallback on collapse or c ≥ mode."""
    per = m / sig**3
    per = per / per.max()
    c = sig[np.nonzero(per >= 0.002)[0].max()]
    mode = sig[np.argmax(m / sig**2)]
    return fallback if (c <= sig[0] or c >= mode) else c


def _hand_profile_pivot(sig, m):
    """METHOD.md §5.5, the rule repaired (``gate="profile"``): c = smallest σ with normalised m/σ³ ≥
    0.002, scanning up from the clean end; no gate when that is already σ_min."""
    per = m / sig**3
    per = per / per.max()
    i = np.nonzero(per >= 0.002)[0].min()
    return None if i == 0 else sig[i]


SCHEDULERS = {"ve": EDMEulerScheduler, "vp": DDPMScheduler, "flow": FlowMatchEulerDiscreteScheduler}
END_TO_END = [
    # (path, prediction type, loss weighting)
    ("ve", "sample", "edm"),
    ("vp", "epsilon", "none"),
    ("vp", "v_prediction", "none"),
    ("flow", "flow", "none"),
]


@pytest.mark.parametrize("data", ["gauss", "two_point"])
@pytest.mark.parametrize("kind,pred,weighting", END_TO_END)
def test_pi_matches_analytic_rho_over_w(kind, pred, weighting, data):
    gate, floor = 0.2, 0.05
    _run_end_to_end(kind, pred, weighting, data, gate=gate, floor=floor)


@pytest.mark.parametrize("kind,pred,weighting,data", [("ve", "sample", "edm", "two_point"), ("flow", "flow", "none", "gauss")])
@pytest.mark.parametrize("gate", ["paper", "profile"])
def test_pi_matches_analytic_with_profile_gate_rules(kind, pred, weighting, data, gate):
    _run_end_to_end(kind, pred, weighting, data, gate=gate, floor=0.05)


@pytest.mark.parametrize("data", ["gauss", "two_point"])
def test_pi_matches_analytic_with_data_grid_gate(data):
    # "auto": a tenth of the smallest gap between the values of the data noised through the sampler:
    # 0.2 for two-point data {-1, 1}, no gate for continuous Gaussian data (METHOD.md §5.5)
    _run_end_to_end("ve", "sample", "edm", data, gate="auto", floor=0.05, observe=data)


@pytest.mark.parametrize("kind,pred,weighting", [("vp", "epsilon", "none")])
def test_pi_matches_analytic_without_gate(kind, pred, weighting):
    _run_end_to_end(kind, pred, weighting, "gauss", gate=None, floor=0.0)


def _run_end_to_end(kind, pred, weighting, data, *, gate, floor, steps=10, batch=8192, observe=None):
    sched = SCHEDULERS[kind]()
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(
        sched,
        prediction_type=pred,
        loss_weighting=weighting,
        warmup_steps=2,
        refresh_every=1,
        gate=gate,
        floor=floor,
        num_bins=K,
    )
    mmse = (lambda s: gauss_mmse(s, S_D)) if data == "gauss" else two_point_mmse
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        levels = sampler.sample(batch, generator=gen)
        if observe is not None:  # clean data through add_noise, as a training loop does
            x0 = torch.randn(batch, 4, generator=gen, dtype=torch.float64) * S_D
            if observe == "two_point":
                x0 = torch.sign(x0)
            sampler.add_noise(x0, torch.randn_like(x0), levels)
        sig = levels.sigmas.double().numpy()
        # the expected per-sample loss of the Bayes-optimal predictor, in the model's parameterization
        loss = mmse(sig) / factor_by_hand(pred, sig)
        sampler.update(levels, torch.from_numpy(loss))
        sampler.step()
    assert sampler.is_adapted

    edges, base = grid_by_hand(kind, sched)
    width = edges[1] - edges[0]
    sig = np.exp(0.5 * (edges[1:] + edges[:-1]))
    m = mmse(sig)
    if gate == "paper":
        pivot = _hand_paper_pivot(sig, m, 0.2)
    elif gate == "profile":
        pivot = _hand_profile_pivot(sig, m)
    elif gate == "auto":
        pivot = 0.2 if observe == "two_point" else None  # Gaussian values: gap ≈ 0, below σ_min
    else:
        pivot = gate
    rho = m / sig**2  # entropy rate per unit log σ (I-MMSE)
    if pivot is not None:
        rho = rho * sig**3 / (sig**3 + pivot**3)
    rho = rho / rho.sum()
    w = weight_by_hand(pred, weighting, sig)
    # the floor lives in the space of the effective allocation φ = π·w (METHOD.md §5.7)
    phi_base = base * w / (base * w).sum()
    phi = (1 - floor) * rho + floor * phi_base
    target = phi / w
    target = target / target.sum()

    got = torch.exp(sampler._log_prob(torch.from_numpy(sig))).numpy() * width  # π-mass of each bin
    assert got.sum() == pytest.approx(1.0, abs=1e-9)
    tv = total_variation(got, target)
    assert tv < 0.02, tv
    # not trivially close: the adapted π is far from the base it started from
    assert total_variation(got, base) > 0.1
    # the check of METHOD.md §5: the effective allocation follows the analytic ρ within η + 0.02,
    # and the library's own figure agrees
    phi_got = got * w / (got * w).sum()
    assert total_variation(phi_got, rho) <= floor + 0.02
    assert sampler._allocation_total_variation() <= floor + 0.02
    if gate == "auto":
        assert sampler.estimator.last_gate.source == "data"
        assert sampler.estimator.last_gate.pivot == (pytest.approx(0.2) if pivot else None)


# ----------------------------------------------------------------------------------------------
# warm-up, refresh cadence, EMA, min_count, interpolation, smoothing
# ----------------------------------------------------------------------------------------------


def _edm_base_log_prob(x):
    """log of EDM's N(−1.2, 1.2²) in ln σ truncated to [ln 0.002, ln 80] (scipy)."""
    from scipy import stats

    z = stats.norm.cdf(math.log(80.0), -1.2, 1.2) - stats.norm.cdf(math.log(0.002), -1.2, 1.2)
    return stats.norm.logpdf(x, -1.2, 1.2) - math.log(z)


def test_warmup_counts_optimizer_steps_not_micro_batches():
    warmup, micro, batch = 6, 3, 512
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(EDMEulerScheduler(), warmup_steps=warmup, refresh_every=4, min_count=1)
    probe = np.linspace(math.log(0.003), math.log(70.0), 25)
    probe_t = torch.from_numpy(np.exp(probe))
    gen = torch.Generator().manual_seed(0)
    fed = 0
    for step in range(1, 9):
        for _ in range(micro):  # gradient accumulation: several update() per optimizer step
            levels = sampler.sample(batch, generator=gen)
            sampler.update(levels, torch.full((batch,), 0.1) * levels.sigmas**2 / (1 + levels.sigmas**2))
            fed += batch
        before = sampler._log_prob(probe_t).numpy()
        sampler.step()
        after = sampler._log_prob(probe_t).numpy()
        if step < warmup:
            np.testing.assert_allclose(after, _edm_base_log_prob(probe), rtol=0, atol=1e-10)
            assert not sampler.is_adapted
        elif step == warmup:
            np.testing.assert_allclose(before, _edm_base_log_prob(probe), rtol=0, atol=1e-10)
            assert sampler.is_adapted
            assert np.abs(after - before).max() > 0.5
            # statistics were collected from step 0: every sample fed so far is in the bins
            assert float(sampler.estimator.total_counts.sum()) == fed
        elif step == 7:  # between refreshes (4, 6, 8): π is held fixed
            np.testing.assert_array_equal(after, before)


def test_ema_weight_on_old_value_two_refreshes_by_hand():
    edges = torch.linspace(0.0, 4.0, 5, dtype=F64)  # bins [0,1), [1,2), [2,3), [3,4]
    est = ProfileEstimator(edges, ema_decay=0.75, min_count=1, smoothing=0.0, gate=None)
    est.accumulate(torch.tensor([1.5, 1.2, 3.5], dtype=F64), torch.tensor([1.0, 3.0, 5.0], dtype=F64))
    est.refresh()
    assert est.m_hat[1].item() == 2.0 and est.m_hat[3].item() == 5.0  # first value taken as is
    assert math.isnan(est.m_hat[0].item()) and math.isnan(est.m_hat[2].item())
    est.accumulate(torch.tensor([1.9, 3.1], dtype=F64), torch.tensor([6.0, 1.0], dtype=F64))
    est.refresh()
    assert est.m_hat[1].item() == pytest.approx(0.75 * 2.0 + 0.25 * 6.0, abs=1e-15)  # 3.0
    assert est.m_hat[3].item() == pytest.approx(0.75 * 5.0 + 0.25 * 1.0, abs=1e-15)  # 4.0


def test_sampler_pi_is_q_over_w_after_ema_by_hand():
    """Whole chain on exact bin centres: m̂ = β·m1 + (1 − β)·m2, q = m̂/σ², π ∝ q/w (no gate, floor 0; m2 = σ³
    exceeds the clean-end bound σ² above σ = 1, so the bound is off here and tested on its own)."""
    beta = 0.6
    for pred, weighting in (("sample", "none"), ("epsilon", "none"), ("sample", "edm")):
        sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(
            EDMEulerScheduler(),
            prediction_type=pred,
            loss_weighting=weighting,
            num_bins=16,
            warmup_steps=2,
            refresh_every=1,
            ema_decay=beta,
            min_count=1,
            smoothing=0.0,
            gate=None,
            floor=0.0,
            clean_end_bound=False,
        )
        edges = np.linspace(math.log(0.002), math.log(80.0), 17)
        sig = np.exp(0.5 * (edges[1:] + edges[:-1]))
        levels = NoiseLevels(torch.zeros(16), torch.from_numpy(sig).float(), torch.from_numpy(-2 * np.log(sig)).float())
        c = sig**2 if pred == "epsilon" else np.ones_like(sig)
        m1, m2 = sig**2, sig**3  # x0-space errors of the two refreshes
        sampler.update(levels, torch.from_numpy(m1 / c))
        sampler.step()
        sampler.update(levels, torch.from_numpy(m2 / c))
        sampler.step()
        m = beta * m1 + (1 - beta) * m2
        w = (sig**2 + 0.25) / (sig * 0.5) ** 2 if weighting == "edm" else (1 / sig**2 if pred == "epsilon" else 1.0)
        pi = (m / sig**2) / w
        pi = pi / pi.sum()
        got = torch.exp(sampler._log_prob(torch.from_numpy(sig))).numpy() * (edges[1] - edges[0])
        np.testing.assert_allclose(got, pi, rtol=2e-6)  # float32 σ in NoiseLevels


def test_min_count_new_samples():
    edges = torch.linspace(0.0, 3.0, 4, dtype=F64)
    est = ProfileEstimator(edges, min_count=3, smoothing=0.0, gate=None, ema_decay=0.5)
    est.accumulate(torch.tensor([0.5, 0.5, 1.5, 1.5, 1.5], dtype=F64), torch.tensor([9.0, 9.0, 1.0, 2.0, 3.0], dtype=F64))
    updated = est.refresh()
    assert updated.tolist() == [False, True, False]
    assert math.isnan(est.m_hat[0].item()) and est.m_hat[1].item() == 2.0
    # bin 0's two samples stay open (METHOD.md §5.4 carry-over): with three new ones it has 5 >= 3,
    # and its first value is the mean of all five, (9 + 9 + 1 + 1 + 4)/5 = 4.8
    est.accumulate(torch.tensor([0.2, 0.3, 0.4], dtype=F64), torch.tensor([1.0, 1.0, 4.0], dtype=F64))
    assert est.refresh().tolist() == [True, False, False]
    assert est.m_hat[0].item() == pytest.approx(4.8) and est.m_hat[1].item() == 2.0
    # every bin that updated was reset: nothing is carried
    assert est.carry_counts.tolist() == [0.0, 0.0, 0.0]


def test_unvisited_bins_are_interpolated_in_log_sigma():
    edges = torch.linspace(0.0, 8.0, 9, dtype=F64)  # centres 0.5 … 7.5
    est = ProfileEstimator(edges, min_count=1, smoothing=0.0, gate=None)
    a, b = 0.3, 4.0
    est.accumulate(torch.tensor([2.5, 5.5], dtype=F64), torch.tensor([a, b], dtype=F64))
    est.refresh()
    m = est.filled_m_hat().numpy()
    x = np.arange(8) + 0.5
    la, lb = math.log(a), math.log(b)
    expected = np.empty(8)
    expected[2], expected[5] = la, lb
    expected[3] = la + (lb - la) / 3
    expected[4] = la + 2 * (lb - la) / 3
    expected[:2] = la + 2.0 * (x[:2] - 2.5)  # below: m̂ ∝ σ² (continuous-data limit)
    expected[6:] = lb  # above: m̂ constant (→ Var x0)
    np.testing.assert_allclose(np.log(m), expected, rtol=0, atol=1e-12)
    with pytest.raises(RuntimeError):
        ProfileEstimator(edges).filled_m_hat()


def test_smoothing_kernel_by_hand():
    edges = torch.linspace(0.0, 21.0, 22, dtype=F64)
    est = ProfileEstimator(edges, min_count=1, smoothing=1.0, gate=None)
    centres = 0.5 * (edges[1:] + edges[:-1])
    y = torch.zeros(21, dtype=F64)
    y[10] = 1.0  # log m̂: a unit spike
    est.accumulate(centres, torch.exp(y))
    est.refresh()
    got = torch.log(est.filled_m_hat()).numpy()
    k = np.exp(-0.5 * np.arange(-3, 4) ** 2)
    k /= k.sum()  # Gaussian, std 1 bin, truncated at 3 std
    expected = np.zeros(21)
    expected[7:14] = k
    np.testing.assert_allclose(got, expected, atol=1e-12)
    # a linear trend in log m̂ (both ends of a continuous-data profile) is left exactly unchanged
    est2 = ProfileEstimator(edges, min_count=1, smoothing=2.0, gate=None)
    est2.accumulate(centres, torch.exp(0.3 * centres - 1.0))
    est2.refresh()
    np.testing.assert_allclose(torch.log(est2.filled_m_hat()).numpy(), (0.3 * centres - 1.0).numpy(), atol=1e-12)


def test_nonfinite_losses_are_excluded_and_counted():
    def make():
        return InfoNoiseTrainingTimestepSampler.from_scheduler(EDMEulerScheduler(), warmup_steps=1, refresh_every=1)

    a, b = make(), make()
    levels = a.sample(4096, generator=torch.Generator().manual_seed(3))
    loss = levels.sigmas**2 / (1 + levels.sigmas**2)
    bad = torch.zeros(4096, dtype=torch.bool)
    bad[::7] = True
    loss_a = loss.clone()
    loss_a[::7] = torch.tensor([math.nan, math.inf] * 293)[: int(bad.sum())]
    a.update(levels, loss_a)
    keep = ~bad
    b.update(NoiseLevels(levels.timesteps[keep], levels.sigmas[keep], levels.log_snr[keep]), loss[keep])
    a.step()
    b.step()
    assert a._num_nonfinite == int(bad.sum()) and b._num_nonfinite == 0
    assert torch.equal(a.probs, b.probs) and bool(torch.isfinite(a.probs).all())


def test_sigmas_outside_grid_are_left_out_counted_and_warned():
    """Levels beyond the grid used to land in the edge bins and bias them silently (issue 20)."""
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(
        EDMEulerScheduler(), num_bins=8, warmup_steps=1, refresh_every=1, min_count=1, smoothing=0.0
    )
    # four levels far outside [0.002, 80]; the grid's own ends in float32 (rounding) and one inside count
    sig = torch.tensor([1e-7, 1e-4, 500.0, 1e8, 0.002, 80.0, 1.0], dtype=torch.float32)
    levels = NoiseLevels(0.25 * torch.log(sig), sig, -2 * torch.log(sig))
    sampler.update(levels, torch.tensor([1.0, 3.0, 10.0, 20.0, 2.0, 15.0, 0.5]))
    assert sampler._num_outside == 4
    with pytest.warns(UserWarning, match=r"4 noise levels given to update\(\) lay outside the sampler's grid \(VE sigma 0.002 to 80\)"):
        sampler.step()
    m = sampler.estimator.m_hat
    assert m[0].item() == 2.0 and m[-1].item() == 15.0  # only the in-grid ends, not the means with the outliers
    assert int(sampler.estimator.total_counts.sum()) == 3
    # ±inf log σ too (bin index only; a σ = inf VP step)
    idx = sampler.estimator.bin_index(torch.tensor([-math.inf, math.inf], dtype=F64))
    assert idx.tolist() == [0, 7]


def test_floor_one_gives_base_masses():
    sched = DDPMScheduler()
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, warmup_steps=1, refresh_every=1, floor=1.0)
    levels = sampler.sample(2048, generator=torch.Generator().manual_seed(0))
    sampler.update(levels, torch.rand(2048))
    sampler.step()
    edges, base = grid_by_hand("vp", sched)
    sig = np.exp(0.5 * (edges[1:] + edges[:-1]))
    got = torch.exp(sampler._log_prob(torch.from_numpy(sig))).numpy() * (edges[1] - edges[0])
    np.testing.assert_allclose(got, base, rtol=1e-9, atol=1e-15)


# ----------------------------------------------------------------------------------------------
# the gate (METHOD.md §5.5)
# ----------------------------------------------------------------------------------------------

GRID = torch.linspace(math.log(0.002), math.log(80.0), 33, dtype=F64)
CENTRES = 0.5 * (GRID[1:] + GRID[:-1])
SIG = torch.exp(CENTRES).numpy()


def _estimator_with(m, fallback=0.15, gate="paper"):
    est = ProfileEstimator(GRID, min_count=1, smoothing=0.0, gate=gate, gate_fallback=fallback)
    est.accumulate(CENTRES, torch.from_numpy(np.asarray(m, dtype=np.float64)))
    est.refresh()
    return est


def _hand_rho(m, pivot):
    q = m / SIG**2
    r = q * SIG**3 / (SIG**3 + pivot**3)
    return r / (r * float(GRID[1] - GRID[0])).sum()


def test_paper_gate_collapse_onto_sigma_min_falls_back():
    m = SIG**2 * np.where(np.arange(32) == 0, 1.0, 1e-6)  # only the first bin is above p = 0.002
    per = m / SIG**3
    assert np.nonzero(per / per.max() >= 0.002)[0].max() == 0  # by hand: the rule collapses
    est = _estimator_with(m)
    rho, _ = est.profile()
    gate = est.last_gate
    assert gate.source == "fallback" and "collapse" in gate.reason and gate.pivot == 0.15
    assert gate.auto_pivot == pytest.approx(SIG[0])
    np.testing.assert_allclose(rho.numpy(), _hand_rho(m, 0.15), rtol=1e-12)


@pytest.mark.parametrize("profile", ["two_point", "gauss"])
def test_paper_gate_at_or_above_mode_falls_back(profile):
    m = two_point_mmse(SIG) if profile == "two_point" else gauss_mmse(SIG, S_D)
    per = m / SIG**3
    c_hand = SIG[np.nonzero(per / per.max() >= 0.002)[0].max()]
    mode_hand = SIG[np.argmax(m / SIG**2)]
    assert c_hand >= mode_hand and c_hand > SIG[0]  # by hand: the misfire of METHOD.md §5.5
    est = _estimator_with(m)
    rho, _ = est.profile()
    assert est.last_gate.source == "fallback" and "mode" in est.last_gate.reason
    assert est.last_gate.auto_pivot == pytest.approx(c_hand, rel=1e-12)
    np.testing.assert_allclose(rho.numpy(), _hand_rho(m, 0.15), rtol=1e-10, atol=1e-290)


def test_paper_gate_accepted_below_the_mode():
    # continuous clean end (q → D) plus a dominant bump at σ ≈ 20: m̂/σ³ falls below p between them (scaled so
    # that q ≤ 1, the clean-end bound of METHOD.md §5.10; the rule is scale-free)
    x = np.log(SIG)
    q = (1.0 + 6.0 * np.exp(-0.5 * ((x - math.log(20.0)) / 0.3) ** 2)) / 7.0
    m = q * SIG**2
    per = m / SIG**3
    c_hand = SIG[np.nonzero(per / per.max() >= 0.002)[0].max()]
    mode_hand = SIG[np.argmax(q)]
    assert SIG[0] < c_hand < mode_hand
    est = _estimator_with(m)
    rho, q_code = est.profile()
    assert est.last_gate.source == "paper" and est.last_gate.pivot == pytest.approx(c_hand, rel=1e-12)
    np.testing.assert_allclose(rho.numpy(), _hand_rho(m, c_hand), rtol=1e-10)
    np.testing.assert_allclose(q_code.numpy(), q, rtol=1e-12)


def test_pinned_and_no_gate():
    m = gauss_mmse(SIG, S_D)
    est = _estimator_with(m, gate=0.3)
    rho, _ = est.profile()
    assert est.last_gate.source == "pinned"
    np.testing.assert_allclose(rho.numpy(), _hand_rho(m, 0.3), rtol=1e-10)
    est = _estimator_with(m, gate=None)
    rho, _ = est.profile()
    q = m / SIG**2
    np.testing.assert_allclose(rho.numpy(), q / (q * float(GRID[1] - GRID[0])).sum(), rtol=1e-10)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"ema_decay": 1.0}, "ema_decay"),
        ({"min_count": 0}, "min_count"),
        ({"smoothing": -1.0}, "smoothing"),
        ({"gate": "manual"}, "gate"),
        ({"gate": -0.1}, "gate"),
        ({"gate_fallback": 0.0}, "gate_fallback"),
    ],
)
def test_estimator_bad_hyperparameters(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ProfileEstimator(GRID, **kwargs)


def test_profile_report_against_analytic():
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(
        DDPMScheduler(prediction_type="v_prediction"), warmup_steps=2, refresh_every=1, gate=0.2
    )
    gen = torch.Generator().manual_seed(0)
    for _ in range(8):
        lv = sampler.sample(8192, generator=gen)
        sig = lv.sigmas.double().numpy()
        sampler.update(lv, torch.from_numpy(gauss_mmse(sig, S_D) / factor_by_hand("v_prediction", sig)))
        sampler.step()
    prof = sampler.profile()
    assert set(prof) >= {"log_sigma", "m_hat", "q", "rho_hat", "w", "pi", "gate"}
    edges, _ = grid_by_hand("vp", DDPMScheduler())
    width = edges[1] - edges[0]
    sig = np.exp(prof["log_sigma"].numpy())
    np.testing.assert_allclose(sig, np.exp(0.5 * (edges[1:] + edges[:-1])), rtol=1e-12)
    np.testing.assert_allclose(prof["w"].numpy(), (1 + sig**2) / sig**2, rtol=1e-12)
    # (below σ ≈ 0.05 a 1000-step table has fewer steps than bins, off the bin centres: q is biased
    # there by up to e^(±2·h/2) with h the bin width; that end carries no mass once gated)
    dense = sig > 0.05
    np.testing.assert_allclose(prof["q"].numpy()[dense], (S_D**2 / (sig**2 + S_D**2))[dense], rtol=0.02)
    assert float(prof["rho_hat"].sum()) * width == pytest.approx(1.0, abs=1e-9)
    assert float(prof["pi"].sum()) * width == pytest.approx(1.0, abs=1e-9)
    assert prof["gate"].source == "pinned" and prof["gate"].pivot == 0.2


def test_custom_base_density_is_used_for_warmup_and_floor():
    from scipy import stats

    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(
        EDMEulerScheduler(), base=("edm_lognormal", {"P_mean": 0.4, "P_std": 0.7}), warmup_steps=10
    )
    x = np.linspace(-3, 3, 7)
    z = stats.norm.cdf(math.log(80.0), 0.4, 0.7) - stats.norm.cdf(math.log(0.002), 0.4, 0.7)
    np.testing.assert_allclose(
        sampler._log_prob(torch.from_numpy(np.exp(x))).numpy(), stats.norm.logpdf(x, 0.4, 0.7) - math.log(z), atol=1e-10
    )


def test_pinned_gate_far_above_the_grid_normalises_in_log_space():
    """A pivot 1e150 gates every bin to ~1e-450 (0 in float64): ρ̂ must still be q·σ³ normalised, by
    hand, not 0/0 (and the constructor warns that the pivot is above the grid)."""
    m = gauss_mmse(SIG, S_D)
    with pytest.warns(UserWarning, match="gate=1e"):
        est = _estimator_with(m, gate=1e150)
    rho, _ = est.profile()
    r = (m / SIG**2) * SIG**3
    np.testing.assert_allclose(rho.numpy(), r / (r * float(GRID[1] - GRID[0])).sum(), rtol=1e-8)
    # an ordinary pinned pivot gives the hand formula exactly as before
    np.testing.assert_allclose(_estimator_with(m, gate=0.3).profile()[0].numpy(), _hand_rho(m, 0.3), rtol=1e-10)


# ----------------------------------------------------------------------------------------------
# Tracking the model a run trains (docs/METHOD.md §5.10)
# ----------------------------------------------------------------------------------------------


def test_discounted_mean_by_hand():
    """m̂ is the mean of a bin's errors weighted by exp(−age/H), age in optimizer steps: two refreshes, by hand."""
    edges = torch.linspace(0.0, 3.0, 4, dtype=F64)
    est = ProfileEstimator(edges, min_count=2, smoothing=0.0, gate=None, memory=20.0)
    est.accumulate(torch.tensor([0.5] * 4 + [1.5] * 3, dtype=F64), torch.tensor([1.0, 2.0, 3.0, 2.0, 5.0, 5.0, 5.0], dtype=F64))
    est.refresh(10)  # bin 0: mean 2 of 4 samples; bin 1: mean 5 of 3
    est.accumulate(torch.tensor([0.5, 0.5, 2.5], dtype=F64), torch.tensor([8.0, 6.0, 1.0], dtype=F64))
    updated = est.refresh(30)  # 20 steps later: the first refresh's samples weigh e^-1
    g = math.exp(-1.0)
    assert est.m_hat[0].item() == pytest.approx((g * 4 * 2.0 + 8.0 + 6.0) / (g * 4 + 2), rel=1e-12)
    assert est.m_weight[0].item() == pytest.approx(g * 4 + 2, rel=1e-12)
    # bin 1 got nothing: its value stays, its weight decays; bin 2 holds 1 < min_count sample: carried, not filled
    assert est.m_hat[1].item() == 5.0 and est.m_weight[1].item() == pytest.approx(3 * g, rel=1e-12)
    assert math.isnan(est.m_hat[2].item()) and est.carry_counts[2].item() == 1.0
    assert updated.tolist() == [True, False, False]


def test_automatic_memory_is_sized_to_the_run_and_to_the_samples_by_hand():
    """H = an eighth of the run, at least the steps that bring K·min_count samples, between refresh_every and 500."""

    def memory(num_training_steps, batch, steps=50):
        s = InfoNoiseTrainingTimestepSampler.from_scheduler(EDMEulerScheduler(), num_training_steps=num_training_steps)
        for _ in range(steps):
            lv = s.sample(batch)
            s.update(lv, torch.full((batch,), 0.1))
            s.step()
        return s._memory_steps()

    assert memory(400, 64) == 50.0  # 400/8 = 50 > 64·8/64 = 8
    assert memory(4000, 64) == 500.0  # 4000/8 = 500
    assert memory(400, 2) == 256.0  # 64·8/2 = 256 samples' worth > 400/8
    assert memory(1000, 1) == 500.0  # 64·8/1 = 512, capped at 500
    assert memory(None, 64) == 500.0  # unknown length: the former EMA's memory
    assert memory(80, 64) == 50.0  # at least one refresh (80/8 = 10 < refresh_every)


@pytest.mark.parametrize("scale", [0.25, 4.0])
def test_the_estimate_follows_a_model_whose_window_moves(scale):
    """A fine-tune onto data of another scale, with Bayes-optimal errors: two-point data ±1 for 100 steps, then ±a
    (mmse_a(σ) = a²·mmse_1(σ/a), METHOD.md §2) for 300. Each per-sample error scatters around its MMSE (exponential
    with mean 1). At the end of the 400-step run the discounted estimate (H = 50) is within TV 0.06 of the analytic ρ of
    the new data, while the former EMA (β = 0.9 a refresh) still describes the old data more than the new."""

    def final_rho(**kw):
        s = InfoNoiseTrainingTimestepSampler.from_scheduler(EDMEulerScheduler(), gate=None, num_training_steps=400, **kw)
        s.manual_seed(0)
        rng = np.random.default_rng(0)
        for step in range(1, 401):
            a = 1.0 if step <= 100 else scale
            lv = s.sample(64)
            sig = lv.sigmas.double().numpy()
            s.update(lv, torch.from_numpy(a**2 * two_point_mmse(sig / a) * rng.exponential(1.0, 64)))
            s.step()
        rho, _ = s.estimator.profile()
        return (rho * s.estimator.widths).numpy(), torch.exp(s.estimator.centers).numpy()

    rho, c = final_rho()
    new = scale**2 * two_point_mmse(c / scale) / c**2
    old = two_point_mmse(c) / c**2
    new, old = new / new.sum(), old / old.sum()
    assert total_variation(rho, new) <= 0.06
    legacy, _ = final_rho(ema_decay=0.9, clean_end_bound=False)
    assert total_variation(legacy, new) > 0.3 and total_variation(legacy, new) > 2 * total_variation(rho, new)


def test_the_clean_end_bound_by_hand():
    """A model worse than the identity predictor at the clean end (x0 error 4σ² per element) reads q = m̂/σ² = 1 there,
    the bound min(m̂, σ²)/σ² of docs/METHOD.md §5.10 (by hand: min(4σ², σ²)/σ² = 1); without it, 4."""
    m = np.minimum(4 * SIG**2, 0.25)  # the error saturates at V = 0.25 from σ = 0.25 on
    # by hand: with the bound q = min(4σ², 0.25, σ²)/σ² = 1 below σ = 0.5 (where σ² < 0.25), 0.25/σ² above
    bounded = np.where(SIG < 0.5, 1.0, 0.25 / SIG**2)
    for bound, want in ((True, bounded), (False, m / SIG**2)):
        est = ProfileEstimator(GRID, min_count=1, smoothing=0.0, gate=None, clean_end_bound=bound)
        est.accumulate(CENTRES, torch.from_numpy(m))
        est.refresh()
        _, q = est.profile()
        np.testing.assert_allclose(q.numpy(), want, rtol=1e-12)
    assert (m / SIG**2)[SIG < 0.25].min() == pytest.approx(4.0)  # unbounded: 4 at the clean end


@pytest.mark.parametrize("prediction_type", ["sample", "flow"])
def test_a_lora_sized_run_never_puts_pi_above_its_measured_bins_at_the_clean_end(prediction_type):
    """Batch 2 on the flow path from its base (logit-normal draws fill a few middle bins), with a model worse than the
    identity predictor at the clean end (x0 error 4σ²/(1+σ)² per element, V = 1; SD3-like: ``sample`` is the
    preconditioned x0 loss, w = 1; ``flow`` the velocity, w = ((1+σ)/σ)²). Bins below the lowest measured one read
    at most what it reads (q = min(m̂, σ²)/σ² = 1 there, the bound by hand), so no unmeasured bin holds more π than
    the largest measured one: a measured bin is always among π's modes."""
    s = InfoNoiseTrainingTimestepSampler.from_scheduler(
        FlowMatchEulerDiscreteScheduler(), prediction_type=prediction_type, gate=None, num_training_steps=1000
    ).manual_seed(0)
    for _ in range(100):
        lv = s.sample(2)
        sig = lv.sigmas.double()
        e = 4 * sig**2 / (1 + sig) ** 2  # x0-space error, ≤ V = 4 at σ → ∞
        factor = (sig / (1 + sig)) ** 2 if prediction_type == "flow" else torch.ones_like(sig)  # §3: e = s²·‖v̂ − v‖²
        s.update(lv, e / factor)
        s.step()
    assert s.is_adapted
    measured = ~torch.isnan(s.estimator.m_hat)
    assert 2 <= int(measured.sum()) < 32  # a LoRA-sized run: most bins never measured
    lowest = int(torch.nonzero(measured)[0])
    _, q = s.estimator.profile()
    sig = torch.exp(s.estimator.centers)
    np.testing.assert_allclose(q[sig < 0.3].numpy(), 1.0, rtol=1e-9)  # 4σ²/(1+σ)² > σ² for σ < 1: the bound binds
    assert float(q[:lowest].max()) <= float(q[lowest]) * (1 + 1e-12)
    assert float(s.probs[~measured].max()) <= float(s.probs[measured].max()) * (1 + 1e-9)
