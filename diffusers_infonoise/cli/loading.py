"""Where the ``infonoise`` command finds things: scheduler configs (folders, files, Hub repos), the
stored schedule, probe images, pipeline parts; and the arguments it parses into library values."""

from __future__ import annotations

from pathlib import Path

#: scheduler shortcuts accepted by ``compare --scheduler`` (default diffusers configs)
_SCHEDULER_SHORTCUTS = {
    "edm": ("EDMEulerScheduler", {}),
    "ddpm": ("DDPMScheduler", {}),
    "flow": ("FlowMatchEulerDiscreteScheduler", {}),
}


_DEFAULT_SAMPLERS = "edm_lognormal,logit_normal,uniform,log_uniform"


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def _stored_and_grid(scheduler, args):
    """``(payload or None, log-σ grid)``: a learned schedule's bin centres (those of the sampler it loads into, on the
    path of its stored shift), else ``--num-levels`` points over the scheduler's path. Only the grid is taken: the
    schedule is not loaded into a sampler, whose warnings are about training with it."""
    from ..diagnostics import log_sigma_grid
    from ..paths import path_from_scheduler
    from ..schedule_io import read_schedule, stored_mu

    stored = read_schedule(scheduler)
    if stored is not None:
        return stored, log_sigma_grid(path_from_scheduler(scheduler, mu=stored_mu(scheduler, stored)), len(stored["pi"]))
    return stored, log_sigma_grid(path_from_scheduler(scheduler, mu=args.mu), args.num_levels)


def _read_json(path: Path) -> dict:
    """:func:`~diffusers_infonoise.schedule_io.read_json_file`; a failure is a one-line CLIError."""
    from ..schedule_io import ScheduleSourceError, read_json_file

    try:
        return read_json_file(path)
    except ScheduleSourceError as err:
        raise CLIError(str(err)) from None


def _load_config(spec: str, *, revision: str | None = None, cache_dir: str | None = None) -> tuple[dict, str]:
    """``(config, where)`` for a pipeline dir, scheduler dir, JSON file or Hub repo id
    (:func:`~diffusers_infonoise.schedule_io.load_scheduler_config`); a failure is a one-line CLIError."""
    from ..schedule_io import ScheduleSourceError, load_scheduler_config

    try:
        return load_scheduler_config(spec, revision=revision, cache_dir=cache_dir)
    except ScheduleSourceError as err:
        raise CLIError(str(err)) from None


def _scheduler_from_config(config: dict, where: str):
    """A diffusers scheduler instance from its config (``_class_name``); a bare InfoNoise payload is
    wrapped into the scheduler its path implies (EDM or flow; VP needs the real config)."""
    import diffusers

    from ..schedule_io import CONFIG_KEY, FORMAT

    if config.get("format") == FORMAT:  # a bare payload (e.g. written by a training script's logs)
        from ..paths import PATH_CLASSES

        path = config.get("path") or {}
        if path.get("kind") not in PATH_CLASSES:
            raise CLIError(f"{where}: a schedule payload without a known path kind ({path.get('kind')!r})")
        try:
            sched = PATH_CLASSES[path["kind"]].scheduler_from_config(path)
        except ValueError as err:
            raise CLIError(f"{where}: a bare schedule payload: {err}") from None
        sched.register_to_config(**{CONFIG_KEY: config})
        return sched
    name = config.get("_class_name")
    if not name:
        raise CLIError(f"{where}: not a diffusers scheduler config (no _class_name) and not an InfoNoise schedule payload")
    cls = getattr(diffusers, name, None)
    if cls is None or not hasattr(cls, "from_config"):
        raise CLIError(f"{where}: unknown scheduler class {name!r} (not in diffusers {diffusers.__version__})")
    return cls.from_config(config)


def _load_scheduler(spec: str, *, revision=None, cache_dir=None):
    if spec.lower() in _SCHEDULER_SHORTCUTS:
        import diffusers

        name, kwargs = _SCHEDULER_SHORTCUTS[spec.lower()]
        return getattr(diffusers, name)(**kwargs), f"default {name}"
    config, where = _load_config(spec, revision=revision, cache_dir=cache_dir)
    return _scheduler_from_config(config, where), where


