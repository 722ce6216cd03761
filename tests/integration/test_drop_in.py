"""The drop-in surface (issue 13): diffusers' options mapped to the sampler's settings, the sampler's
own per-rank random stream, levels in the scheduler's own coordinate, and an update() that never
reads the device back to the host."""

from __future__ import annotations

import argparse
import math

import pytest
import torch
from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

from diffusers_infonoise import InfoNoiseTrainingTimestepSampler, make_sampler
from diffusers_infonoise.integration import infonoise_sampler, per_sample_mse, sampler_settings
from diffusers_infonoise.training.loop import weighted_loss

# -- options → settings, by hand from diffusers' scripts ---------------------------------------------


@pytest.mark.parametrize(
    "scheduler,options,expected",
    [
        (DDPMScheduler(), {}, ("epsilon", "none", None, None)),
        (DDPMScheduler(prediction_type="v_prediction"), {"snr_gamma": 5.0}, ("v_prediction", "min_snr", 5.0, None)),
        (DDPMScheduler(), {"prediction_type": "v_prediction"}, ("v_prediction", "none", None, None)),
        (
            FlowMatchEulerDiscreteScheduler(shift=3.0),
            {"weighting_scheme": "logit_normal", "precondition_outputs": 1, "logit_mean": 0.1, "logit_std": 1.2},
            ("sample", "none", None, ("logit_normal", {"mean": -0.1, "std": 1.2})),
        ),
        (
            FlowMatchEulerDiscreteScheduler(),
            {"weighting_scheme": "mode", "mode_scale": 1.0},
            ("flow", "none", None, ("mode", {"scale": 1.0})),
        ),
        (
            FlowMatchEulerDiscreteScheduler(),
            {"weighting_scheme": "sigma_sqrt", "precondition_outputs": 0},
            ("flow", "sigma_sqrt", None, "uniform"),
        ),
        (
            FlowMatchEulerDiscreteScheduler(),
            {"weighting_scheme": "cosmap", "precondition_outputs": 1},
            ("sample", "cosmap", None, "uniform"),
        ),
        (FlowMatchEulerDiscreteScheduler(), {}, ("flow", "none", None, "uniform")),
        (EDMEulerScheduler(), {}, ("sample", "edm", None, None)),
        (EDMEulerScheduler(prediction_type="v_prediction"), {"prediction_type": "v_prediction"}, ("sample", "edm", None, None)),
        # train_unconditional.py's sample branch: snr_weights·(x̂0 − x0)², w = SNR on x0 (issue 20)
        (DDPMScheduler(), {"prediction_type": "sample"}, ("sample", "snr", None, None)),
        (FlowMatchEulerDiscreteScheduler(), {"prediction_type": "sample", "precondition_outputs": 1}, ("sample", "none", None, "uniform")),
    ],
)
def test_diffusers_options_map_to_the_loss_the_script_trains(scheduler, options, expected):
    got = sampler_settings(scheduler, **options)
    assert (got["prediction_type"], got["loss_weighting"], got["snr_gamma"], got["base"]) == expected


@pytest.mark.parametrize(
    "scheme,options",
    [
        ("logit_normal", {"logit_mean": 0.5, "logit_std": 1.0}),
        ("logit_normal", {"logit_mean": -0.3, "logit_std": 0.8}),
        ("mode", {"mode_scale": 1.29}),
        ("none", {}),
    ],
)
def test_the_base_density_is_what_diffusers_scripts_draw(scheme, options):
    """InfoNoise starts from the density the script drew before: diffusers' own draw (its
    compute_density_for_timestep_sampling indexing the scheduler's descending table) and the sampler's
    base agree in their quantiles of s."""
    import numpy as np
    from diffusers.training_utils import compute_density_for_timestep_sampling

    sched = FlowMatchEulerDiscreteScheduler(shift=1.0)
    torch.manual_seed(0)
    u = compute_density_for_timestep_sampling(
        weighting_scheme=scheme,
        batch_size=200_000,
        logit_mean=options.get("logit_mean"),
        logit_std=options.get("logit_std"),
        mode_scale=options.get("mode_scale"),
    )
    theirs = (sched.timesteps[(u * 1000).long()] / 1000).numpy()
    settings = sampler_settings(sched, weighting_scheme=scheme, **options)
    base = settings["base"]
    fixed = make_sampler(base, sched) if isinstance(base, str) else make_sampler(base[0], sched, **base[1])
    ours = fixed.sample(200_000, generator=torch.Generator().manual_seed(0)).scheduler_sigmas.numpy()
    qs = [0.05, 0.25, 0.5, 0.75, 0.95]
    np.testing.assert_allclose(np.quantile(ours, qs), np.quantile(theirs, qs), atol=0.006)


