"""The quality race's fixed density recommended from a profile (issue 32, benchmarks/race/recommended.py): the arm's
name, its resolution on a tiny pretrained pipeline and on a pilot run (the parameters recommend_parameters gives on a
profile measured here independently, the script trains that density), its cost, its cache, its place in the transfer
tier and its plan, and the report's regret, worst case, draws and TV of a hand-built run."""

from __future__ import annotations

import dataclasses
import json
import math
import types

import numpy as np
import pytest
import torch

from benchmarks.race import allocation_metrics, harness, recommended, tiers, transfer

pytestmark = pytest.mark.usefixtures("fresh_accelerate_state")

ARM = tiers.RECOMMENDED_ARM
#: a small profile: 16 probes x 8 levels x 1 draw = 128 forward passes
SMALL = {"num_samples": 16, "num_levels": 8, "num_noise_draws": 1}
EDM = dict(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5)


def _tiny_race(**kw):
    """A race on the 8x8 binarized digits (built in): 8 steps at batch 8, the tiny UNet (8, 16)."""
    return tiers.Race("t-rec", "binarized_digits", "edm", ("logit_normal", ARM), "logit_normal", {"logit_normal": [0], ARM: [0]},
                      steps=8, eval_every=4, channels=(8, 16), batch_size=8, lr_warmup_steps=0, extra_args=(), **kw)  # fmt: skip


def _probe_x0(num: int, seed: int) -> torch.Tensor:
    """The race's training examples, read here without the script: binarized digits are 0/255, the script's x0 v/127.5 − 1."""
    from diffusers_infonoise.data import load_builtin_arrays

    images, _ = load_builtin_arrays("binarized_digits", "train")
    idx = np.random.default_rng(seed).permutation(len(images))[:num]
    return torch.from_numpy(images[idx].astype(np.float32) / 127.5 - 1)[:, None]


def _expected(model_folder, seed=0):
    """recommend_parameters on a profile measured here: the folder's UNet, EDM's scheduler, the race's objective."""
    from diffusers import EDMEulerScheduler, UNet2DModel

    from diffusers_infonoise.diagnostics import profile_from_model, recommend_parameters

    scheduler = EDMEulerScheduler(**EDM)
    model = UNet2DModel.from_pretrained(str(model_folder), subfolder="unet").eval()
    prof = profile_from_model(model, scheduler, _probe_x0(16, seed), num_levels=8, prediction_type="sample", loss_weighting="edm",
                              num_noise_draws=1, generator=torch.Generator().manual_seed(seed), progress=False)  # fmt: skip
    fits = recommend_parameters(prof, scheduler, families=["edm_lognormal"], prediction_type="sample", loss_weighting="edm")
    return fits["edm_lognormal"]


