"""The training-noise sampler interface (METHOD.md §1, §3, §5.8): :class:`NoiseLevels` and
:class:`TrainingTimestepSampler` (draws on the log-σ axis, exact noising on every path, loss
conversion to the x0 error, densities, state, and the hooks a training loop calls on every sampler:
:meth:`~TrainingTimestepSampler.plan_run`, :meth:`~TrainingTimestepSampler.metrics`,
:meth:`~TrainingTimestepSampler.save_to_scheduler`, the start), and the defaults of each path's loss."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .. import densities
from ..logs import get_logger
from ..objective import Objective
from ..paths import PATH_CLASSES, NoisePath, path_class
from ..schedule_io import clear_schedule
from ..weighting import LOSS_WEIGHTINGS, validate_prediction_type, x0_error_factor

logger = get_logger(__name__)

#: what a resume refuses to change (``TrainingTimestepSampler._check_resume_record``), key of the record -> the
#: option that sets it: each changes what the stored statistics and π mean. Every other recorded setting is warned of.
RESUME_SETTINGS = {
    "diffusion": "--diffusion (the path)",
    "sigma_min": "the path's sigma range (sigma_min)",
    "sigma_max": "the path's sigma range (sigma_max)",
    "sigma_data": "--sigma_data",
    "prediction_type": "--prediction_type",
    "base": "--infonoise_base (the base density)",
    "num_bins": "--infonoise_num_bins (the grid)",
}

__all__ = [
    "NoiseLevels",
    "RunPlan",
    "default_prediction_type",
    "default_loss_weighting",
    "TrainingTimestepSampler",
]


def as_count(value) -> int | None:
    """``value`` as the Python int it holds when it is an integer, Python's or numpy's; None otherwise (a bool, a float,
    anything else), for the caller to refuse, naming its argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def _check_global_step_arg(global_step) -> None:
    """``step(global_step)``'s argument: None or an int >= 1, refused before anything counts."""
    if global_step is not None and (as_count(global_step) is None or global_step < 1):
        raise ValueError(f"global_step: must be None or an int >= 1 (the optimizer steps done), got {global_step!r}")


@dataclass
class NoiseLevels:
    """One batch of training noise levels.

    Attributes:
        timesteps: (B,) what the model and scheduler take: int64 t for VP (DDPM), float32
            ``c_noise = 0.25·ln σ`` for VE/EDM, float32 ``s·num_train_timesteps`` for flow. Flow
            timesteps are continuous: they are not on the scheduler's table, so look nothing up
            with them (``get_sigmas``); use :attr:`scheduler_sigmas`.
        sigmas: (B,) float32 VE σ = b/a of ``x = a·x0 + b·ε`` on every path (``inf`` at a
            zero-terminal-SNR VP step). On flow this is *not* the script's ``sigmas``.
        log_snr: (B,) float32 λ = −2·log σ.
        loss_weights: (B,) float32 importance weights to multiply the per-sample loss with
            (Kingma-Gao only), else ``None``.
        scheduler_sigmas: (B,) float32 noise level in the scheduler's own ``sigmas`` coordinate:
            flow s ∈ (0, 1) of ``(1 − s)·x0 + s·ε`` (FlowMatchEuler's ``sigmas``, SD3/Flux scripts'
            ``sigmas``), EDM σ, and on VP the VE σ (Euler's ``sigmas``; DDPM's coordinate is t).
    """

    timesteps: torch.Tensor
    sigmas: torch.Tensor
    log_snr: torch.Tensor
    loss_weights: torch.Tensor | None = None
    scheduler_sigmas: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.sigmas.shape[0]

    def __getitem__(self, index) -> "NoiseLevels":
        """The levels of a sub-batch, e.g. ``levels[:n]`` for the instance half of a DreamBooth batch."""
        pick = lambda t: None if t is None else t[index]  # noqa: E731
        return NoiseLevels(
            pick(self.timesteps), pick(self.sigmas), pick(self.log_snr), pick(self.loss_weights), pick(self.scheduler_sigmas)
        )

    def to(self, device) -> "NoiseLevels":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return NoiseLevels(
            move(self.timesteps), move(self.sigmas), move(self.log_snr), move(self.loss_weights), move(self.scheduler_sigmas)
        )


