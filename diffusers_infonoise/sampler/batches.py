"""What a ``"profile"`` start measures a model on (METHOD.md §5.9): the training batches (their size, the clean data x0
in them, an endless stream of them; any batch a training loop gets: a tensor, a dict of tensors, a tuple starting
with one) and the noise levels, stratified over the sampler's bins, on this process's share of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from ..data_statistics import DataStatistics, ValueTally
from ..logs import get_logger

logger = get_logger(__name__)

__all__ = [
    "batch_size_of",
    "clean_data_of",
    "X0_BATCH_KEYS",
    "batch_stream",
    "batch_device",
    "stratified_levels",
    "world",
    "ForwardPasses",
    "forward_passes",
]


def batch_size_of(batch) -> int:
    """The number of examples in a training batch: a tensor, a dict of tensors (and lists), or a tuple/list whose
    first item is one.

    Raises:
        ValueError: a batch with no tensor in it.
    """
    if torch.is_tensor(batch):
        return batch.shape[0]
    if isinstance(batch, dict):
        for value in batch.values():
            if torch.is_tensor(value):
                return value.shape[0]
    elif isinstance(batch, (tuple, list)) and batch:
        return batch_size_of(batch[0])
    raise ValueError(f"batch: expected a tensor, a dict of tensors or a tuple starting with one, got {type(batch).__name__}")


#: the keys of a dict batch that hold the clean data x0 a loss noises: diffusers' ``train_unconditional.py`` ("input"),
#: cached latents ("latents", "model_input"). Not ``pixel_values``: a latent model noises the VAE's latents of them
X0_BATCH_KEYS = ("input", "x0", "latents", "model_input")


def clean_data_of(batch) -> torch.Tensor | None:
    """The clean data x0 in a training batch, when it is there unambiguously: the batch itself (a floating-point
    tensor of shape (B, ...)), the first item of a tuple/list, or the one entry of a dict under a key of
    :data:`X0_BATCH_KEYS`; None otherwise (a dict of pixels that a latent model encodes first, of several such
    keys, or of none)."""

    def usable(t) -> bool:
        return torch.is_tensor(t) and t.is_floating_point() and t.ndim >= 2

    if isinstance(batch, dict):
        found = [batch[k] for k in X0_BATCH_KEYS if usable(batch.get(k))]
        return found[0] if len(found) == 1 else None
    if isinstance(batch, (tuple, list)) and batch:
        batch = batch[0]
    return batch if usable(batch) else None


def batch_stream(batches: Iterable):
    """Batches without end (a profile start's): a re-iterable (a DataLoader, a list) is iterated again when it runs out; a one-shot iterator
    is read once and the batches it gave are cycled (kept until the stream is closed).

    Raises:
        ValueError: ``batches`` yields no batch.
    """
    from collections.abc import Iterator

    if isinstance(batches, Iterator):
        kept = []
        for batch in batches:
            kept.append(batch)
            yield batch
        if not kept:
            raise ValueError("batches: the iterator yielded no batch to measure the model on (already used up?)")
        logger.info(f"noise sampler profile start: the batches ran out after {len(kept)} (a one-shot iterator); cycling over them")
        while True:
            yield from kept
    while True:
        empty = True
        for batch in batches:
            empty = False
            yield batch
        if empty:
            raise ValueError("batches: yielded no batch to measure the model on")


def batch_device(batch):
    if torch.is_tensor(batch):
        return batch.device
    values = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (tuple, list)) else ()
    for value in values:
        if torch.is_tensor(value):
            return value.device
    return None


def stratified_levels(sampler, samples_per_bin: int, *, generator: torch.Generator | None = None):
    """``samples_per_bin`` noise levels in every bin of ``sampler``'s grid, uniform in log σ inside the bin
    (VP: among the integer steps whose σ lies in it; a bin with none, or only the σ = inf step, gets none):
    the levels of a ``"profile"`` start (METHOD.md §5.9), not drawn from the base density, so that no bin is
    left empty. Returns :class:`~diffusers_infonoise.NoiseLevels` (CPU), ordered bin by bin.
    """
    edges = sampler.estimator.edges
    k = edges.numel() - 1
    if sampler.path.is_discrete:
        table = sampler.path.sigmas_table
        finite = torch.isfinite(table)
        bins = sampler.estimator.bin_index(torch.log(table))
        picks = []
        for b in range(k):
            steps = torch.nonzero((bins == b) & finite).flatten()
            if steps.numel():
                picks.append(steps[torch.randint(steps.numel(), (samples_per_bin,), generator=generator)])
        t = torch.cat(picks) if picks else torch.zeros(0, dtype=torch.int64)
        return sampler._levels_at(table[t], timesteps=t)
    u = torch.rand(k, samples_per_bin, generator=generator, dtype=torch.float64)
    log_sigma = edges[:-1, None] + u * (edges[1:] - edges[:-1])[:, None]
    return sampler._levels_at(torch.exp(log_sigma.flatten()))


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of the ``torch.distributed`` process group; ``(0, 1)`` without one."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@dataclass
class ForwardPasses:
    """What the forward passes of a profile start saw on this process (:func:`forward_passes`).

    Attributes:
        samples: the losses measured.
        shown: whether ``loss_fn`` showed the sampler its data (``sampler.add_noise`` or ``sampler.observe_data``).
        batch_data: the batches' own x0 (:func:`clean_data_of`), observed when ``loss_fn`` showed none.
        nonfinite: losses that were NaN/inf (or negative), left out of the estimate.
        nonfinite_sigmas: their VE σ (float64), or None.
    """

    samples: int
    shown: bool
    batch_data: DataStatistics
    nonfinite: int
    nonfinite_sigmas: torch.Tensor | None


def forward_passes(
    sampler, loss_fn: Callable, stream, first, levels, num_passes: int, *, progress: bool, tally: ValueTally | None = None
) -> ForwardPasses:
    """``num_passes`` calls of ``loss_fn(batch, levels)`` on the batches of ``stream`` (``first`` is its first), each at
    the next of ``levels`` (this process's share, cycled), every loss given to ``sampler.update``; closes ``stream``.
    ``progress``: a progress bar (tqdm). ``tally``: also given the batches' own x0 when ``loss_fn`` shows none (what
    it shows reaches the sampler's ``value_tally``)."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=num_passes, desc="InfoNoise profile start (forward passes)", leave=False)
    fed = DataStatistics()  # the batches' x0, when loss_fn shows the sampler none
    shown = False
    nonfinite, bad_sigmas = 0, []
    done = 0
    batch = first
    for passes in range(1, num_passes + 1):
        size = batch_size_of(batch)
        lv = levels[(done + torch.arange(size)) % max(1, len(levels))]
        device = batch_device(batch)
        observed = sampler.num_observed
        loss = loss_fn(batch, lv.to(device) if device is not None else lv)
        if sampler.num_observed != observed:
            shown = True
        elif (x0 := clean_data_of(batch)) is not None:
            fed.observe(x0)
            if tally is not None:
                tally.observe(x0)
        bad = (~torch.isfinite(loss.detach()) | (loss.detach() < 0)).cpu()  # one read-back a pass: not the training loop
        if bool(bad.any()):
            nonfinite += int(bad.sum())
            bad_sigmas.append(lv.sigmas[bad])
        sampler.update(lv.to(loss.device), loss)
        done += size
        if bar is not None:
            bar.update(1)
        if passes < num_passes:
            batch = next(stream)
    stream.close()
    if bar is not None:
        bar.close()
    return ForwardPasses(done, shown, fed, nonfinite, torch.cat(bad_sigmas).double() if bad_sigmas else None)
