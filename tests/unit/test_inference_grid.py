"""InfoGrid (METHOD.md §8): entropic-time grids checked against hand and closed-form inversions, each
scheduler landing on the σ named, and the pipeline a trained EDM model is saved as."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from diffusers import (
    DDIMScheduler,
    DDPMScheduler,
    DPMSolverMultistepScheduler,
    EDMEulerScheduler,
    EulerDiscreteScheduler,
    FlowMatchEulerDiscreteScheduler,
)

from benchmarks.tiny_pipelines import tiny_unet2d
from diffusers_infonoise import InfoNoiseTrainingTimestepSampler
from diffusers_infonoise.inference_grid import entropic_time_sigmas, infogrid, scheduler_grid_kwargs, set_infogrid

F64 = torch.float64


def test_entropic_time_by_hand():
    # cells [0, 1] and [1, 3] in log σ with g = 3 and 0.5: masses 3 and 1 (CDF 0 → 0.75 → 1); N = 4 steps
    # at τ = 1, 0.75, 0.5, 0.25: log σ = 3, 1, 0.5/0.75 = 2/3, 0.25/0.75 = 1/3
    got = entropic_time_sigmas(torch.tensor([0.5, 2.0]), torch.tensor([3.0, 0.5]), 4, edges=torch.tensor([0.0, 1.0, 3.0]))
    torch.testing.assert_close(torch.log(got), torch.tensor([3.0, 1.0, 2 / 3, 1 / 3], dtype=F64), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="num_inference_steps"):
        entropic_time_sigmas(torch.tensor([0.0, 1.0]), torch.ones(2), 0)
    with pytest.raises(ValueError, match="density"):
        entropic_time_sigmas(torch.tensor([0.0, 1.0]), torch.tensor([1.0, -1.0]), 3)


def _gaussian_sampler(s_d=0.5):
    """EDM sampler fed the exact Bayes x0-MMSE of N(0, s_d²) data: m(σ) = σ²s_d²/(σ² + s_d²)."""
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(
        EDMEulerScheduler(), warmup_steps=2, refresh_every=1, gate=None, smoothing=0.0
    )
    gen = torch.Generator().manual_seed(0)
    for _ in range(4):
        lv = sampler.sample(8192, generator=gen)
        sig = lv.sigmas.double()
        sampler.update(lv, sig**2 * s_d**2 / (sig**2 + s_d**2))
        sampler.step()
    return sampler


def test_q_grid_of_gaussian_data_matches_the_closed_form():
    """g = q = m/σ² = s²/(σ² + s²) per unit log σ integrates to G(σ) = ln σ − ½·ln(σ² + s²): τ(σ) is
    (G(σ) − G(σ_lo))/(G(σ_hi) − G(σ_lo)) on the sampler's grid, inverted here by bisection."""
    s_d = 0.5
    sampler = _gaussian_sampler(s_d)
    grid = infogrid(sampler, 8, density="q")
    lo, hi = float(sampler.estimator.edges[0]), float(sampler.estimator.edges[-1])

    def big_g(x):
        return x - 0.5 * math.log(math.exp(2 * x) + s_d**2)

    want = []
    for i in range(8):
        tau = 1 - i / 8
        target = big_g(lo) + tau * (big_g(hi) - big_g(lo))
        a, b = lo, hi
        for _ in range(100):
            mid = 0.5 * (a + b)
            a, b = (mid, b) if big_g(mid) < target else (a, mid)
        want.append(0.5 * (a + b))
    # the sampler's estimate is binned (64 bins): the steps agree to a fraction of a bin
    np.testing.assert_allclose(torch.log(grid.sigmas).numpy(), want, atol=0.1)
    # q·σ puts more steps at large σ than q, ρ (ungated here) equals q
    assert bool((infogrid(sampler, 8, density="q_sigma").sigmas[1:] > grid.sigmas[1:]).all())
    torch.testing.assert_close(infogrid(sampler, 8, density="rho").sigmas, grid.sigmas, rtol=1e-9, atol=0)


