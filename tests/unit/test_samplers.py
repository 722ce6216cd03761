"""Samplers (METHOD.md §5.8, issue 2): draws follow log_prob, DDPM cell masses, every baseline by
name on every scheduler, Kingma-Gao unbiasedness, bad input, state round trips."""

from __future__ import annotations

import copy
import json
import logging
import math
import re

import numpy as np
import pytest
import torch
from diffusers import DDIMScheduler, DDPMScheduler, EDMEulerScheduler, EulerDiscreteScheduler, FlowMatchEulerDiscreteScheduler
from scipy import stats

from diffusers_infonoise import (
    SAMPLER_NAMES,
    InfoNoiseTrainingTimestepSampler,
    KingmaGaoSampler,
    NoiseLevels,
    make_sampler,
)

from helpers.reference import ks_pvalue, quadrature_cdf, truncated_normal_masses, vp_cell_edges

F64 = torch.float64
SCHEDULERS = {
    "ve": lambda: EDMEulerScheduler(),
    "vp": lambda: DDPMScheduler(),
    "flow": lambda: FlowMatchEulerDiscreteScheduler(shift=3.0),
}
ADAPTIVE = ("infonoise", "kingma_gao")


def _own_loss(sampler, sigmas: torch.Tensor, s_d: float = 0.5) -> torch.Tensor:
    """Bayes-optimal expected loss of Gaussian data in the sampler's parameterization (by hand)."""
    sig = sigmas.double()
    m = sig**2 * s_d**2 / (sig**2 + s_d**2)
    c = {"sample": torch.ones_like(sig), "epsilon": sig**2, "v_prediction": sig**2 / (1 + sig**2), "flow": (sig / (1 + sig)) ** 2}[
        sampler.prediction_type
    ]
    return torch.where(torch.isfinite(c), m / c, torch.ones_like(sig))


def _adapt(sampler, steps=4, batch=4096, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        levels = sampler.sample(batch, generator=gen)
        sampler.update(levels, _own_loss(sampler, levels.sigmas))
        sampler.step()
    return sampler


def _make(name, kind, **kw):
    if name in ADAPTIVE:
        kw = {"warmup_steps": 2, "refresh_every": 1, **kw}
    return make_sampler(name, SCHEDULERS[kind](), **kw)


def _cell_masses_by_quadrature(sampler, sched, n=1_000_000) -> np.ndarray:
    """π-mass of each integer step's cell: ∫ exp(log_prob) over the cell edges (computed here).

    Midpoint rule with step h ≈ 1e-5 in log σ: at a jump of a piecewise-constant π the error is at
    most h·density, < 0.1 % of the mass of the narrowest cell (width ≈ 0.01)."""
    cells = vp_cell_edges(sched.alphas_cumprod.double().numpy())
    edges, cum = quadrature_cdf(lambda x: sampler._log_prob(torch.exp(x)), cells[0], cells[-1], n=n)
    return np.diff(np.interp(cells, edges, cum))


def _chi2_pvalue(timesteps: np.ndarray, probs: np.ndarray, groups: int = 40) -> float:
    """χ² of integer draws against cell probabilities, cells grouped into ~equal-mass groups."""
    cum = np.cumsum(probs)
    group_of = np.minimum((cum - probs / 2) * groups, groups - 1).astype(int)
    expected = np.bincount(group_of, weights=probs, minlength=groups) * timesteps.size
    observed = np.bincount(group_of[timesteps], minlength=groups)
    keep = expected > 0
    return float(stats.chisquare(observed[keep], expected[keep] * observed.sum() / expected[keep].sum()).pvalue)


# ----------------------------------------------------------------------------------------------
# every name on every scheduler: draws follow log_prob
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SCHEDULERS)
@pytest.mark.parametrize("name", SAMPLER_NAMES)
def test_make_sampler_draws_follow_log_prob(name, kind):
    sampler = _make(name, kind)
    if name in ADAPTIVE:
        _adapt(sampler)
        assert sampler.is_adapted
    n = 20_000
    levels = sampler.sample(n, generator=torch.Generator().manual_seed(123))
    assert levels.sigmas.shape == levels.timesteps.shape == levels.log_snr.shape == (n,)
    assert levels.sigmas.dtype == torch.float32 and bool((levels.sigmas > 0).all())
    if kind == "vp":
        sched = SCHEDULERS["vp"]()
        assert levels.timesteps.dtype == torch.int64
        t = levels.timesteps.numpy()
        assert t.min() >= 0 and t.max() <= 999
        probs = sampler.timestep_probabilities().numpy()
        assert probs.shape == (1000,) and probs.sum() == pytest.approx(1.0, abs=1e-12)
        # the probability of step t is the π-mass of its cell (integrated here from log_prob)
        # (SD3's mode density is smooth inside the range and slow to evaluate: a coarser rule will do)
        masses = _cell_masses_by_quadrature(sampler, sched, n=150_000 if name == "mode" else 1_000_000)
        np.testing.assert_allclose(probs, masses / masses.sum(), rtol=5e-3, atol=1e-7)
        if name == "uniform":
            np.testing.assert_allclose(probs, np.full(1000, 1e-3), rtol=1e-9)
        assert _chi2_pvalue(t, probs) > 1e-3
        # σ is the table's σ of the drawn step
        ac = sched.alphas_cumprod.double()[levels.timesteps]
        torch.testing.assert_close(levels.sigmas.double(), torch.sqrt((1 - ac) / ac), rtol=1e-6, atol=0)
    else:
        assert levels.timesteps.dtype == torch.float32
        edges, cum = quadrature_cdf(lambda x: sampler._log_prob(torch.exp(x)), -10.0, 10.0, n=200_000)
        assert cum[-1] == pytest.approx(1.0, abs=2e-3)  # log_prob is normalised per unit log σ
        assert ks_pvalue(np.log(levels.sigmas.double().numpy()), edges, cum) > 1e-3
    if name == "kingma_gao":
        assert levels.loss_weights is not None and levels.loss_weights.shape == (n,)
    else:
        assert levels.loss_weights is None