def test_the_arm_name_parses_and_sits_last_in_the_transfer_tier():
    assert tiers.parse_arm(ARM) == tiers.Arm("logit_normal", (), (), "recommended") and ARM == "logit_normal#recommended"
    assert tiers.parse_arm(ARM).recommended and tiers.parse_arm(ARM).kind == "fixed"
    assert tiers.parse_arm("edm_lognormal#recommended").recommended and not tiers.parse_arm("infonoise#v2").recommended
    for bad in ("infonoise#recommended", "uniform#recommended", "logit_normal@mean=1#recommended"):
        with pytest.raises(ValueError, match="#recommended fits the parameters of logit_normal or edm_lognormal"):
            tiers.parse_arm(bad)
    assert tiers.split_arms(f"logit_normal,{ARM},infonoise") == ["logit_normal", ARM, "infonoise"]
    # the pilot's share: a quarter, or f of #recommended-pilot=<f> in (0, 1]
    half = tiers.parse_arm(tiers.RECOMMENDED_HALF_PILOT_ARM)
    assert tiers.RECOMMENDED_HALF_PILOT_ARM == "logit_normal#recommended-pilot=0.5" and half.recommended and half.pilot_fraction == 0.5
    assert tiers.parse_arm(ARM).pilot_fraction == 0.25 and tiers.parse_arm("logit_normal").pilot_fraction is None
    for bad in ("logit_normal#recommended-pilot=0", "logit_normal#recommended-pilot=1.5", "logit_normal#recommended-pilot=x"):
        with pytest.raises(ValueError, match=r"#recommended-pilot=<f> takes the pilot's share of the race's steps, a number in \(0, 1\]"):
            tiers.parse_arm(bad)
    with pytest.raises(ValueError, match="#recommended fits the parameters"):
        tiers.parse_arm("infonoise#recommended-pilot=0.5")
    # in every transfer task with one seed, and started after every other run of the tier, the peers included
    assert tiers.TRANSFER_ARMS[-2:] == (ARM, tiers.RECOMMENDED_HALF_PILOT_ARM)
    specs = harness.run_specs(tiers.tier_races("transfer"), tier="transfer", results_tier="transfer", root="/tmp/x")
    ours = [sp for sp in specs if tiers.parse_arm(sp.sampler).recommended]
    assert len(ours) == 2 * len(tiers.tier_races("transfer")) and {sp.seed for sp in ours} == {0}
    assert specs[-len(ours) :] == ours
    others = [tiers.run_priority("transfer", sp) for sp in specs if not tiers.parse_arm(sp.sampler).recommended]
    assert max(others) < min(tiers.run_priority("transfer", sp) for sp in ours)
    # its profile is the one `infonoise profile` / `infonoise recommend --model --dataset` measure by default
    from diffusers_infonoise.cli import build_parser

    cli = build_parser().parse_args(["profile", "--model", "m", "--dataset", "d"])
    settings = recommended.PROFILE_SETTINGS
    assert (cli.num_samples, cli.num_levels, cli.num_noise_draws, cli.batch_size, cli.gate) == (*settings.values(), "auto")
    # recommend fills in the same defaults when it measures (they are unset until then, so that one given with a SOURCE is told)
    rec = build_parser().parse_args(["recommend", "--model", "m", "--dataset", "d"])
    assert not hasattr(rec, "num_levels") and {k: v for k, (_, v) in rec.measure_defaults.items() if k in settings} == settings
    # --smoke keeps it
    smoke = {r.name: r for r in tiers.smoke_races(tiers.tier_races("transfer"))}
    assert ARM in smoke["tf-bin16"].samplers and ARM in smoke["tf-ft16-x0.25"].samplers


