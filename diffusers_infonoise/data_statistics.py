"""What an adaptive sampler learns about the clean data x0 it sees (METHOD.md §5.4, §5.5).

Two numbers, both properties of the data rather than of the model:

* ``variance``: ``V = mean_i Var(x0_i)``, the per-dimension variance, which bounds the Bayes MMSE at
  every σ (the constant predictor ``E[x0]`` achieves it): the ``"auto"`` m̂ cap;
* ``min_gap``: the smallest gap between distinct values of x0, the scale below which data on a grid
  (binarized pixels, one-hot tokens, 8-bit intensities) has nothing left to resolve: the ``"auto"``
  gate pivot is a tenth of it.

:class:`DataStatistics` accumulates them on the data's own device (no host synchronisation per
step), sums them over processes at every optimizer step (:meth:`DataStatistics.merge`, where every
rank meets, so that any one rank's checkpoint holds them all) and resolves them at a refresh, until
about :data:`OBSERVE_SAMPLES` samples were seen over all processes.

A profile start also tallies each element's values (:class:`ValueTally`, data on at most 16 values): the per-element
posterior mean's x0 error (:func:`per_element_bayes_mmse`), another bound on the Bayes MMSE, bounds the pretrained
model's measured error, whose model error the start would otherwise read as entropy rate (METHOD.md §5.10).
"""

from __future__ import annotations

import math

import torch

from .estimator import _comm_device

__all__ = [
    "DataStatistics",
    "MAX_BOUND_WORK",
    "MAX_GRID_VALUES",
    "OBSERVE_SAMPLES",
    "ValueTally",
    "per_element_bayes_mmse",
    "per_element_bound_work",
    "smallest_value_gap",
]

OBSERVE_SAMPLES = 4096  # x0 samples (over all processes) after which the statistics freeze at a refresh
_OBSERVE_VALUES = 1 << 16  # values of one batch the value grid is measured on


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1


def _shape_key(shape: tuple) -> float:
    """An integer below 2**50 (exact in float64) that tells the shapes of two batches apart."""
    h = len(shape)
    for d in shape:
        h = (h * 1_000_003 + int(d)) % (1 << 50)
    return float(h)


_NO_DATA = -1e300  # a rank without data this step: ignored by the MAX reductions of merge()


