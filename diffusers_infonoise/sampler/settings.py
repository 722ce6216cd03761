"""The settings of the adaptive samplers, defined once, up to the command line: :class:`AdaptiveSettings` (what every
adaptive sampler reads: Kingma & Gao's), :class:`LossSlopeSettings` (those and the m̂ cap) and
:class:`InfoNoiseSettings` (those, the m̂ cap and the settings of InfoNoise's target: the gate, the floor's space, the
temperature and the target's space). Each sampler accepts only its class's fields.

Each field carries its default, its check, its role and its ``--infonoise_*`` option (type, choices, help; the
training scripts generate their options from these, :func:`~diffusers_infonoise.training.args.add_noise_sampler_args`).
The role says where a setting goes: the ones that decide π (:data:`SCHEDULE_SETTINGS`) are compared when a stored
schedule is loaded; the stored ones are a payload's ``hyperparameters`` (:meth:`AdaptiveSettings.stored`, the writer);
the carried ones rebuild the sampler of a stored schedule (:meth:`InfoNoiseSettings.stored_keywords`, the reader).

Study settings: ``floor_space="pi"`` (the floor mixed into π instead of φ), ``target_space="pi"`` (the draws, not the
effective allocation, follow ρ̂), ``gate="paper"`` (the paper's gate rule as first implemented), a float ``ema_decay``
(the memory rule before 0.3), ``clean_end_bound=False`` (the profile before 0.3) and ``temperature`` (a tempered
target) are not the method (METHOD.md §5, §5.5, §5.7, §5.10). They stay accepted because stored payloads carry them
(those written before 0.3 load with ``ema_decay`` and ``clean_end_bound``) and the studies compare with them; their
options work but are left out of ``--help`` (``study`` in the field's metadata).
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field

from ..argtypes import bool_arg, ema_decay_arg, gate_arg, memory_arg, mmse_cap_arg, positive_float, positive_int, warmup_arg
from ..argtypes import is_real as _real
from ..estimator import check_estimator_settings

__all__ = [
    "AdaptiveSettings",
    "LossSlopeSettings",
    "InfoNoiseSettings",
    "SCHEDULE_SETTINGS",
    "STORED_SETTINGS",
    "default_mmse_cap",
    "unread_by",
    "default_warmup_steps",
]

#: the automatic warm-up when the run's length is unknown, and its most otherwise (METHOD.md §5.2)
DEFAULT_WARMUP_STEPS = 500
#: the automatic memory (docs/METHOD.md §5.10): an eighth of the run, at least the steps that bring ``min_count``
#: samples a bin on average, at least one refresh, at most 500 steps (β = 0.9 a refresh every 50 steps before 0.3)
MEMORY_FRACTION = 1 / 8
MAX_MEMORY_STEPS = 500

_SPACES = ("phi", "pi")
#: where ρ̂ is realised (``target_space``): the two spaces, and the two study spaces whose draws carry a per-sample factor
#: so that the effective allocation is ρ̂ itself (candidate B of docs/METHOD.md §4.1 and its split), and target C
_TARGET_SPACES = (*_SPACES, "importance", "rho_draws", "reducible")
_NOT_BEFORE = object()  # a setting every payload records


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_float(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _plain_number(x):
    """A real number of another type (a numpy integer or float scalar) as the Python int or float it holds, so that the
    stored settings stay JSON; anything else as it is, a bool (Python's or numpy's) included, to be refused."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return x
    return int(x) if isinstance(x, numbers.Integral) else float(x)


def _setting(default, role: str, place: int, *, option, check=None, before=_NOT_BEFORE, study: bool = False):
    """A settings field. ``role``: ``"pi"`` (decides π: stored, carried, compared), ``"statistics"`` (how the statistics
    are collected: stored, carried), ``"warmup"`` (stored only), ``"run"`` (neither) or ``"base"`` (carried through the
    payload's own ``base``). ``place``: its place among the settings, whichever class declares it: the order of
    :meth:`AdaptiveSettings.names`, of a payload's ``hyperparameters`` (as written since 0.2) and of the options.
    ``option``: the ``--infonoise_<name>`` option's ``type``, ``help`` and ``choices`` (:func:`_option`), or a string
    saying why the setting has none. ``check``: ``(ok(value), accepted)``, refused with ``"<name>: must be <accepted>"``.
    ``before``: the value a payload written before the setting existed had. ``study``: a study setting (module
    docstring), its option hidden from ``--help``."""
    return field(
        default=default, metadata={"role": role, "place": place, "option": option, "check": check, "before": before, "study": study}
    )


