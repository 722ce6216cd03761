"""Every command-line option the training scripts share, and the edge where the parsed namespace becomes explicit
values: the noise sampler and where it starts, and small frozen configs (:class:`RunConfig`,
:class:`OptimizerConfig`, :class:`AcceleratorConfig`, :class:`DataConfig`, :class:`HubTarget`). Each script
family's own options are :mod:`.unconditional_args` and :mod:`.text_to_image_args`. Nothing below these modules
reads or changes ``args``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys

from ..argtypes import (
    auto_arg,
    finite_float,
    nonnegative_float,
    nonnegative_int,
    output_dir_arg,
    plot_steps_arg,
    positive_float,
    positive_int,
    seed_arg,
    unit_interval_arg,
)
from ..densities import DensityRangeError
from ..logs import get_logger, process_rank
from ..objective import Objective, diffusers_density_params
from ..paths import path_class
from ..sampler import (
    FIXED_DENSITY_NAMES,
    PROFILE_BOUNDS,
    SAMPLER_NAMES,
    START_CHOICES,
    InfoNoiseSettings,
    SamplerStart,
    TrainingTimestepSampler,
    choose_start,
    make_sampler,
    unread_settings,
)
from ..schedule_io import env_true, hub_unreadable
from .datasets import DataConfig
from .loop import AcceleratorConfig, OptimizerConfig, RunConfig
from .outputs import HubTarget

logger = get_logger(__name__)

__all__ = [
    "tracker_config",
    "script_configs",
    "run_config",
    "optimizer_config",
    "accelerator_config",
    "data_config",
    "hub_target",
    "add_noise_sampler_args",
    "add_common_training_args",
    "baseline_density_params",
    "build_noise_sampler",
    "unread_infonoise_flags",
    "sampler_start",
    "check_sources",
    "check_mixed_precision_device",
    "option_errors",
    "script_command",
    "script_epilog",
]


#: the baseline flags by the density they set, with their defaults (the parser's): a flag changed from its default
#: must reach a density of the run, else it is refused (it did nothing, silently)
DENSITY_FLAGS = {
    "edm_lognormal": {"edm_p_mean": -1.2, "edm_p_std": 1.2},
    "logit_normal": {"logit_mean": 0.0, "logit_std": 1.0},
    "mode": {"mode_scale": 1.29},
}
_EDM, _LOGIT = DENSITY_FLAGS["edm_lognormal"], DENSITY_FLAGS["logit_normal"]


def add_noise_sampler_args(parser: argparse.ArgumentParser) -> None:
    """``--noise_sampler``, an ``--infonoise_<name>`` option for each setting of
    :class:`~diffusers_infonoise.sampler.settings.InfoNoiseSettings` that has one (its default, type, choices and help
    are the field's; a study setting's is left out of ``--help``), baseline density parameters, ``--snr_gamma``, the
    start's options and ``--show_noise_schedule``."""
    g = parser.add_argument_group("training-noise sampler (diffusers-infonoise)")
    g.add_argument(
        "--noise_sampler",
        type=str,
        default="infonoise",
        choices=SAMPLER_NAMES,
        metavar="NAME",
        help="Distribution of training noise levels: 'infonoise' (default) adapts it to the conditional-entropy rate; "
        f"a fixed density instead: {', '.join(FIXED_DENSITY_NAMES)}.",
    )
    for name, option in InfoNoiseSettings.options().items():  # the settings' own defaults, types and help
        g.add_argument(
            f"--infonoise_{name}",
            type=option["type"],
            default=option["default"],
            choices=option["choices"],
            # a study setting's option works (the benchmarks compare with it) but is not advertised
            help=argparse.SUPPRESS if option["help"] is None else option["help"],
        )
    g.add_argument("--edm_p_mean", type=finite_float, default=_EDM["edm_p_mean"], help="P_mean of 'edm_lognormal'.")
    g.add_argument("--edm_p_std", type=positive_float, default=_EDM["edm_p_std"], help="P_std of 'edm_lognormal'.")
    g.add_argument(
        "--logit_mean",
        type=finite_float,
        default=_LOGIT["logit_mean"],
        help="Mean of 'logit_normal' in diffusers' meaning: u ~ logit-normal(logit_mean, logit_std) indexes the "
        "descending table, so the noise level is s = 1 - u and a POSITIVE value means LESS noise (the SD3 "
        "paper's mean with the sign reversed).",
    )
    g.add_argument("--logit_std", type=positive_float, default=_LOGIT["logit_std"], help="Std of 'logit_normal'.")
    g.add_argument("--mode_scale", type=float, default=DENSITY_FLAGS["mode"]["mode_scale"], help="Scale of SD3 'mode' sampling.")
    g.add_argument(
        "--snr_gamma",
        type=positive_float,
        default=None,
        help="Min-SNR-gamma loss weighting (Hang et al. 2023); the sampler is told about it.",
    )
    g.add_argument(
        "--schedule_plot_steps",
        type=plot_steps_arg,
        default=500,
        help="Save and log the schedule plot and the histogram of drawn levels at a refresh of pi at most "
        "every this many optimizer steps (the first refresh always; rendering takes about a second of "
        "CPU, more than the sampler itself); 0: at every refresh; -1: never (the logged scalars and "
        "the cross-rank check stay).",
    )
    g.add_argument(
        "--infonoise_init",
        type=auto_arg,
        default="auto",
        choices=START_CHOICES,
        help="Where InfoNoise starts (METHOD.md 5.9): 'base' (the warm-up on the base density), 'stored' (the "
        "pretrained scheduler's stored schedule, or --infonoise_schedule_from's, rebuilt for this run's loss, "
        "weighting, floor, gate and bins; no warm-up unless --infonoise_warmup_steps is given), 'profile' "
        "(the pretrained model's errors on the training data, measured before step 1 with about "
        "min_count forward samples a bin), 'auto' (default): stored when the pretrained scheduler carries a "
        "schedule of this path, profile when a pretrained model is given, else base.",
    )
    g.add_argument(
        "--infonoise_profile_bound",
        type=str,
        default=None,
        choices=PROFILE_BOUNDS,
        help="A profile start's measured errors: 'none' (default) keeps them as measured; 'data' bounds them, for "
        "data on at most 16 values (binarized pixels, one-hot tokens), by the error of each element's own posterior "
        "mean on the training data, a bound on the Bayes MMSE, so that the pretrained model's error on new data is "
        "not read as entropy rate (METHOD.md 5.10; sooner on binarized fine-tunes, worse on one onto rescaled data). "
        "Other data is kept as measured either way, with a warning. 'data' is refused when the run's start is not a profile.",
    )
    g.add_argument(
        "--infonoise_schedule_from",
        type=str,
        default=None,
        metavar="PATH_OR_REPO",
        help="Start from the schedule stored in this pipeline folder, scheduler folder, scheduler JSON or Hub "
        "repo id (as --infonoise_init stored), for any model; another path's schedule is converted through "
        "VE sigma.",
    )
    g.add_argument(
        "--show_noise_schedule", action="store_true", help="Print and plot the training-noise density these options produce, then exit."
    )


