"""The ``infonoise`` subcommands: show, compare, dataset-profile, profile, recommend, grid."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from .loading import (
    _SCHEDULER_SHORTCUTS,
    CLIError,
    _load_config,
    _load_images,
    _load_pipeline_parts,
    _load_scheduler,
    _objective,
    _one_line,
    _parse_samplers,
    _read_json,
    _scheduler_from_config,
    _stored_and_grid,
    scheduler_option,
)


def _fmt(v: float) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:.3g}"


def _window_text(density, log_sigma, central=0.9) -> str:
    from ..diagnostics import profile_window

    lo, hi = profile_window(density, log_sigma, central)
    return f"{math.exp(lo):.3g}..{math.exp(hi):.3g}"


def _mode_sigma(density, log_sigma) -> float:
    import torch

    return math.exp(float(log_sigma[int(torch.argmax(density))]))


def _json_safe(value):
    """``value`` with every non-finite float as null: JSON has no Infinity or NaN, and strict readers refuse them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(_json_safe(data), fh, indent=1, allow_nan=False)


def _n_eff(n_eff: float) -> str:
    """n_eff per batch as printed: 2 decimals, and 2 significant digits below 0.1 (never a flat 0.00)."""
    return f"{n_eff:.2f}" if n_eff >= 0.1 else f"{n_eff:.2g}"


