"""The quality race's transfer tier (issue 30), by hand-built runs and small arrays: regret, the oracle, the worst case,
the steps to the strongest fixed arm, the arms' names and the centre of logit-normal's sweep, the data transforms
(scale, binarize after resize, dequantization, k-mer tokens) and the pretrain at another resolution."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from benchmarks import dna
from benchmarks.race import data, harness, tiers, transfer
from benchmarks.race.sample_quality import in_data_units


def _race(name: str = "tf-bin16"):
    return next(r for r in tiers.tier_races("transfer") if r.name == name)


def _run(sampler, seed, curve, steps=(150, 300, 450), **extra):
    return {"race": "tf-bin16", "sampler": sampler, "seed": seed, "steps": list(steps), "primary_metric": "fd_thresholded",
            "quality": {"fd_thresholded": list(curve)}, "wall_time_s": {"total": 100.0}, **extra}  # fmt: skip


def test_regret_oracle_and_worst_case_by_hand():
    race = _race()
    sweep_finals = {"logit_normal@mean=-2": 50.0, "logit_normal@mean=-1": 42.0, "logit_normal": 40.0, "logit_normal@mean=1": 44.0}
    runs = [_run(a, 0, [90, 60, v]) for a, v in sweep_finals.items()]
    # logit-normal's centre 0 and InfoNoise on 3 seeds: 40 is the mean of 38, 40, 42; InfoNoise 41, 43, 45 (mean 43)
    runs += [_run("logit_normal", s, [90, 60, v]) for s, v in ((1, 38.0), (2, 42.0))]
    runs[2]["quality"]["fd_thresholded"][-1] = 40.0
    runs += [_run("infonoise", s, [80, 50, v]) for s, v in enumerate((41.0, 43.0, 45.0))]
    runs += [_run("edm_lognormal", s, [95, 70, v]) for s, v in enumerate((60.0, 62.0, 64.0))]
    t = transfer.summarize_transfer([race], runs, {})["tasks"]["tf-bin16"]
    # the sweep lacks the centre +2: the oracle is the best of the four that ran, and it is marked incomplete
    assert t["oracle"]["arm"] == "logit_normal" and t["oracle"]["final_mean"] == pytest.approx(40.0)
    assert not t["oracle"]["complete"]
    assert t["arms"]["infonoise"]["regret"] == pytest.approx(43 / 40 - 1)
    assert t["arms"]["infonoise"]["regret_per_seed"] == pytest.approx([41 / 40 - 1, 43 / 40 - 1, 45 / 40 - 1])
    assert t["arms"]["edm_lognormal"]["regret"] == pytest.approx(62 / 40 - 1)
    assert t["arms"]["logit_normal@mean=-2"]["regret"] == pytest.approx(0.25)
    assert t["strongest_fixed"] == "logit_normal"
    # an incomplete sweep does not enter the worst case; with the last point it does
    assert transfer.worst_case({"tf-bin16": t}) == {}
    runs.append(_run("logit_normal@mean=2", 0, [90, 60, 39.0]))
    t = transfer.summarize_transfer([race], runs, {})["tasks"]["tf-bin16"]
    assert t["oracle"] == {"arm": "logit_normal@mean=2", "final_mean": 39.0, "sweep": {**sweep_finals, "logit_normal": 40.0,
                           "logit_normal@mean=2": 39.0}, "complete": True}  # fmt: skip
    other = json.loads(json.dumps(t))  # a second task where InfoNoise is the worse by 20%
    other["arms"]["infonoise"]["regret"] = 0.2
    worst = transfer.worst_case({"tf-bin16": t, "tf-deq16": other})
    assert worst["infonoise"]["regret"] == pytest.approx(0.2) and worst["infonoise"]["task"] == "tf-deq16"
    assert worst["edm_lognormal"]["regret"] == pytest.approx(62 / 39 - 1) and worst["edm_lognormal"]["runs_to_choose"] == 1
    assert worst[transfer.ORACLE] == {"regret": 0.0, "task": None, "tasks": {"tf-bin16": 0.0, "tf-deq16": 0.0}, "runs_to_choose": 5}
    md = "\n".join(transfer.markdown(transfer.summarize_transfer([race], runs, {}), "x.png"))
    assert "| tf-bin16: binarized MNIST 16x16 (reference) | `fd_thresholded`, 450 | `logit_normal@mean=2` 39 |" in md
    assert "| `infonoise` | +10.3% (tf-bin16) | 1 |" in md and f"| `{transfer.ORACLE}` | +0.0% | 5 |" in md


def test_the_summary_adds_the_tiers_regret_part_where_a_race_has_a_sweep():
    """The transfer tier's summary (its regret against the sweep's best point) comes from the tier object: the summary
    holds it for races with a sweep, and no part where ``--only`` leaves only races without one."""
    from benchmarks.race import summary

    race = _race()
    runs = [{**_run(a, 0, [90, 60, v]), "inference": {"scheduler": "EDMEulerScheduler"}}
            for a, v in (("logit_normal", 40.0), ("infonoise", 44.0), ("logit_normal@mean=-2", 50.0))]  # fmt: skip
    hooks = tiers.get_tier("transfer").summaries
    out = summary.summarize([race], runs, {}, hooks)
    assert out["transfer"] == transfer.summarize_transfer([race], runs, out)
    assert out["transfer"]["tasks"]["tf-bin16"]["arms"]["infonoise"]["regret"] == pytest.approx(44 / 40 - 1)
    plain = dataclasses.replace(race, sweep=())
    assert set(summary.summarize([plain], runs, {}, hooks)) == {"tf-bin16"}
    # a tier without the hook adds no part, sweep or not
    assert set(summary.summarize([race], runs, {}, tiers.get_tier("tracking").summaries)) == {"tf-bin16"}


def test_steps_to_the_strongest_fixed_arm_by_hand():
    """Target: the fixed arm's mean final 40 (curves 60, 50, 40 and 60, 50, 40); InfoNoise seed 0 (55, 38, 30) crosses
    40 between 150 and 300 at 150 + 150·(55 − 40)/(55 − 38) = 282.35: speed-up 450/282.35; seed 1 (45, 42, 41) never
    reaches it (upper bound 450/450); seed 2 (39, ...) at the first evaluation (a lower bound, 450/150 = 3)."""
    fixed = [_run("logit_normal", s, [60, 50, 40]) for s in (0, 1)]
    info = [_run("infonoise", 0, [55, 38, 30]), _run("infonoise", 1, [45, 42, 41]), _run("infonoise", 2, [39, 35, 30])]
    sp = transfer.steps_to_target(fixed, info, "fd_thresholded")
    assert sp["target"] == 40 and sp["target_steps"] == 450
    first = 150 + 150 * (55 - 40) / (55 - 38)
    s0, s1, s2 = sp["per_seed"]
    assert s0["steps"] == pytest.approx(first) and s0["speedup"] == pytest.approx(450 / first) and not s0["at_first_eval"]
    assert s1["speedup"] is None and s1["speedup_upper_bound"] == 1.0
    assert s2["speedup"] == 3.0 and s2["at_first_eval"]
    assert sp["median"] == pytest.approx(450 / first) and sp["num_not_reached"] == 1


def test_arm_names_and_their_flags():
    assert tiers.parse_arm("logit_normal@mean=-1.3,std=0.8") == tiers.Arm("logit_normal", (), (("mean", -1.3), ("std", 0.8)))
    assert tiers.parse_arm("infonoise-gate_none#v2") == tiers.Arm("infonoise", ("gate_none",), (), "v2")
    assert [tiers.parse_arm(a).kind for a in ("infonoise#v2", "logit_normal@mean=2", "loss_slope")] == ["infonoise", "fixed", "adaptive"]
    for bad, match in (("logit_normal@mean", "not <key>=<number>"), ("infonoise@mean=1", "fixed density"), ("nope", "unknown sampler")):
        with pytest.raises(ValueError, match=match):
            tiers.parse_arm(bad)
    text = "infonoise,logit_normal@mean=-1.3,std=0.8,infonoise-base=logit_normal,edm_lognormal@P_mean=0,P_std=1#t"
    assert tiers.split_arms(text) == [
        "infonoise",
        "logit_normal@mean=-1.3,std=0.8",
        "infonoise-base=logit_normal",
        "edm_lognormal@P_mean=0,P_std=1#t",
    ]
    # the library's mean is the centre of ln σ (more noise when > 0); the script's --logit_mean has diffusers' sign
    assert harness.fixed_param_args("logit_normal@mean=-2") == ["--logit_mean", "2.0"]
    assert harness.fixed_param_args("logit_normal@mean=1.5,std=0.5") == ["--logit_mean", "-1.5", "--logit_std", "0.5"]
    assert harness.fixed_param_args("edm_lognormal@P_mean=-0.4") == ["--edm_p_mean", "-0.4"]
    with pytest.raises(ValueError, match="accepted: mean, std"):
        harness.fixed_param_args("logit_normal@P_mean=1")


@pytest.mark.parametrize("centre", [-2, -1, 1, 2])
def test_the_sweeps_centre_is_the_median_ln_sigma_the_script_draws(script, centre):
    """The arm ``logit_normal@mean=c`` run through the script's own arguments draws ln σ (VE σ) with median c."""
    from diffusers import EDMEulerScheduler

    from diffusers_infonoise.objective import Objective
    from diffusers_infonoise.training import build_noise_sampler

    arm = f"logit_normal@mean={centre}"
    assert arm in tiers.TRANSFER_SWEEP
    args = script.parse_args(["--diffusion", "edm", "--noise_sampler", "logit_normal", *harness.fixed_param_args(arm)])
    sampler = build_noise_sampler(args, EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5), objective=Objective("sample"))
    sigmas = sampler.sample(40_000, generator=torch.Generator().manual_seed(0)).sigmas.double()
    # the median of 40000 draws of N(c, 1) has standard error sqrt(π/2)/200 = 0.0063 (truncation at ln 0.002, ln 80: < 1e-4)
    assert float(torch.log(sigmas).median()) == pytest.approx(centre, abs=0.03)


