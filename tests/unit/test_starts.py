"""Starting adapted (issue 22, METHOD.md §5.9): the three starts and the choice between them, checked against
the analytic MMSE of Gaussian data, hand interpolation, and the stored schedule's own fields."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
import torch
from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

from benchmarks.tiny_pipelines import tiny_unet2d
from diffusers_infonoise import InfoNoiseTrainingTimestepSampler, ScheduleError, make_sampler, read_schedule
from diffusers_infonoise.sampler import apply_start, choose_start, start_from_model, stratified_levels
from diffusers_infonoise.schedule_io import CONFIG_KEY, ScheduleSourceError, read_schedule_from

from helpers.reference import gauss_mmse, total_variation

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
    pi = torch.exp(sampler._log_prob(torch.from_numpy(sig))).numpy()
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
    e = s.estimator.edges.numpy()
    lo, hi = gauss_mmse(np.exp(e[:-1]), S)[measured.numpy()], gauss_mmse(np.exp(e[1:]), S)[measured.numpy()]
    m = s.estimator.m_hat[measured].numpy()
    assert np.all(m >= lo * (1 - 1e-9)) and np.all(m <= hi * (1 + 1e-9))
    assert _tv_to_analytic(s, w) <= s.settings.floor + 0.02
    # the online loop continues from it with its own rule (the discounted mean, docs/METHOD.md §5.10)
    assert s.estimator.ema_decay is None and s.estimator.min_count == 8


def test_a_profile_start_takes_samples_per_bin_as_a_python_or_numpy_int_only():
    """np.int64(2) measures what 2 does (2 levels a bin: the count of stratified levels by hand); a bool, a float or
    zero is refused naming the argument, before any forward pass."""
    counts = {}
    for n in (2, np.int64(2)):
        s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=32, gate=None, mmse_cap=None)
        info = start_from_model(s, _bayes_loss(s), _batches(), samples_per_bin=n, progress=False)
        counts[type(n).__name__] = (info["samples_per_bin"], info["samples"], type(info["samples_per_bin"]))
    assert counts["int"] == counts["int64"] == (2, 32 * 2, int)
    for bad in (True, 2.0, 0, np.int64(0), "2"):
        s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=32)
        with pytest.raises(ValueError, match="samples_per_bin: must be 'auto' or an int >= 1"):
            start_from_model(s, _bayes_loss(s), _batches(), samples_per_bin=bad, progress=False)


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


def test_choose_start_auto_and_its_errors(caplog):
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
    with caplog.at_level(logging.INFO):
        info = apply_start(s, choose_start("stored", s, stored=stored))
    assert torch.equal(s.probs, trained.probs) and s.warmup_steps == 0
    # its log line names what the start is, not "source None" (diffusers' scripts pass stored= alone)
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("noise sampler start"))
    assert info["source"] == "the stored= schedule given to choose_start (source= names where it was read from)"
    assert "None" not in line and f"source {info['source']}, adapted True" in line, line


def test_a_start_for_a_fixed_density_names_only_the_flags_given():
    """``--infonoise_schedule_from`` with a fixed density named ``--infonoise_init auto`` too, a flag the user had not
    given (its default); the error names the flags given, and each with its value."""
    from argparse import Namespace

    from diffusers_infonoise.training.args import sampler_start

    scheduler = EDMEulerScheduler()
    sampler = make_sampler("logit_normal", scheduler)
    cases = [
        (dict(infonoise_init="auto", infonoise_schedule_from="org/model"), "--infonoise_schedule_from org/model: starts"),
        (dict(infonoise_init="profile", infonoise_schedule_from=None), "--infonoise_init profile: starts"),
        (dict(infonoise_init="stored", infonoise_schedule_from="x"), "--infonoise_init stored / --infonoise_schedule_from x: starts"),
    ]
    for flags, want in cases:
        with pytest.raises(ValueError) as info:
            sampler_start(Namespace(**flags), sampler, scheduler, pretrained_model=True)
        assert str(info.value).startswith(want) and "'logit_normal'" in str(info.value), str(info.value)
    # the default start of a fixed density is its base, with nothing to refuse
    assert (
        sampler_start(Namespace(infonoise_init="auto", infonoise_schedule_from=None), sampler, scheduler, pretrained_model=True).choice
        == "base"
    )


def test_a_stored_schedule_crosses_paths_through_ve_sigma():
    """An EDM schedule in a DDPM run: ln m̂ interpolated at the VP grid's centres in VE σ, unfilled beyond the EDM
    grid's filled ends (METHOD.md §5.9-5.10, by hand); π is rebuilt for ε with the cap of the new data."""
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
    c_old, c_new = 0.5 * (e[1:] + e[:-1])[ok], vp.estimator.centers.numpy()
    want = np.exp(np.interp(c_new, c_old, np.log(m[ok])))
    want[(c_new < c_old[0]) | (c_new > c_old[-1])] = np.nan
    assert np.isnan(want).any() and (~np.isnan(want)).sum() >= 2  # the VP grid reaches beyond the EDM grid's centres
    np.testing.assert_allclose(vp.estimator.m_hat.numpy(), want, rtol=1e-12)
    assert vp.is_adapted and vp.warmup_steps == 0 and vp._allocation_total_variation() <= vp.settings.floor + 0.02
    # a payload whose run capped m̂ (an ε-model's, METHOD.md §5.4), received by a sampler without a cap (an EDM
    # x0 loss), brings the capped m̂ its π was built from
    cap = float(np.nanmedian(m))
    capped = dict(payload, hyperparameters=dict(payload["hyperparameters"], mmse_cap=cap))
    vp2 = make_sampler("infonoise", EDMEulerScheduler(), num_bins=32, gate=None)
    assert vp2.settings.mmse_cap is None
    vp2.load_schedule(capped)
    c2 = vp2.estimator.centers.numpy()
    want = np.exp(np.interp(c2, c_old, np.log(np.minimum(m[ok], cap))))
    want[(c2 < c_old[0]) | (c2 > c_old[-1])] = np.nan
    np.testing.assert_allclose(vp2.estimator.m_hat.numpy(), want, rtol=1e-12)
    assert float(np.nanmax(vp2.estimator.m_hat.numpy())) <= cap * (1 + 1e-12)
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


