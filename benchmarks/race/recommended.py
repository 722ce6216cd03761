"""A fixed density recommended from a profile, as an arm of the quality race (issue 32, "measured, not only fitted"):
``logit_normal#recommended`` is logit-normal with the parameters ``infonoise recommend`` fits to a profile of the
race's model on the race's data (:func:`diffusers_infonoise.diagnostics.recommend_parameters`, METHOD.md §6.1).

:func:`resolve` turns the arm into explicit parameters once per run, before it trains, and caches the answer as
``<root>/recommended/<run_id>.json`` (:func:`record_path`), so that a resumed tier does not redo it:

1. **The model profiled.** A fine-tune (``race.pretrained``): the pipeline every run of the race starts from, its
   step 0. From scratch: a pilot, the training script run exactly as the race runs the family at its default
   (``logit_normal``: logit-normal(0, 1), the path default of the transfer tier), same seed, batch and learning-rate
   schedule, for the arm's share of the race's steps (``Arm.pilot_fraction``: a quarter, or ``f`` of
   ``#recommended-pilot=<f>``); its saved pipeline (the EMA weights, as the script saves
   them), under ``<root>/recommended/<run_id>-pilot``.
2. **The profile.** :func:`diffusers_infonoise.diagnostics.profile_from_model`, forward passes only, at the settings
   of ``infonoise profile`` / ``infonoise recommend --model --dataset`` (:data:`PROFILE_SETTINGS`: their defaults), on
   probe examples of the race's training data as the training script loads them, with the scheduler, prediction type
   and loss weighting the script builds for the run (EDM: ``sample``, ``edm``).
3. **The fit, as the command prints it.** ``recommend_parameters`` of the family under that objective (``fit``), and
   the row ``infonoise recommend`` prints for this package's scripts on that profile
   (:func:`diffusers_infonoise.diagnostics.recommend_fixed_density`, trainer ``diffusers-infonoise``): its flags, TV,
   n_eff and warnings (``printed``). The run trains what a user who pastes that row trains: the row's parameters
   (rounded as printed), or the trainer's default (EDM log-normal(−1.2, 1.2)) where the command prints no row because
   the default fits as well. On the EDM (VE) path logit-normal(mean, std) in the library's convention is N(mean, std²)
   in ln σ, i.e. the family ``edm_lognormal`` (P_mean, P_std) of METHOD.md §6.1; the arm becomes
   ``logit_normal@mean=<P_mean>,std=<P_std>``, which the harness passes to the script as every explicit arm
   (``--logit_mean`` with diffusers' sign). Other paths are refused (their logit-normal is shifted by the scheduler's
   shift; not needed by any tier).
4. **The cost.** The pilot's optimizer steps and the profile's forward passes (one sample through the model at one
   level), in training steps of the race at :data:`FORWARD_PASSES_PER_TRAINED_SAMPLE` forward passes per trained sample
   (a backward pass costs about two forward passes), and as a share of one run of the race: a from-scratch arm costs
   1 + about 0.25 + the profile's share of a run, a fine-tune 1 + the profile's share. Wall times beside.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

from benchmarks import training_script
from benchmarks.race.arms import DEFAULT_PILOT_FRACTION, parse_arm

#: the profile's settings: the defaults of ``infonoise profile`` and ``infonoise recommend --model --dataset``
#: (``--num-samples``, ``--num-levels``, ``--num-noise-draws``, ``--batch-size``; gate ``auto``)
PROFILE_SETTINGS = {"num_samples": 256, "num_levels": 32, "num_noise_draws": 2, "batch_size": 128}
#: what one trained sample costs in forward passes (forward + backward ≈ 3 forwards), to count a profile in steps
FORWARD_PASSES_PER_TRAINED_SAMPLE = 3
#: per path kind and arm family: the family of METHOD.md §6.1 fitted, and its parameter names → the arm's
FITTED_FAMILY = {
    ("ve", "logit_normal"): ("edm_lognormal", {"P_mean": "mean", "P_std": "std"}),
    ("ve", "edm_lognormal"): ("edm_lognormal", {"P_mean": "P_mean", "P_std": "P_std"}),
}


def record_path(spec) -> Path:
    """Where a run's resolution is cached: ``<root>/recommended/<run_id>.json``."""
    return Path(spec.root) / "recommended" / f"{spec.run_id}.json"


