"""What a run leaves: sample grids, the model card, the stored schedule and the Hub push."""

from __future__ import annotations

import logging
import math
import os

import numpy as np
import torch

from ..samplers import TrainingTimestepSampler

logger = logging.getLogger(__name__)

__all__ = [
    "save_image_grid",
    "render_model_card",
    "push_output_dir",
    "store_learned_schedule",
]


def save_image_grid(images: torch.Tensor, path: str, *, nrow: int | None = None) -> str:
    """Save (B, C, H, W) images in [0, 1] as one PNG grid; returns ``path``."""
    from PIL import Image

    b, c, h, w = images.shape
    nrow = nrow or int(math.ceil(math.sqrt(b)))
    ncol = int(math.ceil(b / nrow))
    grid = np.ones((ncol * (h + 2) + 2, nrow * (w + 2) + 2, c), dtype=np.float32)
    arr = images.detach().cpu().float().clamp(0, 1).permute(0, 2, 3, 1).numpy()
    for i in range(b):
        r, q = divmod(i, nrow)
        grid[2 + r * (h + 2): 2 + r * (h + 2) + h, 2 + q * (w + 2): 2 + q * (w + 2) + w] = arr[i]
    img = (grid * 255).round().astype(np.uint8)
    Image.fromarray(img[..., 0] if c == 1 else img).save(path)
    return path


def render_model_card(template: str, output_path: str, **context) -> str:
    """Render ``model_cards/<template>`` (Jinja2) with ``context`` into ``output_path``; returns the text."""
    import jinja2

    here = os.path.dirname(os.path.abspath(__file__))
    package = os.path.dirname(here)  # diffusers_infonoise/
    # the repository's model_cards/ (a checkout or an editable install), or a copy inside the package
    search = [os.path.join(os.path.dirname(package), "model_cards"), os.path.join(package, "model_cards")]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(search), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    text = env.get_template(template).render(**context)
    with open(output_path, "w") as f:
        f.write(text)
    return text


def push_output_dir(output_dir: str, *, repo_id: str, token: str | None = None, private: bool = False,
                    commit_message: str = "Upload InfoNoise-trained pipeline") -> str:
    """Create the Hub repository and upload the final pipeline, card and plots (not ``checkpoint-*``
    folders or logs). Returns the repository id."""
    from huggingface_hub import create_repo, upload_folder

    repo_id = create_repo(repo_id, exist_ok=True, private=private, token=token).repo_id
    upload_folder(repo_id=repo_id, folder_path=output_dir, token=token, commit_message=commit_message,
                  ignore_patterns=["checkpoint-*", "checkpoint-*/**", "logs/**", "step_*", "epoch_*"])
    return repo_id


def store_learned_schedule(noise_scheduler, sampler: TrainingTimestepSampler) -> bool:
    """Write the InfoNoise schedule into ``noise_scheduler``'s config (True); for other samplers
    drop a payload inherited from the base model, which would no longer describe this training (False)."""
    from ..schedule_io import CONFIG_KEY

    if hasattr(sampler, "save_to_scheduler"):
        sampler.save_to_scheduler(noise_scheduler)
        return True
    if noise_scheduler.config.get(CONFIG_KEY) is not None:
        noise_scheduler.register_to_config(**{CONFIG_KEY: None})
    return False
