"""What the adaptive samplers share (METHOD.md §5.2-§5.4): their settings (:class:`~.settings.AdaptiveSettings`),
the binned estimator, the run's plan (warm-up and profile budget, :meth:`_AdaptiveSampler.plan_run`), the periodic
refresh across processes, the data statistics and the exact-resume state."""

from __future__ import annotations

import math
import warnings

import torch

from .. import densities
from ..data_statistics import DataStatistics
from ..estimator import ProfileEstimator
from ..logs import get_logger
from ..paths import NoisePath
from ..schedule_io import PI_MOVES_KEPT, ScheduleError, check_pi_moves
from .base import NoiseLevels, RunPlan, TrainingTimestepSampler, _check_global_step_arg
from .fixed import _resolve_base
from .settings import MAX_MEMORY_STEPS, MEMORY_FRACTION, AdaptiveSettings, _is_int, _plain_number, _real, default_mmse_cap, unread_by

logger = get_logger(__name__)

__all__ = [
    "PROFILE_SHARE",
]

#: the most of a run's training compute a "profile" start spends by default. A training step counts as one forward
#: pass of its batch, not three (forward and backward): a profile pass measured 0.27-0.74 of a step's wall time on
#: the tiny stand-ins and the 16x16 UNet (benchmarks/results/profile_cost.json), not the 1/3 that three would assume
PROFILE_SHARE = 0.05

#: the starts (METHOD.md §5.9) that bring an adapted estimate when given by name to :meth:`_AdaptiveSampler.plan_run`
_ESTIMATE_STARTS = {"base": False, "stored": True, "profile": True}


#: below this share of π on bins that hold a measured m̂, π is mostly extrapolation: warned about
MEASURED_MASS_WARNING = 0.5

#: the total variation a stored π may differ from the one its own m̂ and settings give (float round-off)
PI_TOLERANCE = 1e-6


def estimator_for(path: NoisePath, settings: AdaptiveSettings) -> ProfileEstimator:
    """The empty estimator of an adaptive sampler with ``settings`` on ``path``: ``num_bins`` bins spanning the path's
    log-σ range (VE σ), a zero-terminal-SNR VP step (σ = inf) clamped into the top bin (METHOD.md §5.1)."""
    lo, hi = path.log_sigma_range
    edges = torch.linspace(lo, hi, settings.num_bins + 1, dtype=torch.float64)
    estimator = ProfileEstimator(edges, **settings.estimator_keywords())
    estimator.top_includes_inf = bool(path.is_discrete and not math.isfinite(float(path.sigmas_table[-1])))
    return estimator


def apply_data_statistics(estimator: ProfileEstimator, settings: AdaptiveSettings, variance: float | None, min_gap: float | None):
    """Apply the data's statistics to ``estimator`` (METHOD.md §5.4-5.5): V becomes the m̂ cap where ``settings``' is
    ``"auto"``, the smallest gap between values the value grid of the gate; None leaves either as it is."""
    if variance is not None and variance > 0 and getattr(settings, "mmse_cap", None) == "auto":  # none without a cap
        estimator.mmse_cap = variance
    if min_gap is not None:
        estimator.set_data_grid(min_gap)


