"""What a run leaves: sample grids, the model card, the stored schedule and the Hub push."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import torch

from ..logs import get_logger
from ..sampler import TrainingTimestepSampler

logger = get_logger(__name__)

__all__ = [
    "check_finite_weights",
    "HubTarget",
    "save_samples",
    "log_images",
    "save_unconditional_pipeline",
    "save_unconditional_outputs",
    "save_image_grid",
    "render_model_card",
    "hub_model_id",
    "model_card_templates",
    "push_output_dir",
    "recorded_start",
]


def save_image_grid(images: torch.Tensor, path: str, *, nrow: int | None = None) -> str:
    """Save (B, C, H, W) images in [0, 1] as one PNG grid; returns ``path``."""
    from PIL import Image

    b, c, h, w = images.shape
    nrow = nrow or int(math.ceil(math.sqrt(b)))
    ncol = int(math.ceil(b / nrow))
    grid = np.ones((ncol * (h + 2) + 2, nrow * (w + 2) + 2, c), dtype=np.float32)
    arr = images.detach().cpu().float().clamp(0, 1).permute(0, 2, 3, 1).numpy()
    for i in range(b):
        r, q = divmod(i, nrow)
        grid[2 + r * (h + 2) : 2 + r * (h + 2) + h, 2 + q * (w + 2) : 2 + q * (w + 2) + w] = arr[i]
    img = (grid * 255).round().astype(np.uint8)
    Image.fromarray(img[..., 0] if c == 1 else img).save(path)
    return path


def model_card_templates() -> str:
    """The folder of the model-card templates: the installed package's ``diffusers_infonoise.model_cards``
    (package data, also in an editable install), else the ``model_cards/`` of the checkout the package is
    imported from (a checkout on ``sys.path`` without an install).

    Raises:
        FileNotFoundError: neither holds the templates (a broken install), naming where it looked.
    """
    from importlib.resources import files

    try:
        folder = str(files("diffusers_infonoise.model_cards"))
    except ModuleNotFoundError:
        folder = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "model_cards")
    if not os.path.isfile(os.path.join(folder, "unconditional.md.j2")):
        raise FileNotFoundError(f"the model-card templates are missing (looked in {folder}); reinstall diffusers-infonoise")
    return folder


def hub_model_id(name) -> str | None:
    """``name`` when it is a Hub repo id, None when it is a local folder (:func:`~diffusers_infonoise.schedule_io.local_or_hub`,
    decided without the network): the Hub links a card's ``base_model`` metadata to a repo, and a local path there
    points nowhere."""
    from ..schedule_io import ScheduleSourceError, local_or_hub

    try:
        where = local_or_hub(str(name))
    except ScheduleSourceError:  # a local path that is not there (any more): not a Hub id either
        return None
    return where if isinstance(where, str) else None


def render_model_card(template: str, output_path: str, **context) -> str:
    """Render the model-card template ``template`` (Jinja2, :func:`model_card_templates`) with ``context`` into
    ``output_path``; returns the text. A ``base_model`` in ``context`` also gives ``base_model_hub``: it, when it is a
    Hub repo id (:func:`hub_model_id`), else None (a local folder, kept out of the card's metadata)."""
    import jinja2

    if "base_model" in context:
        context["base_model_hub"] = hub_model_id(context["base_model"]) if context["base_model"] else None

    loader = jinja2.FileSystemLoader(model_card_templates())
    env = jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    text = env.get_template(template).render(**context)
    with open(output_path, "w") as f:
        f.write(text)
    return text


def log_saved_outputs(output_dir: str, saved: list[str], *, repo_id: str | None = None) -> None:
    """The run's last log line: what it saved where (``saved``: names relative to ``output_dir``) and, after a push,
    the Hub repository; a user who scrolled past the progress bar learns where the results are."""
    pushed = f"; pushed to the Hub as {repo_id}" if repo_id else ""
    logger.info(f"saved in {os.path.abspath(output_dir)}: {', '.join(saved)}{pushed}")


def push_output_dir(
    output_dir: str,
    *,
    repo_id: str,
    token: str | None = None,
    private: bool = False,
    commit_message: str = "Upload InfoNoise-trained pipeline",
) -> str:
    """Create the Hub repository and upload the final pipeline, card and plots (not ``checkpoint-*``
    folders or logs). Returns the repository id."""
    from huggingface_hub import create_repo, upload_folder

    repo_id = create_repo(repo_id, exist_ok=True, private=private, token=token).repo_id
    upload_folder(
        repo_id=repo_id,
        folder_path=output_dir,
        token=token,
        commit_message=commit_message,
        ignore_patterns=["checkpoint-*", "checkpoint-*/**", "logs/**", "step_*", "epoch_*"],
    )
    return repo_id


def recorded_start(sampler: TrainingTimestepSampler) -> tuple[str | None, str]:
    """``(choice, what it saw in words)`` of how the run began (METHOD.md §5.9): the sampler's recorded start, kept through
    resumes (not the start a resume command would choose), for the model card; ``(None, ...)`` when the
    sampler has none (a fixed density) or it was not recorded."""
    from ..sampler.starts import describe_start

    record = sampler.start_record
    return (record or {}).get("choice"), describe_start(record, with_choice=False)


@dataclass(frozen=True)
class HubTarget:
    """Where a finished run goes on the Hub (diffusers' ``--push_to_hub --hub_model_id --hub_token
    --hub_private_repo``, :func:`~diffusers_infonoise.training.args.hub_target`); ``push=False`` keeps it
    local. ``repo_id=None``: the output folder's name."""

    push: bool = False
    repo_id: str | None = None
    token: str | None = None
    private: bool = False


def check_finite_weights(model, what: str = "model") -> None:
    """Refuse to save, card or push a model with NaN/inf weights.

    Raises:
        RuntimeError: naming how many of ``model``'s tensors are not finite.
    """
    bad = [name for name, p in model.state_dict().items() if p.is_floating_point() and not bool(torch.isfinite(p).all())]
    if bad:
        raise RuntimeError(f"{what}: {len(bad)} of its tensors hold NaN or inf values (first: {bad[0]}); it is not saved")


def save_samples(samples: torch.Tensor, stem: str, *, alphabet: str | None = None) -> str:
    """``stem.png`` (an image grid of (B, C, H, W) samples in [0, 1]) or, with ``alphabet``, ``stem.fa``
    (FASTA of (B, len(alphabet), L) one-hot samples, argmax over the channels). Returns the path."""
    if alphabet is None:
        return save_image_grid(samples, stem + ".png")
    from ..data import decode_sequences

    with open(stem + ".fa", "w") as fh:
        fh.writelines(f">sample_{i}\n{s}\n" for i, s in enumerate(decode_sequences(samples, alphabet)))
    return stem + ".fa"


def log_images(accelerator, tag: str, images: torch.Tensor, step: int) -> None:
    """(B, C, H, W) images in [0, 1] to the tensorboard tracker, if there is one."""
    for tracker in accelerator.trackers:
        if tracker.name == "tensorboard":
            tracker.writer.add_images(tag, images.cpu().numpy(), step)


def save_unconditional_pipeline(unet, ema, noise_scheduler, sampler, output_dir: str) -> None:
    """The trained UNet (the EMA weights when there is an EMA) and the training scheduler, which carries
    the learned schedule, as a pipeline that samples correctly with the stock calls.

    DDPM and flow 2-D models: a ``DDPMPipeline`` (its loop is right for them). EDM models and 1-D models:
    an :class:`~diffusers_infonoise.pipeline.InfoNoiseUnconditionalPipeline`, because ``DDPMPipeline`` skips
    EDM's preconditioning (wrong samples, silently) and draws 2-D noise; ``DiffusionPipeline.from_pretrained``
    of that folder asks for ``trust_remote_code=True`` (its two-line loader imports this package's class)
    instead of returning a pipeline that samples garbage.
    """
    import diffusers

    from .. import pipeline
    from ..generation import is_1d_model
    from ..paths import path_class
    from .loop import ema_weights

    sampler.save_to_scheduler(noise_scheduler)  # a fixed density drops a schedule inherited from the base model
    # DDPMPipeline draws 2-D noise: 1-D models take this package's pipeline on every path
    name = "InfoNoiseUnconditionalPipeline" if is_1d_model(unet) else path_class(noise_scheduler).unconditional_pipeline
    cls = getattr(pipeline, name, None) or getattr(diffusers, name)
    with ema_weights(ema, unet.parameters()):
        check_finite_weights(unet, "the trained UNet" + (" (EMA weights)" if ema is not None else ""))
        cls(unet=unet, scheduler=noise_scheduler).save_pretrained(output_dir)


def save_unconditional_outputs(
    output_dir: str,
    *,
    unet,
    ema,
    noise_scheduler,
    sampler,
    global_step: int,
    num_samples: int,
    num_inference_steps: int,
    seed: int,
    alphabet: str | None,
    hub: HubTarget,
    card: dict,
) -> None:
    """What an unconditional run leaves in ``output_dir``: the pipeline (:func:`save_unconditional_pipeline`),
    ``noise_schedule.png`` (φ and ρ̂), ``samples.png`` or ``samples.fa`` from the EMA weights, the model card
    (``card``: its run-specific fields) and, with ``hub.push``, the Hub upload."""
    from ..diagnostics import plot_schedule
    from ..generation import generate_images
    from ..inference_grid import infogrid_caveat
    from .loop import ema_weights

    save_unconditional_pipeline(unet, ema, noise_scheduler, sampler, output_dir)
    plot_schedule(sampler, title=f"{sampler.name} after {global_step} steps").savefig(
        os.path.join(output_dir, "noise_schedule.png"), dpi=100
    )
    with ema_weights(ema, unet.parameters()):
        images = generate_images(
            unet.eval(),
            noise_scheduler,
            num_samples,
            num_inference_steps=num_inference_steps,
            generator=torch.Generator(device=unet.device).manual_seed(seed),
        )
    save_samples(images, os.path.join(output_dir, "samples"), alphabet=alphabet)
    desc = sampler.describe()
    repo_id = hub.repo_id or os.path.basename(os.path.abspath(output_dir))
    # the card suggests pipe(infogrid=True) only where infogrid itself would not warn against it
    caveat = infogrid_caveat(sampler) if sampler.name == "infonoise" else None
    # how the run began, as the sampler recorded it at step 0 (kept through resumes), not a resume command's start
    start, start_text = recorded_start(sampler)
    card = {**card, "start": start, "start_text": start_text}
    render_model_card(
        "unconditional.md.j2",
        os.path.join(output_dir, "README.md"),
        model_name=repo_id,
        repo_id=repo_id if hub.push else None,
        sequence_length=unet.config.sample_size if alphabet else None,
        alphabet=alphabet or "",
        scheduler_class=type(noise_scheduler).__name__,
        loss_weighting=desc["loss_weighting"],
        sampler_name=sampler.name,
        infogrid_caveat=caveat,
        hyperparameters=desc.get("hyperparameters", {}),
        global_step=global_step,
        allocation=desc.get("last_refresh"),
        schedule_plot="noise_schedule.png",
        sample_grid=None if alphabet else "samples.png",
        sample_fasta="samples.fa" if alphabet else None,
        num_inference_steps=num_inference_steps,
        extra_tags=[f"diffusion-{card['diffusion']}"],
        loss_target=sampler.path.loss_target(sampler.prediction_type),
        **card,
    )
    if hub.push:
        push_output_dir(output_dir, repo_id=repo_id, token=hub.token, private=hub.private)
    samples = "samples.fa" if alphabet else "samples.png"
    saved = ["the pipeline (unet/, scheduler/)", "noise_schedule.png", samples, "README.md (the model card)"]
    log_saved_outputs(output_dir, saved, repo_id=repo_id if hub.push else None)