def test_a_fine_tune_resolves_from_its_pretrain_at_step_0(tmp_path, script):
    """The pretrain (a tiny random UNet) profiled on 16 training examples: the parameters, TV and cost of
    recommend_parameters on the same profile measured here; the script then trains exactly that density."""
    from diffusers import EDMEulerScheduler, UNet2DModel

    from diffusers_infonoise.paths import path_from_scheduler
    from diffusers_infonoise.pipeline import InfoNoiseUnconditionalPipeline
    from diffusers_infonoise.sampler import base_density
    from diffusers_infonoise.training.args import baseline_density_params

    race = _tiny_race(pretrained="edm-infonoise-binarized_digits-s1")  # an 8x8 binarized-digits pretrain
    torch.manual_seed(0)
    unet = UNet2DModel(**{k: v for k, v in tiers.unet_config(8, (8, 16)).items() if k != "_class_name"})
    folder = harness.pretrained_folder(tmp_path, race)
    InfoNoiseUnconditionalPipeline(unet=unet, scheduler=EDMEulerScheduler(**EDM)).save_pretrained(folder)
    spec = harness.RunSpec("t", race, ARM, 0, str(tmp_path))
    with pytest.raises(ValueError, match="resolved at run time"):
        spec.argv()
    rec = recommended.resolve(spec, SMALL)

    want = _expected(folder)
    mean, std = want["params"]["P_mean"], want["params"]["P_std"]
    assert rec["params"] == {"mean": mean, "std": std} and rec["tv"] == pytest.approx(want["tv"], abs=1e-12)
    assert rec["arm"] == f"logit_normal@mean={mean:.6g},std={std:.6g}" and rec["family"] == "edm_lognormal"
    # the run trains the row `infonoise recommend` prints for this package's scripts, recorded with its figures
    shown = rec["printed"]
    assert shown["flags"] == f"--noise_sampler edm_lognormal --edm_p_mean {mean:.4g} --edm_p_std {std:.4g}"
    assert shown["row"]["tv"] < shown["default"]["tv"] - 0.01 and shown["arm"] == rec["arm"]
    assert shown["default"]["flags"] == "--noise_sampler edm_lognormal --edm_p_mean -1.2 --edm_p_std 1.2"
    assert rec["objective"] == {"prediction_type": "sample", "loss_weighting": "edm", "snr_gamma": None}
    assert rec["source"]["kind"] == "pretrained (step 0)" and rec["source"]["model"] == str(folder)
    # cost: no pilot; 16 probes x 8 levels x 1 draw, at 3 forward passes per trained sample of batch 8, over 8 steps
    c = rec["cost"]
    assert (c["pilot_steps"], c["profile_forward_passes"]) == (0, 128)
    assert c["training_steps"] == pytest.approx(128 / 24) and c["run_share"] == pytest.approx(128 / 24 / 8)
    # the run passes the fitted density to the script: --logit_mean with diffusers' sign, and the script's sampler
    # draws N(mean, std) in ln σ on the EDM path, the density the fit scored
    argv = spec.argv()
    assert argv[-4:] == ["--logit_mean", repr(0.0 - mean), "--logit_std", repr(std)]
    args = script.parse_args(argv)
    assert baseline_density_params(args, "logit_normal") == {"mean": mean, "std": std}
    x = torch.linspace(-3, 3, 7, dtype=torch.float64)
    trained = base_density("logit_normal", path_from_scheduler(EDMEulerScheduler(**EDM)), mean=mean, std=std)
    torch.testing.assert_close(trained.log_prob(x), torch.distributions.Normal(mean, std).log_prob(x))
    # the run's result keeps the record (the profile's grid and ρ̂ only)
    kept = harness.run_resolution(rec)
    assert kept["arm"] == rec["arm"] and kept["cost"] == rec["cost"] and len(kept["profile"]["rho_hat"]) == 8


def test_where_the_command_prints_no_row_the_run_trains_the_trainer_default(monkeypatch):
    """A profile the default fits as well: the command prints no row, so a user keeps EDM log-normal(-1.2, 1.2) (this
    package's default on the EDM path), which the run then trains; the reason is recorded."""
    from diffusers import EDMEulerScheduler

    from diffusers_infonoise.objective import Objective

    # a profile whose draw density pi* = rho_hat/w is the default's own: rho_hat = N(-1.2, 1.2) in ln sigma times w
    x = torch.linspace(-6, 4.3, 400, dtype=torch.float64)
    objective = Objective("sample", "edm")
    w = objective.x0_loss_weight(torch.exp(x), sigma_data=0.5)
    rho = torch.distributions.Normal(-1.2, 1.2).log_prob(x).exp() * w
    prof = {"log_sigma": x.tolist(), "rho_hat": (rho / torch.trapezoid(rho, x)).tolist(), "meta": {}}
    shown = recommended.printed(prof, EDMEulerScheduler(**EDM), ARM, objective)
    assert shown["row"] is None and shown["params"] == {"mean": -1.2, "std": 1.2}
    assert shown["arm"] == "logit_normal@mean=-1.2,std=1.2" and "the default already fits" in " ".join(shown["dropped"])


