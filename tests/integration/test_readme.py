"""The README's quickstart runs as written (tiny stand-ins for the objects it takes from the user's script)
and its π is the promised one: adapted, capped at the data's variance, φ within the floor of ρ̂. Its results table
links every row to files that exist and to sections of docs/results.md that exist, and docs/results.md and
benchmarks/README.md name every results file under benchmarks/results/ (the latter every tier too)."""

from __future__ import annotations

import json
import re

import torch

from benchmarks.tiny_pipelines import tiny_unet2d

from helpers import ROOT


def _quickstart() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Quickstart") :]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def test_readme_quickstart_runs_as_written(tmp_path, monkeypatch):
    from diffusers import DDPMPipeline, DDPMScheduler

    names = re.search(r"\(`unet`, (.*?) as in diffusers'", (ROOT / "README.md").read_text(), flags=re.S).group(1)
    assert "pipeline" not in names  # the snippet builds the pipeline it saves

    monkeypatch.chdir(tmp_path)
    gen = torch.Generator().manual_seed(0)
    # binarized 8x8 "images" in {-1, 1}: per-pixel variance 1 by construction
    dataloader = [torch.sign(torch.randn(8, 1, 8, 8, generator=gen)) for _ in range(120)]
    unet = tiny_unet2d(8)
    from accelerate import Accelerator

    ns = {
        "unet": unet,
        "optimizer": torch.optim.Adam(unet.parameters(), lr=1e-3),
        "dataloader": dataloader,
        "max_train_steps": len(dataloader),
        "accelerator": Accelerator(cpu=True),
    }

    # only the stand-ins the text names; a pipeline the user built elsewhere holds a scheduler of its own, without the
    # schedule: the snippet must save the one it stored the schedule in
    ns["pipeline"] = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=1000))
    exec(compile(_quickstart(), "README.md quickstart", "exec"), ns)
    payload = json.loads((tmp_path / "out" / "scheduler" / "scheduler_config.json").read_text())["_infonoise_schedule"]
    assert payload["adapted"] and payload["optimizer_steps"] == 120
    assert ns["sampler"].warmup_steps == 50  # a tenth of 120 steps, at least one refresh
    assert payload["warmup_steps_resolved"] == 50 and payload["hyperparameters"]["warmup_steps"] == "auto"
    assert abs(payload["data"]["variance"] - 1.0) < 0.05 and payload["hyperparameters"]["mmse_cap"] == payload["data"]["variance"]
    assert payload["tv_phi_rho"] <= 0.05 + 0.02
    assert payload["gate"]["source"] == "data" and abs(payload["gate"]["pivot"] - 0.2) < 1e-9  # {-1, 1}: gap 2
    assert ns["sampler"] in ns["accelerator"]._custom_objects and ns["sampler"].num_draws == 120


def _block(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(heading) :]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def _feed_gaussian(sampler, steps=4, batch=4096, s_d=0.5):
    """Exact Bayes x0-MMSE of N(0, s_d²) data, converted to the sampler's parameterization."""
    from diffusers_infonoise import x0_error_factor

    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        lv = sampler.sample(batch, generator=gen)
        sig = lv.sigmas.double()
        mmse = sig**2 * s_d**2 / (sig**2 + s_d**2)
        sampler.update(lv, mmse / x0_error_factor(sampler.prediction_type, sig))
        sampler.step()
    return sampler


def test_readme_loading_and_infogrid_block_runs_as_written(tmp_path, monkeypatch):
    """The folders it names are tiny stand-ins with a learned schedule: an EDM UNet saved by the training
    layer, and an SD3 pipeline whose scheduler carries one; the block runs, and its grids are the InfoGrid."""
    from diffusers import EDMEulerScheduler, FlowMatchEulerDiscreteScheduler

    from benchmarks.tiny_pipelines import save_tiny_sd3_pipeline
    from diffusers_infonoise import InfoNoiseTrainingTimestepSampler
    from diffusers_infonoise.inference_grid import infogrid, scheduler_sigmas_as_ve
    from diffusers_infonoise.training.outputs import save_unconditional_pipeline

    monkeypatch.chdir(tmp_path)
    unet = tiny_unet2d(16)
    edm = EDMEulerScheduler()
    sampler = _feed_gaussian(InfoNoiseTrainingTimestepSampler.from_scheduler(edm, warmup_steps=2, refresh_every=1))
    save_unconditional_pipeline(unet, None, edm, sampler, "mnist-edm-infonoise")
    save_tiny_sd3_pipeline(str(tmp_path / "sd3-finetuned-infonoise"))
    flow = FlowMatchEulerDiscreteScheduler.from_pretrained(tmp_path / "sd3-finetuned-infonoise", subfolder="scheduler")
    flow_sampler = _feed_gaussian(InfoNoiseTrainingTimestepSampler.from_scheduler(flow, warmup_steps=2, refresh_every=1))
    flow_sampler.save_to_scheduler(flow)
    flow.save_pretrained(tmp_path / "sd3-finetuned-infonoise" / "scheduler")

    ns: dict = {}
    exec(compile(_block("## Loading a trained pipeline"), "README.md loading", "exec"), ns)
    assert len(ns["images"]) == 16 and ns["images"].shape == (16, 1, 16, 16)
    assert ns["image"].size[0] > 0
    # the SD3 pipeline stepped through the InfoGrid of its stored schedule
    torch.testing.assert_close(scheduler_sigmas_as_ve(ns["sd3"].scheduler), infogrid(flow, 8).sigmas, rtol=1e-4, atol=0)