def _short_run_warnings(start: str, **kw) -> tuple[bool, bool]:
    """``(at construction, while stepping)``: whether a 20-step run built with its length (as README's fine-tuning
    example does) warns that pi never leaves the base density, before and after its ``start``."""
    import warnings

    def short(caught):
        return any("pi never leaves the base density" in str(w.message) for w in caught)

    with warnings.catch_warnings(record=True) as built:
        warnings.simplefilter("always")
        s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, num_training_steps=20, **kw)
    with warnings.catch_warnings(record=True) as ran:
        warnings.simplefilter("always")
        if start == "profile":
            start_from_model(s, _bayes_loss(s), _batches(), progress=False)
        elif start == "stored":
            sched = EDMEulerScheduler()
            trained = make_sampler("infonoise", sched, num_bins=16)
            start_from_model(trained, _bayes_loss(trained), _batches(), progress=False)
            trained.save_to_scheduler(sched)
            apply_start(s, choose_start("stored", s, stored=read_schedule(sched)))
        for _ in range(20):
            s.step()
    return short(built), short(ran)


def test_a_short_run_is_warned_about_only_once_its_start_is_known():
    """issue 28 (7): a 20-step run with the automatic warm-up (one refresh, 50 steps) never adapts from the base
    start, and says so at its first step; a profile or stored start skips that warm-up, and nothing warns before the
    start is applied. An explicit warm-up, which every start honours, is warned about at once."""
    assert _short_run_warnings("base") == (False, True)
    assert _short_run_warnings("profile") == (False, False)
    assert _short_run_warnings("stored") == (False, False)
    assert _short_run_warnings("profile", warmup_steps=30) == (True, False)  # warned once, when built


A = 0.5  # two-point data x0 in {-A, +A} per dimension: the value gap is 2A = 1, so the data gate's pivot is 0.1


def _two_point(batch=32, dim=16, seed=0):
    return A * torch.sign(torch.randn(batch, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))


def _hand_noised_flow_loss(batch, levels):
    """diffusers' flow scripts' loss, noised by hand, ``(1 - s) * x0 + s * noise`` (no sampler.add_noise), of the
    Bayes-optimal model of the two-point data: E[x0 | x] = A·tanh(A·(1 - s)·x / s²) (METHOD.md §2, with the VE
    σ = s/(1 - s) of x/(1 - s)), as a velocity ``(x - x̂0)/s`` against the target ``noise - x0``."""
    x0 = batch if torch.is_tensor(batch) else batch["pixel_values"]
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(int(1e6 * float(levels.sigmas[0]))), dtype=x0.dtype)
    s = levels.scheduler_sigmas.double().view(-1, 1)
    x = (1 - s) * x0 + s * noise
    x0_hat = A * torch.tanh(A * (1 - s) * x / s**2)
    return (((x - x0_hat) / s - (noise - x0)) ** 2).mean(1)


