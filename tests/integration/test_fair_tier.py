"""The fair race (issue 47, step 1), by hand-built runs: the oracle is the re-run centre with the best *mean* (not the
best single run), regrets carry the seeds' noise (Welch), and the steps to target are read on raw curves."""

from __future__ import annotations

import math

import pytest

from benchmarks.race import fair, harness, summary, tiers
from benchmarks.race.tiers import target


def _race():
    return next(r for r in tiers.tier_races("fair") if r.name == "tf-bin16")


def _run(sampler, seed, curve, steps=(75, 150, 225, 300, 375, 450)):
    return {"race": "tf-bin16", "sampler": sampler, "seed": seed, "steps": list(steps), "primary_metric": "fd_thresholded",
            "quality": {"fd_thresholded": list(curve)}, "wall_time_s": {"total": 1.0},
            "inference": {"scheduler": "EDMEulerScheduler"}}  # fmt: skip


def test_the_fair_races_rerun_the_oracle_with_every_seed_and_six_evaluations():
    for race in tiers.tier_races("fair"):
        assert set(race.sweep) <= set(race.samplers) and len(race.sweep) >= 2
        assert {"infonoise", "logit_normal", "edm_lognormal"} <= set(race.samplers)
        assert all(race.seeds[a] == [0, 1, 2] for a in race.samplers)
        assert len(race.eval_steps) == 6 and race.eval_steps[-1] == race.steps
        assert race.smoothing == 1  # every speed-up of a fair report, its summary table's too, on raw curves
    assert [r.name for r in tiers.tier_races("fair")] == list(target.FAIR_ORACLES)
    assert all(len(r.eval_steps) == 8 for r in tiers.tier_races("fair_budget"))
    # the recommended fixed density is an arm of every fair task (issue 48), not of the candidates' races
    assert all(tiers.RECOMMENDED_ARM in r.samplers for r in tiers.tier_races("fair"))
    assert not any(tiers.RECOMMENDED_ARM in r.samplers for r in tiers.tier_races("fair_candidates"))


def test_the_fair_tier_runs_the_recommended_arm_first_then_each_other_task_whole():
    assert sorted(target.FAIR_FIRST_PASS + target.FAIR_SECOND_PASS) == sorted(target.FAIR_ORACLES)
    specs = harness.run_specs(tiers.tier_races("fair"), tier="fair", results_tier="fair", root="/tmp/x")
    order = sorted(specs, key=lambda sp: tiers.run_priority("fair", sp))
    first = [sp for sp in order if sp.race.name in target.FAIR_FIRST_PASS]
    # the first pass's tasks: only their recommended runs ranked (the rest come back with --restore), and before all
    ranked = [sp for sp in first if tiers.run_priority("fair", sp) < len(target.fair_tier_priority())]
    assert ranked and all(sp.sampler == tiers.RECOMMENDED_ARM for sp in ranked) and order[: len(ranked)] == ranked
    # then each second-pass task with every arm and seed, one task after the other
    rest = [sp.race.name for sp in order[len(ranked) :] if sp.race.name in target.FAIR_SECOND_PASS]
    assert rest == sorted(rest, key=target.FAIR_SECOND_PASS.index)
    assert rest.count("tf-deq16") == 3 * len(next(r for r in tiers.tier_races("fair") if r.name == "tf-deq16").samplers)


def test_welch_by_hand():
    # a = 1, 2, 3 (mean 2, var 1), b = 2, 4, 6 (mean 4, var 4): se = sqrt(1/3 + 4/3), t = -2 / se,
    # dof = (5/3)^2 / ((1/3)^2/2 + (4/3)^2/2) = (25/9) / (17/18) = 50/17
    w = fair.welch([1, 2, 3], [2, 4, 6])
    assert w["diff"] == pytest.approx(-2.0) and w["se"] == pytest.approx(math.sqrt(5 / 3))
    assert w["t"] == pytest.approx(-2.0 / math.sqrt(5 / 3)) and w["dof"] == pytest.approx(50 / 17)
    assert fair.welch([1.0], [2.0, 3.0])["se"] is None


