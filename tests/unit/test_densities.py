"""Densities over log σ (METHOD.md §1, §5.8): normalisation in every coordinate, cdf/icdf, draws,
and SD3's mode and logit-normal samplers simulated the way diffusers writes them."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.training_utils import compute_density_for_timestep_sampling

from diffusers_infonoise import densities
from diffusers_infonoise.paths import path_from_scheduler
from diffusers_infonoise.sampler import base_density

from helpers.reference import ks_pvalue, quadrature_cdf

F64 = torch.float64


def _piecewise():
    edges = torch.tensor([-3.0, -2.2, -1.0, -0.5, 0.4, 1.0, 2.5], dtype=F64)
    probs = torch.tensor([0.1, 0.0, 0.35, 0.2, 0.05, 0.3], dtype=F64)  # one empty bin
    return densities.Piecewise(edges, probs)


DENSITIES = {
    "normal_edm": lambda: densities.Normal(-1.2, 1.2),
    "logistic": lambda: densities.Logistic(0.0),
    "logistic_loc": lambda: densities.Logistic(0.7),
    "uniform": lambda: densities.Uniform(-3.0, 2.0),
    "karras_ramp": lambda: densities.KarrasRamp(0.002, 80.0, 7.0),
    "cosine": lambda: densities.Cosine(0.5),
    "mode": lambda: densities.Mode(1.29),
    "mode_negative": lambda: densities.Mode(-0.5),
    "piecewise": _piecewise,
    "shifted": lambda: densities.Shifted(densities.Normal(0.0, 1.0), math.log(3.0)),
    "truncated": lambda: densities.Truncated(densities.Normal(-1.2, 1.2), math.log(0.002), math.log(80.0)),
    "truncated_logistic": lambda: densities.Truncated(densities.Logistic(0.0), -2.0, 1.5),
}


def _integrate(values, coordinate, d):
    dens = torch.exp(densities.log_prob_in(d, coordinate, torch.from_numpy(values))).numpy()
    dens = np.where(np.isfinite(dens), dens, 0.0)
    return float(np.trapezoid(dens, values))


@pytest.mark.parametrize("name", DENSITIES)
def test_integrates_to_one_in_every_coordinate(name):
    d = DENSITIES[name]()
    # trapezoid in each coordinate on its own grid (no Jacobian written here: the grids carry it)
    # every density here has less than 1e-8 of mass beyond |log σ| = 22
    x = np.linspace(-22, 22, 200_001)
    assert _integrate(x, "log_sigma", d) == pytest.approx(1.0, abs=5e-4)
    lam = np.linspace(-44, 44, 200_001)
    assert _integrate(lam, "log_snr", d) == pytest.approx(1.0, abs=5e-4)
    sig = np.exp(np.linspace(-22, 22, 200_001))  # non-uniform grid in σ itself
    assert _integrate(sig, "sigma", d) == pytest.approx(1.0, abs=5e-4)
    s = 1 / (1 + np.exp(-np.linspace(-22, 22, 200_001)))  # non-uniform grid in the flow level s
    assert _integrate(s, "flow_s", d) == pytest.approx(1.0, abs=5e-4)


def test_log_prob_in_unknown_coordinate():
    with pytest.raises(ValueError, match="coordinate"):
        densities.log_prob_in(densities.Normal(0, 1), "t", torch.zeros(1))


@pytest.mark.parametrize("name", DENSITIES)
def test_cdf_is_quadrature_of_density_and_icdf_inverts_it(name):
    d = DENSITIES[name]()
    edges, cum = quadrature_cdf(d.log_prob, -22.0, 22.0, n=200_000)
    x = np.linspace(-8, 6, 141)
    np.testing.assert_allclose(d.cdf(torch.from_numpy(x)).numpy(), np.interp(x, edges, cum), atol=5e-4)
    p = torch.linspace(0.001, 0.999, 199, dtype=F64)
    torch.testing.assert_close(d.cdf(d.icdf(p)), p, rtol=0, atol=1e-9)
    # icdf(cdf(x)) = x where the density is positive
    xs = torch.from_numpy(x)
    pos = torch.isfinite(d.log_prob(xs)) & (d.cdf(xs) > 1e-6) & (d.cdf(xs) < 1 - 1e-6)
    torch.testing.assert_close(d.icdf(d.cdf(xs[pos])), xs[pos], rtol=0, atol=1e-7)


@pytest.mark.parametrize("name", DENSITIES)
def test_draws_follow_log_prob(name):
    d = DENSITIES[name]()
    draws = d.sample(20_000, generator=torch.Generator().manual_seed(7))
    assert draws.dtype == F64 and draws.shape == (20_000,)
    edges, cum = quadrature_cdf(d.log_prob, -22.0, 22.0, n=100_000)
    assert ks_pvalue(draws.numpy(), edges, cum) > 1e-3


def test_piecewise_empty_bin_never_drawn_and_densities():
    d = _piecewise()
    draws = d.sample(50_000, generator=torch.Generator().manual_seed(0))
    assert not bool(((draws > -2.2) & (draws < -1.0)).any())
    # density per unit log σ in a bin is mass/width (hand)
    torch.testing.assert_close(
        torch.exp(d.log_prob(torch.tensor([-2.5, 0.0, 2.0], dtype=F64))), torch.tensor([0.1 / 0.8, 0.2 / 0.9, 0.3 / 1.5], dtype=F64)
    )
    assert float(d.log_prob(torch.tensor(3.0, dtype=F64))) == -math.inf
    with pytest.raises(ValueError, match="probs"):
        densities.Piecewise(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 0.0]))
    with pytest.raises(ValueError, match="edges"):
        densities.Piecewise(torch.tensor([0.0, 2.0, 1.0]), torch.tensor([0.5, 0.5]))


@pytest.mark.parametrize("scale", [1.29, 0.5, -0.5])
def test_mode_matches_sd3_formula_simulation(scale):
    # diffusers' compute_density_for_timestep_sampling("mode") is the SD3 map; the map is symmetric
    # (f(1 − u) = 1 − f(u)), so the noise-level/table-index conventions agree for it.
    u = compute_density_for_timestep_sampling("mode", 40_000, mode_scale=scale, generator=torch.Generator().manual_seed(11)).double()
    u = u[(u > 0) & (u < 1)]
    d = densities.Mode(scale)
    edges, cum = quadrature_cdf(d.log_prob, -22.0, 22.0, n=100_000)
    assert ks_pvalue(torch.logit(u).numpy(), edges, cum) > 1e-3
    # the density by hand at a few points: p_s(s) = 1/|f'(u)| with s = f(u)
    uu = torch.tensor([0.1, 0.35, 0.6, 0.9], dtype=F64)
    s = 1 - uu - scale * (torch.cos(math.pi * uu / 2) ** 2 - 1 + uu)
    fprime = -1 - scale + scale * (math.pi / 2) * torch.sin(math.pi * uu)
    torch.testing.assert_close(torch.exp(densities.log_prob_in(d, "flow_s", s)), 1 / fprime.abs(), rtol=1e-9, atol=0)
    with pytest.raises(ValueError, match="mode_scale"):
        densities.Mode(2.0)


@pytest.mark.parametrize("shift,mean,std", [(1.0, 0.0, 1.0), (3.0, 0.0, 1.0), (3.0, 0.5, 0.8), (0.4, -0.3, 1.2)])
def test_logit_normal_on_shifted_flow_matches_sigmoid_normal_then_shift(shift, mean, std):
    """SD3 paper convention: s = sigmoid(n), n ~ N(mean, std²), then the scheduler's shift."""
    n = 40_000
    u = compute_density_for_timestep_sampling(
        "logit_normal", n, logit_mean=mean, logit_std=std, generator=torch.Generator().manual_seed(5)
    ).double()
    s = shift * u / (1 + (shift - 1) * u)  # FlowMatchEulerDiscreteScheduler's static shift
    path = path_from_scheduler(FlowMatchEulerDiscreteScheduler(shift=shift))
    d = base_density("logit_normal", path, mean=mean, std=std)
    x = torch.logit(s)
    x = x[torch.isfinite(x)]
    edges, cum = quadrature_cdf(d.log_prob, -22.0, 22.0, n=100_000)
    assert ks_pvalue(x.numpy(), edges, cum) > 1e-3
    # and the density in s at a point, by hand: logit-normal of the unshifted level times the
    # Jacobian of the shift map's inverse
    s0 = torch.tensor([0.2, 0.5, 0.8], dtype=F64)
    u0 = s0 / (shift - (shift - 1) * s0)  # inverse shift
    du_ds = shift / (shift - (shift - 1) * s0) ** 2
    z = (torch.logit(u0) - mean) / std
    p_u = torch.exp(-0.5 * z**2) / (std * math.sqrt(2 * math.pi)) / (u0 * (1 - u0))
    torch.testing.assert_close(torch.exp(densities.log_prob_in(d, "flow_s", s0)), p_u * du_ds, rtol=1e-10, atol=0)


