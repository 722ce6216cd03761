"""The online conditional-entropy-rate profile (METHOD.md §2-§5).

:class:`ProfileEstimator` keeps, on K bins uniform in log σ, running sums of the unweighted
x0-space error ``e`` the training loop already computes. At each refresh it

1. takes the bin statistics :meth:`ProfileEstimator.merge` summed across all processes
   (``torch.distributed`` when initialised; merged at every optimizer step, where every rank meets,
   so that the state any one rank holds is complete),
2. folds them into m̂ with a memory measured in optimizer steps (docs/METHOD.md §5.10, the default):
   every sample is weighted by ``exp(−age/H)``, so ``m̂_k`` is the time-discounted mean of bin k's
   errors with horizon H (``memory``), weighted by how many samples each refresh brought; a bin is
   first filled once it holds ``min_count`` samples and keeps them open until then (§5.4 carry-over:
   no sample is thrown away, which is what lets a batch-1 run adapt). With ``ema_decay`` β given
   (a study knob, :mod:`~diffusers_infonoise.sampler.settings`): ``m̂_k ← β·m̂_k + (1 − β)·mean_k`` in
   bins with at least ``min_count`` new samples (a bin's first value taken as is),
3. interpolates bins never filled (linearly in log σ, on log m̂; see ``filled_m_hat`` for the
   ends) and smooths log m̂ with a
   Gaussian kernel of ``smoothing`` bins (both ours),
4. bounds m̂ by the Bayes MMSE's bounds, ``min(m̂, σ², V)`` (the identity predictor and the constant
   predictor, docs/METHOD.md §5.10 and §5.4), and forms ``q_k = m̂_k/σ_k²``, the entropy rate per unit
   log σ (I-MMSE: ``dH/dσ = mmse/σ³``), at most 1 at the clean end,
5. gates the clean end, ``r = q·σⁿ/(σⁿ + cⁿ)`` with n = 3, c pinned, from the data's value grid,
   or from the profile (§5.5; :meth:`ProfileEstimator.resolve_gate`),
6. returns ``ρ̂ = r/∫r`` per unit log σ.

It holds no opinion on π: :mod:`diffusers_infonoise.sampler.infonoise` turns ρ̂ into π ∝ ρ̂/w.
Statistics are float64; inputs may be any float dtype.
"""

from __future__ import annotations

import math
import warnings

import torch

from .densities import searchsorted
from .gate import (  # noqa: F401  (the gate's names, re-exported for callers of the estimator)
    AUTO_GATE_THRESHOLD,
    DATA_GRID_FRACTION,
    GATE_EXPONENT,
    GATE_RULES,
    GateResult,
    apply_gate,
    automatic_gate_pivot,
    data_grid_pivot,
    gated_shape,
    log_gate,
    parse_gate,
    profile_gate_pivot,
)

__all__ = [
    "ProfileEstimator",
    "check_estimator_settings",
    "GateResult",
    "GATE_RULES",
    "parse_gate",
    "automatic_gate_pivot",
    "profile_gate_pivot",
    "data_grid_pivot",
    "apply_gate",
    "gated_shape",
    "log_gate",
    "GATE_EXPONENT",
]


def check_estimator_settings(*, ema_decay, memory, min_count, smoothing, gate, gate_fallback, mmse_cap, clean_end_bound) -> None:
    """Check the settings of a :class:`ProfileEstimator` (its keyword arguments, described there); also what an
    adaptive sampler's settings are checked with (:class:`~diffusers_infonoise.sampler.settings.InfoNoiseSettings`).

    Raises:
        ValueError: the first invalid one, naming the argument and the accepted values.
    """

    def real(x) -> bool:  # a finite int/float, not a bool or a string
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    if not (ema_decay is None or (real(ema_decay) and 0.0 <= ema_decay < 1.0)):
        raise ValueError(f"ema_decay: must be None (the discounted mean of docs/METHOD.md 5.10) or a float in [0, 1), got {ema_decay!r}")
    if not (real(memory) and memory > 0):
        raise ValueError(f"memory: must be a finite float > 0 (optimizer steps), got {memory!r}")
    if not isinstance(clean_end_bound, bool):
        raise ValueError(f"clean_end_bound: must be True or False, got {clean_end_bound!r}")
    if not (isinstance(min_count, int) and not isinstance(min_count, bool) and min_count >= 1):
        raise ValueError(f"min_count: must be an int >= 1, got {min_count!r}")
    if not (real(smoothing) and 0 <= smoothing <= 64):
        raise ValueError(f"smoothing: must be a float in [0, 64] (bins), got {smoothing!r}")
    if not (gate is None or (isinstance(gate, str) and gate in GATE_RULES) or (real(gate) and gate > 0)):
        raise ValueError(
            f"gate: accepted values are {', '.join(repr(r) for r in GATE_RULES)}, a finite positive float pivot "
            f"(VE sigma) or None, got {gate!r}"
        )
    if not (real(gate_fallback) and gate_fallback > 0):
        raise ValueError(f"gate_fallback: must be a finite float > 0 (VE sigma), got {gate_fallback!r}")
    if not (mmse_cap is None or (real(mmse_cap) and mmse_cap > 0)):
        raise ValueError(f"mmse_cap: must be None or a finite float > 0 (per-dimension x0 variance), got {mmse_cap!r}")


