"""Independent reference formulas for the core test suite.

Nothing here imports diffusers_infonoise: every value is written from METHOD.md's formulas, from
diffusers' own schedulers, or from scipy, so that the tests compare the package against numbers it
did not produce.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from scipy import stats

# ---------------------------------------------------------------------------------------------
# Analytic MMSE profiles (METHOD.md §2), per dimension, x_σ = x0 + σ·ε
# ---------------------------------------------------------------------------------------------


def gauss_mmse(sigma, s_d: float):
    """x0 ~ N(0, s_d²): mmse(σ) = σ²·s_d²/(σ² + s_d²)."""
    sigma = np.asarray(sigma, dtype=np.float64)
    return sigma**2 * s_d**2 / (sigma**2 + s_d**2)


def _log_sech2(y):
    """log(1 − tanh²(y)) = log sech²(y), stable for any |y|."""
    a = np.abs(y)
    return math.log(4.0) - 2.0 * a - 2.0 * np.log1p(np.exp(-2.0 * a))


@functools.lru_cache(maxsize=1)
def _two_point_table():
    log_s = np.linspace(math.log(0.02), math.log(5000.0), 1500)
    return log_s, np.log(np.maximum(_two_point_mmse_direct(np.exp(log_s)), 1e-300))


def two_point_mmse(sigma):
    """Two-point mmse at any σ: the direct quadrature of :func:`_two_point_mmse_direct` tabulated on
    1500 log-spaced σ in [0.02, 5000] and interpolated linearly in (log σ, log mmse); 0 below 0.02,
    and ``1 − 1/σ²`` (first order, error O(σ⁻⁴)) above 5000."""
    sigma = np.asarray(sigma, dtype=np.float64)
    log_s, log_m = _two_point_table()
    with np.errstate(divide="ignore"):
        x = np.log(sigma)
    out = np.exp(np.interp(x, log_s, log_m))
    out = np.where(sigma < 0.02, 0.0, out)
    with np.errstate(divide="ignore"):
        out = np.where(sigma > 5000.0, 1.0 - 1.0 / sigma**2, out)
    return out


def two_point_mmse_with_prior(p: float, sigma: float) -> float:
    """E[(x0 − E[x0|x])²] for x0 = +1 with probability p, else −1, and x = x0 + σz: the posterior mean is
    tanh(atanh(2p − 1) + x/σ²); the expectation over z by the trapezoid rule on a grid of step 10⁻³ (σ ≳ 0.1). The
    integrand is analytic in z with poles π·σ/2 from the real axis, so the rule's error is about e^(−π²σ/h): at
    machine precision here (a step of 1.2·10⁻⁴, 8 times finer, gives the same values to 3·10⁻¹⁴ for σ ≥ 0.05)."""
    z = np.linspace(-12, 12, 24001)
    phi = np.exp(-(z**2) / 2) / np.sqrt(2 * np.pi)
    err = 0.0
    for x0, w in ((1.0, p), (-1.0, 1 - p)):
        mean = np.tanh(np.arctanh(2 * p - 1) + (x0 + sigma * z) / sigma**2)
        err += w * np.trapezoid(phi * (mean - x0) ** 2, z)
    return float(err)


def _two_point_mmse_direct(sigma):
    """x0 ∈ {−1, +1}: mmse(σ) = 1 − E[tanh²(x/σ²)] = E[sech²(x/σ²)], x = 1 + σ·ε (by symmetry).

    Dense midpoint quadrature over ε ∈ [−45, 45] with a step fine enough to resolve sech²'s width
    (σ in ε units), done in the log domain so that the small-σ values (≈ e^(−1/(2σ²))) are not lost
    to cancellation in 1 − tanh². Below σ = 0.02 the value is < 1e−500 and returned as 0.
    """
    out = []
    for s in np.atleast_1d(np.asarray(sigma, dtype=np.float64)):
        if not np.isfinite(s):
            out.append(1.0)
            continue
        if s < 0.02:
            out.append(0.0)
            continue
        h = min(0.01, s / 25.0)
        n = int(math.ceil(90.0 / h))
        eps = -45.0 + (np.arange(n) + 0.5) * (90.0 / n)
        log_phi = -0.5 * eps**2 - 0.5 * math.log(2 * math.pi)
        y = (1.0 + s * eps) / s**2
        out.append(float(np.sum(np.exp(log_phi + _log_sech2(y))) * (90.0 / n)))
    return np.array(out)


# ---------------------------------------------------------------------------------------------
# Numerical CDFs by quadrature of a log density (independent of any cdf code)
# ---------------------------------------------------------------------------------------------


def quadrature_cdf(log_prob_fn, lo: float, hi: float, n: int = 400_000):
    """Cumulative integral of exp(log_prob_fn) by the midpoint rule on ``n`` cells of [lo, hi].

    Returns ``(edges, cum)`` with cum[0] = 0; cum[-1] is the total mass (not normalised).
    ``log_prob_fn`` takes a float64 torch tensor and returns log densities.
    """
    edges = np.linspace(lo, hi, n + 1)
    mids = 0.5 * (edges[1:] + edges[:-1])
    dens = torch.exp(log_prob_fn(torch.from_numpy(mids))).numpy()
    dens = np.where(np.isfinite(dens), dens, 0.0)
    cum = np.concatenate([[0.0], np.cumsum(dens) * (edges[1] - edges[0])])
    return edges, cum


def ks_pvalue(samples, edges, cum) -> float:
    """Kolmogorov-Smirnov p-value of ``samples`` against the normalised quadrature CDF."""
    total = cum[-1]
    return float(stats.kstest(np.asarray(samples, dtype=np.float64), lambda v: np.interp(v, edges, cum / total)).pvalue)


# ---------------------------------------------------------------------------------------------
# Paths, written from METHOD.md §1
# ---------------------------------------------------------------------------------------------


def vp_sigmas(alphas_cumprod) -> np.ndarray:
    """σ_t = sqrt((1 − ᾱ_t)/ᾱ_t) (inf where ᾱ = 0)."""
    ac = np.asarray(alphas_cumprod, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.sqrt((1.0 - ac) / ac)


def vp_cell_edges(alphas_cumprod) -> np.ndarray:
    """(N+1,) log-σ edges of each step's cell: midpoints to its neighbours, the end cells
    symmetric about their step; a σ = inf last step is placed one previous gap further (§5.1, §5.8)."""
    ls = np.log(vp_sigmas(alphas_cumprod))
    if not np.isfinite(ls[-1]):
        ls = ls.copy()
        ls[-1] = 2 * ls[-2] - ls[-3]
    mid = 0.5 * (ls[1:] + ls[:-1])
    return np.concatenate([[ls[0] - (mid[0] - ls[0])], mid, [ls[-1] + (ls[-1] - mid[-1])]])


def edm_c_out(sigma, sigma_data: float):
    return sigma * sigma_data / np.sqrt(sigma**2 + sigma_data**2)


def edm_lambda(sigma, sigma_data: float):
    """EDM's loss weight on the denoiser error: (σ² + σ_d²)/(σ·σ_d)²."""
    return (sigma**2 + sigma_data**2) / (sigma * sigma_data) ** 2


