"""The learned schedule inside a diffusers scheduler config (issue 2, serialization).

Round trips through diffusers' own save_pretrained / from_pretrained / from_config and a whole
pipeline; stock diffusers must load the result silently; bad payloads must be rejected by name.
"""

from __future__ import annotations

import json
import logging
import math
import warnings

import numpy as np
import pytest
import torch
from diffusers import (
    DDIMScheduler,
    DDPMPipeline,
    DDPMScheduler,
    EDMEulerScheduler,
    FlowMatchEulerDiscreteScheduler,
)

from benchmarks.tiny_pipelines import tiny_unet2d
from diffusers_infonoise import InfoNoiseTrainingTimestepSampler, ScheduleError, read_schedule
from diffusers_infonoise.schedule_io import CONFIG_KEY, VERSION

from helpers import DATA
from helpers.reference import gauss_mmse

F64 = torch.float64


def _adapted(sched, s_d=0.5, **kw):
    kw = {"warmup_steps": 2, "refresh_every": 1, **kw}
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, **kw)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        lv = sampler.sample(4096, generator=gen)
        sig = lv.sigmas.double()
        m = torch.from_numpy(gauss_mmse(sig.numpy(), s_d))
        c = {"sample": torch.ones_like(sig), "epsilon": sig**2, "v_prediction": sig**2 / (1 + sig**2), "flow": (sig / (1 + sig)) ** 2}[
            sampler.prediction_type
        ]
        sampler.update(lv, torch.where(torch.isfinite(c), m / c, torch.ones_like(m)))
        sampler.step()
    assert sampler.is_adapted
    return sampler


def _same_pi(a, b):
    x = 0.5 * (a.estimator.edges[1:] + a.estimator.edges[:-1])
    torch.testing.assert_close(a._log_prob(torch.exp(x)), b._log_prob(torch.exp(x)), rtol=1e-12, atol=1e-12)
    if a.path.kind == "vp":
        torch.testing.assert_close(a.timestep_probabilities(), b.timestep_probabilities(), rtol=1e-12, atol=1e-15)


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def diffusers_log():
    """Every record of diffusers' logger (which does not propagate to the root logger)."""
    logger = logging.getLogger("diffusers")
    handler, old_level = _Capture(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield handler.records, caught
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def _assert_silent_about_key(records, caught):
    for r in records:
        if r.levelno >= logging.WARNING:
            msg = r.getMessage()
            assert CONFIG_KEY not in msg and "infonoise" not in msg.lower(), msg
    for w in caught:
        assert CONFIG_KEY not in str(w.message) and "infonoise" not in str(w.message).lower(), str(w.message)


SCHEDULERS = {
    "ddpm": lambda: DDPMScheduler(beta_schedule="squaredcos_cap_v2"),
    "ddpm_v": lambda: DDPMScheduler(prediction_type="v_prediction", rescale_betas_zero_snr=True),
    "edm": lambda: EDMEulerScheduler(),
    "flow": lambda: FlowMatchEulerDiscreteScheduler(shift=3.0),
}


@pytest.mark.parametrize("kind", SCHEDULERS)
def test_save_pretrained_from_pretrained_round_trip(kind, tmp_path, diffusers_log):
    sched = SCHEDULERS[kind]()
    sampler = _adapted(sched)
    sampler.save_to_scheduler(sched)
    payload = sched.config[CONFIG_KEY]
    # plain JSON: floats, strings, lists, dicts
    assert json.loads(json.dumps(payload)) == payload
    assert payload["version"] == VERSION and len(payload["pi"]) == 64 and len(payload["edges"]) == 65
    assert sum(payload["pi"]) == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(payload["pi"], sampler.probs.numpy(), rtol=0, atol=0)
    sched.save_pretrained(tmp_path)
    on_disk = json.loads((tmp_path / "scheduler_config.json").read_text())
    assert on_disk[CONFIG_KEY] == payload
    loaded = type(sched).from_pretrained(tmp_path)
    assert read_schedule(loaded) == payload
    resumed = InfoNoiseTrainingTimestepSampler.from_scheduler(loaded)
    assert resumed.is_adapted and resumed.warmup_steps == 0
    _same_pi(sampler, resumed)
    # the scheduler itself is unchanged by carrying the payload
    fresh = type(sched).from_pretrained(tmp_path)
    for key, value in SCHEDULERS[kind]().config.items():
        if key.startswith("_"):
            continue
        assert fresh.config[key] == value or (isinstance(value, float) and math.isclose(fresh.config[key], value))
    records, caught = diffusers_log
    _assert_silent_about_key(records, caught)
    # use_stored_schedule=False starts from the base
    base = InfoNoiseTrainingTimestepSampler.from_scheduler(loaded, use_stored_schedule=False)
    assert not base.is_adapted and base.warmup_steps == 500


def test_from_config_into_compatible_class_keeps_schedule(diffusers_log):
    ddpm = DDPMScheduler()
    sampler = _adapted(ddpm)
    sampler.save_to_scheduler(ddpm)
    ddim = DDIMScheduler.from_config(ddpm.config)
    assert read_schedule(ddim) == ddpm.config[CONFIG_KEY]
    _same_pi(sampler, InfoNoiseTrainingTimestepSampler.from_scheduler(ddim))
    records, caught = diffusers_log
    _assert_silent_about_key(records, caught)


def test_dynamic_shift_round_trip(tmp_path):
    sched = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True)
    sampler = _adapted(sched, mu=0.8)
    sampler.save_to_scheduler(sched)
    sched.save_pretrained(tmp_path)
    loaded = FlowMatchEulerDiscreteScheduler.from_pretrained(tmp_path)
    _same_pi(sampler, InfoNoiseTrainingTimestepSampler.from_scheduler(loaded, mu=0.8))
    # another shift is another path on the same VE sigma grid (issue 22, METHOD.md 5.9): m̂ carries over as it is,
    # π is rebuilt for the new path (its floor's base density is shifted by exp(0.2), not exp(0.8))
    other = InfoNoiseTrainingTimestepSampler.from_scheduler(loaded, mu=0.2)
    torch.testing.assert_close(other.estimator.m_hat, sampler.estimator.m_hat, rtol=0, atol=0, equal_nan=True)
    assert other.is_adapted
    assert other.path.shift == pytest.approx(math.exp(0.2)) and not torch.equal(other.probs, sampler.probs)
    assert other._allocation_total_variation() <= other.settings.floor + 0.02