@dataclass(frozen=True)
class RunPlan:
    """How a run is laid out for its sampler (:meth:`TrainingTimestepSampler.plan_run`).

    Attributes:
        num_training_steps: the run's optimizer steps, or None when not known.
        warmup_steps: optimizer steps on the base density before π adapts (0 for a fixed density, and after a
            start that brought an adapted estimate; METHOD.md §5.2, §5.9).
        profile_forward_passes: the most forward passes (of one training batch, on each process) a ``"profile"``
            start may spend: :data:`~diffusers_infonoise.sampler.adaptive.PROFILE_SHARE` of the run's steps; None
            when the run's length is unknown or the sampler has no profile start.
    """

    num_training_steps: int | None
    warmup_steps: int
    profile_forward_passes: float | None


def default_prediction_type(noise_scheduler) -> str:
    """The loss parameterization a script most likely uses with ``noise_scheduler``
    (:meth:`~diffusers_infonoise.paths.NoisePath.default_prediction_type` of its path).

    VP: the scheduler's ``prediction_type``. Flow: ``"flow"`` (velocity). EDM: ``"sample"`` — the
    network is trained through the denoiser D; the EDM scheduler's ``prediction_type`` only picks
    the sign of ``c_out`` and is *not* a loss parameterization (METHOD.md §3, trap).
    """
    return path_class(noise_scheduler).default_prediction_type(noise_scheduler.config)


def default_loss_weighting(path: NoisePath, prediction_type: str) -> str:
    """The loss weighting a user of ``path`` trains with by default (METHOD.md §4,
    :meth:`~diffusers_infonoise.paths.NoisePath.default_loss_weighting`): the EDM recipe (``"edm"``,
    λ(σ) on the denoiser error) for the x0/D loss on VE paths, an unweighted loss (``"none"``)
    everywhere else (an unweighted F loss on VE already *is* the EDM weighting)."""
    return path.default_loss_weighting(prediction_type)


def _check_path_prediction(path: NoisePath, prediction_type: str) -> None:
    if prediction_type not in path.prediction_types:
        raise ValueError(
            f"prediction_type: {prediction_type!r} is not a loss parameterization of the {path.kind} path; "
            f"accepted: {', '.join(path.prediction_types)}"
        )