def test_paired_by_seed_by_hand():
    # seeds 0-2 in both: d = 44/40 - 1 = 0.1, 55/50 - 1 = 0.1, 72/60 - 1 = 0.2 -> mean 0.4/3, sd of (0.1, 0.1, 0.2) =
    # sqrt(((-1/30)^2 * 2 + (2/30)^2) / 2) = sqrt(1/300), se = sqrt(1/300)/sqrt(3) = 1/30; seed 3 of a alone is left out
    p = fair.paired({0: 44.0, 1: 55.0, 2: 72.0, 3: 1.0}, {0: 40.0, 1: 50.0, 2: 60.0})
    assert p["seeds"] == [0, 1, 2] and p["mean"] == pytest.approx(0.4 / 3)
    assert p["se"] == pytest.approx(1 / 30) and p["t"] == pytest.approx(4.0)
    assert fair.paired({0: 1.0}, {0: 2.0})["se"] is None


def test_the_oracle_is_the_best_mean_and_the_speedups_read_raw_curves():
    race = _race()  # sweep: logit_normal (centre 0) and centre +1
    flat = [100, 80, 70, 60, 55]
    runs = []
    # centre 0: 40, 50, 60 (mean 50); centre +1: 44, 45, 46 (mean 45, though 0 has the best single run, 40)
    runs += [_run("logit_normal", s, [*flat, v]) for s, v in enumerate((40.0, 50.0, 60.0))]
    runs += [_run("logit_normal@mean=1", s, [*flat, v]) for s, v in enumerate((44.0, 45.0, 46.0))]
    # EDM log-normal, the weaker default: mean 70
    runs += [_run("edm_lognormal", s, [100, 90, 85, 80, 75, v]) for s, v in enumerate((69.0, 70.0, 71.0))]
    # InfoNoise reaches 50 between its 2nd and 3rd evaluations: 60 at 150, 40 at 225 -> 150 + 75 * (60 - 50) / 20 = 187.5
    runs += [_run("infonoise", s, [80, 60, 40, 40, 40, 40]) for s in range(3)]
    out = summary.summarize([race], runs, {}, (target.FAIR,))
    t = out["fair"]["tasks"]["tf-bin16"]
    assert t["oracle"] == "logit_normal@mean=1" and t["oracle_mean"] == pytest.approx(45.0)
    assert t["stronger_default"] == "logit_normal" and t["decides"]
    info = t["arms"]["infonoise"]
    assert info["regret"] == pytest.approx(40 / 45 - 1)
    # se of the difference: InfoNoise's seeds agree (var 0), the oracle's var is 1: se = sqrt(1/3); relative to 45
    assert info["regret_se"] == pytest.approx(math.sqrt(1 / 3) / 45) and info["welch_t"] == pytest.approx(-5 / math.sqrt(1 / 3))
    # the stronger default's mean curve: 100, 80, 70, 60, 55, 50 -> its own final 50 at its budget, 450 steps
    sp = info["speedup_vs_default"]
    assert sp["target"] == pytest.approx(50.0) and sp["target_steps"] == pytest.approx(450.0)
    assert [p["steps"] for p in sp["per_seed"]] == pytest.approx([187.5] * 3) and sp["median"] == pytest.approx(450 / 187.5)
    # the oracle's mean curve ends at 45: InfoNoise reaches it at 150 + 75 * (60 - 45) / 20 = 206.25
    assert info["speedup_vs_oracle"]["median"] == pytest.approx(450 / 206.25)
    assert out["fair"]["worst_regret"]["edm_lognormal"]["regret"] == pytest.approx(70 / 45 - 1)
    # paired by seed: InfoNoise 40 on every seed against the oracle's 44, 45, 46
    d = [40 / 44 - 1, 40 / 45 - 1, 40 / 46 - 1]
    assert info["paired_regret"]["mean"] == pytest.approx(sum(d) / 3)
    md = "\n".join(fair.markdown(out["fair"]))
    assert "| tf-bin16 | `fd_thresholded`, 450, 6 | `logit_normal@mean=1` 45 | `infonoise` |" in md
    assert "2.40 [2.40, 2.40, 2.40]" in md
    # the report's top table reads raw curves too: logit-normal(0, 1)'s seed 0 ends at 40 (at 450 steps), which
    # InfoNoise's raw curve first reaches at its third evaluation, 225 (smoothed over 3 evaluations the target is 47.5)
    top = out["tf-bin16"]["speedup_vs"]["logit_normal"]["fd_thresholded"]["per_seed"][0]
    assert top["target"] == 40.0 and top["speedup"] == pytest.approx(450 / 225) and out["tf-bin16"]["speedup_smoothing"] == 1


