"""benchmarks/finetune_lag.py's per-element Bayes bound, against the two-point MMSE derived independently (the library's
closed form for equally likely ±1, a direct integral of the posterior mean for another prior)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.finetune_lag import _bounded_profile, per_element_bayes_mmse
from diffusers_infonoise.diagnostics.profiles import analytic_mmse_two_point

from helpers.reference import two_point_mmse_with_prior

SIGMAS = np.array([0.3, 0.5, 1.0, 2.0, 5.0])


def test_equally_likely_two_point_data_give_the_closed_form():
    x0 = np.concatenate([np.ones((500, 4)), -np.ones((500, 4))])
    np.testing.assert_allclose(per_element_bayes_mmse(x0, SIGMAS), analytic_mmse_two_point(SIGMAS).numpy(), rtol=1e-4)


def test_each_element_uses_its_own_prior():
    # element 0 is +1 in 20% of the samples, element 1 in 90%: the bound is the mean of the two priors' errors
    n = 1000
    x0 = -np.ones((n, 2))
    x0[:200, 0] = 1.0
    x0[:900, 1] = 1.0
    want = [(two_point_mmse_with_prior(0.2, s) + two_point_mmse_with_prior(0.9, s)) / 2 for s in SIGMAS]
    np.testing.assert_allclose(per_element_bayes_mmse(x0, SIGMAS), want, rtol=1e-4)
    # an element that never changes has no error at any σ; data on many values gets no bound
    assert per_element_bayes_mmse(np.ones((10, 3)), SIGMAS) == pytest.approx(np.zeros(len(SIGMAS)), abs=1e-12)
    assert per_element_bayes_mmse(np.linspace(-1, 1, 170).reshape(10, 17), SIGMAS) is None


def test_the_bounded_profile_takes_the_smallest_of_the_bounds_and_gates_like_the_sampler():
    sigma = np.exp(np.linspace(-3, 3, 7))
    profile = {"sigma": sigma.tolist(), "log_sigma": np.log(sigma).tolist(), "mmse": (2 * sigma**2).tolist(), "gate": {"pivot": 0.2}}
    bound = np.full(7, 0.5)
    # by hand: min(2σ², 0.5, σ²)/σ² = 1 where σ² ≤ 0.5, else 0.5/σ²; times σ³/(σ³ + 0.008)
    q = np.where(sigma**2 <= 0.5, 1.0, 0.5 / sigma**2) * sigma**3 / (sigma**3 + 0.2**3)
    rho = np.asarray(_bounded_profile(profile, bound)["rho_hat"])
    np.testing.assert_allclose(rho / rho.max(), q / q.max(), rtol=1e-12)
    assert np.trapezoid(rho, np.log(sigma)) == pytest.approx(1.0)


def test_a_stored_start_carries_the_profile_onto_the_runs_bins(tmp_path):
    """``benchmarks.bounded_start``: an m̂ given at levels σ_j enters a run's sampler as stored start on the run's own
    64 bins, ln-linear in ln σ between the levels (exact for a power law: m̂ = σ² at the levels gives σ² at every bin
    centre inside them), unfilled outside, and the run rebuilds π from it (the stored π is a placeholder)."""
    import math

    import torch
    from diffusers import EDMEulerScheduler

    from benchmarks.bounded_start import NUM_BINS, stored_start, write_scheduler
    from diffusers_infonoise import make_sampler
    from diffusers_infonoise.schedule_io import read_schedule_from

    scheduler = EDMEulerScheduler()
    source = make_sampler("infonoise", scheduler)
    with pytest.warns(UserWarning, match="has not adapted"):  # a fresh sampler: only its path and settings are used
        source.save_to_scheduler(scheduler)
    pretrained = tmp_path / "pretrained"
    scheduler.save_pretrained(pretrained / "scheduler")
    payload = read_schedule_from(str(pretrained / "scheduler"))[0]
    levels = np.exp(np.linspace(math.log(0.01), math.log(10.0), 9))
    start = stored_start(payload, levels, levels**2)
    assert len(start["edges"]) == NUM_BINS + 1 and start["optimizer_steps"] == 0 and start["adapted"] is True
    write_scheduler(pretrained, start, tmp_path / "start")
    run = make_sampler("infonoise", EDMEulerScheduler())
    run.load_schedule(read_schedule_from(str(tmp_path / "start"))[0])
    centres = torch.exp(run.estimator.centers)
    stored = [math.exp(0.5 * (a + b)) for a, b, m in zip(start["edges"], start["edges"][1:], start["m_hat"]) if m is not None]
    inside = (centres >= stored[0]) & (centres <= stored[-1])  # between the stored grid's filled centres
    m = run.estimator.m_hat
    # the stored grid's centres sample σ² exactly; the run's centres interpolate ln m̂ between them: exact again
    torch.testing.assert_close(m[inside], centres[inside] ** 2, rtol=1e-9, atol=0)
    assert bool(torch.isnan(m[~inside]).all()) and int(inside.sum()) > 30
    assert (
        run.is_adapted and abs(float(run.probs.sum()) - 1.0) < 1e-9 and not torch.allclose(run.probs, run.probs.mean().expand_as(run.probs))
    )
    # a run on 32 bins gets a 33-bin start (on its own grid it would check the placeholder π, not rebuild it); a NaN
    # level or unordered levels are refused, not written
    assert len(stored_start({**payload, "pi": [1 / NUM_BINS] * NUM_BINS}, levels, levels**2)["pi"]) == NUM_BINS + 1
    for sigma, m in ((levels, np.where(levels > 1, np.nan, levels**2)), (levels[::-1], levels[::-1] ** 2)):
        with pytest.raises(ValueError, match="need increasing levels and finite errors"):
            stored_start(payload, sigma, m)


def test_write_results_records_the_command_code_and_machine(tmp_path, monkeypatch):
    """The results file of ``finetune_lag`` / ``finetune_target``: the payload as given, beside the exact command (this
    process's arguments, shell-quoted), the code it ran and the wall time since ``started``."""
    import json
    import time

    from benchmarks import code_version, write_results

    monkeypatch.setattr("sys.argv", ["finetune_target.py", "--best", "logit_normal@mean=-2", "--seeds", "0", "--out", "/tmp/a b"])
    path = tmp_path / "r.json"
    write_results(path, "finetune_target", {"race": "tf-ft16-x0.25"}, started=time.time() - 2.0)
    got = json.loads(path.read_text())
    assert got["command"] == "python -m benchmarks.finetune_target --best logit_normal@mean=-2 --seeds 0 --out '/tmp/a b'"
    assert got["code"] == code_version() and got["race"] == "tf-ft16-x0.25"
    assert 2.0 <= got["machine"]["wall_s"] < 60.0