class TrainingTimestepSampler:
    """Common interface: draws, noising, loss conversion, densities and state (see module docstring).

    Every sampler answers the same calls, so that a training loop asks no sampler what it can do: a fixed
    density learns nothing, and its hooks say so (:attr:`learns_schedule` False, :meth:`plan_run` without a
    warm-up, :meth:`metrics` empty, :meth:`save_to_scheduler` stores nothing, :meth:`record_start` records nothing).

    Args:
        path: the corruption path (:func:`~diffusers_infonoise.paths.path_from_scheduler`).
        prediction_type: what the per-sample loss given to :meth:`update` measures
            (:data:`~diffusers_infonoise.weighting.PREDICTION_TYPES`).
        loss_weighting: the weight the user's loss applies in its own parameterization
            (``"none"``, ``"edm"``, ``"min_snr"``, ``"sigma_sqrt"``, ``"cosmap"`` or a callable of VE σ).
            ``None`` (default): :func:`default_loss_weighting` (``"edm"`` for the D loss on VE paths).
        snr_gamma: γ of Min-SNR (``loss_weighting="min_snr"`` only).
    """

    name = "fixed"
    #: whether the sampler learns a schedule that is stored with the model (:meth:`save_to_scheduler`) and that a
    #: start can set (METHOD.md §5.9): InfoNoise only; Kingma & Gao adapt a proposal that keeps the objective
    learns_schedule = False

    def __init__(self, path: NoisePath, *, prediction_type: str, loss_weighting=None, snr_gamma: float | None = None):
        if not isinstance(path, NoisePath):
            raise TypeError(f"path: expected a NoisePath, got {type(path).__name__}")
        self.path = path
        validate_prediction_type(prediction_type)
        _check_path_prediction(path, prediction_type)
        if loss_weighting is None:
            loss_weighting = default_loss_weighting(path, prediction_type)
        if isinstance(loss_weighting, str) and loss_weighting in LOSS_WEIGHTINGS and loss_weighting not in path.loss_weightings:
            defined = [kind for kind, cls in PATH_CLASSES.items() if loss_weighting in cls.loss_weightings]
            raise ValueError(
                f"loss_weighting: {loss_weighting!r} is defined on the {' / '.join(defined)} path, this is a {path.kind} "
                f"path; accepted here: {', '.join(path.loss_weightings)}"
            )
        #: the training loss the sampler is told (METHOD.md §3-4): its ``loss_weighting``, ``snr_gamma``, and the weights
        #: ``objective.loss_weight(σ, sigma_data=sampler.sigma_data)`` (u on the loss) and ``x0_loss_weight`` (w, METHOD.md §4)
        self.objective = Objective(prediction_type, loss_weighting, snr_gamma)
        #: the warm-up and floor density of an adaptive sampler (per unit log σ, VE σ); None for a fixed density
        self.base: densities.Density | None = None
        #: how the run started (METHOD.md §5.9), for samplers that record it (:meth:`record_start`)
        self.start_record: dict | None = None
        self.sigma_data = path.data_scale or 0.5
        self._check_finite_loss_weight()
        self.optimizer_step = 0
        self.seed = 0
        self.num_draws = 0  # draws from the sampler's own stream, on every rank alike
        self._cell_cache: tuple[int, torch.Tensor] | None = None
        self._step_mismatch_warned = False
        self.num_updates = 0  # refreshes of π (adaptive samplers)
        self.last_refresh: dict = {}  # what the last refresh of π did (adaptive samplers)

    @property
    def prediction_type(self) -> str:
        """What the per-sample loss given to :meth:`update` measures (``objective.prediction_type``)."""
        return self.objective.prediction_type

    def _check_finite_loss_weight(self) -> None:
        """Refuse a loss weighting that is infinite somewhere on the path (e.g. EDM's λ(σ) on an ε loss at
        the σ = inf step of a zero-terminal-SNR scheduler): the loss would be inf there, every time."""
        if self.path.is_discrete:
            sig = self.path.sigmas_table
        else:
            lo, hi = self.path.log_sigma_range
            sig = torch.exp(torch.linspace(lo, hi, 257, dtype=torch.float64))
        u = self.objective.loss_weight(sig, sigma_data=self.sigma_data)
        bad = ~torch.isfinite(u)
        if bool(bad.any()):
            where = float(sig[bad][0])
            at = "the zero-terminal-SNR step (sigma = inf, rescale_betas_zero_snr=True)" if math.isinf(where) else f"VE sigma {where:.4g}"
            weighting = self.objective.loss_weighting
            name = weighting if isinstance(weighting, str) else "the callable"
            raise ValueError(
                f"loss_weighting: {name!r} on a {self.prediction_type!r} loss is infinite at {at} of this "
                "scheduler, so the loss would be infinite there; use 'none', 'min_snr' (+ snr_gamma) or a "
                "scheduler without that step"
            )

    # -- the random stream -------------------------------------------------------------------
    def manual_seed(self, seed: int) -> "TrainingTimestepSampler":
        """Seed the sampler's own random stream and restart it; returns the sampler.

        Without a ``generator``, :meth:`sample` draws its k-th batch on process r (the
        ``torch.distributed`` rank, 0 without a process group) from a generator seeded by
        ``(seed, r, k)``: each rank draws other levels, and the stream is independent of every other
        random state in the script (re-seeding the global RNG or the script's generator for sample
        images repeats nothing). Its whole state is ``(seed, num_draws)``, the same on every rank,
        so a checkpoint of any one rank resumes every rank exactly.

        Raises:
            ValueError: ``seed`` is not an int >= 0.
        """
        if as_count(seed) is None or seed < 0:
            raise ValueError(f"seed: must be an int >= 0, got {seed!r}")
        self.seed, self.num_draws = int(seed), 0
        return self

    def _stream_generator(self) -> torch.Generator:
        rank = torch.distributed.get_rank() if torch.distributed.is_available() and torch.distributed.is_initialized() else 0
        state = np.random.SeedSequence([self.seed, rank, self.num_draws]).generate_state(2, np.uint32)
        self.num_draws += 1
        return torch.Generator().manual_seed((int(state[0]) << 31) ^ int(state[1]))

    # -- the density ------------------------------------------------------------------------
    @property
    def density(self) -> densities.Density:
        """The current training density of log σ (VE σ), truncated to the path's range."""
        raise NotImplementedError

    def _density_version(self) -> int:
        return 0

    def _log_prob(self, sigmas: torch.Tensor) -> torch.Tensor:
        """log π per unit log σ at VE ``sigmas`` (any shape; float64; ``-inf`` outside the range)."""
        return self.density.log_prob(torch.log(torch.as_tensor(sigmas, dtype=torch.float64).cpu()))

    def timestep_probabilities(self) -> torch.Tensor:
        """VP paths: (num_train_timesteps,) float64 probability of each integer t, summing to 1.

        The probability of step t is the π-mass of t's cell on the log-σ axis (METHOD.md §5.8).

        Raises:
            ValueError: on a continuous path (VE or flow), which has no integer timesteps.
        """
        if not self.path.is_discrete:
            raise ValueError(f"timestep_probabilities: only defined for integer-timestep (vp) paths, this path is {self.path.kind!r}")
        version = self._density_version()
        if self._cell_cache is None or self._cell_cache[0] != version:
            masses = densities.bin_masses(self.density, self.path.cell_edges())
            self._cell_cache = (version, masses / masses.sum())
        return self._cell_cache[1]

    # -- drawing ----------------------------------------------------------------------------
    def sample(self, batch_size: int, *, device=None, generator: torch.Generator | None = None) -> NoiseLevels:
        """Draw ``batch_size`` noise levels from the current density.

        Args:
            batch_size: number of levels (0 allowed).
            device: where the returned tensors live (default: the generator's device, else CPU).
            generator: a ``torch.Generator`` of your own (its device draws the uniforms); default: the
                sampler's per-rank stream (:meth:`manual_seed`), which is what a training loop wants.

        Returns:
            :class:`NoiseLevels` with (batch_size,) tensors.

        Raises:
            ValueError: negative or non-integer ``batch_size`` (a Python or numpy integer is taken; a bool is not).
        """
        if as_count(batch_size) is None or batch_size < 0:
            raise ValueError(f"batch_size: must be a non-negative int, got {batch_size!r}")
        batch_size = int(batch_size)  # a numpy integer (len of an array's rows) as the count it holds
        if generator is None:
            generator = self._stream_generator()
        gen_device = generator.device
        out_device = torch.device(device) if device is not None else gen_device
        u = torch.rand(batch_size, generator=generator, dtype=torch.float64, device=gen_device).cpu()
        if self.path.is_discrete:
            cum = torch.cumsum(self.timestep_probabilities(), 0)
            t = densities.searchsorted(cum, u * cum[-1], right=True).clamp(max=self.path.num_train_timesteps - 1)
            sigmas = self.path.sigmas_table[t]
            levels = self._levels_at(sigmas, timesteps=t, device=out_device)
        else:
            sigmas = torch.exp(self.density.icdf(u))
            levels = self._levels_at(sigmas, device=out_device)
        levels.loss_weights = self._importance_weights(sigmas, levels.timesteps.cpu(), levels)
        return levels

    def _levels_at(self, sigmas: torch.Tensor, *, timesteps: torch.Tensor | None = None, device=None) -> NoiseLevels:
        """The :class:`NoiseLevels` of given (B,) VE σ on this sampler's path, as :meth:`sample` returns them
        (timesteps, σ, λ and the scheduler's own coordinate; no importance weights). On a VP path pass the
        integer ``timesteps`` of the σ (``path.sigmas_table[timesteps]``); elsewhere they are computed."""
        sigmas = torch.as_tensor(sigmas, dtype=torch.float64).cpu()
        if timesteps is None:
            if self.path.is_discrete:
                raise ValueError("timesteps: a VP path takes the integer timesteps of the sigmas (sigmas_table[t])")
            timesteps = self.path.sigma_to_timesteps(sigmas).to(torch.float32)
        else:
            timesteps = torch.as_tensor(timesteps).to(torch.int64 if self.path.is_discrete else torch.float32)
        out = torch.device("cpu") if device is None else torch.device(device)
        return NoiseLevels(
            timesteps=timesteps.to(out),
            sigmas=sigmas.to(torch.float32).to(out),
            log_snr=(-2.0 * torch.log(sigmas)).to(torch.float32).to(out),
            scheduler_sigmas=self.path.scheduler_sigmas(sigmas).to(torch.float32).to(out),
        )

    def _importance_weights(self, sigmas: torch.Tensor, timesteps: torch.Tensor, levels: NoiseLevels):
        """(B,) importance weights from the CPU draws ``sigmas``/``timesteps``, on ``levels``' device; or None."""
        return None

    def add_noise(self, x0: torch.Tensor, noise: torch.Tensor, levels: NoiseLevels) -> torch.Tensor:
        """Noisy sample ``a·x0 + b·noise`` for (B, ...) ``x0`` and ``noise`` at ``levels``; x0's dtype.

        Correct on all three paths without grid lookups: EDM ``x0 + σ·ε``, VP
        ``sqrt(ᾱ_t)·x0 + sqrt(1 − ᾱ_t)·ε``, flow ``(1 − s)·x0 + s·ε``.

        Raises:
            ValueError: when shapes of ``x0``, ``noise`` and ``levels`` disagree.
        """
        if x0.shape != noise.shape:
            raise ValueError(f"noise: shape {tuple(noise.shape)} differs from x0's {tuple(x0.shape)}")
        if x0.shape[0] != len(levels):
            raise ValueError(f"levels: {len(levels)} levels for a batch of {x0.shape[0]} samples")
        return self.path.exact_add_noise(x0, noise, levels.timesteps, levels.sigmas)

    # -- statistics -------------------------------------------------------------------------
    def _validated_errors(self, levels: NoiseLevels, per_sample_loss: torch.Tensor) -> torch.Tensor:
        """Check a (B,) loss against ``levels`` and convert it to the x0-space error (float64)."""
        if not isinstance(levels, NoiseLevels):
            raise TypeError(f"levels: expected the NoiseLevels returned by sample(), got {type(levels).__name__}")
        if not torch.is_tensor(per_sample_loss) or not per_sample_loss.is_floating_point():
            raise TypeError("per_sample_loss: expected a floating-point tensor of shape (batch_size,)")
        if per_sample_loss.ndim != 1:
            raise ValueError(
                f"per_sample_loss: expected shape (batch_size,), got {tuple(per_sample_loss.shape)}; "
                "reduce over all but the batch dimension first (e.g. loss.mean(dim=list(range(1, loss.ndim))))"
            )
        if per_sample_loss.shape[0] != len(levels):
            raise ValueError(f"per_sample_loss: {per_sample_loss.shape[0]} losses for {len(levels)} levels")
        loss = per_sample_loss.detach()
        dtype = torch.float32 if loss.device.type == "mps" else torch.float64  # MPS has no float64
        loss = loss.to(dtype)
        if loss.device.type == "cpu":
            if bool((loss < 0).any()):
                raise ValueError("per_sample_loss: squared errors must be >= 0, got a negative value")
        else:
            # reading the check back would stall the device every step: negative losses become
            # non-finite here (left out and counted); see update()
            loss = torch.where(loss < 0, torch.full_like(loss, math.nan), loss)
        sigmas = levels.sigmas.detach().to(loss.device, dtype)
        factor = x0_error_factor(self.prediction_type, sigmas, sigma_data=self.sigma_data).to(dtype)
        with torch.no_grad():
            # 0·inf (an exact ε error at σ = inf) must count as non-finite, not as a value
            return torch.where(torch.isfinite(factor), factor * loss, torch.full_like(loss, math.inf))

    def update(self, levels: NoiseLevels, per_sample_loss: torch.Tensor) -> None:
        """Record the (B,) unweighted per-sample loss in the model's own parameterization.

        Fixed-density samplers only validate it. Raises ``ValueError``/``TypeError`` on a loss of
        the wrong shape or not matching ``levels``, and on a negative CPU loss. NaN/inf losses are
        ignored (adaptive samplers count them in ``num_nonfinite``). On an accelerator nothing is read
        back to the host: the statistics stay on the loss's device until a refresh, and a negative
        loss there counts as non-finite instead of raising (a check would synchronise every step).
        """
        self._validated_errors(levels, per_sample_loss)

    def step(self, global_step: int | None = None) -> None:
        """Call once per optimizer step (not per micro-batch).

        ``global_step``: the script's count of optimizer steps after this one (diffusers' ``global_step``
        after ``global_step += 1``). When given, a sampler whose own count differs warns once: it was
        resumed without its state (register it with ``accelerator.register_for_checkpointing`` before
        ``load_state``) or is stepped per micro-batch.

        Raises:
            ValueError: ``global_step`` neither None nor an int >= 1 (Python's or numpy's), before the count moves.
        """
        _check_global_step_arg(global_step)
        self.optimizer_step += 1
        self._check_global_step(global_step)

    def _check_global_step(self, global_step: int | None) -> None:
        if global_step is None or self._step_mismatch_warned or int(global_step) == self.optimizer_step:
            return
        import warnings

        self._step_mismatch_warned = True
        warnings.warn(
            f"noise sampler: it counts {self.optimizer_step} optimizer steps, the run is at global_step {int(global_step)}. "
            "A resumed run without the sampler's state restarts its warm-up and replays its draws: register it with "
            "accelerator.register_for_checkpointing(sampler) before accelerator.load_state (or call step() once per "
            "optimizer step, inside `if accelerator.sync_gradients:`)",
            UserWarning,
            stacklevel=3,
        )

    # -- the run and its start (hooks: a fixed density has no warm-up, no start, nothing to store) ---
    @property
    def is_adapted(self) -> bool:
        """True once a learned density replaced the base one (never, for a fixed density)."""
        return False

    def plan_run(self, num_training_steps: int | None = None, start=None) -> RunPlan:
        """Settle the run's warm-up and the profile start's budget from the run's length and its start, in one call
        before the start and a resume (adaptive samplers: :meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.plan_run`).
        A fixed density has neither: its plan has no warm-up and no profile budget."""
        return RunPlan(num_training_steps, 0, None)

    def record_start(self, record: dict) -> None:
        """Record how the run started (METHOD.md §5.9); a fixed density has no start to record."""

    def load_schedule(self, payload: dict, *, source: str | None = None) -> None:
        """Start from a stored schedule (InfoNoise only).

        Raises:
            ValueError: this sampler learns no schedule (a fixed density, or Kingma & Gao).
        """
        raise ValueError(
            f"payload: the {self.name!r} sampler learns no schedule to start from; a stored schedule starts an InfoNoise sampler"
        )

    def start_from_model(self, loss_fn, batches, *, samples_per_bin: int | str = "auto", progress: bool = True) -> dict:
        """The ``"profile"`` start: measure the model before step 1 (InfoNoise only).

        Raises:
            ValueError: this sampler learns no schedule (a fixed density, or Kingma & Gao).
        """
        raise ValueError(
            f"loss_fn: the {self.name!r} sampler learns no schedule; a profile start measures a model for an InfoNoise sampler"
        )

    def metrics(self, prefix: str = "infonoise/") -> dict[str, float]:
        """The sampler's figures as plain floats for a tracker (``accelerator.log(sampler.metrics(), step=...)``);
        a fixed density has none."""
        return {}

    def save_to_scheduler(self, noise_scheduler) -> bool:
        """Store what the sampler learned in ``noise_scheduler``'s config; returns whether a schedule was stored.

        A fixed density learned nothing: a schedule the config carries from a pretrained model, which would no
        longer describe this training, is dropped (:func:`~diffusers_infonoise.schedule_io.clear_schedule`)."""
        clear_schedule(noise_scheduler)
        return False

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Tensors, numbers, strings and None for an exact resume; written without pickle by
        :func:`~diffusers_infonoise.schedule_io.save_sampler_state` (safetensors + JSON)."""
        return {
            "name": self.name,
            "optimizer_step": self.optimizer_step,
            "seed": self.seed,
            "num_draws": self.num_draws,
            "resume_record": self._resume_record(),
        }

    def _resume_record(self) -> dict:
        """The run's settings that a resume compares (:data:`RESUME_SETTINGS`), as plain values: the path, its σ
        range, ``sigma_data`` and the prediction type (adaptive samplers add the grid, the base density and their
        settings as given)."""
        return {
            "diffusion": self.path.kind,
            "sigma_min": float(self.path.sigma_min),
            "sigma_max": float(self.path.sigma_max),
            "sigma_data": float(self.sigma_data),
            "prediction_type": self.prediction_type,
        }

    def _check_resume_record(self, state: dict) -> list[str]:
        """Compare a state's :meth:`resume_record` with this sampler's, by :data:`RESUME_SETTINGS`; returns the other
        settings that differ (``"--infonoise_gate: 'auto' -> 0.3"``), which a resume takes from this run and logs in
        one warning. States written before the record have none: nothing is compared.

        Raises:
            ValueError: a setting that changes what the stored state means differs, naming every such option.
        """
        saved, mine = state.get("resume_record"), self._resume_record()
        if not isinstance(saved, dict):
            return []
        differ = {k: f"{saved[k]!r} -> {mine[k]!r}" for k in mine if k in saved and saved[k] != mine[k]}
        refused = [f"{RESUME_SETTINGS.get(k, k)}: {d}" for k, d in differ.items() if k in RESUME_SETTINGS]
        if refused:
            raise ValueError(
                f"state_dict: saved by a run whose state means something else here (checkpoint -> this run's): {'; '.join(refused)}; "
                "a resume takes these as the run was started"
            )
        return [f"--infonoise_{k}: {d}" for k, d in differ.items()]

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output; also what ``accelerator.register_for_checkpointing(sampler)``
        calls on ``load_state``. Settings that differ from the checkpoint's run (``_check_resume_record``) are
        named in a logged warning; this run's are used.

        Raises:
            ValueError: a state of another sampler, of a run whose state means something else here (path, σ range,
                ``sigma_data``, prediction type, grid, base density), or a step, seed or draw count that is not an int >= 0.
        """
        if state.get("name") != self.name:
            raise ValueError(f"state_dict: saved by a {state.get('name')!r} sampler, this is a {self.name!r} sampler")
        self._warn_changed_settings(self._check_resume_record(state), state)
        self._load_base_state(state)

    def _warn_changed_settings(self, changed: list[str], state: dict) -> None:
        if changed:
            logger.warning(
                f"noise sampler: resumed at step {state.get('optimizer_step')} with settings that differ from the checkpoint's run "
                f"(checkpoint -> this run's): {'; '.join(changed)}; the schedule continues under this run's, not the one the "
                "run would have reached (give the run's own options to continue it exactly)"
            )

    def _load_base_state(self, state: dict) -> None:
        for key in ("optimizer_step", "seed", "num_draws"):
            value = state.get(key, 0 if key != "optimizer_step" else None)  # states before the own stream lack two
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"state_dict[{key!r}]: expected an int >= 0, got {value!r}")
        self.optimizer_step = state["optimizer_step"]
        self.seed, self.num_draws = int(state.get("seed", 0)), int(state.get("num_draws", 0))

    def describe(self) -> dict:
        """Plain-JSON summary (name, path, parameterization, density) for logs and model cards."""
        return {
            "name": self.name,
            "path": self.path.config(),
            **self.objective.record(),
        }
