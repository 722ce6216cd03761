"""A tier resumed from its committed results (benchmarks/race/restore.py): a run the results file compacted comes
back as the harness wrote it (the schedule's edges rebuilt from [first, last, count]), marked; a run that has a
result is left alone, and a run the committed file does not hold is not invented."""

from __future__ import annotations

import json

import numpy as np

from benchmarks.race import harness, report, restore, tiers


def _race():
    return tiers.Race("t-restore", "binarized_digits", "edm", ("logit_normal", "infonoise"), "logit_normal",
                      {"logit_normal": [0, 1], "infonoise": [0]}, steps=8, eval_every=4, channels=(8, 16), batch_size=8,
                      lr_warmup_steps=0, extra_args=())  # fmt: skip


def test_committed_runs_come_back_as_written(tmp_path):
    race = _race()
    specs = harness.run_specs([race], tier="quick", results_tier="t", root=str(tmp_path / "quality_race_t"))
    edges = [round(float(v), 6) for v in np.linspace(-6.2146, 4.382, 5)]  # a uniform grid in ln sigma, 4 bins
    runs = [
        {"run_id": sp.run_id, "race": race.name, "sampler": sp.sampler, "seed": sp.seed, "quality": {"fd": [2.0, 1.0]},
         "classifier": {"accuracy": 0.9},
         "schedule": {"edges": edges, "pi": [0.1234567, 0.2, 0.3, 0.4], "rho_hat": [1, 2, 3, 4]} if sp.sampler == "infonoise" else None}
        for sp in specs
        if sp.seed == 0
    ]  # fmt: skip
    report.write_results_json({"meta": {}, "runs": runs}, tmp_path / "quality_race_t.json")
    done_spec = next(sp for sp in specs if sp.sampler == "logit_normal" and sp.seed == 0)
    done_spec.result_path.parent.mkdir(parents=True)
    done_spec.result_path.write_text(json.dumps({"kept": True}))

    restored = restore.restore_runs(specs, tmp_path, "t")

    assert restored == [f"{race.name}__infonoise__s0"]
    r = json.loads(next(sp for sp in specs if sp.sampler == "infonoise").result_path.read_text())
    assert r["schedule"]["edges"] == edges and "edges_linspace" not in r["schedule"]
    assert r["schedule"]["pi"] == [0.1235, 0.2, 0.3, 0.4]  # the results file's 4 significant digits
    assert r["restored_from"] == "benchmarks/results/quality_race_t.json" and r["quality"] == {"fd": [2.0, 1.0]}
    assert json.loads(done_spec.result_path.read_text()) == {"kept": True}  # a finished run is not overwritten
    assert not next(sp for sp in specs if sp.seed == 1).result_path.exists()  # seed 1 was never committed
    assert restore.restore_runs(specs, tmp_path / "nowhere", "t") == []
