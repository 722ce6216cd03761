"""What a user of the installed package sees (issue 23): the public names at the top level, one version
everywhere, the model-card templates as package data, and a pyproject that says what the README says.
The wheel itself is built, installed apart from the checkout and run from outside it by scripts/wheel_smoke.sh
(CI)."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import tomllib
import torch

from helpers import ROOT


def test_every_public_name_resolves_and_the_import_stays_light():
    import diffusers_infonoise as d

    for name in ("InfoNoiseTrainingTimestepSampler", "make_sampler", "infonoise_sampler", "InfoNoiseUnconditionalPipeline",
                 "load_learned_sampler", "infogrid", "scheduler_grid_kwargs", "set_infogrid", "read_schedule",
                 "read_schedule_from", "choose_start", "apply_start", "per_sample_mse"):  # fmt: skip
        assert name in d.__all__, name
    for name in d.__all__:
        assert getattr(d, name) is not None, name
    # the pipeline and the diagnostics load on first use: a bare import does not pull in diffusers
    code = "import sys, diffusers_infonoise; print('diffusers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_one_version_reported_by_the_package_its_metadata_and_the_stored_schedule():
    from diffusers import EDMEulerScheduler

    import diffusers_infonoise as d

    assert re.fullmatch(r"\d+\.\d+\.\d+", d.__version__)
    assert importlib.metadata.version("diffusers-infonoise") == d.__version__
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in pyproject["project"]["dynamic"]
    # written in version.py (which the sampler's stored schedule imports without importing the package back)
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "diffusers_infonoise.version.__version__"}
    sched = EDMEulerScheduler()
    s = d.make_sampler("infonoise", sched, warmup_steps=1, refresh_every=1, num_bins=8)
    lv = s.sample(256, generator=torch.Generator().manual_seed(0))
    s.update(lv, torch.ones(256))
    s.step()
    s.save_to_scheduler(sched)
    assert d.read_schedule(sched)["package_version"] == d.__version__
    assert f"## {d.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_the_model_card_templates_are_package_data_from_the_one_source():
    from diffusers_infonoise.training.outputs import model_card_templates

    folder = Path(model_card_templates())
    templates = sorted(p.name for p in (ROOT / "model_cards").glob("*.j2"))
    assert templates == ["_allocation.md.j2", "text_to_image.md.j2", "unconditional.md.j2"]  # the first, included by both
    for name in templates:
        assert (folder / name).read_text() == (ROOT / "model_cards" / name).read_text()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["package-dir"]["diffusers_infonoise.model_cards"] == "model_cards"
    assert pyproject["tool"]["setuptools"]["package-data"]["diffusers_infonoise.model_cards"] == ["*.j2"]


def test_pyproject_has_no_placeholders_and_the_extras_the_readme_names():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    text = (ROOT / "pyproject.toml").read_text().lower()
    assert not any(p in text for p in ("example.com", "todo", "your-org", "github.com/)", "xxx"))
    for url in project.get("urls", {}).values():
        assert url.startswith("https://") and "example" not in url
    assert project["license"] == "Apache-2.0" and project["classifiers"]
    readme = (ROOT / "README.md").read_text()
    named = set(re.findall(r"`\[(\w+)\]`", readme)) | set(re.findall(r"diffusers-infonoise\[(\w+)\]", readme))
    assert {"train", "test", "benchmarks"} <= named <= set(project["optional-dependencies"])
    # the torch range admits the CPU build setup.sh installs
    torch_req = next(r for r in project["dependencies"] if r.startswith("torch"))
    assert ">=2.1" in torch_req and "<2.15" in torch_req and "2.13.0" in (ROOT / "scripts" / "setup.sh").read_text()


def test_the_training_scripts_are_commands_and_modules_of_the_installed_package(tmp_path, monkeypatch, capsys):
    """Issue 28: the training scripts had to be copied from the repository. training_scripts/ is the package
    diffusers_infonoise.training_scripts (one source, as model_cards/), each script a console command and a module
    that ``python -m`` runs from any folder; they still run as files of a checkout (the other tests load them so).
    The wheel itself, outside the checkout: scripts/wheel_smoke.sh."""
    from diffusers_infonoise import training_scripts
    from diffusers_infonoise.training import script_command

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["package-dir"]["diffusers_infonoise.training_scripts"] == "training_scripts"
    assert set(_setup_py_mapped_packages()) == set(pyproject["tool"]["setuptools"]["package-dir"])
    assert sorted(training_scripts.SCRIPTS) == sorted(p.stem for p in (ROOT / "training_scripts").glob("train_*.py"))
    commands = {k: v for k, v in pyproject["project"]["scripts"].items() if k != "infonoise"}
    entry = {script_command(m): f"diffusers_infonoise.training_scripts:{m.removeprefix('train_')}" for m in training_scripts.SCRIPTS}
    assert commands == entry
    assert script_command("train_text_to_image_sd3") == "infonoise-train-text-to-image-sd3"
    for module in training_scripts.SCRIPTS:
        assert importlib.import_module(f"diffusers_infonoise.training_scripts.{module}").main
        # the command's function: argparse's --help exits 0 and names the command and the fine-tuning start
        monkeypatch.setattr(sys, "argv", [script_command(module), "--help"])
        try:
            getattr(training_scripts, module.removeprefix("train_"))()
        except SystemExit as done:
            assert done.code == 0
        help_text = " ".join(capsys.readouterr().out.split())
        assert f"python -m diffusers_infonoise.training_scripts.{module}" in help_text and "--infonoise_init auto" in help_text
    # a console command exits 0 where main returns its result (a dict: sys.exit(dict) would print it and exit 1)
    sd3 = importlib.import_module("diffusers_infonoise.training_scripts.train_text_to_image_sd3")
    monkeypatch.setattr(sd3, "main", lambda argv=None: {"global_step": 1})
    assert training_scripts.text_to_image_sd3() == 0
    # python -m: the module runs as __main__ (the installed wheel, from outside the checkout: scripts/wheel_smoke.sh)
    import runpy
    import warnings

    monkeypatch.setattr(sys, "argv", ["train_unconditional", "--help"])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the module is imported already (above), as python -m would not
            runpy.run_module("diffusers_infonoise.training_scripts.train_unconditional", run_name="__main__")
    except SystemExit as done:
        assert done.code == 0
    assert "--pretrained_model_name_or_path" in capsys.readouterr().out


def test_every_folder_of_the_package_is_a_package_the_build_finds():
    # setup.py derives the wheel's package list with find_packages: a folder of modules without an __init__.py would be
    # left out of the wheel (CI's scripts/wheel_smoke.sh checks the built wheel itself against the source tree)
    from setuptools import find_packages

    found = set(find_packages(str(ROOT), include=["diffusers_infonoise", "diffusers_infonoise.*"]))
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "diffusers_infonoise").rglob("*.py")}
    assert "diffusers_infonoise.sampler" in folders and folders == found
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "packages" not in pyproject["tool"]["setuptools"], "the package list is derived in setup.py, not written by hand"


def _setup_py_mapped_packages() -> list[str]:
    """setup.py's ``MAPPED``: the packages the build maps from top-level folders (read, not run: running it builds)."""
    import ast

    tree = ast.parse((ROOT / "setup.py").read_text())
    return next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "MAPPED")