def _tiny_unet():
    return tiny_unet2d(8)


def test_whole_pipeline_save_load_with_stock_diffusers(tmp_path, diffusers_log):
    torch.manual_seed(0)
    sched = DDPMScheduler(num_train_timesteps=100)
    sampler = _adapted(sched)
    sampler.save_to_scheduler(sched)
    pipe = DDPMPipeline(unet=_tiny_unet(), scheduler=sched)
    pipe.save_pretrained(tmp_path)
    records, caught = diffusers_log
    records.clear()
    loaded = DDPMPipeline.from_pretrained(tmp_path)  # stock diffusers: no error, no warning about the key
    _assert_silent_about_key(records, caught)
    assert not [r for r in records if r.levelno >= logging.WARNING]
    assert read_schedule(loaded.scheduler) == sched.config[CONFIG_KEY]
    _same_pi(sampler, InfoNoiseTrainingTimestepSampler.from_scheduler(loaded.scheduler))
    # and it still generates
    out = loaded(batch_size=1, num_inference_steps=2, output_type="np", generator=torch.Generator().manual_seed(0))
    assert out.images.shape == (1, 8, 8, 1)


def test_fine_tuning_continues_from_stored_schedule():
    sched = EDMEulerScheduler()
    a = _adapted(sched)
    a.save_to_scheduler(sched)
    b = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, refresh_every=1)
    _same_pi(a, b)
    # its m̂ is carried too: one more refresh with the same data moves it by the EMA only
    gen = torch.Generator().manual_seed(3)
    lv = b.sample(4096, generator=gen)
    b.update(lv, torch.from_numpy(gauss_mmse(lv.sigmas.double().numpy(), 0.5)))
    b.step()
    assert b.num_updates >= 2
    x = 0.5 * (a.estimator.edges[1:] + a.estimator.edges[:-1])
    assert float((a._log_prob(torch.exp(x)) - b._log_prob(torch.exp(x))).abs().max()) < 0.2


def test_write_schedule_rejects_other_path():
    sampler = _adapted(DDPMScheduler())
    with pytest.raises(ValueError, match="noise_scheduler"):
        sampler.save_to_scheduler(EDMEulerScheduler())
    with pytest.raises(ValueError, match="noise_scheduler"):
        sampler.save_to_scheduler(DDPMScheduler(beta_schedule="scaled_linear", beta_start=0.001, beta_end=0.03))