def add_common_training_args(parser: argparse.ArgumentParser, *, defaults: dict | None = None) -> None:
    """The optimizer, schedule, logging, checkpoint and Hub arguments of diffusers' example scripts."""
    d = {"learning_rate": 1e-4, "train_batch_size": 16, "lr_warmup_steps": 500, **(defaults or {})}
    a = parser.add_argument
    a("--output_dir", type=output_dir_arg, default=d.get("output_dir", "infonoise-model"))
    a("--cache_dir", type=str, default=None, help="Where downloaded datasets and models are cached.")
    a("--seed", type=seed_arg, default=None, help="A seed for reproducible training, in [0, 2**32 - 1].")
    a("--train_batch_size", type=positive_int, default=d["train_batch_size"], help="Batch size per device.")
    a("--max_train_steps", type=positive_int, default=d.get("max_train_steps"), help="Total optimizer steps; overrides the epoch count.")
    a("--gradient_accumulation_steps", type=positive_int, default=1)
    a("--learning_rate", type=positive_float, default=d["learning_rate"])
    a(
        "--lr_scheduler",
        type=str,
        default="cosine",
        help='One of "linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup".',
    )
    a("--lr_warmup_steps", type=nonnegative_int, default=d["lr_warmup_steps"])
    a("--adam_beta1", type=unit_interval_arg, default=0.95 if d.get("unconditional") else 0.9, help="In [0, 1).")
    a("--adam_beta2", type=unit_interval_arg, default=0.999, help="In [0, 1).")
    a("--adam_weight_decay", type=nonnegative_float, default=1e-6 if d.get("unconditional") else 1e-2, help=">= 0.")
    a("--adam_epsilon", type=nonnegative_float, default=1e-08, help=">= 0.")
    a("--max_grad_norm", type=nonnegative_float, default=1.0, help="Gradient clipping norm (0: no clipping).")
    a("--mixed_precision", type=str, default=None, choices=["no", "fp16", "bf16"])
    a("--dataloader_num_workers", type=nonnegative_int, default=0)
    a("--checkpointing_steps", type=positive_int, default=500, help="Save an accelerate checkpoint every X optimizer steps.")
    a(
        "--checkpoints_total_limit",
        type=positive_int,
        default=None,
        help="Max number of checkpoints to keep (only this package's own are counted and deleted).",
    )
    a("--resume_from_checkpoint", type=str, default=None, help='A checkpoint-* folder or "latest".')
    a("--logging_dir", type=str, default="logs", help="Tensorboard log directory, relative to output_dir.")
    a("--push_to_hub", action="store_true")
    a("--hub_model_id", type=str, default=None)
    a("--hub_token", type=str, default=None)
    a("--hub_private_repo", action="store_true")


