"""Quality race (issue 6): does InfoNoise reach the baselines' sample quality in fewer training steps?

Each run is ONE call of ``training_scripts/train_unconditional.py``'s ``main(argv)`` (the script is
imported by path and runs in-process in a worker process; no private training loop), with
``--use_ema --checkpointing_steps EVAL_EVERY --logger none``, a small ``UNet2DModel`` config
(``--model_config_name_or_path``), ``--noise_sampler NAME``, ``--diffusion edm`` (EDM
preconditioning and weighting; DDPM-ε and flow races in the full tier) and ``--seed S``. After the
run every ``checkpoint-N/unet_ema`` is sampled with
:func:`diffusers_infonoise.generation.generate_images` and a FIXED inference sampler — EDM:
``EDMEulerScheduler`` (deterministic Euler, Karras σ, ρ = 7, same σ_min/σ_max/σ_data as training),
18 steps (18 NFE); DDPM: ``DDIMScheduler`` η = 0, 18 steps; flow: ``FlowMatchEulerDiscreteScheduler``,
18 steps — 2000+ samples per evaluation with one fixed sampling seed (common random numbers across
runs), and scored against a random held-out split (:mod:`benchmarks.metrics`, :mod:`benchmarks.dna`).
Each run's result JSON is written as soon as it finishes; runs whose JSON exists are skipped
(resume); an interrupted run resumes from its latest checkpoint (``--resume_from_checkpoint latest``).
Checkpoints are deleted once evaluated.

Usage::

    python benchmarks/quality_race.py --tier quick            # ~10-15 min on 2 free cores
    python benchmarks/quality_race.py --tier full --jobs 2    # designed for ~2.5 h, resumable
    python benchmarks/quality_race.py --tier quick --report_only   # re-aggregate existing runs
    python benchmarks/quality_race.py --tier full --plan            # list the runs and the time estimate

Outputs: ``benchmarks/results/quality_race_<tier>.json`` (all runs + summary),
``quality_race_<tier>_curves.png``, ``quality_race_<tier>_pi.png``, ``quality_race_<tier>.md``; the
per-run JSONs, logs and model folders under ``benchmarks/results/quality_race_<tier>/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import dna as DNA  # noqa: E402
from benchmarks import metrics as M  # noqa: E402
from diffusers_infonoise.data import decode_sequences  # noqa: E402

SCRIPT = REPO / "training_scripts" / "train_unconditional.py"
RESULTS = HERE / "results"
ALL_SAMPLERS = ("infonoise", "edm_lognormal", "logit_normal", "uniform", "log_uniform", "cosine", "kingma_gao")
NUM_INFERENCE_STEPS = 18
EVAL_SEED = 1234
JITTER_SEEDS = (1, 2, 3)


# ----------------------------------------------------------------------------------------------
# data sets
# ----------------------------------------------------------------------------------------------

@dataclass
class DataSpec:
    name: str
    kind: str  # "image" or "dna"
    resolution: int
    binary: bool
    feature_dim: int = 32
    classifier_epochs: int = 30
    note: str = ""


DATASETS = {
    "digits": DataSpec("digits", "image", 8, False, 32, 60,
                       "sklearn digits 8x8 (17 grey levels), library split 1438 train / 359 held-out (fixed random permutation)"),
    "binarized_digits": DataSpec("binarized_digits", "image", 8, True, 32, 60,
                                 "digits thresholded at 8/16, same split"),
    "mnist16": DataSpec("mnist16", "image", 16, False, 64, 3,
                        "MNIST resized to 16x16 (PIL bilinear), 60000 train; held-out: a random 5000 of the 10000 test images"),
    "binarized_mnist16": DataSpec("binarized_mnist16", "image", 16, True, 64, 3,
                                  "MNIST resized to 16x16 then stochastically binarized (rng 0), same split"),
    "dna64": DataSpec("dna64", "dna", 64, True, note="dm3 upstream2000, last 64 bases before the TSS, unique ACGT crops; "
                      "held-out: a random 4000; one-hot (4 x 64) in {-1, 1}, UNet1DModel (--sequence_column)"),
    # gpu tier (not run here)
    "mnist": DataSpec("mnist", "image", 28, False, 64, 3, "MNIST 28x28"),
    "binarized_mnist": DataSpec("binarized_mnist", "image", 28, True, 64, 3, "library binarized MNIST 28x28"),
    "fashion_mnist": DataSpec("fashion_mnist", "image", 28, False, 64, 3, "Fashion-MNIST 28x28"),
}

_DATA_CACHE: dict = {}


def _resize(images: np.ndarray, side: int) -> np.ndarray:
    from PIL import Image

    return np.stack([np.asarray(Image.fromarray(im).resize((side, side), Image.BILINEAR)) for im in images])


def load_data(name: str) -> dict:
    """Real data of a data set: ``train``/``heldout`` uint8 images (N, H, W) and labels (images),
    or sequences (DNA); ``script_args``: how the training script gets the training split."""
    if name in _DATA_CACHE:
        return _DATA_CACHE[name]
    from diffusers_infonoise.data import load_builtin_arrays

    spec = DATASETS[name]
    out: dict = {"spec": spec}
    if name in ("digits", "binarized_digits", "mnist", "binarized_mnist", "fashion_mnist"):
        tr, ytr = load_builtin_arrays(name, "train")
        te, yte = load_builtin_arrays(name, "test")
        if name not in ("digits", "binarized_digits"):
            idx = np.random.default_rng(0).permutation(len(te))[:5000]
            te, yte = te[idx], yte[idx]
        out.update(train=tr, train_labels=ytr, heldout=te, heldout_labels=yte,
                   script_args=["--dataset_name", name, "--resolution", str(spec.resolution)])
    elif name in ("mnist16", "binarized_mnist16"):
        tr, ytr = load_builtin_arrays("mnist", "train")
        te, yte = load_builtin_arrays("mnist", "test")
        tr, te = _resize(tr, 16), _resize(te, 16)
        if spec.binary:
            rng = np.random.default_rng(0)
            allx = np.concatenate([tr, te])
            allx = np.where(rng.random(allx.shape, dtype=np.float32) < allx / np.float32(255.0), 255, 0).astype(np.uint8)
            tr, te = allx[: len(tr)], allx[len(tr):]
        idx = np.random.default_rng(0).permutation(len(te))[:5000]
        te, yte = te[idx], yte[idx]
        path = M.ensure_cache_dir("data") / f"{name}_train"
        if not (path / "dataset_info.json").exists():
            DNA.save_image_dataset(tr, path)
        out.update(train=tr, train_labels=ytr, heldout=te, heldout_labels=yte,
                   script_args=["--dataset_name", str(path), "--resolution", "16"])
    elif name == "dna64":
        seqs = DNA.load_sequences(64)
        tr, ho = DNA.split_sequences(seqs, 4000, seed=0)
        path = M.ensure_cache_dir("data") / "dna64_sequences_train"
        if not (path / "dataset_info.json").exists():
            DNA.save_sequence_dataset(tr, path)
        out.update(train=tr, heldout=ho, script_args=["--dataset_name", str(path), "--sequence_column", "sequence"])
    else:
        raise ValueError(f"unknown data set {name!r}")
    _DATA_CACHE[name] = out
    return out


class Scorer:
    """Scores generated samples (N, 1, H, W) in [0, 1] of one data set against its held-out split."""

    def __init__(self, name: str):
        self.data = load_data(name)
        self.spec: DataSpec = self.data["spec"]
        if self.spec.kind == "image":
            self.net, self.classifier_info = M.classifier_for(
                name, self.data["train"], self.data["train_labels"], self.data["heldout"], self.data["heldout_labels"],
                feature_dim=self.spec.feature_dim, epochs=self.spec.classifier_epochs)
            self.ref = M.extract_features(self.net, M.to_unit_tensor(self.data["heldout"]))

    @property
    def primary(self) -> str:
        if self.spec.kind == "dna":
            return "js"
        return "fd_thresholded" if self.spec.binary else "fd"

    def score(self, images) -> dict:
        import torch

        images = torch.as_tensor(images, dtype=torch.float32)
        if self.spec.kind == "dna":
            return DNA.kmer_metrics(decode_sequences(images, DNA.ALPHABET), self.data["heldout"])
        out = {"fd": M.frechet_distance_features(M.extract_features(self.net, images), self.ref)}
        if self.spec.binary:
            hard = (images > 0.5).float()
            out["fd_thresholded"] = M.frechet_distance_features(M.extract_features(self.net, hard), self.ref)
            out["frac_grey_pixels"] = float(((images > 0.1) & (images < 0.9)).float().mean())
        out["mean_pixel"] = float(images.mean())
        return out

    def floors(self) -> dict:
        """Real-vs-real floors: the whole training split vs held-out; a random training subset of the
        held-out size vs held-out; two disjoint random held-out halves."""

        rng = np.random.default_rng(0)
        tr, ho = self.data["train"], self.data["heldout"]
        n_ho = len(ho)
        sub = [tr[i] for i in rng.permutation(len(tr))[:min(n_ho, len(tr))]] if self.spec.kind == "dna" else \
            tr[rng.permutation(len(tr))[:n_ho]]
        perm = rng.permutation(n_ho)
        half_a, half_b = perm[: n_ho // 2], perm[n_ho // 2:]
        if self.spec.kind == "dna":
            gen_n = 2000
            sub2k = [tr[i] for i in rng.permutation(len(tr))[:gen_n]]
            return {
                "train2000_vs_heldout": DNA.kmer_metrics(sub2k, ho),
                "heldout_half_vs_half": DNA.kmer_metrics([ho[i] for i in half_a], [ho[i] for i in half_b]),
                "sizes": {"train_subset": gen_n, "heldout": n_ho, "halves": [len(half_a), len(half_b)]},
            }
        feat = lambda x: M.extract_features(self.net, M.to_unit_tensor(x))  # noqa: E731
        f_tr, f_sub = feat(tr), feat(sub)
        return {
            "train_vs_heldout": M.frechet_distance_features(f_tr, self.ref),
            "train_subset_vs_heldout": M.frechet_distance_features(f_sub, self.ref),
            "heldout_half_vs_half": M.frechet_distance_features(self.ref[half_a], self.ref[half_b]),
            "sizes": {"train": len(tr), "train_subset": len(sub), "heldout": n_ho, "halves": [len(half_a), len(half_b)]},
        }


# ----------------------------------------------------------------------------------------------
# races and tiers
# ----------------------------------------------------------------------------------------------

def unet_config(resolution: int, channels: tuple, kind: str = "image") -> dict:
    """The race's denoiser: a ``UNet2DModel`` (images) or a ``UNet1DModel`` (one-hot DNA, length
    ``resolution``) of temporal-ResNet blocks, which take the noise level in every block."""
    levels = len(channels)
    if kind == "dna":
        return {
            "_class_name": "UNet1DModel", "sample_size": resolution, "in_channels": 4, "out_channels": 4,
            "extra_in_channels": 0, "time_embedding_type": "positional", "use_timestep_embedding": True,
            "flip_sin_to_cos": False, "freq_shift": 1, "block_out_channels": list(channels),
            "down_block_types": ["DownResnetBlock1D"] * levels, "up_block_types": ["UpResnetBlock1D"] * (levels - 1),
            "mid_block_type": "MidResTemporalBlock1D", "out_block_type": "OutConv1DBlock", "act_fn": "mish",
            "norm_num_groups": 8, "layers_per_block": 1,
        }
    return {
        "_class_name": "UNet2DModel", "sample_size": resolution, "in_channels": 1, "out_channels": 1,
        "layers_per_block": 1, "block_out_channels": list(channels), "norm_num_groups": 8,
        "down_block_types": ["DownBlock2D"] * levels, "up_block_types": ["UpBlock2D"] * levels,
    }


@dataclass
class Race:
    name: str
    dataset: str
    diffusion: str  # edm, ddpm, flow
    samplers: tuple
    baseline: str
    seeds: dict  # sampler -> list of seeds
    steps: int
    eval_every: int
    channels: tuple = (16, 32)
    batch_size: int = 64
    learning_rate: float = 1e-3
    lr_warmup_steps: int = 100
    num_samples: int = 2000
    sample_batch: int = 1000
    extra_args: tuple = ("--infonoise_warmup_steps", "200")


def _seeds(samplers, n, more=None):
    more = more or {}
    return {s: list(range(more.get(s, n))) for s in samplers}


def tier_races(tier: str) -> list[Race]:
    if tier == "quick":
        samplers = ("infonoise", "edm_lognormal")
        return [Race(f"edm-{d}", d, "edm", samplers, "edm_lognormal", _seeds(samplers, 2), steps=800, eval_every=100,
                     sample_batch=2000) for d in ("digits", "binarized_digits")]
    if tier == "full":
        # Sized for ~2 h on 2 free cores (issue 6). A 16x16 evaluation (2000 samples x 18 steps) costs ~45 s
        # and a 16x16 step ~0.2 s on one core, so the 16x16 MNIST races run the pair the issue singles out
        # (infonoise vs edm_lognormal; 5 seeds on binarized MNIST) and every sampler runs on the 8x8 races.
        # The 8x8 EDM races use the quick tier's settings, so its finished runs are reused (--reuse quick).
        # Listed in priority order: runs start race by race.
        pair = ("infonoise", "edm_lognormal")
        five = {"infonoise": 5, "edm_lognormal": 5}
        small = dict(steps=800, eval_every=100, sample_batch=2000)
        mid = dict(steps=600, eval_every=120, extra_args=("--infonoise_warmup_steps", "150"))
        races = [Race("edm-binarized_mnist16", "binarized_mnist16", "edm", pair, "edm_lognormal", _seeds(pair, 5), **mid)]
        races += [Race(f"edm-{d}", d, "edm", ALL_SAMPLERS, "edm_lognormal", _seeds(ALL_SAMPLERS, 3), **small)
                  for d in ("binarized_digits", "digits")]
        # DDPM race + InfoNoise with its m̂ capped at the data variance (the diagnosis of its loss there:
        # the ε-model's x0-space error exceeds the data variance ~1000x at high noise)
        ddpm = ("infonoise", "uniform", "infonoise-mmse_cap_auto")
        races += [Race("ddpm-binarized_digits", "binarized_digits", "ddpm", ddpm, "uniform", _seeds(ddpm, 3), **small),
                  Race("flow-digits", "digits", "flow", ("infonoise", "logit_normal"), "logit_normal",
                       _seeds(("infonoise", "logit_normal"), 3), **small),
                  Race("edm-mnist16", "mnist16", "edm", pair, "edm_lognormal", _seeds(pair, 2), **mid)]
        # DNA: one-hot 4 x 64 through UNet1DModel (--sequence_column); 5 seeds for the pair, 2 for the other
        # samplers (a 2000-sample evaluation of the 1-D UNet costs ~20 s)
        races.insert(1, Race("edm-dna64", "dna64", "edm", ALL_SAMPLERS, "edm_lognormal", _seeds(ALL_SAMPLERS, 2, five),
                             steps=800, eval_every=160, channels=(32, 64), sample_batch=2000,
                             extra_args=("--infonoise_warmup_steps", "200")))
        return races
    if tier == "gate":
        # Gate study: the quick tier's races (InfoNoise lost on continuous digits), same settings, plus
        # InfoNoise with the gate off and pinned lower. Sampler "infonoise-gate_X" = --infonoise_gate X.
        samplers = ("infonoise", "edm_lognormal", "infonoise-gate_none", "infonoise-gate_0.05")
        return [Race(f"edm-{d}", d, "edm", samplers, "edm_lognormal", _seeds(samplers, 2), steps=800,
                     eval_every=100, sample_batch=2000) for d in ("digits", "binarized_digits")]
    if tier == "recheck":
        # Issue 10: the corrected method (φ-space floor, carry-over, value-grid gate) on the quick tier's
        # races against EDM log-normal and logit-normal (the best fixed density found so far); the former
        # hybrid (π-space floor) as its own sampler on binarized digits. Sized for ~45 min on 2 cores:
        # 2 seeds, an evaluation every 160 steps.
        # A later session added the library's default warm-up (a tenth of the run, 80 steps; the races pin 200).
        both = ("infonoise", "edm_lognormal", "logit_normal")
        auto = ("infonoise-warmup_steps_auto",)
        return [Race("edm-binarized_digits", "binarized_digits", "edm", both + ("infonoise-floor_space_pi",) + auto,
                     "edm_lognormal", _seeds(both + ("infonoise-floor_space_pi",) + auto, 2), steps=800, eval_every=160,
                     sample_batch=2000),
                Race("edm-digits", "digits", "edm", both + auto, "edm_lognormal", _seeds(both + auto, 2), steps=800,
                     eval_every=160, sample_batch=2000)]
    if tier == "recheck_full":
        # Issue 10's re-measure of the full tier with the corrected method, cut to this session's ~100 min
        # of 2 cores (a 16x16 run costs ~10 min of a core next to other jobs): binarized MNIST 16x16 with 3
        # seeds of InfoNoise, EDM log-normal and logit-normal (the best fixed density so far), DNA with 5;
        # continuous MNIST 16x16 (never run before) with 1; the gate rules as their own samplers on DNA
        # (1 seed). Seeds 3 and 4 on binarized MNIST were added by a later session (the 5); the
        # π-floor variant there is left for a later run. Sizes as the former full tier (600 steps at 16x16,
        # 800 on DNA), 4 evaluations at 16x16.
        # A later session added the study of the method's settings on binarized MNIST 16x16 (2 seeds each; 1
        # for the profile gate, which applied no gate on DNA): the library's default warm-up (a tenth of the
        # run, 60 steps, where the races pin 150), logit-normal as the warm-up and floor base, twice as many
        # refreshes, a faster EMA, the former π-space floor, no gate, a larger floor, more smoothing; seeds 1-2
        # on continuous MNIST 16x16 with the gate rules that differ from `auto` (none) there; the π-space
        # floor on DNA (2 seeds).
        three = ("infonoise", "edm_lognormal", "logit_normal")
        gates = ("infonoise-gate_none", "infonoise-gate_profile")
        # "infonoise-warmup_steps_150" is InfoNoise as the race runs it (the race pins 150), rerun on the code
        # of the study: s0-s2 of the other samplers ran before the sampler owned its random stream (issue 13),
        # so this is the study's same-code control, and a measure of how much a seed's draws alone move a run.
        study = ("infonoise-warmup_steps_150", "infonoise-warmup_steps_auto", "infonoise-base=logit_normal", "infonoise-refresh_every_25",
                 "infonoise-ema_decay_0.5", "infonoise-floor_space_pi", "infonoise-gate_none",
                 # wider π (the adapted π is narrower than logit-normal's at the noisy end): a larger floor,
                 # three times the smoothing
                 "infonoise-floor_0.15", "infonoise-smoothing_3")
        mid = dict(steps=600, eval_every=150, extra_args=("--infonoise_warmup_steps", "150"))
        dna = dict(steps=800, eval_every=160, channels=(32, 64), sample_batch=2000,
                   extra_args=("--infonoise_warmup_steps", "200"))
        bin16 = three + study + ("infonoise-gate_profile",)
        # the other samplers on DNA (the former full tier ran them there): Kingma & Gao's adaptive density
        # shares the floor and carry-over InfoNoise got in issue 10; the fixed densities are unchanged by it
        others = ("kingma_gao", "uniform", "log_uniform", "cosine")
        dna_samplers = three + gates + ("infonoise-floor_space_pi", "infonoise-warmup_steps_auto",
                                         "infonoise-ema_decay_0.5") + others
        cont16 = three + ("infonoise-gate_0.2", "infonoise-gate_profile", "infonoise-warmup_steps_auto")
        return [Race("edm-binarized_mnist16", "binarized_mnist16", "edm", bin16, "edm_lognormal",
                     _seeds(bin16, 2, {**{s: 5 for s in three}, "infonoise-gate_profile": 1,
                                       # the faster adaptation led on seed 0, the library's default warm-up
                                       # on seeds 0-1: all 5 seeds
                                       "infonoise-refresh_every_25": 5, "infonoise-ema_decay_0.5": 5,
                                       "infonoise-warmup_steps_auto": 5}), **mid),
                Race("edm-dna64", "dna64", "edm", dna_samplers, "edm_lognormal",
                     _seeds(dna_samplers, 1, {**{s: 5 for s in three}, "infonoise-floor_space_pi": 2, "kingma_gao": 2,
                                                    "infonoise-warmup_steps_auto": 5, "infonoise-ema_decay_0.5": 2}),
                     **dna),
                Race("edm-mnist16", "mnist16", "edm", cont16, "edm_lognormal",
                     _seeds(cont16, 1, {**{s: 3 for s in three}, "infonoise-warmup_steps_auto": 3}), **mid)]
    if tier == "recheck_paths":
        # Issue 10's re-measure of the other two paths, as in the former full tier: DDPM-ε (the m̂ cap now
        # on by default in the library) and flow, 3 seeds.
        small = dict(steps=800, eval_every=100, sample_batch=2000)
        return [Race("ddpm-binarized_digits", "binarized_digits", "ddpm", ("infonoise", "uniform"), "uniform",
                     _seeds(("infonoise", "uniform"), 3), **small),
                Race("flow-digits", "digits", "flow", ("infonoise", "logit_normal"), "logit_normal",
                     _seeds(("infonoise", "logit_normal"), 3), **small)]
    if tier == "gpu":
        races = []
        for d in ("mnist", "binarized_mnist", "fashion_mnist"):
            races.append(Race(f"edm-{d}", d, "edm", ALL_SAMPLERS, "edm_lognormal", _seeds(ALL_SAMPLERS, 3), steps=20000,
                              eval_every=2000, channels=(32, 64, 128), batch_size=128, learning_rate=5e-4,
                              num_samples=10000, sample_batch=2500, extra_args=("--infonoise_warmup_steps", "1000")))
        return races
    raise ValueError(f"unknown tier {tier!r}")


#: What a tier leaves out of the issue's specification to fit its time budget (recorded in the results).
TIER_SIZING = {
    "recheck_full": "cut to ~100 min on 2 shared cores, then seeds 3-4 added: 5 seeds of infonoise/edm_lognormal/"
                    "logit_normal on binarized MNIST 16x16, 5 on DNA, 1 on MNIST 16x16, 1 seed of each gate rule on "
                    "DNA; 4 evaluations at 16x16; then a settings study (2 seeds of 9 variants, a same-code control "
                    "among them, and 1 of the profile gate on binarized MNIST 16x16), seeds 1-2 and 1 seed of two gate "
                    "rules on MNIST 16x16, 2 seeds of the π-space floor on DNA, 2 seeds of kingma_gao and 1 of each "
                    "other fixed density on DNA, 5 seeds of the default warm-up (a tenth of the run) on binarized MNIST "
                    "16x16 and DNA, 3 on MNIST 16x16, and 2 of EMA 0.5 on DNA; the other samplers on the 8x8 races are left to the "
                    "former full tier",
    "full": "sized for ~2 h on 2 cores: every sampler on digits and binarized digits (8x8, 3 seeds) and DNA (2 seeds, "
            "5 for infonoise/edm_lognormal); on 16x16 MNIST and binarized MNIST only infonoise vs edm_lognormal "
            "(a 2000-sample evaluation at 16x16 costs ~45 s per core), 600 steps; MNIST 16x16 runs last and may be "
            "cut; Inception-v3 FID only for final models (benchmarks/inception_fid.py, ~0.25 s per image per core)",
}

#: The order runs start in, as (race, which runs): "pair" = InfoNoise and the race's baseline,
#: "others" = the other samplers, "main" = InfoNoise, EDM log-normal and logit-normal, "variants" =
#: InfoNoise's variants, "rest" = the samplers neither main nor a variant, "all". The full tier puts the issue's central question first
#: (binarized MNIST and DNA, InfoNoise vs EDM log-normal), then the other paths, then every sampler.
TIER_PRIORITY = {
    "recheck_full": [("edm-binarized_mnist16", "main"), ("edm-dna64", "main"), ("edm-binarized_mnist16", "variants"),
                     ("edm-mnist16", "main"), ("edm-dna64", "variants"), ("edm-mnist16", "variants"),
                     ("edm-dna64", "rest")],
    "full": [("edm-binarized_mnist16", "all"), ("edm-dna64", "pair"), ("ddpm-binarized_digits", "all"),
             ("flow-digits", "all"), ("edm-binarized_digits", "all"), ("edm-dna64", "others"), ("edm-digits", "all"),
             ("edm-mnist16", "all")],
}


def run_priority(tier: str, spec) -> int:
    """Rank of a run in ``TIER_PRIORITY[tier]`` (the race order of the tier when it has none)."""
    rules = TIER_PRIORITY.get(tier)
    names = [r.name for r in tier_races(tier)]
    if not rules:
        return names.index(spec.race.name) if spec.race.name in names else len(names)
    pair = spec.sampler in ("infonoise", spec.race.baseline)
    variant = "-" in spec.sampler  # "infonoise-<flag>_<value>"
    for i, (race, which) in enumerate(rules):
        if race != spec.race.name:
            continue
        main = spec.sampler in ("infonoise", "edm_lognormal", "logit_normal")
        if which == "all" or (which in ("pair", "others") and (which == "pair") == pair) \
                or (which == "main" and main) or (which == "variants" and variant) \
                or (which == "rest" and not main and not variant):
            return i
    return len(rules)


@dataclass
class RunSpec:
    tier: str
    race: Race
    sampler: str
    seed: int
    root: str
    threads: int = 1
    schedule_plots: bool = False
    jitter: bool = False

    @property
    def run_id(self) -> str:
        return f"{self.race.name}__{self.sampler}__s{self.seed}"

    @property
    def out_dir(self) -> Path:
        return Path(self.root) / "runs" / self.run_id

    @property
    def result_path(self) -> Path:
        return Path(self.root) / "runs" / f"{self.run_id}.json"

    def argv(self) -> list[str]:
        r = self.race
        data = load_data(r.dataset)
        cfg = self.out_dir.parent / f"unet_{r.name}.json"
        # variants "infonoise-<flag>_<value>": --infonoise_<flag> <value>, e.g. infonoise-gate_none, infonoise-mmse_cap_auto
        name, *options = self.sampler.split("-")
        a = list(data["script_args"]) + [
            "--model_config_name_or_path", str(cfg), "--diffusion", r.diffusion, "--noise_sampler", name,
            "--seed", str(self.seed), "--train_batch_size", str(r.batch_size), "--max_train_steps", str(r.steps),
            "--learning_rate", str(r.learning_rate), "--lr_scheduler", "constant_with_warmup",
            "--lr_warmup_steps", str(r.lr_warmup_steps), "--checkpointing_steps", str(r.eval_every), "--use_ema",
            "--logger", "none", "--output_dir", str(self.out_dir), "--save_images_epochs", "1000000000",
            "--save_model_epochs", "1000000000", "--eval_batch_size", "16",
            # the per-refresh figures cost seconds per run on 2 cores; the logged scalars and checks stay
            "--schedule_plot_steps", "0" if self.schedule_plots else "-1",
        ]
        if name in ("infonoise", "kingma_gao"):
            a += list(r.extra_args)
        return a + variant_args(options)


def variant_args(options: list[str]) -> list[str]:
    """The flags of a variant sampler ``infonoise-<option>-<option>...``: ``<flag>_<value>`` gives
    ``--infonoise_<flag> <value>`` (``gate_none``, ``warmup_steps_auto``); ``<flag>=<value>`` is for
    values with an underscore (``base=logit_normal``)."""
    out = []
    for option in options:
        flag, sep, value = option.partition("=")
        if not sep:
            flag, _, value = option.rpartition("_")
        if not flag or not value:
            raise ValueError(f"variant option {option!r}: expected <flag>_<value> or <flag>=<value>")
        out += [f"--infonoise_{flag}", value]
    return out


def eval_scheduler(race: Race):
    from diffusers import DDIMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

    if race.diffusion == "edm":
        return EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5, prediction_type="epsilon")
    if race.diffusion == "ddpm":
        return DDIMScheduler(num_train_timesteps=1000, beta_schedule="linear", prediction_type="epsilon",
                             timestep_spacing="trailing")
    return FlowMatchEulerDiscreteScheduler(shift=1.0)


def sample(unet, race: Race, seed: int, n: int | None = None):
    import torch

    from diffusers_infonoise.generation import generate_images

    n = n or race.num_samples
    gen = torch.Generator(device=unet.device).manual_seed(seed)
    sched = eval_scheduler(race)
    out = []
    for i in range(0, n, race.sample_batch):
        out.append(generate_images(unet, sched, min(race.sample_batch, n - i), num_inference_steps=NUM_INFERENCE_STEPS,
                                   generator=gen).cpu())
    return torch.cat(out)


def _load_script():
    spec = importlib.util.spec_from_file_location("train_unconditional", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _checkpoints(out_dir: Path) -> list[tuple[int, Path]]:
    found = [(int(p.name.split("-")[1]), p) for p in out_dir.glob("checkpoint-*") if p.name.split("-")[1].isdigit()]
    return sorted(found)


def run_one(spec: RunSpec) -> dict:
    """Train (one call of the script's ``main``), evaluate every checkpoint, write the result JSON."""
    if spec.result_path.exists():
        return json.loads(spec.result_path.read_text())
    os.environ.setdefault("TQDM_DISABLE", "1")
    import torch

    torch.set_num_threads(spec.threads)
    race = spec.race
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    log = open(spec.out_dir.parent / f"{spec.run_id}.log", "a")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    cfg_path = spec.out_dir.parent / f"unet_{race.name}.json"
    if not cfg_path.exists():
        spec_ = DATASETS[race.dataset]
        cfg_path.write_text(json.dumps(unet_config(spec_.resolution, race.channels, spec_.kind), indent=1))
    argv = spec.argv()
    resumed = bool(_checkpoints(spec.out_dir))
    if resumed:
        argv += ["--resume_from_checkpoint", "latest"]
    script = _load_script()
    t0, c0 = time.time(), time.process_time()
    script.main(argv)
    train_s, train_cpu = time.time() - t0, time.process_time() - c0

    from diffusers import UNet1DModel, UNet2DModel

    model_cls = UNet1DModel if DATASETS[race.dataset].kind == "dna" else UNet2DModel
    scorer = Scorer(race.dataset)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t1, c1 = time.time(), time.process_time()
    steps, evals, jitter = [], [], None
    ckpts = _checkpoints(spec.out_dir)
    for step, ck in ckpts:
        unet = model_cls.from_pretrained(ck / "unet_ema").to(device).eval()
        images = sample(unet, race, EVAL_SEED)
        steps.append(step)
        evals.append(scorer.score(images))
        if step == ckpts[-1][0]:
            from diffusers_infonoise.training import save_image_grid

            if images.ndim == 4:
                save_image_grid(images[:64], str(spec.out_dir / "final_samples.png"))
            if spec.jitter:
                vals = [evals[-1]] + [scorer.score(sample(unet, race, EVAL_SEED + s)) for s in JITTER_SEEDS]
                jitter = {"seeds": [EVAL_SEED] + [EVAL_SEED + s for s in JITTER_SEEDS],
                          "values": {k: [v[k] for v in vals] for k in vals[0]},
                          "std": {k: float(np.std([v[k] for v in vals], ddof=1)) for k in vals[0]}}
    eval_s, eval_cpu = time.time() - t1, time.process_time() - c1
    schedule = None
    sched_cfg = spec.out_dir / "scheduler" / "scheduler_config.json"
    if sched_cfg.exists():
        payload = json.loads(sched_cfg.read_text()).get("_infonoise_schedule")
        if payload:
            keys = ("edges", "pi", "rho_hat", "gate", "base", "hyperparameters", "optimizer_steps",
                    "warmup_steps_resolved", "num_updates", "loss_weighting", "prediction_type", "tv_phi_rho", "data")
            schedule = {k: payload.get(k) for k in keys}
            schedule = json.loads(json.dumps(schedule), parse_float=lambda s: round(float(s), 6))
    result = {
        "run_id": spec.run_id, "tier": spec.tier, "race": race.name, "dataset": race.dataset, "path": race.diffusion,
        "sampler": spec.sampler, "seed": spec.seed,
        "hyperparameters": {"steps": race.steps, "eval_every": race.eval_every, "batch_size": race.batch_size,
                            "learning_rate": race.learning_rate, "lr_scheduler": "constant_with_warmup",
                            "lr_warmup_steps": race.lr_warmup_steps, "unet_block_out_channels": list(race.channels),
                            "sampler_args": list(race.extra_args) if spec.sampler.split("-")[0] in ("infonoise", "kingma_gao") else [],
                            "ema": "diffusers EMAModel, max decay 0.9999, warm-up inv_gamma 1, power 3/4 (script defaults)"},
        "inference": {"scheduler": type(eval_scheduler(race)).__name__, "num_inference_steps": NUM_INFERENCE_STEPS,
                      "num_samples": race.num_samples, "sampling_seed": EVAL_SEED, "weights": "EMA (checkpoint-N/unet_ema)"},
        "primary_metric": scorer.primary,
        "steps": steps,
        "quality": {k: [round(float(e[k]), 6) for e in evals] for k in evals[0]} if evals else {},
        "jitter": jitter,
        "schedule": schedule,
        "wall_time_s": {"train": round(train_s, 1), "eval": round(eval_s, 1), "total": round(train_s + eval_s, 1)},
        "cpu_time_s": {"train": round(train_cpu, 1), "eval": round(eval_cpu, 1),
                       "num_evals": len(steps), "num_jitter_samplings": len(JITTER_SEEDS) if jitter else 0},
        "resumed": resumed,
        "threads": spec.threads,
        "command": _command(spec),
    }
    if getattr(scorer, "classifier_info", None):
        result["classifier"] = scorer.classifier_info
    tmp = spec.result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(spec.result_path)
    for _, ck in ckpts:
        shutil.rmtree(ck, ignore_errors=True)
    log.flush()
    return result


def _command(spec: RunSpec) -> str:
    return "python " + shlex.join([str(SCRIPT.relative_to(REPO))] + [_rel(a) for a in spec.argv()])


def _training_args(command: str) -> list[str]:
    """A run's command without its folders (``--output_dir`` and the model config's path)."""
    a = shlex.split(command)
    for flag in ("--output_dir", "--model_config_name_or_path"):
        i = a.index(flag)
        a = a[:i] + a[i + 2:]
    return a


def reuse_run(spec: RunSpec, source: Path) -> bool:
    """Copy another tier's finished run when it is the same experiment: same run id, the same training
    arguments but ``--output_dir``, the same evaluation steps, sample count and jitter setting."""
    if spec.result_path.exists() or not source.exists():
        return False
    r = json.loads(source.read_text())
    race = spec.race
    source_cfg = source.parent / f"unet_{race.name}.json"
    cfg = unet_config(DATASETS[race.dataset].resolution, race.channels, DATASETS[race.dataset].kind)
    same = (_training_args(r["command"]) == _training_args(_command(spec))
            and source_cfg.exists() and json.loads(source_cfg.read_text()) == cfg
            and r["steps"] == list(range(race.eval_every, race.steps + 1, race.eval_every))
            and r["inference"]["num_samples"] == race.num_samples and bool(r.get("jitter")) == spec.jitter)
    if same:
        r["reused_from"] = str(source.relative_to(REPO)) if source.is_relative_to(REPO) else str(source)
        spec.result_path.write_text(json.dumps(r, indent=1))
    return same


def _rel(a: str) -> str:
    try:
        return str(Path(a).resolve().relative_to(REPO)) if os.path.isabs(a) else a
    except ValueError:
        return a


def _worker(spec: RunSpec) -> tuple[str, str | None]:
    try:
        run_one(spec)
        return spec.run_id, None
    except Exception as err:  # reported by the parent, the other runs go on
        import traceback

        traceback.print_exc()
        return spec.run_id, f"{type(err).__name__}: {err}"


# ----------------------------------------------------------------------------------------------
# aggregation
# ----------------------------------------------------------------------------------------------

def smooth(values, window: int = 3) -> np.ndarray:
    """Centred moving average over ``window`` neighbouring evaluations (shrinking at the ends)."""
    v = np.asarray(values, float)
    h = window // 2
    return np.array([v[max(0, i - h): i + h + 1].mean() for i in range(len(v))])


def steps_to_reach(steps, values, target: float) -> tuple[float | None, str]:
    """First step at which the (smoothed) curve is ≤ target, linear between evaluations."""
    for i, (s, v) in enumerate(zip(steps, values)):
        if v <= target:
            if i == 0:
                return float(s), "at_first_eval"
            s0, v0 = steps[i - 1], values[i - 1]
            return float(s0 + (s - s0) * (v0 - target) / (v0 - v)), "interpolated"
    return None, "not_reached"


def speedup(base: dict, other: dict, metric: str) -> dict:
    """Steps ``base`` needs to reach its own final (smoothed) quality / steps ``other`` needs."""
    sb, qb = base["steps"], smooth(base["quality"][metric])
    so, qo = other["steps"], smooth(other["quality"][metric])
    target = float(qb[-1])
    nb, _ = steps_to_reach(sb, qb, target)
    no, how = steps_to_reach(so, qo, target)
    out = {"target": target, "baseline_steps": nb, "steps": no, "how": how}
    if no is None:
        out["speedup"] = None
        out["speedup_upper_bound"] = nb / so[-1]
    else:
        out["speedup"] = nb / no
        if how == "at_first_eval":
            out["speedup_is_lower_bound"] = True
    return out


def _stats(vals):
    vals = [float(v) for v in vals]
    return {"mean": float(np.mean(vals)), "std": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0,
            "min": min(vals), "max": max(vals), "per_seed": vals}


def summarize(races: list[Race], runs: list[dict], scorers: dict) -> dict:
    summary = {}
    for race in races:
        rr = [r for r in runs if r["race"] == race.name]
        if not rr:
            continue
        metric = rr[0]["primary_metric"]
        metrics = [metric] + [m for m in ("fd", "fd_thresholded", "fd_k4", "js_k4", "frac_grey_pixels")
                              if m in rr[0]["quality"] and m != metric]
        by = {s: sorted([r for r in rr if r["sampler"] == s], key=lambda r: r["seed"]) for s in race.samplers}
        entry = {"dataset": race.dataset, "path": race.diffusion, "primary_metric": metric, "baseline": race.baseline,
                 "inference": rr[0]["inference"]["scheduler"],
                 "budget_steps": race.steps, "final": {}, "at_budget": {}, "speedup_vs": {}, "wall_time_s": {}}
        for s, lst in by.items():
            if not lst:
                continue
            entry["final"][s] = {m: _stats([r["quality"][m][-1] for r in lst]) for m in metrics}
            entry["wall_time_s"][s] = _stats([r["wall_time_s"]["total"] for r in lst])
            entry["at_budget"][s] = {}
            for frac in (0.25, 0.5, 1.0):
                target = frac * race.steps
                vals = {m: [] for m in metrics}
                for r in lst:
                    i = int(np.argmin([abs(st - target) for st in r["steps"]]))
                    for m in metrics:
                        vals[m].append(r["quality"][m][i])
                entry["at_budget"][s][f"{int(frac * 100)}%"] = {m: _stats(v) for m, v in vals.items()}
        if by.get("infonoise"):
            for b in race.samplers:
                if b == "infonoise" or not by.get(b):
                    continue
                per_metric = {}
                for m in (metric,) + tuple(x for x in ("fd",) if x != metric and x in metrics):
                    per_metric[m] = {**_paired_speedups(by[b], by["infonoise"], m),
                                     "note": "a not-reached seed enters the median with its upper bound (baseline steps / budget)"}
                entry["speedup_vs"][b] = per_metric
        # each InfoNoise variant against the fixed densities, on the primary metric (same pairing by seed)
        entry["variant_speedup_vs"] = {}
        for v in (x for x in race.samplers if x.startswith("infonoise-") and by.get(x)):
            for b in (x for x in (race.baseline, "logit_normal") if by.get(x)):
                sp = _paired_speedups(by[b], by[v], metric)
                if sp["per_seed"]:
                    entry["variant_speedup_vs"].setdefault(v, {})[b] = sp
        jit = [r["jitter"] for r in rr if r.get("jitter")]
        if jit:
            entry["jitter"] = {m: {"mean_std": float(np.mean([j["std"][m] for j in jit])),
                                   "per_run": {r["run_id"]: r["jitter"]["std"][m] for r in rr if r.get("jitter")}}
                               for m in jit[0]["std"]}
            entry["jitter"]["how"] = (f"std over {len(jit[0]['seeds'])} sampling seeds of the same final EMA model "
                                      f"({race.num_samples} samples each)")
        sc = scorers.get(race.dataset)
        if sc is not None:
            entry["floor"] = sc.floors()
            if getattr(sc, "classifier_info", None):
                entry["classifier"] = sc.classifier_info
        refs = {r["seed"]: r.get("schedule") for r in by.get("infonoise", [])}
        entry["tv_phi_rho"] = {}
        for s, lst in by.items():
            tvs = [allocation_tv(race, r, refs.get(r["seed"])) for r in lst]
            if lst and all(t is not None for t in tvs):
                entry["tv_phi_rho"][s] = _stats(tvs)
        entry["pi_width"] = {}
        for s, lst in by.items():
            ws = [allocation_width(race, r, refs.get(r["seed"])) for r in lst]
            if lst and all(w is not None for w in ws):
                entry["pi_width"][s] = {k: _stats([w[k] for w in ws]) for k in ws[0]}
        waste = [_base_mass_where_pi_small(r["schedule"], race) for r in by.get("infonoise", []) if r.get("schedule")]
        if waste:
            entry["base_mass_where_final_pi_below_1pct_of_peak"] = _stats(waste)
            entry["base_mass_where_unfloored_pi_below_1pct_of_peak"] = _stats(
                [_base_mass_where_pi_small(r["schedule"], race, unfloored=True) for r in by["infonoise"] if r.get("schedule")])
            entry["gate"] = {r["run_id"]: r["schedule"]["gate"] for r in by["infonoise"] if r.get("schedule")}
        summary[race.name] = entry
    return summary


def _paired_speedups(baseline_runs: list, runs: list, metric: str) -> dict:
    """:func:`speedup` of ``runs`` against ``baseline_runs`` seed by seed (the seeds both have), their
    median (a not-reached seed with its upper bound) and how many did not reach the target."""
    per_seed = [{"seed": rb["seed"], **speedup(rb, ri[0], metric)} for rb in baseline_runs
                if (ri := [r for r in runs if r["seed"] == rb["seed"]])]
    vals = [p["speedup"] if p["speedup"] is not None else p["speedup_upper_bound"] for p in per_seed]
    return {"per_seed": per_seed, "median": float(np.median(vals)) if vals else None,
            "num_not_reached": sum(p["speedup"] is None for p in per_seed)}


def _base_density(race: Race, sampler_name: str):
    from diffusers_infonoise.samplers import make_sampler

    return make_sampler(sampler_name, _train_scheduler(race)).density


def _train_scheduler(race: Race):
    from diffusers import DDPMScheduler, EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

    if race.diffusion == "edm":
        return EDMEulerScheduler(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5)
    if race.diffusion == "ddpm":
        return DDPMScheduler(num_train_timesteps=1000, beta_schedule="linear")
    return FlowMatchEulerDiscreteScheduler(shift=1.0)


def _base_mass_where_pi_small(schedule: dict, race: Race, *, unfloored: bool = False) -> float:
    """METHOD.md §7's waste figure: the mass of the baseline's density (EDM log-normal on the EDM path)
    in the bins where the final InfoNoise π is below 1% of its peak density. ``unfloored``: use the
    InfoNoise target before the floor mixing, ``(π − η·π_base)/(1 − η)`` (the floor alone keeps π
    above 1% of its peak wherever the base has mass)."""
    import torch

    from diffusers_infonoise.densities import bin_masses
    from diffusers_infonoise.samplers import make_sampler

    edges = torch.tensor(schedule["edges"], dtype=torch.float64)
    masses = np.asarray(schedule["pi"], float)
    if unfloored and (schedule["hyperparameters"].get("floor_space") or "pi") == "pi":
        eta = float(schedule["hyperparameters"]["floor"])
        own_base = make_sampler("infonoise", _train_scheduler(race), num_bins=len(masses)).base_masses.numpy()
        masses = np.clip((masses - eta * own_base) / (1 - eta), 0.0, None)
    elif unfloored and schedule.get("rho_hat"):  # φ-space floor: the target before mixing is ρ̂/w
        masses = np.asarray(schedule["rho_hat"], float) * np.diff(_schedule_edges(race, schedule)) / _x0_weight(race, schedule)
    pi = masses / np.diff(schedule["edges"])
    base = bin_masses(_base_density(race, race.baseline), edges).numpy()
    base = base / base.sum()
    return float(base[pi < 0.01 * pi.max()].sum())


def _schedule_edges(race: Race, schedule: dict) -> np.ndarray:
    """A stored schedule's log-σ bin edges (rebuilt from the path's grid where a results file left them out)."""
    from diffusers_infonoise.samplers import make_sampler

    if schedule.get("edges"):
        return np.asarray(schedule["edges"], float)
    return make_sampler("infonoise", _train_scheduler(race), num_bins=len(schedule["pi"])).edges.numpy()


def _x0_weight(race: Race, schedule: dict) -> np.ndarray:
    """w(σ) of the run's loss (METHOD.md §4) at the centres of a stored schedule's bins (the library's)."""
    import torch

    from diffusers_infonoise.samplers import make_sampler

    edges = _schedule_edges(race, schedule)
    centres = torch.from_numpy(0.5 * (edges[1:] + edges[:-1]))
    ref = make_sampler("uniform", _train_scheduler(race), prediction_type=schedule["prediction_type"],
                       loss_weighting=schedule["loss_weighting"])
    return ref.x0_loss_weight(torch.exp(centres)).numpy()


def _run_pi(race: Race, run: dict, edges: np.ndarray) -> np.ndarray:
    """A run's π masses on the bins ``edges``: its stored final π (an InfoNoise run, on its own bins), else
    its fixed density's."""
    import torch

    from diffusers_infonoise.densities import bin_masses

    own = (run.get("schedule") or {}).get("pi")
    if own and len(own) == len(edges) - 1:
        return np.asarray(own, float)
    return bin_masses(_base_density(race, run["sampler"]), torch.from_numpy(np.asarray(edges, float))).numpy()


def _adaptive_without_schedule(run: dict) -> bool:
    """An adaptive sampler (Kingma & Gao) that stored no schedule: its final π is unknown, and its base
    density would stand in for it wrongly."""
    return run["sampler"].split("-")[0] == "kingma_gao" and not (run.get("schedule") or {}).get("pi")


def allocation_tv(race: Race, run: dict, reference: dict | None) -> float | None:
    """TV(φ, ρ̂) of a run (METHOD.md §5's check): its effective allocation φ = π·w on the bins of an
    InfoNoise schedule against that schedule's final ρ̂. An InfoNoise run is measured against its own ρ̂;
    a fixed density against ``reference``, the InfoNoise run of the same race and seed."""


    own = run.get("schedule") or {}
    if _adaptive_without_schedule(run):
        return None
    ref = own if own.get("rho_hat") else reference
    if not ref or not ref.get("rho_hat"):
        return None
    edges = _schedule_edges(race, ref)
    rho = np.asarray(ref["rho_hat"], float) * np.diff(edges)
    phi = _run_pi(race, run, edges) * _x0_weight(race, ref)
    return 0.5 * float(np.abs(phi / phi.sum() - rho / rho.sum()).sum())


def allocation_width(race: Race, run: dict, reference: dict | None) -> dict | None:
    """How wide a run's draw density π is (the issue's "how wide the adapted π is next to the best fixed
    density"): the std of ln σ under π and its 10%/90% VE-σ quantiles, on the bins of its own InfoNoise
    schedule, or of ``reference`` (the same seed's InfoNoise run) for a fixed density."""


    own = run.get("schedule") or {}
    if _adaptive_without_schedule(run):
        return None
    ref = own if own.get("pi") else reference
    if not ref:
        return None
    edges = _schedule_edges(race, ref)
    pi = _run_pi(race, run, edges)
    pi = pi / pi.sum()
    centres = 0.5 * (edges[1:] + edges[:-1])
    mean = float((pi * centres).sum())
    cdf = np.concatenate([[0.0], np.cumsum(pi)])
    q10, q90 = (float(np.exp(np.interp(q, cdf, edges))) for q in (0.1, 0.9))
    return {"std_log_sigma": float(np.sqrt((pi * (centres - mean) ** 2).sum())), "sigma_q10": q10, "sigma_q90": q90}


# ----------------------------------------------------------------------------------------------
# plots and report
# ----------------------------------------------------------------------------------------------

def plot_curves(races, runs, summary, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for race in races:
        if race.name not in summary:
            continue
        metric = summary[race.name]["primary_metric"]
        panels.append((race, metric))
        if metric == "fd_thresholded":
            panels.append((race, "fd"))
    if not panels:
        return
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for ax, (race, metric) in zip(axes.ravel(), panels):
        entry = summary[race.name]
        for i, s in enumerate(race.samplers):
            lst = [r for r in runs if r["race"] == race.name and r["sampler"] == s]
            if not lst:
                continue
            steps = np.array(lst[0]["steps"])
            vals = np.array([r["quality"][metric] for r in lst if r["steps"] == list(steps)])
            color = "C3" if s == "infonoise" else f"C{i % 10 if i % 10 != 3 else 9}"
            ax.plot(steps, vals.mean(0), color=color, lw=2, label=f"{s} (n={len(vals)})")
            ax.fill_between(steps, vals.min(0), vals.max(0), color=color, alpha=0.2)
            for v in vals:
                ax.plot(steps, v, color=color, lw=0.6, alpha=0.6)
        floor = entry.get("floor", {})
        f = floor.get("train_vs_heldout")
        if isinstance(f, (int, float)):
            ax.axhline(f, color="k", ls="--", lw=1, label=f"floor train vs held-out {f:.3g}")
        jit = entry.get("jitter", {}).get(metric)
        title = f"{race.dataset} ({race.diffusion}) · {metric}"
        if jit:
            title += f"\njitter (std) {jit['mean_std']:.2g}"
        ax.set_title(title, fontsize=9)
        ax.set_yscale("log")
        ax.set_xlabel("optimizer steps")
        ax.set_ylabel(metric + " (lower is better)")
        ax.legend(fontsize=7)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    fig.suptitle("quality vs training steps (EMA weights; EDM Euler 18 steps; mean, min–max band and seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_pi(races, runs, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    panels = [race for race in races if any(r["race"] == race.name and r.get("schedule") for r in runs)]
    if not panels:
        return
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.8 * cols, 3.4 * rows), squeeze=False)
    for ax, race in zip(axes.ravel(), panels):
        lst = sorted([r for r in runs if r["race"] == race.name and r.get("schedule")], key=lambda r: r["seed"])
        edges = np.asarray(lst[0]["schedule"]["edges"])
        centres = (edges[1:] + edges[:-1]) / 2
        x = torch.linspace(edges[0], edges[-1], 400, dtype=torch.float64)
        extra = (("edm_lognormal", ":"),) if race.baseline != "edm_lognormal" and race.diffusion == "edm" else ()
        for name, style in ((race.baseline, "--"),) + extra:
            dens = torch.exp(_base_density(race, name).log_prob(x)).numpy()
            ax.plot(x.numpy(), dens, color="k", ls=style, lw=1.2, label=f"{name} (base)")
        for r in lst:
            pi = np.asarray(r["schedule"]["pi"]) / np.diff(edges)
            ax.step(centres, pi, where="mid", color="C3", lw=1.2, alpha=0.8,
                    label=f"final π, seed {r['seed']}" if r is lst[0] else f"seed {r['seed']}")
        rho = lst[0]["schedule"].get("rho_hat")
        if rho:
            ax.plot(centres, rho, color="C0", lw=1, alpha=0.8, label="ρ̂ (seed 0)")
        gate = lst[0]["schedule"].get("gate") or {}
        if gate.get("pivot"):
            ax.axvline(math.log(gate["pivot"]), color="C0", ls=":", lw=1, label=f"gate c={gate['pivot']:.3g} ({gate.get('source')})")
        ax.set_title(f"{race.dataset} ({race.diffusion}) after {lst[0]['schedule'].get('optimizer_steps')} steps", fontsize=9)
        ax.set_xlabel("log σ (VE)")
        ax.set_ylabel("density per unit log σ")
        ax.legend(fontsize=7)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _fmt(s: dict) -> str:
    return f"{s['mean']:.3g} ± {s['std']:.2g} [{', '.join(f'{v:.3g}' for v in s['per_seed'])}]"


def write_markdown(tier, races, summary, meta, path: Path):
    reading = ""
    if path.exists():
        old = path.read_text()
        if "\n## Reading" in old:
            reading = old[old.index("\n## Reading"):]
    L = [f"# Quality race — `{tier}` tier", "",
         f"Command: `{meta['command']}`  ", f"Wall time: {meta['wall_time_s']:.0f} s with {meta['jobs']} job(s) × "
         f"{meta['threads']} thread(s); load average at start/end {meta['load_start']} / {meta['load_end']}.  ",
         f"Figures: [`quality_race_{tier}_curves.png`](quality_race_{tier}_curves.png), "
         f"[`quality_race_{tier}_pi.png`](quality_race_{tier}_pi.png); data: [`quality_race_{tier}.json`](quality_race_{tier}.json).", "",
         "Inference: EMA weights of `checkpoint-N/unet_ema`; EDM path: `EDMEulerScheduler` (deterministic Euler, Karras σ), "
         f"{NUM_INFERENCE_STEPS} steps; one fixed sampling seed for every evaluation. Metric: Fréchet distance in the "
         "penultimate features of a small CNN trained once on the data set's training split, against the held-out split "
         "(lower is better). Binarized data: `fd_thresholded` (samples thresholded at 0.5) is the reported metric; "
         "`fd` (continuous samples as they are) is also given. DNA: Jensen-Shannon distance of the pooled k-mer "
         "distributions (k = 4..6, mean) against held-out sequences.", ""]
    if meta.get("note"):
        L += [f"Note: {meta['note']}", ""]
    if meta.get("sizing"):
        L += [f"Sizing: {meta['sizing']}.", ""]
    if meta.get("reused_runs"):
        L += [f"Reused (same run id, training arguments and evaluation): {len(meta['reused_runs']['run_ids'])} runs from "
              f"{', '.join(meta['reused_runs']['from'])}.", ""]
    L += ["## Summary", "", "Lower is better; speedup = steps the sampler needs to reach its own final quality / steps "
          "InfoNoise needs (paired by seed; `<x`: InfoNoise did not reach it within the budget, x is the upper bound).", "",
          summary_table(races, summary), ""]
    for race in races:
        e = summary.get(race.name)
        if not e:
            continue
        m = e["primary_metric"]
        L += [f"## {race.dataset} — {race.diffusion} path, budget {race.steps} steps, batch {race.batch_size}", ""]
        L.append(f"Inference: `{e['inference']}`, {NUM_INFERENCE_STEPS} steps, {race.num_samples} samples per evaluation.  ")
        fl = e.get("floor", {})
        if "train2000_vs_heldout" in fl:
            a_, b_ = fl["train2000_vs_heldout"], fl["heldout_half_vs_half"]
            L.append(f"Floors (real vs real): training subset (2000) vs held-out ({fl['sizes']['heldout']}) `js` **{a_['js']:.3g}**, "
                     f"`fd` {a_['fd']:.3g}, `fd_k4` {a_['fd_k4']:.3g}; held-out halves `js` {b_['js']:.3g}, `fd` {b_['fd']:.3g}.  ")
        if "train_vs_heldout" in fl:
            L.append(f"Floors (real vs real, `fd`): train ({fl['sizes']['train']}) vs held-out ({fl['sizes']['heldout']}) "
                     f"**{fl['train_vs_heldout']:.3g}**; train subset ({fl['sizes']['train_subset']}) vs held-out "
                     f"{fl['train_subset_vs_heldout']:.3g}; held-out halves {fl['heldout_half_vs_half']:.3g}.  ")
        if e.get("jitter"):
            L.append("Evaluation jitter: " + "; ".join(f"`{k}` std {v['mean_std']:.2g}" for k, v in e["jitter"].items()
                                                      if isinstance(v, dict)) + f" ({e['jitter']['how']}).  ")
        if e.get("classifier"):
            c = e["classifier"]
            L.append(f"Feature classifier: held-out accuracy {c['heldout_accuracy']:.3f} (train {c['train_accuracy']:.3f}), "
                     f"{c['feature_dim']} features.  ")
        if e.get("base_mass_where_final_pi_below_1pct_of_peak"):
            w = e["base_mass_where_final_pi_below_1pct_of_peak"]
            w2 = e["base_mass_where_unfloored_pi_below_1pct_of_peak"]
            L.append(f"Mass of {race.baseline} draws where the final InfoNoise π is < 1% of its peak: {_fmt(w)}; "
                     f"where the InfoNoise target before the floor mixing is: {_fmt(w2)}.  ")
            gates = {f"{g['source']} {g['pivot']}" + (f" ({g['reason']})" if g.get("reason") else "") for g in e["gate"].values()}
            L.append(f"Gate at the end of the InfoNoise runs: {'; '.join(sorted(gates))}.")
        cont = m == "fd_thresholded"
        L += ["", f"| sampler | final `{m}` mean ± std [seeds] | 25% | 50% | 100% | TV(φ, ρ̂) | π: std ln σ, σ 10–90% |"
              + (" final `fd` (continuous) |" if cont else ""),
              "|---|---|---|---|---|---|---|" + ("---|" if m == "fd_thresholded" else "")]
        for s in race.samplers:
            if s not in e["final"]:
                continue
            ab = e["at_budget"][s]
            tv = (e.get("tv_phi_rho") or {}).get(s)
            row = f"| {s} | {_fmt(e['final'][s][m])} | " + " | ".join(
                f"{ab[k][m]['mean']:.3g} ± {ab[k][m]['std']:.2g}" for k in ("25%", "50%", "100%")) + " | " + (
                f"{tv['mean']:.2f}" if tv else "—") + " | "
            wd = (e.get("pi_width") or {}).get(s)
            row += (f"{wd['std_log_sigma']['mean']:.2f}, {wd['sigma_q10']['mean']:.2g}–{wd['sigma_q90']['mean']:.2g}"
                    if wd else "—") + " |"
            if m == "fd_thresholded":
                row += f" {_fmt(e['final'][s]['fd'])} |"
            L.append(row)
        L.append("")
        for v, against in (e.get("variant_speedup_vs") or {}).items():
            cells = []
            for b, sp in against.items():
                seeds = ", ".join(f"{p['speedup']:.2f}" if p["speedup"] is not None else f"<{p['speedup_upper_bound']:.2f}"
                                  for p in sp["per_seed"])
                cells.append(f"vs `{b}` {'≤ ' if sp['num_not_reached'] else ''}**{sp['median']:.2f}** [{seeds}]")
            L.append(f"Steps-to-target speedup of `{v}` on `{m}`: " + "; ".join(cells) + ".  ")
        for b, per_metric in e["speedup_vs"].items():
            for mm, sp in per_metric.items():
                seeds = ", ".join(
                    (f"s{p['seed']}: {p['speedup']:.2f}" + ("≥" if p.get("speedup_is_lower_bound") else "")) if p["speedup"] is not None
                    else f"s{p['seed']}: not reached (< {p['speedup_upper_bound']:.2f})" for p in sp["per_seed"])
                med = f"{'≤ ' if sp['num_not_reached'] else ''}{sp['median']:.2f}"
                L.append(f"Steps-to-target speedup of InfoNoise vs `{b}` on `{mm}` (target: {b}'s own final quality, "
                         f"curves smoothed over 3 evaluations): median **{med}** ({seeds}).  ")
        L.append("")
    L.append(reading.strip("\n") if reading else "## Reading\n\n(to be written)")
    path.write_text("\n".join(L) + "\n")


def summary_table(races, summary) -> str:
    """One markdown table over the races: each sampler's final quality (mean ± std over seeds, n) and
    InfoNoise's steps-to-target speedup against it (median [per seed]); for README.md."""
    L = ["| data set (path, metric) | sampler | final quality, mean ± std (n) | TV(φ, ρ̂) | InfoNoise speedup vs it: median [seeds] |",
         "|---|---|---|---|---|"]
    for race in races:
        e = summary.get(race.name)
        if not e:
            continue
        m = e["primary_metric"]
        order = ["infonoise", race.baseline] + [x for x in race.samplers if x not in ("infonoise", race.baseline)]
        best = min(e["final"][x][m]["mean"] for x in order if x in e["final"])
        for i, x in enumerate(o for o in order if o in e["final"]):
            f = e["final"][x][m]
            q = f"{f['mean']:.3g} ± {f['std']:.2g} ({len(f['per_seed'])})"
            q = f"**{q}**" if f["mean"] == best else q
            sp = e["speedup_vs"].get(x, {}).get(m)
            if sp and sp["median"] is not None:
                per = ", ".join(f"{p['speedup']:.2f}" if p["speedup"] is not None else f"<{p['speedup_upper_bound']:.2f}"
                                for p in sp["per_seed"])
                cell = f"{'≤ ' if sp['num_not_reached'] > len(sp['per_seed']) / 2 else ''}{sp['median']:.2f} [{per}]"
            else:
                cell = "—"
            head = f"{race.dataset} ({race.diffusion}, `{m}`)" if i == 0 else ""
            tv = (e.get("tv_phi_rho") or {}).get(x)
            tv = f"{tv['mean']:.2f}" if tv else "—"
            L.append(f"| {head} | {x}{' (baseline)' if x == race.baseline else ''} | {q} | {tv} | {cell} |")
    return "\n".join(L)


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------

def quick_calibration(out: Path) -> dict:
    """Seconds per training step (batch 64) and per 2000-sample evaluation of the 8x8 quick-tier model,
    medians over the quick tier's finished runs (wall time, so they include the machine's load then)."""
    path = Path(out) / "quality_race_quick.json"
    if not path.exists():
        return {"step_s": 0.27, "eval_s": 33.0, "source": "default (quick tier measured under load ~5 on 2 cores)"}
    runs = json.loads(path.read_text())["runs"]
    step = [r["wall_time_s"]["train"] / r["hyperparameters"]["steps"] for r in runs]
    ev = [r["wall_time_s"]["eval"] / (len(r["steps"]) + (len(r["jitter"]["seeds"]) - 1 if r.get("jitter") else 0))
          for r in runs]
    return {"step_s": float(np.median(step)), "eval_s": float(np.median(ev)), "source": str(path.relative_to(REPO))}


def estimate_seconds(race: Race, quick_timing: dict | None = None) -> float:
    """Rough wall time of one run: train steps + evaluations, from the quick tier's measured 8x8 costs,
    scaled by pixels (and ×1.3 for a third UNet level) for 16x16 and 28x28, ×2 for the DNA race."""
    t = quick_timing or {"step_s": 0.27, "eval_s": 33.0}
    spec = DATASETS[race.dataset]
    if spec.kind == "dna":  # the 1-D UNet on 4 x 64: measured ~1.4x (steps) to ~2.5x (evaluation) the 8x8 model
        scale = 2.0
    else:
        scale = (spec.resolution / 8) ** 2 * (1.3 if len(race.channels) > 2 else 1.0)
    n_eval = race.steps // race.eval_every
    return scale * (race.steps * t["step_s"] * race.batch_size / 64 + n_eval * t["eval_s"] * race.num_samples / 2000)


def _compact_run(r: dict) -> dict:
    r = json.loads(json.dumps(r))
    r.pop("classifier", None)  # the same for every run of a data set: in the summary
    if r.get("jitter"):
        r["jitter"] = {"seeds": r["jitter"]["seeds"], "std": r["jitter"]["std"]}
    sch = r.get("schedule")
    if sch and sch.get("edges"):
        e = sch.pop("edges")
        sch["edges_linspace"] = [e[0], e[-1], len(e)]  # the grid is uniform in log sigma
        for k in ("pi", "rho_hat"):
            if sch.get(k):
                sch[k] = [float(f"{v:.4g}") for v in sch[k]]
    return r


def _write_doc(doc: dict, path: Path, limit: int = 190_000) -> None:
    """Summary indented; one compact line per run. When the file would pass ``limit`` bytes, the runs go
    to one ``<stem>_runs_<race>.json`` file per race (each committed file stays small)."""
    runs = [_compact_run(r) for r in doc["runs"]]
    head = {k: v for k, v in doc.items() if k != "runs"}

    def compose(head, runs):
        text = json.dumps({**head, "runs": "@RUNS@"}, indent=1, default=float)
        if len(text) > limit // 2:  # a large summary (full tier): compact
            text = json.dumps({**head, "runs": "@RUNS@"}, separators=(",", ":"), default=float)
        lines = ",\n".join(json.dumps(r, separators=(",", ":"), default=float) for r in runs)
        return text.replace('"@RUNS@"', "[\n" + lines + "\n]") + "\n"

    text = compose(head, runs)
    if len(text.encode()) > limit:
        files = {}
        for race in sorted({r["race"] for r in runs}):
            part = path.with_name(f"{path.stem}_runs_{race}.json")
            part.write_text(compose({"race": race}, [r for r in runs if r["race"] == race]))
            files[race] = part.name
        text = compose({**head, "runs_files": files}, [])
    path.write_text(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tier", choices=("quick", "full", "gpu", "gate", "recheck", "recheck_full", "recheck_paths"), default="quick")
    p.add_argument("--jobs", type=int, default=2, help="Runs in parallel (worker processes).")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker.")
    p.add_argument("--out", type=str, default=str(RESULTS))
    p.add_argument("--only", type=str, default=None, help="Comma-separated race names to run.")
    p.add_argument("--samplers", type=str, default=None, help="Comma-separated samplers to run (default: the tier's).")
    p.add_argument("--reuse", type=str, default=None, help="Another tier (e.g. quick) whose finished runs are copied "
                   "instead of rerun when the run id, the training arguments (all but --output_dir) and the "
                   "evaluation settings are the same.")
    p.add_argument("--note", type=str, default=None, help="Free text recorded in the results' meta and report "
                   "(e.g. how the runs were made when this is --report_only).")
    p.add_argument("--report_only", action="store_true", help="Aggregate the existing run results only.")
    p.add_argument("--plan", action="store_true", help="Print the runs and a time estimate, then exit.")
    p.add_argument("--schedule_plots", action="store_true", help="Keep the script's per-refresh schedule plots.")
    p.add_argument("--smoke", action="store_true", help="A seconds-long check of the harness (tiny budgets; "
                   "results under quality_race_smoke*, not a measurement).")
    args = p.parse_args(argv)
    if args.tier == "gpu":
        print("note: --tier gpu is the 28x28 MNIST / binarized MNIST / Fashion-MNIST tier with a larger UNet, for a "
              "machine with a GPU (accelerate picks the device); it has not been run.", flush=True)

    races = tier_races(args.tier)
    tier_name = args.tier
    if args.smoke:
        import dataclasses

        tier_name = f"smoke_{args.tier}"
        races = [dataclasses.replace(r, steps=60, eval_every=30, num_samples=200, sample_batch=200, lr_warmup_steps=10,
                                     seeds={s: [0] for s in r.samplers},
                                     extra_args=("--infonoise_warmup_steps", "20", "--infonoise_refresh_every", "10"))
                 for r in races]
    if args.only:
        keep = set(args.only.split(","))
        races = [r for r in races if r.name in keep or r.dataset in keep]
    root = Path(args.out) / f"quality_race_{tier_name}"
    specs = []
    for race in races:
        for s in race.samplers:
            if args.samplers and s not in args.samplers.split(","):
                continue
            for seed in race.seeds[s]:
                # evaluation jitter from the seed-0 runs of InfoNoise and the baseline (extra samplings)
                specs.append(RunSpec(tier_name, race, s, seed, str(root), args.threads, args.schedule_plots,
                                     jitter=(seed == 0 and s in ("infonoise", race.baseline))))
    # in the tier's priority order; within a group seed by seed, so that the samplers of a seed run
    # side by side under the same load
    specs.sort(key=lambda sp: (run_priority(args.tier, sp), sp.seed,
                               ALL_SAMPLERS.index(sp.sampler) if sp.sampler in ALL_SAMPLERS else 99))
    if args.plan:
        total = 0.0
        cal = quick_calibration(Path(args.out))
        print(f"calibration: {cal['step_s']:.3f} s/step, {cal['eval_s']:.1f} s/evaluation at 8x8 ({cal['source']})")
        for sp in specs:
            est = estimate_seconds(sp.race, cal) + (len(JITTER_SEEDS) * cal["eval_s"] if sp.jitter else 0)
            total += est
            print(f"{sp.run_id:55s} ~{est:6.0f} s")
        print(f"{len(specs)} runs, ~{total / 3600:.2f} h of worker time at the calibration's speed, "
              f"~{total / 3600 / max(1, args.jobs):.2f} h with --jobs {args.jobs}"
              + (" (CPU calibration: meaningless for a GPU)" if args.tier == "gpu" else ""))
        return
    (root / "runs").mkdir(parents=True, exist_ok=True)
    if args.reuse:
        for sp in specs:
            reuse_run(sp, Path(args.out) / f"quality_race_{args.reuse}" / "runs" / f"{sp.run_id}.json")
    t0 = time.time()
    load_start = os.getloadavg()
    errors = {}
    if not args.report_only:
        todo = [sp for sp in specs if not sp.result_path.exists()]
        print(f"{len(specs)} runs, {len(specs) - len(todo)} already done", flush=True)
        for race in races:  # prepare data and classifiers once, in the parent
            Scorer(race.dataset)
        os.environ["TQDM_DISABLE"] = "1"
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(args.jobs) as pool:  # workers are reused: one import each
            for run_id, err in pool.imap_unordered(_worker, todo):
                print(f"[{time.time() - t0:7.0f} s] {run_id}: {'ok' if err is None else 'FAILED ' + err}", flush=True)
                if err:
                    errors[run_id] = err
    runs = [json.loads(sp.result_path.read_text()) for sp in specs if sp.result_path.exists()]
    if not runs:
        print(f"no finished runs under {root / 'runs'}; nothing to report (the committed results are left as they are)")
        return
    scorers = {race.dataset: Scorer(race.dataset) for race in races}
    summary = summarize(races, runs, scorers)
    import diffusers
    import torch

    wall = time.time() - t0
    meta = {
        "command": "python " + shlex.join(["benchmarks/quality_race.py"] + (argv if argv is not None else sys.argv[1:])),
        "tier": args.tier, "jobs": args.jobs, "threads": args.threads,
        "wall_time_s": wall if not args.report_only else None,
        "load_start": [round(v, 2) for v in load_start], "load_end": [round(v, 2) for v in os.getloadavg()],
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
                    "diffusers": diffusers.__version__, "python": platform.python_version()},
        "errors": errors,
    }
    out_json = Path(args.out) / f"quality_race_{tier_name}.json"
    previous = json.loads(out_json.read_text()) if out_json.exists() else {}
    if args.report_only and previous.get("meta"):
        meta = {**previous["meta"], "report_regenerated_with": meta["command"]}
    if args.note:
        meta["note"] = args.note
    if TIER_SIZING.get(args.tier):
        meta["sizing"] = TIER_SIZING[args.tier]
    reused = sorted({r["reused_from"].rsplit("/runs/", 1)[0] for r in runs if r.get("reused_from")})
    if reused:
        meta["reused_runs"] = {"from": reused, "run_ids": sorted(r["run_id"] for r in runs if r.get("reused_from"))}
    doc = {
        "meta": meta,
        "design": {
            "each_run": "one in-process call of training_scripts/train_unconditional.py main(argv) (see each run's 'command')",
            "inference": f"EMA weights; EDM: EDMEulerScheduler (Karras sigmas, rho 7), {NUM_INFERENCE_STEPS} steps; "
                         f"DDPM: DDIM eta 0 trailing, {NUM_INFERENCE_STEPS} steps; flow: FlowMatchEuler, {NUM_INFERENCE_STEPS} steps",
            "metric": "Fréchet distance of the penultimate features (small CNN trained once on the training split) vs the "
                      "held-out split; binarized data: fd_thresholded (samples > 0.5) reported, fd (continuous) also given; "
                      "DNA: Jensen-Shannon distance of pooled k-mer distributions (k=4..6, mean) reported, k-mer spectrum "
                      "FDs also given",
            "speedup": "steps the baseline needs to reach its own final quality / steps InfoNoise needs, on curves "
                       "smoothed by a centred 3-evaluation moving average, linear interpolation between evaluations, "
                       "paired by seed; median over seeds",
            "datasets": {r.dataset: DATASETS[r.dataset].note for r in races},
            "races": [asdict(r) for r in races],
            "other_tiers": {
                "full": "NOT RUN in this results file (not enough session time): every data set (digits cont/bin, "
                        "MNIST + binarized MNIST at 16x16, DNA) x 7 samplers, 3 seeds (5 for infonoise/edm_lognormal on "
                        "binarized MNIST and DNA), plus a DDPM-eps race and a flow race: 125 runs; run with "
                        "`python benchmarks/quality_race.py --tier full --jobs 2` (resumable); `--plan` prints the run list "
                        "and an estimate calibrated on this quick tier: ~32 h with 2 jobs at this session's contended speed "
                        "(load ~4.5 on 2 cores), i.e. several times the ~2.5 h the issue asks for even on free cores; "
                        "2000 samples x 18 steps per evaluation makes evaluation as costly as training, and the 16x16 "
                        "races dominate. Its data/metric/path code was exercised by a 60-step --smoke run (DDPM, flow, "
                        "DNA, binarized MNIST 16x16), not a measurement",
                "gpu": "NOT RUN: 28x28 MNIST / binarized MNIST / Fashion-MNIST, larger UNet, for a GPU machine",
            } if args.tier == "quick" else {},
        },
        "summary": summary,
        "runs": runs,
    }
    _write_doc(doc, out_json)
    plot_curves(races, runs, summary, Path(args.out) / f"quality_race_{tier_name}_curves.png")
    plot_pi(races, runs, Path(args.out) / f"quality_race_{tier_name}_pi.png")
    if meta.get("wall_time_s") is None:
        meta["wall_time_s"] = float("nan")
    write_markdown(tier_name, races, summary, meta, Path(args.out) / f"quality_race_{tier_name}.md")
    print(f"wrote {out_json} ({out_json.stat().st_size / 1024:.0f} KB) in {wall:.0f} s; errors: {errors or 'none'}", flush=True)


if __name__ == "__main__":
    main()
