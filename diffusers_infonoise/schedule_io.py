"""The learned schedule's stored format, a small versioned payload inside a diffusers scheduler config, and its
sources: the validating reader and the writer into a scheduler config, files, folders and Hub repos, and the
checkpoint state files. What a payload holds is written and read by the sampler itself, side by side:
:meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.to_payload` and
:meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.load_schedule` (``from_scheduler`` and ``from_stored``
build the sampler and call it).

``write_schedule(noise_scheduler, payload)`` stores a sampler's payload (plain floats: grid, π, ρ̂, m̂; the path,
prediction type, loss weighting, settings, optimizer steps and the package version) under the config key
:data:`CONFIG_KEY`. The key starts with an underscore, which diffusers treats as a private attribute:
``save_pretrained`` writes it, ``from_pretrained``/``from_config`` (also into a compatible class) carry it along
as a hidden config entry, and stock diffusers neither passes it to ``__init__`` nor warns about it.
``read_schedule`` validates a payload and rejects a corrupted or unknown-version one with a clear error;
:class:`StoredSchedule` is a read-only view of a validated payload (grid, π, ρ̂, m̂, path) for inference and
diagnostics, which builds no sampler. This module takes payloads, never a sampler: it imports nothing from
:mod:`diffusers_infonoise.sampler`.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .argtypes import is_real
from .paths import PATH_CLASSES, path_from_scheduler

__all__ = [
    "stored_mu",
    "CONFIG_KEY",
    "FORMAT",
    "VERSION",
    "write_schedule",
    "clear_schedule",
    "read_schedule",
    "StoredSchedule",
    "validate_payload",
    "check_float_range",
    "check_number_list",
    "ScheduleError",
    "ScheduleSourceError",
    "local_or_hub",
    "hub_unreadable",
    "env_true",
    "read_json_file",
    "load_scheduler_config",
    "read_schedule_from",
    "save_sampler_state",
    "load_sampler_state",
]

CONFIG_KEY = "_infonoise_schedule"
FORMAT = "diffusers-infonoise/schedule"
VERSION = 1


class ScheduleError(ValueError):
    """A stored schedule payload is missing fields, corrupted, or of an unknown version."""


def validate_payload(payload: Any) -> dict:
    """Check a payload's format, version and fields; return it.

    Raises:
        ScheduleError: (a ``ValueError``) naming what is wrong.
    """
    if not isinstance(payload, dict):
        raise ScheduleError(f"{CONFIG_KEY}: expected a JSON object, got {type(payload).__name__}")
    check_float_range(payload, CONFIG_KEY)
    if payload.get("format") != FORMAT:
        raise ScheduleError(f"{CONFIG_KEY}: format {payload.get('format')!r} is not {FORMAT!r}")
    if type(payload.get("version")) is not int or payload.get("version") != VERSION:  # not True, not 1.0
        raise ScheduleError(f"{CONFIG_KEY}: unknown version {payload.get('version')!r}; this diffusers-infonoise reads version {VERSION}")
    required = ("path", "prediction_type", "loss_weighting", "edges", "pi", "m_hat", "hyperparameters", "optimizer_steps")
    missing = [k for k in required if k not in payload]
    if missing:
        raise ScheduleError(f"{CONFIG_KEY}: missing field(s) {missing}")
    for key in ("prediction_type", "loss_weighting"):
        if not isinstance(payload[key], str):
            raise ScheduleError(f"{CONFIG_KEY}: {key} must be a name (a string), got {_short(payload[key])}")
    edges, pi, m_hat = payload["edges"], payload["pi"], payload["m_hat"]
    for name, values, nulls in (("edges", edges, False), ("pi", pi, False), ("m_hat", m_hat, True)):
        check_number_list(values, f"{CONFIG_KEY}: {name}", nulls=nulls, error=ScheduleError)
    k = len(pi)
    if len(edges) != k + 1 or len(m_hat) != k:
        raise ScheduleError(f"{CONFIG_KEY}: need len(edges) == len(pi) + 1 == len(m_hat) + 1, got {len(edges)}, {k}, {len(m_hat)}")
    if k < MIN_BINS:
        raise ScheduleError(f"{CONFIG_KEY}: the stored schedule has {k} bins; a schedule has at least {MIN_BINS}")
    e = torch.tensor(edges, dtype=torch.float64)
    p = torch.tensor(pi, dtype=torch.float64)
    m = torch.tensor([math.nan if v is None else v for v in m_hat], dtype=torch.float64)
    if not bool(torch.isfinite(e).all()) or not bool((e[1:] > e[:-1]).all()):
        raise ScheduleError(f"{CONFIG_KEY}: edges must be finite and strictly increasing")
    if not bool(torch.isfinite(p).all()) or bool((p < 0).any()) or abs(float(p.sum()) - 1.0) > 1e-6:
        raise ScheduleError(f"{CONFIG_KEY}: pi must be finite, non-negative bin masses summing to 1")
    bad = [i for i, v in enumerate(m_hat) if v is not None and not 0 <= v <= MAX_M_HAT]  # NaN too (null is unfilled)
    if bad:  # the first offending bin, by its value and σ (not the largest value, which may be a good one)
        i = bad[0]
        raise ScheduleError(
            f"{CONFIG_KEY}: m_hat must hold finite x0-space errors in [0, {MAX_M_HAT:g}] (null where a bin never filled), "
            f"got m_hat[{i}] = {float(m[i]):g} in the bin at VE sigma {math.exp(float(e[i] + e[i + 1]) / 2):.4g}"
            + (f" ({len(bad)} such bins)" if len(bad) > 1 else "")
        )
    rho = payload.get("rho_hat")
    if rho is not None:
        check_number_list(rho, f"{CONFIG_KEY}: rho_hat", nulls=True, error=ScheduleError)
        if len(rho) != k:
            raise ScheduleError(f"{CONFIG_KEY}: rho_hat must be null or hold one value a bin ({k}), got {len(rho)}")
        bad = [i for i, v in enumerate(rho) if v is not None and not (math.isfinite(v) and v >= 0)]
        if bad:  # an entropy rate is a density: finite and non-negative (the first offending bin, by its value and σ)
            i = bad[0]
            raise ScheduleError(
                f"{CONFIG_KEY}: rho_hat must hold finite, non-negative densities (null where undefined), got rho_hat[{i}] = "
                f"{float(rho[i]):g} in the bin at VE sigma {math.exp(float(e[i] + e[i + 1]) / 2):.4g}"
            )
    if not isinstance(payload["hyperparameters"], dict):
        raise ScheduleError(f"{CONFIG_KEY}: hyperparameters must be an object, got {type(payload['hyperparameters']).__name__}")
    gate = payload["hyperparameters"].get("gate", "auto")
    if not (gate is None or isinstance(gate, str) or (isinstance(gate, (int, float)) and not isinstance(gate, bool))):
        raise ScheduleError(f"{CONFIG_KEY}: hyperparameters.gate must be a rule name, a number or null, got {gate!r}")
    _check_edges_span_path(payload["path"], e)
    steps = payload["optimizer_steps"]
    if type(steps) is not int or steps < 0:
        raise ScheduleError(f"{CONFIG_KEY}: optimizer_steps must be an int >= 0, got {steps!r}")
    for key in ("num_updates", "warmup_steps_resolved"):  # optional: counters of how far the run adapted
        count = payload.get(key)
        if count is not None and (type(count) is not int or count < 0):
            raise ScheduleError(f"{CONFIG_KEY}: {key} must be an int >= 0 (or absent), got {count!r}")
    start = payload.get("start")
    if start is not None and not (isinstance(start, dict) and start.get("choice") in ("base", "stored", "profile")):
        raise ScheduleError(f"{CONFIG_KEY}: start must be null or an object with choice 'base', 'stored' or 'profile', got {start!r}")
    if payload.get("pi_moves") is not None:  # payloads written before π's moves were kept have none
        check_pi_moves(payload["pi_moves"], f"{CONFIG_KEY}: pi_moves", ScheduleError, max_step=payload["optimizer_steps"])
    data = payload.get("data")
    if data is not None:
        if not isinstance(data, dict):
            raise ScheduleError(f"{CONFIG_KEY}: data must be an object with 'variance' and 'min_gap', got {type(data).__name__}")
        for key in ("variance", "min_gap"):
            v = data.get(key)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
                raise ScheduleError(f"{CONFIG_KEY}: data.{key} must be null or a finite number >= 0, got {v!r}")
    return payload


def check_float_range(value: Any, name: str, error: type[ValueError] = ScheduleError) -> None:
    """Refuse an integer no float holds anywhere in a stored JSON value (JSON reads ``1e400`` as inf, but
    ``10**400`` as an exact int, on which every later ``float()`` overflows), naming its field.

    Raises:
        ScheduleError (or ``error``): ``"{name}.field[i]: an integer of about N digits, ..."``.
    """
    if isinstance(value, dict):
        for key, v in value.items():
            check_float_range(v, f"{name}.{key}", error)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_float_range(v, f"{name}[{i}]", error)
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > _FLOAT_MAX:
        digits = int(value.bit_length() * math.log10(2)) + 1  # str() of a huge int may itself raise
        raise error(f"{name}: an integer of about {digits} digits, too large for a number here (at most {_FLOAT_MAX:.4g})")


_FLOAT_MAX = 1.7976931348623157e308


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_number_list(values: Any, name: str, *, nulls: bool = False, error: type[ValueError] = ScheduleError) -> None:
    """Refuse anything but a flat list of numbers (JSON ``null`` too where ``nulls``), naming the first offending entry.

    Raises:
        ScheduleError (or ``error``): ``"{name}: must be a flat list of numbers ..., got ..."``.
    """
    what = "a flat list of numbers" + (" (null where a bin never filled)" if nulls else "")
    if not isinstance(values, list):
        raise error(f"{name} must be {what}, got {type(values).__name__} {_short(values)}")
    for i, v in enumerate(values):
        if not ((isinstance(v, (int, float)) and not isinstance(v, bool)) or (nulls and v is None)):
            raise error(f"{name} must be {what}, got {name.split(': ')[-1]}[{i}] = {_short(v)}")


#: how many of π's last changes a sampler keeps and a stored schedule carries (``pi_moves``; METHOD.md §6.1, "settled")
PI_MOVES_KEPT = 8


def check_pi_moves(moves, name: str, error: type[ValueError], max_step: int | None = None) -> dict:
    """A copy of recorded moves of π (the sampler's ``pi_moves``, a payload's): ``{"steps": [...], "tv": [...]}`` of
    equal lengths, at most :data:`PI_MOVES_KEPT`; steps ints from 0 to ``max_step`` (the run's own optimizer step
    count, when given), not decreasing; TVs finite numbers in [0, 1] (float round-off above 1 allowed).

    Raises:
        ``error``: ``"{name}: ..."`` naming the first rule broken (and the entry that breaks it).
    """
    if not isinstance(moves, dict) or not isinstance(moves.get("steps"), list) or not isinstance(moves.get("tv"), list):
        raise error(f"{name}: expected an object {{'steps': [...], 'tv': [...]}} of two lists, got {_short(moves)}")
    steps, tvs = moves["steps"], moves["tv"]
    if len(steps) != len(tvs) or len(steps) > PI_MOVES_KEPT:
        raise error(f"{name}: steps and tv must be lists of equal length, at most {PI_MOVES_KEPT}; got {len(steps)} and {len(tvs)}")
    top = "" if max_step is None else f" and at most the run's optimizer steps, {max_step}"
    for i, s in enumerate(steps):
        if not (isinstance(s, int) and not isinstance(s, bool)) or s < 0 or (max_step is not None and s > max_step):
            raise error(f"{name}: steps[{i}] = {_short(s)}: each must be an int >= 0{top}")
        if i and s < steps[i - 1]:
            raise error(f"{name}: steps[{i}] = {s} follows {steps[i - 1]}: the steps must not decrease")
    for i, t in enumerate(tvs):
        if not (is_real(t) and 0 <= t <= 1 + 1e-9):
            raise error(f"{name}: tv[{i}] = {_short(t)}: each must be a total variation, a finite number in [0, 1]")
    return {"steps": [int(s) for s in steps], "tv": [float(t) for t in tvs]}


MIN_BINS = 4  # the smallest grid a sampler takes (num_bins >= 4)
#: an x0-space error is of the order of the data's variance; far above it a payload is corrupted
#: (and m̂/σ² would overflow on the grid)
MAX_M_HAT = 1e30


def _check_edges_span_path(path: Any, edges: torch.Tensor) -> None:
    """The grid must be the recorded path's: from log σ_min to log σ_max (VE, flow), or a VP table's cells
    around them (they reach half a step beyond the table's first and last σ)."""
    if not isinstance(path, dict) or not isinstance(path.get("kind"), str) or path["kind"] not in PATH_CLASSES:
        raise ScheduleError(f"{CONFIG_KEY}: path must be an object with kind {' or '.join(map(repr, PATH_CLASSES))}, got {path!r}")
    ends = [path.get(key) for key in ("sigma_min", "sigma_max")]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in ends):
        raise ScheduleError(f"{CONFIG_KEY}: path needs sigma_min and sigma_max, finite numbers > 0, got {path!r}")
    lo, hi = math.log(ends[0]), math.log(ends[1])
    first, last = float(edges[0]), float(edges[-1])
    if not PATH_CLASSES[path["kind"]].grid_spans(first, last, lo, hi):
        raise ScheduleError(
            f"{CONFIG_KEY}: edges span log sigma [{first:.6g}, {last:.6g}], but its {path['kind']} path's "
            f"sigma range [{ends[0]:.6g}, {ends[1]:.6g}] is log sigma [{lo:.6g}, "
            f"{hi:.6g}]; the payload is inconsistent (edited or corrupted)"
        )