def _changed_density_flags(args, name: str | None) -> list[str]:
    """The baseline flags of density ``name`` that the command line changed from their defaults."""
    return [flag for flag, default in DENSITY_FLAGS.get(name, {}).items() if getattr(args, flag, default) != default]


def _refuse_unused_density_flags(args, used: str | None, what: str) -> None:
    """Refuse a baseline flag changed from its default when its density is not ``used`` by the run (``what`` says
    which sampler or base the run uses), naming the flag.

    Raises:
        ValueError: ``"--<flag>: sets the <density> density, which this run does not use (...)"``.
    """
    for name in DENSITY_FLAGS:
        if name != used and (changed := _changed_density_flags(args, name)):
            raise ValueError(
                f"--{changed[0]}: sets the {name} density, which this run does not use ({what}); pass "
                f"--noise_sampler {name}, or --infonoise_base {name} for an adaptive sampler's warm-up and floor, or leave it out"
            )


#: values that state an option's default although the parser's default is another (unset): the m̂ cap's documented ``auto``
_DEFAULT_SPELLED = {"mmse_cap": ("auto",)}


def unread_infonoise_flags(args, name: str) -> list[str]:
    """The ``--infonoise_*`` flags changed from their defaults that sampler ``name`` does not read (``--flag`` each,
    those of :func:`~diffusers_infonoise.sampler.unread_settings`: any for a fixed density, a baseline's own, none for
    InfoNoise). The start's flags are no settings: :func:`sampler_start` refuses them where they do not apply."""
    unread = unread_settings(name)
    return [
        f"--infonoise_{setting}"
        for setting, option in InfoNoiseSettings.options().items()  # the options' defaults (no script changes them)
        if setting in unread
        and getattr(args, f"infonoise_{setting}", option["default"]) not in (option["default"], *_DEFAULT_SPELLED.get(setting, ()))
    ]


def baseline_density_params(args, name: str | None) -> dict | None:
    """The density parameters the baseline flags give sampler/base ``name`` (``--edm_p_mean/--edm_p_std``,
    ``--logit_mean/--logit_std``, ``--mode_scale``), or None for a density without parameters. ``--logit_mean``
    has diffusers' meaning (> 0: less noise), turned into the SD3 paper's by
    :func:`~diffusers_infonoise.objective.diffusers_density_params`."""
    if name == "edm_lognormal":
        return {"P_mean": args.edm_p_mean, "P_std": args.edm_p_std}
    return diffusers_density_params(name, logit_mean=args.logit_mean, logit_std=args.logit_std, mode_scale=args.mode_scale)