def _run_two_point(start_batches=None, steps=120):
    """The run of issue 28 (1): an optional profile start on ``start_batches``, then ``steps`` steps that show each
    batch with observe_data and noise by hand. Returns the sampler, the start's info and the gate at step 0."""
    s = make_sampler("infonoise", FlowMatchEulerDiscreteScheduler(), num_bins=16, num_training_steps=steps)
    info, gate0 = None, None
    if start_batches is not None:
        info = start_from_model(s, _hand_noised_flow_loss, start_batches, progress=False)
        gate0 = s.estimator.last_gate
    for k in range(steps):
        x0 = _two_point(seed=1000 + k)
        s.observe_data(x0)
        levels = s.sample(len(x0))
        s.update(levels, _hand_noised_flow_loss(x0, levels))
        s.step()
    return s, info, gate0


def test_the_gate_sees_the_data_after_a_profile_start_with_a_hand_noised_loss(caplog):
    """issue 28 (1): data on {-0.5, +0.5} (gap 1: pivot 0.1). Without a start the gate reads 0.1. After a profile start
    whose loss noises by hand, the start observes the (tensor) batches itself, so the gate reads 0.1 from step 0; on dict
    batches of pixel values (which a latent model would encode first) it sees no data, says so, and the data the loop
    shows later still reaches the gate: 0.1 again, not the 0.2 fallback for the whole run."""
    import logging

    control, _, _ = _run_two_point()
    assert control.estimator.last_gate.source == "data" and control.estimator.last_gate.pivot == pytest.approx(0.1)
    tensors = [_two_point(seed=k) for k in range(8)]
    dicts = [{"pixel_values": t, "input_ids": torch.zeros(len(t), 4, dtype=torch.int64)} for t in tensors]
    with caplog.at_level(logging.WARNING):
        blind, blind_info, blind_gate0 = _run_two_point(dicts)
    s, info, gate0 = _run_two_point(tensors)
    # the data the loop shows after the start reaches the gate, whatever the start saw
    assert blind.estimator.last_gate.source == "data" and blind.estimator.last_gate.pivot == pytest.approx(0.1)
    assert blind.data.frozen  # frozen at the first refresh with data, on the run's data
    assert blind_gate0.source == "fallback" and blind_gate0.pivot == pytest.approx(0.2)
    assert blind_info["data"] == "none" and "profile start: saw no training data" in caplog.text
    # tensor batches: the start observed them, so the gate is the data's from step 0
    assert gate0.source == "data" and gate0.pivot == pytest.approx(0.1)
    assert s.estimator.last_gate.source == "data" and s.estimator.last_gate.pivot == pytest.approx(0.1)
    assert info["data"] == "batches" and s.start_record["data"] == "batches"


def test_a_profile_start_reports_non_finite_losses_and_refuses_a_model_with_none_finite():
    """issue 28 (2): a model that returns NaN above the edge of bin 12 of 16 (8 levels a bin, 128 in all): the 4 bins
    above it give 32 NaN losses, warned about with the VE sigma range they lie in; they are left out and those bins
    unfilled. A model whose every loss is NaN stops the start with one clear error, and the sampler stays on its base."""
    s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, gate=None)
    edge = math.exp(float(s.estimator.edges[12]))
    good = _bayes_loss(s)

    def broken(x0, levels):
        loss = good(x0, levels)
        return torch.where(levels.sigmas.double() > edge, torch.full_like(loss, math.nan), loss)

    with pytest.warns(UserWarning, match=r"32 of 128 losses were not finite \(NaN/inf\) at VE sigma ") as caught:
        info = start_from_model(s, broken, _batches(), progress=False)
    lo, hi = info["nonfinite_sigma"]
    assert info["nonfinite_losses"] == 32 and edge < lo < hi <= math.exp(float(s.estimator.edges[-1])) * (1 + 1e-6)
    assert f"{lo:.4g} to {hi:.4g}" in str(caught[0].message)
    assert info["filled_bins"] == 12 and bool(torch.isnan(s.estimator.m_hat[12:]).all()) and s.start_record["nonfinite_losses"] == 32
    dead = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16)
    with pytest.raises(ValueError, match=r"none of the losses of the profile start was finite .* \(here 128 of 128 NaN/inf"):
        start_from_model(dead, lambda x0, lv: torch.full((len(lv),), math.nan, dtype=torch.float64), _batches(), progress=False)
    assert not dead.is_adapted and dead.start_record is None


