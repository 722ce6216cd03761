"""Corruption paths: one log-σ axis for every diffusers noise schedule (METHOD.md §1).

Every Gaussian path is ``x = a·x0 + b·ε`` with ``ε ~ N(0, I)``. Its VE-equivalent noise level is
``σ = b/a`` and its log signal-to-noise ratio is ``λ = log(a²/b²) = −2·log σ``. All bookkeeping in
this package happens on ``log σ``; a :class:`NoisePath` maps that axis to the native level a
scheduler and a model use:

============  =========================================  ==========================  ===================
path          diffusers schedulers                        native level (timesteps)    σ (VE)
============  =========================================  ==========================  ===================
``"ve"``      EDMEulerScheduler, EDMDPMSolverMultistep    ``c_noise = 0.25·ln σ``     σ
``"vp"``      DDPMScheduler, DDIMScheduler, any with      integer t                   ``sqrt((1−ᾱ)/ᾱ)``
              ``alphas_cumprod``
``"flow"``    FlowMatchEulerDiscreteScheduler             ``s·num_train_timesteps``   ``s/(1−s)``
============  =========================================  ==========================  ===================

All tensors returned here are float64 unless stated; σ may be ``+inf`` on a zero-terminal-SNR VP
path (``rescale_betas_zero_snr=True``), and every function below is written so that it never
divides by it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

__all__ = [
    "NoisePath",
    "VEPath",
    "VPPath",
    "FlowPath",
    "PATH_CLASSES",
    "path_class",
    "path_from_scheduler",
    "scheduler_kind",
    "sigma_to_log_snr",
    "log_snr_to_sigma",
]


def sigma_to_log_snr(sigmas: torch.Tensor) -> torch.Tensor:
    """λ = −2·log σ (METHOD.md §1). ``σ = inf`` gives ``λ = −inf``; shape and dtype are kept."""
    return -2.0 * torch.log(sigmas)


def log_snr_to_sigma(log_snr: torch.Tensor) -> torch.Tensor:
    """σ = exp(−λ/2), the inverse of :func:`sigma_to_log_snr`."""
    return torch.exp(-0.5 * log_snr)


def _as_f64(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=torch.float64)


def _broadcast_to(coeff: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Reshape a per-sample (B,) coefficient to broadcast against a (B, ...) batch."""
    return coeff.to(device=like.device, dtype=like.dtype).reshape(-1, *([1] * (like.ndim - 1)))