def build_noise_sampler(
    args,
    noise_scheduler,
    *,
    objective: Objective,
    name: str | None = None,
    default_base: str | None = None,
    mu: float | None = None,
) -> TrainingTimestepSampler:
    """The sampler ``name`` (default ``--noise_sampler``) names, told the script's loss (``objective``), with the
    parameters of :func:`add_noise_sampler_args`.

    InfoNoise's base density is ``--infonoise_base``, else ``default_base`` (the script's own density,
    e.g. SD3's ``--weighting_scheme``), else the path's; a named base gets its parameters from the
    baseline flags (``--edm_p_mean/--edm_p_std``, ``--logit_mean/--logit_std``, ``--mode_scale``). The
    m̂ cap's ``auto`` is measured by the sampler on the data the script noises through it
    (``sampler.add_noise``): pixels, or VAE latents.
    """
    common = objective.keywords()
    if mu is not None:  # the training path of a dynamic-shift flow scheduler (training.flow.training_mu)
        common["mu"] = mu
    name = name or args.noise_sampler
    if (unread := unread_infonoise_flags(args, name)) and process_rank() == 0:
        # a warning, not a refusal: one argument list shared by a comparison's arms is how baselines are run (and the
        # same on every rank, so given once)
        kind = "the fixed density" if name in FIXED_DENSITY_NAMES else "the adaptive baseline"
        what = "an InfoNoise setting" if len(unread) == 1 else "InfoNoise settings"
        logger.warning(
            f"{', '.join(unread)}: {what} that this run's sampler does not read ({kind} {name!r}): ignored; pass "
            "--noise_sampler infonoise to use them"
        )
    if name not in FIXED_DENSITY_NAMES:  # the adaptive samplers, with InfoNoise's settings
        base = args.infonoise_base or default_base
        path_base = path_class(noise_scheduler).default_base
        if base is None and _changed_density_flags(args, path_base):
            base = path_base  # the path's own base, with the parameters the flags set
        _refuse_unused_density_flags(args, base or path_base, f"--noise_sampler {name} with the base {base or path_base}")
        if isinstance(base, str) and baseline_density_params(args, base) is not None:
            base = (base, baseline_density_params(args, base))
        unread = unread_settings(name)  # a baseline's (warned of above)
        kw = {k: getattr(args, f"infonoise_{k}") for k in InfoNoiseSettings.options() if k not in unread}
        kw["base"] = base
        cap = kw.pop("mmse_cap", None)
        if cap is not None:  # unset: the library's default (auto for ε and v)
            kw["mmse_cap"] = None if cap == "none" else cap
        if name == "infonoise":
            kw["use_stored_schedule"] = False  # the start is chosen explicitly: sampler_start
        with _density_flags_named(args, base[0] if isinstance(base, tuple) else base):
            return make_sampler(name, noise_scheduler, **common, **kw)
    _refuse_unused_density_flags(args, name, f"--noise_sampler {name}")
    with _density_flags_named(args, name):
        return make_sampler(name, noise_scheduler, **common, **(baseline_density_params(args, name) or {}))


@contextlib.contextmanager
def _density_flags_named(args, name: str | None):
    """A density the flags placed outside the path's range (``the density ... has (almost) no mass``) is reported led
    by the flags that placed it, as the user typed them."""
    try:
        yield
    except DensityRangeError as err:
        changed = _changed_density_flags(args, name)
        if changed:
            flags = " ".join(f"--{flag} {getattr(args, flag)}" for flag in changed)
            raise ValueError(f"{flags}: {err}") from None
        raise


