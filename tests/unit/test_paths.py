"""Paths (METHOD.md §1): σ ↔ λ ↔ native timestep maps checked against diffusers' own schedulers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from diffusers import (
    DDIMScheduler,
    DDPMScheduler,
    EDMDPMSolverMultistepScheduler,
    EDMEulerScheduler,
    FlowMatchEulerDiscreteScheduler,
)

from diffusers_infonoise import make_sampler, path_from_scheduler
from diffusers_infonoise.paths import FlowPath, log_snr_to_sigma, sigma_to_log_snr

from helpers.reference import vp_cell_edges, vp_sigmas

F64 = torch.float64
BETAS = ["linear", "scaled_linear", "squaredcos_cap_v2"]


def test_log_snr_is_minus_two_log_sigma():
    sig = torch.tensor([1e-3, 0.2, 1.0, 7.5, 1e4, math.inf], dtype=F64)
    lam = sigma_to_log_snr(sig)
    expected = torch.tensor([-2 * math.log(v) if math.isfinite(v) else -math.inf for v in sig.tolist()], dtype=F64)
    assert torch.equal(torch.isinf(lam), torch.isinf(expected))
    torch.testing.assert_close(lam[:-1], expected[:-1], rtol=1e-14, atol=0)
    assert lam[-1] == -math.inf
    torch.testing.assert_close(log_snr_to_sigma(lam[:-1]), sig[:-1], rtol=1e-13, atol=0)


# ------------------------------------------------------------------------------------------ VE


@pytest.mark.parametrize("cls", [EDMEulerScheduler, EDMDPMSolverMultistepScheduler])
def test_ve_path_reads_config_and_c_noise_matches_precondition_noise(cls):
    sched = cls(sigma_min=0.01, sigma_max=50.0, sigma_data=0.7)
    path = path_from_scheduler(sched)
    assert path.kind == "ve"
    assert (path.sigma_min, path.sigma_max, path.sigma_data) == (0.01, 50.0, 0.7)
    assert path.log_sigma_range == pytest.approx((math.log(0.01), math.log(50.0)), rel=1e-14)
    sig = torch.logspace(-2.5, 2.0, 37, dtype=F64)
    ref = EDMEulerScheduler().precondition_noise(sig)  # diffusers: 0.25·ln σ
    torch.testing.assert_close(path.sigma_to_timesteps(sig), ref.to(F64), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(path.timesteps_to_sigma(0.25 * torch.log(sig)), sig, rtol=1e-12, atol=0)


def test_ve_sampler_timesteps_are_c_noise_of_sigmas():
    sampler = make_sampler("edm_lognormal", EDMEulerScheduler())
    levels = sampler.sample(64, generator=torch.Generator().manual_seed(0))
    ref = EDMEulerScheduler().precondition_noise(levels.sigmas.to(F64))
    torch.testing.assert_close(levels.timesteps.to(F64), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(levels.log_snr.to(F64), -2 * torch.log(levels.sigmas.to(F64)), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------ VP


@pytest.mark.parametrize("beta_schedule", BETAS)
@pytest.mark.parametrize("cls", [DDPMScheduler, DDIMScheduler])
def test_vp_sigma_table_matches_alphas_cumprod(cls, beta_schedule):
    sched = cls(beta_schedule=beta_schedule)
    path = path_from_scheduler(sched)
    assert path.kind == "vp" and path.is_discrete
    ref = vp_sigmas(sched.alphas_cumprod.double().numpy())
    np.testing.assert_allclose(path.sigmas_table.numpy(), ref, rtol=1e-12)
    assert path.sigma_min == pytest.approx(ref.min(), rel=1e-12)
    assert path.sigma_max == pytest.approx(ref.max(), rel=1e-12)
    t = torch.arange(sched.config.num_train_timesteps)
    np.testing.assert_allclose(path.timesteps_to_sigma(t).numpy(), ref, rtol=1e-12)
    # every table σ maps back to its own t
    assert torch.equal(path.sigma_to_timesteps(torch.from_numpy(ref)), t)
    # the grid range is the outer edges of the end cells (hand: half a gap beyond the end steps)
    edges = vp_cell_edges(sched.alphas_cumprod.double().numpy())
    assert path.log_sigma_range == pytest.approx((edges[0], edges[-1]), rel=1e-12)


@pytest.mark.parametrize("beta_schedule", BETAS)
def test_vp_sigma_to_timesteps_nearest_cell(beta_schedule):
    sched = DDPMScheduler(beta_schedule=beta_schedule)
    path = path_from_scheduler(sched)
    ls = np.log(vp_sigmas(sched.alphas_cumprod.double().numpy()))
    rng = np.random.default_rng(0)
    x = rng.uniform(ls[0] - 1.0, ls[-1] + 1.0, size=2000)
    # the cell of t is delimited by the midpoints in log σ, i.e. t = the nearest step in log σ
    expected = np.abs(x[:, None] - ls[None, :]).argmin(axis=1)
    got = path.sigma_to_timesteps(torch.from_numpy(np.exp(x))).numpy()
    assert (got == expected).mean() > 0.999  # ties at exact midpoints only
    assert np.all(np.abs(got - expected) <= 1)
    # outside the table: the end steps
    assert path.sigma_to_timesteps(torch.tensor([1e-9, 0.0, 1e9, math.inf], dtype=F64)).tolist() == [0, 0, 999, 999]


@pytest.mark.parametrize("cls", ["EulerDiscreteScheduler", "EulerAncestralDiscreteScheduler", "DPMSolverMultistepScheduler"])
def test_an_inference_scheduler_with_zero_terminal_snr_is_the_ddpm_table(cls):
    """diffusers' inference schedulers keep ᾱ_T = 2**-24 for rescale_betas_zero_snr=True (so that their own σ_T is
    finite), above ᾱ_{T-1} ≈ 4e-9: a table that is not decreasing, which every sampler refused. Their path is the zero-SNR
    table it stands for, DDPMScheduler's of the same config (ᾱ_T = 0, σ_T = inf), and sampling draws the last step."""
    import diffusers

    sched = getattr(diffusers, cls)(rescale_betas_zero_snr=True, prediction_type="v_prediction")
    ac = sched.alphas_cumprod.double()
    assert float(ac[-1]) == 2.0**-24 and float(ac[-1]) > float(ac[-2])  # what diffusers does, checked by hand
    want = DDPMScheduler(rescale_betas_zero_snr=True, prediction_type="v_prediction").alphas_cumprod.double()
    path = path_from_scheduler(sched)
    assert float(want[-1]) == 0.0 and torch.equal(path.alphas_cumprod.double()[:-1], want[:-1]) and float(path.alphas_cumprod[-1]) == 0.0
    assert math.isinf(float(path.sigmas_table[-1]))
    sampler = make_sampler("infonoise", sched, warmup_steps=1, refresh_every=1, min_count=1)
    levels = sampler.sample(4000, generator=torch.Generator().manual_seed(1))
    assert int((levels.timesteps == 999).sum()) > 0 and not bool(torch.isnan(levels.sigmas).any())


