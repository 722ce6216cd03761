"""The quality race's harness (issue 6): each run is ONE call of
``training_scripts/train_unconditional.py``'s ``main(argv)`` in a worker process (:func:`run_one`),
after which every ``checkpoint-N/unet_ema`` is sampled with the race's fixed inference sampler and
scored (:func:`evaluate_checkpoints`), and the final InfoNoise schedule is read from the saved
scheduler with the library's reader (:func:`stored_schedule`).

The cache of runs: each run's result JSON is written under ``<root>/runs/<run_id>.json`` as soon as
it finishes (:class:`RunSpec`); a run whose JSON exists is not run again (resume), an interrupted run
resumes from its latest checkpoint, and another tier's identical run can be copied instead of rerun
(:func:`reuse_run`). :func:`print_plan` lists the runs with a time estimate calibrated on the quick
tier."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import REPO, RESULTS, code_version, training_script
from benchmarks.race import recommended
from benchmarks.race.arms import DEFAULT_PILOT_FRACTION, parse_arm, split_arms
from benchmarks.race.data import DATASETS, load_data
from benchmarks.race.races import (
    ALL_SAMPLERS,
    EVAL_SEED,
    JITTER_SEEDS,
    NUM_INFERENCE_STEPS,
    PRETRAINS,
    Pretrain,
    Race,
    eval_scheduler,
    tier_pretrains,
    unet_config,
)
from benchmarks.race.sample_quality import Scorer
from benchmarks.race.tiers import get_tier
from diffusers_infonoise import read_schedule

SCRIPT = REPO / "training_scripts" / "train_unconditional.py"
#: Samplers that take the race's ``extra_args`` (the InfoNoise options, e.g. its warm-up).
ADAPTIVE_SAMPLERS = ("infonoise", "kingma_gao", "loss_slope")
#: The script's flag of each fixed-density parameter of an arm (``logit_normal@mean=-2``; :func:`parse_arm`), and the
#: value it takes: ``--logit_mean`` has diffusers' sign (> 0: less noise), the library's ``mean`` the SD3 paper's
#: (> 0: more noise; on VE the centre of ln σ), so it is passed negated
FIXED_PARAM_FLAGS = {
    ("logit_normal", "mean"): ("--logit_mean", lambda v: 0.0 - v),
    ("logit_normal", "std"): ("--logit_std", float),
    ("edm_lognormal", "P_mean"): ("--edm_p_mean", float),
    ("edm_lognormal", "P_std"): ("--edm_p_std", float),
    ("mode", "scale"): ("--mode_scale", float),
}
#: The fields of the stored InfoNoise schedule that a run's results keep.
SCHEDULE_FIELDS = (
    "edges",
    "pi",
    "rho_hat",
    "gate",
    "base",
    "hyperparameters",
    "optimizer_steps",
    "warmup_steps_resolved",
    "num_updates",
    "loss_weighting",
    "prediction_type",
    "tv_phi_rho",
    "data",
)


@dataclass
class RunSpec:
    tier: str
    race: Race
    sampler: str
    seed: int
    root: str
    threads: int = 1
    schedule_plots: bool = False
    jitter: bool = False

    @property
    def run_id(self) -> str:
        return f"{self.race.name}__{self.sampler}__s{self.seed}"

    @property
    def out_dir(self) -> Path:
        return Path(self.root) / "runs" / self.run_id

    @property
    def result_path(self) -> Path:
        return Path(self.root) / "runs" / f"{self.run_id}.json"

    @property
    def model_config_path(self) -> Path:
        return self.out_dir.parent / f"unet_{self.race.name}.json"

    @property
    def sampler_args(self) -> list[str]:
        """The race's ``extra_args`` when the sampler takes them, else none; then the sampler's own
        (``sampler_extra_args``, a pretrain's folder for ``{pretrained:NAME}``, a run's for ``{run:RUN_ID}``)."""
        args = list(self.race.extra_args) if parse_arm(self.sampler).name in ADAPTIVE_SAMPLERS else []
        return args + [_folder_arg(a, self.root) for a in self.race.sampler_extra_args.get(self.sampler, ())]

    def argv(self) -> list[str]:
        """The training script's arguments of the run (a ``#recommended`` arm's once resolved, with its fitted
        parameters: :func:`benchmarks.race.recommended.resolved_arm`, which raises before)."""
        r = self.race
        data = load_data(r.dataset)
        # variants "infonoise-<flag>_<value>": --infonoise_<flag> <value>, e.g. infonoise-gate_none, infonoise-mmse_cap_auto;
        # fixed densities with parameters "logit_normal@mean=-2": the baseline flags (FIXED_PARAM_FLAGS)
        trained = recommended.resolved_arm(self)
        arm = parse_arm(trained)
        model = (
            ["--pretrained_model_name_or_path", str(pretrained_folder(self.root, r))]
            if r.pretrained
            else ["--model_config_name_or_path", str(self.model_config_path)]
        )
        a = (
            list(data["script_args"])
            + model
            + [
                "--diffusion",
                r.diffusion,
                "--noise_sampler",
                arm.name,
                "--seed",
                str(self.seed),
                "--train_batch_size",
                str(r.batch_size),
                "--max_train_steps",
                str(r.steps),
                "--learning_rate",
                str(r.learning_rate),
                "--lr_scheduler",
                "constant_with_warmup",
                "--lr_warmup_steps",
                str(r.lr_warmup_steps),
                "--checkpointing_steps",
                str(r.eval_every),
                "--use_ema",
                "--logger",
                "none",
                "--output_dir",
                str(self.out_dir),
                "--save_images_epochs",
                "1000000000",
                "--save_model_epochs",
                "1000000000",
                "--eval_batch_size",
                "16",
                # the per-refresh figures cost seconds per run on 2 cores; the logged scalars and checks stay
                "--schedule_plot_steps",
                "0" if self.schedule_plots else "-1",
            ]
        )
        return a + fixed_param_args(trained) + self.sampler_args + variant_args(list(arm.options))


def fixed_param_args(arm: str) -> list[str]:
    """The baseline flags of a fixed density's explicit parameters (``logit_normal@mean=-2`` gives
    ``--logit_mean 2.0``; :data:`FIXED_PARAM_FLAGS`); none for an arm without parameters.

    Raises:
        ValueError: a parameter the sampler has no flag for (naming the accepted ones)."""
    a = parse_arm(arm)
    out = []
    for key, value in a.params:
        if (a.name, key) not in FIXED_PARAM_FLAGS:
            accepted = ", ".join(k for n, k in FIXED_PARAM_FLAGS if n == a.name) or "none"
            raise ValueError(f"arm {arm!r}: {a.name} has no parameter {key!r}; accepted: {accepted}")
        flag, convert = FIXED_PARAM_FLAGS[(a.name, key)]
        out += [flag, repr(convert(value))]
    return out


def pretrain_dir(root, name: str) -> Path:
    """Where a pretrain of :data:`~benchmarks.race.races.PRETRAINS` is cached: ``<root>/pretrained/<name>``."""
    return Path(root) / "pretrained" / name


def pretrained_folder(root, race: Race) -> Path:
    """The pipeline a fine-tuning race starts from: its pretrain's folder, or, when the race's data has another
    resolution than the pretrain's, a copy at ``<root>/pretrained/<name>-at<R>`` whose UNet config says
    ``sample_size`` R (:func:`resized_pretrain`)."""
    p = PRETRAINS[race.pretrained]
    side = DATASETS[race.dataset].resolution
    if DATASETS[p.dataset].resolution == side:
        return pretrain_dir(root, p.name)
    return pretrain_dir(root, f"{p.name}-at{side}")


def resized_pretrain(root, race: Race) -> Path:
    """Write :func:`pretrained_folder`'s copy of a pretrain at the race's resolution (once): the same weights (a
    ``UNet2DModel``'s convolutions and attention do not depend on the image size), its scheduler, and a UNet config
    with the new ``sample_size``, which is what the script checks against ``--resolution``. Returns the folder."""
    out = pretrained_folder(root, race)
    source = pretrain_dir(root, race.pretrained)
    if out != source and not (out / "model_index.json").exists():
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp)
        for config in tmp.glob("unet*/config.json"):
            cfg = json.loads(config.read_text())
            config.write_text(json.dumps({**cfg, "sample_size": DATASETS[race.dataset].resolution}, indent=2))
        tmp.replace(out)
    return out


def _folder_arg(arg: str, root) -> str:
    """``arg`` with ``{pretrained:NAME}`` replaced by that pretrain's folder, ``{run:RUN_ID}`` by the output folder
    of a run of the same tier (one that must have finished first), ``{start:NAME}`` by a stored start that
    ``benchmarks.bounded_start`` wrote for the tier (``<root>/starts/NAME``)."""
    folders = (
        ("pretrained", lambda name: pretrain_dir(root, name)),
        ("run", lambda rid: Path(root) / "runs" / rid),
        ("start", lambda name: Path(root) / "starts" / name),
    )
    for key, folder in folders:
        if "{" + key + ":" in arg:
            head, rest = arg.split("{" + key + ":", 1)
            name, tail = rest.split("}", 1)
            return head + str(folder(name)) + tail
    return arg


def pretrain_argv(p: Pretrain, root) -> list[str]:
    """The training script's arguments of a pretrain: from scratch, like a race run of its data and path."""
    out = pretrain_dir(root, p.name)
    config = out.parent / f"unet_{p.name}.json"
    if not config.exists():
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(unet_config(DATASETS[p.dataset].resolution, p.channels, DATASETS[p.dataset].kind), indent=1))
    return list(load_data(p.dataset)["script_args"]) + [
        "--model_config_name_or_path", str(config), "--diffusion", p.diffusion, "--noise_sampler", p.sampler,
        "--seed", str(p.seed), "--train_batch_size", str(p.batch_size), "--max_train_steps", str(p.steps),
        "--learning_rate", str(p.learning_rate), "--lr_scheduler", "constant_with_warmup",
        "--lr_warmup_steps", str(p.lr_warmup_steps), "--checkpointing_steps", "1000000", "--use_ema", "--logger", "none",
        "--output_dir", str(out), "--save_images_epochs", "1000000000", "--save_model_epochs", "1000000000",
        "--eval_batch_size", "16", "--schedule_plot_steps", "-1",
    ]  # fmt: skip