def test_stored_schedule_on_another_grid_is_interpolated_in_log_m_hat():
    """Another bin count is interpolated, not refused (issue 22; METHOD.md 5.9): ln m̂ of the stored filled bins,
    linear in log σ at the new bin centres between the stored ends, unfilled beyond them (§5.10: not extended
    flat); π is rebuilt from it for the new grid."""
    sched = EDMEulerScheduler()
    stored = _adapted(sched)
    stored.save_to_scheduler(sched)
    other = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, num_bins=32)
    e = np.asarray(read_schedule(sched)["edges"])
    m = np.array([np.nan if v is None else v for v in read_schedule(sched)["m_hat"]])
    ok = ~np.isnan(m)
    centres_old = 0.5 * (e[1:] + e[:-1])
    centres_new = other.estimator.centers.numpy()
    want = np.exp(np.interp(centres_new, centres_old[ok], np.log(m[ok])))
    beyond = (centres_new < centres_old[ok][0]) | (centres_new > centres_old[ok][-1])
    want[beyond] = np.nan
    assert beyond.any()  # the coarser grid's end centres lie beyond the finer grid's
    np.testing.assert_allclose(other.estimator.m_hat.numpy(), want, rtol=1e-12)
    assert other.is_adapted and other.estimator.num_bins == 32 and other.warmup_steps == 0
    assert other._allocation_total_variation() <= other.settings.floor + 0.02
    assert not InfoNoiseTrainingTimestepSampler.from_scheduler(sched, num_bins=32, use_stored_schedule=False).is_adapted


def _corrupt(payload, how):
    p = json.loads(json.dumps(payload))
    if how == "version":
        p["version"] = VERSION + 1
    elif how == "format":
        p["format"] = "something-else"
    elif how == "missing":
        del p["pi"]
    elif how == "pi_sum":
        p["pi"][0] += 0.5
    elif how == "pi_negative":
        p["pi"][0], p["pi"][1] = -p["pi"][1], p["pi"][0] + 2 * p["pi"][1]
    elif how == "length":
        p["pi"] = p["pi"][:-1]
    elif how == "text":
        p["edges"][3] = "abc"
    elif how == "edges_order":
        p["edges"][3], p["edges"][4] = p["edges"][4], p["edges"][3]
    elif how == "m_hat_negative":
        p["m_hat"][5] = -1.0
    elif how == "rho_hat_negative":
        p["rho_hat"][1] = -3.0
    elif how == "rho_hat_nan":
        p["rho_hat"][2] = math.nan  # json.dumps writes NaN
    elif how == "not_a_dict":
        p = [1, 2, 3]
    elif how == "m_hat_infinity":
        p["m_hat"][5] = math.inf  # json.dumps writes Infinity
    elif how == "hyper_null":
        p["hyperparameters"] = None
    elif how == "hyper_list":
        p["hyperparameters"] = [1, 2]
    elif how == "gate_not_a_string":
        p["hyperparameters"]["gate"] = ["auto"]
    elif how == "version_true":
        p["version"] = True
    elif how == "version_float":
        p["version"] = 1.0
    elif how == "updates_text":
        p["num_updates"] = "abc"
    elif how == "warmup_negative":
        p["warmup_steps_resolved"] = -5
    elif how == "steps_negative":
        p["optimizer_steps"] = -4
    elif how == "nested_edges":  # issue 20: passed validation
        p["edges"] = [[v] for v in p["edges"]]
    elif how == "m_hat_huge":  # issue 20: passed validation, then failed deep inside (m̂/σ² overflows)
        p["m_hat"][5] = 1e308
    elif how == "three_bins":  # issue 20: blamed on a num_bins option the user never gave
        p["edges"], p["pi"], p["m_hat"] = p["edges"][:4], [0.2, 0.5, 0.3], p["m_hat"][:3]
    elif how == "edges_shifted":  # issue 20: reported as "16 bins, this sampler 16"
        p["edges"] = [v + 0.5 for v in p["edges"]]
    elif how == "huge_gate":  # JSON's exact 10**400: float() of it overflowed deep inside
        p["hyperparameters"]["gate"] = 10**400
    elif how == "huge_m_hat":
        p["m_hat"][5] = 10**400
    elif how == "huge_sigma":
        p["path"]["sigma_min"] = 10**400
    elif how == "m_hat_text":
        p["m_hat"][5] = "0.3"
    elif how == "sigma_text_shifted":  # the error's own formatting of the text raised
        p["path"]["sigma_min"] = str(p["path"]["sigma_min"])
        p["edges"] = [v + 0.5 for v in p["edges"]]
    elif how == "prediction_type_list":
        p["prediction_type"] = ["epsilon"]
    return p