def _option(type, help: str | None = None, choices: tuple | None = None) -> dict:
    """An ``--infonoise_*`` option's argparse keywords besides its name and default (the field's); a study setting's
    ``help`` is None."""
    return {"type": type, "help": help, "choices": choices}


def _mmse_cap_setting():
    """The m̂ cap, a field of the samplers whose π is formed from m̂ itself (InfoNoise, the loss slope); its default
    when not given is :func:`default_mmse_cap`."""
    return _setting(
        None,
        "pi",
        13,
        option=_option(
            mmse_cap_arg,
            "Cap on the estimated x0 MMSE: 'none', 'auto' (the per-dimension variance of the data the model is trained on: "
            "pixels, or the VAE latents; it bounds the Bayes MMSE) or a value. Default: auto for epsilon/v prediction (the "
            "x0-space error of an imperfect model grows like sigma^2 at high noise there), none otherwise.",
        ),
        check=(
            lambda v: v is None or v == "auto" or (_real(v) and v > 0),
            "None, 'auto' (the data's per-dimension variance) or a finite float > 0",
        ),
    )


def _placed(cls) -> list:
    """The fields of a settings class in their place's order (a subclass's fields come last in field order)."""
    return sorted(dataclasses.fields(cls), key=lambda f: f.metadata["place"])


def default_mmse_cap(prediction_type: str) -> str | None:
    """The m̂ cap of a sampler not given one (METHOD.md §5.4): ``"auto"`` for ``epsilon`` and ``v_prediction`` losses,
    whose residual error times σ² exceeds the data's variance at high noise, None for the others."""
    return "auto" if prediction_type in ("epsilon", "v_prediction") else None


