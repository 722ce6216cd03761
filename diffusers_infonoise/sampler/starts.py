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

This module is the policy: which start, and that it is applied once, before step 1. What a start does is the
sampler's (:meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.load_schedule`,
:meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.start_from_model`); the sampler records it
(``sampler.start_record``, :func:`describe_start`), and the record is kept through checkpoints and resumes and
written into the stored schedule (``start``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ..logs import get_logger
from .base import TrainingTimestepSampler

__all__ = [
    "START_CHOICES",
    "PROFILE_BOUNDS",
    "SamplerStart",
    "choose_start",
    "apply_start",
    "start_from_model",
    "describe_start",
]

logger = get_logger(__name__)

#: the values of ``--infonoise_init`` (METHOD.md §5.9)
START_CHOICES = ("auto", "base", "stored", "profile")
#: the values of ``--infonoise_profile_bound``: a profile start's m̂ kept as measured (``none``, the default) or bounded
#: by the data's per-element posterior mean (``data``; METHOD.md §5.10)
PROFILE_BOUNDS = ("none", "data")


@dataclass(frozen=True)
class SamplerStart:
    """A resolved start (:func:`choose_start`).

    Attributes:
        choice: ``"base"``, ``"stored"`` or ``"profile"``.
        reason: why, in words (logged).
        payload: the stored schedule of a ``"stored"`` start (a validated payload), else None.
        source: where that schedule was read from, for the log.
        data_bound: a ``"profile"`` start's m̂ bounded by the data's per-element posterior mean (default False;
            ``start_from_model``'s ``data_bound``, METHOD.md §5.10).
    """

    choice: str
    reason: str
    payload: dict | None = None
    source: str | None = None
    data_bound: bool = False

    @property
    def brings_estimate(self) -> bool:
        """Whether the start gives the sampler an adapted estimate before step 1, so that an automatic warm-up is
        skipped (:meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.plan_run`): a profile start, or a
        stored schedule saved after its own warm-up ended."""
        return self.choice == "profile" or (self.choice == "stored" and (self.payload or {}).get("adapted") is not False)


#: the log's source of a stored start given without ``source=``
UNNAMED_SOURCE = "the stored= schedule given to choose_start (source= names where it was read from)"


def choose_start(
    init: str, sampler: TrainingTimestepSampler, *, stored: dict | None = None, source: str | None = None, pretrained_model: bool = False
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
    if not sampler.learns_schedule:
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
    sampler: TrainingTimestepSampler,
    start: SamplerStart,
    *,
    loss_fn: Callable | None = None,
    batches: Iterable | None = None,
    samples_per_bin: int | str = "auto",
    progress: bool = True,
) -> dict:
    """Start ``sampler`` as ``start`` says, before step 1: nothing for ``"base"``, its
    ``load_schedule(start.payload, source=start.source)`` for ``"stored"``, its ``start_from_model`` (``loss_fn``,
    ``batches``, ``samples_per_bin``) for ``"profile"``. The sampler records the start (``sampler.start_record``;
    :meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.record_start`; a fixed density records nothing) and
    logs it, once: ``noise sampler start: <choice> (<reason>); <what it measured>``. Returns that description
    (``{"start", ...}``).

    Raises:
        ValueError: a ``"profile"`` start without ``loss_fn`` and ``batches``, a ``"stored"`` or ``"profile"`` start of
            a sampler that learns no schedule; see :func:`start_from_model`.
    """
    if start.choice == "stored":
        sampler.load_schedule(start.payload, source=start.source)
        # a payload handed to choose_start without source= (diffusers' scripts: read_schedule(noise_scheduler)) is named by
        # what it is, not "None"
        info = {"start": "stored", "source": start.source or UNNAMED_SOURCE, "adapted": sampler.is_adapted}
    elif start.choice == "profile":
        if loss_fn is None or batches is None:
            raise ValueError("loss_fn, batches: a 'profile' start measures the model on training batches; give both")
        measured = sampler.start_from_model(
            loss_fn, batches, samples_per_bin=samples_per_bin, data_bound=start.data_bound, progress=progress
        )
        info = {"start": "profile", **measured}
    else:
        info = {"start": "base"}
        sampler.record_start({"choice": "base"})
    details = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("start", "bound"))
    logger.info(f"noise sampler start: {start.choice} ({start.reason})" + (f"; {details}" if details else ""))
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
        bound = f"; {describe_bound(record['bound'])}" if record.get("bound", "off") != "off" else ""
        text = (
            f"the pretrained model's errors on {record.get('levels', '?')} levels ({record.get('samples_per_bin', '?')} a bin, "
            f"{record.get('forward_passes', '?')} forward passes per process){data}{lost}{bound}, before step 1"
        )
    return f"{choice}: {text}" if with_choice else text


def start_from_model(
    sampler: TrainingTimestepSampler,
    loss_fn: Callable,
    batches: Iterable,
    *,
    samples_per_bin: int | str = "auto",
    data_bound: bool = False,
    progress: bool = True,
) -> dict:
    """The ``"profile"`` start (METHOD.md §5.9): ``sampler.start_from_model(loss_fn, batches, ...)``, which measures
    the model's x0 error on the training ``batches`` before step 1 and starts from it
    (:meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.start_from_model`, where the arguments, the
    budget and the result are described).

    Raises:
        ValueError: a sampler that learns no schedule; see the method.
    """
    return sampler.start_from_model(loss_fn, batches, samples_per_bin=samples_per_bin, data_bound=data_bound, progress=progress)


def describe_bound(record) -> str:
    """The per-element bound of a profile start's record (``"bound"``: its figures, ``"off"``, or ``"none: <why>"``
    when asked for on data it does not apply to), in words."""
    if isinstance(record, dict):
        lowered = record.get("bins_lowered")
        return f"m_hat bounded by the per-element posterior mean of {record.get('values')} values ({record.get('samples')} samples)" + (
            f": {lowered} bins lowered" if lowered is not None else ""
        )
    return f"m_hat not bounded ({str(record).removeprefix('none: ')})"
