"""benchmarks/finetune_lag.py's per-element Bayes bound, against the two-point MMSE derived independently (the library's
closed form for equally likely ±1, a direct integral of the posterior mean for another prior)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.finetune_lag import _bounded_profile, per_element_bayes_mmse
from diffusers_infonoise.diagnostics.profiles import analytic_mmse_two_point

SIGMAS = np.array([0.3, 0.5, 1.0, 2.0, 5.0])


def _two_point(p: float, sigma: float) -> float:
    """E[(x0 − E[x0|x])²] for x0 = +1 with probability p, else −1, and x = x0 + σz: the posterior mean is
    tanh(atanh(2p − 1) + x/σ²); the expectation over z by the trapezoid rule on a dense grid."""
    z = np.linspace(-12, 12, 200001)
    phi = np.exp(-(z**2) / 2) / np.sqrt(2 * np.pi)
    err = 0.0
    for x0, w in ((1.0, p), (-1.0, 1 - p)):
        mean = np.tanh(np.arctanh(2 * p - 1) + (x0 + sigma * z) / sigma**2)
        err += w * np.trapezoid(phi * (mean - x0) ** 2, z)
    return err


def test_equally_likely_two_point_data_give_the_closed_form():
    x0 = np.concatenate([np.ones((500, 4)), -np.ones((500, 4))])
    np.testing.assert_allclose(per_element_bayes_mmse(x0, SIGMAS), analytic_mmse_two_point(SIGMAS).numpy(), rtol=1e-4)


def test_each_element_uses_its_own_prior():
    # element 0 is +1 in 20% of the samples, element 1 in 90%: the bound is the mean of the two priors' errors
    n = 1000
    x0 = -np.ones((n, 2))
    x0[:200, 0] = 1.0
    x0[:900, 1] = 1.0
    want = [(_two_point(0.2, s) + _two_point(0.9, s)) / 2 for s in SIGMAS]
    np.testing.assert_allclose(per_element_bayes_mmse(x0, SIGMAS), want, rtol=1e-4)
    # an element that never changes has no error at any σ; data on many values gets no bound
    assert per_element_bayes_mmse(np.ones((10, 3)), SIGMAS) == pytest.approx(np.zeros(len(SIGMAS)), abs=1e-12)
    assert per_element_bayes_mmse(np.linspace(-1, 1, 170).reshape(10, 17), SIGMAS) is None


def test_the_bounded_profile_takes_the_smallest_of_the_bounds_and_gates_like_the_sampler():
    sigma = np.exp(np.linspace(-3, 3, 7))
    profile = {"sigma": sigma.tolist(), "log_sigma": np.log(sigma).tolist(), "mmse": (2 * sigma**2).tolist(), "gate": {"pivot": 0.2}}
    bound = np.full(7, 0.5)
    # by hand: min(2σ², 0.5, σ²)/σ² = 1 where σ² ≤ 0.5, else 0.5/σ²; times σ³/(σ³ + 0.008)
    q = np.where(sigma**2 <= 0.5, 1.0, 0.5 / sigma**2) * sigma**3 / (sigma**3 + 0.2**3)
    rho = np.asarray(_bounded_profile(profile, bound)["rho_hat"])
    np.testing.assert_allclose(rho / rho.max(), q / q.max(), rtol=1e-12)
    assert np.trapezoid(rho, np.log(sigma)) == pytest.approx(1.0)