def test_pi_resting_mostly_on_bins_never_measured_is_warned_about_with_the_numbers():
    """issue 28 (3): 4 measured bins of 64 (the rest interpolated and extrapolated): the share of pi on them (summed over
    the 4 bins by hand) is below a half, and the warning says so with the mode of pi; a pi measured in every bin is
    silent."""
    import warnings

    s = make_sampler("infonoise", EDMEulerScheduler(), warmup_steps=1, refresh_every=1, min_count=1, gate=None)
    bins = [40, 41, 42, 43]
    sig = torch.exp(s.estimator.centers[bins]).repeat(4)
    levels = s._levels_at(sig)
    s.update(levels, torch.from_numpy(gauss_mmse(sig.numpy(), S)))
    with pytest.warns(UserWarning, match="pi rests mostly on bins never measured: 4 of 64 bins hold a measured m_hat") as caught:
        s.step()
    mass = float(s.probs[bins].sum())
    mode = int(torch.argmax(s.probs))
    message = str(caught[0].message)
    assert mass < 0.5 and f"carry {mass:.0%} of pi's mass" in message
    assert f"mode is at VE sigma {math.exp(float(s.estimator.centers[mode])):.3g}" in message
    assert s.last_refresh["measured_mass"] == pytest.approx(mass, abs=1e-12)
    assert s.metrics()["infonoise/measured_mass"] == pytest.approx(mass, abs=1e-12)
    full = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, gate=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        start_from_model(full, _bayes_loss(full), _batches(), progress=False)  # every bin measured
    assert full.last_refresh["measured_mass"] == pytest.approx(1.0)


def test_a_one_shot_iterator_of_batches_is_cycled_like_a_list():
    """issue 28 (4): a generator that yields 2 batches serves the 4 passes of a 16-bin start by cycling them, exactly as a
    list of the same 2 batches (re-iterated) does; an empty generator is one clear error."""
    two = _batches(n=2)
    a = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, gate=None)
    b = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, gate=None)
    info = start_from_model(a, _bayes_loss(a), (x for x in two), progress=False)
    start_from_model(b, _bayes_loss(b), two, progress=False)
    assert info["forward_passes"] == 4 and a.estimator.num_filled == 16 and torch.equal(a.probs, b.probs)
    with pytest.raises(ValueError, match="batches: the iterator yielded no batch"):
        start_from_model(make_sampler("infonoise", EDMEulerScheduler(), num_bins=16), _bayes_loss(b), iter([]), progress=False)


def test_the_start_is_recorded_once_and_kept_through_a_resume(tmp_path, capsys):
    """issue 28 (8): the profile start is recorded at step 0 (choice, source, levels, passes); a later start is not; a
    resumed sampler built by a resume command (warm-up "auto", no start applied) takes the run's record and its warm-up
    setting (0) from the checkpoint, and the stored schedule and ``infonoise show`` say how the run began."""
    from diffusers_infonoise.cli import main
    from diffusers_infonoise.schedule_io import load_sampler_state, save_sampler_state

    sched = EDMEulerScheduler()
    s = make_sampler("infonoise", sched, num_bins=16, refresh_every=2)
    start_from_model(s, _bayes_loss(s), _batches(), progress=False)
    want = {
        "choice": "profile",
        "source": "the pretrained model",
        "levels": 128,
        "samples_per_bin": 8,
        "forward_passes": 4,
        "filled_bins": 16,
        "data": "loss_fn",
        "nonfinite_losses": 0,
        "optimizer_step": 0,
    }
    assert s.start_record == want and s.settings.warmup_steps == 0
    for _ in range(3):
        s.step()
    apply_start(s, choose_start("base", s))  # after step 1: not the run's start
    assert s.start_record == want
    save_sampler_state(s, tmp_path / "ckpt")
    s.save_to_scheduler(sched)
    # a resume command's sampler (its start is not applied on a resume: the checkpoint's state is loaded instead)
    resumed = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, use_stored_schedule=False, num_bins=16, refresh_every=2)
    assert resumed.start_record is None and resumed.settings.warmup_steps == "auto"
    assert load_sampler_state(resumed, tmp_path / "ckpt")
    assert resumed.start_record == want and resumed.settings.warmup_steps == 0
    out = EDMEulerScheduler()
    resumed.save_to_scheduler(out)
    payload = read_schedule(out)
    assert payload["start"] == want and payload["hyperparameters"]["warmup_steps"] == 0
    out.save_pretrained(tmp_path / "sched")
    assert main(["show", str(tmp_path / "sched")]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("start")]
    want_line = "profile: the pretrained model's errors on 128 levels (8 a bin, 4 forward passes per process), before step 1"
    assert line == ["  start            " + want_line]
    # a run without a start records the base at its first step
    base = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16)
    base.step()
    assert base.start_record == {"choice": "base", "optimizer_step": 0}


