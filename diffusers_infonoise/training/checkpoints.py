"""accelerate checkpoints: the sampler's state and the models' save/load hooks, resume, pruning."""

from __future__ import annotations

import json
import math
import os
import re
import shutil

import torch

from ..logs import get_logger
from ..sampler import TrainingTimestepSampler
from ..schedule_io import load_sampler_state, save_sampler_state
from .lora import load_lora_layers, lora_layers

logger = get_logger(__name__)

__all__ = [
    "COMPLETE_MARKER",
    "is_complete_checkpoint",
    "SAMPLER_SUBDIR",
    "register_sampler_checkpointing",
    "checkpoint_step",
    "resolve_resume_checkpoint",
    "check_no_foreign_checkpoints",
    "optimizer_steps_per_epoch",
    "resume_checkpoint",
    "resume_training_state",
    "maybe_save_checkpoint",
    "check_model_output",
    "prune_checkpoints",
    "register_model_checkpointing",
]


SAMPLER_SUBDIR = "noise_sampler"


def register_sampler_checkpointing(accelerator, sampler: TrainingTimestepSampler) -> None:
    """Save and restore the sampler with ``accelerator.save_state``/``load_state``.

    The state goes to ``checkpoint-*/noise_sampler/`` as safetensors + JSON (no pickle), one folder
    per rank (``rank_{i}``). The sampler's random stream is ``(seed, num_draws)``, the same on every
    rank, and its saved open statistics are those of all ranks (``state_dict``), so any rank's
    folder resumes every rank exactly; a rank without its own folder (a run resumed on more
    processes) loads rank 0's. A checkpoint without sampler state warns and keeps the fresh sampler.
    (Outside these scripts, ``accelerator.register_for_checkpointing(sampler)`` does the same
    through accelerate's own files.)
    """

    def folder(root: str, rank: int) -> str:
        return os.path.join(root, SAMPLER_SUBDIR, f"rank_{rank}")

    def save_hook(models, weights, output_dir):
        save_sampler_state(sampler, folder(output_dir, accelerator.process_index))

    def load(input_dir: str, rank: int) -> bool:
        try:
            return load_sampler_state(sampler, folder(input_dir, rank))
        except ValueError as err:  # most often another path, sampler or grid; also a damaged state file
            raise ValueError(
                f"--resume_from_checkpoint: {input_dir}: its noise-sampler state does not load ({' '.join(str(err).split())}); "
                "where the reason is a changed option, resume with the options it was saved with (--diffusion, --noise_sampler, "
                "--sigma_data, --prediction_type, --infonoise_base, --infonoise_num_bins); where the state is damaged, resume "
                "from an earlier checkpoint-N; or train into another --output_dir"
            ) from None

    def load_hook(models, input_dir):
        if load(input_dir, accelerator.process_index):
            return
        if load(input_dir, 0):
            logger.warning(f"{input_dir}: no sampler state for rank {accelerator.process_index}; loaded rank 0's")
            return
        logger.warning(
            f"{input_dir}: the checkpoint has no noise-sampler state; the sampler starts afresh "
            "(base density, empty statistics, draws from its seed); its step count continues from "
            "the checkpoint, so pi adapts at the first refresh with enough new samples"
        )

    accelerator.register_save_state_pre_hook(save_hook)
    accelerator.register_load_state_pre_hook(load_hook)


#: written last into a checkpoint folder, before it gets its final name: a folder without it is incomplete
COMPLETE_MARKER = "infonoise_checkpoint.json"


def is_complete_checkpoint(path: str) -> bool:
    """Whether ``path`` is a ``checkpoint-N`` folder whose save finished (:data:`COMPLETE_MARKER`)."""
    return os.path.isfile(os.path.join(path, COMPLETE_MARKER))