@dataclass(frozen=True)
class NoisePath:
    """A corruption path with its grid range on the log-σ axis, and what differs by path: the loss
    parameterizations and weightings that mean something on it, its conventional base density, how a
    trained model on it is sampled.

    Attributes:
        kind: ``"ve"``, ``"vp"`` or ``"flow"``.
        sigma_min, sigma_max: the VE σ range the path trains on (METHOD.md §5.1). For VP this is
            the finite range of the ᾱ table; for flow it is ``s ∈ [1/N, 1 − 1/N]``.

    Class attributes (the same for every path of a kind):
        prediction_types: the loss parameterizations a per-sample error on the path can be in (METHOD.md §3).
        loss_weightings: the named loss weightings that mean something on it (METHOD.md §4): SD3's
            ``sigma_sqrt``/``cosmap`` are functions of the flow level s, EDM's λ(σ) a VE/VP quantity.
        default_base: the base density of the warm-up and the floor (METHOD.md §5.2).
        default_inference_steps: sampling steps of the scripts and the pipeline when none are given.
        unconditional_pipeline: the class a trained unconditional image model on the path is saved as
            (a name: ``DDPMPipeline``, whose loop samples VP and flow models right, or this package's
            ``InfoNoiseUnconditionalPipeline``).
        diffusion: the path's name in train_unconditional.py's ``--diffusion`` (``ddpm``, ``edm``, ``flow``).
        scheduler_class: the diffusers scheduler a new model on the path trains with (a name).
        scheduler_options: the config keys of :attr:`scheduler_class` a script sets for a new model
            (:meth:`new_scheduler`).
        scheduler_prediction_types: the values of the scheduler's ``prediction_type`` (diffusers'
            ``--prediction_type``), the default first: what the network outputs. VP: the loss parameterization;
            EDM: only the sign of c_out (the loss is on the denoiser D); flow: the velocity, ``"flow"`` (flow
            schedulers have no such option).
        preconditioned: the network is called through EDM's preconditioning (``c_in`` on its input, ``c_noise`` as
            its timestep) and read as the denoiser D = c_skip·x + c_out·F: the loss is on D whatever the sign of its
            output (VE).
        takes_weighting_scheme: diffusers' scripts on the path (SD3, Flux) take ``--weighting_scheme``, a density of
            the training levels (and, for ``sigma_sqrt``/``cosmap``, a loss weight), instead of ``--snr_gamma`` and
            ``--prediction_type`` (flow).
    """

    kind: str
    sigma_min: float
    sigma_max: float

    prediction_types: ClassVar[tuple[str, ...]] = ()
    loss_weightings: ClassVar[tuple[str, ...]] = ("none", "min_snr", "snr")
    default_base: ClassVar[str] = "log_uniform"
    default_inference_steps: ClassVar[int] = 50
    unconditional_pipeline: ClassVar[str] = "DDPMPipeline"
    diffusion: ClassVar[str] = ""
    scheduler_class: ClassVar[str] = ""
    scheduler_options: ClassVar[tuple[str, ...]] = ()
    scheduler_prediction_types: ClassVar[tuple[str, ...]] = ()
    preconditioned: ClassVar[bool] = False
    takes_weighting_scheme: ClassVar[bool] = False

    # -- what differs by path ------------------------------------------------------------------
    @classmethod
    def new_scheduler(cls, options: dict):
        """A new model's training scheduler: :attr:`scheduler_class` with the :attr:`scheduler_options` found in
        ``options`` (config key → value; the keys of other paths are left out)."""
        import diffusers

        return getattr(diffusers, cls.scheduler_class)(**{key: options[key] for key in cls.scheduler_options if key in options})

    @classmethod
    def default_prediction_type(cls, config) -> str:
        """The loss parameterization a script most likely uses with a scheduler of this path (its
        ``config``): VP the scheduler's ``prediction_type``; flow ``"flow"`` (velocity); EDM
        ``"sample"`` (the denoiser D: an EDM scheduler's ``prediction_type`` only picks the sign of
        ``c_out``, METHOD.md §3 trap)."""
        return cls.prediction_types[0]

    @classmethod
    def default_loss_weighting(cls, prediction_type: str) -> str:
        """The loss weighting a user of the path trains with by default (METHOD.md §4): ``"none"``;
        on VE the EDM recipe (``"edm"``, λ(σ)) for the x0/D loss."""
        return "none"

    @classmethod
    def configured_prediction_type(cls, config) -> str | None:
        """How a pipeline reads the model's output on this path, when the scheduler's config decides it
        (VP: its ``prediction_type``); ``None`` where the config does not (EDM: a sign; flow: velocity)."""
        return None

    @classmethod
    def from_scheduler_sigmas(cls, values: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`scheduler_sigmas`: a scheduler's own ``sigmas`` coordinate → VE σ (float64)."""
        return _as_f64(values)

    @classmethod
    def grid_spans(cls, first: float, last: float, log_sigma_min: float, log_sigma_max: float) -> bool:
        """Whether a stored grid from log σ ``first`` to ``last`` is the grid of a path of this kind with
        that σ range (:attr:`log_sigma_range`): its ends exactly (VP: its cells reach past the table)."""
        return abs(first - log_sigma_min) <= 1e-9 and abs(last - log_sigma_max) <= 1e-9

    @classmethod
    def scheduler_from_config(cls, path_config: dict):
        """A diffusers training scheduler of a stored path's :meth:`config` (a stored schedule records it).

        Raises:
            ValueError: where the config does not determine the scheduler (VP: the ᾱ table is not stored).
        """
        raise ValueError(f"a {path_config.get('kind')!r} path's scheduler cannot be built from its stored config")

    @classmethod
    def loss_target(cls, prediction_type: str) -> str:
        """What a loss of ``prediction_type`` on this path regresses, in words (model cards)."""
        return {
            "epsilon": "the noise ε",
            "v_prediction": "the velocity v",
            "sample": "the clean sample x0",
            "flow": "the flow velocity ε − x0",
            "edm_f": "the raw network output F",
        }.get(prediction_type, prediction_type)

    # -- coordinates ------------------------------------------------------------------------
    @property
    def log_sigma_range(self) -> tuple[float, float]:
        """``(log σ_min, log σ_max)``: the edges of the estimator's grid (METHOD.md §5.1)."""
        return math.log(self.sigma_min), math.log(self.sigma_max)

    @property
    def is_discrete(self) -> bool:
        """True when the model takes integer timesteps (VP), so draws are cell masses (§5.8)."""
        return False

    @property
    def data_scale(self) -> float | None:
        """σ_data of the path's preconditioning (EDM), ``None`` where the path has none."""
        return None

    @property
    def log_shift(self) -> float:
        """``log(shift)``: how far the path translates base densities on the log-σ axis (flow's shift; 0 elsewhere)."""
        return 0.0

    def uniform_density(self):
        """The path's "uniform" training density per unit log σ (``make_sampler("uniform")``)."""
        raise NotImplementedError

    def records(self, path_config: dict | None) -> bool:
        """Whether a stored path config (a schedule's or a profile's ``"path"``) is of this path's kind, so that the
        loss it was recorded with applies to this path."""
        return isinstance(path_config, dict) and path_config.get("kind") == self.kind

    def scheduler_sigmas(self, sigmas: torch.Tensor) -> torch.Tensor:
        """VE σ → the scheduler's own ``sigmas`` coordinate (float64): flow s, VE/EDM and VP σ as they are."""
        return _as_f64(sigmas)

    def exact_scale_factors(self, timesteps: torch.Tensor, sigmas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, b)`` (float64, CPU) at drawn levels from the exact native values (VP: the ᾱ table at the
        integer ``timesteps``, not the float32-rounded ``sigmas``)."""
        return self.scale_factors(_as_f64(sigmas).detach().cpu())

    def exact_add_noise(self, x0: torch.Tensor, noise: torch.Tensor, timesteps: torch.Tensor, sigmas: torch.Tensor) -> torch.Tensor:
        """``a·x0 + b·noise`` at drawn levels (:meth:`exact_scale_factors`); output has x0's dtype."""
        a, b = self.exact_scale_factors(timesteps, sigmas)
        return _broadcast_to(a.to(x0.device), x0) * x0 + _broadcast_to(b.to(x0.device), x0) * noise.to(x0.dtype)

    def grid_levels(self, sigmas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The levels of a requested (K,) VE σ grid that the path can take: ``(sigmas, timesteps)``,
        float64 σ and native timesteps (VP: snapped to the distinct finite table steps, sorted)."""
        return _as_f64(sigmas).clone(), self.sigma_to_timesteps(sigmas).to(torch.float32)

    def scale_factors(self, sigmas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, b)`` of ``x = a·x0 + b·ε`` at VE σ; shapes as ``sigmas``; safe at σ = inf."""
        raise NotImplementedError

    def sigma_to_timesteps(self, sigmas: torch.Tensor) -> torch.Tensor:
        """The native model input for VE σ (see the module table)."""
        raise NotImplementedError

    def timesteps_to_sigma(self, timesteps: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`sigma_to_timesteps` (float64 VE σ)."""
        raise NotImplementedError

    def add_noise(self, x0: torch.Tensor, noise: torch.Tensor, sigmas: torch.Tensor) -> torch.Tensor:
        """``a·x0 + b·noise`` for a (B, ...) batch and (B,) VE σ; output has x0's dtype.

        No lookup on a scheduler grid is involved, so any σ in the path's range works
        (``EDMEulerScheduler.add_noise`` only accepts σ values on its own grid).
        """
        a, b = self.scale_factors(_as_f64(sigmas).to(x0.device))
        return _broadcast_to(a, x0) * x0 + _broadcast_to(b, x0) * noise.to(x0.dtype)

    def config(self) -> dict:
        """Plain-float description used by serialization and for equality checks."""
        return {"kind": self.kind, "sigma_min": float(self.sigma_min), "sigma_max": float(self.sigma_max)}


@dataclass(frozen=True)
class VEPath(NoisePath):
    """Variance-exploding / EDM path: ``x = x0 + σ·ε``; model timestep ``c_noise = 0.25·ln σ``.

    ``c_noise`` is what diffusers' EDM schedulers use as ``timesteps``
    (``EDMEulerScheduler.precondition_noise``).
    """

    sigma_data: float = 0.5

    prediction_types: ClassVar[tuple[str, ...]] = ("sample", "edm_f", "epsilon")
    loss_weightings: ClassVar[tuple[str, ...]] = ("none", "edm", "min_snr", "snr")
    default_base: ClassVar[str] = "edm_lognormal"
    default_inference_steps: ClassVar[int] = 40
    # diffusers' DDPMPipeline loop skips EDM's preconditioning and would sample wrong
    unconditional_pipeline: ClassVar[str] = "InfoNoiseUnconditionalPipeline"
    diffusion: ClassVar[str] = "edm"
    scheduler_class: ClassVar[str] = "EDMEulerScheduler"
    scheduler_options: ClassVar[tuple[str, ...]] = ("sigma_min", "sigma_max", "sigma_data", "prediction_type")
    scheduler_prediction_types: ClassVar[tuple[str, ...]] = ("epsilon", "v_prediction")
    preconditioned: ClassVar[bool] = True

    @classmethod
    def default_loss_weighting(cls, prediction_type: str) -> str:
        # the EDM recipe on the D loss; an unweighted F loss already is the EDM weighting
        return "edm" if prediction_type == "sample" else "none"

    @classmethod
    def scheduler_from_config(cls, path_config):
        from diffusers import EDMEulerScheduler

        return EDMEulerScheduler(
            sigma_min=path_config["sigma_min"], sigma_max=path_config["sigma_max"], sigma_data=path_config.get("sigma_data", 0.5)
        )

    @classmethod
    def loss_target(cls, prediction_type: str) -> str:
        if prediction_type == "sample":
            return "the denoiser D = c_skip·x + c_out·F (EDM preconditioning: an x0 estimate)"
        return super().loss_target(prediction_type)

    def scale_factors(self, sigmas):
        sigmas = _as_f64(sigmas)
        return torch.ones_like(sigmas), sigmas

    def sigma_to_timesteps(self, sigmas):
        return 0.25 * torch.log(_as_f64(sigmas))

    def timesteps_to_sigma(self, timesteps):
        return torch.exp(4.0 * _as_f64(timesteps))

    def config(self):
        return {**super().config(), "sigma_data": float(self.sigma_data)}

    @property
    def data_scale(self) -> float:
        return float(self.sigma_data)

    def uniform_density(self):
        from .densities import KarrasRamp

        return KarrasRamp(self.sigma_min, self.sigma_max)  # uniform position on EDM's ρ = 7 ramp


@dataclass(frozen=True)
class FlowPath(NoisePath):
    """Rectified flow: ``x = (1 − s)·x0 + s·ε``, ``σ = s/(1 − s)``, timestep ``s·num_train_timesteps``.

    ``shift`` is recorded because base densities are defined in the *unshifted* coordinate and
    then translated: a shift maps ``s → shift·s/(1 + (shift − 1)·s)``, which is exactly
    ``σ → shift·σ`` (METHOD.md §1). The path's own σ range is the shifted one used for training.
    """

    num_train_timesteps: int = 1000
    shift: float = 1.0

    prediction_types: ClassVar[tuple[str, ...]] = ("flow", "sample")
    loss_weightings: ClassVar[tuple[str, ...]] = ("none", "min_snr", "snr", "sigma_sqrt", "cosmap")
    default_base: ClassVar[str] = "logit_normal"
    default_inference_steps: ClassVar[int] = 50
    diffusion: ClassVar[str] = "flow"
    scheduler_class: ClassVar[str] = "FlowMatchEulerDiscreteScheduler"
    scheduler_options: ClassVar[tuple[str, ...]] = ("shift",)
    scheduler_prediction_types: ClassVar[tuple[str, ...]] = ("flow",)
    takes_weighting_scheme: ClassVar[bool] = True

    @classmethod
    def from_scheduler_sigmas(cls, values):
        return cls.s_to_sigma(values)

    @classmethod
    def scheduler_from_config(cls, path_config):
        from diffusers import FlowMatchEulerDiscreteScheduler

        return FlowMatchEulerDiscreteScheduler(
            num_train_timesteps=path_config.get("num_train_timesteps", 1000), shift=path_config.get("shift", 1.0)
        )

    def scale_factors(self, sigmas):
        s = self.sigma_to_s(sigmas)
        return 1.0 - s, s

    @property
    def log_shift(self) -> float:
        return math.log(self.shift)

    def uniform_density(self):
        from .densities import Logistic, Shifted

        return Shifted(Logistic(0.0), self.log_shift)  # uniform s: logit(s) = log σ is logistic

    @staticmethod
    def sigma_to_s(sigmas: torch.Tensor) -> torch.Tensor:
        """Flow noise level ``s = σ/(1 + σ)`` (float64), written so that σ = inf gives s = 1."""
        sigmas = _as_f64(sigmas)
        return 1.0 / (1.0 + 1.0 / sigmas)

    @staticmethod
    def s_to_sigma(s: torch.Tensor) -> torch.Tensor:
        """``σ = s/(1 − s)`` for flow noise level s in (0, 1)."""
        s = _as_f64(s)
        return s / (1.0 - s)

    def scheduler_sigmas(self, sigmas):
        return self.sigma_to_s(sigmas)

    def sigma_to_timesteps(self, sigmas):
        return self.sigma_to_s(sigmas) * self.num_train_timesteps

    def timesteps_to_sigma(self, timesteps):
        return self.s_to_sigma(_as_f64(timesteps) / self.num_train_timesteps)

    def config(self):
        return {**super().config(), "num_train_timesteps": int(self.num_train_timesteps), "shift": float(self.shift)}


@dataclass(frozen=True, eq=False)
class VPPath(NoisePath):
    """Variance-preserving (DDPM) path: ``x = sqrt(ᾱ_t)·x0 + sqrt(1 − ᾱ_t)·ε`` with integer t.

    ``alphas_cumprod`` is the scheduler's (N,) table. ``σ_t = sqrt((1 − ᾱ_t)/ᾱ_t)`` increases with
    t; with ``rescale_betas_zero_snr=True`` the last ``ᾱ`` is 0 and ``σ = inf``. For the grid, such
    a step is clamped into the top bin: its cell on the log-σ axis is given the width of the
    previous gap (ours; METHOD.md §5.1).
    """

    alphas_cumprod: torch.Tensor = None

    prediction_types: ClassVar[tuple[str, ...]] = ("epsilon", "v_prediction", "sample")
    loss_weightings: ClassVar[tuple[str, ...]] = ("none", "edm", "min_snr", "snr")
    default_base: ClassVar[str] = "uniform"
    default_inference_steps: ClassVar[int] = 1000  # DDPMPipeline's
    diffusion: ClassVar[str] = "ddpm"
    scheduler_class: ClassVar[str] = "DDPMScheduler"
    scheduler_options: ClassVar[tuple[str, ...]] = ("num_train_timesteps", "beta_schedule", "prediction_type")
    scheduler_prediction_types: ClassVar[tuple[str, ...]] = ("epsilon", "v_prediction", "sample")

    @classmethod
    def default_prediction_type(cls, config) -> str:
        return config.get("prediction_type", "epsilon") if hasattr(config, "get") else "epsilon"

    @classmethod
    def configured_prediction_type(cls, config) -> str | None:
        return cls.default_prediction_type(config)

    @classmethod
    def grid_spans(cls, first, last, log_sigma_min, log_sigma_max):
        # the cells of the table's first and last steps reach half a step past their σ
        return first <= log_sigma_min + 1e-9 and last >= log_sigma_max - 1e-9

    @classmethod
    def scheduler_from_config(cls, path_config):
        raise ValueError(
            "a 'vp' path's scheduler cannot be built from its stored config: the VP alphas_cumprod table is "
            "not stored; pass the scheduler directory or pipeline instead"
        )

    @property
    def is_discrete(self):
        return True

    def uniform_density(self):
        from .densities import Piecewise

        return Piecewise(self.cell_edges(), torch.ones(self.num_train_timesteps, dtype=torch.float64))  # uniform t

    def exact_scale_factors(self, timesteps, sigmas):
        ac = self.alphas_cumprod.to(torch.float64)[timesteps.detach().cpu().long()]
        return ac.sqrt(), (1 - ac).sqrt()

    def grid_levels(self, sigmas):
        table = self.sigmas_table
        finite_t = torch.nonzero(torch.isfinite(table)).flatten()
        t = self.sigma_to_timesteps(sigmas).clamp(int(finite_t.min()), int(finite_t.max()))
        t = torch.unique(t)  # sorted; σ_t increases with t
        return table[t].clone(), t.to(torch.int64)

    @property
    def num_train_timesteps(self) -> int:
        return int(self.alphas_cumprod.numel())

    @property
    def sigmas_table(self) -> torch.Tensor:
        """(N,) float64 VE σ of every integer step; ``inf`` where ``ᾱ = 0``."""
        ac = _as_f64(self.alphas_cumprod)
        return torch.sqrt((1.0 - ac) / ac)  # ᾱ = 0 → 1/0 = inf, as wanted

    def cell_edges(self) -> torch.Tensor:
        """(N+1,) float64 log-σ edges of each step's cell: midpoints between neighbours (§5.8).

        Non-finite log σ (σ = inf) is replaced by extrapolating the last finite gap.
        """
        log_s = torch.log(self.sigmas_table)
        finite = torch.isfinite(log_s)
        if not bool(finite[:-1].all()):
            raise ValueError("alphas_cumprod: only the last step may have alpha_cumprod = 0 (sigma = inf)")
        if not bool(finite[-1]):
            log_s = log_s.clone()
            log_s[-1] = 2 * log_s[-2] - log_s[-3]
        if not bool((log_s[1:] > log_s[:-1]).all()):
            raise ValueError("alphas_cumprod must be strictly decreasing (sigma increasing in t)")
        mid = 0.5 * (log_s[1:] + log_s[:-1])
        first = log_s[0] - (mid[0] - log_s[0])
        last = log_s[-1] + (log_s[-1] - mid[-1])
        return torch.cat([first.reshape(1), mid, last.reshape(1)])

    def scale_factors(self, sigmas):
        sigmas = _as_f64(sigmas)
        # a = 1/sqrt(1+σ²), b = 1/sqrt(1+1/σ²): both finite at σ = inf (a = 0, b = 1).
        return 1.0 / torch.sqrt(1.0 + sigmas**2), 1.0 / torch.sqrt(1.0 + 1.0 / sigmas**2)

    def sigma_to_timesteps(self, sigmas):
        """Integer t (int64) whose log-σ cell contains σ; out-of-range σ goes to the end cells."""
        edges = self.cell_edges()
        log_s = torch.log(_as_f64(sigmas)).clamp(min=-1e300)  # σ = 0 → first cell
        t = torch.searchsorted(edges[1:-1].to(log_s.device), log_s, right=True)
        return t.to(torch.int64)

    def timesteps_to_sigma(self, timesteps):
        return self.sigmas_table.to(timesteps.device)[timesteps.long()]

    @property
    def log_sigma_range(self):
        edges = self.cell_edges()
        return float(edges[0]), float(edges[-1])

    def config(self):
        ac = _as_f64(self.alphas_cumprod)
        return {
            **super().config(),
            "num_train_timesteps": self.num_train_timesteps,
            "zero_terminal_snr": bool(ac[-1] == 0),
        }

    def __eq__(self, other):
        return isinstance(other, VPPath) and torch.equal(_as_f64(self.alphas_cumprod), _as_f64(other.alphas_cumprod))

    __hash__ = None


_VE_CLASSES = ("EDMEulerScheduler", "EDMDPMSolverMultistepScheduler")
_FLOW_CLASSES = ("FlowMatchEulerDiscreteScheduler", "FlowMatchHeunDiscreteScheduler")

#: the path class of each ``kind`` (a stored schedule records the kind)
PATH_CLASSES: dict[str, type[NoisePath]] = {"ve": VEPath, "vp": VPPath, "flow": FlowPath}


def scheduler_kind(noise_scheduler) -> str:
    """``"ve"``, ``"vp"`` or ``"flow"`` for a supported diffusers scheduler.

    Raises:
        TypeError: for a scheduler of none of these kinds (the message lists the accepted ones).
    """
    name = type(noise_scheduler).__name__
    if name in _VE_CLASSES:
        return "ve"
    if name in _FLOW_CLASSES:
        return "flow"
    if hasattr(noise_scheduler, "alphas_cumprod"):
        return "vp"
    raise TypeError(
        f"noise_scheduler: unsupported scheduler {name}; accepted: {', '.join(_VE_CLASSES + _FLOW_CLASSES)}, "
        "or any scheduler with an alphas_cumprod table (DDPMScheduler, DDIMScheduler, ...)"
    )


def path_class(noise_scheduler) -> type[NoisePath]:
    """The :class:`NoisePath` subclass of a supported diffusers scheduler, without building the path (which a
    dynamic-shift flow scheduler cannot without ``mu``): what differs by path, for that scheduler.

    Raises:
        TypeError: for an unsupported scheduler (as :func:`scheduler_kind`).
    """
    return PATH_CLASSES[scheduler_kind(noise_scheduler)]


def path_from_scheduler(noise_scheduler, *, mu: float | None = None) -> NoisePath:
    """Build the :class:`NoisePath` of a diffusers scheduler (METHOD.md §1).

    Args:
        noise_scheduler: an ``EDMEulerScheduler`` / ``EDMDPMSolverMultistepScheduler`` (VE), a
            ``FlowMatchEulerDiscreteScheduler`` (flow; static ``shift`` honoured), or any scheduler
            with an ``alphas_cumprod`` table (VP: ``DDPMScheduler``, ``DDIMScheduler``, ...).
        mu: flow only, for ``use_dynamic_shifting=True``: the ``mu`` the pipeline passes to
            ``set_timesteps``. Dynamic (exponential) shifting with ``mu`` equals a static shift of
            ``e^mu`` (METHOD.md §1). Required when dynamic shifting is on.

    Raises:
        TypeError: for a scheduler of none of these kinds.
        ValueError: for dynamic shifting without ``mu``, or a ``mu`` on a non-flow scheduler.
    """
    kind = scheduler_kind(noise_scheduler)
    cfg = noise_scheduler.config
    name = type(noise_scheduler).__name__
    if kind == "ve":
        if mu is not None:
            raise ValueError("mu: only flow-matching schedulers take a dynamic shift")
        lo, hi, sd = float(cfg.sigma_min), float(cfg.sigma_max), float(cfg.sigma_data)
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
            raise ValueError(f"noise_scheduler: {name} needs finite 0 < sigma_min < sigma_max, got sigma_min={lo}, sigma_max={hi}")
        if not (math.isfinite(sd) and sd > 0):
            raise ValueError(f"noise_scheduler: {name} needs a finite sigma_data > 0, got {sd}")
        return VEPath("ve", lo, hi, sigma_data=sd)
    if getattr(cfg, "use_flow_sigmas", False) or getattr(cfg, "invert_sigmas", False):
        # a VP-looking scheduler on flow sigmas, or an inverted flow schedule: neither path's mapping holds
        raise ValueError(
            f"noise_scheduler: {name} with use_flow_sigmas/invert_sigmas is not supported; use "
            "FlowMatchEulerDiscreteScheduler (flow) or a plain VP scheduler"
        )
    n = int(getattr(cfg, "num_train_timesteps", 1000))
    if n < 3:
        raise ValueError(f"noise_scheduler: num_train_timesteps must be >= 3 for a grid of noise levels, got {n}")
    if kind == "flow":
        if getattr(cfg, "use_dynamic_shifting", False):
            if mu is None:
                raise ValueError(
                    "mu: the scheduler uses dynamic shifting (use_dynamic_shifting=True); pass the mu of the "
                    "levels you train on (dynamic shifting with mu equals a static shift of exp(mu)): mu=0.0 for "
                    "draws from the scheduler's unshifted table, as diffusers' Flux training scripts do, or the "
                    "mu that set_timesteps gets at your resolution"
                )
            if getattr(cfg, "time_shift_type", "exponential") != "exponential":
                raise ValueError("time_shift_type: only 'exponential' dynamic shifting is supported")
            if not (isinstance(mu, (int, float)) and not isinstance(mu, bool) and math.isfinite(mu) and abs(mu) <= 20):
                raise ValueError(f"mu: must be a finite float with |mu| <= 20 (a shift of exp(mu)), got {mu!r}")
            shift = math.exp(mu)
        else:
            if mu is not None:
                raise ValueError("mu: the scheduler has use_dynamic_shifting=False; set shift in its config instead")
            shift = float(cfg.shift)
        if not (math.isfinite(shift) and shift > 0):
            raise ValueError(f"shift: must be a finite float > 0, got {shift}")
        # Grid range of METHOD.md §5.1: s ∈ [1/N, 1 − 1/N] of the (shifted) path.
        s_lo, s_hi = 1.0 / n, 1.0 - 1.0 / n
        return FlowPath("flow", s_lo / (1 - s_lo), s_hi / (1 - s_hi), num_train_timesteps=n, shift=shift)
    if mu is not None:
        raise ValueError("mu: only flow-matching schedulers take a dynamic shift")
    ac = _as_f64(noise_scheduler.alphas_cumprod.detach().cpu())
    if getattr(cfg, "rescale_betas_zero_snr", False) and ac.numel() > 1 and float(ac[-1]) > float(ac[-2]):
        # diffusers' inference schedulers (EulerDiscrete, ...) clamp the zero-terminal-SNR ᾱ_T = 0 to 2**-24 so that
        # their own σ_T is finite, above ᾱ_{T-1}; the table it stands for is DDPMScheduler's, with σ_T = inf (§5.1)
        ac = ac.clone()
        ac[-1] = 0.0
    sig = torch.sqrt((1 - ac) / ac)
    finite = sig[torch.isfinite(sig)]
    return VPPath("vp", float(finite.min()), float(finite.max()), alphas_cumprod=ac)
