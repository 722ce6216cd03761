"""Tests for diffusers_infonoise.diagnostics.

Expected values are derived independently of the code under test: closed forms for Gaussian
data (METHOD.md §2), scipy quadrature for two-point data, hand formulas for a two-point data set,
and tiny torch "models" that return the exact Bayes-optimal prediction in each parameterization.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler
from scipy import integrate, special

from diffusers_infonoise import diagnostics as dg
from diffusers_infonoise import make_sampler
from diffusers_infonoise.diagnostics.empirical import _posterior_variance
from diffusers_infonoise.estimator import apply_gate

S_D = 0.7  # data standard deviation of the Gaussian tests


# ------------------------------------------------------------------------------------------------
# independent references
# ------------------------------------------------------------------------------------------------


def two_point_mmse_quad(sigma: float) -> float:
    """1 − E[tanh²(x/σ²)] for x = 1 + σz, by scipy quadrature in z (independent of the package)."""

    def f(z):
        return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) * (1.0 - math.tanh((1.0 + sigma * z) / sigma**2) ** 2)

    return (
        integrate.quad(f, -np.inf, np.inf, epsabs=0, epsrel=1e-11, limit=400, points=None)[0]
        if sigma > 0.25
        else integrate.quad(f, -1 / sigma - 40 * sigma, -1 / sigma + 40 * sigma, epsabs=0, epsrel=1e-11, limit=400)[0]
    )


def two_point_conditional_entropy(sigma: float) -> float:
    """H(x0 | x_σ) in nats for x0 = ±1: E[h_b(p(x0 = 1 | x))], p = sigmoid(2x/σ²), by quadrature."""

    def f(z):
        logit = 2.0 * (1.0 + sigma * z) / sigma**2
        # binary entropy, stable: h = log(1 + e^{-|l|}) + |l|·sigmoid(-|l|)
        a = abs(logit)
        h = math.log1p(math.exp(-a)) + a * special.expit(-a)
        return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) * h

    return integrate.quad(f, -np.inf, np.inf, epsabs=1e-14, epsrel=1e-12, limit=400)[0]


class VPBayes(torch.nn.Module):
    """Bayes-optimal ε (or v) prediction for x0 ~ N(0, S_D²) on a VP table: input (x_t, t)."""

    def __init__(self, alphas_cumprod, kind="epsilon"):
        super().__init__()
        self.ac, self.kind = alphas_cumprod.double(), kind

    def forward(self, sample, timestep):
        ac = self.ac[timestep.long()].view(-1, *([1] * (sample.ndim - 1)))
        a, b = ac.sqrt(), (1 - ac).sqrt()
        x = sample.double()
        x0 = S_D**2 * a / (S_D**2 * a**2 + b**2) * x  # E[x0 | x_t], x_t = a·x0 + b·ε
        eps = (x - a * x0) / b
        return (eps if self.kind == "epsilon" else a * eps - b * x0).float()


class EDMBayes(torch.nn.Module):
    """Bayes-optimal EDM network output F for x0 ~ N(0, S_D²): input (c_in·x, scale·c_noise)."""

    def __init__(self, scale=1.0, sigma_data=0.5):
        super().__init__()
        self.scale, self.sd = scale, sigma_data

    def forward(self, sample, timestep):
        sig = torch.exp(4.0 * timestep.double() / self.scale).view(-1, *([1] * (sample.ndim - 1)))
        x = sample.double() * (sig**2 + self.sd**2).sqrt()  # undo c_in
        d = S_D**2 / (S_D**2 + sig**2) * x
        c_skip = self.sd**2 / (sig**2 + self.sd**2)
        c_out = sig * self.sd / (sig**2 + self.sd**2).sqrt()
        return ((d - c_skip * x) / c_out).float()


class FlowBayes(torch.nn.Module):
    """Bayes-optimal flow velocity v = ε − x0 for x0 ~ N(0, S_D²): input (x_s, s·N)."""

    def forward(self, sample, timestep):
        s = (timestep.double() / 1000.0).view(-1, *([1] * (sample.ndim - 1)))
        x = sample.double()
        x0 = S_D**2 * (1 - s) / (S_D**2 * (1 - s) ** 2 + s**2) * x
        eps = (x - (1 - s) * x0) / s
        return (eps - x0).float()


def gaussian_probe(n=48, shape=(1, 6, 6), seed=1234):  # a seed no noise generator below uses
    g = torch.Generator().manual_seed(seed)
    return S_D * torch.randn(n, *shape, generator=g)


def assert_within_se(prof, ref, max_z=4.5):
    z = (prof.mmse - ref) / prof.mmse_se
    assert bool(torch.isfinite(z).all())
    assert float(z.abs().max()) < max_z, z


# ------------------------------------------------------------------------------------------------
# analytic cases
# ------------------------------------------------------------------------------------------------


def test_analytic_gaussian_formula():
    s = torch.tensor([0.1, 0.5, 2.0, math.inf], dtype=torch.float64)
    got = dg.analytic_mmse_gaussian(s, 0.5)
    want = [0.01 * 0.25 / 0.26, 0.25 * 0.25 / 0.5, 4 * 0.25 / 4.25, 0.25]
    assert torch.allclose(got, torch.tensor(want, dtype=torch.float64), rtol=1e-12)


@pytest.mark.parametrize("sigma", [0.06, 0.2, 0.5, 1.0, 2.0, 7.0, 100.0])
def test_analytic_two_point_matches_scipy(sigma):
    assert float(dg.analytic_mmse_two_point([sigma])[0]) == pytest.approx(two_point_mmse_quad(sigma), rel=1e-6)


def test_figure1_entropy_rate_equals_derivative_of_conditional_entropy():
    """The paper's Figure 1 toy: mmse/σ² (METHOD.md §2) = d H(x0|x_σ)/d log σ, within 1%."""
    sigmas = np.exp(np.linspace(np.log(0.3), np.log(5.0), 9))
    h = 1e-3
    profile = (dg.analytic_mmse_two_point(torch.from_numpy(sigmas)) / torch.from_numpy(sigmas) ** 2).numpy()
    for s, rate in zip(sigmas, profile):
        deriv = (two_point_conditional_entropy(s * math.exp(h)) - two_point_conditional_entropy(s * math.exp(-h))) / (2 * h)
        assert rate == pytest.approx(deriv, rel=0.01), (s, rate, deriv)
    # the window: the profile peaks near σ ≈ 1 and is small at both ends
    grid = torch.exp(torch.linspace(math.log(0.05), math.log(50), 200, dtype=torch.float64))
    q = dg.analytic_mmse_two_point(grid) / grid**2
    peak = float(grid[int(torch.argmax(q))])
    assert 0.5 < peak < 1.5
    assert float(q[0]) < 1e-6 * float(q.max()) and float(q[-1]) < 1e-2 * float(q.max())