@pytest.mark.parametrize("kind", ["ve", "flow"])
def test_fixed_baselines_match_their_closed_form(kind):
    """Spot checks of log_prob against the named distributions written out here."""
    lo, hi = (math.log(0.002), math.log(80.0)) if kind == "ve" else (math.log(1 / 999), math.log(999))
    x = np.linspace(lo + 0.01, hi - 0.01, 50)
    sig = torch.from_numpy(np.exp(x))
    s_edm = _make("edm_lognormal", kind, P_mean=-0.4, P_std=1.4)
    z = stats.norm.cdf(hi, -0.4, 1.4) - stats.norm.cdf(lo, -0.4, 1.4)
    np.testing.assert_allclose(s_edm._log_prob(sig).numpy(), stats.norm.logpdf(x, -0.4, 1.4) - math.log(z), atol=1e-10)
    s_lu = _make("log_uniform", kind)
    np.testing.assert_allclose(s_lu._log_prob(sig).numpy(), -math.log(hi - lo), atol=1e-10)
    if kind == "flow":  # logit-normal on the shifted level: logit(s) = log σ − log(shift) is N(0, 1)
        s_ln = _make("logit_normal", kind)
        xs = x - math.log(3.0)
        z = stats.norm.cdf(hi - math.log(3.0)) - stats.norm.cdf(lo - math.log(3.0))
        np.testing.assert_allclose(s_ln._log_prob(sig).numpy(), stats.norm.logpdf(xs) - math.log(z), atol=1e-10)
    assert float(s_edm._log_prob(torch.tensor([math.exp(hi + 0.5)], dtype=F64))) == -math.inf


@pytest.mark.parametrize("sched_cls", [DDPMScheduler, DDIMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler])
def test_default_prediction_types(sched_cls):
    s = InfoNoiseTrainingTimestepSampler.from_scheduler(sched_cls())
    expected = {
        "DDPMScheduler": "epsilon",
        "DDIMScheduler": "epsilon",
        "EDMEulerScheduler": "sample",
        "FlowMatchEulerDiscreteScheduler": "flow",
    }[sched_cls.__name__]
    assert s.prediction_type == expected
    v = InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler(prediction_type="v_prediction"))
    assert v.prediction_type == "v_prediction"
    # EDM's prediction_type only picks c_out's sign: never the loss parameterization (METHOD.md §3)
    assert InfoNoiseTrainingTimestepSampler.from_scheduler(EDMEulerScheduler(prediction_type="v_prediction")).prediction_type == "sample"


# ----------------------------------------------------------------------------------------------
# Kingma-Gao: importance weights keep the base objective
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", SCHEDULERS)
def test_kingma_gao_weights_are_unbiased_for_the_base_objective(kind):
    # unweighted: under the EDM weighting λ·mmse of Gaussian data is constant, so the proposal is the base
    sampler = _make("kingma_gao", kind, loss_weighting="none")
    _adapt(sampler, steps=4)
    n = 200_000
    levels = sampler.sample(n, generator=torch.Generator().manual_seed(9))
    w = levels.loss_weights.double().numpy()
    assert w.std() > 0.2  # the proposal really differs from the base
    sig = levels.sigmas.double().numpy()
    f = lambda s: 1.0 / (1.0 + s) + np.exp(-((np.log(s) - 1.5) ** 2) / 0.5)  # noqa: E731  any bounded function
    est = w * f(sig)
    se = est.std() / math.sqrt(n)
    if kind == "vp":  # base: uniform t over the table
        sched = DDPMScheduler()
        ac = sched.alphas_cumprod.double().numpy()
        ref = float(np.mean(f(np.sqrt((1 - ac) / ac))))
    else:
        if kind == "ve":
            lo, hi, mean = math.log(0.002), math.log(80.0), -1.2
            std = 1.2
        else:
            lo, hi, mean, std = math.log(1 / 999), math.log(999), math.log(3.0), 1.0  # logit-normal, shift 3
        x = np.linspace(lo, hi, 200_001)
        p = stats.norm.pdf(x, mean, std)
        ref = float(np.trapezoid(p * f(np.exp(x)), x) / np.trapezoid(p, x))
    assert est.mean() == pytest.approx(ref, abs=4 * se + 1e-4)
    # and the unweighted draws are biased (so the test above has power)
    assert abs(f(sig).mean() - ref) > 8 * se