def _checkpoints(output_dir: str, *, ours: bool | None = None) -> list[str]:
    """``checkpoint-N`` folder names in ``output_dir``, oldest first: all of them, or (``ours``) only those with or
    without :data:`COMPLETE_MARKER`."""
    if not os.path.isdir(output_dir):
        return []
    found = [d for d in os.listdir(output_dir) if re.fullmatch(r"checkpoint-\d+", d)]
    if ours is not None:
        found = [d for d in found if is_complete_checkpoint(os.path.join(output_dir, d)) == ours]
    return sorted(found, key=lambda d: int(d.split("-")[1]))


def _foreign(path: str) -> str:
    """Why ``path``, a ``checkpoint-N`` folder without :data:`COMPLETE_MARKER`, is left alone, and what to do."""
    return (
        f"{path} has no {COMPLETE_MARKER}, so this package did not write it (this package's interrupted saves "
        "leave .checkpoint-N.tmp): diffusers' own training script, an older version of this package, or a copy that "
        "lost the file; it is never resumed, pruned or overwritten: move it out of --output_dir, or train into another --output_dir"
    )


def checkpoint_step(path: str) -> int:
    """The optimizer step of the checkpoint folder ``path``, ``checkpoint-<step>``.

    Raises:
        ValueError: a folder of another name (``ck``, ``checkpoint-4.bak``), naming ``--resume_from_checkpoint``.
    """
    match = re.fullmatch(r"checkpoint-(\d+)", os.path.basename(os.path.normpath(path)))
    if match is None:
        try:
            with open(os.path.join(path, COMPLETE_MARKER)) as f:
                saved = f" (its {COMPLETE_MARKER} says step {json.load(f)['step']})"
        except (OSError, ValueError, KeyError, TypeError):
            saved = ""
        raise ValueError(
            f"--resume_from_checkpoint: {path}: a checkpoint folder is named checkpoint-<step>, the optimizer step it was "
            f"saved at, which the run continues from{saved}; rename it so, or name a checkpoint-<step> folder"
        )
    return int(match.group(1))


def resolve_resume_checkpoint(output_dir: str, resume_from_checkpoint: str | None) -> str | None:
    """The checkpoint folder ``--resume_from_checkpoint`` names (``"latest"``: the newest ``checkpoint-N`` in
    ``output_dir``), or None when there is none.

    Raises:
        ValueError: a named folder that does not exist or is not a complete checkpoint of this package, or (``"latest"``)
            a newest ``checkpoint-N`` without :data:`COMPLETE_MARKER` (written by another program: it is left as it is).
    """
    if not resume_from_checkpoint:
        return None
    if resume_from_checkpoint != "latest":
        path = resume_from_checkpoint if os.path.isdir(resume_from_checkpoint) else os.path.join(output_dir, resume_from_checkpoint)
        if not os.path.isdir(path):
            raise ValueError(f"--resume_from_checkpoint: {resume_from_checkpoint!r} is neither 'latest' nor a checkpoint folder")
        if not is_complete_checkpoint(path):
            raise ValueError(
                f"--resume_from_checkpoint: {path} is not a complete checkpoint of this package (no "
                f"{COMPLETE_MARKER}: diffusers' own training script, an older version of this package, a copy that "
                "lost the file, or another kind of folder); name a checkpoint-N folder this package saved"
            )
        checkpoint_step(path)
        return path
    found = _checkpoints(output_dir)
    if not found:
        return None
    path = os.path.join(output_dir, found[-1])
    if not is_complete_checkpoint(path):  # refused rather than skipped: "latest" would go back, or start afresh and prune it
        raise ValueError(f"--resume_from_checkpoint latest: the newest checkpoint {_foreign(path)}")
    return path


def check_no_foreign_checkpoints(run, first_step: int, max_steps: int) -> None:
    """Before the first step: no ``checkpoint-N`` this run would save (``first_step < N <= max_steps``, every
    ``--checkpointing_steps``) may already exist without :data:`COMPLETE_MARKER`, since its save replaces the folder.

    Raises:
        ValueError: such a folder, naming it.
    """
    for name in _checkpoints(run.output_dir, ours=False):
        step = int(name.split("-")[1])
        if first_step < step <= max_steps and step % run.checkpointing_steps == 0:
            raise ValueError(f"--output_dir: this run saves checkpoint-{step}, and {_foreign(os.path.join(run.output_dir, name))}")