@pytest.mark.parametrize("cls", [DDPMScheduler, DDIMScheduler])
def test_vp_zero_terminal_snr(cls):
    sched = cls(rescale_betas_zero_snr=True)
    assert float(sched.alphas_cumprod[-1]) == 0.0 or float(sched.alphas_cumprod[-1]) < 1e-20
    path = path_from_scheduler(sched)
    table = path.sigmas_table
    assert math.isinf(float(table[-1])) and bool(torch.isfinite(table[:-1]).all())
    assert not bool(torch.isnan(table).any())
    lo, hi = path.log_sigma_range
    assert math.isfinite(lo) and math.isfinite(hi)
    assert math.isfinite(path.sigma_max)
    a, b = path.scale_factors(table)
    assert not bool(torch.isnan(a).any() or torch.isnan(b).any())
    assert float(a[-1]) == 0.0 and float(b[-1]) == 1.0
    lam = sigma_to_log_snr(table)
    assert float(lam[-1]) == -math.inf and not bool(torch.isnan(lam).any())
    # drawing, noising and updating never produce NaN, even at the σ = inf step
    for pred in ("epsilon", "v_prediction"):
        sampler = make_sampler("infonoise", sched, prediction_type=pred, warmup_steps=1, refresh_every=1, min_count=1)
        levels = sampler.sample(4000, generator=torch.Generator().manual_seed(1))
        assert int((levels.timesteps == 999).sum()) > 0
        assert not bool(torch.isnan(levels.sigmas).any() or torch.isnan(levels.log_snr).any())
        x0, noise = torch.randn(len(levels), 3), torch.randn(len(levels), 3)
        noisy = sampler.add_noise(x0, noise, levels)
        assert bool(torch.isfinite(noisy).all())
        last = levels.timesteps == 999
        torch.testing.assert_close(noisy[last], noise[last])  # a = 0, b = 1
        sampler.update(levels, torch.rand(len(levels)))
        sampler.step()
        assert sampler.is_adapted
        p = sampler.timestep_probabilities()
        assert bool(torch.isfinite(p).all()) and float(p.sum()) == pytest.approx(1.0, abs=1e-12)
        # an ε error carries no x0 information at σ = inf: those samples are left out and counted
        if pred == "epsilon":
            assert sampler._num_nonfinite == int(last.sum())
        else:
            assert sampler._num_nonfinite == 0


