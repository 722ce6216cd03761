"""The optimal empirical denoiser of a finite data set and its entropy-rate profile (METHOD.md §2, §7:
it describes memorisation, and approaches the population profile only as the data set grows)."""

from __future__ import annotations

import math

import torch

from ..data_statistics import smallest_value_gap
from .grid import _F64, DEFAULT_SIGMA_RANGE, Profile, log_sigma_grid
from .profiles import _grid_sigmas, _progress, profile_from_errors

__all__ = ["profile_from_dataset"]


@torch.no_grad()
def profile_from_dataset(
    x: torch.Tensor,
    *,
    sigmas=None,
    num_levels: int = 32,
    sigma_min: float = DEFAULT_SIGMA_RANGE[0],
    sigma_max: float = DEFAULT_SIGMA_RANGE[1],
    num_noise_draws: int = 256,
    chunk_size: int = 4096,
    query_batch_size: int = 256,
    generator: torch.Generator | None = None,
    device=None,
    dtype: torch.dtype = torch.float64,
    progress: bool = False,
    gate: str | float | None = "auto",
    gate_fallback: float = 0.2,
    smoothing: float = 0.0,
    loss_weighting="none",
    prediction_type: str = "sample",
    snr_gamma: float | None = None,
    sigma_data: float = 0.5,
) -> Profile:
    """The optimal-empirical-denoiser profile of a finite data set (METHOD.md §2, §6). No network.

    For the data set ``{x_i}`` (uniform prior over its N points) the posterior given
    ``x = x_j + σ·ε`` has weights ``w_i(x) = softmax_i(−‖x − x_i‖²/(2σ²))`` and the MMSE is
    ``mmse(σ) = E_{j,ε}[Σ_i w_i‖x_i‖² − ‖Σ_i w_i x_i‖²]`` (the posterior variance), divided here by
    the number of elements D (per element, like model errors). It is evaluated exactly per query by
    one streaming pass over the data in chunks of ``chunk_size`` points, with distances from
    ``‖x‖² − 2x·x_i + ‖x_i‖²`` and a running log-sum-exp (so only a (query batch × chunk) block is in
    memory: 60k MNIST images of 784 dimensions take the data plus a few MB). The posterior variance
    is computed about the query, ``Σ w_i‖x_i − x‖² − ‖Σ w_i x_i − x‖²`` (same value, less
    cancellation). The expectation is Monte Carlo over ``num_noise_draws`` queries per level, each
    with its own uniformly drawn j and ε; ``mmse_se`` is its standard error.

    **This describes memorisation for small data sets** (METHOD.md §7): the empirical denoiser
    knows the N points, so for σ below the typical nearest-neighbour distance its mmse is ≈ 0 even
    for continuous data (1.5k 8x8 digits: ≈ 0 below σ ≈ 0.3), and the profile looks "discrete". It
    approaches the population profile only as N grows. For data from two points ±1 (each half the
    time) it is the two-point profile of :func:`analytic_mmse_two_point`.

    Args:
        x: (N, ...) data, any float dtype, scaled as the model sees it (e.g. images in [−1, 1]); N >= 2.
        sigmas: (K,) VE σ, or ``None`` for ``num_levels`` log-uniform bin centres over
            ``[sigma_min, sigma_max]`` (default the EDM range 0.002..80).
        num_noise_draws: queries (j, ε) per level.
        chunk_size: data points per block of the streaming pass.
        query_batch_size: queries evaluated together.
        generator: ``torch.Generator`` for j and ε (default CPU, unseeded).
        device: where to compute (default x's device).
        dtype: compute dtype (float64 default: at small σ the softmax logits need it).
        progress: tqdm progress bar over levels.
        gate, gate_fallback, smoothing, loss_weighting, prediction_type, snr_gamma, sigma_data: see
            :func:`profile_from_errors` (default: π = ρ̂).

    Returns:
        :class:`Profile`.

    Raises:
        ValueError: bad arguments (each names the argument).
    """
    if not torch.is_tensor(x) or not x.is_floating_point() or x.ndim < 1 or x.shape[0] < 2:
        raise ValueError("x: expected a floating-point tensor of shape (N, ...) with N >= 2")
    for arg, value in (("num_noise_draws", num_noise_draws), ("chunk_size", chunk_size), ("query_batch_size", query_batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{arg}: must be an int >= 1, got {value!r}")
    if sigmas is None:
        sig = torch.exp(log_sigma_grid(None, num_levels, sigma_min=sigma_min, sigma_max=sigma_max))
    else:
        sig = _grid_sigmas(sigmas, num_levels, None)
    device = torch.device(device) if device is not None else x.device
    n = x.shape[0]
    data = x.detach().reshape(n, -1).to(device)
    dim = data.shape[1]
    # translation leaves the posterior variance unchanged; centring makes norms smaller
    data = data - data.to(dtype).mean(0).to(data.dtype)
    store_dtype = dtype if n * dim <= 50_000_000 else data.dtype
    data = data.to(store_dtype)
    norms = data.to(dtype).pow(2).sum(1)  # (N,)
    gen_device = generator.device if generator is not None else torch.device("cpu")

    k_levels = sig.numel()
    mmse = torch.empty(k_levels, dtype=_F64)
    se = torch.empty(k_levels, dtype=_F64)
    bar = _progress(k_levels, progress, "profile_from_dataset")
    for k in range(k_levels):
        s = float(sig[k])
        values = []
        for q0 in range(0, num_noise_draws, query_batch_size):
            nq = min(query_batch_size, num_noise_draws - q0)
            j = torch.randint(n, (nq,), generator=generator, device=gen_device).to(device)
            eps = torch.randn((nq, dim), generator=generator, device=gen_device, dtype=torch.float64).to(device, dtype)
            xq = data[j].to(dtype) + s * eps
            values.append(_posterior_variance(xq, data, norms, s, chunk_size, dtype).cpu())
        v = torch.cat(values).to(_F64) / dim
        mmse[k] = v.mean()
        se[k] = v.std(unbiased=True) / math.sqrt(v.numel()) if v.numel() >= 2 else math.nan
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    meta = {
        "source": "dataset",
        "num_data": int(n),
        "dim": int(dim),
        "num_noise_draws": int(num_noise_draws),
        "note": "optimal empirical denoiser: describes memorisation of this finite data set (METHOD.md section 7)",
    }
    return profile_from_errors(
        sig,
        mmse,
        se,
        gate=gate,
        gate_fallback=gate_fallback,
        smoothing=smoothing,
        loss_weighting=loss_weighting,
        prediction_type=prediction_type,
        snr_gamma=snr_gamma,
        sigma_data=sigma_data,
        num_samples=num_noise_draws,
        meta=meta,
        data_min_gap=smallest_value_gap(x),  # the value-grid gate reads the data set as training does (§5.5)
    )


def _posterior_variance(xq, data, norms, sigma, chunk_size, dtype) -> torch.Tensor:
    """(Q,) ``Σ_i w_i‖x_i − x‖² − ‖Σ_i w_i x_i − x‖²`` for queries ``xq`` (Q, D), streaming over data."""
    nq = xq.shape[0]
    qn = xq.pow(2).sum(1)  # (Q,)
    run_max = torch.full((nq,), -math.inf, dtype=dtype, device=xq.device)
    run_sum = torch.zeros(nq, dtype=dtype, device=xq.device)
    run_mean = torch.zeros_like(xq)  # Σ p_i x_i
    run_d = torch.zeros(nq, dtype=dtype, device=xq.device)  # Σ p_i ‖x_i − x‖²
    inv = 1.0 / (2.0 * sigma * sigma)
    for c0 in range(0, data.shape[0], chunk_size):
        xc = data[c0 : c0 + chunk_size].to(dtype)
        # ‖x − x_i‖² = ‖x‖² − 2x·x_i + ‖x_i‖², (Q, C); few full passes over the block (CPU-bound)
        dist = torch.addmm(qn[:, None] + norms[None, c0 : c0 + chunk_size], xq, xc.T, alpha=-2.0).clamp_min_(0)
        new_max = torch.maximum(run_max, -dist.min(1).values * inv)  # running max of the logits −d/(2σ²)
        scale = torch.exp(run_max - new_max)  # exp(-inf) = 0 at the first chunk
        p = dist.mul(-inv).sub_(new_max[:, None]).exp_()
        run_sum = run_sum * scale + p.sum(1)
        run_mean = torch.addmm(run_mean * scale[:, None], p, xc)
        run_d = run_d * scale + torch.einsum("qc,qc->q", p, dist)
        run_max = new_max
    mean = run_mean / run_sum[:, None]
    return (run_d / run_sum - (mean - xq).pow(2).sum(1)).clamp_min(0)
