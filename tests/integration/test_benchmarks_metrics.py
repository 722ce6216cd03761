"""The quality race's Fréchet distance against the closed form for Gaussians (issue 6); fast."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import dna
from benchmarks.metrics import frechet_distance, frechet_distance_features, gaussian_stats  # noqa: E402

scipy_linalg = pytest.importorskip("scipy.linalg")


def _random_spd(rng, d):
    a = rng.normal(size=(d, d))
    return a @ a.T / d + 0.1 * np.eye(d)


def _closed_form(mu1, s1, mu2, s2):
    # ‖μ1−μ2‖² + tr(Σ1 + Σ2 − 2(Σ1Σ2)^½) with a general matrix square root
    root = scipy_linalg.sqrtm(s1 @ s2)
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1 + s2 - 2 * np.real(root)))


def test_diagonal_gaussians_exact():
    # commuting covariances: FD = ‖μ1−μ2‖² + Σ (sqrt(a_i) − sqrt(b_i))²
    mu1, mu2 = np.array([0.0, 1.0, -2.0]), np.array([1.0, 1.0, 0.0])
    a, b = np.array([1.0, 4.0, 9.0]), np.array([4.0, 1.0, 0.25])
    expected = 1.0 + 0.0 + 4.0 + (1 - 2) ** 2 + (2 - 1) ** 2 + (3 - 0.5) ** 2
    assert frechet_distance(mu1, np.diag(a), mu2, np.diag(b)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("d", [1, 5, 32])
def test_general_gaussians_match_sqrtm(d):
    rng = np.random.default_rng(d)
    mu1, mu2 = rng.normal(size=d), rng.normal(size=d)
    s1, s2 = _random_spd(rng, d), _random_spd(rng, d)
    assert frechet_distance(mu1, s1, mu2, s2) == pytest.approx(_closed_form(mu1, s1, mu2, s2), rel=1e-8, abs=1e-10)
    assert frechet_distance(mu1, s1, mu1, s1) == pytest.approx(0.0, abs=1e-8)


def test_identical_and_singular_covariances():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 6))
    s = x.T @ x  # rank 3 of 6
    assert frechet_distance(np.zeros(6), s, np.zeros(6), s) == pytest.approx(0.0, abs=1e-8)


def test_features_match_stats_and_low_rank_route():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 8)) @ rng.normal(size=(8, 8))
    y = rng.normal(size=(50, 8)) + 0.5
    assert frechet_distance_features(x, y) == pytest.approx(frechet_distance(*gaussian_stats(x), *gaussian_stats(y)), rel=1e-10)
    # dimension above the sample counts: the data-matrix route must equal the covariance route
    x, y = rng.normal(size=(30, 60)), rng.normal(size=(20, 60)) * 1.5 + 0.2
    full = frechet_distance(*gaussian_stats(x), *gaussian_stats(y))
    assert frechet_distance_features(x, y) == pytest.approx(full, rel=1e-6)
    assert frechet_distance_features(y, x) == pytest.approx(full, rel=1e-6)


def test_samples_converge_to_analytic():
    rng = np.random.default_rng(2)
    d = 4
    mu1, mu2 = np.zeros(d), np.full(d, 0.5)
    s1, s2 = _random_spd(rng, d), _random_spd(rng, d)
    x = rng.multivariate_normal(mu1, s1, size=40_000)
    y = rng.multivariate_normal(mu2, s2, size=40_000)
    assert frechet_distance_features(x, y) == pytest.approx(_closed_form(mu1, s1, mu2, s2), rel=0.05)


def test_dna_kmers():
    rng = np.random.default_rng(3)
    seqs = ["".join(rng.choice(list("ACGT"), 64)) for _ in range(20)]
    counts = dna.kmer_counts(["ACGTA"], 2)  # AC, CG, GT, TA
    assert counts.sum() == 4 and counts[0, 0 * 4 + 1] == 1 and counts[0, 3 * 4 + 0] == 1
    m = dna.kmer_metrics(seqs, seqs, ks=(2,))
    assert m["fd_k2"] == pytest.approx(0.0, abs=1e-10) and m["js_k2"] == pytest.approx(0.0, abs=1e-7)