def pilot_dir(spec) -> Path:
    """The pilot's output folder (from-scratch races): ``<root>/recommended/<run_id>-pilot``."""
    return Path(spec.root) / "recommended" / f"{spec.run_id}-pilot"


def resolved_arm(spec) -> str:
    """The arm a run trains: its sampler, or for a ``#recommended`` arm the explicit arm :func:`resolve` recorded.

    Raises:
        ValueError: a ``#recommended`` arm not resolved yet (naming the run and :func:`resolve`).
    """
    if not parse_arm(spec.sampler).recommended:
        return spec.sampler
    path = record_path(spec)
    if not path.exists():
        raise ValueError(
            f"sampler {spec.sampler!r} of run {spec.run_id}: resolved at run time; call benchmarks.race.recommended.resolve(spec) first"
        )
    return json.loads(path.read_text())["arm"]


def pilot_steps(race, fraction: float = DEFAULT_PILOT_FRACTION) -> int:
    """The pilot's optimizer steps: the share ``fraction`` of the race's (rounded down), at least 1."""
    return max(1, int(fraction * race.steps))


def _default_spec(spec):
    """The run of the arm's family at its default parameters in the same race and seed (whose arguments the pilot and
    the profile's training objective are read from)."""
    return dataclasses.replace(spec, sampler=parse_arm(spec.sampler).name)


def pilot_argv(spec) -> list[str]:
    """The training script's arguments of a from-scratch run's pilot: the family at its default as the race runs it,
    for :func:`pilot_steps` steps (one checkpoint, at the end), written to :func:`pilot_dir`; its end-of-run samples cut
    to one sample of one inference step (they do not touch the training)."""
    steps = pilot_steps(spec.race, parse_arm(spec.sampler).pilot_fraction)
    race = dataclasses.replace(spec.race, steps=steps, eval_every=steps, eval_steps=None)
    # argparse keeps the last value: the pilot's own folder; one sample of one step at the end (nobody looks at it)
    tail = ["--output_dir", str(pilot_dir(spec)), "--eval_batch_size", "1", "--num_inference_steps", "1"]
    return dataclasses.replace(_default_spec(spec), race=race).argv() + tail


def profile_forward_passes(num_probe: int, num_levels: int, num_noise_draws: int) -> int:
    """Forward passes of one sample through the model that a profile makes: probes × levels × draws."""
    return int(num_probe) * int(num_levels) * int(num_noise_draws)


def cost(race, *, pilot: int, forward_passes: int) -> dict:
    """What a resolution costs (module docstring, 4.): ``pilot_steps``, ``profile_forward_passes``, both in training
    steps of the race (``training_steps``) and as a share of one run (``run_share``)."""
    steps = pilot + forward_passes / (FORWARD_PASSES_PER_TRAINED_SAMPLE * race.batch_size)
    return {
        "pilot_steps": int(pilot),
        "profile_forward_passes": int(forward_passes),
        "training_steps": steps,
        "run_share": steps / race.steps,
        "how": f"pilot steps + profile forward passes / ({FORWARD_PASSES_PER_TRAINED_SAMPLE} x batch {race.batch_size}), "
        f"over the run's {race.steps} steps",
    }


def estimated_cost(race, settings: dict | None = None, pilot_fraction: float = DEFAULT_PILOT_FRACTION) -> dict:
    """:func:`cost` before anything ran (``--plan``): the pilot of a from-scratch race (``pilot_fraction`` of its steps)
    and a profile at ``settings`` (default :data:`PROFILE_SETTINGS`)."""
    s = {**PROFILE_SETTINGS, **(settings or {})}
    fwd = profile_forward_passes(s["num_samples"], s["num_levels"], s["num_noise_draws"])
    return cost(race, pilot=0 if race.pretrained else pilot_steps(race, pilot_fraction), forward_passes=fwd)