def optimizer_steps_per_epoch(gradient_accumulation_steps: int, dataloader) -> int:
    """Optimizer steps in one pass over a *prepared* dataloader: ``ceil(len(dataloader) /
    gradient_accumulation_steps)``, at least 1. Its length is this process's batches, and accelerate
    also steps at the end of the dataloader, so an epoch's last update may take fewer than
    ``gradient_accumulation_steps`` micro-batches (the next epoch's accumulation starts afresh)."""
    return max(1, math.ceil(len(dataloader) / gradient_accumulation_steps))


def resume_checkpoint(run) -> str | None:
    """The checkpoint ``--resume_from_checkpoint`` resumes from (:func:`resolve_resume_checkpoint`), or None for a run
    that starts afresh (when ``"latest"`` finds none, a warning says so)."""
    resume_dir = resolve_resume_checkpoint(run.output_dir, run.resume_from_checkpoint)
    if run.resume_from_checkpoint and resume_dir is None:
        logger.warning(f"--resume_from_checkpoint {run.resume_from_checkpoint}: no checkpoint found, starting afresh")
    return resume_dir


def resume_training_state(accelerator, run, sampler: TrainingTimestepSampler, dataloader, resume_dir: str | None) -> tuple[int, int, int]:
    """Resume from ``resume_dir`` (:func:`resume_checkpoint`); returns ``(global_step, first_epoch, skip_batches)``.

    ``(0, 0, 0)`` without a checkpoint to resume from. Otherwise ``accelerator.load_state`` restores the checkpoint
    (the registered hooks bring back the model, the EMA and the sampler), ``global_step`` is the ``N`` of
    ``checkpoint-N``, and a sampler the checkpoint held no state for counts its steps from there.
    Epochs are counted in optimizer steps (:func:`optimizer_steps_per_epoch` of the *prepared*
    ``dataloader``): the run continues in epoch ``first_epoch`` after the ``skip_batches``
    micro-batches of the updates that epoch had finished. A checkpoint saved on another number of processes warns
    (the data order and the per-process random streams differ: a valid continuation, not an exact one).

    Raises:
        ValueError: a folder not named ``checkpoint-<step>``, or a checkpoint that does not load into this run (another
            model size or kind, no EMA or LoRA where the run has one, a damaged file, a sampler state of other
            options), naming ``--resume_from_checkpoint`` and the folder.
    """
    if not resume_dir:
        return 0, 0, 0
    global_step = checkpoint_step(resume_dir)
    accelerator.print(f"Resuming from {resume_dir}")
    try:
        accelerator.load_state(resume_dir)
    except Exception as err:  # a model of another size or kind, a damaged or truncated file: torch's or pickle's error
        if isinstance(err, ValueError) and str(err).startswith("--resume_from_checkpoint"):  # the hooks' own: one line already
            raise
        raise _does_not_load(resume_dir, err) from None
    _warn_if_process_count_changed(accelerator, resume_dir)
    if sampler.optimizer_step != global_step:
        sampler.optimizer_step = global_step  # a checkpoint without sampler state: count from here
    first_epoch, updates_done = divmod(global_step, optimizer_steps_per_epoch(run.gradient_accumulation_steps, dataloader))
    return global_step, first_epoch, updates_done * run.gradient_accumulation_steps


def _does_not_load(resume_dir: str, err: Exception) -> ValueError:
    first = " ".join(str(err).split())[:240] or type(err).__name__  # torch's size mismatch is on its second line
    return ValueError(
        f"--resume_from_checkpoint: {resume_dir} does not load into this run ({type(err).__name__}: {first}); a "
        "checkpoint resumes only with the model (size, --use_lora, --use_ema) it was saved with, and a damaged one not at "
        "all: resume with the run's own options, from an earlier checkpoint-N, or train into another --output_dir"
    )