SIGMAS = torch.tensor([40.0, 5.0, 0.5, 0.05, 0.01], dtype=F64)


def _flow_as_ve(scheduler):
    s = scheduler.sigmas[:-1].double()
    return s / (1 - s)


@pytest.mark.parametrize(
    "make,landed",
    [
        (lambda: EDMEulerScheduler(), lambda s: s.sigmas[:-1].double()),
        (lambda: EDMEulerScheduler(rho=3.0, sigma_max=60.0), lambda s: s.sigmas[:-1].double()),
        (lambda: EulerDiscreteScheduler(), lambda s: s.sigmas[:-1].double()),
        (lambda: FlowMatchEulerDiscreteScheduler(shift=3.0), _flow_as_ve),
        (lambda: FlowMatchEulerDiscreteScheduler(), _flow_as_ve),
    ],
)
def test_each_scheduler_steps_through_the_sigmas_named(make, landed):
    scheduler = make()
    set_infogrid(scheduler, SIGMAS)
    torch.testing.assert_close(landed(scheduler), SIGMAS, rtol=1e-5, atol=0)  # float32 s, amplified by 1/(1 − s) on flow
    # and a fresh scheduler given the kwargs the way a pipeline passes them lands there too
    fresh = make()
    kwargs = scheduler_grid_kwargs(fresh, SIGMAS)
    if isinstance(fresh, EDMEulerScheduler):
        fresh.set_timesteps(num_inference_steps=len(SIGMAS), **kwargs)
    else:
        fresh.set_timesteps(**kwargs)
    torch.testing.assert_close(landed(fresh), SIGMAS, rtol=1e-5, atol=0)  # float32 s, amplified by 1/(1 − s) on flow


def test_flux_dynamic_shift_is_undone_for_the_pipelines_mu():
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15)
    with pytest.raises(ValueError, match="mu"):
        set_infogrid(scheduler, SIGMAS)
    set_infogrid(scheduler, SIGMAS, mu=0.9)
    torch.testing.assert_close(_flow_as_ve(scheduler), SIGMAS, rtol=1e-5, atol=0)  # float32 s, amplified by 1/(1 − s) on flow


@pytest.mark.parametrize("cls", [DDPMScheduler, DPMSolverMultistepScheduler])
def test_timestep_schedulers_land_on_the_nearest_table_steps(cls):
    scheduler = cls(num_train_timesteps=1000)
    set_infogrid(scheduler, SIGMAS)
    abar = DDPMScheduler(num_train_timesteps=1000).alphas_cumprod.double()
    table = ((1 - abar) / abar).sqrt()
    t = scheduler.timesteps.long()
    # each step is the table step nearest in log σ to the one named
    want = torch.stack([(table.log() - math.log(s)).abs().argmin() for s in SIGMAS])
    assert torch.equal(t, want)
    assert bool(((table[t].log() - SIGMAS.log()).abs() < 0.02).all())


@pytest.mark.parametrize(
    "scheduler,pattern",
    [
        (DDIMScheduler(), "takes no custom grid"),
        (EDMEulerScheduler(sigma_schedule="exponential"), "sigma_schedule"),
        (FlowMatchEulerDiscreteScheduler(use_karras_sigmas=True), "use_karras_sigmas"),
        (EDMEulerScheduler(), "leaves the scheduler's range"),
        # "DPM++ 2M Karras": diffusers refuses timesteps= under these flags; said with the remedy, before the call
        (DPMSolverMultistepScheduler(use_karras_sigmas=True), r"use_karras_sigmas=True refuses a custom grid .*=False\)"),
        (DPMSolverMultistepScheduler(use_lu_lambdas=True), "with use_lu_lambdas=True refuses a custom grid"),
    ],
)
def test_grids_a_scheduler_cannot_land_are_refused(scheduler, pattern):
    sig = SIGMAS if "range" not in pattern else torch.tensor([200.0, 1.0], dtype=F64)
    with pytest.raises(ValueError, match=pattern):
        set_infogrid(scheduler, sig)


