"""The scripts' data: image data sets (built-in, Hub, folder), the transform, augmentation seeded
by (seed, epoch, index), captioned data and the epoch-seeded batch order."""

from __future__ import annotations

import logging
import os
from typing import Callable

import numpy as np
import torch

logger = logging.getLogger(__name__)

__all__ = [
    "load_image_dataset",
    "image_transform",
    "DEFAULT_CAPTIONED_DATASET",
    "load_captioned_dataset",
    "AugmentedImageDataset",
    "CaptionedImageDataset",
    "EpochShuffleSampler",
    "collate_captioned",
    "captioned_dataloader",
]


def load_image_dataset(args, *, split: str = "train"):
    """A ``datasets.Dataset`` from ``--dataset_name`` (a built-in offline name, a Hub name, a local
    ``save_to_disk`` directory) or ``--train_data_dir`` (an image folder); MNIST when neither is set.

    Raises:
        ValueError: both or a bad name; FileNotFoundError (with the install command) for a missing asset.
    """
    import datasets

    from ..data import is_builtin_dataset, load_builtin_dataset

    name = getattr(args, "dataset_name", None)
    data_dir = getattr(args, "train_data_dir", None)
    if name and data_dir:
        raise ValueError("--dataset_name and --train_data_dir: give one of them, not both")
    max_samples = getattr(args, "max_train_samples", None)
    if data_dir:
        ds = datasets.load_dataset("imagefolder", data_dir=data_dir, cache_dir=args.cache_dir, split="train")
    elif name is None or is_builtin_dataset(name):
        ds = load_builtin_dataset(name or "mnist", split, max_samples=max_samples, seed=args.seed or 0)
        max_samples = None
    elif os.path.isdir(name) and os.path.exists(os.path.join(name, "dataset_info.json")):
        ds = datasets.load_from_disk(name)
    elif os.path.isdir(name) and os.path.exists(os.path.join(name, "dataset_dict.json")):
        ds = datasets.load_from_disk(name)[split]
    else:
        ds = datasets.load_dataset(name, getattr(args, "dataset_config_name", None), cache_dir=args.cache_dir, split=split)
    if max_samples is not None:
        ds = ds.shuffle(seed=args.seed or 0).select(range(min(max_samples, len(ds))))
    return ds


def image_transform(resolution: int, *, center_crop: bool = False, random_flip: bool = False, channels: int = 1) -> Callable:
    """PIL image → float32 tensor (channels, resolution, resolution) in [−1, 1] (no torchvision).

    Resize (bilinear, shorter side to ``resolution``), crop (center or random), optional horizontal
    flip; mode ``"L"`` for 1 channel, ``"RGB"`` for 3.
    """
    from PIL import Image

    mode = {1: "L", 3: "RGB"}.get(channels)
    if mode is None:
        raise ValueError(f"channels: accepted values are 1 and 3, got {channels}")

    def transform(image, rng: np.random.Generator | None = None):
        rng = rng or np.random.default_rng()
        image = image.convert(mode)
        w, h = image.size
        scale = resolution / min(w, h)
        image = image.resize((max(resolution, round(w * scale)), max(resolution, round(h * scale))), Image.BILINEAR)
        w, h = image.size
        if center_crop:
            left, top = (w - resolution) // 2, (h - resolution) // 2
        else:
            left, top = int(rng.integers(0, w - resolution + 1)), int(rng.integers(0, h - resolution + 1))
        image = image.crop((left, top, left + resolution, top + resolution))
        if random_flip and rng.random() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        arr = np.asarray(image, dtype=np.float32) / 127.5 - 1.0
        arr = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
        return torch.from_numpy(np.ascontiguousarray(arr))

    return transform


DEFAULT_CAPTIONED_DATASET = "fashion_mnist"