@dataclass(frozen=True)
class AdaptiveSettings:
    """The settings every adaptive sampler reads (Kingma & Gao's: all of its), its keyword arguments besides the loss
    (``prediction_type``, ``loss_weighting``, ``snr_gamma``). Frozen: a sampler replaces its settings, never edits them,
    when the run fixes a value (the run's length, a warm-up a start skipped, an ``"auto"`` m̂ cap measured on the data).

    Attributes:
        num_bins: K bins uniform in log σ over the path's range (default 64).
        warmup_steps: optimizer steps on the base density; ``"auto"`` (default): a tenth of ``num_training_steps``,
            between ``refresh_every`` and 500, or 500 when the run's length is unknown (:func:`default_warmup_steps`).
            A start that brings an adapted estimate skips an automatic warm-up (0 is what is saved).
        num_training_steps: the run's optimizer steps, if known (also ``sampler.plan_run``).
        refresh_every: optimizer steps between refreshes (default 50).
        ema_decay: ``None`` (default): the memory below. A float β in [0, 1): ``m̂ ← β·m̂ + (1 − β)·mean`` once a
            refresh instead (a study setting; 0.9 was the default before 0.3); ``memory`` must then be ``"auto"``.
        memory: H, the memory of the estimate in optimizer steps: a loss ``a`` steps old weighs ``exp(−a/H)`` in its
            bin's mean (docs/METHOD.md §5.10). ``"auto"`` (default): an eighth of ``num_training_steps``, at least
            the steps that bring ``num_bins·min_count`` samples at the measured rate, between ``refresh_every`` and
            500 (500 when the run's length is unknown); the sampler's ``_memory_steps()`` gives the value in force.
        min_count: samples a bin needs before its first value (default 8); until then they stay open into the
            next refresh (§5.4).
        smoothing: Gaussian kernel width in bins on log m̂ (default 1.0; 0 disables).
        floor: η, the floor's share (default 0.05, §5.7): of the effective allocation for InfoNoise, of π for the
            baselines.
        base: the warm-up and floor density: ``None`` (EDM log-normal on VE, uniform t on VP, logit-normal(0, 1)
            on flow), a name of :func:`~diffusers_infonoise.sampler.fixed.base_density`, ``(name, params)``, or a
            Density.
        clean_end_bound: bound m̂ by σ² per element (VE σ), the identity predictor's x0 error, so that
            q = m̂/σ² ≤ 1 at the clean end (default True, docs/METHOD.md §5.10; assumes a per-sample loss that is a
            mean over elements); ``False``: a study setting.

    A numpy integer or float scalar is taken where a Python int or float is, as the Python number it holds (the settings
    are stored as JSON); a bool is no number here.

    Raises:
        ValueError: an invalid setting, naming the argument and its accepted values.
    """

    num_bins: int = _setting(
        64, "pi", 0, option=_option(positive_int, "Bins uniform in log sigma."), check=(lambda v: _is_int(v) and v >= 4, "an int >= 4")
    )
    warmup_steps: int | str = _setting(
        "auto",
        "warmup",
        1,
        option=_option(warmup_arg, "Optimizer steps on the base density; 'auto': a tenth of the run, between one refresh and 500."),
        check=(lambda v: v == "auto" or (_is_int(v) and v >= 0), "'auto' or an int >= 0"),
    )
    num_training_steps: int | None = _setting(
        None,
        "run",
        2,
        option="the run's length: --max_train_steps",
        check=(lambda v: v is None or (_is_int(v) and v >= 1), "None or an int >= 1"),
    )
    refresh_every: int = _setting(
        50,
        "statistics",
        3,
        option=_option(positive_int, "Optimizer steps between refreshes of pi."),
        check=(lambda v: _is_int(v) and v >= 1, "an int >= 1"),
    )
    ema_decay: float | None = _setting(None, "statistics", 4, option=_option(ema_decay_arg), study=True)
    memory: int | float | str = _setting(
        "auto",
        "statistics",
        5,
        option=_option(
            memory_arg,
            "Memory of the estimate in optimizer steps (a loss a steps old weighs exp(-a/memory)); 'auto': an eighth of the "
            "run, at least the steps that bring min_count samples a bin, at most 500 (docs/METHOD.md 5.10).",
        ),
        check=(
            lambda v: v == "auto" or (_real(v) and v > 0),
            "'auto' (sized to the run, docs/METHOD.md 5.10) or a number of optimizer steps in (0, 1.8e308) (a finite float)",
        ),
    )
    min_count: int = _setting(
        8,
        "statistics",
        6,
        option=_option(positive_int, "Samples a bin needs to be updated; a bin with fewer keeps them for the next refresh."),
    )
    smoothing: float = _setting(1.0, "pi", 7, option=_option(float, "Gaussian smoothing width in bins (0: off)."))
    floor: float = _setting(
        0.05,
        "pi",
        8,
        option=_option(float, "Share of the effective allocation pi*w given to the base density (METHOD.md 5.7)."),
        check=(lambda v: _is_float(v) and 0.0 <= v <= 1.0, "a float in [0, 1]"),
    )
    base: object = _setting(
        None,
        "base",
        10,
        option=_option(str, "Warm-up/floor density name (default: EDM log-normal on edm, uniform t on ddpm, logit-normal on flow)."),
    )
    clean_end_bound: bool = _setting(True, "pi", 15, option=_option(bool_arg), before=False, study=True)

    def __post_init__(self):
        for f in dataclasses.fields(self):  # numpy scalars are taken as the numbers they hold
            object.__setattr__(self, f.name, _plain_number(getattr(self, f.name)))
        for f in _placed(self):
            value, check = getattr(self, f.name), f.metadata["check"]
            if check is not None and not check[0](value):
                raise ValueError(f"{f.name}: must be {check[1]}, got {value!r}")
        self._check_together()
        check_estimator_settings(**self.estimator_keywords())
        if self.ema_decay is not None and self.memory != "auto":  # the former rule has no horizon: one would be ignored
            raise ValueError(
                f"memory: not used with ema_decay={self.ema_decay!r} (the former rule: one EMA step a refresh, docs/METHOD.md "
                f"5.10); give one of them (ema_decay=None with a memory, or memory='auto' with ema_decay), got memory={self.memory!r}"
            )
        cap = getattr(self, "mmse_cap", None)
        if cap not in (None, "auto"):  # stored as given, but a number whatever its type
            object.__setattr__(self, "mmse_cap", float(cap))

    def _check_together(self) -> None:
        """Settings refused together (none here)."""

    # -- where each setting goes ------------------------------------------------------------------
    @classmethod
    def names(cls, *roles: str) -> tuple[str, ...]:
        """The settings of the given roles, in their place's order (all of them without a role)."""
        return tuple(f.name for f in _placed(cls) if not roles or f.metadata["role"] in roles)

    @classmethod
    def check_keywords(
        cls, keywords, what: str, *, extra: tuple[str, ...] = (), error: type = ValueError, reader: str | None = None
    ) -> None:
        """Refuse keywords that are not settings of this class (nor ``extra``), naming them and the accepted ones.

        Args:
            keywords: the keywords given.
            what: who was given them (the sampler's name or class), leading the message of an unknown keyword.
            extra: other keywords accepted.
            error: the exception of an unknown keyword.
            reader: the sampler, in words, for a setting of InfoNoise's that this class has not (default ``what``).

        Raises:
            ValueError: a setting of :class:`InfoNoiseSettings` that this class has not: ``"{name}: a setting of
                InfoNoise's target, not of {reader} (...); got {value!r}"``.
            ValueError (or ``error``): any other keyword, ``"{what}: unknown parameter(s) [...]; accepted: [...]"``.
        """
        unread = [k for k in InfoNoiseSettings.names() if k in keywords and k not in cls.names()]
        if unread:
            name = unread[0]
            raise ValueError(
                f"{name}: a setting of InfoNoise's target, not of {reader or what} (its settings: {', '.join(cls.names())}); "
                f"got {keywords[name]!r}"
            )
        unknown = set(keywords) - set(cls.names()) - set(extra)
        if unknown:
            raise error(f"{what}: unknown parameter(s) {sorted(unknown)}; accepted: {sorted({*cls.names(), *extra})}")

    @classmethod
    def options(cls) -> dict[str, dict]:
        """The settings that have an ``--infonoise_<name>`` option, by name, in their place's order: ``default``, ``type``,
        ``choices``, ``help`` (None for a study setting, whose option is left out of ``--help``)."""
        return {
            f.name: {"default": f.default, **f.metadata["option"], **({"help": None} if f.metadata["study"] else {})}
            for f in _placed(cls)
            if isinstance(f.metadata["option"], dict)
        }

    @classmethod
    def study_settings(cls) -> tuple[str, ...]:
        """The study settings (module docstring), in their place's order."""
        return tuple(f.name for f in _placed(cls) if f.metadata["study"])

    def replace(self, **changes):
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    def stored(self) -> dict:
        """The stored settings as a plain dict: a payload's ``hyperparameters`` (the writer; the reader is
        :meth:`InfoNoiseSettings.stored_keywords`)."""
        return {name: getattr(self, name) for name in self.names("pi", "statistics", "warmup")}

    def estimator_keywords(self) -> dict:
        """The keyword arguments of the sampler's :class:`~diffusers_infonoise.estimator.ProfileEstimator` (``memory``
        ``"auto"`` starts at 500 steps and ``mmse_cap`` ``"auto"`` at none until the data is measured; no gate and no
        cap where the settings have none)."""
        cap = getattr(self, "mmse_cap", None)
        return {
            "ema_decay": self.ema_decay,
            "memory": MAX_MEMORY_STEPS if self.memory == "auto" else float(self.memory),
            "min_count": self.min_count,
            "smoothing": self.smoothing,
            "gate": getattr(self, "gate", None),
            "gate_fallback": getattr(self, "gate_fallback", InfoNoiseSettings.gate_fallback),  # unused without a gate
            "mmse_cap": None if cap in (None, "auto") else float(cap),
            "clean_end_bound": self.clean_end_bound,
        }

    def resolved_warmup_steps(self) -> int:
        """The warm-up in optimizer steps: an explicit ``warmup_steps``, else the one sized to the run
        (:func:`default_warmup_steps`)."""
        if self.warmup_steps == "auto":
            return default_warmup_steps(self.num_training_steps, self.refresh_every)
        return int(self.warmup_steps)