def test_a_candidate_target_is_compared_with_the_librarys_infonoise_seed_by_seed():
    import dataclasses

    cand = "infonoise-target_space=importance"
    race = dataclasses.replace(_race(), samplers=(*_race().samplers, cand))
    flat = [100, 80, 70, 60, 55]
    runs = [_run(a, s, [*flat, v]) for a in ("logit_normal", "logit_normal@mean=1") for s, v in enumerate((44.0, 45.0, 46.0))]
    runs += [_run("infonoise", s, [*flat, v]) for s, v in enumerate((40.0, 50.0, 60.0))]
    # 36/40 - 1 = -0.1, 45/50 - 1 = -0.1, 48/60 - 1 = -0.2: mean -0.4/3, se 1/30 (as test_paired_by_seed_by_hand), t -4
    runs += [_run(cand, s, [*flat, v]) for s, v in enumerate((36.0, 45.0, 48.0))]
    t = fair.summarize_fair([race], runs, summary.summarize([race], runs, {}))["tasks"]["tf-bin16"]
    p = t["arms"][cand]["paired_vs_infonoise"]
    assert p["mean"] == pytest.approx(-0.4 / 3) and p["t"] == pytest.approx(-4.0)
    assert "paired_vs_infonoise" not in t["arms"]["infonoise"]
    md = "\n".join(fair.markdown({"tasks": {"tf-bin16": t}, "worst_regret": {}, "how": ""}))
    assert f"| tf-bin16 | `{cand}` | -13.3% ± 3.3% (t -4.0) | 3 |" in md


def test_a_task_with_too_few_seeds_decides_nothing():
    race = _race()
    runs = [_run(a, 0, [90, 80, 70, 60, 50, v]) for a, v in (("logit_normal", 40.0), ("logit_normal@mean=1", 45.0), ("infonoise", 42.0))]
    t = fair.summarize_fair([race], runs, summary.summarize([race], runs, {}))["tasks"]["tf-bin16"]
    assert not t["decides"] and t["arms"]["infonoise"]["regret_se"] is None
    assert "tf-bin16 *" in "\n".join(fair.markdown({"tasks": {"tf-bin16": t}, "worst_regret": {}, "how": ""}))


def _recommended_run(seed, final, warnings):
    printed = {"flags": "--noise_sampler edm_lognormal --edm_p_mean -0.5 --edm_p_std 0.8", "warnings": warnings,
               "row": {"tv": 0.05, "rv": 1.1, "n_eff_per_batch": 0.9}, "default": {"tv": 0.4}}  # fmt: skip
    record = {"tv": 0.04, "source": {"kind": "pilot"}, "printed": printed,
              "cost": {"pilot_steps": 112, "profile_forward_passes": 16384, "run_share": 0.44}}  # fmt: skip
    run = _run(tiers.RECOMMENDED_ARM, seed, [90, 80, 70, 60, 55, final])
    return {**run, "resolved_arm": "logit_normal@mean=-0.5,std=0.8", "recommended": record}


@pytest.mark.parametrize(
    ("finals", "warnings", "verdict"),
    [
        ((46.0, 47.0, 47.0), [[], [], []], "within"),  # mean 46.67: +3.7% of the oracle's 45
        ((50.0, 50.0, 50.0), [["n_eff below half"]] * 3, "warned"),  # +11.1%, every run's row warned
        ((50.0, 50.0, 50.0), [["n_eff below half"], [], []], "warned on some runs"),
        ((50.0, 50.0, 50.0), [[], [], []], "silent miss"),
    ],
)
def test_the_recommended_arm_is_within_the_bar_or_warned(finals, warnings, verdict):
    race = _race()
    runs = [_run("logit_normal@mean=1", s, [90, 80, 70, 60, 50, v]) for s, v in enumerate((44.0, 45.0, 46.0))]
    runs += [_run("logit_normal", s, [90, 80, 70, 60, 55, 60.0]) for s in range(3)]
    runs += [_recommended_run(s, v, w) for s, (v, w) in enumerate(zip(finals, warnings))]
    t = fair.summarize_fair([race], runs, summary.summarize([race], runs, {}))["tasks"]["tf-bin16"]
    e = t["arms"][tiers.RECOMMENDED_ARM]
    assert e["regret"] == pytest.approx(sum(finals) / 3 / 45 - 1) and e["verdict"] == verdict
    assert e["recommended"]["run_share"] == pytest.approx(0.44)
    md = "\n".join(fair.markdown({"tasks": {"tf-bin16": t}, "worst_regret": {}, "how": ""}))
    assert f"| {verdict} | 1.44 | s0: `--noise_sampler edm_lognormal --edm_p_mean -0.5 --edm_p_std 0.8`; TV 0.050 vs 0.400;" in md
