"""Fine-tuning with the training scripts (issue 22): ``train_unconditional.py --pretrained_model_name_or_path``,
``--infonoise_init {auto,base,stored,profile}`` and ``--infonoise_schedule_from``, and the errors that come
before anything is trained. A tiny EDM model is pretrained once on 64 digits (8x8) with InfoNoise."""

from __future__ import annotations

import logging

import pytest
import torch

from helpers.scripts import assert_option_error
from helpers.unconditional import base_args, scheduler_payload

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, unet_config):
    """A pipeline folder with a stored 16-bin schedule, and one trained with a fixed density (no schedule)."""
    from helpers.scripts import load_training_script

    script = load_training_script("train_unconditional", "train_unconditional_pretrain")
    root = tmp_path_factory.mktemp("pre")
    script.main(base_args(unet_config, root / "infonoise", "--diffusion", "edm", "--max_train_steps", 6))
    script.main(base_args(unet_config, root / "fixed", "--diffusion", "edm", "--noise_sampler", "edm_lognormal", "--max_train_steps", 2))
    assert scheduler_payload(root / "infonoise")["adapted"] and scheduler_payload(root / "fixed") is None
    return root


def _drop(args: list, *options: str) -> list:
    for option in options:
        i = args.index(option)
        args = args[:i] + args[i + 2 :]
    return args


def finetune_args(pretrained_dir, out, *extra):
    """base_args without the from-scratch model config (the UNet and scheduler come from ``pretrained_dir``) and
    without its pinned warm-up (the library's automatic one, which a start skips)."""
    args = _drop(base_args("-", out), "--model_config_name_or_path", "--infonoise_warmup_steps")
    return args + ["--diffusion", "edm", "--pretrained_model_name_or_path", str(pretrained_dir), *map(str, extra)]


def _start_log(caplog) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if "noise sampler start" in r.getMessage())


def test_auto_takes_the_stored_schedule_and_the_ema_starts_from_the_pretrained_weights(script, pretrained, tmp_path, caplog):
    from diffusers import UNet2DModel

    out = tmp_path / "stored"
    with caplog.at_level(logging.INFO):
        script.main(finetune_args(pretrained / "infonoise", out, "--max_train_steps", 2, "--use_ema", "--learning_rate", "1e-12"))
    assert "init 'auto': the schedule from the pretrained scheduler is for this run's path" in _start_log(caplog)
    payload = scheduler_payload(out)
    assert payload["adapted"] and payload["warmup_steps_resolved"] == 0 and payload["hyperparameters"]["warmup_steps"] == 0
    # lr ~0: the saved (EMA) weights are the pretrained ones, so the EMA started from them, not from a fresh init
    a = UNet2DModel.from_pretrained(str(pretrained / "infonoise"), subfolder="unet").state_dict()
    b = UNet2DModel.from_pretrained(str(out), subfolder="unet").state_dict()
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-6
    card = (out / "README.md").read_text()
    # a local folder is no Hub repo: kept out of the metadata (the Hub would link it), named as local in the table
    assert "base_model:" not in card and "start `stored`" in card
    assert f"| fine-tuned from | `{pretrained / 'infonoise'}` (a local folder, not a Hub repo) |" in card


def test_show_noise_schedule_shows_the_profile_start_the_run_takes(script, pretrained, tmp_path, capsys):
    """Issue 28: ``--show_noise_schedule`` with a profile start showed the base density without saying so. It now
    measures the start on the data as the run does, says what it shows, and the π it shows is the one a run of the
    same options starts from (stored after one step, before any refresh); the base start's is another."""
    import hashlib
    import re

    shown = tmp_path / "show"
    capsys.readouterr()
    script.main(finetune_args(pretrained / "fixed", shown, "--max_train_steps", 1, "--infonoise_init", "profile", "--show_noise_schedule"))
    text = capsys.readouterr().out
    assert "shown: the profile start: the pretrained model's errors on the training data" in text, text
    assert "16 of 16 bins measured" in text
    assert sorted(p.name for p in shown.iterdir()) == ["noise_schedule.png"]  # measured, not trained: no model, no logs
    run = tmp_path / "run"
    script.main(finetune_args(pretrained / "fixed", run, "--max_train_steps", 1, "--infonoise_init", "profile"))
    payload = scheduler_payload(run)
    assert payload["num_updates"] == 1 and payload["optimizer_steps"] == 1  # the start's π, no refresh since
    started = hashlib.sha256(torch.tensor(payload["pi"], dtype=torch.float64).numpy().tobytes()).hexdigest()[:16]
    assert re.search(r"^pi hash: ([0-9a-f]+)$", text, re.M).group(1) == started
    capsys.readouterr()
    script.main(finetune_args(pretrained / "fixed", tmp_path / "base", "--infonoise_init", "base", "--show_noise_schedule"))
    base = capsys.readouterr().out
    assert "shown: the base density (the warm-up's" in base and "pi hash" not in base
    row = re.compile(r"^pi:.*$", re.M)
    assert row.search(base).group(0) != row.search(text).group(0)
    # the bound by the data, when asked for, is said too (issue 31)
    capsys.readouterr()
    bounded = ("--dataset_name", "binarized_digits", "--infonoise_profile_bound", "data", "--show_noise_schedule")
    script.main(finetune_args(pretrained / "fixed", tmp_path / "bounded", "--max_train_steps", 1, *bounded))
    assert "bins measured; m_hat bounded by the per-element posterior mean of 2 values (16 samples)" in capsys.readouterr().out


