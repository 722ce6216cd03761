"""The training scripts. In a checkout they run as files (``python training_scripts/train_unconditional.py``,
``accelerate launch training_scripts/...``); the wheel installs them as the package
``diffusers_infonoise.training_scripts`` (``python -m diffusers_infonoise.training_scripts.train_unconditional``,
``accelerate launch -m diffusers_infonoise.training_scripts.train_unconditional``) and as the console commands
``infonoise-train-...``, one per script (:func:`~diffusers_infonoise.training.args.script_command`; pyproject's
``[project.scripts]``). Each script's ``main(argv=None)`` is the whole run."""

from __future__ import annotations

import importlib

#: the scripts; each is the console command ``script_command(name)``, which calls the function below named without
#: ``train_`` (a function named as its module would be replaced by the module once imported)
SCRIPTS = ("train_unconditional", "train_text_to_image", "train_text_to_image_sdxl", "train_text_to_image_sd3", "train_text_to_image_flux")


def _run(module: str) -> int:
    # a console command exits with main's return value: the text-to-image scripts return their result (a dict)
    importlib.import_module(f"{__name__}.{module}").main()
    return 0


def unconditional() -> int:
    return _run("train_unconditional")


def text_to_image() -> int:
    return _run("train_text_to_image")


def text_to_image_sdxl() -> int:
    return _run("train_text_to_image_sdxl")


def text_to_image_sd3() -> int:
    return _run("train_text_to_image_sd3")


def text_to_image_flux() -> int:
    return _run("train_text_to_image_flux")
