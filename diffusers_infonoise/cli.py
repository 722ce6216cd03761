"""The ``infonoise`` command: inspect learned schedules and see where a schedule spends compute.

Subcommands (``infonoise SUBCOMMAND --help`` for each):

* ``show PATH_OR_REPO``: the learned InfoNoise schedule stored in a scheduler config (a pipeline
  directory, a scheduler directory, a ``scheduler_config.json`` or payload JSON file, or a Hub
  repository id read through ``huggingface_hub``, which serves cached repositories offline).
* ``profile --model PATH --dataset NAME_OR_PATH``: the entropy-rate profile of a saved pipeline's
  model on probe data, with named schedules' effective allocations overlaid (the paper's Figure 4);
  writes ``profile.png`` and ``profile.json``.
* ``dataset-profile --dataset NAME_OR_PATH``: the optimal-empirical-denoiser profile of a data set.
* ``compare --samplers a,b --scheduler PATH``: effective allocations side by side, no data needed.

All noise levels are VE σ (METHOD.md §1). Errors a user can fix (a path without a learned schedule,
an unknown sampler name, a model that does not fit the data or scheduler, an uncached Hub repo while
offline) print one line ``infonoise SUBCOMMAND: error: ...`` and exit with status 2; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from .generation import EDM_TIMESTEP_SCALE

__all__ = ["main", "CLIError"]

_PIPELINE_SCHEDULER = ("scheduler", "scheduler_config.json")
_SCHEDULER_FILE = "scheduler_config.json"
#: scheduler shortcuts accepted by ``compare --scheduler`` (default diffusers configs)
_SCHEDULER_SHORTCUTS = {
    "edm": ("EDMEulerScheduler", {}),
    "ddpm": ("DDPMScheduler", {}),
    "flow": ("FlowMatchEulerDiscreteScheduler", {}),
}
_DEFAULT_SAMPLERS = "edm_lognormal,logit_normal,uniform,log_uniform"
#: what is tried on the Hub when a spec is not a local path: "name" or "owner/name"
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


class CLIError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


# ================================================================================================
# loading
# ================================================================================================



def _stored_and_grid(scheduler, args):
    """``(payload or None, log-σ grid)``: a learned schedule's bin centres, else ``--num-levels``
    points over the scheduler's path."""
    from .diagnostics import load_learned_sampler, log_sigma_grid
    from .paths import path_from_scheduler
    from .schedule_io import read_schedule

    stored = read_schedule(scheduler)
    if stored is not None:
        return stored, load_learned_sampler(scheduler).estimator.centers
    return stored, log_sigma_grid(path_from_scheduler(scheduler, mu=args.mu), args.num_levels)

def _read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as err:
        raise CLIError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(data, dict):
        raise CLIError(f"{path}: expected a JSON object")
    return data