def run_pretrain(job: tuple) -> tuple[str, str | None]:
    """Train one pretrain (a worker's job ``(pretrain, root, threads)``) unless its pipeline folder exists."""
    p, root, threads = job
    out = pretrain_dir(root, p.name)
    if (out / "model_index.json").exists():
        return p.name, None
    try:
        import torch

        torch.set_num_threads(threads)
        out.mkdir(parents=True, exist_ok=True)
        log = open(out.parent / f"{p.name}.log", "a")
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        t0 = time.time()
        training_script("train_unconditional").main(pretrain_argv(p, root))
        (out.parent / f"{p.name}.json").write_text(json.dumps({
            "pretrain": dataclasses.asdict(p), "wall_time_s": round(time.time() - t0, 1),
            "command": "python " + shlex.join([str(SCRIPT.relative_to(REPO))] + [_rel(a) for a in pretrain_argv(p, root)]),
            "schedule": stored_schedule(out),
        }, indent=1))  # fmt: skip
        return p.name, None
    except Exception as err:  # reported by the parent
        import traceback

        traceback.print_exc()
        return p.name, f"{type(err).__name__}: {err}"


def variant_args(options: list[str]) -> list[str]:
    """The flags of a variant sampler ``infonoise-<option>-<option>...``: ``<flag>_<value>`` gives
    ``--infonoise_<flag> <value>`` (``gate_none``, ``warmup_steps_auto``); ``<flag>=<value>`` is for
    values with an underscore (``base=logit_normal``)."""
    out = []
    for option in options:
        flag, sep, value = option.partition("=")
        if not sep:
            flag, _, value = option.rpartition("_")
        if not flag or not value:
            raise ValueError(f"variant option {option!r}: expected <flag>_<value> or <flag>=<value>")
        out += [f"--infonoise_{flag}", value]
    return out


