"""The sampler's settings, defined once up to the command line: each ``--infonoise_*`` option is generated from its
field of ``InfoNoiseSettings`` (default, type, help), the baselines accept only the settings they read, the study
settings work but are not advertised in any script's ``--help``, and no docstring or help text names an issue number."""

from __future__ import annotations

import argparse
import dataclasses
import re

import pytest
from diffusers import DDPMScheduler, EDMEulerScheduler

from diffusers_infonoise.objective import Objective
from diffusers_infonoise.sampler import (
    AdaptiveSettings,
    InfoNoiseSettings,
    KingmaGaoSampler,
    LossSlopeSampler,
    LossSlopeSettings,
    make_sampler,
    unread_settings,
)
from diffusers_infonoise.sampler.settings import default_mmse_cap
from diffusers_infonoise.training import add_noise_sampler_args, build_noise_sampler

from helpers import ROOT
from helpers.scripts import load_training_script

#: the sampler's study settings (METHOD.md §5, §5.5, §5.7, §5.10): accepted, stored, not advertised
STUDY = ("ema_decay", "floor_space", "temperature", "clean_end_bound", "target_space")
#: the --infonoise_* options that are no sampler setting: where the run starts
START_OPTIONS = {"infonoise_init", "infonoise_schedule_from", "infonoise_profile_bound"}
SCRIPTS = ("train_unconditional", "train_text_to_image", "train_text_to_image_sd3", "train_text_to_image_sdxl", "train_text_to_image_flux")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    add_noise_sampler_args(parser)
    return parser


def test_every_option_is_its_setting_with_the_setting_default():
    """Each --infonoise_* option's default and type are its field's; every field has one, or says why not (the run's
    length: --max_train_steps); every other --infonoise_* option is a start option."""
    actions = {a.dest: a for a in _parser()._actions if a.dest.startswith("infonoise_")}
    fields = {f.name: f for f in dataclasses.fields(InfoNoiseSettings)}
    assert set(actions) - START_OPTIONS == {f"infonoise_{name}" for name in InfoNoiseSettings.options()}
    for name, f in fields.items():
        option = f.metadata["option"]
        if isinstance(option, str):  # no option: the reason is given
            assert f"infonoise_{name}" not in actions and name == "num_training_steps" and "--max_train_steps" in option
            continue
        action = actions[f"infonoise_{name}"]
        assert action.default == f.default and action.type is option["type"], name
        assert (action.help == argparse.SUPPRESS) == (name in STUDY), name
    assert InfoNoiseSettings.study_settings() == STUDY
    assert _parser().parse_args([]).infonoise_num_bins == InfoNoiseSettings().num_bins == 64


#: a value other than the default for each option, as typed and as the sampler holds it
OTHER_VALUES = {
    "num_bins": ("16", 16),
    "warmup_steps": ("7", 7),
    "refresh_every": ("5", 5),
    "ema_decay": ("0.9", 0.9),
    "memory": ("40", 40.0),
    "min_count": ("4", 4),
    "smoothing": ("0.5", 0.5),
    "floor": ("0.1", 0.1),
    "floor_space": ("pi", "pi"),
    "base": ("log_uniform", "log_uniform"),
    "gate": ("0.3", 0.3),
    "gate_fallback": ("0.3", 0.3),
    "mmse_cap": ("0.5", 0.5),
    "temperature": ("0.5", 0.5),
    "clean_end_bound": ("false", False),
    "target_space": ("pi", "pi"),
}


@pytest.mark.parametrize("name", sorted(OTHER_VALUES))
def test_each_option_reaches_the_sampler_it_builds(name):
    """The keywords that build the sampler come from the same list as the options: each option's value reaches
    InfoNoise's settings, and the others keep their defaults."""
    assert set(OTHER_VALUES) == set(InfoNoiseSettings.options())  # a new setting gets a row here
    typed, held = OTHER_VALUES[name]
    sched = EDMEulerScheduler()
    args = _parser().parse_args([f"--infonoise_{name}", typed])
    sampler = build_noise_sampler(args, sched, objective=Objective.from_options(sched))
    value = sampler.base_description["name"] if name == "base" else getattr(sampler.settings, name)
    assert value == held
    defaults = InfoNoiseSettings()
    for other in InfoNoiseSettings.names("pi", "statistics"):
        if other != name:
            assert getattr(sampler.settings, other) == getattr(defaults, other), other


