"""The per-element bound of a profile start (docs/METHOD.md §5.10, issue 31): each element's posterior mean, a
predictor, so its x0 error bounds the Bayes MMSE. Checked against the two-point MMSE written independently
(helpers.reference: tanh of the posterior log-odds, integrated on a dense grid), counts tallied by hand, and a start
whose measured errors are known exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from diffusers import EDMEulerScheduler

from diffusers_infonoise import make_sampler
from diffusers_infonoise.data_statistics import ValueTally, per_element_bayes_mmse
from diffusers_infonoise.estimator import ProfileEstimator
from diffusers_infonoise.sampler import describe_start, start_from_model

from helpers.reference import two_point_mmse, two_point_mmse_with_prior

SIGMAS = np.array([0.2, 0.5, 1.0, 2.0, 5.0])


def test_equally_likely_two_point_data_give_the_closed_form():
    values = torch.tensor([-1.0, 1.0])
    counts = torch.tensor([[500.0, 500.0], [250.0, 250.0]])
    got = per_element_bayes_mmse(values, counts, torch.from_numpy(SIGMAS), prior_count=0.0)
    np.testing.assert_allclose(got.numpy(), [two_point_mmse_with_prior(0.5, s) for s in SIGMAS], rtol=1e-5)
    np.testing.assert_allclose(got.numpy()[1:], two_point_mmse(SIGMAS[1:]), rtol=1e-4)  # the tabulated closed form (interpolated)


def test_each_element_takes_its_counts_plus_half_a_count_a_value():
    # element 0: +1 seen 19 times in 99, element 1: never in 99. With ½ a count a value: p = 19.5/100 and 0.5/100
    counts = torch.tensor([[80.0, 19.0], [99.0, 0.0]])
    got = per_element_bayes_mmse(torch.tensor([-1.0, 1.0]), counts, torch.from_numpy(SIGMAS)).numpy()
    want = [(two_point_mmse_with_prior(0.195, s) + two_point_mmse_with_prior(0.005, s)) / 2 for s in SIGMAS]
    np.testing.assert_allclose(got, want, rtol=1e-4)
    # large σ: the bound tends to the per-element variance 4p(1 − p), below σ² and V alike
    far = per_element_bayes_mmse(torch.tensor([-1.0, 1.0]), counts, torch.tensor([1e4])).item()
    assert far == pytest.approx((4 * 0.195 * 0.805 + 4 * 0.005 * 0.995) / 2, rel=1e-4)


def test_bad_arguments_are_named():
    v = torch.tensor([0.0, 1.0])
    with pytest.raises(ValueError, match="counts: expected shape"):
        per_element_bayes_mmse(v, torch.ones(3, 3), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="counts, prior_count"):
        per_element_bayes_mmse(v, -torch.ones(3, 2), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="sigmas: expected a"):
        per_element_bayes_mmse(v, torch.ones(3, 2), torch.tensor([0.0]))
    with pytest.raises(ValueError, match="sigmas: expected a"):
        per_element_bayes_mmse(v, torch.ones(3, 2), torch.ones(2, 2))
    for bad in ([1.0, 1.0], [math.nan, 1.0], [math.inf, 1.0]):
        with pytest.raises(ValueError, match="values: expected a"):
            per_element_bayes_mmse(torch.tensor(bad), torch.ones(3, 2), torch.tensor([1.0]))
    with pytest.raises(ValueError, match=r"counts: expected shape \(D >= 1, 2\)"):
        per_element_bayes_mmse(v, torch.ones(0, 2), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="a row counts nothing"):
        per_element_bayes_mmse(v, torch.tensor([[1.0, 1.0], [0.0, 0.0]]), torch.tensor([1.0]), prior_count=0.0)
    with pytest.raises(ValueError, match="x0: expected a floating-point tensor"):
        ValueTally().observe(torch.ones(4, dtype=torch.int64))


def test_the_extreme_levels_give_the_limits_without_nan():
    """σ far below the gap: each element's value is known, error 0; far above: the prior's variance, 4p(1 − p) for ±1
    (p = 0.25 with the counts below and no pseudo-count); both to float64 precision, never NaN or an overflow."""
    counts = torch.tensor([[3.0, 1.0]])
    got = per_element_bayes_mmse(
        torch.tensor([-1.0, 1.0]), counts, torch.tensor([1e-200, 1e-3, 1e3, 1e200], dtype=torch.float64), prior_count=0.0
    )
    assert got.tolist()[:2] == [0.0, 0.0]
    assert got[2:].tolist() == pytest.approx([0.75, 0.75], rel=1e-5)


def test_the_tally_counts_each_elements_values_across_batches():
    t = ValueTally()
    t.observe(torch.tensor([[-1.0, -1.0, 0.5], [-1.0, -1.0, 0.5]]))  # +1 not seen yet: the columns grow later
    t.observe(torch.tensor([[1.0, -1.0, 0.5], [float("nan"), 1.0, 1.0], [1.0, 1.0, -1.0]]))  # the NaN row is left out
    values, counts = t.resolve()
    assert values.tolist() == [-1.0, 0.5, 1.0] and t.rows == 4
    # by hand, rows (-1,-1,.5) (-1,-1,.5) (1,-1,.5) (1,1,-1): element 0 is -1 twice, +1 twice; ...
    assert counts.tolist() == [[2, 0, 2], [3, 0, 1], [1, 3, 0]]


@pytest.mark.parametrize(
    "batches,why",
    [
        ([torch.linspace(-1, 1, 34).reshape(2, 17)], "more than 16 values"),
        ([torch.ones(2, 3), torch.ones(2, 4)], "differ in shape"),
        ([torch.ones(2, 1, 4, 4), torch.ones(2, 16, 1, 1)], "differ in shape"),  # the same number of elements
        ([], "no process saw"),
    ],
)
def test_the_tally_refuses_data_it_cannot_bound(batches, why):
    t = ValueTally()
    for b in batches:
        t.observe(b)
    assert t.resolve() is None and why in t.refused


def test_the_estimator_lowers_filled_bins_only_and_keeps_their_weights():
    est = ProfileEstimator(torch.linspace(-2, 2, 5), min_count=1)
    est.m_hat = torch.tensor([0.5, math.nan, 0.2, 0.9], dtype=torch.float64)
    est.m_weight = torch.tensor([8.0, 0.0, 8.0, 3.0], dtype=torch.float64)
    assert est.bound_m_hat(torch.tensor([0.1, 0.1, 0.3, 0.4])) == 2 == est.num_bounded
    torch.testing.assert_close(est.m_hat, torch.tensor([0.1, math.nan, 0.2, 0.4], dtype=torch.float64), equal_nan=True)
    assert est.m_weight.tolist() == [8.0, 0.0, 8.0, 3.0]
    for bad in (torch.ones(3), torch.ones(2, 2)):
        with pytest.raises(ValueError, match=r"bound: expected shape \(4,\), one error a bin"):
            est.bound_m_hat(bad)
    for bad in (torch.tensor([0.1, -1.0, 0.1, 0.1]), torch.tensor([0.1, math.nan, 0.1, 0.1])):
        with pytest.raises(ValueError, match="bound: expected finite errors >= 0, got"):
            est.bound_m_hat(bad)


def _identity_loss(sampler):
    """The x0 error of the identity predictor x̂0 = x_σ, exactly σ² (a model that has learnt nothing about this data),
    with the batch shown to the sampler through add_noise."""

    def loss_fn(x0, levels):
        sampler.add_noise(x0, torch.randn_like(x0), levels)
        return levels.sigmas.double() ** 2

    return loss_fn


def _binary_batches(p_plus=(0.1, 0.5, 0.9, 0.3), n=24, batch=32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    p = torch.tensor(p_plus, dtype=torch.float64)
    return [torch.where(torch.rand(batch, len(p), generator=gen, dtype=torch.float64) < p, 1.0, -1.0) for _ in range(n)]


def test_a_profile_start_on_binary_data_is_bounded_by_the_per_element_posterior_mean():
    """The identity model's error σ² in every measured bin (the mean of σ² at the bin's levels) is lowered to the
    per-element bound's mean over the bin wherever that is below it, from counts tallied by hand on the batches the start
    measured on; left as measured with data_bound=False. The bound is the smaller one at every measured σ here."""
    runs = {}
    for data_bound in (True, False):
        s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=32, gate=None, mmse_cap=None)
        batches = _binary_batches()
        info = start_from_model(s, _identity_loss(s), batches, data_bound=data_bound, progress=False)
        runs[data_bound] = (s, info)
    s, info = runs[True]
    seen = torch.cat(_binary_batches()[: info["forward_passes"]])
    counts = torch.stack([(seen == -1).sum(0), (seen == 1).sum(0)], dim=1).double()
    p = ((counts[:, 1] + 0.5) / (counts.sum(1) + 1.0)).numpy()
    centres = torch.exp(s.estimator.centers).numpy()
    # a bin's m̂ is the mean error over levels spread uniformly in ln σ across it, so its bound is the mean of the
    # bound over the bin: here by the midpoint rule on 12 points of each bin (the library takes 3-point Gauss-Legendre)
    e = s.estimator.edges.numpy()
    inner = [np.exp(lo + (hi - lo) * (np.arange(12) + 0.5) / 12) for lo, hi in zip(e[:-1], e[1:])]
    want = np.array([np.mean([[two_point_mmse_with_prior(pi, c) for pi in p] for c in bin_sigmas]) for bin_sigmas in inner])
    unbounded = runs[False][0].estimator.m_hat.numpy()
    measured = ~np.isnan(unbounded)
    # where the bound matters (above 1e-4 of σ², the error of the identity model measured here) it is the bin's mean to
    # 1% (two quadratures of a steep function; the value at the bin's centre is 30% lower at σ = 0.25); below, both are
    # negligible against σ² (the reference's grid resolves σ ≳ 0.1 only)
    ok = measured & (centres > 0.1) & (want > 1e-4 * centres**2)
    got = s.estimator.m_hat.numpy()
    np.testing.assert_allclose(got[ok], np.minimum(unbounded[ok], want[ok]), rtol=1e-2)
    assert int(ok.sum()) >= 12 and np.all(got[measured & ~ok] <= 1e-3 * unbounded[measured & ~ok])
    assert info["bound"] == {"values": 2, "samples": int(counts[0].sum()), "bins_lowered": int(measured.sum())}
    assert runs[False][1]["bound"] == "off" and "bound" not in runs[False][0].start_record  # the default: not asked for
    assert "m_hat bounded by the per-element posterior mean of 2 values" in describe_start(s.start_record)
    # the target leaves the clean end the identity model's error put it on: unbounded, ρ̂ ∝ m̂/σ² = 1 per unit ln σ
    # holds the ln-width share of σ < 0.2, ln(0.2/0.002)/ln(80/0.002) = 0.434; bounded, the data resolves every
    # element there (the bound is below 1e-6·σ² at σ = 0.2) and ρ̂ holds almost none
    below = centres < 0.2
    share = {b: float((r[0].estimator.profile()[0] * r[0].estimator.widths)[below].sum()) for b, r in runs.items()}
    assert share[False] == pytest.approx(math.log(100) / math.log(40000), abs=0.01) and share[True] < 1e-3


def test_a_profile_start_on_continuous_data_is_left_as_measured():
    s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=32, gate=None, mmse_cap=None)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randn(32, 4, generator=gen, dtype=torch.float64) for _ in range(24)]
    with pytest.warns(UserWarning, match="the bound by the data .* was not applied: the data takes more than 16 values"):
        info = start_from_model(s, _identity_loss(s), batches, data_bound=True, progress=False)
    assert info["bound"] == "none: the data takes more than 16 values"
    measured = ~torch.isnan(s.estimator.m_hat)
    # the mean of σ² over each bin's levels: between σ² at the bin's edges
    e = torch.exp(s.estimator.edges)
    m = s.estimator.m_hat
    assert bool(((m >= e[:-1] ** 2 * (1 - 1e-9)) & (m <= e[1:] ** 2 * (1 + 1e-9)))[measured].all())
    assert "m_hat not bounded (the data takes more than 16 values)" in describe_start(s.start_record)


def test_a_bound_that_would_cost_too_much_is_skipped_with_its_estimate(monkeypatch):
    """Data on 3-16 values with many distinct elements costs minutes to hours (distinct rows × values² × nodes ×
    levels); above the budget the start keeps its measurement and says what it would have cost."""
    from diffusers_infonoise.data_statistics import per_element_bound_work
    from diffusers_infonoise.sampler import infonoise

    counts = torch.tensor([[1.0, 2.0, 0.0], [1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    assert per_element_bound_work(counts, 10) == 2 * 3**2 * 1201 * 10  # two distinct rows, 3 values, 1201 nodes
    monkeypatch.setattr(infonoise, "MAX_BOUND_WORK", 1.0)
    s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=32, gate=None, mmse_cap=None)
    with pytest.warns(UserWarning, match=r"2 values on 4 elements would take about \d+ s of CPU on every process"):
        info = start_from_model(s, _identity_loss(s), _binary_batches(), data_bound=True, progress=False)
    assert info["bound"].startswith("none: 2 values on 4 elements would take about")


def test_on_a_vp_table_each_bin_is_bounded_by_the_mean_over_its_measured_steps():
    """On a DDPM table the start's levels are table steps, not spread uniformly in ln σ: each bin's m̂ (the identity
    model's σ², VE σ of each step) is bounded by the mean of the two-point bound over the steps it measured, recorded
    here as the loss saw them, by hand from the tallied counts."""
    from diffusers import DDPMScheduler

    s = make_sampler("infonoise", DDPMScheduler(), prediction_type="sample", num_bins=16, gate=None, mmse_cap=None)
    seen_sigmas = []

    def loss_fn(x0, levels):
        s.add_noise(x0, torch.randn_like(x0), levels)
        seen_sigmas.append(levels.sigmas.double())
        return levels.sigmas.double() ** 2

    info = start_from_model(s, loss_fn, _binary_batches(), data_bound=True, progress=False)
    sig = torch.cat(seen_sigmas)[: s.start_record["levels"]]  # the stratified levels (the last batch is cycled)
    seen = torch.cat(_binary_batches()[: info["forward_passes"]])
    p = (((seen == 1).sum(0).double() + 0.5) / (len(seen) + 1.0)).numpy()
    k = s.estimator.bin_index(torch.log(sig)).numpy()
    bound_at = np.array([np.mean([two_point_mmse_with_prior(pi, float(x)) for pi in p]) for x in sig.tolist()])
    m = s.estimator.m_hat.numpy()
    checked = 0
    for b in np.unique(k):
        want = bound_at[k == b].mean()
        measured = float((sig[torch.from_numpy(k == b)] ** 2).mean())
        if 1e-4 * measured < want < measured and sig[torch.from_numpy(k == b)].min() > 0.1:
            assert m[b] == pytest.approx(want, rel=1e-2), b
            checked += 1
    assert checked >= 3 and info["bound"]["values"] == 2


def test_the_tally_refuses_more_counts_than_it_may_hold(monkeypatch):
    """One-hot text over a large vocabulary would hold gigabytes of counts on every process before the bound's budget
    could refuse it: a tally stops at elements × values > MAX_TALLY_ENTRIES (here lowered to 5: 3 elements × 2 values)."""
    from diffusers_infonoise import data_statistics

    monkeypatch.setattr(data_statistics, "MAX_TALLY_ENTRIES", 5)
    t = ValueTally()
    t.observe(torch.tensor([[-1.0, 1.0], [1.0, 1.0]]))  # 2 elements × 2 values: kept
    assert t.counts is not None and t.refused is None
    t = ValueTally()
    t.observe(torch.tensor([[-1.0, 1.0, 1.0]]))
    assert t.resolve() is None and "elements times its values exceed" in t.refused
