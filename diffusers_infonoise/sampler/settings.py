"""The settings of the adaptive samplers (InfoNoise, Kingma & Gao), defined once: :class:`InfoNoiseSettings`.

Its fields are the samplers' keyword arguments with their defaults and checks. Each field's role says where it
goes: the ones that decide π (:data:`SCHEDULE_SETTINGS`) are compared when a stored schedule is loaded; the
stored ones are a payload's ``hyperparameters``; the carried ones rebuild the sampler of a stored schedule
(:meth:`InfoNoiseSettings.stored_keywords`).

Study knobs: ``floor_space="pi"`` (the floor mixed into π instead of φ), ``target_space="pi"`` (the draws, not the
effective allocation, follow ρ̂), ``gate="paper"`` (the paper's gate rule
as first implemented), a float ``ema_decay`` (the memory rule before 0.3) and ``clean_end_bound=False`` (the
profile before 0.3) are not the method (METHOD.md §5.5, §5.7, §5.10). They stay accepted because stored payloads
carry them (those written before 0.3 load with the last two) and the studies compare with them.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field

from ..estimator import check_estimator_settings

__all__ = [
    "InfoNoiseSettings",
    "SCHEDULE_SETTINGS",
    "STORED_SETTINGS",
    "default_warmup_steps",
]

#: the automatic warm-up when the run's length is unknown, and its most otherwise (METHOD.md §5.2)
DEFAULT_WARMUP_STEPS = 500
#: the automatic memory (docs/METHOD.md §5.10): an eighth of the run, at least the steps that bring ``min_count``
#: samples a bin on average, at least one refresh, at most 500 steps (β = 0.9 a refresh every 50 steps before 0.3)
MEMORY_FRACTION = 1 / 8
MAX_MEMORY_STEPS = 500

_FLOOR_SPACES = ("phi", "pi")
_TARGET_SPACES = ("phi", "pi")
_NOT_BEFORE = object()  # a setting every payload records


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _plain_number(x):
    """A real number of another type (a numpy integer or float scalar) as the Python int or float it holds, so that the
    stored settings stay JSON; anything else as it is, a bool (Python's or numpy's) included, to be refused."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        return x
    return int(x) if isinstance(x, numbers.Integral) else float(x)