def run_specs(
    races: list[Race],
    *,
    tier: str,
    results_tier: str,
    root: Path,
    samplers: str | None = None,
    threads: int = 1,
    schedule_plots: bool = False,
) -> list[RunSpec]:
    """Every run of ``races`` (only ``samplers``, comma-separated, when given), in the tier's priority
    order; within a group seed by seed, so that the samplers of a seed run side by side under the same
    load. ``results_tier`` names the results (``smoke_<tier>`` under ``--smoke``)."""
    specs = []
    for race in races:
        for s in race.samplers:
            if samplers and s not in split_arms(samplers):
                continue
            for seed in race.seeds[s]:
                # evaluation jitter from the seed-0 runs of InfoNoise and the baseline (extra samplings)
                specs.append(
                    RunSpec(
                        results_tier,
                        race,
                        s,
                        seed,
                        str(root),
                        threads,
                        schedule_plots,
                        jitter=(race.jitter and seed == 0 and s in (race.infonoise_arm, race.baseline)),
                    )
                )
    order = get_tier(tier)
    specs.sort(key=lambda sp: (order.run_priority(sp), sp.seed, ALL_SAMPLERS.index(sp.sampler) if sp.sampler in ALL_SAMPLERS else 99))
    return specs


def model_config(race: Race) -> dict:
    """The race's denoiser config for its data set (written beside the runs as ``unet_<race>.json``)."""
    data = DATASETS[race.dataset]
    return unet_config(data.resolution, race.channels, data.kind, in_channels=4**data.kmer if data.kind == "dna" else None)