def _value_gap(x: torch.Tensor) -> torch.Tensor | None:
    """The smallest gap between distinct values of ``x`` (a 0-dim tensor on its device, inf when all are equal),
    on at most ``_OBSERVE_VALUES`` of them; ``None`` for fewer than two values. No synchronisation."""
    v = x.flatten()
    if v.numel() < 2:
        return None
    if v.numel() > _OBSERVE_VALUES:
        v = v[:: v.numel() // _OBSERVE_VALUES + 1]
    ok = torch.isfinite(v)
    # non-finite values become copies of an existing finite value: no new gap, no sync
    v = torch.where(ok, v, torch.where(ok, v, torch.full_like(v, math.inf)).amin().expand_as(v))
    v = torch.sort(v).values
    d = v[1:] - v[:-1]
    # gaps below float rounding of the data's range count as equal values
    tol = 1e-5 * (v[-1] - v[0]).abs().clamp_min(1e-12)
    return torch.where(torch.isfinite(d) & (d > tol), d, torch.full_like(d, math.inf)).amin()


def smallest_value_gap(x0: torch.Tensor) -> float | None:
    """The smallest gap between distinct values of a batch of clean data (x0 units), as the training sampler
    measures it for the value-grid gate (METHOD.md §5.5), on this process only (no collective call).

    Args:
        x0: (B, ...) clean data, any dtype (integers are read as floats).

    Returns:
        The gap (float > 0), or ``None`` when the batch has fewer than two distinct finite values.
    """
    if not torch.is_tensor(x0):
        raise ValueError(f"x0: expected a tensor, got {type(x0).__name__}")
    gap = _value_gap(x0.detach().to(torch.float32 if x0.device.type == "mps" else torch.float64))
    if gap is None or not math.isfinite(float(gap)):
        return None
    return float(gap)


class DataStatistics:
    """Running per-dimension sums and the smallest value gap of the x0 batches given to :meth:`observe`.

    Attributes:
        variance: ``mean_i Var(x0_i)`` (float, x0 units squared), or ``None`` until resolved.
        min_gap: smallest gap between distinct values (float, x0 units), or ``None``.
        frozen: True once resolved on enough samples (or frozen by the sampler); later batches are ignored.
    """

    def __init__(self):
        self.variance: float | None = None
        self.min_gap: float | None = None
        self.frozen = False
        self._open: dict | None = None  # this process's sums since the last merge, on the data's device (see _new)
        self._merged: dict | None = None  # every process's sums (merge), the same on every rank

    @staticmethod
    def _new(shape: tuple, dtype, device) -> dict:
        z = lambda *s: torch.zeros(s, dtype=dtype, device=device)  # noqa: E731
        # n, sum, sq: per-dimension sums of the rows of the first shape seen; el, esum, esq: element totals
        # of every batch (the fallback when shapes differ); rows: batch rows offered; gap: smallest value
        # gap; mixed: shapes differed
        return {
            "shape": shape,
            "n": z(),
            "sum": z(*shape),
            "sq": z(*shape),
            "el": z(),
            "esum": z(),
            "esq": z(),
            "rows": z(),
            "gap": torch.full((), math.inf, dtype=dtype, device=device),
            "mixed": False,
        }

    def observe(self, x0: torch.Tensor) -> None:
        """Add a (B, ...) batch of clean data. Non-finite values are left out (a row with one is left out
        of the per-dimension sums, its other values still count for the element totals and the grid).

        Raises:
            ValueError: ``x0`` is not a floating-point tensor with a batch dimension.
        """
        if self.frozen:
            return
        if not torch.is_tensor(x0) or not x0.is_floating_point() or x0.ndim < 2:
            raise ValueError("x0: expected a floating-point tensor of shape (batch_size, ...)")
        dtype = torch.float32 if x0.device.type == "mps" else torch.float64
        x = x0.detach().to(dtype)
        if self._open is None:
            self._open = self._new(tuple(x.shape[1:]), dtype, x.device)
        obs = self._open
        obs["rows"] += x.shape[0]
        finite = torch.isfinite(x)
        clean = torch.where(finite, x, torch.zeros_like(x))
        obs["el"] += finite.sum()
        obs["esum"] += clean.sum()
        obs["esq"] += (clean * clean).sum()
        if tuple(x.shape[1:]) == obs["shape"]:
            rows = finite.flatten(1).all(1)
            kept = torch.where(rows.view(-1, *([1] * (x.ndim - 1))), clean, torch.zeros_like(clean))
            obs["n"] += rows.sum()
            obs["sum"] += kept.sum(0)
            obs["sq"] += (kept * kept).sum(0)
        else:  # aspect-ratio buckets and the like: the element totals stand in for the per-dimension sums
            obs["mixed"] = True
        gap = _value_gap(x)
        if gap is not None:
            obs["gap"] = torch.minimum(obs["gap"], gap)

    def merge(self) -> None:
        """Add this process's open sums, summed over every process, to the merged ones (until frozen).

        Under ``torch.distributed`` this is a collective (one ``all_reduce`` of the sums and one of the
        smallest gap; the first merge of a run also agrees on the batches' shape, reading it back once):
        every rank must call it at the same points (the sampler's ``step``), a rank that saw no data
        included. Otherwise nothing is read back to the host: the merged sums stay on the device.
        """
        if self.frozen:
            self._open = None
            return
        obs, self._open = self._open, None
        dist = _distributed()
        if self._merged is None:
            layout = self._agree_layout(obs, dist)
            if layout is None:  # no process has seen data yet
                return
            self._merged = self._empty(*layout)
        m = self._merged
        vec, neg_gap = self._contribution(obs, m)
        if dist:
            torch.distributed.all_reduce(vec)
            torch.distributed.all_reduce(neg_gap, op=torch.distributed.ReduceOp.MAX)
        self._add(m, vec, neg_gap)

    @staticmethod
    def _agree_layout(obs: dict | None, dist: bool) -> tuple | None:
        """``(numel, shape key, per-dimension sums kept, device)`` of the merged sums, the same on every rank."""
        if not dist:
            if obs is None:
                return None
            return obs["sum"].numel(), _shape_key(obs["shape"]), not obs["mixed"], obs["sum"].device
        device = _comm_device(obs["sum"].device if obs is not None else None)  # the data's device: the loss's
        if obs is None:
            key = torch.tensor([_NO_DATA] * 4 + [0.0], dtype=torch.float64, device=device)
        else:
            k, h = float(obs["sum"].numel()), _shape_key(obs["shape"])
            key = torch.tensor([k, -k, h, -h, float(obs["mixed"])], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(key, op=torch.distributed.ReduceOp.MAX)
        k_max, k_min, h_max, h_min, mixed = (float(v) for v in key.cpu())  # once a run, at its first merge
        if k_max == _NO_DATA:
            return None
        same = k_max == -k_min and h_max == -h_min and mixed == 0.0 and k_max > 0
        return int(k_max), h_max, same, device

    @staticmethod
    def _empty(numel: int, key: float, per_dim: bool, device) -> dict:
        z = lambda n=(): torch.zeros(n, dtype=torch.float64, device=device)  # noqa: E731
        return {
            "totals": z(6),
            "gap": torch.full((), math.inf, dtype=torch.float64, device=device),
            "sum": z(numel) if per_dim else None,
            "sq": z(numel) if per_dim else None,
            "numel": numel,
            "key": key,
        }

    @staticmethod
    def _contribution(obs: dict | None, m: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """This process's open sums in the merged layout: ``(vec, -gap)`` on the merged sums' device.

        ``vec`` is ``[n, el, esum, esq, rows, mismatch, sum..., sq...]``; a batch of another shape than the
        merged one sends zero per-dimension sums and ``mismatch = 1`` (the element totals then stand in).
        """
        device = m["totals"].device
        k = m["numel"] if m["sum"] is not None else 0
        if obs is None:
            return torch.zeros(6 + 2 * k, dtype=torch.float64, device=device), torch.full((), -math.inf, dtype=torch.float64, device=device)
        mismatch = bool(obs["mixed"]) or obs["sum"].numel() != m["numel"] or _shape_key(obs["shape"]) != m["key"]
        f = lambda t: t.reshape(-1).to(device, torch.float64)  # noqa: E731
        parts = [f(obs[name]) for name in ("n", "el", "esum", "esq", "rows")]
        parts.append(torch.full((1,), float(mismatch), dtype=torch.float64, device=device))
        if k:
            parts += [torch.zeros(2 * k, dtype=torch.float64, device=device)] if mismatch else [f(obs["sum"]), f(obs["sq"])]
        return torch.cat(parts), -f(obs["gap"]).reshape(())

    @staticmethod
    def _add(m: dict, vec: torch.Tensor, neg_gap: torch.Tensor) -> None:
        m["totals"] = m["totals"] + vec[:6]
        m["gap"] = torch.minimum(m["gap"], -neg_gap)
        if m["sum"] is not None:
            k = m["numel"]
            m["sum"], m["sq"] = m["sum"] + vec[6 : 6 + k], m["sq"] + vec[6 + k :]

    def resolve(self, *, freeze: bool = False) -> None:
        """Set :attr:`variance` and :attr:`min_gap` from the merged sums (:meth:`merge` first, a collective).

        Every rank must call this at the same steps (a refresh) while not :attr:`frozen`. V is the
        per-dimension one when every batch on every rank had one shape; otherwise the variance over all
        elements (an upper bound of it, which still bounds the Bayes MMSE). The statistics freeze once
        about :data:`OBSERVE_SAMPLES` rows were seen over all ranks, or when ``freeze``, but never before
        any data was seen: data given later still reaches the cap and the gate.
        """
        if self.frozen:
            return
        self.merge()
        m = self._merged
        if m is None:
            return
        totals = m["totals"].cpu()  # the synchronisation, at a refresh
        gap = float(m["gap"].cpu())
        rows, elements, mismatched = float(totals[0]), float(totals[1]), float(totals[5])
        if m["sum"] is not None and mismatched == 0 and rows > 0:
            mean, sq = m["sum"].cpu() / rows, m["sq"].cpu() / rows
            variance = float((sq - mean**2).clamp_min(0).mean())
        elif elements > 0:
            variance = max(0.0, float(totals[3] / elements - (totals[2] / elements) ** 2))
        else:
            variance = None
        if variance is not None and math.isfinite(variance):
            self.variance = variance
        if math.isfinite(gap):
            self.min_gap = gap
        if freeze or float(totals[4]) >= OBSERVE_SAMPLES:
            self.frozen = True
            self._merged = None

    def state_dict(self) -> dict:
        """Numbers and (CPU) tensors for an exact resume, without a collective call: the merged sums of
        every process plus this process's unmerged ones (none right after an optimizer step)."""
        state = {"variance": self.variance, "min_gap": self.min_gap, "frozen": self.frozen}
        m = self._merged
        if self._open is not None and not self.frozen:  # off the optimizer-step pattern: this process's batches count too
            layout = self._agree_layout(self._open, False)
            m = self._empty(*layout) if m is None else {k: (v.clone() if torch.is_tensor(v) else v) for k, v in m.items()}
            self._add(m, *self._contribution(self._open, m))
        if m is not None:
            state["open"] = {"totals": m["totals"].cpu().clone(), "gap": m["gap"].cpu().clone().reshape(1)}
            if m["sum"] is not None:
                state["open"]["sum"], state["open"]["sq"] = m["sum"].cpu().clone(), m["sq"].cpu().clone()
            state["open_numel"], state["open_key"] = int(m["numel"]), float(m["key"])
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output, on every rank alike (the saved sums are already merged).

        Raises:
            ValueError: a variance or gap that is not None or a finite number >= 0, or malformed sums.
        """
        for key in ("variance", "min_gap"):
            v = state.get(key)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
                raise ValueError(f"state_dict['data'][{key!r}]: must be None or a finite number >= 0, got {v!r}")
        self.variance, self.min_gap = state.get("variance"), state.get("min_gap")
        # a state frozen with nothing seen (as states once were) is not kept frozen: data given later counts
        self.frozen = bool(state.get("frozen", False)) and (self.variance is not None or self.min_gap is not None)
        self._open = None
        self._merged = None
        o = state.get("open")
        if not isinstance(o, dict) or self.frozen:
            return
        f64 = lambda t: torch.as_tensor(t, dtype=torch.float64).flatten()  # noqa: E731
        if "totals" in o:
            totals = f64(o["totals"])
        else:  # written before the per-step merge: n, el, esum, esq as scalars, rows as "seen"
            totals = torch.cat(
                [f64(o[name]) for name in ("n", "el", "esum", "esq")]
                + [f64([float(state.get("seen", 0)), float(state.get("open_mixed", False))])]
            )
        if totals.shape != (6,) or not bool(torch.isfinite(totals).all()):
            raise ValueError("state_dict['data']['open']: expected 6 finite totals")
        per_dim = "sum" in o and "sq" in o
        numel = int(state.get("open_numel", f64(o["sum"]).numel() if per_dim else 0))
        key = float(state.get("open_key", _shape_key(tuple(torch.as_tensor(o["sum"]).shape)) if per_dim else 0.0))
        self._merged = {
            "totals": totals,
            "gap": f64(o.get("gap", math.inf)).reshape(()),
            "sum": f64(o["sum"]) if per_dim else None,
            "sq": f64(o["sq"]) if per_dim else None,
            "numel": numel,
            "key": key,
        }


#: data on at most this many distinct values gets the per-element bound of a profile start (METHOD.md §5.10)
MAX_GRID_VALUES = 16
#: the pseudo-count of every value in every element (Jeffreys' ½): a value an element was not seen taking in a few
#: hundred samples is unlikely, not impossible, so that the bound is not set below the Bayes MMSE by a short tally
VALUE_PRIOR_COUNT = 0.5


#: the most per-element counts a tally holds (elements × values, float64: 64 MB): one-hot text over a large vocabulary
#: would take gigabytes on every process before the bound's budget (:data:`MAX_BOUND_WORK`) could refuse it
MAX_TALLY_ENTRIES = 1 << 23
#: why a :class:`ValueTally` holds none (the index is what processes exchange)
_NOTHING, _SHAPES, _VALUES, _SIZE = range(4)
_REFUSALS = (
    "no process saw training data",
    "its batches differ in shape",
    f"the data takes more than {MAX_GRID_VALUES} values",
    f"a sample's elements times its values exceed {MAX_TALLY_ENTRIES} counts",
)


class ValueTally:
    """Per-element counts of the values of x0, for data on at most :data:`MAX_GRID_VALUES` values (binarized pixels,
    one-hot tokens): the prior of the per-element posterior mean whose x0 error bounds the Bayes MMSE
    (:func:`per_element_bayes_mmse`, METHOD.md §5.10). A profile start tallies the batches it measures on; the training
    loop never does (:meth:`observe` reads the batch's distinct values back to the host).

    Attributes:
        values: (U,) float64 sorted distinct values seen (CPU), or None.
        counts: (D, U) per-element counts (on the data's device; float64, float32 on MPS), or None.
        rows: samples tallied.
        refused: why the data has no tally (it takes more than :data:`MAX_GRID_VALUES` values, its batches differ in
            shape, a sample would need more than :data:`MAX_TALLY_ENTRIES` counts, no process saw any), or None; set by
            :meth:`resolve` for every process alike.
    """

    def __init__(self):
        self.values: torch.Tensor | None = None
        self.counts: torch.Tensor | None = None
        self.shape: tuple | None = None  # the shape of a sample
        self.rows = 0
        self.refused: str | None = None

    def _refuse(self, why: str) -> None:
        self.refused, self.values, self.counts = why, None, None

    def observe(self, x0: torch.Tensor) -> None:
        """Tally a (B, ...) batch of clean data (rows with a non-finite value are left out).

        Raises:
            ValueError: ``x0`` is not a floating-point tensor with a batch dimension.
        """
        if not torch.is_tensor(x0) or not x0.is_floating_point() or x0.ndim < 2:
            raise ValueError("x0: expected a floating-point tensor of shape (batch_size, ...)")
        if self.refused is not None:
            return
        if self.shape is not None and tuple(x0.shape[1:]) != self.shape:
            self._refuse(_REFUSALS[_SHAPES])
            return
        x = x0.detach().flatten(1).to(torch.float32 if x0.device.type == "mps" else torch.float64)
        x = x[torch.isfinite(x).all(1)]
        if x.shape[0] == 0 or x.shape[1] == 0:
            return
        self.shape = tuple(x0.shape[1:])
        seen = torch.unique(x).cpu().double()  # a read-back: once a pass of the start, which reads back anyway
        values = seen if self.values is None else torch.unique(torch.cat([self.values, seen]))
        if values.numel() > MAX_GRID_VALUES:
            self._refuse(_REFUSALS[_VALUES])
            return
        if x.shape[1] * values.numel() > MAX_TALLY_ENTRIES:
            self._refuse(_REFUSALS[_SIZE])
            return
        counts = torch.zeros(x.shape[1], values.numel(), dtype=x.dtype, device=x.device)
        if self.counts is not None:
            counts[:, torch.searchsorted(values, self.values).to(x.device)] = self.counts
        for j, v in enumerate(values.tolist()):
            counts[:, j] += (x == v).sum(0)
        self.values, self.counts = values, counts
        self.rows += x.shape[0]

    def resolve(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(values, counts)`` summed over every process (CPU float64), or None (:attr:`refused` then says why) when
        any process refused the data or none saw any. Under ``torch.distributed`` a collective (two ``all_reduce``, the
        second only when every rank can tally): every rank must call it at the same point."""
        if not _distributed():
            if self.refused is None and self.values is None:
                self._refuse(_REFUSALS[_NOTHING])
            return None if self.refused is not None else (self.values, self.counts.cpu().double())
        rank, size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        device = _comm_device(self.counts.device if self.counts is not None else None)
        # every rank's row of [status, D, shape key, U, values...] gathered by a sum: status 1 tallied, 0 nothing seen,
        # -k refused (k: the index of its reason)
        rows = torch.zeros(size, 4 + MAX_GRID_VALUES, dtype=torch.float64, device=device)
        if self.refused is not None:
            rows[rank, 0] = -float(_REFUSALS.index(self.refused))
        elif self.values is not None:
            u = self.values.numel()
            head = [1.0, float(self.counts.shape[0]), _shape_key(self.shape), float(u)]
            rows[rank, :4] = torch.tensor(head, dtype=torch.float64)
            rows[rank, 4 : 4 + u] = self.values.to(device)
        torch.distributed.all_reduce(rows)
        rows = rows.cpu()
        seen = rows[rows[:, 0] == 1]
        # the same decision on every rank: nothing more is reduced
        if bool((rows[:, 0] < 0).any()):
            self._refuse(_REFUSALS[int(-rows[:, 0].min())])
            return None
        if seen.shape[0] == 0 or bool((seen[:, 1:3] != seen[0, 1:3]).any()):
            self._refuse(_REFUSALS[_NOTHING] if seen.shape[0] == 0 else _REFUSALS[_SHAPES])
            return None
        values = torch.unique(torch.cat([r[4 : 4 + int(r[3])] for r in seen]))
        if values.numel() > MAX_GRID_VALUES:
            self._refuse(_REFUSALS[_VALUES])
            return None
        counts = torch.zeros(int(seen[0, 1]), values.numel(), dtype=torch.float64, device=device)
        if self.values is not None:
            mine = self.counts.cpu().double().to(device)  # through the CPU: MPS has no float64
            counts[:, torch.searchsorted(values, self.values).to(device)] = mine
        torch.distributed.all_reduce(counts)
        return values, counts.cpu()


#: the arithmetic :func:`per_element_bayes_mmse` may take at a profile start (distinct elements × values² × noise nodes
#: × levels, measured at about 1e8 a second on one CPU core: 10 s; binarized 16x16 images take 1.8e8): data on 3-16
#: values with many distinct elements would take minutes to hours on every process before step 1, and its start is then
#: kept as measured (:func:`per_element_bound_work`)
MAX_BOUND_WORK = 1e9
BOUND_WORK_PER_SECOND = 1e8
_NOISE_NODES = 1201  # n ∈ [−12, 12] every 0.02


def _distinct_rows(counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.unique(counts, dim=0, return_counts=True)


def per_element_bound_work(counts: torch.Tensor, num_sigmas: int) -> float:
    """The arithmetic of :func:`per_element_bayes_mmse` for ``counts`` ((D, U)) at ``num_sigmas`` levels: distinct
    rows × U² × noise nodes × levels (compare with :data:`MAX_BOUND_WORK`)."""
    rows = _distinct_rows(torch.as_tensor(counts, dtype=torch.float64))[0]
    return float(rows.shape[0]) * rows.shape[1] ** 2 * _NOISE_NODES * num_sigmas


def per_element_bayes_mmse(
    values: torch.Tensor, counts: torch.Tensor, sigmas: torch.Tensor, *, prior_count: float = VALUE_PRIOR_COUNT
) -> torch.Tensor:
    """The x0 error per element (mean over elements; VE σ) of the per-element posterior mean ``E[x0_i | x_i]``, with
    ``x_i = x0_i + σ·n`` and each element's own distribution of values, estimated from ``counts`` plus ``prior_count``
    a value. It uses no other element, so it is a predictor and its error bounds the Bayes MMSE at every σ, like the
    identity's σ² and the constant's V (METHOD.md §5.4, §5.10); for data on a few values it is far below σ² where an
    element's value is resolved (two values a gap g apart: it falls as exp(−g²/8σ²)). The noise is integrated by the
    trapezoid rule on n ∈ [−12, 12] every 0.02 (the posterior's switch, of width about σ/g in n at n ≈ g/2σ, is
    resolved wherever it lies inside; beyond, the error is below e⁻⁷² of the variance), σ clamped to [1e-30, 1e30]
    (the limits, 0 and the variance, to float64 precision); elements with equal counts are computed once.

    Args:
        values: (U,) distinct finite values (x0 units). counts: (D, U) per-element counts of them, D >= 1
            (:class:`ValueTally`); with ``prior_count`` 0 every row must count something.
        sigmas: (S,) VE σ > 0 (at equal SNR the same on VP, ``x_t/a``, and flow, ``x_s/(1 − s)``).

    Returns:
        (S,) float64 errors (x0 units squared), each in [0, the per-element variance of the smoothed counts] (above the
        data's own variance by at most what the pseudo-counts add).

    Raises:
        ValueError: values that are not distinct and finite, shapes that do not match, counts that are not finite and
        >= 0 (or an empty row without a pseudo-count), σ that are not finite and > 0.
    """
    values = torch.as_tensor(values, dtype=torch.float64)
    counts = torch.as_tensor(counts, dtype=torch.float64)
    sigmas = torch.as_tensor(sigmas, dtype=torch.float64)
    if values.ndim != 1 or values.numel() < 1 or not bool(torch.isfinite(values).all()) or torch.unique(values).numel() != values.numel():
        raise ValueError(f"values: expected a (U,) tensor of distinct finite values, got {values.tolist()[:17]}")
    if counts.ndim != 2 or counts.shape[0] < 1 or counts.shape[1] != values.numel():
        raise ValueError(f"counts: expected shape (D >= 1, {values.numel()}) for {values.numel()} values, got {tuple(counts.shape)}")
    if not bool(torch.isfinite(counts).all() and (counts >= 0).all()) or not (math.isfinite(prior_count) and prior_count >= 0):
        raise ValueError("counts, prior_count: must be finite and >= 0")
    if prior_count == 0 and bool((counts.sum(1) == 0).any()):
        raise ValueError("counts: a row counts nothing, and prior_count 0 gives it no distribution of values")
    if sigmas.ndim > 1 or not bool(torch.isfinite(sigmas).all() and (sigmas > 0).all()):
        raise ValueError("sigmas: expected a (S,) tensor of finite VE sigma > 0")
    rows, weight = _distinct_rows(counts)
    prior = rows + prior_count
    prior = prior / prior.sum(1, keepdim=True)  # (R, U)
    weight = weight.double() / counts.shape[0]
    nodes = torch.linspace(-12.0, 12.0, _NOISE_NODES, dtype=torch.float64)
    w = torch.exp(-0.5 * nodes**2)
    w[[0, -1]] *= 0.5  # the trapezoid rule's ends
    w = w / w.sum()  # ∫ f(n) N(n; 0, 1) dn ≈ Σ w f(n)
    log_prior = torch.log(prior.clamp_min(1e-300))[:, :, None]  # (R, U', 1)
    chunk = max(1, int(4e6 // (values.numel() * _NOISE_NODES)))  # rows at a time: about 32 MB a (rows, U', Q) tensor
    out = torch.zeros(sigmas.numel(), dtype=torch.float64)
    for s, sigma in enumerate(sigmas.reshape(-1).clamp(1e-30, 1e30).tolist()):
        for u, v in enumerate(values.tolist()):  # the true value v, observed as y = v + σn
            dist = ((v - values)[:, None] + sigma * nodes[None, :]) ** 2 / (2 * sigma * sigma)  # (U', Q): (y − v')²/2σ²
            for r in range(0, rows.shape[0], chunk):
                post = torch.softmax(log_prior[r : r + chunk] - dist[None], dim=1)  # (R, U', Q)
                err = (((post * values[None, :, None]).sum(1) - v) ** 2 * w).sum(1)  # (R,): the error given v
                out[s] += (prior[r : r + chunk, u] * err * weight[r : r + chunk]).sum()
    return out