@dataclass(frozen=True)
class LossSlopeSettings(AdaptiveSettings):
    """The loss-slope sampler's settings: :class:`AdaptiveSettings` and the m̂ cap.

    Attributes:
        mmse_cap: as :class:`InfoNoiseSettings`'.

    Raises:
        ValueError: an invalid setting, naming the argument and its accepted values.
    """

    mmse_cap: float | str | None = _mmse_cap_setting()


@dataclass(frozen=True)
class InfoNoiseSettings(AdaptiveSettings):
    """InfoNoise's settings: :class:`AdaptiveSettings`, the m̂ cap and the settings of its target.

    Attributes:
        floor_space: ``"phi"`` (default): ``φ ← (1 − η)·ρ̂ + η·φ_base``, then ``π ∝ φ/w``; ``"pi"``: a study setting.
        gate: the clean-end gate (§5.5): ``"auto"`` (default; the pivot is a tenth of the smallest gap between
            the values of the data given to ``add_noise``/``observe_data``: 0.2 for binarized or one-hot data in
            {−1, 1}, no gate for 8-bit or continuous data), ``"data"`` (the same), ``"profile"`` (the paper's rule
            repaired), a pinned pivot c (VE σ), ``None``, or ``"paper"`` (a study setting). Which rule fired and why
            is in ``sampler.estimator.last_gate``.
        gate_fallback: pivot used while a rule has nothing to go on (no data seen) or misfires (default 0.2, the
            paper's value for non-image data).
        mmse_cap: upper bound on m̂ before the profile is formed: ``"auto"`` measures the data's per-dimension
            variance ``mean_i Var(x0_i)`` on the x0 given to ``add_noise``/``observe_data``, which bounds the Bayes
            MMSE at every σ; a float sets it; ``None`` disables it. A sampler not given one takes
            :func:`default_mmse_cap`: ``"auto"`` for ``epsilon`` and ``v_prediction`` losses, ``None`` for the
            others: an ε- or v-model's residual error, converted to x0 space by ``σ²`` (METHOD.md §3), exceeds V at
            high noise by orders of magnitude (measured: m̂ ≈ 900–2800 vs 0.53 on binarized digits, DDPM-ε), and
            ``π ∝ ρ̂/w`` with ``w = 1/σ²`` then puts >90% of the draws at σ > 30 (§5.4).
        temperature: τ of a tempered target, ``φ ∝ ρ̂^τ`` (default 1: the entropy rate itself, the method; τ < 1
            widens the allocation: a study setting, the margin study of docs/METHOD.md §5).
        target_space: where ρ̂ is realised: ``"phi"`` (default, the method: ``π ∝ ρ̂/w``, so that the effective
            allocation ``φ = π·w`` follows ρ̂, METHOD.md §4) or ``"pi"`` (a study setting: the draws follow ρ̂,
            ``π = (1 − η)·ρ̂ + η·π_base``, and the loss weight w is left to scale them; TV(φ, ρ̂) then measures how far
            the run is from the method, and ``tv_pi_rho`` of a refresh TV(π, ρ̂)); or, study settings that realise
            ``φ = ρ̂`` by importance sampling (candidate B of docs/METHOD.md §4.1): the draws are
            ``(1 − η)·ρ̂·ŝ + η·π_base`` normalised, ``ŝ = m̂`` (``"importance"``: the draws that minimise the weighted
            loss's variance when a level's RMS error is proportional to its mean) or ``ŝ = 1`` (``"rho_draws"``), and
            each draw carries the per-sample factor ``c·ρ̂(σ)/(π(σ)·w(σ))`` (``levels.loss_weights``, mean 1 under π),
            so the loss's effective allocation is ρ̂ whatever w is. Continuous paths only (EDM, flow). ``"reducible"``
            (a study setting, candidate C of docs/METHOD.md §4.1): the draws are ``(1 − η)·ρ̂·R̂ + η·π_base`` normalised,
            ``R̂ = β·m̂`` the x0 error a level sheds per e-fold of its own draws (``β`` a learning exponent fitted on
            8 groups of bins, :mod:`~diffusers_infonoise.reducibility`), the weighting left as it is; ``π ∝ ρ̂/w``
            until a group's exponent is fitted (three windows of a bin) and while none learns (a plateau).

    Raises:
        ValueError: an invalid setting, naming the argument and its accepted values.
    """

    floor_space: str = _setting(
        "phi",
        "pi",
        9,
        option=_option(str, choices=_SPACES),
        check=(lambda v: v in _SPACES, "'phi' (METHOD.md §5.7) or 'pi' (a study knob)"),
        study=True,
    )
    gate: str | float | None = _setting(
        "auto",
        "pi",
        11,
        option=_option(
            gate_arg,
            "Clean-end gate: 'auto' (a tenth of the smallest gap between the data's values: 0.2 on binarized data, none on "
            "8-bit or continuous data), 'profile' (the paper's rule, repaired), 'none', or a pinned VE sigma such as 0.2 "
            "(METHOD.md 5.5).",
        ),
    )
    gate_fallback: float = _setting(
        0.2, "pi", 12, option=_option(float, "Pivot used while the gate rule has nothing to go on (no data seen yet) or misfires.")
    )
    mmse_cap: float | str | None = _mmse_cap_setting()
    temperature: float = _setting(
        1.0,
        "pi",
        14,
        option=_option(positive_float),
        check=(lambda v: _is_float(v) and 0.0 < v <= 4.0, "a float in (0, 4] (1: the target is the entropy rate itself)"),
        before=1.0,
        study=True,
    )
    target_space: str = _setting(
        "phi",
        "pi",
        16,
        option=_option(str, choices=_TARGET_SPACES),
        check=(
            lambda v: v in _TARGET_SPACES,
            "'phi' (METHOD.md §4), or a study knob: 'pi', 'importance', 'rho_draws' or 'reducible' (docs/METHOD.md §4)",
        ),
        before="phi",
        study=True,
    )

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "temperature", float(self.temperature))  # a number whatever its type

    def _check_together(self) -> None:
        if self.target_space != "phi" and self.floor_space == "pi":  # the draws already mix the floor in π
            raise ValueError(
                f"floor_space: 'pi' has no effect with target_space={self.target_space!r} (its draws mix the floor into pi "
                "already); give floor_space='phi' (the default)"
            )

    # -- stored payloads: the reader (the writer is AdaptiveSettings.stored) ------------------------
    @classmethod
    def stored_keywords(cls, payload: dict) -> dict:
        """The keyword arguments that rebuild the sampler of a (validated) payload: every setting that decides π or
        how the statistics are collected (one the payload predates: its value then), ``num_bins`` from its grid and
        the base density it records."""
        hp = payload.get("hyperparameters") or {}
        out = {k: cls.stored_value(hp, k) for k in cls.names("pi", "statistics") if k in hp or _BEFORE[k] is not _NOT_BEFORE}
        if out.get("ema_decay") is not None:  # a payload of a run given both: its memory was not used
            out.pop("memory", None)
        out["num_bins"] = len(payload["pi"])
        base = payload.get("base")
        if isinstance(base, dict) and isinstance(base.get("name"), str):
            params = {k: v for k, v in base.items() if k != "name"}
            out["base"] = (base["name"], params) if params else base["name"]
        return out

    @staticmethod
    def stored_value(hyperparameters: dict, name: str):
        """A setting as a payload's ``hyperparameters`` record it; the value then for one the payload predates (None
        when there was none)."""
        before = _BEFORE[name]
        return hyperparameters.get(name, None if before is _NOT_BEFORE else before)