# ----------------------------------------------------------------------------------------------
# one run: train, evaluate every checkpoint, write the result
# ----------------------------------------------------------------------------------------------


def sample(unet, race: Race, seed: int, n: int | None = None):
    import torch

    from diffusers_infonoise.generation import generate_images

    n = n or race.num_samples
    gen = torch.Generator(device=unet.device).manual_seed(seed)
    sched = eval_scheduler(race)
    out = []
    for i in range(0, n, race.sample_batch):
        out.append(
            generate_images(unet, sched, min(race.sample_batch, n - i), num_inference_steps=NUM_INFERENCE_STEPS, generator=gen).cpu()
        )
    return torch.cat(out)


def _checkpoints(out_dir: Path) -> list[tuple[int, Path]]:
    found = [(int(p.name.split("-")[1]), p) for p in out_dir.glob("checkpoint-*") if p.name.split("-")[1].isdigit()]
    return sorted(found)


def evaluate_checkpoints(spec: RunSpec, scorer: Scorer, ckpts: list[tuple[int, Path]]) -> tuple[list, list, dict | None]:
    """Sample every checkpoint's EMA weights with the fixed sampling seed and score them: the steps, the
    scores and (for a jitter run) the final model's scores under ``JITTER_SEEDS`` more sampling seeds."""
    import torch
    from diffusers import UNet1DModel, UNet2DModel

    race = spec.race
    model_cls = UNet1DModel if DATASETS[race.dataset].kind == "dna" else UNet2DModel
    device = "cuda" if torch.cuda.is_available() else "cpu"
    steps, evals, jitter = [], [], None
    for step, ck in ckpts:
        unet = model_cls.from_pretrained(ck / "unet_ema").to(device).eval()
        images = sample(unet, race, EVAL_SEED)
        steps.append(step)
        evals.append(scorer.score(images))
        if step == ckpts[-1][0]:
            from diffusers_infonoise.training import save_image_grid

            if images.ndim == 4:
                save_image_grid(images[:64], str(spec.out_dir / "final_samples.png"))
            if spec.jitter:
                vals = [evals[-1]] + [scorer.score(sample(unet, race, EVAL_SEED + s)) for s in JITTER_SEEDS]
                jitter = {
                    "seeds": [EVAL_SEED] + [EVAL_SEED + s for s in JITTER_SEEDS],
                    "values": {k: [v[k] for v in vals] for k in vals[0]},
                    "std": {k: float(np.std([v[k] for v in vals], ddof=1)) for k in vals[0]},
                }
    return steps, evals, jitter


def stored_schedule(out_dir: Path) -> dict | None:
    """The final InfoNoise schedule of a run as its saved scheduler stores it (read and validated by
    :func:`diffusers_infonoise.read_schedule`): the ``SCHEDULE_FIELDS``, floats rounded to 6 decimals;
    ``None`` when the run saved no schedule."""
    config = out_dir / "scheduler" / "scheduler_config.json"
    if not config.exists():
        return None
    payload = read_schedule(json.loads(config.read_text()))
    if not payload:
        return None
    schedule = {k: payload.get(k) for k in SCHEDULE_FIELDS}
    return json.loads(json.dumps(schedule), parse_float=lambda s: round(float(s), 6))


def checkpoint_pi(checkpoint: Path) -> dict | None:
    """The draw density of an adaptive sampler that stores no schedule (Kingma & Gao, the loss slope) at a checkpoint,
    from the sampler state the script saves there (rank 0's): ``{"edges", "pi", "adapted"}``, the bin masses of π on
    its log-σ bins (the base density's while it has not adapted: ``pi`` None), floats to 6 decimals; None without a
    state."""
    from safetensors.torch import load_file

    from diffusers_infonoise.schedule_io import SAMPLER_STATE_TENSORS
    from diffusers_infonoise.training.checkpoints import SAMPLER_SUBDIR

    path = checkpoint / SAMPLER_SUBDIR / "rank_0" / SAMPLER_STATE_TENSORS
    if not path.exists():
        return None
    state = load_file(str(path))
    probs = state.get("probs")
    return {
        "edges": [round(float(v), 6) for v in state["edges"]],
        "pi": None if probs is None else [round(float(v), 6) for v in probs],
        "adapted": probs is not None,
    }


