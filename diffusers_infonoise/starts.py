"""Starting adapted (METHOD.md §5.9): where an InfoNoise run's estimate begins.

Three starts, one estimator; a start never changes steps 4–8 of METHOD.md §5, only where they begin:

* ``"base"``: the warm-up on the base density, then estimates from the run's own losses (from scratch);
* ``"stored"``: a schedule someone learned (the pretrained scheduler's, or one shared through a folder or
  the Hub): its m̂, an x0-space error, rebuilt into π for this run's loss, weighting, floor, gate and bins
  (:meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.load_schedule`);
* ``"profile"``: the pretrained model's own x0 error on the run's training data, measured before step 1 at
  levels stratified over the grid (:func:`start_from_model`).

``"auto"`` chooses (:func:`choose_start`): ``stored`` when the pretrained scheduler carries a schedule of
this run's path, ``profile`` when a pretrained model is given, else ``base``. In a loop of your own::

    start = choose_start("auto", sampler, stored=read_schedule(pretrained_scheduler), pretrained_model=True)
    apply_start(sampler, start, loss_fn=per_sample_loss, batches=train_dataloader)   # before step 1

where ``per_sample_loss(batch, levels)`` is what the training loop computes: the model's (B,) unweighted
per-sample loss in its own parameterization at ``levels`` (noise the batch with ``sampler.add_noise``, or
call ``sampler.observe_data`` on it, so that the m̂ cap and the gate see the data; a loss that noises by hand
and shows none gets the batch itself observed when the batch is x0, :func:`start_from_model`).

The start is recorded in the sampler (``sampler.start_record``, :func:`describe_start`), once, before step 1: it
is kept through checkpoints and resumes and written into the stored schedule (``start``).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from .data_statistics import DataStatistics
from .logs import get_logger

__all__ = [
    "START_CHOICES",
    "PROFILE_SHARE",
    "SamplerStart",
    "choose_start",
    "apply_start",
    "stratified_levels",
    "start_from_model",
    "batch_size_of",
    "clean_data_of",
    "describe_start",
    "X0_BATCH_KEYS",
]

logger = get_logger(__name__)

#: the values of ``--infonoise_init`` (METHOD.md §5.9)
START_CHOICES = ("auto", "base", "stored", "profile")


@dataclass(frozen=True)
class SamplerStart:
    """A resolved start (:func:`choose_start`).

    Attributes:
        choice: ``"base"``, ``"stored"`` or ``"profile"``.
        reason: why, in words (logged).
        payload: the stored schedule of a ``"stored"`` start (a validated payload), else None.
        source: where that schedule was read from, for the log.
    """

    choice: str
    reason: str
    payload: dict | None = None
    source: str | None = None


def choose_start(
    init: str, sampler, *, stored: dict | None = None, source: str | None = None, pretrained_model: bool = False
) -> SamplerStart:
    """Resolve ``init`` (:data:`START_CHOICES`) for ``sampler``.

    Args:
        init: ``"auto"``, ``"base"``, ``"stored"`` or ``"profile"``.
        sampler: the run's sampler; only an InfoNoise sampler starts other than from its base.
        stored: the stored schedule to start from (a validated payload: the pretrained scheduler's, or one
            read with :func:`~diffusers_infonoise.schedule_io.read_schedule_from`), or None.
        source: where ``stored`` came from (for the log).
        pretrained_model: whether the run starts from a pretrained model (its losses are informative at
            step 0, so a ``"profile"`` start can measure them).

    ``"auto"``: ``"stored"`` when ``stored`` is on this sampler's path and adapted (a schedule saved before its
    own warm-up ended holds no estimate), else ``"profile"`` when a pretrained model is given, else ``"base"``.

    Raises:
        ValueError: an unknown ``init``; ``"stored"`` without a stored schedule; ``"profile"`` without a
        pretrained model; ``"stored"``/``"profile"`` for a sampler that does not learn a schedule.
    """
    if init not in START_CHOICES:
        raise ValueError(f"init: accepted values are {', '.join(START_CHOICES)}, got {init!r}")
    adaptive = hasattr(sampler, "load_schedule")
    if not adaptive:
        if init in ("stored", "profile"):
            raise ValueError(
                f"init: {init!r} starts an InfoNoise sampler; the {sampler.name!r} sampler draws from a "
                "fixed density (use --noise_sampler infonoise, or init 'base')"
            )
        return SamplerStart("base", f"the {sampler.name} sampler has no schedule to start")
    if init == "stored" and stored is None:
        raise ValueError(
            "init: 'stored' needs a stored schedule, and this run has none (no pretrained scheduler carries one); pass one "
            "(--infonoise_schedule_from PATH_OR_REPO), or use 'profile' (a pretrained model) or 'base'"
        )
    if init == "profile" and not pretrained_model:
        raise ValueError(
            "init: 'profile' measures a pretrained model's errors before step 1, and this run has none "
            "(--pretrained_model_name_or_path); use 'base', or 'stored' with a stored schedule"
        )
    where = f" from {source}" if source else ""
    if init == "stored":
        return SamplerStart("stored", f"init 'stored': the schedule{where}", stored, source)
    if init == "profile":
        return SamplerStart("profile", "init 'profile': the pretrained model's errors on the training data")
    if init == "base":
        return SamplerStart("base", "init 'base': the warm-up on the base density")
    unadapted = stored is not None and stored.get("adapted") is False
    if stored is not None and not unadapted and stored["path"] == sampler.path.config():
        return SamplerStart("stored", f"init 'auto': the schedule{where} is for this run's path", stored, source)
    if pretrained_model:
        if unadapted:
            why = f"; the stored schedule{where} was saved before it adapted, so it holds no estimate"
        elif stored is not None:
            kind = stored["path"]["kind"]
            why = f"; the stored schedule{where} is for another path ({kind}), and 'stored' would convert it through VE sigma"
        else:
            why = ""
        return SamplerStart("profile", "init 'auto': a pretrained model is given, so its errors are measured" + why)
    return SamplerStart("base", "init 'auto': no pretrained model and no stored schedule (training from scratch)")


def apply_start(
    sampler,
    start: SamplerStart,
    *,
    loss_fn: Callable | None = None,
    batches: Iterable | None = None,
    samples_per_bin: int | str = "auto",
    progress: bool = True,
) -> dict:
    """Start ``sampler`` as ``start`` says, before step 1: nothing for ``"base"``, its
    ``load_schedule(start.payload, source=start.source)`` for ``"stored"``, :func:`start_from_model` (``loss_fn``,
    ``batches``, ``samples_per_bin``) for ``"profile"``. An adaptive sampler records the start
    (``sampler.start_record``; :meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.record_start`).
    Returns a description for the log (``{"start", ...}``).

    Raises:
        ValueError: a ``"profile"`` start without ``loss_fn`` and ``batches``; see :func:`start_from_model`.
    """
    if start.choice == "stored":
        sampler.load_schedule(start.payload, source=start.source)
        info = {"start": "stored", "source": start.source, "adapted": sampler.is_adapted}
    elif start.choice == "profile":
        if loss_fn is None or batches is None:
            raise ValueError("loss_fn, batches: a 'profile' start measures the model on training batches; give both")
        info = {"start": "profile", **start_from_model(sampler, loss_fn, batches, samples_per_bin=samples_per_bin, progress=progress)}
    else:
        info = {"start": "base"}
        if hasattr(sampler, "record_start"):
            sampler.record_start({"choice": "base"})
    logger.info(f"noise sampler start: {start.reason}; " + ", ".join(f"{k} {v}" for k, v in info.items() if k != "start"))
    return info


def describe_start(record: dict | None, *, with_choice: bool = True) -> str:
    """One line, in words, of a recorded start (``sampler.start_record``, or a stored schedule's ``start``): what
    ``infonoise show`` and the model cards say of how a run began (METHOD.md §5.9), e.g. ``"profile: the pretrained
    model's errors on 512 levels (8 a bin, 16 forward passes per process), before step 1"``; ``with_choice=False``
    leaves out the leading ``"profile: "``."""
    if not isinstance(record, dict) or record.get("choice") not in ("base", "stored", "profile"):
        return "not recorded (saved before the start was recorded)"
    choice = record["choice"]
    if choice == "base":
        text = "the warm-up on the base density (from scratch)"
    elif choice == "stored":
        steps = record.get("source_optimizer_steps")
        learned = f", learned over {steps} optimizer steps" if steps is not None else ""
        text = f"the schedule from {record.get('source') or 'a scheduler config'}{learned}, before step 1"
    else:
        data = {"batches": "; data statistics from the batches", "none": "; no training data seen"}.get(record.get("data"), "")
        bad = record.get("nonfinite_losses") or 0
        lost = f"; {bad} non-finite losses left out" if bad else ""
        text = (
            f"the pretrained model's errors on {record.get('levels', '?')} levels ({record.get('samples_per_bin', '?')} a bin, "
            f"{record.get('forward_passes', '?')} forward passes per process){data}{lost}, before step 1"
        )
    return f"{choice}: {text}" if with_choice else text


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


def stratified_levels(sampler, samples_per_bin: int, *, generator: torch.Generator | None = None):
    """``samples_per_bin`` noise levels in every bin of ``sampler``'s grid, uniform in log σ inside the bin
    (VP: among the integer steps whose σ lies in it; a bin with none, or only the σ = inf step, gets none):
    the levels of a ``"profile"`` start (METHOD.md §5.9), not drawn from the base density, so that no bin is
    left empty. Returns :class:`~diffusers_infonoise.NoiseLevels` (CPU), ordered bin by bin.
    """
    edges = sampler.edges
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
        return sampler.levels_at(table[t], timesteps=t)
    u = torch.rand(k, samples_per_bin, generator=generator, dtype=torch.float64)
    log_sigma = edges[:-1, None] + u * (edges[1:] - edges[:-1])[:, None]
    return sampler.levels_at(torch.exp(log_sigma.flatten()))


def _world() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


#: the most of a run's training compute a "profile" start spends by default. A training step counts as one forward
#: pass of its batch, not three (forward and backward): a profile pass measured 0.27-0.74 of a step's wall time on
#: the tiny stand-ins and the 16x16 UNet (benchmarks/results/profile_cost.json), not the 1/3 that three would assume
PROFILE_SHARE = 0.05


@torch.no_grad()
def start_from_model(sampler, loss_fn: Callable, batches: Iterable, *, samples_per_bin: int | str = "auto", progress: bool = True) -> dict:
    """The ``"profile"`` start (METHOD.md §5.9): measure the model's x0 error before step 1 and start from it.

    ``samples_per_bin`` levels in every bin (:func:`stratified_levels`, from the sampler's seed, the same on every
    rank) are given to ``loss_fn(batch, levels)`` on the training ``batches`` under ``torch.no_grad``: forward
    passes only. ``"auto"`` (default): the estimator's ``min_count``, fewer (at least
    1) when that would cost more than :data:`PROFILE_SHARE` of the run's training compute (``num_training_steps``
    of the sampler, this batch size and world size, a step counted as one forward pass; a LoRA run at batch 1 gets
    1 a bin, 64 passes against a 1000-step run's 1000 steps). A per-sample loss is a mean over every pixel or
    latent, so one sample a bin is already a usable estimate, and the bins are smoothed. Each per-sample loss goes through
    :meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.update`, the same §3 conversion and bins as
    training, with the cap V from this data; then one refresh with nothing to average (β = 0, and every bin that
    got its samples counts as filled) makes the measured m̂ the estimate, and π is built from it, without a
    warm-up (unless the sampler was given an explicit one). The online loop then continues from this m̂ with its
    usual EMA. Under data parallelism every rank measures its share (the same number of batches on each) and all
    hold the identical π afterwards. Call ``model.eval()`` first if the model behaves differently in training.

    ``batches``: any iterable of training batches. A DataLoader or a list is iterated again when it runs out; a
    one-shot iterator (a generator, ``iter(loader)``) is read once, and the batches it gave are cycled when it
    runs out (they are kept until the start ends: at most its forward passes, which the budget above bounds).

    The data (METHOD.md §5.4, §5.5): a ``loss_fn`` that noises through ``sampler.add_noise`` (or calls
    ``sampler.observe_data``) shows the sampler its x0. One that noises by hand (diffusers' flow scripts write
    ``(1 - s) * x0 + s * noise`` themselves) shows none; then the batch itself is observed when it holds x0
    unambiguously (:func:`clean_data_of`), and its statistics (V of the m̂ cap, the value grid of the gate) hold
    until the run's own data replaces them at its first refresh. A start that saw no data says so (``"data"``
    ``"none"`` and a logged warning): the gate then uses its fallback until the run's data reaches it.

    Losses that are not finite (NaN/inf) are left out of the estimate, as in training, and counted: a warning
    (``UserWarning``) names how many and at which VE σ; their bins are interpolated from the others.

    Returns:
        ``{"samples_per_bin", "forward_passes", "samples", "seconds", "filled_bins", "data", "nonfinite_losses",
        "tv_phi_rho"}`` (this rank's passes, samples and non-finite losses; ``data``: ``"loss_fn"``, ``"batches"``
        or ``"none"``, where the data statistics came from; ``nonfinite_sigma``: their VE σ range, when any).
        The sampler records the start (``sampler.start_record``).

    Raises:
        ValueError: ``samples_per_bin`` neither ``"auto"`` nor an int >= 1, ``batches`` that yield nothing, or a
        model none of whose losses (on any process) is finite.
    """
    if samples_per_bin != "auto" and (isinstance(samples_per_bin, bool) or not isinstance(samples_per_bin, int) or samples_per_bin < 1):
        raise ValueError(f"samples_per_bin: must be 'auto' or an int >= 1, got {samples_per_bin!r}")
    rank, world = _world()
    stream = _batch_stream(batches)
    first = next(stream)
    size = batch_size_of(first)
    n = samples_per_bin
    if n == "auto":
        n = sampler.estimator.min_count
        steps = getattr(sampler, "num_training_steps", None)
        if steps:
            affordable = int(PROFILE_SHARE * steps * size * world / sampler.estimator.num_bins)
            n = max(1, min(n, affordable))
    gen = torch.Generator().manual_seed(int(sampler.seed) * 1_000_003 + 17)
    levels = stratified_levels(sampler, n, generator=gen)
    mine = levels[torch.arange(rank, len(levels), world)]  # this rank's share, in a fixed order
    # every rank runs the same number of forward passes (DDP's forward may synchronise buffers)
    total_batches = max(1, math.ceil(math.ceil(len(levels) / world) / size))
    start = time.perf_counter()
    bar = None
    if progress and rank == 0:
        from tqdm.auto import tqdm

        bar = tqdm(total=total_batches, desc="InfoNoise profile start (forward passes)", leave=False)
    est = sampler.estimator
    est.merge()  # every rank: what was recorded before this start, so that the start's own count can be told apart
    counted_before = float(est.merged_counts.sum())
    fed = DataStatistics()  # the batches' x0, when loss_fn shows the sampler none
    shown = False
    nonfinite, bad_sigmas = 0, []
    done = 0
    batch = first
    for passes in range(1, total_batches + 1):
        size = batch_size_of(batch)
        lv = mine[(done + torch.arange(size)) % max(1, len(mine))]
        device = _batch_device(batch)
        observed = sampler.num_observed
        loss = loss_fn(batch, lv.to(device) if device is not None else lv)
        if sampler.num_observed != observed:
            shown = True
        elif (x0 := clean_data_of(batch)) is not None:
            fed.observe(x0)
        bad = (~torch.isfinite(loss.detach()) | (loss.detach() < 0)).cpu()  # one read-back a pass: not the training loop
        if bool(bad.any()):
            nonfinite += int(bad.sum())
            bad_sigmas.append(lv.sigmas[bad])
        sampler.update(lv.to(loss.device), loss)
        done += size
        if bar is not None:
            bar.update(1)
        if passes < total_batches:
            batch = next(stream)
    stream.close()
    if bar is not None:
        bar.close()
    est.merge()
    counted = float(est.merged_counts.sum()) - counted_before  # over every process: the same decision on every rank
    sig = torch.cat(bad_sigmas).double() if bad_sigmas else None
    where = f"VE sigma {float(sig.min()):.4g} to {float(sig.max()):.4g}" if sig is not None else ""
    if counted == 0:
        raise ValueError(
            f"loss_fn: none of the losses of the profile start was finite on any of {world} process(es) (here {nonfinite} of "
            f"{done} NaN/inf, at {where}): the pretrained model cannot be measured, nor trained from as it is; check its "
            "weights and the loss (dtype, parameterization, mixed precision), or start with init 'base'"
        )
    fed.resolve(freeze=True)  # every rank alike (a collective under data parallelism)
    sampler.set_provisional_data(fed.variance, fed.min_gap)
    data = "loss_fn" if shown else "batches" if fed.variance is not None or fed.min_gap is not None else "none"
    if nonfinite:
        warnings.warn(
            f"noise sampler profile start: {nonfinite} of {done} losses were not finite (NaN/inf) at {where} and were left "
            "out: the bins there hold no measurement, and pi there is interpolated from the others (METHOD.md 5.4). The model "
            "may be broken at those noise levels (a non-finite loss in training skips the step)",
            UserWarning,
            stacklevel=3,
        )
    sampler.start_adapted()
    sampler.refresh_now(ema_decay=0.0, min_count=n, what="pi from the pretrained model's profile")
    seconds = time.perf_counter() - start
    info = {
        "samples_per_bin": n,
        "forward_passes": total_batches,
        "samples": done,
        "seconds": round(seconds, 3),
        "filled_bins": sampler.estimator.num_filled,
        "data": data,
        "nonfinite_losses": nonfinite,
    }
    if sig is not None:
        info["nonfinite_sigma"] = [float(sig.min()), float(sig.max())]
    if sampler.is_adapted:
        info["tv_phi_rho"] = round(sampler.allocation_total_variation(), 4)
    record = {k: info[k] for k in ("samples_per_bin", "forward_passes", "filled_bins", "data", "nonfinite_losses")}
    sampler.record_start({"choice": "profile", "source": "the pretrained model", "levels": len(levels), **record})
    logger.info(
        f"noise sampler profile start: {total_batches} forward passes ({done} samples on this process, {n} a bin, "
        f"{len(levels)} levels over {world} process(es)) in {seconds:.1f} s; {info['filled_bins']} of "
        f"{sampler.estimator.num_bins} bins filled" + (f"; {nonfinite} non-finite losses left out ({where})" if nonfinite else "")
    )
    if data == "none":
        logger.warning(
            "noise sampler profile start: saw no training data: loss_fn showed none (sampler.add_noise or "
            "sampler.observe_data) and the batches hold no tensor that is x0 unambiguously (a tensor, a tuple's first item, "
            f"or a dict's {'/'.join(X0_BATCH_KEYS)}); the gate uses its fallback and the m_hat cap none until the run's "
            "data (sampler.observe_data(x0) each step) reaches them at its first refresh"
        )
    return info


def _batch_stream(batches: Iterable):
    """Batches without end: a re-iterable (a DataLoader, a list) is iterated again when it runs out; a one-shot iterator
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


def _batch_device(batch):
    if torch.is_tensor(batch):
        return batch.device
    values = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (tuple, list)) else ()
    for value in values:
        if torch.is_tensor(value):
            return value.device
    return None