def test_stored_with_other_bins_is_interpolated_and_an_explicit_warmup_is_kept(script, pretrained, tmp_path, caplog):
    """issue 22: another --infonoise_num_bins stopped the run, and --infonoise_warmup_steps 50 was saved as 0."""
    out = tmp_path / "bins"
    with caplog.at_level(logging.INFO):
        script.main(
            finetune_args(
                pretrained / "infonoise",
                out,
                "--max_train_steps",
                4,
                "--infonoise_init",
                "stored",
                "--infonoise_num_bins",
                "24",
                "--infonoise_warmup_steps",
                "2",
            )
        )
    assert "interpolated onto this sampler's 24 bins" in caplog.text
    payload = scheduler_payload(out)
    assert len(payload["pi"]) == 24 and payload["hyperparameters"]["warmup_steps"] == 2
    assert payload["warmup_steps_resolved"] == 2 and payload["adapted"]


def test_profile_measures_the_pretrained_model_before_step_one(script, pretrained, tmp_path, caplog):
    out = tmp_path / "profile"
    with caplog.at_level(logging.INFO):
        script.main(finetune_args(pretrained / "fixed", out, "--max_train_steps", 2))
    log = caplog.text
    # auto: no stored schedule in the pretrained scheduler, a pretrained model: its errors are measured
    assert "init 'auto': a pretrained model is given, so its errors are measured" in log
    # one line for the start, with what it measured (it was logged twice, once without the measurement)
    (line,) = _start_log(caplog).splitlines()
    # 16 bins x 1 level a bin, in batches of 8 (base_args)
    assert line.startswith("noise sampler start: profile (init 'auto'") and "samples_per_bin 1, forward_passes 2, samples 16," in line, line
    assert "noise sampler profile start:" in log and "16 of 16 bins filled" in log
    payload = scheduler_payload(out)
    assert payload["adapted"] and payload["warmup_steps_resolved"] == 0 and payload["tv_phi_rho"] <= 0.07


def test_a_profile_start_on_binarized_data_is_bounded_by_the_data_unless_told_not_to(script, pretrained, tmp_path, caplog):
    """Issue 31: with ``--infonoise_profile_bound data``, on binarized digits the start's errors are bounded by each
    pixel's posterior mean (its values tallied on the 16 images the start measured on), and the record says so in the
    stored schedule and the log; by default (``none``) they are kept as measured and the record says nothing of it."""
    runs = {}
    for name, extra in (("bounded", ("--infonoise_profile_bound", "data")), ("none", ())):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            script.main(
                finetune_args(pretrained / "fixed", tmp_path / name, "--max_train_steps", 2, "--dataset_name", "binarized_digits", *extra)
            )
        runs[name] = (caplog.text, scheduler_payload(tmp_path / name))
    log, payload = runs["bounded"]
    assert "m_hat bounded by the per-element posterior mean of 2 values (16 samples)" in log
    assert payload["start"]["bound"]["values"] == 2 and payload["start"]["bound"]["samples"] == 16
    log, payload = runs["none"]
    assert "m_hat" not in log and "bound" not in payload["start"] and payload["start"]["choice"] == "profile"
    # asked for on the 17 levels of digits: kept as measured, and the record says why
    caplog.clear()
    with caplog.at_level(logging.INFO), pytest.warns(UserWarning, match="was not applied: the data takes more than 16 values"):
        script.main(finetune_args(pretrained / "fixed", tmp_path / "digits", "--max_train_steps", 1, "--infonoise_profile_bound", "data"))
    assert "m_hat not bounded (the data takes more than 16 values)" in caplog.text
    assert scheduler_payload(tmp_path / "digits")["start"]["bound"] == "none: the data takes more than 16 values"


def test_a_schedule_from_another_folder_starts_a_run_from_scratch(script, unet_config, pretrained, tmp_path, caplog):
    out = tmp_path / "shared"
    with caplog.at_level(logging.INFO):
        script.main(
            _drop(
                base_args(
                    unet_config,
                    out,
                    "--diffusion",
                    "edm",
                    "--max_train_steps",
                    2,
                    "--infonoise_schedule_from",
                    str(pretrained / "infonoise" / "scheduler"),
                    "--infonoise_profile_bound",  # the default, given: accepted with any start
                    "none",
                ),
                "--infonoise_warmup_steps",
            )
        )
    assert f"init 'stored': the schedule from {pretrained / 'infonoise' / 'scheduler'}" in _start_log(caplog)
    assert scheduler_payload(out)["warmup_steps_resolved"] == 0