def run_one(spec: RunSpec) -> dict:
    """Train (one call of the script's ``main``), evaluate every checkpoint, write the result JSON."""
    if spec.result_path.exists():
        return json.loads(spec.result_path.read_text())
    os.environ.setdefault("TQDM_DISABLE", "1")
    import torch

    torch.set_num_threads(spec.threads)
    race = spec.race
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    log = open(spec.out_dir.parent / f"{spec.run_id}.log", "a")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    if not spec.model_config_path.exists():
        spec.model_config_path.write_text(json.dumps(model_config(race), indent=1))
    # a "#recommended" arm: its parameters fitted to a profile (a pilot first, from scratch), once (cached)
    resolution = recommended.resolve(spec) if parse_arm(spec.sampler).recommended else None
    argv = spec.argv()
    resumed = bool(_checkpoints(spec.out_dir))
    if resumed:
        argv += ["--resume_from_checkpoint", "latest"]
    script = training_script("train_unconditional")
    t0, c0 = time.time(), time.process_time()
    script.main(argv)
    train_s, train_cpu = time.time() - t0, time.process_time() - c0

    scorer = Scorer(race.dataset)
    t1, c1 = time.time(), time.process_time()
    ckpts = _checkpoints(spec.out_dir)
    evaluated = [c for c in ckpts if race.eval_steps is None or c[0] in race.eval_steps]
    steps, evals, jitter = evaluate_checkpoints(spec, scorer, evaluated)
    eval_s, eval_cpu = time.time() - t1, time.process_time() - c1
    result = {
        "run_id": spec.run_id,
        "tier": spec.tier,
        "race": race.name,
        "dataset": race.dataset,
        "path": race.diffusion,
        "sampler": spec.sampler,
        "seed": spec.seed,
        "hyperparameters": {
            "steps": race.steps,
            "eval_every": race.eval_every,
            "batch_size": race.batch_size,
            "learning_rate": race.learning_rate,
            "lr_scheduler": "constant_with_warmup",
            "lr_warmup_steps": race.lr_warmup_steps,
            "unet_block_out_channels": list(race.channels),
            "sampler_args": spec.sampler_args,
            "ema": "diffusers EMAModel, max decay 0.9999, warm-up inv_gamma 1, power 3/4 (script defaults)",
            **({"pretrained": dataclasses.asdict(PRETRAINS[race.pretrained])} if race.pretrained else {}),
        },
        "inference": {
            "scheduler": type(eval_scheduler(race)).__name__,
            "num_inference_steps": NUM_INFERENCE_STEPS,
            "num_samples": race.num_samples,
            "sampling_seed": EVAL_SEED,
            "weights": "EMA (checkpoint-N/unet_ema)",
        },
        "primary_metric": scorer.primary,
        "steps": steps,
        "quality": {k: [round(float(e[k]), 6) for e in evals] for k in evals[0]} if evals else {},
        "jitter": jitter,
        "schedule": stored_schedule(spec.out_dir),
        **({"resolved_arm": resolution["arm"], "recommended": run_resolution(resolution)} if resolution else {}),
        **({"final_pi": checkpoint_pi(ckpts[-1][1])} if ckpts and parse_arm(spec.sampler).kind == "adaptive" else {}),
        "wall_time_s": {"train": round(train_s, 1), "eval": round(eval_s, 1), "total": round(train_s + eval_s, 1)},
        "cpu_time_s": {
            "train": round(train_cpu, 1),
            "eval": round(eval_cpu, 1),
            "num_evals": len(steps),
            "num_jitter_samplings": len(JITTER_SEEDS) if jitter else 0,
        },
        "resumed": resumed,
        "threads": spec.threads,
        "code": code_version(),
        "command": script_command(spec),
    }
    if getattr(scorer, "classifier_info", None):
        result["classifier"] = scorer.classifier_info
    tmp = spec.result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(spec.result_path)
    for step, ck in ckpts:
        if not (race.keep_checkpoints and (step, ck) in evaluated):
            shutil.rmtree(ck, ignore_errors=True)
    log.flush()
    return result


def run_resolution(record: dict) -> dict:
    """A ``#recommended`` run's resolution as its result keeps it: the record of
    :func:`benchmarks.race.recommended.resolve` with the profile's ln σ grid and ρ̂ only (6 significant digits)."""
    prof = record["profile"]
    kept = {k: [None if v is None else float(f"{v:.6g}") for v in prof[k]] for k in ("log_sigma", "rho_hat")}
    return {**record, "profile": {**kept, "gate": prof.get("gate")}}


