"""What an adaptive sampler learns about the clean data x0 it sees (METHOD.md §5.4, §5.5).

Two numbers, both properties of the data rather than of the model:

* ``variance``: ``V = mean_i Var(x0_i)``, the per-dimension variance, which bounds the Bayes MMSE at
  every σ (the constant predictor ``E[x0]`` achieves it): the ``"auto"`` m̂ cap;
* ``min_gap``: the smallest gap between distinct values of x0, the scale below which data on a grid
  (binarized pixels, one-hot tokens, 8-bit intensities) has nothing left to resolve: the ``"auto"``
  gate pivot is a tenth of it.

:class:`DataStatistics` accumulates them on the data's own device (no host synchronisation per
step) and resolves them at a refresh, reduced over processes so that every rank holds the same
values, until about :data:`OBSERVE_SAMPLES` samples were seen.
"""

from __future__ import annotations

import math

import torch

__all__ = ["DataStatistics", "OBSERVE_SAMPLES"]

OBSERVE_SAMPLES = 4096  # x0 samples the statistics are measured on
_OBSERVE_VALUES = 1 << 16  # values of one batch the value grid is measured on


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1


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
        self._open: dict | None = None  # the open sums, on the data's device (see _new)
        self._seen = 0  # batch rows offered to observe (an upper bound of the valid ones; no sync needed)

    @staticmethod
    def _new(shape: tuple, dtype, device) -> dict:
        z = lambda *s: torch.zeros(s, dtype=dtype, device=device)  # noqa: E731
        # n, sum, sq: per-dimension sums of the rows of the first shape seen; el, esum, esq: element totals
        # of every batch (the fallback when shapes differ); gap: smallest value gap; mixed: shapes differed
        return {"shape": shape, "n": z(), "sum": z(*shape), "sq": z(*shape), "el": z(), "esum": z(), "esq": z(),
                "gap": torch.full((), math.inf, dtype=dtype, device=device), "mixed": False}

    def observe(self, x0: torch.Tensor) -> None:
        """Add a (B, ...) batch of clean data. Non-finite values are left out (a row with one is left out
        of the per-dimension sums, its other values still count for the element totals and the grid).

        Raises:
            ValueError: ``x0`` is not a floating-point tensor with a batch dimension.
        """
        if self.frozen or self._seen >= OBSERVE_SAMPLES:
            return
        if not torch.is_tensor(x0) or not x0.is_floating_point() or x0.ndim < 2:
            raise ValueError("x0: expected a floating-point tensor of shape (batch_size, ...)")
        dtype = torch.float32 if x0.device.type == "mps" else torch.float64
        x = x0.detach().to(dtype)
        if self._open is None:
            self._open = self._new(tuple(x.shape[1:]), dtype, x.device)
        obs = self._open
        if obs["sum"].device != x.device or obs["sum"].dtype != dtype:  # e.g. resumed on another device
            for key, value in obs.items():
                if torch.is_tensor(value):
                    obs[key] = value.to(x.device, dtype)
        self._seen += x.shape[0]
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
        v = x.flatten()
        if v.numel() < 2:
            return
        if v.numel() > _OBSERVE_VALUES:
            v = v[:: v.numel() // _OBSERVE_VALUES + 1]
        ok = torch.isfinite(v)
        # non-finite values become copies of an existing finite value: no new gap, no sync
        v = torch.where(ok, v, torch.where(ok, v, torch.full_like(v, math.inf)).amin().expand_as(v))
        v = torch.sort(v).values
        d = v[1:] - v[:-1]
        # gaps below float rounding of the data's range count as equal values
        tol = 1e-5 * (v[-1] - v[0]).abs().clamp_min(1e-12)
        gap = torch.where(torch.isfinite(d) & (d > tol), d, torch.full_like(d, math.inf)).amin()
        obs["gap"] = torch.minimum(obs["gap"], gap)

    def resolve(self, *, freeze: bool = False) -> None:
        """Reduce the open sums over processes and set :attr:`variance` and :attr:`min_gap`.

        Every rank must call this at the same steps (a refresh) while not :attr:`frozen`; a rank that saw
        no data joins with empty sums. V is the per-dimension one when every batch on every rank had one
        shape; otherwise the variance over all elements (an upper bound of it, which still bounds the
        Bayes MMSE). The statistics freeze once about :data:`OBSERVE_SAMPLES` rows were seen over all
        ranks, or when ``freeze``.
        """
        if self.frozen:
            return
        dist = _distributed()
        obs = self._open
        if obs is None and not dist:
            if freeze:
                self.frozen = True
            return
        if obs is None:
            obs = self._new((), torch.float64, torch.device("cpu"))
            obs["mixed"] = True
        device = obs["sum"].device
        if dist and torch.distributed.get_backend() == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        elif dist:
            device = torch.device("cpu")
        f64 = torch.float64 if device.type != "mps" else torch.float32
        k = obs["sum"].numel() if obs["shape"] else 0
        shape_key = torch.tensor([k, -k, float(obs["mixed"] or self._open is None)], dtype=f64, device=device)
        totals = torch.stack([obs["n"], obs["el"], obs["esum"], obs["esq"]]).to(device, f64)
        gap = obs["gap"].reshape(1).to(device, f64)
        if dist:
            torch.distributed.all_reduce(shape_key, op=torch.distributed.ReduceOp.MAX)
            torch.distributed.all_reduce(totals)
            torch.distributed.all_reduce(gap, op=torch.distributed.ReduceOp.MIN)
        same_shape = bool(shape_key[0] == -shape_key[1]) and not bool(shape_key[2]) and k > 0
        per_dim = None
        if same_shape:
            per_dim = torch.cat([obs["sum"].flatten(), obs["sq"].flatten()]).to(device, f64)
            if dist:
                torch.distributed.all_reduce(per_dim)
            per_dim = per_dim.cpu().to(torch.float64)
        totals, gap = totals.cpu().to(torch.float64), float(gap.cpu())  # the synchronisation, at a refresh
        rows, elements = float(totals[0]), float(totals[1])
        if per_dim is not None and rows > 0:
            mean, sq = per_dim[:k] / rows, per_dim[k:] / rows
            variance = float((sq - mean**2).clamp_min(0).mean())
        elif elements > 0:
            variance = max(0.0, float(totals[3] / elements - (totals[2] / elements) ** 2))
        else:
            variance = None
        if variance is not None and math.isfinite(variance):
            self.variance = variance
        if math.isfinite(gap):
            self.min_gap = gap
        seen = torch.tensor([float(self._seen)], dtype=torch.float64)
        if dist:
            seen = seen.to(device)
            torch.distributed.all_reduce(seen)
        if freeze or float(seen.cpu()) >= OBSERVE_SAMPLES:
            self.frozen = True
            self._open = None

    def state_dict(self) -> dict:
        """Numbers and (CPU) tensors for an exact resume."""
        state = {"variance": self.variance, "min_gap": self.min_gap, "frozen": self.frozen, "seen": self._seen}
        if self._open is not None:
            obs = self._open
            state["open"] = {key: (value.cpu().clone().reshape(-1) if key in ("n", "el", "esum", "esq", "gap") else
                                   value.cpu().clone()) for key, value in obs.items() if torch.is_tensor(value)}
            state["open_mixed"] = bool(obs["mixed"])
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output.

        Raises:
            ValueError: a variance or gap that is not None or a finite number >= 0.
        """
        for key in ("variance", "min_gap"):
            v = state.get(key)
            if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
                raise ValueError(f"state_dict['data'][{key!r}]: must be None or a finite number >= 0, got {v!r}")
        self.variance, self.min_gap = state.get("variance"), state.get("min_gap")
        self.frozen = bool(state.get("frozen", False))
        self._seen = int(state.get("seen", 0))
        self._open = None
        if isinstance(state.get("open"), dict):
            o = state["open"]
            s = torch.as_tensor(o["sum"])
            self._open = {"shape": tuple(s.shape), "sum": s.clone(), "sq": torch.as_tensor(o["sq"]).clone(),
                          "mixed": bool(state.get("open_mixed", False)),
                          **{key: torch.as_tensor(o[key]).reshape(()).to(s.dtype).clone() for key in ("n", "el", "esum", "esq", "gap")}}