def flow_s(sigma):
    return sigma / (1.0 + sigma)


def truncated_normal_masses(edges, mean: float, std: float) -> np.ndarray:
    """Bin masses of N(mean, std²) restricted to [edges[0], edges[-1]] (scipy, not the package)."""
    c = stats.norm.cdf(np.asarray(edges), loc=mean, scale=std)
    m = np.diff(c)
    return m / m.sum()


def uniform_t_masses_on_grid(alphas_cumprod, grid_edges) -> np.ndarray:
    """Mass of each log-σ grid bin under uniform t: each step's 1/N spread uniformly over its cell."""
    cells = vp_cell_edges(alphas_cumprod)
    n = cells.size - 1
    out = np.zeros(len(grid_edges) - 1)
    for k in range(out.size):
        a, b = grid_edges[k], grid_edges[k + 1]
        overlap = np.clip(np.minimum(cells[1:], b) - np.maximum(cells[:-1], a), 0, None)
        out[k] = np.sum(overlap / (cells[1:] - cells[:-1])) / n
    return out / out.sum()


def grid_by_hand(kind: str, scheduler, num_bins: int = 64, num_flow_steps: int = 1000):
    """Grid edges (METHOD.md §5.1) and base masses (§5.2) of ``num_bins`` bins, written independently of the package:
    ``kind`` "ve" (EDM's σ range, log-normal base), "vp" (``scheduler``'s ᾱ table, uniform t) or "flow" (the range of
    ``num_flow_steps`` steps, logit-normal(0, 1): logit(s) = log σ)."""
    if kind == "ve":
        lo, hi = math.log(0.002), math.log(80.0)
    elif kind == "vp":
        cells = vp_cell_edges(scheduler.alphas_cumprod.double().numpy())
        lo, hi = cells[0], cells[-1]
    else:
        lo, hi = math.log((1 / num_flow_steps) / (1 - 1 / num_flow_steps)), math.log((1 - 1 / num_flow_steps) / (1 / num_flow_steps))
    edges = np.linspace(lo, hi, num_bins + 1)
    if kind == "ve":
        base = truncated_normal_masses(edges, -1.2, 1.2)  # EDM log-normal
    elif kind == "vp":
        base = uniform_t_masses_on_grid(scheduler.alphas_cumprod.double().numpy(), edges)  # uniform t
    else:
        base = truncated_normal_masses(edges, 0.0, 1.0)  # logit-normal(0, 1): logit(s) = log σ
    return edges, base