@pytest.mark.parametrize(
    "scheduler,options,pattern",
    [
        (FlowMatchEulerDiscreteScheduler(), {"snr_gamma": 5.0}, "snr_gamma"),
        (FlowMatchEulerDiscreteScheduler(), {"weighting_scheme": "karras"}, "weighting_scheme: accepted values"),
        (FlowMatchEulerDiscreteScheduler(), {"prediction_type": "epsilon"}, "prediction_type"),
        (DDPMScheduler(), {"weighting_scheme": "logit_normal"}, "weighting_scheme"),
        (DDPMScheduler(), {"precondition_outputs": 1}, "precondition_outputs"),
        (DDPMScheduler(), {"snr_gamma": -1.0}, "snr_gamma"),
        (EDMEulerScheduler(), {"snr_gamma": 5.0}, "snr_gamma"),
        # contradictory options are refused, not resolved silently (issue 20)
        (
            FlowMatchEulerDiscreteScheduler(),
            {"prediction_type": "sample", "precondition_outputs": 0},
            r"prediction_type: 'sample' contradicts precondition_outputs=0",
        ),
        (
            FlowMatchEulerDiscreteScheduler(),
            {"prediction_type": "flow", "precondition_outputs": 1},
            r"prediction_type: 'flow' contradicts precondition_outputs=1",
        ),
        (DDPMScheduler(), {"snr_gamma": True}, r"snr_gamma: must be a finite number > 0 .* got True"),
        (EDMEulerScheduler(), {"prediction_type": "velocity"}, r"prediction_type: 'velocity' is not an EDM option; accepted"),
        (DDPMScheduler(), {"prediction_type": "flow"}, r"prediction_type: 'flow' is not a VP option"),
        (DDPMScheduler(), {"prediction_type": "sample", "snr_gamma": 5.0}, r"snr_gamma: diffusers' sample \(x0\) loss"),
    ],
)
def test_options_of_another_path_are_refused(scheduler, options, pattern):
    with pytest.raises(ValueError, match=pattern):
        sampler_settings(scheduler, **options)


def test_infonoise_sampler_sizes_seeds_and_registers():
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    args = argparse.Namespace(snr_gamma=5.0, seed=11, max_train_steps=2000, prediction_type=None)
    sampler = infonoise_sampler(DDPMScheduler(), args, accelerator=accelerator, floor=0.1)
    assert sampler.warmup_steps == 200 and sampler.seed == 11 and sampler.settings.floor == 0.1
    assert sampler.objective.loss_weighting == "min_snr" and sampler in accelerator._custom_objects
    # Flux's scheduler refuses to guess the shift, and says which mu the training scripts use
    flux = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
    with pytest.raises(ValueError, match="mu=0.0"):
        infonoise_sampler(flux, argparse.Namespace(weighting_scheme="none"))
    assert infonoise_sampler(flux, mu=0.0).path.shift == 1.0


# -- the sampler's own stream ----------------------------------------------------------------------


def test_the_stream_is_independent_of_other_random_state_and_resumes():
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler())
    sampler.manual_seed(0)
    torch.manual_seed(0)
    epoch1 = [sampler.sample(8).timesteps for _ in range(3)]
    torch.manual_seed(0)  # a script re-seeding its RNG (or its generator) for sample images repeats nothing
    epoch2 = [sampler.sample(8).timesteps for _ in range(3)]
    assert all(not torch.equal(a, b) for a, b in zip(epoch1, epoch2))
    state = sampler.state_dict()
    nxt = sampler.sample(8).timesteps
    again = InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler())
    again.load_state_dict(state)
    assert torch.equal(again.sample(8).timesteps, nxt)
    assert torch.equal(sampler.manual_seed(0).sample(8).timesteps, epoch1[0])  # re-seeding restarts it
    with pytest.raises(ValueError, match="seed"):
        sampler.manual_seed(-1)