def stored_mu(noise_scheduler, payload: dict | None) -> float | None:
    """The ``mu`` that rebuilds a payload's flow path on a dynamic-shift scheduler (``log`` of its stored
    shift), or None: a scheduler without dynamic shifting, no payload, or no stored shift."""
    if payload is None or not noise_scheduler.config.get("use_dynamic_shifting", False):
        return None
    shift = (payload.get("path") or {}).get("shift")
    return None if shift is None else math.log(float(shift))


def write_schedule(noise_scheduler, payload: dict) -> dict:
    """Store a schedule ``payload`` (a sampler's
    :meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.to_payload`, what
    :meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.save_to_scheduler` passes), validated, in
    ``noise_scheduler.config[CONFIG_KEY]``; returns the payload.

    ``noise_scheduler.save_pretrained`` (or the pipeline's) then writes it to ``scheduler_config.json``.
    The scheduler's own parameters are not touched.

    Warns (``UserWarning``) when the scheduler's ``prediction_type`` differs from the loss the schedule was learned from.

    Raises:
        ScheduleError: (a ``ValueError``) a payload that is not a valid schedule (:func:`validate_payload`).
        ValueError: when the scheduler's path differs from the payload's.
    """
    payload = validate_payload(payload)
    path = payload["path"]
    if path_from_scheduler(noise_scheduler, mu=stored_mu(noise_scheduler, payload)).config() != path:
        raise ValueError("noise_scheduler: its corruption path differs from the one the sampler was built for")
    configured = PATH_CLASSES[path["kind"]].configured_prediction_type(noise_scheduler.config)
    if configured is not None and configured != payload["prediction_type"]:
        warnings.warn(
            f"noise_scheduler: its prediction_type is {configured!r}, but the schedule stored in it was learned "
            f"from a {payload['prediction_type']!r} loss; a pipeline reads the model's output as {configured!r}. "
            "Save the schedule into the scheduler the model samples with (register_to_config(prediction_type=...))",
            UserWarning,
            stacklevel=2,
        )
    noise_scheduler.register_to_config(**{CONFIG_KEY: payload})
    return payload