@pytest.mark.parametrize(
    "how,pattern",
    [
        ("version", "version"),
        ("format", "format"),
        ("missing", "missing.*pi"),
        ("pi_sum", "pi"),
        ("pi_negative", "pi"),
        ("length", "len"),
        ("text", "edges must be a flat list of numbers"),
        ("edges_order", "edges"),
        ("m_hat_negative", r"m_hat must hold .*, got m_hat\[5\] = -1 in the bin at VE sigma [0-9.]+$"),
        ("rho_hat_negative", r"rho_hat must hold finite, non-negative densities .*, got rho_hat\[1\] = -3 in the bin at VE sigma"),
        ("rho_hat_nan", r"rho_hat must hold finite, non-negative densities .*, got rho_hat\[2\] = nan in the bin"),
        ("not_a_dict", "JSON object"),
        ("m_hat_infinity", "m_hat"),
        ("hyper_null", "hyperparameters"),
        ("hyper_list", "hyperparameters"),
        ("gate_not_a_string", "gate"),
        ("version_true", "version"),
        ("version_float", "version"),
        ("steps_negative", "optimizer_steps"),
        ("updates_text", r"num_updates must be an int >= 0 \(or absent\), got 'abc'"),
        ("warmup_negative", r"warmup_steps_resolved must be an int >= 0 \(or absent\), got -5"),
        ("nested_edges", "edges must be a flat list of numbers"),
        ("m_hat_huge", r"m_hat must hold finite x0-space errors in \[0, 1e\+30\].*1e\+308"),
        ("three_bins", "the stored schedule has 3 bins; a schedule has at least 4"),
        ("edges_shifted", r"edges span log sigma \[.*\], but its vp path's sigma range .*\(edited or corrupted\)"),
        ("huge_gate", r"_infonoise_schedule\.hyperparameters\.gate: an integer of about 401 digits, too large for a number"),
        ("huge_m_hat", r"_infonoise_schedule\.m_hat\[5\]: an integer of about 401 digits"),
        ("huge_sigma", r"_infonoise_schedule\.path\.sigma_min: an integer of about 401 digits"),
        ("m_hat_text", r"m_hat must be a flat list of numbers \(null where a bin never filled\), got m_hat\[5\] = '0\.3'"),
        ("sigma_text_shifted", r"path needs sigma_min and sigma_max, finite numbers > 0, got .*'sigma_min': '0\.01"),
        ("prediction_type_list", r"prediction_type must be a name \(a string\), got \['epsilon'\]"),
    ],
)
def test_corrupted_payload_rejected(how, pattern, tmp_path):
    sched = DDPMScheduler()
    _adapted(sched).save_to_scheduler(sched)
    sched.save_pretrained(tmp_path)
    cfg_path = tmp_path / "scheduler_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg[CONFIG_KEY] = _corrupt(cfg[CONFIG_KEY], how)
    cfg_path.write_text(json.dumps(cfg))
    loaded = DDPMScheduler.from_pretrained(tmp_path)  # stock diffusers still loads it
    with pytest.raises(ScheduleError, match=pattern) as info:
        read_schedule(loaded)
    assert CONFIG_KEY in str(info.value)
    with pytest.raises(ScheduleError, match=pattern):
        InfoNoiseTrainingTimestepSampler.from_scheduler(loaded)
    # opting out of the stored schedule does not even read it
    assert not InfoNoiseTrainingTimestepSampler.from_scheduler(loaded, use_stored_schedule=False).is_adapted