# ------------------------------------------------------------------------------------------------
# profile_from_dataset
# ------------------------------------------------------------------------------------------------


def test_dataset_profile_of_two_point_sample_matches_analytic():
    x = torch.cat([torch.ones(1000, 1), -torch.ones(1000, 1)]).double()  # balanced: prior 1/2 exactly
    g = torch.Generator().manual_seed(1)
    sig = torch.exp(torch.linspace(math.log(0.4), math.log(8.0), 7, dtype=torch.float64))
    prof = dg.profile_from_dataset(x, sigmas=sig, num_noise_draws=2000, generator=g, query_batch_size=1000)
    ref = dg.analytic_mmse_two_point(prof.sigmas)
    assert_within_se(prof, ref)
    assert torch.allclose(prof.mmse, ref, atol=0.01)
    assert prof.meta["source"] == "dataset" and "memorisation" in prof.meta["note"]


def test_dataset_profile_of_two_points_hand_formula():
    """Two points x1, x2 in D dims: mmse/D = ‖Δ‖²/D · E_z[s(l)s(−l)], l = ‖Δ‖z/σ + ‖Δ‖²/(2σ²)."""
    x1 = torch.tensor([1.0, 2.0, -1.0, 0.5], dtype=torch.float64)
    x2 = torch.tensor([0.0, 1.0, 1.0, 0.5], dtype=torch.float64)
    x = torch.stack([x1, x2])
    delta = float((x1 - x2).norm())
    g = torch.Generator().manual_seed(2)
    sig = torch.tensor([0.5, 1.0, 2.0, 4.0], dtype=torch.float64)
    prof = dg.profile_from_dataset(x, sigmas=sig, num_noise_draws=4000, generator=g, query_batch_size=2000, chunk_size=1)
    for s, m, se in zip(sig.tolist(), prof.mmse.tolist(), prof.mmse_se.tolist()):

        def f(z, s=s):
            u = delta * z / s + delta**2 / (2 * s * s)
            return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) * special.expit(u) * special.expit(-u)

        want = delta**2 / 4 * integrate.quad(f, -np.inf, np.inf)[0]
        assert abs(m - want) < 4.5 * se, (s, m, want, se)


