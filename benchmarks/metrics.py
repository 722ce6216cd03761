"""Quality metrics of the quality race (issue 6): Fréchet distances in the penultimate features of a
small classifier trained once on the data set's own training split, with the real-vs-real floor.

* :func:`frechet_distance` — the closed form ``‖μ1−μ2‖² + tr(Σ1 + Σ2 − 2(Σ1Σ2)^½)`` for two Gaussians,
  computed without a general (complex) matrix square root: ``tr (Σ1Σ2)^½ = Σ sqrt(eig(Σ1^½ Σ2 Σ1^½))``.
* :func:`frechet_distance_features` — the same for two feature sets (Gaussian fits). When the
  dimension exceeds the sample counts (k-mer spectra of DNA) it uses the data matrices directly:
  with ``Σ1 = AᵀA``, ``Σ2 = BᵀB`` (centred rows scaled by ``1/sqrt(n−1)``), ``tr (Σ1Σ2)^½`` is the
  nuclear norm of ``A·Bᵀ`` (an ``n1 × n2`` matrix), exact and cheap.
* :class:`FeatureNet` / :func:`classifier_for` — a small CNN classifier (two conv layers, a
  ``feature_dim`` penultimate layer, a linear head), trained once per data set with a fixed seed and
  cached as a ``state_dict`` under ``benchmarks/.cache/classifiers/`` (git-ignored).

Images everywhere here are float tensors ``(N, 1, H, W)`` in ``[0, 1]`` — what
:func:`diffusers_infonoise.generation.generate_images` returns and ``uint8 / 255`` for real data.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

__all__ = [
    "CACHE_DIR",
    "frechet_distance",
    "frechet_distance_features",
    "gaussian_stats",
    "FeatureNet",
    "train_classifier",
    "classifier_for",
    "extract_features",
    "real_floor",
]

CACHE_DIR = Path(os.environ.get("INFONOISE_BENCH_CACHE", Path(__file__).resolve().parent / ".cache"))


def ensure_cache_dir(sub: str = "") -> Path:
    """``CACHE_DIR / sub``, created, with a ``.gitignore`` of ``*`` so that nothing in it is committed."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    ignore = CACHE_DIR / ".gitignore"
    if not ignore.exists():
        ignore.write_text("*\n")
    path = CACHE_DIR / sub if sub else CACHE_DIR
    path.mkdir(parents=True, exist_ok=True)
    return path


# ----------------------------------------------------------------------------------------------
# Fréchet distance
# ----------------------------------------------------------------------------------------------


def _psd_sqrt(s: np.ndarray) -> np.ndarray:
    vals, vecs = np.linalg.eigh((s + s.T) / 2)
    return (vecs * np.sqrt(np.clip(vals, 0.0, None))) @ vecs.T


def frechet_distance(mu1, sigma1, mu2, sigma2) -> float:
    """Fréchet (2-Wasserstein²) distance between N(μ1, Σ1) and N(μ2, Σ2), covariances PSD.

    ``‖μ1−μ2‖² + tr(Σ1) + tr(Σ2) − 2·tr((Σ1Σ2)^½)``; ``Σ1Σ2`` is similar to the PSD matrix
    ``Σ1^½ Σ2 Σ1^½``, whose eigenvalues give the trace term exactly (no complex ``sqrtm``).
    """
    mu1, mu2 = np.atleast_1d(np.asarray(mu1, np.float64)), np.atleast_1d(np.asarray(mu2, np.float64))
    s1, s2 = np.atleast_2d(np.asarray(sigma1, np.float64)), np.atleast_2d(np.asarray(sigma2, np.float64))
    if mu1.shape != mu2.shape or s1.shape != s2.shape or s1.shape != (mu1.size, mu1.size):
        raise ValueError(f"shapes: mu {mu1.shape}/{mu2.shape}, sigma {s1.shape}/{s2.shape}")
    r1 = _psd_sqrt(s1)
    m = r1 @ s2 @ r1
    tr_sqrt = float(np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2), 0.0, None)).sum())
    d = float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2.0 * tr_sqrt)
    return max(d, 0.0)


def gaussian_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and unbiased covariance of the rows of ``x`` (N, D)."""
    x = np.asarray(x, np.float64)
    return x.mean(0), np.cov(x, rowvar=False).reshape(x.shape[1], x.shape[1])


def frechet_distance_features(x: np.ndarray, y: np.ndarray) -> float:
    """Fréchet distance between Gaussian fits of two feature sets ``x`` (n1, D) and ``y`` (n2, D)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"shapes: expected (n1, D) and (n2, D), got {x.shape} and {y.shape}")
    n1, n2, dim = x.shape[0], y.shape[0], x.shape[1]
    if n1 < 2 or n2 < 2:
        raise ValueError("need at least two samples in each set")
    if dim <= min(n1, n2):
        return frechet_distance(*gaussian_stats(x), *gaussian_stats(y))
    mx, my = x.mean(0), y.mean(0)
    a = (x - mx) / np.sqrt(n1 - 1)
    b = (y - my) / np.sqrt(n2 - 1)
    cross = a @ b.T if n1 <= n2 else b @ a.T  # the nuclear norm is the same; keep the Gram matrix small
    gram = cross @ cross.T
    nuc = float(np.sqrt(np.clip(np.linalg.eigvalsh((gram + gram.T) / 2), 0.0, None)).sum())
    d = float(((mx - my) ** 2).sum() + (a * a).sum() + (b * b).sum() - 2.0 * nuc)
    return max(d, 0.0)