def check_model_output(resume_dir: str | None, model_output: dict | None) -> None:
    """Refuse to resume a checkpoint whose network was trained to output something else: its marker's ``model_output``
    (the scheduler's ``prediction_type``; on EDM the sign of ``c_out``) against this run's. Markers written before it
    was recorded pass.

    Raises:
        ValueError: one line naming ``--resume_from_checkpoint``, the folder and each option that differs.
    """
    if not resume_dir or not model_output:
        return
    try:
        with open(os.path.join(resume_dir, COMPLETE_MARKER)) as f:
            saved = json.load(f).get("model_output") or {}
    except (OSError, ValueError, AttributeError):
        return
    changed = [f"--{k} {saved[k]} -> {v}" for k, v in model_output.items() if k in saved and saved[k] != v]
    if changed:
        raise ValueError(
            f"--resume_from_checkpoint: {resume_dir} trained the network with another output ({', '.join(changed)}): the "
            "resumed steps would train it toward another target; resume with the option it was saved with, or train into "
            "another --output_dir"
        )


def _warn_if_process_count_changed(accelerator, resume_dir: str) -> None:
    try:
        with open(os.path.join(resume_dir, COMPLETE_MARKER)) as f:
            saved = json.load(f).get("num_processes")
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(saved, int) and saved != accelerator.num_processes:
        logger.warning(
            f"--resume_from_checkpoint: {resume_dir} was saved by a run on {saved} process(es), this one runs on "
            f"{accelerator.num_processes}: the data order and the per-process random streams differ from the "
            "uninterrupted run's, so the resumed run is a valid continuation but not an exact one"
        )


def maybe_save_checkpoint(accelerator, run, global_step: int, model_output: dict | None = None) -> None:
    """Every ``--checkpointing_steps`` optimizer steps, a checkpoint that a kill at any moment cannot
    spoil: ``accelerator.save_state`` (all processes) writes ``output_dir/.checkpoint-<step>.tmp``, the
    main process adds :data:`COMPLETE_MARKER` and renames it to ``checkpoint-<step>`` (complete before
    visible), and only then prunes to ``--checkpoints_total_limit``. A ``checkpoint-<step>`` of another program (no
    marker) is never replaced (:func:`check_no_foreign_checkpoints` refuses such a run before its first step). The marker
    records the process count and ``model_output`` (what the network's output means: the scheduler's
    ``prediction_type``), which a resume checks (:func:`check_model_output`).

    Raises:
        FileExistsError: such a folder appeared during the run; the save stays in ``.checkpoint-<step>.tmp``.
    """
    if global_step % run.checkpointing_steps:
        return
    final = os.path.join(run.output_dir, f"checkpoint-{global_step}")
    tmp = os.path.join(run.output_dir, f".checkpoint-{global_step}.tmp")
    if accelerator.is_main_process and os.path.isdir(tmp):
        shutil.rmtree(tmp)  # left by an interrupted save of this step
    accelerator.wait_for_everyone()
    accelerator.save_state(tmp)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        with open(os.path.join(tmp, COMPLETE_MARKER), "w") as f:
            json.dump({"step": global_step, "num_processes": accelerator.num_processes, "model_output": model_output or {}}, f)
        if os.path.isdir(final):  # a resumed run saving the same step again; another program's folder is never replaced
            if not is_complete_checkpoint(final):
                raise FileExistsError(f"--output_dir: the save of checkpoint-{global_step} is left in {tmp}: {_foreign(final)}")
            shutil.rmtree(final)
        os.replace(tmp, final)
        prune_checkpoints(run.output_dir, run.checkpoints_total_limit)
    accelerator.wait_for_everyone()


def prune_checkpoints(output_dir: str, total_limit: int | None) -> None:
    """Delete the oldest ``checkpoint-N`` folders of this package (:data:`COMPLETE_MARKER`) so that at most
    ``total_limit`` of them remain (after a save); folders without the marker are neither counted nor deleted."""
    if not total_limit:
        return
    found = _checkpoints(output_dir, ours=True)
    for d in found[: max(0, len(found) - total_limit)]:
        shutil.rmtree(os.path.join(output_dir, d))


