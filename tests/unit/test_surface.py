"""The sampler's public surface stays small, a stored schedule is read without a training sampler, and the stored
format (schedule_io) does not depend on the sampler package."""

from __future__ import annotations

import ast
import json
import warnings
from pathlib import Path

import diffusers
import pytest
import torch
from diffusers import DDPMScheduler, EDMEulerScheduler

import diffusers_infonoise
from diffusers_infonoise import InfoNoiseTrainingTimestepSampler, ScheduleError, write_schedule
from diffusers_infonoise.inference_grid import infogrid
from diffusers_infonoise.schedule_io import CONFIG_KEY, StoredSchedule, read_schedule

DATA = Path(__file__).resolve().parents[1] / "data"


def test_the_sampler_has_at_most_25_public_names():
    public = [n for n in dir(InfoNoiseTrainingTimestepSampler) if not n.startswith("_")]
    assert len(public) <= 25, public
    # what a user and the docs call stays public
    for name in ("from_scheduler", "sample", "add_noise", "update", "step", "save_to_scheduler", "load_schedule", "metrics"):
        assert name in public, name
    for name in ("state_dict", "load_state_dict", "density", "timestep_probabilities", "is_adapted", "prediction_type"):
        assert name in public, name


def _imports(tree: ast.AST) -> list[str]:
    """Every module an AST imports, at any depth (function-local and TYPE_CHECKING imports too), relative ones with
    their leading dots."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            out += [module] if node.module else [module + alias.name for alias in node.names]
    return out


def test_schedule_io_imports_nothing_from_the_sampler_package():
    source = Path(diffusers_infonoise.__file__).parent / "schedule_io.py"
    imported = _imports(ast.parse(source.read_text()))
    assert imported, "no imports found: the check would pass vacuously"
    sampler = [m for m in imported if m.lstrip(".").split(".")[0] == "sampler" or m.startswith("diffusers_infonoise.sampler")]
    assert sampler == [], sampler


def _stored_cases():
    """Scheduler configs with stored schedules of every kind the tests keep (tests/data), as (name, class, config)."""
    cases = []
    before = json.loads((DATA / "schedules_before_sampler_package.json").read_text())
    for name, case in before.items():
        if not name.startswith("_"):
            cases.append((name, getattr(diffusers, case["config"]["_class_name"]), case["config"]))
    old = json.loads((DATA / "schedules_0_2_0.json").read_text())
    cases += [("0.2.0 " + name, cls, old[name]) for name, cls in (("edm", EDMEulerScheduler), ("ddpm", DDPMScheduler))]
    return cases


@pytest.mark.parametrize("name, cls, config", _stored_cases(), ids=[c[0] for c in _stored_cases()])
def test_the_infogrid_of_a_stored_schedule_builds_no_training_sampler(name, cls, config, monkeypatch):
    """The InfoGrid of a stored schedule reads it (StoredSchedule and the estimate of its m̂), bit for bit the grid of
    the sampler built from it, while any construction of a training sampler raises; π of the view is the sampler's."""
    if read_schedule(cls.from_config(config))["loss_weighting"] == "custom":
        pytest.skip("a custom weighting builds no sampler without a callable")
    sampler = InfoNoiseTrainingTimestepSampler.from_stored(cls.from_config(config))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the capped-m̂ advice
        expected = {d: infogrid(sampler, 8, density=d, fit=True).sigmas for d in ("rho", "q", "q_sigma")}

    def refuse(*args, **kwargs):
        raise AssertionError("a training sampler was built")

    monkeypatch.setattr(InfoNoiseTrainingTimestepSampler, "__init__", refuse)
    with pytest.raises(AssertionError, match="a training sampler was built"):  # the patch holds
        InfoNoiseTrainingTimestepSampler.from_stored(cls.from_config(config))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for density, sigmas in expected.items():
            got = infogrid(cls.from_config(config), 8, density=density, fit=True).sigmas
            assert torch.equal(got, sigmas), (name, density)
    view = StoredSchedule.from_scheduler(cls.from_config(config))
    assert torch.equal(view.pi, sampler.probs), name
    assert torch.equal(view.edges, sampler.estimator.edges), name


def test_a_stored_schedule_view_reads_the_payload_and_refuses_a_config_without_one():
    sched = EDMEulerScheduler()
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, warmup_steps=1, refresh_every=1)
    levels = sampler.sample(4096, generator=torch.Generator().manual_seed(0))
    sampler.update(levels, levels.sigmas.double() ** 2 * 0.25 / (levels.sigmas.double() ** 2 + 0.25))
    sampler.step()
    sampler.save_to_scheduler(sched)
    view = StoredSchedule.from_scheduler(sched)
    assert view.is_adapted and view.num_filled == sampler.estimator.num_filled and view.path == sampler.path.config()
    assert torch.equal(view.pi, sampler.probs)  # bit for bit: the floats the sampler draws from
    assert torch.equal(view.rho_hat, sampler.profile()["rho_hat"])
    assert torch.equal(view.centers, sampler.estimator.centers)
    m = sampler.estimator.m_hat
    assert torch.equal(torch.isnan(view.m_hat), torch.isnan(m)) and torch.equal(view.m_hat[~torch.isnan(m)], m[~torch.isnan(m)])
    with pytest.raises(ValueError, match=f"no '{CONFIG_KEY}' entry"):
        StoredSchedule.from_scheduler(EDMEulerScheduler())
    with pytest.raises(ScheduleError, match="pi must be finite"):
        StoredSchedule.from_payload({**view.payload, "pi": [0.5] * len(view.payload["pi"])})


def test_write_schedule_takes_the_payload():
    sched = DDPMScheduler()
    sampler = InfoNoiseTrainingTimestepSampler.from_scheduler(sched)
    payload = sampler.to_payload()
    assert write_schedule(sched, payload) == payload and read_schedule(sched) == payload
    with pytest.raises(ScheduleError, match="expected a JSON object, got InfoNoiseTrainingTimestepSampler"):
        write_schedule(DDPMScheduler(), sampler)
    with pytest.raises(ValueError, match="corruption path differs"):
        write_schedule(EDMEulerScheduler(), payload)