def test_an_edited_pi_is_refused_against_its_own_m_hat(tmp_path):
    """π is a function of the stored m̂ and settings (issue 20: all mass moved to the top bin made every draw
    land there, the floor bypassed). The check rebuilds it; an untouched payload passes bit for bit."""
    sched = EDMEulerScheduler()
    _adapted(sched).save_to_scheduler(sched)
    payload = json.loads(json.dumps(sched.config[CONFIG_KEY]))
    assert torch.equal(InfoNoiseTrainingTimestepSampler.from_scheduler(sched).probs, torch.tensor(payload["pi"], dtype=torch.float64))
    payload["pi"] = [0.0] * (len(payload["pi"]) - 1) + [1.0]
    sched.register_to_config(**{CONFIG_KEY: payload})
    assert read_schedule(sched)["pi"][-1] == 1.0  # well-formed: the format check passes it
    with pytest.raises(ScheduleError, match=r"pi does not follow from its own m_hat and settings \(TV (0\.9|1)"):
        InfoNoiseTrainingTimestepSampler.from_scheduler(sched)


def test_saving_into_a_scheduler_of_another_prediction_type_warns():
    """A v-model's schedule saved into an ε config (issue 20: silent)."""
    sampler = _adapted(DDPMScheduler(prediction_type="v_prediction"))
    assert sampler.prediction_type == "v_prediction"
    with pytest.warns(
        UserWarning, match="prediction_type is 'epsilon', but the schedule stored in it was learned from a 'v_prediction' loss"
    ):
        sampler.save_to_scheduler(DDPMScheduler(prediction_type="epsilon"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler.save_to_scheduler(DDPMScheduler(prediction_type="v_prediction"))


def test_log_capture_sees_diffusers_warnings(diffusers_log):
    """Positive control for the silence checks above: an unexpected public key is warned about."""
    records, _ = diffusers_log
    DDPMScheduler.from_config({**DDPMScheduler().config, "bogus_infonoise_key": 1})
    assert any("bogus_infonoise_key" in r.getMessage() and r.levelno >= logging.WARNING for r in records)


def test_no_payload_reads_none():
    assert read_schedule(DDPMScheduler()) is None
    assert read_schedule(dict(DDPMScheduler().config)) is None


def test_schedule_saved_during_warmup_keeps_base_and_warmup():
    sched = EDMEulerScheduler()
    s = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, warmup_steps=100, refresh_every=1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):  # statistics, but still on the base
        lv = s.sample(2048, generator=gen)
        s.update(lv, torch.from_numpy(gauss_mmse(lv.sigmas.double().numpy(), 0.5)))
        s.step()
    assert not s.is_adapted
    s.save_to_scheduler(sched)
    assert sched.config[CONFIG_KEY]["adapted"] is False
    resumed = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, warmup_steps=100)
    assert not resumed.is_adapted and resumed.warmup_steps == 100
    # the EDM log-normal base (scipy), not the binned copy stored as "pi"
    from scipy import stats

    x = np.linspace(math.log(0.003), math.log(70.0), 9)
    z = stats.norm.cdf(math.log(80.0), -1.2, 1.2) - stats.norm.cdf(math.log(0.002), -1.2, 1.2)
    np.testing.assert_allclose(
        resumed._log_prob(torch.from_numpy(np.exp(x))).numpy(), stats.norm.logpdf(x, -1.2, 1.2) - math.log(z), atol=1e-10
    )
    # its statistics are kept
    torch.testing.assert_close(resumed.estimator.m_hat, s.estimator.m_hat, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize(
    "how,pattern",
    [
        ("nan_sums", "sums"),
        ("negative_counts", "counts"),
        ("pi_sum", "probs"),
        ("negative_step", "optimizer_step"),
        ("truncated_json", "unreadable"),
        ("truncated_tensors", "unreadable"),
        ("negative_draws", "num_draws"),
        ("nan_samples_trained", "samples_trained"),
        ("pi_top_bin", r"state_dict\['probs'\]: its pi does not follow from its own m_hat and settings \(TV 0\.9"),
    ],
)
def test_bad_checkpoint_sampler_state_is_a_clear_error(how, pattern, tmp_path):
    from safetensors.torch import load_file, save_file

    from diffusers_infonoise.schedule_io import SAMPLER_STATE_JSON, SAMPLER_STATE_TENSORS, load_sampler_state, save_sampler_state

    sched = DDPMScheduler()
    a = _adapted(sched)
    save_sampler_state(a, tmp_path)
    tpath, jpath = tmp_path / SAMPLER_STATE_TENSORS, tmp_path / SAMPLER_STATE_JSON
    tensors, meta = load_file(tpath), json.loads(jpath.read_text())
    if how == "nan_sums":
        tensors["estimator.sums"][0] = math.nan
    elif how == "negative_counts":
        tensors["estimator.counts"][1] = -3.0
    elif how == "pi_sum":
        tensors["probs"] = tensors["probs"] * 2
    elif how == "negative_step":
        meta["values"]["optimizer_step"] = -1
    elif how == "negative_draws":
        meta["values"]["num_draws"] = -2
    elif how == "nan_samples_trained":
        meta["values"]["samples_trained"] = math.nan
    elif how == "pi_top_bin":
        tensors["probs"] = torch.zeros_like(tensors["probs"])
        tensors["probs"][-1] = 1.0
    save_file(tensors, tpath)
    jpath.write_text(json.dumps(meta))
    if how == "truncated_json":
        jpath.write_text(jpath.read_text()[:40])
    elif how == "truncated_tensors":
        tpath.write_bytes(tpath.read_bytes()[:100])
    b = InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler(), warmup_steps=2, refresh_every=1)
    with pytest.raises(ScheduleError, match=pattern) as info:
        load_sampler_state(b, tmp_path)
    assert str(tmp_path) in str(info.value)  # the error names the file or folder