def test_data_transforms():
    images = np.array([[[0, 255], [255, 0]]], dtype=np.uint8)
    np.testing.assert_array_equal(data.scaled_x0(images, 0.25), [[[[-0.25, 0.25], [0.25, -0.25]]]])
    np.testing.assert_array_equal(data.scaled_x0(images, 4.0), [[[[-4, 4], [4, -4]]]])
    # scored back in the data's units: exact for a scale <= 1; for 4 only the sign survives generate_images' clamp
    x = torch.tensor([-0.25, -0.1, 0.05, 0.25])
    torch.testing.assert_close(in_data_units((x + 1) / 2, 0.25), (x / 0.25 + 1) / 2)
    clamped = ((torch.tensor([-4.0, -0.5, 0.5, 4.0]) + 1) / 2).clamp(0, 1)
    assert ((in_data_units(clamped, 4.0) > 0.5) == torch.tensor([False, False, True, True])).all()
    # binarize after resizing: a grey 28x28 image resized to 32 stays binary, white with probability v/255
    from benchmarks.race.data import _resize

    grey = np.full((200, 28, 28), 64, dtype=np.uint8)
    bits = data.binarize(_resize(grey, 32))
    assert bits.shape == (200, 32, 32) and set(np.unique(bits)) <= {0, 255}
    assert (bits == 255).mean() == pytest.approx(64 / 255, abs=0.005)  # 204800 pixels: std 0.001
    # dequantization: level v spread over [2v/256 − 1, 2(v + 1)/256 − 1), inside [−1, 1), levels do not overlap
    levels = np.repeat(np.arange(256, dtype=np.uint8), 400).reshape(-1, 1, 1)
    x = data.dequantized_x0(levels)[:, 0, 0, 0]
    v = levels[:, 0, 0].astype(np.float64)
    assert (x >= 2 * v / 256 - 1).all() and (x < 2 * (v + 1) / 256 - 1).all() and x.min() >= -1 and x.max() < 1
    np.testing.assert_array_equal(np.floor((x.astype(np.float64) + 1) * 128), v)
    assert len(np.unique(x)) > 0.99 * len(x)  # no value grid left