def test_closed_forms_by_hand():
    # EDM log-normal: ln σ ~ N(−1.2, 1.2²)
    x = torch.tensor([-3.0, -1.2, 0.5], dtype=F64)
    ref = torch.exp(-0.5 * ((x + 1.2) / 1.2) ** 2) / (1.2 * math.sqrt(2 * math.pi))
    torch.testing.assert_close(torch.exp(densities.Normal(-1.2, 1.2).log_prob(x)), ref, rtol=1e-12, atol=0)
    # cosine: σ = σ_d·tan(πu/2) ⇒ P(σ ≤ e^x) = (2/π)·atan(e^x/σ_d)
    c = densities.Cosine(0.5)
    torch.testing.assert_close(c.cdf(x), (2 / math.pi) * torch.atan(torch.exp(x) / 0.5), rtol=1e-12, atol=0)
    u = torch.tensor([0.1, 0.5, 0.9], dtype=F64)
    torch.testing.assert_close(c.icdf(u), torch.log(0.5 * torch.tan(math.pi * u / 2)), rtol=1e-12, atol=1e-12)
    # Karras ramp: σ(u) = (σ_max^(1/ρ) + u(σ_min^(1/ρ) − σ_max^(1/ρ)))^ρ, u uniform ⇒ P(σ ≤ σ(u)) = 1 − u
    k = densities.KarrasRamp(0.002, 80.0, 7.0)
    sig_u = (80 ** (1 / 7) + u * (0.002 ** (1 / 7) - 80 ** (1 / 7))) ** 7
    torch.testing.assert_close(k.cdf(torch.log(sig_u)), 1 - u, rtol=0, atol=1e-12)
    # uniform flow level: s uniform ⇒ P(log σ ≤ x) = sigmoid(x)
    torch.testing.assert_close(densities.Logistic(0.0).cdf(x), torch.sigmoid(x), rtol=1e-14, atol=0)


