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
        self._open: dict | None = None  # n, shape, sum, sq, gap (on the data's device)

    def observe(self, x0: torch.Tensor) -> None:
        """Add a (B, ...) batch of clean data.

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
            self._open = {"n": 0, "shape": tuple(x.shape[1:]), "sum": torch.zeros(x.shape[1:], dtype=dtype, device=x.device),
                          "sq": torch.zeros(x.shape[1:], dtype=dtype, device=x.device),
                          "gap": torch.full((), math.inf, dtype=dtype, device=x.device)}
        obs = self._open
        if obs["n"] >= OBSERVE_SAMPLES:
            return
        if obs["sum"].device != x.device or obs["sum"].dtype != dtype:  # e.g. resumed on another device
            for key in ("sum", "sq", "gap"):
                obs[key] = obs[key].to(x.device, dtype)
        if tuple(x.shape[1:]) == obs["shape"]:  # another shape (aspect-ratio buckets): value grid only
            obs["sum"] += x.sum(0)
            obs["sq"] += (x * x).sum(0)
            obs["n"] += x.shape[0]
        v = x.flatten()
        if v.numel() < 2:
            return
        if v.numel() > _OBSERVE_VALUES:
            v = v[:: v.numel() // _OBSERVE_VALUES + 1]
        v = torch.sort(v).values
        d = v[1:] - v[:-1]
        # gaps below float rounding of the data's range count as equal values
        tol = 1e-5 * (v[-1] - v[0]).abs().clamp_min(1e-12)
        gap = torch.where(d > tol, d, torch.full_like(d, math.inf)).amin()
        obs["gap"] = torch.minimum(obs["gap"], gap)

    def resolve(self, *, freeze: bool = False) -> None:
        """Reduce the open sums over processes and set :attr:`variance` and :attr:`min_gap`.

        Every rank must call this at the same steps (a refresh) while not :attr:`frozen`. The statistics
        freeze once about :data:`OBSERVE_SAMPLES` samples were seen over all ranks, or when ``freeze``.
        """
        if self.frozen:
            return
        dist = _distributed()
        obs = self._open
        if obs is None and not dist:
            if freeze:
                self.frozen = True
            return
        if obs is None:  # this rank saw nothing (yet): join the reductions with empty statistics
            raise RuntimeError("data statistics: this process saw no data while others may have; call observe() on "
                               "every rank before the first refresh")
        n = torch.tensor([float(obs["n"])], dtype=obs["sum"].dtype, device=obs["sum"].device)
        packed = torch.cat([n, obs["sum"].flatten(), obs["sq"].flatten()])
        gap = obs["gap"].clone().reshape(1)
        if dist:
            backend = torch.distributed.get_backend()
            device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
            packed, gap = packed.to(device), gap.to(device)
            torch.distributed.all_reduce(packed)
            torch.distributed.all_reduce(gap, op=torch.distributed.ReduceOp.MIN)
        packed, gap = packed.cpu().to(torch.float64), float(gap.cpu())  # the one synchronisation, at a refresh
        total = float(packed[0])
        if total > 0:
            k = obs["sum"].numel()
            mean, sq = packed[1:1 + k] / total, packed[1 + k:] / total
            self.variance = float((sq - mean**2).clamp_min(0).mean())
        if math.isfinite(gap):
            self.min_gap = gap
        if freeze or total >= OBSERVE_SAMPLES:
            self.frozen = True
            self._open = None

    def state_dict(self) -> dict:
        """Numbers and (CPU) tensors for an exact resume."""
        state = {"variance": self.variance, "min_gap": self.min_gap, "frozen": self.frozen}
        if self._open is not None:
            obs = self._open
            state.update(observed=obs["n"], sum=obs["sum"].cpu().clone(), sq=obs["sq"].cpu().clone(),
                         gap=obs["gap"].cpu().clone().reshape(1))
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
        self._open = None
        if "observed" in state:
            s, sq = torch.as_tensor(state["sum"]), torch.as_tensor(state["sq"])
            self._open = {"n": int(state["observed"]), "shape": tuple(s.shape), "sum": s.clone(), "sq": sq.clone(),
                          "gap": torch.as_tensor(state["gap"]).reshape(()).to(s.dtype).clone()}
