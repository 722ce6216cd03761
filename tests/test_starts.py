"""Starting adapted (issue 22, METHOD.md §5.9): the three starts and the choice between them, checked against
the analytic MMSE of Gaussian data, hand interpolation, and the stored schedule's own fields."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

from diffusers_infonoise import InfoNoiseTrainingTimestepSampler, ScheduleError, make_sampler, read_schedule
from diffusers_infonoise.schedule_io import CONFIG_KEY, ScheduleSourceError, read_schedule_from
from diffusers_infonoise.starts import apply_start, choose_start, start_from_model, stratified_levels

from _reference import gauss_mmse, total_variation
from _tiny_pipelines import tiny_unet2d

S = 0.5  # data scale: x0 ~ N(0, S²) per dimension


def _bayes_loss(sampler):
    """``loss_fn(batch, levels)`` of a Bayes-optimal model of N(0, S²) data in the sampler's parameterization:
    its per-sample error is the exact MMSE converted by the §3 factor (x0: mmse; ε: mmse/σ²), and the batch is
    noised through the sampler so that the cap and the gate see it."""

    def loss_fn(x0, levels):
        sampler.add_noise(x0, torch.randn_like(x0), levels)
        m = torch.as_tensor(gauss_mmse(levels.sigmas.double().numpy(), S))
        return (m / levels.sigmas.double() ** 2) if sampler.prediction_type == "epsilon" else m

    return loss_fn


def _batches(n=50, batch=32, dim=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, dim, generator=gen, dtype=torch.float64) * S for _ in range(n)]


def _tv_to_analytic(sampler, w):
    sig = torch.exp(sampler.estimator.centers).numpy()
    pi = torch.exp(sampler.log_prob(torch.from_numpy(sig))).numpy()
    return total_variation(pi * w(sig), gauss_mmse(sig, S) / sig**2)


def test_stratified_levels_fill_every_bin_equally():
    s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16)
    lv = stratified_levels(s, 5, generator=torch.Generator().manual_seed(0))
    assert len(lv) == 80
    counts = torch.bincount(s.estimator.bin_index(torch.log(lv.sigmas.double())), minlength=16)
    assert counts.tolist() == [5] * 16
    # the timesteps are EDM's c_noise of the sigmas
    torch.testing.assert_close(lv.timesteps.double(), 0.25 * torch.log(lv.sigmas.double()), rtol=1e-6, atol=1e-6)
    # VP: integer steps of the table, every bin that holds a finite step gets 5 of them
    v = make_sampler("infonoise", DDPMScheduler(), num_bins=64)
    lv = stratified_levels(v, 5, generator=torch.Generator().manual_seed(0))
    table = v.path.sigmas_table
    assert lv.timesteps.dtype == torch.int64 and torch.equal(lv.sigmas.double(), table[lv.timesteps].float().double())
    holds = torch.bincount(v.estimator.bin_index(torch.log(table)), minlength=64) > 0
    counts = torch.bincount(v.estimator.bin_index(torch.log(table[lv.timesteps])), minlength=64)
    assert torch.equal(counts[holds], torch.full((int(holds.sum()),), 5)) and int(counts[~holds].sum()) == 0


@pytest.mark.parametrize(
    "scheduler,prediction_type,w",
    [
        (EDMEulerScheduler(), "sample", lambda s: (s**2 + 0.25) / (s * 0.5) ** 2),  # EDM weighting on D
        (DDPMScheduler(), "epsilon", lambda s: 1 / s**2),  # unweighted ε
        (FlowMatchEulerDiscreteScheduler(), "sample", lambda s: np.ones_like(s)),  # unweighted x0 (SD3 preconditioned)
    ],
)
def test_profile_start_of_a_bayes_optimal_model_is_the_analytic_profile(scheduler, prediction_type, w):
    """Before step 1, min_count samples a bin of the model's errors: m̂ is the analytic MMSE in every measured bin,
    π·w follows ρ ∝ mmse/σ² within the floor, no warm-up, and ceil(K·n/B) forward passes."""
    s = make_sampler("infonoise", scheduler, prediction_type=prediction_type, num_bins=32, gate=None, mmse_cap=None)
    info = start_from_model(s, _bayes_loss(s), _batches(), progress=False)
    assert s.is_adapted and s.optimizer_step == 0 and s.warmup_steps == 0 and s.num_updates == 1
    measured = ~torch.isnan(s.estimator.m_hat)
    assert int(measured.sum()) >= 30 and info["filled_bins"] == int(measured.sum())
    assert info["forward_passes"] == math.ceil(len(stratified_levels(s, s.estimator.min_count)) / 32)
    # each bin's m̂ is the mean of the exact MMSE at its levels, all inside the bin: it lies between the MMSE at the
    # bin's two edges (the MMSE increases with σ)
    e = s.edges.numpy()
    lo, hi = gauss_mmse(np.exp(e[:-1]), S)[measured.numpy()], gauss_mmse(np.exp(e[1:]), S)[measured.numpy()]
    m = s.estimator.m_hat[measured].numpy()
    assert np.all(m >= lo * (1 - 1e-9)) and np.all(m <= hi * (1 + 1e-9))
    assert _tv_to_analytic(s, w) <= s.floor + 0.02
    # the online loop continues from it with its usual EMA: one more refresh of exact losses keeps it there
    assert s.estimator.ema_decay == 0.9


def test_profile_start_uses_the_cap_and_gate_of_this_data():
    """ε losses: the cap V is this data's variance (S² = 0.25), the value-grid gate this data's (two-point ±1:
    a tenth of the gap 2)."""
    s = make_sampler("infonoise", DDPMScheduler(), num_bins=32)
    gen = torch.Generator().manual_seed(1)
    batches = [torch.sign(torch.randn(32, 16, generator=gen, dtype=torch.float64)) for _ in range(40)]

    def loss_fn(x0, levels):
        s.add_noise(x0, torch.randn_like(x0), levels)
        return torch.ones(len(levels), dtype=torch.float64)  # a poor ε-model: its x0 error grows like σ²

    start_from_model(s, loss_fn, batches, progress=False)
    assert s.estimator.mmse_cap == pytest.approx(1.0, abs=0.02) and s.estimator.last_gate.pivot == pytest.approx(0.2)


def test_an_explicit_warmup_is_honoured_after_a_start():
    s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, warmup_steps=6, refresh_every=3, gate=None)
    start_from_model(s, _bayes_loss(s), _batches(), progress=False)
    assert not s.is_adapted and s.warmup_steps == 6 and s.estimator.num_filled == 16  # m̂ measured, π on the base
    for _ in range(6):
        s.step()
    assert s.is_adapted and s.describe()["warmup_steps_resolved"] == 6


def test_choose_start_auto_and_its_errors():
    sched = EDMEulerScheduler()
    trained = make_sampler("infonoise", sched, num_bins=16)
    start_from_model(trained, _bayes_loss(trained), _batches(), progress=False)
    trained.save_to_scheduler(sched)
    stored = read_schedule(sched)
    s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16)
    assert choose_start("auto", s, stored=stored, pretrained_model=True).choice == "stored"
    assert choose_start("auto", s, stored=None, pretrained_model=True).choice == "profile"
    assert choose_start("auto", s, stored=None, pretrained_model=False).choice == "base"
    other = make_sampler("infonoise", EDMEulerScheduler(sigma_max=40.0), num_bins=16)  # another path's schedule
    start = choose_start("auto", other, stored=stored, pretrained_model=True)
    assert start.choice == "profile" and "'stored' would convert it" in start.reason
    assert choose_start("auto", make_sampler("uniform", sched), stored=stored).choice == "base"
    # a schedule saved before its warm-up ended holds no estimate: auto measures the model instead
    fresh = EDMEulerScheduler()
    with pytest.warns(UserWarning, match="has not adapted"):
        make_sampler("infonoise", fresh, num_bins=16).save_to_scheduler(fresh)
    unadapted = read_schedule(fresh)
    assert unadapted["adapted"] is False
    start = choose_start("auto", s, stored=unadapted, pretrained_model=True)
    assert start.choice == "profile" and "saved before it adapted" in start.reason
    assert choose_start("auto", s, stored=unadapted, pretrained_model=False).choice == "base"
    for init, kw, pattern in (
        ("stored", {}, "'stored' needs a stored schedule"),
        ("profile", {"stored": stored}, "'profile' measures a pretrained model"),
        ("sometimes", {}, "accepted values are auto, base, stored, profile"),
    ):
        with pytest.raises(ValueError, match=pattern):
            choose_start(init, s, **kw)
    with pytest.raises(ValueError, match="fixed density"):
        choose_start("stored", make_sampler("uniform", sched), stored=stored)
    # apply_start of a stored start is load_schedule: the stored π, no warm-up
    apply_start(s, choose_start("stored", s, stored=stored))
    assert torch.equal(s.probs, trained.probs) and s.warmup_steps == 0


def test_a_stored_schedule_crosses_paths_through_ve_sigma():
    """An EDM schedule in a DDPM run: ln m̂ interpolated at the VP grid's centres in VE σ, flat beyond the EDM grid's
    ends (METHOD.md §5.9, by hand); π is rebuilt for ε with the cap of the new data."""
    edm = EDMEulerScheduler()
    trained = make_sampler("infonoise", edm, num_bins=16, gate=None)
    start_from_model(trained, _bayes_loss(trained), _batches(), progress=False)
    trained.save_to_scheduler(edm)
    payload = read_schedule(edm)
    vp = make_sampler("infonoise", DDPMScheduler(), num_bins=32, gate=None)
    vp.load_schedule(payload)
    e = np.asarray(payload["edges"])
    m = np.array([np.nan if v is None else v for v in payload["m_hat"]])
    ok = ~np.isnan(m)
    want = np.exp(np.interp(vp.estimator.centers.numpy(), 0.5 * (e[1:] + e[:-1])[ok], np.log(m[ok])))
    np.testing.assert_allclose(vp.estimator.m_hat.numpy(), want, rtol=1e-12)
    assert vp.is_adapted and vp.warmup_steps == 0 and vp.allocation_total_variation() <= vp.floor + 0.02
    # a payload whose run capped m̂ (an ε-model's, METHOD.md §5.4), received by a sampler without a cap (an EDM
    # x0 loss), brings the capped m̂ its π was built from
    cap = float(np.nanmedian(m))
    capped = dict(payload, hyperparameters=dict(payload["hyperparameters"], mmse_cap=cap))
    vp2 = make_sampler("infonoise", EDMEulerScheduler(), num_bins=32, gate=None)
    assert vp2.hyperparameters["mmse_cap"] is None
    vp2.load_schedule(capped)
    want = np.exp(np.interp(vp2.estimator.centers.numpy(), 0.5 * (e[1:] + e[:-1])[ok], np.log(np.minimum(m[ok], cap))))
    np.testing.assert_allclose(vp2.estimator.m_hat.numpy(), want, rtol=1e-12)
    assert float(vp2.estimator.m_hat.max()) <= cap * (1 + 1e-12)
    far = dict(payload, edges=[v + 30.0 for v in payload["edges"]])  # an estimate far outside the grid
    with pytest.raises(ValueError, match="outside this grid"):
        make_sampler("infonoise", DDPMScheduler(), num_bins=32).load_schedule(far)


def test_read_schedule_from_folders_files_and_their_errors(tmp_path):
    from diffusers import DDPMPipeline

    sched = EDMEulerScheduler()
    trained = make_sampler("infonoise", sched, num_bins=16)
    start_from_model(trained, _bayes_loss(trained), _batches(), progress=False)
    trained.save_to_scheduler(sched)
    sched.save_pretrained(tmp_path / "sched")
    unet = tiny_unet2d(8)
    DDPMPipeline(unet=unet, scheduler=sched).save_pretrained(tmp_path / "pipe")
    payload = read_schedule(sched)
    for source in (tmp_path / "sched", tmp_path / "pipe", tmp_path / "sched" / "scheduler_config.json", sched):
        got, where = read_schedule_from(source)
        assert got["pi"] == payload["pi"] and where
    (tmp_path / "bare.json").write_text(json.dumps(payload))  # a bare payload file
    assert read_schedule_from(tmp_path / "bare.json")[0]["m_hat"] == payload["m_hat"]
    EDMEulerScheduler().save_pretrained(tmp_path / "none")
    with pytest.raises(ScheduleSourceError, match="holds no stored InfoNoise schedule"):
        read_schedule_from(tmp_path / "none")
    with pytest.raises(ScheduleSourceError, match="no such file or folder"):
        read_schedule_from(str(tmp_path / "missing"))
    cfg = json.loads((tmp_path / "sched" / "scheduler_config.json").read_text())
    cfg[CONFIG_KEY]["version"] = 99
    (tmp_path / "v99.json").write_text(json.dumps(cfg))
    with pytest.raises(ScheduleError, match="unknown version 99"):
        read_schedule_from(tmp_path / "v99.json")


def test_from_scheduler_reproduces_a_stored_start_bit_for_bit():
    """A schedule saved right after a profile start loads back into the same π (its settings unchanged)."""
    sched = EDMEulerScheduler()
    s = make_sampler("infonoise", sched, num_bins=16)
    start_from_model(s, _bayes_loss(s), _batches(), progress=False)
    s.save_to_scheduler(sched)
    again = InfoNoiseTrainingTimestepSampler.from_scheduler(sched)
    assert torch.equal(again.probs, s.probs) and again.warmup_steps == 0


def test_the_profile_start_stays_within_its_share_of_a_short_small_batch_run():
    """min_count (8) a bin by default, fewer when that would exceed 5% of the run's training compute (a step counted
    as one forward pass): an 800-step run at batch 2 affords int(0.05·800·2/16) = 5 a bin, 80 levels in 40 passes;
    at least 1 (by hand)."""
    s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, num_training_steps=800, gate=None)
    info = start_from_model(s, _bayes_loss(s), _batches(batch=2), progress=False)
    assert info["samples_per_bin"] == 5 and info["forward_passes"] == 40 and s.is_adapted
    assert s.estimator.num_filled == 16  # filled with 5 a bin, although min_count is 8
    tiny = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, num_training_steps=10, gate=None)
    info = start_from_model(tiny, _bayes_loss(tiny), _batches(batch=2), progress=False)
    assert info["samples_per_bin"] == 1 and tiny.estimator.num_filled == 16 and tiny.is_adapted
    long = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, num_training_steps=100_000, gate=None)
    assert start_from_model(long, _bayes_loss(long), _batches(), progress=False)["samples_per_bin"] == 8


def test_a_start_that_skips_the_warm_up_is_not_warned_about_a_short_run():
    """A run shorter than its automatic warm-up is warned about, unless a stored or profile start follows: it
    skips that warm-up (METHOD.md §5.9); an explicit warm-up is still warned about."""
    import warnings

    def warned(starts_adapted, **kw):
        s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, **kw)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            s.set_num_training_steps(20, starts_adapted=starts_adapted)
        return any("pi never leaves the base density" in str(w.message) for w in caught)

    assert warned(False) and not warned(True)  # auto warm-up: one refresh (50 steps) against 20
    assert warned(True, warmup_steps=30)
