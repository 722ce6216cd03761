"""The package list, derived rather than written by hand (a hand-kept list once shipped a wheel without a subpackage):
every folder of ``diffusers_infonoise/`` that has an ``__init__.py``, plus the two top-level folders that pyproject's
``package-dir`` maps into the package (``model_cards/`` and ``training_scripts/``). Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

MAPPED = ["diffusers_infonoise.model_cards", "diffusers_infonoise.training_scripts"]

setup(packages=find_packages(include=["diffusers_infonoise", "diffusers_infonoise.*"]) + MAPPED)