def test_bin_masses_are_cdf_differences_of_the_quadrature():
    d = densities.Truncated(densities.Normal(-1.2, 1.2), math.log(0.002), math.log(80.0))
    edges_b = torch.linspace(math.log(0.002), math.log(80.0), 17, dtype=F64)
    m = densities.bin_masses(d, edges_b).numpy()
    qe, cum = quadrature_cdf(d.log_prob, -10.0, 10.0)
    np.testing.assert_allclose(m, np.diff(np.interp(edges_b.numpy(), qe, cum)), atol=1e-6)
    assert m.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize(
    "bad",
    [
        lambda: densities.Normal(0, 0),
        lambda: densities.Uniform(1, 1),
        lambda: densities.Cosine(-1),
        lambda: densities.KarrasRamp(1.0, 0.5),
        lambda: densities.Truncated(densities.Normal(0, 0.01), 50, 60),
    ],
)
def test_invalid_parameters_raise(bad):
    with pytest.raises(ValueError):
        bad()


def test_a_density_outside_the_range_raises_its_own_type_with_the_range():
    """N(50, 0.01²) has mass Φ(-4000) ≈ 0 on [-6.2, 4.4]: a DensityRangeError (still a ValueError) carrying the
    range and the density, which the training scripts use to name the flag that placed it; a density with mass
    there is accepted."""
    low, high = math.log(0.002), math.log(80.0)
    with pytest.raises(densities.DensityRangeError, match=r"no mass in the path's range log sigma in \[-6.215, 4.382\]") as info:
        densities.Truncated(densities.Normal(50.0, 0.01), low, high)
    assert isinstance(info.value, ValueError)
    assert (info.value.low, info.value.high) == (low, high) and info.value.density == {"name": "Normal", "mean": 50.0, "std": 0.01}
    again = pickle.loads(pickle.dumps(info.value))  # it crosses processes (a DataLoader worker, a spawned rank) whole
    assert type(again) is densities.DensityRangeError and (again.low, again.high, str(again)) == (low, high, str(info.value))
    for bad in ((1.0, -1.0), (0.0, 0.0), (math.nan, 1.0), (0.0, math.nan)):  # not a range: said so, not "no mass"
        with pytest.raises(ValueError, match=r"^low, high: the range of log sigma must have low < high"):
            densities.Truncated(densities.Normal(0.0, 1.0), *bad)
    # an infinite end is a half-line (flow's s = 0 is σ = 0, log σ = -inf): N(0, 1) cut at 0 keeps Φ(0) = 1/2 of it
    half = densities.Truncated(densities.Normal(0.0, 1.0), -math.inf, 0.0)
    assert float(half.cdf(torch.tensor(-1.0))) == pytest.approx(2 * 0.15865525393145707, rel=1e-9)
    d = densities.Truncated(densities.Normal(4.0, 0.5), low, high)  # Φ((4.382-4)/0.5) ≈ 0.78 of it inside
    assert float(d.cdf(torch.tensor(high))) == pytest.approx(1.0)


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_helper_equals_torch(right):
    gen = torch.Generator().manual_seed(0)
    seq = torch.sort(torch.randint(0, 20, (65,), generator=gen).double() / 4).values  # with ties
    vals = torch.cat(
        [torch.rand(500, generator=gen, dtype=F64) * 6 - 0.5, torch.tensor([-math.inf, math.inf, math.nan, 0.0, 2.5], dtype=F64), seq]
    )
    got = densities.searchsorted(seq, vals, right=right)
    assert got.dtype == torch.int64
    assert torch.equal(got, torch.searchsorted(seq, vals, right=right))
    assert int(densities.searchsorted(seq, torch.tensor(1.0, dtype=F64), right=right)) == int(
        torch.searchsorted(seq, torch.tensor([1.0], dtype=F64), right=right)
    )
