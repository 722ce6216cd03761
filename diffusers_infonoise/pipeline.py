"""The pipeline a trained unconditional model is saved as: one class for the three paths (DDPM/VP,
EDM/VE with its preconditioning, flow), loadable with diffusers' stock calls, and taking a custom
grid of inference steps (the InfoGrid, METHOD.md §8).

Why a pipeline of our own: ``DDPMPipeline`` runs the DDPM loop only. Given an EDM scheduler it skips
EDM's input scaling and initial σ and passes the model an unscaled ``c_noise``: its samples are
wrong, with nothing but a per-step warning. This class samples through
:func:`diffusers_infonoise.generation.generate_images`, the one model call of the package.

A saved folder names it in ``model_index.json`` as ``["pipeline_infonoise", "InfoNoiseUnconditionalPipeline"]``
and holds a two-line ``pipeline_infonoise.py`` that imports it, diffusers' mechanism for custom
pipelines: ``DiffusionPipeline.from_pretrained(folder, trust_remote_code=True)`` returns this class;
without ``trust_remote_code`` diffusers stops and asks for it (a local folder too), and
``InfoNoiseUnconditionalPipeline.from_pretrained(folder)`` loads it with no code from the folder.
Without this package installed the import fails with a message that names the install command.
"""

from __future__ import annotations

import json
import os

import torch
from diffusers import DiffusionPipeline, ImagePipelineOutput

from .logs import get_logger

__all__ = ["InfoNoiseUnconditionalPipeline", "LOADER_MODULE"]

logger = get_logger(__name__)

#: the module file a saved folder carries for ``DiffusionPipeline.from_pretrained``
LOADER_MODULE = "pipeline_infonoise"

_LOADER_SOURCE = '''"""Loads diffusers-infonoise's pipeline for DiffusionPipeline.from_pretrained of this folder."""

try:
    from diffusers_infonoise.pipeline import InfoNoiseUnconditionalPipeline  # noqa: F401
except ImportError as err:  # pragma: no cover - depends on the user's environment
    raise ImportError("this pipeline was saved by diffusers-infonoise; install it to load it: "
                      "pip install diffusers-infonoise") from err
'''