def test_dataset_profile_chunking_and_float64_exactness():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(60, 5, generator=g, dtype=torch.float64)
    q = torch.randn(7, 5, generator=g, dtype=torch.float64)
    for s in (0.05, 0.7, 5.0):
        w = torch.softmax(-((q[:, None, :] - x[None]) ** 2).sum(-1) / (2 * s * s), 1)
        brute = (w * (x**2).sum(1)).sum(1) - ((w @ x) ** 2).sum(1)
        for chunk in (1, 16, 1000):
            got = _posterior_variance(q, x, x.pow(2).sum(1), s, chunk, torch.float64)
            assert torch.allclose(got, brute.clamp_min(0), rtol=1e-9, atol=1e-12)
    # the whole function is chunk-invariant for the same generator
    a = dg.profile_from_dataset(x, num_levels=5, num_noise_draws=50, chunk_size=7, generator=torch.Generator().manual_seed(0))
    b = dg.profile_from_dataset(x, num_levels=5, num_noise_draws=50, chunk_size=60, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(a.mmse, b.mmse, rtol=1e-10)


def test_dataset_profile_of_small_set_memorises():
    """Below the nearest-neighbour distance the empirical denoiser is exact: mmse ≈ 0 (METHOD.md §7)."""
    x = torch.randn(50, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    prof = dg.profile_from_dataset(x, sigmas=[0.01, 0.05, 30.0], num_noise_draws=64, generator=torch.Generator().manual_seed(1))
    assert float(prof.mmse[0]) < 1e-12 and float(prof.mmse[1]) < 1e-12
    assert float(prof.mmse[2]) == pytest.approx(float(x.var(0, unbiased=False).mean()), rel=0.05)


def test_dataset_profile_rejects_bad_input():
    with pytest.raises(ValueError, match="x"):
        dg.profile_from_dataset(torch.ones(1, 3))
    with pytest.raises(ValueError, match="chunk_size"):
        dg.profile_from_dataset(torch.randn(4, 3), chunk_size=0)


# ------------------------------------------------------------------------------------------------
# profile_from_model with Bayes-optimal models
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["epsilon", "v_prediction"])
def test_model_profile_vp_bayes_optimal(kind):
    sched = DDPMScheduler(prediction_type=kind)
    x0 = gaussian_probe()
    g = torch.Generator().manual_seed(0)
    prof = dg.profile_from_model(
        VPBayes(sched.alphas_cumprod, kind), sched, x0, num_levels=12, num_noise_draws=3, generator=g, progress=False
    )
    assert_within_se(prof, dg.analytic_mmse_gaussian(prof.sigmas, S_D))
    # VP levels are exact table σ of integer steps
    assert prof.timesteps.dtype == torch.int64
    table = torch.sqrt((1 - sched.alphas_cumprod.double()) / sched.alphas_cumprod.double())
    assert torch.allclose(prof.sigmas, table[prof.timesteps])
    assert prof.meta["prediction_type"] == kind and prof.meta["loss_weighting"] == "none"


def test_model_profile_edm_bayes_optimal_with_timestep_scale():
    sched = EDMEulerScheduler()
    x0 = gaussian_probe()
    prof = dg.profile_from_model(
        EDMBayes(scale=250.0),
        sched,
        x0,
        num_levels=12,
        num_noise_draws=3,
        generator=torch.Generator().manual_seed(0),
        progress=False,
        edm_timestep_scale=250.0,
    )
    assert_within_se(prof, dg.analytic_mmse_gaussian(prof.sigmas, S_D))
    assert prof.meta["loss_weighting"] == "edm" and prof.meta["prediction_type"] == "sample"
    # π ∝ ρ̂/w with the EDM weight λ(σ) = (σ² + σ_d²)/(σ·σ_d)²
    lam = (prof.sigmas**2 + 0.25) / (prof.sigmas * 0.5) ** 2
    ratio = prof.pi * lam / prof.rho_hat
    assert torch.allclose(ratio, ratio[0].expand_as(ratio), rtol=1e-9)
    # what the network receives: c_in·x and edm_timestep_scale·0.25·ln σ
    seen = []

    class Recorder(EDMBayes):
        def forward(self, sample, timestep):
            seen.append((sample.detach().clone(), timestep.detach().clone()))
            return super().forward(sample, timestep)

    dg.profile_from_model(Recorder(scale=250.0), sched, x0[:4], sigmas=[0.1, 3.0], progress=False, edm_timestep_scale=250.0, batch_size=8)
    ((inp, t),) = seen
    sig = torch.tensor([0.1] * 4 + [3.0] * 4, dtype=torch.float64)
    assert torch.allclose(t.double(), 250.0 * 0.25 * torch.log(sig), rtol=1e-6)
    assert float(inp.std()) == pytest.approx(1.0, rel=0.5)  # c_in makes unit-variance-ish inputs


def test_model_profile_flow_bayes_optimal():
    sched = FlowMatchEulerDiscreteScheduler()
    prof = dg.profile_from_model(
        FlowBayes(), sched, gaussian_probe(), num_levels=10, num_noise_draws=3, generator=torch.Generator().manual_seed(0), progress=False
    )
    assert_within_se(prof, dg.analytic_mmse_gaussian(prof.sigmas, S_D))


def test_model_profile_custom_denoise_fn_and_model_kwargs():
    """A conditional "model" whose Bayes prediction needs its per-sample condition (model_kwargs)."""
    sched = EDMEulerScheduler()
    n = 40
    g = torch.Generator().manual_seed(5)
    means = 3.0 * torch.randn(n, 1, 4, 4, generator=g)  # seed 5: not the noise generator's
    x0 = means + S_D * torch.randn(n, 1, 4, 4, generator=g)

    class CondModel(torch.nn.Module):
        def forward(self, sample, timestep=None, encoder_hidden_states=None, sigma=None):
            k = S_D**2 / (S_D**2 + sigma**2)
            return encoder_hidden_states + k * (sample - encoder_hidden_states)

    def denoise_fn(model, x_noisy, levels, model_kwargs):
        sig = levels.sigmas.view(-1, 1, 1, 1)
        return model(x_noisy, timestep=levels.timesteps, sigma=sig, **model_kwargs)

    prof = dg.profile_from_model(
        CondModel(),
        sched,
        x0,
        num_levels=8,
        num_noise_draws=2,
        batch_size=7,
        generator=torch.Generator().manual_seed(0),
        progress=False,
        denoise_fn=denoise_fn,
        model_kwargs={"encoder_hidden_states": means},
    )
    assert_within_se(prof, dg.analytic_mmse_gaussian(prof.sigmas, S_D))


def test_model_profile_model_input_fn():
    """model_input_fn replaces what the model sees and keeps the EDM output preconditioning."""
    sched = EDMEulerScheduler()
    calls = []

    def model_input_fn(x, levels):
        calls.append(1)
        return sched.precondition_inputs(x, levels.sigmas.view(-1, 1, 1, 1)), levels.timesteps * 250.0

    prof = dg.profile_from_model(
        EDMBayes(scale=250.0),
        sched,
        gaussian_probe(n=32),
        num_levels=6,
        num_noise_draws=2,
        progress=False,
        generator=torch.Generator().manual_seed(0),
        model_input_fn=model_input_fn,
    )
    assert calls
    assert_within_se(prof, dg.analytic_mmse_gaussian(prof.sigmas, S_D))


def test_model_profile_errors():
    sched = EDMEulerScheduler()
    x0 = gaussian_probe(n=4)
    with pytest.raises(ValueError, match="denoise_fn, model_input_fn"):
        dg.profile_from_model(EDMBayes(), sched, x0, denoise_fn=lambda *a: None, model_input_fn=lambda *a: None)

    class WrongShape(torch.nn.Module):
        def forward(self, sample, timestep):
            return sample[:, :, :2]

    with pytest.raises(ValueError, match="does not fit"):
        dg.profile_from_model(WrongShape(), sched, x0, num_levels=3, progress=False)
    with pytest.raises(ValueError, match="prediction_type"):
        dg.profile_from_model(EDMBayes(), sched, x0, prediction_type="flow", progress=False)
    with pytest.raises(ValueError, match="num_noise_draws"):
        dg.profile_from_model(EDMBayes(), sched, x0, num_noise_draws=0)


def test_offline_profiles_read_the_value_grid_gate_from_their_data():
    """The gate of ``gate="auto"`` comes from the probe data as in training (METHOD.md §5.5): a tenth of the
    smallest gap between the data's values, by hand: 0.2 for {−1, 1}, 0.0125 for 17 levels on [−1, 1] (gap 1/8),
    none for continuous data (its gap puts the pivot below σ_min). Before, the offline profile never saw the data
    and took the 0.2 fallback everywhere, so ``infonoise compare`` disagreed with training's own schedule."""
    sched = EDMEulerScheduler()
    g = gaussian_probe()
    cases = {"binary": (torch.sign(g), 0.2), "17 levels": ((g * 8).round().clamp(-8, 8) / 8, 0.0125), "continuous": (g, None)}
    for name, (x0, pivot) in cases.items():
        prof = dg.profile_from_model(EDMBayes(), sched, x0[:16], num_levels=8, progress=False)
        assert prof.gate.source == "data", name
        assert (prof.gate.pivot is None) if pivot is None else prof.gate.pivot == pytest.approx(pivot, rel=1e-9), name
    # the optimal-empirical-denoiser profile reads the data set itself (not its centred copy)
    binary = torch.sign(g[:32].reshape(32, -1)) * 1.0
    dprof = dg.profile_from_dataset(binary, num_levels=8, num_noise_draws=8, progress=False)
    assert dprof.gate.source == "data" and dprof.gate.pivot == pytest.approx(0.2, rel=1e-9)
    # a training sampler fed the same data measures the same value grid
    s = make_sampler("infonoise", sched, num_bins=16)
    s.observe_data(torch.sign(g))
    s.data.resolve(freeze=True)
    assert s.data.min_gap == pytest.approx(2.0, rel=1e-12)


# ------------------------------------------------------------------------------------------------
# profile_from_errors: the estimator's gate is reused
# ------------------------------------------------------------------------------------------------


def test_profile_from_errors_uses_the_estimator_gate():
    sig = torch.exp(torch.linspace(math.log(0.002), math.log(80), 40, dtype=torch.float64))
    m = dg.analytic_mmse_two_point(sig)
    prof = dg.profile_from_errors(sig, m, gate=0.2)
    assert prof.gate.pivot == 0.2 and prof.gate.source == "pinned"
    r = apply_gate(sig, m / sig**2, 0.2)
    widths = dg.grid_edges(torch.log(sig)).diff()
    assert torch.allclose(prof.rho_hat, r / (r * widths).sum(), rtol=1e-12)
    assert torch.allclose(prof.pi, prof.rho_hat)  # w = 1 by default
    # the automatic gate of a monotone Gaussian profile falls back (METHOD.md §5.5)
    gp = dg.profile_from_errors(sig, dg.analytic_mmse_gaussian(sig, 0.5))
    assert gp.gate.source == "fallback"
    # unknown (NaN) points are interpolated, not dropped
    m2 = m.clone()
    m2[20] = math.nan
    assert bool(torch.isfinite(dg.profile_from_errors(sig, m2).rho_hat).all())


# ------------------------------------------------------------------------------------------------
# allocations and summary numbers
# ------------------------------------------------------------------------------------------------


def test_allocation_edm_lognormal_with_edm_weighting_hand_formula():
    sched = EDMEulerScheduler()
    x = torch.linspace(math.log(0.01), math.log(40.0), 1000, dtype=torch.float64)
    a = dg.allocation("edm_lognormal", sched, log_sigma=x, loss_weighting="edm", prediction_type="sample")
    sig = torch.exp(x)
    pdf = torch.exp(-0.5 * ((x + 1.2) / 1.2) ** 2)
    lam = (sig**2 + 0.25) / (sig * 0.5) ** 2
    want = pdf * lam
    widths = dg.grid_edges(x).diff()
    want = want / (want * widths).sum()
    assert torch.allclose(a.phi, want, rtol=1e-4)
    # default objective on EDM is the EDM weighting
    assert dg.allocation("edm_lognormal", sched, log_sigma=x).meta["loss_weighting"] == "edm"


def test_allocation_vp_uniform_epsilon_is_cell_mass_over_sigma_squared():
    sched = DDPMScheduler()
    x = dg.log_sigma_grid(sched, 32)
    a = dg.allocation("uniform", sched, log_sigma=x)
    assert a.meta["prediction_type"] == "epsilon"
    assert torch.allclose(a.w, torch.exp(-2 * x))  # unweighted ε: w = 1/σ²
    widths = dg.grid_edges(x).diff()
    assert torch.allclose(a.phi * widths, (a.pi * a.w * widths) / (a.pi * a.w * widths).sum())


def test_allocation_of_learned_schedule_and_kingma_gao():
    sched = EDMEulerScheduler()
    s = make_sampler("infonoise", sched, loss_weighting="edm", warmup_steps=1, refresh_every=1, num_bins=16)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        lv = s.sample(512, generator=g)
        s.update(lv, dg.analytic_mmse_gaussian(lv.sigmas.double(), 0.5).float())
        s.step()
    s.save_to_scheduler(sched)
    a = dg.allocation("infonoise", sched)  # learned π from the config, stored weighting
    assert a.log_sigma.numel() == 64
    b = dg.allocation(dg.load_learned_sampler(sched), log_sigma=a.log_sigma)
    assert torch.allclose(a.phi, b.phi)
    x = s.estimator.centers
    c = dg.allocation(s, log_sigma=x)
    assert torch.allclose(c.pi, s.probs / s.estimator.widths / (s.probs.sum()), rtol=1e-9)
    kg = make_sampler("kingma_gao", sched, loss_weighting="edm")
    k = dg.allocation(kg, log_sigma=x)
    base = dg.allocation("edm_lognormal", sched, log_sigma=x)
    assert torch.allclose(k.phi, base.phi, rtol=1e-9)  # importance weights cancel π: φ = base·w
    assert k.meta["effective"].startswith("base")


def test_allocation_errors():
    with pytest.raises(ValueError, match="accepted: infonoise"):
        dg.allocation("nope", EDMEulerScheduler())
    with pytest.raises(ValueError, match="noise_scheduler"):
        dg.allocation("uniform")
    with pytest.raises(ValueError, match="no learned InfoNoise schedule"):
        dg.load_learned_sampler(EDMEulerScheduler())


def test_summary_numbers_hand_cases():
    x = torch.linspace(0.0, 1.0, 101, dtype=torch.float64)[:-1] + 0.005  # 100 cells of width 0.01 on [0, 1]
    flat = torch.ones(100, dtype=torch.float64)
    lo, hi = dg.profile_window(flat, x, 0.9)
    assert lo == pytest.approx(0.05) and hi == pytest.approx(0.95)
    assert dg.window_mass(flat, flat, x) == pytest.approx(0.9)
    left = (x < 0.5).double()
    right = (x >= 0.5).double()
    assert dg.total_variation(left, right, x) == pytest.approx(1.0)
    assert dg.total_variation(flat, flat, x) == pytest.approx(0.0)
    assert dg.total_variation(flat, left, x) == pytest.approx(0.5)
    assert dg.window_mass(right, left, x) == pytest.approx(0.0)
    assert dg.wasted_mass(right, left, x) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="central"):
        dg.profile_window(flat, x, 1.5)
    with pytest.raises(ValueError, match="increasing"):
        dg.total_variation(flat[:2], flat[:2], torch.tensor([1.0, 0.0]))