class _AdaptiveSampler(TrainingTimestepSampler):
    """Shared machinery: a binned estimator, warm-up in optimizer steps, periodic refresh, floor,
    and the statistics of the data it sees (for the m̂ cap and the value-grid gate).

    Args:
        path, prediction_type, loss_weighting, snr_gamma: as :class:`~.base.TrainingTimestepSampler`.
        **settings: the fields of :attr:`_settings_class` (``num_bins``, ``warmup_steps``, ...); one with an m̂ cap
            not given one takes :func:`~.settings.default_mmse_cap` (also for ``mmse_cap="default"``).

    Raises:
        TypeError: a keyword that is no setting (the message lists the accepted ones).
        ValueError: an invalid setting, naming the argument and the accepted values; a setting of InfoNoise's that
            this sampler does not read (:meth:`~.settings.AdaptiveSettings.check_keywords`).
    """

    #: the settings this sampler reads, and accepts: those of InfoNoise it has not are refused by name, and the
    #: training scripts warn of their options (:func:`~diffusers_infonoise.sampler.unread_settings`)
    _settings_class: type[AdaptiveSettings] = AdaptiveSettings
    #: the sampler in words, in the refusal of a setting it does not read
    _title = "this sampler"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        #: the settings of InfoNoise's this sampler does not read (nor accept), from :attr:`_settings_class`
        cls._unread_settings = unread_by(cls._settings_class)

    def __init__(self, path: NoisePath, *, prediction_type: str, loss_weighting=None, snr_gamma=None, **settings):
        super().__init__(path, prediction_type=prediction_type, loss_weighting=loss_weighting, snr_gamma=snr_gamma)
        self._settings_class.check_keywords(settings, type(self).__name__, error=TypeError, reader=self._title)
        if "mmse_cap" in self._settings_class.names() and settings.get("mmse_cap", "default") == "default":
            settings["mmse_cap"] = default_mmse_cap(prediction_type)
        #: the settings as they stand (replaced when the run fixes one: its length, a skipped warm-up, the "auto" cap)
        self.settings = self._settings_class(**settings)
        self._given_settings = self.settings  # as given, what a resume compares (resume_record)
        self.estimator = estimator_for(path, self.settings)
        edges = self.estimator.edges
        self.base, self.base_description = _resolve_base(path, self.settings.base)
        self.base_masses = densities.bin_masses(self.base, edges)
        self.base_masses = self.base_masses / self.base_masses.sum()
        self.samples_trained = 0.0  # samples (all processes) folded in by the refreshes of training steps
        self.warmup_steps = self.settings.resolved_warmup_steps()
        self._warned: set[str] = set()
        self._warmup_checked = False  # the short-run check of the first step() (_check_warmup_fits)
        self._check_explicit_warmup()
        self.probs: torch.Tensor | None = None  # (K,) learned bin masses; None while on the base
        self.data = DataStatistics()  # what add_noise/observe_data saw of x0 (cap V, value grid)
        self.num_observed = 0  # batches given to observe_data (add_noise) in this process: did a loss show its data?
        self.value_tally = None  # a ValueTally while a profile start measures (its per-element bound), else None
        #: π's last changes at refreshes since the run's start (at most :data:`PI_MOVES_KEPT`, oldest first):
        #: ``{"steps": [...], "tv": [...]}``, the optimizer step of each and its total variation from the π in use before
        #: it (the base density before the first, after a warm-up on it); a start (a π set before step 1: stored,
        #: profile) is no move and begins the history anew. Stored schedules carry it, so that a fit can tell a settled π
        self.pi_moves: dict = {"steps": [], "tv": []}

    @property
    def _auto_cap(self) -> bool:
        """Whether the m̂ cap is ``"auto"``: measured on the data (False for a sampler without a cap)."""
        return getattr(self.settings, "mmse_cap", None) == "auto"

    # -- the run: its length, its start, the warm-up and the profile budget ---------------------
    def plan_run(self, num_training_steps: int | None = None, start=None) -> RunPlan:
        """Settle the run's warm-up and the profile start's budget from the run's length and its start, in one place
        (METHOD.md §5.2, §5.9). The training loop calls it once, before the start and a resume;
        :meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.load_schedule` and
        :meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.start_from_model` call it with their own start,
        so a loop of one's own that builds the sampler with ``num_training_steps`` needs nothing else.

        Args:
            num_training_steps: the run's optimizer steps (None: as known so far). While π is not adapted, an
                ``"auto"`` warm-up is sized to it (:func:`~.settings.default_warmup_steps`); the profile budget is
                :data:`PROFILE_SHARE` of it.
            start: the run's start, a :class:`~diffusers_infonoise.SamplerStart` or its choice (``"base"``,
                ``"stored"``, ``"profile"``); None for a resumed run (its state brings its own warm-up) or a start not
                known yet. One that brings an adapted estimate (a profile, or a stored schedule saved after its own
                warm-up) skips an automatic warm-up (0 is what is saved); an explicit ``warmup_steps`` is honoured by
                every start.

        Warns (``UserWarning``, once) when an explicit warm-up outlasts the run: every start honours it. A run shorter
        than its automatic warm-up is warned about at its first :meth:`step`, once the start (or a resumed state) is
        known.

        Returns:
            the :class:`~.base.RunPlan`.

        Raises:
            ValueError: ``num_training_steps`` is not an int >= 1, or ``start`` is no start.
        """
        if num_training_steps is not None:
            num_training_steps = _plain_number(num_training_steps)
            if not (_is_int(num_training_steps) and num_training_steps >= 1):
                raise ValueError(f"num_training_steps: must be an int >= 1, got {num_training_steps!r}")
            self.settings = self.settings.replace(num_training_steps=num_training_steps)
            if not self.is_adapted:
                self.warmup_steps = self.settings.resolved_warmup_steps()
                self._check_explicit_warmup()
        if isinstance(start, str):
            if start not in _ESTIMATE_STARTS:
                raise ValueError(f"start: accepted choices are {', '.join(_ESTIMATE_STARTS)}, got {start!r}")
            brings_estimate = _ESTIMATE_STARTS[start]
        else:
            brings_estimate = start is not None and start.brings_estimate
        if brings_estimate and self.settings.warmup_steps == "auto":
            self.settings = self.settings.replace(warmup_steps=0)
            self.warmup_steps = 0
        return self._run_plan

    @property
    def _run_plan(self) -> RunPlan:
        """The run as planned so far (:meth:`plan_run`)."""
        n = self.settings.num_training_steps
        return RunPlan(n, self.warmup_steps, None if n is None else PROFILE_SHARE * n)

    def _memory_steps(self) -> float:
        """H, the memory of the estimate in optimizer steps (docs/METHOD.md §5.10): an explicit ``memory``, or
        ``"auto"``: an eighth of ``num_training_steps``, raised to the steps that bring ``K·min_count`` samples at
        the rate measured so far (samples a step, all processes), kept between ``refresh_every`` and 500 steps
        (500 when the run's length is unknown: β = 0.9 a refresh every 50 steps, the memory before 0.3)."""
        if self.settings.memory != "auto":
            return float(self.settings.memory)
        steps = self.settings.num_training_steps
        horizon = float(MAX_MEMORY_STEPS) if steps is None else steps * MEMORY_FRACTION
        if self.samples_trained > 0 and self.optimizer_step > 0:
            rate = self.samples_trained / self.optimizer_step
            horizon = max(horizon, self.estimator.num_bins * self.estimator.min_count / rate)
        return float(min(MAX_MEMORY_STEPS, max(self.settings.refresh_every, horizon)))

    def _check_explicit_warmup(self) -> None:
        """An explicit warm-up that outlasts the run, warned about at once: every start honours it."""
        n = self.settings.num_training_steps
        if self.settings.warmup_steps != "auto" and n is not None and self.warmup_steps >= n:
            self._warn_short(n)

    def _check_warmup_fits(self) -> None:
        """At the first :meth:`step` of this process, when the start (or a resumed state) is known: a run that
        ends before its warm-up never leaves the base density (warned here, when the start is known, not before it)."""
        self._warmup_checked = True
        n = self.settings.num_training_steps
        if n is not None and not self.is_adapted and self.warmup_steps >= n:
            self._warn_short(n)

    def _warn_short(self, num_training_steps: int) -> None:
        fix = (
            f"the automatic warm-up is a tenth of the run but at least one refresh (refresh_every="
            f"{self.settings.refresh_every}): pass a smaller refresh_every or warmup_steps"
            if self.settings.warmup_steps == "auto"
            else "pass warmup_steps='auto' or a smaller one"
        )
        self._warn_once(
            "short",
            f"noise sampler: the run has {num_training_steps} optimizer steps and the warm-up "
            f"{self.warmup_steps}; pi never leaves the base density ({fix})",
        )

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, UserWarning, stacklevel=3)

    # -- the data the sampler sees -----------------------------------------------------------
    def observe_data(self, x0: torch.Tensor) -> None:
        """Record statistics of a (B, ...) batch of clean training data: its per-dimension variance
        (V of the ``"auto"`` m̂ cap, METHOD.md §5.4) and the smallest gap between its values (the
        ``"auto"`` gate, §5.5); :class:`~diffusers_infonoise.data_statistics.DataStatistics`.
        :meth:`add_noise` calls it, so a loop that noises through the sampler needs nothing else; a loop
        that noises by itself calls this once per batch. The statistics stay on ``x0``'s device (no
        synchronisation) and are reduced over processes at refreshes, until about 4096 samples are seen.

        Raises:
            ValueError: ``x0`` is not a floating-point tensor with a batch dimension.
        """
        self.data.observe(x0)
        if self.value_tally is not None:
            self.value_tally.observe(x0)
        self.num_observed += 1

    def _resolve_data_statistics(self) -> None:
        """At a refresh (every rank at the same steps): resolve the data statistics and apply them to
        the m̂ cap (when ``"auto"``) and the value-grid gate; frozen once the warm-up is over and data was
        seen (data seen at any time reaches them, also after a start that skipped the warm-up)."""
        if self.data.frozen:
            return
        warmed_up = self.optimizer_step >= self.warmup_steps
        self.data.resolve(freeze=warmed_up)
        self._apply_data_statistics()
        # at step 0 (a start) the loop has not shown its data yet: not warned about before it could
        if warmed_up and self.optimizer_step > 0 and self.data.variance is None and self._auto_cap:
            self._warn_once(
                "no_data",
                "noise sampler: mmse_cap='auto' (the default for epsilon and v losses) saw no "
                "training data: noise through sampler.add_noise(x0, ...) or call "
                "sampler.observe_data(x0) each batch; without the cap an epsilon-model's error "
                "sends most draws to pure noise (METHOD.md 5.4)",
            )

    def _set_provisional_data(self, variance: float | None, min_gap: float | None) -> None:
        """Data statistics from outside this run's :meth:`observe_data` (a stored schedule's, or the batches a
        profile start measured on when its loss showed none): V and the value gap, each where this run has none
        yet, applied to the m̂ cap and the gate until this run's own data replaces them at a refresh."""
        if min_gap is not None and self.data.min_gap is None:
            self.data.min_gap = float(min_gap)
        if variance is not None and self.data.variance is None:
            self.data.variance = float(variance)
        self._apply_data_statistics()

    def _apply_data_statistics(self) -> None:
        apply_data_statistics(self.estimator, self.settings, self.data.variance, self.data.min_gap)
        if self.data.variance is not None and self.data.variance > 0 and self._auto_cap and self.data.frozen:
            self.settings = self.settings.replace(mmse_cap=self.data.variance)

    def add_noise(self, x0, noise, levels):
        self.observe_data(x0)
        return super().add_noise(x0, noise, levels)

    @property
    def is_adapted(self) -> bool:
        """True once a learned density replaced the base one."""
        return self.probs is not None

    @property
    def density(self):
        if self.probs is None:
            return self.base
        return densities.Piecewise(self.estimator.edges, self.probs)

    def _density_version(self):
        return self.num_updates

    def _statistic(self, levels: NoiseLevels, errors: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _build_probs(self) -> torch.Tensor:
        """(K,) bin masses of the new π, floor included, from the current estimate."""
        raise NotImplementedError

    def update(self, levels, per_sample_loss):
        errors = self._validated_errors(levels, per_sample_loss)
        if errors.numel():
            self.estimator.accumulate(torch.log(levels.sigmas.detach().to(errors.device, errors.dtype)), self._statistic(levels, errors))

    @property
    def _num_nonfinite(self) -> int:
        """How many per-sample losses were NaN/inf and left out of the statistics (this process)."""
        return self.estimator.num_nonfinite + int(self.estimator._nonfinite_open)  # reads the device count back

    @property
    def _num_outside(self) -> int:
        """How many noise levels given to :meth:`update` lay outside the sampler's grid and were left out
        of the statistics (this process); levels drawn by :meth:`sample` never do."""
        return self.estimator.num_outside + int(self.estimator._outside_open)

    def step(self, global_step: int | None = None):
        """Count one optimizer step; refresh the estimate and the density when due (METHOD.md §5.3-4).

        ``global_step`` (optional): the script's step count after this step; a mismatch warns once
        (a resume without the sampler's state; :meth:`TrainingTimestepSampler.step`).

        Statistics are folded in every ``refresh_every`` steps from step 0; the density leaves the
        base at ``warmup_steps`` and is rebuilt at every refresh after that (each refresh is
        described in :attr:`last_refresh` and logged). Under data parallelism every process must
        call this at the same steps: at every step the statistics of all ranks since the last step
        are summed (a small ``all_reduce``, :meth:`ProfileEstimator.merge`), so every rank holds the
        same state, and :meth:`state_dict` (which makes no collective call) is complete on any rank.

        Warns (``UserWarning``, once each) when the run ends before its warm-up (checked at the first step,
        once the start is known), when the warm-up ended with no bin filled, when levels given to
        :meth:`update` lay outside the grid, and when most of π rests on bins never measured.
        """
        _check_global_step_arg(global_step)
        if not self._warmup_checked:
            self._check_warmup_fits()
        if self.optimizer_step == 0 and self.start_record is None:
            self.record_start({"choice": "base"})  # no start was applied before step 1: the warm-up on the base
        self.optimizer_step += 1
        self._check_global_step(global_step)
        due = self.optimizer_step % self.settings.refresh_every == 0 or self.optimizer_step == self.warmup_steps
        if not due:
            # the one place where every rank meets: what was recorded since the last step is summed here
            self.estimator.merge()
            self.data.merge()
            return
        self._resolve_data_statistics()
        self.estimator.refresh(self.optimizer_step, memory=self._memory_steps())
        self.samples_trained += self.estimator.last_window_count
        self._observe_window()
        if self.estimator.num_outside:
            lo, hi = (math.exp(float(e)) for e in (self.estimator.edges[0], self.estimator.edges[-1]))
            self._warn_once(
                "outside",
                f"noise sampler: {self.estimator.num_outside} noise levels given to update() lay "
                f"outside the sampler's grid (VE sigma {lo:.4g} to {hi:.4g}) and were left out of "
                "the statistics; give update() the levels that sample() drew",
            )
        if self.optimizer_step < self.warmup_steps:
            return
        if not self.estimator.is_ready:
            seen = int(self.estimator.total_counts.sum())
            self._warn_once(
                "unfilled",
                f"noise sampler: step {self.optimizer_step}, warm-up over, but only "
                f"{self.estimator.num_filled} of {self.estimator.num_bins} bins have "
                f"{self.estimator.min_count} samples yet ({seen} samples so far, kept: the bins "
                f"fill across refreshes; {self._num_nonfinite} non-finite losses left out); pi "
                "stays on the base density until two do. Small batches fill them later; fewer "
                "num_bins or a lower min_count sooner",
            )
            return
        self._adopt_estimate()

    def _observe_window(self) -> None:
        """Called after every refresh of training draws (not a start's measurement), with the refresh's window in
        ``estimator.last_window``: a target that reads more than m̂ (InfoNoise's ``target_space="reducible"``) folds it in."""

    def _adopt_estimate(self, what: str = "pi refreshed") -> None:
        """π from the current estimate (floor included), counted as an update, its move recorded (:attr:`pi_moves`)
        and described (:attr:`last_refresh`, with ``pi_moved``, that move's total variation)."""
        moved = self._set_probs(self._build_probs())
        self.num_updates += 1
        self.last_refresh = self._describe_refresh() | ({} if moved is None else {"pi_moved": moved})
        logger.info(
            f"noise sampler: step {self.optimizer_step}: {what}; "
            + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in self.last_refresh.items() if k != "step")
        )
        self._check_measured_mass()

    def _set_probs(self, probs: torch.Tensor) -> float | None:
        """Make ``probs`` (K,) π. From step 1 on (a refresh) the change is recorded in :attr:`pi_moves`, TV(π in use
        before, ``probs``) = ½·Σ|Δ| (the base density's bin masses before the first), and returned; before step 1 it
        is a start: the history begins anew and None is returned."""
        before = self.probs if self.probs is not None else self.base_masses
        self.probs = probs
        self._cell_cache = None
        if self.optimizer_step == 0:
            self.pi_moves = {"steps": [], "tv": []}
            return None
        moved = 0.5 * float((probs - before).abs().sum())
        self.pi_moves = {
            "steps": [*self.pi_moves["steps"], int(self.optimizer_step)][-PI_MOVES_KEPT:],
            "tv": [*self.pi_moves["tv"], moved][-PI_MOVES_KEPT:],
        }
        return moved

    def _check_measured_mass(self, stored: str | None = None) -> None:
        """Warn (``UserWarning``, once) when most of π lies on bins never measured: the
        interpolation and the extrapolated ends of METHOD.md §5.4 then decide π more than the data does.
        ``stored``: for a schedule just loaded, when it was saved (:func:`_stored_when`), named instead of this
        sampler's own step count, which is 0 before its run's first step whatever the schedule's age."""
        mass = self.last_refresh.get("measured_mass")
        if mass is None or mass >= MEASURED_MASS_WARNING:
            return
        k = self.estimator.num_bins
        measured = ~torch.isnan(self.estimator.m_hat)
        mode = int(torch.argmax(self.probs))
        where = "the grid's lower edge" if mode == 0 else "the grid's upper edge" if mode == k - 1 else "inside the grid"
        kind = "a measured bin" if bool(measured[mode]) else "a bin never measured"
        if stored is not None:
            who = f"the stored schedule ({stored})"
            fix = (
                "a run started from it measures the bins it draws from and refreshes pi from them; the run that saves such a "
                "schedule measures more bins with more samples before pi moves (a larger batch, a longer warmup_steps, "
                "fewer num_bins)"
            )
        else:
            who = f"step {self.optimizer_step}" + (", before any training step" if self.optimizer_step == 0 else "")
            fix = (
                "more samples before pi moves (a larger batch, a longer warmup_steps, or fewer num_bins) measure more bins "
                "(the share is logged at every refresh as measured_mass)"
            )
        self._warn_once(
            "extrapolated",
            f"noise sampler: {who}: pi rests mostly on bins never measured: {int(measured.sum())} of {k} "
            f"bins hold a measured m_hat and carry {mass:.0%} of pi's mass; pi's mode is at VE sigma "
            f"{math.exp(float(self.estimator.centers[mode])):.3g} ({where}, {kind}). The rest follows the interpolation and the "
            f"extrapolated ends of METHOD.md 5.4, not the data: {fix}",
        )

    def _refresh_now(
        self, *, ema_decay: float | None = None, min_count: int | None = None, m_hat_bound=None, what: str = "pi refreshed"
    ) -> bool:
        """Fold everything recorded so far into m̂ and, once two bins hold an estimate, rebuild π now,
        without counting an optimizer step: what a start measured before step 1 becomes the run's first
        π (METHOD.md §5.9). A collective under data parallelism (every rank must call it). ``ema_decay``
        and ``min_count`` replace β and the count a bin needs for this refresh only (``ema_decay=0``: the
        new means replace the old m̂); ``m_hat_bound``, (K,) x0 errors one a bin, then bounds m̂
        (:meth:`~diffusers_infonoise.estimator.ProfileEstimator.bound_m_hat`). The data statistics are resolved
        first, and frozen when the warm-up is over. Returns whether π was rebuilt.
        """
        self._resolve_data_statistics()
        est = self.estimator
        old = est.ema_decay, est.min_count
        est.ema_decay = old[0] if ema_decay is None else float(ema_decay)
        est.min_count = old[1] if min_count is None else int(min_count)
        try:
            est.refresh(self.optimizer_step, memory=self._memory_steps())
        finally:
            est.ema_decay, est.min_count = old
        if m_hat_bound is not None:
            est.bound_m_hat(m_hat_bound)
        if not self.estimator.is_ready or self.optimizer_step < self.warmup_steps:
            return False
        self._adopt_estimate(what)
        return True

    def _describe_refresh(self) -> dict:
        return {"step": self.optimizer_step, "filled_bins": self.estimator.num_filled}

    def metrics(self, prefix: str = "infonoise/") -> dict[str, float]:
        """The sampler's figures as plain floats for a tracker: ``num_updates`` (after ``prefix``)."""
        return {prefix + "num_updates": float(self.num_updates)}

    def record_start(self, record: dict) -> None:
        """Record how the run started (METHOD.md §5.9): ``record`` is a JSON-ready dict with ``"choice"``
        (``"base"``, ``"stored"`` or ``"profile"``) and what the start saw (its source, its samples and
        forward passes), stamped with ``optimizer_step`` 0. A start applied before step 1 replaces an earlier
        one (the last is where the run began); from step 1 on the record is kept as it is, through
        :meth:`state_dict` and resumes, so the stored schedule (``start``) and the model card say how the run
        began, not what a resume command asked for. :func:`~diffusers_infonoise.apply_start` calls it;
        a run that steps without a start records ``"base"``."""
        if self.optimizer_step != 0:
            logger.info(
                f"noise sampler: a {record.get('choice')} start at optimizer step {self.optimizer_step} is not recorded: "
                f"the run started at step 0 ({(self.start_record or {}).get('choice', 'not recorded')})"
            )
            return
        self.start_record = {**record, "optimizer_step": 0}

    def state_dict(self):
        """Everything for an exact resume, as CPU tensors and plain values; no collective call.

        Under data parallelism :meth:`step` sums the open (not yet refreshed) statistics of all ranks at
        every optimizer step, so after a step every rank's state is the same and complete: a checkpoint
        written by any one rank (diffusers' scripts call ``accelerator.save_state`` on the main process
        only; accelerate writes custom objects from the main process) resumes every rank with no sample
        lost or counted twice. Batches recorded since the last :meth:`step` are this rank's own.
        """
        state = super().state_dict()
        estimator = self.estimator.state_dict()
        state.update(
            {
                "estimator": estimator,
                "probs": None if self.probs is None else self.probs.clone(),
                "num_updates": self.num_updates,
                "edges": self.estimator.edges.clone(),
                "warmup_steps": self.warmup_steps,
                # the warm-up setting as saved (0 after a start that skipped the automatic one): not the resume command's
                "warmup_setting": self.settings.warmup_steps,
                "start": None if self.start_record is None else dict(self.start_record),
                # what decides π and how the statistics are collected, to name what a resume command changes
                "settings": {k: getattr(self.settings, k) for k in self.settings.names("pi", "statistics")},
                "samples_trained": self.samples_trained,
                "pi_moves": {
                    "steps": torch.tensor(self.pi_moves["steps"], dtype=torch.int64),
                    "tv": torch.tensor(self.pi_moves["tv"], dtype=torch.float64),
                },
                # the loss π was built for: a resume of another loss rebuilds π at its next refresh, not checked against it
                "objective": self.objective.record(),
                "data": {
                    **self.data.state_dict(),
                    "mmse_cap": self.estimator.mmse_cap,
                    "mmse_cap_auto": self._auto_cap,
                },
            }
        )
        return state

    def load_state_dict(self, state):
        """Restore :meth:`state_dict` output (exact resume).

        Raises:
            ValueError: a state of another sampler or grid, missing keys, or invalid π.
        """
        if not isinstance(state, dict):
            raise ValueError(f"state_dict: expected the dict returned by state_dict(), got {type(state).__name__}")
        missing = [k for k in ("name", "optimizer_step", "estimator", "probs", "num_updates", "edges") if k not in state]
        if missing:
            raise ValueError(f"state_dict: missing key(s) {missing}")
        if state["name"] != self.name:
            raise ValueError(f"state_dict: saved by a {state['name']!r} sampler, this is a {self.name!r} sampler")
        changed = self._check_resume_record(state)  # before the grid's own check: it names the options
        edges = torch.as_tensor(state["edges"], dtype=torch.float64)
        if edges.shape != self.estimator.edges.shape or not torch.allclose(edges, self.estimator.edges, rtol=0, atol=1e-12):
            raise ValueError("state_dict: its log-sigma grid differs from this sampler's (num_bins or path changed)")
        if state["probs"] is not None:
            p = torch.as_tensor(state["probs"], dtype=torch.float64)
            if (
                p.shape != (self.estimator.edges.numel() - 1,)
                or not bool(torch.isfinite(p).all())
                or bool((p < 0).any())
                or abs(float(p.sum()) - 1.0) > 1e-6
            ):
                k = self.estimator.num_bins
                raise ValueError(f"state_dict['probs']: expected {k} finite non-negative bin masses summing to 1")
        trained = state.get("samples_trained")
        if trained is not None and not (_real(trained) and trained >= 0):
            raise ValueError(f"state_dict['samples_trained']: expected a finite number >= 0, got {trained!r}")
        moves = state.get("pi_moves")  # states written before π's moves were kept have none: the history starts here
        if isinstance(moves, dict):
            moves = {k: v.tolist() if torch.is_tensor(v) else v for k, v in moves.items()}
        step = state["optimizer_step"]
        step = step if _is_int(step) and step >= 0 else None  # a bad one is refused below, by its name
        moves = {"steps": [], "tv": []} if moves is None else check_pi_moves(moves, "state_dict['pi_moves']", ValueError, max_step=step)
        self._load_base_state(state)
        self.estimator.load_state_dict(state["estimator"])  # the same on every rank (already summed over them)
        self.probs = None if state["probs"] is None else torch.as_tensor(state["probs"], dtype=torch.float64).clone()
        self.num_updates = int(state["num_updates"])
        self._cell_cache = None  # π changed without a new num_updates: drop cached cell masses
        self.pi_moves = moves
        if "warmup_steps" in state:  # states written before the run-sized warm-up have none
            self.warmup_steps = int(state["warmup_steps"])
        setting = state.get("warmup_setting")  # states written before the warm-up's setting was kept have none
        if setting == "auto" or (_is_int(setting) and setting >= 0):
            self.settings = self.settings.replace(warmup_steps=setting)
        # how the run started, not how this (resume) command would have: None in states written before it was recorded
        start = state.get("start")
        self.start_record = dict(start) if isinstance(start, dict) else None
        # states written before the discounted mean (§5.10) have no count of training samples: every sample then
        self.samples_trained = float(trained if trained is not None else self.estimator.total_counts.sum())
        data = state.get("data")
        if isinstance(data, dict):  # states written before the data statistics have none
            self.data.load_state_dict(data)
            self.estimator.set_data_grid(self.data.min_gap)
            cap = data.get("mmse_cap")
            if cap is not None and not (isinstance(cap, (int, float)) and not isinstance(cap, bool) and math.isfinite(cap) and cap > 0):
                raise ValueError(f"state_dict['data']['mmse_cap']: must be None or a finite number > 0, got {cap!r}")
            given = getattr(self._given_settings, "mmse_cap", None)
            if any(c.startswith("--infonoise_mmse_cap:") for c in changed):  # this run's cap, as for every other setting
                self.estimator.mmse_cap = None if given == "auto" else given
                self.settings = self.settings.replace(mmse_cap=given)
                self._apply_data_statistics()  # "auto": the measured V, if the checkpoint's run measured it
            else:
                self.estimator.mmse_cap = cap
                if "mmse_cap" in self.settings.names():  # a sampler without a cap (Kingma & Gao's) keeps none
                    self.settings = self.settings.replace(mmse_cap="auto" if data.get("mmse_cap_auto") else self.estimator.mmse_cap)
        saved = state.get("settings")  # states written before the resume record: their settings as they stood
        if "resume_record" not in state and isinstance(saved, dict):
            changed = [
                f"--infonoise_{k}: {v!r} -> {getattr(self.settings, k)!r}"
                for k, v in saved.items()
                if v != getattr(self.settings, k, v)  # one it does not read (a baseline once recorded them all): not compared
            ]
        self._warn_changed_settings(changed, state)
        objective = self.objective.record()
        if self.probs is not None and isinstance(saved, dict) and not changed and state.get("objective") == objective:
            # π of the same loss and settings is a function of the restored m̂: checked like a stored payload's
            self._check_probs_follow_estimate(self.probs, "state_dict['probs']")

    def _resume_record(self) -> dict:
        """:meth:`~.base.TrainingTimestepSampler.resume_record` with the base density, the grid and every setting of π
        and of the statistics as given (not those the run fixed since: the measured cap)."""
        given = self._given_settings
        settings = {k: getattr(given, k) for k in given.names("pi", "statistics")}
        return {**super()._resume_record(), "base": self.base_description, **settings}

    def _check_probs_follow_estimate(self, probs: torch.Tensor, what: str) -> None:
        """Refuse bin masses ``probs`` that do not follow from the current m̂ and settings (one refresh's
        arithmetic, :meth:`_build_probs`): an edited or corrupted π would bypass the floor and the estimate.
        ``what`` names its source in the error. A custom callable weighting is not checked (it is not recorded).

        Raises:
            ScheduleError: (a ``ValueError``) naming ``what`` and the total variation from the π the estimate gives.
        """
        if self.objective.record()["loss_weighting"] == "custom":
            return
        tv = 0.5 * float((self._build_probs() - probs).abs().sum())
        if tv > PI_TOLERANCE:
            raise ScheduleError(
                f"{what}: its pi does not follow from its own m_hat and settings (TV {tv:.3g} from the pi they give): edited or corrupted"
            )

    def describe(self):
        return {
            **super().describe(),
            "base": self.base_description,
            "hyperparameters": self.settings.stored(),
            "adapted": self.is_adapted,
            "optimizer_steps": self.optimizer_step,
            "warmup_steps_resolved": self.warmup_steps,
            "last_refresh": dict(self.last_refresh),
            "start": None if self.start_record is None else dict(self.start_record),
        }


def _stored_when(payload: dict) -> str:
    """When a stored schedule (a validated payload) was saved, in words: ``"saved at optimizer step 1200 after 40
    refreshes of pi"``; at step 0, that it was saved before any training step, with the start it holds in
    :func:`~.starts.describe_start`'s words (a profile of the model and the levels it measured, or the schedule it
    started from), so that step 0 does not read as empty."""
    from .starts import describe_start

    steps = payload.get("optimizer_steps")
    updates = payload.get("num_updates")
    if steps != 0:
        return f"saved at optimizer step {steps}" + (f" after {updates} refreshes of pi" if isinstance(updates, int) else "")
    return f"saved at optimizer step 0, before any training step: {describe_start(payload.get('start'))}"