def sampler_start(args, sampler: TrainingTimestepSampler, noise_scheduler, *, pretrained_model: bool) -> SamplerStart:
    """Where the run's sampler starts (``--infonoise_init``, ``--infonoise_schedule_from``; METHOD.md §5.9),
    resolved before anything is trained, so that a bad choice costs nothing: the stored schedule is read
    (and validated) here, from ``--infonoise_schedule_from`` or else the pretrained ``noise_scheduler``'s config.

    ``--infonoise_profile_bound`` sets a profile start's ``data_bound`` (METHOD.md §5.10); ``none``, the default, is
    accepted with any start.

    Raises:
        ValueError: ``--infonoise_schedule_from`` with ``--infonoise_init base`` or ``profile``; a source
            without a stored schedule; ``stored`` without one; ``profile`` without a pretrained model;
            ``--infonoise_profile_bound data`` for a run whose start is not a profile.
        ScheduleError: a stored schedule that is corrupted or of an unknown format version.
    """
    start = _resolve_start(args, sampler, noise_scheduler, pretrained_model=pretrained_model)
    bound = getattr(args, "infonoise_profile_bound", None)
    if bound == "data" and start.choice != "profile":
        remedy = "use --noise_sampler infonoise" if not sampler.learns_schedule else "drop it, or use --infonoise_init profile"
        raise ValueError(
            f"--infonoise_profile_bound data: bounds an InfoNoise profile start's errors, and this run starts {start.choice!r} "
            f"({start.reason}); {remedy}"
        )
    return dataclasses.replace(start, data_bound=bound == "data")  # logged by the training loop when it applies the start


def _resolve_start(args, sampler: TrainingTimestepSampler, noise_scheduler, *, pretrained_model: bool) -> SamplerStart:
    from ..schedule_io import read_schedule, read_schedule_from

    init, source = args.infonoise_init, getattr(args, "infonoise_schedule_from", None)
    if not sampler.learns_schedule:  # a fixed density (or Kingma & Gao): nothing to start
        if source or init in ("stored", "profile"):
            given = [f"--infonoise_init {init}"] if init in ("stored", "profile") else []  # auto: the default, not named
            given += [f"--infonoise_schedule_from {source}"] if source else []
            raise ValueError(
                f"{' / '.join(given)}: starts an InfoNoise sampler; this run's is {sampler.name!r} (use --noise_sampler infonoise)"
            )
        return choose_start("base", sampler)
    if source:
        if init in ("base", "profile"):
            raise ValueError(
                f"--infonoise_schedule_from {source}: starts from a stored schedule, but --infonoise_init is "
                f"{init!r}; drop one of them (or --infonoise_init stored)"
            )
        payload, where = read_schedule_from(source, revision=getattr(args, "revision", None), cache_dir=getattr(args, "cache_dir", None))
        start = choose_start("stored", sampler, stored=payload, source=where, pretrained_model=pretrained_model)
    else:
        try:
            stored = read_schedule(noise_scheduler)
        except ValueError as err:
            raise type(err)(f"the pretrained scheduler's stored schedule: {err}") from None
        start = choose_start(
            init, sampler, stored=stored, source="the pretrained scheduler" if stored else None, pretrained_model=pretrained_model
        )
    return start


def script_command(module: str) -> str:
    """The console command a training script is installed as: ``train_text_to_image_sd3`` → ``infonoise-train-text-to-image-sd3``."""
    return "infonoise-train-" + module.removeprefix("train_").replace("_", "-")


def script_epilog(module: str) -> str:
    """The end of a training script's ``--help``: how it runs once installed, and where fine-tuning starts."""
    return (
        f"Installed with diffusers-infonoise as the command {script_command(module)}, or python -m "
        f"diffusers_infonoise.training_scripts.{module}; on several processes: accelerate launch -m "
        f"diffusers_infonoise.training_scripts.{module} ... (from a checkout: training_scripts/{module}.py). "
        "Fine-tuning: give --pretrained_model_name_or_path, and the noise schedule starts where the model says "
        "(--infonoise_init auto: the schedule stored with it, else its errors measured on your data before step 1); "
        "--show_noise_schedule shows that start without training. diffusers' own scripts: the fine-tuning section of "
        "docs/integration.md in the repository."
    )