def clear_schedule(noise_scheduler) -> bool:
    """Drop a stored schedule from ``noise_scheduler``'s config (one inherited from a pretrained model, which would not
    describe a training with a fixed density); returns whether there was one."""
    if noise_scheduler.config.get(CONFIG_KEY) is None:
        return False
    noise_scheduler.register_to_config(**{CONFIG_KEY: None})
    return True


def read_schedule(config_or_scheduler) -> dict | None:
    """The validated payload stored in a scheduler, a scheduler config dict, or ``None`` if absent.

    Raises:
        ScheduleError: for a corrupted or unknown-version payload.
    """
    config = getattr(config_or_scheduler, "config", config_or_scheduler)
    payload = config.get(CONFIG_KEY) if hasattr(config, "get") else None
    if payload is None:
        return None
    return validate_payload(payload)


def _tensor(values: list) -> torch.Tensor:
    # JSON null (a bin never filled) reads as NaN
    return torch.tensor([math.nan if v is None else v for v in values], dtype=torch.float64)


@dataclass(frozen=True)
class StoredSchedule:
    """A read-only view of a stored schedule (a validated payload) for inference and diagnostics: its grid, π, ρ̂ and
    m̂ as float64 tensors, its path and settings as stored. It builds no sampler; a training run starts from a
    stored schedule through :meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.load_schedule`, and the
    estimate of its m̂ (q, ρ̂ on this run's grid) is
    :func:`~diffusers_infonoise.sampler.infonoise.stored_estimator`'s.

    Attributes:
        payload: the validated payload (:func:`validate_payload`, :func:`read_schedule`), as stored.
    """

    payload: dict

    @classmethod
    def from_payload(cls, payload: Any) -> "StoredSchedule":
        """The view of a payload, validated first.

        Raises:
            ScheduleError: a corrupted or unknown-version payload.
        """
        return cls(validate_payload(payload))

    @classmethod
    def from_scheduler(cls, noise_scheduler) -> "StoredSchedule":
        """The schedule stored in ``noise_scheduler``'s config (or a config dict).

        Raises:
            ValueError: the config carries no learned schedule. ScheduleError: a corrupted or unknown-version payload.
        """
        payload = read_schedule(noise_scheduler)
        if payload is None:
            raise ValueError(
                f"noise_scheduler: its config carries no learned InfoNoise schedule (no '{CONFIG_KEY}' "
                "entry); it was not saved by a run with an InfoNoise sampler"
            )
        return cls(payload)

    @property
    def path(self) -> dict:
        """The path's config as stored (``NoisePath.config()``)."""
        return self.payload["path"]

    @property
    def prediction_type(self) -> str:
        return self.payload["prediction_type"]

    @property
    def edges(self) -> torch.Tensor:
        """(K+1,) log-σ bin edges (VE σ)."""
        return _tensor(self.payload["edges"])

    @property
    def centers(self) -> torch.Tensor:
        """(K,) log-σ bin centres (VE σ)."""
        e = self.edges
        return 0.5 * (e[1:] + e[:-1])

    @property
    def pi(self) -> torch.Tensor:
        """(K,) π's bin masses as stored (summing to 1): a sampler built from this schedule with its stored settings
        draws from exactly these."""
        return _tensor(self.payload["pi"])

    @property
    def rho_hat(self) -> torch.Tensor | None:
        """(K,) ρ̂ per unit log σ as the saving run had it, or None (saved before any estimate)."""
        rho = self.payload.get("rho_hat")
        return None if rho is None else _tensor(rho)

    @property
    def m_hat(self) -> torch.Tensor:
        """(K,) x0-space errors, NaN where a bin never filled."""
        return _tensor(self.payload["m_hat"])

    @property
    def num_filled(self) -> int:
        """How many bins hold a stored m̂ (an estimate needs two)."""
        return int((~torch.isnan(self.m_hat)).sum())

    @property
    def is_adapted(self) -> bool:
        """Whether the stored π is a learned one (saved after its warm-up), not the base density's masses."""
        return self.payload.get("adapted") is not False