def test_a_schedule_and_a_state_written_before_the_start_was_recorded_still_load(tmp_path):
    """issue 28 (8): a payload without ``start`` loads bit for bit (the same pi), and shows as not recorded; a state without
    ``start`` or ``warmup_setting`` loads with no record and the sampler's own warm-up setting."""
    from diffusers_infonoise.sampler import describe_start

    sched = EDMEulerScheduler()
    s = make_sampler("infonoise", sched, num_bins=16)
    start_from_model(s, _bayes_loss(s), _batches(), progress=False)
    s.save_to_scheduler(sched)
    old = dict(sched.config[CONFIG_KEY])
    del old["start"]
    sched.register_to_config(**{CONFIG_KEY: old})
    again = InfoNoiseTrainingTimestepSampler.from_scheduler(sched)
    assert torch.equal(again.probs, s.probs) and describe_start(read_schedule(sched).get("start")).startswith("not recorded")
    state = s.state_dict()
    del state["start"], state["warmup_setting"]
    fresh = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, warmup_steps=7)
    fresh.load_state_dict(state)
    assert fresh.start_record is None and fresh.settings.warmup_steps == 7 and torch.equal(fresh.probs, s.probs)
    with pytest.raises(ScheduleError, match="start must be null or an object"):
        sched.register_to_config(**{CONFIG_KEY: {**old, "start": "profile"}})
        read_schedule(sched)


def test_a_stored_schedule_with_other_settings_names_what_differs(caplog):
    """issue 28 (10): the log names each setting that differs, stored -> this sampler's."""
    import logging

    sched = EDMEulerScheduler()
    s = make_sampler("infonoise", sched, num_bins=16)
    start_from_model(s, _bayes_loss(s), _batches(), progress=False)
    s.save_to_scheduler(sched)
    other = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, floor=0.1, smoothing=0.5)
    with caplog.at_level(logging.INFO):
        other.load_schedule(read_schedule(sched))
    assert "stored schedule: settings differ (stored -> this sampler's): floor: 0.05 -> 0.1; smoothing: 1.0 -> 0.5;" in caplog.text


def test_the_warm_up_and_the_profile_budget_are_settled_in_one_call():
    """Issue 29: the warm-up was decided by calls that had to come in order (the run's length, then the start
    zeroing the warm-up, then the profile budget reading the length back). ``plan_run(600, start)`` settles both:
    a tenth of the run (60 steps) for a base start and for a stored schedule saved before it adapted, none for a
    start that brings an estimate (a profile, an adapted stored schedule), an explicit warm-up (7) for every start,
    and a profile budget of PROFILE_SHARE x 600 = 30 forward passes. A start applied before the run's length is
    known ends in the same plan."""
    sched, early = EDMEulerScheduler(), EDMEulerScheduler()
    trained = make_sampler("infonoise", sched, num_bins=16)
    start_from_model(trained, _bayes_loss(trained), _batches(), progress=False)
    trained.save_to_scheduler(sched)
    with pytest.warns(UserWarning, match="has not adapted"):
        make_sampler("infonoise", early, num_bins=16, warmup_steps=100).save_to_scheduler(early)
    for init, stored, want in (("base", None, 60), ("profile", None, 0), ("stored", sched, 0), ("stored", early, 60)):
        for warmup, expected in (("auto", want), (7, 7)):
            s = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16, warmup_steps=warmup)
            start = choose_start(init, s, stored=read_schedule(stored) if stored else None, pretrained_model=True)
            plan = s.plan_run(600, start)
            assert (plan.num_training_steps, plan.warmup_steps, plan.profile_forward_passes) == (600, expected, 30.0), (
                init,
                warmup,
            )
            if init != "profile":
                apply_start(s, start)
            assert s.warmup_steps == expected and s.settings.warmup_steps == (0 if want == 0 and warmup == "auto" else warmup)
    late = make_sampler("infonoise", EDMEulerScheduler(), num_bins=16)
    start_from_model(late, _bayes_loss(late), _batches(), progress=False)
    assert late.plan_run(600).warmup_steps == 0 and late._run_plan.profile_forward_passes == 30.0