def test_readme_fine_tuning_block_runs_as_written(tmp_path, monkeypatch):
    """The folders it names are stand-ins: a tiny DDPM pipeline without a stored schedule (so "auto" is the
    model's profile), and a pipeline whose scheduler carries one (the shared schedule)."""
    from diffusers import DDPMPipeline, DDPMScheduler

    from diffusers_infonoise import InfoNoiseTrainingTimestepSampler

    monkeypatch.chdir(tmp_path)
    unet = tiny_unet2d(8)
    DDPMPipeline(unet=unet, scheduler=DDPMScheduler()).save_pretrained("my-pretrained-ddpm")
    shared_scheduler = DDPMScheduler()
    _feed_gaussian(InfoNoiseTrainingTimestepSampler.from_scheduler(shared_scheduler, warmup_steps=1, refresh_every=1)).save_to_scheduler(
        shared_scheduler
    )
    DDPMPipeline(unet=unet, scheduler=shared_scheduler).save_pretrained("someone/their-infonoise-model")
    gen = torch.Generator().manual_seed(0)
    ns = {"dataloader": [torch.sign(torch.randn(16, 1, 8, 8, generator=gen)) for _ in range(10)], "max_train_steps": 2000}
    exec(compile(_block("## Fine-tuning: start adapted"), "README.md fine-tuning", "exec"), ns)
    sampler, start = ns["sampler"], ns["start"]
    assert start.choice == "profile" and sampler.warmup_steps == 0
    # the profile's cap is this data's variance ({-1, 1} pixels: 1), its gate the value grid's (0.2)
    assert abs(sampler.estimator.mmse_cap - 1.0) < 0.05 and sampler.estimator.last_gate.pivot == 0.2
    # then the shared schedule was loaded: its m̂ (the same 64 bins and path), and a π rebuilt for this run
    stored = torch.tensor([float("nan") if v is None else v for v in ns["shared"]["m_hat"]], dtype=torch.float64)
    torch.testing.assert_close(sampler.estimator.m_hat, stored, rtol=0, atol=0, equal_nan=True)
    assert sampler.is_adapted and sampler._allocation_total_variation() <= sampler.settings.floor + 0.02


def _github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation other than ``-`` and ``_`` dropped, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_results_row_links_to_its_files_and_its_section_of_docs_results():
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Results") : readme.index("## Layout")]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| result")]
    results = (ROOT / "docs" / "results.md").read_text()
    anchors = {_github_anchor(h) for h in re.findall(r"^#+ (.+)$", results, flags=re.M)}
    assert len(rows) >= 15, rows
    for row in rows:
        links = re.findall(r"\]\(([^)#]*)(?:#([^)]*))?\)", row)
        files = [path for path, _ in links if path != "docs/results.md"]
        sections = [anchor for path, anchor in links if path == "docs/results.md"]
        assert files and all((ROOT / path).exists() for path in files), row
        assert sections and set(sections) <= anchors, (row, sorted(anchors))


