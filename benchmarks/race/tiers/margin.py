"""The margin tier (issue 24): why InfoNoise only ties logit-normal on binarized data, at 4x the budget and with a
tempered target."""

from __future__ import annotations

from benchmarks.race.races import Race, seed_lists
from benchmarks.race.tier import Tier


def margin_races() -> list[Race]:
    """Issue 24: why InfoNoise only ties logit-normal on binarized data. The library's defaults throughout (the
    automatic warm-up, a tenth of the run; the former races pinned it). Budget: binarized MNIST 16x16 and DNA at 4x
    the former races' budget (2400 and 3200 steps) with InfoNoise, logit-normal and EDM log-normal, the evaluated
    checkpoints kept for the offline profiles and the re-evaluation (Heun, the InfoGrid; benchmarks/margin_eval.py).
    Width: at the former budget, InfoNoise with a tempered target φ ∝ ρ̂^τ, τ = 0.64 = (0.80/1.00)², the τ that makes
    a Gaussian-like π as wide as logit-normal's (std of ln σ 0.80 vs 1.00, issue 10's measure), against the same-code
    InfoNoise and logit-normal."""
    three = ("infonoise", "logit_normal", "edm_lognormal")
    wide = ("infonoise", "infonoise-temperature_0.64", "logit_normal")
    dna = dict(channels=(32, 64), sample_batch=2000, extra_args=())
    return [
        Race("m4x-edm-binarized_mnist16", "binarized_mnist16", "edm", three, "edm_lognormal", seed_lists(three, 3), steps=2400,
             eval_every=300, eval_steps=(300, 600, 1200, 1800, 2400), extra_args=(), keep_checkpoints=True),
        Race("mw-edm-binarized_mnist16", "binarized_mnist16", "edm", wide, "logit_normal", seed_lists(wide, 3), steps=600,
             eval_every=150, extra_args=()),
        Race("mw-edm-dna64", "dna64", "edm", wide, "logit_normal", seed_lists(wide, 3), steps=800, eval_every=160, **dna),
        Race("m4x-edm-dna64", "dna64", "edm", three, "edm_lognormal", seed_lists(three, 2), steps=3200, eval_every=400,
             eval_steps=(400, 800, 1600, 2400, 3200), keep_checkpoints=True, **dna),
    ]  # fmt: skip


TIERS = [Tier("margin", margin_races)]
