"""π's moves (METHOD.md §6.1, "settled"): each change of π is recorded with its optimizer step and its total
variation from the π before it, kept through checkpoints and stored schedules, and ``infonoise recommend`` warns on
a stored π whose last three changes moved it by more than 0.05 in all."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from diffusers import EDMEulerScheduler

from diffusers_infonoise import make_sampler
from diffusers_infonoise.diagnostics.recommend import MAX_SETTLED_MOVE, SETTLED_MOVES, pi_still_moving
from diffusers_infonoise.diagnostics.trainers import recommend_fixed_density
from diffusers_infonoise.sampler.adaptive import PI_MOVES_KEPT
from diffusers_infonoise.schedule_io import ScheduleError, load_sampler_state, read_schedule, save_sampler_state, validate_payload


def _gaussian_x0_error(sigmas: torch.Tensor, s_d: float = 0.5) -> torch.Tensor:
    """The Bayes-optimal x0 error of Gaussian data of std ``s_d`` (by hand): σ²s²/(σ² + s²)."""
    sig = sigmas.double()
    return sig**2 * s_d**2 / (sig**2 + s_d**2)


def _edm_lognormal_masses(edges: torch.Tensor) -> torch.Tensor:
    """EDM's log-normal N(−1.2, 1.2²) in ln σ (InfoNoise's base on the EDM path) integrated over each bin, by the
    normal CDF, renormalised on the grid."""
    cdf = torch.tensor([0.5 * (1 + math.erf((float(e) + 1.2) / (1.2 * math.sqrt(2)))) for e in edges], dtype=torch.float64)
    m = cdf.diff()
    return m / m.sum()


def _sampler(**kw):
    return make_sampler("infonoise", EDMEulerScheduler(), prediction_type="sample", num_bins=16, warmup_steps=2, refresh_every=1, **kw)


def _train(sampler, steps: int, seed: int = 0):
    """``steps`` optimizer steps on Gaussian data's exact x0 errors (π moves with the draws' noise), π snapshotted
    before each step."""
    gen = torch.Generator().manual_seed(seed)
    before = []
    for _ in range(steps):
        before.append(None if sampler.probs is None else sampler.probs.clone())
        levels = sampler.sample(2048, generator=gen)
        sampler.update(levels, _gaussian_x0_error(levels.sigmas))
        sampler.step()
    return before


def test_each_change_of_pi_is_recorded_with_its_step_and_total_variation():
    s = _sampler()
    before = _train(s, 5)
    # the warm-up ends at step 2: π leaves the base there (TV from EDM's log-normal, integrated by hand), then moves
    # at every refresh (steps 3, 4, 5) by TV from the π before it
    assert s.pi_moves["steps"] == [2, 3, 4, 5]
    base = _edm_lognormal_masses(s.estimator.edges)
    assert torch.allclose(s.base_masses, base, atol=1e-12)
    after = [*before[2:], s.probs]  # π before step 3, 4, 5 is π after step 2, 3, 4
    expected = [0.5 * float((after[0] - base).abs().sum())]
    expected += [0.5 * float((b - a).abs().sum()) for a, b in zip(after[:-1], after[1:])]
    assert s.pi_moves["tv"] == pytest.approx(expected, abs=1e-12)
    assert 0.05 < expected[0] <= 1 and s.last_refresh["pi_moved"] == pytest.approx(expected[-1], abs=1e-12)


def test_only_the_last_moves_are_kept_and_they_resume_exactly(tmp_path):
    s = _sampler()
    _train(s, PI_MOVES_KEPT + 5)
    assert s.pi_moves["steps"] == list(range(6, PI_MOVES_KEPT + 6))  # the last 8 of the changes at steps 2..13
    save_sampler_state(s, tmp_path / "state")
    r = _sampler()
    assert load_sampler_state(r, tmp_path / "state")
    assert r.pi_moves == s.pi_moves
    _train(r, 2, seed=1)
    _train(s, 2, seed=1)
    assert r.pi_moves == s.pi_moves and torch.equal(r.probs, s.probs)
    # a sampler that never adapted saves and restores an empty history
    fresh = _sampler()
    save_sampler_state(fresh, tmp_path / "fresh")
    back = _sampler()
    assert load_sampler_state(back, tmp_path / "fresh") and back.pi_moves == {"steps": [], "tv": []}


def test_a_stored_schedule_carries_its_moves_and_refuses_corrupt_ones():
    s = _sampler()
    _train(s, 6)
    sched = EDMEulerScheduler()
    s.save_to_scheduler(sched)
    payload = read_schedule(sched)
    assert payload["pi_moves"] == {"steps": s.pi_moves["steps"], "tv": s.pi_moves["tv"]}
    for bad, says in (
        ({"steps": [1, 2], "tv": [0.1]}, "equal length, at most 8; got 2 and 1"),
        ({"steps": list(range(9)), "tv": [0.1] * 9}, "got 9 and 9"),
        ({"steps": [1, 2], "tv": [0.1, 1.5]}, "tv[1] = 1.5: each must be a total variation"),
        ({"steps": [1, 2], "tv": [0.1, 10**400]}, "_infonoise_schedule.pi_moves.tv[1]: an integer of about 401 digits"),
        ({"steps": [3, 2], "tv": [0.1, 0.1]}, "steps[1] = 2 follows 3"),
        ({"steps": [1.5], "tv": [0.1]}, "steps[0] = 1.5: each must be an int >= 0 and at most the run's optimizer steps, 6"),
        ({"steps": [True], "tv": [0.1]}, "steps[0] = True"),
        ({"steps": [7], "tv": [0.1]}, "steps[0] = 7: each must be an int >= 0 and at most the run's optimizer steps, 6"),
        ([0.1, 0.2], "expected an object"),
    ):
        with pytest.raises(ScheduleError) as err:
            validate_payload({**payload, "pi_moves": bad})
        assert says in str(err.value) and str(err.value).startswith(("_infonoise_schedule: pi_moves: ", "_infonoise_schedule.pi_moves")), (
            err.value
        )
    # a checkpoint's state: the same checks, bounded by its own step count; a refused state changes nothing
    state = s.state_dict()
    r = _sampler()
    for moves, says in (
        ({"steps": torch.tensor([1]), "tv": torch.tensor([-0.1], dtype=torch.float64)}, "tv[0] = -0.1"),
        ({"steps": torch.tensor([1000]), "tv": torch.tensor([0.1], dtype=torch.float64)}, "steps[0] = 1000"),
        ({"steps": [1], "tv": [10**400]}, "tv[0] = 1000"),
    ):
        with pytest.raises(ValueError, match=r"state_dict\['pi_moves'\]: " + re.escape(says)):
            r.load_state_dict({**state, "pi_moves": moves})
        assert r.optimizer_step == 0 and r.probs is None and r.pi_moves == {"steps": [], "tv": []}
    # a payload written before the moves were kept: no field, nothing said about them
    old = {k: v for k, v in payload.items() if k != "pi_moves"}
    assert validate_payload(old) is old and pi_still_moving(old) is None


def test_a_start_is_no_move_and_begins_the_history_anew():
    """A run started from a settled stored schedule: loading it sets π before step 1 (no move, an empty history), so
    two refreshes later its own schedule is not judged (fewer than 3 moves), and each refresh's move is small."""
    s = _sampler()
    _train(s, 12)
    sched = EDMEulerScheduler()
    s.save_to_scheduler(sched)
    started = make_sampler("infonoise", sched, prediction_type="sample", num_bins=16, refresh_every=1)
    started.load_schedule(read_schedule(sched))
    assert started.pi_moves == {"steps": [], "tv": []} and "pi_moved" not in started.last_refresh
    _train(started, 2, seed=3)
    assert started.pi_moves["steps"] == [1, 2] and max(started.pi_moves["tv"]) < 0.05
    out = EDMEulerScheduler()
    started.save_to_scheduler(out)
    assert pi_still_moving(read_schedule(out)) is None