def test_the_levels_of_a_scheduler_without_sigmas_are_refused_by_name():
    """DDIM holds no sigmas: reading its levels was an AttributeError deep inside (infonoise grid on a DDIM config)."""
    from diffusers_infonoise.scheduler_grids import scheduler_sigmas_as_ve

    scheduler = DDIMScheduler()
    scheduler.set_timesteps(4)
    with pytest.raises(ValueError, match=r"^noise_scheduler: DDIMScheduler is not one whose noise levels can be read; supported: EDM"):
        scheduler_sigmas_as_ve(scheduler)


# -- the saved EDM pipeline ------------------------------------------------------------------------


def _tiny_unet():
    torch.manual_seed(0)
    return tiny_unet2d(8)


def test_saved_edm_pipeline_samples_with_the_stock_loader_or_says_what_to_do(tmp_path):
    from diffusers import DDPMPipeline, DiffusionPipeline

    from diffusers_infonoise.generation import generate_images
    from diffusers_infonoise.pipeline import InfoNoiseUnconditionalPipeline
    from diffusers_infonoise.training.outputs import save_unconditional_pipeline

    sampler = _gaussian_sampler()
    scheduler = EDMEulerScheduler()
    save_unconditional_pipeline(_tiny_unet(), None, scheduler, sampler, str(tmp_path))
    # the stock calls never return a pipeline that samples EDM wrong: they ask for the loader's code
    for cls in (DiffusionPipeline, DDPMPipeline):
        with pytest.raises(ValueError, match="trust_remote_code"):
            cls.from_pretrained(str(tmp_path))
    pipe = DiffusionPipeline.from_pretrained(str(tmp_path), trust_remote_code=True)
    assert type(pipe).__name__ == "InfoNoiseUnconditionalPipeline"
    out = pipe(batch_size=3, num_inference_steps=5, generator=torch.Generator().manual_seed(1), output_type="pt").images
    ref = generate_images(pipe.unet, pipe.scheduler, 3, num_inference_steps=5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(out, ref) and out.shape == (3, 1, 8, 8)
    # the InfoGrid of the stored schedule, through the pipeline
    ours = InfoNoiseUnconditionalPipeline.from_pretrained(str(tmp_path))
    got = ours(batch_size=2, num_inference_steps=4, infogrid="q_sigma", generator=torch.Generator().manual_seed(2), output_type="pt").images
    grid = infogrid(ours.scheduler, 4, density="q_sigma")
    want = generate_images(ours.unet, ours.scheduler, 2, sigmas=grid, generator=torch.Generator().manual_seed(2))
    assert torch.equal(got, want)
    pil = ours(batch_size=1, num_inference_steps=2).images
    assert pil[0].size == (8, 8)
    with pytest.raises(ValueError, match="output_type"):
        ours(output_type="latent")
    for bad, pattern in (
        ({"batch_size": 0}, "batch_size"),
        ({"num_inference_steps": 2.5}, "num_inference_steps"),
        ({"num_inference_steps": 0}, "num_inference_steps"),
        ({"sigmas": grid.sigmas, "num_inference_steps": 7}, "give one"),
    ):
        with pytest.raises(ValueError, match=pattern):
            ours(**bad)


def test_cli_grid_prints_the_grid_the_library_computes(tmp_path, capsys):
    from diffusers_infonoise.cli import main

    sampler = _gaussian_sampler()
    scheduler = EDMEulerScheduler()
    sampler.save_to_scheduler(scheduler)
    scheduler.save_pretrained(str(tmp_path / "scheduler"))
    assert main(["grid", str(tmp_path), "--steps", "6", "--density", "q", "--plot", str(tmp_path / "g.png")]) == 0
    out = capsys.readouterr().out
    want = infogrid(scheduler, 6, density="q").sigmas
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    np.testing.assert_allclose([float(r[1]) for r in rows], want.numpy(), rtol=1e-3)
    assert (tmp_path / "g.png").is_file() and "sigmas=[" in out


def test_grids_stay_in_the_paths_range_and_the_cli_says_which_form_is_which(tmp_path, capsys):
    """The outer bin edges of a VP path reach past its table; the InfoGrid does not. A σ outside a
    scheduler's range, or a mu for a scheduler without a dynamic shift, is refused."""
    from diffusers_infonoise.cli import main
    from diffusers_infonoise.paths import path_from_scheduler

    ddpm = DDPMScheduler()
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(ddpm, warmup_steps=2, refresh_every=1, gate=None)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        lv = sampler.sample(8192, generator=gen)
        sig = lv.sigmas.double()
        sampler.update(lv, 0.25 / (sig**2 + 0.25))  # the ε error of Bayes-optimal N(0, 0.25) data
        sampler.step()
    grid = infogrid(sampler, 6)
    path = path_from_scheduler(ddpm)
    assert float(grid.sigmas[0]) <= path.sigma_max and float(grid.sigmas[-1]) >= path.sigma_min
    with pytest.raises(ValueError, match="range"):
        set_infogrid(EulerDiscreteScheduler(), torch.tensor([1e6, 1.0], dtype=F64))
    with pytest.raises(ValueError, match="range"):
        scheduler_grid_kwargs(DDPMScheduler(), torch.tensor([1e6, 1.0], dtype=F64))
    with pytest.raises(ValueError, match="mu"):
        scheduler_grid_kwargs(DDPMScheduler(), torch.tensor([10.0, 1.0], dtype=F64), mu=0.5)
    sampler.save_to_scheduler(ddpm)
    ddpm.save_pretrained(str(tmp_path / "scheduler"))
    assert main(["grid", str(tmp_path), "--steps", "4", "--mu", "0.5"]) == 2  # a clean error, not a traceback
    assert main(["grid", str(tmp_path), "--steps", "4"]) == 0
    out = capsys.readouterr().out
    assert "InfoNoiseUnconditionalPipeline(sigmas=...)" in out and "timesteps=[" in out


def test_a_capped_schedules_grid_warns():
    """ε/v schedules cap m̂ at the data's variance: fine for training, measured worse for sampling."""
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler(), warmup_steps=2, refresh_every=1, mmse_cap=0.25)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        lv = sampler.sample(4096, generator=gen)
        sampler.update(lv, 0.25 / (lv.sigmas.double() ** 2 + 0.25))
        sampler.step()
    with pytest.warns(UserWarning, match="profile_from_model"):
        infogrid(sampler, 4)