def test_ranks_draw_different_levels(monkeypatch):
    sampler = make_sampler("uniform", DDPMScheduler())
    draws = {}
    for rank in (0, 1):
        monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.distributed, "get_rank", lambda r=rank: r)
        sampler.manual_seed(5)
        draws[rank] = sampler.sample(64).timesteps
    assert not torch.equal(draws[0], draws[1])


# -- levels in the scheduler's coordinate ------------------------------------------------------------


def test_flow_levels_carry_the_scripts_sigmas():
    sched = FlowMatchEulerDiscreteScheduler(shift=3.0)
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(sched)
    levels = sampler.sample(256)
    s = levels.scheduler_sigmas.double()
    ve = levels.sigmas.double()
    torch.testing.assert_close(s, ve / (1 + ve), rtol=1e-6, atol=0)  # s = σ/(1 + σ), by hand
    torch.testing.assert_close(levels.timesteps.double(), s * 1000, rtol=1e-6, atol=1e-4)
    x0, eps = torch.randn(256, 3), torch.randn(256, 3)
    script = (1 - s.float()[:, None]) * x0 + s.float()[:, None] * eps  # SD3's noisy_model_input
    torch.testing.assert_close(sampler.add_noise(x0, eps, levels), script, rtol=1e-5, atol=1e-5)
    half = levels[:10]
    assert len(half) == 10 and torch.equal(half.scheduler_sigmas, levels.scheduler_sigmas[:10])
    # EDM: σ itself; VP: the VE σ = sqrt((1 − ᾱ)/ᾱ) of diffusers' table
    edm = InfoNoiseTrainingTimestepSampler.from_scheduler(EDMEulerScheduler()).sample(16)
    assert torch.equal(edm.scheduler_sigmas, edm.sigmas)
    ddpm_sched = DDPMScheduler()
    vp = InfoNoiseTrainingTimestepSampler.from_scheduler(ddpm_sched).sample(16)
    abar = ddpm_sched.alphas_cumprod.double()[vp.timesteps]
    torch.testing.assert_close(vp.scheduler_sigmas.double(), ((1 - abar) / abar) ** 0.5, rtol=1e-6, atol=0)


# -- no host synchronisation per step ------------------------------------------------------------------


@pytest.mark.parametrize(
    "scheduler,pred,weighting",
    [
        (DDPMScheduler(), "epsilon", "min_snr"),
        (EDMEulerScheduler(), "sample", "edm"),
        (FlowMatchEulerDiscreteScheduler(), "flow", "cosmap"),
    ],
)
def test_update_and_loss_weight_never_read_the_device(scheduler, pred, weighting):
    """On the meta device a tensor has no data: every read back to the host (``.cpu()``, ``.item()``,
    ``bool(t)``, a boolean mask) raises. The per-step path must run there."""
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(
        scheduler, prediction_type=pred, loss_weighting=weighting, snr_gamma=5.0 if weighting == "min_snr" else None
    )
    cpu_levels = sampler.sample(32)
    levels = cpu_levels.to("meta")
    loss = torch.empty(32, device="meta")
    with pytest.raises((NotImplementedError, RuntimeError)):
        loss.detach().cpu()  # the power of this test: the former per-step copy fails here
    for _ in range(3):
        sampler.update(levels, loss)
        weighted_loss(sampler, levels, loss)
        sampler.observe_data(torch.empty(32, 4, device="meta"))
    assert sampler.estimator.sums.device.type == "meta"


def test_statistics_kept_on_the_device_equal_the_host_ones():
    """The masked sums of the device-side accumulation: NaN losses are left out and counted, the others
    summed exactly."""
    sched = EDMEulerScheduler()
    a = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, warmup_steps=2, refresh_every=1, min_count=1)
    levels = a.sample(512)
    loss = levels.sigmas.double() ** 2 / (levels.sigmas.double() ** 2 + 0.25)
    loss[:3] = math.nan
    a.update(levels, loss)
    assert a._num_nonfinite == 3
    assert float(a.estimator.counts.sum()) == 509
    assert float(a.estimator.sums.sum()) == pytest.approx(float(loss[3:].sum()), rel=1e-12)
    torch.testing.assert_close(per_sample_mse(torch.ones(2, 3), torch.zeros(2, 3)), torch.ones(2))