def script_command(spec: RunSpec) -> str:
    return "python " + shlex.join([str(SCRIPT.relative_to(REPO))] + [_rel(a) for a in spec.argv()])


def _rel(a: str) -> str:
    try:
        return str(Path(a).resolve().relative_to(REPO)) if os.path.isabs(a) else a
    except ValueError:
        return a


# ----------------------------------------------------------------------------------------------
# the cache of runs: finished runs, reuse of another tier's, running the rest in worker processes
# ----------------------------------------------------------------------------------------------


def finished_runs(specs: list[RunSpec]) -> list[dict]:
    """The result of every run of ``specs`` that has one, in the order of ``specs``."""
    return [json.loads(sp.result_path.read_text()) for sp in specs if sp.result_path.exists()]


def _pretrained_weights(command: str) -> str | None:
    """The SHA-256 of the UNet weights of a fine-tune's pretrained pipeline (``--pretrained_model_name_or_path``), None
    for a run from scratch or a pipeline that is not there: two tiers may each pretrain a pipeline of the same name
    (another machine, another code), and a fine-tune is the same experiment only from the same weights."""
    import hashlib

    a = shlex.split(command)
    if "--pretrained_model_name_or_path" not in a:
        return None
    folder = Path(a[a.index("--pretrained_model_name_or_path") + 1])
    folder = folder if folder.is_absolute() else REPO / folder
    files = sorted((folder / "unet").glob("*.safetensors"))
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest() if files else "missing"


def _training_args(command: str) -> list[str]:
    """A run's command without its folders (``--output_dir`` and the model config's path; a fine-tune's pretrained
    pipeline by its name, the folder under its tier's ``pretrained/``, whose weights :func:`reuse_run` compares)."""
    a = shlex.split(command)
    for flag in ("--output_dir", "--model_config_name_or_path"):
        if flag in a:
            i = a.index(flag)
            a = a[:i] + a[i + 2 :]
    if "--pretrained_model_name_or_path" in a:
        i = a.index("--pretrained_model_name_or_path") + 1
        a[i] = Path(a[i]).name
    return a


def reuse_run(spec: RunSpec, source: Path) -> bool:
    """Copy another tier's finished run when it is the same experiment: same run id, the same training
    arguments but ``--output_dir``, a fine-tune's pretrained pipeline with the same weights, the same evaluation steps,
    sample count and jitter setting; for an adaptive
    sampler also the same code (its recorded commit, clean), since a default of the library may have changed under
    the same arguments (a fixed density's draws do not depend on it)."""
    from diffusers_infonoise.sampler import FIXED_DENSITY_NAMES

    if spec.result_path.exists() or not source.exists():
        return False
    if parse_arm(spec.sampler).name not in FIXED_DENSITY_NAMES:
        code = json.loads(source.read_text()).get("code", "unknown")
        if code != code_version() or code.endswith("+dirty") or code == "unknown":
            return False
    if parse_arm(spec.sampler).recommended and not recommended.record_path(spec).exists():
        return False  # its arguments are not known before it is resolved
    r = json.loads(source.read_text())
    race = spec.race
    source_cfg = source.parent / f"unet_{race.name}.json"
    command = script_command(spec)
    same = (
        _training_args(r["command"]) == _training_args(command)
        and _pretrained_weights(r["command"]) == _pretrained_weights(command) != "missing"
        and source_cfg.exists()
        and json.loads(source_cfg.read_text()) == model_config(race)
        and r["steps"]
        == [s for s in range(race.eval_every, race.steps + 1, race.eval_every) if race.eval_steps is None or s in race.eval_steps]
        and r["inference"]["num_samples"] == race.num_samples
        and bool(r.get("jitter")) == spec.jitter
    )
    if same:
        r["reused_from"] = str(source.relative_to(REPO)) if source.is_relative_to(REPO) else str(source)
        spec.result_path.write_text(json.dumps(r, indent=1))
    return same


def _run_in_worker(spec: RunSpec) -> tuple[str, str | None]:
    try:
        run_one(spec)
        return spec.run_id, None
    except Exception as err:  # reported by the parent, the other runs go on
        import traceback

        traceback.print_exc()
        return spec.run_id, f"{type(err).__name__}: {err}"