#: the adapter file of a LoRA checkpoint (diffusers' save_lora_weights)
LORA_WEIGHTS = "pytorch_lora_weights.safetensors"

#: what diffusers' EMAModel.save_pretrained writes into the model config besides the weights
_EMA_STATE = ("decay", "min_decay", "optimization_step", "update_after_step", "use_ema_warmup", "inv_gamma", "power")


def register_model_checkpointing(
    accelerator, *, model_cls, subfolder: str, ema=None, lora_pipeline_cls=None, lora_prefix: str | None = None
) -> None:
    """Checkpoints hold the trained model in diffusers format, as in diffusers' scripts.

    Full fine-tuning: ``checkpoint-N/<subfolder>/`` (``model_cls.save_pretrained``) and the EMA in
    ``<subfolder>_ema/``. LoRA (``lora_pipeline_cls`` given): only the adapter, as
    ``checkpoint-N/pytorch_lora_weights.safetensors`` (``save_lora_weights(<prefix>_lora_layers=...)``).
    Optimizer, LR schedule and random states stay with accelerate; the sampler with
    :func:`register_sampler_checkpointing`.
    """

    def unwrap(m):
        return accelerator.unwrap_model(m)

    def save_hook(models, weights, output_dir):
        if accelerator.is_main_process:
            for m in models:
                m = unwrap(m)
                if lora_pipeline_cls is not None:
                    lora_pipeline_cls.save_lora_weights(
                        output_dir, **{f"{lora_prefix}_lora_layers": lora_layers(m)}, safe_serialization=True
                    )
                else:
                    m.save_pretrained(os.path.join(output_dir, subfolder))
            if ema is not None:
                ema.save_pretrained(os.path.join(output_dir, f"{subfolder}_ema"))
        while weights:  # saved above, in diffusers format
            weights.pop()

    def require(input_dir: str, name: str, why: str) -> None:
        # checked here: a missing folder reaches diffusers as a Hub id (a connection error) or a missing config
        if not os.path.exists(os.path.join(input_dir, name)):
            raise ValueError(f"--resume_from_checkpoint: {input_dir} has no {name}: {why}")

    def load_hook(models, input_dir):
        if lora_pipeline_cls is not None:
            why = f"it is not a LoRA checkpoint (a full fine-tune's has {subfolder}/); resume it without --use_lora"
            require(input_dir, LORA_WEIGHTS, why)
        else:
            lora = " (a LoRA checkpoint: pass --use_lora)" if os.path.isfile(os.path.join(input_dir, LORA_WEIGHTS)) else ""
            require(input_dir, subfolder, f"it holds no full {subfolder} weights{lora}; resume with the options it was saved with")
        if ema is not None:
            require(input_dir, f"{subfolder}_ema", "it was saved without --use_ema; resume it without --use_ema")
        while models:
            m = unwrap(models.pop())
            if lora_pipeline_cls is not None:
                load_lora_layers(m, lora_pipeline_cls, input_dir, prefix=lora_prefix)
                if accelerator.mixed_precision == "fp16":
                    from diffusers.training_utils import cast_training_params

                    cast_training_params(m, dtype=torch.float32)
            else:
                loaded = model_cls.from_pretrained(input_dir, subfolder=subfolder)
                m.register_to_config(**loaded.config)
                m.load_state_dict(loaded.state_dict())
                del loaded
        if ema is not None:
            # EMAModel.from_pretrained hands a path to from_config, which diffusers deprecates: read the
            # EMA's own state (decay, step count) from the config and its weights from the model files
            folder = os.path.join(input_dir, f"{subfolder}_ema")
            config = model_cls.load_config(folder)
            ema_state = {k: config[k] for k in _EMA_STATE if k in config}
            weights = model_cls.from_pretrained(folder)
            ema.load_state_dict({**ema_state, "shadow_params": [p.detach() for p in weights.parameters()]})
            del weights
            ema.to(accelerator.device)

    accelerator.register_save_state_pre_hook(save_hook)
    accelerator.register_load_state_pre_hook(load_hook)