def _ddpm_sampler(scheduler=None, error=lambda sig: 0.25 / (sig**2 + 0.25)):
    """An InfoNoise sampler on a 1000-step DDPM path adapted to per-sample ``error(sigma)`` (default: the ε error of
    Bayes-optimal N(0, 0.25) data). Without the clean-end bound (docs/METHOD.md §5.10): the peaked stand-in below,
    an ε error σ¹⁰, is an x0 error σ¹² above the identity predictor's σ² for σ > 1, a profile for the grid's limits,
    not a Bayes one."""
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(
        scheduler or DDPMScheduler(), warmup_steps=2, refresh_every=1, gate=None, mmse_cap=None, clean_end_bound=False
    )
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        lv = sampler.sample(8192, generator=gen)
        sampler.update(lv, error(lv.sigmas.double()))
        sampler.step()
    return sampler


def test_the_pipelines_default_infogrid_works_on_a_1000_step_ddpm_model(monkeypatch, caplog):
    """Issue 28: ``pipe(infogrid=True)`` on a 1000-step DDPM model failed at the pipeline's own default number of
    steps (1000, DDPMPipeline's), which an entropic-time grid cannot hold. The InfoGrid's default is
    DEFAULT_GRID_STEPS (50) there, the scheduler steps through exactly that grid, and a profile too peaked for even
    that gets the most steps that fit, with a note; an explicit number that does not fit is still refused."""
    import logging
    import re
    import warnings

    from diffusers_infonoise import generation
    from diffusers_infonoise.inference_grid import DEFAULT_GRID_STEPS
    from diffusers_infonoise.pipeline import InfoNoiseUnconditionalPipeline

    calls = []

    def record(unet, sched, batch_size, *, num_inference_steps, sigmas, **kwargs):
        set_infogrid(sched, sigmas)  # what generate_images does first: it raises unless the scheduler steps through them
        calls.append((num_inference_steps, sigmas, sched.timesteps.clone()))
        return torch.zeros(batch_size, 1, 8, 8)

    monkeypatch.setattr(generation, "generate_images", record)  # hundreds of UNet calls would take seconds
    warnings.simplefilter("ignore")  # (restored by pytest) the capped-m̂ advice is not what this test is about
    for error, peaked in ((lambda sig: 0.25 / (sig**2 + 0.25), False), (lambda sig: sig**10, True)):
        scheduler = DDPMScheduler()
        sampler = _ddpm_sampler(scheduler, error)
        sampler.save_to_scheduler(scheduler)
        with pytest.raises(ValueError, match="at most") as info:
            infogrid(sampler, 1000)
        most = int(re.search(r"at most (\d+) fit", str(info.value)).group(1))
        assert (most < DEFAULT_GRID_STEPS) == peaked
        pipe = InfoNoiseUnconditionalPipeline(unet=_tiny_unet(), scheduler=scheduler)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="diffusers_infonoise"):
            pipe(batch_size=1, infogrid=True, output_type="pt")
        steps, grid, timesteps = calls[-1]
        want = min(most, DEFAULT_GRID_STEPS)
        assert steps == len(grid) == timesteps.numel() == want
        assert bool((timesteps[1:] < timesteps[:-1]).all())  # distinct integer steps, from the noisy end
        torch.testing.assert_close(grid.sigmas, infogrid(sampler, want).sigmas, rtol=0, atol=0)
        assert (f"sampling with {most}, the most that fit" in caplog.text) == peaked
        pipe(batch_size=1, infogrid=True, num_inference_steps=3, output_type="pt")
        assert len(calls[-1][1]) == 3
        with pytest.raises(ValueError, match=f"at most {most} fit"):
            pipe(batch_size=1, infogrid=True, num_inference_steps=most + 1, output_type="pt")


def test_too_many_steps_say_how_many_fit():
    """On a 1000-step DDPM path the InfoGrid failed at the pipeline's own default of 1000 steps without saying
    what would fit (issue 20). The message names the largest N, and that N is accepted, N + 1 is not."""
    import re
    import warnings

    sampler = _ddpm_sampler()
    with pytest.raises(ValueError, match=r"1000 steps of this q_sigma grid do not fit .* at most \d+ fit here") as info:
        infogrid(sampler, 1000)
    n = int(re.search(r"at most (\d+) fit", str(info.value)).group(1))
    assert 10 < n < 1000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert len(infogrid(sampler, n)) == n
    with pytest.raises(ValueError, match=f"at most {n} fit"):
        infogrid(sampler, n + 1)
    # whether n fits is not monotone on a VP table (steps round onto it): the named N is the largest below 1000 that
    # fits, every count between it and 1000 checked one by one (a bisection named 179 where up to 228 fit)
    from diffusers_infonoise.inference_grid import _grid_that_fits, _profile_arrays

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        profile = _profile_arrays(sampler, "q_sigma")
        assert _grid_that_fits(*profile, n) is not None
        assert all(_grid_that_fits(*profile, m) is None for m in range(n + 1, 1000))