def run_all(specs: list[RunSpec], races: list[Race], *, jobs: int, threads: int, t0: float) -> dict:
    """Run every run of ``specs`` that has no result yet, ``jobs`` at a time in worker processes; print
    each as it ends (seconds since ``t0``). Returns the errors, by run id."""
    errors = {}
    todo = [sp for sp in specs if not sp.result_path.exists()]
    print(f"{len(specs)} runs, {len(specs) - len(todo)} already done", flush=True)
    for race in races:  # prepare data and classifiers once, in the parent
        Scorer(race.dataset)
    os.environ["TQDM_DISABLE"] = "1"
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import multiprocessing as mp

    pretrains = tier_pretrains(races)
    if todo and pretrains:  # the fine-tuning races' starts, trained first (cached)
        root = Path(todo[0].root)
        with mp.get_context("spawn").Pool(jobs) as pool:
            for name, err in pool.imap_unordered(run_pretrain, [(p, root, threads) for p in pretrains]):
                print(f"[{time.time() - t0:7.0f} s] pretrain {name}: {'ok' if err is None else 'FAILED ' + err}", flush=True)
                if err:
                    errors[f"pretrain {name}"] = err
        if errors:
            return errors
        for race in races:  # a fine-tune at another resolution starts from a copy of its pretrain at that size
            if race.pretrained:
                resized_pretrain(root, race)
    with mp.get_context("spawn").Pool(jobs) as pool:  # workers are reused: one import each
        for run_id, err in pool.imap_unordered(_run_in_worker, todo):
            print(f"[{time.time() - t0:7.0f} s] {run_id}: {'ok' if err is None else 'FAILED ' + err}", flush=True)
            if err:
                errors[run_id] = err
    return errors


# ----------------------------------------------------------------------------------------------
# the plan: the runs and a time estimate
# ----------------------------------------------------------------------------------------------


def quick_calibration(out: Path) -> dict:
    """Seconds per training step (batch 64) and per 2000-sample evaluation of the 8x8 quick-tier model,
    medians over the quick tier's finished runs (wall time, so they include the machine's load then)."""
    path = Path(out) / "quality_race_quick.json"
    if not path.exists():
        return {"step_s": 0.27, "eval_s": 33.0, "source": "default (quick tier measured under load ~5 on 2 cores)"}
    runs = json.loads(path.read_text())["runs"]
    step = [r["wall_time_s"]["train"] / r["hyperparameters"]["steps"] for r in runs]
    ev = [r["wall_time_s"]["eval"] / (len(r["steps"]) + (len(r["jitter"]["seeds"]) - 1 if r.get("jitter") else 0)) for r in runs]
    source = path.resolve().relative_to(REPO) if path.resolve().is_relative_to(REPO) else path  # --out may be elsewhere
    return {"step_s": float(np.median(step)), "eval_s": float(np.median(ev)), "source": str(source)}


#: the committed runs whose measured costs calibrate the 16x16 image and DNA estimates (:func:`measured_calibration`)
CALIBRATION_RUNS = {
    "image16": "quality_race_recheck_full_runs_edm-binarized_mnist16.json",
    "dna64": "quality_race_recheck_full_runs_edm-dna64.json",
}


def measured_calibration() -> dict:
    """Seconds per training step (batch 64) and per 2000-sample evaluation of the 16x16 UNet (channels 16, 32) and
    the DNA UNet (32, 64) on 4 x 64, medians over the committed runs of :data:`CALIBRATION_RUNS` (wall time, 2 jobs
    on 2 cores; the machine's load then included). Kinds without a committed file are left out."""
    out = {}
    for kind, name in CALIBRATION_RUNS.items():
        path = RESULTS / name
        if path.exists():
            runs = json.loads(path.read_text())["runs"]
            step = [r["wall_time_s"]["train"] / r["hyperparameters"]["steps"] for r in runs]
            ev = [r["wall_time_s"]["eval"] / (r["cpu_time_s"]["num_evals"] + r["cpu_time_s"]["num_jitter_samplings"]) * 2000
                  / r["inference"]["num_samples"] for r in runs]  # fmt: skip
            out[kind] = {"step_s": float(np.median(step)), "eval_s": float(np.median(ev)), "source": name}
    return out