@pytest.mark.parametrize("kept", ["tensors", "json"])
def test_half_a_checkpoint_sampler_state_is_a_clear_error(kept, tmp_path):
    """One of the two state files alone is not "no state": resuming from the base density would lose the schedule."""
    from diffusers_infonoise.schedule_io import SAMPLER_STATE_JSON, SAMPLER_STATE_TENSORS, load_sampler_state, save_sampler_state

    save_sampler_state(_adapted(DDPMScheduler()), tmp_path)
    missing = SAMPLER_STATE_JSON if kept == "tensors" else SAMPLER_STATE_TENSORS
    (tmp_path / missing).unlink()
    b = InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler(), warmup_steps=2, refresh_every=1)
    with pytest.raises(ScheduleError, match=f"{tmp_path}: the sampler state is incomplete: {missing} is missing"):
        load_sampler_state(b, tmp_path)
    assert not b.is_adapted and b.optimizer_step == 0
    (tmp_path / (SAMPLER_STATE_TENSORS if kept == "tensors" else SAMPLER_STATE_JSON)).unlink()
    assert load_sampler_state(b, tmp_path) is False  # neither file: no state, the sampler starts afresh


def test_a_resumed_state_keeps_its_pi_unchanged(tmp_path):
    """The π check accepts the state a sampler wrote (also after further refreshes), bit for bit."""
    from diffusers_infonoise.schedule_io import load_sampler_state, save_sampler_state

    a = _adapted(DDPMScheduler())
    save_sampler_state(a, tmp_path)
    b = InfoNoiseTrainingTimestepSampler.from_scheduler(DDPMScheduler(), warmup_steps=2, refresh_every=1)
    assert load_sampler_state(b, tmp_path)
    torch.testing.assert_close(b.probs, a.probs, rtol=0, atol=0)
    assert b.samples_trained == a.samples_trained > 0


def test_schedules_written_by_0_2_0_load_bit_for_bit():
    """Payloads saved by diffusers-infonoise 0.2.0 (b9feb75: EDM and DDPM-ε runs with bins left unfilled beyond the
    measured range, tests/data/schedules_0_2_0.json) rebuild the sampler they were saved from: the settings they
    predate take their former values (the unbounded clean end, the EMA), so the stored π is accepted and used as it
    is, and the same settings rebuild it exactly from the stored m̂."""
    from diffusers import DDPMScheduler

    configs = json.loads((DATA / "schedules_0_2_0.json").read_text())
    for name, cls in (("edm", EDMEulerScheduler), ("ddpm", DDPMScheduler)):
        config = configs[name]
        scheduler = cls.from_config(config)
        payload = read_schedule(scheduler)
        assert payload["version"] == VERSION and int(np.isnan(np.array(payload["m_hat"], dtype=float)).sum()) > 0
        sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(scheduler)
        assert sampler.estimator.clean_end_bound is False and sampler.estimator.ema_decay == 0.9
        assert torch.equal(sampler.probs, torch.tensor(payload["pi"], dtype=torch.float64))
        assert torch.equal(sampler._build_probs(), sampler.probs)  # the former profile, bit for bit