# ----------------------------------------------------------------------------------------------
# feature classifier
# ----------------------------------------------------------------------------------------------


class FeatureNet(nn.Module):
    """Small CNN for (N, 1, H, W) images in [0, 1]: conv 16 → conv 32 (stride 2) → conv 32 (stride 2
    when H ≥ 16) → ``feature_dim`` (penultimate, ReLU) → 10 logits."""

    def __init__(self, size: int, feature_dim: int = 32, num_classes: int = 10):
        super().__init__()
        self.size, self.feature_dim = size, feature_dim
        s3 = 2 if size >= 16 else 1
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, stride=s3, padding=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        side = -(-size // 2)
        side = -(-side // s3)
        self.feat = nn.Sequential(nn.Linear(32 * side * side, feature_dim), nn.ReLU())
        self.head = nn.Linear(feature_dim, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.feat(self.body(x * 2 - 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def train_classifier(
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    feature_dim: int = 32,
    epochs: int = 30,
    batch_size: int = 128,
    lr: float = 2e-3,
    seed: int = 0,
) -> FeatureNet:
    """Train :class:`FeatureNet` on ``images`` (N, 1, H, W) in [0, 1] with ±1-pixel random shifts."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    net = FeatureNet(images.shape[-1], feature_dim)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    n = images.shape[0]
    steps = epochs * max(1, n // batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(n, generator=g)
        for i in range(0, n - batch_size + 1, batch_size):
            idx = perm[i : i + batch_size]
            x = images[idx]
            dx, dy = (int(v) for v in torch.randint(-1, 2, (2,), generator=g))
            x = torch.roll(x, shifts=(dy, dx), dims=(2, 3))
            loss = nn.functional.cross_entropy(net(x), labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return net.eval()


@torch.no_grad()
def extract_features(net: FeatureNet, images, batch_size: int = 2048) -> np.ndarray:
    """Penultimate features (N, feature_dim) float64 of images (N, 1, H, W) in [0, 1]."""
    images = torch.as_tensor(images, dtype=torch.float32)
    out = [net.features(images[i : i + batch_size]) for i in range(0, images.shape[0], batch_size)]
    return torch.cat(out).double().numpy()


@torch.no_grad()
def accuracy(net: FeatureNet, images: torch.Tensor, labels: torch.Tensor) -> float:
    pred = torch.cat([net(images[i : i + 2048]).argmax(1) for i in range(0, images.shape[0], 2048)])
    return float((pred == labels).float().mean())


def classifier_for(
    key: str,
    train_images: np.ndarray,
    train_labels: np.ndarray,
    heldout_images: np.ndarray,
    heldout_labels: np.ndarray,
    *,
    feature_dim: int = 32,
    epochs: int = 30,
) -> tuple[FeatureNet, dict]:
    """The cached classifier of data set ``key`` (trained on its training split on first use).

    ``*_images`` are (N, H, W) or (N, 1, H, W) uint8 or float in [0, 1]. The cache file name carries a
    hash of the training data and settings, so a changed data set retrains. Returns ``(net, info)``,
    ``info`` with the held-out accuracy.
    """
    tr_x, tr_y = to_unit_tensor(train_images), torch.as_tensor(np.asarray(train_labels), dtype=torch.long)
    ho_x, ho_y = to_unit_tensor(heldout_images), torch.as_tensor(np.asarray(heldout_labels), dtype=torch.long)
    h = hashlib.sha256()
    h.update(tr_x.numpy().tobytes()[:10_000_000])
    h.update(json.dumps([tr_x.shape[0], feature_dim, epochs, "v1"]).encode())
    folder = ensure_cache_dir("classifiers")
    stem = folder / f"{key}-{h.hexdigest()[:12]}"
    net = FeatureNet(tr_x.shape[-1], feature_dim)
    if stem.with_suffix(".pt").exists() and stem.with_suffix(".json").exists():
        net.load_state_dict(torch.load(stem.with_suffix(".pt"), weights_only=True))
        return net.eval(), json.loads(stem.with_suffix(".json").read_text())
    net = train_classifier(tr_x, tr_y, feature_dim=feature_dim, epochs=epochs)
    info = {
        "key": key,
        "feature_dim": feature_dim,
        "epochs": epochs,
        "train_size": int(tr_x.shape[0]),
        "train_accuracy": accuracy(net, tr_x, tr_y),
        "heldout_accuracy": accuracy(net, ho_x, ho_y),
        "architecture": "conv16-conv32/2-conv32-linear(feature_dim)-linear(10), ReLU, ±1px shift augmentation",
    }
    torch.save(net.state_dict(), stem.with_suffix(".pt"))
    stem.with_suffix(".json").write_text(json.dumps(info, indent=1))
    return net, info


def to_unit_tensor(images) -> torch.Tensor:
    """(N, H, W) / (N, 1, H, W) uint8 or float → float32 (N, 1, H, W) in [0, 1]."""
    x = torch.as_tensor(np.asarray(images))
    if x.dtype == torch.uint8:
        x = x.float() / 255.0
    x = x.float()
    return x[:, None] if x.ndim == 3 else x


def real_floor(features_a: np.ndarray, features_b: np.ndarray) -> float:
    """FD between two real feature sets (e.g. disjoint held-out halves, or train vs held-out)."""
    return frechet_distance_features(features_a, features_b)