def _real(x) -> bool:
    """A finite int or float (not a bool); an int too large for a float (``10**400``) is not one."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _setting(default, role: str, before=_NOT_BEFORE):
    """A field of :class:`InfoNoiseSettings`. ``role``: ``"pi"`` (decides π: stored, carried, compared),
    ``"statistics"`` (how the statistics are collected: stored, carried), ``"warmup"`` (stored only), ``"run"``
    (neither) or ``"base"`` (carried through the payload's own ``base``). ``before``: the value a payload written
    before the setting existed had."""
    return field(default=default, metadata={"role": role, "before": before})


@dataclass(frozen=True)
class InfoNoiseSettings:
    """The settings of an adaptive sampler: its keyword arguments besides the loss (``prediction_type``,
    ``loss_weighting``, ``snr_gamma``). Frozen: a sampler replaces its settings, never edits them, when the run
    fixes a value (the run's length, a warm-up a start skipped, an ``"auto"`` m̂ cap measured on the data).

    Attributes:
        num_bins: K bins uniform in log σ over the path's range (default 64).
        warmup_steps: optimizer steps on the base density; ``"auto"`` (default): a tenth of ``num_training_steps``,
            between ``refresh_every`` and 500, or 500 when the run's length is unknown (:func:`default_warmup_steps`).
            A start that brings an adapted estimate skips an automatic warm-up (0 is what is saved).
        num_training_steps: the run's optimizer steps, if known (also ``sampler.plan_run``).
        refresh_every: optimizer steps between refreshes (default 50).
        ema_decay: ``None`` (default): the memory below. A float β in [0, 1): ``m̂ ← β·m̂ + (1 − β)·mean`` once a
            refresh instead (a study knob; 0.9 was the default before 0.3); ``memory`` must then be ``"auto"``.
        memory: H, the memory of the estimate in optimizer steps: a loss ``a`` steps old weighs ``exp(−a/H)`` in its
            bin's mean (docs/METHOD.md §5.10). ``"auto"`` (default): an eighth of ``num_training_steps``, at least
            the steps that bring ``num_bins·min_count`` samples at the measured rate, between ``refresh_every`` and
            500 (500 when the run's length is unknown); the sampler's ``_memory_steps()`` gives the value in force.
        min_count: samples a bin needs before its first value (default 8); until then they stay open into the
            next refresh (§5.4).
        smoothing: Gaussian kernel width in bins on log m̂ (default 1.0; 0 disables).
        floor: η, the floor's share of the effective allocation (default 0.05, §5.7).
        floor_space: ``"phi"`` (default): ``φ ← (1 − η)·ρ̂ + η·φ_base``, then ``π ∝ φ/w``; ``"pi"``: a study knob.
        base: the warm-up and floor density: ``None`` (EDM log-normal on VE, uniform t on VP, logit-normal(0, 1)
            on flow), a name of :func:`~diffusers_infonoise.sampler.fixed.base_density`, ``(name, params)``, or a
            Density.
        gate: the clean-end gate (§5.5): ``"auto"`` (default; the pivot is a tenth of the smallest gap between
            the values of the data given to ``add_noise``/``observe_data``: 0.2 for binarized or one-hot data in
            {−1, 1}, no gate for 8-bit or continuous data), ``"data"`` (the same), ``"profile"`` (the paper's rule
            repaired), a pinned pivot c (VE σ), ``None``, or ``"paper"`` (a study knob). Which rule fired and why
            is in ``sampler.estimator.last_gate``.
        gate_fallback: pivot used while a rule has nothing to go on (no data seen) or misfires (default 0.2, the
            paper's value for non-image data).
        mmse_cap: upper bound on m̂ before the profile is formed: ``"auto"`` measures the data's per-dimension
            variance ``mean_i Var(x0_i)`` on the x0 given to ``add_noise``/``observe_data``, which bounds the Bayes
            MMSE at every σ; a float sets it; ``None`` disables it. InfoNoise's default is ``"auto"`` for
            ``epsilon`` and ``v_prediction`` losses, ``None`` for the others: an ε- or v-model's residual error,
            converted to x0 space by ``σ²`` (METHOD.md §3), exceeds V at high noise by orders of magnitude
            (measured: m̂ ≈ 900–2800 vs 0.53 on binarized digits, DDPM-ε), and ``π ∝ ρ̂/w`` with ``w = 1/σ²`` then
            puts >90% of the draws at σ > 30 (§5.4).
        temperature: τ of a tempered target, ``φ ∝ ρ̂^τ`` (default 1: the entropy rate itself, the method; τ < 1
            widens the allocation, a variant of the margin study of issue 24, docs/METHOD.md §5).
        target_space: where ρ̂ is realised: ``"phi"`` (default, the method: ``π ∝ ρ̂/w``, so that the effective
            allocation ``φ = π·w`` follows ρ̂, METHOD.md §4) or ``"pi"`` (a study knob of issue 31: the draws follow ρ̂,
            ``π = (1 − η)·ρ̂ + η·π_base``, and the loss weight w is left to scale them; TV(φ, ρ̂) then measures how far
            the run is from the method, and ``tv_pi_rho`` of a refresh TV(π, ρ̂)).
        clean_end_bound: bound m̂ by σ² per element (VE σ), the identity predictor's x0 error, so that
            q = m̂/σ² ≤ 1 at the clean end (default True, docs/METHOD.md §5.10; assumes a per-sample loss that is a
            mean over elements); ``False``: a study knob.

    A numpy integer or float scalar is taken where a Python int or float is, as the Python number it holds (the settings
    are stored as JSON); a bool is no number here.

    Raises:
        ValueError: an invalid setting, naming the argument and its accepted values.
    """

    num_bins: int = _setting(64, "pi")
    warmup_steps: int | str = _setting("auto", "warmup")
    num_training_steps: int | None = _setting(None, "run")
    refresh_every: int = _setting(50, "statistics")
    ema_decay: float | None = _setting(None, "statistics")
    memory: int | float | str = _setting("auto", "statistics")
    min_count: int = _setting(8, "statistics")
    smoothing: float = _setting(1.0, "pi")
    floor: float = _setting(0.05, "pi")
    floor_space: str = _setting("phi", "pi")
    base: object = _setting(None, "base")
    gate: str | float | None = _setting("auto", "pi")
    gate_fallback: float = _setting(0.2, "pi")
    mmse_cap: float | str | None = _setting(None, "pi")
    temperature: float = _setting(1.0, "pi", before=1.0)
    clean_end_bound: bool = _setting(True, "pi", before=False)
    target_space: str = _setting("phi", "pi", before="phi")

    def __post_init__(self):
        for f in dataclasses.fields(self):  # numpy scalars are taken as the numbers they hold
            object.__setattr__(self, f.name, _plain_number(getattr(self, f.name)))
        n, warm, cap, tau = self.num_training_steps, self.warmup_steps, self.mmse_cap, self.temperature
        for arg, value, ok, accepted in (
            ("num_bins", self.num_bins, _is_int(self.num_bins) and self.num_bins >= 4, "an int >= 4"),
            ("warmup_steps", warm, warm == "auto" or (_is_int(warm) and warm >= 0), "'auto' or an int >= 0"),
            ("num_training_steps", n, n is None or (_is_int(n) and n >= 1), "None or an int >= 1"),
            ("refresh_every", self.refresh_every, _is_int(self.refresh_every) and self.refresh_every >= 1, "an int >= 1"),
            (
                "memory",
                self.memory,
                self.memory == "auto" or (_real(self.memory) and self.memory > 0),
                "'auto' (sized to the run, docs/METHOD.md 5.10) or a number of optimizer steps in (0, 1.8e308) (a finite float)",
            ),
            (
                "temperature",
                tau,
                isinstance(tau, (int, float)) and not isinstance(tau, bool) and 0.0 < tau <= 4.0,
                "a float in (0, 4] (1: the target is the entropy rate itself)",
            ),
            (
                "floor",
                self.floor,
                isinstance(self.floor, (int, float)) and not isinstance(self.floor, bool) and 0.0 <= self.floor <= 1.0,
                "a float in [0, 1]",
            ),
            ("floor_space", self.floor_space, self.floor_space in _FLOOR_SPACES, "'phi' (METHOD.md §5.7) or 'pi' (a study knob)"),
            ("target_space", self.target_space, self.target_space in _TARGET_SPACES, "'phi' (METHOD.md §4) or 'pi' (a study knob)"),
            (
                "mmse_cap",
                cap,
                cap is None or cap == "auto" or (_real(cap) and cap > 0),
                "None, 'auto' (the data's per-dimension variance) or a finite float > 0",
            ),
        ):
            if not ok:
                raise ValueError(f"{arg}: must be {accepted}, got {value!r}")
        if self.target_space == "pi" and self.floor_space == "pi":  # the draws already mix the floor in π
            raise ValueError(
                "floor_space: 'pi' has no effect with target_space='pi' (the draws follow rho_hat and the floor is mixed into "
                "pi already); give floor_space='phi' (the default)"
            )
        check_estimator_settings(**self.estimator_keywords())
        if self.ema_decay is not None and self.memory != "auto":  # the former rule has no horizon: one would be ignored
            raise ValueError(
                f"memory: not used with ema_decay={self.ema_decay!r} (the former rule: one EMA step a refresh, docs/METHOD.md "
                f"5.10); give one of them (ema_decay=None with a memory, or memory='auto' with ema_decay), got memory={self.memory!r}"
            )
        # stored as given, but for the two that are numbers whatever their type
        object.__setattr__(self, "mmse_cap", cap if cap in (None, "auto") else float(cap))
        object.__setattr__(self, "temperature", float(tau))

    # -- where each setting goes ------------------------------------------------------------------
    @classmethod
    def names(cls, *roles: str) -> tuple[str, ...]:
        """The settings of the given roles, in field order (all of them without a role)."""
        return tuple(f.name for f in dataclasses.fields(cls) if not roles or f.metadata["role"] in roles)

    @classmethod
    def check_keywords(cls, keywords, what: str, *, extra: tuple[str, ...] = (), error: type = ValueError) -> None:
        """Refuse keywords that are not settings (nor ``extra``), naming them and the accepted ones.

        Raises:
            ValueError (or ``error``): ``"{what}: unknown parameter(s) [...]; accepted: [...]"``.
        """
        unknown = set(keywords) - set(cls.names()) - set(extra)
        if unknown:
            raise error(f"{what}: unknown parameter(s) {sorted(unknown)}; accepted: {sorted({*cls.names(), *extra})}")

    def replace(self, **changes) -> "InfoNoiseSettings":
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    def stored(self) -> dict:
        """The stored settings as a plain dict: a payload's ``hyperparameters``."""
        return {name: getattr(self, name) for name in STORED_SETTINGS}

    def estimator_keywords(self) -> dict:
        """The keyword arguments of the sampler's :class:`~diffusers_infonoise.estimator.ProfileEstimator` (``memory``
        ``"auto"`` starts at 500 steps and ``mmse_cap`` ``"auto"`` at none until the data is measured)."""
        return {
            "ema_decay": self.ema_decay,
            "memory": MAX_MEMORY_STEPS if self.memory == "auto" else float(self.memory),
            "min_count": self.min_count,
            "smoothing": self.smoothing,
            "gate": self.gate,
            "gate_fallback": self.gate_fallback,
            "mmse_cap": None if self.mmse_cap in (None, "auto") else float(self.mmse_cap),
            "clean_end_bound": self.clean_end_bound,
        }

    def resolved_warmup_steps(self) -> int:
        """The warm-up in optimizer steps: an explicit ``warmup_steps``, else the one sized to the run
        (:func:`default_warmup_steps`)."""
        if self.warmup_steps == "auto":
            return default_warmup_steps(self.num_training_steps, self.refresh_every)
        return int(self.warmup_steps)

    # -- stored payloads --------------------------------------------------------------------------
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