def check_sources(parser: argparse.ArgumentParser, args, *flags: str) -> None:
    """``parser.error`` (one line, exit status 2) for a source option naming a local path that is not there, a link
    loop or a device: ``--pretrained_model_name_or_path runs/zA`` beside a folder ``runs`` is a mistyped run folder,
    not the Hub repo ``runs/zA`` (:func:`~diffusers_infonoise.schedule_io.local_or_hub`); and for an ``owner/name``
    that the Hub would be asked for while it cannot answer (:func:`hub_unreadable`). Runs at parse time, before
    diffusers or datasets would spend most of a minute retrying the Hub offline; reads nothing from the network but
    a connection attempt of a few seconds at most (none with ``HF_HUB_OFFLINE`` set or the repo in the cache)."""
    from ..schedule_io import ScheduleSourceError, local_or_hub

    for flag in flags:
        spec = getattr(args, flag.lstrip("-"), None)
        if spec:
            try:
                where = local_or_hub(spec)
            except ScheduleSourceError as err:
                parser.error(f"{flag}: {err}")
            hub_id = where if isinstance(where, str) and "/" in where else None  # owner/name: a mistyped path, maybe
            why = hub_id and hub_unreadable(hub_id, dataset=flag == "--dataset_name", cache_dir=args.cache_dir)
            if why:
                parser.error(
                    f"{flag}: {spec}: no such local folder (./{spec.split('/')[0]} does not exist either), and as a Hub repo id it "
                    f"cannot be read: {why}; a mistyped local path?"
                )


def check_mixed_precision_device(parser: argparse.ArgumentParser, args) -> None:
    """``parser.error`` for ``--mixed_precision fp16`` where the run would train on the CPU (no CUDA, MPS or XPU device,
    or ``ACCELERATE_USE_CPU``): the text-to-image scripts' frozen parts in float16 there failed at step 1, after the
    models and the data were loaded."""
    import torch

    if args.mixed_precision != "fp16":
        return
    gpu = any(getattr(torch, kind, None) is not None and getattr(torch, kind).is_available() for kind in ("cuda", "xpu"))
    gpu = gpu or torch.backends.mps.is_available()
    if env_true("ACCELERATE_USE_CPU") or not gpu:
        parser.error("--mixed_precision fp16: needs a GPU, and this run trains on the CPU; accepted here: no or bf16")


@contextlib.contextmanager
def option_errors():
    """Around what a script resolves from its options before anything is trained (the pretrained scheduler, the
    sampler, its start, a stored schedule's source): a ``ValueError`` or ``OSError`` there is a mistake in the options
    (a start that does not apply, a source without a schedule, a model folder without a scheduler) and ends the run
    as argparse ends one, with ``<script>: error: <message>`` in one line on stderr and exit status 2, not a
    traceback."""
    try:
        yield
    except (ValueError, OSError) as err:
        text = str(err)
        if text.startswith("Caught ") and "Original Traceback" in text:  # torch's DataLoader worker wrapper: the error is its last line
            last = text.strip().splitlines()[-1]
            text = last.partition(": ")[2] or last
        message = _led_by_flag(" ".join(text.split()) or type(err).__name__)
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {message}\n")
        raise SystemExit(2) from None


def _led_by_flag(message: str) -> str:
    """A library error led by an InfoNoise setting's name (``floor: must be ...``) or a density flag's
    (``mode_scale: ...``) led instead by the option that sets it (``--infonoise_floor: must be ...``), the name a
    script's user typed."""
    density_flag = lambda text: any(text in flags for flags in DENSITY_FLAGS.values())  # noqa: E731
    name, sep, rest = message.partition(": ")
    if sep and name == "base" and density_flag(rest.partition(": ")[0]):
        # the base density's own check (base: mode_scale: ...): the flag that set the density, not --infonoise_base
        return _led_by_flag(rest)
    if sep and name in InfoNoiseSettings.options():
        return f"--infonoise_{name}: {rest}"
    if sep and density_flag(name):  # a density's own check (mode_scale: ...)
        return f"--{name}: {rest}"
    return message