def scheduler_option(spec: str, *, revision=None, cache_dir=None):
    """:func:`_load_scheduler` for the ``--scheduler`` option: its errors led by the flag, and a bare name that is
    neither a shortcut nor a local file or folder refused at once (a typo of ``edm``, ``sd3``: a Hub repo of diffusers
    is named ``owner/name``, and asking the Hub for the name would take seconds to fail)."""
    import os

    if "/" not in spec and spec.lower() not in _SCHEDULER_SHORTCUTS and not os.path.lexists(spec):
        raise CLIError(
            f"--scheduler: {spec!r} is none of {', '.join(_SCHEDULER_SHORTCUTS)} and no local file or folder; or give a "
            "scheduler or pipeline folder, a scheduler_config.json, or a Hub repo id (owner/name)"
        )
    try:
        return _load_scheduler(spec, revision=revision, cache_dir=cache_dir)
    except CLIError as err:
        raise CLIError(f"--scheduler: {err}") from None


def _parse_samplers(text: str | None) -> list[str]:
    from ..sampler import SAMPLER_NAMES

    names = [s.strip() for s in (text or "").split(",") if s.strip()]
    if not names:
        raise CLIError("--samplers: give at least one sampler name")
    unknown = [n for n in names if n not in SAMPLER_NAMES]
    if unknown:
        raise CLIError(f"--samplers: unknown sampler name(s) {', '.join(unknown)}; accepted: {', '.join(SAMPLER_NAMES)}")
    return list(dict.fromkeys(names))


def _objective(args, scheduler):
    """The :class:`~diffusers_infonoise.objective.Objective` of ``--prediction-type``, ``--loss-weighting`` (``auto``:
    the scheduler's, :func:`~diffusers_infonoise.objective.default_objective`) and ``--snr-gamma``."""
    from ..objective import default_objective

    weighting = None if args.loss_weighting == "auto" else args.loss_weighting
    return default_objective(scheduler).override(args.prediction_type or None, weighting, args.snr_gamma)


def _load_images(dataset: str, *, split: str, max_samples: int | None, seed: int, image_column: str = "image"):
    """(N, C, H, W) float32 x0 and (N,) int64 labels (or None), as ``train_unconditional.py`` reads them (the same
    conversion, :mod:`~diffusers_infonoise.training.datasets`): pixels scaled to [−1, 1] (8-bit by 255, 16-bit by
    65535); a column of float arrays (``datasets.Array2D``/``Array3D``: latents, rescaled data) as stored, in the
    model's units, one of uint8/uint16 arrays as pixels.

    Raises:
        CLIError: naming ``--dataset``, ``--split`` or ``--image-column``: no examples, a column of no images or arrays,
            float images, arrays of another integer dtype, arrays holding a non-finite value."""
    import numpy as np
    import torch

    from ..data import is_builtin_dataset, load_builtin_arrays

    if is_builtin_dataset(dataset):
        images, labels = load_builtin_arrays(dataset, split, max_samples=max_samples, seed=seed)
        x = torch.from_numpy(images.astype(np.float32))[:, None] / 127.5 - 1.0
        return x, torch.from_numpy(labels)
    p = Path(dataset).expanduser()
    if not p.exists():
        from ..data import BUILTIN_DATASETS

        raise CLIError(f"--dataset: {dataset!r} is neither a built-in data set ({', '.join(BUILTIN_DATASETS)}) nor a local path")
    try:
        import datasets
    except ImportError:
        raise CLIError("--dataset: reading a local data set needs the 'datasets' package (pip install datasets)") from None
    try:
        ds = datasets.load_from_disk(str(p))
    except IndexError:  # datasets' own reading of a saved data set of no rows
        raise CLIError(f"--dataset: {p} holds no examples") from None
    except (FileNotFoundError, ValueError) as err:
        raise CLIError(f"--dataset: {p} is not a data set saved with datasets' save_to_disk ({_one_line(err)})") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise CLIError(f"--split: {split!r} not in the data set; it has {', '.join(ds)}")
        ds = ds[split]
    if image_column not in ds.column_names:
        raise CLIError(f"--image-column: {image_column!r} is not a column of {p}; columns: {', '.join(ds.column_names)}")
    from ..training.datasets import array_pixel_scale, array_x0, check_image_column, image_x0, is_array_column

    if len(ds) == 0:
        raise CLIError(f"--dataset: {p} holds no examples (split {split!r})")
    n = len(ds)
    if max_samples is not None and max_samples < n:
        idx = np.sort(np.random.default_rng(seed).permutation(n)[:max_samples])
        ds = ds.select(idx.tolist())
    # one reading of pixels with training (training.datasets): 8-bit by 255, 16-bit by 65535, float arrays as stored
    flag = lambda err: str(err).replace("--image_column", "--image-column", 1)  # noqa: E731
    try:
        check_image_column(ds, image_column)
        if is_array_column(ds, image_column):
            scale = array_pixel_scale(ds, image_column)
            arrays = [a[None] if a.ndim == 2 else a for a in (array_x0(v, scale) for v in ds.with_format("numpy")[image_column])]
        else:
            arrays = [image_x0(item) for item in ds[image_column]]
    except ValueError as err:
        raise CLIError(f"{flag(err)} ({p})") from None
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise CLIError(f"--dataset: images of different shapes {sorted(shapes)[:3]}...; resize them to one size first")
    x = torch.from_numpy(np.stack(arrays))
    if not bool(torch.isfinite(x).all()):
        raise CLIError(f"--image-column {image_column!r}: the arrays of {p} hold a non-finite value")
    labels = None
    if "label" in ds.column_names:
        labels = torch.as_tensor(ds["label"], dtype=torch.int64)
    return x.float(), labels