def test_a_resumed_fine_tune_keeps_how_it_started(script, pretrained, tmp_path):
    """issue 28 (8): a profile-started run resumed by a command whose own start would be 'stored' (and its warm-up
    'auto'): the stored schedule, its settings and the model card say how the run began (profile, warm-up 0)."""
    out = tmp_path / "resumed"
    script.main(finetune_args(pretrained / "fixed", out, "--max_train_steps", 2, "--checkpointing_steps", 1))
    assert scheduler_payload(out)["start"]["choice"] == "profile"
    shared = pretrained / "infonoise" / "scheduler"
    script.main(
        finetune_args(
            pretrained / "fixed",
            out,
            "--max_train_steps",
            3,
            "--resume_from_checkpoint",
            "checkpoint-1",
            "--infonoise_schedule_from",
            shared,
        )
    )
    payload = scheduler_payload(out)
    assert payload["optimizer_steps"] == 3 and payload["hyperparameters"]["warmup_steps"] == 0
    assert payload["start"]["choice"] == "profile" and payload["start"]["source"] == "the pretrained model"
    # a 2-step run at batch 8 affords int(0.05 * 2 * 8 / 16) = 0, so 1 level a bin: 16 levels in 2 passes of 8
    card = (out / "README.md").read_text()
    assert "start `profile` (the pretrained model's errors on 16 levels (1 a bin, 2 forward passes per process)" in card
    assert "`warmup_steps=0`" in card


@pytest.mark.parametrize(
    "extra,match",
    [
        (
            ["--diffusion", "ddpm"],
            r"has a EDMEulerScheduler \(ve path\), but --diffusion ddpm trains a vp path; pass "
            r"--diffusion edm",
        ),
        (["--prediction_type", "v_prediction"], r"--prediction_type v_prediction: the pretrained model .* predicts 'epsilon'"),
        (["--ddpm_num_steps", "500"], r"--ddpm_num_steps 500 \(the pretrained scheduler has num_train_timesteps=1000\); drop"),
        (["--infonoise_init", "stored"], "'stored' needs a stored schedule, and this run has none"),
        (["--infonoise_schedule_from", "./NOWHERE"], r"no such file or folder: \./NOWHERE \(tried as a local path"),
        (["--infonoise_init", "base", "--infonoise_schedule_from", "x"], "drop one of them"),
        (["--infonoise_init", "base", "--infonoise_profile_bound", "data"], "--infonoise_profile_bound data: bounds an InfoNoise profile"),
        (
            ["--noise_sampler", "logit_normal", "--infonoise_profile_bound", "data"],
            "this run starts 'base' .*; use --noise_sampler infonoise",
        ),
    ],
)
def test_bad_fine_tuning_options_stop_before_anything_is_trained(script, pretrained, tmp_path, capsys, extra, match):
    """Each ends as argparse ends a bad option: one line on stderr and exit status 2, no traceback (issue 28)."""
    out = tmp_path / "bad"
    assert_option_error(capsys, match, script.main, finetune_args(pretrained / "fixed", out, "--max_train_steps", 2, *extra))
    assert not out.exists() or not any(out.iterdir())  # nothing trained, nothing written


def test_profile_without_a_pretrained_model_and_a_folder_without_a_schedule(script, unet_config, pretrained, tmp_path, capsys):
    assert_option_error(
        capsys,
        "'profile' measures a pretrained model's errors",
        script.main,
        base_args(unet_config, tmp_path / "a", "--diffusion", "edm", "--infonoise_init", "profile"),
    )
    assert_option_error(
        capsys,
        "holds no stored InfoNoise schedule",
        script.main,
        base_args(unet_config, tmp_path / "b", "--diffusion", "edm", "--infonoise_schedule_from", str(pretrained / "fixed")),
    )
    with pytest.raises(SystemExit):
        script.parse_args(base_args(unet_config, tmp_path / "c", "--pretrained_model_name_or_path", str(pretrained)))
    assert torch.get_num_threads() >= 1


def test_a_mistyped_run_folder_is_not_read_from_the_hub(script, pretrained, tmp_path, capsys, monkeypatch):
    """Issue 28: ``runs/zA`` beside a folder ``runs`` was tried as a Hub repo (a minute of retries offline, any public
    repo of that name online). A source whose first component exists here is local, and the run stops at once with
    one line saying so; a folder that exists but is no pipeline says what is missing, in one line too."""
    import huggingface_hub

    def no_hub(*args, **kwargs):
        raise AssertionError("the Hub was asked")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_hub)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for flag in ("--pretrained_model_name_or_path", "--infonoise_schedule_from"):
        argv = finetune_args(pretrained / "infonoise", tmp_path / "out", "--max_train_steps", 2, flag, "runs/zA")
        want = rf"{flag}: no such file or folder: runs/zA \(tried as a local path because \./runs exists\)"
        assert_option_error(capsys, want, script.main, argv)
    argv = finetune_args(tmp_path / "runs", tmp_path / "out", "--max_train_steps", 2)
    assert_option_error(capsys, "scheduler_config.json", script.main, argv)
    assert not (tmp_path / "out").exists()
