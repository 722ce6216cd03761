"""The ``infonoise`` command (diffusers_infonoise.cli) run in-process through ``main``, its one-line errors, and
``saved``: a fixture of schedules and pipelines saved for it (loaded as a pytest plugin by conftest.py)."""

from __future__ import annotations

import pytest
import torch
from diffusers import EDMEulerScheduler, UNet2DModel

from diffusers_infonoise import make_sampler
from diffusers_infonoise.cli import main


def save_before_adapting(folder, steps: int = 1) -> EDMEulerScheduler:
    """An EDM scheduler whose InfoNoise schedule was stored after ``steps`` optimizer steps of a 5-step warm-up (so it
    holds no estimate; the save warns), saved to ``folder``; returns the scheduler."""
    sched = EDMEulerScheduler()
    sampler = make_sampler("infonoise", sched, warmup_steps=5, refresh_every=1, num_bins=16)
    for _ in range(steps):
        sampler.step()
    with pytest.warns(UserWarning, match="has not adapted"):
        sampler.save_to_scheduler(sched)
    sched.save_pretrained(folder)
    return sched


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A scheduler saved with a learned schedule, one without, and a tiny EDM pipeline."""
    root = tmp_path_factory.mktemp("cli")
    sched = EDMEulerScheduler()
    s = make_sampler("infonoise", sched, loss_weighting="edm", warmup_steps=1, refresh_every=1, num_bins=16)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        lv = s.sample(512, generator=g)
        # Gaussian-data MMSE with s_d = 0.5 as the "losses" (x0 errors, prediction_type sample)
        s.update(lv, (lv.sigmas**2 * 0.25 / (lv.sigmas**2 + 0.25)).float())
        s.step()
    s.save_to_scheduler(sched)
    sched.save_pretrained(root / "learned")
    EDMEulerScheduler().save_pretrained(root / "plain")
    unet = UNet2DModel(
        sample_size=8,
        in_channels=1,
        out_channels=1,
        block_out_channels=(8, 8),
        layers_per_block=1,
        norm_num_groups=4,
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
    )
    unet.save_pretrained(root / "pipe" / "unet")
    EDMEulerScheduler().save_pretrained(root / "pipe" / "scheduler")
    rgb = UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        block_out_channels=(8, 8),
        layers_per_block=1,
        norm_num_groups=4,
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
    )
    rgb.save_pretrained(root / "rgb" / "unet")
    EDMEulerScheduler().save_pretrained(root / "rgb" / "scheduler")
    return {"root": root, "learned": root / "learned", "plain": root / "plain", "pipe": root / "pipe", "rgb": root / "rgb", "sampler": s}


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def assert_one_line_error(rc, err, *fragments):
    assert rc == 2
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and "Traceback" not in err, err
    for f in fragments:
        assert f in lines[0], lines[0]