# ------------------------------------------------------------------------------------------------
# plots
# ------------------------------------------------------------------------------------------------


def test_plots(tmp_path):
    from matplotlib.figure import Figure

    sched = EDMEulerScheduler()
    s = make_sampler("infonoise", sched, loss_weighting="edm", warmup_steps=1, refresh_every=1, num_bins=16)
    g = torch.Generator().manual_seed(0)
    assert isinstance(dg.plot_schedule(s), Figure)  # before any estimate: π = base, no ρ̂
    lv = None
    for _ in range(2):
        lv = s.sample(256, generator=g)
        s.update(lv, dg.analytic_mmse_gaussian(lv.sigmas.double(), 0.5).float())
        s.step()
    fig = dg.plot_schedule(s, tmp_path / "schedule.png")
    assert isinstance(fig, Figure) and (tmp_path / "schedule.png").stat().st_size > 0
    assert any("ρ̂" in t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts())
    for sampler in (make_sampler("uniform", DDPMScheduler()), make_sampler("kingma_gao", FlowMatchEulerDiscreteScheduler())):
        assert isinstance(dg.plot_schedule(sampler, title="t"), Figure)
    assert isinstance(dg.plot_level_histogram(torch.log(lv.sigmas), s, tmp_path / "hist.png"), Figure)
    assert isinstance(dg.plot_level_histogram(torch.zeros(0), s), Figure)  # nothing drawn yet: π only
    assert isinstance(dg.plot_level_histogram([0.5, 0.5]), Figure)
    centres = torch.exp(s.estimator.centers)
    prof = dg.profile_from_errors(centres, dg.analytic_mmse_gaussian(centres, 0.5), mmse_se=torch.full((16,), 1e-3))
    allocs = [dg.allocation(n, sched, log_sigma=prof.log_sigma) for n in ("edm_lognormal", "log_uniform")]
    assert isinstance(dg.plot_profile(prof, allocs, tmp_path / "profile.png"), Figure)
    fig = dg.plot_allocations(allocs, rho=prof.rho_hat)
    # each φ's legend names which TV it is (recommend's rows print TV(π, π*), a different pair) and its value
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    for a in allocs:
        tv = dg.total_variation(a.phi, dg.normalize_density(prof.rho_hat, prof.log_sigma), prof.log_sigma)
        assert any(x.startswith(f"φ {a.name}:") and x.endswith(f"TV(φ, ρ̂) {tv:.2f}") for x in labels), labels
    with pytest.raises(TypeError, match="sampler"):
        dg.plot_schedule("edm")