def _hub_download(repo_id: str, revision: str | None, cache_dir: str | None) -> tuple[dict, str]:
    """``scheduler/scheduler_config.json`` (a pipeline) or ``scheduler_config.json`` of a Hub repo."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            HFValidationError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:  # pragma: no cover - huggingface_hub is a dependency
        raise CLIError(f"{repo_id}: not a local path, and huggingface_hub is not installed to read it from the Hub") from None
    offline_hint = False
    for filename in ("/".join(_PIPELINE_SCHEDULER), _SCHEDULER_FILE):
        try:
            local = hf_hub_download(repo_id, filename, revision=revision, cache_dir=cache_dir)
            return _read_json(Path(local)), f"{repo_id}:{filename}"
        except HFValidationError:
            raise CLIError(f"{repo_id}: no such local file or directory, and not a valid Hub repo id") from None
        except LocalEntryNotFoundError:
            # raised offline (HF_HUB_OFFLINE=1 or no connection) when the file is not in the cache
            offline_hint = True
            continue
        except EntryNotFoundError:
            continue
        except RepositoryNotFoundError:
            raise CLIError(f"{repo_id}: no such local path, and no such Hub repository (or it is private or gated)") from None
        except RevisionNotFoundError:
            raise CLIError(f"{repo_id}: revision {revision!r} not found on the Hub") from None
        except OSError as err:  # network errors and other hub failures
            raise CLIError(f"{repo_id}: could not read it from the Hub: {_one_line(err)}") from None
    if offline_hint:
        raise CLIError(
            f"{repo_id}: not a local path, and not available offline: {'/'.join(_PIPELINE_SCHEDULER)} or {_SCHEDULER_FILE} "
            "of this Hub repo is not in the local Hugging Face cache and the Hub cannot be reached (HF_HUB_OFFLINE=1 or "
            "no network); download it once online, or pass a local directory"
        )
    raise CLIError(f"{repo_id}: the Hub repo has no scheduler config (looked for {'/'.join(_PIPELINE_SCHEDULER)} and {_SCHEDULER_FILE})")


def _load_config(spec: str, *, revision: str | None = None, cache_dir: str | None = None) -> tuple[dict, str]:
    """``(config, where)`` for a pipeline dir, scheduler dir, JSON file or Hub repo id."""
    p = Path(spec).expanduser()
    if p.is_file():
        return _read_json(p), str(p)
    if p.is_dir():
        for candidate in (p.joinpath(*_PIPELINE_SCHEDULER), p / _SCHEDULER_FILE):
            if candidate.is_file():
                return _read_json(candidate), str(candidate)
        raise CLIError(f"{p}: no scheduler config in this directory (looked for {'/'.join(_PIPELINE_SCHEDULER)} and {_SCHEDULER_FILE})")
    if spec.startswith((".", "/", "~")) or not _REPO_ID.fullmatch(spec):
        raise CLIError(f"{spec}: no such file or directory")
    return _hub_download(spec, revision, cache_dir)


def _scheduler_from_config(config: dict, where: str):
    """A diffusers scheduler instance from its config (``_class_name``); a bare InfoNoise payload is
    wrapped into the scheduler its path implies (EDM or flow; VP needs the real config)."""
    import diffusers

    from .schedule_io import CONFIG_KEY, FORMAT

    if config.get("format") == FORMAT:  # a bare payload (e.g. written by a training script's logs)
        path = config.get("path") or {}
        kind = path.get("kind")
        if kind == "ve":
            sched = diffusers.EDMEulerScheduler(
                sigma_min=path["sigma_min"], sigma_max=path["sigma_max"], sigma_data=path.get("sigma_data", 0.5)
            )
        elif kind == "flow":
            sched = diffusers.FlowMatchEulerDiscreteScheduler(
                num_train_timesteps=path.get("num_train_timesteps", 1000), shift=path.get("shift", 1.0)
            )
        else:
            raise CLIError(
                f"{where}: a bare schedule payload on a {kind!r} path cannot be shown without its scheduler's config "
                "(the VP alphas_cumprod table is not stored); pass the scheduler directory or pipeline instead"
            )
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


def _parse_samplers(text: str | None) -> list[str]:
    from .samplers import SAMPLER_NAMES

    names = [s.strip() for s in (text or "").split(",") if s.strip()]
    if not names:
        raise CLIError("--samplers: give at least one sampler name")
    unknown = [n for n in names if n not in SAMPLER_NAMES]
    if unknown:
        raise CLIError(f"--samplers: unknown sampler name(s) {', '.join(unknown)}; accepted: {', '.join(SAMPLER_NAMES)}")
    return list(dict.fromkeys(names))


def _gate_arg(text: str):
    if text.lower() == "auto":
        return "auto"
    if text.lower() in ("none", "off"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto', 'none' or a positive float pivot (VE sigma), got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"the pivot must be > 0, got {value}")
    return value


def _objective(args, scheduler) -> tuple[str, object, float | None]:
    """Resolve ``--prediction-type``, ``--loss-weighting`` (``auto``) and ``--snr-gamma``."""
    from .diagnostics import default_objective

    d_pred, d_weight, d_gamma = default_objective(scheduler)
    pt = args.prediction_type or d_pred
    if args.loss_weighting == "auto":
        lw, sg = d_weight, (args.snr_gamma if args.snr_gamma is not None else d_gamma)
    else:
        lw, sg = args.loss_weighting, args.snr_gamma
    return pt, lw, sg


def _load_images(dataset: str, *, split: str, max_samples: int | None, seed: int, image_column: str = "image"):
    """(N, C, H, W) float32 images scaled to [−1, 1] and (N,) int64 labels (or None)."""
    import numpy as np
    import torch

    from .data import is_builtin_dataset, load_builtin_arrays

    if is_builtin_dataset(dataset):
        images, labels = load_builtin_arrays(dataset, split, max_samples=max_samples, seed=seed)
        x = torch.from_numpy(images.astype(np.float32))[:, None] / 127.5 - 1.0
        return x, torch.from_numpy(labels)
    p = Path(dataset).expanduser()
    if not p.exists():
        from .data import BUILTIN_DATASETS

        raise CLIError(f"--dataset: {dataset!r} is neither a built-in data set ({', '.join(BUILTIN_DATASETS)}) nor a local path")
    try:
        import datasets
    except ImportError:
        raise CLIError("--dataset: reading a local data set needs the 'datasets' package (pip install datasets)") from None
    try:
        ds = datasets.load_from_disk(str(p))
    except (FileNotFoundError, ValueError) as err:
        raise CLIError(f"--dataset: {p} is not a data set saved with datasets' save_to_disk ({_one_line(err)})") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise CLIError(f"--split: {split!r} not in the data set; it has {', '.join(ds)}")
        ds = ds[split]
    if image_column not in ds.column_names:
        raise CLIError(f"--image-column: {image_column!r} is not a column of {p}; columns: {', '.join(ds.column_names)}")
    n = len(ds)
    if max_samples is not None and max_samples < n:
        idx = np.sort(np.random.default_rng(seed).permutation(n)[:max_samples])
        ds = ds.select(idx.tolist())
    arrays = []
    for item in ds[image_column]:
        a = np.asarray(item, dtype=np.float32)
        if a.ndim == 2:
            a = a[None]
        elif a.ndim == 3 and a.shape[-1] in (1, 3, 4) and a.shape[0] not in (1, 3):
            a = np.moveaxis(a, -1, 0)
        arrays.append(a)
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise CLIError(f"--dataset: images of different shapes {sorted(shapes)[:3]}...; resize them to one size first")
    x = torch.from_numpy(np.stack(arrays))
    if float(x.max()) > 1.5:  # uint8-like pixels
        x = x / 127.5 - 1.0
    labels = None
    if "label" in ds.column_names:
        labels = torch.as_tensor(ds["label"], dtype=torch.int64)
    return x.float(), labels


def _one_line(err) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


# ================================================================================================
# output helpers
# ================================================================================================


def _fmt(v: float) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:.3g}"


def _window_text(density, log_sigma, central=0.9) -> str:
    from .diagnostics import profile_window

    lo, hi = profile_window(density, log_sigma, central)
    return f"{math.exp(lo):.3g}..{math.exp(hi):.3g}"


def _mode_sigma(density, log_sigma) -> float:
    import torch

    return math.exp(float(log_sigma[int(torch.argmax(density))]))


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)


# ================================================================================================
# subcommands
# ================================================================================================


def _cmd_show(args) -> int:
    import torch

    from . import densities as D
    from .diagnostics import allocation, load_learned_sampler, normalize_density, total_variation, window_mass
    from .schedule_io import read_schedule

    config, where = _load_config(args.path, revision=args.revision, cache_dir=args.cache_dir)
    from .schedule_io import FORMAT

    if config.get("format") != FORMAT and read_schedule(config) is None:
        raise CLIError(
            f"{where}: no learned InfoNoise schedule in this scheduler config (no '_infonoise_schedule' entry); "
            "it was not saved by a run with an InfoNoise sampler"
        )
    scheduler = _scheduler_from_config(config, where)
    payload = read_schedule(scheduler)
    sampler = load_learned_sampler(scheduler)
    x = sampler.estimator.centers
    edges = sampler.edges
    widths = edges[1:] - edges[:-1]
    pi = normalize_density(D.bin_masses(sampler.density, edges) / widths, x)
    base = normalize_density(D.bin_masses(sampler.base, edges) / widths, x)
    phi = allocation(sampler, log_sigma=x).phi
    rho = None
    if payload.get("rho_hat") is not None and all(v is not None for v in payload["rho_hat"]):
        rho = normalize_density(torch.tensor(payload["rho_hat"], dtype=torch.float64), x)
    elif sampler.estimator.is_ready:
        rho = sampler.profile()["rho_hat"]
    path_cfg = payload["path"]
    gate = payload.get("gate") or {}
    hyper = payload.get("hyperparameters") or {}
    out = [
        f"InfoNoise schedule in {where}",
        f"  scheduler        {type(scheduler).__name__}; path {path_cfg.get('kind')}, "
        f"sigma {_fmt(path_cfg.get('sigma_min'))}..{_fmt(path_cfg.get('sigma_max'))} (VE)"
        + (f", sigma_data {path_cfg['sigma_data']}" if "sigma_data" in path_cfg else "")
        + (f", shift {path_cfg['shift']:.4g}" if "shift" in path_cfg else ""),
        f"  loss             prediction_type={payload['prediction_type']}, loss_weighting={payload['loss_weighting']}"
        + (f", snr_gamma={payload['snr_gamma']}" if payload.get("snr_gamma") is not None else ""),
        f"  training         {payload['optimizer_steps']} optimizer steps, {payload.get('num_updates', '?')} schedule updates, "
        f"adapted: {'yes' if payload.get('adapted', True) else 'no (still the base density)'}",
        f"  gate             pivot {_fmt(gate.get('pivot'))} "
        f"({gate.get('source', '?')}{': ' + gate['reason'] if gate.get('reason') else ''})",
        "  hyperparameters  " + ", ".join(f"{k}={v}" for k, v in hyper.items()),
        f"  base density     {json.dumps(payload.get('base'))}",
        f"  package version  {payload.get('package_version', '?')}",
        "",
        "  densities per unit log sigma on the schedule's grid (mode sigma, central 90% window in sigma):",
    ]
    rows = [("pi (learned)", pi), ("base", base), ("phi = pi*w", phi)] + ([("rho_hat", rho)] if rho is not None else [])
    for label, dens in rows:
        out.append(f"    {label:<14} mode {_fmt(_mode_sigma(dens, x)):>8}   window {_window_text(dens, x)}")
    if rho is not None:
        out.append(
            f"  phi vs rho_hat   {window_mass(phi, rho, x):.1%} of phi inside rho_hat's central 90% window; "
            f"TV(phi, rho_hat) = {total_variation(phi, rho, x):.3f} (floor {sampler.floor:g} in "
            f"{sampler.floor_space}-space; METHOD.md section 5 wants <= floor + 0.02)"
        )
    out += ["", f"  {'log_sigma':>9} {'sigma':>9} {'pi':>9} {'base':>9} {'phi':>9}" + (f" {'rho_hat':>9}" if rho is not None else "")]
    k = x.numel()
    step = max(1, math.ceil(k / args.rows))
    for i in range(0, k, step):
        line = f"  {float(x[i]):9.3f} {math.exp(float(x[i])):9.3g} {float(pi[i]):9.4f} {float(base[i]):9.4f} {float(phi[i]):9.4f}"
        if rho is not None:
            line += f" {float(rho[i]):9.4f}"
        out.append(line)
    print("\n".join(out))
    if args.plot:
        from .diagnostics import plot_schedule

        plot_schedule(sampler, args.plot, title=f"learned schedule: {where}")
        print(f"wrote {args.plot}")
    return 0


def _cmd_compare(args) -> int:
    import torch

    from .diagnostics import allocation, normalize_density, total_variation, window_mass

    names = _parse_samplers(args.samplers)
    scheduler, where = _load_scheduler(args.scheduler, revision=args.revision, cache_dir=args.cache_dir)
    pt, lw, sg = _objective(args, scheduler)
    stored, x = _stored_and_grid(scheduler, args)
    allocs = []
    for name in names:
        try:
            allocs.append(allocation(name, scheduler, log_sigma=x, loss_weighting=lw, prediction_type=pt, snr_gamma=sg, mu=args.mu))
        except ValueError as err:
            raise CLIError(f"{name}: {_one_line(err)}") from None
    rho = None
    if stored is not None and stored.get("rho_hat") is not None and all(v is not None for v in stored["rho_hat"]):
        rho = normalize_density(torch.tensor(stored["rho_hat"], dtype=torch.float64), x)
    print(f"effective allocations phi = pi*w on {where} ({type(scheduler).__name__}); prediction_type={pt}, loss_weighting={lw}")
    header = f"  {'sampler':<16} {'mode sigma':>10} {'phi 90% window (sigma)':>24}"
    if rho is not None:
        header += f" {'in rho_hat window':>18} {'TV to rho_hat':>14}"
    print(header)
    for a in allocs:
        line = f"  {a.name:<16} {_fmt(_mode_sigma(a.phi, x)):>10} {_window_text(a.phi, x):>24}"
        if rho is not None:
            line += f" {window_mass(a.phi, rho, x):>18.1%} {total_variation(a.phi, rho, x):>14.3f}"
        print(line)
    if len(allocs) > 1:
        print("  total variation between allocations:")
        for i, a in enumerate(allocs):
            for b in allocs[i + 1 :]:
                print(f"    {a.name} vs {b.name}: {total_variation(a.phi, b.phi, x):.3f}")
    if args.plot:
        from .diagnostics import plot_allocations

        plot_allocations(allocs, args.plot, rho=rho, title=f"effective allocations · {type(scheduler).__name__} · weighting {lw}")
        print(f"wrote {args.plot}")
    if args.json:
        _write_json(Path(args.json), {"scheduler": where, "allocations": {a.name: a.to_dict() for a in allocs}})
        print(f"wrote {args.json}")
    return 0


def _cmd_dataset_profile(args) -> int:
    import torch

    from .diagnostics import plot_profile, profile_from_dataset

    x, _ = _load_images(args.dataset, split=args.split, max_samples=args.max_samples, seed=args.seed, image_column=args.image_column)
    gen = torch.Generator().manual_seed(args.seed)
    prof = profile_from_dataset(
        x,
        num_levels=args.num_levels,
        sigma_min=args.sigma_min,
        sigma_max=args.sigma_max,
        num_noise_draws=args.num_noise_draws,
        chunk_size=args.chunk_size,
        generator=gen,
        device=args.device,
        progress=not args.no_progress,
        gate=args.gate,
    )
    prof.meta.update({"dataset": args.dataset, "split": args.split, "pixel_range": [-1.0, 1.0]})
    _print_profile(prof, f"optimal-empirical-denoiser profile of {args.dataset} ({args.split}, {x.shape[0]} samples, pixels in [-1, 1])")
    print(
        "  note: the empirical denoiser knows every training point, so this profile describes memorisation of this finite "
        "data set (METHOD.md section 7); it approaches the population profile only as the data set grows"
    )
    if args.output:
        out = Path(args.output)
        _write_json(out / "dataset_profile.json", {"profile": prof.to_dict()})
        plot_profile(prof, (), out / "dataset_profile.png", title=f"empirical-denoiser profile · {args.dataset} ({x.shape[0]} samples)")
        print(f"wrote {out / 'dataset_profile.json'} and {out / 'dataset_profile.png'}")
    return 0


def _print_profile(prof, title: str) -> None:
    x = prof.log_sigma
    print(title)
    print(
        f"  gate pivot {_fmt(prof.gate.pivot)} ({prof.gate.source}{': ' + prof.gate.reason if prof.gate.reason else ''}); "
        f"rho_hat mode sigma {_fmt(_mode_sigma(prof.rho_hat, x))}, central 90% window {_window_text(prof.rho_hat, x)}"
    )
    print(f"  {'sigma':>9} {'mmse':>10} {'+-se':>9} {'mmse/s^2':>9} {'rho_hat':>9}")
    for i in range(x.numel()):
        se = float(prof.mmse_se[i]) if prof.mmse_se is not None else math.nan
        print(f"  {math.exp(float(x[i])):9.4g} {float(prof.mmse[i]):10.4g} {_fmt(se):>9} {float(prof.q[i]):9.4f} "
              f"{float(prof.rho_hat[i]):9.4f}")


def _load_pipeline_parts(model_path: str, model_subfolder: str | None, scheduler_spec: str | None):
    import diffusers

    p = Path(model_path).expanduser()
    if not p.exists():
        raise CLIError(f"--model: {model_path}: no such directory (give a pipeline saved with save_pretrained)")
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
        if not p.joinpath(*_PIPELINE_SCHEDULER).is_file():
            raise CLIError(f"--model: {p} has no scheduler/scheduler_config.json; pass --scheduler")
        scheduler_spec = str(p)
    scheduler, where = _load_scheduler(scheduler_spec)
    return model, scheduler, where, subfolder


def _cmd_profile(args) -> int:
    import torch

    from .diagnostics import (
        allocation,
        compare_allocations,
        plot_profile,
        profile_from_model,
    )
    from .paths import scheduler_kind

    names = _parse_samplers(args.samplers)
    model, scheduler, where, subfolder = _load_pipeline_parts(args.model, args.model_subfolder, args.scheduler)
    try:
        scheduler_kind(scheduler)
    except TypeError as err:
        raise CLIError(f"model/scheduler mismatch: {_one_line(err)}") from None
    cfg = model.config
    if type(model).__name__ != "UNet2DModel":
        raise CLIError(
            f"--model: the command profiles pixel-space UNet2DModel pipelines; {type(model).__name__} needs conditioning "
            "inputs: use diffusers_infonoise.diagnostics.profile_from_model with model_kwargs from Python"
        )
    x0, labels = _load_images(args.dataset, split=args.split, max_samples=args.num_samples, seed=args.seed, image_column=args.image_column)
    in_ch = getattr(cfg, "in_channels", None)
    if in_ch is not None and in_ch != x0.shape[1]:
        raise CLIError(f"model/data mismatch: the model takes {in_ch} channel(s), the data set {args.dataset!r} has {x0.shape[1]}")
    size = getattr(cfg, "sample_size", None)
    size = tuple(size) if isinstance(size, (list, tuple)) else (size, size) if size else None
    if size is not None and tuple(x0.shape[-2:]) != size:
        print(f"note: resizing probe images from {tuple(x0.shape[-2:])} to the model's sample_size {size} (bilinear, antialiased)",
              file=sys.stderr)
        x0 = torch.nn.functional.interpolate(x0, size=size, mode="bilinear", antialias=True, align_corners=False).clamp(-1, 1)
    model_kwargs = {}
    if getattr(cfg, "num_class_embeds", None):
        if labels is None:
            raise CLIError("model/data mismatch: the model is class-conditional (num_class_embeds) but the data set has no 'label' column")
        model_kwargs["class_labels"] = labels
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model.to(device).eval()
    pt, lw, sg = _objective(args, scheduler)
    stored, x_grid = _stored_and_grid(scheduler, args)
    gen = torch.Generator().manual_seed(args.seed)
    try:
        prof = profile_from_model(
            model,
            scheduler,
            x0,
            sigmas=torch.exp(x_grid),
            prediction_type=pt,
            loss_weighting=lw,
            snr_gamma=sg,
            model_kwargs=model_kwargs,
            batch_size=args.batch_size,
            num_noise_draws=args.num_noise_draws,
            generator=gen,
            device=device,
            progress=not args.no_progress,
            edm_timestep_scale=args.edm_timestep_scale,
            mu=args.mu,
            gate=args.gate,
        )
    except RuntimeError as err:
        raise CLIError(f"model/scheduler mismatch: the model failed on a probe batch: {_one_line(err)}") from None
    if stored is not None and "infonoise" not in names:
        names.append("infonoise")
    allocs = []
    for name in names:
        try:
            allocs.append(allocation(name, scheduler, log_sigma=prof.log_sigma, loss_weighting=lw, prediction_type=pt, snr_gamma=sg,
                                     mu=args.mu))
        except ValueError as err:
            raise CLIError(f"{name}: {_one_line(err)}") from None
    summary = compare_allocations(prof, allocs)
    prof.meta.update({"model_path": str(args.model), "model_subfolder": subfolder, "scheduler_source": where, "dataset": args.dataset,
                      "split": args.split})
    _print_profile(prof, f"entropy-rate profile of {args.model} ({type(model).__name__}, {type(scheduler).__name__}) on {args.dataset} "
                         f"({x0.shape[0]} probe samples)")
    print(f"  allocations (prediction_type={pt}, loss_weighting={lw}): share of phi inside rho_hat's 90% window, TV, "
          "share where rho_hat < 1% of peak")
    for a in allocs:
        s = summary[a.name]
        print(f"    {a.name:<16} {s['window_mass']:7.1%}   TV {s['total_variation']:.3f}   wasted {s['wasted_mass']:.1%}")
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(
        out / "profile.json",
        {
            "profile": prof.to_dict(),
            "allocations": {a.name: a.to_dict() for a in allocs},
            "summary": summary,
            "settings": {k: v for k, v in vars(args).items() if k != "func"},
        },
    )
    plot_profile(prof, allocs, out / "profile.png", title=f"profile of {Path(args.model).name} on {args.dataset} · weighting {lw}")
    print(f"wrote {out / 'profile.json'} and {out / 'profile.png'}")
    return 0


# ================================================================================================
# parser
# ================================================================================================


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def _add_objective_args(p: argparse.ArgumentParser) -> None:
    from .weighting import LOSS_WEIGHTINGS, PREDICTION_TYPES

    p.add_argument(
        "--loss-weighting",
        default="auto",
        choices=("auto",) + tuple(LOSS_WEIGHTINGS),
        help="the training loss's weighting, for w(sigma) in phi = pi*w (METHOD.md section 4). auto: a stored "
        "schedule's, else edm on EDM schedulers and none on VP/flow (default: auto)",
    )
    p.add_argument("--prediction-type", default=None, choices=tuple(PREDICTION_TYPES),
                   help="the loss parameterization (default: the scheduler's convention)")
    p.add_argument("--snr-gamma", type=_positive_float, default=None, help="gamma of --loss-weighting min_snr")
    p.add_argument("--mu", type=float, default=None,
                   help="flow schedulers with use_dynamic_shifting: the mu of set_timesteps (a static shift of exp(mu)); "
                   "default: the stored schedule's shift")


def _add_hub_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--revision", default=None, help="Hub revision (branch, tag or commit) for a repo id")
    p.add_argument("--cache-dir", default=None, help="Hugging Face cache directory (default: the hub's own)")


def build_parser() -> argparse.ArgumentParser:
    from .samplers import SAMPLER_NAMES

    parser = argparse.ArgumentParser(
        prog="infonoise",
        description="Inspect InfoNoise schedules and see where a training-noise schedule spends compute. "
        "Noise levels are VE sigma throughout.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    sub.required = True
    samplers_help = f"comma-separated sampler names; accepted: {', '.join(SAMPLER_NAMES)}"

    p = sub.add_parser("show", help="print (and plot) the learned schedule stored in a scheduler config",
                       description="Print the learned InfoNoise schedule of a pipeline directory (scheduler/scheduler_config.json), "
                       "a scheduler directory, a JSON file (scheduler config or schedule payload) or a Hub repo id "
                       "(read through huggingface_hub; cached repos work offline).")
    p.add_argument("path", metavar="PATH_OR_REPO")
    p.add_argument("--plot", metavar="FILE", default=None, help="also draw the schedule (pi, base, rho_hat, phi) to FILE (PNG/PDF/SVG)")
    p.add_argument("--rows", type=_positive_int, default=16, help="rows of the per-bin table (default 16)")
    _add_hub_args(p)
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("profile", help="entropy-rate profile of a saved pipeline's model on data (paper Figure 4)",
                       description="Measure the unweighted x0-space error of a saved pipeline's model on a log-sigma grid, form the "
                       "entropy-rate profile rho_hat and overlay the effective allocations phi = pi*w of named schedules. "
                       "Writes OUTPUT/profile.png and OUTPUT/profile.json. Probe images are scaled to [-1, 1].")
    p.add_argument("--model", required=True, metavar="PATH", help="pipeline directory saved with save_pretrained (unet/ + scheduler/)")
    p.add_argument("--model-subfolder", default=None, help="model subfolder (default: unet or transformer, whichever exists)")
    p.add_argument("--scheduler", default=None, metavar="PATH", help="scheduler config to use instead of the pipeline's")
    p.add_argument("--dataset", required=True, metavar="NAME_OR_PATH", help="built-in data set name or a datasets.save_to_disk directory")
    p.add_argument("--split", default="test", help="data split (default: test)")
    p.add_argument("--image-column", default="image", help="image column of a local data set (default: image)")
    p.add_argument("--num-samples", type=_positive_int, default=256, help="probe samples (default 256)")
    p.add_argument("--samplers", default=_DEFAULT_SAMPLERS,
                   help=samplers_help + f" (default {_DEFAULT_SAMPLERS}; infonoise is added when the scheduler stores a learned schedule)")
    p.add_argument("--output", default="infonoise_profile", metavar="DIR", help="output directory (default: infonoise_profile)")
    p.add_argument("--num-levels", type=_positive_int, default=32,
                   help="grid points in log sigma (default 32; a stored schedule's bins when present)")
    p.add_argument("--num-noise-draws", type=_positive_int, default=2, help="noise draws per probe sample and level (default 2)")
    p.add_argument("--batch-size", type=_positive_int, default=128, help="model batch size (default 128)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--seed", type=int, default=0, help="seed of the probe subset and the noise (default 0)")
    p.add_argument("--edm-timestep-scale", type=_positive_float, default=EDM_TIMESTEP_SCALE,
                   help="EDM only: factor on c_noise = 0.25*ln(sigma) before the model; must match the training script's "
                   f"scaling (METHOD.md section 7; default {EDM_TIMESTEP_SCALE:g}, what this package's scripts use; "
                   "1 for models trained on raw c_noise)")
    p.add_argument("--gate", type=_gate_arg, default="auto", help="clean-end gate: auto, none, or a pinned pivot (VE sigma) (default auto)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_objective_args(p)
    p.set_defaults(func=_cmd_profile)

    p = sub.add_parser("dataset-profile", help="optimal-empirical-denoiser profile of a data set (no network)",
                       description="The entropy-rate profile of the optimal empirical denoiser of a finite data set (METHOD.md "
                       "section 2). Pixels are scaled to [-1, 1]. For small data sets it describes memorisation.")
    p.add_argument("--dataset", required=True, metavar="NAME_OR_PATH", help="built-in data set name or a datasets.save_to_disk directory")
    p.add_argument("--split", default="train", help="data split (default: train)")
    p.add_argument("--image-column", default="image", help="image column of a local data set (default: image)")
    p.add_argument("--max-samples", type=_positive_int, default=None, help="use a random subset of this many samples")
    p.add_argument("--num-levels", type=_positive_int, default=32, help="grid points in log sigma (default 32)")
    p.add_argument("--sigma-min", type=_positive_float, default=0.002, help="smallest VE sigma (default 0.002)")
    p.add_argument("--sigma-max", type=_positive_float, default=80.0, help="largest VE sigma (default 80)")
    p.add_argument("--num-noise-draws", type=_positive_int, default=256, help="Monte Carlo queries per level (default 256)")
    p.add_argument("--chunk-size", type=_positive_int, default=4096, help="data points per block of the streaming pass (default 4096)")
    p.add_argument("--device", default=None, help="torch device (default cpu)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--gate", type=_gate_arg, default="auto", help="clean-end gate: auto, none, or a pinned pivot (default auto)")
    p.add_argument("--output", default=None, metavar="DIR", help="write DIR/dataset_profile.json and .png")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_dataset_profile)

    p = sub.add_parser("compare", help="effective allocations of named schedules side by side (no data)",
                       description="Effective allocations phi = pi*w of named schedules on one scheduler's path; compared with "
                       "the stored profile rho_hat when the scheduler carries a learned schedule.")
    p.add_argument("--samplers", required=True, help=samplers_help)
    p.add_argument("--scheduler", required=True, metavar="PATH",
                   help="pipeline or scheduler directory, scheduler JSON, Hub repo id, or edm / ddpm / flow (default configs)")
    p.add_argument("--num-levels", type=_positive_int, default=64, help="grid points (default 64; a stored schedule's bins when present)")
    p.add_argument("--plot", metavar="FILE", default=None, help="draw the allocations to FILE")
    p.add_argument("--json", metavar="FILE", default=None, help="write the allocations to FILE")
    _add_objective_args(p)
    _add_hub_args(p)
    p.set_defaults(func=_cmd_compare)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``infonoise`` command; returns the exit status (0 success, 2 user error).

    ``--help`` and argument-parsing errors exit through argparse (``SystemExit`` with 0 or 2).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.debug:
        return args.func(args)
    try:
        return args.func(args)
    except CLIError as err:
        msg = str(err)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as err:
        # library errors name the argument and the accepted values; keep them to one line
        msg = _one_line(err)
    print(f"infonoise {args.command}: error: {msg}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # python -m diffusers_infonoise.cli
    sys.exit(main())