def test_from_scratch_a_pilot_of_a_quarter_is_profiled_counted_and_cached(tmp_path, monkeypatch):
    race = _tiny_race()
    spec = harness.RunSpec("t", race, ARM, 0, str(tmp_path))
    spec.model_config_path.parent.mkdir(parents=True)
    spec.model_config_path.write_text(json.dumps(harness.model_config(race)))
    rec = recommended.resolve(spec, SMALL)
    pilot = recommended.pilot_dir(spec)
    assert (pilot / "model_index.json").exists() and not list(pilot.glob("checkpoint-*"))
    # the pilot: logit-normal at its default, a quarter of the 8 steps, the race's seed, batch and folder of its own
    cmd = rec["source"]["pilot_command"]
    flag = lambda name: cmd[len(cmd) - 1 - cmd[::-1].index(name) + 1]  # noqa: E731 (argparse keeps the last value)
    assert [flag(f) for f in ("--noise_sampler", "--max_train_steps", "--seed", "--train_batch_size")] == ["logit_normal", "2", "0", "8"]
    assert flag("--output_dir") == str(pilot) and "--logit_mean" not in cmd and "--pretrained_model_name_or_path" not in cmd
    assert rec["source"]["kind"] == "pilot" and rec["source"]["pilot_steps"] == 2
    # a pilot of half the run (#recommended-pilot=0.5): 4 of the 8 steps, in its own folder
    half = harness.RunSpec("t", race, tiers.RECOMMENDED_HALF_PILOT_ARM, 0, str(tmp_path))
    half_cmd = recommended.pilot_argv(half)
    assert half_cmd[len(half_cmd) - 1 - half_cmd[::-1].index("--max_train_steps") + 1] == "4"
    assert recommended.pilot_dir(half) != pilot and recommended.estimated_cost(race, SMALL, 0.5)["pilot_steps"] == 4
    # its profile: the parameters recommend_parameters gives on the pilot's model, measured here
    want = _expected(pilot)
    assert rec["params"] == {"mean": want["params"]["P_mean"], "std": want["params"]["P_std"]}
    assert rec["tv"] == pytest.approx(want["tv"], abs=1e-12)
    # its cost: 2 pilot steps + 128 forward passes / (3 x 8) = 7.33 steps, 0.917 of the 8-step run
    c = rec["cost"]
    assert (c["pilot_steps"], c["profile_forward_passes"]) == (2, 128)
    assert c["training_steps"] == pytest.approx(2 + 128 / 24) and c["run_share"] == pytest.approx((2 + 128 / 24) / 8)
    assert c["wall_time_s"]["pilot"] > 0
    # cached: neither the pilot nor the profile is redone; without the record, the kept pilot is profiled again
    real = recommended.training_script("train_unconditional")
    no_training = types.SimpleNamespace(parse_args=real.parse_args, main=lambda argv: pytest.fail("the pilot ran again"))
    monkeypatch.setattr(recommended, "training_script", lambda name: no_training)
    monkeypatch.setattr("diffusers_infonoise.diagnostics.profile_from_model", lambda *a, **k: pytest.fail("profiled again"))
    assert recommended.resolve(spec, SMALL) == rec
    monkeypatch.undo()
    monkeypatch.setattr(recommended, "training_script", lambda name: no_training)
    recommended.record_path(spec).unlink()
    again = recommended.resolve(spec, SMALL)
    assert again["params"] == rec["params"] and again["cost"]["wall_time_s"]["pilot"] is None


def test_the_plan_counts_the_pilot_and_the_profile(tmp_path, capsys):
    """tf-bin16 (450 steps, batch 64): a pilot of 112 steps and 256 x 32 x 2 = 16384 forward passes = 85.3 steps, i.e.
    198 steps at the race's cost per step; a fine-tune (240 steps): the profile only, 86 steps."""
    races = {r.name: r for r in tiers.tier_races("transfer")}
    cal, measured = harness.quick_calibration(tmp_path), harness.measured_calibration()

    def left(name, samplers):
        specs = harness.run_specs([races[name]], tier="transfer", results_tier="transfer", root=tmp_path / "r", samplers=samplers)
        return harness.print_plan(specs, tmp_path, jobs=1, tier="transfer")

    for name, steps in (("tf-bin16", 198), ("tf-ft16to32", 86)):
        race = races[name]
        assert recommended.estimated_cost(race)["training_steps"] == pytest.approx((112 if name == "tf-bin16" else 0) + 16384 / 192)
        alone = harness.estimate_seconds(dataclasses.replace(race, steps=steps, eval_every=steps, num_samples=0), cal, measured)
        assert left(name, ARM) - harness.estimate_seconds(race, cal, measured) == pytest.approx(alone)
    assert f"tf-ft16to32__{ARM}__s0 (pilot and profile)" in capsys.readouterr().out