def _moving_payload(tvs):
    """A settled-looking stored schedule (3 refreshes, long past its warm-up) whose last changes moved π by ``tvs``."""
    s = _sampler(num_training_steps=4000)
    _train(s, 4)
    sched = EDMEulerScheduler()
    s.save_to_scheduler(sched)
    payload = read_schedule(sched)
    steps = [4000 - 50 * (len(tvs) - 1 - i) for i in range(len(tvs))]
    return {**payload, "optimizer_steps": 4000, "pi_moves": {"steps": steps, "tv": list(tvs)}}


@pytest.mark.parametrize(
    "tvs, warned",
    [
        ((0.3, 0.01, 0.015, 0.02), False),  # the last 3 sum to 0.045: settled, whatever the move before them
        ((0.01, 0.02, 0.02, 0.02), True),  # 0.06
        ((0.04, 0.04), False),  # fewer than 3 recorded: not judged
    ],
)
def test_recommend_warns_in_every_fitted_row_when_the_last_three_moves_exceed_the_threshold(tvs, warned, capsys, tmp_path):
    assert SETTLED_MOVES == 3 and MAX_SETTLED_MOVE == 0.05
    payload = _moving_payload(tvs)
    rec = recommend_fixed_density(payload, EDMEulerScheduler())
    assert rec.refused is None
    rows = [x for r in rec.trainers if "settings" in r for x in r["settings"]]
    assert rows, rec.trainers
    said = [x["warnings"][0] for x in rows if x["warnings"] and x["warnings"][0].startswith("pi was still moving")]
    assert len(said) == (len(rows) if warned else 0)
    if warned:
        assert "0.020 + 0.020 + 0.020 = 0.060" in said[0] and "steps 3900-4000" in said[0]
    # the defaults carry no such warning: they are the trainer's, not fitted to the moving π
    assert not any(w.startswith("pi was still moving") for r in rec.trainers if "default" in r for w in r["default"]["warnings"])
    # the command says it once before the fits, and on each fitted family's line
    from helpers.cli import run

    (tmp_path / "s.json").write_text(json.dumps(payload))
    rc, out, err = run(capsys, "recommend", tmp_path / "s.json")
    assert rc == 0, err
    families = [ln for ln in out.splitlines() if ln.startswith("  ") and " n_eff " in ln and "--" not in ln]
    assert families and all(ln.endswith("| warning: pi was still moving (above)") == warned for ln in families), families
    assert ("warning: pi was still moving: its last 3 refreshes" in out) == warned


