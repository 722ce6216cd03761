"""The quality race's bookkeeping (benchmarks/quality_race.py and benchmarks/race/): steps-to-target,
speedup, run order, reuse of identical runs, the allocation measures. Values computed by hand."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from benchmarks import RESULTS
from benchmarks.race import allocation_metrics, harness, steps_to_target, tiers


def test_steps_to_reach_interpolates_linearly():
    # 6 at step 200, 4 at step 300: 5 is crossed half way
    assert steps_to_target.steps_to_reach([100, 200, 300], [10, 6, 4], 5.0) == (250.0, "interpolated")
    assert steps_to_target.steps_to_reach([100, 200], [3, 2], 5.0) == (100.0, "at_first_eval")
    assert steps_to_target.steps_to_reach([100, 200], [9, 8], 5.0) == (None, "not_reached")


def test_the_budget_columns_take_the_nearest_evaluation_and_the_later_of_two():
    """The report's 25% / 50% / 100% columns: a 240-step race evaluated at 80, 160 and 240 showed its first evaluation
    twice (120 is as near 80 as 160); the later one is taken, so the three columns are the three evaluations."""
    from benchmarks.race.summary import nearest_evaluation

    assert [nearest_evaluation([80, 160, 240], f * 240) for f in (0.25, 0.5, 1.0)] == [0, 1, 2]
    assert [nearest_evaluation([100, 200, 400], f * 400) for f in (0.25, 0.5, 1.0)] == [0, 1, 2]
    assert nearest_evaluation([150, 300, 450, 600], 0.25 * 600) == 0 and nearest_evaluation([10, 30], 19.0) == 0


def test_smooth_and_speedup_by_hand():
    assert steps_to_target.smooth([10, 8, 6, 5]).tolist() == pytest.approx([9, 8, 19 / 3, 5.5])
    base = {"steps": [100, 200, 300, 400], "quality": {"fd": [10, 8, 6, 5]}}
    other = {"steps": [100, 200, 300, 400], "quality": {"fd": [9, 6, 4, 3]}}
    # baseline target: its smoothed final 5.5, reached at step 400; the other's smoothed curve
    # [7.5, 19/3, 13/3, 3.5] crosses 5.5 at 200 + 100 * (19/3 - 5.5) / (19/3 - 13/3) = 241.67
    out = steps_to_target.speedup(base, other, "fd")
    assert out["target"] == pytest.approx(5.5) and out["baseline_steps"] == pytest.approx(400)
    assert out["steps"] == pytest.approx(200 + 100 * (19 / 3 - 5.5) / 2)
    assert out["speedup"] == pytest.approx(400 / (200 + 100 * (19 / 3 - 5.5) / 2))
    worse = {"steps": [100, 200, 300, 400], "quality": {"fd": [12, 11, 10, 9]}}
    out = steps_to_target.speedup(base, worse, "fd")
    assert out["speedup"] is None and out["speedup_upper_bound"] == pytest.approx(1.0)
    # raw curves (window 1, the fair tiers): the target is the baseline's last value 5, reached at step 400; the
    # other's raw curve [9, 6, 4, 3] crosses 5 at 200 + 100 * (6 - 5) / (6 - 4) = 250
    out = steps_to_target.speedup(base, other, "fd", window=1)
    assert out["target"] == 5 and out["baseline_steps"] == pytest.approx(400)
    assert out["steps"] == pytest.approx(250) and out["speedup"] == pytest.approx(400 / 250)


def _spec(tier, race_name, sampler, seed=0, root="/tmp/x"):
    race = next(r for r in tiers.tier_races(tier) if r.name == race_name)
    return harness.RunSpec(tier, race, sampler, seed, root)


def test_full_tier_runs_the_central_question_first():
    rank = lambda race, sampler: tiers.run_priority("full", _spec("full", race, sampler))  # noqa: E731
    assert rank("edm-binarized_mnist16", "infonoise") == rank("edm-binarized_mnist16", "edm_lognormal") == 0
    assert rank("edm-dna64", "infonoise") == rank("edm-dna64", "edm_lognormal") == 1
    assert rank("ddpm-binarized_digits", "uniform") < rank("edm-binarized_digits", "cosine") < rank("edm-dna64", "cosine")
    assert rank("edm-dna64", "cosine") < rank("edm-digits", "cosine")
    assert rank("edm-mnist16", "infonoise") == len(tiers.get_tier("full").priority) - 1
    # a tier without a priority list runs race by race
    assert tiers.run_priority("quick", _spec("quick", "edm-binarized_digits", "infonoise")) == 1


def _reuse_source(spec, root):
    """Another tier's folder under ``root`` with ``spec``'s run as it would have written it (no recorded code)."""
    src_dir = root / "runs"
    src_dir.mkdir(parents=True)
    race = spec.race
    (src_dir / f"unet_{race.name}.json").write_text(json.dumps(harness.model_config(race)))
    other = dataclasses.replace(spec, root=str(root))
    steps = [s for s in range(race.eval_every, race.steps + 1, race.eval_every) if race.eval_steps is None or s in race.eval_steps]
    result = {"command": harness.script_command(other), "steps": steps, "inference": {"num_samples": race.num_samples}, "jitter": None}
    return src_dir / f"{spec.run_id}.json", {**result, "run_id": spec.run_id}


def test_reuse_of_an_adaptive_arm_needs_the_same_clean_commit(tmp_path, monkeypatch):
    """Issue 31: a library default changed under the same arguments (the profile start's bound), and the cadence tier's
    InfoNoise runs were taken for the bound tier's. An adaptive arm's run is reused only from the same clean commit;
    a fixed density's whatever the commit. A fine-tune's pretrained pipeline is compared by its weights (each tier keeps
    its own copy, under the same name) and its evaluation steps are the race's own (100, 200, 400)."""
    monkeypatch.setattr(harness, "code_version", lambda: "0123456789")
    for sampler, reused_without_code in (("infonoise", False), ("logit_normal", True)):
        spec = _spec("bound", "tk-ft-binarized_mnist16", sampler, root=str(tmp_path / sampler / "bound"))
        spec.result_path.parent.mkdir(parents=True)
        source, result = _reuse_source(spec, tmp_path / sampler / "cadence")
        assert result["steps"] == [100, 200, 400] and "--pretrained_model_name_or_path" in result["command"]
        weights = {}
        for tier in ("bound", "cadence"):  # each tier's own copy of the pretrain, the same weights
            unet = tmp_path / sampler / tier / "pretrained" / spec.race.pretrained / "unet"
            unet.mkdir(parents=True)
            weights[tier] = unet / "diffusion_pytorch_model.safetensors"
            weights[tier].write_bytes(b"the same weights")
        for code, reused in ((None, reused_without_code), ("0123456789+dirty", reused_without_code), ("0123456789", True)):
            spec.result_path.unlink(missing_ok=True)
            source.write_text(json.dumps({**result, **({"code": code} if code else {})}))
            assert harness.reuse_run(spec, source) == reused, (sampler, code)
        # a pretrain of the same name with other weights (another tier's own pretrain): another experiment
        weights["cadence"].write_bytes(b"other weights")
        spec.result_path.unlink(missing_ok=True)
        assert not harness.reuse_run(spec, source)


def test_reuse_copies_only_the_same_experiment(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "code_version", lambda: "0123456789")
    spec = _spec("full", "edm-digits", "infonoise", root=str(tmp_path / "full"))
    (spec.result_path.parent).mkdir(parents=True)
    src_dir = tmp_path / "quick" / "runs"
    src_dir.mkdir(parents=True)
    race = spec.race
    (src_dir / f"unet_{race.name}.json").write_text(json.dumps(tiers.unet_config(8, race.channels)))
    other = dataclasses.replace(spec, root=str(tmp_path / "quick"))
    result = {
        "command": harness.script_command(other),
        "steps": list(range(race.eval_every, race.steps + 1, race.eval_every)),
        "inference": {"num_samples": race.num_samples},
        "jitter": None,
        "run_id": spec.run_id,
        "code": "0123456789",
    }
    source = src_dir / f"{spec.run_id}.json"

    source.write_text(json.dumps({**result, "command": result["command"].replace("--learning_rate 0.001", "--learning_rate 0.002")}))
    assert not harness.reuse_run(spec, source) and not spec.result_path.exists()
    source.write_text(json.dumps(result))
    assert harness.reuse_run(spec, source)
    copied = json.loads(spec.result_path.read_text())
    assert copied["reused_from"].endswith(f"{spec.run_id}.json") and copied["command"] == result["command"]


def test_variant_samplers_name_their_flags():
    assert harness.variant_args(["gate_none"]) == ["--infonoise_gate", "none"]
    assert harness.variant_args(["warmup_steps_auto", "base=logit_normal"]) == [
        "--infonoise_warmup_steps",
        "auto",
        "--infonoise_base",
        "logit_normal",
    ]
    with pytest.raises(ValueError, match="variant option"):
        harness.variant_args(["gate"])
    # recheck_full: the three main samplers, then the variants, then the other samplers on DNA
    rank = lambda race, sampler: tiers.run_priority("recheck_full", _spec("recheck_full", race, sampler))  # noqa: E731
    assert rank("edm-binarized_mnist16", "logit_normal") == 0
    assert rank("edm-binarized_mnist16", "infonoise-ema_decay_0.5") == 2
    assert rank("edm-dna64", "cosine") == len(tiers.get_tier("recheck_full").priority) - 1


def test_allocation_width_by_hand():
    """π with mass 1/2 in each of two bins of ln σ [0, 1] and [1, 3]: centres 0.5 and 2, mean 1.25, std
    0.75; the 10% quantile at ln σ 0.2, the 90% one at 1 + 0.8·2 = 2.6 (uniform inside a bin)."""
    race = tiers.tier_races("recheck_full")[0]
    run = {"sampler": "infonoise", "schedule": {"edges": [0.0, 1.0, 3.0], "pi": [0.5, 0.5]}}
    w = allocation_metrics.allocation_width(race, run, None)
    assert w["std_log_sigma"] == pytest.approx(0.75)
    assert w["sigma_q10"] == pytest.approx(math.exp(0.2)) and w["sigma_q90"] == pytest.approx(math.exp(2.6))
    # an adaptive baseline that stored no schedule has no known π (its base would stand in wrongly)
    assert allocation_metrics.allocation_width(race, {"sampler": "kingma_gao"}, run["schedule"]) is None
    assert allocation_metrics.allocation_tv(race, {"sampler": "kingma_gao"}, run["schedule"]) is None


def test_allocation_tv_by_hand_and_with_an_importance_factor():
    """x0 loss unweighted (w = 1): φ = π = (0.8, 0.2) against ρ̂ masses (0.5, 0.5) (ρ̂ per unit ln σ 0.5 and 0.25 on bins
    1 and 2 wide) is TV 0.3. With an importance target space the per-sample factor makes φ = ρ̂ (METHOD.md §4.1), which
    π alone does not show: the report takes the TV the schedule records."""
    race = tiers.tier_races("recheck_full")[0]
    schedule = {
        "edges": [0.0, 1.0, 3.0],
        "pi": [0.8, 0.2],
        "rho_hat": [0.5, 0.25],
        "prediction_type": "sample",
        "loss_weighting": "none",
        "tv_phi_rho": 0.0,
        "hyperparameters": {"target_space": "phi"},
    }
    assert allocation_metrics.allocation_tv(race, {"sampler": "infonoise", "schedule": schedule}, None) == pytest.approx(0.3)
    importance = {**schedule, "hyperparameters": {"target_space": "importance"}}
    assert allocation_metrics.allocation_tv(race, {"sampler": "infonoise", "schedule": importance}, None) == 0.0


def test_stored_schedule_reads_the_payload_with_the_library_reader(tmp_path):
    """A run's ``schedule``: the kept fields of the payload the saved scheduler stores, floats to 6
    decimals; a run without a scheduler folder has none, a corrupted payload is refused."""
    from diffusers_infonoise import ScheduleError, make_sampler, write_schedule

    scheduler = tiers.train_scheduler(tiers.tier_races("quick")[0])
    payload = write_schedule(scheduler, make_sampler("infonoise", scheduler).to_payload())
    scheduler.save_pretrained(tmp_path / "run" / "scheduler")
    schedule = harness.stored_schedule(tmp_path / "run")
    assert list(schedule) == list(harness.SCHEDULE_FIELDS)
    assert schedule["edges"] == [round(v, 6) for v in payload["edges"]] and schedule["pi"] == [round(v, 6) for v in payload["pi"]]
    assert schedule["hyperparameters"] == payload["hyperparameters"] and schedule["optimizer_steps"] == payload["optimizer_steps"]
    assert harness.stored_schedule(tmp_path / "no_run") is None
    config = tmp_path / "run" / "scheduler" / "scheduler_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "_infonoise_schedule": {**payload, "version": 99}}))
    with pytest.raises(ScheduleError, match="version"):
        harness.stored_schedule(tmp_path / "run")


def test_entry_point_keeps_its_options():
    from benchmarks import quality_race

    args = quality_race.parse_args(["--tier", "recheck_full", "--report_only", "--jobs", "1", "--only", "edm-dna64"])
    assert (args.tier, args.report_only, args.jobs, args.only, args.threads) == ("recheck_full", True, 1, "edm-dna64", 1)
    assert args.out == str(RESULTS) and not (args.smoke or args.plan or args.schedule_plots)


def test_curve_counts_where_infonoise_is_ahead_by_hand():
    from benchmarks.race import report, summary

    race = dataclasses.replace(next(r for r in tiers.tier_races("margin") if r.name == "m4x-edm-binarized_mnist16"), eval_steps=(300, 600))

    def run(sampler, seed, fd):
        return {"sampler": sampler, "seed": seed, "steps": [300, 600], "quality": {"fd_thresholded": fd}}

    by = {
        "infonoise": [run("infonoise", 0, [50, 30]), run("infonoise", 1, [60, 40])],
        # logit-normal ahead of seed 0 at 300 (45 < 50), behind it at 600; behind seed 1 at 300, ahead at 600
        "logit_normal": [run("logit_normal", 0, [45, 35]), run("logit_normal", 1, [70, 38])],
        "edm_lognormal": [],
    }
    c = summary.curve(race, by, "fd_thresholded")
    assert c["steps"] == [300, 600]
    assert [v["mean"] for v in c["samplers"]["infonoise"]] == [55, 35]
    assert [v["mean"] for v in c["samplers"]["logit_normal"]] == [57.5, 36.5]
    assert c["infonoise_ahead"]["logit_normal"] == [{"wins": 1, "seeds": 2}, {"wins": 1, "seeds": 2}]
    assert "edm_lognormal" not in c["samplers"]
    table = report._curve_table(c, "fd_thresholded")
    assert table[2] == "| step | infonoise | logit_normal | InfoNoise ahead of logit_normal |"
    assert table[4].startswith("| 300 | 55 ± 7.1 | 57.5 ± 18 | 1/2 |")


def test_a_race_without_a_plain_infonoise_arm_compares_with_the_arm_it_names():
    """The learnability tier has no ``infonoise`` arm (its default is named explicitly): the curves' counts, the speedups
    and the variants' speedups are against ``race.infonoise_arm``, not left empty, and it is not compared with itself."""
    from benchmarks.race import summary

    race = tiers.tier_races("learnability")[0]
    assert race.infonoise_arm == tiers.UNBOUNDED_START_ARM and "infonoise" not in race.samplers
    ref = race.infonoise_arm
    race = dataclasses.replace(race, eval_steps=(100, 400), samplers=(ref, "logit_normal", tiers.DRAWS_ARM))

    def run(sampler, seed, fd):
        return {"race": race.name, "sampler": sampler, "seed": seed, "steps": [100, 400], "quality": {"fd": fd},
                "primary_metric": "fd", "wall_time_s": {"total": 1.0}, "inference": {"scheduler": "EDMEulerScheduler"}}  # fmt: skip

    by = {
        ref: [run(ref, 0, [200, 120]), run(ref, 1, [210, 130])],
        "logit_normal": [run("logit_normal", 0, [190, 125]), run("logit_normal", 1, [205, 128])],
    }
    c = summary.curve(race, by, "fd")
    # logit-normal lower at step 100 on both seeds (190 < 200, 205 < 210); at 400 InfoNoise lower on seed 0 only
    assert c["infonoise_ahead"] == {"logit_normal": [{"wins": 0, "seeds": 2}, {"wins": 1, "seeds": 2}]}
    assert ref not in c["infonoise_ahead"]
    # the whole summary: the variant (a worse InfoNoise arm) and logit-normal each compared with the named arm
    variant = [run(tiers.DRAWS_ARM, 0, [400, 300]), run(tiers.DRAWS_ARM, 1, [400, 300])]
    entry = summary.summarize([race], [r for lst in by.values() for r in lst] + variant, {})[race.name]
    assert set(entry["speedup_vs"]) == {"logit_normal", tiers.DRAWS_ARM}
    # the variant's own final quality, 300, is reached by the named arm before its first evaluation on both seeds
    assert entry["speedup_vs"][tiers.DRAWS_ARM]["fd"]["num_not_reached"] == 0
    assert set(entry["variant_speedup_vs"]) == {tiers.DRAWS_ARM}


def test_every_tier_names_an_infonoise_arm_that_it_races():
    """A named reference arm must be one of the race's arms (else every comparison is silently empty); the tiers
    without a plain ``infonoise`` arm that name none are the bound tiers, whose reports predate the field."""
    unnamed = set()
    for tier in tiers.TIERS:
        for race in tiers.tier_races(tier):
            if race.infonoise_arm != "infonoise":
                assert race.infonoise_arm in race.samplers, (tier, race.name)
            elif "infonoise" not in race.samplers:
                unnamed.add(tier)
    assert unnamed == {"bound", "bound_gpu", "bound_transfer", "bound_transfer_cpu"}


def test_margin_eval_rankings_and_the_end_to_end_row_by_hand():
    from benchmarks import margin_eval

    def entry(sampler, seed, nfe18, heun, karras8, grid8):
        m = "fd_thresholded"
        scores = {"heun_nfe35": {m: heun}, "euler_karras_nfe8": {m: karras8}, "euler_infogrid_nfe8": {m: grid8}}
        return {"sampler": sampler, "seed": seed, "euler_nfe18": {m: nfe18}, "scores": scores}

    es = [
        entry("infonoise", 0, 30, 25, 60, 40),
        entry("infonoise", 1, 32, 27, 62, 50),
        entry("logit_normal", 0, 31, 24, 55, 45),
        entry("logit_normal", 1, 33, 29, 58, 48),
    ]
    lines = margin_eval._rankings(es, "fd_thresholded")
    assert "Euler NFE 18: order infonoise < logit_normal; InfoNoise below logit-normal on 2/2 seeds.  " in lines
    # Heun means 26 vs 26.5; seed 0: logit-normal lower (24 < 25), seed 1: InfoNoise lower (27 < 29)
    assert "Heun NFE 35: order infonoise < logit_normal; InfoNoise below logit-normal on 1/2 seeds.  " in lines
    assert "Euler Karras NFE 8: order logit_normal < infonoise; InfoNoise below logit-normal on 0/2 seeds.  " in lines
    # end to end: InfoNoise's InfoGrid (40, 50) against logit-normal's Karras steps (55, 58)
    assert lines[-1] == (
        "End to end at NFE 8 (InfoNoise on its own InfoGrid against logit-normal on Karras steps): "
        "45 [40, 50] against 56.5 [55, 58]; InfoNoise lower on 2/2 seeds."
    )
    assert not any(line.startswith("Control") for line in lines)
    # the control: InfoNoise on the grid of its offline profile (42, 44) against logit-normal's grid (45, 48)
    for e, c in zip(es[:2], (42, 44)):
        e["euler_offline_infogrid_nfe8"] = {"fd_thresholded": c}
    lines = margin_eval._rankings(es, "fd_thresholded")
    assert lines[-2] == (
        "Control, InfoGrid NFE 8 from the same source (an offline profile of the final model): InfoNoise "
        "43 [42, 44] (on its stored schedule's grid 45) against logit-normal 46.5; InfoNoise lower on 2/2 seeds.  "
    )


def test_the_cadence_tiers_fixed_end_schedule_reads_the_default_runs_folder():
    """``{run:RUN_ID}`` names the output folder of a run of the same tier: the diagnostic arm of the cadence tier starts
    from the scheduler the default's seed-0 run saved, and never refreshes within the 400 steps."""
    spec = _spec("cadence", "tk-ft-digits16", tiers.CLAIRVOYANT_ARM, seed=2, root="/tmp/q/quality_race_cadence")
    assert spec.sampler_args == ["--infonoise_schedule_from", "/tmp/q/quality_race_cadence/runs/tk-ft-digits16__infonoise__s0/scheduler"]
    arm = tiers.parse_arm(tiers.CLAIRVOYANT_ARM)
    assert arm.options == ("init_stored", "refresh_every=400") and spec.race.steps == 400
    # the stored starts that benchmarks.bounded_start writes under the tier's folder (binarized races only)
    spec = _spec("cadence", "tk-ft-binarized_digits16", tiers.BOUNDED_START_ARM, root="/tmp/q/quality_race_cadence")
    assert spec.sampler_args == ["--infonoise_schedule_from", "/tmp/q/quality_race_cadence/starts/tk-ft-binarized_digits16-bounded"]
    assert tiers.parse_arm(tiers.OFFLINE_START_ARM).options == ("init_stored",)
    assert tiers.BOUNDED_START_ARM not in next(r for r in tiers.tier_races("cadence") if r.dataset == "digits16").samplers
    # the other arms take no extra arguments; the races are the tracking tier's, so their runs can be reused
    assert _spec("cadence", "tk-ft-digits16", "infonoise").sampler_args == []
    assert {r.name for r in tiers.tier_races("cadence")} == {r.name for r in tiers.tier_races("tracking") if r.pretrained}


def test_the_budget_tiers_known_target_reads_the_default_run_of_its_own_budget():
    """The budget tier's target known in advance (continuous digits at two budgets, MNIST × 0.25 at 800 steps): π from
    the scheduler the default's seed-0 run of that same race saved (not the other budget's), refreshed only once the
    run is over."""
    for race in ("tk-ft-digits16-800", "tk-ft-digits16-3000", "tf-ft-bm2bm-x0.25-800"):
        steps = int(race.rsplit("-", 1)[1])
        arm = f"infonoise-init_stored-refresh_every={steps}"
        spec = _spec("budget", race, arm, seed=1, root="/tmp/q/quality_race_budget")
        default_s0 = f"/tmp/q/quality_race_budget/runs/{race}__{tiers.UNBOUNDED_START_ARM}__s0/scheduler"
        assert spec.sampler_args == ["--infonoise_schedule_from", default_s0] and spec.race.steps == steps
        assert tiers.parse_arm(arm).options == ("init_stored", f"refresh_every={steps}")
        assert _spec("budget", race, "logit_normal").sampler_args == []


def test_an_unknown_race_or_job_count_is_refused_naming_the_option(tmp_path, capsys):
    """--only with a name the tier does not have was dropped silently (a typo ran nothing, or less than asked)."""
    from benchmarks import quality_race

    with pytest.raises(SystemExit, match=r"--only: no race or data set \['typo'\] in the cadence tier; it has tk-ft-binarized_mnist16"):
        quality_race.main(["--tier", "cadence", "--plan", "--out", str(tmp_path), "--only", "tk-ft-digits16,typo"])
    with pytest.raises(SystemExit):
        quality_race.main(["--tier", "cadence", "--plan", "--out", str(tmp_path), "--jobs", "0"])
    assert "argument --jobs: expected an integer >= 1" in capsys.readouterr().err


def test_the_pi_figure_draws_the_default_arm_only(monkeypatch, tmp_path):
    """A tier with InfoNoise variants (the cadence tier) drew every variant's final π as one more "seed" of the
    default's; the figure now draws the ``infonoise`` runs (3 seeds: 3 curves), ρ̂ of its own seed 0, and one arm's
    runs when the default is absent."""
    from benchmarks.race import figures

    race = next(r for r in tiers.tier_races("cadence") if r.name == "tk-ft-digits16")
    edges = [math.log(0.002) + i * (math.log(80) - math.log(0.002)) / 4 for i in range(5)]

    def run(sampler, seed, height):
        pi = [0.1, 0.2, 0.3, 0.4] if height else [0.4, 0.3, 0.2, 0.1]
        return {"race": race.name, "sampler": sampler, "seed": seed, "schedule": {"edges": edges, "pi": pi, "rho_hat": [seed, 0, 0, 1]}}

    figs = []
    monkeypatch.setattr(figures, "_save", lambda plt, fig, path: figs.append(fig))
    runs = [run("infonoise", s, True) for s in (2, 0, 1)] + [run(tiers.CLAIRVOYANT_ARM, s, False) for s in (0, 1, 2)]
    figures.plot_pi([race], runs, tmp_path / "pi.png")
    ax = figs[-1].axes[0]
    pi_lines = [ln for ln in ax.get_lines() if ln.get_color() == "C3"]
    assert len(pi_lines) == 3 and all(list(ln.get_ydata())[0] < list(ln.get_ydata())[-1] for ln in pi_lines)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "infonoise: final π, seeds 0, 1, 2" in labels and "ρ̂ (seed 0)" in labels
    assert not any("seed 1" == t or "seed 2" == t for t in labels)
    figures.plot_pi([race], runs[3:], tmp_path / "pi.png")
    labels = [t.get_text() for t in figs[-1].axes[0].get_legend().get_texts()]
    assert f"{tiers.CLAIRVOYANT_ARM}: final π, seeds 0, 1, 2" in labels


def test_relabel_files_an_arms_runs_under_another_name_and_says_why(tmp_path):
    from benchmarks.race.relabel import relabel

    runs = tmp_path / "runs"
    (runs / "r__infonoise__s0").mkdir(parents=True)
    (runs / "r__infonoise__s0.log").write_text("log")
    for rid, sampler in (("r__infonoise__s0", "infonoise"), ("r__infonoise-gate_none__s0", "infonoise-gate_none")):
        (runs / f"{rid}.json").write_text(json.dumps({"run_id": rid, "sampler": sampler, "command": "python x", "code": "abc"}))
    assert relabel(runs, "infonoise", "infonoise-profile_bound_data", "a default changed") == ["r__infonoise-profile_bound_data__s0"]
    r = json.loads((runs / "r__infonoise-profile_bound_data__s0.json").read_text())
    assert r["sampler"] == "infonoise-profile_bound_data" and r["command"] == "python x" and r["code"] == "abc"
    assert r["relabelled_from"] == {"sampler": "infonoise", "run_id": "r__infonoise__s0", "why": "a default changed"}
    assert (runs / "r__infonoise-profile_bound_data__s0.log").read_text() == "log" and (
        runs / "r__infonoise-profile_bound_data__s0"
    ).is_dir()
    assert not (runs / "r__infonoise__s0.json").exists() and (runs / "r__infonoise-gate_none__s0.json").exists()  # another arm stays
    (runs / "r__infonoise__s0.json").write_text(json.dumps({"run_id": "r__infonoise__s0", "sampler": "infonoise"}))
    with pytest.raises(ValueError, match="exists already"):
        relabel(runs, "infonoise", "infonoise-profile_bound_data", "again")


def test_a_report_only_results_file_names_the_invocation_that_ran_and_the_one_that_re_reported(tmp_path, monkeypatch):
    from benchmarks.race import report

    monkeypatch.setattr(report, "get_tier", lambda tier: type("T", (), {"sizing": None})())
    out = tmp_path / "quality_race_x.json"
    ran = {"command": "python -m benchmarks.quality_race --tier x --only a", "jobs": 2}
    out.write_text(json.dumps({"meta": ran}))
    again = {"command": "python -m benchmarks.quality_race --tier x --report_only"}
    meta = report.results_meta(again, out, report_only=True, note="n", tier="x", runs=[])
    assert meta["command"] == ran["command"] and meta["report_regenerated_with"] == again["command"]
    lines = report.command_lines(meta)
    assert len(lines) == 2 and "--only a`" in lines[0] and "--report_only`" in lines[1]
    # a run that trains has one line: its own command
    fresh = report.results_meta(ran, tmp_path / "absent.json", report_only=False, note=None, tier="x", runs=[])
    assert report.command_lines(fresh) == [
        f"Command (the last invocation that ran; the note says how the rest were made): `{ran['command']}`  "
    ]
