"""benchmarks/cost/attribution.py: the outermost-call times read from a profile's per-caller times."""

from __future__ import annotations

import cProfile
import pstats

import torch
from diffusers import DDPMScheduler

from benchmarks.cost.attribution import _code_key, outermost_seconds, reentries, sampler_functions
from diffusers_infonoise import make_sampler
from diffusers_infonoise.sampler import TrainingTimestepSampler
from diffusers_infonoise.sampler.adaptive import _AdaptiveSampler

A, B, X, H = ("m", 1, "a"), ("m", 2, "b"), ("m", 3, "x"), ("m", 4, "h")


def _entry(callers: dict) -> tuple:
    """A pstats entry (cc, nc, tt, ct, callers) whose totals are the sums over its callers."""
    nc = sum(e[1] for e in callers.values())
    ct = sum(e[3] for e in callers.values())
    return (nc, nc, 0.0, ct, callers)


def test_only_calls_from_outside_the_set_count():
    # X (outside) calls A for 5 s and B for 2 s; A calls B for 3 s of its 5: the outermost time is 5 + 2
    stats = {
        X: (1, 1, 0.0, 7.0, {}),
        A: _entry({X: (1, 1, 2.0, 5.0)}),
        B: _entry({X: (1, 1, 2.0, 2.0), A: (1, 1, 3.0, 3.0)}),
    }
    assert outermost_seconds(stats, {A: "a", B: "b"}) == {"a": 5.0, "b": 2.0}
    assert outermost_seconds(stats, {A: "same", B: "same"}) == {"same": 7.0}
    assert outermost_seconds(stats, {B: "b"}) == {"b": 5.0}  # A outside the set: its call into B is outermost
    assert reentries(stats, {A: "a", B: "b"}) == []


def test_a_call_back_into_the_set_through_an_outside_function_is_flagged():
    # A (in the set) calls H (outside), which calls B (in the set): B's time would count twice
    stats = {
        X: (1, 1, 0.0, 4.0, {}),
        A: _entry({X: (1, 1, 1.0, 4.0)}),
        H: _entry({A: (1, 1, 1.0, 3.0)}),
        B: _entry({H: (1, 1, 2.0, 2.0)}),
    }
    assert outermost_seconds(stats, {A: "a", B: "b"}) == {"a": 4.0, "b": 2.0}
    assert reentries(stats, {A: "a", B: "b"}) == [pstats.func_std_string(H)]


def test_a_super_chain_of_a_real_sampler_counts_once():
    sampler = make_sampler("infonoise", DDPMScheduler(num_train_timesteps=100))
    generator = torch.Generator().manual_seed(0)
    levels = sampler.sample(4, generator=generator)
    x0 = torch.randn(4, 1, 2, 2, generator=generator)

    def training_code():
        for _ in range(3):
            sampler.add_noise(x0, torch.randn_like(x0), levels)  # _AdaptiveSampler's, then super()'s

    profile = cProfile.Profile()
    profile.runcall(training_code)
    stats = pstats.Stats(profile).stats
    outer, base = _code_key(_AdaptiveSampler.add_noise), _code_key(TrainingTimestepSampler.add_noise)
    assert stats[outer][1] == 3 and stats[base][1] == 3 and stats[base][3] > 0  # both ran, three times each
    seconds = outermost_seconds(stats, sampler_functions())
    assert seconds["_AdaptiveSampler.add_noise"] == stats[outer][3]  # the base's time is inside it
    assert seconds["TrainingTimestepSampler.add_noise"] == 0.0
    assert reentries(stats, sampler_functions()) == []