class InfoNoiseUnconditionalPipeline(DiffusionPipeline):
    """Unconditional sampling for a UNet trained by diffusers-infonoise on any path.

    Components: ``unet`` (``UNet2DModel`` or ``UNet1DModel``) and ``scheduler`` (DDPM/DDIM,
    EDMEuler, or FlowMatchEuler; the training scheduler, which carries the learned schedule).
    """

    model_cpu_offload_seq = "unet"

    def __init__(self, unet, scheduler):
        super().__init__()
        self.register_modules(unet=unet, scheduler=scheduler)

    @torch.no_grad()
    def __call__(
        self,
        batch_size: int = 1,
        generator: torch.Generator | None = None,
        num_inference_steps: int | None = None,
        sigmas=None,
        infogrid: bool | str = False,
        output_type: str = "pil",
        return_dict: bool = True,
    ):
        """Sample ``batch_size`` images (or sequences, for a ``UNet1DModel``).

        Args:
            num_inference_steps: steps of the scheduler's own spacing (default 1000 on DDPM, as
                ``DDPMPipeline``; 40 on EDM; 50 on flow), or of the InfoGrid.
            sigmas: a grid of VE σ to step through instead (decreasing; an ``InferenceGrid`` too).
            infogrid: ``True`` (the default density) or a density name of
                :data:`~diffusers_infonoise.inference_grid.GRID_DENSITIES`: the InfoGrid of the schedule
                stored in the scheduler's config, with ``num_inference_steps`` steps. Without
                ``num_inference_steps``: the path's default, at most
                :data:`~diffusers_infonoise.inference_grid.DEFAULT_GRID_STEPS` (50; DDPM's 1000 do not fit
                an entropic-time grid), or the most that fit the path's range as distinct levels where fewer
                do (logged).
            output_type: ``"pil"`` (images only), ``"np"`` (B, H, W, C) in [0, 1], or ``"pt"``
                (B, C, H, W) in [0, 1]; 1-D models: ``"np"``/``"pt"`` of (B, C, L).

        Returns:
            ``ImagePipelineOutput`` (``.images``), or a tuple with ``return_dict=False``.

        Raises:
            ValueError: ``batch_size`` or ``num_inference_steps`` not an int >= 1; ``sigmas`` together with
            ``infogrid`` or ``num_inference_steps``; an unknown ``output_type``; ``"pil"`` for a 1-D model;
            ``infogrid`` for a scheduler without a learned schedule; an explicit ``num_inference_steps`` of the
            InfoGrid that does not fit (the message names the most that do).
        """
        from .generation import generate_images, is_1d_model
        from .inference_grid import DEFAULT_GRID_DENSITY, DEFAULT_GRID_STEPS
        from .inference_grid import infogrid as make_grid
        from .paths import path_class

        for name, value in (("batch_size", batch_size), ("num_inference_steps", num_inference_steps)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}: must be an int >= 1, got {value!r}")
        if sigmas is not None and num_inference_steps is not None:
            raise ValueError("sigmas, num_inference_steps: a grid of sigmas sets the steps; give one of them")
        if output_type not in ("pil", "np", "pt"):
            raise ValueError(f"output_type: accepted values are 'pil', 'np' and 'pt', got {output_type!r}")
        if output_type == "pil" and is_1d_model(self.unet):
            raise ValueError("output_type: a 1-D model (sequences) has no images; use 'np' or 'pt'")
        if sigmas is not None and infogrid:
            raise ValueError("sigmas, infogrid: give one grid")
        steps = num_inference_steps or path_class(self.scheduler).default_inference_steps
        if infogrid:
            density = DEFAULT_GRID_DENSITY if infogrid is True else infogrid
            steps = num_inference_steps or min(steps, DEFAULT_GRID_STEPS)
            sigmas = make_grid(self.scheduler, steps, density=density, fit=num_inference_steps is None)
            if len(sigmas) < steps:  # a profile so peaked that even the default crowds onto one level
                logger.warning(
                    f"infogrid: the default of {steps} steps does not fit this {density} grid as distinct levels; "
                    f"sampling with {len(sigmas)}, the most that fit (pass num_inference_steps to choose)"
                )
                steps = len(sigmas)
        progress = not getattr(self, "_progress_bar_config", {}).get("disable", False)  # set_progress_bar_config
        images = generate_images(
            self.unet,
            self.scheduler,
            batch_size,
            num_inference_steps=steps,
            generator=generator,
            device=self.device,
            sigmas=sigmas,
            progress=progress,
        )
        if output_type != "pt":
            images = images.cpu().permute(0, 2, 3, 1).numpy() if images.ndim == 4 else images.cpu().numpy()
            if output_type == "pil":
                images = self.numpy_to_pil(images)
        if not return_dict:
            return (images,)
        return ImagePipelineOutput(images=images)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        """Load a saved folder (or Hub id) as this class, with the package's own code: no
        ``trust_remote_code`` is needed here, since nothing from the folder is executed. Components
        are the classes ``model_index.json`` names; ``kwargs`` go to each component's ``from_pretrained``.

        Raises:
            ValueError: a folder whose components are not diffusers classes.
        """
        import diffusers

        config = cls.load_config(pretrained_model_name_or_path, **{k: kwargs[k] for k in ("revision", "token", "cache_dir") if k in kwargs})
        parts = {}
        for name in ("unet", "scheduler"):
            library, class_name = config.get(name, (None, None))
            if library != "diffusers" or not hasattr(diffusers, class_name or ""):
                raise ValueError(
                    f"{pretrained_model_name_or_path}: model_index.json names {name} = {library}.{class_name}; expected a diffusers class"
                )
            parts[name] = getattr(diffusers, class_name).from_pretrained(pretrained_model_name_or_path, subfolder=name, **kwargs)
        return cls(**parts)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """``DiffusionPipeline.save_pretrained``, then the folder names this class through its loader
        module (module docstring), so that ``DiffusionPipeline.from_pretrained(folder, trust_remote_code=True)``
        returns it."""
        super().save_pretrained(save_directory, *args, **kwargs)
        index = os.path.join(save_directory, "model_index.json")
        with open(index) as f:
            config = json.load(f)
        config["_class_name"] = [LOADER_MODULE, type(self).__name__]
        with open(index, "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
        with open(os.path.join(save_directory, f"{LOADER_MODULE}.py"), "w") as f:
            f.write(_LOADER_SOURCE)