def test_kmer_tokens_round_trip_through_one_hot():
    from diffusers_infonoise.data import decode_sequences, one_hot_sequences

    rng = np.random.default_rng(0)
    seqs = ["".join(rng.choice(list("ACGT"), 64)) for _ in range(50)]
    tokens = dna.kmer_tokens(seqs, 2)
    assert {len(t) for t in tokens} == {32} and set("".join(tokens)) <= set(dna.kmer_alphabet(2))
    assert dna.kmer_alphabet(2) == "ABCDEFGHIJKLMNOP" and len(dna.kmer_alphabet(3)) == 64 and dna.kmer_alphabet(1) == "ACGT"
    assert dna.kmer_tokens(["ACGT"], 2) == ["BL"]  # AC = 0·4 + 1, GT = 2·4 + 3
    one_hot = one_hot_sequences(tokens, dna.kmer_alphabet(2))  # what the script trains on: (N, 16, 32) in {−1, 1}
    assert one_hot.shape == (50, 16, 32)
    assert dna.kmer_bases(decode_sequences(one_hot, dna.kmer_alphabet(2)), 2) == seqs
    assert dna.kmer_tokens(seqs, 1) == seqs  # k = 1: the tokens are the bases
    with pytest.raises(ValueError, match="multiple of k"):
        dna.kmer_tokens(["ACG"], 2)