def _one_line(err) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


#: the library's arguments that the commands' options set: name -> the option's ``dest`` (its flag: ``--`` and dashes)
_OPTION_OF_ARGUMENT = {
    "noise_scheduler": "scheduler",
    "prediction_type": "prediction_type",
    "loss_weighting": "loss_weighting",
    "snr_gamma": "snr_gamma",
    "mu": "mu",
    "trainer": "trainer",
}


def _as_option_error(message: str, args) -> str:
    """A library error that leads with the name of an argument the command's options set (``prediction_type: ...``),
    led instead by the flag the user types (``--prediction-type: ...``); other messages as they are."""
    name, sep, rest = message.partition(": ")
    if sep and name == "source" and hasattr(args, "source"):  # the positional argument, as --help names it
        return f"SOURCE: {rest}"
    dest = _OPTION_OF_ARGUMENT.get(name)
    if not sep or dest is None or not hasattr(args, dest):
        return message
    return f"--{dest.replace('_', '-')}: {rest}"


def _load_pipeline_parts(model_path: str, model_subfolder: str | None, scheduler_spec: str | None):
    import diffusers

    from ..schedule_io import ScheduleSourceError, local_or_hub

    try:
        p = local_or_hub(model_path)
    except ScheduleSourceError as err:
        raise CLIError(f"--model: {err} (give a pipeline folder saved with save_pretrained)") from None
    if not isinstance(p, Path) or not p.is_dir():
        raise CLIError(f"--model: {model_path}: no such folder (give a pipeline folder saved with save_pretrained; the Hub is not read)")
    subfolder = model_subfolder
    if subfolder is None:
        for cand in ("unet", "transformer"):
            if (p / cand / "config.json").is_file():
                subfolder = cand
                break
    model_dir = p / subfolder if subfolder else p
    if not (model_dir / "config.json").is_file():
        raise CLIError(f"--model: no model config.json under {p} (looked in unet/, transformer/ and the directory itself)")
    cfg = _read_json(model_dir / "config.json")
    cls = getattr(diffusers, cfg.get("_class_name", ""), None)
    if cls is None:
        raise CLIError(f"--model: unknown model class {cfg.get('_class_name')!r} in {model_dir / 'config.json'}")
    try:
        model = cls.from_pretrained(str(model_dir))
    except (OSError, ValueError, RuntimeError) as err:
        raise CLIError(f"--model: could not load {cls.__name__} from {model_dir}: {_one_line(err)}") from None
    if scheduler_spec is None:
        from ..schedule_io import PIPELINE_SCHEDULER

        if not p.joinpath(*PIPELINE_SCHEDULER).is_file():
            raise CLIError(f"--model: {p} has no scheduler/scheduler_config.json; pass --scheduler")
        scheduler, where = _load_scheduler(str(p))
    else:
        scheduler, where = scheduler_option(scheduler_spec)
    return model, scheduler, where, subfolder
