"""Tests for the ``infonoise`` command (diffusers_infonoise.cli), run in-process through ``main``."""

from __future__ import annotations

import json
import math
import re
import shutil

import pytest
import torch

from diffusers_infonoise.cli import main
from diffusers_infonoise.schedule_io import CONFIG_KEY

from helpers.cli import assert_one_line_error, run, save_before_adapting


@pytest.mark.parametrize("sub", [None, "show", "profile", "dataset-profile", "compare"])
def test_help(capsys, sub):
    with pytest.raises(SystemExit) as exc:
        main(["--help"] if sub is None else [sub, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "usage: infonoise" in out
    if sub == "profile":
        assert "--edm-timestep-scale" in out and "--samplers" in out


@pytest.mark.parametrize("sub", ["profile", "compare", "recommend"])
def test_auto_is_accepted_in_any_case(sub):
    """argtypes' rule, as in the training scripts: --loss-weighting AUTO was an invalid choice, --gate AUTO no gate rule."""
    from diffusers_infonoise.cli import build_parser

    needs = {"profile": ["--model", "m", "--dataset", "d"], "compare": ["--scheduler", "edm"], "recommend": ["x"]}[sub]
    args = build_parser().parse_args([sub, *needs, "--loss-weighting", "AUTO"] + (["--gate", "Auto"] if sub != "compare" else []))
    assert args.loss_weighting == "auto" and getattr(args, "gate", "auto") == "auto"


def test_show_learned_schedule_in_every_container(capsys, saved, tmp_path):
    rc, out, _ = run(capsys, "show", saved["learned"], "--plot", tmp_path / "s.png", "--rows", 4)
    assert rc == 0
    assert "3 optimizer steps" in out and "loss_weighting=edm" in out and "num_bins=16" in out
    assert "base density" in out and "phi = pi*w" in out and "rho_hat" in out
    assert (tmp_path / "s.png").stat().st_size > 0
    # pipeline layout, the JSON file itself, and a bare payload
    pipe = tmp_path / "pipe" / "scheduler"
    shutil.copytree(saved["learned"], pipe)
    assert run(capsys, "show", tmp_path / "pipe")[0] == 0
    assert run(capsys, "show", saved["learned"] / "scheduler_config.json")[0] == 0
    payload = json.loads((saved["learned"] / "scheduler_config.json").read_text())[CONFIG_KEY]
    (tmp_path / "payload.json").write_text(json.dumps(payload))
    rc, out, _ = run(capsys, "show", tmp_path / "payload.json")
    assert rc == 0 and "EDMEulerScheduler" in out


def test_show_errors(capsys, saved, tmp_path, monkeypatch):
    rc, _, err = run(capsys, "show", saved["plain"])
    assert_one_line_error(rc, err, "no learned InfoNoise schedule")
    rc, _, err = run(capsys, "show", tmp_path / "missing")
    assert_one_line_error(rc, err, "no such file or folder")
    rc, _, err = run(capsys, "show", tmp_path)  # a directory without a scheduler config
    assert_one_line_error(rc, err, "no scheduler config")
    assert "training checkpoint" not in err
    (tmp_path / "checkpoint-1200").mkdir()  # a script's checkpoint holds the sampler's state, not a scheduler config
    rc, _, err = run(capsys, "show", tmp_path / "checkpoint-1200")
    assert_one_line_error(rc, err, f"checkpoint-1200 is a training checkpoint: pass the run's output folder ({tmp_path})")
    (tmp_path / "bad.json").write_text("{not json")
    rc, _, err = run(capsys, "show", tmp_path / "bad.json")
    assert_one_line_error(rc, err, "not valid JSON")
    # issue 28: a mistyped run folder is not a Hub repo, and a link to a device is not opened
    (tmp_path / "runs").mkdir()
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    monkeypatch.chdir(tmp_path)
    rc, _, err = run(capsys, "show", "runs/zA")
    assert_one_line_error(rc, err, "no such file or folder: runs/zA (tried as a local path because ./runs exists)")
    rc, _, err = run(capsys, "show", "zero.json")
    assert_one_line_error(rc, err, "zero.json: a character device, not a regular file or a folder")


def test_show_hub_repo_offline(capsys, saved, tmp_path, monkeypatch):
    """A cached repo is served offline; an uncached one fails with a clear message, not a traceback."""
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--someone--learned"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit / "scheduler"
    snap.mkdir(parents=True)
    shutil.copy(saved["learned"] / "scheduler_config.json", snap / "scheduler_config.json")
    rc, out, _ = run(capsys, "show", "someone/learned", "--cache-dir", tmp_path)
    assert rc == 0 and "someone/learned" in out and "3 optimizer steps" in out
    rc, _, err = run(capsys, "show", "someone/not-cached", "--cache-dir", tmp_path)
    assert_one_line_error(
        rc, err, "someone/not-cached: cannot be read from the Hub here: HF_HUB_OFFLINE is set and it is not in the Hub cache"
    )


def test_an_uncached_hub_repo_that_the_hub_cannot_answer_fails_after_one_short_attempt(capsys, tmp_path, monkeypatch):
    """Online mode where nothing answers: one connection of a few seconds, then the error (huggingface_hub's own
    retries took about 50 s before theirs), for a SOURCE and for --scheduler alike."""
    import huggingface_hub.constants as hub_constants

    from diffusers_infonoise import schedule_io

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    asked = []

    def unreachable(endpoint, timeout):
        asked.append(timeout)
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(schedule_io, "_ask_hub", unreachable)
    rc, _, err = run(capsys, "show", "someone/not-cached", "--cache-dir", tmp_path)
    assert_one_line_error(rc, err, "someone/not-cached: cannot be read from the Hub here", "cannot be reached (Network is unreachable)")
    rc, _, err = run(capsys, "compare", "--scheduler", "someone/not-cached", "--samplers", "uniform", "--cache-dir", tmp_path)
    assert_one_line_error(rc, err, "--scheduler: someone/not-cached: cannot be read from the Hub here")
    assert asked == [schedule_io.HUB_CONNECT_TIMEOUT] * 2 and asked[0] <= 5
    # a bare name is no Hub repo of diffusers: refused at once, naming the flag and the shortcuts
    rc, _, err = run(capsys, "compare", "--scheduler", "nonsense", "--samplers", "uniform")
    assert_one_line_error(rc, err, "--scheduler: 'nonsense' is none of edm, ddpm, flow and no local file or folder")
    assert len(asked) == 2


def test_compare(capsys, saved, tmp_path):
    rc, out, _ = run(capsys, "compare", "--samplers", "edm_lognormal,log_uniform", "--scheduler", "edm")
    assert rc == 0 and "edm_lognormal" in out and "log_uniform" in out and "edm_lognormal vs log_uniform" in out
    rc, out, _ = run(
        capsys,
        "compare",
        "--samplers",
        "edm_lognormal,infonoise",
        "--scheduler",
        saved["learned"],
        "--plot",
        tmp_path / "c.png",
        "--json",
        tmp_path / "c.json",
    )
    assert rc == 0 and "in rho_hat window" in out
    data = json.loads((tmp_path / "c.json").read_text())
    assert set(data["allocations"]) == {"edm_lognormal", "infonoise"}
    assert len(data["allocations"]["infonoise"]["phi"]) == 16  # the stored schedule's bins
    rc, _, err = run(capsys, "compare", "--samplers", "edm_lognormal,bogus", "--scheduler", "edm")
    assert_one_line_error(rc, err, "unknown sampler name(s) bogus", "accepted: infonoise")
    rc, out, _ = run(capsys, "compare", "--samplers", "uniform", "--scheduler", "ddpm", "--loss-weighting", "min_snr", "--snr-gamma", "5")
    assert rc == 0 and "loss_weighting=min_snr" in out


def test_dataset_profile_digits(capsys, tmp_path):
    rc, out, _ = run(
        capsys,
        "dataset-profile",
        "--dataset",
        "digits",
        "--max-samples",
        200,
        "--num-levels",
        6,
        "--num-noise-draws",
        32,
        "--output",
        tmp_path,
        "--no-progress",
    )
    assert rc == 0
    assert "memorisation" in out and "200 samples" in out
    data = json.loads((tmp_path / "dataset_profile.json").read_text())
    prof = data["profile"]
    assert len(prof["mmse"]) == 6 and prof["meta"]["num_data"] == 200 and prof["meta"]["dim"] == 64
    assert (tmp_path / "dataset_profile.png").stat().st_size > 0
    rc, _, err = run(capsys, "dataset-profile", "--dataset", "no_such_set")
    assert_one_line_error(rc, err, "neither a built-in data set")


def test_profile_pipeline(capsys, saved, tmp_path):
    rc, out, err = run(
        capsys,
        "profile",
        "--model",
        saved["pipe"],
        "--dataset",
        "digits",
        "--num-samples",
        6,
        "--num-levels",
        4,
        "--num-noise-draws",
        1,
        "--samplers",
        "edm_lognormal,logit_normal,infonoise",
        "--output",
        tmp_path,
        "--no-progress",
        "--edm-timestep-scale",
        250,
    )
    assert rc == 0, err
    data = json.loads((tmp_path / "profile.json").read_text())
    assert set(data["allocations"]) == {"edm_lognormal", "logit_normal", "infonoise"}
    # the pipeline holds no stored schedule: the infonoise row is its base density (EDM log-normal on this path),
    # which the report says, as compare does, instead of passing it off as a learned schedule
    assert "holds no stored InfoNoise schedule: the infonoise row is its base density edm_lognormal, the warm-up" in out
    assert data["infonoise"]["shows"] == "base density" and "edm_lognormal" in json.dumps(data["infonoise"]["base"])
    assert data["summary"]["infonoise"]["total_variation"] == pytest.approx(data["summary"]["edm_lognormal"]["total_variation"], abs=1e-9)
    assert len(data["profile"]["rho_hat"]) == 4 and data["profile"]["meta"]["edm_timestep_scale"] == 250.0
    assert 0.0 <= data["summary"]["edm_lognormal"]["window_mass"] <= 1.0
    assert (tmp_path / "profile.png").stat().st_size > 0


def test_profile_errors(capsys, saved, tmp_path):
    rc, _, err = run(capsys, "profile", "--model", saved["rgb"], "--dataset", "digits", "--output", tmp_path)
    assert_one_line_error(rc, err, "model/data mismatch", "3 channel")
    rc, _, err = run(capsys, "profile", "--model", saved["pipe"], "--dataset", "digits", "--samplers", "nope", "--output", tmp_path)
    assert_one_line_error(rc, err, "unknown sampler name(s) nope")
    rc, _, err = run(capsys, "profile", "--model", tmp_path / "nothing", "--dataset", "digits")
    assert_one_line_error(rc, err, "no such file or folder")
    rc, _, err = run(
        capsys,
        "profile",
        "--model",
        saved["pipe"],
        "--dataset",
        "digits",
        "--prediction-type",
        "flow",
        "--num-samples",
        2,
        "--output",
        tmp_path,
        "--no-progress",
    )
    assert_one_line_error(rc, err, "--prediction-type: 'flow' is not a loss parameterization of the ve path")


def test_a_device_this_machine_lacks_is_a_clear_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit) as info:
        main(["dataset-profile", "--dataset", "digits", "--device", "cuda"])
    assert info.value.code == 2 and "no CUDA device" in capsys.readouterr().err


def test_compare_a_stored_schedule_with_a_profile_of_your_data(capsys, saved, tmp_path):
    """issue 22: before training from a shared schedule, its ρ̂ against a profile of the user's data. The stored
    schedule was learned from N(0, 0.25) data's exact MMSE: the analytic profile of that data fits it (TV near 0,
    the stored estimate's smoothing and 16 bins aside), the profile of data ten times as wide does not."""
    from diffusers_infonoise.diagnostics import profile_from_errors

    sig = torch.exp(torch.linspace(math.log(0.002), math.log(80.0), 40, dtype=torch.float64))
    tvs = {}
    for name, s_d in (("same", 0.5), ("wider", 5.0)):
        prof = profile_from_errors(sig, sig**2 * s_d**2 / (sig**2 + s_d**2), loss_weighting="edm")
        (tmp_path / f"{name}.json").write_text(json.dumps({"profile": prof.to_dict()}))
        rc, out, _ = run(capsys, "compare", "--scheduler", saved["learned"], "--profile", tmp_path / f"{name}.json")
        assert rc == 0, out
        tvs[name] = float(re.search(r"TV\(stored rho_hat, your data's rho_hat\)\s+([0-9.]+)", out).group(1))
        assert re.search(r"TV\(stored phi = pi\*w, your data's rho_hat\)\s+[0-9.]+", out)
    assert tvs["same"] < 0.06 and tvs["wider"] > 0.3
    rc, _, err = run(capsys, "compare", "--scheduler", saved["plain"], "--profile", tmp_path / "same.json")
    assert_one_line_error(rc, err, "holds no stored InfoNoise schedule")
    # a schedule saved during its warm-up holds no estimate: the schedule is named, not the profile file
    save_before_adapting(tmp_path / "young")
    rc, _, err = run(capsys, "compare", "--scheduler", tmp_path / "young", "--profile", tmp_path / "same.json")
    assert_one_line_error(rc, err, "its stored schedule was saved before it adapted (at optimizer step 1): it holds no estimate")
    assert "--profile" not in err.split("error:")[1].split(":")[0]
    rc, _, err = run(capsys, "compare", "--scheduler", "edm")
    assert_one_line_error(rc, err, "give --samplers, --profile or both")


def test_a_damaged_stored_number_is_one_line_naming_its_field(capsys, saved, tmp_path):
    """An integer no float holds (JSON's exact 10**400), text or null where a number belongs, or a negative value, in a
    stored schedule or a profile JSON: one line naming the field (and a negative value with its index and sigma), never
    an OverflowError traceback or Python's own "must be real number, not str"."""
    from diffusers_infonoise.diagnostics import profile_from_errors

    config = json.loads((saved["learned"] / "scheduler_config.json").read_text())
    for field, value, fragment in (
        ("gate", 10**400, "_infonoise_schedule.hyperparameters.gate: an integer of about 401 digits"),
        ("m_hat", -2.0, "got m_hat[3] = -2 in the bin at VE sigma"),
    ):
        bad = json.loads(json.dumps(config))
        if field == "gate":
            bad[CONFIG_KEY]["hyperparameters"]["gate"] = value
        else:
            bad[CONFIG_KEY]["m_hat"][3] = value
        (tmp_path / "scheduler_config.json").write_text(json.dumps(bad))
        for argv in (["show"], ["recommend"], ["grid", "--steps", "4"]):
            rc, _, err = run(capsys, *argv, tmp_path / "scheduler_config.json")
            assert_one_line_error(rc, err, fragment)
    sig = torch.exp(torch.linspace(math.log(0.002), math.log(80.0), 12, dtype=torch.float64))
    good = {"profile": profile_from_errors(sig, sig**2 * 0.25 / (sig**2 + 0.25), loss_weighting="edm").to_dict()}
    for key, index, value, fragment in (
        ("log_sigma", 2, 10**400, "profile.log_sigma[2]: an integer of about 401 digits"),
        ("rho_hat", 4, "0.1", "profile: rho_hat must be a flat list of numbers, got rho_hat[4] = '0.1'"),
        ("log_sigma", 1, None, "profile: log_sigma must be a flat list of numbers, got log_sigma[1] = None"),
        ("rho_hat", 4, -0.5, "profile: rho_hat must be finite and >= 0, got rho_hat[4] = -0.5 at VE sigma 0.0"),
    ):
        bad = json.loads(json.dumps(good))
        bad["profile"][key][index] = value
        (tmp_path / "profile.json").write_text(json.dumps(bad))
        rc, _, err = run(capsys, "recommend", tmp_path / "profile.json")
        assert_one_line_error(rc, err, fragment)
        rc, _, err = run(capsys, "compare", "--scheduler", saved["learned"], "--profile", tmp_path / "profile.json")
        assert_one_line_error(rc, err, fragment)


def test_show_validates_the_payload_once(capsys, saved, tmp_path, monkeypatch):
    """Issue 29: ``infonoise show`` validated one payload three times (the config, the scheduler built from it, the
    sampler built from that). It reads it once, from a scheduler config and from a bare payload alike."""
    from diffusers_infonoise import schedule_io

    calls = []
    validate = schedule_io.validate_payload
    monkeypatch.setattr(schedule_io, "validate_payload", lambda payload: calls.append(1) or validate(payload))
    payload = json.loads((saved["learned"] / "scheduler_config.json").read_text())[CONFIG_KEY]
    (tmp_path / "payload.json").write_text(json.dumps(payload))
    for source in (saved["learned"], tmp_path / "payload.json"):
        calls.clear()
        assert run(capsys, "show", source)[0] == 0
        assert len(calls) == 1, source


def test_a_plot_file_matplotlib_cannot_write_is_refused_before_any_work(capsys, saved, tmp_path):
    """--plot of every subcommand: an unknown suffix (matplotlib refused it only after the work, in a message naming
    no option) or none (saved as FILE.png while the command said it wrote FILE) is an argparse error naming --plot;
    nothing is written."""
    for name in ("s.txt", "s"):
        for argv in (
            ("show", saved["learned"]),
            ("recommend", saved["learned"]),
            ("compare", "--scheduler", saved["learned"]),
            ("grid", saved["learned"]),
        ):
            with pytest.raises(SystemExit) as info:
                main([str(a) for a in (*argv, "--plot", tmp_path / name)])
            err = capsys.readouterr().err
            assert info.value.code == 2 and "argument --plot" in err and ".png" in err, (argv, err)
    assert list(tmp_path.iterdir()) == []
    rc, out, _ = run(capsys, "show", saved["learned"], "--plot", tmp_path / "s.PDF")
    assert rc == 0 and (tmp_path / "s.PDF").is_file() and f"wrote {tmp_path / 's.PDF'}" in out


def test_an_output_file_in_a_missing_folder_is_refused_before_any_work(capsys, saved, tmp_path):
    """--plot and --json: a folder that does not exist (the write failed after the work, as a bare ``[Errno 2]`` naming
    no option) or a name that is a folder is an argparse error naming the option; nothing is written."""
    missing = tmp_path / "no" / "such"
    for option, name in (("--plot", "s.png"), ("--json", "s.json")):
        for argv in (
            ("compare", "--scheduler", saved["learned"]),
            ("recommend", saved["learned"]),
            ("grid", saved["learned"], "--steps", 3),
        ):
            for target, says in (
                (missing / name, f"its folder {str(missing)!r} does not exist"),
                (tmp_path, "not a folder"),
                (f"{tmp_path}/new/", "not a folder"),  # a trailing slash names a folder, not a file called 'new'
                ("", "expected a file name, got ''"),
            ):
                with pytest.raises(SystemExit) as info:
                    main([str(a) for a in (*argv, option, target)])
                err = capsys.readouterr().err
                assert info.value.code == 2 and f"argument {option}" in err and says in err, (argv, option, err)
    with pytest.raises(SystemExit):
        main([str(a) for a in ("show", saved["learned"], "--plot", missing / "s.png")])
    assert "its folder" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_an_output_folder_that_is_empty_or_a_file_is_refused_before_any_work(capsys, tmp_path):
    """profile and dataset-profile --output DIR: an empty name (dataset-profile then wrote nothing and said nothing) or
    an existing file is an argparse error naming --output."""
    (tmp_path / "f").write_text("x")
    for argv in (("dataset-profile", "--dataset", "digits"), ("profile", "--model", str(tmp_path), "--dataset", "digits")):
        for value, says in (("", "got ''"), (str(tmp_path / "f"), "exists and is not a folder")):
            with pytest.raises(SystemExit) as info:
                main([*argv, "--output", value])
            err = capsys.readouterr().err
            assert info.value.code == 2 and "argument --output" in err and says in err, (argv, value, err)


def test_compare_says_when_the_infonoise_row_is_its_base_density(capsys, saved, tmp_path, monkeypatch):
    """compare --samplers infonoise on a scheduler without a stored schedule showed InfoNoise's base density (its
    warm-up density: EDM log-normal on an EDM path, TV 0 to edm_lognormal) with nothing saying so; it now says so in
    the text, the JSON and the plot's legend. So does a schedule stored before it adapted; an adapted one says nothing."""

    from diffusers_infonoise import diagnostics

    drawn = []
    monkeypatch.setattr(diagnostics, "plot_allocations", lambda allocs, *a, **k: drawn.append([x.name for x in allocs]))
    argv = ("compare", "--samplers", "edm_lognormal,infonoise", "--json", tmp_path / "c.json", "--plot", tmp_path / "c.png")
    rc, out, err = run(capsys, *argv, "--scheduler", saved["plain"])
    assert rc == 0, err
    assert "edm_lognormal vs infonoise: 0.000" in out
    note = (
        f"{saved['plain'] / 'scheduler_config.json'} holds no stored InfoNoise schedule: the infonoise row is its base "
        "density edm_lognormal, the warm-up density a run would start from, not an adapted schedule"
    )
    assert f"  note: {note}" in out
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["stored_schedule"] is False
    assert data["infonoise"]["shows"] == "base density" and data["infonoise"]["base"] == {"name": "edm_lognormal"}
    assert data["infonoise"]["note"].startswith(note)
    assert drawn[-1] == ["edm_lognormal", "infonoise = base edm_lognormal (no stored schedule)"]
    # a schedule saved at optimizer step 2 of a 5-step warm-up is still the base density
    save_before_adapting(tmp_path / "young", steps=2)
    rc, out, err = run(capsys, *argv, "--scheduler", tmp_path / "young")
    assert rc == 0, err
    assert (
        f"  note: the schedule stored in {tmp_path / 'young' / 'scheduler_config.json'} was saved before it adapted (at optimizer step 2): "
        in out
    )
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["stored_schedule"] is True and data["infonoise"]["shows"] == "base density"
    assert drawn[-1][1] == "infonoise = base edm_lognormal (stored before it adapted)"
    # the adapted stored schedule: no note
    rc, out, err = run(capsys, *argv, "--scheduler", saved["learned"])
    assert rc == 0 and "note:" not in out, out
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["stored_schedule"] is True and data["infonoise"] == {"shows": "stored schedule", "target_space": "phi"}
    assert drawn[-1] == ["edm_lognormal", "infonoise"]
    # the adaptive peers never store a schedule: their rows are their base densities (TV 0 to EDM log-normal here)
    rc, out, err = run(capsys, "compare", "--samplers", "edm_lognormal,kingma_gao,loss_slope", "--scheduler", saved["learned"])
    assert rc == 0 and "edm_lognormal vs kingma_gao: 0.000" in out, err
    assert "  note: kingma_gao, loss_slope adapt during a run and store no schedule: here their rows are their base densities" in out


def test_a_sparse_stored_schedules_warning_says_when_it_was_saved(capsys, tmp_path):
    """The warning that pi rests mostly on bins never measured named the loading sampler's own step count, 'step 0',
    whatever the schedule's age: read as 'never trained, empty'. Loaded, it now says when the schedule was saved: at
    step 0 before any training step, with what a profile start measured; else the step and the refreshes of pi."""
    import warnings

    from diffusers import EDMEulerScheduler

    from diffusers_infonoise import make_sampler, start_from_model

    sched = EDMEulerScheduler()
    s = make_sampler("infonoise", sched, num_bins=16, gate=None)
    lo, hi = math.exp(float(s.estimator.edges[4])), math.exp(float(s.estimator.edges[6]))

    def loss_fn(x0, levels):  # the x0 error of N(0, 0.25) data in bins 4 and 5, NaN elsewhere
        sig = levels.sigmas.double()
        m = sig**2 * 0.25 / (sig**2 + 0.25)
        return torch.where((sig > lo) & (sig < hi), m, torch.full_like(m, math.nan))

    batches = [torch.randn(32, 4, generator=torch.Generator().manual_seed(i)) * 0.5 for i in range(4)]
    with pytest.warns(UserWarning) as caught:
        start_from_model(s, loss_fn, batches, samples_per_bin=4, progress=False)
    assert any("noise sampler: step 0, before any training step: pi rests mostly" in str(w.message) for w in caught)

    def show(sampler, scheduler, name):  # save the sampler's schedule into a scheduler folder, then `infonoise show` it
        sampler.save_to_scheduler(scheduler)
        scheduler.save_pretrained(tmp_path / name)
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            return run(capsys, "show", tmp_path / name)

    rc, out, err = show(s, sched, "profile_start")
    assert rc == 0 and "0 optimizer steps" in out, err
    assert (
        "infonoise show: warning: noise sampler: the stored schedule (saved at optimizer step 0, before any training step: "
        "profile: the pretrained model's errors on 64 levels (4 a bin, 2 forward passes per process); data statistics from "
        "the batches; 56 non-finite losses left out, before step 1): pi rests mostly on bins never measured: 2 of 16 bins "
        "hold a measured m_hat" in err
    ), err
    assert "step 0:" not in err
    # a schedule refreshed over 3 optimizer steps from 4 measured bins of 64
    sched = EDMEulerScheduler()
    s = make_sampler("infonoise", sched, warmup_steps=1, refresh_every=1, min_count=1, gate=None)
    sig = torch.exp(s.estimator.centers[[40, 41, 42, 43]]).repeat(4)
    with pytest.warns(UserWarning, match="step 1: pi rests mostly"):
        for _ in range(3):
            s.update(s._levels_at(sig), sig**2 * 0.25 / (sig**2 + 0.25))
            s.step()
    rc, out, err = show(s, sched, "young")
    assert rc == 0 and "3 optimizer steps, 3 schedule updates" in out, err
    assert (
        "warning: noise sampler: the stored schedule (saved at optimizer step 3 after 3 refreshes of pi): pi rests mostly on "
        "bins never measured: 4 of 64 bins" in err
    ), err
    assert "step 0" not in err


def test_grid_writes_its_numbers_to_json(capsys, saved, tmp_path):
    """grid --json FILE, as show/compare/recommend: the InfoGrid's VE sigmas (those the library's infogrid gives and the
    text prints, from sigma_max = 80 down), the scheduler's own spacing (its Karras ramp from 80 to 0.002) and the
    set_timesteps argument."""
    import copy

    from diffusers import EDMEulerScheduler

    from diffusers_infonoise.inference_grid import infogrid, scheduler_grid_kwargs

    rc, out, err = run(capsys, "grid", saved["learned"], "--steps", 3, "--density", "q", "--json", tmp_path / "g.json")
    assert rc == 0, err
    data = json.loads((tmp_path / "g.json").read_text())
    scheduler = EDMEulerScheduler.from_pretrained(saved["learned"])
    want = infogrid(scheduler, 3, density="q").sigmas
    assert data["sigmas"] == want.tolist() and len(data["sigmas"]) == data["num_inference_steps"] == 3
    assert data["sigmas"][0] == pytest.approx(80.0) and data["sigmas"][0] > data["sigmas"][1] > data["sigmas"][2] > 0.002
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [int(r[0]) for r in rows] == [0, 1, 2]
    assert [float(r[1]) for r in rows] == pytest.approx(data["sigmas"], rel=1e-3)  # printed to 4 digits
    default = copy.deepcopy(scheduler)
    default.set_timesteps(3)
    assert data["default_sigmas"] == pytest.approx([80.0, float(default.sigmas[1]), 0.002], rel=1e-6)
    assert data["set_timesteps"] == {k: [float(v) for v in vs] for k, vs in scheduler_grid_kwargs(scheduler, want).items()}
    assert list(data["set_timesteps"]) == ["sigmas"] and data["set_timesteps_means"] == "its Karras ramp positions, as a tensor"
    assert data["source"] == str(saved["learned"] / "scheduler_config.json") and data["scheduler"] == "EDMEulerScheduler"
    assert data["density"] == "q" and data["mu"] is None
    assert f"wrote {tmp_path / 'g.json'}" in out
    # a flow scheduler's default spacing starts at s = 1, VE sigma = s/(1-s) infinite: null, so the file stays JSON
    # (Python wrote Infinity, which strict parsers refuse)
    from diffusers import FlowMatchEulerDiscreteScheduler

    from diffusers_infonoise import make_sampler

    flow = FlowMatchEulerDiscreteScheduler(shift=1.0)
    sampler = make_sampler("infonoise", flow, warmup_steps=1, refresh_every=1, min_count=1)
    sig = torch.exp(sampler.estimator.centers)
    for _ in range(2):
        sampler.update(sampler._levels_at(sig), sig**2 * 0.25 / (sig**2 + 0.25))
        sampler.step()
    sampler.save_to_scheduler(flow)
    flow.save_pretrained(tmp_path / "flow")
    rc, out, err = run(capsys, "grid", tmp_path / "flow", "--steps", 4, "--json", tmp_path / "f.json")
    assert rc == 0, err
    text = (tmp_path / "f.json").read_text()
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert data["default_sigmas"][0] is None and all(v > 0 for v in data["default_sigmas"][1:])


def _save_a_gaussian_schedule(folder, **settings) -> None:
    """An EDM scheduler config in ``folder`` with a schedule adapted (3 refreshes of 4096 draws) on the Bayes error of
    Gaussian data (s_d = 0.5), the sampler built with ``settings``."""
    from diffusers import EDMEulerScheduler

    from diffusers_infonoise import InfoNoiseTrainingTimestepSampler

    sched = EDMEulerScheduler()
    s = InfoNoiseTrainingTimestepSampler.from_scheduler(sched, num_bins=16, warmup_steps=1, refresh_every=1, **settings)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        levels = s.sample(4096, generator=g)
        sig = levels.sigmas.double()
        s.update(levels, 0.25 * sig**2 / (sig**2 + 0.25))
        s.step()
    s.save_to_scheduler(sched)
    sched.save_config(folder)


def test_show_holds_a_tempered_target_to_the_floor(capsys, tmp_path):
    """A schedule with temperature τ ≠ 1: φ follows ρ̂^τ, so `infonoise show` holds TV(φ, ρ̂^τ) to the floor and calls
    TV(φ, ρ̂) large by design. By hand from the payload's ρ̂ (per unit log σ): ρ̂^τ normalised on the bins, and the
    triangle inequality ties the two shown distances to TV(ρ̂^τ, ρ̂)."""
    _save_a_gaussian_schedule(tmp_path, temperature=0.5)
    rc, out, _ = run(capsys, "show", tmp_path)
    assert rc == 0
    floor_check = r"TV\(phi, rho_hat\^0.5\) = ([0-9.]+) \(floor 0.05 .*wants <= floor \+ 0.02\)"
    shown = re.search(floor_check + r"; TV\(phi, rho_hat\) = ([0-9.]+), large by design", out)
    assert shown, out
    to_target, to_rho = float(shown.group(1)), float(shown.group(2))
    payload = json.loads((tmp_path / "scheduler_config.json").read_text())[CONFIG_KEY]
    rho = torch.tensor(payload["rho_hat"], dtype=torch.float64)
    widths = torch.diff(torch.tensor(payload["edges"], dtype=torch.float64))
    rho_mass, tempered = rho * widths / (rho * widths).sum(), rho.sqrt() * widths / (rho.sqrt() * widths).sum()
    apart = 0.5 * float((tempered - rho_mass).abs().sum())
    assert to_target <= 0.07 and apart > 0.1 and abs(to_rho - apart) <= to_target + 2e-3
    assert to_target == pytest.approx(payload["tv_phi_target"], abs=2e-3)  # the sampler's own figure, another code path
    # compare ranks allocations by TV to ρ̂ (the method's target): for this schedule it says that is large by design
    rc, out, _ = run(capsys, "compare", "--scheduler", tmp_path, "--samplers", "infonoise,logit_normal")
    assert rc == 0 and "target is tempered (temperature=0.5): its phi follows rho_hat^0.5" in out
    rc, out, _ = run(capsys, "compare", "--scheduler", tmp_path, "--samplers", "logit_normal")
    assert rc == 0 and "target is tempered" not in out  # no infonoise row, nothing to say


@pytest.mark.parametrize("space", ["importance", "reducible"])
def test_show_names_a_study_target_and_does_not_hold_it_to_the_floor(capsys, tmp_path, space):
    """A schedule of candidate B or C (docs/METHOD.md §4.1): `infonoise show` names the target its draws follow and gives
    TV(φ, ρ̂) without the floor check of the method; the TV by hand from the payload's π, ρ̂ and EDM's weight."""
    _save_a_gaussian_schedule(tmp_path, target_space=space)
    rc, out, _ = run(capsys, "show", tmp_path)
    assert rc == 0 and f"target_space={space} (a study target" in out and "wants <= floor" not in out
    payload = json.loads((tmp_path / "scheduler_config.json").read_text())[CONFIG_KEY]
    edges = torch.tensor(payload["edges"], dtype=torch.float64)
    sig = torch.exp(0.5 * (edges[1:] + edges[:-1]))
    w = (sig**2 + 0.25) / (sig * 0.5) ** 2  # EDM's λ(σ) with σ_d = 0.5 (METHOD.md §4)
    phi = torch.tensor(payload["pi"], dtype=torch.float64) * w
    rho = torch.tensor(payload["rho_hat"], dtype=torch.float64)
    by_hand = 0.5 * float((phi / phi.sum() - rho / rho.sum()).abs().sum())  # equal bins: masses ∝ densities
    shown = float(re.search(r"TV\(phi = pi\*w, rho_hat\) = ([0-9.]+)", out).group(1))
    assert shown == pytest.approx(by_hand, abs=2e-3)


def test_show_says_when_the_draws_follow_rho_hat(capsys, tmp_path):
    """A schedule of the study variant target_space="pi" (issue 31): `infonoise show` reports TV(π, ρ̂), which the floor
    bounds, and says TV(φ, ρ̂) is large by design, instead of holding it to the method's floor check; TV(π, ρ̂) by hand
    from the payload's own π and ρ̂ (both per unit log σ on the same bins)."""
    _save_a_gaussian_schedule(tmp_path, target_space="pi")
    rc, out, _ = run(capsys, "show", tmp_path)
    assert rc == 0 and "target_space=pi" in out and "phi vs rho_hat" not in out
    payload = json.loads((tmp_path / "scheduler_config.json").read_text())[CONFIG_KEY]
    pi, rho = torch.tensor(payload["pi"], dtype=torch.float64), torch.tensor(payload["rho_hat"], dtype=torch.float64)
    widths = torch.diff(torch.tensor(payload["edges"], dtype=torch.float64))
    rho_mass = rho * widths / (rho * widths).sum()
    by_hand = 0.5 * float((pi / pi.sum() - rho_mass).abs().sum())
    shown = float(re.search(r"TV\(pi, rho_hat\) = ([0-9.]+)", out).group(1))
    assert shown == pytest.approx(by_hand, abs=2e-3) and shown <= 0.07
    assert re.search(r"TV\(phi, rho_hat\) = [0-9.]+, large by design", out)
    # compare says which schedule it judges, and its JSON records the setting
    rc, out, _ = run(capsys, "compare", "--scheduler", tmp_path, "--samplers", "infonoise,edm_lognormal", "--json", tmp_path / "c.json")
    assert rc == 0 and "study variant target_space=pi" in out
    assert json.loads((tmp_path / "c.json").read_text())["infonoise"] == {"shows": "stored schedule", "target_space": "pi"}


def test_json_outputs_are_strict_json_and_n_eff_never_prints_a_flat_zero(tmp_path):
    """--json wrote Infinity where a fit's loss variance was unbounded (strict readers refuse it); n_eff 0.0042 printed
    as 0.00x."""
    from diffusers_infonoise.cli import commands

    commands._write_json(tmp_path / "x.json", {"rv": math.inf, "rows": [{"tv": math.nan, "n": 1.5}], "name": "a"})
    assert json.loads((tmp_path / "x.json").read_text()) == {"rv": None, "rows": [{"tv": None, "n": 1.5}], "name": "a"}
    assert "Infinity" not in (tmp_path / "x.json").read_text()
    assert [commands._n_eff(v) for v in (0.894, 0.1, 0.0042, 0.0)] == ["0.89", "0.10", "0.0042", "0"]


def test_show_does_not_judge_the_base_density_of_a_schedule_saved_in_its_warm_up(capsys, tmp_path):
    """Saved after 2 of 5 warm-up steps with losses measured: rho_hat is there, pi is the base density; TV(phi, rho_hat)
    0.95 against "floor + 0.02" read as a failure of a run that had not adapted by design."""
    from diffusers import EDMEulerScheduler

    from diffusers_infonoise import make_sampler

    sched = EDMEulerScheduler()
    s = make_sampler("infonoise", sched, loss_weighting="edm", warmup_steps=5, refresh_every=1, num_bins=16)
    g = torch.Generator().manual_seed(0)
    for _ in range(2):
        lv = s.sample(512, generator=g)
        s.update(lv, (lv.sigmas**2 * 0.25 / (lv.sigmas**2 + 0.25)).float())  # Gaussian data's MMSE, s_d = 0.5
        s.step()
    with pytest.warns(UserWarning, match="has not adapted"):
        s.save_to_scheduler(sched)
    sched.save_pretrained(tmp_path / "warm")
    rc, out, err = run(capsys, "show", tmp_path / "warm")
    assert rc == 0, err
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("phi vs rho_hat")]
    assert "not judged: pi is still the base density" in line and "wants <=" not in line