# ----------------------------------------------------------------------------------------------
# Where a stored schedule is read from: a scheduler config in a folder, a JSON file or a Hub repo.
# ----------------------------------------------------------------------------------------------

#: a pipeline folder's scheduler config, and a scheduler folder's
PIPELINE_SCHEDULER = ("scheduler", "scheduler_config.json")
SCHEDULER_FILE = "scheduler_config.json"
#: what is tried on the Hub when a source is not a local path: "name" or "owner/name"
_HUB_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")
#: said in every error of a source read from the Hub
_TRIED_HUB = "tried as a Hub repo id: there is no local file or folder of that name"


class ScheduleSourceError(ValueError):
    """A source of a stored schedule or a model (folder, file, Hub repo) that cannot be read, or holds none."""


#: seconds a connection to the Hub may take before it counts as unreachable (huggingface_hub then retries for most of
#: a minute before its own error)
HUB_CONNECT_TIMEOUT = 3.0


def env_true(name: str) -> bool:
    """Whether the environment variable ``name`` is set to a true value (1, ON, YES, TRUE), as huggingface_hub reads it."""
    import os

    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_unreadable(repo_id: str, *, dataset: bool = False, cache_dir: str | None = None) -> str | None:
    """Why the Hub repo ``repo_id`` (a data set's with ``dataset``) cannot be read here, or None when it can be: it is
    in a local cache (``cache_dir``, the Hub's, and for a data set ``datasets``'), or the Hub answers a connection
    within :data:`HUB_CONNECT_TIMEOUT` seconds. Offline (``HF_HUB_OFFLINE``, and ``HF_DATASETS_OFFLINE`` for a data
    set) no connection is attempted. Never raises."""
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    kind = "datasets" if dataset else "models"
    caches = [Path(d) / f"{kind}--{repo_id.replace('/', '--')}" for d in (cache_dir, constants.HF_HUB_CACHE) if d]
    if dataset:
        from datasets import config

        caches += [Path(d) / repo_id.replace("/", "___") for d in (cache_dir, config.HF_DATASETS_CACHE) if d]
    if any(c.is_dir() for c in caches):
        return None
    offline = [name for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE" if dataset else "") if name and env_true(name)]
    offline = offline or (["HF_HUB_OFFLINE"] if constants.HF_HUB_OFFLINE else [])  # huggingface_hub's reading, at its import
    if offline:
        return f"{offline[0]} is set and it is not in the Hub cache"
    host = urlsplit(constants.ENDPOINT).hostname
    try:
        _ask_hub(constants.ENDPOINT, HUB_CONNECT_TIMEOUT)
    except Exception as err:  # httpx's or requests' connection errors, by huggingface_hub version: any is "unreachable"
        return f"the Hub ({host}) cannot be reached ({getattr(err, 'strerror', None) or err}) and it is not in the Hub cache"
    return None


def _ask_hub(endpoint: str, timeout: float) -> None:
    """One HEAD request to the Hub through huggingface_hub's own HTTP session (its proxies and certificates: a bare
    socket would miss a proxy and refuse a Hub that answers); raises when nothing answers within ``timeout`` seconds."""
    from huggingface_hub.utils import get_session

    get_session().head(endpoint, timeout=timeout)


def local_or_hub(spec) -> Path | str:
    """Where a source named on the command line is read from: a local path (a :class:`~pathlib.Path` to a regular file
    or a folder) or a Hub repo id (the ``str``), decided without touching the network.

    It is local when anything of that name exists (a broken link or a link loop too); when it starts with ``.``,
    ``/`` or ``~`` or does not have the form ``name`` or ``owner/name``; or when its first component exists here
    (``runs/zA`` beside a folder ``runs``: a mistyped run folder, never the public Hub repo ``runs/zA``, which
    would otherwise be read without a word, or retried for a minute offline). Otherwise it is a Hub repo id.

    Raises:
        ScheduleSourceError: a local source that is not there, a link loop, or something that is neither a regular
            file nor a folder (a device, a FIFO, a socket: reading one would block or never end), each in one line
            that says it was tried as a local path, and why.
    """
    import errno
    import os
    import stat

    text = str(spec)
    p = Path(text).expanduser()
    first = text.replace("\\", "/").split("/")[0]
    if os.path.lexists(p):
        why = "it exists"
    elif text.startswith((".", "/", "~")):
        why = f"it starts with {text[0]!r}"
    elif not _HUB_REPO_ID.fullmatch(text):
        why = "it does not have the form of a Hub repo id, name or owner/name"
    elif "/" in text and os.path.lexists(first):
        why = f"./{first} exists"
    else:
        return text
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        if p.is_symlink():
            target = os.readlink(p)
            raise ScheduleSourceError(f"{text}: a broken symbolic link (to {target}; tried as a local path because {why})") from None
        raise ScheduleSourceError(f"no such file or folder: {text} (tried as a local path because {why})") from None
    except OSError as err:  # ELOOP, EACCES on a parent folder, ...
        reason = "a symbolic link loop" if err.errno == errno.ELOOP else f"cannot be read ({err.strerror or err})"
        raise ScheduleSourceError(f"{text}: {reason} (tried as a local path because {why})") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode) else "a FIFO or a socket"
        raise ScheduleSourceError(f"{text}: {kind}, not a regular file or a folder (tried as a local path because {why})")
    return p