class ProfileEstimator:
    """Binned, time-discounted estimate of the x0-space error ``m̂(σ)`` and the entropy-rate profile ρ̂.

    Args:
        edges: (K+1,) increasing bin edges in log σ (VE σ). Samples outside them are left out and
            counted (``num_outside``), except σ = +inf with ``top_includes_inf`` (a zero-terminal-SNR
            VP step, clamped into the top bin, METHOD.md §5.1).
        ema_decay: ``None`` (default): the discounted mean with horizon ``memory`` (docs/METHOD.md §5.10). A
            float β in [0, 1) (a study knob): ``m̂ ← β·m̂ + (1 − β)·mean`` once a refresh (METHOD.md §5.4).
        memory: H, the horizon of the discounted mean in optimizer steps (a sample ``a`` steps old weighs
            ``exp(−a/H)``); the default for :meth:`refresh` calls that do not give their own.
        min_count: samples a bin needs before its first value; until then they stay open (carry-over).
        clean_end_bound: the clean end of docs/METHOD.md §5.10: bound m̂ by ``σ²`` per element (VE σ), the
            error of the identity predictor ``x̂0 = x_σ``, so q = m̂/σ² ≤ 1 (assumes the per-sample loss is a
            mean over elements, as the ``V`` cap does), and smooth the measured range before extending its ends
            (:meth:`filled_m_hat`). ``False``: a study knob (payloads written before 0.3 load with it).
        smoothing: standard deviation, in bins, of the Gaussian kernel applied to log m̂; 0 disables.
        gate: the clean-end gate of METHOD.md §5.5: a float pivot c (VE σ), ``None`` for no gate, or
            a rule: ``"data"``: c = a tenth of the smallest gap between the data's values
            (:meth:`set_data_grid`); ``"profile"``: the repaired paper rule
            (:func:`profile_gate_pivot`); ``"paper"``: a study knob, the rule as first implemented
            (:func:`automatic_gate_pivot`; it misfired on every real run);
            ``"auto"`` (default): ``"data"`` once the data's grid is known, else ``gate_fallback``.
        gate_fallback: pinned pivot used when a rule has nothing to go on (``"auto"``/``"data"``
            before any data was seen) or misfires (``"paper"``). The paper pins 0.2 for non-image data
            and about 0.15 for CIFAR-10-scale images.

    Raises:
        ValueError: for invalid hyperparameters (each names the argument).
    """

    def __init__(
        self,
        edges: torch.Tensor,
        *,
        ema_decay: float | None = None,
        memory: float = 500.0,
        min_count: int = 8,
        smoothing: float = 1.0,
        gate: str | float | None = "auto",
        gate_fallback: float = 0.2,
        mmse_cap: float | None = None,
        clean_end_bound: bool = True,
    ):
        edges = torch.as_tensor(edges, dtype=torch.float64).flatten()
        if edges.numel() < 3 or not bool((edges[1:] > edges[:-1]).all()) or not bool(torch.isfinite(edges).all()):
            raise ValueError("edges: need at least 3 finite, strictly increasing log-sigma edges")

        check_estimator_settings(
            ema_decay=ema_decay,
            memory=memory,
            min_count=min_count,
            smoothing=smoothing,
            gate=gate,
            gate_fallback=gate_fallback,
            mmse_cap=mmse_cap,
            clean_end_bound=clean_end_bound,
        )
        self.mmse_cap = None if mmse_cap is None else float(mmse_cap)
        self.edges = edges
        self.ema_decay = None if ema_decay is None else float(ema_decay)
        self.memory = float(memory)
        self.clean_end_bound = clean_end_bound
        self.min_count = int(min_count)
        self.smoothing = float(smoothing)
        self.gate = gate if gate is None or isinstance(gate, str) else float(gate)
        if isinstance(self.gate, float) and self.gate > math.exp(float(edges[-1])):
            warnings.warn(
                f"gate={self.gate:g} is above the grid's largest sigma {math.exp(float(edges[-1])):.3g}: it suppresses "
                "every bin, and rho_hat becomes (m_hat/sigma^2)*sigma^3, piled at the noisy end. The pivot is a VE "
                "sigma (convert a DDPM timestep or a flow s first: NoisePath.timesteps_to_sigma).",
                stacklevel=2,
            )
        self.data_min_gap: float | None = None  # smallest gap between the data's values (set_data_grid)
        self.gate_fallback = float(gate_fallback)
        k = self.num_bins
        self.sums = torch.zeros(k, dtype=torch.float64)  # this process, since the last merge()
        self.counts = torch.zeros(k, dtype=torch.float64)
        # every process's open sums since the last refresh, summed at merge(): the same on every rank
        self.merged_sums = torch.zeros(k, dtype=torch.float64)
        self.merged_counts = torch.zeros(k, dtype=torch.float64)
        self.top_includes_inf = False  # σ = +inf belongs to the top bin (zero-terminal-SNR VP)
        # summed over processes, carried over from refreshes where the bin had < min_count (§5.4)
        self.carry_sums = torch.zeros(k, dtype=torch.float64)
        self.carry_counts = torch.zeros(k, dtype=torch.float64)
        self.m_hat = torch.full((k,), math.nan, dtype=torch.float64)  # NaN = never filled
        # the discounted sample count behind each m̂_k (Σ exp(−age/H) over its samples; §5.10)
        self.m_weight = torch.zeros(k, dtype=torch.float64)
        self.last_refresh_step = 0  # the optimizer step of the last refresh (ages are counted from it)
        self.last_window_count = 0.0  # samples (all processes) the last refresh folded in
        self.last_window: tuple[torch.Tensor, torch.Tensor] | None = None  # (sums, counts) of that refresh (K,) each
        self.total_counts = torch.zeros(k, dtype=torch.float64)
        self.num_nonfinite = 0
        self.num_outside = 0
        self._nonfinite_open = torch.zeros((), dtype=torch.int64)  # on the open sums' device
        self._outside_open = torch.zeros((), dtype=torch.int64)
        self._open_device: torch.device | None = None  # where the open sums live: the errors' device, None before any
        self._inner_edges = self.edges[1:-1]
        self.num_refreshes = 0
        self.last_gate = GateResult(None, "off")
        self.num_bounded = 0  # bins the last bound_m_hat lowered (a start's record; not state)

    # -- geometry ---------------------------------------------------------------------------
    @property
    def num_bins(self) -> int:
        return self.edges.numel() - 1

    @property
    def centers(self) -> torch.Tensor:
        """(K,) bin centres in log σ."""
        return 0.5 * (self.edges[1:] + self.edges[:-1])

    @property
    def widths(self) -> torch.Tensor:
        return self.edges[1:] - self.edges[:-1]

    def bin_index(self, log_sigmas: torch.Tensor) -> torch.Tensor:
        """(B,) int64 bin of each log σ; values outside the grid (±inf too) go to the edge bins."""
        x = torch.nan_to_num(log_sigmas.detach().to("cpu", torch.float64), posinf=1e300, neginf=-1e300)
        return searchsorted(self.edges[1:-1], x, right=True).clamp(0, self.num_bins - 1)

    # -- accumulation -----------------------------------------------------------------------
    def accumulate(self, log_sigmas: torch.Tensor, errors: torch.Tensor) -> None:
        """Add per-sample x0 errors ``errors`` (B,) at ``log_sigmas`` (B,) to this process's open bin sums.

        Runs on the errors' device without reading anything back to the host: the open sums live
        there until :meth:`merge` and :meth:`refresh`. Non-finite errors are left out and counted in
        ``num_nonfinite``; levels outside the grid (beyond rounding) in ``num_outside`` (both read at
        the next host synchronisation, :meth:`refresh` or :meth:`state_dict`).
        """
        errors = errors.detach().flatten()
        device = errors.device
        dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64
        errors = errors.to(dtype)
        if self._open_device != device:
            self._move_open(device, dtype)
        finite = torch.isfinite(errors)
        x = log_sigmas.detach().flatten().to(device, dtype)
        lo, hi = float(self.edges[0]) - _EDGE_TOLERANCE, float(self.edges[-1]) + _EDGE_TOLERANCE
        inside = (x >= lo) & (x <= hi)
        if self.top_includes_inf:
            inside = inside | (x == math.inf)
        x = torch.nan_to_num(x, nan=0.0, posinf=1e300, neginf=-1e300)
        idx = searchsorted(self._inner_edges, x, right=True).clamp(0, self.num_bins - 1)
        kept = finite & inside
        self.sums.index_add_(0, idx, torch.where(kept, errors, torch.zeros_like(errors)))
        self.counts.index_add_(0, idx, kept.to(dtype))
        self._nonfinite_open += (~finite).sum()
        self._outside_open += (finite & ~inside).sum()

    def _move_open(self, device: torch.device, dtype: torch.dtype) -> None:
        """Keep the open statistics (and the bin edges they are indexed by) on ``device``."""
        self.sums, self.counts = self.sums.to(device, dtype), self.counts.to(device, dtype)
        self.merged_sums, self.merged_counts = self.merged_sums.to(device, dtype), self.merged_counts.to(device, dtype)
        self._nonfinite_open = self._nonfinite_open.to(device)
        self._outside_open = self._outside_open.to(device)
        self._inner_edges = self.edges[1:-1].to(device, dtype)
        self._open_device = device

    def _host_open(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The merged plus this process's open sums and counts as CPU float64 (the synchronisation),
        with the non-finite and outside-the-grid counts folded in."""
        self.num_nonfinite += int(self._nonfinite_open)
        self.num_outside += int(self._outside_open)
        self._nonfinite_open = torch.zeros_like(self._nonfinite_open)
        self._outside_open = torch.zeros_like(self._outside_open)
        sums, counts = self.merged_sums + self.sums, self.merged_counts + self.counts
        return sums.to("cpu", torch.float64).clone(), counts.to("cpu", torch.float64).clone()

    def merge(self) -> None:
        """Add this process's open sums, summed over all processes, to the merged ones, and empty them.

        Under ``torch.distributed`` this is a collective (one ``all_reduce`` of 2K values on the device of the
        errors that were accumulated, the loss's: each rank's own GPU under NCCL, which reduces CUDA tensors
        only; a rank that accumulated nothing since the last refresh uses the current CUDA device under NCCL,
        the CPU otherwise): every rank must call it at the same
        points, as :meth:`~diffusers_infonoise.InfoNoiseTrainingTimestepSampler.step` does at every
        optimizer step. Afterwards every rank holds the same merged sums, so a checkpoint that any
        one rank writes (:meth:`state_dict`, which makes no collective call) is complete. On one
        process it only moves the sums (no synchronisation).
        """
        sums, counts = self.sums, self.counts
        if _distributed():
            device = _comm_device(self._open_device)
            buf = torch.cat([sums, counts]).to(device, torch.float64)
            torch.distributed.all_reduce(buf)
            buf = buf.to(sums.device, sums.dtype)
            sums, counts = buf[: self.num_bins], buf[self.num_bins :]
        self.merged_sums = self.merged_sums + sums
        self.merged_counts = self.merged_counts + counts
        self.sums = torch.zeros_like(self.sums)
        self.counts = torch.zeros_like(self.counts)

    # -- refresh ----------------------------------------------------------------------------
    def refresh(self, step: int | None = None, *, memory: float | None = None) -> torch.Tensor:
        """Fold the bin statistics of every process into ``m̂`` (:meth:`merge` first: a collective).

        Discounted mean (``ema_decay=None``, docs/METHOD.md §5.10): the weights behind every filled bin
        decay by ``γ = exp(−(step − last_step)/H)`` (H = ``memory``, else :attr:`memory`), then each filled
        bin with new samples takes ``m̂ ← (γ·W·m̂ + Σe)/(γ·W + n)``, ``W ← γ·W + n``; a bin not filled yet
        takes its first value once it holds ``min_count`` samples (this window's plus those carried over),
        and keeps them open until then, so no sample is ever thrown away (METHOD.md §5.4). Without a
        ``step`` nothing decays (a plain running mean). With ``ema_decay`` β: bins with at least
        ``min_count`` samples take ``m̂ ← β·m̂ + (1 − β)·mean`` (the first value as is), the others carry
        their samples over. The carried sums are already summed over processes and are not reduced again.

        Args:
            step: the optimizer step of this refresh (ages are counted in optimizer steps).
            memory: H for this refresh (optimizer steps); default :attr:`memory`.

        Returns:
            (K,) bool mask of the bins that were updated.
        """
        self.merge()
        window_sums, window_counts = self._host_open()
        self.sums, self.counts = torch.zeros_like(window_sums), torch.zeros_like(window_counts)
        self.merged_sums, self.merged_counts = torch.zeros_like(window_sums), torch.zeros_like(window_counts)
        self._open_device, self._inner_edges = None, self.edges[1:-1]
        self._nonfinite_open, self._outside_open = self._nonfinite_open.cpu(), self._outside_open.cpu()
        self.total_counts += window_counts
        self.last_window_count = float(window_counts.sum())
        self.last_window = (window_sums, window_counts)  # this refresh's new samples (all processes), not state
        sums, counts = window_sums + self.carry_sums, window_counts + self.carry_counts
        means = sums / counts.clamp_min(1)
        filled = ~torch.isnan(self.m_hat)
        first = ~filled & (counts >= self.min_count) & (counts > 0)
        if self.ema_decay is None:
            horizon = self.memory if memory is None else float(memory)
            age = 0 if step is None else max(0, int(step) - self.last_refresh_step)
            self.m_weight = self.m_weight * math.exp(-age / horizon)
            ema = filled & (counts > 0)
            weight = self.m_weight[ema] + counts[ema]
            self.m_hat[ema] = (self.m_weight[ema] * self.m_hat[ema] + sums[ema]) / weight
            self.m_weight[ema] = weight
        else:  # ema_decay (a study knob): one EMA step a refresh, in bins with min_count new samples
            ema = filled & (counts >= self.min_count) & (counts > 0)
            self.m_hat[ema] = self.ema_decay * self.m_hat[ema] + (1 - self.ema_decay) * means[ema]
            self.m_weight[ema] = counts[ema]
        self.m_hat[first] = means[first]
        self.m_weight[first] = counts[first]
        update = first | ema
        self.carry_sums = torch.where(update, torch.zeros_like(sums), sums)
        self.carry_counts = torch.where(update, torch.zeros_like(counts), counts)
        if step is not None:
            self.last_refresh_step = int(step)
        self.num_refreshes += 1
        return update

    def load_m_hat(self, edges: torch.Tensor, m_hat: torch.Tensor) -> bool:
        """Start from an m̂ estimated on a grid of ``edges`` (a stored schedule; METHOD.md §5.9 'stored').

        On this estimator's grid it is taken as it is (NaN = a bin never filled); on another grid (another
        K or σ range, or another path's, all on VE log σ) ln m̂ of the filled bins is interpolated linearly
        in log σ onto this grid's bin centres between its first and last filled centre; bins beyond stay
        unfilled (docs/METHOD.md §5.10). Open and carried statistics are
        cleared; the estimate continues from this m̂, which weighs as ``min_count`` samples a bin.

        Args:
            edges: (K'+1,) increasing log-σ edges (VE σ) of the stored grid. m_hat: (K',) x0-space errors.

        Returns:
            True when m̂ was interpolated (the grids differ).

        Raises:
            ValueError: fewer than two filled bins in ``m_hat``, or a grid that does not overlap this one.
        """
        edges = torch.as_tensor(edges, dtype=torch.float64).flatten()
        m_hat = torch.as_tensor(m_hat, dtype=torch.float64).flatten()
        same = edges.shape == self.edges.shape and torch.allclose(edges, self.edges, rtol=0, atol=1e-9)
        filled = ~torch.isnan(m_hat)
        if int(filled.sum()) < 2:
            raise ValueError("m_hat: a stored estimate needs at least two filled bins")
        if same:
            new = m_hat.clone()
        else:
            centres = 0.5 * (edges[1:] + edges[:-1])[filled]
            if float(centres[-1]) < float(self.edges[0]) or float(centres[0]) > float(self.edges[-1]):
                raise ValueError(
                    f"edges: the stored estimate covers log sigma [{float(centres[0]):.4g}, "
                    f"{float(centres[-1]):.4g}], outside this grid's [{float(self.edges[0]):.4g}, "
                    f"{float(self.edges[-1]):.4g}]: nothing to start from"
                )
            y = torch.log(m_hat[filled].clamp_min(1e-300))
            # beyond the stored estimate's ends nothing was measured: those bins stay unfilled and are treated as
            # any bin never filled (filled_m_hat, profile), not extended flat (a flat m̂ makes q grow as 1/σ²)
            inside = (self.centers >= centres[0]) & (self.centers <= centres[-1])
            new = torch.where(inside, torch.exp(_interp_flat(self.centers, centres, y)), torch.full_like(self.centers, math.nan))
        self.m_hat = new
        k = self.num_bins
        zeros = lambda: torch.zeros(k, dtype=torch.float64)  # noqa: E731
        self.sums, self.counts, self.merged_sums, self.merged_counts = zeros(), zeros(), zeros(), zeros()
        self.carry_sums, self.carry_counts, self.total_counts = zeros(), zeros(), zeros()
        # a stored estimate weighs as a bin just filled (min_count samples): this run's losses replace it at
        # the rate they arrive, within about one memory (docs/METHOD.md §5.10)
        self.m_weight = torch.where(torch.isnan(new), zeros(), torch.full((k,), float(self.min_count), dtype=torch.float64))
        self._open_device, self._inner_edges = None, self.edges[1:-1]
        return not same

    def bound_m_hat(self, bound: torch.Tensor) -> int:
        """Lower every filled bin's m̂ to ``bound`` where it lies above it, its weight unchanged: an upper bound on the
        Bayes MMSE known from the data (a profile start's per-element bound, docs/METHOD.md §5.10), so that the excess
        is model error, not entropy rate. Later samples average with the bounded value as with any other.

        Args:
            bound: (K,) x0-space errors, one a bin (a profile start's: the bound's mean over the levels it measured
                there; VE σ), finite and >= 0.

        Returns:
            How many bins were lowered.

        Raises:
            ValueError: a bound of another shape, or one that is not finite and >= 0.
        """
        bound = torch.as_tensor(bound, dtype=torch.float64)
        if bound.shape != self.m_hat.shape:
            raise ValueError(f"bound: expected shape ({self.num_bins},), one error a bin, got {tuple(bound.shape)}")
        if not bool(torch.isfinite(bound).all() and (bound >= 0).all()):
            raise ValueError(f"bound: expected finite errors >= 0, got {bound[~(torch.isfinite(bound) & (bound >= 0))].tolist()[:3]}")
        lowered = ~torch.isnan(self.m_hat) & (self.m_hat > bound)
        self.m_hat = torch.where(lowered, bound, self.m_hat)
        self.num_bounded = int(lowered.sum())
        return self.num_bounded

    @property
    def num_filled(self) -> int:
        """How many bins hold an estimate."""
        return int((~torch.isnan(self.m_hat)).sum())

    def set_data_grid(self, min_gap: float | None) -> None:
        """The smallest gap between distinct values of the training data (x0 units), for the
        ``"data"``/``"auto"`` gate rule; ``None`` forgets it.

        Raises:
            ValueError: ``min_gap`` is not None or a finite float >= 0.
        """
        if min_gap is not None and not (
            isinstance(min_gap, (int, float)) and not isinstance(min_gap, bool) and math.isfinite(min_gap) and min_gap >= 0
        ):
            raise ValueError(f"min_gap: must be None or a finite float >= 0 (x0 units), got {min_gap!r}")
        self.data_min_gap = None if min_gap is None else float(min_gap)

    @property
    def is_ready(self) -> bool:
        """True once at least two bins hold an estimate (enough to interpolate a profile)."""
        return int((~torch.isnan(self.m_hat)).sum()) >= 2

    def filled_m_hat(self) -> torch.Tensor:
        """(K,) ``m̂`` with unfilled bins filled: interpolated linearly in log σ on log m̂ between the lowest and
        the highest filled bin, that range smoothed, then extended beyond it from its smoothed ends by the limits
        of METHOD.md §2 (below: m̂ ∝ σ², q = m̂/σ² constant, the continuous-data limit, which the gate trims for
        discrete data; above: m̂ constant, → Var(x0) as σ → ∞). Smoothing before extending keeps every bin
        beyond the measured range at or below what its nearest measured bin reads (docs/METHOD.md §5.10; with
        ``clean_end_bound=False``, a study knob: extended first, then smoothed).

        Raises:
            RuntimeError: before two bins hold an estimate.
        """
        if not self.is_ready:
            raise RuntimeError("the profile has fewer than two filled bins; call refresh() after update()s first")
        x = self.centers
        known = ~torch.isnan(self.m_hat)
        idx = torch.nonzero(known).flatten()
        lo, hi = int(idx[0]), int(idx[-1])
        xk, yk = x[known], torch.log(self.m_hat[known].clamp_min(1e-300))
        inner = x[lo : hi + 1]
        j = torch.searchsorted(xk, inner).clamp(1, xk.numel() - 1)
        t = ((inner - xk[j - 1]) / (xk[j] - xk[j - 1])).clamp(0, 1)
        y_in = yk[j - 1] + t * (yk[j] - yk[j - 1])
        y = torch.empty_like(x)
        if not self.clean_end_bound:  # the profile before 0.3 (a study knob): extend first, then smooth it all
            y[lo : hi + 1] = y_in
            y[:lo] = y_in[0] + 2.0 * (x[:lo] - x[lo])
            y[hi + 1 :] = y_in[-1]
            return torch.exp(_gaussian_smooth(y, self.smoothing) if self.smoothing > 0 else y)
        if self.smoothing > 0 and y_in.numel() > 1:
            y_in = _gaussian_smooth(y_in, self.smoothing)
        y[lo : hi + 1] = y_in
        y[:lo] = y_in[0] + 2.0 * (x[:lo] - x[lo])
        y[hi + 1 :] = y_in[-1]
        return torch.exp(y)

    def profile(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rho_hat, q)``: the gated, normalised entropy-rate density per unit log σ and the ungated
        ``q = min(m̂, V, σ²)/σ²`` (both (K,), on the bin centres; V with ``mmse_cap``, σ² with ``clean_end_bound``).
        Records the gate decision in ``last_gate``.
        """
        m = self.filled_m_hat()
        if self.mmse_cap is not None:
            # the Bayes MMSE never exceeds the data's variance (the constant predictor E[x0] achieves
            # it); an ε- or v-model's residual error times the σ² conversion can (METHOD.md §2, §3)
            m = m.clamp(max=self.mmse_cap)
        sig = torch.exp(self.centers)
        if self.clean_end_bound:
            # nor the identity predictor's error σ² per element (docs/METHOD.md §5.10): above it is model
            # error or a guess in bins never measured, and q = m̂/σ² would grow as 1/σ² toward σ_min
            m = torch.minimum(m, sig**2)
        q = m / sig**2
        self.last_gate = self.resolve_gate(sig, m)
        r = gated_shape(sig, q, self.last_gate.pivot)
        rho = r / (r * self.widths).sum()
        return rho, q

    def resolve_gate(self, sigmas: torch.Tensor, m_hat: torch.Tensor) -> GateResult:
        """Decide the pivot c for this profile (METHOD.md §5.5) and say why (:class:`GateResult`)."""
        if self.gate is None:
            return GateResult(None, "off")
        if not isinstance(self.gate, str):
            return GateResult(float(self.gate), "pinned")
        if self.gate in ("auto", "data"):
            if self.data_min_gap is None:
                return GateResult(self.gate_fallback, "fallback", "no training data seen yet (add_noise / observe_data)")
            c = data_grid_pivot(self.data_min_gap)
            if c < float(sigmas[0]):
                return GateResult(
                    None, "data", f"smallest gap between data values {self.data_min_gap:.3g}: pivot {c:.3g} below sigma_min, no gate", c
                )
            return GateResult(c, "data", f"a tenth of the smallest gap between data values ({self.data_min_gap:.3g})", c)
        if self.gate == "profile":
            c = profile_gate_pivot(sigmas, m_hat)
            if c is None:
                return GateResult(None, "profile", "per-dsigma profile at its threshold already at sigma_min: no gate")
            return GateResult(c, "profile", "onset of the per-dsigma profile", c)
        c = automatic_gate_pivot(sigmas, m_hat)
        mode = float(sigmas[torch.argmax(m_hat / sigmas**2)])
        if c <= float(sigmas[0]):
            return GateResult(self.gate_fallback, "fallback", "automatic pivot collapsed onto sigma_min", c)
        if c >= mode:
            return GateResult(self.gate_fallback, "fallback", f"automatic pivot {c:.3g} at or above the profile's mode {mode:.3g}", c)
        return GateResult(c, "paper", "", c)

    # -- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The estimate and its open statistics (CPU tensors). No collective call: ``sums``/``counts``
        are the merged sums of every process (:meth:`merge`) plus this process's own unmerged ones (none
        right after an optimizer step, where checkpoints are written)."""
        sums, counts = self._host_open()
        return {
            "sums": sums,
            "counts": counts,
            "carry_sums": self.carry_sums.clone(),
            "carry_counts": self.carry_counts.clone(),
            "m_hat": self.m_hat.clone(),
            "m_weight": self.m_weight.clone(),
            "last_refresh_step": self.last_refresh_step,
            "total_counts": self.total_counts.clone(),
            "num_nonfinite": self.num_nonfinite,
            "num_outside": self.num_outside,
            "num_refreshes": self.num_refreshes,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output, on every rank alike: its open sums become the merged
        ones (they are already summed over processes and are not reduced again). States written
        before the carry-over (§5.4) have no ``carry_*`` entries and load with nothing carried; states written
        before the discounted mean (§5.10) have no ``m_weight``: each filled bin then weighs ``min_count``."""
        m_hat = torch.as_tensor(state["m_hat"], dtype=torch.float64)
        legacy_weight = torch.where(torch.isnan(m_hat), 0.0, float(self.min_count)) if m_hat.ndim == 1 else m_hat
        state = {
            "carry_sums": torch.zeros(self.num_bins),
            "carry_counts": torch.zeros(self.num_bins),
            "m_weight": legacy_weight,
            **state,
        }
        for key in ("sums", "counts", "carry_sums", "carry_counts", "m_hat", "m_weight", "total_counts"):
            value = torch.as_tensor(state[key], dtype=torch.float64)
            if value.shape != (self.num_bins,):
                raise ValueError(f"state_dict[{key!r}]: expected shape ({self.num_bins},), got {tuple(value.shape)}")
            known = value[~torch.isnan(value)] if key == "m_hat" else value  # NaN m̂ = a bin never filled
            if not bool(torch.isfinite(known).all()) or bool((known < 0).any()):
                raise ValueError(f"state_dict[{key!r}]: expected finite values >= 0")
            setattr(self, key, value.clone())
        self.merged_sums, self.merged_counts = self.sums, self.counts
        self.sums, self.counts = torch.zeros_like(self.merged_sums), torch.zeros_like(self.merged_counts)
        self._open_device, self._inner_edges = None, self.edges[1:-1]
        self._nonfinite_open = torch.zeros((), dtype=torch.int64)
        self._outside_open = torch.zeros((), dtype=torch.int64)
        self.num_nonfinite = int(state["num_nonfinite"])
        self.num_outside = int(state.get("num_outside", 0))
        self.num_refreshes = int(state["num_refreshes"])
        self.last_refresh_step = int(state.get("last_refresh_step", 0))


#: levels this far outside the grid (in log σ) still count as inside: float32 rounding of the edges
_EDGE_TOLERANCE = 1e-5


def _distributed() -> bool:
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _comm_device(device: torch.device | None) -> torch.device:
    """Where a collective of the default process group takes this rank's statistics: on ``device``, the loss's (or
    the data's) where they were accumulated, so that nothing moves between devices (under NCCL each rank's own GPU,
    whether or not ``torch.cuda.set_device`` was called); with no device yet (nothing seen on this rank), the
    current CUDA device under NCCL, which reduces CUDA tensors only, else the CPU. Shared by :mod:`.data_statistics`."""
    if device is not None:
        return device
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _interp_flat(x: torch.Tensor, xp: torch.Tensor, fp: torch.Tensor) -> torch.Tensor:
    """Linear interpolation of (xp, fp) at x (xp increasing), constant beyond the ends (numpy's ``interp``)."""
    j = torch.searchsorted(xp, x).clamp(1, xp.numel() - 1)
    t = ((x - xp[j - 1]) / (xp[j] - xp[j - 1])).clamp(0, 1)
    return fp[j - 1] + t * (fp[j] - fp[j - 1])


def _gaussian_smooth(y: torch.Tensor, std_bins: float) -> torch.Tensor:
    """Gaussian smoothing with odd-reflection padding, which leaves linear trends (log m̂ is linear
    in log σ at both ends for continuous data) exactly unchanged at the edges."""
    half = max(1, int(math.ceil(3 * std_bins)))
    half = min(half, y.numel() - 1)
    offs = torch.arange(-half, half + 1, dtype=torch.float64)
    kernel = torch.exp(-0.5 * (offs / std_bins) ** 2)
    kernel = kernel / kernel.sum()
    left = 2 * y[0] - y[1 : half + 1].flip(0)
    right = 2 * y[-1] - y[-half - 1 : -1].flip(0)
    padded = torch.cat([left, y, right])
    return torch.nn.functional.conv1d(padded.view(1, 1, -1), kernel.view(1, 1, -1)).flatten()