def test_kingma_gao_proposal_is_base_times_weighted_loss():
    """p ∝ base·E[u·L] per bin (VDM++), mixed with the base by the floor: checked on exact bin centres."""
    sched = EDMEulerScheduler()
    kg = KingmaGaoSampler(
        InfoNoiseTrainingTimestepSampler.from_scheduler(sched).path,
        prediction_type="sample",
        loss_weighting="edm",
        num_bins=16,
        warmup_steps=1,
        refresh_every=1,
        min_count=1,
        smoothing=0.0,
        floor=0.1,
    )
    edges = np.linspace(math.log(0.002), math.log(80.0), 17)
    sig = np.exp(0.5 * (edges[1:] + edges[:-1]))
    levels = NoiseLevels(torch.zeros(16), torch.from_numpy(sig).float(), torch.from_numpy(-2 * np.log(sig)).float())
    loss = sig**2 / (sig**2 + 0.25)  # x0 errors (sample prediction)
    kg.update(levels, torch.from_numpy(loss))
    kg.step()
    lam = (sig**2 + 0.25) / (sig * 0.5) ** 2
    base = truncated_normal_masses(edges, -1.2, 1.2)
    p = base * lam * loss
    p = 0.9 * p / p.sum() + 0.1 * base
    got = torch.exp(kg._log_prob(torch.from_numpy(sig))).numpy() * (edges[1] - edges[0])
    np.testing.assert_allclose(got, p, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------


def _levels(n=4):
    s = make_sampler("uniform", EDMEulerScheduler())
    return s, s.sample(n, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    "call,exc,name",
    [
        (lambda s, lv: s.update(lv, torch.tensor([0.1, -0.2, 0.3, 0.4])), ValueError, "per_sample_loss"),
        (lambda s, lv: s.update(lv, torch.ones(4, 3)), ValueError, "per_sample_loss"),
        (lambda s, lv: s.update(lv, torch.ones(5)), ValueError, "per_sample_loss"),
        (lambda s, lv: s.update(lv, torch.ones(4, dtype=torch.int64)), TypeError, "per_sample_loss"),
        (lambda s, lv: s.update(lv, [0.1, 0.2, 0.3, 0.4]), TypeError, "per_sample_loss"),
        (lambda s, lv: s.update((lv.timesteps, lv.sigmas), torch.ones(4)), TypeError, "levels"),
        (lambda s, lv: s.sample(-1), ValueError, "batch_size"),
        (lambda s, lv: s.sample(2.0), ValueError, "batch_size"),
        (lambda s, lv: s.sample(True), ValueError, "batch_size"),
        (lambda s, lv: s.sample(np.bool_(True)), ValueError, "batch_size"),
        (lambda s, lv: s.sample(np.int64(-1)), ValueError, "batch_size"),
        (lambda s, lv: s.step(-1), ValueError, "global_step"),
        (lambda s, lv: s.step(0), ValueError, "global_step"),
        (lambda s, lv: s.step(2.5), ValueError, "global_step"),
        (lambda s, lv: s.step(True), ValueError, "global_step"),
        (lambda s, lv: s.add_noise(torch.ones(4, 2), torch.ones(4, 3), lv), ValueError, "noise"),
        (lambda s, lv: s.add_noise(torch.ones(3, 2), torch.ones(3, 2), lv), ValueError, "levels"),
        (lambda s, lv: s.timestep_probabilities(), ValueError, "timestep_probabilities"),
    ],
)
def test_bad_update_and_sample_arguments(call, exc, name):
    for sampler_name in ("uniform", "infonoise", "kingma_gao"):
        s = make_sampler(sampler_name, EDMEulerScheduler())
        lv = s.sample(4, generator=torch.Generator().manual_seed(0))
        with pytest.raises(exc, match=name):
            call(s, lv)


def test_a_numpy_integer_batch_size_is_the_count_it_holds():
    """``sample(len(rows))`` of a numpy array's count (np.int64) draws that many levels, the same ones an int draws."""
    for name in ("uniform", "infonoise"):
        s = make_sampler(name, EDMEulerScheduler())
        a = s.sample(np.int64(5), generator=torch.Generator().manual_seed(3))
        b = s.sample(5, generator=torch.Generator().manual_seed(3))
        assert a.sigmas.shape == (5,) and torch.equal(a.sigmas, b.sigmas) and torch.equal(a.timesteps, b.timesteps)


@pytest.mark.parametrize(
    "make,exc,pattern",
    [
        (lambda: make_sampler("infonoise", object()), TypeError, "noise_scheduler"),
        (lambda: make_sampler("infonoise", DDPMScheduler(), prediction_type="x0"), ValueError, "prediction_type.*accepted"),
        (
            lambda: make_sampler("uniform", FlowMatchEulerDiscreteScheduler(), prediction_type="epsilon"),
            ValueError,
            "prediction_type.*accepted",
        ),
        (lambda: make_sampler("infonoise", DDPMScheduler(), loss_weighting="p2"), ValueError, "loss_weighting.*accepted"),
        (lambda: make_sampler("infonoise", DDPMScheduler(), loss_weighting=1.0), TypeError, "loss_weighting"),
        (lambda: make_sampler("infonoise", DDPMScheduler(), loss_weighting="min_snr"), ValueError, "snr_gamma"),
        (lambda: make_sampler("nope", DDPMScheduler()), ValueError, "name.*accepted"),
        (lambda: make_sampler("edm_lognormal", EDMEulerScheduler(), P_meen=0.0), ValueError, "P_meen"),
        (lambda: make_sampler("kingma_gao", EDMEulerScheduler(), P_mean=0.0), ValueError, "P_mean"),
        (lambda: make_sampler("infonoise", EDMEulerScheduler(), num_bins=2), ValueError, "num_bins"),
        (lambda: make_sampler("infonoise", EDMEulerScheduler(), warmup_steps=-1), ValueError, "warmup_steps"),
        (lambda: make_sampler("infonoise", EDMEulerScheduler(), refresh_every=0), ValueError, "refresh_every"),
        (lambda: make_sampler("infonoise", EDMEulerScheduler(), floor=1.5), ValueError, "floor"),
        (lambda: make_sampler("infonoise", EDMEulerScheduler(), gate="sometimes"), ValueError, "gate"),
        (lambda: make_sampler("infonoise", EDMEulerScheduler(), ema_decay=1.0), ValueError, "ema_decay"),
    ],
)
def test_bad_construction_arguments(make, exc, pattern):
    with pytest.raises(exc, match=pattern):
        make()


def test_other_alphas_cumprod_schedulers_are_vp():
    s = make_sampler("infonoise", EulerDiscreteScheduler())
    assert s.path.kind == "vp"


@pytest.mark.parametrize("kind", SCHEDULERS)
@pytest.mark.parametrize("name", ["uniform", "infonoise", "kingma_gao"])
def test_batch_size_zero(kind, name):
    s = _make(name, kind)
    lv = s.sample(0)
    assert len(lv) == 0 and lv.sigmas.shape == (0,) and lv.timesteps.shape == (0,)
    x = torch.zeros(0, 1, 4, 4)
    assert s.add_noise(x, x, lv).shape == (0, 1, 4, 4)
    s.update(lv, torch.zeros(0))
    s.step()
    if name in ADAPTIVE:
        _adapt(s, steps=2)
        lv = s.sample(0)
        s.update(lv, torch.zeros(0))
        s.step()
        assert s.is_adapted


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_losses_accepted(dtype):
    a = make_sampler("infonoise", EDMEulerScheduler(), warmup_steps=1, refresh_every=1)
    b = make_sampler("infonoise", EDMEulerScheduler(), warmup_steps=1, refresh_every=1)
    lv = a.sample(2048, generator=torch.Generator().manual_seed(0))
    loss = _own_loss(a, lv.sigmas).to(dtype)
    a.update(lv, loss)
    b.update(lv, loss.float())  # the same values, exactly representable in float32
    a.step()
    b.step()
    assert torch.equal(a.probs, b.probs) and a.estimator.sums.dtype == F64


# ----------------------------------------------------------------------------------------------
# state
# ----------------------------------------------------------------------------------------------


def _walk(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            assert isinstance(k, str)
            yield from _walk(v, f"{path}.{k}" if path else k)
    else:
        yield path, obj


@pytest.mark.parametrize("kind", SCHEDULERS)
@pytest.mark.parametrize("name", ADAPTIVE)
def test_state_dict_round_trip_exact(name, kind, tmp_path):
    from diffusers_infonoise.schedule_io import load_sampler_state, save_sampler_state

    a = _adapt(_make(name, kind), steps=3)
    state = a.state_dict()
    for key, value in _walk(state):
        # strings only where a name is the value: the sampler's, the run's start and warm-up setting (issue 28), and the
        # settings' named values ('auto', 'phi') and the run's path, loss and base recorded to name what a resume command
        # changes, and the loss pi was built for
        named = key in ("name", "warmup_setting") or key.startswith(("start.", "settings.", "resume_record.", "objective."))
        assert value is None or torch.is_tensor(value) or isinstance(value, (bool, int, float)) or (named and isinstance(value, str)), key
    assert isinstance(state["name"], str)
    json.dumps({k: (v.tolist() if torch.is_tensor(v) else v) for k, v in _walk(state)})  # JSON-friendly

    b = _make(name, kind)
    b.load_state_dict(copy.deepcopy(state))
    c = _make(name, kind)
    save_sampler_state(a, tmp_path)  # safetensors + JSON, no pickle
    assert load_sampler_state(c, tmp_path)
    for other in (b, c):
        ga, go = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
        la, lo = a.sample(1000, generator=ga), other.sample(1000, generator=go)
        assert torch.equal(la.timesteps, lo.timesteps) and torch.equal(la.sigmas, lo.sigmas)
    # identical π after further updates on all three
    gen = torch.Generator().manual_seed(8)
    for _ in range(3):
        lv = a.sample(2048, generator=gen)
        loss = _own_loss(a, lv.sigmas) * 1.5
        for s in (a, b, c):
            s.update(lv, loss)
            s.step()
    assert torch.equal(a.probs, b.probs) and torch.equal(a.probs, c.probs)
    assert a.optimizer_step == b.optimizer_step == c.optimizer_step


def test_load_state_dict_refreshes_cached_timestep_probabilities():
    a = _adapt(_make("infonoise", "vp"), steps=2, seed=0)
    b = _make("infonoise", "vp")
    gen = torch.Generator().manual_seed(1)
    for _ in range(2):  # same number of π updates as a, different losses
        lv = b.sample(4096, generator=gen)
        b.update(lv, _own_loss(b, lv.sigmas, s_d=3.0))
        b.step()
    assert a.num_updates == b.num_updates
    assert not torch.equal(a.timestep_probabilities(), b.timestep_probabilities())
    b.load_state_dict(a.state_dict())
    assert torch.equal(b.timestep_probabilities(), a.timestep_probabilities())
    ga, gb = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    assert torch.equal(a.sample(500, generator=ga).timesteps, b.sample(500, generator=gb).timesteps)


def test_load_state_dict_rejects_other_grid_or_sampler():
    a = _adapt(_make("infonoise", "ve"), steps=2)
    with pytest.raises(ValueError, match="grid"):
        _make("infonoise", "ve", num_bins=32).load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="state_dict"):
        _make("kingma_gao", "ve").load_state_dict(a.state_dict())
    fixed = make_sampler("uniform", EDMEulerScheduler())
    fixed.step()
    other = make_sampler("uniform", EDMEulerScheduler())
    other.load_state_dict(fixed.state_dict())
    assert other.optimizer_step == 1


def test_generator_device_and_reproducibility():
    s = _adapt(_make("infonoise", "flow"), steps=3)
    a = s.sample(64, generator=torch.Generator().manual_seed(0), device="cpu")
    b = s.sample(64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a.sigmas, b.sigmas) and a.sigmas.device.type == "cpu"
    c = s.sample(64, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(a.sigmas, c.sigmas)


# -- review findings: stored schedules under another loss, and hyperparameter validation ----------


def _gaussian_trained(sampler, steps=30, s_d=0.5):
    from diffusers_infonoise import x0_error_factor

    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        lv = sampler.sample(512, generator=gen)
        sig = lv.sigmas.double()
        mmse = sig**2 * s_d**2 / (sig**2 + s_d**2)  # analytic Gaussian MMSE (METHOD.md §2)
        sampler.update(lv, (mmse / x0_error_factor(sampler.prediction_type, sig)).float())
        sampler.step()
    return sampler


def test_stored_schedule_defaults_to_its_loss_and_is_rebuilt_for_another_weighting():
    sch = EDMEulerScheduler()
    trained = _gaussian_trained(
        InfoNoiseTrainingTimestepSampler.from_scheduler(sch, loss_weighting="edm", warmup_steps=10, refresh_every=10, floor=0.0)
    )
    trained.save_to_scheduler(sch)
    same = InfoNoiseTrainingTimestepSampler.from_scheduler(sch, floor=0.0)
    assert same.objective.loss_weighting == "edm" and same.prediction_type == "sample"
    assert torch.equal(same.probs, trained.probs)
    # Trained under EDM's λ(σ); continued with an unweighted x0 loss: φ = π·w must stay ∝ ρ̂, so
    # π_new ∝ π_old·λ(σ) on the bin centres (λ written out by hand, Karras et al. 2022).
    other = InfoNoiseTrainingTimestepSampler.from_scheduler(sch, loss_weighting="none", floor=0.0)
    sig = torch.exp(other.estimator.centers)
    lam = (sig**2 + 0.25) / (sig * 0.5) ** 2
    expected = trained.probs * lam
    expected = expected / expected.sum()
    assert torch.allclose(other.probs, expected, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize(
    "kwargs, arg",
    [
        ({"gate": float("inf")}, "gate"),
        ({"gate_fallback": float("inf")}, "gate_fallback"),
        ({"smoothing": float("inf")}, "smoothing"),
        ({"smoothing": float("nan")}, "smoothing"),
        ({"min_count": 2.7}, "min_count"),
        ({"ema_decay": "0.9"}, "ema_decay"),
        ({"floor": True}, "floor"),
        ({"loss_weighting": "min_snr", "snr_gamma": "5"}, "snr_gamma"),
        ({"foo": 1}, "foo"),
        ({"mmse_cap": -1.0}, "mmse_cap"),
        ({"mmse_cap": "bogus"}, "mmse_cap"),
        ({"floor_space": "sigma"}, "floor_space"),
        ({"warmup_steps": "later"}, "warmup_steps"),
        ({"num_training_steps": 0}, "num_training_steps"),
    ],
)
def test_bad_hyperparameters_name_the_argument(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        make_sampler("infonoise", DDPMScheduler(), **kwargs)


def test_load_state_dict_rejects_malformed_state():
    s = _gaussian_trained(make_sampler("infonoise", DDPMScheduler(), warmup_steps=2, refresh_every=2), steps=2)
    with pytest.raises(ValueError, match="state_dict"):
        s.load_state_dict(None)
    state = s.state_dict()
    with pytest.raises(ValueError, match="missing"):
        s.load_state_dict({k: v for k, v in state.items() if k != "estimator"})
    with pytest.raises(ValueError, match="probs"):
        s.load_state_dict({**state, "probs": torch.full_like(state["probs"], float("nan"))})


def _trained_with_model_error(cap, delta, steps=30, s_d=0.5):
    """DDPM-ε on Gaussian data (per-dimension variance s_d²): the Bayes ε-loss mmse/σ² (by hand,
    METHOD.md §2-3) plus a constant residual ``delta`` of an imperfect ε-model, which the σ²
    conversion turns into an x0 error growing like δσ² at high noise."""
    sampler = make_sampler("infonoise", DDPMScheduler(), warmup_steps=10, refresh_every=10, floor=0.0, gate=None, mmse_cap=cap)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        lv = sampler.sample(2048, generator=gen)
        sig = lv.sigmas.double()
        eps_loss = s_d**2 / (sig**2 + s_d**2) + delta  # Bayes ε-MMSE = mmse/σ², mmse = σ²s_d²/(σ²+s_d²)
        sampler.update(lv, eps_loss.float())
        sampler.step()
    return sampler


def test_mmse_cap_keeps_the_bayes_profile_and_removes_amplified_model_error():
    from helpers.reference import total_variation

    exact = _trained_with_model_error(None, 0.0)
    # the Bayes MMSE never exceeds the data variance: capping there changes nothing
    capped_exact = _trained_with_model_error(0.25, 0.0)
    assert total_variation(capped_exact.probs.numpy(), exact.probs.numpy()) < 1e-9
    # an ε residual of 1e-3 per dimension is x0 error 1e-3·σ² (25 at σ = 157, 100x the variance)
    noisy = _trained_with_model_error(None, 1e-3)
    capped = _trained_with_model_error(0.25, 1e-3)
    sig = torch.exp(noisy.estimator.centers)
    top = sig > 10
    assert float(noisy.probs[top].sum()) > float(exact.probs[top].sum()) + 0.2
    assert total_variation(noisy.probs.numpy(), exact.probs.numpy()) > 0.2
    assert total_variation(capped.probs.numpy(), exact.probs.numpy()) < 0.03
    assert noisy.describe()["hyperparameters"]["mmse_cap"] is None and capped.settings.mmse_cap == 0.25


def test_the_settings_are_defined_once():
    """Issue 29: the adaptive samplers' settings were listed in four places (the constructor's keywords,
    ``hyperparameters``, the keywords from_scheduler accepts, the ones a stored schedule carries). Each now follows
    from InfoNoiseSettings: the stored ones (the payload's format, written out here by hand), the keywords the
    constructor and from_scheduler accept, and what a stored schedule carries into the sampler rebuilt from it;
    its checks name the argument and what is accepted."""
    import dataclasses
    import re

    from diffusers_infonoise import InfoNoiseSettings, read_schedule

    stored = ["num_bins", "warmup_steps", "refresh_every", "ema_decay", "memory", "min_count", "smoothing", "floor"]
    stored += ["floor_space", "gate", "gate_fallback", "mmse_cap", "temperature", "clean_end_bound", "target_space"]
    names = sorted([*stored, "num_training_steps", "base"])
    assert sorted(f.name for f in dataclasses.fields(InfoNoiseSettings)) == names
    sched = EDMEulerScheduler()
    s = _adapt(_make("infonoise", "ve", num_bins=8, floor=0.1, gate=0.05, temperature=0.5, memory=40, base="log_uniform"))
    s.save_to_scheduler(sched)
    payload = read_schedule(sched)
    assert list(payload["hyperparameters"]) == list(s.settings.stored()) == stored
    assert payload["hyperparameters"] == {k: getattr(s.settings, k) for k in stored}
    with pytest.raises(ValueError, match=re.escape(f"from_scheduler: unknown parameter(s) ['bogus']; accepted: {names}")):
        InfoNoiseTrainingTimestepSampler.from_scheduler(sched, bogus=1)
    kg_names = sorted(set(names) - {"floor_space", "gate", "gate_fallback", "mmse_cap", "temperature", "target_space"})
    with pytest.raises(TypeError, match=re.escape(f"KingmaGaoSampler: unknown parameter(s) ['bogus']; accepted: {kg_names}")):
        KingmaGaoSampler(s.path, prediction_type="sample", bogus=1)
    rebuilt = InfoNoiseTrainingTimestepSampler.from_stored(sched)
    carried = set(stored) - {"warmup_steps"}
    assert {k: getattr(rebuilt.settings, k) for k in carried} == {k: getattr(s.settings, k) for k in carried}
    assert rebuilt.base_description == s.base_description == {"name": "log_uniform"}
    for kw, message in (
        ({"floor": 2}, "floor: must be a float in [0, 1], got 2"),
        ({"warmup_steps": -1}, "warmup_steps: must be 'auto' or an int >= 0, got -1"),
        ({"min_count": 0}, "min_count: must be an int >= 1, got 0"),
        ({"gate": "sometimes"}, "gate: accepted values are"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            InfoNoiseSettings(**kw)


def test_numpy_scalars_are_settings_as_the_python_numbers_they_hold_and_bools_are_refused():
    """InfoNoiseSettings(memory=np.int64(200)) was refused (not an int), a np.float64 was kept as one; the settings are
    stored as JSON, so each is taken as the Python number it holds. A bool, Python's or numpy's, is still no number."""
    from diffusers_infonoise import InfoNoiseSettings

    given = dict(num_bins=np.int32(16), warmup_steps=np.int64(5), num_training_steps=np.int64(100), refresh_every=np.int64(10))
    given.update(memory=np.int64(200), min_count=np.uint8(2), smoothing=np.float64(0.5), floor=np.float32(0.25), gate=np.float16(0.5))
    given.update(gate_fallback=np.float64(0.25), mmse_cap=np.float32(0.5), temperature=np.float64(1.0))
    settings = InfoNoiseSettings(**given)
    for name, value in given.items():
        got = getattr(settings, name)
        assert got == value and type(got) is (int if isinstance(value, np.integer) else float), (name, got)
    assert json.loads(json.dumps(settings.stored())) == settings.stored()
    for bad in (10**400, "200"):  # an int no float holds: a clear error naming the range, no OverflowError
        with pytest.raises(ValueError, match=r"memory: must be 'auto' .* or a number of optimizer steps in \(0, 1\.8e308\)"):
            InfoNoiseSettings(memory=bad)
    for bad in (True, np.bool_(True)):
        with pytest.raises(ValueError, match="memory: must be 'auto'"):
            InfoNoiseSettings(memory=bad)
        with pytest.raises(ValueError, match="num_bins: must be an int >= 4"):
            InfoNoiseSettings(num_bins=bad)
    # the run's length, given to a sampler later, the same way
    s = make_sampler("infonoise", EDMEulerScheduler(), memory=np.int64(200))
    s.plan_run(np.int64(100))
    assert type(s.settings.num_training_steps) is int and s.warmup_steps == 50  # a tenth of the run, at least one refresh (50)
    json.dumps(s.to_payload())
    with pytest.raises(ValueError, match="num_training_steps: must be an int >= 1"):
        s.plan_run(np.bool_(True))


def test_memory_with_ema_decay_is_refused_not_ignored():
    """ema_decay (the former rule, one EMA step a refresh) has no horizon: a memory given beside it was accepted and
    never used. Now it names memory; a stored payload that records both (a 0.3.0 run given both) still rebuilds its π,
    and continuing it with a memory needs ema_decay=None, as the error says."""
    with pytest.raises(ValueError, match=r"memory: not used with ema_decay=0.9"):
        make_sampler("infonoise", EDMEulerScheduler(), memory=100, ema_decay=0.9)
    assert make_sampler("infonoise", EDMEulerScheduler(), memory="auto", ema_decay=0.9).settings.ema_decay == 0.9
    assert make_sampler("infonoise", EDMEulerScheduler(), memory=100)._memory_steps() == 100.0

    sch = EDMEulerScheduler()
    trained = _gaussian_trained(InfoNoiseTrainingTimestepSampler.from_scheduler(sch, warmup_steps=10, refresh_every=10, ema_decay=0.9))
    trained.save_to_scheduler(sch)
    config = dict(sch.config)
    payload = copy.deepcopy(config["_infonoise_schedule"])
    payload["hyperparameters"]["memory"] = 100.0  # what 0.3.0 stored for --infonoise_memory 100 --infonoise_ema_decay 0.9
    both = EDMEulerScheduler.from_config({**config, "_infonoise_schedule": payload})
    again = InfoNoiseTrainingTimestepSampler.from_scheduler(both)
    assert again.settings.ema_decay == 0.9 and again.settings.memory == "auto"
    assert torch.equal(again.probs, trained.probs)
    with pytest.raises(ValueError, match="memory: not used with ema_decay"):
        InfoNoiseTrainingTimestepSampler.from_scheduler(both, memory=50)
    assert InfoNoiseTrainingTimestepSampler.from_scheduler(both, memory=50, ema_decay=None)._memory_steps() == 50.0


def _resume_warnings(caplog, sampler, state) -> list[str]:
    """The warnings ``sampler.load_state_dict(state)`` logs."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="diffusers_infonoise"):
        sampler.load_state_dict(copy.deepcopy(state))
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_resume_with_other_settings_says_which(caplog):
    """A checkpoint resumed by a command with another --infonoise_memory (or any setting that decides π or how the
    statistics are collected) continued under the command's setting with no word; the schedule then differs from the
    run's. It still continues under the command's, and one logged warning names each setting, checkpoint -> this
    run's. ``mmse_cap`` was silently replaced by the checkpoint's (the warning named only the gate): it is named, and
    the command's cap is used as every other setting is."""
    run = _gaussian_trained(make_sampler("infonoise", EDMEulerScheduler(), warmup_steps=10, refresh_every=5, memory=7), steps=12)
    state = run.state_dict()
    resumed = make_sampler("infonoise", EDMEulerScheduler(), warmup_steps=10, refresh_every=5, floor=0.1)
    (line,) = _resume_warnings(caplog, resumed, state)
    assert re.search(r"resumed at step 12 .*--infonoise_memory: 7 -> 'auto'; --infonoise_floor: 0.05 -> 0.1; the schedule", line), line
    assert resumed._memory_steps() == 500.0 and resumed.settings.floor == 0.1  # the command's, as before
    for same, saved in ((make_sampler("infonoise", EDMEulerScheduler(), warmup_steps=10, refresh_every=5, memory=7), state),
                        (resumed, {k: v for k, v in state.items() if k not in ("settings", "resume_record")})):  # fmt: skip
        assert _resume_warnings(caplog, same, saved) == []
    # the m̂ cap: an explicit one, changed on resume, is named with the gate and the command's is the one used
    capped = _gaussian_trained(make_sampler("infonoise", EDMEulerScheduler(), warmup_steps=10, refresh_every=5, mmse_cap=0.5), steps=12)
    other = make_sampler("infonoise", EDMEulerScheduler(), warmup_steps=10, refresh_every=5, mmse_cap=1.0, gate=0.3)
    (line,) = _resume_warnings(caplog, other, capped.state_dict())
    assert "--infonoise_gate: 'auto' -> 0.3; --infonoise_mmse_cap: 0.5 -> 1.0;" in line, line
    assert other.estimator.mmse_cap == 1.0 and other.settings.mmse_cap == 1.0
    same = make_sampler("infonoise", EDMEulerScheduler(), warmup_steps=10, refresh_every=5, mmse_cap=0.5)
    assert _resume_warnings(caplog, same, capped.state_dict()) == [] and same.estimator.mmse_cap == 0.5
    # a baseline's settings that its π does not read are not compared: a checkpoint that recorded InfoNoise's (as a
    # baseline's did before the resume record) resumes silently
    kg = _gaussian_trained(make_sampler("kingma_gao", EDMEulerScheduler(), warmup_steps=10, refresh_every=5), steps=12)
    state = kg.state_dict()
    older = {k: v for k, v in state.items() if k != "resume_record"}
    older["settings"] = {**state["settings"], "temperature": 0.5, "gate": "auto", "mmse_cap": 0.3}
    again = make_sampler("kingma_gao", EDMEulerScheduler(), warmup_steps=10, refresh_every=5)
    assert _resume_warnings(caplog, again, state) == [] and _resume_warnings(caplog, again, older) == []
    older["settings"]["floor"] = 0.1  # one it reads still is
    assert "--infonoise_floor: 0.1 -> 0.05" in _resume_warnings(caplog, again, older)[0]
    (line,) = _resume_warnings(caplog, make_sampler("kingma_gao", EDMEulerScheduler(), warmup_steps=10, refresh_every=5, floor=0.1), state)
    assert re.search(r"\(checkpoint -> this run's\): --infonoise_floor: 0.05 -> 0.1; the schedule", line), line


@pytest.mark.parametrize(
    "changed, option",
    [
        ({"sigma_data": 1.0}, "--sigma_data: 0.5 -> 1.0"),
        ({"prediction_type": "epsilon"}, "--prediction_type: 'sample' -> 'epsilon'"),
        ({"base": "uniform"}, "--infonoise_base (the base density): "),
        ({"num_bins": 32}, "--infonoise_num_bins (the grid): 64 -> 32"),
        ({"kind": "vp", "prediction_type": "epsilon"}, "--diffusion (the path): 've' -> 'vp'"),
        ({"sigma_max": 40.0}, "the path's sigma range (sigma_max): 80.0 -> 40.0"),
    ],
)
def test_a_resume_refuses_what_changes_the_meaning_of_the_state(changed, option):
    """Another path, σ range, sigma_data, prediction type, base density or grid makes the stored statistics and π mean
    something else: a resume refuses, naming the option (the grid and the path were caught by the grid's own check,
    naming neither option; sigma_data, the prediction type and the base density were taken silently)."""

    def make(kind="ve", sigma_data=0.5, sigma_max=80.0, prediction_type="sample", **kw):
        sched = EDMEulerScheduler(sigma_data=sigma_data, sigma_max=sigma_max) if kind == "ve" else DDPMScheduler()
        return make_sampler("infonoise", sched, prediction_type=prediction_type, **kw)

    state = make().state_dict()
    with pytest.raises(ValueError, match=re.escape(option)):
        make(**changed).load_state_dict(copy.deepcopy(state))
    make().load_state_dict(copy.deepcopy(state))  # the same options: no error