def estimate_seconds(race: Race, quick_timing: dict | None = None, measured: dict | None = None) -> float:
    """Rough wall time of one run: train steps + evaluations. From ``measured`` (:func:`measured_calibration`) where
    it has the kind: 16x16 costs scaled by pixels for images of 16x16 and more, DNA costs scaled by the sequence
    length; else from the quick tier's measured 8x8 costs, scaled by pixels (and ×1.3 for a third UNet level) for
    16x16 and 28x28, ×2 for DNA."""
    t = quick_timing or {"step_s": 0.27, "eval_s": 33.0}
    measured = measured or {}
    spec = DATASETS[race.dataset]
    if spec.kind == "dna" and "dna64" in measured:
        t, scale = measured["dna64"], spec.resolution / 64
    elif spec.kind == "image" and spec.resolution >= 16 and len(race.channels) == 2 and "image16" in measured:
        t, scale = measured["image16"], (spec.resolution / 16) ** 2
    elif spec.kind == "dna":  # the 1-D UNet on 4 x 64: measured ~1.4x (steps) to ~2.5x (evaluation) the 8x8 model
        scale = 2.0
    else:
        scale = (spec.resolution / 8) ** 2 * (1.3 if len(race.channels) > 2 else 1.0)
    n_eval = len(race.eval_steps) if race.eval_steps else race.steps // race.eval_every
    return scale * (race.steps * t["step_s"] * race.batch_size / 64 + n_eval * t["eval_s"] * race.num_samples / 2000)


def resolution_seconds(
    race: Race, quick_timing: dict | None = None, measured: dict | None = None, pilot_fraction: float = DEFAULT_PILOT_FRACTION
) -> float:
    """Rough wall time of resolving a ``#recommended`` arm of ``race``: its cost in training steps
    (:func:`benchmarks.race.recommended.estimated_cost`: the pilot from scratch, ``pilot_fraction`` of the race's
    steps, the profile's forward passes) at the race's cost per step (:func:`estimate_seconds`, no evaluation)."""
    steps = max(1, math.ceil(recommended.estimated_cost(race, pilot_fraction=pilot_fraction)["training_steps"]))
    as_training = dataclasses.replace(race, steps=steps, eval_every=steps, eval_steps=None, num_samples=0)  # no evaluation
    return estimate_seconds(as_training, quick_timing, measured)


def print_plan(specs: list[RunSpec], out: Path, *, jobs: int, tier: str, races: list[Race] | None = None, runs: bool = True) -> float:
    """Print each run with its estimated wall time (``done`` where its result exists), the pretrains still to train,
    and the totals (``--plan``; ``runs=False``: the totals only). Returns the seconds of worker time still to run."""
    total = left = 0.0
    cal, measured = quick_calibration(Path(out)), measured_calibration()
    print(f"calibration: {cal['step_s']:.3f} s/step, {cal['eval_s']:.1f} s/evaluation at 8x8 ({cal['source']})")
    for kind, m in measured.items():
        print(f"calibration: {m['step_s']:.3f} s/step, {m['eval_s']:.1f} s/2000-sample evaluation for {kind} ({m['source']})")
    for p in tier_pretrains(races or []):
        if specs and not (pretrain_dir(specs[0].root, p.name) / "model_index.json").exists():
            as_race = Race(p.name, p.dataset, p.diffusion, (), "", {}, p.steps, p.steps, channels=p.channels, num_samples=0)
            est = estimate_seconds(as_race, cal, measured)
            total += est
            left += est
            if runs:
                print(f"{'pretrain ' + p.name:70s} ~{est:6.0f} s")
    for sp in specs:
        if parse_arm(sp.sampler).recommended:  # its pilot (from scratch) and profile, before the run
            est = resolution_seconds(sp.race, cal, measured, parse_arm(sp.sampler).pilot_fraction)
            done = recommended.record_path(sp).exists()
            total += est
            left += 0 if done else est
            if runs:
                print(f"{sp.run_id + ' (pilot and profile)':70s} ~{est:6.0f} s" + ("  done" if done else ""))
        est = estimate_seconds(sp.race, cal, measured) + (len(JITTER_SEEDS) * cal["eval_s"] if sp.jitter else 0)
        done = sp.result_path.exists()
        total += est
        left += 0 if done else est
        if runs:
            print(f"{sp.run_id:70s} ~{est:6.0f} s" + ("  done" if done else ""))
    print(
        f"{len(specs)} runs, ~{total / 3600:.2f} h of worker time at the calibration's speed, "
        f"~{total / 3600 / max(1, jobs):.2f} h with --jobs {jobs}; still to run ~{left / 3600 / max(1, jobs):.2f} h"
        + (" (CPU calibration: meaningless for a GPU)" if tier == "gpu" else "")
    )
    return left