@pytest.mark.parametrize("beta_schedule", BETAS)
def test_vp_add_noise_equals_ddpm_add_noise(beta_schedule):
    sched = DDPMScheduler(beta_schedule=beta_schedule)
    for name in ("uniform", "infonoise", "edm_lognormal"):
        sampler = make_sampler(name, sched)
        levels = sampler.sample(128, generator=torch.Generator().manual_seed(2))
        assert levels.timesteps.dtype == torch.int64
        x0, noise = torch.randn(128, 2, 4, 4), torch.randn(128, 2, 4, 4)
        ref = sched.add_noise(x0, noise, levels.timesteps)
        torch.testing.assert_close(sampler.add_noise(x0, noise, levels), ref, rtol=1e-5, atol=1e-5)
        # the path's own a, b at the float σ agree too
        torch.testing.assert_close(sampler.path.add_noise(x0, noise, levels.sigmas.double()), ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------ VE add_noise


def test_ve_add_noise_any_sigma_and_grid_sigma():
    sched = EDMEulerScheduler()
    sampler = make_sampler("edm_lognormal", sched)
    levels = sampler.sample(256, generator=torch.Generator().manual_seed(3))
    x0, noise = torch.randn(256, 1, 3, 3), torch.randn(256, 1, 3, 3)
    torch.testing.assert_close(sampler.add_noise(x0, noise, levels), x0 + levels.sigmas.view(-1, 1, 1, 1) * noise)
    # on diffusers' own grid, EDMEulerScheduler.add_noise agrees
    sched.set_timesteps(12)
    ts, sig = sched.timesteps[:8], sched.sigmas[:8]
    x0, noise = torch.randn(8, 1, 3, 3), torch.randn(8, 1, 3, 3)
    ref = sched.add_noise(x0, noise, ts)
    torch.testing.assert_close(sampler.path.add_noise(x0, noise, sig.double()), ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------ flow


def test_flow_sigma_s_timestep_maps_match_scheduler():
    sched = FlowMatchEulerDiscreteScheduler()
    path = path_from_scheduler(sched)
    idx = torch.nonzero(sched.sigmas.double() < 1).flatten()  # s = 1 has σ = inf
    s = sched.sigmas.double()[idx]
    sig = s / (1 - s)
    torch.testing.assert_close(FlowPath.sigma_to_s(sig), s, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(FlowPath.s_to_sigma(s), sig, rtol=1e-12, atol=0)
    torch.testing.assert_close(path.sigma_to_timesteps(sig), sched.timesteps.double()[idx], rtol=1e-6, atol=1e-3)
    back = path.timesteps_to_sigma(sched.timesteps.double()[idx])
    torch.testing.assert_close(back / (1 + back), s, rtol=0, atol=1e-6)  # compare in s: float32 table
    assert FlowPath.sigma_to_s(torch.tensor([math.inf], dtype=F64)).item() == 1.0
    n = sched.config.num_train_timesteps
    assert path.log_sigma_range == pytest.approx((math.log((1 / n) / (1 - 1 / n)), math.log((1 - 1 / n) / (1 / n))), rel=1e-12)


@pytest.mark.parametrize("shift", [0.5, 3.0, 7.0])
def test_flow_static_shift_is_sigma_times_shift(shift):
    plain, shifted = FlowMatchEulerDiscreteScheduler(), FlowMatchEulerDiscreteScheduler(shift=shift)
    s0, s1 = plain.sigmas.double(), shifted.sigmas.double()
    # σ → shift·σ, written in s (diffusers' table is float32, so compare there, not in σ ~ 1/(1 − s))
    sig0 = s0 / (1 - s0)
    expected = torch.where(torch.isinf(sig0), torch.ones_like(s0), shift * sig0 / (1 + shift * sig0))
    torch.testing.assert_close(s1, expected, rtol=0, atol=2e-7)
    path = path_from_scheduler(shifted)
    assert path.kind == "flow" and path.shift == shift


@pytest.mark.parametrize("mu", [-0.4, 0.6, 1.3])
def test_flow_dynamic_shift_equals_static_exp_mu(mu):
    base = np.linspace(1.0, 1 / 50, 50)
    dyn = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
    dyn.set_timesteps(sigmas=base, mu=mu)
    static = FlowMatchEulerDiscreteScheduler(shift=math.exp(mu))
    static.set_timesteps(sigmas=base)
    torch.testing.assert_close(dyn.sigmas.double(), static.sigmas.double(), rtol=0, atol=2e-7)
    # and both are σ → e^mu·σ of the unshifted levels (hand, float64)
    sig = base[1:] / (1 - base[1:])  # base[0] = 1 (σ = inf) stays 1
    e = np.concatenate([[1.0], math.exp(mu) * sig / (1 + math.exp(mu) * sig)])
    np.testing.assert_allclose(dyn.sigmas.double().numpy()[:50], e, rtol=0, atol=2e-7)
    p_dyn = path_from_scheduler(FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True), mu=mu)
    assert p_dyn.shift == pytest.approx(math.exp(mu), rel=1e-14)
    assert p_dyn.config() == path_from_scheduler(FlowMatchEulerDiscreteScheduler(shift=math.exp(mu))).config()


def test_flow_dynamic_shift_requires_mu_and_mu_only_for_flow():
    with pytest.raises(ValueError, match="mu"):
        path_from_scheduler(FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True))
    for sched in (FlowMatchEulerDiscreteScheduler(), DDPMScheduler(), EDMEulerScheduler()):
        with pytest.raises(ValueError, match="mu"):
            path_from_scheduler(sched, mu=0.5)


@pytest.mark.parametrize("shift", [1.0, 3.0])
def test_flow_add_noise_matches_scale_noise(shift):
    sched = FlowMatchEulerDiscreteScheduler(shift=shift)
    sampler = make_sampler("logit_normal", sched)
    levels = sampler.sample(200, generator=torch.Generator().manual_seed(4))
    n = sched.config.num_train_timesteps
    s = levels.timesteps.double() / n  # timestep = s·N
    torch.testing.assert_close(s / (1 - s), levels.sigmas.double(), rtol=1e-4, atol=0)
    x0, noise = torch.randn(200, 2, 2), torch.randn(200, 2, 2)
    s32 = s.float().view(-1, 1, 1)
    torch.testing.assert_close(sampler.add_noise(x0, noise, levels), (1 - s32) * x0 + s32 * noise, rtol=1e-5, atol=1e-5)
    # on the scheduler's own table, scale_noise agrees (grid timesteps only)
    idx = torch.tensor([0, 17, 250, 500, 998])
    ts, s_grid = sched.timesteps[idx], sched.sigmas.double()[idx]
    x0, noise = torch.randn(5, 2, 2), torch.randn(5, 2, 2)
    ref = sched.scale_noise(x0, ts, noise)
    torch.testing.assert_close(sampler.path.add_noise(x0, noise, s_grid / (1 - s_grid)), ref, rtol=1e-5, atol=1e-5)


def test_unsupported_scheduler_is_type_error_naming_argument():
    class NotAScheduler:
        config = {}

    with pytest.raises(TypeError, match="noise_scheduler"):
        path_from_scheduler(NotAScheduler())
    with pytest.raises(TypeError, match="noise_scheduler"):
        make_sampler("infonoise", NotAScheduler())


def test_flow_heun_is_flow_and_dynamic_shift_moves_baselines():
    from diffusers import FlowMatchHeunDiscreteScheduler

    assert path_from_scheduler(FlowMatchHeunDiscreteScheduler()).kind == "flow"
    mu = 0.9
    dyn = make_sampler("logit_normal", FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True), mu=mu)
    static = make_sampler("logit_normal", FlowMatchEulerDiscreteScheduler(shift=math.exp(mu)))
    x = torch.linspace(-5, 5, 21, dtype=F64)
    torch.testing.assert_close(dyn._log_prob(torch.exp(x)), static._log_prob(torch.exp(x)), rtol=1e-12, atol=1e-12)
    # logit-normal(0, 1) on the level shifted by e^mu: log σ − mu ~ N(0, 1), truncated to the range
    from scipy import stats

    n = 1000
    lo, hi = math.log((1 / n) / (1 - 1 / n)), math.log((1 - 1 / n) / (1 / n))
    z = stats.norm.cdf(hi - mu) - stats.norm.cdf(lo - mu)
    np.testing.assert_allclose(dyn._log_prob(torch.exp(x)).numpy(), stats.norm.logpdf(x.numpy() - mu) - math.log(z), atol=1e-10)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: EDMEulerScheduler(sigma_min=0), "sigma_min"),
        (lambda: EDMEulerScheduler(sigma_min=5.0, sigma_max=1.0), "sigma_min < sigma_max"),
        (lambda: EDMEulerScheduler(sigma_max=float("inf")), "finite"),
        (lambda: DDPMScheduler(num_train_timesteps=2), "num_train_timesteps"),
        (lambda: FlowMatchEulerDiscreteScheduler(shift=float("nan")), "shift"),
        (lambda: FlowMatchEulerDiscreteScheduler(invert_sigmas=True), "invert_sigmas"),
    ],
)
def test_schedulers_the_paths_cannot_represent_are_refused(make, match):
    with pytest.raises(ValueError, match=match):
        path_from_scheduler(make())


