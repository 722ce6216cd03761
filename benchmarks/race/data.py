"""The quality race's data sets (issue 6): what each one is (:data:`DATASETS`), its real training and
held-out splits, and the arguments that give ``training_scripts/train_unconditional.py`` the
training split (:func:`load_data`). The folders written for the script live under the benchmarks'
git-ignored cache (:func:`benchmarks.metrics.ensure_cache_dir`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks import dna as DNA
from benchmarks import metrics as M


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
    "digits": DataSpec(
        "digits",
        "image",
        8,
        False,
        32,
        60,
        "sklearn digits 8x8 (17 grey levels), library split 1438 train / 359 held-out (fixed random permutation)",
    ),
    "binarized_digits": DataSpec("binarized_digits", "image", 8, True, 32, 60, "digits thresholded at 8/16, same split"),
    "mnist16": DataSpec(
        "mnist16",
        "image",
        16,
        False,
        64,
        3,
        "MNIST resized to 16x16 (PIL bilinear), 60000 train; held-out: a random 5000 of the 10000 test images",
    ),
    "binarized_mnist16": DataSpec(
        "binarized_mnist16", "image", 16, True, 64, 3, "MNIST resized to 16x16 then stochastically binarized (rng 0), same split"
    ),
    "dna64": DataSpec(
        "dna64",
        "dna",
        64,
        True,
        note="dm3 upstream2000, last 64 bases before the TSS, unique ACGT crops; "
        "held-out: a random 4000; one-hot (4 x 64) in {-1, 1}, UNet1DModel (--sequence_column)",
    ),
    # finetune tier: the 8x8 digits shown at 16x16 (bilinear; binarized: the binarized digits repeated 2x2)
    "digits16": DataSpec("digits16", "image", 16, False, 32, 60, "sklearn digits resized to 16x16 (PIL bilinear), digits' split"),
    "binarized_digits16": DataSpec(
        "binarized_digits16", "image", 16, True, 32, 60, "binarized digits upsampled 2x2 (nearest) to 16x16, digits' split"
    ),
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
        out.update(
            train=tr,
            train_labels=ytr,
            heldout=te,
            heldout_labels=yte,
            script_args=["--dataset_name", name, "--resolution", str(spec.resolution)],
        )
    elif name in ("mnist16", "binarized_mnist16"):
        tr, ytr = load_builtin_arrays("mnist", "train")
        te, yte = load_builtin_arrays("mnist", "test")
        tr, te = _resize(tr, 16), _resize(te, 16)
        if spec.binary:
            rng = np.random.default_rng(0)
            allx = np.concatenate([tr, te])
            allx = np.where(rng.random(allx.shape, dtype=np.float32) < allx / np.float32(255.0), 255, 0).astype(np.uint8)
            tr, te = allx[: len(tr)], allx[len(tr) :]
        idx = np.random.default_rng(0).permutation(len(te))[:5000]
        te, yte = te[idx], yte[idx]
        path = M.ensure_cache_dir("data") / f"{name}_train"
        if not (path / "dataset_info.json").exists():
            DNA.save_image_dataset(tr, path)
        out.update(
            train=tr, train_labels=ytr, heldout=te, heldout_labels=yte, script_args=["--dataset_name", str(path), "--resolution", "16"]
        )
    elif name in ("digits16", "binarized_digits16"):
        base = "binarized_digits" if spec.binary else "digits"
        tr, ytr = load_builtin_arrays(base, "train")
        te, yte = load_builtin_arrays(base, "test")
        if spec.binary:  # nearest: the values stay {0, 255}
            tr, te = (x.repeat(2, axis=1).repeat(2, axis=2) for x in (tr, te))
        else:
            tr, te = _resize(tr, 16), _resize(te, 16)
        path = M.ensure_cache_dir("data") / f"{name}_train"
        if not (path / "dataset_info.json").exists():
            DNA.save_image_dataset(tr, path)
        out.update(
            train=tr, train_labels=ytr, heldout=te, heldout_labels=yte, script_args=["--dataset_name", str(path), "--resolution", "16"]
        )
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