# ---------------------------------------------------------------------------------------------
# Losses, written from METHOD.md §3-§4: the x0-error conversion and the loss weight on the x0 error
# ---------------------------------------------------------------------------------------------


def factor_by_hand(pred: str, sig, sigma_data: float = 0.5):
    """x0-error conversion c(σ) of METHOD.md §3 (x0 error = c·loss); "edm_f" is EDM's raw network output F."""
    s = sig / (1 + sig)
    return {
        "sample": np.ones_like(sig),
        "epsilon": sig**2,
        "v_prediction": sig**2 / (1 + sig**2),
        "flow": s**2,
        "edm_f": (sig * sigma_data) ** 2 / (sig**2 + sigma_data**2),
    }[pred]


def weight_by_hand(pred: str, weighting: str, sig, gamma: float = 5.0, sigma_data: float = 0.5):
    """w(σ) on the x0 error, METHOD.md §4."""
    s = sig / (1 + sig)
    if weighting == "edm" or pred == "edm_f":
        return (sig**2 + sigma_data**2) / (sig * sigma_data) ** 2
    if weighting == "min_snr":
        return np.minimum(1 / sig**2, gamma)
    if weighting == "snr":  # diffusers' train_unconditional x0 loss: u = ᾱ/(1 − ᾱ) = SNR on x0
        return 1 / sig**2
    if weighting == "sigma_sqrt":
        return s**-2 * s**-2
    if weighting == "cosmap":
        return 2 / (math.pi * (1 - 2 * s + 2 * s**2)) * s**-2
    return {"sample": np.ones_like(sig), "epsilon": 1 / sig**2, "v_prediction": (1 + sig**2) / sig**2, "flow": ((1 + sig) / sig) ** 2}[pred]


# ---------------------------------------------------------------------------------------------
# Distances
# ---------------------------------------------------------------------------------------------


def total_variation(p, q) -> float:
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    return 0.5 * float(np.abs(p / p.sum() - q / q.sum()).sum())