def test_vp_looking_schedulers_on_flow_sigmas_are_refused():
    from diffusers import DPMSolverMultistepScheduler, UniPCMultistepScheduler

    for cls in (UniPCMultistepScheduler, DPMSolverMultistepScheduler):
        with pytest.raises(ValueError, match="use_flow_sigmas"):
            path_from_scheduler(cls(use_flow_sigmas=True))


def test_bad_mu_and_base_name_the_argument():
    from diffusers_infonoise import make_sampler

    with pytest.raises(ValueError, match="mu: must be a finite"):
        path_from_scheduler(FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True), mu=1000.0)
    with pytest.raises(ValueError, match="base: expected None, a density name"):
        make_sampler("infonoise", EDMEulerScheduler(), base=42)


@pytest.mark.parametrize(
    "cls,options,expected",
    [
        ("VPPath", {"num_train_timesteps": 500, "beta_schedule": "squaredcos_cap_v2", "prediction_type": "sample", "shift": 3.0},
         DDPMScheduler(num_train_timesteps=500, beta_schedule="squaredcos_cap_v2", prediction_type="sample")),
        ("VEPath", {"sigma_min": 0.01, "sigma_max": 20.0, "sigma_data": 1.0, "prediction_type": "v_prediction", "num_train_timesteps": 7},
         EDMEulerScheduler(sigma_min=0.01, sigma_max=20.0, sigma_data=1.0, prediction_type="v_prediction")),
        ("FlowPath", {"shift": 3.0, "prediction_type": "epsilon", "num_train_timesteps": 500}, FlowMatchEulerDiscreteScheduler(shift=3.0)),
    ],
)  # fmt: skip
def test_a_new_models_scheduler_is_the_paths_with_its_own_options_only(cls, options, expected):
    """What train_unconditional.py builds for a new model is a path fact: the path's scheduler class, with the options
    that belong to it (the others' left out), and a scheduler of that path again; its --prediction_type values are
    what the scheduler takes (flow: none, the velocity)."""
    from diffusers_infonoise import paths

    path = getattr(paths, cls)
    sched = path.new_scheduler(options)
    assert type(sched) is type(expected) and dict(sched.config) == dict(expected.config)
    assert paths.PATH_CLASSES[paths.scheduler_kind(sched)] is path
    assert sched.config.get("prediction_type", "flow") in path.scheduler_prediction_types
    assert {c.diffusion for c in paths.PATH_CLASSES.values()} == {"ddpm", "edm", "flow"}