def _training(spec):
    """``(config, scheduler, objective)`` of the run as the training script parses and builds them: its
    :class:`~diffusers_infonoise.training.UnconditionalConfig`, its training scheduler and the loss it trains
    (:func:`~diffusers_infonoise.training.unconditional_scheduler`)."""
    from diffusers_infonoise import training

    cfg = training.unconditional_config(training_script("train_unconditional").parse_args(_default_spec(spec).argv()))
    scheduler, objective = training.unconditional_scheduler(cfg)
    return cfg, scheduler, objective


def probe_examples(cfg, num: int, seed: int):
    """(num, ...) float32 x0: ``num`` training examples (a permutation by ``seed``) as the training script loads them
    for its :class:`~diffusers_infonoise.training.UnconditionalConfig` ``cfg``
    (:func:`~diffusers_infonoise.training.unconditional_dataset`), in the model's units."""
    import numpy as np
    import torch

    from diffusers_infonoise.training import unconditional_dataset

    dataset, collate, _, _ = unconditional_dataset(cfg.data, sequence_column=cfg.sequence_column, alphabet=cfg.alphabet)
    idx = np.random.default_rng(seed).permutation(len(dataset))[: min(num, len(dataset))]
    return (collate or torch.utils.data.default_collate)([dataset[int(i)] for i in idx])


def load_pipeline_model(folder):
    """The denoiser of a pipeline folder (``unet/``, the class its config names), in eval mode on the race's device."""
    import diffusers
    import torch

    name = json.loads((Path(folder) / "unet" / "config.json").read_text())["_class_name"]
    model = getattr(diffusers, name).from_pretrained(str(folder), subfolder="unet")
    return model.to("cuda" if torch.cuda.is_available() else "cpu").eval()


def fit(profile, scheduler, arm: str, objective) -> dict:
    """The arm's parameters fitted to ``profile`` for a training on ``scheduler`` with ``objective`` (an
    :class:`~diffusers_infonoise.objective.Objective`):
    ``{"arm", "params", "tv", "family"}`` (``family``: the METHOD.md §6.1 family fitted, ``tv``: TV(π_fit, π*) of the
    fitted family)."""
    from diffusers_infonoise.diagnostics import recommend_parameters
    from diffusers_infonoise.paths import path_from_scheduler

    name = parse_arm(arm).name
    kind = path_from_scheduler(scheduler).kind
    if (kind, name) not in FITTED_FAMILY:
        raise ValueError(
            f"arm {arm!r}: #recommended is fitted on the EDM (VE) path only, where {name} is a normal in ln sigma; got a {kind} path"
        )
    family, names = FITTED_FAMILY[(kind, name)]
    fitted = recommend_parameters(profile, scheduler, families=[family], **objective.keywords())
    params = {names[k]: float(v) for k, v in fitted[family]["params"].items()}
    return {"arm": _arm(name, params), "params": params, "tv": float(fitted[family]["tv"]), "family": family}


def _arm(name: str, params: dict) -> str:
    return f"{name}@" + ",".join(f"{k}={v:.6g}" for k, v in params.items())


#: the printed flags of this package's EDM row → the arm's parameters (``logit_normal``'s names)
_PRINTED_FLAGS = {"--edm_p_mean": "mean", "--edm_p_std": "std"}


def printed(profile, scheduler, arm: str, objective) -> dict:
    """What ``infonoise recommend`` prints for this package's scripts on ``profile`` (module docstring, 3.) and the arm a
    user who pastes it trains: ``{"arm", "params", "flags", "row", "default", "dropped", "warnings", "notes"}``
    (``row``: the printed setting's TV, RV and n_eff, None where the command printed no row; ``params`` then the
    trainer default's)."""
    import shlex

    from diffusers_infonoise.diagnostics import recommend_fixed_density

    rec = recommend_fixed_density(profile, scheduler, trainers="diffusers-infonoise", **objective.keywords())
    (row,) = rec.trainers
    setting = row["settings"][0] if row["settings"] else None
    flags = setting["flags"] if setting else row["default"]["flags"]
    a = shlex.split(flags)
    params = {_PRINTED_FLAGS[f]: float(a[a.index(f) + 1]) for f in _PRINTED_FLAGS}
    keep = ("tv", "rv", "n_eff_per_batch")
    return {
        "arm": _arm(parse_arm(arm).name, params),
        "params": params,
        "flags": flags,
        "row": None if setting is None else {k: setting.get(k) for k in keep},
        "default": {k: row["default"].get(k) for k in (*keep, "flags")},
        "dropped": list(row["dropped"]),
        "warnings": list(setting["warnings"]) if setting else list(row["default"]["warnings"]),
        "notes": [*rec.notes, *row["notes"]],
    }


