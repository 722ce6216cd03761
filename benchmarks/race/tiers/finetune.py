"""The fine-tuning tier (issue 22): MNIST 16x16 pretrains fine-tuned onto shifted data, and from-scratch runs whose
InfoNoise starts from a received schedule."""

from __future__ import annotations

from benchmarks.race.races import Race, seed_lists
from benchmarks.race.tier import Tier


def finetune_races() -> list[Race]:
    """Issue 22: fine-tune MNIST 16x16 pretrains onto shifted data (binarized MNIST 16x16, the 8x8 digits at 16x16,
    binarized and continuous), 400 steps evaluated at 100, 200 and 400. InfoNoise as the library runs it by default
    (``infonoise``: ``auto``, which is ``profile`` for a pretrained model without a stored schedule), from its base
    (``infonoise-init_base``, the warm-up), and from the InfoNoise pretrain's stored schedule
    (``infonoise-init_stored``), against the pretrain's own density and logit-normal. Every run starts from the
    same fixed-density pretrain; the fine-tune's learning rate is a third of the pretrain's. On binarized MNIST,
    ``infonoise-ema_decay_0.5``: the profile start with a faster EMA of m̂, the check of why the profile start lagged
    (its step-0 errors keep 0.9^8 = 0.43 of the weight after the run's 8 refreshes at the default 0.9)."""
    common = dict(steps=400, eval_every=100, eval_steps=(100, 200, 400), learning_rate=3e-4, lr_warmup_steps=20, extra_args=())
    stored = {"infonoise-init_stored": ("--infonoise_schedule_from", "{pretrained:edm-infonoise-mnist16}/scheduler")}
    edm = ("infonoise", "infonoise-init_base", "infonoise-init_stored", "edm_lognormal", "logit_normal")
    fast_ema = ("infonoise-ema_decay_0.5",)
    races = [
        Race(
            f"ft-edm-{d}",
            d,
            "edm",
            edm + (fast_ema if d == "binarized_mnist16" else ()),
            "edm_lognormal",
            seed_lists(edm + fast_ema, 3),
            pretrained="edm-edm_lognormal-mnist16",
            sampler_extra_args=stored,
            **common,
        )
        for d in ("binarized_mnist16", "binarized_digits16", "digits16")
    ]
    ddpm = ("infonoise", "infonoise-init_base", "uniform")
    flow = ("infonoise", "infonoise-init_base", "logit_normal")
    races += [
        Race(
            "ft-ddpm-binarized_mnist16",
            "binarized_mnist16",
            "ddpm",
            ddpm,
            "uniform",
            seed_lists(ddpm, 2),
            pretrained="ddpm-uniform-mnist16",
            **common,
        ),
        Race(
            "ft-flow-binarized_mnist16",
            "binarized_mnist16",
            "flow",
            flow,
            "logit_normal",
            seed_lists(flow, 2),
            pretrained="flow-logit_normal-mnist16",
            **common,
        ),
    ]
    # Transfer: from-scratch runs whose InfoNoise starts from a received schedule (no warm-up) against the default
    # warm-up, with logit-normal as the fixed reference: another seed's 600-step run of the same race, and the
    # 8x8 binarized digits' schedule in a 16x16 run of the same digits
    received = ("infonoise", "infonoise-init_stored", "logit_normal")
    scratch = dict(eval_every=150, extra_args=())
    races += [
        Race("tr-edm-binarized_mnist16", "binarized_mnist16", "edm", received, "logit_normal", seed_lists(received, 3), steps=600,
             sampler_extra_args={"infonoise-init_stored": ("--infonoise_schedule_from",
                                                           "{pretrained:edm-infonoise-binarized_mnist16-s1}")}, **scratch),
        Race("tr8-edm-binarized_digits16", "binarized_digits16", "edm", received, "logit_normal", seed_lists(received, 2), steps=600,
             sampler_extra_args={"infonoise-init_stored": ("--infonoise_schedule_from",
                                                           "{pretrained:edm-infonoise-binarized_digits-s1}")},
             **{**scratch, "eval_every": 200}),
    ]  # fmt: skip
    return races


TIERS = [Tier("finetune", finetune_races)]