def load_captioned_dataset(args):
    """The training ``datasets.Dataset`` of :func:`load_image_dataset`, checked for the image and
    caption columns (``ValueError`` naming the columns there are)."""
    ds = load_image_dataset(args)
    for flag, col in (("--image_column", args.image_column), ("--caption_column", args.caption_column)):
        if col not in ds.column_names:
            raise ValueError(f"{flag}: {col!r} is not a column of the data set; its columns are {ds.column_names}")
    return ds


class AugmentedImageDataset(torch.utils.data.Dataset):
    """(C, R, R) float32 images in [−1, 1] from an image column, through :func:`image_transform`.

    The random crop and flip depend only on ``(seed, epoch, index)``, not on a global random state:
    the same examples whatever ``--dataloader_num_workers`` is (each worker would otherwise carry a
    copy of one generator and repeat the others' augmentations), and a resumed run sees the
    uninterrupted one's. Call :meth:`set_epoch` at each epoch.
    """

    def __init__(self, dataset, *, image_column: str, resolution: int, center_crop: bool = False,
                 random_flip: bool = False, seed: int = 0, channels: int = 1):
        self.dataset, self.image_column = dataset, image_column
        self.transform = image_transform(resolution, center_crop=center_crop, random_flip=random_flip, channels=channels)
        self.seed, self.epoch = int(seed), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def _rng(self, index: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.epoch, int(index)])

    def __getitem__(self, index: int):
        return self.transform(self.dataset[int(index)][self.image_column], self._rng(index))


class CaptionedImageDataset(AugmentedImageDataset):
    """``{"pixel_values": (3, R, R) float32 in [−1, 1], "caption": str}`` examples of a captioned data set.

    As :class:`AugmentedImageDataset`; the choice among several captions also depends only on
    ``(seed, epoch, index)``. Images are converted to RGB (the built-in sets are grayscale).
    """

    def __init__(self, dataset, *, image_column: str, caption_column: str, resolution: int, center_crop: bool = False,
                 random_flip: bool = False, seed: int = 0):
        super().__init__(dataset, image_column=image_column, resolution=resolution, center_crop=center_crop,
                         random_flip=random_flip, seed=seed, channels=3)
        self.caption_column = caption_column

    def __getitem__(self, index: int) -> dict:
        example = self.dataset[int(index)]
        rng = self._rng(index)
        caption = example[self.caption_column]
        if isinstance(caption, (list, tuple, np.ndarray)) and len(caption) > 0:
            caption = caption[int(rng.integers(len(caption)))]
        if not isinstance(caption, str):
            raise ValueError(f"--caption_column {self.caption_column!r}: example {index} holds {type(caption).__name__}, "
                             "expected a string or a list of strings")
        return {"pixel_values": self.transform(example[self.image_column], rng), "caption": caption}


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
    """Stack ``pixel_values`` (B, 3, R, R) and list the captions."""
    return {"pixel_values": torch.stack([ex["pixel_values"] for ex in examples]).contiguous(),
            "captions": [ex["caption"] for ex in examples]}


def captioned_dataloader(args) -> tuple[torch.utils.data.DataLoader, CaptionedImageDataset, EpochShuffleSampler]:
    """The training DataLoader (``drop_last``) with its dataset and sampler (both take ``set_epoch``)."""
    ds = CaptionedImageDataset(load_captioned_dataset(args), image_column=args.image_column,
                               caption_column=args.caption_column, resolution=args.resolution,
                               center_crop=args.center_crop, random_flip=args.random_flip, seed=args.seed or 0)
    if len(ds) < args.train_batch_size:
        raise ValueError(f"--train_batch_size {args.train_batch_size} is larger than the data set ({len(ds)} examples)")
    order = EpochShuffleSampler(len(ds), seed=args.seed or 0)
    # its own generator: creating an iterator then draws the worker base seed from it, not from the
    # global random state, which a resumed run must find exactly as the interrupted one left it
    loader = torch.utils.data.DataLoader(ds, batch_size=args.train_batch_size, sampler=order, collate_fn=collate_captioned,
                                         num_workers=args.dataloader_num_workers, drop_last=True,
                                         generator=torch.Generator().manual_seed(args.seed or 0))
    return loader, ds, order
