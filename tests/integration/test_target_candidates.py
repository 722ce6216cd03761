"""Issue 47, step 2's arithmetic by hand: each candidate target's π on Gaussian data (METHOD.md §2: ρ(ln σ) ∝
s_d²/(σ² + s_d²), m̂ = σ²·s_d²/(σ² + s_d²)) under EDM's weight w = (σ² + σ_d²)/(σ·σ_d)² (§4), and the oracle's binned
normal and quantiles."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks import target_candidates as tc

SIGMA = torch.tensor([0.05, 0.2, 0.5, 1.0, 3.0], dtype=torch.float64)


def _gaussian(s_d: float, sigma_data: float = 0.5):
    rho = s_d**2 / (SIGMA**2 + s_d**2)
    w = (SIGMA**2 + sigma_data**2) / (SIGMA * sigma_data) ** 2
    return rho, w


def _normalised(x):
    return x / x.sum()


def test_the_paper_target_on_gaussian_data_with_matched_sigma_data():
    # ρ/w = s_d²/(σ²+s_d²) · σ²σ_d²/(σ²+σ_d²) = σ²·σ_d⁴/(σ²+σ_d²)² for s_d = σ_d
    rho, w = _gaussian(0.5)
    expected = SIGMA**2 * 0.5**4 / (SIGMA**2 + 0.25) ** 2
    assert torch.allclose(_normalised(tc.candidate_pi("paper", rho, w, SIGMA)), _normalised(expected))


def test_b_is_the_paper_target_where_the_edm_weight_makes_the_loss_flat():
    # w·m̂ = (σ²+σ_d²)/(σ²σ_d²) · σ²s_d²/(σ²+s_d²) = 1 for s_d = σ_d: the per-sample factor 1/(w·ŝ) is constant, so
    # π ∝ ρ̂·ŝ = ρ̂/w there (ŝ ≈ m̂ = ρ̂·σ²·const)
    rho, w = _gaussian(0.5)
    assert torch.allclose(_normalised(tc.candidate_pi("B", rho, w, SIGMA)), _normalised(tc.candidate_pi("paper", rho, w, SIGMA)))
    # data 4x narrower than σ_d: ρ²σ² = s_d⁴σ²/(σ²+s_d²)², by hand at σ = 0.2, s_d = 0.125: 0.125⁴·0.04/(0.055625)²
    rho, w = _gaussian(0.125)
    assert float(tc.candidate_pi("B", rho, w, SIGMA)[1]) == pytest.approx(0.125**4 * 0.04 / 0.055625**2)


def test_the_tilt_family():
    rho, w = _gaussian(0.25)
    assert torch.allclose(tc.candidate_pi("A(1,1)", rho, w, SIGMA), rho / w)
    assert torch.allclose(tc.candidate_pi("A(1,0)", rho, w, SIGMA), rho)
    # A(0.5, 0.5) at σ = 1: sqrt(0.0625/1.0625) / sqrt(1.25/0.25)
    assert float(tc.candidate_pi("A(0.5,0.5)", rho, w, SIGMA)[3]) == pytest.approx(math.sqrt(0.0625 / 1.0625 / 5.0))
    with pytest.raises(ValueError, match="candidate: unknown name 'C'"):
        tc.candidate_pi("C", rho, w, SIGMA)


def test_the_oracles_binned_normal_and_its_quantiles():
    edges = torch.linspace(-3.0, 3.0, 7, dtype=torch.float64)
    masses = tc.normal_cell_masses(0.0, 1.0, edges)
    # Φ(1) − Φ(0) = 0.341345, Φ(3) − Φ(−3) = 0.997300 (tables)
    assert float(masses[3]) == pytest.approx(0.341345 / 0.997300, abs=1e-6)
    assert tc.quantiles(masses, edges, (0.5,)) == pytest.approx([0.0], abs=1e-12)
    # uniform masses on [0, 4]: the 10% quantile is 0.4 (linear within a cell)
    assert tc.quantiles(torch.full((4,), 0.25, dtype=torch.float64), torch.linspace(0, 4, 5), (0.1, 0.9)) == pytest.approx([0.4, 3.6])