def test_docs_results_links_resolve_and_name_every_results_file():
    text = (ROOT / "docs" / "results.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        assert (ROOT / "docs" / target).resolve().exists(), target
    # each results file (its figures and per-race run files beside it) is named where its command is given
    for path in sorted((ROOT / "benchmarks" / "results").iterdir()):
        if path.is_file():
            stem = re.sub(r"(_curves|_pi|_runs_.*)?\.(json|md|png)$", "", path.name)
            assert f"`{stem}." in text or f"`{stem}_" in text or f"{stem}.json" in text, path.name


def _expand_braces(text: str) -> str:
    """``a_{x,y}.json`` -> ``a_x a_y.json``: the README's shorthand for several files, spelled out."""
    pattern = re.compile(r"([\w.]*)\{([^{}]*,[^{}]*)\}")
    while (m := pattern.search(text)) is not None:
        text = text[: m.start()] + " ".join(m.group(1) + alt for alt in m.group(2).split(",")) + text[m.end() :]
    return text


def test_benchmarks_readme_names_every_results_file_and_every_tier():
    from benchmarks.race.tiers import TIERS

    text = _expand_braces((ROOT / "benchmarks" / "README.md").read_text())
    for path in sorted((ROOT / "benchmarks" / "results").iterdir()):
        if path.is_file():
            stem = re.sub(r"(_curves|_pi|_regret|_runs_.*)?\.(json|md|png)$", "", path.name)
            assert re.search(rf"\b{re.escape(stem)}\b(?!_)", text), path.name
    for tier in TIERS:
        assert f"--tier {tier}" in text or f"- `{tier}`" in text, tier


def test_readme_infonoise_examples_read_folders_a_readme_command_writes():
    text = " ".join((ROOT / "README.md").read_text().split())  # code spans wrap across lines
    read = set(re.findall(r"infonoise (?:show|recommend|grid|compare) (/tmp/[\w./-]+)", text))
    assert read, "no infonoise example on a /tmp folder"
    written = set(re.findall(r"--output(?:_dir)? (/tmp/[\w./-]+)", text))
    for path in read:
        assert any(path == d or path.startswith(d + "/") for d in written), path


def _same_line(shown: str, printed: str) -> bool:
    """The README's line of output against a printed one: the same words, the numbers to their last shown digit
    (relative 2e-3, or 2e-3 absolute): the data set's profile is Monte Carlo, its last digit may move with the BLAS."""
    num = r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?"
    if re.sub(num, "#", shown).split() != re.sub(num, "#", printed).split():
        return False
    a, b = [float(v) for v in re.findall(num, shown)], [float(v) for v in re.findall(num, printed)]
    return len(a) == len(b) and all(abs(x - y) <= max(2e-3, 2e-3 * abs(y)) for x, y in zip(a, b))


def test_readme_recommend_example_is_what_the_commands_print(tmp_path, capsys):
    """The recommend section's commands run as written (their /tmp folder moved under tmp_path), and every line of
    output it shows is printed: a fit, its n_eff, a row no better than the default left out in a line of its own, a
    warning in the line of the row it concerns."""
    import shlex

    from diffusers_infonoise.cli import main

    text = (ROOT / "README.md").read_text()
    block = re.search(r"```text\n(.*?)```", text[text.index("## Use it with another trainer") :], flags=re.S).group(1)
    shown: list[tuple[list[str], list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ infonoise "):
            shown.append((shlex.split(line[len("$ infonoise ") :].replace("/tmp/", f"{tmp_path}/")), []))
        elif line.strip():
            shown[-1][1].append(line)
    assert shown and any(lines for _, lines in shown)
    for argv, lines in shown:
        rc = main(argv + (["--no-progress"] if argv[0] == "dataset-profile" else []))
        printed = capsys.readouterr().out.splitlines()
        assert rc == 0
        for line in lines:
            assert any(_same_line(line, p) for p in printed), (line, printed)
    said = " ".join(lines for _, ls in shown for lines in ls)
    assert "n_eff" in said and "the default already fits as well (TV " in said and "| warning: " in said


def test_readme_names_every_script_option_of_the_newest_changelog_section():
    """A user of the new version reads about the options it adds or changes in the README, not only in --help."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    newest = re.split(r"^## ", changelog, flags=re.M)[1]
    options = set(re.findall(r"--infonoise_\w+", newest))
    readme = (ROOT / "README.md").read_text()
    assert options and not {o for o in options if not re.search(rf"{o}\b", readme)}, sorted(options)


def test_the_readme_stays_a_readme():
    # a user reads it top to bottom: at most 300 lines, and no table cell a screen wide (details go to docs/results.md)
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, len(lines)
    cells = [(n, len(c)) for n, line in enumerate(lines, 1) if line.startswith("|") for c in line.split("|")]
    assert cells and max(width for _, width in cells) <= 400, [c for c in cells if c[1] > 400]