def test_step_with_the_scripts_global_step_warns_on_a_lost_state():
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler())
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler.step(1)
        sampler.step(2)
    with pytest.warns(UserWarning, match="global_step 151"):
        sampler.step(151)


def test_one_objective_for_the_scripts_the_drop_in_and_the_stored_schedules():
    """diffusers' options mean one Objective (objective.py): the drop-in's dict is its keywords; this package's
    scripts train the plain x0 loss where diffusers' train_unconditional.py SNR-weights it; a stored schedule's
    record rebuilds it, a custom weighting is recorded as such and rebuilds nothing; given values override it,
    Min-SNR's gamma going with its weighting."""
    from diffusers_infonoise.objective import Objective, default_objective

    ddpm_sample = DDPMScheduler(prediction_type="sample")
    assert Objective.from_options(ddpm_sample) == Objective("sample", "none")  # the scripts: unweighted x0 loss
    assert Objective.from_options(ddpm_sample, snr_gamma=5.0) == Objective("sample", "min_snr", 5.0)
    assert Objective.from_options(ddpm_sample, snr_weighted_sample=True) == Objective("sample", "snr")
    got = sampler_settings(FlowMatchEulerDiscreteScheduler(), weighting_scheme="cosmap", precondition_outputs=1)
    assert {k: got[k] for k in ("prediction_type", "loss_weighting", "snr_gamma")} == Objective("sample", "cosmap").keywords()
    assert Objective.from_options(EDMEulerScheduler(prediction_type="v_prediction")) == Objective("sample", "edm")

    def custom(sigmas):
        return torch.ones_like(sigmas)

    assert Objective("epsilon", custom).record() == {"prediction_type": "epsilon", "loss_weighting": "custom", "snr_gamma": None}
    assert Objective.recorded({"prediction_type": "epsilon", "loss_weighting": "custom", "snr_gamma": None}) is None
    assert Objective.recorded(Objective("v_prediction", "min_snr", 5.0).record()) == Objective("v_prediction", "min_snr", 5.0)
    # the path's conventions without a stored schedule, the stored loss with one
    sched = DDPMScheduler(prediction_type="v_prediction")
    assert default_objective(sched) == Objective("v_prediction", "none")
    assert default_objective(EDMEulerScheduler()) == Objective("sample", "edm")
    s = make_sampler("infonoise", sched, loss_weighting="min_snr", snr_gamma=5.0, warmup_steps=1, refresh_every=1, num_bins=8)
    assert s.objective == Objective("v_prediction", "min_snr", 5.0)
    with pytest.warns(UserWarning, match="has not adapted"):
        s.save_to_scheduler(sched)  # the base density, stored with the loss it was told
    assert default_objective(sched) == Objective("v_prediction", "min_snr", 5.0)
    # overrides: a new weighting takes the given gamma only; the kept one keeps its own unless one is given
    base = Objective("epsilon", "min_snr", 5.0)
    assert base.override(prediction_type="v_prediction") == Objective("v_prediction", "min_snr", 5.0)
    assert base.override(snr_gamma=1.0) == Objective("epsilon", "min_snr", 1.0)
    assert base.override(loss_weighting="none") == Objective("epsilon", "none")
    with pytest.raises(ValueError, match="snr_gamma: loss_weighting='min_snr' needs"):
        Objective("epsilon", "min_snr")
    # w on the x0 error is the hand-derived one (METHOD.md §4): min(SNR, gamma) for Min-SNR on v, SNR for plain eps
    sig = torch.tensor([0.1, 1.0, 10.0], dtype=torch.float64)
    torch.testing.assert_close(Objective("v_prediction", "min_snr", 5.0).x0_loss_weight(sig), torch.clamp(sig**-2, max=5.0))
    torch.testing.assert_close(Objective("epsilon").x0_loss_weight(sig), sig**-2)