@pytest.mark.parametrize(
    ("cls", "name", "unread"),
    [
        (KingmaGaoSampler, "kingma_gao", {"gate", "gate_fallback", "mmse_cap", "temperature", "target_space", "floor_space"}),
        (LossSlopeSampler, "loss_slope", {"gate", "gate_fallback", "temperature", "target_space", "floor_space"}),
    ],
)
def test_a_baseline_accepts_only_the_settings_it_reads(cls, name, unread):
    """Kingma & Gao's and the loss-slope sampler took InfoNoise's 17 settings and refused or ignored 6 and 5 of them:
    each now takes its own class's, and a setting of InfoNoise's target is refused, naming it, even at its default;
    the scripts' warning about their options follows from the same classes."""
    assert set(InfoNoiseSettings.names()) - set(cls._settings_class.names()) == unread == set(unread_settings(name))
    sched = EDMEulerScheduler()
    path = make_sampler(name, sched).path
    for setting in sorted(unread):
        value = getattr(InfoNoiseSettings(), setting)
        message = rf"^{setting}: a setting of InfoNoise's target, not of {re.escape(cls._title)} \(its settings: num_bins, "
        with pytest.raises(ValueError, match=message):
            make_sampler(name, sched, **{setting: value})
        with pytest.raises(ValueError, match=message):
            cls(path, prediction_type="sample", **{setting: value})
    read = {k: OTHER_VALUES[k][1] for k in cls._settings_class.names() if k in OTHER_VALUES and k not in ("ema_decay", "base")}
    sampler = make_sampler(name, sched, **read)
    assert {k: getattr(sampler.settings, k) for k in read} == read
    assert sorted(sampler.settings.stored()) == sorted(cls._settings_class.names("pi", "statistics", "warmup"))


def test_the_mmse_cap_default_rule_is_one_for_every_sampler_with_a_cap():
    """The m̂ cap's default (auto for ε and v losses, none otherwise) was written in InfoNoise and again in the loss
    slope; Kingma & Gao's sampler has no cap."""
    assert (default_mmse_cap("epsilon"), default_mmse_cap("v_prediction"), default_mmse_cap("sample")) == ("auto", "auto", None)
    for name in ("infonoise", "loss_slope"):
        assert make_sampler(name, DDPMScheduler()).settings.mmse_cap == "auto"
        assert make_sampler(name, DDPMScheduler(), prediction_type="sample").settings.mmse_cap is None
    assert make_sampler("kingma_gao", DDPMScheduler()).estimator.mmse_cap is None
    assert issubclass(InfoNoiseSettings, AdaptiveSettings) and issubclass(LossSlopeSettings, AdaptiveSettings)
    assert not hasattr(make_sampler("kingma_gao", DDPMScheduler()).settings, "mmse_cap")


@pytest.mark.parametrize("module", SCRIPTS)
def test_no_script_help_advertises_a_study_setting_or_an_issue(module, capsys):
    """--help advertised --infonoise_temperature, --infonoise_target_space (described by an issue number),
    --infonoise_ema_decay and --infonoise_clean_end_bound; they stay accepted (the benchmarks pass them)."""
    script = load_training_script(module, f"_settings_{module}")
    with pytest.raises(SystemExit):
        script.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--infonoise_num_bins" in text and "--infonoise_floor " in text
    hidden = [name for name in STUDY if f"--infonoise_{name}" in text]
    assert hidden == [] and "'paper'" not in text
    assert not re.search(r"\bissue #?\d+", text, re.IGNORECASE)
    args = _parser().parse_args(["--infonoise_ema_decay", "0.9", "--infonoise_clean_end_bound", "false", "--infonoise_temperature",
                                 "0.5", "--infonoise_target_space", "pi", "--infonoise_gate", "paper"])  # fmt: skip
    assert (args.infonoise_ema_decay, args.infonoise_clean_end_bound, args.infonoise_temperature) == (0.9, False, 0.5)
    assert (args.infonoise_target_space, args.infonoise_gate) == ("pi", "paper")


def test_the_package_names_no_issue_number():
    """Docstrings, comments and help texts say what a thing is, not which issue brought it."""
    found = []
    for folder in ("diffusers_infonoise", "training_scripts", "model_cards"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".md", ".j2", ".txt", ".json"):
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                    if re.search(r"\bissue #?\d+", line, re.IGNORECASE):
                        found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert len(list((ROOT / "diffusers_infonoise").rglob("*.py"))) > 40
    assert found == []