#: no config is this large: a bigger "JSON" file is something else (and would be read whole into memory)
_MAX_JSON_BYTES = 64 << 20


def read_json_file(path) -> dict:
    """The JSON object in a local file (a scheduler or model config, a bare schedule payload).

    Raises:
        ScheduleSourceError: not a regular file (:func:`local_or_hub`), unreadable, larger than 64 MiB (no config
            is), not UTF-8, not valid JSON, nested too deeply to read, or not an object; one line each.
    """
    p = local_or_hub(Path(path))
    if not isinstance(p, Path) or not p.is_file():
        raise ScheduleSourceError(f"{path}: a folder, not a JSON file")
    try:
        if p.stat().st_size > _MAX_JSON_BYTES:
            raise ScheduleSourceError(f"{path}: {p.stat().st_size >> 20} MiB, too large for a JSON config")
        with open(p, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as err:
        raise ScheduleSourceError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    except RecursionError:
        raise ScheduleSourceError(f"{path}: JSON nested too deeply to read (not a config)") from None
    except UnicodeDecodeError:
        raise ScheduleSourceError(f"{path}: not a text file (JSON must be UTF-8)") from None
    except OSError as err:
        raise ScheduleSourceError(f"{path}: cannot be read ({err.strerror or err})") from None
    if not isinstance(data, dict):
        raise ScheduleSourceError(f"{path}: expected a JSON object, got {type(data).__name__}")
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
        raise ScheduleSourceError(f"{repo_id}: huggingface_hub is not installed to read it from the Hub ({_TRIED_HUB})") from None
    why = hub_unreadable(repo_id, cache_dir=cache_dir)  # a few seconds, where huggingface_hub retries for most of a minute
    if why:
        raise ScheduleSourceError(f"{repo_id}: cannot be read from the Hub here: {why} ({_TRIED_HUB})")
    offline_hint = False
    for filename in ("/".join(PIPELINE_SCHEDULER), SCHEDULER_FILE):
        try:
            local = hf_hub_download(repo_id, filename, revision=revision, cache_dir=cache_dir)
            return read_json_file(Path(local)), f"{repo_id}:{filename}"
        except HFValidationError:
            raise ScheduleSourceError(f"{repo_id}: not a valid Hub repo id ({_TRIED_HUB})") from None
        except LocalEntryNotFoundError:
            # raised offline (HF_HUB_OFFLINE=1 or no connection) when the file is not in the cache
            offline_hint = True
            continue
        except EntryNotFoundError:
            continue
        except RepositoryNotFoundError:
            raise ScheduleSourceError(f"{repo_id}: no such Hub repository, or it is private or gated ({_TRIED_HUB})") from None
        except RevisionNotFoundError:
            raise ScheduleSourceError(f"{repo_id}: revision {revision!r} not found on the Hub ({_TRIED_HUB})") from None
        except OSError as err:  # network errors and other hub failures
            raise ScheduleSourceError(f"{repo_id}: could not read it from the Hub: {' '.join(str(err).split())} ({_TRIED_HUB})") from None
    if offline_hint:
        raise ScheduleSourceError(
            f"{repo_id}: not available offline: {'/'.join(PIPELINE_SCHEDULER)} or {SCHEDULER_FILE} "
            "of this Hub repo is not in the local Hugging Face cache and the Hub cannot be reached (HF_HUB_OFFLINE=1 or "
            f"no network); download it once online, or pass a local directory ({_TRIED_HUB})"
        )
    raise ScheduleSourceError(
        f"{repo_id}: the Hub repo has no scheduler config (looked for {'/'.join(PIPELINE_SCHEDULER)} and {SCHEDULER_FILE}; {_TRIED_HUB})"
    )


def load_scheduler_config(spec: str, *, revision: str | None = None, cache_dir: str | None = None) -> tuple[dict, str]:
    """``(config, where)``: the scheduler config (or bare schedule payload) of a pipeline folder
    (``scheduler/scheduler_config.json``), a scheduler folder, a JSON file, or a Hub repo id (read through
    ``huggingface_hub``; cached repos work offline, ``revision`` and ``cache_dir`` as there). Which one is decided
    without the network (:func:`local_or_hub`: ``runs/zA`` beside a folder ``runs`` is local), and every error says
    which was tried.

    Raises:
        ScheduleSourceError: (a ``ValueError``) no such path, no scheduler config in it, a link loop or a device,
            invalid or too deeply nested JSON, or a Hub repo that cannot be read, each in one line.
    """
    p = local_or_hub(spec)
    if not isinstance(p, Path):
        return _hub_download(p, revision, cache_dir)
    if p.is_file():
        return read_json_file(p), str(p)
    for candidate in (p.joinpath(*PIPELINE_SCHEDULER), p / SCHEDULER_FILE):
        if candidate.is_file():
            return read_json_file(candidate), str(candidate)
    hint = ""
    if p.name.startswith("checkpoint-") and p.is_dir():  # a training script's checkpoint-N/ holds the sampler's state only
        hint = f"; {p.name} is a training checkpoint: pass the run's output folder ({p.parent}), where the run saves its pipeline"
    raise ScheduleSourceError(
        f"{p}: no scheduler config in this folder (looked for {'/'.join(PIPELINE_SCHEDULER)} and {SCHEDULER_FILE}; tried as "
        f"a local path){hint}"
    )


def read_schedule_from(source, *, revision: str | None = None, cache_dir: str | None = None) -> tuple[dict, str]:
    """``(payload, where)``: the validated schedule stored in ``source``: a scheduler or its config, a pipeline
    folder, a scheduler folder, a scheduler JSON or bare payload file, or a Hub repo id
    (:func:`load_scheduler_config`). What ``--infonoise_schedule_from`` reads (METHOD.md §5.9).

    Raises:
        ScheduleSourceError: the source cannot be read, or it holds no stored InfoNoise schedule.
        ScheduleError: the stored schedule is corrupted or of an unknown format version.
    """
    if hasattr(source, "config") or isinstance(source, dict):
        config, where = getattr(source, "config", source), type(source).__name__
    else:
        config, where = load_scheduler_config(str(source), revision=revision, cache_dir=cache_dir)
    payload = validate_payload(config) if config.get("format") == FORMAT else read_schedule(config)
    if payload is None:
        raise ScheduleSourceError(
            f"{where}: holds no stored InfoNoise schedule (no '{CONFIG_KEY}' in its scheduler "
            "config): it was not saved by a run with an InfoNoise sampler"
        )
    return payload, where


# ----------------------------------------------------------------------------------------------
# Sampler state in training checkpoints: safetensors for tensors, JSON for the rest (no pickle).
# ----------------------------------------------------------------------------------------------

SAMPLER_STATE_TENSORS = "infonoise_sampler.safetensors"
SAMPLER_STATE_JSON = "infonoise_sampler.json"


def _flatten(state: dict, prefix: str = ""):
    tensors, plain = {}, {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            t, p = _flatten(value, name + ".")
            tensors.update(t)
            plain.update(p)
        elif torch.is_tensor(value):
            tensors[name] = value.detach().cpu().contiguous()
        else:
            plain[name] = value
    return tensors, plain


def _unflatten(flat: dict) -> dict:
    out: dict = {}
    for name, value in flat.items():
        node = out
        *parents, leaf = name.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def save_sampler_state(sampler, directory) -> None:
    """Write ``sampler.state_dict()`` (its random stream included) into ``directory``.

    Files: :data:`SAMPLER_STATE_TENSORS` (safetensors) and :data:`SAMPLER_STATE_JSON`.
    """
    import json
    import os

    from safetensors.torch import save_file

    state = sampler.state_dict()
    tensors, plain = _flatten(state)
    os.makedirs(directory, exist_ok=True)
    save_file(tensors, os.path.join(directory, SAMPLER_STATE_TENSORS))
    with open(os.path.join(directory, SAMPLER_STATE_JSON), "w") as f:
        json.dump({"format": "diffusers-infonoise/sampler-state", "version": 1, "values": plain}, f, indent=1)


def load_sampler_state(sampler, directory) -> bool:
    """Restore a state written by :func:`save_sampler_state`; returns False when ``directory`` has neither file.

    The state is validated as strictly as a stored payload: finite counts, π that follows from its own m̂
    (:meth:`~diffusers_infonoise.sampler.adaptive._AdaptiveSampler.load_state_dict`).

    Raises:
        ScheduleError: one of the two files without the other (naming ``directory`` and the missing one), an
            unreadable or foreign state file, or an invalid state (another sampler or grid, non-finite counts, a π
            that does not follow from its m̂).
    """
    import json
    import os

    from safetensors.torch import load_file

    tpath, jpath = os.path.join(directory, SAMPLER_STATE_TENSORS), os.path.join(directory, SAMPLER_STATE_JSON)
    present = [os.path.exists(p) for p in (tpath, jpath)]
    if not any(present):
        return False
    if not all(present):  # half a state: resuming from the base density would lose the run's schedule without a word
        missing = SAMPLER_STATE_JSON if present[0] else SAMPLER_STATE_TENSORS
        raise ScheduleError(f"{directory}: the sampler state is incomplete: {missing} is missing (the folder holds the other file only)")
    try:
        with open(jpath) as f:
            meta = json.load(f)
    except (OSError, ValueError) as err:
        raise ScheduleError(f"{jpath}: unreadable sampler state ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != "diffusers-infonoise/sampler-state" or meta.get("version") != 1:
        raise ScheduleError(f"{jpath}: not a diffusers-infonoise sampler state (version 1)")
    try:
        tensors = load_file(tpath)
    except Exception as err:  # safetensors raises its own error types for truncated or foreign files
        raise ScheduleError(f"{tpath}: unreadable sampler state ({err})") from None
    state = _unflatten({**tensors, **meta.get("values", {})})
    state.pop("generator_state", None)  # written before the sampler owned its stream
    try:
        sampler.load_state_dict(state)
    except (KeyError, TypeError, ValueError) as err:
        raise ScheduleError(f"{directory}: invalid sampler state: {err}") from None
    return True
