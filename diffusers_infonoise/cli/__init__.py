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
* ``recommend SOURCE`` (or ``--model PATH --dataset NAME``): the fixed density of each family a trainer offers
  (logit-normal, flow shift, EDM log-normal, timestep range) closest to the draw density π* = ρ̂/w of the training's
  weighting, clamped to what each trainer represents, with the flags of diffusers' scripts, kohya-ss/sd-scripts,
  SimpleTuner, OneTrainer, ai-toolkit and musubi-tuner, the TV and effective batch of the draws they give beside the
  default's (METHOD.md §6.1).

All noise levels are VE σ (METHOD.md §1). Errors a user can fix (a path without a learned schedule,
an unknown sampler name, a model that does not fit the data or scheduler, an uncached Hub repo while
offline) print one line ``infonoise SUBCOMMAND: error: ...`` and exit with status 2, led by the flag to change
(``--prediction-type: ...``, also for the library's errors about the argument that flag sets); ``--debug``
shows the traceback instead. Warnings print once each as one line ``infonoise SUBCOMMAND: warning: ...`` (a category
other than ``UserWarning`` is named), without the source line Python's own display adds.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from ..argtypes import auto_arg, figure_file_arg, gate_arg, output_dir_arg, output_file_arg, positive_float, positive_int
from ..generation import EDM_TIMESTEP_SCALE
from .commands import _cmd_compare, _cmd_dataset_profile, _cmd_grid, _cmd_profile, _cmd_recommend, _cmd_show
from .loading import _DEFAULT_SAMPLERS, CLIError, _as_option_error, _one_line

__all__ = ["main", "CLIError"]


def _device_arg(text: str) -> str:
    """A torch device this machine has (cpu, cuda[:i] with CUDA, mps with MPS)."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"not a torch device: {text!r} (e.g. cpu, cuda, cuda:1, mps)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text!r}: this machine has no CUDA device; use cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text!r}: there are {torch.cuda.device_count()} CUDA devices")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise argparse.ArgumentTypeError(f"{text!r}: MPS is not available here; use cpu")
    return text


def _add_objective_args(p: argparse.ArgumentParser) -> None:
    from ..weighting import LOSS_WEIGHTINGS, PREDICTION_TYPES

    p.add_argument(
        "--loss-weighting",
        type=auto_arg,
        default="auto",
        choices=("auto",) + tuple(LOSS_WEIGHTINGS),
        help="the training loss's weighting, for w(sigma) in phi = pi*w (METHOD.md section 4). auto: a stored "
        "schedule's, else edm on EDM schedulers and none on VP/flow (default: auto)",
    )
    p.add_argument(
        "--prediction-type",
        default=None,
        choices=tuple(PREDICTION_TYPES),
        help="the loss parameterization (default: the scheduler's convention)",
    )
    p.add_argument("--snr-gamma", type=positive_float, default=None, help="gamma of --loss-weighting min_snr")
    p.add_argument(
        "--mu",
        type=float,
        default=None,
        help="flow schedulers with use_dynamic_shifting: the mu of set_timesteps (a static shift of exp(mu)); "
        "default: the stored schedule's shift",
    )


def _add_measure_args(p: argparse.ArgumentParser, *, required: bool) -> None:
    """What measuring a profile of a saved pipeline's model on data takes (``profile``, ``recommend``)."""
    p.add_argument("--model", required=required, metavar="PATH", help="pipeline directory saved with save_pretrained (unet/ + scheduler/)")
    p.add_argument("--model-subfolder", default=None, help="model subfolder (default: unet or transformer, whichever exists)")
    p.add_argument(
        "--dataset", required=required, metavar="NAME_OR_PATH", help="built-in data set name or a datasets.save_to_disk directory"
    )
    p.add_argument("--split", default="test", help="data split (default: test)")
    p.add_argument("--image-column", default="image", help="image column of a local data set (default: image)")
    p.add_argument("--num-samples", type=positive_int, default=256, help="probe samples (default 256)")
    p.add_argument(
        "--num-levels", type=positive_int, default=32, help="grid points in log sigma (default 32; a stored schedule's bins when present)"
    )
    p.add_argument("--num-noise-draws", type=positive_int, default=2, help="noise draws per probe sample and level (default 2)")
    p.add_argument("--batch-size", type=positive_int, default=128, help="model batch size (default 128)")
    p.add_argument("--device", type=_device_arg, default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--seed", type=int, default=0, help="seed of the probe subset and the noise (default 0)")
    p.add_argument(
        "--edm-timestep-scale",
        type=positive_float,
        default=EDM_TIMESTEP_SCALE,
        help="EDM only: factor on c_noise = 0.25*ln(sigma) before the model; must match the training script's "
        f"scaling (METHOD.md section 7; default {EDM_TIMESTEP_SCALE:g}, what this package's scripts use; "
        "1 for models trained on raw c_noise)",
    )
    p.add_argument("--gate", type=gate_arg, default="auto", help="clean-end gate: auto, none, or a pinned pivot (VE sigma) (default auto)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_hub_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--revision", default=None, help="Hub revision (branch, tag or commit) for a repo id")
    p.add_argument("--cache-dir", default=None, help="Hugging Face cache directory (default: the hub's own)")


def build_parser() -> argparse.ArgumentParser:
    from ..sampler import SAMPLER_NAMES

    parser = argparse.ArgumentParser(
        prog="infonoise",
        description="Inspect InfoNoise schedules and see where a training-noise schedule spends compute. "
        "Noise levels are VE sigma throughout.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    sub.required = True
    samplers_help = f"comma-separated sampler names; accepted: {', '.join(SAMPLER_NAMES)}"

    p = sub.add_parser(
        "show",
        help="print (and plot) the learned schedule stored in a scheduler config",
        description="Print the learned InfoNoise schedule of a pipeline directory (scheduler/scheduler_config.json), "
        "a scheduler directory, a JSON file (scheduler config or schedule payload) or a Hub repo id "
        "(read through huggingface_hub; cached repos work offline).",
    )
    p.add_argument("path", metavar="PATH_OR_REPO")
    p.add_argument(
        "--plot",
        metavar="FILE",
        type=figure_file_arg,
        default=None,
        help="also draw the schedule (pi, base, rho_hat, phi) to FILE (PNG/PDF/SVG)",
    )
    p.add_argument("--rows", type=positive_int, default=16, help="rows of the per-bin table (default 16)")
    _add_hub_args(p)
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser(
        "profile",
        help="entropy-rate profile of a saved pipeline's model on data (paper Figure 4)",
        description="Measure the unweighted x0-space error of a saved pipeline's model on a log-sigma grid, form the "
        "entropy-rate profile rho_hat and overlay the effective allocations phi = pi*w of named schedules. "
        "Writes OUTPUT/profile.png and OUTPUT/profile.json. Probe images are scaled to [-1, 1].",
    )
    _add_measure_args(p, required=True)
    p.add_argument("--scheduler", default=None, metavar="PATH", help="scheduler config to use instead of the pipeline's")
    p.add_argument(
        "--samplers",
        default=_DEFAULT_SAMPLERS,
        help=samplers_help + f" (default {_DEFAULT_SAMPLERS}; infonoise is added when the scheduler stores a learned schedule)",
    )
    p.add_argument(
        "--output", type=output_dir_arg, default="infonoise_profile", metavar="DIR", help="output directory (default: infonoise_profile)"
    )
    _add_objective_args(p)
    p.set_defaults(func=_cmd_profile)

    p = sub.add_parser(
        "dataset-profile",
        help="optimal-empirical-denoiser profile of a data set (no network)",
        description="The entropy-rate profile of the optimal empirical denoiser of a finite data set (METHOD.md "
        "section 2). Pixels are scaled to [-1, 1] (8-bit by 255, 16-bit by 65535; uint8/uint16 arrays alike); a column of "
        "float arrays (datasets Array2D/Array3D: latents, rescaled data) is taken as stored, as train_unconditional.py "
        "trains on it. For small data sets it describes memorisation.",
    )
    p.add_argument("--dataset", required=True, metavar="NAME_OR_PATH", help="built-in data set name or a datasets.save_to_disk directory")
    p.add_argument("--split", default="train", help="data split (default: train)")
    p.add_argument("--image-column", default="image", help="image column of a local data set (default: image)")
    p.add_argument("--max-samples", type=positive_int, default=None, help="use a random subset of this many samples")
    p.add_argument("--num-levels", type=positive_int, default=32, help="grid points in log sigma (default 32)")
    p.add_argument("--sigma-min", type=positive_float, default=0.002, help="smallest VE sigma (default 0.002)")
    p.add_argument("--sigma-max", type=positive_float, default=80.0, help="largest VE sigma (default 80)")
    p.add_argument("--num-noise-draws", type=positive_int, default=256, help="Monte Carlo queries per level (default 256)")
    p.add_argument("--chunk-size", type=positive_int, default=4096, help="data points per block of the streaming pass (default 4096)")
    p.add_argument("--device", type=_device_arg, default=None, help="torch device (default cpu)")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--gate", type=gate_arg, default="auto", help="clean-end gate: auto, none, or a pinned pivot (default auto)")
    p.add_argument("--output", type=output_dir_arg, default=None, metavar="DIR", help="write DIR/dataset_profile.json and .png")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_dataset_profile)

    p = sub.add_parser(
        "compare",
        help="effective allocations of named schedules side by side; a stored schedule against your data",
        description="Effective allocations phi = pi*w of named schedules on one scheduler's path; compared with "
        "the stored profile rho_hat when the scheduler carries a learned schedule. With --profile, the stored "
        "schedule (a shared one, before you train with it) against a profile of your data: the TV between the two "
        "rho_hat, and between the schedule's phi and your data's rho_hat.",
    )
    p.add_argument("--samplers", default=None, help=samplers_help + " (optional with --profile)")
    p.add_argument(
        "--profile",
        default=None,
        metavar="FILE",
        help="profile.json of 'infonoise profile' (your model on your data) or dataset_profile.json of 'infonoise dataset-profile'",
    )
    p.add_argument(
        "--scheduler",
        required=True,
        metavar="PATH",
        help="pipeline or scheduler directory, scheduler JSON, Hub repo id, or edm / ddpm / flow (default configs)",
    )
    p.add_argument("--num-levels", type=positive_int, default=64, help="grid points (default 64; a stored schedule's bins when present)")
    p.add_argument("--plot", metavar="FILE", type=figure_file_arg, default=None, help="draw the allocations to FILE")
    p.add_argument("--json", metavar="FILE", type=output_file_arg, default=None, help="write the allocations to FILE")
    _add_objective_args(p)
    _add_hub_args(p)
    p.set_defaults(func=_cmd_compare)

    from ..diagnostics.trainers import TRAINER_NAMES

    p = sub.add_parser(
        "recommend",
        help="the fixed density of each family your trainer offers that fits your data, with the flags to paste",
        description="Fit, for each family of fixed training densities a trainer offers (logit-normal, a flow shift on "
        "uniform or logit-normal(0, 1) sampling, EDM log-normal, a timestep range), the member closest in KL to the draw "
        "density pi* = rho_hat/w of the training's loss (closed form, docs/METHOD.md section 6.1), clamp it to what each "
        "trainer represents, and print each trainer's flags with the TV(pi, pi*) and effective batch (n_eff = batch/RV of "
        "the weighted loss) of the draws they give, beside its default's; a row whose TV is not 0.01 below the default's is left "
        "out with a line, a row is fitted for the loss its trainer trains, and a line warns where a fit is 5% noisier than "
        "the default, clamped or rests on model error. rho_hat comes from a stored schedule (fitted once its run has settled), a "
        "profile.json of 'infonoise profile', or a profile measured here (--model and --dataset, forward passes only).",
    )
    p.add_argument(
        "source",
        nargs="?",
        metavar="SOURCE",
        help="a stored schedule (pipeline or scheduler directory, scheduler or payload JSON, Hub repo id, as "
        "--infonoise_schedule_from reads) or a profile.json of 'infonoise profile'; omit it with --model and --dataset",
    )
    _add_measure_args(p, required=False)
    # measuring's own flags are left unset here unless given, so that one given with a SOURCE (which they do not
    # apply to) is told; the command fills in their defaults when it measures
    measured = [a for a in p._actions if a.option_strings and a.dest not in ("model", "help", "no_progress")]
    defaults = {a.dest: (a.option_strings[0], a.type(a.default) if a.type and isinstance(a.default, str) else a.default) for a in measured}
    for a in measured:
        a.default = argparse.SUPPRESS
    p.set_defaults(measure_defaults=defaults)
    p.add_argument(
        "--scheduler",
        default=None,
        metavar="PATH",
        help="the scheduler of the training you will run (its path: pipeline or scheduler directory, scheduler JSON, Hub "
        "repo id, or edm / ddpm / flow for the default configs); default: the source's (with --model: the pipeline's, "
        "which the profile is measured through)",
    )
    p.add_argument("--trainer", default="all", choices=("all",) + TRAINER_NAMES, help="whose flags to print (default: all)")
    p.add_argument("--plot", metavar="FILE", type=figure_file_arg, default=None, help="draw rho_hat with the fitted allocations to FILE")
    p.add_argument("--json", metavar="FILE", type=output_file_arg, default=None, help="write the fits and every trainer's flags to FILE")
    _add_objective_args(p)
    _add_hub_args(p)
    p.set_defaults(func=_cmd_recommend)

    from ..inference_grid import DEFAULT_GRID_DENSITY, GRID_DENSITIES

    p = sub.add_parser(
        "grid",
        help="inference steps placed by the learned schedule (InfoGrid)",
        description="The InfoGrid of a pipeline's stored schedule (METHOD.md section 8): N inference steps at "
        "equal increments of entropic time, printed next to the scheduler's own spacing, in VE sigma and in "
        "what the scheduler's set_timesteps takes (sigmas= or timesteps=).",
    )
    p.add_argument("path", metavar="PIPELINE", help="pipeline or scheduler directory, scheduler JSON, or Hub repo id")
    p.add_argument("--steps", type=positive_int, required=True, help="number of inference steps N")
    p.add_argument(
        "--density",
        choices=GRID_DENSITIES,
        default=DEFAULT_GRID_DENSITY,
        help=f"entropy-rate density of entropic time (default {DEFAULT_GRID_DENSITY}): rho (gated rho_hat), q "
        "(ungated m/sigma^2) or q_sigma (q times sigma)",
    )
    p.add_argument("--mu", type=float, default=None, help="flow schedulers with dynamic shifting: the pipeline's mu")
    p.add_argument("--plot", metavar="FILE", type=figure_file_arg, default=None, help="draw the grid against the default spacing to FILE")
    p.add_argument(
        "--json",
        metavar="FILE",
        type=output_file_arg,
        default=None,
        help="write the grid to FILE: its VE sigmas, the scheduler's default spacing (VE sigma) and the set_timesteps argument",
    )
    _add_hub_args(p)
    p.set_defaults(func=_cmd_grid)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``infonoise`` command; returns the exit status (0 success, 2 user error).

    ``--help`` and argument-parsing errors exit through argparse (``SystemExit`` with 0 or 2).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.debug:
        return args.func(args)
    with warnings.catch_warnings():  # restores the caller's display when the command returns
        warnings.showwarning = _one_line_warnings(args.command)
        return _run(args)


def _one_line_warnings(command: str):
    """A ``warnings.showwarning`` that prints each distinct warning once, as one line led by the command: the library's
    warnings are about the schedule shown, and a command may load it more than once (the filters still decide what shows)."""
    shown = set()

    def show(message, category, filename, lineno, file=None, line=None):
        text = " ".join(str(message).split())
        if text in shown:
            return
        shown.add(text)
        kind = "warning" if category is UserWarning else category.__name__
        print(f"infonoise {command}: {kind}: {text}", file=sys.stderr if file is None else file)

    return show


def _run(args) -> int:
    try:
        return args.func(args)
    except CLIError as err:
        msg = str(err)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as err:
        # library errors name the argument and the accepted values; keep them to one line, naming the flag that sets it
        msg = _as_option_error(_one_line(err), args)
    print(f"infonoise {args.command}: error: {msg}", file=sys.stderr)
    return 2