def resolve(spec, settings: dict | None = None) -> dict:
    """Resolve a ``#recommended`` run (module docstring): the record, read from :func:`record_path` when it exists,
    else measured (the pilot of a from-scratch race first, kept when it exists) and written there. ``settings``: the
    profile's, over :data:`PROFILE_SETTINGS` (tests use smaller ones). The race's model config
    (``spec.model_config_path``) must exist, as :func:`benchmarks.race.harness.run_one` writes it before it calls this.

    Returns:
        ``{"arm", "params", "tv", "family", "fit", "printed", "objective", "source", "profile", "cost", "settings"}``:
        ``arm``/``params`` what the printed row trains (:func:`printed`), ``fit`` the unrounded fit (:func:`fit`), ``tv``
        its TV; ``cost`` with the pilot's and the profile's wall times.

    Raises:
        ValueError: an arm that is not ``#recommended``, or a path :func:`fit` refuses.
    """
    import torch

    from diffusers_infonoise.diagnostics import profile_from_model

    if not parse_arm(spec.sampler).recommended:
        raise ValueError(f"sampler {spec.sampler!r}: not a #recommended arm")
    path = record_path(spec)
    if path.exists():
        return json.loads(path.read_text())
    s = {**PROFILE_SETTINGS, **(settings or {})}
    race = spec.race
    path.parent.mkdir(parents=True, exist_ok=True)
    cfg, scheduler, objective = _training(spec)
    pilot_s = None  # a pilot found on disk (an interrupted resolution) cost what it cost; not timed again
    if race.pretrained:
        folder, steps = Path(cfg.pretrained_model_name_or_path), 0
        source = {"kind": "pretrained (step 0)", "model": str(folder), "pretrain": race.pretrained}
    else:
        folder, steps = pilot_dir(spec), pilot_steps(race, parse_arm(spec.sampler).pilot_fraction)
        argv = pilot_argv(spec)
        if not (folder / "model_index.json").exists():
            t0 = time.time()
            training_script("train_unconditional").main(argv)
            pilot_s = round(time.time() - t0, 1)
            for ck in folder.glob("checkpoint-*"):
                shutil.rmtree(ck, ignore_errors=True)
        source = {"kind": "pilot", "model": str(folder), "pilot_sampler": parse_arm(spec.sampler).name, "pilot_steps": steps,
                  "pilot_command": argv}  # fmt: skip
    t0 = time.time()
    x0 = probe_examples(cfg, s["num_samples"], spec.seed)
    profile = profile_from_model(
        load_pipeline_model(folder),
        scheduler,
        x0,
        num_levels=s["num_levels"],
        **objective.keywords(),
        batch_size=s["batch_size"],
        num_noise_draws=s["num_noise_draws"],
        generator=torch.Generator().manual_seed(spec.seed),
        progress=False,
    )
    profile_s = time.time() - t0
    fwd = profile_forward_passes(x0.shape[0], profile.log_sigma.numel(), s["num_noise_draws"])
    fitted = fit(profile, scheduler, spec.sampler, objective)
    shown = printed(profile, scheduler, spec.sampler, objective)
    record = {
        "arm": shown["arm"],
        "params": shown["params"],
        "tv": fitted["tv"],
        "family": fitted["family"],
        "fit": fitted,
        "printed": shown,
        "objective": objective.record(),
        "source": {**source, "probe": f"{x0.shape[0]} training examples (seed {spec.seed}) as the script loads them"},
        "profile": {k: v for k, v in profile.to_dict().items() if k in ("log_sigma", "rho_hat", "mmse", "gate", "meta")},
        "cost": {**cost(race, pilot=steps, forward_passes=fwd), "wall_time_s": {"pilot": pilot_s, "profile": round(profile_s, 1)}},
        "settings": s,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)
    return record
