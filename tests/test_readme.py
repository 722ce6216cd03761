"""The README's quickstart runs as written (tiny stand-ins for the objects it takes from the user's script)
and its π is the promised one: adapted, capped at the data's variance, φ within the floor of ρ̂."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _quickstart() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Quickstart"):]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def test_readme_quickstart_runs_as_written(tmp_path, monkeypatch):
    from diffusers import DDPMPipeline, UNet2DModel

    monkeypatch.chdir(tmp_path)
    gen = torch.Generator().manual_seed(0)
    # binarized 8x8 "images" in {-1, 1}: per-pixel variance 1 by construction
    dataloader = [torch.sign(torch.randn(8, 1, 8, 8, generator=gen)) for _ in range(120)]
    unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, layers_per_block=1, block_out_channels=(8, 16),
                       norm_num_groups=4, down_block_types=("DownBlock2D", "DownBlock2D"),
                       up_block_types=("UpBlock2D", "UpBlock2D"))
    from accelerate import Accelerator

    ns = {"unet": unet, "optimizer": torch.optim.Adam(unet.parameters(), lr=1e-3), "dataloader": dataloader,
          "max_train_steps": len(dataloader), "accelerator": Accelerator(cpu=True)}

    class Pipeline:  # the user's pipeline, holding the scheduler the snippet trains with
        def save_pretrained(self, path):
            DDPMPipeline(unet=ns["unet"], scheduler=ns["noise_scheduler"]).save_pretrained(path)

    ns["pipeline"] = Pipeline()
    exec(compile(_quickstart(), "README.md quickstart", "exec"), ns)
    payload = json.loads((tmp_path / "out" / "scheduler" / "scheduler_config.json").read_text())["_infonoise_schedule"]
    assert payload["adapted"] and payload["optimizer_steps"] == 120
    assert ns["sampler"].warmup_steps == 50  # a tenth of 120 steps, at least one refresh
    assert abs(payload["data"]["variance"] - 1.0) < 0.05 and payload["hyperparameters"]["mmse_cap"] == payload["data"]["variance"]
    assert payload["tv_phi_rho"] <= 0.05 + 0.02
    assert payload["gate"]["source"] == "data" and abs(payload["gate"]["pivot"] - 0.2) < 1e-9  # {-1, 1}: gap 2
    assert ns["sampler"] in ns["accelerator"]._custom_objects and ns["sampler"].num_draws == 120