_BEFORE = {f.name: f.metadata["before"] for f in dataclasses.fields(InfoNoiseSettings)}


def unread_by(settings_class: type[AdaptiveSettings]) -> tuple[str, ...]:
    """The settings of :class:`InfoNoiseSettings` that a sampler with ``settings_class`` does not read, in their place's
    order (none for InfoNoise)."""
    return tuple(k for k in InfoNoiseSettings.names() if k not in settings_class.names())


def default_warmup_steps(num_training_steps: int | None, refresh_every: int) -> int:
    """The warm-up sized to the run (METHOD.md §5.2, ours): a tenth of ``num_training_steps``, at least one refresh
    and at most 500 optimizer steps; 500 when the run's length is unknown."""
    if num_training_steps is None:
        return DEFAULT_WARMUP_STEPS
    return int(min(DEFAULT_WARMUP_STEPS, max(refresh_every, num_training_steps // 10)))


#: the settings, besides m̂ and the data statistics, that decide π: a sampler whose settings differ from a stored
#: schedule's rebuilds π from the stored m̂ (``InfoNoiseTrainingTimestepSampler.load_schedule``)
SCHEDULE_SETTINGS = InfoNoiseSettings.names("pi")
#: the settings a payload stores (its ``hyperparameters``), in their stored order
STORED_SETTINGS = InfoNoiseSettings.names("pi", "statistics", "warmup")
