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
    #: a transform of another data set (the transfer tier's): its real data, held-out split and classifier are that one's
    base: str | None = None
    #: x0 is the base's times this in training (model units); samples are divided by it before they are scored
    scale: float = 1.0
    #: the base's 8-bit levels spread uniformly over their width (:func:`dequantized_x0`): no value grid
    dequantize: bool = False
    #: DNA: bases per token (1: one-hot over ACGT; k: one-hot over the 4^k k-mers, :func:`benchmarks.dna.kmer_alphabet`)
    kmer: int = 1


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
    # transfer tier (issue 30): the informative noise window moved by the data's scale, resolution, value grid and vocabulary
    "binarized_mnist16_x0.25": DataSpec(
        "binarized_mnist16_x0.25",
        "image",
        16,
        True,
        64,
        3,
        "binarized MNIST 16x16 with x0 times 0.25 (values -0.25, 0.25), trained on as float arrays; samples are divided "
        "by 0.25 and scored as binarized_mnist16's",
        base="binarized_mnist16",
        scale=0.25,
    ),
    "binarized_digits16_x0.25": DataSpec(
        "binarized_digits16_x0.25",
        "image",
        16,
        True,
        32,
        60,
        "binarized digits 16x16 with x0 times 0.25 (values -0.25, 0.25), trained on as float arrays; samples are divided "
        "by 0.25 and scored as binarized_digits16's (issue 31: a second fine-tune whose window lies far below sigma_data)",
        base="binarized_digits16",
        scale=0.25,
    ),
    "binarized_mnist16_x4": DataSpec(
        "binarized_mnist16_x4",
        "image",
        16,
        True,
        64,
        3,
        "binarized MNIST 16x16 with x0 times 4 (values -4, 4), trained on as float arrays; scored as binarized_mnist16's "
        "on the samples' signs only (fd_thresholded: generate_images clamps at 1 in model units, a quarter of the data's "
        "scale, so the continuous fd is not measured)",
        base="binarized_mnist16",
        scale=4.0,
    ),
    "binarized_mnist32": DataSpec(
        "binarized_mnist32",
        "image",
        32,
        True,
        64,
        3,
        "MNIST resized to 32x32 (PIL bilinear) then stochastically binarized (rng 0), same split",
    ),
    "dequantized_mnist16": DataSpec(
        "dequantized_mnist16",
        "image",
        16,
        False,
        64,
        3,
        "MNIST 16x16 (PIL bilinear, 8-bit v) dequantized with uniform noise inside each 8-bit level, x0 = 2(v + u)/256 - 1, "
        "u ~ U[0, 1) per pixel (rng 0): no value grid; float arrays; scored against mnist16's held-out split",
        base="mnist16",
        dequantize=True,
    ),
    "dna2mer32": DataSpec(
        "dna2mer32",
        "dna",
        32,
        True,
        note="dna64's sequences as 32 non-overlapping 2-mer tokens, one-hot over 16 letters (16 x 32); samples decode by the "
        "argmax to tokens, then to bases, and are scored as dna64's (k-mer JS of the bases against its held-out split)",
        base="dna64",
        kmer=2,
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
    elif spec.base is not None:
        out.update(_derived(spec))
    elif name in ("mnist16", "binarized_mnist16", "binarized_mnist32"):
        side = spec.resolution
        tr, ytr = load_builtin_arrays("mnist", "train")
        te, yte = load_builtin_arrays("mnist", "test")
        tr, te = _resize(tr, side), _resize(te, side)
        if spec.binary:  # after resizing, so that the images stay binary
            allx = binarize(np.concatenate([tr, te]))
            tr, te = allx[: len(tr)], allx[len(tr) :]
        idx = np.random.default_rng(0).permutation(len(te))[:5000]
        te, yte = te[idx], yte[idx]
        path = M.ensure_cache_dir("data") / f"{name}_train"
        if not (path / "dataset_info.json").exists():
            DNA.save_image_dataset(tr, path)
        out.update(
            train=tr, train_labels=ytr, heldout=te, heldout_labels=yte, script_args=["--dataset_name", str(path), "--resolution", str(side)]
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


def binarize(images: np.ndarray, seed: int = 0) -> np.ndarray:
    """uint8 images stochastically binarized: each pixel 255 with probability v/255, else 0 (``seed``)."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random(images.shape, dtype=np.float32) < images / np.float32(255.0), 255, 0).astype(np.uint8)


def scaled_x0(images: np.ndarray, scale: float) -> np.ndarray:
    """(N, 1, H, W) float32 x0 of (N, H, W) uint8 images in the script's units (v/127.5 − 1), times ``scale``."""
    return ((images.astype(np.float32) / np.float32(127.5) - 1) * np.float32(scale))[:, None]


def dequantized_x0(images: np.ndarray, seed: int = 0) -> np.ndarray:
    """(N, 1, H, W) float32 x0 = 2(v + u)/256 − 1 of (N, H, W) uint8 images v, u ~ U[0, 1) per pixel (``seed``): each
    8-bit level spread uniformly over its width, so the data has no value grid; inside [−1, 1)."""
    v = images.astype(np.float64)
    x = ((v + np.random.default_rng(seed).random(images.shape)) / 128 - 1).astype(np.float32)
    # float32 rounding may land on the next level's lower edge, (v + 1)/128 − 1 (exact in float32): stay below it
    top = np.nextafter(((v + 1) / 128 - 1).astype(np.float32), np.float32(-2))
    return np.minimum(x, top)[:, None]


def save_array_dataset(x0: np.ndarray, path) -> str:
    """Save (N, C, H, W) float32 x0 as a ``datasets`` ``save_to_disk`` folder with an ``Array3D`` column ``image``, which
    ``train_unconditional.py --dataset_name PATH`` trains on as stored (no mapping to [−1, 1]); returns the path."""
    import datasets

    features = datasets.Features({"image": datasets.Array3D(shape=x0.shape[1:], dtype="float32")})
    datasets.Dataset.from_dict({"image": list(x0)}, features=features).save_to_disk(str(path))
    return str(path)


def _derived(spec: DataSpec) -> dict:
    """A transform of ``spec.base`` (the transfer tier's): the base's real splits, labels and held-out data, and the
    script's arguments for the transformed training split (float arrays, or k-mer token sequences)."""
    base = load_data(spec.base)
    out = {k: v for k, v in base.items() if k not in ("spec", "script_args")}
    path = M.ensure_cache_dir("data") / f"{spec.name}_train"
    if spec.kind == "dna":
        alphabet = DNA.kmer_alphabet(spec.kmer)
        if not (path / "dataset_info.json").exists():
            DNA.save_sequence_dataset(DNA.kmer_tokens(base["train"], spec.kmer), path)
        out["script_args"] = ["--dataset_name", str(path), "--sequence_column", "sequence", "--alphabet", alphabet]
        return out
    if not (path / "dataset_info.json").exists():
        x0 = dequantized_x0(base["train"]) if spec.dequantize else scaled_x0(base["train"], spec.scale)
        save_array_dataset(x0, path)
    out["script_args"] = ["--dataset_name", str(path), "--resolution", str(spec.resolution)]
    return out