@pytest.mark.parametrize(
    "tvs, says", [((0.3, 0.01, 0.015, 0.02), "settled"), ((0.01, 0.02, 0.02, 0.02), "still moving"), ((0.04,), "not judged")]
)
def test_show_lists_the_moves_and_says_whether_pi_settled(capsys, tmp_path, tvs, says):
    from helpers.cli import run

    sched = EDMEulerScheduler()
    sched.register_to_config(_infonoise_schedule=_moving_payload(tvs))
    sched.save_pretrained(tmp_path)
    rc, out, err = run(capsys, "show", tmp_path)
    assert rc == 0, err
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("pi moved")]
    assert f"TV {tvs[0]:.3f} at step {4000 - 50 * (len(tvs) - 1)}" in line and says in line, line


def test_the_first_refresh_of_a_run_on_its_base_is_not_counted_as_a_move_toward_settling(capsys, tmp_path):
    """A run on its base density: its first refresh turns the warm-up's samples into π (TV 0.33 here), which says
    nothing of settling. After 3 refreshes only 2 changes tell (too few: a warning that says so, not "still moving");
    after 4, the last 3 after the first (each < 0.001 on Gaussian data's exact errors) say settled."""
    from helpers.cli import run

    def saved(steps):
        s = _sampler(num_training_steps=4000)
        _train(s, steps)
        sched = EDMEulerScheduler()
        s.save_to_scheduler(sched)
        return s, read_schedule(sched)

    s, three = saved(4)  # warm-up 2: refreshes at steps 2, 3, 4
    assert s.num_updates == 3 and three["pi_moves"]["tv"][0] > 0.3 and sum(three["pi_moves"]["tv"][1:]) < 0.002
    said = pi_still_moving(three)
    assert said.startswith("pi moved too few times to tell whether it settled: 2 change(s) after its first refresh"), said
    (tmp_path / "three.json").write_text(json.dumps(three))
    rc, out, err = run(capsys, "recommend", tmp_path / "three.json")
    assert rc == 0, err
    families = [ln for ln in out.splitlines() if ln.startswith("  ") and " n_eff " in ln and "--" not in ln]
    assert families and all(ln.endswith("| warning: pi moved too few times to tell whether it settled (above)") for ln in families)
    assert "still moving" not in out
    _, four = saved(5)
    assert len(four["pi_moves"]["tv"]) == 4 and pi_still_moving(four) is None
    sched = EDMEulerScheduler()
    sched.register_to_config(_infonoise_schedule=three)
    sched.save_pretrained(tmp_path / "show")
    rc, out, err = run(capsys, "show", tmp_path / "show")
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("pi moved")]
    assert "the first, from the base density, not counted" in line and "too few to tell" in line, line