def test_a_source_is_local_or_hub_by_what_exists_here_and_every_error_says_which(tmp_path, monkeypatch):
    """Issue 28: a mistyped run folder that looks like owner/name (``runs/zA`` beside ``runs/``) was read from the Hub:
    a minute of retries offline, and online any public repo of that name, without a word. A source whose first
    component exists here is local; a link loop, a link to a device and a deeply nested JSON file are clear errors
    (the device was never opened: reading /dev/zero never ends); and every error says which was tried."""
    import huggingface_hub

    from diffusers_infonoise import schedule_io
    from diffusers_infonoise.schedule_io import ScheduleSourceError, read_schedule_from

    asked = []

    def hub(repo_id, filename, **kwargs):
        asked.append(repo_id)
        raise OSError("the network is down")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hub)
    monkeypatch.setattr(schedule_io, "_ask_hub", lambda endpoint, timeout: None)  # the Hub answers; the download fails
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    (tmp_path / "loop").symlink_to("loop")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    (tmp_path / "gone.json").symlink_to(tmp_path / "nowhere.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "list.json").write_text("[1, 2]")
    local = {
        "runs/zA": r"^no such file or folder: runs/zA \(tried as a local path because \./runs exists\)$",
        "loop": r"^loop: a symbolic link loop \(tried as a local path",
        "zero.json": r"^zero\.json: a character device, not a regular file or a folder \(tried as a local path",
        "gone.json": r"^gone\.json: a broken symbolic link \(to .*nowhere\.json; tried as a local path",
        "deep.json": r"^deep\.json: JSON nested too deeply to read",
        "list.json": r"^list\.json: expected a JSON object, got list$",
        "./zA": r"^no such file or folder: \./zA \(tried as a local path because it starts with '\.'\)$",
        "a b/c": r"^no such file or folder: a b/c \(tried as a local path because it does not have the form of a Hub repo id",
    }
    for source, pattern in local.items():
        with pytest.raises(ScheduleSourceError, match=pattern) as info:
            read_schedule_from(source)
        assert "\n" not in str(info.value)
    assert asked == []  # none of them went near the Hub
    for repo in ("someone/zA", "zA"):  # no local ./someone, no ./zA: a Hub repo id, and the error says so
        with pytest.raises(ScheduleSourceError, match=r"the network is down \(tried as a Hub repo id: there is no local file"):
            read_schedule_from(repo)
    assert asked == ["someone/zA", "zA"]


def test_schedules_written_before_the_sampler_package_load_bit_for_bit():
    """Issue 29: scheduler configs written by main at cd8ea79, before the sampler moved into diffusers_infonoise/sampler/
    (tests/data/schedules_before_sampler_package.json: the study knobs, a profile start, a resolved m̂ cap, a pinned gate,
    min-SNR on v, a tempered target, a dynamic-shift flow path) load with the stored π bit for bit, rebuild it exactly
    from the stored m̂, and are written again and described as main wrote and described them, with one setting added since
    (``target_space``, at the value they ran with)."""
    import diffusers

    import diffusers_infonoise

    cases = json.loads((DATA / "schedules_before_sampler_package.json").read_text())
    for name, case in cases.items():
        if name.startswith("_"):
            continue
        cls = getattr(diffusers, case["config"]["_class_name"])
        payload = read_schedule(cls.from_config(case["config"]))
        sampler = InfoNoiseTrainingTimestepSampler.from_stored(cls.from_config(case["config"]))
        assert torch.equal(sampler.probs, torch.tensor(payload["pi"], dtype=torch.float64)), name
        assert torch.equal(sampler._build_probs(), sampler.probs), name
        again = cls.from_config(case["config"])
        sampler.save_to_scheduler(again)
        resaved = json.loads(json.dumps(read_schedule(again)))
        assert resaved.pop("package_version") == diffusers_infonoise.__version__  # the writer's version, by design
        # added since: pi's moves at refreshes; loading is a start, no move: an empty history
        assert resaved.pop("pi_moves") == {"steps": [], "tv": []}, name
        # the one addition since: the target_space setting, at the value these schedules had (issue 31, settings.py)
        expected = {k: v for k, v in case["resaved"].items() if k != "package_version"}
        expected["hyperparameters"] = {**expected["hyperparameters"], "target_space": "phi"}
        assert resaved == expected, name
        described = {**case["describe"], "hyperparameters": {**case["describe"]["hyperparameters"], "target_space": "phi"}}
        assert json.loads(json.dumps(sampler.describe())) == described, name
