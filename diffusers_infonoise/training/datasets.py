"""The scripts' data: image data sets (built-in, Hub, folder), the transform, augmentation seeded
by (seed, epoch, index), captioned data and the epoch-seeded batch order."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..logs import get_logger

logger = get_logger(__name__)

__all__ = [
    "DataConfig",
    "load_image_dataset",
    "image_transform",
    "image_x0",
    "image_channels",
    "binary_data",
    "DEFAULT_CAPTIONED_DATASET",
    "load_captioned_dataset",
    "AugmentedImageDataset",
    "CaptionedImageDataset",
    "EpochShuffleSampler",
    "collate_captioned",
    "batch_loader",
    "captioned_dataloader",
    "unconditional_dataset",
]


@dataclass(frozen=True)
class DataConfig:
    """Where a run's training data comes from and how it is batched (diffusers' data flags; built from
    the command line by :func:`diffusers_infonoise.training.args.data_config`).

    ``dataset_name``: a built-in offline name, a Hub name or a ``save_to_disk`` folder;
    ``train_data_dir``: an image folder instead; neither: ``default_dataset``.
    """

    dataset_name: str | None = None
    dataset_config_name: str | None = None
    train_data_dir: str | None = None
    cache_dir: str | None = None
    max_train_samples: int | None = None
    seed: int = 0
    image_column: str = "image"
    caption_column: str | None = None
    resolution: int = 16
    center_crop: bool = False
    random_flip: bool = False
    train_batch_size: int = 16
    dataloader_num_workers: int = 0
    default_dataset: str = "mnist"


def load_image_dataset(data: DataConfig, *, split: str = "train"):
    """A ``datasets.Dataset`` from ``data.dataset_name`` (a built-in offline name, a Hub name, a local
    ``save_to_disk`` directory) or ``data.train_data_dir`` (an image folder); ``data.default_dataset``
    when neither is set.

    Raises:
        ValueError: both or a bad name; ``--train_data_dir`` that holds no image ``datasets`` reads, or that it
            cannot read (the message led by the option).
        ValueError: a data set of no examples, led by its option.
        FileNotFoundError: a missing built-in asset (with the install command); ``--train_data_dir`` that is not a
            folder; ``--dataset_name`` that is neither built in, a ``save_to_disk`` folder nor a data set the Hub
            serves (offline: not in the cache), led by the option.
    """
    import datasets
    from datasets.data_files import EmptyDatasetError

    from ..data import BUILTIN_DATASETS, is_builtin_dataset, load_builtin_dataset

    name, data_dir, max_samples = data.dataset_name, data.train_data_dir, data.max_train_samples
    if name and data_dir:
        raise ValueError("--dataset_name and --train_data_dir: give one of them, not both")
    if name == "":
        raise ValueError("--dataset_name: expected a data set's name or folder, got ''")
    if data_dir:
        if not os.path.isdir(data_dir):  # datasets would say "doesn't contain any data files" of a typo
            raise FileNotFoundError(f"--train_data_dir: no such folder: {data_dir}")
        try:
            ds = datasets.load_dataset("imagefolder", data_dir=data_dir, cache_dir=data.cache_dir, split="train")
        except (OSError, ValueError, IndexError) as err:  # IndexError: datasets on an empty metadata.jsonl
            detail = " ".join(str(err).split()) or type(err).__name__
            if isinstance(err, EmptyDatasetError) or "corresponds to no data" in detail:
                raise ValueError(
                    f"--train_data_dir: {data_dir} holds no image datasets' imagefolder reads (.png, .jpg, ...; captions, "
                    f"for the text-to-image scripts, in a metadata.jsonl with a file_name column): {detail}"
                ) from err
            raise ValueError(f"--train_data_dir: {data_dir} could not be read as an image folder: {detail}") from err
    elif name is None or is_builtin_dataset(name):
        ds = load_builtin_dataset(name or data.default_dataset, split, max_samples=max_samples, seed=data.seed)
        max_samples = None
    elif os.path.isdir(name) and os.path.exists(os.path.join(name, "dataset_info.json")):
        ds = _load_from_disk(name)
    elif os.path.isdir(name) and os.path.exists(os.path.join(name, "dataset_dict.json")):
        splits = _load_from_disk(name)
        if split not in splits:
            raise ValueError(f"--dataset_name: {name} has the splits {sorted(splits)}, not {split!r}")
        ds = splits[split]
    else:
        try:
            ds = datasets.load_dataset(name, data.dataset_config_name, cache_dir=data.cache_dir, split=split)
        except OSError as err:  # not on the Hub, or offline and not cached (ConnectionError is an OSError)
            raise FileNotFoundError(
                f"--dataset_name: {name!r} is not a built-in data set ({', '.join(BUILTIN_DATASETS)}), a save_to_disk "
                f"folder, nor a data set the Hub serves here: {' '.join(str(err).split())}"
            ) from err
    if len(ds) == 0:  # the first example's columns were read later, in an IndexError
        flag, source = ("--train_data_dir", data_dir) if data_dir else ("--dataset_name", name)
        raise ValueError(f"{flag}: {source} holds no examples (split {split!r}); give a data set with at least a batch of them")
    if max_samples is not None:
        ds = ds.shuffle(seed=data.seed).select(range(min(max_samples, len(ds))))
    return ds


#: PIL modes of more than 8 bits a pixel and the value that maps to 1: read at their full depth (converting them to 8 bits
#: clips every value above 255), 16-bit pixels scaled by 65535 as 8-bit ones are by 255
DEEP_IMAGE_SCALES = {"I;16": 65535.0, "I;16L": 65535.0, "I;16B": 65535.0, "I;16N": 65535.0, "I": 65535.0}
#: integer array dtypes taken as pixels (mapped to [−1, 1] as images of that depth) and the value that maps to 1; float
#: arrays are x0 as stored
PIXEL_ARRAY_SCALES = {"uint8": 255.0, "uint16": 65535.0}


def image_channels(image) -> int:
    """The channels an image trains with: 1 for the grey-scale modes (8-bit, 1-bit, 16- and 32-bit), else 3."""
    return 1 if image.mode in ("L", "1") or image.mode in DEEP_IMAGE_SCALES else 3


def pixel_image(image, channels: int):
    """``(image, scale)``: a PIL image in the mode its pixels are resized in and the pixel value that maps to 1.

    8-bit data (any mode but those below) as mode ``"L"`` (1 channel) or ``"RGB"`` (3), scale 255; 16-bit grey-scale
    (``I;16``) and 32-bit integer (``I``) images as mode ``"F"`` holding their values unclipped, scale 65535 (their
    channel repeated for 3). The one conversion training (:func:`image_transform`) and the profiles of ``infonoise``
    (:func:`image_x0`) read pixels through.

    Raises:
        ValueError: a float image (mode ``"F"``: no pixel range to map onto [−1, 1]), or an ``"I"`` image with values
            outside 0..65535.
    """
    if image.mode == "F":
        raise ValueError(
            "a float image (PIL mode 'F') has no pixel range to map onto [-1, 1]; store its values as a datasets "
            "Array2D/Array3D column of floats instead, which is trained on as stored"
        )
    if image.mode in DEEP_IMAGE_SCALES:
        scale = DEEP_IMAGE_SCALES[image.mode]
        low, high = image.getextrema()
        if low < 0 or high > scale:
            raise ValueError(f"a 32-bit integer image (PIL mode 'I') with values in [{low}, {high}]; pixels are read in 0..{scale:.0f}")
        return image.convert("F"), scale
    return image.convert({1: "L", 3: "RGB"}[channels]), 255.0


def pixels_x0(pixels: np.ndarray, scale: float, channels: int) -> np.ndarray:
    """(channels, H, W) float32 x0 in [−1, 1] of a (H, W) or (H, W, C) pixel array of :func:`pixel_image`."""
    arr = np.asarray(pixels, dtype=np.float32) / np.float32(scale / 2) - 1.0
    arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
    if arr.shape[0] != channels:  # a grey-scale image of a 3-channel run
        arr = np.repeat(arr, channels, axis=0)
    return np.ascontiguousarray(arr)


def image_x0(image, channels: int | None = None) -> np.ndarray:
    """(C, H, W) float32 x0 in [−1, 1] of a PIL image, as training reads it (:func:`pixel_image`) before its resize;
    C = ``channels``, else :func:`image_channels`. Raises what :func:`pixel_image` raises."""
    channels = channels or image_channels(image)
    image, scale = pixel_image(image, channels)
    return pixels_x0(np.asarray(image), scale, channels)


def _load_from_disk(name: str):
    import datasets

    try:
        return datasets.load_from_disk(name)
    except IndexError:  # datasets' own reading of a saved data set of no rows (no table to concatenate)
        raise ValueError(f"--dataset_name: {name} holds no examples; give a data set with at least a batch of them") from None


def image_transform(
    resolution: int, *, center_crop: bool = False, random_flip: bool = False, channels: int = 1, binary: bool = False
) -> Callable:
    """PIL image → float32 tensor (channels, resolution, resolution) in [−1, 1] (no torchvision).

    Pixels are read by :func:`pixel_image` (8-bit data scaled by 255, 16-bit by 65535; float images refused); resize
    (bilinear, shorter side to ``resolution``), crop (center or random), optional horizontal
    flip; 1 channel or 3. ``binary``: data of two pixel values (0 and 255,
    :func:`~diffusers_infonoise.data.is_binary_dataset`) is thresholded at the midpoint after the resize,
    so that every value is −1 or 1 at any resolution (bilinear resampling alone leaves intermediate
    values, which the clean-end gate would read as a finer value grid). ``transform(image, rng, geometry=True)`` also
    returns SDXL's micro-conditioning: the original ``(height, width)`` and the crop's top-left
    ``(top, left)`` in the resized image (mirrored with the image when it is flipped).
    """
    from PIL import Image

    if channels not in (1, 3):
        raise ValueError(f"channels: accepted values are 1 and 3, got {channels}")

    def transform(image, rng: np.random.Generator | None = None, *, geometry: bool = False):
        rng = rng or np.random.default_rng()
        image, scale = pixel_image(image, channels)
        w, h = image.size
        original = (h, w)
        factor = resolution / min(w, h)
        image = image.resize((max(resolution, round(w * factor)), max(resolution, round(h * factor))), Image.BILINEAR)
        if binary:
            image = image.point(lambda v: 255 if v >= 128 else 0)
        w, h = image.size
        if center_crop:
            left, top = (w - resolution) // 2, (h - resolution) // 2
        else:
            left, top = int(rng.integers(0, w - resolution + 1)), int(rng.integers(0, h - resolution + 1))
        image = image.crop((left, top, left + resolution, top + resolution))
        if random_flip and rng.random() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
            left = w - left - resolution  # the crop's corner in the mirrored image
        out = torch.from_numpy(pixels_x0(np.asarray(image), scale, channels))
        return (out, original, (top, left)) if geometry else out

    return transform


def binary_data(data: DataConfig) -> bool:
    """Whether ``data`` is a built-in binarized data set (:func:`~diffusers_infonoise.data.is_binary_dataset`),
    which :func:`image_transform` keeps binary at every resolution."""
    from ..data import is_binary_dataset

    return not data.train_data_dir and is_binary_dataset(data.dataset_name or data.default_dataset)


DEFAULT_CAPTIONED_DATASET = "fashion_mnist"


def load_captioned_dataset(data: DataConfig):
    """The training ``datasets.Dataset`` of :func:`load_image_dataset`, checked for the image and
    caption columns (``ValueError`` naming the columns there are, or an image column of no images:
    :func:`check_image_column`)."""
    ds = load_image_dataset(data)
    for flag, col in (("--image_column", data.image_column), ("--caption_column", data.caption_column)):
        if col not in ds.column_names:
            raise ValueError(f"{flag}: {col!r} is not a column of the data set; its columns are {ds.column_names}")
    check_image_column(ds, data.image_column, arrays=False)
    return ds


class AugmentedImageDataset(torch.utils.data.Dataset):
    """(C, R, R) float32 images in [−1, 1] from an image column, through :func:`image_transform`.

    The random crop and flip depend only on ``(seed, epoch, index)``, not on a global random state:
    the same examples whatever ``--dataloader_num_workers`` is (each worker would otherwise carry a
    copy of one generator and repeat the others' augmentations), and a resumed run sees the
    uninterrupted one's. Call :meth:`set_epoch` at each epoch.
    """

    def __init__(
        self,
        dataset,
        *,
        image_column: str,
        resolution: int,
        center_crop: bool = False,
        random_flip: bool = False,
        seed: int = 0,
        channels: int = 1,
        binary: bool = False,
    ):
        self.dataset, self.image_column = dataset, image_column
        self.transform = image_transform(resolution, center_crop=center_crop, random_flip=random_flip, channels=channels, binary=binary)
        self.seed, self.epoch = int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def _rng(self, index: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.epoch, int(index)])

    def _example(self, index: int) -> dict:
        """Example ``index`` of the data set, its image decoded (``datasets`` decodes on access).

        Raises:
            ValueError: the image cannot be read (a corrupt, empty or missing file: PIL's and the file system's
                errors), naming the example and what to fix, instead of a traceback from inside PIL.
        """
        try:
            return self.dataset[int(index)]
        except (OSError, ValueError, SyntaxError) as err:  # PIL.UnidentifiedImageError is an OSError
            raise ValueError(
                f"training example {index}: its image cannot be read ({' '.join(str(err).split())}); fix or remove that "
                "file (--train_data_dir) or example (--dataset_name)"
            ) from err

    def __getitem__(self, index: int):
        return self.transform(self._example(index)[self.image_column], self._rng(index))


class CaptionedImageDataset(AugmentedImageDataset):
    """``{"pixel_values": (3, R, R) float32 in [−1, 1], "caption": str, "original_size": (h, w),
    "crop_top_left": (top, left)}`` examples of a captioned data set (the sizes: :func:`image_transform`).

    As :class:`AugmentedImageDataset`; the choice among several captions also depends only on
    ``(seed, epoch, index)``. Images are converted to RGB (the built-in sets are grayscale).
    """

    def __init__(
        self,
        dataset,
        *,
        image_column: str,
        caption_column: str,
        resolution: int,
        center_crop: bool = False,
        random_flip: bool = False,
        seed: int = 0,
        binary: bool = False,
    ):
        super().__init__(
            dataset,
            image_column=image_column,
            resolution=resolution,
            center_crop=center_crop,
            random_flip=random_flip,
            seed=seed,
            channels=3,
            binary=binary,
        )
        self.caption_column = caption_column

    def __getitem__(self, index: int) -> dict:
        example = self._example(index)
        rng = self._rng(index)
        caption = example[self.caption_column]
        if isinstance(caption, (list, tuple, np.ndarray)) and len(caption) > 0:
            caption = caption[int(rng.integers(len(caption)))]
        if not isinstance(caption, str):
            raise ValueError(
                f"--caption_column {self.caption_column!r}: example {index} holds {type(caption).__name__}, "
                "expected a string or a list of strings"
            )
        pixels, original, corner = self.transform(example[self.image_column], rng, geometry=True)
        return {"pixel_values": pixels, "caption": caption, "original_size": original, "crop_top_left": corner}


class EpochShuffleSampler(torch.utils.data.Sampler):
    """A permutation of ``range(n)`` seeded by ``(seed, epoch)``; the same on every process.

    accelerate shards its batches across processes and ``skip_first_batches`` replays it exactly,
    so a resumed run continues with the batches the interrupted one would have seen.
    """

    def __init__(self, n: int, seed: int = 0):
        self.n, self.seed, self.epoch = int(n), int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())


def collate_captioned(examples: list[dict]) -> dict:
    """Stack ``pixel_values`` (B, 3, R, R); list the captions, original sizes and crop corners."""
    return {
        "pixel_values": torch.stack([ex["pixel_values"] for ex in examples]).contiguous(),
        "captions": [ex["caption"] for ex in examples],
        "original_sizes": [ex["original_size"] for ex in examples],
        "crop_top_lefts": [ex["crop_top_left"] for ex in examples],
    }


def batch_loader(
    dataset, data: DataConfig, *, collate_fn: Callable | None = None
) -> tuple[torch.utils.data.DataLoader, "EpochShuffleSampler"]:
    """The training DataLoader of ``dataset`` (``drop_last``) and its batch order, seeded by
    ``(data.seed, epoch)``: a resumed run continues with the batches the interrupted one would have seen.

    Raises:
        ValueError: ``--train_batch_size`` larger than the data set.
    """
    if len(dataset) < data.train_batch_size:
        raise ValueError(
            f"--train_batch_size {data.train_batch_size} is larger than the data set ({len(dataset)} examples; see --max_train_samples)"
        )
    order = EpochShuffleSampler(len(dataset), seed=data.seed)
    # its own generator: creating an iterator then draws the worker base seed from it, not from the
    # global random state, which a resumed run must find exactly as the interrupted one left it
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=data.train_batch_size,
        sampler=order,
        collate_fn=collate_fn,
        num_workers=data.dataloader_num_workers,
        drop_last=True,
        generator=torch.Generator().manual_seed(data.seed),
    )
    return loader, order


def captioned_dataloader(data: DataConfig) -> tuple[torch.utils.data.DataLoader, CaptionedImageDataset, EpochShuffleSampler]:
    """The training DataLoader (``drop_last``) with its dataset and sampler (both take ``set_epoch``)."""
    ds = CaptionedImageDataset(
        load_captioned_dataset(data),
        image_column=data.image_column,
        caption_column=data.caption_column,
        resolution=data.resolution,
        center_crop=data.center_crop,
        random_flip=data.random_flip,
        seed=data.seed,
        binary=binary_data(data),
    )
    loader, order = batch_loader(ds, data, collate_fn=collate_captioned)
    return loader, ds, order


def unconditional_dataset(
    data: DataConfig, *, sequence_column: str | None = None, alphabet: str = "ACGT"
) -> tuple[torch.utils.data.Dataset, Callable | None, int, int | None]:
    """The training examples of ``train_unconditional.py``; returns ``(dataset, collate_fn, channels, length)``.

    Images: (C, R, R) float32 in [−1, 1] (:class:`AugmentedImageDataset`; C = 1 for grey-scale modes,
    else 3), ``length`` None. Arrays (an image column of ``datasets.Array2D`` (R, R) or ``Array3D`` (C, R, R)
    floats, e.g. latents, dequantized or rescaled data): float32 x0 as stored, in the model's own units (no
    mapping to [−1, 1], no resize, crop or flip); uint8/uint16 arrays are pixels, mapped to [−1, 1] as images
    of that depth (:func:`array_pixel_scale`); ``length`` None. Sequences (``sequence_column``): one-hot
    (len(alphabet), L) in {−1, 1} (:func:`diffusers_infonoise.data.one_hot_sequences`), ``length`` = L.

    Raises:
        ValueError: the column is not in the data set (naming the columns there are) or holds neither images
            nor arrays (:func:`check_image_column`); arrays whose size is not ``--resolution``, of another integer
            dtype than uint8/uint16, that hold a non-finite value, or with ``--random_flip``.
    """

    from ..data import one_hot_sequences

    dataset = load_image_dataset(data)
    column, flag = (sequence_column, "--sequence_column") if sequence_column else (data.image_column, "--image_column")
    if column not in dataset.column_names:
        raise ValueError(f"{flag}: {column!r} is not a column of the data set {dataset.column_names}")
    if sequence_column:
        # one-hot once (a few MB for tens of thousands of short sequences); batches index into it
        encoded = one_hot_sequences(dataset[sequence_column], alphabet)
        return torch.utils.data.TensorDataset(encoded), _stack_first, encoded.shape[1], encoded.shape[2]
    check_image_column(dataset, column)
    if is_array_column(dataset, column):
        arrays = _x0_arrays(dataset.with_format("numpy")[column], data, scale=array_pixel_scale(dataset, column))
        return torch.utils.data.TensorDataset(arrays), _stack_first, arrays.shape[1], None
    channels = image_channels(dataset[0][column])
    images = AugmentedImageDataset(
        dataset,
        image_column=column,
        resolution=data.resolution,
        center_crop=data.center_crop,
        random_flip=data.random_flip,
        seed=data.seed,
        channels=channels,
        binary=binary_data(data),
    )
    return images, None, channels, None


def is_array_column(dataset, column: str) -> bool:
    """Whether ``column`` of a ``datasets.Dataset`` holds x0 arrays in the model's own units (a ``datasets.Array2D``
    (R, R) or ``Array3D`` (C, R, R) feature: latents, dequantized or rescaled data), which training and the profiles
    of ``infonoise`` take as stored; any other image column is pixels, mapped to [−1, 1]."""
    import datasets

    return isinstance(dataset.features.get(column), (datasets.Array2D, datasets.Array3D))


def array_pixel_scale(dataset, column: str) -> float | None:
    """The value that maps to 1 of an array column (:func:`is_array_column`) of pixels (uint8: 255, uint16: 65535,
    as images of that depth: x0 = value / (scale / 2) − 1), or None for float arrays, x0 as stored.

    Raises:
        ValueError: arrays of another dtype (other integers, bool), led by ``--image_column``.
    """
    dtype = str(dataset.features[column].dtype)
    if dtype in PIXEL_ARRAY_SCALES:
        return PIXEL_ARRAY_SCALES[dtype]
    if dtype.startswith("float"):
        return None
    raise ValueError(
        f"--image_column {column!r}: arrays of {dtype}; accepted: float arrays (x0 as stored, in the model's units) or "
        f"{'/'.join(PIXEL_ARRAY_SCALES)} pixels (mapped to [-1, 1]); cast the column to one of them"
    )


def array_x0(values, scale: float | None) -> np.ndarray:
    """float32 x0 of arrays: as stored (``scale`` None) or pixels mapped to [−1, 1] (:func:`array_pixel_scale`)."""
    x = np.ascontiguousarray(np.asarray(values, dtype=np.float32))
    return x if scale is None else x / np.float32(scale / 2) - 1.0


def check_image_column(dataset, column: str, *, arrays: bool = True) -> None:
    """``column`` of a (non-empty) ``datasets.Dataset`` holds images (a ``datasets.Image`` feature, or PIL images), or
    with ``arrays`` x0 arrays (:func:`is_array_column`); its first image is one training reads (:func:`pixel_image`).

    Raises:
        ValueError: anything else (strings, numbers: file paths need ``dataset.cast_column(column, datasets.Image())``),
            or an image :func:`pixel_image` refuses, led by ``--image_column``.
    """
    import datasets
    from PIL import Image

    if arrays and is_array_column(dataset, column):
        return
    first = dataset[0][column]
    if not isinstance(dataset.features.get(column), datasets.Image) and not isinstance(first, Image.Image):
        holds = f"{type(first).__name__} values such as {str(first)[:40]!r}"
        raise ValueError(
            f"--image_column {column!r}: holds {holds}, not images (a datasets Image column; a column of file paths: cast it "
            f"with dataset.cast_column({column!r}, datasets.Image()))" + (" or Array2D/Array3D arrays" if arrays else "")
        )
    try:
        pixel_image(first, image_channels(first))
    except ValueError as err:
        raise ValueError(f"--image_column {column!r}: example 0: {err}") from None


def _x0_arrays(values, data: DataConfig, *, scale: float | None = None) -> torch.Tensor:
    """(N, C, R, R) float32 training x0 from an array column, checked against the run's flags; ``scale``: pixels
    (:func:`array_pixel_scale`) mapped to [−1, 1]."""
    x = torch.from_numpy(array_x0(values, scale))
    x = x[:, None] if x.ndim == 3 else x
    if x.ndim != 4 or tuple(x.shape[-2:]) != (data.resolution, data.resolution):
        raise ValueError(
            f"--resolution {data.resolution}: the arrays of --image_column {data.image_column!r} have shape "
            f"{tuple(x.shape[1:])}; arrays are trained on as they are (no resize): pass --resolution {x.shape[-1]}"
        )
    if data.random_flip:
        raise ValueError("--random_flip: not applied to array data (x0 is trained on as stored); drop the flag")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"--image_column {data.image_column!r}: the arrays hold a non-finite value")
    return x


def _stack_first(examples: list) -> torch.Tensor:
    return torch.stack([ex[0] for ex in examples])