def test_adaptive_final_pi_is_read_from_the_checkpoint(tmp_path):
    from diffusers import EDMEulerScheduler

    from diffusers_infonoise import make_sampler
    from diffusers_infonoise.schedule_io import save_sampler_state

    sampler = make_sampler("loss_slope", EDMEulerScheduler(), warmup_steps=0)
    assert harness.checkpoint_pi(tmp_path) is None
    save_sampler_state(sampler, tmp_path / "noise_sampler" / "rank_0")
    assert harness.checkpoint_pi(tmp_path) == {"edges": [round(float(e), 6) for e in sampler.estimator.edges], "pi": None, "adapted": False}
    sampler.probs = torch.full((64,), 1 / 64, dtype=torch.float64)
    save_sampler_state(sampler, tmp_path / "noise_sampler" / "rank_0")
    assert harness.checkpoint_pi(tmp_path)["pi"] == [round(1 / 64, 6)] * 64


def test_a_fine_tune_at_another_resolution_starts_from_a_resized_copy(tmp_path):
    race = _race("tf-ft16to32")
    source = harness.pretrain_dir(tmp_path, race.pretrained)
    (source / "unet").mkdir(parents=True)
    (source / "unet" / "config.json").write_text(json.dumps({"sample_size": 16, "in_channels": 1}))
    (source / "model_index.json").write_text("{}")
    out = harness.resized_pretrain(tmp_path, race)
    assert out == harness.pretrained_folder(tmp_path, race) == tmp_path / "pretrained" / f"{race.pretrained}-at32"
    assert json.loads((out / "unet" / "config.json").read_text()) == {"sample_size": 32, "in_channels": 1}
    assert json.loads((source / "unet" / "config.json").read_text())["sample_size"] == 16
    same = _race("tf-ft16-x0.25")  # the same resolution: the pretrain itself
    assert harness.pretrained_folder(tmp_path, same) == source and harness.resized_pretrain(tmp_path, same) == source