def _cmd_show(args) -> int:
    import torch

    from .. import densities
    from ..diagnostics import allocation, normalize_density, total_variation, window_mass
    from ..sampler import InfoNoiseTrainingTimestepSampler
    from ..sampler.starts import describe_start
    from ..schedule_io import FORMAT, read_schedule, validate_payload

    config, where = _load_config(args.path, revision=args.revision, cache_dir=args.cache_dir)
    bare = config.get("format") == FORMAT  # a bare payload: its path builds the scheduler before it is validated
    payload = None if bare else read_schedule(config)
    if not bare and payload is None:
        raise CLIError(
            f"{where}: no learned InfoNoise schedule in this scheduler config (no '_infonoise_schedule' entry); "
            "it was not saved by a run with an InfoNoise sampler"
        )
    scheduler = _scheduler_from_config(config, where)
    payload = validate_payload(config) if bare else payload  # each payload is validated once
    sampler = InfoNoiseTrainingTimestepSampler.from_stored(scheduler, payload)
    x = sampler.estimator.centers
    edges = sampler.estimator.edges
    widths = edges[1:] - edges[:-1]
    pi = normalize_density(densities.bin_masses(sampler.density, edges) / widths, x)
    base = normalize_density(densities.bin_masses(sampler.base, edges) / widths, x)
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
        f"  start            {describe_start(payload.get('start'))}",
        *_moves_lines(payload),
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
    tau = sampler.settings.temperature
    target = "rho_hat" if tau == 1.0 else f"rho_hat^{tau:g}"
    tempered = None if rho is None or tau == 1.0 else normalize_density(rho**tau, x)
    if rho is not None and sampler.settings.target_space == "pi":  # the study variant: its draws follow rho_hat
        drawn = total_variation(pi, rho if tau == 1.0 else tempered, x)
        out.append(
            f"  pi vs {target:<12} target_space=pi (a study variant: the draws follow {target}, so phi ~ {target}*w): "
            f"TV(pi, {target}) = {drawn:.3f} (floor {sampler.settings.floor:g}); "
            f"TV(phi, rho_hat) = {total_variation(phi, rho, x):.3f}, large by design (METHOD.md section 5.10)"
        )
    elif rho is not None and sampler.settings.target_space in _STUDY_TARGETS:  # its phi is not held to the floor
        space = sampler.settings.target_space
        out.append(
            f"  phi vs rho_hat   target_space={space} (a study target, docs/METHOD.md 4.1: {_STUDY_TARGETS[space]}): "
            f"TV(phi = pi*w, rho_hat) = {total_variation(phi, rho, x):.3f}, not held to the floor"
        )
    elif tempered is not None:  # a tempered target: phi follows rho_hat^tau, which the floor bounds
        out.append(
            f"  phi vs {target:<12} a tempered target (pi ~ {target}/w): TV(phi, {target}) = "
            f"{total_variation(phi, tempered, x):.3f} (floor {sampler.settings.floor:g} in {sampler.settings.floor_space}-space; "
            f"METHOD.md section 5 wants <= floor + 0.02); TV(phi, rho_hat) = {total_variation(phi, rho, x):.3f}, "
            "large by design"
        )
    elif rho is not None and (payload.get("adapted") is False or payload.get("num_updates") == 0):
        out.append(  # METHOD.md section 5's check is of an adapted pi: the base density is far from rho_hat by design
            "  phi vs rho_hat   not judged: pi is still the base density (saved before its first refresh, within the warm-up)"
        )
    elif rho is not None:
        out.append(
            f"  phi vs rho_hat   {window_mass(phi, rho, x):.1%} of phi inside rho_hat's central 90% window; "
            f"TV(phi, rho_hat) = {total_variation(phi, rho, x):.3f} (floor {sampler.settings.floor:g} in "
            f"{sampler.settings.floor_space}-space; METHOD.md section 5 wants <= floor + 0.02)"
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
        from ..diagnostics import plot_schedule

        plot_schedule(sampler, args.plot, title=f"learned schedule: {where}")
        print(f"wrote {args.plot}")
    return 0


def _cmd_compare(args) -> int:
    import torch

    from ..diagnostics import allocation, normalize_density, total_variation, window_mass

    if args.samplers is None and args.profile is None:
        raise CLIError("compare: give --samplers, --profile or both")
    scheduler, where = scheduler_option(args.scheduler, revision=args.revision, cache_dir=args.cache_dir)
    if args.profile is not None:
        _print_schedule_fit(scheduler, where, Path(args.profile))
        if args.samplers is None:
            return 0
    names = _parse_samplers(args.samplers)
    objective = _objective(args, scheduler)
    stored, x = _stored_and_grid(scheduler, args)
    pt, lw = objective.prediction_type, objective.loss_weighting  # as printed
    allocs = []
    for name in names:
        try:
            allocs.append(allocation(name, scheduler, log_sigma=x, **objective.keywords(), mu=args.mu))
        except ValueError as err:
            raise CLIError(f"{name}: {_one_line(err)}") from None
    rho = None
    if stored is not None and stored.get("rho_hat") is not None and all(v is not None for v in stored["rho_hat"]):
        rho = normalize_density(torch.tensor(stored["rho_hat"], dtype=torch.float64), x)
    unlearned = _infonoise_without_schedule(allocs, stored, where)
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
    _print_base_notes(allocs, unlearned)
    if "infonoise" in names and unlearned is None and _draws_variant(stored):
        print(f"  note: {_DRAWS_NOTE}")
    if "infonoise" in names and unlearned is None and (tau := _temperature(stored)) != 1.0:
        print(
            f"  note: this schedule's target is tempered (temperature={tau:g}): its phi follows rho_hat^{tau:g}, so its "
            "TV to rho_hat is large by design (docs/METHOD.md 5); `infonoise show` gives its distance to rho_hat^tau"
        )
    if args.plot:
        from ..diagnostics import plot_allocations

        drawn = _base_named(allocs, unlearned)
        plot_allocations(drawn, args.plot, rho=rho, title=f"effective allocations · {type(scheduler).__name__} · weighting {lw}")
        print(f"wrote {args.plot}")
    if args.json:
        data = {"scheduler": where, "stored_schedule": stored is not None, "allocations": {a.name: a.to_dict() for a in allocs}}
        space = "pi" if _draws_variant(stored) else "phi"
        _write_json(Path(args.json), {**data, **_infonoise_shows(names, unlearned, space)})
        print(f"wrote {args.json}")
    return 0


#: adaptive samplers that learn during a run and store nothing: outside a run, their allocation is their base density
_UNSTORED_ADAPTIVE = ("kingma_gao", "loss_slope")


def _moves_lines(payload: dict) -> list[str]:
    """``infonoise show``'s line on π's last changes (the payload's ``pi_moves``; none in payloads written before it)."""
    from ..diagnostics.recommend import MAX_SETTLED_MOVE, SETTLED_MOVES, judged_moves, pi_still_moving

    moves = payload.get("pi_moves") or {}
    if not moves.get("tv"):
        return []
    pairs = ", ".join(f"{t:.3f} at step {s}" for s, t in zip(moves["steps"], moves["tv"]))
    _, judged, whole = judged_moves(payload)
    first = " (the first, from the base density, not counted)" if whole else ""
    if len(judged) < SETTLED_MOVES:
        verdict = f"fewer than {SETTLED_MOVES} changes{first}: " + ("too few to tell, a fit of it warns" if whole else "not judged")
    elif pi_still_moving(payload):
        verdict = f"still moving (the last {SETTLED_MOVES} sum above {MAX_SETTLED_MOVE:g}{first}): a fit of it warns"
    else:
        verdict = f"settled (the last {SETTLED_MOVES} sum to at most {MAX_SETTLED_MOVE:g}{first}; docs/METHOD.md 6.1)"
    return [f"  pi moved         TV {pairs}; {verdict}"]


def _print_base_notes(allocs, unlearned: dict | None) -> None:
    """The ``note:`` lines of ``compare`` and ``profile``: an ``infonoise`` row that is its base density
    (:func:`_infonoise_without_schedule`), and the adaptive peers, which never store a schedule."""
    if unlearned is not None:
        print(f"  note: {unlearned['note']}")
    peers = [a.name for a in allocs if a.name in _UNSTORED_ADAPTIVE]
    if peers:
        print(f"  note: {', '.join(peers)} adapt during a run and store no schedule: here their rows are their base densities")


def _base_named(allocs, unlearned: dict | None) -> list:
    """``allocs`` for a figure, the ``infonoise`` one renamed to say it is its base density when ``unlearned``
    (:func:`_infonoise_without_schedule`), so that the legend does not pass it off as a learned schedule."""
    import dataclasses

    if unlearned is None:
        return list(allocs)
    label = f"infonoise = base {unlearned['base_name']} ({unlearned['short']})"
    return [dataclasses.replace(a, name=label) if a.name == "infonoise" else a for a in allocs]


def _infonoise_shows(names, unlearned: dict | None, target_space: str = "phi") -> dict:
    """The JSON field saying what the ``infonoise`` allocation shows (none when it is not among ``names``), with the
    stored schedule's ``target_space``."""
    if "infonoise" not in names:
        return {}
    if unlearned is None:
        return {"infonoise": {"shows": "stored schedule", "target_space": target_space}}
    return {"infonoise": {"shows": "base density", "base": unlearned["base"], "note": unlearned["note"]}}


def _infonoise_without_schedule(allocs, stored, where: str) -> dict | None:
    """When ``compare`` shows the ``infonoise`` sampler without an adapted schedule (the scheduler holds no stored
    schedule, or one saved before it adapted), what its row is: the base density a run would start from (its warm-up
    density), not an adapted schedule. ``{"base": the sampler's base description, "base_name": its name in words,
    "short": why in a few words, "note": one line}``; None when ``infonoise`` is not compared or its row is an adapted
    stored schedule."""
    for a in allocs:
        if a.name != "infonoise" or a.meta["sampler"].get("adapted"):
            continue
        base = a.meta["sampler"]["base"]
        params = ", ".join(f"{k}={v}" for k, v in base.items() if k != "name")
        name = base["name"] + (f"({params})" if params else "") if "name" in base else json.dumps(base)
        why = (
            f"{where} holds no stored InfoNoise schedule"
            if stored is None
            else f"the schedule stored in {where} was saved before it adapted (at optimizer step {stored['optimizer_steps']})"
        )
        note = (
            f"{why}: the infonoise row is its base density {name}, the warm-up density a run would start from, not an "
            "adapted schedule (a run adapts pi to the model's losses after the warm-up)"
        )
        short = "no stored schedule" if stored is None else "stored before it adapted"
        return {"base": dict(base), "base_name": name, "short": short, "note": note}
    return None


def _print_schedule_fit(scheduler, where: str, profile_file: Path) -> None:
    """The stored schedule of ``scheduler`` against a profile JSON of the user's data (METHOD.md §5.9)."""
    from ..diagnostics import load_learned_sampler, schedule_fit
    from ..schedule_io import read_schedule

    payload = read_schedule(scheduler)
    if payload is None:
        raise CLIError(f"{where}: holds no stored InfoNoise schedule to compare with --profile")
    if payload.get("adapted") is False:  # the schedule is at fault, not the profile file
        raise CLIError(
            f"{where}: its stored schedule was saved before it adapted (at optimizer step {payload['optimizer_steps']}): "
            "it holds no estimate to compare with --profile"
        )
    data = _read_json(profile_file)
    profile = data.get("profile", data)
    try:
        fit = schedule_fit(load_learned_sampler(scheduler), profile)
    except ValueError as err:
        raise CLIError(f"--profile {profile_file}: {_one_line(err)}") from None
    print(f"stored schedule of {where} against {profile_file} ({fit['grid_points']} grid points):")
    print(f"  TV(stored rho_hat, your data's rho_hat)          {fit['tv_rho']:.3f}")
    print(f"  TV(stored phi = pi*w, your data's rho_hat)       {fit['tv_phi']:.3f}")
    if _draws_variant(payload):
        print(f"  TV(stored pi, your data's rho_hat)               {fit['tv_pi']:.3f}")
        print(f"  note: {_DRAWS_NOTE}")
        return
    print(
        "  (0: the schedule spends compute where your data resolves; a run from it starts there, and its own losses "
        "take over within about one memory of the estimator, docs/METHOD.md 5.10)"
    )


#: what ``show`` says the draws of the other study targets follow (``target_space``, docs/METHOD.md §4.1)
_STUDY_TARGETS = {
    "importance": "draws ~ rho_hat*m_hat, each draw's loss multiplied so that the loss's allocation is rho_hat",
    "rho_draws": "draws ~ rho_hat, each draw's loss multiplied by a factor ~ 1/w",
    "reducible": "draws ~ rho_hat*R_hat, R_hat the error a level sheds per e-fold of its draws; the weighting unchanged",
}

#: what ``compare`` and ``show`` say of a schedule of the study variant ``target_space="pi"``
_DRAWS_NOTE = (
    "this schedule is the study variant target_space=pi: its draws pi follow rho_hat and the loss weight w scales them, "
    "so its phi = pi*w is far from rho_hat by design (docs/METHOD.md 5.10); the training scripts start from it with the "
    "method (pi ~ rho_hat/w, rebuilt from its m_hat) unless --infonoise_target_space pi is given"
)


def _temperature(payload) -> float:
    """The τ of a stored schedule's tempered target ``φ ∝ ρ̂^τ`` (1: the method, or no schedule)."""
    return float(((payload or {}).get("hyperparameters") or {}).get("temperature", 1.0))


def _draws_variant(payload) -> bool:
    """Whether a stored schedule is of the study variant ``target_space="pi"`` (its draws follow ρ̂)."""
    return bool(payload) and (payload.get("hyperparameters") or {}).get("target_space") == "pi"


def _cmd_dataset_profile(args) -> int:
    import torch

    from ..diagnostics import plot_profile, profile_from_dataset

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
    lo, hi = float(x.min()), float(x.max())
    prof.meta.update({"dataset": args.dataset, "split": args.split, "value_range": [lo, hi]})
    _print_profile(
        prof, f"optimal-empirical-denoiser profile of {args.dataset} ({args.split}, {x.shape[0]} samples, values in [{lo:.3g}, {hi:.3g}])"
    )
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
        print(
            f"  {math.exp(float(x[i])):9.4g} {float(prof.mmse[i]):10.4g} {_fmt(se):>9} {float(prof.q[i]):9.4f} "
            f"{float(prof.rho_hat[i]):9.4f}"
        )


def _measure_profile(args):
    """The profile of ``--model`` on ``--dataset`` (forward passes only; METHOD.md §6), for ``profile`` and
    ``recommend``: ``(profile, model, scheduler, where, subfolder, x0, objective, stored payload or None)``."""
    import torch

    from ..diagnostics import profile_from_model
    from ..paths import scheduler_kind

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
        print(
            f"note: resizing probe images from {tuple(x0.shape[-2:])} to the model's sample_size {size} (bilinear, antialiased)",
            file=sys.stderr,
        )
        x0 = torch.nn.functional.interpolate(x0, size=size, mode="bilinear", antialias=True, align_corners=False).clamp(-1, 1)
    model_kwargs = {}
    if getattr(cfg, "num_class_embeds", None):
        if labels is None:
            raise CLIError("model/data mismatch: the model is class-conditional (num_class_embeds) but the data set has no 'label' column")
        model_kwargs["class_labels"] = labels
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model.to(device).eval()
    objective = _objective(args, scheduler)
    stored, x_grid = _stored_and_grid(scheduler, args)
    gen = torch.Generator().manual_seed(args.seed)
    try:
        prof = profile_from_model(
            model,
            scheduler,
            x0,
            sigmas=torch.exp(x_grid),
            **objective.keywords(),
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
    return prof, model, scheduler, where, subfolder, x0, objective, stored


def _cmd_profile(args) -> int:
    from ..diagnostics import allocation, compare_allocations, plot_profile

    names = _parse_samplers(args.samplers)
    prof, model, scheduler, where, subfolder, x0, objective, stored = _measure_profile(args)
    pt, lw = objective.prediction_type, objective.loss_weighting  # as printed
    if stored is not None and "infonoise" not in names:
        names.append("infonoise")
    allocs = []
    for name in names:
        try:
            allocs.append(allocation(name, scheduler, log_sigma=prof.log_sigma, **objective.keywords(), mu=args.mu))
        except ValueError as err:
            raise CLIError(f"{name}: {_one_line(err)}") from None
    summary = compare_allocations(prof, allocs)
    prof.meta.update(
        {
            "model_path": str(args.model),
            "model_subfolder": subfolder,
            "scheduler_source": where,
            "dataset": args.dataset,
            "split": args.split,
        }
    )
    _print_profile(
        prof,
        f"entropy-rate profile of {args.model} ({type(model).__name__}, {type(scheduler).__name__}) on {args.dataset} "
        f"({x0.shape[0]} probe samples)",
    )
    print(
        f"  allocations (prediction_type={pt}, loss_weighting={lw}): share of phi inside rho_hat's 90% window, TV, "
        "share where rho_hat < 1% of peak"
    )
    for a in allocs:
        s = summary[a.name]
        print(f"    {a.name:<16} {s['window_mass']:7.1%}   TV {s['total_variation']:.3f}   wasted {s['wasted_mass']:.1%}")
    unlearned = _infonoise_without_schedule(allocs, stored, where)
    _print_base_notes(allocs, unlearned)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(
        out / "profile.json",
        {
            "profile": prof.to_dict(),
            "allocations": {a.name: a.to_dict() for a in allocs},
            "summary": summary,
            "settings": {k: v for k, v in vars(args).items() if k != "func"},
            **_infonoise_shows(names, unlearned),
        },
    )
    title = f"profile of {Path(args.model).name} on {args.dataset} · weighting {lw}"
    plot_profile(prof, _base_named(allocs, unlearned), out / "profile.png", title=title)
    print(f"wrote {out / 'profile.json'} and {out / 'profile.png'}")
    return 0


def _cmd_grid(args) -> int:
    import copy

    from ..inference_grid import infogrid
    from ..scheduler_grids import _FLOW, scheduler_grid_kwargs, scheduler_sigmas_as_ve

    config, where = _load_config(args.path, revision=args.revision, cache_dir=args.cache_dir)
    scheduler = _scheduler_from_config(config, where)
    flow = type(scheduler).__name__ in _FLOW
    if args.mu is not None and not flow:
        raise CLIError(f"--mu: only flow-matching schedulers take a dynamic shift; {where} has a {type(scheduler).__name__}")
    if flow and scheduler.config.get("use_dynamic_shifting") and args.mu is None:
        raise CLIError(
            "--mu: the scheduler uses dynamic shifting; pass the pipeline's mu (Flux: calculate_shift of the image's sequence length)"
        )
    grid = infogrid(scheduler, args.steps, density=args.density)
    default = copy.deepcopy(scheduler)
    default.set_timesteps(args.steps, **({"mu": args.mu} if args.mu is not None else {}))
    spacing = scheduler_sigmas_as_ve(default)
    ((key, values),) = scheduler_grid_kwargs(scheduler, grid.sigmas, mu=args.mu).items()
    values = [float(v) for v in values]
    print(f"{where}: InfoGrid ({args.density}) of {args.steps} steps for {type(scheduler).__name__}")
    print(f"{'step':>4}  {'InfoGrid sigma':>14}  {'default sigma':>13}  {key + '=':>12}")
    for i in range(args.steps):
        d = f"{float(spacing[i]):13.4g}" if i < spacing.numel() else f"{'':13}"
        v = f"{values[i]:12.6g}" if i < len(values) else ""
        print(f"{i:4d}  {float(grid.sigmas[i]):14.4g}  {d}  {v}")
    print(
        "VE sigmas, for generate_images(sigmas=...) and InfoNoiseUnconditionalPipeline(sigmas=...): "
        f"{[round(float(v), 6) for v in grid.sigmas]}"
    )
    what = {
        "sigmas": "its Karras ramp positions, as a tensor"
        if type(scheduler).__name__.startswith("EDM")
        else "its sigmas" + (" before its shift, which it re-applies" if flow else "")
    }.get(key, "its integer timesteps")
    print(f"for {type(scheduler).__name__}.set_timesteps and diffusers pipelines ({what}): {key}={[round(v, 6) for v in values]}")
    if args.json:
        data = {
            "source": where,
            "scheduler": type(scheduler).__name__,
            "density": args.density,
            "num_inference_steps": args.steps,
            "mu": args.mu,
            # VE sigma, decreasing; the final step to 0 is the scheduler's; null for an infinite σ (a flow
            # scheduler's s = 1, pure noise), which JSON cannot hold
            "sigmas": [float(v) if math.isfinite(v) else None for v in map(float, grid.sigmas)],
            "default_sigmas": [float(v) if math.isfinite(v) else None for v in map(float, spacing)],
            "set_timesteps": {key: values},  # the keyword set_timesteps and the pipelines take
            "set_timesteps_means": what,
        }
        _write_json(Path(args.json), data)
        print(f"wrote {args.json}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3))
        ax.plot(range(args.steps), grid.sigmas.numpy(), "o-", label=f"InfoGrid ({args.density})")
        ax.plot(range(spacing.numel()), spacing.numpy(), "s--", label=f"{type(scheduler).__name__} default")
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("VE sigma")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)
        plt.close(fig)
        print(f"wrote {args.plot}")
    return 0


def _recorded_profile_scheduler(data: dict, p: Path, why: str):
    """The scheduler of a profile JSON whose path config does not rebuild it (``why``; a VP path: the ᾱ table is not
    stored), read from where the profile says its scheduler came from (``infonoise profile`` records
    ``meta.scheduler_source``)."""
    prof = data.get("profile", data)
    meta = (prof.get("meta") or {}) if isinstance(prof, dict) else {}
    where = meta.get("scheduler_source")
    model = meta.get("model_path")
    if isinstance(where, str) and where:
        spec = where.split(" ", 1)[1] if where.startswith("default ") else where
        try:
            scheduler, _ = _load_scheduler({"DDPMScheduler": "ddpm"}.get(spec, spec))
            return scheduler
        except CLIError:
            pass
    recorded = f"the scheduler it records ({where}) cannot be read here" if where else "it records no scheduler"
    folder = f" ({model})" if model else ""
    raise CLIError(
        f"SOURCE: {p}: the profile does not rebuild its scheduler ({why}) and {recorded}; pass --scheduler with the "
        f"pipeline or scheduler folder of the model you profiled{folder}"
    )


def _unbuildable_path(path_config) -> str | None:
    """Why a profile's recorded path config does not rebuild its scheduler, or None when it does (or records none)."""
    from ..paths import PATH_CLASSES

    if not isinstance(path_config, dict) or path_config.get("kind") not in PATH_CLASSES:
        return None
    try:
        PATH_CLASSES[path_config["kind"]].scheduler_from_config(path_config)
    except (TypeError, ValueError) as err:
        return _one_line(err)
    return None


def _recommend_source(args):
    """``(source, scheduler or None, description)`` of ``recommend``'s SOURCE: a profile JSON's dict (one whose path
    does not rebuild its scheduler, VP, with the scheduler it records), or a stored schedule's payload with the
    scheduler it is stored in (None when ``--scheduler`` replaces it)."""
    from ..schedule_io import FORMAT, ScheduleSourceError, read_schedule_from

    p = Path(args.source).expanduser()
    if p.is_file() and p.suffix == ".json":
        data = _read_json(p)
        if "profile" in data or ("log_sigma" in data and "rho_hat" in data):
            prof = data.get("profile", data)
            why = _unbuildable_path((prof.get("meta") or {}).get("path")) if isinstance(prof, dict) and not args.scheduler else None
            return data, (_recorded_profile_scheduler(data, p, why) if why else None), f"profile {p}"
    config, where = _load_config(args.source, revision=args.revision, cache_dir=args.cache_dir)
    try:
        payload, _ = read_schedule_from(config)
    except ScheduleSourceError:
        raise CLIError(
            f"SOURCE: {where} holds no stored InfoNoise schedule (no '_infonoise_schedule' in its scheduler config) and is "
            "not a profile JSON; give a pipeline or schedule saved by an InfoNoise run, a profile.json of 'infonoise "
            "profile', or --model with --dataset to measure a profile"
        ) from None
    # a bare payload's path is rebuilt by the library, which names --scheduler where it cannot be (VP)
    scheduler = None if args.scheduler or config.get("format") == FORMAT else _scheduler_from_config(config, where)
    return payload, scheduler, f"stored schedule {where}"


def _figures_text(d: dict) -> str:
    return f"TV {d['tv']:.3f}  n_eff {_n_eff(d['n_eff_per_batch'])}x batch"


def _recommend_refused(rec, what: str, args) -> int:
    """``recommend``'s refusal (a stored schedule saved before it adapted or not settled): one line, status 0."""
    print(f"no flags: {what}: {rec.refused}; fit a schedule saved later in the run, or a profile of the model (--model, --dataset)")
    if args.json:
        _write_json(Path(args.json), {**rec.to_dict(), "settings": {k: v for k, v in vars(args).items() if k != "func"}})
        print(f"wrote {args.json}")
    if args.plot:
        print(f"--plot: {args.plot} not written: nothing was fitted to draw")
    return 0


def _cmd_recommend(args) -> int:
    from ..diagnostics import plot_allocations, profile_window, recommend_fixed_density

    if args.source is None and args.model is None:
        raise CLIError(
            "SOURCE: give a stored schedule (pipeline, scheduler folder, JSON or Hub repo), a profile.json of 'infonoise "
            "profile', or --model with --dataset to measure a profile"
        )
    if args.source is not None and args.model is not None:
        raise CLIError("SOURCE, --model: give one source of rho_hat, a stored schedule or profile JSON, or a model to profile")
    if args.source is not None and not args.source.strip():
        raise CLIError(
            "SOURCE: is empty; give a stored schedule (pipeline, scheduler folder, JSON or Hub repo) or a profile.json of "
            "'infonoise profile'"
        )
    if (
        args.mu is not None
        and (args.scheduler or "").lower() in _SCHEDULER_SHORTCUTS
        and _SCHEDULER_SHORTCUTS[args.scheduler.lower()][0].startswith("FlowMatch")
    ):
        raise CLIError(
            f"--mu: the built-in '{args.scheduler}' scheduler has no dynamic shifting; --mu is for a scheduler config with "
            "use_dynamic_shifting true (a Flux pipeline's); for a static shift give --scheduler a scheduler config (folder "
            "or JSON) with that shift, and no --mu"
        )
    given = [flag for dest, (flag, _) in args.measure_defaults.items() if hasattr(args, dest)]
    if args.source is not None and given:
        raise CLIError(
            f"{', '.join(given)}: measure a profile of --model; SOURCE already holds rho_hat on its own grid (a stored "
            "schedule's bins, a profile's points): leave them out, or give --model instead of SOURCE"
        )
    for dest, (_, default) in args.measure_defaults.items():
        if not hasattr(args, dest):
            setattr(args, dest, default)
    if args.model is not None:
        if args.dataset is None:
            raise CLIError("--dataset: a profile of --model needs data: a built-in data set name or a datasets.save_to_disk directory")
        source, _, scheduler, *_ = _measure_profile(args)
        what = f"profile of {args.model} on {args.dataset}"
    else:
        source, scheduler, what = _recommend_source(args)
        if args.scheduler:
            scheduler, _ = scheduler_option(args.scheduler, revision=args.revision, cache_dir=args.cache_dir)
    rec = recommend_fixed_density(  # its errors name the argument: main shows them led by its flag
        source,
        scheduler,
        prediction_type=args.prediction_type,
        loss_weighting=None if args.loss_weighting == "auto" else args.loss_weighting,
        snr_gamma=args.snr_gamma,
        mu=args.mu,
        trainers=args.trainer,
        description=what,
    )
    if rec.target is None:  # a stored schedule saved before it adapted: nothing to show but why
        return _recommend_refused(rec, what, args)
    t = rec.target
    path, obj, x = t.path.config(), t.objective, t.log_sigma
    lo, hi = profile_window(t.rho_hat, x)
    print(
        f"rho_hat: {what}; {x.numel()} points, VE sigma {math.exp(float(x[0])):.3g}..{math.exp(float(x[-1])):.3g}, "
        f"mode {_mode_sigma(t.rho_hat, x):.3g}, central 90% window {math.exp(lo):.3g}..{math.exp(hi):.3g}"
    )
    print(
        f"training: {path['kind']} path"
        + (f" (shift {path['shift']:.4g})" if "shift" in path else "")
        + f", prediction_type={obj['prediction_type']}, loss_weighting={obj['loss_weighting']}"
        + (f", snr_gamma={obj['snr_gamma']}" if obj.get("snr_gamma") is not None else "")
        + " (the fit depends on w: pass the loss your trainer trains with --prediction-type, --loss-weighting)"
    )
    for note in rec.notes:
        print(f"note: {note}")
    for warning in t.warnings:  # also at the start of every fitted row's warning (none if every row is dropped)
        print(f"warning: {warning}")
    if rec.refused:
        return _recommend_refused(rec, what, args)
    print(
        "fitted families: KL-closest to the draw density pi* = rho_hat/w (docs/METHOD.md 6.1); TV(pi, pi*) on the grid, "
        "n_eff = batch/RV of the weighted loss:"
    )
    for name, fit in rec.families.items():
        params = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in fit.params.items())
        warn = f" | warning: {t.warnings[0].split(':')[0]} (above)" if t.warnings else ""
        print(f"  {name:<20} {params:<30} TV {fit.tv:.3f}  n_eff {_n_eff(1 / fit.rv)}x batch{warn}")
    for row in rec.trainers:
        if "unsupported" in row:
            print(f"{row['trainer']}: nothing for a {path['kind']} path: {row['unsupported']}")
            continue
        print(f"{row['trainer']} {row['scripts']} ({row['source'].split(':')[0]}); its loss: {row['loss']}")
        for note in row.get("notes", []):
            print(f"  note: {note}")
        d = row["default"]
        print(f"  {'default':<20} {_figures_text(d)}  {d['flags']}" + (" | warning: " + "; ".join(d["warnings"]) if d["warnings"] else ""))
        for s in row["settings"]:
            warn = " | warning: " + "; ".join(s["warnings"]) if s["warnings"] else ""
            first, *more = s["flags"].split("\n")  # a config file's keys, one a line (ai-toolkit's YAML): below the row
            head = "the lines below" if more else first
            print(f"  {s['family'] or 'choice':<20} {_figures_text(s)}  {head}{warn}")
            for line in [first, *more] if more else []:
                print(f"      {line}")
        for line in row["dropped"]:
            print(f"  ({line})")
    if args.plot:
        plot_allocations(
            rec.allocations(),
            args.plot,
            rho=t.rho_hat,
            rho_label="ρ̂ (target)",
            title=f"fixed densities closest to rho_hat · {path['kind']} path · {obj['prediction_type']}, {obj['loss_weighting']}",
        )
        print(f"wrote {args.plot}")
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k != "func"}
        _write_json(Path(args.json), {**rec.to_dict(), "settings": settings})
        print(f"wrote {args.json}")
    return 0