def script_configs(args, *, report_to: str | None = None, default_dataset: str = "mnist") -> dict:
    """What every script's config takes from its parsed arguments: ``run`` (:func:`run_config`), ``optimizer``,
    ``accelerator`` (``report_to``: :func:`accelerator_config`), ``data`` (``default_dataset``: :func:`data_config`),
    ``hub``, ``tracker``, ``output_dir``, ``seed`` and ``show_noise_schedule``."""
    return dict(
        run=run_config(args),
        optimizer=optimizer_config(args),
        accelerator=accelerator_config(args, report_to=report_to),
        data=data_config(args, default_dataset=default_dataset),
        hub=hub_target(args),
        tracker=tracker_config(args),
        output_dir=args.output_dir,
        seed=args.seed,
        show_noise_schedule=args.show_noise_schedule,
    )


def run_config(args) -> RunConfig:
    """The :class:`RunConfig` of a script's parsed arguments (diffusers' names: ``--num_train_epochs`` in
    the text-to-image scripts, ``--num_epochs`` in train_unconditional)."""
    return RunConfig(
        output_dir=args.output_dir,
        train_batch_size=args.train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        max_train_steps=args.max_train_steps,
        num_train_epochs=args.num_train_epochs if hasattr(args, "num_train_epochs") else args.num_epochs,
        max_grad_norm=args.max_grad_norm,
        checkpointing_steps=args.checkpointing_steps,
        checkpoints_total_limit=args.checkpoints_total_limit,
        resume_from_checkpoint=args.resume_from_checkpoint,
        schedule_plot_steps=args.schedule_plot_steps,
        validation_epochs=getattr(args, "validation_epochs", 1),
        validation_prompts=tuple(getattr(args, "validation_prompts", None) or ()),
    )


def optimizer_config(args) -> OptimizerConfig:
    """The :class:`OptimizerConfig` of a script's parsed arguments."""
    return OptimizerConfig(
        learning_rate=args.learning_rate,
        lr_scheduler=args.lr_scheduler,
        lr_warmup_steps=args.lr_warmup_steps,
        adam_beta1=args.adam_beta1,
        adam_beta2=args.adam_beta2,
        adam_weight_decay=args.adam_weight_decay,
        adam_epsilon=args.adam_epsilon,
        scale_lr=bool(getattr(args, "scale_lr", False)),
    )


def tracker_config(args) -> dict:
    """``vars(args)`` restricted to what trackers accept as hyperparameters (int, float, str, bool)."""
    return {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, bool))}


def accelerator_config(args, *, report_to: str | None = None) -> AcceleratorConfig:
    """The :class:`AcceleratorConfig` of a script's parsed arguments; ``report_to`` overrides
    ``--report_to`` (train_unconditional's ``--logger``); ``"none"`` means no tracker."""
    tracker = report_to if report_to is not None else getattr(args, "report_to", None)
    return AcceleratorConfig(
        output_dir=args.output_dir,
        logging_dir=args.logging_dir,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        mixed_precision=args.mixed_precision,
        report_to=None if tracker in (None, "none") else tracker,
        seed=args.seed,
        allow_tf32=bool(getattr(args, "allow_tf32", False)),
    )


def data_config(args, *, default_dataset: str = "mnist") -> DataConfig:
    """The :class:`DataConfig` of a script's parsed arguments (``default_dataset`` when neither
    ``--dataset_name`` nor ``--train_data_dir`` is given)."""
    return DataConfig(
        dataset_name=args.dataset_name,
        dataset_config_name=args.dataset_config_name,
        train_data_dir=args.train_data_dir,
        cache_dir=args.cache_dir,
        max_train_samples=args.max_train_samples,
        seed=args.seed or 0,
        image_column=args.image_column,
        caption_column=getattr(args, "caption_column", None),
        resolution=args.resolution,
        center_crop=args.center_crop,
        random_flip=args.random_flip,
        train_batch_size=args.train_batch_size,
        dataloader_num_workers=args.dataloader_num_workers,
        default_dataset=default_dataset,
    )


def hub_target(args) -> HubTarget:
    """The :class:`HubTarget` of ``--push_to_hub --hub_model_id --hub_token --hub_private_repo``."""
    return HubTarget(push=bool(args.push_to_hub), repo_id=args.hub_model_id, token=args.hub_token, private=bool(args.hub_private_repo))