def _run(sampler, final, **extra):
    return {"race": "tf-bin16", "sampler": sampler, "seed": 0, "steps": [150, 300, 450], "primary_metric": "fd_thresholded",
            "quality": {"fd_thresholded": [90.0, 60.0, final]}, "wall_time_s": {"total": 100.0}, **extra}  # fmt: skip


def test_the_report_shows_its_regret_cost_draws_and_tv(tmp_path):
    race = next(r for r in tiers.tier_races("transfer") if r.name == "tf-bin16")
    finals = {"logit_normal@mean=-2": 50.0, "logit_normal@mean=-1": 42.0, "logit_normal": 40.0, "logit_normal@mean=1": 44.0,
              "logit_normal@mean=2": 46.0, "infonoise": 41.0, "edm_lognormal": 60.0}  # fmt: skip
    runs = [_run(a, v) for a, v in finals.items()]
    share = (112 + 16384 / 192) / 450
    record = {"tv": 0.05, "source": {"kind": "pilot"}, "cost": {"pilot_steps": 112, "profile_forward_passes": 16384, "run_share": share}}
    runs.append(_run(ARM, 41.4, resolved_arm="logit_normal@mean=-0.5,std=0.8", recommended=record))
    tsum = transfer.summarize_transfer([race], runs, {})
    e = tsum["tasks"]["tf-bin16"]["arms"][ARM]
    # regret against the 5-point sweep's best (40), beside InfoNoise's; the oracle is still the sweep only
    assert e["regret"] == pytest.approx(41.4 / 40 - 1) and e["kind"] == "fixed"
    assert tsum["tasks"]["tf-bin16"]["oracle"]["arm"] == "logit_normal" and ARM not in tsum["tasks"]["tf-bin16"]["oracle"]["sweep"]
    assert e["runs_to_choose"] == pytest.approx(1 + share)
    # where it draws: N(−0.5, 0.8) in ln σ, its 10-90% range exp(−0.5 ± 1.2816·0.8) (the truncation at 0.002, 80 is < 1e-9)
    z = 1.2815515655446004
    assert e["draws"]["sigma_q10"] == pytest.approx(math.exp(-0.5 - z * 0.8))
    assert e["draws"]["sigma_q90"] == pytest.approx(math.exp(-0.5 + z * 0.8))
    w = tsum["worst_case"]
    assert w[ARM]["regret"] == pytest.approx(41.4 / 40 - 1) and w[ARM]["runs_to_choose"] == pytest.approx(1 + share)
    assert w["infonoise"]["runs_to_choose"] == 1 and w[transfer.ORACLE]["runs_to_choose"] == 5
    md = "\n".join(transfer.markdown(tsum, "x.png"))
    assert f"| `{ARM}` | +3.5% (tf-bin16) | {1 + share:.2f} |" in md and "| `infonoise` | +2.5% (tf-bin16) | 1 |" in md
    assert f"| tf-bin16 | `{ARM}` s0 | `logit_normal@mean=-0.5,std=0.8` | 0.050 | pilot | 112 | 16384 | {1 + share:.2f} | +3.5% |" in md
    assert ARM in transfer.plot_regret(tsum, tmp_path / "regret.png") and (tmp_path / "regret.png").exists()
    # TV(φ, ρ̂) of the run is that of the density it resolved to, not logit-normal(0, 1)'s
    ref = {"edges": [-2.0, -1.0, 0.0, 1.0], "rho_hat": [0.2, 0.5, 0.3], "prediction_type": "sample", "loss_weighting": "edm"}
    tv = allocation_metrics.allocation_tv(race, runs[-1], ref)
    assert tv == pytest.approx(allocation_metrics.allocation_tv(race, _run("logit_normal@mean=-0.5,std=0.8", 0), ref))
    assert tv != pytest.approx(allocation_metrics.allocation_tv(race, _run("logit_normal", 0), ref))
